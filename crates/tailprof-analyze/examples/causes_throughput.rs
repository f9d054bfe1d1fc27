//! Throughput of the causes analysis (issue 21) on a synthetic trace held in memory: N
//! items (default 1M), one after another on 8 request threads of one process, each
//! handing work to one of 4 workers and waiting for it, as the recorder writes them:
//!
//! - begin marker, a sample of the request thread (a 4-frame stack), its wakeup of the
//!   worker, its blocked switch-out and the worker's switch-in, a worker sample, the
//!   worker's wakeup of the request thread, the worker's switch-out, the request's
//!   switch-in, a last sample, the end marker (12 records);
//! - every fourth item is also preempted by a hog of another process, seen through
//!   CPU-wide records with `next_prev` (4 more records).
//!
//! Prints, as medians of the repeats (default 3):
//! - `decode`: `read_all` into a sink that does nothing (the decoding floor);
//! - `stacks, no causes`: the stack pass ([`stack_profile`]) over the items' spans on the
//!   same trace with the header's `causes` removed (the analysis is off);
//! - `stacks + causes`: the same pass with causes (woken_by with the critical path,
//!   preempted_by, noise, migrations);
//!
//! and records per second of each (records in the trace / the thread's CPU time: the
//! analysis runs on one thread; CPU time, not wall time, on a shared machine).
//!
//! Run with
//! `cargo run --release -p tailprof-analyze --example causes_throughput [items] [repeats] [only]`
//! (pinned to one CPU: `taskset -c 1 target/release/examples/causes_throughput`). `only`
//! = `causes` runs only the pass with causes (to profile it, e.g. under `perf record`).

use std::time::Instant;

use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Mmap, Record, Sample, Sink, StackStatus, Switch, SwitchKind, TraceHeader,
    TraceReader, TraceWriter, Wakeup,
};

const PID: u32 = 1000;
const HOG: u32 = 2000;
const US: u64 = 1000;

struct Nothing;
impl Sink for Nothing {}

fn build(n: u64, causes: bool) -> (Vec<u8>, u64) {
    let mut header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(100 * US), ..Default::default() }],
        ..Default::default()
    };
    if causes {
        header.extra.insert("causes".into(), "sched_waking+cpu_switch".into());
    }
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.write(&Record::Mmap(Mmap {
        time: 0,
        pid: PID,
        tid: PID,
        start: 0x40_0000,
        len: 0x10_0000,
        pgoff: 0,
        path: "/nonexistent/server".into(),
        ..Default::default()
    }))
    .unwrap();
    let stack = |w: &mut TraceWriter<Vec<u8>>, leaf: u64| {
        w.intern_stack(&[Frame::user(0x40_0000 + leaf), Frame::user(0x40_1000), Frame::user(0x40_2000), Frame::user(0x40_3000)])
    };
    let req_stack = stack(&mut w, 0x100);
    let worker_stack = stack(&mut w, 0x200);
    let wake_stack = w.intern_stack(&[Frame::kernel(0xffff_ffff_8100_1000), Frame::user(0x40_0300)]);
    let mut records = 0u64;
    let mut put = |w: &mut TraceWriter<Vec<u8>>, r: Record| {
        w.write(&r).unwrap();
        records += 1;
    };
    let sample = |time: u64, tid: u32, stack| {
        Record::Sample(Sample {
            time,
            pid: PID,
            tid,
            ip: 0x40_0100,
            period: 100 * US,
            cpumode: CpuMode::User,
            stack,
            stack_status: StackStatus::Unknown,
            ..Default::default()
        })
    };
    let sw = |time: u64, pid: u32, tid: u32, cpu: u32, kind: SwitchKind, next_prev: Option<(u32, u32)>| {
        Record::Switch(Switch { time, pid, tid, cpu, kind, next_prev, ..Default::default() })
    };
    let marker = |time: u64, tid: u32, kind: MarkerKind, item: u64| {
        Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Api })
    };
    for k in 0..n {
        let t = 10 * US + k * 1000 * US;
        let req = PID + 1 + (k % 8) as u32;
        let worker = PID + 100 + (k % 4) as u32;
        let cpu = (k % 2) as u32;
        put(&mut w, marker(t, req, MarkerKind::Begin, k + 1));
        put(&mut w, sample(t + 10 * US, req, req_stack));
        put(
            &mut w,
            Record::Wakeup(Wakeup {
                time: t + 20 * US,
                pid: PID,
                tid: req,
                cpu,
                wakee_tid: worker,
                stack: wake_stack,
                stack_status: StackStatus::Unknown,
            }),
        );
        put(&mut w, sw(t + 30 * US, PID, req, cpu, SwitchKind::OutBlocked, None));
        put(&mut w, sw(t + 30 * US, PID, worker, cpu, SwitchKind::In, None));
        put(&mut w, sample(t + 130 * US, worker, worker_stack));
        put(
            &mut w,
            Record::Wakeup(Wakeup {
                time: t + 400 * US,
                pid: PID,
                tid: worker,
                cpu,
                wakee_tid: req,
                stack: wake_stack,
                stack_status: StackStatus::Unknown,
            }),
        );
        put(&mut w, sw(t + 410 * US, PID, worker, cpu, SwitchKind::OutBlocked, None));
        put(&mut w, sw(t + 420 * US, PID, req, cpu, SwitchKind::In, None));
        if k % 4 == 0 {
            put(&mut w, sw(t + 500 * US, PID, req, cpu, SwitchKind::OutPreempted, None));
            put(&mut w, sw(t + 500 * US, HOG, HOG, cpu, SwitchKind::In, Some((PID, req))));
            put(&mut w, sw(t + 700 * US, HOG, HOG, cpu, SwitchKind::OutPreempted, Some((PID, req))));
            put(&mut w, sw(t + 700 * US, PID, req, cpu, SwitchKind::In, None));
        }
        put(&mut w, sample(t + 800 * US, req, req_stack));
        put(&mut w, marker(t + 900 * US, req, MarkerKind::End, k + 1));
    }
    (w.finish_into_inner(None).unwrap().0, records)
}

/// This thread's CPU time, s (the machine may be shared: wall time would count others').
fn cpu_s() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the timespec given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let repeats: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let only_causes = args.next().is_some_and(|a| a == "causes");
    let t0 = Instant::now();
    let (with, records) = build(n, true);
    let (without, _) = build(n, false);
    eprintln!(
        "{n} items, {records} records, {:.1} MiB trace, built in {:.1} s",
        with.len() as f64 / (1 << 20) as f64,
        t0.elapsed().as_secs_f64()
    );
    let mut sym = Symbolizer::default();
    let items = items_report(&mut TraceReader::from_bytes(with.clone()).unwrap(), &ItemsOptions::default(), &mut sym).unwrap();
    assert_eq!(items.items.len() as u64, n);
    let spans = ItemSpan::from_rows(&items.items);
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
    let (mut decode, mut plain, mut causes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        if only_causes {
            let mut r = TraceReader::from_bytes(with.clone()).unwrap();
            let t = cpu_s();
            let p = stack_profile(&mut r, &opts, spans.clone(), &mut sym).unwrap();
            causes.push(cpu_s() - t);
            assert_eq!(p.causes.len() as u64, n);
            continue;
        }
        let mut r = TraceReader::from_bytes(with.clone()).unwrap();
        let t = cpu_s();
        r.read_all(&mut Nothing).unwrap();
        decode.push(cpu_s() - t);

        let mut r = TraceReader::from_bytes(without.clone()).unwrap();
        let t = cpu_s();
        let p = stack_profile(&mut r, &opts, spans.clone(), &mut sym).unwrap();
        plain.push(cpu_s() - t);
        assert!(p.causes.is_empty());

        let mut r = TraceReader::from_bytes(with.clone()).unwrap();
        let t = cpu_s();
        let p = stack_profile(&mut r, &opts, spans.clone(), &mut sym).unwrap();
        causes.push(cpu_s() - t);
        // Every item was woken by its worker; every fourth ran behind the hog.
        assert_eq!(p.causes.len() as u64, n);
        assert_eq!(p.causes.iter().filter(|c| !c.preempted_by.is_empty()).count() as u64, n.div_ceil(4));
        assert!(p.causes.iter().all(|c| c.woken_by.first().is_some_and(|w| w.ns == 370 * US)));
    }
    for (name, v) in [("decode", decode), ("stacks, no causes", plain), ("stacks + causes", causes)] {
        if v.is_empty() {
            continue;
        }
        let s = median(v);
        println!("{name:<20} {s:>7.3} s  {:>6.2} M records/s", records as f64 / s / 1e6);
    }
}
