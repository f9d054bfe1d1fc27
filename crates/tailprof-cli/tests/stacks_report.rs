//! `report --by stack/--folded/--off-cpu`, `items` off-CPU fields and `--explain` by
//! stack, and the pprof / Firefox / Perfetto / HTML exports, end to end through the
//! binary on a synthetic trace written with `TraceWriter` (stacks and context switches
//! as the recorder stores them). Function names come from a small C program compiled
//! here; `go tool pprof -top` reads the pprof export when Go is installed.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tailprof_format::{
    CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Mmap, Record, Sample, StackId, StackStatus, Switch, SwitchKind,
    TraceHeader, TraceWriter,
};

const PROG: &str = r#"
__attribute__((noinline)) int leaf(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
__attribute__((noinline)) int caller_a(int x) { return leaf(x) + 1; }
__attribute__((noinline)) int caller_b(int x) { return leaf(x) + 2; }
__attribute__((noinline)) int wait_here(int x) { return x + 4; }
int main(int argc, char **argv) { (void)argv; return caller_a(argc) + caller_b(argc) + wait_here(argc); }
"#;

const PID: u32 = 100;
const BASE: u64 = 0x5555_5555_4000;
const PERIOD: u64 = 1_000_000;

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn run(args: &[&str]) -> String {
    let out = tailprof().args(args).output().unwrap();
    assert!(out.status.success(), "tailprof {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&run(args)).unwrap()
}

/// Address of `sym` per `nm`.
fn nm(path: &Path, sym: &str) -> u64 {
    let out = Command::new("nm").arg(path).output().expect("nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == sym).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{sym} not in nm output"))
}

/// The executable PT_LOAD segment: (p_offset, p_vaddr, p_memsz).
fn exec_segment(path: &Path) -> (u64, u64, u64) {
    let d = std::fs::read(path).unwrap();
    let u16_at = |o: usize| u16::from_le_bytes(d[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    let phoff = u64_at(0x20) as usize;
    for i in 0..u16_at(0x38) {
        let p = phoff + i * u16_at(0x36);
        if u32_at(p) == 1 && u32_at(p + 4) & 1 != 0 {
            return (u64_at(p + 8), u64_at(p + 16), u64_at(p + 40));
        }
    }
    panic!("no executable segment");
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    trace: String,
}

/// 10 items of 10 samples: 30 % of the samples reach `leaf` from `caller_a`, 70 % from
/// `caller_b`; item 3 only from `caller_b` and blocked 20 ms in `wait_here`; every item
/// preempted 1 ms.
fn fixture() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("prog.c");
    std::fs::write(&src, PROG).unwrap();
    let bin = dir.path().join("prog");
    match Command::new("cc").args(["-O1", "-g", "-fPIE", "-pie", "-o"]).arg(&bin).arg(&src).status() {
        Ok(s) if s.success() => {}
        _ => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no C compiler");
            return None;
        }
    }
    let at = |f: &str, off: u64| BASE + nm(&bin, f) + off;
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    };
    let trace = dir.path().join("t.trace");
    let mut w = TraceWriter::create(&trace, &header).unwrap();
    let (off, vaddr, memsz) = exec_segment(&bin);
    let start = BASE + (vaddr & !0xfff);
    w.write(&Record::Mmap(Mmap {
        pid: PID,
        tid: PID,
        start,
        len: ((BASE + vaddr + memsz + 0xfff) & !0xfff) - start,
        pgoff: off & !0xfff,
        prot: 5,
        cpumode: CpuMode::User,
        path: bin.to_str().unwrap().into(),
        ..Default::default()
    }))
    .unwrap();
    let stack = |caller: &str| vec![Frame::user(at("leaf", 3)), Frame::user(at(caller, 5)), Frame::user(at("main", 5))];
    let a = w.intern_stack(&stack("caller_a"));
    let b = w.intern_stack(&stack("caller_b"));
    let wait = w.intern_stack(&[Frame::user(at("wait_here", 2)), Frame::user(at("main", 9))]);
    let marker = |time, kind, item| Record::Marker(Marker { time, pid: PID, tid: PID, kind, item, class: 0, source: MarkerSource::Api });
    let sw = |time, kind, stack| {
        Record::Switch(Switch {
            time,
            pid: PID,
            tid: PID,
            cpu: 0,
            kind,
            stack,
            stack_status: StackStatus::Complete,
            next_prev: None,
            item_key: None,
        })
    };
    let mut t = 1_000_000u64;
    for item in 1..=10u64 {
        w.write(&marker(t, MarkerKind::Begin, item)).unwrap();
        for k in 0..10u64 {
            t += PERIOD;
            let from_a = item != 3 && ((item == 1 && k < 7) || (item <= 5 && k < 6) || (item > 5 && k < 1));
            w.write(&Record::Sample(Sample {
                time: t,
                pid: PID,
                tid: PID,
                ip: at("leaf", 3),
                period: PERIOD,
                cpumode: CpuMode::User,
                stack: if from_a { a } else { b },
                stack_status: StackStatus::Complete,
                ..Default::default()
            }))
            .unwrap();
        }
        w.write(&sw(t + 100, SwitchKind::OutPreempted, StackId::NONE)).unwrap();
        w.write(&sw(t + 100 + PERIOD, SwitchKind::In, StackId::NONE)).unwrap();
        t += 100 + PERIOD;
        if item == 3 {
            w.write(&sw(t, SwitchKind::OutBlocked, wait)).unwrap();
            t += 20 * PERIOD;
            w.write(&sw(t, SwitchKind::In, StackId::NONE)).unwrap();
        }
        t += 500;
        w.write(&marker(t, MarkerKind::End, item)).unwrap();
        t += 1000;
    }
    w.finish(None).unwrap();
    Some(Fixture { dir: dir.path().to_owned(), trace: trace.to_str().unwrap().to_owned(), _dir: dir })
}

/// Samples per frame list, summed over complete and truncated rows.
fn by_frames(v: &Value) -> Vec<(Vec<String>, u64)> {
    let mut m: std::collections::BTreeMap<Vec<String>, u64> = Default::default();
    for s in v["stacks"].as_array().unwrap() {
        let f: Vec<String> = s["frames"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_owned()).collect();
        *m.entry(f).or_default() += s["samples"].as_u64().unwrap();
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn report_stack_views_and_filters() {
    let Some(fx) = fixture() else { return };
    let v = json(&["report", &fx.trace, "--by", "stack", "--json"]);
    assert_eq!(v["samples"], 100);
    assert_eq!(by_frames(&v), vec![(strs(&["main", "caller_b", "leaf"]), 70), (strs(&["main", "caller_a", "leaf"]), 30)]);
    assert_eq!(v["stacks"][0]["complete"], true);
    assert_eq!(v["statuses"]["complete"], 100);
    let folded = run(&["report", &fx.trace, "--folded"]);
    assert_eq!(folded, "main;caller_b;leaf 70\nmain;caller_a;leaf 30\n");
    assert_eq!(run(&["report", &fx.trace, "--folded", "--item", "3"]), "main;caller_b;leaf 10\n");
    assert_eq!(run(&["report", &fx.trace, "--folded", "--item", "1", "--item", "2"]), "main;caller_a;leaf 13\nmain;caller_b;leaf 7\n");
    let text = run(&["report", &fx.trace, "--by", "stack"]);
    assert!(text.contains("leaf ← caller_b ← main"), "{text}");
    // Filtered flat view: leaf is self everywhere, main total.
    let flat = json(&["report", &fx.trace, "--in-items", "--json"]);
    assert_eq!(flat["functions"][0]["name"], "leaf");
    assert_eq!(flat["functions"][0]["samples"], 100);
    let off = json(&["report", &fx.trace, "--off-cpu", "--json"]);
    assert_eq!(off["blocked_ns"], 20 * PERIOD);
    assert_eq!(off["runnable_ns"], 10 * PERIOD);
    let text = run(&["report", &fx.trace, "--off-cpu"]);
    assert!(text.contains("blocked 20.00 ms in wait_here ← main"), "{text}");
    // A missing item is an error naming it, not a panic.
    let out = tailprof().args(["report", &fx.trace, "--folded", "--item", "77"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("77"));
}

#[test]
fn items_show_off_cpu_time_and_explain_by_stack() {
    let Some(fx) = fixture() else { return };
    let v = json(&["items", &fx.trace, "--json", "--top", "0"]);
    for it in v["items"].as_array().unwrap() {
        let (cpu, off, wall) = (it["cpu_ns"].as_u64().unwrap(), it["off_cpu_ns"].as_u64().unwrap(), it["duration_ns"].as_u64().unwrap());
        assert_eq!(cpu + off, wall);
        // 10 samples of 1 ms: the on-CPU part agrees with sampling within one period.
        assert!((cpu as i64 - 10 * PERIOD as i64).abs() <= PERIOD as i64, "{it}");
        assert_eq!(it["runnable_ns"], PERIOD);
    }
    let i3 = v["items"].as_array().unwrap().iter().find(|i| i["id"] == 3).unwrap();
    assert_eq!(i3["blocked_ns"], 20 * PERIOD);
    assert_eq!(i3["anomalous"], true, "{i3}");
    assert_eq!(i3["excess_resolvable"], true, "{i3}");
    assert_eq!(i3["off_cpu"][0]["state"], "blocked");
    assert_eq!(i3["off_cpu"][0]["frames"], serde_json::json!(["main", "wait_here"]));
    let text = run(&["items", &fx.trace]);
    assert!(text.contains("blocked 20.00 ms in wait_here ← main"), "{text}");
    let slow = json(&["items", &fx.trace, "--json", "--slow"]);
    assert!(slow["items"].as_array().unwrap().iter().all(|i| i["anomalous"] == true));
    let x = json(&["items", &fx.trace, "--explain", "3", "--json"]);
    let st = x["stacks"].as_array().unwrap();
    let b = st.iter().find(|s| s["frames"] == serde_json::json!(["main", "caller_b", "leaf"])).unwrap();
    assert_eq!(b["samples"], 10);
    assert!(b["est_ns"].as_f64().unwrap() > 0.0);
    assert_eq!(x["blocked_ns"], 20 * PERIOD);
    assert_eq!(x["resolvable"], true);
    let text = run(&["items", &fx.trace, "--explain", "3"]);
    assert!(text.contains("blocked 20.00 ms in wait_here ← main"), "{text}");
    assert!(text.contains("leaf ← caller_b ← main"), "{text}");
    let text = run(&["items", &fx.trace, "--explain", "1"]);
    assert!(text.contains("within sampling noise"), "{text}");
}

#[test]
fn exports_with_stacks() {
    let Some(fx) = fixture() else { return };
    let d = &fx.dir;
    let (pb, ff, pf, html) = (d.join("p.pb.gz"), d.join("f.json"), d.join("p.json"), d.join("r.html"));
    run(&[
        "export",
        &fx.trace,
        "--pprof",
        pb.to_str().unwrap(),
        "--firefox",
        ff.to_str().unwrap(),
        "--perfetto",
        pf.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    // --item: that item's flame graph too (item 3 is flagged slow; item 2 is not).
    let html2 = d.join("r2.html");
    run(&["export", &fx.trace, "--html", html2.to_str().unwrap(), "--item", "2"]);
    let page2 = std::fs::read_to_string(&html2).unwrap();
    assert!(page2.contains("Item 2 (selected)"), "no graph for the selected item");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Flame graphs") && page.contains("<iframe"), "no flame graph in the page");
    assert!(page.contains("blocked 20.00 ms in wait_here ← main"), "no off-CPU line in the page");
    let ffv: Value = serde_json::from_slice(&std::fs::read(&ff).unwrap()).unwrap();
    assert!(!ffv["threads"].as_array().unwrap().is_empty());
    let pfv: Value = serde_json::from_slice(&std::fs::read(&pf).unwrap()).unwrap();
    let ev = pfv["traceEvents"].as_array().unwrap();
    assert_eq!(ev.iter().filter(|e| e["cat"] == "stack").count(), 100);
    assert_eq!(ev.iter().filter(|e| e["cat"] == "off-cpu" && e["ph"] == "b").count(), 11);
    // go tool pprof lists the same top functions as report.
    let Some(go_bin) = tailprof_testkit::go() else {
        tailprof_testkit::skip(tailprof_testkit::Need::Go, "the pprof check: go is not installed");
        return;
    };
    let go = Command::new(go_bin).args(["tool", "pprof", "-top", "-nodecount=10"]).arg(&pb).output().unwrap();
    assert!(go.status.success(), "go tool pprof: {}", String::from_utf8_lossy(&go.stderr));
    let top = String::from_utf8_lossy(&go.stdout);
    // Rows: flat flat% sum% cum cum% name.
    let rows: Vec<(u64, String)> = top
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[1].ends_with('%')).then(|| (f[0].parse().ok(), f[5..].join(" ")))
        })
        .filter_map(|(n, name)| Some((n?, name)))
        .collect();
    let report = json(&["report", &fx.trace, "--json"]);
    let want: Vec<(u64, String)> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["samples"].as_u64().unwrap(), f["name"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(rows.iter().filter(|r| r.0 > 0).cloned().collect::<Vec<_>>(), want, "{top}");
}
