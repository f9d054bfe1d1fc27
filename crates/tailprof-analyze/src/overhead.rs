//! Predictable profiling overhead: the per-sample cost α, what it predicts, and the
//! period that fits a budget. Backs `tailprof calibrate`, `plan` and `overhead`.
//!
//! The model is Akiyama & Hirofuchi's (ROSS '17): a profiled run takes
//! `T = T0 + α × N` — its unprofiled time plus α per sample — and α is the slope of
//! elapsed time against samples for a busy loop with no memory traffic, run at a sweep
//! of periods (§4.2). With threads running in parallel the samples spread over them
//! (§4.5). The prediction error is their equation 1, `E = (measured − predicted) /
//! predicted`.
//!
//! * [`fit`]: the robust line (Theil–Sen, stratified-bootstrap 95% interval, R²) and
//!   the rule that refuses a fit the noise does not support ([`fit::assess`]).
//! * [`predict`]: the prediction, the measured overhead with a paired-bootstrap
//!   interval, the period for a budget (for counted events and for the clock events,
//!   whose sample count grows with the overhead itself), ring sizing, PEBS guidance.
//! * [`stats`] (now [`crate::stats`], shared by every analysis): the one median and mean (both `None` for empty input), quantiles, and
//!   the bootstraps' own seeded PRNG.
//! * [`Calibration`]: what `tailprof calibrate` stores per (CPU model, kernel, event).
//!
//! Nothing here measures or prints: callers run the workloads and pass the numbers in.
//!
//! ```
//! use tailprof_analyze::overhead::{fit::{assess, fit_line, FitPolicy, Point}, predict};
//! // Busy-loop runs: unprofiled, and at two periods (elapsed = 1 s + 300 ns × samples).
//! let pts: Vec<Point> = [(0, 0.0), (128_000, 1e5), (32_000, 4e5), (8_000, 1.6e6)]
//!     .iter()
//!     .flat_map(|&(g, n)| (0..3).map(move |_| Point { group: g, samples: n, time_s: 1.0 + 300e-9 * n }))
//!     .collect();
//! let fit = fit_line(&pts).unwrap();
//! assert!(assess(&fit, &FitPolicy::default()).is_ok());
//! let predicted = predict::predict_elapsed(2.0, 1e6, fit.alpha_ns(), 1.0);
//! assert!((predicted - 2.3).abs() < 1e-6);
//! ```

pub mod fit;
pub mod predict;
/// The shared statistics ([`crate::stats`]), under the name the overhead code used.
pub use crate::stats;

use serde::{Deserialize, Serialize};

pub use fit::{assess, fit_line, FitPolicy, LineFit, Point, Refusal};
pub use predict::{
    overhead_at, overhead_estimate, predict_elapsed, recommend_period, relative_error, slowdown_at, OverheadEstimate, PlanInput, PlanLimit,
    PlanOutput, RateModel,
};

/// What time a calibration (or an overhead measurement) is based on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Elapsed (wall-clock) time of the command, as in the paper. Inflated whenever
    /// other processes compete for the CPUs.
    #[default]
    Wall,
    /// CPU time of the command (user + system). The sample handler runs on the
    /// command's CPU and is charged to it, so α is the same quantity; time spent waiting
    /// for a CPU that others hold is not in it, which makes it the robust choice on a
    /// shared machine. For a command running `c` threads at once, `Δelapsed ≈ Δcpu / c`.
    Cpu,
}

impl Basis {
    pub fn name(self) -> &'static str {
        match self {
            Basis::Wall => "wall",
            Basis::Cpu => "cpu",
        }
    }
}

/// Format version of [`Calibration`] files.
pub const CALIBRATION_VERSION: u32 = 1;

/// A published calibration: α for one event on one machine, with the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub version: u32,
    pub event: String,
    pub cpu_model: String,
    pub kernel: String,
    pub online_cpus: u32,
    /// The time the points and α are in.
    #[serde(default)]
    pub basis: Basis,
    /// Nanoseconds of elapsed (or CPU, per `basis`) time per sample.
    pub alpha_ns: f64,
    pub alpha_ci_ns: (f64, f64),
    pub r2: f64,
    /// Elapsed time of the unprofiled busy loop the fit implies.
    pub intercept_s: f64,
    /// Trace bytes per sample written by tailprof during the calibration runs.
    pub bytes_per_sample: Option<f64>,
    /// CPU time of the recorder (draining rings, writing the trace) per sample, ns.
    pub recorder_cpu_ns_per_sample: Option<f64>,
    pub periods: Vec<u64>,
    pub points: Vec<Point>,
    /// Seconds since the Unix epoch.
    pub created_unix: u64,
    pub tailprof_version: String,
    /// 1-minute load average when the calibration started.
    pub loadavg: Option<f64>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// File name of the calibration for (CPU model, kernel, event): each part with every
/// character outside `[A-Za-z0-9._-]` turned into `_`, joined by `__`, plus `.json`.
pub fn calibration_file_name(cpu_model: &str, kernel: &str, event: &str) -> String {
    let clean = |s: &str| -> String {
        let t: String = s.trim().chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
        let t = t.trim_matches('_').to_string();
        let t = if t.len() > 80 { t[..80].to_string() } else { t };
        if t.is_empty() {
            "unknown".into()
        } else {
            t
        }
    };
    format!("{}__{}__{}.json", clean(cpu_model), clean(kernel), clean(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(calibration_file_name("AMD EPYC", "6.18.44-fc-v669", "cpu-clock"), "AMD_EPYC__6.18.44-fc-v669__cpu-clock.json");
        assert_eq!(
            calibration_file_name("Intel(R) Xeon(R) CPU E5-2630 v4 @ 2.20GHz", "4.9", "cpu/event=0xc2,umask=0x1/pp"),
            "Intel_R__Xeon_R__CPU_E5-2630_v4___2.20GHz__4.9__cpu_event_0xc2_umask_0x1_pp.json"
        );
        assert_eq!(calibration_file_name("", " ", "cycles"), "unknown__unknown__cycles.json");
    }

    #[test]
    fn calibration_round_trips_through_json_shape() {
        let c = Calibration {
            version: CALIBRATION_VERSION,
            event: "cpu-clock".into(),
            cpu_model: "AMD EPYC".into(),
            kernel: "6.1".into(),
            online_cpus: 2,
            basis: Basis::Cpu,
            alpha_ns: 12_000.0,
            alpha_ci_ns: (11_000.0, 13_000.0),
            r2: 0.99,
            intercept_s: 0.5,
            bytes_per_sample: Some(3.5),
            recorder_cpu_ns_per_sample: None,
            periods: vec![1_000_000],
            points: vec![Point { group: 0, samples: 0.0, time_s: 0.5 }],
            created_unix: 1,
            tailprof_version: "0.1.0".into(),
            loadavg: Some(1.0),
            notes: vec![],
        };
        // serde derive on both sides; the CLI stores it with serde_json.
        fn assert_serde<T: Serialize + for<'de> Deserialize<'de>>(_: &T) {}
        assert_serde(&c);
    }
}
