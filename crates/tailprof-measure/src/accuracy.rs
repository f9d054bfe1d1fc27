//! The demo's accuracy check: how close per-item estimates come to the truth the
//! example program logged itself (the paper's Fig. 9).
//!
//! `examples/queries.c --log FILE` writes one `query ID N cold|warm` line per query and
//! one `func ID NAME BEGIN_NS END_NS` line per function call. [`parse_truth`] reads it
//! (bounded, unknown lines ignored); [`accuracy`] compares, for every (query, function)
//! pair at least [`MIN_ACCURACY_INTERVALS`] sample intervals long, the two estimators
//! with the logged time.

use std::collections::BTreeMap;

use tailprof_analyze::items::ItemsReport;
use tailprof_analyze::stats::mean_sd;

pub use tailprof_analyze::measured::{Accuracy, Truth};

/// Items at least this many sample intervals long count for the accuracy check.
pub const MIN_ACCURACY_INTERVALS: f64 = 20.0;
/// Log lines beyond this many are ignored (the example writes a few per query).
pub const MAX_TRUTH_LINES: usize = 1_000_000;

/// Read the example's log (see the module docs).
pub fn parse_truth(text: &str) -> BTreeMap<u64, Truth> {
    let mut out: BTreeMap<u64, Truth> = BTreeMap::new();
    for line in text.lines().take(MAX_TRUTH_LINES) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match f.first() {
            Some(&"query") => {
                if let (Some(id), Some(n)) = (num(1), num(2)) {
                    let t = out.entry(id).or_default();
                    t.n = n.min(u64::from(u32::MAX)) as u32;
                    t.cold = f.get(3) == Some(&"cold");
                }
            }
            Some(&"func") => {
                if let (Some(id), Some(name), Some(a), Some(b)) = (num(1), f.get(2), num(3), num(4)) {
                    out.entry(id).or_default().funcs.push((name.to_string(), b.saturating_sub(a)));
                }
            }
            _ => {}
        }
    }
    out
}

/// Compare each item's per-function estimates with the logged truth.
pub fn accuracy(report: &ItemsReport, truth: &BTreeMap<u64, Truth>, period: u64) -> Accuracy {
    let min_ns = MIN_ACCURACY_INTERVALS * report.mean_interval_ns;
    let (mut count, mut span) = (Vec::new(), Vec::new());
    let mut matched = 0;
    for row in &report.items {
        let Some(t) = truth.get(&row.id) else { continue };
        matched += 1;
        for (name, true_ns) in &t.funcs {
            if (*true_ns as f64) < min_ns {
                continue;
            }
            let (mut est, mut sp) = (0.0, 0.0);
            for f in row.functions.iter().filter(|f| &f.name == name) {
                est += f.est_ns;
                sp += f.span_ns as f64;
            }
            count.push(est / *true_ns as f64);
            span.push(sp / *true_ns as f64);
        }
    }
    let (cm, cs) = mean_sd(&count).unwrap_or((f64::NAN, f64::NAN));
    let (sm, ss) = mean_sd(&span).unwrap_or((f64::NAN, f64::NAN));
    Accuracy {
        period_ns: period,
        mean_interval_ns: report.mean_interval_ns,
        pairs: count.len(),
        count_mean_ratio: cm,
        count_sd_ratio: cs,
        span_mean_ratio: sm,
        span_sd_ratio: ss,
        items_matched: matched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_log_is_parsed_and_garbage_ignored() {
        let t = parse_truth("query 1 5 cold\nfunc 1 load 100 300\nfunc 1 load 900 100\nnoise\nquery x\nquery 2 5 warm\n");
        assert_eq!(t.len(), 2);
        assert!(t[&1].cold && !t[&2].cold);
        assert_eq!(t[&1].n, 5);
        assert_eq!(t[&1].funcs, vec![("load".to_string(), 200), ("load".to_string(), 0)]);
    }
}
