//! Where tailprof keeps its own files, and how it creates directories for them.
//!
//! **The data directory** ([`data_dir`]), one rule for everything tailprof keeps between
//! runs (the calibration files in `calibration/`, the bandwidth probe's result, the
//! continuous-profiling store of `tailprof agent`, `top` and `diff`):
//!
//! 1. `$TAILPROF_HOME`, when set and not empty;
//! 2. `/var/lib/tailprof` when running as root;
//! 3. `$XDG_DATA_HOME/tailprof`, when set and not empty;
//! 4. `$HOME/.local/share/tailprof`, when `HOME` is set and not empty;
//! 5. otherwise an error that says what to set (never a shared directory such as `/tmp`).
//!
//! Caches that can be rebuilt (`TAILPROF_CACHE_DIR`, `~/.cache/tailprof`) follow the XDG
//! cache rule instead (`tailprof-symbolize`'s `cache`).
//!
//! **Private directories**: [`create_private_dir_all`] (mode 0700, whatever the umask) and
//! [`ensure_private_dir`] (the same, then checked to be ours and writable by no one else)
//! are the one way tailprof makes a directory for its files.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// No data directory could be found (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    #[error("cannot find a place for tailprof's data: set TAILPROF_HOME (or HOME)")]
    NoHome,
}

/// The data directory of this process (see the [module docs](self)).
pub fn data_dir() -> Result<PathBuf, DataDirError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    data_dir_from(|k| std::env::var_os(k), euid)
}

/// The rule of [`data_dir`] over any environment (`env(name)`) and effective uid.
pub fn data_dir_from(env: impl Fn(&str) -> Option<OsString>, euid: u32) -> Result<PathBuf, DataDirError> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = nonempty("TAILPROF_HOME") {
        return Ok(home);
    }
    if euid == 0 {
        return Ok(PathBuf::from("/var/lib/tailprof"));
    }
    if let Some(data) = nonempty("XDG_DATA_HOME") {
        return Ok(data.join("tailprof"));
    }
    match nonempty("HOME") {
        Some(home) => Ok(home.join(".local/share/tailprof")),
        None => Err(DataDirError::NoHome),
    }
}

/// Create `dir` and its missing parents with mode 0700 (the umask can only clear bits);
/// existing directories are left as they are. The one way tailprof makes a directory for
/// its own files (caches, the calibration directory, the store, demo output).
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if std::fs::symlink_metadata(dir).is_ok() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        // The umask may have cleared bits, never added them: make sure of 0700.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// [`create_private_dir_all`], then check that `dir` is a real directory (not a symlink)
/// owned by this user that no one else can write: files found in it may then be trusted
/// as our own (the symbol caches). Otherwise `PermissionDenied`, naming the directory.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
    create_private_dir_all(dir).map_err(named)?;
    let md = std::fs::symlink_metadata(dir).map_err(named)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !md.is_dir() || md.uid() != euid || md.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: not a directory of this user, or writable by others", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn data_dir_rule() {
        let all = [("TAILPROF_HOME", "/th"), ("XDG_DATA_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(data_dir_from(env(&all), 1000), Ok(PathBuf::from("/th")));
        assert_eq!(data_dir_from(env(&all), 0), Ok(PathBuf::from("/th")));
        let no_th = [("TAILPROF_HOME", ""), ("XDG_DATA_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(data_dir_from(env(&no_th), 0), Ok(PathBuf::from("/var/lib/tailprof")));
        assert_eq!(data_dir_from(env(&no_th), 1000), Ok(PathBuf::from("/xdg/tailprof")));
        let home = [("XDG_DATA_HOME", ""), ("HOME", "/home/u")];
        assert_eq!(data_dir_from(env(&home), 1000), Ok(PathBuf::from("/home/u/.local/share/tailprof")));
    }

    /// Regression (issue 20): the store's resolver fell back to `/tmp/.local/share/tailprof`
    /// without HOME; the one rule refuses instead.
    #[test]
    fn data_dir_without_home_is_an_error_not_tmp() {
        assert_eq!(data_dir_from(env(&[]), 1000), Err(DataDirError::NoHome));
        assert_eq!(data_dir_from(env(&[("HOME", "")]), 1000), Err(DataDirError::NoHome));
    }

    #[test]
    fn private_dirs_are_0700_and_checked() {
        let t = std::env::temp_dir().join(format!("tailprof-dirs-test-{}", std::process::id()));
        let d = t.join("a/b/c");
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&d).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        // An existing directory is left as it is by the plain creation.
        create_private_dir_all(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o777);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
