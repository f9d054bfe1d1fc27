//! Event names: `cpu-clock`, `cycles:upp`, `LLC-load-misses`, `r01d1`,
//! `cpu/event=0xd1,umask=0x20/pp`, `cpu/mem-loads,ldlat=30/P`, `ibs_op//`,
//! `sched:sched_switch`.
//!
//! Grammar (perf-compatible where it overlaps):
//!
//! * `NAME[:MODS]` where NAME is a generic software / hardware / hardware-cache event,
//!   a raw event `rHEX`, or an event alias found in some PMU's sysfs `events/` directory
//!   (e.g. `mem-loads`, preferring the core PMU `cpu`, `cpu_core`, `cpu_atom`).
//! * `PMU/TERM,TERM,.../[MODS]` (a `:` before MODS is accepted too). A TERM is a name from
//!   `<sysfs>/<PMU>/format/` with an optional `=VALUE` (decimal or `0x` hex; no value
//!   means 1, for flags like `inv`/`edge`), `config=`/`config1=`/`config2=` raw values,
//!   or the name of an alias in `<sysfs>/<PMU>/events/`. Aliases are expanded first, so
//!   explicit terms override them (`cpu/mem-loads,ldlat=30/` uses latency 30).
//! * `SUBSYS:EVENT[:MODS]`: a tracepoint, resolved through tracefs `events/*/*/id`.
//!
//! MODS: `u` (user only), `k` (kernel only), `p`/`pp`/`ppp` (precise_ip 1..3), `P`
//! (highest precision: `<sysfs>/<PMU>/caps/max_precise`, or 3 when the PMU does not
//! say; the caller may retry lower on EOPNOTSUPP/EINVAL). Precision is rejected for
//! software events and tracepoints.
//!
//! Memory sampling rule ([`EventSpec::mem`]): an event gets PERF_SAMPLE_ADDR |
//! WEIGHT_STRUCT | DATA_SRC when its resolved terms contain `ldlat` (directly or via an
//! alias), or it uses a sysfs alias whose name starts with `mem-loads` / `mem-stores`.
//! A caller may also set `mem` itself (e.g. from a `--data-addr` option).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as b;

/// Where PMUs are described.
pub const SYSFS_PMU_ROOT: &str = "/sys/bus/event_source/devices";
/// Where tracepoint ids are looked up, in order.
pub const TRACEFS_ROOTS: &[&str] = &["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Core CPU PMU names, in order of preference (`cpu_core`/`cpu_atom` on hybrid Intel).
pub const CORE_PMUS: &[&str] = &["cpu", "cpu_core", "cpu_atom"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    Software,
    Hardware,
    HardwareCache,
    Raw,
    /// `cpu/event=..,umask=../`, `cpu/mem-loads/`, `ibs_op//` or any other sysfs PMU.
    Pmu,
    Tracepoint,
}

/// A parsed event, ready for [`crate::attr::build_attr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// As typed.
    pub name: String,
    pub kind: EventKind,
    pub attr_type: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// 0..=3 from `:p`/`:pp`/`:ppp`; `:P` = the PMU's maximum.
    pub precise: u8,
    /// `:P` was used (`precise` holds the PMU's advertised maximum, or 3 if unknown).
    pub precise_max: bool,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    /// The sysfs PMU the event belongs to (`Pmu` kind and sysfs aliases), else `None`.
    pub pmu: Option<String>,
    /// Sample data address, weight and data source (see the module docs for the rule).
    pub mem: bool,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    #[error("empty event name (the default event is cpu-clock)")]
    Empty,
    #[error("unknown event '{name}'{}; the always-available default is -e cpu-clock", did_you_mean(.suggestions))]
    Unknown { name: String, suggestions: Vec<String> },
    #[error("event '{event}': bad modifier '{modifier}': {reason}")]
    BadModifier { event: String, modifier: String, reason: String },
    #[error("event '{event}': no PMU named '{pmu}' in {root} (available: {})", .available.join(", "))]
    UnknownPmu { event: String, pmu: String, root: String, available: Vec<String> },
    #[error("event '{event}': PMU '{pmu}' has no term '{term}' (known: {})", .known.join(", "))]
    UnknownTerm { event: String, pmu: String, term: String, known: Vec<String> },
    #[error("event '{event}': bad term '{term}': {reason}")]
    BadTerm { event: String, term: String, reason: String },
    #[error("event '{event}': cannot use sysfs file {path}: {reason}")]
    Sysfs { event: String, path: String, reason: String },
    #[error("tracepoint '{name}': {reason}")]
    Tracepoint { name: String, reason: String },
    #[error("unknown register '{reg}': {hint}")]
    BadRegister { reg: String, hint: String },
    #[error("invalid sampling options: {0}")]
    BadSampling(String),
}

fn did_you_mean(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(" (did you mean: {}?)", s.join(", "))
    }
}

const SOFTWARE: &[(&str, u32)] = &[
    ("cpu-clock", b::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", b::PERF_COUNT_SW_TASK_CLOCK),
    ("page-faults", b::PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", b::PERF_COUNT_SW_PAGE_FAULTS),
    ("context-switches", b::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cs", b::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cpu-migrations", b::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("migrations", b::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("minor-faults", b::PERF_COUNT_SW_PAGE_FAULTS_MIN),
    ("major-faults", b::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
    ("alignment-faults", b::PERF_COUNT_SW_ALIGNMENT_FAULTS),
    ("emulation-faults", b::PERF_COUNT_SW_EMULATION_FAULTS),
    ("dummy", b::PERF_COUNT_SW_DUMMY),
    ("cgroup-switches", b::PERF_COUNT_SW_CGROUP_SWITCHES),
];

const HARDWARE: &[(&str, u32)] = &[
    ("cycles", b::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", b::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", b::PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", b::PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", b::PERF_COUNT_HW_CACHE_MISSES),
    ("branches", b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    ("branch-instructions", b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    ("branch-misses", b::PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", b::PERF_COUNT_HW_BUS_CYCLES),
    ("stalled-cycles-frontend", b::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND),
    ("idle-cycles-frontend", b::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND),
    ("stalled-cycles-backend", b::PERF_COUNT_HW_STALLED_CYCLES_BACKEND),
    ("idle-cycles-backend", b::PERF_COUNT_HW_STALLED_CYCLES_BACKEND),
    ("ref-cycles", b::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// Hardware-cache names: (aliases, id). The first alias is the canonical spelling.
const CACHES: &[(&[&str], u32)] = &[
    (&["L1-dcache", "l1-d", "l1d", "L1-data"], b::PERF_COUNT_HW_CACHE_L1D),
    (&["L1-icache", "l1-i", "l1i", "L1-instruction"], b::PERF_COUNT_HW_CACHE_L1I),
    (&["LLC", "L2"], b::PERF_COUNT_HW_CACHE_LL),
    (&["dTLB", "d-tlb", "Data-TLB"], b::PERF_COUNT_HW_CACHE_DTLB),
    (&["iTLB", "i-tlb", "Instruction-TLB"], b::PERF_COUNT_HW_CACHE_ITLB),
    (&["branch", "bpu", "btb", "bpc"], b::PERF_COUNT_HW_CACHE_BPU),
    (&["node"], b::PERF_COUNT_HW_CACHE_NODE),
];
const CACHE_OPS: &[(&[&str], u32)] = &[
    (&["load", "loads", "read"], b::PERF_COUNT_HW_CACHE_OP_READ),
    (&["store", "stores", "write"], b::PERF_COUNT_HW_CACHE_OP_WRITE),
    (&["prefetch", "prefetches", "speculative-read", "speculative-load"], b::PERF_COUNT_HW_CACHE_OP_PREFETCH),
];
const CACHE_RESULTS: &[(&[&str], u32)] = &[
    (&["refs", "reference", "ops", "access"], b::PERF_COUNT_HW_CACHE_RESULT_ACCESS),
    (&["misses", "miss"], b::PERF_COUNT_HW_CACHE_RESULT_MISS),
];

impl EventSpec {
    /// Parse against the live sysfs (`/sys/bus/event_source/devices`) and tracefs.
    pub fn parse(s: &str) -> Result<EventSpec, EventError> {
        Self::parse_with_roots(s, Path::new(SYSFS_PMU_ROOT), None)
    }

    /// Parse against a fake PMU tree (tests); tracepoints still use the live tracefs.
    pub fn parse_with_sysfs(s: &str, sysfs_root: &Path) -> Result<EventSpec, EventError> {
        Self::parse_with_roots(s, sysfs_root, None)
    }

    /// Parse with explicit PMU and tracefs roots (`None`: [`TRACEFS_ROOTS`]).
    pub fn parse_with_roots(s: &str, sysfs_root: &Path, tracefs_root: Option<&Path>) -> Result<EventSpec, EventError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(EventError::Empty);
        }
        let ctx = Ctx { typed: s, root: sysfs_root };
        let (mut spec, mods) = if let Some(slash) = s.find('/') {
            let pmu = &s[..slash];
            let rest = &s[slash + 1..];
            let Some(close) = rest.rfind('/') else {
                return Err(EventError::BadTerm {
                    event: s.into(),
                    term: rest.into(),
                    reason: "missing closing '/' (syntax: pmu/term,term=value/modifiers)".into(),
                });
            };
            let mods = rest[close + 1..].strip_prefix(':').unwrap_or(&rest[close + 1..]);
            (ctx.pmu_event(pmu, &rest[..close], &[])?, mods)
        } else {
            let (base, mods) = split_modifiers(s);
            let spec = if let Some((subsys, event)) = base.split_once(':') {
                if ctx.builtin(subsys).is_some() {
                    let bad = &base[subsys.len() + 1..];
                    return Err(bad_mod(s, bad, "allowed modifiers: u, k, p, pp, ppp, P"));
                }
                tracepoint(s, subsys, event, tracefs_root)?
            } else {
                ctx.named(base)?
            };
            (spec, mods)
        };
        apply_modifiers(&mut spec, mods, sysfs_root)?;
        Ok(spec)
    }

    /// Whether the event needs the core CPU PMU (generic hardware, hardware-cache and
    /// raw events, and sysfs events of `cpu`/`cpu_core`/`cpu_atom`).
    pub fn needs_hardware_pmu(&self) -> bool {
        match self.kind {
            EventKind::Hardware | EventKind::HardwareCache | EventKind::Raw => true,
            EventKind::Pmu => self.pmu.as_deref().is_some_and(|p| CORE_PMUS.contains(&p)),
            _ => false,
        }
    }

    /// cpu-clock or task-clock (any modifiers): the period is nanoseconds of run time, so
    /// samples grow with the overhead itself (the time model of `plan` and `calibrate`),
    /// and counts are nanoseconds (`stat`).
    pub fn is_clock(&self) -> bool {
        self.kind == EventKind::Software
            && (self.config == u64::from(b::PERF_COUNT_SW_CPU_CLOCK) || self.config == u64::from(b::PERF_COUNT_SW_TASK_CLOCK))
    }

    fn new(name: &str, kind: EventKind, attr_type: u32, config: u64) -> EventSpec {
        EventSpec {
            name: name.to_string(),
            kind,
            attr_type,
            config,
            config1: 0,
            config2: 0,
            precise: 0,
            precise_max: false,
            exclude_user: false,
            exclude_kernel: false,
            pmu: None,
            mem: false,
        }
    }
}

fn bad_mod(event: &str, modifier: &str, reason: &str) -> EventError {
    EventError::BadModifier { event: event.into(), modifier: modifier.into(), reason: reason.into() }
}

/// `cycles:upp` -> ("cycles", "upp"); a last `:` segment counts as modifiers only when it
/// consists of modifier letters, so `sched:sched_switch` stays whole.
fn split_modifiers(s: &str) -> (&str, &str) {
    match s.rsplit_once(':') {
        Some((base, m)) if !base.is_empty() && m.chars().all(|c| "ukpP".contains(c)) => (base, m),
        _ => (s, ""),
    }
}

fn apply_modifiers(spec: &mut EventSpec, mods: &str, root: &Path) -> Result<(), EventError> {
    if mods.is_empty() {
        return Ok(());
    }
    let (mut u, mut k, mut p, mut big_p) = (false, false, 0u8, false);
    for c in mods.chars() {
        match c {
            'u' => u = true,
            'k' => k = true,
            'p' => p += 1,
            'P' => big_p = true,
            _ => {
                return Err(bad_mod(&spec.name, mods, "allowed modifiers: u, k, p, pp, ppp, P"));
            }
        }
    }
    if p > 3 {
        return Err(bad_mod(&spec.name, mods, "at most :ppp (precise_ip=3)"));
    }
    if p > 0 && big_p {
        return Err(bad_mod(&spec.name, mods, "use either :P (maximum precision) or :p/:pp/:ppp"));
    }
    if (p > 0 || big_p) && matches!(spec.kind, EventKind::Software | EventKind::Tracepoint) {
        return Err(bad_mod(
            &spec.name,
            mods,
            "precise sampling (:p/:P) needs a hardware PMU event such as cycles:pp; software events and tracepoints are already exact",
        ));
    }
    if u && !k {
        spec.exclude_kernel = true;
    } else if k && !u {
        spec.exclude_user = true;
    }
    if big_p {
        spec.precise_max = true;
        let pmu = spec.pmu.clone().or_else(|| core_pmu(root));
        spec.precise = pmu.and_then(|p| read_max_precise(root, &p)).unwrap_or(3);
    } else if p > 0 {
        spec.precise = p;
    }
    Ok(())
}

/// The first core PMU present under `root`.
pub(crate) fn core_pmu(root: &Path) -> Option<String> {
    CORE_PMUS.iter().find(|p| root.join(p).is_dir()).map(|p| p.to_string())
}

/// `<root>/<pmu>/caps/max_precise`, when the kernel exports it.
pub(crate) fn read_max_precise(root: &Path, pmu: &str) -> Option<u8> {
    let s = fs::read_to_string(root.join(pmu).join("caps/max_precise")).ok()?;
    s.trim().parse::<u8>().ok().map(|v| v.min(3))
}

struct Ctx<'a> {
    typed: &'a str,
    root: &'a Path,
}

impl Ctx<'_> {
    /// Built-in names: software, hardware, hardware cache, raw.
    fn builtin(&self, name: &str) -> Option<EventSpec> {
        let lower = name.to_ascii_lowercase();
        if let Some(&(_, id)) = SOFTWARE.iter().find(|(n, _)| *n == lower) {
            return Some(EventSpec::new(self.typed, EventKind::Software, b::PERF_TYPE_SOFTWARE, id as u64));
        }
        if let Some(&(_, id)) = HARDWARE.iter().find(|(n, _)| *n == lower) {
            return Some(EventSpec::new(self.typed, EventKind::Hardware, b::PERF_TYPE_HARDWARE, id as u64));
        }
        if let Some(config) = hw_cache_config(&lower) {
            return Some(EventSpec::new(self.typed, EventKind::HardwareCache, b::PERF_TYPE_HW_CACHE, config));
        }
        let hex = name.strip_prefix('r')?;
        if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let config = u64::from_str_radix(hex, 16).ok()?;
        Some(EventSpec::new(self.typed, EventKind::Raw, b::PERF_TYPE_RAW, config))
    }

    fn named(&self, name: &str) -> Result<EventSpec, EventError> {
        if let Some(spec) = self.builtin(name) {
            return Ok(spec);
        }
        // A sysfs alias without a PMU prefix (`mem-loads`): core PMUs first.
        for pmu in self.pmus_core_first() {
            if alias_path(self.root, &pmu, name).is_some() {
                return self.pmu_event(&pmu, "", &[name]);
            }
        }
        Err(EventError::Unknown { name: name.to_string(), suggestions: self.suggest(name) })
    }

    fn pmus_core_first(&self) -> Vec<String> {
        let mut all = list_dir(self.root);
        all.sort_by_key(|p| (CORE_PMUS.iter().position(|c| c == p).unwrap_or(usize::MAX), p.clone()));
        all
    }

    fn suggest(&self, name: &str) -> Vec<String> {
        let mut cands: Vec<String> = SOFTWARE.iter().chain(HARDWARE).map(|(n, _)| n.to_string()).collect();
        for (aliases, _) in CACHES {
            for op in ["loads", "load-misses", "stores", "store-misses", "prefetches", "prefetch-misses"] {
                cands.push(format!("{}-{op}", aliases[0]));
            }
        }
        for pmu in self.pmus_core_first() {
            cands.extend(list_dir(&self.root.join(&pmu).join("events")).into_iter().filter(|e| !e.contains('.')));
        }
        close_matches(name, &cands)
    }

    /// `pmu/terms/`; `aliases` are alias names to expand before `terms`.
    fn pmu_event(&self, pmu: &str, terms: &str, aliases: &[&str]) -> Result<EventSpec, EventError> {
        let dir = self.root.join(pmu);
        if pmu.is_empty() || pmu.contains("..") || !dir.is_dir() {
            return Err(EventError::UnknownPmu {
                event: self.typed.into(),
                pmu: pmu.into(),
                root: self.root.display().to_string(),
                available: list_dir(self.root),
            });
        }
        let type_path = dir.join("type");
        let attr_type = read_trimmed(&type_path)
            .map_err(|reason| self.sysfs_err(&type_path, reason))?
            .parse::<u32>()
            .map_err(|reason| self.sysfs_err(&type_path, reason))?;
        let formats = self.read_formats(&dir)?;
        let mut spec = EventSpec::new(self.typed, EventKind::Pmu, attr_type, 0);
        spec.pmu = Some(pmu.to_string());

        // Split terms into alias names (expanded first) and the rest.
        let mut alias_list: Vec<(String, PathBuf)> = Vec::new();
        let mut explicit: Vec<&str> = Vec::new();
        for t in aliases.iter().copied().chain(terms.split(',')) {
            let t = t.trim();
            if t.is_empty() {
                continue;
            }
            if !t.contains('=') && !formats.contains_key(t) {
                if let Some(p) = alias_path(self.root, pmu, t) {
                    alias_list.push((t.to_string(), p));
                    continue;
                }
            }
            explicit.push(t);
        }
        for (alias, path) in &alias_list {
            let text = read_trimmed(path).map_err(|r| self.sysfs_err(path, r))?;
            for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                self.apply_term(&mut spec, pmu, &formats, t).map_err(|e| match e {
                    EventError::BadTerm { reason, .. } => self.sysfs_err(path, reason),
                    other => other,
                })?;
            }
            if alias.starts_with("mem-loads") || alias.starts_with("mem-stores") {
                spec.mem = true;
            }
        }
        for t in explicit {
            self.apply_term(&mut spec, pmu, &formats, t)?;
        }
        Ok(spec)
    }

    fn apply_term(&self, spec: &mut EventSpec, pmu: &str, formats: &BTreeMap<String, Format>, term: &str) -> Result<(), EventError> {
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (term, None),
        };
        let bad = |reason: String| EventError::BadTerm { event: self.typed.into(), term: term.into(), reason };
        let value = match value {
            None => 1,
            Some(v) => parse_number(v).ok_or_else(|| bad(format!("'{v}' is not a number (decimal or 0x hex)")))?,
        };
        if key == "ldlat" {
            spec.mem = true;
        }
        if let Some(fmt) = formats.get(key) {
            let width: u32 = fmt.ranges.iter().map(|(lo, hi)| hi - lo + 1).sum();
            if width < 64 && value >> width != 0 {
                return Err(bad(format!("value {value:#x} does not fit in {width} bits ({})", fmt.text)));
            }
            let field = match fmt.field {
                0 => &mut spec.config,
                1 => &mut spec.config1,
                _ => &mut spec.config2,
            };
            let mut v = value;
            for &(lo, hi) in &fmt.ranges {
                let n = hi - lo + 1;
                let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << lo };
                *field = (*field & !mask) | ((v << lo) & mask);
                v = if n == 64 { 0 } else { v >> n };
            }
            return Ok(());
        }
        match key {
            "config" => spec.config = value,
            "config1" => spec.config1 = value,
            "config2" => spec.config2 = value,
            "period" | "freq" | "name" | "call-graph" | "stack-size" | "time" | "inherit" => {
                return Err(bad("not supported as a PMU term here; use the command-line options (-c/-F)".into()));
            }
            _ => {
                let mut known: Vec<String> = formats.keys().cloned().collect();
                known.extend(["config", "config1", "config2"].map(String::from));
                known.extend(list_dir(&self.root.join(pmu).join("events")).into_iter().filter(|e| !e.contains('.')));
                return Err(EventError::UnknownTerm { event: self.typed.into(), pmu: pmu.into(), term: key.into(), known });
            }
        }
        Ok(())
    }

    fn read_formats(&self, dir: &Path) -> Result<BTreeMap<String, Format>, EventError> {
        let mut out = BTreeMap::new();
        for name in list_dir(&dir.join("format")) {
            let path = dir.join("format").join(&name);
            let text = read_trimmed(&path).map_err(|r| self.sysfs_err(&path, r))?;
            let fmt = parse_format(&text).map_err(|r| self.sysfs_err(&path, r))?;
            out.insert(name, fmt);
        }
        Ok(out)
    }

    fn sysfs_err(&self, path: &Path, reason: impl std::fmt::Display) -> EventError {
        EventError::Sysfs { event: self.typed.into(), path: path.display().to_string(), reason: reason.to_string() }
    }
}

/// One sysfs `format/<term>` file: which config word and which bit ranges (low value bits
/// go to the first range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Format {
    pub field: u8,
    pub ranges: Vec<(u32, u32)>,
    pub text: String,
}

/// What is wrong with a sysfs `format/<term>` file ([`parse_format`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormatFileError {
    #[error("bad format '{0}'")]
    NoField(String),
    #[error("unsupported config field '{0}'")]
    UnsupportedField(String),
    #[error("bad bit range '{range}' in '{text}'")]
    BadRange { range: String, text: String },
}

/// Parse `config:0-7`, `config1:0-15`, `config:0-7,32-35`, `config:21`.
pub(crate) fn parse_format(text: &str) -> Result<Format, FormatFileError> {
    let (field, bits) = text.split_once(':').ok_or_else(|| FormatFileError::NoField(text.to_string()))?;
    let field = match field.trim() {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        other => return Err(FormatFileError::UnsupportedField(other.to_string())),
    };
    let mut ranges = Vec::new();
    for r in bits.split(',') {
        let (lo, hi) = match r.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>(), b.trim().parse::<u32>()),
            None => (r.trim().parse::<u32>(), r.trim().parse::<u32>()),
        };
        match (lo, hi) {
            (Ok(lo), Ok(hi)) if lo <= hi && hi < 64 => ranges.push((lo, hi)),
            _ => return Err(FormatFileError::BadRange { range: r.to_string(), text: text.to_string() }),
        }
    }
    Ok(Format { field, ranges, text: text.to_string() })
}

/// `L1-dcache-load-misses` -> cache | op << 8 | result << 16. Op defaults to load,
/// result to access.
fn hw_cache_config(lower: &str) -> Option<u64> {
    for (aliases, id) in CACHES {
        for alias in aliases.iter() {
            let alias = alias.to_ascii_lowercase();
            let Some(rest) = lower.strip_prefix(alias.as_str()) else { continue };
            if !(rest.is_empty() || rest.starts_with('-')) {
                continue;
            }
            let (mut op, mut result) = (None, None);
            let mut toks = rest.split('-').filter(|t| !t.is_empty()).peekable();
            let mut ok = true;
            while let Some(t) = toks.next() {
                // Two-word op names ("speculative-read").
                let two = toks.peek().map(|n| format!("{t}-{n}"));
                let lookup = |tables: &[(&[&str], u32)], w: &str| {
                    tables.iter().find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(w))).map(|x| x.1)
                };
                if let Some(o) = two.as_deref().and_then(|w| lookup(CACHE_OPS, w)) {
                    if op.replace(o).is_some() {
                        ok = false;
                    }
                    toks.next();
                } else if let Some(o) = lookup(CACHE_OPS, t) {
                    if op.replace(o).is_some() || result.is_some() {
                        ok = false;
                    }
                } else if let Some(r) = lookup(CACHE_RESULTS, t) {
                    if result.replace(r).is_some() {
                        ok = false;
                    }
                } else {
                    ok = false;
                }
            }
            if ok {
                let op = op.unwrap_or(b::PERF_COUNT_HW_CACHE_OP_READ) as u64;
                let result = result.unwrap_or(b::PERF_COUNT_HW_CACHE_RESULT_ACCESS) as u64;
                return Some(*id as u64 | op << 8 | result << 16);
            }
        }
    }
    None
}

fn tracepoint(typed: &str, subsys: &str, event: &str, tracefs_root: Option<&Path>) -> Result<EventSpec, EventError> {
    let err = |reason: String| EventError::Tracepoint { name: format!("{subsys}:{event}"), reason };
    let valid = |s: &str| !s.is_empty() && s != "." && s != ".." && s.bytes().all(|c| c.is_ascii_alphanumeric() || b"_-.".contains(&c));
    if !valid(subsys) || !valid(event) {
        return Err(err("not a valid tracepoint name (syntax: subsystem:event, e.g. sched:sched_switch)".into()));
    }
    let roots: Vec<PathBuf> = match tracefs_root {
        Some(r) => vec![r.to_path_buf()],
        None => TRACEFS_ROOTS.iter().map(PathBuf::from).collect(),
    };
    let Some(root) = roots.iter().find(|r| r.join("events").is_dir()) else {
        return Err(err("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)".into()));
    };
    let id_path = root.join("events").join(subsys).join(event).join("id");
    let id = match fs::read_to_string(&id_path) {
        Ok(s) => s.trim().parse::<u64>().map_err(|e| err(format!("{}: {e}", id_path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut cands = list_dir(&root.join("events").join(subsys));
            if cands.is_empty() {
                cands = list_dir(&root.join("events"));
            }
            let near = close_matches(event, &cands);
            return Err(err(format!("no such tracepoint under {}/events{}", root.display(), did_you_mean(&near))));
        }
        Err(e) => return Err(err(format!("cannot read {}: {e} (tracefs usually needs root)", id_path.display()))),
    };
    Ok(EventSpec::new(typed, EventKind::Tracepoint, b::PERF_TYPE_TRACEPOINT, id))
}

fn alias_path(root: &Path, pmu: &str, name: &str) -> Option<PathBuf> {
    if name.is_empty() || name.contains('/') || name.contains("..") || name.contains('.') {
        return None;
    }
    let p = root.join(pmu).join("events").join(name);
    p.is_file().then_some(p)
}

fn read_trimmed(p: &Path) -> std::io::Result<String> {
    fs::read_to_string(p).map(|s| s.trim().to_string())
}

/// Sorted names in a directory (empty when it does not exist).
pub(crate) fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(p).map(|rd| rd.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// Decimal or `0x` hex.
pub(crate) fn parse_number(v: &str) -> Option<u64> {
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        v.parse::<u64>().ok()
    }
}

/// Up to five candidates close to `name` (edit distance, or substring).
pub(crate) fn close_matches(name: &str, cands: &[String]) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let limit = (lower.len() / 3).max(2);
    let mut scored: Vec<(usize, &String)> = cands
        .iter()
        .filter_map(|c| {
            let cl = c.to_ascii_lowercase();
            let d = edit_distance(&lower, &cl);
            if d <= limit {
                Some((d, c))
            } else if lower.len() >= 3 && (cl.contains(&lower) || lower.contains(&cl)) {
                Some((limit + 1, c))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    let mut out: Vec<String> = Vec::new();
    for (_, c) in scored {
        if !out.contains(c) {
            out.push(c.clone());
        }
        if out.len() == 5 {
            break;
        }
    }
    out
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests;
