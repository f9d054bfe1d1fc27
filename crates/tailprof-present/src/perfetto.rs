//! Perfetto trace export of per-item attribution (`tailprof export --perfetto`).
//!
//! Owns the Chrome JSON trace-event document (`{"traceEvents": [...]}`), which
//! ui.perfetto.dev and chrome://tracing open directly. Layout:
//!
//! - process / thread metadata (`"ph": "M"`) naming every pid and tid that has items;
//! - one complete slice (`"ph": "X"`) per item on its thread's track;
//! - inside each item, one nested slice per function, laid out from the function's
//!   first sample in the item, its length the estimate the report shows, clamped so it
//!   stays inside the item and after its previous sibling (siblings never overlap, so
//!   the viewer nests them exactly);
//! - optionally one instant event (`"ph": "i"`, thread scope) per sample, named by the
//!   sample's function.
//!
//! With call stacks ([`add_stack_timeline`]): samples as instants pointing into a
//! `stackFrames` tree, and off-CPU intervals as async slices with their stacks.
//!
//! Times are trace-clock nanoseconds written as microseconds with three decimals, so
//! nothing is rounded away.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

use tailprof_analyze::items::ItemsReport;
use tailprof_analyze::stacks::StackProfile;

use crate::html::shown_ns;
use crate::PresentError;

/// One sample to show as an instant event.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleInstant {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub function: String,
}

/// Options of [`perfetto_json`].
#[derive(Debug, Clone, Default)]
pub struct PerfettoOptions {
    /// Names for processes and threads (pid or tid → name, e.g. from COMM records);
    /// unnamed ones are called "pid N" / "tid N".
    pub names: BTreeMap<u32, String>,
}

fn us(ns: u64) -> Value {
    // Three decimals of microseconds = exact nanoseconds.
    let v = ns as f64 / 1000.0;
    json!((v * 1000.0).round() / 1000.0)
}

/// A function slice inside an item: `[start, end)` in ns.
#[derive(Debug, Clone, PartialEq)]
pub struct NestedSlice {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Lay out an item's per-function estimates inside `[begin, end)`: in order of first
/// sample, each starting at its first sample (or where the previous one ended, if
/// later) and lasting its estimate, cut at the item's end; empty slices are dropped.
pub fn layout_functions(begin: u64, end: u64, funcs: &[(String, u64, f64)]) -> Vec<NestedSlice> {
    let mut order: Vec<&(String, u64, f64)> = funcs.iter().collect();
    order.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = Vec::new();
    let mut cursor = begin;
    for (name, first, est) in order {
        let start = (*first).max(cursor).max(begin);
        if start >= end {
            continue;
        }
        let len = if est.is_finite() && *est > 0.0 { est.round() as u64 } else { 0 };
        let stop = start.saturating_add(len).min(end);
        if stop <= start {
            continue;
        }
        out.push(NestedSlice { name: name.clone(), start_ns: start, end_ns: stop });
        cursor = stop;
    }
    out
}

/// The trace-event document for `report` (and `samples`, if any) as a JSON value.
pub fn perfetto_value(report: &ItemsReport, samples: &[SampleInstant], opts: &PerfettoOptions) -> Value {
    let mut events: Vec<Value> = Vec::new();
    let mut pids = BTreeSet::new();
    let mut threads = BTreeSet::new();
    for r in &report.items {
        pids.insert(r.pid);
        threads.insert((r.pid, r.tid));
    }
    for s in samples {
        pids.insert(s.pid);
        threads.insert((s.pid, s.tid));
    }
    for &pid in &pids {
        let name = opts.names.get(&pid).cloned().unwrap_or_else(|| format!("pid {pid}"));
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": pid, "args": {"name": name}}));
    }
    for &(pid, tid) in &threads {
        let name = opts.names.get(&tid).cloned().unwrap_or_else(|| format!("tid {tid}"));
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}));
    }
    // Items in begin order per thread; an item that starts before the previous one on
    // its thread ended (overlapping markers) is cut so slices stay properly nested.
    let mut items: Vec<_> = report.items.iter().collect();
    items.sort_by_key(|r| (r.pid, r.tid, r.begin_ns, r.id));
    let mut last_end: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for r in items {
        let prev = last_end.get(&(r.pid, r.tid)).copied().unwrap_or(0);
        let begin = r.begin_ns.max(prev);
        let end = r.end_ns.max(begin);
        last_end.insert((r.pid, r.tid), end);
        let class = r.class.clone().unwrap_or_default();
        let name = if class.is_empty() { format!("item {}", r.id) } else { format!("item {} ({class})", r.id) };
        events.push(json!({
            "ph": "X", "cat": "item", "name": name, "pid": r.pid, "tid": r.tid,
            "ts": us(begin), "dur": us(end - begin),
            "args": {
                "id": r.id, "class": r.class, "duration_ns": r.duration_ns, "samples": r.samples,
                "anomaly_score": r.anomaly_score, "anomalous": r.anomalous, "responsible": r.responsible,
            }
        }));
        let funcs: Vec<(String, u64, f64)> = r.functions.iter().map(|f| (f.name.clone(), f.first_ns, shown_ns(report, f))).collect();
        for sl in layout_functions(begin, end, &funcs) {
            let f = r.functions.iter().find(|f| f.name == sl.name);
            let mut ev = json!({
                "ph": "X", "cat": "function", "name": sl.name, "pid": r.pid, "tid": r.tid,
                "ts": us(sl.start_ns), "dur": us(sl.end_ns - sl.start_ns),
                "args": {
                    "item": r.id,
                    "samples": f.map(|f| f.samples),
                    "est_ns": f.map(|f| f.est_ns),
                    "span_ns": f.map(|f| f.span_ns),
                    "reliable": f.map(|f| f.reliable),
                }
            });
            // A JIT function's `file:line` (jitdump DEBUG_INFO), only when known.
            if let Some(src) = f.and_then(|f| f.source.as_deref()) {
                ev["args"]["source"] = src.into();
            }
            events.push(ev);
        }
        // `--item-event`: spans as slices (async, so they may overlap the function
        // slices), instants as thread-scoped instants, on the item's track.
        for (k, sp) in r.events.spans.iter().enumerate() {
            let id = format!("{}:{}:{k}", r.tid, r.id);
            let mut args = json!({"item": r.id, "arg": sp.arg, "duration_ns": sp.duration_ns, "unfinished": sp.unfinished});
            if !sp.args.is_empty() {
                args["args"] = json!(sp.args);
            }
            events.push(json!({"ph": "b", "cat": "span", "name": sp.name, "id": id, "pid": r.pid, "tid": r.tid, "ts": us(sp.begin_ns), "args": args}));
            events.push(json!({"ph": "e", "cat": "span", "name": sp.name, "id": id, "pid": r.pid, "tid": r.tid, "ts": us(sp.end_ns)}));
        }
        for ev in &r.events.events {
            let mut args = json!({"item": r.id, "arg": ev.arg});
            if !ev.args.is_empty() {
                args["args"] = json!(ev.args);
            }
            events.push(json!({
                "ph": "i", "s": "t", "cat": "event", "name": ev.name, "pid": r.pid, "tid": r.tid, "ts": us(ev.time_ns),
                "args": args,
            }));
        }
    }
    for s in samples {
        events.push(json!({
            "ph": "i", "s": "t", "cat": "sample", "name": s.function, "pid": s.pid, "tid": s.tid, "ts": us(s.time_ns),
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "tailprof",
            "mode": report.mode,
            "estimator": crate::html::estimator_name(report),
            "outside_samples": report.outside_samples,
            "lost_markers": report.lost_markers,
        }
    })
}

/// Adds a stack profile's timeline ([`StackProfile::timeline`]) to a trace-event
/// document made by [`perfetto_value`]:
///
/// - every sample as a thread-scoped instant (`cat` `"stack"`) named by its leaf
///   function, with `"sf"` pointing into the document's `stackFrames` tree (one node per
///   distinct call path prefix, `parent` = the caller) and the stack in `args.stack`
///   (`leaf ← caller ← …`);
/// - every off-CPU interval as an async slice (`"b"`/`"e"`, `cat` `"off-cpu"`, named
///   `blocked` or `runnable`, one track per process and state, so it never breaks the
///   nesting of the item slices on the thread track) with the stack where the thread
///   went off CPU in `args.stack`;
/// - every wake edge into an item (`Timeline::wakes`, traces with wakeups) as a flow
///   (`"s"` → `"f"`, `cat` `"wake"`) from a zero-length `wakeup` slice on the waker's
///   thread at the wakeup to a `woken` slice on the item's thread when it ran again.
///
/// Returns (samples, off-CPU slices) added.
pub fn add_stack_timeline(doc: &mut Value, p: &StackProfile) -> (usize, usize) {
    let Some(t) = &p.timeline else { return (0, 0) };
    let mut frames = serde_json::Map::new();
    // (parent node, function row) -> node id; node ids start at 1.
    let mut nodes: std::collections::HashMap<(u64, u32), u64> = std::collections::HashMap::new();
    let mut leaf_node: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    let mut node_of = |path: u32, frames: &mut serde_json::Map<String, Value>| -> u64 {
        if let Some(&n) = leaf_node.get(&path) {
            return n;
        }
        let mut parent = 0u64;
        for &f in p.paths.get(path as usize).map(Vec::as_slice).unwrap_or(&[]) {
            let next = nodes.len() as u64 + 1;
            let id = *nodes.entry((parent, f)).or_insert_with(|| {
                let mut o =
                    json!({"name": p.functions[f as usize].name, "category": crate::stacks::short_binary(&p.functions[f as usize].binary)});
                if parent != 0 {
                    o["parent"] = json!(parent.to_string());
                }
                frames.insert(next.to_string(), o);
                next
            });
            parent = id;
        }
        leaf_node.insert(path, parent);
        parent
    };
    let mut events: Vec<Value> = Vec::with_capacity(t.samples.len() + 2 * t.off_cpu.len());
    for s in &t.samples {
        let names = p.frames(s.path);
        let sf = node_of(s.path, &mut frames);
        let mut e = json!({
            "ph": "i", "s": "t", "cat": "stack", "name": names.last().copied().unwrap_or("[no stack]"),
            "pid": s.pid, "tid": s.tid, "ts": us(s.time_ns),
            "args": {"stack": crate::stacks::stack_line(&names, 64)},
        });
        if sf != 0 {
            e["sf"] = json!(sf.to_string());
        }
        events.push(e);
    }
    for (i, o) in t.off_cpu.iter().enumerate() {
        let names = p.frames(o.path);
        let id = format!("0x{:x}", i + 1);
        let args = json!({"tid": o.tid, "stack": crate::stacks::stack_line(&names, 64), "duration_ns": o.end_ns - o.begin_ns});
        events.push(json!({"ph": "b", "cat": "off-cpu", "name": o.state.name(), "id": id, "pid": o.pid, "tid": o.tid, "ts": us(o.begin_ns), "args": args}));
        events.push(json!({"ph": "e", "cat": "off-cpu", "name": o.state.name(), "id": id, "pid": o.pid, "tid": o.tid, "ts": us(o.end_ns)}));
    }
    // Wake edges (issue 21): a flow from the waker, at the wakeup, to the woken item's
    // thread, where it ran again; each end sits on an instant slice of its own ("wakeup",
    // "woken") so the flow binds to it whatever else is on the thread.
    for (i, w) in t.wakes.iter().enumerate() {
        let id = i + 1;
        let args = json!({"waker_tid": w.waker_tid, "wakee_tid": w.wakee_tid, "blocked_until_ns": w.resume_ns});
        events.push(json!({"ph": "X", "cat": "wake", "name": "wakeup", "pid": w.waker_pid, "tid": w.waker_tid, "ts": us(w.time_ns), "dur": 0, "args": args}));
        events.push(
            json!({"ph": "s", "cat": "wake", "name": "wakeup", "id": id, "pid": w.waker_pid, "tid": w.waker_tid, "ts": us(w.time_ns)}),
        );
        events.push(
            json!({"ph": "X", "cat": "wake", "name": "woken", "pid": w.wakee_pid, "tid": w.wakee_tid, "ts": us(w.resume_ns), "dur": 0}),
        );
        events.push(json!({"ph": "f", "bp": "e", "cat": "wake", "name": "wakeup", "id": id, "pid": w.wakee_pid, "tid": w.wakee_tid, "ts": us(w.resume_ns)}));
    }
    let n = (t.samples.len(), t.off_cpu.len());
    if let Some(obj) = doc.as_object_mut() {
        if let Some(Value::Array(a)) = obj.get_mut("traceEvents") {
            a.extend(events);
        }
        obj.insert("stackFrames".into(), Value::Object(frames));
    }
    n
}

/// The trace-event document as a string (what `tailprof export --perfetto` writes).
pub fn perfetto_json(report: &ItemsReport, samples: &[SampleInstant], opts: &PerfettoOptions) -> Result<String, PresentError> {
    Ok(serde_json::to_string(&perfetto_value(report, samples, opts))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_children_inside_and_apart() {
        let funcs = vec![
            ("a".to_string(), 100, 50.0),
            ("b".to_string(), 120, 500.0), // overlaps a, runs past the end
            ("c".to_string(), 2000, 10.0), // starts after the end
        ];
        let v = layout_functions(100, 400, &funcs);
        assert_eq!(
            v,
            vec![
                NestedSlice { name: "a".into(), start_ns: 100, end_ns: 150 },
                NestedSlice { name: "b".into(), start_ns: 150, end_ns: 400 },
            ]
        );
    }
}
