//! The per-item join, estimators, anomaly flagging and explanations, on synthetic,
//! deterministic traces. Function names come from a small C program compiled here
//! (samples are placed at its functions' addresses through a synthetic MMAP).

mod common;

use common::*;
use std::path::PathBuf;
use tailprof_analyze::items::{explain, ItemsJoin, ItemsOptions, ItemsReport};
use tailprof_analyze::{AnalyzeError, Estimator, Symbolizer};
use tailprof_format::{CpuMode, EventDesc, ItemClass, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record, Sample, Sink, TraceHeader};

const PROG: &str = r#"
__attribute__((noinline)) int f1(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
__attribute__((noinline)) int f2(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 5; }
__attribute__((noinline)) int f3(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 7; }
int main(int argc, char **argv) { (void)argv; return f1(argc) + f2(argc) + f3(argc); }
"#;

const PID: u32 = 100;
const BASE: u64 = 0x5555_5555_4000;
const PERIOD: u64 = 100_000;

struct Prog {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Prog {
    fn build() -> Option<Prog> {
        let dir = tempfile::tempdir().unwrap();
        let path = compile("cc", dir.path(), "prog", PROG, &["-O1", "-g", "-fPIE", "-pie"])?;
        Some(Prog { _dir: dir, path })
    }
    /// An address inside function `f` (a few bytes past its start).
    fn ip(&self, f: &str) -> u64 {
        BASE + nm(&self.path, f) + 2
    }
    fn mmap(&self) -> Record {
        Record::Mmap(exec_mmap(PID, &self.path, BASE, None))
    }
}

fn cpu_clock_header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    }
}

fn s(time: u64, tid: u32, ip: u64) -> Record {
    Record::Sample(Sample { time, pid: PID, tid, ip, period: PERIOD, cpumode: CpuMode::User, ..Default::default() })
}

fn begin(time: u64, tid: u32, item: u64, class: u32) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind: MarkerKind::Begin, item, class, source: MarkerSource::Api })
}

fn end(time: u64, tid: u32, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind: MarkerKind::End, item, class: 0, source: MarkerSource::Api })
}

fn run(header: &TraceHeader, records: &[Record], opts: &ItemsOptions) -> Result<ItemsReport, AnalyzeError> {
    let mut j = ItemsJoin::new(header, opts)?;
    for r in records {
        j.handle_record(r);
    }
    j.finish(&mut Symbolizer::default())
}

fn fn_samples(r: &ItemsReport, id: u64) -> Vec<(String, u64)> {
    let it = r.item(id).unwrap_or_else(|| panic!("no item {id}"));
    let mut v: Vec<(String, u64)> = it.functions.iter().map(|f| (f.name.clone(), f.samples)).collect();
    v.sort();
    v
}

fn strs(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(a, b)| (a.to_string(), *b)).collect()
}

#[test]
fn join_attributes_samples_to_items_on_each_thread() {
    let Some(p) = Prog::build() else { return };
    let (f1, f2, f3) = (p.ip("f1"), p.ip("f2"), p.ip("f3"));
    let recs = vec![
        p.mmap(),
        s(50, 1, f3), // outside: nothing open yet
        begin(100, 1, 1, 0),
        begin(105, 2, 7, 0), // another thread, interleaved in time
        s(110, 1, f1),
        s(115, 2, f2),
        s(120, 1, f1),
        end(125, 2, Marker::UNKNOWN_ITEM), // closes 7, the most recent item of thread 2
        begin(130, 1, 2, 0),               // nested in 1
        s(135, 2, f3),                     // thread 2 has nothing open
        s(140, 1, f2),
        end(150, 1, 2),
        s(160, 1, f1),
        end(200, 1, 1),
        s(300, 1, f3),       // outside
        end(310, 1, 99),     // unmatched end
        begin(400, 1, 5, 0), // never closed
        s(410, 1, f2),
        s(500, 1, f2),
    ];
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    assert_eq!(r.items.iter().map(|i| i.id).collect::<Vec<_>>(), vec![1, 7, 2, 5], "sorted by begin");
    assert_eq!(fn_samples(&r, 1), strs(&[("f1", 3)]));
    assert_eq!(fn_samples(&r, 2), strs(&[("f2", 1)]));
    assert_eq!(fn_samples(&r, 7), strs(&[("f2", 1)]));
    assert_eq!(fn_samples(&r, 5), strs(&[("f2", 2)]));
    assert_eq!(r.outside_samples, 3);
    assert_eq!(r.total_samples, 10);
    assert_eq!(r.unmatched_markers, 2, "the stray end and the never-closed begin");
    assert_eq!(r.open_at_end, 1);
    let i1 = r.item(1).unwrap();
    assert_eq!((i1.begin_ns, i1.end_ns, i1.duration_ns, i1.samples, i1.tid), (100, 200, 100, 3, 1));
    assert_eq!((r.item(7).unwrap().duration_ns, r.item(2).unwrap().duration_ns), (20, 20));
    let i5 = r.item(5).unwrap();
    assert!(i5.open_at_end && !i1.open_at_end);
    assert_eq!(i5.end_ns, 500, "closed at the trace's last timestamp");
    assert_eq!(r.mode, "markers");
    assert_eq!(r.duration_source, "markers");
    assert_eq!(r.markers, 8);
}

#[test]
fn interleaved_items_on_one_thread_close_by_id() {
    let recs = vec![
        begin(100, 1, 10, 0),
        s(105, 1, 0x1000),
        begin(110, 1, 11, 0),
        s(115, 1, 0x2000),
        end(120, 1, 10), // closes 10 although 11 is on top
        s(125, 1, 0x2000),
        end(130, 1, 11),
    ];
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    assert_eq!((r.item(10).unwrap().samples, r.item(10).unwrap().duration_ns), (1, 20));
    assert_eq!((r.item(11).unwrap().samples, r.item(11).unwrap().duration_ns), (2, 20));
    assert_eq!(r.unmatched_markers, 0);
}

#[test]
fn both_estimators_on_known_counts_and_intervals() {
    let Some(p) = Prog::build() else { return };
    let (f1, f2) = (p.ip("f1"), p.ip("f2"));
    let mut recs = vec![p.mmap(), begin(1_000, 1, 1, 0)];
    // 10 samples of f1, then 3 of f2, one period apart.
    for i in 0..13u64 {
        recs.push(s(1_000 + (i + 1) * PERIOD, 1, if i < 10 { f1 } else { f2 }));
    }
    recs.push(end(1_000 + 14 * PERIOD, 1, 1));
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    assert_eq!((r.mean_interval_ns, r.interval_source.as_str()), (PERIOD as f64, "period"));
    assert_eq!(r.shown_estimator, Estimator::CountTimesInterval);
    let it = r.item(1).unwrap();
    assert_eq!(it.duration_ns, 14 * PERIOD);
    let f = &it.functions[0];
    assert_eq!((f.name.as_str(), f.samples), ("f1", 10));
    assert_eq!(f.est_ns, 10.0 * PERIOD as f64);
    assert_eq!(f.span_ns, 9 * PERIOD, "the paper's first-to-last span");
    assert!(f.reliable);
    let g = &it.functions[1];
    assert_eq!((g.name.as_str(), g.samples, g.span_ns), ("f2", 3, 2 * PERIOD));
    assert!(!g.reliable, "3 samples < 5");

    // Without a fixed clock period the interval is measured: median same-thread spacing,
    // robust to one long gap.
    let mut recs = vec![p.mmap(), begin(0, 1, 1, 0)];
    let mut t = 0;
    for i in 0..21u64 {
        t += if i == 10 { 5_000_000 } else { 50_000 };
        recs.push(s(t, 1, f1));
    }
    recs.push(end(t + 1, 1, 1));
    let r = run(&TraceHeader::default(), &recs, &ItemsOptions { estimator: Estimator::Span, ..Default::default() }).unwrap();
    assert_eq!((r.mean_interval_ns, r.interval_source.as_str()), (50_000.0, "measured"));
    assert_eq!(r.shown_estimator, Estimator::Span);
    let f = &r.item(1).unwrap().functions[0];
    assert_eq!((f.samples, f.est_ns, f.span_ns), (21, 21.0 * 50_000.0, t - 50_000));
}

/// The paper's sample application in miniature: queries of classes n=3 and n=5; each
/// query runs f1, f2, f3 for time proportional to n, except that the first query of each
/// class also spends a long time in f3 (the uncached work).
fn planted_trace(p: &Prog) -> (Vec<Record>, Vec<u64>) {
    let (f1, f2, f3) = (p.ip("f1"), p.ip("f2"), p.ip("f3"));
    let mut recs = vec![
        p.mmap(),
        Record::ItemClass(ItemClass { time: 0, pid: PID, id: 1, name: "n=3".into() }),
        Record::ItemClass(ItemClass { time: 0, pid: PID, id: 2, name: "n=5".into() }),
    ];
    let queries: [(u64, u32); 12] = [(1, 3), (2, 3), (3, 3), (4, 5), (5, 3), (6, 5), (7, 5), (8, 3), (9, 5), (10, 3), (11, 5), (12, 3)];
    let cold = vec![1, 4];
    let mut t = 1_000_000;
    for (id, n) in queries {
        let class = if n == 3 { 1 } else { 2 };
        recs.push(begin(t, 7, id, class));
        let jitter = id % 3; // small, deterministic variation between warm queries
        let mut counts = vec![(f1, 2 * n as u64 + jitter), (f2, 3 * n as u64), (f3, n as u64)];
        if cold.contains(&id) {
            counts[2].1 += 40 * n as u64;
        }
        for (ip, c) in counts {
            for _ in 0..c {
                t += PERIOD;
                recs.push(s(t, 7, ip));
            }
        }
        t += PERIOD / 2;
        recs.push(end(t, 7, id));
        t += 10 * PERIOD;
    }
    (recs, cold)
}

#[test]
fn mad_flags_exactly_the_planted_slow_items_and_names_the_function() {
    let Some(p) = Prog::build() else { return };
    let (recs, cold) = planted_trace(&p);
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    let flagged: Vec<u64> = r.items.iter().filter(|i| i.anomalous).map(|i| i.id).collect();
    assert_eq!(flagged, cold);
    for it in r.items.iter().filter(|i| i.anomalous) {
        assert_eq!(it.responsible, vec!["f3".to_owned()], "item {}", it.id);
        assert!(it.anomaly_score > 3.5);
    }
    assert!(r.items.iter().filter(|i| !i.anomalous).all(|i| i.responsible.is_empty()));
    assert_eq!(r.classes.len(), 2);
    let c3 = r.class_stats(&Some("n=3".into())).unwrap();
    assert_eq!((c3.items, c3.anomalous), (7, 1));

    // --explain: per-function time against the class median, f3 takes the excess.
    let e = explain(&r, 4).unwrap();
    assert_eq!(e.item.class.as_deref(), Some("n=5"));
    assert_eq!(e.baseline.items, 5);
    assert_eq!(e.diffs[0].name, "f3");
    assert_eq!(e.diffs[0].delta_ns, 200.0 * PERIOD as f64);
    assert!(e.diffs[0].share_of_excess > 0.9);
    assert_eq!(e.responsible, vec!["f3".to_owned()]);
    assert!(e.excess_ns > 0);
    // A warm item explains to nothing much, and unknown ids are an error.
    assert!(explain(&r, 2).unwrap().excess_ns.abs() < (5 * PERIOD) as i64);
    assert!(matches!(explain(&r, 999), Err(AnalyzeError::NoSuchItem { id: 999 })));

    // --class keeps one class; stats follow.
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions { class: Some("n=5".into()), ..Default::default() }).unwrap();
    assert_eq!(r.items.len(), 5);
    assert_eq!(r.items.iter().filter(|i| i.anomalous).map(|i| i.id).collect::<Vec<_>>(), vec![4]);
}

#[test]
fn register_mode_takes_the_item_from_the_sampled_register() {
    // Event samples di (bit 5) and r13 (bit 21): regs = [di, r13].
    let mut header = cpu_clock_header();
    header.events[0].regs_user_mask = (1 << 5) | (1 << 21);
    header.extra.insert("item_reg".into(), "r13".into());
    let rs = |time: u64, tid: u32, ip: u64, r13: u64| {
        Record::Sample(Sample {
            time,
            pid: PID,
            tid,
            ip,
            period: PERIOD,
            cpumode: CpuMode::User,
            regs: vec![0xdead, r13],
            ..Default::default()
        })
    };
    let recs = vec![
        rs(100, 1, 0x1000, 0),
        rs(200, 1, 0x1000, 42),
        rs(300, 2, 0x2000, 43), // user-level threads: items move between threads
        rs(400, 2, 0x1000, 42),
        rs(500, 1, 0x2000, 43),
        rs(600, 1, 0x2000, 0),
        Record::Sample(Sample { time: 700, pid: PID, tid: 1, ip: 0x1000, ..Default::default() }), // no regs
    ];
    let r = run(&header, &recs, &ItemsOptions::default()).unwrap();
    assert_eq!(r.mode, "register:r13");
    assert_eq!(r.duration_source, "samples");
    assert_eq!(r.outside_samples, 3);
    let a = r.item(42).unwrap();
    assert_eq!((a.samples, a.begin_ns, a.end_ns, a.duration_ns), (2, 200, 400, 200));
    let b = r.item(43).unwrap();
    assert_eq!((b.samples, b.duration_ns), (2, 200));
    assert_eq!(r.unmatched_markers, 0);
}

#[test]
fn goroutine_mode_keys_items_by_the_goroutine_not_the_thread() {
    // Probes on a Go binary: markers carry the goroutine (R14) as their item, samples
    // carry R14 (bit 22) in regs; a goroutine moves from thread 1 to thread 2.
    let mut header = cpu_clock_header();
    header.events[0].regs_user_mask = 1 << 22;
    header.extra.insert("item_key".into(), "goroutine:r14".into());
    let rs = |time: u64, tid: u32, ip: u64, g: u64| {
        Record::Sample(Sample { time, pid: PID, tid, ip, period: PERIOD, cpumode: CpuMode::User, regs: vec![g], ..Default::default() })
    };
    let m = |time: u64, tid: u32, kind: MarkerKind, g: u64| {
        Record::Marker(Marker { time, pid: PID, tid, kind, item: g, class: 0, source: MarkerSource::Uprobe })
    };
    const G1: u64 = 0x00c0_0000_1000;
    const G2: u64 = 0x00c0_0000_2000;
    let recs = vec![
        m(100, 1, MarkerKind::Begin, G1),
        rs(150, 1, 0x1000, G1),
        m(160, 1, MarkerKind::Begin, G2), // another goroutine begins on the same thread
        rs(170, 1, 0x2000, G2),
        rs(200, 2, 0x1000, G1),               // G1 moved to thread 2
        rs(250, 2, 0x1000, 0x00c0_0000_3000), // a goroutine with no item
        m(300, 2, MarkerKind::End, G1),
        rs(350, 1, 0x2000, G2),
        m(400, 1, MarkerKind::End, G2),
        m(500, 3, MarkerKind::Begin, G1), // the g reused: a new item
        rs(550, 3, 0x1000, G1),
        m(600, 1, MarkerKind::End, G1), // ends on another thread
    ];
    let r = run(&header, &recs, &ItemsOptions::default()).unwrap();
    assert_eq!(r.mode, "goroutine:r14");
    assert_eq!(r.items.len(), 3);
    let ids: Vec<u64> = r.items.iter().map(|i| i.id).collect();
    assert_eq!(ids, [1, 2, 3]);
    let one = r.item(1).unwrap();
    assert_eq!((one.samples, one.begin_ns, one.end_ns), (2, 100, 300));
    let two = r.item(2).unwrap();
    assert_eq!((two.samples, two.begin_ns, two.end_ns), (2, 160, 400));
    let three = r.item(3).unwrap();
    assert_eq!((three.samples, three.end_ns, three.open_at_end), (1, 600, false));
    assert_eq!(r.outside_samples, 1);
    assert_eq!(r.unmatched_markers, 0);
}

#[test]
fn losses_and_missing_markers() {
    // No markers and no register tag: a clear error.
    let recs = vec![s(100, 1, 0x1000)];
    assert!(matches!(run(&cpu_clock_header(), &recs, &ItemsOptions::default()), Err(AnalyzeError::NoItems)));
    // Dropped markers are reported.
    let recs =
        vec![begin(10, 1, 1, 0), Record::Lost(Lost { time: 20, cpu: 0, event: None, kind: LossKind::Markers, count: 17 }), end(30, 1, 1)];
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    assert_eq!(r.lost_markers, 17);
    // A bad event index is an error, not a panic.
    assert!(ItemsJoin::new(&cpu_clock_header(), &ItemsOptions { event: Some(3), ..Default::default() }).is_err());
}

#[test]
fn through_the_trace_format() {
    use tailprof_format::{TraceReader, TraceWriter};
    let Some(p) = Prog::build() else { return };
    let (recs, cold) = planted_trace(&p);
    let header = cpu_clock_header();
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    for r in &recs {
        w.write(r).unwrap();
    }
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    let mut reader = TraceReader::from_bytes(bytes).unwrap();
    let r = tailprof_analyze::items_report(&mut reader, &ItemsOptions::default(), &mut Symbolizer::default()).unwrap();
    assert_eq!(r.items.len(), 12);
    assert_eq!(r.items.iter().filter(|i| i.anomalous).map(|i| i.id).collect::<Vec<_>>(), cold);
    assert_eq!(r.items[0].class.as_deref(), Some("n=3"));
}

/// Issue 24 part 3: an item's trace context reaches its row as W3C hex; the selection's
/// `trace_id` lists only that trace's item, with the anomaly flags of the whole class.
#[test]
fn trace_ids_reach_rows_and_select_items() {
    use tailprof_analyze::items::document::{select, ItemSelection};
    use tailprof_analyze::items::parse_trace_id;
    use tailprof_format::ItemTrace;
    let Some(p) = Prog::build() else { return };
    let (mut recs, cold) = planted_trace(&p);
    // Trace context for every query, right after its begin.
    let mut i = 0;
    while i < recs.len() {
        if let Record::Marker(m) = &recs[i] {
            if m.kind == MarkerKind::Begin {
                let mut trace_id = [0u8; 16];
                trace_id[0] = 0xab;
                trace_id[15] = m.item as u8;
                let t = ItemTrace { time: m.time, pid: PID, tid: m.tid, item: m.item, trace_id, span_id: [m.item as u8; 8] };
                recs.insert(i + 1, Record::ItemTrace(t));
            }
        }
        i += 1;
    }
    let r = run(&cpu_clock_header(), &recs, &ItemsOptions::default()).unwrap();
    let q4 = r.item(4).unwrap();
    assert_eq!(q4.trace_id.as_deref(), Some("ab000000000000000000000000000004"));
    assert_eq!(q4.span_id.as_deref(), Some("0404040404040404"));

    let want = parse_trace_id("AB000000000000000000000000000004").unwrap();
    let sel = ItemSelection { trace_id: Some(want), ..Default::default() };
    let (shown, matching) = select(&r, &sel);
    assert_eq!((shown.iter().map(|&i| r.items[i].id).collect::<Vec<_>>(), matching), (vec![4], 1));
    assert!(r.items[shown[0]].anomalous && cold.contains(&4), "flagged against its whole class");
    let sel = ItemSelection { trace_id: parse_trace_id("ffff"), ..Default::default() };
    assert_eq!(select(&r, &sel).1, 0);
    assert_eq!(parse_trace_id("0"), None);
    assert_eq!(parse_trace_id("xyz"), None);
    assert_eq!(parse_trace_id(&"1".repeat(33)), None);
}
