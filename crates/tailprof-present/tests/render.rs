//! Expected-output tests for tables and JSON on synthetic profiles and trace info.

use tailprof_analyze::profile::{EventTotal, GroupBy, ProfileStats, UnknownSummary};
use tailprof_analyze::{FlatProfile, ProfileRow, RecordCounter, TraceInfo};
use tailprof_format::{ClockInfo, EventDesc, ReadSummary, Sample, Sink, TraceHeader, TraceStats};
use tailprof_present::json::{info_json, profile_json};
use tailprof_present::{render_info, render_profile, TableOptions};

fn frow(name: &str, binary: &str, samples: u64, total: u64) -> ProfileRow {
    ProfileRow {
        name: name.into(),
        binary: Some(binary.into()),
        pid: None,
        tid: None,
        samples,
        percent: 100.0 * samples as f64 / total as f64,
        period: samples * 1000,
        unknown_reason: None,
        source: None,
    }
}

fn profile(by: GroupBy, rows: Vec<ProfileRow>, lost: u64) -> FlatProfile {
    let samples = rows.iter().map(|r| r.samples).sum();
    FlatProfile {
        group_by: by,
        granularity: Default::default(),
        event: "cpu-clock".into(),
        event_index: 0,
        samples,
        period: samples * 1000,
        events: vec![EventTotal { index: 0, name: "cpu-clock".into(), samples, period: samples * 1000 }],
        lost,
        lost_records: lost,
        lost_samples: 0,
        throttled: 0,
        unthrottled: 0,
        rows,
        unknown: vec![],
        jit_advice: vec![],
        kernel_symbols: None,
        read: None,
        stats: ProfileStats::default(),
        stack_statuses: vec![],
    }
}

#[test]
fn function_table_with_top_n_and_footer() {
    let total = 4000;
    let rows = vec![
        frow("alpha", "/usr/bin/app", 2400, total),
        frow("ns::Box<int>::get() const", "/usr/lib/libbox.so.1", 1200, total),
        frow("beta", "/usr/bin/app", 388, total),
        frow("[unknown] app+0x1f0", "/usr/bin/app", 12, total),
    ];
    let p = profile(GroupBy::Function, rows, 12);
    let got = render_profile(&p, &TableOptions { top: Some(2), show_period: false });
    let want = "\
# Event:   cpu-clock
# Samples: 4,000
# Lost:    12 (0.30%)
WARNING: lost 12 samples (0.30%): ring buffers were full (raise the buffer size or lower the frequency)

Samples  Percent  Function                   Binary
  2,400   60.00%  alpha                      app
  1,200   30.00%  ns::Box<int>::get() const  libbox.so.1
(2 more rows, 10.00% of samples)
";
    assert_eq!(got, want, "\n{got}");
}

/// Issue 23: a JIT function's `file:line` (jitdump DEBUG_INFO) gets a Source column in
/// the function table, only when a shown row has one.
#[test]
fn function_table_shows_jit_source_lines() {
    let total = 100;
    let mut hot = frow("LazyCompile:*hotLoop", "[jit]", 75, total);
    hot.source = Some("/srv/app.js:3".into());
    let rows = vec![hot, frow("main", "/usr/bin/node", 25, total)];
    let got = render_profile(&profile(GroupBy::Function, rows.clone(), 0), &TableOptions { top: None, show_period: false });
    let want = "\
# Event:   cpu-clock
# Samples: 100
# Lost:    0 (0.00%)

Samples  Percent  Function              Binary  Source
     75   75.00%  LazyCompile:*hotLoop  [jit]   /srv/app.js:3
     25   25.00%  main                  node
";
    assert_eq!(got, want, "\n{got}");
    let plain = render_profile(&profile(GroupBy::Function, rows[1..].to_vec(), 0), &TableOptions::default());
    assert!(!plain.contains("Source"), "{plain}");
}

#[test]
fn binary_and_thread_tables() {
    let p = profile(
        GroupBy::Binary,
        vec![
            ProfileRow { name: "app".into(), ..frow("", "/usr/bin/app", 3, 4) },
            ProfileRow { name: "[kernel]".into(), ..frow("", "[kernel]", 1, 4) },
        ],
        0,
    );
    let got = render_profile(&p, &TableOptions { top: None, show_period: true });
    let want = "\
# Event:   cpu-clock
# Samples: 4
# Lost:    0 (0.00%)

Samples  Percent  Period  Binary    Path
      3   75.00%   3,000  app       /usr/bin/app
      1   25.00%   1,000  [kernel]  [kernel]
";
    assert_eq!(got, want, "\n{got}");

    let t = |name: &str, pid: u32, tid: u32, samples: u64| ProfileRow {
        name: name.into(),
        binary: None,
        pid: Some(pid),
        tid: Some(tid),
        ..frow("", "", samples, 10)
    };
    let p = profile(GroupBy::Thread, vec![t("worker", 4242, 4243, 7), t("main", 4242, 4242, 3)], 0);
    let got = render_profile(&p, &TableOptions::default());
    assert!(
        got.ends_with(
            "\
Samples  Percent   PID   TID  Thread
      7   70.00%  4242  4243  worker
      3   30.00%  4242  4242  main
"
        ),
        "\n{got}"
    );

    let json = profile_json(&p, None).unwrap();
    assert_eq!(json["threads"][0]["name"], "worker");
    assert_eq!(json["threads"][0]["tid"], 4243);
    assert!(json["threads"][0].get("binary").is_none());
    assert_eq!(json["samples"], 10);
}

#[test]
fn profile_json_shape() {
    let mut p = profile(GroupBy::Function, vec![frow("alpha", "/usr/bin/app", 3, 5), frow("beta", "/usr/bin/app", 2, 5)], 0);
    p.throttled = 2;
    p.read = Some(ReadSummary { chunks: 2, truncated_bytes: 100, complete: false, ..Default::default() });
    p.unknown =
        vec![UnknownSummary { binary: "/usr/lib/libx.so".into(), reason: "binary not found on disk".into(), samples: 1, percent: 20.0 }];
    let v = profile_json(&p, Some(1)).unwrap();
    assert_eq!(v["samples"], 5);
    assert_eq!(v["lost"], 0);
    assert_eq!(v["event"], "cpu-clock");
    assert_eq!(v["group_by"], "function");
    assert!(v.get("rows").is_none());
    let f = &v["functions"];
    assert_eq!(f.as_array().unwrap().len(), 1);
    assert_eq!(f[0]["name"], "alpha");
    assert_eq!(f[0]["binary"], "/usr/bin/app");
    assert_eq!(f[0]["samples"], 3);
    assert_eq!(f[0]["percent"], 60.0);
    assert_eq!(v["more"]["rows"], 1);
    assert_eq!(v["more"]["samples"], 2);
    let kinds: Vec<&str> = v["warnings"].as_array().unwrap().iter().map(|w| w["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["throttled", "truncated", "unknown_code"]);
    let text = render_profile(&p, &TableOptions::default());
    assert!(text.contains("WARNING: sampling was throttled 2 times"), "{text}");
    assert!(text.contains("WARNING: trace is truncated: the last 100 B could not be read"), "{text}");
    assert!(text.contains("WARNING: 20.00% of samples (1) in /usr/lib/libx.so not named: binary not found on disk"), "{text}");

    let b = profile(GroupBy::Binary, vec![frow("app", "/usr/bin/app", 1, 1)], 0);
    let v = profile_json(&b, None).unwrap();
    assert_eq!(v["binaries"][0]["binary"], "/usr/bin/app");
    assert_eq!(v["binaries"][0]["name"], "app");
}

#[test]
fn empty_profile() {
    let p = profile(GroupBy::Function, vec![], 0);
    let got = render_profile(&p, &TableOptions::default());
    assert!(got.ends_with("\n(no samples)\n"), "{got}");
}

fn info() -> TraceInfo {
    let header = TraceHeader {
        events: vec![
            EventDesc { name: "cycles:pp".into(), attr_type: 0, sample_freq: Some(4000), precise_ip: 2, ..Default::default() },
            EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(1_000_000), ..Default::default() },
        ],
        clock: Some(ClockInfo::Monotonic),
        source: "record".into(),
        cmdline: vec!["tailprof".into(), "record".into(), "--".into(), "./app".into()],
        hostname: Some("box1".into()),
        os_release: Some("6.1.0".into()),
        arch: Some("x86_64".into()),
        cpu_desc: Some("Some CPU".into()),
        nr_cpus: Some(8),
        start_realtime_ns: Some(1_700_000_000_000_000_000),
        extra: [("perf.version".to_string(), "6.1".to_string()), ("k".to_string(), "v".to_string())].into(),
    };
    let summary = ReadSummary { chunks: 12, bytes: 1_234_567, truncated_bytes: 0, complete: true, ..Default::default() };
    let stats =
        TraceStats { samples: 12_000, lost_records: 36, first_time: Some(1_000), last_time: Some(2_500_001_000), ..Default::default() };
    let mut c = RecordCounter::default();
    for i in 0..12_000u32 {
        c.handle_sample(&Sample { event: (i % 3 == 0) as u16, pid: 1 + i % 2, tid: 1 + i % 5, ..Default::default() });
    }
    TraceInfo::new(&header, &summary, &stats, None, &[], Some(&c))
}

#[test]
fn info_block() {
    let got = render_info(&info());
    let want = "\
WARNING: lost 36 samples (0.30%): ring buffers were full (raise the buffer size or lower the frequency)
Source:       record
Command:      tailprof record -- ./app
Host:         box1 (6.1.0, x86_64)
CPU:          Some CPU (8 CPUs)
Started:      2023-11-14 22:13:20 UTC
Clock:        CLOCK_MONOTONIC
Duration:     2.500 s
Samples:      12,000
Lost:         36 (0.30%): 36 ring-buffer, 0 PMU
Throttled:    0 (unthrottled 0)
File size:    1,234,567 bytes (1.18 MiB)
Bytes/sample: 102.88
Chunks:       12 (0 damaged, 0 bytes)
Truncated:    0 bytes
Complete:     yes
Tasks:        2 processes, 5 threads with samples (2 processes, 5 threads seen)
Build-ids:    0
Events:
  #  Name       Type      Sampling         Precise  Samples
  0  cycles:pp  hardware  4,000 Hz               2    8,000
  1  cpu-clock  software  every 1,000,000        0    4,000
Extra:
  k             v
  perf.version  6.1
";
    assert_eq!(got, want, "\n{got}");
}

#[test]
fn info_json_keys() {
    let v = info_json(&info()).unwrap();
    assert_eq!(v["samples"], 12_000);
    assert_eq!(v["lost"], 36);
    assert_eq!(v["duration_ns"], 2_500_000_000u64);
    assert_eq!(v["bytes"], 1_234_567);
    assert!((v["bytes_per_sample"].as_f64().unwrap() - 102.880_583).abs() < 1e-3);
    assert_eq!(v["truncated_bytes"], 0);
    assert_eq!(v["events"][0]["name"], "cycles:pp");
    assert_eq!(v["events"][1]["samples"], 4000);
    assert_eq!(v["hostname"], "box1");
    assert_eq!(v["complete"], true);
    assert_eq!(v["warnings"][0]["kind"], "lost");
}

#[test]
fn info_shows_stack_statuses_and_switches() {
    use tailprof_format::{StackStatus, SwitchKind};
    let mut i = info();
    assert!(!render_info(&i).contains("Stacks:"), "no stacks line without stacks");
    i.stacks.add(StackStatus::Complete, 9_812);
    i.stacks.add(StackStatus::CopyExhausted, 150);
    i.stacks.add(StackStatus::MaxDepth, 38);
    i.switches.add(SwitchKind::In, 10);
    i.switches.add(SwitchKind::OutBlocked, 7);
    i.switches.add(SwitchKind::OutPreempted, 3);
    i.switch_stacks.add(StackStatus::Complete, 9);
    i.switch_stacks.add(StackStatus::UnwindError, 1);
    let got = render_info(&i);
    assert!(
        got.contains("Stacks:       9,812 complete, 188 truncated (copy exhausted 150, max depth 38), 2,000 samples without\n"),
        "{got}"
    );
    assert!(
        got.contains("Switches:     20: 10 in, 3 out preempted, 7 out blocked; stacks 9 complete, 1 truncated (unwind error 1)\n"),
        "{got}"
    );
    let v = info_json(&i).unwrap();
    assert_eq!(v["stacks"]["complete"], 9_812);
    assert_eq!(v["stacks"]["copy_exhausted"], 150);
    assert_eq!(v["switches"]["out_blocked"], 7);
    assert_eq!(v["switch_stacks"]["unwind_error"], 1);
}
