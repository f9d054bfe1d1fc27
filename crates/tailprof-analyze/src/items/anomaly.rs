//! Fluctuation detection: which items are much slower than their class.
//!
//! Per class (items with the same class label; unlabelled items form one class), the
//! median and the MAD (median absolute deviation) of item durations. An item's score is
//! `|d − median| / scale` with `scale = max(1.4826 × MAD, 0.001 × median, 1 ns)`: 1.4826
//! makes MAD estimate the standard deviation for normal data, and the floor keeps the
//! score finite when more than half of the class has exactly the median duration (MAD =
//! 0, common with a few identical warm items). An item is anomalous when
//!
//! - its score exceeds `mad_k` (default 3.5, Iglewicz & Hoaglin's usual cut-off),
//! - it is slower than the median by at least `min_excess_ratio` (default 20%), so
//!   fast items and tiny absolute differences in very stable classes are not flagged,
//! - and its class has at least [`MIN_CLASS_ITEMS`] items.
//!
//! Each anomalous item gets `responsible`: the functions accounting for most of its
//! excess over the class median ([`super::explain`](mod@super::explain)).

use std::collections::BTreeMap;

use super::explain::{class_baseline, diffs, pick_responsible};
use super::{ClassStats, ItemsOptions, ItemsReport};
use crate::stats::median_u64;

/// Classes with fewer items are never flagged (no robust median to compare with).
pub const MIN_CLASS_ITEMS: usize = 3;

/// Median and MAD of `durations` (reordered).
pub fn median_mad(durations: &mut [u64]) -> (u64, u64) {
    // No durations: nothing to compare, (0, 0).
    let median = median_u64(durations).unwrap_or(0);
    let mut dev: Vec<u64> = durations.iter().map(|&d| d.abs_diff(median)).collect();
    (median, median_u64(&mut dev).unwrap_or(0))
}

/// The robust scale scores are divided by (see the module docs).
pub fn robust_scale(median: u64, mad: u64) -> f64 {
    (1.4826 * mad as f64).max(0.001 * median as f64).max(1.0)
}

/// Fill `classes`, `anomaly_score`, `anomalous` and `responsible` of `report`.
pub fn flag_anomalies(report: &mut ItemsReport, opts: &ItemsOptions) {
    let mut by_class: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
    for (i, it) in report.items.iter().enumerate() {
        by_class.entry(it.class.clone()).or_default().push(i);
    }
    report.classes.clear();
    for (class, idx) in by_class {
        let mut d: Vec<u64> = idx.iter().map(|&i| report.items[i].duration_ns).collect();
        let (median, mad) = median_mad(&mut d);
        let scale = robust_scale(median, mad);
        let mut flagged = Vec::new();
        for &i in &idx {
            let it = &mut report.items[i];
            it.anomaly_score = it.duration_ns.abs_diff(median) as f64 / scale;
            it.anomalous = idx.len() >= MIN_CLASS_ITEMS
                && it.anomaly_score > opts.mad_k
                && it.duration_ns as f64 > median as f64 * (1.0 + opts.min_excess_ratio);
            it.responsible.clear();
            if it.anomalous {
                flagged.push(i);
            }
        }
        if !flagged.is_empty() {
            let e = report.shown_estimator;
            let base = class_baseline(&report.items, &class, e);
            for i in &flagged {
                let r = pick_responsible(&diffs(&report.items[*i], &base, e), opts.responsible_share);
                report.items[*i].responsible = r;
            }
        }
        report.classes.push(ClassStats { class, items: idx.len(), median_duration_ns: median, mad_ns: mad, anomalous: flagged.len() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad() {
        assert_eq!(median_mad(&mut [10, 11, 9, 100]), (10, 1));
        assert_eq!(median_mad(&mut [10, 10, 10, 100]), (10, 0));
        assert_eq!(robust_scale(10, 0), 1.0);
        assert_eq!(robust_scale(1_000_000, 0), 1000.0);
    }
}
