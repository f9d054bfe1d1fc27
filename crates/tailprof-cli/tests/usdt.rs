//! USDT probes (issue 22 item 1) on a C program built with `<sys/sdt.h>` (Debian
//! `systemtap-sdt-dev`; the tests skip with a message without it, and the recording ones
//! without root): `tailprof probes` lists them; items from `usdt:` begin/end, one of them
//! at two sites; classes from a string argument; every operand kind (64- and 32-bit
//! register, memory at base+offset and at offset 0, frame slot, constant) decodes to the
//! value the program passed; and a probe guarded by a semaphore around an expensive
//! argument is enabled (the kernel's reference counter) only while it is recorded.
//! No timing assertions.

use std::path::{Path, PathBuf};
use std::process::Command;

const MAIN: &str = r#"
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>

extern unsigned short app_detail_semaphore;
long detail_probe(long id); /* detail.c: the probe with a semaphore */

struct req { long id; int kind; int weight; };
volatile unsigned long sink;
static long expensive_calls;

__attribute__((noinline)) long compute_detail(long id) {
    expensive_calls++;
    unsigned long x = 0;
    for (long i = 0; i < 20000; i++) x += i ^ (x >> 3);
    sink += x;
    return id * 1000 + 7;
}

__attribute__((noinline)) static void work(int kind) {
    unsigned long x = 0;
    for (long i = 0; i < 100000L * (kind + 1); i++) x += i ^ (x >> 3);
    sink += x;
}

__attribute__((noinline)) void handle(struct req *r, const char *sql) {
    volatile long on_stack = r->id * 5;
    STAP_PROBE2(app, request__start, r->id, sql);
    STAP_PROBE5(app, operands, r->id * 3, (int)(1000 - r->id), r->weight, on_stack, 42);
    /* The argument is expensive: computed only while a probe is attached. */
    if (__builtin_expect(app_detail_semaphore, 0))
        detail_probe(compute_detail(r->id));
    work(r->kind);
    if (r->kind) {
        /* A second site of the same probe: both must be probed. */
        STAP_PROBE1(app, request__done, r->id);
        sink += 2;
        return;
    }
    sink++;
    STAP_PROBE1(app, request__done, r->id);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    static struct req reqs[64];
    for (int i = 0; i < n && i < 64; i++) {
        reqs[i].id = i + 1; reqs[i].kind = i % 3 == 0; reqs[i].weight = 100 + i;
        handle(&reqs[i], reqs[i].kind ? "UPDATE t SET v = 1 WHERE id = 5" : "SELECT v FROM t WHERE id = 9");
    }
    printf("expensive %ld\n", expensive_calls);
    return 0;
}
"#;

const DETAIL: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
__extension__ unsigned short app_detail_semaphore __attribute__((unused)) __attribute__((section(".probes")));
__attribute__((noinline)) long detail_probe(long d) {
    STAP_PROBE1(app, detail, d);
    return d;
}
"#;

const REQUESTS: usize = 20;
const SELECT_SHAPE: &str = "select v from t where id = ?";
const UPDATE_SHAPE: &str = "update t set v = ? where id = ?";

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tailprof-usdt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The program, or None (and a SKIP line) when `<sys/sdt.h>` is missing.
fn compile(dir: &Path) -> Option<PathBuf> {
    std::fs::write(dir.join("u.c"), MAIN).unwrap();
    std::fs::write(dir.join("detail.c"), DETAIL).unwrap();
    let out = dir.join("usdt-app");
    let o = Command::new("cc")
        .args(["-O2", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(dir.join("u.c"))
        .arg(dir.join("detail.c"))
        .output()
        .expect("cc");
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

fn can_record() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording USDT probes (tracefs uprobe events)");
    }
    root
}

fn tailprof(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).output().expect("run tailprof")
}

/// `record` of the program with `args` before `--`; returns the trace and the program's
/// stdout.
fn record(dir: &Path, exe: &Path, tag: &str, args: &[String]) -> (PathBuf, String) {
    let trace = dir.join(format!("{tag}.trace"));
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-F", "999", "-o"])
        .arg(&trace)
        .args(args)
        .arg("--")
        .arg(exe)
        .arg(REQUESTS.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "record {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    (trace, String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The items of a trace in start order.
fn items(trace: &Path) -> Vec<serde_json::Value> {
    let o = tailprof(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    assert!(o.status.success(), "items failed: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["items"].as_array().expect("items array").clone()
}

fn usdt(exe: &Path, probe: &str) -> String {
    format!("usdt:{}:app:{probe}", exe.display())
}

fn begin_end(exe: &Path) -> Vec<String> {
    vec!["--item-begin".into(), usdt(exe, "request__start"), "--item-end".into(), usdt(exe, "request__done")]
}

#[test]
fn probes_lists_sites_args_and_semaphores() {
    let dir = tempdir("list");
    let Some(exe) = compile(&dir) else { return };
    let o = tailprof(&["probes", "--json", exe.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let probes = v["probes"].as_array().unwrap();
    let get = |name: &str| probes.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name}: {v}"));
    let names: Vec<&str> = probes.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["detail", "operands", "request__done", "request__start"]);
    assert!(probes.iter().all(|p| p["provider"] == "app"));
    assert_eq!(get("request__done")["sites"].as_array().unwrap().len(), 2, "the probe written twice has two sites");
    let detail = &get("detail")["sites"][0];
    assert!(detail["semaphore"].as_u64().unwrap() > 0 && detail["ref_ctr_offset"].as_u64().unwrap() > 0, "{detail}");
    assert_eq!(get("request__start")["sites"][0]["semaphore"], 0);
    // The file offset of a site holds the probe's nop (x86-64).
    let bytes = std::fs::read(&exe).unwrap();
    for p in probes {
        for s in p["sites"].as_array().unwrap() {
            assert_eq!(bytes[s["offset"].as_u64().unwrap() as usize], 0x90, "{s}");
        }
    }
    assert!(v["functions"].as_array().unwrap().iter().any(|f| f == "handle"), "uprobe-able functions are listed");
    let text = tailprof(&["probes", exe.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("usdt:{}:app:request__done  2 sites", exe.display())), "{text}");
    // Not ELF: one line, non-zero.
    let o = tailprof(&["probes", "/proc/self/status"]);
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usdt_items_with_classes_from_a_string_argument() {
    let dir = tempdir("items");
    let Some(exe) = compile(&dir) else { return };
    if !can_record() {
        return;
    }
    let mut args = begin_end(&exe);
    args.extend(["--item-class-from".into(), format!("{}:arg1", usdt(&exe, "request__start"))]);
    let (trace, stdout) = record(&dir, &exe, "items", &args);
    // Nothing probed the semaphore's probe: the expensive argument was never computed.
    assert!(stdout.contains("expensive 0"), "{stdout}");
    let r = tailprof_format::TraceReader::open(&trace).unwrap();
    let end = r.header().extra.get("item_end").cloned().unwrap_or_default();
    assert_eq!(end.lines().count(), 2, "both sites of request__done in the header: {end}");
    let items = items(&trace);
    assert_eq!(items.len(), REQUESTS, "{}", serde_json::to_string_pretty(&items).unwrap());
    for (i, it) in items.iter().enumerate() {
        let want = if i % 3 == 0 { UPDATE_SHAPE } else { SELECT_SHAPE };
        assert_eq!(it["class"].as_str(), Some(want), "request {i}: {it}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usdt_arguments_of_every_operand_kind_decode() {
    let dir = tempdir("operands");
    let Some(exe) = compile(&dir) else { return };
    if !can_record() {
        return;
    }
    // operands(id * 3, (int)(1000 - id), r->weight = 99 + id, on_stack = id * 5, 42):
    // -8@%rcx -4@%eax -4@12(%rdi) -8@-24(%rbp) -4@$42 with this compiler (the kinds are
    // checked, not the registers).
    let o = tailprof(&["probes", "--json", exe.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let spec =
        v["probes"].as_array().unwrap().iter().find(|p| p["name"] == "operands").unwrap()["sites"][0]["args"].as_str().unwrap().to_string();
    let ops: Vec<&str> = spec.split(' ').collect();
    assert_eq!(ops.len(), 5, "{spec}");
    assert!(ops[0].starts_with("-8@%r"), "{spec}");
    assert!(ops[1].starts_with("-4@%e") || ops[1].ends_with('d'), "a 32-bit register: {spec}");
    assert!(ops[2].contains("(%r") && !ops[2].contains(','), "memory at base+offset: {spec}");
    assert!(ops[3].contains("(%rbp)") || ops[3].contains("(%rsp)"), "a frame slot: {spec}");
    assert_eq!(ops[4], "-4@$42", "{spec}");
    let expect = [|id: i64| id * 3, |id| 1000 - id, |id| 99 + id, |id| id * 5, |_| 42];
    for (n, f) in expect.iter().enumerate() {
        let mut args = begin_end(&exe);
        args.extend(["--item-class-from".into(), format!("{}:arg{n}:s64", usdt(&exe, "operands"))]);
        let (trace, _) = record(&dir, &exe, &format!("arg{n}"), &args);
        let items = items(&trace);
        assert_eq!(items.len(), REQUESTS);
        for (i, it) in items.iter().enumerate() {
            let want = f(i as i64 + 1).to_string();
            assert_eq!(it["class"].as_str(), Some(want.as_str()), "arg{n} ({}), request {i}: {it}", ops[n]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usdt_semaphore_is_set_only_while_recording() {
    let dir = tempdir("semaphore");
    let Some(exe) = compile(&dir) else { return };
    if !can_record() {
        return;
    }
    let alone = Command::new(&exe).arg(REQUESTS.to_string()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&alone.stdout).trim(), "expensive 0", "not recorded: the guard is off");
    let mut args = begin_end(&exe);
    args.extend(["--item-class-from".into(), format!("{}:arg0:s64", usdt(&exe, "detail"))]);
    let (trace, stdout) = record(&dir, &exe, "sem", &args);
    assert_eq!(stdout.trim(), format!("expensive {REQUESTS}"), "recorded: the kernel set the semaphore");
    let items = items(&trace);
    assert_eq!(items.len(), REQUESTS);
    for (i, it) in items.iter().enumerate() {
        let want = ((i as i64 + 1) * 1000 + 7).to_string();
        assert_eq!(it["class"].as_str(), Some(want.as_str()), "request {i}: {it}");
    }
    // The semaphore's counter is dropped with the probe: a later run is off again.
    let after = Command::new(&exe).arg(REQUESTS.to_string()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "expensive 0");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_usdt_names_list_the_available_probes() {
    let dir = tempdir("wrong");
    let Some(exe) = compile(&dir) else { return };
    let trace = dir.join("t.trace");
    let o = tailprof(&[
        "record",
        "-o",
        trace.to_str().unwrap(),
        "--item-begin",
        &usdt(&exe, "request__begin"),
        "--item-end",
        &usdt(&exe, "request__done"),
        "--",
        exe.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("app:request__begin") && err.contains("app:request__start") && err.contains("app:detail"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let o = tailprof(&[
        "record",
        "-o",
        trace.to_str().unwrap(),
        "--item-class-from",
        &format!("{}:arg7", usdt(&exe, "operands")),
        "--",
        exe.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    if can_record() {
        assert!(!o.status.success());
        assert!(err.contains("5 argument(s)"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
