//! Find one symbol's runtime address in a running process (for `-p PID` marker attach).
//!
//! We need one symbol (`tailprof_control`) from each mapped executable/DSO of the target,
//! so nothing is mapped or read whole: [`tailprof_elf`] (the one bounded ELF reader)
//! `pread`s the ELF header and section headers, looks the name up through `.gnu.hash`
//! (a few small reads), else streams the symbol tables in fixed-size chunks with names
//! read through a window. ELF64 little-endian only (x86-64, aarch64); anything else is
//! "not found".

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use tailprof_elf::{Elf, ReadAt, SectionHeader, SymbolTable, PT_LOAD, SHT_DYNSYM, SHT_GNU_HASH, SHT_SYMTAB};

use crate::procfs::{parse_maps_line, MapsEntry};

/// Longest hash chain followed.
const MAX_CHAIN: usize = 1 << 16;
/// Most section headers read from one file.
const MAX_HEADERS: usize = 4096;
/// Most places one name may stand in a string table (more: the table is not searched).
const MAX_NAME_COPIES: usize = 1 << 16;
/// Symbol tables of one kind (`.symtab`, `.dynsym`) searched at most per file.
const MAX_TABLES_OF_A_KIND: usize = 1;
/// Most distinct files of one process searched for the symbol.
pub(crate) const MAX_FILES: usize = 1024;

thread_local! {
    /// Symbol file offsets by (device, inode, size, ctime, name): `-a` sees libc in every
    /// process.
    #[allow(clippy::type_complexity)]
    static OFFSETS: std::cell::RefCell<std::collections::HashMap<(u64, u64, u64, i64, i64, String, bool), Option<u64>>> =
        Default::default();
}

/// The file offset of the defined symbol `name` in the ELF file `f`, from `.dynsym` or
/// `.symtab`, converted through the PT_LOAD segment that holds it. `None` when the file is
/// not ELF64-LE, has no such defined symbol, or the symbol is not backed by file bytes.
pub fn symbol_file_offset(f: &File, name: &str) -> Option<u64> {
    symbol_file_offset_in(f, name, true)
}

/// Whether the ELF file `f` defines `name` (file-backed): `.dynsym`, and `.symtab` too
/// when `symtab` (executables; libraries export in `.dynsym`).
pub fn file_defines(f: &File, name: &str, symtab: bool) -> bool {
    symbol_file_offset_in(f, name, symtab).is_some()
}

/// A file whose reads fail once `stop` is set: a scan in progress on the marker
/// follower's worker ends at its next read when the recording stops (issue 19, finding 3).
struct Stoppable<'a> {
    f: &'a File,
    stop: &'a AtomicBool,
}

impl ReadAt for Stoppable<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the recording stops"));
        }
        self.f.read_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        self.f.size()
    }
    fn allocated(&self) -> Option<u64> {
        self.f.allocated()
    }
}

/// [`file_defines`], given up (`None`) as soon as `stop` is set.
pub fn file_defines_until(f: &File, name: &str, symtab: bool, stop: &AtomicBool) -> Option<bool> {
    let found = symbol_file_offset_in(Stoppable { f, stop }, name, symtab).is_some();
    (!stop.load(Ordering::Relaxed)).then_some(found)
}

/// GNU hash of a symbol name (`.gnu.hash`).
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

/// Look `name` up through the `.gnu.hash` section `hash` of the dynamic symbol table
/// `dynsym`: a few small reads instead of the whole table (big shared libraries export
/// hundreds of thousands of symbols). `Some(None)`: looked up, not there; `None`: the
/// section is unusable (the caller scans instead).
fn gnu_hash_lookup<R: ReadAt>(elf: &Elf<R>, hash: &SectionHeader, dynsym: &SymbolTable, name: &[u8]) -> Option<Option<(u16, u64)>> {
    let c = elf.class();
    let u32_at = |at: u64| -> Option<u32> {
        let mut b = [0u8; 4];
        elf.read_exact_at(&mut b, hash.offset.checked_add(at)?).ok()?;
        Some(c.u32(&b, 0))
    };
    let (nbuckets, symoffset, bloom_size) = (u64::from(u32_at(0)?), u64::from(u32_at(4)?), u64::from(u32_at(8)?));
    let bloom_word = if c.is64 { 8 } else { 4 };
    let buckets_off = 16u64.checked_add(bloom_size.checked_mul(bloom_word)?)?;
    let chain_off = buckets_off.checked_add(nbuckets.checked_mul(4)?)?;
    if nbuckets == 0 || chain_off > hash.size {
        return None;
    }
    let hv = gnu_hash(name);
    let first = u64::from(u32_at(buckets_off + (u64::from(hv) % nbuckets) * 4)?);
    if first < symoffset {
        return Some(None);
    }
    let mut strs = elf.strings(dynsym);
    for idx in first..first.saturating_add(MAX_CHAIN as u64) {
        let c_at = chain_off.checked_add((idx - symoffset).checked_mul(4)?)?;
        if c_at.saturating_add(4) > hash.size {
            return None;
        }
        let chain = u32_at(c_at)?;
        if chain | 1 == hv | 1 {
            let s = elf.symbol(dynsym, idx).ok()?;
            if strs.get(s.name.into()).ok()? == Some(name) {
                return Some(Some((s.shndx, s.value)));
            }
        }
        if chain & 1 == 1 {
            return Some(None);
        }
    }
    None
}

/// The value of the first defined symbol `name` in the symbol tables of type `kind`
/// (every such section): the offsets of `name` in the string table first (one pass over
/// it), then the symbols streamed and matched by name offset (one pass; a read per symbol
/// would cost a `pread` each, the names are not in the symbols' order).
/// Only the first [`MAX_TABLES_OF_A_KIND`] tables of the kind are searched (the gABI allows
/// one; issue 19 finding 3: 64 declared tables made one scan 64 times as long), each at
/// most `tailprof_elf::MAX_TABLE_BYTES` and really stored in the file
/// (`Elf::symbol_table_at`).
fn scan_tables<R: ReadAt>(elf: &Elf<R>, kind: u32, name: &[u8]) -> Option<u64> {
    for (i, _) in elf.sections().iter().enumerate().filter(|(_, s)| s.kind == kind).take(MAX_TABLES_OF_A_KIND) {
        let Ok(table) = elf.symbol_table_at(i) else { continue };
        let Ok(at) = elf.strings(&table).find(name, MAX_NAME_COPIES) else { continue };
        if at.is_empty() {
            continue;
        }
        for s in elf.symbols(&table) {
            let Ok(s) = s else { break }; // unreadable table: the next one
            if s.shndx != 0 && at.binary_search(&u64::from(s.name)).is_ok() {
                return Some(s.value);
            }
        }
    }
    None
}

/// [`symbol_file_offset`]; `.symtab` (not loaded, often big) is searched only when
/// `symtab` is true (the main executable: a shared library exports the symbol in
/// `.dynsym`).
fn symbol_file_offset_in<R: ReadAt>(f: R, name: &str, symtab: bool) -> Option<u64> {
    let elf = Elf::parse_limited(f, MAX_HEADERS).ok()?;
    if !elf.class().is64 || elf.class().big_endian {
        return None;
    }
    let sections = elf.sections();
    let mut vaddr = None;
    // .dynsym through its .gnu.hash first.
    let mut hashed = false;
    for hash in sections.iter().filter(|s| s.kind == SHT_GNU_HASH) {
        let link = hash.link as usize;
        if sections.get(link).is_none_or(|s| s.kind != SHT_DYNSYM) {
            continue;
        }
        let Ok(dynsym) = elf.symbol_table_at(link) else { continue };
        if let Some(found) = gnu_hash_lookup(&elf, hash, &dynsym, name.as_bytes()) {
            hashed = true;
            if let Some((shndx, value)) = found {
                if shndx != 0 {
                    vaddr = Some(value);
                }
            }
            break;
        }
    }
    let tables: &[u32] = match (hashed, symtab) {
        (true, true) => &[SHT_SYMTAB],
        (true, false) => &[],
        (false, true) => &[SHT_DYNSYM, SHT_SYMTAB],
        (false, false) => &[SHT_DYNSYM],
    };
    for &kind in tables {
        if vaddr.is_some() {
            break;
        }
        vaddr = scan_tables(&elf, kind, name.as_bytes());
    }
    let vaddr = vaddr?;
    for p in elf.program_headers().ok()? {
        let p = p.ok()?;
        if p.kind == PT_LOAD && vaddr >= p.vaddr && vaddr < p.vaddr.saturating_add(p.filesz) {
            return (vaddr - p.vaddr).checked_add(p.offset);
        }
    }
    None
}

/// Runtime addresses of the defined symbol `name` in every ELF file mapped by `pid`
/// (executable and shared libraries), from /proc/PID/maps and the files' symbol tables,
/// each in a writable mapping of the file it was found in. Files are opened with
/// [`crate::procfs::open_mapped_file`]: the file that is mapped, even when another one
/// now sits at its path (a package upgrade), never a FIFO or symlink put there.
pub fn find_symbol_in_process(pid: u32, name: &str) -> io::Result<Vec<u64>> {
    find_symbol_in_process_until(pid, name, &AtomicBool::new(false))
}

/// [`find_symbol_in_process`], given up (an `Interrupted` error) as soon as `stop` is set
/// (the marker follower's worker, issue 19 finding 3).
pub fn find_symbol_in_process_until(pid: u32, name: &str, stop: &AtomicBool) -> io::Result<Vec<u64>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let entries: Vec<MapsEntry> = maps.lines().filter_map(parse_maps_line).collect();
    find_symbol_in_maps(pid, &entries, name, stop)
}

/// [`find_symbol_in_process_until`] over `pid`'s maps already read (`entries`).
pub fn find_symbol_in_maps(pid: u32, entries: &[MapsEntry], name: &str, stop: &AtomicBool) -> io::Result<Vec<u64>> {
    // The main executable (its .symtab is searched too; libraries export in .dynsym).
    let exe = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/exe")).map_or((0, 0), |m| (m.dev(), m.ino()))
    };
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut out = Vec::new();
    for e in entries {
        if !e.path.starts_with('/') || e.path.starts_with("/dev/") || e.inode == 0 || seen.contains(&(e.dev, e.inode)) {
            continue;
        }
        if seen.len() >= MAX_FILES {
            break; // a process mapping thousands of files: the rest are not looked at
        }
        seen.push((e.dev, e.inode));
        // Through the mapping itself, never blocking, and only the very file mapped
        // (issue 10, finding 3): a FIFO or another file at the path is skipped.
        let Ok(f) = crate::procfs::open_mapped_file(pid, e) else { continue };
        let Ok(md) = f.metadata() else { continue };
        use std::os::unix::fs::MetadataExt;
        let key = (md.dev(), md.ino(), md.size(), md.ctime(), md.ctime_nsec(), name.to_string(), (md.dev(), md.ino()) == exe);
        let foff = match OFFSETS.with(|c| c.borrow().get(&key).copied()) {
            Some(v) => v,
            None => {
                let v = symbol_file_offset_in(Stoppable { f: &f, stop }, name, (md.dev(), md.ino()) == exe);
                if stop.load(Ordering::Relaxed) {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "the recording stops"));
                }
                OFFSETS.with(|c| {
                    let mut c = c.borrow_mut();
                    if c.len() >= MAX_FILES * 16 {
                        c.clear();
                    }
                    c.insert(key, v);
                });
                v
            }
        };
        let Some(foff) = foff else { continue };
        // The control block lives in .data: only a writable mapping of the very file the
        // symbol was read from (same device and inode) holds it.
        let holds = |m: &&MapsEntry| {
            m.dev == e.dev && m.inode == e.inode && m.prot & 2 != 0 && foff >= m.offset && foff - m.offset < m.end - m.start
        };
        if let Some(m) = entries.iter().find(holds) {
            out.push(m.start + (foff - m.offset));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19, finding 3: an executable with 64 `.symtab` sections whose `.strtab` is
    /// declared 16 GiB, in a sparse file of a few KB. Before, the follower scanned each
    /// for minutes in the drain loop (173 s for one). Now the tables are refused before
    /// anything is read: the answer ("not marked") comes at once.
    #[test]
    fn finding_3_sparse_16_gib_string_tables_are_not_scanned() {
        // ELF64-LE: null, 64 × .symtab (link 65), .strtab (16 GiB), section names.
        let (nsym, strtab) = (64usize, 65usize);
        let shoff = 0x40u64;
        let count = strtab + 1;
        let mut b = vec![0u8; shoff as usize + count * 64];
        b[..4].copy_from_slice(b"\x7fELF");
        (b[4], b[5], b[6]) = (2, 1, 1);
        b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        b[40..48].copy_from_slice(&shoff.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&(count as u16).to_le_bytes());
        let huge = 16u64 << 30;
        let data_at = b.len() as u64;
        let mut sec = |i: usize, kind: u32, off: u64, size: u64, link: u32, es: u64| {
            let at = shoff as usize + i * 64;
            b[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
            b[at + 24..at + 32].copy_from_slice(&off.to_le_bytes());
            b[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
            b[at + 40..at + 44].copy_from_slice(&link.to_le_bytes());
            b[at + 56..at + 64].copy_from_slice(&es.to_le_bytes());
        };
        for i in 1..=nsym {
            sec(i, SHT_SYMTAB, data_at, 24 * 16, strtab as u32, 24);
        }
        sec(strtab, tailprof_elf::SHT_STRTAB, data_at, huge, 0, 0);
        let p = std::env::temp_dir().join(format!("tailprof-finding3-{}", std::process::id()));
        std::fs::write(&p, &b).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        f.set_len(data_at + huge).unwrap(); // holes
        let _ = std::fs::remove_file(&p); // the open file stays readable
        let t0 = std::time::Instant::now();
        assert!(!file_defines(&f, crate::items::markers::CONTROL_SYMBOL, true));
        // Bounded generously (before: minutes); the bound is the point, not the speed.
        assert!(t0.elapsed() < std::time::Duration::from_secs(20), "{:?}", t0.elapsed());
    }

    /// A shared library's symbols are found through .gnu.hash (a few small reads).
    #[test]
    fn gnu_hash_lookup_agrees_with_a_scan() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(libc_path) =
            maps.lines().filter_map(parse_maps_line).map(|m| m.path).find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "no dynamically linked libc");
            return;
        };
        let f = File::open(&libc_path).unwrap();
        let hashed = symbol_file_offset_in(&f, "malloc", false);
        assert!(hashed.is_some(), "malloc in {libc_path}");
        assert_eq!(symbol_file_offset_in(&f, "tailprof_no_such_symbol", false), None);
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(symbol_file_offset(&f, "malloc"), hashed, "the full search agrees");
        // the hash lookup and a scan of .dynsym find the same symbol
        let elf = Elf::parse(&f).unwrap();
        let dynsym = elf.symbol_table(SHT_DYNSYM).unwrap().unwrap();
        let hash = elf.sections().iter().find(|s| s.kind == SHT_GNU_HASH).expect(".gnu.hash");
        let (_, by_hash) = gnu_hash_lookup(&elf, hash, &dynsym, b"malloc").unwrap().unwrap();
        assert_eq!(Some(by_hash), scan_tables(&elf, SHT_DYNSYM, b"malloc"));
        assert_eq!(gnu_hash_lookup(&elf, hash, &dynsym, b"tailprof_no_such_symbol"), Some(None));
        assert_eq!(scan_tables(&elf, SHT_DYNSYM, b"tailprof_no_such_symbol"), None);
    }
}
