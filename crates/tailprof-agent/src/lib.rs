//! The continuous-profiling agent (`tailprof agent`): system-wide sampling with call
//! stacks, aggregated per window in the recorder's drain loop (DCPI-style, no per-sample
//! storage), written to the Parquet store (`tailprof-store`, `docs/STORE.md`).
//!
//! ```text
//!  Recorder (collect, Target::SystemWide, fp callchains)
//!     │ records, in time order, once per round
//!     ▼
//!  Aggregator (RecordOutput) ── per window: (pid, comm, event, [(build-id, offset)]) → count
//!     │ window table, new binaries (opened file), retained requests, histograms
//!     ▼  mpsc channel
//!  writer thread ── samples/latency/items Parquet files (atomic), symbol table per build-id,
//!                   compaction, retention, push (pprof, OTLP)
//! ```
//!
//! Design constraints: the drain loop never blocks on disk or symbolization; a window
//! is handed over whole; a SIGKILL loses at most the current window (files appear
//! atomically); a full disk drops and counts windows. Libraries never print: the
//! caller gets an [`AgentSummary`].

pub mod aggregate;
pub mod config;
pub mod jit;
pub mod names;
pub mod otlp;
pub mod push;
pub mod symtab;
pub mod tail;
pub mod writer;

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};

use serde::Serialize;
use tailprof_collect::attr::{ClockChoice, SamplingConfig};
use tailprof_collect::event::EventSpec;
use tailprof_collect::session::{ItemOptions, Progress, RecordOptions, Recorder, StackOptions, Target};

pub use config::AgentConfig;
pub use writer::WriterStats;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error("config: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] tailprof_store::StoreError),
    #[error(transparent)]
    Record(#[from] tailprof_collect::session::RecordError),
    #[error(transparent)]
    Event(#[from] tailprof_collect::event::EventError),
    #[error(transparent)]
    Uprobe(#[from] tailprof_collect::items::uprobe::UprobeError),
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentSummary {
    pub store: String,
    pub host: String,
    pub duration_ns: u64,
    pub aggregation: aggregate::AggStats,
    pub writer: WriterStats,
    pub requests: tail::TailStats,
    pub stale_temp_files_removed: u64,
    /// Kernel-side losses reported by the recorder.
    pub lost_records: u64,
    pub throttled: u64,
    /// The writer thread finished within [`writer::STOP_WITHIN`] + [`SHUTDOWN_GRACE`];
    /// `false`: it was left behind (windows it had not written are lost).
    pub writer_finished: bool,
    /// Paths the recorder's build-id cache evicted (least recently used first).
    pub build_id_paths_evicted: u64,
}

/// Runs the agent until `stop` is set (or `cfg.duration_us` passes: the caller sets
/// `stop`), then flushes the current window and waits for the writer, a bounded time
/// ([`writer::STOP_WITHIN`] + [`SHUTDOWN_GRACE`]: symbol tables not done by then are
/// counted in `WriterStats::symbol_tables_dropped_at_stop`).
pub fn run_agent(cfg: &AgentConfig, stop: &AtomicBool, on_window: &mut dyn FnMut(&Progress)) -> Result<AgentSummary, AgentError> {
    cfg.validate()?;
    let (store, removed) = tailprof_store::Store::open(&cfg.store)?;
    let spec = EventSpec::parse(&cfg.event)?;
    let sampling = SamplingConfig {
        period: cfg.period,
        freq: if cfg.period.is_some() { None } else { Some(cfg.frequency) },
        clock: ClockChoice::Monotonic,
        inherit: true,
        disabled: true,
        sideband: true,
        ..SamplingConfig::default()
    };
    let opts = RecordOptions {
        events: vec![spec],
        sampling,
        mmap_pages: cfg.mmap_pages,
        target: Target::SystemWide,
        cmdline: vec!["tailprof".into(), "agent".into()],
    };
    let probes = match (&cfg.item_begin, &cfg.item_end) {
        (Some(b), Some(e)) => Some(tailprof_collect::items::uprobe::ItemProbes {
            begin: tailprof_collect::items::uprobe::ProbeSpec::parse(b)?,
            end: tailprof_collect::items::uprobe::ProbeSpec::parse(e)?,
            id_reg: None,
            class: None,
        }),
        _ => None,
    };
    let items = ItemOptions {
        probes,
        // Causes of retained requests: switches and wakeups from the first marker on.
        off_cpu_on_markers: cfg.causes,
        ..ItemOptions::default()
    };
    let stacks = StackOptions {
        call_graph: cfg.stacks.then_some(tailprof_collect::session::CallGraph::Fp),
        off_cpu: false,
        no_wakeups: !cfg.causes,
        full_waker_stacks: false,
    };
    let mut recorder = Recorder::with_stacks(opts, items, stacks)?;
    let events: Vec<String> = recorder.header().events.iter().map(|e| e.name.clone()).collect();

    let (tx, rx) = mpsc::channel();
    let wstats = Arc::new(Mutex::new(WriterStats::default()));
    let dropped = writer::DroppedBinaries::default();
    let wcfg = writer::WriterConfig {
        store: store.clone(),
        retain: tailprof_store::RetainPolicy { max_age_us: cfg.retain_age_us, max_bytes: cfg.retain_bytes },
        compact: cfg.compact,
        push: cfg.push.clone(),
        otlp: cfg.otlp.clone(),
        stop_within: writer::STOP_WITHIN,
        symbolizer_burst_s: writer::SYMBOLIZER_BURST_S,
        dropped: dropped.clone(),
    };
    let ws = wstats.clone();
    let handle = std::thread::Builder::new()
        .name("tailprof-writer".into())
        .spawn(move || writer::run_writer(wcfg, rx, ws))
        .map_err(|e| tailprof_store::StoreError::Options(format!("cannot start the writer thread: {e}")))?;

    let mut tail = tail::TailRetainer::new(cfg.slow_threshold_ns, cfg.slow_percentile);
    // Probes on a Go binary: requests by goroutine (the register the samples carry).
    tail.set_goroutine_key(tailprof_analyze::items::join::goroutine_key(&recorder.header(), 0).map(|k| k.1));
    let tail = Some(tail);
    let mut agg = aggregate::Aggregator::new(events, cfg.window_us, cfg.host.clone(), tx, tail);
    agg.set_dropped_binaries(dropped);
    agg.register_kernel();
    let res = recorder.run_to(&mut agg, stop, on_window);
    agg.maybe_flush(true);
    let agg_stats = agg.stats;
    let tail_stats = agg.tail_stats();
    drop(agg); // closes the channel: the writer finishes the queued jobs and returns
    let writer_finished = finish_writer(handle);
    let summary = res?;
    let writer = wstats.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(AgentSummary {
        store: cfg.store.display().to_string(),
        host: cfg.host.clone(),
        duration_ns: summary.duration_ns,
        aggregation: agg_stats,
        writer,
        requests: tail_stats,
        stale_temp_files_removed: removed,
        lost_records: summary.lost_records,
        throttled: summary.throttled,
        writer_finished,
        build_id_paths_evicted: summary.build_id_paths_evicted,
    })
}

/// How long the agent waits for the writer thread once the recording stopped, beyond the
/// symbolizer's own limit ([`writer::STOP_WITHIN`]: symbol tables not done by then are
/// dropped and counted): the last window and pushes get this much more, then the agent
/// returns without the writer (`writer_finished: false`).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits for the writer thread at most [`writer::STOP_WITHIN`] + [`SHUTDOWN_GRACE`].
/// Whether it finished; if not (e.g. a push stuck on the network), it is left behind.
fn finish_writer(handle: std::thread::JoinHandle<()>) -> bool {
    let until = std::time::Instant::now() + writer::STOP_WITHIN + SHUTDOWN_GRACE;
    while !handle.is_finished() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if !handle.is_finished() {
        return false;
    }
    let _ = handle.join();
    true
}
