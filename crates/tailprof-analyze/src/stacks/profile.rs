//! The document [`super::stack_profile`] returns: stacks, off-CPU rows, per-item views,
//! the timeline, and its flat view.

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{ReadSummary, StackStatus};

use super::StackFilter;
use crate::offcpu::OffState;
use crate::resolve::FunctionInfo;

/// One sample in time (a [`Timeline`] entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimedSample {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// Index into [`StackProfile::paths`].
    pub path: u32,
}

/// One off-CPU interval of one thread (a [`Timeline`] entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OffSlice {
    pub pid: u32,
    pub tid: u32,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub state: OffState,
    /// Where the thread went off CPU: index into [`StackProfile::paths`].
    pub path: u32,
}

/// The kept samples and off-CPU intervals in time order (with [`StackOptions::timeline`](super::StackOptions::timeline)).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    pub samples: Vec<TimedSample>,
    pub off_cpu: Vec<OffSlice>,
    /// Wakeups that ended a blocked interval of an item's thread inside the item (issue
    /// 21), in time order: the edges the Perfetto export draws.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakes: Vec<crate::causes::WakeEdge>,
}

/// Samples of one stack (a path of function rows, root first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StackRow {
    /// Index into [`StackProfile::paths`].
    pub path: u32,
    pub samples: u64,
    pub period: u64,
    /// The stack reached the outermost frame.
    pub complete: bool,
    /// The stack was cut short or unwinding failed ([`StackStatus::is_truncated`]), or an
    /// fp/LBR chain was judged [`BROKEN`](super::BROKEN);
    /// neither this nor `complete` for stacks whose completeness cannot be told (an
    /// fp/LBR chain ending in a function without a name).
    pub truncated: bool,
}

/// Off-CPU time spent with one stack in one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OffRow {
    /// Index into [`StackProfile::paths`] (where the thread went off CPU).
    pub path: u32,
    pub state: OffState,
    pub ns: u64,
}

/// Stacks and off-CPU time of one item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemStacks {
    pub id: u64,
    /// Samples by stack, most first.
    pub stacks: Vec<StackRow>,
    /// Off-CPU time by state and stack, most first.
    pub off_cpu: Vec<OffRow>,
    pub runnable_ns: u64,
    pub blocked_ns: u64,
    /// Off-CPU recording started during the item (a trace whose header says
    /// `off_cpu_from = first_marker`, and the item began before its process's first
    /// `Switch` record): its off-CPU time is only a part, so no wall-time split is claimed.
    pub off_cpu_partial: bool,
    /// On-CPU noise: interrupts, page faults, system calls and migrations (issue 21).
    pub noise: crate::causes::Noise,
}

impl ItemStacks {
    pub fn off_cpu_ns(&self) -> u64 {
        self.runnable_ns.saturating_add(self.blocked_ns)
    }
}

/// Non-zero counts of a per-status array (indexed by the status code), in code order.
pub fn status_counts(counts: &[u64; 8]) -> Vec<StatusCount> {
    StackStatus::ALL
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|(s, &n)| StatusCount { status: s.name(), reason: s.reason(), samples: n })
        .collect()
}

/// Samples of one stack status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    /// Stable name ([`StackStatus::name`]).
    pub status: &'static str,
    /// In words ([`StackStatus::reason`]).
    pub reason: &'static str,
    pub samples: u64,
}

/// Everything [`stack_profile`](super::stack_profile) found; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackProfile {
    pub event: String,
    /// Samples of the selected event in the trace.
    pub total_samples: u64,
    /// Samples the filter kept (with or without a stack).
    pub samples: u64,
    pub period: u64,
    /// Kept samples per stack status (statuses with samples only, in code order).
    pub statuses: Vec<StatusCount>,
    /// Function rows the paths refer to.
    pub functions: Vec<FunctionInfo>,
    /// Function paths, root first; indices into `functions`.
    pub paths: Vec<Vec<u32>>,
    /// Kept samples by stack, most first.
    pub stacks: Vec<StackRow>,
    /// Off-CPU time by state and stack (kept items' part with a filter), most first.
    pub off_cpu: Vec<OffRow>,
    pub runnable_ns: u64,
    pub blocked_ns: u64,
    /// Per item, in the order of the spans given.
    pub items: Vec<ItemStacks>,
    /// Switch records read (0: the trace has no off-CPU data).
    pub switches: u64,
    /// Off-CPU intervals still open at the end of the trace (closed there).
    pub off_open_at_end: u64,
    /// Switch-outs that followed a switch-out (a lost switch-in).
    pub off_double_outs: u64,
    pub filter: StackFilter,
    pub kernel_symbols: Option<String>,
    pub read: Option<ReadSummary>,
    /// With [`StackOptions::timeline`](super::StackOptions::timeline).
    pub timeline: Option<Timeline>,
    /// Per item: who woke it and who ran while it waited for a CPU (issue 21; items
    /// without causes are absent), with the whole-trace counters. Not in this
    /// document's JSON: `items` shows them per item.
    #[serde(skip)]
    pub causes: Vec<crate::causes::ItemCauses>,
    #[serde(skip)]
    pub cause_stats: crate::causes::CauseStats,
}

impl StackProfile {
    /// The names of path `p`, root first.
    pub fn frames(&self, p: u32) -> Vec<&str> {
        self.paths.get(p as usize).map(|v| v.iter().map(|&f| self.functions[f as usize].name.as_str()).collect()).unwrap_or_default()
    }

    /// The stacks of item `id` (`None`: no such item among the spans).
    pub fn item(&self, id: u64) -> Option<&ItemStacks> {
        self.items.iter().find(|i| i.id == id)
    }

    pub fn off_cpu_ns(&self) -> u64 {
        self.runnable_ns.saturating_add(self.blocked_ns)
    }

    /// Kept samples with a recorded stack (any status but `none`).
    pub fn samples_with_stacks(&self) -> u64 {
        self.statuses.iter().filter(|s| s.status != StackStatus::None.name()).map(|s| s.samples).sum()
    }

    /// Flat view of the stack rows: per leaf function (self) and per function anywhere on
    /// the stack (total), most self first. Values are samples or ns, as `rows` count.
    pub fn flat<'a>(&'a self, rows: impl Iterator<Item = (u32, u64)>) -> Vec<FlatRow<'a>> {
        self.flat_by(rows, false)
    }

    /// [`Self::flat`] with `self` counted at the innermost **user** frame when the stack
    /// has one: for off-CPU stacks, whose kernel part ends in the scheduler for every
    /// sleep, "where did it wait" is the user code that called into the kernel.
    pub fn flat_user<'a>(&'a self, rows: impl Iterator<Item = (u32, u64)>) -> Vec<FlatRow<'a>> {
        self.flat_by(rows, true)
    }

    fn flat_by<'a>(&'a self, rows: impl Iterator<Item = (u32, u64)>, user_leaf: bool) -> Vec<FlatRow<'a>> {
        let mut acc: FxHashMap<u32, (u64, u64)> = FxHashMap::default();
        let mut seen: Vec<u32> = Vec::new();
        for (p, n) in rows {
            let Some(path) = self.paths.get(p as usize) else {
                continue;
            };
            let user = || path.iter().rev().find(|&&f| !is_kernel_binary(&self.functions[f as usize].binary));
            let leaf = if user_leaf { user().or(path.last()) } else { path.last() };
            if let Some(&leaf) = leaf {
                acc.entry(leaf).or_default().0 += n;
            }
            seen.clear();
            for &f in path {
                if !seen.contains(&f) {
                    seen.push(f);
                    acc.entry(f).or_default().1 += n;
                }
            }
        }
        let mut v: Vec<FlatRow> =
            acc.into_iter().map(|(f, (s, t))| FlatRow { name: &self.functions[f as usize].name, self_value: s, total_value: t }).collect();
        v.sort_by(|a, b| b.self_value.cmp(&a.self_value).then(b.total_value.cmp(&a.total_value)).then(a.name.cmp(b.name)));
        v
    }
}

/// Whether a function row's binary is the kernel or a kernel module.
pub fn is_kernel_binary(b: &str) -> bool {
    b.starts_with("[kernel") || b.ends_with(".ko") || b.contains(".ko.") || b == "[guest]"
}

/// One function of [`StackProfile::flat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatRow<'a> {
    pub name: &'a str,
    /// As the leaf (innermost) frame.
    pub self_value: u64,
    /// Anywhere on the stack (recursion counted once).
    pub total_value: u64,
}
