//! Causes per item against its class (`items --explain ID`) and the whole-trace
//! interference view (`report --causes`).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::*;

/// One cause of an item's wall time beside its class median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseShare {
    /// `cpu` (own work), `blocked`, `runnable`.
    pub cause: PathState,
    pub ns: u64,
    pub median_ns: u64,
    /// ns − median_ns.
    pub excess_ns: i64,
}

/// An item's excess over its class median split by cause, with whom it waited for
/// (`items --explain ID`, "Causes").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseExplanation {
    pub id: u64,
    /// The trace recorded wakeups (else only the split is known).
    pub recorded: bool,
    pub excess_ns: i64,
    pub median_duration_ns: u64,
    /// `None` without context switches (no split).
    pub split: Option<Vec<CauseShare>>,
    /// The item's own CPU work above the class median, by stack (root first), largest
    /// first (at most 3).
    pub cpu_stacks: Vec<(Vec<String>, f64)>,
    pub woken_by: Vec<WokenBy>,
    pub preempted_by: Vec<PreemptedBy>,
    /// The item's on-CPU noise (interrupts, page faults, system calls, migrations).
    pub noise: Noise,
    /// Its noise kinds ([`Noise::parts`]) beside the class median, largest excess first
    /// (kinds with time in the item or the class median).
    pub noise_shares: Vec<NoiseShare>,
}

/// One kind of on-CPU noise of an item beside its class median.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoiseShare {
    /// `hardirq`, `softirq`, `page_fault`, `syscall:NAME`, `other_kernel`, `unknown_kernel`.
    pub kind: String,
    pub ns: u64,
    pub median_ns: u64,
    pub excess_ns: i64,
}

/// Explain item `x.id` by cause: `x` from [`crate::stack_explain::explain_stacks`] over the
/// same `report` and `profile`.
pub fn explain_causes(
    report: &crate::items::ItemsReport,
    profile: &crate::stacks::StackProfile,
    x: &crate::stack_explain::StackExplanation,
) -> CauseExplanation {
    use crate::stack_explain::time_split;
    let switches = profile.switches > 0;
    let split_of = |i: usize| {
        let r = &report.items[i];
        time_split(r.current_ns(), r.samples, report.mean_interval_ns, profile.items.get(i), switches)
    };
    let members: Vec<usize> = (0..report.items.len()).filter(|&i| report.items[i].class == x.class).collect();
    let med = |f: &dyn Fn(&crate::stack_explain::TimeSplit) -> u64| {
        let mut v: Vec<u64> = members.iter().map(|&i| f(&split_of(i))).collect();
        crate::stats::median_u64(&mut v).unwrap_or(0)
    };
    let split = x.split.off_cpu_ns.map(|_| {
        let mine = x.split;
        let parts: [(PathState, u64, u64); 3] = [
            (PathState::Cpu, mine.cpu_ns, med(&|s| s.cpu_ns)),
            (PathState::Blocked, mine.blocked_ns.unwrap_or(0), med(&|s| s.blocked_ns.unwrap_or(0))),
            (PathState::Runnable, mine.runnable_ns.unwrap_or(0), med(&|s| s.runnable_ns.unwrap_or(0))),
        ];
        parts.iter().map(|&(cause, ns, median_ns)| CauseShare { cause, ns, median_ns, excess_ns: ns as i64 - median_ns as i64 }).collect()
    });
    let cpu_stacks = x.stacks.iter().filter(|d| d.delta_ns > 0.0).take(3).map(|d| (d.frames.clone(), d.delta_ns)).collect();
    let mine = profile.causes.iter().find(|c| c.id == x.id);
    let noise =
        report.items.iter().position(|r| r.id == x.id).and_then(|i| profile.items.get(i)).map(|s| s.noise.clone()).unwrap_or_default();
    let class_parts: Vec<FxHashMap<String, u64>> =
        members.iter().map(|&i| profile.items.get(i).map(|s| s.noise.parts().into_iter().collect()).unwrap_or_default()).collect();
    let mut kinds: Vec<String> = noise.parts().into_iter().filter(|p| p.1 > 0).map(|p| p.0).collect();
    for m in &class_parts {
        for (k, &ns) in m {
            if ns > 0 && !kinds.contains(k) {
                kinds.push(k.clone());
            }
        }
    }
    let mine_parts: FxHashMap<String, u64> = noise.parts().into_iter().collect();
    let mut noise_shares: Vec<NoiseShare> = kinds
        .into_iter()
        .map(|kind| {
            let mut v: Vec<u64> = class_parts.iter().map(|m| m.get(&kind).copied().unwrap_or(0)).collect();
            let median_ns = crate::stats::median_u64(&mut v).unwrap_or(0);
            let ns = mine_parts.get(&kind).copied().unwrap_or(0);
            NoiseShare { kind, ns, median_ns, excess_ns: ns as i64 - median_ns as i64 }
        })
        .filter(|s| s.ns > 0 || s.median_ns > 0)
        .collect();
    noise_shares.sort_by(|a, b| b.excess_ns.cmp(&a.excess_ns).then(b.ns.cmp(&a.ns)).then(a.kind.cmp(&b.kind)));
    CauseExplanation {
        noise,
        noise_shares,
        id: x.id,
        recorded: profile.cause_stats.recorded,
        excess_ns: x.excess_ns,
        median_duration_ns: x.median_duration_ns,
        split,
        cpu_stacks,
        woken_by: mine.map(|c| c.woken_by.clone()).unwrap_or_default(),
        preempted_by: mine.map(|c| c.preempted_by.clone()).unwrap_or_default(),
    }
}

/// Who cost other requests time, over the whole trace (`report --causes`): one row per
/// process, thread or item class, largest `total_ns` first.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct InterferenceRow {
    pub pid: u32,
    /// `None` in the per-process and per-class rows.
    pub tid: Option<u32>,
    pub comm: String,
    /// The item class the waker or preempter was inside (per-class rows; `None` in the
    /// others, and for threads outside any item in the class rows: "no item").
    pub class: Option<String>,
    /// Interrupt wakeups of this kind (pid/tid 0): the task they interrupted did not
    /// hold the request up.
    pub irq: Option<IrqKind>,
    /// Blocked time of items that this one's wakeups ended.
    pub blocked_ns: u64,
    /// Runnable time of items during which this one ran on their CPU.
    pub runnable_ns: u64,
    pub total_ns: u64,
    /// Items it held up.
    pub items: u64,
}

/// The whole-trace interference view; see [`InterferenceRow`].
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Interference {
    /// The trace recorded wakeups (else every list is empty).
    pub recorded: bool,
    pub processes: Vec<InterferenceRow>,
    pub threads: Vec<InterferenceRow>,
    /// By the class of the item the waker or preempter was inside (`class` `None`: no
    /// item); interrupts are counted under processes and threads only.
    pub classes: Vec<InterferenceRow>,
}

/// Sums the causes of every item of `profile` (built over `report`'s items) by waker /
/// preempter process, thread and item class.
pub fn interference(report: &crate::items::ItemsReport, profile: &crate::stacks::StackProfile) -> Interference {
    let class_of: FxHashMap<u64, Option<String>> = report.items.iter().map(|i| (i.id, i.class.clone())).collect();
    type Key = (u32, Option<u32>, Option<Option<String>>, Option<IrqKind>);
    let mut rows: FxHashMap<Key, (InterferenceRow, rustc_hash::FxHashSet<u64>)> = FxHashMap::default();
    let mut add = |key: Key, comm: &str, item: u64, blocked: u64, runnable: u64| {
        let (r, items) = rows.entry(key.clone()).or_insert_with(|| {
            let r = InterferenceRow { pid: key.0, tid: key.1, class: key.2.clone().flatten(), irq: key.3, ..Default::default() };
            (r, Default::default())
        });
        if r.comm.is_empty() {
            r.comm = comm.to_owned();
        }
        r.blocked_ns = r.blocked_ns.saturating_add(blocked);
        r.runnable_ns = r.runnable_ns.saturating_add(runnable);
        items.insert(item);
    };
    for c in &profile.causes {
        for w in &c.woken_by {
            match w.irq {
                Some(k) => {
                    let comm = format!("[{} interrupt]", k.name());
                    add((0, None, None, Some(k)), &comm, c.id, w.ns, 0);
                    add((0, Some(0), None, Some(k)), &comm, c.id, w.ns, 0);
                }
                None => {
                    add((w.pid, None, None, None), &w.comm, c.id, w.ns, 0);
                    add((w.pid, Some(w.tid), None, None), &w.comm, c.id, w.ns, 0);
                    add((0, None, Some(w.class.clone()), None), "", c.id, w.ns, 0);
                }
            }
        }
        for p in &c.preempted_by {
            let class = p.item.and_then(|i| class_of.get(&i).cloned().flatten());
            add((p.pid, None, None, None), &p.comm, c.id, 0, p.ns);
            add((p.pid, Some(p.tid), None, None), &p.comm, c.id, 0, p.ns);
            add((0, None, Some(class), None), "", c.id, 0, p.ns);
        }
    }
    let mut out = Interference { recorded: profile.cause_stats.recorded, ..Default::default() };
    for ((_, tid, class, _), (mut r, items)) in rows {
        r.total_ns = r.blocked_ns.saturating_add(r.runnable_ns);
        r.items = items.len() as u64;
        match (tid, class) {
            (_, Some(_)) => {
                r.pid = 0;
                out.classes.push(r)
            }
            (Some(_), None) => out.threads.push(r),
            (None, None) => out.processes.push(r),
        }
    }
    for v in [&mut out.processes, &mut out.threads, &mut out.classes] {
        v.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(a.pid.cmp(&b.pid))
                .then(a.tid.cmp(&b.tid))
                .then(a.class.cmp(&b.class))
                .then(a.comm.cmp(&b.comm))
        });
    }
    out
}
