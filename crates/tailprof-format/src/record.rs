//! The record model: the one set of types every stage speaks.
//!
//! The recorder (`tailprof-collect`) and the importer (`tailprof-import`) produce these
//! records; the writer stores them; the reader hands them back, in the same order, to a
//! [`Sink`]. Analyses (`tailprof-analyze`) are `Sink`s. Nothing here knows about
//! perf_event_open or about the on-disk encoding.
//!
//! Ordering invariant: within a trace, records are delivered in non-decreasing `time`
//! order, except that records whose time is unknown (`time == 0`, e.g. side-band records
//! synthesized from /proc at start) come first.

use serde::{Deserialize, Serialize};

/// Which processor mode a sample (or mapping) belongs to. Mirrors perf's
/// `PERF_RECORD_MISC_CPUMODE_*` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum CpuMode {
    #[default]
    Unknown = 0,
    Kernel = 1,
    User = 2,
    Hypervisor = 3,
    GuestKernel = 4,
    GuestUser = 5,
}

impl CpuMode {
    /// From the low 3 bits of a perf record header's `misc` field.
    pub fn from_perf_misc(misc: u16) -> Self {
        match misc & 7 {
            1 => CpuMode::Kernel,
            2 => CpuMode::User,
            3 => CpuMode::Hypervisor,
            4 => CpuMode::GuestKernel,
            5 => CpuMode::GuestUser,
            _ => CpuMode::Unknown,
        }
    }
    pub fn from_u8(v: u8) -> Self {
        Self::from_perf_misc(v as u16)
    }
    pub fn is_kernel(self) -> bool {
        matches!(self, CpuMode::Kernel | CpuMode::GuestKernel)
    }
}

/// One sample. Optional fields are `None` when the event did not provide them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    /// Nanoseconds on the trace clock (see [`ClockInfo`]).
    pub time: u64,
    /// Index into [`TraceHeader::events`].
    pub event: u16,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Events per sample (the sampling period in effect for this sample).
    pub period: u64,
    pub cpumode: CpuMode,
    /// Data linear address (PERF_SAMPLE_ADDR), e.g. from PEBS load-latency events.
    pub addr: Option<u64>,
    /// Access weight / latency (PERF_SAMPLE_WEIGHT or the first word of WEIGHT_STRUCT).
    pub weight: Option<u64>,
    /// PERF_SAMPLE_DATA_SRC encoding.
    pub data_src: Option<u64>,
    /// User registers, in ascending bit order of [`EventDesc::regs_user_mask`].
    /// Empty when the event did not ask for registers.
    pub regs: Vec<u64>,
}

/// A memory mapping (PERF_RECORD_MMAP / MMAP2, or synthesized from /proc/PID/maps).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mmap {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// PROT_* bits when known (MMAP2), else 0.
    pub prot: u32,
    pub cpumode: CpuMode,
    pub path: String,
    /// GNU build-id of the mapped ELF file, when known.
    pub build_id: Option<Vec<u8>>,
}

/// A thread got a (new) name. `exec` is true when this COMM comes from an exec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comm {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub exec: bool,
    pub comm: String,
}

/// Task creation or exit (PERF_RECORD_FORK / PERF_RECORD_EXIT).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Task {
    pub time: u64,
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
}

/// Why records went missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum LossKind {
    /// PERF_RECORD_LOST: the ring buffer was full; `count` records of any kind were lost.
    RingFull = 0,
    /// PERF_RECORD_LOST_SAMPLES: the PMU/PEBS path dropped `count` samples.
    Samples = 1,
    /// Markers dropped because a marker ring was full (issue 3).
    Markers = 2,
}

/// Lost records, as the kernel (or a marker ring) reported them.
#[derive(Debug, Clone, PartialEq)]
pub struct Lost {
    pub time: u64,
    pub cpu: u32,
    /// Index into [`TraceHeader::events`], when known.
    pub event: Option<u16>,
    pub kind: LossKind,
    pub count: u64,
}

/// PERF_RECORD_THROTTLE (`throttled == true`) or UNTHROTTLE.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttle {
    pub time: u64,
    pub cpu: u32,
    pub event: Option<u16>,
    pub throttled: bool,
}

/// Which boundary of a data item (a request, query, packet) a marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum MarkerKind {
    /// The thread starts working on the item.
    Begin = 0,
    /// The thread is done with the item.
    End = 1,
}

/// Where a marker came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum MarkerSource {
    /// The marker API (C header, Rust crate, Python module) through its shared rings.
    #[default]
    Api = 0,
    /// A uprobe on an unmodified binary (`--item-begin` / `--item-end`).
    Uprobe = 1,
}

/// An item boundary on one thread, on the trace clock.
///
/// The join attributes each sample to the item open on its thread at the sample's time.
/// `item` identifies the item; when the end boundary cannot know the id (a uprobe on a
/// function's return), `item` is [`Marker::UNKNOWN_ITEM`] and the end closes the item
/// most recently begun on that thread.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Marker {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: MarkerKind,
    pub item: u64,
    /// Class label id (see [`ItemClass`]), 0 for none.
    pub class: u32,
    pub source: MarkerSource,
}

impl Marker {
    /// `item` value of an end marker that does not know its item's id.
    pub const UNKNOWN_ITEM: u64 = u64::MAX;
}

impl Default for MarkerKind {
    fn default() -> Self {
        MarkerKind::Begin
    }
}

/// Declares the name of a class label used by markers of process `pid`
/// (e.g. a query type). Written before the first marker that uses `id`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemClass {
    pub time: u64,
    pub pid: u32,
    pub id: u32,
    pub name: String,
}

/// One record of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Sample(Sample),
    Mmap(Mmap),
    Comm(Comm),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    Throttle(Throttle),
    Marker(Marker),
    ItemClass(ItemClass),
}

impl Record {
    pub fn time(&self) -> u64 {
        match self {
            Record::Sample(r) => r.time,
            Record::Mmap(r) => r.time,
            Record::Comm(r) => r.time,
            Record::Fork(r) | Record::Exit(r) => r.time,
            Record::Lost(r) => r.time,
            Record::Throttle(r) => r.time,
            Record::Marker(r) => r.time,
            Record::ItemClass(r) => r.time,
        }
    }
}

/// Every consumer of a trace has this shape (like perf's `struct perf_tool`): one
/// callback per record family, each a no-op by default. Readers call these in record
/// order.
pub trait Sink {
    fn handle_sample(&mut self, _s: &Sample) {}
    fn handle_mmap(&mut self, _m: &Mmap) {}
    fn handle_comm(&mut self, _c: &Comm) {}
    fn handle_fork(&mut self, _t: &Task) {}
    fn handle_exit(&mut self, _t: &Task) {}
    fn handle_lost(&mut self, _l: &Lost) {}
    fn handle_throttle(&mut self, _t: &Throttle) {}
    fn handle_marker(&mut self, _m: &Marker) {}
    fn handle_item_class(&mut self, _c: &ItemClass) {}

    /// Dispatch one record to the matching `handle_*`.
    fn handle_record(&mut self, r: &Record) {
        match r {
            Record::Sample(s) => self.handle_sample(s),
            Record::Mmap(m) => self.handle_mmap(m),
            Record::Comm(c) => self.handle_comm(c),
            Record::Fork(t) => self.handle_fork(t),
            Record::Exit(t) => self.handle_exit(t),
            Record::Lost(l) => self.handle_lost(l),
            Record::Throttle(t) => self.handle_throttle(t),
            Record::Marker(m) => self.handle_marker(m),
            Record::ItemClass(c) => self.handle_item_class(c),
        }
    }
}

/// Collects every record into a Vec; handy in tests.
#[derive(Debug, Default)]
pub struct VecSink(pub Vec<Record>);

impl Sink for VecSink {
    fn handle_record(&mut self, r: &Record) {
        self.0.push(r.clone());
    }
}

/// The clock the trace's timestamps are on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClockInfo {
    /// CLOCK_MONOTONIC via `use_clockid` (our default where the mmap page offers no TSC
    /// conversion). Markers read `clock_gettime(CLOCK_MONOTONIC)`.
    Monotonic,
    /// Another clockid passed with `use_clockid` (e.g. CLOCK_MONOTONIC_RAW = 4).
    Clockid { clockid: i32 },
    /// The default perf clock (local_clock / sched_clock), with the TSC conversion
    /// parameters from the perf mmap page so rdtsc-based markers and PEBS TSC values can be
    /// converted: `ns = time_zero + ((tsc * time_mult) >> time_shift)` (with the
    /// kernel's split-multiply to avoid overflow).
    PerfTsc { time_shift: u16, time_mult: u32, time_zero: u64 },
    /// The default perf clock without known TSC conversion (e.g. imported perf.data
    /// recorded without `-k`).
    Perf,
}

/// Description of one event in the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EventDesc {
    /// As the user spelled it, e.g. `cpu-clock`, `cycles:pp`, `r01d1`.
    pub name: String,
    /// perf_event_attr.type
    pub attr_type: u32,
    /// perf_event_attr.config
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// Fixed sampling period, when sampling by period.
    pub sample_period: Option<u64>,
    /// Target frequency in Hz, when sampling by frequency.
    pub sample_freq: Option<u64>,
    /// perf_event_attr.precise_ip (0..=3).
    pub precise_ip: u8,
    /// perf_event_attr.sample_type bits.
    pub sample_type: u64,
    /// perf_event_attr.sample_regs_user (0 when no registers are sampled).
    pub regs_user_mask: u64,
    pub exclude_kernel: bool,
    pub exclude_user: bool,
}

/// Everything a trace says about itself besides its records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TraceHeader {
    pub events: Vec<EventDesc>,
    pub clock: Option<ClockInfo>,
    /// Where the trace came from: `"record"`, `"import"`.
    pub source: String,
    /// The command line that made the recording (tailprof's, or perf's for imports).
    pub cmdline: Vec<String>,
    pub hostname: Option<String>,
    pub os_release: Option<String>,
    pub arch: Option<String>,
    pub cpu_desc: Option<String>,
    pub nr_cpus: Option<u32>,
    /// CLOCK_REALTIME at start, in ns since the Unix epoch, when known.
    pub start_realtime_ns: Option<u64>,
    /// Free-form extra facts (`key -> value`), e.g. perf.data header features.
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, String>,
}

/// Build-id of a file, stored once per path (from perf.data's HEADER_BUILD_ID or read
/// from the ELF file at record time).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BuildIdEntry {
    pub path: String,
    pub build_id: Vec<u8>,
}

/// Counters a trace carries about itself and its collection. The writer fills the
/// record-derived ones; the recorder adds what it knows (e.g. wakeups); all of them are
/// printed by `tailprof info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TraceStats {
    pub samples: u64,
    /// Sum of `Lost::count` over all [`LossKind::RingFull`] records.
    pub lost_records: u64,
    /// Sum of `Lost::count` over all [`LossKind::Samples`] records.
    pub lost_samples: u64,
    /// Sum of dropped markers.
    pub lost_markers: u64,
    pub throttle_events: u64,
    pub unthrottle_events: u64,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
}
