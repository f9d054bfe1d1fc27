//! GNU build-ids (`NT_GNU_BUILD_ID` notes) of ELF files and of the running kernel.
//!
//! The recorder does not ask the kernel for build-ids in MMAP2 records (`attr.build_id`
//! breaks concurrent perf tools, see [`crate::attr`]), so it reads them here: once per
//! mapped file (keyed by path, device and inode), for mappings from MMAP/MMAP2 records
//! and from /proc at start, and for the kernel image (`/sys/kernel/notes`).
//!
//! Why a small reader instead of the `object` crate: we need exactly one note, and
//! `object` parses from an in-memory image, so we would read (or map) whole binaries —
//! often hundreds of MB — in the middle of a recording. This reader `pread`s the ELF
//! header, the program headers and the note segments only (a few hundred bytes,
//! every size capped and every offset bounds-checked), falls back to section headers
//! when no PT_NOTE carries the id, and adds no dependency.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

const NT_GNU_BUILD_ID: u32 = 3;
const PT_NOTE: u32 = 4;
const SHT_NOTE: u32 = 7;
/// Largest note area we are willing to read.
const MAX_NOTES: u64 = 64 * 1024;
/// Largest number of program/section headers we walk.
const MAX_HEADERS: u64 = 4096;

/// Read the GNU build-id of the ELF file at `path`. `Ok(None)` when the file is not
/// ELF or has no build-id note. The path may be chosen by a profiled process, so it is
/// opened with [`crate::procfs::open_untrusted`]: no final symlink followed, never blocks
/// (a FIFO at the path is an error at once), regular files only.
pub fn read_build_id(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let f = crate::procfs::open_untrusted(path)?;
    Ok(from_file(&f))
}

/// [`read_build_id`], but only if the file at `path` is the one with device `dev` and
/// inode `ino` (as an MMAP2 record names it): `Ok(None)` when it is another file now
/// (replaced since it was mapped), so a wrong build-id is never attached. Opened like
/// [`read_build_id`], and the device/inode are checked on the open file before reading.
pub fn read_build_id_of(path: &Path, dev: u64, ino: u64) -> io::Result<Option<Vec<u8>>> {
    match crate::procfs::open_untrusted_as(path, dev, ino) {
        Ok(f) => Ok(from_file(&f)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
        Err(e) => Err(e),
    }
}

/// The build-id of an already opened ELF file (e.g. from
/// [`crate::procfs::open_mapped_file`]); `None` when it is not ELF or has none.
pub fn read_build_id_from(f: &File) -> Option<Vec<u8>> {
    from_file(f)
}

/// The build-id of the running kernel, from `/sys/kernel/notes`.
pub fn kernel_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    find_in_notes(&notes, cfg!(target_endian = "little"), 4)
}

/// Hex form of a build-id, as tools print it.
pub fn to_hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

struct Elf<'a> {
    f: &'a File,
    le: bool,
    is64: bool,
}

impl Elf<'_> {
    fn read(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        if len > MAX_NOTES {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        self.f.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    }
    fn u16(&self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
        Some(if self.le { u16::from_le_bytes(s) } else { u16::from_be_bytes(s) } as u64)
    }
    fn u32(&self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if self.le { u32::from_le_bytes(s) } else { u32::from_be_bytes(s) } as u64)
    }
    fn u64(&self, b: &[u8], at: usize) -> Option<u64> {
        let s: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        Some(if self.le { u64::from_le_bytes(s) } else { u64::from_be_bytes(s) })
    }
    /// An address-sized field.
    fn word(&self, b: &[u8], at64: usize, at32: usize) -> Option<u64> {
        if self.is64 {
            self.u64(b, at64)
        } else {
            self.u32(b, at32)
        }
    }
    /// Walk a header table; `f(entry)` returns `(type, offset, size, align)`.
    fn table(&self, off: u64, entsize: u64, num: u64, min_ent: u64) -> Option<Vec<u8>> {
        if num == 0 || num > MAX_HEADERS || entsize < min_ent {
            return None;
        }
        self.read(off, entsize.checked_mul(num)?)
    }
}

fn from_file(f: &File) -> Option<Vec<u8>> {
    let mut ident = [0u8; 64];
    let n = f.read_at(&mut ident, 0).ok()?;
    let h = &ident[..n];
    if h.len() < 52 || &h[..4] != b"\x7fELF" {
        return None;
    }
    let is64 = match h[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let le = match h[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    if is64 && h.len() < 64 {
        return None;
    }
    let e = Elf { f, le, is64 };
    // Program headers first: PT_NOTE segments are what the loader sees.
    let (phoff, phentsize, phnum) = if is64 {
        (e.u64(h, 32)?, e.u16(h, 54)?, e.u16(h, 56)?)
    } else {
        (e.u32(h, 28)?, e.u16(h, 42)?, e.u16(h, 44)?)
    };
    if let Some(tab) = e.table(phoff, phentsize, phnum, if is64 { 56 } else { 32 }) {
        for ent in tab.chunks_exact(phentsize as usize) {
            if e.u32(ent, 0)? != PT_NOTE as u64 {
                continue;
            }
            let (off, size, align) = if is64 {
                (e.u64(ent, 8)?, e.u64(ent, 32)?, e.u64(ent, 48)?)
            } else {
                (e.u32(ent, 4)?, e.u32(ent, 16)?, e.u32(ent, 28)?)
            };
            if let Some(id) = e.read(off, size).and_then(|n| find_in_notes(&n, le, align)) {
                return Some(id);
            }
        }
    }
    // Then section headers (e.g. separate debug files, relocatable objects).
    let (shoff, shentsize, shnum) = if is64 {
        (e.u64(h, 40)?, e.u16(h, 58)?, e.u16(h, 60)?)
    } else {
        (e.u32(h, 32)?, e.u16(h, 46)?, e.u16(h, 48)?)
    };
    let tab = e.table(shoff, shentsize, shnum, if is64 { 64 } else { 40 })?;
    for ent in tab.chunks_exact(shentsize as usize) {
        if e.u32(ent, 4)? != SHT_NOTE as u64 {
            continue;
        }
        let off = e.word(ent, 24, 16)?;
        let size = e.word(ent, 32, 20)?;
        let align = e.word(ent, 48, 32)?;
        if let Some(id) = e.read(off, size).and_then(|n| find_in_notes(&n, le, align)) {
            return Some(id);
        }
    }
    None
}

/// Find the `GNU` / NT_GNU_BUILD_ID note in a note area. Entries are
/// `{u32 namesz, descsz, type; name; desc}` with name and desc padded to `align`
/// (4, or 8 for 8-aligned note segments).
pub fn find_in_notes(notes: &[u8], le: bool, align: u64) -> Option<Vec<u8>> {
    let a = if align == 8 { 8 } else { 4 };
    let pad = |n: usize| n.checked_add(a - 1).map(|x| x & !(a - 1));
    let rd = |at: usize| -> Option<usize> {
        let s: [u8; 4] = notes.get(at..at + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(s) } else { u32::from_be_bytes(s) } as usize)
    };
    let mut p = 0usize;
    while p + 12 <= notes.len() {
        let (namesz, descsz, kind) = (rd(p)?, rd(p + 4)?, rd(p + 8)?);
        let name_at = p + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let end = desc_at.checked_add(pad(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID as usize && name == b"GNU\0" && !desc.is_empty() && desc.len() <= 64 {
            return Some(desc.to_vec());
        }
        p = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_le_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(name);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend_from_slice(desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn finds_gnu_build_id_after_other_notes() {
        let mut n = note(b"GNU\0", 5, &[1, 2, 3, 4, 5, 6, 7, 8]); // property note
        n.extend(note(b"Xen\0", 3, &[9; 3]));
        n.extend(note(b"GNU\0", 3, &[0xab; 20]));
        assert_eq!(find_in_notes(&n, true, 4), Some(vec![0xab; 20]));
        // Truncated and garbage input: None, never a panic.
        for i in 0..n.len() {
            let _ = find_in_notes(&n[..i], true, 4);
        }
        let mut junk = n.clone();
        junk[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(find_in_notes(&junk, true, 4), None);
    }

    #[test]
    fn reads_real_binaries() {
        // /bin/sh on any distribution built with build-ids; skip quietly if not.
        let exe = std::env::current_exe().unwrap();
        let id = read_build_id(&exe).unwrap();
        // Rust test binaries are linked by cc, which adds --build-id on most distros.
        if let Some(id) = id {
            assert!(id.len() >= 8);
        }
        assert_eq!(read_build_id(Path::new("/proc/self/status")).unwrap(), None);
        assert!(read_build_id(Path::new("/nonexistent/x")).is_err());
        let _ = kernel_build_id();
    }

    #[test]
    fn matches_readelf_on_libc() {
        // Compare against the notes parsed from the raw file by a different route: the
        // same bytes must appear in the file.
        for p in ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"] {
            let path = Path::new(p);
            if let Ok(Some(id)) = read_build_id(path) {
                let bytes = std::fs::read(path).unwrap();
                assert!(bytes.windows(id.len()).any(|w| w == id.as_slice()));
                assert_eq!(id.len(), 20);
                return;
            }
        }
    }
}
