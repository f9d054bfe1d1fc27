//! perf.data -> trace file -> records: what `import_file` writes reads back as exactly
//! what the importer produced.

mod common;

use common::*;
use tailprof_format::{Record, TraceReader, VecSink};
use tailprof_import::{import_file, ImportOptions};

#[test]
fn import_file_round_trips_through_the_trace_format() {
    let Some(dir) = corpus() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "ubench__xeon6126_perf-dla1_dat-x",
        "ubench__perf-mem-4986",
        "perf_data_converter__perf.data.weight_struct",
        "perf_data_converter__perf.data.lost_samples-4.4",
        "perf_data_converter__perf.data.piped.target-3.8",
        "perf_data_converter__perf.data.throttle-3.8",
        "hotspot__cpp-recursion.perf.data",
        "linux-perf-data__fibo.compressed2.pipe.data",
    ] {
        let input = dir.join(name);
        if !input.is_file() {
            continue;
        }
        let output = tmp.path().join(format!("{name}.trace"));
        let mut calls = Vec::new();
        let summary = import_file(&input, &output, &ImportOptions::default(), &mut |done, total| calls.push((done, total)))
            .unwrap_or_else(|e| panic!("{e}"));
        let total = std::fs::metadata(&input).unwrap().len();
        assert_eq!(calls.last(), Some(&(total, total)), "{name}: progress ends at 100%");
        assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0), "{name}: progress never goes back");

        let (imp, recs) = import(&input);
        assert_eq!(summary, imp.summary, "{name}");

        let mut reader = TraceReader::open(&output).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reader.header(), &imp.header, "{name}: header");
        let mut sink = VecSink::default();
        let rs = reader.read_all(&mut sink).unwrap();
        assert!(rs.complete && rs.damaged_chunks == 0 && rs.truncated_bytes == 0, "{name}: {rs:?}");
        let mut want_ids = imp.build_ids.clone();
        let mut got_ids = reader.build_ids().to_vec();
        want_ids.sort_by(|a, b| a.path.cmp(&b.path));
        got_ids.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(got_ids, want_ids, "{name}: build-ids");

        let count = |v: &[Record], f: fn(&Record) -> bool| v.iter().filter(|r| f(r)).count();
        assert_eq!(count(&sink.0, |r| matches!(r, Record::Sample(_))) as u64, summary.samples, "{name}");
        assert_eq!(sink.0.len(), recs.len(), "{name}: record count");
        for (i, (a, b)) in sink.0.iter().zip(&recs).enumerate() {
            assert_eq!(a, b, "{name}: record {i} differs after the round trip");
        }
        eprintln!("{name}: {} records round-tripped", recs.len());
    }
}
