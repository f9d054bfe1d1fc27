//! Deterministic synthetic traces for tests, size measurements and benchmarks.
//!
//! Owns a tiny seeded PRNG ([`Rng`], SplitMix64) and generators of sample streams shaped
//! like real recordings ([`Workload`]), call stacks shaped like a real program's
//! ([`StackWorkload`]), plus [`random_records`] and [`random_stacked_records`] for
//! property tests. Sizes measured on these streams are deterministic, so tests may assert
//! them.

use crate::record::*;
use crate::stack::StackTable;

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
            0 => t.saturating_sub(rng.below(1 << 20)),          // out of order
            1 => t.saturating_add(rng.range(1 << 32, 1 << 40)), // idle gap
            2 => t,                                             // same time
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
            1 => Record::Comm(Comm {
                time,
                pid: wide(rng) as u32,
                tid: wide(rng) as u32,
                exec: rng.chance(0.5),
                comm: random_string(rng, 4),
            }),
            2 | 3 => {
                let task = Task { time, pid: wide(rng) as u32, ppid: wide(rng) as u32, tid: wide(rng) as u32, ptid: wide(rng) as u32 };
                if rng.chance(0.5) {
                    Record::Fork(task)
                } else {
                    Record::Exit(task)
                }
            }
            4 => Record::Lost(Lost {
                time,
                cpu: wide(rng) as u32,
                event: rng.chance(0.5).then(|| wide(rng) as u16),
                kind: [LossKind::RingFull, LossKind::Samples, LossKind::Markers][rng.below(3) as usize],
                count: wide(rng),
            }),
            5 => Record::Throttle(Throttle {
                time,
                cpu: wide(rng) as u32,
                event: rng.chance(0.5).then(|| wide(rng) as u16),
                throttled: rng.chance(0.5),
            }),
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
                ..Default::default()
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

/// Call stacks shaped like a real program's: a call graph of ~2000 user functions (and
/// ~300 kernel functions) below `_start → __libc_start_main → main`; each caller calls a
/// few callees (skewed choice), each call site has its own return address; `paths`
/// distinct call paths of depth `min_depth..=max_depth` (10 % end in 3–8 kernel frames, as
/// in a system call), picked with Zipf-like frequency (rank r has weight 1/(r+1)).
/// The leaf frame is the sampled ip: one per path when `leaf_ips` is 1, else one of
/// `leaf_ips` addresses of the leaf function (skewed), as real samples land on several
/// instructions of a hot function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StackWorkload {
    pub paths: usize,
    pub min_depth: usize,
    pub max_depth: usize,
    pub leaf_ips: u32,
}

impl StackWorkload {
    /// 1000 distinct stacks of depth 10–40 (the leaf ip fixed per path).
    pub const REALISTIC: StackWorkload = StackWorkload { paths: 1000, min_depth: 10, max_depth: 40, leaf_ips: 1 };

    pub fn name(&self) -> String {
        format!("{} paths depth {}-{} {} leaf ip(s)", self.paths, self.min_depth, self.max_depth, self.leaf_ips)
    }

    /// The distinct call paths, innermost frame first (leaf ip = the leaf function's first
    /// sampled address).
    pub fn paths(&self, seed: u64) -> Vec<Vec<Frame>> {
        let mut rng = Rng::new(seed ^ 0x5eed_57ac);
        const USER_FNS: u64 = 2000;
        const KERNEL_FNS: u64 = 300;
        let fn_addr = |f: u64| (0x55d4_2000_0000 + (f.wrapping_mul(0x9e37_79b9) % (4 << 20))) & !0xf;
        let kfn_addr = |f: u64| (0xffff_ffff_8100_0000 + (f.wrapping_mul(0x7f4a_7c15) % (16 << 20))) & !0xf;
        // Return address of the call from `caller` to its `k`-th callee.
        let ret = |addr: u64, k: u64| addr + 0x10 + k * 0x1b + (addr >> 4) % 7;
        let callees = |f: u64, k: u64| (f.wrapping_mul(2_654_435_761).wrapping_add(k * 40_503)) % USER_FNS;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(self.paths);
        while out.len() < self.paths {
            let depth = rng.range(self.min_depth as u64, self.max_depth as u64) as usize;
            let kernel = if rng.chance(0.1) { rng.range(3, 8) as usize } else { 0 };
            let user_depth = depth.saturating_sub(kernel).max(3);
            // Root first: _start, __libc_start_main, main, then the walk.
            let mut frames_root_first = Vec::with_capacity(depth);
            let (start, libc_main, main) = (USER_FNS, USER_FNS + 1, 0u64);
            frames_root_first.push(Frame::user(ret(fn_addr(start), 0)));
            frames_root_first.push(Frame::user(ret(fn_addr(libc_main), 0)));
            let mut f = main;
            while frames_root_first.len() < user_depth {
                // Skewed callee choice: low k (the common paths) much more often.
                let k = ((6f64).powf(rng.unit()) as u64).saturating_sub(1);
                frames_root_first.push(Frame::user(ret(fn_addr(f), k)));
                f = callees(f, k);
            }
            let mut leaf = Frame::user(fn_addr(f) + 0x40);
            if kernel > 0 {
                // The user part ends in a syscall instruction; the kernel part on top.
                frames_root_first.push(Frame::user(fn_addr(f) + 0x22));
                let mut kf = rng.below(8); // syscall entry points
                for _ in 0..kernel - 1 {
                    frames_root_first.push(Frame::kernel(ret(kfn_addr(kf), 0)));
                    kf = (kf * 31 + 7 + rng.below(3)) % KERNEL_FNS;
                }
                leaf = Frame::kernel(kfn_addr(kf) + 0x30);
            }
            frames_root_first.push(leaf);
            frames_root_first.reverse();
            if seen.insert(frames_root_first.clone()) {
                out.push(frames_root_first);
            }
        }
        out
    }

    /// `n` samples of [`Workload::REALISTIC`] timing, each with one of the paths (Zipf),
    /// `ip` and `cpumode` set from the leaf, plus the stack of each sample, innermost
    /// first. 2 % of the stacks are marked truncated (`CopyExhausted`), the rest
    /// `Complete`. `stack` of the samples is left `NONE` (the caller interns).
    pub fn samples(&self, seed: u64, n: usize) -> Vec<(Sample, Vec<Frame>)> {
        let paths = self.paths(seed);
        let mut rng = Rng::new(seed ^ 0x2a2a);
        let mut cdf = Vec::with_capacity(paths.len());
        let mut acc = 0.0;
        for r in 0..paths.len() {
            acc += 1.0 / (r as f64 + 1.0);
            cdf.push(acc);
        }
        Workload::REALISTIC
            .samples(seed, n)
            .into_iter()
            .map(|mut s| {
                let u = rng.unit() * acc;
                let p = cdf.partition_point(|&c| c < u).min(paths.len() - 1);
                let mut frames = paths[p].clone();
                if self.leaf_ips > 1 {
                    let k = ((self.leaf_ips as f64).powf(rng.unit()) as u64).saturating_sub(1);
                    frames[0].ip += k * 3;
                }
                s.ip = frames[0].ip;
                s.cpumode = if frames[0].kind == FrameKind::Kernel { CpuMode::Kernel } else { CpuMode::User };
                s.stack_status = if rng.chance(0.02) { StackStatus::CopyExhausted } else { StackStatus::Complete };
                (s, frames)
            })
            .collect()
    }
}

/// Random records like [`random_records`], plus `Switch` records, with random stacks on
/// about two thirds of the samples and switches, and random stack statuses. The stacks
/// are interned in the returned table; a writer that interns
/// `table.frames_leaf_first(id)` for every id in order (see [`intern_all`]) gets the
/// same ids.
pub fn random_stacked_records(rng: &mut Rng, n: usize) -> (StackTable, Vec<Record>) {
    let mut table = StackTable::new();
    let npool = rng.range(1, 40) as usize;
    let mut pool = Vec::with_capacity(npool);
    for _ in 0..npool {
        let depth = rng.range(1, 30) as usize;
        // Small frame alphabet so stacks share callers.
        let frames: Vec<Frame> = (0..depth)
            .map(|i| {
                let ip = match rng.below(10) {
                    0 => rng.next_u64(),
                    1 => u64::MAX - rng.below(3),
                    _ => 0x40_0000 + rng.below(12) * 0x10 + i as u64,
                };
                Frame { ip, kind: if rng.chance(0.2) { FrameKind::Kernel } else { FrameKind::User } }
            })
            .collect();
        pool.push(table.intern_leaf_first(&frames));
    }
    let status = |rng: &mut Rng| StackStatus::ALL[rng.below(StackStatus::ALL.len() as u64) as usize];
    let mut out = Vec::with_capacity(n + n / 8);
    for r in random_records(rng, n) {
        match r {
            Record::Sample(mut s) => {
                if rng.chance(0.67) {
                    s.stack = pool[rng.below(npool as u64) as usize];
                }
                s.stack_status = status(rng);
                out.push(Record::Sample(s));
            }
            other => {
                if rng.chance(0.3) {
                    let kind = [SwitchKind::In, SwitchKind::OutPreempted, SwitchKind::OutBlocked][rng.below(3) as usize];
                    let stack = if rng.chance(0.67) { pool[rng.below(npool as u64) as usize] } else { StackId::NONE };
                    out.push(Record::Switch(Switch {
                        time: other.time(),
                        pid: rng.below(1 << 20) as u32,
                        tid: rng.next_u64() as u32,
                        cpu: rng.below(4) as u32,
                        kind,
                        stack,
                        stack_status: status(rng),
                        next_prev: rng.chance(0.5).then(|| (rng.below(1 << 20) as u32, rng.next_u64() as u32)),
                        item_key: None,
                    }));
                }
                if rng.chance(0.1) {
                    let stack = if rng.chance(0.67) { pool[rng.below(npool as u64) as usize] } else { StackId::NONE };
                    out.push(Record::Wakeup(Wakeup {
                        time: other.time(),
                        pid: rng.below(1 << 20) as u32,
                        tid: rng.next_u64() as u32,
                        cpu: rng.below(4) as u32,
                        wakee_tid: rng.next_u64() as u32,
                        stack,
                        stack_status: status(rng),
                    }));
                }
                out.push(other);
            }
        }
    }
    (table, out)
}

/// Interns every stack of `table` into `w`, in id order, so `w` hands out the same ids
/// (for replaying generated records). Returns whether every id matched.
pub fn intern_all<W: std::io::Write>(w: &mut crate::TraceWriter<W>, table: &StackTable) -> bool {
    let mut frames = Vec::new();
    let mut ok = true;
    for d in table.defs() {
        frames.clear();
        frames.extend(table.frames_leaf_first(d.id));
        ok &= w.intern_stack(&frames) == d.id;
    }
    ok
}
