use super::*;
use tailprof_format::MarkerSource;

fn mk(kind: MarkerKind, t: u64, item: u64) -> Marker {
    Marker { time: t, pid: 1, tid: 2, kind, item, class: 0, source: MarkerSource::default() }
}

#[test]
fn keeps_only_slow_requests() {
    let mut r = TailRetainer::new(None, 99.0);
    for i in 0..50u64 {
        let t = i * 10_000_000;
        r.handle_marker(&mk(MarkerKind::Begin, t, i), "srv");
        r.handle_marker(&mk(MarkerKind::End, t + 1_000_000, i), "srv");
    }
    let s = Sample { time: 600_000_000, tid: 2, pid: 1, period: 1_000_000, ..Default::default() };
    r.handle_sample(&s, &[(0, 0x10)]);
    r.handle_marker(&mk(MarkerKind::Begin, 590_000_000, 99), "srv");
    r.handle_marker(&mk(MarkerKind::End, 640_000_000, 99), "srv");
    let (items, lat) = r.take_window(0, 1, &|_| Some("ab".into()));
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].item_id, 99);
    assert_eq!(items[0].samples, 1);
    assert!(items[0].explanation.contains("\"ab\""));
    assert_eq!(lat.iter().map(|l| l.count).sum::<u64>(), 51);
}

fn marker(kind: MarkerKind, t: u64, pid: u32, tid: u32, item: u64) -> Marker {
    Marker { time: t, pid, tid, kind, item, class: 0, source: MarkerSource::default() }
}

/// MAX_OPEN requests open at once (16 processes, 41 threads each, 50 nested requests
/// per thread), all ended without their id: every end examines one entry, where a
/// scan of the open requests would examine ~n²/2 = 5·10⁸.
#[test]
fn unknown_item_ends_take_linear_work_with_max_open() {
    let mut r = TailRetainer::new(None, 0.0);
    let n = MAX_OPEN as u64;
    for i in 0..n {
        let (pid, tid) = ((i / 2048) as u32 + 1, (i / 50) as u32 + 1000);
        r.handle_marker(&marker(MarkerKind::Begin, i, pid, tid, i), "srv");
    }
    assert_eq!(r.open_requests(), n as usize);
    assert_eq!(r.stats.evicted_open, 0);
    for i in 0..n {
        let (pid, tid) = ((i / 2048) as u32 + 1, (i / 50) as u32 + 1000);
        r.handle_marker(&marker(MarkerKind::End, n + i, pid, tid, Marker::UNKNOWN_ITEM), "srv");
    }
    assert_eq!((r.stats.requests, r.stats.unmatched_ends), (n, 0));
    assert_eq!(r.open_requests(), 0);
    assert!(r.match_probes <= 2 * n, "{} probes for {n} ends", r.match_probes);
    // and with ids, in an order unrelated to the begins
    for i in 0..n {
        r.handle_marker(&marker(MarkerKind::Begin, i, 1 + (i % 7) as u32, 5, i), "srv");
    }
    let before = r.match_probes;
    for i in (0..n).rev().step_by(2).chain((0..n).step_by(2)) {
        r.handle_marker(&marker(MarkerKind::End, n + i, 1 + (i % 7) as u32, 5, i), "srv");
    }
    // 7 processes × MAX_OPEN_PER_PROCESS: the per-process bound evicted the oldest of each
    let evicted = r.stats.evicted_open;
    assert_eq!(evicted, n - 7 * MAX_OPEN_PER_PROCESS as u64);
    assert_eq!(r.stats.requests, n + (n - evicted));
    assert_eq!(r.stats.unmatched_ends, evicted);
    assert!(r.match_probes - before <= 2 * n);
}

#[test]
fn an_end_without_id_ends_the_innermost_request() {
    let mut r = TailRetainer::new(Some(1), 0.0);
    r.handle_marker(&marker(MarkerKind::Begin, 10, 1, 2, 100), "srv");
    r.handle_marker(&marker(MarkerKind::Begin, 20, 1, 2, 200), "srv");
    r.handle_marker(&marker(MarkerKind::Begin, 25, 1, 3, 300), "srv");
    r.handle_marker(&marker(MarkerKind::End, 30, 1, 2, Marker::UNKNOWN_ITEM), "srv");
    r.handle_marker(&marker(MarkerKind::End, 40, 1, 2, Marker::UNKNOWN_ITEM), "srv");
    r.handle_marker(&marker(MarkerKind::End, 50, 1, 2, Marker::UNKNOWN_ITEM), "srv");
    let (items, _) = r.take_window(0, 1, &|_| None);
    let ids: Vec<u64> = items.iter().map(|i| i.item_id).collect();
    assert_eq!(ids, [200, 100]);
    assert_eq!(r.stats.unmatched_ends, 1);
    assert_eq!(r.open_requests(), 1, "thread 3's request is untouched");
}

#[test]
fn bounds_evict_and_count() {
    // per process: the oldest goes
    let mut r = TailRetainer::new(None, 0.0);
    let n = MAX_OPEN_PER_PROCESS as u64 + 5;
    for i in 0..n {
        r.handle_marker(&marker(MarkerKind::Begin, i, 9, 9, i), "leaky");
    }
    assert_eq!((r.open_requests(), r.stats.evicted_open), (MAX_OPEN_PER_PROCESS, 5));
    r.handle_marker(&marker(MarkerKind::End, n, 9, 9, 0), "leaky");
    r.handle_marker(&marker(MarkerKind::End, n, 9, 9, 5), "leaky");
    assert_eq!((r.stats.unmatched_ends, r.stats.requests), (1, 1));
    // a thread that exits with requests open: dropped at the next window, counted
    r.handle_marker(&marker(MarkerKind::Begin, n, 9, 10, 1), "leaky");
    r.handle_exit(9, 10, n + 1);
    assert_eq!(r.open_requests(), MAX_OPEN_PER_PROCESS);
    r.take_window(0, 1, &|_| None);
    assert_eq!(r.open_requests(), MAX_OPEN_PER_PROCESS, "kept for one more window");
    r.take_window(1, 2, &|_| None);
    assert_eq!((r.stats.abandoned_open, r.open_requests()), (1, MAX_OPEN_PER_PROCESS - 1));
    // the process exits: all of its requests go
    r.handle_exit(9, 9, n + 2);
    r.take_window(2, 3, &|_| None);
    r.take_window(3, 4, &|_| None);
    assert_eq!(r.open_requests(), 0);
    assert_eq!(r.stats.abandoned_open, MAX_OPEN_PER_PROCESS as u64);
    // a begin of an item already open replaces it
    r.handle_marker(&marker(MarkerKind::Begin, 1, 4, 4, 1), "x");
    r.handle_marker(&marker(MarkerKind::Begin, 2, 4, 4, 1), "x");
    assert_eq!((r.open_requests(), r.stats.abandoned_open), (1, MAX_OPEN_PER_PROCESS as u64 + 1));
    // in all: MAX_OPEN over many processes
    let mut r = TailRetainer::new(None, 0.0);
    for i in 0..MAX_OPEN as u64 + 3 {
        r.handle_marker(&marker(MarkerKind::Begin, i, (i / 1000) as u32, i as u32, 1), "x");
    }
    assert_eq!((r.open_requests(), r.stats.evicted_open), (MAX_OPEN, 3));
}

#[test]
fn classes_beyond_the_bound_are_counted_as_other() {
    let mut r = TailRetainer::new(None, 0.0);
    let extra = 10u32;
    for c in 1..=MAX_CLASSES as u32 + extra {
        r.handle_class(&ItemClass { time: 0, pid: 1, id: c, name: format!("q{c}") });
        let mut b = marker(MarkerKind::Begin, 0, 1, 2, c as u64);
        b.class = c;
        r.handle_marker(&b, "db");
        r.handle_marker(&marker(MarkerKind::End, 5, 1, 2, c as u64), "db");
    }
    let (_, lat) = r.take_window(0, 1, &|_| None);
    assert_eq!(r.stats.requests_in_other_class, extra as u64);
    let other: u64 = lat.iter().filter(|l| l.class == OTHER_CLASS).map(|l| l.count).sum();
    assert_eq!(other, extra as u64);
    assert_eq!(lat.iter().map(|l| l.count).sum::<u64>(), (MAX_CLASSES as u32 + extra) as u64);
    assert_eq!(lat.iter().filter(|l| l.class != OTHER_CLASS).count(), MAX_CLASSES);
}

#[test]
fn kept_samples_are_bounded_by_frames() {
    let mut r = TailRetainer::new(None, 0.0);
    let frames: Vec<(u32, u64)> = (0..128).map(|i| (0, i)).collect();
    let n = MAX_KEPT_FRAMES / 128 + 100;
    for i in 0..n as u64 {
        let s = Sample { time: i, tid: 1, pid: 1, period: 1, ..Default::default() };
        r.handle_sample(&s, &frames);
    }
    assert!(r.kept_frames <= MAX_KEPT_FRAMES);
    assert_eq!(r.kept.len(), MAX_KEPT_FRAMES / 128);
    assert_eq!(r.stats.kept_samples_evicted, 100);
}

/// Issue 22 leftovers: the agent followed Go requests by OS thread, so a request whose
/// goroutine moved to another thread lost its samples there and got those of the
/// goroutine that ran on its first thread instead. Now (goroutine mode, the samples carry
/// R14) a request's samples are those of its goroutine on any thread, as in the join.
#[test]
fn go_requests_follow_their_goroutine_across_threads() {
    let ms = 1_000_000u64;
    let go = |kind, t: u64, tid: u32, g: u64| Marker { time: t, pid: 1, tid, kind, item: g, class: 0, source: MarkerSource::Uprobe };
    let sample = |t: u64, tid: u32, g: u64| Sample { time: t, pid: 1, tid, period: ms, regs: vec![g], ..Default::default() };
    let (a, b) = (0xc000_1000u64, 0xc000_2000u64);
    let mut r = TailRetainer::new(Some(0), 0.0);
    r.set_goroutine_key(Some(0));
    r.handle_marker(&go(MarkerKind::Begin, 0, 10, a), "srv");
    for t in 1..=3 {
        r.handle_sample(&sample(t * ms, 10, a), &[(0, 0x10)]);
    }
    // Goroutine b takes thread 10 and begins its own request; a moves to thread 11.
    r.handle_marker(&go(MarkerKind::Begin, 3 * ms + ms / 2, 10, b), "srv");
    for t in 4..=9 {
        r.handle_sample(&sample(t * ms, 10, b), &[(0, 0x20)]);
        if t <= 7 {
            r.handle_sample(&sample(t * ms, 11, a), &[(0, 0x10)]);
        }
    }
    // Thread 10 exiting does not end a's request (its goroutine lives on).
    r.handle_exit(1, 10, 7 * ms + 1);
    r.handle_marker(&go(MarkerKind::End, 8 * ms, 11, a), "srv");
    r.handle_marker(&go(MarkerKind::End, 9 * ms + ms / 2, 10, b), "srv");
    let (items, _) = r.take_window(0, 1, &|_| Some("ab".into()));
    let got: Vec<(u64, u64)> = items.iter().map(|i| (i.item_id, i.samples)).collect();
    assert!(got.contains(&(a, 7)), "a ran 3 samples on thread 10 and 4 on thread 11: {got:?}");
    assert!(got.contains(&(b, 6)), "b ran 6 samples on thread 10: {got:?}");
    assert_eq!((r.stats.requests, r.stats.unmatched_ends, r.stats.abandoned_open), (2, 0, 0));
    let a_row = items.iter().find(|i| i.item_id == a).unwrap();
    assert_eq!(a_row.off_cpu_ns, 8 * ms - 7 * ms, "wall time not covered by its samples");
    assert!(!a_row.explanation.contains("0x20") && !a_row.explanation.contains("\"offset\":32"), "{}", a_row.explanation);
}

/// Issue 22 leftovers: the agent's off-CPU time of a Go request was its wall time minus
/// its samples (its goroutine parked in the Go scheduler counted as off CPU, sampling
/// error included), where the trace path takes the switch-outs that carry the goroutine
/// register (`Switch::item_key`). Now, when the recorder records switches, a goroutine
/// request's off-CPU time is the intervals from a switch-out carrying its goroutine to the
/// thread's next switch-in, on any thread (the join's rule, `goroutine_off_interval`);
/// another goroutine's, and one switched out without the register, are not its.
#[test]
fn go_request_off_cpu_is_its_goroutines_switched_out_time() {
    let ms = 1_000_000u64;
    let go = |kind, t: u64, tid: u32, g: u64| Marker { time: t, pid: 1, tid, kind, item: g, class: 0, source: MarkerSource::Uprobe };
    let sample = |t: u64, tid: u32, g: u64| Sample { time: t, pid: 1, tid, period: ms, regs: vec![g], ..Default::default() };
    let sw = |t: u64, tid: u32, kind: tailprof_format::SwitchKind, key: Option<u64>| tailprof_format::Switch {
        time: t,
        pid: 1,
        tid,
        kind,
        item_key: key,
        ..Default::default()
    };
    use tailprof_format::SwitchKind::{In, OutBlocked, OutPreempted};
    let (a, b) = (0xc000_1000u64, 0xc000_2000u64);
    let mut r = TailRetainer::new(Some(0), 0.0);
    r.set_goroutine_key(Some(0));
    r.handle_marker(&go(MarkerKind::Begin, 0, 12, b), "srv");
    // b blocks on thread 12 (the first keyed switch: switches are recorded from here on).
    r.handle_switch(&sw(ms / 2, 12, OutBlocked, Some(b)));
    r.handle_marker(&go(MarkerKind::Begin, ms, 10, a), "srv");
    r.handle_sample(&sample(ms + ms / 2, 10, a), &[(0, 0x10)]);
    // a blocks on thread 10 for 3 ms.
    r.handle_switch(&sw(2 * ms, 10, OutBlocked, Some(a)));
    r.handle_switch(&sw(3 * ms, 12, In, None)); // b's 2.5 ms: not a's
    r.handle_switch(&sw(5 * ms, 10, In, None));
    r.handle_sample(&sample(5 * ms + ms / 2, 10, a), &[(0, 0x10)]);
    // A switch-out without the register (thread 10 in the scheduler, not a): not a's.
    r.handle_switch(&sw(5 * ms + 600_000, 10, OutPreempted, None));
    r.handle_switch(&sw(5 * ms + 700_000, 10, In, None));
    // a moves to thread 11 and is preempted there for 0.5 ms.
    r.handle_switch(&sw(6 * ms, 11, OutPreempted, Some(a)));
    r.handle_switch(&sw(6 * ms + ms / 2, 11, In, None));
    r.handle_sample(&sample(7 * ms, 11, a), &[(0, 0x10)]);
    r.handle_marker(&go(MarkerKind::End, 8 * ms, 11, a), "srv");
    r.handle_marker(&go(MarkerKind::End, 9 * ms, 12, b), "srv");
    let (items, _) = r.take_window(0, 1, &|_| Some("ab".into()));
    let row = |g: u64| items.iter().find(|i| i.item_id == g).unwrap_or_else(|| panic!("{g:#x} retained: {items:?}"));
    // Wall 7 ms, 3 samples of 1 ms: wall minus samples would say 4 ms.
    assert_eq!((row(a).samples, row(a).off_cpu_ns), (3, 3 * ms + ms / 2), "a's own switched-out time");
    // b began before the first keyed switch was seen: not known from switches, wall
    // minus samples (b's 2.5 ms interval did not go to a).
    assert_eq!(row(b).off_cpu_ns, 9 * ms, "b: wall minus samples");
    // A request begun before any keyed switch was seen keeps wall minus samples.
    let mut r = TailRetainer::new(Some(0), 0.0);
    r.set_goroutine_key(Some(0));
    r.handle_marker(&go(MarkerKind::Begin, 0, 10, a), "srv");
    r.handle_switch(&sw(ms, 10, OutBlocked, Some(a)));
    r.handle_switch(&sw(2 * ms, 10, In, None));
    r.handle_marker(&go(MarkerKind::End, 4 * ms, 10, a), "srv");
    let (items, _) = r.take_window(0, 1, &|_| Some("ab".into()));
    assert_eq!(items[0].off_cpu_ns, 4 * ms, "not known from switches: wall minus samples");
}
