//! The pictures of per-item attribution: the HTML report (stacked bars, one per item)
//! and the Perfetto export (valid JSON; items on thread tracks; functions nested inside
//! items without overlapping; samples as instants), on a small synthetic report.

use std::collections::BTreeMap;

use serde_json::Value;
use tailprof_analyze::items::{ClassStats, Estimator, ItemFunction, ItemRow, ItemsReport};
use tailprof_present::html::{accuracy_svg, render_items_html, AccuracyPoint, HtmlOptions};
use tailprof_present::perfetto::{perfetto_json, PerfettoOptions, SampleInstant};

const MS: u64 = 1_000_000;

fn func(name: &str, first: u64, samples: u64) -> ItemFunction {
    ItemFunction {
        name: name.to_string(),
        binary: "/demo/queries".to_string(),
        samples,
        first_ns: first,
        last_ns: first + samples.saturating_sub(1) * MS / 4,
        span_ns: samples.saturating_sub(1) * MS / 4,
        est_ns: samples as f64 * MS as f64 / 4.0,
        reliable: samples >= 5,
        source: None,
    }
}

/// 12 queries on one thread, two classes; queries 1 and 2 are cold: transform_points
/// takes most of their time. One function name needs escaping.
fn report() -> ItemsReport {
    let mut items = Vec::new();
    let mut t = 1_000 * MS;
    for id in 1..=12u64 {
        let n = if id % 2 == 0 { 20 } else { 10 };
        let cold = id <= 2;
        let load = n / 2; // samples
        let transform = if cold { 4 * n } else { 1 };
        let reduce = n / 2;
        let begin = t;
        let f_load = func("load_points", begin + 10_000, load);
        let f_tr = func("transform_points", begin + load * MS / 4 + 10_000, transform);
        let f_red = func("reduce_<b>&points", begin + (load + transform) * MS / 4 + 10_000, reduce);
        let end = begin + (load + transform + reduce) * MS / 4 + 50_000;
        items.push(ItemRow {
            pid: 100,
            tid: 101,
            id,
            class: Some(format!("n={n}")),
            begin_ns: begin,
            end_ns: end,
            duration_ns: end - begin,
            samples: load + transform + reduce,
            anomaly_score: if cold { 40.0 } else { 0.5 },
            anomalous: cold,
            responsible: if cold { vec!["transform_points".into()] } else { vec![] },
            open_at_end: false,
            switching: None,
            current: Vec::new(),
            ambiguous_samples: 0,
            ambiguous: false,
            trace_id: None,
            span_id: None,
            functions: vec![f_tr, f_load, f_red],
            events: Default::default(),
        });
        t = end + 300_000;
    }
    ItemsReport {
        items,
        outside_samples: 7,
        total_samples: 500,
        shown_estimator: Estimator::CountTimesInterval,
        mean_interval_ns: 250_000.0,
        interval_source: "period".into(),
        lost_markers: 0,
        unmatched_markers: 0,
        open_at_end: 0,
        markers: 24,
        mode: "markers".into(),
        duration_source: "markers".into(),
        event: "cpu-clock".into(),
        min_reliable_samples: 5,
        mad_k: 3.5,
        responsible_share: 0.6,
        switching: Default::default(),
        ambiguity: Default::default(),
        classes: vec![
            ClassStats { class: Some("n=10".into()), items: 6, median_duration_ns: 3 * MS, mad_ns: 10_000, anomalous: 1 },
            ClassStats { class: Some("n=20".into()), items: 6, median_duration_ns: 6 * MS, mad_ns: 10_000, anomalous: 1 },
        ],
        item_events: 0,
        item_events_outside: 0,
    }
}

#[test]
fn html_has_one_bar_per_item_and_marks_anomalies() {
    let r = report();
    let page = render_items_html(&r, &HtmlOptions::default());
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<svg").count(), 1);
    assert_eq!(page.matches("<g class=\"bar").count(), r.items.len());
    assert_eq!(page.matches("<g class=\"bar anomalous\"").count(), 2);
    // Explanations of the anomalous items name the uncached function.
    assert!(page.contains("Anomalous items explained"));
    assert!(page.contains("Responsible: <b>transform_points</b>"), "{page}");
    // Every function has a legend entry, text is escaped, nothing is loaded from outside.
    assert!(page.contains("reduce_&lt;b&gt;&amp;points"));
    assert!(!page.contains("reduce_<b>"));
    for bad in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!page.contains(bad), "external resource or script: {bad}");
    }
}

/// Issue 23: a JIT function's `file:line` (jitdump DEBUG_INFO, `ItemFunction::source`)
/// is shown next to its name in the HTML report's items and explanations, and in
/// Perfetto's function slices.
#[test]
fn jit_source_lines_in_html_and_perfetto() {
    let mut r = report();
    for it in &mut r.items {
        for f in &mut it.functions {
            if f.name == "transform_points" {
                f.source = Some("points.js:17".into());
            }
        }
    }
    let page = render_items_html(&r, &HtmlOptions::default());
    assert!(page.contains("transform_points (points.js:17)"), "{page}");
    assert!(!page.contains("load_points ("), "only functions with a source");
    let v: Value = serde_json::from_str(&perfetto_json(&r, &[], &PerfettoOptions::default()).unwrap()).unwrap();
    let slices: Vec<&Value> =
        v["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "function" && e["name"] == "transform_points").collect();
    assert!(!slices.is_empty());
    assert!(slices.iter().all(|e| e["args"]["source"] == "points.js:17"), "{slices:?}");
    // Left out where unknown (earlier exports are unchanged).
    let other = v["traceEvents"].as_array().unwrap().iter().find(|e| e["cat"] == "function" && e["name"] == "load_points");
    assert!(other.unwrap()["args"].get("source").is_none());
}

#[test]
fn html_of_an_empty_report_is_still_a_page() {
    let mut r = report();
    r.items.clear();
    let page = render_items_html(&r, &HtmlOptions::default());
    assert!(page.contains("<svg") && page.ends_with("</html>\n"));
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn perfetto_json_parses_and_nests() {
    let r = report();
    let samples: Vec<SampleInstant> = r
        .items
        .iter()
        .flat_map(|i| i.functions.iter().map(move |f| (i, f)))
        .map(|(i, f)| SampleInstant { pid: i.pid, tid: i.tid, time_ns: f.first_ns, function: f.name.clone() })
        .collect();
    let mut names = BTreeMap::new();
    names.insert(101, "worker".to_string());
    let text = perfetto_json(&r, &samples, &PerfettoOptions { names }).unwrap();
    let doc: Value = serde_json::from_str(&text).expect("valid JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents");

    let meta: Vec<&Value> = events.iter().filter(|e| e["ph"] == "M").collect();
    assert!(meta.iter().any(|e| e["name"] == "thread_name" && e["args"]["name"] == "worker"));
    assert!(meta.iter().any(|e| e["name"] == "process_name" && e["pid"] == 100));

    let slices = |cat: &str| -> Vec<(f64, f64, &Value)> {
        let mut v: Vec<(f64, f64, &Value)> =
            events.iter().filter(|e| e["ph"] == "X" && e["cat"] == cat).map(|e| (num(e, "ts"), num(e, "ts") + num(e, "dur"), e)).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let items = slices("item");
    let funcs = slices("function");
    assert_eq!(items.len(), r.items.len());
    assert!(items.iter().all(|(_, _, e)| e["pid"] == 100 && e["tid"] == 101));
    assert_eq!(items.iter().filter(|(_, _, e)| e["args"]["anomalous"] == true).count(), 2);
    // Items on a track do not overlap.
    for w in items.windows(2) {
        assert!(w[0].1 <= w[1].0, "items overlap: {:?} {:?}", w[0].2, w[1].2);
    }
    // Every function slice lies inside exactly the item it names, siblings do not overlap.
    let eps = 1e-6;
    for (b, e, ev) in &funcs {
        let id = ev["args"]["item"].as_u64().unwrap();
        let (ib, ie, _) = items.iter().find(|(_, _, it)| it["args"]["id"] == id).expect("parent item");
        assert!(*b >= ib - eps && *e <= ie + eps, "function {ev} outside item {id}");
        assert!(e > b, "empty slice {ev}");
    }
    for w in funcs.windows(2) {
        assert!(w[0].1 <= w[1].0 + eps, "siblings overlap: {} {}", w[0].2, w[1].2);
    }
    assert_eq!(funcs.len(), 3 * r.items.len());
    // The cold items' transform_points slice is the estimate (4n samples x 250 us).
    let tr1 = funcs.iter().find(|(_, _, e)| e["args"]["item"] == 1 && e["name"] == "transform_points").unwrap();
    assert!(((tr1.1 - tr1.0) - 40.0 * 250.0).abs() < 1e-3);

    let instants: Vec<&Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(instants.len(), samples.len());
    assert!(instants.iter().all(|e| e["s"] == "t" && e["name"].is_string()));
}

#[test]
fn accuracy_plot_is_svg_with_one_marker_per_point() {
    let pts = [
        AccuracyPoint { period_ns: 50_000, mean_ratio: 1.01, std_ratio: 0.02, items: 90 },
        AccuracyPoint { period_ns: 250_000, mean_ratio: 0.98, std_ratio: 0.06, items: 60 },
    ];
    let svg = accuracy_svg(&[("samples x interval", &pts), ("span", &pts)]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle").count(), 2 * 2 + 2); // points + legend
}
