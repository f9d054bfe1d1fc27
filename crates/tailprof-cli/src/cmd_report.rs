//! `tailprof report`: a flat profile of a trace, by function, binary or thread.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::{flat_profile, select_event, GroupBy, ProfileOptions, Symbolizer, SymbolizerOptions};
use tailprof_format::TraceReader;
use tailprof_format::losses::LossTable;
use tailprof_present::{json, losses as present_losses, table};

/// The loss table of a trace (what `record` stored, plus what reading the file found):
/// the same rows for `info`, `report` and `items`.
pub(crate) fn trace_losses(reader: &mut TraceReader) -> Result<LossTable> {
    let (read, stats, _) = reader.summarize()?;
    Ok(LossTable::new(&stats, Some(&read)))
}

/// Append the loss block (after a blank line) to text output, when there is one.
pub(crate) fn append_losses(out: &mut String, losses: &LossTable) {
    let block = present_losses::render_losses(losses);
    if !block.is_empty() {
        if !out.is_empty() && !out.ends_with("\n\n") {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str(&block);
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum By {
    Function,
    Binary,
    Thread,
}

/// Print a flat profile: samples and percentages per function (default), binary or thread.
///
/// Symbols come from the binaries' ELF symbol tables and DWARF where present (C++ and Rust
/// names demangled); binaries are found by the paths recorded in the trace, checked
/// against their build-ids. Kernel samples show as `[kernel]` unless /proc/kallsyms is
/// readable. Lost, throttled and truncated data are reported above the table.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  tailprof report run.trace\n  tailprof report run.trace --by binary --top 10\n  tailprof report run.trace --json | jq '.functions[0]'")]
pub struct ReportArgs {
    /// The trace file (from `tailprof record` or `tailprof import`).
    #[arg(value_name = "TRACE")]
    trace: PathBuf,

    /// What each row stands for.
    #[arg(long, value_enum, default_value = "function")]
    by: By,

    /// Show only the N largest rows (0: all).
    #[arg(long, value_name = "N", default_value_t = 50)]
    top: usize,

    /// Event to report, by name or index, when the trace has several (default: the first).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    event: Option<String>,

    /// Print JSON: {"samples": N, "functions": [{"name", "binary", "samples", "percent"}, ...]}
    /// (`binaries` / `threads` with --by binary / thread).
    #[arg(long)]
    json: bool,
}

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let mut reader = TraceReader::open(&args.trace).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let event = select_event(reader.header(), args.event.as_deref())?;
    let opts = ProfileOptions {
        by: match args.by {
            By::Function => GroupBy::Function,
            By::Binary => GroupBy::Binary,
            By::Thread => GroupBy::Thread,
        },
        event: Some(event),
    };
    let mut symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let profile = flat_profile(&mut reader, &opts, &mut symbolizer)
        .with_context(|| format!("cannot read {}", args.trace.display()))?;
    let top = if args.top == 0 { None } else { Some(args.top) };
    let losses = trace_losses(&mut reader).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let out = if args.json {
        let mut s = present_losses::with_losses_json(&json::profile_json_string(&profile, top)?, &losses)?;
        s.push('\n');
        s
    } else {
        let mut s = table::render_profile(&profile, &table::TableOptions { top, ..Default::default() });
        append_losses(&mut s, &losses);
        s
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
