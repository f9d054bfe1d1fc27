//! Writes a synthetic trace of stack samples for the `report --folded` benchmark
//! (bench/stacks-folded.sh): `StackWorkload::REALISTIC` call paths (1000 distinct
//! stacks of depth 10–40, Zipf-distributed, 10 % ending in kernel frames, 2 % truncated),
//! 4 kHz cpu-clock timing on 3 threads of one process, no mappings (frames resolve to
//! `[unknown] 0x…` names, one per call site, which is the heavier case for folding).
//!
//! `cargo run --release -p tailprof-analyze --example stack_trace -- OUT.trace [SAMPLES]`
//! (default 5,000,000 samples).

use tailprof_format::synth::{Rng, StackWorkload};
use tailprof_format::{CpuMode, EventDesc, FrameKind, Record, Sample, StackStatus, TraceHeader, TraceWriter};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: stack_trace OUT.trace [SAMPLES]");
        std::process::exit(2);
    };
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    const PERIOD: u64 = 250_000;
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    };
    let mut w = match TraceWriter::create(out.as_ref(), &header) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("stack_trace: {e}");
            std::process::exit(1);
        }
    };
    let wl = StackWorkload::REALISTIC;
    let paths = wl.paths(42);
    let ids: Vec<_> = paths.iter().map(|p| w.intern_stack(p)).collect();
    let mut cdf = Vec::with_capacity(paths.len());
    let mut acc = 0.0;
    for r in 0..paths.len() {
        acc += 1.0 / (r as f64 + 1.0);
        cdf.push(acc);
    }
    let mut rng = Rng::new(7);
    let mut t = 1_000_000_000u64;
    for i in 0..n {
        t += PERIOD - 5_000 + rng.below(10_000);
        let u = rng.unit() * acc;
        let p = cdf.partition_point(|&c| c < u).min(paths.len() - 1);
        let leaf = paths[p][0];
        let s = Sample {
            time: t,
            pid: 4242,
            tid: 4242 + (i % 3) as u32,
            cpu: (i % 2) as u32,
            ip: leaf.ip,
            period: PERIOD,
            cpumode: if leaf.kind == FrameKind::Kernel { CpuMode::Kernel } else { CpuMode::User },
            stack: ids[p],
            stack_status: if rng.chance(0.02) { StackStatus::CopyExhausted } else { StackStatus::Complete },
            ..Default::default()
        };
        if let Err(e) = w.write(&Record::Sample(s)) {
            eprintln!("stack_trace: {e}");
            std::process::exit(1);
        }
    }
    match w.finish(Some(t - 1_000_000_000)) {
        Ok(_) => eprintln!("stack_trace: wrote {out}: {n} samples, {} distinct stacks", paths.len()),
        Err(e) => {
            eprintln!("stack_trace: {e}");
            std::process::exit(1);
        }
    }
}
