//! Symbolization: (binary, file offset) and kernel addresses to function names.
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
//! Kernel addresses are named from a kallsyms file (`/proc/kallsyms` by default) only
//! when it shows real addresses and the trace plausibly comes from the running kernel
//! (same release, same host, same boot id when the trace records one in
//! `TraceHeader::extra["boot_id"]`, and `_text` at the address the trace's
//! `[kernel.kallsyms]` mapping recorded: otherwise KASLR moved the kernel since).

use std::borrow::Cow;
use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Reason, Symbolized};
use blazesym::MaybeDefault;
use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::TraceHeader;

use crate::maps::{Binary, BinaryKind};

/// Which kernel symbols to use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KernelSymbols {
    /// `/proc/kallsyms` when readable with real addresses and the trace comes from the
    /// running kernel.
    #[default]
    Auto,
    /// Never name kernel addresses (they all fold into `[kernel]`).
    Off,
    /// This kallsyms file (e.g. saved on the traced machine), used without the
    /// same-kernel checks.
    Kallsyms(PathBuf),
}

/// Symbolizer configuration.
#[derive(Debug, Clone)]
pub struct SymbolizerOptions {
    pub kernel: KernelSymbols,
    /// Consult DWARF (embedded, `.dwp`, or via debug link) besides ELF symbols.
    pub debug_syms: bool,
    /// Extra directories to look for split debug info in; `None`: blazesym's defaults
    /// (`/usr/lib/debug`, `/lib/debug`).
    pub debug_dirs: Option<Vec<PathBuf>>,
    /// Demangle C++ and Rust names.
    pub demangle: bool,
    /// Compare build-ids of files on disk with those in the trace.
    pub check_build_id: bool,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        SymbolizerOptions {
            kernel: KernelSymbols::Auto,
            debug_syms: true,
            debug_dirs: None,
            demangle: true,
            check_build_id: true,
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

/// Hex spelling of a build-id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone)]
enum KernelState {
    Usable(PathBuf),
    Unusable(String),
}

/// What a trace says about the kernel it ran on (to decide whether this machine's
/// kernel symbols apply).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelOrigin {
    pub os_release: Option<String>,
    pub hostname: Option<String>,
    /// `TraceHeader::extra["boot_id"]`, when the recorder stored it.
    pub boot_id: Option<String>,
    /// Address of `_text` at record time (from the `[kernel.kallsyms]` mapping).
    pub text_addr: Option<u64>,
}

impl KernelOrigin {
    pub fn new(header: &TraceHeader, text_addr: Option<u64>) -> Self {
        KernelOrigin {
            os_release: header.os_release.clone(),
            hostname: header.hostname.clone(),
            boot_id: header.extra.get("boot_id").cloned(),
            text_addr,
        }
    }
}

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
    vdso: Option<Result<tempfile::NamedTempFile, String>>,
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
        let mut b = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(false)
            .enable_inlined_fns(false)
            // We demangle once per distinct name (NameTable), not once per address.
            .enable_demangling(false);
        if let Some(dirs) = &opts.debug_dirs {
            b = b.set_debug_dirs(Some(dirs.as_slice()));
        }
        Symbolizer {
            inner: b.build(),
            names: NameTable::new(opts.demangle),
            opts,
            file_checks: FxHashMap::default(),
            origin: KernelOrigin::default(),
            kernel: None,
            vdso: None,
        }
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
                return Some(if path.ends_with(" (deleted)") {
                    UnknownReason::BinaryDeleted
                } else {
                    UnknownReason::BinaryMissing
                })
            }
            Err(e) => return Some(UnknownReason::Unreadable { error: e.to_string() }),
        }
        if let (true, Some(expected)) = (self.opts.check_build_id, trace_build_id) {
            match blazesym::helper::read_elf_build_id(Path::new(path)) {
                Ok(Some(found)) if found.as_ref() == expected => {}
                Ok(found) => {
                    return Some(UnknownReason::BuildIdMismatch {
                        trace: hex(expected),
                        disk: found.map(|b| hex(&b)),
                    })
                }
                Err(e) => return Some(UnknownReason::Unreadable { error: e.to_string() }),
            }
        }
        None
    }

    /// Name the file offsets `offsets` of `binary` (one result per offset, same order).
    /// `trace_build_id` is the build-id the trace recorded for it, if any (the
    /// binary's own, or one from the trace's build-id table).
    pub fn symbolize_binary(
        &mut self,
        binary: &Binary,
        trace_build_id: Option<&[u8]>,
        offsets: &[u64],
    ) -> Vec<SymResult> {
        let ids = self.symbolize_binary_ids(binary, trace_build_id, offsets);
        self.to_strings(ids)
    }

    /// Like [`Symbolizer::symbolize_binary`], answering [`NameId`]s (see
    /// [`Symbolizer::name`]): no string per address.
    pub fn symbolize_binary_ids(
        &mut self,
        binary: &Binary,
        trace_build_id: Option<&[u8]>,
        offsets: &[u64],
    ) -> Vec<SymIdResult> {
        let all = |r: UnknownReason| offsets.iter().map(|_| Err(r.clone())).collect();
        match binary.kind {
            BinaryKind::File => {}
            BinaryKind::Anon => return all(UnknownReason::Anonymous),
            BinaryKind::Vdso if binary.path == "[vdso]" => return self.symbolize_vdso(offsets),
            BinaryKind::Vdso => return all(UnknownReason::NotOnDisk),
            BinaryKind::Unmapped => return all(UnknownReason::Unmapped),
            BinaryKind::Guest => return all(UnknownReason::Guest),
            BinaryKind::Kernel | BinaryKind::KernelModule => {
                return all(UnknownReason::Other { why: "kernel address passed as file offset".into() })
            }
        }
        if let Some(r) = self.check_file(&binary.path, trace_build_id) {
            return all(r);
        }
        let src = Source::Elf(Elf { debug_syms: self.opts.debug_syms, ..Elf::new(&binary.path) });
        match self.inner.symbolize(&src, Input::FileOffset(offsets)) {
            Ok(syms) => intern_all(&mut self.names, &syms),
            Err(e) => all(UnknownReason::Unreadable { error: e.to_string() }),
        }
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

    /// Name kernel addresses (one result per address, same order), if the kallsyms
    /// file applies to the trace (see [`Symbolizer::set_origin`]).
    pub fn symbolize_kernel(&mut self, addrs: &[u64]) -> Vec<SymResult> {
        let ids = self.symbolize_kernel_ids(addrs);
        self.to_strings(ids)
    }

    /// Like [`Symbolizer::symbolize_kernel`], answering [`NameId`]s.
    pub fn symbolize_kernel_ids(&mut self, addrs: &[u64]) -> Vec<SymIdResult> {
        let state = self.kernel_state().clone();
        let path = match state {
            KernelState::Usable(p) => p,
            KernelState::Unusable(why) => {
                return addrs
                    .iter()
                    .map(|_| Err(UnknownReason::KernelSymbolsUnavailable { why: why.clone() }))
                    .collect()
            }
        };
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Some(path),
            vmlinux: MaybeDefault::None,
            kaslr_offset: Some(0),
            debug_syms: false,
            ..Default::default()
        });
        match self.inner.symbolize(&src, Input::AbsAddr(addrs)) {
            Ok(syms) => intern_all(&mut self.names, &syms),
            Err(e) => {
                let why = format!("kallsyms: {e}");
                addrs.iter().map(|_| Err(UnknownReason::KernelSymbolsUnavailable { why: why.clone() })).collect()
            }
        }
    }

    /// `Ok(path)` of the kallsyms file that will be used, or why kernel addresses will
    /// not be named.
    pub fn kernel_symbols_status(&mut self) -> Result<PathBuf, String> {
        match self.kernel_state() {
            KernelState::Usable(p) => Ok(p.clone()),
            KernelState::Unusable(w) => Err(w.clone()),
        }
    }

    fn kernel_state(&mut self) -> &KernelState {
        let origin = &self.origin;
        if self.kernel.is_none() {
            let st = match &self.opts.kernel {
                KernelSymbols::Off => KernelState::Unusable("disabled".into()),
                KernelSymbols::Kallsyms(p) => match check_kallsyms(p, origin.text_addr) {
                    Ok(()) => KernelState::Usable(p.clone()),
                    Err(w) => KernelState::Unusable(w),
                },
                KernelSymbols::Auto => {
                    let p = PathBuf::from("/proc/kallsyms");
                    match same_kernel(origin).and_then(|()| check_kallsyms(&p, origin.text_addr)) {
                        Ok(()) => KernelState::Usable(p),
                        Err(w) => KernelState::Unusable(w),
                    }
                }
            };
            self.kernel = Some(st);
        }
        self.kernel.as_ref().expect("set above")
    }
}

/// Intern the names of one batch. Consecutive addresses in the same symbol (same start
/// address and raw name; batches are sorted by address) reuse the previous id without
/// a hash lookup.
fn intern_all(names: &mut NameTable, syms: &[Symbolized<'_>]) -> Vec<SymIdResult> {
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

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// `Ok` unless the trace demonstrably comes from another kernel, host or boot.
fn same_kernel(origin: &KernelOrigin) -> Result<(), String> {
    if let (Some(t), Some(here)) = (&origin.os_release, read_trimmed("/proc/sys/kernel/osrelease")) {
        // Accept a full `uname -a`-like string too: the release must appear in it.
        if t.trim() != here && !t.split_whitespace().any(|w| w == here) {
            return Err(format!("trace is from kernel {t:?}, running kernel is {here:?}"));
        }
    }
    if let (Some(t), Some(here)) = (&origin.hostname, read_trimmed("/proc/sys/kernel/hostname")) {
        if t.trim() != here {
            return Err(format!("trace is from host {t:?}, this is {here:?}"));
        }
    }
    if let (Some(t), Some(here)) = (&origin.boot_id, read_trimmed("/proc/sys/kernel/random/boot_id")) {
        if t.trim() != here {
            return Err("trace is from an earlier boot (kernel addresses moved)".into());
        }
    }
    Ok(())
}

/// Copy this process's vDSO image (as mapped: the vDSO is mapped whole, so memory
/// offsets are file offsets) into a temporary file blazesym can open.
fn copy_own_vdso() -> Result<tempfile::NamedTempFile, String> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let maps = fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).ok_or("this process has no vDSO")?;
    let range = line.split_whitespace().next().unwrap_or("");
    let (a, b) = range.split_once('-').ok_or("bad /proc/self/maps line")?;
    let parse = |x: &str| u64::from_str_radix(x, 16).map_err(|e| format!("bad /proc/self/maps line: {e}"));
    let (start, end) = (parse(a)?, parse(b)?);
    let len = usize::try_from(end.saturating_sub(start)).map_err(|e| e.to_string())?;
    let mut image = vec![0u8; len];
    let mut mem = fs::File::open("/proc/self/mem").map_err(|e| format!("/proc/self/mem: {e}"))?;
    mem.seek(SeekFrom::Start(start)).and_then(|_| mem.read_exact(&mut image)).map_err(|e| format!("reading the vDSO: {e}"))?;
    if !image.starts_with(b"\x7fELF") {
        return Err("the vDSO mapping is not an ELF image".into());
    }
    let mut f = tempfile::Builder::new().prefix("tailprof-vdso-").suffix(".so").tempfile().map_err(|e| e.to_string())?;
    f.write_all(&image).map_err(|e| e.to_string())?;
    Ok(f)
}

/// `Ok` if `path` is a readable kallsyms file showing real (non-zero) addresses and,
/// when `text_addr` is known, placing `_text` there (else the kernel was relocated
/// since the trace was taken: KASLR after a reboot).
fn check_kallsyms(path: &Path, text_addr: Option<u64>) -> Result<(), String> {
    let f = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut nonzero = false;
    let mut lines = 0usize;
    for line in BufReader::new(f).lines() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        lines += 1;
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let addr = u64::from_str_radix(addr, 16).unwrap_or(0);
        nonzero |= addr != 0;
        match text_addr {
            Some(want) if name == "_text" => {
                if addr == 0 {
                    break;
                }
                if addr != want {
                    return Err(format!(
                        "kernel was relocated since the trace was taken (_text at {want:#x} then, {addr:#x} in {})",
                        path.display()
                    ));
                }
                return Ok(());
            }
            None if nonzero => return Ok(()),
            _ if lines >= 64 && !nonzero => break,
            _ => {}
        }
    }
    if lines == 0 {
        Err(format!("{} is empty", path.display()))
    } else if !nonzero {
        Err(format!("{} shows zero addresses (kernel.kptr_restrict, or not root)", path.display()))
    } else {
        // Real addresses but no `_text` to compare with: trust it.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
    fn kallsyms_file_with_zero_addresses_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(f, "0000000000000000 T _text\n0000000000000000 T foo").unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions {
            kernel: KernelSymbols::Kallsyms(p.clone()),
            ..Default::default()
        });
        let r = s.symbolize_kernel(&[0xffff_ffff_8100_0010]);
        assert!(matches!(&r[0], Err(UnknownReason::KernelSymbolsUnavailable { why }) if why.contains("zero")));
    }

    #[test]
    fn kallsyms_file_names_kernel_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(
            f,
            "ffffffff81000000 T _text\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffff81000300 T _etext"
        )
        .unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions {
            kernel: KernelSymbols::Kallsyms(p.clone()),
            ..Default::default()
        });
        let addrs = [0xffff_ffff_8100_0110, 0xffff_ffff_8100_0204];
        let r = s.symbolize_kernel(&addrs);
        assert_eq!(r[0].as_deref(), Ok("do_work"));
        assert_eq!(r[1].as_deref(), Ok("helper"));
        // Same _text as at record time: fine. Another one: relocated, refused.
        s.set_origin(KernelOrigin { text_addr: Some(0xffff_ffff_8100_0000), ..Default::default() });
        assert_eq!(s.symbolize_kernel(&addrs)[0].as_deref(), Ok("do_work"));
        s.set_origin(KernelOrigin { text_addr: Some(0xffff_ffff_a200_0000), ..Default::default() });
        let r = s.symbolize_kernel(&addrs);
        assert!(matches!(&r[0], Err(UnknownReason::KernelSymbolsUnavailable { why }) if why.contains("relocated")), "{r:?}");
    }

    #[test]
    fn other_kernel_release_is_refused() {
        let header = TraceHeader { os_release: Some("0.0.1-not-this-one".into()), ..Default::default() };
        let mut s = Symbolizer::default();
        s.set_origin(KernelOrigin::new(&header, None));
        let st = s.kernel_symbols_status();
        assert!(st.unwrap_err().contains("0.0.1-not-this-one"));
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
        let Ok(copy) = copy_own_vdso() else { return };
        // Find an exported function of the vDSO and check its offset names it.
        let syms = std::process::Command::new("nm").arg("-D").arg(copy.path()).output();
        let Ok(out) = syms else { return };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let Some((addr, name)) = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| (u64::from_str_radix(f[0], 16).ok(), f[2].to_owned()))
        }) else {
            return;
        };
        let Some(addr) = addr else { return };
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
