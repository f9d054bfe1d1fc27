//! A fresh recording made with the installed `perf`: the import must have exactly the
//! samples `perf script` prints, IP by IP. Skips when perf is missing or not allowed to
//! record here.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;

#[test]
fn fresh_perf_recording_matches_perf_script() {
    if !perf_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("x.data");
    let rec = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-c", "100000", "-o"])
        .arg(&data)
        .args(["--", "dd", "if=/dev/zero", "of=/dev/null", "bs=4096", "count=100000"])
        .output()
        .unwrap();
    if !rec.status.success() || !data.is_file() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::PerfEvents,
            format_args!(
                "`perf record` failed here (perf_event_paranoid? container?): {}",
                String::from_utf8_lossy(&rec.stderr).lines().next().unwrap_or("")
            ),
        );
        return;
    }
    let script = Command::new("perf").args(["script", "-F", "ip", "-i"]).arg(&data).output().unwrap();
    assert!(script.status.success(), "perf script failed: {}", String::from_utf8_lossy(&script.stderr));
    // Without call chains, `perf script -F ip` prints exactly one line per sample.
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    let mut lines = 0;
    for line in String::from_utf8_lossy(&script.stdout).lines() {
        let ip = u64::from_str_radix(line.trim(), 16).unwrap_or_else(|_| panic!("unexpected perf script line {line:?}"));
        *want.entry(ip).or_insert(0) += 1;
        lines += 1;
    }
    let (imp, recs) = import(&data);
    assert!(lines > 0, "perf recorded no samples");
    assert_eq!(imp.summary.samples, lines, "samples vs perf script lines");
    assert_eq!(ip_counts(&recs), want, "per-IP counts vs perf script");
    assert_time_ordered("fresh recording", &recs);
    let ev = &imp.header.events[0];
    assert_eq!((ev.attr_type, ev.config, ev.sample_period), (1, 0, Some(100000)));
    assert!(ev.name.starts_with("cpu-clock"), "{}", ev.name);
    assert!(imp.header.cmdline.iter().any(|a| a == "record"), "{:?}", imp.header.cmdline);
    assert!(imp.header.hostname.is_some() && imp.header.os_release.is_some() && imp.header.nr_cpus.is_some());
    eprintln!("fresh recording: {lines} samples, {} distinct IPs, identical to perf script", want.len());
}
