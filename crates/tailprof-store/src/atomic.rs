//! The atomic write rule (temporary file in the target directory created `O_EXCL`,
//! `O_NOFOLLOW`, mode 0600; write, `fsync`, `rename` over the final name, `fsync` the
//! directory) is `tailprof_format::atomic`'s; this module fixes the mode at 0600 and maps
//! errors. Readers only ever see whole files; a crash leaves a temporary dot-file
//! (`tailprof_format::atomic::is_temp_name`) that readers skip and [`remove_stale_temps`]
//! deletes. Directories are created 0700 and
//! must not be symlinks.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::{Result, StoreError};

/// Prefix of the temporary files of stores written before the store used
/// `tailprof_format::atomic` (still cleaned up; readers skip every dot-file).
pub const TMP_PREFIX: &str = ".tmp-";

/// This process's effective uid.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn refuse(path: &Path, msg: String) -> StoreError {
    StoreError::Invalid { path: path.display().to_string(), msg }
}

/// The store's trust rule for one existing directory on the way to (or inside) the store
/// (issue 19, finding 2): not a symlink, a directory, owned by root or by us, and not
/// writable by group or others unless it is sticky (like /tmp, where only the owner of an
/// entry may rename or remove it). `inside`: a directory of the store itself, which must be
/// ours and writable by nobody else, sticky or not.
fn check_dir(dir: &Path, m: &std::fs::Metadata, inside: bool) -> Result<()> {
    let fix = if inside {
        "remove it (the agent recreates it) or choose another --store"
    } else {
        "choose a --store whose every parent directory is owned by root or you and writable by no one else"
    };
    if m.file_type().is_symlink() {
        return Err(refuse(
            dir,
            format!("is a symbolic link; the store follows none on its way (give the real path: `realpath {}`)", dir.display()),
        ));
    }
    if !m.is_dir() {
        return Err(refuse(dir, "exists and is not a directory".into()));
    }
    let me = euid();
    if inside && m.uid() != me {
        return Err(refuse(
            dir,
            format!("is owned by uid {}, not by this user (uid {me}): the store only uses directories it owns; {fix}", m.uid()),
        ));
    }
    if !inside && m.uid() != me && m.uid() != 0 {
        return Err(refuse(
            dir,
            format!("is owned by uid {} (neither root nor uid {me}), who could swap the store under it; {fix}", m.uid()),
        ));
    }
    let sticky = m.mode() & 0o1000 != 0;
    if m.mode() & 0o022 != 0 && (inside || !sticky) {
        return Err(refuse(
            dir,
            format!(
                "is writable by group or others (mode {:o}); {}",
                m.mode() & 0o7777,
                if inside { format!("`chmod 700 {}` or {fix}", dir.display()) } else { fix.to_string() }
            ),
        ));
    }
    Ok(())
}

/// Checks every existing directory from `/` down to `dir`'s parent ([`check_dir`]); the
/// missing ones are created 0700 by us. Relative paths are taken from the working
/// directory.
fn check_ancestors(dir: &Path) -> Result<std::path::PathBuf> {
    let abs = std::path::absolute(dir).map_err(|e| StoreError::io(dir, e))?;
    let mut at = std::path::PathBuf::new();
    let comps: Vec<_> = abs.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) => check_dir(&at, &m, false)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_one(&at)?,
            Err(e) => return Err(StoreError::io(&at, e)),
        }
    }
    Ok(abs)
}

/// `mkdir(dir, 0700)` (its parent exists); an existing entry is then checked by the
/// caller.
fn create_one(dir: &Path) -> Result<()> {
    tailprof_format::dirs::create_private_dir_all(dir).map_err(|e| StoreError::io(dir, e))
}

/// Opens (creating 0700 when missing) the store root `root` for writing: every directory
/// on the way must be owned by root or us and writable by no one else (or sticky), none
/// a symlink, and the root itself must be a directory we own that no one else can write
/// (issue 19, finding 2: a pre-created `/tmp/tpstore` is refused with one line naming the
/// fix).
pub fn open_store_root(root: &Path) -> Result<()> {
    let abs = check_ancestors(root)?;
    create_one(&abs)?;
    let m = fs::symlink_metadata(&abs).map_err(|e| StoreError::io(&abs, e))?;
    check_dir(root, &m, true)
}

/// Creates `dir` (inside the store `root`, already checked by [`open_store_root`]) and its
/// missing parents below `root` with mode 0700; every level, existing or new, must be a
/// directory of ours that no one else can write, never a symlink.
pub fn create_private_dir_in(root: &Path, dir: &Path) -> Result<()> {
    let rel = dir.strip_prefix(root).map_err(|_| refuse(dir, format!("is not inside the store {}", root.display())))?;
    let mut at = root.to_path_buf();
    for c in rel.components() {
        if !matches!(c, std::path::Component::Normal(_)) {
            return Err(refuse(dir, "has a `..` or root component".into()));
        }
        at.push(c);
        create_one(&at)?;
        let m = fs::symlink_metadata(&at).map_err(|e| StoreError::io(&at, e))?;
        check_dir(&at, &m, true)?;
    }
    Ok(())
}

/// A file being written atomically, always 0600 ([`tailprof_format::atomic::AtomicFile`],
/// the one implementation of the rule; `TAILPROF_FILE_MODE` does not apply to the store).
pub struct AtomicFile(tailprof_format::atomic::AtomicFile);

impl AtomicFile {
    /// Starts writing `dest` (its directory must exist).
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        tailprof_format::atomic::AtomicFile::create_with_mode(dest, 0o600).map(AtomicFile).map_err(|e| StoreError::io(dest, e))
    }

    /// The temporary file being written (`&File` implements `Write`).
    pub fn file(&self) -> &File {
        self.0.file()
    }

    /// fsync, rename over the destination, fsync the directory.
    pub fn commit(self) -> Result<()> {
        let dest = self.0.path().to_path_buf();
        self.0.commit().map_err(|e| StoreError::io(&dest, e))
    }
}

/// Writes `bytes` to `dest` atomically, mode 0600.
pub fn write_file(dest: &Path, bytes: &[u8]) -> Result<()> {
    let f = AtomicFile::create(dest)?;
    f.file().write_all(bytes).map_err(|e| StoreError::io(dest, e))?;
    f.commit()
}

/// Best-effort directory fsync (makes a rename durable).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Removes `.tmp-*` files under `root` (recursively, not following symlinks) left by a
/// crash. Returns how many were removed.
pub fn remove_stale_temps(root: &Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0u32;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > 1_000_000 {
            break;
        }
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file()
                && (tailprof_format::atomic::is_temp_name(&name) || name.starts_with(TMP_PREFIX))
                && fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// Opens a store file for reading: no symlinks, regular file, size bounded.
pub fn open_for_read(path: &Path, max: u64) -> Result<(File, u64)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    let m = f.metadata().map_err(|e| StoreError::io(path, e))?;
    if !m.is_file() {
        return Err(StoreError::Invalid { path: path.display().to_string(), msg: "not a regular file".into() });
    }
    if m.size() > max {
        return Err(StoreError::Invalid {
            path: path.display().to_string(),
            msg: format!("{} bytes, more than the {max}-byte limit for a store file", m.size()),
        });
    }
    Ok((f, m.size()))
}
