//! Main-memory bandwidth over time from samples of last-level-cache misses
//! (`tailprof bandwidth`), after Larysch, "Fine-Grained Estimation of Memory Bandwidth
//! Utilization" (2016).
//!
//! This module owns:
//!
//! - **Event selection** ([`find_bandwidth_event`]): the event `record --bandwidth` named
//!   in the header (`extra["bandwidth.event"]`), else the first last-level-cache-miss event
//!   ([`is_llc_miss_event`]: `MEM_LOAD_RETIRED.L3_MISS` and its older names by code,
//!   `LLC-load-misses`, IBS op), else the first event with data sources (DRAM-filtered).
//! - **Binning** (§4.9 of the paper): the trace is cut into bins of `bin_ns`; a bin's bytes
//!   are Σ period × 64 B (one cache line per event) over its samples, its bandwidth bytes
//!   per width (1 byte/ns = 1 GB/s). The last bin is as wide as the trace reaches into it.
//! - **Error bars** ([`poisson`]): the 95% Garwood interval of the bin's sample count,
//!   scaled the same way. Bins with fewer than `min_samples` samples are marked below
//!   resolution (at 5 samples the interval already spans ×0.32 … ×2.3).
//! - **Loss correction** ([`loss`]): the §6.3.2 model `l = v/a − t`, shown beside the raw
//!   estimate, never instead of it.
//! - **Gaps**: LOST (ring full, any event on that CPU's ring), LOST_SAMPLES of the event
//!   and THROTTLE…UNTHROTTLE of the event make intervals where samples are missing; a lost
//!   record covers the time since the previous sample on its CPU. Bins that overlap a gap
//!   are flagged and left out of the summary and the bursts: missing samples are not low
//!   bandwidth.
//! - **DRAM filtering** ([`datasrc`]): for IBS, SPE and memory events that are not LLC-miss
//!   events, only samples whose data source is DRAM or remote memory count.
//! - **Summary and bursts** ([`bursts`]): mean, peak, percentiles of the bins; phases of high
//!   use between low ones.
//! - **Grouping**: per CPU, process or thread (totals, peak bin and the per-bin series),
//!   and per item (request), joined by the items join ([`crate::items::ItemsJoin`], used
//!   as is): each item's bytes and mean bandwidth with its interval.
//! - **Saturation**: given the machine's sustainable peak (`tailprof bandwidth --probe`),
//!   bins at or above a fraction of it (0.7 by default: latency rises steeply past 70–80%).
//! - `synth` (feature `testing`, not API): a synthetic-trace generator with known truth,
//!   for tests and benchmarks.
//!
//! The per-sample path is a compare, one division and two array increments (plus one
//! hash lookup with `--by`, and the items join's own work with items); nothing allocates
//! once the bin arrays have grown.

pub mod bursts;
pub mod datasrc;
pub mod loss;
pub mod poisson;
mod report;
#[cfg(any(test, feature = "testing"))]
pub mod synth;
pub use report::*;

use rustc_hash::FxHashMap;
use tailprof_format::{
    BuildIdEntry, Comm, EventDesc, FormatError, ItemClass, LossKind, Lost, Marker, Mmap, Sample, Sink, Task, Throttle, TraceHeader,
    TraceReader,
};

use crate::items::{ItemsJoin, ItemsOptions};
use crate::profile::select_event;
use crate::symbolize::{KernelSymbols, Symbolizer, SymbolizerOptions};
use crate::AnalyzeError;
use datasrc::{classify, LevelCounts, MemLevel};
use loss::LossModel;
use poisson::PoissonIntervals;

/// Bytes per event: one cache line.
pub const LINE_BYTES: u64 = 64;
/// Default bin width.
pub const DEFAULT_BIN_NS: u64 = 100_000;
/// Bins with fewer samples are below resolution.
pub const DEFAULT_MIN_SAMPLES: u64 = 5;
/// Default share of the machine peak from which a bin counts as near saturation.
pub const DEFAULT_SATURATION: f64 = 0.7;
/// Most bins one report may have.
pub const MAX_BINS: usize = 20_000_000;

/// `TraceHeader.extra` keys written by `record --bandwidth` (`tailprof_collect::bandwidth`).
pub const EXTRA_EVENT: &str = "bandwidth.event";
pub const EXTRA_METHOD: &str = "bandwidth.method";
pub const EXTRA_REASON: &str = "bandwidth.reason";
pub const EXTRA_DRAM_FILTER: &str = "bandwidth.dram_filter";
pub const EXTRA_COUNTER: &str = "bandwidth.counter_event";

const S_DATA_SRC: u64 = 1 << 15;
/// CPUs whose last sample time is kept in a vector.
const DENSE_CPUS: u32 = 1 << 16;

/// Whether `e` counts last-level-cache misses (by name or by event code).
pub fn is_llc_miss_event(e: &EventDesc) -> bool {
    let n = e.name.to_ascii_lowercase();
    if ["l3_miss", "llc_miss", "llc-load-misses", "llc-misses", "dram_hit", "longest_lat_cache.miss", "ibs_op", "arm_spe"]
        .iter()
        .any(|k| n.contains(k))
    {
        return true;
    }
    // Raw/core-PMU codes: 0xd1/0x20 (L3 miss), 0xcb/0x10 (Westmere), 0xd1/0x80 (Atom DRAM hit).
    // Raw (type 4) and dynamic core-PMU types (hybrid `cpu_atom`); not hardware (0),
    // software (1), tracepoint (2), hardware-cache (3) or breakpoint (5) events.
    let code = e.config & 0xffff;
    let hw_cache_ll_read_miss = e.attr_type == 3 && e.config == 0x10002;
    hw_cache_ll_read_miss || (!matches!(e.attr_type, 0..=3 | 5) && matches!(code, 0x20d1 | 0x10cb | 0x80d1))
}

/// The bandwidth event of a trace: `(index, needs the DRAM filter)`; see the module docs.
pub fn find_bandwidth_event(h: &TraceHeader) -> Option<(u16, bool)> {
    let filter_hint = h.extra.get(EXTRA_DRAM_FILTER).map(|v| v == "1");
    if let Some(i) = h.extra.get(EXTRA_EVENT).and_then(|v| v.parse::<u16>().ok()) {
        if let Some(e) = h.events.get(i as usize) {
            return Some((i, filter_hint.unwrap_or_else(|| needs_dram_filter(e))));
        }
    }
    let counter = counter_index(h);
    if let Some(i) = h.events.iter().enumerate().position(|(i, e)| Some(i as u16) != counter && is_llc_miss_event(e)) {
        return Some((i as u16, needs_dram_filter(&h.events[i])));
    }
    h.events.iter().position(|e| e.sample_type & S_DATA_SRC != 0).map(|i| (i as u16, true))
}

fn needs_dram_filter(e: &EventDesc) -> bool {
    let n = e.name.to_ascii_lowercase();
    n.starts_with("ibs_op") || n.contains("spe") || (!is_llc_miss_event(e) && e.sample_type & S_DATA_SRC != 0)
}

fn counter_index(h: &TraceHeader) -> Option<u16> {
    h.extra.get(EXTRA_COUNTER).and_then(|v| v.parse().ok()).filter(|&i: &u16| (i as usize) < h.events.len())
}

fn method_of(h: &TraceHeader, e: &EventDesc) -> String {
    if let Some(m) = h.extra.get(EXTRA_METHOD) {
        return m.clone();
    }
    let n = e.name.to_ascii_lowercase();
    if n.starts_with("ibs_op") {
        "ibs-op".into()
    } else if n.contains("spe") {
        "spe".into()
    } else if e.precise_ip > 0 {
        "pebs".into()
    } else if is_llc_miss_event(e) {
        "soft-tsc".into()
    } else {
        "sampled".into()
    }
}

#[derive(Debug, Clone, Default)]
struct GroupAcc {
    key: u64,
    samples: u64,
    period: u64,
    series: Vec<u32>,
}

#[derive(Debug, Default)]
struct Groups {
    index: FxHashMap<u64, usize>,
    last: Option<(u64, usize)>,
    rows: Vec<GroupAcc>,
}

#[derive(Debug, Default)]
struct CounterAcc {
    readings: u64,
    value: u64,
    scaled: f64,
    multiplexed: bool,
}

/// The analysis as a [`Sink`]; [`bandwidth_report`] drives it over a trace.
#[derive(Debug)]
pub struct BandwidthBuilder {
    opts: BandwidthOptions,
    event: u16,
    event_name: String,
    method: String,
    reason: Option<String>,
    fixed_period: Option<u64>,
    dram_filter: bool,
    counter_event: Option<u16>,
    counter_name: String,
    bin_ns: u64,
    t0: u64,
    t0_set: bool,
    last: u64,
    counts: Vec<u32>,
    periods: Vec<u64>,
    too_many_bins: Option<u64>,
    samples: u64,
    used: u64,
    period_sum: u64,
    levels: LevelCounts,
    no_src: u64,
    /// Last sample time per CPU (any event): dense for CPU numbers below
    /// [`DENSE_CPUS`], a map above (e.g. perf's "unknown CPU").
    cpu_last: Vec<u64>,
    cpu_last_other: FxHashMap<u32, u64>,
    throttled: FxHashMap<u32, u64>,
    gaps: Vec<Gap>,
    lost_samples: u64,
    lost_records: u64,
    throttles: u64,
    counter: CounterAcc,
    groups: Option<Groups>,
    join: Option<ItemsJoin>,
    comms: FxHashMap<u32, String>,
}

impl BandwidthBuilder {
    /// A builder for a trace with this header.
    pub fn new(h: &TraceHeader, opts: &BandwidthOptions) -> Result<Self, BandwidthError> {
        if opts.bin_ns == 0 {
            return Err(BandwidthError::ZeroBin);
        }
        let (event, auto_filter) = match &opts.event {
            Some(spec) => {
                let i = select_event(h, Some(spec))?;
                let filter = h.events.get(i as usize).is_some_and(needs_dram_filter);
                (i, filter)
            }
            None => find_bandwidth_event(h)
                .ok_or_else(|| BandwidthError::NoEvent { available: h.events.iter().map(|e| e.name.clone()).collect() })?,
        };
        let desc = h.events.get(event as usize).cloned().unwrap_or_default();
        let dram_filter = match opts.dram_filter {
            DramFilter::Auto => auto_filter,
            DramFilter::On => true,
            DramFilter::Off => false,
        };
        let counter_event = counter_index(h).filter(|&c| c != event);
        let want_items = opts.items || opts.by == Some(BwGroupBy::Item);
        let join = if want_items { Some(ItemsJoin::new(h, &ItemsOptions { event: Some(event), ..Default::default() })?) } else { None };
        let groups = matches!(opts.by, Some(BwGroupBy::Cpu | BwGroupBy::Process | BwGroupBy::Thread)).then(Groups::default);
        Ok(BandwidthBuilder {
            opts: opts.clone(),
            event,
            event_name: if desc.name.is_empty() { format!("event {event}") } else { desc.name.clone() },
            method: method_of(h, &desc),
            reason: h.extra.get(EXTRA_REASON).cloned(),
            fixed_period: desc.sample_period.filter(|&p| p > 0),
            dram_filter,
            counter_event,
            counter_name: counter_event.and_then(|c| h.events.get(c as usize)).map(|e| e.name.clone()).unwrap_or_default(),
            bin_ns: opts.bin_ns,
            t0: 0,
            t0_set: false,
            last: 0,
            counts: Vec::new(),
            periods: Vec::new(),
            too_many_bins: None,
            samples: 0,
            used: 0,
            period_sum: 0,
            levels: LevelCounts::default(),
            no_src: 0,
            cpu_last: Vec::new(),
            cpu_last_other: FxHashMap::default(),
            throttled: FxHashMap::default(),
            gaps: Vec::new(),
            lost_samples: 0,
            lost_records: 0,
            throttles: 0,
            counter: CounterAcc::default(),
            groups,
            join,
            comms: FxHashMap::default(),
        })
    }

    /// Build-ids the trace records (for the items join's symbolization).
    pub fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        if let Some(j) = &mut self.join {
            j.add_build_ids(entries);
        }
    }

    #[inline]
    fn note_time(&mut self, t: u64) {
        if t != 0 {
            if !self.t0_set {
                self.t0 = t;
                self.t0_set = true;
            }
            if t > self.last {
                self.last = t;
            }
        }
    }

    #[inline]
    fn bin_of(&self, t: u64) -> usize {
        (t.saturating_sub(self.t0) / self.bin_ns) as usize
    }

    fn add_gap(&mut self, start: u64, end: u64, cpu: u32, kind: &str, count: u64) {
        self.gaps.push(Gap { start_ns: start.min(end), end_ns: end.max(start), cpu, kind: kind.into(), count });
    }

    #[inline]
    fn count_sample(&mut self, s: &Sample) {
        let idx = self.bin_of(s.time);
        if idx >= self.counts.len() {
            if idx >= MAX_BINS {
                self.too_many_bins = Some(self.too_many_bins.unwrap_or(0).max(idx as u64 + 1));
                return;
            }
            let n = (idx + 1).max(self.counts.len() * 2).min(MAX_BINS);
            self.counts.resize(n, 0);
            self.periods.resize(n, 0);
        }
        self.counts[idx] += 1;
        self.periods[idx] += s.period;
        self.used += 1;
        self.period_sum += s.period;
        if let Some(g) = &mut self.groups {
            let key = match self.opts.by {
                Some(BwGroupBy::Cpu) => s.cpu as u64,
                Some(BwGroupBy::Process) => s.pid as u64,
                _ => s.tid as u64,
            };
            let gi = match g.last {
                Some((k, i)) if k == key => i,
                _ => {
                    let next = g.rows.len();
                    let i = *g.index.entry(key).or_insert(next);
                    if i == next {
                        g.rows.push(GroupAcc { key, ..Default::default() });
                    }
                    g.last = Some((key, i));
                    i
                }
            };
            let row = &mut g.rows[gi];
            row.samples += 1;
            row.period += s.period;
            if idx >= row.series.len() {
                row.series.resize(idx + 1, 0);
            }
            row.series[idx] += 1;
        }
    }

    /// Bins, gaps, summary, bursts, loss model, groups, items.
    #[allow(clippy::needless_range_loop)] // bin i indexes counts, periods and gap alike
    pub fn finish(mut self) -> Result<BandwidthReport, BandwidthError> {
        if let Some(bins) = self.too_many_bins {
            return Err(BandwidthError::TooManyBins { bins, bin_ns: self.bin_ns, max: MAX_BINS });
        }
        let mut notes = Vec::new();
        let line = self.opts.line_bytes;
        let end = self.last.max(self.t0);
        // Open throttles end with the trace.
        let mut open: Vec<(u32, u64)> = self.throttled.drain().collect();
        open.sort_unstable();
        for (cpu, t) in open {
            self.add_gap(t, end, cpu, "throttled", 0);
        }
        self.gaps.sort_by_key(|g| (g.start_ns, g.end_ns, g.cpu));
        let nbins = if self.t0_set { ((end - self.t0) / self.bin_ns + 1) as usize } else { 0 };
        if nbins > MAX_BINS {
            return Err(BandwidthError::TooManyBins { bins: nbins as u64, bin_ns: self.bin_ns, max: MAX_BINS });
        }
        self.counts.resize(nbins, 0);
        self.periods.resize(nbins, 0);
        let mean_period = if self.used > 0 { self.period_sum as f64 / self.used as f64 } else { self.fixed_period.unwrap_or(1) as f64 };
        let period_varies = self.fixed_period.is_none();

        // Loss model.
        let t = self.fixed_period.unwrap_or(0) as f64;
        let loss = if let Some(l) = self.opts.loss_l {
            if t > 0.0 {
                LossModel::given(t, l)
            } else {
                LossModel::none(t, "the event has no fixed period (sampled by frequency)")
            }
        } else if self.method != "pebs" {
            LossModel::none(
                t,
                match self.method.as_str() {
                    "soft-tsc" => "interrupt per overflow: the counter is read after the interrupt entry, so there is no \
                                   activation-delay loss (Larysch 2016, §6.3.3)"
                        .to_string(),
                    "ibs-op" | "spe" => format!("{} samples ops, it has no counter threshold to lose events at", self.method),
                    m => format!("not a PEBS recording ({m})"),
                },
            )
        } else if t <= 0.0 {
            LossModel::none(t, "the event has no fixed period (sampled by frequency)")
        } else if self.counter.readings > 0 {
            let a = self.samples + self.lost_samples;
            if self.throttles > 0 {
                notes.push(
                    "the event was throttled while the counting sibling kept counting: the measured l is too high by the \
                     events of the throttled time"
                        .to_string(),
                );
            }
            LossModel::measured(t, self.counter.scaled, a, self.counter.multiplexed)
        } else {
            LossModel::default_for(t)
        };

        // Gap coverage per bin.
        let mut gap = vec![false; nbins];
        for g in &self.gaps {
            if !self.t0_set {
                break;
            }
            let a = self.bin_of(g.start_ns).min(nbins.saturating_sub(1));
            let b = self.bin_of(g.end_ns).min(nbins.saturating_sub(1));
            for x in gap.iter_mut().take(b + 1).skip(a) {
                *x = true;
            }
        }

        let mut pi = PoissonIntervals::new();
        let sat = self.opts.peak_gbps.clone().filter(|(p, _)| *p > 0.0);
        let sat_threshold = sat.as_ref().map(|(p, _)| p * self.opts.saturation);
        let mut bins = Vec::with_capacity(nbins);
        for i in 0..nbins {
            let start = self.t0 + i as u64 * self.bin_ns;
            let width = if i + 1 == nbins { (end + 1).saturating_sub(start).clamp(1, self.bin_ns) } else { self.bin_ns };
            let n = self.counts[i] as u64;
            let bytes = self.periods[i] * line;
            let w = width as f64;
            let per_sample = if n > 0 { self.periods[i] as f64 / n as f64 } else { mean_period } * line as f64;
            let (lo, hi) = pi.get(n);
            let gbps = bytes as f64 / w;
            let (gl, gh) = (lo * per_sample / w, hi * per_sample / w);
            bins.push(BinRow {
                start_ns: start,
                width_ns: width,
                samples: n,
                bytes,
                gbps,
                gbps_low: gl,
                gbps_high: gh,
                gbps_corrected: gbps * loss.factor,
                gbps_corrected_low: gl * loss.factor_low,
                gbps_corrected_high: gh * loss.factor_high,
                below_resolution: n < self.opts.min_samples,
                gap: gap[i],
                near_saturation: sat_threshold.is_some_and(|th| !gap[i] && gbps >= th),
            });
        }

        // Summary over bins without gaps.
        let good: Vec<&BinRow> = bins.iter().filter(|b| !b.gap).collect();
        let covered_ns: u64 = good.iter().map(|b| b.width_ns).sum();
        let good_samples: u64 = good.iter().map(|b| b.samples).sum();
        let good_bytes: u64 = good.iter().map(|b| b.bytes).sum();
        let (mlo, mhi) = pi.get(good_samples);
        let mean = if covered_ns > 0 { good_bytes as f64 / covered_ns as f64 } else { 0.0 };
        let per = if good_samples > 0 { good_bytes as f64 / good_samples as f64 } else { mean_period * line as f64 };
        let mut sorted: Vec<f64> = good.iter().map(|b| b.gbps).collect();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| -> f64 {
            if sorted.is_empty() {
                0.0
            } else {
                sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
            }
        };
        let peak = good.iter().max_by(|a, b| a.gbps.total_cmp(&b.gbps));
        let summary = Summary {
            duration_ns: if self.t0_set { end - self.t0 } else { 0 },
            covered_ns,
            mean_gbps: mean,
            mean_gbps_low: if covered_ns > 0 { mlo * per / covered_ns as f64 } else { 0.0 },
            mean_gbps_high: if covered_ns > 0 { mhi * per / covered_ns as f64 } else { 0.0 },
            mean_gbps_corrected: mean * loss.factor,
            peak_gbps: peak.map_or(0.0, |b| b.gbps),
            peak_gbps_low: peak.map_or(0.0, |b| b.gbps_low),
            peak_start_ns: peak.map_or(0, |b| b.start_ns),
            p50_gbps: pct(0.5),
            p90_gbps: pct(0.9),
            p99_gbps: pct(0.99),
            resolution_gbps: mean_period * line as f64 / self.bin_ns as f64,
            bins: nbins as u64,
            gap_bins: gap.iter().filter(|&&g| g).count() as u64,
            below_resolution_bins: bins.iter().filter(|b| b.below_resolution && !b.gap).count() as u64,
        };

        // Bursts.
        let counts: Vec<u64> = bins.iter().map(|b| b.samples).collect();
        let split = bursts::find_bursts(&counts, &gap);
        let to_gbps = |samples_per_bin: f64| samples_per_bin * mean_period * line as f64 / self.bin_ns as f64;
        let burst_split = BurstSplitInfo {
            window_bins: split.window as u64,
            threshold_gbps: to_gbps(split.threshold),
            low_gbps: to_gbps(split.low_level),
            high_gbps: to_gbps(split.high_level),
            distinct: split.distinct,
        };
        let burst_rows: Vec<Burst> = split
            .runs
            .iter()
            .map(|r| {
                let bs = &bins[r.start..r.end];
                let samples: u64 = bs.iter().map(|b| b.samples).sum();
                let bytes: u64 = bs.iter().map(|b| b.bytes).sum();
                let width: u64 = bs.iter().map(|b| b.width_ns).sum();
                let (lo, hi) = pi.get(samples);
                let per = if samples > 0 { bytes as f64 / samples as f64 } else { 0.0 };
                Burst {
                    start_ns: bs[0].start_ns,
                    end_ns: bs[bs.len() - 1].start_ns + bs[bs.len() - 1].width_ns,
                    samples,
                    bytes,
                    mean_gbps: bytes as f64 / width as f64,
                    mean_gbps_low: lo * per / width as f64,
                    mean_gbps_high: hi * per / width as f64,
                    peak_gbps: bs.iter().map(|b| b.gbps).fold(0.0, f64::max),
                }
            })
            .collect();

        // Saturation.
        let saturation = sat.map(|(peak_gbps, source)| {
            let th = peak_gbps * self.opts.saturation;
            let mut windows: Vec<(u64, u64, f64)> = Vec::new();
            let mut prev_end = None;
            for b in bins.iter().filter(|b| b.near_saturation) {
                let e = b.start_ns + b.width_ns;
                match windows.last_mut() {
                    Some(w) if prev_end == Some(b.start_ns) => {
                        w.1 = e;
                        w.2 = w.2.max(b.gbps);
                    }
                    _ => windows.push((b.start_ns, e, b.gbps)),
                }
                prev_end = Some(e);
            }
            Saturation {
                peak_gbps,
                source,
                fraction: self.opts.saturation,
                threshold_gbps: th,
                bins: bins.iter().filter(|b| b.near_saturation).count() as u64,
                windows,
            }
        });

        // Groups.
        let dur = summary.duration_ns.max(1) as f64;
        let mut groups: Vec<GroupRow> = match self.groups.take() {
            Some(g) => g
                .rows
                .into_iter()
                .map(|r| {
                    let peak = r
                        .series
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| n as f64 * (r.period as f64 / r.samples.max(1) as f64) * line as f64 / bins[i].width_ns as f64)
                        .fold(0.0, f64::max);
                    let mut series = r.series;
                    series.resize(nbins, 0);
                    GroupRow {
                        key: r.key,
                        label: self.group_label(r.key),
                        samples: r.samples,
                        bytes: r.period * line,
                        mean_gbps: (r.period * line) as f64 / dur,
                        peak_gbps: peak,
                        series,
                    }
                })
                .collect(),
            None => Vec::new(),
        };
        groups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));

        // Items.
        let mut items = Vec::new();
        if let Some(join) = self.join.take() {
            let mut sym = Symbolizer::new(SymbolizerOptions {
                kernel: KernelSymbols::Off,
                debug_syms: false,
                debug_dirs: None,
                demangle: false,
                check_build_id: false,
                cache_dir: None,
            });
            match join.finish(&mut sym) {
                Ok(r) => {
                    for it in &r.items {
                        let bytes = (it.samples as f64 * mean_period) as u64 * line;
                        let d = it.duration_ns.max(1) as f64;
                        let (lo, hi) = pi.get(it.samples);
                        items.push(ItemBandwidth {
                            id: it.id,
                            pid: it.pid,
                            tid: it.tid,
                            class: it.class.clone(),
                            begin_ns: it.begin_ns,
                            end_ns: it.end_ns,
                            duration_ns: it.duration_ns,
                            samples: it.samples,
                            bytes,
                            gbps: bytes as f64 / d,
                            gbps_low: lo * mean_period * line as f64 / d,
                            gbps_high: hi * mean_period * line as f64 / d,
                            open_at_end: it.open_at_end,
                        });
                    }
                }
                Err(AnalyzeError::NoItems) if self.opts.by != Some(BwGroupBy::Item) => {
                    notes.push("no items in this trace (no markers): per-item bandwidth is not available".into())
                }
                Err(e) => return Err(BandwidthError::Items(e)),
            }
        }

        // Notes.
        let total_bytes = self.period_sum * line;
        if self.dram_filter {
            notes.push(format!(
                "DRAM filter: {} of {} samples have a data source of DRAM or remote memory and are counted",
                self.used, self.samples
            ));
            if self.no_src > 0 {
                notes.push(format!("{} samples carry no data source and were left out", self.no_src));
            }
        }
        if period_varies {
            notes.push("the event was sampled by frequency: each sample counts its own period".into());
        }
        if self.method == "soft-tsc" {
            notes.push(
                "soft-tsc: an interrupt per overflow slows phases of high event rates down and stretches them (Larysch \
                 2016, §6.5)"
                    .into(),
            );
        }
        if !self.gaps.is_empty() {
            notes.push(format!(
                "{} gap(s) where samples were lost or throttled: their {} bin(s) are shown as gaps and left out of the \
                 summary",
                self.gaps.len(),
                summary.gap_bins
            ));
        }
        if self.counter.multiplexed {
            notes.push("the counting sibling was multiplexed: its count is scaled by enabled/running time".into());
        }
        let counter = (self.counter.readings > 0).then(|| CounterInfo {
            event: self.counter_name.clone(),
            readings: self.counter.readings,
            value: self.counter.value,
            scaled: self.counter.scaled,
            multiplexed: self.counter.multiplexed,
        });
        Ok(BandwidthReport {
            event: self.event_name.clone(),
            event_index: self.event,
            method: self.method.clone(),
            reason: self.reason.clone(),
            period: self.fixed_period.unwrap_or(0),
            period_varies,
            line_bytes: line,
            bin_ns: self.bin_ns,
            min_samples: self.opts.min_samples,
            start_ns: self.t0,
            end_ns: end,
            samples: self.samples,
            samples_used: self.used,
            dram_filter: self.dram_filter,
            levels: self
                .levels
                .nonzero()
                .into_iter()
                .map(|(level, samples)| LevelRow { level, name: level.name(), samples, memory: level.is_memory() })
                .collect(),
            no_data_src: self.no_src,
            total_bytes,
            total_bytes_corrected: total_bytes as f64 * loss.factor,
            bins,
            gaps: self.gaps.clone(),
            lost_samples: self.lost_samples,
            lost_records: self.lost_records,
            throttles: self.throttles,
            summary,
            bursts: burst_rows,
            burst_split,
            loss,
            counter,
            group_by: self.opts.by,
            groups,
            items,
            saturation,
            damaged_chunks: 0,
            truncated_bytes: 0,
            notes,
        })
    }

    fn group_label(&self, key: u64) -> String {
        match self.opts.by {
            Some(BwGroupBy::Cpu) if key == u32::MAX as u64 => "cpu ?".into(),
            Some(BwGroupBy::Cpu) => format!("cpu {key}"),
            Some(BwGroupBy::Process) | Some(BwGroupBy::Thread) => match self.comms.get(&(key as u32)) {
                Some(c) => format!("{c} ({key})"),
                None => key.to_string(),
            },
            _ => key.to_string(),
        }
    }
}

impl Sink for BandwidthBuilder {
    #[inline]
    fn handle_sample(&mut self, s: &Sample) {
        self.note_time(s.time);
        if s.time != 0 {
            if s.cpu < DENSE_CPUS {
                let c = s.cpu as usize;
                if c >= self.cpu_last.len() {
                    self.cpu_last.resize(c + 1, 0);
                }
                self.cpu_last[c] = s.time;
            } else {
                self.cpu_last_other.insert(s.cpu, s.time);
            }
        }
        if s.event != self.event {
            if Some(s.event) == self.counter_event {
                let (en, run) = (s.addr.unwrap_or(0), s.weight.unwrap_or(0));
                self.counter.readings += 1;
                self.counter.value += s.period;
                self.counter.scaled += if run > 0 && en > run {
                    self.counter.multiplexed = true;
                    s.period as f64 * en as f64 / run as f64
                } else {
                    s.period as f64
                };
            }
            if let Some(j) = &mut self.join {
                j.handle_sample(s);
            }
            return;
        }
        self.samples += 1;
        match s.data_src {
            Some(d) => {
                let l = classify(d);
                self.levels.add(l);
                if self.dram_filter && !l.is_memory() {
                    return;
                }
            }
            None => {
                self.no_src += 1;
                if self.dram_filter {
                    return;
                }
            }
        }
        self.count_sample(s);
        if let Some(j) = &mut self.join {
            j.handle_sample(s);
        }
    }

    fn handle_mmap(&mut self, m: &Mmap) {
        self.note_time(m.time);
        if let Some(j) = &mut self.join {
            j.handle_mmap(m);
        }
    }

    fn handle_comm(&mut self, c: &Comm) {
        self.note_time(c.time);
        self.comms.insert(c.tid, c.comm.clone());
        if let Some(j) = &mut self.join {
            j.handle_comm(c);
        }
    }

    fn handle_fork(&mut self, t: &Task) {
        self.note_time(t.time);
        if let Some(j) = &mut self.join {
            j.handle_fork(t);
        }
    }

    fn handle_exit(&mut self, t: &Task) {
        self.note_time(t.time);
        if let Some(j) = &mut self.join {
            j.handle_exit(t);
        }
    }

    fn handle_lost(&mut self, l: &Lost) {
        if let Some(j) = &mut self.join {
            j.handle_lost(l);
        }
        let ours = l.event.is_none_or(|e| e == self.event);
        match l.kind {
            // Marker and item-class losses are not gaps in the sample stream.
            LossKind::Markers
            | LossKind::ItemClasses
            | LossKind::MarkersRejected
            | LossKind::JitNames
            | LossKind::JitLines
            | LossKind::Malformed => return,
            LossKind::Samples if !ours => return,
            LossKind::Samples => self.lost_samples += l.count,
            LossKind::RingFull => self.lost_records += l.count,
        }
        self.note_time(l.time);
        let last = if l.cpu < DENSE_CPUS { self.cpu_last.get(l.cpu as usize).copied() } else { self.cpu_last_other.get(&l.cpu).copied() };
        let start = last.filter(|&t| t != 0).unwrap_or(self.t0);
        let kind = if l.kind == LossKind::Samples { "lost_samples" } else { "lost_records" };
        self.add_gap(start, l.time, l.cpu, kind, l.count);
    }

    fn handle_throttle(&mut self, t: &Throttle) {
        if t.event.is_some_and(|e| e != self.event) {
            return;
        }
        self.note_time(t.time);
        if t.throttled {
            self.throttles += 1;
            self.throttled.entry(t.cpu).or_insert(t.time);
        } else if let Some(start) = self.throttled.remove(&t.cpu) {
            self.add_gap(start, t.time, t.cpu, "throttled", 0);
        }
    }

    fn handle_marker(&mut self, m: &Marker) {
        self.note_time(m.time);
        if let Some(j) = &mut self.join {
            j.handle_marker(m);
        }
    }

    fn handle_item_class(&mut self, c: &ItemClass) {
        if let Some(j) = &mut self.join {
            j.handle_item_class(c);
        }
    }
}

/// Read a whole trace and compute its bandwidth report (see the module docs).
pub fn bandwidth_report(reader: &mut TraceReader, opts: &BandwidthOptions) -> Result<BandwidthReport, BandwidthError> {
    let mut b = BandwidthBuilder::new(reader.header(), opts)?;
    let summary = reader.read_all(&mut b)?;
    b.add_build_ids(reader.build_ids());
    let mut r = b.finish()?;
    r.damaged_chunks = summary.damaged_chunks;
    r.truncated_bytes = summary.truncated_bytes;
    if summary.damaged_chunks > 0 || summary.truncated_bytes > 0 {
        r.notes.push(format!(
            "the trace is damaged ({} damaged chunk(s), {} byte(s) cut off): bandwidth there reads low",
            summary.damaged_chunks, summary.truncated_bytes
        ));
    }
    Ok(r)
}

/// The per-item memory traffic of `items --json` (`mem_bytes`, `mem_gbps`): a builder to
/// feed the trace's records to (beside the items join, in the same pass), `None` when the
/// trace has no last-level-cache-miss event. [`finish_item_memory`] ends it.
pub fn item_memory_builder(h: &TraceHeader) -> Result<Option<BandwidthBuilder>, BandwidthError> {
    let Some((event, _)) = find_bandwidth_event(h) else { return Ok(None) };
    let llc = h.extra.contains_key(EXTRA_EVENT) || h.events.get(event as usize).is_some_and(is_llc_miss_event);
    if !llc {
        return Ok(None);
    }
    let opts = BandwidthOptions { event: Some(event.to_string()), items: true, bin_ns: 1_000_000_000, ..Default::default() };
    BandwidthBuilder::new(h, &opts).map(Some)
}

/// The items of an [`item_memory_builder`] that read a whole trace; `None` without items.
pub fn finish_item_memory(b: BandwidthBuilder) -> Result<Option<Vec<ItemBandwidth>>, BandwidthError> {
    let r = b.finish()?;
    Ok((!r.items.is_empty()).then_some(r.items))
}

#[cfg(test)]
mod tests;
