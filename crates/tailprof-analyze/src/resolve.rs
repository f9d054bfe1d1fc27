//! Sample address → function, resolved once per unique key, and the [`Resolved`]
//! adapter every per-function analysis reads a trace through.
//!
//! [`Resolver`] owns the part every per-function analysis shares (the flat profile in
//! [`crate::profile`], the per-item join in [`crate::items`], the export's sample
//! instants, the stack and off-CPU analyses):
//!
//! - while reading: it follows the side-band records ([`AddressSpaces`]) and maps each
//!   sample to a dense [`LocId`] with one FxHashMap lookup on `(pid, ip)`. The slot
//!   remembers the address-space generation it was resolved under; only when the pid's
//!   mappings changed since (exec, fork, mmap) is the IP resolved again. Kernel samples
//!   use [`KERNEL_PID`] (all processes share kernel addresses), guest samples their own
//!   key. A [`LocId`] stands for a unique [`Location`] (binary, file offset). When the
//!   analysis asks for it ([`ResolvedSink::KEEP_STACKS`]) it also keeps the trace's
//!   [`StackTable`], so stack ids of samples and switches resolve to frames.
//! - after reading: [`Resolver::functions`] symbolizes every location once, in one
//!   batch per binary, and folds locations into function rows ([`FunctionTable`]):
//!   (name, binary path) pairs, unknown addresses named `[unknown] bin+0x..` with their
//!   reason. Names come back as ids of the symbolizer's name table, each distinct raw
//!   name demangled once, so folding is keyed on integers, not strings.
//!
//! [`Resolved<S>`] is the one [`Sink`] that feeds a [`Resolver`]: it applies every
//! MMAP/COMM/FORK/EXIT (and stack definition) to the resolver *before* handing the
//! record on, and gives the inner analysis (a [`ResolvedSink`]) each sample and switch
//! together with the resolver, whose [`Resolver::loc`] resolves the sample lazily (an
//! analysis that skips a sample pays nothing for it). Every other record is forwarded
//! unchanged. Analyses therefore never forward side-band records by hand:
//!
//! ```
//! use tailprof_analyze::resolve::{LocId, Resolved, ResolvedSink, Resolver};
//! use tailprof_format::{Sample, Sink, TraceHeader};
//! #[derive(Default)]
//! struct Count(Vec<(u32, LocId)>);
//! impl ResolvedSink for Count {
//!     fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
//!         self.0.push((s.tid, r.loc(s)));
//!     }
//! }
//! let mut sink = Resolved::wrap(&TraceHeader::default(), Count::default());
//! sink.handle_sample(&Sample { ip: 0x1000, ..Default::default() });
//! let (count, resolver) = sink.into_parts();
//! assert_eq!(resolver.locations().len(), count.0.len());
//! ```
//!
//! Callers keep their own counters indexed by [`LocId`] (or by anything keyed on it) and
//! fold them through [`FunctionTable::function_of`] at the end.

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{
    BuildIdEntry, Comm, CpuMode, Flow, ItemClass, Lost, Marker, Mmap, Sample, Sink, StackDef, StackTable, Switch, Task, Throttle,
    TraceHeader, Wakeup,
};

use crate::maps::{short_name, AddressSpaces, BinaryId, BinaryKind, Location, KERNEL_PID};
use crate::symbolize::{AddrSource, KernelOrigin, NameId, SymIdResult, Symbolizer, UnknownReason};

/// Dense id of a unique [`Location`], in order of first sight: index into
/// [`Resolver::locations`] and [`FunctionTable::of_loc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
pub struct LocId(pub u32);

impl LocId {
    /// Position in [`Resolver::locations`] (and in callers' dense per-location tables).
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Pid key for guest/hypervisor samples (their addresses mean nothing to us).
const GUEST_PID: u32 = u32::MAX - 1;
/// "Never resolved" generation for a fresh slot.
const NO_GEN: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    gen: u32,
    loc: LocId,
}

/// Maps samples to locations while a trace is read; see the module docs.
#[derive(Debug)]
pub struct Resolver {
    header: TraceHeader,
    spaces: AddressSpaces,
    build_ids: FxHashMap<String, Vec<u8>>,
    keys: FxHashMap<(u32, u64), Slot>,
    locs: FxHashMap<Location, LocId>,
    loc_list: Vec<Location>,
    /// One-entry cache of (pid, generation); cleared by every side-band record.
    last_gen: Option<(u32, u32)>,
    /// The trace's stack nodes, when kept ([`Resolver::keep_stacks`]).
    stacks: StackTable,
    keep_stacks: bool,
    /// Stack definitions that did not extend `stacks` in order (never, from a reader).
    bad_stack_defs: u64,
    /// Names of JIT code per process and time (the trace's JIT chunks).
    jit: crate::symbolize::jit::JitTables,
    /// Time of the record being handled (JIT names depend on it).
    now: u64,
}

/// What a row of [`Resolver::functions_by`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// A function (name within a binary), with its first line as its source.
    #[default]
    Function,
    /// A (function, `file:line`) pair: the line of the addresses (perf's
    /// `--sort sym,srcline`, pprof's `-lines`).
    Line,
}

/// One function row: a name within a binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionInfo {
    pub name: String,
    /// Full path of the binary.
    pub binary: String,
    /// Why the name is not a symbol, when it is not.
    pub unknown_reason: Option<String>,
    /// `file:line`, when known. At [`Granularity::Function`] the function's first line:
    /// native code, the DWARF line of its symbol's start address; JIT code, the line at
    /// the lowest offset of its jitdump line table, else its first DEBUG_INFO line. At
    /// [`Granularity::Line`] the line of the row's addresses (DWARF line table: the
    /// line in this function's own code; jitdump line table: the row at or before the
    /// address, the function's first line before the first row).
    pub source: Option<String>,
    /// At [`Granularity::Line`], the function's first line (what `source` is at
    /// [`Granularity::Function`]): pprof's `Function.start_line`. `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_line: Option<String>,
}

impl FunctionInfo {
    /// [`FunctionInfo::source`] as file and line ([`split_source`]).
    pub fn source_file_line(&self) -> Option<(&str, u32)> {
        self.source.as_deref().and_then(split_source)
    }
}

/// A `file:line` source ([`FunctionInfo::source`]: DWARF or jitdump) split into its file and
/// line, the one parser every view uses (pprof's `Function.filename`/`start_line`, …);
/// `None` when it does not end in `:LINE`.
pub fn split_source(s: &str) -> Option<(&str, u32)> {
    let (file, line) = s.rsplit_once(':')?;
    Some((file, line.parse().ok()?))
}

/// The offset of a `[jit]` location: JIT entry `entry`, row `line` of its line table
/// (`None`: no line) in the high half, plus one.
pub fn jit_offset(entry: u32, line: Option<usize>) -> u64 {
    (line.map_or(0, |l| l as u64 + 1) << 32) | entry as u64
}

/// The JIT entry and line-table row of a `[jit]` location's offset ([`jit_offset`]).
pub fn jit_entry_line(offset: u64) -> (u32, Option<usize>) {
    (offset as u32, ((offset >> 32) as usize).checked_sub(1))
}

/// Locations folded into functions by [`Resolver::functions`].
#[derive(Debug, Clone, Default)]
pub struct FunctionTable {
    /// Function row of each [`LocId`] (see [`FunctionTable::function_of`]).
    pub of_loc: Vec<u32>,
    /// Function rows, in order of first location.
    pub rows: Vec<FunctionInfo>,
    /// Kernel symbol source, or why kernel addresses are not named (only when some
    /// location is in the kernel).
    pub kernel_note: Option<String>,
}

impl FunctionTable {
    /// Index into [`FunctionTable::rows`] of the function of `loc`.
    #[inline]
    pub fn function_of(&self, loc: LocId) -> u32 {
        self.of_loc[loc.index()]
    }

    /// The function row of `loc`, if `loc` came from the resolver this table was built by.
    pub fn row_of(&self, loc: LocId) -> Option<&FunctionInfo> {
        self.of_loc.get(loc.index()).and_then(|&f| self.rows.get(f as usize))
    }
}

impl Resolver {
    pub fn new(header: &TraceHeader) -> Self {
        Resolver {
            header: header.clone(),
            spaces: AddressSpaces::new(),
            build_ids: FxHashMap::default(),
            keys: FxHashMap::default(),
            locs: FxHashMap::default(),
            loc_list: Vec::new(),
            last_gen: None,
            stacks: StackTable::new(),
            keep_stacks: false,
            bad_stack_defs: 0,
            jit: Default::default(),
            now: 0,
        }
    }

    /// A JIT code name of the trace (delivered before its records).
    pub fn handle_jit(&mut self, e: &tailprof_format::JitEntry) {
        self.jit.add(e);
    }

    /// The trace's JIT names.
    pub fn jit(&self) -> &crate::symbolize::jit::JitTables {
        &self.jit
    }

    /// Sets the time at which [`Self::loc_of`] resolves addresses in JIT code (set by
    /// [`Self::loc`] and by [`Resolved`] for each sample and switch).
    #[inline]
    pub fn set_time(&mut self, time: u64) {
        self.now = time;
    }

    /// Keep the stack definitions handed to [`Resolver::handle_stack`] (off by default:
    /// flat analyses do not need them).
    pub fn keep_stacks(&mut self, keep: bool) {
        self.keep_stacks = keep;
    }

    /// The trace's stack nodes seen so far (empty unless kept).
    pub fn stacks(&self) -> &StackTable {
        &self.stacks
    }

    /// Stack definitions refused because they did not continue the table in order.
    pub fn bad_stack_defs(&self) -> u64 {
        self.bad_stack_defs
    }

    /// Build-ids the trace records per path (used when MMAP records carry none).
    pub fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        for e in entries {
            self.build_ids.insert(e.path.clone(), e.build_id.clone());
        }
    }

    /// The build-id the trace recorded for `b` (its own, or from the build-id table).
    pub fn trace_build_id<'a>(&'a self, b: &'a crate::maps::Binary) -> Option<&'a [u8]> {
        b.build_id.as_deref().or_else(|| self.build_ids.get(&b.path).map(Vec::as_slice))
    }

    /// The address-space state as of the last record.
    pub fn spaces(&self) -> &AddressSpaces {
        &self.spaces
    }

    /// Every location seen so far, indexed by [`LocId`].
    pub fn locations(&self) -> &[Location] {
        &self.loc_list
    }

    /// Unique `(pid, ip)` keys seen so far.
    pub fn unique_keys(&self) -> usize {
        self.keys.len()
    }

    /// The generation of `pid`'s address space ([`AddressSpaces::generation`]),
    /// remembered for the last pid asked.
    #[inline]
    pub(crate) fn generation(&mut self, pid: u32) -> u32 {
        match self.last_gen {
            Some((p, g)) if p == pid => g,
            _ => {
                let g = self.spaces.generation(pid);
                self.last_gen = Some((pid, g));
                g
            }
        }
    }

    fn intern_loc(&mut self, loc: Location) -> LocId {
        if let Some(&i) = self.locs.get(&loc) {
            return i;
        }
        let i = LocId(self.loc_list.len() as u32);
        self.loc_list.push(loc);
        self.locs.insert(loc, i);
        i
    }

    /// The location of a sample's IP as of now (the sample's time, since records
    /// arrive in time order).
    #[inline]
    pub fn loc(&mut self, s: &Sample) -> LocId {
        self.now = s.time;
        self.loc_of(s.pid, s.ip, s.cpumode)
    }

    /// The location of address `ip` in process `pid` as of now, `cpumode` telling user,
    /// kernel and guest addresses apart (as a sample's would); e.g. a stack frame's
    /// address.
    #[inline]
    pub fn loc_of(&mut self, pid: u32, ip: u64, cpumode: CpuMode) -> LocId {
        let key_pid = Self::key_pid(pid, ip, cpumode);
        let gen = self.generation(key_pid);
        let slot = self.keys.entry((key_pid, ip)).or_insert(Slot { gen: NO_GEN, loc: LocId(0) });
        let loc = if slot.gen == gen {
            slot.loc
        } else {
            // First sample of this key, or the pid's mappings changed since.
            let l = self.spaces.resolve(key_pid, ip, cpumode);
            let loc = self.intern_loc(l);
            self.keys.insert((key_pid, ip), Slot { gen, loc });
            loc
        };
        if self.jit.has(key_pid) {
            return self.jit_loc(key_pid, ip, loc);
        }
        loc
    }

    /// `base` (an address's location by its mapping), or, when it is anonymous or
    /// unmapped memory that the process's JIT names cover at the current time, the
    /// location of that JIT entry and line ([`jit_offset`]). `ip` is the address to name
    /// (a return address already minus 1, as for DWARF).
    fn jit_loc(&mut self, pid: u32, ip: u64, base: LocId) -> LocId {
        let kind = self.spaces.binary(self.loc_list[base.index()].binary).kind;
        if !matches!(kind, BinaryKind::Anon | BinaryKind::Unmapped) {
            return base;
        }
        match self.jit.lookup(pid, ip, self.now) {
            Some(i) => {
                let binary = self.spaces.jit_binary();
                let e = self.jit.entry(i);
                let line = e.lines.index_at(ip - e.start);
                self.intern_loc(Location { binary, offset: jit_offset(i, line) })
            }
            None => base,
        }
    }

    /// The pid under which `(pid, ip, cpumode)` is keyed: kernel addresses are shared
    /// by all processes, guest addresses mean nothing to us.
    #[inline]
    pub fn key_pid(pid: u32, ip: u64, cpumode: CpuMode) -> u32 {
        match cpumode {
            CpuMode::GuestKernel | CpuMode::GuestUser | CpuMode::Hypervisor => GUEST_PID,
            m if AddressSpaces::is_kernel_sample(m, ip) => KERNEL_PID,
            _ => pid,
        }
    }

    pub fn handle_mmap(&mut self, m: &Mmap) {
        self.last_gen = None;
        self.spaces.handle_mmap(m);
    }
    pub fn handle_comm(&mut self, c: &Comm) {
        self.last_gen = None;
        self.spaces.handle_comm(c);
    }
    pub fn handle_fork(&mut self, t: &Task) {
        self.last_gen = None;
        self.spaces.handle_fork(t);
    }
    pub fn handle_exit(&mut self, t: &Task) {
        self.spaces.handle_exit(t);
    }
    /// A stack node; kept only when [`Resolver::keep_stacks`] is on.
    pub fn handle_stack(&mut self, d: &StackDef) {
        if self.keep_stacks && !self.stacks.handle_def(d) {
            self.bad_stack_defs += 1;
        }
    }

    /// Symbolize every location (one batch per binary) and fold them into function
    /// rows keyed by (name, binary path), each with its function's first line
    /// ([`FunctionInfo::source`]).
    pub fn functions(&self, symbolizer: &mut Symbolizer) -> FunctionTable {
        self.functions_by(symbolizer, Granularity::Function)
    }

    /// [`Resolver::functions`] at granularity `by`: with [`Granularity::Line`], one row
    /// per (function, `file:line` of its addresses), for native code (DWARF) and JIT code
    /// (jitdump line tables) alike.
    pub fn functions_by(&self, symbolizer: &mut Symbolizer, by: Granularity) -> FunctionTable {
        let lines = by == Granularity::Line;
        let (names, sources, kernel_note) = self.symbolize_locations(symbolizer);
        // Rows by (display-name id, path, line) for symbols, by (name, path) for
        // unknowns, by (JIT name, line) for JIT code; the line only at line granularity.
        let mut known: FxHashMap<(NameId, &str, Option<String>), u32> = FxHashMap::default();
        let mut unknown: FxHashMap<(String, &str), u32> = FxHashMap::default();
        let mut jit: FxHashMap<(&str, Option<String>), u32> = FxHashMap::default();
        let mut rows: Vec<FunctionInfo> = Vec::new();
        let mut of_loc = Vec::with_capacity(self.loc_list.len());
        for (i, (loc, r)) in self.loc_list.iter().zip(&names).enumerate() {
            let b = self.spaces.binary(loc.binary);
            let path = b.path.as_str();
            let next = rows.len() as u32;
            let id = match r {
                _ if b.kind == BinaryKind::Jit => {
                    let (entry, line) = jit_entry_line(loc.offset);
                    let e = self.jit.entry(entry);
                    let line_of =
                        |row: &tailprof_format::jit::JitLine| e.lines.files.get(row.file as usize).map(|f| format!("{f}:{}", row.line));
                    // The function's first line: the line at the lowest offset of its
                    // table, else its first DEBUG_INFO line.
                    let first = || e.lines.lines.first().and_then(line_of).or_else(|| e.source.clone());
                    let source = if lines { line.and_then(|l| e.lines.lines.get(l)).and_then(line_of).or_else(first) } else { None };
                    let id = *jit.entry((e.name.as_str(), source)).or_insert_with_key(|(name, source)| {
                        rows.push(FunctionInfo {
                            name: (*name).to_owned(),
                            binary: path.to_owned(),
                            unknown_reason: None,
                            source: source.clone(),
                            first_line: if lines { first() } else { None },
                        });
                        next
                    });
                    if !lines && rows[id as usize].source.is_none() {
                        rows[id as usize].source = first();
                    }
                    id
                }
                Ok(name) => {
                    let src = sources.get(i);
                    let line = if lines { src.and_then(|s| s.line.as_ref()).map(ToString::to_string) } else { None };
                    let id = *known.entry((*name, path, line)).or_insert_with_key(|(_, _, line)| {
                        rows.push(FunctionInfo {
                            name: symbolizer.name(*name).to_owned(),
                            binary: path.to_owned(),
                            // `fn_4616a0`: a stripped binary's function, named by its .eh_frame range.
                            unknown_reason: symbolizer.is_range_name(*name).then(|| crate::symbolize::RANGE_NAME_REASON.to_owned()),
                            source: line.clone(),
                            first_line: None,
                        });
                        next
                    });
                    let row = &mut rows[id as usize];
                    let first = || src.and_then(|s| s.function.as_ref()).map(ToString::to_string);
                    if lines && row.first_line.is_none() {
                        row.first_line = first();
                    } else if !lines && row.source.is_none() {
                        row.source = first();
                    }
                    id
                }
                Err(reason) => {
                    let name = unknown_name(b.kind, path, loc.offset);
                    *unknown.entry((name, path)).or_insert_with_key(|(name, _)| {
                        rows.push(FunctionInfo {
                            name: name.clone(),
                            binary: path.to_owned(),
                            unknown_reason: Some(reason.to_string()),
                            source: None,
                            first_line: None,
                        });
                        next
                    })
                }
            };
            of_loc.push(id);
        }
        FunctionTable { of_loc, rows, kernel_note }
    }

    /// One result per location, plus the kernel-symbols note.
    /// Per location: its name, its source lines (native code with DWARF; default for the
    /// rest), and the kernel-symbols note.
    fn symbolize_locations(&self, symbolizer: &mut Symbolizer) -> (Vec<SymIdResult>, Vec<AddrSource>, Option<String>) {
        symbolizer.set_origin(KernelOrigin::new(&self.header, self.spaces.kernel_text()));
        let mut out: Vec<Option<SymIdResult>> = vec![None; self.loc_list.len()];
        let mut sources: Vec<AddrSource> = vec![AddrSource::default(); self.loc_list.len()];
        let mut per_binary: FxHashMap<BinaryId, Vec<u32>> = FxHashMap::default();
        let mut kernel: Vec<u32> = Vec::new();
        for (i, loc) in self.loc_list.iter().enumerate() {
            match self.spaces.binary(loc.binary).kind {
                BinaryKind::Kernel | BinaryKind::KernelModule => kernel.push(i as u32),
                // Named by `functions` from the JIT tables.
                BinaryKind::Jit => {}
                _ => per_binary.entry(loc.binary).or_default().push(i as u32),
            }
        }
        let mut ids: Vec<BinaryId> = per_binary.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let mut idx = per_binary.remove(&id).unwrap_or_default();
            idx.sort_unstable_by_key(|&i| self.loc_list[i as usize].offset);
            let offsets: Vec<u64> = idx.iter().map(|&i| self.loc_list[i as usize].offset).collect();
            let b = self.spaces.binary(id);
            let trace_bid = b.build_id.as_deref().or_else(|| self.build_ids.get(&b.path).map(Vec::as_slice));
            let (names, lines) = symbolizer.symbolize_binary_sources(b, trace_bid, &offsets);
            for ((i, r), l) in idx.iter().zip(names).zip(lines) {
                out[*i as usize] = Some(r);
                sources[*i as usize] = l;
            }
        }
        let mut note = None;
        if !kernel.is_empty() {
            kernel.sort_unstable_by_key(|&i| self.loc_list[i as usize].offset);
            let addrs: Vec<u64> = kernel.iter().map(|&i| self.loc_list[i as usize].offset).collect();
            note = Some(match symbolizer.kernel_symbols_status() {
                Ok(p) => format!("kernel symbols from {}", p.display()),
                Err(why) => format!("kernel addresses not named: {why}"),
            });
            for (i, r) in kernel.iter().zip(symbolizer.symbolize_kernel_ids(&addrs)) {
                out[*i as usize] = Some(r);
            }
        }
        let results = out.into_iter().map(|r| r.unwrap_or(Err(UnknownReason::Other { why: "not symbolized".into() }))).collect();
        (results, sources, note)
    }
}

/// Name shown for an address that has no symbol.
pub fn unknown_name(kind: BinaryKind, path: &str, offset: u64) -> String {
    match kind {
        BinaryKind::Kernel | BinaryKind::KernelModule => "[kernel]".to_owned(),
        BinaryKind::File | BinaryKind::Vdso => format!("[unknown] {}+{offset:#x}", short_name(path)),
        _ => format!("[unknown] {offset:#x}"),
    }
}

/// An analysis that reads a trace through [`Resolved`]: the address spaces (and, when
/// kept, the stack table) are current when each method is called. Samples and switches
/// come with the [`Resolver`]: call [`Resolver::loc`] for the samples whose location
/// matters. Side-band methods are called after the resolver applied the record.
///
/// Not a second record stream: it is the [`Sink`] stream seen through [`Resolved`], the
/// one adapter that is a `Sink`. Its methods are the `Sink`'s with the resolver added
/// (side-band and stack records reach it after the resolver applied them), and its
/// [`ResolvedSink::flow`] is the stream's (an analysis that has what it needs stops the
/// reader the same way).
pub trait ResolvedSink {
    /// Whether the resolver keeps the trace's [`StackTable`] ([`Resolver::stacks`]).
    const KEEP_STACKS: bool = false;

    fn handle_sample(&mut self, s: &Sample, resolver: &mut Resolver);
    fn handle_switch(&mut self, _s: &Switch, _resolver: &mut Resolver) {}
    fn handle_wakeup(&mut self, _w: &Wakeup, _resolver: &mut Resolver) {}
    /// A stack node, after the resolver added it to its table (when kept).
    fn handle_stack(&mut self, _d: &StackDef) {}
    fn handle_mmap(&mut self, _m: &Mmap) {}
    fn handle_comm(&mut self, _c: &Comm) {}
    fn handle_fork(&mut self, _t: &Task) {}
    fn handle_exit(&mut self, _t: &Task) {}
    fn handle_lost(&mut self, _l: &Lost) {}
    fn handle_throttle(&mut self, _t: &Throttle) {}
    fn handle_marker(&mut self, _m: &Marker) {}
    fn handle_item_class(&mut self, _c: &ItemClass) {}
    fn handle_item_event(&mut self, _e: &tailprof_format::ItemEvent) {}
    fn handle_item_trace(&mut self, _t: &tailprof_format::ItemTrace) {}
    /// [`Sink::flow`]: whether the reader should go on (analyses never fail, so there is
    /// no error to take).
    fn flow(&self) -> Flow {
        Flow::Continue
    }
}

/// The [`Sink`] adapter that keeps a [`Resolver`] current and hands every record on to
/// an inner [`ResolvedSink`]; see the module docs.
#[derive(Debug)]
pub struct Resolved<S> {
    resolver: Resolver,
    inner: S,
}

impl<S: ResolvedSink> Resolved<S> {
    /// Read `header`'s trace into `inner`.
    pub fn wrap(header: &TraceHeader, inner: S) -> Self {
        let mut resolver = Resolver::new(header);
        resolver.keep_stacks(S::KEEP_STACKS);
        Resolved { resolver, inner }
    }

    /// Build-ids the trace records per path (used when MMAP records carry none). May be
    /// called any time before symbolizing.
    pub fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        self.resolver.add_build_ids(entries);
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The analysis and the resolver, e.g. to symbolize after reading.
    pub fn into_parts(self) -> (S, Resolver) {
        (self.inner, self.resolver)
    }
}

impl<S: ResolvedSink> Sink for Resolved<S> {
    #[inline]
    fn handle_sample(&mut self, s: &Sample) {
        self.resolver.now = s.time;
        self.inner.handle_sample(s, &mut self.resolver);
    }
    fn handle_switch(&mut self, s: &Switch) {
        self.resolver.now = s.time;
        self.inner.handle_switch(s, &mut self.resolver);
    }
    fn handle_wakeup(&mut self, w: &Wakeup) {
        self.inner.handle_wakeup(w, &mut self.resolver);
    }
    fn handle_jit(&mut self, e: &tailprof_format::JitEntry) {
        self.resolver.handle_jit(e);
    }
    fn handle_stack(&mut self, d: &StackDef) {
        self.resolver.handle_stack(d);
        self.inner.handle_stack(d);
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.resolver.handle_mmap(m);
        self.inner.handle_mmap(m);
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.resolver.handle_comm(c);
        self.inner.handle_comm(c);
    }
    fn handle_fork(&mut self, t: &Task) {
        self.resolver.handle_fork(t);
        self.inner.handle_fork(t);
    }
    fn handle_exit(&mut self, t: &Task) {
        self.resolver.handle_exit(t);
        self.inner.handle_exit(t);
    }
    fn handle_lost(&mut self, l: &Lost) {
        self.inner.handle_lost(l);
    }
    fn handle_throttle(&mut self, t: &Throttle) {
        self.inner.handle_throttle(t);
    }
    fn handle_marker(&mut self, m: &Marker) {
        self.inner.handle_marker(m);
    }
    fn handle_item_class(&mut self, c: &ItemClass) {
        self.inner.handle_item_class(c);
    }
    fn handle_item_event(&mut self, e: &tailprof_format::ItemEvent) {
        self.inner.handle_item_event(e);
    }
    fn handle_item_trace(&mut self, t: &tailprof_format::ItemTrace) {
        self.inner.handle_item_trace(t);
    }
    #[inline]
    fn flow(&self) -> Flow {
        self.inner.flow()
    }
}

/// Inline expansion of a [`FunctionTable`] for stack views: for each location of
/// `resolver` (indexed by `LocId`), its function rows innermost first. The last row is
/// always `table.of_loc[loc]` (the flat profile's function); functions inlined at the
/// address come before it, as rows appended to `table.rows` (name, binary) when new.
/// Locations without DWARF inline records are that one row.
pub fn inline_rows(resolver: &Resolver, table: &mut FunctionTable, symbolizer: &mut Symbolizer) -> Vec<Vec<u32>> {
    let locs = resolver.locations();
    let mut out: Vec<Vec<u32>> = locs.iter().enumerate().map(|(i, _)| vec![table.of_loc.get(i).copied().unwrap_or(0)]).collect();
    let mut per_binary: FxHashMap<BinaryId, Vec<usize>> = FxHashMap::default();
    for (i, loc) in locs.iter().enumerate() {
        if resolver.spaces().binary(loc.binary).kind == BinaryKind::File {
            per_binary.entry(loc.binary).or_default().push(i);
        }
    }
    let mut row_index: FxHashMap<(String, String), u32> = FxHashMap::default();
    let mut ids: Vec<BinaryId> = per_binary.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let idx = &per_binary[&id];
        let b = resolver.spaces().binary(id);
        let offsets: Vec<u64> = idx.iter().map(|&i| locs[i].offset).collect();
        let frames = symbolizer.frames(b, resolver.trace_build_id(b), &offsets);
        for (&i, fr) in idx.iter().zip(frames) {
            let Ok(fr) = fr else { continue };
            if fr.len() < 2 {
                continue;
            }
            if row_index.is_empty() {
                for (r, f) in table.rows.iter().enumerate() {
                    row_index.entry((f.name.clone(), f.binary.clone())).or_insert(r as u32);
                }
            }
            let mut rows = Vec::with_capacity(fr.len());
            for f in &fr[..fr.len() - 1] {
                let key = (symbolizer.name(f.name).to_owned(), b.path.clone());
                let r = *row_index.entry(key).or_insert_with_key(|(name, binary)| {
                    table.rows.push(FunctionInfo {
                        name: name.clone(),
                        binary: binary.clone(),
                        unknown_reason: None,
                        source: None,
                        first_line: None,
                    });
                    (table.rows.len() - 1) as u32
                });
                rows.push(r);
            }
            rows.push(out[i][0]);
            out[i] = rows;
        }
    }
    out
}
