//! Text output: flat profiles as aligned tables, trace info as a key/value block.
//!
//! Profile layout (function grouping):
//!
//! ```text
//! # Event:   cpu-clock
//! # Samples: 1,000
//! # Lost:    3 (0.30%)
//! WARNING: lost 3 samples (0.30%): ring buffers were full (...)
//!
//!  Samples  Percent  Function  Binary
//!      600   60.00%  alpha     app
//!      397   39.70%  beta      app
//! (1 more row, 0.30% of samples)
//! ```
//!
//! Numeric columns are right-aligned, text columns left-aligned; the last column is
//! not padded. Names longer than [`MAX_NAME_WIDTH`] are printed whole and push that
//! row's remaining columns right rather than being cut.

use std::fmt::Write as _;

use tailprof_analyze::profile::GroupBy;
use tailprof_analyze::{FlatProfile, TraceInfo};

use crate::fmt::{bytes, duration, percent, share, thousands, utc_time};
use crate::warnings::{info_warnings, profile_warnings, Warning};

/// Name columns are padded to at most this width.
pub const MAX_NAME_WIDTH: usize = 60;

/// Options for [`render_profile`].
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Show only the first N rows (a footer tells what was left out); `None`: all.
    pub top: Option<usize>,
    /// Add a column with the summed sample periods.
    pub show_period: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions { top: Some(50), show_period: false }
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// Render rows of cells under `head`; see the module docs for the layout rules.
pub(crate) fn render_table(out: &mut String, head: &[(&str, Align)], rows: &[Vec<String>]) {
    render_rows(out, head, rows, true)
}

/// [`render_table`] without the heading line (`head` still gives the alignment).
fn render_table_body(out: &mut String, head: &[(&str, Align)], rows: &[Vec<String>]) {
    render_rows(out, head, rows, false)
}

fn render_rows(out: &mut String, head: &[(&str, Align)], rows: &[Vec<String>], with_head: bool) {
    let n = head.len();
    let mut width: Vec<usize> = head.iter().map(|(h, _)| if with_head { h.chars().count() } else { 0 }).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            let cap = if head[i].1 == Align::Left { MAX_NAME_WIDTH } else { usize::MAX };
            width[i] = width[i].max(c.chars().count().min(cap));
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = width[i].saturating_sub(c.chars().count());
            match head[i].1 {
                Align::Right => {
                    s.extend(std::iter::repeat_n(' ', pad));
                    s.push_str(c);
                }
                Align::Left => {
                    s.push_str(c);
                    if i + 1 < n {
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    if with_head {
        line(&mut head.iter().map(|(h, _)| *h));
    }
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
}

fn push_warnings(out: &mut String, warnings: &[Warning]) {
    for w in warnings {
        let _ = writeln!(out, "WARNING: {}", w.message);
    }
}

/// Render a flat profile as text.
pub fn render_profile(p: &FlatProfile, opts: &TableOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Event:   {}", p.event);
    let others: Vec<String> = p
        .events
        .iter()
        .filter(|e| e.index != p.event_index)
        // perf's side-band-only `dummy` event never has samples: not worth a mention.
        .filter(|e| e.samples > 0 || !e.name.starts_with("dummy"))
        .map(|e| format!("{} ({} samples)", e.name, thousands(e.samples)))
        .collect();
    if !others.is_empty() {
        let _ = writeln!(out, "# Other events: {}", others.join(", "));
    }
    let _ = writeln!(out, "# Samples: {}", thousands(p.samples));
    let recorded: u64 = p.events.iter().map(|e| e.samples).sum();
    let _ = writeln!(out, "# Lost:    {} ({})", thousands(p.lost), share(p.lost, recorded + p.lost));
    if let Some(k) = &p.kernel_symbols {
        let _ = writeln!(out, "# Note:    {k}");
    }
    if !p.stack_statuses.is_empty() {
        let parts: Vec<String> =
            p.stack_statuses.iter().map(|s| format!("{} {} ({})", s.reason, share(s.samples, p.samples), thousands(s.samples))).collect();
        let _ = writeln!(out, "# Stacks:  {} (--by stack, --folded)", parts.join(", "));
    }
    push_warnings(&mut out, &profile_warnings(p));
    out.push('\n');

    if p.rows.is_empty() {
        out.push_str("(no samples)\n");
        return out;
    }
    let shown = opts.top.map_or(p.rows.len(), |n| n.min(p.rows.len()));
    let mut head: Vec<(&str, Align)> = vec![("Samples", Align::Right), ("Percent", Align::Right)];
    if opts.show_period {
        head.push(("Period", Align::Right));
    }
    // Source locations (a function's first line, DWARF or jitdump; with `--lines` the
    // row's line) get a column when a shown row has one.
    let sources = p.group_by == GroupBy::Function && p.rows[..shown].iter().any(|r| r.source.is_some());
    let by_line = p.granularity == tailprof_analyze::Granularity::Line;
    match p.group_by {
        GroupBy::Function => head.extend([("Function", Align::Left), ("Binary", Align::Left)]),
        GroupBy::Binary => head.extend([("Binary", Align::Left), ("Path", Align::Left)]),
        GroupBy::Thread => head.extend([("PID", Align::Right), ("TID", Align::Right), ("Thread", Align::Left)]),
    }
    if sources {
        head.push((if by_line { "Line" } else { "Source" }, Align::Left));
    }
    let rows: Vec<Vec<String>> = p.rows[..shown]
        .iter()
        .map(|r| {
            let mut cells = vec![thousands(r.samples), percent(r.percent)];
            if opts.show_period {
                cells.push(thousands(r.period));
            }
            let bin = r.binary.clone().unwrap_or_default();
            match p.group_by {
                GroupBy::Function => {
                    cells.push(r.name.clone());
                    cells.push(tailprof_analyze::maps::short_name(&bin).to_owned());
                    if sources {
                        cells.push(r.source.clone().unwrap_or_default());
                    }
                }
                GroupBy::Binary => {
                    cells.push(r.name.clone());
                    cells.push(bin);
                }
                GroupBy::Thread => {
                    cells.push(r.pid.map(|v| v.to_string()).unwrap_or_default());
                    cells.push(r.tid.map(|v| v.to_string()).unwrap_or_default());
                    cells.push(r.name.clone());
                }
            }
            cells
        })
        .collect();
    render_table(&mut out, &head, &rows);
    let rest = &p.rows[shown..];
    if !rest.is_empty() {
        let n: u64 = rest.iter().map(|r| r.samples).sum();
        let _ = writeln!(
            out,
            "({} more {}, {} of samples)",
            thousands(rest.len() as u64),
            if rest.len() == 1 { "row" } else { "rows" },
            share(n, p.samples)
        );
    }
    out
}

fn kv(out: &mut String, key: &str, value: impl AsRef<str>) {
    let _ = writeln!(out, "{:<14}{}", format!("{key}:"), value.as_ref());
}

/// "9,812 complete, 188 truncated (copy exhausted 150, max depth 38)", plus stacks whose
/// completeness is unknown.
fn stack_counts(c: &tailprof_format::StackStatusCounts) -> String {
    let mut s = format!("{} complete, {} truncated", thousands(c.complete), thousands(c.truncated()));
    let reasons: Vec<String> =
        c.nonzero().into_iter().filter(|(st, _)| st.is_truncated()).map(|(st, n)| format!("{} {}", st.reason(), thousands(n))).collect();
    if !reasons.is_empty() {
        s.push_str(&format!(" ({})", reasons.join(", ")));
    }
    if c.unknown > 0 {
        // Frame-pointer/LBR chains: only symbolization can tell (docs/STACKS.md).
        s.push_str(&format!(", {} judged by `report --by stack` (frame-pointer/LBR chains)", thousands(c.unknown)));
    }
    s
}

/// Render trace info as a key/value block.
pub fn render_info(i: &TraceInfo) -> String {
    let mut out = String::new();
    push_warnings(&mut out, &info_warnings(i));
    kv(&mut out, "Source", if i.source.is_empty() { "unknown" } else { &i.source });
    if !i.cmdline.is_empty() {
        kv(&mut out, "Command", i.cmdline.join(" "));
    }
    let mut host = i.hostname.clone().unwrap_or_else(|| "unknown".into());
    let sys: Vec<&str> = [i.os_release.as_deref(), i.arch.as_deref()].into_iter().flatten().collect();
    if !sys.is_empty() {
        host.push_str(&format!(" ({})", sys.join(", ")));
    }
    kv(&mut out, "Host", host);
    match (&i.cpu_desc, i.nr_cpus) {
        (Some(d), Some(n)) => kv(&mut out, "CPU", format!("{d} ({n} CPUs)")),
        (Some(d), None) => kv(&mut out, "CPU", d),
        (None, Some(n)) => kv(&mut out, "CPU", format!("{n} CPUs")),
        (None, None) => {}
    }
    if let Some(t) = i.start_realtime_ns {
        kv(&mut out, "Started", utc_time(t));
    }
    kv(&mut out, "Clock", &i.clock);
    kv(&mut out, "Duration", i.duration_ns.map_or_else(|| "unknown".into(), duration));
    kv(&mut out, "Samples", thousands(i.samples));
    let mut lost = format!("{} ({})", thousands(i.lost), share(i.lost, i.samples + i.lost));
    if i.lost > 0 {
        lost.push_str(&format!(": {} ring-buffer, {} PMU", thousands(i.lost_records), thousands(i.lost_samples)));
    }
    kv(&mut out, "Lost", lost);
    if i.lost_markers > 0 {
        kv(&mut out, "Lost markers", thousands(i.lost_markers));
    }
    kv(&mut out, "Throttled", format!("{} (unthrottled {})", thousands(i.throttled), thousands(i.unthrottled)));
    kv(&mut out, "File size", format!("{} bytes ({})", thousands(i.bytes), bytes(i.bytes)));
    kv(&mut out, "Bytes/sample", i.bytes_per_sample.map_or_else(|| "-".into(), |b| format!("{b:.2}")));
    kv(
        &mut out,
        "Chunks",
        format!("{} ({} damaged, {} bytes)", thousands(i.chunks), thousands(i.damaged_chunks), thousands(i.damaged_bytes)),
    );
    kv(&mut out, "Truncated", format!("{} bytes", thousands(i.truncated_bytes)));
    kv(&mut out, "Complete", if i.complete { "yes" } else { "no" });
    if i.stacks.total() > 0 {
        let mut v = stack_counts(&i.stacks);
        let without = i.samples.saturating_sub(i.stacks.total());
        if without > 0 {
            v.push_str(&format!(", {} samples without", thousands(without)));
        }
        kv(&mut out, "Stacks", v);
    }
    if i.switches.total() > 0 {
        let w = &i.switches;
        let mut v = format!(
            "{}: {} in, {} out preempted, {} out blocked",
            thousands(w.total()),
            thousands(w.switch_in),
            thousands(w.out_preempted),
            thousands(w.out_blocked)
        );
        if i.switch_stacks.total() > 0 {
            v.push_str(&format!("; stacks {}", stack_counts(&i.switch_stacks)));
        }
        kv(&mut out, "Switches", v);
    }
    if let (Some(p), Some(t)) = (i.processes, i.threads) {
        let mut s = format!("{}, {} with samples", plural(p, "process", "processes"), plural(t, "thread", "threads"));
        if let (Some(ps), Some(ts)) = (i.processes_seen, i.threads_seen) {
            s.push_str(&format!(" ({}, {} seen)", plural(ps, "process", "processes"), plural(ts, "thread", "threads")));
        }
        kv(&mut out, "Tasks", s);
    }
    kv(&mut out, "Build-ids", thousands(i.build_ids));
    if i.jit_names > 0 {
        kv(&mut out, "JIT names", format!("{} (perf maps, jitdumps; docs/SYMBOLS.md)", thousands(i.jit_names)));
    }
    out.push_str("Events:\n");
    let rows: Vec<Vec<String>> = i
        .events
        .iter()
        .map(|e| {
            let sampling = match (e.sample_period, e.sample_freq) {
                (_, Some(f)) => format!("{} Hz", thousands(f)),
                (Some(p), None) => format!("every {}", thousands(p)),
                (None, None) => "-".into(),
            };
            vec![
                format!("  {}", e.index),
                e.name.clone(),
                e.kind.clone(),
                sampling,
                e.precise_ip.to_string(),
                e.samples.map_or_else(|| "-".into(), thousands),
            ]
        })
        .collect();
    let head = [
        ("  #", Align::Right),
        ("Name", Align::Left),
        ("Type", Align::Left),
        ("Sampling", Align::Left),
        ("Precise", Align::Right),
        ("Samples", Align::Right),
    ];
    render_table(&mut out, &head, &rows);
    if i.events.iter().any(|e| e.samples.is_none()) {
        // Several events: their split needs a pass over every record.
        out.push_str("  (samples per event: `tailprof info --full`)\n");
    }
    if !i.extra.is_empty() {
        out.push_str("Extra:\n");
        let rows: Vec<Vec<String>> = i.extra.iter().map(|(k, v)| vec![format!("  {k}"), v.clone()]).collect();
        render_table_body(&mut out, &[("", Align::Left), ("", Align::Left)], &rows);
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}
