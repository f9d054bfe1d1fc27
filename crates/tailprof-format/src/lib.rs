//! tailprof trace format: the **format** stage of the pipeline.
//!
//! Owns the on-disk representation of a trace (see `docs/FORMAT.md`): a file header,
//! then self-describing, checksummed chunks appended one after another. A file cut
//! off at any byte reads back every complete chunk; the reader reports how many bytes
//! of the tail were lost and never panics on arbitrary input.
//!
//! The record model ([`record`]) is shared by every stage.

pub mod record;

pub use record::*;

use std::path::Path;

/// Errors of the trace format. Damage that the reader can step over is *not* an error:
/// it is counted in [`ReadSummary`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: std::io::Error },
    #[error("I/O error: {0}")]
    RawIo(#[from] std::io::Error),
    #[error("not a tailprof trace (bad magic); if this is a perf.data file, convert it with `tailprof import`")]
    NotATrace,
    #[error("empty file: no trace header")]
    Empty,
    #[error("unsupported trace format version {found} (this build reads up to {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("trace header is damaged: {0}")]
    BadHeader(String),
}

/// What reading a trace found, beside its records.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadSummary {
    /// Chunks read successfully.
    pub chunks: u64,
    /// Chunks skipped because their checksum or contents were bad.
    pub damaged_chunks: u64,
    /// Total file size in bytes.
    pub bytes: u64,
    /// Bytes at the end of the file that did not form a complete chunk (a cut-off tail).
    pub truncated_bytes: u64,
    /// Bytes inside damaged chunks (not counting the truncated tail).
    pub damaged_bytes: u64,
    /// Whether the file ends with an end-of-trace chunk (a clean close).
    pub complete: bool,
}
