//! Issue 10 finding #5: a target that writes many unmatched begin/end markers must not
//! make the items join quadratic. Matching ends uses a map, not a scan of the thread's
//! stack; these tests check the counted results on inputs a quadratic join could not
//! finish (no timing assertion: the machine is shared).

use tailprof_analyze::items::{ItemsJoin, ItemsOptions, ItemsReport};
use tailprof_analyze::Symbolizer;
use tailprof_format::{CpuMode, EventDesc, Marker, MarkerKind, MarkerSource, Record, Sample, Sink, TraceHeader};

const PID: u32 = 7;
const PERIOD: u64 = 1_000;

fn header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    }
}

fn marker(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Api })
}

fn sample(time: u64, tid: u32) -> Record {
    Record::Sample(Sample { time, pid: PID, tid, ip: 0x1000, period: PERIOD, cpumode: CpuMode::User, ..Default::default() })
}

/// Feeds records as they are produced (no Vec of 500k records).
fn join(records: impl Iterator<Item = Record>) -> ItemsReport {
    let mut j = ItemsJoin::new(&header(), &ItemsOptions::default()).unwrap();
    for r in records {
        j.handle_record(&r);
    }
    j.finish(&mut Symbolizer::default()).unwrap()
}

const N: u64 = 200_000;

#[test]
fn many_unmatched_begins_and_ends_are_counted_in_linear_time() {
    // One thread: N nested begins (ids 1..=N), N ends of ids nobody began, then the
    // oldest half ended oldest first (the worst case for a scan from the top), with a
    // sample after each phase.
    let t = |i: u64| i * 10;
    let begins = (1..=N).map(|i| marker(t(i), 1, MarkerKind::Begin, i));
    let s1 = std::iter::once(sample(t(N) + 1, 1));
    let stray = (1..=N).map(|i| marker(t(N + i), 1, MarkerKind::End, 10 * N + i));
    let s2 = std::iter::once(sample(t(2 * N) + 1, 1));
    let oldest = (1..=N / 2).map(|i| marker(t(2 * N + i), 1, MarkerKind::End, i));
    let s3 = std::iter::once(sample(t(3 * N), 1));
    let r = join(begins.chain(s1).chain(stray).chain(s2).chain(oldest).chain(s3));

    assert_eq!(r.markers, 2 * N + N / 2);
    assert_eq!(r.items.len() as u64, N);
    // N stray ends, plus the N/2 items still open at the end.
    assert_eq!(r.unmatched_markers, N + N / 2);
    assert_eq!(r.open_at_end, N / 2);
    assert_eq!(r.outside_samples, 0);
    // Every sample went to the innermost open item, N.
    assert_eq!(r.item(N).unwrap().samples, 3);
    assert_eq!(r.items.iter().map(|i| i.samples).sum::<u64>(), 3);
    // The ended half ends where its end marker was; the rest is open at the end.
    let first = r.item(1).unwrap();
    assert!(!first.open_at_end);
    assert_eq!(first.end_ns, t(2 * N + 1));
    let half = r.item(N / 2).unwrap();
    assert_eq!(half.end_ns, t(2 * N + N / 2));
    assert!(r.item(N / 2 + 1).unwrap().open_at_end);
}

#[test]
fn repeated_ids_deep_in_the_stack_close_innermost_first() {
    // Ids repeat (a hostile target reuses them): every end of an id closes the innermost
    // open item with that id, also far from the top of the stack and below the scanned
    // positions.
    let n = 50_000u64;
    let mut recs = Vec::new();
    let mut time = 0;
    let mut next = |recs: &mut Vec<Record>, kind, id| {
        time += 1;
        recs.push(marker(time, 3, kind, id));
    };
    for i in 0..n {
        next(&mut recs, MarkerKind::Begin, i % 3); // ids 0, 1, 2, 0, 1, 2, ...
    }
    // End id 1 n/3 times (every item with id 1), innermost first; then one more (stray).
    let ones = (0..n).filter(|i| i % 3 == 1).count() as u64;
    for _ in 0..=ones {
        next(&mut recs, MarkerKind::End, 1);
    }
    // UNKNOWN_ITEM ends close the top: the last item begun (id 2 or 0), then the next
    // open one below, skipping the closed id-1 items.
    next(&mut recs, MarkerKind::End, Marker::UNKNOWN_ITEM);
    next(&mut recs, MarkerKind::End, Marker::UNKNOWN_ITEM);
    recs.push(sample(time + 1, 3));
    let r = join(recs.into_iter());

    assert_eq!(r.items.len() as u64, n);
    assert_eq!(r.unmatched_markers, 1 + (n - ones - 2));
    assert_eq!(r.open_at_end, n - ones - 2);
    // Items are sorted by begin time = push order; item k (0-based) began at time k+1.
    let by_begin = |k: u64| r.items.iter().find(|i| i.begin_ns == k + 1).unwrap();
    // The innermost id-1 item closed first: the ends of the id-1 items run backwards.
    let ones_idx: Vec<u64> = (0..n).filter(|i| i % 3 == 1).collect();
    let end0 = n + 1; // time of the first end marker
    for (j, &k) in ones_idx.iter().rev().enumerate() {
        let it = by_begin(k);
        assert!(!it.open_at_end, "item {k}");
        assert_eq!(it.end_ns, end0 + j as u64, "item {k}");
    }
    // The two top non-1 items closed by UNKNOWN_ITEM ends.
    let mut non_ones: Vec<u64> = (0..n).filter(|i| i % 3 != 1).collect();
    let top = non_ones.pop().unwrap();
    let second = non_ones.pop().unwrap();
    assert!(!by_begin(top).open_at_end && !by_begin(second).open_at_end);
    let third = *non_ones.last().unwrap();
    assert!(by_begin(third).open_at_end);
    // The sample went to the item now on top.
    assert_eq!(r.items.iter().filter(|i| i.samples == 1).count(), 1);
    assert_eq!(by_begin(third).samples, 1);
}
