//! Text and JSON for `tailprof stat` ([`tailprof_analyze::measured::StatReport`]).

use serde_json::{json, Value};
use std::fmt::Write as _;

use tailprof_analyze::measured::{StatInterval, StatReport};

use crate::fmt::{duration, thousands};

/// How many times more sampling a multiplexed set cost in the CERN measurements
/// (Bitzes & Nowak 2014, §4.2: "increasing the penalty by an order of magnitude").
const MUX_SAMPLING_FACTOR: &str = "about 10×";

/// "138.7/s", "5.65 k/s", "1.23 G/s".
pub fn rate_text(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2} G/s", v / 1e9),
        v if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        v if v >= 1e3 => format!("{:.2} k/s", v / 1e3),
        v => format!("{v:.1}/s"),
    }
}

/// The JSON document: {"command", "elapsed_s", "exit_status", "events": [{"name",
/// "count", "scaled", "rate_per_s", "time_enabled_ns", "time_running_ns", "running_pct",
/// "multiplexed"}], "multiplexed", "counters": {...}} (+ "interval_ns", "intervals").
pub fn stat_json(r: &StatReport) -> Value {
    let mut v = json!({
        "command": r.command,
        "elapsed_s": r.elapsed_ns as f64 / 1e9,
        "exit_status": r.exit_status,
        "events": r.events,
        "multiplexed": r.multiplexed() > 0,
        "counters": {
            "pmu": r.counters.pmu,
            "programmable": r.counters.generic,
            "fixed": r.counters.fixed,
            "description": r.counters.description,
        },
    });
    if let Some(iv) = r.interval_ns {
        v["interval_ns"] = json!(iv);
        v["intervals"] = json!(r.intervals);
    }
    v
}

/// One `--interval` read as text lines (like `perf stat -I`): time, count, event.
pub fn interval_text(t: &StatInterval, names: &[String]) -> String {
    let mut out = String::new();
    for (name, v) in names.iter().zip(&t.values) {
        let _ = writeln!(out, "{:>12.6}  {:>18}  {}", t.t_ns as f64 / 1e9, thousands(*v), name);
    }
    out
}

/// The table of counts, and the multiplexing note.
pub fn stat_text(r: &StatReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "counts for `{}` ({:.3} s elapsed)\n", r.command.join(" "), r.elapsed_ns as f64 / 1e9);
    let _ =
        writeln!(out, "  {:>18}  {:<22} {:>16}  {:>14}  {:>14}  {:>7}", "count", "event", "per second", "enabled", "running", "running");
    for e in &r.events {
        let (count, per_s) = if e.is_clock {
            (format!("{:.2} ms", e.count as f64 / 1e6), format!("{:.3} CPUs", e.rate_per_s.unwrap_or(0.0) / 1e9))
        } else {
            (thousands(e.count), e.rate_per_s.map(rate_text).unwrap_or_else(|| "-".into()))
        };
        let mux = match (e.multiplexed, e.scaled) {
            (true, Some(s)) => format!("  (multiplexed; scaled estimate {})", thousands(s.round() as u64)),
            (true, None) => "  (multiplexed; never scheduled: no estimate)".into(),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {count:>18}  {:<22} {per_s:>16}  {:>14}  {:>14}  {:>6.1}%{mux}",
            e.name,
            duration(e.time_enabled_ns),
            duration(e.time_running_ns),
            e.running_pct,
        );
    }
    out.push('\n');
    let muxed = r.multiplexed();
    if muxed > 0 {
        let _ = writeln!(
            out,
            "  note: {muxed} of {} events were multiplexed (time running < time enabled): the kernel rotated them \
             through the PMU's counters, so their counts are scaled estimates (count × enabled / running); \
             this PMU has {}",
            r.events.len(),
            r.counters.description
        );
        let _ = writeln!(
            out,
            "  warning: sampling this set would cost far more than counting it: multiplexing raised sampling \
             overhead by {MUX_SAMPLING_FACTOR} in the CERN measurements (Bitzes & Nowak 2014); sample at most \
             as many hardware events at once as there are counters"
        );
    } else {
        let _ = writeln!(out, "  no multiplexing: every counter ran for the whole time it was enabled ({})", r.counters.description);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(rate_text(138.7), "138.7/s");
        assert_eq!(rate_text(5645.1), "5.65 k/s");
        assert_eq!(rate_text(1.234e9), "1.23 G/s");
    }
}
