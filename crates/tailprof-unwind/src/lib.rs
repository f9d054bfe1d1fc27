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
//! Every unwound stack gets a [`StackStatus`](tailprof_format::StackStatus): `Complete` when framehop reached the
//! outermost frame (CFI says the return address is undefined, as in `_start` and
//! `clone3`, or a null return address/frame pointer) through code with unwind information;
//! `CopyExhausted` when a read fell beyond the end of the copied stack; `NoUnwindInfo` when
//! the walk failed in code that has no CFI (an unknown mapping, JIT code, a file that
//! could not be read); `UnwindError` for other failures; `MaxDepth` at the frame limit;
//! `UserMissing` without registers or a stack copy (a kernel thread). A walk that ends
//! normally but used the frame-pointer fallback in code without CFI is `Unknown`.

mod callchain;
mod jit;
mod module;
mod process;
mod regs;
mod unwinder;

pub use callchain::{callchain_frames, callchain_status, lbr_frames, Callchain};
pub use jit::{JitUnwind, MAX_JIT_CODE};
pub use module::{open_host_file, Bytes, FileOpener, Mapping, ModuleCache};
pub use regs::{UserRegs, UNWIND_REGS_MASK};
pub use unwinder::{UnwindStats, Unwinder, MAX_WALKS};

/// Limits on what the unwinder reads and keeps (every size comes from an untrusted file).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Frames per stack (then [`StackStatus::MaxDepth`](tailprof_format::StackStatus::MaxDepth)).
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

#[cfg(test)]
mod test_support {
    use tailprof_format::Record;

    /// `.eh_frame` for a function at the start of its code range laid out as a runtime
    /// lays it out (docs of [`JitUnwind`]): `push rbp` (1 byte), then 6 bytes, then the
    /// body with `CFA = rsp + 32`, the return address at CFA - 8, rbp at CFA - 16.
    pub(crate) fn jit_eh_frame(code_len: u64) -> Vec<u8> {
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

    pub(crate) fn mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str, build_id: Option<Vec<u8>>) -> Record {
        Record::Mmap(tailprof_format::Mmap { pid, tid: pid, start, len, pgoff, path: path.into(), build_id, prot: 5, ..Default::default() })
    }
}
