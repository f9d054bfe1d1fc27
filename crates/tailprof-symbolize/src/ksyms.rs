//! Kernel symbols: which kallsyms file may name a trace's kernel addresses, and the
//! copy of the running kernel's vDSO image.
//!
//! Kernel addresses are named from a kallsyms file (`/proc/kallsyms` by default;
//! `TAILPROF_KALLSYMS=off` names none, `TAILPROF_KALLSYMS=FILE` uses FILE without the same-kernel checks) only
//! when it shows real addresses and the trace plausibly comes from the running kernel
//! (same release, same host, same boot id when the trace records one in
//! `TraceHeader::extra["boot_id"]`, and `_text` at the address the trace's
//! `[kernel.kallsyms]` mapping recorded: otherwise KASLR moved the kernel since).
//! The same "is this the running kernel" rule decides whether `[vdso]` addresses may be
//! named from this process's own vDSO image.
//!
//! The kallsyms file is read once per [`Symbolizer`], and only when a trace has kernel
//! addresses to name: one pass both checks it (real addresses, `_text` where the trace
//! saw it) and builds the table (address, name) the lookups search. Reading
//! `/proc/kallsyms` is the kernel formatting ~120,000 lines (≈ 45 ms of system time on
//! our VM); the parse adds a few ms, not blazesym's per-line `String`s and boxed names.
//!
//! So the running kernel's table is also kept in the cache directory ([`super::cache`]):
//! `kallsyms.bin`, a compact sorted table (addresses, name offsets, names) keyed by the
//! boot id, kernel release, `kernel.kptr_restrict` and a hash of the module list
//! (`/proc/modules` names, sizes, states and addresses), so a reboot or a module load or
//! unload makes it stale. It is read back only after full validation (magic, exact
//! key, bounded counts, every name range inside the file, addresses sorted, CRC-32 of
//! the whole); anything else and `/proc/kallsyms` is read again (and the cache
//! rewritten). A cached table answers exactly what the file would.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tailprof_format::TraceHeader;

use super::{NameId, SymIdResult, SymResult, Symbolizer, UnknownReason};
use crate::error::{Error, Result};

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

impl KernelSymbols {
    /// The environment variable that overrides the default ([`Self::from_env`]).
    pub const ENV: &'static str = "TAILPROF_KALLSYMS";

    /// The default for this run: `$TAILPROF_KALLSYMS` = `off` never names kernel
    /// addresses (outputs that must not depend on the machine's kernel, e.g. the pipeline
    /// tests), another non-empty value is a kallsyms file ([`Self::Kallsyms`]); unset or
    /// empty: [`Self::Auto`].
    pub fn from_env() -> Self {
        Self::from_setting(std::env::var_os(Self::ENV).as_deref())
    }

    /// [`Self::from_env`] for a given value of the variable.
    pub fn from_setting(v: Option<&std::ffi::OsStr>) -> Self {
        match v {
            None => KernelSymbols::Auto,
            Some(v) if v.is_empty() => KernelSymbols::Auto,
            Some(v) if v == "off" => KernelSymbols::Off,
            Some(v) => KernelSymbols::Kallsyms(PathBuf::from(v)),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum KernelState {
    Usable(PathBuf, Arc<KsymTable>),
    Unusable(Arc<Error>),
}

/// The symbols of a kallsyms file, sorted by address (equal addresses in file order).
#[derive(Default)]
pub(crate) struct KsymTable {
    /// The file's bytes: names are ranges of it.
    text: Vec<u8>,
    /// (address, name start, name end), sorted by address, stable.
    syms: Vec<(u64, u32, u32)>,
    /// The address of `_text` in the file, if listed (and not zero).
    text_addr: Option<u64>,
}

impl std::fmt::Debug for KsymTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KsymTable").field("symbols", &self.syms.len()).finish()
    }
}

impl KsymTable {
    /// Name of the symbol at or before `addr` (the first of several at one address, as
    /// blazesym's kallsyms resolver answers), `None` below the first symbol.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        let a = self.syms[i].0;
        let first = self.syms[..i].iter().rposition(|s| s.0 != a).map_or(0, |j| j + 1);
        let (_, b, e) = self.syms[first];
        std::str::from_utf8(self.text.get(b as usize..e as usize)?).ok()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.syms.len()
    }
}

/// kallsyms files are a few MB (122,000 lines, 5 MB on a 6.x kernel): refuse anything
/// past this.
const MAX_KALLSYMS_BYTES: u64 = 256 << 20;

/// The cache file of the running kernel's table, in the cache directory.
const CACHE_NAME: &str = "kallsyms.bin";
const CACHE_MAGIC: &[u8; 8] = b"TPKSYM1\n";
/// At most this many symbols in a cache file (the kernel has ~120,000, ~200,000 with
/// many modules).
const MAX_CACHED_SYMS: u64 = 16 << 20;

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

impl Symbolizer {
    /// Name kernel addresses (one result per address, same order), if the kallsyms
    /// file applies to the trace (see [`Symbolizer::set_origin`]).
    pub fn symbolize_kernel(&mut self, addrs: &[u64]) -> Vec<SymResult> {
        let ids = self.symbolize_kernel_ids(addrs);
        self.to_strings(ids)
    }

    /// Like [`Symbolizer::symbolize_kernel`], answering [`NameId`](super::NameId)s.
    pub fn symbolize_kernel_ids(&mut self, addrs: &[u64]) -> Vec<SymIdResult> {
        let table = match self.kernel_state() {
            KernelState::Usable(_, t) => t.clone(),
            KernelState::Unusable(why) => {
                let why = why.to_string();
                return addrs.iter().map(|_| Err(UnknownReason::KernelSymbolsUnavailable { why: why.clone() })).collect();
            }
        };
        let mut last: Option<(&str, NameId)> = None;
        addrs
            .iter()
            .map(|&a| match table.lookup(a) {
                Some(name) => match last {
                    Some((n, id)) if n == name => Ok(id),
                    _ => {
                        let id = self.names.intern(name);
                        last = Some((name, id));
                        Ok(id)
                    }
                },
                None => Err(UnknownReason::NotInSymbols),
            })
            .collect()
    }

    /// `Ok(path)` of the kallsyms file that will be used, or why kernel addresses will
    /// not be named.
    pub fn kernel_symbols_status(&mut self) -> Result<PathBuf, Arc<Error>> {
        match self.kernel_state() {
            KernelState::Usable(p, _) => Ok(p.clone()),
            KernelState::Unusable(w) => Err(w.clone()),
        }
    }

    fn kernel_state(&mut self) -> &KernelState {
        let origin = &self.origin;
        if self.kernel.is_none() {
            let st = match &self.opts.kernel {
                KernelSymbols::Off => KernelState::Unusable(Arc::new(Error::Unavailable("disabled".into()))),
                KernelSymbols::Kallsyms(p) => match load_kallsyms(p, origin.text_addr) {
                    Ok(t) => KernelState::Usable(p.clone(), Arc::new(t)),
                    Err(w) => KernelState::Unusable(Arc::new(w)),
                },
                KernelSymbols::Auto => {
                    let p = PathBuf::from("/proc/kallsyms");
                    let cache = self.opts.cache_dir.as_deref();
                    match same_kernel(origin).and_then(|()| load_running_kallsyms(cache, origin.text_addr)) {
                        Ok(t) => KernelState::Usable(p, Arc::new(t)),
                        Err(w) => KernelState::Unusable(Arc::new(w)),
                    }
                }
            };
            self.kernel = Some(st);
        }
        self.kernel.as_ref().expect("set above")
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// `Ok` unless the trace demonstrably comes from another kernel, host or boot.
pub(crate) fn same_kernel(origin: &KernelOrigin) -> Result<()> {
    if let (Some(t), Some(here)) = (&origin.os_release, read_trimmed("/proc/sys/kernel/osrelease")) {
        // Accept a full `uname -a`-like string too: the release must appear in it.
        if t.trim() != here && !t.split_whitespace().any(|w| w == here) {
            return Err(Error::Mismatch(format!("trace is from kernel {t:?}, running kernel is {here:?}")));
        }
    }
    if let (Some(t), Some(here)) = (&origin.hostname, read_trimmed("/proc/sys/kernel/hostname")) {
        if t.trim() != here {
            return Err(Error::Mismatch(format!("trace is from host {t:?}, this is {here:?}")));
        }
    }
    if let (Some(t), Some(here)) = (&origin.boot_id, read_trimmed("/proc/sys/kernel/random/boot_id")) {
        if t.trim() != here {
            return Err(Error::Mismatch("trace is from an earlier boot (kernel addresses moved)".into()));
        }
    }
    Ok(())
}

/// Copy this process's vDSO image (as mapped: the vDSO is mapped whole, so memory
/// offsets are file offsets) into a temporary file blazesym can open.
pub fn copy_own_vdso() -> Result<tempfile::NamedTempFile> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let maps = fs::read_to_string("/proc/self/maps").map_err(|e| Error::io("/proc/self/maps", e))?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).ok_or_else(|| Error::NotFound("this process has no vDSO".into()))?;
    let range = line.split_whitespace().next().unwrap_or("");
    let (a, b) = range.split_once('-').ok_or_else(|| Error::Damaged("bad /proc/self/maps line".into()))?;
    let parse = |x: &str| u64::from_str_radix(x, 16).map_err(|e| Error::Damaged(format!("bad /proc/self/maps line: {e}")));
    let (start, end) = (parse(a)?, parse(b)?);
    let len = usize::try_from(end.saturating_sub(start)).map_err(|e| Error::Limit(e.to_string()))?;
    let mut image = vec![0u8; len];
    let mut mem = fs::File::open("/proc/self/mem").map_err(|e| Error::io("/proc/self/mem", e))?;
    mem.seek(SeekFrom::Start(start)).and_then(|_| mem.read_exact(&mut image)).map_err(|e| Error::io("reading the vDSO", e))?;
    // Checked with the one ELF reader: an ELF header and a section table inside the image.
    tailprof_elf::Elf::parse(image.as_slice())
        .map_err(|source| Error::Elf { what: "the vDSO mapping is not an ELF image".into(), source })?;
    let mut f = tempfile::Builder::new()
        .prefix("tailprof-vdso-")
        .suffix(".so")
        .tempfile()
        .map_err(|e| Error::io("a temporary file for the vDSO", e))?;
    f.write_all(&image).map_err(|e| Error::io("a temporary file for the vDSO", e))?;
    Ok(f)
}

/// The running kernel's table: from the cache directory when a valid cache for this
/// boot and module list is there, else from `/proc/kallsyms` (then cached).
pub(crate) fn load_running_kallsyms(cache: Option<&Path>, text_addr: Option<u64>) -> Result<KsymTable> {
    let path = Path::new("/proc/kallsyms");
    let key = cache.and_then(|_| running_kernel_key());
    if let (Some(dir), Some(key)) = (cache, &key) {
        if let Some(t) = read_cached(&dir.join(CACHE_NAME), key) {
            check_text(&t, text_addr, path)?;
            return Ok(t);
        }
    }
    let t = load_kallsyms(path, None)?;
    // Cache it only if the module list did not change while we read.
    if let (Some(dir), Some(key)) = (cache, key) {
        if running_kernel_key().as_ref() == Some(&key) {
            let _ = write_cached(dir, &key, &t);
        }
    }
    check_text(&t, text_addr, path)?;
    Ok(t)
}

/// What a cached table of `/proc/kallsyms` is valid for: boot, release,
/// `kptr_restrict` (what this user may see) and the module list.
fn running_kernel_key() -> Option<Vec<u8>> {
    let boot = read_trimmed("/proc/sys/kernel/random/boot_id")?;
    let release = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kptr = read_trimmed("/proc/sys/kernel/kptr_restrict").unwrap_or_default();
    // No /proc/modules: a kernel without loadable modules.
    let modules = fs::read("/proc/modules").unwrap_or_default();
    Some(kernel_key(&boot, &release, &kptr, &modules))
}

/// The cache key of [`running_kernel_key`] from its parts (`modules`: `/proc/modules`).
fn kernel_key(boot: &str, release: &str, kptr: &str, modules: &[u8]) -> Vec<u8> {
    // Name, size, state and address of each module; not the use counts, which change.
    let mut norm = Vec::with_capacity(modules.len());
    for line in modules.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
        for i in [0usize, 1, 4, 5] {
            norm.extend_from_slice(f.get(i).copied().unwrap_or_default());
            norm.push(b' ');
        }
        norm.push(b'\n');
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    format!(
        "boot_id={boot}\nrelease={release}\nkptr_restrict={kptr}\nuid={uid}\nmodules={:016x}/{}\n",
        super::cache::fnv64(&norm),
        norm.len()
    )
    .into_bytes()
}

/// Cache file layout (little-endian): magic, key length (u32) and key, `_text` address
/// (u64, 0: none), symbol count n (u64), names length m (u64), n × (address u64, name
/// start u32, name end u32), m bytes of names, CRC-32 of all the preceding bytes (u32).
fn write_cached(dir: &Path, key: &[u8], t: &KsymTable) -> Result<()> {
    let mut names = Vec::with_capacity(t.syms.len() * 24);
    let mut syms = Vec::with_capacity(t.syms.len() * 16);
    for &(a, b, e) in &t.syms {
        let name = t.text.get(b as usize..e as usize).unwrap_or_default();
        let start = names.len() as u32;
        names.extend_from_slice(name);
        syms.extend_from_slice(&a.to_le_bytes());
        syms.extend_from_slice(&start.to_le_bytes());
        syms.extend_from_slice(&(names.len() as u32).to_le_bytes());
    }
    let mut head = Vec::with_capacity(64 + key.len());
    head.extend_from_slice(CACHE_MAGIC);
    head.extend_from_slice(&(key.len() as u32).to_le_bytes());
    head.extend_from_slice(key);
    head.extend_from_slice(&t.text_addr.unwrap_or(0).to_le_bytes());
    head.extend_from_slice(&(t.syms.len() as u64).to_le_bytes());
    head.extend_from_slice(&(names.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    crc.update(&syms);
    crc.update(&names);
    let crc = crc.finalize().to_le_bytes();
    super::cache::write(dir, CACHE_NAME, &[&head, &syms, &names, &crc])?;
    Ok(())
}

/// The table in cache file `path` if it is valid for `key`; `None` for anything else.
fn read_cached(path: &Path, key: &[u8]) -> Option<KsymTable> {
    let bytes = super::cache::read(path, MAX_KALLSYMS_BYTES)?;
    parse_cached(&bytes, key)
}

fn parse_cached(bytes: &[u8], key: &[u8]) -> Option<KsymTable> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = body.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    if take(8)? != CACHE_MAGIC {
        return None;
    }
    let klen = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    if take(klen)? != key {
        return None;
    }
    let text = u64_of(take(8)?);
    let n = u64_of(take(8)?);
    let m = u64_of(take(8)?);
    if n > MAX_CACHED_SYMS || m > MAX_KALLSYMS_BYTES || n == 0 {
        return None;
    }
    let raw = take((n as usize).checked_mul(16)?)?;
    let names = take(m as usize)?.to_vec();
    if at != body.len() {
        return None;
    }
    let mut syms = Vec::with_capacity(n as usize);
    let mut prev = 0u64;
    for r in raw.chunks_exact(16) {
        let a = u64_of(&r[..8]);
        let b = u32::from_le_bytes(r[8..12].try_into().ok()?);
        let e = u32::from_le_bytes(r[12..16].try_into().ok()?);
        if a < prev || a == 0 || b > e || e as u64 > m {
            return None;
        }
        prev = a;
        syms.push((a, b, e));
    }
    Some(KsymTable { text: names, syms, text_addr: (text != 0).then_some(text) })
}

/// `Err` if the trace saw `_text` elsewhere than `t` has it: KASLR moved the kernel.
fn check_text(t: &KsymTable, text_addr: Option<u64>, path: &Path) -> Result<()> {
    if let (Some(want), Some(have)) = (text_addr, t.text_addr) {
        if have != want {
            return Err(Error::Mismatch(format!(
                "kernel was relocated since the trace was taken (_text at {want:#x} then, {have:#x} in {})",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Read the kallsyms file `path` once: its symbols, if it shows real (non-zero) addresses
/// and, when `text_addr` is known, places `_text` there (else the kernel was relocated
/// since the trace was taken: KASLR after a reboot). Lines are `ADDR TYPE NAME [MODULE]`;
/// other lines and zero addresses are skipped.
pub(crate) fn load_kallsyms(path: &Path, text_addr: Option<u64>) -> Result<KsymTable> {
    let f = fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
    let mut text = Vec::with_capacity(8 << 20);
    // One large buffer: /proc/kallsyms answers each read with as many lines as fit.
    f.take(MAX_KALLSYMS_BYTES + 1).read_to_end(&mut text).map_err(|e| Error::io(path.display(), e))?;
    if text.len() as u64 > MAX_KALLSYMS_BYTES {
        return Err(Error::Limit(format!("{} is larger than {} MiB: not a kallsyms file", path.display(), MAX_KALLSYMS_BYTES >> 20)));
    }
    if text.len() > u32::MAX as usize {
        return Err(Error::Limit(format!("{} is too large", path.display())));
    }
    let mut syms = Vec::with_capacity(text.len() / 40);
    let (mut lines, mut text_seen) = (0usize, None);
    let mut at = 0usize;
    // As text: `str::find` looks for the line ends a word at a time (memchr).
    let Ok(all) = std::str::from_utf8(&text) else {
        return Err(Error::Damaged(format!("{} is not text: not a kallsyms file", path.display())));
    };
    while at < text.len() {
        lines += 1;
        let (line, line_at) = (&text[at..], at);
        let nl = all[at..].find('\n').unwrap_or(line.len());
        at += nl + 1;
        if let Some((addr, name)) = kallsyms_line(&line[..nl]) {
            if name == b"_text" && text_seen.is_none() {
                text_seen = Some(addr);
            }
            if addr != 0 {
                let b = line_at + (name.as_ptr() as usize - line.as_ptr() as usize);
                syms.push((addr, b as u32, (b + name.len()) as u32));
            }
        }
    }
    if lines == 0 {
        return Err(Error::Damaged(format!("{} is empty", path.display())));
    }
    if syms.is_empty() {
        return Err(Error::Permission(format!("{} shows zero addresses (kernel.kptr_restrict, or not root)", path.display())));
    }
    // Nearly sorted already (the kernel's own symbols are; modules follow): cheap.
    syms.sort_by_key(|s| s.0);
    let t = KsymTable { text, syms, text_addr: text_seen.filter(|&a| a != 0) };
    check_text(&t, text_addr, path)?;
    Ok(t)
}

/// One parsed kallsyms line (`ADDR TYPE NAME[\t[MODULE]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KallsymsLine<'a> {
    pub addr: u64,
    /// The symbol type letter (`T`/`t` text, `W`/`w` weak, `D` data, ...).
    pub kind: u8,
    pub name: &'a [u8],
    /// Whether a `[MODULE]` column follows (a loadable module's symbol).
    pub in_module: bool,
}

/// Parse one kallsyms line; `None` for anything else. The one kallsyms line parser (the
/// symbolizer's table here and the agent's kernel symbol table use it). A tight loop: it
/// runs for each of ~120,000 lines.
#[inline]
pub fn parse_kallsyms_line(line: &[u8]) -> Option<KallsymsLine<'_>> {
    let mut addr = 0u64;
    let mut i = 0;
    for &c in line.iter().take(17) {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        addr = addr << 4 | d as u64;
        i += 1;
    }
    // At most 16 digits, then " T ".
    if i == 0 || i > 16 || line.get(i) != Some(&b' ') || line.get(i + 2) != Some(&b' ') {
        return None;
    }
    let kind = line[i + 1];
    let rest = line.get(i + 3..)?;
    let end = rest.iter().position(|&b| b == b'\t' || b == b' ').unwrap_or(rest.len());
    let in_module = rest[end..].contains(&b'[');
    (end > 0).then(|| KallsymsLine { addr, kind, name: &rest[..end], in_module })
}

/// (address, name) of a kallsyms line.
#[inline]
fn kallsyms_line(line: &[u8]) -> Option<(u64, &[u8])> {
    parse_kallsyms_line(line).map(|l| (l.addr, l.name))
}

#[cfg(test)]
mod tests {
    #[test]
    fn kallsyms_lines_give_type_name_and_module() {
        let l = parse_kallsyms_line(b"ffffffff81000000 T _text").unwrap();
        assert_eq!((l.addr, l.kind, l.name, l.in_module), (0xffff_ffff_8100_0000, b'T', &b"_text"[..], false));
        let l = parse_kallsyms_line(b"ffffffffc0002000 t nft_init\t[nf_tables]").unwrap();
        assert_eq!((l.kind, l.name, l.in_module), (b't', &b"nft_init"[..], true));
        assert_eq!(parse_kallsyms_line(b"ffffffff81000000 T"), None);
        assert_eq!(parse_kallsyms_line(b"not a line"), None);
    }

    use super::super::SymbolizerOptions;
    use super::*;
    use std::io::Write;

    #[test]
    fn own_vdso_is_copied_and_is_elf() {
        let has_vdso = fs::read_to_string("/proc/self/maps").unwrap().lines().any(|l| l.ends_with("[vdso]"));
        if !has_vdso {
            return;
        }
        let copy = copy_own_vdso().expect("the vDSO image passes the ELF reader");
        let f = fs::File::open(copy.path()).unwrap();
        let elf = tailprof_elf::Elf::parse(&f).unwrap();
        assert!(elf.symbol_table(tailprof_elf::SHT_DYNSYM).unwrap().is_some(), "the vDSO exports its functions");
    }

    #[test]
    fn kernel_symbols_setting_from_env_value() {
        use std::ffi::OsStr;
        assert_eq!(KernelSymbols::from_setting(None), KernelSymbols::Auto);
        assert_eq!(KernelSymbols::from_setting(Some(OsStr::new(""))), KernelSymbols::Auto);
        assert_eq!(KernelSymbols::from_setting(Some(OsStr::new("off"))), KernelSymbols::Off);
        assert_eq!(KernelSymbols::from_setting(Some(OsStr::new("/tmp/kallsyms"))), KernelSymbols::Kallsyms(PathBuf::from("/tmp/kallsyms")));
    }

    #[test]
    fn kallsyms_file_with_zero_addresses_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(f, "0000000000000000 T _text\n0000000000000000 T foo").unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions { kernel: KernelSymbols::Kallsyms(p.clone()), ..Default::default() });
        let r = s.symbolize_kernel(&[0xffff_ffff_8100_0010]);
        assert!(matches!(&r[0], Err(UnknownReason::KernelSymbolsUnavailable { why }) if why.contains("zero")));
    }

    #[test]
    fn kallsyms_file_names_kernel_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        let mut f = fs::File::create(&p).unwrap();
        writeln!(f, "ffffffff81000000 T _text\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffff81000300 T _etext").unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions { kernel: KernelSymbols::Kallsyms(p.clone()), ..Default::default() });
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
    fn kallsyms_table_lookup_matches_blazesyms_rules() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kallsyms");
        // Out of order (a module below the kernel, as on arm64), aliases at one address,
        // zero addresses (per-CPU symbols) and junk lines.
        fs::write(
            &p,
            "0000000000000000 A fixed_percpu_data\n\
             ffffffff81000000 T srso_alias\n\
             ffffffff81000000 T _stext\n\
             ffffffff81000000 T _text\n\
             ffffffff81000100 t do_work\n\
             junk\n\
             ffffffffc0001000 t mod_fn\t[some_mod]\n\
             ffffffff80000000 t below_fn\t[low_mod]\n",
        )
        .unwrap();
        let t = load_kallsyms(&p, Some(0xffff_ffff_8100_0000)).unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(t.lookup(0xffff_ffff_8100_0010), Some("srso_alias"), "first of the aliases");
        assert_eq!(t.lookup(0xffff_ffff_8100_0100), Some("do_work"));
        assert_eq!(t.lookup(0xffff_ffff_c000_1008), Some("mod_fn"));
        assert_eq!(t.lookup(0xffff_ffff_8000_0004), Some("below_fn"));
        assert_eq!(t.lookup(0x1000), None);
        assert!(load_kallsyms(&p, Some(0xffff_ffff_9000_0000)).unwrap_err().to_string().contains("relocated"));
        fs::write(&p, "").unwrap();
        assert!(load_kallsyms(&p, None).unwrap_err().to_string().contains("empty"));
        // The machine's own kallsyms, when readable: one pass, names for its _text.
        if let Ok(t) = load_kallsyms(Path::new("/proc/kallsyms"), None) {
            assert!(t.len() > 1000);
        }
    }

    #[test]
    fn other_kernel_release_is_refused() {
        let header = TraceHeader { os_release: Some("0.0.1-not-this-one".into()), ..Default::default() };
        let mut s = Symbolizer::default();
        s.set_origin(KernelOrigin::new(&header, None));
        let st = s.kernel_symbols_status();
        let e = st.unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Mismatch);
        assert!(e.to_string().contains("0.0.1-not-this-one"));
    }

    /// A table for the cache tests: the machine's own when readable, else a small one.
    fn some_table(dir: &Path) -> KsymTable {
        if let Ok(t) = load_kallsyms(Path::new("/proc/kallsyms"), None) {
            return t;
        }
        let p = dir.join("ks");
        fs::write(&p, "ffffffff81000000 T _text\nffffffff81000100 T do_work\nffffffff81000200 t helper\tm\n").unwrap();
        load_kallsyms(&p, None).unwrap()
    }

    fn same_answers(a: &KsymTable, b: &KsymTable) {
        assert_eq!(a.syms.len(), b.syms.len());
        assert_eq!(a.text_addr, b.text_addr);
        let step = (a.syms.len() / 2000).max(1);
        for s in a.syms.iter().step_by(step) {
            for addr in [s.0, s.0 + 1, s.0.saturating_sub(1)] {
                assert_eq!(a.lookup(addr), b.lookup(addr), "{addr:#x}");
            }
        }
    }

    #[test]
    fn kallsyms_cache_round_trips_and_refuses_anything_else() {
        let d = tempfile::tempdir().unwrap();
        let t = some_table(d.path());
        let dir = d.path().join("cache");
        let key = b"boot_id=x\nmodules=1\n";
        write_cached(&dir, key, &t).unwrap();
        let p = dir.join(CACHE_NAME);
        let back = read_cached(&p, key).expect("valid cache");
        same_answers(&t, &back);
        // Another key (boot, module list): not used.
        assert!(read_cached(&p, b"boot_id=y\nmodules=1\n").is_none());
        // Truncated anywhere, or any byte changed: not used.
        let bytes = fs::read(&p).unwrap();
        let step = (bytes.len() / 300).max(1);
        for n in (0..bytes.len()).step_by(step) {
            assert!(parse_cached(&bytes[..n], key).is_none(), "truncated at {n}");
            let mut bad = bytes.clone();
            bad[n] ^= 0x40;
            assert!(parse_cached(&bad, key).is_none(), "byte {n} changed");
        }
        // Valid CRC but names out of range or addresses unsorted: not used.
        let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = bytes[..bytes.len() - 4].to_vec();
            edit(&mut b);
            let crc = crc32fast::hash(&b).to_le_bytes();
            b.extend_from_slice(&crc);
            b
        };
        let first = 8 + 4 + key.len() + 24;
        assert!(parse_cached(&forge(&|_| ()), key).is_some(), "the forger itself is right");
        let out_of_range = forge(&|b| b[first + 12..first + 16].copy_from_slice(&u32::MAX.to_le_bytes()));
        assert!(parse_cached(&out_of_range, key).is_none());
        if t.syms.len() > 1 {
            let unsorted = forge(&|b| b[first..first + 8].copy_from_slice(&u64::MAX.to_le_bytes()));
            assert!(parse_cached(&unsorted, key).is_none());
        }
        // A symlink in its place, or a group-readable file: not followed, not used.
        let real = d.path().join("elsewhere");
        fs::rename(&p, &real).unwrap();
        std::os::unix::fs::symlink(&real, &p).unwrap();
        assert!(read_cached(&p, key).is_none());
        fs::remove_file(&p).unwrap();
        fs::rename(&real, &p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_cached(&p, key).is_none());
    }

    #[test]
    fn kallsyms_cache_key_follows_boot_and_module_list_not_use_counts() {
        let m1 = b"nf_tables 200704 3 nft_chain_nat, Live 0xffffffffc0500000\next4 802816 1 - Live 0xffffffffc0100000\n";
        let m1_used = b"nf_tables 200704 7 nft_chain_nat,nft_ct, Live 0xffffffffc0500000\next4 802816 1 - Live 0xffffffffc0100000\n";
        let m2 = b"nf_tables 200704 3 nft_chain_nat, Live 0xffffffffc0500000\next4 802816 1 - Live 0xffffffffc0100000\nfoo 4096 0 - Live 0xffffffffc0900000\n";
        let reloaded = b"nf_tables 200704 3 nft_chain_nat, Live 0xffffffffc0700000\next4 802816 1 - Live 0xffffffffc0100000\n";
        let k = |b: &str, m: &[u8]| kernel_key(b, "6.1", "0", m);
        assert_eq!(k("a", m1), k("a", m1_used));
        assert_ne!(k("a", m1), k("a", m2), "a module loaded");
        assert_ne!(k("a", m1), k("a", reloaded), "a module reloaded elsewhere");
        assert_ne!(k("a", m1), k("b", m1), "another boot");
        assert_ne!(kernel_key("a", "6.1", "0", m1), kernel_key("a", "6.1", "1", m1), "kptr_restrict changed");
    }

    #[test]
    fn running_kernel_table_from_cache_equals_proc_kallsyms() {
        let Ok(direct) = load_kallsyms(Path::new("/proc/kallsyms"), None) else {
            tailprof_testkit::skip(tailprof_testkit::Need::Fact, "/proc/kallsyms does not load here");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("c");
        let first = load_running_kallsyms(Some(&dir), None).unwrap();
        same_answers(&direct, &first);
        let p = dir.join(CACHE_NAME);
        let key = running_kernel_key().unwrap();
        assert!(read_cached(&p, &key).is_some(), "written");
        same_answers(&direct, &load_running_kallsyms(Some(&dir), None).unwrap());
        // Corrupted: ignored, the answers unchanged, the cache rewritten.
        let mut bytes = fs::read(&p).unwrap();
        let n = bytes.len() / 2;
        bytes[n] ^= 1;
        fs::write(&p, &bytes).unwrap();
        same_answers(&direct, &load_running_kallsyms(Some(&dir), None).unwrap());
        assert!(read_cached(&p, &key).is_some(), "rewritten");
        // The _text check applies to a cached table too.
        if let Some(t) = direct.text_addr {
            assert!(load_running_kallsyms(Some(&dir), Some(t ^ 0x100_0000)).unwrap_err().to_string().contains("relocated"));
            assert!(load_running_kallsyms(Some(&dir), Some(t)).is_ok());
        }
    }
}
