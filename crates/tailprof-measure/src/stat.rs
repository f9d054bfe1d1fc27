//! `tailprof stat`: count events over a command's whole run (no sampling, no trace), with
//! optional periodic reads (`--interval`, the periodic-counting baseline of `tailprof
//! bandwidth`). Returns a [`StatReport`] that `tailprof-present` renders.

use tailprof_analyze::measured::CounterSummary;
use tailprof_collect::caps::Capabilities;
use tailprof_collect::counting::{count_command, count_command_interval, hardware_counters, CounterInfo, IntervalTick};

pub use tailprof_analyze::measured::{StatEvent, StatInterval, StatReport};
use tailprof_collect::event::EventSpec;

use crate::{MeasureError, Result};

/// The events counted when none are named: software events always, the four classic
/// hardware events when the machine has a core PMU.
pub fn default_events(caps: &Capabilities) -> Vec<String> {
    let mut v: Vec<String> = ["task-clock", "context-switches", "cpu-migrations", "page-faults"].map(String::from).to_vec();
    if caps.has_cpu_pmu {
        v.extend(["cycles", "instructions", "branches", "branch-misses"].map(String::from));
    }
    v
}

/// What to count.
#[derive(Debug, Clone)]
pub struct StatConfig {
    /// Event names; empty = [`default_events`].
    pub events: Vec<String>,
    pub command: Vec<String>,
    /// Read the counters every this many ns while the command runs.
    pub interval_ns: Option<u64>,
}

/// One `--interval` read as a report row.
fn interval_row(t: &IntervalTick) -> StatInterval {
    {
        StatInterval {
            t_ns: t.t_ns,
            len_ns: t.len_ns,
            values: t.deltas.iter().map(|d| d.0).collect(),
            enabled_ns: t.deltas.iter().map(|d| d.1).collect(),
            running_ns: t.deltas.iter().map(|d| d.2).collect(),
        }
    }
}

/// Counts the configured events over one run of the command. `on_tick` sees every
/// `--interval` read as it happens (for live output); the reads are also in the report.
pub fn stat(cfg: &StatConfig, on_tick: &mut dyn FnMut(&StatInterval)) -> Result<StatReport> {
    if cfg.command.is_empty() {
        return Err(MeasureError::Invalid("no command: give the command to count after `--` (see `tailprof stat --help`)".into()));
    }
    let caps = Capabilities::probe();
    let names = if cfg.events.is_empty() { default_events(&caps) } else { cfg.events.clone() };
    let specs = names.iter().map(|n| EventSpec::parse(n)).collect::<std::result::Result<Vec<_>, _>>()?;
    let mut intervals = Vec::new();
    let r = match cfg.interval_ns {
        Some(iv) => count_command_interval(&specs, &cfg.command, iv, &mut |t| {
            let row = interval_row(t);
            on_tick(&row);
            intervals.push(row);
        })?,
        None => count_command(&specs, &cfg.command)?,
    };
    let elapsed_s = (r.elapsed_ns as f64 / 1e9).max(1e-9);
    let events = r
        .events
        .iter()
        .zip(&specs)
        .map(|(e, spec)| StatEvent {
            name: e.name.clone(),
            count: e.value,
            scaled: e.scaled(),
            rate_per_s: e.scaled().map(|v| v / elapsed_s),
            time_enabled_ns: e.time_enabled_ns,
            time_running_ns: e.time_running_ns,
            running_pct: e.running_fraction() * 100.0,
            multiplexed: e.multiplexed(),
            is_clock: spec.is_clock(),
        })
        .collect();
    Ok(StatReport {
        command: cfg.command.clone(),
        elapsed_ns: r.elapsed_ns,
        exit_status: r.exit_status,
        events,
        counters: counter_summary(&hardware_counters(&caps)),
        interval_ns: cfg.interval_ns,
        intervals,
    })
}

/// The counters' facts for the report.
fn counter_summary(c: &CounterInfo) -> CounterSummary {
    CounterSummary { pmu: c.pmu.clone(), generic: c.generic, fixed: c.fixed, description: c.describe() }
}
