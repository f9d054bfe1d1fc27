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
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions, StackProfile};
use tailprof_present::firefox::{firefox_json, FirefoxOptions};
use tailprof_present::flamegraph::{flame_section_html, FlameOptions};
use tailprof_present::html::{render_items_html, render_items_html_with, HtmlOptions};
use tailprof_present::perfetto::{add_stack_timeline, perfetto_json, perfetto_value, PerfettoOptions, SampleInstant};
use tailprof_present::pprof::{pprof_gzip, PprofOptions};
use tailprof_present::stacks::folded;

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
    if args.html.is_none() && args.perfetto.is_none() && args.pprof.is_none() && args.firefox.is_none() && args.folded.is_none() {
        bail!("nothing to export: give --html OUT.html, --perfetto OUT.json, --pprof OUT.pb.gz, --firefox OUT.json and/or --folded OUT.txt");
    }
    let filter = StackFilter { items: args.items.clone(), class: args.class.clone(), in_items: args.in_items, slow: args.slow };
    let needs_items = args.html.is_some() || args.perfetto.is_some() || filter.is_active();
    if !needs_items {
        // pprof / Firefox / folded of a trace that may have no items.
        let p = load_stacks(&args.file, args.event.as_deref(), filter, None, args.firefox.is_some())?;
        return write_stack_exports(&args, &p);
    }
    let report = load_report(&args.file, args.event.as_deref(), args.class.clone())?;
    let timeline = args.perfetto.is_some() || args.firefox.is_some();
    let stacks = load_stacks(&args.file, args.event.as_deref(), filter, Some(&report), timeline)?;
    if let Some(out) = &args.html {
        let opts = HtmlOptions { subtitle: Some(format!("trace {}", args.file.display())), ..Default::default() };
        let flames = tailprof_present::html::off_cpu_section_html(&report, &stacks, 20)
            + &flame_section_html(&stacks, Some(&report), &FlameOptions { items: args.items.clone(), ..Default::default() });
        tailprof_format::atomic::write_file(out, render_items_html_with(&report, &opts, &flames))
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("tailprof: wrote {} ({} items)", out.display(), report.items.len());
    }
    if let Some(out) = &args.perfetto {
        let (samples, names) = if args.no_samples {
            (Vec::new(), BTreeMap::new())
        } else {
            sample_instants(&args.file, &report, args.event.as_deref())?
        };
        // With stacks: samples with their stacks replace the plain sample instants.
        let with_stacks = !args.no_samples && stacks.samples_with_stacks() > 0;
        let plain: &[SampleInstant] = if with_stacks { &[] } else { &samples };
        let mut doc = perfetto_value(&report, plain, &PerfettoOptions { names });
        if with_stacks {
            add_stack_timeline(&mut doc, &stacks);
        } else if let Some(t) = stacks.timeline.clone() {
            // Off-CPU slices even without stacks or samples.
            let mut only_off = stacks.clone();
            only_off.timeline = Some(tailprof_analyze::stacks::Timeline { samples: Vec::new(), off_cpu: t.off_cpu });
            add_stack_timeline(&mut doc, &only_off);
        }
        tailprof_format::atomic::write_file(out, serde_json::to_string(&doc)?)
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!(
            "tailprof: wrote {} ({} items, {} samples, {} off-CPU slices); open it at https://ui.perfetto.dev",
            out.display(),
            report.items.len(),
            stacks.timeline.as_ref().map_or(samples.len(), |t| if with_stacks { t.samples.len() } else { samples.len() }),
            stacks.timeline.as_ref().map_or(0, |t| t.off_cpu.len())
        );
    }
    write_stack_exports(&args, &stacks)
}

/// The stack profile of `file` (items' spans from `report`, for filters and per-item
/// views), with the timeline when `timeline`.
fn load_stacks(
    file: &Path,
    event: Option<&str>,
    filter: StackFilter,
    report: Option<&ItemsReport>,
    timeline: bool,
) -> Result<StackProfile> {
    let mut reader = TraceReader::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let event = select_event(reader.header(), event)?;
    let mut sym = crate::cmd_report::symbolizer();
    let spans = report.map(|r| ItemSpan::from_rows(&r.items)).unwrap_or_default();
    if filter.is_active() && report.is_none() {
        bail!("--item/--in-items/--slow need the trace's items, and none were read");
    }
    for id in &filter.items {
        if !spans.iter().any(|s| s.id == *id) {
            bail!("no item with id {id} in {} (see `tailprof items`)", file.display());
        }
    }
    let opts = StackOptions { event: Some(event), filter, timeline };
    Ok(stack_profile(&mut reader, &opts, spans, &mut sym).with_context(|| format!("cannot read {}", file.display()))?)
}

/// pprof, Firefox Profiler and folded-stack files.
fn write_stack_exports(args: &ExportArgs, p: &StackProfile) -> Result<ExitCode> {
    if let Some(out) = &args.pprof {
        let period = TraceReader::open(&args.file)
            .ok()
            .and_then(|r| r.header().events.first().and_then(|e| e.sample_period))
            .unwrap_or(0);
        let opts = PprofOptions { off_cpu: args.off_cpu, period: period.min(i64::MAX as u64) as i64, ..Default::default() };
        let bytes = pprof_gzip(p, &opts).with_context(|| format!("cannot encode {}", out.display()))?;
        tailprof_format::atomic::write_file(out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("tailprof: wrote {} ({} stacks); view it with `go tool pprof -top {}`", out.display(), p.stacks.len(), out.display());
    }
    if let Some(out) = &args.firefox {
        let interval = TraceReader::open(&args.file)
            .ok()
            .and_then(|r| {
                let e = r.header().events.first()?;
                matches!(e.name.as_str(), "cpu-clock" | "task-clock").then_some(e.sample_period).flatten()
            })
            .unwrap_or(0);
        let opts = FirefoxOptions { interval_ns: interval, ..Default::default() };
        let text = firefox_json(p, &opts).context("no timeline was kept")??;
        tailprof_format::atomic::write_file(out, text).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("tailprof: wrote {}; open it at https://profiler.firefox.com", out.display());
    }
    if let Some(out) = &args.folded {
        tailprof_format::atomic::write_file(out, folded(p)).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("tailprof: wrote {} ({} stacks)", out.display(), p.stacks.len());
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
