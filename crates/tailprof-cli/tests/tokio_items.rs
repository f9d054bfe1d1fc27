//! Requests on a real Tokio multi-thread runtime (issue 24): 60 concurrent tasks on two
//! workers, each a request with a request-specific CPU split around awaits, recorded with
//! `tailprof record`; the workload is this test binary itself (tests/tokio_items/server.rs),
//! re-run under the recorder. Marked two ways, one test each:
//!
//! - `fut.in_item(id, &REQUEST)` (the `Future` adapter);
//! - `tracing`: each task `.instrument(info_span!("request", tailprof.item_id = id,
//!   trace_id = .., span_id = ..))` with `TailprofLayer` installed (feature `tracing`).
//!
//! Checked: one item per task; tasks migrated between the workers (the program logs the
//! threads that polled each task, and each item's `switching.threads` is that number);
//! each item's on-CPU estimate (samples × period) matches the task's own CPU time (thread
//! CPU clock around its work) within sampling error for items with ≥ 20 samples, the sum
//! within 5%; for `tracing`, the class is the span name and the trace context is the
//! span's. Skips with a message when perf events cannot be opened. The bounds are
//! statistical, never timings.

mod async_common;
#[path = "tokio_items/server.rs"]
mod server;

use async_common::*;

/// The workload, run only inside `tailprof record` (see the tests below).
#[test]
fn tokio_workload() {
    let mode = match std::env::var("TAILPROF_TOKIO_WORKLOAD").as_deref() {
        Ok("in_item") => server::Mode::InItem,
        Ok("tracing") => server::Mode::Tracing,
        _ => return,
    };
    server::run(mode);
}

fn record_tokio(mode: &str) -> Option<(serde_json::Value, String)> {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cmd = [exe.to_str().unwrap(), "--exact", "tokio_workload", "--nocapture", "--test-threads", "1"];
    let (trace, out) = record(dir.path(), mode, &cmd, &[("TAILPROF_TOKIO_WORKLOAD", mode)])?;
    Some((items_json(&trace), out))
}

/// The checks both ways of marking share.
fn check_tasks(v: &serde_json::Value, out: &str) {
    let truth = logged(out, "truth");
    let threads = logged(out, "threads");
    assert_eq!(truth.len(), server::TASKS as usize, "{out}");
    let est = samples_times_interval(v);
    let compared = check_against_truth(v, &truth, server::PARTS as f64, &est);
    assert!(compared >= 30, "only {compared} items had 20 samples: {v}");
    let items = v["items"].as_array().unwrap();
    let moved = items
        .iter()
        .filter(|it| {
            let id = it["id"].as_u64().unwrap();
            let n = it["switching"]["threads"].as_u64().unwrap();
            // Every poll is current time on its thread, however short.
            assert_eq!(n, threads[&id], "item {id}: {it}");
            n > 1
        })
        .count();
    assert!(moved > 0, "no task moved between the workers: {out}");
    eprintln!("{compared} items compared, {moved} of {} moved between the workers", items.len());
    assert_eq!(v["switching"]["threads"], 2, "{}", v["switching"]);
    assert_eq!(v["ambiguity"]["items"], 0, "{}", v["ambiguity"]);
    assert_eq!(v["unmatched_markers"], 0, "{v}");
    for it in items {
        assert_eq!(it["class"], "request", "{it}");
        // Begin + a resume after each of the PARTS awaits, at least.
        let resumes = it["switching"]["resumes"].as_u64().unwrap();
        assert!(resumes > server::PARTS, "{it}");
        assert!(it["cpu_ns"].as_u64().unwrap() <= it["switching"]["current_ns"].as_u64().unwrap(), "on-CPU time only while current: {it}");
    }
}

#[test]
fn tokio_in_item_tasks_are_one_item_each_across_workers() {
    let Some((v, out)) = record_tokio("in_item") else {
        return;
    };
    check_tasks(&v, &out);
}

#[test]
fn tokio_tracing_spans_are_one_item_each_across_workers() {
    let Some((v, out)) = record_tokio("tracing") else {
        return;
    };
    check_tasks(&v, &out);
    for it in v["items"].as_array().unwrap() {
        let id = it["id"].as_u64().unwrap();
        let (t, s) = server::ids(id);
        assert_eq!(it["trace_id"], t.as_str(), "{it}");
        assert_eq!(it["span_id"], s.as_str(), "{it}");
    }
}
