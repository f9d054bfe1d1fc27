//! The writer thread: everything slow happens here, off the drain loop. It writes each
//! window's files, symbolizes each new build-id once, applies retention and compaction,
//! and pushes windows to a remote endpoint. A failed write (full disk, I/O error) drops
//! that window, counts it, and is reported in the next file written; nothing stops the
//! agent.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tailprof_store::schema::{ItemRow, LatencyRow, SampleRow, WindowMeta, SCHEMA_VERSION};
use tailprof_store::{Store, Table};

use crate::symtab::symbolize_file;

pub struct WindowBatch {
    pub host: String,
    pub start_us: i64,
    pub end_us: i64,
    pub samples: u64,
    pub lost_samples: u64,
    pub dropped_rows: u64,
    pub events: Vec<String>,
    pub rows: Vec<SampleRow>,
    pub items: Vec<ItemRow>,
    pub latency: Vec<LatencyRow>,
}

pub struct SymbolJob {
    pub build_id: String,
    pub path: String,
    /// The mapped file, opened while its process was alive.
    pub file: File,
}

pub enum Job {
    Window(WindowBatch),
    Symbols(SymbolJob),
}

/// What the writer did, shared with the agent's front end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriterStats {
    pub windows_written: u64,
    pub windows_dropped: u64,
    pub bytes_written: u64,
    pub symbol_tables: u64,
    pub symbol_tables_failed: u64,
    pub symbols: u64,
    pub items_retained: u64,
    pub retention_removed: u64,
    pub compacted_files: u64,
    pub pushes: u64,
    pub push_failures: u64,
    pub last_error: Option<String>,
    /// The last window write error (e.g. `disk full, window dropped: …`).
    pub last_window_error: Option<String>,
}

pub struct WriterConfig {
    pub store: Store,
    pub retain: tailprof_store::RetainPolicy,
    pub compact: bool,
    pub push: Option<String>,
}

pub fn run_writer(cfg: WriterConfig, jobs: Receiver<Job>, stats: Arc<Mutex<WriterStats>>) {
    let mut dropped_since_last = 0u64;
    let mut last_maintenance_hour = i64::MIN;
    let note_err = |stats: &Arc<Mutex<WriterStats>>, e: String| {
        if let Ok(mut s) = stats.lock() {
            s.last_error = Some(e);
        }
    };
    // Symbolization (seconds for a large library) runs on its own thread so windows are
    // written on time; at shutdown both drain their queues.
    let (sym_tx, sym_rx) = std::sync::mpsc::channel::<SymbolJob>();
    let sym_store = cfg.store.clone();
    let sym_stats = stats.clone();
    let sym_thread = std::thread::Builder::new()
        .name("tailprof-symbols".into())
        .spawn(move || run_symbolizer(sym_store, sym_rx, sym_stats))
        .ok();
    for job in jobs {
        match job {
            Job::Symbols(j) => {
                let _ = sym_tx.send(j);
            }
            Job::Window(w) => {
                let meta = WindowMeta {
                    schema_version: SCHEMA_VERSION,
                    host: w.host.clone(),
                    window_start_us: w.start_us,
                    window_end_us: w.end_us,
                    samples: w.samples,
                    lost_samples: w.lost_samples,
                    dropped_windows: dropped_since_last,
                    dropped_rows: w.dropped_rows,
                    events: w.events.clone(),
                    agent_version: env!("CARGO_PKG_VERSION").into(),
                };
                let res = write_window(&cfg.store, &meta, &w);
                match res {
                    Ok(bytes) => {
                        dropped_since_last = 0;
                        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                        s.windows_written += 1;
                        s.bytes_written += bytes;
                        s.items_retained += w.items.len() as u64;
                    }
                    Err(e) => {
                        dropped_since_last += 1;
                        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                        s.windows_dropped += 1;
                        let msg = if e.is_disk_full() { format!("disk full, window dropped: {e}") } else { format!("window dropped: {e}") };
                        s.last_error = Some(msg.clone());
                        s.last_window_error = Some(msg);
                    }
                }
                if let Some(url) = &cfg.push {
                    let r = crate::push::push_window(url, &cfg.store, &w);
                    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(()) => s.pushes += 1,
                        Err(e) => {
                            s.push_failures += 1;
                            s.last_error = Some(format!("push to {url}: {e}"));
                        }
                    }
                }
                // Once per hour: compact the finished hours, then retention.
                let hour = w.end_us.div_euclid(3_600_000_000);
                if hour != last_maintenance_hour {
                    last_maintenance_hour = hour;
                    if cfg.compact {
                        match tailprof_store::compact(&cfg.store, &w.host, hour * 3_600_000_000) {
                            Ok(c) => {
                                stats
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .compacted_files += c.files_merged
                            }
                            Err(e) => note_err(&stats, e.to_string()),
                        }
                    }
                }
                if cfg.retain.max_age_us.is_some() || cfg.retain.max_bytes.is_some() {
                    match tailprof_store::retain(
                        &cfg.store,
                        &cfg.retain,
                        tailprof_store::time::now_us(),
                    ) {
                        Ok(r) => {
                            stats
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .retention_removed += r.removed_by_age + r.removed_by_size
                        }
                        Err(e) => note_err(&stats, e.to_string()),
                    }
                }
            }
        }
    }
    drop(sym_tx);
    if let Some(t) = sym_thread {
        let _ = t.join();
    }
}

fn run_symbolizer(store: Store, jobs: Receiver<SymbolJob>, stats: Arc<Mutex<WriterStats>>) {
    let mut symbolized = std::collections::HashSet::new();
    for j in jobs {
        if !symbolized.insert(j.build_id.clone()) {
            continue;
        }
        let Some(dest) = store.symbols_file(&j.build_id) else {
            continue;
        };
        if dest.exists() {
            continue; // a previous run (or another host on a shared store) did it
        }
        let fd_path = format!("/proc/self/fd/{}", j.file.as_raw_fd());
        let rows = if j.path == crate::aggregate::KERNEL_PATH {
            crate::symtab::kallsyms_rows(j.file, &j.build_id, &j.path)
        } else {
            symbolize_file(&fd_path, &j.build_id, &j.path)
        };
        let res = rows.and_then(|rows| {
            store
                .ensure_dir(&store.symbols_dir())
                .map_err(|e| e.to_string())?;
            tailprof_store::write_symbols(&dest, &rows).map_err(|e| e.to_string())?;
            Ok(rows.len())
        });
        let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
        match res {
            Ok(n) => {
                s.symbol_tables += 1;
                s.symbols += n as u64;
            }
            Err(e) => {
                s.symbol_tables_failed += 1;
                s.last_error = Some(format!("symbols of {} ({}): {e}", j.path, j.build_id));
            }
        }
        drop(s);
        // A large library's table (and blazesym's parse of it) is freed now; give the
        // memory back instead of keeping it in this thread's malloc arena (resident size).
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only releases free heap memory.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

fn write_window(store: &Store, meta: &WindowMeta, w: &WindowBatch) -> tailprof_store::Result<u64> {
    let mut bytes = 0;
    if !w.rows.is_empty() || w.lost_samples > 0 || meta.dropped_windows > 0 {
        store.ensure_dir(&store.partition_dir(Table::Samples, &w.host, w.start_us))?;
        bytes += tailprof_store::write_samples(
            &store.window_file(Table::Samples, &w.host, w.start_us, w.end_us),
            meta,
            &w.rows,
        )?;
    }
    if !w.latency.is_empty() {
        store.ensure_dir(&store.partition_dir(Table::Latency, &w.host, w.start_us))?;
        bytes += tailprof_store::write_latency(
            &store.window_file(Table::Latency, &w.host, w.start_us, w.end_us),
            meta,
            &w.latency,
        )?;
    }
    if !w.items.is_empty() {
        store.ensure_dir(&store.partition_dir(Table::Items, &w.host, w.start_us))?;
        bytes += tailprof_store::write_items(
            &store.window_file(Table::Items, &w.host, w.start_us, w.end_us),
            meta,
            &w.items,
        )?;
    }
    Ok(bytes)
}
