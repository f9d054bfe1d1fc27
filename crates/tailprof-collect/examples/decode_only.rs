//! Decode-only micro benchmark: `Decoder::peek` + `Decoder::decode` over synthetic raw
//! sample records held in one buffer, for the fixed-field layouts (the fixed-offset path,
//! `tailprof_perf_abi::BasicLayout`: the 56-byte `IDENTIFIER IP TID TIME CPU PERIOD` and
//! the recorder's default, the 40-byte `IDENTIFIER IP TID TIME`) and for a layout that
//! takes the general path (ADDR, CALLCHAIN, REGS_USER, WEIGHT, DATA_SRC). Prints the best
//! of `reps` passes in ns per record. Then the recorder's drain-time path for plain
//! samples, `Decoder::plain`, on the same two fixed layouts. Deterministic, so it also runs
//! under `valgrind --tool=callgrind` (`--toggle-collect='decode_only::run*'`: instructions
//! / (records per pass × 200) per case run).
//!
//!   cargo run --release -p tailprof-collect --example decode_only -- [records per pass] [reps] [1 = fixed layouts only, 2 = general only, 3 = plain only] [56 | 40: that fixed layout only]

use std::hint::black_box;
use std::time::Instant;
use tailprof_collect::attr::BASE_SAMPLE_TYPE;
use tailprof_collect::parse::{sample_type as st, Decoded, Decoder, Layout};
use tailprof_format::Sample;

/// Raw records: header + the words, size filled in.
fn record(misc: u16, words: &[u64]) -> Vec<u8> {
    let size = 8 + 8 * words.len();
    let mut r = Vec::with_capacity(size);
    r.extend_from_slice(&9u32.to_ne_bytes());
    r.extend_from_slice(&misc.to_ne_bytes());
    r.extend_from_slice(&(size as u16).to_ne_bytes());
    for w in words {
        r.extend_from_slice(&w.to_ne_bytes());
    }
    r
}

fn pair(a: u32, b: u32) -> u64 {
    let mut x = [0u8; 8];
    x[..4].copy_from_slice(&a.to_ne_bytes());
    x[4..].copy_from_slice(&b.to_ne_bytes());
    u64::from_ne_bytes(x)
}

/// Passes over the record buffer per timed repetition (the buffer stays in cache, as the
/// part of a ring drained in one go does).
const ROUNDS: usize = 200;

fn run(name: &str, dec: &Decoder, recs: &[(usize, usize)], buf: &[u8], reps: usize) {
    let mut s = Sample::default();
    let mut best = f64::INFINITY;
    let mut sum = 0u64;
    for _ in 0..reps {
        let t0 = Instant::now();
        for k in 0..ROUNDS {
            let _ = k;
            for &(at, len) in recs {
                let r = black_box(&buf[at..at + len]);
                let p = dec.peek(r).unwrap();
                match dec.decode(r, p.event, 3, &mut s) {
                    Ok(Decoded::Sample) => {}
                    other => panic!("{other:?}"),
                }
                sum = sum.wrapping_add(s.ip ^ s.time ^ s.period ^ u64::from(s.tid) ^ s.regs.len() as u64);
            }
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / (ROUNDS * recs.len()) as f64);
    }
    println!("{name}: {best:.2} ns/record (best of {reps}, {} x {ROUNDS} records, checksum {sum:x})", recs.len());
}

/// `Decoder::plain` over the records: what the recorder does per plain sample it drains.
fn run_plain(name: &str, dec: &Decoder, recs: &[(usize, usize)], buf: &[u8], reps: usize) {
    let mut best = f64::INFINITY;
    let mut sum = 0u64;
    for _ in 0..reps {
        let t0 = Instant::now();
        for _ in 0..ROUNDS {
            for &(at, len) in recs {
                let r = black_box(&buf[at..at + len]);
                let s = dec.plain(r, 3).expect("a plain sample");
                sum = sum.wrapping_add(s.ip ^ s.time ^ s.period ^ u64::from(s.tid) ^ u64::from(s.cpu));
            }
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / (ROUNDS * recs.len()) as f64);
    }
    println!("{name}: {best:.2} ns/record (best of {reps}, {} x {ROUNDS} records, checksum {sum:x})", recs.len());
}

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().unwrap()).collect();
    let n = a.first().copied().unwrap_or(8192);
    let reps = a.get(1).copied().unwrap_or(5);
    // 1: fixed layouts only, 2: general path only, 3: plain only, otherwise all.
    let which = a.get(2).copied().unwrap_or(0);
    let fixed = a.get(3).copied().unwrap_or(0);
    let (with56, with40) = (fixed != 40, fixed != 56);

    // The full fixed layout: IDENTIFIER IP TID TIME CPU PERIOD (the recorder's default
    // before issue 9; it now requests neither CPU nor, at a fixed period, PERIOD).
    let layout =
        Layout { sample_type: BASE_SAMPLE_TYPE | st::CPU | st::PERIOD, sample_id_all: true, default_period: 10_000, ..Layout::default() };
    let mut dec = Decoder::new(vec![layout]);
    dec.add_id(7, 0);
    let mut buf = Vec::new();
    let mut recs = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let r = record(
            if i % 3 == 0 { 1 } else { 2 },
            &[7, 0x40_1000 + (i * 37) % 4096, pair(100, 100 + (i % 3) as u32), 1_000_000 + i * 10_000, pair((i % 2) as u32, 0), 10_000],
        );
        recs.push((buf.len(), r.len()));
        buf.extend_from_slice(&r);
    }
    // The 40-byte layout, the recorder's default: the same records without CPU and PERIOD.
    let layout40 = Layout { sample_type: BASE_SAMPLE_TYPE, sample_id_all: true, default_period: 10_000, ..Layout::default() };
    let mut dec40 = Decoder::new(vec![layout40]);
    dec40.add_id(7, 0);
    let mut buf40 = Vec::new();
    let mut recs40 = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let r = record(
            if i % 3 == 0 { 1 } else { 2 },
            &[7, 0x40_1000 + (i * 37) % 4096, pair(100, 100 + (i % 3) as u32), 1_000_000 + i * 10_000],
        );
        recs40.push((buf40.len(), r.len()));
        buf40.extend_from_slice(&r);
    }
    if which == 0 || which == 1 {
        if with56 {
            run("56-byte layout (fixed offsets)", &dec, &recs, &buf, reps);
        }
        if with40 {
            run("40-byte layout (fixed offsets)", &dec40, &recs40, &buf40, reps);
        }
    }
    if which == 0 || which == 3 {
        if with56 {
            run_plain("plain, 56-byte layout", &dec, &recs, &buf, reps);
        }
        if with40 {
            run_plain("plain, 40-byte layout", &dec40, &recs40, &buf40, reps);
        }
    }

    // General path: IP TID TIME ADDR CPU PERIOD CALLCHAIN REGS_USER WEIGHT DATA_SRC.
    let t = st::IP | st::TID | st::TIME | st::ADDR | st::CPU | st::PERIOD | st::CALLCHAIN | st::REGS_USER | st::WEIGHT | st::DATA_SRC;
    let layout = Layout { sample_type: t, regs_user_mask: 0b111, sample_id_all: true, ..Layout::default() };
    let dec = Decoder::new(vec![layout]);
    let mut buf = Vec::new();
    let mut recs = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let r = record(
            2,
            &[
                0x40_1000 + (i * 37) % 4096,
                pair(100, 101),
                1_000_000 + i * 10_000,
                0xdead_0000 + i,
                pair(1, 0),
                10_000,
                4,
                u64::MAX - 511,
                0x40_2000,
                0x40_3000,
                0x40_4000,
                2,
                i,
                i + 1,
                i + 2,
                i % 500,
                0x6800_0142,
            ],
        );
        recs.push((buf.len(), r.len()));
        buf.extend_from_slice(&r);
    }
    if which == 0 || which == 2 {
        run("general path (callchain, regs, weight, data_src)", &dec, &recs, &buf, reps);
    }
}
