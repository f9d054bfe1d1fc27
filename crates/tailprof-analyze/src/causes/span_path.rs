//! The critical path of a span's wakers from a window of raw records: the agent's form of
//! the stack pass' critical path (module docs of [`super`]), for requests known only at
//! their end ([`super::span_causes`] gives their wakers, this what the wakers did).
//!
//! Same rules as the stack pass: for each blocked interval of the span's thread that a
//! recorded wakeup by another thread ended, the waker's time between the start of the wait
//! and the wakeup is split into its off-CPU intervals (runnable; blocked, and when another
//! thread's recorded wakeup ended that, explained by that thread in turn, to depth
//! [`super::MAX_DEPTH`]) and the rest on CPU, split over the waker's samples in the window
//! by stack (largest remainder, so the parts add up). Wakeups by an interrupt on an idle
//! CPU (tid 0) have no critical path. At most [`super::MAX_VISITS`] records and samples
//! are looked at per span (`cut` when the bound stopped it).

use std::collections::BTreeMap;

use tailprof_format::SwitchKind;

use super::{PathState, SpanSwitch, SpanWakeup, MAX_DEPTH, MAX_VISITS};

/// One part of a waker's critical path: `ns` in `state`, on the stack `stack` (a key the
/// caller's sample callback gave; `None`: no sample or stack says where).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPart<K> {
    pub state: PathState,
    pub stack: Option<K>,
    pub ns: u64,
}

/// What one waker (pid, tid) of a span did while the span waited for it, summed over
/// its wakeups, largest part first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakerPath<K> {
    pub pid: u32,
    pub tid: u32,
    pub parts: Vec<PathPart<K>>,
}

/// The critical paths of a span's wakers ([`span_critical_paths`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanPaths<K> {
    pub wakers: Vec<WakerPath<K>>,
    /// Records and samples looked at; `cut` when [`MAX_VISITS`] stopped the walk.
    pub visited: usize,
    pub cut: bool,
}

type Acc<K> = BTreeMap<(PathState, Option<K>), u64>;

/// The caller's samples: `(tid, b, e, out)` pushes the stack key of every sample of
/// thread `tid` in `[b, e)`.
pub type SampleKeys<'a, K> = dyn FnMut(u32, u64, u64, &mut Vec<K>) + 'a;

struct Walk<'a, 'b, K> {
    switches: &'a [SpanSwitch],
    wakeups: &'a [SpanWakeup],
    samples: &'b mut SampleKeys<'b, K>,
    budget: usize,
    cut: bool,
    keys: Vec<K>,
}

/// What the wakers of thread `tid`'s span `[begin, end]` did while it waited, from the
/// same records as [`super::span_causes`] (`switches`, `wakeups`: time order).
/// `samples(t, b, e, out)` pushes the stack key of every sample of thread `t` in `[b, e)`
/// (any `Ord` key: the agent's kept frames); parts on CPU name those keys.
pub fn span_critical_paths<K: Copy + Ord>(
    tid: u32,
    begin: u64,
    end: u64,
    switches: &[SpanSwitch],
    wakeups: &[SpanWakeup],
    samples: &mut SampleKeys<'_, K>,
) -> SpanPaths<K> {
    let mut w = Walk { switches, wakeups, samples, budget: MAX_VISITS, cut: false, keys: Vec::new() };
    let mut wakers: Vec<(u32, u32, Acc<K>)> = Vec::new();
    // The span's blocked intervals (its thread is on CPU at `begin`).
    let mut off: Option<(u64, SwitchKind)> = None;
    let mut waits: Vec<(u64, u64)> = Vec::new();
    for s in &switches[switches.partition_point(|s| s.time < begin)..] {
        if s.time > end || !w.visit(1) {
            break;
        }
        if s.tid != tid {
            continue;
        }
        let next = match s.kind() {
            SwitchKind::In => None,
            k => Some((s.time, k)),
        };
        if let Some((since, SwitchKind::OutBlocked)) = std::mem::replace(&mut off, next) {
            waits.push((since, s.time));
        }
    }
    if let Some((since, SwitchKind::OutBlocked)) = off {
        waits.push((since, end));
    }
    for (since, until) in waits {
        let (b, e) = (since.max(begin), until.min(end));
        if e <= b {
            continue;
        }
        let Some(k) = w.waker_of(tid, since, until) else {
            continue;
        };
        let wk = wakeups[k];
        // The blocked time this wakeup ended, explained by the waker (not an interrupt
        // on an idle CPU).
        let we = wk.time.min(e);
        if wk.tid == 0 || we <= b {
            continue;
        }
        let i = match wakers.iter().position(|x| x.0 == wk.pid && x.1 == wk.tid) {
            Some(i) => i,
            None => {
                wakers.push((wk.pid, wk.tid, Acc::new()));
                wakers.len() - 1
            }
        };
        let mut acc = std::mem::take(&mut wakers[i].2);
        w.path(wk.tid, b, we, 1, &mut acc);
        wakers[i].2 = acc;
    }
    SpanPaths {
        wakers: wakers
            .into_iter()
            .map(|(pid, tid, acc)| {
                let mut parts: Vec<PathPart<K>> =
                    acc.into_iter().filter(|&(_, ns)| ns > 0).map(|((state, stack), ns)| PathPart { state, stack, ns }).collect();
                parts.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.state.cmp(&b.state)).then(a.stack.cmp(&b.stack)));
                WakerPath { pid, tid, parts }
            })
            .collect(),
        visited: MAX_VISITS - w.budget,
        cut: w.cut,
    }
}

impl<K: Copy + Ord> Walk<'_, '_, K> {
    /// Takes `n` visits from the budget; false (and `cut`) when it is spent.
    fn visit(&mut self, n: usize) -> bool {
        if self.budget < n {
            self.budget = 0;
            self.cut = true;
            return false;
        }
        self.budget -= n;
        true
    }

    /// The index of the last wakeup of `tid` by another thread in `[since, until]`.
    fn waker_of(&mut self, tid: u32, since: u64, until: u64) -> Option<usize> {
        let lo = self.wakeups.partition_point(|w| w.time < since);
        let hi = self.wakeups.partition_point(|w| w.time <= until);
        if !self.visit(hi - lo) {
            return None;
        }
        (lo..hi).rev().find(|&k| self.wakeups[k].wakee_tid == tid && self.wakeups[k].tid != tid)
    }

    /// What `tid` did in `[b, e)`, added to `out`.
    fn path(&mut self, tid: u32, b: u64, e: u64, depth: u32, out: &mut Acc<K>) {
        if e <= b {
            return;
        }
        // Its off-CPU intervals overlapping the window: (since, kind, until).
        let mut ivs: Vec<(u64, SwitchKind, u64)> = Vec::new();
        let lo = self.switches.partition_point(|s| s.time < b);
        let mut off: Option<(u64, SwitchKind)> = None;
        let mut first = true;
        for s in &self.switches[lo..] {
            if s.time >= e || !self.visit(1) {
                break;
            }
            if s.tid != tid {
                continue;
            }
            if first && s.kind() == SwitchKind::In {
                // Off CPU at `b`: since its last switch-out before the window.
                if let Some((since, kind)) = self.last_out_before(tid, lo) {
                    off = Some((since, kind));
                }
            }
            first = false;
            match s.kind() {
                SwitchKind::In => {
                    if let Some((since, kind)) = off.take() {
                        ivs.push((since, kind, s.time));
                    }
                }
                k => {
                    if off.is_none() {
                        off = Some((s.time, k));
                    }
                }
            }
        }
        if first {
            // No switch of its own in the window: off CPU all along if its last one
            // before was a switch-out.
            if let Some((since, kind)) = self.last_out_before(tid, lo) {
                off = Some((since, kind));
            }
        }
        if let Some((since, kind)) = off {
            ivs.push((since, kind, e));
        }
        let mut offcpu = 0u64;
        let mut nested: Vec<(u32, u64, u64)> = Vec::new();
        for (ob, kind, oe) in ivs {
            let o = oe.min(e).saturating_sub(ob.max(b));
            if o == 0 {
                continue;
            }
            offcpu += o;
            if kind != SwitchKind::OutBlocked {
                *out.entry((PathState::Runnable, None)).or_default() += o;
                continue;
            }
            let waker = self.waker_of(tid, ob, oe).map(|k| (self.wakeups[k].tid, self.wakeups[k].time));
            match waker {
                Some((wt, woke_at)) if wt != 0 && depth < MAX_DEPTH => {
                    // Blocked until `woke_at`, then waiting for a CPU.
                    let wb = ob.max(b);
                    let we = woke_at.min(e).max(wb);
                    nested.push((wt, wb, we));
                    let tail = o.saturating_sub(we - wb);
                    if tail > 0 {
                        *out.entry((PathState::Runnable, None)).or_default() += tail;
                    }
                }
                _ => *out.entry((PathState::Blocked, None)).or_default() += o,
            }
        }
        let cpu = (e - b).saturating_sub(offcpu);
        if cpu > 0 {
            let mut keys = std::mem::take(&mut self.keys);
            keys.clear();
            (self.samples)(tid, b, e, &mut keys);
            if !self.visit(keys.len()) {
                keys.clear();
            }
            if keys.is_empty() {
                *out.entry((PathState::Cpu, None)).or_default() += cpu;
            } else {
                keys.sort_unstable();
                let mut counts: Vec<(K, u64)> = Vec::new();
                for &k in &keys {
                    match counts.last_mut() {
                        Some(c) if c.0 == k => c.1 += 1,
                        _ => counts.push((k, 1)),
                    }
                }
                counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let n = keys.len() as u128;
                let mut given = 0u64;
                for (i, &(k, c)) in counts.iter().enumerate() {
                    let part = if i + 1 == counts.len() { cpu - given } else { (cpu as u128 * c as u128 / n) as u64 };
                    given += part;
                    *out.entry((PathState::Cpu, Some(k))).or_default() += part;
                }
            }
            self.keys = keys;
        }
        for (w, nb, ne) in nested {
            let before: u64 = out.values().sum();
            self.path(w, nb, ne, depth + 1, out);
            let explained = out.values().sum::<u64>() - before;
            // What the deeper thread's records do not cover stays blocked.
            let rest = (ne - nb).saturating_sub(explained);
            if rest > 0 {
                *out.entry((PathState::Blocked, None)).or_default() += rest;
            }
        }
    }

    /// `tid`'s last switch before index `lo`, when it was a switch-out: (time, kind).
    fn last_out_before(&mut self, tid: u32, lo: usize) -> Option<(u64, SwitchKind)> {
        for s in self.switches[..lo].iter().rev() {
            if !self.visit(1) {
                return None;
            }
            if s.tid == tid {
                return (s.kind() != SwitchKind::In).then_some((s.time, s.kind()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{Switch, Wakeup};

    const MS: u64 = 1_000_000;

    fn sw(time: u64, tid: u32, kind: SwitchKind) -> SpanSwitch {
        (&Switch { time, pid: tid, tid, kind, ..Switch::default() }).into()
    }

    fn wake(time: u64, waker: u32, wakee: u32) -> SpanWakeup {
        (&Wakeup { time, pid: waker, tid: waker, wakee_tid: wakee, ..Wakeup::default() }).into()
    }

    /// Request thread 1 blocks 2..20 ms until worker 2 wakes it at 18 ms; the worker was
    /// blocked 0..4 ms (woken at 3 ms by thread 3, which ran all along), runnable
    /// 4..5 ms, then on CPU 5..18 ms with samples on stacks 7 (3) and 8 (1).
    #[test]
    fn waker_time_splits_into_its_states_and_stacks() {
        let switches = vec![
            sw(0, 2, SwitchKind::OutBlocked),
            sw(2 * MS, 1, SwitchKind::OutBlocked),
            sw(5 * MS, 2, SwitchKind::In),
            sw(20 * MS, 1, SwitchKind::In),
        ];
        let wakeups = vec![wake(3 * MS, 3, 2), wake(18 * MS, 2, 1)];
        let samples = [(6 * MS, 2u32, 7u32), (9 * MS, 2, 7), (12 * MS, 2, 8), (15 * MS, 2, 7), (13 * MS, 3, 9)];
        let mut cb = |t: u32, b: u64, e: u64, out: &mut Vec<u32>| {
            out.extend(samples.iter().filter(|s| s.1 == t && s.0 >= b && s.0 < e).map(|s| s.2));
        };
        let p = span_critical_paths(1, MS, 30 * MS, &switches, &wakeups, &mut cb);
        assert!(!p.cut);
        assert_eq!(p.wakers.len(), 1);
        let w = &p.wakers[0];
        assert_eq!((w.pid, w.tid), (2, 2));
        let got: Vec<(PathState, Option<u32>, u64)> = w.parts.iter().map(|x| (x.state, x.stack, x.ns)).collect();
        // Wait 2..18 ms = 16 ms: blocked until 3 ms (thread 3 on CPU then: its sample at
        // 13 ms is outside 2..3 ms), runnable 3..5 ms (woken at 3, in at 5), CPU 13 ms
        // split 3:1 over stacks 7 and 8.
        let cpu7 = 13 * MS * 3 / 4;
        assert_eq!(
            got,
            vec![
                (PathState::Cpu, Some(7), cpu7),
                (PathState::Cpu, Some(8), 13 * MS - cpu7),
                (PathState::Runnable, None, 2 * MS),
                (PathState::Cpu, None, MS),
            ]
        );
        assert_eq!(w.parts.iter().map(|x| x.ns).sum::<u64>(), 16 * MS);
    }

    #[test]
    fn interrupt_wakeups_and_unwoken_waits_have_no_path() {
        let switches = vec![
            sw(2 * MS, 1, SwitchKind::OutBlocked),
            sw(5 * MS, 1, SwitchKind::In),
            sw(6 * MS, 1, SwitchKind::OutBlocked),
            sw(8 * MS, 1, SwitchKind::In),
        ];
        let wakeups = vec![wake(4 * MS, 0, 1)];
        let mut cb = |_: u32, _: u64, _: u64, _: &mut Vec<u32>| {};
        let p = span_critical_paths(1, 0, 10 * MS, &switches, &wakeups, &mut cb);
        assert!(p.wakers.is_empty(), "{p:?}");
    }
}
