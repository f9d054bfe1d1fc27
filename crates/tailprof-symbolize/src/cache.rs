//! The symbolizer's on-disk cache directory: files only this user may write, read back
//! only when they pass every check (see docs/SECURITY.md, "Symbolization cache").
//!
//! Where: `$TAILPROF_CACHE_DIR` when set (`off` or empty: no cache), else for root
//! `/var/cache/tailprof`, else `$XDG_CACHE_HOME/tailprof`, else `~/.cache/tailprof`.
//! What: [`super::ksyms`]'s parsed `/proc/kallsyms` (one file per user, valid for one
//! boot and module list) and [`super::debugcache`]'s inflated copies of separate debug
//! files with compressed DWARF. Deleting the directory is always safe.
//!
//! Files are created 0600 through a temporary file in the same directory and a rename
//! (which replaces a symlink at the final name, never follows it); the directory must be
//! ours and not writable by group or others. Reads open with `O_NOFOLLOW`, accept only a
//! regular file owned by this user with no group/other permissions, and bound its size.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The default cache directory (module docs); `None`: caching is off.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TAILPROF_CACHE_DIR") {
        return (!d.is_empty() && d != "off").then(|| PathBuf::from(d));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/var/cache/tailprof"));
    }
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(x) = abs(std::env::var_os("XDG_CACHE_HOME")) {
        return Some(x.join("tailprof"));
    }
    abs(std::env::var_os("HOME")).map(|h| h.join(".cache/tailprof"))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Create `dir` (0700) if needed and check it is a directory of ours that nobody else
/// can write to.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    tailprof_format::dirs::ensure_private_dir(dir).map_err(|e| Error::Permission(e.to_string()))
}

/// Whether metadata `md` is of a cache file we may trust: regular, ours, 0600 or less.
pub(crate) fn trusted_file(md: &fs::Metadata) -> bool {
    md.file_type().is_file() && md.uid() == euid() && md.mode() & 0o077 == 0
}

/// The bytes of cache file `path` if it is a trusted file (see [`trusted_file`]) of at
/// most `max` bytes, in a trusted directory; `None` otherwise (missing, symlink, ...).
pub(crate) fn read(path: &Path, max: u64) -> Option<Vec<u8>> {
    let dir_ok =
        path.parent().and_then(|d| fs::symlink_metadata(d).ok()).is_some_and(|m| m.is_dir() && m.uid() == euid() && m.mode() & 0o022 == 0);
    if !dir_ok {
        return None;
    }
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).ok()?;
    let md = f.metadata().ok()?;
    if !trusted_file(&md) || md.len() > max {
        return None;
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    f.take(max + 1).read_to_end(&mut buf).ok()?;
    (buf.len() as u64 <= max).then_some(buf)
}

/// Write `name` in cache directory `dir` (created if needed) from the parts `parts`:
/// temporary file 0600, then rename. Not `format::atomic::AtomicFile`: that one follows a
/// symlink the caller owns in a private directory (so `-o` through one's own link works),
/// while a cache entry must always replace whatever sits at its name, link or not.
pub(crate) fn write(dir: &Path, name: &str, parts: &[&[u8]]) -> Result<PathBuf> {
    ensure_dir(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".part-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir.display(), e))?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        for p in parts {
            w.write_all(p).map_err(|e| Error::io("writing a cache file", e))?;
        }
        w.flush().map_err(|e| Error::io("writing a cache file", e))?;
    }
    // Durable before it has its name: a crash never leaves a named, half-written file.
    tmp.as_file().sync_data().map_err(|e| Error::io("writing a cache file", e))?;
    let dst = dir.join(name);
    tmp.persist(&dst).map_err(|e| Error::io(dst.display(), e.error))?;
    Ok(dst)
}

/// 64-bit FNV-1a (cache keys: change detection, not a defence).
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_private_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("c");
        let p = write(&dir, "x", &[b"ab", b"cd"]).unwrap();
        let md = fs::metadata(&p).unwrap();
        assert_eq!(md.mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(read(&p, 10).as_deref(), Some(&b"abcd"[..]));
        // Too large, group-readable, or a symlink: not read.
        assert_eq!(read(&p, 3), None);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(read(&p, 10), None);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        let l = dir.join("link");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert_eq!(read(&l, 10), None);
        // A directory others can write to: neither read nor written.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(read(&p, 10), None);
        assert!(write(&dir, "y", &[b"z"]).is_err());
    }
}
