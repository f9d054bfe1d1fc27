//! `tailprof plan`: the sampling period that keeps a command's overhead within a budget.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

use tailprof_analyze::overhead::predict::{parallelism, pebs_guidance, ring_pages};
use tailprof_analyze::overhead::{recommend_period, PlanInput, PlanLimit, RateModel};
use tailprof_collect::attr::{build_attr, SamplingConfig};
use tailprof_collect::caps::Capabilities;
use tailprof_collect::counting::{count_command, last_level_cache};
use tailprof_collect::event::EventSpec;

use crate::calibration::{self, MachineKey};
use crate::cmd_calibrate::{is_clock_event, period_text};
use crate::{signals, ui};

/// Recommend a sampling period for a command and an overhead budget.
///
/// Runs CMD once in counting mode (almost free) to measure how often the event occurs
/// and how many threads run at once, then picks the smallest period whose predicted
/// overhead (α from `tailprof calibrate`) stays within the budget, and prints the
/// sample interval, samples per second, the trace data rate and the ring size per CPU
/// it implies. For precise (PEBS) events it adds the buffer guidance of Akiyama &
/// Hirofuchi (ROSS '17) §5.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailprof plan --budget 2 -- ./server --selftest\n  \
    tailprof plan --budget 0.5% -e instructions --json -- python3 script.py")]
pub struct PlanArgs {
    /// Acceptable slowdown in percent (e.g. 2, 2% or 0.5).
    #[arg(long, value_name = "PCT", required = true)]
    budget: String,

    /// Event to sample.
    #[arg(short = 'e', long = "event", value_name = "EVENT", default_value = "cpu-clock")]
    event: String,

    /// α in ns per sample, instead of the stored calibration.
    #[arg(long, value_name = "NS")]
    alpha: Option<f64>,

    /// Print JSON.
    #[arg(long)]
    json: bool,

    /// The command (after `--`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// "2", "2%", "0.5 %" -> 0.02, 0.005; anything else, or outside (0, 100), is an error.
pub fn parse_budget(s: &str) -> Result<f64> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 100.0 && v.is_finite() => Ok(v / 100.0),
        _ => Err(anyhow!("--budget must be a percentage between 0 and 100, such as 2 or 0.5% (got '{s}')")),
    }
}

/// Bytes of one PERF_RECORD_SAMPLE in the ring: the 8-byte header, 8 bytes per
/// fixed-size sample_type field, and for REGS_USER the ABI word plus one per register.
pub fn raw_sample_bytes(sample_type: u64, regs_user_mask: u64) -> u64 {
    // IP, TID, TIME, ADDR, ID, CPU, PERIOD, STREAM_ID, WEIGHT, DATA_SRC, IDENTIFIER,
    // PHYS_ADDR, WEIGHT_STRUCT (perf_event.h bit numbers).
    const FIXED: u64 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9)
        | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 19) | (1 << 24);
    const REGS_USER: u64 = 1 << 12;
    let mut n = 8 + 8 * u64::from((sample_type & FIXED).count_ones());
    if sample_type & REGS_USER != 0 {
        n += 8 + 8 * u64::from(regs_user_mask.count_ones());
    }
    n
}

/// How long the ring should hold records: the recorder polls every 100 ms; 0.5 s also
/// covers a recorder that is descheduled for a while.
const RING_HOLD_S: f64 = 0.5;
/// `tailprof record --mmap-pages` default.
const DEFAULT_RING_PAGES: u64 = 128;

pub fn run(args: PlanArgs) -> Result<ExitCode> {
    let budget = parse_budget(&args.budget)?;
    if args.command.is_empty() {
        bail!("no command: give the command to plan for after `--` (see `tailprof plan --help`)");
    }
    let spec = EventSpec::parse(&args.event)?;
    let clock = is_clock_event(&spec);
    let caps = Capabilities::probe();
    let key = MachineKey::probe(&caps);
    let alpha = calibration::alpha_for(&key, &spec.name, args.alpha)?.ok_or_else(|| calibration::missing(&key, &spec.name))?;

    let mut specs = vec![spec.clone()];
    if spec.name != "task-clock" {
        specs.push(EventSpec::parse("task-clock")?);
    }
    signals::install().context("cannot install the Ctrl-C handler")?;
    let counts = count_command(&specs, &args.command)?;
    if counts.exit_status != 0 {
        bail!(
            "`{}` exited with status {} while being counted; `tailprof plan` needs a run that succeeds",
            args.command.join(" "),
            counts.exit_status
        );
    }
    let elapsed_s = counts.elapsed_ns as f64 / 1e9;
    let cpu_s = counts.get("task-clock").and_then(|e| e.scaled()).unwrap_or(0.0) / 1e9;
    let threads = parallelism(cpu_s, elapsed_s, caps.online_cpus.len());
    let ev = &counts.events[0];
    let events = ev.scaled().ok_or_else(|| anyhow!("'{}' was never scheduled on a counter; no rate to plan with", spec.name))?;
    let model = if clock {
        RateModel::Time
    } else {
        if events <= 0.0 || cpu_s <= 0.0 {
            bail!("`{}` caused no '{}' events while counted; sampling it would record nothing", args.command.join(" "), spec.name);
        }
        RateModel::Count { events_per_cpu_s: events / cpu_s }
    };
    let max_rate: Option<f64> = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let input = PlanInput {
        alpha_ns: alpha.alpha_ns,
        budget,
        model,
        parallel: threads,
        min_period: if clock { 10_000 } else { 1 },
        max_rate_per_cpu: max_rate,
    };
    let out = recommend_period(&input);
    let bytes_per_sample = alpha.calibration.as_ref().and_then(|c| c.bytes_per_sample);
    let mb_per_s = bytes_per_sample.map(|b| b * out.samples_per_s / 1e6);
    let plan_attr = build_attr(&spec, &SamplingConfig { period: Some(out.period), ..SamplingConfig::default() })?;
    let raw = raw_sample_bytes(plan_attr.attr.sample_type, plan_attr.attr.sample_regs_user);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let pages = ring_pages(out.samples_per_s_per_thread, raw, RING_HOLD_S, page, 8);
    let pebs = (spec.precise > 0 && spec.needs_hardware_pmu()).then(|| {
        let llc = last_level_cache(Path::new("/sys/devices/system/cpu"));
        pebs_guidance(llc.map(|c| c.size_bytes), threads, out.samples_per_s_per_thread)
    });
    let mut notes = Vec::new();
    match out.limited_by {
        PlanLimit::Budget => {}
        PlanLimit::MinPeriod => notes.push(format!(
            "the budget allows a shorter period, but the kernel does not sample {} more often than every {}",
            spec.name,
            period_text(out.period, clock)
        )),
        PlanLimit::MaxSampleRate => notes.push(format!(
            "period raised so a CPU takes at most kernel.perf_event_max_sample_rate = {:.0} samples/s (the kernel would throttle above)",
            max_rate.unwrap_or(0.0)
        )),
    }
    if clock {
        notes.push(format!(
            "{} samples every {} of a thread's run time, and the time spent handling a sample counts too: overhead = α / (period − α)",
            spec.name,
            period_text(out.period, true)
        ));
    }
    if bytes_per_sample.is_some() {
        notes.push("trace bytes per sample were measured on the calibration busy loop; code with more distinct addresses compresses less".into());
    }
    let cmdline = format!(
        "tailprof record -e {} -c {}{} -- {}",
        spec.name,
        out.period,
        if pages > DEFAULT_RING_PAGES { format!(" --mmap-pages {pages}") } else { String::new() },
        args.command.join(" ")
    );

    if args.json {
        let v = json!({
            "event": spec.name,
            "budget_pct": budget * 100.0,
            "alpha_ns": alpha.alpha_ns,
            "alpha_source": alpha.describe(),
            "elapsed_s": elapsed_s,
            "cpu_s": cpu_s,
            "threads": threads,
            "event_count": events,
            "events_per_cpu_s": match model { RateModel::Count { events_per_cpu_s } => Some(events_per_cpu_s), RateModel::Time => None },
            "period": out.period,
            "predicted_overhead_pct": out.predicted_overhead_pct,
            "limited_by": format!("{:?}", out.limited_by),
            "sample_interval_ns": out.sample_interval_ns,
            "samples_per_s": out.samples_per_s,
            "samples_per_s_per_thread": out.samples_per_s_per_thread,
            "bytes_per_sample": bytes_per_sample,
            "trace_mb_per_s": mb_per_s,
            "raw_record_bytes": raw,
            "ring_pages_per_cpu": pages,
            "ring_bytes_per_cpu": pages * page,
            "pebs": pebs,
            "record_command": cmdline,
            "notes": notes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "plan for `{}` with a {}% budget on {} (counted: {:.3} s elapsed, {:.3} s CPU, {:.2} threads at once)",
        args.command.join(" "),
        budget * 100.0,
        spec.name,
        elapsed_s,
        cpu_s,
        threads
    );
    if let RateModel::Count { events_per_cpu_s } = model {
        println!("  event rate         {} {} per CPU-second ({} in the run)", sci(events_per_cpu_s), spec.name, ui::thousands(events as u64));
    }
    println!("  α                  {}", alpha.describe());
    println!("  period             -c {}  ({})", out.period, period_text(out.period, clock));
    println!("  predicted overhead {:.2}%", out.predicted_overhead_pct);
    println!(
        "  sample interval    {} of a thread's CPU time",
        ui::duration(out.sample_interval_ns.round() as u64)
    );
    println!("  samples per second {:.0} per busy thread, {:.0} in all", out.samples_per_s_per_thread, out.samples_per_s);
    match (bytes_per_sample, mb_per_s) {
        (Some(b), Some(m)) => println!("  trace data rate    {m:.3} MB/s at {b:.1} bytes per sample"),
        _ => println!("  trace data rate    unknown (no bytes-per-sample measurement: run `tailprof calibrate`)"),
    }
    println!(
        "  ring per CPU       {pages} pages ({}) for {RING_HOLD_S} s of {raw}-byte records{}",
        ui::bytes(pages * page),
        if pages <= DEFAULT_RING_PAGES { "; the default 128 pages suffice" } else { "" }
    );
    if let Some(g) = &pebs {
        println!("  PEBS buffer guidance:");
        for a in &g.advice {
            println!("    - {a}");
        }
    }
    for n in &notes {
        println!("  note: {n}");
    }
    println!("\n  {cmdline}");
    Ok(ExitCode::SUCCESS)
}

fn sci(v: f64) -> String {
    format!("{v:.3e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("2").unwrap(), 0.02);
        assert_eq!(parse_budget("2%").unwrap(), 0.02);
        assert_eq!(parse_budget(" 0.5 % ").unwrap(), 0.005);
        for bad in ["0", "100", "-1", "abc", "", "%", "1e400", "nan"] {
            let e = parse_budget(bad).unwrap_err().to_string();
            assert!(e.contains("percentage between 0 and 100"), "{bad}: {e}");
        }
    }

    #[test]
    fn raw_sizes() {
        // IP|TID|TIME|CPU|PERIOD|IDENTIFIER: header + 6 words.
        let base = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 7) | (1 << 8) | (1 << 16);
        assert_eq!(raw_sample_bytes(base, 0), 56);
        assert_eq!(raw_sample_bytes(base | (1 << 12), 0b11), 56 + 8 + 16);
    }
}
