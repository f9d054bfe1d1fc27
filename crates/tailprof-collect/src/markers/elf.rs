//! Find one symbol's runtime address in a running process (for `-p PID` marker attach).
//!
//! Why a small reader instead of the `object` crate: we need one symbol
//! (`tailprof_control`) from each mapped executable/DSO of the target, and `object` parses
//! an in-memory image, so we would read or map whole binaries while attaching. This reader
//! `pread`s the ELF header, section headers, the symbol tables and their string tables
//! (every size capped, every offset bounds-checked by `read_exact_at`), like
//! `crate::buildid`, and adds no dependency. ELF64 little-endian only (x86-64, aarch64);
//! anything else is "not found".

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::procfs::{parse_maps_line, MapsEntry};

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const SHT_GNU_HASH: u32 = 0x6fff_fff6;
/// Longest hash chain followed.
const MAX_CHAIN: usize = 1 << 16;
const PT_LOAD: u32 = 1;
const MAX_HEADERS: usize = 4096;
/// Largest symbol or string table we read (a big C++ binary's .symtab is tens of MB).
const MAX_TABLE: u64 = 128 << 20;
/// Most distinct files of one process searched for the symbol.
const MAX_FILES: usize = 1024;

thread_local! {
    /// Symbol file offsets by (device, inode, size, ctime, name): `-a` sees libc in every
    /// process.
    #[allow(clippy::type_complexity)]
    static OFFSETS: std::cell::RefCell<std::collections::HashMap<(u64, u64, u64, i64, i64, String, bool), Option<u64>>> =
        Default::default();
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

fn read_at(f: &File, off: u64, len: u64) -> Option<Vec<u8>> {
    if len > MAX_TABLE {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off).ok()?;
    Some(buf)
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

/// GNU hash of a symbol name (`.gnu.hash`).
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

/// Look `name` up through a `.gnu.hash` section (`hash_off`, `hash_size`) of the dynamic
/// symbol table at `sym_off` (entries of `entsize`) with names at `str_off`/`str_size`:
/// a few small reads instead of the whole table (big shared libraries export hundreds of
/// thousands of symbols). `Some(None)`: looked up, not there; `None`: the section is
/// unusable (the caller scans instead).
fn gnu_hash_lookup(f: &File, h: (u64, u64), sym: (u64, u64), strs: (u64, u64), name: &[u8]) -> Option<Option<(u16, u64)>> {
    let (hash_off, hash_size) = h;
    let hdr = read_at(f, hash_off, 16)?;
    let (nbuckets, symoffset, bloom_size) = (u32_at(&hdr, 0) as u64, u32_at(&hdr, 4) as u64, u32_at(&hdr, 8) as u64);
    let buckets_off = 16u64.checked_add(bloom_size.checked_mul(8)?)?;
    let chain_off = buckets_off.checked_add(nbuckets.checked_mul(4)?)?;
    if nbuckets == 0 || chain_off > hash_size {
        return None;
    }
    let hv = gnu_hash(name);
    let b = read_at(f, hash_off + buckets_off + (hv as u64 % nbuckets) * 4, 4)?;
    let mut idx = u32_at(&b, 0) as u64;
    if idx < symoffset {
        return Some(None);
    }
    let want: Vec<u8> = name.iter().copied().chain([0]).collect();
    for _ in 0..MAX_CHAIN {
        let c_at = chain_off.checked_add((idx - symoffset).checked_mul(4)?)?;
        if c_at + 4 > hash_size {
            return None;
        }
        let c = u32_at(&read_at(f, hash_off + c_at, 4)?, 0);
        if c | 1 == hv | 1 {
            let e = read_at(f, sym.0.checked_add(idx.checked_mul(sym.1)?)?, 24)?;
            let st_name = u32_at(&e, 0) as u64;
            if st_name + want.len() as u64 <= strs.1 && read_at(f, strs.0 + st_name, want.len() as u64)? == want {
                return Some(Some((u16_at(&e, 6), u64_at(&e, 8))));
            }
        }
        if c & 1 == 1 {
            return Some(None);
        }
        idx += 1;
    }
    None
}

/// [`symbol_file_offset`]; `.symtab` (not loaded, often big) is searched only when
/// `symtab` is true (the main executable: a shared library exports the symbol in
/// `.dynsym`).
fn symbol_file_offset_in(f: &File, name: &str, symtab: bool) -> Option<u64> {
    let eh = read_at(f, 0, 64)?;
    if &eh[0..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let (phoff, shoff) = (u64_at(&eh, 32), u64_at(&eh, 40));
    let (phentsize, phnum) = (u16_at(&eh, 54) as usize, u16_at(&eh, 56) as usize);
    let (shentsize, shnum) = (u16_at(&eh, 58) as usize, u16_at(&eh, 60) as usize);
    if shentsize < 64 || phentsize < 56 || shnum > MAX_HEADERS || phnum > MAX_HEADERS {
        return None;
    }
    let sh = read_at(f, shoff, (shentsize * shnum) as u64)?;
    let sect = |i: usize| -> Option<(u32, u64, u64, u32, u64)> {
        let b = sh.get(i * shentsize..i * shentsize + 64)?;
        Some((u32_at(b, 4), u64_at(b, 24), u64_at(b, 32), u32_at(b, 40), u64_at(b, 56)))
    };
    let mut vaddr = None;
    // .dynsym through its .gnu.hash first.
    let mut hashed = false;
    for i in 0..shnum {
        let (ty, hoff, hsize, link, _) = sect(i)?;
        if ty != SHT_GNU_HASH {
            continue;
        }
        let Some((SHT_DYNSYM, soff, _, slink, sent)) = sect(link as usize) else { continue };
        let Some((_, stroff, strsize, _, _)) = sect(slink as usize) else { continue };
        if sent < 24 {
            continue;
        }
        if let Some(found) = gnu_hash_lookup(f, (hoff, hsize), (soff, sent), (stroff, strsize), name.as_bytes()) {
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
    'tables: for &want in tables {
        if vaddr.is_some() {
            break;
        }
        for i in 0..shnum {
            let (ty, off, size, link, entsize) = sect(i)?;
            if ty != want || entsize < 24 {
                continue;
            }
            let Some((_, stroff, strsize, _, _)) = sect(link as usize) else { continue };
            let (Some(syms), Some(strs)) = (read_at(f, off, size), read_at(f, stroff, strsize)) else {
                continue;
            };
            // `name` NUL-terminated: one short comparison per symbol (no scan for each
            // name's end).
            let want_name: Vec<u8> = name.bytes().chain([0]).collect();
            for s in syms.chunks_exact(entsize as usize) {
                let (st_name, shndx, value) = (u32_at(s, 0) as usize, u16_at(s, 6), u64_at(s, 8));
                if shndx != 0 && strs.get(st_name..st_name.saturating_add(want_name.len())) == Some(&want_name[..]) {
                    vaddr = Some(value);
                    break 'tables;
                }
            }
        }
    }
    let vaddr = vaddr?;
    let ph = read_at(f, phoff, (phentsize * phnum) as u64)?;
    for i in 0..phnum {
        let b = &ph[i * phentsize..i * phentsize + 56];
        let (ty, off, va, filesz) = (u32_at(b, 0), u64_at(b, 8), u64_at(b, 16), u64_at(b, 32));
        if ty == PT_LOAD && vaddr >= va && vaddr < va.saturating_add(filesz) {
            return Some(vaddr - va + off);
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
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let entries: Vec<MapsEntry> = maps.lines().filter_map(parse_maps_line).collect();
    // The main executable (its .symtab is searched too; libraries export in .dynsym).
    let exe = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/exe")).map_or((0, 0), |m| (m.dev(), m.ino()))
    };
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut out = Vec::new();
    for e in &entries {
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
                let v = symbol_file_offset_in(&f, name, (md.dev(), md.ino()) == exe);
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
            m.dev == e.dev
                && m.inode == e.inode
                && m.prot & 2 != 0
                && foff >= m.offset
                && foff - m.offset < m.end - m.start
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

    /// A shared library's symbols are found through .gnu.hash (a few small reads).
    #[test]
    fn gnu_hash_lookup_agrees_with_a_scan() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(libc_path) = maps
            .lines()
            .filter_map(parse_maps_line)
            .map(|m| m.path)
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        else {
            eprintln!("SKIP: no dynamically linked libc");
            return;
        };
        let f = File::open(&libc_path).unwrap();
        let hashed = symbol_file_offset_in(&f, "malloc", false);
        assert!(hashed.is_some(), "malloc in {libc_path}");
        assert_eq!(symbol_file_offset_in(&f, "tailprof_no_such_symbol", false), None);
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(symbol_file_offset(&f, "malloc"), hashed, "the full search agrees");
    }
}
