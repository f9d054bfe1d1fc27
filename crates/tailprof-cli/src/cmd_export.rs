//! `tailprof export`: write a trace's per-item attribution as a self-contained HTML
//! report (stacked bars by function, the paper's Fig. 8) and/or a Perfetto trace
//! (Chrome JSON trace events: items as slices on thread tracks, per-function estimates
//! nested inside, samples as instants).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailprof_analyze::items::{item_samples, items_report, ItemsOptions, ItemsReport};
use tailprof_analyze::select_event;
use tailprof_format::TraceReader;
use tailprof_present::html::{render_items_html, HtmlOptions};
use tailprof_present::perfetto::{perfetto_json, PerfettoOptions, SampleInstant};

/// Export per-item attribution as an HTML report or a Perfetto trace.
///
/// The HTML page needs nothing else (open it in any browser). The Perfetto file is in
/// Chrome JSON trace-event format: open it at https://ui.perfetto.dev.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof export run.trace --html report.html\n  \
    tailprof export run.trace --perfetto run.perfetto.json --no-samples")]
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

    /// Directory of separate debug files, searched before /usr/lib/debug: by build-id
    /// (DIR/.build-id/ab/cdef….debug, DIR/ab/cdef…) and by .gnu_debuglink name;
    /// repeatable. DEBUGINFOD_URLS (http://) is used when set. See docs/SYMBOLS.md.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

pub fn run(args: ExportArgs) -> Result<ExitCode> {
    crate::cmd_report::set_debug_dirs(&args.debug_dir);
    if args.html.is_none() && args.perfetto.is_none() {
        bail!("nothing to export: give --html OUT.html and/or --perfetto OUT.json");
    }
    let report = load_report(&args.file, args.event.as_deref(), args.class.clone())?;
    if let Some(out) = &args.html {
        let opts = HtmlOptions { subtitle: Some(format!("trace {}", args.file.display())), ..Default::default() };
        write_html(out, &report, &opts)?;
        eprintln!("tailprof: wrote {} ({} items)", out.display(), report.items.len());
    }
    if let Some(out) = &args.perfetto {
        let (samples, names) = if args.no_samples {
            (Vec::new(), BTreeMap::new())
        } else {
            sample_instants(&args.file, &report, args.event.as_deref())?
        };
        write_perfetto(out, &report, &samples, names)?;
        eprintln!(
            "tailprof: wrote {} ({} items, {} samples); open it at https://ui.perfetto.dev",
            out.display(),
            report.items.len(),
            samples.len()
        );
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

pub fn write_perfetto(
    out: &Path,
    report: &ItemsReport,
    samples: &[SampleInstant],
    names: BTreeMap<u32, String>,
) -> Result<()> {
    let text = perfetto_json(report, samples, &PerfettoOptions { names })?;
    tailprof_format::atomic::write_file(out, text).with_context(|| format!("cannot write {}", out.display()))
}

/// The samples inside items as instants, named by function, and thread names (tid → comm).
pub fn sample_instants(
    file: &Path,
    report: &ItemsReport,
    event: Option<&str>,
) -> Result<(Vec<SampleInstant>, BTreeMap<u32, String>)> {
    let mut reader = TraceReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let event = select_event(reader.header(), event)?;
    let mut sym = crate::cmd_report::symbolizer();
    let found = item_samples(&mut reader, report, event, &mut sym)?;
    let samples = found
        .samples
        .into_iter()
        .map(|s| SampleInstant { pid: s.pid, tid: s.tid, time_ns: s.time_ns, function: s.function })
        .collect();
    Ok((samples, found.names))
}
