//! The ELF header, section headers and program headers, and [`Elf`] itself.

use crate::read::read_prefix;
use crate::*;

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
        if self.big_endian {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }
    pub fn u32(self, b: &[u8], at: usize) -> u32 {
        let a = Self::bytes(b, at);
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
    pub fn u64(self, b: &[u8], at: usize) -> u64 {
        let a = Self::bytes(b, at);
        if self.big_endian {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        }
    }
    /// An address-sized field (`Addr`, `Off`, `Xword`/`Word`) at the class's offset.
    pub fn word(self, b: &[u8], at32: usize, at64: usize) -> u64 {
        if self.is64 {
            self.u64(b, at64)
        } else {
            u64::from(self.u32(b, at32))
        }
    }
    /// Size of one section header.
    pub fn section_header_size(self) -> usize {
        if self.is64 {
            64
        } else {
            40
        }
    }
    /// Size of one program header.
    pub fn program_header_size(self) -> usize {
        if self.is64 {
            56
        } else {
            32
        }
    }
    /// Size of one symbol.
    pub fn symbol_size(self) -> usize {
        if self.is64 {
            24
        } else {
            16
        }
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
    pub(crate) fn parse(c: Class, b: &[u8]) -> Self {
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
    pub(crate) fn parse(c: Class, b: &[u8]) -> Self {
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

/// An ELF file: its header and section headers (bounded), the rest read on demand.
#[derive(Debug)]
pub struct Elf<R> {
    pub(crate) r: R,
    pub(crate) len: u64,
    pub(crate) header: Header,
    pub(crate) sections: Vec<SectionHeader>,
    pub(crate) shstrndx: Option<usize>,
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
    pub(crate) fn program_headers_after(&self, s0: Option<&SectionHeader>) -> Result<ProgramHeaders<'_, R>> {
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
}

/// Entries of a fixed-size table read in chunks into one buffer of at most
/// [`CHUNK_ENTRIES`] entries.
#[derive(Debug)]
pub(crate) struct Chunked {
    offset: u64,
    stride: usize,
    pub(crate) count: u64,
    buf: Vec<u8>,
    pub(crate) first: u64,
    pub(crate) n: usize,
}

impl Chunked {
    pub(crate) fn new(offset: u64, stride: usize, count: u64) -> Self {
        Chunked { offset, stride, count, buf: Vec::new(), first: 0, n: 0 }
    }

    /// Entry `i` (`i < count`), reading the chunk that starts at it when it is not
    /// buffered.
    pub(crate) fn entry<R: ReadAt + ?Sized>(&mut self, r: &R, i: u64) -> Result<&[u8]> {
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
