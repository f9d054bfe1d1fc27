//! Recorder tests for items (issue 3): register-tag mode (`--item-reg r13`) and uprobe
//! item boundaries, with real perf_event_open (software cpu-clock, so no hardware PMU
//! is needed). The fixture is `examples/regtag.c`, compiled at test time (`-ffixed-r13
//! -no-pie`, so `nm` addresses are the sampled ones). Each test prints SKIP and passes
//! when perf_event_open is refused, or when no C compiler or uprobe PMU is found. No
//! timing assertions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;

use tailprof_collect::attr::SamplingConfig;
use tailprof_collect::event::EventSpec;
use tailprof_collect::items::uprobe::{ItemProbes, ProbeSpec, UprobeError};
use tailprof_collect::session::{ItemOptions, RecordError, RecordOptions, Recorder, RunWarning, Target, VecOutput};
use tailprof_collect::sys::CollectError;
use tailprof_format::{Marker, MarkerKind, MarkerSource, Record, Sample};

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tailprof-items-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Build examples/regtag.c; None (skip) without a compiler.
fn regtag(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/regtag.c");
    let exe = dir.join("regtag");
    match Command::new("cc").args(["-O1", "-g", "-ffixed-r13", "-no-pie", "-o"]).arg(&exe).arg(&src).output() {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc regtag.c failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

/// `name -> [start, end)` of the function symbols of a non-PIE binary (`nm -S`).
fn functions(exe: &Path) -> BTreeMap<String, (u64, u64)> {
    let out = Command::new("nm").arg("-S").arg(exe).output().expect("nm");
    let mut m = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 4 && (f[2] == "T" || f[2] == "t") {
            let (a, s) = (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap());
            m.insert(f[3].to_string(), (a, a + s));
        }
    }
    m
}

fn opts(exe: &Path, args: &[&str]) -> RecordOptions {
    let mut argv = vec![exe.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    RecordOptions {
        events: vec![EventSpec::parse("cpu-clock").unwrap()],
        sampling: SamplingConfig { period: Some(100_000), ..SamplingConfig::default() },
        mmap_pages: 64,
        target: Target::Command(argv),
        cmdline: vec!["test".into()],
    }
}

/// Record into memory; None (skip) when refused for permissions or without uprobes.
fn record(o: RecordOptions, items: ItemOptions) -> Option<(Recorder, VecOutput)> {
    let mut rec = match Recorder::with_items(o, items) {
        Ok(r) => r,
        Err(RecordError::Collect(e @ CollectError::Permission { .. })) => {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
            return None;
        }
        Err(RecordError::Uprobe(UprobeError::PmuMissing)) => {
            tailprof_testkit::skip(tailprof_testkit::Need::Uprobe, "no uprobe PMU");
            return None;
        }
        Err(e) => panic!("Recorder::with_items: {e}"),
    };
    let mut out = VecOutput::default();
    let s = rec.run_to(&mut out, &AtomicBool::new(false), &mut |_| {}).expect("run");
    assert_eq!(s.exit_status, Some(0), "{s:?}");
    assert_eq!((s.malformed, s.out_of_order), (0, 0), "{s:?}");
    assert!(s.warnings.is_empty(), "{s:?}");
    Some((rec, out))
}

fn samples(out: &VecOutput) -> impl Iterator<Item = &Sample> {
    out.records.iter().filter_map(|r| match r {
        Record::Sample(s) => Some(s),
        _ => None,
    })
}

#[test]
fn register_tag_mode_samples_carry_the_item_ids() {
    let dir = tmp("regtag");
    let Some(exe) = regtag(&dir) else { return };
    let funcs = functions(&exe);
    let work: Vec<(u64, u64)> = ["work_sum", "work_poly", "work_mix", "run_slice"].iter().map(|f| funcs[*f]).collect();
    let Some((rec, out)) = record(opts(&exe, &["6", "40"]), ItemOptions { item_reg: Some("r13".into()), ..Default::default() }) else {
        return;
    };
    let header = rec.header();
    assert_eq!(header.extra.get("item_reg").map(String::as_str), Some("r13"));
    assert_ne!(header.events[0].regs_user_mask & (1 << 21), 0, "r13 is bit 21 of sample_regs_user");
    let ids: BTreeSet<u64> = (1001..=1006).collect();
    let (mut inside, mut tagged, mut seen) = (0u64, 0u64, BTreeSet::new());
    for s in samples(&out) {
        assert_eq!(s.regs.len(), 1, "one register per sample: {s:?}");
        if work.iter().any(|&(a, e)| s.ip >= a && s.ip < e) {
            inside += 1;
            let r13 = s.regs[0];
            if r13 != 0 {
                assert!(ids.contains(&r13), "r13 = {r13} inside a work function is not an item id");
                tagged += 1;
                seen.insert(r13);
            }
        }
    }
    eprintln!("{inside} samples in the work functions, {tagged} tagged, ids {seen:?}");
    assert!(inside >= 50, "too few samples in the work functions ({inside}) to judge");
    assert!(tagged * 100 >= inside * 98, "only {tagged} of {inside} samples in work functions carry an item id");
    assert!(seen.len() >= 4, "ids seen: {seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn markers(out: &VecOutput) -> Vec<&Marker> {
    out.records
        .iter()
        .filter_map(|r| match r {
            Record::Marker(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn uprobe_boundaries_become_markers() {
    let dir = tmp("uprobe");
    let Some(exe) = regtag(&dir) else { return };
    let path = exe.display().to_string();
    let probes = ItemProbes {
        begin: ProbeSpec::parse(&format!("{path}:run_slice")).unwrap(),
        end: ProbeSpec::parse(&format!("{path}:run_slice%return")).unwrap(),
        id_reg: None,
        class: Some("slice".into()),
    };
    let Some((rec, out)) = record(opts(&exe, &["3", "20"]), ItemOptions { probes: Some(probes), ..Default::default() }) else {
        return;
    };
    let h = rec.header();
    assert!(h.extra["item_begin"].contains(":run_slice@0x"), "{:?}", h.extra);
    assert!(h.extra["item_end"].contains(":run_slice%return@0x"), "{:?}", h.extra);
    assert_eq!(h.extra["item_id"], "sequence");
    assert_eq!(h.events.len(), 1, "probe events are not sampling events");
    let ms = markers(&out);
    let begins: Vec<&&Marker> = ms.iter().filter(|m| m.kind == MarkerKind::Begin).collect();
    let ends = ms.iter().filter(|m| m.kind == MarkerKind::End).count();
    assert_eq!(begins.len(), 60, "3 items x 20 slices");
    assert_eq!(ends, 60);
    assert!(ms.iter().all(|m| m.source == MarkerSource::Uprobe));
    assert!(ms.iter().filter(|m| m.kind == MarkerKind::End).all(|m| m.item == Marker::UNKNOWN_ITEM));
    assert_eq!(begins.iter().map(|m| m.item).collect::<Vec<_>>(), (1..=60).collect::<Vec<u64>>());
    let pid = rec.child_pid().unwrap();
    assert!(ms.iter().all(|m| m.pid == pid));
    // Begin and end alternate on the thread, and the class is declared first.
    for w in ms.chunks(2) {
        assert_eq!((w[0].kind, w[1].kind), (MarkerKind::Begin, MarkerKind::End));
    }
    let first_class = out.records.iter().position(|r| matches!(r, Record::ItemClass(c) if c.name == "slice"));
    let first_marker = out.records.iter().position(|r| matches!(r, Record::Marker(_)));
    assert!(first_class.is_some() && first_class < first_marker);
    // Samples taken inside a slice fall between a begin and its end.
    let summary_markers = out.records.iter().filter(|r| matches!(r, Record::Marker(_))).count();
    assert_eq!(summary_markers, 120);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn uprobe_symbol_errors_are_clear() {
    let dir = tmp("uprobe-err");
    let Some(exe) = regtag(&dir) else { return };
    let path = exe.display().to_string();
    let probes = ItemProbes {
        begin: ProbeSpec::parse(&format!("{path}:run_slise")).unwrap(),
        end: ProbeSpec::parse(&format!("{path}:run_slice%return")).unwrap(),
        id_reg: None,
        class: None,
    };
    let e = Recorder::with_items(opts(&exe, &[]), ItemOptions { probes: Some(probes), ..Default::default() }).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("symbol 'run_slise' not found") && msg.contains("run_slice"), "{msg}");
    let probes = ItemProbes {
        begin: ProbeSpec::parse("/nonexistent/tailprof-bin:f").unwrap(),
        end: ProbeSpec::parse("/nonexistent/tailprof-bin:f%return").unwrap(),
        id_reg: None,
        class: None,
    };
    let e = Recorder::with_items(opts(&exe, &[]), ItemOptions { probes: Some(probes), ..Default::default() }).unwrap_err();
    assert_eq!(e.to_string(), "probe binary not found: /nonexistent/tailprof-bin");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program using the marker header: `ITEMS` items of busy work, each between
/// begin/end markers with class "job". Given a second argument FILE, it first polls
/// until FILE exists (the -p test creates it once the recorder runs).
const MARKED_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tailprof.h"
__attribute__((noinline)) static double spin(int n) { double s = 0; for (int i = 0; i < n; i++) s += i * 0.5; return s; }
int main(int argc, char **argv) {
    int items = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2) { while (access(argv[2], F_OK) != 0) usleep(2000); }
    double acc = 0;
    for (int i = 1; i <= items; i++) {
        TAILPROF_ITEM_BEGIN_CLASS((uint64_t)i, "job");
        acc += spin(200000);
        tailprof_item_end((uint64_t)i);
    }
    printf("%g\n", acc);
    usleep(300000); /* stay alive for a drain round: class names are read from this process */
    return 0;
}
"#;

fn marked(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("marked.c");
    std::fs::write(&src, MARKED_C).unwrap();
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let exe = dir.join("marked");
    match Command::new("cc").args(["-O1", "-g", "-I"]).arg(&inc).arg("-o").arg(&exe).arg(&src).output() {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc marked.c failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

fn check_api_markers(out: &VecOutput, pid: u32, items: u64) {
    let ms = markers(out);
    let mine: Vec<&&Marker> = ms.iter().filter(|m| m.pid == pid).collect();
    let begins: Vec<u64> = mine.iter().filter(|m| m.kind == MarkerKind::Begin).map(|m| m.item).collect();
    let ends: Vec<u64> = mine.iter().filter(|m| m.kind == MarkerKind::End).map(|m| m.item).collect();
    assert_eq!(begins, (1..=items).collect::<Vec<_>>());
    assert_eq!(ends, (1..=items).collect::<Vec<_>>());
    assert!(mine.iter().all(|m| m.source == MarkerSource::Api && m.time > 0));
    let class = mine[0].class;
    assert_ne!(class, 0);
    let classes: Vec<&Record> = out.records.iter().filter(|r| matches!(r, Record::ItemClass(_))).collect();
    assert!(
        classes.iter().any(|r| matches!(r, Record::ItemClass(c) if c.pid == pid && c.id == class && c.name == "job")),
        "class {class} of pid {pid} not declared: {classes:?}"
    );
    // Samples and markers are merged in time order (the writer got them sorted).
    let times: Vec<u64> = out.records.iter().map(|r| r.time()).filter(|&t| t != 0).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "records out of time order");
}

#[test]
fn api_markers_from_a_launched_command() {
    let dir = tmp("api-launch");
    let Some(exe) = marked(&dir) else { return };
    let Some((rec, out)) = record(opts(&exe, &["20"]), ItemOptions::default()) else {
        return;
    };
    let pid = rec.child_pid().unwrap();
    check_api_markers(&out, pid, 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn api_markers_from_an_attached_process() {
    let dir = tmp("api-attach");
    let Some(exe) = marked(&dir) else { return };
    let go = dir.join("go");
    let mut child = Command::new(&exe).arg("15").arg(&go).stdout(std::process::Stdio::null()).spawn().unwrap();
    let pid = child.id();
    let o = RecordOptions { target: Target::Pid(pid), ..opts(&exe, &[]) };
    let mut rec = match Recorder::new(o) {
        Ok(r) => r,
        Err(RecordError::Collect(e @ CollectError::Permission { .. })) => {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(rec.notes().iter().all(|n| !n.contains("no marker library")), "{:?}", rec.notes());
    let mut out = VecOutput::default();
    let mut started = false;
    let s = rec
        .run_to(&mut out, &AtomicBool::new(false), &mut |_| {
            if !std::mem::replace(&mut started, true) {
                std::fs::write(&go, b"").unwrap();
            }
        })
        .expect("run");
    child.wait().unwrap();
    assert!(s.markers >= 30, "{s:?}");
    check_api_markers(&out, pid, 15);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Threads that each run `job` `JOBS` times (`job_done` called after each). Given a
/// second argument FILE, main first polls until FILE exists, so a `-p` recorder attaches
/// before any thread is created.
const THREADED_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#define THREADS 3
#define JOBS 10
static volatile double sink;
/* noipa: a pure function called with a constant would be hoisted out of the loop. */
__attribute__((noipa)) double job(int n) { double s = 0; for (int i = 0; i < n; i++) s += i * 0.5; return s; }
__attribute__((noipa)) void job_done(double s) { sink += s; }
static void *worker(void *arg) {
    (void)arg;
    for (int j = 0; j < JOBS; j++) job_done(job(200000));
    return NULL;
}
int main(int argc, char **argv) {
    if (argc > 1) { while (access(argv[1], F_OK) != 0) usleep(2000); }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, worker, NULL) != 0) { perror("threaded: pthread_create"); return 1; }
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    return 0;
}
"#;
const THREADED_JOBS: usize = 3 * 10;

fn threaded(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("threaded.c");
    std::fs::write(&src, THREADED_C).unwrap();
    let exe = dir.join("threaded");
    match Command::new("cc").args(["-O1", "-g", "-pthread", "-o"]).arg(&exe).arg(&src).output() {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc threaded.c failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

fn threaded_probes(exe: &Path, end: &str) -> ItemProbes {
    let path = exe.display().to_string();
    ItemProbes {
        begin: ProbeSpec::parse(&format!("{path}:job")).unwrap(),
        end: ProbeSpec::parse(&format!("{path}:{end}")).unwrap(),
        id_reg: None,
        class: None,
    }
}

/// Begins and ends of the worker threads (not the main thread), all from uprobes.
fn check_threaded_markers(out: &VecOutput, pid: u32) {
    let ms = markers(out);
    assert!(ms.iter().all(|m| m.source == MarkerSource::Uprobe && m.pid == pid), "{ms:?}");
    let begins = ms.iter().filter(|m| m.kind == MarkerKind::Begin).count();
    let ends = ms.iter().filter(|m| m.kind == MarkerKind::End).count();
    assert_eq!((begins, ends), (THREADED_JOBS, THREADED_JOBS));
    let tids: BTreeSet<u32> = ms.iter().map(|m| m.tid).collect();
    assert_eq!(tids.len(), 3, "one thread per worker: {tids:?}");
    assert!(!tids.contains(&pid), "the main thread runs no job");
}

/// Issue 18 item 2: with uprobe item boundaries, a launched program's `pthread_create`
/// failed (`Bad address`: clone3 EFAULT) because the inherited uprobe PMU event pointed
/// into the recorder's memory. `record` (via `record`) asserts exit status 0.
#[test]
fn uprobe_items_do_not_break_threads_of_a_launched_command() {
    let dir = tmp("uprobe-threads");
    let Some(exe) = threaded(&dir) else { return };
    for end in ["job%return", "job_done"] {
        let items = ItemOptions { probes: Some(threaded_probes(&exe, end)), ..Default::default() };
        let Some((rec, out)) = record(opts(&exe, &[]), items) else {
            return;
        };
        check_threaded_markers(&out, rec.child_pid().unwrap());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 18 item 2, `-p`: threads created after the recorder attached.
#[test]
fn uprobe_items_do_not_break_threads_created_after_attach() {
    let dir = tmp("uprobe-threads-attach");
    let Some(exe) = threaded(&dir) else { return };
    let go = dir.join("go");
    let mut child = Command::new(&exe).arg(&go).spawn().unwrap();
    let pid = child.id();
    let o = RecordOptions { target: Target::Pid(pid), ..opts(&exe, &[]) };
    let items = ItemOptions { probes: Some(threaded_probes(&exe, "job%return")), ..Default::default() };
    let mut rec = match Recorder::with_items(o, items) {
        Ok(r) => r,
        Err(RecordError::Collect(e @ CollectError::Permission { .. })) => {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{e}");
        }
    };
    let mut out = VecOutput::default();
    let mut started = false;
    rec.run_to(&mut out, &AtomicBool::new(false), &mut |_| {
        if !std::mem::replace(&mut started, true) {
            std::fs::write(&go, b"").unwrap();
        }
    })
    .expect("run");
    let status = child.wait().unwrap();
    assert!(status.success(), "the attached program failed: {status}");
    check_threaded_markers(&out, pid);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 18 item 2: a launched command that fails with no item marker while probes were
/// set is reported in the summary (the CLI prints it as a warning); one that succeeds is
/// not.
#[test]
fn a_failing_command_with_probes_and_no_markers_is_a_warning() {
    let dir = tmp("uprobe-fail");
    let Some(exe) = threaded(&dir) else { return };
    // `job` of `threaded` probed, but the command is a shell that exits 3 without
    // running it.
    let o = RecordOptions { target: Target::Command(vec!["/bin/sh".into(), "-c".into(), "exit 3".into()]), ..opts(&exe, &[]) };
    let items = ItemOptions { probes: Some(threaded_probes(&exe, "job%return")), ..Default::default() };
    let mut rec = match Recorder::with_items(o, items) {
        Ok(r) => r,
        Err(RecordError::Collect(e @ CollectError::Permission { .. })) => {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let mut out = VecOutput::default();
    let s = rec.run_to(&mut out, &AtomicBool::new(false), &mut |_| {}).expect("run");
    assert_eq!(s.exit_status, Some(3));
    assert_eq!(s.warnings, [RunWarning::CommandFailedWithoutMarkers { exit_status: 3 }]);
    // The same probes on the program itself: it succeeds, no warning (`record` checks).
    let items = ItemOptions { probes: Some(threaded_probes(&exe, "job%return")), ..Default::default() };
    let Some((_, _)) = record(opts(&exe, &[]), items) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
}
