//! End-to-end tests of the `tailprof` binary: record real programs with perf_event_open,
//! report on them, and check that bad input gets one clear line and a non-zero exit.
//!
//! Recording needs perf_event_open for software events (root, or perf_event_paranoid
//! <= 1 for one's own processes). Tests that record say so and skip when it is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Compile `examples/<name>.c` into `dir` and return the binary's path.
fn build_example(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(examples_dir().join(format!("{name}.c")))
        .status()
        .expect("run cc");
    assert!(st.success(), "compiling examples/{name}.c failed");
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "command failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// Can this process open a software perf event on itself? (root or paranoid <= 2)
fn can_record() -> bool {
    let o = tailprof().args(["record", "-o", "/dev/null", "--", "true"]).output().unwrap();
    if !o.status.success() {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("recording is not possible here: {}", stderr(&o)));
        return false;
    }
    true
}

fn record(trace: &Path, extra: &[&str], cmd: &[&str]) -> Output {
    let mut c = tailprof();
    c.arg("record").arg("-o").arg(trace).args(extra).arg("--").args(cmd);
    c.output().unwrap()
}

fn functions(report: &serde_json::Value) -> Vec<(String, u64, f64)> {
    report["functions"]
        .as_array()
        .expect("functions array")
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), f["samples"].as_u64().unwrap(), f["percent"].as_f64().unwrap()))
        .collect()
}

#[test]
fn split_program_reports_25_75() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "split");
    let trace = dir.path().join("split.trace");
    // 10 kHz so that a short run gives thousands of samples.
    let o = record(&trace, &["-c", "100000"], &[bin.to_str().unwrap(), "300"]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let rep = json(&tailprof().arg("report").arg(&trace).arg("--json").output().unwrap());
    let fns = functions(&rep);
    let pct = |name: &str| fns.iter().find(|f| f.0 == name).map(|f| f.2).unwrap_or(0.0);
    let total: f64 = pct("work_quarter") + pct("work_three_quarters");
    assert!(total > 80.0, "the two work functions should dominate: {fns:?}");
    // Shares of the two functions, normalised over the two, against 25/75 by construction.
    let q = 100.0 * pct("work_quarter") / total;
    assert!((q - 25.0).abs() <= 5.0, "work_quarter share {q:.1}% not within 25±5: {fns:?}");
    assert!(rep["samples"].as_u64().unwrap() > 500);
}

#[test]
fn threads_carry_their_tids() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "threads");
    let trace = dir.path().join("threads.trace");
    let o = record(&trace, &["-c", "100000"], &[bin.to_str().unwrap(), "3", "300"]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let printed: Vec<u64> =
        String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| l.strip_prefix("tid ").and_then(|t| t.trim().parse().ok())).collect();
    assert_eq!(printed.len(), 3, "the program prints its 3 worker tids: {:?}", String::from_utf8_lossy(&o.stdout));
    let rep = json(&tailprof().arg("report").arg(&trace).args(["--by", "thread", "--json"]).output().unwrap());
    let tids: Vec<u64> = rep["threads"].as_array().expect("threads array").iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    for t in &printed {
        assert!(tids.contains(t), "worker tid {t} has no samples; report tids {tids:?}");
    }
}

#[test]
fn forked_and_execed_child_is_symbolized() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "forkexec");
    let trace = dir.path().join("fork.trace");
    let o = record(&trace, &["-c", "100000"], &[bin.to_str().unwrap()]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let rep = json(&tailprof().arg("report").arg(&trace).arg("--json").output().unwrap());
    let fns = functions(&rep);
    let child = fns.iter().find(|f| f.0 == "child_work").unwrap_or_else(|| panic!("child_work missing: {fns:?}"));
    assert!(child.2 > 50.0, "the exec'd child's work should dominate: {fns:?}");
}

#[test]
fn exit_status_is_passed_through() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = record(&dir.path().join("x.trace"), &[], &["sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

#[test]
fn info_json_has_the_documented_keys() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "split");
    let trace = dir.path().join("s.trace");
    assert!(record(&trace, &["-c", "200000"], &[bin.to_str().unwrap(), "100"]).status.success());
    let info = json(&tailprof().arg("info").arg(&trace).arg("--json").output().unwrap());
    for key in ["samples", "lost", "duration_ns", "bytes", "bytes_per_sample", "truncated_bytes"] {
        assert!(info.get(key).is_some(), "info --json lacks {key}: {info}");
    }
    assert!(info["samples"].as_u64().unwrap() > 0);
    assert_eq!(info["truncated_bytes"].as_u64(), Some(0));
    assert_eq!(info["bytes"].as_u64(), Some(std::fs::metadata(&trace).unwrap().len()));
}

#[test]
fn truncated_trace_reads_back_partially() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "split");
    let trace = dir.path().join("t.trace");
    // Small rounds are not guaranteed; record long enough for a few chunks.
    assert!(record(&trace, &["-c", "20000"], &[bin.to_str().unwrap(), "300"]).status.success());
    let full = std::fs::read(&trace).unwrap();
    let whole = json(&tailprof().arg("info").arg(&trace).arg("--json").output().unwrap());
    let n = whole["samples"].as_u64().unwrap();
    let cut = dir.path().join("cut.trace");
    let mut prev_samples = 0;
    for frac in [0.1, 0.35, 0.6, 0.85, 0.999] {
        let len = ((full.len() as f64) * frac) as usize;
        std::fs::write(&cut, &full[..len]).unwrap();
        let o = tailprof().arg("info").arg(&cut).arg("--json").output().unwrap();
        if !o.status.success() {
            // Only acceptable when the cut removed the header itself.
            assert!(len < 4096, "cut at {len} of {} failed: {}", full.len(), stderr(&o));
            continue;
        }
        let info = json(&o);
        let got = info["samples"].as_u64().unwrap();
        assert!(got <= n && got >= prev_samples, "samples must grow with the cut: {got} (prev {prev_samples}, full {n})");
        assert!(info["truncated_bytes"].as_u64().unwrap() > 0 || got == n);
        prev_samples = got;
        // report must work on the partial trace too.
        let r = tailprof().arg("report").arg(&cut).output().unwrap();
        assert!(r.status.success(), "report on a cut trace failed: {}", stderr(&r));
    }
}

/// One line on stderr, mentioning `needle`, and a non-zero exit.
fn assert_clean_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected exactly one error line, got: {err}");
    assert!(err.to_lowercase().contains(&needle.to_lowercase()), "error should mention {needle:?}: {err}");
}

#[test]
fn unknown_event_is_one_clear_line() {
    let o = tailprof().args(["record", "-o", "/dev/null", "-e", "no-such-event", "--", "true"]).output().unwrap();
    assert_clean_error(&o, "no-such-event");
}

#[test]
fn unwritable_output_is_one_clear_line() {
    let o = tailprof().args(["record", "-o", "/nonexistent-dir/x.trace", "--", "true"]).output().unwrap();
    assert_clean_error(&o, "/nonexistent-dir/x.trace");
}

#[test]
fn missing_command_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let o = record(&dir.path().join("x.trace"), &[], &["/no/such/command-xyz"]);
    assert_clean_error(&o, "command-xyz");
}

#[test]
fn hardware_event_without_pmu_is_explained() {
    if Path::new("/sys/bus/event_source/devices/cpu").exists() || Path::new("/sys/bus/event_source/devices/cpu_core").exists() {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "this machine has a hardware PMU");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = record(&dir.path().join("x.trace"), &["-e", "cycles"], &["true"]);
    assert_clean_error(&o, "cpu-clock");
}

#[test]
fn refused_perf_event_open_is_one_clear_line() {
    // As an unprivileged user with perf_event_paranoid >= 1, system-wide recording is refused.
    let paranoid: i32 =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(2);
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "needs root (to drop to nobody with setpriv)");
        return;
    }
    if paranoid < 1 || Command::new("setpriv").arg("--version").output().is_err() {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "needs perf_event_paranoid >= 1 and setpriv");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-a", "-o", "/tmp/tailprof-refused-test.trace"])
        .output()
        .unwrap();
    assert_clean_error(&o, "perf_event_paranoid");
}

#[test]
fn empty_and_foreign_files_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.trace");
    std::fs::write(&empty, b"").unwrap();
    for cmd in ["info", "report"] {
        let o = tailprof().arg(cmd).arg(&empty).output().unwrap();
        assert_clean_error(&o, "empty");
    }
    let foreign = dir.path().join("foreign.trace");
    std::fs::write(&foreign, b"#!/bin/sh\necho this is not a trace\n").unwrap();
    let o = tailprof().arg("info").arg(&foreign).output().unwrap();
    assert_clean_error(&o, "not a tailprof trace");
    let missing = dir.path().join("missing.trace");
    let o = tailprof().arg("report").arg(&missing).output().unwrap();
    assert_clean_error(&o, "missing.trace");
}

#[test]
fn random_byte_flips_never_panic() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("f.trace");
    assert!(record(&trace, &["-c", "100000"], &["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]).status.success());
    let good = std::fs::read(&trace).unwrap();
    let bad = dir.path().join("bad.trace");
    let mut state: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..20 {
        let mut bytes = good.clone();
        for _ in 0..4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state as usize) % bytes.len();
            bytes[i] ^= 1 << ((state >> 60) as u8 % 8);
        }
        std::fs::write(&bad, &bytes).unwrap();
        for cmd in ["info", "report"] {
            let o = tailprof().arg(cmd).arg(&bad).output().unwrap();
            let err = stderr(&o);
            assert!(!err.contains("panicked"), "{cmd} panicked on a damaged trace: {err}");
            assert!(o.status.code().is_some(), "{cmd} died from a signal");
        }
    }
}

#[test]
fn recorder_killed_with_sigkill_leaves_a_readable_trace() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = build_example(dir.path(), "threads");
    let trace = dir.path().join("killed.trace");
    let mut child = tailprof()
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["-c", "100000", "--"])
        .arg(&bin)
        .args(["1", "4000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder makes the trace durable every 2 s; kill it after the first flush.
    std::thread::sleep(std::time::Duration::from_millis(3000));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    // Let the orphaned workload finish so it does not disturb other tests for long.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let info = json(&tailprof().arg("info").arg(&trace).arg("--json").output().unwrap());
    assert!(info["samples"].as_u64().unwrap() > 0, "a killed recording keeps what it flushed: {info}");
    let rep = tailprof().arg("report").arg(&trace).arg("--json").output().unwrap();
    let fns = functions(&json(&rep));
    assert!(fns.iter().any(|f| f.0 == "busy_thread"), "samples before the kill are symbolized: {fns:?}");
}

/// Regression: a recorder that failed to start used to delete its output path, which
/// with `-o /dev/null` (as root) deleted the device node.
#[test]
fn failed_start_does_not_delete_an_existing_output_path() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("keep.trace");
    std::fs::write(&existing, b"precious").unwrap();
    let o = tailprof().arg("record").arg("-o").arg(&existing).args(["--", "/no/such/command-xyz"]).output().unwrap();
    assert!(!o.status.success());
    assert!(existing.exists(), "a path that existed before must not be removed");
    let fresh = dir.path().join("fresh.trace");
    let o = tailprof().arg("record").arg("-o").arg(&fresh).args(["--", "/no/such/command-xyz"]).output().unwrap();
    assert!(!o.status.success());
    assert!(!fresh.exists(), "an empty file this run created is cleaned up");
}

/// `record -a -- CMD`: every CPU for as long as CMD runs; CMD's exit status passes
/// through; the trace reads back. Needs system-wide recording (root or CAP_PERFMON).
#[test]
fn all_cpus_with_a_command_records_until_it_exits() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("a.trace");
    let o = record(&trace, &["-a", "-c", "100000"], &["sleep", "0.3"]);
    if !o.status.success() && stderr(&o).contains("perf_event") {
        tailprof_testkit::skip(
            tailprof_testkit::Need::SystemWide,
            format_args!("system-wide recording is not possible here: {}", stderr(&o)),
        );
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let info = json(&tailprof().arg("info").arg(&trace).arg("--json").output().unwrap());
    assert_eq!(info["truncated_bytes"].as_u64(), Some(0), "{info}");
    assert!(info["samples"].as_u64().unwrap() > 0, "{info}");
    let o = record(&dir.path().join("b.trace"), &["-a", "-c", "1000000"], &["sh", "-c", "exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
}
