//! `tailprof plan`: the sampling period that keeps a command's overhead within a budget.
//!
//! Counts the command once (almost free) for its event rate and parallelism, then asks
//! the overhead model (`tailprof_analyze::overhead::recommend_period`) for the smallest
//! period within the budget, and sizes the ring from the exact record size of the
//! attribute `record` would use (`tailprof_perf_abi::sample_record_size`).

use std::path::Path;

use tailprof_analyze::overhead::predict::{parallelism, pebs_guidance, ring_pages};
use tailprof_analyze::overhead::{recommend_period, PlanInput, PlanLimit, RateModel};
use tailprof_collect::attr::{build_attr, SamplingConfig};
use tailprof_collect::caps::Capabilities;
use tailprof_collect::counting::{count_command, last_level_cache};
use tailprof_collect::event::EventSpec;
use tailprof_perf_abi::{sample_record_size, SampleLayout, VariableSizes};

use crate::calibrate::period_text;
use crate::calibration;

use crate::error::{MeasureError, Result};
pub use tailprof_analyze::measured::PlanReport;

/// How long the ring should hold records: the recorder polls every 100 ms; 0.5 s also
/// covers a recorder that is descheduled for a while.
pub const RING_HOLD_S: f64 = 0.5;
/// `tailprof record --mmap-pages` default.
pub const DEFAULT_RING_PAGES: u64 = 128;
/// The longest period `plan` recommends for cpu-clock/task-clock: one sample per second
/// of a thread's run time. A longer one would describe almost nothing; the budget is met
/// anyway.
pub const MAX_CLOCK_PERIOD_NS: u64 = 1_000_000_000;
/// The longest period for counted events (2^40 events between samples).
pub const MAX_COUNT_PERIOD: u64 = 1 << 40;

/// What to plan for.
#[derive(Debug, Clone)]
pub struct PlanConfig {
    pub spec: EventSpec,
    /// Acceptable slowdown as a fraction (0.02 = 2%), in (0, 1).
    pub budget: f64,
    /// `--alpha`, else the stored calibration.
    pub alpha_ns: Option<f64>,
    pub command: Vec<String>,
}

/// "2", "2%", "0.5 %" -> 0.02, 0.005; anything else, or outside (0, 100), is an error.
pub fn parse_budget(s: &str) -> Result<f64> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 100.0 && v.is_finite() => Ok(v / 100.0),
        _ => Err(MeasureError::Invalid(format!("--budget must be a percentage between 0 and 100, such as 2 or 0.5% (got '{s}')"))),
    }
}

/// Bytes of one PERF_RECORD_SAMPLE with this attribute's sample_type and user
/// registers (no callchain or stack parts: `record` takes none by default).
pub fn raw_sample_bytes(sample_type: u64, regs_user_mask: u64) -> u64 {
    let layout = SampleLayout::new(sample_type).with_regs_user(regs_user_mask);
    sample_record_size(&layout, &VariableSizes::default())
}

/// Count the command, then plan.
pub fn plan(cfg: &PlanConfig) -> Result<PlanReport> {
    if !(cfg.budget > 0.0 && cfg.budget < 1.0) {
        return Err(MeasureError::Invalid(format!("the budget must be between 0 and 100% (got {}%)", cfg.budget * 100.0)));
    }
    if cfg.command.is_empty() {
        return Err(MeasureError::Invalid("no command: give the command to plan for after `--` (see `tailprof plan --help`)".into()));
    }
    let spec = &cfg.spec;
    let clock = spec.is_clock();
    let caps = Capabilities::probe();
    let key = calibration::machine_key(&caps);
    let alpha = calibration::alpha_for(&key, &spec.name, cfg.alpha_ns)?.ok_or_else(|| calibration::missing(&key, &spec.name))?;

    let mut specs = vec![spec.clone()];
    if spec.name != "task-clock" {
        specs.push(EventSpec::parse("task-clock")?);
    }
    let counts = count_command(&specs, &cfg.command)?;
    if counts.exit_status != 0 {
        return Err(MeasureError::CommandFailed(format!(
            "`{}` exited with status {} while being counted; `tailprof plan` needs a run that succeeds",
            cfg.command.join(" "),
            counts.exit_status
        )));
    }
    let elapsed_s = counts.elapsed_ns as f64 / 1e9;
    let cpu_s = counts.get("task-clock").and_then(|e| e.scaled()).unwrap_or(0.0) / 1e9;
    let threads = parallelism(cpu_s, elapsed_s, caps.online_cpus.len());
    let events = counts.events[0]
        .scaled()
        .ok_or_else(|| MeasureError::Invalid(format!("'{}' was never scheduled on a counter; no rate to plan with", spec.name)))?;
    let model = if clock {
        RateModel::Time
    } else {
        if events <= 0.0 || cpu_s <= 0.0 {
            return Err(MeasureError::Invalid(format!(
                "`{}` caused no '{}' events while counted; sampling it would record nothing",
                cfg.command.join(" "),
                spec.name
            )));
        }
        RateModel::Count { events_per_cpu_s: events / cpu_s }
    };
    let max_rate: Option<f64> =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").ok().and_then(|s| s.trim().parse().ok());
    let input = PlanInput {
        alpha_ns: alpha.alpha_ns,
        budget: cfg.budget,
        model,
        parallel: threads,
        min_period: if clock { 10_000 } else { 1 },
        max_period: if clock { MAX_CLOCK_PERIOD_NS } else { MAX_COUNT_PERIOD },
        max_rate_per_cpu: max_rate,
    };
    let out = recommend_period(&input);
    let mut notes = Vec::new();
    let bytes_per_sample = alpha.calibration.as_ref().and_then(|c| c.bytes_per_sample);
    let mb_per_s = bytes_per_sample.map(|b| b * out.samples_per_s / 1e6);
    let plan_attr = build_attr(spec, &SamplingConfig { period: Some(out.period), ..SamplingConfig::default() })?;
    let raw = raw_sample_bytes(plan_attr.attr.sample_type, plan_attr.attr.sample_regs_user);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let pages = ring_pages(out.samples_per_s_per_thread, raw, RING_HOLD_S, page, 8);
    let pebs = (spec.precise > 0 && spec.needs_hardware_pmu()).then(|| {
        let llc = last_level_cache(Path::new("/sys/devices/system/cpu"));
        pebs_guidance(llc.map(|c| c.size_bytes), threads, out.samples_per_s_per_thread)
    });
    match out.limited_by {
        PlanLimit::Budget => {}
        PlanLimit::MinPeriod => notes.push(format!(
            "the budget allows a shorter period, but the kernel does not sample {} more often than every {}",
            spec.name,
            period_text(out.period, clock)
        )),
        PlanLimit::MaxPeriod => notes.push(format!(
            "the budget allows sampling even less often; {} is the longest period tailprof recommends",
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
        notes.push(
            "trace bytes per sample were measured on the calibration busy loop; code with more distinct addresses compresses less".into(),
        );
    }
    let record_command = format!(
        "tailprof record -e {} -c {}{} -- {}",
        spec.name,
        out.period,
        if pages > DEFAULT_RING_PAGES { format!(" --mmap-pages {pages}") } else { String::new() },
        cfg.command.join(" ")
    );
    Ok(PlanReport {
        ring_hold_s: RING_HOLD_S,
        default_ring_pages: DEFAULT_RING_PAGES,
        event: spec.name.clone(),
        clock,
        budget: cfg.budget,
        alpha,
        command: cfg.command.clone(),
        elapsed_s,
        cpu_s,
        threads,
        event_count: events,
        model,
        max_rate_per_cpu: max_rate,
        out,
        bytes_per_sample,
        trace_mb_per_s: mb_per_s,
        raw_record_bytes: raw,
        ring_pages_per_cpu: pages,
        page_size: page,
        pebs,
        record_command,
        notes,
    })
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
    fn raw_sizes_come_from_the_abi_layout() {
        // IP|TID|TIME|CPU|PERIOD|IDENTIFIER: header + 6 words.
        let base = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 7) | (1 << 8) | (1 << 16);
        assert_eq!(raw_sample_bytes(base, 0), 56);
        assert_eq!(raw_sample_bytes(base | (1 << 12), 0b11), 56 + 8 + 16);
    }

    /// The attr `plan` sizes the ring for is the one `record -c PERIOD` opens: no CPU
    /// (rings are per CPU) and no PERIOD (fixed): header + IDENTIFIER IP TID TIME.
    #[test]
    fn planned_records_are_the_slim_layout() {
        let bytes = |ev: &str, cfg: SamplingConfig| {
            let a = build_attr(&EventSpec::parse(ev).unwrap(), &cfg).unwrap().attr;
            raw_sample_bytes(a.sample_type, a.sample_regs_user)
        };
        let fixed = SamplingConfig { period: Some(10_000), ..SamplingConfig::default() };
        assert_eq!(bytes("cpu-clock", fixed.clone()), 40);
        assert_eq!(bytes("task-clock", fixed), 40);
        // -F: the kernel's period is in every sample.
        assert_eq!(bytes("cpu-clock", SamplingConfig { freq: Some(4000), ..SamplingConfig::default() }), 48);
    }
}
