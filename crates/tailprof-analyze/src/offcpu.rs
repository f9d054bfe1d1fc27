//! Per-thread on-CPU / off-CPU timelines from `Switch` records.
//!
//! A thread is **on CPU** from a [`SwitchKind::In`] to the next switch-out, **runnable**
//! from a [`SwitchKind::OutPreempted`] to the next `In` (it was preempted and waits for a
//! CPU) and **blocked** from a [`SwitchKind::OutBlocked`] to the next `In` (asleep in the
//! kernel: a lock, the disk, a sleep). [`Timelines`] turns the switch stream (in time
//! order) into closed [`OffInterval`]s, each carrying the stack where the thread went off
//! CPU. What it cannot know is said, not guessed:
//!
//! - before a thread's first switch record its state is unknown (counted as on CPU);
//! - a switch-out never followed by a switch-in is closed at the end of the trace
//!   ([`Timelines::finish`]) and counted in [`Timelines::open_at_end`];
//! - two switch-outs in a row (a lost `In`) close the first at the second's time and are
//!   counted in [`Timelines::double_outs`].

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{StackId, StackStatus, Switch, SwitchKind};

/// Why a thread is off CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OffState {
    /// Preempted, waiting for a CPU.
    Runnable,
    /// Asleep in the kernel.
    Blocked,
}

impl OffState {
    pub fn name(self) -> &'static str {
        match self {
            OffState::Runnable => "runnable",
            OffState::Blocked => "blocked",
        }
    }
}

/// One closed off-CPU interval of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffInterval {
    pub pid: u32,
    pub tid: u32,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub state: OffState,
    /// Where the thread went off CPU ([`StackId::NONE`] when not recorded).
    pub stack: StackId,
    pub stack_status: StackStatus,
}

impl OffInterval {
    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.begin_ns)
    }
    /// Overlap of the interval with `[begin, end)`.
    pub fn overlap_ns(&self, begin: u64, end: u64) -> u64 {
        self.end_ns.min(end).saturating_sub(self.begin_ns.max(begin))
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    pid: u32,
    since: u64,
    state: OffState,
    stack: StackId,
    status: StackStatus,
}

/// The switch state machine of every thread; see the module docs.
#[derive(Debug, Default)]
pub struct Timelines {
    out: FxHashMap<u32, Pending>,
    /// Switch records seen.
    pub switches: u64,
    /// Switch-outs still open when the trace ended.
    pub open_at_end: u64,
    /// A switch-out while the thread was already out (an `In` was lost).
    pub double_outs: u64,
}

impl Timelines {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one switch record (in time order). Returns the interval it closes, if any.
    pub fn handle(&mut self, s: &Switch) -> Option<OffInterval> {
        self.switches += 1;
        let state = match s.kind {
            SwitchKind::In => {
                let p = self.out.remove(&s.tid)?;
                return Some(close(s.tid, p, s.time));
            }
            SwitchKind::OutPreempted => OffState::Runnable,
            SwitchKind::OutBlocked => OffState::Blocked,
        };
        let next = Pending { pid: s.pid, since: s.time, state, stack: s.stack, status: s.stack_status };
        let prev = self.out.insert(s.tid, next)?;
        self.double_outs += 1;
        Some(close(s.tid, prev, s.time))
    }

    /// Close every thread still off CPU at `end_ns` (the trace's last timestamp).
    pub fn finish(&mut self, end_ns: u64) -> Vec<OffInterval> {
        let mut v: Vec<OffInterval> = self.out.drain().map(|(tid, p)| close(tid, p, end_ns)).collect();
        self.open_at_end += v.len() as u64;
        v.sort_by_key(|i| (i.begin_ns, i.tid));
        v
    }
}

fn close(tid: u32, p: Pending, end: u64) -> OffInterval {
    OffInterval { pid: p.pid, tid, begin_ns: p.since, end_ns: end.max(p.since), state: p.state, stack: p.stack, stack_status: p.status }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(time: u64, tid: u32, kind: SwitchKind) -> Switch {
        Switch {
            time,
            pid: 1,
            tid,
            cpu: 0,
            kind,
            stack: StackId(tid),
            stack_status: StackStatus::Complete,
            next_prev: None,
            item_key: None,
        }
    }

    #[test]
    fn runnable_and_blocked_intervals() {
        let mut t = Timelines::new();
        assert_eq!(t.handle(&sw(5, 1, SwitchKind::In)), None); // unknown before: nothing
        assert_eq!(t.handle(&sw(10, 1, SwitchKind::OutBlocked)), None);
        assert_eq!(t.handle(&sw(12, 2, SwitchKind::OutPreempted)), None);
        let a = t.handle(&sw(30, 1, SwitchKind::In)).unwrap();
        assert_eq!((a.begin_ns, a.end_ns, a.state, a.len_ns()), (10, 30, OffState::Blocked, 20));
        assert_eq!(a.stack, StackId(1));
        let b = t.handle(&sw(40, 2, SwitchKind::In)).unwrap();
        assert_eq!((b.tid, b.state, b.len_ns()), (2, OffState::Runnable, 28));
        assert_eq!(b.overlap_ns(20, 25), 5);
        assert_eq!(b.overlap_ns(0, 12), 0);
        // A lost In: the first out is closed by the second.
        t.handle(&sw(50, 1, SwitchKind::OutPreempted));
        let c = t.handle(&sw(55, 1, SwitchKind::OutBlocked)).unwrap();
        assert_eq!((c.state, c.len_ns()), (OffState::Runnable, 5));
        assert_eq!(t.double_outs, 1);
        let rest = t.finish(70);
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].state, rest[0].len_ns()), (OffState::Blocked, 15));
        assert_eq!(t.open_at_end, 1);
        assert_eq!(t.switches, 7);
    }
}
