//! SVG flame graphs (the inferno crate) of a stack profile: for the whole trace, per
//! item, per class, and differential (an item or the slow items against their class).
//!
//! Input is folded stacks built from [`StackProfile`] rows ([`folded_rows`]); a
//! differential graph gets two counts per stack (`stack before after`), which inferno
//! draws with the "after" widths, red where the stack grew and blue where it shrank.
//! The class baseline is the sum over the class's items scaled to the compared set's
//! total (so widths compare shares, not item counts).
//!
//! A frame is its function's name, with the function's source location when it has one
//! (a JIT function's jitdump DEBUG_INFO: `hotLoop (app.js:3)`, [`crate::fmt::name_with_source`]),
//! so the box and its tooltip say where the code is. Functions without a source (native
//! code) are their name alone: frames merge by function as before.
//!
//! [`flame_section_html`] puts the graphs in the HTML report, each in a sandboxed
//! `<iframe srcdoc>` so every graph's own script (zoom, search) works on its own and
//! none can reach the page.

use std::collections::HashMap;
use std::fmt::Write as _;

use tailprof_analyze::items::ItemsReport;
use tailprof_analyze::stacks::{StackProfile, StackRow};

use crate::fmt::name_with_source;
use crate::html::escape;
use crate::stacks::folded_name;

/// Folded lines (`root;…;leaf N`) of `rows`, complete and truncated stacks with the same
/// frames merged.
pub fn folded_rows(p: &StackProfile, rows: &[StackRow]) -> Vec<String> {
    let mut by_path: HashMap<u32, u64> = HashMap::new();
    for r in rows {
        *by_path.entry(r.path).or_default() += r.samples;
    }
    let mut v: Vec<(u32, u64)> = by_path.into_iter().collect();
    v.sort_unstable();
    v.into_iter().map(|(path, n)| format!("{} {n}", folded_stack(p, path))).collect()
}

/// `root;…;leaf` of one path (`[no stack]` for an empty one); a function with a source
/// location is `name (file:line)` (module docs).
pub fn folded_stack(p: &StackProfile, path: u32) -> String {
    let f = p.paths.get(path as usize).map(Vec::as_slice).unwrap_or(&[]);
    if f.is_empty() {
        return "[no stack]".into();
    }
    f.iter()
        .filter_map(|&i| p.functions.get(i as usize))
        .map(|f| folded_name(&name_with_source(&f.name, f.source.as_deref())))
        .collect::<Vec<_>>()
        .join(";")
}

/// An SVG flame graph of folded lines. `None` when there is nothing to draw.
pub fn flame_svg(lines: &[String], title: &str, count_name: &str) -> Option<String> {
    if lines.is_empty() {
        return None;
    }
    let mut o = inferno::flamegraph::Options::default();
    o.title = title.to_owned();
    o.count_name = count_name.to_owned();
    o.deterministic = true;
    o.hash = true; // colors by name: the same function has the same color in every graph
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// A differential flame graph: `before` (a baseline) scaled to `after`'s total, drawn
/// with `after`'s widths, red where a stack has more samples than the baseline.
pub fn differential_svg(p: &StackProfile, before: &[StackRow], after: &[StackRow], title: &str) -> Option<String> {
    let sum = |rows: &[StackRow]| -> HashMap<u32, u64> {
        let mut m = HashMap::new();
        for r in rows {
            *m.entry(r.path).or_default() += r.samples;
        }
        m
    };
    let (b, a) = (sum(before), sum(after));
    let (tb, ta) = (b.values().sum::<u64>(), a.values().sum::<u64>());
    if ta == 0 {
        return None;
    }
    let scale = if tb == 0 { 0.0 } else { ta as f64 / tb as f64 };
    let mut paths: Vec<u32> = b.keys().chain(a.keys()).copied().collect();
    paths.sort_unstable();
    paths.dedup();
    let lines: Vec<String> = paths
        .into_iter()
        .map(|path| {
            let before = (b.get(&path).copied().unwrap_or(0) as f64 * scale).round() as u64;
            format!("{} {before} {}", folded_stack(p, path), a.get(&path).copied().unwrap_or(0))
        })
        .collect();
    flame_svg(&lines, title, "samples")
}

/// The rows of the items `keep` selects (by index), summed.
fn class_rows(report: &ItemsReport, p: &StackProfile, keep: impl Fn(usize) -> bool) -> Vec<StackRow> {
    let mut m: HashMap<(u32, bool, bool), (u64, u64)> = HashMap::new();
    for (i, st) in p.items.iter().enumerate() {
        if i >= report.items.len() || !keep(i) {
            continue;
        }
        for r in &st.stacks {
            let e = m.entry((r.path, r.complete, r.truncated)).or_default();
            e.0 += r.samples;
            e.1 += r.period;
        }
    }
    m.into_iter().map(|((path, complete, truncated), (samples, period))| StackRow { path, samples, period, complete, truncated }).collect()
}

/// One graph in the page.
fn frame(h: &mut String, heading: &str, svg: Option<String>) {
    let Some(svg) = svg else { return };
    let _ = write!(
        h,
        "<h3>{}</h3>\n<iframe class=\"flame\" sandbox=\"allow-scripts\" style=\"width:100%;height:520px;border:0\" srcdoc=\"{}\"></iframe>\n",
        escape(heading),
        escape(&svg)
    );
}

/// Options of [`flame_section_html`].
#[derive(Debug, Clone)]
pub struct FlameOptions {
    /// Per-item graphs (and differentials) for at most this many slow items.
    pub max_items: usize,
    /// Items that get their own graphs (and differentials) too, slow or not (e.g.
    /// `export --html --item ID`).
    pub items: Vec<u64>,
}

impl Default for FlameOptions {
    fn default() -> Self {
        FlameOptions { max_items: 5, items: Vec::new() }
    }
}

/// The flame-graph section of the HTML report: the whole trace, each class, the slow
/// items (and [`FlameOptions::items`]) and each against its class, and all slow items
/// against their classes.
/// `report` may be `None` (a trace without items): then only the trace's graph.
pub fn flame_section_html(p: &StackProfile, report: Option<&ItemsReport>, opts: &FlameOptions) -> String {
    let mut h = String::from("<h2>Flame graphs</h2>\n");
    if p.samples_with_stacks() == 0 {
        h.push_str(
            "<p class=\"sub\">No call stacks in this trace (record with -g / --call-graph): the graphs show sampled functions only.</p>\n",
        );
    }
    let whole = match p.filter.describe() {
        Some(f) => format!("Samples of {f}"),
        None => "Whole trace".to_owned(),
    };
    frame(&mut h, &whole, flame_svg(&folded_rows(p, &p.stacks), &whole.to_lowercase(), "samples"));
    let Some(report) = report else { return h };
    if report.items.len() != p.items.len() {
        return h;
    }
    let mut classes: Vec<Option<String>> = report.items.iter().map(|i| i.class.clone()).collect();
    classes.sort();
    classes.dedup();
    for c in &classes {
        let name = c.as_deref().unwrap_or("(no class)");
        let rows = class_rows(report, p, |i| &report.items[i].class == c);
        frame(&mut h, &format!("Class {name}"), flame_svg(&folded_rows(p, &rows), &format!("class {name}"), "samples"));
    }
    let mut slow: Vec<usize> = (0..report.items.len()).filter(|&i| report.items[i].anomalous).collect();
    slow.sort_by(|&a, &b| report.items[b].duration_ns.cmp(&report.items[a].duration_ns));
    if !slow.is_empty() {
        let slow_rows = class_rows(report, p, |i| report.items[i].anomalous);
        let base =
            class_rows(report, p, |i| !report.items[i].anomalous && slow.iter().any(|&s| report.items[s].class == report.items[i].class));
        frame(
            &mut h,
            "Slow items against their classes (differential: red = more than the class, blue = less)",
            differential_svg(p, &base, &slow_rows, "slow items vs their classes"),
        );
    }
    let mut shown: Vec<usize> = slow.iter().take(opts.max_items).copied().collect();
    for id in &opts.items {
        if let Some(i) = report.items.iter().position(|r| r.id == *id) {
            if !shown.contains(&i) {
                shown.push(i);
            }
        }
    }
    for i in shown {
        let it = &report.items[i];
        let rows = &p.items[i].stacks;
        let what = if it.anomalous { "slow" } else { "selected" };
        frame(&mut h, &format!("Item {} ({what})", it.id), flame_svg(&folded_rows(p, rows), &format!("item {}", it.id), "samples"));
        let base = class_rows(report, p, |j| j != i && report.items[j].class == it.class && !report.items[j].anomalous);
        frame(
            &mut h,
            &format!("Item {} against its class (differential)", it.id),
            differential_svg(p, &base, rows, &format!("item {} vs its class", it.id)),
        );
    }
    h
}
