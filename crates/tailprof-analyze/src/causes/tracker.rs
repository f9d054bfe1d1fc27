//! The causes analysis' state during the stack pass: per-thread histories, wakeups,
//! per-CPU switch-ins; each item's wakers with their critical paths and its preempters.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tailprof_format::{Comm, Switch, SwitchKind, TraceHeader, Wakeup};

use super::*;
use crate::item_maps::ItemMaps;
use crate::offcpu::{OffInterval, OffState};

#[derive(Debug, Clone, Copy)]
enum Ev {
    Cpu { t: u64, path: u32 },
    Off { b: u64, e: u64, state: OffState, path: u32, waker: u32, woke_at: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Wake {
    time: u64,
    pid: u32,
    tid: u32,
    path: u32,
}

#[derive(Debug, Default)]
struct RawWaker {
    ns: u64,
    pid: u32,
    /// (ns, path, item, idle) of the largest wakeup, and its time.
    largest: (u64, u32, u32, bool),
    largest_at: u64,
}

/// The causes analysis' state while reading (embedded in the stack builder, which owns
/// the items and the stack paths).
#[derive(Debug, Default)]
pub(crate) struct CauseTracker {
    pub on: bool,
    /// Switch records that carry `next_prev` come from the recorder's extra CPU-wide
    /// event (filtered): they feed only the per-CPU history.
    cpu_switch_extra: bool,
    comms: FxHashMap<u32, String>,
    pids: FxHashMap<u32, u32>,
    hist: FxHashMap<u32, VecDeque<Ev>>,
    wake: FxHashMap<u32, Wake>,
    out_cpu: FxHashMap<u32, u32>,
    cpus: FxHashMap<u32, VecDeque<(u64, u32, u32)>>,
    /// Per item index (dense): its wakers by tid, their critical paths by (waker tid,
    /// state, path), and who ran while it was runnable by tid: (ns, pid, item).
    woken: ItemMaps<u32, RawWaker>,
    during: ItemMaps<(u32, PathState, u32), u64>,
    preempted: ItemMaps<u32, (u64, u32, u32)>,
    /// Items with an explained interval (their causes are listed, maybe empty).
    touched: Vec<bool>,
    /// With a timeline: the wake edges into items.
    edges: Option<Vec<WakeEdge>>,
    /// Reused buffers of the critical paths (no allocation per wait).
    scratch_during: FxHashMap<(PathState, u32), u64>,
    scratch_samples: Vec<(u32, u64)>,
    scratch_ran: Vec<(u64, u32, u32, u64)>,
    pub stats: CauseStats,
}

impl CauseTracker {
    pub fn new(header: &TraceHeader, timeline: bool) -> Self {
        let causes = header.extra.get("causes");
        CauseTracker {
            edges: timeline.then(Vec::new),
            on: causes.is_some(),
            cpu_switch_extra: causes.is_some_and(|c| c.contains("cpu_switch")),
            stats: CauseStats { recorded: causes.is_some(), ..Default::default() },
            ..Default::default()
        }
    }

    /// Whether this switch record belongs to the thread timelines (else only to the CPU
    /// history).
    pub fn feeds_timelines(&self, s: &Switch) -> bool {
        !(self.cpu_switch_extra && s.next_prev.is_some())
    }

    pub fn comm(&mut self, c: &Comm) {
        if self.on {
            self.comms.insert(c.tid, c.comm.clone());
            self.pids.insert(c.tid, c.pid);
        }
    }

    fn push(&mut self, tid: u32, ev: Ev) {
        let h = self.hist.entry(tid).or_default();
        if h.len() >= MAX_HISTORY {
            h.pop_front();
            self.stats.forgotten += 1;
        }
        h.push_back(ev);
    }

    pub fn sample(&mut self, tid: u32, time: u64, path: u32) {
        if self.on && tid != 0 {
            self.push(tid, Ev::Cpu { t: time, path });
        }
    }

    pub fn wakeup(&mut self, w: &Wakeup, path: u32) {
        if !self.on {
            return;
        }
        self.stats.wakeups += 1;
        if w.wakee_tid != w.tid {
            self.wake.insert(w.wakee_tid, Wake { time: w.time, pid: w.pid, tid: w.tid, path });
        }
    }

    /// A switch record (before the timelines see it).
    pub fn switch(&mut self, s: &Switch) {
        if !self.on {
            return;
        }
        self.pids.entry(s.tid).or_insert(s.pid);
        match s.kind {
            SwitchKind::In => {
                let h = self.cpus.entry(s.cpu).or_default();
                if h.len() >= MAX_CPU_HISTORY {
                    h.pop_front();
                    self.stats.forgotten += 1;
                }
                h.push_back((s.time, s.pid, s.tid));
            }
            _ => {
                if self.feeds_timelines(s) {
                    self.out_cpu.insert(s.tid, s.cpu);
                }
                if let Some((p, t)) = s.next_prev {
                    // Who runs next on this CPU (its own switch-in may not be recorded).
                    if t != 0 {
                        let h = self.cpus.entry(s.cpu).or_default();
                        h.push_back((s.time, p, t));
                    }
                }
            }
        }
    }

    /// A closed off-CPU interval of a thread, `path` its stack's path; `items` the items
    /// of its thread it overlaps (index, the item's begin and end): each is explained for
    /// its part of the interval only.
    pub fn interval(&mut self, iv: &OffInterval, path: u32, items: &[(u32, u64, u64)], item_at: &dyn Fn(u32, u64) -> u32) {
        if !self.on {
            return;
        }
        let wake = self.wake.remove(&iv.tid).filter(|w| w.time >= iv.begin_ns && w.time <= iv.end_ns);
        let (waker, woke_at) = match (&wake, iv.state) {
            (Some(w), OffState::Blocked) => (w.tid, w.time),
            _ => (u32::MAX, 0),
        };
        let out_cpu = self.out_cpu.remove(&iv.tid);
        if let (Some(e), Some(w), false, OffState::Blocked) = (&mut self.edges, &wake, items.is_empty(), iv.state) {
            if e.len() < MAX_WAKE_EDGES {
                e.push(WakeEdge {
                    time_ns: w.time,
                    waker_pid: w.pid,
                    waker_tid: w.tid,
                    wakee_pid: iv.pid,
                    wakee_tid: iv.tid,
                    resume_ns: iv.end_ns,
                });
            }
        }
        for &(idx, ib, ie) in items {
            // The part of the interval inside the item (an interval may begin before it,
            // e.g. when off-CPU recording started at the first marker, or end after it).
            let part = OffInterval { begin_ns: iv.begin_ns.max(ib), end_ns: iv.end_ns.min(ie), ..*iv };
            if part.end_ns <= part.begin_ns {
                continue;
            }
            match iv.state {
                OffState::Blocked => match &wake {
                    // The wakeup ended the blocked part inside the item (else the item
                    // ended first, or the wakeup was before it began).
                    Some(w) if w.time > part.begin_ns => {
                        self.stats.blocked_explained += 1;
                        let w = Wake { time: w.time.min(part.end_ns), ..*w };
                        self.explain_blocked(idx, &part, &w, item_at);
                    }
                    _ => self.stats.blocked_unexplained += 1,
                },
                OffState::Runnable => {
                    if let Some(cpu) = out_cpu {
                        self.explain_runnable(idx, &part, cpu, item_at);
                    }
                }
            }
        }
        self.push(iv.tid, Ev::Off { b: iv.begin_ns, e: iv.end_ns, state: iv.state, path, waker, woke_at });
    }

    fn explain_blocked(&mut self, idx: u32, iv: &OffInterval, w: &Wake, item_at: &dyn Fn(u32, u64) -> u32) {
        // The blocked time this wakeup ended: from the switch-out to the wakeup (after
        // it, the thread waited for a CPU).
        let ns = w.time.saturating_sub(iv.begin_ns).max(1);
        let waker_item = if w.tid == 0 { NO_ITEM } else { item_at(w.tid, w.time) };
        let mut during = std::mem::take(&mut self.scratch_during);
        during.clear();
        if w.tid != 0 {
            let mut budget = MAX_VISITS;
            self.critical_path(w.tid, iv.begin_ns, w.time, 1, &mut budget, &mut during);
        }
        self.touch(idx);
        let r = self.woken.entry(idx, w.tid);
        r.ns = r.ns.saturating_add(ns);
        r.pid = w.pid;
        if ns >= r.largest.0 {
            r.largest = (ns, w.path, waker_item, w.tid == 0);
            r.largest_at = w.time;
        }
        for (&(state, path), &v) in &during {
            *self.during.entry(idx, (w.tid, state, path)) += v;
        }
        self.scratch_during = during;
    }

    /// What `tid` did in `[b, e)`: off-CPU intervals by state (blocked ones that another
    /// thread's wakeup ended explained by that thread, to [`MAX_DEPTH`]), the rest of the
    /// window on CPU, split over its samples' stacks.
    fn critical_path(&mut self, tid: u32, b: u64, e: u64, depth: u32, budget: &mut usize, out: &mut FxHashMap<(PathState, u32), u64>) {
        if e <= b {
            return;
        }
        // Samples per path in the window (few paths: a reused vector searched linearly).
        let mut samples = std::mem::take(&mut self.scratch_samples);
        samples.clear();
        let Some(h) = self.hist.get(&tid) else { return };
        let mut cut = false;
        let mut off = 0u64;
        let mut nsamples = 0u64;
        let mut nested: Vec<(u32, u64, u64)> = Vec::new();
        for ev in h.iter().rev() {
            if *budget == 0 {
                cut = true;
                break;
            }
            *budget -= 1;
            match *ev {
                Ev::Cpu { t, path } => {
                    if t < b {
                        break;
                    }
                    if t < e {
                        match samples.iter_mut().find(|x| x.0 == path) {
                            Some(x) => x.1 += 1,
                            None => samples.push((path, 1)),
                        }
                        nsamples += 1;
                    }
                }
                Ev::Off { b: ob, e: oe, state, path, waker, woke_at } => {
                    if oe < b {
                        break;
                    }
                    let o = oe.min(e).saturating_sub(ob.max(b));
                    if o == 0 {
                        continue;
                    }
                    off += o;
                    match state {
                        OffState::Runnable => *out.entry((PathState::Runnable, path)).or_default() += o,
                        OffState::Blocked if waker != u32::MAX && waker != 0 && waker != tid && depth < MAX_DEPTH => {
                            // Blocked until `woke_at`, then waiting for a CPU.
                            let wb = ob.max(b);
                            let we = woke_at.min(e).max(wb);
                            nested.push((waker, wb, we));
                            let tail = o.saturating_sub(we - wb);
                            if tail > 0 {
                                *out.entry((PathState::Runnable, path)).or_default() += tail;
                            }
                        }
                        OffState::Blocked => *out.entry((PathState::Blocked, path)).or_default() += o,
                    }
                }
            }
        }
        if cut {
            self.stats.cut_paths += 1;
        }
        let cpu = (e - b).saturating_sub(off);
        if cpu > 0 {
            if nsamples == 0 {
                *out.entry((PathState::Cpu, NO_PATH)).or_default() += cpu;
            } else {
                // Largest remainder: the parts add up to `cpu`.
                let mut given = 0u64;
                let v = &mut samples;
                v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                for (i, &(path, n)) in v.iter().enumerate() {
                    let part = if i + 1 == v.len() { cpu - given } else { (cpu as u128 * n as u128 / nsamples as u128) as u64 };
                    given += part;
                    *out.entry((PathState::Cpu, path)).or_default() += part;
                }
            }
        }
        self.scratch_samples = samples;
        for (w, nb, ne) in nested {
            let before: u64 = out.values().sum();
            self.critical_path(w, nb, ne, depth + 1, budget, out);
            let explained = out.values().sum::<u64>() - before;
            // What the deeper thread's history does not cover stays blocked.
            let rest = (ne - nb).saturating_sub(explained);
            if rest > 0 {
                *out.entry((PathState::Blocked, NO_PATH)).or_default() += rest;
            }
        }
    }

    fn explain_runnable(&mut self, idx: u32, iv: &OffInterval, cpu: u32, item_at: &dyn Fn(u32, u64) -> u32) {
        if !self.cpus.contains_key(&cpu) {
            return;
        }
        self.touch(idx);
        let Some(h) = self.cpus.get(&cpu) else { return };
        let (b, e) = (iv.begin_ns, iv.end_ns);
        // The switch-ins of the CPU from the last one at or before `b` to `e`.
        // (Usually among the last few: searched from the end, then by halves.)
        let mut p = h.len();
        let mut steps = 0;
        while p > 0 && h[p - 1].0 > b {
            p -= 1;
            steps += 1;
            if steps == 16 {
                p = h.partition_point(|x| x.0 <= b);
                break;
            }
        }
        let start = p.saturating_sub(1);
        let mut ran = std::mem::take(&mut self.scratch_ran);
        ran.clear();
        let mut i = start;
        while i < h.len() && h[i].0 < e {
            let (t, pid, tid) = h[i];
            let next = h.get(i + 1).map_or(e, |n| n.0.min(e));
            let o = next.saturating_sub(t.max(b));
            if o > 0 && tid != iv.tid && tid != 0 {
                ran.push((o, pid, tid, t.max(b)));
            }
            i += 1;
        }
        for &(o, pid, tid, at) in &ran {
            let e = self.preempted.entry(idx, tid);
            if *e == (0, 0, 0) {
                *e = (0, pid, item_at(tid, at));
            }
            e.0 = e.0.saturating_add(o);
        }
        self.scratch_ran = ran;
    }

    fn touch(&mut self, idx: u32) {
        let i = idx as usize;
        if i >= self.touched.len() {
            self.touched.resize(i + 1, false);
        }
        self.touched[i] = true;
    }

    /// The wake edges collected for a timeline (empty without one).
    pub fn take_edges(&mut self) -> Vec<WakeEdge> {
        self.edges.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The typed causes of every item that has some, with paths through `of_path` and
    /// names through `frames`. `span` gives an item index's (id, class).
    pub fn finish(
        self,
        of_path: &dyn Fn(u32) -> Vec<String>,
        span: &dyn Fn(u32) -> (u64, Option<String>),
    ) -> (Vec<ItemCauses>, CauseStats) {
        // A thread without a COMM record of its own has its process's name (threads
        // inherit it; the kernel writes COMM only on exec and renames).
        let comm =
            |tid: u32| self.comms.get(&tid).or_else(|| self.pids.get(&tid).and_then(|p| self.comms.get(p))).cloned().unwrap_or_default();
        let mut out: Vec<ItemCauses> = Vec::new();
        // Names and interrupt kinds of the wakers' stacks, once per (path, idle).
        let mut waker_stacks: FxHashMap<(u32, bool), (Vec<String>, Option<IrqKind>)> = FxHashMap::default();
        // An item's critical-path entries, by waker tid (reused).
        let mut during_of: Vec<((u32, PathState, u32), u64)> = Vec::new();
        for (idx, _) in self.touched.iter().enumerate().filter(|t| *t.1) {
            let idx = idx as u32;
            during_of.clear();
            during_of.extend(self.during.get(idx).map(|(&k, &v)| (k, v)));
            during_of.sort_unstable_by_key(|e| e.0);
            let mut woken_by: Vec<WokenBy> = self
                .woken
                .get(idx)
                .map(|(&tid, r)| {
                    let (frames, irq) = waker_stacks
                        .entry((r.largest.1, r.largest.3))
                        .or_insert_with(|| {
                            let frames = if r.largest.1 == NO_PATH { Vec::new() } else { of_path(r.largest.1) };
                            let names: Vec<&str> = frames.iter().map(String::as_str).collect();
                            let irq = irq_kind(&names, r.largest.3);
                            (frames, irq)
                        })
                        .clone();
                    let (item, class) = if r.largest.2 == NO_ITEM {
                        (None, None)
                    } else {
                        let (id, c) = span(r.largest.2);
                        (Some(id), c)
                    };
                    // An interrupt woke the thread: the interrupted task did not make it wait.
                    let lo = during_of.partition_point(|e| e.0 .0 < tid);
                    let hi = during_of.partition_point(|e| e.0 .0 <= tid);
                    let mut during: Vec<During> = during_of[lo..hi]
                        .iter()
                        .filter(|&&(_, ns)| ns > 0 && irq.is_none())
                        .map(|&((_, state, p), ns)| During { state, ns, frames: if p == NO_PATH { Vec::new() } else { of_path(p) } })
                        .collect();
                    during.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.state.cmp(&b.state)).then(a.frames.cmp(&b.frames)));
                    WokenBy {
                        at_ns: r.largest_at,
                        ns: r.ns,
                        pid: r.pid,
                        tid,
                        comm: if tid == 0 { String::new() } else { comm(tid) },
                        item,
                        class,
                        irq,
                        frames,
                        during,
                    }
                })
                .collect();
            woken_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            // Interrupts are one waker per kind, whichever task they interrupted (its
            // pid/tid/comm are those of the largest such wakeup): merged in place, in
            // order.
            let mut kept = 0;
            for i in 0..woken_by.len() {
                let same = woken_by[i].irq.and_then(|k| woken_by[..kept].iter().position(|m| m.irq == Some(k)));
                match same {
                    Some(j) => woken_by[j].ns = woken_by[j].ns.saturating_add(woken_by[i].ns),
                    None => {
                        woken_by.swap(kept, i);
                        kept += 1;
                    }
                }
            }
            woken_by.truncate(kept);
            woken_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            let mut preempted_by: Vec<PreemptedBy> = self
                .preempted
                .get(idx)
                .map(|(&tid, &(ns, pid, item))| PreemptedBy {
                    ns,
                    pid,
                    tid,
                    comm: comm(tid),
                    item: (item != NO_ITEM).then(|| span(item).0),
                })
                .collect();
            preempted_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            out.push(ItemCauses { id: span(idx).0, woken_by, preempted_by });
        }
        out.sort_by_key(|c| c.id);
        (out, self.stats)
    }
}
