//! Synthetic bandwidth recordings with known truth, for tests and benchmarks.
//!
//! A recording is a sequence of phases, each with a known total bandwidth (GB/s over all
//! CPUs), repeated; every CPU carries an equal share. Events (cache-line fills of 64 B)
//! arrive on each CPU at the phase's rate; every `t + l` events make one PEBS activation
//! (a sample), `t` the period and `l` the events lost per activation (§6.3.2), so the
//! samples under-count by `t / (t + l)`. Arrivals are either
//!
//! - [`Arrivals::PoissonSamples`]: the activations themselves form a Poisson process
//!   (rate = event rate / (t + l)), the model the error bars assume, or
//! - [`Arrivals::PoissonEvents`]: the events form a Poisson process and an activation
//!   happens at every (t + l)-th (Gamma-distributed spacing), like a real counter.
//!
//! Options add a counting sibling (its per-CPU readings at the end, as the recorder
//! stores them: `period` = events, `addr` = enabled ns, `weight` = running ns), throttled
//! windows (no samples on a CPU between THROTTLE and UNTHROTTLE records), non-DRAM
//! samples mixed in (IBS-like: the DRAM filter must drop them), and one item per phase
//! on CPU 0's thread. [`Truth`] gives the exact expected bandwidth of any interval.
//! Streams are generated lazily per CPU and merged by time, so a 10 M-sample trace needs
//! no more memory than the trace being written.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tailprof_format::synth::Rng;
use tailprof_format::{ClockInfo, Comm, EventDesc, FormatError, Marker, MarkerKind, Record, Sample, Throttle, TraceHeader, TraceWriter};

use super::datasrc::{L1_HIT_LOAD, LOCAL_DRAM_LOAD};
use super::{EXTRA_COUNTER, EXTRA_DRAM_FILTER, EXTRA_EVENT, EXTRA_METHOD, LINE_BYTES};

/// One phase: its length and the total bandwidth of all CPUs during it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    pub duration_ns: u64,
    pub gbps: f64,
}

/// How samples arrive (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    PoissonSamples,
    PoissonEvents,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthConfig {
    pub phases: Vec<Phase>,
    /// The phase list is played this many times.
    pub repeat: u32,
    pub cpus: u32,
    /// The sampling period `t`.
    pub period: u64,
    /// Events lost per activation `l`.
    pub loss_per_activation: u64,
    pub arrivals: Arrivals,
    pub seed: u64,
    /// Add the counting sibling's readings.
    pub counter: bool,
    /// IBS-like: DRAM samples are this share of all samples; the rest hit L1.
    pub dram_share: Option<f64>,
    /// One item (markers) per played phase on CPU 0's thread, covering its middle 80%.
    pub items: bool,
    /// (cpu, start, end) offsets from the trace start with the event throttled.
    pub throttle: Vec<(u32, u64, u64)>,
    /// Trace clock at the start.
    pub start_ns: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            phases: vec![Phase { duration_ns: 20_000_000, gbps: 2.0 }, Phase { duration_ns: 20_000_000, gbps: 12.0 }],
            repeat: 5,
            cpus: 4,
            period: 1009,
            loss_per_activation: 0,
            arrivals: Arrivals::PoissonSamples,
            seed: 1,
            counter: false,
            dram_share: None,
            items: false,
            throttle: Vec::new(),
            start_ns: 1_000_000_000,
        }
    }
}

/// What the generated recording really contains.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    /// (start, end, total GB/s) per played phase.
    pub phases: Vec<(u64, u64, f64)>,
    pub t: u64,
    pub l: u64,
    /// Expected events over the trace (all CPUs).
    pub events: f64,
    /// DRAM samples generated (activations), throttled ones excluded.
    pub activations: u64,
    /// Other (non-DRAM) samples generated.
    pub other_samples: u64,
    /// (id, begin, end) of each item (on CPU 0, which carries 1/cpus of the traffic).
    pub items: Vec<(u64, u64, u64)>,
    pub cpus: u32,
}

impl Truth {
    /// Exact expected bytes in [a, b) over all CPUs.
    pub fn bytes(&self, a: u64, b: u64) -> f64 {
        self.phases
            .iter()
            .map(|&(s, e, g)| {
                let (lo, hi) = (a.max(s), b.min(e));
                if hi > lo {
                    (hi - lo) as f64 * g
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// Exact mean bandwidth (GB/s) over [a, b).
    pub fn mean_gbps(&self, a: u64, b: u64) -> f64 {
        if b <= a {
            0.0
        } else {
            self.bytes(a, b) / (b - a) as f64
        }
    }

    pub fn start(&self) -> u64 {
        self.phases.first().map_or(0, |p| p.0)
    }

    pub fn end(&self) -> u64 {
        self.phases.last().map_or(0, |p| p.1)
    }
}

/// Gamma(k, 1) for k ≥ 1 (Marsaglia–Tsang).
fn gamma(rng: &mut Rng, k: f64) -> f64 {
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = rng.unit().max(1e-300);
        if u < 1.0 - 0.0331 * x * x * x * x || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

fn normal(rng: &mut Rng) -> f64 {
    let u1 = rng.unit().max(1e-300);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn exp1(rng: &mut Rng) -> f64 {
    -(1.0 - rng.unit()).max(1e-300).ln()
}

/// One CPU's stream of samples (DRAM activations or other samples).
struct Stream {
    cpu: u32,
    dram: bool,
    rng: Rng,
    /// Position in event space (expected events since the start).
    pos: f64,
    /// Events per sample.
    step: f64,
    /// (start, end, events per ns on this CPU, cumulative events at start).
    segs: std::rc::Rc<Vec<(u64, u64, f64, f64)>>,
    seg: usize,
    arrivals: Arrivals,
}

impl Stream {
    fn next_time(&mut self) -> Option<u64> {
        self.pos += match self.arrivals {
            Arrivals::PoissonSamples => self.step * exp1(&mut self.rng),
            Arrivals::PoissonEvents if self.step >= 1.0 => gamma(&mut self.rng, self.step),
            Arrivals::PoissonEvents => exp1(&mut self.rng),
        };
        while self.seg < self.segs.len() {
            let (s, e, rate, cum) = self.segs[self.seg];
            let end_cum = cum + rate * (e - s) as f64;
            if rate > 0.0 && self.pos < end_cum {
                return Some(s + ((self.pos - cum) / rate) as u64);
            }
            self.seg += 1;
        }
        None
    }
}

/// The header of a synthetic recording.
pub fn header(cfg: &SynthConfig) -> TraceHeader {
    let ibs = cfg.dram_share.is_some();
    let mut h = TraceHeader {
        events: vec![EventDesc {
            name: if ibs { "ibs_op".into() } else { "MEM_LOAD_RETIRED.L3_MISS".into() },
            attr_type: if ibs { 11 } else { 4 },
            config: if ibs { 1 << 19 } else { 0x20d1 },
            sample_period: Some(cfg.period),
            precise_ip: if ibs { 0 } else { 2 },
            sample_type: 0x101818f,
            ..Default::default()
        }],
        clock: Some(ClockInfo::Monotonic),
        source: "synth".into(),
        nr_cpus: Some(cfg.cpus),
        ..Default::default()
    };
    h.extra.insert(EXTRA_EVENT.into(), "0".into());
    h.extra.insert(EXTRA_METHOD.into(), if ibs { "ibs-op" } else { "pebs" }.into());
    h.extra.insert(EXTRA_DRAM_FILTER.into(), if ibs { "1" } else { "0" }.into());
    if cfg.counter {
        h.events.push(EventDesc { name: "MEM_LOAD_RETIRED.L3_MISS (counting)".into(), attr_type: 4, config: 0x20d1, ..Default::default() });
        h.extra.insert(EXTRA_COUNTER.into(), "1".into());
    }
    h
}

/// Generate the recording, handing records to `emit` in time order; returns the truth.
pub fn generate_with(cfg: &SynthConfig, emit: &mut dyn FnMut(Record)) -> Truth {
    let mut phases = Vec::new();
    let mut t = cfg.start_ns;
    for _ in 0..cfg.repeat.max(1) {
        for p in &cfg.phases {
            phases.push((t, t + p.duration_ns, p.gbps));
            t += p.duration_ns;
        }
    }
    let end = t;
    let cpus = cfg.cpus.max(1);
    let events_per_ns_cpu = |gbps: f64| gbps / LINE_BYTES as f64 / cpus as f64;
    let mut segs = Vec::new();
    let mut cum = 0.0;
    for &(s, e, g) in &phases {
        let r = events_per_ns_cpu(g);
        segs.push((s, e, r, cum));
        cum += r * (e - s) as f64;
    }
    let per_cpu_events = cum;
    let segs = std::rc::Rc::new(segs);
    let step = (cfg.period + cfg.loss_per_activation) as f64;
    let mut master = Rng::new(cfg.seed);
    let mut streams = Vec::new();
    for cpu in 0..cpus {
        streams.push(Stream {
            cpu,
            dram: true,
            rng: Rng::new(master.next_u64()),
            pos: 0.0,
            step,
            segs: segs.clone(),
            seg: 0,
            arrivals: cfg.arrivals,
        });
        if let Some(share) = cfg.dram_share {
            let share = share.clamp(1e-6, 1.0);
            if share < 1.0 {
                streams.push(Stream {
                    cpu,
                    dram: false,
                    rng: Rng::new(master.next_u64()),
                    pos: 0.0,
                    step: step * share / (1.0 - share),
                    segs: segs.clone(),
                    seg: 0,
                    arrivals: Arrivals::PoissonSamples,
                });
            }
        }
    }
    // Side-band and markers, already in time order per kind.
    let mut side: Vec<Record> = Vec::new();
    for cpu in 0..cpus {
        side.push(Record::Comm(Comm { time: 0, pid: 1000, tid: 1000 + cpu, exec: cpu == 0, comm: "synth".into() }));
    }
    let mut items = Vec::new();
    if cfg.items {
        for (k, &(s, e, _)) in phases.iter().enumerate() {
            let (b, f) = (s + (e - s) / 10, e - (e - s) / 10);
            items.push((k as u64 + 1, b, f));
            side.push(Record::Marker(Marker {
                time: b,
                pid: 1000,
                tid: 1000,
                kind: MarkerKind::Begin,
                item: k as u64 + 1,
                ..Default::default()
            }));
            side.push(Record::Marker(Marker {
                time: f,
                pid: 1000,
                tid: 1000,
                kind: MarkerKind::End,
                item: k as u64 + 1,
                ..Default::default()
            }));
        }
    }
    for &(cpu, a, b) in &cfg.throttle {
        side.push(Record::Throttle(Throttle { time: cfg.start_ns + a, cpu, event: Some(0), throttled: true }));
        side.push(Record::Throttle(Throttle { time: cfg.start_ns + b, cpu, event: Some(0), throttled: false }));
    }
    side.sort_by_key(|r| r.time());
    let throttled = |cpu: u32, t: u64| cfg.throttle.iter().any(|&(c, a, b)| c == cpu && t >= cfg.start_ns + a && t < cfg.start_ns + b);

    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    for (i, s) in streams.iter_mut().enumerate() {
        if let Some(t) = s.next_time() {
            heap.push(Reverse((t, i)));
        }
    }
    let mut side_it = side.into_iter().peekable();
    let (mut activations, mut other) = (0u64, 0u64);
    let mut last = 0u64;
    let mut sample = Sample { event: 0, period: cfg.period, weight: Some(200), ..Default::default() };
    while let Some(Reverse((t, i))) = heap.pop() {
        while side_it.peek().is_some_and(|r| r.time() <= t) {
            emit(side_it.next().expect("peeked"));
        }
        let s = &mut streams[i];
        if !throttled(s.cpu, t) {
            sample.time = t;
            sample.cpu = s.cpu;
            sample.pid = 1000;
            sample.tid = 1000 + s.cpu;
            sample.ip = 0x40_1000 + (s.rng.next_u64() & 0xff0);
            sample.addr = Some(0x7f00_0000_0000 + (s.rng.next_u64() & 0xfff_ffc0));
            sample.data_src = Some(if s.dram { LOCAL_DRAM_LOAD } else { L1_HIT_LOAD });
            if s.dram {
                activations += 1;
            } else {
                other += 1;
            }
            last = t;
            emit(Record::Sample(sample.clone()));
        }
        if let Some(next) = s.next_time() {
            heap.push(Reverse((next, i)));
        }
    }
    for r in side_it {
        last = last.max(r.time());
        emit(r);
    }
    if cfg.counter {
        let time = last.max(end - 1);
        for cpu in 0..cpus {
            emit(Record::Sample(Sample {
                time,
                event: 1,
                cpu,
                pid: 1000,
                tid: 1000 + cpu,
                period: per_cpu_events.round() as u64,
                addr: Some(end - cfg.start_ns),
                weight: Some(end - cfg.start_ns),
                ..Default::default()
            }));
        }
    }
    Truth {
        phases,
        t: cfg.period,
        l: cfg.loss_per_activation,
        events: per_cpu_events * cpus as f64,
        activations,
        other_samples: other,
        items,
        cpus,
    }
}

/// Generate into memory.
pub fn generate(cfg: &SynthConfig) -> (TraceHeader, Vec<Record>, Truth) {
    let mut records = Vec::new();
    let truth = generate_with(cfg, &mut |r| records.push(r));
    (header(cfg), records, truth)
}

/// Generate straight into a trace file image.
pub fn trace_bytes(cfg: &SynthConfig) -> Result<(Vec<u8>, Truth), FormatError> {
    let mut w = TraceWriter::new(Vec::new(), &header(cfg))?;
    let mut err = None;
    let truth = generate_with(cfg, &mut |r| {
        if err.is_none() {
            let res = match &r {
                Record::Sample(s) => w.write_sample(s),
                other => w.write(other),
            };
            if let Err(e) = res {
                err = Some(e);
            }
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    let (bytes, _) = w.finish_into_inner(None)?;
    Ok((bytes, truth))
}
