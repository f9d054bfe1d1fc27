//! Deterministic synthetic traces for tests, size measurements and benchmarks.
//!
//! Owns a tiny seeded PRNG ([`Rng`], SplitMix64) and generators of sample streams shaped
//! like real recordings ([`Workload`]), plus [`random_records`] for property tests. Sizes
//! measured on these streams are deterministic, so tests may assert them.

use crate::record::*;

/// SplitMix64: small, fast, seedable, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Shapes of sample streams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workload {
    /// cpu-clock sampling: each of 2 CPUs ticks every `period_ns` with ±2% jitter, 1% late
    /// ticks (up to 5 periods), rare idle gaps (1 ms – 10 s, one per ~50k ticks); 1–4 threads; a skewed hot
    /// set over `ips` distinct IPs (10% kernel); constant period.
    CpuClock { period_ns: u64, threads: u32, ips: u32 },
    /// One merged stream with spacing uniform in 10 µs – 1 ms (no regularity at all).
    Uniform { ips: u32 },
    /// PEBS-like bursts: 50–500 samples 200 ns – 5 µs apart, bursts 1 ms – 6 s apart;
    /// varying period; data addresses and weights present.
    Bursty { ips: u32 },
}

impl Workload {
    /// The workload the size target is stated for: 4 kHz cpu-clock (perf's default
    /// rate), 3 threads, 3000 distinct IPs.
    pub const REALISTIC: Workload = Workload::CpuClock { period_ns: 250_000, threads: 3, ips: 3000 };

    pub fn name(&self) -> String {
        match *self {
            Workload::CpuClock { period_ns, threads, ips } => {
                format!("cpu-clock {}us {threads}thr {ips}ips", period_ns / 1000)
            }
            Workload::Uniform { ips } => format!("uniform 10us-1ms {ips}ips"),
            Workload::Bursty { ips } => format!("bursty pebs {ips}ips"),
        }
    }

    /// `n` samples of this workload, in non-decreasing time order.
    pub fn samples(&self, seed: u64, n: usize) -> Vec<Sample> {
        let mut rng = Rng::new(seed);
        match *self {
            Workload::CpuClock { period_ns, threads, ips } => cpu_clock(&mut rng, n, period_ns, threads, ips),
            Workload::Uniform { ips } => uniform(&mut rng, n, ips),
            Workload::Bursty { ips } => bursty(&mut rng, n, ips),
        }
    }
}

/// A skewed choice of IP: log-uniform rank (a few IPs take most samples), mapped to a
/// user text region, or (every 10th rank) to kernel text.
fn pick_ip(rng: &mut Rng, ips: u32) -> (u64, CpuMode) {
    let rank = ((ips as f64).powf(rng.unit()) as u64).saturating_sub(1);
    // Spread ranks over the text with a fixed permutation-ish hash.
    let off = (rank.wrapping_mul(0x9e37_79b9) % (2 << 20)) & !1;
    if rank % 10 == 9 {
        (0xffff_ffff_8100_0000 + off * 4, CpuMode::Kernel)
    } else {
        (0x55d4_2000_0000 + off, CpuMode::User)
    }
}

fn cpu_clock(rng: &mut Rng, n: usize, period: u64, threads: u32, ips: u32) -> Vec<Sample> {
    let threads = threads.max(1);
    let start = 1_700_000_000_000_000_000u64 % (1 << 50) + rng.below(1 << 30);
    let mut next = [start, start + rng.below(period)];
    let mut running = [0u32, 1 % threads];
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let cpu = if next[0] <= next[1] { 0 } else { 1 };
        let t = next[cpu];
        if rng.chance(0.05) {
            running[cpu] = rng.below(threads as u64) as u32;
        }
        let (ip, cpumode) = pick_ip(rng, ips);
        let tid = 1000 + running[cpu];
        out.push(Sample { time: t, event: 0, ip, pid: 1000, tid, cpu: cpu as u32, period, cpumode, ..Default::default() });
        let j = period / 50;
        let mut d = period - j + rng.below(2 * j + 1);
        if rng.chance(0.01) {
            d += rng.below(5 * period);
        }
        if rng.chance(0.00002) {
            d += rng.range(1_000_000, 10_000_000_000);
        }
        next[cpu] = t + d;
    }
    out
}

fn uniform(rng: &mut Rng, n: usize, ips: u32) -> Vec<Sample> {
    let mut t = 1u64 << 40;
    (0..n)
        .map(|_| {
            t += rng.range(10_000, 1_000_000);
            let (ip, cpumode) = pick_ip(rng, ips);
            let cpu = rng.below(2) as u32;
            Sample { time: t, ip, pid: 42, tid: 42 + cpu, cpu, period: 1_000_000, cpumode, ..Default::default() }
        })
        .collect()
}

fn bursty(rng: &mut Rng, n: usize, ips: u32) -> Vec<Sample> {
    let mut t = 1u64 << 40;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        t += rng.range(1_000_000, 6_000_000_000);
        let burst = rng.range(50, 500);
        for _ in 0..burst {
            t += rng.range(200, 5_000);
            let (ip, _) = pick_ip(rng, ips);
            let addr = 0x7f00_0000_0000 + rng.below(1 << 24) * 64;
            out.push(Sample {
                time: t,
                ip,
                pid: 7,
                tid: 7,
                cpu: rng.below(2) as u32,
                period: 10_007 + rng.below(4),
                cpumode: CpuMode::User,
                addr: Some(addr),
                weight: Some(rng.range(4, 400)),
                data_src: Some(0x6810_0142 + (rng.below(4) << 5)),
                ..Default::default()
            });
        }
    }
    out.truncate(n);
    out
}

fn random_string(rng: &mut Rng, max: u64) -> String {
    const PIECES: [&str; 10] = ["/usr/lib/", "libc.so.6", "é", "ü", "日本", "🦀", " ", "x", "[vdso]", "\u{0}"];
    (0..rng.below(max + 1)).map(|_| PIECES[rng.below(PIECES.len() as u64) as usize]).collect()
}

fn opt(rng: &mut Rng, p: f64, f: impl Fn(&mut Rng) -> u64) -> Option<u64> {
    if rng.chance(p) {
        Some(f(rng))
    } else {
        None
    }
}

/// Random records of every kind with every optional field exercised, in an order the
/// writer accepts (samples mostly in time order, with occasional steps back in time),
/// for property tests.
pub fn random_records(rng: &mut Rng, n: usize) -> Vec<Record> {
    let mut t = rng.below(1 << 40);
    let mut out = Vec::with_capacity(n);
    let wide = |rng: &mut Rng| match rng.below(4) {
        0 => rng.below(256),
        1 => rng.next_u64(),
        2 => u64::MAX - rng.below(3),
        _ => rng.below(1 << 40),
    };
    let cpumodes = [CpuMode::Unknown, CpuMode::Kernel, CpuMode::User, CpuMode::Hypervisor, CpuMode::GuestKernel, CpuMode::GuestUser];
    for _ in 0..n {
        t = match rng.below(100) {
            0 => t.saturating_sub(rng.below(1 << 20)),     // out of order
            1 => t.saturating_add(rng.range(1 << 32, 1 << 40)), // idle gap
            2 => t,                                          // same time
            _ => t.saturating_add(rng.below(1 << 20)),
        };
        let time = if rng.chance(0.02) { 0 } else { t };
        let r = match rng.below(20) {
            0 => Record::Mmap(Mmap {
                time,
                pid: wide(rng) as u32,
                tid: wide(rng) as u32,
                start: wide(rng),
                len: wide(rng),
                pgoff: wide(rng),
                prot: wide(rng) as u32,
                cpumode: cpumodes[rng.below(6) as usize],
                path: random_string(rng, 12),
                build_id: rng.chance(0.5).then(|| (0..rng.below(21)).map(|_| rng.below(256) as u8).collect()),
            }),
            1 => Record::Comm(Comm { time, pid: wide(rng) as u32, tid: wide(rng) as u32, exec: rng.chance(0.5), comm: random_string(rng, 4) }),
            2 | 3 => {
                let task = Task { time, pid: wide(rng) as u32, ppid: wide(rng) as u32, tid: wide(rng) as u32, ptid: wide(rng) as u32 };
                if rng.chance(0.5) { Record::Fork(task) } else { Record::Exit(task) }
            }
            4 => Record::Lost(Lost {
                time,
                cpu: wide(rng) as u32,
                event: rng.chance(0.5).then(|| wide(rng) as u16),
                kind: [LossKind::RingFull, LossKind::Samples, LossKind::Markers][rng.below(3) as usize],
                count: wide(rng),
            }),
            5 => Record::Throttle(Throttle { time, cpu: wide(rng) as u32, event: rng.chance(0.5).then(|| wide(rng) as u16), throttled: rng.chance(0.5) }),
            6 => Record::Marker(Marker {
                time,
                pid: wide(rng) as u32,
                tid: wide(rng) as u32,
                kind: if rng.chance(0.5) { MarkerKind::Begin } else { MarkerKind::End },
                item: if rng.chance(0.1) { Marker::UNKNOWN_ITEM } else { wide(rng) },
                class: wide(rng) as u32,
                source: if rng.chance(0.5) { MarkerSource::Api } else { MarkerSource::Uprobe },
            }),
            7 => Record::ItemClass(ItemClass { time, pid: wide(rng) as u32, id: wide(rng) as u32, name: random_string(rng, 6) }),
            _ => Record::Sample(Sample {
                time: t,
                event: if rng.chance(0.8) { 0 } else { wide(rng) as u16 },
                ip: if rng.chance(0.7) { 0x400000 + rng.below(64) } else { wide(rng) },
                pid: if rng.chance(0.8) { 5 } else { wide(rng) as u32 },
                tid: if rng.chance(0.8) { 6 } else { wide(rng) as u32 },
                cpu: if rng.chance(0.8) { rng.below(2) as u32 } else { wide(rng) as u32 },
                period: if rng.chance(0.8) { 1000 } else { wide(rng) },
                cpumode: cpumodes[rng.below(6) as usize],
                addr: opt(rng, 0.3, wide),
                weight: opt(rng, 0.3, wide),
                data_src: opt(rng, 0.3, wide),
                regs: if rng.chance(0.3) { (0..rng.below(5)).map(|_| wide(rng)).collect() } else { Vec::new() },
            }),
        };
        out.push(r);
    }
    out
}

/// Random build-id entries (some paths repeated, so later entries replace earlier ones).
pub fn random_build_ids(rng: &mut Rng, n: usize) -> Vec<BuildIdEntry> {
    (0..n)
        .map(|_| BuildIdEntry {
            path: format!("/lib/{}{}", random_string(rng, 3), rng.below(8)),
            build_id: (0..rng.below(21)).map(|_| rng.below(256) as u8).collect(),
        })
        .collect()
}
