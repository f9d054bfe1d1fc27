//! Throughput of the per-item join (`items_report`) on a synthetic trace held in memory:
//! N samples (default 10M) of cpu-clock at 10 µs on 4 threads, 100 samples per item
//! (100k items for 10M samples) delimited by begin/end markers, 3000 distinct IPs in
//! one binary, 1% of samples outside any item.
//!
//! Prints, side by side and as medians of the repeats (default 5):
//! - `decode`: `read_all` into a sink that does nothing (the trace-decoding floor);
//! - `join`: `read_all` into [`ItemsJoin`] (decode + join, no symbolization);
//! - `items_report`: the whole call (decode + join + symbolization of the unique
//!   locations, here of a binary that is not on disk, + estimates + anomaly flagging).
//!
//! Run with
//! `cargo run --release -p tailprof-analyze --example join_throughput [samples] [repeats]`.

use std::time::Instant;

use tailprof_analyze::items::{items_report, ItemsJoin, ItemsOptions};
use tailprof_analyze::Symbolizer;
use tailprof_format::synth::Rng;
use tailprof_format::{
    CpuMode, EventDesc, Marker, MarkerKind, MarkerSource, Mmap, Record, Sample, Sink, TraceHeader, TraceReader, TraceWriter,
};

const THREADS: u32 = 4;
const PER_ITEM: u64 = 100;
const PERIOD: u64 = 10_000;

struct Nothing;
impl Sink for Nothing {}

fn build(n: u64) -> (Vec<u8>, u64) {
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.write(&Record::Mmap(Mmap {
        pid: 1,
        tid: 1,
        start: 0x40_0000,
        len: 0x10_0000,
        cpumode: CpuMode::User,
        path: "/nonexistent/server".into(),
        ..Default::default()
    }))
    .unwrap();
    let mut rng = Rng::new(7);
    let mut next_id = 1u64;
    let mut open: Vec<Option<u64>> = vec![None; THREADS as usize];
    let mut count = vec![0u64; THREADS as usize];
    let mut items = 0;
    let marker = |time, tid, kind, item| {
        Record::Marker(Marker { time, pid: 1, tid, kind, item, class: 1 + (item % 4) as u32, source: MarkerSource::Api })
    };
    for i in 0..n {
        let t = 1_000_000 + i * (PERIOD / THREADS as u64);
        let th = (i % THREADS as u64) as usize;
        let tid = 10 + th as u32;
        // Per thread, cycles of 101 samples: 1 outside any item, then an item of 100.
        let pos = count[th] % (PER_ITEM + 1);
        if pos == 1 {
            w.write(&marker(t, tid, MarkerKind::Begin, next_id)).unwrap();
            open[th] = Some(next_id);
            next_id += 1;
            items += 1;
        }
        // Log-uniform over 3000 addresses: a few are hot.
        let rank = (3000f64.powf(rng.unit()) as u64).saturating_sub(1);
        let ip = 0x40_0000 + (rank * 97 % 0x10_0000);
        w.write_sample(&Sample { time: t, pid: 1, tid, ip, period: PERIOD, cpumode: CpuMode::User, ..Default::default() }).unwrap();
        count[th] += 1;
        if pos == PER_ITEM {
            if let Some(id) = open[th].take() {
                w.write(&marker(t + 1, tid, MarkerKind::End, id)).unwrap();
            }
        }
        if i % 32_768 == 0 {
            w.end_round().unwrap();
        }
    }
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    (bytes, items)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10_000_000);
    let repeats: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let t = Instant::now();
    let (bytes, items) = build(n);
    println!(
        "trace: {n} samples, {items} items, {THREADS} threads, {:.1} MB, built in {:.2} s",
        bytes.len() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let opts = ItemsOptions::default();
    let (mut decode, mut join, mut full) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..repeats {
        let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        r.read_all(&mut Nothing).unwrap();
        decode.push(t.elapsed().as_secs_f64());

        let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        let mut j = ItemsJoin::new(r.header(), &opts).unwrap();
        r.read_all(&mut j).unwrap();
        join.push(t.elapsed().as_secs_f64());
        drop(j);

        let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
        let t = Instant::now();
        let rep = items_report(&mut r, &opts, &mut Symbolizer::default()).unwrap();
        full.push(t.elapsed().as_secs_f64());
        last = Some(rep);
    }
    let rep = last.unwrap();
    let msps = |s: f64| n as f64 / s / 1e6;
    let (d, j, f) = (median(decode), median(join), median(full));
    println!("medians of {repeats} runs (M samples/s = samples / wall time on one core):");
    println!("  decode only (read_all, no-op sink)  {d:.3} s  {:6.1} M samples/s", msps(d));
    println!("  decode + join (no symbolization)    {j:.3} s  {:6.1} M samples/s", msps(j));
    println!("  items_report (everything)           {f:.3} s  {:6.1} M samples/s", msps(f));
    println!("  join alone (decode+join - decode)   {:.3} s  {:6.1} M samples/s", j - d, msps((j - d).max(1e-9)));
    println!(
        "report: {} items, {} outside samples, {} anomalous, {} functions in item 0",
        rep.items.len(),
        rep.outside_samples,
        rep.items.iter().filter(|i| i.anomalous).count(),
        rep.items[0].functions.len()
    );
}
