//! The causes analysis (issue 21) on a synthetic trace written with `TraceWriter`, as the
//! recorder writes it: a request thread waits for a worker that runs 13 ms, is preempted
//! 2 ms, then wakes it; a second request is preempted by a hog of another process, seen
//! through CPU-wide switch records. Every time is exact, so the expected values are too.

use tailprof_analyze::causes::{explain_causes, interference, IrqKind, PathState};
use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::stack_explain::explain_stacks;
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions, StackProfile};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    Comm, CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Record, Sample, StackStatus,
    Switch, SwitchKind, TraceHeader, TraceReader, TraceWriter, Wakeup,
};

const PID: u32 = 100;
const REQ: u32 = 100;
const WORKER: u32 = 101;
const HOG: u32 = 200;
const MS: u64 = 1_000_000;

fn header(causes: Option<&str>) -> TraceHeader {
    let mut h = TraceHeader {
        events: vec![EventDesc {
            name: "cpu-clock".into(),
            attr_type: 1,
            sample_period: Some(MS),
            ..Default::default()
        }],
        ..Default::default()
    };
    if let Some(c) = causes {
        h.extra.insert("causes".into(), c.into());
    }
    h
}

fn marker(time: u64, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker {
        time,
        pid: PID,
        tid: REQ,
        kind,
        item,
        class: 0,
        source: MarkerSource::Api,
    })
}

fn sw(time: u64, pid: u32, tid: u32, kind: SwitchKind, next_prev: Option<(u32, u32)>) -> Record {
    Record::Switch(Switch {
        time,
        pid,
        tid,
        cpu: 0,
        kind,
        next_prev,
        ..Default::default()
    })
}

fn trace(causes: Option<&str>, irq: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header(causes)).unwrap();
    let slow = w.intern_stack(&[
        Frame::user(0x40_1010),
        Frame::user(0x40_2020),
        Frame::user(0x40_3030),
    ]);
    let wake = w.intern_stack(&[Frame::kernel(0xffff_ffff_8100_0000), Frame::user(0x40_4040)]);
    for (pid, tid, comm) in [(PID, REQ, "server"), (HOG, HOG, "hog")] {
        w.write(&Record::Comm(Comm {
            time: 0,
            pid,
            tid,
            exec: false,
            comm: comm.into(),
        }))
        .unwrap();
    }
    let recs = vec![
        sw(MS / 2, PID, WORKER, SwitchKind::OutBlocked, None),
        marker(MS, MarkerKind::Begin, 1),
        // The request hands off and waits.
        Record::Wakeup(Wakeup {
            time: 19 * MS / 10,
            pid: PID,
            tid: REQ,
            cpu: 0,
            wakee_tid: WORKER,
            ..Default::default()
        }),
        sw(2 * MS, PID, REQ, SwitchKind::OutBlocked, None),
        sw(2 * MS, PID, WORKER, SwitchKind::In, None),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    // The worker: 10 samples in its slow path, preempted 10..12 ms.
    for k in 0..10u64 {
        let t = 3 * MS + k * MS + if k >= 7 { 2 * MS } else { 0 };
        if k == 7 {
            w.write(&sw(10 * MS, PID, WORKER, SwitchKind::OutPreempted, None))
                .unwrap();
            w.write(&sw(12 * MS, PID, WORKER, SwitchKind::In, None))
                .unwrap();
        }
        let s = Sample {
            time: t,
            pid: PID,
            tid: WORKER,
            ip: 0x40_1010,
            period: MS,
            cpumode: CpuMode::User,
            stack: slow,
            stack_status: StackStatus::Unknown,
            ..Default::default()
        };
        w.write(&Record::Sample(s)).unwrap();
    }
    let waker = if irq { (0, 0) } else { (PID, WORKER) };
    let recs = vec![
        Record::Wakeup(Wakeup {
            time: 17 * MS,
            pid: waker.0,
            tid: waker.1,
            cpu: 0,
            wakee_tid: REQ,
            stack: wake,
            stack_status: StackStatus::Unknown,
        }),
        sw(17 * MS + MS / 2, PID, WORKER, SwitchKind::OutBlocked, None),
        sw(18 * MS, PID, REQ, SwitchKind::In, None),
        marker(19 * MS, MarkerKind::End, 1),
        // Item 2: preempted 21..24 ms by the hog (CPU-wide records carry next_prev).
        marker(20 * MS, MarkerKind::Begin, 2),
        sw(21 * MS, PID, REQ, SwitchKind::OutPreempted, None),
        sw(21 * MS, HOG, HOG, SwitchKind::In, Some((PID, REQ))),
        sw(
            24 * MS,
            HOG,
            HOG,
            SwitchKind::OutPreempted,
            Some((PID, REQ)),
        ),
        sw(24 * MS, PID, REQ, SwitchKind::In, None),
        marker(25 * MS, MarkerKind::End, 2),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    w.finish_into_inner(None).unwrap().0
}

fn analyze(bytes: &[u8]) -> (tailprof_analyze::ItemsReport, StackProfile) {
    analyze_with(bytes, false)
}

fn analyze_with(bytes: &[u8], timeline: bool) -> (tailprof_analyze::ItemsReport, StackProfile) {
    let mut sym = Symbolizer::default();
    let mut r = TraceReader::from_bytes(bytes.to_vec()).unwrap();
    let items = items_report(&mut r, &ItemsOptions::default(), &mut sym).unwrap();
    let mut r = TraceReader::from_bytes(bytes.to_vec()).unwrap();
    let spans = ItemSpan::from_rows(&items.items);
    let opts = StackOptions {
        event: None,
        filter: StackFilter::default(),
        timeline,
    };
    let p = stack_profile(&mut r, &opts, spans, &mut sym).unwrap();
    (items, p)
}

#[test]
fn blocked_time_names_the_waker_and_its_critical_path() {
    let (_, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    assert!(p.cause_stats.recorded);
    let c = p
        .causes
        .iter()
        .find(|c| c.id == 1)
        .expect("item 1 has causes");
    assert_eq!(c.woken_by.len(), 1, "{c:#?}");
    let w = &c.woken_by[0];
    assert_eq!(
        (w.pid, w.tid, w.comm.as_str(), w.item, w.irq),
        (PID, WORKER, "server", None, None)
    );
    // Blocked from 2 ms to the wakeup at 17 ms.
    assert_eq!(w.ns, 15 * MS);
    assert_eq!(w.frames.len(), 2, "{w:#?}");
    // Meanwhile the worker: 13 ms on CPU in its slow path (one stack), 2 ms runnable.
    assert_eq!(w.during.len(), 2, "{w:#?}");
    assert_eq!(
        (w.during[0].state, w.during[0].ns, w.during[0].frames.len()),
        (PathState::Cpu, 13 * MS, 3)
    );
    assert_eq!(
        (w.during[1].state, w.during[1].ns),
        (PathState::Runnable, 2 * MS)
    );
    assert!(c.preempted_by.is_empty());
}

#[test]
fn runnable_time_names_who_ran_on_the_cpu() {
    let (items, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    let c = p
        .causes
        .iter()
        .find(|c| c.id == 2)
        .expect("item 2 has causes");
    assert!(c.woken_by.is_empty());
    assert_eq!(c.preempted_by.len(), 1, "{c:#?}");
    let h = &c.preempted_by[0];
    assert_eq!(
        (h.ns, h.pid, h.tid, h.comm.as_str(), h.item),
        (3 * MS, HOG, HOG, "hog", None)
    );
    // The hog's CPU-wide records are not thread timelines: its time is not off-CPU time
    // of the trace, and item 2's runnable time is its own 3 ms.
    let i2 = p.item(2).unwrap();
    assert_eq!((i2.runnable_ns, i2.blocked_ns), (3 * MS, 0));
    // The explanation splits the excess by cause and carries the same causes.
    let sx = explain_stacks(&items, &p, 2).unwrap();
    let cx = explain_causes(&items, &p, &sx);
    assert!(cx.recorded);
    assert_eq!(cx.preempted_by, c.preempted_by);
    let split = cx.split.expect("a split with switches");
    let runnable = split
        .iter()
        .find(|s| s.cause == PathState::Runnable)
        .unwrap();
    assert_eq!(runnable.ns, 3 * MS);
}

#[test]
fn an_idle_cpu_interrupt_is_named_as_one_without_a_critical_path() {
    let (_, p) = analyze(&trace(Some("sched_waking"), true));
    let c = p.causes.iter().find(|c| c.id == 1).unwrap();
    let w = &c.woken_by[0];
    assert_eq!((w.tid, w.irq), (0, Some(IrqKind::Other)));
    assert!(w.during.is_empty(), "{w:#?}");
}

#[test]
fn traces_without_wakeups_have_no_causes() {
    let (_, p) = analyze(&trace(None, false));
    assert!(!p.cause_stats.recorded);
    assert!(p.causes.is_empty());
}

#[test]
fn the_timeline_has_the_wake_edges_into_items() {
    let (_, p) = analyze_with(&trace(Some("sched_waking+cpu_switch"), false), true);
    let t = p.timeline.expect("a timeline");
    // The worker's own wakeup by the request (before it blocked inside no item of its
    // own) is not an edge into an item; the worker's wakeup of the request is.
    assert_eq!(t.wakes.len(), 1, "{:?}", t.wakes);
    let e = t.wakes[0];
    assert_eq!(
        (e.time_ns, e.waker_tid, e.wakee_tid, e.resume_ns),
        (17 * MS, WORKER, REQ, 18 * MS)
    );
}

#[test]
fn interference_sums_by_process_thread_and_class() {
    let (items, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    let x = interference(&items, &p);
    assert!(x.recorded);
    let procs: Vec<(u32, u64, u64, u64)> = x
        .processes
        .iter()
        .map(|r| (r.pid, r.blocked_ns, r.runnable_ns, r.items))
        .collect();
    assert_eq!(procs, vec![(PID, 15 * MS, 0, 1), (HOG, 0, 3 * MS, 1)]);
    assert_eq!(x.threads[0].tid, Some(WORKER));
    assert_eq!(x.classes.len(), 1);
    assert_eq!(x.classes[0].total_ns, 18 * MS);
}
