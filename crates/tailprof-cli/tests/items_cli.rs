//! End-to-end tests of `tailprof items`: a trace written with `TraceWriter` holding
//! markers and samples at the addresses of a real compiled C program's functions, read
//! back by the binary; text, JSON, `--explain`, and the one-line errors.

#[path = "../../tailprof-analyze/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{compile, exec_mmap, nm};
use tailprof_format::{CpuMode, EventDesc, ItemClass, Marker, MarkerKind, MarkerSource, Record, Sample, TraceHeader, TraceWriter};

const PROG: &str = r#"
__attribute__((noinline)) int parse(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
__attribute__((noinline)) int lookup(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 5; }
__attribute__((noinline)) int compute_uncached(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 7; }
int main(int argc, char **argv) { (void)argv; return parse(argc) + lookup(argc) + compute_uncached(argc); }
"#;

const PID: u32 = 4242;
const TID: u32 = 4243;
const BASE: u64 = 0x5555_5555_4000;
const PERIOD: u64 = 100_000;

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "command failed: {}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn marker(time: u64, kind: MarkerKind, item: u64, class: u32) -> Record {
    Record::Marker(Marker { time, pid: PID, tid: TID, kind, item, class, source: MarkerSource::Api })
}

/// 12 queries of two classes; queries 1 and 4 (the first of each class) also run
/// `compute_uncached` for a long time.
fn write_trace(bin: &Path, out: &Path, with_markers: bool) {
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        source: "record".into(),
        ..Default::default()
    };
    let ip = |f: &str| BASE + nm(bin, f) + 2;
    let (parse, lookup, uncached) = (ip("parse"), ip("lookup"), ip("compute_uncached"));
    let mut w = TraceWriter::create(out, &header).unwrap();
    w.write(&Record::Mmap(exec_mmap(PID, bin, BASE, None))).unwrap();
    w.write(&Record::ItemClass(ItemClass { time: 0, pid: PID, id: 1, name: "small".into() })).unwrap();
    w.write(&Record::ItemClass(ItemClass { time: 0, pid: PID, id: 2, name: "large".into() })).unwrap();
    let queries: [(u64, u64); 12] = [(1, 3), (2, 3), (3, 3), (4, 5), (5, 3), (6, 5), (7, 5), (8, 3), (9, 5), (10, 3), (11, 5), (12, 3)];
    let mut t = 1_000_000u64;
    for (id, n) in queries {
        let class = if n == 3 { 1 } else { 2 };
        if with_markers {
            w.write(&marker(t, MarkerKind::Begin, id, class)).unwrap();
        }
        let mut plan = vec![(parse, 2 * n + id % 3), (lookup, 3 * n), (uncached, n)];
        if id == 1 || id == 4 {
            plan[2].1 += 40 * n;
        }
        for (ip, count) in plan {
            for _ in 0..count {
                t += PERIOD;
                let s = Sample { time: t, pid: PID, tid: TID, ip, period: PERIOD, cpumode: CpuMode::User, ..Default::default() };
                w.write_sample(&s).unwrap();
            }
        }
        t += PERIOD / 2;
        if with_markers {
            w.write(&marker(t, MarkerKind::End, id, 0)).unwrap();
        }
        t += 10 * PERIOD;
        // A sample between items: outside.
        let s = Sample { time: t, pid: PID, tid: TID, ip: parse, period: PERIOD, cpumode: CpuMode::User, ..Default::default() };
        w.write_sample(&s).unwrap();
    }
    w.finish(None).unwrap();
}

struct Fixture {
    _dir: tempfile::TempDir,
    trace: PathBuf,
    plain: PathBuf,
}

fn fixture() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile("cc", dir.path(), "server", PROG, &["-O1", "-g", "-fPIE", "-pie"])?;
    let trace = dir.path().join("run.trace");
    let plain = dir.path().join("plain.trace");
    write_trace(&bin, &trace, true);
    write_trace(&bin, &plain, false);
    Some(Fixture { _dir: dir, trace, plain })
}

#[test]
fn items_json_flags_the_cold_queries_and_names_the_uncached_function() {
    let Some(f) = fixture() else { return };
    let o = tailprof().arg("items").arg(&f.trace).args(["--json", "--sort", "id"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["outside_samples"], 12);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 12);
    for it in items {
        for key in ["id", "class", "duration_ns", "samples", "anomaly_score", "anomalous", "functions"] {
            assert!(it.get(key).is_some(), "item lacks {key}: {it}");
        }
        for func in it["functions"].as_array().unwrap() {
            for key in ["name", "samples", "est_ns"] {
                assert!(func.get(key).is_some(), "function lacks {key}: {func}");
            }
        }
    }
    let flagged: Vec<u64> = items.iter().filter(|i| i["anomalous"] == true).map(|i| i["id"].as_u64().unwrap()).collect();
    assert_eq!(flagged, vec![1, 4]);
    for it in items.iter().filter(|i| i["anomalous"] == true) {
        assert_eq!(it["responsible"], serde_json::json!(["compute_uncached"]));
        assert_eq!(it["functions"][0]["name"], "compute_uncached");
    }
    assert_eq!(items[0]["class"], "small");
    assert_eq!(v["shown_estimator"], "count_times_interval");
    assert_eq!(v["mean_interval_ns"], PERIOD as f64);

    // --top and --class narrow the list.
    let o = tailprof().arg("items").arg(&f.trace).args(["--json", "--top", "3", "--sort", "anomaly"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<u64> = v["items"].as_array().unwrap().iter().map(|i| i["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[..2].contains(&1) && ids[..2].contains(&4), "{ids:?}");
    assert_eq!(v["more_items"], 9);
    let o = tailprof().arg("items").arg(&f.trace).args(["--json", "--class", "large"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 5);
}

#[test]
fn items_text_and_explain() {
    let Some(f) = fixture() else { return };
    let text = stdout(&tailprof().arg("items").arg(&f.trace).output().unwrap());
    eprintln!("{text}");
    assert!(text.contains("# Items:     12 (2 anomalous) in 2 classes; mode: markers"), "{text}");
    assert!(text.contains("outside any item: 12"), "{text}");
    assert!(text.contains("samples x mean sample interval; interval 100.0 µs"), "{text}");
    assert!(text.contains("SLOW"), "{text}");
    assert!(text.contains("item 4 (large)") && text.contains("responsible: compute_uncached"), "{text}");
    // Unreliable estimates (fewer than 5 samples) carry a ~ (after the function's first
    // line, from the fixture's DWARF).
    let text = stdout(&tailprof().arg("items").arg(&f.trace).args(["--min-samples", "1000"]).output().unwrap());
    assert!(text.contains("compute_uncached (server.c:4) ~"), "{text}");

    let text = stdout(&tailprof().arg("items").arg(&f.trace).args(["--explain", "4"]).output().unwrap());
    eprintln!("{text}");
    assert!(text.contains("# Item 4 (class large"), "{text}");
    assert!(text.contains("(ANOMALOUS)"), "{text}");
    assert!(text.contains("Responsible: compute_uncached (100% of the excess; from 205 samples)"), "{text}");
    let first_row = text.lines().find(|l| l.starts_with("compute_uncached")).unwrap();
    assert!(first_row.contains("+20.00 ms") && first_row.contains("100.0%"), "{first_row}");

    let o = tailprof().arg("items").arg(&f.trace).args(["--explain", "4", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["responsible"], serde_json::json!(["compute_uncached"]));
    assert_eq!(v["diffs"][0]["name"], "compute_uncached");
    assert_eq!(v["baseline"]["items"], 5);
    assert_eq!(v["item"]["id"], 4);
    for key in ["item_ns", "median_ns", "delta_ns", "share_of_excess"] {
        assert!(v["diffs"][0].get(key).is_some(), "diff lacks {key}");
    }
}

#[test]
fn items_errors_are_one_clear_line() {
    let Some(f) = fixture() else { return };
    let o = tailprof().arg("items").arg(&f.trace).args(["--explain", "999"]).output().unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("no item with id 999"), "{e}");

    let o = tailprof().arg("items").arg(&f.plain).output().unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("no item markers") && e.contains("--item-reg"), "{e}");

    let o = tailprof().args(["items", "/nonexistent/x.trace"]).output().unwrap();
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1);
}

/// `Label` markers (what `--item-class-from` records) class the item open on the thread,
/// or, when none is open, the next one the thread begins; an item's own class wins.
#[test]
fn label_markers_class_open_and_next_items() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("labels.trace");
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        source: "record".into(),
        ..Default::default()
    };
    let label = |time, class| {
        Record::Marker(Marker {
            time,
            pid: PID,
            tid: TID,
            kind: MarkerKind::Label,
            item: Marker::UNKNOWN_ITEM,
            class,
            source: MarkerSource::Uprobe,
        })
    };
    let (sel, upd) = (0x4000_0000, 0x4000_0001);
    let mut w = TraceWriter::create(&path, &header).unwrap();
    w.write(&Record::ItemClass(ItemClass { time: 0, pid: PID, id: 7, name: "own".into() })).unwrap();
    w.write(&Record::ItemClass(ItemClass { time: 0, pid: PID, id: sel, name: "select ? from t".into() })).unwrap();
    w.write(&Record::ItemClass(ItemClass { time: 0, pid: PID, id: upd, name: "update t set v = ?".into() })).unwrap();
    // 1: labelled before it begins (PostgreSQL parses, then runs the portal).
    w.write(&label(1_000, sel)).unwrap();
    w.write(&marker(2_000, MarkerKind::Begin, 1, 0)).unwrap();
    w.write(&marker(3_000, MarkerKind::End, 1, 0)).unwrap();
    // 2: labelled while open.
    w.write(&marker(4_000, MarkerKind::Begin, 2, 0)).unwrap();
    w.write(&label(5_000, upd)).unwrap();
    w.write(&marker(6_000, MarkerKind::End, 2, 0)).unwrap();
    // 3: its own class wins over a label; 4: a pending label is used once only.
    w.write(&marker(7_000, MarkerKind::Begin, 3, 7)).unwrap();
    w.write(&label(7_500, sel)).unwrap();
    w.write(&marker(8_000, MarkerKind::End, 3, 0)).unwrap();
    w.write(&marker(9_000, MarkerKind::Begin, 4, 0)).unwrap();
    w.write(&marker(10_000, MarkerKind::End, 4, 0)).unwrap();
    w.finish(None).unwrap();
    let o = tailprof().arg("items").arg(&path).args(["--json", "--sort", "id"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut got: Vec<(u64, String)> =
        v["items"].as_array().unwrap().iter().map(|i| (i["id"].as_u64().unwrap(), i["class"].as_str().unwrap_or("").to_string())).collect();
    got.sort();
    assert_eq!(got, vec![(1, "select ? from t".into()), (2, "update t set v = ?".into()), (3, "own".into()), (4, String::new())]);
}
