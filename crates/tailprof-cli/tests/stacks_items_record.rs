//! Off-CPU time per item on a real recording: a marked C program (include/tailprof.h)
//! whose every third request sleeps 20 ms inside `wait_here`; `record --call-graph dwarf
//! --off-cpu` then `items --json` (DWARF: frame-pointer chains lose the caller of a libc
//! function built without frame pointers, here `wait_here` calling `usleep`). Those items show at least
//! the 20 ms blocked with `wait_here ← handle ← main` in the off-CPU stack, the others do
//! not wait there, and every item's cpu_ns + off_cpu_ns is its wall time. No timing
//! bounds beyond what the program guarantees (usleep sleeps at least 20 ms).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROG: &str = r#"
#include <unistd.h>
#include "tailprof.h"
static volatile unsigned long sink;
__attribute__((noinline)) void spin(unsigned n) { for (unsigned i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void wait_here(void) { usleep(20000); }
__attribute__((noinline)) void handle(unsigned long id) {
    spin(400000);
    if (id % 3 == 0) wait_here();
}
int main(void) {
    for (unsigned long id = 1; id <= 12; id++) {
        tailprof_item_begin(id);
        handle(id);
        tailprof_item_end(id);
    }
    return 0;
}
"#;

fn root() -> bool {
    // SAFETY: plain getter.
    let r = unsafe { libc::geteuid() } == 0;
    if !r {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording switches with stacks needs root");
    }
    r
}

fn compile(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("req.c");
    std::fs::write(&src, PROG).unwrap();
    let out = dir.join("req");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let st = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    st.success().then_some(out)
}

#[test]
fn sleeping_items_show_blocked_time_in_the_sleeping_function() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = compile(dir.path()) else {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no C compiler");
        return;
    };
    let trace = dir.path().join("req.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .arg("record")
        .args(["--call-graph", "dwarf", "--off-cpu"])
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        if err.contains("perf_event_open") || err.contains("tracefs") {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("cannot record here: {err}"));
            return;
        }
        panic!("record failed: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tailprof")).args(["items", "--json", "--top", "0"]).arg(&trace).output().unwrap();
    assert!(out.status.success(), "items: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 12, "{v}");
    assert!(v["switches"].as_u64().unwrap() > 0, "no context switches recorded with --off-cpu");
    for it in items {
        let id = it["id"].as_u64().unwrap();
        let (wall, cpu, off) = (it["duration_ns"].as_u64().unwrap(), it["cpu_ns"].as_u64().unwrap(), it["off_cpu_ns"].as_u64().unwrap());
        assert_eq!(cpu + off, wall, "item {id}");
        let waits_here = it["off_cpu"].as_array().unwrap().iter().any(|o| {
            o["state"] == "blocked"
                && o["frames"].as_array().unwrap().iter().any(|f| f == "wait_here")
                && o["ns"].as_u64().unwrap() >= 19_000_000
        });
        if id % 3 == 0 {
            assert!(it["blocked_ns"].as_u64().unwrap() >= 19_000_000, "item {id}: {it}");
            assert!(waits_here, "item {id}: no 20 ms blocked stack with wait_here: {it}");
            let frames = &it["off_cpu"][0]["frames"];
            let pos = |n: &str| frames.as_array().unwrap().iter().position(|f| f == n);
            assert!(pos("handle") < pos("wait_here") && pos("main") < pos("handle"), "root-first: {frames}");
        } else {
            assert!(!waits_here, "item {id} waited in wait_here: {it}");
        }
    }
}
