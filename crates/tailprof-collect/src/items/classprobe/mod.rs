//! `--item-class-from BIN:SYMBOL:ARG[:TYPE]`: label requests with a class taken from an
//! argument of a probed function, without changing the program.
//!
//! The probe is a tracefs uprobe event with a fetch-argument (`+0(%di):string` reads the
//! C string the first argument points to; `%si:u64` reads a register), opened through
//! perf as a tracepoint so its hits arrive in the same rings as the samples, with
//! `PERF_SAMPLE_RAW` carrying the fetched value. The recorder turns each hit into a
//! class label for the item open on that thread (or begun next on it: PostgreSQL parses
//! a query before `PortalRun` runs it). Strings are reduced to their shape
//! ([`crate::items::sqlshape::shape`]: literals become `?`) so queries of one shape form one
//! class and no constant from the program's data is stored.
//!
//! Everything fetched comes from an untrusted process: lengths are checked against the
//! raw record, strings are cut at [`MAX_ARG`] bytes, and the classes kept per process are
//! bounded by [`ClassTable`] (the rest are counted as dropped).

mod open;

use crate::items::uprobe::{ProbeSpec, ResolvedProbe, UprobeError};
pub(crate) use open::ClassProbes;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Longest fetched string looked at, in bytes (the kernel fetches at most a page).
pub const MAX_ARG: usize = 4096;
/// Distinct classes kept per process (a bound against hostile or runaway targets).
pub const MAX_CLASSES_PER_PID: usize = 1024;
/// Labels remembered over all processes; past it the table starts afresh (labels seen
/// again are declared again under new ids), so exited processes cannot grow it without end.
pub const MAX_CLASSES_TOTAL: usize = 1 << 16;

/// How the argument is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    /// The register holds a pointer to a NUL-terminated string (the default).
    String,
    /// The register's value, unsigned.
    U64,
    /// The register's value, signed.
    S64,
}

/// A parsed `--item-class-from` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    pub probe: ProbeSpec,
    /// Register name as tracefs spells it for this architecture (`di`, `x0`); empty for
    /// a USDT probe.
    pub reg: String,
    pub ty: ArgType,
    /// A USDT probe's argument (from 0), read as its note's spec says at each site.
    pub usdt_arg: Option<usize>,
}

impl ClassSpec {
    /// Parses `BIN:SYMBOL:REG[:string|:u64|:s64]` (`REG` as `rdi`, `di`, `%di`, `x0`, or
    /// an argument position `arg1`..`arg6`).
    /// Also `usdt:BIN:PROVIDER:NAME:argN[:string|:u64|:s64]` (N from 0; the operand and
    /// width come from the probe's note, `:u64`/`:s64` read an integer).
    pub fn parse(s: &str) -> Result<ClassSpec, UprobeError> {
        let bad = |reason: &str| UprobeError::BadSpec { spec: s.to_string(), reason: reason.to_string() };
        let (rest, ty) = match s.rsplit_once(':') {
            Some((r, "string")) => (r, ArgType::String),
            Some((r, "u64")) => (r, ArgType::U64),
            Some((r, "s64")) => (r, ArgType::S64),
            _ => (s, ArgType::String),
        };
        if rest.starts_with("usdt:") {
            let (probe, arg) = rest.rsplit_once(':').ok_or_else(|| bad("expected usdt:BIN:PROVIDER:NAME:argN"))?;
            let n = arg
                .strip_prefix("arg")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n < 12)
                .ok_or_else(|| bad("a USDT argument is arg0..arg11"))?;
            let probe = ProbeSpec::parse(probe)?;
            return Ok(ClassSpec { probe, reg: String::new(), ty, usdt_arg: Some(n) });
        }
        let (probe, reg) = rest.rsplit_once(':').ok_or_else(|| bad("expected BIN:SYMBOL:REG[:string|u64|s64]"))?;
        let reg = register_name(reg, std::env::consts::ARCH).ok_or_else(|| {
            bad(&format!(
                "unknown register {reg:?} (use {} or arg1..arg6)",
                if std::env::consts::ARCH == "aarch64" { "x0..x7" } else { "rdi, rsi, rdx, rcx, r8, r9" }
            ))
        })?;
        let probe = ProbeSpec::parse(probe)?;
        if probe.ret {
            return Err(bad("a class comes from a function's entry, not its return (%return)"));
        }
        Ok(ClassSpec { probe, reg, ty, usdt_arg: None })
    }

    /// The tracefs fetch-argument at one resolved site: [`ClassSpec::fetch_arg`], or for a
    /// USDT argument the site's operand ([`crate::items::usdt::ArgSpec::fetch_arg`]).
    pub fn fetch_arg_at(&self, site: &ResolvedProbe) -> Result<String, UprobeError> {
        let Some(n) = self.usdt_arg else { return Ok(self.fetch_arg()) };
        let bad = |reason: String| UprobeError::BadSpec { spec: format!("{}:arg{n}", site.describe()), reason };
        let args =
            crate::items::usdt::parse_args(site.usdt_args.as_deref().unwrap_or("")).map_err(|e| bad(format!("its argument spec: {e}")))?;
        let arg = args.get(n).ok_or_else(|| bad(format!("the probe has {} argument(s), numbered from arg0", args.len())))?;
        let signed = match self.ty {
            ArgType::String => None,
            ArgType::U64 => Some(false),
            ArgType::S64 => Some(true),
        };
        arg.fetch_arg(self.ty == ArgType::String, signed).map_err(|e| bad(e.to_string()))
    }

    /// The tracefs fetch-argument for this spec: `+0(%di):string` or `%di:u64`.
    pub fn fetch_arg(&self) -> String {
        match self.ty {
            ArgType::String => format!("+0(%{}):string", self.reg),
            ArgType::U64 => format!("%{}:u64", self.reg),
            ArgType::S64 => format!("%{}:s64", self.reg),
        }
    }
}

/// The tracefs register name of `r` on `arch`, `None` when unknown.
pub fn register_name(r: &str, arch: &str) -> Option<String> {
    let r = r.trim_start_matches('%').to_ascii_lowercase();
    let x86_args = ["di", "si", "dx", "cx", "r8", "r9"];
    if let Some(n) = r.strip_prefix("arg").and_then(|n| n.parse::<usize>().ok()) {
        return match arch {
            "x86_64" => x86_args.get(n.wrapping_sub(1)).map(|s| s.to_string()),
            "aarch64" if (1..=8).contains(&n) => Some(format!("x{}", n - 1)),
            _ => None,
        };
    }
    match arch {
        "x86_64" => {
            let short = r.strip_prefix('r').filter(|s| ["di", "si", "dx", "cx", "ax", "bx", "bp", "sp"].contains(s)).unwrap_or(&r);
            let ok = ["di", "si", "dx", "cx", "ax", "bx", "bp", "sp"].contains(&short)
                || short.strip_prefix('r').and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| (8..=15).contains(&n));
            ok.then(|| short.to_string())
        }
        "aarch64" => r.strip_prefix('x').and_then(|n| n.parse::<u32>().ok()).filter(|&n| n <= 30).map(|n| format!("x{n}")),
        _ => None,
    }
}

/// Where the fetched value sits in the tracepoint's raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgLayout {
    pub offset: usize,
    /// `__data_loc`: the field is a u32 (length << 16 | offset) pointing at the bytes.
    pub data_loc: bool,
    pub size: usize,
    pub signed: bool,
}

/// Finds field `name` in a tracefs `format` file.
pub fn parse_format(text: &str, name: &str) -> Option<ArgLayout> {
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else { continue };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next()?;
        if decl.rsplit([' ', '*']).next() != Some(name) {
            continue;
        }
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("signed:") {
                signed = v == "1";
            }
        }
        return Some(ArgLayout { offset: offset?, size: size?, signed, data_loc: decl.starts_with("__data_loc") });
    }
    None
}

/// A fetched value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    Text(String),
    Int(i128),
}

/// Decodes the argument from a `PERF_SAMPLE_RAW` payload; `None` when the record does
/// not hold it (too short, a location outside the record).
pub fn decode_raw(layout: &ArgLayout, raw: &[u8]) -> Option<ArgValue> {
    let field = raw.get(layout.offset..layout.offset.checked_add(layout.size)?)?;
    if layout.data_loc {
        let loc = u32::from_ne_bytes(field.get(..4)?.try_into().ok()?);
        let (len, off) = ((loc >> 16) as usize, (loc & 0xffff) as usize);
        let bytes = raw.get(off..off.checked_add(len)?)?;
        let bytes = &bytes[..bytes.len().min(MAX_ARG)];
        let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
        return Some(ArgValue::Text(String::from_utf8_lossy(bytes).into_owned()));
    }
    let v = match field.len() {
        1 => field[0] as u64,
        2 => u16::from_ne_bytes(field.try_into().ok()?) as u64,
        4 => u32::from_ne_bytes(field.try_into().ok()?) as u64,
        8 => u64::from_ne_bytes(field.try_into().ok()?),
        _ => return None,
    };
    let v = if layout.signed {
        let shift = 64 - 8 * field.len() as u32;
        (((v << shift) as i64) >> shift) as i128
    } else {
        v as i128
    };
    Some(ArgValue::Int(v))
}

/// The class label of a fetched value: the SQL shape of a string, the decimal integer.
pub fn label_of(v: &ArgValue) -> String {
    match v {
        ArgValue::Text(t) => crate::items::sqlshape::shape(t),
        ArgValue::Int(i) => i.to_string(),
    }
}

/// The tracefs directory ([`crate::tracefs::ensure_mounted`]: mounted at
/// `/sys/kernel/tracing` when absent). The second value says whether we mounted it
/// (callers say so).
pub fn tracefs_root() -> Result<(PathBuf, bool), UprobeError> {
    crate::tracefs::ensure_mounted().map_err(|source| UprobeError::Read { path: "tracefs".into(), source })
}

/// A uprobe event created in tracefs, removed again on drop (after the perf events
/// using it are closed: the kernel refuses to remove an event in use). Used for
/// `--item-class-from` (with a fetch-argument) and for the item-boundary probes of
/// inherited targets ([`crate::items::uprobe::ProbeVia`], without one).
#[derive(Debug)]
pub struct TracefsUprobe {
    root: PathBuf,
    pub group: String,
    pub name: String,
    /// Tracepoint id: `config` of a `PERF_TYPE_TRACEPOINT` attr.
    pub id: u64,
    /// Where the fetch-argument sits in the raw record (zero without one).
    pub layout: ArgLayout,
    /// An `--item-event` probe's arguments, in order (`layout` is the first).
    pub layouts: Vec<ArgLayout>,
}

impl TracefsUprobe {
    /// Creates `p:GROUP/NAME PATH:OFFSET[(REF_CTR_OFFSET)] arg=FETCH` with an unpredictable name.
    pub fn create(root: &Path, probe: &ResolvedProbe, spec: &ClassSpec) -> Result<TracefsUprobe, UprobeError> {
        let fetch = spec.fetch_arg_at(probe)?;
        let mut made = Self::define(root, probe, "cls", Some(&fetch))?;
        let format = std::fs::read_to_string(made.dir().join("format")).map_err(|e| made.io_err("read event format", e))?;
        made.layout = parse_format(&format, "arg")
            .ok_or_else(|| made.io_err("no arg field in event format", std::io::ErrorKind::InvalidData.into()))?;
        Ok(made)
    }

    /// Creates an `--item-event` probe's event: with its arguments' fetch-arguments at
    /// this site (fields `arg0`, `arg1`, ... in the spec's order), or none.
    pub fn create_event(root: &Path, probe: &ResolvedProbe, spec: &crate::items::events::EventSpec) -> Result<TracefsUprobe, UprobeError> {
        let mut fetches = Vec::with_capacity(spec.args.len());
        for (i, a) in spec.args.iter().enumerate() {
            fetches.push(format!("arg{i}={}", a.fetch_arg_at(probe)?));
        }
        if fetches.is_empty() {
            return Self::define_args(root, probe, "evt", "");
        }
        let mut made = Self::define_args(root, probe, "evt", &format!(" {}", fetches.join(" ")))?;
        let format = std::fs::read_to_string(made.dir().join("format")).map_err(|e| made.io_err("read event format", e))?;
        for i in 0..spec.args.len() {
            let l = parse_format(&format, &format!("arg{i}"))
                .ok_or_else(|| made.io_err("an argument field is missing in the event format", std::io::ErrorKind::InvalidData.into()))?;
            made.layouts.push(l);
        }
        made.layout = made.layouts[0];
        Ok(made)
    }

    /// Creates `p:GROUP/NAME PATH:OFFSET` (`r:` for a `%return` probe), no arguments,
    /// with an unpredictable name.
    pub fn create_plain(root: &Path, probe: &ResolvedProbe) -> Result<TracefsUprobe, UprobeError> {
        Self::define(root, probe, if probe.spec.ret { "end" } else { "beg" }, None)
    }

    /// Writes the definition and reads the event's id. Once the definition is written,
    /// the returned value (or its drop on error) removes it again.
    fn define(root: &Path, probe: &ResolvedProbe, prefix: &str, fetch: Option<&str>) -> Result<TracefsUprobe, UprobeError> {
        let args = fetch.map(|f| format!(" arg={f}")).unwrap_or_default();
        Self::define_args(root, probe, prefix, &args)
    }

    /// [`TracefsUprobe::define`] with the definition's argument list as it is written
    /// (empty, or starting with a space).
    fn define_args(root: &Path, probe: &ResolvedProbe, prefix: &str, args: &str) -> Result<TracefsUprobe, UprobeError> {
        let io = |what: &str, source| UprobeError::Read { path: format!("{} ({what})", root.display()), source };
        let path = probe.path.to_str().filter(|p| !p.contains([' ', '\n', ':'])).ok_or_else(|| UprobeError::BadSpec {
            spec: probe.path.display().to_string(),
            reason: "tracefs cannot name a binary whose path has spaces, colons or new lines".into(),
        })?;
        let group = format!("tailprof_{}", std::process::id());
        let name = format!("{prefix}_{:016x}", random_u64());
        let kind = if probe.uretprobe() { 'r' } else { 'p' };
        // A USDT semaphore: the kernel counts this probe in it while the event exists.
        let ref_ctr = if probe.ref_ctr_offset != 0 { format!("({:#x})", probe.ref_ctr_offset) } else { String::new() };
        let def = format!("{kind}:{group}/{name} {path}:{:#x}{ref_ctr}{args}\n", probe.offset);
        let mut f = std::fs::OpenOptions::new().append(true).open(root.join("uprobe_events")).map_err(|e| io("open uprobe_events", e))?;
        f.write_all(def.as_bytes()).map_err(|e| io("write uprobe_events", e))?;
        let mut made = TracefsUprobe {
            root: root.to_path_buf(),
            group,
            name,
            id: 0,
            layout: ArgLayout { offset: 0, data_loc: false, size: 0, signed: false },
            layouts: Vec::new(),
        };
        let id = std::fs::read_to_string(made.dir().join("id")).map_err(|e| made.io_err("read event id", e))?;
        made.id = id.trim().parse().map_err(|_| made.io_err("parse event id", std::io::ErrorKind::InvalidData.into()))?;
        Ok(made)
    }

    fn dir(&self) -> PathBuf {
        self.root.join("events").join(&self.group).join(&self.name)
    }

    fn io_err(&self, what: &str, source: std::io::Error) -> UprobeError {
        UprobeError::Read { path: format!("{} ({what})", self.root.display()), source }
    }
}

impl Drop for TracefsUprobe {
    fn drop(&mut self) {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(self.root.join("uprobe_events")) {
            let _ = f.write_all(format!("-:{}/{}\n", self.group, self.name).as_bytes());
        }
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        t ^ (std::process::id() as u64).rotate_left(32)
    }
}

/// Class ids per process, bounded: the recorder asks for the id of a label and learns
/// whether it must declare it first (an `ItemClass` record).
#[derive(Debug, Default)]
pub struct ClassTable {
    ids: HashMap<(u32, String), u32>,
    per_pid: HashMap<u32, u32>,
    next: u32,
    /// Labels refused because their process already had [`MAX_CLASSES_PER_PID`].
    pub dropped: u64,
}

/// The answer of [`ClassTable::id`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassId {
    /// Known: use it.
    Known(u32),
    /// New: declare `(id, label)` before using it.
    New(u32),
    /// Over the per-process bound: counted in `dropped`, no class.
    Dropped,
}

impl ClassTable {
    /// First id handed out (ids below are left to the marker library's own classes).
    pub const FIRST_ID: u32 = 0x4000_0000;

    pub fn id(&mut self, pid: u32, label: &str) -> ClassId {
        if let Some(&id) = self.ids.get(&(pid, label.to_string())) {
            return ClassId::Known(id);
        }
        if self.ids.len() >= MAX_CLASSES_TOTAL {
            self.ids.clear();
            self.per_pid.clear();
        }
        let n = self.per_pid.entry(pid).or_default();
        if *n as usize >= MAX_CLASSES_PER_PID {
            self.dropped = self.dropped.saturating_add(1);
            return ClassId::Dropped;
        }
        *n += 1;
        let mut id = Self::FIRST_ID + self.next;
        self.next = self.next.wrapping_add(1) % (u32::MAX - Self::FIRST_ID);
        if id == crate::items::uprobe::UPROBE_CLASS_ID {
            // `--item-class NAME`'s id: never handed out here.
            id = Self::FIRST_ID + self.next;
            self.next = self.next.wrapping_add(1) % (u32::MAX - Self::FIRST_ID);
        }
        self.ids.insert((pid, label.to_string()), id);
        ClassId::New(id)
    }

    /// Forget a process that exited (its pid may be reused).
    pub fn forget(&mut self, pid: u32) {
        if self.per_pid.remove(&pid).is_some() {
            self.ids.retain(|(p, _), _| *p != pid);
        }
    }
}

/// Resolves the spec's binary and symbol and creates its tracefs event.
pub fn prepare(spec: &ClassSpec) -> Result<(TracefsUprobe, bool), UprobeError> {
    let resolved = crate::items::uprobe::resolve(&spec.probe)?;
    let (root, mounted) = tracefs_root()?;
    Ok((TracefsUprobe::create(&root, &resolved, spec)?, mounted))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: &str = "name: cls1\nID: 2326\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:__data_loc char[] arg;\toffset:16;\tsize:4;\tsigned:1;\n\tfield:s64 n;\toffset:20;\tsize:8;\tsigned:1;\n";

    #[test]
    fn specs_and_registers() {
        let s = ClassSpec::parse("postgres:pg_parse_query:rdi").unwrap();
        assert_eq!(
            (s.probe.binary.as_str(), s.probe.symbol.as_str(), s.reg.as_str(), s.ty),
            ("postgres", "pg_parse_query", "di", ArgType::String)
        );
        assert_eq!(s.fetch_arg(), "+0(%di):string");
        let s = ClassSpec::parse("/usr/bin/x:f:arg2:u64").unwrap();
        assert_eq!((s.reg.as_str(), s.ty), ("si", ArgType::U64));
        assert_eq!(s.fetch_arg(), "%si:u64");
        assert!(ClassSpec::parse("x:f%return:rdi").is_err());
        assert!(ClassSpec::parse("x:f:zz9").is_err());
        assert!(ClassSpec::parse("rdi").is_err());
        let u = ClassSpec::parse("usdt:postgres:postgresql:query__start:arg0").unwrap();
        assert_eq!((u.probe.usdt_provider.as_deref(), u.usdt_arg, u.ty), (Some("postgresql"), Some(0), ArgType::String));
        let u = ClassSpec::parse("usdt:/x:p:n:arg2:s64").unwrap();
        assert_eq!((u.usdt_arg, u.ty), (Some(2), ArgType::S64));
        assert!(ClassSpec::parse("usdt:x:p:n:rdi").is_err());
        assert!(ClassSpec::parse("usdt:x:p:arg0").is_err());
        assert_eq!(register_name("r12", "x86_64").as_deref(), Some("r12"));
        assert_eq!(register_name("x3", "aarch64").as_deref(), Some("x3"));
        assert_eq!(register_name("arg3", "aarch64").as_deref(), Some("x2"));
        assert_eq!(register_name("arg7", "x86_64"), None);
    }

    #[test]
    fn raw_records_decode_with_bounds() {
        let l = parse_format(FORMAT, "arg").unwrap();
        assert_eq!(l, ArgLayout { offset: 16, data_loc: true, size: 4, signed: true });
        let n = parse_format(FORMAT, "n").unwrap();
        let mut raw = vec![0u8; 28];
        let text = b"SELECT 1 FROM t WHERE a = 5\0";
        raw[16..20].copy_from_slice(&(((text.len() as u32) << 16) | 28).to_ne_bytes());
        raw[20..28].copy_from_slice(&(-7i64).to_ne_bytes());
        raw.extend_from_slice(text);
        let v = decode_raw(&l, &raw).unwrap();
        assert_eq!(v, ArgValue::Text("SELECT 1 FROM t WHERE a = 5".into()));
        assert_eq!(label_of(&v), "select ? from t where a = ?");
        assert_eq!(decode_raw(&n, &raw), Some(ArgValue::Int(-7)));
        // A location pointing outside the record, and a record cut short.
        let mut bad = raw.clone();
        bad[16..20].copy_from_slice(&((1000u32 << 16) | 28).to_ne_bytes());
        assert_eq!(decode_raw(&l, &bad), None);
        assert_eq!(decode_raw(&l, &raw[..18]), None);
    }

    #[test]
    fn class_table_is_bounded_per_process() {
        let mut t = ClassTable::default();
        assert_eq!(t.id(1, "a"), ClassId::New(ClassTable::FIRST_ID));
        assert_eq!(t.id(1, "a"), ClassId::Known(ClassTable::FIRST_ID));
        for i in 1..MAX_CLASSES_PER_PID {
            assert!(matches!(t.id(1, &i.to_string()), ClassId::New(_)));
        }
        assert_eq!(t.id(1, "one too many"), ClassId::Dropped);
        assert_eq!(t.dropped, 1);
        assert!(matches!(t.id(2, "a"), ClassId::New(_)), "another process has its own bound");
        t.forget(1);
        assert!(matches!(t.id(1, "b"), ClassId::New(_)));
        // Many short-lived processes: the table starts afresh instead of growing, and a
        // label seen again gets a new id (declared again).
        let mut t = ClassTable::default();
        let ClassId::New(first) = t.id(7, "q") else { panic!() };
        for pid in 0..MAX_CLASSES_TOTAL as u32 {
            t.id(1000 + pid, "q");
        }
        assert!(t.ids.len() <= MAX_CLASSES_TOTAL);
        assert!(matches!(t.id(7, "q"), ClassId::New(id) if id != first));
    }

    /// Creates and removes a real tracefs event on the running kernel (root only).
    #[test]
    fn creates_and_removes_a_tracefs_event() {
        if unsafe { libc::geteuid() } != 0 {
            tailprof_testkit::skip(tailprof_testkit::Need::Root, "needs root for tracefs");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let spec = ClassSpec::parse(&format!("{}:main:rdi", exe.display())).unwrap();
        let (ev, _mounted) = match prepare(&spec) {
            Ok(x) => x,
            Err(e) => panic!("{e}"),
        };
        assert!(ev.id > 0);
        assert!(ev.layout.data_loc, "{:?}", ev.layout);
        let (root, _) = tracefs_root().unwrap();
        let dir = root.join("events").join(&ev.group).join(&ev.name);
        assert!(dir.exists());
        drop(ev);
        assert!(!dir.exists(), "event removed on drop");
    }
}
