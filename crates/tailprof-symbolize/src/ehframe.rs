//! Function ranges of a stripped binary, from its `.eh_frame` unwind table.
//!
//! A binary stripped of `.symtab` (Debian's `postgres`, most distro packages) still
//! carries `.eh_frame`: one FDE (frame description entry) per function, giving the
//! function's start address and length. An address no symbol covers is named after the
//! FDE that holds it, `fn_<start address in hex>` (the ELF virtual address, as `objdump
//! -d` and `nm` print it), so all samples in one unnamed function fold into one row
//! instead of one row per address.

use gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};

use super::elf::ElfFile;

/// At most this many FDEs are kept per binary (a 100 MB binary has ~200k).
const MAX_FDES: usize = 4 << 20;

/// Sorted, non-empty `[start, end)` function ranges.
#[derive(Debug, Default, Clone)]
pub struct FdeRanges {
    ranges: Vec<(u64, u64)>,
    /// Entries that could not be parsed (the walk stops at the first broken CIE/FDE
    /// chain; the ranges before it are kept).
    pub errors: usize,
}

impl FdeRanges {
    /// The ranges of `elf`'s `.eh_frame` (empty when it has none).
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
        Self::parse(&data, endian, &bases)
    }

    fn parse(data: &[u8], endian: RunTimeEndian, bases: &BaseAddresses) -> Self {
        let eh = EhFrame::new(data, endian);
        let mut out = FdeRanges::default();
        let mut entries = eh.entries(bases);
        loop {
            match entries.next() {
                Ok(None) => break,
                Ok(Some(CieOrFde::Cie(_))) => {}
                Ok(Some(CieOrFde::Fde(partial))) => match partial.parse(EhFrame::cie_from_offset) {
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
        out.ranges.sort_unstable();
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

    /// The range holding virtual address `vaddr` (the innermost one if ranges nest).
    pub fn find(&self, vaddr: u64) -> Option<(u64, u64)> {
        let i = self.ranges.partition_point(|&(s, _)| s <= vaddr);
        // Ranges rarely overlap; look back a little for one that still covers vaddr.
        self.ranges[..i].iter().rev().take(4).copied().find(|&(_, e)| vaddr < e)
    }
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
        let r = FdeRanges { ranges: vec![(0x100, 0x180), (0x180, 0x200), (0x300, 0x310)], errors: 0 };
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
}
