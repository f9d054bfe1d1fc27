//! Where files go: `ROOT/<table>/host=H/date=YYYY-MM-DD/hour=HH/<file>.parquet`
//! (Hive-style partitions, so `read_parquet('ROOT/samples/**/*.parquet',
//! hive_partitioning=true)` gives `host`, `date` and `hour` columns), and
//! `ROOT/symbols/<build-id>.parquet`.

use std::path::{Path, PathBuf};

use crate::atomic::{create_private_dir_in, open_store_root, remove_stale_temps};
use crate::time::partition_of;
use crate::{Result, StoreError};

/// The partitioned tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Samples,
    Items,
    Latency,
}

impl Table {
    pub fn dir_name(self) -> &'static str {
        match self {
            Table::Samples => "samples",
            Table::Items => "items",
            Table::Latency => "latency",
        }
    }
    pub const ALL: [Table; 3] = [Table::Samples, Table::Items, Table::Latency];
}

/// The default store directory: the data directory ([`tailprof_format::dirs::data_dir`]:
/// `$TAILPROF_HOME`, else `/var/lib/tailprof` for root, else `$XDG_DATA_HOME/tailprof`,
/// else `~/.local/share/tailprof`; never a shared directory such as `/tmp`).
pub fn default_root() -> Result<PathBuf> {
    tailprof_format::dirs::data_dir().map_err(|_| {
        StoreError::Options("cannot find a place for the store: set TAILPROF_HOME (or HOME), or give a store directory".into())
    })
}

/// Keeps a host name to `[A-Za-z0-9._-]` (anything else becomes `_`), at most 64 bytes,
/// so it is a safe single path component and a clean partition value.
pub fn sanitize_host(h: &str) -> String {
    let s: String =
        h.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s == "." || s == ".." {
        "unknown".into()
    } else {
        s
    }
}

/// This machine's host name (from uname), sanitized.
pub fn local_host() -> String {
    // SAFETY: uname fills the struct; the nodename is NUL-terminated.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let bytes: Vec<u8> = u.nodename.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    sanitize_host(&String::from_utf8_lossy(&bytes))
}

/// True when `s` is a build-id we write as a file name: lowercase hex, or our
/// `nobuildid-<hex>`, or `kernel`; at most 80 bytes.
pub fn valid_build_id(s: &str) -> bool {
    let hex = s.strip_prefix(crate::schema::NO_BUILD_ID_PREFIX).unwrap_or(s);
    (s == crate::schema::KERNEL_BUILD_ID || (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))))
        && s.len() <= 80
}

/// An open store directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Opens (creating, 0700) the store at `root` for writing and removes temporary files
    /// left by a crash. Returns the store and how many stale temporary files were removed.
    /// Refused (one line naming the fix): a root owned by someone else or writable by
    /// group or others, a symlink anywhere on the way, or a parent directory another user
    /// could change (`atomic::open_store_root`, issue 19 finding 2).
    pub fn open(root: &Path) -> Result<(Store, u64)> {
        if root.as_os_str().is_empty() {
            // What a configuration without a store directory holds when `default_root`
            // found none.
            return Err(default_root().err().unwrap_or_else(|| StoreError::Options("no store directory given".into())));
        }
        open_store_root(root)?;
        let removed = remove_stale_temps(root);
        Ok((Store { root: root.to_path_buf() }, removed))
    }

    /// A store opened for reading only: nothing is created or removed.
    pub fn at(root: &Path) -> Store {
        Store { root: root.to_path_buf() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn table_dir(&self, t: Table) -> PathBuf {
        self.root.join(t.dir_name())
    }

    /// The partition folder of a window starting at `start_us` (not created).
    pub fn partition_dir(&self, t: Table, host: &str, start_us: i64) -> PathBuf {
        let (date, hour) = partition_of(start_us);
        self.table_dir(t).join(format!("host={}", sanitize_host(host))).join(format!("date={date}")).join(format!("hour={hour:02}"))
    }

    /// Path of a window file (`w-<start>-<end>.parquet`, µs since the epoch, zero-padded
    /// so names sort by time).
    pub fn window_file(&self, t: Table, host: &str, start_us: i64, end_us: i64) -> PathBuf {
        self.partition_dir(t, host, start_us).join(format!("w-{:016}-{:016}.parquet", start_us.max(0), end_us.max(0)))
    }

    pub fn symbols_dir(&self) -> PathBuf {
        self.root.join("symbols")
    }

    /// `ROOT/symbols/<build-id>.parquet`, or None for a build-id that is not a safe name.
    pub fn symbols_file(&self, build_id: &str) -> Option<PathBuf> {
        valid_build_id(build_id).then(|| self.symbols_dir().join(format!("{build_id}.parquet")))
    }

    /// Creates a directory of the store (0700 at every level below the root); every level
    /// must be ours, writable by no one else, and not a symlink.
    pub fn ensure_dir(&self, dir: &Path) -> Result<()> {
        create_private_dir_in(&self.root, dir)
    }
}

/// Parses `w-<start>-<end>.parquet` or `c-<start>-<end>.parquet` into (start, end) µs.
pub fn parse_window_name(name: &str) -> Option<(i64, i64)> {
    let stem = name.strip_suffix(".parquet")?;
    let rest = stem.strip_prefix("w-").or_else(|| stem.strip_prefix("c-"))?;
    let (a, b) = rest.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let s = Store::at(Path::new("/s"));
        let p = s.window_file(Table::Samples, "web/1", 1_700_000_000_000_000, 1_700_000_010_000_000);
        assert_eq!(p, Path::new("/s/samples/host=web_1/date=2023-11-14/hour=22/w-1700000000000000-1700000010000000.parquet"));
        assert_eq!(parse_window_name("w-1700000000000000-1700000010000000.parquet"), Some((1_700_000_000_000_000, 1_700_000_010_000_000)));
        assert!(s.symbols_file("../etc").is_none());
        assert!(s.symbols_file("abc123").is_some());
        assert_eq!(sanitize_host(".."), "unknown");
    }
}
