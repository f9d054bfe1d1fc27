//! The one typed document of `tailprof items` ([`ItemsDocument`]), built by [`document`]
//! (a trace) or [`stored`] (the agent's store); `present` renders it as text and
//! serializes it as JSON (docs/JSON.md), nothing is added to the JSON afterwards.
//!
//! A trace takes two passes over the reader it is given (never a second open):
//!
//! 1. the items join ([`super::ItemsJoin`]), and, with [`ItemsQuery::memory`] and a
//!    last-level-cache-miss event, the memory traffic per item
//!    ([`crate::bandwidth::item_memory_builder`]) fed the same records;
//! 2. stacks, off-CPU time and causes per item ([`crate::stacks::item_stacks`]): they
//!    attribute each sample and off-CPU interval to the item open on its thread at its
//!    time, which needs every item's span (ends, nesting, items open at the end), so they
//!    can only run once the join is finished.
//!
//! The loss table comes from the reader's summary walk ([`TraceReader::summarize`]),
//! which reads the trailer's counters rather than the records.

use std::cmp::Ordering;

use rustc_hash::FxHashMap;
use serde::{Serialize, Serializer};
use tailprof_format::losses::{LossRow, LossTable};
use tailprof_format::{Sink, TraceReader};

use super::{explain, ItemRow, ItemsJoin, ItemsOptions, ItemsReport};
use crate::bandwidth::{item_memory_builder, ItemBandwidth};
use crate::causes::{explain_causes, CauseExplanation, PreemptedBy, WokenBy};
use crate::offcpu::OffState;
use crate::stack_explain::{explain_stacks, time_split, StackExplanation, TimeSplit};
use crate::stacks::{is_kernel_binary, item_stacks, StackProfile, StatusCount};
use crate::store_query::StoredItems;
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// Order of the item rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemSort {
    /// Longest first.
    #[default]
    Duration,
    /// Highest anomaly score first.
    Anomaly,
    Id,
    /// Begin time (the report's own order).
    Begin,
}

/// Which items are listed, in which order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemSelection {
    /// Only the first N items after sorting; `None`: all.
    pub top: Option<usize>,
    pub sort: ItemSort,
    /// Only items flagged slow (`--slow`).
    pub slow_only: bool,
    /// Only these items (`--item ID`); empty: all.
    pub only: Vec<u64>,
    /// Only the items of this trace (`--trace-id ID`, OpenTelemetry trace id,
    /// [`super::parse_trace_id`]). A listing filter: anomaly flags and class medians
    /// still compare with every item of the class.
    pub trace_id: Option<[u8; 16]>,
}

impl ItemSelection {
    /// Whether `it` passes the filters (not `top`).
    pub fn matches(&self, it: &ItemRow) -> bool {
        (!self.slow_only || it.anomalous)
            && (self.only.is_empty() || self.only.contains(&it.id))
            && self.trace_id.is_none_or(|t| it.trace_id.as_deref() == Some(super::hex_id(&t).as_str()))
    }
}

/// What `tailprof items TRACE` asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemsQuery {
    pub options: ItemsOptions,
    pub selection: ItemSelection,
    /// Explain this item instead of listing items (`--explain ID`).
    pub explain: Option<u64>,
    /// Each listed item's memory traffic, for traces with a last-level-cache-miss event
    /// (`mem_bytes`, `mem_gbps`: `items --json`).
    pub memory: bool,
}

/// Off-CPU stacks listed per item.
pub const ITEM_OFF_CPU_STACKS: usize = 5;

/// Everything `tailprof items` prints, one variant per question.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ItemsDocument {
    /// The items of a trace.
    List(Box<ItemList>),
    /// One item of a trace explained (`--explain ID`).
    Explain(Box<ItemExplain>),
    /// The slow requests retained in the agent's store (`--store DIR`).
    Stored(Box<StoredList>),
}

/// The items of a trace: the report's fields with the listed items in their order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemList {
    /// `items`: the listed items (after selection, sorted, at most `top`).
    #[serde(flatten)]
    pub report: ItemsReport<ItemEntry>,
    /// Items matching the selection but left out by `top`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_items: Option<usize>,
    /// Context switches read (0: the trace has no off-CPU data).
    pub switches: u64,
    /// Samples per stack status.
    pub stack_statuses: Vec<StatusCount>,
    #[serde(serialize_with = "loss_rows")]
    pub losses: LossTable,
    /// Items of the trace (all of them, not only the listed ones).
    #[serde(skip)]
    pub total_items: usize,
    /// Every item flagged slow, in begin order (the text lists them all).
    #[serde(skip)]
    pub anomalous: Vec<ItemRow>,
}

/// One listed item: its row, where its wall time went, its causes and memory traffic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemEntry {
    #[serde(flatten)]
    pub row: ItemRow,
    /// `cpu_ns`, `off_cpu_ns`, `runnable_ns`, `blocked_ns` (`null` without switches).
    #[serde(flatten)]
    pub split: TimeSplit,
    /// Off-CPU recording started during the item: `off_cpu` lists a part.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub off_cpu_partial: bool,
    /// The top [`ITEM_OFF_CPU_STACKS`] off-CPU stacks.
    pub off_cpu: Vec<ItemOffCpu>,
    /// On-CPU noise (issue 21): kernel work by kind, migrations (`null` without the
    /// stack pass's data for this item).
    pub noise: Option<crate::causes::Noise>,
    /// Flagged items: whether the excess over the class median is at least what
    /// sampling resolves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excess_resolvable: Option<bool>,
    /// Who woke the item and who ran while it waited (traces with wakeups).
    #[serde(flatten)]
    pub causes: Option<ItemWaits>,
    /// Memory traffic (with [`ItemsQuery::memory`] and an LLC-miss event).
    #[serde(flatten)]
    pub memory: Option<ItemMemory>,
    /// Events recorded inside the item (room for USDT item events; none yet).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<ItemEvent>,
    /// The item's pieces on threads, when it moved between threads (room for async
    /// items; none yet).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<ItemSegment>,
    /// Off-CPU time measured inside the item (also when partial).
    #[serde(skip)]
    pub measured_runnable_ns: u64,
    #[serde(skip)]
    pub measured_blocked_ns: u64,
}

impl AsRef<ItemRow> for ItemEntry {
    fn as_ref(&self) -> &ItemRow {
        &self.row
    }
}

/// One off-CPU stack of an item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemOffCpu {
    pub state: OffState,
    pub ns: u64,
    /// Root first.
    pub frames: Vec<String>,
    /// Per frame: a kernel function.
    #[serde(skip)]
    pub kernel: Vec<bool>,
}

/// `woken_by` and `preempted_by` of one item (issue 21).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ItemWaits {
    pub woken_by: Vec<WokenBy>,
    pub preempted_by: Vec<PreemptedBy>,
}

/// `mem_bytes` and `mem_gbps` of one item (issue 8).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemMemory {
    pub mem_bytes: u64,
    pub mem_gbps: f64,
}

/// One event recorded inside an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemEvent {
    pub time_ns: u64,
    pub tid: u32,
    pub name: String,
    pub value: Option<u64>,
}

/// A piece of an item on one thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemSegment {
    pub tid: u32,
    pub begin_ns: u64,
    pub end_ns: u64,
}

/// One item explained: by function, by stack and off-CPU state, by cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemExplain {
    /// `item`, `baseline`, `excess_ns`, `estimator`, `diffs`, `responsible`.
    #[serde(flatten)]
    pub functions: super::Explanation,
    /// The wall-time split, `stacks`, `off_cpu`, `resolvable`, `resolution_ns`,
    /// `resolution_note`.
    #[serde(flatten)]
    pub stacks: StackExplanation,
    /// `woken_by`, `preempted_by` (traces with wakeups), `causes` (with switches).
    #[serde(flatten)]
    pub causes: CauseSection,
    #[serde(serialize_with = "loss_rows")]
    pub losses: LossTable,
}

/// The causes part of an explanation, as its JSON keys.
#[derive(Debug, Clone, PartialEq)]
pub struct CauseSection(pub CauseExplanation);

impl Serialize for CauseSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let x = &self.0;
        let mut m = s.serialize_map(None)?;
        if x.recorded {
            m.serialize_entry("woken_by", &x.woken_by)?;
            m.serialize_entry("preempted_by", &x.preempted_by)?;
        }
        if let Some(split) = &x.split {
            m.serialize_entry("causes", split)?;
        }
        m.serialize_entry("noise", &x.noise)?;
        m.serialize_entry("noise_shares", &x.noise_shares)?;
        m.end()
    }
}

/// The slow requests of the agent's store, and how many the text lists.
#[derive(Debug, Clone, Serialize)]
pub struct StoredList {
    #[serde(flatten)]
    pub items: StoredItems,
    #[serde(skip)]
    pub top: usize,
}

fn loss_rows<S: Serializer>(t: &LossTable, s: S) -> Result<S::Ok, S::Error> {
    <[LossRow]>::serialize(&t.rows, s)
}

/// Feeds every record to two sinks (one pass, two analyses).
struct Both<'a, A, B>(&'a mut A, &'a mut B);

impl<A: Sink, B: Sink> Sink for Both<'_, A, B> {
    fn handle_sample(&mut self, s: &tailprof_format::Sample) {
        self.0.handle_sample(s);
        self.1.handle_sample(s);
    }
    fn handle_mmap(&mut self, m: &tailprof_format::Mmap) {
        self.0.handle_mmap(m);
        self.1.handle_mmap(m);
    }
    fn handle_comm(&mut self, c: &tailprof_format::Comm) {
        self.0.handle_comm(c);
        self.1.handle_comm(c);
    }
    fn handle_fork(&mut self, t: &tailprof_format::Task) {
        self.0.handle_fork(t);
        self.1.handle_fork(t);
    }
    fn handle_exit(&mut self, t: &tailprof_format::Task) {
        self.0.handle_exit(t);
        self.1.handle_exit(t);
    }
    fn handle_lost(&mut self, l: &tailprof_format::Lost) {
        self.0.handle_lost(l);
        self.1.handle_lost(l);
    }
    fn handle_throttle(&mut self, t: &tailprof_format::Throttle) {
        self.0.handle_throttle(t);
        self.1.handle_throttle(t);
    }
    fn handle_marker(&mut self, m: &tailprof_format::Marker) {
        self.0.handle_marker(m);
        self.1.handle_marker(m);
    }
    fn handle_item_class(&mut self, c: &tailprof_format::ItemClass) {
        self.0.handle_item_class(c);
        self.1.handle_item_class(c);
    }
    fn handle_item_trace(&mut self, t: &tailprof_format::ItemTrace) {
        self.0.handle_item_trace(t);
        self.1.handle_item_trace(t);
    }
    fn handle_switch(&mut self, s: &tailprof_format::Switch) {
        self.0.handle_switch(s);
        self.1.handle_switch(s);
    }
    fn handle_wakeup(&mut self, w: &tailprof_format::Wakeup) {
        self.0.handle_wakeup(w);
        self.1.handle_wakeup(w);
    }
    fn handle_stack(&mut self, d: &tailprof_format::StackDef) {
        self.0.handle_stack(d);
        self.1.handle_stack(d);
    }
    fn handle_jit(&mut self, e: &tailprof_format::JitEntry) {
        self.0.handle_jit(e);
        self.1.handle_jit(e);
    }
}

/// The items document of a trace (see the module docs). Fails like
/// [`super::items_report`], and with [`AnalyzeError::NoSuchItem`] for `--explain` of an
/// unknown id.
pub fn document(reader: &mut TraceReader, q: &ItemsQuery, symbolizer: &mut Symbolizer) -> Result<ItemsDocument, AnalyzeError> {
    let mut join = ItemsJoin::new(reader.header(), &q.options)?;
    let mut memory = if q.memory && q.explain.is_none() { item_memory_builder(reader.header()).map_err(Box::new)? } else { None };
    match &mut memory {
        Some(m) => reader.read_all(&mut Both(&mut join, m))?,
        None => reader.read_all(&mut join)?,
    };
    join.add_build_ids(reader.build_ids());
    if let Some(m) = &mut memory {
        m.add_build_ids(reader.build_ids());
    }
    let report = join.finish(symbolizer)?;
    let losses = {
        let (read, stats, _) = reader.summarize()?;
        LossTable::new(&stats, Some(&read))
    };
    let profile = item_stacks(reader, &report, q.options.event, symbolizer)?;
    if let Some(id) = q.explain {
        let functions = explain(&report, id)?;
        let stacks = explain_stacks(&report, &profile, id)?;
        let causes = CauseSection(explain_causes(&report, &profile, &stacks));
        return Ok(ItemsDocument::Explain(Box::new(ItemExplain { functions, stacks, causes, losses })));
    }
    if let Some(t) = q.selection.trace_id {
        if !report.items.iter().any(|it| q.selection.matches(it)) {
            let with_trace = report.items.iter().filter(|r| r.trace_id.is_some()).count();
            return Err(AnalyzeError::NoSuchTraceId { trace_id: super::hex_id(&t), with_trace });
        }
    }
    let memory = match memory {
        Some(m) => crate::bandwidth::finish_item_memory(m).map_err(Box::new)?,
        None => None,
    };
    Ok(ItemsDocument::List(Box::new(item_list(report, &profile, &q.selection, memory.as_deref(), losses))))
}

/// The slow requests the agent retained in `reader`'s store (`items --store`), only those
/// of OpenTelemetry trace `trace_id` when given (`--trace-id`).
#[allow(clippy::too_many_arguments)] // the flags of `items --store`, one each
pub fn stored(
    reader: &tailprof_store::StoreReader,
    host: Option<&str>,
    from_us: i64,
    to_us: i64,
    class: Option<&str>,
    top: usize,
    explain: Option<u64>,
    trace_id: Option<[u8; 16]>,
) -> Result<ItemsDocument, AnalyzeError> {
    let hex = trace_id.map(|t| super::hex_id(&t));
    let mut items = crate::store_query::stored_items_of(reader, host, from_us, to_us, class, hex.as_deref());
    if let Some(trace_id) = hex {
        // `--trace-id ID`: the retained requests of that trace (a request is retained only
        // when slow, so a trace's fast requests are not in the store).
        if items.items.is_empty() {
            let with_trace =
                crate::store_query::stored_items(reader, host, from_us, to_us, class).items.iter().filter(|i| i.trace_id.is_some()).count();
            return Err(AnalyzeError::NoSuchStoredTraceId { trace_id, with_trace });
        }
    }
    if let Some(id) = explain {
        // `--explain ID`: the retained request(s) with this item id, whole.
        items.items.retain(|i| i.item_id == id);
        if items.items.is_empty() {
            return Err(AnalyzeError::NoSuchStoredItem { id });
        }
    }
    Ok(ItemsDocument::Stored(Box::new(StoredList { items, top })))
}

/// Indices of the items `sel` lists, in its order and at most `top`, and how many match
/// before `top`.
pub fn select(report: &ItemsReport, sel: &ItemSelection) -> (Vec<usize>, usize) {
    let mut v: Vec<usize> = (0..report.items.len()).filter(|&i| sel.matches(&report.items[i])).collect();
    let items = &report.items;
    v.sort_by(|&a, &b| {
        let (a, b) = (&items[a], &items[b]);
        match sel.sort {
            ItemSort::Duration => b.duration_ns.cmp(&a.duration_ns),
            ItemSort::Anomaly => b.anomaly_score.total_cmp(&a.anomaly_score),
            ItemSort::Id => a.id.cmp(&b.id),
            ItemSort::Begin => Ordering::Equal,
        }
        .then(a.begin_ns.cmp(&b.begin_ns))
    });
    let matching = v.len();
    if let Some(n) = sel.top {
        v.truncate(n);
    }
    (v, matching)
}

/// The listed items with their stacks, causes and memory.
fn item_list(
    report: ItemsReport,
    profile: &StackProfile,
    sel: &ItemSelection,
    memory: Option<&[ItemBandwidth]>,
    losses: LossTable,
) -> ItemList {
    let (shown, matching) = select(&report, sel);
    // Per-item stacks and causes are looked up by item id, the last item of an id
    // winning, as the JSON merge this replaces did (ids repeat across processes: such
    // items show the stack figures of the last one; kept so the output is unchanged).
    let by_id: FxHashMap<u64, usize> = report.items.iter().enumerate().map(|(i, it)| (it.id, i)).collect();
    let causes: Option<FxHashMap<u64, &crate::causes::ItemCauses>> =
        profile.cause_stats.recorded.then(|| profile.causes.iter().map(|c| (c.id, c)).collect());
    let mem: FxHashMap<(u32, u32, u64, u64), &ItemBandwidth> =
        memory.unwrap_or(&[]).iter().map(|m| ((m.pid, m.tid, m.id, m.begin_ns), m)).collect();
    let switches = profile.switches > 0;
    let resolution = report.resolution_ns();
    let entries: Vec<ItemEntry> = shown
        .iter()
        .map(|&i| {
            let row = report.items[i].clone();
            let k = by_id[&row.id];
            let (same_id, st) = (&report.items[k], profile.items.get(k));
            let split = time_split(same_id.current_ns(), same_id.samples, report.mean_interval_ns, st, switches);
            let off_cpu = st
                .map(|s| {
                    s.off_cpu
                        .iter()
                        .take(ITEM_OFF_CPU_STACKS)
                        .map(|o| ItemOffCpu {
                            state: o.state,
                            ns: o.ns,
                            frames: profile.frames(o.path).into_iter().map(str::to_owned).collect(),
                            kernel: kernel_frames(profile, o.path),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let excess_resolvable = same_id.anomalous.then(|| {
                let median = report.class_stats(&same_id.class).map_or(0, |c| c.median_duration_ns);
                same_id.duration_ns.saturating_sub(median) as f64 >= resolution
            });
            let waits = causes.as_ref().map(|by| {
                by.get(&row.id)
                    .map(|c| ItemWaits { woken_by: c.woken_by.clone(), preempted_by: c.preempted_by.clone() })
                    .unwrap_or_default()
            });
            let memory = mem.get(&(row.pid, row.tid, row.id, row.begin_ns)).map(|m| ItemMemory { mem_bytes: m.bytes, mem_gbps: m.gbps });
            ItemEntry {
                split,
                off_cpu_partial: st.is_some_and(|s| s.off_cpu_partial),
                off_cpu,
                noise: st.map(|s| s.noise.clone()),
                excess_resolvable,
                causes: waits,
                memory,
                events: Vec::new(),
                segments: Vec::new(),
                measured_runnable_ns: st.map_or(0, |s| s.runnable_ns),
                measured_blocked_ns: st.map_or(0, |s| s.blocked_ns),
                row,
            }
        })
        .collect();
    let more = matching - entries.len();
    let total_items = report.items.len();
    let anomalous: Vec<ItemRow> = report.items.iter().filter(|i| i.anomalous).cloned().collect();
    ItemList {
        report: report.with_rows(entries),
        more_items: (more > 0).then_some(more),
        switches: profile.switches,
        stack_statuses: profile.statuses.clone(),
        losses,
        total_items,
        anomalous,
    }
}

/// Which frames of path `p` are kernel functions (by the function's binary).
fn kernel_frames(p: &StackProfile, path: u32) -> Vec<bool> {
    p.paths.get(path as usize).map(|v| v.iter().map(|&f| is_kernel_binary(&p.functions[f as usize].binary)).collect()).unwrap_or_default()
}
