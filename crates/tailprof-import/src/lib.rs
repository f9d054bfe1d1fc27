//! tailprof import: converts recordings made by Linux `perf record` (perf.data, file or
//! pipe mode, zstd-compressed or not, PEBS recordings included) into tailprof records.
//!
//! Parsing is done by the [`linux_perf_data`] crate (file layout, header features, record
//! framing, decompression, and the round-based sorting of records from different CPUs).
//! This crate maps what perf recorded onto the shared record model of `tailprof-format`:
//!
//! | perf.data | tailprof |
//! |---|---|
//! | perf_event_attr (+ HEADER_EVENT_DESC names) | one [`EventDesc`](tailprof_format::EventDesc) each |
//! | PERF_RECORD_SAMPLE: IP, TID, TIME, CPU, PERIOD, ADDR, WEIGHT / WEIGHT_STRUCT (var1_dw), DATA_SRC, REGS_USER | [`Sample`](tailprof_format::Sample) |
//! | MMAP, MMAP2 (prot, build-id) | [`Mmap`](tailprof_format::Mmap) |
//! | COMM, FORK, EXIT | `Comm`, `Fork`, `Exit` |
//! | LOST / LOST_SAMPLES | [`Lost`](tailprof_format::Lost) with `RingFull` / `Samples` |
//! | THROTTLE / UNTHROTTLE | [`Throttle`](tailprof_format::Throttle) |
//! | HEADER_BUILD_ID (header feature, or records in pipe mode) | [`BuildIdEntry`] |
//! | CMDLINE, HOSTNAME, OSRELEASE, ARCH, CPUDESC, NRCPUS, ... | [`TraceHeader`] fields and `extra` |
//!
//! Other record types (context switches, ksymbol, ...) are counted in
//! [`ImportSummary::skipped_by_type`]. Records reach the consumer in non-decreasing time
//! order (see [`PerfDataReader`]). A CPU that perf did not record is [`UNKNOWN_CPU`].
//!
//! Entry points: [`import_file`] (what `tailprof import` runs), [`import_to_sink`]
//! (convert into any [`Sink`], no trace file involved) and [`PerfDataReader`] (pull one
//! record at a time). The library never prints and never exits; damaged input gives an
//! [`ImportError`] (or, for recordings that were cut off, a partial import with a warning).

mod header;
mod perfmap;
mod reader;
mod sample;
mod source;
pub mod stacks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use reader::PerfDataReader;
use tailprof_format::atomic::AtomicFile;
use tailprof_format::{sink_result, BuildIdEntry, FormatError, Sink, TraceHeader, TraceWriter};

/// The CPU number of samples and records whose perf event did not record the CPU
/// (perf's `(u32)-1`).
pub const UNKNOWN_CPU: u32 = u32::MAX;

/// Errors of the importer. Every message is one line and names the input file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a perf.data file ({found}; expected magic \"PERFILE2\")", path.display())]
    NotPerfData { path: PathBuf, found: String },
    #[error("{}: truncated perf.data file: {detail}", path.display())]
    Truncated { path: PathBuf, detail: String },
    #[error("{}: corrupt perf.data file: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error("{}: unsupported perf.data file: {detail}", path.display())]
    Unsupported { path: PathBuf, detail: String },
    #[error("{}: cannot write the trace: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
}

/// How to import. `Default` gives the behaviour of `tailprof import`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportOptions {
    /// Import a recording that was never finished (data size 0 in its header) or that
    /// was cut off, up to its last complete record, with a warning. When false, such
    /// files are an [`ImportError::Truncated`].
    pub recover_truncated: bool,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { recover_truncated: true }
    }
}

/// What an import converted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// PERF_RECORD_SAMPLE records converted.
    pub samples: u64,
    /// MMAP, MMAP2, COMM, FORK and EXIT records converted.
    pub side_band: u64,
    /// Sum of the counts of PERF_RECORD_LOST records (records lost to a full ring).
    pub lost_records: u64,
    /// Sum of the counts of PERF_RECORD_LOST_SAMPLES records (samples the PMU dropped).
    pub lost_samples: u64,
    /// Number of LOST and LOST_SAMPLES records.
    pub lost_events: u64,
    /// THROTTLE and UNTHROTTLE records.
    pub throttles: u64,
    /// Records of types tailprof does not keep (see `skipped_by_type`).
    pub skipped_records: u64,
    /// Skipped records by perf record type name, e.g. `"SWITCH_CPU_WIDE"`, `"ID_INDEX"`.
    pub skipped_by_type: BTreeMap<String, u64>,
    /// Records of a kept type whose body could not be decoded (skipped, with a warning).
    pub malformed_records: u64,
    /// Records that were still out of time order after sorting (their time was raised to
    /// the previous record's). Zero for files written by a correct perf.
    pub time_clamped: u64,
    /// Events (perf attrs) in the file.
    pub events: usize,
    /// Context-switch records (`SWITCH`, `SWITCH_CPU_WIDE`; the idle task's are skipped),
    /// not counted in `side_band`.
    pub switches: u64,
    /// `sched:sched_waking` samples imported as `Wakeup` records (not in `samples`).
    pub wakeups: u64,
    /// JIT code names copied from the recorded processes' perf maps
    /// (`/tmp/perf-PID.map`, read at import time: docs/SYMBOLS.md).
    pub jit_names: u64,
    /// Perf-map names skipped (bad or long lines, over the bound, a refused file),
    /// stored as `Lost { JitNames }`.
    pub skipped_jit_names: u64,
    /// Things the user should know (one line each).
    pub warnings: Vec<String>,
}

/// The result of [`import_to_sink`].
#[derive(Debug, Clone)]
pub struct Imported {
    pub header: TraceHeader,
    pub build_ids: Vec<BuildIdEntry>,
    pub summary: ImportSummary,
}

/// Convert a perf.data file into records handed to `sink`, in time order: the build-ids
/// of the perf.data header first ([`Sink::handle_build_id`]), each stack node before the
/// first record that uses it ([`Sink::handle_stack`], ids from 1 in order, as a
/// [`TraceWriter`] would intern them), a [`Sink::handle_round_end`] every 4,096 records,
/// and at the end the build-ids found in a pipe-mode stream and the JIT names of the
/// recorded processes' perf maps ([`Sink::handle_jit`], read at import time; a sink that
/// names samples as they come must keep them for a second pass, as the trace writer does). Stops early, with what was
/// converted so far, when the sink answers [`tailprof_format::Flow::Stop`]; a sink that failed
/// ([`Sink::take_error`]) gives [`ImportError::Write`].
pub fn import_to_sink(path: &Path, opts: &ImportOptions, sink: &mut dyn Sink) -> Result<Imported, ImportError> {
    let reader = PerfDataReader::open(path, opts)?;
    let (imported, _) = convert(reader, sink, path, &mut |_, _| {})?;
    Ok(imported)
}

/// The one import loop ([`import_to_sink`] and [`import_file`]). `out` names the sink in
/// a [`ImportError::Write`]. Also returns the time from the first to the last record
/// (records at time 0 left out).
fn convert(
    mut reader: PerfDataReader,
    sink: &mut dyn Sink,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Imported, Option<u64>), ImportError> {
    let werr = |sink: &mut dyn Sink| sink_result(sink).map_err(|source| ImportError::Write { path: out.to_path_buf(), source });
    let header_ids = reader.build_ids().len();
    for e in reader.build_ids() {
        sink.handle_build_id(e);
    }
    let total = reader.bytes_total();
    progress(0, total);
    let (mut first, mut last) = (None, None);
    let mut n: u64 = 0;
    // Stacks as a writer interns them: the same ids, nodes delivered before first use.
    let mut stacks = stacks::ImportStacks::new();
    let mut table = tailprof_format::StackTable::new();
    let mut stopped = false;
    let mut perf_maps = perfmap::PerfMaps::default();
    while let Some(mut r) = reader.next_record()? {
        let t = r.time();
        if t != 0 {
            first.get_or_insert(t);
            last = Some(t);
        }
        let known = table.len();
        stacks.process_with(&mut r, reader.stack_fields(), &mut |f| {
            table.intern_leaf_first(&f[..f.len().min(tailprof_format::MAX_STACK_DEPTH)])
        });
        let r = reader.finish_record(r);
        if let tailprof_format::Record::Mmap(m) = &r {
            perf_maps.note_mmap(m);
        }
        for d in table.defs_since(known) {
            sink.handle_stack(&d);
        }
        if sink.handle_record(&r).is_stop() {
            stopped = true;
            break;
        }
        n += 1;
        if n % 4096 == 0 {
            sink.handle_round_end();
            progress(reader.bytes_read(), total);
        }
    }
    werr(sink)?;
    let (header, build_ids, mut summary) = reader.into_parts();
    if !stopped {
        // JIT names from the processes' perf maps (the trace keeps them; valid for the
        // whole trace, like every perf-map name).
        perf_maps.read_all(Path::new("/tmp"), &mut |e| sink.handle_jit(e));
        if perf_maps.skipped > 0 {
            let lost = tailprof_format::Lost {
                time: last.unwrap_or(0),
                cpu: 0,
                event: None,
                kind: tailprof_format::LossKind::JitNames,
                count: perf_maps.skipped,
            };
            sink.handle_record(&tailprof_format::Record::Lost(lost));
        }
        summary.jit_names = perf_maps.entries;
        summary.skipped_jit_names = perf_maps.skipped;
        summary.warnings.extend(perf_maps.notes);
        werr(sink)?;
        for e in build_ids.iter().skip(header_ids) {
            sink.handle_build_id(e);
        }
        werr(sink)?;
    }
    let duration = first.zip(last).map(|(f, l)| l - f);
    Ok((Imported { header, build_ids, summary }, duration))
}

/// Convert the perf.data file `input` into the tailprof trace `output`. `progress` is
/// called now and then with (bytes of `input` read, size of `input`).
///
/// `output` is written through [`tailprof_format::atomic::AtomicFile`]: a new 0600 file
/// renamed over the final name on success (a symlink there is replaced, never
/// followed). On error nothing is written and an existing `output` is untouched.
pub fn import_file(
    input: &Path,
    output: &Path,
    opts: &ImportOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ImportSummary, ImportError> {
    let reader = PerfDataReader::open(input, opts)?;
    let werr = |source| ImportError::Write { path: output.to_path_buf(), source };
    let file = AtomicFile::create(output).map_err(|e| werr(FormatError::Io { path: output.display().to_string(), source: e }))?;
    let mut writer = TraceWriter::new(std::io::BufWriter::with_capacity(256 << 10, file), reader.header()).map_err(werr)?;
    let total = reader.bytes_total();
    let (imported, duration) = convert(reader, &mut writer, output, progress)?;
    let (out, _) = writer.finish_into_inner(duration).map_err(werr)?;
    let file = out.into_inner().map_err(|e| werr(FormatError::RawIo(e.into_error())))?;
    file.commit().map_err(|e| werr(FormatError::Io { path: output.display().to_string(), source: e }))?;
    progress(total, total);
    Ok(imported.summary)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reader_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<super::PerfDataReader>();
        send::<super::ImportError>();
    }
}
