//! Replays synthetic raw perf sample records through the recorder's write path
//! (RoundQueue push -> k-way merge -> decode -> TraceWriter into io::sink), round by
//! round as the recorder does, and prints the CPU cost per record. Deterministic, so
//! it also runs under `valgrind --tool=callgrind`.
//!
//!   cargo run --release -p tailprof-collect --example replay_rounds -- [records] [round_ms] [period_ns] [ips] [zstd_level]

use std::time::Instant;
use tailprof_collect::attr::BASE_SAMPLE_TYPE;
use tailprof_collect::parse::{Decoded, Decoder, Layout};
use tailprof_collect::ring::RoundQueue;
use tailprof_format::synth::Workload;
use tailprof_format::{Sample, TraceHeader, TraceWriter, WriterOptions};

fn raw(s: &Sample) -> Vec<u8> {
    let mut r = Vec::with_capacity(56);
    r.extend_from_slice(&9u32.to_ne_bytes());
    r.extend_from_slice(&(if s.cpumode as u8 == 1 { 1u16 } else { 2u16 }).to_ne_bytes());
    r.extend_from_slice(&56u16.to_ne_bytes());
    r.extend_from_slice(&7u64.to_ne_bytes()); // IDENTIFIER
    r.extend_from_slice(&s.ip.to_ne_bytes());
    r.extend_from_slice(&s.pid.to_ne_bytes());
    r.extend_from_slice(&s.tid.to_ne_bytes());
    r.extend_from_slice(&s.time.to_ne_bytes());
    r.extend_from_slice(&s.cpu.to_ne_bytes());
    r.extend_from_slice(&0u32.to_ne_bytes());
    r.extend_from_slice(&s.period.to_ne_bytes());
    r
}

fn main() {
    let a: Vec<u64> = std::env::args().skip(1).take(4).map(|s| s.parse().unwrap()).collect();
    let n = *a.first().unwrap_or(&1_000_000) as usize;
    let round_ns = a.get(1).copied().unwrap_or(100) * 1_000_000;
    let period = a.get(2).copied().unwrap_or(10_000);
    let ips = a.get(3).copied().unwrap_or(300) as u32;
    let level = std::env::args().nth(5).map_or(WriterOptions::default().zstd_level, |s| s.parse().unwrap());
    let samples = Workload::CpuClock { period_ns: period, threads: 3, ips }.samples(1, n);
    let recs: Vec<(u64, u32, Vec<u8>)> = samples.iter().map(|s| (s.time, s.cpu, raw(s))).collect();
    let layout = Layout {
        sample_type: BASE_SAMPLE_TYPE,
        sample_id_all: true,
        default_period: period,
        ..Layout::default()
    };
    let mut dec = Decoder::new(vec![layout]);
    dec.add_id(7, 0);
    let opts = WriterOptions { zstd_level: level, ..WriterOptions::default() };
    let t0 = Instant::now();
    let (written, bytes) = replay(&recs, round_ns, &dec, opts);
    let dt = t0.elapsed();
    eprintln!(
        "{written} records, {bytes} bytes ({:.3} B/record), {:.1} ns/record (round {} ms, period {period} ns)",
        bytes as f64 / written as f64,
        dt.as_nanos() as f64 / written as f64,
        round_ns / 1_000_000
    );
}

/// The recorder's part: queue, merge, decode, write. Returns (records, bytes written).
#[inline(never)]
fn replay(recs: &[(u64, u32, Vec<u8>)], round_ns: u64, dec: &Decoder, opts: WriterOptions) -> (u64, u64) {
    let mut w = TraceWriter::with_options(std::io::sink(), &TraceHeader::default(), opts).unwrap();
    let mut q = RoundQueue::new();
    let mut s = Sample::default();
    let mut i = 0;
    let mut prev_start = 0u64;
    let mut t = recs[0].0;
    let mut written = 0u64;
    while i < recs.len() {
        t += round_ns;
        // Drain: per CPU, ring order (= time order here).
        while i < recs.len() && recs[i].0 <= t {
            let (_, cpu, r) = &recs[i];
            let p = dec.peek(r).unwrap();
            q.push(p.time, p.event, *cpu, r);
            i += 1;
        }
        let limit = prev_start.min(t.saturating_sub(20_000_000));
        let last = i == recs.len();
        while q
            .emit_some::<()>(if last { None } else { Some(limit) }, 4096, |p, r| {
                match dec.decode(r, p.event(), p.cpu, &mut s) {
                    Ok(Decoded::Sample) => w.write_sample(&s).unwrap(),
                    _ => panic!(),
                }
                written += 1;
                Ok(())
            })
            .unwrap()
        {}
        w.end_round().unwrap();
        prev_start = t;
    }
    let (_, sum) = w.finish_into_inner(None).unwrap();
    (written, sum.bytes)
}
