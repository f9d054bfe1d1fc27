//! Files and directories that only we may touch: scratch directories (`mkdtemp`, 0700),
//! files written 0600 through a temporary name and a rename (never following a symlink,
//! so a failed write leaves an existing file as it was), bounded reads that refuse
//! symlinks and FIFOs, and the output directory of `tailprof demo`, which must be new
//! or a private directory tailprof created earlier (docs/SECURITY.md, issue 10 finding 1).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tailprof_format::atomic::AtomicFile;

use crate::error::{MeasureError, Result};

/// A fresh directory `parent/prefixXXXXXX`, mode 0700, created by `mkdtemp` (no name
/// an attacker can predict or pre-create).
pub fn mkdtemp_in(parent: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    let mut template = parent.join(format!("{prefix}XXXXXX")).into_os_string().into_vec();
    template.push(0);
    // SAFETY: `template` is a NUL-terminated buffer we own; mkdtemp rewrites the XXXXXX
    // in place and returns it or NULL.
    let r = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if r.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    template.pop();
    Ok(PathBuf::from(OsString::from_vec(template)))
}

pub use tailprof_format::dirs::create_private_dir_all;

/// Write `bytes` to `path` safely, mode 0600, through `tailprof_format::atomic` (the
/// one home of safe output files): a temporary file created next to it with
/// O_CREAT|O_EXCL|O_NOFOLLOW, synced, then renamed over `path`, so a symlink an attacker
/// planted at `path` is replaced, never followed, and on failure `path` is unchanged.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = AtomicFile::create_with_mode(path, 0o600)?;
    f.write_all(bytes)?;
    f.commit()
}

/// Read a regular file of at most `max` bytes without following a symlink at `path` and
/// without blocking on a FIFO. `Ok(None)` when it does not exist.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a symbolic link (refused)"))
        }
        Err(e) => return Err(e),
    };
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if md.len() > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    let mut v = Vec::with_capacity(md.len() as usize);
    f.take(max + 1).read_to_end(&mut v)?;
    if v.len() as u64 > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    Ok(Some(v))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The marker file `tailprof demo` leaves in a directory it created.
pub const DEMO_DIR_MARKER: &str = ".tailprof-demo";

/// The output directory of `tailprof demo`, made safe to build and run in.
///
/// * `dir` does not exist: it is created with mode 0700 (`mkdir` does not follow a
///   symlink there: a dangling one is refused as existing) and marked as ours.
/// * `dir` exists: it must be a real directory (not a symlink), owned by us, with no
///   group or other permissions, and carry the marker of an earlier `tailprof demo`;
///   anything else is refused, because another user may have placed files in it.
/// * Every directory above it must be owned by root or us and not writable by others
///   (or sticky, like /tmp), so nobody can swap the directory for another afterwards.
///
/// Returns the canonical path.
pub fn prepare_demo_dir(dir: &Path) -> Result<PathBuf> {
    let fix = "give --out a directory that does not exist yet (tailprof demo creates it, mode 0700)";
    let refuse = |why: String| MeasureError::Invalid(format!("refusing to use {} for the demo: {why}; {fix}", dir.display()));
    // First the directories above it, before anything is created there.
    let mut existing = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    while std::fs::symlink_metadata(existing).is_err() {
        existing = existing.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    }
    let above = existing.canonicalize().map_err(|e| MeasureError::io("cannot resolve", existing, e))?;
    check_chain(&above).map_err(refuse)?;
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                create_private_dir_all(parent).map_err(|e| MeasureError::io("cannot create", parent, e))?;
            }
            std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    refuse("it appeared while we created it (or is a dangling symbolic link)".into())
                } else {
                    MeasureError::io("cannot create", dir, e)
                }
            })?;
            // mkdir applies the umask; make sure no one else has access either way.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| MeasureError::io("cannot restrict", dir, e))?;
            write_private(&dir.join(DEMO_DIR_MARKER), b"created by tailprof demo\n")
                .map_err(|e| MeasureError::io("cannot write into", dir, e))?;
        }
        Err(e) => return Err(MeasureError::io("cannot inspect", dir, e)),
        Ok(md) => {
            if md.file_type().is_symlink() {
                return Err(refuse("it is a symbolic link".into()));
            }
            if !md.is_dir() {
                return Err(refuse("it is not a directory".into()));
            }
            if md.uid() != euid() {
                return Err(refuse(format!("it belongs to uid {}, not to us (uid {})", md.uid(), euid())));
            }
            if md.mode() & 0o077 != 0 {
                return Err(refuse(format!("other users may access it (mode {:04o})", md.mode() & 0o7777)));
            }
            match std::fs::symlink_metadata(dir.join(DEMO_DIR_MARKER)) {
                Ok(m) if m.is_file() && m.uid() == euid() => {}
                _ => return Err(refuse("it exists and was not created by tailprof demo".into())),
            }
        }
    }
    let canon = dir.canonicalize().map_err(|e| MeasureError::io("cannot resolve", dir, e))?;
    check_chain(canon.parent().unwrap_or(Path::new("/"))).map_err(refuse)?;
    // Re-check the directory itself through its canonical path (it must still be ours).
    let md = std::fs::symlink_metadata(&canon).map_err(|e| MeasureError::io("cannot inspect", &canon, e))?;
    if !md.is_dir() || md.uid() != euid() || md.mode() & 0o077 != 0 {
        return Err(refuse("it changed while we checked it".into()));
    }
    Ok(canon)
}

/// The canonical directory `path` and every directory above it are owned by root or us
/// and not writable by group or others unless sticky.
fn check_chain(path: &Path) -> std::result::Result<(), String> {
    let me = euid();
    let mut cur = Some(path);
    while let Some(p) = cur {
        let md = std::fs::symlink_metadata(p).map_err(|e| format!("cannot inspect {}: {e}", p.display()))?;
        if md.uid() != 0 && md.uid() != me {
            return Err(format!("{} above it belongs to uid {} (who could swap the directory)", p.display(), md.uid()));
        }
        if md.mode() & 0o022 != 0 && md.mode() & libc::S_ISVTX == 0 {
            return Err(format!("{} above it is writable by other users and not sticky (mode {:04o})", p.display(), md.mode() & 0o7777));
        }
        cur = p.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkdtemp_is_private_and_fresh() {
        let base = tempfile::tempdir().unwrap();
        let a = mkdtemp_in(base.path(), "x-").unwrap();
        let b = mkdtemp_in(base.path(), "x-").unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn write_private_replaces_a_symlink_instead_of_following_it() {
        let base = tempfile::tempdir().unwrap();
        // A directory others can write to, like /tmp: a link there is never followed.
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = base.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = base.path().join("out.json");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_private(&out, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let md = std::fs::symlink_metadata(&out).unwrap();
        assert!(md.is_file());
        assert_eq!(md.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 2);
    }

    #[test]
    fn read_regular_refuses_symlinks_fifos_and_big_files() {
        let base = tempfile::tempdir().unwrap();
        let f = base.path().join("f");
        std::fs::write(&f, "abc").unwrap();
        assert_eq!(read_regular(&f, 10).unwrap().unwrap(), b"abc");
        assert!(read_regular(&f, 2).is_err());
        assert!(read_regular(&base.path().join("none"), 10).unwrap().is_none());
        let l = base.path().join("l");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert!(read_regular(&l, 10).is_err());
        let fifo = base.path().join("fifo");
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(fifo.as_os_str())).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read_regular(&fifo, 10).is_err());
    }

    #[test]
    fn demo_dir_new_existing_and_foreign() {
        let base = tempfile::tempdir().unwrap();
        let d = base.path().join("demo");
        let canon = prepare_demo_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&canon).unwrap().mode() & 0o777, 0o700);
        // A second run may reuse it.
        prepare_demo_dir(&d).unwrap();
        // A private directory that the demo did not create is refused.
        let other = base.path().join("other");
        std::fs::DirBuilder::new().mode(0o700).create(&other).unwrap();
        let e = prepare_demo_dir(&other).unwrap_err().to_string();
        assert!(e.contains("was not created by tailprof demo"), "{e}");
        // An open one, and a symlink to ours, too.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_demo_dir(&d).unwrap_err().to_string();
        assert!(e.contains("other users may access it"), "{e}");
        let l = base.path().join("link");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        assert!(prepare_demo_dir(&l).unwrap_err().to_string().contains("symbolic link"));
    }
}
