//! Completeness of frame-pointer stacks (issue 7): the recorder stores fp chains as
//! `unknown` (it has only addresses), `report` judges them after symbolization: complete
//! when the outermost user frame is a process or thread entry (`__libc_start_call_main`,
//! `start_thread`, `_start`, …), broken when the chain ended in another function (frame
//! pointers omitted), truncated (`max_depth`) when the kernel's `perf_event_max_stack` cut
//! it. Checked through `report --by stack --json` on real programs:
//!
//! * the two-caller C program built `-fno-omit-frame-pointer`, recorded with `-g`: ≥ 99 %
//!   of the stacks complete, and every stack row's `complete` agrees with the counts;
//! * the same built `-fomit-frame-pointer`: mostly broken;
//! * recursion 300 deep (more than the kernel's 127 entries): truncated, never complete.
//!
//! Needs root (perf_event_open with callchains) and gcc; skipped otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const SPLIT: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
volatile uint64_t sink;
__attribute__((noinline)) void leaf(uint64_t n) { for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void caller_a(uint64_t n) { leaf(n); sink++; }
__attribute__((noinline)) void caller_b(uint64_t n) { leaf(n); sink++; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double end = now() + atof(argv[1]);
    for (long i = 0; now() < end; i++) { if (i % 10 < 3) caller_a(20000); else caller_b(20000); }
    return 0;
}
"#;

const DEEP: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
volatile uint64_t sink;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((noinline)) void spin(double end) { while (now() < end) for (int i = 0; i < 20000; i++) sink += i; }
__attribute__((noinline)) void down(int n, double end) { if (n == 0) spin(end); else down(n - 1, end); sink++; }
int main(int argc, char **argv) { down(300, now() + atof(argv[1])); return 0; }
"#;

fn can_record() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    let gcc = Command::new("gcc").arg("--version").output().is_ok_and(|o| o.status.success());
    if !root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "needs root (perf_event_open with callchains)");
    } else if !gcc {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "needs gcc");
    }
    root && gcc
}

fn compile(dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let src_path = dir.join(format!("{name}.c"));
    std::fs::write(&src_path, src).unwrap();
    let out = dir.join(name);
    let st = Command::new("gcc").args(flags).arg("-o").arg(&out).arg(&src_path).status().expect("gcc");
    assert!(st.success(), "gcc failed on {name}");
    out
}

/// `record -g` of `bin SECS`, then `report --by stack --json`.
fn fp_stacks(dir: &Path, bin: &Path, secs: &str) -> Value {
    let trace = dir.join(format!("{}.trace", bin.file_name().unwrap().to_str().unwrap()));
    let tp = env!("CARGO_BIN_EXE_tailprof");
    let o = Command::new(tp)
        .args(["record", "-g", "-e", "cpu-clock", "-c", "250000", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(bin)
        .arg(secs)
        .output()
        .unwrap();
    assert!(o.status.success(), "record failed: {}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(tp).args(["report", "--by", "stack", "--json"]).arg(&trace).output().unwrap();
    assert!(o.status.success(), "report failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("report --json")
}

/// (samples of our program's stacks, of which complete) from the stack rows, and the
/// statuses object.
fn shares(v: &Value, needle: &str) -> (u64, u64, serde_json::Map<String, Value>) {
    let (mut n, mut complete) = (0, 0);
    for s in v["stacks"].as_array().unwrap() {
        let frames: Vec<&str> = s["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        if !frames.contains(&needle) {
            continue;
        }
        let k = s["samples"].as_u64().unwrap();
        n += k;
        if s["complete"].as_bool().unwrap() {
            complete += k;
        }
    }
    (n, complete, v["statuses"].as_object().unwrap().clone())
}

fn status(st: &serde_json::Map<String, Value>, name: &str) -> u64 {
    st.get(name).and_then(Value::as_u64).unwrap_or(0)
}

#[test]
fn fp_with_frame_pointers_is_complete() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "split_fp", SPLIT, &["-O2", "-fno-omit-frame-pointer"]);
    let v = fp_stacks(dir.path(), &bin, "3");
    let (n, complete, st) = shares(&v, "leaf");
    assert!(n >= 500, "only {n} samples in leaf: {v}");
    let pct = 100.0 * complete as f64 / n as f64;
    assert!(pct >= 99.0, "only {pct:.1} % of the leaf's fp stacks complete; statuses {st:?}");
    // The counts say the same as the rows: the judged stacks are no longer "unknown".
    let all: u64 = v["stacks"].as_array().unwrap().iter().map(|s| s["samples"].as_u64().unwrap()).sum();
    let rows_complete: u64 =
        v["stacks"].as_array().unwrap().iter().filter(|s| s["complete"].as_bool().unwrap()).map(|s| s["samples"].as_u64().unwrap()).sum();
    assert_eq!(status(&st, "complete"), rows_complete, "{st:?}");
    assert!(status(&st, "unknown") * 100 <= all, "{st:?}");
}

#[test]
fn fp_without_frame_pointers_is_broken() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "split_nofp", SPLIT, &["-O2", "-fomit-frame-pointer"]);
    let v = fp_stacks(dir.path(), &bin, "3");
    let st = v["statuses"].as_object().unwrap().clone();
    let with: u64 = st.iter().filter(|(k, _)| *k != "none").map(|(_, n)| n.as_u64().unwrap()).sum();
    assert!(with >= 500, "{st:?}");
    let broken = status(&st, "broken");
    assert!(broken * 2 > with, "{broken} of {with} stacks broken, expected most: {st:?}");
    assert!(status(&st, "complete") * 10 < with, "{st:?}");
}

#[test]
fn fp_chain_of_max_depth_is_truncated() {
    if !can_record() {
        return;
    }
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(127);
    if max >= 300 {
        tailprof_testkit::skip(
            tailprof_testkit::Need::Fact,
            format_args!("kernel.perf_event_max_stack is {max}, the recursion is 300 deep"),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "deep_fp", DEEP, &["-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"]);
    let v = fp_stacks(dir.path(), &bin, "2");
    let (n, complete, st) = shares(&v, "spin");
    assert!(n >= 300, "only {n} samples in spin: {st:?}");
    assert_eq!(complete, 0, "a chain cut at the kernel's depth limit cannot be complete: {st:?}");
    assert!(status(&st, "max_depth") >= n * 9 / 10, "{st:?}");
    for s in v["stacks"].as_array().unwrap() {
        if s["frames"].as_array().unwrap().iter().any(|f| f == "spin") {
            assert_eq!(s["complete"], false);
        }
    }
}
