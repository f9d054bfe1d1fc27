//! Attachable Python markers (issue 22, point 5): a pure-Python program started without
//! tailprof publishes its control block in a memfd named `tailprof_control`;
//! `tailprof record -p PID` finds it in /proc/PID/maps, checks it, enables the markers, and
//! the program's items appear (classes named), for a second attach too. Hostile processes
//! that name a memfd `tailprof_control` with garbage, a wrong size or another user's file
//! are refused with one line and never written.
//!
//! Skips (counted, tailprof_testkit) without python3, when perf events cannot be opened,
//! and (the owner case) when not root.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn cannot_record(err: &str) -> bool {
    ["perf_event_open", "perf_event_paranoid", "Permission denied", "not permitted"].iter().any(|s| err.contains(s))
}

/// A Python process started without tailprof; killed when dropped.
struct Py {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Py {
    fn start(script: &Path, args: &[&str]) -> Option<Py> {
        if tailprof_testkit::have_command("python3").is_none() {
            tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not found");
            return None;
        }
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .env("PYTHONPATH", root().join("python"))
            .env_remove("TAILPROF_MARKERS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python3");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        let py = Py { child, stdin, lines };
        assert_eq!(py.line(), "ready");
        Some(py)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(Duration::from_secs(60)).expect("a line from the Python program")
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `record -p PID -o TRACE` for about `secs` seconds after it says it records, stopped
/// with SIGINT; its stderr, or None (skip) when perf events cannot be opened.
fn record_p(pid: u32, trace: &Path, secs: u64) -> Option<String> {
    record_while(&["-p", &pid.to_string()], trace, secs, || ())
}

/// `record ARGS -o TRACE`: once it says it records, `during()`, then `secs` seconds, then
/// SIGINT; its stderr, or None (skip) when perf events cannot be opened.
fn record_while<T>(args: &[&str], trace: &Path, secs: u64, during: impl FnOnce() -> T) -> Option<String> {
    record_while_env(args, &[], trace, secs, during)
}

/// [`record_while`] with environment variables for tailprof.
fn record_while_env<T>(args: &[&str], env: &[(&str, &str)], trace: &Path, secs: u64, during: impl FnOnce() -> T) -> Option<String> {
    let mut rec = tailprof()
        .arg("record")
        .envs(env.iter().copied())
        .args(args)
        .arg("-o")
        .arg(trace)
        .env("TAILPROF_CACHE_DIR", "off")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tailprof");
    let err = rec.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("recording;") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let started = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    let mut kept = None;
    if started {
        kept = Some(during());
        std::thread::sleep(Duration::from_secs(secs));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    }
    let status = rec.wait().unwrap();
    let stderr = reader.join().unwrap();
    drop(kept);
    if !status.success() || !started {
        if cannot_record(&stderr) {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("cannot record here: {stderr}"));
            return None;
        }
        panic!("record {args:?} failed ({status}): {stderr}");
    }
    Some(stderr)
}

fn items_json(trace: &Path) -> Value {
    let out = tailprof().args(["items", "--json", "--top", "0"]).arg(trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    assert!(out.status.success(), "items: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (item count, class names) of a trace's items.
fn items_and_classes(trace: &Path) -> (usize, std::collections::BTreeSet<String>) {
    let v = items_json(trace);
    let items = v["items"].as_array().unwrap_or_else(|| panic!("no items array: {v}"));
    let classes = items.iter().filter_map(|it| it["class"].as_str().map(str::to_string)).collect();
    (items.len(), classes)
}

#[test]
fn python_program_started_without_tailprof_is_attached_twice() {
    let Some(py) = Py::start(&data("python_attach_target.py"), &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for round in ["first", "second"] {
        let trace = dir.path().join(format!("{round}.trace"));
        let Some(stderr) = record_p(py.pid(), &trace, 2) else {
            return;
        };
        assert!(!stderr.contains("has no marker library"), "{round} attach found no control block: {stderr}");
        assert!(!stderr.contains("cannot attach"), "{round}: {stderr}");
        let (n, classes) = items_and_classes(&trace);
        // ~2 s of a loop of items of about a millisecond: hundreds; at least some.
        assert!(n >= 20, "{round} attach: {n} items\n{stderr}");
        let want: std::collections::BTreeSet<String> = ["fast", "slow"].iter().map(|s| s.to_string()).collect();
        assert_eq!(classes, want, "{round} attach: classes named by the program");
    }
    // The recorder switched the markers off at the end: the block says state 0.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", py.pid())).unwrap();
    let line = maps.lines().find(|l| l.ends_with("/memfd:tailprof_control (deleted)")).expect("the control memfd");
    let start = u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{}/mem", py.pid())).unwrap();
    let mut b = [0u8; 16];
    use std::io::{Read, Seek, SeekFrom};
    mem.seek(SeekFrom::Start(start)).unwrap();
    mem.read_exact(&mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0, "state is off after the recording");
}

/// One hostile process: refused with one line naming the reason, its memfd unchanged.
fn hostile(mode: &str, args: &[&str], reason: &str) {
    let Some(mut py) = Py::start(&data("python_attach_hostile.py"), &[&[mode], args].concat()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("h.trace");
    let Some(stderr) = record_p(py.pid(), &trace, 1) else {
        return;
    };
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("tailprof_control")).collect();
    assert_eq!(lines.len(), 1, "{mode}: one line about the control block: {stderr}");
    assert!(lines[0].contains("nothing written") && lines[0].contains(reason), "{mode}: {}", lines[0]);
    let mut stdin = py.stdin.take().unwrap();
    writeln!(stdin, "done").unwrap();
    assert_eq!(py.line(), "unchanged", "{mode}: the recorder wrote into the refused memfd");
}

#[test]
fn hostile_control_memfd_with_garbage_is_refused() {
    hostile("garbage", &[], "not a valid marker control block");
}

#[test]
fn hostile_control_memfd_of_the_wrong_size_is_refused() {
    if !tailprof_testkit::is_root() {
        // Without map_files the recorder cannot see the file's size (and runs as the
        // target's user: module memfd docs); the block itself is valid.
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "the memfd's size is read through /proc/PID/map_files");
        return;
    }
    hostile("size", &[], "8192 bytes");
}

#[test]
fn hostile_control_memfd_of_another_user_is_refused() {
    let Some((uid, _)) =
        tailprof_testkit::unprivileged_user("tailprof-atk", "a root process holding a control memfd owned by another user")
    else {
        return;
    };
    hostile("owner", &[&uid.to_string()], &format!("owned by uid {uid}"));
}

/// `record -a` (and the agent, which records the same way: `Target::SystemWide` attaches
/// every running process with a control block at the start) attaches a running Python
/// program through its memfd too.
#[test]
fn record_a_attaches_a_running_python_program() {
    let Some(py) = Py::start(&data("python_attach_target.py"), &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("a.trace");
    let o =
        tailprof().args(["record", "-a", "-o"]).arg(&trace).args(["--", "sleep", "2"]).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        if cannot_record(&stderr) {
            tailprof_testkit::skip(tailprof_testkit::Need::SystemWide, format_args!("cannot record -a here: {stderr}"));
            return;
        }
        panic!("record -a failed: {stderr}");
    }
    let v = items_json(&trace);
    let pid = u64::from(py.pid());
    let ours: Vec<&Value> = v["items"].as_array().unwrap().iter().filter(|it| it["pid"].as_u64() == Some(pid)).collect();
    assert!(ours.len() >= 20, "{} items of the Python program\n{stderr}", ours.len());
    assert!(ours.iter().all(|it| matches!(it["class"].as_str(), Some("fast" | "slow"))), "classes named");
}

/// `record -a` (and the agent) attaches a Python program that starts while it records: the
/// follower sees the Python runtime mapped and watches the process until its control
/// memfd appears.
#[test]
fn record_a_attaches_a_python_program_started_later() {
    if tailprof_testkit::have_command("python3").is_none() {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("later.trace");
    let mut pid = 0;
    let Some(stderr) = record_while(&["-a"], &trace, 4, || {
        let py = Py::start(&data("python_attach_target.py"), &[]).unwrap();
        pid = py.pid();
        py
    }) else {
        return;
    };
    // Other processes of the machine may start too: at least ours was attached late.
    assert!(stderr.contains("process(es) that started while recording"), "the follow note: {stderr}");
    let v = items_json(&trace);
    let ours: Vec<&Value> = v["items"].as_array().unwrap().iter().filter(|it| it["pid"].as_u64() == Some(u64::from(pid))).collect();
    assert!(ours.len() >= 20, "{} items of the Python program started while recording\n{stderr}", ours.len());
    assert!(ours.iter().all(|it| matches!(it["class"].as_str(), Some("fast" | "slow"))), "classes named");
}

/// A Python program that imports `tailprof_markers` late: `record -a` with the watch
/// schedule `schedule` (the internal knob TAILPROF_TEST_PYTHON_WATCH, in ms) while a
/// Python program started during the recording imports the module `delay` seconds after
/// it started; the items of that program.
fn late_import(schedule: &str, delay: &str, secs: u64) -> Option<(Vec<Value>, String)> {
    if tailprof_testkit::have_command("python3").is_none() {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not found");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("late.trace");
    let mut pid = 0;
    let stderr = record_while_env(&["-a"], &[("TAILPROF_TEST_PYTHON_WATCH", schedule)], &trace, secs, || {
        let py = Py::start(&data("python_attach_target.py"), &[delay]).unwrap();
        pid = py.pid();
        py
    })?;
    // A trace without any marker (nothing attached, e.g. the control run alone on the
    // machine) has no items: `items` says so and fails.
    let out = tailprof().args(["items", "--json", "--top", "0"]).arg(&trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("no item markers in this trace") {
        return Some((Vec::new(), stderr));
    }
    assert!(out.status.success(), "items: {err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = v["items"].as_array().unwrap().iter().filter(|it| it["pid"].as_u64() == Some(u64::from(pid))).cloned().collect();
    Some((ours, stderr))
}

/// Regression (issue 22 leftovers): a Python program that imported `tailprof_markers` more
/// than 30 s after it started was never attached by `record -a` or the agent (the follower
/// watched it once a second for 30 s only). Now the watch goes on with a backoff for as
/// long as the process lives. Scaled down through the internal schedule knob: looks every
/// 100 ms for the first second, then every 300 ms; the program imports after 2.5 s, in the
/// second phase. The same run with the first phase alone (the old rule, scaled) attaches
/// nothing: the test can tell the two apart.
#[test]
fn record_a_attaches_a_python_program_that_imports_the_module_late() {
    let Some((ours, stderr)) = late_import("100:1000,300", "2.5", 5) else {
        return;
    };
    assert!(stderr.contains("Python process(es) watched for a control memfd"), "the follow note: {stderr}");
    assert!(ours.len() >= 20, "{} items of the Python program that imported late\n{stderr}", ours.len());
    assert!(ours.iter().all(|it| matches!(it["class"].as_str(), Some("fast" | "slow"))), "classes named");
    // Control: a watch that ends after its first phase (what the recorder did before,
    // with 30 s) never sees the late import.
    let Some((ours, stderr)) = late_import("100:1000", "2.5", 5) else {
        return;
    };
    assert!(ours.is_empty(), "{} items although the watch had ended before the import\n{stderr}", ours.len());
}

/// Regression (issue 22 leftovers): a Python program already running when `record -a` (or
/// the agent) starts, that imports `tailprof_markers` only later, was never attached: the
/// start-up attach found no control block yet, and the follower watched only processes it
/// saw map a Python runtime (MMAP2) while recording. Now the start-up attach hands such a
/// process to the follower, which finds its Python runtime (worker scan, file cache) and
/// watches it. The program waits for a line on stdin, sent one second after the recorder
/// says it records, so it imports while recording whatever the start-up takes.
#[test]
fn record_a_attaches_a_python_program_running_at_start_that_imports_later() {
    let Some(py) = Py::start(&data("python_attach_target.py"), &["stdin"]) else {
        return;
    };
    let mut py = py;
    let mut stdin = py.stdin.take().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("running.trace");
    let Some(stderr) = record_while_env(&["-a"], &[("TAILPROF_TEST_PYTHON_WATCH", "100:1000,300")], &trace, 4, || {
        std::thread::sleep(Duration::from_secs(1));
        writeln!(stdin, "import").unwrap();
    }) else {
        return;
    };
    assert!(stderr.contains("Python process(es) watched for a control memfd"), "the follow note: {stderr}");
    let v = items_json(&trace);
    let pid = u64::from(py.pid());
    let ours: Vec<&Value> = v["items"].as_array().unwrap().iter().filter(|it| it["pid"].as_u64() == Some(pid)).collect();
    assert!(ours.len() >= 20, "{} items of the Python program running at the start that imported later\n{stderr}", ours.len());
    assert!(ours.iter().all(|it| matches!(it["class"].as_str(), Some("fast" | "slow"))), "classes named");
}
