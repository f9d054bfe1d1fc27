//! Process address spaces, fed by the record stream: the one model of "which file is
//! mapped where in which process" shared by the symbolizer, the unwinder (while recording
//! and in `import`) and the agent's aggregator.
//!
//! [`AddressSpaces`] follows MMAP/MMAP2, COMM (exec), FORK and EXIT records
//! ([`AddressSpaces::apply`]) and keeps, per process, its mappings sorted by address. It
//! lives in `tailprof-format` because every stage that needs it already depends on the
//! record model here, and nothing here depends back up the pipeline. Consumers attach
//! their own per-mapping data (`T`: a symbolizer's binary id, the agent's resolved
//! build-id) and cache derived state by [`AddressSpaces::generation`], which changes
//! whenever a process's mappings change. Code no file maps (JIT code named by perf maps
//! and jitdumps) has its ranges, per process and time, in [`jit::JitTables`].
//!
//! # Rules (one set for every consumer)
//! - **Which mappings count**: a mapping of `len > 0` that may hold code. A mapping whose
//!   protection is known (MMAP2) and lacks `PROT_EXEC` holds no code: it is not kept, but
//!   like mmap(2) it replaces what it overlaps. The kernel image's own mapping
//!   (`[kernel.kallsyms]`) is not kept either (kernel addresses resolve by address); its
//!   `pgoff` is `_text` at record time ([`AddressSpaces::kernel_text`]). Kernel mappings
//!   (`pid == KERNEL_PID`, or kernel cpumode: modules) go to the shared kernel space.
//! - **Threads share** their process's space: an MMAP goes to `pid`, never `tid`.
//! - **Overlaps**: a new mapping cuts away the parts of older ones it overlaps (the parts
//!   before and after it stay, with their file offset adjusted), like mmap(2).
//! - **COMM with exec** empties the process's space (the new image's mappings follow).
//! - **FORK** of a new process (`pid != ppid`) gives it the parent's mappings (shared
//!   until one of them changes, so a fork copies nothing); a new thread changes nothing.
//! - **EXIT** of a process's main thread (`pid == tid`) marks it exited but keeps its
//!   mappings, so late samples of its other threads (`exit_group`, or a main thread that
//!   left first) still resolve. An exited process is forgotten once
//!   [`SpaceLimits::max_exited`] later processes exited, when its pid is reused by FORK, or
//!   first when the process bound is reached. A MMAP or COMM of an exited process (its
//!   other threads live on) revives it.
//! - **Bounds** (every process is untrusted, docs/SECURITY.md): at most
//!   [`SpaceLimits::max_processes`] processes (beyond: exited ones first, then the least
//!   recently used eighth), [`SpaceLimits::max_mappings`] per process (beyond: the oldest
//!   sixteenth) and [`SpaceLimits::max_bytes`] of mapping lists in all (a list shared by
//!   forked processes counted once; beyond: the lists of the least recently used processes
//!   until 7/8 of the bound is held). Everything dropped is counted ([`SpaceCounters`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::{Comm, CpuMode, Mmap, Record, Task};

/// The pid under which perf (and we) file kernel mappings (perf writes -1).
pub const KERNEL_PID: u32 = u32::MAX;

/// `PROT_EXEC` (the same value on every Linux architecture).
const PROT_EXEC: u32 = 4;

/// One mapping of an address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping<T = ()> {
    pub start: u64,
    /// Exclusive.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    pub path: Arc<str>,
    /// GNU build-id from the record, when known.
    pub build_id: Option<Arc<[u8]>>,
    /// `(st_dev, st_ino)` of the mapped file when the recorder knows it.
    pub file: Option<(u64, u64)>,
    /// `PROT_*` bits when known (MMAP2), else 0.
    pub prot: u32,
    /// Order of arrival (older mappings go first at the per-process bound).
    pub seq: u64,
    /// The consumer's own data (copied into the parts that remain of a split mapping).
    pub data: T,
}

impl<T> Mapping<T> {
    #[inline]
    pub fn contains(&self, ip: u64) -> bool {
        self.start <= ip && ip < self.end
    }

    /// The file offset of address `ip` (`ip - start + pgoff`).
    #[inline]
    pub fn file_offset(&self, ip: u64) -> u64 {
        ip.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }

    /// Whether the mapping names a file on disk (an absolute path), not `[vdso]`,
    /// `//anon`, `[heap]` and the like.
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }

    fn cost(&self) -> usize {
        std::mem::size_of::<Self>() + self.path.len()
    }
}

/// Whether a mapping of this protection may hold code (unknown protection: yes).
#[inline]
pub fn may_hold_code(prot: u32) -> bool {
    prot == 0 || prot & PROT_EXEC != 0
}

/// Whether `path` (of a kernel mapping) names the kernel image itself.
pub fn is_kernel_image(path: &str) -> bool {
    path.is_empty() || path.starts_with("[kernel")
}

/// Bounds of an [`AddressSpaces`] (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceLimits {
    pub max_processes: usize,
    pub max_mappings: usize,
    pub max_bytes: usize,
    pub max_exited: usize,
}

impl Default for SpaceLimits {
    fn default() -> Self {
        SpaceLimits { max_processes: 65_536, max_mappings: 65_536, max_bytes: 1 << 30, max_exited: 1024 }
    }
}

/// What an [`AddressSpaces`] dropped or forgot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceCounters {
    /// Processes seen (an address space created).
    pub processes_seen: u64,
    /// Processes forgotten after their EXIT ([`SpaceLimits::max_exited`] later exits).
    pub processes_exited: u64,
    /// Processes evicted at [`SpaceLimits::max_processes`] (exited ones not counted).
    pub processes_evicted: u64,
    /// Mappings evicted at [`SpaceLimits::max_mappings`] or [`SpaceLimits::max_bytes`].
    pub mappings_evicted: u64,
    /// Mappings not kept because they cannot hold code (known protection without exec).
    pub mappings_not_code: u64,
}

#[derive(Debug, Clone)]
struct Space<T> {
    gen: u32,
    /// Sorted by `start`, non-overlapping; shared with forked processes until changed.
    maps: Arc<Vec<Mapping<T>>>,
    last_use: u64,
    /// `Some(n)`: exited, the n-th exit seen.
    exited: Option<u64>,
}

impl<T> Space<T> {
    fn new(gen: u32) -> Self {
        Space { gen, maps: Arc::new(Vec::new()), last_use: 0, exited: None }
    }

    fn find(&self, ip: u64) -> Option<usize> {
        let i = self.maps.partition_point(|m| m.end <= ip);
        self.maps.get(i).filter(|m| m.start <= ip).map(|_| i)
    }
}

fn list_cost<T>(maps: &[Mapping<T>]) -> usize {
    maps.iter().map(Mapping::cost).sum()
}

/// Per-process mappings, current as of the last record applied. See the module docs.
#[derive(Debug)]
pub struct AddressSpaces<T = ()> {
    spaces: HashMap<u32, Space<T>>,
    kernel: Space<T>,
    limits: SpaceLimits,
    counters: SpaceCounters,
    /// pid and exit number of exited processes, oldest first.
    exited: VecDeque<(u32, u64)>,
    exits: u64,
    next_gen: u32,
    tick: u64,
    bytes: usize,
    kernel_text: Option<u64>,
}

impl<T: Clone + Default> Default for AddressSpaces<T> {
    fn default() -> Self {
        Self::new(SpaceLimits::default())
    }
}

impl<T: Clone + Default> AddressSpaces<T> {
    pub fn new(limits: SpaceLimits) -> Self {
        AddressSpaces {
            spaces: HashMap::new(),
            kernel: Space::new(1),
            limits,
            counters: SpaceCounters::default(),
            exited: VecDeque::new(),
            exits: 0,
            next_gen: 2,
            tick: 0,
            bytes: 0,
            kernel_text: None,
        }
    }

    fn bump(&mut self) -> u32 {
        // 0 means "no address space", u32::MAX is free for callers' "never resolved".
        let g = self.next_gen;
        self.next_gen = if g >= u32::MAX - 1 { 2 } else { g + 1 };
        g
    }

    /// Apply one record: MMAP/MMAP2 (without a known file identity), COMM, FORK, EXIT.
    /// Returns whether some address space changed. Other records change nothing.
    pub fn apply(&mut self, r: &Record) -> bool {
        match r {
            Record::Mmap(m) => self.mmap(m, None).is_some(),
            Record::Comm(c) => self.comm(c),
            Record::Fork(t) => self.fork(t),
            Record::Exit(t) => {
                self.exit(t);
                false
            }
            _ => false,
        }
    }

    /// A MMAP/MMAP2 record, with the mapped file's `(st_dev, st_ino)` when the caller knows
    /// it. Returns the kept mapping (for the caller's data), `None` when it does not count.
    pub fn mmap(&mut self, m: &Mmap, file: Option<(u64, u64)>) -> Option<&mut Mapping<T>> {
        if m.len == 0 {
            return None;
        }
        let kernel = m.pid == KERNEL_PID || m.cpumode.is_kernel();
        if kernel && is_kernel_image(&m.path) {
            // Its pgoff is the address of `_text` at record time (perf's and our
            // recorder's convention).
            if m.path.starts_with("[kernel.kallsyms]") && m.pgoff != 0 {
                self.kernel_text = Some(m.pgoff);
            }
            return None;
        }
        let code = may_hold_code(m.prot);
        if !code {
            self.counters.mappings_not_code += 1;
        }
        self.tick += 1;
        let mapping = Mapping {
            start: m.start,
            end: m.start.saturating_add(m.len),
            pgoff: m.pgoff,
            path: Arc::from(m.path.as_str()),
            build_id: m.build_id.as_deref().filter(|b| !b.is_empty()).map(Arc::from),
            file: file.filter(|&f| f != (0, 0)),
            prot: m.prot,
            seq: self.tick,
            data: T::default(),
        };
        let gen = self.bump();
        let pid = if kernel { KERNEL_PID } else { m.pid };
        if !kernel {
            self.ensure(pid);
        }
        let max_maps = self.limits.max_mappings.max(1);
        let mut bytes = self.bytes;
        let mut evicted = 0;
        let space = if kernel { &mut self.kernel } else { self.spaces.get_mut(&pid).expect("ensured") };
        space.gen = gen;
        space.exited = None;
        let maps = make_mut(&mut bytes, &mut space.maps);
        // The cost changes by what is cut, evicted and added (no walk of the whole list).
        let (removed, kept) = cut(maps, mapping.start, mapping.end);
        bytes = bytes.saturating_sub(removed) + kept;
        let at = if code {
            if maps.len() >= max_maps {
                // The oldest sixteenth (amortized O(1) a record).
                let mut seqs: Vec<u64> = maps.iter().map(|x| x.seq).collect();
                let k = maps.len() / 16;
                let (_, &mut limit, _) = seqs.select_nth_unstable(k);
                let before = maps.len();
                maps.retain(|x| {
                    let keep = x.seq > limit;
                    if !keep {
                        bytes = bytes.saturating_sub(x.cost());
                    }
                    keep
                });
                evicted = (before - maps.len()) as u64;
            }
            bytes += mapping.cost();
            let i = maps.partition_point(|x| x.start < mapping.start);
            maps.insert(i, mapping);
            Some(())
        } else {
            None
        };
        self.bytes = bytes;
        self.counters.mappings_evicted += evicted;
        if !kernel {
            self.evict_bytes(pid);
        }
        at?;
        let space = if kernel { &mut self.kernel } else { self.spaces.get_mut(&pid)? };
        let i = space.find(m.start)?;
        Arc::make_mut(&mut space.maps).get_mut(i)
    }

    /// A COMM record: with `exec`, the process's space starts empty. Returns whether
    /// a space changed.
    pub fn comm(&mut self, c: &Comm) -> bool {
        if !c.exec || c.pid == KERNEL_PID {
            return false;
        }
        self.exec(c.pid);
        true
    }

    /// `pid` exec'd: a new, empty address space (its mappings follow as MMAP records).
    pub fn exec(&mut self, pid: u32) {
        self.ensure(pid);
        let gen = self.bump();
        let s = self.spaces.get_mut(&pid).expect("ensured");
        let old = std::mem::replace(&mut s.maps, Arc::new(Vec::new()));
        s.gen = gen;
        s.exited = None;
        release(&mut self.bytes, old);
    }

    /// A FORK record: a new process gets its parent's mappings. Returns whether a space
    /// changed (a new thread changes none).
    pub fn fork(&mut self, t: &Task) -> bool {
        if t.pid == t.ppid || t.pid == KERNEL_PID {
            return false;
        }
        self.fork_process(t.ppid, t.pid);
        true
    }

    /// `child` forked from `parent`: the same mappings (shared until one changes them).
    pub fn fork_process(&mut self, parent: u32, child: u32) {
        if parent == child {
            return;
        }
        let maps = self.spaces.get(&parent).map(|s| s.maps.clone()).unwrap_or_default();
        if let Some(old) = self.spaces.remove(&child) {
            release(&mut self.bytes, old.maps);
        }
        self.ensure(child);
        let gen = self.bump();
        let s = self.spaces.get_mut(&child).expect("ensured");
        s.maps = maps;
        s.gen = gen;
    }

    /// An EXIT record: the exit of a process's main thread marks it exited (module docs).
    pub fn exit(&mut self, t: &Task) {
        if t.pid != t.tid || t.pid == KERNEL_PID {
            return;
        }
        let Some(s) = self.spaces.get_mut(&t.pid) else {
            return;
        };
        self.exits += 1;
        s.exited = Some(self.exits);
        self.exited.push_back((t.pid, self.exits));
        while self.exited.len() > self.limits.max_exited {
            let Some((pid, n)) = self.exited.pop_front() else {
                break;
            };
            if self.spaces.get(&pid).is_some_and(|s| s.exited == Some(n)) {
                self.forget(pid);
                self.counters.processes_exited += 1;
            }
        }
    }

    /// Forget `pid` now.
    pub fn forget(&mut self, pid: u32) {
        if let Some(s) = self.spaces.remove(&pid) {
            release(&mut self.bytes, s.maps);
        }
    }

    /// Forget the mapping of `pid` covering `ip` (a consumer found it is no longer
    /// mapped). Returns whether there was one.
    pub fn forget_mapping(&mut self, pid: u32, ip: u64) -> bool {
        let gen = self.bump();
        let Some(s) = self.spaces.get_mut(&pid) else {
            return false;
        };
        let Some(i) = s.find(ip) else { return false };
        let maps = make_mut(&mut self.bytes, &mut s.maps);
        let m = maps.remove(i);
        self.bytes = self.bytes.saturating_sub(m.cost());
        s.gen = gen;
        true
    }

    /// The space of `pid`, created (and the process bound kept) if new.
    fn ensure(&mut self, pid: u32) {
        self.tick += 1;
        let t = self.tick;
        if !self.spaces.contains_key(&pid) {
            if self.spaces.len() >= self.limits.max_processes.max(1) {
                self.evict_processes();
            }
            self.counters.processes_seen += 1;
            self.spaces.insert(pid, Space::new(0));
        }
        if let Some(s) = self.spaces.get_mut(&pid) {
            s.last_use = t;
        }
    }

    /// At the process bound: exited processes go first, then the least recently used
    /// eighth.
    fn evict_processes(&mut self) {
        while let Some((pid, n)) = self.exited.pop_front() {
            if self.spaces.get(&pid).is_some_and(|s| s.exited == Some(n)) {
                self.forget(pid);
                self.counters.processes_exited += 1;
            }
        }
        if self.spaces.len() < self.limits.max_processes.max(1) {
            return;
        }
        let mut lasts: Vec<u64> = self.spaces.values().map(|s| s.last_use).collect();
        let k = lasts.len() / 8;
        let (_, &mut limit, _) = lasts.select_nth_unstable(k);
        let old: Vec<u32> = self.spaces.iter().filter(|(_, s)| s.last_use <= limit).map(|(&p, _)| p).collect();
        for pid in old {
            if let Some(s) = self.spaces.get(&pid) {
                self.counters.mappings_evicted += s.maps.len() as u64;
            }
            self.forget(pid);
            self.counters.processes_evicted += 1;
        }
    }

    /// Over [`SpaceLimits::max_bytes`]: the mappings of the least recently used processes
    /// go until 7/8 of the bound is held; `keep`'s (which just got a mapping) last, oldest
    /// first, its newest mapping never.
    fn evict_bytes(&mut self, keep: u32) {
        if self.bytes <= self.limits.max_bytes {
            return;
        }
        let mut order: Vec<(u64, u32)> =
            self.spaces.iter().filter(|(&p, s)| p != keep && !s.maps.is_empty()).map(|(&p, s)| (s.last_use, p)).collect();
        order.sort_unstable();
        for (_, pid) in order {
            if self.bytes <= self.limits.max_bytes / 8 * 7 {
                break;
            }
            let gen = self.bump();
            if let Some(s) = self.spaces.get_mut(&pid) {
                self.counters.mappings_evicted += s.maps.len() as u64;
                let old = std::mem::replace(&mut s.maps, Arc::new(Vec::new()));
                s.gen = gen;
                release(&mut self.bytes, old);
            }
        }
        let target = self.limits.max_bytes / 8 * 7;
        if self.bytes <= target {
            return;
        }
        let gen = self.bump();
        let Some(s) = self.spaces.get_mut(&keep) else {
            return;
        };
        let maps = make_mut(&mut self.bytes, &mut s.maps);
        let mut seqs: Vec<(u64, usize)> = maps.iter().map(|m| (m.seq, m.cost())).collect();
        seqs.sort_unstable();
        seqs.pop(); // the newest stays
        let mut limit = 0;
        let mut freed = 0;
        for (seq, cost) in seqs {
            if self.bytes.saturating_sub(freed) <= target {
                break;
            }
            freed += cost;
            limit = seq;
        }
        let before = maps.len();
        maps.retain(|m| m.seq > limit);
        self.counters.mappings_evicted += (before - maps.len()) as u64;
        self.bytes = self.bytes.saturating_sub(freed);
        s.gen = gen;
    }

    /// Mark `pid` as used now (least-recently-used eviction at the process bound).
    #[inline]
    pub fn touch(&mut self, pid: u32) {
        self.tick += 1;
        if let Some(s) = self.spaces.get_mut(&pid) {
            s.last_use = self.tick;
        }
    }

    /// Changes whenever the mappings of `pid` change (0: no address space).
    /// [`KERNEL_PID`] gives the kernel space's generation.
    #[inline]
    pub fn generation(&self, pid: u32) -> u32 {
        if pid == KERNEL_PID {
            return self.kernel.gen;
        }
        self.spaces.get(&pid).map_or(0, |s| s.gen)
    }

    /// Whether `pid` has an address space with at least one mapping.
    pub fn knows(&self, pid: u32) -> bool {
        self.spaces.get(&pid).is_some_and(|s| !s.maps.is_empty())
    }

    /// Whether `pid`'s main thread exited (and the process is not forgotten yet).
    pub fn exited(&self, pid: u32) -> bool {
        self.spaces.get(&pid).is_some_and(|s| s.exited.is_some())
    }

    /// The mapping of `pid` covering `ip` right now.
    #[inline]
    pub fn find(&self, pid: u32, ip: u64) -> Option<&Mapping<T>> {
        let s = if pid == KERNEL_PID { &self.kernel } else { self.spaces.get(&pid)? };
        s.find(ip).map(|i| &s.maps[i])
    }

    /// The mapping of `pid` covering `ip`, to change its data (a list shared with a
    /// forked process is copied first; the generation stays).
    pub fn find_mut(&mut self, pid: u32, ip: u64) -> Option<&mut Mapping<T>> {
        if pid != KERNEL_PID {
            let s = self.spaces.get_mut(&pid)?;
            s.find(ip)?;
            if Arc::strong_count(&s.maps) > 1 {
                // The copy counts: the byte bound holds (the copy may lose old mappings).
                make_mut(&mut self.bytes, &mut s.maps);
                self.evict_bytes(pid);
            }
        }
        let s = if pid == KERNEL_PID { &mut self.kernel } else { self.spaces.get_mut(&pid)? };
        let i = s.find(ip)?;
        make_mut(&mut self.bytes, &mut s.maps).get_mut(i)
    }

    /// Mappings of `pid`, sorted by address.
    pub fn mappings(&self, pid: u32) -> &[Mapping<T>] {
        if pid == KERNEL_PID {
            return &self.kernel.maps;
        }
        self.spaces.get(&pid).map_or(&[], |s| &s.maps)
    }

    /// Address of the kernel's `_text` when the trace was taken, from its
    /// `[kernel.kallsyms]` mapping.
    pub fn kernel_text(&self) -> Option<u64> {
        self.kernel_text
    }

    /// Processes with an address space (exited ones not yet forgotten included).
    pub fn process_count(&self) -> usize {
        self.spaces.len()
    }

    /// Mappings held, a list shared by forked processes counted once per process.
    pub fn mapping_count(&self) -> usize {
        self.spaces.values().map(|s| s.maps.len()).sum()
    }

    /// Bytes of mapping lists held (a shared list counted once).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn counters(&self) -> SpaceCounters {
        self.counters
    }

    pub fn limits(&self) -> SpaceLimits {
        self.limits
    }

    /// Whether a sample with this mode and IP counts as kernel code.
    #[inline]
    pub fn is_kernel_sample(cpumode: CpuMode, ip: u64) -> bool {
        cpumode == CpuMode::Kernel || (cpumode == CpuMode::Unknown && ip >= KERNEL_HALF)
    }
}

/// Lowest address of the kernel half on 64-bit Linux (x86-64 with 4-level paging and
/// arm64 both place the kernel at or above this).
pub const KERNEL_HALF: u64 = 0xffff_0000_0000_0000;

/// The list itself, for changing it: a list shared with a forked process is copied first
/// and the copy's cost counted.
fn make_mut<'a, T: Clone>(bytes: &mut usize, maps: &'a mut Arc<Vec<Mapping<T>>>) -> &'a mut Vec<Mapping<T>> {
    if Arc::strong_count(maps) > 1 {
        *bytes += list_cost(maps);
    }
    Arc::make_mut(maps)
}

/// Lets go of a list: its cost is released when no other process shares it.
fn release<T>(bytes: &mut usize, maps: Arc<Vec<Mapping<T>>>) {
    if Arc::strong_count(&maps) == 1 {
        *bytes = bytes.saturating_sub(list_cost(&maps));
    }
}

/// Remove `[start, end)` from `maps` (sorted, non-overlapping), keeping the parts of
/// overlapped mappings before and after it. Returns the cost of the mappings taken out
/// and of the parts put back.
fn cut<T: Clone>(maps: &mut Vec<Mapping<T>>, start: u64, end: u64) -> (usize, usize) {
    let i = maps.partition_point(|x| x.end <= start);
    let mut j = i;
    let mut head = None;
    let mut tail = None;
    while j < maps.len() && maps[j].start < end {
        let x = &maps[j];
        if x.start < start {
            head = Some(Mapping { end: start, ..x.clone() });
        }
        if x.end > end {
            tail = Some(Mapping { start: end, pgoff: x.pgoff.wrapping_add(end - x.start), ..x.clone() });
        }
        j += 1;
    }
    let removed = list_cost(&maps[i..j]);
    let kept = head.iter().chain(tail.iter()).map(Mapping::cost).sum();
    maps.splice(i..j, head.into_iter().chain(tail));
    (removed, kept)
}

pub mod jit;

#[cfg(test)]
mod tests;
