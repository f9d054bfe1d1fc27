//! Bad input: clear one-line errors (or a partial import of a cut-off recording), never a
//! panic or a hang.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use tailprof_format::VecSink;
use tailprof_import::{import_file, import_to_sink, ImportError, ImportOptions};

fn try_import(path: &Path, opts: &ImportOptions) -> Result<tailprof_import::Imported, ImportError> {
    import_to_sink(path, opts, &mut VecSink::default())
}

fn strict() -> ImportOptions {
    let mut o = ImportOptions::default();
    o.recover_truncated = false;
    o
}

fn write_temp(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn zero_size_record_is_an_error_not_a_hang() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.piped.corrupted.zero_size_sample-3.2") else { return };
    let err = try_import(&path, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, ImportError::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("size 0") && msg.contains("8-byte header"), "{msg}");
    assert!(msg.contains("zero_size_sample"), "names the file: {msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
    // The same through import_file.
    let tmp = tempfile::tempdir().unwrap();
    let err = import_file(&path, &tmp.path().join("t.trace"), &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, ImportError::Corrupt { .. }), "{err}");
}

#[test]
fn unfinished_recording_imports_partially_or_errors_when_asked() {
    let Some(path) = corpus_file("misc__pourroy_tool_oprofile_perf.data_TRUNCATED") else { return };
    // Data size 0 in the header: the recording holds 127 complete MMAP records and
    // nothing else (checked by walking the file), so a partial import finds just those.
    let (imp, recs) = import(&path);
    assert_eq!(imp.summary.samples, 0);
    assert_eq!(imp.summary.side_band, 127);
    assert_eq!(recs.len(), 127);
    assert!(imp.summary.warnings.iter().any(|w| w.contains("never finished")), "{:?}", imp.summary.warnings);
    assert_eq!(imp.header.events.len(), 1);
    assert_eq!(imp.header.events[0].name, "cycles:ppp");

    let err = try_import(&path, &strict()).unwrap_err();
    assert!(matches!(err, ImportError::Truncated { .. }), "{err:?}");
    assert!(err.to_string().contains("data size is 0"), "{err}");
}

#[test]
fn cut_off_files_import_up_to_the_last_complete_record() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.throttle-3.8") else { return };
    let full = std::fs::read(&path).unwrap();
    let (whole, whole_recs) = import(&path);
    let whole_samples = samples(&whole_recs);
    let tmp = tempfile::tempdir().unwrap();
    let mut last = 0;
    for frac in [0.2, 0.5, 0.9] {
        let cut = (full.len() as f64 * frac) as usize;
        let p = write_temp(&tmp, &format!("cut{cut}"), &full[..cut]);
        let mut sink = VecSink::default();
        let imp = import_to_sink(&p, &ImportOptions::default(), &mut sink).unwrap();
        // (The first fifth of this system-wide recording is side-band only.)
        assert!(imp.summary.samples >= last && imp.summary.samples < whole.summary.samples, "{}", imp.summary.samples);
        assert!(imp.summary.side_band > 0);
        last = imp.summary.samples;
        assert!(imp.summary.warnings.iter().any(|w| w.contains("cut off")), "{:?}", imp.summary.warnings);
        assert_eq!(imp.header.events.len(), 2);
        assert_time_ordered("cut", &sink.0);
        // Everything imported is in the whole recording, attributed to the same events
        // (the event ids come from the attribute section when the header features are
        // gone). Not a strict prefix: the last round of the cut file sorts on its own.
        let mut pool: std::collections::HashMap<_, i64> = std::collections::HashMap::new();
        for s in &whole_samples {
            *pool.entry((s.time, s.ip, s.cpu, s.event, s.tid)).or_default() += 1;
        }
        for s in samples(&sink.0) {
            let n = pool.entry((s.time, s.ip, s.cpu, s.event, s.tid)).or_default();
            *n -= 1;
            assert!(*n >= 0, "cut at {cut}: sample not in the whole recording: {s:?}");
        }
        let err = try_import(&p, &strict()).unwrap_err();
        assert!(matches!(err, ImportError::Truncated { .. }), "{err}");
    }
    assert!(last > 1000);
    // Cut inside the header.
    let p = write_temp(&tmp, "hdr", &full[..50]);
    let err = try_import(&p, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, ImportError::Truncated { .. }), "{err}");
}

#[test]
fn other_files_are_not_perf_data() {
    let tmp = tempfile::tempdir().unwrap();
    let p = write_temp(&tmp, "notes.txt", b"# Real perf.data recordings\n");
    let err = try_import(&p, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, ImportError::NotPerfData { .. }), "{err:?}");
    assert!(err.to_string().contains("magic \"# Real p\""), "{err}");

    let p = write_temp(&tmp, "empty", b"");
    let err = try_import(&p, &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("empty file"), "{err}");

    let p = write_temp(&tmp, "v1", b"PERFFILE\0\0\0\0\0\0\0\0");
    let err = try_import(&p, &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, ImportError::Unsupported { .. }), "{err}");

    let err = try_import(&tmp.path().join("missing"), &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, ImportError::Io { .. }) && err.to_string().contains("missing"), "{err}");
}

#[test]
fn implausible_header_sizes_are_errors_not_allocations() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.lost_samples-4.4") else { return };
    let full = std::fs::read(&path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data_end = {
        let off = u64::from_le_bytes(full[40..48].try_into().unwrap());
        let size = u64::from_le_bytes(full[48..56].try_into().unwrap());
        (off + size) as usize
    };
    // Every feature section's size, one at a time, set to 2^60.
    let n_features: u32 = (0..4).map(|i| u64::from_le_bytes(full[72 + 8 * i..80 + 8 * i].try_into().unwrap()).count_ones()).sum();
    for i in 0..n_features as usize {
        let mut bad = full.clone();
        let at = data_end + i * 16 + 8;
        bad[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let p = write_temp(&tmp, &format!("feat{i}"), &bad);
        let err = try_import(&p, &ImportOptions::default()).unwrap_err();
        assert!(matches!(err, ImportError::Corrupt { .. }), "{err}");
    }
    // attr_size of 0 (the parser would divide by it).
    let mut bad = full.clone();
    bad[16..24].copy_from_slice(&0u64.to_le_bytes());
    let err = try_import(&write_temp(&tmp, "attr0", &bad), &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("attr size"), "{err}");
    // An EVENT_DESC claiming 2^32-1 events.
    let word0 = u64::from_le_bytes(full[72..80].try_into().unwrap());
    assert!(word0 & (1 << 12) != 0, "the file has HEADER_EVENT_DESC");
    let before = (word0 & ((1 << 12) - 1)).count_ones() as usize;
    let sec = data_end + before * 16;
    let off = u64::from_le_bytes(full[sec..sec + 8].try_into().unwrap()) as usize;
    let mut bad = full.clone();
    bad[off..off + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = try_import(&write_temp(&tmp, "evdesc", &bad), &ImportOptions::default()).unwrap_err();
    assert!(err.to_string().contains("feature 12"), "{err}");
}

/// A small deterministic generator for the mutation test.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn mutated_files_never_panic() {
    let mut rng = Lcg(0x7a11_9f0f);
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "perf_data_converter__perf.data.singleprocess-3.8",
        "perf_data_converter__perf.data.piped.lost_samples-4.4",
        "ubench__perf-mem-39891",
        "linux-perf-data__sleep.compressed2.data",
    ] {
        let Some(path) = corpus_file(name) else { return };
        let full = std::fs::read(&path).unwrap();
        let (mut ok, mut errs) = (0, 0);
        for round in 0..150 {
            let mut bad = full.clone();
            let flips = 1 + rng.next() % 8;
            for _ in 0..flips {
                // Bias towards the header and the first records, where sizes live.
                let limit = if rng.next() % 2 == 0 { bad.len().min(4096) } else { bad.len() };
                let at = (rng.next() as usize) % limit;
                bad[at] = match rng.next() % 4 {
                    0 => 0,
                    1 => 0xff,
                    _ => rng.next() as u8,
                };
            }
            if round % 10 == 0 {
                bad.truncate((rng.next() as usize) % bad.len());
            }
            let p = write_temp(&tmp, "mutant", &bad);
            match try_import(&p, &ImportOptions::default()) {
                Ok(_) => ok += 1,
                Err(e) => {
                    let msg = e.to_string();
                    assert!(!msg.contains("panic"), "{name} round {round}: {msg}");
                    assert!(!msg.contains('\n'), "{msg}");
                    errs += 1;
                }
            }
        }
        eprintln!("{name}: {ok} mutants imported, {errs} rejected");
    }
}
