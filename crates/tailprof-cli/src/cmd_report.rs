//! `tailprof report`: a flat profile of a trace, by function, binary or thread.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::{flat_profile, select_event, Granularity, GroupBy, ProfileOptions, Symbolizer};
use tailprof_format::losses::LossTable;
use tailprof_format::TraceReader;
use tailprof_present::{json, losses as present_losses, table};

/// The loss table of a trace (what `record` stored, plus what reading the file found):
/// the same rows for `info`, `report` and `items`.
pub(crate) fn trace_losses(reader: &mut TraceReader) -> Result<LossTable> {
    let (read, stats, _) = reader.summarize()?;
    Ok(LossTable::new(&stats, Some(&read)))
}

/// Append the loss block (after a blank line) to text output, when there is one.
pub(crate) fn append_losses(out: &mut String, losses: &LossTable) {
    present_losses::append_losses(out, losses);
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum By {
    Function,
    Binary,
    Thread,
    /// Whole call stacks (traces recorded with -g / --call-graph)
    Stack,
}

/// Print a flat profile: samples and percentages per function (default), binary or thread.
///
/// Symbols come from the binaries' ELF symbol tables and DWARF where present (C++ and Rust
/// names demangled); binaries are found by the paths recorded in the trace, checked
/// against their build-ids. Kernel samples show as `[kernel]` unless /proc/kallsyms is
/// readable. Lost, throttled and truncated data are reported above the table.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tailprof report run.trace\n  tailprof report run.trace --by binary --top 10\n  tailprof report run.trace --lines\n  tailprof report run.trace --json | jq '.functions[0]'\n  tailprof report run.trace --by stack --slow\n  tailprof report run.trace --folded | inferno-flamegraph > flame.svg\n  tailprof report run.trace --off-cpu --item 17"
)]
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

    /// Rows per (function, source line) instead of per function, like perf's
    /// `--sort sym,srcline` and pprof's `-lines`: the `file:line` of the samples'
    /// addresses, from DWARF line tables for native code and jitdump DEBUG_INFO line
    /// tables for JIT code (text and --json; --by function only, not with --by
    /// stack/--folded/--off-cpu/--causes or the item filters). Without it a row is a
    /// function and its source is the function's first line.
    #[arg(long)]
    lines: bool,

    /// Event to report, by name or index, when the trace has several (default: the first).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    event: Option<String>,

    /// Print JSON (every field in docs/JSON.md): {"schema_version", "samples": N,
    /// "functions": [{"name", "binary", "samples", "percent"}, ...]}
    /// (`binaries` / `threads` with --by binary / thread; with --by stack:
    /// {"samples": N, "stacks": [{"frames": ["root", ..., "leaf"], "samples": N, "complete": true}],
    /// "statuses": {"complete": N, ...}}).
    #[arg(long)]
    json: bool,

    /// Print folded stacks ("root;caller;leaf COUNT" per line), the input of flamegraph.pl,
    /// inferno-flamegraph and speedscope. With --off-cpu: off-CPU nanoseconds, the state
    /// ([blocked] / [runnable]) as the root frame.
    #[arg(long, conflicts_with = "json")]
    folded: bool,

    /// Off-CPU time of the trace from its context switches: blocked (asleep in the kernel)
    /// and runnable (preempted), by the function threads waited in and by stack.
    #[arg(long)]
    off_cpu: bool,

    /// Who held requests up, over the whole trace (traces with wakeups: record with
    /// --off-cpu): per process, thread and item class, the blocked time of items their
    /// wakeups ended and the runnable time of items while they ran on the items' CPU,
    /// largest first. With --json: {"processes": [{"pid", "tid", "comm", "class",
    /// "blocked_ns", "runnable_ns", "total_ns", "items"}], "threads": [...], "classes": [...]}.
    #[arg(long, conflicts_with_all = ["folded", "off_cpu"])]
    causes: bool,

    /// Only samples (and off-CPU time) inside this item; repeatable.
    #[arg(long = "item", value_name = "ID")]
    items: Vec<u64>,

    /// Only samples inside items of this class.
    #[arg(long, value_name = "CLASS")]
    class: Option<String>,

    /// Only samples inside some item.
    #[arg(long)]
    in_items: bool,

    /// Only samples inside items flagged slow (see `tailprof items`).
    #[arg(long)]
    slow: bool,

    /// Directory of separate debug files, searched before /usr/lib/debug: by build-id
    /// (DIR/.build-id/ab/cdef….debug, DIR/ab/cdef…) and by .gnu_debuglink name;
    /// repeatable. DEBUGINFOD_URLS (http://) is used when set. See docs/SYMBOLS.md.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

/// Stack, off-CPU, folded and filtered views: one stack profile (after an items pass
/// when a filter needs items).
fn run_stacks(args: &ReportArgs, mut reader: TraceReader, event: u16, top: Option<usize>) -> Result<String> {
    use tailprof_analyze::stacks::{stack_report, StackFilter, StackOptions};
    use tailprof_present::stacks as view;
    let filter = StackFilter { items: args.items.clone(), class: args.class.clone(), in_items: args.in_items, slow: args.slow };
    let opts = StackOptions { event: Some(event), filter, timeline: false, ..Default::default() };
    let mut symbolizer = symbolizer();
    let (_, p) =
        stack_report(&mut reader, &opts, false, &mut symbolizer).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let json = |v: serde_json::Value| -> Result<String> { Ok(tailprof_present::json::document(&v)? + "\n") };
    Ok(match (args.off_cpu, args.folded, args.json) {
        (true, true, _) => view::folded_off_cpu(&p),
        (true, _, true) => json(view::off_cpu_json(&p, top))?,
        (true, _, _) => view::render_off_cpu(&p, top),
        (_, true, _) => view::folded(&p),
        _ if matches!(args.by, By::Stack) && args.json => json(view::stacks_json(&p, top))?,
        _ if matches!(args.by, By::Stack) => view::render_stacks(&p, top),
        _ if args.json => json(view::flat_json(&p, top))?,
        _ => view::render_flat(&p, top),
    })
}

/// `--causes`: the items and their causes (one stack pass), summed by whom.
fn run_causes(args: &ReportArgs, mut reader: TraceReader, event: u16, top: Option<usize>) -> Result<String> {
    use tailprof_analyze::stacks::{stack_report, StackFilter, StackOptions};
    let opts = StackOptions { event: Some(event), filter: StackFilter::default(), timeline: false, ..Default::default() };
    let mut symbolizer = symbolizer();
    let (items, p) =
        stack_report(&mut reader, &opts, true, &mut symbolizer).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let items = items.context("no items in this trace")?;
    let x = tailprof_analyze::causes::interference(&items, &p);
    Ok(if args.json { tailprof_present::items::interference_json(&x)? } else { tailprof_present::items::render_interference(&x, top) })
}

/// `--debug-dir` of the running command (set once by its `run`).
static DEBUG_DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();

/// Remember the command's `--debug-dir`s for [`symbolizer`].
pub(crate) fn set_debug_dirs(dirs: &[PathBuf]) {
    let _ = DEBUG_DIRS.set(dirs.to_vec());
}

/// The analysis commands' symbolizer: `--debug-dir`s first, then the system debug
/// directories, then debuginfod when `DEBUGINFOD_URLS` is set (docs/SYMBOLS.md).
pub(crate) fn symbolizer() -> Symbolizer {
    let (s, note) = Symbolizer::with_debug_dirs(DEBUG_DIRS.get().map(Vec::as_slice).unwrap_or(&[]));
    if let Some(n) = note {
        eprintln!("tailprof: note: {n}");
    }
    s
}

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    set_debug_dirs(&args.debug_dir);
    let mut reader = TraceReader::open(&args.trace).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let event = select_event(reader.header(), args.event.as_deref())?;
    let filtered = !args.items.is_empty() || args.class.is_some() || args.in_items || args.slow;
    if args.lines && (!matches!(args.by, By::Function) || args.folded || args.off_cpu || args.causes || filtered) {
        anyhow::bail!("--lines shows the flat profile by function and line: it does not combine with --by binary/thread/stack, --folded, --off-cpu, --causes or --item/--class/--in-items/--slow");
    }
    if args.causes {
        let top = if args.top == 0 { None } else { Some(args.top) };
        let out = run_causes(&args, reader, event, top)?;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if matches!(args.by, By::Stack) || args.folded || args.off_cpu || filtered {
        if filtered && matches!(args.by, By::Binary | By::Thread) {
            anyhow::bail!("--item/--class/--in-items/--slow work with --by function or --by stack, not --by binary/thread");
        }
        if (args.folded || args.off_cpu) && matches!(args.by, By::Binary | By::Thread) {
            anyhow::bail!("--folded and --off-cpu show functions and stacks: they do not combine with --by binary/thread");
        }
        let top = if args.top == 0 { None } else { Some(args.top) };
        let out = run_stacks(&args, reader, event, top)?;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let opts = ProfileOptions {
        by: match args.by {
            By::Function => GroupBy::Function,
            By::Binary => GroupBy::Binary,
            By::Thread => GroupBy::Thread,
            By::Stack => GroupBy::Function, // handled by run_stacks above
        },
        event: Some(event),
        granularity: if args.lines { Granularity::Line } else { Granularity::Function },
    };
    let mut symbolizer = symbolizer();
    let profile = flat_profile(&mut reader, &opts, &mut symbolizer).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let top = if args.top == 0 { None } else { Some(args.top) };
    let losses = trace_losses(&mut reader).with_context(|| format!("cannot read {}", args.trace.display()))?;
    let out = if args.json {
        let mut s = present_losses::document_with_losses(&json::profile_json(&profile, top)?, &losses)?;
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
