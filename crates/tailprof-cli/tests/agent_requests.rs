//! The agent's retained slow requests, recorded for real (root: system-wide sampling):
//!
//! - switch markers (issue 24): a C epoll loop (include/tailprof.h) interleaves 24
//!   requests on one thread with `tailprof_item_switch`; each writes its trace context
//!   (`tailprof_item_trace`). Every request is retained (threshold 1 ms): each gets the
//!   samples taken while it was current — its own CPU time as the program logs it, within
//!   sampling error, not the whole loop's (begin → end on the thread would give every
//!   request most of the others' samples) — and `items --store DIR --trace-id ID` finds
//!   exactly the request of that trace; an unknown trace id is one error line, non-zero;
//! - the critical path (issue 21 part 8, `--causes`): a request thread hands each request
//!   to a worker through a condition variable; one in three takes the worker's slow path
//!   (15 ms of thread CPU time in `worker_slow_path`). The retained slow requests name the
//!   worker as waker, and what it did meanwhile (`during`) holds its 15 ms on CPU in
//!   `worker_slow_path` (on a loaded machine the rest is mostly `runnable`).
//!
//! The programs wait until the agent has attached to them (its control block's state), so
//! no marker is lost to timing. Bounds are statistical (sample counts), never timings.

use serde_json::Value;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

mod cfixture;

/// The agent samples the whole machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const FREQ: u64 = 499;

fn root() -> bool {
    // SAFETY: plain getter.
    let r = unsafe { libc::geteuid() } == 0;
    if !r {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "the agent samples system-wide and records switches (root)");
    }
    r
}

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn cannot_record(err: &str) -> bool {
    ["perf_event_open", "tracefs", "perf_event_paranoid", "Permission denied", "not permitted"].iter().any(|s| err.contains(s))
}

/// A running agent; its stderr lines so far.
struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `tailprof agent --store STORE EXTRA` and waits for its "recording" line; None
/// (skip) when system-wide recording is refused here.
fn start_agent(store: &Path, extra: &[&str]) -> Option<Running> {
    let mut child = tailprof()
        .args(["agent", "--store"])
        .arg(store)
        .args(["--window", "1s", "-F", &FREQ.to_string(), "--duration", "300s", "--slow-percentile", "off"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut r = Running { child, lines: rx, log: Vec::new() };
    loop {
        match r.lines.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(l) => {
                let ok = l.contains("agent: recording");
                r.log.push(l);
                if ok {
                    return Some(r);
                }
            }
            Err(_) => {
                let _ = r.child.kill();
                let st = r.child.wait().unwrap();
                let text = r.log.join("\n");
                if cannot_record(&text) {
                    tailprof_testkit::skip(
                        tailprof_testkit::Need::SystemWide,
                        format_args!("system-wide recording is not allowed here: {text}"),
                    );
                    return None;
                }
                panic!("tailprof agent exited ({st}) before recording:\n{text}");
            }
        }
    }
}

impl Running {
    fn stop(mut self) -> String {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let st = self.child.wait().unwrap();
        self.log.extend(self.lines.iter());
        let log = self.log.join("\n");
        assert!(st.success(), "agent failed ({st}):\n{log}");
        log
    }
}

/// Other system-wide tailprof recorders running on this machine (`agent`, `record -a`),
/// not `ours`: one of them may attach to our program first and take its markers (a
/// process is attached by one recorder at a time), which no test here can prevent.
fn other_recorders(ours: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != ours)
        .filter(|pid| {
            let Ok(c) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
            let is = |a: &[u8], s: &str| a == s.as_bytes();
            args.first().is_some_and(|a0| a0.ends_with(b"tailprof"))
                && (args.iter().any(|a| is(a, "agent"))
                    || (args.iter().any(|a| is(a, "record")) && args.iter().any(|a| is(a, "-a") || is(a, "--all-cpus"))))
        })
        .collect()
}

/// Skips (true) when our agent got too few of the program's requests and another
/// system-wide recorder ran meanwhile (it took the program's markers).
fn taken_by_another_recorder(seen: usize, want: usize, others: &[u32]) -> bool {
    if seen < want && !others.is_empty() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::SystemWide,
            format_args!("another system-wide tailprof recorder (pids {others:?}) ran meanwhile and took the program's markers: {seen} of {want} requests seen"),
        );
        return true;
    }
    false
}

fn items(store: &Path, extra: &[&str]) -> std::process::Output {
    tailprof().args(["items", "--store"]).arg(store).args(["--since", "1d", "--json"]).args(extra).output().unwrap()
}

#[test]
fn switch_markers_and_trace_ids_in_the_agents_retained_requests() {
    if !root() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = cfixture::compile(dir.path(), "epoll_loop", &["-DTAILPROF_TEST_AGENT"]) else {
        return;
    };
    let store = dir.path().join("store");
    let Some(agent) = start_agent(&store, &["--slow-threshold", "1ms"]) else {
        return;
    };
    let mut others = other_recorders(agent.child.id());
    let out = Command::new(&bin).output().unwrap();
    assert!(out.status.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    others.extend(other_recorders(agent.child.id()));
    let log = agent.stop();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let truth: std::collections::HashMap<u64, u64> = stdout
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "truth").then_some(())?;
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(truth.len(), 24, "{stdout}");
    let o = items(&store, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mine: Vec<&Value> = v["items"].as_array().unwrap().iter().filter(|it| it["comm"] == "epoll_loop").collect();
    if taken_by_another_recorder(mine.len(), 24, &others) {
        return;
    }
    assert_eq!(mine.len(), 24, "every request is retained:\n{v:#}\n{log}");
    let period_ns = 1e9 / FREQ as f64;
    let (mut got, mut want) = (0u64, 0f64);
    for it in &mine {
        let id = it["item_id"].as_u64().unwrap();
        let t = truth[&id] as f64;
        let n = it["samples"].as_u64().unwrap();
        assert!(it["switching"]["current_ns"].as_u64().unwrap() > 0, "{it}");
        assert_eq!(it["switching"]["resumes"], 4, "begin + 3 switches: {it}");
        // Its own samples: within 4 standard deviations (+3) of its own CPU time.
        let expect = t / period_ns;
        assert!((n as f64 - expect).abs() <= 4.0 * expect.sqrt() + 3.0, "item {id}: {n} samples, truth {expect:.1}: {it}");
        if n >= 5 {
            assert_eq!(it["functions"][0][0], "work_part", "{it}");
        }
        got += n;
        want += expect;
        let i = id - 1000;
        assert_eq!(it["trace_id"], format!("ab{}{:02x}", "0".repeat(28), i + 1), "{it}");
    }
    assert!((got as f64 - want).abs() <= 0.15 * want, "the requests' samples {got} against their CPU time {want:.0} samples");
    // The trace id finds its request; an unknown one is an error.
    let o = items(&store, &["--trace-id", &format!("ab{}06", "0".repeat(28))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<u64> = v["items"].as_array().unwrap().iter().map(|it| it["item_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1005], "{v:#}");
    let o = items(&store, &["--trace-id", &format!("ab{}ff", "0".repeat(28))]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no retained request of trace ab") && err.trim().lines().count() == 1, "{err}");
}

#[test]
fn retained_slow_requests_say_what_their_waker_did_meanwhile() {
    if !root() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = cfixture::compile(dir.path(), "handoff", &["-DTAILPROF_TEST_AGENT"]) else {
        return;
    };
    let store = dir.path().join("store");
    let Some(agent) = start_agent(&store, &["--slow-threshold", "10ms", "--causes"]) else {
        return;
    };
    let mut others = other_recorders(agent.child.id());
    let st = Command::new(&bin).arg("30").status().unwrap();
    assert!(st.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    others.extend(other_recorders(agent.child.id()));
    let log = agent.stop();
    let o = items(&store, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let slow: Vec<&Value> =
        v["items"].as_array().unwrap().iter().filter(|it| it["comm"] == "handoff" && it["item_id"].as_u64().unwrap() % 3 == 0).collect();
    if taken_by_another_recorder(slow.len(), 8, &others) {
        return;
    }
    assert!(slow.len() >= 8, "only {} slow requests retained:\n{v:#}\n{log}", slow.len());
    // Requests that began before the agent's switch and wakeup events were open have no
    // causes (the events open at the first marker); the others name the worker.
    let (mut named, mut woken) = (0, 0);
    for it in &slow {
        let Some(w) = it["woken_by"].as_array().and_then(|a| a.first()) else {
            continue;
        };
        woken += 1;
        if w["tid"] == it["tid"] || w["pid"] != it["pid"] || w["comm"] != "handoff" {
            continue;
        }
        // What the worker did during the wait, largest first. Its on-CPU part is mostly
        // `worker_slow_path`, and holds the slow path's 15 ms of CPU (at least 10 ms of it
        // in samples on that stack). Not "most of the wait": on a loaded machine the
        // worker may wait for a CPU longer than it runs (then the path says `runnable`).
        let during = w["during"].as_array().unwrap();
        let ns = |d: &Value| d["ns"].as_u64().unwrap();
        let cpu: u64 = during.iter().filter(|d| d["state"] == "cpu").map(&ns).sum();
        let slow_path: u64 = during
            .iter()
            .filter(|d| d["state"] == "cpu" && d["frames"].as_array().unwrap().iter().any(|f| f == "worker_slow_path"))
            .map(&ns)
            .sum();
        if slow_path * 2 > cpu && slow_path >= 10_000_000 {
            named += 1;
        }
    }
    assert!(woken >= 6, "only {woken} of {} slow requests have a waker:\n{v:#}\n{log}", slow.len());
    assert!(
        named * 3 >= woken * 2,
        "{named} of {woken} woken slow requests name the worker and worker_slow_path for most of its CPU time:\n{v:#}"
    );
}

/// `items --store DIR --trace-id ID` on a store written here (no root needed): the
/// requests of that trace, in the trace form; an unknown trace is one error line.
#[test]
fn trace_id_finds_stored_requests() {
    use tailprof_store::schema::{ItemRow, WindowMeta, SCHEMA_VERSION};
    use tailprof_store::{Store, Table};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let (store, _) = Store::open(&root).unwrap();
    let now = tailprof_store::time::now_us();
    let meta = WindowMeta {
        schema_version: SCHEMA_VERSION,
        host: "h".into(),
        window_start_us: now - 1_000_000,
        window_end_us: now,
        ..WindowMeta::default()
    };
    store.ensure_dir(&store.partition_dir(Table::Items, "h", now - 1_000_000)).unwrap();
    let row = |id: u64, trace: &str| ItemRow {
        begin_us: now - 500_000,
        duration_ns: 5_000_000 * id,
        class: "GET".into(),
        item_id: id,
        pid: 7,
        tid: 7,
        comm: "srv".into(),
        reason: "threshold".into(),
        limit_ns: 1_000_000,
        samples: 0,
        off_cpu_ns: 0,
        explanation: r#"{"stacks":[]}"#.into(),
        trace_id: trace.into(),
        span_id: if trace.is_empty() { String::new() } else { format!("{id:016x}") },
    };
    let t1 = "4bf92f3577b34da6a3ce929d0e0e4736";
    let rows = [row(1, t1), row(2, "00000000000000000000000000000abc"), row(3, "")];
    tailprof_store::write_items(&store.window_file(Table::Items, "h", now - 1_000_000, now), &meta, &rows).unwrap();
    // Upper case and Jaeger's short form are the same ids.
    for (arg, want) in [(t1.to_uppercase(), 1u64), ("abc".to_string(), 2)] {
        let o = items(&root, &["--trace-id", &arg]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let got: Vec<u64> = v["items"].as_array().unwrap().iter().map(|i| i["item_id"].as_u64().unwrap()).collect();
        assert_eq!(got, [want], "{v:#}");
        assert_eq!(v["items"][0]["span_id"], format!("{want:016x}"));
    }
    let o = items(&root, &["--trace-id", "1234"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no retained request of trace 00000000000000000000000000001234")
            && err.contains("2 retained requests carry a trace id"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // The text form names the trace.
    let o = tailprof().args(["items", "--store"]).arg(&root).args(["--since", "1d", "--trace-id", t1]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("trace {t1} span 0000000000000001")));
}
