//! The checks the fuzz targets run, shared with the seed-corpus replay test
//! (`crates/tailprof-cli/tests/fuzz_corpus.rs`, a plain `cargo test`, no nightly).
//!
//! Every check takes arbitrary bytes and must return without panicking, hanging or
//! allocating beyond the input: bad input is an error or counted damage, never a crash.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use tailprof_analyze::items::ItemsOptions;
use tailprof_analyze::{flat_profile, trace_info, GroupBy, KernelSymbols, ProfileOptions, Symbolizer, SymbolizerOptions};
use tailprof_format::chunk::fix_checksums;
use tailprof_format::losses::LossTable;
use tailprof_format::{Flow, Record, Sink, StackDef, StackTable, TraceReader, VecSink};

/// Symbolization without the running kernel's symbols (deterministic across machines).
fn symbolizer() -> Symbolizer {
    Symbolizer::new(SymbolizerOptions { kernel: KernelSymbols::Off, ..Default::default() })
}

/// Counts records and checks the stack contract: definitions arrive in id order with
/// their callers first, and every stack a record uses was defined before it.
#[derive(Default)]
struct Count(u64, StackTable);

impl Sink for Count {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.0 += 1;
        let _ = r.time();
        let stack = match r {
            Record::Sample(s) => s.stack,
            Record::Switch(w) => w.stack,
            _ => return Flow::Continue,
        };
        assert!(stack.is_none() || self.1.contains(stack), "stack used before its definition");
        assert!(self.1.depth(stack) <= self.1.len());
        Flow::Continue
    }
    fn handle_stack(&mut self, d: &StackDef) {
        assert!(self.1.handle_def(d), "stack definition out of order");
    }
}

/// The trace reader (the `read_trace` target).
pub fn check_read_trace(data: &[u8]) {
    let Ok(mut r) = TraceReader::from_bytes(data.to_vec()) else { return };
    let mut sink = Count::default();
    let s = r.read_all(&mut sink).expect("in-memory reads do not fail");
    assert_eq!(s.bytes, data.len() as u64);
    assert!(s.damaged_bytes + s.truncated_bytes <= s.bytes);
    assert_eq!(s.records, sink.0);
    let (s2, _, _) = r.summarize().expect("in-memory reads do not fail");
    assert_eq!(s2.truncated_bytes, s.truncated_bytes);
    let mut n = 0u64;
    let s3 = r.for_each_sample(&mut |_| n += 1).expect("in-memory reads do not fail");
    assert_eq!(s3.samples, n);
    assert_eq!(r.stacks().len(), sink.1.len());
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A scratch file for the importer (it reads a path), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(data: &[u8]) -> Scratch {
        let p = std::env::temp_dir().join(format!("tailprof-fuzz-{}-{}.data", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let mut f = std::fs::File::create(&p).expect("scratch file");
        f.write_all(data).expect("scratch file");
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `tailprof import` (the `import` target): a perf.data file of any content converts
/// or fails with one line; the records come out in time order; a converted trace reads
/// back.
pub fn check_import(data: &[u8]) {
    let input = Scratch::new(data);
    let mut sink = VecSink::default();
    match tailprof_import::import_to_sink(&input.0, &Default::default(), &mut sink) {
        Ok(imp) => {
            let times: Vec<u64> = sink.0.iter().map(|r| r.time()).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "import delivered records out of time order");
            assert_eq!(imp.summary.samples, sink.0.iter().filter(|r| matches!(r, Record::Sample(_))).count() as u64);
            // Into a trace in memory and back.
            let mut w = tailprof_format::TraceWriter::new(Vec::new(), &imp.header).expect("header");
            let mut written = 0u64;
            for r in &sink.0 {
                if w.write(r).is_ok() {
                    written += 1;
                }
            }
            let (bytes, _) = w.finish_into_inner(None).expect("in-memory write");
            let mut back = VecSink::default();
            TraceReader::from_bytes(bytes).expect("own trace").read_all(&mut back).expect("own trace");
            assert_eq!(back.0.len() as u64, written);
            // The same import straight into a writer (the stream's stack definitions become
            // the writer's own): it fails with one line or reads back every record.
            let mut w = tailprof_format::TraceWriter::new(Vec::new(), &imp.header).expect("header");
            match tailprof_import::import_to_sink(&input.0, &Default::default(), &mut w) {
                Ok(_) => {
                    let (bytes, _) = w.finish_into_inner(None).expect("in-memory write");
                    let mut back = VecSink::default();
                    TraceReader::from_bytes(bytes).expect("own trace").read_all(&mut back).expect("own trace");
                    assert_eq!(back.0.len(), sink.0.len());
                }
                Err(e) => assert!(!e.to_string().contains('\n'), "error is one line: {e}"),
            }
            // A sink that stops early gets no more than it asked for.
            let mut first = FirstN(Vec::new(), 3);
            tailprof_import::import_to_sink(&input.0, &Default::default(), &mut first).expect("imported before");
            assert_eq!(first.0[..], sink.0[..sink.0.len().min(3)]);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "error is one line: {msg}");
        }
    }
    check_side_band(data);
}

/// Takes the first `.1` records, then stops.
struct FirstN(Vec<Record>, usize);

impl Sink for FirstN {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.0.push(r.clone());
        if self.0.len() >= self.1 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// The bytes as one raw side-band record, both byte orders, with and without a
/// `sample_id` trailer: decoded or refused, never a panic.
fn check_side_band(data: &[u8]) {
    use tailprof_perf_abi::{sample_type as st, Endian, SampleLayout};
    let layouts =
        [SampleLayout::new(0), SampleLayout::new(st::TID | st::TIME | st::ID | st::CPU | st::IDENTIFIER).with_sample_id_all(true)];
    for endian in [Endian::Little, Endian::Big] {
        for l in &layouts {
            if let Ok(Some((tailprof_perf_abi::SideBand::Mmap(m), _))) = l.decode_side_band(data, endian) {
                assert!(m.build_id.is_none_or(|b| b.len() <= tailprof_perf_abi::MAX_MMAP2_BUILD_ID));
            }
        }
    }
}

/// Bytes as a trace: as given, and with every chunk re-checksummed so mutated contents
/// reach the decoders and the analysis.
fn traces(data: &[u8]) -> Vec<TraceReader> {
    let mut fixed = data.to_vec();
    fix_checksums(&mut fixed);
    let mut out = Vec::new();
    if let Ok(r) = TraceReader::from_bytes(data.to_vec()) {
        out.push(r);
    }
    if fixed != data {
        if let Ok(r) = TraceReader::from_bytes(fixed) {
            out.push(r);
        }
    }
    out
}

/// The loss table and its renderings (every analysis command prints it).
fn check_losses(r: &mut TraceReader) {
    let (read, stats, _) = r.summarize().expect("in-memory reads do not fail");
    let t = LossTable::new(&stats, Some(&read));
    let text = tailprof_present::losses::render_losses(&t);
    assert_eq!(text.is_empty(), t.is_empty());
    let j = tailprof_present::losses::losses_json(&t).expect("json");
    assert_eq!(j.as_array().map(|a| a.len()), Some(t.rows.len()));
}

/// `tailprof items` (the `items` target): the items document (join, stacks, memory),
/// its text and JSON, `--explain` of the first item, and the loss table, on any trace.
pub fn check_items(data: &[u8]) {
    use tailprof_analyze::items::document::{document, ItemsDocument, ItemsQuery};
    for mut r in traces(data) {
        let mut sym = symbolizer();
        let q = ItemsQuery { options: ItemsOptions::default(), memory: true, ..Default::default() };
        if let Ok(doc) = document(&mut r, &q, &mut sym) {
            let _ = tailprof_present::items::render_document(&doc);
            let _ = tailprof_present::items::document_json(&doc).expect("json");
            if let ItemsDocument::List(list) = &doc {
                if let Some(first) = list.report.items.first() {
                    let q = ItemsQuery { explain: Some(first.row.id), ..q };
                    if let Ok(x) = document(&mut r, &q, &mut sym) {
                        let _ = tailprof_present::items::render_document(&x);
                        let _ = tailprof_present::items::document_json(&x).expect("json");
                    }
                }
            }
        }
        check_losses(&mut r);
    }
}

/// `tailprof report` and `tailprof info` (the `report` target) on any trace.
pub fn check_report(data: &[u8]) {
    for mut r in traces(data) {
        for by in [GroupBy::Function, GroupBy::Binary, GroupBy::Thread] {
            let mut sym = symbolizer();
            if let Ok(p) = flat_profile(&mut r, &ProfileOptions { by, event: None, ..Default::default() }, &mut sym) {
                let _ = tailprof_present::table::render_profile(&p, &Default::default());
                let _ = tailprof_present::json::profile_json_string(&p, Some(10)).expect("json");
            }
        }
        if let Ok(i) = trace_info(&mut r, true) {
            let _ = tailprof_present::table::render_info(&i);
            let _ = tailprof_present::json::info_json_string(&i).expect("json");
        }
        check_losses(&mut r);
    }
}

/// The ELF reader's symbol and note paths under the agent's bounds (issue 19): parse,
/// both symbol tables with their names, the build-id notes, and the agent's streamed
/// symbol table (`symtab::write_elf_table`, from a file). Every table read is within
/// `MAX_TABLE_BYTES`, every name within `MAX_NAME_BYTES` plus the truncation mark, and
/// nothing panics.
pub fn check_elf(data: &[u8]) {
    use tailprof_elf::{Elf, MAX_NAME_BYTES, MAX_TABLE_BYTES, SHT_DYNSYM, SHT_SYMTAB, TRUNCATED_MARK};
    let longest = MAX_NAME_BYTES + TRUNCATED_MARK.len();
    let _ = tailprof_elf::file_build_id(data);
    if let Ok(elf) = Elf::parse(data) {
        let _ = elf.build_id();
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let Ok(Some(t)) = elf.symbol_table(kind) else { continue };
            assert!(t.header.size <= MAX_TABLE_BYTES && t.strings.size <= MAX_TABLE_BYTES);
            let mut names = elf.strings(&t);
            for s in elf.symbols(&t).take(1 << 16) {
                let Ok(s) = s else { break };
                let _ = s.section();
                if let Ok(Some(n)) = names.get(s.name.into()) {
                    assert!(n.len() <= longest, "a name of {} bytes", n.len());
                }
            }
        }
        for p in elf.program_headers().into_iter().flatten().take(1 << 12) {
            if p.is_err() {
                break;
            }
        }
    }
    // The agent's path reads an open file.
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("tailprof-fuzz-elf-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    if std::fs::create_dir(&dir).is_err() {
        return;
    }
    let bin = dir.join("bin");
    if std::fs::File::create(&bin).and_then(|mut f| f.write_all(data)).is_ok() {
        if let Ok(f) = std::fs::File::open(&bin) {
            let out = dir.join("t.parquet");
            if let Ok(t) = tailprof_agent::symtab::write_elf_table(&f, "ab", "bin", &out) {
                let rows = tailprof_store::read::read_symbols_file(&out).expect("the written table reads back");
                assert_eq!(rows.len() as u64, t.functions);
                for r in rows {
                    // demangling a cut name may only shorten or keep it readable
                    assert!(r.name.len() <= 4 * longest, "a stored name of {} bytes", r.name.len());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
