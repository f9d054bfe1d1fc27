//! tailprof's one ELF reader for files that belong to someone else: a profiled process's
//! executable and libraries, debug files, downloads. Used by the marker attach
//! (`tailprof-collect::markers`), uprobe symbol resolution (`tailprof-collect::uprobe`),
//! build-ids (the one reader, [`Elf::build_id`] / [`file_build_id`]: `PT_NOTE` segments,
//! then `SHT_NOTE` sections, for the recorder's `tailprof-collect-sys::buildid`,
//! symbolization's `tailprof-symbolize::elf` and the unwinder's check), symbolization
//! (`tailprof-symbolize::elf`), the agent's symbol tables (`tailprof-agent::symtab`) and
//! USDT probe notes ([`stapsdt`], for `tailprof-collect::usdt`).
//!
//! Design constraints:
//! - **Nothing is mapped.** Everything is read with `pread` ([`ReadAt`]) from an already
//!   open file (the caller opens it: `O_NOFOLLOW|O_NONBLOCK` or `/proc/PID/map_files`, a
//!   regular file, see docs/SECURITY.md). A file truncated under a mapping would be a
//!   SIGBUS; here a short read is an [`Error`].
//! - **Every size, offset and count from the file is checked** against the file's length
//!   and a cap before anything is allocated, and added or multiplied saturating or
//!   checked. A malformed file is an `Err`, never a panic.
//! - **Memory does not grow with the file** beyond what the caller asks for: the section
//!   table is bounded (`max_sections`), symbols are streamed in chunks of a fixed size
//!   ([`Symbols`]), names are read through a small window ([`StringTable`]), and whole
//!   sections are read only through [`Elf::section_data`] with the caller's cap.
//! - ELF32 and ELF64, both byte orders.
//!
//! ```no_run
//! use tailprof_elf::{Elf, SHT_SYMTAB};
//! let f = std::fs::File::open("/bin/true").unwrap();
//! let elf = Elf::parse(&f).unwrap();
//! if let Some(table) = elf.symbol_table(SHT_SYMTAB).unwrap() {
//!     let mut names = elf.strings(&table);
//!     for sym in elf.symbols(&table) {
//!         let sym = sym.unwrap();
//!         if let Some(name) = names.get(sym.name.into()).unwrap() {
//!             println!("{:#x} {}", sym.value, String::from_utf8_lossy(name));
//!         }
//!     }
//! }
//! ```

use std::fs::File;
use std::io;

pub mod open;
pub mod stapsdt;

pub const SHT_NULL: u32 = 0;
pub const SHT_PROGBITS: u32 = 1;
pub const SHT_SYMTAB: u32 = 2;
pub const SHT_STRTAB: u32 = 3;
pub const SHT_NOTE: u32 = 7;
pub const SHT_NOBITS: u32 = 8;
pub const SHT_DYNSYM: u32 = 11;
pub const SHT_SYMTAB_SHNDX: u32 = 18;
pub const SHT_GNU_HASH: u32 = 0x6fff_fff6;
pub const PT_LOAD: u32 = 1;
pub const PT_NOTE: u32 = 4;
/// Program header flag: the segment is executable.
pub const PF_X: u32 = 1;
/// Note type of the GNU build-id (name `GNU`).
pub const NT_GNU_BUILD_ID: u32 = 3;
/// Longest build-id [`gnu_build_id`] accepts (linkers write 16 or 20 bytes; perf keeps 20).
pub const MAX_BUILD_ID: usize = 64;
pub const STT_OBJECT: u8 = 1;
pub const STT_FUNC: u8 = 2;
pub const STT_GNU_IFUNC: u8 = 10;
pub const SHN_UNDEF: u16 = 0;
pub const SHN_LORESERVE: u16 = 0xff00;
pub const SHN_XINDEX: u16 = 0xffff;
/// `e_phnum` value meaning "the count is in section 0's `sh_info`".
pub const PN_XNUM: u16 = 0xffff;

/// Section headers read at most by [`Elf::parse`] (more than 0xff00 sections need the
/// extended count of section 0; real files stay far below).
pub const MAX_SECTIONS: usize = 200_000;
/// Longest name a [`StringTable`] returns by default: a longer name is cut there and ends
/// in [`TRUNCATED_MARK`] (visibly truncated, issue 19 finding 4: 8,200 symbols sharing one
/// 1 MB name made 8 GB of rows); an unterminated name is `None`.
pub const MAX_NAME_BYTES: usize = 4 << 10;
/// What ends a name cut at the longest allowed ([`StringTable::get`]).
pub const TRUNCATED_MARK: &str = "…[truncated]";
/// Largest symbol, string or extended-index table read ([`Elf::symbol_table_at`],
/// [`StringTable::find`]); real ones stay far below (libLLVM's `.strtab` is ~40 MiB). A
/// table declared larger is an error before anything is read (issue 19, finding 3: a
/// 16 GiB sparse `.strtab` was scanned for 173 s).
pub const MAX_TABLE_BYTES: u64 = 128 << 20;
/// A table larger than 1 MiB must not be larger than this many times the bytes the file
/// really holds on disk (`st_blocks`): a sparse file declaring tables made of holes is
/// refused (compression on disk stays well below this ratio).
pub const MAX_SPARSE_RATIO: u64 = 8;
/// Bytes of a string table a [`StringTable`] reads at once by default (names close
/// together cost one read).
pub const NAME_WINDOW: usize = 4 << 10;
/// Entries read per `pread` while streaming a table (symbols, headers)...
const CHUNK_ENTRIES: usize = 4096;
/// ... and at most this many bytes.
const CHUNK_BYTES: usize = 256 << 10;

/// What went wrong reading an ELF file. Each names the problem; the fix is always "the
/// file is not (or no longer) a well-formed ELF file".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("not an ELF file")]
    NotElf,
    #[error("unsupported ELF class {class} / byte order {data}")]
    Unsupported { class: u8, data: u8 },
    #[error("truncated ELF header")]
    TruncatedHeader,
    /// A structural problem (sizes, counts, links) described in the message.
    #[error("{0}")]
    Malformed(String),
    #[error("range {offset:#x}+{size:#x} is past the end of the file ({len} bytes)")]
    PastEnd { offset: u64, size: u64, len: u64 },
    #[error("{size} bytes is larger than the {max}-byte limit")]
    TooLarge { size: u64, max: u64 },
    #[error("file ends inside the data at offset {offset} (truncated while read?)")]
    Truncated { offset: u64 },
    #[error("read at offset {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Positioned reads (`pread`) and the length, from an open file or (tests) bytes.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// The length now (a file's, from `fstat`).
    fn size(&self) -> io::Result<u64>;
    /// Bytes really stored (a file's `st_blocks` × 512; a sparse file's holes hold none),
    /// when known.
    fn allocated(&self) -> Option<u64> {
        None
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn allocated(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        self.metadata().ok().map(|m| m.blocks().saturating_mul(512))
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Some(rest) = usize::try_from(offset).ok().and_then(|o| self.get(o..)) else { return Ok(0) };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.as_slice().read_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }
    fn allocated(&self) -> Option<u64> {
        (**self).allocated()
    }
}

/// Fills `buf` from `offset`; a short file is [`Error::Truncated`].
pub fn read_exact_at<R: ReadAt + ?Sized>(r: &R, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let at = offset.saturating_add(done as u64);
        match r.read_at(&mut buf[done..], at) {
            Ok(0) => return Err(Error::Truncated { offset }),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(Error::Truncated { offset }),
            Err(source) => return Err(Error::Io { offset, source }),
        }
    }
    Ok(())
}

/// Reads a prefix of the file (up to `buf.len()` bytes); returns how many were read.
fn read_prefix<R: ReadAt + ?Sized>(r: &R, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(Error::Io { offset: n as u64, source }),
        }
    }
    Ok(n)
}

/// ELF class and byte order, and the field readers that depend on them. The readers take
/// a field's offset in a buffer; a field beyond the buffer reads as 0 (never a panic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    pub is64: bool,
    pub big_endian: bool,
}

impl Class {
    fn bytes<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        at.checked_add(N).and_then(|end| b.get(at..end)).and_then(|s| s.try_into().ok()).unwrap_or([0; N])
    }
    pub fn u16(self, b: &[u8], at: usize) -> u16 {
        let a = Self::bytes(b, at);
        if self.big_endian { u16::from_be_bytes(a) } else { u16::from_le_bytes(a) }
    }
    pub fn u32(self, b: &[u8], at: usize) -> u32 {
        let a = Self::bytes(b, at);
        if self.big_endian { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) }
    }
    pub fn u64(self, b: &[u8], at: usize) -> u64 {
        let a = Self::bytes(b, at);
        if self.big_endian { u64::from_be_bytes(a) } else { u64::from_le_bytes(a) }
    }
    /// An address-sized field (`Addr`, `Off`, `Xword`/`Word`) at the class's offset.
    pub fn word(self, b: &[u8], at32: usize, at64: usize) -> u64 {
        if self.is64 { self.u64(b, at64) } else { u64::from(self.u32(b, at32)) }
    }
    /// Size of one section header.
    pub fn section_header_size(self) -> usize {
        if self.is64 { 64 } else { 40 }
    }
    /// Size of one program header.
    pub fn program_header_size(self) -> usize {
        if self.is64 { 56 } else { 32 }
    }
    /// Size of one symbol.
    pub fn symbol_size(self) -> usize {
        if self.is64 { 24 } else { 16 }
    }
}

/// The ELF header's fields (as in the file; the section count and string table index are
/// resolved by [`Elf`]).
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub class: Class,
    pub kind: u16,
    pub machine: u16,
    pub entry: u64,
    pub phoff: u64,
    pub shoff: u64,
    pub phentsize: u16,
    pub phnum: u16,
    pub shentsize: u16,
    pub shnum: u16,
    pub shstrndx: u16,
}

/// One section header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionHeader {
    /// Offset of the name in the section-name string table.
    pub name: u32,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub addralign: u64,
    pub entsize: u64,
}

impl SectionHeader {
    fn parse(c: Class, b: &[u8]) -> Self {
        SectionHeader {
            name: c.u32(b, 0),
            kind: c.u32(b, 4),
            flags: c.word(b, 8, 8),
            addr: c.word(b, 12, 16),
            offset: c.word(b, 16, 24),
            size: c.word(b, 20, 32),
            link: c.u32(b, if c.is64 { 40 } else { 24 }),
            info: c.u32(b, if c.is64 { 44 } else { 28 }),
            addralign: c.word(b, 32, 48),
            entsize: c.word(b, 36, 56),
        }
    }

    /// Whether the section has bytes in the file (not `SHT_NOBITS`, not empty).
    pub fn has_data(&self) -> bool {
        self.kind != SHT_NOBITS && self.size > 0
    }
}

/// One program header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramHeader {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl ProgramHeader {
    fn parse(c: Class, b: &[u8]) -> Self {
        ProgramHeader {
            kind: c.u32(b, 0),
            flags: c.u32(b, if c.is64 { 4 } else { 24 }),
            offset: c.word(b, 4, 8),
            vaddr: c.word(b, 8, 16),
            filesz: c.word(b, 16, 32),
            memsz: c.word(b, 20, 40),
            align: c.word(b, 28, 48),
        }
    }
}

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
    fn parse(c: Class, b: &[u8], index: u64) -> Self {
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

/// An ELF file: its header and section headers (bounded), the rest read on demand.
#[derive(Debug)]
pub struct Elf<R> {
    r: R,
    len: u64,
    header: Header,
    sections: Vec<SectionHeader>,
    shstrndx: Option<usize>,
}

impl<R: ReadAt> Elf<R> {
    /// Reads the header and up to [`MAX_SECTIONS`] section headers.
    pub fn parse(r: R) -> Result<Self> {
        Self::parse_limited(r, MAX_SECTIONS)
    }

    /// Reads the header and the section headers; more than `max_sections` is an error.
    pub fn parse_limited(r: R, max_sections: usize) -> Result<Self> {
        let mut elf = Self::parse_header(r)?;
        elf.read_sections(max_sections)?;
        Ok(elf)
    }

    /// Reads the ELF header only: no section headers ([`Elf::sections`] is empty), for
    /// the program headers of a file whose section table is missing or damaged (a
    /// `PN_XNUM` program header count, kept in section 0, then reads as 0xffff).
    pub fn parse_header(r: R) -> Result<Self> {
        let len = r.size().map_err(|source| Error::Io { offset: 0, source })?;
        let mut eh = [0u8; 64];
        let n = read_prefix(&r, &mut eh)?;
        if n < 52 || &eh[..4] != b"\x7fELF" {
            return Err(Error::NotElf);
        }
        let class = match (eh[4], eh[5]) {
            (c @ (1 | 2), d @ (1 | 2)) => Class { is64: c == 2, big_endian: d == 2 },
            (class, data) => return Err(Error::Unsupported { class, data }),
        };
        if class.is64 && n < 64 {
            return Err(Error::TruncatedHeader);
        }
        let c = class;
        let h = if c.is64 { 52 } else { 40 }; // e_ehsize
        let header = Header {
            class,
            kind: c.u16(&eh, 16),
            machine: c.u16(&eh, 18),
            entry: c.word(&eh, 24, 24),
            phoff: c.word(&eh, 28, 32),
            shoff: c.word(&eh, 32, 40),
            phentsize: c.u16(&eh, h + 2),
            phnum: c.u16(&eh, h + 4),
            shentsize: c.u16(&eh, h + 6),
            shnum: c.u16(&eh, h + 8),
            shstrndx: c.u16(&eh, h + 10),
        };
        Ok(Elf { r, len, header, sections: Vec::new(), shstrndx: None })
    }

    fn read_sections(&mut self, max_sections: usize) -> Result<()> {
        let h = self.header;
        let c = h.class;
        if h.shoff == 0 {
            return Ok(()); // no section table
        }
        let esz = c.section_header_size();
        if usize::from(h.shentsize) < esz {
            return Err(Error::Malformed(format!("section header size {} is smaller than {esz}", h.shentsize)));
        }
        let stride = u64::from(h.shentsize);
        // e_shnum 0: the real count is in section 0's sh_size (more than 0xff00 sections)
        let first = if h.shnum == 0 || h.shstrndx == SHN_XINDEX {
            if h.shoff.saturating_add(esz as u64) > self.len {
                return Err(Error::Malformed("section header 0 is beyond the end of the file".into()));
            }
            let mut b = [0u8; 64];
            read_exact_at(&self.r, &mut b[..esz], h.shoff)?;
            Some(SectionHeader::parse(c, &b))
        } else {
            None
        };
        let count = match (h.shnum, first) {
            (0, Some(s0)) => s0.size,
            (n, _) => u64::from(n),
        };
        if count > max_sections as u64 {
            return Err(Error::Malformed(format!("{count} sections, more than the {max_sections} read")));
        }
        let total = count.saturating_mul(stride);
        if h.shoff.checked_add(total).is_none_or(|end| end > self.len) {
            return Err(Error::Malformed("the section table runs past the end of the file".into()));
        }
        let mut chunk = Chunked::new(h.shoff, stride as usize, count);
        let mut sections = Vec::with_capacity(count as usize);
        for i in 0..count {
            sections.push(SectionHeader::parse(c, chunk.entry(&self.r, i)?));
        }
        let shstrndx = match (h.shstrndx, sections.first()) {
            (SHN_XINDEX, Some(s0)) => s0.link as usize,
            (i, _) => usize::from(i),
        };
        self.shstrndx = Some(shstrndx).filter(|&i| i != 0 && i < sections.len());
        self.sections = sections;
        Ok(())
    }

    /// The reader (the open file).
    pub fn reader(&self) -> &R {
        &self.r
    }

    /// The file's length when it was parsed.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn class(&self) -> Class {
        self.header.class
    }

    /// All section headers (index 0 is the null section).
    pub fn sections(&self) -> &[SectionHeader] {
        &self.sections
    }

    /// Fills `buf` from `offset`, which must lie within the file.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let size = buf.len() as u64;
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(Error::PastEnd { offset, size, len: self.len });
        }
        read_exact_at(&self.r, buf, offset)
    }

    /// `size` bytes at `offset` (within the file, at most `max`).
    pub fn read_vec(&self, offset: u64, size: u64, max: u64) -> Result<Vec<u8>> {
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(Error::PastEnd { offset, size, len: self.len });
        }
        if size > max {
            return Err(Error::TooLarge { size, max });
        }
        let n = usize::try_from(size).map_err(|_| Error::TooLarge { size, max })?;
        let mut buf = vec![0u8; n];
        read_exact_at(&self.r, &mut buf, offset)?;
        Ok(buf)
    }

    /// A section's bytes (at most `max`); a section without file bytes (`SHT_NOBITS`) is
    /// empty.
    pub fn section_data(&self, s: &SectionHeader, max: u64) -> Result<Vec<u8>> {
        if s.kind == SHT_NOBITS {
            return Ok(Vec::new());
        }
        self.read_vec(s.offset, s.size, max)
    }

    /// The section-name string table (empty when there is none).
    pub fn section_names(&self) -> StringTable<'_, R> {
        match self.shstrndx.map(|i| self.sections[i]) {
            Some(s) if s.kind != SHT_NOBITS => StringTable::new(&self.r, s.offset, s.size),
            _ => StringTable::new(&self.r, 0, 0),
        }
    }

    /// The first section named `name`.
    pub fn section_by_name(&self, name: &[u8]) -> Result<Option<(usize, SectionHeader)>> {
        let mut names = self.section_names();
        for (i, s) in self.sections.iter().enumerate() {
            if names.get(s.name.into())? == Some(name) {
                return Ok(Some((i, *s)));
            }
        }
        Ok(None)
    }

    /// The program headers (none when `e_phoff` or the count is 0), read in chunks.
    pub fn program_headers(&self) -> Result<ProgramHeaders<'_, R>> {
        self.program_headers_after(self.sections.first())
    }

    /// [`Elf::program_headers`] with section 0 given (for a `PN_XNUM` count).
    fn program_headers_after(&self, s0: Option<&SectionHeader>) -> Result<ProgramHeaders<'_, R>> {
        let h = self.header;
        let count = match (h.phnum, s0) {
            (PN_XNUM, Some(s0)) => u64::from(s0.info),
            (n, _) => u64::from(n),
        };
        let count = if h.phoff == 0 { 0 } else { count };
        let esz = h.class.program_header_size();
        if count > 0 && usize::from(h.phentsize) < esz {
            return Err(Error::Malformed(format!("program header size {} is smaller than {esz}", h.phentsize)));
        }
        let total = count.saturating_mul(u64::from(h.phentsize));
        if h.phoff.checked_add(total).is_none_or(|end| end > self.len) {
            return Err(Error::Malformed("the program header table runs past the end of the file".into()));
        }
        Ok(ProgramHeaders { elf: self, chunk: Chunked::new(h.phoff, usize::from(h.phentsize), count), next: 0, failed: false })
    }

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
        let strings = *strings.ok_or_else(|| Error::Malformed(format!("symbol table {index} links to section {link}, not a string table")))?;
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

/// Entries of a fixed-size table read in chunks into one buffer of at most
/// [`CHUNK_ENTRIES`] entries.
#[derive(Debug)]
struct Chunked {
    offset: u64,
    stride: usize,
    count: u64,
    buf: Vec<u8>,
    first: u64,
    n: usize,
}

impl Chunked {
    fn new(offset: u64, stride: usize, count: u64) -> Self {
        Chunked { offset, stride, count, buf: Vec::new(), first: 0, n: 0 }
    }

    /// Entry `i` (`i < count`), reading the chunk that starts at it when it is not
    /// buffered.
    fn entry<R: ReadAt + ?Sized>(&mut self, r: &R, i: u64) -> Result<&[u8]> {
        if !(i >= self.first && i < self.first + self.n as u64) {
            let per = CHUNK_ENTRIES.min(CHUNK_BYTES / self.stride.max(1)).max(1);
            let n = self.count.saturating_sub(i).min(per as u64) as usize;
            let bytes = n.saturating_mul(self.stride);
            self.n = 0;
            self.buf.resize(bytes, 0);
            let at = self.offset.saturating_add(i.saturating_mul(self.stride as u64));
            read_exact_at(r, &mut self.buf, at)?;
            self.first = i;
            self.n = n;
        }
        let at = (i - self.first) as usize * self.stride;
        Ok(&self.buf[at..at + self.stride])
    }
}

/// Program headers, streamed ([`Elf::program_headers`]).
pub struct ProgramHeaders<'a, R> {
    elf: &'a Elf<R>,
    chunk: Chunked,
    next: u64,
    failed: bool,
}

impl<R: ReadAt> Iterator for ProgramHeaders<'_, R> {
    type Item = Result<ProgramHeader>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.chunk.count {
            return None;
        }
        let c = self.elf.class();
        let r = self.chunk.entry(&self.elf.r, self.next).map(|b| ProgramHeader::parse(c, b));
        self.next += 1;
        self.failed = r.is_err();
        Some(r)
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
mod alloc_probe;

#[cfg(test)]
mod tests {
    use super::*;

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
            let sections_only = elf_with_notes(c, std::slice::from_ref(&prop), &[(note_aligned(be, 4, b"GNU\0", 1, &[0; 4]), 4), (id(0xbb), 4)]);
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
