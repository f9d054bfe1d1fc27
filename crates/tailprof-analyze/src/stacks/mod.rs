//! Call-stack profiles and off-CPU time: samples per stack, per item, and where threads
//! waited.
//!
//! [`StackBuilder`] is a [`ResolvedSink`](crate::resolve::ResolvedSink) (read through
//! [`Resolved`], which keeps the address spaces and the trace's
//! [`tailprof_format::StackTable`] current) and, per sample of the selected event:
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
//! [`StackBuilder::finish`] symbolizes every location once
//! ([`Resolver::functions`](crate::resolve::Resolver::functions)),
//! expands functions inlined at an address into frames of their own
//! ([`crate::resolve::inline_rows`], from DWARF inline records) and folds paths
//! of locations into paths of functions, so two call sites of one caller are one frame. Filters ([`StackFilter`]) select what the whole-trace views
//! ([`StackProfile::stacks`], [`StackProfile::off_cpu`]) count; per-item views are kept for
//! every item (explanations compare an item with its whole class).
//!
//! Layout: `mod.rs` holds the options, the builder's state and the entry points,
//! `spans.rs` the items' time windows and the filter, `sink.rs` the per-record pass
//! (samples to paths, off-CPU intervals to items), `fold.rs` the end (functions, rows,
//! noise, causes), `chain.rs` how a chain of unknown completeness is judged, and
//! `profile.rs` the [`StackProfile`] document.

mod chain;
mod fold;
mod profile;
mod sink;
mod spans;

use rustc_hash::FxHashMap;
use tailprof_format::{Frame, ReadSummary, StackStatus, TraceHeader, TraceReader};

use crate::item_maps::ItemMaps;
use crate::offcpu::{OffState, Timelines};
use crate::profile::event_name;
use crate::resolve::{LocId, Resolved};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

pub use chain::BROKEN;
pub use profile::{
    is_kernel_binary, status_counts, FlatRow, ItemStacks, OffRow, OffSlice, StackProfile, StackRow, StatusCount, TimedSample, Timeline,
};
use spans::ThreadSpans;
pub use spans::{ItemSpan, StackFilter};

/// Item index meaning "on no item" / "the whole trace".
const NO_ITEM: u32 = u32::MAX;

/// Options of [`stack_profile`].
#[derive(Debug, Clone, Default)]
pub struct StackOptions {
    /// Index into `TraceHeader::events` of the sampling event (`None`: the first).
    pub event: Option<u16>,
    pub filter: StackFilter,
    /// Keep every kept sample and off-CPU interval in time order
    /// ([`StackProfile::timeline`]) for the timeline exports (Perfetto, Firefox Profiler).
    pub timeline: bool,
    /// Frames per function (default) or per (function, source line)
    /// ([`crate::resolve::Granularity`]; `export --lines`).
    pub granularity: crate::resolve::Granularity,
}

/// Key of a resolved path: (pid key, generation, stack id or location, is a location).
type PathKey = (u32, u32, u32, bool);

/// An interval's items: (index, overlap), and (index, begin, end).
type IntervalHits = (Vec<(u32, u64)>, Vec<(u32, u64, u64)>);

/// A [`ResolvedSink`](crate::resolve::ResolvedSink) building a [`StackProfile`]; see the module docs.
#[derive(Debug)]
pub struct StackBuilder {
    event: u16,
    event_name: String,
    filter: StackFilter,
    granularity: crate::resolve::Granularity,
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
            granularity: opts.granularity,
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
    let opts = StackOptions { event, filter: StackFilter::default(), timeline: false, ..Default::default() };
    stack_profile(reader, &opts, ItemSpan::from_rows(&items.items), symbolizer)
}
