//! From α to answers: the predicted elapsed time of a profiled run, the measured
//! overhead with its interval, and the period to use for an overhead budget.

use serde::{Deserialize, Serialize};

use crate::stats::{median, percentile_interval, SplitMix64};

/// The paper's prediction (Akiyama & Hirofuchi, ROSS '17, §4.4–4.5): the unprofiled
/// elapsed time plus α per sample, with the samples spread over the `parallel` threads
/// that ran at once (§4.5 divides by the number of cores the benchmark kept busy).
pub fn predict_elapsed(base_s: f64, samples: f64, alpha_ns: f64, parallel: f64) -> f64 {
    base_s + alpha_ns * 1e-9 * samples / parallel.max(1.0)
}

/// The paper's equation 1: `E = (measured − predicted) / predicted`, as a fraction.
pub fn relative_error(measured_s: f64, predicted_s: f64) -> f64 {
    (measured_s - predicted_s) / predicted_s
}

/// Threads running in parallel, from CPU time over elapsed time, clamped to
/// `[1, cpus]`.
pub fn parallelism(cpu_s: f64, elapsed_s: f64, cpus: usize) -> f64 {
    if elapsed_s <= 0.0 || !cpu_s.is_finite() {
        return 1.0;
    }
    (cpu_s / elapsed_s).clamp(1.0, cpus.max(1) as f64)
}

/// Measured overhead of profiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverheadEstimate {
    /// Median unprofiled elapsed time.
    pub base_s: f64,
    /// Median profiled elapsed time.
    pub profiled_s: f64,
    /// `profiled_s / base_s − 1`, in percent.
    pub overhead_pct: f64,
    /// 95% interval of `overhead_pct` (paired bootstrap, see [`overhead_estimate`]).
    pub ci_pct: (f64, f64),
    pub runs: usize,
}

/// Overhead from interleaved runs: `pairs[i] = (unprofiled_s, profiled_s)` of the
/// i-th back-to-back pair. The estimate is the ratio of the medians; its 95% interval
/// is a paired bootstrap: resample *pairs* with replacement (keeping each pair's two
/// runs together, so slow drift of the machine hits both sides of a replicate alike)
/// and take the 2.5%/97.5% quantiles of the replicates' ratio of medians. `None`
/// without pairs.
pub fn overhead_estimate(pairs: &[(f64, f64)]) -> Option<OverheadEstimate> {
    let base: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let prof: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let (b, p) = (median(&base)?, median(&prof)?);
    let mut rng = SplitMix64::new(0x5eed ^ pairs.len() as u64);
    let mut reps = Vec::with_capacity(2000);
    let (mut rb, mut rp) = (Vec::with_capacity(pairs.len()), Vec::with_capacity(pairs.len()));
    for _ in 0..2000 {
        rb.clear();
        rp.clear();
        for _ in 0..pairs.len() {
            let k = rng.below(pairs.len() as u64) as usize;
            rb.push(pairs[k].0);
            rp.push(pairs[k].1);
        }
        if let (Some(mb), Some(mp)) = (median(&rb), median(&rp)) {
            reps.push((mp / mb - 1.0) * 100.0);
        }
    }
    let est = (p / b - 1.0) * 100.0;
    Some(OverheadEstimate {
        base_s: b,
        profiled_s: p,
        overhead_pct: est,
        ci_pct: percentile_interval(reps).unwrap_or((est, est)),
        runs: pairs.len(),
    })
}

/// How the number of samples follows from the sampling period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum RateModel {
    /// A counted event (instructions, cache misses, uops...): `events_per_cpu_s` of them
    /// per second of the command's CPU time, whatever the period, so a thread takes
    /// `events_per_cpu_s / period` samples per CPU-second and loses α for each. The
    /// paper's model.
    Count { events_per_cpu_s: f64 },
    /// cpu-clock / task-clock: an hrtimer fires every `period` ns of the thread's run
    /// time, *including* the time spent handling the previous sample, so samples grow
    /// with the overhead itself: `T = T0 + α·T/P`, i.e. the overhead is `α / (P − α)`.
    /// At `P ≤ α` the timer is always overdue and the run slows down without bound.
    Time,
}

/// Inputs of [`recommend_period`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanInput {
    pub alpha_ns: f64,
    /// Acceptable slowdown as a fraction (0.02 = 2%).
    pub budget: f64,
    pub model: RateModel,
    /// Threads of the command running at once (CPU time / elapsed).
    pub parallel: f64,
    /// Smallest period the kernel honours (cpu-clock: 10 µs; counted events: 1).
    pub min_period: u64,
    /// Longest period worth recommending (a tiny budget or a tiny event rate would
    /// otherwise ask for an absurd one).
    pub max_period: u64,
    /// kernel.perf_event_max_sample_rate (samples per second per CPU above which the
    /// kernel throttles), if known.
    pub max_rate_per_cpu: Option<f64>,
}

/// What limited the recommended period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlanLimit {
    /// The overhead budget (the usual case).
    Budget,
    /// The kernel's minimum period.
    MinPeriod,
    /// kernel.perf_event_max_sample_rate.
    MaxSampleRate,
    /// [`PlanInput::max_period`]: the budget allows sampling even less often.
    MaxPeriod,
}

/// The recommended period and what it implies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanOutput {
    pub period: u64,
    pub predicted_overhead_pct: f64,
    /// CPU time of one thread between two of its samples, ns.
    pub sample_interval_ns: f64,
    /// Samples per second of one busy thread (= per busy CPU).
    pub samples_per_s_per_thread: f64,
    /// Samples per second of the whole command.
    pub samples_per_s: f64,
    pub limited_by: PlanLimit,
}

/// The overhead (fraction of elapsed time) that `period` costs: the one slowdown model,
/// used by `plan` ([`recommend_period`]) and by `calibrate`'s pilot pass (via
/// [`slowdown_at`]).
pub fn overhead_at(period: u64, alpha_ns: f64, model: RateModel) -> f64 {
    let p = period as f64;
    match model {
        RateModel::Count { events_per_cpu_s } => alpha_ns * 1e-9 * events_per_cpu_s / p,
        RateModel::Time if p > alpha_ns => alpha_ns / (p - alpha_ns),
        RateModel::Time => f64::INFINITY,
    }
}

/// Profiled time over unprofiled time at `period`: `1 + overhead_at(..)` (∞ when a
/// clock event's period is at or below α).
pub fn slowdown_at(period: u64, alpha_ns: f64, model: RateModel) -> f64 {
    1.0 + overhead_at(period, alpha_ns, model)
}

/// The smallest period, rounded *up* to two significant digits, whose predicted
/// overhead stays within the budget (§5 of the paper: "dividing the acceptable overhead
/// per second by the CPU overhead per PEBS assist"), raised to the kernel's limits.
pub fn recommend_period(input: &PlanInput) -> PlanOutput {
    let a = input.alpha_ns.max(0.0);
    let b = input.budget.max(1e-9);
    let exact = match input.model {
        RateModel::Count { events_per_cpu_s } => a * 1e-9 * events_per_cpu_s / b,
        RateModel::Time => a * (1.0 + b) / b,
    };
    let mut period = round_up_2sig(exact.ceil().max(1.0) as u64);
    let mut limited_by = PlanLimit::Budget;
    if period < input.min_period {
        period = input.min_period;
        limited_by = PlanLimit::MinPeriod;
    }
    let per_thread = |p: u64| match input.model {
        RateModel::Count { events_per_cpu_s } => events_per_cpu_s / p as f64,
        RateModel::Time => 1e9 / p as f64,
    };
    if period > input.max_period.max(input.min_period) {
        period = input.max_period.max(input.min_period);
        limited_by = PlanLimit::MaxPeriod;
    }
    if let Some(max) = input.max_rate_per_cpu.filter(|m| *m > 0.0) {
        if per_thread(period) > max {
            let min_p = match input.model {
                RateModel::Count { events_per_cpu_s } => (events_per_cpu_s / max).ceil() as u64,
                RateModel::Time => (1e9 / max).ceil() as u64,
            };
            period = round_up_2sig(min_p.max(period));
            limited_by = PlanLimit::MaxSampleRate;
        }
    }
    let rate = per_thread(period);
    PlanOutput {
        period,
        predicted_overhead_pct: overhead_at(period, a, input.model) * 100.0,
        sample_interval_ns: 1e9 / rate,
        samples_per_s_per_thread: rate,
        samples_per_s: rate * input.parallel.max(1.0),
        limited_by,
    }
}

/// Round up to two significant digits: 12_345 → 13_000, 99 → 99, 101 → 110.
pub fn round_up_2sig(x: u64) -> u64 {
    if x < 100 {
        return x;
    }
    let mut scale = 1u64;
    while x / scale >= 100 {
        scale *= 10;
    }
    x.div_ceil(scale).saturating_mul(scale)
}

/// Ring pages per CPU so that the ring holds `hold_s` seconds of raw records at
/// `samples_per_s_per_cpu`, doubled because the kernel wakes the reader at half full,
/// rounded up to a power of two, at least `min_pages`.
pub fn ring_pages(samples_per_s_per_cpu: f64, raw_record_bytes: u64, hold_s: f64, page_size: u64, min_pages: u64) -> u64 {
    let bytes = samples_per_s_per_cpu * raw_record_bytes as f64 * hold_s * 2.0;
    let pages = (bytes / page_size as f64).ceil().max(1.0) as u64;
    pages.next_power_of_two().max(min_pages.next_power_of_two())
}

/// §5 buffer guidance for a precise (PEBS) event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PebsGuidance {
    /// Last-level cache per core the command keeps busy (LLC / cores used).
    pub llc_share_bytes: Option<u64>,
    pub cores_used: f64,
    /// PEBS data written into the cache per second per busy core.
    pub pebs_bytes_per_s_per_core: f64,
    /// Lines of advice, in order.
    pub advice: Vec<String>,
}

/// Size of one PEBS record assumed for the write-rate estimate (the Skylake-format
/// record with the memory-info fields is 192–200 bytes; adaptive PEBS records are
/// smaller unless registers are requested).
pub const PEBS_RECORD_BYTES: f64 = 200.0;
/// The per-CPU PEBS buffer the Linux x86 driver allocates (PEBS_BUFFER_SIZE = 16 pages);
/// a profiler cannot change it.
pub const LINUX_PEBS_BUFFER_BYTES: u64 = 64 * 1024;

/// The paper's §5 guidance: the PEBS buffer may be as large as each core's share of the
/// LLC (LLC / cores the command uses) for cache-insensitive work; cache-sensitive work
/// (omnetpp in §4.6: +10% and more at high rates) wants a small buffer and a measured
/// check.
pub fn pebs_guidance(llc_bytes: Option<u64>, cores_used: f64, samples_per_s_per_thread: f64) -> PebsGuidance {
    let cores = cores_used.max(1.0);
    let share = llc_bytes.map(|l| (l as f64 / cores) as u64);
    let rate = samples_per_s_per_thread * PEBS_RECORD_BYTES;
    let mut advice = Vec::new();
    match share {
        Some(s) => advice.push(format!(
            "each busy core's share of the last-level cache is {} ({} over {:.1} cores): a PEBS buffer up to that size per core keeps buffer-full interrupts rare without spilling the cache, if the command is not cache-sensitive (Akiyama & Hirofuchi, ROSS '17, §5)",
            human_bytes(s),
            human_bytes(llc_bytes.unwrap_or(0)),
            cores
        )),
        None => advice.push("the last-level cache size is unknown (no /sys/devices/system/cpu/cpu0/cache); size the buffer against each core's share of the LLC (§5)".into()),
    }
    advice.push(format!(
        "PEBS writes about {:.1} MB/s per busy core into the cache at this period (≈{PEBS_RECORD_BYTES:.0} B per record); the records pass through the cache, not around it (§4.3)",
        rate / 1e6
    ));
    advice.push(format!(
        "Linux fixes the per-CPU PEBS buffer at {}; with large PEBS (a fixed period, no -F) the kernel fills it before interrupting, otherwise it interrupts on every record",
        human_bytes(LINUX_PEBS_BUFFER_BYTES)
    ));
    if share.is_some_and(|s| s < LINUX_PEBS_BUFFER_BYTES * 4) {
        advice.push("the buffer is a noticeable part of each core's cache share: expect cache pollution".into());
    }
    advice.push(
        "risk: cache-sensitive workloads slow down more than α predicts as the sampling rate rises (omnetpp: +10% and more in §4.6); for such workloads prefer a longer period and confirm with `tailprof overhead`".into(),
    );
    PebsGuidance { llc_share_bytes: share, cores_used: cores, pebs_bytes_per_s_per_core: rate, advice }
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", n as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_prediction_and_error() {
        // §4.2 machine 1: α = 286 ns; 1 M assists on a 34.2 s run.
        let p = predict_elapsed(34.2, 1e6, 286.0, 1.0);
        assert!((p - 34.486).abs() < 1e-9);
        // §4.5: 10 threads on 10 cores share the assists.
        let p10 = predict_elapsed(34.2, 1e7, 286.0, 10.0);
        assert!((p10 - 34.486).abs() < 1e-9);
        assert!((relative_error(35.0, 34.486) - 0.0149).abs() < 1e-4);
        assert_eq!(parallelism(3.0, 2.0, 2), 1.5);
        assert_eq!(parallelism(9.0, 2.0, 2), 2.0);
        assert_eq!(parallelism(0.1, 2.0, 2), 1.0);
        assert_eq!(parallelism(1.0, 0.0, 2), 1.0);
    }

    #[test]
    fn overhead_from_pairs() {
        let pairs = [(1.00, 1.10), (1.02, 1.12), (0.98, 1.08), (1.01, 1.11), (0.99, 1.09)];
        let o = overhead_estimate(&pairs).unwrap();
        assert_eq!((o.base_s, o.profiled_s, o.runs), (1.00, 1.10, 5));
        assert!((o.overhead_pct - 10.0).abs() < 1e-9);
        assert!(o.ci_pct.0 <= o.overhead_pct && o.overhead_pct <= o.ci_pct.1, "{o:?}");
        assert!(o.ci_pct.0 > 5.0 && o.ci_pct.1 < 15.0, "{o:?}");
        assert_eq!(overhead_estimate(&[]), None);
        let one = overhead_estimate(&[(2.0, 3.0)]).unwrap();
        assert_eq!(one.ci_pct, (50.0, 50.0));
    }

    #[test]
    fn count_model_recommendation() {
        // α = 286 ns, 1e9 events per CPU-second, 1% budget:
        // P = 286e-9 * 1e9 / 0.01 = 28_600.
        let input = PlanInput {
            alpha_ns: 286.0,
            budget: 0.01,
            model: RateModel::Count { events_per_cpu_s: 1e9 },
            parallel: 2.0,
            min_period: 1,
            max_period: 1 << 40,
            max_rate_per_cpu: Some(100_000.0),
        };
        let out = recommend_period(&input);
        assert_eq!(out.period, 29_000);
        assert_eq!(out.limited_by, PlanLimit::Budget);
        assert!(out.predicted_overhead_pct <= 1.0 && out.predicted_overhead_pct > 0.95, "{out:?}");
        assert!((out.samples_per_s_per_thread - 1e9 / 29_000.0).abs() < 1e-6);
        assert!((out.samples_per_s - 2.0 * out.samples_per_s_per_thread).abs() < 1e-6);
        // A 50% budget would need 1.7 M samples/s: capped by the kernel's max rate.
        let out = recommend_period(&PlanInput { budget: 0.5, ..input });
        assert_eq!(out.limited_by, PlanLimit::MaxSampleRate);
        assert_eq!(out.period, 10_000);
        assert!(out.samples_per_s_per_thread <= 100_000.0);
    }

    #[test]
    fn time_model_recommendation() {
        // α = 12 µs per cpu-clock sample; 5% budget: P ≥ α (1 + b) / b = 252 µs.
        let input = PlanInput {
            alpha_ns: 12_000.0,
            budget: 0.05,
            model: RateModel::Time,
            parallel: 1.0,
            min_period: 10_000,
            max_period: 1_000_000_000,
            max_rate_per_cpu: Some(100_000.0),
        };
        let out = recommend_period(&input);
        assert_eq!(out.period, 260_000);
        assert!(out.predicted_overhead_pct <= 5.0, "{out:?}");
        assert!(overhead_at(250_000, 12_000.0, RateModel::Time) > 0.05);
        assert!((out.sample_interval_ns - 260_000.0).abs() < 1e-6);
        // A cheap α: limited by the kernel's minimum hrtimer period.
        let out = recommend_period(&PlanInput { alpha_ns: 100.0, ..input });
        assert_eq!((out.period, out.limited_by), (10_000, PlanLimit::MinPeriod));
        assert_eq!(overhead_at(5_000, 12_000.0, RateModel::Time), f64::INFINITY);
        assert_eq!(slowdown_at(5_000, 12_000.0, RateModel::Time), f64::INFINITY);
        assert!((slowdown_at(24_000, 12_000.0, RateModel::Time) - 2.0).abs() < 1e-12);
        // A tiny budget: capped at the longest sensible period, never an absurd one.
        let out = recommend_period(&PlanInput { budget: 1e-12, ..input });
        assert_eq!((out.period, out.limited_by), (1_000_000_000, PlanLimit::MaxPeriod));
        let out = recommend_period(&PlanInput { alpha_ns: f64::NAN, ..input });
        assert!(out.period >= 10_000 && out.period <= 1_000_000_000, "{out:?}");
    }

    #[test]
    fn rounding_and_rings() {
        assert_eq!(round_up_2sig(12_345), 13_000);
        assert_eq!(round_up_2sig(13_000), 13_000);
        assert_eq!(round_up_2sig(99), 99);
        assert_eq!(round_up_2sig(101), 110);
        assert_eq!(round_up_2sig(1), 1);
        assert_eq!(round_up_2sig(u64::MAX), u64::MAX);
        // 10 k samples/s × 56 B × 0.5 s × 2 = 560 kB = 137 pages -> 256.
        assert_eq!(ring_pages(10_000.0, 56, 0.5, 4096, 8), 256);
        assert_eq!(ring_pages(10.0, 56, 0.5, 4096, 8), 8);
    }

    #[test]
    fn pebs_advice() {
        let g = pebs_guidance(Some(25 << 20), 10.0, 50_000.0);
        assert_eq!(g.llc_share_bytes, Some(2_621_440));
        assert!((g.pebs_bytes_per_s_per_core - 1e7).abs() < 1.0);
        assert!(g.advice[0].contains("2.5 MiB"), "{:?}", g.advice);
        assert!(g.advice.iter().any(|a| a.contains("omnetpp")));
        let small = pebs_guidance(Some(1 << 20), 8.0, 1000.0);
        assert!(small.advice.iter().any(|a| a.contains("cache pollution")));
        let unknown = pebs_guidance(None, 1.0, 1000.0);
        assert_eq!(unknown.llc_share_bytes, None);
        assert!(unknown.advice[0].contains("unknown"));
    }
}
