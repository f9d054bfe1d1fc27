//! Function ranges of a stripped binary, from its `.eh_frame` unwind table.
//!
//! A binary stripped of `.symtab` (Debian's `postgres`, most distro packages) still
//! carries `.eh_frame`: one FDE (frame description entry) per function, giving the
//! function's start address and length. An address no symbol covers is named after the
//! FDE that holds it, `fn_<start address in hex>` (the ELF virtual address, as `objdump
//! -d` and `nm` print it), so all samples in one unnamed function fold into one row
//! instead of one row per address.

use gimli::{
    BaseAddresses, CieOrFde, CommonInformationEntry, EhFrame, EhFrameHdr, EhFrameOffset, EndianSlice, RunTimeEndian, UnwindSection,
};

use super::elf::ElfFile;

/// At most this many FDEs are kept per binary (a 100 MB binary has ~200k).
const MAX_FDES: usize = 4 << 20;

type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// Sorted, non-empty `[start, end)` function ranges.
#[derive(Debug, Default, Clone)]
pub struct FdeRanges {
    ranges: Vec<(u64, u64)>,
    /// Entries that could not be parsed (the walk stops at the first broken CIE/FDE
    /// chain; the ranges before it are kept).
    pub errors: usize,
    /// Whether the ranges came from `.eh_frame_hdr`'s table (else from the walk).
    via_hdr: bool,
}

/// CIEs parsed once per offset (a binary has a handful; every FDE names one).
#[derive(Default)]
struct Cies<'a> {
    by_offset: rustc_hash::FxHashMap<usize, CommonInformationEntry<Slice<'a>>>,
}

impl<'a> Cies<'a> {
    fn get(
        &mut self,
        eh: &EhFrame<Slice<'a>>,
        bases: &BaseAddresses,
        off: EhFrameOffset<usize>,
    ) -> gimli::Result<CommonInformationEntry<Slice<'a>>> {
        if let Some(c) = self.by_offset.get(&off.0) {
            return Ok(c.clone());
        }
        let c = eh.cie_from_offset(bases, off)?;
        if self.by_offset.len() < 4096 {
            self.by_offset.insert(off.0, c.clone());
        }
        Ok(c)
    }
}

impl FdeRanges {
    /// The ranges of `elf`'s `.eh_frame` (empty when it has none): through
    /// `.eh_frame_hdr`'s sorted table when the binary has a usable one, else by walking
    /// every CIE and FDE.
    pub(crate) fn from_elf(elf: &ElfFile) -> Self {
        let Some(sec) = elf.section(".eh_frame") else { return Self::default() };
        let Some(data) = elf.section_data(".eh_frame") else { return Self::default() };
        let endian = if elf.big_endian() { RunTimeEndian::Big } else { RunTimeEndian::Little };
        let mut bases = BaseAddresses::default().set_eh_frame(sec.addr);
        if let Some(t) = elf.section(".text") {
            bases = bases.set_text(t.addr);
        }
        if let Some(g) = elf.section(".got") {
            bases = bases.set_got(g.addr);
        }
        let hdr = elf.section(".eh_frame_hdr").and_then(|h| Some((h.addr, elf.section_data(".eh_frame_hdr")?)));
        if let Some((addr, hdr)) = hdr {
            let hbases = bases.clone().set_eh_frame_hdr(addr);
            if let Some(r) = Self::from_hdr(&data, sec.addr, &hdr, endian, &hbases) {
                return r;
            }
        }
        Self::parse(&data, endian, &bases)
    }

    /// The ranges through `.eh_frame_hdr`'s table (`hdr`): its entries give every FDE's
    /// start, sorted, and where the FDE is, so only the FDEs are read (each CIE once)
    /// and nothing is sorted. `None` (the caller walks `.eh_frame` instead) when there
    /// is no table or anything in it disagrees: a pointer outside `.eh_frame`, an FDE
    /// that does not parse or starts elsewhere than its entry says, entries out of order.
    fn from_hdr(data: &[u8], eh_addr: u64, hdr: &[u8], endian: RunTimeEndian, bases: &BaseAddresses) -> Option<Self> {
        Self::from_hdr_table(data, eh_addr, hdr, endian, bases, true)
    }

    /// [`Self::from_hdr`], the table read here when `direct_table` and it has the usual
    /// encodings, else through gimli (tests compare the two).
    fn from_hdr_table(
        data: &[u8],
        eh_addr: u64,
        hdr: &[u8],
        endian: RunTimeEndian,
        bases: &BaseAddresses,
        direct_table: bool,
    ) -> Option<Self> {
        let eh = EhFrame::new(data, endian);
        let parsed = EhFrameHdr::new(hdr, endian).parse(bases, 8).ok()?;
        if parsed.eh_frame_ptr().direct().ok()? != eh_addr {
            return None;
        }
        let table = parsed.table()?;
        let mut it = table.iter(bases);
        let count = it.size_hint().0;
        if count > MAX_FDES {
            return None;
        }
        // Each entry takes at least 4 bytes of the section: bounds the reservation.
        let mut ranges = Vec::with_capacity(count.min(hdr.len() / 4));
        let mut cies = Cies::default();
        let mut encodings: Vec<(usize, u8)> = Vec::new();
        let mut last = 0u64;
        // The table as linkers write it (version 1, `.eh_frame` pointer PC-relative
        // sdata4, count udata4, entries `.eh_frame_hdr`-relative sdata4) is read here,
        // any other encoding through gimli.
        let hdr_addr = bases.eh_frame_hdr.data;
        let direct = match (hdr.get(..4), hdr_addr) {
            (Some([1, 0x1b, 0x03, 0x3b]), Some(a)) if direct_table => {
                let rows = hdr.get(12..)?.get(..count.checked_mul(8)?)?;
                let i32_at = move |b: &[u8]| -> u64 {
                    let b: [u8; 4] = b.try_into().unwrap_or_default();
                    let v = if matches!(endian, RunTimeEndian::Big) { i32::from_be_bytes(b) } else { i32::from_le_bytes(b) };
                    a.wrapping_add(v as u64)
                };
                Some(rows.chunks_exact(8).map(move |r| (i32_at(&r[..4]), i32_at(&r[4..]))))
            }
            _ => None,
        };
        let mut direct = direct;
        // Outer `None`: the table is broken (give up); inner `None`: its end.
        let mut next = || -> Option<Option<(u64, u64)>> {
            if let Some(d) = direct.as_mut() {
                return Some(d.next());
            }
            match it.next().ok()? {
                Some((s, f)) => Some(Some((s.direct().ok()?, f.direct().ok()?))),
                None => Some(None),
            }
        };
        while let Some((start, fde)) = next()? {
            let off = usize::try_from(fde.checked_sub(eh_addr)?).ok()?;
            // The common FDE header read here; anything unusual through gimli.
            let (begin, len) = match fde_header(data, endian, eh_addr, off, |cie| {
                if let Some(&(_, e)) = encodings.iter().find(|(o, _)| *o == cie) {
                    return Some(e);
                }
                let e = cies.get(&eh, bases, EhFrameOffset(cie)).ok()?.fde_address_encoding().map_or(0, |e| e.0);
                if encodings.len() < 64 {
                    encodings.push((cie, e));
                }
                Some(e)
            }) {
                Some(r) => r,
                None => {
                    let f = eh.fde_from_offset(bases, EhFrameOffset(off), |s, b, o| cies.get(s, b, o)).ok()?;
                    (f.initial_address(), f.len())
                }
            };
            if begin != start || start < last {
                return None;
            }
            last = start;
            if len > 0 {
                ranges.push((start, start.saturating_add(len)));
            }
        }
        // Same start twice (rare): the walk's order, by end too, without duplicates.
        if !ranges.is_sorted() {
            ranges.sort_unstable();
        }
        ranges.dedup();
        Some(FdeRanges { ranges, errors: 0, via_hdr: true })
    }

    /// The ranges by walking every CIE and FDE of `.eh_frame` (`data`).
    fn parse(data: &[u8], endian: RunTimeEndian, bases: &BaseAddresses) -> Self {
        let eh = EhFrame::new(data, endian);
        let mut out = FdeRanges::default();
        let mut cies = Cies::default();
        let mut entries = eh.entries(bases);
        loop {
            match entries.next() {
                Ok(None) => break,
                Ok(Some(CieOrFde::Cie(_))) => {}
                Ok(Some(CieOrFde::Fde(partial))) => match partial.parse(|s, b, o| cies.get(s, b, o)) {
                    Ok(fde) if fde.len() > 0 => {
                        if out.ranges.len() >= MAX_FDES {
                            break;
                        }
                        let start = fde.initial_address();
                        out.ranges.push((start, start.saturating_add(fde.len())));
                    }
                    Ok(_) => {}
                    Err(_) => out.errors += 1,
                },
                Err(_) => {
                    out.errors += 1;
                    break;
                }
            }
        }
        if !out.ranges.is_sorted() {
            out.ranges.sort_unstable();
        }
        out.ranges.dedup();
        out
    }

    /// Number of function ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether the ranges came from `.eh_frame_hdr`'s table (else from walking `.eh_frame`).
    pub fn via_eh_frame_hdr(&self) -> bool {
        self.via_hdr
    }

    /// The range holding virtual address `vaddr` (the innermost one if ranges nest).
    pub fn find(&self, vaddr: u64) -> Option<(u64, u64)> {
        let i = self.ranges.partition_point(|&(s, _)| s <= vaddr);
        // Ranges rarely overlap; look back a little for one that still covers vaddr.
        self.ranges[..i].iter().rev().take(4).copied().find(|&(_, e)| vaddr < e)
    }
}

/// (initial location, address range) of the FDE at offset `off` of `.eh_frame` (`data`,
/// at address `eh_addr`), read directly when it has the common layout: 32-bit length,
/// its CIE's FDE pointer encoding (`encoding(cie offset)`, `DW_EH_PE_*`) absolute or
/// PC-relative with a fixed-size format. `None` for anything else (64-bit entries, LEB128
/// or other relative encodings, a CIE in its place, bytes past the entry): gimli reads it.
fn fde_header(
    data: &[u8],
    endian: RunTimeEndian,
    eh_addr: u64,
    off: usize,
    encoding: impl FnOnce(usize) -> Option<u8>,
) -> Option<(u64, u64)> {
    let big = matches!(endian, RunTimeEndian::Big);
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    };
    let len = u32_at(off)?;
    if len == 0 || len >= 0xffff_fff0 {
        return None;
    }
    let end = off.checked_add(4)?.checked_add(len as usize)?;
    let id_at = off + 4;
    let id = u32_at(id_at)? as usize;
    if id == 0 || end > data.len() {
        return None; // a CIE, or cut short
    }
    let enc = encoding(id_at.checked_sub(id)?)?;
    let size = match enc & 0x0f {
        0x00 | 0x04 | 0x0c => 8,
        0x02 | 0x0a => 2,
        0x03 | 0x0b => 4,
        _ => return None,
    };
    let value = |at: usize| -> Option<u64> {
        let b = data.get(at..at.checked_add(size)?.min(end).max(at))?;
        if b.len() != size {
            return None;
        }
        let mut v = [0u8; 8];
        let raw = if big {
            v[8 - size..].copy_from_slice(b);
            u64::from_be_bytes(v)
        } else {
            v[..size].copy_from_slice(b);
            u64::from_le_bytes(v)
        };
        // Signed formats are sign-extended, as gimli does.
        Some(match enc & 0x0f {
            0x0a => raw as u16 as i16 as u64,
            0x0b => raw as u32 as i32 as u64,
            _ => raw,
        })
    };
    let begin_at = id_at + 4;
    let begin = value(begin_at)?;
    let begin = match enc & 0xf0 {
        0x00 => begin,
        0x10 => eh_addr.wrapping_add(begin_at as u64).wrapping_add(begin),
        _ => return None,
    };
    Some((begin, value(begin_at + size)?))
}

/// The name of the function range starting at `start`.
pub fn range_name(start: u64) -> String {
    format!("fn_{start:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_range_or_none() {
        let r = FdeRanges { ranges: vec![(0x100, 0x180), (0x180, 0x200), (0x300, 0x310)], ..Default::default() };
        assert_eq!(r.find(0x100), Some((0x100, 0x180)));
        assert_eq!(r.find(0x17f), Some((0x100, 0x180)));
        assert_eq!(r.find(0x180), Some((0x180, 0x200)));
        assert_eq!(r.find(0x250), None);
        assert_eq!(r.find(0xff), None);
        assert_eq!(r.find(0x310), None);
        assert_eq!(range_name(0x4616a0), "fn_4616a0");
    }

    #[test]
    fn own_test_binary_has_fde_ranges_and_garbage_is_harmless() {
        let exe = std::env::current_exe().unwrap();
        let elf = ElfFile::open(&exe).unwrap();
        let r = FdeRanges::from_elf(&elf);
        assert!(r.len() > 100, "{}", r.len());
        // Random bytes: no panic, some error or nothing.
        let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let _ = FdeRanges::parse(&junk, RunTimeEndian::Little, &BaseAddresses::default());
    }

    #[test]
    fn fde_header_reads_the_common_layout_and_leaves_the_rest_to_gimli() {
        // A CIE stand-in at 0, an FDE at 0x20: length 16, CIE pointer 0x24 (back to 0),
        // pc_begin -0x10 (PC-relative sdata4), range 0x40, no augmentation.
        let mut d = vec![0u8; 0x20];
        d.extend_from_slice(&16u32.to_le_bytes());
        d.extend_from_slice(&0x24u32.to_le_bytes());
        d.extend_from_slice(&(-0x10i32).to_le_bytes());
        d.extend_from_slice(&0x40u32.to_le_bytes());
        d.extend_from_slice(&[0, 0, 0, 0]);
        let le = RunTimeEndian::Little;
        assert_eq!(fde_header(&d, le, 0x1000, 0x20, |c| (c == 0).then_some(0x1b)), Some((0x1000 + 0x28 - 0x10, 0x40)));
        // Absolute udata8 would need 16 bytes: past the entry.
        assert_eq!(fde_header(&d, le, 0x1000, 0x20, |_| Some(0x04)), None);
        // LEB128, data-relative, indirect: gimli's job.
        for enc in [0x01, 0x3b, 0x9b] {
            assert_eq!(fde_header(&d, le, 0x1000, 0x20, |_| Some(enc)), None, "{enc:#x}");
        }
        // A CIE (id 0), a 64-bit entry, cut short, out of bounds: none.
        let mut cie = d.clone();
        cie[0x24..0x28].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(fde_header(&cie, le, 0x1000, 0x20, |_| Some(0x1b)), None);
        let mut wide = d.clone();
        wide[0x20..0x24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(fde_header(&wide, le, 0x1000, 0x20, |_| Some(0x1b)), None);
        assert_eq!(fde_header(&d[..0x30], le, 0x1000, 0x20, |_| Some(0x1b)), None);
        assert_eq!(fde_header(&d, le, 0x1000, usize::MAX - 2, |_| Some(0x1b)), None);
    }

    /// (`.eh_frame` bytes and address, `.eh_frame_hdr` bytes and address, bases, endian)
    /// of an ELF file, for comparing the two paths.
    struct Sections {
        eh: Vec<u8>,
        eh_addr: u64,
        hdr: Vec<u8>,
        bases: BaseAddresses,
        endian: RunTimeEndian,
    }

    fn sections(path: &std::path::Path) -> Option<Sections> {
        let elf = ElfFile::open(path).ok()?;
        let eh_addr = elf.section(".eh_frame")?.addr;
        let hdr_addr = elf.section(".eh_frame_hdr")?.addr;
        let mut bases = BaseAddresses::default().set_eh_frame(eh_addr).set_eh_frame_hdr(hdr_addr);
        if let Some(t) = elf.section(".text") {
            bases = bases.set_text(t.addr);
        }
        if let Some(g) = elf.section(".got") {
            bases = bases.set_got(g.addr);
        }
        let endian = if elf.big_endian() { RunTimeEndian::Big } else { RunTimeEndian::Little };
        Some(Sections { eh: elf.section_data(".eh_frame")?, eh_addr, hdr: elf.section_data(".eh_frame_hdr")?, bases, endian })
    }

    /// Real binaries: the `.eh_frame_hdr` table gives exactly the walk's ranges.
    #[test]
    fn eh_frame_hdr_agrees_with_the_walk_on_real_binaries() {
        let mut checked = 0;
        let candidates = [
            "/usr/lib/postgresql/15/bin/postgres",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/aarch64-linux-gnu/libc.so.6",
            "/bin/true",
        ];
        let exe = std::env::current_exe().unwrap();
        for p in candidates.iter().map(std::path::Path::new).chain([exe.as_path()]) {
            let Some(s) = sections(p) else { continue };
            let walk = FdeRanges::parse(&s.eh, s.endian, &s.bases);
            let hdr = FdeRanges::from_hdr(&s.eh, s.eh_addr, &s.hdr, s.endian, &s.bases).expect("a usable table");
            assert!(hdr.via_eh_frame_hdr() && !walk.via_eh_frame_hdr());
            assert_eq!(walk.errors, 0, "{}", p.display());
            assert!(walk.len() > 10, "{}: {}", p.display(), walk.len());
            assert_eq!(hdr.ranges, walk.ranges, "{}", p.display());
            let through_gimli = FdeRanges::from_hdr_table(&s.eh, s.eh_addr, &s.hdr, s.endian, &s.bases, false).unwrap();
            assert_eq!(through_gimli.ranges, walk.ranges, "{}", p.display());
            // from_elf takes the table.
            let e = FdeRanges::from_elf(&ElfFile::open(p).unwrap());
            assert!(e.via_hdr);
            assert_eq!(e.ranges, walk.ranges);
            checked += 1;
        }
        assert!(checked >= 1, "not even the test binary has .eh_frame_hdr");
    }

    /// A broken `.eh_frame_hdr` never panics; it falls back to the walk or (a mutation
    /// that still describes real FDEs, such as a smaller count) gives only real ranges.
    #[test]
    fn malformed_eh_frame_hdr_falls_back_to_the_walk() {
        // A small binary (each mutation parses the table), else the test binary.
        let exe = std::env::current_exe().unwrap();
        let Some(s) = sections(std::path::Path::new("/bin/true")).or_else(|| sections(&exe)) else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "neither /bin/true nor the test binary has .eh_frame_hdr");
            return;
        };
        let walk = FdeRanges::parse(&s.eh, s.endian, &s.bases);
        let via =
            |hdr: &[u8]| -> FdeRanges { FdeRanges::from_hdr(&s.eh, s.eh_addr, hdr, s.endian, &s.bases).unwrap_or_else(|| walk.clone()) };
        let fell_back = |hdr: &[u8]| FdeRanges::from_hdr(&s.eh, s.eh_addr, hdr, s.endian, &s.bases).is_none();
        // Another version, no table, the wrong .eh_frame, cut short, empty.
        let mut m = s.hdr.clone();
        m[0] = 2;
        assert!(fell_back(&m));
        let mut m = s.hdr.clone();
        m[2] = 0xff; // fde_count omitted: no table
        assert!(fell_back(&m));
        let mut m = s.hdr.clone();
        m[4] ^= 0x10; // eh_frame_ptr
        assert!(fell_back(&m));
        assert!(fell_back(&s.hdr[..s.hdr.len() - 3]));
        assert!(fell_back(&[]));
        // Two entries swapped: out of order.
        if s.hdr.len() >= 12 + 16 && s.hdr[3] & 0x0f == 0x0b {
            let mut m = s.hdr.clone();
            let (a, b) = (m[12..20].to_vec(), m[20..28].to_vec());
            m[12..20].copy_from_slice(&b);
            m[20..28].copy_from_slice(&a);
            assert!(fell_back(&m));
        }
        // Every header byte and a sample of table bytes set to extreme values.
        let spots = (0..12.min(s.hdr.len())).chain((12..s.hdr.len()).step_by((s.hdr.len() / 40).max(1)));
        for at in spots {
            for v in [0u8, 0x7f, 0xff] {
                let mut m = s.hdr.clone();
                m[at] = v;
                let r = via(&m);
                assert!(r.ranges.iter().all(|x| walk.ranges.binary_search(x).is_ok()), "byte {at} = {v}");
            }
        }
    }
}
