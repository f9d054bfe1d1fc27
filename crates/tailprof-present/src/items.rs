//! `tailprof items`: per-item tables and JSON, and `--explain`.
//!
//! Text ([`render_items`], [`render_items_off_cpu`]): a summary block (items, samples outside any item, lost and
//! unmatched markers, which estimate is shown and the sample interval), warnings, one
//! row per item (id, class, duration, samples, anomaly score, `SLOW` flag, top three
//! functions with their estimates; `~` marks estimates resting on fewer than
//! `min_reliable_samples` samples), then per-class statistics and the anomalous items
//! with the functions responsible.
//!
//! JSON ([`document_json`]): the typed [`ItemsDocument`] serialized as it is (every
//! field in docs/JSON.md), plus `warnings` for a list of items; nothing is added to the
//! JSON afterwards. Text ([`render_document`]) renders the same document.
//!
//! `--explain` ([`render_item_explain`]): the item's per-function time beside the class
//! median, the delta, its share of the excess, and the functions named responsible
//! ([`render_explanation`]), then by stack and by cause.

use crate::table::{render_table, Align};
use std::fmt::Write as _;

use serde::Serialize;
use tailprof_analyze::causes::{CauseExplanation, Interference, InterferenceRow, PathState};
use tailprof_analyze::items::document::{ItemExplain, ItemList, ItemsDocument};
use tailprof_analyze::items::{Explanation, ItemsReport};
use tailprof_analyze::stack_explain::StackExplanation;

use crate::fmt::{duration, name_with_short_source, share, thousands};
use crate::stacks::{off_cpu_line, stack_line, LINE_FRAMES};
use crate::PresentError;

/// One warning about an items report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemsWarning {
    /// `lost_markers`, `unmatched_markers`, `ambiguous_attribution`, `open_at_end`,
    /// `no_interval`, `register_mode`.
    pub kind: &'static str,
    pub message: String,
}

/// Things a reader of an items report must not miss.
pub fn items_warnings<R: AsRef<tailprof_analyze::items::ItemRow>>(r: &ItemsReport<R>) -> Vec<ItemsWarning> {
    let mut out = Vec::new();
    let mut w = |kind, message| out.push(ItemsWarning { kind, message });
    if r.lost_markers > 0 {
        w(
            "lost_markers",
            format!("{} markers were dropped (a marker ring was full): some items are missing or merged", thousands(r.lost_markers)),
        );
    }
    if r.unmatched_markers > 0 {
        w(
            "unmatched_markers",
            format!("{} markers matched nothing (an end without its begin, or a begin never ended)", thousands(r.unmatched_markers)),
        );
    }
    if r.ambiguity.items > 0 {
        let ids: Vec<String> = r.items.iter().map(AsRef::as_ref).filter(|i| i.ambiguous).take(5).map(|i| i.id.to_string()).collect();
        let more = if r.ambiguity.items > ids.len() as u64 { ", ..." } else { "" };
        w(
            "ambiguous_attribution",
            format!(
                "attribution is ambiguous for {} items (ids {}{more}): their begin/end markers overlapped on one thread without switch markers, so {} samples went to the innermost open item but may be another's (docs/MARKERS.md, \"Switch markers\")",
                thousands(r.ambiguity.items),
                ids.join(", "),
                thousands(r.ambiguity.samples)
            ),
        );
    }
    if r.open_at_end > 0 {
        w("open_at_end", format!("{} items were still open when the trace ended; their end is the trace's end", r.open_at_end));
    }
    if r.mean_interval_ns <= 0.0 {
        w("no_interval", "the sample interval is unknown (too few samples): count x interval estimates are 0".into());
    }
    if r.duration_source == "samples" {
        w("register_mode", format!("{}: no markers exist, so an item's duration is its first..last sample", r.mode));
    }
    out
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
    let head: Vec<(&str, Align)> = head.iter().map(|&(h, right)| (h, if right { Align::Right } else { Align::Left })).collect();
    render_table(out, &head, rows);
}

fn summary(out: &mut String, list: &ItemList) {
    let r = &list.report;
    let _ = writeln!(
        out,
        "# Items:     {} ({} anomalous) in {} classes; mode: {}",
        thousands(list.total_items as u64),
        list.anomalous.len(),
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
    if r.switching.markers > 0 {
        let _ = writeln!(
            out,
            "# Switches:  {} switch markers on {} threads; samples there go to the current item ({} in the event loop, on no item); loop wait = an item's time waiting in the event loop (not current)",
            thousands(r.switching.markers),
            r.switching.threads,
            thousands(r.switching.loop_samples)
        );
    }
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
pub fn render_items(list: &ItemList) -> String {
    let mut out = String::new();
    summary(&mut out, list);
    out.push('\n');
    let r = &list.report;
    let e = r.shown_estimator;
    let rows: Vec<Vec<String>> = r
        .items
        .iter()
        .map(|entry| {
            let it = &entry.row;
            let top: Vec<String> = it
                .functions
                .iter()
                .take(3)
                .map(|f| format!("{} {}", name_with_short_source(&f.name, f.source.as_deref()), est(f.shown_ns(e), f.reliable)))
                .collect();
            vec![
                it.id.to_string(),
                class_name(&it.class).to_owned(),
                format!(
                    "{}{}{}",
                    duration(it.duration_ns),
                    if it.open_at_end { " (open)" } else { "" },
                    match &it.switching {
                        Some(sw) => format!(" (loop wait {})", duration(sw.waiting_in_loop_ns)),
                        None => String::new(),
                    }
                ),
                thousands(it.samples),
                format!("{:.1}", it.anomaly_score),
                match (it.anomalous, it.ambiguous) {
                    (true, true) => "SLOW AMBIGUOUS".into(),
                    (true, false) => "SLOW".into(),
                    (false, true) => "AMBIGUOUS".into(),
                    (false, false) => String::new(),
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
    if let Some(more) = list.more_items {
        let _ = writeln!(out, "({} more items; --top 0 shows all)", thousands(more as u64));
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
    let slow = &list.anomalous;
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
            let excess = it.duration_ns.saturating_sub(median);
            let resolution = r.resolution_ns();
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
    if let Some(t) = &it.trace_id {
        let _ = writeln!(out, "# Trace {t}, span {} (OpenTelemetry)", it.span_id.as_deref().unwrap_or("-"));
    }
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
                name_with_short_source(&d.name, d.source.as_deref()),
                est(d.item_ns, d.reliable || d.item_ns == 0.0),
                duration(d.median_ns.round() as u64),
                signed(d.delta_ns),
                if d.share_of_excess > 0.0 { format!("{:.1}%", 100.0 * d.share_of_excess) } else { String::new() },
            ]
        })
        .collect();
    table(&mut out, &[("Function", false), ("Item", true), ("Median", true), ("Delta", true), ("Share of excess", true)], &rows);
    out.push('\n');
    if x.excess_ns <= 0 {
        let took = match x.excess_ns {
            0 => "took its class median".to_owned(),
            e => format!("took {} less than its class median", duration(e.unsigned_abs())),
        };
        let _ = writeln!(out, "Responsible: none (this item {took}: there is no excess to explain)");
    } else if x.responsible.is_empty() {
        out.push_str("Responsible: none (no function takes longer than in the median item)\n");
    } else {
        let covered: f64 = x.diffs.iter().filter(|d| x.responsible.contains(&d.name)).map(|d| d.share_of_excess).sum();
        // How much evidence: the item's samples in the responsible functions.
        let samples: u64 = it.functions.iter().filter(|f| x.responsible.contains(&f.name)).map(|f| f.samples).sum();
        let few = x.diffs.iter().filter(|d| x.responsible.contains(&d.name)).any(|d| !d.reliable);
        let evidence = match (samples, few) {
            (1, _) => "; from 1 sample: too few to tell".to_owned(),
            (n, true) => format!("; from {n} samples, some too few to tell (~)"),
            (n, false) => format!("; from {n} samples"),
        };
        let _ = writeln!(out, "Responsible: {} ({:.0}% of the excess{evidence})", x.responsible.join(", "), 100.0 * covered);
    }
    render_item_events(&mut out, &it.events, it.begin_ns);
    out
}

/// An item's spans (per-name totals, then each) and instants (`--item-event`); times
/// relative to the item's begin. Nothing when it has none.
pub fn render_item_events(out: &mut String, e: &tailprof_analyze::items::events::ItemEvents, begin: u64) {
    if e.is_empty() {
        return;
    }
    let arg = |a: &Option<String>, all: &[String]| {
        tailprof_analyze::items::events::args_text(a, all).map(|a| format!(" ({a})")).unwrap_or_default()
    };
    out.push('\n');
    if !e.span_totals.is_empty() {
        let parts: Vec<String> = e.span_totals.iter().map(|t| format!("{} {} ({})", t.name, duration(t.total_ns), t.count)).collect();
        let _ = writeln!(out, "Spans: {}", parts.join(", "));
        for sp in &e.spans {
            let _ = writeln!(
                out,
                "  +{} {} {}{}{}",
                duration(sp.begin_ns.saturating_sub(begin)),
                sp.name,
                duration(sp.duration_ns),
                arg(&sp.arg, &sp.args),
                if sp.unfinished { " (not ended before the item)" } else { "" }
            );
        }
    }
    if !e.events.is_empty() {
        let _ = writeln!(out, "Events:");
        for ev in &e.events {
            let _ = writeln!(out, "  +{} {}{}", duration(ev.time_ns.saturating_sub(begin)), ev.name, arg(&ev.arg, &ev.args));
        }
    }
    if e.dropped > 0 || e.unmatched_span_ends > 0 {
        let _ =
            writeln!(out, "({} events over the per-item bound not kept, {} span ends without a start)", e.dropped, e.unmatched_span_ends);
    }
}

/// The text lines that say where the shown items' wall time went: for each item with
/// off-CPU time, `wall = cpu + blocked + runnable` and its top off-CPU stacks
/// ("blocked 18.2 ms in XactLockTableWait ← heap_update ← …").
pub fn render_items_off_cpu(list: &ItemList) -> String {
    let mut out = String::new();
    if list.switches == 0 {
        out.push_str("\nOff-CPU: no context switches in this trace (record with --off-cpu to see blocked and runnable time)\n");
        return out;
    }
    let mut lines = String::new();
    for e in &list.report.items {
        let it = &e.row;
        let (blocked, runnable) = (e.measured_blocked_ns, e.measured_runnable_ns);
        let off = runnable.saturating_add(blocked);
        if off == 0 {
            continue;
        }
        let _ = if e.off_cpu_partial {
            writeln!(
                lines,
                "  item {}: {}, at least blocked {} + runnable {} (off-CPU recording started during this item)",
                it.id,
                duration(it.duration_ns),
                duration(blocked),
                duration(runnable)
            )
        } else {
            writeln!(
                lines,
                "  item {}: {} = cpu {} + blocked {} + runnable {}",
                it.id,
                duration(it.duration_ns),
                duration(it.duration_ns - off.min(it.duration_ns)),
                duration(blocked),
                duration(runnable)
            )
        };
        for o in e.off_cpu.iter().take(3) {
            let frames: Vec<&str> = o.frames.iter().map(String::as_str).collect();
            let _ = writeln!(lines, "      {}", off_cpu_line(o.state, o.ns, &frames, &o.kernel));
        }
    }
    if lines.is_empty() {
        out.push_str("\nOff-CPU: the shown items never left the CPU\n");
    } else {
        let _ = write!(out, "\nOff-CPU time of the items (from context switches):\n{lines}");
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
    let _ = writeln!(out, "\n# On CPU by stack (leaf ← callers), item vs class median ({} items):", x.class_items);
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
    table(&mut out, &[("Samples", true), ("Item", true), ("Median", true), ("Delta", true), ("Stack", false)], &rows);
    if x.stacks.len() > top {
        let _ = writeln!(out, "({} more stacks)", x.stacks.len() - top);
    }
    if x.incomplete_samples > 0 {
        let _ = writeln!(out, "note: {} of the item's samples have truncated stacks", thousands(x.incomplete_samples));
    }
    if let Some(n) = &x.note {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `tailprof items` as text: the items table and their off-CPU time, or the
/// explanation (by function, by stack, by cause), or the store's slow requests; then
/// the loss block.
pub fn render_document(doc: &ItemsDocument) -> String {
    let mut out = match doc {
        ItemsDocument::List(list) => render_items(list) + &render_items_off_cpu(list),
        ItemsDocument::Explain(x) => render_item_explain(x),
        ItemsDocument::Stored(s) => return crate::store_view::stored_items_text(&s.items, s.top),
        _ => String::new(),
    };
    let losses = match doc {
        ItemsDocument::List(list) => &list.losses,
        ItemsDocument::Explain(x) => &x.losses,
        _ => return out,
    };
    crate::losses::append_losses(&mut out, losses);
    out
}

/// `tailprof items --explain ID`: by function, by stack and off-CPU state, by cause.
pub fn render_item_explain(x: &ItemExplain) -> String {
    render_explanation(&x.functions) + &render_stack_explanation(&x.stacks, 15) + &render_causes(&x.causes.0)
}

/// The items list with its warnings: the JSON object of `items --json`.
#[derive(Serialize)]
struct ListJson<'a> {
    #[serde(flatten)]
    list: &'a ItemList,
    warnings: Vec<ItemsWarning>,
}

/// `tailprof items --json` (docs/JSON.md): the document as printed, with its
/// `schema_version` (and, for a list of items, its `warnings`).
pub fn document_json(doc: &ItemsDocument) -> Result<String, PresentError> {
    match doc {
        ItemsDocument::List(list) => crate::json::document(&ListJson { list, warnings: items_warnings(&list.report) }),
        other => crate::json::document(other),
    }
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
