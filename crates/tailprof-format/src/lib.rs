//! tailprof trace format: the **format** stage of the pipeline.
//!
//! Owns the on-disk representation of a trace (see `docs/FORMAT.md`): a file header,
//! then self-describing, checksummed chunks appended one after another. A file cut
//! off at any byte reads back every complete chunk; the reader reports how many bytes
//! of the tail were lost and never panics on arbitrary input.
//!
//! - [`record`]: the record model shared by every stage.
//! - [`stack`]: [`StackTable`], the interner of call stacks (frames + parent pointers).
//! - [`writer`]: [`TraceWriter`], chunking policy, trailer.
//! - [`reader`]: [`TraceReader`], damage and truncation accounting.
//! - [`chunk`]: file header, chunk framing, checksums, resynchronisation.
//! - `encode` / `decode`: the columnar records chunk.
//! - [`columns`], [`sideband`], [`meta`]: pieces of chunk payloads.
//! - [`timecode`], [`varint`]: integer codes (the 16-bit-word time-delta code, LEB128).
//! - `synth` (feature `testing`, not API): a deterministic synthetic-trace generator for
//!   tests and measurements.
//!
//! ```
//! use tailprof_format::*;
//! let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default())?;
//! w.write(&Record::Comm(Comm { time: 5, pid: 1, tid: 1, exec: true, comm: "app".into() }))?;
//! w.write_sample(&Sample { time: 10, ip: 0x1234, pid: 1, tid: 1, period: 1, ..Default::default() })?;
//! let (bytes, _) = w.finish_into_inner(None)?;
//! let mut sink = VecSink::default();
//! TraceReader::from_bytes(bytes)?.read_all(&mut sink)?;
//! assert_eq!(sink.0.len(), 2);
//! # Ok::<(), FormatError>(())
//! ```

pub mod addrspace;
pub mod atomic;
pub mod chunk;
pub mod columns;
mod decode;
pub mod dirs;
mod encode;
pub mod jit;
pub mod losses;
pub mod meta;
pub mod reader;
pub mod record;
pub mod sideband;
pub mod stack;
#[cfg(feature = "testing")]
pub mod synth;
pub mod timecode;
pub mod varint;
pub mod writer;

pub use encode::{MAX_CHUNK_NODES, MAX_STACK_DEPTH};
pub use jit::{JitEntry, JitOrigin};
pub use reader::TraceReader;
pub use record::*;
pub use stack::StackTable;
pub use timecode::TimeCodec;
pub use writer::{TraceWriter, WriteSummary, WriterOptions};

/// Errors of the trace format. Damage that the reader can step over is *not* an error:
/// it is counted in [`ReadSummary`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("I/O error: {0}")]
    RawIo(#[from] std::io::Error),
    /// The file does not start with the trace magic. `perf_data` is set when it starts
    /// with perf's `PERFILE2` magic instead.
    #[error("{}", if *perf_data {
        "this is a perf.data file, not a tailprof trace: convert it with `tailprof import`"
    } else {
        "not a tailprof trace (bad magic); if this is a perf.data file, convert it with `tailprof import`"
    })]
    NotATrace { perf_data: bool },
    #[error("empty file: no trace header")]
    Empty,
    #[error("unsupported trace format version {found} (this build reads up to {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("trace header is damaged: {0}")]
    BadHeader(String),
    /// A record (or table) too large for one chunk; nothing was written for it.
    #[error("{0} too large for the trace format")]
    RecordTooLarge(&'static str),
    /// A record refers to a stack id the writer never handed out
    /// ([`TraceWriter::intern_stack`]); nothing was written for it.
    #[error("record refers to stack id {0}, which this trace writer never interned")]
    UnknownStack(u32),
    /// A stack definition handed to a writer ([`Sink::handle_stack`]) that does not
    /// continue its stack table (ids in order, parents first, each node once).
    #[error("stack definition {0} does not continue this trace writer's stack table")]
    BadStackDef(u32),
}

/// What reading a trace found, beside its records.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadSummary {
    /// Chunks read successfully (the header chunk included).
    pub chunks: u64,
    /// Chunks skipped because their checksum or contents were bad (best effort when a
    /// damaged region hides several chunks: chunk sequence numbers are used when they
    /// are plausible).
    pub damaged_chunks: u64,
    /// Total file size in bytes.
    pub bytes: u64,
    /// Bytes at the end of the file that did not form a complete chunk (a cut-off tail).
    pub truncated_bytes: u64,
    /// Bytes inside damaged chunks (not counting the truncated tail).
    pub damaged_bytes: u64,
    /// Whether the file ends with an end-of-trace chunk (a clean close).
    pub complete: bool,
    /// Intact chunks of kinds this build does not know, skipped.
    pub skipped_chunks: u64,
    /// Records in the chunks read (samples and side-band), as delivered. (`summarize`
    /// counts them from chunk meta blocks, `skipped_records` included.)
    pub records: u64,
    /// Side-band records of kinds this build does not know, skipped (a newer writer).
    pub skipped_records: u64,
    /// Samples in the chunks read.
    pub samples: u64,
    /// Intact chunks whose sequence number had already been read (a duplicated region),
    /// skipped so that no record is delivered or counted twice.
    pub duplicate_chunks: u64,
    /// Bytes in those duplicated chunks.
    pub duplicate_bytes: u64,
    /// The sink answered [`Flow::Stop`]: reading ended there, so the counts above cover
    /// only what was read (`complete` is false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped_early: bool,
}
