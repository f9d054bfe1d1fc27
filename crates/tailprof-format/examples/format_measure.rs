//! Measures the trace format on synthetic recordings: time-delta codes (raw and after
//! zstd), per-column sizes, whole-trace bytes/sample, and writer/reader speed.
//!
//! Run in release mode (speed numbers are meaningless in debug):
//!
//! ```text
//! cargo run --release -p tailprof-format --example format_measure [samples]
//! ```
//!
//! Prints numbers only; nothing here asserts a timing.

use std::time::Instant;
use tailprof_format::columns::put_column;
use tailprof_format::synth::Workload;
use tailprof_format::timecode::put_paper16;
use tailprof_format::varint::{put_uleb, zigzag};
use tailprof_format::*;

const CHUNK: usize = 16 * 1024;

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
    let codecs: [(&str, Enc); 5] = [
        ("paper16", |d, b| d.iter().for_each(|&v| put_paper16(b, v))),
        ("leb128", |d, b| d.iter().for_each(|&v| put_uleb(b, v))),
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
    println!("\n== per-column bytes/sample after zstd-1 ({CHUNK}-sample chunks, each column compressed alone)");
    for w in workloads {
        let s = w.samples(1, n);
        let (mut t, mut ipt, mut ipi, mut th, mut cpu) = (0, 0, 0, 0, 0);
        for c in s.chunks(CHUNK) {
            let mut b = Vec::new();
            let mut prev = c[0].time;
            c.iter().for_each(|x| {
                put_uleb(&mut b, x.time - prev);
                prev = x.time;
            });
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
            put_column(&mut b, c.len(), |i| rank[&c[i].ip] as u64);
            ipi += zstd_len(&b, 1);
            let mut b = Vec::new();
            put_column(&mut b, c.len(), |i| c[i].tid as u64 - 1000);
            th += zstd_len(&b, 1);
            let mut b = Vec::new();
            put_column(&mut b, c.len(), |i| c[i].cpu as u64);
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
    let t0 = Instant::now();
    let mut w = TraceWriter::with_options(Vec::with_capacity(samples.len() * 4), &TraceHeader::default(), opts).unwrap();
    for (i, s) in samples.iter().enumerate() {
        w.write_sample(s).unwrap();
        if i % 256 == 255 {
            w.end_round().unwrap();
        }
    }
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    (bytes, t0.elapsed().as_nanos() as f64 / samples.len() as f64)
}

fn whole(workloads: &[Workload], n: usize) {
    println!("\n== whole trace, bytes/sample (default writer options unless noted)");
    for w in workloads {
        let s = w.samples(1, n);
        let mut line = format!("-- {:<32}", w.name());
        for (codec, level) in [(TimeCodec::Paper16, 1), (TimeCodec::Leb128, 1), (TimeCodec::Paper16, 3), (TimeCodec::Leb128, 3)] {
            let (b, _) = write(&s, WriterOptions { time_codec: codec, zstd_level: level, ..Default::default() });
            line += &format!("  {}/zstd{level} {:.3}", codec.name(), b.len() as f64 / n as f64);
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
            let t0 = Instant::now();
            let mut c = Count::default();
            r.read_all(&mut c).unwrap();
            best_all = best_all.min(t0.elapsed().as_secs_f64());
            assert_eq!(c.0, n as u64);
            let t0 = Instant::now();
            let mut k = 0u64;
            r.for_each_sample(&mut |s| k = k.wrapping_add(s.time)).unwrap();
            best_fe = best_fe.min(t0.elapsed().as_secs_f64());
            let t0 = Instant::now();
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
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let workloads = [
        Workload::CpuClock { period_ns: 10_000, threads: 4, ips: 3000 },
        Workload::REALISTIC,
        Workload::CpuClock { period_ns: 1_000_000, threads: 1, ips: 3000 },
        Workload::Uniform { ips: 3000 },
        Workload::Bursty { ips: 3000 },
    ];
    time_codecs(&workloads, n);
    columns(&workloads, n);
    whole(&workloads, n);
    speed(5_000_000);
}
