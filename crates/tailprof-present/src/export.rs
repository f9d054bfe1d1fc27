//! The files of `tailprof export`, rendered from [`tailprof_analyze::export::ExportData`]:
//! the HTML report (items, off-CPU tables, flame graphs), Perfetto (items as slices,
//! samples with their stacks or as named instants, off-CPU slices), pprof, the Firefox
//! Profiler's processed format and folded stacks. Each comes back as bytes plus a line
//! for people; the CLI writes and prints them.

use std::collections::BTreeMap;

use tailprof_analyze::export::ExportData;
use tailprof_analyze::stacks::Timeline;

use crate::firefox::{firefox_json, FirefoxOptions};
use crate::flamegraph::{flame_section_html, FlameOptions};
use crate::html::{causes_section_html, off_cpu_section_html, render_items_html_with, render_profile_html, HtmlOptions};
use crate::perfetto::{add_stack_timeline, perfetto_value, PerfettoOptions, SampleInstant};
use crate::pprof::{pprof_gzip, PprofOptions};
use crate::stacks::folded;

/// The formats of `tailprof export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    Html,
    Perfetto,
    Pprof,
    Firefox,
    Folded,
}

/// How to render.
#[derive(Debug, Clone, Default)]
pub struct ExportStyle {
    /// Subtitle of the HTML report (e.g. "trace run.trace").
    pub subtitle: Option<String>,
    /// Items that get their own flame graphs in the HTML report.
    pub items: Vec<u64>,
    /// Add off-CPU stacks to the pprof profile.
    pub off_cpu: bool,
}

/// One rendered file.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub kind: ExportKind,
    pub bytes: Vec<u8>,
    /// What it holds, for people ("12 items, 3,404 samples, 9 off-CPU slices").
    pub summary: String,
    /// Where to look at it ("https://ui.perfetto.dev", "go tool pprof -top FILE").
    pub viewer: &'static str,
}

/// Why a format could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0:?} needs the trace's items, and none were computed")]
    NoItems(ExportKind),
    #[error("the Firefox Profiler export needs the samples in time order (a timeline), and none was kept")]
    NoTimeline,
    #[error("cannot encode: {0}")]
    Encode(String),
}

/// Renders `kind` from `d`.
pub fn render_export(d: &ExportData, kind: ExportKind, style: &ExportStyle) -> Result<Rendered, ExportError> {
    let stacks = &d.stacks;
    let r = |bytes: Vec<u8>, summary: String, viewer| Ok(Rendered { kind, bytes, summary, viewer });
    match kind {
        ExportKind::Html => {
            let opts = HtmlOptions { subtitle: style.subtitle.clone(), ..Default::default() };
            let Some(report) = d.report.as_ref() else {
                // A trace without items: its flame graphs.
                let flames = flame_section_html(stacks, None, &FlameOptions { items: style.items.clone(), ..Default::default() });
                let page = render_profile_html(&opts, stacks.samples, &flames);
                return r(page.into_bytes(), format!("no items, {} samples", stacks.samples), "a web browser");
            };
            let extra = off_cpu_section_html(report, stacks, 20)
                + &causes_section_html(report, stacks, 10)
                + &flame_section_html(stacks, Some(report), &FlameOptions { items: style.items.clone(), ..Default::default() });
            r(render_items_html_with(report, &opts, &extra).into_bytes(), format!("{} items", report.items.len()), "a web browser")
        }
        ExportKind::Perfetto => {
            let Some(report) = d.report.as_ref() else {
                // A trace without items: its samples (with their stacks) and off-CPU slices.
                let mut doc = serde_json::json!({
                    "traceEvents": [],
                    "displayTimeUnit": "ms",
                    "otherData": {"generator": "tailprof", "mode": "no items"},
                });
                let (shown, off) = stacks.timeline.as_ref().map_or((0, 0), |t| (t.samples.len(), t.off_cpu.len()));
                add_stack_timeline(&mut doc, stacks);
                let bytes = serde_json::to_vec(&doc).map_err(|e| ExportError::Encode(e.to_string()))?;
                return r(bytes, format!("no items, {shown} samples, {off} off-CPU slices"), "https://ui.perfetto.dev");
            };
            let (instants, names): (Vec<SampleInstant>, BTreeMap<u32, String>) = match &d.instants {
                Some(found) => (
                    found
                        .samples
                        .iter()
                        .map(|s| SampleInstant { pid: s.pid, tid: s.tid, time_ns: s.time_ns, function: s.function.clone() })
                        .collect(),
                    found.names.clone(),
                ),
                None => (Vec::new(), BTreeMap::new()),
            };
            // With stacks, the samples with their stacks replace the plain instants.
            let with_stacks = d.instants.is_some() && stacks.samples_with_stacks() > 0;
            let plain: &[SampleInstant] = if with_stacks { &[] } else { &instants };
            let mut doc = perfetto_value(report, plain, &PerfettoOptions { names });
            if with_stacks {
                add_stack_timeline(&mut doc, stacks);
            } else if let Some(t) = &stacks.timeline {
                // Off-CPU slices even without stacks or samples.
                let mut only_off = stacks.clone();
                only_off.timeline = Some(Timeline { samples: Vec::new(), off_cpu: t.off_cpu.clone(), wakes: Vec::new() });
                add_stack_timeline(&mut doc, &only_off);
            }
            let shown = match &stacks.timeline {
                Some(t) if with_stacks => t.samples.len(),
                _ => instants.len(),
            };
            let off = stacks.timeline.as_ref().map_or(0, |t| t.off_cpu.len());
            let bytes = serde_json::to_vec(&doc).map_err(|e| ExportError::Encode(e.to_string()))?;
            r(bytes, format!("{} items, {shown} samples, {off} off-CPU slices", report.items.len()), "https://ui.perfetto.dev")
        }
        ExportKind::Pprof => {
            let opts = PprofOptions { off_cpu: style.off_cpu, period: d.period.min(i64::MAX as u64) as i64, ..Default::default() };
            let bytes = pprof_gzip(stacks, &opts).map_err(|e| ExportError::Encode(e.to_string()))?;
            r(bytes, format!("{} stacks", stacks.stacks.len()), "go tool pprof -top")
        }
        ExportKind::Firefox => {
            let opts = FirefoxOptions { interval_ns: d.clock_interval_ns, ..Default::default() };
            let text = firefox_json(stacks, &opts).ok_or(ExportError::NoTimeline)?.map_err(|e| ExportError::Encode(e.to_string()))?;
            r(text.into_bytes(), format!("{} stacks", stacks.stacks.len()), "https://profiler.firefox.com")
        }
        ExportKind::Folded => {
            r(folded(stacks).into_bytes(), format!("{} stacks", stacks.stacks.len()), "flamegraph.pl, inferno or speedscope")
        }
    }
}
