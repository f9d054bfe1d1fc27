//! Issue 10: the files tailprof writes and reads as root, played by an attacker.
//!
//! - finding 7: an unprivileged user plants symlinks where root will write (a sticky,
//!   world-writable directory like /tmp); a failed `record` must not destroy an existing
//!   trace; outputs are 0600 even under umask 000;
//! - finding 9: a damaged perf.data declaring a huge AUXTRACE size costs no more memory
//!   than the file;
//! - the loss table: `info`, `report`, `items` (text and JSON) and `record` show the same
//!   rows.
//!
//! The attacker is a real unprivileged account (created here) when the tests run as root;
//! otherwise the same files are planted by the current user (the rules do not depend on
//! who planted them) and the test says so.

#[path = "../../tailprof-import/tests/craft/mod.rs"]
mod craft;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tailprof_format::{EventDesc, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record, Sample, TraceHeader, TraceReader, TraceWriter};

const ATTACKER: &str = "tailprof-atk";

fn tailprof() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tailprof"));
    // Every output must be 0600 even when the caller's umask lets everything through.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("cannot run tailprof")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(c: &mut Command) -> Output {
    let o = run(c);
    assert!(o.status.success(), "{:?} failed: {}", c, text(&o.stderr));
    o
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The attacker account, created when running as root; `None` (with a message) otherwise.
fn attacker() -> Option<String> {
    if !is_root() {
        eprintln!("note: not root; files are planted by the current user instead of an unprivileged account");
        return None;
    }
    let exists = |_: ()| Command::new("id").args(["-u", ATTACKER]).output().is_ok_and(|o| o.status.success());
    if !exists(()) {
        let _ = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ATTACKER])
            .stderr(Stdio::null())
            .status();
    }
    if !exists(()) || Command::new("runuser").arg("--help").output().is_err() {
        eprintln!("note: cannot create or switch to user {ATTACKER} (useradd/runuser missing); planting as root");
        return None;
    }
    Some(ATTACKER.to_string())
}

/// Run `args` as the attacker (or as ourselves when there is none).
fn plant(who: &Option<String>, args: &[&str]) {
    let status = match who {
        Some(u) => Command::new("runuser").args(["-u", u, "--"]).args(args).status(),
        None => Command::new(args[0]).args(&args[1..]).status(),
    }
    .unwrap();
    assert!(status.success(), "planting {args:?} failed");
}

/// A /tmp-like directory (sticky, world-writable) and a private one holding the victim
/// file the attacker wants root to overwrite.
struct Scene {
    _td: tempfile::TempDir,
    shared: PathBuf,
    private: PathBuf,
}

fn scene() -> Scene {
    let td = tempfile::tempdir().unwrap();
    std::fs::set_permissions(td.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = td.path().join("tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let private = td.path().join("root");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
    Scene { _td: td, shared, private }
}

fn victim(s: &Scene, name: &str) -> PathBuf {
    let v = s.private.join(name);
    std::fs::write(&v, b"precious root-owned data\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o644)).unwrap();
    v
}

fn assert_untouched(v: &Path) {
    assert_eq!(std::fs::read(v).unwrap(), b"precious root-owned data\n", "{} was written through a symlink", v.display());
}

fn assert_private_regular(p: &Path) {
    let m = std::fs::symlink_metadata(p).unwrap();
    assert!(m.file_type().is_file(), "{} is not a regular file", p.display());
    assert_eq!(m.mode() & 0o777, 0o600, "{} has mode {:o}", p.display(), m.mode() & 0o777);
    assert_eq!(m.uid(), unsafe { libc::geteuid() });
}

fn no_temporaries(dir: &Path) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tailprof-"))
        .collect();
    assert!(left.is_empty(), "temporary files left in {}: {left:?}", dir.display());
}

/// A trace with stored losses (ring-full, malformed), items, and one chunk duplicated on
/// disk.
fn lossy_trace(out: &Path) {
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(1000), ..Default::default() }],
        source: "record".into(),
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    let marker = |time, kind, item| Record::Marker(Marker { time, pid: 7, tid: 7, kind, item, class: 0, source: MarkerSource::Api });
    let mut t = 1_000u64;
    let mut cuts = Vec::new();
    for item in 1..=6u64 {
        w.write(&marker(t, MarkerKind::Begin, item)).unwrap();
        for k in 0..20 {
            t += 1000;
            w.write_sample(&Sample { time: t, ip: 0x4000 + 16 * (k % 3), pid: 7, tid: 7, period: 1000, ..Default::default() }).unwrap();
        }
        t += 1000;
        w.write(&marker(t, MarkerKind::End, item)).unwrap();
        if item == 2 {
            w.write(&Record::Lost(Lost { time: t, cpu: 0, event: Some(0), kind: LossKind::RingFull, count: 12 })).unwrap();
            w.write(&Record::Lost(Lost { time: t, cpu: 0, event: None, kind: LossKind::Malformed, count: 3 })).unwrap();
        }
        w.flush_chunk().unwrap();
        cuts.push(w.bytes_written() as usize);
    }
    let (mut bytes, _) = w.finish_into_inner(Some(t)).unwrap();
    // Duplicate the third records chunk right after itself.
    let dup = bytes[cuts[1]..cuts[2]].to_vec();
    bytes.splice(cuts[2]..cuts[2], dup);
    std::fs::write(out, &bytes).unwrap();
    let (read, _, _) = TraceReader::open(out).unwrap().summarize().unwrap();
    assert_eq!(read.duplicate_chunks, 1, "the test trace has one duplicated chunk: {read:?}");
}

/// The loss block of text output: the lines after `losses (worst first):`.
fn loss_block(out: &str) -> Vec<String> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with("losses (worst first):"));
    assert!(lines.next().is_some(), "no loss block in:\n{out}");
    lines.take_while(|l| l.starts_with("  ")).map(str::to_string).collect()
}

fn loss_json(out: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["losses"].clone()
}

#[test]
fn losses_show_the_same_rows_in_info_report_items() {
    let td = tempfile::tempdir().unwrap();
    let trace = td.path().join("lossy.trace");
    lossy_trace(&trace);
    let t = trace.to_str().unwrap();
    let mut blocks = Vec::new();
    let mut jsons = Vec::new();
    for cmd in ["info", "report", "items"] {
        let o = ok(tailprof().args([cmd, t]));
        blocks.push((cmd, loss_block(&text(&o.stdout))));
        let o = ok(tailprof().args([cmd, t, "--json"]));
        jsons.push((cmd, loss_json(&text(&o.stdout))));
    }
    for (cmd, b) in &blocks[1..] {
        assert_eq!(b, &blocks[0].1, "{cmd} text differs from info");
    }
    for (cmd, j) in &jsons[1..] {
        assert_eq!(j, &jsons[0].1, "{cmd} JSON differs from info");
    }
    let rows = jsons[0].1.as_array().unwrap();
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["malformed_records", "duplicate_chunks", "lost_records"], "worst first: {rows:?}");
    assert_eq!(rows[0]["count"], 3);
    assert_eq!(rows[2]["count"], 12);
    assert_eq!(rows[2]["severity"], "data_loss");
    for r in rows {
        for k in ["key", "count", "severity", "what", "remedy"] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
    }
    // Text rows in the same order as JSON rows.
    for (line, key) in blocks[0].1.iter().zip(&keys) {
        assert!(line.contains(key), "{line} vs {key}");
    }
    assert_eq!(blocks[0].1.len(), keys.len());
}

#[test]
fn record_prints_the_stored_loss_table_as_info_does() {
    let td = tempfile::tempdir().unwrap();
    let trace = td.path().join("r.trace");
    let o = run(tailprof().args(["record", "-o", trace.to_str().unwrap(), "--", "true"]));
    if !o.status.success() {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("record does not work here: {}", text(&o.stderr)));
        return;
    }
    let rec = text(&o.stderr);
    let info = text(&ok(tailprof().args(["info", trace.to_str().unwrap()])).stdout);
    let has = |s: &str| s.lines().any(|l| l.starts_with("losses (worst first):"));
    assert_eq!(has(&rec), has(&info), "record:\n{rec}\ninfo:\n{info}");
    if has(&rec) {
        assert_eq!(loss_block(&rec), loss_block(&info));
    }
    assert_private_regular(&trace);
}

#[test]
fn finding_7_symlinked_output() {
    let who = attacker();
    let s = scene();
    let (v_trace, v_import, v_html) = (victim(&s, "passwd"), victim(&s, "shadow"), victim(&s, "index.html"));
    let trace = s.shared.join("tailprof.trace");
    let imported = s.shared.join("imported.trace");
    let html = s.shared.join("report.html");
    for (link, target) in [(&trace, &v_trace), (&imported, &v_import), (&html, &v_html)] {
        plant(&who, &["ln", "-s", target.to_str().unwrap(), link.to_str().unwrap()]);
    }

    // import (works everywhere), export --html, and record (when perf events work here).
    let data = s.private.join("in.data");
    std::fs::write(&data, craft::small_valid_file()).unwrap();
    ok(tailprof().args(["import", data.to_str().unwrap(), "-o", imported.to_str().unwrap()]));
    assert_untouched(&v_import);
    assert_private_regular(&imported);

    let items = s.private.join("items.trace");
    lossy_trace(&items);
    ok(tailprof().args(["export", items.to_str().unwrap(), "--html", html.to_str().unwrap()]));
    assert_untouched(&v_html);
    assert_private_regular(&html);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<html"));

    let o = run(tailprof().args(["record", "-o", trace.to_str().unwrap(), "--", "true"]));
    assert_untouched(&v_trace);
    if o.status.success() {
        assert_private_regular(&trace);
        TraceReader::open(&trace).unwrap();
    } else {
        eprintln!("note: record does not work here ({}); checked that the link target is untouched", text(&o.stderr));
    }
    no_temporaries(&s.shared);
}

#[test]
fn finding_7_failed_record_keeps_an_existing_trace() {
    let s = scene();
    let trace = s.private.join("keep.trace");
    std::fs::write(&trace, b"an earlier trace\n").unwrap();
    let t = trace.to_str().unwrap();
    for args in [vec!["record", "-o", t, "-p", "999999999"], vec!["record", "-o", t, "--", "/nonexistent/command"]] {
        let o = run(tailprof().args(&args));
        assert!(!o.status.success(), "{args:?} should fail");
        assert_eq!(std::fs::read(&trace).unwrap(), b"an earlier trace\n", "{args:?} touched the existing trace");
    }
    // A failed import and an export of an unreadable trace do not touch their outputs either.
    let bad = s.private.join("bad.data");
    std::fs::write(&bad, b"PERFILE2 and nothing else").unwrap();
    assert!(!run(tailprof().args(["import", bad.to_str().unwrap(), "-o", t])).status.success());
    assert_eq!(std::fs::read(&trace).unwrap(), b"an earlier trace\n");
    no_temporaries(&s.private);
}

#[test]
fn finding_7_fifo_at_the_output_path_is_refused_not_opened() {
    let who = attacker();
    let s = scene();
    let fifo = s.shared.join("out.trace");
    plant(&who, &["mkfifo", fifo.to_str().unwrap()]);
    let data = s.private.join("in.data");
    std::fs::write(&data, craft::small_valid_file()).unwrap();
    // Opening a FIFO for writing would block forever; the output is refused instead.
    let o = run(tailprof().args(["import", data.to_str().unwrap(), "-o", fifo.to_str().unwrap()]));
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("FIFO") && err.lines().count() == 1, "{err}");
}

/// Peak RSS (KiB) of a child, from wait4.
fn run_measuring_rss(c: &mut Command) -> (bool, i64) {
    let child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    std::mem::forget(child);
    (libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, ru.ru_maxrss)
}

#[test]
fn finding_9_huge_auxtrace_size_costs_no_more_than_the_file() {
    let td = tempfile::tempdir().unwrap();
    for declared in [1_500_000_000u64, 94_000_000_000_000] {
        let data = td.path().join(format!("aux-{declared}.data"));
        std::fs::write(&data, craft::huge_auxtrace_file(declared)).unwrap();
        assert_eq!(std::fs::metadata(&data).unwrap().len() / 1024, 24, "a 24 KB file");
        let out = td.path().join("aux.trace");
        let (success, rss_kib) = run_measuring_rss(tailprof().args(["import", data.to_str().unwrap(), "-o", out.to_str().unwrap()]));
        assert!(success, "import of a file declaring {declared} bytes failed (or aborted)");
        // The declared size was 1.5 GB / 94 TB; the importer stays small.
        assert!(rss_kib < 256 * 1024, "import peaked at {rss_kib} KiB for a 24 KB file declaring {declared} bytes");
        let mut sink = tailprof_format::VecSink::default();
        TraceReader::open(&out).unwrap().read_all(&mut sink).unwrap();
        assert_eq!(sink.0.iter().filter(|r| matches!(r, Record::Sample(_))).count(), 10);
    }
}

/// Every committed `import` fuzz seed (crashes fuzzing found included) imports or fails
/// with one line inside a 2 GiB address space: no allocation follows a size the file
/// declares (fuzzing found an attr size between two perf_event_attr versions that made
/// the parser reserve 18 GB for an id list).
#[test]
fn import_seeds_fit_in_a_bounded_address_space() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/import");
    let td = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        let mut c = tailprof();
        c.args(["import", f.to_str().unwrap(), "-o", td.path().join("o.trace").to_str().unwrap()]);
        unsafe {
            c.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: 2 << 30, rlim_max: 2 << 30 };
                libc::setrlimit(libc::RLIMIT_AS, &lim);
                Ok(())
            });
        }
        let o = c.output().unwrap();
        assert!(o.status.code().is_some(), "{}: killed by a signal ({:?}): {}", f.display(), o.status, text(&o.stderr));
        if !o.status.success() {
            assert_eq!(text(&o.stderr).trim_end().lines().count(), 1, "{}: one error line: {}", f.display(), text(&o.stderr));
        }
        n += 1;
    }
    assert!(n >= 5, "seeds in {}", dir.display());
}

/// Analysis output stays proportional to the input: a 2.7 KB fuzzed trace whose samples
/// name event 65535 once made `report --json` list 65,536 events (6.6 MB, a second per
/// rendering).
#[test]
fn report_output_is_proportional_to_the_trace() {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/report/slow-65536-events.tprof");
    let input = std::fs::metadata(&seed).unwrap().len() as usize;
    for args in [vec!["report", "--json"], vec!["report"], vec!["report", "--by", "thread", "--json"]] {
        let o = ok(tailprof().args(&args).arg(&seed));
        assert!(o.stdout.len() < 20 * input, "{args:?}: {} bytes of output for a {input}-byte trace", o.stdout.len());
    }
}
