//! Mapping the perf.data header (event attributes and header features) onto
//! [`TraceHeader`] and [`BuildIdEntry`]s.

use std::collections::BTreeMap;

use linux_perf_data::linux_perf_event_reader::{
    AttrFlags, ClockId, HardwareCacheId, HardwareCacheOp, HardwareCacheOpResult, HardwareEventId, PerfClock, PerfEventAttr, PerfEventType,
    SamplingPolicy, SoftwareCounterType,
};
use linux_perf_data::{AttributeDescription, PerfFile};
use tailprof_format::{BuildIdEntry, ClockInfo, EventDesc, TraceHeader};

use crate::sample::decoded_layout;
use tailprof_perf_abi::{Endian, SampleLayout};

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_TYPE_RAW: u32 = 4;
const PERF_TYPE_BREAKPOINT: u32 = 5;

/// Per-event facts the record conversion needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventInfo {
    /// The event's sample_type.
    pub sample_type: u64,
    /// Its sample layout as far as `sample.rs` decodes it ([`crate::sample::decoded_layout`]).
    pub layout: SampleLayout,
    pub endian: Endian,
    /// The fixed sampling period, used when samples carry no PERIOD field.
    pub fixed_period: Option<u64>,
}

fn hw_name(id: HardwareEventId) -> (&'static str, u64) {
    match id {
        HardwareEventId::CpuCycles => ("cycles", 0),
        HardwareEventId::Instructions => ("instructions", 1),
        HardwareEventId::CacheReferences => ("cache-references", 2),
        HardwareEventId::CacheMisses => ("cache-misses", 3),
        HardwareEventId::BranchInstructions => ("branch-instructions", 4),
        HardwareEventId::BranchMisses => ("branch-misses", 5),
        HardwareEventId::BusCycles => ("bus-cycles", 6),
        HardwareEventId::StalledCyclesFrontend => ("stalled-cycles-frontend", 7),
        HardwareEventId::StalledCyclesBackend => ("stalled-cycles-backend", 8),
        HardwareEventId::RefCpuCycles => ("ref-cycles", 9),
        _ => ("hardware-event", u64::MAX),
    }
}

fn sw_name(t: SoftwareCounterType) -> (&'static str, u64) {
    match t {
        SoftwareCounterType::CpuClock => ("cpu-clock", 0),
        SoftwareCounterType::TaskClock => ("task-clock", 1),
        SoftwareCounterType::PageFaults => ("page-faults", 2),
        SoftwareCounterType::ContextSwitches => ("context-switches", 3),
        SoftwareCounterType::CpuMigrations => ("cpu-migrations", 4),
        SoftwareCounterType::PageFaultsMin => ("minor-faults", 5),
        SoftwareCounterType::PageFaultsMaj => ("major-faults", 6),
        SoftwareCounterType::AlignmentFaults => ("alignment-faults", 7),
        SoftwareCounterType::EmulationFaults => ("emulation-faults", 8),
        SoftwareCounterType::Dummy => ("dummy", 9),
        SoftwareCounterType::BpfOutput => ("bpf-output", 10),
        SoftwareCounterType::CgroupSwitches => ("cgroup-switches", 11),
        _ => ("software-event", u64::MAX),
    }
}

fn cache_name(id: HardwareCacheId, op: HardwareCacheOp, res: HardwareCacheOpResult) -> (String, u64) {
    let (c, ci) = match id {
        HardwareCacheId::L1d => ("L1-dcache", 0),
        HardwareCacheId::L1i => ("L1-icache", 1),
        HardwareCacheId::Ll => ("LLC", 2),
        HardwareCacheId::Dtlb => ("dTLB", 3),
        HardwareCacheId::Itlb => ("iTLB", 4),
        HardwareCacheId::Bpu => ("branch", 5),
        HardwareCacheId::Node => ("node", 6),
        _ => ("cache", 0xff),
    };
    let (o, oi) = match op {
        HardwareCacheOp::Read => ("loads", 0),
        HardwareCacheOp::Write => ("stores", 1),
        HardwareCacheOp::Prefetch => ("prefetches", 2),
    };
    let (r, ri) = match res {
        HardwareCacheOpResult::Access => ("", 0),
        HardwareCacheOpResult::Miss => ("-misses", 1),
    };
    (format!("{c}-{o}{r}"), ci | (oi << 8) | (ri << 16))
}

fn clock_number(c: ClockId) -> i32 {
    match c {
        ClockId::Realtime => 0,
        ClockId::Monotonic => 1,
        ClockId::ProcessCputimeId => 2,
        ClockId::ThreadCputimeId => 3,
        ClockId::MonotonicRaw => 4,
        ClockId::RealtimeCoarse => 5,
        ClockId::MonotonicCoarse => 6,
        ClockId::Boottime => 7,
        ClockId::RealtimeAlarm => 8,
        ClockId::BoottimeAlarm => 9,
        _ => -1,
    }
}

/// `type`, `config`, `config1`, `config2` as perf wrote them, plus a synthesized name.
/// The attr parser keeps these as an enum; this inverts it.
fn type_config(attr: &PerfEventAttr, pmus: &BTreeMap<u32, String>) -> (u32, u64, u64, u64, String) {
    let pmu_prefix = |pmu: u32, name: &str| match pmus.get(&pmu) {
        Some(p) if pmu != 0 => format!("{p}/{name}/"),
        _ if pmu != 0 => format!("pmu{pmu}/{name}/"),
        _ => name.to_string(),
    };
    match attr.type_ {
        PerfEventType::Hardware(id, pmu) => {
            let (name, num) = hw_name(id);
            let config = (u64::from(pmu.0) << 32) | (num & 0xff);
            (PERF_TYPE_HARDWARE, config, 0, 0, pmu_prefix(pmu.0, name))
        }
        PerfEventType::Software(t) => {
            let (name, num) = sw_name(t);
            (PERF_TYPE_SOFTWARE, num, 0, 0, name.to_string())
        }
        PerfEventType::Tracepoint(id) => (PERF_TYPE_TRACEPOINT, id, 0, 0, format!("tracepoint:{id}")),
        PerfEventType::HwCache(id, op, res, pmu) => {
            let (name, num) = cache_name(id, op, res);
            (PERF_TYPE_HW_CACHE, (u64::from(pmu.0) << 32) | num, 0, 0, pmu_prefix(pmu.0, &name))
        }
        PerfEventType::Breakpoint(_, addr, len) => (PERF_TYPE_BREAKPOINT, 0, addr.0, len.0, format!("mem:{:#x}/{}", addr.0, len.0)),
        PerfEventType::DynamicPmu(ty, config, config1, config2) => {
            let name = if ty == PERF_TYPE_RAW {
                format!("raw {config:#x}")
            } else {
                let pmu = pmus.get(&ty).cloned().unwrap_or_else(|| format!("pmu{ty}"));
                let mut s = format!("{pmu}/config={config:#x}");
                if config1 != 0 {
                    s += &format!(",config1={config1:#x}");
                }
                if config2 != 0 {
                    s += &format!(",config2={config2:#x}");
                }
                s + "/"
            };
            (ty, config, config1, config2, name)
        }
    }
}

fn precise_ip(flags: AttrFlags) -> u8 {
    ((flags.bits() & AttrFlags::PRECISE_IP_BITMASK.bits()) >> 15) as u8
}

/// One [`EventDesc`] per perf attr.
pub(crate) fn event_desc(ad: &AttributeDescription, pmus: &BTreeMap<u32, String>) -> EventDesc {
    let attr = &ad.attr;
    let (attr_type, config, config1, config2, synthesized) = type_config(attr, pmus);
    let exclude_kernel = attr.flags.contains(AttrFlags::EXCLUDE_KERNEL);
    let exclude_user = attr.flags.contains(AttrFlags::EXCLUDE_USER);
    let precise = precise_ip(attr.flags);
    let name = match ad.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            let mut m = String::new();
            if exclude_kernel && !exclude_user {
                m.push('u');
            } else if exclude_user && !exclude_kernel {
                m.push('k');
            }
            m.extend(std::iter::repeat_n('p', precise as usize));
            if m.is_empty() {
                synthesized
            } else {
                format!("{synthesized}:{m}")
            }
        }
    };
    let (sample_period, sample_freq) = match attr.sampling_policy {
        SamplingPolicy::Period(p) => (Some(p.get()), None),
        SamplingPolicy::Frequency(f) => (None, Some(f)),
        SamplingPolicy::NoSampling => (None, None),
    };
    EventDesc {
        name,
        attr_type,
        config,
        config1,
        config2,
        sample_period,
        sample_freq,
        precise_ip: precise,
        sample_type: attr.sample_format.bits(),
        regs_user_mask: attr.sample_regs_user,
        exclude_kernel,
        exclude_user,
    }
}

pub(crate) fn event_info(ad: &AttributeDescription, big_endian: bool) -> EventInfo {
    let attr = &ad.attr;
    let layout = SampleLayout::new(attr.sample_format.bits())
        .with_read_format(attr.read_format.bits())
        .with_branch_sample_type(attr.branch_sample_format.bits())
        .with_regs_user(attr.sample_regs_user);
    EventInfo {
        sample_type: attr.sample_format.bits(),
        layout: decoded_layout(&layout),
        endian: if big_endian { Endian::Big } else { Endian::Little },
        fixed_period: match attr.sampling_policy {
            SamplingPolicy::Period(p) => Some(p.get()),
            _ => None,
        },
    }
}

/// A header feature that failed to parse is left out, with a warning.
fn feature<T, E: std::fmt::Display>(r: Result<Option<T>, E>, what: &str, warnings: &mut Vec<String>) -> Option<T> {
    r.unwrap_or_else(|e| {
        warnings.push(format!("could not read the {what} header feature: {e}"));
        None
    })
}

/// The trace header for a parsed perf.data file.
pub(crate) fn build_header(pf: &PerfFile, pipe: bool, warnings: &mut Vec<String>) -> TraceHeader {
    let pmus: BTreeMap<u32, String> =
        feature(pf.pmu_mappings(), "PMU_MAPPINGS", warnings).map(|m| m.0.into_iter().collect()).unwrap_or_default();
    let attrs = pf.event_attributes();
    let mut h = TraceHeader { source: "import".into(), ..Default::default() };
    h.events = attrs.iter().map(|a| event_desc(a, &pmus)).collect();
    h.clock = Some(match attrs.first().map(|a| a.attr.clock) {
        Some(PerfClock::ClockId(ClockId::Monotonic)) => ClockInfo::Monotonic,
        Some(PerfClock::ClockId(c)) => ClockInfo::Clockid { clockid: clock_number(c) },
        _ => ClockInfo::Perf,
    });
    h.cmdline = feature(pf.cmdline(), "CMDLINE", warnings).map(|v| v.into_iter().map(str::to_string).collect()).unwrap_or_default();
    h.hostname = feature(pf.hostname(), "HOSTNAME", warnings).map(str::to_string);
    h.os_release = feature(pf.os_release(), "OSRELEASE", warnings).map(str::to_string);
    h.arch = feature(pf.arch(), "ARCH", warnings).map(str::to_string);
    h.cpu_desc = feature(pf.cpu_desc(), "CPUDESC", warnings).map(str::to_string);
    let ex = &mut h.extra;
    ex.insert("perf.file_mode".into(), if pipe { "pipe" } else { "file" }.into());
    ex.insert("perf.byte_order".into(), format!("{:?}", pf.endian()).replace("Endian", "-endian").to_lowercase());
    if let Some(n) = feature(pf.nr_cpus(), "NRCPUS", warnings) {
        h.nr_cpus = Some(n.nr_cpus_online);
        ex.insert("perf.nr_cpus_online".into(), n.nr_cpus_online.to_string());
        ex.insert("perf.nr_cpus_available".into(), n.nr_cpus_available.to_string());
    }
    if let Some(v) = feature(pf.perf_version(), "VERSION", warnings) {
        ex.insert("perf.version".into(), v.to_string());
    }
    if let Some(v) = feature(pf.cpu_id(), "CPUID", warnings) {
        ex.insert("perf.cpuid".into(), v.to_string());
    }
    if let Some(v) = feature(pf.total_mem(), "TOTAL_MEM", warnings) {
        ex.insert("perf.total_mem_kb".into(), v.to_string());
    }
    if let Some(v) = feature(pf.clock_frequency(), "CLOCKID", warnings) {
        ex.insert("perf.clock_resolution_ns".into(), v.to_string());
    }
    let range = feature(pf.sample_time_range(), "SAMPLE_TIME", warnings);
    if let Some(r) = range {
        ex.insert("perf.first_sample_time_ns".into(), r.first_sample_time.to_string());
        ex.insert("perf.last_sample_time_ns".into(), r.last_sample_time.to_string());
    }
    if let Some(c) = feature(pf.clock_data(), "CLOCK_DATA", warnings) {
        ex.insert("perf.clock_data.clockid".into(), c.clockid.to_string());
        ex.insert("perf.clock_data.wall_clock_ns".into(), c.wall_clock_ns.to_string());
        ex.insert("perf.clock_data.clockid_time_ns".into(), c.clockid_time_ns.to_string());
        // Realtime at the first sample: wall clock at the reference point, shifted.
        if let Some(r) = range {
            let t = i128::from(c.wall_clock_ns) + i128::from(r.first_sample_time) - i128::from(c.clockid_time_ns);
            h.start_realtime_ns = u64::try_from(t).ok();
        }
    }
    if let Some(c) = feature(pf.compression_info(), "COMPRESSED", warnings) {
        let kind = if c.type_ == 1 { "zstd".to_string() } else { format!("type {}", c.type_) };
        ex.insert("perf.compression".into(), format!("{kind} level {}", c.level));
    }
    if !pmus.is_empty() {
        let list: Vec<String> = pmus.iter().map(|(t, n)| format!("{t}={n}")).collect();
        ex.insert("perf.pmu_mappings".into(), list.join(","));
    }
    let feats: Vec<String> = pf.features().iter().map(|f| f.to_string()).collect();
    if !feats.is_empty() {
        ex.insert("perf.features".into(), feats.join(","));
    }
    h
}

/// Build-ids from the BUILD_ID header feature, one per path, sorted by path.
pub(crate) fn header_build_ids(pf: &PerfFile, warnings: &mut Vec<String>) -> Vec<BuildIdEntry> {
    let map = match pf.build_ids() {
        Ok(m) => m,
        Err(e) => {
            warnings.push(format!("could not read the BUILD_ID header feature: {e}"));
            return Vec::new();
        }
    };
    let mut by_path: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for info in map.into_values() {
        if info.build_id.is_empty() {
            continue;
        }
        by_path.insert(String::from_utf8_lossy(&info.path).into_owned(), info.build_id);
    }
    by_path.into_iter().map(|(path, build_id)| BuildIdEntry { path, build_id }).collect()
}
