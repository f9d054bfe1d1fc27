//! End-to-end tests of memory-bandwidth support: `record --bandwidth` on a machine
//! without a PMU, `tailprof bandwidth` on the real PEBS recordings in
//! `../shared/testdata/perf/` (DRAM filtering checked against a hand count of `perf
//! script -F data_src`) and on synthetic traces with known truth, `--probe`, and the
//! `mem_bytes`/`mem_gbps` columns of `items --json`. No test asserts a timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tailprof_analyze::bandwidth::datasrc::MemLevel;
use tailprof_analyze::bandwidth::synth::{trace_bytes, Phase, SynthConfig};
use tailprof_analyze::bandwidth::{bandwidth_report, BandwidthOptions, DramFilter};
use tailprof_format::TraceReader;

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

fn testdata() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/perf");
    if p.is_dir() {
        Some(p)
    } else {
        tailprof_testkit::skip(tailprof_testkit::Need::TestData, format_args!("{} is absent", p.display()));
        None
    }
}

fn has_cpu_pmu() -> bool {
    ["cpu", "cpu_core", "ibs_op"].iter().any(|p| Path::new("/sys/bus/event_source/devices").join(p).is_dir())
}

#[test]
fn record_bandwidth_without_a_pmu_says_what_is_missing() {
    if has_cpu_pmu() {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "this machine has a PMU");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mem.trace");
    let o = tailprof().args(["record", "--bandwidth", "-o"]).arg(&out).args(["--", "true"]).output().unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tailprof: error: record --bandwidth needs a hardware PMU"), "{err}");
    assert!(err.contains("this machine exposes none") && err.contains("tailprof import perf.data"), "{err}");
    assert!(err.contains("tailprof bandwidth run.trace"), "{err}");
    assert!(!out.exists(), "no trace file is left behind");
    // The counter and soft-tsc options fail the same way; misuse is a usage error.
    let o = tailprof()
        .args(["record", "--bandwidth", "--bandwidth-counter", "--soft-tsc", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success() && stderr(&o).contains("needs a hardware PMU"));
    let o = tailprof().args(["record", "--bandwidth", "-e", "cycles", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = tailprof().args(["record", "--bandwidth-counter", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// (file, period, hand count per level from `perf script -F data_src` with perf 6.1).
type Import = (&'static str, u64, &'static [(MemLevel, u64)]);
const IMPORTS: &[Import] = &[
    ("ubench__perf-mem-4986", 4986, &[(MemLevel::L1, 253)]),
    ("ubench__perf-mem-9973", 9973, &[(MemLevel::L1, 124), (MemLevel::Lfb, 1)]),
    ("ubench__perf-mem-19946", 19946, &[(MemLevel::L1, 63)]),
    ("ubench__perf-mem-39891", 39891, &[(MemLevel::L1, 31)]),
    ("perf_data_converter__perf.data.weight_struct", 0, &[(MemLevel::L1, 4), (MemLevel::Lfb, 5), (MemLevel::L2, 1), (MemLevel::L3, 4)]),
];

fn import(src: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{}.trace", src.file_name().unwrap().to_string_lossy()));
    let o = tailprof().arg("import").arg(src).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "import {}: {}", src.display(), stderr(&o));
    out
}

#[test]
fn dram_filter_on_real_pebs_recordings_matches_a_hand_count() {
    let Some(data) = testdata() else { return };
    let dir = tempfile::tempdir().unwrap();
    for &(file, period, hand) in IMPORTS {
        let trace = import(&data.join(file), dir.path());
        let mut reader = TraceReader::open(&trace).unwrap();
        let r = bandwidth_report(&mut reader, &BandwidthOptions::default()).unwrap();
        // Load-latency events are memory events but not LLC-miss events: the DRAM filter is on.
        assert!(r.dram_filter, "{file}");
        let total: u64 = hand.iter().map(|(_, n)| n).sum();
        assert_eq!(r.samples, total, "{file}");
        for &(level, n) in hand {
            let got = r.levels.iter().find(|l| l.level == level).map_or(0, |l| l.samples);
            assert_eq!(got, n, "{file}: {level:?}");
        }
        assert_eq!(r.levels.iter().map(|l| l.samples).sum::<u64>(), total, "{file}: {:?}", r.levels);
        // None of these loads came from DRAM (all L1/LFB/L2/L3 hits), so nothing is counted.
        assert_eq!((r.samples_used, r.total_bytes), (0, 0), "{file}");
        if period > 0 {
            assert_eq!(r.period, period, "{file}");
        }
        // Without the filter every sample is a period of cache lines.
        let mut reader = TraceReader::open(&trace).unwrap();
        let all = bandwidth_report(&mut reader, &BandwidthOptions { dram_filter: DramFilter::Off, ..Default::default() }).unwrap();
        let periods: u64 = all.bins.iter().map(|b| b.bytes).sum::<u64>() / 64;
        assert_eq!(all.samples_used, total, "{file}");
        assert_eq!(all.total_bytes, periods * 64);
        if period > 0 {
            assert_eq!(all.total_bytes, total * period * 64, "{file}");
        }
        assert!(!all.bins.is_empty());
    }
}

#[test]
fn bandwidth_runs_end_to_end_on_real_recordings() {
    let Some(data) = testdata() else { return };
    let dir = tempfile::tempdir().unwrap();
    for &(file, _, hand) in IMPORTS {
        let trace = import(&data.join(file), dir.path());
        let total: u64 = hand.iter().map(|(_, n)| n).sum();
        let text = stdout(&tailprof().arg("bandwidth").arg(&trace).output().unwrap());
        assert!(text.contains("memory bandwidth from "), "{file}: {text}");
        assert!(text.contains(&format!("DRAM filter: 0 of {total} samples")), "{file}: {text}");
        let v: serde_json::Value = serde_json::from_str(&stdout(
            &tailprof().arg("bandwidth").arg(&trace).args(["--json", "--bin", "1ms", "--dram-filter", "off"]).output().unwrap(),
        ))
        .unwrap();
        assert_eq!(v["bin_ns"], 1_000_000);
        assert_eq!(v["samples_used"], total, "{file}");
        let bins = v["bins"].as_array().unwrap();
        let sum: u64 = bins.iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
        assert_eq!(sum, v["total_bytes"].as_u64().unwrap());
        assert!(bins.iter().all(|b| b["gbps_low"].as_f64().unwrap() <= b["gbps"].as_f64().unwrap()
            && b["gbps"].as_f64().unwrap() <= b["gbps_high"].as_f64().unwrap()));
        let html = dir.path().join("r.html");
        let o =
            tailprof().arg("bandwidth").arg(&trace).args(["--dram-filter", "off", "--by", "thread", "--html"]).arg(&html).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    }
    // The Skylake all-loads recording (no data source): sampled, not filtered.
    let trace = import(&data.join("ubench__xeon6126_perf-dla1_dat-x"), dir.path());
    let o = tailprof().arg("bandwidth").arg(&trace).args(["-e", "0", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["samples"], 10014);
    assert_eq!(v["total_bytes"], 10014u64 * 13973 * 64);
    assert_eq!(v["method"], "pebs");
    // Without -e it is no LLC-miss or memory event: a one-line error naming the events.
    let o = tailprof().arg("bandwidth").arg(&trace).output().unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.lines().count() == 1 && e.contains("no last-level-cache-miss or memory event") && e.contains("mem_inst_retired"), "{e}");
}

#[test]
fn synthetic_trace_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        phases: vec![Phase { duration_ns: 15_000_000, gbps: 1.5 }, Phase { duration_ns: 5_000_000, gbps: 10.0 }],
        repeat: 4,
        items: true,
        counter: true,
        loss_per_activation: 20,
        period: 200,
        throttle: vec![(1, 30_000_000, 32_000_000)],
        ..Default::default()
    };
    let (bytes, truth) = trace_bytes(&cfg).unwrap();
    let trace = dir.path().join("synth.trace");
    std::fs::write(&trace, bytes).unwrap();
    let home = dir.path().join("home");
    let run = |args: &[&str]| tailprof().env("TAILPROF_HOME", &home).arg("bandwidth").arg(&trace).args(args).output().unwrap();
    let text = stdout(&run(&["--by", "cpu"]));
    assert!(text.contains("memory bandwidth from MEM_LOAD_RETIRED.L3_MISS (pebs; one sample per 200 events)"), "{text}");
    assert!(text.contains("bursts: 4 phase(s)"), "{text}");
    assert!(text.contains("measured from the counting sibling"), "{text}");
    assert!(text.contains("by cpu") && text.contains("by item (8 items"), "{text}");
    assert!(text.contains("throttled"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&stdout(&run(&["--json"]))).unwrap();
    let l = v["loss"]["l"].as_f64().unwrap();
    assert!((l - 20.0).abs() < 2.0, "l = {l}");
    let expected = truth.bytes(truth.start(), truth.end());
    let corrected = v["total_bytes_corrected"].as_f64().unwrap();
    assert!((corrected - expected).abs() / expected < 0.05, "{corrected} vs {expected}");
    assert_eq!(v["items"].as_array().unwrap().len(), 8);
    // `items --json` gains the memory columns.
    let items: serde_json::Value =
        serde_json::from_str(&stdout(&tailprof().arg("items").arg(&trace).args(["--json", "--top", "0"]).output().unwrap())).unwrap();
    let rows = items["items"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for it in rows {
        assert!(it["mem_bytes"].as_u64().is_some() && it["mem_gbps"].as_f64().is_some(), "{it}");
    }
    // Bad options are one-line errors.
    let o = run(&["--bin", "0"]);
    assert!(!o.status.success() && stderr(&o).contains("at least 1 ns"));
    let o = run(&["--bin", "1ns"]);
    assert!(!o.status.success() && stderr(&o).contains("use a wider --bin"), "{}", stderr(&o));
}

#[test]
fn probe_gives_a_positive_figure_and_is_used_for_saturation() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let o = tailprof()
        .env("TAILPROF_HOME", &home)
        .args(["bandwidth", "--probe", "--probe-size", "64M", "--probe-runs", "2", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let peak = v["peak_gbps"].as_f64().unwrap();
    eprintln!("probe: {peak:.2} GB/s");
    assert!(peak > 0.0 && peak.is_finite());
    let stored: Vec<_> = std::fs::read_dir(tailprof_measure::datadir::calibration_dir_in(&home)).unwrap().flatten().collect();
    assert_eq!(stored.len(), 1);
    assert!(stored[0].file_name().to_string_lossy().starts_with("bandwidth-peak-"));
    // A later report uses the stored figure.
    let (bytes, _) = trace_bytes(&SynthConfig { repeat: 1, ..Default::default() }).unwrap();
    let trace = dir.path().join("t.trace");
    std::fs::write(&trace, bytes).unwrap();
    let text = stdout(&tailprof().env("TAILPROF_HOME", &home).arg("bandwidth").arg(&trace).output().unwrap());
    assert!(text.contains("saturation: machine peak") && text.contains("(probe "), "{text}");
}

#[test]
fn stat_interval_is_periodic_counting_that_sums_to_the_total() {
    let o = tailprof()
        .args(["stat", "--interval", "2ms", "-e", "task-clock", "--json", "--", "sh", "-c"])
        .arg("i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done")
        .output()
        .unwrap();
    if !o.status.success() && stderr(&o).contains("perf_event_paranoid") {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("{}", stderr(&o)));
        return;
    }
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["interval_ns"], 2_000_000);
    let iv = v["intervals"].as_array().unwrap();
    assert!(!iv.is_empty());
    let sum: u64 = iv.iter().map(|i| i["values"][0].as_u64().unwrap()).sum();
    assert_eq!(sum, v["events"][0]["count"].as_u64().unwrap());
    let t: Vec<u64> = iv.iter().map(|i| i["t_ns"].as_u64().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] < w[1]));
    // Text mode prints one line per interval and event before the totals.
    let o = tailprof().args(["stat", "--interval", "1ms", "-e", "task-clock", "--", "sleep", "0.01"]).output().unwrap();
    let text = stdout(&o);
    let lines = text.lines().take_while(|l| !l.starts_with("counts for")).filter(|l| l.ends_with("task-clock")).count();
    assert!(lines >= 2, "{text}");
    let o = tailprof().args(["stat", "--interval", "1us", "--", "true"]).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("at least 10 µs"), "{}", stderr(&o));
}
