//! End-to-end tests of `tailprof stat`, `calibrate`, `plan` and `overhead`: each runs on
//! a tiny workload with few runs and prints JSON with the documented keys; bad input
//! gets one clear line and a non-zero exit. Calibration files go to a temporary
//! TAILPROF_HOME. No test asserts a timing: the machine is shared and noisy.
//!
//! Counting and recording need perf_event_open for software events; the tests skip
//! (and say so) where it is refused.

use std::path::Path;
use std::process::{Command, Output};

use tailprof_analyze::overhead::{Basis, Calibration, Point, CALIBRATION_VERSION};
use tailprof_collect::caps::Capabilities;
use tailprof_measure::calibration::{dir_in, path_in, probe_machine, save_in};

fn tailprof(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tailprof"));
    c.env("TAILPROF_HOME", home);
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}\nstderr: {}", String::from_utf8_lossy(&o.stdout), stderr(o)))
}

fn has_keys(v: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        assert!(v.get(k).is_some(), "missing key {k:?} in {v:#}");
    }
}

/// A few milliseconds of shell arithmetic: enough for a handful of samples at 100 µs.
const SPIN: [&str; 3] = ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"];

/// Can this process count a software event on a child? (root or paranoid <= 2)
fn can_count() -> bool {
    let home = tempfile::tempdir().unwrap();
    let o = tailprof(home.path()).args(["stat", "-e", "task-clock", "--", "true"]).output().unwrap();
    if !o.status.success() {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("counting is not possible here: {}", stderr(&o)));
        return false;
    }
    true
}

/// A bad-input case: non-zero exit, exactly one line on stderr, containing `want`.
fn fails_with_one_line(o: &Output, want: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "want one line, got: {err}");
    assert!(err.contains(want), "want {want:?} in: {err}");
}

/// Store a calibration for `event` the way `tailprof calibrate` would, for this machine,
/// under TAILPROF_HOME=`home`; returns the file.
fn store_calibration(home: &Path, event: &str, alpha_ns: f64) -> std::path::PathBuf {
    let key = probe_machine();
    let cal = Calibration {
        version: CALIBRATION_VERSION,
        event: event.into(),
        cpu_model: key.cpu_model.clone(),
        kernel: key.kernel.clone(),
        online_cpus: key.online_cpus,
        basis: Basis::Cpu,
        alpha_ns,
        alpha_ci_ns: (alpha_ns * 0.9, alpha_ns * 1.1),
        r2: 0.99,
        intercept_s: 0.5,
        bytes_per_sample: Some(2.0),
        recorder_cpu_ns_per_sample: Some(200.0),
        periods: vec![1_000_000, 100_000],
        points: vec![Point { group: 0, samples: 0.0, time_s: 0.5 }],
        created_unix: 0,
        tailprof_version: "test".into(),
        loadavg: None,
        notes: vec![],
    };
    save_in(&dir_in(home), &key, &cal).unwrap()
}

#[test]
fn stat_prints_counts_and_passes_the_exit_status_through() {
    if !can_count() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let o = tailprof(home.path()).args(["stat", "-e", "task-clock", "-e", "page-faults", "--json", "--"]).args(SPIN).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    has_keys(&v, &["elapsed_s", "exit_status", "events", "multiplexed", "counters"]);
    let evs = v["events"].as_array().unwrap();
    assert_eq!(evs.len(), 2);
    for e in evs {
        has_keys(e, &["name", "count", "scaled", "rate_per_s", "time_enabled_ns", "time_running_ns", "running_pct", "multiplexed"]);
        // Software events are never multiplexed.
        assert_eq!(e["multiplexed"], false);
        assert_eq!(e["time_enabled_ns"], e["time_running_ns"]);
    }
    assert!(evs[0]["count"].as_u64().unwrap() > 0);

    let o = tailprof(home.path()).args(["stat", "--", "sh", "-c", "exit 3"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("task-clock") && out.contains("page-faults"), "{out}");
    assert!(stderr(&o).contains("exited with status 3"), "{}", stderr(&o));
}

#[test]
fn calibrate_fits_or_refuses_and_saves_only_an_accepted_fit() {
    if !can_count() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let o = tailprof(home.path())
        .args(["calibrate", "--basis", "cpu", "--repeats", "3", "--seconds", "0.1", "--periods", "1000000,500000,200000", "--json"])
        .output()
        .unwrap();
    let v = json(&o);
    has_keys(&v, &["event", "accepted", "alpha_ns", "alpha_ci_ns", "r2", "basis", "periods", "points", "saved_to", "bytes_per_sample"]);
    assert_eq!(v["event"], "cpu-clock");
    // 3 runs of every design point kept (a period the pilot predicts to be too slow
    // would be skipped; none of these is).
    let rows = v["periods"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "unprofiled + 3 periods: {v:#}");
    assert!(rows.iter().all(|r| r["runs"] == 3), "{v:#}");
    assert_eq!(v["points"].as_array().unwrap().len(), 3 * rows.len());
    let accepted = v["accepted"].as_bool().unwrap();
    let files = std::fs::read_dir(home.path().join("calibration")).map(|d| d.count()).unwrap_or(0);
    if accepted {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(files, 1);
        let saved = v["saved_to"].as_str().unwrap();
        assert_eq!(Path::new(saved), path_in(&dir_in(home.path()), &probe_machine(), "cpu-clock"));
        let cal: Calibration = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
        assert_eq!(cal.basis, Basis::Cpu);
        assert!(cal.alpha_ns > 0.0);
    } else {
        // A noisy moment: the refusal is one line with the reason and what to do.
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(files, 0);
        assert!(v["reason"].is_string() && v["advice"].is_string(), "{v:#}");
        fails_with_one_line(&o, "calibration not saved");
    }
}

#[test]
fn overhead_prints_the_documented_json() {
    if !can_count() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let o = tailprof(home.path())
        .args(["overhead", "-c", "100000", "--runs", "2", "--warmup", "0", "--alpha", "10000", "--json", "--"])
        .args(SPIN)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    has_keys(
        &v,
        &["base_s", "profiled_s", "overhead_pct", "overhead_ci_pct", "samples", "alpha_ns", "predicted_s", "error_pct", "cpu", "threads"],
    );
    assert_eq!(v["overhead_ci_pct"].as_array().unwrap().len(), 2);
    assert_eq!(v["alpha_ns"], 10000.0);
    assert_eq!(v["base_runs_s"].as_array().unwrap().len(), 2);
    // predicted = base + α × samples / threads, exactly.
    let (b, n, t, p) =
        (v["base_s"].as_f64().unwrap(), v["samples"].as_f64().unwrap(), v["threads"].as_f64().unwrap(), v["predicted_s"].as_f64().unwrap());
    assert!((p - (b + 1e-5 * n / t)).abs() < 1e-9, "{v:#}");
    let e = v["error_pct"].as_f64().unwrap();
    let m = v["profiled_s"].as_f64().unwrap();
    assert!((e - (m - p) / p * 100.0).abs() < 1e-9);

    // Two pinned copies at once, α from a stored calibration.
    store_calibration(home.path(), "cpu-clock", 10_000.0);
    let o = tailprof(home.path())
        .args(["overhead", "-c", "200000", "--runs", "1", "--warmup", "0", "--instances", "2", "--pin", "--json", "--"])
        .args(SPIN)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["instances"], 2);
    assert_eq!(v["alpha_ns"], 10000.0);
    assert_eq!(v["calibration_basis"], "cpu");
    assert!(v["predicted_s"].is_number());
}

#[test]
fn plan_recommends_a_period_within_the_budget() {
    if !can_count() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    store_calibration(home.path(), "cpu-clock", 12_000.0);
    let o = tailprof(home.path()).args(["plan", "--budget", "5%", "--json", "--"]).args(SPIN).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    has_keys(
        &v,
        &[
            "period",
            "predicted_overhead_pct",
            "sample_interval_ns",
            "samples_per_s",
            "trace_mb_per_s",
            "ring_pages_per_cpu",
            "record_command",
        ],
    );
    // α = 12 µs, 5%: period ≥ α (1 + b) / b = 252 µs, rounded up to 2 digits.
    assert_eq!(v["period"], 260_000);
    assert!(v["predicted_overhead_pct"].as_f64().unwrap() <= 5.0);
    assert!(v["pebs"].is_null());
    assert!(v["ring_pages_per_cpu"].as_u64().unwrap().is_power_of_two());

    // A counted event with --alpha (no calibration needed): the count model.
    let o = tailprof(home.path())
        .args(["plan", "--budget", "1", "-e", "page-faults", "--alpha", "500", "--json", "--"])
        .args(SPIN)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert!(v["events_per_cpu_s"].as_f64().unwrap() > 0.0, "{v:#}");
    assert!(v["predicted_overhead_pct"].as_f64().unwrap() <= 1.0 + 1e-9);

    // Text output names the period and the record command.
    let o = tailprof(home.path()).args(["plan", "--budget", "5", "--"]).args(SPIN).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("-c 260000") && out.contains("tailprof record -e cpu-clock -c 260000"), "{out}");
}

/// Issue 10: a hand-edited calibration (α = −5, NaN, absurd) is refused on load with one
/// line naming the file, the value and the fix; `plan` and `overhead` never use it.
#[test]
fn hand_edited_calibration_is_refused_with_one_line() {
    let home = tempfile::tempdir().unwrap();
    let file = store_calibration(home.path(), "cpu-clock", 12_000.0);
    let good = std::fs::read_to_string(&file).unwrap();
    assert!(good.contains("\"alpha_ns\": 12000.0"), "{good}");
    for bad in ["-5.0", "NaN", "\"x\"", "1e300"] {
        std::fs::write(&file, good.replace("\"alpha_ns\": 12000.0", &format!("\"alpha_ns\": {bad}"))).unwrap();
        for args in [&["plan", "--budget", "2", "--", "true"][..], &["overhead", "--runs", "1", "--", "true"][..]] {
            let o = tailprof(home.path()).args(args).output().unwrap();
            let err = stderr(&o);
            fails_with_one_line(&o, &file.display().to_string());
            assert!(err.contains("tailprof calibrate -e cpu-clock"), "{bad}: {err}");
            if bad == "-5.0" {
                assert!(err.contains("alpha_ns = -5"), "{err}");
            }
        }
    }
}

#[test]
fn bad_input_gets_one_line_and_a_nonzero_exit() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| tailprof(home.path()).args(args).output().unwrap();
    fails_with_one_line(&run(&["plan", "--budget", "abc", "--", "true"]), "percentage between 0 and 100");
    fails_with_one_line(&run(&["plan", "--budget", "150", "--", "true"]), "percentage between 0 and 100");
    fails_with_one_line(&run(&["plan", "--budget", "2", "--", "true"]), "no calibration for 'cpu-clock'");
    fails_with_one_line(&run(&["plan", "--budget", "2", "--alpha=-5", "--", "true"]), "--alpha must be a non-negative number");
    fails_with_one_line(&run(&["plan", "--budget", "2", "--alpha", "1e12", "--", "true"]), "at most 10 ms");
    fails_with_one_line(&run(&["stat", "-e", "no-such-event", "--", "true"]), "unknown event 'no-such-event'");
    fails_with_one_line(&run(&["overhead", "--alpha", "1", "--", "tailprof-no-such-cmd"]), "command not found: tailprof-no-such-cmd");
    fails_with_one_line(&run(&["calibrate", "-e", "page-faults"]), "cannot calibrate 'page-faults'");
    fails_with_one_line(&run(&["stat"]), "no command");
    if !can_count() {
        return;
    }
    let o = run(&["overhead", "--alpha", "1000", "--runs", "1", "--warmup", "0", "--", "sh", "-c", "exit 4"]);
    fails_with_one_line(&o, "the command failed with exit status 4");
    let o = run(&["plan", "--budget", "2", "--alpha", "1000", "--", "sh", "-c", "exit 5"]);
    fails_with_one_line(&o, "exited with status 5");
    if !Capabilities::probe().has_cpu_pmu {
        fails_with_one_line(&run(&["stat", "-e", "cycles", "--", "true"]), "no hardware PMU");
    }
}
