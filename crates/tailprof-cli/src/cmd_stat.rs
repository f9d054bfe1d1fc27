//! `tailprof stat`: count events over a command's run (no sampling).

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

use tailprof_collect::caps::Capabilities;
use tailprof_collect::counting::{count_command, count_command_interval, hardware_counters, CountedEvent, IntervalTick};
use tailprof_collect::event::EventSpec;

use crate::{signals, ui};

/// Count events over a command's whole run, in counting mode (no sampling, no trace).
///
/// For each event: the count, the rate per second, and the time the counter was enabled
/// and actually running. When there are more hardware events than counters the kernel
/// multiplexes them (time running < time enabled): the count is then scaled to an
/// estimate for the whole run, the number of counters is named, and a warning says that
/// sampling such a set costs far more. CMD's exit status is passed through.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof stat -- xz -6 -k data.txt\n  \
    tailprof stat -e task-clock -e page-faults --json -- python3 script.py")]
pub struct StatArgs {
    /// Event to count (repeatable). Default: task-clock, context-switches,
    /// cpu-migrations, page-faults, plus cycles, instructions, branches and
    /// branch-misses when the machine has a hardware PMU.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    events: Vec<String>,

    /// Print JSON: {"elapsed_s", "exit_status", "events": [{"name", "count", "scaled",
    /// "rate_per_s", "time_enabled_ns", "time_running_ns", "running_pct",
    /// "multiplexed"}], "multiplexed", "counters": {...}}.
    #[arg(long)]
    json: bool,

    /// Also read the counters every DURATION while the command runs (e.g. `1ms`, `100ms`;
    /// at least 10us) and print each interval's counts: the periodic-counting baseline of
    /// `tailprof bandwidth`. With --json: "interval_ns" and "intervals": [{"t_ns", "len_ns",
    /// "values": [...], "enabled_ns": [...], "running_ns": [...]}]. Uncore events (e.g.
    /// `uncore_imc_0/cas_count_read/`) are counted system-wide on their PMU's CPUs.
    #[arg(long, value_name = "DURATION", value_parser = crate::cmd_bandwidth::parse_duration)]
    interval: Option<u64>,

    /// The command (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// How many times more sampling a multiplexed set cost in the CERN measurements
/// (Bitzes & Nowak 2014, §4.2: "increasing the penalty by an order of magnitude").
const MUX_SAMPLING_FACTOR: &str = "about 10×";

/// "138.7/s", "5.65 k/s", "1.23 G/s".
fn rate_text(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2} G/s", v / 1e9),
        v if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        v if v >= 1e3 => format!("{:.2} k/s", v / 1e3),
        v => format!("{v:.1}/s"),
    }
}

pub fn run(args: StatArgs) -> Result<ExitCode> {
    if args.command.is_empty() {
        bail!("no command: give the command to count after `--` (see `tailprof stat --help`)");
    }
    let caps = Capabilities::probe();
    let names: Vec<String> = if args.events.is_empty() {
        let mut v: Vec<String> = ["task-clock", "context-switches", "cpu-migrations", "page-faults"].map(String::from).to_vec();
        if caps.has_cpu_pmu {
            v.extend(["cycles", "instructions", "branches", "branch-misses"].map(String::from));
        }
        v
    } else {
        args.events.clone()
    };
    let mut specs = Vec::with_capacity(names.len());
    for n in &names {
        specs.push(EventSpec::parse(n)?);
    }
    // Ctrl-C reaches CMD through the terminal; we only wait for it and still print.
    signals::install().context("cannot install the Ctrl-C handler")?;
    let mut intervals = Vec::new();
    let r = match args.interval {
        Some(iv) => count_command_interval(&specs, &args.command, iv, &mut |t| interval_tick(t, &specs, args.json, &mut intervals))?,
        None => count_command(&specs, &args.command)?,
    };
    let elapsed_s = r.elapsed_ns as f64 / 1e9;
    let counters = hardware_counters(&caps);
    let muxed: Vec<&CountedEvent> = r.events.iter().filter(|e| e.multiplexed()).collect();
    let rate = |e: &CountedEvent| e.scaled().map(|v| v / elapsed_s.max(1e-9));

    if args.json {
        let events: Vec<_> = r
            .events
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "count": e.value,
                    "scaled": e.scaled(),
                    "rate_per_s": rate(e),
                    "time_enabled_ns": e.time_enabled_ns,
                    "time_running_ns": e.time_running_ns,
                    "running_pct": e.running_fraction() * 100.0,
                    "multiplexed": e.multiplexed(),
                })
            })
            .collect();
        let mut v = json!({
            "command": args.command,
            "elapsed_s": elapsed_s,
            "exit_status": r.exit_status,
            "events": events,
            "multiplexed": !muxed.is_empty(),
            "counters": {
                "pmu": counters.pmu,
                "programmable": counters.generic,
                "fixed": counters.fixed,
                "description": counters.describe(),
            },
        });
        if let Some(iv) = args.interval {
            v["interval_ns"] = json!(iv);
            v["intervals"] = serde_json::Value::Array(intervals);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("counts for `{}` ({:.3} s elapsed)\n", args.command.join(" "), elapsed_s);
        println!("  {:>18}  {:<22} {:>16}  {:>14}  {:>14}  {:>7}", "count", "event", "per second", "enabled", "running", "running");
        for (e, spec) in r.events.iter().zip(&specs) {
            let (count, per_s) = if spec.is_clock() {
                (format!("{:.2} ms", e.value as f64 / 1e6), format!("{:.3} CPUs", rate(e).unwrap_or(0.0) / 1e9))
            } else {
                (ui::thousands(e.value), rate(e).map(rate_text).unwrap_or_else(|| "-".into()))
            };
            println!(
                "  {count:>18}  {:<22} {per_s:>16}  {:>14}  {:>14}  {:>6.1}%{}",
                e.name,
                ui::duration(e.time_enabled_ns),
                ui::duration(e.time_running_ns),
                e.running_fraction() * 100.0,
                match (e.multiplexed(), e.scaled()) {
                    (true, Some(s)) => format!("  (multiplexed; scaled estimate {})", ui::thousands(s.round() as u64)),
                    (true, None) => "  (multiplexed; never scheduled: no estimate)".into(),
                    _ => String::new(),
                }
            );
        }
        println!();
        if !muxed.is_empty() {
            println!(
                "  note: {} of {} events were multiplexed (time running < time enabled): the kernel rotated them \
                 through the PMU's counters, so their counts are scaled estimates (count × enabled / running); \
                 this PMU has {}",
                muxed.len(),
                r.events.len(),
                counters.describe()
            );
            println!(
                "  warning: sampling this set would cost far more than counting it: multiplexing raised sampling \
                 overhead by {MUX_SAMPLING_FACTOR} in the CERN measurements (Bitzes & Nowak 2014); sample at most \
                 as many hardware events at once as there are counters"
            );
        } else {
            println!("  no multiplexing: every counter ran for the whole time it was enabled ({})", counters.describe());
        }
    }
    if r.exit_status != 0 {
        eprintln!("tailprof: `{}` exited with status {}", args.command.join(" "), r.exit_status);
    }
    Ok(ExitCode::from(r.exit_status.clamp(0, 255) as u8))
}

/// One `--interval` tick: a line per event (like `perf stat -I`), or a JSON row.
fn interval_tick(t: &IntervalTick, specs: &[EventSpec], json: bool, rows: &mut Vec<serde_json::Value>) {
    if json {
        rows.push(json!({
            "t_ns": t.t_ns,
            "len_ns": t.len_ns,
            "values": t.deltas.iter().map(|d| d.0).collect::<Vec<_>>(),
            "enabled_ns": t.deltas.iter().map(|d| d.1).collect::<Vec<_>>(),
            "running_ns": t.deltas.iter().map(|d| d.2).collect::<Vec<_>>(),
        }));
        return;
    }
    for (spec, d) in specs.iter().zip(&t.deltas) {
        println!("{:>12.6}  {:>18}  {}", t.t_ns as f64 / 1e9, ui::thousands(d.0), spec.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(rate_text(138.7), "138.7/s");
        assert_eq!(rate_text(5645.1), "5.65 k/s");
        assert_eq!(rate_text(1.234e9), "1.23 G/s");
        let clock = |s: &str| EventSpec::parse(s).unwrap().is_clock();
        assert!(clock("task-clock:u") && clock("cpu-clock") && !clock("page-faults"));
    }
}
