//! SystemTap SDT (USDT) probes: the `.note.stapsdt` notes of an ELF file.
//!
//! Each probe site is one note, owner `stapsdt`, type [`NT_STAPSDT`]; its descriptor holds
//! three addresses of the file's word size (the probe's PC, the link-time address of the
//! `.stapsdt.base` section, the semaphore's address or 0), then three NUL-terminated
//! strings: provider, name, argument spec (`8@%rdi -4@-20(%rbp)`, decoded by the
//! recorder). When the file was prelinked, the actual address of `.stapsdt.base` differs
//! from the recorded one and the difference is added to the PC and the semaphore.
//!
//! Bounds: the note section is read once, at most [`MAX_STAPSDT_BYTES`]; at most
//! [`MAX_STAPSDT_PROBES`] sites are returned (more are counted in
//! [`StapsdtProbes::skipped`]); provider, name and argument strings longer than
//! [`MAX_STAPSDT_STRING`] bytes, or not UTF-8, make that note skipped and counted, as do
//! notes whose descriptor is too short. A note area that runs past its end stops the
//! walk (counted). Nothing is allocated by a size the file claims beyond the caps.

use crate::{notes, Elf, Error, ReadAt, Result, PT_LOAD, SHT_NOTE};

/// Note type of an SDT probe (owner `stapsdt`).
pub const NT_STAPSDT: u32 = 3;
/// Bytes of `.note.stapsdt` read at most (Debian's PostgreSQL has about 6 KiB).
pub const MAX_STAPSDT_BYTES: u64 = 4 << 20;
/// Probe sites returned at most.
pub const MAX_STAPSDT_PROBES: usize = 100_000;
/// Longest provider, name or argument string kept.
pub const MAX_STAPSDT_STRING: usize = 1024;

/// One probe site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StapsdtProbe {
    pub provider: String,
    pub name: String,
    /// The probe's address (prelink-adjusted virtual address in the file).
    pub pc: u64,
    /// The semaphore's address (adjusted), 0 when the probe has none.
    pub semaphore: u64,
    /// The argument spec as stored, e.g. `8@%rbx -4@-20(%rbp)`.
    pub args: String,
}

/// The probes of a file and what was skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StapsdtProbes {
    pub probes: Vec<StapsdtProbe>,
    /// Notes skipped: malformed, over a bound, or a note area cut short.
    pub skipped: u64,
}

/// The SDT probes of an ELF file; empty when it has no `.note.stapsdt` section. An error
/// when the section table cannot be read or the note section lies outside the file or
/// is larger than [`MAX_STAPSDT_BYTES`].
pub fn stapsdt_probes<R: ReadAt>(elf: &Elf<R>) -> Result<StapsdtProbes> {
    let Some((_, sec)) = elf.section_by_name(b".note.stapsdt")? else {
        return Ok(StapsdtProbes::default());
    };
    if sec.kind != SHT_NOTE {
        return Err(Error::Malformed(format!(".note.stapsdt has section type {} (not SHT_NOTE)", sec.kind)));
    }
    let area = elf.section_data(&sec, MAX_STAPSDT_BYTES)?;
    let base = elf.section_by_name(b".stapsdt.base")?.map(|(_, s)| s.addr);
    Ok(parse_notes(&area, elf.class().is64, elf.class().big_endian, sec.addralign, base))
}

/// Parses a `.note.stapsdt` area (see the module docs). `base` is the actual address of
/// `.stapsdt.base` (None: no such section, no adjustment).
pub fn parse_notes(area: &[u8], is64: bool, big_endian: bool, align: u64, base: Option<u64>) -> StapsdtProbes {
    let mut out = StapsdtProbes::default();
    let word = if is64 { 8 } else { 4 };
    let c = crate::Class { is64, big_endian };
    for n in notes(area, big_endian, align) {
        let Ok(n) = n else {
            out.skipped += 1;
            break;
        };
        if n.name != b"stapsdt\0" || n.kind != NT_STAPSDT {
            continue;
        }
        if out.probes.len() >= MAX_STAPSDT_PROBES {
            out.skipped += 1;
            continue;
        }
        match parse_desc(n.desc, c, word, base) {
            Some(p) => out.probes.push(p),
            None => out.skipped += 1,
        }
    }
    out
}

fn parse_desc(d: &[u8], c: crate::Class, word: usize, base: Option<u64>) -> Option<StapsdtProbe> {
    if d.len() < 3 * word {
        return None;
    }
    let pc = c.word(d, 0, 0);
    let recorded_base = c.word(d, word, word);
    let semaphore = c.word(d, 2 * word, 2 * word);
    let mut strings = d[3 * word..].splitn(4, |&b| b == 0);
    let mut next = || -> Option<String> {
        let s = strings.next()?;
        if s.len() > MAX_STAPSDT_STRING {
            return None;
        }
        std::str::from_utf8(s).ok().map(str::to_string)
    };
    let (provider, name, args) = (next()?, next()?, next()?);
    // The args string must have had its NUL: something (maybe empty) follows it.
    strings.next()?;
    if provider.is_empty() || name.is_empty() {
        return None;
    }
    let delta = base.map_or(0, |b| b.wrapping_sub(recorded_base));
    let adjust = |a: u64| {
        if word == 4 {
            (a.wrapping_add(delta)) & 0xffff_ffff
        } else {
            a.wrapping_add(delta)
        }
    };
    Some(StapsdtProbe { provider, name, pc: adjust(pc), semaphore: if semaphore == 0 { 0 } else { adjust(semaphore) }, args })
}

/// The file offset of virtual address `addr`: through the `PT_LOAD` segment whose file
/// bytes hold it; None when none does.
pub fn vaddr_to_offset<R: ReadAt>(elf: &Elf<R>, addr: u64) -> Result<Option<u64>> {
    for ph in elf.program_headers()? {
        let ph = ph?;
        if ph.kind != PT_LOAD || addr < ph.vaddr || addr - ph.vaddr >= ph.filesz {
            continue;
        }
        return Ok((addr - ph.vaddr).checked_add(ph.offset));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend((name.len() as u32).to_le_bytes());
        v.extend((desc.len() as u32).to_le_bytes());
        v.extend(kind.to_le_bytes());
        v.extend(name);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend(desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn desc(pc: u64, base: u64, sem: u64, strs: &[&str]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend(pc.to_le_bytes());
        d.extend(base.to_le_bytes());
        d.extend(sem.to_le_bytes());
        for s in strs {
            d.extend(s.as_bytes());
            d.push(0);
        }
        d
    }

    #[test]
    fn parses_probes_and_adjusts_for_prelink() {
        let mut area = note(b"stapsdt\0", NT_STAPSDT, &desc(0x1000, 0x2000, 0x3000, &["app", "req__start", "8@%rdi -4@4(%r12)"]));
        area.extend(note(b"GNU\0", 3, &[1; 20]));
        area.extend(note(b"stapsdt\0", NT_STAPSDT, &desc(0x1100, 0x2000, 0, &["app", "req__done", ""])));
        let p = parse_notes(&area, true, false, 4, Some(0x2000));
        assert_eq!(p.skipped, 0);
        assert_eq!(p.probes.len(), 2);
        assert_eq!(
            p.probes[0],
            StapsdtProbe {
                provider: "app".into(),
                name: "req__start".into(),
                pc: 0x1000,
                semaphore: 0x3000,
                args: "8@%rdi -4@4(%r12)".into()
            }
        );
        assert_eq!((p.probes[1].semaphore, p.probes[1].args.as_str()), (0, ""));
        // Prelinked: .stapsdt.base moved by 0x10000, so did the PC and the semaphore.
        let moved = parse_notes(&area, true, false, 4, Some(0x12000));
        assert_eq!((moved.probes[0].pc, moved.probes[0].semaphore), (0x11000, 0x13000));
        assert_eq!(moved.probes[1].semaphore, 0, "no semaphore stays none");
    }

    #[test]
    fn hostile_notes_are_skipped_never_a_panic() {
        let good = note(b"stapsdt\0", NT_STAPSDT, &desc(0x1000, 0, 0, &["p", "n", "8@%rdi"]));
        // Truncated anywhere: no panic, never a wrong probe.
        for cut in 0..good.len() {
            let p = parse_notes(&good[..cut], true, false, 4, None);
            assert!(p.probes.is_empty() || p.probes[0].args == "8@%rdi", "{cut}: {p:?}");
        }
        // Descriptor too short, strings missing their NUL, empty names, long strings.
        let short = note(b"stapsdt\0", NT_STAPSDT, &[0; 20]);
        let no_nul = note(b"stapsdt\0", NT_STAPSDT, &[&[0u8; 24][..], b"p\0n\0args"].concat());
        let empty = note(b"stapsdt\0", NT_STAPSDT, &desc(1, 0, 0, &["", "n", ""]));
        let long = "x".repeat(MAX_STAPSDT_STRING + 1);
        let huge = note(b"stapsdt\0", NT_STAPSDT, &desc(1, 0, 0, &["p", &long, ""]));
        let bad_utf8 = note(b"stapsdt\0", NT_STAPSDT, &[&[0u8; 24][..], b"p\0\xff\xfe\0\0"].concat());
        let area = [short, no_nul, empty, huge, bad_utf8, good.clone()].concat();
        let p = parse_notes(&area, true, false, 4, None);
        assert_eq!((p.probes.len(), p.skipped), (1, 5));
        // A size that claims more than the area: counted, the walk ends.
        let mut liar = good.clone();
        liar[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let p = parse_notes(&[good.clone(), liar, good.clone()].concat(), true, false, 4, None);
        assert_eq!((p.probes.len(), p.skipped), (1, 1));
        // Garbage.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let garbage: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = parse_notes(&garbage, true, false, 4, None);
        let _ = parse_notes(&garbage, false, true, 8, Some(u64::MAX));
    }

    #[test]
    fn many_probes_are_bounded() {
        let one = note(b"stapsdt\0", NT_STAPSDT, &desc(0x1000, 0, 0, &["p", "n", ""]));
        let area = one.repeat(MAX_STAPSDT_PROBES + 3);
        let p = parse_notes(&area, true, false, 4, None);
        assert_eq!((p.probes.len(), p.skipped), (MAX_STAPSDT_PROBES, 3));
    }
}
