//! tailprof measurement: runs workloads and measures them. It sits beside `collect` and
//! `analyze` in the pipeline: it drives the recorder (`tailprof-collect`) over commands
//! it starts itself, feeds the times to the overhead model (`tailprof-analyze::overhead`)
//! and returns typed results that `tailprof-present` renders. Nothing here prints or
//! exits; progress goes to a callback, Ctrl-C arrives as an `AtomicBool`.
//!
//! * [`run`]: timed runs (the `__timed` wrapper, getrusage, `wait4`), profiled runs,
//!   CPU pinning, waiting for an idle machine, scratch directories.
//! * [`calibration`]: the machine key, where calibrations are stored, save/load with
//!   validation of what is loaded.
//! * [`calibrate`]: the calibration experiment (pilot pass, skip rules, rotated repeats,
//!   the busy loop) → [`calibrate::CalibrationReport`].
//! * [`overhead`]: interleaved unprofiled/profiled runs, several instances on worker
//!   threads → [`overhead::OverheadReport`].
//! * [`plan`]: count once, recommend a period → [`plan::PlanReport`].
//! * [`stat`]: count events over a command's run (optionally every interval) →
//!   [`stat::StatReport`].
//! * [`demo`]: the paper's example, built and recorded in a private directory.
//! * [`accuracy`]: the demo's check of per-item estimates against the example's log.
//! * [`private`]: private scratch directories, 0600 files via temp + rename, the demo's
//!   output directory rules.
//!
//! ```no_run
//! use tailprof_collect::event::EventSpec;
//! use tailprof_measure::plan::{plan, PlanConfig};
//!
//! let cfg = PlanConfig {
//!     spec: EventSpec::parse("cpu-clock")?,
//!     budget: 0.02,
//!     alpha_ns: Some(12_000.0),
//!     command: vec!["./server".into(), "--selftest".into()],
//! };
//! let report = plan(&cfg)?;
//! assert!(report.out.predicted_overhead_pct <= 2.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod accuracy;
pub mod calibrate;
pub mod calibration;
pub mod datadir;
pub mod demo;
mod error;
pub mod overhead;
pub mod plan;
pub mod private;
pub mod probe_store;
pub mod run;
pub mod stat;

pub use error::{MeasureError, Result};
