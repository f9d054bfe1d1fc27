//! The calibration experiment: measure α, the cost of one sample, on this machine.
//!
//! A built-in busy loop with no memory traffic ([`spin`], run as `<exe> __spin`) runs
//! unprofiled and profiled at a sweep of periods. A pilot pass goes from the largest
//! period down and stops before periods whose slowdown (predicted from α as estimated
//! so far with [`slowdown_at`], or measured) exceeds [`MAX_SLOWDOWN`], or where the
//! kernel throttles; then every remaining design point is repeated with the order
//! rotated each repeat. Time against samples is fitted with a Theil–Sen line
//! (`tailprof_analyze::overhead::fit`); a fit the noise does not support is refused
//! ([`CalibrationReport::verdict`]) and only an accepted busy-loop fit is saved.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tailprof_analyze::overhead::{assess, fit_line, slowdown_at, Basis, Calibration, FitPolicy, Point, RateModel, CALIBRATION_VERSION};
use tailprof_analyze::stats::median;
use tailprof_collect::event::EventSpec;

use crate::calibration::{self, MachineKey};

use crate::error::{MeasureError, Result};
use crate::run::{self, Placement, ProfileSetup, ProfiledRun, Scratch, Timed};
pub use tailprof_analyze::measured::{CalibrationReport, PeriodRow};
pub use tailprof_present::fmt::{ns_text, period_text};

/// Periods swept for cpu-clock/task-clock (ns): 1 ms down to the kernel's 10 µs floor.
pub const CLOCK_PERIODS: [u64; 7] = [1_000_000, 500_000, 200_000, 100_000, 50_000, 20_000, 10_000];
/// Periods swept for counted events: the paper's 128K down to 2K.
pub const COUNT_PERIODS: [u64; 7] = [128_000, 64_000, 32_000, 16_000, 8_000, 4_000, 2_000];
/// Smaller periods are skipped once a run is (or is predicted to be) this many times
/// slower than unprofiled: closer to α, cpu-clock's timer is overdue after almost every
/// sample and the runs mostly measure the timer fighting the handler.
pub const MAX_SLOWDOWN: f64 = 2.0;

/// What a calibration that misses the strict policy ([`FitPolicy::default`]) must still
/// meet to be saved, with its wider interval said (a busy machine): a cost clearly above
/// zero (the interval excludes 0), known within ±100%, from at least 4 runs over 2
/// design points, R² ≥ 0.5, at most 1 run in 3 an outlier.
pub const LENIENT_POLICY: FitPolicy =
    FitPolicy { min_points: 4, min_groups: 2, max_relative_half_width: 1.0, min_r2: 0.5, max_outlier_fraction: 0.34 };

/// How to calibrate.
#[derive(Debug, Clone)]
pub struct CalibrateConfig {
    pub spec: EventSpec,
    /// Runs per design point (unprofiled and each period), at least 1.
    pub repeats: usize,
    /// Unprofiled duration of one busy-loop run, in (0, 600].
    pub seconds: f64,
    /// Periods to sweep; empty: [`CLOCK_PERIODS`] or [`COUNT_PERIODS`].
    pub periods: Vec<u64>,
    pub basis: Basis,
    /// The basis was not chosen (`--basis` absent): when the `basis` fit is refused and
    /// the other one is accepted, use the other one (said in the notes).
    pub basis_fallback: bool,
    /// Before each run wait up to this long for an idle machine (0: do not wait).
    pub wait_idle_s: f64,
    /// Pin the loop to the last CPU and the recorder to the others.
    pub pin: bool,
    pub mmap_pages: usize,
    /// Save an accepted busy-loop calibration.
    pub save: bool,
    /// Calibrate on this command instead of the busy loop (never saved).
    pub command: Vec<String>,
}

/// The busy loop: a multiply-add chain kept in a register (no loads or stores).
#[inline(never)]
pub fn spin(iters: u64) -> u64 {
    let mut x: u64 = 1;
    for _ in 0..iters {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an empty asm block that only claims to read and write `x`'s register.
        unsafe {
            std::arch::asm!("/* {0} */", inout(reg) x, options(nomem, nostack, preserves_flags));
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            x = std::hint::black_box(x);
        }
    }
    x
}

/// Iterations of [`spin`] that take about `seconds` here.
pub fn iterations_for(seconds: f64) -> u64 {
    let chunk = 1u64 << 22;
    let mut best = f64::INFINITY;
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < 0.05 {
        let t = Instant::now();
        std::hint::black_box(spin(chunk));
        best = best.min(t.elapsed().as_secs_f64() / chunk as f64);
    }
    ((seconds / best) as u64).max(1000)
}

/// Check the options before anything runs.
pub fn check_config(cfg: &CalibrateConfig) -> Result<()> {
    if cfg.repeats == 0 {
        return Err(MeasureError::Invalid("--repeats must be at least 1".into()));
    }
    if !(cfg.seconds > 0.0 && cfg.seconds <= 600.0) {
        return Err(MeasureError::Invalid(format!("--seconds must be between 0 and 600 (got {})", cfg.seconds)));
    }
    if cfg.periods.contains(&0) {
        return Err(MeasureError::Invalid("--periods must be greater than zero".into()));
    }
    if !cfg.spec.is_clock() && !cfg.spec.needs_hardware_pmu() {
        return Err(MeasureError::Invalid(format!(
            "cannot calibrate '{}': the busy loop only causes cpu-clock, task-clock and hardware events (cycles, instructions, ...)",
            cfg.spec.name
        )));
    }
    Ok(())
}

struct Design {
    period: u64,
    runs: Vec<ProfiledRun>,
}

/// Run the calibration experiment. `status` gets a short progress line before each run;
/// `stop` (Ctrl-C) ends it with [`MeasureError::Interrupted`].
pub fn calibrate(cfg: &CalibrateConfig, stop: &AtomicBool, status: &dyn Fn(&str)) -> Result<CalibrationReport> {
    check_config(cfg)?;
    let spec = &cfg.spec;
    let clock = spec.is_clock();
    let key = calibration::probe_machine();
    let mut periods: Vec<u64> = if !cfg.periods.is_empty() {
        cfg.periods.clone()
    } else if clock {
        CLOCK_PERIODS.to_vec()
    } else {
        COUNT_PERIODS.to_vec()
    };
    periods.sort_unstable_by(|a, b| b.cmp(a));
    periods.dedup();
    let load0 = run::loadavg();
    let workload = !cfg.command.is_empty();
    let (iters, spin_cmd) = if workload {
        tailprof_collect::target::resolve_command(&cfg.command[0])?;
        (0, cfg.command.clone())
    } else {
        let iters = iterations_for(cfg.seconds);
        (iters, run::spin_argv(iters)?)
    };
    let cpus = run::online_cpus();
    let (loop_cpu, rec_cpus) = if cfg.pin && cpus.len() > 1 {
        (cpus.last().copied(), Some(cpus[..cpus.len() - 1].to_vec()))
    } else {
        (cfg.pin.then(|| cpus[0]), None)
    };
    let place = Placement { cpu: loop_cpu, recorder_cpus: rec_cpus.as_deref(), show_output: false };
    let setup = |p: u64| ProfileSetup { spec: spec.clone(), period: Some(p), mmap_pages: cfg.mmap_pages };
    let scratch = Scratch::new()?;
    let mut base: Vec<Timed> = Vec::new();
    let mut designs: Vec<Design> = Vec::new();
    let mut notes = Vec::new();
    let busy_runs = std::cell::Cell::new(0usize);
    let gate = || {
        if !run::wait_idle(cfg.wait_idle_s) {
            busy_runs.set(busy_runs.get() + 1);
        }
    };
    let unprofiled = || -> Result<Timed> {
        gate();
        run::run_unprofiled(&scratch, loop_cpu, false, &spin_cmd)
    };
    let profiled = |p: u64| -> Result<ProfiledRun> {
        gate();
        run::run_profiled(&setup(p), &scratch, place, &spin_cmd, stop, None)
    };
    let check_stop = || -> Result<()> {
        if stop.load(Ordering::SeqCst) {
            return Err(MeasureError::Interrupted);
        }
        Ok(())
    };

    // Pilot pass, largest period first, to find where the slowdown gets out of hand:
    // before each period, predict its slowdown from α as estimated so far and skip it
    // (and everything shorter) when that exceeds MAX_SLOWDOWN.
    // The pilot judges slowdowns by the loop's CPU time, which other processes' load
    // does not inflate (on a busy machine wall time would skip periods for the load).
    status("calibrate: pilot, unprofiled");
    base.push(unprofiled()?);
    let t_base = base[0].time(Basis::Cpu);
    let mut alpha_est: Option<(f64, RateModel)> = None; // (ns per sample, how samples follow the period)
    for (i, &p) in periods.iter().enumerate() {
        check_stop()?;
        if let Some((a_ns, model)) = alpha_est {
            let predicted = slowdown_at(p, a_ns, model);
            if predicted > MAX_SLOWDOWN {
                notes.push(format!(
                    "periods from {} down skipped: at α ≈ {} they would slow the loop down {}",
                    period_text(p, clock),
                    ns_text(a_ns),
                    if predicted.is_finite() { format!("{predicted:.1}×") } else { "without bound (period ≤ α)".into() }
                ));
                break;
            }
        }
        status(&format!("calibrate: pilot, period {}", period_text(p, clock)));
        let r = profiled(p)?;
        if r.throttled > 0 {
            notes.push(format!(
                "periods from {} down skipped: the kernel throttled sampling (kernel.perf_event_max_sample_rate)",
                period_text(p, clock)
            ));
            break;
        }
        let t = r.timed.time(Basis::Cpu);
        if r.samples > 0 {
            let a_s = ((t - t_base) / r.samples as f64).max(0.0);
            // Counted events: events per second of the unprofiled run, from this run's
            // samples × period.
            let model = if clock { RateModel::Time } else { RateModel::Count { events_per_cpu_s: r.samples as f64 * p as f64 / t_base } };
            alpha_est = Some((a_s * 1e9, model));
        }
        designs.push(Design { period: p, runs: vec![r] });
        if t / t_base > MAX_SLOWDOWN && i + 1 < periods.len() {
            notes.push(format!(
                "periods below {} skipped: the busy loop already ran {:.1}× slower there",
                period_text(p, clock),
                t / t_base
            ));
            break;
        }
    }
    // The remaining repeats: every design point once per repeat, order rotated.
    let points_per_repeat = designs.len() + 1;
    for rep in 1..cfg.repeats {
        for k in 0..points_per_repeat {
            check_stop()?;
            let idx = (k + rep) % points_per_repeat;
            if idx == designs.len() {
                status(&format!("calibrate: repeat {}/{}, unprofiled", rep + 1, cfg.repeats));
                base.push(unprofiled()?);
            } else {
                let p = designs[idx].period;
                status(&format!("calibrate: repeat {}/{}, period {}", rep + 1, cfg.repeats, period_text(p, clock)));
                let r = profiled(p)?;
                designs[idx].runs.push(r);
            }
        }
    }
    let statuses = base.iter().map(|t| t.status).chain(designs.iter().flat_map(|d| d.runs.iter().map(|r| r.timed.status)));
    if let Some(st) = statuses.into_iter().find(|s| *s != 0) {
        return Err(MeasureError::CommandFailed(format!(
            "the {} failed with exit status {st}",
            if workload { "command" } else { "busy loop" }
        )));
    }

    if busy_runs.get() > 0 {
        notes.push(format!("{} runs started while other processes kept the machine busy", busy_runs.get()));
    }
    let mut report = settle(cfg, key, load0, iters, &base, &designs, notes)?;
    if report.verdict.is_ok() && cfg.save && !workload {
        report.saved_to = Some(calibration::save(&report.machine, &report.calibration)?);
    }
    Ok(report)
}

/// [`summarize`], then, when the strict policy refuses the fit: the other basis when
/// `cfg.basis_fallback` and its fit is accepted, else the fit itself when it meets
/// [`LENIENT_POLICY`], with its wider interval said in the notes (saved with them).
/// Refused (verdict `Err`) only when neither works.
fn settle(
    cfg: &CalibrateConfig,
    key: MachineKey,
    load0: Option<f64>,
    iters: u64,
    base: &[Timed],
    designs: &[Design],
    notes: Vec<String>,
) -> Result<CalibrationReport> {
    let report = summarize(cfg, key.clone(), load0, iters, base, designs, notes.clone())?;
    let Err(why) = report.verdict.clone() else {
        return Ok(report);
    };
    let basis_name = |b: Basis| {
        if b == Basis::Wall {
            "wall-clock"
        } else {
            "CPU-time"
        }
    };
    if cfg.basis_fallback && report.other_fit.as_ref().is_some_and(|f| assess(f, &FitPolicy::default()).is_ok()) {
        let other = CalibrateConfig { basis: report.other_basis, ..cfg.clone() };
        let mut n = notes;
        n.push(format!(
            "the {} fit was refused ({}); the {} fit is used instead (other processes' load does not inflate it)",
            basis_name(cfg.basis),
            why.reason(),
            basis_name(report.other_basis)
        ));
        return summarize(&other, key, load0, iters, base, designs, n);
    }
    if assess(&report.fit, &LENIENT_POLICY).is_ok() {
        let (lo, hi) = report.fit.alpha_ci_ns();
        let mut r = report;
        let note = format!(
            "accepted with a wider interval than the ±{:.0}% target ({}): α = {} [{}, {}]; predictions from it are that uncertain; on an idle machine (or with --wait-idle 5 / --repeats 9) the interval narrows",
            FitPolicy::default().max_relative_half_width * 100.0,
            why.reason(),
            ns_text(r.fit.alpha_ns()),
            ns_text(lo),
            ns_text(hi)
        );
        r.notes.push(note.clone());
        r.calibration.notes.push(note);
        r.verdict = Ok(());
        return Ok(r);
    }
    Ok(report)
}

/// The fit, the table and what would be stored, from the runs.
fn summarize(
    cfg: &CalibrateConfig,
    key: MachineKey,
    load0: Option<f64>,
    iters: u64,
    base: &[Timed],
    designs: &[Design],
    mut notes: Vec<String>,
) -> Result<CalibrationReport> {
    let spec = &cfg.spec;
    let clock = spec.is_clock();
    let basis = cfg.basis;
    let workload = !cfg.command.is_empty();
    let points_in = |b: Basis| -> Vec<Point> {
        let mut pts: Vec<Point> = base.iter().map(|t| Point { group: 0, samples: 0.0, time_s: t.time(b) }).collect();
        for d in designs {
            for r in d.runs.iter().filter(|r| r.throttled == 0) {
                pts.push(Point { group: d.period, samples: r.samples as f64, time_s: r.timed.time(b) });
            }
        }
        pts
    };
    let points = points_in(basis);
    let other_basis = if basis == Basis::Wall { Basis::Cpu } else { Basis::Wall };
    let other_fit = fit_line(&points_in(other_basis));
    let throttled_runs = designs.iter().flat_map(|d| d.runs.iter()).filter(|r| r.throttled > 0).count();
    if throttled_runs > 0 {
        notes.push(format!("{throttled_runs} throttled runs left out of the fit"));
    }
    let all_runs: Vec<&ProfiledRun> = designs.iter().flat_map(|d| d.runs.iter()).collect();
    let total_samples: u64 = all_runs.iter().map(|r| r.samples).sum();
    if total_samples == 0 {
        return Err(MeasureError::Invalid(format!("the busy loop produced no '{}' samples at any period; nothing to fit", spec.name)));
    }
    let bytes_per_sample = Some(all_runs.iter().map(|r| r.bytes).sum::<u64>() as f64 / total_samples as f64);
    let recorder_cpu = Some(all_runs.iter().map(|r| r.recorder_cpu_s).sum::<f64>() * 1e9 / total_samples as f64);
    let base_med = median(&base.iter().map(|t| t.time(basis)).collect::<Vec<_>>()).unwrap_or(f64::NAN);

    let fit = fit_line(&points)
        .ok_or_else(|| MeasureError::Invalid("every run took the same number of samples; nothing to fit (try other --periods)".into()))?;
    let verdict = assess(&fit, &FitPolicy::default());
    let calibration = Calibration {
        version: CALIBRATION_VERSION,
        event: spec.name.clone(),
        cpu_model: key.cpu_model.clone(),
        kernel: key.kernel.clone(),
        online_cpus: key.online_cpus,
        basis,
        alpha_ns: fit.alpha_ns(),
        alpha_ci_ns: fit.alpha_ci_ns(),
        r2: fit.r2,
        intercept_s: fit.intercept_s,
        bytes_per_sample,
        recorder_cpu_ns_per_sample: recorder_cpu,
        periods: designs.iter().map(|d| d.period).collect(),
        points: points.clone(),
        created_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        tailprof_version: env!("CARGO_PKG_VERSION").to_string(),
        loadavg: load0,
        notes: notes.clone(),
    };

    let mut rows = vec![PeriodRow {
        period: None,
        runs: base.len(),
        samples_median: Some(0.0),
        elapsed_median_s: base_med,
        overhead_pct: 0.0,
        throttled_runs: 0,
    }];
    rows.extend(designs.iter().map(|d| {
        let el = median(&d.runs.iter().map(|r| r.timed.time(basis)).collect::<Vec<_>>()).unwrap_or(f64::NAN);
        PeriodRow {
            period: Some(d.period),
            runs: d.runs.len(),
            samples_median: median(&d.runs.iter().map(|r| r.samples as f64).collect::<Vec<_>>()),
            elapsed_median_s: el,
            overhead_pct: (el / base_med - 1.0) * 100.0,
            throttled_runs: d.runs.iter().filter(|r| r.throttled > 0).count(),
        }
    }));
    Ok(CalibrationReport {
        event: spec.name.clone(),
        clock,
        machine: key,
        loadavg: load0,
        iterations: iters,
        workload: workload.then(|| cfg.command.clone()),
        repeats: cfg.repeats,
        basis,
        fit,
        other_basis,
        other_fit,
        verdict,
        rows,
        points,
        bytes_per_sample,
        recorder_cpu_ns_per_sample: recorder_cpu,
        calibration,
        saved_to: None,
        save_disabled: !cfg.save,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_is_deterministic() {
        assert_eq!(spin(3), spin(3));
        assert_ne!(spin(3), spin(4));
    }

    fn config() -> CalibrateConfig {
        CalibrateConfig {
            spec: EventSpec::parse("cpu-clock").unwrap(),
            repeats: 3,
            seconds: 0.5,
            periods: vec![],
            basis: Basis::Cpu,
            basis_fallback: false,
            wait_idle_s: 0.0,
            pin: false,
            mmap_pages: 128,
            save: true,
            command: vec![],
        }
    }

    fn run(time: f64, samples: u64, throttled: u64) -> ProfiledRun {
        ProfiledRun {
            timed: Timed { elapsed_s: time * 2.0, cpu_s: time, status: 0 },
            samples,
            lost: 0,
            throttled,
            bytes: 3 * samples,
            recorder_cpu_s: 2e-6 * samples as f64,
            recorder_wall_s: time,
        }
    }

    #[test]
    fn runs_become_a_fit_a_table_and_a_calibration() {
        // CPU time = 0.5 s + 10 µs per sample, three repeats with a little noise; one
        // throttled run, which the fit leaves out.
        let key = MachineKey { cpu_model: "cpu".into(), kernel: "6.1".into(), online_cpus: 2 };
        let noise = [0.0, 1e-4, -1e-4];
        let base: Vec<Timed> = noise.iter().map(|n| Timed { elapsed_s: 1.0, cpu_s: 0.5 + n, status: 0 }).collect();
        let designs: Vec<Design> = [(1_000_000u64, 500u64), (200_000, 2_500), (50_000, 10_000)]
            .iter()
            .map(|&(p, n)| Design { period: p, runs: noise.iter().map(|e| run(0.5 + 10e-6 * n as f64 + e, n, 0)).collect() })
            .chain(std::iter::once(Design { period: 20_000, runs: vec![run(9.0, 25_000, 1)] }))
            .collect();
        let r = summarize(&config(), key.clone(), Some(0.5), 1000, &base, &designs, vec!["pilot".into()]).unwrap();
        assert!((r.fit.alpha_ns() - 10_000.0).abs() < 100.0, "{:?}", r.fit);
        assert!(r.verdict.is_ok(), "{:?}", r.verdict);
        assert_eq!(r.points.len(), 12, "throttled run left out");
        assert_eq!(r.rows.len(), 5);
        assert_eq!((r.rows[0].period, r.rows[0].runs, r.rows[0].overhead_pct), (None, 3, 0.0));
        assert_eq!(r.rows[3].samples_median, Some(10_000.0));
        assert!((r.rows[3].overhead_pct - 20.0).abs() < 0.1, "{:?}", r.rows[3]);
        assert_eq!(r.rows[4].throttled_runs, 1);
        assert_eq!(r.notes, vec!["pilot".to_string(), "1 throttled runs left out of the fit".to_string()]);
        assert_eq!(r.bytes_per_sample, Some(3.0));
        assert_eq!(r.other_basis, Basis::Wall);
        assert_eq!(r.saved_to, None, "summarize never saves");
        let c = &r.calibration;
        assert_eq!((c.alpha_ns, c.basis, c.periods.len(), &c.cpu_model), (r.fit.alpha_ns(), Basis::Cpu, 4, &key.cpu_model));
        assert!(crate::calibration::validate(c, "cpu-clock").is_ok());
    }

    /// CPU time 0.5 s + 10 µs per sample at `periods`, each run's wall time inflated by
    /// `wall_noise[i]` of another process's load.
    fn busy_runs(periods: &[(u64, u64)], wall_noise: &[f64], cpu_noise: &[f64]) -> (Vec<Timed>, Vec<Design>) {
        let t = |cpu: f64, i: usize| Timed { elapsed_s: cpu * (1.0 + wall_noise[i % wall_noise.len()]), cpu_s: cpu, status: 0 };
        let base: Vec<Timed> = cpu_noise.iter().enumerate().map(|(i, e)| t(0.5 + e, i)).collect();
        let designs = periods
            .iter()
            .enumerate()
            .map(|(k, &(p, n))| Design {
                period: p,
                runs: cpu_noise
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let mut r = run(0.5 + 10e-6 * n as f64 + e, n, 0);
                        r.timed = t(r.timed.cpu_s, i + 3 * (k + 1));
                        r
                    })
                    .collect(),
            })
            .collect();
        (base, designs)
    }

    #[test]
    fn busy_machine_wall_fit_refused_falls_back_to_cpu_time() {
        // Issue 18: `tailprof calibrate` exited 3 on a busy machine and saved nothing.
        let key = MachineKey { cpu_model: "cpu".into(), kernel: "6.1".into(), online_cpus: 2 };
        let wall = [0.0, 0.9, 0.1, 1.5, 0.05, 0.7, 0.3, 1.1];
        let (base, designs) = busy_runs(&[(1_000_000, 500), (200_000, 2_500), (50_000, 10_000)], &wall, &[0.0, 1e-4, -1e-4]);
        let cfg = CalibrateConfig { basis: Basis::Wall, basis_fallback: true, ..config() };
        let strict = summarize(&cfg, key.clone(), None, 1000, &base, &designs, vec![]).unwrap();
        assert!(strict.verdict.is_err(), "the wall fit should be refused here: {:?}", strict.fit);
        let r = settle(&cfg, key.clone(), None, 1000, &base, &designs, vec![]).unwrap();
        assert!(r.verdict.is_ok(), "{:?}", r.verdict);
        assert_eq!((r.basis, r.calibration.basis), (Basis::Cpu, Basis::Cpu));
        assert!((r.fit.alpha_ns() - 10_000.0).abs() < 200.0, "{:?}", r.fit);
        assert!(r.notes.iter().any(|n| n.contains("wall-clock fit was refused")), "{:?}", r.notes);
        // With --basis wall given, no fallback: refused as before.
        let fixed = CalibrateConfig { basis_fallback: false, ..cfg };
        assert!(settle(&fixed, key, None, 1000, &base, &designs, vec![]).unwrap().verdict.is_err());
    }

    #[test]
    fn noisy_but_clear_fit_is_saved_with_its_wider_interval_said() {
        // Two design points only (the pilot skipped the rest) and noisy CPU times: the
        // strict policy wants 3; the cost is still clearly above zero.
        let key = MachineKey { cpu_model: "cpu".into(), kernel: "6.1".into(), online_cpus: 2 };
        let (base, designs) = busy_runs(&[(50_000, 10_000)], &[0.0], &[0.0, 0.004, -0.004, 0.002, -0.002]);
        let cfg = CalibrateConfig { basis: Basis::Cpu, basis_fallback: true, ..config() };
        let strict = summarize(&cfg, key.clone(), None, 1000, &base, &designs, vec![]).unwrap();
        assert!(matches!(strict.verdict, Err(tailprof_analyze::overhead::Refusal::TooFewPoints { .. })), "{:?}", strict.verdict);
        let r = settle(&cfg, key.clone(), None, 1000, &base, &designs, vec![]).unwrap();
        assert!(r.verdict.is_ok(), "{:?}", r.verdict);
        assert!(r.notes.iter().any(|n| n.contains("wider interval")), "{:?}", r.notes);
        assert_eq!(r.calibration.notes, r.notes, "the note is saved with the calibration");
        // No detectable cost is still refused.
        let (base, designs) = busy_runs(&[(50_000, 10)], &[0.0], &[0.0, 0.004, -0.004, 0.002, -0.002]);
        assert!(settle(&cfg, key, None, 1000, &base, &designs, vec![]).unwrap().verdict.is_err());
    }

    #[test]
    fn no_samples_or_one_sample_count_cannot_be_fitted() {
        let key = MachineKey { cpu_model: "cpu".into(), kernel: "6.1".into(), online_cpus: 2 };
        let base = vec![Timed { elapsed_s: 1.0, cpu_s: 1.0, status: 0 }];
        let none = vec![Design { period: 1_000_000, runs: vec![run(1.0, 0, 0)] }];
        let e = summarize(&config(), key, None, 0, &base, &none, vec![]).unwrap_err().to_string();
        assert!(e.contains("no 'cpu-clock' samples"), "{e}");
    }

    #[test]
    fn pilot_skips_use_the_one_slowdown_model() {
        // α = 12 µs: 20 µs slows the loop 2.5× (skipped), 50 µs 1.3× (kept).
        assert!(slowdown_at(20_000, 12_000.0, RateModel::Time) > MAX_SLOWDOWN);
        assert!(slowdown_at(50_000, 12_000.0, RateModel::Time) < MAX_SLOWDOWN);
        assert_eq!(slowdown_at(10_000, 12_000.0, RateModel::Time), f64::INFINITY);
    }

    #[test]
    fn bad_options_are_refused_before_running() {
        let cfg = CalibrateConfig {
            spec: EventSpec::parse("cpu-clock").unwrap(),
            repeats: 0,
            seconds: 0.5,
            periods: vec![],
            basis: Basis::Wall,
            basis_fallback: true,
            wait_idle_s: 0.0,
            pin: false,
            mmap_pages: 128,
            save: false,
            command: vec![],
        };
        assert!(check_config(&cfg).unwrap_err().to_string().contains("--repeats"));
        let c = CalibrateConfig { repeats: 1, seconds: 0.0, ..cfg.clone() };
        assert!(check_config(&c).unwrap_err().to_string().contains("--seconds"));
        let c = CalibrateConfig { repeats: 1, periods: vec![0], ..cfg.clone() };
        assert!(check_config(&c).unwrap_err().to_string().contains("--periods"));
        let c = CalibrateConfig { repeats: 1, spec: EventSpec::parse("page-faults").unwrap(), ..cfg };
        assert!(check_config(&c).unwrap_err().to_string().contains("cannot calibrate 'page-faults'"));
    }
}
