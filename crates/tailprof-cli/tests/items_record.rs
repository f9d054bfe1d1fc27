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
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tailprof_format::{MarkerKind, MarkerSource, Record, TraceReader, VecSink};

const QUERIES: usize = 25;

/// The newest `/usr/lib/postgresql/N/bin` holding postgres, initdb and pg_ctl.
fn pg_bindir() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| {
            ["postgres", "initdb", "pg_ctl"]
                .iter()
                .all(|b| d.join(b).is_file())
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, d)| d)
}

fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// A private PostgreSQL server; stopped and removed on drop.
struct Server {
    bindir: PathBuf,
    dir: PathBuf,
    port: u16,
    as_user: Option<String>,
}

impl Server {
    fn cmd(&self, prog: &str) -> Command {
        let exe = self.bindir.join(prog);
        match &self.as_user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn start(bindir: PathBuf) -> Result<Server, String> {
        let root = unsafe { libc::geteuid() } == 0;
        let as_user = if root {
            let ok = Command::new("id")
                .arg("-u")
                .arg("postgres")
                .output()
                .is_ok_and(|o| o.status.success());
            if !ok || which("runuser").is_none() {
                return Err("running as root and there is no 'postgres' user (or no runuser) to run the server".into());
            }
            Some("postgres".to_string())
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!("tailprof-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if as_user.is_some() {
            let o = Command::new("chown")
                .arg("postgres")
                .arg(&dir)
                .output()
                .map_err(|e| e.to_string())?;
            if !o.status.success() {
                return Err(format!(
                    "chown postgres {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
        }
        let port = 20000 + (std::process::id() % 20000) as u16;
        let s = Server {
            bindir,
            dir,
            port,
            as_user,
        };
        let data = s.dir.join("data");
        let o = s
            .cmd("initdb")
            .args(["-A", "trust", "-U", "postgres", "-N", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            panic!("initdb failed: {}", String::from_utf8_lossy(&o.stderr));
        }
        let opts = format!(
            "-c listen_addresses='' -k {} -p {} -c fsync=off",
            s.dir.display(),
            s.port
        );
        let o = s
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-o", &opts, "-w", "-l"])
            .arg(s.dir.join("log"))
            .arg("start")
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            let log = std::fs::read_to_string(s.dir.join("log")).unwrap_or_default();
            panic!(
                "pg_ctl start failed: {}\n{log}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(s)
    }

    fn postmaster_pid(&self) -> u32 {
        let f = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap();
        f.lines().next().unwrap().trim().parse().unwrap()
    }

    fn psql(&self, sql_file: &Path) {
        let psql = self.bindir.join("psql");
        let psql = if psql.is_file() {
            psql
        } else {
            which("psql").expect("psql")
        };
        let o = Command::new(psql)
            .arg("-h")
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-q",
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
            ])
            .arg(sql_file)
            .output()
            .expect("psql");
        assert!(
            o.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn uprobe_items_on_postgres_queries_system_wide() {
    let Some(bindir) = pg_bindir() else {
        tailprof_testkit::skip(tailprof_testkit::Need::Postgres, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres); `apt-get install -y postgresql`");
        return;
    };
    if !bindir.join("psql").is_file() && which("psql").is_none() {
        tailprof_testkit::skip(tailprof_testkit::Need::Postgres, "psql not found");
        return;
    }
    let server = match Server::start(bindir.clone()) {
        Ok(s) => s,
        Err(why) => {
            tailprof_testkit::skip(tailprof_testkit::Need::Postgres, &why);
            return;
        }
    };
    let pg = bindir.join("postgres").display().to_string();
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
                if out.contains("no uprobe PMU") {
                    tailprof_testkit::Need::Uprobe
                } else {
                    tailprof_testkit::Need::PerfEvents
                },
                &out,
            );
            return;
        }
        panic!("tailprof record did not start:\n{out}");
    }
    let sql = server.dir.join("q.sql");
    let text: String = (1..=QUERIES)
        .map(|i| format!("SELECT count(*) FROM generate_series(1, {});\n", i * 20000))
        .collect();
    std::fs::write(&sql, text).unwrap();
    server.psql(&sql);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let st = rec.wait().unwrap();
    let out = reader.join().unwrap();
    assert!(st.success(), "tailprof record failed: {out}");
    assert!(out.contains("item markers"), "{out}");

    let mut r = TraceReader::open(&trace).unwrap();
    let extra = r.header().extra.clone();
    assert!(
        extra["item_begin"].contains("postgres:PortalRun@0x"),
        "{extra:?}"
    );
    assert!(
        extra["item_end"].contains("postgres:PortalRun%return@0x"),
        "{extra:?}"
    );
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
    let (pid, (begins, ends)) = per_pid
        .iter()
        .max_by_key(|(_, v)| v.0)
        .map(|(p, v)| (*p, *v))
        .expect("no markers at all");
    eprintln!("markers per pid: {per_pid:?}");
    // Every marker of the backend came from the uprobes (it has no marker runtime).
    assert!(markers.iter().filter(|m| m.pid == pid).all(|m| m.source == MarkerSource::Uprobe));
    assert_ne!(
        pid, postmaster,
        "queries run in a forked backend, not the postmaster"
    );
    assert!(
        begins >= QUERIES,
        "backend {pid}: {begins} begins for {QUERIES} queries"
    );
    assert_eq!(begins, ends, "every PortalRun returned");
    assert!(sink
        .0
        .iter()
        .any(|r| matches!(r, Record::ItemClass(c) if c.name == "query" && c.pid == pid)));
}
