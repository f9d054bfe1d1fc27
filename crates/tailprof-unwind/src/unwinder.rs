//! The unwinder: address spaces, per-process modules, the walks.

use std::ops::Range;
use std::sync::Arc;

use framehop::{FrameAddress, Unwinder as _};
use tailprof_format::addrspace::{AddressSpaces, SpaceLimits};
use tailprof_format::{Frame, Record, StackStatus};

use crate::jit::JitTable;
use crate::module::{module_for, read_module, FileKey, FileOpener, ModuleCache};
use crate::process::{at_entry, Process};
use crate::regs::arch;
use crate::{Limits, UserRegs};

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
    /// [`Limits::max_jit_modules`], [`Limits::max_jit_total_bytes`] or [`MAX_JIT_CODE`](crate::MAX_JIT_CODE).
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
    pub(crate) spaces: AddressSpaces<()>,
    /// By pid; FxHash: looked up a few times per sample, keys are our own.
    pub(crate) procs: rustc_hash::FxHashMap<u32, Process>,
    modules: ModuleCache,
    pub(crate) limits: Limits,
    opener: Box<dyn FileOpener + Send>,
    tick: u64,
    pub(crate) stats: UnwindStats,
    /// The addresses in not yet loaded mappings of the current walk (kept: one allocation).
    unloaded: Vec<u64>,
    /// JIT code ranges with unwind information, per process (the source of truth: the
    /// derived [`Process`] state adds them as framehop modules).
    pub(crate) jit: rustc_hash::FxHashMap<u32, JitTable>,
    /// Bytes in `jit` over all processes.
    pub(crate) jit_bytes: usize,
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
        let (status, frames, counts) = self.walk(pid, regs, stack, out);
        self.count(frames, counts);
        status
    }

    /// [`Unwinder::unwind`] for a caller that keeps the walk only when it is complete and
    /// otherwise unwinds the same stack again later (the recorder's early walk while
    /// draining): the walk is counted only when complete, so every stack is counted once.
    /// Work done (files read) is counted either way.
    pub fn unwind_if_complete(&mut self, pid: u32, regs: &UserRegs, stack: &[u8], out: &mut Vec<Frame>) -> StackStatus {
        let (status, frames, counts) = self.walk(pid, regs, stack, out);
        if status == StackStatus::Complete {
            self.count(frames, counts);
        }
        status
    }

    fn count(&mut self, frames: u64, counts: WalkCounts) {
        self.stats.stacks += 1;
        self.stats.frames += frames;
        self.stats.jit_cfi_frames += counts.jit_cfi;
        self.stats.fallback_frames += counts.fallback;
    }

    /// One stack's walks (see [`Unwinder::unwind`]): its status, the frames it appended
    /// and their kinds, not counted yet.
    fn walk(&mut self, pid: u32, regs: &UserRegs, stack: &[u8], out: &mut Vec<Frame>) -> (StackStatus, u64, WalkCounts) {
        if !self.spaces.knows(pid) {
            // No mapping known: code has no unwind info; still keep the leaf.
            out.push(Frame::user(regs.ip));
            return (StackStatus::NoUnwindInfo, 1, WalkCounts::default());
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
        (status, (out.len() - start_len) as u64, counts)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{jit_eh_frame, mmap};
    use crate::{open_host_file, JitUnwind, Limits, UserRegs};

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

    /// Issue 23 (real Node): the recorder walks a stack early while draining and keeps
    /// the walk only when complete; a stack through JIT code (walked by frame pointers or
    /// with its unwind information) is not, and is walked again later. Before
    /// `unwind_if_complete` its frames were counted twice (twice as many JIT frames with
    /// unwind information as samples through them).
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
        // The early walk: not complete, so not counted.
        assert_ne!(u.unwind_if_complete(9, &regs, &stack, &mut out), StackStatus::Complete);
        let s = u.stats();
        assert_eq!((s.stacks, s.frames, s.jit_cfi_frames, s.fallback_frames), (0, 0, 0, 0));
        // Walked again when interned: counted once.
        out.clear();
        u.unwind(9, &regs, &stack, &mut out);
        let once = u.stats();
        assert_eq!((once.stacks, once.jit_cfi_frames), (1, 1));
        // A process not known: the leaf alone, not complete, not counted early either.
        u.unwind_if_complete(10, &regs, &stack, &mut out);
        assert_eq!(u.stats(), once);
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
