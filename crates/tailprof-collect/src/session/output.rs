//! Where the recorder writes: the [`RecordOutput`] trait, implemented by the trace
//! writer and by [`VecOutput`] (in memory, for tests and tools), and [`TraceFile`], the
//! trace file on disk (created safely, see `tailprof_format::atomic`).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use tailprof_format::atomic::AtomicFile;
use tailprof_format::{BuildIdEntry, Flow, FormatError, Record, Sample, Sink, TraceHeader, TraceWriter, WriteSummary};

/// The writer of a trace file made by [`TraceFile`].
pub type FileTraceWriter = TraceWriter<BufWriter<AtomicFile>>;

/// A trace file being created. The life of a recording's output:
///
/// 1. [`TraceFile::create`] before anything is launched or attached: a new temporary
///    file (mode 0600, `O_EXCL|O_NOFOLLOW`) next to the final name, so an unwritable
///    directory fails first. Dropping it (the recorder could not start: no such pid, no
///    such command) removes it and leaves an existing file of the final name untouched.
/// 2. [`TraceFile::start`] once recording has started: renames the file to its final
///    name (replacing whatever was there, a symlink *itself*, never its target) and
///    writes the trace header. From here on a killed recorder leaves a readable trace.
/// 3. [`finish`]: trailer, flush, fsync.
#[derive(Debug)]
pub struct TraceFile {
    file: AtomicFile,
}

fn io_error(path: &Path, source: std::io::Error) -> FormatError {
    FormatError::Io { path: path.display().to_string(), source }
}

impl TraceFile {
    pub fn create(path: &Path) -> Result<TraceFile, FormatError> {
        let file = AtomicFile::create(path).map_err(|e| io_error(path, e))?;
        Ok(TraceFile { file })
    }

    /// The path asked for.
    pub fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// Publish the file under its final name and write the header.
    pub fn start(mut self, header: &TraceHeader) -> Result<FileTraceWriter, FormatError> {
        let path = self.path();
        self.file.publish().map_err(|e| io_error(&path, e))?;
        TraceWriter::new(BufWriter::with_capacity(1 << 20, self.file), header)
    }
}

/// Finish a trace written through [`TraceFile`]: trailer, flush, fsync.
pub fn finish(writer: FileTraceWriter, duration_ns: Option<u64>) -> Result<WriteSummary, FormatError> {
    let (out, summary) = writer.finish_into_inner(duration_ns)?;
    let file = out.into_inner().map_err(|e| FormatError::RawIo(e.into_error()))?;
    let path = file.path().to_path_buf();
    file.commit().map_err(|e| io_error(&path, e))?;
    Ok(summary)
}

/// Where the recorder puts records: the workspace's one record stream
/// ([`tailprof_format::Sink`]: records, build-ids, JIT names, the first error kept and
/// returned) plus what only a live recording needs: round ends that may take long
/// (`end_round_with`), durability (`flush`), the bytes written so far, and interning the
/// stacks it unwinds (the stream's `handle_stack` hands out definitions of ids a reader
/// already has; the recorder makes ids). Implemented by [`TraceWriter`], by [`VecOutput`]
/// (tests) and by the agent's aggregator.
///
/// `write_record`/`write_sample`/`add_build_id` are the stream's handlers with the sink's
/// error returned at once (the recorder stops on the first).
pub trait RecordOutput: Sink {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        self.handle_record(r);
        sink_result(self)
    }
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        self.handle_sample(s);
        sink_result(self)
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        self.handle_build_id(&e);
        sink_result(self)
    }
    /// Whether the stream's `handle_jit` keeps what it is given (if not, the recorder
    /// does not look for perf maps and jitdumps at all).
    fn keeps_jit(&self) -> bool {
        false
    }
    fn end_round(&mut self) -> Result<(), FormatError> {
        self.handle_round_end();
        sink_result(self)
    }
    /// [`RecordOutput::end_round`], calling `between` now and then if it has long work
    /// to do (encoding a chunk), so the recorder can drain its rings meanwhile.
    fn end_round_with(&mut self, between: &mut dyn FnMut()) -> Result<(), FormatError> {
        let _ = between;
        self.end_round()
    }
    /// Make everything written so far durable (close the open chunk, flush the file).
    fn flush(&mut self) -> Result<(), FormatError> {
        Ok(())
    }
    fn bytes_written(&self) -> u64;
    /// Intern a call stack (innermost frame first) for `Sample::stack`/`Switch::stack`.
    fn intern_stack(&mut self, _frames_leaf_first: &[tailprof_format::Frame]) -> tailprof_format::StackId {
        tailprof_format::StackId::NONE
    }
}

/// `Ok` while the sink goes on, its error once it failed (statically dispatched, so the
/// recorder's per-record path stays one inlined check).
#[inline(always)]
fn sink_result<S: Sink + ?Sized>(s: &mut S) -> Result<(), FormatError> {
    if s.flow().is_stop() {
        if let Some(e) = s.take_error() {
            return Err(e);
        }
    }
    Ok(())
}

impl<W: Write> RecordOutput for TraceWriter<W> {
    fn keeps_jit(&self) -> bool {
        true
    }
    #[inline(always)]
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        self.write(r)
    }
    #[inline(always)]
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        TraceWriter::write_sample(self, s)
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        TraceWriter::add_build_id(self, e)
    }
    fn end_round(&mut self) -> Result<(), FormatError> {
        TraceWriter::end_round(self)
    }
    fn end_round_with(&mut self, between: &mut dyn FnMut()) -> Result<(), FormatError> {
        TraceWriter::end_round_with(self, between)
    }
    fn flush(&mut self) -> Result<(), FormatError> {
        TraceWriter::flush_chunk(self)
    }
    fn bytes_written(&self) -> u64 {
        TraceWriter::bytes_written(self)
    }
    fn intern_stack(&mut self, frames_leaf_first: &[tailprof_format::Frame]) -> tailprof_format::StackId {
        TraceWriter::intern_stack(self, frames_leaf_first)
    }
}

/// Keeps everything in memory (for tests and tools).
#[derive(Debug, Default)]
pub struct VecOutput {
    pub records: Vec<Record>,
    pub build_ids: Vec<BuildIdEntry>,
    pub rounds: u64,
    /// Stacks the records' `stack` ids refer to.
    pub stacks: tailprof_format::StackTable,
}

impl Sink for VecOutput {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.records.push(r.clone());
        Flow::Continue
    }
    fn handle_sample(&mut self, s: &Sample) {
        self.records.push(Record::Sample(s.clone()));
    }
    fn handle_build_id(&mut self, e: &BuildIdEntry) {
        self.build_ids.push(e.clone());
    }
    fn handle_round_end(&mut self) {
        self.rounds += 1;
    }
}

impl RecordOutput for VecOutput {
    fn bytes_written(&self) -> u64 {
        0
    }
    fn intern_stack(&mut self, frames_leaf_first: &[tailprof_format::Frame]) -> tailprof_format::StackId {
        self.stacks.intern_leaf_first(frames_leaf_first)
    }
}
