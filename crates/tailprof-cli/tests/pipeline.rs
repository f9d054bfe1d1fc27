//! Whole-pipeline expected-output tests (issue 11 item 6): `report`, `info --full`,
//! `items`, `items --explain` and `export` run over small committed traces, and their
//! output is compared with reviewed snapshots (insta), so a change in any stage —
//! reader, address spaces, symbolizer, join, estimators, presentation — shows up as a
//! diff in `tests/snapshots/pipeline__*.snap`.
//!
//! The traces in `tests/data/` were recorded from the bundled examples (`examples/*.c`)
//! by [`regenerate_test_data`] (run it with `cargo test -p tailprof --test pipeline --
//! --ignored regenerate_test_data`, with `TAILPROF_REGENERATE=NAME,…` for some traces only;
//! it needs perf_event_open, tracefs and a C compiler). To make the
//! output the same on every machine, it records user time only (`cpu-clock:u`), leaves
//! kernel frames out of sample call stacks (off-CPU stacks keep theirs: they are read
//! with kernel symbols off, so they show as `[kernel]`, see [`tailprof_cmd`]) and rewrites every mapped file's path to
//! `/nonexistent/…`, so nothing is read from the machine's own files (nor its kernel's
//! symbols): the examples' binaries are found by build-id in the committed
//! `tests/data/.build-id/` (`--debug-dir tests/data`), system libraries stay unnamed
//! (`[unknown] libc.so.6+0x…`, the same everywhere).
//!
//! When an output changes on purpose: `INSTA_UPDATE=always cargo test -p tailprof --test
//! pipeline`, then review `git diff crates/tailprof-cli/tests/snapshots` and commit it.
//!
//! Real perf.data recordings are read in place from `../shared/testdata/perf` (never
//! copied: see that folder's README). Tests print how many they skipped because a file is
//! absent; with `TAILPROF_REQUIRE_TESTDATA=1` (set by `.ci/run`) a skip fails the test
//! when the folder is present.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// tailprof as every expected output runs it: without a debuginfod server (outputs must
/// not depend on the network), without kernel symbols (`TAILPROF_KALLSYMS=off`: kernel
/// frames are `[kernel]` on every machine, whichever boot recorded the trace; issue 18
/// item 1) and without the symbolizer's cache (`TAILPROF_CACHE_DIR=off`: nothing this
/// machine kept from earlier runs).
fn tailprof_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tailprof"));
    c.env_remove("DEBUGINFOD_URLS").env("NO_COLOR", "1").env("TAILPROF_KALLSYMS", "off").env("TAILPROF_CACHE_DIR", "off");
    c
}

/// Run tailprof in `tests/data` (relative paths keep the checkout's location out of the
/// output), as [`tailprof_cmd`].
fn tailprof_in(dir: &Path, args: &[&str]) -> String {
    let out = tailprof_cmd().args(args).current_dir(dir).output().expect("run tailprof");
    assert!(out.status.success(), "tailprof {args:?} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn tailprof(args: &[&str]) -> String {
    tailprof_in(&data_dir(), args)
}

/// JSON output, pretty-printed (one value per line: reviewable diffs).
fn pretty(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}):\n{json}"));
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

fn json(args: &[&str]) -> String {
    pretty(&tailprof(args))
}

macro_rules! snap {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ prepend_module_to_snapshot => true, omit_expression => true }, {
            insta::assert_snapshot!($name, $text);
        })
    };
}

// ---- traces recorded from the bundled examples -------------------------------------

#[test]
fn queries_without_symbols() {
    // What does not need the binaries: the trace itself, and the join by location.
    snap!("queries_info_full", json(&["info", "--full", "--json", "queries.trace"]));
    snap!("queries_report_by_binary", json(&["report", "--by", "binary", "--json", "queries.trace"]));
    snap!("queries_report_by_thread", json(&["report", "--by", "thread", "--json", "queries.trace"]));
}

/// The examples' binaries, by build-id (`.build-id/ab/cdef….debug`), relative to
/// `tests/data`.
const DEBUG_DIR: &str = ".";

/// The items pipeline: join, estimators, anomaly flags, explanation, export, with the
/// example's functions named through `--debug-dir`.
#[test]
fn queries_items_explain_export() {
    let items = json(&["items", "--json", "--debug-dir", DEBUG_DIR, "queries.trace"]);
    snap!("queries_items", &items);
    snap!("queries_items_text", tailprof(&["items", "--debug-dir", DEBUG_DIR, "queries.trace"]));
    // Explain the slowest flagged item.
    let v: serde_json::Value = serde_json::from_str(&items).unwrap();
    let rows = v["items"].as_array().expect("items array");
    let slow = rows
        .iter()
        .filter(|r| r["anomalous"] == true)
        .max_by_key(|r| r["duration_ns"].as_u64())
        .expect("queries.trace has a slow (cold) item");
    let id = slow["id"].as_u64().unwrap().to_string();
    snap!("queries_items_explain", json(&["items", "--explain", &id, "--json", "--debug-dir", DEBUG_DIR, "queries.trace"]));
    // Export: the Perfetto (Chrome JSON) trace, items and estimates in full; the sample
    // instants (one event per sample) as a digest: how many per function, first, last.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("items.json");
    tailprof(&["export", "queries.trace", "--debug-dir", DEBUG_DIR, "--no-samples", "--perfetto", out.to_str().unwrap()]);
    snap!("queries_export_perfetto_items", pretty(&std::fs::read_to_string(&out).unwrap()));
    let out = tmp.path().join("samples.json");
    tailprof(&["export", "queries.trace", "--debug-dir", DEBUG_DIR, "--perfetto", out.to_str().unwrap()]);
    snap!("queries_export_perfetto_instants", instants_digest(&std::fs::read_to_string(&out).unwrap()));
}

/// Instant events of a Perfetto export: count per name, and the first and last one.
fn instants_digest(perfetto: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(perfetto).unwrap();
    let instants: Vec<&serde_json::Value> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "i").collect();
    let mut per_name = std::collections::BTreeMap::<String, u64>::new();
    for e in &instants {
        *per_name.entry(e["name"].as_str().unwrap_or("").to_owned()).or_default() += 1;
    }
    let digest = serde_json::json!({
        "instants": instants.len(),
        "per_name": per_name,
        "first": instants.first(),
        "last": instants.last(),
    });
    serde_json::to_string_pretty(&digest).unwrap() + "\n"
}

#[test]
fn regtag_items() {
    snap!("regtag_items", json(&["items", "--json", "--debug-dir", DEBUG_DIR, "regtag.trace"]));
}

/// Flat profiles by function: the symbolizer over the committed binaries, system
/// libraries unnamed with their reason.
#[test]
fn reports_by_function() {
    snap!("queries_report_text", tailprof(&["report", "--debug-dir", DEBUG_DIR, "queries.trace"]));
    for name in ["queries", "split", "threads", "forkexec"] {
        let trace = format!("{name}.trace");
        snap!(format!("{name}_report"), json(&["report", "--json", "--debug-dir", DEBUG_DIR, &trace]));
    }
}

/// Call stacks and off-CPU time (`record -g --off-cpu`): whole stacks, folded stacks,
/// stacks of slow items, off-CPU by function and stack.
#[test]
fn queries_stacks_and_off_cpu() {
    let t = "queries_stacks.trace";
    snap!("queries_stacks_info_full", json(&["info", "--full", "--json", t]));
    snap!("queries_stacks_by_stack", json(&["report", "--by", "stack", "--json", "--debug-dir", DEBUG_DIR, t]));
    snap!("queries_stacks_folded", tailprof(&["report", "--folded", "--debug-dir", DEBUG_DIR, t]));
    snap!("queries_stacks_slow", json(&["report", "--by", "stack", "--slow", "--json", "--debug-dir", DEBUG_DIR, t]));
    snap!("queries_stacks_off_cpu", json(&["report", "--off-cpu", "--json", "--debug-dir", DEBUG_DIR, t]));
}

#[test]
fn split_without_symbols() {
    snap!("split_info_full", json(&["info", "--full", "--json", "split.trace"]));
    snap!("split_report_by_binary", json(&["report", "--by", "binary", "--json", "split.trace"]));
}

#[test]
fn threads_and_forkexec_without_symbols() {
    snap!("threads_report_by_thread", json(&["report", "--by", "thread", "--json", "threads.trace"]));
    snap!("forkexec_info_full", json(&["info", "--full", "--json", "forkexec.trace"]));
    snap!("forkexec_report_by_thread", json(&["report", "--by", "thread", "--json", "forkexec.trace"]));
}

// ---- real perf.data recordings, read in place --------------------------------------

/// `../shared/testdata/perf` seen from the workspace root.
fn shared_perf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/perf")
}

/// Small recordings from the shared corpus whose import needs no symbols.
const REAL: &[(&str, &str)] = &[
    ("perf_data_converter__perf.data.singleprocess-3.8", "singleprocess"),
    ("perf_data_converter__perf.data.lost_samples-4.4", "lost_samples"),
    ("perf_data_converter__perf.data.throttle-3.8", "throttle"),
    ("ubench__perf-mem-9973", "perf_mem_9973"),
];

#[test]
fn real_perf_data_import_info_report() {
    let dir = shared_perf_dir();
    let require = std::env::var_os("TAILPROF_REQUIRE_TESTDATA").is_some_and(|v| v == "1");
    let present = dir.is_dir();
    let (mut checked, mut skipped) = (0, 0);
    let tmp = tempfile::tempdir().unwrap();
    for (file, name) in REAL {
        let src = dir.join(file);
        if !src.is_file() {
            skipped += 1;
            tailprof_testkit::skip(tailprof_testkit::Need::TestData, format_args!("pipeline: skipped {file}: not in {}", dir.display()));
            continue;
        }
        let trace = tmp.path().join(format!("{name}.trace"));
        let out = tailprof_cmd().arg("import").arg(&src).arg("-o").arg(&trace).output().unwrap();
        assert!(out.status.success(), "import {file}: {}", String::from_utf8_lossy(&out.stderr));
        let trace_name = format!("{name}.trace");
        let run = |args: &[&str]| pretty(&tailprof_in(tmp.path(), args));
        snap!(format!("real_{name}_info_full"), run(&["info", "--full", "--json", &trace_name]));
        snap!(format!("real_{name}_report_by_binary"), run(&["report", "--by", "binary", "--json", &trace_name]));
        checked += 1;
    }
    // Written to the stderr handle, not with eprintln!: the test harness captures the
    // macros, and this line must show in every run's summary.
    let _ = writeln!(
        std::io::stderr(),
        "pipeline: real perf.data: {checked} checked, {skipped} skipped{}",
        if present { String::new() } else { format!(" ({} absent)", dir.display()) }
    );
    if require && present {
        assert_eq!(skipped, 0, "TAILPROF_REQUIRE_TESTDATA=1 and {} is present, but files were missing", dir.display());
    }
}

// ---- how the committed traces were made ---------------------------------------------

/// Where the examples are built and recorded. A fixed name, so the rewritten paths in
/// the traces are the same on every regeneration; removed afterwards.
const WORK: &str = "/tmp/tailprof-pipeline-data";

/// (trace name, example, extra cc flags, record options, program arguments)
type Example = (&'static str, &'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str]);
const EXAMPLES: &[Example] = &[
    ("queries", "queries", &["-pthread", "-I", "../include"], &[], &["--no-realtime", "--quiet", "--queries", "32"]),
    ("split", "split", &[], &[], &[]),
    ("threads", "threads", &["-pthread"], &[], &["3", "150"]),
    ("forkexec", "forkexec", &[], &[], &[]),
    ("regtag", "regtag", &["-ffixed-r13"], &["--item-reg", "r13"], &["6", "40"]),
    // Call stacks (frame pointers) and context switches.
    (
        "queries_stacks",
        "queries",
        &["-pthread", "-I", "../include"],
        &["-g", "--off-cpu"],
        &["--no-realtime", "--quiet", "--queries", "16"],
    ),
];

/// Paths of mapped files as seen by the pipeline: rewritten so that no machine has them.
fn rewrite_path(p: &str) -> String {
    if p == "[vdso]" || (p.starts_with('/') && !p.starts_with("//")) {
        format!("/nonexistent{}{p}", if p.starts_with('/') { "" } else { "/" })
    } else {
        p.to_owned()
    }
}

/// `TAILPROF_REGENERATE=name,name` regenerates only those traces (the others keep their
/// snapshots); unset, all of them.
#[test]
#[ignore = "regenerates tests/data (records the examples; needs perf_event_open and cc)"]
fn regenerate_test_data() {
    use tailprof_format::{FrameKind, Record, StackId, StacksSink, TraceReader, TraceWriter};

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let data = data_dir();
    let work = Path::new(WORK);
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).unwrap();
    let only = std::env::var("TAILPROF_REGENERATE").ok();
    let only: Option<Vec<&str>> = only.as_deref().map(|s| s.split(',').collect());
    if only.is_none() {
        let _ = std::fs::remove_dir_all(data.join(".build-id"));
    }
    std::fs::create_dir_all(&data).unwrap();
    for (name, source, cflags, record_opts, args) in EXAMPLES {
        if only.as_ref().is_some_and(|o| !o.contains(name)) {
            continue;
        }
        let exe = work.join(source);
        let st = Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer"])
            .args(*cflags)
            .arg("-o")
            .arg(&exe)
            .arg(examples.join(format!("{source}.c")))
            .current_dir(&examples)
            .status()
            .unwrap();
        assert!(st.success(), "cc {name}");
        let raw = work.join(format!("{name}.raw.trace"));
        let st = Command::new(env!("CARGO_BIN_EXE_tailprof"))
            .args(["record", "-e", "cpu-clock:u", "-c", "200000", "-o"])
            .arg(&raw)
            .args(*record_opts)
            .arg("--")
            .arg(&exe)
            .args(*args)
            .status()
            .unwrap();
        assert!(st.success(), "record {name}");

        let mut reader = TraceReader::open(&raw).unwrap();
        let mut sink = StacksSink::default();
        reader.read_all(&mut sink).unwrap();
        let build_ids = reader.build_ids().to_vec();
        let header = reader.header().clone();
        let out = data.join(format!("{name}.trace"));
        let mut w = TraceWriter::create(&out, &header).unwrap();
        // Stack ids are the reader's; the writer interns its own. Kernel frames are left
        // out (their names depend on the machine's kernel, e.g. of sched_switch stacks).
        let mut stack_ids = std::collections::HashMap::new();
        let mut restack = |w: &mut TraceWriter<_>, id: StackId| {
            if id == StackId::NONE {
                return id;
            }
            *stack_ids.entry(id).or_insert_with(|| {
                let frames: Vec<_> = sink.stacks.frames_leaf_first(id).filter(|f| f.kind != FrameKind::Kernel).collect();
                if frames.is_empty() {
                    StackId::NONE
                } else {
                    w.intern_stack(&frames)
                }
            })
        };
        for r in &sink.records {
            match r {
                Record::Mmap(m) => {
                    let mut m = m.clone();
                    m.path = rewrite_path(&m.path);
                    w.write(&Record::Mmap(m)).unwrap();
                }
                Record::Sample(s) => {
                    let mut s = s.clone();
                    s.stack = restack(&mut w, s.stack);
                    w.write(&Record::Sample(s)).unwrap();
                }
                Record::Switch(s) => {
                    let mut s = s.clone();
                    s.stack = restack(&mut w, s.stack);
                    w.write(&Record::Switch(s)).unwrap();
                }
                r => w.write(r).unwrap(),
            }
        }
        let exe_path = exe.to_str().unwrap();
        let mut exe_build_id = None;
        for mut e in build_ids {
            if e.path == exe_path {
                exe_build_id = Some(e.build_id.clone());
            }
            e.path = rewrite_path(&e.path);
            w.add_build_id(e).unwrap();
        }
        w.finish(reader.summarize().ok().and_then(|(_, _, d)| d)).unwrap();
        // The example's binary, where `--debug-dir tests/data` finds it by build-id.
        let id = exe_build_id.unwrap_or_else(|| panic!("no build-id for {exe_path} in the trace"));
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let dst = data.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&exe, &dst).unwrap();
    }
    std::fs::remove_dir_all(work).unwrap();
}

// ---- `make test` ------------------------------------------------------------------

/// Issue 18 item 1: `make test` ran the Python tests only when every cargo test passed.
/// Each suite must run whatever the other's outcome, and the exit status must still fail.
#[test]
fn make_test_runs_every_suite_and_keeps_the_failure() {
    if Command::new("make").arg("--version").output().is_err() {
        let _ = writeln!(std::io::stderr(), "pipeline: skipped make_test: no make");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let make = |cargo: &str, pytest: &str| {
        let out = Command::new("make")
            .args(["-s", "test", &format!("CARGO={cargo}"), &format!("PYTEST={pytest}")])
            .current_dir(&root)
            .output()
            .expect("run make");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, out) = make("false", "echo pytest-ran");
    assert!(!ok, "cargo failed, so make test must fail");
    assert!(out.contains("pytest-ran"), "the Python tests must run after failing cargo tests: {out:?}");
    let (ok, _) = make("true", "false");
    assert!(!ok, "the Python tests failed, so make test must fail");
    let (ok, out) = make("true", "echo pytest-ran");
    assert!(ok && out.contains("pytest-ran"), "{out:?}");
}
