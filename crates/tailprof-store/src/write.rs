//! Writing tables: the low-level Parquet column writer (no Arrow), zstd, dictionary
//! encoding for the string columns, one row group per window file (symbol tables: one per
//! [`SYMBOL_GROUP_ROWS`] functions, streamed), and the atomic rule.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::format::KeyValue;
use parquet::schema::parser::parse_message_type;

use crate::atomic::AtomicFile;
use crate::schema::*;
use crate::{Result, StoreError};

/// One column's values (and levels, for the list columns), in schema order.
pub(crate) enum Col {
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
    Str(Vec<ByteArray>),
    ListStr(Vec<ByteArray>, Vec<i16>, Vec<i16>),
    ListI64(Vec<i64>, Vec<i16>, Vec<i16>),
}

fn ba(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

fn sat_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Writes one table file atomically. Returns its size in bytes.
pub(crate) fn write_table(path: &Path, schema: &str, meta: Option<&WindowMeta>, rows: usize, cols: Vec<Col>) -> Result<u64> {
    write_table_groups(path, schema, meta, std::iter::once(Ok((rows, cols))))
}

/// [`write_table`] with one row group per item of `groups` (`(rows, columns)`), built
/// one at a time so only one group's columns are in memory. The first `Err` stops the
/// write and leaves no file (the temporary is removed).
pub(crate) fn write_table_groups(
    path: &Path,
    schema: &str,
    meta: Option<&WindowMeta>,
    groups: impl Iterator<Item = Result<(usize, Vec<Col>)>>,
) -> Result<u64> {
    let schema = Arc::new(parse_message_type(schema).map_err(|e| StoreError::pq(path, e))?);
    let mut kv = vec![KeyValue::new(KV_VERSION.to_string(), SCHEMA_VERSION.to_string())];
    if let Some(m) = meta {
        kv.push(KeyValue::new(KV_META.to_string(), serde_json::to_string(m).unwrap_or_default()));
    }
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(|e| StoreError::pq(path, e))?))
        .set_created_by(format!("tailprof {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(kv))
        .build();
    let af = AtomicFile::create(path)?;
    {
        let mut w = SerializedFileWriter::new(af.file(), schema, Arc::new(props)).map_err(|e| StoreError::pq(path, e))?;
        for group in groups {
            let (rows, cols) = group?;
            if rows == 0 {
                continue;
            }
            let mut rg = w.next_row_group().map_err(|e| StoreError::pq(path, e))?;
            for col in cols {
                let mut cw = rg
                    .next_column()
                    .map_err(|e| StoreError::pq(path, e))?
                    .ok_or_else(|| StoreError::pq(path, "more columns than the schema"))?;
                let r = match &col {
                    Col::I64(v) => cw.typed::<Int64Type>().write_batch(v, None, None),
                    Col::I32(v) => cw.typed::<Int32Type>().write_batch(v, None, None),
                    Col::Bool(v) => cw.typed::<BoolType>().write_batch(v, None, None),
                    Col::Str(v) => cw.typed::<ByteArrayType>().write_batch(v, None, None),
                    Col::ListStr(v, d, r) => cw.typed::<ByteArrayType>().write_batch(v, Some(d), Some(r)),
                    Col::ListI64(v, d, r) => cw.typed::<Int64Type>().write_batch(v, Some(d), Some(r)),
                };
                r.map_err(|e| StoreError::pq(path, e))?;
                cw.close().map_err(|e| StoreError::pq(path, e))?;
            }
            rg.close().map_err(|e| StoreError::pq(path, e))?;
        }
        w.close().map_err(|e| StoreError::pq(path, e))?;
    }
    let size = af.file().metadata().map(|m| m.len()).unwrap_or(0);
    af.commit()?;
    Ok(size)
}

/// Writes a `samples` file (one window, or a compacted run of windows). Returns bytes.
pub fn write_samples(path: &Path, meta: &WindowMeta, rows: &[SampleRow]) -> Result<u64> {
    let n = rows.len();
    let mut ws = Vec::with_capacity(n);
    let mut we = Vec::with_capacity(n);
    let mut pid = Vec::with_capacity(n);
    let mut comm = Vec::with_capacity(n);
    let mut event = Vec::with_capacity(n);
    let mut bin = Vec::with_capacity(n);
    let mut bid = Vec::with_capacity(n);
    let mut leaf = Vec::with_capacity(n);
    let mut sid = Vec::with_capacity(n);
    let (mut lb, mut lo, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut trunc = Vec::with_capacity(n);
    let mut count = Vec::with_capacity(n);
    let mut period = Vec::with_capacity(n);
    for r in rows {
        ws.push(r.window_start_us);
        we.push(r.window_end_us);
        pid.push(r.pid as i32);
        comm.push(ba(&r.comm));
        event.push(ba(&r.event));
        bin.push(ba(&r.binary));
        let first = r.frames.first();
        bid.push(ba(first.map(|f| f.build_id.as_str()).unwrap_or("")));
        leaf.push(first.map(|f| sat_i64(f.offset)).unwrap_or(-1));
        sid.push(r.stack_id as i64);
        let frames = &r.frames[..r.frames.len().min(crate::MAX_FRAMES)];
        if frames.is_empty() {
            def.push(0);
            rep.push(0);
        }
        for (i, f) in frames.iter().enumerate() {
            lb.push(ba(&f.build_id));
            lo.push(sat_i64(f.offset));
            def.push(1);
            rep.push(if i == 0 { 0 } else { 1 });
        }
        trunc.push(r.truncated || r.frames.len() > crate::MAX_FRAMES);
        count.push(sat_i64(r.count));
        period.push(sat_i64(r.period));
    }
    let cols = vec![
        Col::I64(ws),
        Col::I64(we),
        Col::I32(pid),
        Col::Str(comm),
        Col::Str(event),
        Col::Str(bin),
        Col::Str(bid),
        Col::I64(leaf),
        Col::I64(sid),
        Col::ListStr(lb, def.clone(), rep.clone()),
        Col::ListI64(lo, def, rep),
        Col::Bool(trunc),
        Col::I64(count),
        Col::I64(period),
    ];
    write_table(path, SAMPLES_SCHEMA, Some(meta), n, cols)
}

/// Rows per row group of a symbol table: the columns of one group are built at a time,
/// so writing a huge table (libLLVM: 145k functions) never holds it whole.
pub const SYMBOL_GROUP_ROWS: usize = 8192;
/// A row group of a symbol table also ends once its distinct names hold this many bytes
/// (long names: the group's memory stays bounded whatever the names' lengths).
pub const SYMBOL_GROUP_NAME_BYTES: usize = 4 << 20;

/// One function of a binary, for [`write_symbol_table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolFn {
    /// File offset of the first byte.
    pub start: u64,
    /// Bytes (0 = up to the next function).
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

/// Writes the symbol table of one binary from an iterator of its functions (in the
/// order they are to be stored: by start), [`SYMBOL_GROUP_ROWS`] rows (or
/// [`SYMBOL_GROUP_NAME_BYTES`] of names) per row group.
/// Only one group's names are in memory at a time, and the build-id and path are stored
/// once per group (dictionary-encoded), not copied per row. An `Err` item (e.g. the
/// binary could not be read) stops the write and leaves no file. Returns (bytes, rows).
pub fn write_symbol_table<I, E>(path: &Path, build_id: &str, binary: &str, funcs: I) -> Result<(u64, u64)>
where
    I: IntoIterator<Item = std::result::Result<SymbolFn, E>>,
    E: std::fmt::Display,
{
    let (bid, bin) = (ba(build_id), ba(binary));
    let mut funcs = funcs.into_iter();
    let mut rows = 0u64;
    let groups = std::iter::from_fn(|| {
        let mut start = Vec::with_capacity(SYMBOL_GROUP_ROWS);
        let mut size = Vec::with_capacity(SYMBOL_GROUP_ROWS);
        let mut name: Vec<ByteArray> = Vec::with_capacity(SYMBOL_GROUP_ROWS);
        let mut name_bytes = 0usize;
        for f in funcs.by_ref() {
            match f {
                Ok(f) => {
                    start.push(sat_i64(f.start));
                    size.push(sat_i64(f.size));
                    // A name equal to the one before shares its buffer (issue 19,
                    // finding 4: thousands of functions with one long name).
                    match name.last() {
                        Some(last) if last.data() == f.name.as_bytes() => name.push(last.clone()),
                        _ => {
                            name_bytes += f.name.len();
                            name.push(ByteArray::from(f.name.into_bytes()));
                        }
                    }
                }
                Err(e) => return Some(Err(StoreError::Invalid { path: path.display().to_string(), msg: e.to_string() })),
            }
            if start.len() == SYMBOL_GROUP_ROWS || name_bytes >= SYMBOL_GROUP_NAME_BYTES {
                break;
            }
        }
        let n = start.len();
        if n == 0 {
            return None;
        }
        rows += n as u64;
        // ByteArray clones share one buffer: the repeated columns cost a pointer per row.
        Some(Ok((n, vec![Col::Str(vec![bid.clone(); n]), Col::Str(vec![bin.clone(); n]), Col::I64(start), Col::I64(size), Col::Str(name)])))
    });
    let bytes = write_table_groups(path, SYMBOLS_SCHEMA, None, groups)?;
    Ok((bytes, rows))
}

/// Writes the symbol table of one binary from rows in memory, [`SYMBOL_GROUP_ROWS`] rows
/// per row group. Returns bytes. (The agent streams with [`write_symbol_table`].)
pub fn write_symbols(path: &Path, rows: &[SymbolRow]) -> Result<u64> {
    let groups = rows.chunks(SYMBOL_GROUP_ROWS).map(|rows| {
        let cols = vec![
            Col::Str(rows.iter().map(|r| ba(&r.build_id)).collect()),
            Col::Str(rows.iter().map(|r| ba(&r.binary)).collect()),
            Col::I64(rows.iter().map(|r| sat_i64(r.start)).collect()),
            Col::I64(rows.iter().map(|r| sat_i64(r.size)).collect()),
            Col::Str(rows.iter().map(|r| ba(&r.name)).collect()),
        ];
        Ok((rows.len(), cols))
    });
    write_table_groups(path, SYMBOLS_SCHEMA, None, groups)
}

/// Writes a `latency` file. Returns bytes.
pub fn write_latency(path: &Path, meta: &WindowMeta, rows: &[LatencyRow]) -> Result<u64> {
    let cols = vec![
        Col::I64(rows.iter().map(|r| r.window_start_us).collect()),
        Col::I64(rows.iter().map(|r| r.window_end_us).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.class)).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.le_ns)).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.count)).collect()),
    ];
    write_table(path, LATENCY_SCHEMA, Some(meta), rows.len(), cols)
}

/// Writes an `items` file. Returns bytes.
pub fn write_items(path: &Path, meta: &WindowMeta, rows: &[ItemRow]) -> Result<u64> {
    let cols = vec![
        Col::I64(rows.iter().map(|r| r.begin_us).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.duration_ns)).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.class)).collect()),
        Col::I64(rows.iter().map(|r| r.item_id as i64).collect()),
        Col::I32(rows.iter().map(|r| r.pid as i32).collect()),
        Col::I32(rows.iter().map(|r| r.tid as i32).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.comm)).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.reason)).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.limit_ns)).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.samples)).collect()),
        Col::I64(rows.iter().map(|r| sat_i64(r.off_cpu_ns)).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.explanation)).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.trace_id)).collect()),
        Col::Str(rows.iter().map(|r| ba(&r.span_id)).collect()),
    ];
    write_table(path, ITEMS_SCHEMA, Some(meta), rows.len(), cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `items` files written before the trace context columns (12 columns) still read:
    /// their requests have no trace id; new files keep it.
    #[test]
    fn items_without_the_trace_columns_read_as_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let old_schema = ITEMS_SCHEMA.replace("  required binary trace_id (STRING);\n  required binary span_id (STRING);\n", "");
        assert_ne!(old_schema, ITEMS_SCHEMA);
        let row = ItemRow {
            begin_us: 1,
            duration_ns: 2,
            class: "c".into(),
            item_id: 3,
            pid: 4,
            tid: 5,
            comm: "x".into(),
            reason: "threshold".into(),
            limit_ns: 6,
            samples: 7,
            off_cpu_ns: 8,
            explanation: "{}".into(),
            trace_id: "ab".repeat(16),
            span_id: "cd".repeat(8),
        };
        let r = std::slice::from_ref(&row);
        let cols = vec![
            Col::I64(vec![1]),
            Col::I64(vec![2]),
            Col::Str(vec![ba("c")]),
            Col::I64(vec![3]),
            Col::I32(vec![4]),
            Col::I32(vec![5]),
            Col::Str(vec![ba("x")]),
            Col::Str(vec![ba("threshold")]),
            Col::I64(vec![6]),
            Col::I64(vec![7]),
            Col::I64(vec![8]),
            Col::Str(vec![ba("{}")]),
        ];
        let old = dir.path().join("old.parquet");
        write_table(&old, &old_schema, Some(&WindowMeta::default()), 1, cols).unwrap();
        let got = crate::read::read_items_file(&old).unwrap();
        assert_eq!(got, vec![ItemRow { trace_id: String::new(), span_id: String::new(), ..row.clone() }]);
        let new = dir.path().join("new.parquet");
        write_items(&new, &WindowMeta::default(), r).unwrap();
        assert_eq!(crate::read::read_items_file(&new).unwrap(), vec![row]);
    }
}
