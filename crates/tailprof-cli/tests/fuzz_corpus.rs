//! Replays the committed fuzz seed corpus (`fuzz/corpus/<target>/*`) through the same
//! check functions the cargo-fuzz targets run (`fuzz/checks/mod.rs`), as a normal
//! `cargo test` on stable. CI also runs each target for a short time when `cargo fuzz`
//! and a nightly toolchain are there (`.ci/run`).
//!
//! Regenerate the import and analysis seeds (the `read_trace` seeds come from
//! `cargo run -p tailprof-format --example fuzz_seeds -- fuzz/corpus/read_trace`):
//!
//! ```text
//! TAILPROF_WRITE_SEEDS=1 cargo test -p tailprof --test fuzz_corpus write_seeds
//! ```

#[path = "../../../fuzz/checks/mod.rs"]
mod checks;
#[path = "../../tailprof-import/tests/craft/mod.rs"]
mod craft;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use tailprof_format::synth::{random_records, Rng};
use tailprof_format::{
    ClockInfo, EventDesc, LossKind, Lost, Marker, MarkerKind, MarkerSource, Mmap, Record, Sample, TraceHeader, TraceWriter, WriterOptions,
};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

fn replay(target: &str, check: fn(&[u8])) {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(f.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target}: {} of {} seeds fail: {failed:?}", failed.len(), files.len());
}

#[test]
fn replay_read_trace() {
    replay("read_trace", checks::check_read_trace);
}

#[test]
fn replay_import() {
    replay("import", checks::check_import);
}

#[test]
fn replay_items() {
    replay("items", checks::check_items);
}

#[test]
fn replay_report() {
    replay("report", checks::check_report);
}

/// Issue 19: the ELF reader's symbol and note paths and the agent's symbol table, under
/// the agent's bounds (crafted seeds: functions with a build-id note, 64 functions sharing
/// a 9,000-byte name, a string table declared 16 GiB, unterminated names).
#[test]
fn replay_elf() {
    replay("elf", checks::check_elf);
}

fn items_trace(seed: u64, dup: bool) -> Vec<u8> {
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(1000), ..Default::default() }],
        source: "record".into(),
        clock: Some(ClockInfo::Monotonic),
        ..Default::default()
    };
    let opts = WriterOptions { max_records: 16, ..Default::default() };
    let mut w = TraceWriter::with_options(Vec::new(), &header, opts).unwrap();
    let mut rng = Rng::new(seed);
    w.write(&Record::Mmap(Mmap {
        time: 0,
        pid: 7,
        tid: 7,
        start: 0x4000,
        len: 0x1000,
        pgoff: 0,
        path: "/bin/true".into(),
        ..Default::default()
    }))
    .unwrap();
    let marker = |time, kind, item, tid| Record::Marker(Marker { time, pid: 7, tid, kind, item, class: 0, source: MarkerSource::Api });
    let mut t = 1_000u64;
    let mut cut = None;
    for item in 1..=8u64 {
        let tid = 7 + (item % 2) as u32;
        w.write(&marker(t, MarkerKind::Begin, item, tid)).unwrap();
        for _ in 0..(3 + rng.below(12)) {
            t += 1000;
            let ip = 0x4000 + rng.below(0x1000);
            w.write_sample(&Sample { time: t, ip, pid: 7, tid, period: 1000, ..Default::default() }).unwrap();
        }
        t += 500;
        // Item 5 never ends; item 6 ends twice.
        if item != 5 {
            w.write(&marker(t, MarkerKind::End, item, tid)).unwrap();
        }
        if item == 6 {
            w.write(&marker(t + 1, MarkerKind::End, item, tid)).unwrap();
        }
        if item == 3 {
            w.write(&Record::Lost(Lost { time: t, cpu: 0, event: Some(0), kind: LossKind::RingFull, count: 4 })).unwrap();
        }
        if item == 4 {
            w.flush_chunk().unwrap();
            cut = Some(w.bytes_written() as usize);
        }
    }
    let (mut bytes, _) = w.finish_into_inner(Some(t)).unwrap();
    if dup {
        // Repeat the chunks after item 4 once (the reader skips them as duplicates).
        let tail = bytes[cut.unwrap()..].to_vec();
        bytes.extend_from_slice(&tail);
    }
    bytes
}

#[test]
fn write_seeds() {
    if std::env::var_os("TAILPROF_WRITE_SEEDS").is_none() {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "set TAILPROF_WRITE_SEEDS=1 to rewrite fuzz/corpus/{import,items,report}");
        return;
    }
    let import = corpus_dir("import");
    std::fs::create_dir_all(&import).unwrap();
    std::fs::write(import.join("seed-valid.data"), craft::small_valid_file()).unwrap();
    std::fs::write(import.join("seed-aux-1.5g.data"), craft::huge_auxtrace_file(1_500_000_000)).unwrap();
    let mut aux_ok = Vec::new();
    craft::sample(&mut aux_ok, 0x1000, 10);
    craft::auxtrace(&mut aux_ok, 16);
    aux_ok.extend_from_slice(&[0xAB; 16]);
    craft::sample(&mut aux_ok, 0x2000, 20);
    std::fs::write(import.join("seed-aux-ok.data"), craft::perf_data_file(&aux_ok)).unwrap();
    // Cut-off and unfinished recordings.
    let v = craft::small_valid_file();
    std::fs::write(import.join("seed-cut.data"), &v[..v.len() - 20]).unwrap();
    let mut unfinished = v.clone();
    unfinished[48..56].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(import.join("seed-unfinished.data"), unfinished).unwrap();

    for target in ["items", "report"] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for seed in 0..3u64 {
            std::fs::write(dir.join(format!("seed-items-{seed}.tprof")), items_trace(seed, seed == 2)).unwrap();
        }
        for seed in 0..3u64 {
            let header = TraceHeader { source: "record".into(), clock: Some(ClockInfo::Monotonic), ..Default::default() };
            let mut w = TraceWriter::with_options(Vec::new(), &header, WriterOptions { max_records: 8, ..Default::default() }).unwrap();
            let mut rng = Rng::new(100 + seed);
            for r in random_records(&mut rng, 40) {
                let _ = w.write(&r);
            }
            let (bytes, _) = w.finish_into_inner(None).unwrap();
            std::fs::write(dir.join(format!("seed-random-{seed}.tprof")), bytes).unwrap();
        }
    }
}
