//! Issue 23 in the agent: a Node process started with `--perf-basic-prof` publishes its
//! JIT code's names in `/tmp/perf-PID.map`; the agent (system-wide, 1 s windows) copies
//! them per process and writes them as the store's symbol tables, so `tailprof top
//! --store` (here `store_query::top`, what the command prints) names the hot JS function.
//! The process exits before the agent stops (its names must outlive it until its window
//! is written) and its map file is removed before the store is read. Skips (with a
//! message) without node or where system-wide perf_event_open is refused. No timing is
//! asserted.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use tailprof_agent::AgentConfig;
use tailprof_analyze::store_query::{top, GroupBy};
use tailprof_store::{SampleQuery, Store, StoreReader};

const NODE_APP: &str = r#"
function hotLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
function coldLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
const end = Date.now() + 3000; let x = 0;
while (Date.now() < end) { x += hotLoop(200000); x += hotLoop(200000); x += hotLoop(200000); x += coldLoop(200000); }
console.log(x);
"#;

#[test]
fn agent_names_a_node_process_hot_js_function_in_top() {
    static STOP: AtomicBool = AtomicBool::new(false);
    static STARTED: AtomicBool = AtomicBool::new(false);
    if !Command::new("sh").args(["-c", "command -v node"]).output().is_ok_and(|o| o.status.success()) {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("app.js"), NODE_APP).unwrap();
    let store_dir = tmp.path().join("store");
    let mut cfg = AgentConfig::default();
    for (k, v) in [
        ("window", "1s"),
        ("frequency", "499"),
        ("compact", "false"),
        ("retain_age", "none"),
        ("retain_size", "none"),
        ("host", "jit-test"),
    ] {
        cfg.set(k, v).unwrap();
    }
    cfg.store = store_dir.clone();
    let app_dir = tmp.path().to_path_buf();
    let work = std::thread::spawn(move || {
        while !STARTED.load(Ordering::SeqCst) {
            if STOP.load(Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let child = Command::new("node").args(["--perf-basic-prof", "app.js"]).current_dir(&app_dir).stdout(Stdio::null()).spawn().unwrap();
        let pid = child.id();
        let st = child.wait_with_output().unwrap().status;
        assert!(st.success());
        // exited: its names must stay until its last window is written
        std::thread::sleep(std::time::Duration::from_millis(1500));
        STOP.store(true, Ordering::SeqCst);
        Some(pid)
    });
    let res = tailprof_agent::run_agent(&cfg, &STOP, &mut |_| STARTED.store(true, Ordering::SeqCst));
    STOP.store(true, Ordering::SeqCst);
    let pid = work.join().unwrap();
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
    // The names come from the store, not from the runtime's file.
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let agg = &summary.aggregation;
    assert!(agg.jit.jit_entries > 0, "no JIT names copied: {agg:?}");
    assert!(agg.jit.jit_symbol_tables > 0, "no JIT symbol table: {agg:?}");
    assert_eq!(summary.writer.symbol_tables_failed, 0, "{:?}", summary.writer.last_error);

    let (store, _) = Store::open(&store_dir).unwrap();
    let reader = StoreReader::new(store);
    let q = SampleQuery { from_us: 0, to_us: i64::MAX, host: None, pid: Some(pid), binary: None };
    let rep = top(&reader, &q, GroupBy::Function, 10);
    let self_of = |name: &str| rep.rows.iter().filter(|r| r.name.contains(name)).map(|r| r.self_samples).sum::<u64>();
    let (hot, cold) = (self_of("hotLoop"), self_of("coldLoop"));
    let shown: Vec<(&str, u64)> = rep.rows.iter().map(|r| (r.name.as_str(), r.self_samples)).collect();
    assert!(hot > 0, "hotLoop not named by top: {shown:?}");
    assert!(rep.rows[0].name.contains("hotLoop"), "the hot function leads: {shown:?}");
    assert!(hot > cold, "hotLoop ({hot}) does 3x coldLoop's ({cold}) work: {shown:?}");
    let by_bin = top(&reader, &q, GroupBy::Binary, 10);
    assert!(by_bin.rows.iter().any(|r| r.name == tailprof_agent::jit::JIT_PATH), "{:?}", by_bin.rows);
}
