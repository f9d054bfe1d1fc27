//! `tailprof import`: convert a `perf record` perf.data file into a tailprof trace.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::ui;

/// Convert a perf.data file (from `perf record`, including PEBS recordings) into a
/// tailprof trace, keeping addresses, weights, data sources, registers, lost-sample and
/// throttle records, side-band records and build-ids.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  perf record -e cycles:pp -c 20003 -o perf.data -- ./app\n  tailprof import perf.data -o app.trace\n  tailprof report app.trace"
)]
pub struct ImportArgs {
    /// The perf.data file to convert (file or pipe mode, zstd-compressed records too).
    #[arg(value_name = "PERF_DATA")]
    input: PathBuf,

    /// Output trace file.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

pub fn run(args: ImportArgs) -> Result<ExitCode> {
    let opts = tailprof_import::ImportOptions::default();
    let show = ui::stderr_is_tty();
    let mut last = std::time::Instant::now();
    let mut progress = |done: u64, total: u64| {
        if show && last.elapsed().as_millis() >= 300 && total > 0 {
            last = std::time::Instant::now();
            eprint!("\r\x1b[Ktailprof: importing {:.0}%", 100.0 * done as f64 / total as f64);
        }
    };
    let summary = tailprof_import::import_file(&args.input, &args.output, &opts, &mut progress)
        .with_context(|| format!("cannot import {}", args.input.display()))?;
    if show {
        eprint!("\r\x1b[K");
    }
    let out_bytes = std::fs::metadata(&args.output).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "tailprof: imported {} samples, {} side-band records, lost records {}, lost samples {}, throttle records {} -> {} ({})",
        ui::thousands(summary.samples),
        ui::thousands(summary.side_band),
        ui::thousands(summary.lost_records),
        ui::thousands(summary.lost_samples),
        ui::thousands(summary.throttles),
        args.output.display(),
        ui::bytes(out_bytes)
    );
    if summary.switches > 0 || summary.wakeups > 0 {
        eprintln!("tailprof: context switches {}, wakeups {}", ui::thousands(summary.switches), ui::thousands(summary.wakeups));
    }
    if summary.jit_names > 0 || summary.skipped_jit_names > 0 {
        eprintln!(
            "tailprof: JIT names {} from the recorded processes' /tmp/perf-PID.map, skipped {}",
            ui::thousands(summary.jit_names),
            ui::thousands(summary.skipped_jit_names)
        );
    }
    if summary.skipped_records > 0 {
        let kinds: Vec<String> = summary.skipped_by_type.iter().map(|(k, v)| format!("{k} {v}")).collect();
        eprintln!("tailprof: note: {} records of kinds tailprof does not keep: {}", summary.skipped_records, kinds.join(", "));
    }
    for w in &summary.warnings {
        eprintln!("tailprof: warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
