//! Symbol tables (`.symtab`, `.dynsym`, with `.symtab_shndx`), streamed in chunks, and
//! string tables read through a small window.

use crate::file::Chunked;
use crate::*;

/// One symbol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Symbol {
    /// Its index in the table.
    pub index: u64,
    /// Offset of the name in the table's string table.
    pub name: u32,
    pub info: u8,
    pub other: u8,
    pub shndx: u16,
    pub value: u64,
    pub size: u64,
    /// The `.symtab_shndx` entry when `shndx` is `SHN_XINDEX` and the table has one.
    pub xindex: Option<u32>,
}

/// Which section a symbol is defined in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSection {
    /// `SHN_UNDEF`.
    Undefined,
    /// `SHN_ABS`, `SHN_COMMON` and the other reserved indexes (no file offset).
    Reserved(u16),
    /// A section index (possibly out of bounds: check it).
    Index(u32),
    /// `SHN_XINDEX` without an extended index entry.
    MissingExtended,
}

impl Symbol {
    /// `STT_*`.
    pub fn kind(&self) -> u8 {
        self.info & 0xf
    }
    pub fn section(&self) -> SymbolSection {
        match self.shndx {
            SHN_UNDEF => SymbolSection::Undefined,
            SHN_XINDEX => self.xindex.map_or(SymbolSection::MissingExtended, SymbolSection::Index),
            s if s >= SHN_LORESERVE => SymbolSection::Reserved(s),
            s => SymbolSection::Index(u32::from(s)),
        }
    }
    pub(crate) fn parse(c: Class, b: &[u8], index: u64) -> Self {
        let byte = |at: usize| b.get(at).copied().unwrap_or(0);
        let (name, info, other, shndx, value, size) = if c.is64 {
            (c.u32(b, 0), byte(4), byte(5), c.u16(b, 6), c.u64(b, 8), c.u64(b, 16))
        } else {
            (c.u32(b, 0), byte(12), byte(13), c.u16(b, 14), u64::from(c.u32(b, 4)), u64::from(c.u32(b, 8)))
        };
        Symbol { index, name, info, other, shndx, value, size, xindex: None }
    }
}

/// A symbol table (`.symtab` or `.dynsym`) checked to lie within the file, with its string
/// table and its extended section indexes (`.symtab_shndx`), if any.
#[derive(Debug, Clone, Copy)]
pub struct SymbolTable {
    /// Its section index.
    pub index: usize,
    pub header: SectionHeader,
    /// The linked string table.
    pub strings: SectionHeader,
    /// `SHT_SYMTAB_SHNDX` section linked to it (within the file).
    pub extended: Option<SectionHeader>,
    stride: u64,
}

impl SymbolTable {
    /// Entries in the table (including the null symbol 0).
    pub fn len(&self) -> u64 {
        self.header.size / self.stride
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<R: ReadAt> Elf<R> {
    /// The first symbol table of `kind` (`SHT_SYMTAB`, `SHT_DYNSYM`); `None` when there is
    /// none or it is empty.
    pub fn symbol_table(&self, kind: u32) -> Result<Option<SymbolTable>> {
        let Some(index) = self.sections.iter().position(|s| s.kind == kind) else { return Ok(None) };
        if self.sections[index].size == 0 {
            return Ok(None);
        }
        self.symbol_table_at(index).map(Some)
    }

    /// The symbol table in section `index`: its string table must be an `SHT_STRTAB`
    /// section, and both must lie within the file.
    pub fn symbol_table_at(&self, index: usize) -> Result<SymbolTable> {
        let header = *self.sections.get(index).ok_or_else(|| Error::Malformed(format!("no section {index}")))?;
        let link = header.link as usize;
        let strings = self.sections.get(link).filter(|s| s.kind == SHT_STRTAB && link != 0);
        let strings =
            *strings.ok_or_else(|| Error::Malformed(format!("symbol table {index} links to section {link}, not a string table")))?;
        let within = |s: &SectionHeader| s.offset.checked_add(s.size).is_some_and(|end| end <= self.len);
        if !within(&strings) || !within(&header) {
            return Err(Error::Malformed(format!("symbol table {index} or its strings run past the end of the file")));
        }
        for s in [&header, &strings] {
            self.check_table_size(s.size)?;
        }
        let natural = self.class().symbol_size() as u64;
        let stride = match header.entsize {
            0 => natural,
            e if e < natural => return Err(Error::Malformed(format!("symbol table {index}: entry size {e} is smaller than {natural}"))),
            e if e > 1 << 16 => return Err(Error::Malformed(format!("symbol table {index}: entry size {e} is implausible"))),
            e => e,
        };
        let extended = self
            .sections
            .iter()
            .find(|s| s.kind == SHT_SYMTAB_SHNDX && s.link as usize == index)
            .filter(|s| within(s) && self.check_table_size(s.size).is_ok())
            .copied();
        Ok(SymbolTable { index, header, strings, extended, stride })
    }

    /// A table of `size` bytes may be read: at most [`MAX_TABLE_BYTES`], and when larger
    /// than 1 MiB at most [`MAX_SPARSE_RATIO`] times the bytes the file really stores.
    fn check_table_size(&self, size: u64) -> Result<()> {
        if size > MAX_TABLE_BYTES {
            return Err(Error::TooLarge { size, max: MAX_TABLE_BYTES });
        }
        if let Some(real) = self.r.allocated() {
            let max = real.saturating_mul(MAX_SPARSE_RATIO).max(1 << 20);
            if size > max {
                return Err(Error::Malformed(format!(
                    "a table of {size} bytes in a file that stores {real} bytes on disk (sparse): not read"
                )));
            }
        }
        Ok(())
    }

    /// The symbols of `table` in order, read 4,096 at a time (fixed memory).
    /// A failed read is an `Err` item, after which the iterator ends.
    pub fn symbols<'a>(&'a self, table: &SymbolTable) -> Symbols<'a, R> {
        Symbols {
            elf: self,
            table: *table,
            chunk: Chunked::new(table.header.offset, table.stride as usize, table.len()),
            xbuf: Vec::new(),
            xfor: None,
            xhave: None,
            next: 0,
            failed: false,
        }
    }

    /// Symbol `i` of `table` (one small read, two with an extended index).
    pub fn symbol(&self, table: &SymbolTable, i: u64) -> Result<Symbol> {
        if i >= table.len() {
            return Err(Error::Malformed(format!("symbol {i} is beyond the {} of table {}", table.len(), table.index)));
        }
        let ssz = self.class().symbol_size();
        let mut b = [0u8; 24];
        self.read_exact_at(&mut b[..ssz], table.header.offset.saturating_add(i.saturating_mul(table.stride)))?;
        let mut s = Symbol::parse(self.class(), &b[..ssz], i);
        if s.shndx == SHN_XINDEX {
            if let Some(x) = table.extended.filter(|x| x.size / 4 > i) {
                let mut e = [0u8; 4];
                if self.read_exact_at(&mut e, x.offset.saturating_add(i.saturating_mul(4))).is_ok() {
                    s.xindex = Some(self.class().u32(&e, 0));
                }
            }
        }
        Ok(s)
    }

    /// The string table of `table`'s names.
    pub fn strings(&self, table: &SymbolTable) -> StringTable<'_, R> {
        StringTable::new(&self.r, table.strings.offset, table.strings.size)
    }
}

/// Symbols, streamed ([`Elf::symbols`]).
pub struct Symbols<'a, R> {
    elf: &'a Elf<R>,
    table: SymbolTable,
    chunk: Chunked,
    /// The slice of `.symtab_shndx` for the chunk starting at `xfor`: `xhave` entries
    /// (`None`: absent, short or unreadable).
    xbuf: Vec<u8>,
    xfor: Option<u64>,
    xhave: Option<usize>,
    next: u64,
    failed: bool,
}

impl<R: ReadAt> Symbols<'_, R> {
    /// The extended index of symbol `i` (in the buffered chunk).
    fn xindex(&mut self, i: u64) -> Option<u32> {
        let x = self.table.extended?;
        let first = self.chunk.first;
        if self.xfor != Some(first) {
            // the slice of the extended index table matching the chunk
            self.xfor = Some(first);
            let n = self.chunk.n as u64;
            let buf = &mut self.xbuf;
            self.xhave = (|| {
                let off = x.offset.checked_add(first.checked_mul(4)?)?;
                let have = x.size.checked_sub(first.checked_mul(4)?)?.min(n * 4) as usize;
                buf.resize(have, 0);
                read_exact_at(&self.elf.r, buf, off).ok()?;
                Some(have / 4)
            })();
        }
        let k = (i - first) as usize;
        match self.xhave {
            Some(have) if k < have => Some(self.elf.class().u32(&self.xbuf, k * 4)),
            _ => None,
        }
    }
}

impl<R: ReadAt> Iterator for Symbols<'_, R> {
    type Item = Result<Symbol>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.chunk.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let c = self.elf.class();
        let s = match self.chunk.entry(&self.elf.r, i) {
            Ok(b) => Symbol::parse(c, b, i),
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        let mut s = s;
        if s.shndx == SHN_XINDEX {
            s.xindex = self.xindex(i);
        }
        Some(Ok(s))
    }
}

/// NUL-terminated names of one string table, read through a window of [`NAME_WINDOW`]
/// bytes that grows (×4) only until it holds a name's terminator, up to the longest name
/// allowed ([`MAX_NAME_BYTES`], beyond which a name is cut and marked); a window that grew
/// is released after an unusable name.
#[derive(Debug)]
pub struct StringTable<'a, R: ?Sized> {
    r: &'a R,
    offset: u64,
    size: u64,
    window: usize,
    max_name: usize,
    /// The window: valid, its offset in the table, its bytes.
    valid: bool,
    win_at: u64,
    win: Vec<u8>,
}

impl<'a, R: ReadAt + ?Sized> StringTable<'a, R> {
    /// The table of `size` bytes at `offset` of `r` (reads past the file's end are errors).
    pub fn new(r: &'a R, offset: u64, size: u64) -> Self {
        StringTable { r, offset, size, window: NAME_WINDOW, max_name: MAX_NAME_BYTES, valid: false, win_at: 0, win: Vec::new() }
    }

    /// Another window size and longest name.
    pub fn with_limits(mut self, window: usize, max_name: usize) -> Self {
        self.window = window.max(1);
        self.max_name = max_name;
        self
    }

    /// The table's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Every offset at which the NUL-terminated `name` stands in the table (also inside
    /// longer names: linkers share tails, `xmalloc` holds `malloc`), ascending: the table
    /// read once front to back in 64 KiB pieces. For finding one name among many symbols
    /// without a read per symbol (their names are not in the table's order). More than
    /// `max_hits` is [`Error::TooLarge`].
    pub fn find(&self, name: &[u8], max_hits: usize) -> Result<Vec<u64>> {
        const PIECE: usize = 64 << 10;
        if self.size > MAX_TABLE_BYTES {
            return Err(Error::TooLarge { size: self.size, max: MAX_TABLE_BYTES });
        }
        let len = name.len();
        let mut hits = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        // `buf` holds the table from `base`: the last `len` bytes of the piece before (a
        // name across two pieces), then the new piece, whose terminators are checked.
        let mut at = 0u64;
        while at < self.size {
            let keep = buf.len().min(len);
            buf.drain(..buf.len() - keep);
            let base = at - keep as u64;
            let n = (self.size - at).min(PIECE as u64) as usize;
            buf.resize(keep + n, 0);
            read_exact_at(self.r, &mut buf[keep..], self.offset.saturating_add(at))?;
            let mut q = keep;
            while let Some(p) = buf[q..].iter().position(|&b| b == 0) {
                let end = q + p;
                if end >= len && &buf[end - len..end] == name {
                    if hits.len() >= max_hits {
                        return Err(Error::TooLarge { size: hits.len() as u64 + 1, max: max_hits as u64 });
                    }
                    hits.push(base + (end - len) as u64);
                }
                q = end + 1;
            }
            at += n as u64;
        }
        Ok(hits)
    }

    /// The name at offset `at`; `None` if it is out of bounds or unterminated. A name
    /// longer than the longest allowed is cut there and ends in [`TRUNCATED_MARK`]. `Err`
    /// only when the file cannot be read.
    pub fn get(&mut self, at: u64) -> Result<Option<&[u8]>> {
        if at >= self.size {
            return Ok(None);
        }
        if self.valid && at >= self.win_at && at < self.win_at + self.win.len() as u64 {
            let rel = (at - self.win_at) as usize;
            if let Some(p) = self.win[rel..].iter().position(|&b| b == 0) {
                return Ok(Some(&self.win[rel..rel + p]));
            }
        }
        // a new window starting at the name, grown until it holds the terminator
        let mut want = self.window;
        loop {
            let n = (self.size - at).min(want as u64) as usize;
            self.valid = false;
            self.win.resize(n, 0);
            read_exact_at(self.r, &mut self.win, self.offset.saturating_add(at))?;
            self.valid = true;
            self.win_at = at;
            if let Some(p) = self.win.iter().position(|&b| b == 0) {
                return Ok(Some(&self.win[..p]));
            }
            if n as u64 == self.size - at {
                if self.win.len() > self.window {
                    self.win = Vec::new(); // do not keep a huge window
                    self.valid = false;
                }
                return Ok(None);
            }
            if n > self.max_name {
                // Longer than allowed: cut, marked visibly; the window is not reused.
                self.win.truncate(self.max_name);
                self.win.extend_from_slice(TRUNCATED_MARK.as_bytes());
                self.valid = false;
                return Ok(Some(&self.win[..]));
            }
            want = want.saturating_mul(4).min(self.max_name.saturating_add(1));
        }
    }
}
