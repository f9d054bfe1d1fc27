//! Go off-CPU time of goroutine requests from the switch-outs' goroutine register.
//!
//! When the recorder records context switches (causes, from the first marker on) in
//! goroutine mode, a switch-out carries the goroutine register (`Switch::item_key`); by the
//! join's rule ([`goroutine_off_interval`]) the interval until the thread's next switch-in
//! is that goroutine's off-CPU time. Only intervals of goroutines with an open request are
//! kept (the agent sees every switch of the machine), for [`KEEP_NS`] and at most
//! [`MAX_GO_OFF`] (older ones evicted, counted in `go_off_cpu_evicted`); threads with a
//! switch-out waiting for its switch-in at most [`MAX_GO_PENDING`] (more: not followed,
//! counted in `go_off_cpu_untracked`). A goroutine request begun once keyed switches are
//! seen gets exactly these intervals as its off-CPU time; one begun before keeps wall
//! time minus samples.

use std::collections::{HashMap, VecDeque};

use tailprof_analyze::items::join::goroutine_off_interval;
use tailprof_format::Switch;

use super::KEEP_NS;

/// Off-CPU intervals of goroutines kept at most.
pub const MAX_GO_OFF: usize = 100_000;
/// Threads with a pending goroutine switch-out at most.
pub const MAX_GO_PENDING: usize = 65_536;

/// An off-CPU interval of goroutine `g` of `pid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GoOff {
    pid: u32,
    g: u64,
    from: u64,
    to: u64,
}

#[derive(Debug, Default)]
pub(super) struct GoOffCpu {
    /// tid → its last switch-out that carried a goroutine with an open request (g, time).
    pending: HashMap<u32, Option<(u64, u64)>>,
    /// Intervals in the order of their end (switch-in time).
    intervals: VecDeque<GoOff>,
    /// The first switch-out seen with the register (requests begun since are covered).
    pub since: Option<u64>,
    pub evicted: u64,
    pub untracked: u64,
}

impl GoOffCpu {
    /// A context switch (time order). `open(pid, g)`: whether goroutine `g` of `pid` has
    /// an open request.
    pub fn switch(&mut self, s: &Switch, open: impl Fn(u32, u64) -> bool) {
        if s.kind.is_out() && s.item_key.is_some_and(|g| g != 0) && self.since.is_none() {
            self.since = Some(s.time);
        }
        let p = if s.kind.is_out() {
            // Only goroutines of open requests are followed.
            if !s.item_key.is_some_and(|g| open(s.pid, g)) {
                self.pending.remove(&s.tid);
                return;
            }
            if !self.pending.contains_key(&s.tid) && self.pending.len() >= MAX_GO_PENDING {
                self.untracked += 1;
                return;
            }
            self.pending.entry(s.tid).or_default()
        } else {
            match self.pending.get_mut(&s.tid) {
                Some(p) => p,
                None => return,
            }
        };
        if let Some((g, from, to)) = goroutine_off_interval(p, s) {
            self.push(GoOff { pid: s.pid, g, from, to });
        }
        if !s.kind.is_out() {
            self.pending.remove(&s.tid);
        }
    }

    fn push(&mut self, iv: GoOff) {
        while self.intervals.front().is_some_and(|f| f.to.saturating_add(KEEP_NS) < iv.to) {
            self.intervals.pop_front();
        }
        if self.intervals.len() >= MAX_GO_OFF {
            self.intervals.pop_front();
            self.evicted += 1;
        }
        self.intervals.push_back(iv);
    }

    /// The off-CPU time of goroutine `g` of `pid` between `begin` and `end`, or `None`
    /// when keyed switches were not seen since before `begin` (not known).
    pub fn off_cpu(&self, pid: u32, g: u64, begin: u64, end: u64) -> Option<u64> {
        if self.since.is_none_or(|t| t > begin) {
            return None;
        }
        let first = self.intervals.partition_point(|iv| iv.to < begin);
        Some(
            self.intervals
                .range(first..)
                .take_while(|iv| iv.to <= end)
                .filter(|iv| iv.pid == pid && iv.g == g)
                .map(|iv| iv.to.min(end).saturating_sub(iv.from.max(begin)))
                .sum(),
        )
    }
}
