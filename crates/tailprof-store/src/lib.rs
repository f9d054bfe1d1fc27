//! tailprof's continuous-profiling store: Parquet files, partitioned Hive-style by
//! table, host and time, that DuckDB, Spark, Trino and ClickHouse read directly.
//!
//! Owns the on-disk layout (`docs/STORE.md` is the exact, versioned description):
//!
//! ```text
//! ROOT/samples/host=H/date=YYYY-MM-DD/hour=HH/w-<start_us>-<end_us>.parquet   one per window
//! ROOT/symbols/<build-id>.parquet                                             one per build-id
//! ROOT/items/host=H/date=…/hour=…/w-….parquet                                 retained slow requests
//! ROOT/latency/host=H/date=…/hour=…/w-….parquet                               per-class histograms
//! ```
//!
//! Design constraints:
//! - **Atomic files** ([`atomic`]): every file is written under a temporary name in the
//!   same directory, fsynced, renamed, and the directory fsynced. Readers never see a
//!   partial file; a crash leaves at most a `.tmp-*` file, which readers ignore and the
//!   next [`Store::open`] removes.
//! - **Private**: directories are created 0700, files 0600, never through symlinks.
//! - **Addresses are (build-id, file offset)**; names come from the per-build-id symbol
//!   table written once when the agent first sees a binary, so upgraded or deleted
//!   binaries still symbolize.
//! - Reading is bounded: files larger than [`MAX_FILE_BYTES`] or with more rows than
//!   [`MAX_ROWS_PER_FILE`] are skipped and counted, never allocated.
//!
//! This crate never prints and never exits; errors are [`StoreError`]s.

pub mod atomic;
pub mod batch;
pub mod layout;
pub mod pages;
pub mod read;
pub mod retain;
pub mod schema;
pub mod time;
pub mod write;

pub use batch::{RowFilter, SampleBatch};
pub use layout::{default_root, Store, Table};
pub use read::{FileSummary, ReadStats, SampleQuery, StoreReader};
pub use retain::{compact, retain, touch_symbols, CompactStats, RetainPolicy, RetainStats};
pub use schema::{ItemRow, LatencyRow, SampleRow, SymbolRow, WindowMeta, SCHEMA_VERSION};
pub use write::{write_items, write_latency, write_samples, write_symbols};

/// Files larger than this are not read (a store file is at most a few MiB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// Rows per file beyond which a file is refused.
pub const MAX_ROWS_PER_FILE: i64 = 50_000_000;
/// Frames kept per stack (deeper stacks keep the innermost ones and are marked truncated).
pub const MAX_FRAMES: usize = 128;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: parquet: {msg}")]
    Parquet { path: String, msg: String },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
    #[error("{0}")]
    Options(String),
}

impl StoreError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        StoreError::Io { path: path.display().to_string(), source }
    }
    pub(crate) fn pq(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        StoreError::Parquet { path: path.display().to_string(), msg: e.to_string() }
    }
    /// True when the underlying error is "no space left on device" or "quota exceeded":
    /// the agent drops (and counts) the window instead of stopping.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
            }
            StoreError::Parquet { msg, .. } => msg.contains("No space left") || msg.contains("quota exceeded"),
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
