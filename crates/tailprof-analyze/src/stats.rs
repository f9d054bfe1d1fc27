//! The statistics every analysis shares, each written once: [`median`], [`mean`] and
//! [`mean_sd`] of samples (NaNs ignored), the in-place [`median_u64`] of durations and
//! spacings, [`median_with_zeros`] of per-item values where absent items count 0,
//! quantiles, and the overhead bootstraps' own seeded PRNG ([`SplitMix64`]; results are
//! reproducible run to run: same input, same interval). The one rule for empty input:
//! every median and mean returns `None`, and the caller says what nothing means.

/// Median of `xs` (NaNs ignored); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, 0.5))
}

/// Median of `v` (the two middle values averaged, rounding down), reordering it in
/// linear time; `None` when empty.
pub fn median_u64(v: &mut [u64]) -> Option<u64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (_, &mut hi, _) = v.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        return Some(hi);
    }
    let lo = *v[..n / 2].iter().max().expect("non-empty lower half");
    Some(lo + (hi - lo) / 2)
}

/// Median over `n` items of which `present` hold these values and the other
/// `n - present.len()` count 0, without materializing the zeros (reorders `present`);
/// `None` when `n == 0`.
pub fn median_with_zeros(present: &mut [f64], n: usize) -> Option<f64> {
    if n == 0 {
        return None;
    }
    present.sort_unstable_by(f64::total_cmp);
    let zeros = n.saturating_sub(present.len());
    let kth = |k: usize| if k < zeros { 0.0 } else { present.get(k - zeros).copied().unwrap_or(0.0) };
    Some(if n % 2 == 1 { kth(n / 2) } else { (kth(n / 2 - 1) + kth(n / 2)) / 2.0 })
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

/// Mean of `xs` (NaNs ignored); `None` when empty.
pub fn mean(xs: &[f64]) -> Option<f64> {
    let (s, n) = xs.iter().filter(|x| !x.is_nan()).fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// Mean and population standard deviation of `xs` (NaNs ignored); `None` when empty.
pub fn mean_sd(xs: &[f64]) -> Option<(f64, f64)> {
    let m = mean(xs)?;
    let v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
    Some((m, var.sqrt()))
}

/// Seeded PRNG for bootstrap indices (SplitMix64, Steele, Lea & Flood 2014), so every
/// run over the same data gives the same interval. The bootstraps' own: the test-trace
/// synthesizer (`tailprof_format::synth`) may change its generator without moving any
/// published interval.
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

    /// Uniform in `0..n` (multiply-shift; `n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_and_zero_padded_medians() {
        assert_eq!(median_u64(&mut []), None);
        assert_eq!(median_u64(&mut [5]), Some(5));
        assert_eq!(median_u64(&mut [9, 1, 5]), Some(5));
        assert_eq!(median_u64(&mut [1, 9, 3, 5]), Some(4));
        assert_eq!(median_with_zeros(&mut [], 0), None);
        assert_eq!(median_with_zeros(&mut [5.0], 3), Some(0.0));
        assert_eq!(median_with_zeros(&mut [5.0, 7.0], 3), Some(5.0));
        assert_eq!(median_with_zeros(&mut [5.0, 7.0, 9.0], 3), Some(7.0));
        assert_eq!(median_with_zeros(&mut [5.0, 7.0], 2), Some(6.0));
        assert_eq!(median_with_zeros(&mut [4.0, 8.0], 4), Some(2.0));
        assert_eq!(median_with_zeros(&mut [1.0, 9.0, 4.0], 4), Some(2.5));
    }

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
    fn means_share_the_empty_rule() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean_sd(&[]), None);
        assert_eq!(mean(&[f64::NAN]), None);
        assert_eq!(mean(&[1.0, 2.0, f64::NAN, 3.0]), Some(2.0));
        assert_eq!(mean_sd(&[1.0, 3.0]), Some((2.0, 1.0)));
    }

    #[test]
    fn prng_known_values() {
        // The reference SplitMix64 sequence for seed 0 (published test vector), so the
        // bootstrap intervals stay what they were.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn prng_is_uniform_enough_and_seeded() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            counts[x as usize] += 1;
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
