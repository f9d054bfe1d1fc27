//! What a bandwidth analysis returns: the report, its rows, options and errors.

use serde::Serialize;

use super::*;

/// Errors of the bandwidth analysis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BandwidthError {
    #[error(
        "no last-level-cache-miss or memory event in this trace (events: {}); record with `tailprof record \
         --bandwidth`, import a `perf record -e <LLC-miss event> -d` recording, or pick an event with --event",
        available.join(", ")
    )]
    NoEvent { available: Vec<String> },
    #[error("the bin width must be > 0")]
    ZeroBin,
    #[error("{bins} bins of {bin_ns} ns would be needed for this trace (at most {max}); use a wider --bin")]
    TooManyBins { bins: u64, bin_ns: u64, max: usize },
    #[error("--by item: {0}")]
    Items(AnalyzeError),
    #[error(transparent)]
    Analyze(#[from] AnalyzeError),
    #[error(transparent)]
    Read(#[from] FormatError),
}

/// Grouping of [`BandwidthReport::groups`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BwGroupBy {
    Cpu,
    Process,
    Thread,
    Item,
}

/// Whether only DRAM samples count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DramFilter {
    /// On for IBS/SPE and for memory events that are not LLC-miss events.
    #[default]
    Auto,
    On,
    Off,
}

/// Options of [`bandwidth_report`].
#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthOptions {
    /// Event by name or index; `None`: [`find_bandwidth_event`].
    pub event: Option<String>,
    pub bin_ns: u64,
    pub by: Option<BwGroupBy>,
    pub dram_filter: DramFilter,
    /// Events lost per activation, instead of measuring/assuming it.
    pub loss_l: Option<f64>,
    pub min_samples: u64,
    /// The machine's sustainable bandwidth (GB/s) and where it came from.
    pub peak_gbps: Option<(f64, String)>,
    pub saturation: f64,
    /// Join items (per-item bandwidth; implied by `by == Item`).
    pub items: bool,
    pub line_bytes: u64,
}

impl Default for BandwidthOptions {
    fn default() -> Self {
        BandwidthOptions {
            event: None,
            bin_ns: DEFAULT_BIN_NS,
            by: None,
            dram_filter: DramFilter::Auto,
            loss_l: None,
            min_samples: DEFAULT_MIN_SAMPLES,
            peak_gbps: None,
            saturation: DEFAULT_SATURATION,
            items: false,
            line_bytes: LINE_BYTES,
        }
    }
}

/// One time bin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BinRow {
    pub start_ns: u64,
    pub width_ns: u64,
    pub samples: u64,
    pub bytes: u64,
    pub gbps: f64,
    pub gbps_low: f64,
    pub gbps_high: f64,
    /// Loss-corrected estimate and interval (equal to the raw ones without a model).
    pub gbps_corrected: f64,
    pub gbps_corrected_low: f64,
    pub gbps_corrected_high: f64,
    pub below_resolution: bool,
    /// Overlaps a gap (lost or throttled samples): not a measurement of low bandwidth.
    pub gap: bool,
    pub near_saturation: bool,
}

/// An interval in which samples are known to be missing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    pub start_ns: u64,
    pub end_ns: u64,
    pub cpu: u32,
    /// `lost_records` (ring full), `lost_samples`, `throttled`.
    pub kind: String,
    /// Records or samples lost (0 for throttling).
    pub count: u64,
}

/// Whole-trace figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub duration_ns: u64,
    /// Time in bins without gaps.
    pub covered_ns: u64,
    pub mean_gbps: f64,
    pub mean_gbps_low: f64,
    pub mean_gbps_high: f64,
    pub mean_gbps_corrected: f64,
    pub peak_gbps: f64,
    pub peak_gbps_low: f64,
    pub peak_start_ns: u64,
    pub p50_gbps: f64,
    pub p90_gbps: f64,
    pub p99_gbps: f64,
    /// Bandwidth of one sample in a full bin.
    pub resolution_gbps: f64,
    pub bins: u64,
    pub gap_bins: u64,
    pub below_resolution_bins: u64,
}

/// A phase of high use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Burst {
    pub start_ns: u64,
    pub end_ns: u64,
    pub samples: u64,
    pub bytes: u64,
    pub mean_gbps: f64,
    pub mean_gbps_low: f64,
    pub mean_gbps_high: f64,
    pub peak_gbps: f64,
}

/// How the bursts were separated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstSplitInfo {
    pub window_bins: u64,
    pub threshold_gbps: f64,
    pub low_gbps: f64,
    pub high_gbps: f64,
    /// The trace has two distinct levels (else no bursts).
    pub distinct: bool,
}

/// One CPU, process or thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupRow {
    pub key: u64,
    pub label: String,
    pub samples: u64,
    pub bytes: u64,
    /// Over the whole trace.
    pub mean_gbps: f64,
    pub peak_gbps: f64,
    /// Samples per bin (same bins as the report).
    pub series: Vec<u32>,
}

/// One item (request).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemBandwidth {
    pub id: u64,
    pub pid: u32,
    pub tid: u32,
    pub class: Option<String>,
    pub begin_ns: u64,
    pub end_ns: u64,
    pub duration_ns: u64,
    pub samples: u64,
    pub bytes: u64,
    pub gbps: f64,
    pub gbps_low: f64,
    pub gbps_high: f64,
    pub open_at_end: bool,
}

/// Windows near the machine's peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saturation {
    pub peak_gbps: f64,
    pub source: String,
    pub fraction: f64,
    pub threshold_gbps: f64,
    pub bins: u64,
    /// (start, end, highest bin GB/s) of each run of saturated bins.
    pub windows: Vec<(u64, u64, f64)>,
}

/// Samples per data source level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelRow {
    pub level: MemLevel,
    pub name: &'static str,
    pub samples: u64,
    pub memory: bool,
}

/// The counting sibling's readings (see `tailprof_collect::bandwidth`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterInfo {
    pub event: String,
    pub readings: u64,
    pub value: u64,
    /// `value × enabled / running` summed per reading.
    pub scaled: f64,
    pub multiplexed: bool,
}

/// Everything [`bandwidth_report`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthReport {
    pub event: String,
    pub event_index: u16,
    /// `pebs`, `soft-tsc`, `ibs-op`, `spe`, or `sampled` (an imported event of unknown kind).
    pub method: String,
    pub reason: Option<String>,
    /// Fixed sampling period (0 when it varies).
    pub period: u64,
    pub period_varies: bool,
    pub line_bytes: u64,
    pub bin_ns: u64,
    /// Bins with fewer samples are below resolution.
    pub min_samples: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Samples of the event read.
    pub samples: u64,
    /// Samples counted (after the DRAM filter).
    pub samples_used: u64,
    pub dram_filter: bool,
    /// Samples per data-source level (samples with a data source only).
    pub levels: Vec<LevelRow>,
    /// Samples of the event without a data source.
    pub no_data_src: u64,
    pub total_bytes: u64,
    pub total_bytes_corrected: f64,
    pub bins: Vec<BinRow>,
    pub gaps: Vec<Gap>,
    pub lost_samples: u64,
    pub lost_records: u64,
    pub throttles: u64,
    pub summary: Summary,
    pub bursts: Vec<Burst>,
    pub burst_split: BurstSplitInfo,
    pub loss: LossModel,
    pub counter: Option<CounterInfo>,
    pub group_by: Option<BwGroupBy>,
    pub groups: Vec<GroupRow>,
    pub items: Vec<ItemBandwidth>,
    pub saturation: Option<Saturation>,
    /// Damaged chunks / cut-off bytes of the trace file.
    pub damaged_chunks: u64,
    pub truncated_bytes: u64,
    pub notes: Vec<String>,
}
