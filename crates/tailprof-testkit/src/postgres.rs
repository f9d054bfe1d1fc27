//! A private PostgreSQL server for the tests that profile a real, unmodified server.
//!
//! [`Server::start`] runs `initdb` into a temporary directory and starts the cluster on a
//! Unix socket only (no TCP), as the `postgres` user when we are root; the server is
//! stopped (`-m immediate`) and its directory removed on drop. When PostgreSQL is not
//! installed, or root has no `postgres` user to run it as, it [`skip`]s
//! ([`Need::Postgres`]) and answers `None`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{have_command, is_root, skip, Need};

/// The newest `/usr/lib/postgresql/N/bin` holding postgres, initdb and pg_ctl.
pub fn bindir() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| ["postgres", "initdb", "pg_ctl"].iter().all(|b| d.join(b).is_file()))
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, d)| d)
}

/// A private PostgreSQL server; stopped and removed on drop.
pub struct Server {
    /// Where postgres, initdb, pg_ctl (and usually psql, pgbench) are.
    pub bindir: PathBuf,
    /// The cluster's directory: `data/`, the socket, `log`. Tests may put files here.
    pub dir: PathBuf,
    /// The socket's port number.
    pub port: u16,
    as_user: Option<String>,
    psql: PathBuf,
}

impl Server {
    /// A started server, or `None` after a [`skip`] saying why. `tag` tells apart the
    /// servers of one test binary (directory and port).
    pub fn start(tag: u16) -> Option<Server> {
        let Some(bindir) = bindir() else {
            skip(Need::Postgres, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres); `apt-get install -y postgresql`");
            return None;
        };
        let psql = bindir.join("psql");
        let Some(psql) = psql.is_file().then_some(psql).or_else(|| have_command("psql")) else {
            skip(Need::Postgres, "psql not found");
            return None;
        };
        match Self::start_in(bindir, psql, tag) {
            Ok(s) => Some(s),
            Err(why) => {
                skip(Need::Postgres, why);
                None
            }
        }
    }

    fn start_in(bindir: PathBuf, psql: PathBuf, tag: u16) -> Result<Server, String> {
        let as_user = if is_root() {
            let ok = Command::new("id").args(["-u", "postgres"]).output().is_ok_and(|o| o.status.success());
            if !ok || have_command("runuser").is_none() {
                return Err("running as root and there is no 'postgres' user (or no runuser) to run the server".into());
            }
            Some("postgres".to_string())
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!("tailprof-pg-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if as_user.is_some() {
            let o = Command::new("chown").arg("postgres").arg(&dir).output().map_err(|e| e.to_string())?;
            if !o.status.success() {
                return Err(format!("chown postgres {}: {}", dir.display(), String::from_utf8_lossy(&o.stderr)));
            }
        }
        let port = 20000 + (std::process::id() % 5000) as u16 + (tag % 8) * 5000;
        let s = Server { bindir, dir, port, as_user, psql };
        let data = s.dir.join("data");
        let o = s.cmd("initdb").args(["-A", "trust", "-U", "postgres", "-N", "-D"]).arg(&data).output().map_err(|e| e.to_string())?;
        assert!(o.status.success(), "initdb failed: {}", String::from_utf8_lossy(&o.stderr));
        let opts = format!("-c listen_addresses='' -k {} -p {} -c fsync=off", s.dir.display(), s.port);
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
            panic!("pg_ctl start failed: {}\n{log}", String::from_utf8_lossy(&o.stderr));
        }
        Ok(s)
    }

    /// A program of the server's bin directory, run as the server's user.
    pub fn cmd(&self, prog: &str) -> Command {
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

    /// The `postgres` executable (what uprobes and USDT probes attach to).
    pub fn postgres(&self) -> PathBuf {
        self.bindir.join("postgres")
    }

    /// The postmaster's pid (from `data/postmaster.pid`).
    pub fn postmaster_pid(&self) -> u32 {
        let f = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).expect("postmaster.pid");
        f.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid on the first line of postmaster.pid")
    }

    /// psql on the private socket, quiet, unaligned, stopping at the first error.
    pub fn psql_cmd(&self) -> Command {
        let mut c = Command::new(&self.psql);
        c.arg("-h").arg(&self.dir).args(["-p", &self.port.to_string(), "-U", "postgres", "-q", "-X", "-At", "-v", "ON_ERROR_STOP=1"]);
        c
    }

    /// Runs a file of statements; panics on failure.
    pub fn psql_file(&self, sql_file: &Path) {
        let o = self.psql_cmd().arg("-f").arg(sql_file).output().expect("psql");
        assert!(o.status.success(), "psql failed: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// Runs one query string (`-c`: sent as one simple query); its output, trimmed.
    pub fn psql_c(&self, sql: &str) -> String {
        let o = self.psql_cmd().arg("-c").arg(sql).output().expect("psql");
        assert!(o.status.success(), "psql -c {sql:?} failed: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.cmd("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
