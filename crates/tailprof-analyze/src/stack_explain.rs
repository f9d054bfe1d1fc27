//! Why was this item slow, by call stack and by off-CPU time.
//!
//! [`explain_stacks`] puts one item's stacks beside the median item of its class, stack
//! by stack (not only by leaf function): per function path, the median over the class's
//! items of the path's estimate (samples × mean sample interval), counting 0 for items
//! where the path has no samples. Off-CPU time (measured from switch records, not
//! sampled) is compared the same way per (state, stack).
//!
//! Sampling cannot resolve differences smaller than a few sample intervals: an item whose
//! excess over the class median is below `min_reliable_samples × interval` is still
//! explained, but [`StackExplanation::resolvable`] is false and the note says so.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::items::ItemsReport;
use crate::offcpu::OffState;
use crate::stacks::{ItemStacks, StackProfile};
use crate::stats::median_with_zeros;
use crate::AnalyzeError;

/// One stack of the item beside the class median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackDiff {
    /// Index into [`StackProfile::paths`] (not in the JSON: `frames` name it).
    #[serde(skip)]
    pub path: u32,
    /// Function names, root first.
    pub frames: Vec<String>,
    /// The item's samples with this stack.
    pub samples: u64,
    /// samples × mean sample interval.
    pub est_ns: f64,
    /// Median over the class's items of their estimate for this stack.
    pub median_ns: f64,
    /// est_ns − median_ns.
    pub delta_ns: f64,
}

/// One off-CPU stack of the item beside the class median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffDiff {
    #[serde(skip)]
    pub path: u32,
    pub frames: Vec<String>,
    /// Per frame: a kernel function (same order as `frames`).
    #[serde(skip)]
    pub kernel: Vec<bool>,
    pub state: OffState,
    pub ns: u64,
    pub median_ns: f64,
    pub delta_ns: f64,
}

/// Where an item's wall time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct TimeSplit {
    /// On CPU: wall − off-CPU when switches were recorded, else samples × interval
    /// (capped at the wall time).
    pub cpu_ns: u64,
    /// `None` when the trace has no switch records (off-CPU time unknown).
    pub off_cpu_ns: Option<u64>,
    pub runnable_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
}

/// The split of an item's time (`samples` from its items row, `duration_ns` its
/// [`crate::items::ItemRow::current_ns`]: the wall time, or with switch markers the time
/// it was current; the rest is waiting in the event loop, `switching` in the row).
pub fn time_split(duration_ns: u64, samples: u64, interval_ns: f64, stacks: Option<&ItemStacks>, switches: bool) -> TimeSplit {
    match stacks {
        Some(s) if switches && !s.off_cpu_partial => {
            let off = s.off_cpu_ns().min(duration_ns);
            TimeSplit { cpu_ns: duration_ns - off, off_cpu_ns: Some(off), runnable_ns: Some(s.runnable_ns), blocked_ns: Some(s.blocked_ns) }
        }
        _ => TimeSplit { cpu_ns: ((samples as f64 * interval_ns).round() as u64).min(duration_ns), ..Default::default() },
    }
}

/// An item explained by stack; see the module docs. Serialized as its part of the
/// `items --explain ID --json` object (docs/JSON.md): the split (`cpu_ns`, `off_cpu_ns`,
/// `runnable_ns`, `blocked_ns`), `stacks`, `off_cpu`, `resolvable`, `resolution_ns`,
/// `resolution_note`; the item's own facts are in the explanation beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackExplanation {
    #[serde(skip)]
    pub id: u64,
    #[serde(skip)]
    pub class: Option<String>,
    #[serde(skip)]
    pub class_items: usize,
    #[serde(skip)]
    pub duration_ns: u64,
    #[serde(skip)]
    pub median_duration_ns: u64,
    /// duration − class median duration.
    #[serde(skip)]
    pub excess_ns: i64,
    #[serde(skip)]
    pub anomalous: bool,
    #[serde(flatten)]
    pub split: TimeSplit,
    /// The interval each sample stands for.
    #[serde(skip)]
    pub interval_ns: f64,
    /// Smallest excess the sampling resolves (`min_reliable_samples` intervals).
    pub resolution_ns: f64,
    /// excess ≥ resolution.
    pub resolvable: bool,
    /// Why the per-stack split should not be trusted, when it should not.
    #[serde(rename = "resolution_note")]
    pub note: Option<String>,
    /// The item's stacks and the class's typical ones, largest excess first.
    pub stacks: Vec<StackDiff>,
    /// Off-CPU time by state and stack, largest excess first.
    pub off_cpu: Vec<OffDiff>,
    /// Samples of the item whose stack was cut short or failed to unwind
    /// ([`crate::stacks::StackRow::truncated`]; 0 in a trace recorded without stacks).
    #[serde(skip)]
    pub incomplete_samples: u64,
}

/// Explain item `id` of `report` by stack. `profile` must have been built with the spans
/// of `report.items` ([`crate::stacks::ItemSpan::from_rows`]).
pub fn explain_stacks(report: &ItemsReport, profile: &StackProfile, id: u64) -> Result<StackExplanation, AnalyzeError> {
    let idx = report.items.iter().position(|i| i.id == id).ok_or(AnalyzeError::NoSuchItem { id })?;
    let row = &report.items[idx];
    let mine = profile.items.get(idx).filter(|s| s.id == id).ok_or(AnalyzeError::NoSuchItem { id })?;
    let interval = report.mean_interval_ns;
    let members: Vec<usize> = (0..report.items.len()).filter(|&i| report.items[i].class == row.class).collect();
    let n = members.len();
    let mut durations: Vec<u64> = members.iter().map(|&i| report.items[i].duration_ns).collect();
    durations.sort_unstable();
    let median_duration_ns = match n {
        0 => 0,
        _ if n % 2 == 1 => durations[n / 2],
        _ => (durations[n / 2 - 1] / 2).saturating_add(durations[n / 2] / 2),
    };
    let mut per_path: FxHashMap<u32, Vec<f64>> = FxHashMap::default();
    let mut per_off: FxHashMap<(u32, OffState), Vec<f64>> = FxHashMap::default();
    for &i in &members {
        let Some(s) = profile.items.get(i) else {
            continue;
        };
        let mut by_path: FxHashMap<u32, u64> = FxHashMap::default();
        for r in &s.stacks {
            *by_path.entry(r.path).or_default() += r.samples;
        }
        for (p, c) in by_path {
            per_path.entry(p).or_default().push(c as f64 * interval);
        }
        for o in &s.off_cpu {
            per_off.entry((o.path, o.state)).or_default().push(o.ns as f64);
        }
    }
    let names = |p: u32| profile.frames(p).into_iter().map(str::to_owned).collect::<Vec<_>>();
    let mut mine_by_path: FxHashMap<u32, u64> = FxHashMap::default();
    let mut incomplete_samples = 0;
    for r in &mine.stacks {
        *mine_by_path.entry(r.path).or_default() += r.samples;
        // Truncated stacks only: a trace recorded without stacks has none to truncate.
        if r.truncated {
            incomplete_samples += r.samples;
        }
    }
    let mut stacks: Vec<StackDiff> = Vec::new();
    for (p, mut v) in per_path {
        let median_ns = median_with_zeros(&mut v, n).unwrap_or(0.0);
        let samples = mine_by_path.get(&p).copied().unwrap_or(0);
        if samples == 0 && median_ns == 0.0 {
            continue;
        }
        let est_ns = samples as f64 * interval;
        stacks.push(StackDiff { path: p, frames: names(p), samples, est_ns, median_ns, delta_ns: est_ns - median_ns });
    }
    stacks.sort_by(|a, b| b.delta_ns.total_cmp(&a.delta_ns).then(b.samples.cmp(&a.samples)).then(a.path.cmp(&b.path)));
    let mine_off: FxHashMap<(u32, OffState), u64> = mine.off_cpu.iter().map(|o| ((o.path, o.state), o.ns)).collect();
    let mut off_cpu: Vec<OffDiff> = Vec::new();
    for ((p, state), mut v) in per_off {
        let median_ns = median_with_zeros(&mut v, n).unwrap_or(0.0);
        let ns = mine_off.get(&(p, state)).copied().unwrap_or(0);
        if ns == 0 && median_ns == 0.0 {
            continue;
        }
        let kernel = profile
            .paths
            .get(p as usize)
            .map(|v| v.iter().map(|&f| crate::stacks::is_kernel_binary(&profile.functions[f as usize].binary)).collect())
            .unwrap_or_default();
        off_cpu.push(OffDiff { path: p, frames: names(p), kernel, state, ns, median_ns, delta_ns: ns as f64 - median_ns });
    }
    off_cpu.sort_by(|a, b| b.delta_ns.total_cmp(&a.delta_ns).then(b.ns.cmp(&a.ns)).then(a.path.cmp(&b.path)));
    let excess_ns = row.duration_ns as i64 - median_duration_ns as i64;
    let resolution_ns = report.min_reliable_samples.max(1) as f64 * interval;
    let resolvable = excess_ns as f64 >= resolution_ns;
    let note = (!resolvable).then(|| {
        if excess_ns < 0 {
            return format!(
                "this item took {:.3} ms less than its class median: there is no excess to explain, the per-stack differences are its mix of work against the median's",
                -(excess_ns as f64) / 1e6
            );
        }
        format!(
            "the excess over the class median ({:.3} ms) is below what sampling resolves ({} samples x {:.3} ms interval = {:.3} ms): the per-stack differences are within sampling noise",
            excess_ns as f64 / 1e6,
            report.min_reliable_samples.max(1),
            interval / 1e6,
            resolution_ns / 1e6
        )
    });
    Ok(StackExplanation {
        id,
        class: row.class.clone(),
        class_items: n,
        duration_ns: row.duration_ns,
        median_duration_ns,
        excess_ns,
        anomalous: row.anomalous,
        split: time_split(row.current_ns(), row.samples, interval, Some(mine), profile.switches > 0),
        interval_ns: interval,
        resolution_ns,
        resolvable,
        note,
        stacks,
        off_cpu,
        incomplete_samples,
    })
}
