//! Frame-pointer and LBR chains the recorder could not judge, judged after symbolization
//! by their outermost frame: complete (an entry function), broken, or unknown.

use crate::resolve::{LocId, Resolver};

/// Status name of a frame-pointer or LBR chain judged broken at report time (not a stored
/// status: the recorder stores such chains as `unknown`, see [`chain_end`]).
pub const BROKEN: &str = "broken";
pub(super) const BROKEN_REASON: &str = "broken chain (frame pointers omitted)";

/// Functions a thread's or process's stack starts in: a frame-pointer or LBR chain whose
/// outermost user frame is one of these reached the outermost frame. From the stacks of
/// this machine (Debian 12, glibc 2.36: main threads end in `__libc_start_call_main`,
/// threads in `start_thread`; the dynamic loader's startup in `_start`), plus the other
/// entry points of glibc, musl and the kernel.
const ENTRY_FUNCTIONS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "__clone",
    "clone3",
    "__clone3",
    "__clone_internal",
    "_dl_start",
    "_dl_start_user",
    // musl
    "__libc_start_main_stage2",
    "start",
    // kernel threads (a chain with no user part)
    "ret_from_fork",
    "ret_from_fork_asm",
    "kthread",
];

/// Rust threads start in `std::sys::…::thread::Thread::new::thread_start` (the path
/// changes between releases); Go's in `runtime.goexit`/`runtime.rt0_go`.
fn is_entry_function(name: &str) -> bool {
    ENTRY_FUNCTIONS.contains(&name)
        || name.ends_with("::thread_start")
        || name.starts_with("runtime.goexit")
        || name == "runtime.rt0_go"
        || name == "runtime.mstart"
}

/// How a chain of unknown completeness ends (judged after symbolization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChainEnd {
    /// The outermost user frame (kernel frame, for a kernel thread) is an entry function:
    /// complete.
    Entry = 0,
    /// It is another function, or an address in no file: the chain ended early.
    Broken = 1,
    /// Its code has no name (a stripped binary without symbols): cannot tell.
    Unnamed = 2,
}

/// `fn_<hex>`: a function of a stripped binary named by its `.eh_frame` range.
fn is_range_name(name: &str) -> bool {
    name.strip_prefix("fn_").is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The end of the chain `locs` (root first): its outermost user location, or its
/// outermost location when it has no user part.
pub(super) fn chain_end(locs: &[LocId], resolver: &Resolver, table: &crate::resolve::FunctionTable) -> ChainEnd {
    use crate::maps::BinaryKind;
    let kind = |l: &LocId| resolver.locations().get(l.index()).map(|loc| resolver.spaces().binary(loc.binary).kind);
    let kernel = |k: Option<BinaryKind>| matches!(k, Some(BinaryKind::Kernel | BinaryKind::KernelModule));
    let Some(root) = locs.iter().find(|l| !kernel(kind(l))).or(locs.first()) else {
        return ChainEnd::Unnamed;
    };
    match kind(root) {
        Some(BinaryKind::Unmapped | BinaryKind::Anon) | None => return ChainEnd::Broken,
        _ => {}
    }
    let Some(f) = table.of_loc.get(root.index()).and_then(|&r| table.rows.get(r as usize)) else {
        return ChainEnd::Unnamed;
    };
    if is_entry_function(&f.name) {
        ChainEnd::Entry
    } else if f.unknown_reason.is_some() || is_range_name(&f.name) {
        ChainEnd::Unnamed
    } else {
        ChainEnd::Broken
    }
}
