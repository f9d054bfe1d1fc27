//! User-stack unwinding for tailprof: turn a sample's user registers and its copy of the
//! user stack (PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER) into frames, with the DWARF
//! call-frame information (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) of the mapped
//! files, through [framehop](https://docs.rs/framehop). Also the two stack sources that need
//! no unwinding: kernel callchains ([`callchain_frames`]) and LBR branch stacks
//! ([`lbr_frames`]).
//!
//! Used while recording (the recorder unwinds each sample as it drains the rings and keeps
//! only the frames) and by `import` (perf.data files recorded with `--call-graph dwarf`).
//!
//! # Address spaces and modules
//! [`Unwinder`] follows the processes' address spaces through the one model
//! ([`tailprof_format::addrspace`], fed by [`Unwinder::observe`] with the side-band
//! records, the same rules as the symbolizer and the agent). From a process's mappings it
//! derives framehop modules, rebuilt when the process's address-space generation changes.
//! A mapping's unwind sections are read the first time a walk passes through it, through
//! the caller's [`FileOpener`] (the recorder opens `/proc/PID/map_files/…` or the path
//! with `O_NOFOLLOW|O_NONBLOCK` and checks device and inode: files are the target's, hence
//! untrusted). A file's sections are read once and shared by every process that maps it
//! ([`ModuleCache`], keyed by device + inode or by path and build-id, bounded in bytes).
//! Only ELF headers and the unwind sections (`.eh_frame[_hdr]`, `.debug_frame`; never
//! `.text`) are read, through `tailprof-elf` (the one reader of untrusted ELF files), with
//! every size checked against the file and the limits in [`Limits`].
//!
//! # Code that runtimes generate
//! JIT code lives in anonymous memory: no file, no CFI. A runtime's jitdump may carry an
//! UNWINDING_INFO record (`.eh_frame` + `.eh_frame_hdr`) for the code it loads next; the
//! recorder hands it over with [`Unwinder::add_jit`] (and [`Unwinder::move_jit`] for
//! CODE_MOVE), and the code range becomes a framehop module of its process (bounded:
//! [`Limits::max_jit_bytes`], [`Limits::max_jit_modules`],
//! [`Limits::max_jit_total_bytes`], refusals counted). JIT code without it, like every
//! code without CFI, is walked with framehop's frame-pointer fallback rule (V8 and
//! HotSpot with `-XX:+PreserveFramePointer` keep frame pointers); such frames are counted
//! ([`UnwindStats::fallback_frames`]).
//!
//! # Bounded work per sample
//! At most [`Limits::max_frames`] frames; every stack read is a bounds-checked lookup in the
//! copy; no file is read while unwinding except a mapping seen for the first time.
//!
//! # Status
//! Every unwound stack gets a [`StackStatus`]: `Complete` when framehop reached the
//! outermost frame (CFI says the return address is undefined, as in `_start` and
//! `clone3`, or a null return address/frame pointer) through code with unwind information;
//! `CopyExhausted` when a read fell beyond the end of the copied stack; `NoUnwindInfo` when
//! the walk failed in code that has no CFI (an unknown mapping, JIT code, a file that
//! could not be read); `UnwindError` for other failures; `MaxDepth` at the frame limit;
//! `UserMissing` without registers or a stack copy (a kernel thread). A walk that ends
//! normally but used the frame-pointer fallback in code without CFI is `Unknown`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};
use tailprof_elf::Elf;
use tailprof_format::addrspace::{self, AddressSpaces, SpaceLimits};
use tailprof_format::{Frame, Record, StackStatus};

#[cfg(target_arch = "aarch64")]
mod arch {
    pub type NativeUnwinder<D> = framehop::aarch64::UnwinderAarch64<D>;
    pub type NativeCache = framehop::aarch64::CacheAarch64;
    /// perf register numbers (arch/arm64/include/uapi/asm/perf_regs.h): x29, lr, sp, pc.
    pub const REG_FP: u32 = 29;
    pub const REG_LR: u32 = 30;
    pub const REG_SP: u32 = 31;
    pub const REG_IP: u32 = 32;
    pub const REGS_MASK: u64 = 1 << REG_FP | 1 << REG_LR | 1 << REG_SP | 1 << REG_IP;
    pub fn regs(r: &super::UserRegs) -> framehop::aarch64::UnwindRegsAarch64 {
        framehop::aarch64::UnwindRegsAarch64::new(r.lr, r.sp, r.fp)
    }
}

#[cfg(not(target_arch = "aarch64"))]
mod arch {
    pub type NativeUnwinder<D> = framehop::x86_64::UnwinderX86_64<D>;
    pub type NativeCache = framehop::x86_64::CacheX86_64;
    /// perf register numbers (arch/x86/include/uapi/asm/perf_regs.h): bp, sp, ip.
    pub const REG_FP: u32 = 6;
    pub const REG_SP: u32 = 7;
    pub const REG_IP: u32 = 8;
    pub const REG_LR: u32 = u32::MAX;
    pub const REGS_MASK: u64 = 1 << REG_FP | 1 << REG_SP | 1 << REG_IP;
    pub fn regs(r: &super::UserRegs) -> framehop::x86_64::UnwindRegsX86_64 {
        framehop::x86_64::UnwindRegsX86_64::new(r.ip, r.sp, r.fp)
    }
}

/// `sample_regs_user` bits this architecture's unwinder needs (x86_64: bp, sp, ip;
/// aarch64: x29, lr, sp, pc).
pub const UNWIND_REGS_MASK: u64 = arch::REGS_MASK;

/// The user registers an unwind starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    /// Frame pointer (rbp / x29).
    pub fp: u64,
    /// Link register (aarch64 only; 0 elsewhere).
    pub lr: u64,
}

impl UserRegs {
    /// From a REGS_USER block: `mask` is the attr's `sample_regs_user`, `value(i)` the
    /// i-th word of the block. `None` if a needed register is missing.
    pub fn from_perf(mask: u64, value: impl Fn(usize) -> Option<u64>) -> Option<UserRegs> {
        let get = |reg: u32| -> Option<u64> {
            if reg >= 64 || mask & (1 << reg) == 0 {
                return None;
            }
            value((mask & ((1u64 << reg) - 1)).count_ones() as usize)
        };
        Some(UserRegs {
            ip: get(arch::REG_IP)?,
            sp: get(arch::REG_SP)?,
            fp: get(arch::REG_FP)?,
            lr: if arch::REG_LR == u32::MAX { 0 } else { get(arch::REG_LR)? },
        })
    }
}

/// Limits on what the unwinder reads and keeps (every size comes from an untrusted file).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Frames per stack (then [`StackStatus::MaxDepth`]).
    pub max_frames: usize,
    /// Processes tracked at once; the least recently used is forgotten beyond it.
    pub max_processes: usize,
    /// Mappings per process.
    pub max_mappings: usize,
    /// Bytes of one unwind section (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`).
    pub max_section: u64,
    /// Bytes of all cached module sections together.
    pub max_cache_bytes: usize,
    /// Bytes of JIT unwind information ([`JitUnwind`]) kept per process.
    pub max_jit_bytes: usize,
    /// JIT code ranges with unwind information kept per process.
    pub max_jit_modules: usize,
    /// Bytes of JIT unwind information kept for all processes together.
    pub max_jit_total_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frames: 1024,
            max_processes: 4096,
            max_mappings: 8192,
            max_section: 256 << 20,
            max_cache_bytes: 1 << 30,
            max_jit_bytes: 32 << 20,
            max_jit_modules: 1 << 16,
            max_jit_total_bytes: 256 << 20,
        }
    }
}

/// A mapping of a process, as the one address-space model keeps it
/// ([`tailprof_format::addrspace`]): start, end, file offset, path, build-id (a different
/// file at the path, e.g. a rebuilt binary when importing an old recording, is not used)
/// and the file's `(st_dev, st_ino)` when the recorder knows it.
pub type Mapping = addrspace::Mapping<()>;

/// Opens the file behind a mapping (the recorder: safely, from the target's view; import:
/// on the host, through [`tailprof_elf::open::open_untrusted`]).
pub trait FileOpener {
    fn open(&mut self, pid: u32, m: &Mapping) -> io::Result<File>;
}

impl<F: FnMut(u32, &Mapping) -> io::Result<File>> FileOpener for F {
    fn open(&mut self, pid: u32, m: &Mapping) -> io::Result<File> {
        self(pid, m)
    }
}

/// The host's file at a mapping's path, opened as an untrusted path must be
/// ([`tailprof_elf::open`]), and the mapped file itself when its device and inode are
/// known (`import`'s opener).
pub fn open_host_file(_pid: u32, m: &Mapping) -> io::Result<File> {
    let path = std::path::Path::new(&*m.path);
    match m.file {
        Some((dev, ino)) => tailprof_elf::open::open_untrusted_as(path, dev, ino),
        None => tailprof_elf::open::open_untrusted(path),
    }
}

/// Shared, immutable section bytes (cheap to clone into every process's module).
#[derive(Clone, Debug, Default)]
pub struct Bytes(Arc<Vec<u8>>);

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Unwind information a runtime published for code it generated: a jitdump's
/// UNWINDING_INFO record (docs/SYMBOLS.md "Code that runtimes generate"), which applies to
/// the CODE_LOAD after it. The runtime encodes the `.eh_frame` (and its `.eh_frame_hdr`)
/// for a layout in which the `.eh_frame` follows the code at `code.start +
/// align8(code length)` and the `.eh_frame_hdr` follows the `.eh_frame` (the layout of
/// `perf inject --jit`'s ELF files); the unwinder places them there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JitUnwind {
    /// The code's address range.
    pub code: Range<u64>,
    /// `.eh_frame` bytes (CIEs and FDEs); empty: the code has no unwind information.
    pub eh_frame: Vec<u8>,
    /// `.eh_frame_hdr` bytes (the binary-search table); may be empty (framehop then
    /// indexes the `.eh_frame` itself).
    pub eh_frame_hdr: Vec<u8>,
}

/// Largest JIT code range given unwind information (framehop's relative addresses are
/// 32-bit).
pub const MAX_JIT_CODE: u64 = 1 << 30;

/// One JIT code range with unwind information, as kept per process.
#[derive(Debug)]
struct JitModule {
    end: u64,
    eh_frame: Bytes,
    eh_frame_hdr: Option<Bytes>,
}

impl JitModule {
    fn bytes(&self) -> usize {
        self.eh_frame.len() + self.eh_frame_hdr.as_ref().map_or(0, |h| h.len())
    }

    /// The framehop module for the code at `start..self.end`: svma = avma, the sections
    /// where the runtime's layout puts them ([`JitUnwind`]).
    fn module(&self, start: u64) -> Module<Bytes> {
        let eh_at = start.wrapping_add((self.end - start).next_multiple_of(8));
        let eh_end = eh_at.wrapping_add(self.eh_frame.len() as u64);
        let hdr_end = eh_end.wrapping_add(self.eh_frame_hdr.as_ref().map_or(0, |h| h.len() as u64));
        let sections = ExplicitModuleSectionInfo {
            base_svma: start,
            text_svma: Some(start..self.end),
            eh_frame_svma: Some(eh_at..eh_end),
            eh_frame: Some(self.eh_frame.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|_| eh_end..hdr_end),
            eh_frame_hdr: self.eh_frame_hdr.clone(),
            ..Default::default()
        };
        Module::new("[jit]".to_owned(), start..self.end, start, sections)
    }
}

/// The JIT code ranges of one process that have unwind information, by start.
#[derive(Debug, Default)]
struct JitTable {
    by_start: BTreeMap<u64, JitModule>,
    bytes: usize,
}

impl JitTable {
    /// Whether `a` is in a range with unwind information.
    fn covers(&self, a: u64) -> bool {
        self.by_start.range(..=a).next_back().is_some_and(|(_, m)| a < m.end)
    }

    /// Removes the ranges overlapping `r`; returns their starts and their bytes.
    fn remove_overlapping(&mut self, r: &Range<u64>) -> (Vec<u64>, usize) {
        let mut gone = Vec::new();
        if let Some((&s, m)) = self.by_start.range(..r.start).next_back() {
            if m.end > r.start {
                gone.push(s);
            }
        }
        gone.extend(self.by_start.range(r.start..r.end).map(|(&s, _)| s));
        let mut bytes = 0;
        for s in &gone {
            if let Some(m) = self.by_start.remove(s) {
                bytes += m.bytes();
            }
        }
        self.bytes -= bytes;
        (gone, bytes)
    }
}

/// What one file contributes: its unwind sections and where its code segments are.
#[derive(Debug)]
struct ModuleData {
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// Executable PT_LOAD segments: (p_offset, p_vaddr, p_filesz).
    exec_segments: Vec<(u64, u64, u64)>,
    has_cfi: bool,
    /// ELF entry point (svma), 0 if none.
    entry: u64,
    bytes: usize,
}

/// Key of a file in the [`ModuleCache`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileKey {
    DevIno(u64, u64),
    Path(Arc<str>, Option<Arc<[u8]>>),
}

/// Files read so far, shared by all processes; bounded by [`Limits::max_cache_bytes`]
/// (the least recently used files are dropped; processes that still use them keep their
/// copy until they exit).
#[derive(Debug, Default)]
pub struct ModuleCache {
    files: HashMap<FileKey, (Option<Arc<ModuleData>>, u64)>,
    bytes: usize,
    tick: u64,
}

impl ModuleCache {
    fn get(&mut self, key: &FileKey) -> Option<Option<Arc<ModuleData>>> {
        self.tick += 1;
        let t = self.tick;
        self.files.get_mut(key).map(|e| {
            e.1 = t;
            e.0.clone()
        })
    }

    fn insert(&mut self, key: FileKey, data: Option<Arc<ModuleData>>, limit: usize) {
        self.tick += 1;
        let add = data.as_ref().map_or(0, |d| d.bytes);
        while self.bytes + add > limit && !self.files.is_empty() {
            let Some(oldest) = self.files.iter().min_by_key(|e| e.1 .1).map(|e| e.0.clone()) else { break };
            if let Some((Some(d), _)) = self.files.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(d.bytes);
            }
        }
        self.bytes += add;
        self.files.insert(key, (data, self.tick));
    }

    /// Bytes of section data cached.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

struct Loaded {
    mapping: Mapping,
    /// Where the file's entry point (`_start`) is mapped, when it is in this mapping.
    entry_avma: Option<u64>,
    /// `None` until the first unwind in this process that passes through it;
    /// `Some(false)` when the file could not be used (then code there has no unwind
    /// information).
    state: Option<bool>,
    /// The file's data once loaded (kept so a rebuilt process adds it again without a
    /// lookup).
    data: Option<Arc<ModuleData>>,
}

/// What the unwinder derives from one process's mappings: framehop's modules, built
/// lazily, valid for one generation of the process's address space.
struct Process {
    unwinder: arch::NativeUnwinder<Bytes>,
    cache: arch::NativeCache,
    maps: Vec<Loaded>,
    /// The address-space generation `maps` reflects.
    gen: u32,
    /// Some mapping is not loaded yet.
    dirty: bool,
    last_use: u64,
}

impl Process {
    fn new() -> Process {
        Process {
            unwinder: arch::NativeUnwinder::new(),
            cache: arch::NativeCache::new(),
            maps: Vec::new(),
            gen: 0,
            dirty: false,
            last_use: 0,
        }
    }

    /// Rebuild from the current mappings: what was loaded for the same mapping of the
    /// same file is added again, the rest loads lazily.
    fn rebuild(&mut self, maps: &[Mapping], gen: u32, jit: Option<&JitTable>) {
        let old = std::mem::take(&mut self.maps);
        self.unwinder = arch::NativeUnwinder::new();
        self.cache = arch::NativeCache::new();
        self.gen = gen;
        for m in maps {
            let prev = old.iter().find(|l| {
                l.state.is_some()
                    && l.mapping.start == m.start
                    && l.mapping.end == m.end
                    && l.mapping.pgoff == m.pgoff
                    && l.mapping.path == m.path
                    && l.mapping.file == m.file
                    && l.mapping.build_id == m.build_id
            });
            let mut l = Loaded { mapping: m.clone(), entry_avma: None, state: None, data: None };
            if let Some(p) = prev {
                l.state = p.state;
                l.data = p.data.clone();
                l.entry_avma = p.entry_avma;
                if let Some((module, _)) = l.data.as_ref().and_then(|d| module_for(m, d)) {
                    self.unwinder.add_module(module);
                }
            }
            self.maps.push(l);
        }
        for (&start, m) in jit.iter().flat_map(|t| t.by_start.iter()) {
            self.unwinder.add_module(m.module(start));
        }
        self.dirty = self.maps.iter().any(|l| l.state.is_none());
    }
}

/// Whether `addr` (a lookup address) lies in the first bytes of a file's entry point, i.e.
/// in `_start`'s call of the loader's or libc's start routine.
fn at_entry(maps: &[Loaded], addr: u64) -> bool {
    maps.iter().any(|l| l.entry_avma.is_some_and(|e| (e..e.saturating_add(ENTRY_CALL_WINDOW)).contains(&addr)))
}

/// Bytes after an entry point within which its first call lies (`_start` calls at once).
const ENTRY_CALL_WINDOW: u64 = 48;

/// Counters of what the unwinder did (for summaries and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindStats {
    pub stacks: u64,
    pub frames: u64,
    pub files_read: u64,
    pub files_failed: u64,
    pub processes_evicted: u64,
    /// JIT code ranges given unwind information ([`Unwinder::add_jit`]).
    pub jit_unwind_added: u64,
    /// JIT unwind information refused: over [`Limits::max_jit_bytes`],
    /// [`Limits::max_jit_modules`], [`Limits::max_jit_total_bytes`] or [`MAX_JIT_CODE`].
    pub jit_unwind_refused: u64,
    /// Frames of finished stacks unwound through JIT unwind information.
    pub jit_cfi_frames: u64,
    /// Frames of finished stacks in code without unwind information (JIT code without
    /// UNWINDING_INFO, anonymous memory, a file that could not be read), from which the
    /// walk went on with framehop's frame-pointer fallback.
    pub fallback_frames: u64,
}

/// The address spaces (the one model, fed by [`Unwinder::observe`]), framehop's modules
/// derived from them per process, and the shared module cache. See the module docs.
pub struct Unwinder {
    spaces: AddressSpaces<()>,
    /// By pid; FxHash: looked up a few times per sample, keys are our own.
    procs: rustc_hash::FxHashMap<u32, Process>,
    modules: ModuleCache,
    limits: Limits,
    opener: Box<dyn FileOpener + Send>,
    tick: u64,
    stats: UnwindStats,
    /// The addresses in not yet loaded mappings of the current walk (kept: one allocation).
    unloaded: Vec<u64>,
    /// JIT code ranges with unwind information, per process (the source of truth: the
    /// derived [`Process`] state adds them as framehop modules).
    jit: rustc_hash::FxHashMap<u32, JitTable>,
    /// Bytes in `jit` over all processes.
    jit_bytes: usize,
    /// What the last [`Unwinder::unwind`] added to `stats` (frames, its [`WalkCounts`]),
    /// for [`Unwinder::uncount_last`].
    last: Option<(u64, WalkCounts)>,
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder").field("processes", &self.procs.len()).field("stats", &self.stats).finish()
    }
}

impl Unwinder {
    pub fn new(opener: Box<dyn FileOpener + Send>, limits: Limits) -> Unwinder {
        let space_limits = SpaceLimits { max_processes: limits.max_processes, max_mappings: limits.max_mappings, ..SpaceLimits::default() };
        Unwinder {
            spaces: AddressSpaces::new(space_limits),
            procs: Default::default(),
            modules: ModuleCache::default(),
            limits,
            opener,
            tick: 0,
            stats: UnwindStats::default(),
            unloaded: Vec::new(),
            jit: Default::default(),
            jit_bytes: 0,
            last: None,
        }
    }

    pub fn stats(&self) -> UnwindStats {
        UnwindStats { processes_evicted: self.stats.processes_evicted + self.spaces.counters().processes_evicted, ..self.stats }
    }

    pub fn module_cache(&self) -> &ModuleCache {
        &self.modules
    }

    /// The address spaces the unwinder follows.
    pub fn spaces(&self) -> &AddressSpaces<()> {
        &self.spaces
    }

    /// The record → unwinder glue, one for the recorder and `import`: follow a side-band
    /// record (MMAP/MMAP2, COMM, FORK, EXIT) with the model's rules. `file` is the mapped
    /// file's `(st_dev, st_ino)` when the caller knows it (the recorder, from the raw
    /// MMAP2 record).
    pub fn observe(&mut self, r: &Record, file: Option<(u64, u64)>) {
        match r {
            Record::Mmap(m) => {
                self.spaces.mmap(m, file);
            }
            Record::Exit(t) => {
                self.spaces.exit(t);
                // The derived state is a cache: freed now, rebuilt for a late sample.
                if t.pid == t.tid {
                    self.procs.remove(&t.pid);
                    self.forget_jit(t.pid);
                }
            }
            Record::Comm(c) if c.exec && c.pid == c.tid => {
                // A new program: the old one's generated code is gone.
                self.spaces.apply(r);
                self.forget_jit(c.pid);
            }
            other => {
                self.spaces.apply(other);
            }
        }
    }

    fn forget_jit(&mut self, pid: u32) {
        if let Some(t) = self.jit.remove(&pid) {
            self.jit_bytes -= t.bytes;
        }
    }

    /// JIT code of `pid` was loaded at `info.code` (a jitdump CODE_LOAD), with the unwind
    /// information of the UNWINDING_INFO record before it, or none (`info.eh_frame`
    /// empty). Unwind information of earlier code that the range overlaps (a reused
    /// address) is dropped either way, so code without its own unwind information is
    /// walked with the frame-pointer fallback, never with another function's rules.
    /// Returns whether the information was kept; refusals over the bounds ([`Limits`])
    /// are counted (`jit_unwind_refused`). Ignored for a process whose address space is
    /// not known (gone).
    pub fn add_jit(&mut self, pid: u32, info: JitUnwind) -> bool {
        if !self.spaces.knows(pid) || info.code.start >= info.code.end {
            return false;
        }
        let (gone, freed) = self.jit.get_mut(&pid).map(|t| t.remove_overlapping(&info.code)).unwrap_or_default();
        self.jit_bytes -= freed;
        if let Some(p) = self.procs.get_mut(&pid) {
            for s in &gone {
                p.unwinder.remove_module(*s);
            }
        }
        if info.eh_frame.is_empty() {
            return false;
        }
        let m = JitModule {
            end: info.code.end,
            eh_frame: Bytes(Arc::new(info.eh_frame)),
            eh_frame_hdr: (!info.eh_frame_hdr.is_empty()).then(|| Bytes(Arc::new(info.eh_frame_hdr))),
        };
        let t = self.jit.entry(pid).or_default();
        if info.code.end - info.code.start > MAX_JIT_CODE
            || t.by_start.len() >= self.limits.max_jit_modules
            || t.bytes + m.bytes() > self.limits.max_jit_bytes
            || self.jit_bytes + m.bytes() > self.limits.max_jit_total_bytes
        {
            self.stats.jit_unwind_refused += 1;
            return false;
        }
        t.bytes += m.bytes();
        self.jit_bytes += m.bytes();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.unwinder.add_module(m.module(info.code.start));
        }
        t.by_start.insert(info.code.start, m);
        self.stats.jit_unwind_added += 1;
        true
    }

    /// JIT code of `pid` moved from `from` to `to` (a jitdump CODE_MOVE; `size` bytes):
    /// its unwind information (position-independent, laid out after the code) moves with
    /// it. Whatever the new range overlaps is dropped.
    pub fn move_jit(&mut self, pid: u32, from: u64, to: u64, size: u64) {
        let Some(t) = self.jit.get_mut(&pid) else { return };
        let m = match t.by_start.get(&from) {
            Some(m) if m.end.wrapping_sub(from) == size => t.by_start.remove(&from),
            _ => None,
        };
        if let Some(m) = &m {
            t.bytes -= m.bytes();
            self.jit_bytes -= m.bytes();
            if let Some(p) = self.procs.get_mut(&pid) {
                p.unwinder.remove_module(from);
            }
        }
        let Some(end) = to.checked_add(size) else { return };
        let info = match m {
            Some(m) => JitUnwind {
                code: to..end,
                eh_frame: m.eh_frame.to_vec(),
                eh_frame_hdr: m.eh_frame_hdr.map(|h| h.to_vec()).unwrap_or_default(),
            },
            None => JitUnwind { code: to..end, ..Default::default() },
        };
        self.add_jit(pid, info);
    }

    /// Bytes of JIT unwind information kept (all processes).
    pub fn jit_bytes(&self) -> usize {
        self.jit_bytes
    }

    /// Whether an address space of `pid` with some mapping is known.
    pub fn knows(&self, pid: u32) -> bool {
        self.spaces.knows(pid)
    }

    /// The derived state of `pid`, current with its address space.
    fn process(&mut self, pid: u32) -> &mut Process {
        if !self.procs.contains_key(&pid) && self.procs.len() >= self.limits.max_processes {
            if let Some(&old) = self.procs.iter().min_by_key(|p| p.1.last_use).map(|p| p.0) {
                self.procs.remove(&old);
                self.stats.processes_evicted += 1;
            }
        }
        self.tick += 1;
        self.spaces.touch(pid);
        let gen = self.spaces.generation(pid);
        let p = self.procs.entry(pid).or_insert_with(Process::new);
        p.last_use = self.tick;
        if p.gen != gen {
            p.rebuild(self.spaces.mappings(pid), gen, self.jit.get(&pid));
        }
        p
    }

    /// Read the unwind sections of the not yet loaded mappings of `pid` that contain one
    /// of `addrs` (only code a walk actually passes through is ever read). Returns whether
    /// any mapping was loaded (or found unusable).
    fn load_mappings(&mut self, pid: u32, addrs: &[u64]) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        if !p.dirty {
            return false;
        }
        let pending: Vec<usize> = (0..p.maps.len())
            .filter(|&i| {
                let l = &p.maps[i];
                l.state.is_none() && addrs.iter().any(|a| l.mapping.contains(*a))
            })
            .collect();
        for &i in &pending {
            let m = self.procs[&pid].maps[i].mapping.clone();
            let data = if !m.is_file() {
                None // [vdso], anonymous memory (JIT code): no file to read
            } else {
                let key = match m.file {
                    Some((d, i)) => FileKey::DevIno(d, i),
                    None => FileKey::Path(m.path.clone(), m.build_id.clone()),
                };
                match self.modules.get(&key) {
                    Some(d) => d,
                    None => {
                        let d = match self.opener.open(pid, &m).and_then(|f| read_module(f, &self.limits, m.build_id.as_deref())) {
                            Ok(d) => {
                                self.stats.files_read += 1;
                                Some(Arc::new(d))
                            }
                            Err(_) => {
                                self.stats.files_failed += 1;
                                None
                            }
                        };
                        self.modules.insert(key, d.clone(), self.limits.max_cache_bytes);
                        d
                    }
                }
            };
            let p = self.procs.get_mut(&pid).expect("present");
            let ok = match data.as_ref().and_then(|d| module_for(&m, d)) {
                Some((module, bias)) => {
                    p.unwinder.add_module(module);
                    let entry = data.as_ref().map_or(0, |d| d.entry).wrapping_add(bias);
                    if entry != bias && m.contains(entry) {
                        p.maps[i].entry_avma = Some(entry);
                    }
                    data.as_ref().is_some_and(|d| d.has_cfi)
                }
                None => false,
            };
            p.maps[i].state = Some(ok);
            p.maps[i].data = data;
        }
        let p = self.procs.get_mut(&pid).expect("present");
        p.dirty = p.maps.iter().any(|l| l.state.is_none());
        !pending.is_empty()
    }

    /// Unwind one user stack: `regs` at the sample, `stack` the bytes copied from `regs.sp`
    /// up. Appends user frames, leaf first (leaf = `regs.ip`, then return addresses), to
    /// `out` and returns the status.
    ///
    /// Mappings are loaded lazily: a walk that passes through a mapping not read yet (the
    /// frame-pointer fallback got it there) loads it and walks again, at most
    /// [`MAX_WALKS`] times per stack.
    pub fn unwind(&mut self, pid: u32, regs: &UserRegs, stack: &[u8], out: &mut Vec<Frame>) -> StackStatus {
        self.stats.stacks += 1;
        if !self.spaces.knows(pid) {
            // No mapping known: code has no unwind info; still keep the leaf.
            out.push(Frame::user(regs.ip));
            self.stats.frames += 1;
            self.last = Some((1, WalkCounts::default()));
            return StackStatus::NoUnwindInfo;
        }
        self.process(pid);
        let start_len = out.len();
        let mut unloaded = std::mem::take(&mut self.unloaded);
        unloaded.clear();
        unloaded.push(regs.ip);
        let mut status = StackStatus::UnwindError;
        let mut counts = WalkCounts::default();
        for walk in 0..MAX_WALKS {
            if !unloaded.is_empty() {
                let loaded = self.load_mappings(pid, &unloaded);
                if !loaded && walk > 0 {
                    break;
                }
            }
            out.truncate(start_len);
            unloaded.clear();
            let p = self.procs.get_mut(&pid).expect("present");
            counts = WalkCounts::default();
            status = walk_stack(p, self.jit.get(&pid), regs, stack, out, self.limits.max_frames, &mut unloaded, &mut counts);
            if unloaded.is_empty() {
                break;
            }
        }
        self.unloaded = unloaded;
        self.stats.frames += (out.len() - start_len) as u64;
        self.stats.jit_cfi_frames += counts.jit_cfi;
        self.stats.fallback_frames += counts.fallback;
        self.last = Some(((out.len() - start_len) as u64, counts));
        status
    }

    /// Takes the last [`Unwinder::unwind`] back out of the counters (its stack, frames,
    /// JIT and fallback frames), for a caller that discards that walk and unwinds the
    /// same stack again later (the recorder's early walk while draining keeps complete
    /// stacks only), so that every stack is counted once. Work done (files read) stays
    /// counted. Does nothing twice in a row.
    pub fn uncount_last(&mut self) {
        let Some((frames, counts)) = self.last.take() else { return };
        self.stats.stacks = self.stats.stacks.saturating_sub(1);
        self.stats.frames = self.stats.frames.saturating_sub(frames);
        self.stats.jit_cfi_frames = self.stats.jit_cfi_frames.saturating_sub(counts.jit_cfi);
        self.stats.fallback_frames = self.stats.fallback_frames.saturating_sub(counts.fallback);
    }
}

/// Walks per stack at most (each one after loading the mappings the previous one found).
pub const MAX_WALKS: usize = 4;

/// Frames of one walk by the kind of unwind information they had.
#[derive(Debug, Default, Clone, Copy)]
struct WalkCounts {
    jit_cfi: u64,
    fallback: u64,
}

/// One framehop walk; addresses in mappings whose unwind information is not loaded yet go
/// to `unloaded`. Frames in JIT code with unwind information (`jit`) count as having CFI.
#[allow(clippy::too_many_arguments)]
fn walk_stack(
    p: &mut Process,
    jit: Option<&JitTable>,
    regs: &UserRegs,
    stack: &[u8],
    out: &mut Vec<Frame>,
    max_frames: usize,
    unloaded: &mut Vec<u64>,
    counts: &mut WalkCounts,
) -> StackStatus {
    let start_len = out.len();
    let sp = regs.sp;
    let end = sp.saturating_add(stack.len() as u64);
    let mut read = |addr: u64| -> Result<u64, ()> {
        if addr < sp || addr.checked_add(8).is_none_or(|e| e > end) {
            return Err(());
        }
        let o = (addr - sp) as usize;
        Ok(u64::from_ne_bytes(stack[o..o + 8].try_into().map_err(|_| ())?))
    };
    let maps = &p.maps;
    let pending = |a: u64| maps.iter().any(|l| l.state.is_none() && l.mapping.contains(a));
    // `has_cfi` with the last mapping found remembered: a walk's frames are mostly in one
    // or two files, so most frames cost one range check, not a scan of the mappings.
    let mut last_cfi: Range<u64> = 0..0;
    // Where `a`'s unwind information comes from: 0 none, 1 a file, 2 the runtime (JIT).
    let mut cfi = |a: u64| -> u8 {
        if last_cfi.contains(&a) {
            return 1;
        }
        match maps.iter().find(|l| l.state == Some(true) && l.mapping.contains(a)) {
            Some(l) => {
                last_cfi = l.mapping.start..l.mapping.end;
                1
            }
            None if jit.is_some_and(|t| t.covers(a)) => 2,
            None => 0,
        }
    };
    let mut no_cfi_seen = false;
    let mut iter = p.unwinder.iter_frames(regs.ip, arch::regs(regs), &mut p.cache, &mut read);
    let mut last_addr = regs.ip;
    loop {
        if out.len() - start_len >= max_frames {
            return StackStatus::MaxDepth;
        }
        match iter.next() {
            Ok(Some(fa)) => {
                let ip = match fa {
                    FrameAddress::InstructionPointer(ip) => ip,
                    FrameAddress::ReturnAddress(ra) => ra.get(),
                };
                last_addr = fa.address_for_lookup();
                out.push(Frame::user(ip));
                let kind = cfi(last_addr);
                counts.jit_cfi += u64::from(kind == 2);
                if kind == 0 {
                    no_cfi_seen = true;
                    counts.fallback += 1;
                    if pending(last_addr) {
                        unloaded.push(last_addr);
                    }
                }
            }
            Ok(None) => return if no_cfi_seen { StackStatus::Unknown } else { StackStatus::Complete },
            // The process's first frame: a return into an entry point (`_start` of the
            // executable or of the dynamic loader, whose CFI does not always end the
            // stack) is the outermost frame, whatever a further step says.
            Err(_) if at_entry(maps, last_addr) => return StackStatus::Complete,
            Err(framehop::Error::CouldNotReadStack(a)) if a >= end => return StackStatus::CopyExhausted,
            Err(_) if cfi(last_addr) == 0 => return StackStatus::NoUnwindInfo,
            Err(_) => return StackStatus::UnwindError,
        }
    }
}

/// The framehop module for mapping `m` of file `d` and the mapping's bias (avma - svma),
/// or `None` if no executable segment of the file contains the mapping's offset.
fn module_for(m: &Mapping, d: &ModuleData) -> Option<(Module<Bytes>, u64)> {
    let page = |x: u64| x & !0xfff;
    let &(off, vaddr, _) = d.exec_segments.iter().find(|&&(off, _, filesz)| {
        let (lo, hi) = (page(off), off.saturating_add(filesz));
        (lo..hi.max(lo + 1)).contains(&m.pgoff)
    })?;
    // svma of the mapping's first byte; bias = avma - svma.
    let svma = vaddr.wrapping_sub(off).wrapping_add(m.pgoff);
    let bias = m.start.wrapping_sub(svma);
    Some((Module::new(m.path.to_string(), m.start..m.end, bias, d.sections.clone()), bias))
}

/// Read the ELF headers and unwind sections of `f`, within `limits`: headers through the
/// one reader of untrusted ELF files (`tailprof-elf`: `pread` only, every size checked
/// against the file), each unwind section's bytes straight into its final buffer (range
/// checked against the file). 64-bit files only (the unwinder's registers are 64-bit).
fn read_module(f: File, limits: &Limits, build_id: Option<&[u8]>) -> io::Result<ModuleData> {
    let bad = |e: tailprof_elf::Error| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let elf = Elf::parse(&f).map_err(bad)?;
    if !elf.class().is64 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a 64-bit ELF file"));
    }
    if let Some(want) = build_id.filter(|b| !b.is_empty()) {
        // The project's one build-id reader (the recorder's and the symbolizer's):
        // segments first, then sections, the same bounds.
        if tailprof_elf::file_build_id(&f).as_deref() != Some(want) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the file's build-id differs from the recorded one"));
        }
    }
    let mut exec_segments = Vec::new();
    for ph in elf.program_headers().map_err(bad)? {
        let ph = ph.map_err(bad)?;
        if ph.kind == tailprof_elf::PT_LOAD && ph.flags & tailprof_elf::PF_X != 0 {
            exec_segments.push((ph.offset, ph.vaddr, ph.filesz));
        }
    }
    let range = |name: &str| -> Option<Range<u64>> {
        let (_, s) = elf.section_by_name(name.as_bytes()).ok().flatten()?;
        Some(s.addr..s.addr.saturating_add(s.size))
    };
    let mut bytes = 0usize;
    let mut section = |name: &str, max: u64| -> Option<(Range<u64>, Bytes)> {
        let (_, s) = elf.section_by_name(name.as_bytes()).ok().flatten()?;
        if !s.has_data() {
            return None;
        }
        if s.size > max || s.offset.checked_add(s.size).is_none_or(|e| e > elf.file_len()) {
            return None;
        }
        let data = read_exact_at(&f, s.offset, usize::try_from(s.size).ok()?).ok()?;
        bytes += data.len();
        Some((s.addr..s.addr.saturating_add(s.size), Bytes(Arc::new(data))))
    };
    let eh_frame = section(".eh_frame", limits.max_section);
    let eh_frame_hdr = section(".eh_frame_hdr", limits.max_section);
    let debug_frame = section(".debug_frame", limits.max_section);
    let has_cfi = eh_frame.is_some() || debug_frame.is_some();
    // `.text`: its address range only (the base of DW_EH_PE_textrel pointers). Its bytes
    // are not read: framehop analyses instructions only in Mach-O (`__unwind_info`) and PE
    // modules (its `macho`/`pe` features, not enabled here); `.eh_frame` covers prologues
    // and epilogues. Reading them was most of attaching to PostgreSQL (5.4 MB `.text`).
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: eh_frame.as_ref().map(|e| e.0.clone()),
        eh_frame: eh_frame.map(|e| e.1),
        eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|e| e.0.clone()),
        eh_frame_hdr: eh_frame_hdr.map(|e| e.1),
        debug_frame: debug_frame.map(|e| e.1),
        ..Default::default()
    };
    Ok(ModuleData { sections, exec_segments, has_cfi, entry: elf.header().entry, bytes })
}

/// `len` bytes of `f` from `off` into a new buffer (not zeroed first: `read_to_end` reads
/// into the spare capacity). A short file is an error. The range was checked against the
/// file by the caller.
fn read_exact_at(mut f: &File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    f.seek(SeekFrom::Start(off))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "section too large"))?;
    f.take(len as u64).read_to_end(&mut v)?;
    if v.len() != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than its section headers say"));
    }
    Ok(v)
}

/// What [`callchain_frames`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Callchain {
    pub kernel_frames: usize,
    pub user_frames: usize,
    /// The chain has the kernel's `PERF_CONTEXT_USER` marker (a user part was walked).
    pub has_user_context: bool,
}

const CONTEXT_MAX: u64 = -4095i64 as u64;
const CONTEXT_KERNEL: u64 = -128i64 as u64;
const CONTEXT_USER: u64 = -512i64 as u64;

/// Kernel callchain (PERF_SAMPLE_CALLCHAIN entries, leaf first, with `PERF_CONTEXT_*`
/// markers) → frames, leaf first. `sample_ip` is the sample's ip: the kernel's first
/// entry normally repeats it. Guest and hypervisor parts are skipped.
pub fn callchain_frames(chain: impl IntoIterator<Item = u64>, out: &mut Vec<Frame>) -> Callchain {
    let mut ctx = CONTEXT_KERNEL;
    let mut c = Callchain::default();
    for ip in chain {
        if ip >= CONTEXT_MAX {
            ctx = ip;
            if ip == CONTEXT_USER {
                c.has_user_context = true;
            }
            continue;
        }
        match ctx {
            CONTEXT_KERNEL => {
                out.push(Frame::kernel(ip));
                c.kernel_frames += 1;
            }
            CONTEXT_USER => {
                out.push(Frame::user(ip));
                c.user_frames += 1;
            }
            _ => {}
        }
    }
    c
}

/// Status of a frame-pointer callchain: `MaxDepth` when it has `max_stack` or more entries
/// (the kernel's `kernel.perf_event_max_stack`), `UserMissing` when a user-mode sample has
/// no user part, else `Unknown` (a frame-pointer walk cannot tell whether it reached the
/// outermost frame).
pub fn callchain_status(c: &Callchain, entries: usize, user_sample: bool, max_stack: usize) -> StackStatus {
    if entries >= max_stack {
        StackStatus::MaxDepth
    } else if c.user_frames == 0 && (user_sample || c.kernel_frames == 0) {
        StackStatus::UserMissing
    } else {
        StackStatus::Unknown
    }
}

/// LBR call stack (PERF_SAMPLE_BRANCH_CALL_STACK entries `(from, to)`, most recent first)
/// → user frames, appended as perf resolves them (`resolve_lbr_callchain_sample`, callee
/// order): the most recent entry's `to` (the current function), then every entry's `from`
/// (the call sites, innermost first). Nothing for an empty stack.
pub fn lbr_frames(branches: impl IntoIterator<Item = (u64, u64)>, out: &mut Vec<Frame>) {
    let mut first = true;
    for (from, to) in branches {
        if std::mem::take(&mut first) {
            out.push(Frame::user(to));
        }
        out.push(Frame::user(from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callchain_split_by_context() {
        let mut out = Vec::new();
        let c = callchain_frames([CONTEXT_KERNEL, 0xffff1, 0xffff2, CONTEXT_USER, 0x401000, 0x402000], &mut out);
        assert_eq!(c.kernel_frames, 2);
        assert_eq!(c.user_frames, 2);
        assert_eq!(out[0], Frame::kernel(0xffff1));
        assert_eq!(out[3], Frame::user(0x402000));
        assert_eq!(callchain_status(&c, 6, false, 127), StackStatus::Unknown);
        assert_eq!(callchain_status(&c, 127, false, 127), StackStatus::MaxDepth);
    }

    #[test]
    fn regs_from_perf_mask() {
        let mask = UNWIND_REGS_MASK | 1; // plus ax
        let vals = [7u64, 10, 20, 30, 40];
        let r = UserRegs::from_perf(mask, |i| vals.get(i).copied()).unwrap();
        #[cfg(target_arch = "x86_64")]
        assert_eq!((r.fp, r.sp, r.ip), (10, 20, 30));
        assert!(UserRegs::from_perf(1, |i| vals.get(i).copied()).is_none());
    }

    /// Unwind our own stack: the test binary has .eh_frame, so the walk from here must
    /// reach the outermost frame (the test harness thread's start) or at least go deep.
    #[test]
    fn unwinds_own_stack() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
        let pid = std::process::id();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 6 || !f[1].contains('x') || !f[5].starts_with('/') {
                continue;
            }
            let (s, e) = f[0].split_once('-').unwrap();
            let start = u64::from_str_radix(s, 16).unwrap();
            let pgoff = u64::from_str_radix(f[2], 16).unwrap();
            u.observe(&mmap(pid, start, u64::from_str_radix(e, 16).unwrap() - start, pgoff, f[5], None), None);
        }
        let (frames, status) = capture(&mut u, pid);
        assert!(frames.len() >= 5, "{} frames, {status:?}", frames.len());
        assert!(matches!(status, StackStatus::Complete | StackStatus::CopyExhausted), "{status:?}");
        assert!(u.stats().files_read >= 1);
    }

    /// Garbage, truncated and non-regular files as mapped "binaries": no panic, the stack
    /// keeps its leaf and says there was no unwind information; the cache stays bounded.
    #[test]
    fn hostile_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("tailprof-unwind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage");
        std::fs::write(&garbage, vec![0x7f; 4096]).unwrap();
        let truncated = dir.join("truncated");
        let exe = std::fs::read("/proc/self/exe").unwrap();
        std::fs::write(&truncated, &exe[..300.min(exe.len())]).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/proc/self/exe", &link).unwrap();
        let limits = Limits { max_cache_bytes: 1 << 20, ..Limits::default() };
        let mut u = Unwinder::new(Box::new(open_host_file), limits);
        for (i, p) in [&garbage, &truncated, &link, &dir].iter().enumerate() {
            let base = 0x10000 * (i as u64 + 1);
            u.observe(&mmap(7, base, 0x1000, 0, p.to_str().unwrap(), None), None);
            let mut out = Vec::new();
            let regs = UserRegs { ip: base + 0x10, sp: 0x7000, fp: 0, lr: 0 };
            let st = u.unwind(7, &regs, &[0u8; 64], &mut out);
            assert_eq!(out.first(), Some(&Frame::user(base + 0x10)), "{}", p.display());
            assert_ne!(st, StackStatus::Complete, "{}: {st:?}", p.display());
        }
        assert_eq!(u.stats().files_read, 0, "no hostile file may be accepted");
        assert!(u.module_cache().bytes() <= 1 << 20);
        // A build-id that does not match refuses even a good file, which loads without one.
        let exe = std::env::current_exe().unwrap();
        let own = tailprof_elf::file_build_id(File::open(&exe).unwrap());
        for (id, read) in [(None, 1), (own, 1), (Some(vec![1u8, 2, 3]), 0)] {
            let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
            u.observe(&mmap(8, 0x1000, 0x1000, 0x1000, exe.to_str().unwrap(), id), None);
            let mut out = Vec::new();
            u.unwind(8, &UserRegs { ip: 0x1010, sp: 0x7000, fp: 0, lr: 0 }, &[0u8; 64], &mut out);
            assert_eq!((u.stats().files_read, u.stats().files_failed), (read, 1 - read));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `.eh_frame` for a function at the start of its code range laid out as a runtime
    /// lays it out (docs of [`JitUnwind`]): `push rbp` (1 byte), then 6 bytes, then the
    /// body with `CFA = rsp + 32`, the return address at CFA - 8, rbp at CFA - 16.
    fn jit_eh_frame(code_len: u64) -> Vec<u8> {
        let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1];
        while cie.len() % 4 != 0 {
            cie.push(0);
        }
        let mut e = ((cie.len()) as u32).to_le_bytes().to_vec();
        e.extend(cie);
        let fde_at = e.len();
        // pc_begin (pcrel sdata4) is relative to its own field at fde_at + 8; the
        // .eh_frame starts align8(code_len) after the code.
        let eh_at = code_len.next_multiple_of(8) as i64;
        let pc_begin = -(eh_at + fde_at as i64 + 8) as i32;
        let mut body = Vec::new();
        body.extend_from_slice(&((fde_at + 4) as u32).to_le_bytes()); // CIE pointer
        body.extend_from_slice(&pc_begin.to_le_bytes());
        body.extend_from_slice(&(code_len as u32).to_le_bytes());
        body.push(0); // augmentation length
        body.extend_from_slice(&[0x41, 0x0e, 16, 0x86, 2, 0x46, 0x0e, 32]);
        while (body.len() + 4) % 4 != 0 {
            body.push(0);
        }
        e.extend_from_slice(&(body.len() as u32).to_le_bytes());
        e.extend(body);
        e.extend_from_slice(&[0; 4]);
        e
    }

    /// Issue 23: JIT code with a jitdump UNWINDING_INFO is walked with its CFI (it reaches
    /// the caller the frame pointer would skip); without it (never given, dropped by a
    /// load at the same address, or refused over the bound) the frame-pointer fallback
    /// is used and counted; a move carries the information along; garbage never panics.
    #[test]
    fn jit_unwind_info_reaches_the_caller_and_the_fallback_is_counted() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (code, other, caller, fp_caller) = (0x10000u64, 0x50000u64, 0x20010u64, 0x30010u64);
        let sp = 0x7000_0000u64;
        let fp = sp + 0x100;
        let mut stack = vec![0u8; 0x200];
        stack[24..32].copy_from_slice(&caller.to_le_bytes()); // [CFA - 8]: return address
        stack[0x108..0x110].copy_from_slice(&fp_caller.to_le_bytes()); // [rbp + 8]
        let walk = |u: &mut Unwinder, ip: u64| {
            let mut out = Vec::new();
            u.unwind(9, &UserRegs { ip, sp, fp, lr: 0 }, &stack, &mut out);
            out.iter().map(|f| f.ip).collect::<Vec<_>>()
        };
        let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
        u.observe(&mmap(9, code, 0x100000, 0, "//anon", None), None);
        let code_len = 28;
        let info = JitUnwind { code: code..code + code_len, eh_frame: jit_eh_frame(code_len), eh_frame_hdr: Vec::new() };
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller], "no unwind information yet: frame pointers");
        assert_eq!(u.stats().fallback_frames, 2);
        assert!(u.add_jit(9, info.clone()));
        assert_eq!(walk(&mut u, code + 17), [code + 17, caller], "the JIT function's CFI");
        assert_eq!((u.stats().jit_cfi_frames, u.stats().fallback_frames), (1, 3));
        // Moved: the information follows the code.
        u.move_jit(9, code, other, code_len);
        assert_eq!(walk(&mut u, other + 17), [other + 17, caller]);
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller]);
        // A load without information at an overlapping address drops it.
        u.add_jit(9, JitUnwind { code: other + 8..other + 64, ..Default::default() });
        assert_eq!(walk(&mut u, other + 17), [other + 17, fp_caller]);
        assert_eq!(u.jit_bytes(), 0);
        // Garbage as .eh_frame / .eh_frame_hdr: no panic, the fallback.
        for (eh, hdr) in [(vec![0xff; 64], vec![]), (jit_eh_frame(code_len), vec![1, 0x1b, 3, 0x3b, 0xff, 0xff, 0xff, 0x7f, 9, 0, 0, 0])] {
            u.add_jit(9, JitUnwind { code: code..code + code_len, eh_frame: eh, eh_frame_hdr: hdr });
            let frames = walk(&mut u, code + 17);
            assert_eq!(frames[0], code + 17);
        }
        // Bounded: over the per-process bytes, refused and counted.
        let mut u = Unwinder::new(Box::new(open_host_file), Limits { max_jit_bytes: 100, ..Limits::default() });
        u.observe(&mmap(9, code, 0x100000, 0, "//anon", None), None);
        assert!(!u.add_jit(9, JitUnwind { eh_frame: vec![0; 101], ..info.clone() }));
        assert_eq!(u.stats().jit_unwind_refused, 1);
        assert_eq!(walk(&mut u, code + 17), [code + 17, fp_caller]);
        // A process not known (gone): nothing kept.
        assert!(!u.add_jit(10, info));
    }

    /// Issue 23 (real Node): the recorder walks a stack early while draining and keeps
    /// the walk only when complete; a stack through JIT code (walked by frame pointers or
    /// with its unwind information) is not, and is walked again later. Before
    /// `uncount_last` its frames were counted twice (twice as many JIT frames with unwind
    /// information as samples through them).
    #[test]
    fn discarded_walks_are_counted_once() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (code, caller, fp_caller) = (0x10000u64, 0x20010u64, 0x30010u64);
        let sp = 0x7000_0000u64;
        let fp = sp + 0x100;
        let mut stack = vec![0u8; 0x200];
        stack[24..32].copy_from_slice(&caller.to_le_bytes());
        stack[0x108..0x110].copy_from_slice(&fp_caller.to_le_bytes());
        let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
        u.observe(&mmap(9, code, 0x100000, 0, "//anon", None), None);
        let code_len = 28;
        assert!(u.add_jit(9, JitUnwind { code: code..code + code_len, eh_frame: jit_eh_frame(code_len), eh_frame_hdr: Vec::new() }));
        let regs = UserRegs { ip: code + 17, sp, fp, lr: 0 };
        let mut out = Vec::new();
        u.unwind(9, &regs, &stack, &mut out);
        let once = u.stats();
        assert_eq!((once.stacks, once.jit_cfi_frames), (1, 1));
        u.uncount_last();
        u.uncount_last(); // only the last walk, once
        let s = u.stats();
        assert_eq!((s.stacks, s.frames, s.jit_cfi_frames, s.fallback_frames), (0, 0, 0, 0));
        out.clear();
        u.unwind(9, &regs, &stack, &mut out);
        assert_eq!(u.stats(), once);
        // A process not known: the leaf alone, taken back too.
        u.unwind(10, &regs, &stack, &mut out);
        u.uncount_last();
        assert_eq!(u.stats(), once);
    }

    fn mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str, build_id: Option<Vec<u8>>) -> Record {
        Record::Mmap(tailprof_format::Mmap { pid, tid: pid, start, len, pgoff, path: path.into(), build_id, prot: 5, ..Default::default() })
    }

    #[inline(never)]
    fn capture(u: &mut Unwinder, pid: u32) -> (Vec<Frame>, StackStatus) {
        let (ip, sp, bp): (u64, u64, u64);
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("lea {0}, [rip]", "mov {1}, rsp", "mov {2}, rbp", out(reg) ip, out(reg) sp, out(reg) bp);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            (ip, sp, bp) = (0, 0, 0);
        }
        // Copy 256 KiB of our stack (or up to its end).
        let mut copy = vec![0u8; 256 << 10];
        let mut n = 0;
        // SAFETY: reading our own stack above sp, stopping at the first unmapped page via
        // process_vm_readv semantics is overkill here; read within the main test thread's
        // stack, bounded by /proc/self/maps' [stack]-less thread stacks: use process_vm_readv.
        let local = libc::iovec { iov_base: copy.as_mut_ptr().cast(), iov_len: copy.len() };
        let remote = libc::iovec { iov_base: sp as *mut _, iov_len: copy.len() };
        let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if r > 0 {
            n = r as usize;
        }
        if n == 0 {
            // Partial reads stop at an unmapped page; try smaller.
            for size in [64 << 10, 16 << 10, 4 << 10] {
                let local = libc::iovec { iov_base: copy.as_mut_ptr().cast(), iov_len: size };
                let remote = libc::iovec { iov_base: sp as *mut _, iov_len: size };
                let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
                if r > 0 {
                    n = r as usize;
                    break;
                }
            }
        }
        let mut out = Vec::new();
        let st = u.unwind(pid, &UserRegs { ip, sp, fp: bp, lr: 0 }, &copy[..n], &mut out);
        (out, st)
    }
}
