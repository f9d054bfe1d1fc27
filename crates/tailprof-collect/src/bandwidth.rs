//! Memory-bandwidth recording (`tailprof record --bandwidth`): which precise event counts
//! main-memory traffic on this CPU, why, and how it is set up.
//!
//! This module owns:
//!
//! * **Machine detection** ([`Machine`]): vendor, family/model and Arm part from
//!   `/proc/cpuinfo`, the PMUs under the sysfs `event_source/devices` root and the core
//!   PMU's `caps/pmu_name` (the kernel's name for the PEBS generation). Both inputs can be
//!   replaced (fake sysfs tree + cpuinfo text), so every vendor's choice is golden-tested
//!   on machines without a PMU (`tests/bandwidth_attr.rs`).
//! * **The event choice** ([`choose`]), with the reason stated ([`BandwidthChoice::reason`]):
//!   - Intel Skylake and later (PEBS format ≥ 3, a TSC in every record): `MEM_LOAD_RETIRED.L3_MISS`
//!     (event 0xd1, umask 0x20), precise (`:pp`), the event Larysch (2016, §3.2.3) found to
//!     be the only PEBS-capable one that tracks DRAM reads;
//!   - Haswell/Broadwell `MEM_LOAD_UOPS_RETIRED.L3_MISS`, Sandy/Ivy Bridge
//!     `MEM_LOAD_UOPS_RETIRED.LLC_MISS` (both 0xd1/0x20), Nehalem/Westmere
//!     `MEM_LOAD_RETIRED.LLC_MISS` (0xcb/0x10); their PEBS records carry no TSC, so the
//!     kernel cannot keep PERF_SAMPLE_TIME in large PEBS (noted);
//!   - Intel Atom cores (Goldmont … Crestmont, `cpu_atom` of hybrid parts):
//!     `MEM_LOAD_UOPS_RETIRED.DRAM_HIT` (0xd1/0x80);
//!   - any other Intel PMU: the architectural `LONGEST_LAT_CACHE.MISS` (0x2e/0x41) with an
//!     interrupt per overflow (no precise LLC-miss event is known);
//!   - AMD: IBS op sampling (`ibs_op/cnt_ctl=1/`, period in dispatched ops) with data
//!     source; the analysis keeps only samples whose data source is DRAM or remote memory;
//!   - Arm: SPE (`arm_spe_0/ts_enable=1,load_filter=1,event_filter=LLC miss/`) where the
//!     kernel exposes it. SPE writes to the perf AUX area, which the recorder does not read,
//!     so the choice is made (and golden-tested) but recording it is refused with advice.
//! * **Large PEBS**: the sampling event is built with the ordinary attr builder
//!   ([`crate::attr::build_attr`]) with a fixed period, no callchain, no registers, and
//!   only the large-PEBS sample bits (IP, TID, TIME, IDENTIFIER, ADDR, DATA_SRC,
//!   WEIGHT_STRUCT; fixed period, so no PERIOD, and no CPU: see [`crate::attr`]):
//!   timestamps, data address, data source and weight.
//! * **The baseline** ([`Mode::SoftTsc`]): the same event without PEBS, one interrupt per
//!   overflow, timestamped by the interrupt handler (the paper's `soft-tsc`, §6.2).
//! * **The counting sibling** ([`CounterSibling`], the paper's PMC1, §6.3): the same event
//!   in counting mode beside the sampling one, read when recording ends, so the events
//!   lost per PEBS activation can be measured (`l = v/a − t`, §6.3.2). Its readings are
//!   stored in the trace as samples of one more event (see [`counter_event_desc`]):
//!   `period` = the count, `addr` = time enabled (ns), `weight` = time running (ns), one
//!   per counter (per CPU for `-a`, else per task tree), stamped with the last timestamp of
//!   the trace. The header's `extra` names the events ([`EXTRA_EVENT`], [`EXTRA_COUNTER`]).
//!
//! Nothing here prints; errors are [`BandwidthError`]s whose text is one line that says
//! what is missing and what to do instead.

pub mod probe;

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use tailprof_format::{EventDesc, Sample, TraceHeader, TraceWriter};

use crate::attr::{ClockChoice, SamplingConfig};
use crate::caps::Capabilities;
use crate::counting::{counting_attr, read_counter};
use crate::event::{EventError, EventSpec, CORE_PMUS, SYSFS_PMU_ROOT};
use crate::session::Target;
use crate::sys;

/// Default period of the precise (PEBS) event. The paper (§6.3, Fig. 11/15) loses
/// about 35 events per PEBS activation on a worst-case read loop, so the reported share
/// falls from 96% at a threshold of 1000 to 37% at 10; ~1000 keeps the loss at a few
/// percent while one sample still stands for only 64 KiB. Prime, to avoid aliasing loops.
pub const DEFAULT_PEBS_PERIOD: u64 = 1009;
/// Default period of the interrupt-per-overflow baseline: every sample is an interrupt
/// (about 12 µs on our VMs), so ten times sparser than PEBS.
pub const DEFAULT_SOFT_TSC_PERIOD: u64 = 10007;
/// Default IBS op period (dispatched ops per sample). IBS interrupts once per sample and
/// samples all ops, only a few of which reach DRAM.
pub const DEFAULT_IBS_PERIOD: u64 = 65536;
/// Default SPE sampling interval (operations).
pub const DEFAULT_SPE_PERIOD: u64 = 1024;

/// `TraceHeader.extra` key: index of the bandwidth sampling event.
pub const EXTRA_EVENT: &str = "bandwidth.event";
/// `TraceHeader.extra` key: `pebs`, `soft-tsc`, `ibs-op` or `spe`.
pub const EXTRA_METHOD: &str = "bandwidth.method";
/// `TraceHeader.extra` key: why that event was chosen.
pub const EXTRA_REASON: &str = "bandwidth.reason";
/// `TraceHeader.extra` key: `1` when only DRAM/remote-memory samples count (IBS, SPE).
pub const EXTRA_DRAM_FILTER: &str = "bandwidth.dram_filter";
/// `TraceHeader.extra` key: index of the counting sibling's event.
pub const EXTRA_COUNTER: &str = "bandwidth.counter_event";

/// Why no bandwidth recording can be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BandwidthError {
    #[error(
        "record --bandwidth needs a hardware PMU that samples last-level-cache misses precisely (Intel PEBS, AMD IBS or \
         Arm SPE), and this machine exposes none ({detail}); to analyze memory bandwidth anyway, record on a machine \
         that has one (`perf record -e <LLC-miss event> -c 1009 -d -- CMD`) and run `tailprof import perf.data -o \
         run.trace && tailprof bandwidth run.trace` here"
    )]
    NoPmu { detail: String },
    #[error(
        "record --bandwidth on AMD needs IBS op sampling, but there is no 'ibs_op' PMU under {root} (kernel without \
         CONFIG_PERF_EVENTS_AMD_IBS, or a VM that hides IBS); record on bare metal, or import a perf.data made with \
         `perf record -e ibs_op// -d` and run `tailprof bandwidth` on it"
    )]
    NoIbs { root: String },
    #[error(
        "record --bandwidth on Arm needs the Statistical Profiling Extension, but there is no 'arm_spe_*' PMU under \
         {root} (kernel without CONFIG_ARM_SPE_PMU, or a CPU/VM without SPE)"
    )]
    NoSpe { root: String },
    #[error("record --bandwidth: {method} was chosen ({event}) but cannot be recorded by tailprof: {reason}")]
    Unrecordable { method: &'static str, event: String, reason: String },
    #[error("record --bandwidth: no last-level-cache-miss event is known for this CPU ({machine})")]
    UnknownCpu { machine: String },
    #[error("record --bandwidth: the sampling period must be > 0")]
    BadPeriod,
    #[error("record --bandwidth: {0}")]
    Event(#[from] EventError),
    #[error("record --bandwidth: the counting sibling: {0}")]
    Counter(String),
}

/// CPU vendor from `/proc/cpuinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Vendor {
    Intel,
    /// AMD or Hygon.
    Amd,
    Arm,
    Other(String),
}

/// What [`choose`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub vendor: Vendor,
    pub family: Option<u32>,
    pub model: Option<u32>,
    pub model_name: Option<String>,
    /// Arm `CPU implementer` and `CPU part`.
    pub arm_part: Option<(u32, u32)>,
    /// PMU directories under the sysfs root, sorted.
    pub pmus: Vec<String>,
    /// The first core PMU present (`cpu`, `cpu_core`, `cpu_atom`).
    pub core_pmu: Option<String>,
    /// `<core pmu>/caps/pmu_name` (e.g. `skylake`, `icelake`, `alderlake_hybrid`).
    pub pmu_name: Option<String>,
}

fn parse_num(v: &str) -> Option<u32> {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

impl Machine {
    /// From a sysfs PMU root (`/sys/bus/event_source/devices` or a fake tree) and the
    /// text of `/proc/cpuinfo`.
    pub fn detect(sysfs_root: &Path, cpuinfo: &str) -> Machine {
        let field = |key: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let vendor = match field("vendor_id").as_deref() {
            Some("GenuineIntel") => Vendor::Intel,
            Some("AuthenticAMD") | Some("HygonGenuine") => Vendor::Amd,
            Some(other) => Vendor::Other(other.to_string()),
            None if field("CPU implementer").is_some() => Vendor::Arm,
            None => Vendor::Other(std::env::consts::ARCH.to_string()),
        };
        let mut pmus: Vec<String> = std::fs::read_dir(sysfs_root)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        pmus.sort();
        let core_pmu = CORE_PMUS.iter().find(|p| pmus.iter().any(|q| q == *p)).map(|p| p.to_string());
        let pmu_name = core_pmu
            .as_ref()
            .and_then(|p| std::fs::read_to_string(sysfs_root.join(p).join("caps/pmu_name")).ok().map(|s| s.trim().to_string()));
        let arm_part = match (field("CPU implementer"), field("CPU part")) {
            (Some(i), Some(p)) => parse_num(&i).zip(parse_num(&p)),
            _ => None,
        };
        Machine {
            vendor,
            family: field("cpu family").and_then(|v| parse_num(&v)),
            model: field("model").and_then(|v| parse_num(&v)),
            model_name: field("model name"),
            arm_part,
            pmus,
            core_pmu,
            pmu_name,
        }
    }

    /// The live machine.
    pub fn live() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Machine::detect(Path::new(SYSFS_PMU_ROOT), &cpuinfo)
    }

    /// "Intel family 6 model 0x55 (kernel PMU 'skylake')".
    pub fn describe(&self) -> String {
        let mut s = match &self.vendor {
            Vendor::Intel => "Intel".to_string(),
            Vendor::Amd => "AMD".to_string(),
            Vendor::Arm => "Arm".to_string(),
            Vendor::Other(v) => v.clone(),
        };
        if let (Some(f), Some(m)) = (self.family, self.model) {
            s.push_str(&format!(" family {f} model {m:#x}"));
        }
        if let Some((i, p)) = self.arm_part {
            s.push_str(&format!(" implementer {i:#x} part {p:#x}"));
        }
        match (&self.core_pmu, &self.pmu_name) {
            (Some(c), Some(n)) => s.push_str(&format!(" (kernel PMU '{c}', pmu_name '{n}')")),
            (Some(c), None) => s.push_str(&format!(" (kernel PMU '{c}')")),
            _ => s.push_str(" (no core PMU)"),
        }
        s
    }

    fn has_pmu(&self, name: &str) -> bool {
        self.pmus.iter().any(|p| p == name)
    }

    fn spe_pmu(&self) -> Option<&str> {
        self.pmus.iter().find(|p| p.starts_with("arm_spe")).map(|s| s.as_str())
    }
}

/// How the bandwidth event is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// Precise sampling through the (large) PEBS buffer.
    Pebs,
    /// The same event with an interrupt per overflow (the paper's `soft-tsc`).
    SoftTsc,
    /// AMD IBS op sampling, DRAM samples kept by data source.
    IbsOp,
    /// Arm SPE, filtered to LLC misses.
    Spe,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Pebs => "pebs",
            Method::SoftTsc => "soft-tsc",
            Method::IbsOp => "ibs-op",
            Method::Spe => "spe",
        }
    }
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The precise mechanism of the CPU (PEBS, IBS, SPE).
    #[default]
    Precise,
    /// Interrupt per overflow, for comparison (Intel only).
    SoftTsc,
}

/// Options of [`choose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BandwidthRequest {
    pub mode: Mode,
    /// Events per sample; `None`: the method's default.
    pub period: Option<u64>,
    /// Also count the event in counting mode (the paper's PMC1).
    pub counter: bool,
}

/// The result of [`choose`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandwidthChoice {
    pub machine: String,
    pub method: Method,
    /// The vendor's name of the event (`MEM_LOAD_RETIRED.L3_MISS`).
    pub event_name: String,
    /// Ready for [`crate::attr::build_attr`]; `spec.name` is `event_name`.
    pub spec: EventSpec,
    pub period: u64,
    /// Why this event (one sentence).
    pub reason: String,
    /// Caveats (large-PEBS limits, hybrid cores, ...).
    pub notes: Vec<String>,
    /// The analysis must keep only samples whose data source is DRAM / remote memory.
    pub dram_filter: bool,
    /// The counting sibling, when requested (the same event, not precise).
    pub counter: Option<EventSpec>,
    /// Why tailprof cannot record this choice (SPE: AUX area), if so.
    pub record_blocker: Option<String>,
    /// The kernel can keep PERF_SAMPLE_TIME in large (multi-record) PEBS on this CPU
    /// (PEBS format ≥ 3, Skylake and later); only meaningful for [`Method::Pebs`].
    pub large_pebs_time: bool,
}

/// Intel event families by PEBS generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntelGen {
    NehalemWestmere,
    SandyIvy,
    HaswellBroadwell,
    SkylakeOrLater,
    Atom,
    Unknown,
}

fn intel_gen_from_pmu_name(n: &str) -> Option<IntelGen> {
    Some(match n {
        "nehalem" | "westmere" => IntelGen::NehalemWestmere,
        "sandybridge" | "ivybridge" => IntelGen::SandyIvy,
        "haswell" | "broadwell" => IntelGen::HaswellBroadwell,
        "skylake" | "icelake" | "sapphire_rapids" | "granite_rapids" | "emerald_rapids" | "diamond_rapids" => IntelGen::SkylakeOrLater,
        "goldmont" | "goldmont_plus" | "tremont" | "gracemont" | "crestmont" | "sierra_forest" | "grand_ridge" | "skymont"
        | "clearwater_forest" | "darkmont" => IntelGen::Atom,
        n if n.ends_with("_hybrid") => IntelGen::SkylakeOrLater,
        _ => return None,
    })
}

fn intel_gen_from_model(family: u32, model: u32) -> IntelGen {
    if family != 6 {
        return IntelGen::Unknown;
    }
    match model {
        0x1a | 0x1e | 0x1f | 0x2e | 0x25 | 0x2c | 0x2f => IntelGen::NehalemWestmere,
        0x2a | 0x2d | 0x3a | 0x3e => IntelGen::SandyIvy,
        0x3c | 0x3f | 0x45 | 0x46 | 0x3d | 0x47 | 0x4f | 0x56 => IntelGen::HaswellBroadwell,
        0x4e | 0x5e | 0x55 | 0x8e | 0x9e | 0xa5 | 0xa6 | 0x7d | 0x7e | 0x6a | 0x6c | 0x8c | 0x8d | 0xa7 | 0x8f | 0xcf | 0xad | 0xae
        | 0x97 | 0x9a | 0xb7 | 0xba | 0xbf | 0xaa | 0xac | 0xc5 | 0xc6 | 0xbd => IntelGen::SkylakeOrLater,
        0x5c | 0x5f | 0x7a | 0x86 | 0x96 | 0x9c | 0xbe | 0xaf | 0xb6 => IntelGen::Atom,
        _ => IntelGen::Unknown,
    }
}

const NO_TSC_IN_PEBS: &str = "PEBS before Skylake (format < 3) has no timestamp in the record, so the kernel leaves \
     PERF_SAMPLE_TIME out of its large-PEBS flags: every PEBS record costs an interrupt and is timestamped there";

/// Pick the bandwidth event for `m` (PMU files under `sysfs_root`, which must be the
/// tree `m` was detected from). See the module docs for the rules.
pub fn choose(m: &Machine, sysfs_root: &Path, req: &BandwidthRequest) -> Result<BandwidthChoice, BandwidthError> {
    if req.period == Some(0) {
        return Err(BandwidthError::BadPeriod);
    }
    let root_s = sysfs_root.display().to_string();
    let no_pmu = || BandwidthError::NoPmu {
        detail: format!(
            "no cpu, ibs_op or arm_spe PMU under {root_s}, as in a VM without a virtual PMU; found only: {}",
            if m.pmus.is_empty() { "nothing".to_string() } else { m.pmus.join(", ") }
        ),
    };
    match m.vendor {
        Vendor::Amd => {
            if !m.has_pmu("ibs_op") {
                return Err(if m.core_pmu.is_none() { no_pmu() } else { BandwidthError::NoIbs { root: root_s } });
            }
            let mut notes = Vec::new();
            if req.mode == Mode::SoftTsc {
                notes.push(
                    "soft-tsc was asked for, but on AMD the bandwidth event is IBS op sampling, which interrupts once per \
                     sample anyway"
                        .into(),
                );
            }
            let cnt_ctl = sysfs_root.join("ibs_op/format/cnt_ctl").is_file();
            let text = if cnt_ctl { "ibs_op/cnt_ctl=1/" } else { "ibs_op//" };
            let mut spec = EventSpec::parse_with_sysfs(text, sysfs_root)?;
            spec.name = "ibs_op".into();
            spec.mem = true;
            if !cnt_ctl {
                notes.push("this ibs_op PMU has no cnt_ctl term: the period counts cycles, not dispatched ops".into());
            }
            if req.counter {
                notes.push(
                    "--bandwidth-counter: IBS has no per-activation loss of the PEBS kind, so no counting sibling is \
                     opened"
                        .into(),
                );
            }
            Ok(BandwidthChoice {
                machine: m.describe(),
                method: Method::IbsOp,
                event_name: "ibs_op".into(),
                spec,
                period: req.period.unwrap_or(DEFAULT_IBS_PERIOD),
                reason: format!(
                    "AMD CPU: IBS op sampling (ibs_op PMU{}) tags a random op every period with its data source; samples \
                     whose data source is DRAM or remote memory each stand for `period` cache-line fills from memory",
                    if cnt_ctl { ", cnt_ctl=1: period in dispatched ops" } else { "" }
                ),
                notes,
                dram_filter: true,
                counter: None,
                record_blocker: None,
                large_pebs_time: false,
            })
        }
        Vendor::Arm => {
            let Some(spe) = m.spe_pmu().map(str::to_string) else {
                return Err(if m.core_pmu.is_none() && m.pmus.iter().all(|p| !p.starts_with("armv")) {
                    no_pmu()
                } else {
                    BandwidthError::NoSpe { root: root_s }
                });
            };
            let text = format!("{spe}/ts_enable=1,load_filter=1,jitter=1,event_filter=0x200/");
            let mut spec = EventSpec::parse_with_sysfs(&text, sysfs_root)?;
            spec.name = format!("{spe} (LLC-miss loads)");
            Ok(BandwidthChoice {
                machine: m.describe(),
                method: Method::Spe,
                event_name: spec.name.clone(),
                spec,
                period: req.period.unwrap_or(DEFAULT_SPE_PERIOD),
                reason: format!(
                    "Arm CPU with SPE ({spe}): sampled loads filtered to last-level-cache misses (event_filter bit 9), \
                     with timestamps (ts_enable) and a jittered interval"
                ),
                notes: Vec::new(),
                dram_filter: true,
                counter: None,
                record_blocker: Some(
                    "SPE writes its records to the perf AUX area, which tailprof's recorder does not read; use `perf \
                     record -e arm_spe_0/ts_enable=1,load_filter=1,event_filter=0x200/ -c 1024` and `perf mem report`"
                        .into(),
                ),
                large_pebs_time: false,
            })
        }
        Vendor::Intel => {
            let Some(core) = m.core_pmu.clone() else { return Err(no_pmu()) };
            let hybrid = m.has_pmu("cpu_core") && m.has_pmu("cpu_atom");
            let pmu = if hybrid { "cpu_core".to_string() } else { core };
            let (gen, how) = match m.pmu_name.as_deref().and_then(intel_gen_from_pmu_name) {
                Some(g) => (g, format!("kernel PMU name '{}'", m.pmu_name.as_deref().unwrap_or(""))),
                None => match (m.family, m.model) {
                    (Some(f), Some(mo)) => (intel_gen_from_model(f, mo), format!("family {f} model {mo:#x}")),
                    _ => (IntelGen::Unknown, "unknown model".to_string()),
                },
            };
            let gen = if pmu == "cpu_atom" { IntelGen::Atom } else { gen };
            let (name, event, umask, gen_text) = match gen {
                IntelGen::SkylakeOrLater => ("MEM_LOAD_RETIRED.L3_MISS", 0xd1, 0x20, "Skylake or later"),
                IntelGen::HaswellBroadwell => ("MEM_LOAD_UOPS_RETIRED.L3_MISS", 0xd1, 0x20, "Haswell/Broadwell"),
                IntelGen::SandyIvy => ("MEM_LOAD_UOPS_RETIRED.LLC_MISS", 0xd1, 0x20, "Sandy Bridge/Ivy Bridge"),
                IntelGen::NehalemWestmere => ("MEM_LOAD_RETIRED.LLC_MISS", 0xcb, 0x10, "Nehalem/Westmere"),
                IntelGen::Atom => ("MEM_LOAD_UOPS_RETIRED.DRAM_HIT", 0xd1, 0x80, "an Atom core"),
                IntelGen::Unknown => ("LONGEST_LAT_CACHE.MISS", 0x2e, 0x41, "an Intel CPU without a known precise LLC-miss event"),
            };
            let mut notes = Vec::new();
            let precise_possible = gen != IntelGen::Unknown;
            let method = match req.mode {
                Mode::SoftTsc => Method::SoftTsc,
                Mode::Precise if precise_possible => Method::Pebs,
                Mode::Precise => {
                    notes.push(format!(
                        "no precise (PEBS) last-level-cache-miss event is known for this CPU ({how}): falling back to \
                         {name} with an interrupt per overflow (soft-tsc)"
                    ));
                    Method::SoftTsc
                }
            };
            let precise = method == Method::Pebs;
            let text = format!("{pmu}/event={event:#x},umask={umask:#x}/{}", if precise { "pp" } else { "" });
            let mut spec = EventSpec::parse_with_sysfs(&text, sysfs_root)?;
            spec.name = name.to_string();
            spec.mem = precise;
            if precise && matches!(gen, IntelGen::NehalemWestmere | IntelGen::SandyIvy | IntelGen::HaswellBroadwell) {
                notes.push(NO_TSC_IN_PEBS.to_string());
            }
            if hybrid {
                notes.push(
                    "hybrid CPU: the event is opened on the P-core PMU (cpu_core); E-cores (cpu_atom, \
                     MEM_LOAD_UOPS_RETIRED.DRAM_HIT) are not covered, so pin the program to P-cores (taskset)"
                        .into(),
                );
            }
            let reason = match method {
                Method::Pebs => format!(
                    "{gen_text} ({how}): {name} (event {event:#x}, umask {umask:#x}) counts retired loads that missed \
                     the last-level cache and is PEBS-capable, so every sample carries its own timestamp, data address \
                     and data source (Larysch 2016, §3.2.3)"
                ),
                _ => format!(
                    "{gen_text} ({how}): {name} (event {event:#x}, umask {umask:#x}) without PEBS, one interrupt per \
                     overflow timestamped by the kernel (the paper's soft-tsc baseline, §6.2)"
                ),
            };
            let counter = if req.counter {
                let t = format!("{pmu}/event={event:#x},umask={umask:#x}/");
                let mut c = EventSpec::parse_with_sysfs(&t, sysfs_root)?;
                c.name = format!("{name} (counting)");
                Some(c)
            } else {
                None
            };
            let default_period = if precise { DEFAULT_PEBS_PERIOD } else { DEFAULT_SOFT_TSC_PERIOD };
            Ok(BandwidthChoice {
                machine: m.describe(),
                method,
                event_name: name.to_string(),
                spec,
                period: req.period.unwrap_or(default_period),
                reason,
                notes,
                dram_filter: false,
                counter,
                record_blocker: None,
                large_pebs_time: precise && gen == IntelGen::SkylakeOrLater,
            })
        }
        Vendor::Other(_) => {
            if m.core_pmu.is_none() && m.spe_pmu().is_none() && !m.has_pmu("ibs_op") {
                Err(no_pmu())
            } else {
                Err(BandwidthError::UnknownCpu { machine: m.describe() })
            }
        }
    }
}

/// [`choose`] for the live machine; refuses choices tailprof cannot record.
pub fn choose_live(req: &BandwidthRequest) -> Result<BandwidthChoice, BandwidthError> {
    let m = Machine::live();
    let c = choose(&m, Path::new(SYSFS_PMU_ROOT), req)?;
    if let Some(reason) = &c.record_blocker {
        return Err(BandwidthError::Unrecordable { method: c.method.as_str(), event: c.event_name.clone(), reason: reason.clone() });
    }
    Ok(c)
}

/// The sampling options the recorder uses for `choice` (fixed period, watermark
/// wakeups, no registers; `clock` from the machine's capabilities).
pub fn sampling_config(choice: &BandwidthChoice, clock: ClockChoice) -> SamplingConfig {
    SamplingConfig {
        period: Some(choice.period),
        freq: None,
        regs_user: 0,
        clock,
        inherit: true,
        enable_on_exec: true,
        disabled: true,
        sideband: true,
        wakeup_events: 0,
    }
}

/// Name the bandwidth event (index `event`) and the method in the trace header; with a
/// counting sibling, append its [`EventDesc`] and return its index.
pub fn annotate_header(header: &mut TraceHeader, choice: &BandwidthChoice, event: u16, counter: bool) -> Option<u16> {
    header.extra.insert(EXTRA_EVENT.into(), event.to_string());
    header.extra.insert(EXTRA_METHOD.into(), choice.method.as_str().into());
    header.extra.insert(EXTRA_REASON.into(), choice.reason.clone());
    header.extra.insert(EXTRA_DRAM_FILTER.into(), u8::from(choice.dram_filter).to_string());
    if !counter {
        return None;
    }
    let spec = choice.counter.as_ref()?;
    let idx = header.events.len() as u16;
    header.events.push(counter_event_desc(spec));
    header.extra.insert(EXTRA_COUNTER.into(), idx.to_string());
    Some(idx)
}

/// The event description of a counting sibling: no period, no frequency, no sample bits.
pub fn counter_event_desc(spec: &EventSpec) -> EventDesc {
    EventDesc {
        name: spec.name.clone(),
        attr_type: spec.attr_type,
        config: spec.config,
        config1: spec.config1,
        config2: spec.config2,
        sample_period: None,
        sample_freq: None,
        precise_ip: 0,
        sample_type: 0,
        regs_user_mask: 0,
        exclude_kernel: spec.exclude_kernel,
        exclude_user: spec.exclude_user,
    }
}

/// One counter of the sibling at the end of recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterReading {
    /// The CPU for per-CPU counters (`-a`), else `u32::MAX`.
    pub cpu: u32,
    /// The task the counter followed (0 for per-CPU counters).
    pub pid: u32,
    pub value: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

/// The counting sibling's open counters (see the module docs).
#[derive(Debug)]
pub struct CounterSibling {
    name: String,
    fds: Vec<(u32, u32, OwnedFd)>,
    enable_now: bool,
}

impl CounterSibling {
    /// Open `spec` in counting mode on the recorder's target: the launched command
    /// (`child_pid`, counting from its exec, children included), every thread of `-p PID`,
    /// or every CPU for `-a`.
    pub fn open(spec: &EventSpec, target: &Target, child_pid: Option<u32>) -> Result<CounterSibling, BandwidthError> {
        let caps = Capabilities::probe();
        let mut fds = Vec::new();
        let open = |attr: &crate::attr::PerfEventAttr, pid: i32, cpu: i32| {
            sys::perf_event_open(attr, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC)
                .map_err(|e| BandwidthError::Counter(sys::explain_open_error(&e, spec, &caps).to_string()))
        };
        let mut attr = counting_attr(spec);
        let enable_now = match target {
            Target::Command(_) => {
                let pid = child_pid.ok_or_else(|| BandwidthError::Counter("the command was not launched".into()))?;
                fds.push((u32::MAX, pid, open(&attr, pid as i32, -1)?));
                false
            }
            Target::Pid(pid) => {
                attr.set_enable_on_exec(0);
                let tids =
                    crate::procfs::thread_ids(*pid).map_err(|e| BandwidthError::Counter(format!("listing the threads of {pid}: {e}")))?;
                for tid in tids {
                    fds.push((u32::MAX, tid, open(&attr, tid as i32, -1)?));
                }
                true
            }
            Target::SystemWide | Target::SystemWideCommand(_) => {
                attr.set_enable_on_exec(0);
                attr.set_inherit(0);
                for cpu in caps.online_cpus.iter().copied() {
                    fds.push((cpu, 0, open(&attr, -1, cpu as i32)?));
                }
                true
            }
        };
        Ok(CounterSibling { name: spec.name.clone(), fds, enable_now })
    }

    /// Enable the counters that do not enable themselves at exec; call right before the
    /// recorder runs (which enables its own events at the same point).
    pub fn enable(&self) -> Result<(), BandwidthError> {
        if self.enable_now {
            for (_, _, fd) in &self.fds {
                sys::ioctl_enable(fd.as_fd()).map_err(|e| BandwidthError::Counter(format!("PERF_EVENT_IOC_ENABLE: {e}")))?;
            }
        }
        Ok(())
    }

    /// Read every counter.
    pub fn read(&self) -> Result<Vec<CounterReading>, BandwidthError> {
        self.fds
            .iter()
            .map(|(cpu, pid, fd)| {
                let (value, en, run) = read_counter(fd).map_err(|e| BandwidthError::Counter(format!("reading '{}': {e}", self.name)))?;
                Ok(CounterReading { cpu: *cpu, pid: *pid, value, time_enabled_ns: en, time_running_ns: run })
            })
            .collect()
    }
}

/// The trace samples that store `readings` as event `event` at time `time` (see the
/// module docs for the field mapping).
pub fn counter_samples(readings: &[CounterReading], event: u16, time: u64) -> Vec<Sample> {
    readings
        .iter()
        .map(|r| Sample {
            time,
            event,
            pid: r.pid,
            tid: r.pid,
            cpu: r.cpu,
            period: r.value,
            addr: Some(r.time_enabled_ns),
            weight: Some(r.time_running_ns),
            ..Default::default()
        })
        .collect()
}

/// Read the sibling and append its readings to the trace as event `event`, stamped with
/// the last timestamp written so far (records stay in time order).
pub fn append_counter_readings<W: Write>(
    writer: &mut TraceWriter<W>,
    sibling: &CounterSibling,
    event: u16,
) -> Result<Vec<CounterReading>, BandwidthError> {
    let readings = sibling.read()?;
    let time = writer.stats().last_time.unwrap_or(0);
    for s in counter_samples(&readings, event, time) {
        writer.write_sample(&s).map_err(|e| BandwidthError::Counter(format!("writing the counter readings: {e}")))?;
    }
    Ok(readings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_machine_without_pmu_says_what_is_missing() {
        let m = Machine::live();
        match choose(&m, Path::new(SYSFS_PMU_ROOT), &BandwidthRequest::default()) {
            Ok(c) => eprintln!("this machine has a PMU: {} ({})", c.event_name, c.reason),
            Err(e) => {
                let t = e.to_string();
                assert!(!t.contains('\n'), "{t}");
                if m.core_pmu.is_none() {
                    assert!(t.contains("tailprof bandwidth run.trace"), "{t}");
                }
            }
        }
    }

    #[test]
    fn cpuinfo_parsing() {
        let root = Path::new("/nonexistent-tailprof");
        let m = Machine::detect(root, "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Xeon\n");
        assert_eq!((m.vendor.clone(), m.family, m.model), (Vendor::Intel, Some(6), Some(0x55)));
        assert_eq!(m.model_name.as_deref(), Some("Xeon"));
        assert!(m.pmus.is_empty() && m.core_pmu.is_none());
        let m = Machine::detect(root, "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n");
        assert_eq!((m.vendor.clone(), m.arm_part), (Vendor::Arm, Some((0x41, 0xd0c))));
        let e = choose(&m, root, &BandwidthRequest::default()).unwrap_err();
        assert!(matches!(e, BandwidthError::NoPmu { .. }), "{e}");
        assert!(matches!(choose(&m, root, &BandwidthRequest { period: Some(0), ..Default::default() }), Err(BandwidthError::BadPeriod)));
    }

    #[test]
    fn intel_generations() {
        assert_eq!(intel_gen_from_pmu_name("skylake"), Some(IntelGen::SkylakeOrLater));
        assert_eq!(intel_gen_from_pmu_name("alderlake_hybrid"), Some(IntelGen::SkylakeOrLater));
        assert_eq!(intel_gen_from_pmu_name("tremont"), Some(IntelGen::Atom));
        assert_eq!(intel_gen_from_pmu_name("core2"), None);
        assert_eq!(intel_gen_from_model(6, 0x3f), IntelGen::HaswellBroadwell);
        assert_eq!(intel_gen_from_model(6, 0x2c), IntelGen::NehalemWestmere);
        assert_eq!(intel_gen_from_model(6, 0xa7), IntelGen::SkylakeOrLater);
        assert_eq!(intel_gen_from_model(15, 0x6), IntelGen::Unknown);
    }

    #[test]
    fn counter_readings_as_samples() {
        let r = [CounterReading { cpu: 1, pid: 0, value: 12345, time_enabled_ns: 10, time_running_ns: 5 }];
        let s = counter_samples(&r, 3, 777);
        assert_eq!((s[0].event, s[0].period, s[0].addr, s[0].weight, s[0].time, s[0].cpu), (3, 12345, Some(10), Some(5), 777, 1));
    }
}
