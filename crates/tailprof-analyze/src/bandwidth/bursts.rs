//! Bursts: phases of high bandwidth between low ones, found on the binned sample counts.
//!
//! 1. Smooth: a centered moving sum over `w` bins, `w` the smallest window holding about
//!    [`TARGET_SAMPLES`] samples at the mean rate (at least [`MIN_WINDOW`], at most
//!    [`MAX_WINDOW`]), so Poisson noise
//!    of a single bin does not split or invent phases. Gap bins (lost samples, throttling)
//!    take no part and end a burst.
//! 2. Split the smoothed values in two levels with Otsu's threshold (the split that
//!    maximizes the between-class variance), which works whatever share of the time the
//!    high phases take.
//! 3. Keep the split only when it is real: the two levels must differ by more than
//!    [`MIN_SEPARATION_SIGMA`] Poisson standard deviations of a window at the high level.
//!    A flat trace has no bursts.
//! 4. A burst is a run of bins at or above the threshold; runs separated by fewer than
//!    `w` low bins are merged, runs shorter than `w` bins are dropped.

/// Samples a smoothing window should hold at the mean rate.
pub const TARGET_SAMPLES: f64 = 30.0;
/// Smallest smoothing window, in bins (so single noisy bins never make a burst).
pub const MIN_WINDOW: usize = 3;
/// Largest smoothing window, in bins.
pub const MAX_WINDOW: usize = 64;
/// Minimum level difference, in Poisson standard deviations of one window.
pub const MIN_SEPARATION_SIGMA: f64 = 5.0;

/// A burst as a half-open bin range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinRun {
    pub start: usize,
    pub end: usize,
}

/// What [`find_bursts`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstSplit {
    pub runs: Vec<BinRun>,
    /// Smoothing window (bins).
    pub window: usize,
    /// Threshold and the two levels, in samples per bin (after smoothing).
    pub threshold: f64,
    pub low_level: f64,
    pub high_level: f64,
    /// Whether the two levels are distinct (else `runs` is empty).
    pub distinct: bool,
}

/// Find bursts in `counts` (samples per bin); `gap[i]` marks bins to ignore.
pub fn find_bursts(counts: &[u64], gap: &[bool]) -> BurstSplit {
    let valid: Vec<usize> = (0..counts.len()).filter(|&i| !gap[i]).collect();
    let empty = BurstSplit { runs: Vec::new(), window: 1, threshold: 0.0, low_level: 0.0, high_level: 0.0, distinct: false };
    if valid.len() < 4 {
        return empty;
    }
    let mean = valid.iter().map(|&i| counts[i] as f64).sum::<f64>() / valid.len() as f64;
    if mean <= 0.0 {
        return empty;
    }
    let window = ((TARGET_SAMPLES / mean).ceil() as usize).clamp(MIN_WINDOW, MAX_WINDOW).min(valid.len() / 4).max(1);
    // Centered moving average over non-gap bins (per bin, samples/bin).
    let n = counts.len();
    let mut prefix = vec![0.0f64; n + 1];
    let mut pcount = vec![0usize; n + 1];
    for i in 0..n {
        let (c, k) = if gap[i] { (0.0, 0) } else { (counts[i] as f64, 1) };
        prefix[i + 1] = prefix[i] + c;
        pcount[i + 1] = pcount[i] + k;
    }
    let half = window / 2;
    let smooth: Vec<f64> = (0..n)
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + window - half).min(n);
            let k = pcount[hi] - pcount[lo];
            if k == 0 {
                0.0
            } else {
                (prefix[hi] - prefix[lo]) / k as f64
            }
        })
        .collect();
    // Otsu on the smoothed values of valid bins.
    let mut vals: Vec<f64> = valid.iter().map(|&i| smooth[i]).collect();
    vals.sort_by(|a, b| a.total_cmp(b));
    let total: f64 = vals.iter().sum();
    let m = vals.len();
    let (mut best, mut best_k) = (-1.0f64, 0usize);
    let mut left = 0.0;
    for k in 1..m {
        left += vals[k - 1];
        if vals[k] == vals[k - 1] {
            continue;
        }
        let (w0, w1) = (k as f64, (m - k) as f64);
        let (mu0, mu1) = (left / w0, (total - left) / w1);
        let between = w0 * w1 * (mu1 - mu0) * (mu1 - mu0);
        if between > best {
            best = between;
            best_k = k;
        }
    }
    if best_k == 0 {
        return BurstSplit { window, ..empty };
    }
    let low_level = vals[..best_k].iter().sum::<f64>() / best_k as f64;
    let high_level = vals[best_k..].iter().sum::<f64>() / (m - best_k) as f64;
    let threshold = 0.5 * (vals[best_k - 1] + vals[best_k]);
    let sigma = (high_level / window as f64).sqrt();
    let distinct = high_level - low_level > MIN_SEPARATION_SIGMA * sigma.max(1.0 / window as f64);
    let mut split = BurstSplit { runs: Vec::new(), window, threshold, low_level, high_level, distinct };
    if !distinct {
        return split;
    }
    let mut runs: Vec<BinRun> = Vec::new();
    let mut cur: Option<usize> = None;
    for i in 0..=n {
        let high = i < n && !gap[i] && smooth[i] >= threshold;
        match (cur, high) {
            (None, true) => cur = Some(i),
            (Some(s), false) => {
                runs.push(BinRun { start: s, end: i });
                cur = None;
            }
            _ => {}
        }
    }
    // Merge runs separated by short low stretches without a gap bin between them.
    let mut merged: Vec<BinRun> = Vec::new();
    for r in runs {
        if let Some(last) = merged.last_mut() {
            if r.start - last.end < window && !(last.end..r.start).any(|i| gap[i]) {
                last.end = r.end;
                continue;
            }
        }
        merged.push(r);
    }
    split.runs = merged.into_iter().filter(|r| r.end - r.start >= window).collect();
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_levels_and_flat() {
        // 10 bins low (2), 10 high (20), repeated 3 times.
        let mut c = Vec::new();
        for _ in 0..3 {
            c.extend(std::iter::repeat_n(2, 10));
            c.extend(std::iter::repeat_n(20, 10));
        }
        let gap = vec![false; c.len()];
        let s = find_bursts(&c, &gap);
        assert!(s.distinct);
        assert_eq!(s.runs.len(), 3, "{s:?}");
        for (k, r) in s.runs.iter().enumerate() {
            assert!((r.start as i64 - (20 * k + 10) as i64).abs() <= 1, "{r:?}");
            assert!((r.end as i64 - (20 * k + 20) as i64).abs() <= 1, "{r:?}");
        }
        let flat = vec![10u64; 50];
        assert!(find_bursts(&flat, &[false; 50]).runs.is_empty());
        // A gap splits a burst.
        let mut g = vec![false; c.len()];
        g[15] = true;
        assert_eq!(find_bursts(&c, &g).runs.len(), 4);
    }
}
