//! `tailprof export`: write a trace's per-item attribution as a self-contained HTML
//! report (stacked bars by function, the paper's Fig. 8) and/or a Perfetto trace
//! (Chrome JSON trace events: items as slices on thread tracks, per-function estimates
//! nested inside, samples as instants).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailprof_analyze::export::{export_data, ExportRequest};
use tailprof_analyze::items::{item_samples, items_report, ItemsOptions, ItemsReport};
use tailprof_analyze::stacks::StackFilter;
use tailprof_analyze::{select_event, Granularity};
use tailprof_format::TraceReader;
use tailprof_present::export::{render_export, ExportKind, ExportStyle};
use tailprof_present::html::{render_items_html, HtmlOptions};
use tailprof_present::perfetto::{perfetto_json, PerfettoOptions, SampleInstant};

/// Export per-item attribution as an HTML report or a Perfetto trace.
///
/// The HTML page needs nothing else (open it in any browser). The Perfetto file is in
/// Chrome JSON trace-event format: open it at https://ui.perfetto.dev.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof export run.trace --html report.html\n  \
    tailprof export run.trace --perfetto run.perfetto.json --no-samples\n  \
    tailprof export run.trace --pprof run.pb.gz && go tool pprof -top run.pb.gz\n  \
    tailprof export run.trace --firefox run.firefox.json --slow")]
pub struct ExportArgs {
    /// Trace file written by `tailprof record`.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Write the HTML report here.
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,

    /// Write the Perfetto (Chrome JSON) trace here.
    #[arg(long, value_name = "OUT.json")]
    perfetto: Option<PathBuf>,

    /// Sampling event to attribute (name or index). Default: the first.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    event: Option<String>,

    /// Only items of this class.
    #[arg(long, value_name = "C")]
    class: Option<String>,

    /// Leave samples out of the Perfetto trace (smaller file).
    #[arg(long)]
    no_samples: bool,

    /// Write a pprof profile (gzipped profile.proto) here: `go tool pprof -top OUT.pb.gz`.
    #[arg(long, value_name = "OUT.pb.gz")]
    pprof: Option<PathBuf>,

    /// Write a Firefox Profiler profile (processed format) here: open it at
    /// https://profiler.firefox.com.
    #[arg(long, value_name = "OUT.json")]
    firefox: Option<PathBuf>,

    /// Write folded stacks ("root;caller;leaf COUNT" lines) here.
    #[arg(long, value_name = "OUT.txt")]
    folded: Option<PathBuf>,

    /// Frames per (function, source line) instead of per function in every stack view of
    /// the export (pprof: one Location per function and line, its Line.line that line,
    /// like `go tool pprof -lines`; folded stacks, flame graphs, Firefox: frames
    /// `name (file:line)` per line). Lines from DWARF for native code and jitdump line
    /// tables for JIT code; without it a frame is a function with its first line.
    #[arg(long)]
    lines: bool,

    /// Add off-CPU time (from context switches) to the pprof profile as a third sample type.
    #[arg(long)]
    off_cpu: bool,

    /// Only samples inside this item (pprof, Firefox, folded, flame graphs); repeatable.
    #[arg(long = "item", value_name = "ID")]
    items: Vec<u64>,

    /// Only samples inside some item.
    #[arg(long)]
    in_items: bool,

    /// Only samples inside items flagged slow.
    #[arg(long)]
    slow: bool,

    /// Directory of separate debug files, searched before /usr/lib/debug: by build-id
    /// (DIR/.build-id/ab/cdef….debug, DIR/ab/cdef…) and by .gnu_debuglink name;
    /// repeatable. DEBUGINFOD_URLS (http://) is used when set. See docs/SYMBOLS.md.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

pub fn run(args: ExportArgs) -> Result<ExitCode> {
    crate::cmd_report::set_debug_dirs(&args.debug_dir);
    let outputs: Vec<(ExportKind, &PathBuf)> = [
        (ExportKind::Html, &args.html),
        (ExportKind::Perfetto, &args.perfetto),
        (ExportKind::Pprof, &args.pprof),
        (ExportKind::Firefox, &args.firefox),
        (ExportKind::Folded, &args.folded),
    ]
    .into_iter()
    .filter_map(|(k, p)| p.as_ref().map(|p| (k, p)))
    .collect();
    if outputs.is_empty() {
        bail!(
            "nothing to export: give --html OUT.html, --perfetto OUT.json, --pprof OUT.pb.gz, --firefox OUT.json and/or --folded OUT.txt"
        );
    }
    // Flags for one format given without it: an error that says why (issue 18).
    if args.no_samples && args.perfetto.is_none() {
        bail!("--no-samples leaves samples out of the Perfetto trace: it needs --perfetto OUT.json");
    }
    if args.off_cpu && args.pprof.is_none() {
        bail!("--off-cpu adds off-CPU time to the pprof profile: it needs --pprof OUT.pb.gz (the HTML report, Perfetto and Firefox exports show off-CPU time whenever the trace has context switches)");
    }
    let req = ExportRequest {
        event: args.event.clone(),
        filter: StackFilter { items: args.items.clone(), class: args.class.clone(), in_items: args.in_items, slow: args.slow },
        items: args.html.is_some() || args.perfetto.is_some(),
        timeline: args.perfetto.is_some() || args.firefox.is_some(),
        instants: args.perfetto.is_some() && !args.no_samples,
        granularity: if args.lines { Granularity::Line } else { Granularity::Function },
    };
    let mut reader = TraceReader::open(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut sym = crate::cmd_report::symbolizer();
    let data = export_data(&mut reader, &req, &mut sym).with_context(|| format!("cannot export {}", args.file.display()))?;
    let style = ExportStyle { subtitle: Some(format!("trace {}", args.file.display())), items: args.items.clone(), off_cpu: args.off_cpu };
    for (kind, out) in outputs {
        let r = render_export(&data, kind, &style)?;
        tailprof_format::atomic::write_file(out, r.bytes).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("tailprof: wrote {} ({}); open it with {}", out.display(), r.summary, r.viewer);
    }
    Ok(ExitCode::SUCCESS)
}

/// Open `file` and join its items with its samples.
pub fn load_report(file: &Path, event: Option<&str>, class: Option<String>) -> Result<ItemsReport> {
    let mut reader = TraceReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let event = match event {
        Some(spec) => Some(select_event(reader.header(), Some(spec))?),
        None => None,
    };
    let opts = ItemsOptions { event, class, ..Default::default() };
    let mut sym = crate::cmd_report::symbolizer();
    Ok(items_report(&mut reader, &opts, &mut sym)?)
}

pub fn write_html(out: &Path, report: &ItemsReport, opts: &HtmlOptions) -> Result<()> {
    tailprof_format::atomic::write_file(out, render_items_html(report, opts)).with_context(|| format!("cannot write {}", out.display()))
}

pub fn write_perfetto(out: &Path, report: &ItemsReport, samples: &[SampleInstant], names: BTreeMap<u32, String>) -> Result<()> {
    let text = perfetto_json(report, samples, &PerfettoOptions { names })?;
    tailprof_format::atomic::write_file(out, text).with_context(|| format!("cannot write {}", out.display()))
}

/// The samples inside items as instants, named by function, and thread names (tid → comm).
pub fn sample_instants(file: &Path, report: &ItemsReport, event: Option<&str>) -> Result<(Vec<SampleInstant>, BTreeMap<u32, String>)> {
    let mut reader = TraceReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let event = select_event(reader.header(), event)?;
    let mut sym = crate::cmd_report::symbolizer();
    let found = item_samples(&mut reader, report, event, &mut sym)?;
    let samples =
        found.samples.into_iter().map(|s| SampleInstant { pid: s.pid, tid: s.tid, time_ns: s.time_ns, function: s.function }).collect();
    Ok((samples, found.names))
}
