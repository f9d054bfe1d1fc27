//! `--item-event` and `--item-span` (issue 22 item 2) on a C program with USDT probes
//! built with `<sys/sdt.h>` (Debian `systemtap-sdt-dev`; skipped with a message without
//! it, and without root): `wait__start`/`wait__done` become a `wait` span with its
//! argument inside the waiting item only, a string argument comes through, two probes
//! with unrelated names pair through `--item-span`, and the spans show in
//! `items --explain` (text and JSON, one shape) and as slices in the Perfetto export. No
//! timing assertions (only order: a span lies inside its item).

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <sys/sdt.h>
#include <stdlib.h>
#include <unistd.h>
volatile unsigned long sink;
static void spin(long n) { for (long i = 0; i < n; i++) sink += i ^ (sink >> 3); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (long i = 1; i <= n; i++) {
        STAP_PROBE1(app, request__start, i);
        spin(20000);
        if (i % 2 == 0) {
            STAP_PROBE1(app, wait__start, i * 10);
            usleep(2000);
            STAP_PROBE1(app, wait__done, i);
        }
        STAP_PROBE2(app, note, i, "hello");
        STAP_PROBE(app, io_begin);
        spin(10000);
        STAP_PROBE(app, io_end);
        STAP_PROBE1(app, request__done, i);
    }
    /* Outside every item: counted, not attributed. */
    STAP_PROBE2(app, note, 0, "after");
    return 0;
}
"#;

const REQUESTS: u64 = 8;

fn compile(dir: &Path) -> Option<PathBuf> {
    std::fs::write(dir.join("ev.c"), PROGRAM).unwrap();
    let out = dir.join("events-app");
    let o = Command::new("cc").args(["-O2", "-o"]).arg(&out).arg(dir.join("ev.c")).output().expect("cc");
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        if err.contains("sdt.h") {
            tailprof_testkit::skip(tailprof_testkit::Need::Sdt, "<sys/sdt.h> not found (apt-get install systemtap-sdt-dev)");
            return None;
        }
        panic!("cc failed: {err}");
    }
    Some(out)
}

fn tailprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).output().expect("run tailprof")
}

#[test]
fn usdt_events_and_spans_land_in_their_items() {
    let dir = std::env::temp_dir().join(format!("tailprof-item-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = compile(&dir) else { return };
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording USDT events (tracefs uprobe events)");
        return;
    }
    let p = |name: &str| format!("usdt:{}:app:{name}", exe.display());
    let trace = dir.join("ev.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-F", "999", "-o"])
        .arg(&trace)
        .args(["--item-begin", &p("request__start"), "--item-end", &p("request__done")])
        .args(["--item-event", &format!("{}:arg0", p("wait__start")), "--item-event", &p("wait__done")])
        .args(["--item-event", &format!("{}:arg1:string", p("note"))])
        .args(["--item-span", &format!("{},{}", p("io_begin"), p("io_end"))])
        .arg("--")
        .arg(&exe)
        .arg(REQUESTS.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "record failed: {}", String::from_utf8_lossy(&o.stderr));

    let o = tailprof(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len() as u64, REQUESTS, "{v}");
    // 4 waits x 2 + 8 notes + 8 io pairs x 2 inside items, one note after them.
    assert_eq!(v["item_events"], 2 * REQUESTS / 2 + REQUESTS + 2 * REQUESTS + 1, "{v}");
    assert_eq!(v["item_events_outside"], 1);
    for (k, it) in items.iter().enumerate() {
        let id = k as u64 + 1;
        let ev = &it["events"];
        let (begin, end) = (it["begin_ns"].as_u64().unwrap(), it["end_ns"].as_u64().unwrap());
        let spans = ev["spans"].as_array().unwrap();
        let waits: Vec<_> = spans.iter().filter(|s| s["name"] == "wait").collect();
        if id.is_multiple_of(2) {
            assert_eq!(waits.len(), 1, "item {id}: {ev}");
            let w = waits[0];
            assert_eq!(w["arg"], (id * 10).to_string(), "the start's argument");
            assert_eq!(w["unfinished"], false);
            let (b, e) = (w["begin_ns"].as_u64().unwrap(), w["end_ns"].as_u64().unwrap());
            assert!(begin <= b && b < e && e <= end, "span inside its item: {w} in {begin}..{end}");
            assert_eq!(w["duration_ns"].as_u64().unwrap(), e - b);
            let total = ev["span_totals"].as_array().unwrap().iter().find(|t| t["name"] == "wait").unwrap();
            assert_eq!(total["count"], 1);
        } else {
            assert!(waits.is_empty(), "item {id} does not wait: {ev}");
        }
        let io: Vec<_> = spans.iter().filter(|s| s["name"] == "io_begin").collect();
        assert_eq!(io.len(), 1, "--item-span pairs io_begin/io_end: {ev}");
        let notes = ev["events"].as_array().unwrap();
        assert_eq!(notes.len(), 1, "{ev}");
        assert_eq!((notes[0]["name"].as_str(), notes[0]["arg"].as_str()), (Some("note"), Some("hello")));
        assert_eq!((ev["dropped"].as_u64(), ev["unmatched_span_ends"].as_u64()), (Some(0), Some(0)));
    }

    // --explain: the same shape in JSON, the spans in the text.
    let o = tailprof(&["items", "--explain", "2", "--json", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let x: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = x.to_string();
    assert!(text.contains("\"span_totals\"") && text.contains("\"wait\""), "{x}");
    let o = tailprof(&["items", "--explain", "2", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Spans: ") && text.contains("wait") && text.contains("(20)"), "{text}");
    assert!(text.contains("note (hello)"), "{text}");

    // Perfetto: each span a begin/end pair on its item's thread, each instant an instant.
    let out = dir.join("ev.json");
    let o = tailprof(&["export", "--perfetto", out.to_str().unwrap(), trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pf: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let evs = pf["traceEvents"].as_array().unwrap();
    let n = |ph: &str, cat: &str, name: &str| evs.iter().filter(|e| e["ph"] == ph && e["cat"] == cat && e["name"] == name).count() as u64;
    assert_eq!(n("b", "span", "wait"), REQUESTS / 2);
    assert_eq!(n("e", "span", "wait"), REQUESTS / 2);
    assert_eq!(n("b", "span", "io_begin"), REQUESTS);
    assert_eq!(n("i", "event", "note"), REQUESTS);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 22 part 3: events on the very probes of `--item-begin`/`--item-end` (a second
/// uprobe at the same site, with its own timestamp) belong to the item their hit begins
/// or ends, never to none: `request__start`/`request__done` as events make one
/// `request` span per item, inside it, with its argument; and an event with several
/// arguments (`note:arg0,arg1:string`) keeps all of them in order, in JSON, `--explain`
/// and Perfetto.
#[test]
fn boundary_probe_events_and_several_arguments() {
    let dir = std::env::temp_dir().join(format!("tailprof-item-events-b-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = compile(&dir) else { return };
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording USDT events (tracefs uprobe events)");
        return;
    }
    let p = |name: &str| format!("usdt:{}:app:{name}", exe.display());
    let trace = dir.join("b.trace");
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-F", "999", "-o"])
        .arg(&trace)
        .args(["--item-begin", &p("request__start"), "--item-end", &p("request__done")])
        .args(["--item-event", &format!("{}:arg0", p("request__start"))])
        .args(["--item-event", &format!("{}:arg0", p("request__done"))])
        .args(["--item-event", &format!("{}:arg0,arg1:string", p("note"))])
        .arg("--")
        .arg(&exe)
        .arg(REQUESTS.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "record failed: {}", String::from_utf8_lossy(&o.stderr));

    let o = tailprof(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len() as u64, REQUESTS, "{v}");
    // 8 starts, 8 dones, 8 notes inside items; one note after them.
    assert_eq!(v["item_events"], 3 * REQUESTS + 1, "{v}");
    assert_eq!(v["item_events_outside"], 1, "only the note after the last item: {v}");
    for (k, it) in items.iter().enumerate() {
        let id = k as u64 + 1;
        let ev = &it["events"];
        let (begin, end) = (it["begin_ns"].as_u64().unwrap(), it["end_ns"].as_u64().unwrap());
        let spans: Vec<_> = ev["spans"].as_array().unwrap().iter().filter(|s| s["name"] == "request").collect();
        assert_eq!(spans.len(), 1, "item {id}: {ev}");
        let s = spans[0];
        assert_eq!((s["arg"].as_str(), s["unfinished"].as_bool()), (Some(id.to_string().as_str()), Some(false)), "{s}");
        let (b, e) = (s["begin_ns"].as_u64().unwrap(), s["end_ns"].as_u64().unwrap());
        assert!(begin <= b && b <= e && e <= end, "the boundary span inside its item: {s} in {begin}..{end}");
        let notes = ev["events"].as_array().unwrap();
        assert_eq!(notes.len(), 1, "{ev}");
        assert_eq!(notes[0]["arg"], id.to_string());
        assert_eq!(notes[0]["args"], serde_json::json!([id.to_string(), "hello"]), "{ev}");
    }
    let o = tailprof(&["items", "--explain", "3", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("note (3, hello)") && text.contains("request"), "{text}");
    let out = dir.join("b.json");
    let o = tailprof(&["export", "--perfetto", out.to_str().unwrap(), trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pf: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let notes: Vec<_> = pf["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "event" && e["name"] == "note").collect();
    assert_eq!(notes.len() as u64, REQUESTS);
    assert!(notes.iter().all(|n| n["args"]["args"][1] == "hello"), "{notes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
