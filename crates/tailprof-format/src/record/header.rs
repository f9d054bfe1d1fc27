//! The trace header: the clock, the events, the build-ids.

use super::*;

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

impl EventDesc {
    /// cpu-clock or task-clock (`PERF_TYPE_SOFTWARE` configs 0 and 1): periods and counts
    /// are nanoseconds of run time. The stored-event twin of the recorder's
    /// `EventSpec::is_clock`.
    pub fn is_clock(&self) -> bool {
        self.attr_type == 1 && (self.config == 0 || self.config == 1)
    }
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

/// The text form of a build-id, as tools print it and name files by it (lowercase hex,
/// two digits per byte: `debug/.build-id/ab/cdef….debug`, debuginfod URLs, the store's
/// build-id columns). The one spelling of the workspace.
pub fn build_id_hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(id.len() * 2);
    for &b in id {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Build-id of a file, stored once per path (from perf.data's HEADER_BUILD_ID or read
/// from the ELF file at record time).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BuildIdEntry {
    pub path: String,
    pub build_id: Vec<u8>,
}
