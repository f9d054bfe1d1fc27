//! `tailprof record` with uprobe item boundaries on a real, unmodified server binary:
//! PostgreSQL's `postgres`, which exports its functions in .dynsym for extensions.
//! `PortalRun` runs once per executed query (`exec_simple_query` itself is static), so
//! `--item-begin postgres:PortalRun --item-end postgres:PortalRun%return` makes every
//! query an item, in whichever backend process runs it — including backends forked
//! after recording started (`-a`).
//!
//! The test starts a private cluster (initdb into a temp dir, Unix socket only, no TCP),
//! runs a fixed batch of queries with psql, and checks the markers. It SKIPS, saying
//! why, when PostgreSQL (postgres, initdb, pg_ctl, psql) is not installed, when run as
//! root without a `postgres` user to run the server as, or when perf_event_open or the
//! uprobe PMU is unavailable. CI: `apt-get install -y postgresql` (Debian; nothing has to
//! be started: the test runs its own server). No timing assertions.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tailprof_format::{MarkerKind, MarkerSource, Record, TraceReader, VecSink};

const QUERIES: usize = 25;

use tailprof_testkit::postgres::Server;

#[test]
fn uprobe_items_on_postgres_queries_system_wide() {
    let Some(server) = Server::start(0) else { return };
    let pg = server.postgres().display().to_string();
    let trace = server.dir.join("q.trace");
    let mut rec = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-a", "-c", "1000000", "--item-class", "query"])
        .arg("--item-begin")
        .arg(format!("{pg}:PortalRun"))
        .arg("--item-end")
        .arg(format!("{pg}:PortalRun%return"))
        .arg("-o")
        .arg(&trace)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tailprof");
    // Wait for "recording" (events enabled) before sending queries.
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
    let started = rx.recv_timeout(Duration::from_secs(300)).is_ok();
    if !started {
        let _ = rec.kill();
        let _ = rec.wait();
        let out = reader.join().unwrap();
        if out.contains("permission denied") || out.contains("no uprobe PMU") {
            tailprof_testkit::skip(
                if out.contains("no uprobe PMU") { tailprof_testkit::Need::Uprobe } else { tailprof_testkit::Need::PerfEvents },
                &out,
            );
            return;
        }
        panic!("tailprof record did not start:\n{out}");
    }
    let sql = server.dir.join("q.sql");
    let text: String = (1..=QUERIES).map(|i| format!("SELECT count(*) FROM generate_series(1, {});\n", i * 20000)).collect();
    std::fs::write(&sql, text).unwrap();
    server.psql_file(&sql);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let st = rec.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(st.success(), "tailprof record failed: {out}");
    assert!(out.contains("item markers"), "{out}");

    let mut r = TraceReader::open(&trace).unwrap();
    let extra = r.header().extra.clone();
    assert!(extra["item_begin"].contains("postgres:PortalRun@0x"), "{extra:?}");
    assert!(extra["item_end"].contains("postgres:PortalRun%return@0x"), "{extra:?}");
    let mut sink = VecSink::default();
    r.read_all(&mut sink).unwrap();
    let postmaster = server.postmaster_pid();
    let markers: Vec<_> = sink
        .0
        .iter()
        .filter_map(|r| match r {
            Record::Marker(m) => Some(m),
            _ => None,
        })
        .collect();
    // System-wide: marked programs of other tests running at the same time may add
    // shared-memory markers of their own; the uprobes' markers are the ones to count.
    // The psql session's backend was forked after recording began; it ran our queries.
    let mut per_pid = std::collections::BTreeMap::<u32, (usize, usize)>::new();
    for m in markers.iter().filter(|m| m.source == MarkerSource::Uprobe) {
        let e = per_pid.entry(m.pid).or_default();
        match m.kind {
            MarkerKind::Begin => e.0 += 1,
            MarkerKind::End => e.1 += 1,
            MarkerKind::Label | MarkerKind::Switch | MarkerKind::SwitchNone => {}
        }
    }
    let (pid, (begins, ends)) = per_pid.iter().max_by_key(|(_, v)| v.0).map(|(p, v)| (*p, *v)).expect("no markers at all");
    eprintln!("markers per pid: {per_pid:?}");
    // Every marker of the backend came from the uprobes (it has no marker runtime).
    assert!(markers.iter().filter(|m| m.pid == pid).all(|m| m.source == MarkerSource::Uprobe));
    assert_ne!(pid, postmaster, "queries run in a forked backend, not the postmaster");
    assert!(begins >= QUERIES, "backend {pid}: {begins} begins for {QUERIES} queries");
    assert_eq!(begins, ends, "every PortalRun returned");
    assert!(sink.0.iter().any(|r| matches!(r, Record::ItemClass(c) if c.name == "query" && c.pid == pid)));
}
