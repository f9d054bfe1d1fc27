//! [`TraceReader`]: validates a trace's file header and header chunk, then walks its
//! chunks, stepping over damage.
//!
//! Owns the damage/truncation accounting of [`ReadSummary`] (FORMAT.md §9). The whole file
//! is held in memory (traces are compact: a few bytes per sample); chunks are decoded one
//! at a time into reusable buffers.
//!
//! ```no_run
//! use tailprof_format::*;
//! let mut r = TraceReader::open(std::path::Path::new("trace.tprof"))?;
//! let mut n = 0u64;
//! let summary = r.for_each_sample(&mut |_s| n += 1)?;
//! if summary.truncated_bytes > 0 {
//!     eprintln!("trace was cut off: {} bytes lost", summary.truncated_bytes);
//! }
//! # Ok::<(), FormatError>(())
//! ```

use crate::chunk::*;
use crate::decode::{chunk_body, ChunkDecoder};
use crate::meta::{decode_build_ids, BuildIdSet, RecordsMeta, Trailer};
use crate::record::*;
use crate::{FormatError, ReadSummary};
use std::path::Path;

/// Reads a trace. See the [module docs](self).
pub struct TraceReader {
    buf: Vec<u8>,
    header: TraceHeader,
    /// Offset of the first chunk after the header chunk.
    body_start: usize,
    build_ids: BuildIdSet,
    decoder: ChunkDecoder,
    version: u16,
}

/// What the walk should do with each intact chunk.
enum Mode<'s> {
    Records(&'s mut dyn Sink),
    Samples(&'s mut dyn FnMut(&Sample)),
    /// Only the meta blocks: accumulate stats.
    Summarize(&'s mut TraceStats),
}

impl TraceReader {
    /// Reads `path` and validates its file header and header chunk.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let buf = std::fs::read(path).map_err(|source| FormatError::Io { path: path.display().to_string(), source })?;
        Self::from_bytes(buf)
    }

    /// Validates an in-memory trace's file header and header chunk.
    pub fn from_bytes(buf: Vec<u8>) -> Result<Self, FormatError> {
        let body_start;
        let header;
        let file_version;
        {
            let b = &buf[..];
            if b.is_empty() {
                return Err(FormatError::Empty);
            }
            let n = b.len().min(FILE_MAGIC.len());
            if b[..n] != FILE_MAGIC[..n] {
                let perf_data = b.starts_with(&PERF_MAGIC) || b.starts_with(b"PERFFILE");
                return Err(FormatError::NotATrace { perf_data });
            }
            if b.len() < FILE_HEADER_LEN {
                return Err(FormatError::BadHeader(format!(
                    "file is cut off inside the file header ({} of {FILE_HEADER_LEN} bytes)",
                    b.len()
                )));
            }
            let version = u16::from_le_bytes([b[8], b[9]]);
            let hlen = u16::from_le_bytes([b[10], b[11]]) as usize;
            if version > FORMAT_VERSION {
                return Err(FormatError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
            }
            file_version = version;
            if version == 0 || hlen < FILE_HEADER_LEN {
                return Err(FormatError::BadHeader(format!("bad file header (version {version}, length {hlen})")));
            }
            if hlen > b.len() {
                return Err(FormatError::BadHeader("file is cut off inside the file header".into()));
            }
            let c = match probe(b, hlen) {
                Probe::Chunk(c) if c.header.kind == ChunkKind::Header as u8 => c,
                Probe::Chunk(_) => return Err(FormatError::BadHeader("first chunk is not the trace header".into())),
                Probe::Incomplete => {
                    return Err(FormatError::BadHeader(format!(
                        "file is cut off inside the trace header chunk ({} bytes in total)",
                        b.len()
                    )))
                }
                Probe::Corrupt { .. } => return Err(FormatError::BadHeader("trace header chunk fails its checksum".into())),
                Probe::NotAChunk => return Err(FormatError::BadHeader("no trace header chunk".into())),
            };
            let mut raw = Vec::new();
            let mut dctx = None;
            let json =
                chunk_body(&c, &mut dctx, &mut raw).ok_or_else(|| FormatError::BadHeader("trace header chunk has a bad body".into()))?;
            header = serde_json::from_slice::<TraceHeader>(json).map_err(|e| FormatError::BadHeader(format!("trace header JSON: {e}")))?;
            body_start = hlen + c.header.total_len();
        }
        let mut decoder = ChunkDecoder::default();
        decoder.version = file_version;
        Ok(TraceReader { buf, header, body_start, build_ids: BuildIdSet::default(), decoder, version: file_version })
    }

    /// The trace's format version (from the file header).
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Every stack node of the chunks read by the last [`Self::read_all`] or
    /// [`Self::for_each_sample`]: resolves the [`StackId`]s of the records it delivered
    /// (the same nodes [`Sink::handle_stack`] received). Ids are those of this reader,
    /// not the writer's; they are stable within one read.
    pub fn stacks(&self) -> &crate::StackTable {
        &self.decoder.stacks
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Build-ids stored in the trace, one per path. Valid after [`Self::read_all`],
    /// [`Self::for_each_sample`] or [`Self::summarize`].
    pub fn build_ids(&self) -> &[BuildIdEntry] {
        &self.build_ids.entries
    }

    /// Streams every readable chunk's records, in order, to `sink`. Damage and a cut-off
    /// tail are counted in the returned summary, not reported as errors.
    ///
    /// Stops reading as soon as `sink` answers [`Flow::Stop`]: no further chunk is
    /// decoded or checked, and the summary says [`ReadSummary::stopped_early`] (its counts
    /// cover what was read). A sink that stopped because it failed
    /// ([`Sink::take_error`]) makes this an error.
    pub fn read_all(&mut self, sink: &mut dyn Sink) -> Result<ReadSummary, FormatError> {
        for e in self.jit_entries() {
            sink.handle_jit(&e);
        }
        let summary = self.walk(Mode::Records(sink)).0;
        crate::record::sink_result(sink)?;
        Ok(summary)
    }

    /// Every JIT entry of the trace's intact JIT chunks (FORMAT.md §6.1), in file order
    /// (a duplicated chunk once). [`Self::read_all`] hands them to
    /// [`Sink::handle_jit`] before the first record.
    pub fn jit_entries(&self) -> Vec<crate::JitEntry> {
        let buf = &self.buf[..];
        let mut out = Vec::new();
        let mut seen: std::collections::HashSet<(u32, u32)> = std::collections::HashSet::new();
        let mut p = self.body_start;
        while p < buf.len() {
            match probe(buf, p) {
                Probe::Chunk(c) => {
                    if c.header.kind == ChunkKind::Jit as u8 && seen.insert((c.header.seq, c.header.crc)) {
                        let mut raw = Vec::new();
                        let mut dctx = None;
                        if let Some(entries) = chunk_body(&c, &mut dctx, &mut raw).and_then(|b| crate::jit::decode_jit(b, self.version)) {
                            out.extend(entries);
                        }
                    }
                    p += c.header.total_len();
                }
                _ => match find_next_chunk(buf, p + 1) {
                    Some(q) => p = q,
                    None => break,
                },
            }
        }
        out
    }

    /// Like [`Self::read_all`], but hands out samples only.
    pub fn for_each_sample(&mut self, f: &mut dyn FnMut(&Sample)) -> Result<ReadSummary, FormatError> {
        Ok(self.walk(Mode::Samples(f)).0)
    }

    /// Checks every chunk's checksum and reads the per-chunk counts and the trailer,
    /// without decoding records. Returns the trailer's stats and duration; for a trace
    /// without a trailer (cut off), stats are recomputed from the chunks and the duration
    /// is `None`.
    pub fn summarize(&mut self) -> Result<(ReadSummary, TraceStats, Option<u64>), FormatError> {
        let mut stats = TraceStats::default();
        let (summary, trailer) = self.walk(Mode::Summarize(&mut stats));
        Ok(match trailer {
            Some(t) => (summary, t.stats, t.duration_ns),
            None => (summary, stats, None),
        })
    }

    fn walk(&mut self, mut mode: Mode<'_>) -> (ReadSummary, Option<Trailer>) {
        let buf = &self.buf[..];
        let mut s = ReadSummary { bytes: buf.len() as u64, chunks: 1, ..Default::default() };
        self.build_ids.clear();
        if !matches!(mode, Mode::Summarize(_)) {
            self.decoder.reset_stacks();
        }
        let mut trailer = None;
        let mut next_seq = 1u32;
        // (sequence number, checksum) of every intact chunk read: a chunk with both equal
        // to an earlier one is a byte-for-byte duplicate.
        let mut seen: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        let mut p = self.body_start;
        while p < buf.len() {
            if s.stopped_early {
                break;
            }
            let (ok, seq, end) = match probe(buf, p) {
                // A chunk whose sequence number and checksum were already read is a
                // duplicate (a copied or replayed region): skipped and counted, never
                // delivered twice.
                Probe::Chunk(c) if seen.get(&c.header.seq) == Some(&c.header.crc) => {
                    s.duplicate_chunks += 1;
                    s.duplicate_bytes += c.header.total_len() as u64;
                    p += c.header.total_len();
                    continue;
                }
                Probe::Chunk(c) => {
                    seen.insert(c.header.seq, c.header.crc);
                    let ok = handle_chunk(&c, &mut mode, &mut self.decoder, &mut self.build_ids, &mut trailer, &mut s);
                    (ok, c.header.seq, p + c.header.total_len())
                }
                bad => {
                    // Resynchronise on the next intact chunk.
                    let corrupt = matches!(bad, Probe::Corrupt { .. });
                    s.complete = false;
                    match find_next_chunk(buf, p + 1) {
                        Some(q) => {
                            let lost = match probe(buf, q) {
                                Probe::Chunk(c) => c.header.seq.wrapping_sub(next_seq) as u64,
                                _ => 1,
                            };
                            // Trust the sequence gap only when it is plausible for the bytes lost.
                            let max = ((q - p) / CHUNK_HEADER_LEN) as u64 + 1;
                            s.damaged_chunks += if (1..=max).contains(&lost) { lost } else { 1 };
                            s.damaged_bytes += (q - p) as u64;
                            p = q;
                        }
                        None if corrupt => {
                            s.damaged_chunks += 1;
                            s.damaged_bytes += (buf.len() - p) as u64;
                            p = buf.len();
                        }
                        None => {
                            s.truncated_bytes = (buf.len() - p) as u64;
                            p = buf.len();
                        }
                    }
                    continue;
                }
            };
            if !ok {
                s.damaged_chunks += 1;
                s.damaged_bytes += (end - p) as u64;
                s.complete = false;
            }
            next_seq = seq.wrapping_add(1);
            p = end;
        }
        (s, trailer)
    }

    /// The whole trace as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Handles one intact chunk; returns `false` when its contents turn out damaged.
fn handle_chunk(
    c: &RawChunk<'_>,
    mode: &mut Mode<'_>,
    decoder: &mut ChunkDecoder,
    build_ids: &mut BuildIdSet,
    trailer: &mut Option<Trailer>,
    s: &mut ReadSummary,
) -> bool {
    s.complete = false;
    let Some(kind) = ChunkKind::from_u8(c.header.kind) else {
        s.skipped_chunks += 1;
        return true;
    };
    let ok = match kind {
        ChunkKind::Records => match mode {
            Mode::Summarize(stats) => match RecordsMeta::parse(c.meta, decoder.version) {
                Some(m) => {
                    m.add_to(stats);
                    s.records += m.records as u64;
                    s.samples += m.samples as u64;
                    true
                }
                None => false,
            },
            Mode::Records(sink) => match decoder.decode(c) {
                Some(m) => {
                    if decoder.emit(&mut **sink).is_stop() {
                        s.stopped_early = true;
                    }
                    s.records += m.records as u64 - decoder.skipped_rows;
                    s.skipped_records += decoder.skipped_rows;
                    s.samples += m.samples as u64;
                    true
                }
                None => false,
            },
            Mode::Samples(f) => match decoder.decode(c) {
                Some(m) => {
                    decoder.emit_samples(&mut **f);
                    s.records += m.records as u64 - decoder.skipped_rows;
                    s.skipped_records += decoder.skipped_rows;
                    s.samples += m.samples as u64;
                    true
                }
                None => false,
            },
        },
        ChunkKind::BuildIds => {
            let mut raw = Vec::new();
            let mut dctx = None;
            match chunk_body(c, &mut dctx, &mut raw).and_then(decode_build_ids) {
                Some(entries) => {
                    for e in entries {
                        if let Mode::Records(sink) = mode {
                            sink.handle_build_id(&e);
                        }
                        build_ids.insert(e);
                    }
                    true
                }
                None => false,
            }
        }
        ChunkKind::Trailer => {
            let mut raw = Vec::new();
            let mut dctx = None;
            match chunk_body(c, &mut dctx, &mut raw).and_then(|b| serde_json::from_slice::<Trailer>(b).ok()) {
                Some(t) => {
                    s.complete = t.clean_end;
                    *trailer = Some(t);
                    true
                }
                None => false,
            }
        }
        // Delivered before the records by `jit_entries`; here only checked.
        ChunkKind::Jit => {
            let mut raw = Vec::new();
            let mut dctx = None;
            chunk_body(c, &mut dctx, &mut raw).and_then(|b| crate::jit::decode_jit(b, decoder.version)).is_some()
        }
        // A second header chunk carries nothing new for this reader.
        ChunkKind::Header => {
            s.skipped_chunks += 1;
            return true;
        }
    };
    if ok {
        s.chunks += 1;
    }
    ok
}
