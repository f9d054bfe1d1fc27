//! PostgreSQL validation of issue 7 on an unmodified, stripped `postgres` (its functions
//! are exported in .dynsym; .symtab is stripped): queries as items through uprobes on
//! `PortalRun`, classes from `pg_parse_query`'s SQL text (`--item-class-from
//! postgres:pg_parse_query:rdi`), user stacks unwound with DWARF while recording, and
//! off-CPU time from context switches.
//!
//! - `in_item_samples_unwind_to_portalrun_and_classes_are_query_shapes`: a query loop of
//!   two shapes; at least 90% of the in-item samples (`report --by stack --in-items
//!   --json`) have `PortalRun` in their stack, and `items --json` puts every query in the
//!   class of its shape.
//! - `row_lock_wait_is_blocked_time_in_xactlocktablewait`: one session holds a row lock
//!   (`BEGIN; UPDATE …; SELECT pg_sleep(…); COMMIT`) while another updates the same row;
//!   the waiting UPDATE's item shows blocked off-CPU time whose stack has
//!   `XactLockTableWait`, and (issue 21) its `woken_by` names the holding session's
//!   backend (its COMMIT releases the lock after the statement's `PortalRun`, so the
//!   waker is usually outside any item; not asserted).
//!
//! Each test starts a private cluster (initdb into a temp dir, Unix socket only, run as
//! the `postgres` user when we are root, like tests/items_record.rs) and SKIPS, saying
//! why, when PostgreSQL is not installed, when not root (system-wide recording, tracefs)
//! or when the kernel refuses the events. CI: `.ci/run` installs postgresql. The tests
//! run one at a time (each records system-wide). No timing assertions: the figures are
//! ratios, and the measured values are printed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The two tests record system-wide: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

use tailprof_testkit::postgres::Server;

/// A started server with table `t(id, v)` of 20,000 rows, or why the test skips.
fn setup(tag: u16) -> Option<(Server, String)> {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording system-wide with uprobes and tracefs needs root");
        return None;
    }
    let server = Server::start(tag)?;
    server.psql_c("CREATE TABLE t(id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g % 97 FROM generate_series(1, 20000) g;");
    server.psql_c("VACUUM ANALYZE t");
    let pg = server.postgres().display().to_string();
    Some((server, pg))
}

/// `tailprof record -a --call-graph dwarf` with queries as items and their classes from
/// the SQL text; returns once events are enabled (None: the kernel refused, skip).
fn start_recording(pg: &str, trace: &Path, extra: &[&str]) -> Option<(Child, std::thread::JoinHandle<String>)> {
    let mut args: Vec<String> =
        ["-F", "199", "--call-graph", "dwarf", "--mmap-pages", "1024", "--item-begin"].iter().map(|s| s.to_string()).collect();
    args.extend([
        format!("{pg}:PortalRun"),
        "--item-end".into(),
        format!("{pg}:PortalRun%return"),
        "--item-class-from".into(),
        format!("{pg}:pg_parse_query:rdi"),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    spawn_recording(&args, trace)
}

/// `tailprof record -a ARGS -o TRACE`; returns once events are enabled (None: the kernel
/// refused, skip).
fn spawn_recording(args: &[String], trace: &Path) -> Option<(Child, std::thread::JoinHandle<String>)> {
    let mut rec = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-a"])
        .args(args)
        .arg("-o")
        .arg(trace)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tailprof");
    let (tx, rx) = mpsc::channel();
    let err = rec.stderr.take().unwrap();
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
    if rx.recv_timeout(Duration::from_secs(300)).is_err() {
        let _ = rec.kill();
        let _ = rec.wait();
        let out = reader.join().unwrap();
        if out.contains("ermission denied") || out.contains("no uprobe PMU") || out.contains("needs tracefs") {
            let need = if out.contains("no uprobe PMU") {
                tailprof_testkit::Need::Uprobe
            } else if out.contains("needs tracefs") {
                tailprof_testkit::Need::Tracefs
            } else {
                tailprof_testkit::Need::PerfEvents
            };
            tailprof_testkit::skip(need, &out);
            return None;
        }
        panic!("tailprof record did not start:\n{out}");
    }
    Some((rec, reader))
}

fn stop_recording(mut rec: Child, reader: std::thread::JoinHandle<String>) -> String {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let st = rec.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(st.success(), "tailprof record failed: {out}");
    out
}

fn tailprof_json(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).output().expect("run tailprof");
    assert!(o.status.success(), "tailprof {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("tailprof {args:?}: bad JSON: {e}"))
}

const SERIES_SHAPE: &str = "select count(*) from generate_series(?, ?) as g where g % ? = ?";
const AGG_SHAPE: &str = "select md5(string_agg(v::text, ?)) from t where id <= ?";
const PER_SHAPE: usize = 20;

#[test]
fn in_item_samples_unwind_to_portalrun_and_classes_are_query_shapes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((server, pg)) = setup(0) else { return };
    let trace = server.dir.join("q.trace");
    // Off-CPU stacks are not needed here: without them the debug-built recorder keeps up
    // with a busy machine's context switches (`-a`) more easily.
    let Some((rec, reader)) = start_recording(&pg, &trace, &["--no-off-cpu"]) else { return };
    let sql = server.dir.join("q.sql");
    let text: String = (0..PER_SHAPE)
        .map(|i| {
            format!(
                "SELECT count(*) FROM generate_series(1, {}) AS g WHERE g % 7 = {};\nSELECT md5(string_agg(v::text, ',')) FROM t WHERE id <= {};\n",
                300_000 + i * 1000,
                i % 7,
                15_000 + i
            )
        })
        .collect();
    std::fs::write(&sql, text).unwrap();
    server.psql_file(&sql);
    let out = stop_recording(rec, reader);
    let t = trace.to_str().unwrap();

    // Stacks of the samples inside the queries' items (other processes on the machine
    // may have items of their own: `-a`).
    let (mut total, mut portal, mut complete) = (0u64, 0u64, 0u64);
    for class in [SERIES_SHAPE, AGG_SHAPE] {
        let v = tailprof_json(&["report", t, "--by", "stack", "--class", class, "--json", "--top", "0"]);
        for s in v["stacks"].as_array().expect("stacks") {
            let n = s["samples"].as_u64().unwrap_or(0);
            total += n;
            let frames = s["frames"].as_array().map(|f| f.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>()).unwrap_or_default();
            if frames.iter().any(|f| f.contains("PortalRun")) {
                portal += n;
            }
            if s["complete"].as_bool() == Some(true) {
                complete += n;
            } else if std::env::var_os("TAILPROF_TEST_VERBOSE").is_some() {
                eprintln!("incomplete stack, root first: {:?}", &frames[..frames.len().min(6)]);
            }
        }
    }
    let share = portal as f64 / total.max(1) as f64;
    // Informational: how the trace's stacks ended (complete, copy_exhausted, ...).
    let info = Command::new(env!("CARGO_BIN_EXE_tailprof")).arg("info").arg(t).output().expect("info");
    for line in String::from_utf8_lossy(&info.stdout).lines().filter(|l| l.to_ascii_lowercase().contains("stack")) {
        eprintln!("info: {line}");
    }
    eprintln!(
        "in-item samples: {total}, with PortalRun in the stack: {portal} ({:.1}%), complete stacks: {complete} ({:.1}%)",
        100.0 * share,
        100.0 * complete as f64 / total.max(1) as f64
    );

    // Classes: the two query shapes, each query in its own, none unlabelled in the
    // backend that ran them.
    let v = tailprof_json(&["items", t, "--json", "--top", "0", "--sort", "begin"]);
    let items = v["items"].as_array().expect("items");
    let backends: std::collections::BTreeSet<u64> = items
        .iter()
        .filter(|it| matches!(it["class"].as_str(), Some(SERIES_SHAPE | AGG_SHAPE)))
        .filter_map(|it| it["pid"].as_u64())
        .collect();
    let mut per_class = std::collections::BTreeMap::<String, usize>::new();
    for it in items.iter().filter(|it| it["pid"].as_u64().is_some_and(|p| backends.contains(&p))) {
        *per_class.entry(it["class"].as_str().unwrap_or("(none)").to_string()).or_default() += 1;
    }
    eprintln!("backend(s) {backends:?}: items per class: {per_class:?}");
    assert_eq!(backends.len(), 1, "one backend ran the queries: {backends:?}; record output:\n{out}");
    assert_eq!(per_class.get(SERIES_SHAPE), Some(&PER_SHAPE), "{per_class:?}; record output:\n{out}");
    assert_eq!(per_class.get(AGG_SHAPE), Some(&PER_SHAPE), "{per_class:?}; record output:\n{out}");
    assert_eq!(per_class.len(), 2, "no other class, no unlabelled query: {per_class:?}");
    assert!(total >= 50, "too few in-item samples to judge ({total}); record output:\n{out}");
    assert!(share >= 0.90, "only {:.1}% of {total} in-item samples unwind to PortalRun; record output:\n{out}", 100.0 * share);
}

#[test]
fn row_lock_wait_is_blocked_time_in_xactlocktablewait() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((server, pg)) = setup(1) else { return };
    let trace = server.dir.join("lock.trace");
    let Some((rec, reader)) = start_recording(&pg, &trace, &[]) else { return };
    // Session A takes the row lock and sleeps holding it.
    let mut holder = server
        .psql_cmd()
        .arg("-c")
        .arg("BEGIN; UPDATE t SET v = v + 1 WHERE id = 1; SELECT pg_sleep(1.5); COMMIT;")
        .stdout(Stdio::null())
        .spawn()
        .expect("psql");
    // Wait (bounded) until A sleeps, so B's UPDATE must wait for A's transaction.
    let mut sleeping = false;
    for _ in 0..600 {
        if server.psql_c("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "1" {
            sleeping = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sleeping, "session A never reached pg_sleep");
    // The backend of session A: the one that releases the lock at its COMMIT.
    let holder_pid: u64 =
        server.psql_c("SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'").parse().expect("the holder's backend pid");
    server.psql_c("UPDATE t SET v = v + 2 WHERE id = 1");
    assert!(holder.wait().unwrap().success(), "session A failed");
    let out = stop_recording(rec, reader);
    let t = trace.to_str().unwrap();

    let v = tailprof_json(&["items", t, "--json", "--top", "0", "--sort", "begin"]);
    let items = v["items"].as_array().expect("items");
    let waited: Vec<&serde_json::Value> = items
        .iter()
        .filter(|it| it["class"].as_str() == Some("update t set v = v + ? where id = ?"))
        .filter(|it| {
            it["off_cpu"].as_array().is_some_and(|o| {
                o.iter().any(|e| {
                    e["state"] == "blocked"
                        && e["frames"]
                            .as_array()
                            .is_some_and(|f| f.iter().any(|x| x.as_str().is_some_and(|s| s.contains("XactLockTableWait"))))
                })
            })
        })
        .collect();
    let summary: Vec<String> = items
        .iter()
        .map(|it| {
            format!(
                "{} wall {} cpu {} blocked {} runnable {}",
                it["class"], it["duration_ns"], it["cpu_ns"], it["blocked_ns"], it["runnable_ns"]
            )
        })
        .collect();
    eprintln!("items:\n{}", summary.join("\n"));
    assert_eq!(
        waited.len(),
        1,
        "exactly the waiting UPDATE is blocked in XactLockTableWait; items:\n{}\nrecord output:\n{out}",
        summary.join("\n")
    );
    let it = waited[0];
    let blocked = it["blocked_ns"].as_u64().unwrap_or(0);
    let in_wait: u64 = it["off_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["state"] == "blocked"
                && e["frames"].as_array().is_some_and(|f| f.iter().any(|x| x.as_str().is_some_and(|s| s.contains("XactLockTableWait"))))
        })
        .map(|e| e["ns"].as_u64().unwrap_or(0))
        .sum();
    let wall = it["duration_ns"].as_u64().unwrap_or(0);
    eprintln!("waiting UPDATE: wall {wall} ns, blocked {blocked} ns, of which in XactLockTableWait {in_wait} ns");
    assert!(blocked > 0 && in_wait * 2 >= blocked, "most blocked time is the row-lock wait: {it}");
    assert!(blocked * 2 >= wall, "the wait is most of the UPDATE's wall time: {it}");

    // Issue 21: the waiter names the holding session's backend as its waker (the lock's
    // release at A's COMMIT wakes it; the deadlock check's timer may end an earlier part
    // of the wait, so not necessarily all of it).
    let header = tailprof_format::TraceReader::open(&trace).unwrap().header().extra.get("causes").cloned();
    if header.is_none() {
        tailprof_testkit::skip(tailprof_testkit::Need::Tracefs, format!("no wakeups recorded; record output:\n{out}"));
        return;
    }
    let woken = it["woken_by"].as_array().expect("woken_by in a trace with wakeups");
    let wakers: Vec<String> = woken
        .iter()
        .map(|w| format!("{} pid {} tid {} item {} irq {} for {} ns", w["comm"], w["pid"], w["tid"], w["item"], w["irq"], w["ns"]))
        .collect();
    eprintln!("holder backend pid {holder_pid}; the waiting UPDATE's wakers:\n{}", wakers.join("\n"));
    let by_holder: u64 =
        woken.iter().filter(|w| w["pid"].as_u64() == Some(holder_pid) && w["irq"].is_null()).map(|w| w["ns"].as_u64().unwrap_or(0)).sum();
    assert!(by_holder > 0, "the holder's backend (pid {holder_pid}) should be among the wakers:\n{}", wakers.join("\n"));
}

/// Issue 22 item 3: queries as items from PostgreSQL's own USDT probes
/// (`postgresql:query__start` / `query__done`, guarded by semaphores the kernel sets
/// through `ref_ctr_offset`: `-a` uses the uprobe PMU), classes from `query__start`'s
/// argument (the SQL text); no uprobe on a symbol. Item count within 5% of the queries
/// sent, classes the two shapes.
#[test]
fn usdt_query_probes_give_items_and_sql_shapes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((server, pg)) = setup(2) else { return };
    let trace = server.dir.join("usdt.trace");
    let probe = |name: &str| format!("usdt:{pg}:postgresql:{name}");
    let args = vec![
        "-F".to_string(),
        "99".into(),
        "--no-off-cpu".into(),
        "--item-begin".into(),
        probe("query__start"),
        "--item-end".into(),
        probe("query__done"),
        "--item-class-from".into(),
        format!("{}:arg0", probe("query__start")),
    ];
    let Some((rec, reader)) = spawn_recording(&args, &trace) else { return };
    let sql = server.dir.join("u.sql");
    let n = 2 * PER_SHAPE;
    let text: String = (0..PER_SHAPE)
        .map(|i| {
            format!(
                "SELECT count(*) FROM generate_series(1, {}) AS g WHERE g % 7 = {};\nSELECT md5(string_agg(v::text, ',')) FROM t WHERE id <= {};\n",
                1000 + i,
                i % 7,
                100 + i
            )
        })
        .collect();
    std::fs::write(&sql, text).unwrap();
    server.psql_file(&sql);
    let _ = stop_recording(rec, reader);
    let r = tailprof_format::TraceReader::open(&trace).unwrap();
    let begin = r.header().extra.get("item_begin").cloned().unwrap_or_default();
    assert!(
        begin.starts_with("usdt:") && begin.contains(":postgresql:query__start@0x") && begin.contains("("),
        "semaphore as ref_ctr_offset: {begin}"
    );
    let v = tailprof_json(&["items", "--json", "--top", "0", trace.to_str().unwrap()]);
    let items = v["items"].as_array().expect("items");
    let shaped = items.iter().filter(|i| i["class"] == SERIES_SHAPE || i["class"] == AGG_SHAPE).count();
    eprintln!("queries sent: {n}, items: {}, in the two shapes: {shaped}", items.len());
    assert!((items.len() as f64 - n as f64).abs() <= 0.05 * n as f64, "items {} vs queries {n}", items.len());
    assert!(shaped as f64 >= 0.95 * n as f64, "{}", serde_json::to_string_pretty(items).unwrap());
    for shape in [SERIES_SHAPE, AGG_SHAPE] {
        assert!(items.iter().any(|i| i["class"] == shape), "{shape}");
    }
}

/// Issue 22 items 2 and 3: `--preset postgresql=BIN` on the stripped binary (no uprobe on
/// a symbol: only USDT probes). pgbench with two one-statement scripts (simple query
/// protocol, transaction log `-l`): the items match the log's transactions within 5% and
/// their classes are the scripts' SQL shapes. Then a row-lock wait (one session holds the
/// row while another updates it): the waiting UPDATE's item, and no other, carries a
/// `lock__wait` span inside it.
#[test]
fn preset_postgresql_pgbench_items_and_lock_wait_span() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((server, pg)) = setup(3) else { return };
    let Some(pgbench) =
        [server.bindir.join("pgbench")].into_iter().find(|p| p.is_file()).or_else(|| tailprof_testkit::have_command("pgbench"))
    else {
        tailprof_testkit::skip(tailprof_testkit::Need::Postgres, "pgbench not found");
        return;
    };
    let preset = vec!["-F".to_string(), "99".into(), "--no-off-cpu".into(), "--preset".into(), format!("postgresql={pg}")];

    // pgbench: items = transactions of the log.
    let trace = server.dir.join("pgbench.trace");
    let Some((rec, reader)) = spawn_recording(&preset, &trace) else { return };
    std::fs::write(server.dir.join("sel.sql"), "\\set id random(1, 20000)\nSELECT v FROM t WHERE id = :id;\n").unwrap();
    std::fs::write(server.dir.join("upd.sql"), "\\set id random(1, 20000)\nUPDATE t SET v = v + 1 WHERE id = :id;\n").unwrap();
    let prefix = server.dir.join("pgbench_log");
    let o = Command::new(&pgbench)
        .arg("-h")
        .arg(&server.dir)
        .args(["-p", &server.port.to_string(), "-U", "postgres", "-n", "-M", "simple", "-c", "2", "-t", "150", "-l"])
        .arg(format!("--log-prefix={}", prefix.display()))
        .arg("-f")
        .arg(format!("{}@1", server.dir.join("sel.sql").display()))
        .arg("-f")
        .arg(format!("{}@1", server.dir.join("upd.sql").display()))
        .arg("postgres")
        .output()
        .expect("pgbench");
    assert!(o.status.success(), "pgbench failed: {}", String::from_utf8_lossy(&o.stderr));
    let out = stop_recording(rec, reader);
    assert!(out.contains("--preset postgresql=") && out.contains(":postgresql:lock__wait__start:arg1"), "the expansion is printed: {out}");
    let mut logged = 0usize;
    for e in std::fs::read_dir(&server.dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("pgbench_log") {
            logged += std::fs::read_to_string(e.path()).unwrap().lines().filter(|l| !l.trim().is_empty()).count();
        }
    }
    assert_eq!(logged, 300, "pgbench's transaction log");
    let r = tailprof_format::TraceReader::open(&trace).unwrap();
    for key in ["item_begin", "item_end"] {
        let def = r.header().extra.get(key).cloned().unwrap_or_default();
        assert!(def.lines().all(|l| l.starts_with("usdt:")), "no uprobe on a symbol: {key} = {def}");
    }
    let events = r.header().extra.get("item_events").cloned().unwrap_or_default();
    assert!(events.lines().all(|l| l.contains(" usdt:")) && events.contains("lwlock__wait"), "{events}");
    let v = tailprof_json(&["items", "--json", "--top", "0", trace.to_str().unwrap()]);
    let items = v["items"].as_array().expect("items");
    let sel = items.iter().filter(|i| i["class"] == "select v from t where id = ?").count();
    let upd = items.iter().filter(|i| i["class"] == "update t set v = v + ? where id = ?").count();
    eprintln!("pgbench transactions logged: {logged}, items: {} (select {sel}, update {upd})", items.len());
    assert!((items.len() as f64 - logged as f64).abs() <= 0.05 * logged as f64, "items {} vs transactions {logged}", items.len());
    assert!((sel + upd) as f64 >= 0.95 * logged as f64, "classes are the scripts' shapes: {sel} + {upd}");
    assert!(sel > 0 && upd > 0);

    // A row-lock wait: a lock__wait span inside the waiting UPDATE only.
    let trace = server.dir.join("lockspan.trace");
    let Some((rec, reader)) = spawn_recording(&preset, &trace) else { return };
    let mut holder = server
        .psql_cmd()
        .arg("-c")
        .arg("BEGIN; UPDATE t SET v = v + 1 WHERE id = 1; SELECT pg_sleep(1.0); COMMIT;")
        .stdout(Stdio::null())
        .spawn()
        .expect("psql");
    let mut sleeping = false;
    for _ in 0..600 {
        if server.psql_c("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "1" {
            sleeping = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sleeping, "session A never reached pg_sleep");
    server.psql_c("UPDATE t SET v = v + 2 WHERE id = 1");
    assert!(holder.wait().unwrap().success(), "session A failed");
    let _ = stop_recording(rec, reader);
    let v = tailprof_json(&["items", "--json", "--top", "0", "--sort", "begin", trace.to_str().unwrap()]);
    let items = v["items"].as_array().expect("items");
    let with_wait: Vec<&serde_json::Value> =
        items.iter().filter(|it| it["events"]["spans"].as_array().is_some_and(|s| s.iter().any(|s| s["name"] == "lock__wait"))).collect();
    let summary: Vec<String> = items.iter().map(|it| format!("{} {} {}", it["class"], it["duration_ns"], it["events"])).collect();
    assert_eq!(with_wait.len(), 1, "exactly the waiting UPDATE has a lock__wait span:\n{}", summary.join("\n"));
    let it = with_wait[0];
    assert_eq!(it["class"], "update t set v = v + ? where id = ?", "{it}");
    let (b, e) = (it["begin_ns"].as_u64().unwrap(), it["end_ns"].as_u64().unwrap());
    let span = it["events"]["spans"].as_array().unwrap().iter().find(|s| s["name"] == "lock__wait").unwrap();
    let (sb, se) = (span["begin_ns"].as_u64().unwrap(), span["end_ns"].as_u64().unwrap());
    eprintln!("waiting UPDATE: wall {} ns, lock__wait span {} ns (arg {})", e - b, se - sb, span["arg"]);
    assert!(b <= sb && sb < se && se <= e && span["unfinished"] == false, "the span lies inside its item: {it}");
    let text = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["items", "--explain", &it["id"].to_string(), trace.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Spans: lock__wait"), "{text}");
}
