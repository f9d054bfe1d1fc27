//! tailprof's one ELF reader for files that belong to someone else: a profiled process's
//! executable and libraries, debug files, downloads. Used by the marker attach
//! (`tailprof-collect::items::markers`), uprobe symbol resolution (`tailprof-collect::items::uprobe`),
//! build-ids (the one reader, [`Elf::build_id`] / [`file_build_id`]: `PT_NOTE` segments,
//! then `SHT_NOTE` sections, for the recorder's `tailprof-collect-sys::buildid`,
//! symbolization's `tailprof-symbolize::elf` and the unwinder's check), symbolization
//! (`tailprof-symbolize::elf`), the agent's symbol tables (`tailprof-agent::symtab`) and
//! USDT probe notes ([`stapsdt`], for `tailprof-collect::items::usdt`).
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

use std::io;

pub mod gobuild;
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

mod file;
mod notes;
mod read;
mod symbols;

pub use file::{Class, Elf, Header, ProgramHeader, ProgramHeaders, SectionHeader};
pub use gobuild::GoBuildInfo;
pub use notes::{file_build_id, gnu_build_id, notes, Note, Notes, MAX_NOTE_BYTES, MAX_NOTE_HEADERS};
pub use read::{read_exact_at, ReadAt};
pub use symbols::{StringTable, Symbol, SymbolSection, SymbolTable, Symbols};

#[cfg(test)]
mod alloc_probe;
