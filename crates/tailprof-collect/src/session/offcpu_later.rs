//! Off-CPU events opened at the first marker ([`OffCpuLater`]).

use crate::sys;

/// The off-CPU events of a recording that may get markers but was not asked for
/// `--off-cpu` ([`ItemOptions::off_cpu_on_markers`]): a dummy software event with
/// `context_switch` and the `sched:sched_switch` stack event, planned with the others but
/// opened only when the first marker is drained (`Recorder::open_off_cpu_later`): per
/// CPU for `-a`, else for every thread of the marked process on every CPU (re-listing
/// the threads until no new one shows up; threads created later inherit them), each
/// redirected into its CPU's ring. Until then nothing is open, so a program that never
/// writes a marker pays nothing. (Opening them disabled at the start and enabling them
/// later was measured first: even disabled, a context-switch event makes the kernel call
/// its switch hook and extra task events lengthen every context switch of the target,
/// +15-25 % on a pipe ping-pong, bench/offcpu-idle.sh.)
///
/// What the trace knows: the header says `off_cpu_from = first_marker` (or `start`),
/// and a process's context switches are complete from its first `Switch` record on
/// (that record comes after the enable); an item that began earlier has only part of its
/// off-CPU time (docs/FORMAT.md, `off_cpu_from`).
#[derive(Debug, Default)]
pub(super) struct OffCpuLater {
    /// The context-switch event's plan (`None`: not in this mode).
    pub plan: Option<crate::attr::AttrPlan>,
    /// Its decoder event index.
    pub event: u16,
    /// The sched_switch stack event (`None`: tracefs unavailable) and its decoder index.
    pub sched: Option<crate::attr::AttrPlan>,
    pub sched_event: u16,
    /// The `sched:sched_waking` events of causes (issue 21, thread and interrupt context)
    /// and their decoder indexes, opened with the other two.
    pub waking: Vec<(crate::attr::AttrPlan, u16)>,
    /// The CPU-wide context-switch event of causes (who ran while a thread was
    /// runnable), opened per CPU (not per task) with the others when CPU-wide events
    /// are permitted.
    pub cpu_switch: Option<(crate::attr::AttrPlan, u16)>,
    /// Every fd of the two events once opened.
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// CLOCK_MONOTONIC when they were enabled.
    pub enabled_at: Option<u64>,
}

impl OffCpuLater {
    /// Waiting for the first marker.
    pub fn pending(&self) -> bool {
        self.plan.is_some() && self.enabled_at.is_none()
    }

    /// Disable every fd (end of recording).
    pub fn disable(&self) {
        for fd in &self.fds {
            let _ = sys::ioctl_disable(std::os::fd::AsFd::as_fd(fd));
        }
    }
}
