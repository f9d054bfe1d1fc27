//! `tailprof demo`: build the paper's sample application (`examples/queries.c`, embedded
//! with the marker header), record it, and show which queries were slow and why.
//!
//! Steps: make the output directory safe (new and 0700, or one an earlier demo created:
//! `tailprof_measure::private::prepare_demo_dir`, so no other user can plant a symlink
//! or swap the compiled binary), build the example there and record it with `tailprof
//! record` (`tailprof_measure::demo`: a child process of this same binary, so the demo
//! records exactly like a user would), join items with samples, print the
//! items table with the flagged queries and the explanation of the slowest one, and
//! write `report.html` (stacked bars per item), `trace.perfetto.json`, `items.json` and
//! `demo.json` (what the demo found, for scripts and tests).
//!
//! The example logs the true entry and exit times of its functions, so the demo also
//! reports how close the per-item estimates come to the truth (the paper's Fig. 9,
//! `tailprof_measure::accuracy`);
//! `--accuracy-sweep` repeats that across sampling periods and draws the plot used in
//! `docs/ACCURACY.md`.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tailprof_analyze::items::{explain, ItemsReport};
use tailprof_measure::accuracy::{accuracy, Accuracy, Truth, MIN_ACCURACY_INTERVALS};
use tailprof_measure::demo::{build_example, record_example};
use tailprof_measure::private::{prepare_demo_dir, write_private};
use tailprof_present::fmt::duration;
use tailprof_present::html::{accuracy_svg, AccuracyPoint, HtmlOptions};
use tailprof_present::overhead::{accuracy_line, accuracy_markdown, accuracy_sweep_line, demo_items_text};

use crate::cmd_export::{load_report, sample_instants, write_html, write_perfetto};

/// Run the paper's sample application under the profiler and explain its slow queries.
///
/// Builds examples/queries.c (two threads pinned to cores 0 and 1; the worker runs
/// load_points, transform_points and reduce_points over n x 1000 points per query and
/// caches transform_points' results per n, so the first query of each n is slow),
/// records it, flags the slow queries and names the function responsible.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof demo                         # writes ./tailprof-demo/report.html\n  \
    tailprof demo --out /tmp/d --scale 4  # longer queries: more samples per item\n  \
    tailprof demo --accuracy-sweep 50000,100000,250000,500000,1000000 --scale 8")]
pub struct DemoArgs {
    /// Directory for the example, its trace and the reports. Created with mode 0700; an
    /// existing directory is used only if an earlier `tailprof demo` created it (ours,
    /// private, not a symlink), so other users cannot plant files in it.
    #[arg(long, value_name = "DIR", default_value = "tailprof-demo")]
    out: PathBuf,

    /// cpu-clock sampling period in nanoseconds.
    #[arg(short = 'c', long = "count", value_name = "PERIOD", default_value_t = 250_000)]
    period: u64,

    /// Work multiplier of the example (longer queries, more samples per item).
    #[arg(long, value_name = "S", default_value_t = 1)]
    scale: u32,

    /// Number of queries the example runs.
    #[arg(long, value_name = "Q", default_value_t = 48)]
    queries: u32,

    /// Record once per period (comma-separated nanoseconds) and write accuracy.svg,
    /// accuracy.md and accuracy.json instead of the usual reports.
    #[arg(long, value_name = "PERIODS")]
    accuracy_sweep: Option<String>,
}

pub fn run(args: DemoArgs) -> Result<ExitCode> {
    if args.period == 0 || args.scale == 0 || args.queries == 0 {
        bail!("--count, --scale and --queries must be greater than zero");
    }
    let dir = prepare_demo_dir(&args.out)?;
    let exe = build_example(&dir)?;
    if let Some(list) = &args.accuracy_sweep {
        return sweep(&args, &dir, &exe, list);
    }

    let run = record_once(&dir, &exe, args.period, args.scale, args.queries, "demo")?;
    let report = &run.report;
    let cold: Vec<u64> = run.truth.iter().filter(|(_, t)| t.cold).map(|(&id, _)| id).collect();
    let flagged: Vec<u64> = report.items.iter().filter(|r| r.anomalous).map(|r| r.id).collect();
    print!("{}", demo_items_text(report, &run.truth));

    let slowest = report.items.iter().max_by_key(|r| r.duration_ns).map(|r| r.id);
    if let Some(id) = slowest {
        print_explanation(report, id);
    }
    let acc = accuracy(report, &run.truth, args.period);
    println!("\n{}", accuracy_line(&acc, MIN_ACCURACY_INTERVALS));

    let html = dir.join("report.html");
    let perfetto = dir.join("trace.perfetto.json");
    let items_json = dir.join("items.json");
    let opts = HtmlOptions {
        title: "tailprof demo: the paper's query application, time per query by function".into(),
        subtitle: Some(format!(
            "{} queries, cpu-clock every {}; the first query of each n is cold (its transform_points result is not cached yet)",
            run.truth.len(),
            duration(args.period)
        )),
        ..Default::default()
    };
    write_html(&html, report, &opts)?;
    let (samples, names) = sample_instants(&run.trace, report, None)?;
    write_perfetto(&perfetto, report, &samples, names)?;
    write_private(&items_json, serde_json::to_string_pretty(report)?.as_bytes())
        .with_context(|| format!("cannot write {}", items_json.display()))?;
    let responsible: BTreeMap<String, Vec<String>> =
        report.items.iter().filter(|r| r.anomalous).map(|r| (r.id.to_string(), r.responsible.clone())).collect();
    let summary = serde_json::json!({
        "queries": run.truth.len(),
        "cold_ids": cold,
        "flagged_ids": flagged,
        "responsible": responsible,
        "slowest": slowest,
        "accuracy": acc,
        "report_html": html,
        "perfetto_json": perfetto,
        "items_json": items_json,
        "trace": run.trace,
    });
    write_private(&dir.join("demo.json"), serde_json::to_string_pretty(&summary)?.as_bytes())
        .with_context(|| format!("cannot write {}", dir.join("demo.json").display()))?;

    let verdict = if flagged == cold { "exactly the cold queries" } else { "NOT exactly the cold queries" };
    println!("\nflagged {:?}; cold (first of each n) {:?}: {verdict}", flagged, cold);
    println!(
        "\nwrote:\n  {}   (open in a browser)\n  {}   (open at https://ui.perfetto.dev)\n  {}\n  {}   (tailprof items {} --explain ID)",
        html.display(),
        perfetto.display(),
        items_json.display(),
        run.trace.display(),
        run.trace.display()
    );
    Ok(ExitCode::SUCCESS)
}

struct RunResult {
    trace: PathBuf,
    report: ItemsReport,
    truth: BTreeMap<u64, Truth>,
}

/// Record the example once (`tailprof_measure::demo`) and analyze it.
fn record_once(dir: &Path, exe: &Path, period: u64, scale: u32, queries: u32, stem: &str) -> Result<RunResult> {
    let run = record_example(dir, exe, period, scale, queries, stem)?;
    for line in &run.messages {
        println!("{line}");
    }
    let report = load_report(&run.trace, None, None)?;
    Ok(RunResult { trace: run.trace, report, truth: run.truth })
}

fn print_explanation(report: &ItemsReport, id: u64) {
    match explain(report, id) {
        Ok(ex) => println!("\nwhy was query {id} slow?\n{}", tailprof_present::items::render_explanation(&ex)),
        Err(e) => println!("\nno explanation for query {id}: {e}"),
    }
}

/// `--accuracy-sweep`: one recording per period; writes accuracy.{svg,md,json}.
fn sweep(args: &DemoArgs, dir: &Path, exe: &Path, list: &str) -> Result<ExitCode> {
    let mut periods = Vec::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse::<u64>() {
            Ok(v) if v > 0 => periods.push(v),
            _ => bail!("--accuracy-sweep takes periods in nanoseconds, e.g. 50000,250000 (got {p:?})"),
        }
    }
    if periods.is_empty() {
        bail!("--accuracy-sweep needs at least one period");
    }
    let mut results = Vec::new();
    for &p in &periods {
        let run = record_once(dir, exe, p, args.scale, args.queries, &format!("sweep-{p}"))?;
        let acc = accuracy(&run.report, &run.truth, p);
        println!("{}", accuracy_sweep_line(&acc));
        results.push(acc);
    }
    let point = |a: &Accuracy, count: bool| AccuracyPoint {
        period_ns: a.period_ns,
        mean_ratio: if count { a.count_mean_ratio } else { a.span_mean_ratio },
        std_ratio: if count { a.count_sd_ratio } else { a.span_sd_ratio },
        items: a.pairs,
    };
    let valid: Vec<&Accuracy> = results.iter().filter(|a| a.pairs > 0).collect();
    let count_pts: Vec<AccuracyPoint> = valid.iter().map(|a| point(a, true)).collect();
    let span_pts: Vec<AccuracyPoint> = valid.iter().map(|a| point(a, false)).collect();
    let svg = accuracy_svg(&[("samples x interval", &count_pts), ("first-to-last span", &span_pts)]);
    write_private(&dir.join("accuracy.svg"), svg.as_bytes()).context("cannot write accuracy.svg")?;
    write_private(&dir.join("accuracy.json"), serde_json::to_string_pretty(&results)?.as_bytes()).context("cannot write accuracy.json")?;
    let md = accuracy_markdown(&results);
    write_private(&dir.join("accuracy.md"), md.as_bytes()).context("cannot write accuracy.md")?;
    println!("\n{md}\nwrote {0}/accuracy.svg, {0}/accuracy.md, {0}/accuracy.json", dir.display());
    Ok(ExitCode::SUCCESS)
}
