//! Safe output files: every file tailprof writes goes through [`AtomicFile`].
//!
//! tailprof often runs as root in directories other users can write to (`/tmp`), so an
//! output path is untrusted: someone may have planted a symlink, a FIFO or a file there.
//! The rules (docs/SECURITY.md, "Output files"):
//!
//! - the data is written to a new temporary file in the destination's directory, created
//!   with `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC` and mode 0600 (or `TAILPROF_FILE_MODE`,
//!   see [`default_mode`]), so nothing that already exists is opened for writing;
//! - on [`AtomicFile::commit`] the data is fsynced and the temporary file is renamed
//!   over the final name. `rename(2)` replaces a symlink at the final name *itself*: its
//!   target is never written. A symlink is followed only when it sits in a directory
//!   that no one but the caller can write to and the caller owns it (so `/dev/stdout`
//!   still works, an attacker's link in `/tmp` never does);
//! - a run that fails before committing unlinks its temporary file (on drop): an
//!   existing file of the final name is untouched;
//! - a character device at the final name (`/dev/null`, a tty) in a directory only the
//!   caller can write is written directly; a FIFO, socket or directory is refused;
//! - `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and `/proc/self/fd/N` name the caller's own
//!   open files (what the shell redirected) and are written directly.
//!
//! The recorder [`publish`](AtomicFile::publish)es its trace as soon as recording has
//! started, so a recorder killed later still leaves its trace under the final name.
//!
//! ```
//! use std::io::Write;
//! let dir = std::env::temp_dir().join(format!("tailprof-atomic-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("out.txt");
//! let mut f = tailprof_format::atomic::AtomicFile::create(&path).unwrap();
//! f.write_all(b"hello").unwrap();
//! assert!(!path.exists()); // not there until committed
//! f.commit().unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"hello");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Mode of new output files unless `TAILPROF_FILE_MODE` says otherwise (as `perf`).
pub const DEFAULT_MODE: u32 = 0o600;

/// The mode for new output files: `TAILPROF_FILE_MODE` (octal, e.g. `644`; only the
/// read/write bits of 0666 are honoured) when set and valid, else [`DEFAULT_MODE`]. The
/// process umask still applies.
pub fn default_mode() -> u32 {
    std::env::var("TAILPROF_FILE_MODE")
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0o"), 8).ok())
        .map(|m| m & 0o666)
        .unwrap_or(DEFAULT_MODE)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Writing to the temporary name.
    Pending,
    /// Renamed to the final name; still writing.
    Published,
    /// Writing straight to a character device (no temporary file).
    Direct,
    /// Committed or given up.
    Done,
}

/// A file written under a temporary name and renamed over its final name on
/// [`commit`](Self::commit). See the [module docs](self).
#[derive(Debug)]
pub struct AtomicFile {
    file: Option<File>,
    dir: Option<OwnedFd>,
    tmp_name: CString,
    final_name: CString,
    dest: PathBuf,
    state: State,
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    let mut v = u64::from_ne_bytes(b);
    if n != b.len() as isize {
        // Fall back on the standard library's per-process random hash keys.
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
        h.write_u32(std::process::id());
        v ^= h.finish();
    }
    v
}

/// Whether only the caller (or root) can change entries of directory `dir`: owned by the
/// caller or root, and not writable by group or others.
fn dir_is_private(dir: &Path) -> bool {
    let euid = unsafe { libc::geteuid() };
    match std::fs::metadata(dir) {
        Ok(m) => (m.uid() == euid || m.uid() == 0) && m.mode() & 0o022 == 0,
        Err(_) => false,
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

enum Dest {
    /// Temporary file + rename at this path.
    Replace(PathBuf),
    /// Open this character device directly.
    Direct(PathBuf),
    /// One of the caller's own open files (`/dev/stdout`, `/dev/fd/N`,
    /// `/proc/self/fd/N`): opened directly, following the kernel's magic link.
    OwnFd(PathBuf),
}

/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`: names of the caller's own
/// file descriptors (what the shell redirected), not paths anyone else chose.
fn is_own_fd(path: &Path) -> bool {
    let s = path.as_os_str().as_bytes();
    let num = |rest: &[u8]| !rest.is_empty() && rest.iter().all(u8::is_ascii_digit);
    s == b"/dev/stdout"
        || s == b"/dev/stderr"
        || s.strip_prefix(b"/dev/fd/").is_some_and(num)
        || s.strip_prefix(b"/proc/self/fd/").is_some_and(num)
}

fn not_regular(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} exists and is {what}, not a regular file; choose another output path", path.display()),
    )
}

/// Where to write for a requested `path` (see the module docs for the rules).
fn resolve(path: &Path) -> io::Result<Dest> {
    if is_own_fd(path) {
        return Ok(Dest::OwnFd(path.to_path_buf()));
    }
    let euid = unsafe { libc::geteuid() };
    let mut path = path.to_path_buf();
    for _ in 0..8 {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Dest::Replace(path)),
            Err(e) => return Err(e),
        };
        let ft = meta.file_type();
        let dir = parent_of(&path);
        if ft.is_file() {
            return Ok(Dest::Replace(path));
        }
        if ft.is_symlink() {
            // Follow only a link that no one else could have planted.
            if meta.uid() == euid && dir_is_private(&dir) {
                let target = std::fs::read_link(&path)?;
                path = if target.is_absolute() { target } else { dir.join(target) };
                continue;
            }
            return Ok(Dest::Replace(path));
        }
        if ft.is_char_device() {
            if dir_is_private(&dir) {
                return Ok(Dest::Direct(path));
            }
            return Err(not_regular(&path, "a character device in a directory others can write to"));
        }
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "a special file"
        };
        return Err(not_regular(&path, what));
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: too many levels of symbolic links", path.display())))
}

impl AtomicFile {
    /// Start writing `path` with [`default_mode`].
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        Self::create_with_mode(path, default_mode())
    }

    /// Start writing `path`; a new file gets `mode` (less the umask).
    pub fn create_with_mode(path: &Path, mode: u32) -> io::Result<AtomicFile> {
        let (dev, extra) = match resolve(path)? {
            Dest::Replace(real) => return Self::create_in_dir(path, &real, mode),
            Dest::Direct(dev) => (dev, libc::O_NOFOLLOW),
            Dest::OwnFd(p) => (p, libc::O_TRUNC),
        };
        let c = cstr(dev.as_os_str())?;
        // SAFETY: c is a valid C string; the returned fd is owned below.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NOCTTY | libc::O_CLOEXEC | extra) })?;
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(AtomicFile {
            file: Some(file),
            dir: None,
            tmp_name: CString::default(),
            final_name: CString::default(),
            dest: path.to_path_buf(),
            state: State::Direct,
        })
    }

    fn create_in_dir(shown: &Path, real: &Path, mode: u32) -> io::Result<AtomicFile> {
        let name = real
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{} does not name a file", shown.display())))?;
        let dir_path = parent_of(real);
        let dir_c = cstr(dir_path.as_os_str())?;
        // SAFETY: valid C string; fd owned below.
        let dfd = cvt(unsafe { libc::open(dir_c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
        let dir = unsafe { OwnedFd::from_raw_fd(dfd) };
        let final_name = cstr(name)?;
        // `.NAME.tailprof-XXXXXXXXXXXXXXXX`, the name part cut so the whole fits NAME_MAX.
        let mut base = name.as_bytes().to_vec();
        base.truncate(200);
        let mut last_err = None;
        for _ in 0..16 {
            let mut tmp = b".".to_vec();
            tmp.extend_from_slice(&base);
            tmp.extend_from_slice(format!(".tailprof-{:016x}", random_u64()).as_bytes());
            let tmp_name = CString::new(tmp).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in file name"))?;
            // SAFETY: dir is an open directory fd, tmp_name a valid C string.
            let r = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    tmp_name.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    (mode & 0o7777) as libc::c_uint,
                )
            };
            match cvt(r) {
                Ok(fd) => {
                    let file = unsafe { File::from_raw_fd(fd) };
                    return Ok(AtomicFile {
                        file: Some(file),
                        dir: Some(dir),
                        tmp_name,
                        final_name,
                        dest: shown.to_path_buf(),
                        state: State::Pending,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("cannot create a temporary file")))
    }

    /// The path this file will have (as asked for).
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// The open file (e.g. for its metadata).
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("AtomicFile used after commit")
    }

    fn file_mut(&mut self) -> io::Result<&mut File> {
        self.file.as_mut().ok_or_else(|| io::Error::other("output file already committed"))
    }

    fn rename_now(&mut self) -> io::Result<()> {
        let dir = self.dir.as_ref().ok_or_else(|| io::Error::other("no directory"))?;
        // SAFETY: valid fds and C strings. renameat replaces a symlink at the final name
        // itself and never follows it.
        cvt(unsafe { libc::renameat(dir.as_raw_fd(), self.tmp_name.as_ptr(), dir.as_raw_fd(), self.final_name.as_ptr()) })?;
        self.state = State::Published;
        // Make the new name durable; an error here does not undo the rename.
        let _ = unsafe { libc::fsync(dir.as_raw_fd()) };
        Ok(())
    }

    /// Give the file its final name now and keep writing (the recorder does this once
    /// recording has started, so a killed recorder leaves its trace under the final
    /// name). Idempotent.
    pub fn publish(&mut self) -> io::Result<()> {
        match self.state {
            State::Pending => {
                self.file_mut()?.flush()?;
                self.rename_now()
            }
            State::Published | State::Direct => Ok(()),
            State::Done => Err(io::Error::other("output file already committed")),
        }
    }

    /// Flush, fsync and rename over the final name. On error the temporary file is
    /// removed and an existing file of the final name is left as it was.
    pub fn commit(mut self) -> io::Result<()> {
        let r = self.commit_inner();
        if r.is_err() && self.state == State::Pending {
            self.discard();
        }
        r
    }

    fn commit_inner(&mut self) -> io::Result<()> {
        let direct = self.state == State::Direct;
        let f = self.file_mut()?;
        f.flush()?;
        if !direct {
            f.sync_all()?;
        }
        if self.state == State::Pending {
            self.rename_now()?;
        }
        self.state = State::Done;
        self.file = None;
        Ok(())
    }

    /// Remove the temporary file (what drop does for an uncommitted file).
    fn discard(&mut self) {
        if self.state == State::Pending {
            if let Some(dir) = &self.dir {
                // SAFETY: valid fd and C string.
                unsafe { libc::unlinkat(dir.as_raw_fd(), self.tmp_name.as_ptr(), 0) };
            }
        }
        self.state = State::Done;
        self.file = None;
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file_mut()?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file_mut()?.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file_mut()?.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.discard();
    }
}

/// Write `bytes` to `path` through an [`AtomicFile`] (mode [`default_mode`]).
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes.as_ref())?;
    f.commit()
}

/// Whether `name` is one of [`AtomicFile`]'s temporary names (`.NAME.tailprof-` and 16
/// hex digits): what a crash between create and rename leaves behind, and what readers of
/// a directory of outputs (the agent's store) skip and clean up.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.')
        && name.len() > 26
        && name.is_char_boundary(name.len() - 26)
        && name[name.len() - 26..].strip_prefix(".tailprof-").is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// [`write_file`] with an error that names the path (`cannot write PATH: ...`).
pub fn write_file_named(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    write_file(path, bytes).map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temp_names_are_recognised() {
        let d = tmpdir("names");
        let p = d.join("w-1.parquet");
        let f = AtomicFile::create_with_mode(&p, 0o600).unwrap();
        let tmp: Vec<String> = std::fs::read_dir(&d).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(tmp.len(), 1);
        assert!(is_temp_name(&tmp[0]), "{tmp:?}");
        f.commit().unwrap();
        assert!(!is_temp_name("w-1.parquet") && !is_temp_name(".hidden") && !is_temp_name(".x.tailprof-notahexnumber!"));
        let _ = std::fs::remove_dir_all(&d);
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tailprof-atomic-{tag}-{}-{:x}", std::process::id(), random_u64()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tailprof-"))
            .collect()
    }

    #[test]
    fn commit_replaces_and_drop_leaves_existing_file() {
        let d = tmpdir("basic");
        let p = d.join("out");
        std::fs::write(&p, b"old").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(b"new, never committed").unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(&d).is_empty());
        write_file(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o600, 0, "mode {mode:o}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlink_at_final_name_is_replaced_not_followed() {
        let d = tmpdir("link");
        // Make the directory look shared so the link is untrusted even when we own it.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let p = d.join("out");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write_file(&p, b"data").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"data");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn publish_then_commit_and_fifo_refused() {
        let d = tmpdir("pub");
        let p = d.join("trace");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"a").unwrap();
        f.publish().unwrap();
        assert!(p.exists());
        f.write_all(b"b").unwrap();
        drop(f); // published: dropping keeps the file
        assert_eq!(std::fs::read(&p).unwrap(), b"ab");
        let fifo = d.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = AtomicFile::create(&fifo).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn own_fds_are_written_directly() {
        assert!(is_own_fd(Path::new("/dev/stdout")) && is_own_fd(Path::new("/proc/self/fd/1")));
        assert!(!is_own_fd(Path::new("/dev/fd/")) && !is_own_fd(Path::new("/proc/self/fd/1/x")));
        let d = tmpdir("fd");
        let p = d.join("redirected");
        let f = std::fs::File::create(&p).unwrap();
        let fdpath = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
        write_file(&fdpath, b"through my own fd").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"through my own fd");
        drop(f);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dev_null_is_written_directly() {
        let mut f = AtomicFile::create(Path::new("/dev/null")).unwrap();
        f.write_all(b"x").unwrap();
        f.commit().unwrap();
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    }
}
