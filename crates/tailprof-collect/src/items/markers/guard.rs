//! SIGBUS guard for marker regions a target can truncate (issue 10, finding 2).
//!
//! A region attached with `-p` lives in a file the target owns and can `ftruncate`; the
//! recorder's next access to a page past the new end raises SIGBUS, which by default kills
//! the recorder. Sealed memfds (launched commands) cannot shrink, but every region is
//! registered here anyway. The handler (installed once, chaining to whatever handler was
//! there before, e.g. the Rust runtime's stack-overflow handler) looks the faulting address
//! up in a fixed, lock-free table of registered ranges; on a hit it maps anonymous zero
//! pages over the whole region with `MAP_FIXED` (the faulting access then retries and reads
//! zeros: an empty region) and flags it, as Wayland compositors do for `wl_shm` pools. Any
//! other SIGBUS goes to the previous handler or the default action, unchanged.
//!
//! Only async-signal-safe work happens in the handler: atomic loads/stores and `mmap`.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Regions that can be guarded at once (more attached processes fail to attach markers).
pub const MAX_GUARDED: usize = 4096;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NO: AtomicBool = AtomicBool::new(false);
static BASE: [AtomicUsize; MAX_GUARDED] = [ZERO; MAX_GUARDED];
static LEN: [AtomicUsize; MAX_GUARDED] = [ZERO; MAX_GUARDED];
static HIT: [AtomicBool; MAX_GUARDED] = [NO; MAX_GUARDED];

static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The handler that was installed before ours; written once, before ours is installed.
static mut OLD: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: plain sigaction calls with valid pointers; OLD is written before our
        // handler can run (it is installed by the second call) and never again.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let old = &raw mut OLD;
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), (*old).as_mut_ptr()) != 0 {
                return;
            }
            if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::Release);
            }
        }
    });
}

/// Guard `len` bytes at `base` (a shared mapping of a region). `None` when the handler
/// could not be installed or the table is full: the caller must not use such a mapping.
pub fn register(base: *mut u8, len: usize) -> Option<usize> {
    install();
    if !INSTALLED.load(Ordering::Acquire) || base.is_null() || len == 0 {
        return None;
    }
    for i in 0..MAX_GUARDED {
        if LEN[i].compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            HIT[i].store(false, Ordering::Relaxed);
            BASE[i].store(base as usize, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Stop guarding entry `i` (before unmapping it).
pub fn unregister(i: usize) {
    BASE[i].store(0, Ordering::Release);
    HIT[i].store(false, Ordering::Relaxed);
    LEN[i].store(0, Ordering::Release);
}

/// Whether a SIGBUS hit entry `i` (its region was replaced by zero pages).
pub fn hit(i: usize) -> bool {
    HIT[i].load(Ordering::Acquire)
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for i in 0..MAX_GUARDED {
        let base = BASE[i].load(Ordering::Acquire);
        let len = LEN[i].load(Ordering::Acquire);
        if base != 0 && addr >= base && addr - base < len {
            // SAFETY: replaces our own registered mapping, in place, with zero pages.
            let p = unsafe {
                libc::mmap(
                    base as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                HIT[i].store(true, Ordering::Release);
                return; // the access retries on the zero pages
            }
        }
    }
    // Not ours: behave as if we were not there.
    // SAFETY: OLD was written before this handler was installed.
    unsafe {
        let old: &libc::sigaction = &*(&raw const OLD).cast::<libc::sigaction>();
        let f = old.sa_sigaction;
        if f == libc::SIG_DFL || f == libc::SIG_IGN {
            // Restore the default and return: the fault repeats and takes its default action.
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        } else if old.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(f);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(f);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    /// A shared file mapping whose file shrinks under it: the access reads zeros instead of
    /// killing the process.
    #[test]
    fn truncated_mapping_reads_zeros() {
        let path = std::env::temp_dir().join(format!("tailprof-guard-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let len = 3 * 4096;
        f.set_len(len as u64).unwrap();
        // SAFETY: mapping our own sized file.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) }
            as *mut u8;
        assert_ne!(p as *mut libc::c_void, libc::MAP_FAILED);
        let i = register(p, len).expect("guard installed");
        // SAFETY: in bounds of the mapping.
        unsafe { std::ptr::write_volatile(p.add(2 * 4096), 7u8) };
        assert!(!hit(i));
        f.set_len(0).unwrap();
        // SAFETY: in bounds of the mapping; the guard turns the SIGBUS into zero pages.
        let v = unsafe { std::ptr::read_volatile(p.add(2 * 4096)) };
        assert_eq!(v, 0);
        assert!(hit(i));
        unregister(i);
        // SAFETY: our mapping.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }
}
