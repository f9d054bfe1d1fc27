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

    /// Also show, per binary the trace has a build-id for, where its function names come
    /// from (own .symtab, a separate debug file, .eh_frame ranges of a stripped binary);
    /// JSON key "symbols". See docs/SYMBOLS.md.
    #[arg(long)]
    symbols: bool,

    /// Directory of separate debug files for --symbols (as for `report --debug-dir`).
    #[arg(long = "debug-dir", value_name = "DIR", requires = "symbols")]
    debug_dir: Vec<PathBuf>,
}

pub fn run(args: InfoArgs) -> Result<ExitCode> {
    let ctx = || format!("cannot read {}", args.trace.display());
    let mut reader = TraceReader::open(&args.trace).with_context(ctx)?;
    let info = trace_info(&mut reader, args.full).with_context(ctx)?;
    let losses = trace_losses(&mut reader).with_context(ctx)?;
    let symbols = args.symbols.then(|| {
        crate::cmd_report::set_debug_dirs(&args.debug_dir);
        let mut sym = crate::cmd_report::symbolizer();
        let entries = reader.build_ids().to_vec();
        entries.iter().map(|e| sym.symbol_source(&e.path, Some(&e.build_id))).collect::<Vec<_>>()
    });
    let out = if args.json {
        let mut s = present_losses::document_with_losses(&json::info_json(&info)?, &losses)?;
        if let Some(list) = &symbols {
            let mut v: serde_json::Value = serde_json::from_str(&s)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("symbols".into(), serde_json::to_value(list)?);
            }
            s = serde_json::to_string_pretty(&v)?;
        }
        s.push('\n');
        s
    } else {
        let mut s = table::render_info(&info);
        if !s.ends_with('\n') {
            s.push('\n');
        }
        append_losses(&mut s, &losses);
        if let Some(list) = &symbols {
            s.push_str("symbols:\n");
            for x in list {
                s.push_str(&format!("  {}: {}\n", x.binary, x.source));
                if let Some(d) = &x.debug_file {
                    s.push_str(&format!("      {d}\n"));
                }
            }
        }
        s
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
