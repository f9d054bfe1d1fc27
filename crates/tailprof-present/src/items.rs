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
use serde_json::{json, Value};
use tailprof_analyze::items::{Explanation, ItemRow, ItemsReport};
use tailprof_analyze::stack_explain::{time_split, StackExplanation};
use tailprof_analyze::causes::{CauseExplanation, Interference, InterferenceRow, PathState};
use tailprof_analyze::stacks::StackProfile;

use crate::fmt::{duration, share, thousands};
use crate::stacks::{off_row_line, stack_line, LINE_FRAMES};
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
    /// Only items flagged slow (`--slow`).
    pub slow_only: bool,
    /// Only these items (`--item ID`); empty: all.
    pub only: Vec<u64>,
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
            format!(
                "{} markers matched nothing (an end without its begin, or a begin never ended)",
                thousands(r.unmatched_markers)
            ),
        );
    }
    if r.open_at_end > 0 {
        w(
            "open_at_end",
            format!(
                "{} items were still open when the trace ended; their end is the trace's end",
                r.open_at_end
            ),
        );
    }
    if r.mean_interval_ns <= 0.0 {
        w(
            "no_interval",
            "the sample interval is unknown (too few samples): count x interval estimates are 0"
                .into(),
        );
    }
    if r.duration_source == "samples" {
        w(
            "register_mode",
            format!(
                "{}: no markers exist, so an item's duration is its first..last sample",
                r.mode
            ),
        );
    }
    out
}

/// Item rows in the requested order, limited to `top`.
pub fn sorted_items<'a>(r: &'a ItemsReport, view: &ItemsView) -> Vec<&'a ItemRow> {
    let mut v: Vec<&ItemRow> = r
        .items
        .iter()
        .filter(|i| {
            (!view.slow_only || i.anomalous) && (view.only.is_empty() || view.only.contains(&i.id))
        })
        .collect();
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
    format!(
        "{}{}",
        if reliable { "" } else { "~" },
        duration(ns.max(0.0).round() as u64)
    )
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
    let head: Vec<(&str, Align)> = head
        .iter()
        .map(|&(h, right)| (h, if right { Align::Right } else { Align::Left }))
        .collect();
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
    let src = if r.interval_source == "period" {
        "the sampling period"
    } else {
        "median spacing of samples"
    };
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
                format!(
                    "{}{}",
                    duration(it.duration_ns),
                    if it.open_at_end { " (open)" } else { "" }
                ),
                thousands(it.samples),
                format!("{:.1}", it.anomaly_score),
                if it.anomalous {
                    "SLOW".into()
                } else {
                    String::new()
                },
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
    let matching = sorted_items(
        r,
        &ItemsView {
            top: None,
            ..view.clone()
        },
    )
    .len();
    if shown.len() < matching {
        let _ = writeln!(
            out,
            "({} more items; --top 0 shows all)",
            thousands((matching - shown.len()) as u64)
        );
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
    table(
        &mut out,
        &[
            ("Class", false),
            ("Items", true),
            ("Median", true),
            ("MAD", true),
            ("Anomalous", true),
        ],
        &rows,
    );
    let slow: Vec<&ItemRow> = r.items.iter().filter(|i| i.anomalous).collect();
    if !slow.is_empty() {
        let _ = writeln!(
            out,
            "\nAnomalous items (duration > median + {} x 1.4826 MAD):",
            r.mad_k
        );
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
                if it.responsible.is_empty() {
                    "-".into()
                } else {
                    it.responsible.join(", ")
                }
            );
            let excess = it.duration_ns.saturating_sub(median);
            let resolution = resolution_ns(r);
            if (excess as f64) < resolution {
                let _ = writeln!(
                    out,
                    "    (its excess {} is below what sampling resolves, {} = {} samples x {}: the split by function is noise)",
                    duration(excess),
                    duration(resolution as u64),
                    r.min_reliable_samples.max(1),
                    duration(r.mean_interval_ns as u64)
                );
            }
        }
    }
    out
}

/// The smallest excess over the class median the sampling resolves:
/// `min_reliable_samples` sample intervals (as [`tailprof_analyze::stack_explain`]).
pub fn resolution_ns(r: &ItemsReport) -> f64 {
    r.min_reliable_samples.max(1) as f64 * r.mean_interval_ns
}

/// `tailprof items --json`.
pub fn items_json(r: &ItemsReport, view: &ItemsView) -> Result<Value, PresentError> {
    let mut v = serde_json::to_value(r)?;
    let obj = v
        .as_object_mut()
        .expect("ItemsReport serializes to an object");
    let shown = sorted_items(r, view);
    obj.insert("items".into(), serde_json::to_value(&shown)?);
    let matching = sorted_items(
        r,
        &ItemsView {
            top: None,
            ..view.clone()
        },
    )
    .len();
    if shown.len() < matching {
        obj.insert("more_items".into(), Value::from(matching - shown.len()));
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
    let pct = if b.median_duration_ns == 0 {
        0.0
    } else {
        100.0 * x.excess_ns as f64 / b.median_duration_ns as f64
    };
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
                if d.share_of_excess > 0.0 {
                    format!("{:.1}%", 100.0 * d.share_of_excess)
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            ("Function", false),
            ("Item", true),
            ("Median", true),
            ("Delta", true),
            ("Share of excess", true),
        ],
        &rows,
    );
    out.push('\n');
    if x.excess_ns <= 0 {
        let took = match x.excess_ns {
            0 => "took its class median".to_owned(),
            e => format!(
                "took {} less than its class median",
                duration(e.unsigned_abs())
            ),
        };
        let _ = writeln!(
            out,
            "Responsible: none (this item {took}: there is no excess to explain)"
        );
    } else if x.responsible.is_empty() {
        out.push_str("Responsible: none (no function takes longer than in the median item)\n");
    } else {
        let covered: f64 = x
            .diffs
            .iter()
            .filter(|d| x.responsible.contains(&d.name))
            .map(|d| d.share_of_excess)
            .sum();
        // How much evidence: the item's samples in the responsible functions.
        let samples: u64 = it
            .functions
            .iter()
            .filter(|f| x.responsible.contains(&f.name))
            .map(|f| f.samples)
            .sum();
        let few = x
            .diffs
            .iter()
            .filter(|d| x.responsible.contains(&d.name))
            .any(|d| !d.reliable);
        let evidence = match (samples, few) {
            (1, _) => "; from 1 sample: too few to tell".to_owned(),
            (n, true) => format!("; from {n} samples, some too few to tell (~)"),
            (n, false) => format!("; from {n} samples"),
        };
        let _ = writeln!(
            out,
            "Responsible: {} ({:.0}% of the excess{evidence})",
            x.responsible.join(", "),
            100.0 * covered
        );
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

/// Off-CPU stacks listed per item in JSON and text.
pub const ITEM_OFF_CPU_STACKS: usize = 5;

/// Adds to each item object of an [`items_json`] document (matched by `id`) where its
/// wall time went: `cpu_ns`, `off_cpu_ns`, `runnable_ns`, `blocked_ns` (`null` when
/// the trace has no context switches) and `off_cpu: [{"state", "ns", "frames": [root,
/// …, leaf]}]` (the top [`ITEM_OFF_CPU_STACKS`] stacks); flagged items also get
/// `excess_resolvable` (false: the excess over the class median is below
/// [`resolution_ns`], so sampling cannot say which code took it). `profile` must have been built
/// with the spans of `r.items`. Returns how many items were extended.
pub fn merge_item_stacks(doc: &mut Value, r: &ItemsReport, profile: &StackProfile) -> usize {
    let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) else {
        return 0;
    };
    let by_id: std::collections::HashMap<u64, usize> = r
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| (it.id, i))
        .collect();
    let switches = profile.switches > 0;
    let mut n = 0;
    for v in items {
        let Some(i) = v
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| by_id.get(&id).copied())
        else {
            continue;
        };
        let (row, st) = (&r.items[i], profile.items.get(i));
        let split = time_split(
            row.duration_ns,
            row.samples,
            r.mean_interval_ns,
            st,
            switches,
        );
        let Some(obj) = v.as_object_mut() else {
            continue;
        };
        obj.insert("cpu_ns".into(), json!(split.cpu_ns));
        obj.insert("off_cpu_ns".into(), json!(split.off_cpu_ns));
        obj.insert("runnable_ns".into(), json!(split.runnable_ns));
        obj.insert("blocked_ns".into(), json!(split.blocked_ns));
        if st.is_some_and(|s| s.off_cpu_partial) {
            // Off-CPU recording started during the item: what `off_cpu` lists is a part.
            obj.insert("off_cpu_partial".into(), json!(true));
        }
        let off: Vec<Value> = st
            .map(|s| {
                s.off_cpu
                    .iter()
                    .take(ITEM_OFF_CPU_STACKS)
                    .map(|o| json!({"state": o.state.name(), "ns": o.ns, "frames": profile.frames(o.path)}))
                    .collect()
            })
            .unwrap_or_default();
        obj.insert("off_cpu".into(), Value::Array(off));
        // On-CPU noise (issue 21): kernel work by kind, migrations.
        obj.insert("noise".into(), json!(st.map(|s| &s.noise)));
        if row.anomalous {
            // Flagged, but is the excess large enough for sampling to explain?
            let median = r
                .class_stats(&row.class)
                .map_or(0, |c| c.median_duration_ns);
            let resolvable = row.duration_ns.saturating_sub(median) as f64 >= resolution_ns(r);
            obj.insert("excess_resolvable".into(), json!(resolvable));
        }
        n += 1;
    }
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("switches".into(), json!(profile.switches));
        obj.insert("stack_statuses".into(), json!(profile.statuses));
    }
    n
}

/// The text lines that say where the shown items' wall time went: for each item with
/// off-CPU time, `wall = cpu + blocked + runnable` and its top off-CPU stacks
/// ("blocked 18.2 ms in XactLockTableWait ← heap_update ← …").
pub fn render_items_off_cpu(r: &ItemsReport, view: &ItemsView, profile: &StackProfile) -> String {
    let mut out = String::new();
    if profile.switches == 0 {
        out.push_str("\nOff-CPU: no context switches in this trace (record with --off-cpu to see blocked and runnable time)\n");
        return out;
    }
    let by_id: std::collections::HashMap<u64, usize> = r
        .items
        .iter()
        .enumerate()
        .map(|(i, it)| (it.id, i))
        .collect();
    let mut lines = String::new();
    for it in sorted_items(r, view) {
        let Some(&i) = by_id.get(&it.id) else {
            continue;
        };
        let Some(st) = profile.items.get(i) else {
            continue;
        };
        if st.off_cpu_ns() == 0 {
            continue;
        }
        let s = time_split(
            it.duration_ns,
            it.samples,
            r.mean_interval_ns,
            Some(st),
            true,
        );
        let _ = if st.off_cpu_partial {
            writeln!(
                lines,
                "  item {}: {}, at least blocked {} + runnable {} (off-CPU recording started during this item)",
                it.id,
                duration(it.duration_ns),
                duration(st.blocked_ns),
                duration(st.runnable_ns)
            )
        } else {
            writeln!(
                lines,
                "  item {}: {} = cpu {} + blocked {} + runnable {}",
                it.id,
                duration(it.duration_ns),
                duration(s.cpu_ns),
                duration(st.blocked_ns),
                duration(st.runnable_ns)
            )
        };
        for o in st.off_cpu.iter().take(3) {
            let _ = writeln!(lines, "      {}", off_row_line(profile, o));
        }
    }
    if lines.is_empty() {
        out.push_str("\nOff-CPU: the shown items never left the CPU\n");
    } else {
        let _ = write!(
            out,
            "\nOff-CPU time of the items (from context switches):\n{lines}"
        );
    }
    out
}

/// `tailprof items --explain ID`, by stack: the wall-time split, the off-CPU stacks and
/// the item's stacks beside the class median, plus the sampling-resolution note.
pub fn render_stack_explanation(x: &StackExplanation, top: usize) -> String {
    let mut out = String::new();
    let s = &x.split;
    match (s.off_cpu_ns, s.blocked_ns, s.runnable_ns) {
        (Some(_), Some(b), Some(rn)) => {
            let _ = writeln!(
                out,
                "\n# Wall time {} = on CPU {} + blocked {} + runnable {}",
                duration(x.duration_ns),
                duration(s.cpu_ns),
                duration(b),
                duration(rn)
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "\n# Wall time {}; on CPU about {} (samples x interval); off-CPU time unknown (no context switches recorded: record with --off-cpu)",
                duration(x.duration_ns),
                duration(s.cpu_ns)
            );
        }
    }
    if !x.off_cpu.is_empty() {
        out.push_str("# Off CPU, against the class median (measured from context switches):\n");
        for o in x.off_cpu.iter().take(top) {
            let frames: Vec<&str> = o.frames.iter().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "  {}  (median {}, {})",
                crate::stacks::off_cpu_line(o.state, o.ns, &frames, &o.kernel),
                duration(o.median_ns.round() as u64),
                signed(o.delta_ns)
            );
        }
    }
    let _ = writeln!(
        out,
        "\n# On CPU by stack (leaf ← callers), item vs class median ({} items):",
        x.class_items
    );
    let rows: Vec<Vec<String>> = x
        .stacks
        .iter()
        .take(top)
        .map(|d| {
            let frames: Vec<&str> = d.frames.iter().map(String::as_str).collect();
            vec![
                thousands(d.samples),
                duration(d.est_ns.round() as u64),
                duration(d.median_ns.round() as u64),
                signed(d.delta_ns),
                stack_line(&frames, LINE_FRAMES),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            ("Samples", true),
            ("Item", true),
            ("Median", true),
            ("Delta", true),
            ("Stack", false),
        ],
        &rows,
    );
    if x.stacks.len() > top {
        let _ = writeln!(out, "({} more stacks)", x.stacks.len() - top);
    }
    if x.incomplete_samples > 0 {
        let _ = writeln!(
            out,
            "note: {} of the item's samples have truncated stacks",
            thousands(x.incomplete_samples)
        );
    }
    if let Some(n) = &x.note {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// Adds the stack explanation to an [`explanation_json`] object: `stacks: [{"frames",
/// "samples", "est_ns", "median_ns", "delta_ns"}]`, `off_cpu: [{"state", "ns", "frames",
/// "median_ns", "delta_ns"}]`, `cpu_ns`, `off_cpu_ns`, `runnable_ns`, `blocked_ns`,
/// `resolvable`, `resolution_ns` and `resolution_note`.
pub fn merge_stack_explanation(doc: &mut Value, x: &StackExplanation) {
    let Some(obj) = doc.as_object_mut() else {
        return;
    };
    let stacks: Vec<Value> = x
        .stacks
        .iter()
        .map(|d| json!({"frames": d.frames, "samples": d.samples, "est_ns": d.est_ns, "median_ns": d.median_ns, "delta_ns": d.delta_ns}))
        .collect();
    obj.insert("stacks".into(), Value::Array(stacks));
    let off: Vec<Value> = x
        .off_cpu
        .iter()
        .map(|o| json!({"state": o.state.name(), "ns": o.ns, "frames": o.frames, "median_ns": o.median_ns, "delta_ns": o.delta_ns}))
        .collect();
    obj.insert("off_cpu".into(), Value::Array(off));
    obj.insert("cpu_ns".into(), json!(x.split.cpu_ns));
    obj.insert("off_cpu_ns".into(), json!(x.split.off_cpu_ns));
    obj.insert("runnable_ns".into(), json!(x.split.runnable_ns));
    obj.insert("blocked_ns".into(), json!(x.split.blocked_ns));
    obj.insert("resolvable".into(), json!(x.resolvable));
    obj.insert("resolution_ns".into(), json!(x.resolution_ns));
    obj.insert("resolution_note".into(), json!(x.note));
}

/// Adds `woken_by` and `preempted_by` (issue 21, docs/JSON.md "items: woken_by /
/// preempted_by") to each item object of an [`items_json`] document, when the trace
/// recorded wakeups (`profile.cause_stats.recorded`; otherwise the document is left as it
/// is). `profile` must have been built with the spans of the document's report. Returns
/// how many items were extended.
pub fn merge_item_causes(doc: &mut Value, profile: &StackProfile) -> Result<usize, PresentError> {
    if !profile.cause_stats.recorded {
        return Ok(0);
    }
    let by_id: std::collections::HashMap<u64, &tailprof_analyze::causes::ItemCauses> =
        profile.causes.iter().map(|c| (c.id, c)).collect();
    let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) else { return Ok(0) };
    let mut n = 0;
    for v in items {
        let Some(id) = v.get("id").and_then(Value::as_u64) else { continue };
        let c = by_id.get(&id);
        let Some(obj) = v.as_object_mut() else { continue };
        obj.insert("woken_by".into(), serde_json::to_value(c.map(|c| &c.woken_by[..]).unwrap_or(&[]))?);
        obj.insert("preempted_by".into(), serde_json::to_value(c.map(|c| &c.preempted_by[..]).unwrap_or(&[]))?);
        n += 1;
    }
    Ok(n)
}

/// Adds the item's `woken_by`, `preempted_by` and `causes` (the excess split by cause)
/// to an [`explanation_json`] document, when the trace recorded wakeups.
pub fn merge_causes_explanation(doc: &mut Value, x: &CauseExplanation) -> Result<(), PresentError> {
    let Some(obj) = doc.as_object_mut() else { return Ok(()) };
    if x.recorded {
        obj.insert("woken_by".into(), serde_json::to_value(&x.woken_by)?);
        obj.insert("preempted_by".into(), serde_json::to_value(&x.preempted_by)?);
    }
    if let Some(split) = &x.split {
        obj.insert("causes".into(), serde_json::to_value(split)?);
    }
    obj.insert("noise".into(), serde_json::to_value(&x.noise)?);
    obj.insert("noise_shares".into(), serde_json::to_value(&x.noise_shares)?);
    Ok(())
}

/// A stack, leaf first, at most `n` frames: `worker_slow_path ← worker ← …`.
fn leaf_first(frames: &[String], n: usize) -> String {
    if frames.is_empty() {
        return "(no stack)".into();
    }
    let mut s = frames.iter().rev().take(n).cloned().collect::<Vec<_>>().join(" ← ");
    if frames.len() > n {
        s.push_str(" ← …");
    }
    s
}

fn signed_ms(ns: i64) -> String {
    format!("{}{:.1} ms", if ns >= 0 { "+" } else { "-" }, ns.unsigned_abs() as f64 / 1e6)
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// The "Causes" section of `items --explain ID`: the excess over the class median split
/// by cause (own CPU work by stack, blocked by waker with the waker's critical path,
/// runnable behind whom).
pub fn render_causes(x: &CauseExplanation) -> String {
    let mut out = String::new();
    // Without context switches there is no split (the off-CPU lines say how to get one).
    let Some(split) = &x.split else {
        render_noise(&mut out, x);
        return out;
    };
    let _ = writeln!(out, "\nCauses: {} against the class median ({})", signed_ms(x.excess_ns), ms(x.median_duration_ns));
    for share in split {
        let _ = writeln!(
            out,
            "  {:<9} {:>10}  ({} here, class median {})",
            share.cause.name(),
            signed_ms(share.excess_ns),
            ms(share.ns),
            ms(share.median_ns)
        );
        match share.cause {
            PathState::Cpu => {
                for (frames, delta) in &x.cpu_stacks {
                    let _ = writeln!(out, "      {:>9} in {}", signed_ms(*delta as i64), leaf_first(frames, 4));
                }
            }
            PathState::Blocked if !x.recorded => {
                out.push_str("      (no wakeups in this trace: record with --off-cpu as root to see who woke it)\n");
            }
            PathState::Blocked => {
                for w in x.woken_by.iter().take(5) {
                    let who = match (w.irq, w.tid) {
                        (Some(k), _) => format!("{} interrupt", k.name()),
                        (None, _) => format!("{} (pid {}, tid {})", if w.comm.is_empty() { "?" } else { &w.comm }, w.pid, w.tid),
                    };
                    let item = match (w.item, &w.class) {
                        (Some(i), Some(c)) => format!(", inside item {i} ({c})"),
                        (Some(i), None) => format!(", inside item {i}"),
                        _ => String::new(),
                    };
                    let _ = writeln!(out, "      {} woken by {who}{item}, at {}", ms(w.ns), leaf_first(&w.frames, 3));
                    for d in w.during.iter().take(4) {
                        let _ = writeln!(out, "          meanwhile {} {} in {}", d.state.name(), ms(d.ns), leaf_first(&d.frames, 3));
                    }
                }
            }
            PathState::Runnable => {
                for p in x.preempted_by.iter().take(5) {
                    let item = p.item.map(|i| format!(", inside item {i}")).unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "      {} behind {} (pid {}, tid {}){item}",
                        ms(p.ns),
                        if p.comm.is_empty() { "?" } else { &p.comm },
                        p.pid,
                        p.tid
                    );
                }
            }
        }
    }
    render_noise(&mut out, x);
    out
}

/// The on-CPU noise lines of the "Causes" section: kernel work in the item's samples by
/// kind beside the class median, and migrations.
fn render_noise(out: &mut String, x: &CauseExplanation) {
    if x.noise_shares.is_empty() && x.noise.migrations.is_none_or(|m| m == 0) {
        return;
    }
    if !x.noise_shares.is_empty() {
        let _ = writeln!(out, "  on-CPU noise (kernel work in the item's samples, against the class median):");
    }
    for n in &x.noise_shares {
        let what = match n.kind.as_str() {
            "hardirq" => "hard interrupts".to_owned(),
            "softirq" => "soft interrupts".to_owned(),
            "page_fault" => "page faults".to_owned(),
            "other_kernel" => "other kernel code".to_owned(),
            "unknown_kernel" => "kernel, kind unknown (no kernel symbols)".to_owned(),
            k => match k.strip_prefix("syscall:") {
                Some("?") => "system calls (unnamed)".to_owned(),
                Some(name) => format!("syscall {name}"),
                None => k.to_owned(),
            },
        };
        let _ = writeln!(out, "      {:>10}  {what} ({} here, class median {})", signed_ms(n.excess_ns), ms(n.ns), ms(n.median_ns));
    }
    if let Some(m) = x.noise.migrations.filter(|&m| m > 0) {
        let _ = writeln!(out, "  migrations: {m} (its thread resumed on another CPU inside the item)");
    }
}

/// `report --causes`: who cost other requests the most time (blocked behind their
/// wakeups, or runnable while they ran), per process, thread and item class, largest
/// first (`top` rows each).
pub fn render_interference(x: &Interference, top: Option<usize>) -> String {
    let mut out = String::new();
    if !x.recorded {
        out.push_str("No wakeups in this trace: record with --off-cpu (as root for wakers and CPU-wide switches outside the recorded processes) to see who held requests up.\n");
        return out;
    }
    let n = top.unwrap_or(usize::MAX);
    let name = |r: &InterferenceRow| if r.comm.is_empty() { "?".to_owned() } else { r.comm.clone() };
    let mut section = |title: &str, rows: &[InterferenceRow], label: &dyn Fn(&InterferenceRow) -> String| {
        let _ = writeln!(out, "{title}");
        if rows.is_empty() {
            out.push_str("  (none)\n");
        }
        for r in rows.iter().take(n) {
            let _ = writeln!(
                out,
                "  {:>10}  blocked {:>10}  runnable {:>10}  {:>6} items  {}",
                ms(r.total_ns),
                ms(r.blocked_ns),
                ms(r.runnable_ns),
                r.items,
                label(r)
            );
        }
        out.push('\n');
    };
    section("Processes that held requests up:", &x.processes, &|r| format!("{} (pid {})", name(r), r.pid));
    section("Threads:", &x.threads, &|r| format!("{} (pid {}, tid {})", name(r), r.pid, r.tid.unwrap_or(0)));
    section("Item classes (of the waker's or preempter's item):", &x.classes, &|r| {
        r.class.clone().unwrap_or_else(|| "(no item, or an item without class)".into())
    });
    out
}

/// `report --causes --json`: the [`Interference`] document, pretty-printed.
pub fn interference_json(x: &Interference) -> Result<String, PresentError> {
    Ok(crate::json::document(x)? + "\n")
}
