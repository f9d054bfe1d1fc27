//! Per-item attribution: markers + samples → per-item, per-function time, and the
//! slow items explained (the hybrid approach of Akiyama et al., "Diagnosing Performance
//! Fluctuations of High-throughput Software for Multi-core CPUs").
//!
//! This module owns:
//!
//! - [`join`]: the join, a [`tailprof_format::Sink`] ([`ItemsJoin`]). Per thread a stack
//!   of open items built from `Marker` records; each sample of the selected event belongs
//!   to the innermost item open on its thread at its time, otherwise it is counted as
//!   outside. A thread with switch markers instead attributes each sample to its
//!   current item (docs/MARKERS.md, "Switch markers"). In register mode (`TraceHeader.extra["item_reg"]`, e.g. `r13`, the paper's
//!   §V.A) the item id is the register's value captured with the sample (0 = outside)
//!   and an item's wall time is its first..last sample.
//! - [`estimate`]: per (item, function) both estimators, the paper's first-to-last
//!   span and sample count × mean sample interval, and how the interval is found.
//! - [`anomaly`]: per class, median and MAD of item durations; items further than
//!   `mad_k` robust standard deviations above the median (and at least
//!   `min_excess_ratio` slower) are flagged.
//! - [`explain`](mod@explain): an item's per-function time beside its class median, and the
//!   functions that account for the difference (shared by flagging and `--explain`).
//! - [`samples`]: the samples inside items one by one, named by function (the
//!   export's instants).
//!
//! Design constraints: the per-sample path does a thread lookup (one-entry cache, then
//! FxHashMap), takes the top of the thread's item stack, resolves the location with
//! [`crate::resolve::Resolver::loc`] (one FxHashMap lookup on `(pid, ip)`) and bumps a
//! counter in the open item's small reusable accumulator: no allocation once warm.
//! Symbolization runs once per unique location after reading.
//!
//! ```no_run
//! use tailprof_analyze::items::{explain, items_report, ItemsOptions};
//! use tailprof_analyze::{Symbolizer, SymbolizerOptions};
//! let mut reader = tailprof_format::TraceReader::open("run.trace".as_ref())?;
//! let mut sym = Symbolizer::new(SymbolizerOptions::default());
//! let report = items_report(&mut reader, &ItemsOptions::default(), &mut sym)?;
//! for item in report.items.iter().filter(|i| i.anomalous) {
//!     let why = explain(&report, item.id)?;
//!     let _ = (item.duration_ns, why.responsible);
//! }
//! # Ok::<(), tailprof_analyze::AnalyzeError>(())
//! ```

pub mod anomaly;
pub mod document;
pub mod estimate;
pub mod events;
pub mod explain;
pub mod join;
pub mod samples;

use serde::Serialize;
use tailprof_format::TraceReader;

use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

pub use document::{document, ItemList, ItemSelection, ItemSort, ItemsDocument, ItemsQuery};
pub use explain::{explain, Baseline, BaselineFunction, Explanation, FunctionDiff};
pub use join::{ItemsJoin, JoinState};
pub use samples::{item_samples, ItemSample, ItemSamples};

/// Options of [`items_report`].
#[derive(Debug, Clone, PartialEq)]
pub struct ItemsOptions {
    /// Index into `TraceHeader::events` of the sampling event (`None`: the first).
    pub event: Option<u16>,
    /// Keep only items of this class (by name).
    pub class: Option<String>,
    /// Estimates resting on fewer samples are marked unreliable.
    pub min_reliable_samples: u64,
    /// Flag items whose duration is more than this many robust standard deviations
    /// (1.4826 × MAD) above their class median.
    pub mad_k: f64,
    /// ...and at least this much slower than the median (0.2 = 20%).
    pub min_excess_ratio: f64,
    /// The estimate shown (and used for explanations).
    pub estimator: Estimator,
    /// `responsible` lists the largest per-function excesses until they cover this
    /// share of the summed positive excess (at most [`MAX_RESPONSIBLE`] functions).
    pub responsible_share: f64,
}

impl Default for ItemsOptions {
    fn default() -> Self {
        ItemsOptions {
            event: None,
            class: None,
            min_reliable_samples: 5,
            mad_k: 3.5,
            min_excess_ratio: 0.2,
            estimator: Estimator::CountTimesInterval,
            responsible_share: 0.6,
        }
    }
}

/// At most this many functions are named responsible for one item.
pub const MAX_RESPONSIBLE: usize = 5;

/// Which per-(item, function) time estimate is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// The paper's estimator: last sample − first sample of the function in the item
    /// (0 for a single sample; under-estimates by about one interval).
    Span,
    /// Samples × mean sample interval.
    #[default]
    CountTimesInterval,
}

impl Estimator {
    pub fn describe(self) -> &'static str {
        match self {
            Estimator::Span => "span (last - first sample of the function in the item)",
            Estimator::CountTimesInterval => "samples x mean sample interval",
        }
    }
}

/// Everything [`items_report`] found. `Row` is [`ItemRow`]; the items document
/// ([`document::ItemList`]) carries the same fields with its shown rows instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemsReport<Row = ItemRow> {
    /// Sorted by begin time (then pid, tid, id).
    pub items: Vec<Row>,
    /// Samples of the selected event on no open item.
    pub outside_samples: u64,
    /// Samples of the selected event.
    pub total_samples: u64,
    pub shown_estimator: Estimator,
    /// The interval `est_ns` multiplies sample counts by.
    pub mean_interval_ns: f64,
    /// Where the interval comes from: `"period"` (fixed-period cpu-clock/task-clock)
    /// or `"measured"` (median spacing of consecutive samples on one thread).
    pub interval_source: String,
    /// Markers the target dropped (full marker ring), as recorded in the trace.
    pub lost_markers: u64,
    /// End markers that matched no open item plus begin markers never closed.
    pub unmatched_markers: u64,
    /// Items still open at the end of the trace (closed at its last timestamp, flagged
    /// `open_at_end`).
    pub open_at_end: u64,
    /// Marker records read.
    pub markers: u64,
    /// `"markers"` or `"register:r13"`.
    pub mode: String,
    /// What an item's `duration_ns` measures: `"markers"` (end − begin marker) or
    /// `"samples"` (first..last sample, register mode: no markers exist).
    pub duration_source: String,
    /// Name of the sampling event.
    pub event: String,
    pub min_reliable_samples: u64,
    pub mad_k: f64,
    /// Share of an item's excess its `responsible` functions cover.
    pub responsible_share: f64,
    pub classes: Vec<ClassStats>,
    /// Switch markers and what they did (all zero without switch markers).
    pub switching: SwitchStats,
    /// Items whose samples may belong to another item: begin/end markers that overlapped
    /// on one thread without switch markers (issue 24, "honest output").
    pub ambiguity: Ambiguity,
    /// `--item-event` records read, and those on no open item (left out of JSON when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub item_events: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub item_events_outside: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Switch markers of a trace (docs/MARKERS.md, "Switch markers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SwitchStats {
    /// `Switch` and `SwitchNone` markers read.
    pub markers: u64,
    /// Threads that had switch markers (their samples go to their current item).
    pub threads: u64,
    /// Samples on such threads while they worked on no item (in their event loop);
    /// included in `outside_samples`.
    pub loop_samples: u64,
    /// Switches to an item that was not open (begun before the trace, or its begin
    /// lost); included in `unmatched_markers`. Samples until the next switch are outside.
    pub unknown_items: u64,
}

/// Begin/end markers that overlapped on one thread without switch markers: each sample
/// went to the innermost open item, but might have been another open item's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Ambiguity {
    /// Items with `ambiguous_samples > 0`, or that ended while another item begun after
    /// them was still open on their thread.
    pub items: u64,
    /// Sum of the items' `ambiguous_samples`.
    pub samples: u64,
}

/// How an item driven by switch markers spent its wall time (begin → end).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemSwitching {
    /// Time the item was current on some thread (summed over threads), on CPU or not.
    pub current_ns: u64,
    /// Wall time while it was current on no thread: its own state, "waiting in the
    /// event loop" (awaiting I/O, a timer, or its turn), never another item's CPU.
    pub waiting_in_loop_ns: u64,
    /// Times it became current (its begin included).
    pub resumes: u64,
    /// Distinct threads it was current on (a task that moved between threads: > 1).
    pub threads: u32,
}

/// One interval during which an item was current on a thread (switch markers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CurrentSlice {
    pub tid: u32,
    pub begin_ns: u64,
    pub end_ns: u64,
}

/// Duration statistics of one class of items.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassStats {
    pub class: Option<String>,
    pub items: usize,
    pub median_duration_ns: u64,
    /// Median absolute deviation of durations.
    pub mad_ns: u64,
    pub anomalous: usize,
}

/// One item (request, query, packet).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemRow {
    pub pid: u32,
    pub tid: u32,
    pub id: u64,
    pub class: Option<String>,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    /// Samples of the selected event attributed to the item.
    pub samples: u64,
    /// |duration − class median| / (1.4826 × class MAD); see [`anomaly`].
    pub anomaly_score: f64,
    pub anomalous: bool,
    /// For anomalous items: the functions whose time exceeds the class median the most.
    pub responsible: Vec<String>,
    /// The item was still open at the end of the trace (its end is the trace's end).
    pub open_at_end: bool,
    /// Items named by switch markers (or begun on a thread that has them): current and
    /// waiting time. `None` for items delimited by begin/end only.
    pub switching: Option<ItemSwitching>,
    /// When it was current, per thread, in time order (switch markers; in goroutine mode
    /// the runs where its goroutine was seen on a thread, docs/PROBES.md; the per-item
    /// stacks and off-CPU time use it). Not serialized: `switching` sums it up.
    #[serde(skip)]
    pub current: Vec<CurrentSlice>,
    /// Samples attributed to the item while another item was also open on its thread, on
    /// a thread where begin/end markers overlapped without switch markers: they may have
    /// been the other item's. 0 when unambiguous.
    pub ambiguous_samples: u64,
    /// The item's attribution is ambiguous (see `ambiguous_samples`; also set for an item
    /// that ended while an item begun after it was still open on its thread).
    pub ambiguous: bool,
    /// OpenTelemetry (W3C) trace id, 32 lowercase hex digits, when the item's runtime
    /// wrote its trace context (docs/MARKERS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Its span id, 16 lowercase hex digits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// Sorted by the shown estimate, largest first.
    pub functions: Vec<ItemFunction>,
    /// Events and spans inside the item (`--item-event`, [`events`]); left out of JSON
    /// when there are none.
    #[serde(skip_serializing_if = "events::ItemEvents::is_empty")]
    pub events: events::ItemEvents,
}

/// Lowercase hex of `bytes` (the W3C trace-context form of trace and span ids).
pub fn hex_id(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A trace id as users copy it from a tracing UI: 32 hex digits (W3C), or fewer (Jaeger
/// shows 64-bit ids as 16), taken as the low bytes; upper or lower case, an optional
/// `0x`. `None` for anything else, or for the all-zero id (invalid in W3C).
pub fn parse_trace_id(s: &str) -> Option<[u8; 16]> {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.is_empty() || s.len() > 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u128::from_str_radix(s, 16).ok()?;
    (v != 0).then(|| v.to_be_bytes())
}

/// Time of one function within one item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemFunction {
    pub name: String,
    pub binary: String,
    pub samples: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// last − first (the paper's estimator).
    pub span_ns: u64,
    /// samples × mean sample interval.
    pub est_ns: f64,
    /// `samples >= min_reliable_samples`.
    pub reliable: bool,
    /// `file:line` of the function, when known (a JIT function's jitdump DEBUG_INFO:
    /// [`crate::resolve::FunctionInfo::source`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ItemFunction {
    /// The estimate `e` gives for this function.
    pub fn shown_ns(&self, e: Estimator) -> f64 {
        match e {
            Estimator::Span => self.span_ns as f64,
            Estimator::CountTimesInterval => self.est_ns,
        }
    }
}

impl AsRef<ItemRow> for ItemRow {
    fn as_ref(&self) -> &ItemRow {
        self
    }
}

impl ItemRow {
    /// The time the item was current on a thread, which its on-CPU and off-CPU time
    /// split: `switching.current_ns` with switch markers (capped at the duration), else
    /// its whole duration.
    pub fn current_ns(&self) -> u64 {
        self.switching.as_ref().map_or(self.duration_ns, |s| s.current_ns.min(self.duration_ns))
    }
}

impl<Row> ItemsReport<Row> {
    /// The same report with other rows (`items`); every other field kept.
    pub fn with_rows<R>(self, items: Vec<R>) -> ItemsReport<R> {
        ItemsReport {
            items,
            outside_samples: self.outside_samples,
            total_samples: self.total_samples,
            shown_estimator: self.shown_estimator,
            mean_interval_ns: self.mean_interval_ns,
            interval_source: self.interval_source,
            lost_markers: self.lost_markers,
            unmatched_markers: self.unmatched_markers,
            open_at_end: self.open_at_end,
            markers: self.markers,
            mode: self.mode,
            duration_source: self.duration_source,
            event: self.event,
            min_reliable_samples: self.min_reliable_samples,
            mad_k: self.mad_k,
            responsible_share: self.responsible_share,
            classes: self.classes,
            switching: self.switching,
            ambiguity: self.ambiguity,
            item_events: self.item_events,
            item_events_outside: self.item_events_outside,
        }
    }

    /// Statistics of `class`.
    pub fn class_stats(&self, class: &Option<String>) -> Option<&ClassStats> {
        self.classes.iter().find(|c| &c.class == class)
    }

    /// The smallest excess over the class median the sampling resolves:
    /// `min_reliable_samples` sample intervals (as [`crate::stack_explain`]).
    pub fn resolution_ns(&self) -> f64 {
        self.min_reliable_samples.max(1) as f64 * self.mean_interval_ns
    }
}

impl ItemsReport {
    /// The first item with this id (ids may repeat across processes).
    pub fn item(&self, id: u64) -> Option<&ItemRow> {
        self.items.iter().find(|i| i.id == id)
    }
}

/// Read a whole trace and join its markers (or tagged registers) with its samples.
///
/// Fails with [`AnalyzeError::NoItems`] when the trace has neither markers nor a
/// register tag, and [`AnalyzeError::NoSuchEvent`] for a bad `opts.event`.
pub fn items_report(reader: &mut TraceReader, opts: &ItemsOptions, symbolizer: &mut Symbolizer) -> Result<ItemsReport, AnalyzeError> {
    let mut join = ItemsJoin::new(reader.header(), opts)?;
    reader.read_all(&mut join)?;
    join.add_build_ids(reader.build_ids());
    join.finish(symbolizer)
}
