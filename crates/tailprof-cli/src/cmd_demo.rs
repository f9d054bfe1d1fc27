//! `tailprof demo`: build the paper's sample application (`examples/queries.c`, embedded
//! with the marker header), record it, and show which queries were slow and why.
//!
//! Steps: write the sources into the output directory, compile them with the system C
//! compiler, run `tailprof record` on the example (a child process of this same binary,
//! so the demo records exactly like a user would), join items with samples, print the
//! items table with the flagged queries and the explanation of the slowest one, and
//! write `report.html` (stacked bars per item), `trace.perfetto.json`, `items.json` and
//! `demo.json` (what the demo found, for scripts and tests).
//!
//! The example logs the true entry and exit times of its functions, so the demo also
//! reports how close the per-item estimates come to the truth (the paper's Fig. 9);
//! `--accuracy-sweep` repeats that across sampling periods and draws the plot used in
//! `docs/ACCURACY.md`.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use tailprof_analyze::items::{explain, ItemsReport};
use tailprof_present::fmt::duration;
use tailprof_present::html::{accuracy_svg, AccuracyPoint, HtmlOptions};

use crate::cmd_export::{load_report, sample_instants, write_html, write_perfetto};

const QUERIES_C: &str = include_str!("../../../examples/queries.c");
const TAILPROF_H: &str = include_str!("../../../include/tailprof.h");

/// Items at least this many sample intervals long count for the accuracy check.
pub const MIN_ACCURACY_INTERVALS: f64 = 20.0;

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
    /// Directory for the example, its trace and the reports.
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

/// Truth from the example's log for one query.
#[derive(Debug, Clone, Default)]
struct Truth {
    n: u32,
    cold: bool,
    funcs: Vec<(String, u64)>,
}

/// Estimate / truth over the (item, function) pairs at least
/// [`MIN_ACCURACY_INTERVALS`] sample intervals long.
#[derive(Debug, Clone)]
pub struct Accuracy {
    pub period_ns: u64,
    pub mean_interval_ns: f64,
    pub pairs: usize,
    /// samples x mean interval.
    pub count_mean_ratio: f64,
    pub count_sd_ratio: f64,
    /// last - first sample (the paper's estimator).
    pub span_mean_ratio: f64,
    pub span_sd_ratio: f64,
    pub items_matched: usize,
}

pub fn run(args: DemoArgs) -> Result<ExitCode> {
    if args.period == 0 || args.scale == 0 || args.queries == 0 {
        bail!("--count, --scale and --queries must be greater than zero");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let dir = args.out.canonicalize().with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let exe = build_example(&dir)?;
    if let Some(list) = &args.accuracy_sweep {
        return sweep(&args, &dir, &exe, list);
    }

    let run = record_once(&dir, &exe, args.period, args.scale, args.queries, "demo")?;
    let report = &run.report;
    let cold: Vec<u64> = run.truth.iter().filter(|(_, t)| t.cold).map(|(&id, _)| id).collect();
    let flagged: Vec<u64> = report.items.iter().filter(|r| r.anomalous).map(|r| r.id).collect();
    print_items(report, &run.truth);

    let slowest = report.items.iter().max_by_key(|r| r.duration_ns).map(|r| r.id);
    if let Some(id) = slowest {
        print_explanation(report, id);
    }
    let acc = accuracy(report, &run.truth, args.period);
    println!(
        "\naccuracy vs the example's own clock (functions >= {MIN_ACCURACY_INTERVALS} sample intervals, {} pairs): \
         samples x interval = {:.3} +- {:.3} of the truth; first-to-last span = {:.3} +- {:.3}",
        acc.pairs, acc.count_mean_ratio, acc.count_sd_ratio, acc.span_mean_ratio, acc.span_sd_ratio
    );

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
    std::fs::write(&items_json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("cannot write {}", items_json.display()))?;
    let responsible: BTreeMap<String, Vec<String>> =
        report.items.iter().filter(|r| r.anomalous).map(|r| (r.id.to_string(), r.responsible.clone())).collect();
    let summary = serde_json::json!({
        "queries": run.truth.len(),
        "cold_ids": cold,
        "flagged_ids": flagged,
        "responsible": responsible,
        "slowest": slowest,
        "accuracy": accuracy_json(&acc),
        "report_html": html,
        "perfetto_json": perfetto,
        "items_json": items_json,
        "trace": run.trace,
    });
    std::fs::write(dir.join("demo.json"), serde_json::to_string_pretty(&summary)?)
        .with_context(|| format!("cannot write {}", dir.join("demo.json").display()))?;

    let verdict = if flagged == cold { "exactly the cold queries" } else { "NOT exactly the cold queries" };
    println!("\nflagged {:?}; cold (first of each n) {:?}: {verdict}", flagged, cold);
    println!("\nwrote:\n  {}   (open in a browser)\n  {}   (open at https://ui.perfetto.dev)\n  {}\n  {}   (tailprof items {} --explain ID)",
        html.display(), perfetto.display(), items_json.display(), run.trace.display(), run.trace.display());
    Ok(ExitCode::SUCCESS)
}

/// Write the sources into `dir` and compile them; returns the executable's path.
fn build_example(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("queries.c");
    std::fs::write(&src, QUERIES_C).with_context(|| format!("cannot write {}", src.display()))?;
    std::fs::write(dir.join("tailprof.h"), TAILPROF_H).with_context(|| format!("cannot write {}", dir.display()))?;
    let cc = find_c_compiler().context(
        "no C compiler found (tried $CC, cc, gcc, clang); install one (e.g. `apt-get install gcc`) or set CC",
    )?;
    let exe = dir.join("queries");
    let out = Command::new(&cc)
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-I"])
        .arg(dir)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .with_context(|| format!("cannot run the C compiler {cc}"))?;
    if !out.status.success() {
        bail!("compiling {} with {cc} failed:\n{}", src.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(exe)
}

fn find_c_compiler() -> Option<String> {
    let mut candidates: Vec<String> = Vec::new();
    if let Ok(cc) = std::env::var("CC") {
        if !cc.trim().is_empty() {
            candidates.push(cc.trim().to_string());
        }
    }
    candidates.extend(["cc", "gcc", "clang"].map(String::from));
    candidates.into_iter().find(|cc| {
        Command::new(cc).arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
    })
}

struct RunResult {
    trace: PathBuf,
    report: ItemsReport,
    truth: BTreeMap<u64, Truth>,
}

/// Record the example once with `tailprof record` (this binary) and analyze it.
fn record_once(dir: &Path, exe: &Path, period: u64, scale: u32, queries: u32, stem: &str) -> Result<RunResult> {
    let trace = dir.join(format!("{stem}.trace"));
    let log = dir.join(format!("{stem}.truth.log"));
    let me = std::env::current_exe().context("cannot find the tailprof executable")?;
    let out = Command::new(me)
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["-c", &period.to_string(), "--"])
        .arg(exe)
        .args(["--scale", &scale.to_string(), "--queries", &queries.to_string(), "--log"])
        .arg(&log)
        .output()
        .context("cannot run `tailprof record`")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("`tailprof record` of the example failed: {}", stderr.trim());
    }
    for line in String::from_utf8_lossy(&out.stdout).lines().chain(stderr.lines()) {
        if line.contains("warning") || line.starts_with("queries:") {
            println!("{line}");
        }
    }
    let truth = parse_truth(&log)?;
    let report = load_report(&trace, None, None)?;
    Ok(RunResult { trace, report, truth })
}

/// Read the example's log (see examples/queries.c for the format).
fn parse_truth(path: &Path) -> Result<BTreeMap<u64, Truth>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the example's log {}", path.display()))?;
    let mut out: BTreeMap<u64, Truth> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match f.first() {
            Some(&"query") => {
                if let (Some(id), Some(n)) = (num(1), num(2)) {
                    let t = out.entry(id).or_default();
                    t.n = n as u32;
                    t.cold = f.get(3) == Some(&"cold");
                }
            }
            Some(&"func") => {
                if let (Some(id), Some(name), Some(a), Some(b)) = (num(1), f.get(2), num(3), num(4)) {
                    out.entry(id).or_default().funcs.push((name.to_string(), b.saturating_sub(a)));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    (m, var.sqrt())
}

fn accuracy_json(a: &Accuracy) -> serde_json::Value {
    serde_json::json!({
        "period_ns": a.period_ns,
        "mean_interval_ns": a.mean_interval_ns,
        "pairs": a.pairs,
        "count_mean_ratio": a.count_mean_ratio,
        "count_sd_ratio": a.count_sd_ratio,
        "span_mean_ratio": a.span_mean_ratio,
        "span_sd_ratio": a.span_sd_ratio,
        "items_matched": a.items_matched,
    })
}

/// Compare each item's per-function estimates with the logged truth.
fn accuracy(report: &ItemsReport, truth: &BTreeMap<u64, Truth>, period: u64) -> Accuracy {
    let min_ns = MIN_ACCURACY_INTERVALS * report.mean_interval_ns;
    let (mut count, mut span) = (Vec::new(), Vec::new());
    let mut matched = 0;
    for row in &report.items {
        let Some(t) = truth.get(&row.id) else { continue };
        matched += 1;
        for (name, true_ns) in &t.funcs {
            if (*true_ns as f64) < min_ns {
                continue;
            }
            let (mut est, mut sp) = (0.0, 0.0);
            for f in row.functions.iter().filter(|f| &f.name == name) {
                est += f.est_ns;
                sp += f.span_ns as f64;
            }
            count.push(est / *true_ns as f64);
            span.push(sp / *true_ns as f64);
        }
    }
    let (cm, cs) = mean_sd(&count);
    let (sm, ss) = mean_sd(&span);
    Accuracy {
        period_ns: period,
        mean_interval_ns: report.mean_interval_ns,
        pairs: count.len(),
        count_mean_ratio: cm,
        count_sd_ratio: cs,
        span_mean_ratio: sm,
        span_sd_ratio: ss,
        items_matched: matched,
    }
}

fn print_items(report: &ItemsReport, truth: &BTreeMap<u64, Truth>) {
    let flagged = report.items.iter().filter(|r| r.anomalous).count();
    println!(
        "\n{} queries recorded ({} samples, {} outside any query); {} flagged as anomalous (class = n, threshold {} x MAD):\n",
        report.items.len(),
        report.total_samples,
        report.outside_samples,
        flagged,
        report.mad_k
    );
    println!("{:>4}  {:<6} {:>10} {:>8} {:>7}  {:<5} {:<4}  top functions ({})", "id", "class", "duration", "samples", "score", "flag", "log", report.shown_estimator.describe());
    let mut rows: Vec<_> = report.items.iter().collect();
    // Flagged queries first, then the slowest.
    rows.sort_by_key(|r| (std::cmp::Reverse(r.anomalous), std::cmp::Reverse(r.duration_ns)));
    let shown = rows.iter().filter(|r| r.anomalous).count().max(8) + 4;
    for r in rows.iter().take(shown) {
        let tops: Vec<String> = r
            .functions
            .iter()
            .take(3)
            .map(|f| format!("{} {}", f.name, duration(f.shown_ns(report.shown_estimator) as u64)))
            .collect();
        let log = match truth.get(&r.id) {
            Some(t) if t.cold => "cold",
            Some(_) => "warm",
            None => "-",
        };
        println!(
            "{:>4}  {:<6} {:>10} {:>8} {:>7.1}  {:<5} {:<4}  {}",
            r.id,
            r.class.as_deref().unwrap_or("-"),
            duration(r.duration_ns),
            r.samples,
            r.anomaly_score,
            if r.anomalous { "SLOW" } else { "" },
            log,
            tops.join(", ")
        );
    }
    if rows.len() > shown {
        println!("   ... {} more (all in report.html and items.json)", rows.len() - shown);
    }
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
        println!(
            "period {:>8}: {:>4} pairs, samples x interval {:.3} +- {:.3}, span {:.3} +- {:.3}",
            duration(p),
            acc.pairs,
            acc.count_mean_ratio,
            acc.count_sd_ratio,
            acc.span_mean_ratio,
            acc.span_sd_ratio
        );
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
    std::fs::write(dir.join("accuracy.svg"), svg).context("cannot write accuracy.svg")?;
    std::fs::write(dir.join("accuracy.json"), serde_json::to_string_pretty(&results.iter().map(accuracy_json).collect::<Vec<_>>())?).context("cannot write accuracy.json")?;
    let mut md = String::from(
        "| period | pairs | samples x interval: mean est/truth | sd | first-to-last span: mean est/truth | sd |\n|---|---|---|---|---|---|\n",
    );
    for a in &results {
        md.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
            duration(a.period_ns),
            a.pairs,
            a.count_mean_ratio,
            a.count_sd_ratio,
            a.span_mean_ratio,
            a.span_sd_ratio
        ));
    }
    std::fs::write(dir.join("accuracy.md"), &md).context("cannot write accuracy.md")?;
    println!("\n{md}\nwrote {0}/accuracy.svg, {0}/accuracy.md, {0}/accuracy.json", dir.display());
    Ok(ExitCode::SUCCESS)
}
