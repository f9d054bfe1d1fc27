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

    /// No more spacings are kept (callers may stop measuring).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.deltas.len() >= Self::MAX_KEPT
    }

    /// Median of the spacings seen, `None` without any.
    pub fn median(&mut self) -> Option<f64> {
        if self.deltas.is_empty() {
            return None;
        }
        crate::stats::median_u64(&mut self.deltas).map(|m| m as f64)
    }
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

    /// `IntervalMeter::median`: the median spacing, zero spacings ignored, `None` when
    /// nothing was added, and at most `MAX_KEPT` (the first) spacings kept.
    #[test]
    fn medians() {
        let mut m = IntervalMeter::default();
        assert_eq!(m.median(), None);
        m.add(0);
        assert_eq!(m.median(), None, "a zero spacing is not a spacing");
        for d in [300, 100, 200, 0, 10_000] {
            m.add(d);
        }
        assert_eq!(m.median(), Some(250.0), "even count: midpoint of 200 and 300");
        m.add(5);
        assert_eq!(m.median(), Some(200.0));

        let mut full = IntervalMeter::default();
        for _ in 0..IntervalMeter::MAX_KEPT {
            full.add(1_000);
        }
        for _ in 0..IntervalMeter::MAX_KEPT {
            full.add(7);
        }
        assert_eq!(full.median(), Some(1_000.0), "spacings past MAX_KEPT are not kept");
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
