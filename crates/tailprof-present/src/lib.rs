//! tailprof present stage: render analysis results for people and programs.
//!
//! - [`table`]: aligned text tables for flat profiles and a key/value block for trace
//!   info, with warnings (lost samples, throttling, truncation, unnamed code) on top.
//! - [`json`]: the same data as JSON (`report --json`, `info --json`).
//! - [`warnings`]: the warnings both share.
//! - [`losses`]: the one loss table, text and JSON, for `record`, `info`, `report`, `items`.
//! - [`html`]: self-contained HTML report of per-item time by function (inline SVG).
//! - [`perfetto`]: per-item trace for ui.perfetto.dev (Chrome JSON trace events), with
//!   stack samples and off-CPU slices.
//! - [`stacks`]: call-stack and off-CPU views: folded stacks, `report --by stack` and
//!   `report --off-cpu` text and JSON.
//! - [`pprof`], [`firefox`]: pprof (profile.proto, gzipped) and Firefox Profiler exports.
//! - [`flamegraph`]: SVG flame graphs (inferno) for the HTML report, differential too.
//! - [`items`]: `tailprof items` tables and JSON, and `--explain`.
//! - [`overhead`]: `calibrate`, `overhead`, `plan` and the demo's accuracy check, from
//!   the typed results in `tailprof_analyze::measured`.
//! - [`fmt`]: number, byte and duration formatting.
//!
//! Everything returns strings or values; nothing prints.
//!
//! ```
//! use tailprof_analyze::{FlatProfile, TraceInfo};
//! use tailprof_present::{json, table, PresentError, TableOptions};
//!
//! fn show(profile: &FlatProfile, info: &TraceInfo) -> Result<(), PresentError> {
//!     let _text = table::render_profile(profile, &TableOptions { top: Some(20), ..Default::default() });
//!     let _json = json::profile_json_string(profile, Some(20))?; // `report --json`
//!     let _text = table::render_info(info);
//!     let _json = json::info_json_string(info)?; // `info --json`
//!     Ok(())
//! }
//! ```

pub mod bandwidth;
pub mod export;
pub mod firefox;
pub mod flamegraph;
pub mod fmt;
pub mod html;
pub mod items;
pub mod json;
pub mod losses;
pub mod overhead;
pub mod perfetto;
pub mod pprof;
pub mod stacks;
pub mod stat;
pub mod store_view;
pub mod table;
pub mod warnings;

pub use table::{render_info, render_profile, TableOptions};

/// Errors of the present stage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PresentError {
    #[error("JSON encoding failed: {0}")]
    Json(#[from] serde_json::Error),
}
