//! Causes (issue 21): who made an item wait, and who took its CPU.
//!
//! Read in the same pass as the item stacks ([`crate::stacks`]), from [`Wakeup`] records
//! (`sched:sched_waking`: waker, its stack, wakee) and [`Switch`] records (with
//! `next_prev` from CPU-wide events):
//!
//! - **woken_by**: every blocked interval of an item's thread that a recorded wakeup ended
//!   (the last wakeup of the thread between its switch-out and its switch-in) names the
//!   waker (pid, tid, comm), the item the waker was inside at that moment, the waker's
//!   stack, and, when the waker is a thread (not an interrupt on an idle CPU), the
//!   **critical path**: what the waker did between the start of the wait and the wakeup:
//!   its on-CPU time (its off-CPU time subtracted from the window, split over its
//!   samples' stacks in the window), its runnable time, and its blocked time; blocked
//!   time that another thread's wakeup ended is explained by that thread in turn, to
//!   depth [`MAX_DEPTH`], visiting at most [`MAX_VISITS`] history entries per item.
//!   Wakeups from interrupt context are named by kind from the waker's kernel frames
//!   ([`IrqKind`]).
//! - **preempted_by**: every runnable interval (preempted, waiting for a CPU) of an
//!   item's thread names the threads that switched in on the CPU it was preempted on,
//!   with the time each ran there during the interval (from the switch-ins of that CPU).
//!
//! - **noise** ([`Noise`], per item in [`crate::stacks::ItemStacks::noise`]): the item's
//!   samples with kernel frames by what the kernel was doing ([`kernel_work`]: hard and
//!   soft interrupts, page faults, system calls by name; names trusted only when the
//!   trace was read with kernel symbols, else "unknown"), as samples × the mean sample
//!   interval, and its thread's migrations (switch-ins on another CPU inside the item).
//!
//! Bounded: per thread the last [`MAX_HISTORY`] samples and off-CPU intervals, per CPU
//! the last [`MAX_CPU_HISTORY`] switch-ins; older ones are forgotten (counted). Per item
//! (a million in a large trace) the state is dense by item index, not a map per item.
//!
//! The parts: [`kernel`] (interrupt kinds of wakers, on-CPU noise from kernel frames),
//! `tracker` (the stack pass' state: wakers with their critical paths, preemption),
//! [`span`] (the agent's per-span form), [`explain`] (`items --explain`'s "Causes" and
//! the whole-trace interference view).

use serde::Serialize;

pub mod explain;
pub mod kernel;
pub mod span;
mod tracker;
// The agent's critical path of a span's wakers (issue 21 part 8), from raw records.
mod span_path;

pub use explain::*;
pub use kernel::*;
pub use span::*;
pub use span_path::{span_critical_paths, PathPart, SampleKeys, SpanPaths, WakerPath};
pub(crate) use tracker::CauseTracker;

/// Critical path depth (the waker, the waker's waker, ...).
pub const MAX_DEPTH: u32 = 3;
/// History entries visited per item's critical paths at most.
pub const MAX_VISITS: usize = 200_000;
/// Samples and off-CPU intervals kept per thread.
pub const MAX_HISTORY: usize = 1 << 16;
/// Switch-ins kept per CPU.
pub const MAX_CPU_HISTORY: usize = 1 << 16;
/// `item` of no item.
const NO_ITEM: u32 = u32::MAX;
/// `path` of no stack.
pub(crate) const NO_PATH: u32 = u32::MAX;

/// One step of a waker's critical path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathState {
    Cpu,
    Blocked,
    Runnable,
}

impl PathState {
    pub fn name(self) -> &'static str {
        match self {
            PathState::Cpu => "cpu",
            PathState::Blocked => "blocked",
            PathState::Runnable => "runnable",
        }
    }
}

/// One wakeup that ended a blocked interval of an item's thread inside the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WakeEdge {
    /// The wakeup.
    pub time_ns: u64,
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub wakee_pid: u32,
    pub wakee_tid: u32,
    /// When the woken thread ran again.
    pub resume_ns: u64,
}

/// Wake edges kept at most for a timeline.
pub const MAX_WAKE_EDGES: usize = 1 << 20;

/// What the critical path did during the wait, per state and stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct During {
    pub state: PathState,
    pub ns: u64,
    /// Root first; empty when no sample or stack says where.
    pub frames: Vec<String>,
}

/// One distinct waker of an item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WokenBy {
    /// Blocked time the waker's wakeups ended (within the item).
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// When its largest wakeup happened (trace clock): the wake edge's time.
    pub at_ns: u64,
    /// The item the waker was inside at its (largest) wakeup, and its class.
    pub item: Option<u64>,
    pub class: Option<String>,
    pub irq: Option<IrqKind>,
    /// The waker's stack at its largest wakeup, root first.
    pub frames: Vec<String>,
    /// The critical path, largest first.
    pub during: Vec<During>,
}

/// A thread that ran on the item's CPU while the item's thread was runnable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreemptedBy {
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub item: Option<u64>,
}

/// The causes of one item.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ItemCauses {
    pub id: u64,
    pub woken_by: Vec<WokenBy>,
    pub preempted_by: Vec<PreemptedBy>,
}

/// What the trace says about causes, whole-trace counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CauseStats {
    /// The trace has wakeup records (the recorder recorded them).
    pub recorded: bool,
    pub wakeups: u64,
    /// Blocked intervals of item threads with / without a recorded wakeup.
    pub blocked_explained: u64,
    pub blocked_unexplained: u64,
    /// History entries forgotten (bounds) and critical paths cut by the visit bound.
    pub forgotten: u64,
    pub cut_paths: u64,
}
