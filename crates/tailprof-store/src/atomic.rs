//! The atomic write rule: temporary file in the target directory (created `O_EXCL`,
//! `O_NOFOLLOW`, mode 0600), write, `fsync`, `rename` over the final name, `fsync` the
//! directory. Readers only ever see whole files; a crash leaves a `.tmp-*` file that
//! readers skip and [`remove_stale_temps`] deletes. Directories are created 0700 and
//! must not be symlinks.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Result, StoreError};

/// Prefix of temporary files (readers skip every name starting with a dot).
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

/// A file being written atomically. [`AtomicFile::commit`] makes it visible.
pub struct AtomicFile {
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
}

impl AtomicFile {
    /// Starts writing `dest` (its directory must exist).
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let tmp = dir.join(format!("{TMP_PREFIX}{}-{name}", std::process::id()));
        let _ = fs::remove_file(&tmp); // our own stale temp from an earlier crash with the same pid
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| StoreError::io(&tmp, e))?;
        Ok(AtomicFile { file: Some(file), tmp, dest: dest.to_path_buf() })
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("AtomicFile used after commit")
    }

    /// fsync, rename over the destination, fsync the directory.
    pub fn commit(mut self) -> Result<()> {
        let file = self.file.take().expect("AtomicFile committed twice");
        file.sync_all().map_err(|e| StoreError::io(&self.tmp, e))?;
        drop(file);
        fs::rename(&self.tmp, &self.dest).map_err(|e| StoreError::io(&self.dest, e))?;
        sync_dir(self.dest.parent().unwrap_or(Path::new(".")));
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` atomically, mode 0600.
pub fn write_file(dest: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(dest)?;
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
            } else if ft.is_file() && name.starts_with(TMP_PREFIX) && fs::remove_file(e.path()).is_ok() {
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
