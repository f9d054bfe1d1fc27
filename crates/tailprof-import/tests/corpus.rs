//! Every recording of the corpus: sample counts against `perf script` (README) and
//! against an independent raw scan of the file, record-kind counts, time order, and
//! consistency of the converted records with the trace header.

mod common;

use common::*;
use tailprof_format::{LossKind, Record};

/// (file, samples as printed by `perf script`, or None when perf 6.1 cannot read it).
const FILES: &[(&str, Option<u64>)] = &[
    ("ubench__xeon6126_perf-dla1_dat-x", Some(10014)),
    ("ubench__perf-mem-4986", Some(253)),
    ("ubench__perf-mem-9973", Some(125)),
    ("ubench__perf-mem-19946", Some(63)),
    ("ubench__perf-mem-39891", Some(31)),
    ("perf_data_converter__perf.data.weight_struct", Some(14)),
    ("perf_data_converter__perf.data.lost_samples-4.4", Some(191)),
    ("perf_data_converter__perf.data.piped.lost_samples-4.4", Some(191)),
    ("perf_data_converter__perf.data.hybrid_topology", Some(7)),
    ("perf_data_converter__perf.data.branch-4.14", Some(13)),
    ("perf_data_converter__perf.data.group_desc-4.14", Some(13)),
    ("perf_data_converter__perf.data.throttle-3.8", Some(14980)),
    ("perf_data_converter__perf.data.forkexit-3.8", Some(10335)),
    ("perf_data_converter__perf.data.piped.target-3.8", Some(5218)),
    ("perf_data_converter__perf.data.singleprocess-3.8", Some(13)),
    ("perf_data_converter__perf.data.ctx_switch_namespaces-4.14", Some(2)),
    ("misc__pourroy_test_perf.data.old_broadwell_cycles_ppp", Some(17164)),
    ("perfparser__probe.data.file", Some(1)),
    // `perf script` prints several lines per sample for these (call chains); the
    // count comes from the raw scan.
    ("hotspot__cpp-recursion.perf.data", None),
    ("perfparser__vector_static_gcc__perf.lbr.data", None),
    ("perfparser__fork_static_gcc__perf.data.zstd", None),
    // Written by perf >= 6.3 (136/152-byte attrs, COMPRESSED2 records).
    ("linux-perf-data__sleep.data", None),
    ("linux-perf-data__sleep.compressed2.data", None),
    ("linux-perf-data__sleep.compressed2.pipe.data", None),
    ("linux-perf-data__fibo.compressed2.pipe.data", None),
    ("autofdo__hierarchical_discriminator_test.x86_64.perf.data", None),
];

const SAMPLE: u32 = 9;
const SIDE_BAND: [u32; 5] = [1, 3, 4, 7, 10]; // MMAP, COMM, EXIT, FORK, MMAP2
const LOST: u32 = 2;
const LOST_SAMPLES: u32 = 13;
const THROTTLES: [u32; 2] = [5, 6];

#[test]
fn every_recording_imports_with_the_expected_counts() {
    let Some(dir) = corpus() else { return };
    for &(name, expected) in FILES {
        let path = dir.join(name);
        if !path.is_file() {
            tailprof_testkit::skip(tailprof_testkit::Need::TestData, format_args!("{name} not in the corpus"));
            continue;
        }
        let (imp, recs) = import(&path);
        let s = &imp.summary;
        let raw = raw_record_counts(&path);
        let n = |t: u32| raw.get(&t).copied().unwrap_or(0);
        if let Some(expected) = expected {
            assert_eq!(s.samples, expected, "{name}: samples vs perf script");
        }
        assert!(s.samples > 0, "{name}: no samples");
        assert_eq!(s.samples, n(SAMPLE), "{name}: samples vs raw scan");
        assert_eq!(s.side_band, SIDE_BAND.iter().map(|&t| n(t)).sum::<u64>(), "{name}: side-band vs raw scan");
        assert_eq!(s.lost_events, n(LOST) + n(LOST_SAMPLES), "{name}: lost records vs raw scan");
        assert_eq!(s.throttles, THROTTLES.iter().map(|&t| n(t)).sum::<u64>(), "{name}: throttles vs raw scan");
        assert_eq!(s.malformed_records, 0, "{name}: malformed records: {:?}", s.warnings);
        assert_eq!(s.time_clamped, 0, "{name}: records out of order after sorting");
        assert!(s.warnings.is_empty(), "{name}: warnings {:?}", s.warnings);
        assert_eq!(s.events, imp.header.events.len(), "{name}");
        assert_eq!(imp.header.source, "import");
        assert!(imp.header.clock.is_some(), "{name}: no clock");

        // What the sink got matches the summary.
        let count = |f: fn(&Record) -> bool| recs.iter().filter(|r| f(r)).count() as u64;
        assert_eq!(count(|r| matches!(r, Record::Sample(_))), s.samples, "{name}");
        assert_eq!(count(|r| matches!(r, Record::Mmap(_) | Record::Comm(_) | Record::Fork(_) | Record::Exit(_))), s.side_band, "{name}");
        assert_eq!(count(|r| matches!(r, Record::Throttle(_))), s.throttles, "{name}");
        let lost_sum = |k: LossKind| -> u64 {
            recs.iter().filter_map(|r| if let Record::Lost(l) = r { (l.kind == k).then_some(l.count) } else { None }).sum()
        };
        assert_eq!(lost_sum(LossKind::RingFull), s.lost_records, "{name}");
        assert_eq!(lost_sum(LossKind::Samples), s.lost_samples, "{name}");

        assert_time_ordered(name, &recs);
        for smp in samples(&recs) {
            let ev = &imp.header.events[smp.event as usize];
            assert!(smp.period > 0, "{name}: zero period");
            assert_eq!(
                smp.regs.len(),
                if ev.sample_type & (1 << 12) != 0 { ev.regs_user_mask.count_ones() as usize } else { 0 },
                "{name}: regs"
            );
            assert_eq!(smp.addr.is_some(), ev.sample_type & (1 << 3) != 0, "{name}: addr presence");
            assert_eq!(smp.data_src.is_some(), ev.sample_type & (1 << 15) != 0, "{name}: data_src presence");
            assert_eq!(smp.weight.is_some(), ev.sample_type & (1 << 14 | 1 << 24) != 0, "{name}: weight presence");
        }
        eprintln!(
            "{name}: {} samples, {} side-band, {} lost records / {} lost samples, {} throttles, skipped {:?}",
            s.samples, s.side_band, s.lost_records, s.lost_samples, s.throttles, s.skipped_by_type
        );
    }
}

#[test]
fn pipe_mode_carries_the_same_header_as_file_mode() {
    // Two recordings of the same command, one written to a file, one through a pipe
    // (different runs, so the samples differ).
    let (Some(file), Some(pipe)) = (
        corpus_file("perf_data_converter__perf.data.lost_samples-4.4"),
        corpus_file("perf_data_converter__perf.data.piped.lost_samples-4.4"),
    ) else {
        return;
    };
    let (a, _) = import(&file);
    let (b, _) = import(&pipe);
    assert_eq!(a.header.extra["perf.file_mode"], "file");
    assert_eq!(b.header.extra["perf.file_mode"], "pipe");
    assert_eq!(a.header.events, b.header.events);
    assert_eq!((a.summary.samples, a.summary.lost_samples), (b.summary.samples, b.summary.lost_samples));
}

#[test]
fn compressed_and_uncompressed_files_import() {
    // zstd-compressed recordings (COMPRESSED and COMPRESSED2 records, file and pipe
    // mode) decode to the same kinds of records as plain ones.
    for name in [
        "linux-perf-data__sleep.compressed2.data",
        "linux-perf-data__sleep.compressed2.pipe.data",
        "linux-perf-data__fibo.compressed2.pipe.data",
        "perfparser__fork_static_gcc__perf.data.zstd",
    ] {
        let Some(path) = corpus_file(name) else { return };
        let (imp, recs) = import(&path);
        assert!(imp.header.extra.contains_key("perf.compression"), "{name}: {:?}", imp.header.extra);
        assert!(imp.summary.samples > 0 && imp.summary.side_band > 0, "{name}");
        assert_time_ordered(name, &recs);
    }
}
