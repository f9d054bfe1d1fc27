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

/// Seeded PRNG for bootstrap indices (SplitMix64, shared with the format crate's
/// synthetic data), so every run over the same data gives the same interval.
pub use tailprof_format::synth::Rng as SplitMix64;

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
