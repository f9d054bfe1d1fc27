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
use tailprof_format::synth::{StackWorkload, Workload};
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
            w.name(),
            f(t),
            f(ipt),
            f(ipi),
            f(th),
            f(cpu)
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
        for (codec, level) in [(TimeCodec::Paper16, 1), (TimeCodec::Leb128, 1), (TimeCodec::Planes, 1), (TimeCodec::Planes, 3)] {
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
            m(best_all),
            m(best_fe),
            best_sum * 1e3
        );
    }
}

/// Bytes of `b` after zstd -1 (as a blob would store it: never more than raw + 3).
fn blob_len(b: &[u8]) -> usize {
    if b.len() < 64 {
        b.len() + 2
    } else {
        zstd_len(b, 1).min(b.len()) + 4
    }
}

fn uleb_blob(vals: impl Iterator<Item = u64>) -> usize {
    let mut b = Vec::new();
    vals.for_each(|v| put_uleb(&mut b, v));
    blob_len(&b)
}

/// Stack encodings compared on one chunk's nodes: returns bytes of the node section
/// encoded as (A) frame table by use count, (B) DFS pop count + ip delta from the parent,
/// (C) id order + ip delta from the parent, (D, as written) frame table by address; then
/// the stack-ref column as written (stack list by use) and with raw local ids.
fn stack_chunk(table: &StackTable, ids: &[StackId]) -> [usize; 6] {
    let mut used = std::collections::BTreeSet::new();
    let mut counts = std::collections::HashMap::new();
    for &id in ids {
        *counts.entry(id).or_insert(0u32) += 1;
        let mut c = id;
        while !c.is_none() && used.insert(c) {
            c = table.parent(c);
        }
    }
    let nodes: Vec<StackId> = used.into_iter().collect();
    let local: std::collections::HashMap<StackId, u64> = nodes.iter().enumerate().map(|(i, &g)| (g, i as u64 + 1)).collect();
    let frame = |g: StackId| table.frame(g).unwrap();
    // A: frame table by use among nodes, parent distance, frame index.
    let mut fcount: std::collections::HashMap<Frame, u32> = std::collections::HashMap::new();
    nodes.iter().for_each(|&g| *fcount.entry(frame(g)).or_insert(0) += 1);
    let mut ft: Vec<(Frame, u32)> = fcount.into_iter().collect();
    ft.sort_by_key(|&(f, n)| (std::cmp::Reverse(n), f));
    let frank: std::collections::HashMap<Frame, u64> = ft.iter().enumerate().map(|(i, &(f, _))| (f, i as u64)).collect();
    let mut prev = 0u64;
    let a_ft = uleb_blob(ft.iter().map(|&(f, _)| {
        let d = zigzag(f.ip.wrapping_sub(prev) as i64);
        prev = f.ip;
        d
    })) + 4;
    let pdist = |i: usize, g: StackId| {
        let p = table.parent(g);
        if p.is_none() {
            0
        } else {
            i as u64 + 1 - local[&p]
        }
    };
    let a = a_ft + uleb_blob(nodes.iter().enumerate().map(|(i, &g)| pdist(i, g))) + uleb_blob(nodes.iter().map(|&g| frank[&frame(g)]));
    // B: DFS preorder, pop count, ip as zigzag delta from the parent's ip.
    let mut children: std::collections::BTreeMap<StackId, Vec<StackId>> = Default::default();
    nodes.iter().for_each(|&g| children.entry(table.parent(g)).or_default().push(g));
    let (mut pops, mut ipd) = (Vec::new(), Vec::new());
    let mut stack: Vec<(StackId, usize)> = vec![(StackId::NONE, 0)];
    let mut last_depth = 0usize;
    while let Some((g, depth)) = stack.pop() {
        if !g.is_none() {
            pops.push((last_depth + 1 - depth) as u64);
            let pip = table.frame(table.parent(g)).map_or(0, |f| f.ip);
            ipd.push(zigzag(frame(g).ip.wrapping_sub(pip) as i64));
            last_depth = depth;
        }
        if let Some(ch) = children.get(&g) {
            ch.iter().rev().for_each(|&c| stack.push((c, depth + 1)));
        }
    }
    let b = uleb_blob(pops.into_iter()) + uleb_blob(ipd.into_iter()) + 4;
    // C: id order, parent distance, ip delta from the parent's ip (no frame table).
    let c = uleb_blob(nodes.iter().enumerate().map(|(i, &g)| pdist(i, g)))
        + uleb_blob(nodes.iter().map(|&g| {
            let pip = table.frame(table.parent(g)).map_or(0, |f| f.ip);
            zigzag(frame(g).ip.wrapping_sub(pip) as i64)
        }))
        + 4;
    // D (as written): frame table sorted by ip (small deltas), index in ip order.
    let mut fs: Vec<Frame> = ft.iter().map(|&(f, _)| f).collect();
    fs.sort();
    let fpos: std::collections::HashMap<Frame, u64> = fs.iter().enumerate().map(|(i, &f)| (f, i as u64)).collect();
    let mut prev = 0u64;
    let d = uleb_blob(fs.iter().map(|f| {
        let d = f.ip.wrapping_sub(prev);
        prev = f.ip;
        d
    })) + 4
        + uleb_blob(nodes.iter().enumerate().map(|(i, &g)| pdist(i, g)))
        + uleb_blob(nodes.iter().map(|&g| fpos[&frame(g)]));
    // Stack list by use count + reference column, vs raw local ids.
    let mut sl: Vec<(StackId, u32)> = counts.into_iter().collect();
    sl.sort_by_key(|&(g, n)| (std::cmp::Reverse(n), g));
    let srank: std::collections::HashMap<StackId, u64> = sl.iter().enumerate().map(|(i, &(g, _))| (g, i as u64 + 1)).collect();
    let refs = uleb_blob(sl.iter().map(|&(g, _)| local[&g])) + uleb_blob(ids.iter().map(|g| srank[g]));
    let raw = uleb_blob(ids.iter().map(|g| local[g]));
    [a, b, c, d, refs, raw]
}

fn stacks(n: usize) {
    println!("\n== stacks: {n} samples of {} with call stacks", Workload::REALISTIC.name());
    for wl in [
        StackWorkload::REALISTIC,
        StackWorkload { leaf_ips: 16, ..StackWorkload::REALISTIC },
        StackWorkload { paths: 10_000, ..StackWorkload::REALISTIC },
    ] {
        let data = wl.samples(1, n);
        let encode = |with_stacks: bool| {
            let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default()).unwrap();
            let mut ids = Vec::with_capacity(data.len());
            for (i, (s, frames)) in data.iter().enumerate() {
                let mut s = s.clone();
                if with_stacks {
                    s.stack = w.intern_stack(frames);
                } else {
                    s.stack_status = StackStatus::None;
                }
                ids.push(s.stack);
                w.write_sample(&s).unwrap();
                if i % 256 == 255 {
                    w.end_round().unwrap();
                }
            }
            let table = w.stacks().clone();
            let (bytes, ws) = w.finish_into_inner(None).unwrap();
            (bytes, ws, table, ids)
        };
        let t0 = CpuTimer::start();
        let (with, ws, table, ids) = encode(true);
        let write_ns = t0.secs() * 1e9 / n as f64;
        let (without, _, _, _) = encode(false);
        let t0 = CpuTimer::start();
        let mut sink = StacksSink::default();
        let mut r = TraceReader::from_bytes(with.clone()).unwrap();
        r.read_all(&mut sink).unwrap();
        let read_rate = n as f64 / t0.secs() / 1e6;
        assert_eq!(sink.stacks.len(), table.len());
        let per = |b: usize| b as f64 / n as f64;
        let frames: usize = data.iter().map(|(_, f)| f.len()).sum();
        let depth = frames as f64 / n as f64;
        let stack_part = per(with.len()) - per(without.len());
        println!(
            "-- {} ({} nodes, mean depth {depth:.1}, {} chunks): {:.3} bytes/sample in all, {:.3} without stacks, stacks {stack_part:.3}",
            wl.name(),
            table.len(),
            ws.chunks,
            per(with.len()),
            per(without.len())
        );
        // perf.data: `-g` stores 8 bytes per frame (the callchain, plus PERF_CONTEXT_USER/
        // KERNEL markers) on top of a ~48-byte sample; `--call-graph dwarf` stores the
        // registers and an 8192-byte user stack copy (8 KB + ~200 bytes).
        let perf_fp = 48.0 + 8.0 * (depth + 2.0);
        let perf_dwarf = 48.0 + 8192.0 + 8.0 + 17.0 * 8.0 + 8.0;
        println!(
            "   vs perf -g ~{perf_fp:.0} bytes/sample: 1/{:.0};  vs perf --call-graph dwarf ~{perf_dwarf:.0}: 1/{:.0}",
            perf_fp / per(with.len()),
            perf_dwarf / per(with.len())
        );
        println!(
            "   write incl. intern_stack {write_ns:.0} ns/sample (one run); read_all into a StacksSink (records cloned) {read_rate:.1} M samples/s"
        );
        // Per-chunk encodings of the same nodes, chunks of the writer's round size.
        let mut tot = [0usize; 6];
        for c in ids.chunks(32 * 1024) {
            let r = stack_chunk(&table, c);
            tot.iter_mut().zip(r).for_each(|(t, v)| *t += v);
        }
        println!(
            "   node section per 32 Ki-sample chunk, bytes/sample: as written (frame table by address + parent distance + frame index) {:.3}; \
             frame table by use {:.3}; DFS pop-count + ip delta from parent {:.3}; id order + ip delta from parent {:.3}\n   \
             stack refs by use {:.3} (raw local ids {:.3})",
            per(tot[3]), per(tot[0]), per(tot[1]), per(tot[2]), per(tot[4]), per(tot[5])
        );
    }
}

fn main() {
    // Usage: format_measure [samples] [sections...]; sections: codes columns whole stacks speed.
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
    if want("stacks") {
        stacks(n);
    }
    if want("speed") {
        speed(5_000_000);
    }
}
