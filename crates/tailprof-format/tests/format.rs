//! Integration tests of the trace format: round trips, truncation, damage, size.

use tailprof_format::chunk::{frame_chunk, ChunkKind, FILE_HEADER_LEN};
use tailprof_format::synth::{random_build_ids, random_records, Rng, Workload};
use tailprof_format::*;

fn header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(250_000), ..Default::default() }],
        clock: Some(ClockInfo::Monotonic),
        source: "record".into(),
        cmdline: vec!["tailprof".into(), "record".into(), "--".into(), "./app ünï".into()],
        hostname: Some("host".into()),
        nr_cpus: Some(2),
        ..Default::default()
    }
}

/// Small chunks, so short traces span many chunks.
fn small_chunks() -> WriterOptions {
    WriterOptions { max_records: 7, round_records: 5, min_records: 2, ..Default::default() }
}

fn write_trace(records: &[Record], opts: WriterOptions, build_ids: &[BuildIdEntry]) -> (Vec<u8>, WriteSummary) {
    let mut w = TraceWriter::with_options(Vec::new(), &header(), opts).unwrap();
    for (i, r) in records.iter().enumerate() {
        w.write(r).unwrap();
        if i % 11 == 10 {
            w.end_round().unwrap();
        }
    }
    for b in build_ids {
        w.add_build_id(b.clone()).unwrap();
    }
    w.finish_into_inner(Some(123_456)).unwrap()
}

fn read_back(bytes: Vec<u8>) -> (Vec<Record>, ReadSummary, TraceReader) {
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let mut sink = VecSink::default();
    let s = r.read_all(&mut sink).unwrap();
    (sink.0, s, r)
}

fn dedup_build_ids(v: &[BuildIdEntry]) -> Vec<BuildIdEntry> {
    let mut out: Vec<BuildIdEntry> = Vec::new();
    for e in v {
        match out.iter_mut().find(|x| x.path == e.path) {
            Some(x) => *x = e.clone(),
            None => out.push(e.clone()),
        }
    }
    out
}

#[test]
fn round_trip_random_records_is_exact() {
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed);
        let n = rng.below(600) as usize;
        let records = random_records(&mut rng, n);
        let nids = rng.below(12) as usize;
        let ids = random_build_ids(&mut rng, nids);
        let opts = if seed % 2 == 0 { small_chunks() } else { WriterOptions::default() };
        let opts = WriterOptions {
            time_codec: [TimeCodec::Paper16, TimeCodec::Leb128, TimeCodec::Planes][seed as usize % 3],
            zstd_level: if seed % 5 == 0 { 0 } else { 1 },
            ..opts
        };
        let (bytes, ws) = write_trace(&records, opts, &ids);
        assert_eq!(ws.bytes, bytes.len() as u64);
        let (got, s, r) = read_back(bytes);
        assert_eq!(got.len(), records.len(), "seed {seed}");
        for (i, (a, b)) in got.iter().zip(&records).enumerate() {
            assert_eq!(a, b, "seed {seed} record {i}");
        }
        assert_eq!(r.header(), &header());
        assert_eq!(r.build_ids(), &dedup_build_ids(&ids)[..], "seed {seed}");
        assert!(s.complete);
        assert_eq!((s.damaged_chunks, s.truncated_bytes, s.damaged_bytes), (0, 0, 0));
        assert_eq!(s.chunks, ws.chunks);
        assert_eq!(s.records, records.len() as u64);
    }
}

#[test]
fn stats_count_what_was_written() {
    let mut rng = Rng::new(99);
    let records = random_records(&mut rng, 2000);
    let mut want = TraceStats::default();
    for r in &records {
        if r.time() != 0 {
            want.first_time = Some(want.first_time.map_or(r.time(), |f: u64| f.min(r.time())));
            want.last_time = Some(want.last_time.map_or(r.time(), |l: u64| l.max(r.time())));
        }
        match r {
            Record::Sample(_) => want.samples += 1,
            Record::Lost(l) => match l.kind {
                LossKind::RingFull => want.lost_records = want.lost_records.saturating_add(l.count),
                LossKind::Samples => want.lost_samples = want.lost_samples.saturating_add(l.count),
                LossKind::Markers => want.lost_markers = want.lost_markers.saturating_add(l.count),
                LossKind::Malformed => want.malformed_records = want.malformed_records.saturating_add(l.count),
                LossKind::ItemClasses => want.dropped_item_classes = want.dropped_item_classes.saturating_add(l.count),
                LossKind::MarkersRejected => want.rejected_markers = want.rejected_markers.saturating_add(l.count),
                LossKind::JitNames => want.skipped_jit_names = want.skipped_jit_names.saturating_add(l.count),
                LossKind::JitLines => want.skipped_jit_lines = want.skipped_jit_lines.saturating_add(l.count),
            },
            Record::Throttle(t) if t.throttled => want.throttle_events += 1,
            Record::Throttle(_) => want.unthrottle_events += 1,
            _ => {}
        }
    }
    let (bytes, ws) = write_trace(&records, small_chunks(), &[]);
    assert_eq!(ws.stats, want);
    let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
    let (s, stats, dur) = r.summarize().unwrap();
    assert_eq!((stats, dur, s.complete), (want.clone(), Some(123_456), true));
    // Without the trailer, stats are rebuilt from the chunks' meta blocks.
    let cut = bytes.len() - 1;
    let mut r = TraceReader::from_bytes(bytes[..cut].to_vec()).unwrap();
    let (s, stats, dur) = r.summarize().unwrap();
    assert_eq!((stats, dur, s.complete), (want, None, false));
    assert!(s.truncated_bytes > 0);
}

#[test]
fn sideband_keeps_its_place_among_samples() {
    let s = |time, ip| Record::Sample(Sample { time, ip, pid: 1, tid: 1, period: 1, ..Default::default() });
    let comm = |time| Record::Comm(Comm { time, pid: 1, tid: 1, exec: false, comm: format!("c{time}") });
    let lost = |time| Record::Lost(Lost { time, cpu: 0, event: None, kind: LossKind::RingFull, count: 3 });
    let records = vec![comm(0), lost(0), s(10, 1), s(10, 2), comm(9), s(11, 1), lost(20), lost(5), s(30, 3), comm(31), comm(1)];
    for opts in [small_chunks(), WriterOptions::default()] {
        let (bytes, _) = write_trace(&records, opts, &[]);
        assert_eq!(read_back(bytes).0, records);
    }
}

#[test]
fn out_of_order_sample_starts_a_new_chunk() {
    let s = |time| Record::Sample(Sample { time, ip: 7, period: 1, ..Default::default() });
    let records = vec![s(100), s(200), s(150), s(160), s(10), s(300)];
    let (bytes, ws) = write_trace(&records, WriterOptions::default(), &[]);
    // header + 3 records chunks + trailer
    assert_eq!(ws.chunks, 5);
    let (got, s, _) = read_back(bytes);
    assert_eq!(got, records);
    assert_eq!(s.chunks, 5);
}

#[test]
fn end_round_does_not_make_tiny_chunks() {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for (i, s) in Workload::REALISTIC.samples(1, 100_000).iter().enumerate() {
        w.write_sample(s).unwrap();
        if i % 50 == 0 {
            w.end_round().unwrap();
        }
    }
    let ws = w.finish(None).unwrap();
    // 100k samples at >= 32k records per chunk (or 4 s spans with >= 1024 records).
    assert!(ws.chunks <= 2 + 100_000 / 1024, "{} chunks", ws.chunks);
    assert!(ws.chunks >= 2 + 100_000 / (32 * 1024), "{} chunks", ws.chunks);
}

#[test]
fn flush_chunk_makes_data_readable_before_finish() {
    let dir = std::env::temp_dir().join(format!("tailprof-format-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flush.tprof");
    let mut w = TraceWriter::create(&path, &header()).unwrap();
    let samples = Workload::REALISTIC.samples(2, 500);
    for s in &samples {
        w.write_sample(s).unwrap();
    }
    w.add_build_id(BuildIdEntry { path: "/bin/app".into(), build_id: vec![1, 2, 3] }).unwrap();
    w.flush_chunk().unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    let mut got = Vec::new();
    let s = r.for_each_sample(&mut |s| got.push(s.clone())).unwrap();
    assert_eq!(got, samples);
    assert!(!s.complete);
    assert_eq!(r.build_ids().len(), 1);
    assert_eq!(w.bytes_written(), std::fs::metadata(&path).unwrap().len());
    let ws = w.finish(Some(1)).unwrap();
    assert_eq!(ws.bytes, std::fs::metadata(&path).unwrap().len());
    let (s, stats, _) = TraceReader::open(&path).unwrap().summarize().unwrap();
    assert!(s.complete);
    assert_eq!(stats.samples, 500);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dropped_writer_keeps_buffered_records() {
    let samples = Workload::REALISTIC.samples(3, 100);
    let mut out = Vec::new();
    {
        let mut w = TraceWriter::new(&mut out, &header()).unwrap();
        for s in &samples {
            w.write_sample(s).unwrap();
        }
    }
    let mut got = Vec::new();
    let s = TraceReader::from_bytes(out).unwrap().for_each_sample(&mut |s| got.push(s.clone())).unwrap();
    assert_eq!(got, samples);
    assert!(!s.complete);
}

#[test]
fn create_error_names_the_path() {
    let p = std::path::Path::new("/nonexistent-dir-tailprof/x.tprof");
    let e = TraceWriter::create(p, &header()).err().unwrap();
    assert!(e.to_string().contains("/nonexistent-dir-tailprof/x.tprof"), "{e}");
    let e = TraceReader::open(p).err().unwrap();
    assert!(e.to_string().contains("/nonexistent-dir-tailprof/x.tprof"), "{e}");
}

/// A small trace with several chunks of every kind, and the byte offset where each
/// chunk ends, with the records readable up to that point.
fn multi_chunk_trace() -> (Vec<u8>, Vec<Record>) {
    let mut rng = Rng::new(7);
    let records = random_records(&mut rng, 60);
    let (bytes, _) = write_trace(&records, small_chunks(), &random_build_ids(&mut rng, 3));
    (bytes, records)
}

#[test]
fn truncation_at_every_offset_returns_every_complete_chunk() {
    let (bytes, records) = multi_chunk_trace();
    // Chunk boundaries (after the header chunk) and the records in the chunks before them.
    let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
    let full = r.read_all(&mut VecSink::default()).unwrap();
    assert!(full.chunks > 8, "want many chunks, got {}", full.chunks);
    let mut last_ok = 0usize; // records read at the previous cut
    let mut header_end = None;
    for cut in 0..bytes.len() {
        let part = bytes[..cut].to_vec();
        match TraceReader::from_bytes(part) {
            Err(e) => {
                assert!(header_end.is_none(), "cut {cut}: header readable earlier, now {e}");
                match cut {
                    0 => assert!(matches!(e, FormatError::Empty), "{e}"),
                    _ => assert!(matches!(e, FormatError::BadHeader(_)), "cut {cut}: {e}"),
                }
            }
            Ok(mut r) => {
                header_end.get_or_insert(cut);
                let mut sink = VecSink::default();
                let s = r.read_all(&mut sink).unwrap();
                assert_eq!(s.damaged_chunks, 0, "cut {cut}");
                assert_eq!(s.damaged_bytes, 0, "cut {cut}");
                assert_eq!(s.bytes, cut as u64);
                assert!(!s.complete, "cut {cut}");
                // What came back is a prefix of what was written, never less than before.
                assert!(sink.0.len() >= last_ok, "cut {cut}");
                assert_eq!(&records[..sink.0.len()], &sink.0[..], "cut {cut}");
                last_ok = sink.0.len();
                // The tail is exactly the bytes after the last complete chunk.
                let mut r2 = TraceReader::from_bytes(bytes[..cut - s.truncated_bytes as usize].to_vec()).unwrap();
                let s2 = r2.read_all(&mut VecSink::default()).unwrap();
                assert_eq!((s2.truncated_bytes, s2.chunks), (0, s.chunks), "cut {cut}");
                let (ss, stats, dur) = r.summarize().unwrap();
                assert_eq!(ss.truncated_bytes, s.truncated_bytes);
                assert_eq!(dur, None);
                let samples = sink.0.iter().filter(|r| matches!(r, Record::Sample(_))).count();
                assert_eq!(stats.samples, samples as u64, "cut {cut}");
            }
        }
    }
    // The full file reads completely.
    let (got, s, _) = read_back(bytes);
    assert_eq!(got, records);
    assert!(s.complete);
}

#[test]
fn damaged_middle_chunk_is_skipped_and_counted() {
    let (bytes, records) = multi_chunk_trace();
    let (_, full, _) = read_back(bytes.clone());
    // Flip a byte in the middle of the file: exactly one chunk is lost.
    let mut bad = bytes.clone();
    let mid = bytes.len() / 2;
    bad[mid] ^= 0x55;
    let (got, s, _) = read_back(bad);
    assert_eq!(s.damaged_chunks, 1);
    assert!(s.damaged_bytes > 0);
    assert_eq!(s.truncated_bytes, 0);
    assert_eq!(s.chunks, full.chunks - 1);
    assert!(got.len() < records.len());
    // What survives is the written records minus one contiguous run.
    let skip = records.len() - got.len();
    let start = got.iter().zip(&records).take_while(|(a, b)| a == b).count();
    assert_eq!(&got[start..], &records[start + skip..]);
}

#[test]
fn consecutive_damaged_chunks_are_counted_by_sequence() {
    let (bytes, _) = multi_chunk_trace();
    let (_, full, _) = read_back(bytes.clone());
    // Zero a span covering several chunks in the middle.
    let mut bad = bytes.clone();
    let (a, b) = (bytes.len() / 3, bytes.len() / 3 + 400);
    bad[a..b].fill(0);
    let (_, s, _) = read_back(bad);
    assert_eq!(s.chunks + s.damaged_chunks, full.chunks, "{s:?}");
}

#[test]
fn random_byte_flips_never_panic() {
    let (bytes, _) = multi_chunk_trace();
    let mut rng = Rng::new(2024);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..=rng.below(4) {
            let i = rng.below(b.len() as u64) as usize;
            b[i] ^= 1 << rng.below(8);
        }
        if rng.chance(0.2) {
            let cut = rng.below(b.len() as u64) as usize;
            b.truncate(cut);
        }
        if let Ok(mut r) = TraceReader::from_bytes(b.clone()) {
            let s = r.read_all(&mut VecSink::default()).unwrap();
            assert!(s.damaged_bytes + s.truncated_bytes <= s.bytes);
            let _ = r.summarize().unwrap();
            let _ = r.for_each_sample(&mut |_| {}).unwrap();
        }
    }
}

#[test]
fn mutated_chunk_contents_with_valid_checksums_never_panic() {
    // Re-checksumming after the flips makes the decoders see the damage.
    let (bytes, records) = multi_chunk_trace();
    let mut rng = Rng::new(31337);
    let mut decoded_damage = 0;
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..=rng.below(3) {
            let i = FILE_HEADER_LEN + rng.below((b.len() - FILE_HEADER_LEN) as u64) as usize;
            b[i] = if rng.chance(0.5) { b[i] ^ (1 << rng.below(8)) } else { rng.below(256) as u8 };
        }
        tailprof_format::chunk::fix_checksums(&mut b);
        if let Ok(mut r) = TraceReader::from_bytes(b) {
            let mut sink = VecSink::default();
            let s = r.read_all(&mut sink).unwrap();
            assert!(sink.0.len() <= records.len() + 1000);
            decoded_damage += s.damaged_chunks;
            let _ = r.summarize().unwrap();
        }
    }
    assert!(decoded_damage > 0, "the decoders never saw damage");
}

#[test]
fn random_bytes_and_garbage_never_panic() {
    let mut rng = Rng::new(5);
    for i in 0..2000 {
        let n = rng.below(400) as usize;
        let mut b: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
        if i % 2 == 0 {
            // A valid prefix, then garbage with chunk magics sprinkled in.
            let (good, _) = write_trace(&[], WriterOptions::default(), &[]);
            let keep = good.len() - rng.below(30) as usize;
            let mut g = good[..keep].to_vec();
            for chunk in b.chunks(16) {
                g.extend_from_slice(chunk);
                if rng.chance(0.3) {
                    g.extend_from_slice(b"TPck");
                }
            }
            b = g;
        }
        if let Ok(mut r) = TraceReader::from_bytes(b) {
            let _ = r.read_all(&mut VecSink::default()).unwrap();
        }
    }
}

#[test]
fn empty_file_is_a_clear_error() {
    let e = TraceReader::from_bytes(Vec::new()).err().unwrap();
    assert!(matches!(e, FormatError::Empty));
    assert!(e.to_string().contains("empty"));
}

#[test]
fn random_bytes_are_not_a_trace() {
    let mut rng = Rng::new(11);
    let b: Vec<u8> = (0..1000).map(|_| rng.below(256) as u8).collect();
    let e = TraceReader::from_bytes(b).err().unwrap();
    assert!(matches!(e, FormatError::NotATrace { perf_data: false }), "{e}");
    assert!(e.to_string().contains("tailprof import"));
}

#[test]
fn perf_data_is_not_a_trace_with_import_hint() {
    let p = std::path::Path::new("/work/shared/testdata/perf/perf_data_converter__perf.data.singleprocess-3.8");
    let bytes = if p.exists() {
        std::fs::read(p).unwrap()
    } else {
        let mut b = b"PERFILE2".to_vec();
        b.resize(200, 0);
        b
    };
    let e = TraceReader::from_bytes(bytes).err().unwrap();
    assert!(matches!(e, FormatError::NotATrace { perf_data: true }), "{e}");
    assert!(e.to_string().contains("perf.data") && e.to_string().contains("tailprof import"), "{e}");
}

#[test]
fn newer_version_is_refused() {
    let (mut bytes, _) = write_trace(&[], WriterOptions::default(), &[]);
    bytes[8] = 9;
    let e = TraceReader::from_bytes(bytes).err().unwrap();
    assert!(matches!(e, FormatError::UnsupportedVersion { found: 9, supported: 6 }), "{e}");
}

/// Issue 23: JIT names are stored in JIT chunks and handed to the sink before the first
/// record, in the order added, across several chunks; a damaged JIT chunk is skipped.
#[test]
fn jit_entries_are_delivered_before_records_and_survive_chunking() {
    #[derive(Default)]
    struct Order(Vec<String>);
    impl Sink for Order {
        fn handle_sample(&mut self, s: &Sample) {
            self.0.push(format!("sample {}", s.time));
        }
        fn handle_jit(&mut self, e: &JitEntry) {
            self.0.push(format!("jit {} {}", e.name, e.time));
            for l in &e.lines.lines {
                self.0.push(format!("line +{:#x} {}:{}", l.offset, e.lines.files[l.file as usize], l.line));
            }
        }
    }
    let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default()).unwrap();
    w.write_sample(&Sample { time: 10, ip: 0x1000, pid: 1, tid: 1, period: 1, ..Default::default() }).unwrap();
    w.add_jit(JitEntry {
        pid: 1,
        time: 5,
        start: 0x1000,
        size: 16,
        origin: JitOrigin::JitLoad,
        name: "a".into(),
        source: Some("x.js:1".into()),
        lines: tailprof_format::jit::JitLines::build([(0, 1, 0, "x.js"), (8, 2, 0, "x.js")]).0,
    });
    w.flush_chunk().unwrap();
    w.write_sample(&Sample { time: 20, ip: 0x1000, pid: 1, tid: 1, period: 1, ..Default::default() }).unwrap();
    w.add_jit(JitEntry {
        pid: 1,
        time: 15,
        start: 0x1000,
        size: 16,
        origin: JitOrigin::JitLoad,
        name: "b".into(),
        source: None,
        lines: Default::default(),
    });
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), tailprof_format::chunk::FORMAT_VERSION);
    let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
    let mut o = Order::default();
    let s = r.read_all(&mut o).unwrap();
    assert_eq!(o.0, ["jit a 5", "line +0x0 x.js:1", "line +0x8 x.js:2", "jit b 15", "sample 10", "sample 20"]);
    assert_eq!(s.skipped_chunks, 0);
    assert!(s.complete);
    // The first JIT chunk's entry name damaged (checksum no longer matches): skipped.
    let at = bytes.windows(6).position(|w| w == b"x.js:1").unwrap();
    let mut bad = bytes.clone();
    bad[at] ^= 0x20;
    let mut o = Order::default();
    let s = TraceReader::from_bytes(bad).unwrap().read_all(&mut o).unwrap();
    assert_eq!(o.0, ["jit b 15", "sample 10", "sample 20"]);
    assert_eq!(s.damaged_chunks, 1);
}

#[test]
fn unknown_chunk_kinds_are_skipped() {
    let records: Vec<Record> = Workload::REALISTIC.samples(4, 50).into_iter().map(Record::Sample).collect();
    let (bytes, _) = write_trace(&records, WriterOptions::default(), &[]);
    // Insert an unknown chunk right after the header chunk.
    let r = TraceReader::from_bytes(bytes.clone()).unwrap();
    drop(r);
    let hdr_chunk_len = {
        let c = tailprof_format::chunk::probe(&bytes, FILE_HEADER_LEN);
        match c {
            tailprof_format::chunk::Probe::Chunk(c) => c.header.total_len(),
            _ => panic!("no header chunk"),
        }
    };
    let at = FILE_HEADER_LEN + hdr_chunk_len;
    let mut extra = Vec::new();
    // Kind 200 does not exist (yet); use the raw framing through a known kind and patch.
    frame_chunk(&mut extra, ChunkKind::Trailer, 0, 1, &[], b"future stuff", 12);
    extra[4] = 200;
    // Re-frame with a valid checksum: recompute through the public CRC.
    let crc = crc32c_of(&extra);
    extra[20..24].copy_from_slice(&crc.to_le_bytes());
    let mut b = bytes[..at].to_vec();
    b.extend_from_slice(&extra);
    b.extend_from_slice(&bytes[at..]);
    let (got, s, _) = read_back(b);
    assert_eq!(got, records);
    assert_eq!(s.skipped_chunks, 1);
    assert_eq!(s.damaged_chunks, 0);
    assert!(s.complete);
}

#[test]
fn unknown_sideband_kinds_are_skipped() {
    use tailprof_format::columns::Packer;
    use tailprof_format::meta::RecordsMeta;
    let records: Vec<Record> = Workload::REALISTIC.samples(4, 20).into_iter().map(Record::Sample).collect();
    let (bytes, _) = write_trace(&records, WriterOptions::default(), &[]);
    // A records chunk holding one side-band row of a future kind (99) with two field bytes.
    let mut body = vec![0, 0, 1]; // no stack nodes, no samples, one side-band row
    Packer::new(0).put_blob(&mut body, &[99, 0, 0, 2, 0xab, 0xcd]);
    let meta = RecordsMeta { records: 1, ..Default::default() };
    let mut chunk = Vec::new();
    frame_chunk(&mut chunk, ChunkKind::Records, 0, 2, &meta.to_bytes(), &body, body.len());
    // Insert it before the trailer (the last chunk).
    let trailer_at = (0..bytes.len()).rev().find(|&i| bytes[i..].starts_with(b"TPck")).unwrap();
    let mut b = bytes[..trailer_at].to_vec();
    b.extend_from_slice(&chunk);
    b.extend_from_slice(&bytes[trailer_at..]);
    let (got, s, _) = read_back(b);
    assert_eq!(got, records);
    assert_eq!((s.damaged_chunks, s.skipped_records, s.records), (0, 1, records.len() as u64));
}

fn crc32c_of(chunk: &[u8]) -> u32 {
    // CRC-32C (Castagnoli), bitwise, over header bytes 0..20 and the payload.
    let mut crc = !0u32;
    for &b in chunk[..20].iter().chain(&chunk[24..]) {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn realistic_recording_costs_at_most_8_bytes_per_sample() {
    let n = 500_000;
    for w in [
        Workload::REALISTIC,
        Workload::CpuClock { period_ns: 10_000, threads: 4, ips: 3000 },
        Workload::CpuClock { period_ns: 1_000_000, threads: 1, ips: 3000 },
    ] {
        let samples = w.samples(42, n);
        let mut tw = TraceWriter::new(Vec::new(), &header()).unwrap();
        for (i, s) in samples.iter().enumerate() {
            tw.write_sample(s).unwrap();
            if i % 200 == 0 {
                tw.end_round().unwrap();
            }
        }
        let (bytes, ws) = tw.finish_into_inner(None).unwrap();
        let per = bytes.len() as f64 / n as f64;
        println!("{}: {per:.2} bytes/sample ({} chunks)", w.name(), ws.chunks);
        assert!(per <= 8.0, "{}: {per:.2} bytes/sample", w.name());
        let mut got = 0usize;
        TraceReader::from_bytes(bytes)
            .unwrap()
            .for_each_sample(&mut |s| {
                assert_eq!(s, &samples[got]);
                got += 1;
            })
            .unwrap();
        assert_eq!(got, n);
    }
}

#[test]
fn for_each_sample_matches_read_all() {
    let mut rng = Rng::new(77);
    let records = random_records(&mut rng, 1500);
    let (bytes, _) = write_trace(&records, small_chunks(), &[]);
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let mut got = Vec::new();
    let s = r.for_each_sample(&mut |s| got.push(s.clone())).unwrap();
    let want: Vec<Sample> = records
        .iter()
        .filter_map(|r| match r {
            Record::Sample(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(s.samples, want.len() as u64);
}

/// Every loss kind survives the trip through side-band rows, chunk meta counts (read by
/// `summarize` on a file without a trailer) and the trailer, and reaches the loss table.
#[test]
fn every_loss_kind_is_stored_counted_and_tabled() {
    use tailprof_format::losses::LossTable;
    let mut records = Vec::new();
    for (i, kind) in LossKind::ALL.into_iter().enumerate() {
        records.push(Record::Lost(Lost { time: 10 + i as u64, cpu: 1, event: None, kind, count: 100 + i as u64 }));
        records.push(Record::Sample(Sample { time: 11 + i as u64, ip: 0x1000, pid: 1, tid: 1, period: 1, ..Default::default() }));
    }
    let (bytes, ws) = write_trace(&records, small_chunks(), &[]);
    for (i, kind) in LossKind::ALL.into_iter().enumerate() {
        assert_eq!(ws.stats.loss_count(kind), 100 + i as u64, "{kind:?}");
    }
    // The records come back.
    let mut sink = VecSink::default();
    TraceReader::from_bytes(bytes.clone()).unwrap().read_all(&mut sink).unwrap();
    let lost: Vec<_> = sink.0.iter().filter_map(|r| if let Record::Lost(l) = r { Some(l.kind) } else { None }).collect();
    assert_eq!(lost, LossKind::ALL.to_vec());
    // Without the trailer, chunk meta counts rebuild the same stats.
    let trailer_at = find_last_chunk_start(&bytes);
    let (_, stats, _) = TraceReader::from_bytes(bytes[..trailer_at].to_vec()).unwrap().summarize().unwrap();
    for (i, kind) in LossKind::ALL.into_iter().enumerate() {
        assert_eq!(stats.loss_count(kind), 100 + i as u64, "meta count of {kind:?}");
    }
    let table = LossTable::new(&stats, None);
    assert_eq!(table.rows.len(), LossKind::ALL.len());
    assert_eq!(table.count("malformed_records"), 103);
}

/// A chunk copied again later in the file is skipped and counted, not read twice.
#[test]
fn duplicated_chunks_are_detected_not_counted_twice() {
    let records: Vec<Record> =
        (1..=200u64).map(|t| Record::Sample(Sample { time: t, ip: 0x1000 + t, pid: 1, tid: 1, period: 1, ..Default::default() })).collect();
    let (bytes, _) = write_trace(&records, small_chunks(), &[]);
    let starts = chunk_starts(&bytes);
    assert!(starts.len() >= 4, "need several chunks, got {}", starts.len());
    // Duplicate the second records chunk right after itself.
    let (a, b) = (starts[1], starts[2]);
    let mut dup = bytes[..b].to_vec();
    dup.extend_from_slice(&bytes[a..b]);
    dup.extend_from_slice(&bytes[b..]);
    let mut sink = VecSink::default();
    let summary = TraceReader::from_bytes(dup).unwrap().read_all(&mut sink).unwrap();
    assert_eq!(summary.duplicate_chunks, 1);
    assert_eq!(summary.duplicate_bytes, (b - a) as u64);
    assert_eq!(sink.0.len(), records.len(), "every record exactly once");
}

/// Start offsets of every chunk after the file header (walks the chunk headers).
fn chunk_starts(bytes: &[u8]) -> Vec<usize> {
    use tailprof_format::chunk::{ChunkHeader, CHUNK_HEADER_LEN, CHUNK_MAGIC};
    let mut out = Vec::new();
    let mut p = bytes.windows(4).position(|w| w == CHUNK_MAGIC).unwrap();
    while p + CHUNK_HEADER_LEN <= bytes.len() {
        let h = ChunkHeader::parse(&bytes[p..]).unwrap();
        out.push(p);
        p += h.total_len();
    }
    out
}

fn find_last_chunk_start(bytes: &[u8]) -> usize {
    *chunk_starts(bytes).last().unwrap()
}

/// Issue 24: switch markers (format version 5) round-trip; a file that claims version 4
/// cannot hold them (an older reader would drop the chunk), so this reader treats such a
/// row as damage, as a version-4 reader would.
#[test]
fn switch_markers_round_trip_and_need_version_5() {
    use tailprof_format::{Marker, MarkerKind, MarkerSource};
    let m = |time, kind, item| Record::Marker(Marker { time, pid: 1, tid: 2, kind, item, class: 0, source: MarkerSource::Api });
    let records =
        vec![m(10, MarkerKind::Begin, 7), m(20, MarkerKind::SwitchNone, 0), m(30, MarkerKind::Switch, 7), m(40, MarkerKind::End, 7)];
    let (bytes, _) = write_trace(&records, WriterOptions::default(), &[]);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), tailprof_format::chunk::FORMAT_VERSION);
    let mut sink = VecSink::default();
    let s = TraceReader::from_bytes(bytes.clone()).unwrap().read_all(&mut sink).unwrap();
    assert_eq!(sink.0, records);
    assert_eq!(s.damaged_chunks, 0);
    let mut v4 = bytes;
    v4[8] = 4;
    let mut sink = VecSink::default();
    let s = TraceReader::from_bytes(v4).unwrap().read_all(&mut sink).unwrap();
    assert!(s.damaged_chunks >= 1, "{s:?}");
    assert!(!sink.0.iter().any(|r| matches!(r, Record::Marker(m) if m.kind == MarkerKind::Switch)));
}

/// Issue 24 part 3: an item's trace context (side-band kind 12) round-trips in version 5,
/// in order with the markers around it.
#[test]
fn item_trace_round_trips() {
    use tailprof_format::{ItemTrace, Marker, MarkerKind, MarkerSource};
    let trace_id: [u8; 16] = *b"\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36";
    let records = vec![
        Record::Marker(Marker { time: 10, pid: 1, tid: 2, kind: MarkerKind::Begin, item: 7, class: 0, source: MarkerSource::Api }),
        Record::ItemTrace(ItemTrace { time: 10, pid: 1, tid: 2, item: 7, trace_id, span_id: *b"\x00\xf0\x67\xaa\x0b\xa9\x02\xb7" }),
        Record::Marker(Marker { time: 40, pid: 1, tid: 2, kind: MarkerKind::End, item: 7, class: 0, source: MarkerSource::Api }),
    ];
    let (bytes, _) = write_trace(&records, WriterOptions::default(), &[]);
    let mut sink = VecSink::default();
    let s = TraceReader::from_bytes(bytes).unwrap().read_all(&mut sink).unwrap();
    assert_eq!(sink.0, records);
    assert_eq!(s.damaged_chunks, 0);
}
