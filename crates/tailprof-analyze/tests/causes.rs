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
    Comm, CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Record, Sample, StackStatus, Switch, SwitchKind, TraceHeader,
    TraceReader, TraceWriter, Wakeup,
};

const PID: u32 = 100;
const REQ: u32 = 100;
const WORKER: u32 = 101;
const HOG: u32 = 200;
const MS: u64 = 1_000_000;

fn header(causes: Option<&str>) -> TraceHeader {
    let mut h = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(MS), ..Default::default() }],
        ..Default::default()
    };
    if let Some(c) = causes {
        h.extra.insert("causes".into(), c.into());
    }
    h
}

fn marker(time: u64, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid: REQ, kind, item, class: 0, source: MarkerSource::Api })
}

fn sw(time: u64, pid: u32, tid: u32, kind: SwitchKind, next_prev: Option<(u32, u32)>) -> Record {
    Record::Switch(Switch { time, pid, tid, cpu: 0, kind, next_prev, ..Default::default() })
}

fn trace(causes: Option<&str>, irq: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header(causes)).unwrap();
    let slow = w.intern_stack(&[Frame::user(0x40_1010), Frame::user(0x40_2020), Frame::user(0x40_3030)]);
    let wake = w.intern_stack(&[Frame::kernel(0xffff_ffff_8100_0000), Frame::user(0x40_4040)]);
    for (pid, tid, comm) in [(PID, REQ, "server"), (HOG, HOG, "hog")] {
        w.write(&Record::Comm(Comm { time: 0, pid, tid, exec: false, comm: comm.into() })).unwrap();
    }
    let recs = vec![
        sw(MS / 2, PID, WORKER, SwitchKind::OutBlocked, None),
        marker(MS, MarkerKind::Begin, 1),
        // The request hands off and waits.
        Record::Wakeup(Wakeup { time: 19 * MS / 10, pid: PID, tid: REQ, cpu: 0, wakee_tid: WORKER, ..Default::default() }),
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
            w.write(&sw(10 * MS, PID, WORKER, SwitchKind::OutPreempted, None)).unwrap();
            w.write(&sw(12 * MS, PID, WORKER, SwitchKind::In, None)).unwrap();
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
        sw(24 * MS, HOG, HOG, SwitchKind::OutPreempted, Some((PID, REQ))),
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
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline, ..Default::default() };
    let p = stack_profile(&mut r, &opts, spans, &mut sym).unwrap();
    (items, p)
}

#[test]
fn blocked_time_names_the_waker_and_its_critical_path() {
    let (_, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    assert!(p.cause_stats.recorded);
    let c = p.causes.iter().find(|c| c.id == 1).expect("item 1 has causes");
    assert_eq!(c.woken_by.len(), 1, "{c:#?}");
    let w = &c.woken_by[0];
    assert_eq!((w.pid, w.tid, w.comm.as_str(), w.item, w.irq), (PID, WORKER, "server", None, None));
    // Blocked from 2 ms to the wakeup at 17 ms.
    assert_eq!(w.ns, 15 * MS);
    assert_eq!(w.frames.len(), 2, "{w:#?}");
    // Meanwhile the worker: 13 ms on CPU in its slow path (one stack), 2 ms runnable.
    assert_eq!(w.during.len(), 2, "{w:#?}");
    assert_eq!((w.during[0].state, w.during[0].ns, w.during[0].frames.len()), (PathState::Cpu, 13 * MS, 3));
    assert_eq!((w.during[1].state, w.during[1].ns), (PathState::Runnable, 2 * MS));
    assert!(c.preempted_by.is_empty());
}

#[test]
fn runnable_time_names_who_ran_on_the_cpu() {
    let (items, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    let c = p.causes.iter().find(|c| c.id == 2).expect("item 2 has causes");
    assert!(c.woken_by.is_empty());
    assert_eq!(c.preempted_by.len(), 1, "{c:#?}");
    let h = &c.preempted_by[0];
    assert_eq!((h.ns, h.pid, h.tid, h.comm.as_str(), h.item), (3 * MS, HOG, HOG, "hog", None));
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
    let runnable = split.iter().find(|s| s.cause == PathState::Runnable).unwrap();
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
    assert_eq!((e.time_ns, e.waker_tid, e.wakee_tid, e.resume_ns), (17 * MS, WORKER, REQ, 18 * MS));
}

#[test]
fn interference_sums_by_process_thread_and_class() {
    let (items, p) = analyze(&trace(Some("sched_waking+cpu_switch"), false));
    let x = interference(&items, &p);
    assert!(x.recorded);
    let procs: Vec<(u32, u64, u64, u64)> = x.processes.iter().map(|r| (r.pid, r.blocked_ns, r.runnable_ns, r.items)).collect();
    assert_eq!(procs, vec![(PID, 15 * MS, 0, 1), (HOG, 0, 3 * MS, 1)]);
    assert_eq!(x.threads[0].tid, Some(WORKER));
    assert_eq!(x.classes.len(), 1);
    assert_eq!(x.classes[0].total_ns, 18 * MS);
}

/// A trace whose item 3 (33..40 ms) begins while its thread is already off CPU: runnable
/// from 30 ms (the hog ran 30..36 ms), or blocked from 30 ms until a worker's wakeup at
/// 36 ms. Only the part inside the item is the item's.
fn begins_off_cpu(state: SwitchKind) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header(Some("sched_waking+cpu_switch"))).unwrap();
    for (pid, tid, comm) in [(PID, REQ, "server"), (HOG, HOG, "hog")] {
        w.write(&Record::Comm(Comm { time: 0, pid, tid, exec: false, comm: comm.into() })).unwrap();
    }
    let mut recs = vec![
        sw(29 * MS, PID, REQ, SwitchKind::In, None),
        sw(30 * MS, PID, REQ, state, None),
        sw(30 * MS, HOG, HOG, SwitchKind::In, Some((PID, REQ))),
        marker(33 * MS, MarkerKind::Begin, 3),
    ];
    if state == SwitchKind::OutBlocked {
        recs.push(Record::Wakeup(Wakeup { time: 36 * MS, pid: PID, tid: WORKER, cpu: 0, wakee_tid: REQ, ..Default::default() }));
    }
    recs.extend([
        sw(36 * MS, HOG, HOG, SwitchKind::OutPreempted, Some((PID, REQ))),
        sw(36 * MS, PID, REQ, SwitchKind::In, None),
        marker(40 * MS, MarkerKind::End, 3),
    ]);
    for r in &recs {
        w.write(r).unwrap();
    }
    w.finish_into_inner(None).unwrap().0
}

#[test]
fn preempted_by_counts_only_the_runnable_part_inside_the_item() {
    let (_, p) = analyze(&begins_off_cpu(SwitchKind::OutPreempted));
    let i3 = p.item(3).unwrap();
    assert_eq!(i3.runnable_ns, 3 * MS);
    let c = p.causes.iter().find(|c| c.id == 3).expect("item 3 has causes");
    assert_eq!(c.preempted_by.len(), 1, "{c:#?}");
    // Was 6 ms (the whole interval) before the fix: more than the item's runnable time.
    assert_eq!((c.preempted_by[0].tid, c.preempted_by[0].ns), (HOG, 3 * MS));
}

#[test]
fn woken_by_counts_only_the_blocked_part_inside_the_item() {
    let (_, p) = analyze(&begins_off_cpu(SwitchKind::OutBlocked));
    let i3 = p.item(3).unwrap();
    assert_eq!(i3.blocked_ns, 3 * MS);
    let c = p.causes.iter().find(|c| c.id == 3).expect("item 3 has causes");
    assert_eq!(c.woken_by.len(), 1, "{c:#?}");
    assert_eq!((c.woken_by[0].tid, c.woken_by[0].ns), (WORKER, 3 * MS));
}

/// Item 1 (0..10 ms) of a trace with kernel stacks: samples in a page fault, in
/// `getppid`, in an interrupt, in user code; the thread resumes on CPU 1 once inside.
#[test]
fn noise_names_page_faults_syscalls_and_migrations() {
    use tailprof_analyze::{KernelSymbols, SymbolizerOptions};
    use tailprof_format::FrameKind;
    let mut w = TraceWriter::new(Vec::new(), &header(Some("sched_waking"))).unwrap();
    // The kernel's symbols come from a kallsyms file written here.
    let dir = tempfile::tempdir().unwrap();
    let ks = dir.path().join("kallsyms");
    std::fs::write(
        &ks,
        "ffffffff81000000 T _text\n\
         ffffffff81001000 T entry_SYSCALL_64\n\
         ffffffff81002000 T do_syscall_64\n\
         ffffffff81003000 T __x64_sys_getppid\n\
         ffffffff81004000 T asm_exc_page_fault\n\
         ffffffff81005000 T exc_page_fault\n\
         ffffffff81006000 T handle_mm_fault\n\
         ffffffff81007000 T clear_page_erms\n\
         ffffffff81008000 T asm_common_interrupt\n\
         ffffffff81009000 T _etext\n",
    )
    .unwrap();
    let k = |a: u64| Frame { ip: 0xffff_ffff_8100_0000 + a + 0x10, kind: FrameKind::Kernel };
    let fault = w.intern_stack(&[k(0x7000), k(0x6000), k(0x5000), k(0x4000), Frame::user(0x40_1000)]);
    let getppid = w.intern_stack(&[k(0x3000), k(0x2000), k(0x1000), Frame::user(0x40_1000)]);
    let irq = w.intern_stack(&[k(0x8000), k(0x3000), k(0x2000), k(0x1000), Frame::user(0x40_1000)]);
    let user = w.intern_stack(&[Frame::user(0x40_1000)]);
    w.write(&sw(0, PID, REQ, SwitchKind::In, None)).unwrap();
    w.write(&marker(MS / 2, MarkerKind::Begin, 1)).unwrap();
    let plan = [fault, fault, fault, getppid, getppid, irq, user];
    for (i, &stack) in plan.iter().enumerate() {
        let t = MS + i as u64 * MS;
        if i == 3 {
            w.write(&sw(t - MS / 4, PID, REQ, SwitchKind::OutPreempted, None)).unwrap();
            w.write(&Record::Switch(Switch { time: t - MS / 8, pid: PID, tid: REQ, cpu: 1, kind: SwitchKind::In, ..Default::default() }))
                .unwrap();
        }
        w.write(&Record::Sample(Sample {
            time: t,
            pid: PID,
            tid: REQ,
            ip: 0x40_1000,
            period: MS,
            cpumode: CpuMode::Kernel,
            stack,
            stack_status: StackStatus::Complete,
            ..Default::default()
        }))
        .unwrap();
    }
    w.write(&marker(10 * MS, MarkerKind::End, 1)).unwrap();
    let bytes = w.finish_into_inner(None).unwrap().0;
    let run = |kernel: KernelSymbols| {
        let mut sym = Symbolizer::new(SymbolizerOptions { kernel, cache_dir: None, ..Default::default() });
        let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
        let items = items_report(&mut r, &ItemsOptions::default(), &mut sym).unwrap();
        let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
        let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
        let p = stack_profile(&mut r, &opts, ItemSpan::from_rows(&items.items), &mut sym).unwrap();
        (items, p)
    };
    let (items, p) = run(KernelSymbols::Kallsyms(ks.clone()));
    let n = &p.item(1).unwrap().noise;
    assert_eq!(n.kernel_samples, 6, "{n:#?}");
    assert_eq!(n.page_fault_ns, 3 * MS, "{n:#?}");
    assert_eq!(n.hardirq_ns, MS, "{n:#?}");
    assert_eq!(n.syscalls.len(), 1, "{n:#?}");
    assert_eq!((n.syscalls[0].name.as_str(), n.syscalls[0].ns), ("getppid", 2 * MS));
    assert_eq!((n.unknown_kernel_ns, n.migrations), (0, Some(1)));
    let sx = explain_stacks(&items, &p, 1).unwrap();
    let cx = explain_causes(&items, &p, &sx);
    assert_eq!(cx.noise, *n);
    assert_eq!(cx.noise_shares[0].kind, "page_fault");
    // Without kernel symbols: unknown, not guessed.
    let (_, p) = run(KernelSymbols::Off);
    let n = &p.item(1).unwrap().noise;
    assert_eq!((n.kernel_samples, n.unknown_kernel_ns, n.page_fault_ns), (6, 6 * MS, 0), "{n:#?}");
    assert!(n.syscalls.is_empty());
}
