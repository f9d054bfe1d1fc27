//! `--otlp` end to end: the agent samples a known C workload for a few 1 s windows and
//! sends every window to a local HTTP listener in this test. Each request is decoded with
//! the `opentelemetry-proto` crate's prost types and compared with what the agent stored
//! for the same window in its Parquet store: the samples per (process, leaf binary, leaf
//! offset), the totals and the CPU time, the resource attributes, and every function name
//! against the store's symbol table. No number is written here: both sides come from the
//! same run. Skips (with a message) where system-wide perf_event_open is refused or no C
//! compiler exists. No timing is asserted.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tailprof_agent::otlp::{BUILD_ID_ATTR, PROFILES_PATH};
use tailprof_agent::AgentConfig;
use tailprof_store::{SampleQuery, Store, StoreReader};

const WORKLOAD: &str = r#"
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned long sink;
__attribute__((noinline)) void spin_a(long n) { unsigned long x = 1; for (long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1; sink = x; }
__attribute__((noinline)) void spin_b(long n) { unsigned long x = 2; for (long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1; sink = x; }
int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 3);
    while (now() < end) { spin_a(3 * 200000); spin_b(7 * 200000); }
    return 0;
}
"#;

fn compile(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("work.c");
    std::fs::write(&src, WORKLOAD).unwrap();
    let out = dir.join("work");
    let ok = Command::new("cc")
        .args(["-O0", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no working C compiler");
        return None;
    }
    Some(out)
}

/// One request: its head and body; answers 200 with an empty ExportProfilesServiceResponse.
fn serve_one(mut s: TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let head_end = loop {
        let n = s.read(&mut tmp).unwrap();
        assert!(n > 0, "connection closed before the headers ended");
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .expect("Content-Length");
    while buf.len() < head_end + len {
        let n = s.read(&mut tmp).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&tmp[..n]);
    }
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    (head, buf[head_end..head_end + len].to_vec())
}

static STOP: AtomicBool = AtomicBool::new(false);
static STARTED: AtomicBool = AtomicBool::new(false);

/// (pid, leaf binary path, leaf offset) → samples, and the window's samples and period.
type Leaves = BTreeMap<(u32, String, u64), u64>;

#[test]
fn otlp_requests_carry_what_the_store_holds_for_each_window() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bin) = compile(tmp.path()) else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let mut got = Vec::new();
        for s in listener.incoming() {
            let (head, body) = serve_one(s.unwrap());
            if head.contains("X-Test-Stop") {
                break;
            }
            got.push((head, body));
        }
        got
    });
    let stop_server = || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /stop HTTP/1.1\r\nX-Test-Stop: 1\r\nContent-Length: 0\r\n\r\n").unwrap();
        let _ = s.read(&mut [0u8; 64]);
    };

    let store_dir = tmp.path().join("store");
    let mut cfg = AgentConfig::default();
    for (k, v) in [
        ("window", "1s"),
        ("frequency", "499"),
        ("compact", "false"),
        ("retain_age", "none"),
        ("retain_size", "none"),
        ("host", "otlp-test"),
    ] {
        cfg.set(k, v).unwrap();
    }
    cfg.store = store_dir.clone();
    cfg.otlp = Some(format!("http://{addr}"));
    let work = std::thread::spawn(move || {
        while !STARTED.load(Ordering::SeqCst) {
            if STOP.load(Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let child = Command::new(&bin).arg("2.5").spawn().unwrap();
        let pid = child.id();
        let st = child.wait_with_output().unwrap().status;
        assert!(st.success());
        std::thread::sleep(std::time::Duration::from_millis(300));
        STOP.store(true, Ordering::SeqCst);
        Some(pid)
    });
    let res = tailprof_agent::run_agent(&cfg, &STOP, &mut |_| STARTED.store(true, Ordering::SeqCst));
    STOP.store(true, Ordering::SeqCst);
    let pid = work.join().unwrap();
    stop_server();
    let got = server.join().unwrap();
    let summary = match res {
        Ok(s) => s,
        Err(e) => {
            let m = e.to_string();
            if ["perf_event_open", "perf_event_paranoid", "Permission denied", "EACCES", "not permitted"].iter().any(|s| m.contains(s)) {
                tailprof_testkit::skip(tailprof_testkit::Need::SystemWide, format_args!("system-wide sampling is not allowed here: {m}"));
                return;
            }
            panic!("agent failed: {m}");
        }
    };
    let pid = pid.expect("the agent never started recording");
    assert_eq!(summary.writer.otlp_failures, 0, "{:?}", summary.writer.last_error);
    assert!(got.len() >= 2, "expected a request per window, got {}", got.len());
    assert_eq!(summary.writer.otlp_pushes, got.len() as u64);

    let (store, _) = Store::open(&store_dir).unwrap();
    let reader = StoreReader::new(store);
    let mut windows_with_workload = 0;
    let mut names_seen = std::collections::BTreeSet::new();
    let mut tables = std::collections::HashMap::new();
    let mut pid_comms = std::collections::BTreeSet::new();
    for (head, body) in &got {
        assert!(head.starts_with(&format!("POST {PROFILES_PATH} HTTP/1.1\r\n")), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: application/x-protobuf"), "{head}");
        let req = ExportProfilesServiceRequest::decode(body.as_slice()).expect("an ExportProfilesServiceRequest");
        let d = req.dictionary.as_ref().expect("a dictionary");
        let s = |i: i32| d.string_table[i as usize].as_str();

        // what OTLP says
        let (mut leaves, mut window, mut samples, mut period) = (Leaves::new(), None, 0u64, 0u64);
        for rp in &req.resource_profiles {
            let attr = |k: &str| rp.resource.as_ref().unwrap().attributes.iter().find(|a| a.key == k).and_then(|a| a.value.clone()?.value);
            let Some(Value::IntValue(p)) = attr("process.pid") else { panic!("no process.pid") };
            assert_eq!(attr("host.name"), Some(Value::StringValue("otlp-test".into())));
            let Some(Value::StringValue(comm)) = attr("process.executable.name") else { panic!("no process.executable.name") };
            if p as u32 == pid {
                // Samples taken between fork and exec carry the parent's name (or none yet,
                // before the process's first COMM record): the workload's name must be
                // among the names, not every one of them.
                pid_comms.insert(comm.clone());
            }
            for prof in &rp.scope_profiles[0].profiles {
                let st = prof.sample_type.unwrap();
                let start = (prof.time_unix_nano / 1000) as i64;
                assert!(window.is_none_or(|w| w == start), "one window per request");
                window = Some(start);
                match (s(st.type_strindex), s(st.unit_strindex)) {
                    ("samples", "count") => {}
                    ("cpu", "nanoseconds") => {
                        period += prof.samples.iter().map(|x| x.values[0] as u64).sum::<u64>();
                        continue;
                    }
                    other => panic!("unexpected sample type {other:?}"),
                }
                for smp in &prof.samples {
                    let locs = &d.stack_table[smp.stack_index as usize].location_indices;
                    let leaf = &d.location_table[locs[0] as usize];
                    let map = &d.mapping_table[leaf.mapping_index as usize];
                    let path = if leaf.mapping_index == 0 { "[unknown]".to_string() } else { s(map.filename_strindex).to_string() };
                    *leaves.entry((p as u32, path, leaf.address)).or_insert(0) += smp.values[0] as u64;
                    samples += smp.values[0] as u64;
                    // every named frame has the name the store's symbol table gives
                    for &li in locs {
                        let loc = &d.location_table[li as usize];
                        let Some(line) = loc.lines.first() else { continue };
                        let name = s(d.function_table[line.function_index as usize].name_strindex);
                        let m = &d.mapping_table[loc.mapping_index as usize];
                        if let Some(a) =
                            m.attribute_indices.iter().map(|&i| &d.attribute_table[i as usize]).find(|a| s(a.key_strindex) == BUILD_ID_ATTR)
                        {
                            let Some(Value::StringValue(bid)) = a.value.clone().and_then(|v| v.value) else {
                                panic!("build-id is a string")
                            };
                            let table = tables.entry(bid.clone()).or_insert_with(|| reader.symbols(&bid).unwrap());
                            let want = tailprof_analyze::store_query::lookup(table, loc.address).map(|r| r.name.as_str());
                            assert_eq!(Some(name), want, "{bid}+0x{:x}", loc.address);
                        }
                        if p as u32 == pid {
                            names_seen.insert(name.to_string());
                        }
                    }
                }
            }
        }
        let start = window.expect("a profile in the request");

        // what the store holds for that window
        let q = SampleQuery { from_us: start, to_us: start + 1, ..Default::default() };
        let (rows, _) = reader.samples(&q);
        let rows: Vec<_> = rows.into_iter().filter(|r| r.window_start_us == start).collect();
        assert!(!rows.is_empty(), "no stored window starts at {start}");
        let mut want = Leaves::new();
        for r in &rows {
            *want.entry((r.pid, r.binary.clone(), r.frames[0].offset)).or_insert(0) += r.count;
        }
        assert_eq!(leaves, want, "window {start}: samples per (pid, leaf binary, leaf offset)");
        assert_eq!(samples, rows.iter().map(|r| r.count).sum::<u64>());
        assert_eq!(period, rows.iter().map(|r| r.period).sum::<u64>());
        if leaves.keys().any(|k| k.0 == pid) {
            windows_with_workload += 1;
        }
    }
    assert!(windows_with_workload >= 2, "the workload is in {windows_with_workload} requests");
    assert!(pid_comms.contains("work"), "the workload's process is named {pid_comms:?}");
    assert!(names_seen.contains("spin_a") && names_seen.contains("spin_b"), "the workload's functions are never named: {names_seen:?}");
}
