//! The agent keeps causes (issue 21, part 8): a slow request it retains gets who woke it
//! (the waker's pid/tid/comm, the request the waker was inside, its stack) and who ran
//! while it waited for a CPU, stored with the request and read back by `items --store`
//! (`store_query::stored_items`, the typed `woken_by`/`preempted_by`). Synthetic records
//! as the recorder hands them to the agent's aggregator: request 1 of thread 11 blocks
//! 2..15 ms until thread 21, inside its own request 7, wakes it; then it is runnable
//! 17..19 ms while a hog (pid 30) runs on its CPU. The locker was on CPU all along, its
//! samples at 4, 8 and 12 ms on two stacks: the critical path of the wait (`during`) is
//! 13 ms on CPU split 2:1 over them, as the trace analysis would say. The locker's
//! request has the class `lock-holder`, and the hog runs inside its request 9 (class
//! `batch`, 16.5..18 ms): the waker's class and the preempter's request are named as the
//! trace analysis names them, whether the waker's request is still open or has ended.

use tailprof_agent::tail::TailRetainer;
use tailprof_agent::tail::MAX_ENDED_SPANS;
use tailprof_format::{ItemClass, Marker, MarkerKind, Sample, Switch, SwitchKind, Wakeup};
use tailprof_store::schema::{ItemExplanation, StoredState, WindowMeta};
use tailprof_store::{Store, Table};

const MS: u64 = 1_000_000;

fn marker(time: u64, pid: u32, tid: u32, kind: MarkerKind, item: u64) -> Marker {
    Marker { time, pid, tid, kind, item, ..Marker::default() }
}

fn sw(time: u64, pid: u32, tid: u32, kind: SwitchKind, next: Option<(u32, u32)>) -> Switch {
    Switch { time, pid, tid, cpu: 0, kind, next_prev: next, ..Switch::default() }
}

/// How the locker's request 7 ends: after request 1 (still open when request 1 is
/// retained), before it, or before it followed by more requests than the agent remembers.
#[derive(Clone, Copy, PartialEq)]
enum LockerEnds {
    After,
    Before,
    BeforeAndForgotten,
}

fn retain(with_switches: bool) -> Vec<tailprof_store::schema::ItemRow> {
    retain_with(with_switches, LockerEnds::After).0
}

fn retain_with(with_switches: bool, locker: LockerEnds) -> (Vec<tailprof_store::schema::ItemRow>, TailRetainer) {
    let mut t = TailRetainer::new(Some(MS), 0.0);
    t.handle_comm(10, "server");
    t.handle_comm(20, "locker");
    t.handle_comm(30, "hog");
    t.handle_class(&ItemClass { time: 0, pid: 20, id: 3, name: "lock-holder".into() });
    t.handle_class(&ItemClass { time: 0, pid: 30, id: 4, name: "batch".into() });
    t.handle_marker(&Marker { class: 3, ..marker(0, 20, 21, MarkerKind::Begin, 7) }, "locker");
    t.handle_marker(&marker(MS, 10, 11, MarkerKind::Begin, 1), "server");
    if with_switches {
        t.handle_switch(&sw(2 * MS, 10, 11, SwitchKind::OutBlocked, Some((20, 21))));
        for (at, leaf) in [(4 * MS, 0x111), (8 * MS, 0x222), (12 * MS, 0x111)] {
            let s = Sample { time: at, pid: 20, tid: 21, period: MS, ..Default::default() };
            t.handle_sample(&s, &[(u32::MAX, leaf), (u32::MAX, 0x999)]);
        }
        // An unrelated wakeup (of a thread in no request) is not kept.
        t.handle_wakeup(&Wakeup { time: 3 * MS, pid: 20, tid: 21, wakee_tid: 99, ..Wakeup::default() }, &[(u32::MAX, 1)]);
        t.handle_wakeup(
            &Wakeup { time: 15 * MS, pid: 20, tid: 21, wakee_tid: 11, ..Wakeup::default() },
            &[(u32::MAX, 0xabc), (u32::MAX, 0xdef)],
        );
        t.handle_switch(&sw(16 * MS, 10, 11, SwitchKind::In, Some((20, 21))));
    }
    if locker != LockerEnds::After {
        t.handle_marker(&marker(16 * MS, 20, 21, MarkerKind::End, 7), "locker");
    }
    if locker == LockerEnds::BeforeAndForgotten {
        // Short requests of another thread push the locker's out of what is remembered.
        for i in 0..MAX_ENDED_SPANS as u64 {
            t.handle_marker(&marker(16 * MS + 2, 40, 41, MarkerKind::Begin, 100 + i), "other");
            t.handle_marker(&marker(16 * MS + 3, 40, 41, MarkerKind::End, 100 + i), "other");
        }
    }
    t.handle_marker(&Marker { class: 4, ..marker(16 * MS + MS / 2, 30, 30, MarkerKind::Begin, 9) }, "hog");
    if with_switches {
        t.handle_switch(&sw(17 * MS, 10, 11, SwitchKind::OutPreempted, Some((30, 30))));
    }
    t.handle_marker(&marker(18 * MS, 30, 30, MarkerKind::End, 9), "hog");
    if with_switches {
        t.handle_switch(&sw(19 * MS, 10, 11, SwitchKind::In, Some((30, 30))));
    }
    t.handle_marker(&marker(20 * MS, 10, 11, MarkerKind::End, 1), "server");
    if locker == LockerEnds::After {
        t.handle_marker(&marker(21 * MS, 20, 21, MarkerKind::End, 7), "locker");
    }
    let (items, _) = t.take_window(0, 1, &|_| None);
    (items, t)
}

#[test]
fn retained_request_keeps_its_waker_and_preempter() {
    let items = retain(true);
    let r = items.iter().find(|r| r.item_id == 1).expect("request 1 retained");
    let doc = ItemExplanation::parse(&r.explanation);
    let (wakers, preempters) = (doc.woken_by, doc.preempted_by);
    assert_eq!(wakers.len(), 1, "{}", r.explanation);
    let w = &wakers[0];
    // Blocked from 2 ms to the wakeup at 15 ms.
    assert_eq!((w.ns, w.pid, w.tid, w.comm.as_str(), w.item), (13 * MS, 20, 21, "locker", Some(7)));
    assert_eq!(w.class.as_deref(), Some("lock-holder"), "{}", r.explanation);
    assert_eq!(w.frames.len(), 2);
    assert_eq!(w.frames[0].offset, 0xabc);
    // The critical path: the locker on CPU the whole 13 ms, 2:1 over its two stacks.
    let during: Vec<(StoredState, u64, u64)> = w.during.iter().map(|d| (d.state, d.ns, d.frames[0].offset)).collect();
    let two_thirds = 13 * MS * 2 / 3;
    assert_eq!(during, vec![(StoredState::Cpu, two_thirds, 0x111), (StoredState::Cpu, 13 * MS - two_thirds, 0x222)], "{}", r.explanation);
    assert_eq!(preempters.len(), 1, "{}", r.explanation);
    let p = &preempters[0];
    assert_eq!((p.ns, p.pid, p.tid, p.comm.as_str(), p.item), (2 * MS, 30, 30, "hog", Some(9)), "{}", r.explanation);
}

/// Regression (issue 21, the agent's wakers had no class): the waker's request ended
/// before the retained one did; its class is still named, from the spans the agent saw.
#[test]
fn waker_class_is_named_after_its_request_ended() {
    let (items, t) = retain_with(true, LockerEnds::Before);
    let r = items.iter().find(|r| r.item_id == 1).expect("request 1 retained");
    let doc = ItemExplanation::parse(&r.explanation);
    assert_eq!(doc.woken_by.len(), 1, "{}", r.explanation);
    assert_eq!((doc.woken_by[0].item, doc.woken_by[0].class.as_deref()), (Some(7), Some("lock-holder")), "{}", r.explanation);
    assert_eq!(doc.preempted_by[0].item, Some(9), "{}", r.explanation);
    assert_eq!(t.stats.cause_items_forgotten, 0);
}

/// A waker's request ended longer ago than the agent remembers: no class is claimed,
/// and that is counted.
#[test]
fn forgotten_waker_class_is_counted_not_guessed() {
    let (items, t) = retain_with(true, LockerEnds::BeforeAndForgotten);
    let r = items.iter().find(|r| r.item_id == 1).expect("request 1 retained");
    let doc = ItemExplanation::parse(&r.explanation);
    assert_eq!((doc.woken_by[0].item, doc.woken_by[0].class.as_deref()), (Some(7), None), "{}", r.explanation);
    assert!(!r.explanation.contains("\"class\""), "{}", r.explanation);
    assert_eq!(t.stats.cause_items_forgotten, 1);
    // The hog's request ended after the flood: still known.
    assert_eq!(doc.preempted_by[0].item, Some(9), "{}", r.explanation);
}

#[test]
fn without_switches_nothing_is_claimed() {
    let items = retain(false);
    let r = items.iter().find(|r| r.item_id == 1).expect("request 1 retained");
    let doc = ItemExplanation::parse(&r.explanation);
    let (wakers, preempters) = (doc.woken_by, doc.preempted_by);
    assert!(wakers.is_empty() && preempters.is_empty(), "{}", r.explanation);
    assert!(!r.explanation.contains("woken_by"));
}

#[test]
fn stored_request_reads_back_with_its_causes() {
    let items = retain(true);
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
    // The agent stores begin times from its own clock; put them in the window.
    let items: Vec<_> = items
        .into_iter()
        .map(|mut r| {
            r.begin_us = now - 500_000;
            r
        })
        .collect();
    tailprof_store::write_items(&store.window_file(Table::Items, "h", now - 1_000_000, now), &meta, &items).unwrap();
    let reader = tailprof_store::StoreReader::new(Store::at(&root));
    let s = tailprof_analyze::store_query::stored_items(&reader, None, now - 3_600_000_000, now + 1_000_000, None);
    let it = s.items.iter().find(|i| i.item_id == 1).expect("request 1 in the store");
    assert_eq!(it.woken_by.len(), 1);
    let w = &it.woken_by[0];
    assert_eq!((w.ns, w.tid, w.comm.as_str(), w.item, w.irq), (13 * MS, 21, "locker", Some(7), None));
    assert_eq!(w.class.as_deref(), Some("lock-holder"));
    // The critical path reads back in the trace analysis' shape.
    let during: Vec<(&str, u64)> = w.during.iter().map(|d| (d.state.name(), d.ns)).collect();
    assert_eq!(during, vec![("cpu", 13 * MS * 2 / 3), ("cpu", 13 * MS - 13 * MS * 2 / 3)]);
    let json = serde_json::to_value(&it.woken_by[0]).unwrap();
    assert_eq!(json["during"][0]["state"], "cpu", "{json}");
    assert!(json["during"][0]["frames"].is_array(), "{json}");
    assert_eq!(it.preempted_by.len(), 1);
    assert_eq!((it.preempted_by[0].pid, it.preempted_by[0].ns, it.preempted_by[0].item), (30, 2 * MS, Some(9)));
    let json = serde_json::to_value(&it.woken_by[0]).unwrap();
    assert_eq!((json["item"].as_u64(), json["class"].as_str()), (Some(7), Some("lock-holder")), "{json}");
    let json = serde_json::to_value(&it.preempted_by[0]).unwrap();
    assert_eq!(json["item"].as_u64(), Some(9), "{json}");
    // The text names them.
    let text = tailprof_present::store_view::stored_items_text(&s, 0);
    assert!(text.contains("blocked 13.000 ms woken by locker (pid 20, tid 21), inside item 7 (lock-holder)"), "{text}");
    assert!(text.contains("runnable 2.000 ms behind hog (pid 30, tid 30), inside item 9"), "{text}");
    assert!(text.contains("meanwhile cpu 8.667 ms"), "{text}");
}
