//! Damaged perf.data files crafted to make the parser allocate what the file declares
//! (issue 10, finding #9): every size is bounded by what remains of the file; the import
//! finishes (or fails with one line) and never aborts.

use std::path::{Path, PathBuf};

use tailprof_format::{Record, VecSink};
use tailprof_import::{import_file, import_to_sink, ImportOptions};

#[path = "craft/mod.rs"]
mod craft;
use craft::*;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn samples(recs: &[Record]) -> usize {
    recs.iter().filter(|r| matches!(r, Record::Sample(_))).count()
}

#[test]
fn finding_9_huge_auxtrace_size_is_bounded_by_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // 1.5 GB and 94 TB declared in a 24 KB file: linux-perf-data 0.13 alone allocates
    // (1.5 GB) or aborts the process (94 TB).
    for (name, declared) in [("gb.data", 1_500_000_000u64), ("tb.data", 94_000_000_000_000), ("max.data", u64::MAX)] {
        let p = write(dir.path(), name, &huge_auxtrace_file(declared));
        let mut sink = VecSink::default();
        let imp = import_to_sink(&p, &ImportOptions::default(), &mut sink).unwrap();
        assert_eq!(samples(&sink.0), 10, "{name}: the samples before the damaged record are kept");
        assert!(
            imp.summary.warnings.iter().any(|w| w.contains("AUXTRACE") && w.contains(&declared.to_string())),
            "{name}: one warning names the damage: {:?}",
            imp.summary.warnings
        );
        // The same through import_file: a readable trace.
        let out = dir.path().join(format!("{name}.trace"));
        import_file(&p, &out, &ImportOptions::default(), &mut |_, _| {}).unwrap();
        let mut r = tailprof_format::TraceReader::open(&out).unwrap();
        let mut s = VecSink::default();
        r.read_all(&mut s).unwrap();
        assert_eq!(samples(&s.0), 10);
    }
}

#[test]
fn intact_auxtrace_records_keep_the_framing() {
    // A well-formed AUXTRACE with 64 bytes of AUX data between samples: everything after
    // it is still read (the guard does not misframe valid files).
    let mut data = Vec::new();
    sample(&mut data, 0x1000, 10);
    auxtrace(&mut data, 64);
    data.extend_from_slice(&[0xAB; 64]);
    sample(&mut data, 0x2000, 20);
    sample(&mut data, 0x3000, 30);
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "ok.data", &perf_data_file(&data));
    let mut sink = VecSink::default();
    let imp = import_to_sink(&p, &ImportOptions::default(), &mut sink).unwrap();
    assert_eq!(samples(&sink.0), 3, "{:?}", imp.summary);
    assert!(!imp.summary.warnings.iter().any(|w| w.contains("AUXTRACE")), "{:?}", imp.summary.warnings);
    assert_eq!(imp.summary.skipped_by_type.values().sum::<u64>(), 1, "{:?}", imp.summary.skipped_by_type);
}

#[test]
fn failed_import_leaves_an_existing_output_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "keep.trace", b"an existing trace");
    let bad = write(dir.path(), "bad.data", b"PERFILE2 but nothing else");
    assert!(import_file(&bad, &out, &ImportOptions::default(), &mut |_, _| {}).is_err());
    assert_eq!(std::fs::read(&out).unwrap(), b"an existing trace");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "no temporary file left behind: {left:?}");
}
