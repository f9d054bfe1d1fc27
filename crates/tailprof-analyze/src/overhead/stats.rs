//! Small robust-statistics helpers: medians, quantiles, and a seeded PRNG for the
//! bootstraps (results are reproducible run to run: same input, same interval).

/// Median of `xs` (NaNs ignored); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, 0.5))
}

/// The `q` quantile of sorted, NaN-free data, interpolating linearly between order
/// statistics (Hyndman & Fan type 7, what R and NumPy use by default).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// The central 95% of bootstrap replicates (percentile interval); `None` when empty.
pub fn percentile_interval(mut reps: Vec<f64>) -> Option<(f64, f64)> {
    reps.retain(|x| x.is_finite());
    if reps.is_empty() {
        return None;
    }
    reps.sort_by(f64::total_cmp);
    Some((quantile_sorted(&reps, 0.025), quantile_sorted(&reps, 0.975)))
}

/// SplitMix64 (Steele, Lea & Flood 2014): tiny, fast, good enough to draw bootstrap
/// indices; seeded so every run of the same data gives the same interval.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for our sizes).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_quantiles() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0, 3.0]), Some(2.0));
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&s, 0.0), 1.0);
        assert_eq!(quantile_sorted(&s, 1.0), 5.0);
        assert_eq!(quantile_sorted(&s, 0.25), 2.0);
        assert!((quantile_sorted(&s, 0.1) - 1.4).abs() < 1e-12);
    }

    #[test]
    fn prng_is_uniform_enough_and_seeded() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            counts[x] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn interval_of_replicates() {
        let reps: Vec<f64> = (0..=1000).map(|i| i as f64).collect();
        let (lo, hi) = percentile_interval(reps).unwrap();
        assert!((lo - 25.0).abs() < 1e-9 && (hi - 975.0).abs() < 1e-9);
        assert_eq!(percentile_interval(vec![f64::NAN]), None);
    }
}
