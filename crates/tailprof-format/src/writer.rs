//! [`TraceWriter`]: appends records to a trace, one checksummed chunk at a time.
//!
//! Owns chunking policy (when a chunk closes), compression, build-id bookkeeping, running
//! [`TraceStats`] and the trailer. The file header and header chunk are written and
//! flushed by the constructor, so even a trace killed immediately afterwards is readable.
//!
//! Chunking rules (FORMAT.md §8):
//! - a sample whose time is below the previous sample's in the open chunk closes the
//!   chunk first (time deltas are unsigned), so it is never dropped or reordered;
//! - [`TraceWriter::write`] closes the chunk when it reaches `max_records` records or about
//!   `max_raw_bytes` of encoded data;
//! - [`TraceWriter::end_round`] closes it once it holds `round_records` records, or spans
//!   `round_span_ns` of trace time with at least `min_records` records;
//! - [`TraceWriter::flush_chunk`] closes it unconditionally and flushes the output.
//!
//! Stacks: the writer owns the trace's [`StackTable`]; producers intern each stack once
//! with [`TraceWriter::intern_stack`] and put the id in `Sample::stack` /
//! `Switch::stack`. Each records chunk carries the nodes its records use (FORMAT.md
//! §5.5).
//!
//! The writer is also a [`Sink`], the end of a record stream (`import`, a trace copied
//! from a [`crate::TraceReader`]): records, build-ids, JIT names and round ends go to the
//! methods above; stack definitions ([`Sink::handle_stack`]) become the writer's own
//! nodes with the same ids, so they must continue its table (a writer fed only by one
//! stream always does). The first error is kept and returned by
//! [`Sink::take_error`] (the writer then answers [`Flow::Stop`]) and by `finish`.
//!
//! ```
//! use tailprof_format::*;
//! let header = TraceHeader { source: "record".into(), ..Default::default() };
//! let mut w = TraceWriter::new(Vec::new(), &header)?;
//! w.write_sample(&Sample { time: 1_000, ip: 0x401000, period: 1, ..Default::default() })?;
//! let (bytes, summary) = w.finish_into_inner(Some(5_000))?;
//! assert_eq!(summary.stats.samples, 1);
//! let mut r = TraceReader::from_bytes(bytes)?;
//! let mut sink = VecSink::default();
//! assert!(r.read_all(&mut sink)?.complete);
//! assert_eq!(sink.0.len(), 1);
//! # Ok::<(), FormatError>(())
//! ```

use crate::chunk::{file_header_bytes, frame_chunk, ChunkKind, MAX_PAYLOAD, MAX_RAW_BODY};
use crate::columns::Packer;
use crate::encode::{nodes_within_limits, ChunkBuilder, SampleFields, MAX_STACK_DEPTH};
use crate::meta::{encode_build_ids, note_stats_time, BuildIdSet, Trailer, MAX_STRING};
use crate::record::*;
use crate::stack::StackTable;
use crate::timecode::TimeCodec;
use crate::FormatError;
use std::io::Write;
use std::path::Path;

/// Tuning knobs of a [`TraceWriter`]. The defaults suit the recorder.
#[derive(Debug, Clone, PartialEq)]
pub struct WriterOptions {
    /// `end_round` closes the chunk once it holds this many records.
    pub round_records: usize,
    /// `end_round` also closes a chunk that spans this much trace time...
    pub round_span_ns: u64,
    /// ...provided it holds at least this many records.
    pub min_records: usize,
    /// `write` closes the chunk at this many records (hard limit, at most 2^20).
    pub max_records: usize,
    /// `write` closes the chunk at about this many bytes of encoded (uncompressed) data.
    pub max_raw_bytes: usize,
    /// zstd level for column blobs; 0 stores everything uncompressed.
    pub zstd_level: i32,
    /// Code for sample time deltas.
    pub time_codec: TimeCodec,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            round_records: 32 * 1024,
            round_span_ns: 4_000_000_000,
            min_records: 1024,
            max_records: 128 * 1024,
            max_raw_bytes: 8 << 20,
            zstd_level: 1,
            time_codec: TimeCodec::default(),
        }
    }
}

/// What [`TraceWriter::finish`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteSummary {
    /// Bytes in the file, trailer included.
    pub bytes: u64,
    /// Chunks in the file, header and trailer chunks included.
    pub chunks: u64,
    pub stats: TraceStats,
    pub duration_ns: Option<u64>,
}

/// Writes a trace. See the [module docs](self).
pub struct TraceWriter<W: Write> {
    out: Option<W>,
    path: Option<String>,
    opts: WriterOptions,
    builder: ChunkBuilder,
    packer: Packer,
    body: Vec<u8>,
    frame: Vec<u8>,
    seq: u32,
    bytes: u64,
    chunks: u64,
    records: u64,
    stats: TraceStats,
    build_ids: BuildIdSet,
    build_ids_dirty: bool,
    jit: Vec<crate::JitEntry>,
    finished: bool,
    stacks: StackTable,
    /// The first error met while used as a [`Sink`].
    sink_error: Option<FormatError>,
}

impl TraceWriter<std::io::BufWriter<std::fs::File>> {
    /// Creates (truncates) `path` and writes the file header and header chunk to it.
    pub fn create(path: &Path, header: &TraceHeader) -> Result<Self, FormatError> {
        Self::create_with_options(path, header, WriterOptions::default())
    }

    /// [`Self::create`] with explicit [`WriterOptions`].
    pub fn create_with_options(path: &Path, header: &TraceHeader, opts: WriterOptions) -> Result<Self, FormatError> {
        let name = path.display().to_string();
        let f = std::fs::File::create(path).map_err(|source| FormatError::Io { path: name.clone(), source })?;
        let mut w = Self::build(std::io::BufWriter::with_capacity(256 << 10, f), opts, Some(name));
        w.start(header)?;
        Ok(w)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header and header chunk to `out` and flushes it.
    pub fn new(out: W, header: &TraceHeader) -> Result<Self, FormatError> {
        Self::with_options(out, header, WriterOptions::default())
    }

    /// [`Self::new`] with explicit [`WriterOptions`].
    pub fn with_options(out: W, header: &TraceHeader, opts: WriterOptions) -> Result<Self, FormatError> {
        let mut w = Self::build(out, opts, None);
        w.start(header)?;
        Ok(w)
    }

    fn build(out: W, mut opts: WriterOptions, path: Option<String>) -> Self {
        opts.max_records = opts.max_records.clamp(1, crate::meta::MAX_CHUNK_RECORDS);
        opts.max_raw_bytes = opts.max_raw_bytes.clamp(1, MAX_RAW_BODY / 2);
        opts.round_records = opts.round_records.max(1);
        let level = opts.zstd_level;
        TraceWriter {
            out: Some(out),
            path,
            opts,
            builder: ChunkBuilder::default(),
            packer: Packer::new(level),
            body: Vec::new(),
            frame: Vec::new(),
            seq: 0,
            bytes: 0,
            chunks: 0,
            records: 0,
            stats: TraceStats::default(),
            build_ids: BuildIdSet::default(),
            build_ids_dirty: false,
            jit: Vec::new(),
            finished: false,
            stacks: StackTable::new(),
            sink_error: None,
        }
    }

    fn start(&mut self, header: &TraceHeader) -> Result<(), FormatError> {
        let json = serde_json::to_vec(header).map_err(|e| FormatError::BadHeader(format!("cannot serialize trace header: {e}")))?;
        if json.len() > MAX_PAYLOAD {
            return Err(FormatError::BadHeader("trace header too large".into()));
        }
        self.frame.clear();
        self.frame.extend_from_slice(&file_header_bytes());
        frame_chunk(&mut self.frame, ChunkKind::Header, 0, 0, &[], &json, json.len());
        self.seq = 1;
        self.chunks = 1;
        self.emit_frame()?;
        self.flush_out()
    }

    fn io_err(&self, e: std::io::Error) -> FormatError {
        match &self.path {
            Some(p) => FormatError::Io { path: p.clone(), source: e },
            None => FormatError::RawIo(e),
        }
    }

    fn emit_frame(&mut self) -> Result<(), FormatError> {
        let res = match self.out.as_mut() {
            Some(o) => o.write_all(&self.frame),
            None => Ok(()),
        };
        res.map_err(|e| self.io_err(e))?;
        self.bytes += self.frame.len() as u64;
        Ok(())
    }

    fn flush_out(&mut self) -> Result<(), FormatError> {
        let res = match self.out.as_mut() {
            Some(o) => o.flush(),
            None => Ok(()),
        };
        res.map_err(|e| self.io_err(e))
    }

    /// Interns a call stack given innermost frame first, and returns the id to put in
    /// `Sample::stack` or `Switch::stack` (`NONE` for no frames). A stack deeper than
    /// [`MAX_STACK_DEPTH`] keeps its innermost `MAX_STACK_DEPTH` frames (the producer
    /// should then say [`StackStatus::MaxDepth`]).
    pub fn intern_stack(&mut self, frames_leaf_first: &[Frame]) -> StackId {
        let n = frames_leaf_first.len().min(MAX_STACK_DEPTH);
        self.stacks.intern_leaf_first(&frames_leaf_first[..n])
    }

    /// The stacks interned so far (resolves the ids [`Self::intern_stack`] returned).
    pub fn stacks(&self) -> &StackTable {
        &self.stacks
    }

    fn check_stack(&self, id: StackId) -> Result<(), FormatError> {
        if id.is_none() || self.stacks.contains(id) {
            Ok(())
        } else {
            Err(FormatError::UnknownStack(id.0))
        }
    }

    /// Buffers one record; closes the current chunk when it is full. A sample older than
    /// the previous sample of the open chunk starts a new chunk.
    pub fn write(&mut self, r: &Record) -> Result<(), FormatError> {
        match r {
            Record::Sample(s) => self.write_sample(s),
            _ => {
                check_sideband_size(r)?;
                match r {
                    Record::Switch(w) => {
                        self.check_stack(w.stack)?;
                        self.stats.switches.add(w.kind, 1);
                        self.stats.switch_stacks.add(w.stack_status, 1);
                    }
                    Record::Wakeup(w) => {
                        self.check_stack(w.stack)?;
                        self.stats.wakeups += 1;
                    }
                    _ => {}
                }
                self.records += 1;
                note_stats_time(&mut self.stats, r.time());
                match r {
                    Record::Lost(l) => {
                        self.stats.add_loss(l.kind, l.count);
                    }
                    Record::Throttle(t) if t.throttled => self.stats.throttle_events += 1,
                    Record::Throttle(_) => self.stats.unthrottle_events += 1,
                    _ => {}
                }
                self.builder.push_sideband(r, &self.stacks);
                self.close_if_full()
            }
        }
    }

    /// Buffers one sample (same effect as `write(&Record::Sample(..))`, without the
    /// enum). Inlined into the recorder's loop: the common path is short, and the rare
    /// ones (a new thread or ip, a stack, optional fields, closing a chunk) are calls.
    #[inline(always)]
    pub fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        if s.regs.len() > MAX_REGS {
            return Err(FormatError::RecordTooLarge("sample register set"));
        }
        self.check_stack(s.stack)?;
        // Every field read before anything is stored (see `ChunkBuilder::push_sample`).
        let f = SampleFields::of(s);
        if f.time < self.builder.last_time() {
            self.close_chunk()?;
        }
        // Counted in `records` and `stats` when the chunk closes (see `Self::stats`).
        self.builder.push_sample(&f, s, &self.stacks);
        self.close_if_full()
    }

    #[inline]
    fn close_if_full(&mut self) -> Result<(), FormatError> {
        if self.builder.records() >= self.opts.max_records || self.builder.raw_estimate >= self.opts.max_raw_bytes {
            self.close_chunk()?;
        }
        Ok(())
    }

    /// Records (or replaces) the build-id of a path. Stored in a build-id chunk written
    /// with the next records chunk, by [`Self::flush_chunk`], or by [`Self::finish`].
    pub fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        if e.path.len() > MAX_STRING || e.build_id.len() > MAX_STRING {
            return Err(FormatError::RecordTooLarge("build-id entry"));
        }
        if self.build_ids.insert(e) {
            self.build_ids_dirty = true;
        }
        Ok(())
    }

    /// Adds a JIT code name (FORMAT.md §6.1). Stored in a JIT chunk written with the next
    /// records chunk, by [`Self::flush_chunk`], or by [`Self::finish`]; names and sources
    /// are cut to [`crate::jit::MAX_JIT_STRING`] bytes.
    pub fn add_jit(&mut self, mut e: crate::JitEntry) {
        e.name = crate::jit::clip(&e.name).to_owned();
        e.source = e.source.map(|s| crate::jit::clip(&s).to_owned());
        for f in &mut e.lines.files {
            *f = crate::jit::clip(f).to_owned();
        }
        self.jit.push(e);
    }

    fn write_jit(&mut self) -> Result<(), FormatError> {
        while !self.jit.is_empty() {
            // At most MAX_JIT_CHUNK_ENTRIES entries and about 16 MiB per chunk (the
            // payload limit is 64 MiB; an entry is at most ~8 KiB + 40 bytes).
            let mut n = 0;
            let mut bytes = 0usize;
            while n < self.jit.len().min(crate::jit::MAX_JIT_CHUNK_ENTRIES) && bytes < (16 << 20) {
                let e = &self.jit[n];
                bytes += e.name.len() + e.source.as_ref().map_or(0, String::len) + e.lines.approx_bytes() + 40;
                n += 1;
            }
            let body = crate::jit::encode_jit(&self.jit[..n]);
            self.jit.drain(..n);
            self.frame.clear();
            frame_chunk(&mut self.frame, ChunkKind::Jit, 0, self.seq, &[], &body, body.len());
            self.emit_frame()?;
            self.seq = self.seq.wrapping_add(1);
            self.chunks += 1;
        }
        Ok(())
    }

    /// Marks the end of a merged round; closes the open chunk if it is big enough (see
    /// the module docs), never making tiny chunks.
    pub fn end_round(&mut self) -> Result<(), FormatError> {
        self.end_round_with(&mut || {})
    }

    /// [`Self::end_round`]; if it closes the chunk, `between` is called after each
    /// column is encoded (see `ChunkBuilder::encode_with`), so a recorder can drain its
    /// rings while a large chunk is encoded. The bytes written do not depend on it.
    pub fn end_round_with(&mut self, between: &mut dyn FnMut()) -> Result<(), FormatError> {
        let n = self.builder.records();
        if n >= self.opts.round_records || (n >= self.opts.min_records && self.builder.time_span() >= self.opts.round_span_ns) {
            self.close_chunk_with(between)?;
        }
        Ok(())
    }

    /// Closes the open chunk (if any), writes pending build-ids and flushes the output:
    /// everything written so far survives the process dying.
    pub fn flush_chunk(&mut self) -> Result<(), FormatError> {
        self.close_chunk()?;
        self.write_build_ids()?;
        self.write_jit()?;
        self.flush_out()
    }

    fn write_build_ids(&mut self) -> Result<(), FormatError> {
        if !self.build_ids_dirty {
            return Ok(());
        }
        // Every build-id chunk carries the whole set, so the last intact one is complete.
        let body = encode_build_ids(&self.build_ids.entries);
        if body.len() > MAX_PAYLOAD {
            return Err(FormatError::RecordTooLarge("build-id table"));
        }
        self.frame.clear();
        frame_chunk(&mut self.frame, ChunkKind::BuildIds, 0, self.seq, &[], &body, body.len());
        self.emit_frame()?;
        self.seq = self.seq.wrapping_add(1);
        self.chunks += 1;
        self.build_ids_dirty = false;
        Ok(())
    }

    fn close_chunk(&mut self) -> Result<(), FormatError> {
        self.close_chunk_with(&mut || {})
    }

    fn close_chunk_with(&mut self, between: &mut dyn FnMut()) -> Result<(), FormatError> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let mut meta = self.builder.encode_with(&mut self.body, &mut self.packer, self.opts.time_codec, &self.stacks, between);
        let mut meta_bytes = meta.to_bytes();
        if !nodes_within_limits(self.builder.stack_nodes(), meta_bytes.len() + self.body.len()) {
            // Stack nodes that compress extremely well (deep recursion of one frame) would
            // exceed the nodes-per-byte bound readers enforce: store them uncompressed.
            self.builder.stacks_stored = true;
            meta = self.builder.encode(&mut self.body, &mut self.packer, self.opts.time_codec, &self.stacks);
            meta_bytes = meta.to_bytes();
        }
        self.records += self.builder.add_samples_to(&mut self.stats);
        self.builder.reset();
        if self.body.len() > MAX_RAW_BODY.min(MAX_PAYLOAD) {
            return Err(FormatError::RecordTooLarge("records chunk"));
        }
        self.frame.clear();
        frame_chunk(&mut self.frame, ChunkKind::Records, 0, self.seq, &meta_bytes, &self.body, self.body.len());
        self.emit_frame()?;
        self.seq = self.seq.wrapping_add(1);
        self.chunks += 1;
        self.write_build_ids()?;
        self.write_jit()?;
        self.flush_out()
    }

    /// Running counts of what was written (buffered records included).
    pub fn stats(&self) -> TraceStats {
        let mut st = self.stats.clone();
        self.builder.add_samples_to(&mut st);
        st
    }

    /// Bytes handed to the output so far (the open chunk not included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Closes the open chunk, writes pending build-ids and the trailer (stats, duration,
    /// clean-end marker), and flushes.
    pub fn finish(self, duration_ns: Option<u64>) -> Result<WriteSummary, FormatError> {
        self.finish_into_inner(duration_ns).map(|(_, s)| s)
    }

    /// [`Self::finish`], also returning the output (e.g. the `Vec<u8>` of an in-memory
    /// trace).
    pub fn finish_into_inner(mut self, duration_ns: Option<u64>) -> Result<(W, WriteSummary), FormatError> {
        if let Some(e) = self.sink_error.take() {
            return Err(e);
        }
        self.finished = true;
        self.close_chunk()?;
        self.write_build_ids()?;
        self.write_jit()?;
        let trailer = Trailer { clean_end: true, stats: self.stats.clone(), duration_ns, chunks: self.chunks, records: self.records };
        let json = serde_json::to_vec(&trailer).map_err(|e| FormatError::BadHeader(e.to_string()))?;
        self.frame.clear();
        frame_chunk(&mut self.frame, ChunkKind::Trailer, 0, self.seq, &[], &json, json.len());
        self.emit_frame()?;
        self.chunks += 1;
        self.flush_out()?;
        let summary = WriteSummary { bytes: self.bytes, chunks: self.chunks, stats: self.stats.clone(), duration_ns };
        match self.out.take() {
            Some(out) => Ok((out, summary)),
            None => Err(FormatError::RawIo(std::io::Error::other("trace writer has no output"))),
        }
    }
}

/// Most registers one sample may carry (perf's user register masks have at most 64 bits).
pub const MAX_REGS: usize = 1024;

fn check_sideband_size(r: &Record) -> Result<(), FormatError> {
    let too_big = match r {
        Record::Mmap(m) => m.path.len() > MAX_STRING || m.build_id.as_ref().is_some_and(|b| b.len() > MAX_STRING),
        Record::Comm(c) => c.comm.len() > MAX_STRING,
        Record::ItemEvent(e) => {
            e.name.len() > ItemEvent::MAX_NAME
                || e.args.len() > ItemEvent::MAX_ARGS
                || e.args.iter().any(|a| matches!(a, EventArg::Text(t) if t.len() > ItemEvent::MAX_ARG_TEXT))
        }
        _ => false,
    };
    if too_big {
        return Err(FormatError::RecordTooLarge("side-band record string"));
    }
    Ok(())
}

impl<W: Write> TraceWriter<W> {
    /// Keep the first error of a [`Sink`] call.
    fn sink_step(&mut self, r: Result<(), FormatError>) {
        if let Err(e) = r {
            self.sink_error.get_or_insert(e);
        }
    }
}

impl<W: Write> Sink for TraceWriter<W> {
    #[inline]
    fn handle_record(&mut self, r: &Record) -> Flow {
        if self.sink_error.is_none() {
            let res = self.write(r);
            self.sink_step(res);
        }
        self.flow()
    }
    #[inline]
    fn handle_sample(&mut self, s: &Sample) {
        if self.sink_error.is_none() {
            let res = self.write_sample(s);
            self.sink_step(res);
        }
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.handle_record(&Record::Mmap(m.clone()));
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.handle_record(&Record::Comm(c.clone()));
    }
    fn handle_fork(&mut self, t: &Task) {
        self.handle_record(&Record::Fork(t.clone()));
    }
    fn handle_exit(&mut self, t: &Task) {
        self.handle_record(&Record::Exit(t.clone()));
    }
    fn handle_lost(&mut self, l: &Lost) {
        self.handle_record(&Record::Lost(l.clone()));
    }
    fn handle_throttle(&mut self, t: &Throttle) {
        self.handle_record(&Record::Throttle(t.clone()));
    }
    fn handle_marker(&mut self, m: &Marker) {
        self.handle_record(&Record::Marker(m.clone()));
    }
    fn handle_item_class(&mut self, c: &ItemClass) {
        self.handle_record(&Record::ItemClass(c.clone()));
    }
    fn handle_switch(&mut self, s: &Switch) {
        self.handle_record(&Record::Switch(s.clone()));
    }
    fn handle_wakeup(&mut self, w: &Wakeup) {
        self.handle_record(&Record::Wakeup(w.clone()));
    }
    fn handle_item_event(&mut self, e: &ItemEvent) {
        self.handle_record(&Record::ItemEvent(e.clone()));
    }
    fn handle_stack(&mut self, d: &StackDef) {
        // A node the writer already has under that id (a stream re-sending it) is fine.
        if self.stacks.get(d.id) != Some((d.parent, d.frame)) && !self.stacks.handle_def(d) {
            self.sink_error.get_or_insert(FormatError::BadStackDef(d.id.0));
        }
    }
    fn handle_jit(&mut self, e: &crate::JitEntry) {
        self.add_jit(e.clone());
    }
    fn handle_build_id(&mut self, e: &BuildIdEntry) {
        let res = self.add_build_id(e.clone());
        self.sink_step(res);
    }
    fn handle_round_end(&mut self) {
        if self.sink_error.is_none() {
            let res = self.end_round();
            self.sink_step(res);
        }
    }
    #[inline]
    fn flow(&self) -> Flow {
        if self.sink_error.is_some() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
    fn take_error(&mut self) -> Option<FormatError> {
        self.sink_error.take()
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    /// A writer dropped without [`TraceWriter::finish`] (an error path, a panic) still
    /// closes its open chunk, best effort, so buffered records are not lost. No trailer
    /// is written: readers report the trace as incomplete.
    fn drop(&mut self) {
        if !self.finished && self.out.is_some() {
            let _ = self.flush_chunk();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `end_round_with` writes the same bytes as `end_round` and calls its hook while a
    /// chunk is encoded (the recorder drains its rings there).
    #[test]
    fn end_round_with_is_byte_identical_and_calls_back() {
        let opts = WriterOptions { round_records: 1000, ..WriterOptions::default() };
        let write = |hooked: bool| {
            let mut w = TraceWriter::with_options(Vec::new(), &TraceHeader::default(), opts.clone()).unwrap();
            let mut calls = 0;
            for round in 0..5u64 {
                for i in 0..700u64 {
                    let t = round * 10_000_000 + i * 10_000;
                    let s = Sample {
                        time: t,
                        ip: 0x1000 + (i * 7919) % 300,
                        tid: (i % 3) as u32,
                        cpu: (i % 2) as u32,
                        period: 1,
                        ..Default::default()
                    };
                    w.write_sample(&s).unwrap();
                }
                if hooked {
                    w.end_round_with(&mut || calls += 1).unwrap();
                } else {
                    w.end_round().unwrap();
                }
            }
            (w.finish_into_inner(None).unwrap().0, calls)
        };
        let (plain, _) = write(false);
        let (hooked, calls) = write(true);
        assert!(plain == hooked, "the hook changed the output");
        // Two chunks closed by end_round (1400 and 2100 records), several columns each.
        assert!(calls >= 8, "hook called {calls} times");
    }
}
