//! tailprof analyze stage: turn a trace's records into answers.
//!
//! - [`maps`]: per-process address spaces over time (MMAP / exec COMM / FORK), so a
//!   sample's IP resolves to (binary, file offset) as of the sample's time.
//! - [`symbolize`]: (binary, file offset) and kernel addresses to function names, via
//!   blazesym; unknown addresses come back with a reason, never as an error.
//! - [`profile`]: flat profiles by function, binary or thread. Per sample only a hash
//!   map increment; address resolution and symbolization run once per unique key.
//! - [`resolve`]: (pid, ip) → location → function, once per unique key, and
//!   [`Resolved`], the one [`tailprof_format::Sink`] adapter every analysis reads a
//!   trace through: it keeps the address spaces (and stack table) current and hands the
//!   analysis (a [`ResolvedSink`]) its samples with the resolver.
//! - [`items`]: per-item (request) attribution: markers joined with samples, per-item
//!   per-function estimates, slow items flagged and explained.
//! - [`stacks`]: samples per call stack (per item, filtered), off-CPU time by stack, the
//!   timeline for exports; [`offcpu`]: per-thread on/off-CPU timelines from switches;
//!   [`stack_explain`]: an item against its class median by stack.
//! - [`info`]: what `tailprof info` shows.
//!
//! The library never prints and never exits; errors are [`AnalyzeError`].
//!
//! Typical use (`tailprof report`):
//!
//! ```no_run
//! use tailprof_analyze::*;
//! let mut reader = tailprof_format::TraceReader::open("trace.tprof".as_ref())?;
//! let event = select_event(reader.header(), None)?; // or Some("cycles") / Some("1")
//! let opts = ProfileOptions { by: GroupBy::Function, event: Some(event), ..Default::default() };
//! let mut sym = Symbolizer::new(SymbolizerOptions::default());
//! let profile: FlatProfile = flat_profile(&mut reader, &opts, &mut sym)?;
//! // `tailprof info`: cheap summary, plus a full pass for per-event counts.
//! let info: TraceInfo = trace_info(&mut reader, true)?;
//! # Ok::<(), AnalyzeError>(())
//! ```

pub mod bandwidth;
pub mod causes;
pub mod export;
pub mod info;
mod item_maps;
pub mod items;
pub mod measured;
pub use tailprof_symbolize::maps;
pub mod offcpu;
pub mod overhead;
pub mod profile;
pub mod resolve;
pub mod stack_explain;
pub mod stacks;
pub mod stats;
pub mod store_query;
/// Symbolization lives in `tailprof-symbolize` (the seam the agent shares).
pub use tailprof_symbolize as symbolize;

pub use info::{trace_info, RecordCounter, TraceInfo};
pub use items::{
    explain, items_report, ClassStats, Estimator, Explanation, FunctionDiff, ItemFunction, ItemRow, ItemsOptions, ItemsReport,
};
pub use maps::AddressSpaces;
pub use profile::{flat_profile, select_event, FlatProfile, GroupBy, ProfileBuilder, ProfileOptions, ProfileRow};
pub use resolve::{Granularity, LocId, Resolved, ResolvedSink, Resolver};
pub use symbolize::{KernelSymbols, Symbolizer, SymbolizerOptions, UnknownReason};

/// Errors of the analyze stage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnalyzeError {
    #[error("no event {spec:?} in this trace (events: {})", available.join(", "))]
    NoSuchEvent { spec: String, available: Vec<String> },
    /// The trace has nothing to delimit items with.
    #[error("no item markers in this trace: record with markers compiled in (tailprof.h / the Rust or Python marker API), with --item-begin/--item-end uprobes, or with --item-reg REG")]
    NoItems,
    #[error("no item with id {id} in this trace")]
    NoSuchItem { id: u64 },
    /// `items --store DIR --explain ID`: no retained request has this item id in the range.
    #[error("no retained request with item id {id} in the range (see `tailprof items --store DIR` for the ids)")]
    NoSuchStoredItem { id: u64 },
    /// `--class` names no class of the trace's items (`classes`: at most 10 that exist).
    #[error("no item of class {class:?} in this trace (classes: {})", if classes.is_empty() { "none".to_owned() } else { classes.join(", ") })]
    NoSuchClass { class: String, classes: Vec<String> },
    /// `--trace-id` names no item of the trace (`with_trace`: how many items carry a
    /// trace id at all).
    #[error("no item of trace {trace_id} in this trace ({with_trace} items carry a trace id)")]
    NoSuchTraceId { trace_id: String, with_trace: usize },
    /// `items --store DIR --trace-id ID`: no retained request of that trace in the range
    /// (`with_trace`: retained requests that carry a trace id at all).
    #[error("no retained request of trace {trace_id} in the range ({with_trace} retained requests carry a trace id; the agent keeps only slow requests)")]
    NoSuchStoredTraceId { trace_id: String, with_trace: usize },
    #[error(transparent)]
    Read(#[from] tailprof_format::FormatError),
    /// The per-item memory traffic of the items document failed.
    #[error(transparent)]
    Memory(#[from] Box<bandwidth::BandwidthError>),
}
