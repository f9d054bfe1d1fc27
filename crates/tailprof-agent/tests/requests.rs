//! The agent's retained requests with switch markers and trace context (issue 24), from
//! synthetic records as the recorder hands them to the retainer.
//!
//! - An event loop (thread 5) interleaves requests 1 and 2 with switch markers: each
//!   retained request gets the samples taken while it was current, never the other's
//!   (begin → end on the thread would give request 1 request 2's samples too); the rest
//!   of its wall time is waiting in its event loop.
//! - A task begun on one thread, resumed and ended on another, stays one request.
//! - A request's trace context is stored and found by `stored_items_of(.., trace_id)`.
//! - The current intervals kept per request are bounded and counted.

use tailprof_agent::tail::{TailRetainer, MAX_SLICES_PER_REQUEST};
use tailprof_format::{ItemTrace, Marker, MarkerKind, Sample};
use tailprof_store::schema::{ItemExplanation, ItemRow, WindowMeta};
use tailprof_store::{Store, Table};

const MS: u64 = 1_000_000;

fn marker(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Marker {
    Marker { time, pid: 1, tid, kind, item, ..Marker::default() }
}

fn sample(t: &mut TailRetainer, time: u64, tid: u32, leaf: u64) {
    let s = Sample { time, pid: 1, tid, period: MS, ..Default::default() };
    t.handle_sample(&s, &[(u32::MAX, leaf)]);
}

fn leaves(r: &ItemRow) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ItemExplanation::parse(&r.explanation).stacks.iter().map(|s| (s.frames[0].offset, s.samples)).collect();
    v.sort();
    v
}

/// Request 1 (stack 0xa) current 0..10 and 15..20 ms, request 2 (stack 0xb) 10..15 and
/// 20..25 ms, on thread 5.
fn interleaved() -> Vec<ItemRow> {
    use MarkerKind::*;
    let mut t = TailRetainer::new(Some(1), 0.0);
    t.handle_marker(&marker(0, 5, Begin, 1), "loop");
    for at in [2, 4, 6, 8] {
        sample(&mut t, at * MS, 5, 0xa);
    }
    t.handle_marker(&marker(10 * MS, 5, SwitchNone, 0), "loop");
    t.handle_marker(&marker(10 * MS, 5, Begin, 2), "loop");
    for at in [12, 14] {
        sample(&mut t, at * MS, 5, 0xb);
    }
    t.handle_marker(&marker(15 * MS, 5, SwitchNone, 0), "loop");
    t.handle_marker(&marker(15 * MS, 5, Switch, 1), "loop");
    for at in [16, 18] {
        sample(&mut t, at * MS, 5, 0xa);
    }
    t.handle_marker(&marker(20 * MS, 5, End, 1), "loop");
    t.handle_marker(&marker(20 * MS, 5, Switch, 2), "loop");
    sample(&mut t, 22 * MS, 5, 0xb);
    t.handle_marker(&marker(25 * MS, 5, End, 2), "loop");
    assert_eq!(t.open_requests(), 0);
    assert_eq!(t.stats.unmatched_ends, 0);
    t.take_window(0, 1, &|_| None).0
}

#[test]
fn switch_markers_give_each_request_its_own_samples() {
    let items = interleaved();
    let r1 = items.iter().find(|r| r.item_id == 1).expect("request 1 retained");
    let r2 = items.iter().find(|r| r.item_id == 2).expect("request 2 retained");
    // Request 1 spans 0..20 ms on thread 5, where request 2's samples at 12 and 14 ms are.
    assert_eq!((r1.samples, leaves(r1)), (6, vec![(0xa, 6)]), "{}", r1.explanation);
    assert_eq!((r2.samples, leaves(r2)), (3, vec![(0xb, 3)]), "{}", r2.explanation);
    let s1 = ItemExplanation::parse(&r1.explanation).switching.expect("request 1 is switched");
    assert_eq!((s1.current_ns, s1.waiting_in_loop_ns, s1.resumes, s1.threads), (15 * MS, 5 * MS, 2, 1));
    // Off CPU only while current: 15 ms current, 6 samples of 1 ms.
    assert_eq!(r1.off_cpu_ns, 9 * MS);
    let s2 = ItemExplanation::parse(&r2.explanation).switching.unwrap();
    assert_eq!((s2.current_ns, s2.waiting_in_loop_ns, s2.resumes), (10 * MS, 5 * MS, 2));
}

#[test]
fn a_task_that_moves_between_threads_stays_one_request() {
    use MarkerKind::*;
    let mut t = TailRetainer::new(Some(1), 0.0);
    t.handle_marker(&marker(0, 5, Begin, 9), "tokio");
    sample(&mut t, MS, 5, 0xa);
    t.handle_marker(&marker(2 * MS, 5, SwitchNone, 0), "tokio");
    sample(&mut t, 3 * MS, 5, 0xf); // thread 5 in its loop: nobody's
    t.handle_marker(&marker(4 * MS, 6, Switch, 9), "tokio");
    sample(&mut t, 5 * MS, 6, 0xa);
    sample(&mut t, 5 * MS, 5, 0xf);
    t.handle_marker(&marker(6 * MS, 6, End, 9), "tokio");
    let (items, _) = t.take_window(0, 1, &|_| None);
    assert_eq!(t.stats.unmatched_ends, 0);
    assert_eq!(items.len(), 1);
    assert_eq!(leaves(&items[0]), vec![(0xa, 2)], "{}", items[0].explanation);
    let sw = ItemExplanation::parse(&items[0].explanation).switching.unwrap();
    assert_eq!((sw.threads, sw.current_ns), (2, 4 * MS));
}

#[test]
fn without_switch_markers_begin_to_end_on_the_thread_as_before() {
    use MarkerKind::*;
    let mut t = TailRetainer::new(Some(1), 0.0);
    t.handle_marker(&marker(0, 5, Begin, 1), "srv");
    sample(&mut t, MS, 5, 0xa);
    t.handle_marker(&marker(2 * MS, 5, End, 1), "srv");
    let (items, _) = t.take_window(0, 1, &|_| None);
    assert_eq!(items[0].samples, 1);
    assert!(ItemExplanation::parse(&items[0].explanation).switching.is_none());
    assert!(!items[0].explanation.contains("switching"));
}

#[test]
fn current_intervals_are_bounded_and_counted() {
    use MarkerKind::*;
    let mut t = TailRetainer::new(Some(1), 0.0);
    t.handle_marker(&marker(0, 5, SwitchNone, 0), "loop");
    t.handle_marker(&marker(1, 5, Begin, 1), "loop");
    let n = MAX_SLICES_PER_REQUEST as u64 + 76;
    for i in 0..n {
        t.handle_marker(&marker(2 + 2 * i, 5, SwitchNone, 0), "loop");
        t.handle_marker(&marker(3 + 2 * i, 5, Switch, 1), "loop");
    }
    t.handle_marker(&marker(10 * n, 5, End, 1), "loop");
    // n intervals closed by the switches to none, one by the end; MAX kept.
    assert_eq!(t.stats.slices_dropped, n + 1 - MAX_SLICES_PER_REQUEST as u64);
    let (items, _) = t.take_window(0, 1, &|_| None);
    let sw = ItemExplanation::parse(&items[0].explanation).switching.unwrap();
    assert_eq!(sw.resumes, n + 1);
}

fn write_and_read(items: Vec<ItemRow>, trace_id: Option<&str>) -> tailprof_analyze::store_query::StoredItems {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let (store, _) = Store::open(&root).unwrap();
    let now = tailprof_store::time::now_us();
    let meta = WindowMeta {
        schema_version: tailprof_store::schema::SCHEMA_VERSION,
        host: "h".into(),
        window_start_us: now - 1_000_000,
        window_end_us: now,
        ..WindowMeta::default()
    };
    store.ensure_dir(&store.partition_dir(Table::Items, "h", now - 1_000_000)).unwrap();
    let items: Vec<_> = items
        .into_iter()
        .map(|mut r| {
            r.begin_us = now - 500_000;
            r
        })
        .collect();
    tailprof_store::write_items(&store.window_file(Table::Items, "h", now - 1_000_000, now), &meta, &items).unwrap();
    let reader = tailprof_store::StoreReader::new(Store::at(&root));
    tailprof_analyze::store_query::stored_items_of(&reader, None, now - 3_600_000_000, now + 1_000_000, None, trace_id)
}

#[test]
fn trace_context_is_stored_and_found_by_trace_id() {
    use MarkerKind::*;
    let mut t = TailRetainer::new(Some(1), 0.0);
    let mut trace_id = [0u8; 16];
    trace_id[0] = 0xab;
    trace_id[15] = 0x01;
    for (id, tid) in [(1u64, 5u32), (2, 6)] {
        t.handle_marker(&marker(0, tid, Begin, id), "srv");
        if id == 1 {
            t.handle_item_trace(&ItemTrace { time: 0, pid: 1, tid, item: id, trace_id, span_id: [0xcd; 8] });
        }
    }
    t.handle_marker(&marker(5 * MS, 5, End, 1), "srv");
    t.handle_marker(&marker(5 * MS, 6, End, 2), "srv");
    let (items, _) = t.take_window(0, 1, &|_| None);
    let r1 = items.iter().find(|r| r.item_id == 1).unwrap();
    let hex = "ab000000000000000000000000000001";
    assert_eq!((r1.trace_id.as_str(), r1.span_id.as_str()), (hex, "cdcdcdcdcdcdcdcd"));
    assert_eq!(items.iter().find(|r| r.item_id == 2).unwrap().trace_id, "");
    // Stored, read back, and searched.
    let all = write_and_read(items.clone(), None);
    assert_eq!(all.items.len(), 2);
    let found = write_and_read(items.clone(), Some(hex));
    assert_eq!(found.items.iter().map(|i| i.item_id).collect::<Vec<_>>(), [1]);
    assert_eq!(found.items[0].trace_id.as_deref(), Some(hex));
    assert_eq!(found.items[0].span_id.as_deref(), Some("cdcdcdcdcdcdcdcd"));
    let v = serde_json::to_value(&found.items[0]).unwrap();
    assert_eq!(v["trace_id"], hex);
    assert!(write_and_read(items, Some("ab000000000000000000000000000002")).items.is_empty());
}
