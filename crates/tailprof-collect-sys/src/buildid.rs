//! GNU build-ids (`NT_GNU_BUILD_ID` notes) of ELF files and of the running kernel.
//!
//! The recorder does not ask the kernel for build-ids in MMAP2 records (`attr.build_id`
//! breaks concurrent perf tools, see [`crate::attr`]), so it reads them here: once per
//! mapped file (keyed by path, device and inode), for mappings from MMAP/MMAP2 records
//! and from /proc at start, and for the kernel image (`/sys/kernel/notes`).
//!
//! Read by [`tailprof_elf::file_build_id`], the project's one build-id reader (the
//! symbolizer uses the same one, so a build-id stored here is the one it finds): it
//! `pread`s the ELF header, the program headers and the note segments (a few hundred
//! bytes, every size capped and every offset bounds-checked), and falls back to
//! `SHT_NOTE` sections when no `PT_NOTE` carries the id (separate debug files,
//! relocatable objects). Nothing is mapped: binaries are often hundreds of MB and this
//! runs in the middle of a recording.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

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
    let mut notes = Vec::new();
    File::open("/sys/kernel/notes").ok()?.take(tailprof_elf::MAX_NOTE_BYTES).read_to_end(&mut notes).ok()?;
    find_in_notes(&notes, cfg!(target_endian = "little"), 4)
}

/// PT_NOTE segments first (what the loader sees; all a file without section headers
/// has), then SHT_NOTE sections; bounds in [`tailprof_elf::Elf::build_id`].
fn from_file<R: tailprof_elf::ReadAt + ?Sized>(f: &R) -> Option<Vec<u8>> {
    tailprof_elf::file_build_id(f)
}

/// Find the `GNU` / NT_GNU_BUILD_ID note in a note area ([`tailprof_elf::gnu_build_id`]:
/// 1 to 64 bytes). Entries are `{u32 namesz, descsz, type; name; desc}` padded to `align`
/// (4, or 8 for 8-aligned note segments; see [`tailprof_elf::notes`]). Stops at the first
/// malformed entry.
pub fn find_in_notes(notes: &[u8], le: bool, align: u64) -> Option<Vec<u8>> {
    tailprof_elf::gnu_build_id(notes, !le, align).map(<[u8]>::to_vec)
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

    /// The build-id `readelf -n` prints for `path` (None without readelf or an id).
    fn readelf_build_id(path: &Path) -> Option<String> {
        let out = std::process::Command::new("readelf").arg("-n").arg(path).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
    }

    #[test]
    fn same_id_as_readelf() {
        let exe = std::env::current_exe().unwrap();
        let mut checked = 0;
        for p in [exe.as_path(), Path::new("/lib/x86_64-linux-gnu/libc.so.6"), Path::new("/usr/bin/ls")] {
            let Some(want) = readelf_build_id(p) else { continue };
            assert_eq!(read_build_id(p).unwrap().map(|id| tailprof_format::build_id_hex(&id)), Some(want), "{}", p.display());
            checked += 1;
        }
        if checked == 0 {
            tailprof_testkit::skip(tailprof_testkit::Need::Binutils, "no readelf or no file with a build-id");
        }
    }

    #[test]
    fn segments_first_then_sections_and_damaged_files_never_panic() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let Some(id) = from_file(&exe) else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the test executable has no build-id");
            return;
        };
        if &exe[4..6] != b"\x02\x01" {
            return; // the edits below are for ELF64 little-endian
        }
        let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
        // A section table past the end: the id still comes from the PT_NOTE segment.
        let mut no_sections = exe.clone();
        no_sections[40..48].copy_from_slice(&(exe.len() as u64 - 8).to_le_bytes());
        assert_eq!(from_file(&no_sections), Some(id.clone()));
        // No PT_NOTE segment: the id comes from the SHT_NOTE section.
        let mut no_segments = exe.clone();
        let (phoff, phentsize, phnum) = (u64_at(&exe, 32), u16_at(&exe, 54), u16_at(&exe, 56));
        for i in 0..phnum {
            let at = phoff + i * phentsize;
            if no_segments[at..at + 4] == 4u32.to_le_bytes() {
                no_segments[at..at + 4].copy_from_slice(&0x6000_0000u32.to_le_bytes());
            }
        }
        assert_eq!(from_file(&no_segments), Some(id.clone()));
        // Neither: no id.
        no_segments[40..48].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(from_file(&no_segments), None);
        // Truncated copies and flipped header bytes: an id or None, never a panic.
        for n in (0..4096.min(exe.len())).step_by(7) {
            let _ = from_file(&exe[..n]);
        }
        let mut flipped = exe.clone();
        for at in 0..64usize.max(phoff + phnum * phentsize).min(exe.len()) {
            flipped[at] ^= 0xff;
            let _ = from_file(&flipped);
            flipped[at] ^= 0xff;
        }
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
