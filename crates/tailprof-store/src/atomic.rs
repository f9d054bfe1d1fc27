//! The atomic write rule (temporary file in the target directory created `O_EXCL`,
//! `O_NOFOLLOW`, mode 0600; write, `fsync`, `rename` over the final name, `fsync` the
//! directory) is `tailprof_format::atomic`'s; this module fixes the mode at 0600 and maps
//! errors. Readers only ever see whole files; a crash leaves a temporary dot-file
//! (`tailprof_format::atomic::is_temp_name`) that readers skip and [`remove_stale_temps`]
//! deletes. Directories are created 0700 and
//! must not be symlinks.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::{Result, StoreError};

/// Prefix of the temporary files of stores written before the store used
/// `tailprof_format::atomic` (still cleaned up; readers skip every dot-file).
pub const TMP_PREFIX: &str = ".tmp-";

/// Creates `dir` and its missing parents with mode 0700; refuses a symlink or a
/// non-directory at `dir`.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(StoreError::Invalid {
                path: dir.display().to_string(),
                msg: "is a symbolic link; the store refuses to follow it (use the real path)".into(),
            })
        }
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(StoreError::Invalid {
                path: dir.display().to_string(),
                msg: "exists and is not a directory".into(),
            })
        }
        Err(_) => {}
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| StoreError::io(dir, e))?;
    // The umask may have cleared bits, never added them; make sure of 0700 on the leaf.
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
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
                && fs::remove_file(e.path()).is_ok() {
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
