//! Switch markers in the join (issue 24): a sample goes to the item current on its
//! thread, an item's wall time splits into current time and waiting in the event loop,
//! an item may move between threads, off-CPU time is charged only to the current item,
//! and overlapping begin/end markers without switches are reported as ambiguous. On
//! synthetic, deterministic traces (no symbols needed: counts only).

use tailprof_analyze::items::{ItemsJoin, ItemsOptions, ItemsReport};
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    CpuMode, EventDesc, Marker, MarkerKind, MarkerSource, Record, Sample, Sink, Switch, SwitchKind, TraceHeader, TraceReader, TraceWriter,
};

const PID: u32 = 100;
const PERIOD: u64 = 100_000;

fn header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    }
}

fn s(time: u64, tid: u32) -> Record {
    Record::Sample(Sample { time, pid: PID, tid, ip: 0x1000, period: PERIOD, cpumode: CpuMode::User, ..Default::default() })
}

fn m(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Api })
}

fn begin(time: u64, tid: u32, item: u64) -> Record {
    m(time, tid, MarkerKind::Begin, item)
}
fn end(time: u64, tid: u32, item: u64) -> Record {
    m(time, tid, MarkerKind::End, item)
}
fn switch(time: u64, tid: u32, item: u64) -> Record {
    m(time, tid, MarkerKind::Switch, item)
}
fn none(time: u64, tid: u32) -> Record {
    m(time, tid, MarkerKind::SwitchNone, 0)
}

fn run(records: &[Record]) -> ItemsReport {
    let mut j = ItemsJoin::new(&header(), &ItemsOptions::default()).unwrap();
    for r in records {
        j.handle_record(r);
    }
    j.finish(&mut Symbolizer::default()).unwrap()
}

/// Two requests interleaved on one event-loop thread: before switch markers, every
/// sample between B's begin and A's end went to B (the innermost open item), the loop's
/// own samples included.
#[test]
fn switch_markers_attribute_samples_to_the_current_item() {
    let recs = vec![
        begin(100, 1, 1),
        s(105, 1), // A
        none(110, 1),
        s(115, 1), // loop
        begin(120, 1, 2),
        s(125, 1), // B
        none(130, 1),
        s(135, 1), // loop
        switch(140, 1, 1),
        s(145, 1), // A
        none(150, 1),
        s(155, 1), // loop
        switch(160, 1, 2),
        s(165, 1), // B
        end(170, 1, 2),
        s(172, 1), // no item current after B's end
        switch(175, 1, 1),
        s(180, 1), // A
        end(190, 1, 1),
    ];
    let r = run(&recs);
    let (a, b) = (r.item(1).unwrap(), r.item(2).unwrap());
    assert_eq!((a.samples, b.samples), (3, 2));
    assert_eq!((r.outside_samples, r.switching.loop_samples), (4, 4));
    assert_eq!((r.switching.markers, r.switching.threads, r.switching.unknown_items), (6, 1, 0));
    assert_eq!(r.unmatched_markers, 0);
    let sa = a.switching.as_ref().expect("A is driven by switch markers");
    // Current 100..110, 140..150, 175..190; wall 100..190.
    assert_eq!((sa.current_ns, sa.waiting_in_loop_ns, sa.resumes, sa.threads), (35, 55, 3, 1));
    let sb = b.switching.as_ref().unwrap();
    assert_eq!((sb.current_ns, sb.waiting_in_loop_ns, sb.resumes, sb.threads), (20, 30, 2, 1));
    assert_eq!(a.current.iter().map(|c| (c.begin_ns, c.end_ns)).collect::<Vec<_>>(), vec![(100, 110), (140, 150), (175, 190)]);
    assert!(!a.ambiguous && !b.ambiguous);
    assert_eq!(r.ambiguity.items, 0);
}

/// A task resumed on other threads (a work-stealing executor) is one item; its end may
/// come on another thread than its begin.
#[test]
fn an_item_moving_between_threads_stays_one_item() {
    let recs = vec![
        begin(100, 1, 7),
        s(105, 1),
        none(110, 1),
        switch(120, 2, 7),
        s(125, 2),
        none(130, 2),
        s(135, 1), // thread 1 idles in its loop
        switch(140, 1, 7),
        s(145, 1),
        none(150, 1),
        switch(160, 2, 7),
        s(165, 2),
        end(170, 2, 7),
    ];
    let r = run(&recs);
    assert_eq!(r.items.len(), 1);
    let it = &r.items[0];
    assert_eq!((it.id, it.tid, it.samples, it.open_at_end), (7, 1, 4, false));
    let sw = it.switching.as_ref().unwrap();
    assert_eq!((sw.current_ns, sw.waiting_in_loop_ns, sw.threads), (40, 30, 2));
    assert_eq!((r.unmatched_markers, r.switching.loop_samples), (0, 1));
}

/// A switch to another thread's current item moves it (it is current on one thread at a
/// time); a switch to an item that is not open is counted and its samples are outside.
#[test]
fn switch_to_unknown_item_is_counted_not_guessed() {
    let recs = vec![
        begin(100, 1, 1),
        switch(110, 1, 99), // never begun
        s(115, 1),
        switch(120, 1, 1),
        s(125, 1),
        end(130, 1, 1),
    ];
    let r = run(&recs);
    assert_eq!(r.item(1).unwrap().samples, 1);
    assert_eq!((r.switching.unknown_items, r.unmatched_markers, r.outside_samples), (1, 1, 1));
}

/// Classic traces keep their meaning: nested items go to the innermost, and are not
/// ambiguous; overlapping items without switches are, with the samples concerned.
#[test]
fn overlapping_items_without_switches_are_reported_ambiguous() {
    let recs = vec![
        // Thread 1: proper nesting, C contains D.
        begin(100, 1, 3),
        s(105, 1),
        begin(110, 1, 4),
        s(115, 1),
        end(120, 1, 4),
        s(125, 1),
        end(130, 1, 3),
        // Thread 2: A and B overlap (B begins inside A, A ends first).
        begin(100, 2, 1),
        s(105, 2), // A alone
        begin(110, 2, 2),
        s(115, 2), // B, while A is open too: ambiguous
        s(116, 2), // ambiguous
        end(120, 2, 1),
        s(125, 2), // B alone
        end(130, 2, 2),
    ];
    let mut recs = recs;
    recs.sort_by_key(|r| r.time());
    let r = run(&recs);
    let samples = |id| r.item(id).unwrap().samples;
    assert_eq!((samples(3), samples(4), samples(1), samples(2)), (2, 1, 1, 3));
    for id in [3, 4] {
        let it = r.item(id).unwrap();
        assert!(!it.ambiguous && it.ambiguous_samples == 0, "nested item {id} is not ambiguous");
    }
    let (a, b) = (r.item(1).unwrap(), r.item(2).unwrap());
    assert!(a.ambiguous && b.ambiguous);
    assert_eq!((a.ambiguous_samples, b.ambiguous_samples), (0, 2));
    assert_eq!((r.ambiguity.items, r.ambiguity.samples), (2, 2));
    assert!(a.switching.is_none() && b.switching.is_none());
}

/// Off-CPU time of an event-loop thread is charged only to the item current on it: a
/// request waiting in the loop while the thread blocks in epoll_wait is not blocked.
#[test]
fn blocked_time_is_charged_only_to_the_current_item() {
    const MS: u64 = 1_000_000;
    let sw = |time, kind| Record::Switch(Switch { time, pid: PID, tid: 1, cpu: 0, kind, ..Default::default() });
    let recs = vec![
        begin(MS, 1, 1),
        s(MS + 10, 1),
        sw(2 * MS, SwitchKind::OutBlocked), // A is current: A's blocked time
        sw(3 * MS, SwitchKind::In),
        none(4 * MS, 1),
        begin(5 * MS, 1, 2),
        none(6 * MS, 1),
        sw(7 * MS, SwitchKind::OutBlocked), // the loop waits: neither A nor B
        sw(9 * MS, SwitchKind::In),
        switch(10 * MS, 1, 2),
        end(11 * MS, 1, 2),
        switch(12 * MS, 1, 1),
        end(13 * MS, 1, 1),
    ];
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for r in &recs {
        w.write(r).unwrap();
    }
    let bytes = w.finish_into_inner(None).unwrap().0;
    let mut sym = Symbolizer::default();
    let mut reader = TraceReader::from_bytes(bytes.clone()).unwrap();
    let items = tailprof_analyze::items::items_report(&mut reader, &ItemsOptions::default(), &mut sym).unwrap();
    // The switch markers survive the file (format version 5).
    assert_eq!(items.switching.markers, 4);
    let mut reader = TraceReader::from_bytes(bytes).unwrap();
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
    let p = stack_profile(&mut reader, &opts, ItemSpan::from_rows(&items.items), &mut sym).unwrap();
    let blocked = |id| p.item(id).unwrap().blocked_ns;
    assert_eq!((blocked(1), blocked(2)), (MS, 0));
}
