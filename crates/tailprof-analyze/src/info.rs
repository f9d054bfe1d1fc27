//! Trace info: what `tailprof info` shows.
//!
//! [`TraceInfo::new`] combines the header, the reader's `summarize()` results and,
//! optionally, a [`RecordCounter`] filled by a full pass over the records (samples per
//! event, processes and threads), which `summarize()` does not provide.

use rustc_hash::FxHashSet;
use serde::Serialize;
use tailprof_format::{
    BuildIdEntry, ClockInfo, Comm, EventDesc, Mmap, ReadSummary, Sample, Sink, StackStatusCounts, SwitchCounts, Task, TraceHeader,
    TraceReader, TraceStats,
};

use crate::maps::KERNEL_PID;
use crate::AnalyzeError;

/// Trace info of a whole trace. `summarize()` is cheap (no record decoding); with
/// `count_records` a second, full pass adds samples per event and process/thread counts.
pub fn trace_info(reader: &mut TraceReader, count_records: bool) -> Result<TraceInfo, AnalyzeError> {
    let (summary, stats, duration) = reader.summarize()?;
    let counts = if count_records {
        let mut c = RecordCounter::default();
        reader.read_all(&mut c)?;
        Some(c)
    } else {
        None
    };
    let build_ids = reader.build_ids().to_vec();
    let mut info = TraceInfo::new(reader.header(), &summary, &stats, duration, &build_ids, counts.as_ref());
    info.jit_names = reader.jit_entries().len() as u64;
    Ok(info)
}

/// Per-event and per-task counts from a full pass over the records.
#[derive(Debug, Clone, Default)]
pub struct RecordCounter {
    /// Samples per event index.
    pub samples_per_event: Vec<u64>,
    sampled_pids: FxHashSet<u32>,
    sampled_tids: FxHashSet<u32>,
    sideband_pids: FxHashSet<u32>,
    sideband_tids: FxHashSet<u32>,
    /// (pid, tid) of the previous sample: consecutive samples are mostly one thread's.
    last: Option<(u32, u32)>,
}

impl RecordCounter {
    /// Distinct processes with samples.
    pub fn processes(&self) -> u64 {
        self.sampled_pids.len() as u64
    }
    /// Distinct threads with samples.
    pub fn threads(&self) -> u64 {
        self.sampled_tids.len() as u64
    }
    /// Distinct processes in any record (samples, COMM, FORK, user MMAP).
    pub fn processes_seen(&self) -> u64 {
        self.sampled_pids.union(&self.sideband_pids).count() as u64
    }
    /// Distinct threads in any record (samples, COMM, FORK).
    pub fn threads_seen(&self) -> u64 {
        self.sampled_tids.union(&self.sideband_tids).count() as u64
    }
}

impl Sink for RecordCounter {
    fn handle_sample(&mut self, s: &Sample) {
        let e = s.event as usize;
        if e >= self.samples_per_event.len() {
            self.samples_per_event.resize(e + 1, 0);
        }
        self.samples_per_event[e] += 1;
        if self.last != Some((s.pid, s.tid)) {
            self.last = Some((s.pid, s.tid));
            self.sampled_pids.insert(s.pid);
            self.sampled_tids.insert(s.tid);
        }
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        if m.pid != KERNEL_PID {
            self.sideband_pids.insert(m.pid);
        }
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.sideband_pids.insert(c.pid);
        self.sideband_tids.insert(c.tid);
    }
    fn handle_fork(&mut self, t: &Task) {
        self.sideband_pids.insert(t.pid);
        self.sideband_tids.insert(t.tid);
    }
}

/// One event of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventInfo {
    pub index: u16,
    pub name: String,
    /// `hardware`, `software`, `tracepoint`, `hw-cache`, `raw`, `breakpoint`, or
    /// `pmu <type>` for dynamic PMUs.
    pub kind: String,
    pub attr_type: u32,
    pub config: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_period: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_freq: Option<u64>,
    pub precise_ip: u8,
    pub exclude_kernel: bool,
    pub exclude_user: bool,
    /// Samples of this event (only with a [`RecordCounter`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
}

/// Everything `tailprof info` reports. Counters not known without a full pass are
/// `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceInfo {
    pub events: Vec<EventInfo>,
    /// Human description of the trace clock.
    pub clock: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_info: Option<ClockInfo>,
    /// Trailer duration when the trace has one, else last - first timestamp.
    pub duration_ns: Option<u64>,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    pub samples: u64,
    /// All lost samples: `lost_records + lost_samples`.
    pub lost: u64,
    /// Records lost because the ring buffer was full (PERF_RECORD_LOST).
    pub lost_records: u64,
    /// Samples dropped by the PMU (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    pub lost_markers: u64,
    /// Throttle events (PERF_RECORD_THROTTLE).
    pub throttled: u64,
    pub unthrottled: u64,
    pub chunks: u64,
    pub damaged_chunks: u64,
    pub damaged_bytes: u64,
    /// File size.
    pub bytes: u64,
    /// `bytes / samples`, when there are samples.
    pub bytes_per_sample: Option<f64>,
    /// Bytes of a cut-off tail that could not be read.
    pub truncated_bytes: u64,
    /// Whether the trace was closed cleanly (has an end-of-trace chunk).
    pub complete: bool,
    /// Samples per call-stack status (`complete`, `copy_exhausted`, ...); samples without
    /// a stack are not counted.
    pub stacks: StackStatusCounts,
    /// Context-switch records per kind (`switch_in`, `out_preempted`, `out_blocked`).
    pub switches: SwitchCounts,
    /// Context-switch records per status of their off-CPU stack.
    pub switch_stacks: StackStatusCounts,
    /// Wakeup records (`sched:sched_waking`, issue 21); absent from the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub wakeups: u64,
    /// Samples per event index (only with a [`RecordCounter`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_per_event: Option<Vec<u64>>,
    /// Distinct processes / threads with samples (only with a [`RecordCounter`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// Distinct processes / threads in any record, side-band included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_seen: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads_seen: Option<u64>,
    pub build_ids: u64,
    /// Names of JIT code (perf maps, jitdumps) the trace carries (FORMAT.md §6.1).
    #[serde(skip_serializing_if = "is_zero")]
    pub jit_names: u64,
    pub source: String,
    pub cmdline: Vec<String>,
    pub hostname: Option<String>,
    pub os_release: Option<String>,
    pub arch: Option<String>,
    pub cpu_desc: Option<String>,
    pub nr_cpus: Option<u32>,
    pub start_realtime_ns: Option<u64>,
    pub extra: std::collections::BTreeMap<String, String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `hardware`, `software`, ... for a perf_event_attr type.
pub fn event_kind(attr_type: u32) -> String {
    match attr_type {
        0 => "hardware".into(),
        1 => "software".into(),
        2 => "tracepoint".into(),
        3 => "hw-cache".into(),
        4 => "raw".into(),
        5 => "breakpoint".into(),
        t => format!("pmu {t}"),
    }
}

/// Human description of a trace clock.
pub fn describe_clock(c: Option<&ClockInfo>) -> String {
    match c {
        None => "unknown".into(),
        Some(ClockInfo::Monotonic) => "CLOCK_MONOTONIC".into(),
        Some(ClockInfo::Clockid { clockid }) => match clockid {
            0 => "CLOCK_REALTIME".into(),
            1 => "CLOCK_MONOTONIC".into(),
            4 => "CLOCK_MONOTONIC_RAW".into(),
            7 => "CLOCK_BOOTTIME".into(),
            11 => "CLOCK_TAI".into(),
            id => format!("clockid {id}"),
        },
        Some(ClockInfo::PerfTsc { .. }) => "perf clock (with TSC conversion)".into(),
        Some(ClockInfo::Perf) => "perf clock".into(),
    }
}

fn event_info(i: usize, e: &EventDesc, samples: Option<u64>) -> EventInfo {
    EventInfo {
        index: i as u16,
        name: e.name.clone(),
        kind: event_kind(e.attr_type),
        attr_type: e.attr_type,
        config: e.config,
        sample_period: e.sample_period,
        sample_freq: e.sample_freq,
        precise_ip: e.precise_ip,
        exclude_kernel: e.exclude_kernel,
        exclude_user: e.exclude_user,
        samples,
    }
}

impl TraceInfo {
    /// Combine what the reader knows. `trailer_duration_ns` is the third value of
    /// `TraceReader::summarize()`; `counts` is an optional full pass.
    pub fn new(
        header: &TraceHeader,
        summary: &ReadSummary,
        stats: &TraceStats,
        trailer_duration_ns: Option<u64>,
        build_ids: &[BuildIdEntry],
        counts: Option<&RecordCounter>,
    ) -> Self {
        let per_event = counts
            .map(|c| {
                let mut v = c.samples_per_event.clone();
                if v.len() < header.events.len() {
                    v.resize(header.events.len(), 0);
                }
                v
            })
            // One event: its samples are all the samples, known without the full pass.
            .or_else(|| (header.events.len() == 1).then(|| vec![summary.samples]));
        let events = header.events.iter().enumerate().map(|(i, e)| event_info(i, e, per_event.as_ref().map(|v| v[i]))).collect();
        let duration_ns = trailer_duration_ns.or(match (stats.first_time, stats.last_time) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        });
        let samples = stats.samples;
        TraceInfo {
            events,
            clock: describe_clock(header.clock.as_ref()),
            clock_info: header.clock.clone(),
            duration_ns,
            first_time: stats.first_time,
            last_time: stats.last_time,
            samples,
            lost: stats.lost_records + stats.lost_samples,
            lost_records: stats.lost_records,
            lost_samples: stats.lost_samples,
            lost_markers: stats.lost_markers,
            throttled: stats.throttle_events,
            unthrottled: stats.unthrottle_events,
            chunks: summary.chunks,
            damaged_chunks: summary.damaged_chunks,
            damaged_bytes: summary.damaged_bytes,
            bytes: summary.bytes,
            bytes_per_sample: (samples > 0).then(|| summary.bytes as f64 / samples as f64),
            truncated_bytes: summary.truncated_bytes,
            complete: summary.complete,
            stacks: stats.sample_stacks,
            switches: stats.switches,
            switch_stacks: stats.switch_stacks,
            wakeups: stats.wakeups,
            samples_per_event: per_event,
            processes: counts.map(RecordCounter::processes),
            threads: counts.map(RecordCounter::threads),
            processes_seen: counts.map(RecordCounter::processes_seen),
            threads_seen: counts.map(RecordCounter::threads_seen),
            build_ids: build_ids.len() as u64,
            jit_names: 0,
            source: header.source.clone(),
            cmdline: header.cmdline.clone(),
            hostname: header.hostname.clone(),
            os_release: header.os_release.clone(),
            arch: header.arch.clone(),
            cpu_desc: header.cpu_desc.clone(),
            nr_cpus: header.nr_cpus,
            start_realtime_ns: header.start_realtime_ns,
            extra: header.extra.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_from_parts() {
        let header = TraceHeader {
            events: vec![
                EventDesc { name: "cycles".into(), attr_type: 0, sample_freq: Some(999), ..Default::default() },
                EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(1000), ..Default::default() },
            ],
            clock: Some(ClockInfo::Monotonic),
            source: "record".into(),
            ..Default::default()
        };
        let summary = ReadSummary { chunks: 3, bytes: 1000, complete: true, ..Default::default() };
        let stats =
            TraceStats { samples: 4, lost_records: 2, lost_samples: 1, first_time: Some(100), last_time: Some(350), ..Default::default() };
        let mut c = RecordCounter::default();
        for (event, pid, tid) in [(0, 1, 1), (0, 1, 2), (1, 3, 3), (0, 1, 1)] {
            c.handle_sample(&Sample { event, pid, tid, ..Default::default() });
        }
        c.handle_comm(&Comm { pid: 9, tid: 9, comm: "x".into(), ..Default::default() });
        let info = TraceInfo::new(&header, &summary, &stats, None, &[], Some(&c));
        assert_eq!(info.duration_ns, Some(250));
        assert_eq!(info.lost, 3);
        assert_eq!(info.bytes_per_sample, Some(250.0));
        assert_eq!(info.samples_per_event, Some(vec![3, 1]));
        assert_eq!(info.events[0].samples, Some(3));
        assert_eq!(info.events[1].kind, "software");
        assert_eq!((info.processes, info.threads), (Some(2), Some(3)));
        assert_eq!((info.processes_seen, info.threads_seen), (Some(3), Some(4)));
        assert_eq!(info.clock, "CLOCK_MONOTONIC");
        assert_eq!((info.stacks.total(), info.switches.total()), (0, 0));
        let mut stats = stats;
        stats.sample_stacks.add(tailprof_format::StackStatus::Complete, 3);
        stats.sample_stacks.add(tailprof_format::StackStatus::MaxDepth, 1);
        stats.switches.add(tailprof_format::SwitchKind::OutBlocked, 2);
        let with_trailer = TraceInfo::new(&header, &summary, &stats, Some(7), &[], None);
        assert_eq!((with_trailer.stacks.complete, with_trailer.stacks.truncated()), (3, 1));
        assert_eq!(with_trailer.switches.out_blocked, 2);
        assert_eq!(with_trailer.duration_ns, Some(7));
        assert_eq!(with_trailer.samples_per_event, None);
    }
}
