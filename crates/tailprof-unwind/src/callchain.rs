//! The stack sources that need no unwinding: kernel callchains and LBR branch stacks.

use tailprof_format::{Frame, StackStatus};

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
}
