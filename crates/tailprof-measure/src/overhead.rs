//! The overhead experiment behind `tailprof overhead`: run a command unprofiled and
//! profiled, interleaved, and compare the cost with the prediction `base + α × samples /
//! threads` (Akiyama & Hirofuchi's equation 1).
//!
//! `runs` pairs, the order alternating every pair (unprofiled first in even pairs), after
//! `warmup` unprofiled runs that are not counted. With `instances` K > 1, K copies run at
//! once, each profiled copy with its own recorder on its own thread (all recorders start
//! together after setup); times are averaged over the copies, samples summed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use tailprof_analyze::overhead::predict::{parallelism, relative_error};
use tailprof_analyze::overhead::{overhead_estimate, predict_elapsed, OverheadEstimate};
use tailprof_analyze::stats::{mean, median};
use tailprof_collect::attr::{default_rate, Rate};
use tailprof_collect::event::EventSpec;

use crate::calibrate::period_text;
use crate::calibration::{self, AlphaSource};

use crate::error::{MeasureError, Result};
use crate::run::{self, Placement, ProfileSetup, ProfiledRun, Scratch, Timed};
pub use tailprof_analyze::measured::{OverheadReport, Prediction};

/// How to measure.
#[derive(Debug, Clone)]
pub struct OverheadConfig {
    pub spec: EventSpec,
    /// Sampling period; `None`: the event's default rate.
    pub period: Option<u64>,
    /// Interleaved pairs (at least 1).
    pub runs: usize,
    pub warmup: usize,
    /// Copies at once (at least 1).
    pub instances: usize,
    /// Pin copy i to CPU i (one copy: CMD on the last CPU, the recorder on the others).
    pub pin: bool,
    /// Before each pair wait up to this long for an idle machine (0: do not wait).
    pub wait_idle_s: f64,
    /// `--alpha`, else the stored calibration.
    pub alpha_ns: Option<f64>,
    pub mmap_pages: usize,
    pub show_output: bool,
    pub command: Vec<String>,
}

/// Check the options before anything runs.
pub fn check_config(cfg: &OverheadConfig) -> Result<()> {
    let bad = |m: &str| Err(MeasureError::Invalid(m.into()));
    if cfg.command.is_empty() {
        return bad("no command: give the command to measure after `--` (see `tailprof overhead --help`)");
    }
    if cfg.runs == 0 {
        return bad("--runs must be at least 1");
    }
    if cfg.instances == 0 {
        return bad("--instances must be at least 1");
    }
    if cfg.period == Some(0) {
        return bad("the sampling period (-c) must be greater than zero");
    }
    if cfg.mmap_pages == 0 || !cfg.mmap_pages.is_power_of_two() {
        return Err(MeasureError::Invalid(format!("--mmap-pages must be a power of two (got {})", cfg.mmap_pages)));
    }
    Ok(())
}

/// Run the experiment. `status` gets a short progress line; `stop` (Ctrl-C) ends it with
/// [`MeasureError::Interrupted`].
pub fn measure_overhead(cfg: &OverheadConfig, stop: &AtomicBool, status: &dyn Fn(&str)) -> Result<OverheadReport> {
    check_config(cfg)?;
    tailprof_collect::target::resolve_command(&cfg.command[0])?;
    let spec = &cfg.spec;
    let clock = spec.is_clock();
    let key = calibration::probe_machine();
    let alpha = calibration::alpha_for(&key, &spec.name, cfg.alpha_ns)?;
    let period_desc = match (cfg.period, default_rate(spec)) {
        (Some(p), _) => period_text(p, clock),
        (None, Rate::Period(p)) => format!("{} (default)", period_text(p, clock)),
        (None, Rate::Freq(f)) => format!("{f} Hz (default)"),
    };
    let load0 = run::loadavg();
    let cpus = run::online_cpus();
    let k = cfg.instances;
    let inst_cpu = |i: usize| -> Option<usize> {
        match (cfg.pin, k) {
            (false, _) => None,
            (true, 1) => cpus.last().copied(),
            (true, _) => Some(cpus[i % cpus.len()]),
        }
    };
    let rec_cpus: Option<Vec<usize>> = (cfg.pin && k == 1 && cpus.len() > 1).then(|| cpus[..cpus.len() - 1].to_vec());
    let setup = ProfileSetup { spec: spec.clone(), period: cfg.period, mmap_pages: cfg.mmap_pages };
    let scratch = Scratch::new()?;
    let cmd = &cfg.command;

    let unprofiled = || -> Result<Vec<Timed>> {
        let mut running = Vec::with_capacity(k);
        for i in 0..k {
            running.push(run::spawn_unprofiled(&scratch, inst_cpu(i), cfg.show_output, cmd)?);
        }
        running.into_iter().map(|(c, out)| run::wait_unprofiled(c, &out)).collect()
    };
    let profiled = || -> Result<Vec<ProfiledRun>> {
        if k == 1 {
            let place = Placement { cpu: inst_cpu(0), recorder_cpus: rec_cpus.as_deref(), show_output: cfg.show_output };
            return Ok(vec![run::run_profiled(&setup, &scratch, place, cmd, stop, None)?]);
        }
        let barrier = Barrier::new(k);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..k)
                .map(|i| {
                    let (setup, barrier, scratch) = (&setup, &barrier, &scratch);
                    let place = Placement { cpu: inst_cpu(i), recorder_cpus: None, show_output: cfg.show_output };
                    s.spawn(move || run::run_profiled(setup, scratch, place, cmd, stop, Some(barrier)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(MeasureError::Invalid("a recorder thread panicked".into()))))
                .collect()
        })
    };
    let check = |what: &str, i: usize, statuses: Vec<i32>| -> Result<()> {
        if stop.load(Ordering::SeqCst) {
            return Err(MeasureError::Interrupted);
        }
        if let Some(st) = statuses.into_iter().find(|s| *s != 0) {
            return Err(MeasureError::CommandFailed(format!(
                "the command failed with exit status {st} ({what} run {}); `tailprof overhead` needs a command that succeeds (see its output with --show-output)",
                i + 1
            )));
        }
        Ok(())
    };

    for w in 0..cfg.warmup {
        status(&format!("overhead: warm-up {}/{}", w + 1, cfg.warmup));
        let t = unprofiled()?;
        check("warm-up", w, t.iter().map(|t| t.status).collect())?;
    }
    let mut pairs: Vec<(Vec<Timed>, Vec<ProfiledRun>)> = Vec::with_capacity(cfg.runs);
    let mut busy_pairs = 0usize;
    for i in 0..cfg.runs {
        if cfg.wait_idle_s > 0.0 {
            status(&format!("overhead: pair {}/{}, waiting for an idle machine", i + 1, cfg.runs));
            if !run::wait_idle(cfg.wait_idle_s) {
                busy_pairs += 1;
            }
        }
        status(&format!("overhead: pair {}/{}", i + 1, cfg.runs));
        let (base, prof) = if i % 2 == 0 {
            let b = unprofiled()?;
            check("unprofiled", i, b.iter().map(|t| t.status).collect())?;
            (b, profiled()?)
        } else {
            let p = profiled()?;
            check("profiled", i, p.iter().map(|r| r.timed.status).collect())?;
            (unprofiled()?, p)
        };
        check("unprofiled", i, base.iter().map(|t| t.status).collect())?;
        check("profiled", i, prof.iter().map(|r| r.timed.status).collect())?;
        pairs.push((base, prof));
    }

    summarize(cfg, &pairs, cpus.len(), alpha, period_desc, load0, busy_pairs)
}

/// The report from the measured pairs (unprofiled runs, profiled runs) of all copies.
fn summarize(
    cfg: &OverheadConfig,
    pairs: &[(Vec<Timed>, Vec<ProfiledRun>)],
    ncpus: usize,
    alpha: Option<AlphaSource>,
    period_desc: String,
    load0: Option<f64>,
    busy_pairs: usize,
) -> Result<OverheadReport> {
    let k = cfg.instances;
    // Per pair: times averaged over the instances (the CERN report sums them; the
    // ratio is the same), samples summed.
    let avg = |v: Vec<f64>| mean(&v).unwrap_or(f64::NAN);
    let wall: Vec<(f64, f64)> = pairs
        .iter()
        .map(|(b, p)| (avg(b.iter().map(|t| t.elapsed_s).collect()), avg(p.iter().map(|r| r.timed.elapsed_s).collect())))
        .collect();
    let cpu: Vec<(f64, f64)> =
        pairs.iter().map(|(b, p)| (avg(b.iter().map(|t| t.cpu_s).collect()), avg(p.iter().map(|r| r.timed.cpu_s).collect()))).collect();
    let no_runs = || MeasureError::Invalid("no runs to estimate from".into());
    let est = overhead_estimate(&wall).ok_or_else(no_runs)?;
    let est_cpu = overhead_estimate(&cpu).ok_or_else(no_runs)?;
    let samples_runs: Vec<f64> = pairs.iter().map(|(_, p)| p.iter().map(|r| r.samples as f64).sum()).collect();
    let samples = median(&samples_runs).unwrap_or(0.0);
    let per_instance = samples / k as f64;
    let threads = median(&pairs.iter().flat_map(|(b, _)| b.iter().map(|t| parallelism(t.cpu_s, t.elapsed_s, ncpus))).collect::<Vec<_>>())
        .unwrap_or(1.0);
    let all: Vec<&ProfiledRun> = pairs.iter().flat_map(|(_, p)| p.iter()).collect();
    let lost: u64 = all.iter().map(|r| r.lost).sum();
    let throttled: u64 = all.iter().map(|r| r.throttled).sum();
    let total_samples: u64 = all.iter().map(|r| r.samples).sum();
    let per_sample = |v: f64| if total_samples > 0 { Some(v / total_samples as f64) } else { None };
    let bytes_per_sample = per_sample(all.iter().map(|r| r.bytes as f64).sum());
    let recorder_ns = per_sample(all.iter().map(|r| r.recorder_cpu_s * 1e9).sum());
    let fixed_s = median(&all.iter().map(|r| r.recorder_wall_s - r.timed.elapsed_s).collect::<Vec<_>>());

    let predict = |e: &OverheadEstimate, a: &AlphaSource, threads: f64| {
        let p = predict_elapsed(e.base_s, per_instance, a.alpha_ns, threads);
        Prediction { predicted_s: p, error: relative_error(e.profiled_s, p) }
    };
    let predicted_wall = alpha.as_ref().map(|a| predict(&est, a, threads));
    let predicted_cpu = alpha.as_ref().map(|a| predict(&est_cpu, a, 1.0));
    // The per-sample cost this measurement implies (compare with the calibrated α: a
    // larger value means the command suffers more per sample than the busy loop, e.g.
    // from cache pollution).
    let implied = |d: f64, t: f64| if per_instance > 0.0 { Some(d * t / per_instance * 1e9) } else { None };
    Ok(OverheadReport {
        event: cfg.spec.name.clone(),
        clock: cfg.spec.is_clock(),
        period: cfg.period,
        period_desc,
        command: cfg.command.clone(),
        runs: cfg.runs,
        instances: k,
        pinned: cfg.pin,
        cpus: ncpus,
        implied_alpha_ns: implied(est.profiled_s - est.base_s, threads),
        implied_alpha_cpu_ns: implied(est_cpu.profiled_s - est_cpu.base_s, 1.0),
        wall: est,
        cpu: est_cpu,
        samples,
        samples_per_instance: per_instance,
        threads,
        alpha,
        predicted_wall,
        predicted_cpu,
        lost,
        throttled,
        bytes_per_sample,
        recorder_cpu_ns_per_sample: recorder_ns,
        recorder_fixed_s: fixed_s,
        wall_pairs: wall,
        cpu_pairs: cpu,
        samples_runs,
        loadavg: load0,
        wait_idle_s: cfg.wait_idle_s,
        pairs_started_busy: (cfg.wait_idle_s > 0.0).then_some(busy_pairs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(instances: usize) -> OverheadConfig {
        OverheadConfig {
            spec: EventSpec::parse("cpu-clock").unwrap(),
            period: Some(100_000),
            runs: 3,
            warmup: 0,
            instances,
            pin: false,
            wait_idle_s: 0.0,
            alpha_ns: None,
            mmap_pages: 128,
            show_output: false,
            command: vec!["true".into()],
        }
    }

    fn timed(el: f64, cpu: f64) -> Timed {
        Timed { elapsed_s: el, cpu_s: cpu, status: 0 }
    }

    fn prof(el: f64, cpu: f64, samples: u64) -> ProfiledRun {
        ProfiledRun {
            timed: timed(el, cpu),
            samples,
            lost: 1,
            throttled: 0,
            bytes: 4 * samples,
            recorder_cpu_s: 1e-6 * samples as f64,
            recorder_wall_s: el + 0.01,
        }
    }

    #[test]
    fn prediction_is_base_plus_alpha_per_sample_over_threads() {
        // Two copies per pair: times averaged, samples summed; one thread each.
        let pairs: Vec<_> = [1.0, 1.1, 0.9]
            .iter()
            .map(|&b| (vec![timed(b, b), timed(b, b)], vec![prof(b * 1.1, b * 1.1, 5_000), prof(b * 1.1, b * 1.1, 5_000)]))
            .collect();
        let alpha = AlphaSource { alpha_ns: 10_000.0, ci_ns: None, calibration: None, path: None };
        let r = summarize(&cfg(2), &pairs, 2, Some(alpha), "100 µs".into(), None, 0).unwrap();
        assert_eq!((r.wall.base_s, r.samples, r.samples_per_instance, r.threads), (1.0, 10_000.0, 5_000.0, 1.0));
        assert!((r.wall.overhead_pct - 10.0).abs() < 1e-9, "{:?}", r.wall);
        let p = r.predicted_wall.unwrap();
        assert!((p.predicted_s - (1.0 + 10_000e-9 * 5_000.0)).abs() < 1e-12);
        assert!((p.error - (1.1 - p.predicted_s) / p.predicted_s).abs() < 1e-12);
        // Implied α: 0.1 s over 5000 samples per copy = 20 µs.
        assert!((r.implied_alpha_ns.unwrap() - 20_000.0).abs() < 1e-6);
        assert_eq!(r.lost, 6);
        assert_eq!(r.bytes_per_sample, Some(4.0));
        assert_eq!(r.pairs_started_busy, None);
        assert_eq!(r.wall_pairs.len(), 3);
        assert!(r.recorder_fixed_s.unwrap() > 0.0);
    }

    #[test]
    fn no_alpha_no_prediction_and_no_samples_no_per_sample_costs() {
        let pairs = vec![(vec![timed(1.0, 2.0)], vec![ProfiledRun { samples: 0, lost: 0, ..prof(1.0, 2.0, 0) }])];
        let r = summarize(&cfg(1), &pairs, 2, None, "x".into(), None, 0).unwrap();
        assert_eq!(r.predicted_wall, None);
        assert_eq!(r.threads, 2.0);
        assert_eq!((r.implied_alpha_ns, r.bytes_per_sample), (None, None));
        assert!(summarize(&cfg(1), &[], 2, None, "x".into(), None, 0).is_err());
    }
}
