//! Issue 23 item 3, one model of source lines for native and JIT code: a function row is
//! a function (its source: the function's first line, from DWARF for native code), and
//! `report --lines` splits it by the lines of its samples' addresses. A C program built
//! with `-g -O1` whose hot function does its work on two known lines. Records a real
//! run (needs perf_event_open and a C compiler; skips when either is missing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod cfixture;

/// `work` starts on line 4; its loop body is lines 7 and 8.
const PROG: &str = r#"#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) unsigned long work(unsigned long n) {
    unsigned long x = 1, y = 2;
    for (unsigned long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + (x >> 29) * i;
        y = (y ^ (x >> 7)) * 2862933555777941757UL + (y >> 13);
    }
    return x ^ y;
}

int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
    printf("%lu\n", work(n));
    return 0;
}
"#;

fn tailprof() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tailprof"));
    c.env("TAILPROF_CACHE_DIR", "off");
    c
}

fn ok(c: &mut Command) -> Output {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// [`PROG`] compiled (`-g -O1`) and recorded for `iters` iterations into `DIR/t.trace`;
/// None after a skip (no perf_event_open, no C compiler).
fn record_work(dir: &Path, iters: &str) -> Option<PathBuf> {
    let o = tailprof().args(["record", "-o", "/dev/null", "--", "true"]).output().unwrap();
    if !o.status.success() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::PerfEvents,
            format_args!("recording is not possible here: {}", String::from_utf8_lossy(&o.stderr)),
        );
        return None;
    }
    let bin = cfixture::compile_source(dir, "work", PROG, &[])?;
    let trace = dir.join("t.trace");
    ok(tailprof().arg("record").arg("-o").arg(&trace).arg("--").arg(&bin).arg(iters));
    Some(trace)
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

/// (source, samples) of the rows of function `work`.
fn work_rows(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == "work")
        .map(|f| (f["source"].as_str().unwrap_or("").to_owned(), f["samples"].as_u64().unwrap()))
        .collect()
}

/// The line of a `…/work.c:N` source.
fn work_c_line(source: &str) -> u32 {
    let (file, line) = source.rsplit_once(':').unwrap_or_else(|| panic!("not file:line: {source:?}"));
    assert!(file.ends_with("work.c"), "{source}");
    line.parse().unwrap()
}

#[test]
fn native_functions_have_their_first_line_and_lines_split_them() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let Some(trace) = record_work(dir, "300000000") else {
        return;
    };

    // Default: one row for `work`, its source the function's first line: the DWARF line
    // of its start address, which is the declaration or a line before the loop body
    // (at -O1 the compiler puts lines 4 to 6 at the first instruction).
    let r = json(&ok(tailprof().arg("report").arg(&trace).arg("--json")));
    assert!(r.get("granularity").is_none(), "{r}");
    let rows = work_rows(&r);
    assert_eq!(rows.len(), 1, "one row per function: {rows:?}");
    let (source, total) = &rows[0];
    let first = work_c_line(source);
    assert!((4..=6).contains(&first), "first line of work: {source}");
    assert!(*total >= 100, "too few samples in work: {rows:?}");
    let text = String::from_utf8(ok(tailprof().arg("report").arg(&trace)).stdout).unwrap();
    assert!(text.lines().any(|l| l.contains(" work ") && l.trim_end().ends_with(source.as_str())), "{text}");

    // --lines: rows per (function, line), the bulk on the loop body's two lines.
    let r = json(&ok(tailprof().arg("report").arg(&trace).args(["--lines", "--json", "--top", "0"])));
    assert_eq!(r["granularity"], "line", "{r}");
    let rows = work_rows(&r);
    assert!(rows.len() >= 2, "rows per line: {rows:?}");
    assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), *total, "the lines of work sum to its samples: {rows:?}");
    let on = |line: u32| rows.iter().filter(|r| work_c_line(&r.0) == line).map(|r| r.1).sum::<u64>();
    assert!(on(7) > 0 && on(8) > 0, "rows for lines 7 and 8: {rows:?}");
    assert!(2 * (on(7) + on(8)) >= *total, "the bulk on lines 7 and 8: {rows:?}");
    let text = String::from_utf8(ok(tailprof().arg("report").arg(&trace).arg("--lines")).stdout).unwrap();
    assert!(text.contains("Line"), "{text}");
    assert!(text.lines().any(|l| l.contains(" work ") && l.trim_end().ends_with("work.c:8")), "{text}");

    // --lines is the flat profile's granularity: other views refuse it with one line.
    let o = tailprof().arg("report").arg(&trace).args(["--lines", "--by", "binary"]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--lines"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `export --lines`: folded stacks and pprof per (function, line); without it per function.
#[test]
fn export_lines_splits_frames_by_line() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let Some(trace) = record_work(dir, "200000000") else {
        return;
    };
    let folded = |lines: bool| {
        let out = dir.join(if lines { "lines.txt" } else { "fns.txt" });
        let mut c = tailprof();
        c.arg("export").arg(&trace).arg("--folded").arg(&out);
        if lines {
            c.arg("--lines");
        }
        ok(&mut c);
        std::fs::read_to_string(&out).unwrap()
    };
    // Per function: `work` bare (folded stacks are other tools' input), one line.
    let fns = folded(false);
    assert_eq!(fns.lines().filter(|l| l.starts_with("work ")).count(), 1, "{fns}");
    // Per line: `work (…/work.c:N)`, one line per line of the loop body at least.
    let lines = folded(true);
    let of_work: Vec<&str> = lines.lines().filter(|l| l.starts_with("work (")).collect();
    assert!(of_work.iter().any(|l| l.contains("work.c:7) ")) && of_work.iter().any(|l| l.contains("work.c:8) ")), "{lines}");
}
