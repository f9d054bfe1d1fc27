//! `tailprof calibrate`: measure α, the elapsed-time cost of one sample, on this machine.
//!
//! A built-in busy loop with no memory traffic (`tailprof __spin`) runs unprofiled and
//! profiled at a sweep of periods, every design point repeated and the order rotated
//! each repeat; elapsed time against samples is fitted with a Theil–Sen line
//! (tailprof_analyze::overhead::fit). A fit the noise does not support is refused with
//! the reason and what to do; an accepted one is saved per (CPU model, kernel, event)
//! for `plan` and `overhead`.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tailprof_analyze::overhead::stats::median;
use tailprof_analyze::overhead::{assess, fit_line, Basis, Calibration, FitPolicy, Point, CALIBRATION_VERSION};
use tailprof_collect::caps::Capabilities;
use tailprof_collect::event::{EventKind, EventSpec};

use crate::calibration::{self, MachineKey};
use crate::measure::{self, ProfileSetup, ProfiledRun, Scratch};
use crate::signals;

/// Periods swept for cpu-clock/task-clock (ns): 1 ms down to the kernel's 10 µs floor.
const CLOCK_PERIODS: [u64; 7] = [1_000_000, 500_000, 200_000, 100_000, 50_000, 20_000, 10_000];
/// Periods swept for counted events: the paper's 128K down to 2K.
const COUNT_PERIODS: [u64; 7] = [128_000, 64_000, 32_000, 16_000, 8_000, 4_000, 2_000];
/// Smaller periods are skipped once a run is (or is predicted to be) this many times
/// slower than unprofiled: closer to α, cpu-clock's timer is overdue after almost every
/// sample and the runs mostly measure the timer fighting the handler.
const MAX_SLOWDOWN: f64 = 2.0;
/// Exit code when the fit is refused.
pub const EXIT_REFUSED: u8 = 3;

/// Measure the cost of one sample (α) on this machine and save it for `plan` and
/// `overhead`.
///
/// Runs a built-in busy loop (no memory traffic) unprofiled and at a sweep of sampling
/// periods (cpu-clock: 1 ms down to 10 µs; hardware events: 128K down to 2K), each point
/// repeated with the order rotated, and fits elapsed time against the number of samples
/// with a robust (Theil–Sen) line. The slope is α, reported with a 95% interval and R².
/// When the noise does not support the fit (too few runs, an interval wider than ±25%
/// of α, more than 1 run in 5 far off the line, R² below 0.9) nothing is saved and the
/// exit status is 3. On a shared machine use --basis cpu and --wait-idle.
///
/// Saved to $TAILPROF_HOME/calibration/ (else $XDG_DATA_HOME/tailprof/calibration/,
/// else ~/.local/share/tailprof/calibration/), one file per CPU model, kernel and event.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof calibrate                       # cpu-clock, about a minute\n  \
    tailprof calibrate --repeats 9 --pin     # on a noisy machine\n  \
    tailprof calibrate -e instructions --json")]
pub struct CalibrateArgs {
    /// Event to calibrate.
    #[arg(short = 'e', long = "event", value_name = "EVENT", default_value = "cpu-clock")]
    event: String,

    /// Runs per design point (unprofiled and each period).
    #[arg(long, value_name = "N", default_value_t = 5)]
    repeats: usize,

    /// Unprofiled duration of one busy-loop run.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5)]
    seconds: f64,

    /// Periods to sweep, comma-separated (default: see above).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    periods: Vec<u64>,

    /// Time to fit: `wall` (elapsed, as in the paper) or `cpu` (the loop's CPU time,
    /// which other processes' load does not inflate; use it on a shared machine).
    #[arg(long, value_enum, default_value = "wall")]
    basis: BasisArg,

    /// Before each run, wait up to this many seconds for the machine to be idle (other
    /// processes using under 15% of the CPUs); 0: do not wait.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    wait_idle: f64,

    /// Pin the busy loop to one CPU and the recorder to the others.
    #[arg(long)]
    pin: bool,

    /// Data pages per CPU ring buffer.
    #[arg(long, value_name = "N", default_value_t = 128)]
    mmap_pages: usize,

    /// Do not save the result.
    #[arg(long)]
    no_save: bool,

    /// Print JSON.
    #[arg(long)]
    json: bool,

    /// Calibrate on this command instead of the busy loop (after `--`): α for that
    /// workload, including its cache effects. Printed, never saved.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BasisArg {
    Wall,
    Cpu,
}

impl From<BasisArg> for Basis {
    fn from(b: BasisArg) -> Basis {
        match b {
            BasisArg::Wall => Basis::Wall,
            BasisArg::Cpu => Basis::Cpu,
        }
    }
}

/// A run's time in `basis`.
pub fn basis_time(t: &measure::Timed, basis: Basis) -> f64 {
    match basis {
        Basis::Wall => t.elapsed_s,
        Basis::Cpu => t.cpu_s,
    }
}

/// True for cpu-clock and task-clock, whose period is in nanoseconds of run time.
pub fn is_clock_event(spec: &EventSpec) -> bool {
    // PERF_COUNT_SW_CPU_CLOCK = 0, PERF_COUNT_SW_TASK_CLOCK = 1.
    spec.kind == EventKind::Software && spec.config <= 1
}

/// A period for people: "250 µs" for clock events, "32000" otherwise.
pub fn period_text(period: u64, clock: bool) -> String {
    if !clock {
        return period.to_string();
    }
    if period >= 1_000_000 && period % 1_000_000 == 0 {
        format!("{} ms", period / 1_000_000)
    } else if period >= 1000 {
        format!("{} µs", period as f64 / 1000.0)
    } else {
        format!("{period} ns")
    }
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

/// Hidden helper: run the busy loop.
#[derive(Args, Debug)]
pub struct SpinArgs {
    #[arg(long, value_name = "N")]
    iters: u64,
}

pub fn run_spin(args: SpinArgs) -> Result<ExitCode> {
    std::hint::black_box(spin(args.iters));
    Ok(ExitCode::SUCCESS)
}

/// Iterations of [`spin`] that take about `seconds` here.
fn iterations_for(seconds: f64) -> u64 {
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

struct Design {
    period: u64,
    runs: Vec<ProfiledRun>,
}

pub fn run(args: CalibrateArgs) -> Result<ExitCode> {
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be between 0 and 600 (got {})", args.seconds);
    }
    if args.periods.contains(&0) {
        bail!("--periods must be greater than zero");
    }
    let spec = EventSpec::parse(&args.event)?;
    let clock = is_clock_event(&spec);
    if !clock && !spec.needs_hardware_pmu() {
        bail!(
            "cannot calibrate '{}': the busy loop only causes cpu-clock, task-clock and hardware events (cycles, instructions, ...)",
            spec.name
        );
    }
    let basis = Basis::from(args.basis);
    let caps = Capabilities::probe();
    let key = MachineKey::probe(&caps);
    let mut periods: Vec<u64> = if !args.periods.is_empty() {
        args.periods.clone()
    } else if clock {
        CLOCK_PERIODS.to_vec()
    } else {
        COUNT_PERIODS.to_vec()
    };
    periods.sort_unstable_by(|a, b| b.cmp(a));
    periods.dedup();
    signals::install().context("cannot install the Ctrl-C handler")?;
    let load0 = measure::loadavg();
    let workload = !args.command.is_empty();
    let (iters, spin_cmd) = if workload {
        tailprof_collect::target::resolve_command(&args.command[0])?;
        (0, args.command.clone())
    } else {
        let iters = iterations_for(args.seconds);
        let exe = std::env::current_exe().context("cannot find the tailprof executable")?;
        (iters, vec![exe.to_string_lossy().into_owned(), "__spin".into(), "--iters".into(), iters.to_string()])
    };
    let cpus = measure::online_cpus();
    let (loop_cpu, rec_cpus) = if args.pin && cpus.len() > 1 {
        (Some(*cpus.last().unwrap()), Some(cpus[..cpus.len() - 1].to_vec()))
    } else {
        (args.pin.then(|| cpus[0]), None)
    };
    let setup = |p: u64| ProfileSetup { spec: spec.clone(), period: Some(p), mmap_pages: args.mmap_pages };
    let scratch = Scratch::new()?;
    let mut base: Vec<measure::Timed> = Vec::new();
    let mut designs: Vec<Design> = Vec::new();
    let mut notes = Vec::new();
    let busy_runs = std::cell::Cell::new(0usize);
    let gate = || {
        if !measure::wait_idle(args.wait_idle) {
            busy_runs.set(busy_runs.get() + 1);
        }
    };
    let unprofiled = || -> Result<measure::Timed> {
        gate();
        measure::run_unprofiled(&scratch, loop_cpu, false, &spin_cmd)
    };
    let profiled = |p: u64| -> Result<ProfiledRun> {
        gate();
        measure::run_profiled(
            &setup(p),
            &scratch.file("trace"),
            &scratch.file("time"),
            loop_cpu,
            rec_cpus.as_deref(),
            false,
            &spin_cmd,
            &signals::STOP,
            None,
        )
    };
    let check_stop = || -> Result<()> {
        if signals::STOP.load(Ordering::SeqCst) {
            measure::clear_status();
            bail!("interrupted");
        }
        Ok(())
    };

    // Pilot pass, largest period first, to find where the slowdown gets out of hand:
    // before each period, predict its slowdown from α as estimated so far and skip it
    // (and everything shorter) when that exceeds MAX_SLOWDOWN.
    measure::status("calibrate: pilot, unprofiled");
    base.push(unprofiled()?);
    let t_base = basis_time(&base[0], basis);
    let mut alpha_est: Option<(f64, u64, u64)> = None; // (seconds per sample, samples, period)
    for (i, &p) in periods.iter().enumerate() {
        check_stop()?;
        if let Some((a, n_prev, p_prev)) = alpha_est {
            let predicted = if clock {
                if (p as f64) <= a * 1e9 { f64::INFINITY } else { 1.0 / (1.0 - a * 1e9 / p as f64) }
            } else {
                1.0 + a * n_prev as f64 * p_prev as f64 / p as f64 / t_base
            };
            if predicted > MAX_SLOWDOWN {
                notes.push(format!(
                    "periods from {} down skipped: at α ≈ {} they would slow the loop down {}",
                    period_text(p, clock),
                    calibration::ns(a * 1e9),
                    if predicted.is_finite() { format!("{predicted:.1}×") } else { "without bound (period ≤ α)".into() }
                ));
                break;
            }
        }
        measure::status(&format!("calibrate: pilot, period {}", period_text(p, clock)));
        let r = profiled(p)?;
        if r.throttled > 0 {
            notes.push(format!(
                "periods from {} down skipped: the kernel throttled sampling (kernel.perf_event_max_sample_rate)",
                period_text(p, clock)
            ));
            break;
        }
        let t = basis_time(&r.timed, basis);
        if r.samples > 0 {
            alpha_est = Some((((t - t_base) / r.samples as f64).max(0.0), r.samples, p));
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
    for rep in 1..args.repeats {
        for k in 0..points_per_repeat {
            check_stop()?;
            let idx = (k + rep) % points_per_repeat;
            if idx == designs.len() {
                measure::status(&format!("calibrate: repeat {}/{}, unprofiled", rep + 1, args.repeats));
                base.push(unprofiled()?);
            } else {
                let p = designs[idx].period;
                measure::status(&format!("calibrate: repeat {}/{}, period {}", rep + 1, args.repeats, period_text(p, clock)));
                let r = profiled(p)?;
                designs[idx].runs.push(r);
            }
        }
    }
    measure::clear_status();
    let statuses = base.iter().map(|t| t.status).chain(designs.iter().flat_map(|d| d.runs.iter().map(|r| r.timed.status)));
    if let Some(st) = statuses.into_iter().find(|s| *s != 0) {
        bail!("the {} failed with exit status {st}", if workload { "command" } else { "busy loop" });
    }

    let points_in = |b: Basis| -> Vec<Point> {
        let mut pts: Vec<Point> =
            base.iter().map(|t| Point { group: 0, samples: 0.0, time_s: basis_time(t, b) }).collect();
        for d in &designs {
            for r in d.runs.iter().filter(|r| r.throttled == 0) {
                pts.push(Point { group: d.period, samples: r.samples as f64, time_s: basis_time(&r.timed, b) });
            }
        }
        pts
    };
    let points = points_in(basis);
    let other_basis = if basis == Basis::Wall { Basis::Cpu } else { Basis::Wall };
    let other_fit = fit_line(&points_in(other_basis));
    let throttled_runs = designs.iter().flat_map(|d| d.runs.iter()).filter(|r| r.throttled > 0).count();
    if busy_runs.get() > 0 {
        notes.push(format!("{} runs started while other processes kept the machine busy", busy_runs.get()));
    }
    if throttled_runs > 0 {
        notes.push(format!("{throttled_runs} throttled runs left out of the fit"));
    }
    let all_runs: Vec<&ProfiledRun> = designs.iter().flat_map(|d| d.runs.iter()).collect();
    let total_samples: u64 = all_runs.iter().map(|r| r.samples).sum();
    if total_samples == 0 {
        bail!("the busy loop produced no '{}' samples at any period; nothing to fit", spec.name);
    }
    let bytes_per_sample = Some(all_runs.iter().map(|r| r.bytes).sum::<u64>() as f64 / total_samples as f64);
    let recorder_cpu = Some(all_runs.iter().map(|r| r.recorder_cpu_s).sum::<f64>() * 1e9 / total_samples as f64);
    let base_med = median(&base.iter().map(|t| basis_time(t, basis)).collect::<Vec<_>>()).unwrap_or(f64::NAN);

    let fit = fit_line(&points);
    let verdict = match &fit {
        Some(f) => assess(f, &FitPolicy::default()),
        None => bail!("every run took the same number of samples; nothing to fit (try other --periods)"),
    };
    let fit = fit.unwrap();
    let mut saved = None;
    let cal = Calibration {
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
    if verdict.is_ok() && !args.no_save && !workload {
        saved = Some(calibration::save(&key, &cal)?);
    }

    let rows: Vec<Value> = std::iter::once(json!({
        "period": Value::Null,
        "runs": base.len(),
        "samples_median": 0.0,
        "elapsed_median_s": base_med,
        "overhead_pct": 0.0,
        "throttled_runs": 0,
    }))
    .chain(designs.iter().map(|d| {
        let el = median(&d.runs.iter().map(|r| basis_time(&r.timed, basis)).collect::<Vec<_>>()).unwrap_or(f64::NAN);
        json!({
            "period": d.period,
            "runs": d.runs.len(),
            "samples_median": median(&d.runs.iter().map(|r| r.samples as f64).collect::<Vec<_>>()),
            "elapsed_median_s": el,
            "overhead_pct": (el / base_med - 1.0) * 100.0,
            "throttled_runs": d.runs.iter().filter(|r| r.throttled > 0).count(),
        })
    }))
    .collect();

    if args.json {
        let v = json!({
            "event": spec.name,
            "cpu_model": key.cpu_model,
            "kernel": key.kernel,
            "online_cpus": key.online_cpus,
            "loadavg": load0,
            "iterations": iters,
            "workload": if workload { Some(&args.command) } else { None },
            "repeats": args.repeats,
            "accepted": verdict.is_ok(),
            "reason": verdict.as_ref().err().map(|r| r.reason()),
            "advice": verdict.as_ref().err().map(|r| r.advice()),
            "basis": basis.name(),
            "alpha_ns": fit.alpha_ns(),
            "alpha_ci_ns": [fit.alpha_ci_ns().0, fit.alpha_ci_ns().1],
            "other_basis": {
                "basis": other_basis.name(),
                "alpha_ns": other_fit.as_ref().map(|f| f.alpha_ns()),
                "alpha_ci_ns": other_fit.as_ref().map(|f| [f.alpha_ci_ns().0, f.alpha_ci_ns().1]),
                "r2": other_fit.as_ref().map(|f| f.r2),
            },
            "r2": fit.r2,
            "r2_all": fit.r2_all,
            "outliers": fit.outliers,
            "intercept_s": fit.intercept_s,
            "bytes_per_sample": bytes_per_sample,
            "recorder_cpu_ns_per_sample": recorder_cpu,
            "method": "Theil-Sen slope over pairs of runs at different periods; 95% interval: stratified bootstrap (1000 replicates, runs resampled within each period)",
            "periods": rows,
            "points": points,
            "saved_to": saved.as_ref().map(|p| p.display().to_string()),
            "notes": notes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let what = if workload {
            format!("workload `{}`", args.command.join(" "))
        } else {
            format!("busy loop: {} iterations", crate::ui::thousands(iters))
        };
        print_text(&spec, clock, basis, &key, load0, &what, args.repeats, &rows, &fit, bytes_per_sample, recorder_cpu, &notes);
        if let Some(f) = &other_fit {
            let (lo, hi) = f.alpha_ci_ns();
            println!(
                "({} time basis: α = {} [{}, {}], R² = {:.4})",
                other_basis.name(),
                calibration::ns(f.alpha_ns()),
                calibration::ns(lo),
                calibration::ns(hi),
                f.r2
            );
        }
        match (&verdict, &saved) {
            (Ok(()), Some(p)) => println!("saved to {}", p.display()),
            (Ok(()), None) if workload => println!("not saved (workload calibrations never are; use it with --alpha)"),
            (Ok(()), None) => println!("not saved (--no-save)"),
            _ => {}
        }
    }
    if let Err(r) = verdict {
        let alt = if basis == Basis::Wall { " (or --basis cpu)" } else { "" };
        eprintln!("tailprof: error: calibration not saved: {}; {}{alt}", r.reason(), r.advice());
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
fn print_text(
    spec: &EventSpec,
    clock: bool,
    basis: Basis,
    key: &MachineKey,
    load: Option<f64>,
    what: &str,
    repeats: usize,
    rows: &[Value],
    fit: &tailprof_analyze::overhead::LineFit,
    bps: Option<f64>,
    rec_ns: Option<f64>,
    notes: &[String],
) {
    println!(
        "calibrate {} on {}, Linux {}, {} CPUs{}",
        spec.name,
        key.cpu_model,
        key.kernel,
        key.online_cpus,
        load.map(|l| format!(" (load average {l:.2})")).unwrap_or_default()
    );
    println!("{what}, {repeats} runs per point, order rotated every repeat\n");
    let label = if basis == Basis::Wall { "elapsed" } else { "CPU time" };
    println!("  {:>12}  {:>5}  {:>12}  {:>10}  {:>9}", "period", "runs", "samples", label, "overhead");
    for r in rows {
        let period = match r["period"].as_u64() {
            Some(p) => period_text(p, clock),
            None => "unprofiled".into(),
        };
        println!(
            "  {:>12}  {:>5}  {:>12}  {:>8.3} s  {:>8.1}%{}",
            period,
            r["runs"],
            crate::ui::thousands(r["samples_median"].as_f64().unwrap_or(0.0) as u64),
            r["elapsed_median_s"].as_f64().unwrap_or(f64::NAN),
            r["overhead_pct"].as_f64().unwrap_or(f64::NAN),
            match r["throttled_runs"].as_u64() {
                Some(n) if n > 0 => format!("  ({n} throttled)"),
                _ => String::new(),
            }
        );
    }
    let (lo, hi) = fit.alpha_ci_ns();
    println!(
        "\nα = {} of {} time per sample, 95% interval [{}, {}] (Theil–Sen, stratified bootstrap); R² = {:.4}{}; intercept {:.3} s",
        calibration::ns(fit.alpha_ns()),
        basis.name(),
        calibration::ns(lo),
        calibration::ns(hi),
        fit.r2,
        if fit.outliers > 0 { format!(" ({} outlier runs left out; {:.4} with them)", fit.outliers, fit.r2_all) } else { String::new() },
        fit.intercept_s
    );
    if let (Some(b), Some(r)) = (bps, rec_ns) {
        println!("trace {b:.1} bytes/sample; recorder CPU {} per sample", calibration::ns(r));
    }
    for n in notes {
        println!("note: {n}");
    }
}
