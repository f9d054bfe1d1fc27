//! The one way tailprof opens a file a profiled process or an input can influence
//! (docs/SECURITY.md): mapped files and their `/proc/PID/root/...` forms, binaries named by
//! a trace or a perf.data file, debug files, perf maps. Used by the recorder
//! (`collect-sys::procfs`), the symbolizer (`symbolize::elf`) and the unwinder.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Open a file the way a target-influenced path must be opened: read-only, without
/// following a final symlink, without blocking (a FIFO or a device at the path returns at
/// once), close-on-exec, never as a controlling terminal, never on FUSE. The result is a
/// regular file, or an error; it is never a FIFO, socket, device or directory.
pub fn open_untrusted(path: &Path) -> io::Result<File> {
    // First an O_PATH handle: it opens nothing (no FIFO rendezvous, no device open
    // routine runs), so the type can be checked before the file is really opened.
    let handle = fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)?;
    let before = handle.metadata()?;
    if !before.file_type().is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    // Re-open exactly that inode for reading (no second path walk the target could race).
    reopen_checked(&handle, before.dev(), before.ino(), path)
}

/// [`open_untrusted`], and the file must be the one with device `dev` and inode `ino`
/// (a mapped file replaced or unlinked since it was mapped is refused).
pub fn open_untrusted_as(path: &Path, dev: u64, ino: u64) -> io::Result<File> {
    let f = open_untrusted(path)?;
    let m = f.metadata()?;
    if m.dev() != dev || m.ino() != ino {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not the mapped file any more (device/inode changed)", path.display()),
        ));
    }
    Ok(f)
}

/// `FUSE_SUPER_MAGIC`: a file system served by a user-space daemon.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// Open the file behind the O_PATH handle `h` for reading (through /proc/self/fd, so no
/// second path walk), after refusing FUSE (its owner, possibly the profiled user, can make
/// any open or read block forever); the opened file must still be (`dev`, `ino`).
pub fn reopen_checked(h: &File, dev: u64, ino: u64, what: &Path) -> io::Result<File> {
    // SAFETY: a zeroed statfs is a valid out-parameter; fstatfs on our fd.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(h.as_raw_fd(), &mut sfs) } == 0 && sfs.f_type as i64 == FUSE_SUPER_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is on a FUSE file system (not opened: its daemon could block us)", what.display()),
        ));
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", h.as_raw_fd()))?;
    let m = f.metadata()?;
    if !m.file_type().is_file() || m.dev() != dev || m.ino() != ino {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} changed while opening", what.display())));
    }
    Ok(f)
}
