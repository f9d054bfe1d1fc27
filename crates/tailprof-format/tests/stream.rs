//! The record stream (`Sink`): a sink that stops ends the reading, a failing sink's error
//! is returned, and the writer is a sink (a trace copied through it reads back the same).

use tailprof_format::synth::{intern_all, random_build_ids, random_stacked_records, Rng};
use tailprof_format::*;

fn header() -> TraceHeader {
    TraceHeader { source: "record".into(), clock: Some(ClockInfo::Monotonic), ..Default::default() }
}

/// At most 7 records per chunk, so a short trace spans many chunks.
fn small_chunks() -> WriterOptions {
    WriterOptions { max_records: 7, round_records: 5, min_records: 2, ..Default::default() }
}

fn samples(n: u64) -> Vec<u8> {
    let mut w = TraceWriter::with_options(Vec::new(), &header(), small_chunks()).unwrap();
    for t in 0..n {
        w.write_sample(&Sample { time: 1_000 + t, ip: 0x1000 + t % 5, pid: 1, tid: 1, period: 1, ..Default::default() }).unwrap();
    }
    w.finish_into_inner(Some(n)).unwrap().0
}

/// Takes the first `limit` records, then stops.
#[derive(Default)]
struct FirstN {
    limit: usize,
    seen: Vec<Record>,
}

impl Sink for FirstN {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.seen.push(r.clone());
        self.flow()
    }
    fn flow(&self) -> Flow {
        if self.seen.len() >= self.limit {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

#[test]
fn reader_stops_reading_when_the_sink_stops() {
    let bytes = samples(2_000);
    let mut all = VecSink::default();
    let full = TraceReader::from_bytes(bytes.clone()).unwrap().read_all(&mut all).unwrap();
    assert_eq!(all.0.len(), 2_000);
    assert!(full.complete && !full.stopped_early);
    assert!(full.chunks > 250, "{full:?}");

    let mut first = FirstN { limit: 10, ..Default::default() };
    let s = TraceReader::from_bytes(bytes).unwrap().read_all(&mut first).unwrap();
    assert_eq!(first.seen, all.0[..10]);
    assert!(s.stopped_early && !s.complete, "{s:?}");
    // Only the chunks holding those records were decoded: the header chunk and two chunks
    // of at most 7 records (the rest of the file was never looked at).
    assert!(s.chunks <= 3, "{s:?}");
    assert!(s.records <= 14, "{s:?}");
}

#[test]
fn a_trace_copied_through_the_writer_as_a_sink_reads_back_the_same() {
    for seed in 0..8u64 {
        let mut rng = Rng::new(seed);
        let (table, records) = random_stacked_records(&mut rng, 300);
        let build_ids = random_build_ids(&mut rng, 4);
        let mut w = TraceWriter::with_options(Vec::new(), &header(), small_chunks()).unwrap();
        assert!(intern_all(&mut w, &table));
        for r in &records {
            w.write(r).unwrap();
        }
        for b in &build_ids {
            w.add_build_id(b.clone()).unwrap();
        }
        let original = w.finish_into_inner(Some(1)).unwrap().0;

        // Copy: reader → writer (as a Sink).
        let mut copy = TraceWriter::new(Vec::new(), &header()).unwrap();
        TraceReader::from_bytes(original.clone()).unwrap().read_all(&mut copy).unwrap();
        let copied = copy.finish_into_inner(Some(1)).unwrap().0;

        let read = |bytes: Vec<u8>| {
            let mut r = TraceReader::from_bytes(bytes).unwrap();
            let mut sink = StacksSink::default();
            r.read_all(&mut sink).unwrap();
            assert_eq!(sink.bad_defs, 0);
            let resolved: Vec<(Record, Vec<Frame>)> = sink
                .records
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    let id = match &mut r {
                        Record::Sample(s) => std::mem::take(&mut s.stack),
                        Record::Switch(w) => std::mem::take(&mut w.stack),
                        Record::Wakeup(w) => std::mem::take(&mut w.stack),
                        _ => StackId::NONE,
                    };
                    (r, sink.stacks.frames_leaf_first(id).collect())
                })
                .collect();
            (resolved, r.build_ids().to_vec())
        };
        let (a, ids_a) = read(original);
        let (b, ids_b) = read(copied);
        assert_eq!(a.len(), records.len(), "seed {seed}");
        assert_eq!(a, b, "seed {seed}");
        assert_eq!(ids_a, ids_b, "seed {seed}");
    }
}

#[test]
fn a_failing_sink_stops_the_reader_with_its_error() {
    let mut rng = Rng::new(3);
    let (table, records) = random_stacked_records(&mut rng, 200);
    assert!(!table.is_empty());
    let mut w = TraceWriter::with_options(Vec::new(), &header(), small_chunks()).unwrap();
    assert!(intern_all(&mut w, &table));
    for r in &records {
        w.write(r).unwrap();
    }
    let bytes = w.finish_into_inner(Some(1)).unwrap().0;

    // A writer that already has stacks of its own cannot take the stream's ids.
    let mut target = TraceWriter::new(Vec::new(), &header()).unwrap();
    target.intern_stack(&[Frame::user(0xdead), Frame::user(0xbeef)]);
    let err = TraceReader::from_bytes(bytes).unwrap().read_all(&mut target).unwrap_err();
    assert!(matches!(err, FormatError::BadStackDef(_)), "{err}");
    assert_eq!(target.flow(), Flow::Continue, "the error was taken");
}

/// `defs_since` (what the import loop hands its sink per record) is the tail of `defs`,
/// without walking the nodes before it (the import loop called `defs().skip(n)` per
/// record: quadratic in the stack nodes of a `perf record -g` file).
#[test]
fn defs_since_is_the_tail_of_defs() {
    let mut rng = Rng::new(9);
    let (table, _) = random_stacked_records(&mut rng, 200);
    let all: Vec<StackDef> = table.defs().collect();
    for n in [0, 1, all.len() / 2, all.len(), all.len() + 5] {
        let tail: Vec<StackDef> = table.defs_since(n).collect();
        assert_eq!(tail, all[n.min(all.len())..], "{n}");
    }
}

/// `--item-event` hits (side-band kind 11) read back as written, every argument kind; a
/// name over the bound is refused by the writer.
#[test]
fn item_events_round_trip() {
    let evs = vec![
        ItemEvent {
            time: 10,
            pid: 3,
            tid: 4,
            kind: ItemEventKind::SpanStart,
            name: "lock__wait".into(),
            args: vec![EventArg::U64(16384)],
            at: EventAt::Free,
        },
        ItemEvent { time: 12, pid: 3, tid: 4, kind: ItemEventKind::SpanEnd, name: "lock__wait".into(), args: Vec::new(), at: EventAt::End },
        ItemEvent {
            time: 13,
            pid: 3,
            tid: 5,
            kind: ItemEventKind::Instant,
            name: "tick".into(),
            args: vec![EventArg::I64(-7), EventArg::U64(3), EventArg::Text("ShareLock".into())],
            at: EventAt::Begin,
        },
        ItemEvent {
            time: 14,
            pid: 3,
            tid: 5,
            kind: ItemEventKind::Instant,
            name: "q".into(),
            args: vec![EventArg::Text("select 1".into())],
            at: EventAt::Free,
        },
    ];
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for e in &evs {
        w.write(&Record::ItemEvent(e.clone())).unwrap();
    }
    let too_long = ItemEvent { name: "x".repeat(ItemEvent::MAX_NAME + 1), ..evs[0].clone() };
    assert!(w.write(&Record::ItemEvent(too_long)).is_err());
    let bytes = w.finish_into_inner(None).unwrap().0;
    let mut sink = VecSink::default();
    TraceReader::from_bytes(bytes).unwrap().read_all(&mut sink).unwrap();
    let got: Vec<ItemEvent> = sink
        .0
        .into_iter()
        .filter_map(|r| match r {
            Record::ItemEvent(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(got, evs);
}
