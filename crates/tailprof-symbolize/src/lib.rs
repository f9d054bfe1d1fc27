//! tailprof analyze stage, symbolization (split out of `tailprof-analyze`, which
//! re-exports it as `tailprof_analyze::symbolize` and `tailprof_analyze::maps`):
//! (binary, file offset) and kernel addresses to function names, and [`maps`], the
//! address spaces over time that give a sample's (binary, offset).
//!
//! Built on [blazesym](https://docs.rs/blazesym): user-space addresses are looked up with
//! `Source::Elf` and `Input::FileOffset` (blazesym maps a file offset to a virtual
//! offset through the ELF's `PT_LOAD` program headers, which makes PIE, non-PIE
//! executables and shared objects work alike); blazesym caches one parsed ELF per path.
//! Callers are expected to pass each binary's *unique* offsets once, in one batch.
//!
//! Failing to name an address is data, not an error: every lookup answers either a name
//! or an [`UnknownReason`]. In particular, when the trace knows the build-id of a binary
//! and the file on disk has another one, we refuse to name its addresses
//! ([`UnknownReason::BuildIdMismatch`]) instead of printing wrong names.
//!
//! Demangling is ours, not blazesym's: blazesym demangles the name of every address it
//! is asked about, so a function hit at 500 addresses would be demangled 500 times. We
//! ask for raw names and intern them in a [`NameTable`]: each distinct raw name is
//! demangled once (same crates and policy as blazesym: Rust first, then C++), and equal
//! demangled names share one [`NameId`].
//!
//! One binary's addresses are named from, in order (docs/SYMBOLS.md):
//! 1. its separate debug file when it has no DWARF of its own ([`debugdir`]: build-id
//!    in `--debug-dir`s then `/usr/lib/debug`, `.gnu_debuglink` with CRC check;
//!    [`debuginfod`] when `DEBUGINFOD_URLS` is set), by virtual address;
//! 2. its own `.symtab`/`.dynsym` (and DWARF), by file offset;
//! 3. its `.eh_frame` function ranges ([`ehframe`]): `fn_<vaddr>`, one name per
//!    function of a stripped binary ([`Symbolizer::is_range_name`]).
//!
//! Files are opened once by our bounded reader (`elf`: `O_NOFOLLOW`, regular files
//! only) and handed to blazesym as `/proc/self/fd/N`, so blazesym reads exactly the
//! file that was checked. [`inline`] gives an address's frames with inlined functions.
//! Kernel addresses (kallsyms) and the vDSO are handled in [`ksyms`].

use std::borrow::Cow;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Reason, Symbolized};
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::maps::{Binary, BinaryKind};

pub mod cache;
mod debugcache;
pub mod debugdir;
pub mod debuginfod;
pub mod ehframe;
mod elf;
mod error;
pub mod inline;
pub mod maps;
/// JIT code ranges: their home is the address-space model ([`tailprof_format::addrspace::jit`]).
pub mod jit {
    pub use tailprof_format::addrspace::jit::*;
    pub use tailprof_format::jit::runtime_advice;
}
pub mod ksyms;
pub mod lines;

pub use debugdir::{DebugFile, FoundBy};
use ehframe::FdeRanges;
use elf::ElfFile;
pub use error::{Error, ErrorKind};
pub use inline::Frame;
use ksyms::{copy_own_vdso, same_kernel, KernelState};
pub use ksyms::{KernelOrigin, KernelSymbols};
pub use lines::{AddrSource, SourceLine};

/// Symbolizer configuration.
#[derive(Debug, Clone)]
pub struct SymbolizerOptions {
    /// Which kernel symbols; default [`KernelSymbols::from_env`] (`$TAILPROF_KALLSYMS`).
    pub kernel: KernelSymbols,
    /// Consult DWARF and separate debug files (found by build-id or `.gnu_debuglink`,
    /// see [`debugdir`]) besides the binary's own ELF symbols.
    pub debug_syms: bool,
    /// Directories searched for separate debug files before the system ones
    /// (`/usr/lib/debug`, `/lib/debug`): `--debug-dir`. `None`: only the system ones.
    pub debug_dirs: Option<Vec<PathBuf>>,
    /// Demangle C++ and Rust names.
    pub demangle: bool,
    /// Compare build-ids of files on disk with those in the trace.
    pub check_build_id: bool,
    /// Where the running kernel's parsed kallsyms and inflated copies of compressed
    /// debug files are kept between runs ([`cache`]); `None`: no cache.
    pub cache_dir: Option<PathBuf>,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            kernel: KernelSymbols::from_env(),
            debug_syms: true,
            debug_dirs: None,
            demangle: true,
            check_build_id: true,
            cache_dir: cache::default_dir(),
        }
    }
}

/// Why an address has no name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum UnknownReason {
    /// No mapping of the process covered the address at the sample's time.
    Unmapped,
    /// Anonymous memory (JIT code, typically).
    Anonymous,
    /// A kernel-provided image such as `[vdso]` that is not on disk.
    NotOnDisk,
    /// Guest or hypervisor code.
    Guest,
    /// The binary was not found on disk.
    BinaryMissing,
    /// The binary was deleted while mapped (`(deleted)` mapping).
    BinaryDeleted,
    /// The binary could not be read or parsed.
    Unreadable { error: String },
    /// The file on disk is not the one that was traced.
    BuildIdMismatch { trace: String, disk: Option<String> },
    /// The binary has no symbols (stripped) and no debug info was found.
    NoSymbols,
    /// The offset is not inside any loadable segment of the file.
    InvalidOffset,
    /// The binary has symbols, but none covers the address.
    NotInSymbols,
    /// Kernel addresses are not named; the string says why.
    KernelSymbolsUnavailable { why: String },
    /// Another reason reported by the symbolizer.
    Other { why: String },
}

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownReason::Unmapped => f.write_str("no mapping covers the address"),
            UnknownReason::Anonymous => f.write_str("anonymous memory (JIT code?)"),
            UnknownReason::NotOnDisk => f.write_str("kernel-provided image, not on disk"),
            UnknownReason::Guest => f.write_str("guest or hypervisor code"),
            UnknownReason::BinaryMissing => f.write_str("binary not found on disk"),
            UnknownReason::BinaryDeleted => f.write_str("binary was deleted while mapped"),
            UnknownReason::Unreadable { error } => write!(f, "cannot read binary: {error}"),
            UnknownReason::BuildIdMismatch { trace, disk: Some(disk) } => {
                write!(f, "build-id mismatch: trace has {trace}, file on disk has {disk}")
            }
            UnknownReason::BuildIdMismatch { trace, disk: None } => {
                write!(f, "build-id mismatch: trace has {trace}, file on disk has none")
            }
            UnknownReason::NoSymbols => f.write_str("stripped: no symbols or debug info"),
            UnknownReason::InvalidOffset => f.write_str("offset outside the file's loadable segments"),
            UnknownReason::NotInSymbols => f.write_str("no symbol covers the address"),
            UnknownReason::KernelSymbolsUnavailable { why } => write!(f, "no kernel symbols: {why}"),
            UnknownReason::Other { why } => f.write_str(why),
        }
    }
}

/// The answer for one address.
pub type SymResult = Result<String, UnknownReason>;

/// Id of a distinct display (demangled) name in a [`Symbolizer`]'s [`NameTable`]
/// (dense, in order of first sight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NameId(pub u32);

/// The answer for one address, as an id into the symbolizer's [`NameTable`].
pub type SymIdResult = Result<NameId, UnknownReason>;

/// Demangle a C++ or Rust symbol name; other names come back unchanged. The policy of
/// blazesym's demangler for symbols of unknown language: Rust (legacy or v0, printed
/// without the hash) first, then C++.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{d:#}"));
    }
    match cpp_demangle::Symbol::new(name).map(|s| s.demangle()) {
        Ok(Ok(d)) => Cow::Owned(d),
        _ => Cow::Borrowed(name),
    }
}

/// Interned function names: raw (mangled) name → [`NameId`] of its display name. Each
/// distinct raw name is demangled once; raw names that demangle alike (C++ complete and
/// base constructors, Rust names differing only in their hash) share one id.
#[derive(Debug, Default)]
pub struct NameTable {
    demangle: bool,
    list: Vec<Box<str>>,
    by_display: FxHashMap<Box<str>, NameId>,
    by_raw: FxHashMap<Box<str>, NameId>,
}

impl NameTable {
    fn new(demangle: bool) -> Self {
        NameTable { demangle, ..Default::default() }
    }

    /// The display name of `id`.
    pub fn get(&self, id: NameId) -> &str {
        &self.list[id.0 as usize]
    }

    /// Distinct display names.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Distinct raw names seen (each demangled once).
    pub fn raw_names(&self) -> usize {
        self.by_raw.len()
    }

    /// The id of raw name `raw`, demangling it on first sight.
    pub fn intern(&mut self, raw: &str) -> NameId {
        if let Some(&id) = self.by_raw.get(raw) {
            return id;
        }
        let display = if self.demangle { demangle(raw) } else { Cow::Borrowed(raw) };
        let id = match self.by_display.get(display.as_ref()) {
            Some(&id) => id,
            None => {
                let id = NameId(self.list.len() as u32);
                self.list.push(display.as_ref().into());
                self.by_display.insert(display.as_ref().into(), id);
                id
            }
        };
        self.by_raw.insert(raw.into(), id);
        id
    }
}

pub use tailprof_format::build_id_hex;

/// Names addresses; keeps blazesym's per-file caches and our per-file checks.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    opts: SymbolizerOptions,
    names: NameTable,
    /// Per (path, trace build-id): `None` if the file may be symbolized, else why not.
    file_checks: FxHashMap<(String, Option<Vec<u8>>), Option<UnknownReason>>,
    origin: KernelOrigin,
    kernel: Option<KernelState>,
    /// A copy of this process's vDSO image (same kernel, same vDSO), made on first use.
    vdso: Option<Result<tempfile::NamedTempFile, Error>>,
    /// Per (path, trace build-id): ELF facts, debug file, `.eh_frame` ranges.
    binaries: FxHashMap<(String, Option<Vec<u8>>), BinaryFacts>,
    /// `.eh_frame` ranges per file ([`ElfFile::identity`]): one table per file, however
    /// many (path, trace build-id) keys name it (another path to it, the trace's build-id
    /// given or not). One entry per binary, like `binaries`.
    fde_tables: FxHashMap<elf::FileIdentity, Arc<FdeRanges>>,
    /// Tables built ([`FdeRanges::from_elf`] calls), for tests.
    #[cfg(test)]
    fde_builds: usize,
    /// Names made up from `.eh_frame` ranges (`fn_4616a0`), not symbols.
    range_names: rustc_hash::FxHashSet<NameId>,
    /// Downloads debug files by build-id (`DEBUGINFOD_URLS`), when enabled.
    debuginfod: Option<debuginfod::Client>,
    /// Inline-frame symbolizer and cache ([`inline`]), made on first use.
    pub(crate) inline: inline::InlineState,
}

/// Where one binary's names come from; see [`Symbolizer::symbol_source`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SymbolSource {
    pub binary: String,
    /// Build-id the trace recorded (hex).
    pub build_id: Option<String>,
    /// One line: "own .symtab", "debug file by build-id in DIR", "stripped: …", "none: why".
    pub source: String,
    /// The separate debug file used, if any.
    pub debug_file: Option<String>,
    /// The binary has a `.symtab` / DWARF of its own.
    pub symtab: bool,
    pub dwarf: bool,
    /// Function ranges in its `.eh_frame` (what names a stripped binary's functions).
    pub eh_frame_ranges: usize,
}

/// What [`Symbolizer`] knows about one binary file.
#[derive(Debug, Default)]
struct BinaryFacts {
    /// `None`: not readable as ELF (then `elf_error` says why).
    elf: Option<ElfFile>,
    elf_error: Option<String>,
    /// Whether the file has DWARF of its own.
    has_dwarf: bool,
    /// Its separate debug file, if one was found, and that file, open.
    debug: Option<DebugFile>,
    debug_elf: Option<ElfFile>,
    /// `.eh_frame` function ranges, read on first need ([`Symbolizer::fde_ranges`]).
    fdes: Option<Arc<FdeRanges>>,
}

impl fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbolizer").field("opts", &self.opts).field("kernel", &self.kernel).finish()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new(SymbolizerOptions::default())
    }
}

impl Symbolizer {
    pub fn new(opts: SymbolizerOptions) -> Self {
        // Code info and inlined functions on: the stack views' inline frames
        // (`inline.rs`) ask this same instance, so a binary's DWARF (e.g. a compressed
        // separate debug file: 60 ms to inflate libc's) is loaded once, not twice.
        let b = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            // We demangle once per distinct name (NameTable), not once per address.
            .enable_demangling(false)
            // Separate debug files are found by us (debugdir.rs: build-id checked, CRC
            // checked, --debug-dir first) and handed to blazesym by path.
            .set_debug_dirs(Some(NO_DIRS));
        Symbolizer {
            inner: b.build(),
            names: NameTable::new(opts.demangle),
            opts,
            file_checks: FxHashMap::default(),
            origin: KernelOrigin::default(),
            kernel: None,
            vdso: None,
            binaries: FxHashMap::default(),
            fde_tables: FxHashMap::default(),
            #[cfg(test)]
            fde_builds: 0,
            range_names: Default::default(),
            debuginfod: None,
            inline: Default::default(),
        }
    }

    /// The symbolizer of the analysis commands: default options, `debug_dirs`
    /// (`--debug-dir`) searched first for separate debug files, and debuginfod when
    /// `DEBUGINFOD_URLS` is set. The string, if any, is a note for the user (e.g.
    /// debuginfod servers that cannot be used).
    pub fn with_debug_dirs(debug_dirs: &[PathBuf]) -> (Symbolizer, Option<String>) {
        let opts = SymbolizerOptions { debug_dirs: (!debug_dirs.is_empty()).then(|| debug_dirs.to_vec()), ..Default::default() };
        let mut s = Symbolizer::new(opts);
        let mut notes: Vec<String> = debug_dirs
            .iter()
            .filter(|d| !d.is_dir())
            .map(|d| format!("--debug-dir {} is not a directory (ignored): check the path", d.display()))
            .collect();
        match s.enable_debuginfod_from_env() {
            Ok(_) => notes.extend(
                s.debuginfod
                    .as_ref()
                    .filter(|c| !c.skipped.is_empty())
                    .map(|c| format!("debuginfod: skipping https:// servers (this build speaks http only): {}", c.skipped.join(" "))),
            ),
            Err(e) => notes.push(format!("debuginfod: {e}")),
        }
        (s, (!notes.is_empty()).then(|| notes.join("; ")))
    }

    /// Fetch debug files from the debuginfod servers in `DEBUGINFOD_URLS` (when set)
    /// for binaries that have no local debug info. Returns whether it is enabled, or why
    /// not (e.g. only `https://` servers, which this build cannot reach).
    pub fn enable_debuginfod_from_env(&mut self) -> Result<bool, Error> {
        match debuginfod::Client::from_env()? {
            Some(c) => {
                self.debuginfod = Some(c);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Use this debuginfod client (tests, or a caller's own configuration).
    pub fn set_debuginfod(&mut self, client: Option<debuginfod::Client>) {
        self.debuginfod = client;
        self.binaries.clear();
    }

    /// Whether `id` is a name made up from an `.eh_frame` range (`fn_4616a0`) rather
    /// than a symbol.
    pub fn is_range_name(&self, id: NameId) -> bool {
        self.range_names.contains(&id)
    }

    /// The separate debug file used for `path`, if one was looked up and found.
    pub fn debug_file(&self, path: &str) -> Option<&DebugFile> {
        self.binaries.iter().find(|((p, _), _)| p == path).and_then(|(_, f)| f.debug.as_ref())
    }

    /// Where the names of binary `path` come from (`tailprof info --symbols`).
    pub fn symbol_source(&mut self, path: &str, trace_build_id: Option<&[u8]>) -> SymbolSource {
        let mut out = SymbolSource { binary: path.to_owned(), build_id: trace_build_id.map(build_id_hex), ..Default::default() };
        // The kernel is named from kallsyms, not from a file at its path (issue 18:
        // `info --symbols` said "binary not found" while `report` named kernel frames).
        if path.starts_with("[kernel") {
            out.source = match self.kernel_symbols_status() {
                Ok(p) => format!("kernel symbols from {} (the running kernel's; names only for a trace of this boot)", p.display()),
                Err(why) => format!("none: kernel symbols unavailable: {why}"),
            };
            return out;
        }
        if let Some(r) = self.check_file(path, trace_build_id) {
            out.source = format!("none: {r}");
            return out;
        }
        let facts = self.facts(path, trace_build_id);
        let Some(elf) = &facts.elf else {
            out.source = format!("none: {}", facts.elf_error.as_deref().unwrap_or("not an ELF file"));
            return out;
        };
        out.symtab = elf.has_data(".symtab");
        out.dwarf = facts.has_dwarf;
        out.eh_frame_ranges = self.fde_ranges(path, trace_build_id).map_or(0, |f| f.len());
        let facts = self.facts(path, trace_build_id);
        if let Some(d) = &facts.debug {
            out.debug_file = Some(d.path.display().to_string());
            out.source = match &d.found_by {
                FoundBy::BuildId(dir) => format!("debug file by build-id in {}", dir.display()),
                FoundBy::DebugLink => "debug file by .gnu_debuglink (CRC checked)".to_owned(),
                FoundBy::Debuginfod(from) => format!("debug file from debuginfod ({from})"),
            };
        } else if out.dwarf {
            out.source = "own .symtab and DWARF".into();
        } else if out.symtab {
            out.source = "own .symtab".into();
        } else if out.eh_frame_ranges > 0 {
            out.source = format!("stripped: .dynsym, else one of {} .eh_frame ranges (fn_ADDR)", out.eh_frame_ranges);
        } else {
            out.source = "stripped: .dynsym only".into();
        }
        out
    }

    /// Facts about binary `path` (cached per path and trace build-id).
    fn facts(&mut self, path: &str, trace_build_id: Option<&[u8]>) -> &mut BinaryFacts {
        let key = (path.to_owned(), trace_build_id.map(<[u8]>::to_vec));
        if !self.binaries.contains_key(&key) {
            let f = self.facts_uncached(path, trace_build_id);
            self.binaries.insert(key.clone(), f);
        }
        self.binaries.get_mut(&key).expect("inserted above")
    }

    /// The `.eh_frame` function ranges of binary `path` (`None`: not readable as ELF),
    /// built once per file: kept in its facts and shared by identity with every other
    /// key naming the same file.
    fn fde_ranges(&mut self, path: &str, trace_build_id: Option<&[u8]>) -> Option<Arc<FdeRanges>> {
        let facts = self.facts(path, trace_build_id);
        if let Some(f) = &facts.fdes {
            return Some(f.clone());
        }
        let elf = facts.elf.as_ref()?;
        let ident = elf.identity();
        let table = match ident.and_then(|i| self.fde_tables.get(&i)) {
            Some(t) => t.clone(),
            None => {
                let elf = self.facts(path, trace_build_id).elf.as_ref()?;
                let t = Arc::new(FdeRanges::from_elf(elf));
                #[cfg(test)]
                {
                    self.fde_builds += 1;
                }
                if let Some(i) = ident {
                    self.fde_tables.insert(i, t.clone());
                }
                t
            }
        };
        self.facts(path, trace_build_id).fdes = Some(table.clone());
        Some(table)
    }

    fn facts_uncached(&mut self, path: &str, trace_build_id: Option<&[u8]>) -> BinaryFacts {
        let elf = match ElfFile::open(Path::new(path)) {
            Ok(elf) => elf,
            Err(e) => return BinaryFacts { elf_error: Some(e.to_string()), ..Default::default() },
        };
        let has_dwarf = elf.has_data(".debug_info");
        let mut facts = BinaryFacts { has_dwarf, ..Default::default() };
        if self.opts.debug_syms && !has_dwarf {
            let own_id = elf.build_id();
            let build_id = trace_build_id.or(own_id.as_deref());
            let link = elf.debuglink();
            let w = debugdir::Wanted { binary: path, build_id, debuglink: link.as_ref().map(|(n, c)| (n.as_str(), *c)) };
            let user = self.opts.debug_dirs.as_deref().unwrap_or(&[]);
            let mut found = debugdir::find_local(user, &w);
            if found.is_none() {
                if let (Some(client), Some(id)) = (&mut self.debuginfod, build_id) {
                    found = client.fetch(id).ok();
                }
            }
            // Keep the file open and check it again through that descriptor: blazesym
            // reads exactly the file that was checked (via /proc/self/fd/N).
            if let Some(d) = found {
                if let Ok(dbg) = ElfFile::open(&d.path) {
                    let ok = match (&d.found_by, build_id, &link) {
                        (FoundBy::DebugLink, _, Some((_, crc))) => dbg.crc32().is_ok_and(|c| c == *crc),
                        (FoundBy::DebugLink, _, None) => false,
                        (_, Some(id), _) => dbg.build_id().as_deref() == Some(id),
                        (_, None, _) => false,
                    };
                    if ok {
                        // Compressed DWARF: blazesym reads an inflated copy, made once
                        // (debugcache.rs), instead of inflating it in every run.
                        let dbg = match &self.opts.cache_dir {
                            Some(dir) => debugcache::inflated_copy(dir, &dbg).unwrap_or(dbg),
                            None => dbg,
                        };
                        facts.debug = Some(d);
                        facts.debug_elf = Some(dbg);
                    }
                }
            }
        }
        facts.elf = Some(elf);
        facts
    }

    /// Say where the trace was taken (default: nothing known, i.e. assume this
    /// machine). Kernel and vDSO symbols of the running kernel are only used when they
    /// can apply to the trace.
    pub fn set_origin(&mut self, origin: KernelOrigin) {
        if origin != self.origin {
            self.origin = origin;
            self.kernel = None;
        }
    }

    pub fn options(&self) -> &SymbolizerOptions {
        &self.opts
    }

    /// The names handed out so far as [`NameId`]s.
    pub fn names(&self) -> &NameTable {
        &self.names
    }

    /// The display name of `id`.
    pub fn name(&self, id: NameId) -> &str {
        self.names.get(id)
    }

    fn to_strings(&self, ids: Vec<SymIdResult>) -> Vec<SymResult> {
        ids.into_iter().map(|r| r.map(|id| self.names.get(id).to_owned())).collect()
    }

    /// Whether the file behind `binary` may be symbolized; `Some(reason)` if not.
    fn check_file(&mut self, path: &str, trace_build_id: Option<&[u8]>) -> Option<UnknownReason> {
        let key = (path.to_owned(), trace_build_id.map(<[u8]>::to_vec));
        if let Some(r) = self.file_checks.get(&key) {
            return r.clone();
        }
        let r = self.check_file_uncached(path, trace_build_id);
        self.file_checks.insert(key, r.clone());
        r
    }

    fn check_file_uncached(&self, path: &str, trace_build_id: Option<&[u8]>) -> Option<UnknownReason> {
        match fs::metadata(path) {
            Ok(md) if md.is_file() => {}
            Ok(_) => return Some(UnknownReason::Unreadable { error: "not a regular file".into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some(if path.ends_with(" (deleted)") { UnknownReason::BinaryDeleted } else { UnknownReason::BinaryMissing })
            }
            Err(e) => return Some(UnknownReason::Unreadable { error: e.to_string() }),
        }
        if let (true, Some(expected)) = (self.opts.check_build_id, trace_build_id) {
            match ElfFile::open(Path::new(path)).map(|e| e.build_id()) {
                Ok(Some(found)) if found == expected => {}
                Ok(found) => {
                    return Some(UnknownReason::BuildIdMismatch { trace: build_id_hex(expected), disk: found.map(|b| build_id_hex(&b)) })
                }
                Err(e) => return Some(UnknownReason::Unreadable { error: e.to_string() }),
            }
        }
        None
    }

    /// Name the file offsets `offsets` of `binary` (one result per offset, same order).
    /// `trace_build_id` is the build-id the trace recorded for it, if any (the
    /// binary's own, or one from the trace's build-id table).
    pub fn symbolize_binary(&mut self, binary: &Binary, trace_build_id: Option<&[u8]>, offsets: &[u64]) -> Vec<SymResult> {
        let ids = self.symbolize_binary_ids(binary, trace_build_id, offsets);
        self.to_strings(ids)
    }

    /// Like [`Symbolizer::symbolize_binary`], answering [`NameId`]s (see
    /// [`Symbolizer::name`]): no string per address.
    pub fn symbolize_binary_ids(&mut self, binary: &Binary, trace_build_id: Option<&[u8]>, offsets: &[u64]) -> Vec<SymIdResult> {
        self.symbolize_binary_inner(binary, trace_build_id, offsets, None)
    }

    /// Like [`Symbolizer::symbolize_binary_ids`], with each address's source lines from
    /// DWARF ([`lines`]: its own line and its function's first line), asked in the same
    /// lookups; [`AddrSource::default`] where the binary has no line info.
    pub fn symbolize_binary_sources(
        &mut self,
        binary: &Binary,
        trace_build_id: Option<&[u8]>,
        offsets: &[u64],
    ) -> (Vec<SymIdResult>, Vec<AddrSource>) {
        let mut sources = vec![AddrSource::default(); offsets.len()];
        let ids = self.symbolize_binary_inner(binary, trace_build_id, offsets, Some(&mut sources));
        (ids, sources)
    }

    fn symbolize_binary_inner(
        &mut self,
        binary: &Binary,
        trace_build_id: Option<&[u8]>,
        offsets: &[u64],
        mut sources: Option<&mut [AddrSource]>,
    ) -> Vec<SymIdResult> {
        let all = |r: UnknownReason| offsets.iter().map(|_| Err(r.clone())).collect();
        match binary.kind {
            BinaryKind::File => {}
            BinaryKind::Anon => return all(UnknownReason::Anonymous),
            BinaryKind::Jit => return all(UnknownReason::Other { why: "JIT entries are named from the trace's JIT tables".into() }),
            BinaryKind::Vdso if binary.path == "[vdso]" => return self.symbolize_vdso(offsets),
            BinaryKind::Vdso => return all(UnknownReason::NotOnDisk),
            BinaryKind::Unmapped => return all(UnknownReason::Unmapped),
            BinaryKind::Guest => return all(UnknownReason::Guest),
            BinaryKind::Kernel | BinaryKind::KernelModule => {
                return all(UnknownReason::Other { why: "kernel address passed as file offset".into() })
            }
        }
        if let Some(r) = self.check_file(&binary.path, trace_build_id) {
            // Not on this machine (or another build): a copy with the trace's build-id in
            // a debug directory (`DIR/.build-id/ab/cdef….debug`, perf's build-id cache
            // layout) stands in for it, e.g. a trace symbolized on another machine.
            let stand_in = match (&r, trace_build_id) {
                (UnknownReason::BinaryMissing | UnknownReason::BinaryDeleted | UnknownReason::BuildIdMismatch { .. }, Some(id)) => {
                    self.copy_by_build_id(id)
                }
                _ => None,
            };
            return match stand_in {
                Some(path) => self.symbolize_binary_inner(&Binary { path, ..binary.clone() }, trace_build_id, offsets, sources),
                None => all(r),
            };
        }
        let debug_syms = self.opts.debug_syms;
        let facts = self.facts(&binary.path, trace_build_id);
        if let Some(e) = &facts.elf_error {
            return all(UnknownReason::Unreadable { error: e.clone() });
        }
        let has_dwarf = facts.has_dwarf;
        // 1. The separate debug file, by virtual address (its file offsets differ).
        let via_debug = match (&facts.debug_elf, &facts.elf) {
            (Some(dbg), Some(elf)) => Some((dbg.fd_path(), offsets.iter().map(|&o| elf.vaddr_of(o)).collect::<Vec<_>>())),
            _ => None,
        };
        // The binary as checked and opened (no symlink, regular file), not its path again.
        let own_path = facts.elf.as_ref().map_or_else(|| PathBuf::from(&binary.path), ElfFile::fd_path);
        let mut out: Vec<SymIdResult> = match via_debug {
            Some((dbg_path, vaddrs)) => self.symbolize_vaddrs(&dbg_path, &vaddrs, sources.as_deref_mut()),
            None => offsets.iter().map(|_| Err(UnknownReason::NoSymbols)).collect(),
        };
        // 2. The binary's own symbols (and DWARF), for what the debug file did not name.
        let todo: Vec<usize> = (0..offsets.len()).filter(|&i| is_unnamed(&out[i])).collect();
        if !todo.is_empty() {
            let offs: Vec<u64> = todo.iter().map(|&i| offsets[i]).collect();
            let src = Source::Elf(Elf { debug_syms: debug_syms && has_dwarf, ..Elf::new(&own_path) });
            let res = match self.inner.symbolize(&src, Input::FileOffset(&offs)) {
                Ok(syms) => {
                    if let Some(out) = sources {
                        lines::fill_sources(&self.inner, &src, &syms, todo.iter().copied(), out);
                    }
                    intern_all(&mut self.names, &syms)
                }
                // E.g. broken DWARF: the ELF symbols alone.
                Err(_) if debug_syms && has_dwarf => {
                    let src = Source::Elf(Elf { debug_syms: false, ..Elf::new(&own_path) });
                    match self.inner.symbolize(&src, Input::FileOffset(&offs)) {
                        Ok(syms) => intern_all(&mut self.names, &syms),
                        Err(e) => offs.iter().map(|_| Err(UnknownReason::Unreadable { error: e.to_string() })).collect(),
                    }
                }
                Err(e) => offs.iter().map(|_| Err(UnknownReason::Unreadable { error: e.to_string() })).collect(),
            };
            for (i, r) in todo.into_iter().zip(res) {
                out[i] = r;
            }
        }
        // 3. Stripped: the `.eh_frame` function range (`fn_4616a0`).
        if out.iter().any(is_unnamed) {
            self.name_by_ranges(&binary.path, trace_build_id, offsets, &mut out);
        }
        out
    }

    /// A file whose build-id note is `id`, found by build-id in the `--debug-dir`s only
    /// (the system debug directories hold debug-only files, which cannot stand in for a
    /// missing binary).
    fn copy_by_build_id(&self, id: &[u8]) -> Option<String> {
        let user = self.opts.debug_dirs.as_deref().unwrap_or(&[]);
        user.iter()
            .find_map(|dir| debugdir::build_id_paths(dir, id).into_iter().find(|p| debugdir::build_id_matches(p, id)))
            .and_then(|p| p.to_str().map(str::to_owned))
    }

    /// Name unnamed results by the `.eh_frame` range holding their address.
    fn name_by_ranges(&mut self, path: &str, trace_build_id: Option<&[u8]>, offsets: &[u64], out: &mut [SymIdResult]) {
        let Some(fdes) = self.fde_ranges(path, trace_build_id) else { return };
        if fdes.is_empty() {
            return;
        }
        let Some(elf) = &self.facts(path, trace_build_id).elf else { return };
        let mut starts: Vec<(usize, u64)> = Vec::new();
        for (i, r) in out.iter().enumerate() {
            if !is_unnamed(r) {
                continue;
            }
            if let Some((start, _)) = elf.vaddr_of(offsets[i]).and_then(|v| fdes.find(v)) {
                starts.push((i, start));
            }
        }
        let mut last: Option<(u64, NameId)> = None;
        for (i, start) in starts {
            let id = match last {
                Some((s, id)) if s == start => id,
                _ => {
                    let id = self.names.intern(&ehframe::range_name(start));
                    self.range_names.insert(id);
                    last = Some((start, id));
                    id
                }
            };
            out[i] = Ok(id);
        }
    }

    /// Name virtual addresses of ELF file `path` (a separate debug file).
    /// With `sources`, their lines too (indexed like `vaddrs`).
    fn symbolize_vaddrs(&mut self, path: &Path, vaddrs: &[Option<u64>], sources: Option<&mut [AddrSource]>) -> Vec<SymIdResult> {
        let known: Vec<u64> = vaddrs.iter().flatten().copied().collect();
        let src = Source::Elf(Elf { debug_syms: self.opts.debug_syms, ..Elf::new(path) });
        let mut res = match self.inner.symbolize(&src, Input::VirtOffset(&known)) {
            Ok(syms) => {
                if let Some(out) = sources {
                    let idx = vaddrs.iter().enumerate().filter(|(_, v)| v.is_some()).map(|(i, _)| i);
                    lines::fill_sources(&self.inner, &src, &syms, idx, out);
                }
                intern_all(&mut self.names, &syms)
            }
            Err(e) => known.iter().map(|_| Err(UnknownReason::Unreadable { error: e.to_string() })).collect(),
        }
        .into_iter();
        vaddrs
            .iter()
            .map(|v| match v {
                Some(_) => res.next().unwrap_or(Err(UnknownReason::NoSymbols)),
                None => Err(UnknownReason::InvalidOffset),
            })
            .collect()
    }

    /// Offsets into the `[vdso]` image, named from this process's vDSO when the trace
    /// comes from the running kernel.
    fn symbolize_vdso(&mut self, offsets: &[u64]) -> Vec<SymIdResult> {
        if self.vdso.is_none() {
            let copy = same_kernel(&self.origin).and_then(|()| copy_own_vdso());
            self.vdso = Some(copy);
        }
        let path = match self.vdso.as_ref().expect("set above") {
            Ok(f) => f.path().to_path_buf(),
            Err(why) => {
                let r = UnknownReason::Other { why: format!("vDSO: {why}") };
                return offsets.iter().map(|_| Err(r.clone())).collect();
            }
        };
        let src = Source::Elf(Elf { debug_syms: false, ..Elf::new(path) });
        match self.inner.symbolize(&src, Input::FileOffset(offsets)) {
            Ok(syms) => intern_all(&mut self.names, &syms),
            Err(e) => offsets.iter().map(|_| Err(UnknownReason::Unreadable { error: e.to_string() })).collect(),
        }
    }
}

/// `unknown_reason` of a function row named by its `.eh_frame` range (`fn_4616a0`).
pub const RANGE_NAME_REASON: &str = "stripped: no symbol, named by its .eh_frame function range";

/// No directories for blazesym's own debug-link search (see [`Symbolizer::new`]).
const NO_DIRS: &[PathBuf] = &[];

/// Whether a result may still be named by a later source.
fn is_unnamed(r: &SymIdResult) -> bool {
    matches!(r, Err(UnknownReason::NoSymbols | UnknownReason::NotInSymbols | UnknownReason::Unreadable { .. }))
}

/// Intern the names of one batch. Consecutive addresses in the same symbol (same start
/// address and raw name; batches are sorted by address) reuse the previous id without
/// a hash lookup.
pub(crate) fn intern_all(names: &mut NameTable, syms: &[Symbolized<'_>]) -> Vec<SymIdResult> {
    let mut last: Option<(u64, &str, NameId)> = None;
    syms.iter()
        .map(|s| match s {
            Symbolized::Sym(sym) if !sym.name.is_empty() => {
                let raw: &str = &sym.name;
                match last {
                    Some((addr, name, id)) if addr == sym.addr && name == raw => Ok(id),
                    _ => {
                        let id = names.intern(raw);
                        last = Some((sym.addr, raw, id));
                        Ok(id)
                    }
                }
            }
            other => Err(unknown_reason(other)),
        })
        .collect()
}

fn unknown_reason(s: &Symbolized<'_>) -> UnknownReason {
    match s {
        Symbolized::Sym(_) => UnknownReason::NotInSymbols,
        Symbolized::Unknown(r) => match r {
            Reason::MissingSyms => UnknownReason::NoSymbols,
            Reason::InvalidFileOffset => UnknownReason::InvalidOffset,
            Reason::UnknownAddr => UnknownReason::NotInSymbols,
            Reason::Unmapped => UnknownReason::Unmapped,
            other => UnknownReason::Other { why: other.to_string() },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_and_rust_like_blazesym() {
        assert_eq!(demangle("_ZN2ns7computeEi"), "ns::compute(int)");
        assert_eq!(demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"), "std::vector<int, std::allocator<int> >::push_back(int const&)");
        // Rust legacy and v0 manglings, printed without the hash.
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
        assert_eq!(demangle("_RNvNtCs1234_7mycrate3bar3foo"), "mycrate::bar::foo");
        // C names and things that only look mangled come back as they are.
        for plain in ["main", "_int_malloc", "_Z", "__memcpy_avx512_unaligned_erms", ""] {
            assert!(matches!(demangle(plain), Cow::Borrowed(p) if p == plain), "{plain}");
        }
    }

    #[test]
    fn name_table_demangles_each_raw_name_once_and_merges_equal_names() {
        let mut t = NameTable::new(true);
        // Complete and base object constructors: two symbols, one display name.
        let c1 = t.intern("_ZN3FooC1Ev");
        let c2 = t.intern("_ZN3FooC2Ev");
        assert_eq!(c1, c2);
        assert_eq!(t.get(c1), "Foo::Foo()");
        let f = t.intern("_ZN2ns7computeEi");
        assert_ne!(f, c1);
        assert_eq!(t.intern("_ZN2ns7computeEi"), f);
        assert_eq!(t.get(f), "ns::compute(int)");
        assert_eq!((t.len(), t.raw_names()), (2, 3));
        // Demangling off: raw names are the display names.
        let mut raw = NameTable::new(false);
        let id = raw.intern("_ZN2ns7computeEi");
        assert_eq!(raw.get(id), "_ZN2ns7computeEi");
    }

    #[test]
    fn missing_binary_is_a_reason() {
        let mut s = Symbolizer::default();
        let b = Binary { path: "/nonexistent/bin".into(), build_id: None, kind: BinaryKind::File };
        let r = s.symbolize_binary(&b, None, &[0x10, 0x20]);
        assert_eq!(r, vec![Err(UnknownReason::BinaryMissing), Err(UnknownReason::BinaryMissing)]);
        let b = Binary { path: "//anon".into(), build_id: None, kind: BinaryKind::Anon };
        assert_eq!(s.symbolize_binary(&b, None, &[1]), vec![Err(UnknownReason::Anonymous)]);
    }

    #[test]
    fn vdso_of_the_running_kernel() {
        let mut s = Symbolizer::default();
        let copy = match copy_own_vdso() {
            Ok(c) => c,
            Err(e) => {
                tailprof_testkit::skip(tailprof_testkit::Need::Fact, format_args!("no vDSO copy here: {e}"));
                return;
            }
        };
        // Find an exported function of the vDSO and check its offset names it.
        let syms = std::process::Command::new("nm").arg("-D").arg(copy.path()).output();
        let Ok(out) = syms else {
            tailprof_testkit::skip(tailprof_testkit::Need::Binutils, "no nm");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let Some((addr, name)) = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| (u64::from_str_radix(f[0], 16).ok(), f[2].to_owned()))
        }) else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the vDSO exports no function");
            return;
        };
        let Some(addr) = addr else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "nm printed no address for the vDSO function");
            return;
        };
        let b = Binary { path: "[vdso]".into(), build_id: None, kind: BinaryKind::Vdso };
        // vDSO images link at 0, so the symbol value is the file offset.
        let r = s.symbolize_binary(&b, None, &[addr]);
        let got = r[0].as_deref().unwrap();
        // `clock_getres` and `__vdso_clock_getres` are aliases: either is right.
        let base = name.split('@').next().unwrap();
        assert!(base.ends_with(got) || got.ends_with(base), "{got} vs {name}");
        // Another kernel: not named.
        let mut s2 = Symbolizer::default();
        s2.set_origin(KernelOrigin { os_release: Some("0.0.0-other".into()), ..Default::default() });
        assert!(s2.symbolize_binary(&b, None, &[addr])[0].is_err());
    }

    /// A stripped binary named through two paths (a hard link) and with and without the
    /// trace's build-id: four keys, one `.eh_frame` table, the same `fn_` names.
    #[test]
    fn eh_frame_ranges_are_built_once_per_file() {
        use std::process::Command;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("s.c");
        fs::write(&src, "volatile int sink;\n__attribute__((noinline)) static int helper(int n) { for (int i = 0; i < n; i++) sink += i; return sink; }\nint main(int c, char **v) { return helper(c * 1000); }\n").unwrap();
        let bin = dir.path().join("s");
        let ok = Command::new("gcc").args(["-O2", "-Wl,--build-id", "-o"]).arg(&bin).arg(&src).status().is_ok_and(|s| s.success());
        if !ok {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no gcc");
            return;
        }
        let nm = String::from_utf8(Command::new("nm").arg(&bin).output().unwrap().stdout).unwrap();
        let helper = nm.lines().find(|l| l.ends_with(" helper")).map(|l| u64::from_str_radix(&l[..16], 16).unwrap()).expect("helper in nm");
        assert!(Command::new("strip").arg(&bin).status().unwrap().success());
        let link = dir.path().join("s-link");
        fs::hard_link(&bin, &link).unwrap();
        let elf = ElfFile::open(&bin).unwrap();
        let id = elf.build_id().expect("a build-id");
        let seg = elf.segments.iter().find(|g| helper >= g.vaddr && helper - g.vaddr < g.filesz).expect("segment");
        let off = helper - seg.vaddr + seg.offset;
        let mut s = Symbolizer::new(SymbolizerOptions { cache_dir: None, ..Default::default() });
        let mut names = Vec::new();
        for p in [&bin, &link] {
            let b = Binary { path: p.to_str().unwrap().into(), build_id: None, kind: BinaryKind::File };
            for trace_id in [None, Some(id.as_slice())] {
                names.push(s.symbolize_binary(&b, trace_id, &[off])[0].clone().unwrap());
                assert!(s.symbol_source(&b.path, trace_id).eh_frame_ranges > 0);
            }
        }
        assert_eq!(names, vec![ehframe::range_name(helper); 4]);
        assert_eq!(s.binaries.len(), 4);
        assert_eq!(s.fde_builds, 1);
        // Another file (a copy: its own inode): its own table.
        let copy = dir.path().join("s-copy");
        fs::copy(&bin, &copy).unwrap();
        let b = Binary { path: copy.to_str().unwrap().into(), build_id: None, kind: BinaryKind::File };
        assert_eq!(s.symbolize_binary(&b, None, &[off])[0].as_deref(), Ok(names[0].as_str()));
        assert_eq!(s.fde_builds, 2);
    }

    #[test]
    fn not_an_elf_is_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notelf");
        fs::write(&p, b"hello, this is not an ELF file at all").unwrap();
        let mut s = Symbolizer::default();
        let b = Binary { path: p.to_str().unwrap().into(), build_id: None, kind: BinaryKind::File };
        let r = s.symbolize_binary(&b, None, &[0x10]);
        assert!(matches!(&r[0], Err(UnknownReason::Unreadable { .. })), "{r:?}");
    }
}
