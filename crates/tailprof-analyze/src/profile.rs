//! Flat profiles: samples per function, per binary or per thread.
//!
//! [`ProfileBuilder`] is a [`tailprof_format::Sink`]: the [`Resolved`] adapter around the profile's
//! counters ([`ProfileCounts`]), which keeps the address spaces current. Its per-sample
//! work is deliberately tiny:
//!
//! - by function / by binary: [`Resolver::loc`] (one FxHashMap lookup on `(pid, ip)`,
//!   re-resolved only when the pid's mappings changed) gives a dense location id whose
//!   counters are incremented.
//! - by thread: the thread's current name id, then one lookup on (pid, tid, name).
//!
//! Symbolization happens in [`ProfileBuilder::finish`] ([`Resolver::functions`]), once
//! per unique location and in one batch per binary; the results are folded into rows.

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{LossKind, Lost, ReadSummary, Sample, Throttle, TraceHeader, TraceReader};

use crate::maps::{short_name, AddressSpaces, BinaryId};
use crate::resolve::{Granularity, Resolved, ResolvedSink, Resolver};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// What rows of a flat profile stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    #[default]
    Function,
    Binary,
    Thread,
}

/// Options of [`ProfileBuilder`].
#[derive(Debug, Clone, Default)]
pub struct ProfileOptions {
    pub by: GroupBy,
    /// Index into `TraceHeader::events` of the event to report (see [`select_event`]);
    /// `None`: the first event.
    pub event: Option<u16>,
    /// Rows per function (default) or per (function, source line) (`report --lines`);
    /// only with [`GroupBy::Function`].
    pub granularity: Granularity,
}

/// Find an event by name or by index (`"0"`, `"1"`, ...). `None` selects the first.
pub fn select_event(header: &TraceHeader, spec: Option<&str>) -> Result<u16, AnalyzeError> {
    let Some(spec) = spec else { return Ok(0) };
    if let Some(i) = header.events.iter().position(|e| e.name == spec) {
        return Ok(i as u16);
    }
    match spec.parse::<u16>() {
        Ok(i) if (i as usize) < header.events.len().max(1) => Ok(i),
        _ => Err(AnalyzeError::NoSuchEvent { spec: spec.to_owned(), available: header.events.iter().map(|e| e.name.clone()).collect() }),
    }
}

/// Samples and summed periods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub samples: u64,
    pub period: u64,
}

impl Counts {
    #[inline]
    fn add(&mut self, s: &Sample) {
        self.samples += 1;
        self.period = self.period.wrapping_add(s.period);
    }
    fn merge(&mut self, o: Counts) {
        self.samples += o.samples;
        self.period = self.period.wrapping_add(o.period);
    }
}

/// Totals of one event of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventTotal {
    pub index: u16,
    pub name: String,
    pub samples: u64,
    pub period: u64,
}

/// One row of a flat profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileRow {
    /// Function name, binary short name, or thread name (by grouping).
    pub name: String,
    /// Full path of the binary (function and binary grouping).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    pub samples: u64,
    /// Of the reported event's samples, 0..=100.
    pub percent: f64,
    /// Sum of sample periods (events represented).
    pub period: u64,
    /// Why the name is not a symbol, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<String>,
    /// `file:line` (`--by function`), when known: the function's first line, or with
    /// [`Granularity::Line`] the line of the row's samples ([`crate::resolve::FunctionInfo::source`]:
    /// DWARF for native code, the jitdump line table for JIT code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Samples whose address could not be named, per binary and reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnknownSummary {
    pub binary: String,
    pub reason: String,
    pub samples: u64,
    pub percent: f64,
}

/// Samples in anonymous memory (JIT code without names) of one process, with the
/// runtime its executable name says it is and the flag that makes it publish names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JitAdvice {
    pub pid: u32,
    /// The process's name (`comm`) when known.
    pub comm: Option<String>,
    /// `node`, `java`, `dotnet`, `python`, or `None` for no known runtime.
    pub runtime: Option<String>,
    pub samples: u64,
    pub percent: f64,
    /// What to do (docs/SYMBOLS.md, "Runtimes and flags").
    pub advice: String,
}

/// Processes followed for [`JitAdvice`] at most (more are not advised on).
const MAX_ADVICE_PIDS: usize = 4096;

/// Bookkeeping about the work done (useful to judge performance).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProfileStats {
    /// Unique (pid, ip) keys aggregated.
    pub unique_keys: u64,
    /// Unique (binary, offset) locations symbolized.
    pub unique_locations: u64,
    /// Binaries with at least one sample.
    pub binaries: u64,
}

/// A flat profile of one event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlatProfile {
    pub group_by: GroupBy,
    /// `line`: rows are (function, source line) pairs (`report --lines`); absent for
    /// rows per function.
    #[serde(skip_serializing_if = "is_function")]
    pub granularity: Granularity,
    /// Name of the reported event.
    pub event: String,
    pub event_index: u16,
    /// Samples of the reported event.
    pub samples: u64,
    pub period: u64,
    /// Every event of the trace with its totals.
    pub events: Vec<EventTotal>,
    /// Lost records (ring full) plus samples dropped by the PMU, all events.
    pub lost: u64,
    pub lost_records: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    pub unthrottled: u64,
    /// Sorted by samples, descending (ties by name).
    pub rows: Vec<ProfileRow>,
    /// Samples that could not be named, by binary and reason, largest first.
    pub unknown: Vec<UnknownSummary>,
    /// Processes with samples in anonymous memory no perf map or jitdump names, largest
    /// first: which runtime and the flag that makes it name its code.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jit_advice: Vec<JitAdvice>,
    /// Kernel symbol source, or why kernel addresses are not named (only when the
    /// profile has kernel samples and is grouped by function).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_symbols: Option<String>,
    /// What the reader reported, when the caller passed it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<ReadSummary>,
    pub stats: ProfileStats,
    /// Samples of the reported event per stack status (statuses with samples, code
    /// order; empty when the trace has no stacks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stack_statuses: Vec<crate::stacks::StatusCount>,
}

const NO_COMM: u32 = u32::MAX;

/// A [`tailprof_format::Sink`] that builds a [`FlatProfile`]; see the module docs.
pub type ProfileBuilder = Resolved<ProfileCounts>;

/// The counters of a flat profile, fed resolved samples by [`ProfileBuilder`].
#[derive(Debug)]
pub struct ProfileCounts {
    header: TraceHeader,
    by: GroupBy,
    granularity: Granularity,
    event: u16,
    loc_counts: Vec<Counts>,
    threads: FxHashMap<(u32, u32, u32), Counts>,
    per_event: Vec<Counts>,
    lost_records: u64,
    lost_samples: u64,
    throttled: u64,
    unthrottled: u64,
    read: Option<ReadSummary>,
    statuses: [u64; 8],
    /// Samples in unnamed anonymous memory per pid, with the process's comm id.
    anon: FxHashMap<u32, (u64, u32)>,
}

impl Resolved<ProfileCounts> {
    /// A builder for `header`'s trace. Fails if `opts.event` names no event.
    pub fn new(header: &TraceHeader, opts: &ProfileOptions) -> Result<Self, AnalyzeError> {
        let event = opts.event.unwrap_or(0);
        if !header.events.is_empty() && event as usize >= header.events.len() {
            return Err(AnalyzeError::NoSuchEvent {
                spec: event.to_string(),
                available: header.events.iter().map(|e| e.name.clone()).collect(),
            });
        }
        let counts = ProfileCounts {
            header: header.clone(),
            by: opts.by,
            granularity: opts.granularity,
            event,
            loc_counts: Vec::new(),
            threads: FxHashMap::default(),
            per_event: vec![Counts::default(); header.events.len().max(1)],
            lost_records: 0,
            lost_samples: 0,
            throttled: 0,
            unthrottled: 0,
            read: None,
            statuses: [0; 8],
            anon: FxHashMap::default(),
        };
        Ok(Resolved::wrap(header, counts))
    }

    /// Attach the reader's summary (shown as warnings when the trace was damaged).
    pub fn set_read_summary(&mut self, read: ReadSummary) {
        self.inner_mut().read = Some(read);
    }

    /// The address-space state as of the last record.
    pub fn address_spaces(&self) -> &AddressSpaces {
        self.resolver().spaces()
    }

    /// Symbolize and fold into rows.
    pub fn finish(self, symbolizer: &mut Symbolizer) -> FlatProfile {
        let (counts, resolver) = self.into_parts();
        counts.finish(&resolver, symbolizer)
    }
}

impl ProfileCounts {
    #[inline]
    fn add_by_address(&mut self, s: &Sample, resolver: &mut Resolver) {
        let loc = resolver.loc(s).index();
        let binary = resolver.locations()[loc].binary;
        if resolver.spaces().binary(binary).kind == crate::maps::BinaryKind::Anon
            && (self.anon.len() < MAX_ADVICE_PIDS || self.anon.contains_key(&s.pid))
        {
            let comm = resolver.spaces().comm_id(s.pid).unwrap_or(NO_COMM);
            let e = self.anon.entry(s.pid).or_insert((0, comm));
            e.0 += 1;
            if e.1 == NO_COMM {
                e.1 = comm;
            }
        }
        if loc >= self.loc_counts.len() {
            self.loc_counts.resize(loc + 1, Counts::default());
        }
        self.loc_counts[loc].add(s);
    }

    #[inline]
    fn add_by_thread(&mut self, s: &Sample, resolver: &Resolver) {
        let spaces = resolver.spaces();
        let comm = spaces.comm_id(s.tid).or_else(|| spaces.comm_id(s.pid)).unwrap_or(NO_COMM);
        self.threads.entry((s.pid, s.tid, comm)).or_default().add(s);
    }

    fn finish(self, resolver: &Resolver, symbolizer: &mut Symbolizer) -> FlatProfile {
        let total = self.per_event.get(self.event as usize).copied().unwrap_or_default();
        let mut unknown: FxHashMap<(String, String), u64> = FxHashMap::default();
        let mut kernel_symbols = None;
        let mut rows: Vec<ProfileRow> = match self.by {
            GroupBy::Function => {
                let table = resolver.functions_by(symbolizer, self.granularity);
                kernel_symbols = table.kernel_note.clone();
                let mut folded = vec![Counts::default(); table.rows.len()];
                for (loc, &f) in table.of_loc.iter().enumerate() {
                    folded[f as usize].merge(self.loc_counts.get(loc).copied().unwrap_or_default());
                }
                table
                    .rows
                    .into_iter()
                    .zip(folded)
                    // A location resolved only on the way to a JIT name (its anonymous
                    // mapping) has no samples of its own.
                    .filter(|(_, c)| c.samples > 0)
                    .map(|(f, c)| {
                        if let Some(r) = &f.unknown_reason {
                            *unknown.entry((f.binary.clone(), r.clone())).or_default() += c.samples;
                        }
                        ProfileRow { source: f.source, ..row(f.name, Some(f.binary), None, None, c, f.unknown_reason) }
                    })
                    .collect()
            }
            GroupBy::Binary => {
                // By path: a file replaced during the trace (new build-id) is one row.
                let mut folded: FxHashMap<&str, Counts> = FxHashMap::default();
                for (i, loc) in resolver.locations().iter().enumerate() {
                    let path = resolver.spaces().binary(loc.binary).path.as_str();
                    folded.entry(path).or_default().merge(self.loc_counts.get(i).copied().unwrap_or_default());
                }
                folded.into_iter().map(|(path, c)| row(short_name(path).to_owned(), Some(path.to_owned()), None, None, c, None)).collect()
            }
            GroupBy::Thread => self
                .threads
                .iter()
                .map(|(&(pid, tid, comm), &c)| {
                    let name = if comm != NO_COMM {
                        resolver.spaces().comm_name(comm).to_owned()
                    } else if tid == 0 {
                        "swapper".to_owned()
                    } else {
                        format!(":{tid}")
                    };
                    row(name, None, Some(pid), Some(tid), c, None)
                })
                .collect(),
        };
        let pct = |n: u64| if total.samples == 0 { 0.0 } else { 100.0 * n as f64 / total.samples as f64 };
        for r in &mut rows {
            r.percent = pct(r.samples);
        }
        rows.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.binary.cmp(&b.binary))
                .then_with(|| a.tid.cmp(&b.tid))
                .then_with(|| a.source.cmp(&b.source))
        });
        let mut unknown: Vec<UnknownSummary> = unknown
            .into_iter()
            .map(|((binary, reason), samples)| UnknownSummary { binary, reason, samples, percent: pct(samples) })
            .collect();
        unknown.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.binary.cmp(&b.binary)));
        let mut jit_advice: Vec<JitAdvice> = self
            .anon
            .iter()
            .map(|(&pid, &(samples, comm))| {
                let comm = (comm != NO_COMM).then(|| resolver.spaces().comm_name(comm).to_owned());
                let found = comm.as_deref().and_then(crate::symbolize::jit::runtime_advice);
                JitAdvice {
                    pid,
                    runtime: found.map(|(r, _)| r.to_owned()),
                    advice: found.map_or_else(
                        || "if it is a runtime that generates code, make it write a perf map or jitdump (docs/SYMBOLS.md, \"Runtimes and flags\")".to_owned(),
                        |(_, a)| a.to_owned(),
                    ),
                    comm,
                    samples,
                    percent: pct(samples),
                }
            })
            .collect();
        jit_advice.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.pid.cmp(&b.pid)));
        let binaries = {
            let mut seen: Vec<BinaryId> = resolver.locations().iter().map(|l| l.binary).collect();
            seen.sort_unstable();
            seen.dedup();
            seen.len() as u64
        };
        // Events of the header, plus any other index samples actually carried (a damaged
        // or hostile trace can name up to 65536 events; listing the empty ones made a
        // 2.7 KB fuzzed trace print 6.6 MB of JSON).
        let header_events = self.header.events.len().max(1);
        let events = self
            .per_event
            .iter()
            .enumerate()
            .filter(|(i, c)| *i < header_events || c.samples > 0)
            .map(|(i, c)| EventTotal { index: i as u16, name: event_name(&self.header, i as u16), samples: c.samples, period: c.period })
            .collect();
        FlatProfile {
            group_by: self.by,
            granularity: if self.by == GroupBy::Function { self.granularity } else { Granularity::Function },
            event: event_name(&self.header, self.event),
            event_index: self.event,
            samples: total.samples,
            period: total.period,
            events,
            lost: self.lost_records + self.lost_samples,
            lost_records: self.lost_records,
            lost_samples: self.lost_samples,
            throttled: self.throttled,
            unthrottled: self.unthrottled,
            rows,
            unknown,
            jit_advice,
            kernel_symbols,
            read: self.read,
            stats: ProfileStats {
                unique_keys: resolver.unique_keys() as u64,
                unique_locations: resolver.locations().len() as u64,
                binaries,
            },
            stack_statuses: if self.statuses[1..].iter().all(|&n| n == 0) {
                Vec::new()
            } else {
                crate::stacks::status_counts(&self.statuses)
            },
        }
    }
}

fn is_function(g: &Granularity) -> bool {
    *g == Granularity::Function
}

fn row(name: String, binary: Option<String>, pid: Option<u32>, tid: Option<u32>, c: Counts, unknown_reason: Option<String>) -> ProfileRow {
    ProfileRow { name, binary, pid, tid, samples: c.samples, percent: 0.0, period: c.period, unknown_reason, source: None }
}

/// Display name of event `i` of the header (`event N` when the header has none).
pub fn event_name(header: &TraceHeader, i: u16) -> String {
    header.events.get(i as usize).map_or_else(|| format!("event {i}"), |e| e.name.clone())
}

impl ResolvedSink for ProfileCounts {
    #[inline]
    fn handle_sample(&mut self, s: &Sample, resolver: &mut Resolver) {
        let ev = s.event as usize;
        if ev >= self.per_event.len() {
            self.per_event.resize(ev + 1, Counts::default());
        }
        self.per_event[ev].add(s);
        if s.event != self.event {
            return;
        }
        self.statuses[s.stack_status as usize] += 1;
        match self.by {
            GroupBy::Function | GroupBy::Binary => self.add_by_address(s, resolver),
            GroupBy::Thread => self.add_by_thread(s, resolver),
        }
    }
    fn handle_lost(&mut self, l: &Lost) {
        match l.kind {
            LossKind::RingFull => self.lost_records += l.count,
            LossKind::Samples => self.lost_samples += l.count,
            LossKind::Markers
            | LossKind::Malformed
            | LossKind::ItemClasses
            | LossKind::MarkersRejected
            | LossKind::JitNames
            | LossKind::JitLines => {}
        }
    }
    fn handle_throttle(&mut self, t: &Throttle) {
        if t.throttled {
            self.throttled += 1;
        } else {
            self.unthrottled += 1;
        }
    }
}

/// Build a flat profile of a whole trace: reads every record once, then symbolizes.
/// The trace's build-id table is applied after reading (the reader fills it while
/// reading) and the reader's [`ReadSummary`] is attached to the profile.
pub fn flat_profile(reader: &mut TraceReader, opts: &ProfileOptions, symbolizer: &mut Symbolizer) -> Result<FlatProfile, AnalyzeError> {
    let mut b = ProfileBuilder::new(reader.header(), opts)?;
    let summary = reader.read_all(&mut b)?;
    b.add_build_ids(reader.build_ids());
    b.set_read_summary(summary);
    Ok(b.finish(symbolizer))
}
