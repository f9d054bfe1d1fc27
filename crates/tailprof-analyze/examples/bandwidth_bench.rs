//! Throughput of `tailprof bandwidth` on a 10 M-sample trace (docs/BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release -p tailprof-analyze --example bandwidth_bench [SAMPLES_MILLIONS] [REPS]
//! ```
//!
//! With `BANDWIDTH_BENCH_TRACE=FILE` the trace is also written to FILE, for timing the
//! `tailprof bandwidth FILE` command itself.
//!
//! Generates a synthetic PEBS recording (8 CPUs, period 1009, alternating 5 and 25 GB/s
//! phases of 100 ms, with a counting sibling and items) of about 10 M samples, then times,
//! best of REPS on one thread:
//!
//! 1. **binning**: the samples, already decoded in memory, fed to the bandwidth builder
//!    and the report finished (bins, intervals, summary, bursts, loss model) — the
//!    analysis itself;
//! 2. **decode only**: reading the trace file image and decoding every record (no analysis);
//! 3. **end to end**: `bandwidth_report` on the trace file image, as `tailprof bandwidth`
//!    runs it (decode + binning + items join), and without the items join (`--no-items`).

use std::time::Instant;

use tailprof_analyze::bandwidth::synth::{generate_with, header, trace_bytes, Phase, SynthConfig};
use tailprof_analyze::bandwidth::{bandwidth_report, BandwidthBuilder, BandwidthOptions};
use tailprof_format::{Record, Sink, TraceReader};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let millions: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    // About 45.5 k samples per repetition of the two phases.
    let repeat = ((millions * 1e6) / 45_000.0).ceil() as u32;
    let cfg = SynthConfig {
        phases: vec![Phase { duration_ns: 100_000_000, gbps: 5.0 }, Phase { duration_ns: 100_000_000, gbps: 25.0 }],
        repeat,
        cpus: 8,
        period: 1009,
        loss_per_activation: 20,
        counter: true,
        items: true,
        seed: 42,
        ..Default::default()
    };
    let t = Instant::now();
    let mut records: Vec<Record> = Vec::new();
    let truth = generate_with(&cfg, &mut |r| records.push(r));
    let h = header(&cfg);
    let samples = records.iter().filter(|r| matches!(r, Record::Sample(s) if s.event == 0)).count();
    eprintln!("generated {samples} samples ({} records) in {:.1} s", records.len(), t.elapsed().as_secs_f64());
    let opts = BandwidthOptions::default();

    let mut best_bin = f64::INFINITY;
    let mut best_feed = f64::INFINITY;
    let mut bins = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut b = BandwidthBuilder::new(&h, &opts).unwrap();
        for r in &records {
            b.handle_record(r);
        }
        best_feed = best_feed.min(t.elapsed().as_secs_f64());
        let r = b.finish().unwrap();
        best_bin = best_bin.min(t.elapsed().as_secs_f64());
        bins = r.bins.len();
        assert_eq!(r.samples as usize, samples);
    }
    drop(records);

    let t = Instant::now();
    let (bytes, _) = trace_bytes(&cfg).unwrap();
    eprintln!("trace image: {} MB, written in {:.1} s", bytes.len() / 1_000_000, t.elapsed().as_secs_f64());
    if let Some(path) = std::env::var_os("BANDWIDTH_BENCH_TRACE") {
        std::fs::write(&path, &bytes).expect("writing BANDWIDTH_BENCH_TRACE");
        eprintln!("wrote {}", std::path::Path::new(&path).display());
    }
    let mut best_decode = f64::INFINITY;
    let mut best_e2e = f64::INFINITY;
    let mut best_e2e_plain = f64::INFINITY;
    for _ in 0..reps {
        let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        let mut n = 0u64;
        reader.for_each_sample(&mut |_| n += 1).unwrap();
        best_decode = best_decode.min(t.elapsed().as_secs_f64());
        let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        let r = bandwidth_report(&mut reader, &BandwidthOptions { items: true, ..Default::default() }).unwrap();
        best_e2e = best_e2e.min(t.elapsed().as_secs_f64());
        assert_eq!(r.samples as usize, samples);
        assert!(r.loss.l > 15.0 && r.loss.l < 25.0, "l = {}", r.loss.l);
        let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        let r = bandwidth_report(&mut reader, &BandwidthOptions::default()).unwrap();
        best_e2e_plain = best_e2e_plain.min(t.elapsed().as_secs_f64());
        assert_eq!(r.samples as usize, samples);
    }
    let m = samples as f64 / 1e6;
    println!(
        "samples            {samples} ({} bins of 100 µs, {:.1} s of trace, true l = {})",
        bins,
        (truth.end() - truth.start()) as f64 / 1e9,
        truth.l
    );
    println!(
        "binning            {:.3} s  {:.1} M samples/s  (of which the per-sample pass {:.3} s: {:.1} M samples/s)",
        best_bin,
        m / best_bin,
        best_feed,
        m / best_feed
    );
    println!("decode only        {:.3} s  {:.1} M samples/s", best_decode, m / best_decode);
    println!(
        "end to end (file)  {:.3} s  {:.1} M samples/s  (--no-items: {:.3} s, {:.1} M samples/s)",
        best_e2e,
        m / best_e2e,
        best_e2e_plain,
        m / best_e2e_plain
    );
}
