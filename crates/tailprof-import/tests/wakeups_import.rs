//! Import of wakeups and CPU-wide context switches (issue 21): a fresh
//! `perf record -a -e sched:sched_waking -g --switch-events` gives one `Wakeup` per
//! sched_waking sample (waker = the sampled task, wakee = the tracepoint's `pid`, as
//! `perf script` prints them), with the waker's stack, and `Switch` records that keep the
//! other task (`next_prev`). Needs perf and root (a system-wide recording); skips otherwise.

use std::process::Command;
use tailprof_format::{Flow, Record, Sink, StackDef};
use tailprof_import::{import_to_sink, ImportOptions};

#[derive(Default)]
struct Collect(Vec<Record>);

impl Sink for Collect {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.0.push(r.clone());
        Flow::Continue
    }
    fn handle_stack(&mut self, _d: &StackDef) {}
}

#[test]
fn sched_waking_samples_become_wakeups_and_cpu_wide_switches_keep_the_other_task() {
    if !Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success()) {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfTool, "perf is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("w.data");
    let rec = Command::new("perf")
        .args(["record", "-q", "-a", "-e", "sched:sched_waking", "-g", "--switch-events", "-o"])
        .arg(&data)
        .args(["--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 0.01; done"])
        .output()
        .unwrap();
    if !rec.status.success() || !data.is_file() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::SystemWide,
            format!("perf record -a failed here: {}", String::from_utf8_lossy(&rec.stderr).lines().next().unwrap_or("")),
        );
        return;
    }
    let script = Command::new("perf").args(["script", "-F", "tid,event,trace", "-i"]).arg(&data).output().unwrap();
    assert!(script.status.success());
    // "   123 sched:sched_waking: comm=sh pid=456 prio=120 target_cpu=001"
    let mut perf: Vec<(u32, u32)> = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter(|l| l.contains("sched:sched_waking:"))
        .filter_map(|l| {
            // perf prints an unknown task as -1 (u32::MAX in the records).
            let tid = l.split_whitespace().next()?.parse::<i64>().ok()? as u32;
            let wakee = l.split_whitespace().find_map(|w| w.strip_prefix("pid="))?.parse().ok()?;
            Some((tid, wakee))
        })
        .collect();
    let mut sink = Collect::default();
    let imported = import_to_sink(&data, &ImportOptions::default(), &mut sink).unwrap();
    assert_eq!(imported.header.extra.get("causes").map(String::as_str), Some("sched_waking"));
    let mut ours: Vec<(u32, u32)> = sink
        .0
        .iter()
        .filter_map(|r| match r {
            Record::Wakeup(w) => Some((w.tid, w.wakee_tid)),
            _ => None,
        })
        .collect();
    assert!(perf.len() >= 8, "the sleeps were woken: {} wakeups", perf.len());
    perf.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, perf);
    // Every wakeup has the waker's stack (kernel frames at least).
    assert!(sink.0.iter().all(|r| !matches!(r, Record::Wakeup(w) if w.stack.is_none())));
    let switches: Vec<_> = sink.0.iter().filter_map(|r| if let Record::Switch(s) = r { Some(s) } else { None }).collect();
    assert!(!switches.is_empty());
    assert!(switches.iter().all(|s| s.next_prev.is_some() && s.tid != 0));
}
