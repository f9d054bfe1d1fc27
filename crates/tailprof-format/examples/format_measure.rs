//! Measures the trace format on synthetic recordings: time-delta codes (raw and after
//! zstd), per-column sizes, whole-trace bytes/sample, and writer/reader speed.
//!
//! Run in release mode (speed numbers are meaningless in debug):
//!
//! ```text
//! cargo run --release -p tailprof-format --example format_measure [samples]
//! ```
//!
//! Times are on-CPU time of the measuring thread (best of 3). Prints numbers only;
//! nothing here asserts a timing.

use std::time::Instant;
use tailprof_format::columns::{put_column, Packer};
use tailprof_format::synth::Workload;
use tailprof_format::varint::{put_uleb, zigzag};
use tailprof_format::*;

const CHUNK: usize = 16 * 1024;

/// A stopwatch of this thread's on-CPU time (from /proc/thread-self/schedstat), so other
/// processes competing for the CPU do not inflate the numbers; falls back to wall-clock.
struct CpuTimer(Option<u64>, Instant);

fn on_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

impl CpuTimer {
    fn start() -> Self {
        CpuTimer(on_cpu_ns(), Instant::now())
    }
    fn secs(&self) -> f64 {
        match (self.0, on_cpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => self.1.elapsed().as_secs_f64(),
        }
    }
}

fn zstd_len(b: &[u8], level: i32) -> usize {
    zstd::bulk::compress(b, level).map(|v| v.len()).unwrap_or(usize::MAX)
}

/// Encodes deltas chunk by chunk with `f` and returns (raw, zstd-1, zstd-3) bytes per delta.
fn measure(deltas: &[u64], f: &dyn Fn(&[u64], &mut Vec<u8>)) -> (f64, f64, f64) {
    let (mut raw, mut z1, mut z3) = (0, 0, 0);
    for c in deltas.chunks(CHUNK) {
        let mut b = Vec::new();
        f(c, &mut b);
        raw += b.len();
        z1 += zstd_len(&b, 1);
        z3 += zstd_len(&b, 3);
    }
    let n = deltas.len() as f64;
    (raw as f64 / n, z1 as f64 / n, z3 as f64 / n)
}

fn time_codecs(workloads: &[Workload], n: usize) {
    println!("== time-delta codes, bytes per delta ({CHUNK}-delta chunks): raw / zstd-1 / zstd-3");
    type Enc = fn(&[u64], &mut Vec<u8>);
    let codecs: [(&str, Enc); 6] = [
        ("paper16", |d, b| TimeCodec::Paper16.encode(d, b)),
        ("leb128", |d, b| TimeCodec::Leb128.encode(d, b)),
        ("planes (W=1..4 + esc)", |d, b| TimeCodec::Planes.encode(d, b)),
        ("u32-le", |d, b| d.iter().for_each(|&v| b.extend_from_slice(&(v.min(u32::MAX as u64) as u32).to_le_bytes()))),
        ("u32 byte-planes", |d, b| {
            for plane in 0..4 {
                d.iter().for_each(|&v| b.push((v.min(u32::MAX as u64) >> (8 * plane)) as u8));
            }
        }),
        ("leb128 delta-of-delta", |d, b| {
            let mut prev = 0u64;
            d.iter().for_each(|&v| {
                put_uleb(b, zigzag(v.wrapping_sub(prev) as i64));
                prev = v;
            })
        }),
    ];
    for w in workloads {
        let s = w.samples(1, n);
        let deltas: Vec<u64> = s.windows(2).map(|p| p[1].time - p[0].time).collect();
        let big = deltas.iter().filter(|&&d| d > u32::MAX as u64).count();
        println!("-- {} ({} deltas > 2^32)", w.name(), big);
        for (name, f) in &codecs {
            let (r, a, b) = measure(&deltas, f);
            println!("  {name:<22} {r:6.3} {a:6.3} {b:6.3}");
        }
    }
}

fn columns(workloads: &[Workload], n: usize) {
    println!("\n== per-column bytes/sample after zstd-1 ({CHUNK}-sample chunks, each column compressed alone; time in planes)");
    for w in workloads {
        let s = w.samples(1, n);
        let (mut t, mut ipt, mut ipi, mut th, mut cpu) = (0, 0, 0, 0, 0);
        for c in s.chunks(CHUNK) {
            let mut b = Vec::new();
            let deltas: Vec<u64> = c.windows(2).map(|p| p[1].time - p[0].time).collect();
            TimeCodec::Planes.encode(&deltas, &mut b);
            t += zstd_len(&b, 1);
            // IP table in frequency order + indices.
            let mut counts = std::collections::HashMap::new();
            c.iter().for_each(|x| *counts.entry(x.ip).or_insert(0u32) += 1);
            let mut table: Vec<(u64, u32)> = counts.into_iter().collect();
            table.sort_by_key(|&(ip, n)| (std::cmp::Reverse(n), ip));
            let rank: std::collections::HashMap<u64, usize> = table.iter().enumerate().map(|(i, &(ip, _))| (ip, i)).collect();
            let mut b = Vec::new();
            let mut prev = 0u64;
            table.iter().for_each(|&(ip, _)| {
                put_uleb(&mut b, zigzag(ip.wrapping_sub(prev) as i64));
                prev = ip;
            });
            ipt += zstd_len(&b, 1);
            let mut b = Vec::new();
            put_column(&mut b, &mut Packer::new(0), c.len(), |i| rank[&c[i].ip] as u64);
            ipi += zstd_len(&b, 1);
            let mut b = Vec::new();
            put_column(&mut b, &mut Packer::new(0), c.len(), |i| c[i].tid as u64 - 1000);
            th += zstd_len(&b, 1);
            let mut b = Vec::new();
            put_column(&mut b, &mut Packer::new(0), c.len(), |i| c[i].cpu as u64);
            cpu += zstd_len(&b, 1);
        }
        let f = |x: usize| x as f64 / n as f64;
        println!(
            "-- {}: time {:.3}  ip-table {:.3}  ip-index {:.3}  thread {:.3}  cpu {:.3}",
            w.name(), f(t), f(ipt), f(ipi), f(th), f(cpu)
        );
    }
}

fn write(samples: &[Sample], opts: WriterOptions) -> (Vec<u8>, f64) {
    let t0 = CpuTimer::start();
    let mut w = TraceWriter::with_options(Vec::with_capacity(samples.len() * 4), &TraceHeader::default(), opts).unwrap();
    for (i, s) in samples.iter().enumerate() {
        w.write_sample(s).unwrap();
        if i % 256 == 255 {
            w.end_round().unwrap();
        }
    }
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    (bytes, t0.secs() * 1e9 / samples.len() as f64)
}

fn whole(workloads: &[Workload], n: usize) {
    println!("\n== whole trace, bytes/sample (default writer options unless noted)");
    for w in workloads {
        let s = w.samples(1, n);
        let mut line = format!("-- {:<32}", w.name());
        for (codec, level) in [
            (TimeCodec::Paper16, 1),
            (TimeCodec::Leb128, 1),
            (TimeCodec::Planes, 1),
            (TimeCodec::Planes, 3),
        ] {
            let (b, _) = write(&s, WriterOptions { time_codec: codec, zstd_level: level, ..Default::default() });
            line += &format!("  {}/zstd{level} {:.3}", codec.name(), b.len() as f64 / n as f64);
        }
        for span in [1u64, 4, 8] {
            let (b, _) = write(&s, WriterOptions { round_span_ns: span * 1_000_000_000, ..Default::default() });
            line += &format!("  {span}s-rounds {:.3}", b.len() as f64 / n as f64);
        }
        let (b, _) = write(&s, WriterOptions { zstd_level: 0, ..Default::default() });
        line += &format!("  uncompressed {:.3}", b.len() as f64 / n as f64);
        println!("{line}");
    }
}

#[derive(Default)]
struct Count(u64, u64);
impl Sink for Count {
    fn handle_sample(&mut self, s: &Sample) {
        self.0 += 1;
        self.1 = self.1.wrapping_add(s.ip);
    }
}

fn speed(n: usize) {
    println!("\n== speed, {n} samples of {}", Workload::REALISTIC.name());
    let s = Workload::REALISTIC.samples(9, n);
    for level in [1, 3] {
        let mut best = f64::MAX;
        let mut bytes = Vec::new();
        for _ in 0..3 {
            let (b, ns) = write(&s, WriterOptions { zstd_level: level, ..Default::default() });
            best = best.min(ns);
            bytes = b;
        }
        println!("  write (zstd-{level}): {best:.1} ns/sample, {:.3} bytes/sample", bytes.len() as f64 / n as f64);
        let mut best_all = f64::MAX;
        let mut best_fe = f64::MAX;
        let mut best_sum = f64::MAX;
        for _ in 0..3 {
            let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
            let t0 = CpuTimer::start();
            let mut c = Count::default();
            r.read_all(&mut c).unwrap();
            best_all = best_all.min(t0.secs());
            assert_eq!(c.0, n as u64);
            let t0 = CpuTimer::start();
            let mut k = 0u64;
            r.for_each_sample(&mut |s| k = k.wrapping_add(s.time)).unwrap();
            best_fe = best_fe.min(t0.secs());
            let t0 = Instant::now(); // too short for the on-CPU clock's granularity
            let (_, st, _) = r.summarize().unwrap();
            best_sum = best_sum.min(t0.elapsed().as_secs_f64());
            assert_eq!(st.samples, n as u64);
        }
        let m = |secs: f64| n as f64 / secs / 1e6;
        println!(
            "  read_all {:.1} M samples/s, for_each_sample {:.1} M samples/s, summarize {:.2} ms",
            m(best_all), m(best_fe), best_sum * 1e3
        );
    }
}

fn main() {
    // Usage: format_measure [samples] [sections...]; sections: codes columns whole speed.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let want = |s: &str| args.iter().skip(1).all(|a| a.parse::<usize>().is_ok()) || args.iter().any(|a| a == s);
    let workloads = [
        Workload::CpuClock { period_ns: 10_000, threads: 4, ips: 3000 },
        Workload::REALISTIC,
        Workload::CpuClock { period_ns: 1_000_000, threads: 1, ips: 3000 },
        Workload::Uniform { ips: 3000 },
        Workload::Bursty { ips: 3000 },
    ];
    if want("codes") {
        time_codecs(&workloads, n);
    }
    if want("columns") {
        columns(&workloads, n);
    }
    if want("whole") {
        whole(&workloads, n);
    }
    if want("speed") {
        speed(5_000_000);
    }
}
