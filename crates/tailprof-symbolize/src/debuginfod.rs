//! Debug files from debuginfod servers (`DEBUGINFOD_URLS`), by build-id.
//!
//! For a binary with no local debug info and a build-id, each server in
//! `DEBUGINFOD_URLS` (space-separated, like elfutils) is asked for
//! `URL/buildid/<hex id>/debuginfo`. The answer is streamed into a temporary file in the
//! cache directory (created 0700, files 0600), kept only if its own build-id note
//! equals the one asked for, then renamed into place as `<hex id>.debug`.
//!
//! Bounds: one download at most [`Client::max_file`] bytes and [`Client::timeout`]
//! long; the cache at most [`Client::max_cache`] bytes (oldest files removed first).
//! A build-id no server has (they answered, e.g. 404) is remembered (a `<hex id>.fail`
//! marker, honoured for a day, and in memory), so a trace full of unknown binaries does
//! not ask the servers again on each run. A server that does not answer (refused,
//! timeout) is skipped for the rest of the run: a dead server costs one timeout.
//!
//! Plain `http://` only: the HTTP client (ureq) is built without TLS, which would add
//! rustls and a crypto library (C and assembly code, minutes of build time, a large
//! attack surface in a tool that runs as root) for a download whose content is verified
//! by build-id anyway. `https://` servers are skipped with a note; reach them through a
//! local http proxy or cache (`debuginfod` itself can federate), or fetch with
//! elfutils' `debuginfod-find debuginfo BUILDID` and pass the result with `--debug-dir`.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::build_id_hex;
use super::debugdir::{DebugFile, FoundBy};
use super::elf::ElfFile;
use crate::error::{Error, Result};

/// How long a failed build-id is not asked for again.
const FAIL_TTL: Duration = Duration::from_secs(24 * 3600);

/// A debuginfod client with its cache; see the module docs.
#[derive(Debug)]
pub struct Client {
    /// Server base URLs (`http://host:port[/prefix]`).
    pub urls: Vec<String>,
    /// Cache directory.
    pub cache: PathBuf,
    /// Time limit of one request, download included.
    pub timeout: Duration,
    /// Largest debug file accepted.
    pub max_file: u64,
    /// Largest total cache size.
    pub max_cache: u64,
    /// `https://` URLs that were left out.
    pub skipped: Vec<String>,
    failed: HashSet<Vec<u8>>,
    /// Servers that did not answer (connection refused, timeout): not asked again in
    /// this run, so a dead server costs one timeout, not one per binary.
    dead: HashSet<String>,
}

impl Client {
    /// A client for `urls` caching in `cache` (default limits: 30 s, 2 GiB per file,
    /// 8 GiB in all).
    pub fn new(urls: Vec<String>, cache: PathBuf) -> Self {
        Client {
            urls,
            cache,
            timeout: Duration::from_secs(30),
            max_file: 2 << 30,
            max_cache: 8 << 30,
            skipped: Vec::new(),
            failed: HashSet::new(),
            dead: HashSet::new(),
        }
    }

    /// From `DEBUGINFOD_URLS` (and `DEBUGINFOD_CACHE_PATH`, else
    /// `$XDG_CACHE_HOME/tailprof/debuginfod`, else `~/.cache/tailprof/debuginfod`;
    /// `DEBUGINFOD_TIMEOUT` in seconds). `Ok(None)` when the variable is unset or empty.
    pub fn from_env() -> Result<Option<Self>> {
        let Ok(var) = std::env::var("DEBUGINFOD_URLS") else { return Ok(None) };
        let (urls, skipped) = split_urls(&var);
        if urls.is_empty() {
            if skipped.is_empty() {
                return Ok(None);
            }
            return Err(Error::Unavailable(format!(
                "DEBUGINFOD_URLS has only https:// servers ({}), which this build cannot reach: use an http:// server, or fetch with `debuginfod-find debuginfo BUILDID` and pass --debug-dir",
                skipped.join(" ")
            )));
        }
        let cache = match std::env::var_os("DEBUGINFOD_CACHE_PATH") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => match (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
                (Some(x), _) if !x.is_empty() => PathBuf::from(x).join("tailprof/debuginfod"),
                (_, Some(h)) if !h.is_empty() => PathBuf::from(h).join(".cache/tailprof/debuginfod"),
                _ => {
                    return Err(Error::Unavailable(
                        "DEBUGINFOD_URLS is set but there is no cache directory: set DEBUGINFOD_CACHE_PATH".into(),
                    ))
                }
            },
        };
        let mut c = Client::new(urls, cache);
        c.skipped = skipped;
        if let Some(t) = std::env::var("DEBUGINFOD_TIMEOUT").ok().and_then(|t| t.trim().parse::<u64>().ok()) {
            c.timeout = Duration::from_secs(t.clamp(1, 3600));
        }
        Ok(Some(c))
    }

    fn cached_path(&self, id: &str) -> PathBuf {
        self.cache.join(format!("{id}.debug"))
    }

    fn fail_marker(&self, id: &str) -> PathBuf {
        self.cache.join(format!("{id}.fail"))
    }

    /// The debug file with build-id `build_id`: from the cache, else downloaded.
    pub fn fetch(&mut self, build_id: &[u8]) -> Result<DebugFile> {
        if build_id.len() < 2 || build_id.len() > 64 {
            return Err(Error::Damaged(format!("build-id of {} bytes", build_id.len())));
        }
        let id = build_id_hex(build_id);
        self.ensure_cache_dir()?;
        let cached = self.cached_path(&id);
        if cached.is_file() && ElfFile::open(&cached).ok().and_then(|e| e.build_id()).as_deref() == Some(build_id) {
            return Ok(DebugFile { path: cached, found_by: FoundBy::Debuginfod("cache".into()) });
        }
        if self.failed.contains(build_id) {
            return Err(Error::NotFound("failed before".into()));
        }
        let marker = self.fail_marker(&id);
        if let Ok(md) = fs::symlink_metadata(&marker) {
            let age = md.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok());
            if age.is_some_and(|a| a < FAIL_TTL) {
                self.failed.insert(build_id.to_vec());
                return Err(Error::NotFound(format!("failed within the last day ({})", marker.display())));
            }
        }
        let mut errors = Vec::new();
        let mut answered = false;
        for url in self.urls.clone() {
            if self.dead.contains(&url) {
                continue;
            }
            match self.download(&url, &id, build_id) {
                Ok(path) => {
                    self.evict(&path);
                    return Ok(DebugFile { path, found_by: FoundBy::Debuginfod(url) });
                }
                Err(Failure::Server(e)) => {
                    self.dead.insert(url.clone());
                    errors.push(format!("{url}: {e}"));
                }
                Err(Failure::Answer(e)) => {
                    answered = true;
                    errors.push(format!("{url}: {e}"));
                }
            }
        }
        self.failed.insert(build_id.to_vec());
        if !answered {
            // No server answered at all: not the build-id's fault, no marker on disk.
            return Err(Error::Network(if errors.is_empty() { "no debuginfod server reachable".into() } else { errors.join("; ") }));
        }
        let _ = create_new_0600(&marker).and_then(|mut f| f.write_all(errors.join("\n").as_bytes()));
        Err(Error::NotFound(errors.join("; ")))
    }

    fn ensure_cache_dir(&self) -> Result<()> {
        // Files in it are trusted as debug info: it must be ours and not writable by others.
        tailprof_format::dirs::ensure_private_dir(&self.cache).map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => Error::Permission(format!("{e}: fix its owner/mode or set DEBUGINFOD_CACHE_PATH")),
            _ => Error::Io { what: "debuginfod cache".to_string(), source: e },
        })
    }

    fn download(&self, base: &str, id: &str, build_id: &[u8]) -> Result<PathBuf, Failure> {
        use Failure::Answer;
        let url = format!("{}/buildid/{id}/debuginfo", base.trim_end_matches('/'));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .timeout_connect(Some(self.timeout.min(Duration::from_secs(10))))
            .max_redirects(3)
            .build()
            .into();
        let mut resp = match agent.get(&url).call() {
            Ok(r) => r,
            Err(e @ ureq::Error::StatusCode(_)) => return Err(Answer(e.to_string())),
            Err(e) => return Err(Failure::Server(e.to_string())),
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(".part-")
            .permissions(fs::Permissions::from_mode(0o600))
            .tempfile_in(&self.cache)
            .map_err(|e| Answer(format!("{}: {e}", self.cache.display())))?;
        let mut body = resp.body_mut().with_config().limit(self.max_file).reader();
        let n = io::copy(&mut body, tmp.as_file_mut()).map_err(|e| Answer(e.to_string()))?;
        if n >= self.max_file {
            return Err(Answer(format!("larger than the {}-byte limit", self.max_file)));
        }
        tmp.as_file().sync_all().map_err(|e| Answer(e.to_string()))?;
        let got = ElfFile::open(tmp.path()).map_err(|e| Answer(format!("not an ELF file: {e}")))?.build_id();
        if got.as_deref() != Some(build_id) {
            return Err(Answer(format!(
                "answer has build-id {}, not {id}",
                got.map(|g| build_id_hex(&g)).unwrap_or_else(|| "none".into())
            )));
        }
        let dst = self.cached_path(id);
        tmp.persist(&dst).map_err(|e| Answer(e.to_string()))?;
        Ok(dst)
    }

    /// Keep the cache under [`Client::max_cache`]: remove the oldest files but `keep`.
    fn evict(&self, keep: &Path) {
        let Ok(rd) = fs::read_dir(&self.cache) else { return };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = rd
            .flatten()
            .filter_map(|e| {
                let md = e.metadata().ok()?;
                md.is_file().then(|| (md.modified().unwrap_or(SystemTime::UNIX_EPOCH), md.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).fold(0, u64::saturating_add);
        files.sort();
        for (_, len, p) in files {
            if total <= self.max_cache {
                break;
            }
            if p != keep && fs::remove_file(&p).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }
}

/// Why one server gave no debug file.
enum Failure {
    /// The server did not answer (refused, timeout, DNS): skip it for the rest of the run.
    Server(String),
    /// It answered, but not with the file (404, wrong build-id, too large).
    Answer(String),
}

/// (http URLs, https URLs skipped).
fn split_urls(var: &str) -> (Vec<String>, Vec<String>) {
    let mut urls = Vec::new();
    let mut skipped = Vec::new();
    for u in var.split_whitespace() {
        if u.starts_with("http://") {
            urls.push(u.to_owned());
        } else {
            skipped.push(u.to_owned());
        }
    }
    (urls, skipped)
}

fn create_new_0600(path: &Path) -> io::Result<fs::File> {
    let _ = fs::remove_file(path);
    fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn shared_cache_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("c");
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).unwrap();
        let mut c = Client::new(vec!["http://127.0.0.1:9".into()], cache);
        let e = c.fetch(&[0x11; 20]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("writable by others"));
    }

    #[test]
    fn urls_split_by_scheme() {
        let (u, s) = split_urls(" http://a:8002  https://debuginfod.debian.net\nhttp://b/x ");
        assert_eq!(u, vec!["http://a:8002", "http://b/x"]);
        assert_eq!(s, vec!["https://debuginfod.debian.net"]);
    }

    #[test]
    fn unreachable_server_is_asked_once_per_run_and_leaves_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        // Port 9 on localhost: connection refused at once.
        let mut c = Client::new(vec!["http://127.0.0.1:9".into()], dir.path().join("cache"));
        c.timeout = Duration::from_secs(5);
        let id = [0xab; 20];
        assert!(c.fetch(&id).is_err());
        assert!(c.dead.contains("http://127.0.0.1:9"));
        // The server is down, the build-id may well exist: no marker for later runs.
        assert!(!dir.path().join("cache").join(format!("{}.fail", build_id_hex(&id))).exists());
        let e = c.fetch(&[0xcd; 20]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Network);
        assert!(e.to_string().contains("no debuginfod server reachable"), "{e}");
        assert!(c.fetch(&id).unwrap_err().to_string().contains("before"));
        // A stale marker from another run is honoured.
        std::fs::write(dir.path().join("cache").join(format!("{}.fail", build_id_hex(&[0xef; 20]))), b"x").unwrap();
        let mut c2 = Client::new(vec!["http://127.0.0.1:9".into()], dir.path().join("cache"));
        let e = c2.fetch(&[0xef; 20]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.to_string().contains("last day"));
    }
}
