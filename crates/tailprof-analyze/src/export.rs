//! What the exports (`tailprof export`: HTML, Perfetto, pprof, Firefox Profiler, folded
//! stacks) are rendered from, computed in one call: the items report when a view needs
//! items, the stack profile (with its timeline for the timeline formats), and the samples
//! inside items as instants for Perfetto. `tailprof-present` renders [`ExportData`].

use tailprof_format::TraceReader;

use crate::items::{item_samples, items_report, ItemSamples, ItemsOptions, ItemsReport};
use crate::profile::select_event;
use crate::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions, StackProfile};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// What to compute.
#[derive(Debug, Clone, Default)]
pub struct ExportRequest {
    /// Sampling event by name or index (`None`: the first).
    pub event: Option<String>,
    /// Which samples count (`--item`, `--class`, `--in-items`, `--slow`).
    pub filter: StackFilter,
    /// A view needs the items report (HTML, Perfetto); any active filter needs it too.
    pub items: bool,
    /// Keep the samples and off-CPU intervals in time order (Perfetto, Firefox Profiler).
    pub timeline: bool,
    /// The samples inside items as named instants (Perfetto without stacks).
    pub instants: bool,
    /// Frames per function (default) or per (function, source line) (`--lines`).
    pub granularity: crate::resolve::Granularity,
}

/// Everything the exports render.
#[derive(Debug, Clone)]
pub struct ExportData {
    pub report: Option<ItemsReport>,
    pub stacks: StackProfile,
    pub instants: Option<ItemSamples>,
    /// Sample period of the trace's first event (0 when it sampled by frequency).
    pub period: u64,
    /// That period when the first event is a clock (`cpu-clock`, `task-clock`): the
    /// sampling interval in ns; else 0.
    pub clock_interval_ns: u64,
}

/// Reads `reader`'s trace (once per view that needs a pass) and computes the data of
/// `req`. Without items in the trace, `report` is `None` (the views render the samples
/// alone); fails with [`AnalyzeError::NoItems`] when a filter needs items and the trace
/// has none, and [`AnalyzeError::NoSuchItem`] for an `--item` id that is not in it.
pub fn export_data(reader: &mut TraceReader, req: &ExportRequest, symbolizer: &mut Symbolizer) -> Result<ExportData, AnalyzeError> {
    let first = reader.header().events.first();
    let period = first.and_then(|e| e.sample_period).unwrap_or(0);
    let clock_interval_ns = first.filter(|e| e.is_clock()).and_then(|e| e.sample_period).unwrap_or(0);
    let event = select_event(reader.header(), req.event.as_deref())?;
    let report = if req.items || req.filter.is_active() {
        let opts = ItemsOptions { event: req.event.as_ref().map(|_| event), class: req.filter.class.clone(), ..Default::default() };
        match items_report(reader, &opts, symbolizer) {
            Ok(r) => Some(r),
            // A trace without items still gets its views (flame graphs, samples); only
            // a filter on items needs them.
            Err(AnalyzeError::NoItems) if !req.filter.is_active() => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let spans = report.as_ref().map(|r| ItemSpan::from_rows(&r.items)).unwrap_or_default();
    for id in &req.filter.items {
        if !spans.iter().any(|s| s.id == *id) {
            return Err(AnalyzeError::NoSuchItem { id: *id });
        }
    }
    let opts = StackOptions { event: Some(event), filter: req.filter.clone(), timeline: req.timeline, granularity: req.granularity };
    let stacks = stack_profile(reader, &opts, spans, symbolizer)?;
    let instants = match (&report, req.instants) {
        (Some(r), true) => Some(item_samples(reader, r, event, symbolizer)?),
        _ => None,
    };
    Ok(ExportData { report, stacks, instants, period, clock_interval_ns })
}
