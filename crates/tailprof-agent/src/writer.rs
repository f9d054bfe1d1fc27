//! The writer thread: everything slow happens here, off the drain loop. It writes each
//! window's files, symbolizes each new build-id once, applies retention and compaction,
//! and pushes windows to a remote endpoint. A failed write (full disk, I/O error) drops
//! that window, counts it, and is reported in the next file written; nothing stops the
//! agent. Symbolization runs on its own thread within a CPU budget ([`SYMBOLIZER_CPU_SHARE`]
//! of one core after a startup burst); binaries beyond it wait and are counted.

use std::fs::File;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tailprof_store::schema::{ItemRow, LatencyRow, SampleRow, WindowMeta, SCHEMA_VERSION};
use tailprof_store::{Store, Table};

use crate::symtab::{Stopped, SymtabError};

pub struct WindowBatch {
    pub host: String,
    pub start_us: i64,
    pub end_us: i64,
    pub samples: u64,
    pub lost_samples: u64,
    /// The window's other losses by kind.
    pub losses: tailprof_store::schema::Losses,
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
    /// A JIT symbol table (a process generation's names, [`crate::jit`]): small, written
    /// at once, before the window that uses it.
    JitSymbols(crate::jit::JitTable),
}

/// What the writer did, shared with the agent's front end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriterStats {
    pub windows_written: u64,
    pub windows_dropped: u64,
    pub bytes_written: u64,
    pub symbol_tables: u64,
    pub symbol_tables_failed: u64,
    /// Symbol tables that waited for the symbolizer's CPU budget (done later, in the
    /// run or at its end).
    pub symbol_tables_deferred: u64,
    /// Binaries never symbolized because the deferred queue was full
    /// ([`MAX_DEFERRED_SYMBOL_JOBS`]); their frames stay unsymbolized in the store (a
    /// binary dropped is queued again when it is sampled again).
    pub symbol_tables_dropped: u64,
    /// Binaries not symbolized because the agent stopped: still queued, or stopped in the
    /// middle, when [`WriterConfig::stop_within`] had passed (no file is left).
    pub symbol_tables_dropped_at_stop: u64,
    pub symbols: u64,
    /// Functions left out of written tables because the file was malformed there
    /// (`symtab::TableWritten::skipped`).
    pub symbols_skipped: u64,
    /// CPU time the symbolizer thread spent on tables (reading, demangling, writing), ms.
    pub symbolizer_cpu_ms: u64,
    pub items_retained: u64,
    pub retention_removed: u64,
    pub compacted_files: u64,
    pub pushes: u64,
    pub push_failures: u64,
    /// Windows sent to the `--otlp` endpoint, and sends that failed (see `last_error`).
    pub otlp_pushes: u64,
    pub otlp_failures: u64,
    pub last_error: Option<String>,
    /// The last window write error (e.g. `disk full, window dropped: …`).
    pub last_window_error: Option<String>,
}

pub struct WriterConfig {
    pub store: Store,
    /// How long the symbolizer may go on once the agent stops ([`STOP_WITHIN`] by
    /// default): what is queued or running after that is dropped and counted.
    pub stop_within: std::time::Duration,
    /// Binaries the symbolizer dropped (queue full): the aggregator sends each again when
    /// it is sampled again.
    pub dropped: DroppedBinaries,
    /// CPU seconds the symbolizer may spend at startup beyond its share
    /// ([`SYMBOLIZER_BURST_S`] in the agent).
    pub symbolizer_burst_s: f64,
    pub retain: tailprof_store::RetainPolicy,
    pub compact: bool,
    pub push: Option<String>,
    pub otlp: Option<String>,
}

pub fn run_writer(cfg: WriterConfig, jobs: Receiver<Job>, stats: Arc<Mutex<WriterStats>>) {
    let mut dropped_since_last = 0u64;
    let mut last_maintenance_hour = i64::MIN;
    // Build-ids named by this hour's windows: their symbol tables are marked used at the
    // hour's maintenance, so retention keeps them (bounded; more are marked next hour).
    let mut used: std::collections::HashSet<String> = std::collections::HashSet::new();
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
    let (stop_within, dropped, burst) = (cfg.stop_within, cfg.dropped.clone(), cfg.symbolizer_burst_s);
    // When the agent stopped: the symbolizer sees it even in the middle of a job.
    let stopped: Arc<std::sync::OnceLock<std::time::Instant>> = Arc::default();
    let sym_stopped = stopped.clone();
    let sym_thread = std::thread::Builder::new()
        .name("tailprof-symbols".into())
        .spawn(move || run_symbolizer(sym_store, sym_rx, sym_stats, Limits { stop_within, burst, stopped: sym_stopped }, dropped))
        .ok();
    for job in jobs {
        match job {
            Job::Symbols(j) => {
                let _ = sym_tx.send(j);
            }
            Job::JitSymbols(t) => {
                let res = write_jit_table(&cfg.store, t);
                let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                match res {
                    Ok(n) => {
                        s.symbol_tables += 1;
                        s.symbols += n;
                    }
                    Err(e) => {
                        s.symbol_tables_failed += 1;
                        s.last_error = Some(e.to_string());
                    }
                }
            }
            Job::Window(w) => {
                let meta = WindowMeta {
                    schema_version: SCHEMA_VERSION,
                    host: w.host.clone(),
                    window_start_us: w.start_us,
                    window_end_us: w.end_us,
                    samples: w.samples,
                    lost_samples: w.lost_samples,
                    losses: w.losses,
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
                if let Some(url) = cfg.push.as_ref().filter(|_| !w.rows.is_empty()) {
                    // an empty window sends nothing and is not counted as pushed
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
                crate::otlp::send_counted(cfg.otlp.as_deref(), &cfg.store, &w, &stats);
                // Once per hour: compact the finished hours, then retention.
                for f in w.rows.iter().flat_map(|r| &r.frames) {
                    if used.len() >= MAX_USED_BUILD_IDS {
                        break;
                    }
                    if !f.build_id.is_empty() && !used.contains(&f.build_id) {
                        used.insert(f.build_id.clone());
                    }
                }
                let hour = w.end_us.div_euclid(3_600_000_000);
                if hour != last_maintenance_hour {
                    last_maintenance_hour = hour;
                    tailprof_store::touch_symbols(&cfg.store, used.iter().map(String::as_str));
                    used.clear();
                    if cfg.compact {
                        match tailprof_store::compact(&cfg.store, &w.host, hour * 3_600_000_000) {
                            Ok(c) => stats.lock().unwrap_or_else(|p| p.into_inner()).compacted_files += c.files_merged,
                            Err(e) => note_err(&stats, e.to_string()),
                        }
                    }
                }
                if cfg.retain.max_age_us.is_some() || cfg.retain.max_bytes.is_some() {
                    match tailprof_store::retain(&cfg.store, &cfg.retain, tailprof_store::time::now_us()) {
                        Ok(r) => stats.lock().unwrap_or_else(|p| p.into_inner()).retention_removed += r.removed_by_age + r.removed_by_size,
                        Err(e) => note_err(&stats, e.to_string()),
                    }
                }
            }
        }
    }
    let _ = stopped.set(std::time::Instant::now());
    drop(sym_tx);
    if let Some(t) = sym_thread {
        let _ = t.join();
    }
}

/// Why a JIT symbol table was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JitTableError {
    /// The generated id is not a valid store build-id (a bug, not the target's doing).
    #[error("bad JIT build-id {0}")]
    BadId(String),
    /// The store refused the directory or the file.
    #[error("JIT symbols ({id}): {source}")]
    Store {
        id: String,
        #[source]
        source: tailprof_store::StoreError,
    },
}

/// Writes a JIT symbol table (never replacing one: a generation's table is written once).
/// Returns the functions written.
fn write_jit_table(store: &Store, t: crate::jit::JitTable) -> Result<u64, JitTableError> {
    let dest = store.symbols_file(&t.build_id).ok_or_else(|| JitTableError::BadId(t.build_id.clone()))?;
    if dest.exists() {
        return Ok(0);
    }
    let id = t.build_id.clone();
    store.ensure_dir(&store.symbols_dir()).map_err(|source| JitTableError::Store { id: id.clone(), source })?;
    let (_, rows) =
        tailprof_store::write::write_symbol_table(&dest, &t.build_id, &t.path, t.funcs.into_iter().map(Ok::<_, std::convert::Infallible>))
            .map_err(|source| JitTableError::Store { id, source })?;
    Ok(rows)
}

/// The symbolizer's steady-state CPU budget, as a share of one core (the agent's whole
/// budget is 1%; the drain loop needs the rest).
pub const SYMBOLIZER_CPU_SHARE: f64 = 0.004;
/// CPU seconds the symbolizer may spend in its first [`SYMBOLIZER_STARTUP_S`] seconds
/// beyond the budget: the binaries already running at start are symbolized at once.
pub const SYMBOLIZER_BURST_S: f64 = 10.0;
/// The startup phase (one default window); afterwards unused burst is forfeited and
/// saved-up credit is capped at [`SYMBOLIZER_CREDIT_CAP_S`].
pub const SYMBOLIZER_STARTUP_S: f64 = 10.0;
pub const SYMBOLIZER_CREDIT_CAP_S: f64 = 0.5;

/// The symbolizer's CPU token bucket (seconds of CPU it may still spend).
struct Budget {
    t0: std::time::Instant,
    last_wall: f64,
    last_cpu: f64,
    tokens: f64,
}
impl Budget {
    fn new(burst_s: f64) -> Self {
        Budget { t0: std::time::Instant::now(), last_wall: 0.0, last_cpu: thread_cpu_s(), tokens: burst_s }
    }
    /// The credit now: refilled by wall time, spent by this thread's CPU.
    fn credit(&mut self) -> f64 {
        let wall = self.t0.elapsed().as_secs_f64();
        let cpu = thread_cpu_s();
        self.tokens += SYMBOLIZER_CPU_SHARE * (wall - self.last_wall) - (cpu - self.last_cpu).max(0.0);
        self.last_wall = wall;
        self.last_cpu = cpu;
        if wall > SYMBOLIZER_STARTUP_S {
            self.tokens = self.tokens.min(SYMBOLIZER_CREDIT_CAP_S);
        }
        self.tokens
    }
}
/// Build-ids of binaries the symbolizer dropped under pressure, shared with the
/// aggregator, which queues a binary again the next time a new mapping of it is sampled
/// (issue 19, finding 8: `/usr/bin/dash` dropped among an attacker's 118,822 binaries was
/// never retried). At most [`MAX_DROPPED_REMEMBERED`]; beyond, the oldest are forgotten.
#[derive(Debug, Clone, Default)]
pub struct DroppedBinaries(Arc<(std::sync::atomic::AtomicUsize, Mutex<std::collections::VecDeque<String>>)>);

/// Dropped build-ids remembered at most for a retry.
pub const MAX_DROPPED_REMEMBERED: usize = 4096;

impl DroppedBinaries {
    /// Remembers that `build_id` was dropped.
    pub fn note(&self, build_id: &str) {
        let mut q = self.0 .1.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= MAX_DROPPED_REMEMBERED {
            q.pop_front();
        }
        q.push_back(build_id.to_string());
        self.0 .0.store(q.len(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `build_id` was dropped (and forgets it: the caller sends it again).
    pub fn take(&self, build_id: &str) -> bool {
        if self.0 .0.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return false;
        }
        let mut q = self.0 .1.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = q.iter().position(|b| b == build_id) else { return false };
        q.remove(i);
        self.0 .0.store(q.len(), std::sync::atomic::Ordering::Relaxed);
        true
    }
}

/// How long the symbolizer goes on after the agent stops, by default: the agent's stop
/// completes within about this (plus the last window's write), whatever is queued.
pub const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// Binaries waiting for the budget at most (each holds an open file); beyond, dropped
/// and counted.
pub const MAX_DEFERRED_SYMBOL_JOBS: usize = 512;

/// This thread's CPU time (user+sys), in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Waiting jobs whose file belongs to one user at most (a quarter of the queue): one
/// user's flood of binaries cannot keep another's (root's `/usr/bin/dash`) out (issue 19,
/// fairness).
pub const MAX_DEFERRED_PER_OWNER: usize = MAX_DEFERRED_SYMBOL_JOBS / 4;

/// A waiting job, smallest file first (cheap tables first: most binaries named per CPU
/// second).
struct Pending {
    size: u64,
    seq: u64,
    /// The file's owner (uid).
    owner: u32,
    job: SymbolJob,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.size, self.seq) == (o.size, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: reverse for smallest first.
        (o.size, o.seq).cmp(&(self.size, self.seq))
    }
}

/// Symbolizes each new build-id once, within a CPU budget ([`Budget`]): a burst of
/// [`SYMBOLIZER_BURST_S`] CPU seconds at startup, then [`SYMBOLIZER_CPU_SHARE`] of wall time.
/// Jobs beyond the budget wait (smallest file first); the budget is also checked *during*
/// a job, every [`crate::symtab::PACE_EVERY`] symbols (the thread sleeps until it has
/// credit again), so one huge table cannot take a core. When the agent stops, the waiting
/// jobs are done for at most `stop_within`; then the rest, and a job still running, are
/// dropped and counted (issue 19, finding 5).
/// The symbolizer's time limits.
struct Limits {
    /// How long it goes on once the agent stopped.
    stop_within: std::time::Duration,
    /// CPU seconds of its startup burst.
    burst: f64,
    /// Set by the writer when the agent stops.
    stopped: Arc<std::sync::OnceLock<std::time::Instant>>,
}

impl Limits {
    /// The instant after which nothing more is symbolized (None while the agent runs).
    fn deadline(&self) -> Option<std::time::Instant> {
        self.stopped.get().map(|t| *t + self.stop_within)
    }
}

fn run_symbolizer(store: Store, jobs: Receiver<SymbolJob>, stats: Arc<Mutex<WriterStats>>, limits: Limits, dropped: DroppedBinaries) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut seen = std::collections::HashSet::new();
    let mut queue = std::collections::BinaryHeap::new();
    let mut seq = 0u64;
    let mut budget = Budget::new(limits.burst);
    let mut closed: Option<std::time::Instant> = None;
    // queued jobs by file owner
    let mut per_owner: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    loop {
        let credit = budget.credit();
        let next = if queue.is_empty() {
            if closed.is_some() {
                break;
            }
            jobs.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else if closed.is_some() {
            Err(RecvTimeoutError::Timeout)
        } else if credit > 0.0 {
            // take the jobs already sent before choosing the smallest
            jobs.try_recv().map_err(|e| match e {
                std::sync::mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                std::sync::mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        } else {
            let wait = (-credit / SYMBOLIZER_CPU_SHARE).clamp(0.01, 1.0);
            jobs.recv_timeout(std::time::Duration::from_secs_f64(wait))
        };
        match next {
            Ok(j) => {
                if seen.len() >= MAX_SEEN_BUILD_IDS {
                    seen.clear(); // a build-id seen again is found by its file (dest.exists())
                }
                if !seen.insert(j.build_id.clone()) {
                    continue;
                }
                let Some(dest) = store.symbols_file(&j.build_id) else { continue };
                if dest.exists() {
                    tailprof_store::touch_symbols(&store, [j.build_id.as_str()]); // in use again
                    continue; // a previous run (or another host on a shared store) did it
                }
                let (size, owner) = j.file.metadata().map_or((u64::MAX, u32::MAX), |m| {
                    use std::os::unix::fs::MetadataExt;
                    (m.len(), m.uid())
                });
                let mine = per_owner.get(&owner).copied().unwrap_or(0);
                if queue.len() >= MAX_DEFERRED_SYMBOL_JOBS || mine >= MAX_DEFERRED_PER_OWNER {
                    seen.remove(&j.build_id); // taken again when it is sampled again
                    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
                    s.symbol_tables_dropped += 1;
                    s.last_error = Some(format!(
                        "symbols of {} dropped: {} binaries (of its owner: {mine}) already wait for the symbolizer's CPU budget",
                        j.path,
                        queue.len()
                    ));
                    drop(s);
                    dropped.note(&j.build_id);
                    continue;
                }
                *per_owner.entry(owner).or_default() += 1;
                if credit <= 0.0 {
                    stats.lock().unwrap_or_else(|p| p.into_inner()).symbol_tables_deferred += 1;
                }
                seq += 1;
                queue.push(Pending { size, seq, owner, job: j });
                continue; // take every job already sent before choosing the smallest
            }
            Err(RecvTimeoutError::Disconnected) => closed = Some(std::time::Instant::now()),
            Err(RecvTimeoutError::Timeout) => {}
        }
        let deadline = limits.deadline().or(closed.map(|t| t + limits.stop_within));
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            let n = queue.len() as u64;
            queue.clear();
            per_owner.clear();
            stats.lock().unwrap_or_else(|p| p.into_inner()).symbol_tables_dropped_at_stop += n;
            break;
        }
        if closed.is_some() || budget.credit() > 0.0 {
            if let Some(p) = queue.pop() {
                if let Some(n) = per_owner.get_mut(&p.owner) {
                    *n -= 1;
                    if *n == 0 {
                        per_owner.remove(&p.owner);
                    }
                }
                symbolize_one(&store, p.job, &stats, &mut budget, &limits);
            }
        }
    }
}

/// Build-ids whose symbol tables are marked used per hour at most.
pub const MAX_USED_BUILD_IDS: usize = 65_536;

/// Build-ids the symbolizer remembers having taken at most (then it starts over; the
/// store's files say which are done).
pub const MAX_SEEN_BUILD_IDS: usize = 65_536;

/// Error text of a job stopped because the agent stops.
const STOPPED: &str = "the agent stopped";

fn symbolize_one(store: &Store, j: SymbolJob, stats: &Arc<Mutex<WriterStats>>, budget: &mut Budget, limits: &Limits) {
    let Some(dest) = store.symbols_file(&j.build_id) else { return };
    let cpu0 = thread_cpu_s();
    // During the job: past the stop deadline, stop; out of credit (and not stopping),
    // sleep until the budget has refilled.
    // The agent may stop while this job runs (even while it sleeps for credit): checked
    // at every step and every sleep slice.
    let mut pace = || -> Result<(), Stopped> {
        loop {
            match limits.deadline() {
                Some(d) if std::time::Instant::now() >= d => return Err(Stopped(STOPPED.into())),
                Some(_) => return Ok(()), // stopping: finish quickly, no sleeping for credit
                None => {}
            }
            let c = budget.credit();
            if c > 0.0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_secs_f64((-c / SYMBOLIZER_CPU_SHARE).clamp(0.01, 0.25)));
        }
    };
    let res = store.ensure_dir(&store.symbols_dir()).map_err(SymtabError::from).and_then(|()| {
        if j.path == crate::aggregate::KERNEL_PATH {
            crate::symtab::write_kallsyms_table(j.file, &j.build_id, &j.path, &dest)
        } else {
            // streamed from the file (read with pread, never mapped), closed right after
            let r = crate::symtab::write_elf_table_paced(&j.file, &j.build_id, &j.path, &dest, &mut pace);
            drop(j.file);
            r
        }
    });
    let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
    s.symbolizer_cpu_ms += ((thread_cpu_s() - cpu0).max(0.0) * 1000.0) as u64;
    match res {
        Ok(t) => {
            s.symbol_tables += 1;
            s.symbols += t.functions;
            s.symbols_skipped += t.skipped;
        }
        Err(SymtabError::Stopped(_)) => s.symbol_tables_dropped_at_stop += 1,
        Err(e) => {
            s.symbol_tables_failed += 1;
            s.last_error = Some(format!("symbols of {} ({}): {e}", j.path, j.build_id));
        }
    }
    drop(s);
    // A large library's index and last row group are freed now; give the memory back
    // instead of keeping it in this thread's malloc arena (resident size).
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn write_window(store: &Store, meta: &WindowMeta, w: &WindowBatch) -> tailprof_store::Result<u64> {
    let mut bytes = 0;
    if !w.rows.is_empty() || w.lost_samples > 0 || w.losses.any() || meta.dropped_windows > 0 {
        store.ensure_dir(&store.partition_dir(Table::Samples, &w.host, w.start_us))?;
        bytes += tailprof_store::write_samples(&store.window_file(Table::Samples, &w.host, w.start_us, w.end_us), meta, &w.rows)?;
    }
    if !w.latency.is_empty() {
        store.ensure_dir(&store.partition_dir(Table::Latency, &w.host, w.start_us))?;
        bytes += tailprof_store::write_latency(&store.window_file(Table::Latency, &w.host, w.start_us, w.end_us), meta, &w.latency)?;
    }
    if !w.items.is_empty() {
        store.ensure_dir(&store.partition_dir(Table::Items, &w.host, w.start_us))?;
        bytes += tailprof_store::write_items(&store.window_file(Table::Items, &w.host, w.start_us, w.end_us), meta, &w.items)?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(dir: &std::path::Path, name: &str, len: usize) -> Pending {
        let p = dir.join(name);
        std::fs::write(&p, vec![0u8; len]).unwrap();
        let file = File::open(&p).unwrap();
        let size = file.metadata().unwrap().len();
        Pending { size, seq: len as u64, owner: 0, job: SymbolJob { build_id: name.into(), path: name.into(), file } }
    }

    #[test]
    fn deferred_jobs_smallest_file_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = std::collections::BinaryHeap::new();
        q.push(job(dir.path(), "big", 3000));
        q.push(job(dir.path(), "small", 10));
        q.push(job(dir.path(), "mid", 500));
        let order: Vec<String> = std::iter::from_fn(|| q.pop()).map(|p| p.job.build_id).collect();
        assert_eq!(order, ["small", "mid", "big"]);
    }

    #[test]
    fn budget_is_spent_by_cpu() {
        let mut b = Budget::new(SYMBOLIZER_BURST_S);
        let c0 = b.credit();
        assert!(c0 <= SYMBOLIZER_BURST_S + 0.01);
        // burn CPU in this thread: the credit goes down by at least what was spent
        let cpu0 = thread_cpu_s();
        let mut x = 1u64;
        while thread_cpu_s() - cpu0 < 0.05 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spent = thread_cpu_s() - cpu0;
        let c1 = b.credit();
        // refill is SYMBOLIZER_CPU_SHARE of wall time, which is far below the CPU spent
        assert!(c1 < c0, "credit {c0} -> {c1} after {spent} s of CPU");
    }
}
