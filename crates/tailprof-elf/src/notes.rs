//! Note areas and the GNU build-id: the one build-id reader of the project.

use crate::file::Chunked;
use crate::*;

/// One entry of a note area (`SHT_NOTE` section, `PT_NOTE` segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Note<'a> {
    /// The name as stored, `namesz` bytes with its NUL (`b"GNU\0"`).
    pub name: &'a [u8],
    pub kind: u32,
    pub desc: &'a [u8],
}

/// The notes of a note area already read (e.g. [`Elf::section_data`] of an `SHT_NOTE`
/// section, `/sys/kernel/notes`): entries `{u32 namesz, descsz, type; name; desc}`, the
/// desc starting and the next entry starting at a multiple of `align` from the area's
/// start (8 when the area's alignment is 8, as for `.note.gnu.property`, else 4). An entry
/// that does not fit the area is one `Err` item, after which the iterator ends; bytes
/// too few for an entry header at the end are ignored.
pub fn notes(area: &[u8], big_endian: bool, align: u64) -> Notes<'_> {
    Notes { area, class: Class { is64: false, big_endian }, align: if align == 8 { 8 } else { 4 }, at: 0 }
}

/// Notes of an area, in order ([`notes`]).
#[derive(Debug, Clone)]
pub struct Notes<'a> {
    area: &'a [u8],
    class: Class,
    align: usize,
    /// The next entry; past the end after an error.
    at: usize,
}

impl<'a> Iterator for Notes<'a> {
    type Item = Result<Note<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        let p = self.at;
        if p.checked_add(12).is_none_or(|end| end > self.area.len()) {
            return None;
        }
        let c = self.class;
        let (namesz, descsz, kind) = (c.u32(self.area, p) as usize, c.u32(self.area, p + 4) as usize, c.u32(self.area, p + 8));
        let a = self.align;
        let pad = |n: usize| n.checked_add(a - 1).map(|x| x & !(a - 1));
        let area = self.area;
        let slice = |at: usize, n: usize| area.get(at..at.checked_add(n)?);
        let entry = (|| {
            // offsets from the entry, which starts aligned: desc after the padded header
            // and name (with 8-byte alignment the 12-byte header is not padded alone)
            let name_at = p + 12;
            let desc_at = p.checked_add(pad(12usize.checked_add(namesz)?)?)?;
            let end = desc_at.checked_add(pad(descsz)?)?;
            Some((Note { name: slice(name_at, namesz)?, kind, desc: slice(desc_at, descsz)? }, end))
        })();
        match entry {
            Some((note, end)) => {
                self.at = end;
                Some(Ok(note))
            }
            None => {
                self.at = usize::MAX;
                Some(Err(Error::Malformed(format!("note at offset {p} (name {namesz} bytes, desc {descsz} bytes) runs past its area"))))
            }
        }
    }
}

/// The GNU build-id in a note area ([`notes`]): the desc of the first note named `GNU`
/// of type [`NT_GNU_BUILD_ID`] that is 1 to [`MAX_BUILD_ID`] bytes long; `None` when there
/// is none before the end or the first malformed entry. Nothing is allocated.
pub fn gnu_build_id(area: &[u8], big_endian: bool, align: u64) -> Option<&[u8]> {
    notes(area, big_endian, align)
        .map_while(Result::ok)
        .find(|n| n.kind == NT_GNU_BUILD_ID && n.name == b"GNU\0" && (1..=MAX_BUILD_ID).contains(&n.desc.len()))
        .map(|n| n.desc)
}

/// Program headers, and section headers, that [`Elf::build_id`] looks at (each, the first
/// ones in the file).
pub const MAX_NOTE_HEADERS: u64 = 4096;
/// Bytes of note areas [`Elf::build_id`] reads in all, however many note segments and
/// sections a file claims (real files have a few hundred bytes of notes). An area larger
/// than what is left is skipped, not read.
pub const MAX_NOTE_BYTES: u64 = 256 << 10;

/// The GNU build-id of an ELF file: [`Elf::build_id`] of [`Elf::parse_header`] (nothing but
/// the header is read up front, so a damaged or huge section table costs nothing).
/// `None` when it is not ELF or has no usable id. This is the one build-id reader of the
/// project: the recorder (`collect-sys::buildid`) and symbolization (`symbolize::elf`)
/// must agree on every file, or a sample is left unnamed as a "build-id mismatch".
pub fn file_build_id<R: ReadAt>(r: R) -> Option<Vec<u8>> {
    Elf::parse_header(r).ok()?.build_id()
}

impl<R: ReadAt> Elf<R> {
    /// The GNU build-id ([`gnu_build_id`]: a `GNU` note of type [`NT_GNU_BUILD_ID`], 1 to
    /// [`MAX_BUILD_ID`] bytes): from the `PT_NOTE` segments first (what the loader maps;
    /// present when the section headers are stripped), then from the `SHT_NOTE` sections
    /// (separate debug files, relocatable objects). Each area is parsed with its own
    /// alignment (`p_align`/`sh_addralign` 8: 8-byte entries, else 4).
    ///
    /// Bounds: the first [`MAX_NOTE_HEADERS`] program headers and section headers, the
    /// section headers streamed from the file (the same answer however this `Elf` was
    /// parsed, also from [`Elf::parse_header`]), at most [`MAX_NOTE_BYTES`] of note areas
    /// read in all, an area only when it lies within the file; nothing is allocated by a
    /// size the file claims beyond those caps. A read error or malformed table ends that
    /// part of the search, never the process.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let h = self.header;
        let c = h.class;
        let esz = c.section_header_size();
        let table_ok = h.shoff != 0 && usize::from(h.shentsize) >= esz;
        // Section 0 holds the real counts when they do not fit the header.
        let s0 = match self.sections.first() {
            Some(s0) => Some(*s0),
            None if table_ok && (h.shnum == 0 || h.phnum == PN_XNUM) => {
                let mut b = [0u8; 64];
                self.read_exact_at(&mut b[..esz], h.shoff).ok().map(|()| SectionHeader::parse(c, &b))
            }
            None => None,
        };
        let mut budget = MAX_NOTE_BYTES;
        let mut area: Vec<u8> = Vec::new();
        let mut look = |offset: u64, size: u64, align: u64| -> Option<Vec<u8>> {
            if size == 0 || offset.checked_add(size).is_none_or(|end| end > self.len) {
                return None;
            }
            budget = budget.checked_sub(size)?; // too large for what is left: skipped
            area.resize(size as usize, 0); // size <= MAX_NOTE_BYTES
            read_exact_at(&self.r, &mut area, offset).ok()?;
            gnu_build_id(&area, c.big_endian, align).map(<[u8]>::to_vec)
        };
        if let Ok(headers) = self.program_headers_after(s0.as_ref()) {
            for ph in headers.take(MAX_NOTE_HEADERS as usize) {
                let Ok(ph) = ph else { break };
                if ph.kind == PT_NOTE {
                    if let Some(id) = look(ph.offset, ph.filesz, ph.align) {
                        return Some(id);
                    }
                }
            }
        }
        if !table_ok {
            return None;
        }
        let count = if h.shnum == 0 { s0.map_or(0, |s| s.size) } else { u64::from(h.shnum) };
        let stride = u64::from(h.shentsize);
        if h.shoff.checked_add(count.saturating_mul(stride)).is_none_or(|end| end > self.len) {
            return None; // as Elf::parse: a table past the end is no table
        }
        let n = count.min(MAX_NOTE_HEADERS);
        let mut chunk = Chunked::new(h.shoff, stride as usize, n);
        for i in 0..n {
            let Ok(b) = chunk.entry(&self.r, i) else { break };
            let s = SectionHeader::parse(c, b);
            if s.kind == SHT_NOTE {
                if let Some(id) = look(s.offset, s.size, s.addralign) {
                    return Some(id);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn note(be: bool, name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let u = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut v = [u(name.len() as u32), u(desc.len() as u32), u(kind)].concat();
        v.extend(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn gnu_build_id_skips_other_notes_and_stops_at_damage() {
        for be in [false, true] {
            let mut area = note(be, b"GNU\0", 5, &[1; 8]); // a property note
            area.extend(note(be, b"Go\0\0", NT_GNU_BUILD_ID, &[2; 20])); // another owner
            area.extend(note(be, b"GNU\0", NT_GNU_BUILD_ID, &[])); // empty
            area.extend(note(be, b"GNU\0", NT_GNU_BUILD_ID, &[3; MAX_BUILD_ID + 1])); // too long
            let good = note(be, b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]);
            let mut with = area.clone();
            with.extend(&good);
            assert_eq!(gnu_build_id(&with, be, 4), Some(&[0xab; 20][..]));
            assert_eq!(gnu_build_id(&with, !be, 4), None, "wrong byte order: sizes are garbage");
            // Cut anywhere inside the id's note: no id, no panic.
            for cut in area.len()..with.len() - 1 {
                assert_eq!(gnu_build_id(&with[..cut], be, 4), None, "cut at {cut}");
            }
            // A malformed entry before it ends the search.
            let mut broken = note(be, b"X\0", 1, &[0; 4]);
            broken[4..8].copy_from_slice(&if be { u32::MAX.to_be_bytes() } else { u32::MAX.to_le_bytes() });
            broken.extend(&good);
            assert_eq!(gnu_build_id(&broken, be, 4), None);
        }
    }

    // --- build-ids of whole files (Elf::build_id) ------------------------------------------

    use crate::alloc_probe::biggest_alloc;

    /// A note with `align`-byte padding.
    fn note_aligned(be: bool, align: usize, name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let u = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut v = [u(name.len() as u32), u(desc.len() as u32), u(kind)].concat();
        v.extend(name);
        v.resize(v.len().next_multiple_of(align), 0);
        v.extend(desc);
        v.resize(v.len().next_multiple_of(align), 0);
        v
    }

    /// An ELF file of `class` whose note areas are `(area, align)`: `segments` as `PT_NOTE`
    /// program headers, `sections` as `SHT_NOTE` sections (after a null section).
    fn elf_with_notes(c: Class, segments: &[(Vec<u8>, u64)], sections: &[(Vec<u8>, u64)]) -> Vec<u8> {
        let put = |b: &mut Vec<u8>, at: usize, v: u64, n: usize| {
            if b.len() < at + n {
                b.resize(at + n, 0);
            }
            let bytes = if c.big_endian { v.to_be_bytes()[8 - n..].to_vec() } else { v.to_le_bytes()[..n].to_vec() };
            b[at..at + n].copy_from_slice(&bytes);
        };
        let (w, eh) = if c.is64 { (8, 64) } else { (4, 52) };
        let mut f = vec![0u8; eh];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = if c.is64 { 2 } else { 1 };
        f[5] = if c.big_endian { 2 } else { 1 };
        f[6] = 1;
        let offs = |f: &mut Vec<u8>, areas: &[(Vec<u8>, u64)]| -> Vec<u64> {
            areas
                .iter()
                .map(|(a, _)| {
                    f.resize(f.len().next_multiple_of(8), 0);
                    let at = f.len() as u64;
                    f.extend(a);
                    at
                })
                .collect()
        };
        let seg_at = offs(&mut f, segments);
        let sec_at = offs(&mut f, sections);
        f.resize(f.len().next_multiple_of(8), 0);
        let (phsz, shsz) = (c.program_header_size(), c.section_header_size());
        let phoff = f.len();
        let shoff = phoff + segments.len() * phsz;
        f.resize(shoff + (sections.len() + 1) * shsz, 0); // section 0 is the null section
                                                          // (first entry, entry size, where the type is, the type, where offset, size and
                                                          // alignment are, the areas, their offsets)
        let tables = [
            (phoff, phsz, 0, PT_NOTE, if c.is64 { [8, 32, 48] } else { [4, 16, 28] }, segments, &seg_at),
            (shoff + shsz, shsz, 4, SHT_NOTE, if c.is64 { [24, 32, 48] } else { [16, 20, 32] }, sections, &sec_at),
        ];
        for (first, size, kind_at, kind, fields, areas, at) in tables {
            for (i, (a, align)) in areas.iter().enumerate() {
                let p = first + i * size;
                put(&mut f, p + kind_at, u64::from(kind), 4);
                for (field, v) in fields.into_iter().zip([at[i], a.len() as u64, *align]) {
                    put(&mut f, p + field, v, w);
                }
            }
        }
        let h = if c.is64 { 52 } else { 40 };
        if !segments.is_empty() {
            put(&mut f, if c.is64 { 32 } else { 28 }, phoff as u64, w);
        }
        put(&mut f, if c.is64 { 40 } else { 32 }, shoff as u64, w);
        put(&mut f, h + 2, phsz as u64, 2);
        put(&mut f, h + 4, segments.len() as u64, 2);
        put(&mut f, h + 6, shsz as u64, 2);
        put(&mut f, h + 8, sections.len() as u64 + 1, 2);
        f
    }

    const CLASSES: [Class; 4] = [
        Class { is64: false, big_endian: false },
        Class { is64: false, big_endian: true },
        Class { is64: true, big_endian: false },
        Class { is64: true, big_endian: true },
    ];

    #[test]
    fn build_id_segments_first_then_sections_every_class_and_byte_order() {
        for c in CLASSES {
            let be = c.big_endian;
            let id = |b: u8| note_aligned(be, 4, b"GNU\0", NT_GNU_BUILD_ID, &[b; 20]);
            // an 8-aligned property segment (x86-64 .note.gnu.property) before the id's
            let prop = (note_aligned(be, 8, b"GNU\0", 5, &[1; 12]), 8);
            let both = elf_with_notes(c, &[prop.clone(), (id(0xaa), 4)], &[(id(0xbb), 4)]);
            assert_eq!(file_build_id(&both), Some(vec![0xaa; 20]), "{c:?}: the segment's");
            assert_eq!(Elf::parse(&both).unwrap().build_id(), Some(vec![0xaa; 20]), "{c:?}: parsed the same");
            let sections_only =
                elf_with_notes(c, std::slice::from_ref(&prop), &[(note_aligned(be, 4, b"GNU\0", 1, &[0; 4]), 4), (id(0xbb), 4)]);
            assert_eq!(file_build_id(&sections_only), Some(vec![0xbb; 20]), "{c:?}: the section's");
            // an 8-aligned area holding the id is read with 8-byte padding
            let name7 = note_aligned(be, 8, b"GNU\0", NT_GNU_BUILD_ID, &[0xcc; 20]);
            assert_eq!(file_build_id(elf_with_notes(c, &[(name7, 8)], &[])), Some(vec![0xcc; 20]), "{c:?}");
            assert_eq!(file_build_id(elf_with_notes(c, &[prop], &[])), None);
            // Truncated and flipped copies: an id or None, never a panic.
            for n in 0..both.len() {
                let _ = file_build_id(&both[..n]);
            }
            let mut m = both.clone();
            for at in 0..m.len() {
                for v in [0u8, 0x7f, 0xff] {
                    let old = std::mem::replace(&mut m[at], v);
                    let _ = file_build_id(&m);
                    m[at] = old;
                }
            }
        }
    }

    #[test]
    fn build_id_size_lies_are_none_without_big_allocations() {
        for c in CLASSES {
            let be = c.big_endian;
            let good = note_aligned(be, 4, b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]);
            let mut lie = good.clone();
            lie[4..8].copy_from_slice(&if be { 0xffff_fff0u32.to_be_bytes() } else { 0xffff_fff0u32.to_le_bytes() });
            // n_descsz far beyond the area, in the segment and in the section: None.
            let f = elf_with_notes(c, &[(lie.clone(), 4)], &[(lie.clone(), 4)]);
            let (id, biggest) = biggest_alloc(|| file_build_id(&f));
            assert_eq!(id, None, "{c:?}");
            assert!(biggest < 4096, "{c:?}: {biggest}");
            // n_descsz of 65 bytes (longer than any build-id) that fits: not an id.
            let long = note_aligned(be, 4, b"GNU\0", NT_GNU_BUILD_ID, &[1; MAX_BUILD_ID + 1]);
            assert_eq!(file_build_id(elf_with_notes(c, &[(long, 4)], &[])), None);
            // p_filesz / sh_size claiming far more than the file: skipped, nothing read.
            let mut f = elf_with_notes(c, &[(good.clone(), 4)], &[(good.clone(), 4)]);
            let phoff = c.word(&f, 28, 32) as usize;
            let shoff = c.word(&f, 32, 40) as usize + c.section_header_size();
            let huge = if c.is64 { u64::MAX - 16 } else { u64::from(u32::MAX) };
            let bytes = |v: u64| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let (pf, sz) = if c.is64 { (phoff + 32, shoff + 32) } else { (phoff + 16, shoff + 20) };
            let w = if c.is64 { 8 } else { 4 };
            let b = bytes(huge);
            let b = if be { &b[8 - w..] } else { &b[..w] };
            f[pf..pf + w].copy_from_slice(b);
            f[sz..sz + w].copy_from_slice(b);
            let (id, biggest) = biggest_alloc(|| file_build_id(&f));
            assert_eq!(id, None, "{c:?}");
            assert!(biggest < 4096, "{c:?}: {biggest}");
        }
    }

    #[test]
    fn build_id_note_bytes_are_bounded_in_all() {
        let c = Class { is64: true, big_endian: false };
        let id = (note_aligned(false, 4, b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]), 4);
        let filler = |n: usize| (note_aligned(false, 4, b"GNU\0", 1, &vec![0; n]), 4);
        // An area larger than the whole budget is skipped; a later small one is read.
        let f = elf_with_notes(c, &[filler(MAX_NOTE_BYTES as usize)], std::slice::from_ref(&id));
        let (got, biggest) = biggest_alloc(|| file_build_id(&f));
        assert_eq!(got, Some(vec![0xab; 20]));
        assert!(biggest < 64 << 10, "{biggest}");
        // The budget is for segments and sections together: after 3/4 of it, an area of
        // 3/4 is not read, whatever it holds.
        let late = [filler(MAX_NOTE_BYTES as usize * 3 / 4 - 64).0, id.0.clone()].concat();
        let f = elf_with_notes(c, &[filler(MAX_NOTE_BYTES as usize * 3 / 4)], &[(late.clone(), 4)]);
        assert_eq!(file_build_id(&f), None);
        // ... which alone is read.
        assert_eq!(file_build_id(elf_with_notes(c, &[], &[(late, 4)])), Some(vec![0xab; 20]));
        // Many segments naming the same area: read until the budget is spent, then no more.
        let small = filler(1000);
        let many: Vec<_> = std::iter::repeat_n(small, (MAX_NOTE_BYTES / 1000) as usize + 1).chain([id]).collect();
        assert_eq!(file_build_id(elf_with_notes(c, &many, &[])), None);
        assert_eq!(file_build_id(elf_with_notes(c, &many[many.len() - 20..], &[])), Some(vec![0xab; 20]));
    }

    /// The build-id `readelf -n` prints for `path` (None without readelf or an id).
    fn readelf_build_id(path: &std::path::Path) -> Option<Vec<u8>> {
        let out = std::process::Command::new("readelf").arg("-n").arg(path).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let hex = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))?;
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
    }

    #[test]
    fn build_id_of_a_gcc_binary_without_section_headers() {
        let dir = tempfile::tempdir().unwrap();
        let (src, bin) = (dir.path().join("p.c"), dir.path().join("p"));
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let built = std::process::Command::new("gcc").args(["-O1", "-Wl,--build-id", "-o"]).arg(&bin).arg(&src).status();
        if !built.is_ok_and(|s| s.success()) {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no gcc");
            return;
        }
        let f = File::open(&bin).unwrap();
        let id = file_build_id(&f).expect("gcc -Wl,--build-id writes a build-id");
        if let Some(want) = readelf_build_id(&bin) {
            assert_eq!(id, want);
        }
        let elf = Elf::parse(&f).unwrap();
        assert!(elf.sections().iter().any(|s| s.kind == SHT_NOTE));
        assert_eq!(elf.build_id(), Some(id.clone()));
        // As sstrip leaves it: no section headers (e_shoff, e_shnum, e_shstrndx zeroed).
        let mut b = std::fs::read(&bin).unwrap();
        let c = elf.class();
        let h = if c.is64 { 52 } else { 40 };
        let w = if c.is64 { 8 } else { 4 };
        let shoff = if c.is64 { 40 } else { 32 };
        b[shoff..shoff + w].fill(0);
        b[h + 8..h + 12].fill(0);
        let stripped = dir.path().join("stripped");
        std::fs::write(&stripped, &b).unwrap();
        let s = File::open(&stripped).unwrap();
        let parsed = Elf::parse(&s).unwrap();
        assert!(parsed.sections().is_empty());
        assert_eq!(parsed.build_id(), Some(id.clone()), "through the PT_NOTE segment");
        assert_eq!(file_build_id(&s), Some(id.clone()));
        // Section headers present, no PT_NOTE segment: through the section.
        let mut b = std::fs::read(&bin).unwrap();
        let phs: Vec<(usize, ProgramHeader)> = {
            let e = Elf::parse(&b).unwrap();
            let (phoff, phsz) = (e.header().phoff as usize, usize::from(e.header().phentsize));
            e.program_headers().unwrap().enumerate().map(|(i, p)| (phoff + i * phsz, p.unwrap())).collect()
        };
        for (at, p) in phs {
            if p.kind == PT_NOTE {
                let v = if c.big_endian { 0x6000_0000u32.to_be_bytes() } else { 0x6000_0000u32.to_le_bytes() };
                b[at..at + 4].copy_from_slice(&v);
            }
        }
        assert_eq!(file_build_id(&b), Some(id));
        // Neither: none.
        b[shoff..shoff + w].fill(0);
        assert_eq!(file_build_id(&b), None);
    }
}
