//! Replays synthetic raw perf sample records through the recorder's write path, round by
//! round as the recorder does: drain (plain samples decoded into the queue, anything else
//! queued as raw bytes) -> k-way merge -> write (a raw record decoded first) ->
//! TraceWriter, and prints the CPU cost per record. Deterministic, so it also runs under
//! `valgrind --tool=callgrind`.
//!
//!   cargo run --release -p tailprof-collect --example replay_rounds -- [records] [round_ms] [period_ns] [ips] [zstd_level] [layout]
//!
//! `layout`: `56` (default: `IDENTIFIER IP TID TIME CPU PERIOD`, 56-byte records) or `40`
//! (`IDENTIFIER IP TID TIME`, 40-byte records: the CPU is the ring's, the period the
//! event's fixed one). `raw56` / `raw40`: the same records, every one decoded at write
//! time (the path before plain samples). With `REPLAY_OUT=FILE` the trace is written to
//! FILE (to compare the bytes of two builds), else to `io::sink`. `REPLAY_EVENTS=3`: the
//! decoder `record -a` has (three events, samples told apart by their IDENTIFIER).

use std::time::Instant;
use tailprof_collect::parse::{sample_type as st, Decoded, Decoder, Layout};
use tailprof_collect::ring::RoundQueue;
use tailprof_format::synth::Workload;
use tailprof_format::{Sample, TraceHeader, TraceWriter, WriterOptions};

fn raw(s: &Sample, cpu_period: bool, id: u64) -> Vec<u8> {
    let size: u16 = if cpu_period { 56 } else { 40 };
    let mut r = Vec::with_capacity(size as usize);
    r.extend_from_slice(&9u32.to_ne_bytes());
    r.extend_from_slice(&(if s.cpumode as u8 == 1 { 1u16 } else { 2u16 }).to_ne_bytes());
    r.extend_from_slice(&size.to_ne_bytes());
    r.extend_from_slice(&id.to_ne_bytes()); // IDENTIFIER
    r.extend_from_slice(&s.ip.to_ne_bytes());
    r.extend_from_slice(&s.pid.to_ne_bytes());
    r.extend_from_slice(&s.tid.to_ne_bytes());
    r.extend_from_slice(&s.time.to_ne_bytes());
    if cpu_period {
        r.extend_from_slice(&s.cpu.to_ne_bytes());
        r.extend_from_slice(&0u32.to_ne_bytes());
        r.extend_from_slice(&s.period.to_ne_bytes());
    }
    r
}

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let num = |i: usize, d: u64| arg(i).map_or(d, |s| s.parse().expect("a number"));
    let n = num(1, 1_000_000) as usize;
    let round_ns = num(2, 100) * 1_000_000;
    let period = num(3, 10_000);
    let ips = num(4, 300) as u32;
    let level = arg(5).map_or(WriterOptions::default().zstd_level, |s| s.parse().expect("a zstd level"));
    let layout = arg(6).unwrap_or_else(|| "56".into());
    let (cpu_period, plain) = match layout.as_str() {
        "56" => (true, true),
        "40" => (false, true),
        "raw56" => (true, false),
        "raw40" => (false, false),
        other => panic!("layout {other}: 56, 40, raw56 or raw40"),
    };
    let samples = Workload::CpuClock { period_ns: period, threads: 3, ips }.samples(1, n);
    // REPLAY_EVENTS=3: the decoder of `record -a` (the sampling event, and the context-switch
    // and sched_switch events prepared for the first marker), so samples are told apart
    // by their IDENTIFIER, one kernel id per CPU and event.
    let events: u64 = std::env::var("REPLAY_EVENTS").map_or(1, |v| v.parse().expect("a number of events"));
    let id = |cpu: u32, ev: u64| if events > 1 { 100 + 3 * u64::from(cpu) + ev } else { 7 };
    let recs: Vec<(u64, u32, Vec<u8>)> = samples.iter().map(|s| (s.time, s.cpu, raw(s, cpu_period, id(s.cpu, 0)))).collect();
    let mut sample_type = st::IDENTIFIER | st::IP | st::TID | st::TIME;
    if cpu_period {
        sample_type |= st::CPU | st::PERIOD;
    }
    let layout = Layout { sample_type, sample_id_all: true, default_period: period, ..Layout::default() };
    let mut layouts = vec![layout];
    for ev in 1..events {
        let t = if ev == 1 {
            st::IDENTIFIER | st::TID | st::TIME
        } else {
            st::IDENTIFIER | st::IP | st::TID | st::TIME | st::CALLCHAIN | st::RAW
        };
        layouts.push(Layout { sample_type: t, sample_id_all: true, ..Layout::default() });
    }
    let mut dec = Decoder::new(layouts);
    for cpu in 0..64 {
        for ev in 0..events {
            dec.add_id(id(cpu, ev), ev as u16);
        }
    }
    if !plain {
        for ev in 0..events {
            dec.keep_raw(ev as u16);
        }
    }
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
    let sink: Box<dyn std::io::Write> = match std::env::var_os("REPLAY_OUT") {
        Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p).expect("REPLAY_OUT file"))),
        None => Box::new(std::io::sink()),
    };
    let mut w = TraceWriter::with_options(sink, &TraceHeader::default(), opts).unwrap();
    let mut q = RoundQueue::new();
    let (mut s, mut plain) = (Sample::default(), Sample::default());
    let mut i = 0;
    let mut prev_start = 0u64;
    let mut t = recs[0].0;
    let mut written = 0u64;
    while i < recs.len() {
        t += round_ns;
        // Drain: per CPU, ring order (= time order here).
        while i < recs.len() && recs[i].0 <= t {
            let (_, cpu, r) = &recs[i];
            match dec.plain(r, *cpu) {
                Some(ps) => q.push_plain(*cpu, &ps),
                None => {
                    let p = dec.peek(r).unwrap();
                    q.push(p.time, p.event, *cpu, r);
                }
            }
            i += 1;
        }
        let limit = prev_start.min(t.saturating_sub(20_000_000));
        let last = i == recs.len();
        while q
            .emit_some::<()>(if last { None } else { Some(limit) }, 4096, |p, r| {
                match p.plain() {
                    Some(ps) => {
                        ps.fill(&mut plain);
                        w.write_sample(&plain).unwrap();
                    }
                    None => match dec.decode(r, p.event(), p.cpu, &mut s) {
                        Ok(Decoded::Sample) => w.write_sample(&s).unwrap(),
                        _ => panic!(),
                    },
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
