//! `tailprof overhead`: measure what profiling costs a command, and check the
//! prediction `base + α × samples` against it (Akiyama & Hirofuchi's equation 1). The
//! experiment is `tailprof_measure::overhead`, the output `tailprof_present::overhead`.

use anyhow::{Context, Result};
use clap::Args;
use std::process::ExitCode;

use tailprof_collect::event::EventSpec;
use tailprof_measure::overhead::{check_config, measure_overhead, OverheadConfig};
use tailprof_present::overhead::{overhead_json, overhead_text};

use crate::{measure, signals};

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

pub fn run(args: OverheadArgs) -> Result<ExitCode> {
    let cfg = OverheadConfig {
        spec: EventSpec::parse(&args.event)?,
        period: args.period,
        runs: args.runs,
        warmup: args.warmup,
        instances: args.instances,
        pin: args.pin,
        wait_idle_s: args.wait_idle,
        alpha_ns: args.alpha,
        mmap_pages: args.mmap_pages,
        show_output: args.show_output,
        command: args.command,
    };
    check_config(&cfg)?;
    signals::install().context("cannot install the Ctrl-C handler")?;
    let report = measure_overhead(&cfg, &signals::STOP, &measure::status);
    measure::clear_status();
    let report = report?;
    if args.json {
        println!("{}", tailprof_present::json::document(&overhead_json(&report))?);
    } else {
        print!("{}", overhead_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}
