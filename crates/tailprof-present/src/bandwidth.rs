//! `tailprof bandwidth` output: the text report, the JSON document, the SVG timeline and
//! the HTML page, and the `mem_bytes` / `mem_gbps` columns `items --json` gains on
//! traces with a last-level-cache-miss event.
//!
//! The timeline ([`bandwidth_svg`]) draws, over time, the raw estimate (step line) inside
//! its 95% error band, the loss-corrected estimate (dashed) when a loss model applies,
//! gaps (lost or throttled samples) as hatched columns with no line through them, bursts
//! as shaded backgrounds, the machine peak and the saturation threshold as horizontal
//! lines with the saturated columns marked, and the items as bars in lanes under the
//! plot. More bins than pixels columns are merged (samples and bytes summed, the interval
//! recomputed from the merged count). Everything is inline SVG; all trace text is
//! escaped.

use std::fmt::Write as _;

use serde_json::Value;
use tailprof_analyze::bandwidth::poisson::PoissonIntervals;
use tailprof_analyze::bandwidth::{BandwidthReport, BwGroupBy, ItemBandwidth};

use crate::fmt::{bytes, duration, thousands};
use crate::html::escape;
use crate::table::{render_table, Align};
use crate::PresentError;

/// What the text and HTML show.
#[derive(Debug, Clone)]
pub struct BandwidthView {
    /// Rows of the group / item / burst tables (0: all).
    pub top: usize,
    /// Columns of the text sparkline.
    pub spark_width: usize,
    /// Page title (HTML).
    pub title: String,
    pub subtitle: Option<String>,
}

impl Default for BandwidthView {
    fn default() -> Self {
        BandwidthView { top: 20, spark_width: 72, title: "tailprof: memory bandwidth".into(), subtitle: None }
    }
}

/// "12.34 GB/s" with sensible precision.
pub fn gbps(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} GB/s")
    } else if v >= 10.0 {
        format!("{v:.1} GB/s")
    } else if v >= 0.01 || v == 0.0 {
        format!("{v:.2} GB/s")
    } else {
        format!("{:.1} MB/s", v * 1000.0)
    }
}

fn range(lo: f64, hi: f64) -> String {
    format!("[{}, {}]", trim_unit(lo), gbps(hi))
}

fn trim_unit(v: f64) -> String {
    gbps(v).trim_end_matches(" GB/s").to_string()
}

/// One timeline column (several bins merged).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Column {
    pub start_ns: u64,
    pub width_ns: u64,
    pub samples: u64,
    pub bytes: u64,
    pub gbps: f64,
    pub low: f64,
    pub high: f64,
    pub corrected: f64,
    pub gap: bool,
    pub saturated: bool,
}

/// Merge the report's bins into at most `max` columns.
pub fn columns(r: &BandwidthReport, max: usize) -> Vec<Column> {
    let n = r.bins.len();
    if n == 0 || max == 0 {
        return Vec::new();
    }
    let k = n.div_ceil(max);
    let mut pi = PoissonIntervals::new();
    let per_default = r.period.max(1) as f64 * r.line_bytes as f64;
    r.bins
        .chunks(k)
        .map(|c| {
            let samples: u64 = c.iter().map(|b| b.samples).sum();
            let b: u64 = c.iter().map(|b| b.bytes).sum();
            let w: u64 = c.iter().map(|b| b.width_ns).sum::<u64>().max(1);
            let per = if samples > 0 { b as f64 / samples as f64 } else { per_default };
            let (lo, hi) = pi.get(samples);
            let g = b as f64 / w as f64;
            Column {
                start_ns: c[0].start_ns,
                width_ns: w,
                samples,
                bytes: b,
                gbps: g,
                low: lo * per / w as f64,
                high: hi * per / w as f64,
                corrected: g * r.loss.factor,
                gap: c.iter().any(|b| b.gap),
                saturated: c.iter().any(|b| b.near_saturation),
            }
        })
        .collect()
}

/// A text sparkline of the timeline (`·` for gaps).
pub fn sparkline(r: &BandwidthReport, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let cols = columns(r, width);
    let max = cols.iter().filter(|c| !c.gap).map(|c| c.gbps).fold(0.0, f64::max);
    cols.iter()
        .map(|c| {
            if c.gap {
                '·'
            } else if max <= 0.0 || c.samples == 0 {
                ' '
            } else {
                BARS[((c.gbps / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// The text report.
pub fn render_bandwidth(r: &BandwidthReport, view: &BandwidthView) -> String {
    let mut out = String::new();
    let s = &r.summary;
    let _ = writeln!(
        out,
        "memory bandwidth from {} ({}; {})",
        r.event,
        r.method,
        if r.period_varies { "period varies".to_string() } else { format!("one sample per {} events", thousands(r.period)) }
    );
    if let Some(reason) = &r.reason {
        let _ = writeln!(out, "  why this event: {reason}");
    }
    let _ = writeln!(
        out,
        "  {} samples{} | {} bins of {} over {} | bytes = samples x period x {} B",
        thousands(r.samples_used),
        if r.samples_used != r.samples { format!(" (of {})", thousands(r.samples)) } else { String::new() },
        thousands(s.bins),
        duration(r.bin_ns),
        duration(s.duration_ns),
        r.line_bytes
    );
    let _ = writeln!(out, "\nsummary (bins without gaps; 95% intervals from the sample counts)");
    let rows = vec![
        vec!["total".into(), bytes(r.total_bytes), format!("corrected {}", bytes(r.total_bytes_corrected as u64))],
        vec!["mean".into(), gbps(s.mean_gbps), range(s.mean_gbps_low, s.mean_gbps_high)],
        vec!["mean, loss-corrected".into(), gbps(s.mean_gbps_corrected), String::new()],
        if s.peak_gbps > 0.0 {
            vec![
                "peak bin".into(),
                gbps(s.peak_gbps),
                format!("at +{} (low {})", duration(s.peak_start_ns.saturating_sub(r.start_ns)), gbps(s.peak_gbps_low)),
            ]
        } else {
            vec!["peak bin".into(), "-".into(), "no samples counted".into()]
        },
        vec![
            "p50 / p90 / p99".into(),
            format!("{} / {} / {}", trim_unit(s.p50_gbps), trim_unit(s.p90_gbps), gbps(s.p99_gbps)),
            String::new(),
        ],
        vec![
            "resolution".into(),
            gbps(s.resolution_gbps),
            format!("one sample per bin; {} bins below {} samples", thousands(s.below_resolution_bins), min_samples_text(r)),
        ],
        vec![
            "gaps".into(),
            format!("{} bins", thousands(s.gap_bins)),
            format!(
                "lost records {}, lost samples {}, throttled {}x",
                thousands(r.lost_records),
                thousands(r.lost_samples),
                thousands(r.throttles)
            ),
        ],
    ];
    let mut table = String::new();
    render_table(&mut table, &[("", Align::Left), ("", Align::Right), ("", Align::Left)], &rows);
    // The heading row is empty: drop it.
    out.push_str(table.split_once('\n').map_or("", |(_, rest)| rest));
    let _ = writeln!(out, "\nloss model: {}", r.loss.describe());
    if let Some(sat) = &r.saturation {
        let _ = writeln!(
            out,
            "saturation: machine peak {} ({}); {} bins at or above {:.0}% = {}{}",
            gbps(sat.peak_gbps),
            sat.source,
            thousands(sat.bins),
            sat.fraction * 100.0,
            gbps(sat.threshold_gbps),
            if sat.windows.is_empty() { String::new() } else { format!(" in {} window(s)", sat.windows.len()) }
        );
    }
    if !r.bins.is_empty() {
        let _ = writeln!(out, "\ntimeline (max {}): |{}|", gbps(s.peak_gbps), sparkline(r, view.spark_width));
    }
    if !r.levels.is_empty() {
        let lv: Vec<String> =
            r.levels.iter().map(|l| format!("{} {}{}", l.name, thousands(l.samples), if l.memory { "*" } else { "" })).collect();
        let _ = writeln!(out, "data sources: {} (* = memory)", lv.join(", "));
    }
    let top = |n: usize| if view.top == 0 { n } else { view.top.min(n) };
    if r.burst_split.distinct {
        let _ = writeln!(
            out,
            "\nbursts: {} phase(s) of high use (levels {} / {}, threshold {})",
            r.bursts.len(),
            gbps(r.burst_split.low_gbps),
            gbps(r.burst_split.high_gbps),
            gbps(r.burst_split.threshold_gbps)
        );
        let rows: Vec<Vec<String>> = r.bursts[..top(r.bursts.len())]
            .iter()
            .map(|b| {
                vec![
                    format!("+{}", duration(b.start_ns.saturating_sub(r.start_ns))),
                    duration(b.end_ns - b.start_ns),
                    bytes(b.bytes),
                    gbps(b.mean_gbps),
                    range(b.mean_gbps_low, b.mean_gbps_high),
                    gbps(b.peak_gbps),
                ]
            })
            .collect();
        render_table(
            &mut out,
            &[
                ("start", Align::Right),
                ("length", Align::Right),
                ("bytes", Align::Right),
                ("mean", Align::Right),
                ("95%", Align::Left),
                ("peak bin", Align::Right),
            ],
            &rows,
        );
    } else {
        let _ = writeln!(out, "\nbursts: none (no two distinct levels of use)");
    }
    if !r.groups.is_empty() {
        let by = match r.group_by {
            Some(BwGroupBy::Cpu) => "cpu",
            Some(BwGroupBy::Process) => "process",
            _ => "thread",
        };
        let _ = writeln!(out, "\nby {by}");
        let rows: Vec<Vec<String>> = r.groups[..top(r.groups.len())]
            .iter()
            .map(|g| vec![g.label.clone(), thousands(g.samples), bytes(g.bytes), gbps(g.mean_gbps), gbps(g.peak_gbps)])
            .collect();
        render_table(
            &mut out,
            &[(by, Align::Left), ("samples", Align::Right), ("bytes", Align::Right), ("mean", Align::Right), ("peak bin", Align::Right)],
            &rows,
        );
    }
    if !r.items.is_empty() {
        let _ = writeln!(out, "\nby item ({} items; mean bandwidth over each item's duration)", r.items.len());
        let mut items: Vec<&ItemBandwidth> = r.items.iter().collect();
        items.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.begin_ns.cmp(&b.begin_ns)));
        let rows: Vec<Vec<String>> = items[..top(items.len())]
            .iter()
            .map(|i| {
                vec![
                    i.id.to_string(),
                    i.class.clone().unwrap_or_default(),
                    duration(i.duration_ns),
                    thousands(i.samples),
                    bytes(i.bytes),
                    gbps(i.gbps),
                    range(i.gbps_low, i.gbps_high),
                ]
            })
            .collect();
        render_table(
            &mut out,
            &[
                ("item", Align::Right),
                ("class", Align::Left),
                ("duration", Align::Right),
                ("samples", Align::Right),
                ("bytes", Align::Right),
                ("mean", Align::Right),
                ("95%", Align::Left),
            ],
            &rows,
        );
    }
    if !r.gaps.is_empty() {
        let _ = writeln!(out, "\ngaps (samples missing: shown as gaps, not as low bandwidth)");
        let rows: Vec<Vec<String>> = r.gaps[..top(r.gaps.len())]
            .iter()
            .map(|g| {
                vec![
                    format!("+{}", duration(g.start_ns.saturating_sub(r.start_ns))),
                    duration(g.end_ns - g.start_ns),
                    if g.cpu == u32::MAX { "?".into() } else { g.cpu.to_string() },
                    g.kind.clone(),
                    if g.count > 0 { thousands(g.count) } else { String::new() },
                ]
            })
            .collect();
        render_table(
            &mut out,
            &[("start", Align::Right), ("length", Align::Right), ("cpu", Align::Right), ("kind", Align::Left), ("count", Align::Right)],
            &rows,
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn min_samples_text(r: &BandwidthReport) -> String {
    r.min_samples.to_string()
}

/// `tailprof bandwidth --json`: the whole report; `event`, `period`, `bin_ns`,
/// `total_bytes` and `bins[].{start_ns, samples, bytes, gbps, gbps_low, gbps_high}` are
/// the stable core.
pub fn bandwidth_json(r: &BandwidthReport) -> Result<Value, PresentError> {
    Ok(serde_json::to_value(r)?)
}

/// [`bandwidth_json`] as text.
pub fn bandwidth_json_string(r: &BandwidthReport) -> Result<String, PresentError> {
    crate::json::document(&bandwidth_json(r)?)
}

const W: f64 = 1000.0;
const PLOT_H: f64 = 300.0;
const LEFT: f64 = 64.0;
const TOP: f64 = 16.0;
const LANE_H: f64 = 10.0;
const MAX_LANES: usize = 8;

fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    mag * if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// A tick label with as many decimals as the step needs.
fn tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{v:.decimals$}")
}

/// The timeline as an inline SVG (see the module docs).
pub fn bandwidth_svg(r: &BandwidthReport) -> String {
    let cols = columns(r, W as usize);
    let mut s = String::new();
    let lanes = item_lanes(&r.items);
    let nlanes = lanes.iter().map(|&(_, l)| l + 1).max().unwrap_or(0);
    let items_h = if r.items.is_empty() { 0.0 } else { 18.0 + nlanes as f64 * (LANE_H + 2.0) };
    let height = TOP + PLOT_H + 36.0 + items_h;
    let total_w = LEFT + W + 16.0;
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" viewBox="0 0 {total_w} {height}" font-family="sans-serif" font-size="11">"##
    );
    s.push_str(r##"<defs><pattern id="gap" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bbb" stroke-width="2"/></pattern></defs>"##);
    if cols.is_empty() {
        s.push_str(r#"<text x="20" y="40">no samples</text></svg>"#);
        return s;
    }
    let t0 = r.start_ns as f64;
    let span = (r.end_ns.max(r.start_ns + 1) - r.start_ns) as f64;
    let span = span.max(cols.iter().map(|c| (c.start_ns + c.width_ns) as f64 - t0).fold(0.0, f64::max));
    let x = |t: f64| LEFT + (t - t0) / span * W;
    let mut ymax = cols.iter().filter(|c| !c.gap).map(|c| c.high.max(c.corrected)).fold(0.0, f64::max);
    if let Some(sat) = &r.saturation {
        ymax = ymax.max(sat.peak_gbps);
    }
    let ymax = if ymax > 0.0 { ymax * 1.05 } else { 1.0 };
    let y = |g: f64| TOP + PLOT_H - (g / ymax).min(1.0) * PLOT_H;
    // Frame and y grid.
    let step = nice_step(ymax, 5.0);
    let mut v = 0.0;
    while v <= ymax + 1e-12 {
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + W,
            y(v),
            y(v),
            LEFT - 4.0,
            y(v) + 4.0,
            tick(v, step)
        );
        v += step;
    }
    let _ = write!(
        s,
        r#"<text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">GB/s</text>"#,
        TOP + PLOT_H / 2.0,
        TOP + PLOT_H / 2.0
    );
    // Bursts.
    for b in &r.bursts {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{PLOT_H}" fill="#fff3d6"><title>burst: {} for {}, mean {}</title></rect>"##,
            x(b.start_ns as f64),
            (x(b.end_ns as f64) - x(b.start_ns as f64)).max(0.5),
            bytes(b.bytes),
            duration(b.end_ns - b.start_ns),
            gbps(b.mean_gbps)
        );
    }
    // Gaps.
    for c in cols.iter().filter(|c| c.gap) {
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{TOP}" width="{:.2}" height="{PLOT_H}" fill="url(#gap)"><title>gap: samples lost or throttled</title></rect>"#,
            x(c.start_ns as f64),
            (x((c.start_ns + c.width_ns) as f64) - x(c.start_ns as f64)).max(0.5)
        );
    }
    // Error band and lines, per run of non-gap columns.
    let runs = cols.split(|c| c.gap).filter(|r| !r.is_empty());
    for run in runs {
        let mut band = String::new();
        let mut line = String::new();
        let mut corr = String::new();
        for c in run {
            let (a, b) = (x(c.start_ns as f64), x((c.start_ns + c.width_ns) as f64));
            let _ = write!(band, "{a:.1},{:.1} {b:.1},{:.1} ", y(c.high), y(c.high));
            let _ = write!(line, "{a:.1},{:.1} {b:.1},{:.1} ", y(c.gbps), y(c.gbps));
            let _ = write!(corr, "{a:.1},{:.1} {b:.1},{:.1} ", y(c.corrected), y(c.corrected));
        }
        for c in run.iter().rev() {
            let (a, b) = (x(c.start_ns as f64), x((c.start_ns + c.width_ns) as f64));
            let _ = write!(band, "{b:.1},{:.1} {a:.1},{:.1} ", y(c.low), y(c.low));
        }
        let _ = write!(s, r##"<polygon points="{}" fill="#9ecae1" fill-opacity="0.6" stroke="none"/>"##, band.trim_end());
        if r.loss.applies() && (r.loss.factor - 1.0).abs() > 1e-9 {
            let _ = write!(
                s,
                r##"<polyline points="{}" fill="none" stroke="#d95f02" stroke-width="1" stroke-dasharray="4 2"/>"##,
                corr.trim_end()
            );
        }
        let _ = write!(s, r##"<polyline points="{}" fill="none" stroke="#08519c" stroke-width="1.2"/>"##, line.trim_end());
    }
    // Saturation.
    if let Some(sat) = &r.saturation {
        for (g, label, color) in [(sat.peak_gbps, "machine peak", "#a50f15"), (sat.threshold_gbps, "saturation", "#fb6a4a")] {
            let _ = write!(
                s,
                r#"<line x1="{LEFT}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="{color}" stroke-dasharray="6 3"/><text x="{}" y="{:.1}" fill="{color}" text-anchor="end" paint-order="stroke" stroke="white" stroke-width="3">{label} {}</text>"#,
                LEFT + W,
                y(g),
                y(g),
                LEFT + W - 4.0,
                y(g) - 3.0,
                escape(&gbps(g))
            );
        }
        for c in cols.iter().filter(|c| c.saturated) {
            let _ = write!(
                s,
                r##"<rect x="{:.1}" y="{}" width="{:.2}" height="5" fill="#a50f15"><title>near saturation: {}</title></rect>"##,
                x(c.start_ns as f64),
                TOP - 7.0,
                (x((c.start_ns + c.width_ns) as f64) - x(c.start_ns as f64)).max(1.0),
                escape(&gbps(c.gbps))
            );
        }
    }
    // X axis.
    let base = TOP + PLOT_H;
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" x2="{}" y1="{base}" y2="{base}" stroke="#333"/><line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="#333"/>"##,
        LEFT + W
    );
    let tstep = nice_step(span, 8.0);
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{base}" y2="{}" stroke="#333"/><text x="{:.1}" y="{}" text-anchor="middle">{}</text>"##,
            x(t0 + t),
            x(t0 + t),
            base + 4.0,
            x(t0 + t),
            base + 16.0,
            escape(&duration(t as u64))
        );
        t += tstep;
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time since start (bins of {})</text>"#,
        LEFT + W / 2.0,
        base + 30.0,
        escape(&duration(r.bin_ns))
    );
    // Items.
    if !r.items.is_empty() {
        let top = base + 40.0;
        let _ = write!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">items</text>"#, LEFT - 4.0, top + 8.0);
        let maxg = r.items.iter().map(|i| i.gbps).fold(0.0, f64::max).max(1e-12);
        for &(i, lane) in &lanes {
            let it = &r.items[i];
            let a = x(it.begin_ns as f64);
            let w = (x(it.end_ns as f64) - a).max(1.0);
            let shade = 0.25 + 0.75 * (it.gbps / maxg);
            let _ = write!(
                s,
                r##"<rect x="{a:.1}" y="{:.1}" width="{w:.2}" height="{LANE_H}" fill="#54278f" fill-opacity="{shade:.2}"><title>item {}{}: {} in {}, {} {}</title></rect>"##,
                top + lane as f64 * (LANE_H + 2.0),
                it.id,
                it.class.as_ref().map(|c| format!(" ({})", escape(c))).unwrap_or_default(),
                bytes(it.bytes),
                duration(it.duration_ns),
                escape(&gbps(it.gbps)),
                escape(&range(it.gbps_low, it.gbps_high))
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Greedy lanes for items (by begin time); items beyond [`MAX_LANES`] overlapping ones
/// share the last lane.
fn item_lanes(items: &[ItemBandwidth]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (items[i].begin_ns, items[i].end_ns));
    let mut lane_end: Vec<u64> = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for i in order {
        let it = &items[i];
        let lane = match lane_end.iter().position(|&e| e <= it.begin_ns) {
            Some(l) => l,
            None if lane_end.len() < MAX_LANES => {
                lane_end.push(0);
                lane_end.len() - 1
            }
            None => MAX_LANES - 1,
        };
        lane_end[lane] = lane_end[lane].max(it.end_ns);
        out.push((i, lane));
    }
    out
}

/// The HTML page: summary, timeline, bursts, groups and items.
pub fn render_bandwidth_html(r: &BandwidthReport, view: &BandwidthView) -> String {
    let mut h = String::new();
    let s = &r.summary;
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{}</title><style>body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;margin:8px 0}}td,th{{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}}td.l,th.l{{text-align:left}}.note{{color:#555}}</style></head><body>\n<h1>{}</h1>\n",
        escape(&view.title),
        escape(&view.title)
    );
    if let Some(sub) = &view.subtitle {
        let _ = writeln!(h, "<p>{}</p>", escape(sub));
    }
    let _ = writeln!(
        h,
        "<p>{} ({}), one sample per {} events, {} B per event; {} samples in {} bins of {} over {}.</p>",
        escape(&r.event),
        escape(&r.method),
        thousands(r.period),
        r.line_bytes,
        thousands(r.samples_used),
        thousands(s.bins),
        escape(&duration(r.bin_ns)),
        escape(&duration(s.duration_ns))
    );
    if let Some(reason) = &r.reason {
        let _ = writeln!(h, "<p class=\"note\">Why this event: {}</p>", escape(reason));
    }
    h.push_str("<table>");
    let row = |h: &mut String, k: &str, v: String, w: String| {
        let _ = write!(h, "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>", escape(k), escape(&v), escape(&w));
    };
    row(&mut h, "total", bytes(r.total_bytes), format!("loss-corrected {}", bytes(r.total_bytes_corrected as u64)));
    row(&mut h, "mean", gbps(s.mean_gbps), format!("95% {}", range(s.mean_gbps_low, s.mean_gbps_high)));
    row(&mut h, "mean, loss-corrected", gbps(s.mean_gbps_corrected), String::new());
    row(&mut h, "peak bin", gbps(s.peak_gbps), format!("at +{}", duration(s.peak_start_ns.saturating_sub(r.start_ns))));
    row(&mut h, "p50 / p90 / p99", format!("{} / {} / {}", trim_unit(s.p50_gbps), trim_unit(s.p90_gbps), gbps(s.p99_gbps)), String::new());
    row(&mut h, "resolution", gbps(s.resolution_gbps), format!("{} bins below resolution", thousands(s.below_resolution_bins)));
    row(
        &mut h,
        "gaps",
        format!("{} bins", thousands(s.gap_bins)),
        format!("lost records {}, lost samples {}, throttled {}x", r.lost_records, r.lost_samples, r.throttles),
    );
    h.push_str("</table>\n");
    let _ = writeln!(h, "<p>Loss model: {}</p>", escape(&r.loss.describe()));
    if let Some(sat) = &r.saturation {
        let _ = writeln!(
            h,
            "<p>Machine peak {} ({}): {} bins at or above {:.0}% of it.</p>",
            escape(&gbps(sat.peak_gbps)),
            escape(&sat.source),
            sat.bins,
            sat.fraction * 100.0
        );
    }
    h.push_str("<p class=\"note\">Blue line: raw estimate; blue band: its 95% interval; dashed orange: loss-corrected; hatched: gaps (samples lost or throttled, not low bandwidth); yellow: bursts; purple bars: items (darker = more GB/s).</p>\n");
    h.push_str(&bandwidth_svg(r));
    h.push('\n');
    let top = |n: usize| if view.top == 0 { n } else { view.top.min(n) };
    if !r.bursts.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Bursts ({})</h2><table><tr><th>start</th><th>length</th><th>bytes</th><th>mean</th><th>95%</th><th>peak bin</th></tr>",
            r.bursts.len()
        );
        for b in &r.bursts[..top(r.bursts.len())] {
            let _ = writeln!(
                h,
                "<tr><td>+{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&duration(b.start_ns.saturating_sub(r.start_ns))),
                escape(&duration(b.end_ns - b.start_ns)),
                escape(&bytes(b.bytes)),
                escape(&gbps(b.mean_gbps)),
                escape(&range(b.mean_gbps_low, b.mean_gbps_high)),
                escape(&gbps(b.peak_gbps))
            );
        }
        h.push_str("</table>\n");
    }
    if !r.groups.is_empty() {
        h.push_str("<h2>Groups</h2><table><tr><th class=\"l\">group</th><th>samples</th><th>bytes</th><th>mean</th><th>peak bin</th></tr>");
        for g in &r.groups[..top(r.groups.len())] {
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&g.label),
                thousands(g.samples),
                escape(&bytes(g.bytes)),
                escape(&gbps(g.mean_gbps)),
                escape(&gbps(g.peak_gbps))
            );
        }
        h.push_str("</table>\n");
    }
    if !r.items.is_empty() {
        let mut items: Vec<&ItemBandwidth> = r.items.iter().collect();
        items.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.begin_ns.cmp(&b.begin_ns)));
        let _ = writeln!(h, "<h2>Items ({}, most bytes first)</h2><table><tr><th>item</th><th class=\"l\">class</th><th>duration</th><th>samples</th><th>bytes</th><th>mean</th><th>95%</th></tr>", items.len());
        for i in &items[..top(items.len())] {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                i.id,
                escape(i.class.as_deref().unwrap_or("")),
                escape(&duration(i.duration_ns)),
                thousands(i.samples),
                escape(&bytes(i.bytes)),
                escape(&gbps(i.gbps)),
                escape(&range(i.gbps_low, i.gbps_high))
            );
        }
        h.push_str("</table>\n");
    }
    for n in &r.notes {
        let _ = writeln!(h, "<p class=\"note\">Note: {}</p>", escape(n));
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_analyze::bandwidth::synth::{generate, Phase, SynthConfig};
    use tailprof_analyze::bandwidth::{BandwidthBuilder, BandwidthOptions};
    use tailprof_format::Sink;

    fn report(cfg: &SynthConfig, opts: &BandwidthOptions) -> BandwidthReport {
        let (h, records, _) = generate(cfg);
        let mut b = BandwidthBuilder::new(&h, opts).unwrap();
        for r in &records {
            b.handle_record(r);
        }
        b.finish().unwrap()
    }

    #[test]
    fn json_has_the_documented_core() {
        let r = report(&SynthConfig { repeat: 1, ..Default::default() }, &BandwidthOptions::default());
        let v = bandwidth_json(&r).unwrap();
        assert_eq!(v["event"], "MEM_LOAD_RETIRED.L3_MISS");
        assert_eq!(v["period"], 1009);
        assert_eq!(v["bin_ns"], 100_000);
        assert_eq!(v["total_bytes"], r.total_bytes);
        let b = &v["bins"][3];
        for k in ["start_ns", "samples", "bytes", "gbps", "gbps_low", "gbps_high"] {
            assert!(b.get(k).is_some(), "{k}");
        }
        let sum: u64 = v["bins"].as_array().unwrap().iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
        assert_eq!(sum, r.total_bytes);
        assert_eq!(v["bins"].as_array().unwrap().len(), r.bins.len());
    }

    #[test]
    fn text_svg_and_html() {
        let cfg = SynthConfig {
            phases: vec![Phase { duration_ns: 15_000_000, gbps: 1.5 }, Phase { duration_ns: 5_000_000, gbps: 10.0 }],
            repeat: 3,
            items: true,
            throttle: vec![(0, 2_000_000, 4_000_000)],
            ..Default::default()
        };
        let opts =
            BandwidthOptions { items: true, by: Some(BwGroupBy::Cpu), peak_gbps: Some((12.0, "probe".into())), ..Default::default() };
        let r = report(&cfg, &opts);
        let t = render_bandwidth(&r, &BandwidthView::default());
        assert!(t.contains("memory bandwidth from MEM_LOAD_RETIRED.L3_MISS (pebs; one sample per 1,009 events)"), "{t}");
        assert!(t.contains("(bins without gaps; 95% intervals from the sample counts)\ntotal "), "{t}");
        assert!(t.contains("bursts: 3 phase(s)"), "{t}");
        assert!(t.contains("loss model: l = 20 events lost per activation assumed"), "{t}");
        assert!(t.contains("by cpu") && t.contains("by item (6 items"), "{t}");
        assert!(t.contains("throttled"), "{t}");
        assert!(t.contains("saturation: machine peak 12.0 GB/s (probe)"), "{t}");
        let spark = sparkline(&r, 60);
        assert_eq!(spark.chars().count(), 60);
        assert!(spark.contains('·') && spark.contains('█'), "{spark}");
        let svg = bandwidth_svg(&r);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("url(#gap)") && svg.contains("<polygon") && svg.contains("stroke-dasharray=\"4 2\""));
        assert!(svg.contains("item 1:") && svg.contains("machine peak") && svg.contains("burst:"));
        let html = render_bandwidth_html(&r, &BandwidthView { subtitle: Some("<cmd>".into()), ..Default::default() });
        assert!(html.contains("&lt;cmd&gt;") && html.contains("<svg") && html.contains("<h2>Items (6"));
        assert_eq!(columns(&r, 10).len(), 10);
        assert_eq!((tick(10.0, 5.0), tick(2.5, 0.5), tick(0.25, 0.05)), ("10".to_string(), "2.5".to_string(), "0.25".to_string()));
        let merged: u64 = columns(&r, 7).iter().map(|c| c.samples).sum();
        assert_eq!(merged, r.samples_used);
    }
}
