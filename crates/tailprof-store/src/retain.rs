//! Retention (by age, then by total size, oldest first, counted) and compaction (the
//! window files of a finished hour merged into one `c-<start>-<end>.parquet`).
//!
//! Compaction is crash-safe without a journal: the merged file is written atomically
//! first, then the window files are deleted. Until they are, readers skip every `w-`
//! file whose range lies inside a `c-` file of the same folder, so a crash in between
//! never counts a window twice.

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::layout::{Store, Table};
use crate::read::{read_samples_file, FileSummary, StoreReader};
use crate::schema::WindowMeta;
use crate::write::write_samples;
use crate::Result;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetainPolicy {
    /// Delete files whose window ended more than this long ago.
    pub max_age_us: Option<i64>,
    /// Then delete the oldest files until the partitioned tables total at most this.
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RetainStats {
    pub removed_by_age: u64,
    pub removed_by_size: u64,
    pub bytes_removed: u64,
    pub bytes_kept: u64,
    /// Symbol tables among the removed files (not used for longer than the age, or the
    /// oldest used when over the size).
    pub symbol_tables_removed: u64,
}

/// The store's symbol tables, as files whose "window" is their last use: the file's
/// modification time, which the agent moves forward when the binary is seen again
/// ([`touch_symbols`]). At most 1,000,000 entries; symlinks and other non-files skipped.
fn symbol_files(store: &Store) -> Vec<FileSummary> {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = fs::read_dir(store.symbols_dir()) else { return Vec::new() };
    rd.flatten()
        .take(1_000_000)
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let m = e.metadata().ok().filter(|m| m.file_type().is_file())?;
            if !name.ends_with(".parquet") || tailprof_format::atomic::is_temp_name(name) {
                return None;
            }
            let used_us = m.mtime().saturating_mul(1_000_000).saturating_add(m.mtime_nsec() / 1000);
            Some(FileSummary { path: e.path(), host: String::new(), start_us: used_us, end_us: used_us, bytes: m.len() })
        })
        .collect()
}

/// Marks the symbol tables of `build_ids` as used now (their modification time), so that
/// retention keeps the tables of binaries still seen. Returns how many were marked.
pub fn touch_symbols<'a>(store: &Store, build_ids: impl IntoIterator<Item = &'a str>) -> u64 {
    use std::os::unix::fs::OpenOptionsExt;
    let now = std::time::SystemTime::now();
    let mut n = 0;
    for id in build_ids {
        let Some(p) = store.symbols_file(id) else { continue };
        let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(&p);
        if f.and_then(|f| f.set_modified(now)).is_ok() {
            n += 1;
        }
    }
    n
}

/// Applies `policy` to every partitioned table of the store (all hosts: a shared store
/// is trimmed by whichever agent runs retention) and to the symbol tables, whose time is
/// their last use (issue 19, finding 8: an attacker's 118,822 tables stayed forever).
pub fn retain(store: &Store, policy: &RetainPolicy, now_us: i64) -> Result<RetainStats> {
    let reader = StoreReader::new(store.clone());
    let mut files = Vec::new();
    for t in Table::ALL {
        files.extend(reader.files(t, None, i64::MIN, i64::MAX));
    }
    let symbols = symbol_files(store);
    let is_symbols: std::collections::HashSet<std::path::PathBuf> = symbols.iter().map(|f| f.path.clone()).collect();
    files.extend(symbols);
    files.sort_by(|a, b| (a.end_us, &a.path).cmp(&(b.end_us, &b.path)));
    let mut st = RetainStats::default();
    let mut keep = Vec::new();
    for f in files {
        if policy.max_age_us.is_some_and(|age| f.end_us < now_us.saturating_sub(age)) {
            if fs::remove_file(&f.path).is_ok() {
                st.removed_by_age += 1;
                st.bytes_removed += f.bytes;
                st.symbol_tables_removed += is_symbols.contains(&f.path) as u64;
                remove_empty_parents(&f.path, store.root());
            }
        } else {
            keep.push(f);
        }
    }
    let mut total: u64 = keep.iter().map(|f| f.bytes).sum();
    if let Some(max) = policy.max_bytes {
        for f in &keep {
            if total <= max {
                break;
            }
            if fs::remove_file(&f.path).is_ok() {
                st.removed_by_size += 1;
                st.bytes_removed += f.bytes;
                st.symbol_tables_removed += is_symbols.contains(&f.path) as u64;
                total = total.saturating_sub(f.bytes);
                remove_empty_parents(&f.path, store.root());
            }
        }
    }
    st.bytes_kept = total;
    Ok(st)
}

fn remove_empty_parents(file: &Path, root: &Path) {
    let mut dir = file.parent();
    for _ in 0..3 {
        let Some(d) = dir else { return };
        if d == root || fs::remove_dir(d).is_err() {
            return;
        }
        dir = d.parent();
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CompactStats {
    pub hours_compacted: u64,
    pub files_merged: u64,
    pub bad_files: u64,
}

/// Merges the `samples` window files of `host`'s hour partitions that ended before
/// `before_us` into one file per hour. Rows are kept per window (no precision lost).
pub fn compact(store: &Store, host: &str, before_us: i64) -> Result<CompactStats> {
    let reader = StoreReader::new(store.clone());
    let files = reader.files(Table::Samples, Some(host), i64::MIN, before_us);
    let mut st = CompactStats::default();
    let mut i = 0;
    while i < files.len() {
        let dir = files[i].path.parent().map(Path::to_path_buf);
        let mut j = i;
        while j < files.len() && files[j].path.parent().map(Path::to_path_buf) == dir {
            j += 1;
        }
        let group = &files[i..j];
        i = j;
        let hour_end = group.iter().map(|f| f.end_us).max().unwrap_or(0);
        let windows: Vec<_> = group.iter().filter(|f| name_of(&f.path).starts_with("w-")).collect();
        if windows.len() < 2 || hour_end >= before_us {
            continue;
        }
        let (mut rows, mut meta) = (Vec::new(), WindowMeta::default());
        let mut ok = Vec::new();
        for f in &windows {
            match read_samples_file(&f.path) {
                Ok((m, r)) => {
                    if let Some(m) = m {
                        if meta.host.is_empty() {
                            meta = WindowMeta {
                                samples: 0,
                                lost_samples: 0,
                                losses: Default::default(),
                                dropped_windows: 0,
                                dropped_rows: 0,
                                ..m.clone()
                            };
                        }
                        meta.samples += m.samples;
                        meta.lost_samples += m.lost_samples;
                        meta.losses.add(&m.losses);
                        meta.dropped_windows += m.dropped_windows;
                        meta.dropped_rows += m.dropped_rows;
                    }
                    rows.extend(r);
                    ok.push(*f);
                }
                Err(_) => st.bad_files += 1,
            }
        }
        if ok.len() < 2 {
            continue;
        }
        let start = ok.iter().map(|f| f.start_us).min().unwrap_or(0);
        let end = ok.iter().map(|f| f.end_us).max().unwrap_or(0);
        meta.window_start_us = start;
        meta.window_end_us = end;
        let Some(d) = &dir else { continue };
        let dest = d.join(format!("c-{:016}-{:016}.parquet", start.max(0), end.max(0)));
        write_samples(&dest, &meta, &rows)?;
        for f in &ok {
            let _ = fs::remove_file(&f.path);
        }
        st.hours_compacted += 1;
        st.files_merged += ok.len() as u64;
    }
    Ok(st)
}

fn name_of(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}
