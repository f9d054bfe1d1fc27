//! Self-contained HTML report of per-item attribution (`tailprof export --html`,
//! `tailprof demo`).
//!
//! Owns: the per-item stacked bar chart by function (the paper's Fig. 8: x = items in
//! begin order, each bar the item's per-function estimated time stacked, one color per
//! function with a legend, anomalous items marked), the items table, the explanations
//! of anomalous items, and the accuracy plot of `docs/ACCURACY.md` (estimate / truth per
//! sampling period, with error bars). All charts are inline SVG written here; the page
//! loads nothing from anywhere (no scripts, fonts or style sheets from outside), and
//! every piece of text from the trace is escaped.
//!
//! ```
//! # fn f(report: &tailprof_analyze::items::ItemsReport) {
//! use tailprof_present::html::{render_items_html, HtmlOptions};
//! let page: String = render_items_html(report, &HtmlOptions::default());
//! assert!(page.contains("<svg"));
//! # }
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;

use tailprof_analyze::items::{explain, ItemFunction, ItemRow, ItemsReport};

use crate::fmt::{duration, thousands};

/// Options of [`render_items_html`].
#[derive(Debug, Clone)]
pub struct HtmlOptions {
    /// Page title.
    pub title: String,
    /// Functions that get their own color; the rest are stacked as "other".
    pub max_functions: usize,
    /// Explanations shown for at most this many anomalous items (slowest first).
    pub max_explanations: usize,
    /// Free text shown under the title (escaped), e.g. the command that was recorded.
    pub subtitle: Option<String>,
}

impl Default for HtmlOptions {
    fn default() -> Self {
        HtmlOptions { title: "tailprof: per-item time by function".to_string(), max_functions: 10, max_explanations: 10, subtitle: None }
    }
}

/// Colorblind-friendly palette (Okabe-Ito, then Tableau) for the stacked functions.
const PALETTE: [&str; 12] =
    ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#4E79A7", "#B07AA1", "#9C755F", "#76B7B2", "#EDC948"];
const OTHER_COLOR: &str = "#BBBBBB";
const OTHER: &str = "(other)";

/// Escape text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The per-function time an item row shows under the report's estimator, in ns.
pub fn shown_ns(report: &ItemsReport, f: &ItemFunction) -> f64 {
    f.shown_ns(report.shown_estimator)
}

/// Name of the estimator the report shows.
pub fn estimator_name(report: &ItemsReport) -> &'static str {
    report.shown_estimator.describe()
}

/// Items in begin order (the x axis of the chart).
fn items_in_order(report: &ItemsReport) -> Vec<&ItemRow> {
    let mut items: Vec<&ItemRow> = report.items.iter().collect();
    items.sort_by_key(|r| (r.begin_ns, r.pid, r.tid, r.id));
    items
}

/// Functions with their own color: the largest by total shown time over all items.
fn legend(report: &ItemsReport, max: usize) -> Vec<String> {
    let mut totals: HashMap<&str, f64> = HashMap::new();
    for row in &report.items {
        for f in &row.functions {
            *totals.entry(f.name.as_str()).or_default() += shown_ns(report, f);
        }
    }
    let mut v: Vec<(&str, f64)> = totals.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().take(max.min(PALETTE.len())).map(|(n, _)| n.to_string()).collect()
}

/// A "nice" axis step (1, 2 or 5 times a power of ten) giving about `ticks` ticks.
fn nice_step(max: f64, ticks: usize) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw {
            return m * p;
        }
    }
    10.0 * p
}

/// The stacked bar chart (Fig. 8 of the paper) as an `<svg>` element: one `<g
/// class="bar">` per item, one `<rect>` per function segment, the item's wall
/// duration (from its markers) as an outline, and a red mark over anomalous items.
pub fn items_chart_svg(report: &ItemsReport, max_functions: usize) -> String {
    let items = items_in_order(report);
    let names = legend(report, max_functions);
    let color_of = |name: &str| -> &'static str { names.iter().position(|n| n == name).map(|i| PALETTE[i]).unwrap_or(OTHER_COLOR) };
    let max_ns = items
        .iter()
        .map(|r| {
            let stacked: f64 = r.functions.iter().map(|f| shown_ns(report, f)).sum();
            stacked.max(r.duration_ns as f64)
        })
        .fold(0.0f64, f64::max);
    let step = nice_step(max_ns / 1e6, 5); // in ms
    let top_ms = (max_ns / 1e6 / step).ceil().max(1.0) * step;

    let (left, right, top, bottom) = (70.0, 20.0, 30.0, 60.0);
    let bar_w = (900.0 / items.len().max(1) as f64).clamp(4.0, 28.0);
    let plot_w = bar_w * items.len().max(1) as f64;
    let plot_h = 320.0;
    let legend_h = 22.0 * (names.len() + 1).div_ceil(4) as f64;
    let width = left + plot_w + right;
    let height = top + plot_h + bottom + legend_h;
    let y_of = |ms: f64| top + plot_h - ms / top_ms * plot_h;

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="items-chart" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    // Axes and grid.
    let mut t = 0.0;
    while t <= top_ms + step * 1e-9 {
        let y = y_of(t);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            trim_float(t)
        );
        t += step;
    }
    let _ = write!(
        s,
        r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">time per item (ms)</text>"#,
        top + plot_h / 2.0
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">items in begin order (label: id)</text>"#,
        left + plot_w / 2.0,
        top + plot_h + 40.0
    );
    let label_every = (items.len() as f64 * 24.0 / plot_w).ceil().max(1.0) as usize;
    for (i, row) in items.iter().enumerate() {
        let x = left + i as f64 * bar_w;
        let class = row.class.as_deref().unwrap_or("-");
        let _ = write!(
            s,
            r#"<g class="bar{}" data-id="{}"><title>item {} ({}) {} | {} samples{}</title>"#,
            if row.anomalous { " anomalous" } else { "" },
            row.id,
            row.id,
            escape(class),
            duration(row.duration_ns),
            thousands(row.samples),
            if row.anomalous { " | ANOMALOUS" } else { "" }
        );
        // Stack: named functions in legend order, then everything else.
        let mut segs: Vec<(&str, f64)> = Vec::new();
        let mut other = 0.0;
        for f in &row.functions {
            let ns = shown_ns(report, f);
            if names.iter().any(|n| n == &f.name) {
                segs.push((f.name.as_str(), ns));
            } else {
                other += ns;
            }
        }
        segs.sort_by_key(|(n, _)| names.iter().position(|m| m == n).unwrap_or(usize::MAX));
        if other > 0.0 {
            segs.push((OTHER, other));
        }
        let mut acc = 0.0;
        for (name, ns) in segs {
            let y0 = y_of((acc + ns) / 1e6);
            let h = y_of(acc / 1e6) - y0;
            acc += ns;
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y0:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x + 1.0,
                (bar_w - 2.0).max(1.0),
                color_of(name),
                escape(name),
                duration(ns as u64)
            );
        }
        // Wall duration from the markers, as an outline.
        let yd = y_of(row.duration_ns as f64 / 1e6);
        let _ = write!(
            s,
            r##"<rect class="wall" x="{:.1}" y="{yd:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333" stroke-width="0.8"/>"##,
            x + 0.5,
            (bar_w - 1.0).max(1.0),
            top + plot_h - yd
        );
        if row.anomalous {
            let _ = write!(
                s,
                r##"<text class="flag" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#D00" font-weight="bold">!</text>"##,
                x + bar_w / 2.0,
                yd - 4.0
            );
        }
        if i % label_every == 0 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                x + bar_w / 2.0,
                top + plot_h + 14.0,
                row.id
            );
        }
        s.push_str("</g>");
    }
    // Legend.
    let mut entries: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), color_of(n))).collect();
    entries.push((OTHER, OTHER_COLOR));
    for (i, (name, color)) in entries.iter().enumerate() {
        let x = left + (i % 4) as f64 * 220.0;
        let y = top + plot_h + bottom + (i / 4) as f64 * 22.0;
        let _ = write!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            y - 10.0,
            x + 16.0,
            y,
            escape(&truncate(name, 34))
        );
    }
    s.push_str("</svg>");
    s
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// The page of a trace without items (a flat profile: no markers, uprobes or
/// `--item-reg`): title, a line saying why there are no per-item sections, and `extra`
/// (the flame graphs of [`crate::flamegraph::flame_section_html`]).
pub fn render_profile_html(opts: &HtmlOptions, samples: u64, extra: &str) -> String {
    let mut h = String::new();
    let title = "tailprof: profile";
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{}</style></head><body>\n<h1>{}</h1>\n",
        title, STYLE, title
    );
    if let Some(sub) = &opts.subtitle {
        let _ = writeln!(h, "<p class=\"sub\">{}</p>", escape(sub));
    }
    let _ = writeln!(
        h,
        "<p>{} samples | no items in this trace (no markers, --item-begin/--item-end uprobes or --item-reg): the per-item chart and tables need them</p>",
        thousands(samples)
    );
    h.push_str(extra);
    h.push_str("<p class=\"sub\">Generated by tailprof.</p>\n</body></html>\n");
    h
}

/// The whole page: summary, chart, items table, explanations of anomalous items.
pub fn render_items_html(report: &ItemsReport, opts: &HtmlOptions) -> String {
    render_items_html_with(report, opts, "")
}

/// [`render_items_html`] with more sections (already HTML, e.g. the flame graphs of
/// [`crate::flamegraph::flame_section_html`]) before the footer.
pub fn render_items_html_with(report: &ItemsReport, opts: &HtmlOptions, extra: &str) -> String {
    let mut h = String::new();
    let anomalous: Vec<&ItemRow> = report.items.iter().filter(|r| r.anomalous).collect();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{}</style></head><body>\n<h1>{}</h1>\n",
        escape(&opts.title),
        STYLE,
        escape(&opts.title)
    );
    if let Some(sub) = &opts.subtitle {
        let _ = writeln!(h, "<p class=\"sub\">{}</p>", escape(sub));
    }
    let _ = writeln!(
        h,
        "<p>{} items ({} anomalous) | mode {} | {} samples, {} outside any item | mean sample interval {} | bars show {}{}</p>",
        report.items.len(),
        anomalous.len(),
        escape(&report.mode),
        thousands(report.total_samples),
        thousands(report.outside_samples),
        duration(report.mean_interval_ns as u64),
        estimator_name(report),
        loss_note(report)
    );
    let _ = writeln!(
        h,
        "<h2>Time per item by function</h2>\n<p class=\"sub\">Each bar is one item; colored segments are estimated per-function time, the outline is the item's wall time from its markers, <b class=\"flag\">!</b> marks an anomalous item.</p>\n<div class=\"chart\">{}</div>",
        items_chart_svg(report, opts.max_functions)
    );

    // Anomalous items explained (slowest first).
    if !anomalous.is_empty() {
        h.push_str("<h2>Anomalous items explained</h2>\n");
        let mut worst = anomalous.clone();
        worst.sort_by_key(|r| std::cmp::Reverse(r.duration_ns));
        for row in worst.into_iter().take(opts.max_explanations) {
            let _ = writeln!(
                h,
                "<h3>item {} ({}): {}, anomaly score {:.1}</h3>",
                row.id,
                escape(row.class.as_deref().unwrap_or("no class")),
                duration(row.duration_ns),
                row.anomaly_score
            );
            match explain(report, row.id) {
                Ok(ex) => {
                    let _ = writeln!(
                        h,
                        "<p>Responsible: <b>{}</b></p>\n<table><tr><th>function</th><th>this item</th><th>class median</th><th>difference</th><th>share of excess</th></tr>",
                        escape(&ex.responsible.join(", "))
                    );
                    for d in ex.diffs.iter().take(8) {
                        let _ = writeln!(
                            h,
                            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td></tr>",
                            escape(&crate::fmt::name_with_source(&d.name, d.source.as_deref())),
                            duration(d.item_ns as u64),
                            duration(d.median_ns as u64),
                            signed_duration(d.delta_ns),
                            d.share_of_excess * 100.0
                        );
                    }
                    h.push_str("</table>\n");
                }
                Err(e) => {
                    let _ = writeln!(h, "<p>No explanation: {}</p>", escape(&e.to_string()));
                }
            }
        }
    }

    // Items table.
    h.push_str(
        "<h2>Items</h2>\n<table><tr><th>id</th><th>class</th><th>pid/tid</th><th>duration</th><th>samples</th><th>anomaly score</th><th>top functions</th></tr>\n",
    );
    for row in items_in_order(report) {
        let mut funcs: Vec<_> = row.functions.iter().collect();
        funcs.sort_by(|a, b| shown_ns(report, b).total_cmp(&shown_ns(report, a)));
        let top: Vec<String> = funcs
            .iter()
            .take(3)
            .map(|f| {
                format!(
                    "{} {}{}",
                    escape(&crate::fmt::name_with_source(&f.name, f.source.as_deref())),
                    duration(shown_ns(report, f) as u64),
                    if f.reliable { "" } else { " (few samples)" }
                )
            })
            .collect();
        let _ = writeln!(
            h,
            "<tr id=\"item-{}\"{}><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{:.1}{}</td><td>{}</td></tr>",
            row.id,
            if row.anomalous { " class=\"anomalous\"" } else { "" },
            row.id,
            escape(row.class.as_deref().unwrap_or("-")),
            row.pid,
            row.tid,
            duration(row.duration_ns),
            thousands(row.samples),
            row.anomaly_score,
            if row.anomalous { " !" } else { "" },
            top.join("; ")
        );
    }
    h.push_str("</table>\n");
    h.push_str(extra);
    h.push_str(
        "<p class=\"sub\">Generated by tailprof. Estimates resting on few samples are marked \"(few samples)\".</p>\n</body></html>\n",
    );
    h
}

fn loss_note(report: &ItemsReport) -> String {
    let mut parts = Vec::new();
    if report.lost_markers > 0 {
        parts.push(format!("{} markers lost", thousands(report.lost_markers)));
    }
    if report.unmatched_markers > 0 {
        parts.push(format!("{} markers unmatched", thousands(report.unmatched_markers)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" | <b class=\"flag\">warning: {}</b>", parts.join(", "))
    }
}

fn signed_duration(ns: f64) -> String {
    if ns < 0.0 {
        format!("-{}", duration((-ns) as u64))
    } else {
        format!("+{}", duration(ns as u64))
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em}\
.sub{color:#666}.flag{color:#D00}.chart{overflow-x:auto}\
table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}\
tr.anomalous{background:#fde8e8}";

/// One point of the accuracy plot: estimate / truth at one sampling period.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AccuracyPoint {
    pub period_ns: u64,
    /// Mean of per-item estimate / truth.
    pub mean_ratio: f64,
    /// Standard deviation of per-item estimate / truth.
    pub std_ratio: f64,
    /// Items (item, function pairs) the point averages over.
    pub items: usize,
}

/// Accuracy plot like the paper's Fig. 9: x = sampling period, y = mean estimate /
/// truth with ±1 standard deviation error bars, one series per estimator (name, color,
/// points), a dashed line at 1 (perfect) and a band at ±10 %.
pub fn accuracy_svg(series: &[(&str, &[AccuracyPoint])]) -> String {
    let (left, top, plot_w, plot_h) = (70.0, 30.0, 520.0, 300.0);
    let width = left + plot_w + 180.0;
    let height = top + plot_h + 60.0;
    let mut periods: Vec<u64> = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.period_ns)).collect();
    periods.sort_unstable();
    periods.dedup();
    let ymax = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.mean_ratio + q.std_ratio)).fold(1.2f64, f64::max).min(3.0);
    let ymin = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.mean_ratio - q.std_ratio)).fold(0.8f64, f64::min).max(0.0);
    let y_of = |v: f64| top + plot_h - (v - ymin) / (ymax - ymin) * plot_h;
    let slot = plot_w / periods.len().max(1) as f64;
    let x_of = |p: u64| left + slot * (periods.iter().position(|&q| q == p).unwrap_or(0) as f64 + 0.5);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(s, r##"<rect x="{left}" y="{:.1}" width="{plot_w}" height="{:.1}" fill="#e8f4e8"/>"##, y_of(1.1), y_of(0.9) - y_of(1.1));
    let step = nice_step(ymax - ymin, 6);
    let mut v = (ymin / step).ceil() * step;
    while v <= ymax + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{}" {}/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            if (v - 1.0).abs() < 1e-9 { "#333" } else { "#e5e5e5" },
            if (v - 1.0).abs() < 1e-9 { r#"stroke-dasharray="5,4""# } else { "" },
            left - 6.0,
            y_of(v) + 4.0,
            trim_float(v),
            y = y_of(v)
        );
        v += step;
    }
    for &p in &periods {
        let _ = write!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, x_of(p), top + plot_h + 18.0, duration(p));
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">sampling period (cpu-clock)</text><text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">estimate / true time</text>"#,
        left + plot_w / 2.0,
        top + plot_h + 42.0,
        top + plot_h / 2.0
    );
    let n = series.len().max(1) as f64;
    for (k, (name, points)) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let dx = (k as f64 - (n - 1.0) / 2.0) * 14.0;
        for q in points.iter() {
            let x = x_of(q.period_ns) + dx;
            let _ = write!(
                s,
                r#"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.5"/><circle cx="{x:.1}" cy="{:.1}" r="4" fill="{color}"><title>{}: {} mean {:.3} sd {:.3} over {} items</title></circle>"#,
                y_of((q.mean_ratio - q.std_ratio).max(ymin)),
                y_of((q.mean_ratio + q.std_ratio).min(ymax)),
                y_of(q.mean_ratio),
                escape(name),
                duration(q.period_ns),
                q.mean_ratio,
                q.std_ratio,
                q.items
            );
        }
        let ly = top + 10.0 + k as f64 * 20.0;
        let _ = write!(
            s,
            r#"<circle cx="{:.1}" cy="{ly:.1}" r="4" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            left + plot_w + 16.0,
            left + plot_w + 26.0,
            ly + 4.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Items whose wall time includes off-CPU time (context switches), most off-CPU first
/// (at most `max`): wall = cpu + blocked + runnable, and where they waited ("blocked
/// 18.2 ms in XactLockTableWait ← heap_update ← …"). Empty when the trace has no
/// switches. `p` must have been built with the spans of `report.items`.
pub fn off_cpu_section_html(report: &ItemsReport, p: &tailprof_analyze::stacks::StackProfile, max: usize) -> String {
    if p.switches == 0 || p.items.len() != report.items.len() {
        return String::new();
    }
    let mut idx: Vec<usize> = (0..p.items.len()).filter(|&i| p.items[i].off_cpu_ns() > 0).collect();
    if idx.is_empty() {
        return String::new();
    }
    idx.sort_by(|&a, &b| p.items[b].off_cpu_ns().cmp(&p.items[a].off_cpu_ns()).then(a.cmp(&b)));
    let mut h = String::from(
        "<h2>Off-CPU time of the items</h2>\n<table><tr><th>Item</th><th>Class</th><th>Wall</th><th>On CPU</th><th>Blocked</th><th>Runnable</th><th>Where it waited</th></tr>\n",
    );
    for &i in idx.iter().take(max) {
        let (it, st) = (&report.items[i], &p.items[i]);
        let cpu = it.duration_ns.saturating_sub(st.off_cpu_ns());
        let waits: Vec<String> = st.off_cpu.iter().take(3).map(|o| escape(&crate::stacks::off_row_line(p, o))).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            it.id,
            escape(it.class.as_deref().unwrap_or("")),
            duration(it.duration_ns),
            duration(cpu),
            duration(st.blocked_ns),
            duration(st.runnable_ns),
            waits.join("<br>")
        );
    }
    h.push_str("</table>\n");
    h
}

/// Who held the slow items up (issue 21): for the slowest items with recorded wakeups
/// (anomalous ones first, at most `max`), each waker (at most 3) with a link to the item
/// it was inside (`#item-ID`, the items table's rows), and a drawing of the wake edge: the
/// waker's item and this item on one time axis, this item's blocked time before the
/// wakeup shaded, an arrow from the waker at its wakeup to this item. Empty when the trace
/// has no wakeups. `p` must have been built with the spans of `report.items`.
pub fn causes_section_html(report: &ItemsReport, p: &tailprof_analyze::stacks::StackProfile, max: usize) -> String {
    if !p.cause_stats.recorded {
        return String::new();
    }
    let by_id: std::collections::HashMap<u64, &ItemRow> = report.items.iter().map(|r| (r.id, r)).collect();
    let mut slow: Vec<(&ItemRow, &tailprof_analyze::causes::ItemCauses)> =
        p.causes.iter().filter(|c| !c.woken_by.is_empty()).filter_map(|c| by_id.get(&c.id).map(|r| (*r, c))).collect();
    if slow.is_empty() {
        return String::new();
    }
    slow.sort_by(|a, b| b.0.anomalous.cmp(&a.0.anomalous).then(b.0.duration_ns.cmp(&a.0.duration_ns)).then(a.0.id.cmp(&b.0.id)));
    let mut h = String::from(
        "<h2>Who held the slow items up</h2>\n<p class=\"sub\">Per slow item, the threads whose wakeups ended its blocked time (largest first), the item each was inside (a link to its row), and the wake edge: the waker's item above, this item below (blocked time before the wakeup shaded), the arrow at the wakeup.</p>\n",
    );
    for (row, c) in slow.into_iter().take(max) {
        let _ = writeln!(
            h,
            "<h3 id=\"causes-{}\">item {} ({}): {}</h3>\n<ul>",
            row.id,
            row.id,
            escape(row.class.as_deref().unwrap_or("no class")),
            duration(row.duration_ns)
        );
        for w in c.woken_by.iter().take(3) {
            let who = match w.irq {
                Some(k) => format!("{} interrupt", k.name()),
                None => format!("{} (pid {}, tid {})", escape(if w.comm.is_empty() { "?" } else { &w.comm }), w.pid, w.tid),
            };
            let inside = match w.item {
                Some(i) if by_id.contains_key(&i) => format!(
                    ", inside <a href=\"#item-{i}\">item {i}</a>{}",
                    w.class.as_deref().map(|c| format!(" ({})", escape(c))).unwrap_or_default()
                ),
                Some(i) => format!(", inside item {i}"),
                None => String::new(),
            };
            let _ = writeln!(h, "<li>blocked {} woken by {who}{inside}</li>", duration(w.ns));
        }
        h.push_str("</ul>\n");
        if let Some(w) = c.woken_by.iter().find(|w| w.irq.is_none()) {
            h.push_str(&wake_edge_svg(row, w, w.item.and_then(|i| by_id.get(&i).copied())));
        }
    }
    h
}

/// The drawing of one wake edge: `waker_item` (when known) above, `row` below.
fn wake_edge_svg(row: &ItemRow, w: &tailprof_analyze::causes::WokenBy, waker_item: Option<&ItemRow>) -> String {
    let (width, left, right) = (640.0, 150.0, 20.0);
    let mut t0 = row.begin_ns.min(w.at_ns.saturating_sub(w.ns));
    let mut t1 = row.end_ns.max(w.at_ns);
    if let Some(wi) = waker_item {
        t0 = t0.min(wi.begin_ns);
        t1 = t1.max(wi.end_ns);
    }
    let span = (t1.saturating_sub(t0)).max(1) as f64;
    let x = |t: u64| left + (t.saturating_sub(t0)) as f64 / span * (width - left - right);
    let mut s = format!(
        "<svg class=\"wake\" width=\"{width}\" height=\"80\" viewBox=\"0 0 {width} 80\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\"><defs><marker id=\"arrow-{id}\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#D00\"/></marker></defs>\n",
        id = row.id
    );
    let waker_label = match waker_item {
        Some(wi) => format!("item {} (tid {})", wi.id, w.tid),
        None => format!("{} (tid {})", if w.comm.is_empty() { "?" } else { &w.comm }, w.tid),
    };
    match waker_item {
        Some(wi) => {
            let _ = writeln!(
                s,
                "<a href=\"#item-{}\"><text x=\"4\" y=\"22\">{}</text><rect x=\"{:.1}\" y=\"12\" width=\"{:.1}\" height=\"14\" fill=\"#7a9cc6\"><title>waker: item {} {}</title></rect></a>",
                wi.id,
                escape(&waker_label),
                x(wi.begin_ns),
                (x(wi.end_ns) - x(wi.begin_ns)).max(1.0),
                wi.id,
                duration(wi.duration_ns)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "<text x=\"4\" y=\"22\">{}</text><line x1=\"{left}\" x2=\"{:.1}\" y1=\"19\" y2=\"19\" stroke=\"#bbb\"/>",
                escape(&waker_label),
                width - right
            );
        }
    }
    let _ = writeln!(
        s,
        "<text x=\"4\" y=\"62\">item {} (tid {})</text><rect x=\"{:.1}\" y=\"52\" width=\"{:.1}\" height=\"14\" fill=\"#c6a27a\"><title>item {} {}</title></rect>",
        row.id,
        row.tid,
        x(row.begin_ns),
        (x(row.end_ns) - x(row.begin_ns)).max(1.0),
        row.id,
        duration(row.duration_ns)
    );
    let (bb, be) = (w.at_ns.saturating_sub(w.ns).max(row.begin_ns), w.at_ns.min(row.end_ns));
    let _ = writeln!(
        s,
        "<rect x=\"{:.1}\" y=\"52\" width=\"{:.1}\" height=\"14\" fill=\"#eee\" stroke=\"#999\"><title>blocked {}</title></rect>",
        x(bb),
        (x(be) - x(bb)).max(1.0),
        duration(w.ns)
    );
    let xa = x(w.at_ns);
    let _ = writeln!(
        s,
        "<line class=\"wake-edge\" data-waker-tid=\"{}\" data-wakee-item=\"{}\" x1=\"{xa:.1}\" y1=\"27\" x2=\"{xa:.1}\" y2=\"51\" stroke=\"#D00\" stroke-width=\"1.5\" marker-end=\"url(#arrow-{})\"><title>wakeup by tid {} ends {} blocked</title></line>",
        w.tid,
        row.id,
        row.id,
        w.tid,
        duration(w.ns)
    );
    s.push_str("</svg>\n");
    s
}
