//! Shared by tests/async_items.rs and tests/tokio_items.rs: recording a workload with
//! `tailprof record`, reading `items --json`, and comparing per-item on-CPU time with the
//! CPU time the workload measured itself.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn have(cmd: &str) -> bool {
    tailprof_testkit::have_command(cmd).is_some()
}

pub fn cannot_record(err: &str) -> bool {
    ["perf_event_open", "perf_event_paranoid", "Permission denied", "not permitted"].iter().any(|s| err.contains(s))
}

/// `record -o TRACE -- CMD` (extra `env`); the trace and the command's stdout, or None
/// (skip) when perf events cannot be opened here.
pub fn record(dir: &Path, name: &str, cmd: &[&str], env: &[(&str, &str)]) -> Option<(PathBuf, String)> {
    let trace = dir.join(format!("{name}.trace"));
    let o = tailprof()
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .args(cmd)
        .envs(env.iter().copied())
        .env("TAILPROF_CACHE_DIR", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    if !o.status.success() {
        if cannot_record(&err) {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("cannot record here: {err}"));
            return None;
        }
        panic!("record failed: {err}\n{}", String::from_utf8_lossy(&o.stdout));
    }
    Some((trace, String::from_utf8_lossy(&o.stdout).into_owned()))
}

pub fn items_json(trace: &Path) -> Value {
    let out = tailprof().args(["items", "--json", "--top", "0"]).arg(trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    assert!(out.status.success(), "items: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `key ID VALUE` lines of a program's output.
pub fn logged(out: &str, key: &str) -> HashMap<u64, u64> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == key).then_some(())?;
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// Per item, `est(item)` (ns) against the logged truth (ns): within sampling error for
/// items with ≥ 20 samples, the sum within 5%. Returns how many items were compared.
pub fn check_against_truth(v: &Value, truth: &HashMap<u64, u64>, parts: f64, est: &dyn Fn(&Value) -> f64) -> usize {
    let interval = v["mean_interval_ns"].as_f64().unwrap();
    assert!(interval > 0.0, "{v}");
    let items = v["items"].as_array().unwrap();
    let (mut sum_est, mut sum_truth, mut compared) = (0.0, 0.0, 0);
    for it in items {
        let id = it["id"].as_u64().unwrap();
        let t = *truth.get(&id).unwrap_or_else(|| panic!("item {id} is not a request of the program: {it}")) as f64;
        let e = est(it);
        sum_est += e;
        sum_truth += t;
        if it["samples"].as_u64().unwrap() >= 20 {
            let n = t / interval;
            let bound = (4.0 * n.sqrt() + parts + 2.0) * interval;
            assert!((e - t).abs() <= bound, "item {id}: estimated {e:.0} ns, measured {t:.0} ns (bound {bound:.0}): {it}");
            compared += 1;
        }
    }
    let ids: Vec<u64> = items.iter().map(|it| it["id"].as_u64().unwrap()).collect();
    assert_eq!(
        items.len(),
        truth.len(),
        "one item per request: items {ids:?}; switching {}, unmatched {}, markers {}, lost {}",
        v["switching"],
        v["unmatched_markers"],
        v["markers"],
        v["lost_markers"]
    );
    let ratio = sum_est / sum_truth;
    assert!((0.95..=1.05).contains(&ratio), "sum over items {sum_est:.0} ns vs measured {sum_truth:.0} ns ({ratio:.3})");
    compared
}

pub fn samples_times_interval(v: &Value) -> impl Fn(&Value) -> f64 {
    let interval = v["mean_interval_ns"].as_f64().unwrap();
    move |it: &Value| it["samples"].as_u64().unwrap() as f64 * interval
}
