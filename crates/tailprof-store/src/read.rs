//! Reading the store back: find the files of a time range (pruning by partition folder
//! and file name before opening anything), read rows, and count what could not be read.
//! A damaged or foreign file is skipped and counted in [`ReadStats`], never fatal.
//! Sample files are read column by column ([`crate::batch`]) on several threads.

use std::fs;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{ListAccessor, Row, RowAccessor};
use serde::Serialize;

use crate::atomic::open_for_read;
use crate::batch::{read_samples_batch, RowFilter, SampleBatch};
use crate::layout::{parse_window_name, Store, Table};
use crate::schema::*;
use crate::time::hour_start_us;
use crate::{Result, StoreError, MAX_FILE_BYTES, MAX_FRAMES, MAX_ROWS_PER_FILE};

/// One file of a partitioned table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileSummary {
    pub path: PathBuf,
    pub host: String,
    pub start_us: i64,
    pub end_us: i64,
    pub bytes: u64,
}

/// What a read found and skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReadStats {
    pub files: u64,
    pub rows: u64,
    pub bytes: u64,
    /// Files that could not be read (damaged, too large, newer schema): skipped.
    pub bad_files: u64,
    /// The first bad file's error, for the warning line.
    pub first_error: Option<String>,
    /// Loss counters summed over the files' metadata.
    pub samples: u64,
    pub lost_samples: u64,
    /// The other losses by kind.
    pub losses: crate::schema::Losses,
    pub dropped_windows: u64,
    pub dropped_rows: u64,
    /// Earliest window start and latest window end read.
    pub first_us: Option<i64>,
    pub last_us: Option<i64>,
}

impl ReadStats {
    fn bad(&mut self, e: StoreError) {
        self.bad_files += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

/// Which sample rows to read.
#[derive(Debug, Clone, Default)]
pub struct SampleQuery {
    /// Windows overlapping `[from_us, to_us)`.
    pub from_us: i64,
    pub to_us: i64,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// Keep rows whose leaf binary path ends with this (e.g. `libc.so.6` or `/usr/bin/x`),
    /// or whose comm equals it.
    pub binary: Option<String>,
}

/// Reads a store.
#[derive(Debug, Clone)]
pub struct StoreReader {
    store: Store,
}

fn hive_value<'a>(name: &'a str, key: &str) -> Option<&'a str> {
    name.strip_prefix(key)?.strip_prefix('=')
}

fn sorted_dirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

pub(crate) fn open_reader(path: &Path) -> Result<SerializedFileReader<fs::File>> {
    Ok(open_reader_file(path)?.0)
}

/// [`open_reader`], also returning a second handle of the file and its length (for
/// reading column chunks directly, [`crate::pages`]).
pub(crate) fn open_reader_file(path: &Path) -> Result<(SerializedFileReader<fs::File>, fs::File, u64)> {
    let (f, len) = open_for_read(path, MAX_FILE_BYTES)?;
    let f2 = f.try_clone().map_err(|e| StoreError::io(path, e))?;
    let r = SerializedFileReader::new(f).map_err(|e| StoreError::pq(path, e))?;
    let md = r.metadata().file_metadata();
    if md.num_rows() > MAX_ROWS_PER_FILE || md.num_rows() < 0 {
        return Err(StoreError::Invalid { path: path.display().to_string(), msg: format!("{} rows, over the limit", md.num_rows()) });
    }
    let version = md
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == KV_VERSION))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| v.parse::<u32>().ok());
    match version {
        Some(v) if v <= SCHEMA_VERSION => Ok((r, f2, len)),
        Some(v) => Err(StoreError::Invalid {
            path: path.display().to_string(),
            msg: format!("schema version {v} is newer than this tailprof's {SCHEMA_VERSION}; upgrade tailprof"),
        }),
        None => Err(StoreError::Invalid { path: path.display().to_string(), msg: "not a tailprof store file (no schema version)".into() }),
    }
}

pub(crate) fn window_meta(r: &SerializedFileReader<fs::File>) -> Option<WindowMeta> {
    let kv = r.metadata().file_metadata().key_value_metadata()?;
    let v = kv.iter().find(|k| k.key == KV_META)?.value.as_deref()?;
    serde_json::from_str(v).ok()
}

fn rows_of<'a>(r: &'a SerializedFileReader<fs::File>, path: &Path) -> Result<impl Iterator<Item = parquet::errors::Result<Row>> + 'a> {
    r.get_row_iter(None).map_err(|e| StoreError::pq(path, e))
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

fn sample_row(row: &Row) -> parquet::errors::Result<SampleRow> {
    let bids = row.get_list(9)?;
    let offs = row.get_list(10)?;
    let n = bids.len().min(offs.len()).min(MAX_FRAMES);
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        frames.push(StoreFrame { build_id: bids.get_string(i)?.clone(), offset: u(offs.get_long(i)?) });
    }
    Ok(SampleRow {
        window_start_us: row.get_timestamp_micros(0)?,
        window_end_us: row.get_timestamp_micros(1)?,
        pid: row.get_int(2)? as u32,
        comm: row.get_string(3)?.clone(),
        event: row.get_string(4)?.clone(),
        binary: row.get_string(5)?.clone(),
        stack_id: row.get_long(8)? as u64,
        frames,
        truncated: row.get_bool(11)?,
        count: u(row.get_long(12)?),
        period: u(row.get_long(13)?),
    })
}

impl StoreReader {
    pub fn new(store: Store) -> Self {
        StoreReader { store }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The files of `table` whose windows overlap `[from_us, to_us)`, oldest first.
    pub fn files(&self, table: Table, host: Option<&str>, from_us: i64, to_us: i64) -> Vec<FileSummary> {
        let mut out = Vec::new();
        for (hname, hdir) in sorted_dirs(&self.store.table_dir(table)) {
            let Some(h) = hive_value(&hname, "host") else { continue };
            if host.is_some_and(|want| want != h) {
                continue;
            }
            for (dname, ddir) in sorted_dirs(&hdir) {
                let Some(date) = hive_value(&dname, "date") else { continue };
                for (hourname, hourdir) in sorted_dirs(&ddir) {
                    let Some(hour) = hive_value(&hourname, "hour").and_then(|v| v.parse::<u32>().ok()) else { continue };
                    let Some(hs) = hour_start_us(date, hour) else { continue };
                    // A window starts in its hour folder and lasts far less than a day.
                    if hs >= to_us || hs.saturating_add(86_400_000_000) <= from_us {
                        continue;
                    }
                    let Ok(rd) = fs::read_dir(&hourdir) else { continue };
                    let first = out.len();
                    for e in rd.flatten() {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if name.starts_with('.') {
                            continue;
                        }
                        let Some((s, t)) = parse_window_name(&name) else { continue };
                        if s >= to_us || t <= from_us {
                            continue;
                        }
                        let Ok(md) = e.metadata() else { continue };
                        if !md.is_file() {
                            continue;
                        }
                        out.push(FileSummary { path: e.path(), host: h.to_string(), start_us: s, end_us: t, bytes: md.len() });
                    }
                    // A window file inside a compacted file's range is a leftover of a
                    // compaction cut short: the compacted file already holds its rows.
                    let compacted: Vec<(i64, i64)> =
                        out[first..].iter().filter(|f| file_name(&f.path).starts_with("c-")).map(|f| (f.start_us, f.end_us)).collect();
                    if !compacted.is_empty() {
                        let mut k = first;
                        while k < out.len() {
                            let f = &out[k];
                            if file_name(&f.path).starts_with("w-") && compacted.iter().any(|&(a, b)| f.start_us >= a && f.end_us <= b) {
                                out.swap_remove(k);
                            } else {
                                k += 1;
                            }
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| (a.start_us, &a.path).cmp(&(b.start_us, &b.path)));
        out
    }

    /// Reads the sample rows matching `q`.
    pub fn samples(&self, q: &SampleQuery) -> (Vec<SampleRow>, ReadStats) {
        let mut out = Vec::new();
        let st = self.samples_each(q, &mut |rows| out.extend_from_slice(rows));
        (out, st)
    }

    /// Streams the sample rows matching `q`, one file at a time (memory stays at one
    /// file's rows however long the range).
    pub fn samples_each(&self, q: &SampleQuery, f: &mut dyn FnMut(&[SampleRow])) -> ReadStats {
        self.sample_batches(q, &mut |_, b| f(&b.to_rows()))
    }

    /// Streams the sample rows matching `q` as column batches ([`SampleBatch`]), one per
    /// file, in file order (oldest first); `f` also gets the file's index in that order.
    /// Files are decoded on up to [`READ_THREADS`] threads (at most as many as CPUs) while
    /// `f` runs on the caller's; at most two decoded files per thread wait for `f`, so
    /// memory stays at a few files' rows however long the range.
    pub fn sample_batches(&self, q: &SampleQuery, f: &mut dyn FnMut(usize, &SampleBatch)) -> ReadStats {
        let files = self.files(Table::Samples, q.host.as_deref(), q.from_us, q.to_us);
        let filter = RowFilter { from_us: q.from_us, to_us: q.to_us, pid: q.pid, binary: q.binary.clone() };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = cpus.min(READ_THREADS).min(files.len());
        let mut st = ReadStats::default();
        if threads <= 1 {
            for (i, file) in files.iter().enumerate() {
                let r = decode_guarded(&file.path, &filter);
                account(&mut st, i, file, r, f);
            }
            return st;
        }
        std::thread::scope(|s| {
            let mut rxs = Vec::with_capacity(threads);
            for w in 0..threads {
                let (tx, rx) = std::sync::mpsc::sync_channel(2);
                let (files, filter) = (&files, &filter);
                s.spawn(move || {
                    for file in files.iter().skip(w).step_by(threads) {
                        if tx.send(decode_guarded(&file.path, filter)).is_err() {
                            break;
                        }
                    }
                });
                rxs.push(rx);
            }
            for (i, file) in files.iter().enumerate() {
                let r = rxs[i % threads].recv().unwrap_or_else(|_| {
                    Err(StoreError::Invalid { path: file.path.display().to_string(), msg: "reader thread stopped".into() })
                });
                account(&mut st, i, file, r, f);
            }
        });
        st
    }

    /// The symbol table of one build-id (empty when the store has none).
    pub fn symbols(&self, build_id: &str) -> Result<Vec<SymbolRow>> {
        let Some(path) = self.store.symbols_file(build_id) else { return Ok(Vec::new()) };
        if !path.exists() {
            return Ok(Vec::new());
        }
        read_symbols_file(&path)
    }

    /// Retained requests with `begin` in `[from_us, to_us)`.
    pub fn items(&self, host: Option<&str>, from_us: i64, to_us: i64) -> (Vec<ItemRow>, ReadStats) {
        let mut st = ReadStats::default();
        let mut out = Vec::new();
        for f in self.files(Table::Items, host, from_us.saturating_sub(3_600_000_000), to_us) {
            match read_items_file(&f.path) {
                Ok(rows) => {
                    st.files += 1;
                    for r in rows.into_iter().filter(|r| r.begin_us >= from_us && r.begin_us < to_us) {
                        st.rows += 1;
                        out.push(r);
                    }
                }
                Err(e) => st.bad(e),
            }
        }
        (out, st)
    }

    /// Latency histogram rows of windows overlapping `[from_us, to_us)`.
    pub fn latency(&self, host: Option<&str>, from_us: i64, to_us: i64) -> (Vec<LatencyRow>, ReadStats) {
        let mut st = ReadStats::default();
        let mut out = Vec::new();
        for f in self.files(Table::Latency, host, from_us, to_us) {
            match read_latency_file(&f.path) {
                Ok(rows) => {
                    st.files += 1;
                    st.rows += rows.len() as u64;
                    out.extend(rows);
                }
                Err(e) => st.bad(e),
            }
        }
        (out, st)
    }
}

/// Threads decoding sample files at most (the query itself runs on the caller's thread).
pub const READ_THREADS: usize = 4;

/// [`read_samples_batch`], with a panic inside the parquet crate (a malformed file it
/// does not check) turned into a bad file instead of a crash.
fn decode_guarded(path: &Path, filter: &RowFilter) -> Result<(Option<WindowMeta>, SampleBatch)> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_samples_batch(path, filter))).unwrap_or_else(|_| {
        Err(StoreError::Invalid { path: path.display().to_string(), msg: "malformed Parquet (the reader panicked)".into() })
    })
}

fn account(
    st: &mut ReadStats,
    i: usize,
    file: &FileSummary,
    r: Result<(Option<WindowMeta>, SampleBatch)>,
    f: &mut dyn FnMut(usize, &SampleBatch),
) {
    match r {
        Ok((meta, batch)) => {
            st.files += 1;
            st.bytes += file.bytes;
            if let Some(m) = meta {
                st.samples += m.samples;
                st.lost_samples += m.lost_samples;
                st.losses.add(&m.losses);
                st.dropped_windows += m.dropped_windows;
                st.dropped_rows += m.dropped_rows;
            }
            st.first_us = Some(st.first_us.map_or(file.start_us, |v| v.min(file.start_us)));
            st.last_us = Some(st.last_us.map_or(file.end_us, |v| v.max(file.end_us)));
            st.rows += batch.len() as u64;
            f(i, &batch);
        }
        Err(e) => st.bad(e),
    }
}

/// Reads one samples file: its window metadata and rows.
pub fn read_samples_file(path: &Path) -> Result<(Option<WindowMeta>, Vec<SampleRow>)> {
    let (meta, b) = read_samples_batch(path, &RowFilter::all())?;
    Ok((meta, b.to_rows()))
}

/// [`read_samples_file`] through the parquet crate's record API (a `Row` of `Field`s per
/// row): the reference the column reader ([`crate::batch`]) is tested against; several
/// times slower.
pub fn read_samples_file_records(path: &Path) -> Result<(Option<WindowMeta>, Vec<SampleRow>)> {
    let r = open_reader(path)?;
    let meta = window_meta(&r);
    let mut rows = Vec::with_capacity(r.metadata().file_metadata().num_rows().clamp(0, 1 << 20) as usize);
    for row in rows_of(&r, path)? {
        let row = row.map_err(|e| StoreError::pq(path, e))?;
        rows.push(sample_row(&row).map_err(|e| StoreError::pq(path, e))?);
    }
    Ok((meta, rows))
}

/// Reads one symbols file.
pub fn read_symbols_file(path: &Path) -> Result<Vec<SymbolRow>> {
    let r = open_reader(path)?;
    let mut rows = Vec::new();
    for row in rows_of(&r, path)? {
        let row = row.map_err(|e| StoreError::pq(path, e))?;
        let f = || -> parquet::errors::Result<SymbolRow> {
            Ok(SymbolRow {
                build_id: row.get_string(0)?.clone(),
                binary: row.get_string(1)?.clone(),
                start: u(row.get_long(2)?),
                size: u(row.get_long(3)?),
                name: row.get_string(4)?.clone(),
            })
        };
        rows.push(f().map_err(|e| StoreError::pq(path, e))?);
    }
    Ok(rows)
}

/// Reads one items file.
pub fn read_items_file(path: &Path) -> Result<Vec<ItemRow>> {
    let r = open_reader(path)?;
    let mut rows = Vec::new();
    for row in rows_of(&r, path)? {
        let row = row.map_err(|e| StoreError::pq(path, e))?;
        let f = || -> parquet::errors::Result<ItemRow> {
            Ok(ItemRow {
                begin_us: row.get_timestamp_micros(0)?,
                duration_ns: u(row.get_long(1)?),
                class: row.get_string(2)?.clone(),
                item_id: row.get_long(3)? as u64,
                pid: row.get_int(4)? as u32,
                tid: row.get_int(5)? as u32,
                comm: row.get_string(6)?.clone(),
                reason: row.get_string(7)?.clone(),
                limit_ns: u(row.get_long(8)?),
                samples: u(row.get_long(9)?),
                off_cpu_ns: u(row.get_long(10)?),
                explanation: row.get_string(11)?.clone(),
                // Files written before the trace context columns have 12.
                trace_id: if row.len() > 12 { row.get_string(12)?.clone() } else { String::new() },
                span_id: if row.len() > 13 { row.get_string(13)?.clone() } else { String::new() },
            })
        };
        rows.push(f().map_err(|e| StoreError::pq(path, e))?);
    }
    Ok(rows)
}

/// Reads one latency file.
pub fn read_latency_file(path: &Path) -> Result<Vec<LatencyRow>> {
    let r = open_reader(path)?;
    let mut rows = Vec::new();
    for row in rows_of(&r, path)? {
        let row = row.map_err(|e| StoreError::pq(path, e))?;
        let f = || -> parquet::errors::Result<LatencyRow> {
            Ok(LatencyRow {
                window_start_us: row.get_timestamp_micros(0)?,
                window_end_us: row.get_timestamp_micros(1)?,
                class: row.get_string(2)?.clone(),
                le_ns: u(row.get_long(3)?),
                count: u(row.get_long(4)?),
            })
        };
        rows.push(f().map_err(|e| StoreError::pq(path, e))?);
    }
    Ok(rows)
}
