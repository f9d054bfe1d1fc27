//! Finding a binary's separate debug file.
//!
//! Distributions ship binaries stripped and their symbols and DWARF in a separate file
//! (`postgresql-15-dbgsym` → `/usr/lib/debug/.build-id/ab/cdef….debug`). For a binary
//! without `.debug_info`, candidates are tried in this order; the first that checks out
//! wins:
//!
//! 1. each `--debug-dir DIR`, by build-id: `DIR/.build-id/ab/cdef….debug`,
//!    `DIR/ab/cdef….debug`, `DIR/ab/cdef…`;
//! 2. each `--debug-dir DIR`, by `.gnu_debuglink` name N: `DIR/N`, `DIR/<binary's
//!    directory>/N`;
//! 3. the system directories (`/usr/lib/debug`, `/lib/debug`) by build-id:
//!    `/usr/lib/debug/.build-id/ab/cdef….debug`;
//! 4. `.gnu_debuglink` next to the binary: `<dir>/N`, `<dir>/.debug/N`,
//!    `/usr/lib/debug/<dir>/N`;
//! 5. a debuginfod server when `DEBUGINFOD_URLS` is set (see [`super::debuginfod`]).
//!
//! A build-id candidate is used only when its own build-id note equals the binary's; a
//! debuglink candidate only when its CRC-32 equals the one in `.gnu_debuglink` (a
//! wrong debug file names addresses wrongly, which is worse than not naming them).

use std::path::{Path, PathBuf};

use super::build_id_hex;
use super::elf::{file_crc32, ElfFile};

/// System directories searched after the user's `--debug-dir`s.
pub const SYSTEM_DEBUG_DIRS: &[&str] = &["/usr/lib/debug", "/lib/debug"];

/// Debug files larger than this are not CRC-checked (nor used through a debuglink).
const MAX_DEBUG_FILE: u64 = 8 << 30;

/// How a debug file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoundBy {
    /// By build-id, in this directory.
    BuildId(PathBuf),
    /// By `.gnu_debuglink` name (CRC checked).
    DebugLink,
    /// Downloaded from (or cached for) a debuginfod server.
    Debuginfod(String),
}

/// A separate debug file for a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFile {
    pub path: PathBuf,
    pub found_by: FoundBy,
}

/// What the lookup knows about the binary.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wanted<'a> {
    /// The binary's path.
    pub binary: &'a str,
    pub build_id: Option<&'a [u8]>,
    /// `.gnu_debuglink` (file name, CRC-32).
    pub debuglink: Option<(&'a str, u32)>,
}

/// Candidate paths for a build-id in `dir`, in lookup order.
pub fn build_id_paths(dir: &Path, build_id: &[u8]) -> Vec<PathBuf> {
    // Like gdb and blazesym: an id shorter than this is bogus.
    if build_id.len() < 2 {
        return Vec::new();
    }
    let (head, rest) = (build_id_hex(&build_id[..1]), build_id_hex(&build_id[1..]));
    vec![
        dir.join(".build-id").join(&head).join(format!("{rest}.debug")),
        dir.join(&head).join(format!("{rest}.debug")),
        dir.join(&head).join(&rest),
    ]
}

/// `true` if `path` is an ELF file whose build-id is `want` (opened as untrusted: no
/// symlink, regular files only).
pub(crate) fn build_id_matches(path: &Path, want: &[u8]) -> bool {
    ElfFile::open(path).ok().and_then(|e| e.build_id()).is_some_and(|b| b == want)
}

fn crc_matches(path: &Path, want: u32) -> bool {
    path.is_file() && file_crc32(path, MAX_DEBUG_FILE).is_ok_and(|c| c == want)
}

/// The binary's directory relative to `/` (for `DIR/<binary's directory>/N`).
fn rel_dir(binary: &str) -> Option<PathBuf> {
    let dir = Path::new(binary).parent()?;
    let rel = dir.strip_prefix("/").ok()?;
    // A path the traced process chose: no `..` climbing out of a debug directory.
    if rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return None;
    }
    Some(rel.to_path_buf())
}

/// Steps 1-4 of the module docs. `user_dirs` are the `--debug-dir`s.
pub(crate) fn find_local(user_dirs: &[PathBuf], w: &Wanted<'_>) -> Option<DebugFile> {
    let not_self = |p: &Path| p != Path::new(w.binary);
    let by_id = |dir: &Path| -> Option<DebugFile> {
        let id = w.build_id?;
        build_id_paths(dir, id)
            .into_iter()
            .find(|p| not_self(p) && p.is_file() && build_id_matches(p, id))
            .map(|path| DebugFile { path, found_by: FoundBy::BuildId(dir.to_path_buf()) })
    };
    let by_link = |cands: Vec<PathBuf>| -> Option<DebugFile> {
        let (_, crc) = w.debuglink?;
        cands.into_iter().find(|p| not_self(p) && crc_matches(p, crc)).map(|path| DebugFile { path, found_by: FoundBy::DebugLink })
    };
    let rel = rel_dir(w.binary);
    for d in user_dirs {
        if let Some(f) = by_id(d) {
            return Some(f);
        }
    }
    if let Some((name, _)) = w.debuglink {
        for d in user_dirs {
            let mut c = vec![d.join(name)];
            if let Some(r) = &rel {
                c.push(d.join(r).join(name));
            }
            if let Some(f) = by_link(c) {
                return Some(f);
            }
        }
    }
    for d in SYSTEM_DEBUG_DIRS {
        if let Some(f) = by_id(Path::new(d)) {
            return Some(f);
        }
    }
    if let Some((name, _)) = w.debuglink {
        let mut c = Vec::new();
        if let Some(dir) = Path::new(w.binary).parent() {
            c.push(dir.join(name));
            c.push(dir.join(".debug").join(name));
        }
        if let Some(r) = &rel {
            for d in SYSTEM_DEBUG_DIRS {
                c.push(Path::new(d).join(r).join(name));
            }
        }
        if let Some(f) = by_link(c) {
            return Some(f);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_layouts() {
        let p = build_id_paths(Path::new("/d"), &[0xab, 0xcd, 0xef]);
        assert_eq!(p, vec![PathBuf::from("/d/.build-id/ab/cdef.debug"), PathBuf::from("/d/ab/cdef.debug"), PathBuf::from("/d/ab/cdef")]);
        assert!(build_id_paths(Path::new("/d"), &[1]).is_empty());
    }

    #[test]
    fn relative_binary_dir_never_climbs() {
        assert_eq!(rel_dir("/usr/bin/x"), Some(PathBuf::from("usr/bin")));
        assert_eq!(rel_dir("/usr/../etc/x"), None);
        assert_eq!(rel_dir("x"), None);
    }

    #[test]
    fn debuglink_needs_the_right_crc() {
        let dir = tempfile::tempdir().unwrap();
        let dbg = dir.path().join("prog.debug");
        std::fs::write(&dbg, b"debug bytes").unwrap();
        let crc = crc32fast::hash(b"debug bytes");
        let bin = dir.path().join("sub").join("prog");
        let bin = bin.to_str().unwrap();
        let user = vec![dir.path().to_path_buf()];
        let w = Wanted { binary: bin, build_id: None, debuglink: Some(("prog.debug", crc)) };
        let f = find_local(&user, &w).unwrap();
        assert_eq!((f.path, f.found_by), (dbg.clone(), FoundBy::DebugLink));
        let w = Wanted { debuglink: Some(("prog.debug", crc ^ 1)), ..w };
        assert_eq!(find_local(&user, &w), None);
    }
}
