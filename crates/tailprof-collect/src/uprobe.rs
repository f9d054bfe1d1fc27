//! Item boundaries from an unmodified binary: uprobes through `perf_event_open`.
//!
//! `--item-begin BIN:SYMBOL --item-end BIN:SYMBOL%return` turns a request-handling
//! function into item boundaries without any code change. This module owns:
//!
//! * parsing a probe definition ([`ProbeSpec::parse`]);
//! * resolving `SYMBOL` to a file offset ([`resolve`]): `.symtab` then `.dynsym`
//!   (defined `FUNC`/`IFUNC` symbols), `st_value` translated to a file offset through
//!   the `PT_LOAD` program headers; an unknown name is reported with close names;
//! * the uprobe PMU ([`UprobePmu`]: its type from
//!   `/sys/bus/event_source/devices/uprobe/type`, the `retprobe` bit from its `format/`)
//!   and the attr of one probe ([`uprobe_attr`], golden-tested in `tests/attr/`):
//!   `config1` = pointer to the path, `config2` = file offset, `sample_period = 1`,
//!   sample_type IDENTIFIER | IP | TID | TIME | CPU (+ REGS_USER for the id register);
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

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as b;
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
    #[error("bad probe '{spec}': {reason} (expected BIN:SYMBOL or BIN:SYMBOL%return)")]
    BadSpec { spec: String, reason: String },
    #[error("probe binary not found: {0}")]
    BinaryNotFound(String),
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path} is not a 64-bit little-endian ELF file")]
    NotElf { path: String },
    #[error("symbol '{symbol}' not found in {path}{}", suggest(.suggestions))]
    SymbolNotFound {
        symbol: String,
        path: String,
        suggestions: Vec<String>,
    },
    #[error("symbol '{symbol}' in {path} (address {addr:#x}) lies in no loadable segment")]
    NotLoaded {
        symbol: String,
        path: String,
        addr: u64,
    },
    #[error("this kernel has no uprobe PMU ({UPROBE_SYSFS} missing or unreadable); it needs CONFIG_UPROBE_EVENTS and Linux 4.17+")]
    PmuMissing,
    #[error("bad item id register: {0}")]
    BadRegister(String),
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("; close names: {}", s.join(", "))
    }
}

/// `BIN:SYMBOL` or `BIN:SYMBOL%return`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub binary: String,
    pub symbol: String,
    /// Fire on the function's return (a uretprobe) instead of its entry.
    pub ret: bool,
}

impl ProbeSpec {
    pub fn parse(s: &str) -> Result<ProbeSpec, UprobeError> {
        let bad = |reason: &str| UprobeError::BadSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (rest, ret) = match s.strip_suffix("%return") {
            Some(r) => (r, true),
            None => (s, false),
        };
        let (bin, sym) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad("no ':' between binary and symbol"))?;
        if bin.is_empty() {
            return Err(bad("empty binary"));
        }
        if sym.is_empty() || sym.contains(['%', '/', ' ']) {
            return Err(bad("bad symbol name"));
        }
        Ok(ProbeSpec {
            binary: bin.to_string(),
            symbol: sym.to_string(),
            ret,
        })
    }
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}{}",
            self.binary,
            self.symbol,
            if self.ret { "%return" } else { "" }
        )
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
}

impl ResolvedProbe {
    /// The definition as stored in the trace header: `PATH:SYMBOL[%return]@0xOFFSET`.
    pub fn describe(&self) -> String {
        format!(
            "{}:{}{}@{:#x}",
            self.path.display(),
            self.spec.symbol,
            if self.spec.ret { "%return" } else { "" },
            self.offset
        )
    }
}

/// Find the binary (as given if it has a '/', else in PATH) and resolve the symbol.
pub fn resolve(spec: &ProbeSpec) -> Result<ResolvedProbe, UprobeError> {
    let found = if spec.binary.contains('/') {
        Some(PathBuf::from(&spec.binary)).filter(|p| p.is_file())
    } else {
        let path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|d| d.join(&spec.binary))
            .find(|p| p.is_file())
    };
    let path = found.ok_or_else(|| UprobeError::BinaryNotFound(spec.binary.clone()))?;
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let data = read_binary(&path).map_err(|source| UprobeError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let (addr, offset) = symbol_offset(&data, &spec.symbol).map_err(|e| match e {
        Lookup::NotElf => UprobeError::NotElf {
            path: path.display().to_string(),
        },
        Lookup::Missing(suggestions) => UprobeError::SymbolNotFound {
            symbol: spec.symbol.clone(),
            path: path.display().to_string(),
            suggestions,
        },
        Lookup::NotLoaded(addr) => UprobeError::NotLoaded {
            symbol: spec.symbol.clone(),
            path: path.display().to_string(),
            addr,
        },
    })?;
    Ok(ResolvedProbe {
        spec: spec.clone(),
        path,
        addr,
        offset,
    })
}

/// Largest binary [`resolve`] reads into memory.
const MAX_BINARY: u64 = 1 << 30;

/// Read a probed binary: opened like every path another user may control
/// ([`crate::procfs::open_untrusted`]: no final symlink, never blocks, regular files only)
/// and bounded in size before allocating.
fn read_binary(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = crate::procfs::open_untrusted(path)?;
    let len = f.metadata()?.len();
    if len > MAX_BINARY {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes is larger than the {MAX_BINARY}-byte limit for a probed binary"),
        ));
    }
    let mut data = Vec::with_capacity(len as usize);
    f.take(MAX_BINARY).read_to_end(&mut data)?;
    Ok(data)
}

enum Lookup {
    NotElf,
    Missing(Vec<String>),
    NotLoaded(u64),
}

fn rd<const N: usize>(d: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    d.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(d: &[u8], at: u64) -> Option<u64> {
    rd::<2>(d, at).map(|b| u16::from_le_bytes(b) as u64)
}
fn u32_at(d: &[u8], at: u64) -> Option<u64> {
    rd::<4>(d, at).map(|b| u32::from_le_bytes(b) as u64)
}
fn u64_at(d: &[u8], at: u64) -> Option<u64> {
    rd::<8>(d, at).map(u64::from_le_bytes)
}

/// `(st_value, file offset)` of a defined function symbol in an ELF64 LE image.
fn symbol_offset(d: &[u8], name: &str) -> Result<(u64, u64), Lookup> {
    if d.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err(Lookup::NotElf);
    }
    let hdr = || -> Option<_> {
        Some((
            u64_at(d, 0x20)?, // e_phoff
            u64_at(d, 0x28)?, // e_shoff
            u16_at(d, 0x36)?, // e_phentsize
            u16_at(d, 0x38)?, // e_phnum
            u16_at(d, 0x3a)?, // e_shentsize
            u16_at(d, 0x3c)?, // e_shnum
        ))
    };
    let (phoff, shoff, phentsize, phnum, shentsize, shnum) = hdr().ok_or(Lookup::NotElf)?;
    let mut all_names: Vec<String> = Vec::new();
    let mut found = None;
    // .symtab (SHT_SYMTAB = 2) first, then .dynsym (SHT_DYNSYM = 11).
    'outer: for want in [2u64, 11] {
        for i in 0..shnum {
            let sh = shoff + i * shentsize;
            if u32_at(d, sh + 4) != Some(want) {
                continue;
            }
            let (Some(off), Some(size), Some(link), Some(entsize)) = (
                u64_at(d, sh + 0x18),
                u64_at(d, sh + 0x20),
                u32_at(d, sh + 0x28),
                u64_at(d, sh + 0x38),
            ) else {
                continue;
            };
            let strsh = shoff + link * shentsize;
            let Some(stroff) = u64_at(d, strsh + 0x18) else {
                continue;
            };
            if entsize < 24 {
                continue;
            }
            for s in 0..size / entsize {
                let e = off + s * entsize;
                let (Some(st_name), Some(info), Some(shndx), Some(value)) = (
                    u32_at(d, e),
                    rd::<1>(d, e + 4),
                    u16_at(d, e + 6),
                    u64_at(d, e + 8),
                ) else {
                    break;
                };
                let ty = info[0] & 0xf;
                // STT_FUNC = 2, STT_GNU_IFUNC = 10; defined (shndx != SHN_UNDEF).
                if !(ty == 2 || ty == 10) || shndx == 0 || value == 0 {
                    continue;
                }
                let Some(sname) = cstr_at(d, stroff + st_name) else {
                    continue;
                };
                let base = sname.split('@').next().unwrap_or(sname);
                if base == name {
                    found = Some(value);
                    break 'outer;
                }
                all_names.push(base.to_string());
            }
        }
    }
    let Some(value) = found else {
        return Err(Lookup::Missing(close_names(name, all_names)));
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(d, ph) != Some(1) {
            continue; // PT_LOAD only
        }
        let (Some(p_offset), Some(p_vaddr), Some(p_filesz)) =
            (u64_at(d, ph + 8), u64_at(d, ph + 16), u64_at(d, ph + 32))
        else {
            continue;
        };
        if value >= p_vaddr && value < p_vaddr + p_filesz {
            return Ok((value, value - p_vaddr + p_offset));
        }
    }
    Err(Lookup::NotLoaded(value))
}

fn cstr_at(d: &[u8], at: u64) -> Option<&str> {
    let s = d.get(usize::try_from(at).ok()?..)?;
    let n = s.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&s[..n]).ok()
}

/// Up to five names that contain `name` (or that it contains), or are a small edit away.
fn close_names(name: &str, mut all: Vec<String>) -> Vec<String> {
    all.sort();
    all.dedup();
    let lname = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, String)> = all
        .into_iter()
        .filter_map(|n| {
            let ln = n.to_ascii_lowercase();
            let d = if ln.contains(&lname) || (ln.len() >= 4 && lname.contains(&ln)) {
                Some(ln.len().abs_diff(lname.len()).min(3))
            } else if ln.len().abs_diff(lname.len()) <= 2 {
                Some(edit_distance(&ln, &lname)).filter(|&d| d <= 2 + lname.len() / 8)
            } else {
                None
            };
            d.map(|d| (d, n))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
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
            .and_then(|s| {
                s.trim()
                    .strip_prefix("config:")
                    .and_then(|b| b.parse().ok())
            })
            .unwrap_or(0);
        Ok(UprobePmu {
            pmu_type,
            retprobe_bit,
        })
    }
}

/// How one probe is opened (everything but the path pointer, which must stay valid
/// during `perf_event_open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobeAttrConfig {
    pub offset: u64,
    pub ret: bool,
    pub regs_user: u64,
    pub clock: ClockChoice,
    pub inherit: bool,
    pub enable_on_exec: bool,
}

/// sample_type of a probe: IDENTIFIER | IP | TID | TIME | CPU (+ REGS_USER).
pub const UPROBE_SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_CPU) as u64;

/// The attr of one uprobe; `path_ptr` points to the NUL-terminated binary path.
pub fn uprobe_attr(pmu: &UprobePmu, c: &UprobeAttrConfig, path_ptr: u64) -> PerfEventAttr {
    let mut a = PerfEventAttr::default();
    a.type_ = pmu.pmu_type;
    a.size = ATTR_SIZE;
    a.config = if c.ret { 1 << pmu.retprobe_bit } else { 0 };
    a.config1 = path_ptr;
    a.config2 = c.offset;
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
    a
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

/// Begin and end resolved, with the id register's mask.
#[derive(Debug, Clone)]
pub struct PreparedProbes {
    pub begin: ResolvedProbe,
    pub end: ResolvedProbe,
    /// `sample_regs_user` of the begin probe (one bit, or 0).
    pub id_reg_mask: u64,
    pub id_reg: Option<String>,
    pub class: Option<String>,
    pub pmu: UprobePmu,
    /// Paths as C strings, for `config1`.
    pub begin_path: CString,
    pub end_path: CString,
}

impl ItemProbes {
    /// Resolve both probes, find the PMU, check the register.
    pub fn prepare(&self) -> Result<PreparedProbes, UprobeError> {
        let id_reg_mask = match &self.id_reg {
            None => 0,
            Some(r) => {
                let m = parse_regs(r).map_err(|e| UprobeError::BadRegister(e.to_string()))?;
                if m.count_ones() != 1 {
                    return Err(UprobeError::BadRegister(format!(
                        "'{r}': give exactly one register, e.g. rdi"
                    )));
                }
                m
            }
        };
        let begin = resolve(&self.begin)?;
        let end = resolve(&self.end)?;
        let pmu = UprobePmu::probe()?;
        let cpath = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| UprobeError::BinaryNotFound(p.display().to_string()))
        };
        Ok(PreparedProbes {
            begin_path: cpath(&begin.path)?,
            end_path: cpath(&end.path)?,
            begin,
            end,
            id_reg_mask,
            id_reg: self.id_reg.clone(),
            class: self.class.clone(),
            pmu,
        })
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
}

impl MarkerMaker {
    pub fn new(id_from_reg: bool, class: Option<String>) -> Self {
        MarkerMaker {
            id_from_reg,
            class,
            ..Default::default()
        }
    }

    /// Records for one hit, in order (an [`ItemClass`] before a process's first marker
    /// when a class is set, then the marker).
    pub fn convert(&mut self, s: &Sample, role: ProbeRole, out: &mut Vec<Record>) {
        let class = if self.class.is_some() {
            UPROBE_CLASS_ID
        } else {
            0
        };
        if let (Some(name), true) = (&self.class, role == ProbeRole::Begin) {
            if self.classes_declared.insert(s.pid) {
                out.push(Record::ItemClass(ItemClass {
                    time: s.time,
                    pid: s.pid,
                    id: UPROBE_CLASS_ID,
                    name: name.clone(),
                }));
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
        out.push(Record::Marker(Marker {
            time: s.time,
            pid: s.pid,
            tid: s.tid,
            kind,
            item,
            class,
            source: MarkerSource::Uprobe,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let p = ProbeSpec::parse("/usr/bin/x:handle%return").unwrap();
        assert_eq!(
            p,
            ProbeSpec {
                binary: "/usr/bin/x".into(),
                symbol: "handle".into(),
                ret: true
            }
        );
        assert_eq!(p.to_string(), "/usr/bin/x:handle%return");
        assert!(!ProbeSpec::parse("postgres:exec_simple_query").unwrap().ret);
        assert!(ProbeSpec::parse("nosymbol").is_err());
        assert!(ProbeSpec::parse(":sym").is_err());
        assert!(ProbeSpec::parse("bin:").is_err());
    }

    #[test]
    fn resolves_a_symbol_of_our_own_binary_and_suggests_names() {
        // The test binary itself is an ELF with a .symtab.
        let me = std::env::current_exe().unwrap();
        let spec = ProbeSpec {
            binary: me.display().to_string(),
            symbol: "main".into(),
            ret: false,
        };
        let r = resolve(&spec).unwrap();
        assert!(r.offset > 0 && r.offset <= r.addr.max(r.offset));
        let bad = ProbeSpec {
            symbol: "mian".into(),
            ..spec
        };
        match resolve(&bad).unwrap_err() {
            UprobeError::SymbolNotFound { suggestions, .. } => {
                assert!(suggestions.contains(&"main".to_string()))
            }
            e => panic!("{e}"),
        }
        let none = ProbeSpec {
            binary: "/nonexistent/tailprof-x".into(),
            symbol: "f".into(),
            ret: false,
        };
        assert!(matches!(
            resolve(&none),
            Err(UprobeError::BinaryNotFound(_))
        ));
        let not_elf = ProbeSpec {
            binary: "/proc/self/status".into(),
            ..bad.clone()
        };
        assert!(matches!(
            resolve(&not_elf),
            Err(UprobeError::NotElf { .. } | UprobeError::Read { .. })
        ));
    }

    #[test]
    fn markers_from_hits() {
        let mut m = MarkerMaker::new(false, Some("q".into()));
        let hit = |tid, time| Sample {
            time,
            pid: 1,
            tid,
            ..Sample::default()
        };
        let mut out = Vec::new();
        m.convert(&hit(1, 10), ProbeRole::Begin, &mut out);
        m.convert(&hit(2, 11), ProbeRole::Begin, &mut out);
        m.convert(&hit(1, 12), ProbeRole::End, &mut out);
        m.convert(&hit(3, 13), ProbeRole::End, &mut out);
        assert!(
            matches!(&out[0], Record::ItemClass(c) if c.name == "q" && c.id == UPROBE_CLASS_ID)
        );
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
        r.convert(
            &Sample {
                regs: vec![77],
                ..Sample::default()
            },
            ProbeRole::Begin,
            &mut out,
        );
        assert!(matches!(&out[0], Record::Marker(k) if k.item == 77 && k.class == 0));
    }
}
