//! Text and JSON for the measurement commands (`tailprof calibrate`, `overhead`,
//! `plan`) and the demo's items table and accuracy check, from the typed results of
//! `tailprof-measure`.

use serde_json::{json, Value};
use std::fmt::Write as _;

use std::collections::BTreeMap;

use tailprof_analyze::items::ItemsReport;
use tailprof_analyze::measured::{Accuracy, AlphaSource, CalibrationReport, OverheadReport, PlanReport, Prediction, Truth};
use tailprof_analyze::overhead::{Basis, OverheadEstimate, RateModel};

use crate::fmt::{bytes, duration, ns_text as ns, period_text, thousands};

/// "12.3 µs [11.9, 12.8] per sample (calibration <path>)" / "(--alpha)".
pub fn describe_alpha(a: &AlphaSource) -> String {
    let ci = a.ci_ns.map(|(l, h)| format!(" [{}, {}]", ns(l), ns(h))).unwrap_or_default();
    let from = match &a.path {
        Some(p) => format!("calibration {}", p.display()),
        None => "--alpha".into(),
    };
    format!("{}{ci} per sample ({from})", ns(a.alpha_ns))
}

fn arr2(p: (f64, f64)) -> Value {
    json!([p.0, p.1])
}

/// `tailprof calibrate --json`.
pub fn calibration_json(r: &CalibrationReport) -> Value {
    let fit = &r.fit;
    json!({
        "event": r.event,
        "cpu_model": r.machine.cpu_model,
        "kernel": r.machine.kernel,
        "online_cpus": r.machine.online_cpus,
        "loadavg": r.loadavg,
        "iterations": r.iterations,
        "workload": r.workload,
        "repeats": r.repeats,
        "accepted": r.verdict.is_ok(),
        "reason": r.verdict.as_ref().err().map(|x| x.reason()),
        "advice": r.verdict.as_ref().err().map(|x| x.advice()),
        "basis": r.basis.name(),
        "alpha_ns": fit.alpha_ns(),
        "alpha_ci_ns": arr2(fit.alpha_ci_ns()),
        "other_basis": {
            "basis": r.other_basis.name(),
            "alpha_ns": r.other_fit.as_ref().map(|f| f.alpha_ns()),
            "alpha_ci_ns": r.other_fit.as_ref().map(|f| arr2(f.alpha_ci_ns())),
            "r2": r.other_fit.as_ref().map(|f| f.r2),
        },
        "r2": fit.r2,
        "r2_all": fit.r2_all,
        "outliers": fit.outliers,
        "intercept_s": fit.intercept_s,
        "bytes_per_sample": r.bytes_per_sample,
        "recorder_cpu_ns_per_sample": r.recorder_cpu_ns_per_sample,
        "method": "Theil-Sen slope over pairs of runs at different periods; 95% interval: stratified bootstrap (1000 replicates, runs resampled within each period)",
        "periods": r.rows,
        "points": r.points,
        "saved_to": r.saved_to.as_ref().map(|p| p.display().to_string()),
        "notes": r.notes,
    })
}

/// `tailprof calibrate` for people (stdout; the refusal line is the caller's).
pub fn calibration_text(r: &CalibrationReport) -> String {
    let mut s = String::new();
    let k = &r.machine;
    let _ = writeln!(
        s,
        "calibrate {} on {}, Linux {}, {} CPUs{}",
        r.event,
        k.cpu_model,
        k.kernel,
        k.online_cpus,
        r.loadavg.map(|l| format!(" (load average {l:.2})")).unwrap_or_default()
    );
    let what = match &r.workload {
        Some(cmd) => format!("workload `{}`", cmd.join(" ")),
        None => format!("busy loop: {} iterations", thousands(r.iterations)),
    };
    let _ = writeln!(s, "{what}, {} runs per point, order rotated every repeat\n", r.repeats);
    let label = if r.basis == Basis::Wall { "elapsed" } else { "CPU time" };
    let _ = writeln!(s, "  {:>12}  {:>5}  {:>12}  {:>10}  {:>9}", "period", "runs", "samples", label, "overhead");
    for row in &r.rows {
        let period = match row.period {
            Some(p) => period_text(p, r.clock),
            None => "unprofiled".into(),
        };
        let _ = writeln!(
            s,
            "  {:>12}  {:>5}  {:>12}  {:>8.3} s  {:>8.1}%{}",
            period,
            row.runs,
            thousands(row.samples_median.unwrap_or(0.0) as u64),
            row.elapsed_median_s,
            row.overhead_pct,
            if row.throttled_runs > 0 { format!("  ({} throttled)", row.throttled_runs) } else { String::new() }
        );
    }
    let fit = &r.fit;
    let (lo, hi) = fit.alpha_ci_ns();
    let _ = writeln!(
        s,
        "\nα = {} of {} time per sample, 95% interval [{}, {}] (Theil–Sen, stratified bootstrap); R² = {:.4}{}; intercept {:.3} s",
        ns(fit.alpha_ns()),
        r.basis.name(),
        ns(lo),
        ns(hi),
        fit.r2,
        if fit.outliers > 0 { format!(" ({} outlier runs left out; {:.4} with them)", fit.outliers, fit.r2_all) } else { String::new() },
        fit.intercept_s
    );
    if let (Some(b), Some(rc)) = (r.bytes_per_sample, r.recorder_cpu_ns_per_sample) {
        let _ = writeln!(s, "trace {b:.1} bytes/sample; recorder CPU {} per sample", ns(rc));
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    if let Some(f) = &r.other_fit {
        let (lo, hi) = f.alpha_ci_ns();
        let _ = writeln!(s, "({} time basis: α = {} [{}, {}], R² = {:.4})", r.other_basis.name(), ns(f.alpha_ns()), ns(lo), ns(hi), f.r2);
    }
    match (&r.verdict, &r.saved_to) {
        (Ok(()), Some(p)) => {
            let _ = writeln!(s, "saved to {}", p.display());
        }
        (Ok(()), None) if r.workload.is_some() => {
            let _ = writeln!(s, "not saved (workload calibrations never are; use it with --alpha)");
        }
        (Ok(()), None) if r.save_disabled => {
            let _ = writeln!(s, "not saved (--no-save)");
        }
        _ => {}
    }
    s
}

/// The one error line of a refused calibration (without the `tailprof: error: ` prefix).
pub fn calibration_refusal(r: &CalibrationReport) -> Option<String> {
    let why = r.verdict.as_ref().err()?;
    let alt = if r.basis == Basis::Wall { " (or --basis cpu)" } else { "" };
    Some(format!("calibration not saved: {}; {}{alt}", why.reason(), why.advice()))
}

/// `tailprof overhead --json`.
pub fn overhead_json(r: &OverheadReport) -> Value {
    let side = |e: &OverheadEstimate, p: Option<Prediction>| {
        json!({
            "base_s": e.base_s,
            "profiled_s": e.profiled_s,
            "overhead_pct": e.overhead_pct,
            "overhead_ci_pct": arr2(e.ci_pct),
            "predicted_s": p.map(|p| p.predicted_s),
            "error_pct": p.map(|p| p.error * 100.0),
        })
    };
    let mut v = side(&r.wall, r.predicted_wall);
    let a = r.alpha.as_ref();
    let extra = json!({
        "samples": r.samples,
        "alpha_ns": a.map(|a| a.alpha_ns),
        "alpha_ci_ns": a.and_then(|a| a.ci_ns).map(arr2),
        "alpha_source": a.map(describe_alpha),
        "calibration_basis": a.and_then(|a| a.calibration.as_ref()).map(|c| c.basis.name()),
        "predicted_overhead_pct": r.predicted_wall.map(|p| (p.predicted_s / r.wall.base_s - 1.0) * 100.0),
        "implied_alpha_ns": r.implied_alpha_ns,
        "implied_alpha_cpu_ns": r.implied_alpha_cpu_ns,
        "cpu": side(&r.cpu, r.predicted_cpu),
        "event": r.event,
        "period": r.period,
        "period_desc": r.period_desc,
        "runs": r.runs,
        "instances": r.instances,
        "pinned": r.pinned,
        "threads": r.threads,
        "samples_per_instance": r.samples_per_instance,
        "lost": r.lost,
        "throttled": r.throttled,
        "bytes_per_sample": r.bytes_per_sample,
        "recorder_cpu_ns_per_sample": r.recorder_cpu_ns_per_sample,
        "recorder_fixed_s": r.recorder_fixed_s,
        "base_runs_s": r.wall_pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        "profiled_runs_s": r.wall_pairs.iter().map(|p| p.1).collect::<Vec<_>>(),
        "base_cpu_runs_s": r.cpu_pairs.iter().map(|p| p.0).collect::<Vec<_>>(),
        "profiled_cpu_runs_s": r.cpu_pairs.iter().map(|p| p.1).collect::<Vec<_>>(),
        "samples_runs": r.samples_runs,
        "loadavg": r.loadavg,
        "wait_idle_s": r.wait_idle_s,
        "pairs_started_busy": r.pairs_started_busy,
        "command": r.command,
    });
    if let (Some(o), Value::Object(m)) = (v.as_object_mut(), extra) {
        o.extend(m);
    }
    v
}

/// `tailprof overhead` for people.
pub fn overhead_text(r: &OverheadReport) -> String {
    let mut s = String::new();
    let k = r.instances;
    let copies = if k > 1 { format!(", {k} copies at once{}", if r.pinned { " (pinned)" } else { "" }) } else { String::new() };
    let _ = writeln!(
        s,
        "overhead of sampling {} every {} on `{}`: {} interleaved runs{copies}",
        r.event,
        r.period_desc,
        r.command.join(" "),
        r.runs
    );
    let mut row = |name: &str, e: &OverheadEstimate| {
        let _ = writeln!(
            s,
            "  {name:<9} {:>9.3} s unprofiled  {:>9.3} s profiled  {:+7.2}%  95% [{:+.2}, {:+.2}]",
            e.base_s, e.profiled_s, e.overhead_pct, e.ci_pct.0, e.ci_pct.1
        );
    };
    row("elapsed", &r.wall);
    row("CPU time", &r.cpu);
    let _ = writeln!(
        s,
        "  samples   {} per run{}{}; the command ran {:.2} threads at once",
        thousands(r.samples as u64),
        if r.lost > 0 { format!(" ({} lost)", thousands(r.lost)) } else { String::new() },
        if r.throttled > 0 { format!(" (throttled {}×)", r.throttled) } else { String::new() },
        r.threads
    );
    match (&r.alpha, r.predicted_wall, r.predicted_cpu) {
        (Some(a), Some(w), Some(c)) => {
            let _ = writeln!(s, "  α         {}", describe_alpha(a));
            let _ = writeln!(
                s,
                "  predicted {:>9.3} s elapsed ({:+.2}%), E = {:+.2}%;  {:.3} s CPU, E = {:+.2}%",
                w.predicted_s,
                (w.predicted_s / r.wall.base_s - 1.0) * 100.0,
                w.error * 100.0,
                c.predicted_s,
                c.error * 100.0
            );
        }
        _ => {
            let _ =
                writeln!(s, "  predicted -  (no calibration for {}: run `tailprof calibrate -e {}`, or pass --alpha)", r.event, r.event);
        }
    }
    if let (Some(w), Some(c)) = (r.implied_alpha_ns, r.implied_alpha_cpu_ns) {
        let _ = writeln!(s, "  implied   {} per sample from the elapsed times, {} from the CPU times", ns(w), ns(c));
    }
    if let (Some(b), Some(rc), Some(f)) = (r.bytes_per_sample, r.recorder_cpu_ns_per_sample, r.recorder_fixed_s) {
        let _ = writeln!(
            s,
            "  recorder  {b:.1} trace bytes and {} of its own CPU per sample; setup and final flush {:.0} ms (not in the times above)",
            ns(rc),
            f * 1e3
        );
    }
    if let Some(busy) = r.pairs_started_busy.filter(|b| *b > 0) {
        let _ = writeln!(
            s,
            "  note: {busy} of {} pairs started while other processes kept the machine busy (waited {} s)",
            r.runs, r.wait_idle_s
        );
    }
    if let Some(l) = r.loadavg.filter(|l| *l > r.cpus as f64 * 0.5) {
        let _ = writeln!(
            s,
            "  note: load average {l:.1} on {} CPUs: other processes compete for the CPUs; elapsed times are noisy, CPU times less so",
            r.cpus
        );
    }
    s
}

/// `tailprof plan --json`.
pub fn plan_json(r: &PlanReport) -> Value {
    let o = &r.out;
    json!({
        "event": r.event,
        "budget_pct": r.budget * 100.0,
        "alpha_ns": r.alpha.alpha_ns,
        "alpha_source": describe_alpha(&r.alpha),
        "elapsed_s": r.elapsed_s,
        "cpu_s": r.cpu_s,
        "threads": r.threads,
        "event_count": r.event_count,
        "events_per_cpu_s": match r.model { RateModel::Count { events_per_cpu_s } => Some(events_per_cpu_s), RateModel::Time => None },
        "period": o.period,
        "predicted_overhead_pct": o.predicted_overhead_pct,
        "limited_by": format!("{:?}", o.limited_by),
        "sample_interval_ns": o.sample_interval_ns,
        "samples_per_s": o.samples_per_s,
        "samples_per_s_per_thread": o.samples_per_s_per_thread,
        "bytes_per_sample": r.bytes_per_sample,
        "trace_mb_per_s": r.trace_mb_per_s,
        "raw_record_bytes": r.raw_record_bytes,
        "ring_pages_per_cpu": r.ring_pages_per_cpu,
        "ring_bytes_per_cpu": r.ring_pages_per_cpu.saturating_mul(r.page_size),
        "pebs": r.pebs,
        "record_command": r.record_command,
        "notes": r.notes,
    })
}

/// `tailprof plan` for people.
pub fn plan_text(r: &PlanReport) -> String {
    let mut s = String::new();
    let o = &r.out;
    let _ = writeln!(
        s,
        "plan for `{}` with a {}% budget on {} (counted: {:.3} s elapsed, {:.3} s CPU, {:.2} threads at once)",
        r.command.join(" "),
        r.budget * 100.0,
        r.event,
        r.elapsed_s,
        r.cpu_s,
        r.threads
    );
    if let RateModel::Count { events_per_cpu_s } = r.model {
        let _ = writeln!(
            s,
            "  event rate         {events_per_cpu_s:.3e} {} per CPU-second ({} in the run)",
            r.event,
            thousands(r.event_count as u64)
        );
    }
    let _ = writeln!(s, "  α                  {}", describe_alpha(&r.alpha));
    let _ = writeln!(s, "  period             -c {}  ({})", o.period, period_text(o.period, r.clock));
    let _ = writeln!(s, "  predicted overhead {:.2}%", o.predicted_overhead_pct);
    let _ = writeln!(s, "  sample interval    {} of a thread's CPU time", duration(o.sample_interval_ns.round() as u64));
    let _ = writeln!(s, "  samples per second {:.0} per busy thread, {:.0} in all", o.samples_per_s_per_thread, o.samples_per_s);
    match (r.bytes_per_sample, r.trace_mb_per_s) {
        (Some(b), Some(m)) => {
            let _ = writeln!(s, "  trace data rate    {m:.3} MB/s at {b:.1} bytes per sample");
        }
        _ => {
            let _ = writeln!(s, "  trace data rate    unknown (no bytes-per-sample measurement: run `tailprof calibrate`)");
        }
    }
    let pages = r.ring_pages_per_cpu;
    let _ = writeln!(
        s,
        "  ring per CPU       {pages} pages ({}) for {} s of {}-byte records{}",
        bytes(pages.saturating_mul(r.page_size)),
        r.ring_hold_s,
        r.raw_record_bytes,
        if pages <= r.default_ring_pages { format!("; the default {} pages suffice", r.default_ring_pages) } else { String::new() }
    );
    if let Some(g) = &r.pebs {
        let _ = writeln!(s, "  PEBS buffer guidance:");
        for a in &g.advice {
            let _ = writeln!(s, "    - {a}");
        }
    }
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    let _ = writeln!(s, "\n  {}", r.record_command);
    s
}

/// The demo's items table: flagged queries first, then the slowest, with the example's
/// own cold/warm label from its log.
pub fn demo_items_text(report: &ItemsReport, truth: &BTreeMap<u64, Truth>) -> String {
    let mut s = String::new();
    let flagged = report.items.iter().filter(|r| r.anomalous).count();
    let _ = writeln!(
        s,
        "\n{} queries recorded ({} samples, {} outside any query); {} flagged as anomalous (class = n, threshold {} x MAD):\n",
        report.items.len(),
        report.total_samples,
        report.outside_samples,
        flagged,
        report.mad_k
    );
    let _ = writeln!(
        s,
        "{:>4}  {:<6} {:>10} {:>8} {:>7}  {:<5} {:<4}  top functions ({})",
        "id",
        "class",
        "duration",
        "samples",
        "score",
        "flag",
        "log",
        report.shown_estimator.describe()
    );
    let mut rows: Vec<_> = report.items.iter().collect();
    // Flagged queries first, then the slowest.
    rows.sort_by_key(|r| (std::cmp::Reverse(r.anomalous), std::cmp::Reverse(r.duration_ns)));
    let shown = rows.iter().filter(|r| r.anomalous).count().max(8) + 4;
    for r in rows.iter().take(shown) {
        let tops: Vec<String> =
            r.functions.iter().take(3).map(|f| format!("{} {}", f.name, duration(f.shown_ns(report.shown_estimator) as u64))).collect();
        let log = match truth.get(&r.id) {
            Some(t) if t.cold => "cold",
            Some(_) => "warm",
            None => "-",
        };
        let _ = writeln!(
            s,
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
        let _ = writeln!(s, "   ... {} more (all in report.html and items.json)", rows.len() - shown);
    }
    s
}

/// The demo's accuracy line.
pub fn accuracy_line(a: &Accuracy, min_intervals: f64) -> String {
    format!(
        "accuracy vs the example's own clock (functions >= {min_intervals} sample intervals, {} pairs): \
         samples x interval = {:.3} +- {:.3} of the truth; first-to-last span = {:.3} +- {:.3}",
        a.pairs, a.count_mean_ratio, a.count_sd_ratio, a.span_mean_ratio, a.span_sd_ratio
    )
}

/// One `--accuracy-sweep` progress line.
pub fn accuracy_sweep_line(a: &Accuracy) -> String {
    format!(
        "period {:>8}: {:>4} pairs, samples x interval {:.3} +- {:.3}, span {:.3} +- {:.3}",
        duration(a.period_ns),
        a.pairs,
        a.count_mean_ratio,
        a.count_sd_ratio,
        a.span_mean_ratio,
        a.span_sd_ratio
    )
}

/// The accuracy table of `docs/ACCURACY.md` (Markdown).
pub fn accuracy_markdown(results: &[Accuracy]) -> String {
    let mut md = String::from(
        "| period | pairs | samples x interval: mean est/truth | sd | first-to-last span: mean est/truth | sd |\n|---|---|---|---|---|---|\n",
    );
    for a in results {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            duration(a.period_ns),
            a.pairs,
            a.count_mean_ratio,
            a.count_sd_ratio,
            a.span_mean_ratio,
            a.span_sd_ratio
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_sources() {
        let a = AlphaSource { alpha_ns: 12_300.0, ci_ns: Some((11_900.0, 12_800.0)), calibration: None, path: Some("/c/x.json".into()) };
        assert_eq!(describe_alpha(&a), "12.30 µs [11.90 µs, 12.80 µs] per sample (calibration /c/x.json)");
        let b = AlphaSource { alpha_ns: 850.0, ci_ns: None, calibration: None, path: None };
        assert_eq!(describe_alpha(&b), "850 ns per sample (--alpha)");
    }

    #[test]
    fn accuracy_table() {
        let a = Accuracy {
            period_ns: 250_000,
            mean_interval_ns: 250_000.0,
            pairs: 3,
            count_mean_ratio: 1.0,
            count_sd_ratio: 0.05,
            span_mean_ratio: 0.9,
            span_sd_ratio: 0.1,
            items_matched: 4,
        };
        let md = accuracy_markdown(std::slice::from_ref(&a));
        assert_eq!(md.lines().count(), 3);
        assert!(md.lines().nth(2).unwrap().ends_with("| 3 | 1.000 | 0.050 | 0.900 | 0.100 |"), "{md}");
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["pairs"], 3);
        assert_eq!(v["items_matched"], 4);
    }
}
