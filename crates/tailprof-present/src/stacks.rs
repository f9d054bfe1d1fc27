//! Call stacks and off-CPU time: text, JSON and folded stacks.
//!
//! - [`folded`]: `root;caller;leaf N` lines, the input of flamegraph.pl, inferno and
//!   speedscope (`report --folded`). Frame names have `;` and line breaks replaced so a
//!   name never splits a frame; a sample without any frame is `[no stack]`.
//! - [`stacks_json`]: `report --by stack --json` → `{"samples": N, "stacks": [{"frames":
//!   ["root", …, "leaf"], "samples": N, "complete": true}], "statuses": {...}, ...}`.
//! - [`render_stacks`]: the text view (stack statuses on top, then the hottest stacks
//!   leaf first: `leaf ← caller ← …`).
//! - [`off_cpu_json`], [`render_off_cpu`]: `report --off-cpu`, flat (by the innermost
//!   frame where threads went off CPU) and by stack, blocked and runnable apart.
//! - [`off_cpu_line`]: "blocked 18.2 ms in XactLockTableWait ← heap_update ← …".

use std::fmt::Write as _;

use serde_json::{json, Value};
use tailprof_analyze::offcpu::OffState;
use tailprof_analyze::stacks::{OffRow, StackProfile};

use crate::fmt::{duration, share, thousands};
use crate::table::{render_table, Align};

/// Frames shown in a one-line stack before `…`.
pub const LINE_FRAMES: usize = 6;

/// One folded-stacks frame name: no `;`, no line breaks.
pub fn folded_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ';' {
                ':'
            } else if c == '\n' || c == '\r' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// A folded frame: the bare name (input for other tools), or for rows per line
/// (`--lines`, where rows carry their function's `first_line`) `name (file:line)`, so a
/// function's lines stay apart.
fn folded_frame(f: &tailprof_analyze::resolve::FunctionInfo) -> String {
    match f.first_line {
        Some(_) => folded_name(&crate::fmt::name_with_source(&f.name, f.source.as_deref())),
        None => folded_name(&f.name),
    }
}

/// Folded stacks of the profile's kept samples, one line per distinct stack (complete
/// and truncated stacks with the same frames are one line), most samples first.
pub fn folded(p: &StackProfile) -> String {
    let mut counts: Vec<(u32, u64)> = Vec::with_capacity(p.stacks.len());
    let mut at: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for r in &p.stacks {
        match at.get(&r.path) {
            Some(&i) => counts[i].1 += r.samples,
            None => {
                at.insert(r.path, counts.len());
                counts.push((r.path, r.samples));
            }
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let names: Vec<String> = p.functions.iter().map(folded_frame).collect();
    let mut out = String::with_capacity(counts.len() * 64);
    for (path, n) in counts {
        push_folded_path(&mut out, p, &names, path);
        let _ = writeln!(out, " {n}");
    }
    out
}

/// Folded off-CPU stacks, values in nanoseconds, the state as the root frame
/// (`[blocked];root;…;leaf NS`).
pub fn folded_off_cpu(p: &StackProfile) -> String {
    let names: Vec<String> = p.functions.iter().map(folded_frame).collect();
    let mut out = String::new();
    for r in &p.off_cpu {
        let _ = write!(out, "[{}];", r.state.name());
        push_folded_path(&mut out, p, &names, r.path);
        let _ = writeln!(out, " {}", r.ns);
    }
    out
}

fn push_folded_path(out: &mut String, p: &StackProfile, names: &[String], path: u32) {
    let frames = p.paths.get(path as usize).map(Vec::as_slice).unwrap_or(&[]);
    if frames.is_empty() {
        out.push_str("[no stack]");
    }
    for (i, &f) in frames.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(&names[f as usize]);
    }
}

/// Stack statuses as a JSON object `{"complete": N, "copy_exhausted": N, ...}`.
fn statuses_json(p: &StackProfile) -> Value {
    let mut m = serde_json::Map::new();
    for s in &p.statuses {
        m.insert(s.status.to_owned(), json!(s.samples));
    }
    Value::Object(m)
}

fn common_json(p: &StackProfile) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("event".into(), json!(p.event));
    m.insert("total_samples".into(), json!(p.total_samples));
    m.insert("samples".into(), json!(p.samples));
    m.insert("statuses".into(), statuses_json(p));
    if let Some(f) = p.filter.describe() {
        m.insert("filter".into(), json!(f));
    }
    if let Some(k) = &p.kernel_symbols {
        m.insert("kernel_symbols".into(), json!(k));
    }
    m
}

/// `report --by stack --json`; `top` limits the stacks listed (`more_stacks` says how
/// many were left out).
pub fn stacks_json(p: &StackProfile, top: Option<usize>) -> Value {
    let mut m = common_json(p);
    let n = top.unwrap_or(usize::MAX).min(p.stacks.len());
    let stacks: Vec<Value> =
        p.stacks[..n].iter().map(|r| json!({"frames": p.frames(r.path), "samples": r.samples, "complete": r.complete})).collect();
    m.insert("stacks".into(), Value::Array(stacks));
    if n < p.stacks.len() {
        m.insert("more_stacks".into(), json!(p.stacks.len() - n));
    }
    Value::Object(m)
}

/// One stack on one line, leaf first: `leaf ← caller ← …` (at most `max` frames).
pub fn stack_line(frames: &[&str], max: usize) -> String {
    if frames.is_empty() {
        return "[no stack]".into();
    }
    let mut s: Vec<&str> = frames.iter().rev().take(max).copied().collect();
    if frames.len() > max {
        s.push("…");
    }
    s.join(" ← ")
}

/// The stack status line of a report: `stacks: 98.0% complete; truncated: copy exhausted 2.0%`.
pub fn status_line(p: &StackProfile) -> String {
    let with = p.samples_with_stacks();
    if with == 0 {
        return "stacks: none recorded (record with -g / --call-graph to get call stacks)".into();
    }
    let mut parts = Vec::new();
    for s in &p.statuses {
        parts.push(format!("{} {} ({})", s.reason, share(s.samples, p.samples), thousands(s.samples)));
    }
    format!("stacks: {}", parts.join(", "))
}

/// `report --by stack`: statuses, then the hottest stacks.
pub fn render_stacks(p: &StackProfile, top: Option<usize>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "event: {}, {} samples", p.event, thousands(p.samples));
    if let Some(f) = p.filter.describe() {
        let _ = writeln!(out, "only: {f} ({} of {} samples)", thousands(p.samples), thousands(p.total_samples));
    }
    let _ = writeln!(out, "{}", status_line(p));
    if let Some(k) = &p.kernel_symbols {
        let _ = writeln!(out, "{k}");
    }
    out.push('\n');
    let n = top.unwrap_or(usize::MAX).min(p.stacks.len());
    let rows: Vec<Vec<String>> = p.stacks[..n]
        .iter()
        .map(|r| {
            vec![
                share(r.samples, p.samples),
                thousands(r.samples),
                if r.truncated {
                    "trunc".into()
                } else if r.complete {
                    String::new()
                } else {
                    "?".into()
                },
                stack_line(&p.frames(r.path), 12),
            ]
        })
        .collect();
    render_table(
        &mut out,
        &[("%", Align::Right), ("samples", Align::Right), ("", Align::Left), ("stack (leaf ← callers)", Align::Left)],
        &rows,
    );
    if n < p.stacks.len() {
        let _ = writeln!(out, "... {} more stacks (--top 0 shows all)", p.stacks.len() - n);
    }
    out
}

/// "blocked 18.2 ms in XactLockTableWait ← heap_update ← …": the user part of an
/// off-CPU stack (the kernel part is where every sleep ends, so it says little); the
/// kernel part only when there is no user part.
pub fn off_cpu_line(state: OffState, ns: u64, frames: &[&str], kernel: &[bool]) -> String {
    let user: Vec<&str> = frames.iter().zip(kernel).filter(|(_, k)| !**k).map(|(f, _)| *f).collect();
    let shown = if user.is_empty() { frames.to_vec() } else { user };
    if shown.is_empty() {
        return format!("{} {} (no stack recorded)", state.name(), duration(ns));
    }
    format!("{} {} in {}", state.name(), duration(ns), stack_line(&shown, LINE_FRAMES))
}

/// Which frames of path `p` are kernel frames (by the function's binary).
pub fn kernel_frames(p: &StackProfile, path: u32) -> Vec<bool> {
    p.paths.get(path as usize).map(|v| v.iter().map(|&f| is_kernel_binary(&p.functions[f as usize].binary)).collect()).unwrap_or_default()
}

pub use tailprof_analyze::stacks::is_kernel_binary;

/// The line of one off-CPU row of the profile.
pub fn off_row_line(p: &StackProfile, r: &OffRow) -> String {
    off_cpu_line(r.state, r.ns, &p.frames(r.path), &kernel_frames(p, r.path))
}

/// `report --off-cpu --json`: totals, a flat view (`self_ns` at the innermost user
/// frame, `total_ns` anywhere on the stack) and the stacks.
pub fn off_cpu_json(p: &StackProfile, top: Option<usize>) -> Value {
    let mut m = common_json(p);
    m.insert("switches".into(), json!(p.switches));
    m.insert("off_cpu_ns".into(), json!(p.off_cpu_ns()));
    m.insert("runnable_ns".into(), json!(p.runnable_ns));
    m.insert("blocked_ns".into(), json!(p.blocked_ns));
    m.insert("open_at_end".into(), json!(p.off_open_at_end));
    m.insert("lost_switch_ins".into(), json!(p.off_double_outs));
    let n = top.unwrap_or(usize::MAX);
    let mut flat = Vec::new();
    for state in [OffState::Blocked, OffState::Runnable] {
        let rows = p.flat_user(p.off_cpu.iter().filter(|r| r.state == state).map(|r| (r.path, r.ns)));
        for f in rows.into_iter().take(n) {
            flat.push(json!({"state": state.name(), "function": f.name, "self_ns": f.self_value, "total_ns": f.total_value}));
        }
    }
    m.insert("functions".into(), Value::Array(flat));
    let stacks: Vec<Value> =
        p.off_cpu.iter().take(n).map(|r| json!({"state": r.state.name(), "ns": r.ns, "frames": p.frames(r.path)})).collect();
    m.insert("stacks".into(), Value::Array(stacks));
    Value::Object(m)
}

/// `report --off-cpu`: totals, then per state the functions threads waited in (leaf,
/// self) and the stacks.
pub fn render_off_cpu(p: &StackProfile, top: Option<usize>) -> String {
    let mut out = String::new();
    if p.switches == 0 {
        out.push_str("off-CPU: no context switches in this trace (record with --off-cpu, or with items, to get them)\n");
        return out;
    }
    let _ = writeln!(
        out,
        "off-CPU: {} ({} blocked, {} runnable) from {} switches",
        duration(p.off_cpu_ns()),
        duration(p.blocked_ns),
        duration(p.runnable_ns),
        thousands(p.switches)
    );
    if let Some(f) = p.filter.describe() {
        let _ = writeln!(out, "only: {f}");
    }
    if p.off_open_at_end > 0 {
        let _ = writeln!(out, "note: {} threads were still off CPU when the trace ended (counted up to its end)", p.off_open_at_end);
    }
    if p.off_double_outs > 0 {
        let _ =
            writeln!(out, "note: {} switch-ins were missing (lost records); those intervals end at the next switch-out", p.off_double_outs);
    }
    let n = top.unwrap_or(usize::MAX);
    for (state, total) in [(OffState::Blocked, p.blocked_ns), (OffState::Runnable, p.runnable_ns)] {
        if total == 0 {
            continue;
        }
        let _ = writeln!(out, "\n{} {} by function (innermost user frame):", state.name(), duration(total));
        let rows: Vec<Vec<String>> = p
            .flat_user(p.off_cpu.iter().filter(|r| r.state == state).map(|r| (r.path, r.ns)))
            .into_iter()
            .take(n)
            .map(|f| vec![share(f.self_value, total), duration(f.self_value), duration(f.total_value), f.name.to_owned()])
            .collect();
        render_table(&mut out, &[("%", Align::Right), ("self", Align::Right), ("total", Align::Right), ("function", Align::Left)], &rows);
        let _ = writeln!(out, "\n{} by stack:", state.name());
        for r in p.off_cpu.iter().filter(|r| r.state == state).take(n) {
            let _ = writeln!(out, "  {:>7}  {}", share(r.ns, total), off_row_line(p, r));
        }
    }
    out
}

/// `report` by function with a filter (`--item`, `--class`, `--in-items`, `--slow`):
/// the flat view of the kept samples' stacks, self (leaf) and total (anywhere on the
/// stack).
pub fn render_flat(p: &StackProfile, top: Option<usize>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "event: {}, {} samples", p.event, thousands(p.samples));
    if let Some(f) = p.filter.describe() {
        let _ = writeln!(out, "only: {f} ({} of {} samples)", thousands(p.samples), thousands(p.total_samples));
    }
    let _ = writeln!(out, "{}\n", status_line(p));
    let rows: Vec<Vec<String>> = p
        .flat(p.stacks.iter().map(|r| (r.path, r.samples)))
        .into_iter()
        .take(top.unwrap_or(usize::MAX))
        .map(|f| vec![share(f.self_value, p.samples), thousands(f.self_value), share(f.total_value, p.samples), f.name.to_owned()])
        .collect();
    render_table(
        &mut out,
        &[("self%", Align::Right), ("samples", Align::Right), ("total%", Align::Right), ("function", Align::Left)],
        &rows,
    );
    out
}

/// JSON of [`render_flat`]: `{"samples": N, "functions": [{"name", "samples", "percent",
/// "total_samples", "total_percent"}], ...}`.
pub fn flat_json(p: &StackProfile, top: Option<usize>) -> Value {
    let mut m = common_json(p);
    let pct = |n: u64| if p.samples == 0 { 0.0 } else { 100.0 * n as f64 / p.samples as f64 };
    let rows: Vec<Value> = p
        .flat(p.stacks.iter().map(|r| (r.path, r.samples)))
        .into_iter()
        .take(top.unwrap_or(usize::MAX))
        .map(|f| {
            json!({"name": f.name, "samples": f.self_value, "percent": pct(f.self_value),
                   "total_samples": f.total_value, "total_percent": pct(f.total_value)})
        })
        .collect();
    m.insert("functions".into(), Value::Array(rows));
    Value::Object(m)
}

/// The file name of a binary path (`/usr/lib/x/libc.so.6` → `libc.so.6`).
pub fn short_binary(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
