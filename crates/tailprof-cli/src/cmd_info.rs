//! `tailprof info`: what a trace holds and how healthy it is.

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::trace_info;
use tailprof_format::TraceReader;
use tailprof_present::{json, losses as present_losses, table};

use crate::cmd_report::{append_losses, trace_losses};

/// Describe a trace: events and periods, clock, duration, samples, lost and throttled
/// records, chunks, bytes, bytes per sample, and damaged or cut-off data.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  tailprof info run.trace\n  tailprof info run.trace --json")]
pub struct InfoArgs {
    /// The trace file.
    #[arg(value_name = "TRACE")]
    trace: PathBuf,

    /// Also decode every record (per-event sample counts, processes and threads seen).
    #[arg(long)]
    full: bool,

    /// Print JSON (keys include samples, lost, duration_ns, bytes, bytes_per_sample,
    /// truncated_bytes).
    #[arg(long)]
    json: bool,
}

pub fn run(args: InfoArgs) -> Result<ExitCode> {
    let ctx = || format!("cannot read {}", args.trace.display());
    let mut reader = TraceReader::open(&args.trace).with_context(ctx)?;
    let info = trace_info(&mut reader, args.full).with_context(ctx)?;
    let losses = trace_losses(&mut reader).with_context(ctx)?;
    let out = if args.json {
        let mut s = present_losses::with_losses_json(&json::info_json_string(&info)?, &losses)?;
        s.push('\n');
        s
    } else {
        let mut s = table::render_info(&info);
        if !s.ends_with('\n') {
            s.push('\n');
        }
        append_losses(&mut s, &losses);
        s
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
