//! Address spaces over time, for symbolization.
//!
//! [`AddressSpaces`] is a [`Sink`] over the one address-space model
//! ([`tailprof_format::addrspace`], whose rules it follows: which mappings count, overlaps,
//! exec, fork, when an exited process is forgotten, the bounds). Because records arrive in
//! time order, the state seen when a sample arrives is the state at the sample's time; a
//! caller resolves a sample's IP with [`AddressSpaces::resolve`] right then (or caches the
//! answer keyed by [`AddressSpaces::generation`], which changes whenever the pid's mappings
//! change).
//!
//! What it adds to the model: binaries interned ([`BinaryId`]) by (path, build-id), so a
//! file replaced during the trace is a different binary, classified by kind
//! ([`BinaryKind`]); and thread names (a new thread inherits its creator's name).

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::addrspace;
use tailprof_format::{Comm, CpuMode, Mmap, Sink, Task};

/// Index into [`AddressSpaces::binaries`] (dense, in order of first sight; 0..=2 are
/// the fixed [`BIN_KERNEL`], [`BIN_UNMAPPED`], [`BIN_GUEST`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BinaryId(pub u32);

impl BinaryId {
    /// Position in [`AddressSpaces::binaries`].
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

pub use addrspace::{KERNEL_HALF, KERNEL_PID};

/// What kind of object a binary id stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryKind {
    /// A file on disk (ELF executable or shared object, usually).
    File,
    /// The kernel image (`[kernel]`).
    Kernel,
    /// A kernel module mapping (path of the `.ko` or `[module]`).
    KernelModule,
    /// Anonymous memory: `//anon`, `[anon:...]`, `[heap]`, `[stack]`, memfd (often JIT).
    Anon,
    /// `[vdso]`, `[vsyscall]` and other kernel-provided images not on disk.
    Vdso,
    /// Addresses no mapping covers.
    Unmapped,
    /// JIT code named by a runtime's perf map or jitdump ([`crate::jit`]): the
    /// location's offset is the entry's number in the resolver's JIT tables.
    Jit,
    /// Guest kernel/user or hypervisor code.
    Guest,
}

/// One interned binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binary {
    pub path: String,
    pub build_id: Option<Vec<u8>>,
    pub kind: BinaryKind,
}

impl Binary {
    /// The last path component (the whole name for `[special]` names).
    pub fn short_name(&self) -> &str {
        short_name(&self.path)
    }
}

/// The last path component of `path`, or `path` itself for `[special]` names.
pub fn short_name(path: &str) -> &str {
    if path.starts_with('[') {
        return path;
    }
    path.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(path)
}

/// Where an address lives: a binary and an offset in it. For [`BinaryKind::File`] and
/// [`BinaryKind::Vdso`] the offset is the *file offset* (`ip - start + pgoff`); for
/// kernel, anonymous, guest and unmapped addresses it is the address itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    pub binary: BinaryId,
    pub offset: u64,
}

/// One mapping of an address space; its data is the mapped binary.
pub type Mapping = addrspace::Mapping<BinaryId>;

impl Default for BinaryId {
    fn default() -> Self {
        BIN_UNMAPPED
    }
}

/// Per-process mappings and per-thread names, current as of the last record handled.
#[derive(Debug)]
pub struct AddressSpaces {
    binaries: Vec<Binary>,
    binary_index: FxHashMap<(String, Option<Vec<u8>>), BinaryId>,
    spaces: addrspace::AddressSpaces<BinaryId>,
    comms: Vec<String>,
    comm_index: FxHashMap<String, u32>,
    thread_comm: FxHashMap<u32, u32>,
}

impl Default for AddressSpaces {
    fn default() -> Self {
        Self::new()
    }
}

/// Fixed binary ids.
pub const BIN_KERNEL: BinaryId = BinaryId(0);
pub const BIN_UNMAPPED: BinaryId = BinaryId(1);
pub const BIN_GUEST: BinaryId = BinaryId(2);

impl AddressSpaces {
    pub fn new() -> Self {
        let mut a = AddressSpaces {
            binaries: Vec::new(),
            binary_index: FxHashMap::default(),
            spaces: addrspace::AddressSpaces::default(),
            comms: Vec::new(),
            comm_index: FxHashMap::default(),
            thread_comm: FxHashMap::default(),
        };
        assert_eq!(a.intern_binary("[kernel]", None, BinaryKind::Kernel), BIN_KERNEL);
        assert_eq!(a.intern_binary("[unknown]", None, BinaryKind::Unmapped), BIN_UNMAPPED);
        assert_eq!(a.intern_binary("[guest]", None, BinaryKind::Guest), BIN_GUEST);
        a
    }

    fn intern_binary(&mut self, path: &str, build_id: Option<&[u8]>, kind: BinaryKind) -> BinaryId {
        let key = (path.to_owned(), build_id.map(<[u8]>::to_vec));
        if let Some(&id) = self.binary_index.get(&key) {
            return id;
        }
        let id = BinaryId(self.binaries.len() as u32);
        self.binaries.push(Binary { path: key.0.clone(), build_id: key.1.clone(), kind });
        self.binary_index.insert(key, id);
        id
    }

    /// The one binary of JIT code named from perf maps and jitdumps (`[jit]`).
    pub fn jit_binary(&mut self) -> BinaryId {
        self.intern_binary("[jit]", None, BinaryKind::Jit)
    }

    /// All binaries seen so far, indexed by [`BinaryId`].
    pub fn binaries(&self) -> &[Binary] {
        &self.binaries
    }

    pub fn binary(&self, id: BinaryId) -> &Binary {
        &self.binaries[id.index()]
    }

    /// Changes whenever the mappings of `pid` change (0: no mappings were ever seen).
    /// [`KERNEL_PID`] gives the kernel space's generation.
    #[inline]
    pub fn generation(&self, pid: u32) -> u32 {
        self.spaces.generation(pid)
    }

    /// The mapping of `pid` covering `ip` right now.
    pub fn mapping(&self, pid: u32, ip: u64) -> Option<&Mapping> {
        self.spaces.find(pid, ip)
    }

    /// Mappings of `pid`, sorted by address.
    pub fn mappings(&self, pid: u32) -> &[Mapping] {
        self.spaces.mappings(pid)
    }

    /// The address-space model underneath (its counters: what was forgotten or dropped).
    pub fn model(&self) -> &addrspace::AddressSpaces<BinaryId> {
        &self.spaces
    }

    /// Whether a sample with this mode and IP counts as kernel code.
    #[inline]
    pub fn is_kernel_sample(cpumode: CpuMode, ip: u64) -> bool {
        addrspace::AddressSpaces::<BinaryId>::is_kernel_sample(cpumode, ip)
    }

    /// Where `ip` of a sample of process `pid` in `cpumode` lives, given the current
    /// mappings. Never fails: addresses no mapping covers resolve to
    /// ([`BIN_UNMAPPED`], ip).
    pub fn resolve(&self, pid: u32, ip: u64, cpumode: CpuMode) -> Location {
        match cpumode {
            CpuMode::GuestKernel | CpuMode::GuestUser | CpuMode::Hypervisor => return Location { binary: BIN_GUEST, offset: ip },
            _ => {}
        }
        if Self::is_kernel_sample(cpumode, ip) || pid == KERNEL_PID {
            return self.resolve_kernel(ip);
        }
        if let Some(m) = self.spaces.find(pid, ip) {
            let kind = self.binaries[m.data.index()].kind;
            let offset = match kind {
                BinaryKind::File | BinaryKind::Vdso => m.file_offset(ip),
                _ => ip,
            };
            return Location { binary: m.data, offset };
        }
        if ip >= KERNEL_HALF {
            // e.g. a user-mode sample whose mapping we never saw, in the kernel half.
            return self.resolve_kernel(ip);
        }
        Location { binary: BIN_UNMAPPED, offset: ip }
    }

    fn resolve_kernel(&self, ip: u64) -> Location {
        let binary = match self.spaces.find(KERNEL_PID, ip) {
            Some(m) if self.binaries[m.data.index()].kind == BinaryKind::KernelModule => m.data,
            _ => BIN_KERNEL,
        };
        Location { binary, offset: ip }
    }

    /// The current name of thread `tid`, if any COMM (or inherited name) was seen.
    pub fn comm(&self, tid: u32) -> Option<&str> {
        self.thread_comm.get(&tid).map(|&c| self.comms[c as usize].as_str())
    }

    /// Interned id of the current name of `tid` (see [`AddressSpaces::comm_name`]).
    #[inline]
    pub fn comm_id(&self, tid: u32) -> Option<u32> {
        self.thread_comm.get(&tid).copied()
    }

    pub fn comm_name(&self, id: u32) -> &str {
        &self.comms[id as usize]
    }

    fn intern_comm(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.comm_index.get(s) {
            return id;
        }
        let id = self.comms.len() as u32;
        self.comms.push(s.to_owned());
        self.comm_index.insert(s.to_owned(), id);
        id
    }

    /// Address of the kernel's `_text` when the trace was taken, from its
    /// `[kernel.kallsyms]` mapping (to detect KASLR relocation since).
    pub fn kernel_text(&self) -> Option<u64> {
        self.spaces.kernel_text()
    }

    /// Number of processes with an address space.
    pub fn process_count(&self) -> usize {
        self.spaces.process_count()
    }
}

/// Classify a mapping by its path (and mode).
pub fn classify(path: &str, kernel: bool) -> BinaryKind {
    if kernel {
        if path.starts_with("[kernel.kallsyms]") || path.starts_with("[kernel") || path.is_empty() {
            return BinaryKind::Kernel;
        }
        return BinaryKind::KernelModule;
    }
    if path.is_empty()
        || path.starts_with("//anon")
        || path.starts_with("/memfd:")
        || path.starts_with("[anon")
        || path == "[heap]"
        || path.starts_with("[stack")
        || path.starts_with("/dev/zero")
        || path.starts_with("/SYSV")
    {
        return BinaryKind::Anon;
    }
    if path.starts_with('[') {
        return BinaryKind::Vdso;
    }
    BinaryKind::File
}

impl Sink for AddressSpaces {
    fn handle_mmap(&mut self, m: &Mmap) {
        let kernel = m.pid == KERNEL_PID || m.cpumode.is_kernel();
        let kind = classify(&m.path, kernel);
        if kind == BinaryKind::Kernel || m.len == 0 || !addrspace::may_hold_code(m.prot) {
            // Not kept by the model (the kernel image resolves by address); no binary.
            self.spaces.mmap(m, None);
            return;
        }
        let binary = self.intern_binary(&m.path, m.build_id.as_deref(), kind);
        if let Some(mapping) = self.spaces.mmap(m, None) {
            mapping.data = binary;
        }
    }

    fn handle_comm(&mut self, c: &Comm) {
        let id = self.intern_comm(&c.comm);
        self.thread_comm.insert(c.tid, id);
        self.spaces.comm(c);
    }

    fn handle_fork(&mut self, t: &Task) {
        if let Some(&c) = self.thread_comm.get(&t.ptid) {
            self.thread_comm.insert(t.tid, c);
        }
        self.spaces.fork(t);
    }

    fn handle_exit(&mut self, t: &Task) {
        self.spaces.exit(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str) -> Mmap {
        Mmap { pid, tid: pid, start, len, pgoff, cpumode: CpuMode::User, path: path.into(), ..Default::default() }
    }

    #[test]
    fn resolve_file_offset() {
        let mut a = AddressSpaces::new();
        a.handle_mmap(&mmap(10, 0x40_0000, 0x1000, 0x2000, "/bin/x"));
        let l = a.resolve(10, 0x40_0123, CpuMode::User);
        assert_eq!(a.binary(l.binary).path, "/bin/x");
        assert_eq!(l.offset, 0x2123);
        assert_eq!(a.resolve(10, 0x40_1000, CpuMode::User).binary, BIN_UNMAPPED);
        assert_eq!(a.resolve(11, 0x40_0123, CpuMode::User).binary, BIN_UNMAPPED);
        // A thread's mmap lands in its process's address space.
        a.handle_mmap(&Mmap { tid: 12, ..mmap(10, 0x50_0000, 0x1000, 0, "/lib/y.so") });
        assert_eq!(a.binary(a.resolve(10, 0x50_0010, CpuMode::User).binary).path, "/lib/y.so");
        assert_eq!(a.resolve(12, 0x50_0010, CpuMode::User).binary, BIN_UNMAPPED);
    }

    #[test]
    fn overlapping_mmap_splits() {
        let mut a = AddressSpaces::new();
        a.handle_mmap(&mmap(1, 0x1000, 0x3000, 0, "/a"));
        let g0 = a.generation(1);
        a.handle_mmap(&mmap(1, 0x2000, 0x1000, 0, "/b"));
        assert_ne!(a.generation(1), g0);
        let ms = a.mappings(1);
        assert_eq!(ms.len(), 3);
        assert_eq!((ms[0].start, ms[0].end), (0x1000, 0x2000));
        assert_eq!((ms[2].start, ms[2].end, ms[2].pgoff), (0x3000, 0x4000, 0x2000));
        assert_eq!(a.resolve(1, 0x3800, CpuMode::User).offset, 0x2800);
        assert_eq!(a.binary(a.resolve(1, 0x2800, CpuMode::User).binary).path, "/b");
        // Cover everything.
        a.handle_mmap(&mmap(1, 0x0, 0x10000, 0, "/c"));
        assert_eq!(a.mappings(1).len(), 1);
    }

    #[test]
    fn exec_resets_and_fork_copies() {
        let mut a = AddressSpaces::new();
        a.handle_comm(&Comm { pid: 5, tid: 5, comm: "sh".into(), ..Default::default() });
        a.handle_mmap(&mmap(5, 0x1000, 0x1000, 0, "/bin/sh"));
        a.handle_fork(&Task { pid: 6, ppid: 5, tid: 6, ptid: 5, time: 1 });
        assert_eq!(a.comm(6), Some("sh"));
        assert_eq!(a.binary(a.resolve(6, 0x1100, CpuMode::User).binary).path, "/bin/sh");
        // A new thread of 6 shares its space.
        a.handle_fork(&Task { pid: 6, ppid: 6, tid: 7, ptid: 6, time: 2 });
        assert_eq!(a.comm(7), Some("sh"));
        a.handle_comm(&Comm { pid: 6, tid: 6, exec: true, comm: "ls".into(), time: 3 });
        assert_eq!(a.resolve(6, 0x1100, CpuMode::User).binary, BIN_UNMAPPED);
        assert_eq!(a.binary(a.resolve(5, 0x1100, CpuMode::User).binary).path, "/bin/sh");
        assert_eq!(a.comm(6), Some("ls"));
        assert_eq!(a.comm(5), Some("sh"));
    }

    #[test]
    fn kernel_addresses() {
        let mut a = AddressSpaces::new();
        assert_eq!(a.resolve(1, 0xffff_ffff_8100_0000, CpuMode::Kernel).binary, BIN_KERNEL);
        assert_eq!(a.resolve(1, 0xffff_ffff_8100_0000, CpuMode::Unknown).binary, BIN_KERNEL);
        a.handle_mmap(&Mmap {
            pid: KERNEL_PID,
            start: 0xffff_ffff_c000_0000,
            len: 0x1000,
            cpumode: CpuMode::Kernel,
            path: "/lib/modules/x/ext4.ko".into(),
            ..Default::default()
        });
        a.handle_mmap(&Mmap {
            pid: KERNEL_PID,
            start: 0xffff_ffff_8100_0000,
            len: u64::MAX - 0xffff_ffff_8100_0000,
            pgoff: 0xffff_ffff_8100_0000,
            cpumode: CpuMode::Kernel,
            path: "[kernel.kallsyms]".into(),
            ..Default::default()
        });
        assert_eq!(a.kernel_text(), Some(0xffff_ffff_8100_0000));
        let l = a.resolve(3, 0xffff_ffff_c000_0010, CpuMode::Kernel);
        assert_eq!(a.binary(l.binary).kind, BinaryKind::KernelModule);
        assert_eq!(l.offset, 0xffff_ffff_c000_0010);
        assert_eq!(a.resolve(3, 0x1000, CpuMode::GuestUser).binary, BIN_GUEST);
    }

    #[test]
    fn classify_paths() {
        assert_eq!(classify("//anon", false), BinaryKind::Anon);
        assert_eq!(classify("[vdso]", false), BinaryKind::Vdso);
        assert_eq!(classify("/usr/lib/libc.so.6", false), BinaryKind::File);
        assert_eq!(classify("[kernel.kallsyms]_text", true), BinaryKind::Kernel);
        assert_eq!(short_name("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(short_name("[vdso]"), "[vdso]");
    }
}
