//! Symbolizing a binary once per build-id: every function of its ELF symbol tables
//! (`.symtab`, `.dynsym`) with its file offset and size, demangled, sorted by offset, and
//! written into the store's `symbols` table. Queries resolve any offset of that build-id
//! against this table later, whether or not the binary still exists.
//!
//! Streamed, so memory does not grow with the table: the symbol tables are read with
//! `pread` in chunks into a compact index (start, size, name offset: 24 bytes per
//! function), sorted, and then each function's name is read, demangled and handed to
//! [`tailprof_store::write::write_symbol_table`], which encodes one row group of
//! [`tailprof_store::write::SYMBOL_GROUP_ROWS`] names at a time. Nothing is mapped: the file
//! belongs to a profiled (untrusted) process, which could truncate it under a mapping
//! (SIGBUS); a short read is an error instead.
//!
//! The selection is blazesym's (`Inspector::for_each`, which the agent used before and
//! [`reference_table`] still calls for the tests): `STT_FUNC` and `STT_GNU_IFUNC` symbols
//! defined in a section with file contents, offset = value − section address + section
//! offset; at one start the `.symtab` entry wins over `.dynsym`, then the larger size,
//! then the smaller name; a `.dynsym` function inside a `.symtab` function is left out.
//! Unlike blazesym, a symbol with a section index beyond the section table (rustc's
//! `rust_metadata_*` objects in `librustc_driver.so` point at a stripped section) does not
//! fail the whole binary: a function is skipped and counted, anything else ignored; and
//! extended section indexes (`SHN_XINDEX`, `.symtab_shndx`) are followed.

use std::cmp::Reverse;
use std::fs::File;
use std::io::BufRead;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tailprof_store::write::SymbolFn;

/// Functions kept per binary at most (bounds memory for a hostile or huge file: 24 bytes
/// each in the index); beyond, skipped and counted.
pub const MAX_SYMBOLS: usize = 2_000_000;
/// Sections read at most (a section header costs 40 bytes in memory).
pub const MAX_SECTIONS: usize = 200_000;
/// Longest symbol name read; longer (or unterminated) names are skipped and counted.
pub const MAX_NAME_BYTES: usize = 1 << 20;
/// Symbols read per `pread` while scanning a symbol table.
const SCAN_CHUNK: usize = 4096;
/// Bytes of the string table read at once (names close together cost one read).
const NAME_WINDOW: usize = 4 << 10;

const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHT_SYMTAB_SHNDX: u32 = 18;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;
const SHN_XINDEX: u16 = 0xffff;

/// What writing one table did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableWritten {
    /// Functions stored.
    pub functions: u64,
    /// Functions left out because the file was malformed there (section index out of
    /// bounds, missing extended index, name out of bounds, unterminated or longer than
    /// [`MAX_NAME_BYTES`]) or beyond [`MAX_SYMBOLS`].
    pub skipped: u64,
    /// Bytes of the Parquet file.
    pub bytes: u64,
}

/// ELF class and byte order, and the field readers that depend on them.
#[derive(Clone, Copy)]
struct Class {
    is64: bool,
    le: bool,
}

impl Class {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let a = [b[at], b[at + 1]];
        if self.le { u16::from_le_bytes(a) } else { u16::from_be_bytes(a) }
    }
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.le { u32::from_le_bytes(a) } else { u32::from_be_bytes(a) }
    }
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        if self.le { u64::from_le_bytes(a) } else { u64::from_be_bytes(a) }
    }
    /// An address-sized field (`Elf32_Addr`/`Elf64_Addr`, `Off`, `Xword`) at the
    /// class's offset.
    fn word(self, b: &[u8], at32: usize, at64: usize) -> u64 {
        if self.is64 { self.u64(b, at64) } else { self.u32(b, at32) as u64 }
    }
    fn shdr_size(self) -> usize {
        if self.is64 { 64 } else { 40 }
    }
    fn sym_size(self) -> usize {
        if self.is64 { 24 } else { 16 }
    }
}

#[derive(Clone, Copy)]
struct Section {
    typ: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
}

/// One function in the index: 24 bytes, the name stays in the file.
#[derive(Clone, Copy)]
struct Func {
    start: u64,
    size: u64,
    name: u32,
    /// 0 = `.symtab`, 1 = `.dynsym` (the order of preference).
    table: u8,
}

fn read_at(f: &File, buf: &mut [u8], off: u64) -> Result<(), String> {
    f.read_exact_at(buf, off).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => format!("file ends inside the data at offset {off} (truncated while read?)"),
        _ => format!("read at offset {off}: {e}"),
    })
}

/// The functions of one ELF file, sorted by start, with their names still in the file.
pub struct ElfFunctions<'f> {
    file: &'f File,
    funcs: Vec<Func>,
    /// (file offset, size) of the string table of `.symtab` and of `.dynsym`.
    strings: [(u64, u64); 2],
    skipped: u64,
}

impl<'f> ElfFunctions<'f> {
    /// Reads the symbol tables of `file` into the sorted index.
    pub fn read(file: &'f File) -> Result<Self, String> {
        let len = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
        let mut ehdr = [0u8; 64];
        let n = read_prefix(file, &mut ehdr)?;
        if n < 52 || &ehdr[..4] != b"\x7fELF" {
            return Err("not an ELF file".into());
        }
        let c = match (ehdr[4], ehdr[5]) {
            (1, 1) => Class { is64: false, le: true },
            (1, 2) => Class { is64: false, le: false },
            (2, 1) if n >= 64 => Class { is64: true, le: true },
            (2, 2) if n >= 64 => Class { is64: true, le: false },
            _ => return Err(format!("unsupported ELF class {} / byte order {}", ehdr[4], ehdr[5])),
        };
        let shoff = c.word(&ehdr, 0x20, 0x28);
        let (shentsize, shnum) = if c.is64 { (c.u16(&ehdr, 0x3a), c.u16(&ehdr, 0x3c)) } else { (c.u16(&ehdr, 0x2e), c.u16(&ehdr, 0x30)) };
        let esz = c.shdr_size();
        let mut funcs = ElfFunctions { file, funcs: Vec::new(), strings: [(0, 0); 2], skipped: 0 };
        if shoff == 0 {
            return Ok(funcs); // no section table: no symbols
        }
        if (shentsize as usize) < esz {
            return Err(format!("section header size {shentsize} is smaller than {esz}"));
        }
        let stride = shentsize as u64;
        let read_shdr = |i: u64, buf: &mut [u8]| -> Result<Section, String> {
            let off = shoff.checked_add(i.saturating_mul(stride)).filter(|&o| o.saturating_add(esz as u64) <= len);
            let off = off.ok_or_else(|| format!("section header {i} is beyond the end of the file"))?;
            read_at(file, &mut buf[..esz], off)?;
            Ok(Section {
                typ: c.u32(buf, 4),
                addr: c.word(buf, 12, 16),
                offset: c.word(buf, 16, 24),
                size: c.word(buf, 20, 32),
                link: c.u32(buf, if c.is64 { 40 } else { 24 }),
            })
        };
        let mut one = [0u8; 64];
        // e_shnum 0: the real count is in section 0's sh_size (more than 0xff00 sections)
        let count = if shnum == 0 { read_shdr(0, &mut one)?.size } else { shnum as u64 };
        if count > MAX_SECTIONS as u64 {
            return Err(format!("{count} sections, more than the {MAX_SECTIONS} read"));
        }
        // all section headers, read in one piece (count ≤ MAX_SECTIONS)
        let total = (count as usize).saturating_mul(shentsize as usize);
        if shoff.saturating_add(total as u64) > len {
            return Err("the section table runs past the end of the file".into());
        }
        let mut raw = vec![0u8; total];
        read_at(file, &mut raw, shoff)?;
        let sections: Vec<Section> = raw
            .chunks_exact(shentsize as usize)
            .map(|b| Section {
                typ: c.u32(b, 4),
                addr: c.word(b, 12, 16),
                offset: c.word(b, 16, 24),
                size: c.word(b, 20, 32),
                link: c.u32(b, if c.is64 { 40 } else { 24 }),
            })
            .collect();
        drop(raw);
        for (table, typ) in [(0u8, SHT_SYMTAB), (1u8, SHT_DYNSYM)] {
            let Some(idx) = sections.iter().position(|s| s.typ == typ) else { continue };
            let sym = sections[idx];
            if sym.size == 0 {
                continue;
            }
            let strtab = sections.get(sym.link as usize).filter(|s| s.typ == SHT_STRTAB && sym.link != 0);
            let strtab = *strtab.ok_or_else(|| format!("symbol table {idx} links to section {}, not a string table", sym.link))?;
            if strtab.offset.saturating_add(strtab.size) > len || sym.offset.saturating_add(sym.size) > len {
                return Err(format!("symbol table {idx} or its strings run past the end of the file"));
            }
            funcs.strings[table as usize] = (strtab.offset, strtab.size);
            // extended section indexes of this table, if any
            let shndx = sections
                .iter()
                .find(|s| s.typ == SHT_SYMTAB_SHNDX && s.link as usize == idx)
                .filter(|s| s.offset.saturating_add(s.size) <= len)
                .copied();
            funcs.scan(c, &sections, sym, shndx, strtab.size, table)?;
        }
        funcs.sort_and_dedup()?;
        Ok(funcs)
    }

    /// Adds the functions of one symbol table to the index.
    fn scan(&mut self, c: Class, sections: &[Section], sym: Section, shndx: Option<Section>, strsize: u64, table: u8) -> Result<(), String> {
        let ssz = c.sym_size();
        let nsyms = sym.size / ssz as u64;
        let mut buf = vec![0u8; SCAN_CHUNK * ssz];
        let mut xbuf = vec![0u8; SCAN_CHUNK * 4];
        let mut first = 0u64;
        while first < nsyms {
            let n = (nsyms - first).min(SCAN_CHUNK as u64) as usize;
            read_at(self.file, &mut buf[..n * ssz], sym.offset + first * ssz as u64)?;
            // the matching slice of the extended index table (absent or short: None)
            let xs = shndx.and_then(|x| {
                let off = x.offset.checked_add(first * 4)?;
                let have = x.size.checked_sub(first * 4)?.min(n as u64 * 4) as usize;
                read_at(self.file, &mut xbuf[..have], off).ok()?;
                Some(have / 4)
            });
            for (i, s) in buf[..n * ssz].chunks_exact(ssz).enumerate() {
                let (name, info, sec, value, size) = if c.is64 {
                    (c.u32(s, 0), s[4], c.u16(s, 6), c.u64(s, 8), c.u64(s, 16))
                } else {
                    (c.u32(s, 0), s[12], c.u16(s, 14), c.u32(s, 4) as u64, c.u32(s, 8) as u64)
                };
                if !matches!(info & 0xf, STT_FUNC | STT_GNU_IFUNC) || sec == SHN_UNDEF {
                    continue;
                }
                let index = match sec {
                    SHN_XINDEX => match xs {
                        Some(have) if i < have => c.u32(&xbuf, i * 4) as usize,
                        _ => {
                            self.skipped += 1; // extended index missing
                            continue;
                        }
                    },
                    s if s >= SHN_LORESERVE => continue, // SHN_ABS, SHN_COMMON: no file offset
                    s => s as usize,
                };
                let Some(section) = sections.get(index).filter(|_| index != 0) else {
                    self.skipped += 1; // section index out of bounds
                    continue;
                };
                if section.typ == SHT_NOBITS {
                    continue; // no bytes in the file
                }
                if name as u64 >= strsize || self.funcs.len() >= MAX_SYMBOLS {
                    self.skipped += 1;
                    continue;
                }
                let start = value.wrapping_sub(section.addr).wrapping_add(section.offset);
                self.funcs.push(Func { start, size, name, table });
            }
            first += n as u64;
        }
        Ok(())
    }

    /// Sorts by start; at each start keeps `.symtab` before `.dynsym`, then the largest
    /// size, then the smallest name; drops `.dynsym` functions inside a `.symtab` one.
    fn sort_and_dedup(&mut self) -> Result<(), String> {
        self.funcs.sort_unstable_by_key(|f| (f.start, f.table, Reverse(f.size), f.name));
        let mut names = NameReader::new(self.file, self.strings);
        let mut out = 0;
        let mut i = 0;
        let n = self.funcs.len();
        let mut cover_end = 0u64; // end of the .symtab functions so far
        while i < n {
            let first = self.funcs[i];
            let mut j = i + 1;
            while j < n && self.funcs[j].start == first.start {
                j += 1;
            }
            // aliases: same start, table and size; the smallest name wins (only these
            // names are read here)
            let mut best = first;
            if j > i + 1 && self.funcs[i + 1].table == first.table && self.funcs[i + 1].size == first.size {
                let mut best_name = names.get(first.table, first.name)?.map(<[u8]>::to_vec);
                for k in i + 1..j {
                    let f = self.funcs[k];
                    if f.table != first.table || f.size != first.size {
                        break;
                    }
                    let name = names.get(f.table, f.name)?;
                    if let Some(name) = name {
                        if best_name.as_deref().is_none_or(|b| name < b) {
                            best_name = Some(name.to_vec());
                            best = f;
                        }
                    }
                }
            }
            i = j;
            if best.table == 1 && best.start < cover_end {
                continue; // a .dynsym entry inside a .symtab function
            }
            if best.table == 0 {
                cover_end = cover_end.max(best.start.saturating_add(best.size));
            }
            self.funcs[out] = best;
            out += 1;
        }
        self.funcs.truncate(out);
        self.funcs.shrink_to_fit();
        self.skipped += names.skipped;
        Ok(())
    }

    /// Functions in the index.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// Functions skipped so far (malformed entries; names read by [`Self::functions`]
    /// add theirs as they are read).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The functions in order, each name read and demangled as the iterator reaches it.
    /// Names that cannot be read are skipped and counted in `skipped`; a failed read of
    /// the file is an `Err` item (the table is then incomplete: the caller stops).
    pub fn functions<'a>(&'a self, skipped: &'a std::cell::Cell<u64>) -> impl Iterator<Item = Result<SymbolFn, String>> + 'a {
        let mut names = NameReader::new(self.file, self.strings);
        self.funcs.iter().filter_map(move |f| match names.get(f.table, f.name) {
            Ok(Some(raw)) => {
                let raw = String::from_utf8_lossy(raw);
                let name = tailprof_analyze::symbolize::demangle(&raw).into_owned();
                Some(Ok(SymbolFn { start: f.start, size: f.size, name }))
            }
            Ok(None) => {
                skipped.set(skipped.get() + 1);
                None
            }
            Err(e) => Some(Err(e)),
        })
    }
}

/// Reads a prefix of the file (up to `buf.len()` bytes); returns how many were read.
fn read_prefix(f: &File, buf: &mut [u8]) -> Result<usize, String> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    Ok(n)
}

/// Reads NUL-terminated names from the two string tables through a window of
/// [`NAME_WINDOW`] bytes (names of neighbouring functions are often neighbours).
struct NameReader<'f> {
    file: &'f File,
    strings: [(u64, u64); 2],
    /// Window: table, offset in the table, bytes.
    win: (u8, u64, Vec<u8>),
    skipped: u64,
}

impl<'f> NameReader<'f> {
    fn new(file: &'f File, strings: [(u64, u64); 2]) -> Self {
        NameReader { file, strings, win: (u8::MAX, 0, Vec::new()), skipped: 0 }
    }

    /// The name at `name` in `table`'s strings; `None` (counted) if it is out of bounds,
    /// unterminated or longer than [`MAX_NAME_BYTES`].
    fn get(&mut self, table: u8, name: u32) -> Result<Option<&[u8]>, String> {
        let (toff, tsize) = self.strings[table as usize];
        let at = name as u64;
        if at >= tsize {
            self.skipped += 1;
            return Ok(None);
        }
        let (wt, woff, ref wbuf) = self.win;
        let inside = wt == table && at >= woff && at < woff + wbuf.len() as u64;
        if inside {
            let rel = (at - woff) as usize;
            if let Some(p) = wbuf[rel..].iter().position(|&b| b == 0) {
                return Ok(Some(&self.win.2[rel..rel + p]));
            }
        }
        // a new window starting at the name, grown until it holds the terminator
        let mut want = NAME_WINDOW;
        loop {
            let n = (tsize - at).min(want as u64) as usize;
            let buf = &mut self.win.2;
            buf.resize(n, 0);
            self.win.0 = u8::MAX; // invalid until filled
            read_at(self.file, buf, toff + at)?;
            self.win.0 = table;
            self.win.1 = at;
            if let Some(p) = self.win.2.iter().position(|&b| b == 0) {
                let r = &self.win.2[..p];
                return Ok(Some(r));
            }
            if n as u64 == tsize - at || n > MAX_NAME_BYTES {
                self.skipped += 1;
                if self.win.2.len() > NAME_WINDOW {
                    self.win.2 = Vec::new(); // do not keep a huge window
                    self.win.0 = u8::MAX;
                }
                return Ok(None);
            }
            want = want.saturating_mul(4).min(MAX_NAME_BYTES + 1);
        }
    }
}

/// Writes the function table of the ELF file `file` to `dest` (a `symbols` file of the
/// store), streamed: see the module documentation.
pub fn write_elf_table(file: &File, build_id: &str, binary: &str, dest: &Path) -> Result<TableWritten, String> {
    let funcs = ElfFunctions::read(file)?;
    let skipped = std::cell::Cell::new(funcs.skipped());
    let (bytes, rows) = tailprof_store::write::write_symbol_table(dest, build_id, binary, funcs.functions(&skipped)).map_err(|e| e.to_string())?;
    Ok(TableWritten { functions: rows, skipped: skipped.get(), bytes })
}

/// The kernel's text functions from a kallsyms file (`ADDR TYPE NAME [MODULE]`), as
/// (offset from `_text`, size up to the next, name), sorted, module symbols left out.
/// Offsets from `_text` stay valid across KASLR.
pub fn kallsyms_functions(f: File) -> Result<Vec<(u64, u64, Box<str>)>, String> {
    let mut syms: Vec<(u64, u64, Box<str>)> = Vec::new();
    let mut text = None;
    let mut line = String::new();
    let mut r = std::io::BufReader::new(f);
    let mut lines = 0;
    while lines < 10_000_000 {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => lines += 1,
        }
        let Some(l) = tailprof_analyze::symbolize::ksyms::parse_kallsyms_line(line.trim_end().as_bytes()) else { continue };
        if l.in_module || !matches!(l.kind, b't' | b'T' | b'w' | b'W') {
            continue; // a module symbol, or not code
        }
        let (addr, Ok(name)) = (l.addr, std::str::from_utf8(l.name)) else { continue };
        if name == "_text" {
            text = Some(addr);
        }
        if syms.len() < MAX_SYMBOLS {
            let end = name.char_indices().nth(256).map_or(name.len(), |(i, _)| i);
            syms.push((addr, 0, Box::from(&name[..end])));
        }
    }
    let text = text.filter(|&t| t != 0).ok_or("kallsyms hides addresses (kptr_restrict) or has no _text")?;
    syms.retain(|s| s.0 >= text);
    syms.sort();
    syms.dedup_by(|b, a| a.0 == b.0);
    for i in 0..syms.len() {
        let next = syms.get(i + 1).map(|n| n.0);
        let s = &mut syms[i];
        s.1 = next.map_or(0, |n| n - s.0);
        s.0 -= text;
    }
    Ok(syms)
}

/// Writes the kernel's table (from a kallsyms file, see [`kallsyms_functions`]) to `dest`.
pub fn write_kallsyms_table(f: File, build_id: &str, binary: &str, dest: &Path) -> Result<TableWritten, String> {
    let syms = kallsyms_functions(f)?;
    let it = syms.into_iter().map(|(start, size, name)| Ok(SymbolFn { start, size, name: name.into() }));
    let (bytes, rows) = tailprof_store::write::write_symbol_table(dest, build_id, binary, it).map_err(|e| e.to_string())?;
    Ok(TableWritten { functions: rows, skipped: 0, bytes })
}

/// The table the agent built before it streamed: blazesym's `Inspector::for_each` over the
/// ELF symbol tables, whole in memory, as (start, size, demangled name) sorted by start.
/// Kept as the reference the tests (and `symtab_peak --blazesym`) compare with; it fails
/// on files [`write_elf_table`] handles (e.g. a symbol whose section index is out of
/// bounds).
pub fn reference_table(path: &str) -> Result<Vec<(u64, u64, String)>, String> {
    use blazesym::inspect::source::{Elf, Source};
    use blazesym::inspect::Inspector;
    use blazesym::SymType;
    use std::ops::ControlFlow;
    let mut funcs: Vec<(u64, u64, Box<str>)> = Vec::new();
    {
        let inspector = Inspector::new();
        let mut elf = Elf::new(path);
        elf.debug_syms = false;
        let src = Source::Elf(elf);
        inspector
            .for_each(&src, |s| {
                if s.sym_type == SymType::Function {
                    if let Some(off) = s.file_offset {
                        funcs.push((off, s.size.unwrap_or(0) as u64, Box::from(&*s.name)));
                    }
                }
                if funcs.len() >= MAX_SYMBOLS {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .map_err(|e| e.to_string())?;
    }
    funcs.sort_by_key(|a| (a.0, Reverse(a.1)));
    funcs.dedup_by(|b, a| a.0 == b.0);
    Ok(funcs.into_iter().map(|(s, z, n)| (s, z, tailprof_analyze::symbolize::demangle(&n).into_owned())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_offsets_from_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        std::fs::write(
            &p,
            "ffffffff81000000 T _text\nffffffff81000100 t foo\nffffffff81000180 D data\nffffffff81000200 T bar\nffffffffc0000000 t modfn\t[mod]\n",
        )
        .unwrap();
        let rows = kallsyms_functions(File::open(&p).unwrap()).unwrap();
        let got: Vec<(u64, u64, &str)> = rows.iter().map(|r| (r.0, r.1, &*r.2)).collect();
        assert_eq!(got, [(0, 0x100, "_text"), (0x100, 0x100, "foo"), (0x200, 0, "bar")]);
        std::fs::write(&p, "0000000000000000 T _text\n").unwrap();
        assert!(kallsyms_functions(File::open(&p).unwrap()).is_err());
    }
}
