//! Per-(item, function) time estimates and the sample interval they rest on.
//!
//! Two estimators are computed for every (item, function), and the report says which
//! one is shown ([`super::Estimator`]):
//!
//! - **span** (the paper's, §III-D step 3): last − first sample of the function within
//!   the item. It needs at least two samples, and under-estimates a contiguous run by
//!   about one interval; for a function entered several times in one item it also
//!   counts the time spent in between.
//! - **count × interval**: samples × mean sample interval. For cpu-clock / task-clock
//!   with a fixed period the interval is the period (in ns, on the task's CPU time);
//!   otherwise it is measured as the median spacing of consecutive samples on the same
//!   thread ([`IntervalMeter`]), which is robust to sleeps and descheduling.
//!
//! Estimates resting on fewer than `min_reliable_samples` samples are marked
//! unreliable (`reliable: false`).

use tailprof_format::EventDesc;

/// The sample interval in ns an event's fixed period stands for, when it is a time:
/// cpu-clock / task-clock sampled by period.
pub fn period_interval_ns(ev: &EventDesc) -> Option<f64> {
    match (ev.is_clock(), ev.sample_period, ev.sample_freq) {
        (true, Some(p), None) if p > 0 => Some(p as f64),
        _ => None,
    }
}

/// Collects spacings of consecutive samples on one thread to find their median.
/// Keeps at most [`IntervalMeter::MAX_KEPT`] spacings (the first ones), so memory stays
/// bounded on huge traces.
#[derive(Debug, Clone, Default)]
pub struct IntervalMeter {
    deltas: Vec<u64>,
}

impl IntervalMeter {
    pub const MAX_KEPT: usize = 1 << 20;

    #[inline]
    pub fn add(&mut self, delta_ns: u64) {
        if self.deltas.len() < Self::MAX_KEPT && delta_ns > 0 {
            self.deltas.push(delta_ns);
        }
    }

    /// Median of the spacings seen, `None` without any.
    pub fn median(&mut self) -> Option<f64> {
        if self.deltas.is_empty() {
            return None;
        }
        Some(median_u64(&mut self.deltas) as f64)
    }
}

/// Median (lower middle for even lengths averaged with the upper one) of `v`,
/// reordering it; 0 for an empty slice.
pub fn median_u64(v: &mut [u64]) -> u64 {
    let n = v.len();
    if n == 0 {
        return 0;
    }
    let (_, &mut hi, _) = v.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        return hi;
    }
    let lo = *v[..n / 2].iter().max().expect("non-empty lower half");
    lo + (hi - lo) / 2
}

/// Median of `v` (averaging the two middle values), reordering it; 0.0 when empty.
pub fn median_f64(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    let (_, &mut hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        return hi;
    }
    let lo = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo + hi) / 2.0
}

/// Running count / first / last of one (item, location) or (item, function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acc {
    pub count: u64,
    pub first: u64,
    pub last: u64,
}

impl Acc {
    #[inline]
    pub fn new(t: u64) -> Self {
        Acc { count: 1, first: t, last: t }
    }
    #[inline]
    pub fn add(&mut self, t: u64) {
        self.count += 1;
        self.last = self.last.max(t);
        self.first = self.first.min(t);
    }
    pub fn merge(&mut self, o: &Acc) {
        self.count += o.count;
        self.first = self.first.min(o.first);
        self.last = self.last.max(o.last);
    }
    pub fn span(&self) -> u64 {
        self.last - self.first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median_u64(&mut []), 0);
        assert_eq!(median_u64(&mut [5]), 5);
        assert_eq!(median_u64(&mut [9, 1, 5]), 5);
        assert_eq!(median_u64(&mut [1, 9, 3, 5]), 4);
        assert_eq!(median_f64(&mut [1.0, 9.0, 3.0, 5.0]), 4.0);
        assert_eq!(median_f64(&mut [2.0]), 2.0);
    }

    #[test]
    fn period_is_the_interval_only_for_clock_events_by_period() {
        let ev = |attr_type, config, p: Option<u64>, f: Option<u64>| EventDesc {
            attr_type,
            config,
            sample_period: p,
            sample_freq: f,
            ..Default::default()
        };
        assert_eq!(period_interval_ns(&ev(1, 0, Some(100_000), None)), Some(100_000.0));
        assert_eq!(period_interval_ns(&ev(1, 1, Some(50_000), None)), Some(50_000.0));
        assert_eq!(period_interval_ns(&ev(1, 0, None, Some(4000))), None);
        assert_eq!(period_interval_ns(&ev(0, 0, Some(100_000), None)), None); // cycles
    }
}
