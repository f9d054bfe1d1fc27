//! The `samples` table read column by column: the fast path of `tailprof top`, `diff`
//! and the exports.
//!
//! The parquet crate's record API builds a `Row` of `Field`s per row and a `String` per
//! frame's build-id; over a day of windows that allocation is most of the query's time.
//! Here each column of a row group is decoded in chunks of [`CHUNK_ROWS`] records with the
//! crate's low-level typed column readers (no Arrow), and strings become small integers:
//! a frame is `(build-id index, offset)` into the batch's [`SampleBatch::build_ids`], and
//! comm / event / binary are indices into [`SampleBatch::strings`]. Dictionary-encoded
//! values share one buffer per dictionary entry, so equal values are recognised by
//! pointer ([`Interner`]) and hashed only the first time. Rows outside the query are
//! dropped before their frames are copied.
//!
//! [`crate::read::read_samples_file_records`] (the record API) is kept as the reference
//! the tests compare this reader with.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::reader::{FileReader, RowGroupReader, SerializedFileReader};
use parquet::schema::types::SchemaDescriptor;

use crate::pages::{supported, ChunkPages};
use crate::read::{open_reader_file, window_meta};
use crate::schema::{SampleRow, StoreFrame, WindowMeta, SAMPLES_SCHEMA};
use crate::{Result, StoreError, MAX_FRAMES};

/// Records decoded per column per step (bounds the decoder's buffers).
pub const CHUNK_ROWS: usize = 4096;

/// Frame-list values per row, on average over a row group, beyond which a file is refused
/// (8 × [`MAX_FRAMES`]: bounds what one row group's frame columns can make us decode).
pub const MAX_LIST_VALUES_PER_ROW: u64 = 8 * MAX_FRAMES as u64;

/// Sample rows of one file, column by column. Row `i`'s frames are
/// `frame_build_id[frame_ends[i-1]..frame_ends[i]]` (and `frame_offset`, same range),
/// innermost first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleBatch {
    pub window_start_us: Vec<i64>,
    pub window_end_us: Vec<i64>,
    pub pid: Vec<u32>,
    /// Indices into [`SampleBatch::strings`].
    pub comm: Vec<u32>,
    pub event: Vec<u32>,
    pub binary: Vec<u32>,
    pub stack_id: Vec<u64>,
    pub truncated: Vec<bool>,
    pub count: Vec<u64>,
    pub period: Vec<u64>,
    /// End (exclusive) of each row's frames in the two frame columns.
    pub frame_ends: Vec<u32>,
    /// Index into [`SampleBatch::build_ids`] per frame.
    pub frame_build_id: Vec<u32>,
    pub frame_offset: Vec<u64>,
    /// Distinct comm, event and binary values of the batch.
    pub strings: Vec<String>,
    /// Distinct build-ids of the batch's frames.
    pub build_ids: Vec<String>,
}

impl SampleBatch {
    pub fn len(&self) -> usize {
        self.count.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count.is_empty()
    }

    /// The range of row `i`'s frames in `frame_build_id` / `frame_offset`.
    pub fn frames(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.frame_ends[i - 1] as usize };
        start..self.frame_ends[i] as usize
    }

    pub fn str(&self, id: u32) -> &str {
        &self.strings[id as usize]
    }

    /// Row `i` as a [`SampleRow`] (what the record API yields).
    pub fn row(&self, i: usize) -> SampleRow {
        SampleRow {
            window_start_us: self.window_start_us[i],
            window_end_us: self.window_end_us[i],
            pid: self.pid[i],
            comm: self.str(self.comm[i]).to_string(),
            event: self.str(self.event[i]).to_string(),
            binary: self.str(self.binary[i]).to_string(),
            stack_id: self.stack_id[i],
            frames: self
                .frames(i)
                .map(|k| StoreFrame { build_id: self.build_ids[self.frame_build_id[k] as usize].clone(), offset: self.frame_offset[k] })
                .collect(),
            truncated: self.truncated[i],
            count: self.count[i],
            period: self.period[i],
        }
    }

    pub fn to_rows(&self) -> Vec<SampleRow> {
        (0..self.len()).map(|i| self.row(i)).collect()
    }
}

/// Which rows a read keeps (see [`crate::SampleQuery`]).
#[derive(Debug, Clone, Default)]
pub struct RowFilter {
    /// Keep rows whose window overlaps `[from_us, to_us)`.
    pub from_us: i64,
    pub to_us: i64,
    pub pid: Option<u32>,
    /// Keep rows whose binary path ends with this, or whose comm equals it.
    pub binary: Option<String>,
}

impl RowFilter {
    /// Keeps every row.
    pub fn all() -> Self {
        RowFilter { from_us: i64::MIN, to_us: i64::MAX, pid: None, binary: None }
    }
}

/// Maps byte strings to small integers. Values decoded from one dictionary share the
/// entry's buffer, so a short list of recently seen buffers (held, so their memory cannot
/// be reused for other bytes while compared by address) answers most lookups without
/// hashing.
struct Interner {
    recent: Vec<(ByteArray, u32)>,
    next: usize,
    ids: HashMap<Box<[u8]>, u32>,
}

const RECENT: usize = 8;

impl Interner {
    fn new() -> Self {
        Interner { recent: Vec::with_capacity(RECENT), next: 0, ids: HashMap::new() }
    }

    /// Forgets the held buffers (at a column chunk's end).
    fn release(&mut self) {
        self.recent.clear();
        self.next = 0;
    }

    #[inline]
    fn id(&mut self, v: &ByteArray, out: &mut Vec<String>) -> u32 {
        let d = v.data();
        for (b, id) in &self.recent {
            let bd = b.data();
            if bd.as_ptr() == d.as_ptr() && bd.len() == d.len() {
                return *id;
            }
        }
        let id = match self.ids.get(d) {
            Some(&id) => id,
            None => {
                let id = out.len() as u32;
                out.push(String::from_utf8_lossy(d).into_owned());
                self.ids.insert(d.into(), id);
                id
            }
        };
        if self.recent.len() < RECENT {
            self.recent.push((v.clone(), id));
        } else {
            self.recent[self.next] = (v.clone(), id);
            self.next = (self.next + 1) % RECENT;
        }
        id
    }
}

fn expected_schema() -> &'static SchemaDescriptor {
    static S: OnceLock<SchemaDescriptor> = OnceLock::new();
    S.get_or_init(|| {
        let t = parquet::schema::parser::parse_message_type(SAMPLES_SCHEMA).expect("SAMPLES_SCHEMA parses");
        SchemaDescriptor::new(std::sync::Arc::new(t))
    })
}

/// Refuses a file whose columns are not the samples table's (type, nesting), so that the
/// typed readers below match.
fn check_schema(path: &Path, got: &SchemaDescriptor) -> Result<()> {
    let want = expected_schema();
    let bad = |msg: String| StoreError::Invalid { path: path.display().to_string(), msg };
    if got.num_columns() != want.num_columns() {
        return Err(bad(format!("{} columns, the samples table has {}", got.num_columns(), want.num_columns())));
    }
    for i in 0..want.num_columns() {
        let (g, w) = (got.column(i), want.column(i));
        if g.physical_type() != w.physical_type() || g.max_def_level() != w.max_def_level() || g.max_rep_level() != w.max_rep_level() {
            return Err(bad(format!("column {} ({}) is not the samples table's {}", i, g.path(), w.path())));
        }
    }
    Ok(())
}

/// The typed reader of column `i`, its pages read by [`ChunkPages`] (zstd with a reused
/// context) or, for other compressions, by the crate's page reader.
fn typed<T: DataType>(rg: &dyn RowGroupReader, i: usize, file: &File, len: u64, path: &Path) -> Result<ColumnReaderImpl<T>> {
    let c = rg.metadata().column(i);
    if c.column_type() != T::get_physical_type() {
        return Err(StoreError::Invalid { path: path.display().to_string(), msg: format!("column {i}: unexpected type") });
    }
    let pages: Box<dyn parquet::column::page::PageReader> = if supported(c) {
        Box::new(ChunkPages::new(file, len, c).map_err(|e| StoreError::pq(path, e))?)
    } else {
        rg.get_column_page_reader(i).map_err(|e| StoreError::pq(path, e))?
    };
    Ok(ColumnReaderImpl::<T>::new(c.column_descr_ptr(), pages))
}

/// Reads up to `n` records of a required column into `out` (cleared first).
fn scalar<T: DataType>(r: &mut ColumnReaderImpl<T>, n: usize, out: &mut Vec<T::T>, path: &Path) -> Result<usize> {
    out.clear();
    let (recs, vals, _) = r.read_records(n, None, None, out).map_err(|e| StoreError::pq(path, e))?;
    if recs != vals {
        return Err(StoreError::pq(path, "a required column has missing values"));
    }
    Ok(recs)
}

/// One list column's chunk: values and the number of values per record.
struct ListChunk<T> {
    values: Vec<T>,
    def: Vec<i16>,
    rep: Vec<i16>,
    per_row: Vec<u32>,
}

impl<T> ListChunk<T> {
    fn new() -> Self {
        ListChunk { values: Vec::new(), def: Vec::new(), rep: Vec::new(), per_row: Vec::new() }
    }
}

fn list<T: DataType>(r: &mut ColumnReaderImpl<T>, n: usize, c: &mut ListChunk<T::T>, path: &Path) -> Result<usize> {
    c.values.clear();
    c.def.clear();
    c.rep.clear();
    c.per_row.clear();
    let (recs, vals, levels) = r.read_records(n, Some(&mut c.def), Some(&mut c.rep), &mut c.values).map_err(|e| StoreError::pq(path, e))?;
    if vals != c.values.len() || levels != c.def.len() || levels != c.rep.len() {
        return Err(StoreError::pq(path, "list column: levels and values disagree"));
    }
    let mut defined = 0usize;
    for (&r, &d) in c.rep.iter().zip(&c.def) {
        if r == 0 {
            c.per_row.push(0);
        }
        if d > 0 {
            match c.per_row.last_mut() {
                Some(k) => *k = k.saturating_add(1),
                None => return Err(StoreError::pq(path, "list column starts inside a record")),
            }
            defined += 1;
        }
    }
    if c.per_row.len() != recs || defined != vals {
        return Err(StoreError::pq(path, "list column: records and levels disagree"));
    }
    Ok(recs)
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

/// Per string id: whether it passes the `--binary` filter as a binary path (bit 0) and
/// as a comm (bit 1); computed once per distinct string.
fn binary_match(cache: &mut Vec<u8>, strings: &[String], id: u32, want: &str) -> u8 {
    let i = id as usize;
    if cache.len() <= i {
        cache.resize(strings.len().max(i + 1), 0);
    }
    if cache[i] == 0 {
        let s = &strings[i];
        cache[i] = 4 | u8::from(s.ends_with(want)) | (u8::from(s == want) << 1);
    }
    cache[i]
}

/// Reads one samples file column by column, keeping the rows `filter` selects.
/// Returns the window metadata, the kept rows and the number of rows in the file.
pub fn read_samples_batch(path: &Path, filter: &RowFilter) -> Result<(Option<WindowMeta>, SampleBatch)> {
    let (r, file, len): (SerializedFileReader<File>, File, u64) = open_reader_file(path)?;
    let meta = window_meta(&r);
    check_schema(path, r.metadata().file_metadata().schema_descr())?;
    let mut b = SampleBatch::default();
    let (mut comms, mut events, mut bins) = (Interner::new(), Interner::new(), Interner::new());
    let mut bids = Interner::new();
    let mut match_cache: Vec<u8> = Vec::new();
    let (mut i64a, mut i64b, mut i64c, mut i64d, mut i64e) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut i32a: Vec<i32> = Vec::new();
    let (mut comm, mut event, mut bin): (Vec<ByteArray>, Vec<ByteArray>, Vec<ByteArray>) = (Vec::new(), Vec::new(), Vec::new());
    let mut trunc: Vec<bool> = Vec::new();
    let mut lb: ListChunk<ByteArray> = ListChunk::new();
    let mut lo: ListChunk<i64> = ListChunk::new();
    let mut keep: Vec<bool> = Vec::new();
    for g in 0..r.num_row_groups() {
        let rg = r.get_row_group(g).map_err(|e| StoreError::pq(path, e))?;
        let rows = rg.metadata().num_rows().max(0) as u64;
        // Frame lists longer than MAX_FRAMES are cut when read (the agent never writes
        // them; other writers might). A frame column of more than MAX_LIST_VALUES_PER_ROW
        // values per row on average is refused before any of it is decoded.
        for c in [9, 10] {
            let nv = rg.metadata().column(c).num_values().max(0) as u64;
            if nv > rows.max(1).saturating_mul(MAX_LIST_VALUES_PER_ROW) {
                return Err(StoreError::Invalid {
                    path: path.display().to_string(),
                    msg: format!("{nv} frames in {rows} rows, over the limit"),
                });
            }
        }
        let rg = rg.as_ref();
        let mut c_ws = typed::<Int64Type>(rg, 0, &file, len, path)?;
        let mut c_we = typed::<Int64Type>(rg, 1, &file, len, path)?;
        let mut c_pid = typed::<Int32Type>(rg, 2, &file, len, path)?;
        let mut c_comm = typed::<ByteArrayType>(rg, 3, &file, len, path)?;
        let mut c_event = typed::<ByteArrayType>(rg, 4, &file, len, path)?;
        let mut c_bin = typed::<ByteArrayType>(rg, 5, &file, len, path)?;
        let mut c_sid = typed::<Int64Type>(rg, 8, &file, len, path)?;
        let mut c_lb = typed::<ByteArrayType>(rg, 9, &file, len, path)?;
        let mut c_lo = typed::<Int64Type>(rg, 10, &file, len, path)?;
        let mut c_tr = typed::<BoolType>(rg, 11, &file, len, path)?;
        let mut c_cnt = typed::<Int64Type>(rg, 12, &file, len, path)?;
        let mut c_per = typed::<Int64Type>(rg, 13, &file, len, path)?;
        let mut done = 0u64;
        loop {
            let n = scalar(&mut c_ws, CHUNK_ROWS, &mut i64a, path)?;
            if n == 0 {
                break;
            }
            let same = [
                scalar(&mut c_we, n, &mut i64b, path)?,
                scalar(&mut c_pid, n, &mut i32a, path)?,
                scalar(&mut c_comm, n, &mut comm, path)?,
                scalar(&mut c_bin, n, &mut bin, path)?,
            ];
            if same.iter().any(|&k| k != n) {
                return Err(StoreError::pq(path, "columns of different lengths"));
            }
            // Which rows to keep, from the cheap columns.
            keep.clear();
            let mut comm_ids = Vec::with_capacity(n);
            let mut bin_ids = Vec::with_capacity(n);
            for k in 0..n {
                let mut ok = i64b[k] > filter.from_us && i64a[k] < filter.to_us;
                ok &= filter.pid.is_none_or(|p| p == i32a[k] as u32);
                let cid = comms.id(&comm[k], &mut b.strings);
                let bid = bins.id(&bin[k], &mut b.strings);
                if let (true, Some(want)) = (ok, filter.binary.as_deref()) {
                    ok = binary_match(&mut match_cache, &b.strings, bid, want) & 1 != 0
                        || binary_match(&mut match_cache, &b.strings, cid, want) & 2 != 0;
                }
                keep.push(ok);
                comm_ids.push(cid);
                bin_ids.push(bid);
            }
            let same = [
                scalar(&mut c_event, n, &mut event, path)?,
                scalar(&mut c_sid, n, &mut i64c, path)?,
                list(&mut c_lb, n, &mut lb, path)?,
                list(&mut c_lo, n, &mut lo, path)?,
                scalar(&mut c_tr, n, &mut trunc, path)?,
                scalar(&mut c_cnt, n, &mut i64d, path)?,
                scalar(&mut c_per, n, &mut i64e, path)?,
            ];
            if same.iter().any(|&k| k != n) {
                return Err(StoreError::pq(path, "columns of different lengths"));
            }
            let (mut vb, mut vo) = (0usize, 0usize);
            for k in 0..n {
                let (nb, no) = (lb.per_row[k] as usize, lo.per_row[k] as usize);
                if keep[k] {
                    b.window_start_us.push(i64a[k]);
                    b.window_end_us.push(i64b[k]);
                    b.pid.push(i32a[k] as u32);
                    b.comm.push(comm_ids[k]);
                    let eid = events.id(&event[k], &mut b.strings);
                    b.event.push(eid);
                    b.binary.push(bin_ids[k]);
                    b.stack_id.push(i64c[k] as u64);
                    b.truncated.push(trunc[k]);
                    b.count.push(u(i64d[k]));
                    b.period.push(u(i64e[k]));
                    let m = nb.min(no).min(MAX_FRAMES);
                    for j in 0..m {
                        let id = bids.id(&lb.values[vb + j], &mut b.build_ids);
                        b.frame_build_id.push(id);
                        b.frame_offset.push(u(lo.values[vo + j]));
                    }
                    let end = b.frame_offset.len();
                    b.frame_ends.push(u32::try_from(end).map_err(|_| StoreError::pq(path, "too many frames in one file"))?);
                }
                vb += nb;
                vo += no;
            }
            done += n as u64;
        }
        if done != rows {
            return Err(StoreError::pq(path, format!("row group {g}: {done} rows read, {rows} in the metadata")));
        }
        for i in [&mut comms, &mut events, &mut bins, &mut bids] {
            i.release();
        }
    }
    Ok((meta, b))
}
