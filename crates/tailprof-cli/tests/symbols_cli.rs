//! `tailprof report/info` on a stripped binary as it ships: `.eh_frame` range names
//! (`fn_<addr>`), then real names with `--debug-dir` (build-id layout), and
//! `info --symbols`. Records a real run (needs perf_event_open; skips when refused).

use std::path::Path;
use std::process::{Command, Output};

const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static unsigned spin_here(unsigned n) {
    unsigned x = n | 1;
    for (unsigned i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; x += i; }
    return x;
}
int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
    printf("%u\n", spin_here(n));
    return 0;
}
"#;

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn ok(c: &mut Command) -> Output {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn top_function(report: &serde_json::Value, binary: &Path) -> String {
    let b = binary.to_str().unwrap();
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["binary"].as_str() == Some(b))
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no row of {b}: {report}"))
}

#[test]
fn stripped_binary_then_debug_dir() {
    let o = tailprof().args(["record", "-o", "/dev/null", "--", "true"]).output().unwrap();
    if !o.status.success() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::PerfEvents,
            format_args!("recording is not possible here: {}", String::from_utf8_lossy(&o.stderr)),
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("p.c"), PROG).unwrap();
    let full = dir.join("p.full");
    ok(Command::new("cc").args(["-O2", "-g", "-Wl,--build-id", "-o"]).arg(&full).arg(dir.join("p.c")));
    let bin = dir.join("prog");
    ok(Command::new("strip").arg("-o").arg(&bin).arg(&full));
    // The function's address (what its range name says) and the build-id.
    let nm = String::from_utf8(ok(Command::new("nm").arg(&full)).stdout).unwrap();
    let addr = nm.lines().find(|l| l.ends_with(" spin_here")).expect("spin_here in nm").split(' ').next().unwrap();
    let addr = u64::from_str_radix(addr, 16).unwrap();
    let notes = String::from_utf8(ok(Command::new("readelf").arg("-n").arg(&full)).stdout).unwrap();
    let id = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).unwrap().trim().to_owned();

    let trace = dir.join("t.trace");
    ok(tailprof().arg("record").arg("-o").arg(&trace).arg("--").arg(&bin).arg("100000000"));

    // Stripped: the function's .eh_frame range.
    let r = json(&ok(tailprof().arg("report").arg(&trace).arg("--json")));
    assert_eq!(top_function(&r, &bin), format!("fn_{addr:x}"));

    // --debug-dir with the build-id layout: its real name.
    let dd = dir.join("debug");
    let dst = dd.join(".build-id").join(&id[..2]).join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    ok(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&dst));
    let r = json(&ok(tailprof().arg("report").arg(&trace).arg("--json").arg("--debug-dir").arg(&dd)));
    assert_eq!(top_function(&r, &bin), "spin_here");

    // info --symbols says where the names come from.
    let i = json(&ok(tailprof().arg("info").arg(&trace).args(["--json", "--symbols", "--debug-dir"]).arg(&dd)));
    let e = i["symbols"]
        .as_array()
        .expect("symbols array")
        .iter()
        .find(|s| s["binary"].as_str() == bin.to_str())
        .unwrap_or_else(|| panic!("{bin:?} not in {}", i["symbols"]))
        .clone();
    assert_eq!(e["debug_file"].as_str(), dst.to_str(), "{e}");
    assert!(e["source"].as_str().unwrap().contains("build-id"), "{e}");
    assert_eq!(e["symtab"], false);
}
