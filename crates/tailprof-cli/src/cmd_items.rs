//! `tailprof items`: per-item (request) durations and per-function time, slow items
//! flagged, and `--explain ID`.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tailprof_analyze::items::{document, Estimator, ItemSelection, ItemSort, ItemsOptions, ItemsQuery};
use tailprof_analyze::select_event;
use tailprof_format::TraceReader;
use tailprof_present::items as view;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SortBy {
    Duration,
    Anomaly,
    Id,
    Begin,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum EstimatorArg {
    /// samples x mean sample interval
    Count,
    /// last - first sample of the function in the item (the paper's estimator)
    Span,
}

/// List items (requests, queries, packets) with their duration and top functions.
///
/// Items come from markers (tailprof.h / the Rust or Python marker API, or
/// --item-begin/--item-end uprobes at record time) or, for traces recorded with
/// --item-reg, from the tagged register captured with each sample. Each sample is
/// attributed to the item open on its thread at its time. Per (item, function) both
/// estimates are computed (samples x mean interval, and the first-to-last span); the
/// table shows one (--estimator) and marks with ~ those resting on fewer than
/// --min-samples samples. Items much slower than the median of their class (by k x MAD)
/// are flagged SLOW with the functions responsible; --explain ID shows the detail.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  tailprof items run.trace\n  tailprof items run.trace --sort anomaly --top 10\n  tailprof items run.trace --explain 17\n  tailprof items run.trace --json | jq '.items[] | select(.anomalous) | .id'"
)]
pub struct ItemsArgs {
    /// The trace file (from `tailprof record`).
    #[arg(value_name = "TRACE", required_unless_present = "store")]
    trace: Option<PathBuf>,

    /// Instead of a trace: the slow requests `tailprof agent` retained in its store
    /// (`tailprof items --store DIR --since 1d`), with each class's latency.
    #[command(flatten)]
    store_range: crate::cmd_top::StoreRange,

    /// Print JSON (every field in docs/JSON.md): {"schema_version", "items": [{"id", "class", "duration_ns", "samples", "anomaly_score",
    /// "anomalous", "responsible", "functions": [{"name", "samples", "est_ns", "span_ns", ...}],
    /// "mem_bytes", "mem_gbps" (traces with an LLC-miss event), "woken_by", "preempted_by"
    /// (traces with wakeups: who woke the item and what the waker did meanwhile, who ran
    /// while it waited for a CPU; docs/JSON.md)}], "outside_samples": N, ...}
    #[arg(long)]
    json: bool,

    /// Show only the first N items after sorting (0: all).
    #[arg(long, value_name = "N", default_value_t = 50)]
    top: usize,

    /// Order of the items [default: duration].
    #[arg(long, value_enum)]
    sort: Option<SortBy>,

    /// Only items of this class.
    #[arg(long, value_name = "CLASS")]
    class: Option<String>,

    /// Explain one item: its per-function time beside its class's median item (with
    /// --store: the retained request with this item id, with its causes).
    #[arg(long, value_name = "ID")]
    explain: Option<u64>,

    /// Which per-function estimate to show [default: count].
    #[arg(long, value_enum)]
    estimator: Option<EstimatorArg>,

    /// Estimates resting on fewer samples are marked unreliable (~) [default: 5].
    #[arg(long, value_name = "N")]
    min_samples: Option<u64>,

    /// Flag items more than K robust standard deviations (1.4826 x MAD) above their class
    /// median [default: 3.5].
    #[arg(long, value_name = "K")]
    mad_k: Option<f64>,

    /// Sampling event, by name or index, when the trace has several (default: the first).
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    event: Option<String>,

    /// Directory of separate debug files, searched before /usr/lib/debug: by build-id
    /// (DIR/.build-id/ab/cdef….debug, DIR/ab/cdef…) and by .gnu_debuglink name;
    /// repeatable. DEBUGINFOD_URLS (http://) is used when set. See docs/SYMBOLS.md.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dir: Vec<PathBuf>,

    /// Only items flagged slow.
    #[arg(long)]
    slow: bool,

    /// Only this item; repeatable.
    #[arg(long = "item", value_name = "ID")]
    items: Vec<u64>,

    /// Only the items of this OpenTelemetry trace (32 hex digits as Jaeger or Tempo show
    /// it; items whose runtime wrote the trace context, docs/MARKERS.md). With --store:
    /// the retained slow requests of that trace.
    #[arg(long = "trace-id", value_name = "ID", value_parser = parse_trace_id_arg)]
    trace_id: Option<[u8; 16]>,
}

fn parse_trace_id_arg(s: &str) -> Result<[u8; 16], String> {
    tailprof_analyze::items::parse_trace_id(s).ok_or_else(|| format!("not a trace id: {s:?} (up to 32 hex digits, not all zero)"))
}

/// Flags that apply to one source only, given with the other: an error that says why
/// (issue 18: they used to be ignored silently).
fn check_source_flags(args: &ItemsArgs) -> Result<()> {
    let r = &args.store_range;
    if let Some(trace) = &args.trace {
        let store_flags: Vec<&str> = [
            (r.store.is_some(), "--store"),
            (r.since.is_some(), "--since"),
            (r.from.is_some(), "--from"),
            (r.to.is_some(), "--to"),
            (r.host.is_some(), "--host"),
        ]
        .into_iter()
        .filter_map(|(given, f)| given.then_some(f))
        .collect();
        if !store_flags.is_empty() {
            anyhow::bail!(
                "{}: only for the agent's store, not a trace: give either {} or --store DIR (with --since/--from/--to/--host)",
                store_flags.join(", "),
                trace.display()
            );
        }
        return Ok(());
    }
    let trace_flags: Vec<&str> = [
        (args.sort.is_some(), "--sort"),
        (args.estimator.is_some(), "--estimator"),
        (args.min_samples.is_some(), "--min-samples"),
        (args.mad_k.is_some(), "--mad-k"),
        (args.event.is_some(), "--event"),
        (!args.debug_dir.is_empty(), "--debug-dir"),
        (args.slow, "--slow"),
        (!args.items.is_empty(), "--item"),
    ]
    .into_iter()
    .filter_map(|(given, f)| given.then_some(f))
    .collect();
    if !trace_flags.is_empty() {
        anyhow::bail!(
            "{}: only for a trace, not --store (the store keeps slow requests already explained; it takes --class, --top, --json, --explain ID, --trace-id ID)",
            trace_flags.join(", ")
        );
    }
    Ok(())
}

pub fn run(args: ItemsArgs) -> Result<ExitCode> {
    check_source_flags(&args)?;
    if args.trace_id.is_some() && args.explain.is_some() {
        anyhow::bail!("--trace-id lists the items of a trace; --explain explains one item by its id: give one of them");
    }
    let doc = if args.store_range.store.is_some() {
        let reader = args.store_range.reader()?;
        let (from_us, to_us) = args.store_range.range()?;
        let host = args.store_range.host.as_deref();
        tailprof_analyze::items::document::stored(
            &reader,
            host,
            from_us,
            to_us,
            args.class.as_deref(),
            args.top,
            args.explain,
            args.trace_id,
        )?
    } else {
        let trace_path = args.trace.clone().unwrap_or_default();
        crate::cmd_report::set_debug_dirs(&args.debug_dir);
        let name = trace_path.display().to_string();
        let mut reader = TraceReader::open(&trace_path).with_context(|| format!("cannot read {name}"))?;
        let event = select_event(reader.header(), args.event.as_deref())?;
        let query = ItemsQuery {
            options: ItemsOptions {
                event: Some(event),
                class: args.class.clone(),
                min_reliable_samples: args.min_samples.unwrap_or(5),
                mad_k: args.mad_k.unwrap_or(3.5),
                estimator: match args.estimator.unwrap_or(EstimatorArg::Count) {
                    EstimatorArg::Count => Estimator::CountTimesInterval,
                    EstimatorArg::Span => Estimator::Span,
                },
                ..Default::default()
            },
            selection: ItemSelection {
                top: (args.top > 0).then_some(args.top),
                sort: match args.sort.unwrap_or(SortBy::Duration) {
                    SortBy::Duration => ItemSort::Duration,
                    SortBy::Anomaly => ItemSort::Anomaly,
                    SortBy::Id => ItemSort::Id,
                    SortBy::Begin => ItemSort::Begin,
                },
                slow_only: args.slow,
                only: args.items.clone(),
                trace_id: args.trace_id,
            },
            explain: args.explain,
            // With a last-level-cache-miss event: each item's memory traffic (issue 8).
            memory: args.json,
        };
        let mut symbolizer = crate::cmd_report::symbolizer();
        document(&mut reader, &query, &mut symbolizer).with_context(|| name.clone())?
    };
    let out = if args.json { view::document_json(&doc)? + "\n" } else { view::render_document(&doc) };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
