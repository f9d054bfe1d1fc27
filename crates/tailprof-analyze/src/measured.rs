//! The typed results of the measurement commands (`calibrate`, `overhead`, `plan`,
//! `stat`, the demo's accuracy check): `tailprof-measure` runs the workloads and fills
//! them in, `tailprof-present` renders them. They live here, beside the overhead model
//! they are made of, so that `present` depends on no runner (and nothing that opens
//! perf events).

use std::path::PathBuf;

use serde::Serialize;

use crate::overhead::predict::PebsGuidance;
use crate::overhead::{Basis, Calibration, LineFit, OverheadEstimate, PlanOutput, Point, RateModel, Refusal};

/// The machine's hardware counters, as `stat` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterSummary {
    pub pmu: Option<String>,
    /// Programmable (general-purpose) counters.
    pub generic: Option<u32>,
    /// Fixed-function counters.
    pub fixed: Option<u32>,
    /// In words, with where the numbers come from ("4 programmable + 3 fixed counters (CPUID)").
    pub description: String,
}

/// Truth from the example's log for one query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Truth {
    pub n: u32,
    pub cold: bool,
    /// (function, true nanoseconds) per call.
    pub funcs: Vec<(String, u64)>,
}

/// Estimate / truth over the (item, function) pairs at least
/// [`MIN_ACCURACY_INTERVALS`] sample intervals long. Means and SDs are NaN (`null` in
/// JSON) when no pair qualifies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accuracy {
    pub period_ns: u64,
    pub mean_interval_ns: f64,
    pub pairs: usize,
    /// samples x mean interval.
    pub count_mean_ratio: f64,
    pub count_sd_ratio: f64,
    /// last - first sample (the paper's estimator).
    pub span_mean_ratio: f64,
    pub span_sd_ratio: f64,
    pub items_matched: usize,
}

/// One design point's summary (the unprofiled runs have `period: None`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeriodRow {
    pub period: Option<u64>,
    pub runs: usize,
    pub samples_median: Option<f64>,
    /// Median time in the calibration's basis.
    pub elapsed_median_s: f64,
    pub overhead_pct: f64,
    pub throttled_runs: usize,
}

/// Everything a calibration found.
#[derive(Debug, Clone)]
pub struct CalibrationReport {
    pub event: String,
    /// cpu-clock / task-clock (periods are nanoseconds).
    pub clock: bool,
    pub machine: MachineKey,
    pub loadavg: Option<f64>,
    /// Busy-loop iterations per run (0 for a workload).
    pub iterations: u64,
    /// The workload, when not the busy loop.
    pub workload: Option<Vec<String>>,
    pub repeats: usize,
    pub basis: Basis,
    pub fit: LineFit,
    /// The same runs fitted in the other basis.
    pub other_basis: Basis,
    pub other_fit: Option<LineFit>,
    pub verdict: Result<(), Refusal>,
    pub rows: Vec<PeriodRow>,
    pub points: Vec<Point>,
    pub bytes_per_sample: Option<f64>,
    pub recorder_cpu_ns_per_sample: Option<f64>,
    /// What would be (or was) stored.
    pub calibration: Calibration,
    pub saved_to: Option<std::path::PathBuf>,
    /// Whether saving was turned off (`--no-save`).
    pub save_disabled: bool,
    pub notes: Vec<String>,
}

/// The machine facts a calibration is valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineKey {
    pub cpu_model: String,
    pub kernel: String,
    pub online_cpus: u32,
}

/// Where α came from.
#[derive(Debug, Clone, PartialEq)]
pub struct AlphaSource {
    pub alpha_ns: f64,
    pub ci_ns: Option<(f64, f64)>,
    pub calibration: Option<Calibration>,
    /// The calibration file; `None` for `--alpha`.
    pub path: Option<PathBuf>,
}

/// The prediction and its error, for one time basis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub predicted_s: f64,
    /// E = (measured − predicted) / predicted, as a fraction.
    pub error: f64,
}

/// What `tailprof overhead` measured.
#[derive(Debug, Clone)]
pub struct OverheadReport {
    pub event: String,
    pub clock: bool,
    pub period: Option<u64>,
    /// "250 µs", "4000 Hz (default)", ...
    pub period_desc: String,
    pub command: Vec<String>,
    pub runs: usize,
    pub instances: usize,
    pub pinned: bool,
    pub cpus: usize,
    pub wall: OverheadEstimate,
    pub cpu: OverheadEstimate,
    /// Median over pairs of the samples of all copies.
    pub samples: f64,
    pub samples_per_instance: f64,
    /// Threads the command ran at once (CPU time / elapsed, median).
    pub threads: f64,
    pub alpha: Option<AlphaSource>,
    pub predicted_wall: Option<Prediction>,
    pub predicted_cpu: Option<Prediction>,
    /// The per-sample cost the measurement implies, from elapsed and CPU times (ns).
    pub implied_alpha_ns: Option<f64>,
    pub implied_alpha_cpu_ns: Option<f64>,
    pub lost: u64,
    pub throttled: u64,
    pub bytes_per_sample: Option<f64>,
    pub recorder_cpu_ns_per_sample: Option<f64>,
    /// The recorder's setup and final flush (median), not in the times.
    pub recorder_fixed_s: Option<f64>,
    /// Per pair: (unprofiled, profiled), averaged over the copies.
    pub wall_pairs: Vec<(f64, f64)>,
    pub cpu_pairs: Vec<(f64, f64)>,
    pub samples_runs: Vec<f64>,
    pub loadavg: Option<f64>,
    pub wait_idle_s: f64,
    /// Pairs that started while the machine was busy (when waiting for idle).
    pub pairs_started_busy: Option<usize>,
}

/// The plan.
#[derive(Debug, Clone)]
pub struct PlanReport {
    pub event: String,
    pub clock: bool,
    pub budget: f64,
    pub alpha: AlphaSource,
    pub command: Vec<String>,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    pub threads: f64,
    /// The event's (scaled) count over the counted run.
    pub event_count: f64,
    pub model: RateModel,
    pub max_rate_per_cpu: Option<f64>,
    pub out: PlanOutput,
    pub bytes_per_sample: Option<f64>,
    pub trace_mb_per_s: Option<f64>,
    /// Bytes of one PERF_RECORD_SAMPLE in the ring.
    pub raw_record_bytes: u64,
    pub ring_pages_per_cpu: u64,
    pub page_size: u64,
    pub pebs: Option<PebsGuidance>,
    pub record_command: String,
    pub notes: Vec<String>,
    /// How long a ring must hold records at the planned rate (s).
    pub ring_hold_s: f64,
    /// The recorder's default ring size per CPU (pages).
    pub default_ring_pages: u64,
}

/// One counted event.
#[derive(Debug, Clone, Serialize)]
pub struct StatEvent {
    pub name: String,
    /// The raw count (for clock events: nanoseconds).
    pub count: u64,
    /// The count scaled for multiplexing (`count × enabled / running`); `None` when the
    /// counter never ran.
    pub scaled: Option<f64>,
    /// `scaled` per second of the run.
    pub rate_per_s: Option<f64>,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
    pub running_pct: f64,
    pub multiplexed: bool,
    /// A clock event (`cpu-clock`, `task-clock`): the count is nanoseconds of CPU.
    #[serde(skip)]
    pub is_clock: bool,
}

/// One `--interval` read.
#[derive(Debug, Clone, Serialize)]
pub struct StatInterval {
    /// End of the interval, ns since the command was released.
    pub t_ns: u64,
    pub len_ns: u64,
    /// Per event (in order): the count during the interval.
    pub values: Vec<u64>,
    pub enabled_ns: Vec<u64>,
    pub running_ns: Vec<u64>,
}

/// The result of [`stat`].
#[derive(Debug, Clone)]
pub struct StatReport {
    pub command: Vec<String>,
    pub elapsed_ns: u64,
    /// Exit code of the command, or 128 + signal number.
    pub exit_status: i32,
    pub events: Vec<StatEvent>,
    /// The machine's hardware counters (for the multiplexing note).
    pub counters: CounterSummary,
    pub interval_ns: Option<u64>,
    pub intervals: Vec<StatInterval>,
}

impl StatReport {
    /// Events whose counter was multiplexed (time running < time enabled).
    pub fn multiplexed(&self) -> usize {
        self.events.iter().filter(|e| e.multiplexed).count()
    }
}
