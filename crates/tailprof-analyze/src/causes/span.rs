//! The agent's form: the causes of one span of one thread from a window of raw records.

use tailprof_format::{Switch, SwitchKind, Wakeup};

use super::MAX_VISITS;

/// A context switch as the agent keeps it for [`span_causes`] (28 bytes, packed: the
/// agent keeps seconds of them): time, the thread, its CPU, the kind, and the other task
/// of a CPU-wide switch (`next_prev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, packed(4))]
pub struct SpanSwitch {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    other_pid: u32,
    other_tid: u32,
    /// The CPU (saturated at `u16::MAX`).
    cpu: u16,
    kind: u8,
    has_other: u8,
}

impl SpanSwitch {
    pub fn cpu(&self) -> u32 {
        self.cpu as u32
    }
    pub fn kind(&self) -> SwitchKind {
        match self.kind {
            1 => SwitchKind::OutPreempted,
            2 => SwitchKind::OutBlocked,
            _ => SwitchKind::In,
        }
    }
    /// `Switch::next_prev`.
    pub fn next_prev(&self) -> Option<(u32, u32)> {
        (self.has_other != 0).then_some((self.other_pid, self.other_tid))
    }
}

impl From<&Switch> for SpanSwitch {
    fn from(s: &Switch) -> Self {
        let (other_pid, other_tid) = s.next_prev.unwrap_or((0, 0));
        SpanSwitch {
            time: s.time,
            pid: s.pid,
            tid: s.tid,
            other_pid,
            other_tid,
            cpu: s.cpu.min(u16::MAX as u32) as u16,
            kind: match s.kind {
                SwitchKind::In => 0,
                SwitchKind::OutPreempted => 1,
                SwitchKind::OutBlocked => 2,
            },
            has_other: s.next_prev.is_some() as u8,
        }
    }
}

/// A wakeup as the agent keeps it for [`span_causes`] (20 bytes, packed): the waker
/// (pid, tid; 0/0 an interrupt on an idle CPU) and the woken thread. The waker's stack
/// and request are the caller's own data ([`SpanWaker::largest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, packed(4))]
pub struct SpanWakeup {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub wakee_tid: u32,
}

impl From<&Wakeup> for SpanWakeup {
    fn from(w: &Wakeup) -> Self {
        SpanWakeup { time: w.time, pid: w.pid, tid: w.tid, wakee_tid: w.wakee_tid }
    }
}

/// One waker of a span ([`span_causes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanWaker {
    pub pid: u32,
    pub tid: u32,
    /// Blocked time of the span its wakeups ended.
    pub ns: u64,
    /// Index (into the `wakeups` given) of its largest wakeup: the caller's own data for
    /// it (stack, the item the waker was inside) is found there.
    pub largest: usize,
}

/// One thread that ran on the span's CPU while its thread was runnable ([`span_causes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanPreempter {
    pub pid: u32,
    pub tid: u32,
    pub ns: u64,
    /// When it first ran there during the span (the caller's request of the thread then).
    pub at: u64,
}

/// The causes of one span of one thread ([`span_causes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanCauses {
    /// Largest first.
    pub woken_by: Vec<SpanWaker>,
    pub preempted_by: Vec<SpanPreempter>,
    /// Records looked at (bounded by [`MAX_VISITS`]; `cut` when the bound stopped it).
    pub visited: usize,
    pub cut: bool,
}

/// Who woke thread `tid` and who ran instead of it during `[begin, end]`, from a window
/// of raw records in time order (`switches`: its own and CPU-wide ones with `next_prev`;
/// `wakeups`). The same rules as the stack pass ([`crate::stacks`], module docs above):
/// each blocked interval inside the span is ended by the thread's last wakeup in it, each
/// runnable one names who switched in on the CPU it left. This is the agent's form (its
/// requests are known only at their end, so it explains them from the records it kept),
/// without the critical path. The thread is taken to be on CPU at `begin` (it wrote the
/// begin marker). At most [`MAX_VISITS`] records are looked at.
pub fn span_causes(tid: u32, begin: u64, end: u64, switches: &[SpanSwitch], wakeups: &[SpanWakeup]) -> SpanCauses {
    let mut woken: Vec<(SpanWaker, u64)> = Vec::new();
    let mut ran: Vec<SpanPreempter> = Vec::new();
    let mut budget = MAX_VISITS;
    // Explains one off-CPU interval [since, until) of the thread (left `cpu`).
    let mut close = |since: u64, kind: SwitchKind, cpu: u32, until: u64, budget: &mut usize| {
        let (b, e) = (since.max(begin), until.min(end));
        if e <= b {
            return;
        }
        if kind == SwitchKind::OutBlocked {
            // The thread's last wakeup in the interval (by another thread).
            let lo = wakeups.partition_point(|w| w.time < since);
            let hi = wakeups.partition_point(|w| w.time <= until);
            *budget = budget.saturating_sub(hi - lo);
            let Some(k) = (lo..hi).rev().find(|&k| wakeups[k].wakee_tid == tid && wakeups[k].tid != tid) else {
                return;
            };
            let w = wakeups[k];
            let ns = w.time.min(e).saturating_sub(b).max(1);
            match woken.iter_mut().find(|x| x.0.tid == w.tid && x.0.pid == w.pid) {
                Some((x, largest)) => {
                    x.ns = x.ns.saturating_add(ns);
                    if ns > *largest {
                        (x.largest, *largest) = (k, ns);
                    }
                }
                None => woken.push((SpanWaker { pid: w.pid, tid: w.tid, ns, largest: k }, ns)),
            }
        } else {
            // Who ran on `cpu` in [b, e): each switch-in there (or the next task a
            // switch-out names) starts a run; the thread's own switch-out at `since`
            // names the first.
            let lo = switches.partition_point(|s| s.time < since);
            let mut cur: Option<(u64, u32, u32)> = None;
            for s in &switches[lo..] {
                if *budget == 0 || s.time >= e {
                    break;
                }
                *budget -= 1;
                if s.cpu() != cpu {
                    continue;
                }
                let starts = match (s.kind(), s.next_prev()) {
                    (SwitchKind::In, _) => Some((s.pid, s.tid)),
                    (_, Some(np)) => Some(np),
                    _ => None,
                };
                if let Some((p, t)) = starts {
                    if let Some((t0, cp, ct)) = cur.take() {
                        add_ran(&mut ran, cp, ct, tid, t0.max(b), s.time.saturating_sub(t0.max(b)));
                    }
                    cur = Some((s.time, p, t));
                }
            }
            if let Some((t0, cp, ct)) = cur {
                add_ran(&mut ran, cp, ct, tid, t0.max(b), e.saturating_sub(t0.max(b)));
            }
        }
    };
    // (since, kind, cpu) while the thread is off CPU; on CPU at `begin`.
    let mut off: Option<(u64, SwitchKind, u32)> = None;
    for s in &switches[switches.partition_point(|s| s.time < begin)..] {
        if s.time > end || budget == 0 {
            break;
        }
        budget -= 1;
        if s.tid != tid {
            continue;
        }
        // A thread seen by both its own and a CPU-wide event has each switch twice:
        // the repeat closes an empty interval.
        let next = match s.kind() {
            SwitchKind::In => None,
            k => Some((s.time, k, s.cpu())),
        };
        if let Some((since, kind, cpu)) = std::mem::replace(&mut off, next) {
            close(since, kind, cpu, s.time, &mut budget);
        }
    }
    if let Some((since, kind, cpu)) = off {
        close(since, kind, cpu, end, &mut budget);
    }
    let mut out = SpanCauses {
        woken_by: woken.into_iter().map(|w| w.0).collect(),
        preempted_by: ran,
        visited: MAX_VISITS - budget,
        cut: budget == 0,
    };
    out.woken_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
    out.preempted_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
    out
}

fn add_ran(ran: &mut Vec<SpanPreempter>, pid: u32, tid: u32, me: u32, at: u64, ns: u64) {
    if ns == 0 || tid == me || tid == 0 {
        return;
    }
    match ran.iter_mut().find(|x| x.tid == tid && x.pid == pid) {
        Some(x) => {
            x.ns = x.ns.saturating_add(ns);
            x.at = x.at.min(at);
        }
        None => ran.push(SpanPreempter { pid, tid, ns, at }),
    }
}
