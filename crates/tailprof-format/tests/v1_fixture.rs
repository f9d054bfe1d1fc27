//! Old traces stay readable: `tests/data/v1.trace` was written by the version-1 writer
//! (before stacks and switches existed) and is committed, with the records it holds in
//! `tests/data/v1.expected` (one line per record, fields as version 1 knew them). Every
//! later reader must read it back exactly.
//!
//! The fixture was produced once, with format version 1, by
//! `TAILPROF_WRITE_V1_FIXTURE=1 cargo test -p tailprof-format --test v1_fixture -- --ignored`
//! (the generator refuses to run with any other format version, so it can never overwrite the
//! fixture with a newer one).

use tailprof_format::*;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// One line per record with exactly the fields format version 1 stores.
fn describe(r: &Record) -> String {
    match r {
        Record::Sample(s) => format!(
            "sample time={} event={} ip={:#x} pid={} tid={} cpu={} period={} cpumode={:?} addr={:?} weight={:?} data_src={:?} regs={:?}",
            s.time, s.event, s.ip, s.pid, s.tid, s.cpu, s.period, s.cpumode, s.addr, s.weight, s.data_src, s.regs
        ),
        Record::Mmap(m) => format!(
            "mmap time={} pid={} tid={} start={:#x} len={:#x} pgoff={:#x} prot={} cpumode={:?} path={:?} build_id={:?}",
            m.time, m.pid, m.tid, m.start, m.len, m.pgoff, m.prot, m.cpumode, m.path, m.build_id
        ),
        Record::Comm(c) => format!("comm time={} pid={} tid={} exec={} comm={:?}", c.time, c.pid, c.tid, c.exec, c.comm),
        Record::Fork(t) => format!("fork time={} pid={} ppid={} tid={} ptid={}", t.time, t.pid, t.ppid, t.tid, t.ptid),
        Record::Exit(t) => format!("exit time={} pid={} ppid={} tid={} ptid={}", t.time, t.pid, t.ppid, t.tid, t.ptid),
        Record::Lost(l) => format!("lost time={} cpu={} event={:?} kind={:?} count={}", l.time, l.cpu, l.event, l.kind, l.count),
        Record::Throttle(t) => format!("throttle time={} cpu={} event={:?} throttled={}", t.time, t.cpu, t.event, t.throttled),
        Record::Marker(m) => format!(
            "marker time={} pid={} tid={} kind={:?} item={} class={} source={:?}",
            m.time, m.pid, m.tid, m.kind, m.item, m.class, m.source
        ),
        Record::ItemClass(c) => format!("item_class time={} pid={} id={} name={:?}", c.time, c.pid, c.id, c.name),
        #[allow(unreachable_patterns)]
        other => format!("not a version-1 record: {other:?}"),
    }
}

fn header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(250_000), ..Default::default() }],
        clock: Some(ClockInfo::Monotonic),
        source: "record".into(),
        cmdline: vec!["tailprof".into(), "record".into(), "--".into(), "./app".into()],
        hostname: Some("fixture-host".into()),
        nr_cpus: Some(2),
        ..Default::default()
    }
}

/// The records of the fixture: every version-1 record kind, optional fields present and
/// absent, registers, a time step back (a new chunk), several chunks.
fn fixture_records() -> Vec<Record> {
    let mut out = vec![
        Record::Comm(Comm { time: 0, pid: 100, tid: 100, exec: false, comm: "app".into() }),
        Record::Mmap(Mmap {
            time: 0,
            pid: 100,
            tid: 100,
            start: 0x5555_0000_0000,
            len: 0x20_0000,
            pgoff: 0x1000,
            prot: 5,
            cpumode: CpuMode::User,
            path: "/usr/bin/app".into(),
            build_id: Some(vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]),
        }),
        Record::Mmap(Mmap {
            time: 1_000,
            pid: 100,
            tid: 100,
            start: 0x7f00_0000_0000,
            len: 0x1_0000,
            pgoff: 0,
            prot: 0,
            cpumode: CpuMode::User,
            path: "/lib/libc.so.6".into(),
            build_id: None,
        }),
        Record::Fork(Task { time: 1_500, pid: 100, ppid: 100, tid: 101, ptid: 100 }),
        Record::ItemClass(ItemClass { time: 1_900, pid: 100, id: 3, name: "select".into() }),
    ];
    let mut t = 2_000u64;
    for i in 0..40u64 {
        if i % 10 == 3 {
            out.push(Record::Marker(Marker {
                time: t,
                pid: 100,
                tid: 100 + (i % 2) as u32,
                kind: MarkerKind::Begin,
                item: i,
                class: 3,
                source: MarkerSource::Api,
            }));
        }
        if i % 10 == 8 {
            out.push(Record::Marker(Marker {
                time: t,
                pid: 100,
                tid: 100 + (i % 2) as u32,
                kind: MarkerKind::End,
                item: Marker::UNKNOWN_ITEM,
                class: 0,
                source: MarkerSource::Uprobe,
            }));
        }
        out.push(Record::Sample(Sample {
            time: t,
            event: 0,
            ip: if i % 7 == 0 { 0xffff_ffff_8100_1234 } else { 0x5555_0000_1000 + (i * 37 % 11) * 16 },
            pid: 100,
            tid: 100 + (i % 2) as u32,
            cpu: (i % 2) as u32,
            period: 250_000,
            cpumode: if i % 7 == 0 { CpuMode::Kernel } else { CpuMode::User },
            addr: (i % 3 == 0).then_some(0x7ffd_0000_0000 + i * 64),
            weight: (i % 5 == 0).then_some(30 + i),
            data_src: (i % 4 == 0).then_some(0x6810_0142),
            regs: if i % 6 == 0 { vec![i, u64::MAX - i, 0x7ffd_1234] } else { Vec::new() },
            ..Default::default()
        }));
        if i == 20 {
            out.push(Record::Lost(Lost { time: t, cpu: 1, event: Some(0), kind: LossKind::RingFull, count: 17 }));
            out.push(Record::Lost(Lost { time: t, cpu: 0, event: None, kind: LossKind::Markers, count: 2 }));
            out.push(Record::Throttle(Throttle { time: t + 1, cpu: 0, event: Some(0), throttled: true }));
            out.push(Record::Throttle(Throttle { time: t + 2, cpu: 0, event: Some(0), throttled: false }));
        }
        if i == 25 {
            // A sample that goes back in time: the writer starts a new chunk.
            t -= 100_000;
        }
        t += 250_000 + (i * 7919 % 5000);
    }
    out.push(Record::Comm(Comm { time: t, pid: 100, tid: 101, exec: true, comm: "worker ü".into() }));
    out.push(Record::Exit(Task { time: t + 10, pid: 100, ppid: 100, tid: 101, ptid: 100 }));
    out
}

fn write_fixture_bytes() -> Vec<u8> {
    let opts = WriterOptions { max_records: 16, ..Default::default() };
    let mut w = TraceWriter::with_options(Vec::new(), &header(), opts).unwrap();
    for r in fixture_records() {
        w.write(&r).unwrap();
    }
    w.add_build_id(BuildIdEntry { path: "/usr/bin/app".into(), build_id: vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4] }).unwrap();
    w.finish_into_inner(Some(9_999_000)).unwrap().0
}

fn expected_text(records: &[Record]) -> String {
    records.iter().map(|r| describe(r) + "\n").collect()
}

#[test]
#[ignore = "writes the committed fixture; only ever with format version 1"]
fn write_v1_fixture() {
    if std::env::var_os("TAILPROF_WRITE_V1_FIXTURE").is_none() {
        return;
    }
    assert_eq!(tailprof_format::chunk::FORMAT_VERSION, 1, "the fixture must be written by the version-1 writer");
    std::fs::create_dir_all(DATA).unwrap();
    std::fs::write(format!("{DATA}/v1.trace"), write_fixture_bytes()).unwrap();
    std::fs::write(format!("{DATA}/v1.expected"), expected_text(&fixture_records())).unwrap();
}

#[test]
fn v1_fixture_reads_back_exactly() {
    let bytes = std::fs::read(format!("{DATA}/v1.trace")).unwrap();
    assert_eq!(&bytes[8..10], &[1, 0], "the fixture is a version-1 file");
    let expected = std::fs::read_to_string(format!("{DATA}/v1.expected")).unwrap();
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    assert_eq!(r.header(), &header());
    let mut sink = VecSink::default();
    let s = r.read_all(&mut sink).unwrap();
    assert!(s.complete);
    assert_eq!((s.damaged_chunks, s.damaged_bytes, s.truncated_bytes, s.skipped_chunks, s.skipped_records), (0, 0, 0, 0, 0));
    assert!(s.chunks > 5, "the fixture spans several chunks: {s:?}");
    assert_eq!(expected_text(&sink.0), expected);
    // The records are exactly what was written (new fields at their defaults).
    assert_eq!(sink.0, fixture_records());
    assert_eq!(r.build_ids(), &[BuildIdEntry { path: "/usr/bin/app".into(), build_id: vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4] }]);
    let (_, stats, dur) = r.summarize().unwrap();
    assert_eq!(dur, Some(9_999_000));
    assert_eq!(stats.samples, 40);
    assert_eq!((stats.lost_records, stats.lost_markers, stats.throttle_events, stats.unthrottle_events), (17, 2, 1, 1));
}
