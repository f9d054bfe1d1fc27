//! Marker runtime + collector, end to end: a C program using include/tailprof.h (built
//! here with `cc`), launched with the region in its environment or attached to with
//! `-p`-style attach, drained by `MarkerCollector`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use tailprof_collect::items::markers::{MarkerCollector, MarkerConfig};
use tailprof_format::{MarkerKind, Record};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Build `fixture` (tests/fixtures/markers/NAME.c); `tag` names the output.
fn build_fixture(name: &str, tag: &str) -> Option<PathBuf> {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("markers");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(format!("{name}{tag}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/markers/{name}.c"));
    match Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", root().join("include").display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

/// Build the fixture; `tag` names the output (one per test: tests run in parallel and must
/// not exec a file another test is rewriting).
fn build(flags: &[&str], tag: &str) -> Option<PathBuf> {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("markers");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(format!("two_threads{tag}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/markers/two_threads.c");
    let r = Command::new("cc")
        .args(["-O2", "-g", "-pthread", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg(format!("-I{}", root().join("include").display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    match r {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

struct Prog {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Prog {
    /// Run `cmd` with piped stdin/stdout.
    fn start(cmd: &mut Command) -> Prog {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Prog { child, stdin, stdout }
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn send(&mut self, s: &str) {
        self.stdin.as_mut().unwrap().write_all(s.as_bytes()).unwrap();
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        l.trim().to_string()
    }
    fn round(&mut self) -> [u32; 2] {
        self.send("go\n");
        let l = self.line();
        let v: Vec<u32> = l.strip_prefix("done ").expect(&l).split(' ').map(|x| x.parse().unwrap()).collect();
        [v[0], v[1]]
    }
    fn end(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// Start through `sh`, which reads the region path from stdin and execs the program with
/// it in the environment (same pid, like `tailprof record -- CMD`).
fn launched(exe: &Path, n: u32, mc: &mut MarkerCollector) -> Prog {
    let mut sh = Command::new("sh");
    sh.args(["-c", "IFS= read -r p; TAILPROF_MARKERS=\"$p\" exec \"$0\" \"$@\""]);
    let mut p = Prog::start(sh.arg(exe).arg(n.to_string()));
    let env = mc.prepare_child(p.pid()).unwrap();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, "TAILPROF_MARKERS");
    p.send(&format!("{}\n", env[0].1));
    assert_eq!(p.line(), "ready");
    p
}

/// Check one round: per thread, n begin/end pairs with the expected ids in order,
/// non-decreasing times; thread 0's items carry the class named "query".
fn check_round(recs: &[Record], pid: u32, tids: [u32; 2], round: u64, n: u64) {
    let class_id = recs.iter().find_map(|r| match r {
        Record::ItemClass(c) if c.name == "query" && c.pid == pid => Some(c.id),
        _ => None,
    });
    for (t, &tid) in tids.iter().enumerate() {
        let ms: Vec<_> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Marker(m) if m.tid == tid => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(ms.len() as u64, 2 * n, "thread {t} (tid {tid})");
        for (i, pair) in ms.chunks(2).enumerate() {
            let id = t as u64 * 1_000_000 + round * 1000 + i as u64;
            assert_eq!((pair[0].kind, pair[0].item), (MarkerKind::Begin, id));
            assert_eq!((pair[1].kind, pair[1].item), (MarkerKind::End, id));
            assert_eq!(pair[0].pid, pid);
            let want_class = if t == 0 { class_id.expect("ItemClass 'query' emitted") } else { 0 };
            assert_eq!(pair[0].class, want_class);
            assert_eq!(pair[1].class, 0);
        }
        assert!(ms.windows(2).all(|w| w[0].time <= w[1].time), "times must not go back");
    }
}

fn count(recs: &[Record]) -> (u64, u64) {
    let markers = recs.iter().filter(|r| matches!(r, Record::Marker(_))).count() as u64;
    let lost = recs
        .iter()
        .map(|r| match r {
            Record::Lost(l) => l.count,
            _ => 0,
        })
        .sum();
    (markers, lost)
}

#[test]
fn launched_command_two_threads() {
    let Some(exe) = build(&[], "_launched") else { return };
    let mut mc = MarkerCollector::new();
    let mut p = launched(&exe, 300, &mut mc);
    let pid = p.pid();
    let mut recs = Vec::new();
    let tids = p.round();
    let s = mc.drain(&mut recs);
    assert_eq!((s.markers, s.dropped, s.classes), (1200, 0, 1));
    check_round(&recs, pid, tids, 0, 300);
    assert!(recs.windows(2).all(|w| w[0].time() <= w[1].time()), "drain output sorted by time");
    p.end();
    let s = mc.finish(&mut recs);
    assert_eq!(s.markers, 0);
    assert!(!Path::new(&format!("/dev/shm/tailprof.{pid}")).exists(), "region unlinked");
}

#[test]
fn full_ring_drops_are_counted() {
    let Some(exe) = build(&[], "_ring") else { return };
    let cfg = MarkerConfig { ring_records: 8, ..MarkerConfig::default() };
    let mut mc = MarkerCollector::with_config(cfg);
    let mut p = launched(&exe, 100, &mut mc);
    p.round();
    let mut recs = Vec::new();
    let s = mc.drain(&mut recs);
    assert_eq!(s.markers, 16, "each thread's ring holds 8");
    assert_eq!(s.dropped, 400 - 16);
    assert_eq!(count(&recs), (16, 384));
    p.end();
    mc.finish(&mut recs);
}

#[test]
fn threads_without_a_slot_are_counted() {
    let Some(exe) = build(&[], "_slots") else { return };
    let cfg = MarkerConfig { slots: 1, ..MarkerConfig::default() };
    let mut mc = MarkerCollector::with_config(cfg);
    let mut p = launched(&exe, 50, &mut mc);
    p.round();
    let mut recs = Vec::new();
    let s = mc.drain(&mut recs);
    assert_eq!((s.markers, s.dropped), (100, 100));
    p.end();
    mc.finish(&mut recs);
}

#[test]
fn attach_to_running_process_twice() {
    let Some(exe) = build(&[], "_attach") else { return };
    // `env EXE` execs EXE in place: a process started without the recorder.
    let mut p = Prog::start(Command::new("env").arg(&exe).arg("200"));
    assert_eq!(p.line(), "ready");
    let pid = p.pid();
    // Before attach: markers are off, nothing is recorded anywhere.
    p.round();
    for round in [1u64, 3] {
        let mut mc = MarkerCollector::new();
        assert!(mc.attach(pid).unwrap(), "tailprof_control found");
        let tids = p.round();
        let mut recs = Vec::new();
        mc.drain(&mut recs);
        let s = mc.finish(&mut recs);
        assert_eq!(s.dropped, 0);
        check_round(&recs, pid, tids, round, 200);
        // After finish the process is disabled again.
        p.round();
    }
    p.end();
}

#[test]
fn attach_without_marker_library_is_false() {
    let mut c = Command::new("sleep").arg("5").spawn().unwrap();
    let mut mc = MarkerCollector::new();
    assert!(!mc.attach(c.id()).unwrap());
    assert!(mc.pids().is_empty());
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn disabled_build_has_no_symbols_and_no_calls() {
    let Some(exe) = build(&["-DTAILPROF_DISABLE", "-O0"], "_disabled") else { return };
    let nm = Command::new("nm").arg(&exe).output();
    let Ok(nm) = nm else {
        tailprof_testkit::skip(tailprof_testkit::Need::Binutils, "no nm");
        return;
    };
    let syms = String::from_utf8_lossy(&nm.stdout);
    assert!(!syms.contains("tailprof"), "disabled build defines tailprof symbols:\n{syms}");
    assert!(!syms.contains("clock_gettime"), "disabled build reads the clock");
    let Some(on) = build(&[], "_enabled") else { return };
    let syms = String::from_utf8_lossy(&Command::new("nm").arg(&on).output().unwrap().stdout).into_owned();
    assert!(syms.lines().any(|l| l.ends_with(" tailprof_control")), "enabled build exports tailprof_control");
}

#[test]
fn python_module_launched() {
    if Command::new("python3").arg("-c").arg("1").output().map(|o| !o.status.success()).unwrap_or(true) {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "no python3");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/markers/two_threads.py");
    let mut mc = MarkerCollector::new();
    let mut sh = Command::new("sh");
    sh.args(["-c", "IFS= read -r p; TAILPROF_MARKERS=\"$p\" exec python3 \"$0\" \"$@\""]);
    let mut p = Prog::start(sh.arg(&script).arg(root().join("python")).arg("150"));
    let env = mc.prepare_child(p.pid()).unwrap();
    p.send(&format!("{}\n", env[0].1));
    assert_eq!(p.line(), "ready");
    let pid = p.pid();
    let tids = p.round();
    let mut recs = Vec::new();
    let s = mc.drain(&mut recs);
    assert_eq!((s.markers, s.dropped, s.classes), (600, 0, 1));
    check_round(&recs, pid, tids, 0, 150);
    p.end();
    mc.finish(&mut recs);
}

/// Issue 24: switch markers from the C header decode to `Switch` / `SwitchNone`, the
/// trace-context pair to one `ItemTrace` (W3C byte order); a record of a reserved kind (a
/// newer runtime) and a span-id record without its trace-id record are rejected and
/// counted, never guessed, and the markers around them are kept (docs/MARKERS.md,
/// "Compatibility").
#[test]
fn switch_markers_decode_and_reserved_kinds_are_rejected() {
    let Some(exe) = build_fixture("switches", "") else { return };
    let mut mc = MarkerCollector::new();
    let mut sh = Command::new("sh");
    sh.args(["-c", "IFS= read -r p; TAILPROF_MARKERS=\"$p\" exec \"$0\""]);
    let mut p = Prog::start(sh.arg(&exe));
    let env = mc.prepare_child(p.pid()).unwrap();
    p.send(&format!("{}\n", env[0].1));
    assert_eq!(p.line(), "ready");
    let pid = p.pid();
    p.send("go\n");
    assert_eq!(p.line(), "done");
    let mut recs = Vec::new();
    let s = mc.drain(&mut recs);
    p.end();
    mc.finish(&mut recs);
    let kinds: Vec<(MarkerKind, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Marker(m) => Some((m.kind, m.item)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec![(MarkerKind::Begin, 7), (MarkerKind::SwitchNone, 0), (MarkerKind::Switch, 7), (MarkerKind::End, 7)]);
    let traces: Vec<(u32, u64, [u8; 16], [u8; 8])> = recs
        .iter()
        .filter_map(|r| match r {
            Record::ItemTrace(t) => Some((t.pid, t.item, t.trace_id, t.span_id)),
            _ => None,
        })
        .collect();
    let trace_id = [0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36];
    assert_eq!(traces, vec![(pid, 7, trace_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])]);
    assert_eq!((s.markers, s.rejected), (5, 2));
}
