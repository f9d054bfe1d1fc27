//! `tailprof items`: per-item tables and JSON, and `--explain`.
//!
//! Text ([`render_items`]): a summary block (items, samples outside any item, lost and
//! unmatched markers, which estimate is shown and the sample interval), warnings, one
//! row per item (id, class, duration, samples, anomaly score, `SLOW` flag, top three
//! functions with their estimates; `~` marks estimates resting on fewer than
//! `min_reliable_samples` samples), then per-class statistics and the anomalous items
//! with the functions responsible.
//!
//! JSON ([`items_json`]): the [`ItemsReport`] as an object, so at least
//! `{"items": [{"id", "class", "duration_ns", "samples", "anomaly_score", "anomalous",
//! "responsible", "functions": [{"name", "samples", "est_ns", "span_ns", "reliable", ...}]}],
//! "outside_samples": N, ...}` plus `warnings`; with a `top` limit, `more_items` says how
//! many were left out.
//!
//! `--explain` ([`render_explanation`], [`explanation_json`]): the item's per-function
//! time beside the class median, the delta, its share of the excess, and the functions
//! named responsible.

use crate::table::{render_table, Align};
use std::cmp::Ordering;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;
use tailprof_analyze::items::{Explanation, ItemRow, ItemsReport};

use crate::fmt::{duration, share, thousands};
use crate::PresentError;

/// Order of the item rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemSort {
    /// Longest first.
    #[default]
    Duration,
    /// Highest anomaly score first.
    Anomaly,
    Id,
    /// Begin time (the report's own order).
    Begin,
}

/// Options of [`render_items`] and [`items_json`].
#[derive(Debug, Clone, Default)]
pub struct ItemsView {
    /// Show only the first N items after sorting; `None`: all.
    pub top: Option<usize>,
    pub sort: ItemSort,
}

/// One warning about an items report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemsWarning {
    /// `lost_markers`, `unmatched_markers`, `open_at_end`, `no_interval`, `register_mode`.
    pub kind: &'static str,
    pub message: String,
}

/// Things a reader of an items report must not miss.
pub fn items_warnings(r: &ItemsReport) -> Vec<ItemsWarning> {
    let mut out = Vec::new();
    let mut w = |kind, message| out.push(ItemsWarning { kind, message });
    if r.lost_markers > 0 {
        w(
            "lost_markers",
            format!(
                "{} markers were dropped (a marker ring was full): some items are missing or merged",
                thousands(r.lost_markers)
            ),
        );
    }
    if r.unmatched_markers > 0 {
        w(
            "unmatched_markers",
            format!("{} markers matched nothing (an end without its begin, or a begin never ended)", thousands(r.unmatched_markers)),
        );
    }
    if r.open_at_end > 0 {
        w("open_at_end", format!("{} items were still open when the trace ended; their end is the trace's end", r.open_at_end));
    }
    if r.mean_interval_ns <= 0.0 {
        w("no_interval", "the sample interval is unknown (too few samples): count x interval estimates are 0".into());
    }
    if r.duration_source == "samples" {
        w(
            "register_mode",
            format!("{}: no markers exist, so an item's duration is its first..last sample", r.mode),
        );
    }
    out
}

/// Item rows in the requested order, limited to `top`.
pub fn sorted_items<'a>(r: &'a ItemsReport, view: &ItemsView) -> Vec<&'a ItemRow> {
    let mut v: Vec<&ItemRow> = r.items.iter().collect();
    let key = |a: &&ItemRow, b: &&ItemRow| -> Ordering {
        match view.sort {
            ItemSort::Duration => b.duration_ns.cmp(&a.duration_ns),
            ItemSort::Anomaly => b.anomaly_score.total_cmp(&a.anomaly_score),
            ItemSort::Id => a.id.cmp(&b.id),
            ItemSort::Begin => Ordering::Equal,
        }
        .then(a.begin_ns.cmp(&b.begin_ns))
    };
    v.sort_by(key);
    if let Some(n) = view.top {
        v.truncate(n);
    }
    v
}

/// An estimate in ns, `~`-prefixed when unreliable.
fn est(ns: f64, reliable: bool) -> String {
    format!("{}{}", if reliable { "" } else { "~" }, duration(ns.max(0.0).round() as u64))
}

/// `+1.20 ms` / `-300 ns`.
fn signed(ns: f64) -> String {
    let sign = if ns < 0.0 { "-" } else { "+" };
    format!("{sign}{}", duration(ns.abs().round() as u64))
}

fn class_name(c: &Option<String>) -> &str {
    c.as_deref().unwrap_or("-")
}

/// Left/right-aligned columns (`true` = right), rendered by the shared table code.
fn table(out: &mut String, head: &[(&str, bool)], rows: &[Vec<String>]) {
    let head: Vec<(&str, Align)> =
        head.iter().map(|&(h, right)| (h, if right { Align::Right } else { Align::Left })).collect();
    render_table(out, &head, rows);
}

fn summary(out: &mut String, r: &ItemsReport) {
    let anomalous = r.items.iter().filter(|i| i.anomalous).count();
    let _ = writeln!(
        out,
        "# Items:     {} ({} anomalous) in {} classes; mode: {}",
        thousands(r.items.len() as u64),
        anomalous,
        r.classes.len(),
        r.mode
    );
    let _ = writeln!(
        out,
        "# Samples:   {} of {} (outside any item: {}, {})",
        thousands(r.total_samples - r.outside_samples),
        r.event,
        thousands(r.outside_samples),
        share(r.outside_samples, r.total_samples)
    );
    let _ = writeln!(
        out,
        "# Markers:   {} (lost {}, unmatched {}); item time from {}",
        thousands(r.markers),
        thousands(r.lost_markers),
        thousands(r.unmatched_markers),
        r.duration_source
    );
    let src = if r.interval_source == "period" { "the sampling period" } else { "median spacing of samples" };
    let _ = writeln!(
        out,
        "# Estimate:  {}; interval {} ({src}); ~ = fewer than {} samples",
        r.shown_estimator.describe(),
        duration(r.mean_interval_ns.round() as u64),
        r.min_reliable_samples
    );
    for w in items_warnings(r) {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
}

/// The `tailprof items` table (see the module docs).
pub fn render_items(r: &ItemsReport, view: &ItemsView) -> String {
    let mut out = String::new();
    summary(&mut out, r);
    out.push('\n');
    let e = r.shown_estimator;
    let shown = sorted_items(r, view);
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|it| {
            let top: Vec<String> = it
                .functions
                .iter()
                .take(3)
                .map(|f| format!("{} {}", f.name, est(f.shown_ns(e), f.reliable)))
                .collect();
            vec![
                it.id.to_string(),
                class_name(&it.class).to_owned(),
                format!("{}{}", duration(it.duration_ns), if it.open_at_end { " (open)" } else { "" }),
                thousands(it.samples),
                format!("{:.1}", it.anomaly_score),
                if it.anomalous { "SLOW".into() } else { String::new() },
                top.join(", "),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            ("ID", true),
            ("Class", false),
            ("Duration", true),
            ("Samples", true),
            ("Score", true),
            ("Flag", false),
            ("Top functions", false),
        ],
        &rows,
    );
    if shown.len() < r.items.len() {
        let _ = writeln!(out, "({} more items; --top 0 shows all)", thousands((r.items.len() - shown.len()) as u64));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = r
        .classes
        .iter()
        .map(|c| {
            vec![
                class_name(&c.class).to_owned(),
                thousands(c.items as u64),
                duration(c.median_duration_ns),
                duration(c.mad_ns),
                c.anomalous.to_string(),
            ]
        })
        .collect();
    table(&mut out, &[("Class", false), ("Items", true), ("Median", true), ("MAD", true), ("Anomalous", true)], &rows);
    let slow: Vec<&ItemRow> = r.items.iter().filter(|i| i.anomalous).collect();
    if !slow.is_empty() {
        let _ = writeln!(out, "\nAnomalous items (duration > median + {} x 1.4826 MAD):", r.mad_k);
        for it in slow {
            let median = r.class_stats(&it.class).map_or(0, |c| c.median_duration_ns);
            let _ = writeln!(
                out,
                "  item {} ({}): {} vs median {} (score {:.1}); responsible: {}",
                it.id,
                class_name(&it.class),
                duration(it.duration_ns),
                duration(median),
                it.anomaly_score,
                if it.responsible.is_empty() { "-".into() } else { it.responsible.join(", ") }
            );
        }
    }
    out
}

/// `tailprof items --json`.
pub fn items_json(r: &ItemsReport, view: &ItemsView) -> Result<Value, PresentError> {
    let mut v = serde_json::to_value(r)?;
    let obj = v.as_object_mut().expect("ItemsReport serializes to an object");
    let shown = sorted_items(r, view);
    obj.insert("items".into(), serde_json::to_value(&shown)?);
    if shown.len() < r.items.len() {
        obj.insert("more_items".into(), Value::from(r.items.len() - shown.len()));
    }
    obj.insert("warnings".into(), serde_json::to_value(items_warnings(r))?);
    Ok(v)
}

/// [`items_json`], pretty-printed.
pub fn items_json_string(r: &ItemsReport, view: &ItemsView) -> Result<String, PresentError> {
    Ok(serde_json::to_string_pretty(&items_json(r, view)?)?)
}

/// `tailprof items --explain ID`.
pub fn render_explanation(x: &Explanation) -> String {
    let mut out = String::new();
    let it = &x.item;
    let b = &x.baseline;
    let _ = writeln!(
        out,
        "# Item {} (class {}, pid {}, tid {}): {}, {} samples, anomaly score {:.1}{}",
        it.id,
        class_name(&it.class),
        it.pid,
        it.tid,
        duration(it.duration_ns),
        thousands(it.samples),
        it.anomaly_score,
        if it.anomalous { " (ANOMALOUS)" } else { "" }
    );
    let pct = if b.median_duration_ns == 0 { 0.0 } else { 100.0 * x.excess_ns as f64 / b.median_duration_ns as f64 };
    let _ = writeln!(
        out,
        "# Class {}: {} items, median duration {}; this item: {} ({:+.0}%)",
        class_name(&b.class),
        b.items,
        duration(b.median_duration_ns),
        signed(x.excess_ns as f64),
        pct
    );
    let _ = writeln!(
        out,
        "# Estimate: {}; Median = per-function median over the class (0 where absent); ~ = few samples",
        x.estimator.describe()
    );
    out.push('\n');
    let rows: Vec<Vec<String>> = x
        .diffs
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                est(d.item_ns, d.reliable || d.item_ns == 0.0),
                duration(d.median_ns.round() as u64),
                signed(d.delta_ns),
                if d.share_of_excess > 0.0 { format!("{:.1}%", 100.0 * d.share_of_excess) } else { String::new() },
            ]
        })
        .collect();
    table(
        &mut out,
        &[("Function", false), ("Item", true), ("Median", true), ("Delta", true), ("Share of excess", true)],
        &rows,
    );
    out.push('\n');
    if x.responsible.is_empty() {
        out.push_str("Responsible: none (no function takes longer than in the median item)\n");
    } else {
        let covered: f64 =
            x.diffs.iter().filter(|d| x.responsible.contains(&d.name)).map(|d| d.share_of_excess).sum();
        let _ = writeln!(out, "Responsible: {} ({:.0}% of the excess)", x.responsible.join(", "), 100.0 * covered);
    }
    out
}

/// `tailprof items --explain ID --json`: the [`Explanation`] as an object.
pub fn explanation_json(x: &Explanation) -> Result<Value, PresentError> {
    Ok(serde_json::to_value(x)?)
}

/// [`explanation_json`], pretty-printed.
pub fn explanation_json_string(x: &Explanation) -> Result<String, PresentError> {
    Ok(serde_json::to_string_pretty(&explanation_json(x)?)?)
}
