//! End-to-end recorder tests with real perf_event_open (software cpu-clock only, so they
//! run without a hardware PMU). Each test prints a reason and passes when
//! perf_event_open is refused for lack of permission, or when no C compiler is found.
//! Fixtures are compiled at test time into a temp dir. No timing assertions: the only
//! sleeps decide *when* to stop, never what to expect.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tailprof_collect::attr::SamplingConfig;
use tailprof_collect::buildid;
use tailprof_collect::event::EventSpec;
use tailprof_collect::session::{RecordError, RecordOptions, RecordSummary, Recorder, Target};
use tailprof_format::{BuildIdEntry, Record, Sample, TraceHeader, TraceReader, TraceWriter, VecSink};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("tailprof-record-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compile `tests/fixtures/record/<name>.c` into `dir`; None (skip) without a compiler.
fn compile(dir: &TempDir, name: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/record/{name}.c"));
    let exe = dir.path(name);
    let out = Command::new("cc").args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"]).arg(&exe).arg(&src).output();
    match out {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc {name}.c failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

fn opts(target: Target, events: &[&str]) -> RecordOptions {
    RecordOptions {
        events: events.iter().map(|e| EventSpec::parse(e).unwrap()).collect(),
        sampling: SamplingConfig { period: Some(100_000), ..SamplingConfig::default() },
        mmap_pages: 64,
        target,
        cmdline: vec!["test".into()],
    }
}

mod common;
use common::recorder;

struct Recorded {
    summary: RecordSummary,
    header: TraceHeader,
    records: Vec<Record>,
    build_ids: Vec<BuildIdEntry>,
}

impl Recorded {
    fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.records.iter().filter_map(|r| match r {
            Record::Sample(s) => Some(s),
            _ => None,
        })
    }
    fn pids(&self) -> BTreeSet<u32> {
        self.samples().map(|s| s.pid).collect()
    }
}

/// Run through a real TraceWriter into memory and read everything back.
fn run(mut rec: Recorder, stop: &AtomicBool, on_progress: &mut dyn FnMut()) -> Recorded {
    let header = rec.header();
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    let summary = rec.run(&mut w, stop, &mut |_| on_progress()).expect("run");
    let (bytes, written) = w.finish_into_inner(Some(summary.duration_ns)).unwrap();
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let mut sink = VecSink::default();
    let read = r.read_all(&mut sink).unwrap();
    assert!(read.complete && read.damaged_chunks == 0 && read.truncated_bytes == 0, "{read:?}");
    assert_eq!(written.stats.samples, summary.samples, "every decoded sample was written");
    check_invariants(&summary, &sink.0);
    Recorded { summary, header: r.header().clone(), records: sink.0, build_ids: r.build_ids().to_vec() }
}

/// Time-0 records first, then non-decreasing time; nothing malformed.
fn check_invariants(s: &RecordSummary, recs: &[Record]) {
    assert_eq!(s.malformed, 0, "{s:?}");
    assert_eq!(s.out_of_order, 0, "{s:?}");
    let mut last = 0;
    let mut seen_nonzero = false;
    for r in recs {
        let t = r.time();
        if t == 0 {
            assert!(!seen_nonzero, "time-0 record after timed ones: {r:?}");
            continue;
        }
        seen_nonzero = true;
        assert!(t >= last, "out of order: {t} after {last}: {r:?}");
        last = t;
    }
    let samples = recs.iter().filter(|r| matches!(r, Record::Sample(_))).count() as u64;
    assert_eq!(samples, s.samples);
}

fn never() -> AtomicBool {
    AtomicBool::new(false)
}

fn argv(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn launch_c_program() {
    let dir = TempDir::new("launch");
    let Some(exe) = compile(&dir, "busy") else { return };
    let Some(rec) = recorder(opts(Target::Command(argv(&[exe.to_str().unwrap(), "300"])), &["cpu-clock"])) else {
        return;
    };
    let pid = rec.child_pid().unwrap();
    let out = run(rec, &never(), &mut || {});
    assert_eq!(out.summary.exit_status, Some(0));
    assert!(out.summary.samples > 0, "{:?}", out.summary);
    assert_eq!(out.pids(), BTreeSet::from([pid]), "only the launched command is sampled");
    assert!(out.samples().all(|s| s.period == 100_000 && s.event == 0));
    assert!(out.records.iter().any(|r| matches!(r, Record::Comm(c) if c.pid == pid && c.exec && c.comm == "busy")));
    let exe_s = exe.to_str().unwrap();
    let m = out
        .records
        .iter()
        .find_map(|r| match r {
            Record::Mmap(m) if m.pid == pid && m.path == exe_s && m.prot & 4 != 0 => Some(m),
            _ => None,
        })
        .expect("executable mapping of the command");
    if let Some(id) = buildid::read_build_id(&exe).unwrap() {
        assert_eq!(m.build_id.as_ref(), Some(&id));
        assert!(out.build_ids.iter().any(|b| b.path == exe_s && b.build_id == id));
    }
    assert_eq!(out.header.source, "record");
    assert_eq!(out.header.events.len(), 1);
    assert!(out.header.clock.is_some());
}

#[test]
fn threads_have_distinct_tids() {
    let dir = TempDir::new("threads");
    let Some(exe) = compile(&dir, "threads") else { return };
    let tids_file = dir.path("tids");
    let cmd = argv(&[exe.to_str().unwrap(), tids_file.to_str().unwrap()]);
    let Some(rec) = recorder(opts(Target::Command(cmd), &["cpu-clock"])) else { return };
    let pid = rec.child_pid().unwrap();
    let out = run(rec, &never(), &mut || {});
    assert_eq!(out.summary.exit_status, Some(0));
    let want: BTreeSet<u32> = std::fs::read_to_string(&tids_file).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(want.len(), 3);
    let got: BTreeSet<u32> = out.samples().filter(|s| s.pid == pid).map(|s| s.tid).collect();
    assert!(want.is_subset(&got), "thread ids {want:?} not all sampled; sampled {got:?}");
}

#[test]
fn fork_exec_child_is_described() {
    let dir = TempDir::new("forkexec");
    let (Some(fe), Some(busy)) = (compile(&dir, "forkexec"), compile(&dir, "busy")) else { return };
    let busy_s = busy.to_str().unwrap().to_string();
    let Some(rec) = recorder(opts(Target::Command(argv(&[fe.to_str().unwrap(), &busy_s, "200"])), &["cpu-clock"])) else {
        return;
    };
    let parent = rec.child_pid().unwrap();
    let out = run(rec, &never(), &mut || {});
    assert_eq!(out.summary.exit_status, Some(0));
    let child = out
        .records
        .iter()
        .find_map(|r| match r {
            Record::Fork(t) if t.ppid == parent && t.pid != parent => Some(t.pid),
            _ => None,
        })
        .expect("fork record of the child");
    assert!(
        out.records.iter().any(|r| matches!(r, Record::Comm(c) if c.pid == child && c.exec && c.comm == "busy")),
        "exec comm of the child"
    );
    assert!(out.records.iter().any(|r| matches!(r, Record::Mmap(m) if m.pid == child && m.path == busy_s)), "mmap of the child binary");
    assert!(out.pids().contains(&child), "the child was sampled");
    assert!(out.records.iter().any(|r| matches!(r, Record::Exit(t) if t.pid == child)));
}

#[test]
fn attach_to_pid_catches_late_thread() {
    let dir = TempDir::new("attach");
    let Some(exe) = compile(&dir, "late_thread") else { return };
    let (ready, go, tid_file) = (dir.path("ready"), dir.path("go"), dir.path("tid"));
    let mut proc_ = Command::new(&exe).arg(&ready).arg(&go).arg(&tid_file).spawn().unwrap();
    while !ready.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = proc_.id();
    let Some(rec) = recorder(opts(Target::Pid(pid), &["cpu-clock"])) else {
        let _ = proc_.kill();
        let _ = proc_.wait();
        return;
    };
    // Recording is on from the first progress callback: let the process start its thread.
    let out = run(rec, &never(), &mut || {
        let _ = std::fs::write(&go, "go");
    });
    assert!(proc_.wait().unwrap().success());
    assert_eq!(out.summary.exit_status, None);
    let late: u32 = std::fs::read_to_string(&tid_file).unwrap().trim().parse().unwrap();
    assert_ne!(late, pid);
    assert!(out.samples().any(|s| s.pid == pid && s.tid == late), "late thread {late} sampled");
    assert!(out.samples().any(|s| s.tid == pid), "main thread sampled");
    // The process was described from /proc at start (time 0).
    let exe_s = exe.to_str().unwrap();
    assert!(out.records.iter().any(|r| matches!(r, Record::Mmap(m) if m.time == 0 && m.pid == pid && m.path == exe_s)));
    assert!(out.records.iter().any(|r| matches!(r, Record::Comm(c) if c.time == 0 && c.pid == pid)));
    assert!(out.records.iter().any(|r| matches!(r, Record::Fork(t) if t.tid == late)));
}

#[test]
fn attach_to_missing_pid_is_an_error() {
    let e = Recorder::new(opts(Target::Pid(u32::MAX - 7), &["cpu-clock"])).unwrap_err();
    assert!(matches!(e, RecordError::NoSuchProcess(_)), "{e}");
}

#[test]
fn system_wide_sees_several_processes() {
    let dir = TempDir::new("syswide");
    let Some(busy) = compile(&dir, "busy") else { return };
    let mut bg = Command::new(&busy).arg("3000").spawn().unwrap();
    let Some(rec) = recorder(opts(Target::SystemWide, &["cpu-clock"])) else {
        let _ = bg.kill();
        let _ = bg.wait();
        return;
    };
    let stop = never();
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
        });
        run(rec, &stop, &mut || {})
    });
    let _ = bg.kill();
    let _ = bg.wait();
    assert!(out.pids().len() > 1, "pids {:?}", out.pids());
    assert!(out.pids().contains(&bg.id()), "the busy process was sampled");
    let cpus: BTreeSet<u32> = out.samples().map(|s| s.cpu).collect();
    assert!(!cpus.is_empty());
    // Already-running processes were described from /proc.
    let busy_s = busy.to_str().unwrap();
    assert!(out.records.iter().any(|r| matches!(r, Record::Mmap(m) if m.time == 0 && m.pid == bg.id() && m.path == busy_s)));
}

/// `-a -- CMD`: system-wide until the command exits, its status passed through.
#[test]
fn system_wide_with_a_command_ends_when_it_exits() {
    let dir = TempDir::new("syswidecmd");
    let Some(busy) = compile(&dir, "busy") else { return };
    let mut bg = Command::new(&busy).arg("3000").spawn().unwrap();
    let cmd = argv(&["sh", "-c", "sleep 0.3; exit 5"]);
    let Some(rec) = recorder(opts(Target::SystemWideCommand(cmd), &["cpu-clock"])) else {
        let _ = bg.kill();
        let _ = bg.wait();
        return;
    };
    let out = run(rec, &never(), &mut || {});
    let _ = bg.kill();
    let _ = bg.wait();
    check_invariants(&out.summary, &out.records);
    assert_eq!(out.summary.exit_status, Some(5));
    assert!(out.pids().len() > 1, "pids {:?}", out.pids());
    assert!(out.pids().contains(&bg.id()), "a process other than the command was sampled");
    // The command's exec was seen (system-wide side-band), not only /proc at start.
    assert!(out.records.iter().any(|r| matches!(r, Record::Comm(c) if c.exec && c.comm == "sh")));
}

#[test]
fn missing_command_is_a_clean_error() {
    let e = Recorder::new(opts(Target::Command(argv(&["tailprof-no-such-cmd-42"])), &["cpu-clock"])).unwrap_err();
    assert_eq!(e.to_string(), "command not found: tailprof-no-such-cmd-42");
}

#[test]
fn exit_status_passes_through() {
    let Some(rec) = recorder(opts(Target::Command(argv(&["sh", "-c", "exit 3"])), &["cpu-clock"])) else { return };
    let out = run(rec, &never(), &mut || {});
    assert_eq!(out.summary.exit_status, Some(3));
}

#[test]
fn stop_flag_ends_recording_and_data_reads_back() {
    let dir = TempDir::new("stop");
    let Some(rec) = recorder(opts(Target::Command(argv(&["sleep", "5"])), &["cpu-clock"])) else { return };
    let header = rec.header();
    let path = dir.path("t.trace");
    let mut w = TraceWriter::create(&path, &header).unwrap();
    let stop = never();
    let mut rec = rec;
    let summary = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
        });
        rec.run(&mut w, &stop, &mut |_| {}).unwrap()
    });
    assert_eq!(summary.exit_status, Some(128 + libc::SIGTERM), "sleep was terminated");
    let written = w.finish(Some(summary.duration_ns)).unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    let mut sink = VecSink::default();
    let read = r.read_all(&mut sink).unwrap();
    assert!(read.complete, "{read:?}");
    assert_eq!(written.stats.samples, summary.samples);
    let n = sink.0.iter().filter(|r| matches!(r, Record::Sample(_))).count() as u64;
    assert_eq!(n, summary.samples);
    assert!(sink.0.iter().any(|r| matches!(r, Record::Comm(c) if c.exec && c.comm == "sleep")));
    check_invariants(&summary, &sink.0);
}

#[test]
fn two_events_share_a_ring_and_are_told_apart() {
    let dir = TempDir::new("twoev");
    let Some(exe) = compile(&dir, "busy") else { return };
    let Some(rec) = recorder(opts(Target::Command(argv(&[exe.to_str().unwrap(), "300"])), &["cpu-clock", "task-clock"])) else {
        return;
    };
    let out = run(rec, &never(), &mut || {});
    let mut per_event: HashMap<u16, u64> = HashMap::new();
    for s in out.samples() {
        *per_event.entry(s.event).or_default() += 1;
    }
    assert!(per_event.get(&0).is_some_and(|&n| n > 0) && per_event.get(&1).is_some_and(|&n| n > 0), "{per_event:?}");
    assert_eq!(out.header.events.len(), 2);
    // Side-band comes from event 0 only: one exec comm, not one per event.
    let execs = out.records.iter().filter(|r| matches!(r, Record::Comm(c) if c.exec)).count();
    assert_eq!(execs, 1);
}

/// A trace writer whose rounds take long, as when a big chunk is compressed or the
/// recorder waits for a CPU: the drain thread must copy the rings the main thread is late
/// for, and what it copied must come out whole, once, and in order.
struct SlowRounds(TraceWriter<Vec<u8>>);

/// The recorder writes through the `RecordOutput` methods below (overridden), so the
/// stream's own handlers are not needed.
impl tailprof_format::Sink for SlowRounds {}

impl tailprof_collect::session::RecordOutput for SlowRounds {
    fn write_record(&mut self, r: &Record) -> Result<(), tailprof_format::FormatError> {
        self.0.write(r)
    }
    fn write_sample(&mut self, s: &Sample) -> Result<(), tailprof_format::FormatError> {
        self.0.write_sample(s)
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), tailprof_format::FormatError> {
        self.0.add_build_id(e)
    }
    fn end_round(&mut self) -> Result<(), tailprof_format::FormatError> {
        std::thread::sleep(Duration::from_millis(40));
        self.0.end_round()
    }
    fn bytes_written(&self) -> u64 {
        self.0.bytes_written()
    }
}

#[test]
fn the_drain_thread_covers_a_late_main_thread() {
    let dir = TempDir::new("late");
    let Some(exe) = compile(&dir, "busy") else { return };
    let mut o = opts(Target::Command(argv(&[exe.to_str().unwrap(), "1500"])), &["cpu-clock"]);
    // 50,000 samples/s into a 2-page ring: half of it fills in about a millisecond,
    // far less than one 40 ms round.
    o.sampling.period = Some(20_000);
    o.mmap_pages = 2;
    let Some(mut rec) = recorder(o) else { return };
    let header = rec.header();
    let mut out = SlowRounds(TraceWriter::new(Vec::new(), &header).unwrap());
    let summary = rec.run_to(&mut out, &never(), &mut |_| {}).expect("run");
    let (bytes, written) = out.0.finish_into_inner(Some(summary.duration_ns)).unwrap();
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let mut sink = VecSink::default();
    let read = r.read_all(&mut sink).unwrap();
    assert!(read.complete && read.damaged_chunks == 0, "{read:?}");
    assert_eq!(written.stats.samples, summary.samples);
    check_invariants(&summary, &sink.0);
    assert!(summary.spooled > 0, "the drain thread never copied a ring: {summary:?}");
    // Copied once: no sample appears twice.
    let mut seen = BTreeSet::new();
    for s in sink.0.iter().filter_map(|r| match r {
        Record::Sample(s) => Some(s),
        _ => None,
    }) {
        assert!(seen.insert((s.time, s.cpu, s.tid)), "sample written twice: {s:?}");
    }
    assert_eq!(summary.exit_status, Some(0));
}
