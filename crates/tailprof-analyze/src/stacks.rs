//! Call-stack profiles and off-CPU time: samples per stack, per item, and where threads
//! waited.
//!
//! [`StackBuilder`] is a [`ResolvedSink`] (read through [`Resolved`], which keeps the
//! address spaces and the trace's [`tailprof_format::StackTable`] current) and, per
//! sample of the selected event:
//!
//! 1. finds the innermost item open on the sample's thread at its time ([`ItemSpan`]s
//!    from an items report; a binary search in the thread's spans);
//! 2. maps `(pid, address-space generation, stack id)` to a resolved path (one
//!    FxHashMap lookup; the frames are resolved to locations once per key, the leaf at
//!    its `ip`, every caller at `ip - 1` since callers' ips are return addresses,
//!    FORMAT.md §5.5). A sample without a stack is a one-frame path of its `ip`;
//! 3. bumps the counter of `(item, path, stack status)`.
//!
//! `Switch` records go through [`crate::offcpu::Timelines`]; every closed off-CPU
//! interval is added, clipped, to each item of its thread it overlaps, and whole to the
//! trace's off-CPU view, keyed by the stack where the thread went off CPU.
//!
//! [`StackBuilder::finish`] symbolizes every location once ([`Resolver::functions`]),
//! expands functions inlined at an address into frames of their own
//! ([`crate::resolve::inline_rows`], from DWARF inline records) and folds paths
//! of locations into paths of functions, so two call sites of one caller are one frame. Filters ([`StackFilter`]) select what the whole-trace views
//! ([`StackProfile::stacks`], [`StackProfile::off_cpu`]) count; per-item views are kept for
//! every item (explanations compare an item with its whole class).

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{
    Comm, CpuMode, Frame, FrameKind, Mmap, ReadSummary, Sample, StackId, StackStatus, Switch, SwitchKind, Task, TraceHeader, TraceReader,
    Wakeup,
};

use crate::item_maps::ItemMaps;
use crate::items::ItemRow;
use crate::offcpu::{OffInterval, OffState, Timelines};
use crate::profile::event_name;
use crate::resolve::{FunctionInfo, LocId, Resolved, ResolvedSink, Resolver};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// Item index meaning "on no item" / "the whole trace".
const NO_ITEM: u32 = u32::MAX;

/// The time window of one item on its thread (from [`crate::items::ItemsReport`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemSpan {
    pub id: u64,
    pub pid: u32,
    pub tid: u32,
    pub class: Option<String>,
    pub begin_ns: u64,
    pub end_ns: u64,
    /// Flagged slow by the items analysis.
    pub anomalous: bool,
    /// With switch markers: the intervals the item was current, per thread. Samples and
    /// off-CPU time count for the item only inside them (empty: all of begin..end on
    /// `tid`).
    pub current: Vec<crate::items::CurrentSlice>,
}

impl ItemSpan {
    /// The spans of an items report's rows, in the same order.
    pub fn from_rows(rows: &[ItemRow]) -> Vec<ItemSpan> {
        rows.iter()
            .map(|r| ItemSpan {
                id: r.id,
                pid: r.pid,
                tid: r.tid,
                class: r.class.clone(),
                begin_ns: r.begin_ns,
                end_ns: r.end_ns.max(r.begin_ns),
                anomalous: r.anomalous,
                current: r.current.clone(),
            })
            .collect()
    }
}

/// What the whole-trace views count. All given conditions must hold; with none, every
/// sample counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StackFilter {
    /// Only samples inside these items (`--item ID`, repeatable).
    pub items: Vec<u64>,
    /// Only samples inside items of this class.
    pub class: Option<String>,
    /// Only samples inside some item.
    pub in_items: bool,
    /// Only samples inside flagged (slow) items.
    pub slow: bool,
}

impl StackFilter {
    /// Whether any condition is set (so only samples inside items count).
    pub fn is_active(&self) -> bool {
        self.in_items || self.slow || self.class.is_some() || !self.items.is_empty()
    }

    /// Whether an item passes the filter.
    pub fn keeps(&self, s: &ItemSpan) -> bool {
        (self.items.is_empty() || self.items.contains(&s.id))
            && self.class.as_ref().is_none_or(|c| s.class.as_deref() == Some(c.as_str()))
            && (!self.slow || s.anomalous)
    }

    /// Words for a header line, e.g. `items 3, 7; class SELECT; slow items`.
    pub fn describe(&self) -> Option<String> {
        if !self.is_active() {
            return None;
        }
        let mut p = Vec::new();
        if !self.items.is_empty() {
            p.push(format!("items {}", self.items.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")));
        }
        if let Some(c) = &self.class {
            p.push(format!("class {c}"));
        }
        if self.slow {
            p.push("slow items".into());
        }
        if p.is_empty() {
            p.push("inside items".into());
        }
        Some(p.join("; "))
    }
}

/// Options of [`stack_profile`].
#[derive(Debug, Clone, Default)]
pub struct StackOptions {
    /// Index into `TraceHeader::events` of the sampling event (`None`: the first).
    pub event: Option<u16>,
    pub filter: StackFilter,
    /// Keep every kept sample and off-CPU interval in time order
    /// ([`StackProfile::timeline`]) for the timeline exports (Perfetto, Firefox Profiler).
    pub timeline: bool,
}

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

/// The kept samples and off-CPU intervals in time order (with [`StackOptions::timeline`]).
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
    /// fp/LBR chain was judged [`BROKEN`];
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

/// Everything [`stack_profile`] found; see the module docs.
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
    /// With [`StackOptions::timeline`].
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

/// Key of a resolved path: (pid key, generation, stack id or location, is a location).
type PathKey = (u32, u32, u32, bool);

/// An interval's items: (index, overlap), and (index, begin, end).
type IntervalHits = (Vec<(u32, u64)>, Vec<(u32, u64, u64)>);

/// A [`ResolvedSink`] building a [`StackProfile`]; see the module docs.
#[derive(Debug)]
pub struct StackBuilder {
    event: u16,
    event_name: String,
    filter: StackFilter,
    spans: Vec<ItemSpan>,
    keep: Vec<bool>,
    by_tid: FxHashMap<u32, ThreadSpans>,
    path_keys: FxHashMap<PathKey, u32>,
    /// Resolved paths, root first.
    loc_paths: Vec<Vec<LocId>>,
    /// Kept samples (the whole-trace view) by (path, status): (samples, period).
    samples: FxHashMap<(u32, StackStatus), (u64, u64)>,
    /// Per item index: samples by (path, status), dense ([`ItemMaps`]).
    item_samples: ItemMaps<(u32, StackStatus), (u64, u64)>,
    /// Off-CPU time of the whole-trace view by (path, state), and per item index.
    off: FxHashMap<(u32, OffState), u64>,
    item_off: ItemMaps<(u32, OffState), u64>,
    timelines: Timelines,
    statuses: [u64; 8],
    total: u64,
    last_time: u64,
    scratch: Vec<Frame>,
    read: Option<ReadSummary>,
    /// With a timeline: kept samples and intervals, paths still location paths.
    timeline: Option<Timeline>,
    /// Off-CPU recording started at the first marker (header `off_cpu_from`), and the
    /// first `Switch` record of each process (from then on its switches are complete).
    off_cpu_late: bool,
    first_switch: FxHashMap<u32, u64>,
    /// Wakeups and who ran instead (issue 21).
    causes: crate::causes::CauseTracker,
    /// [`Self::add_interval`]'s items of an interval: (index, overlap), (index, begin, end).
    scratch_hits: IntervalHits,
    /// The sample interval, as the items join measures it (the period of a clock event
    /// with a fixed one, else the median spacing of a thread's samples): noise time.
    fixed_interval: Option<f64>,
    meter: crate::items::estimate::IntervalMeter,
    last_sample: FxHashMap<u32, u64>,
    /// The CPU of each thread's last switch record, and migrations per item.
    last_cpu: FxHashMap<u32, u32>,
    migrations: Vec<u64>,
}

/// The item spans of one thread, by begin: (begin, end, item index), with where the
/// last lookup ended.
#[derive(Debug, Default)]
struct ThreadSpans {
    spans: Vec<(u64, u64, u32)>,
    /// The largest end among `spans[..=i]`: a backward scan for spans overlapping an
    /// interval stops where this is at or before the interval's begin.
    max_end: Vec<u64>,
    /// The last lookup's partition point: a thread's records come in time order, so the
    /// next one is usually there or a few spans later.
    at: std::cell::Cell<usize>,
}

/// The number of spans of `ts` that begin at or before `t`, starting from the last
/// lookup's answer (a binary search when `t` is before it or far after it).
fn begun(ts: &ThreadSpans, t: u64) -> usize {
    let v = &ts.spans;
    let mut i = ts.at.get().min(v.len());
    if i > 0 && v[i - 1].0 > t {
        i = v.partition_point(|s| s.0 <= t);
    } else {
        let mut steps = 0;
        while i < v.len() && v[i].0 <= t {
            i += 1;
            steps += 1;
            if steps == 8 {
                i = v.partition_point(|s| s.0 <= t);
                break;
            }
        }
    }
    ts.at.set(i);
    i
}

/// The innermost item of `by_tid` open on `tid` at `t` (`NO_ITEM`: none).
fn item_in(by_tid: &FxHashMap<u32, ThreadSpans>, tid: u32, t: u64) -> u32 {
    let Some(ts) = by_tid.get(&tid) else {
        return NO_ITEM;
    };
    let i = begun(ts, t);
    let v = &ts.spans;
    // Latest begin first: the innermost of nested items. Items of one thread rarely
    // nest deeply; look back a bounded number of spans.
    for &(_, end, idx) in v[..i].iter().rev().take(16) {
        if t <= end {
            return idx;
        }
    }
    NO_ITEM
}

impl StackBuilder {
    /// A builder for `header`'s trace; `spans` are the items samples and off-CPU time
    /// are attributed to (empty: none). Fails if `opts.event` names no event.
    pub fn new(header: &TraceHeader, opts: &StackOptions, spans: Vec<ItemSpan>) -> Result<Self, AnalyzeError> {
        let event = opts.event.unwrap_or(0);
        if !header.events.is_empty() && event as usize >= header.events.len() {
            return Err(AnalyzeError::NoSuchEvent {
                spec: event.to_string(),
                available: header.events.iter().map(|e| e.name.clone()).collect(),
            });
        }
        let mut by_tid: FxHashMap<u32, ThreadSpans> = FxHashMap::default();
        for (i, s) in spans.iter().enumerate() {
            if s.current.is_empty() {
                by_tid.entry(s.tid).or_default().spans.push((s.begin_ns, s.end_ns, i as u32));
            }
            for c in &s.current {
                by_tid.entry(c.tid).or_default().spans.push((c.begin_ns, c.end_ns, i as u32));
            }
        }
        for v in by_tid.values_mut() {
            v.spans.sort_unstable();
            let mut m = 0;
            v.max_end = v
                .spans
                .iter()
                .map(|s| {
                    m = m.max(s.1);
                    m
                })
                .collect();
        }
        let keep = spans.iter().map(|s| opts.filter.keeps(s)).collect();
        let keep_len = spans.len();
        let off_cpu_late = header.extra.get("off_cpu_from").is_some_and(|v| v == "first_marker");
        Ok(StackBuilder {
            causes: crate::causes::CauseTracker::new(header, opts.timeline),
            scratch_hits: Default::default(),
            fixed_interval: header.events.get(event as usize).and_then(crate::items::estimate::period_interval_ns),
            meter: Default::default(),
            last_sample: FxHashMap::default(),
            last_cpu: FxHashMap::default(),
            migrations: vec![0; spans.len()],
            off_cpu_late,
            first_switch: FxHashMap::default(),
            event,
            event_name: event_name(header, event),
            filter: opts.filter.clone(),
            spans,
            keep,
            by_tid,
            path_keys: FxHashMap::default(),
            loc_paths: Vec::new(),
            samples: FxHashMap::default(),
            item_samples: ItemMaps::with_items(keep_len),
            off: FxHashMap::default(),
            item_off: ItemMaps::with_items(keep_len),
            timelines: Timelines::new(),
            statuses: [0; 8],
            total: 0,
            last_time: 0,
            scratch: Vec::new(),
            read: None,
            timeline: opts.timeline.then(Timeline::default),
        })
    }

    /// Attach the reader's summary (shown as warnings when the trace was damaged).
    pub fn set_read_summary(&mut self, read: ReadSummary) {
        self.read = Some(read);
    }

    /// The innermost item open on `tid` at `t`.
    #[inline]
    fn item_at(&self, tid: u32, t: u64) -> u32 {
        item_in(&self.by_tid, tid, t)
    }

    /// The resolved path of `stack` (or of the lone `ip` when it has none; an empty path
    /// without `ip`) for `pid`.
    fn path_of(&mut self, r: &mut Resolver, pid: u32, stack: StackId, ip: Option<u64>, mode: CpuMode) -> u32 {
        let gen = r.generation(pid);
        let key: PathKey = if r.stacks().contains(stack) {
            (pid, gen, stack.0, false)
        } else if let Some(ip) = ip {
            (pid, gen, r.loc_of(pid, ip, mode).0, true)
        } else {
            (0, 0, 0, false)
        };
        if let Some(&p) = self.path_keys.get(&key) {
            return p;
        }
        let locs = if key.3 {
            vec![LocId(key.2)]
        } else {
            self.scratch.clear();
            self.scratch.extend(r.stacks().frames_leaf_first(stack));
            let mut locs = Vec::with_capacity(self.scratch.len());
            for (i, f) in self.scratch.iter().enumerate().rev() {
                // A caller in the null page is not code (the end of a frame-pointer
                // chain in code built without frame pointers): not a frame.
                if i != 0 && f.ip < 0x1000 {
                    continue;
                }
                // Callers' ips are return addresses: look up the call instruction.
                let ip = if i == 0 { f.ip } else { f.ip.saturating_sub(1) };
                let cpumode = if f.kind == FrameKind::Kernel { CpuMode::Kernel } else { CpuMode::User };
                locs.push(r.loc_of(pid, ip, cpumode));
            }
            locs
        };
        let p = self.loc_paths.len() as u32;
        self.loc_paths.push(locs);
        self.path_keys.insert(key, p);
        p
    }

    fn add_interval(&mut self, r: &mut Resolver, iv: &OffInterval) {
        let len = iv.len_ns();
        if len == 0 {
            return;
        }
        let path = self.path_of(r, iv.pid, iv.stack, None, CpuMode::Unknown);
        let slice = OffSlice { pid: iv.pid, tid: iv.tid, begin_ns: iv.begin_ns, end_ns: iv.end_ns, state: iv.state, path };
        let active = self.filter.is_active();
        if !active {
            // The whole-trace view: every interval whole (with a filter, the kept items' parts).
            *self.off.entry((path, iv.state)).or_default() += len;
            if let Some(t) = &mut self.timeline {
                t.off_cpu.push(slice);
            }
        }
        let Some(ts) = self.by_tid.get(&iv.tid) else {
            let by_tid = &self.by_tid;
            self.causes.interval(iv, path, &[], &|tid, t| item_in(by_tid, tid, t));
            return;
        };
        let v = &ts.spans;
        // The spans that begin before the interval ends (`len > 0`: `end_ns >= 1`).
        let i = begun(ts, iv.end_ns - 1);
        let mut misses = 0;
        // Reused buffers: no allocation per interval.
        let (mut hits, mut bounds) = std::mem::take(&mut self.scratch_hits);
        hits.clear();
        bounds.clear();
        for (j, &(b, e, idx)) in v[..i].iter().enumerate().rev() {
            if ts.max_end[j] <= iv.begin_ns {
                // No span at or before this one ends after the interval begins.
                break;
            }
            let o = iv.overlap_ns(b, e);
            if o > 0 {
                hits.push((idx, o));
                bounds.push((idx, b, e));
                misses = 0;
            } else {
                misses += 1;
                if misses > 16 {
                    break;
                }
            }
        }
        {
            let by_tid = &self.by_tid;
            self.causes.interval(iv, path, &bounds, &|tid, t| item_in(by_tid, tid, t));
        }
        for (&(idx, o), &(_, sb, se)) in hits.iter().zip(bounds.iter()) {
            *self.item_off.entry(idx, (path, iv.state)) += o;
            if active && self.keep[idx as usize] {
                *self.off.entry((path, iv.state)).or_default() += o;
                if let Some(t) = &mut self.timeline {
                    let (b, e) = (iv.begin_ns.max(sb), iv.end_ns.min(se));
                    t.off_cpu.push(OffSlice { begin_ns: b, end_ns: e, ..slice });
                }
            }
        }
        self.scratch_hits = (hits, bounds);
    }

    /// Close open off-CPU intervals, symbolize and fold into a [`StackProfile`].
    /// Call after the last record with the resolver it was read with.
    pub fn finish(mut self, resolver: &mut Resolver, symbolizer: &mut Symbolizer) -> StackProfile {
        for iv in self.timelines.finish(self.last_time) {
            self.add_interval(resolver, &iv);
        }
        let mut table = resolver.functions(symbolizer);
        // Each location's functions innermost first: functions inlined at the address
        // (DWARF inline records) become frames of their own, inside the function that
        // holds the code.
        let inlined = crate::resolve::inline_rows(resolver, &mut table, symbolizer);
        // Location paths → function paths, interned.
        let mut fpath_ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut paths: Vec<Vec<u32>> = Vec::new();
        let of_path: Vec<u32> = self
            .loc_paths
            .iter()
            .map(|locs| {
                let mut fp: Vec<u32> = Vec::with_capacity(locs.len() + 2);
                for &l in locs {
                    match inlined.get(l.index()) {
                        Some(rows) => fp.extend(rows.iter().rev()),
                        None => fp.push(table.of_loc.get(l.index()).copied().unwrap_or(0)),
                    }
                }
                let next = paths.len() as u32;
                *fpath_ids.entry(fp).or_insert_with_key(|k| {
                    paths.push(k.clone());
                    next
                })
            })
            .collect();
        // Stacks the recorder could not judge (frame-pointer and LBR chains): judged now
        // by their outermost frame's name (see [`chain_end`]), once per location path.
        let mut ends: Vec<Option<ChainEnd>> = vec![None; self.loc_paths.len()];
        let mut end_of =
            |p: u32| -> ChainEnd { *ends[p as usize].get_or_insert_with(|| chain_end(&self.loc_paths[p as usize], resolver, &table)) };
        let mut moved = [0u64; 3];
        for (&(p, status), &(n, _)) in &self.samples {
            if status == StackStatus::Unknown {
                moved[end_of(p) as usize] += n;
            }
        }
        // (complete, truncated) of a sample's stack.
        let mut judged = |p: u32, status: StackStatus| match (status == StackStatus::Unknown).then(|| end_of(p)) {
            Some(ChainEnd::Entry) => (true, false),
            Some(ChainEnd::Broken) => (false, true),
            _ => (status == StackStatus::Complete, status.is_truncated()),
        };
        let mut whole: FxHashMap<(u32, bool, bool), (u64, u64)> = FxHashMap::default();
        let (mut samples, mut period) = (0u64, 0u64);
        for (&(p, status), &(n, per)) in &self.samples {
            let (complete, truncated) = judged(p, status);
            let e = whole.entry((of_path[p as usize], complete, truncated)).or_default();
            e.0 += n;
            e.1 = e.1.saturating_add(per);
            samples += n;
            period = period.saturating_add(per);
        }
        let mut off_whole: FxHashMap<(u32, OffState), u64> = FxHashMap::default();
        for (&(p, state), &ns) in &self.off {
            *off_whole.entry((of_path[p as usize], state)).or_default() += ns;
        }
        let timeline = self.timeline.take().map(|mut t| {
            for s in &mut t.samples {
                s.path = of_path[s.path as usize];
            }
            for o in &mut t.off_cpu {
                o.path = of_path[o.path as usize];
            }
            t.off_cpu.sort_by_key(|o| (o.begin_ns, o.tid));
            t.wakes = self.causes.take_edges();
            t
        });
        let stacks = stack_rows(whole.into_iter());
        let (off_cpu, runnable_ns, blocked_ns) = off_rows(off_whole.into_iter());
        let interval = self.fixed_interval.or_else(|| self.meter.median()).unwrap_or(0.0);
        // What each function path's kernel part was doing, once per path.
        let mut works: Vec<Option<Option<crate::causes::KernelWork<'_>>>> = vec![None; paths.len()];
        let switches = self.timelines.switches > 0;
        // Per item: its entries keyed by function path, merged (two location paths may
        // fold into one function path), in reused buffers.
        let mut st: Vec<(StackKey, (u64, u64))> = Vec::new();
        let mut off: Vec<((u32, OffState), u64)> = Vec::new();
        let items = self
            .spans
            .iter()
            .enumerate()
            .map(|(i, s)| {
                st.clear();
                for (&(p, status), &v) in self.item_samples.get(i as u32) {
                    let (complete, truncated) = judged(p, status);
                    st.push(((of_path[p as usize], complete, truncated), v));
                }
                merge_rows(&mut st, |a, b| (a.0 + b.0, a.1.saturating_add(b.1)));
                off.clear();
                off.extend(self.item_off.get(i as u32).map(|(&(p, state), &ns)| ((of_path[p as usize], state), ns)));
                merge_rows(&mut off, |a, b| a + b);
                let (off_cpu, runnable_ns, blocked_ns) = off_rows(off.iter().copied());
                let off_cpu_partial = self.off_cpu_late && self.first_switch.get(&s.pid).is_none_or(|&t| t > s.begin_ns);
                let mut noise = crate::causes::Noise {
                    migrations: switches.then(|| self.migrations.get(i).copied().unwrap_or(0)),
                    ..Default::default()
                };
                for &((fp, _, _), (n, _)) in &st {
                    if let Some(w) = kernel_work_of(fp, &paths, &table.rows, &mut works) {
                        noise.add(w, n, interval);
                    }
                }
                noise.sort();
                ItemStacks { id: s.id, stacks: stack_rows(st.iter().copied()), off_cpu, runnable_ns, blocked_ns, off_cpu_partial, noise }
            })
            .collect();
        drop(works);
        let (causes, cause_stats) = {
            let names = |p: u32| -> Vec<String> {
                of_path
                    .get(p as usize)
                    .and_then(|&fp| paths.get(fp as usize))
                    .map(|v| v.iter().map(|&f| table.rows[f as usize].name.clone()).collect())
                    .unwrap_or_default()
            };
            let spans = &self.spans;
            let span = |i: u32| spans.get(i as usize).map_or((0, None), |s| (s.id, s.class.clone()));
            std::mem::take(&mut self.causes).finish(&names, &span)
        };
        let mut counts = self.statuses;
        let unknown = StackStatus::Unknown as usize;
        counts[unknown] = counts[unknown].saturating_sub(moved[ChainEnd::Entry as usize] + moved[ChainEnd::Broken as usize]);
        counts[StackStatus::Complete as usize] += moved[ChainEnd::Entry as usize];
        let mut statuses = status_counts(&counts);
        if moved[ChainEnd::Broken as usize] > 0 {
            // Before `unknown`, the last code: statuses stay in code order otherwise.
            let at = statuses.iter().position(|s| s.status == StackStatus::Unknown.name()).unwrap_or(statuses.len());
            statuses.insert(at, StatusCount { status: BROKEN, reason: BROKEN_REASON, samples: moved[ChainEnd::Broken as usize] });
        }
        StackProfile {
            event: self.event_name,
            total_samples: self.total,
            samples,
            period,
            statuses,
            functions: table.rows,
            paths,
            stacks,
            off_cpu,
            runnable_ns,
            blocked_ns,
            items,
            switches: self.timelines.switches,
            off_open_at_end: self.timelines.open_at_end,
            off_double_outs: self.timelines.double_outs,
            filter: self.filter,
            kernel_symbols: table.kernel_note,
            read: self.read,
            timeline,
            causes,
            cause_stats,
        }
    }
}

/// What the kernel part of function path `fp` was doing ([`crate::causes::kernel_work`]),
/// remembered per path in `works`. A kernel frame counts as named when it has a symbol
/// (not `[kernel]`: no kernel symbols).
fn kernel_work_of<'a>(
    fp: u32,
    paths: &[Vec<u32>],
    functions: &'a [FunctionInfo],
    works: &mut [Option<Option<crate::causes::KernelWork<'a>>>],
) -> Option<crate::causes::KernelWork<'a>> {
    let slot = works.get_mut(fp as usize)?;
    *slot.get_or_insert_with(|| {
        let rows: Vec<&FunctionInfo> = paths.get(fp as usize).into_iter().flatten().filter_map(|&f| functions.get(f as usize)).collect();
        let frames: Vec<(&str, bool)> = rows
            .iter()
            .filter(|f| is_kernel_binary(&f.binary))
            .map(|f| (f.name.as_str(), f.unknown_reason.is_none() && !f.name.starts_with('[')))
            .collect();
        // The innermost user frame below the kernel part (root first: user, then kernel).
        let caller =
            rows.iter().take_while(|f| !is_kernel_binary(&f.binary)).last().filter(|f| f.unknown_reason.is_none()).map(|f| f.name.as_str());
        crate::causes::kernel_work(&frames, caller)
    })
}

/// Status name of a frame-pointer or LBR chain judged broken at report time (not a stored
/// status: the recorder stores such chains as `unknown`, see [`chain_end`]).
pub const BROKEN: &str = "broken";
const BROKEN_REASON: &str = "broken chain (frame pointers omitted)";

/// Functions a thread's or process's stack starts in: a frame-pointer or LBR chain whose
/// outermost user frame is one of these reached the outermost frame. From the stacks of
/// this machine (Debian 12, glibc 2.36: main threads end in `__libc_start_call_main`,
/// threads in `start_thread`; the dynamic loader's startup in `_start`), plus the other
/// entry points of glibc, musl and the kernel.
const ENTRY_FUNCTIONS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "__clone",
    "clone3",
    "__clone3",
    "__clone_internal",
    "_dl_start",
    "_dl_start_user",
    // musl
    "__libc_start_main_stage2",
    "start",
    // kernel threads (a chain with no user part)
    "ret_from_fork",
    "ret_from_fork_asm",
    "kthread",
];

/// Rust threads start in `std::sys::…::thread::Thread::new::thread_start` (the path
/// changes between releases); Go's in `runtime.goexit`/`runtime.rt0_go`.
fn is_entry_function(name: &str) -> bool {
    ENTRY_FUNCTIONS.contains(&name)
        || name.ends_with("::thread_start")
        || name.starts_with("runtime.goexit")
        || name == "runtime.rt0_go"
        || name == "runtime.mstart"
}

/// How a chain of unknown completeness ends (judged after symbolization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChainEnd {
    /// The outermost user frame (kernel frame, for a kernel thread) is an entry function:
    /// complete.
    Entry = 0,
    /// It is another function, or an address in no file: the chain ended early.
    Broken = 1,
    /// Its code has no name (a stripped binary without symbols): cannot tell.
    Unnamed = 2,
}

/// `fn_<hex>`: a function of a stripped binary named by its `.eh_frame` range.
fn is_range_name(name: &str) -> bool {
    name.strip_prefix("fn_").is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The end of the chain `locs` (root first): its outermost user location, or its
/// outermost location when it has no user part.
fn chain_end(locs: &[LocId], resolver: &Resolver, table: &crate::resolve::FunctionTable) -> ChainEnd {
    use crate::maps::BinaryKind;
    let kind = |l: &LocId| resolver.locations().get(l.index()).map(|loc| resolver.spaces().binary(loc.binary).kind);
    let kernel = |k: Option<BinaryKind>| matches!(k, Some(BinaryKind::Kernel | BinaryKind::KernelModule));
    let Some(root) = locs.iter().find(|l| !kernel(kind(l))).or(locs.first()) else {
        return ChainEnd::Unnamed;
    };
    match kind(root) {
        Some(BinaryKind::Unmapped | BinaryKind::Anon) | None => return ChainEnd::Broken,
        _ => {}
    }
    let Some(f) = table.of_loc.get(root.index()).and_then(|&r| table.rows.get(r as usize)) else {
        return ChainEnd::Unnamed;
    };
    if is_entry_function(&f.name) {
        ChainEnd::Entry
    } else if f.unknown_reason.is_some() || is_range_name(&f.name) {
        ChainEnd::Unnamed
    } else {
        ChainEnd::Broken
    }
}

/// A stack row's key: (function path, complete, truncated).
type StackKey = (u32, bool, bool);

/// Sums the values of equal keys of `v` (sorts it by key).
fn merge_rows<K: Ord + Copy, V: Copy>(v: &mut Vec<(K, V)>, add: impl Fn(V, V) -> V) {
    if v.len() < 2 {
        return;
    }
    v.sort_unstable_by_key(|e| e.0);
    let mut w = 0;
    for r in 1..v.len() {
        if v[r].0 == v[w].0 {
            v[w].1 = add(v[w].1, v[r].1);
        } else {
            w += 1;
            v[w] = v[r];
        }
    }
    v.truncate(w + 1);
}

fn stack_rows(m: impl Iterator<Item = ((u32, bool, bool), (u64, u64))>) -> Vec<StackRow> {
    let mut v: Vec<StackRow> =
        m.map(|((path, complete, truncated), (samples, period))| StackRow { path, samples, period, complete, truncated }).collect();
    v.sort_unstable_by(|a, b| {
        b.samples.cmp(&a.samples).then(a.path.cmp(&b.path)).then(b.complete.cmp(&a.complete)).then(a.truncated.cmp(&b.truncated))
    });
    v
}

fn off_rows(m: impl Iterator<Item = ((u32, OffState), u64)>) -> (Vec<OffRow>, u64, u64) {
    let (mut r, mut b) = (0u64, 0u64);
    let mut v: Vec<OffRow> = m
        .map(|((path, state), ns)| {
            match state {
                OffState::Runnable => r = r.saturating_add(ns),
                OffState::Blocked => b = b.saturating_add(ns),
            }
            OffRow { path, state, ns }
        })
        .collect();
    v.sort_unstable_by(|a, b| b.ns.cmp(&a.ns).then(a.path.cmp(&b.path)).then(a.state.cmp(&b.state)));
    (v, r, b)
}

impl ResolvedSink for StackBuilder {
    const KEEP_STACKS: bool = true;

    #[inline]
    fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
        self.last_time = self.last_time.max(s.time);
        if s.event != self.event {
            return;
        }
        // With causes every sample's path is needed (the critical paths); else only kept ones'.
        let mut known = None;
        if self.causes.on {
            let path = self.path_of(r, s.pid, s.stack, Some(s.ip), s.cpumode);
            self.causes.sample(s.tid, s.time, path);
            known = Some(path);
        }
        self.total += 1;
        if self.fixed_interval.is_none() && !self.meter.is_full() {
            if let Some(last) = self.last_sample.insert(s.tid, s.time) {
                self.meter.add(s.time.saturating_sub(last));
            }
        }
        let item = if self.by_tid.is_empty() { NO_ITEM } else { self.item_at(s.tid, s.time) };
        let kept = !self.filter.is_active() || (item != NO_ITEM && self.keep[item as usize]);
        if kept {
            self.statuses[s.stack_status as usize] += 1;
        } else if item == NO_ITEM {
            // Counted nowhere: not in the whole-trace view, in no item.
            return;
        }
        let path = match known {
            Some(p) => p,
            None => self.path_of(r, s.pid, s.stack, Some(s.ip), s.cpumode),
        };
        if kept {
            let e = self.samples.entry((path, s.stack_status)).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(s.period);
        }
        if item != NO_ITEM {
            let e = self.item_samples.entry(item, (path, s.stack_status));
            e.0 += 1;
            e.1 = e.1.saturating_add(s.period);
        }
        if kept {
            if let Some(t) = &mut self.timeline {
                t.samples.push(TimedSample { time_ns: s.time, pid: s.pid, tid: s.tid, path });
            }
        }
    }
    fn handle_switch(&mut self, s: &Switch, r: &mut Resolver) {
        self.last_time = self.last_time.max(s.time);
        if self.off_cpu_late {
            self.first_switch.entry(s.pid).or_insert(s.time);
        }
        self.causes.switch(s);
        if !self.causes.feeds_timelines(s) {
            return;
        }
        let prev = self.last_cpu.insert(s.tid, s.cpu);
        if s.kind == SwitchKind::In && prev.is_some_and(|c| c != s.cpu) && !self.by_tid.is_empty() {
            let item = self.item_at(s.tid, s.time);
            if let Some(m) = self.migrations.get_mut(item as usize) {
                *m += 1;
            }
        }
        if let Some(iv) = self.timelines.handle(s) {
            self.add_interval(r, &iv);
        }
    }
    fn handle_wakeup(&mut self, w: &Wakeup, r: &mut Resolver) {
        self.last_time = self.last_time.max(w.time);
        if self.causes.on {
            let path = if w.stack.is_none() { crate::causes::NO_PATH } else { self.path_of(r, w.pid, w.stack, None, CpuMode::Kernel) };
            self.causes.wakeup(w, path);
        }
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.causes.comm(c);
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.last_time = self.last_time.max(m.time);
    }
    fn handle_exit(&mut self, t: &Task) {
        self.last_time = self.last_time.max(t.time);
    }
}

/// Build a [`StackProfile`] of a whole trace: reads every record once, then symbolizes.
/// `spans` (from [`ItemSpan::from_rows`]) are needed for per-item views and for any
/// filter; pass an empty vector otherwise.
pub fn stack_profile(
    reader: &mut TraceReader,
    opts: &StackOptions,
    spans: Vec<ItemSpan>,
    symbolizer: &mut Symbolizer,
) -> Result<StackProfile, AnalyzeError> {
    let b = StackBuilder::new(reader.header(), opts, spans)?;
    let mut sink = Resolved::wrap(reader.header(), b);
    let summary = reader.read_all(&mut sink)?;
    sink.add_build_ids(reader.build_ids());
    let (mut b, mut resolver) = sink.into_parts();
    b.set_read_summary(summary);
    Ok(b.finish(&mut resolver, symbolizer))
}

/// Everything `tailprof report` needs for its stack, off-CPU and filtered views: the
/// items (only when `need_items` or a filter needs them; one pass of the items join) and
/// the stack profile (a second pass). Fails with [`AnalyzeError::NoItems`] when items are
/// needed and the trace has none.
pub fn stack_report(
    reader: &mut TraceReader,
    opts: &StackOptions,
    need_items: bool,
    symbolizer: &mut Symbolizer,
) -> Result<(Option<crate::items::ItemsReport>, StackProfile), AnalyzeError> {
    let items = if need_items || opts.filter.is_active() {
        let io = crate::items::ItemsOptions { event: opts.event, ..Default::default() };
        Some(crate::items::items_report(reader, &io, symbolizer)?)
    } else {
        None
    };
    let spans = items.as_ref().map(|r| ItemSpan::from_rows(&r.items)).unwrap_or_default();
    if opts.filter.is_active() {
        for id in &opts.filter.items {
            if !spans.iter().any(|s| s.id == *id) {
                return Err(AnalyzeError::NoSuchItem { id: *id });
            }
        }
        if let Some(c) = &opts.filter.class {
            if !spans.iter().any(|s| s.class.as_deref() == Some(c.as_str())) {
                let mut classes: Vec<String> = spans.iter().map(|s| s.class.clone().unwrap_or_else(|| "(no class)".to_owned())).collect();
                classes.sort();
                classes.dedup();
                classes.truncate(10);
                return Err(AnalyzeError::NoSuchClass { class: c.clone(), classes });
            }
        }
    }
    let p = stack_profile(reader, opts, spans, symbolizer)?;
    Ok((items, p))
}

/// Stacks and off-CPU time of every item of `items` (a second pass over the trace), for
/// `tailprof items` and `--explain`; no filter.
pub fn item_stacks(
    reader: &mut TraceReader,
    items: &crate::items::ItemsReport,
    event: Option<u16>,
    symbolizer: &mut Symbolizer,
) -> Result<StackProfile, AnalyzeError> {
    let opts = StackOptions { event, filter: StackFilter::default(), timeline: false };
    stack_profile(reader, &opts, ItemSpan::from_rows(&items.items), symbolizer)
}
