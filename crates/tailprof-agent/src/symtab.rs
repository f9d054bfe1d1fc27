//! Symbolizing a binary once per build-id: every function of its ELF symbol tables
//! (`.symtab`, `.dynsym`) with its file offset and size, demangled, sorted by offset, and
//! written into the store's `symbols` table. Queries resolve any offset of that build-id
//! against this table later, whether or not the binary still exists.
//!
//! Streamed, so memory does not grow with the table: the symbol tables are read with
//! `pread` in chunks ([`tailprof_elf`], the one bounded ELF reader) into a compact index (start, size, name offset: 24 bytes per
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
use std::path::Path;

use tailprof_elf::{Elf, StringTable, SymbolSection, SymbolTable, SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC};
use tailprof_store::write::SymbolFn;

/// Functions kept per binary at most (bounds memory for a hostile or huge file: 24 bytes
/// each in the index); beyond, skipped and counted.
pub const MAX_SYMBOLS: usize = 2_000_000;
/// Sections read at most.
pub const MAX_SECTIONS: usize = tailprof_elf::MAX_SECTIONS;
/// Longest symbol name read (4 KiB); a longer name is cut and ends in
/// [`tailprof_elf::TRUNCATED_MARK`], an unterminated one is skipped and counted.
pub const MAX_NAME_BYTES: usize = tailprof_elf::MAX_NAME_BYTES;
/// Symbols (or functions) handled between two calls of the caller's pace check
/// ([`write_elf_table_paced`]).
pub const PACE_EVERY: usize = 4096;

/// The caller's check, called every [`PACE_EVERY`] symbols while a table is read and
/// written: it may sleep (a CPU budget) or stop the job (`Err`, e.g. the agent stops).
pub type Pace<'a> = &'a mut dyn FnMut() -> Result<(), Stopped>;

/// Why the caller's [`Pace`] check stopped a job (e.g. "the agent stopped").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(pub String);

/// Why a symbol table could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymtabError {
    /// The binary is not a readable ELF file (damaged, truncated, a table too large, or a
    /// read failed).
    #[error(transparent)]
    Elf(#[from] tailprof_elf::Error),
    /// The kallsyms file hides addresses (`kptr_restrict`) or has no `_text`.
    #[error("kallsyms hides addresses (kptr_restrict) or has no _text")]
    KallsymsHidden,
    /// The caller's [`Pace`] check stopped the job; no file is left.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    /// Writing the table into the store failed.
    #[error(transparent)]
    Store(#[from] tailprof_store::StoreError),
    /// blazesym refused the file ([`reference_table`] only).
    #[error("{0}")]
    Reference(String),
}

/// What writing one table did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableWritten {
    /// Functions stored.
    pub functions: u64,
    /// Functions left out because the file was malformed there (section index out of
    /// bounds, missing extended index, name out of bounds or unterminated) or beyond
    /// [`MAX_SYMBOLS`].
    pub skipped: u64,
    /// Bytes of the Parquet file.
    pub bytes: u64,
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

/// The functions of one ELF file, sorted by start, with their names still in the file.
pub struct ElfFunctions<'f> {
    elf: Elf<&'f File>,
    funcs: Vec<Func>,
    /// (file offset, size) of the string table of `.symtab` and of `.dynsym`.
    strings: [(u64, u64); 2],
    skipped: u64,
}

impl<'f> ElfFunctions<'f> {
    /// Reads the symbol tables of `file` into the sorted index.
    pub fn read(file: &'f File) -> Result<Self, SymtabError> {
        Self::read_paced(file, &mut || Ok(()))
    }

    /// [`Self::read`], calling `pace` every [`PACE_EVERY`] symbols.
    pub fn read_paced(file: &'f File, pace: Pace) -> Result<Self, SymtabError> {
        let elf = Elf::parse_limited(file, MAX_SECTIONS)?;
        let mut funcs = ElfFunctions { elf, funcs: Vec::new(), strings: [(0, 0); 2], skipped: 0 };
        for (table, kind) in [(0u8, SHT_SYMTAB), (1u8, SHT_DYNSYM)] {
            let Some(t) = funcs.elf.symbol_table(kind)? else { continue };
            funcs.strings[table as usize] = (t.strings.offset, t.strings.size);
            funcs.scan(&t, table, pace)?;
        }
        funcs.sort_and_dedup()?;
        Ok(funcs)
    }

    /// Adds the functions of one symbol table to the index.
    fn scan(&mut self, t: &SymbolTable, table: u8, pace: Pace) -> Result<(), SymtabError> {
        let sections = self.elf.sections();
        for (i, s) in self.elf.symbols(t).enumerate() {
            if i % PACE_EVERY == PACE_EVERY - 1 {
                pace()?;
            }
            let s = s?;
            if !matches!(s.kind(), STT_FUNC | STT_GNU_IFUNC) {
                continue;
            }
            let index = match s.section() {
                SymbolSection::Undefined | SymbolSection::Reserved(_) => continue, // SHN_ABS, SHN_COMMON: no file offset
                SymbolSection::MissingExtended => {
                    self.skipped += 1; // extended index missing
                    continue;
                }
                SymbolSection::Index(i) => i as usize,
            };
            let Some(section) = sections.get(index).filter(|_| index != 0) else {
                self.skipped += 1; // section index out of bounds
                continue;
            };
            if section.kind == SHT_NOBITS {
                continue; // no bytes in the file
            }
            if u64::from(s.name) >= t.strings.size || self.funcs.len() >= MAX_SYMBOLS {
                self.skipped += 1;
                continue;
            }
            let start = s.value.wrapping_sub(section.addr).wrapping_add(section.offset);
            self.funcs.push(Func { start, size: s.size, name: s.name, table });
        }
        Ok(())
    }

    /// Sorts by start; at each start keeps `.symtab` before `.dynsym`, then the largest
    /// size, then the smallest name; drops `.dynsym` functions inside a `.symtab` one.
    fn sort_and_dedup(&mut self) -> Result<(), SymtabError> {
        self.funcs.sort_unstable_by_key(|f| (f.start, f.table, Reverse(f.size), f.name));
        let mut names = NameReader::new(self.elf.reader(), self.strings);
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
    pub fn functions<'a>(&'a self, skipped: &'a std::cell::Cell<u64>) -> impl Iterator<Item = Result<SymbolFn, SymtabError>> + 'a {
        let mut names = NameReader::new(self.elf.reader(), self.strings);
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
            Err(e) => Some(Err(e.into())),
        })
    }
}

/// Reads NUL-terminated names from the two string tables, each through a small window
/// ([`tailprof_elf::StringTable`]: names of neighbouring functions are often neighbours),
/// and counts the names that cannot be read.
struct NameReader<'f> {
    tables: [StringTable<'f, File>; 2],
    skipped: u64,
}

impl<'f> NameReader<'f> {
    fn new(file: &'f File, strings: [(u64, u64); 2]) -> Self {
        let t = |(off, size)| StringTable::new(file, off, size).with_limits(tailprof_elf::NAME_WINDOW, MAX_NAME_BYTES);
        NameReader { tables: [t(strings[0]), t(strings[1])], skipped: 0 }
    }

    /// The name at `name` in `table`'s strings; `None` (counted) if it is out of bounds,
    /// unterminated or longer than [`MAX_NAME_BYTES`].
    fn get(&mut self, table: u8, name: u32) -> Result<Option<&[u8]>, tailprof_elf::Error> {
        let r = self.tables[table as usize].get(name.into())?;
        if r.is_none() {
            self.skipped += 1;
        }
        Ok(r)
    }
}

/// Writes the function table of the ELF file `file` to `dest` (a `symbols` file of the
/// store), streamed: see the module documentation.
pub fn write_elf_table(file: &File, build_id: &str, binary: &str, dest: &Path) -> Result<TableWritten, SymtabError> {
    write_elf_table_paced(file, build_id, binary, dest, &mut || Ok(()))
}

/// [`write_elf_table`], calling `pace` every [`PACE_EVERY`] symbols read and functions
/// written (the agent's symbolizer checks its CPU budget and the agent's stop there, during
/// a job: issue 19 finding 5). An `Err` from `pace` stops the job; no file is left.
pub fn write_elf_table_paced(file: &File, build_id: &str, binary: &str, dest: &Path, pace: Pace) -> Result<TableWritten, SymtabError> {
    let funcs = ElfFunctions::read_paced(file, pace)?;
    let skipped = std::cell::Cell::new(funcs.skipped());
    let mut n = 0usize;
    // The store sees a failed item as text; what stopped the write is kept typed here.
    let mut failed = None;
    let paced = funcs.functions(&skipped).map(|f| {
        n += 1;
        let f = if n % PACE_EVERY == 0 { pace().map_err(SymtabError::from).and(f) } else { f };
        f.map_err(|e| {
            let text = e.to_string();
            failed = Some(e);
            text
        })
    });
    let written = tailprof_store::write::write_symbol_table(dest, build_id, binary, paced);
    let (bytes, rows) = match (written, failed) {
        (Ok(w), _) => w,
        (Err(_), Some(e)) => return Err(e),
        (Err(e), None) => return Err(e.into()),
    };
    Ok(TableWritten { functions: rows, skipped: skipped.get(), bytes })
}

/// The kernel's text functions from a kallsyms file (`ADDR TYPE NAME [MODULE]`), as
/// (offset from `_text`, size up to the next, name), sorted, module symbols left out.
/// Offsets from `_text` stay valid across KASLR.
pub fn kallsyms_functions(f: File) -> Result<Vec<(u64, u64, Box<str>)>, SymtabError> {
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
    let text = text.filter(|&t| t != 0).ok_or(SymtabError::KallsymsHidden)?;
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
pub fn write_kallsyms_table(f: File, build_id: &str, binary: &str, dest: &Path) -> Result<TableWritten, SymtabError> {
    let syms = kallsyms_functions(f)?;
    let it = syms.into_iter().map(|(start, size, name)| Ok::<_, std::convert::Infallible>(SymbolFn { start, size, name: name.into() }));
    let (bytes, rows) = tailprof_store::write::write_symbol_table(dest, build_id, binary, it)?;
    Ok(TableWritten { functions: rows, skipped: 0, bytes })
}

/// The table the agent built before it streamed: blazesym's `Inspector::for_each` over the
/// ELF symbol tables, whole in memory, as (start, size, demangled name) sorted by start.
/// Kept as the reference the tests (and `symtab_peak --blazesym`) compare with; it fails
/// on files [`write_elf_table`] handles (e.g. a symbol whose section index is out of
/// bounds).
pub fn reference_table(path: &str) -> Result<Vec<(u64, u64, String)>, SymtabError> {
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
            .map_err(|e| SymtabError::Reference(e.to_string()))?;
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
        assert!(matches!(kallsyms_functions(File::open(&p).unwrap()), Err(SymtabError::KallsymsHidden)));
    }
}
