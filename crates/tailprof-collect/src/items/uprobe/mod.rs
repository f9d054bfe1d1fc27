//! Item boundaries from an unmodified binary: uprobes through `perf_event_open`.
//!
//! `--item-begin BIN:SYMBOL --item-end BIN:SYMBOL%return` turns a request-handling
//! function into item boundaries without any code change. This module owns:
//!
//! * parsing a probe definition ([`ProbeSpec::parse`]);
//! * resolving `SYMBOL` to a file offset ([`resolve`]): `.symtab` then `.dynsym`
//!   (defined `FUNC`/`IFUNC` symbols), `st_value` translated to a file offset through
//!   the `PT_LOAD` program headers; an unknown name is reported with close names. The
//!   binary is read with `tailprof-elf` (pread, bounded; symbols streamed, never the
//!   whole file in memory);
//! * how a probe reaches `perf_event_open` ([`ProbeEvent`]) and the attr of one probe
//!   ([`uprobe_attr`], golden-tested in `tests/attr/`): `sample_period = 1`, sample_type
//!   IDENTIFIER | IP | TID | TIME | CPU (+ REGS_USER for the id register), and either
//!   - the uprobe PMU ([`UprobePmu`]: its type from
//!     `/sys/bus/event_source/devices/uprobe/type`, the `retprobe` bit from its
//!     `format/`): `config1` = pointer to the path, `config2` = file offset. Only for
//!     events that are not inherited (`-a`): when a task with an inherited event clones,
//!     the kernel initializes the child's copy by reading `config1` again, as a pointer
//!     into the *cloning* process, where it means nothing: `clone` fails with EFAULT and
//!     the program sees `pthread_create: Bad address` (issue 18 item 2);
//!   - or a tracefs uprobe event (`p:`/`r:` in `uprobe_events`, created and removed by
//!     [`crate::items::classprobe::TracefsUprobe`]) opened as a tracepoint, `config` = its id,
//!     which inherits like any tracepoint: for launched commands and `-p`
//!     ([`ProbeVia::for_inherit`]);
//! * turning the probes' samples into [`Marker`] records ([`MarkerMaker`]).
//!
//! The recorder (`session`) opens the probes per CPU next to the sampling events and
//! redirects them into the same rings, so hits are merged in time order with samples.
//!
//! Item ids: with an id register (`--item-id-reg rdi`) the begin probe captures that
//! register and its value is the id. Otherwise ids are a sequence `1, 2, 3, ...` in the
//! order the begins are written (time order), unique over the whole recording (so
//! `items --explain ID` is unambiguous even with many threads or processes). End markers
//! carry [`Marker::UNKNOWN_ITEM`]: they close the item most recently begun on their
//! thread, which is right for a function's return even under recursion.

mod goret;
mod open;
pub use goret::{ret_addresses, RetError, MAX_FUNCTION_BYTES};
pub(crate) use open::ProbeSet;

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as b;
use tailprof_elf::{Elf, GoBuildInfo, ReadAt, PT_LOAD, SHN_UNDEF, SHT_DYNSYM, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC};
use tailprof_format::{ItemClass, Marker, MarkerKind, MarkerSource, Record, Sample};

use crate::attr::{parse_regs, ClockChoice, PerfEventAttr, ATTR_SIZE};

/// Where the kernel describes the uprobe PMU.
pub const UPROBE_SYSFS: &str = "/sys/bus/event_source/devices/uprobe";
/// Class id used for `--item-class` labels of uprobe markers (kept away from the small
/// ids the marker library hands out).
pub const UPROBE_CLASS_ID: u32 = 0x8000_0001;

/// Why a probe could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UprobeError {
    #[error("bad probe '{spec}': {reason} (expected BIN:SYMBOL, BIN:SYMBOL%return or usdt:BIN:PROVIDER:NAME)")]
    BadSpec { spec: String, reason: String },
    #[error("probe binary not found: {0}")]
    BinaryNotFound(String),
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path} is not a 64-bit little-endian ELF file")]
    NotElf { path: String },
    #[error("{path} is a damaged ELF file ({reason}); probe an intact binary")]
    BadElf { path: String, reason: String },
    #[error("symbol '{symbol}' not found in {path}{}", suggest(.suggestions))]
    SymbolNotFound { symbol: String, path: String, suggestions: Vec<String> },
    #[error("symbol '{symbol}' in {path} (address {addr:#x}) lies in no loadable segment")]
    NotLoaded { symbol: String, path: String, addr: u64 },
    #[error("this kernel has no uprobe PMU ({UPROBE_SYSFS} missing or unreadable); it needs CONFIG_UPROBE_EVENTS and Linux 4.17+")]
    PmuMissing,
    #[error("bad item id register: {0}")]
    BadRegister(String),
    #[error("cannot probe the returns of '{symbol}' in {path}, a Go binary (a uretprobe would corrupt goroutine stacks the runtime moves): {reason}")]
    GoReturn { symbol: String, path: String, reason: RetError },
    #[error("USDT probe '{probe}' not found in {path}: {available}")]
    UsdtNotFound { probe: String, path: String, available: String },
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("; close names: {}", s.join(", "))
    }
}

/// `BIN:SYMBOL`, `BIN:SYMBOL%return` or `usdt:BIN:PROVIDER:NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub binary: String,
    /// The function; for a USDT probe, the probe's name.
    pub symbol: String,
    /// Fire on the function's return (a uretprobe) instead of its entry.
    pub ret: bool,
    /// A USDT probe ([`crate::items::usdt`]) of this provider, named `symbol`.
    pub usdt_provider: Option<String>,
}

impl ProbeSpec {
    pub fn parse(s: &str) -> Result<ProbeSpec, UprobeError> {
        let bad = |reason: &str| UprobeError::BadSpec { spec: s.to_string(), reason: reason.to_string() };
        if let Some(rest) = s.strip_prefix("usdt:") {
            let mut parts = rest.rsplitn(3, ':');
            let (name, provider, bin) = match (parts.next(), parts.next(), parts.next()) {
                (Some(n), Some(p), Some(b)) => (n, p, b),
                _ => return Err(bad("expected usdt:BIN:PROVIDER:NAME")),
            };
            let ok = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if bin.is_empty() {
                return Err(bad("empty binary"));
            }
            if !ok(provider) || !ok(name) {
                return Err(bad("a USDT provider and name are letters, digits and '_' (a probe has no %return)"));
            }
            return Ok(ProbeSpec {
                binary: bin.to_string(),
                symbol: name.to_string(),
                ret: false,
                usdt_provider: Some(provider.to_string()),
            });
        }
        let (rest, ret) = match s.strip_suffix("%return") {
            Some(r) => (r, true),
            None => (s, false),
        };
        let (bin, sym) = rest.rsplit_once(':').ok_or_else(|| bad("no ':' between binary and symbol"))?;
        if bin.is_empty() {
            return Err(bad("empty binary"));
        }
        if sym.is_empty() || sym.contains(['%', '/', ' ']) {
            return Err(bad("bad symbol name"));
        }
        Ok(ProbeSpec { binary: bin.to_string(), symbol: sym.to_string(), ret, usdt_provider: None })
    }
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = &self.usdt_provider {
            return write!(f, "usdt:{}:{p}:{}", self.binary, self.symbol);
        }
        write!(f, "{}:{}{}", self.binary, self.symbol, if self.ret { "%return" } else { "" })
    }
}

/// A probe resolved to a file and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProbe {
    pub spec: ProbeSpec,
    /// Absolute, canonical path of the binary.
    pub path: PathBuf,
    /// The symbol's `st_value` (virtual address in the ELF file).
    pub addr: u64,
    /// File offset (`config2` of the uprobe attr).
    pub offset: u64,
    /// File offset of a USDT probe's semaphore, the kernel's reference counter
    /// (`ref_ctr_offset`); 0 when there is none.
    pub ref_ctr_offset: u64,
    /// A USDT site's argument spec ([`crate::items::usdt::parse_args`]); `None` for a function.
    pub usdt_args: Option<String>,
    /// The binary's Go build information when it is a Go binary (its functions' probes
    /// read the goroutine register, R14, and `%return` probes sit on `RET`s).
    pub go: Option<GoBuildInfo>,
    /// `%return` on a Go binary: an entry uprobe on one `RET` instruction of the function
    /// (`offset` is the instruction's), never a uretprobe ([`ret_addresses`]).
    pub ret_insn: bool,
}

impl ResolvedProbe {
    /// Whether the kernel probe is a uretprobe (`%return`, but not on a Go binary, where
    /// the `RET` instructions are probed instead).
    pub fn uretprobe(&self) -> bool {
        self.spec.ret && !self.ret_insn
    }

    /// The definition as stored in the trace header: `PATH:SYMBOL[%return]@0xOFFSET`, or
    /// `usdt:PATH:PROVIDER:NAME@0xOFFSET[(0xREF_CTR_OFFSET)]`.
    pub fn describe(&self) -> String {
        if let Some(p) = &self.spec.usdt_provider {
            let sem = if self.ref_ctr_offset != 0 { format!("({:#x})", self.ref_ctr_offset) } else { String::new() };
            return format!("usdt:{}:{p}:{}@{:#x}{sem}", self.path.display(), self.spec.symbol, self.offset);
        }
        format!(
            "{}:{}{}@{:#x}",
            self.path.display(),
            self.spec.symbol,
            match (self.spec.ret, self.ret_insn) {
                (true, true) => "%return(ret)",
                (true, false) => "%return",
                _ => "",
            },
            self.offset
        )
    }
}

/// The binary (as given if it has a '/', else found in PATH), canonical.
pub(crate) fn find_binary(binary: &str) -> Result<PathBuf, UprobeError> {
    let found = if binary.contains('/') {
        Some(PathBuf::from(binary)).filter(|p| p.is_file())
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path).map(|d| d.join(binary)).find(|p| p.is_file())
    };
    let path = found.ok_or_else(|| UprobeError::BinaryNotFound(binary.to_string()))?;
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
}

/// Every place the probe fires: the function's one entry (or return: on a Go binary each
/// of its `RET` instructions), or each site of a USDT probe
/// ([`crate::items::usdt::sites`]: one per inlined copy, with its semaphore).
pub fn resolve_sites(spec: &ProbeSpec) -> Result<Vec<ResolvedProbe>, UprobeError> {
    let Some(provider) = &spec.usdt_provider else {
        return resolve_function(spec);
    };
    let (path, sites) = crate::items::usdt::sites(&spec.binary, provider, &spec.symbol)?;
    Ok(sites
        .into_iter()
        .map(|s| ResolvedProbe {
            spec: spec.clone(),
            path: path.clone(),
            addr: s.pc,
            offset: s.offset,
            ref_ctr_offset: s.ref_ctr_offset,
            usdt_args: Some(s.args),
            go: None,
            ret_insn: false,
        })
        .collect())
}

/// Find the binary (as given if it has a '/', else in PATH) and resolve the symbol (a
/// USDT probe or a Go `%return`: its first site; [`resolve_sites`] gives all).
pub fn resolve(spec: &ProbeSpec) -> Result<ResolvedProbe, UprobeError> {
    let mut all = resolve_sites(spec)?;
    Ok(all.swap_remove(0)) // a found probe has a site
}

/// A function's entry, or its return: a uretprobe, or on a Go binary one probe per `RET`.
fn resolve_function(spec: &ProbeSpec) -> Result<Vec<ResolvedProbe>, UprobeError> {
    let path = find_binary(&spec.binary)?;
    // Another user may control the path: no final symlink, never blocks, regular files
    // only.
    let read_err = |source| UprobeError::Read { path: path.display().to_string(), source };
    let f = crate::procfs::open_untrusted(&path).map_err(read_err)?;
    let found = symbol_lookup(&f, &spec.symbol, spec.ret).map_err(|e| match e {
        Lookup::NotElf => UprobeError::NotElf { path: path.display().to_string() },
        Lookup::Bad(reason) => UprobeError::BadElf { path: path.display().to_string(), reason },
        Lookup::Io(source) => read_err(source),
        Lookup::Missing(suggestions) => {
            UprobeError::SymbolNotFound { symbol: spec.symbol.clone(), path: path.display().to_string(), suggestions }
        }
        Lookup::NotLoaded(addr) => UprobeError::NotLoaded { symbol: spec.symbol.clone(), path: path.display().to_string(), addr },
        Lookup::GoReturn(reason) => UprobeError::GoReturn { symbol: spec.symbol.clone(), path: path.display().to_string(), reason },
    })?;
    let site = |addr, offset, ret_insn| ResolvedProbe {
        spec: spec.clone(),
        path: path.clone(),
        addr,
        offset,
        ref_ctr_offset: 0,
        usdt_args: None,
        go: found.go.clone(),
        ret_insn,
    };
    Ok(match &found.rets {
        Some(rets) => rets.iter().map(|&a| site(a, a - found.value + found.offset, true)).collect(),
        None => vec![site(found.value, found.offset, false)],
    })
}

#[derive(Debug)]
enum Lookup {
    NotElf,
    /// A damaged file (the reader's message).
    Bad(String),
    Io(io::Error),
    Missing(Vec<String>),
    NotLoaded(u64),
    GoReturn(RetError),
}

/// A function symbol found by [`symbol_lookup`].
#[derive(Debug)]
struct Found {
    value: u64,
    offset: u64,
    go: Option<GoBuildInfo>,
    /// `%return` on a Go binary: the addresses of its `RET` instructions.
    rets: Option<Vec<u64>>,
}

impl From<tailprof_elf::Error> for Lookup {
    fn from(e: tailprof_elf::Error) -> Self {
        use tailprof_elf::Error as E;
        match e {
            E::NotElf | E::Unsupported { .. } | E::TruncatedHeader => Lookup::NotElf,
            E::Io { source, .. } => Lookup::Io(source),
            e => Lookup::Bad(e.to_string()),
        }
    }
}

/// Bytes of a string table read at once per symbol name (names are looked up in symbol
/// order, scattered over the table; the window grows for a longer name).
const NAME_WINDOW: usize = 256;

/// `(st_value, file offset)` of a defined function symbol in an ELF64 LE file: the first
/// `FUNC`/`IFUNC` symbol with a non-zero value named `name` (or `name@VERSION`) in the
/// `.symtab` tables, then the `.dynsym` ones, translated through the `PT_LOAD` segment
/// that holds it.
#[cfg(test)]
fn symbol_offset<R: ReadAt + ?Sized>(r: &R, name: &str) -> Result<(u64, u64), Lookup> {
    symbol_lookup(r, name, false).map(|f| (f.value, f.offset))
}

/// [`symbol_offset`] with the binary's Go build information and, for `ret` on a Go
/// binary, the function's `RET` instructions (its `st_size` bytes decoded).
fn symbol_lookup<R: ReadAt + ?Sized>(r: &R, name: &str, ret: bool) -> Result<Found, Lookup> {
    let elf = Elf::parse(r)?;
    if !elf.class().is64 || elf.class().big_endian {
        return Err(Lookup::NotElf);
    }
    let mut close = CloseNames::new(name);
    let mut found = None;
    'outer: for want in [SHT_SYMTAB, SHT_DYNSYM] {
        for (i, _) in elf.sections().iter().enumerate().filter(|(_, s)| s.kind == want) {
            let Ok(table) = elf.symbol_table_at(i) else {
                continue; // no string table, or outside the file
            };
            let mut names = elf.strings(&table).with_limits(NAME_WINDOW, tailprof_elf::MAX_NAME_BYTES);
            for sym in elf.symbols(&table) {
                let sym = sym?;
                if !matches!(sym.kind(), STT_FUNC | STT_GNU_IFUNC) || sym.shndx == SHN_UNDEF || sym.value == 0 {
                    continue;
                }
                let Some(sname) = names.get(sym.name.into())? else {
                    continue;
                };
                let Ok(sname) = std::str::from_utf8(sname) else {
                    continue;
                };
                let base = sname.split('@').next().unwrap_or(sname);
                if base == name {
                    found = Some((sym.value, sym.size));
                    break 'outer;
                }
                close.offer(base);
            }
        }
    }
    let Some((value, size)) = found else {
        return Err(Lookup::Missing(close.names()));
    };
    // A damaged `.go.buildinfo` is read as "not Go" (the entry probe works either way).
    let go = elf.go_build_info().ok().flatten();
    for ph in elf.program_headers()? {
        let ph = ph?;
        if ph.kind != PT_LOAD || value < ph.vaddr || value - ph.vaddr >= ph.filesz {
            continue;
        }
        let Some(offset) = (value - ph.vaddr).checked_add(ph.offset) else {
            continue;
        };
        let rets = match (&go, ret) {
            (Some(_), true) => Some(go_rets(&elf, value, offset, size, ph.filesz - (value - ph.vaddr))?),
            _ => None,
        };
        return Ok(Found { value, offset, go, rets });
    }
    Err(Lookup::NotLoaded(value))
}

/// `e_machine` of x86-64.
const EM_X86_64: u16 = 62;

/// The `RET` addresses of the function at `value` (file offset `offset`, `size` bytes,
/// `room` bytes left in its segment).
fn go_rets<E: ReadAt>(elf: &Elf<E>, value: u64, offset: u64, size: u64, room: u64) -> Result<Vec<u64>, Lookup> {
    let machine = elf.header().machine;
    if machine != EM_X86_64 {
        return Err(Lookup::GoReturn(RetError::NotX86_64(machine)));
    }
    if size == 0 {
        return Err(Lookup::GoReturn(RetError::SizeUnknown));
    }
    if size > MAX_FUNCTION_BYTES {
        return Err(Lookup::GoReturn(RetError::TooLarge(size)));
    }
    if size > room {
        return Err(Lookup::Bad(format!("function at {value:#x} ({size} bytes) runs past its segment")));
    }
    let code = elf.read_vec(offset, size, MAX_FUNCTION_BYTES)?;
    ret_addresses(&code, value).map_err(Lookup::GoReturn)
}

/// Up to five names that contain `name` (or that it contains), or are a small edit away:
/// the best five (closest, then by name) of the names offered, kept as they come (fixed
/// memory however many symbols a binary has).
struct CloseNames {
    lname: String,
    best: std::collections::BTreeSet<(usize, String)>,
}

impl CloseNames {
    const MOST: usize = 5;

    fn new(name: &str) -> Self {
        CloseNames { lname: name.to_ascii_lowercase(), best: Default::default() }
    }

    fn offer(&mut self, n: &str) {
        let lname = &self.lname;
        let ln = n.to_ascii_lowercase();
        let d = if ln.contains(lname.as_str()) || (ln.len() >= 4 && lname.contains(&ln)) {
            Some(ln.len().abs_diff(lname.len()).min(3))
        } else if ln.len().abs_diff(lname.len()) <= 2 {
            Some(edit_distance(&ln, lname)).filter(|&d| d <= 2 + lname.len() / 8)
        } else {
            None
        };
        let Some(d) = d else { return };
        if self.best.len() == Self::MOST && self.best.last().is_some_and(|w| (d, n) >= (w.0, w.1.as_str())) {
            return;
        }
        self.best.insert((d, n.to_string()));
        if self.best.len() > Self::MOST {
            self.best.pop_last();
        }
    }

    fn names(self) -> Vec<String> {
        self.best.into_iter().map(|(_, n)| n).collect()
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The uprobe PMU of this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobePmu {
    pub pmu_type: u32,
    /// Bit of `config` that makes a return probe (`format/retprobe`, `config:N`).
    pub retprobe_bit: u32,
}

impl UprobePmu {
    pub fn probe() -> Result<UprobePmu, UprobeError> {
        Self::probe_at(Path::new(UPROBE_SYSFS))
    }

    /// Read the PMU description from a sysfs directory (tests use a fixture tree).
    pub fn probe_at(dir: &Path) -> Result<UprobePmu, UprobeError> {
        let ty = std::fs::read_to_string(dir.join("type")).map_err(|_| UprobeError::PmuMissing)?;
        let pmu_type = ty.trim().parse().map_err(|_| UprobeError::PmuMissing)?;
        let retprobe_bit = std::fs::read_to_string(dir.join("format/retprobe"))
            .ok()
            .and_then(|s| s.trim().strip_prefix("config:").and_then(|b| b.parse().ok()))
            .unwrap_or(0);
        Ok(UprobePmu { pmu_type, retprobe_bit })
    }
}

/// Which kernel interface a recording's probes use ([`ProbeVia::for_inherit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeVia {
    /// The uprobe PMU: nothing to create or remove, but its events must not be inherited.
    Pmu,
    /// tracefs uprobe events opened as tracepoints: safe to inherit.
    Tracefs,
}

impl ProbeVia {
    /// The uprobe PMU for events that are not inherited (`-a`), tracefs events for those
    /// that are (launched commands, `-p`): an inherited uprobe PMU event makes every
    /// `clone` of the target fail with EFAULT (module docs).
    pub fn for_inherit(inherit: bool) -> ProbeVia {
        if inherit {
            ProbeVia::Tracefs
        } else {
            ProbeVia::Pmu
        }
    }
}

/// The event one probe is opened as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEvent {
    /// The uprobe PMU; `path_ptr` points to the NUL-terminated binary path in this
    /// process (valid during `perf_event_open`), the offset and return bit come from the
    /// [`UprobeAttrConfig`].
    Pmu { pmu: UprobePmu, path_ptr: u64 },
    /// A tracefs uprobe event (its definition holds path, offset and return bit):
    /// `PERF_TYPE_TRACEPOINT` with `config` = its id.
    Tracepoint { id: u64 },
}

/// How one probe is opened (everything but the event itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobeAttrConfig {
    pub offset: u64,
    /// A USDT semaphore's file offset (config bits 32-63 of the uprobe PMU), 0: none.
    pub ref_ctr_offset: u64,
    pub ret: bool,
    pub regs_user: u64,
    pub clock: ClockChoice,
    pub inherit: bool,
    pub enable_on_exec: bool,
}

/// sample_type of a probe: IDENTIFIER | IP | TID | TIME | CPU (+ REGS_USER).
pub const UPROBE_SAMPLE_TYPE: u64 =
    (b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME | b::PERF_SAMPLE_CPU) as u64;

/// The attr of one uprobe. An inherited uprobe PMU event breaks the target's `clone`
/// (module docs): [`ProbeVia::for_inherit`] picks the event kind, and the uprobe PMU is
/// refused here (`None`) when `c.inherit` is set.
pub fn uprobe_attr(ev: &ProbeEvent, c: &UprobeAttrConfig) -> Option<PerfEventAttr> {
    let mut a = PerfEventAttr { size: ATTR_SIZE, ..PerfEventAttr::default() };
    match *ev {
        ProbeEvent::Pmu { pmu, path_ptr } => {
            if c.inherit {
                return None;
            }
            a.type_ = pmu.pmu_type;
            a.config = if c.ret { 1 << pmu.retprobe_bit } else { 0 };
            // PERF_UPROBE_REF_CTR_OFFSET_SHIFT: the kernel keeps the semaphore.
            a.config |= c.ref_ctr_offset << 32;
            a.config1 = path_ptr;
            a.config2 = c.offset;
        }
        ProbeEvent::Tracepoint { id } => {
            a.type_ = b::PERF_TYPE_TRACEPOINT;
            a.config = id;
        }
    }
    a.sample_period = 1;
    a.sample_type = UPROBE_SAMPLE_TYPE;
    if c.regs_user != 0 {
        a.sample_type |= b::PERF_SAMPLE_REGS_USER as u64;
        a.sample_regs_user = c.regs_user;
    }
    a.set_disabled(1);
    a.set_inherit(c.inherit as u64);
    a.set_enable_on_exec(c.enable_on_exec as u64);
    a.set_sample_id_all(1);
    if c.clock == ClockChoice::Monotonic {
        a.set_use_clockid(1);
        a.clockid = libc::CLOCK_MONOTONIC;
    }
    a.set_watermark(1);
    a.wakeup_watermark = 0;
    Some(a)
}

/// The item-boundary probes of a recording, as the user gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemProbes {
    pub begin: ProbeSpec,
    pub end: ProbeSpec,
    /// Register whose value (at the begin probe) is the item id, e.g. `rdi`; `None` =
    /// a sequence number.
    pub id_reg: Option<String>,
    /// Class label for every item.
    pub class: Option<String>,
}

/// Begin and end resolved (every site: a USDT probe may have several), with the id
/// register's mask, and the kernel events they are opened as.
#[derive(Debug)]
pub struct PreparedProbes {
    pub begin: Vec<ResolvedProbe>,
    pub end: Vec<ResolvedProbe>,
    /// `sample_regs_user` of the begin probe (one bit, or 0).
    pub id_reg_mask: u64,
    pub id_reg: Option<String>,
    pub class: Option<String>,
    pub events: PreparedEvents,
    /// Items keyed by goroutine ([`GOROUTINE_REG`]): both probes are in a Go binary (Go
    /// 1.18+ on x86-64, whose ABIInternal keeps the current `g` in R14); `id_reg_mask`
    /// is then R14's bit, captured by begin and end probes and by every sample.
    pub goroutine: bool,
}

/// The register holding the current goroutine (`g`) in Go's amd64 ABIInternal (Go 1.17+).
pub const GOROUTINE_REG: &str = "r14";

/// Whether probes on these sites can key items by goroutine: all of them in a Go binary
/// whose build information names Go 1.17 or later, on x86-64 (the recorder's own
/// architecture: R14 is read from the registers of this machine's tasks).
fn goroutine_keyed(begin: &[ResolvedProbe], end: &[ResolvedProbe]) -> bool {
    cfg!(target_arch = "x86_64")
        && begin.iter().chain(end).all(|p| p.go.as_ref().and_then(GoBuildInfo::major_minor).is_some_and(|v| v >= (1, 17)))
}

/// The kernel side of [`PreparedProbes`].
#[derive(Debug)]
#[non_exhaustive]
pub enum PreparedEvents {
    /// The uprobe PMU, with the paths as C strings for `config1`.
    Pmu { pmu: UprobePmu, begin_path: CString, end_path: CString },
    /// tracefs events for every begin and end site (removed when dropped, after the perf
    /// events using them are closed); `mounted`: tracefs was mounted here by us.
    Tracefs {
        begin: Vec<crate::items::classprobe::TracefsUprobe>,
        end: Vec<crate::items::classprobe::TracefsUprobe>,
        mounted: Option<PathBuf>,
    },
}

impl PreparedProbes {
    /// The sites of `role`.
    pub fn sites(&self, role: ProbeRole) -> &[ResolvedProbe] {
        match role {
            ProbeRole::Begin => &self.begin,
            ProbeRole::End => &self.end,
        }
    }

    /// The event site `site` of `role` is opened as. For the uprobe PMU, the path
    /// pointer is valid while `self` lives.
    pub fn event(&self, role: ProbeRole, site: usize) -> ProbeEvent {
        match (&self.events, role) {
            (PreparedEvents::Pmu { pmu, begin_path, .. }, ProbeRole::Begin) => {
                ProbeEvent::Pmu { pmu: *pmu, path_ptr: begin_path.as_ptr() as u64 }
            }
            (PreparedEvents::Pmu { pmu, end_path, .. }, ProbeRole::End) => {
                ProbeEvent::Pmu { pmu: *pmu, path_ptr: end_path.as_ptr() as u64 }
            }
            (PreparedEvents::Tracefs { begin, .. }, ProbeRole::Begin) => ProbeEvent::Tracepoint { id: begin.get(site).map_or(0, |e| e.id) },
            (PreparedEvents::Tracefs { end, .. }, ProbeRole::End) => ProbeEvent::Tracepoint { id: end.get(site).map_or(0, |e| e.id) },
        }
    }

    /// One-line notes for the user (tracefs mounted by us).
    pub fn notes(&self) -> Vec<String> {
        match &self.events {
            PreparedEvents::Tracefs { mounted: Some(r), .. } => {
                vec![format!("tracefs was not mounted: mounted it at {} (for the item probes)", r.display())]
            }
            _ => Vec::new(),
        }
    }
}

impl ItemProbes {
    /// Resolve both probes (every site), check the register, and prepare their events
    /// `via` the uprobe PMU or tracefs (mounting tracefs at `/sys/kernel/tracing` when
    /// absent).
    pub fn prepare(&self, via: ProbeVia) -> Result<PreparedProbes, UprobeError> {
        let id_reg_mask = match &self.id_reg {
            None => 0,
            Some(r) => {
                let m = parse_regs(r).map_err(|e| UprobeError::BadRegister(e.to_string()))?;
                if m.count_ones() != 1 {
                    return Err(UprobeError::BadRegister(format!("'{r}': give exactly one register, e.g. rdi")));
                }
                m
            }
        };
        let begin = resolve_sites(&self.begin)?;
        let end = resolve_sites(&self.end)?;
        let goroutine = goroutine_keyed(&begin, &end);
        let id_reg_mask = if goroutine {
            if let Some(r) = &self.id_reg {
                return Err(UprobeError::BadRegister(format!(
                    "'{r}': items in a Go program are keyed by goroutine ({GOROUTINE_REG}); drop --item-id-reg"
                )));
            }
            parse_regs(GOROUTINE_REG).map_err(|e| UprobeError::BadRegister(e.to_string()))?
        } else {
            id_reg_mask
        };
        let events = match via {
            ProbeVia::Pmu => {
                let pmu = UprobePmu::probe()?;
                let cpath =
                    |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| UprobeError::BinaryNotFound(p.display().to_string()));
                PreparedEvents::Pmu { pmu, begin_path: cpath(&begin[0].path)?, end_path: cpath(&end[0].path)? }
            }
            ProbeVia::Tracefs => {
                let (root, we_mounted) = crate::items::classprobe::tracefs_root()?;
                let create = |sites: &[ResolvedProbe]| {
                    sites.iter().map(|p| crate::items::classprobe::TracefsUprobe::create_plain(&root, p)).collect::<Result<Vec<_>, _>>()
                };
                PreparedEvents::Tracefs { begin: create(&begin)?, end: create(&end)?, mounted: we_mounted.then_some(root.clone()) }
            }
        };
        Ok(PreparedProbes { begin, end, id_reg_mask, id_reg: self.id_reg.clone(), class: self.class.clone(), events, goroutine })
    }
}

/// Which boundary a probe event marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeRole {
    Begin,
    End,
}

/// Turns probe hits (decoded samples of the probe events) into [`Marker`] records.
#[derive(Debug, Default)]
pub struct MarkerMaker {
    /// Read the id from `regs[0]` of begin hits (the probe captures exactly one register).
    pub id_from_reg: bool,
    pub class: Option<String>,
    next_seq: u64,
    classes_declared: HashSet<u32>,
    /// Open items per thread (for counting ends without a begin).
    open: HashMap<u32, u32>,
    /// End hits on a thread with no open item (e.g. recording started mid-request).
    pub unmatched_ends: u64,
    /// Items keyed by goroutine (`regs[0]` of begin and end hits is R14, the `g`): a
    /// begin and end carry the `g` as their item, and the join keys them by it.
    pub goroutine: bool,
    /// Goroutine mode: the goroutines with an open item (pid, g), at most
    /// [`MAX_OPEN_GOROUTINES`].
    open_g: HashSet<(u32, u64)>,
    /// Goroutine mode: a begin on a goroutine whose item is open (the function entered
    /// again before it returned: the stack-growth restart of Go's prologue, which runs
    /// the entry again; recursion is not told apart), dropped.
    pub repeated_begins: u64,
}

/// Open goroutine items [`MarkerMaker`] tracks; past it, begins are passed on unchecked.
pub const MAX_OPEN_GOROUTINES: usize = 1 << 20;

impl MarkerMaker {
    pub fn new(id_from_reg: bool, class: Option<String>) -> Self {
        MarkerMaker { id_from_reg, class, ..Default::default() }
    }

    /// A maker of goroutine-keyed markers ([`PreparedProbes::goroutine`]).
    pub fn for_goroutines(class: Option<String>) -> Self {
        MarkerMaker { id_from_reg: true, class, goroutine: true, ..Default::default() }
    }

    /// Records for one hit, in order (an [`ItemClass`] before a process's first marker
    /// when a class is set, then the marker).
    pub fn convert(&mut self, s: &Sample, role: ProbeRole, out: &mut Vec<Record>) {
        if self.goroutine {
            return self.convert_goroutine(s, role, out);
        }
        let class = if self.class.is_some() { UPROBE_CLASS_ID } else { 0 };
        if let (Some(name), true) = (&self.class, role == ProbeRole::Begin) {
            if self.classes_declared.insert(s.pid) {
                out.push(Record::ItemClass(ItemClass { time: s.time, pid: s.pid, id: UPROBE_CLASS_ID, name: name.clone() }));
            }
        }
        let (kind, item) = match role {
            ProbeRole::Begin => {
                *self.open.entry(s.tid).or_default() += 1;
                let id = if self.id_from_reg {
                    s.regs.first().copied().unwrap_or(0)
                } else {
                    self.next_seq += 1;
                    self.next_seq
                };
                (MarkerKind::Begin, id)
            }
            ProbeRole::End => {
                match self.open.get_mut(&s.tid) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => self.unmatched_ends += 1,
                }
                (MarkerKind::End, Marker::UNKNOWN_ITEM)
            }
        };
        out.push(Record::Marker(Marker { time: s.time, pid: s.pid, tid: s.tid, kind, item, class, source: MarkerSource::Uprobe }));
    }

    /// Goroutine mode: begin and end carry the hit's `g` (R14) as their item.
    fn convert_goroutine(&mut self, s: &Sample, role: ProbeRole, out: &mut Vec<Record>) {
        let g = s.regs.first().copied().unwrap_or(0);
        let kind = match role {
            ProbeRole::Begin => {
                if self.open_g.contains(&(s.pid, g)) {
                    self.repeated_begins += 1;
                    return;
                }
                if self.open_g.len() < MAX_OPEN_GOROUTINES {
                    self.open_g.insert((s.pid, g));
                }
                MarkerKind::Begin
            }
            ProbeRole::End => {
                if !self.open_g.remove(&(s.pid, g)) {
                    self.unmatched_ends += 1;
                }
                MarkerKind::End
            }
        };
        let class = if self.class.is_some() { UPROBE_CLASS_ID } else { 0 };
        if let (Some(name), MarkerKind::Begin) = (&self.class, kind) {
            if self.classes_declared.insert(s.pid) {
                out.push(Record::ItemClass(ItemClass { time: s.time, pid: s.pid, id: UPROBE_CLASS_ID, name: name.clone() }));
            }
        }
        out.push(Record::Marker(Marker { time: s.time, pid: s.pid, tid: s.tid, kind, item: g, class, source: MarkerSource::Uprobe }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let p = ProbeSpec::parse("/usr/bin/x:handle%return").unwrap();
        assert_eq!(p, ProbeSpec { binary: "/usr/bin/x".into(), symbol: "handle".into(), ret: true, usdt_provider: None });
        assert_eq!(p.to_string(), "/usr/bin/x:handle%return");
        assert!(!ProbeSpec::parse("postgres:exec_simple_query").unwrap().ret);
        assert!(ProbeSpec::parse("nosymbol").is_err());
        assert!(ProbeSpec::parse(":sym").is_err());
        assert!(ProbeSpec::parse("bin:").is_err());
        // USDT: usdt:BIN:PROVIDER:NAME (the binary may hold ':'), never %return.
        let u = ProbeSpec::parse("usdt:/usr/lib/postgresql/15/bin/postgres:postgresql:query__start").unwrap();
        assert_eq!(
            (u.binary.as_str(), u.usdt_provider.as_deref(), u.symbol.as_str(), u.ret),
            ("/usr/lib/postgresql/15/bin/postgres", Some("postgresql"), "query__start", false)
        );
        assert_eq!(u.to_string(), "usdt:/usr/lib/postgresql/15/bin/postgres:postgresql:query__start");
        for bad in ["usdt:bin:prov", "usdt::p:n", "usdt:bin:p:n%return", "usdt:bin::n", "usdt:bin:p:"] {
            assert!(ProbeSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolves_a_symbol_of_our_own_binary_and_suggests_names() {
        // The test binary itself is an ELF with a .symtab.
        let me = std::env::current_exe().unwrap();
        let spec = ProbeSpec { binary: me.display().to_string(), symbol: "main".into(), ret: false, usdt_provider: None };
        let r = resolve(&spec).unwrap();
        assert!(r.offset > 0 && r.offset <= r.addr.max(r.offset));
        let bad = ProbeSpec { symbol: "mian".into(), ..spec };
        match resolve(&bad).unwrap_err() {
            UprobeError::SymbolNotFound { suggestions, .. } => {
                assert!(suggestions.contains(&"main".to_string()))
            }
            e => panic!("{e}"),
        }
        let none = ProbeSpec { binary: "/nonexistent/tailprof-x".into(), symbol: "f".into(), ret: false, usdt_provider: None };
        assert!(matches!(resolve(&none), Err(UprobeError::BinaryNotFound(_))));
        let not_elf = ProbeSpec { binary: "/proc/self/status".into(), ..bad.clone() };
        assert!(matches!(resolve(&not_elf), Err(UprobeError::NotElf { .. } | UprobeError::Read { .. })));
    }

    /// A C program with `tailprof_answer` (returns 42) built by gcc in a scratch
    /// directory; None without gcc.
    fn c_program() -> Option<(PathBuf, PathBuf)> {
        let dir = std::env::temp_dir().join(format!("tailprof-uprobe-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "__attribute__((noinline)) int tailprof_answer(void) { return 42; }\n\
             int main(void) { return tailprof_answer() - 42; }\n",
        )
        .ok()?;
        let bin = dir.join("p");
        let ok = std::process::Command::new("gcc").args(["-O1", "-o"]).arg(&bin).arg(&src).status().is_ok_and(|s| s.success());
        ok.then_some((dir, bin))
    }

    #[test]
    fn the_offset_holds_the_function_code() {
        let Some((dir, bin)) = c_program() else {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "gcc cannot build the probed C program");
            return;
        };
        let spec = ProbeSpec { binary: bin.display().to_string(), symbol: "tailprof_answer".into(), ret: false, usdt_provider: None };
        let r = resolve(&spec).unwrap();
        let bytes = std::fs::read(&bin).unwrap();
        // Same answer from the bytes in memory.
        assert_eq!(symbol_offset(&bytes, "tailprof_answer").unwrap(), (r.addr, r.offset));
        if cfg!(target_arch = "x86_64") {
            // mov $42, %eax; ret (after an endbr64 when CET is on)
            let code = &bytes[r.offset as usize..][..12];
            assert!(code.windows(6).any(|w| w == [0xb8, 42, 0, 0, 0, 0xc3]), "{code:x?}");
        }
        // Damaged copies: an error or an answer, never a panic; cut short: an error.
        let mut flipped = bytes.clone();
        for at in (0..4096.min(bytes.len())).chain((bytes.len() - 4096.min(bytes.len()))..bytes.len()) {
            flipped[at] ^= 0xff;
            let _ = symbol_offset(&flipped, "tailprof_answer");
            flipped[at] ^= 0xff;
        }
        for n in (0..bytes.len()).step_by(97) {
            let _ = symbol_offset(&bytes[..n], "tailprof_answer");
        }
        assert!(matches!(symbol_offset(&bytes[..bytes.len() - 1], "tailprof_answer"), Err(Lookup::Bad(_))));
        // Not ELF64 little-endian.
        let mut elf32 = bytes.clone();
        elf32[4] = 1;
        assert!(matches!(symbol_offset(&elf32, "x"), Err(Lookup::NotElf | Lookup::Bad(_))));
        assert!(matches!(symbol_offset(&b"#!/bin/sh\n"[..], "x"), Err(Lookup::NotElf)));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn close_names_are_the_best_five_in_any_order() {
        let names = ["mainloop", "main", "domain", "Main", "maim", "mains", "xmain", "zzz", "mian", "main", "remainder", "amain"];
        let run = |order: &mut dyn Iterator<Item = &&str>| {
            let mut c = CloseNames::new("main");
            order.for_each(|n| c.offer(n));
            c.names()
        };
        // (distance, name): containing it (by the length difference, at most 3), then
        // within two edits; ties by name.
        let best = ["Main", "main", "amain", "maim", "mains"];
        assert_eq!(run(&mut names.iter()), best);
        assert_eq!(run(&mut names.iter().rev()), best);
        let mut few = CloseNames::new("main");
        ["zzz", "xmain", "domain"].iter().for_each(|n| few.offer(n));
        assert_eq!(few.names(), ["xmain", "domain"]);
    }

    #[test]
    fn markers_from_hits() {
        let mut m = MarkerMaker::new(false, Some("q".into()));
        let hit = |tid, time| Sample { time, pid: 1, tid, ..Sample::default() };
        let mut out = Vec::new();
        m.convert(&hit(1, 10), ProbeRole::Begin, &mut out);
        m.convert(&hit(2, 11), ProbeRole::Begin, &mut out);
        m.convert(&hit(1, 12), ProbeRole::End, &mut out);
        m.convert(&hit(3, 13), ProbeRole::End, &mut out);
        assert!(matches!(&out[0], Record::ItemClass(c) if c.name == "q" && c.id == UPROBE_CLASS_ID));
        let ms: Vec<(u32, MarkerKind, u64)> = out
            .iter()
            .filter_map(|r| match r {
                Record::Marker(k) => Some((k.tid, k.kind, k.item)),
                _ => None,
            })
            .collect();
        assert_eq!(
            ms,
            [
                (1, MarkerKind::Begin, 1),
                (2, MarkerKind::Begin, 2),
                (1, MarkerKind::End, Marker::UNKNOWN_ITEM),
                (3, MarkerKind::End, Marker::UNKNOWN_ITEM)
            ]
        );
        assert_eq!(m.unmatched_ends, 1);
        let mut r = MarkerMaker::new(true, None);
        let mut out = Vec::new();
        r.convert(&Sample { regs: vec![77], ..Sample::default() }, ProbeRole::Begin, &mut out);
        assert!(matches!(&out[0], Record::Marker(k) if k.item == 77 && k.class == 0));
    }
}
