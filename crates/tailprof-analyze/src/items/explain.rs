//! Why was this item slow: its per-function time beside the median item of its class.
//!
//! The class baseline ([`class_baseline`]) takes, per function, the median over all
//! items of the class of that function's shown estimate, counting 0 for items where the
//! function has no samples (so a function that only runs in cold items has median 0).
//! The median duration is the class median.
//!
//! Each function's `delta_ns` is item − median; `share_of_excess` is its delta over the
//! sum of all positive deltas. The responsible functions ([`pick_responsible`]) are the
//! largest positive deltas, taken in order until they cover `responsible_share` of that
//! sum (at least one, at most [`super::MAX_RESPONSIBLE`]). Anomaly flagging
//! ([`super::anomaly`]) and `tailprof items --explain` share this code.

use std::collections::HashMap;

use serde::Serialize;

use super::{Estimator, ItemRow, ItemsReport, MAX_RESPONSIBLE};
use crate::stats::{median_u64, median_with_zeros};
use crate::AnalyzeError;

/// The median item of a class, per function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    pub class: Option<String>,
    /// Items in the class.
    pub items: usize,
    pub median_duration_ns: u64,
    /// Functions with a non-zero median, largest first.
    pub functions: Vec<BaselineFunction>,
}

/// One function of a [`Baseline`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineFunction {
    pub name: String,
    /// Median over the class's items of the function's shown estimate.
    pub median_ns: f64,
    /// Items of the class in which the function has samples.
    pub present_in: usize,
}

/// One function's time in the item against the class median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDiff {
    pub name: String,
    pub item_ns: f64,
    pub median_ns: f64,
    /// item_ns − median_ns.
    pub delta_ns: f64,
    /// delta / sum of positive deltas (0 for non-positive deltas).
    pub share_of_excess: f64,
    /// The item's estimate rests on at least `min_reliable_samples` samples.
    pub reliable: bool,
    /// `file:line` of the function, when known (a JIT function's jitdump DEBUG_INFO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// An item explained against its class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub item: ItemRow,
    pub baseline: Baseline,
    /// duration − class median duration.
    pub excess_ns: i64,
    pub estimator: Estimator,
    /// Sorted by delta, largest first.
    pub diffs: Vec<FunctionDiff>,
    /// The functions responsible for the excess ([`pick_responsible`]); empty when the
    /// item is not slower than its class median (`excess_ns <= 0`).
    pub responsible: Vec<String>,
}

/// Per-function medians of the items of `class` (see the module docs).
pub fn class_baseline(items: &[ItemRow], class: &Option<String>, e: Estimator) -> Baseline {
    let members: Vec<&ItemRow> = items.iter().filter(|i| &i.class == class).collect();
    let n = members.len();
    let mut durations: Vec<u64> = members.iter().map(|i| i.duration_ns).collect();
    let median_duration_ns = median_u64(&mut durations).unwrap_or(0);
    let mut per_fn: HashMap<&str, Vec<f64>> = HashMap::new();
    for it in &members {
        for f in &it.functions {
            per_fn.entry(f.name.as_str()).or_default().push(f.shown_ns(e));
        }
    }
    let mut functions: Vec<BaselineFunction> = per_fn
        .into_iter()
        .map(|(name, mut v)| {
            let present_in = v.len();
            BaselineFunction { name: name.to_owned(), median_ns: median_with_zeros(&mut v, n).unwrap_or(0.0), present_in }
        })
        .filter(|f| f.median_ns > 0.0)
        .collect();
    functions.sort_by(|a, b| b.median_ns.total_cmp(&a.median_ns).then_with(|| a.name.cmp(&b.name)));
    Baseline { class: class.clone(), items: n, median_duration_ns, functions }
}

/// Per-function differences of `item` against `base`, largest delta first.
pub fn diffs(item: &ItemRow, base: &Baseline, e: Estimator) -> Vec<FunctionDiff> {
    let mut out: Vec<FunctionDiff> = Vec::new();
    let median: HashMap<&str, f64> = base.functions.iter().map(|f| (f.name.as_str(), f.median_ns)).collect();
    let mut seen: HashMap<&str, ()> = HashMap::new();
    for f in &item.functions {
        seen.insert(f.name.as_str(), ());
        let m = median.get(f.name.as_str()).copied().unwrap_or(0.0);
        let v = f.shown_ns(e);
        out.push(FunctionDiff {
            name: f.name.clone(),
            item_ns: v,
            median_ns: m,
            delta_ns: v - m,
            share_of_excess: 0.0,
            reliable: f.reliable,
            source: f.source.clone(),
        });
    }
    for f in &base.functions {
        if !seen.contains_key(f.name.as_str()) {
            out.push(FunctionDiff {
                name: f.name.clone(),
                item_ns: 0.0,
                median_ns: f.median_ns,
                delta_ns: -f.median_ns,
                share_of_excess: 0.0,
                reliable: false,
                source: None,
            });
        }
    }
    let positive: f64 = out.iter().map(|d| d.delta_ns.max(0.0)).sum();
    if positive > 0.0 {
        for d in &mut out {
            d.share_of_excess = d.delta_ns.max(0.0) / positive;
        }
    }
    out.sort_by(|a, b| b.delta_ns.total_cmp(&a.delta_ns).then_with(|| a.name.cmp(&b.name)));
    out
}

/// The largest positive deltas covering `share` of the positive excess (see module docs).
pub fn pick_responsible(diffs: &[FunctionDiff], share: f64) -> Vec<String> {
    let mut out = Vec::new();
    let mut covered = 0.0;
    for d in diffs.iter().filter(|d| d.delta_ns > 0.0) {
        if out.len() >= MAX_RESPONSIBLE || (!out.is_empty() && covered >= share) {
            break;
        }
        covered += d.share_of_excess;
        out.push(d.name.clone());
    }
    out
}

/// Explain item `id` (the first item with that id) against the median of its class.
pub fn explain(report: &ItemsReport, id: u64) -> Result<Explanation, AnalyzeError> {
    let item = report.item(id).ok_or(AnalyzeError::NoSuchItem { id })?;
    let e = report.shown_estimator;
    let baseline = class_baseline(&report.items, &item.class, e);
    let diffs = diffs(item, &baseline, e);
    let excess_ns = item.duration_ns as i64 - baseline.median_duration_ns as i64;
    // An item no slower than its class median has no excess for a function to be
    // responsible for (its positive deltas are its mix of work, not a slowdown).
    let responsible = if excess_ns > 0 { pick_responsible(&diffs, report.responsible_share) } else { Vec::new() };
    Ok(Explanation { item: item.clone(), excess_ns, baseline, estimator: e, diffs, responsible })
}
