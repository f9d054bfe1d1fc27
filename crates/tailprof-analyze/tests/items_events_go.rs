//! Issue 22 part 3 on synthetic traces: events on the very probe of an item's begin or
//! end belong to the item that hit begins or ends, whatever the order of the two records;
//! Go items keyed by goroutine get per-thread runs, and off-CPU time of a thread counts
//! for an item only while its goroutine was the one running there (seen before and after
//! the block).

use tailprof_analyze::items::{items_report, ItemsOptions, ItemsReport};
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    CpuMode, EventArg, EventAt, EventDesc, ItemEvent, ItemEventKind, Marker, MarkerKind, MarkerSource, Record, Sample, StackId,
    StackStatus, Switch, SwitchKind, TraceHeader, TraceReader, TraceWriter,
};

const PID: u32 = 100;
const PERIOD: u64 = 1_000_000;

fn header(go: bool) -> TraceHeader {
    let mut h = TraceHeader {
        events: vec![EventDesc {
            name: "cpu-clock".into(),
            attr_type: 1,
            config: 0,
            sample_period: Some(PERIOD),
            regs_user_mask: if go { 1 << 22 } else { 0 },
            ..Default::default()
        }],
        ..Default::default()
    };
    if go {
        h.extra.insert("item_key".into(), "goroutine:r14".into());
    }
    h
}

fn marker(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Uprobe })
}

fn event(time: u64, tid: u32, kind: ItemEventKind, name: &str, arg: u64, at: EventAt) -> Record {
    Record::ItemEvent(ItemEvent { time, pid: PID, tid, kind, name: name.into(), args: vec![EventArg::U64(arg)], at })
}

fn sample(time: u64, tid: u32, g: Option<u64>) -> Record {
    Record::Sample(Sample {
        time,
        pid: PID,
        tid,
        ip: 0x1000,
        period: PERIOD,
        cpumode: CpuMode::User,
        regs: g.into_iter().collect(),
        ..Default::default()
    })
}

fn switch(time: u64, tid: u32, kind: SwitchKind) -> Record {
    keyed_switch(time, tid, kind, None)
}

/// A switch whose switch-out carries the goroutine register (`item_key`).
fn keyed_switch(time: u64, tid: u32, kind: SwitchKind, g: Option<u64>) -> Record {
    Record::Switch(Switch {
        time,
        pid: PID,
        tid,
        cpu: 0,
        kind,
        stack: StackId::NONE,
        stack_status: StackStatus::Complete,
        next_prev: None,
        item_key: g,
    })
}

/// Blocked time per item (stacks view) of a trace.
fn blocked(b: Vec<u8>, r: &ItemsReport) -> Vec<u64> {
    let mut rd = TraceReader::from_bytes(b).unwrap();
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
    let p = stack_profile(&mut rd, &opts, ItemSpan::from_rows(&r.items), &mut Symbolizer::default()).unwrap();
    r.items.iter().map(|it| p.items.iter().find(|s| s.id == it.id).map_or(0, |s| s.blocked_ns)).collect()
}

fn bytes(h: &TraceHeader, recs: &[Record]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), h).unwrap();
    for r in recs {
        w.write(r).unwrap();
    }
    w.finish_into_inner(None).unwrap().0
}

fn items(b: &[u8]) -> ItemsReport {
    let mut r = TraceReader::from_bytes(b.to_vec()).unwrap();
    items_report(&mut r, &ItemsOptions::default(), &mut Symbolizer::default()).unwrap()
}

/// `--item-begin usdt:…:query__start --item-event usdt:…:query__start:arg0`: the event
/// is a second uprobe at the begin site, with its own timestamp, before or after the
/// marker; likewise at the end. Each belongs to the item its hit begins or ends (time
/// clamped into it), also when the item is nested in another or follows one at once.
#[test]
fn events_at_the_begin_and_end_probes_belong_to_the_item_that_hit_begins_or_ends() {
    use ItemEventKind::Instant;
    let u = Marker::UNKNOWN_ITEM;
    let recs = vec![
        // Item 1 (thread 1): the begin-probe event 2 µs before its marker, the end-probe
        // event 3 µs after its marker.
        event(1_000, 1, Instant, "query__start", 11, EventAt::Begin),
        marker(3_000, 1, MarkerKind::Begin, u),
        sample(500_000, 1, None),
        marker(900_000, 1, MarkerKind::End, u),
        event(903_000, 1, Instant, "query__done", 12, EventAt::End),
        // Item 2 begins right away: its begin event again first, then a free event, then
        // its end event before its marker.
        event(904_000, 1, Instant, "query__start", 21, EventAt::Begin),
        marker(905_000, 1, MarkerKind::Begin, u),
        event(950_000, 1, Instant, "checkpoint", 0, EventAt::Free),
        // Nested item 3 inside item 2: marker first, then its event.
        marker(960_000, 1, MarkerKind::Begin, u),
        event(961_000, 1, Instant, "query__start", 31, EventAt::Begin),
        marker(970_000, 1, MarkerKind::End, u),
        event(971_000, 1, Instant, "query__done", 32, EventAt::End),
        event(990_000, 1, Instant, "query__done", 22, EventAt::End),
        marker(991_000, 1, MarkerKind::End, u),
        // A begin event whose marker was lost: the next end marker shows it had none.
        event(2_000_000, 1, Instant, "query__start", 41, EventAt::Begin),
        marker(2_100_000, 1, MarkerKind::End, u),
    ];
    let r = items(&bytes(&header(false), &recs));
    assert_eq!(r.items.len(), 3);
    let args = |i: usize| -> Vec<(String, u64)> {
        let it = &r.items[i];
        it.events.events.iter().map(|e| (e.arg.clone().unwrap(), e.time_ns)).collect()
    };
    assert_eq!(args(0), [("11".to_string(), 3_000), ("12".to_string(), 900_000)], "clamped into item 1");
    assert_eq!(args(1), [("21".to_string(), 905_000), ("0".to_string(), 950_000), ("22".to_string(), 990_000)]);
    assert_eq!(args(2), [("31".to_string(), 961_000), ("32".to_string(), 970_000)]);
    for it in &r.items {
        for e in &it.events.events {
            assert!((it.begin_ns..=it.end_ns).contains(&e.time_ns), "{e:?} outside {}..{}", it.begin_ns, it.end_ns);
        }
    }
    assert_eq!((r.item_events, r.item_events_outside), (8, 1));
}

/// A goroutine blocks in a system call on thread 1 (seen running before and after the
/// block): the thread's off-CPU time is its item's. Then it parks: thread 1 runs another
/// goroutine and blocks in the scheduler, and the item's goroutine resumes on thread 2:
/// that block is not the item's. Samples count wherever the goroutine runs.
#[test]
fn go_items_get_off_cpu_time_only_where_their_goroutine_blocked_the_thread() {
    const G1: u64 = 0xc000_1000;
    const G9: u64 = 0xc000_9000;
    let ms = PERIOD;
    let recs = vec![
        marker(100 * ms, 1, MarkerKind::Begin, G1),
        sample(110 * ms, 1, Some(G1)),
        switch(120 * ms, 1, SwitchKind::OutBlocked),
        switch(150 * ms, 1, SwitchKind::In),
        sample(160 * ms, 1, Some(G1)),
        // G1 parks; thread 1 runs G9 (no item), then blocks 40 ms.
        sample(170 * ms, 1, Some(G9)),
        switch(180 * ms, 1, SwitchKind::OutBlocked),
        // G1 resumes on thread 2.
        sample(200 * ms, 2, Some(G1)),
        sample(210 * ms, 2, Some(G1)),
        switch(220 * ms, 1, SwitchKind::In),
        marker(230 * ms, 2, MarkerKind::End, G1),
        sample(240 * ms, 1, Some(G9)),
    ];
    let b = bytes(&header(true), &recs);
    let r = items(&b);
    assert_eq!(r.items.len(), 1);
    let it = &r.items[0];
    assert_eq!((it.samples, it.begin_ns, it.end_ns), (4, 100 * ms, 230 * ms));
    let runs: Vec<(u32, u64, u64)> = it.current.iter().map(|c| (c.tid, c.begin_ns / ms, c.end_ns / ms)).collect();
    assert_eq!(runs, [(1, 100, 160), (2, 200, 230)]);
    let mut rd = TraceReader::from_bytes(b).unwrap();
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
    let p = stack_profile(&mut rd, &opts, ItemSpan::from_rows(&r.items), &mut Symbolizer::default()).unwrap();
    let st = p.items.iter().find(|s| s.id == it.id).unwrap();
    assert_eq!(st.blocked_ns, 30 * ms, "the system call's 30 ms, not the scheduler's 40 ms");
    assert_eq!(st.stacks.iter().map(|s| s.samples).sum::<u64>(), 4, "samples on both threads");
}

/// Go items keyed by goroutine: events carry a thread, not a goroutine. One on a
/// begin/end probe goes to the item its hit begins/ends; any other to the item of the
/// goroutine last seen on its thread (by a sample's R14 or a probe's `g`).
#[test]
fn go_events_go_to_the_goroutine_last_seen_on_their_thread() {
    const G1: u64 = 0xc000_1000;
    const G2: u64 = 0xc000_2000;
    use ItemEventKind::Instant;
    let recs = vec![
        event(90, 1, Instant, "handle", 1, EventAt::Begin), // before its begin marker
        marker(100, 1, MarkerKind::Begin, G1),
        marker(110, 2, MarkerKind::Begin, G2),
        sample(120, 2, Some(G1)), // G1 moved to thread 2
        event(130, 2, Instant, "lock", 7, EventAt::Free),
        sample(140, 1, Some(G2)), // G2 moved to thread 1
        // A class label (a class probe's marker carries no goroutine) changes nothing.
        Record::Marker(Marker {
            time: 145,
            pid: PID,
            tid: 1,
            kind: MarkerKind::Label,
            item: Marker::UNKNOWN_ITEM,
            class: 3,
            source: MarkerSource::Uprobe,
        }),
        event(150, 1, Instant, "lock", 8, EventAt::Free),
        marker(200, 2, MarkerKind::End, G1),
        event(201, 2, Instant, "handle.return", 9, EventAt::End), // after its end marker
        event(210, 1, Instant, "handle.return", 10, EventAt::End), // before its end marker
        marker(211, 1, MarkerKind::End, G2),
    ];
    let r = items(&bytes(&header(true), &recs));
    assert_eq!(r.items.len(), 2);
    let args = |i: usize| -> Vec<String> { r.items[i].events.events.iter().map(|e| e.arg.clone().unwrap()).collect() };
    assert_eq!(args(0), ["1", "7", "9"], "G1's item");
    assert_eq!(args(1), ["8", "10"], "G2's item");
    assert_eq!(r.item_events_outside, 0);
}

/// Issue 22, the two errors of the inferred rule (docs/PROBES.md), fixed by the goroutine
/// register at the switch-out. Item 1 (G1): a system call of 30 ms, after which the
/// runtime moves G1 to thread 2 (thread 1 then sleeps in the scheduler on `g0`): the
/// 30 ms are G1's, though G1 is never seen on thread 1 again. Item 2 (G2): parks on
/// thread 1 (the switch-out says `g0`) and resumes there with no sample in between: its
/// 40 ms are not blocked time of the item, though G2 is seen there before and after.
/// Without the keys (an older trace), the inference gets both wrong, as documented.
#[test]
fn go_off_cpu_time_belongs_to_the_goroutine_at_the_switch_out() {
    const G1: u64 = 0xc000_1000;
    const G2: u64 = 0xc000_2000;
    const G0: u64 = 0x7f00_0000; // the scheduler's g0
    let ms = PERIOD;
    let recs = |keys: bool| {
        let k = |g: u64| keys.then_some(g);
        vec![
            marker(100 * ms, 1, MarkerKind::Begin, G1),
            sample(110 * ms, 1, Some(G1)),
            keyed_switch(120 * ms, 1, SwitchKind::OutBlocked, k(G1)),
            keyed_switch(150 * ms, 1, SwitchKind::In, None),
            keyed_switch(152 * ms, 1, SwitchKind::OutBlocked, k(G0)),
            sample(160 * ms, 2, Some(G1)),
            marker(170 * ms, 2, MarkerKind::End, G1),
            keyed_switch(200 * ms, 1, SwitchKind::In, None),
            marker(300 * ms, 1, MarkerKind::Begin, G2),
            sample(310 * ms, 1, Some(G2)),
            keyed_switch(320 * ms, 1, SwitchKind::OutBlocked, k(G0)),
            keyed_switch(360 * ms, 1, SwitchKind::In, None),
            sample(370 * ms, 1, Some(G2)),
            marker(380 * ms, 1, MarkerKind::End, G2),
        ]
    };
    let b = bytes(&header(true), &recs(true));
    let r = items(&b);
    assert_eq!(r.items.len(), 2);
    let runs: Vec<(u32, u64, u64)> = r.items[0].current.iter().map(|c| (c.tid, c.begin_ns / ms, c.end_ns / ms)).collect();
    assert_eq!(runs, [(1, 100, 150), (2, 160, 170)], "G1's run on thread 1 covers its system call");
    assert_eq!(blocked(b, &r), [30 * ms, 0], "G1's system call counts, G2's park does not");
    // The same trace without the goroutine at the switch-outs: the inference.
    let b = bytes(&header(true), &recs(false));
    let r = items(&b);
    assert_eq!(blocked(b, &r), [0, 40 * ms], "the two documented errors of the inferred rule");
}
