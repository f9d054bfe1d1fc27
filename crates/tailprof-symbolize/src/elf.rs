//! The few ELF facts symbolization needs, read with bounded `pread`s (through
//! [`tailprof_elf`], the one bounded ELF reader) from a file opened without following
//! symlinks: program headers (file offset → virtual address), which sections exist
//! (`.symtab`, `.debug_info`), the build-id note, the `.gnu_debuglink` name and CRC, and
//! raw section bytes (`.eh_frame`).
//!
//! Every size and count comes from an untrusted file, so each is checked against the
//! file's length and a fixed cap before anything is allocated; a malformed file is an
//! [`Error`], never a panic. ELF32 and ELF64, both byte orders.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use tailprof_elf::{Elf, SectionHeader, PT_LOAD, SHT_NOBITS};

use crate::error::{Error, Result};

/// At most this many bytes of one section are read into memory.
pub(crate) const MAX_SECTION: u64 = 512 << 20;

/// The one untrusted-file opener (`tailprof_elf::open`: no symlink at the last component,
/// no blocking on FIFOs, regular files only: docs/SECURITY.md), its error as this crate's.
pub(crate) fn open_untrusted(path: &Path) -> Result<File> {
    tailprof_elf::open::open_untrusted(path).map_err(|e| Error::io(path.display(), e))
}

/// One `PT_LOAD` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

/// One section header (the fields we use).
#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub name: String,
    pub kind: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
}

/// (device, inode, size, mtime seconds, mtime nanoseconds): see [`ElfFile::identity`].
pub(crate) type FileIdentity = (u64, u64, u64, i64, i64);

/// A parsed ELF file (headers only; section data is read on demand).
#[derive(Debug)]
pub(crate) struct ElfFile {
    elf: Elf<File>,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
}

impl ElfFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = open_untrusted(path)?;
        Self::parse(file).map_err(|source| Error::Elf { what: path.display().to_string(), source })
    }

    fn read_at(&self, offset: u64, size: u64) -> tailprof_elf::Result<Vec<u8>> {
        self.elf.read_vec(offset, size, MAX_SECTION)
    }

    fn parse(file: File) -> tailprof_elf::Result<Self> {
        let elf = Elf::parse(file)?;
        let mut segments = Vec::new();
        for p in elf.program_headers()? {
            let p = p?;
            if p.kind == PT_LOAD {
                segments.push(Segment { offset: p.offset, vaddr: p.vaddr, filesz: p.filesz });
            }
        }
        let mut names = elf.section_names();
        let mut sections = Vec::with_capacity(elf.sections().len());
        for &SectionHeader { name, kind, addr, offset, size, .. } in elf.sections() {
            // a name that cannot be read (out of bounds, unterminated) is empty
            let name = names.get(name.into()).ok().flatten().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
            sections.push(Section { name, kind, addr, offset, size });
        }
        Ok(ElfFile { elf, segments, sections })
    }

    /// Which file this is, however it was named: (device, inode, size, mtime seconds,
    /// mtime nanoseconds) of the open file. `None` if `fstat` fails.
    pub fn identity(&self) -> Option<FileIdentity> {
        let md = self.elf.reader().metadata().ok()?;
        Some((md.dev(), md.ino(), md.len(), md.mtime(), md.mtime_nsec()))
    }

    /// A path that opens this very file (`/proc/self/fd/N`), for libraries that take
    /// paths: what was checked is what they read, whatever happens to the original
    /// path meanwhile (a symlink swapped in, a file replaced).
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.elf.reader().as_raw_fd()))
    }

    /// CRC-32 (the `.gnu_debuglink` one) of the whole file.
    pub fn crc32(&self) -> Result<u32> {
        let (file, len) = (self.elf.reader(), self.elf.file_len());
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut at = 0u64;
        while at < len {
            let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
            file.read_exact_at(&mut buf[..n], at).map_err(|e| Error::io("reading for the CRC", e))?;
            h.update(&buf[..n]);
            at += n as u64;
        }
        Ok(h.finalize())
    }

    pub fn big_endian(&self) -> bool {
        self.elf.class().big_endian
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// Whether the file has section `name` with contents (not `SHT_NOBITS`, as in the
    /// stubs that `objcopy --only-keep-debug` leaves).
    pub fn has_data(&self, name: &str) -> bool {
        self.section(name).is_some_and(|s| s.kind != SHT_NOBITS && s.size > 0)
    }

    /// The bytes of section `name` (`None`: absent, empty, `SHT_NOBITS` or too large).
    pub fn section_data(&self, name: &str) -> Option<Vec<u8>> {
        let s = self.section(name)?;
        if s.kind == SHT_NOBITS || s.size == 0 || s.size > MAX_SECTION {
            return None;
        }
        self.read_at(s.offset, s.size).ok()
    }

    /// Virtual address of file offset `off` (through the `PT_LOAD` segment holding it).
    pub fn vaddr_of(&self, off: u64) -> Option<u64> {
        self.segments.iter().find(|s| off >= s.offset && off - s.offset < s.filesz).map(|s| s.vaddr.wrapping_add(off - s.offset))
    }

    /// The GNU build-id note: [`tailprof_elf::Elf::build_id`], the reader the recorder
    /// uses too (`PT_NOTE` segments first, so a binary without section headers has one,
    /// then `SHT_NOTE` sections; at most [`tailprof_elf::MAX_NOTE_BYTES`] of notes read in
    /// all, however many note areas the file claims).
    pub fn build_id(&self) -> Option<Vec<u8>> {
        self.elf.build_id()
    }

    /// `.gnu_debuglink`: (file name, CRC-32 of the debug file). The name must be a plain
    /// file name (no `/`, not `.`/`..`): it comes from an untrusted file.
    pub fn debuglink(&self) -> Option<(String, u32)> {
        let data = self.section_data(".gnu_debuglink")?;
        let end = data.iter().position(|&c| c == 0)?;
        let name = std::str::from_utf8(&data[..end]).ok()?;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return None;
        }
        let crc_at = (end + 1 + 3) & !3;
        let crc = self.elf.class().u32(data.get(crc_at..crc_at + 4)?, 0);
        Some((name.to_owned(), crc))
    }
}

/// CRC-32 (the one `.gnu_debuglink` uses) of a whole untrusted file, read in chunks.
pub(crate) fn file_crc32(path: &Path, max_len: u64) -> Result<u32> {
    let mut f = open_untrusted(path)?;
    let len = f.metadata().map_err(|e| Error::io(path.display(), e))?.len();
    if len > max_len {
        return Err(Error::Limit(format!("{}: {len} bytes is larger than the {max_len}-byte limit", path.display())));
    }
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path.display(), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        for data in [&b""[..], b"\x7fELF", b"\x7fELF\x02\x01\x01", &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0].repeat(16)] {
            std::fs::write(&p, data).unwrap();
            let _ = ElfFile::open(&p).map(|e| (e.build_id(), e.debuglink(), e.vaddr_of(0)));
        }
        // Huge header counts and offsets past the end of the file.
        let mut h = vec![0u8; 64];
        h[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        h[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        h[40..48].copy_from_slice(&(1u64 << 40).to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&u16::MAX.to_le_bytes());
        std::fs::write(&p, &h).unwrap();
        assert!(ElfFile::open(&p).is_err());
    }

    #[test]
    fn mutated_headers_never_panic() {
        // A small real binary; every header byte and every 7th byte of the section
        // header table set to a few extreme values, then everything we read from it.
        let (Ok(orig), Ok(elf)) = (std::fs::read("/bin/true"), ElfFile::open(Path::new("/bin/true"))) else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "no readable ELF /bin/true");
            return;
        };
        let shoff = orig.len().saturating_sub(64 * elf.sections.len().max(1));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m");
        let spots = (0..64).chain((shoff..orig.len()).step_by(7));
        for at in spots {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = orig.clone();
                m[at] = v;
                std::fs::write(&p, &m).unwrap();
                if let Ok(e) = ElfFile::open(&p) {
                    let _ = (e.build_id(), e.debuglink(), e.vaddr_of(0x1000), e.has_data(".symtab"));
                    let _ = super::super::ehframe::FdeRanges::from_elf(&e).len();
                }
            }
        }
    }

    /// An ELF64 LE file whose section `i + 1` is an `SHT_NOTE` section holding `areas[i]`.
    fn with_note_sections(areas: &[Vec<u8>]) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        let mut headers = vec![0u8; 64]; // the null section
        for a in areas {
            let mut h = [0u8; 64];
            h[4..8].copy_from_slice(&tailprof_elf::SHT_NOTE.to_le_bytes());
            h[24..32].copy_from_slice(&(f.len() as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(a.len() as u64).to_le_bytes());
            h[48..56].copy_from_slice(&4u64.to_le_bytes());
            headers.extend(h);
            f.extend(a);
        }
        let shoff = f.len() as u64;
        f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&((areas.len() + 1) as u16).to_le_bytes());
        f.extend(headers);
        f
    }

    fn note(kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = [4u32.to_le_bytes(), (desc.len() as u32).to_le_bytes(), kind.to_le_bytes()].concat();
        v.extend(b"GNU\0");
        v.extend(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn build_id_from_note_sections_within_a_total_budget() {
        const MAX_NOTES: u64 = tailprof_elf::MAX_NOTE_BYTES;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n");
        let id = note(tailprof_elf::NT_GNU_BUILD_ID, &[0xab; 20]);
        // Other notes first, then the id in a later section.
        std::fs::write(&p, with_note_sections(&[note(5, &[1; 8]), [note(1, &[2; 16]), id.clone()].concat()])).unwrap();
        assert_eq!(ElfFile::open(&p).unwrap().build_id(), Some(vec![0xab; 20]));
        // A section beyond the budget is skipped, a later small one still read...
        let big = note(1, &vec![0; MAX_NOTES as usize]);
        std::fs::write(&p, with_note_sections(&[big.clone(), id.clone()])).unwrap();
        assert_eq!(ElfFile::open(&p).unwrap().build_id(), Some(vec![0xab; 20]));
        // ...but the budget is for all note sections together: after 3/4 of it is
        // spent, another 3/4 is not read, whatever it holds.
        let filler = note(1, &vec![0; MAX_NOTES as usize * 3 / 4]);
        let late = [note(1, &vec![0; MAX_NOTES as usize * 3 / 4 - 64]), id.clone()].concat();
        assert!(late.len() as u64 <= MAX_NOTES);
        std::fs::write(&p, with_note_sections(&[filler, late])).unwrap();
        assert_eq!(ElfFile::open(&p).unwrap().build_id(), None);
        // The test executable's, as readelf prints it (when installed).
        let exe = std::env::current_exe().unwrap();
        if let Ok(o) = std::process::Command::new("readelf").arg("-n").arg(&exe).output() {
            let text = String::from_utf8_lossy(&o.stdout);
            if let Some(hex) = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")) {
                assert_eq!(super::super::build_id_hex(&ElfFile::open(&exe).unwrap().build_id().unwrap()), hex.trim());
            }
        }
    }

    #[test]
    fn build_id_without_section_headers_from_the_note_segment() {
        // As sstrip leaves a binary: e_shoff, e_shnum and e_shstrndx zeroed. The recorder
        // stores its id from the PT_NOTE segment; the same id must be found here, or
        // every sample of it is a "build-id mismatch".
        let exe = std::env::current_exe().unwrap();
        let Some(id) = ElfFile::open(&exe).unwrap().build_id() else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the test executable has no build-id");
            return;
        };
        let mut b = std::fs::read(&exe).unwrap();
        if &b[4..6] != b"\x02\x01" {
            return; // the edits below are for ELF64 little-endian
        }
        b[40..48].fill(0);
        b[60..64].fill(0);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stripped");
        std::fs::write(&p, &b).unwrap();
        let e = ElfFile::open(&p).unwrap();
        assert!(e.sections.is_empty());
        assert_eq!(e.build_id(), Some(id));
    }

    #[test]
    fn symlinks_and_fifos_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = std::env::current_exe().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_untrusted(&link).is_err());
        assert!(open_untrusted(dir.path()).is_err());
        let own = ElfFile::open(&target).unwrap();
        assert!(!own.segments.is_empty());
        assert!(own.section(".text").is_some());
    }
}
