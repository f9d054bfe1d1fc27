//! The calibration line: elapsed time against number of samples, fitted robustly.
//!
//! # Method: Theil–Sen slope, stratified bootstrap interval
//!
//! The slope is the median of the pairwise slopes `(y_j − y_i) / (x_j − x_i)` over pairs
//! of runs taken at *different* sampling periods (pairs within one period differ in x
//! only by noise, so their slopes are noise divided by a tiny number); the intercept is
//! the median of `y − slope·x`. Why Theil–Sen rather than least squares: on a shared
//! machine a few runs are slowed by someone else's burst of work, and least squares lets
//! one such run tilt the line, while the median of slopes ignores up to ~29% bad points
//! (its breakdown point) and assumes nothing about the noise distribution. Why not Huber
//! IRLS with a sandwich standard error: that needs a scale estimate and asymptotics that
//! 20–40 points do not justify; Theil–Sen has no tuning constant.
//!
//! The 95% interval is a *stratified bootstrap*: each replicate resamples runs with
//! replacement within each period (so every replicate keeps the design: the same
//! periods, the same number of runs at each) and refits; the interval is the 2.5% and
//! 97.5% quantiles of the replicate slopes. The PRNG is seeded, so the same data always
//! gives the same interval. With few runs per period the percentile bootstrap is known
//! to be somewhat narrow; [`FitPolicy`] therefore also requires a good R².
//!
//! R² is `1 − SS_res / SS_tot` of the fitted (Theil–Sen) line over the *inliers*: runs
//! whose residual relative to the fitted time is more than [`OUTLIER_MADS`] robust
//! standard deviations (1.4826 × the median absolute deviation) and more than 2% from
//! the median relative residual are counted
//! as outliers and left out of R² (they never influenced the slope much anyway). On a
//! shared VM a run now and then takes twice its CPU time (a busy hyperthread sibling on
//! the host, invisible from inside); one such run at a short period would otherwise
//! drag R² of an excellent fit below any threshold. [`FitPolicy`] limits how many
//! outliers a fit may have.

use serde::{Deserialize, Serialize};

use crate::stats::{median, percentile_interval, SplitMix64};

/// One run: the number of samples it took and its time (elapsed or CPU time, per the
/// calibration's [`super::Basis`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The sampling period the run used; 0 for an unprofiled run. Runs with the same
    /// group are repeats of one design point.
    pub group: u64,
    pub samples: f64,
    pub time_s: f64,
}

/// A fitted line `time_s = intercept_s + slope_s × samples`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineFit {
    /// Seconds per sample (α).
    pub slope_s: f64,
    /// 95% interval of the slope (stratified bootstrap).
    pub slope_ci_s: (f64, f64),
    pub intercept_s: f64,
    /// R² over the inliers (see the module docs).
    pub r2: f64,
    /// R² over every point.
    pub r2_all: f64,
    /// Points left out of `r2` as outliers.
    pub outliers: usize,
    pub points: usize,
    /// Distinct design points (periods, and the unprofiled runs).
    pub groups: usize,
}

impl LineFit {
    /// α in nanoseconds per sample.
    pub fn alpha_ns(&self) -> f64 {
        self.slope_s * 1e9
    }
    /// The 95% interval of α in nanoseconds.
    pub fn alpha_ci_ns(&self) -> (f64, f64) {
        (self.slope_ci_s.0 * 1e9, self.slope_ci_s.1 * 1e9)
    }
    /// Half the interval's width relative to α (∞ when α ≤ 0).
    pub fn relative_half_width(&self) -> f64 {
        if self.slope_s <= 0.0 {
            f64::INFINITY
        } else {
            (self.slope_ci_s.1 - self.slope_ci_s.0) / 2.0 / self.slope_s
        }
    }
}

/// Theil–Sen slope and intercept over pairs from different groups; `None` when no
/// such pair has distinct x.
pub fn theil_sen(points: &[Point]) -> Option<(f64, f64)> {
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            let dx = b.samples - a.samples;
            if a.group != b.group && dx != 0.0 {
                slopes.push((b.time_s - a.time_s) / dx);
            }
        }
    }
    let slope = median(&slopes)?;
    let resid: Vec<f64> = points.iter().map(|p| p.time_s - slope * p.samples).collect();
    Some((slope, median(&resid)?))
}

/// R² of the line `intercept + slope·x` on `points`.
pub fn r_squared(points: &[Point], slope: f64, intercept: f64) -> f64 {
    let n = points.len() as f64;
    if points.is_empty() {
        return 0.0;
    }
    let mean = points.iter().map(|p| p.time_s).sum::<f64>() / n;
    let ss_tot: f64 = points.iter().map(|p| (p.time_s - mean).powi(2)).sum();
    let ss_res: f64 = points.iter().map(|p| (p.time_s - intercept - slope * p.samples).powi(2)).sum();
    if ss_tot == 0.0 {
        return if ss_res == 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ss_res / ss_tot
}

/// Relative residuals further than this many robust standard deviations from their
/// median mark an outlier...
pub const OUTLIER_MADS: f64 = 5.0;
/// ...provided they are also more than this far off (2%): run-to-run noise below that
/// is never an outlier, however quiet the other runs were.
pub const OUTLIER_MIN_REL: f64 = 0.02;

/// Which points are outliers of the line (see the module docs). Residuals are taken
/// relative to the fitted time, because run-time noise grows with the run time.
pub fn outlier_mask(points: &[Point], slope: f64, intercept: f64) -> Vec<bool> {
    let rel: Vec<f64> = points
        .iter()
        .map(|p| {
            let fit = intercept + slope * p.samples;
            if fit > 0.0 {
                (p.time_s - fit) / fit
            } else {
                0.0
            }
        })
        .collect();
    let Some(med) = median(&rel) else { return Vec::new() };
    let dev: Vec<f64> = rel.iter().map(|r| (r - med).abs()).collect();
    let limit = (OUTLIER_MADS * 1.4826 * median(&dev).unwrap_or(0.0)).max(OUTLIER_MIN_REL);
    dev.iter().map(|d| *d > limit).collect()
}

/// Bootstrap replicates used by [`fit_line`].
pub const BOOTSTRAP_REPLICATES: usize = 1000;
const SEED: u64 = 0x7a11_9f0f;

/// Fit the calibration line (see the module docs). `None` when no two groups differ in
/// their number of samples.
pub fn fit_line(points: &[Point]) -> Option<LineFit> {
    let (slope, intercept) = theil_sen(points)?;
    let mut groups: Vec<u64> = points.iter().map(|p| p.group).collect();
    groups.sort_unstable();
    groups.dedup();
    let members: Vec<Vec<Point>> = groups.iter().map(|g| points.iter().filter(|p| p.group == *g).copied().collect()).collect();
    let mut rng = SplitMix64::new(SEED ^ points.len() as u64);
    let mut reps = Vec::with_capacity(BOOTSTRAP_REPLICATES);
    let mut sample = Vec::with_capacity(points.len());
    for _ in 0..BOOTSTRAP_REPLICATES {
        sample.clear();
        for m in &members {
            for _ in 0..m.len() {
                sample.push(m[rng.below(m.len() as u64) as usize]);
            }
        }
        if let Some((s, _)) = theil_sen(&sample) {
            reps.push(s);
        }
    }
    let slope_ci_s = percentile_interval(reps).unwrap_or((slope, slope));
    let mask = outlier_mask(points, slope, intercept);
    let inliers: Vec<Point> = points.iter().zip(&mask).filter(|(_, o)| !**o).map(|(p, _)| *p).collect();
    Some(LineFit {
        slope_s: slope,
        slope_ci_s,
        intercept_s: intercept,
        r2: r_squared(&inliers, slope, intercept),
        r2_all: r_squared(points, slope, intercept),
        outliers: points.len() - inliers.len(),
        points: points.len(),
        groups: groups.len(),
    })
}

/// When a calibration line is good enough to publish.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitPolicy {
    pub min_points: usize,
    /// Distinct periods (the unprofiled runs count as one).
    pub min_groups: usize,
    /// Largest acceptable 95%-interval half-width, relative to α.
    pub max_relative_half_width: f64,
    /// Minimum R² over the inliers.
    pub min_r2: f64,
    /// Largest share of points that may be outliers.
    pub max_outlier_fraction: f64,
}

impl Default for FitPolicy {
    /// At least 8 runs over 3 design points; α known to ±25% (95%); R² ≥ 0.9 over the
    /// inliers; at most 1 run in 5 an outlier.
    fn default() -> Self {
        FitPolicy { min_points: 8, min_groups: 3, max_relative_half_width: 0.25, min_r2: 0.9, max_outlier_fraction: 0.2 }
    }
}

/// Why a fit was refused. Data, not an error: the caller shows [`Refusal::reason`] and
/// [`Refusal::advice`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub enum Refusal {
    TooFewPoints {
        points: usize,
        groups: usize,
        min_points: usize,
        min_groups: usize,
    },
    /// α ≤ 0, or its interval reaches 0: no per-sample cost is detectable above the noise.
    NoDetectableCost {
        alpha_ns: f64,
        ci_ns: (f64, f64),
    },
    WideInterval {
        alpha_ns: f64,
        ci_ns: (f64, f64),
        relative_half_width: f64,
        max: f64,
    },
    PoorFit {
        r2: f64,
        min_r2: f64,
    },
    TooManyOutliers {
        outliers: usize,
        points: usize,
    },
}

impl Refusal {
    pub fn reason(&self) -> String {
        match self {
            Refusal::TooFewPoints { points, groups, min_points, min_groups } => format!(
                "too few measurements: {points} runs over {groups} periods (need at least {min_points} runs over {min_groups})"
            ),
            Refusal::NoDetectableCost { alpha_ns, ci_ns } => format!(
                "no per-sample cost is detectable above the noise: α = {alpha_ns:.0} ns, 95% interval [{:.0}, {:.0}] ns reaches zero",
                ci_ns.0, ci_ns.1
            ),
            Refusal::WideInterval { alpha_ns, ci_ns, relative_half_width, max } => format!(
                "the noise is too large for the signal: α = {alpha_ns:.0} ns but its 95% interval [{:.0}, {:.0}] ns is ±{:.0}% (limit ±{:.0}%)",
                ci_ns.0,
                ci_ns.1,
                relative_half_width * 100.0,
                max * 100.0
            ),
            Refusal::TooManyOutliers { outliers, points } => format!(
                "{outliers} of {points} runs are far off the line (more than {OUTLIER_MADS} robust standard deviations): the machine's speed changed during the calibration"
            ),
            Refusal::PoorFit { r2, min_r2 } => {
                format!("run time is not linear in the number of samples here: R² = {r2:.3} (need ≥ {min_r2})")
            }
        }
    }

    pub fn advice(&self) -> &'static str {
        match self {
            Refusal::TooFewPoints { .. } => "run more repeats (--repeats) or allow more periods",
            Refusal::NoDetectableCost { .. }
            | Refusal::WideInterval { .. }
            | Refusal::PoorFit { .. }
            | Refusal::TooManyOutliers { .. } => {
                "run more repeats (--repeats), longer runs (--seconds), pin the loop to a CPU (--pin), or calibrate on a quieter machine (check the load average)"
            }
        }
    }
}

/// Accept `fit` under `policy`, or say why not.
pub fn assess(fit: &LineFit, policy: &FitPolicy) -> Result<(), Refusal> {
    if fit.points < policy.min_points || fit.groups < policy.min_groups {
        return Err(Refusal::TooFewPoints {
            points: fit.points,
            groups: fit.groups,
            min_points: policy.min_points,
            min_groups: policy.min_groups,
        });
    }
    if fit.slope_s <= 0.0 || fit.slope_ci_s.0 <= 0.0 {
        return Err(Refusal::NoDetectableCost { alpha_ns: fit.alpha_ns(), ci_ns: fit.alpha_ci_ns() });
    }
    let rhw = fit.relative_half_width();
    if rhw > policy.max_relative_half_width {
        return Err(Refusal::WideInterval {
            alpha_ns: fit.alpha_ns(),
            ci_ns: fit.alpha_ci_ns(),
            relative_half_width: rhw,
            max: policy.max_relative_half_width,
        });
    }
    if fit.outliers as f64 > policy.max_outlier_fraction * fit.points as f64 {
        return Err(Refusal::TooManyOutliers { outliers: fit.outliers, points: fit.points });
    }
    if fit.r2 < policy.min_r2 {
        return Err(Refusal::PoorFit { r2: fit.r2, min_r2: policy.min_r2 });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y = 1.0 s + 300 ns × x, with deterministic pseudo-noise of relative size `noise`.
    fn synthetic(noise: f64, repeats: usize) -> Vec<Point> {
        let mut rng = SplitMix64::new(42);
        let mut pts = Vec::new();
        for (g, x) in [(0u64, 0.0), (128_000, 78_000.0), (32_000, 312_000.0), (8_000, 1_250_000.0), (2_000, 5_000_000.0)] {
            for _ in 0..repeats {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                let y = 1.0 + 300e-9 * x;
                pts.push(Point { group: g, samples: x * (1.0 + 0.001 * u), time_s: y * (1.0 + noise * u) });
            }
        }
        pts
    }

    #[test]
    fn exact_line_is_recovered() {
        let pts = synthetic(0.0, 3);
        let f = fit_line(&pts).unwrap();
        assert!((f.alpha_ns() - 300.0).abs() < 1.0, "{f:?}");
        assert!((f.intercept_s - 1.0).abs() < 1e-3, "{f:?}");
        assert!(f.r2 > 0.9999);
        assert_eq!((f.points, f.groups), (15, 5));
        assert_eq!(assess(&f, &FitPolicy::default()), Ok(()));
    }

    #[test]
    fn noisy_line_interval_covers_truth() {
        let pts = synthetic(0.02, 5);
        let f = fit_line(&pts).unwrap();
        let (lo, hi) = f.alpha_ci_ns();
        assert!(lo < 300.0 && 300.0 < hi, "{f:?}");
        assert!(lo < f.alpha_ns() && f.alpha_ns() < hi);
        assert_eq!(assess(&f, &FitPolicy::default()), Ok(()));
        // Same data, same interval (seeded bootstrap).
        assert_eq!(fit_line(&pts).unwrap(), f);
    }

    #[test]
    fn outliers_do_not_move_theil_sen() {
        let mut pts = synthetic(0.0, 5);
        // Two runs disturbed by another tenant: 40% slower.
        pts[3].time_s *= 1.4;
        pts[17].time_s *= 1.4;
        let f = fit_line(&pts).unwrap();
        assert!((f.alpha_ns() - 300.0).abs() < 15.0, "{f:?}");
        // They are named as outliers and left out of R², which stays high.
        assert_eq!(f.outliers, 2, "{f:?}");
        assert!(f.r2 > 0.99 && f.r2_all < f.r2, "{f:?}");
        assert_eq!(assess(&f, &FitPolicy::default()), Ok(()));
        // Too many disturbed runs: refused.
        for i in [0, 5, 6, 8, 11] {
            pts[i].time_s *= 1.5;
        }
        let f = fit_line(&pts).unwrap();
        let r = assess(&f, &FitPolicy::default()).unwrap_err();
        assert!(matches!(r, Refusal::TooManyOutliers { outliers: 7, points: 25 }), "{r:?}");
        assert!(r.reason().contains("7 of 25 runs"));
    }

    #[test]
    fn refusals() {
        let policy = FitPolicy::default();
        // Few points.
        let f = fit_line(&synthetic(0.0, 1)).unwrap();
        let r = assess(&f, &policy).unwrap_err();
        assert!(matches!(r, Refusal::TooFewPoints { points: 5, .. }), "{r:?}");
        assert!(r.reason().contains("5 runs") && r.advice().contains("--repeats"));
        // Noise far larger than the overhead: the slope's interval is huge or reaches 0.
        let f = fit_line(&synthetic(3.0, 4)).unwrap();
        let r = assess(&f, &policy).unwrap_err();
        assert!(matches!(r, Refusal::NoDetectableCost { .. } | Refusal::WideInterval { .. } | Refusal::PoorFit { .. }), "{r:?}");
        assert!(r.advice().contains("quieter machine"));
        // A flat line: no cost.
        let flat: Vec<Point> = synthetic(0.0, 3).into_iter().map(|p| Point { time_s: 1.0, ..p }).collect();
        let r = assess(&fit_line(&flat).unwrap(), &policy).unwrap_err();
        assert!(matches!(r, Refusal::NoDetectableCost { .. }), "{r:?}");
        assert!(r.reason().contains("no per-sample cost"));
        // A good slope but a poor R²: forced through the policy with a lax interval rule.
        let lax = FitPolicy { max_relative_half_width: 100.0, ..policy };
        let f = LineFit {
            slope_s: 1e-7,
            slope_ci_s: (0.9e-7, 1.1e-7),
            intercept_s: 1.0,
            r2: 0.5,
            r2_all: 0.5,
            outliers: 0,
            points: 20,
            groups: 5,
        };
        assert!(matches!(assess(&f, &lax), Err(Refusal::PoorFit { .. })));
        let wide = LineFit { slope_ci_s: (0.2e-7, 1.8e-7), r2: 0.99, ..f };
        let r = assess(&wide, &policy).unwrap_err();
        assert!(matches!(r, Refusal::WideInterval { .. }) && r.reason().contains("±80%"), "{}", r.reason());
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(fit_line(&[]), None);
        let one_group = [Point { group: 5, samples: 1.0, time_s: 1.0 }, Point { group: 5, samples: 2.0, time_s: 2.0 }];
        assert_eq!(fit_line(&one_group), None);
        assert_eq!(r_squared(&[], 1.0, 0.0), 0.0);
    }
}
