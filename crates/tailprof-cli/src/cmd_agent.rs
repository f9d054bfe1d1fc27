//! `tailprof agent`: the continuous-profiling daemon (foreground). Parses options and
//! the config file, installs the signal handlers, runs `tailprof_agent::run_agent`,
//! prints the summary.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use tailprof_agent::AgentConfig;

use crate::signals;

/// Profile the whole machine continuously into the Parquet store.
///
/// Samples every CPU (cpu-clock, 49 Hz per CPU by default) with frame-pointer call
/// stacks, aggregates the samples per window (10 s by default) into counts per
/// (process, binary build-id, stack, event), and writes one Parquet file per window
/// under STORE/samples/host=H/date=YYYY-MM-DD/hour=HH/ (docs/STORE.md). Each binary is
/// symbolized once, by build-id, into STORE/symbols/, so upgraded or deleted binaries
/// still have names. Runs in the foreground until SIGTERM or SIGINT, then writes the
/// current window and exits; a SIGKILL loses at most the current window.
///
/// DuckDB, Spark, Trino read the store directly; `tailprof top` (with --folded, --pprof
/// and --flamegraph exports), `tailprof diff` and `tailprof items --store` query it. Needs root (or perf_event_paranoid <= 0) for
/// system-wide sampling. See dist/tailprof-agent.service for systemd.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof agent                                 # defaults: /var/lib/tailprof (root), 10 s windows, 49 Hz\n  \
    tailprof agent --config /etc/tailprof/agent.conf\n  \
    tailprof agent --store /tmp/store --window 5s --duration 30s\n  \
    tailprof agent --otlp http://127.0.0.1:4318    # also send every window to an OTLP receiver\n  \
    tailprof top --store /tmp/store --since 1h")]
pub struct AgentArgs {
    /// Config file of `key = value` lines (keys: store, window, frequency, period, event,
    /// stacks, host, retain_age, retain_size, compact, mmap_pages, push, otlp, slow_threshold, causes,
    /// slow_percentile, item_begin, item_end; see docs/STORE.md). Options given here
    /// override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Store directory [default: $TAILPROF_HOME, else /var/lib/tailprof as root, else $XDG_DATA_HOME/tailprof, else ~/.local/share/tailprof].
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,

    /// Aggregation window, e.g. 10s (1s to 1h).
    #[arg(long, value_name = "DURATION")]
    window: Option<String>,

    /// Samples per second per CPU.
    #[arg(short = 'F', long, value_name = "HZ")]
    frequency: Option<u64>,

    /// Fixed sampling period in events (nanoseconds for cpu-clock), instead of -F.
    #[arg(short = 'c', long, value_name = "N")]
    period: Option<u64>,

    /// Stop after this long (tests, benchmarks), e.g. 30s. Symbol tables still being
    /// written get at most a few seconds more; those left are counted and reported.
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,

    /// Host name used in the partition path.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,

    /// Push each window as pprof to a Pyroscope-compatible endpoint (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    push: Option<String>,

    /// Send each window as OpenTelemetry profiles (OTLP/HTTP protobuf) to an OTLP
    /// receiver, e.g. http://127.0.0.1:4318 (POSTs to URL/v1development/profiles unless
    /// the URL already ends with that path). Can be combined with --push.
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,

    /// Keep the explanation of every request slower than this (e.g. 50ms), in addition
    /// to those slower than their class's recent p99.
    #[arg(long, value_name = "DURATION")]
    slow_threshold: Option<String>,

    /// Keep requests slower than this percentile of their class's last 1000 (default 99;
    /// `off`: only --slow-threshold).
    #[arg(long, value_name = "P")]
    slow_percentile: Option<String>,

    /// Item begin uprobe, BINARY:SYMBOL (as in `record --item-begin`). On a Go binary,
    /// requests are followed by goroutine (R14), not by thread.
    #[arg(long, value_name = "PROBE", requires = "item_end")]
    item_begin: Option<String>,

    /// Item end uprobe, BINARY:SYMBOL.
    #[arg(long, value_name = "PROBE", requires = "item_begin")]
    item_end: Option<String>,

    /// Keep the causes of retained requests (who woke them, who ran while they waited
    /// for a CPU): records context switches and wakeups from the first marker on.
    #[arg(long)]
    causes: bool,

    /// Print the summary as JSON at exit.
    #[arg(long)]
    json: bool,
}

fn config_from(a: &AgentArgs) -> Result<AgentConfig, String> {
    let mut c = match &a.config {
        Some(p) => AgentConfig::load(p).map_err(|e| e.to_string())?,
        None => AgentConfig::default(),
    };
    let mut set = |k: &str, v: Option<String>| -> Result<(), String> {
        match v {
            Some(v) => c.set(k, &v).map_err(|e| format!("--{}: {e}", k.replace('_', "-"))),
            None => Ok(()),
        }
    };
    set("store", a.store.as_ref().map(|p| p.display().to_string()))?;
    set("window", a.window.clone())?;
    set("frequency", a.frequency.map(|v| v.to_string()))?;
    set("period", a.period.map(|v| v.to_string()))?;
    set("duration", a.duration.clone())?;
    set("host", a.host.clone())?;
    set("push", a.push.clone())?;
    set("otlp", a.otlp.clone())?;
    set("slow_threshold", a.slow_threshold.clone())?;
    set("slow_percentile", a.slow_percentile.clone())?;
    set("item_begin", a.item_begin.clone())?;
    set("item_end", a.item_end.clone())?;
    set("causes", a.causes.then(|| "true".to_owned()))?;
    Ok(c)
}

pub fn run(a: AgentArgs) -> Result<ExitCode> {
    let cfg = config_from(&a).map_err(anyhow::Error::msg)?;
    signals::install()?;
    eprintln!(
        "tailprof: agent: store {}, host {}, window {} s, {}; stop with SIGTERM/Ctrl-C",
        cfg.store.display(),
        cfg.host,
        cfg.window_us as f64 / 1e6,
        match cfg.period {
            Some(p) => format!("period {p}"),
            None => format!("{} Hz per CPU", cfg.frequency),
        }
    );
    // Setup (opening every CPU, describing running processes) takes a moment: say when
    // sampling runs, and count --duration from there.
    let mut started = false;
    let duration = cfg.duration_us;
    let s = tailprof_agent::run_agent(&cfg, &signals::STOP, &mut |_| {
        if !std::mem::replace(&mut started, true) {
            eprintln!("tailprof: agent: recording");
            if let Some(d) = duration {
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_micros(d as u64));
                    signals::STOP.store(true, Ordering::SeqCst);
                });
            }
        }
    })?;
    if a.json {
        println!("{}", tailprof_present::json::document(&s)?);
    } else {
        let w = &s.writer;
        eprintln!(
            "tailprof: agent: {} samples in {} windows ({} written, {} dropped, {} bytes), {} binaries symbolized ({} failed), {} requests retained of {}",
            s.aggregation.samples,
            s.aggregation.windows,
            w.windows_written,
            w.windows_dropped,
            w.bytes_written,
            w.symbol_tables,
            w.symbol_tables_failed,
            s.requests.retained,
            s.requests.requests
        );
        if s.aggregation.lost_samples + s.lost_records + s.aggregation.dropped_rows > 0 {
            eprintln!(
                "tailprof: warning: lost {} samples and {} records of any kind (ring full: samples and side-band) in the kernel, {} samples dropped (window table full)",
                s.aggregation.lost_samples, s.aggregation.losses.lost_records, s.aggregation.dropped_rows
            );
        }
        let l = &s.aggregation.losses;
        if l.lost_markers + l.malformed_records + l.dropped_item_classes > 0 {
            eprintln!(
                "tailprof: warning: {} item markers lost or rejected, {} malformed records skipped, {} item-class labels dropped",
                l.lost_markers, l.malformed_records, l.dropped_item_classes
            );
        }
        let a = &s.aggregation;
        if a.processes_untracked + a.mappings_dropped + a.comms_dropped + a.mappings_evicted + a.processes_evicted + a.binaries_dropped > 0
        {
            eprintln!(
                "tailprof: warning: bounds reached: {} mappings and {} processes evicted (least recently used), {} binaries not registered, {} command names dropped (their frames show as unknown)",
                a.mappings_evicted + a.mappings_dropped, a.processes_evicted + a.processes_untracked, a.binaries_dropped, a.comms_dropped
            );
        }
        if w.symbol_tables_dropped + w.symbol_tables_dropped_at_stop > 0 {
            eprintln!(
                "tailprof: warning: {} binaries not symbolized under pressure (retried when sampled again), {} dropped at the stop",
                w.symbol_tables_dropped, w.symbol_tables_dropped_at_stop
            );
        }
        if !s.writer_finished {
            eprintln!("tailprof: warning: the store writer did not finish in time; windows it had not written are lost");
        }
        if w.push_failures + w.otlp_failures > 0 {
            eprintln!(
                "tailprof: warning: {} pprof pushes and {} OTLP sends failed ({} and {} delivered)",
                w.push_failures, w.otlp_failures, w.pushes, w.otlp_pushes
            );
        }
        let r = &s.requests;
        let req_drops = r.unmatched_ends
            + r.evicted_open
            + r.abandoned_open
            + r.slow_not_retained
            + r.class_labels_dropped
            + r.requests_in_other_class
            + r.kept_samples_evicted;
        if req_drops > 0 {
            eprintln!(
                "tailprof: warning: requests: {} ends unmatched, {} open evicted at the bound, {} abandoned (thread exited), \
                 {} slow not retained (window full), {} class names dropped, {} in class [other], {} kept samples evicted early",
                r.unmatched_ends,
                r.evicted_open,
                r.abandoned_open,
                r.slow_not_retained,
                r.class_labels_dropped,
                r.requests_in_other_class,
                r.kept_samples_evicted
            );
        }
        let switch_drops = r.threads_untracked + r.slices_dropped + r.switch_unknown;
        if switch_drops > 0 {
            eprintln!(
                "tailprof: warning: switch markers: {} threads not followed (bound), {} current intervals not kept (bound), {} switches to a request not open",
                r.threads_untracked, r.slices_dropped, r.switch_unknown
            );
        }
        let cause_drops = r.kept_switches_evicted + r.kept_wakeups_evicted + r.causes_cut + r.cause_items_forgotten;
        if cause_drops > 0 {
            eprintln!(
                "tailprof: warning: causes: {} context switches and {} wakeups evicted early, {} requests' causes cut at the visit bound, {} wakers' classes or preempters' requests no longer known",
                r.kept_switches_evicted, r.kept_wakeups_evicted, r.causes_cut, r.cause_items_forgotten
            );
        }
        if r.go_off_cpu_evicted + r.go_off_cpu_untracked > 0 {
            eprintln!(
                "tailprof: warning: Go off-CPU: {} goroutine off-CPU intervals evicted early, {} switch-outs not followed (bound): those requests' off-CPU time in part",
                r.go_off_cpu_evicted, r.go_off_cpu_untracked
            );
        }
        if let Some(e) = &w.last_window_error {
            eprintln!("tailprof: warning: {} windows dropped; last: {e}", w.windows_dropped);
        }
        if let Some(e) = &w.last_error {
            eprintln!("tailprof: warning: last write error: {e}");
        }
    }
    // SIGTERM/SIGINT (and --duration) are a clean stop; SIGHUP is not (issue 19, finding
    // 1: a hang-up must make `Restart=on-failure` restart the agent).
    if signals::SIGNAL.load(Ordering::SeqCst) == libc::SIGHUP {
        eprintln!("tailprof: agent: stopped by SIGHUP (not a clean stop; stop with SIGTERM or Ctrl-C): exit status 129");
        return Ok(ExitCode::from(129));
    }
    Ok(ExitCode::SUCCESS)
}
