//! One mapped file's unwind data: opening the file, reading its unwind sections, the
//! cache shared by every process that maps it, and the framehop module of a mapping.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use tailprof_elf::Elf;
use tailprof_format::addrspace;

use crate::Limits;

/// A mapping of a process, as the one address-space model keeps it
/// ([`tailprof_format::addrspace`]): start, end, file offset, path, build-id (a different
/// file at the path, e.g. a rebuilt binary when importing an old recording, is not used)
/// and the file's `(st_dev, st_ino)` when the recorder knows it.
pub type Mapping = addrspace::Mapping<()>;

/// Opens the file behind a mapping (the recorder: safely, from the target's view; import:
/// on the host, through [`tailprof_elf::open::open_untrusted`]).
pub trait FileOpener {
    fn open(&mut self, pid: u32, m: &Mapping) -> io::Result<File>;
}

impl<F: FnMut(u32, &Mapping) -> io::Result<File>> FileOpener for F {
    fn open(&mut self, pid: u32, m: &Mapping) -> io::Result<File> {
        self(pid, m)
    }
}

/// The host's file at a mapping's path, opened as an untrusted path must be
/// ([`tailprof_elf::open`]), and the mapped file itself when its device and inode are
/// known (`import`'s opener).
pub fn open_host_file(_pid: u32, m: &Mapping) -> io::Result<File> {
    let path = std::path::Path::new(&*m.path);
    match m.file {
        Some((dev, ino)) => tailprof_elf::open::open_untrusted_as(path, dev, ino),
        None => tailprof_elf::open::open_untrusted(path),
    }
}

/// Shared, immutable section bytes (cheap to clone into every process's module).
#[derive(Clone, Debug, Default)]
pub struct Bytes(pub(crate) Arc<Vec<u8>>);

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}
/// What one file contributes: its unwind sections and where its code segments are.
#[derive(Debug)]
pub(crate) struct ModuleData {
    pub(crate) sections: ExplicitModuleSectionInfo<Bytes>,
    /// Executable PT_LOAD segments: (p_offset, p_vaddr, p_filesz).
    pub(crate) exec_segments: Vec<(u64, u64, u64)>,
    pub(crate) has_cfi: bool,
    /// ELF entry point (svma), 0 if none.
    pub(crate) entry: u64,
    pub(crate) bytes: usize,
}

/// Key of a file in the [`ModuleCache`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum FileKey {
    DevIno(u64, u64),
    Path(Arc<str>, Option<Arc<[u8]>>),
}

/// Files read so far, shared by all processes; bounded by [`Limits::max_cache_bytes`]
/// (the least recently used files are dropped; processes that still use them keep their
/// copy until they exit).
#[derive(Debug, Default)]
pub struct ModuleCache {
    pub(crate) files: HashMap<FileKey, (Option<Arc<ModuleData>>, u64)>,
    pub(crate) bytes: usize,
    pub(crate) tick: u64,
}

impl ModuleCache {
    pub(crate) fn get(&mut self, key: &FileKey) -> Option<Option<Arc<ModuleData>>> {
        self.tick += 1;
        let t = self.tick;
        self.files.get_mut(key).map(|e| {
            e.1 = t;
            e.0.clone()
        })
    }

    pub(crate) fn insert(&mut self, key: FileKey, data: Option<Arc<ModuleData>>, limit: usize) {
        self.tick += 1;
        let add = data.as_ref().map_or(0, |d| d.bytes);
        while self.bytes + add > limit && !self.files.is_empty() {
            let Some(oldest) = self.files.iter().min_by_key(|e| e.1 .1).map(|e| e.0.clone()) else { break };
            if let Some((Some(d), _)) = self.files.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(d.bytes);
            }
        }
        self.bytes += add;
        self.files.insert(key, (data, self.tick));
    }

    /// Bytes of section data cached.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
/// The framehop module for mapping `m` of file `d` and the mapping's bias (avma - svma),
/// or `None` if no executable segment of the file contains the mapping's offset.
pub(crate) fn module_for(m: &Mapping, d: &ModuleData) -> Option<(Module<Bytes>, u64)> {
    let page = |x: u64| x & !0xfff;
    let &(off, vaddr, _) = d.exec_segments.iter().find(|&&(off, _, filesz)| {
        let (lo, hi) = (page(off), off.saturating_add(filesz));
        (lo..hi.max(lo + 1)).contains(&m.pgoff)
    })?;
    // svma of the mapping's first byte; bias = avma - svma.
    let svma = vaddr.wrapping_sub(off).wrapping_add(m.pgoff);
    let bias = m.start.wrapping_sub(svma);
    Some((Module::new(m.path.to_string(), m.start..m.end, bias, d.sections.clone()), bias))
}

/// Read the ELF headers and unwind sections of `f`, within `limits`: headers through the
/// one reader of untrusted ELF files (`tailprof-elf`: `pread` only, every size checked
/// against the file), each unwind section's bytes straight into its final buffer (range
/// checked against the file). 64-bit files only (the unwinder's registers are 64-bit).
pub(crate) fn read_module(f: File, limits: &Limits, build_id: Option<&[u8]>) -> io::Result<ModuleData> {
    let bad = |e: tailprof_elf::Error| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let elf = Elf::parse(&f).map_err(bad)?;
    if !elf.class().is64 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a 64-bit ELF file"));
    }
    if let Some(want) = build_id.filter(|b| !b.is_empty()) {
        // The project's one build-id reader (the recorder's and the symbolizer's):
        // segments first, then sections, the same bounds.
        if tailprof_elf::file_build_id(&f).as_deref() != Some(want) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the file's build-id differs from the recorded one"));
        }
    }
    let mut exec_segments = Vec::new();
    for ph in elf.program_headers().map_err(bad)? {
        let ph = ph.map_err(bad)?;
        if ph.kind == tailprof_elf::PT_LOAD && ph.flags & tailprof_elf::PF_X != 0 {
            exec_segments.push((ph.offset, ph.vaddr, ph.filesz));
        }
    }
    let range = |name: &str| -> Option<Range<u64>> {
        let (_, s) = elf.section_by_name(name.as_bytes()).ok().flatten()?;
        Some(s.addr..s.addr.saturating_add(s.size))
    };
    let mut bytes = 0usize;
    let mut section = |name: &str, max: u64| -> Option<(Range<u64>, Bytes)> {
        let (_, s) = elf.section_by_name(name.as_bytes()).ok().flatten()?;
        if !s.has_data() {
            return None;
        }
        if s.size > max || s.offset.checked_add(s.size).is_none_or(|e| e > elf.file_len()) {
            return None;
        }
        let data = read_exact_at(&f, s.offset, usize::try_from(s.size).ok()?).ok()?;
        bytes += data.len();
        Some((s.addr..s.addr.saturating_add(s.size), Bytes(Arc::new(data))))
    };
    let eh_frame = section(".eh_frame", limits.max_section);
    let eh_frame_hdr = section(".eh_frame_hdr", limits.max_section);
    let debug_frame = section(".debug_frame", limits.max_section);
    let has_cfi = eh_frame.is_some() || debug_frame.is_some();
    // `.text`: its address range only (the base of DW_EH_PE_textrel pointers). Its bytes
    // are not read: framehop analyses instructions only in Mach-O (`__unwind_info`) and PE
    // modules (its `macho`/`pe` features, not enabled here); `.eh_frame` covers prologues
    // and epilogues. Reading them was most of attaching to PostgreSQL (5.4 MB `.text`).
    let sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: eh_frame.as_ref().map(|e| e.0.clone()),
        eh_frame: eh_frame.map(|e| e.1),
        eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|e| e.0.clone()),
        eh_frame_hdr: eh_frame_hdr.map(|e| e.1),
        debug_frame: debug_frame.map(|e| e.1),
        ..Default::default()
    };
    Ok(ModuleData { sections, exec_segments, has_cfi, entry: elf.header().entry, bytes })
}

/// `len` bytes of `f` from `off` into a new buffer (not zeroed first: `read_to_end` reads
/// into the spare capacity). A short file is an error. The range was checked against the
/// file by the caller.
fn read_exact_at(mut f: &File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    f.seek(SeekFrom::Start(off))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "section too large"))?;
    f.take(len as u64).read_to_end(&mut v)?;
    if v.len() != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than its section headers say"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::mmap;
    use crate::{Limits, Unwinder, UserRegs};
    use tailprof_format::{Frame, StackStatus};

    /// Garbage, truncated and non-regular files as mapped "binaries": no panic, the stack
    /// keeps its leaf and says there was no unwind information; the cache stays bounded.
    #[test]
    fn hostile_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("tailprof-unwind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage");
        std::fs::write(&garbage, vec![0x7f; 4096]).unwrap();
        let truncated = dir.join("truncated");
        let exe = std::fs::read("/proc/self/exe").unwrap();
        std::fs::write(&truncated, &exe[..300.min(exe.len())]).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/proc/self/exe", &link).unwrap();
        let limits = Limits { max_cache_bytes: 1 << 20, ..Limits::default() };
        let mut u = Unwinder::new(Box::new(open_host_file), limits);
        for (i, p) in [&garbage, &truncated, &link, &dir].iter().enumerate() {
            let base = 0x10000 * (i as u64 + 1);
            u.observe(&mmap(7, base, 0x1000, 0, p.to_str().unwrap(), None), None);
            let mut out = Vec::new();
            let regs = UserRegs { ip: base + 0x10, sp: 0x7000, fp: 0, lr: 0 };
            let st = u.unwind(7, &regs, &[0u8; 64], &mut out);
            assert_eq!(out.first(), Some(&Frame::user(base + 0x10)), "{}", p.display());
            assert_ne!(st, StackStatus::Complete, "{}: {st:?}", p.display());
        }
        assert_eq!(u.stats().files_read, 0, "no hostile file may be accepted");
        assert!(u.module_cache().bytes() <= 1 << 20);
        // A build-id that does not match refuses even a good file, which loads without one.
        let exe = std::env::current_exe().unwrap();
        let own = tailprof_elf::file_build_id(File::open(&exe).unwrap());
        for (id, read) in [(None, 1), (own, 1), (Some(vec![1u8, 2, 3]), 0)] {
            let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
            u.observe(&mmap(8, 0x1000, 0x1000, 0x1000, exe.to_str().unwrap(), id), None);
            let mut out = Vec::new();
            u.unwind(8, &UserRegs { ip: 0x1010, sp: 0x7000, fp: 0, lr: 0 }, &[0u8; 64], &mut out);
            assert_eq!((u.stats().files_read, u.stats().files_failed), (read, 1 - read));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
