//! `tailprof demo` end to end: build the paper's query application, record it, and check
//! that exactly the cold queries (the first of each n, known from the example's own
//! log) are flagged, that the uncached function is named responsible, that the pictures
//! are well-formed, and that per-item estimates match the example's own clock.
//!
//! Skips (with a message) where perf_event_open is refused or no C compiler exists.
//! Nothing here asserts a timing: the accuracy check compares two measurements of the
//! same run.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// The runs record a CPU-bound example on a 2-core machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn run_demo(dir: &Path, extra: &[&str]) -> Option<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .arg("demo")
        .arg("--out")
        .arg(dir)
        .args(extra)
        .output()
        .expect("run tailprof demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let skip = ["perf_event_open", "perf_event_paranoid", "Permission denied", "no C compiler"];
        if skip.iter().any(|s| stderr.contains(s)) {
            eprintln!("skipping: tailprof demo cannot run here: {}", stderr.trim());
            return None;
        }
        panic!("tailprof demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    }
    let text = std::fs::read_to_string(dir.join("demo.json")).expect("demo.json");
    let v: Value = serde_json::from_str(&text).expect("demo.json is JSON");
    eprintln!("{stdout}");
    Some(v)
}

fn ids(v: &Value) -> Vec<u64> {
    let mut out: Vec<u64> = v.as_array().expect("array").iter().map(|x| x.as_u64().unwrap()).collect();
    out.sort_unstable();
    out
}

#[test]
fn demo_flags_exactly_the_cold_queries_and_names_the_uncached_function() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // On a shared machine another process can really slow a warm query down, and then
    // flagging it is right. So: every run must flag all cold queries (a detection defect
    // misses them), and at least one of three runs must flag exactly the cold ones.
    let mut attempts = Vec::new();
    let (dir, s, cold) = loop {
        let dir = tempfile::tempdir().unwrap();
        let Some(s) = run_demo(dir.path(), &[]) else { return };
        let cold = ids(&s["cold_ids"]);
        assert_eq!(cold.len(), 4, "one cold query per n: {s}");
        let flagged = ids(&s["flagged_ids"]);
        assert!(cold.iter().all(|c| flagged.contains(c)), "every cold query must be flagged: {s}");
        if flagged == cold {
            break (dir, s, cold);
        }
        attempts.push(flagged);
        assert!(attempts.len() < 3, "flagged items must be exactly the cold queries {cold:?}; three runs flagged {attempts:?}");
        eprintln!("run flagged {:?} besides the cold queries (machine noise?); recording again", attempts.last());
    };
    for id in &cold {
        let resp = &s["responsible"][id.to_string()];
        assert_eq!(resp[0], "transform_points", "query {id}: responsible {resp}");
    }

    // The HTML report: one bar per query, the cold ones marked.
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    let queries = s["queries"].as_u64().unwrap() as usize;
    assert!(html.contains("<svg"));
    assert_eq!(html.matches("<g class=\"bar").count(), queries);
    assert_eq!(html.matches("<g class=\"bar anomalous\"").count(), cold.len());

    // The Perfetto trace parses, items are on the worker's track, functions nest inside.
    let text = std::fs::read_to_string(dir.path().join("trace.perfetto.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).expect("Perfetto JSON parses");
    let events = doc["traceEvents"].as_array().unwrap();
    let span = |e: &Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    let items: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "item").collect();
    assert_eq!(items.len(), queries);
    for f in events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "function") {
        let parent = items.iter().find(|i| i["args"]["id"] == f["args"]["item"] && i["tid"] == f["tid"]).unwrap();
        let ((pb, pe), (fb, fe)) = (span(parent), span(f));
        assert!(fb >= pb - 1e-6 && fe <= pe + 1e-6, "{f} outside {parent}");
    }
    assert!(events.iter().any(|e| e["ph"] == "i" && e["name"] == "transform_points"));
}

#[test]
fn per_item_estimates_match_the_truth_at_the_default_period() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // Longer queries (scale 4) so that many (query, function) pairs are at least 20
    // sample intervals (5 ms at the default 250 us period) long.
    let Some(s) = run_demo(dir.path(), &["--scale", "4"]) else { return };
    let acc = &s["accuracy"];
    assert_eq!(acc["period_ns"], 250_000);
    let pairs = acc["pairs"].as_u64().unwrap();
    assert!(pairs >= 20, "too few long pairs to judge accuracy: {acc}");
    let ratio = acc["count_mean_ratio"].as_f64().unwrap();
    assert!((ratio - 1.0).abs() <= 0.10, "mean estimate / truth = {ratio} (want within 10%): {acc}");
}
