//! `tailprof stat`: count events over a command's run (no sampling).

use anyhow::{Context, Result};
use clap::Args;
use std::process::ExitCode;

use tailprof_collect::caps::Capabilities;
use tailprof_measure::stat::{default_events, stat, StatConfig};
use tailprof_present::stat::{interval_text, stat_json, stat_text};

use crate::signals;

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

pub fn run(args: StatArgs) -> Result<ExitCode> {
    // Ctrl-C reaches CMD through the terminal; we only wait for it and still print.
    signals::install().context("cannot install the Ctrl-C handler")?;
    let cfg = StatConfig { events: args.events.clone(), command: args.command.clone(), interval_ns: args.interval };
    let names = if args.events.is_empty() { default_events(&Capabilities::probe()) } else { args.events.clone() };
    let json = args.json;
    let r = stat(&cfg, &mut |t| {
        if !json {
            print!("{}", interval_text(t, &names));
        }
    })?;
    if json {
        println!("{}", tailprof_present::json::document(&stat_json(&r))?);
    } else {
        print!("{}", stat_text(&r));
    }
    if r.exit_status != 0 {
        eprintln!("tailprof: `{}` exited with status {}", args.command.join(" "), r.exit_status);
    }
    Ok(ExitCode::from(r.exit_status.clamp(0, 255) as u8))
}

#[cfg(test)]
mod tests {
    use tailprof_collect::event::EventSpec;

    #[test]
    fn clock_events() {
        let clock = |s: &str| EventSpec::parse(s).unwrap().is_clock();
        assert!(clock("task-clock:u") && clock("cpu-clock") && !clock("page-faults"));
    }
}
