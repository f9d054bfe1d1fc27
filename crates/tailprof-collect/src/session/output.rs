//! Where the recorder writes: the [`RecordOutput`] trait, implemented by the trace
//! writer and by [`VecOutput`] (in memory, for tests and tools).

use std::io::Write;

use tailprof_format::{BuildIdEntry, FormatError, Record, Sample, TraceWriter};

/// Where the recorder puts records. Implemented by [`TraceWriter`] and by
/// [`VecOutput`] (tests).
pub trait RecordOutput {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError>;
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError>;
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError>;
    fn end_round(&mut self) -> Result<(), FormatError>;
    /// Make everything written so far durable (close the open chunk, flush the file).
    fn flush(&mut self) -> Result<(), FormatError> {
        Ok(())
    }
    fn bytes_written(&self) -> u64;
}

impl<W: Write> RecordOutput for TraceWriter<W> {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        self.write(r)
    }
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        TraceWriter::write_sample(self, s)
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        TraceWriter::add_build_id(self, e)
    }
    fn end_round(&mut self) -> Result<(), FormatError> {
        TraceWriter::end_round(self)
    }
    fn flush(&mut self) -> Result<(), FormatError> {
        TraceWriter::flush_chunk(self)
    }
    fn bytes_written(&self) -> u64 {
        TraceWriter::bytes_written(self)
    }
}

/// Keeps everything in memory (for tests and tools).
#[derive(Debug, Default)]
pub struct VecOutput {
    pub records: Vec<Record>,
    pub build_ids: Vec<BuildIdEntry>,
    pub rounds: u64,
}

impl RecordOutput for VecOutput {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        self.records.push(r.clone());
        Ok(())
    }
    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        self.records.push(Record::Sample(s.clone()));
        Ok(())
    }
    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        self.build_ids.push(e);
        Ok(())
    }
    fn end_round(&mut self) -> Result<(), FormatError> {
        self.rounds += 1;
        Ok(())
    }
    fn bytes_written(&self) -> u64 {
        0
    }
}
