//! `record --item-class-from BIN:SYMBOL:ARG` on a real recording: a C program "parses"
//! SQL text of two shapes with different constants (`parse_query(const char *sql)`)
//! before each request (`handle_request`, delimited by uprobes on its entry and return).
//! The fetched strings become two classes named by their shapes, and every item is in
//! the class of the query parsed just before it — with uprobe items and with items from
//! the marker library (include/tailprof.h). Root only (tracefs uprobe events); the
//! test skips with a message otherwise. No timing assertions.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef MARKED
#include "tailprof.h"
#endif

volatile unsigned long sink;

__attribute__((noinline)) void parse_query(const char *sql) {
    for (const char *p = sql; *p; p++) sink += (unsigned char)*p;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void handle_request(int kind) {
    unsigned long x = 0;
    for (long i = 0; i < 200000L * (kind + 1); i++) x += i ^ (x >> 3);
    sink += x;
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 30;
    char sql[256];
    for (int i = 0; i < n; i++) {
        int kind = i % 3 == 0;
        if (kind)
            snprintf(sql, sizeof sql, "UPDATE accounts SET balance = balance + %d WHERE id IN (%d, %d)", i * 7 - 50, i, i + 1);
        else
            snprintf(sql, sizeof sql, "SELECT name FROM users WHERE id = %d AND note = 'n%d'", 1000 + i, i);
        parse_query(sql);
#ifdef MARKED
        tailprof_item_begin(i + 1);
#endif
        handle_request(kind);
#ifdef MARKED
        tailprof_item_end(i + 1);
#endif
    }
    printf("%d\n", n);
    return 0;
}
"#;

const SELECT_SHAPE: &str = "select name from users where id = ? and note = ?";
const UPDATE_SHAPE: &str = "update accounts set balance = balance + ? where id in (?)";
const REQUESTS: usize = 30;

fn can_record() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "--item-class-from needs root (tracefs uprobe events)");
    }
    root
}

fn compile(dir: &Path, marked: bool) -> PathBuf {
    let src = dir.join("classes.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join("classes");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-g", "-I"]).arg(include);
    if marked {
        cc.arg("-DMARKED");
    }
    let st = cc.arg("-o").arg(&out).arg(&src).status().expect("cc");
    assert!(st.success(), "cc failed");
    out
}

fn tailprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).output().expect("run tailprof")
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tailprof-icf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Requests delimited by uprobes on `handle_request` (`marked` false) or by the marker
/// library's begin/end around it (`marked` true).
fn classes_from_a_string_argument(marked: bool) {
    if !can_record() {
        return;
    }
    let dir = tempdir(if marked { "marked" } else { "uprobes" });
    let exe = compile(&dir, marked);
    let exe_s = exe.display().to_string();
    let trace = dir.join("t.trace");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tailprof"));
    cmd.args(["record", "-F", "999", "-o"]).arg(&trace);
    if !marked {
        cmd.arg("--item-begin").arg(format!("{exe_s}:handle_request")).arg("--item-end").arg(format!("{exe_s}:handle_request%return"));
    }
    let o = cmd
        .arg("--item-class-from")
        .arg(format!("{exe_s}:parse_query:rdi"))
        .arg("--")
        .arg(&exe)
        .arg(REQUESTS.to_string())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "record failed: {err}");

    // The header names the definition.
    let r = tailprof_format::TraceReader::open(&trace).unwrap();
    let def = r.header().extra.get("item_class_from").cloned().unwrap_or_default();
    assert!(def.contains(":parse_query@0x") && def.contains("+0(%di):string"), "{def:?}");

    let o = tailprof(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    assert!(o.status.success(), "items failed: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = v["items"].as_array().expect("items array");
    assert_eq!(items.len(), REQUESTS, "one item per request: {}", serde_json::to_string_pretty(&v["items"]).unwrap());
    let classes: std::collections::BTreeSet<&str> = items.iter().filter_map(|i| i["class"].as_str()).collect();
    assert_eq!(classes, [SELECT_SHAPE, UPDATE_SHAPE].into_iter().collect(), "exactly the two shapes");
    // Items in start order: request i is an UPDATE when i % 3 == 0.
    for (i, it) in items.iter().enumerate() {
        let want = if i % 3 == 0 { UPDATE_SHAPE } else { SELECT_SHAPE };
        assert_eq!(it["class"].as_str(), Some(want), "request {i}: {it}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn classes_from_a_string_argument_with_uprobe_items() {
    classes_from_a_string_argument(false);
}

#[test]
fn classes_from_a_string_argument_with_marker_items() {
    classes_from_a_string_argument(true);
}

#[test]
fn errors_name_the_fix() {
    if !can_record() {
        return;
    }
    let dir = tempdir("errors");
    let exe = compile(&dir, false);
    let exe_s = exe.display().to_string();
    let trace = dir.join("t.trace");
    let o = tailprof(&["record", "-o", trace.to_str().unwrap(), "--item-class-from", &format!("{exe_s}:parse_qeury:rdi"), "--", &exe_s]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("symbol 'parse_qeury' not found") && err.contains("parse_query"), "{err}");
    let o = tailprof(&["record", "-o", trace.to_str().unwrap(), "--item-class-from", &format!("{exe_s}:parse_query:zz"), "--", &exe_s]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("unknown register") && err.contains("rdi"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
