//! `tailprof overhead`: measure what profiling costs a command, and check the
//! prediction `base + α × samples` against it (Akiyama & Hirofuchi's equation 1).

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Barrier;

use tailprof_analyze::overhead::predict::{parallelism, relative_error};
use tailprof_analyze::overhead::stats::median;
use tailprof_analyze::overhead::{overhead_estimate, predict_elapsed, OverheadEstimate};
use tailprof_collect::attr::{default_rate, Rate};
use tailprof_collect::caps::Capabilities;
use tailprof_collect::event::EventSpec;
use tailprof_collect::target::resolve_command;

use crate::calibration::{self, MachineKey};
use crate::cmd_calibrate::{is_clock_event, period_text};
use crate::measure::{self, ProfileSetup, ProfiledRun, Scratch, Timed};
use crate::{signals, ui};

/// Measure the overhead of profiling a command, and compare it with the prediction.
///
/// Runs CMD unprofiled and profiled (recorded like `tailprof record`, into a scratch
/// trace), interleaved N times each (the order alternates every pair), with CMD's
/// output on /dev/null. Prints the median elapsed and CPU times, the overhead with a
/// 95% interval (paired bootstrap over the interleaved pairs), the number of samples,
/// the predicted time `base + α × samples / threads` (α from `tailprof calibrate`, or
/// --alpha) and the relative error E = (measured − predicted) / predicted.
///
/// With --instances K, K copies run at once, each with its own recorder (--pin: copy i
/// on CPU i); times are per copy, averaged over the copies.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof overhead -c 100000 -- xz -6 -k -c data.txt\n  \
    tailprof overhead --runs 10 --json -- python3 script.py\n  \
    tailprof overhead --instances 2 --pin -- ./bench")]
pub struct OverheadArgs {
    /// Sampling period (ns for cpu-clock/task-clock). Default: the event's default rate.
    #[arg(short = 'c', long = "count", value_name = "PERIOD")]
    period: Option<u64>,

    /// Event to sample.
    #[arg(short = 'e', long = "event", value_name = "EVENT", default_value = "cpu-clock")]
    event: String,

    /// Interleaved pairs of runs (one unprofiled, one profiled each).
    #[arg(long, value_name = "N", default_value_t = 5)]
    runs: usize,

    /// Unprofiled runs first, not counted (warm caches and page cache).
    #[arg(long, value_name = "N", default_value_t = 1)]
    warmup: usize,

    /// Run K copies of CMD at once (each with its own recorder).
    #[arg(long, value_name = "K", default_value_t = 1)]
    instances: usize,

    /// Pin copy i to CPU i (with one copy: CMD on the last CPU, the recorder on the others).
    #[arg(long)]
    pin: bool,

    /// Before each pair, wait up to this many seconds for the machine to be idle (other
    /// processes using under 15% of the CPUs); 0: do not wait.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    wait_idle: f64,

    /// α in ns per sample, instead of the stored calibration.
    #[arg(long, value_name = "NS")]
    alpha: Option<f64>,

    /// Data pages per CPU ring buffer.
    #[arg(long, value_name = "N", default_value_t = 128)]
    mmap_pages: usize,

    /// Let CMD print to the terminal.
    #[arg(long)]
    show_output: bool,

    /// Print JSON: {"base_s", "profiled_s", "overhead_pct", "overhead_ci_pct", "samples",
    /// "alpha_ns", "predicted_s", "error_pct", ...}.
    #[arg(long)]
    json: bool,

    /// The command (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// One interleaved pair, all instances.
struct Pair {
    base: Vec<Timed>,
    prof: Vec<ProfiledRun>,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

pub fn run(args: OverheadArgs) -> Result<ExitCode> {
    if args.command.is_empty() {
        bail!("no command: give the command to measure after `--` (see `tailprof overhead --help`)");
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if args.instances == 0 {
        bail!("--instances must be at least 1");
    }
    if args.period == Some(0) {
        bail!("the sampling period (-c) must be greater than zero");
    }
    if args.mmap_pages == 0 || !args.mmap_pages.is_power_of_two() {
        bail!("--mmap-pages must be a power of two (got {})", args.mmap_pages);
    }
    resolve_command(&args.command[0])?;
    let spec = EventSpec::parse(&args.event)?;
    let clock = is_clock_event(&spec);
    let caps = Capabilities::probe();
    let key = MachineKey::probe(&caps);
    let alpha = calibration::alpha_for(&key, &spec.name, args.alpha)?;
    let period_desc = match (args.period, default_rate(&spec)) {
        (Some(p), _) => period_text(p, clock),
        (None, Rate::Period(p)) => format!("{} (default)", period_text(p, clock)),
        (None, Rate::Freq(f)) => format!("{f} Hz (default)"),
    };
    signals::install().context("cannot install the Ctrl-C handler")?;
    let load0 = measure::loadavg();

    let cpus = measure::online_cpus();
    let k = args.instances;
    let inst_cpu = |i: usize| -> Option<usize> {
        match (args.pin, k) {
            (false, _) => None,
            (true, 1) => cpus.last().copied(),
            (true, _) => Some(cpus[i % cpus.len()]),
        }
    };
    let rec_cpus: Option<Vec<usize>> = (args.pin && k == 1 && cpus.len() > 1).then(|| cpus[..cpus.len() - 1].to_vec());
    let setup = ProfileSetup { spec: spec.clone(), period: args.period, mmap_pages: args.mmap_pages };
    let scratch = Scratch::new()?;
    let cmd = &args.command;

    let unprofiled = || -> Result<Vec<Timed>> {
        let mut running = Vec::with_capacity(k);
        for i in 0..k {
            running.push(measure::spawn_unprofiled(&scratch, inst_cpu(i), args.show_output, cmd)?);
        }
        running.into_iter().map(|(c, out)| measure::wait_unprofiled(c, &out)).collect()
    };
    let profiled = || -> Result<Vec<ProfiledRun>> {
        if k == 1 {
            let r = measure::run_profiled(
                &setup,
                &scratch.file("trace"),
                &scratch.file("time"),
                inst_cpu(0),
                rec_cpus.as_deref(),
                args.show_output,
                cmd,
                &signals::STOP,
                None,
            )?;
            return Ok(vec![r]);
        }
        let barrier = Barrier::new(k);
        let files: Vec<_> = (0..k).map(|_| (scratch.file("trace"), scratch.file("time"))).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..k)
                .map(|i| {
                    let (setup, files, barrier) = (&setup, &files, &barrier);
                    s.spawn(move || {
                        measure::run_profiled(
                            setup,
                            &files[i].0,
                            &files[i].1,
                            inst_cpu(i),
                            None,
                            args.show_output,
                            cmd,
                            &signals::STOP,
                            Some(barrier),
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("recorder thread panicked")).collect()
        })
    };
    let check = |what: &str, i: usize, statuses: Vec<i32>| -> Result<()> {
        if signals::STOP.load(Ordering::SeqCst) {
            measure::clear_status();
            bail!("interrupted");
        }
        if let Some(st) = statuses.into_iter().find(|s| *s != 0) {
            measure::clear_status();
            bail!(
                "the command failed with exit status {st} ({what} run {}); `tailprof overhead` needs a command that succeeds (see its output with --show-output)",
                i + 1
            );
        }
        Ok(())
    };

    for w in 0..args.warmup {
        measure::status(&format!("overhead: warm-up {}/{}", w + 1, args.warmup));
        let t = unprofiled()?;
        check("warm-up", w, t.iter().map(|t| t.status).collect())?;
    }
    let mut pairs = Vec::with_capacity(args.runs);
    let mut busy_pairs = 0usize;
    for i in 0..args.runs {
        if args.wait_idle > 0.0 {
            measure::status(&format!("overhead: pair {}/{}, waiting for an idle machine", i + 1, args.runs));
            if !measure::wait_idle(args.wait_idle) {
                busy_pairs += 1;
            }
        }
        measure::status(&format!("overhead: pair {}/{}", i + 1, args.runs));
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
        pairs.push(Pair { base, prof });
    }
    measure::clear_status();

    // Per pair: times averaged over the instances (the CERN report sums them; the
    // ratio is the same), samples summed.
    let wall: Vec<(f64, f64)> = pairs
        .iter()
        .map(|p| (mean(p.base.iter().map(|t| t.elapsed_s)), mean(p.prof.iter().map(|r| r.timed.elapsed_s))))
        .collect();
    let cpu: Vec<(f64, f64)> = pairs
        .iter()
        .map(|p| (mean(p.base.iter().map(|t| t.cpu_s)), mean(p.prof.iter().map(|r| r.timed.cpu_s))))
        .collect();
    let est = overhead_estimate(&wall).expect("at least one run");
    let est_cpu = overhead_estimate(&cpu).expect("at least one run");
    let samples_runs: Vec<f64> = pairs.iter().map(|p| p.prof.iter().map(|r| r.samples as f64).sum()).collect();
    let samples = median(&samples_runs).unwrap_or(0.0);
    let per_instance = samples / k as f64;
    let threads = median(
        &pairs.iter().flat_map(|p| p.base.iter().map(|t| parallelism(t.cpu_s, t.elapsed_s, cpus.len()))).collect::<Vec<_>>(),
    )
    .unwrap_or(1.0);
    let all: Vec<&ProfiledRun> = pairs.iter().flat_map(|p| p.prof.iter()).collect();
    let lost: u64 = all.iter().map(|r| r.lost).sum();
    let throttled: u64 = all.iter().map(|r| r.throttled).sum();
    let total_samples: u64 = all.iter().map(|r| r.samples).sum();
    let per_sample = |v: f64| if total_samples > 0 { Some(v / total_samples as f64) } else { None };
    let bytes_per_sample = per_sample(all.iter().map(|r| r.bytes as f64).sum());
    let recorder_ns = per_sample(all.iter().map(|r| r.recorder_cpu_s * 1e9).sum());
    let fixed_s = median(&all.iter().map(|r| r.recorder_wall_s - r.timed.elapsed_s).collect::<Vec<_>>());

    let pred = alpha.as_ref().map(|a| {
        let wall_p = predict_elapsed(est.base_s, per_instance, a.alpha_ns, threads);
        let cpu_p = predict_elapsed(est_cpu.base_s, per_instance, a.alpha_ns, 1.0);
        (wall_p, relative_error(est.profiled_s, wall_p), cpu_p, relative_error(est_cpu.profiled_s, cpu_p))
    });
    // The per-sample cost this measurement implies (compare with the calibrated α: a
    // larger value means the command suffers more per sample than the busy loop, e.g.
    // from cache pollution).
    let implied = |d: f64, t: f64| if per_instance > 0.0 { Some(d * t / per_instance * 1e9) } else { None };
    let implied_wall = implied(est.profiled_s - est.base_s, threads);
    let implied_cpu = implied(est_cpu.profiled_s - est_cpu.base_s, 1.0);
    let cal_basis = alpha.as_ref().and_then(|a| a.calibration.as_ref()).map(|c| c.basis.name());

    if args.json {
        let side = |e: &OverheadEstimate, p: Option<(f64, f64)>| {
            json!({
                "base_s": e.base_s,
                "profiled_s": e.profiled_s,
                "overhead_pct": e.overhead_pct,
                "overhead_ci_pct": [e.ci_pct.0, e.ci_pct.1],
                "predicted_s": p.map(|p| p.0),
                "error_pct": p.map(|p| p.1 * 100.0),
            })
        };
        let mut v = side(&est, pred.map(|p| (p.0, p.1)));
        let o = v.as_object_mut().expect("object");
        let extra = json!({
            "samples": samples,
            "alpha_ns": alpha.as_ref().map(|a| a.alpha_ns),
            "alpha_ci_ns": alpha.as_ref().and_then(|a| a.ci_ns).map(|c| [c.0, c.1]),
            "alpha_source": alpha.as_ref().map(|a| a.describe()),
            "calibration_basis": cal_basis,
            "predicted_overhead_pct": pred.map(|p| (p.0 / est.base_s - 1.0) * 100.0),
            "implied_alpha_ns": implied_wall,
            "implied_alpha_cpu_ns": implied_cpu,
            "cpu": side(&est_cpu, pred.map(|p| (p.2, p.3))),
            "event": spec.name,
            "period": args.period,
            "period_desc": period_desc,
            "runs": args.runs,
            "instances": k,
            "pinned": args.pin,
            "threads": threads,
            "samples_per_instance": per_instance,
            "lost": lost,
            "throttled": throttled,
            "bytes_per_sample": bytes_per_sample,
            "recorder_cpu_ns_per_sample": recorder_ns,
            "recorder_fixed_s": fixed_s,
            "base_runs_s": wall.iter().map(|p| p.0).collect::<Vec<_>>(),
            "profiled_runs_s": wall.iter().map(|p| p.1).collect::<Vec<_>>(),
            "base_cpu_runs_s": cpu.iter().map(|p| p.0).collect::<Vec<_>>(),
            "profiled_cpu_runs_s": cpu.iter().map(|p| p.1).collect::<Vec<_>>(),
            "samples_runs": samples_runs,
            "loadavg": load0,
            "wait_idle_s": args.wait_idle,
            "pairs_started_busy": if args.wait_idle > 0.0 { Some(busy_pairs) } else { None },
            "command": cmd,
        });
        if let Value::Object(m) = extra {
            o.extend(m);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let copies = if k > 1 { format!(", {k} copies at once{}", if args.pin { " (pinned)" } else { "" }) } else { String::new() };
        println!(
            "overhead of sampling {} every {period_desc} on `{}`: {} interleaved runs{copies}",
            spec.name,
            cmd.join(" "),
            args.runs
        );
        let row = |name: &str, e: &OverheadEstimate| {
            println!(
                "  {name:<9} {:>9.3} s unprofiled  {:>9.3} s profiled  {:+7.2}%  95% [{:+.2}, {:+.2}]",
                e.base_s, e.profiled_s, e.overhead_pct, e.ci_pct.0, e.ci_pct.1
            )
        };
        row("elapsed", &est);
        row("CPU time", &est_cpu);
        println!(
            "  samples   {} per run{}{}; the command ran {threads:.2} threads at once",
            ui::thousands(samples as u64),
            if lost > 0 { format!(" ({} lost)", ui::thousands(lost)) } else { String::new() },
            if throttled > 0 { format!(" (throttled {throttled}×)") } else { String::new() }
        );
        match (&alpha, pred) {
            (Some(a), Some((wp, we, cp, ce))) => {
                println!("  α         {}", a.describe());
                println!(
                    "  predicted {wp:>9.3} s elapsed ({:+.2}%), E = {:+.2}%;  {cp:.3} s CPU, E = {:+.2}%",
                    (wp / est.base_s - 1.0) * 100.0,
                    we * 100.0,
                    ce * 100.0
                );
            }
            _ => println!("  predicted -  (no calibration for {}: run `tailprof calibrate -e {}`, or pass --alpha)", spec.name, spec.name),
        }
        if let (Some(w), Some(c)) = (implied_wall, implied_cpu) {
            println!("  implied   {} per sample from the elapsed times, {} from the CPU times", calibration::ns(w), calibration::ns(c));
        }
        if let (Some(b), Some(r), Some(f)) = (bytes_per_sample, recorder_ns, fixed_s) {
            println!(
                "  recorder  {b:.1} trace bytes and {} of its own CPU per sample; setup and final flush {:.0} ms (not in the times above)",
                calibration::ns(r),
                f * 1e3
            );
        }
        if busy_pairs > 0 {
            println!("  note: {busy_pairs} of {} pairs started while other processes kept the machine busy (waited {} s)", args.runs, args.wait_idle);
        }
        if load0.is_some_and(|l| l > cpus.len() as f64 * 0.5) {
            println!(
                "  note: load average {:.1} on {} CPUs: other processes compete for the CPUs; elapsed times are noisy, CPU times less so",
                load0.unwrap_or(0.0),
                cpus.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
