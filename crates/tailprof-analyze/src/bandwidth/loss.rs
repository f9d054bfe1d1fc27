//! The loss model of Larysch (2016, §6.3.2): every PEBS activation loses about `l`
//! events (loads aborted by the assist's machine clear, which then hit in L1, plus the
//! activation delay), so with threshold `t`, `a` activations and `v` events in total
//!
//! ```text
//!   (v − a·l) / t = a   ⇒   l = v/a − t
//! ```
//!
//! and each sample stands for `t + l` events, not `t`: the loss-corrected estimate is the
//! raw one times `(t + l) / t`.
//!
//! `v` comes from the counting sibling when the trace has one (the same event counted
//! without PEBS: the paper's PMC1); `a` is the samples of the sampling event plus the
//! samples the kernel reported lost (LOST_SAMPLES), since those activations happened too.
//! Its uncertainty is taken as Poisson on `a` (95% Garwood interval), which is tight for
//! any real recording. Without a counter the model uses [`DEFAULT_L`] with the bound
//! [[`L_BOUND_LOW`], [`L_BOUND_HIGH`]]: the paper's largest loss on real programs (20
//! events, SPEC FP 2006 cactusADM, Fig. 16) and its worst case, a read loop whose every
//! instruction is an L3-missing load (about 35 events at thresholds ≥ 100, Fig. 15).
//!
//! The model is for PEBS. The interrupt-per-overflow baseline reads the counter after
//! the interrupt entry and so has no activation-delay loss (§6.3.3), IBS and SPE tag
//! ops without a counter threshold: for those the correction is 1 and says why.

use serde::Serialize;

use super::poisson::garwood;

/// Events lost per activation assumed without a counting sibling.
pub const DEFAULT_L: f64 = 20.0;
/// Lower end of the assumed range.
pub const L_BOUND_LOW: f64 = 0.0;
/// Upper end of the assumed range (the paper's worst case).
pub const L_BOUND_HIGH: f64 = 35.0;

/// Where `l` came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LossSource {
    /// `l = v/a − t` from the counting sibling.
    Measured {
        /// Events counted by the sibling (scaled when it was multiplexed).
        counted_events: f64,
        /// Activations: samples + lost samples of the sampling event.
        activations: u64,
        /// The sibling's counter ran only part of the time it was enabled.
        multiplexed: bool,
    },
    /// Given by the user (`--loss-l`).
    Given,
    /// [`DEFAULT_L`] within [[`L_BOUND_LOW`], [`L_BOUND_HIGH`]].
    Default,
    /// No correction (not a PEBS recording, or no fixed period).
    NotApplicable { reason: String },
}

/// The model's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossModel {
    /// Threshold (the fixed sampling period), 0 when there is none.
    pub t: f64,
    /// Events lost per activation, with its range.
    pub l: f64,
    pub l_low: f64,
    pub l_high: f64,
    /// `(t + l) / t` and the same at `l_low` / `l_high`.
    pub factor: f64,
    pub factor_low: f64,
    pub factor_high: f64,
    pub source: LossSource,
}

impl LossModel {
    fn from_l(t: f64, l: f64, l_low: f64, l_high: f64, source: LossSource) -> LossModel {
        let f = |l: f64| (t + l) / t;
        LossModel { t, l, l_low, l_high, factor: f(l), factor_low: f(l_low), factor_high: f(l_high), source }
    }

    /// No correction, for `reason`.
    pub fn none(t: f64, reason: impl Into<String>) -> LossModel {
        LossModel {
            t,
            l: 0.0,
            l_low: 0.0,
            l_high: 0.0,
            factor: 1.0,
            factor_low: 1.0,
            factor_high: 1.0,
            source: LossSource::NotApplicable { reason: reason.into() },
        }
    }

    /// `l` measured from `v` counted events and `a` activations at threshold `t`.
    /// Negative estimates (a counter that saw fewer events than the samples claim) are
    /// clamped to 0.
    pub fn measured(t: f64, v: f64, a: u64, multiplexed: bool) -> LossModel {
        let source = LossSource::Measured { counted_events: v, activations: a, multiplexed };
        if a == 0 || t <= 0.0 {
            return LossModel { source, ..LossModel::none(t, "no activations") };
        }
        let (a_lo, a_hi) = garwood(a, 0.05);
        let l = (v / a as f64 - t).max(0.0);
        let l_low = (v / a_hi - t).max(0.0);
        let l_high = if a_lo > 0.0 { (v / a_lo - t).max(0.0) } else { f64::INFINITY };
        LossModel::from_l(t, l, l_low, l_high, source)
    }

    pub fn given(t: f64, l: f64) -> LossModel {
        LossModel::from_l(t, l, l, l, LossSource::Given)
    }

    pub fn default_for(t: f64) -> LossModel {
        LossModel::from_l(t, DEFAULT_L, L_BOUND_LOW, L_BOUND_HIGH, LossSource::Default)
    }

    pub fn applies(&self) -> bool {
        !matches!(self.source, LossSource::NotApplicable { .. })
    }

    /// One line: "l = 35.2 [34.9, 35.6] events per activation, measured (v = ..., a = ...): ×1.352".
    pub fn describe(&self) -> String {
        match &self.source {
            LossSource::NotApplicable { reason } => format!("no loss correction: {reason}"),
            LossSource::Measured { counted_events, activations, multiplexed } => format!(
                "l = {:.1} [{:.1}, {:.1}] events lost per activation, measured from the counting sibling (v = {:.0} \
                 events, a = {} activations, t = {:.0}{}): corrected = raw × {:.3}",
                self.l,
                self.l_low,
                self.l_high,
                counted_events,
                activations,
                self.t,
                if *multiplexed { ", counter multiplexed: scaled" } else { "" },
                self.factor
            ),
            LossSource::Given => {
                format!("l = {:.1} events lost per activation (given), t = {:.0}: corrected = raw × {:.3}", self.l, self.t, self.factor)
            }
            LossSource::Default => format!(
                "l = {:.0} events lost per activation assumed (no counting sibling in the trace; range [{:.0}, {:.0}] from \
                 Larysch 2016 Fig. 15/16), t = {:.0}: corrected = raw × {:.3} [{:.3}, {:.3}]",
                self.l, self.l_low, self.l_high, self.t, self.factor, self.factor_low, self.factor_high
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_inverts() {
        // 1e6 activations at t = 100 losing 35 each: v = a (t + l).
        let m = LossModel::measured(100.0, 135e6, 1_000_000, false);
        assert!((m.l - 35.0).abs() < 1e-9);
        assert!(m.l_low < 35.0 && m.l_high > 35.0 && m.l_high - m.l_low < 1.0, "{m:?}");
        assert!((m.factor - 1.35).abs() < 1e-12);
        assert!(m.describe().contains("measured"));
        let d = LossModel::default_for(1009.0);
        assert_eq!((d.l, d.factor_low), (DEFAULT_L, 1.0));
        assert!(d.factor_high > d.factor);
        assert!(!LossModel::none(10.0, "x").applies());
        assert_eq!(LossModel::measured(100.0, 50.0, 1, false).l, 0.0);
    }
}
