//! Rendering the store queries (`tailprof top`, `tailprof diff`, exports of a range):
//! text tables, JSON documents, folded stacks, pprof (profile.proto, gzipped, the
//! messages of [`crate::pprof`]) and a flame-graph HTML page.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;

use prost::Message;
use tailprof_analyze::store_query::{DiffReport, GroupBy, StackExport, TopReport};
use tailprof_store::time::format_utc;
use tailprof_store::ReadStats;

use crate::pprof::{Function, Line, Location, Mapping, Profile, Sample, ValueType};

fn by_name(b: GroupBy) -> &'static str {
    match b {
        GroupBy::Function => "function",
        GroupBy::Binary => "binary",
        GroupBy::Stack => "stack",
    }
}

fn read_notes(out: &mut String, r: &ReadStats) {
    let l = &r.losses;
    if r.lost_samples + l.lost_records + r.dropped_windows + r.dropped_rows > 0 {
        let _ = writeln!(
            out,
            "losses: {} samples and {} records of any kind (ring full) lost in the kernel, {} windows dropped by the agent, {} samples dropped (window table full)",
            r.lost_samples, l.lost_records, r.dropped_windows, r.dropped_rows
        );
    }
    if l.lost_markers + l.malformed_records + l.dropped_item_classes > 0 {
        let _ = writeln!(
            out,
            "losses: {} item markers lost or rejected, {} malformed records skipped, {} item-class labels dropped",
            l.lost_markers, l.malformed_records, l.dropped_item_classes
        );
    }
    if r.bad_files > 0 {
        let _ = writeln!(
            out,
            "warning: {} store files could not be read and were skipped (first: {})",
            r.bad_files,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
}

/// `tailprof top` as text.
pub fn top_text(t: &TopReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} .. {}: {} samples in {} files ({} bytes), by {}",
        format_utc(t.from_us),
        format_utc(t.to_us),
        t.samples,
        t.read.files,
        t.read.bytes,
        by_name(t.by)
    );
    read_notes(&mut out, &t.read);
    if t.samples == 0 {
        out.push_str("no samples in this range (is the agent running? check --store and the time range)\n");
        return out;
    }
    match t.by {
        GroupBy::Function => {
            let _ = writeln!(out, "{:>8} {:>7} {:>8} {:>7}  function", "self", "self%", "total", "total%");
            for r in &t.rows {
                let _ =
                    writeln!(out, "{:>8} {:>6.2}% {:>8} {:>6.2}%  {}", r.self_samples, r.self_pct, r.total_samples, r.total_pct, r.name);
            }
        }
        _ => {
            let _ = writeln!(out, "{:>8} {:>7}  {}", "samples", "%", by_name(t.by));
            for r in &t.rows {
                let _ = writeln!(out, "{:>8} {:>6.2}%  {}", r.self_samples, r.self_pct, r.name);
            }
        }
    }
    if t.missing_symbol_tables > 0 {
        let _ = writeln!(
            out,
            "note: {} binaries have no symbol table in the store; their frames show as [binary+0xOFFSET]",
            t.missing_symbol_tables
        );
    }
    out
}

/// `tailprof top --json`.
/// `tailprof top --json`: the rows in the shape `report --json` gives a trace's flat
/// profile (docs/JSON.md): `functions: [{name, samples, percent, total_samples,
/// total_percent}]`, `binaries: [{name, samples, percent}]`, or `stacks: [{frames: [root,
/// …, leaf], samples, percent}]` (the process's name is the root frame).
pub fn top_json(t: &TopReport) -> serde_json::Value {
    use serde_json::json;
    let (key, rows): (&str, Vec<serde_json::Value>) = match t.by {
        GroupBy::Function => (
            "functions",
            t.rows
                .iter()
                .map(|r| {
                    json!({"name": r.name, "samples": r.self_samples, "percent": r.self_pct,
                           "total_samples": r.total_samples, "total_percent": r.total_pct})
                })
                .collect(),
        ),
        GroupBy::Binary => {
            ("binaries", t.rows.iter().map(|r| json!({"name": r.name, "samples": r.self_samples, "percent": r.self_pct})).collect())
        }
        GroupBy::Stack => (
            "stacks",
            t.rows
                .iter()
                .map(|r| json!({"frames": r.name.split(';').collect::<Vec<_>>(), "samples": r.self_samples, "percent": r.self_pct}))
                .collect(),
        ),
    };
    let mut v = json!({
        "by": by_name(t.by),
        "from": format_utc(t.from_us),
        "to": format_utc(t.to_us),
        "from_us": t.from_us,
        "to_us": t.to_us,
        "samples": t.samples,
        "read": t.read,
        "missing_symbol_tables": t.missing_symbol_tables,
    });
    v[key] = serde_json::Value::Array(rows);
    v
}

/// `tailprof diff` as text.
pub fn diff_text(d: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A {} .. {}: {} samples", format_utc(d.a.0), format_utc(d.a.1), d.a_samples);
    let _ = writeln!(out, "B {} .. {}: {} samples", format_utc(d.b.0), format_utc(d.b.1), d.b_samples);
    read_notes(&mut out, &d.read_a);
    read_notes(&mut out, &d.read_b);
    if d.a_samples == 0 || d.b_samples == 0 {
        out.push_str("one of the ranges has no samples: nothing to compare\n");
    }
    let _ = writeln!(out, "{:>8} {:>7} {:>7}  {}", "delta", "A%", "B%", by_name(d.by));
    for r in &d.rows {
        let _ = writeln!(out, "{:>+7.2}% {:>6.2}% {:>6.2}%  {}", r.delta_pct, r.a_pct, r.b_pct, r.name);
    }
    out
}

/// `tailprof diff --json`: rows under the key `top --json` and `report --json` use for
/// the grouping (`functions`, `binaries`, `stacks`), percentages named `*_percent` as
/// there (docs/JSON.md).
pub fn diff_json(d: &DiffReport) -> serde_json::Value {
    use serde_json::json;
    let key = match d.by {
        GroupBy::Function => "functions",
        GroupBy::Binary => "binaries",
        GroupBy::Stack => "stacks",
    };
    let rows: Vec<serde_json::Value> = d
        .rows
        .iter()
        .map(|r| {
            let mut o = json!({"a_samples": r.a_samples, "b_samples": r.b_samples, "a_percent": r.a_pct,
                               "b_percent": r.b_pct, "delta_percent": r.delta_pct});
            if d.by == GroupBy::Stack {
                o["frames"] = json!(r.name.split(';').collect::<Vec<_>>());
            } else {
                o["name"] = json!(r.name);
            }
            o
        })
        .collect();
    let mut v = json!({
        "by": by_name(d.by),
        "a": {"from": format_utc(d.a.0), "to": format_utc(d.a.1), "samples": d.a_samples, "read": d.read_a},
        "b": {"from": format_utc(d.b.0), "to": format_utc(d.b.1), "samples": d.b_samples, "read": d.read_b},
    });
    v[key] = serde_json::Value::Array(rows);
    v
}

/// Folded stacks (`a;b;c COUNT` per line), the input of flame-graph tools.
pub fn folded(e: &StackExport) -> String {
    let mut out = String::new();
    for s in &e.stacks {
        let line: Vec<String> = s.frames.iter().map(|f| f.replace([';', '\n'], ":")).collect();
        let _ = writeln!(out, "{} {}", line.join(";"), s.count);
    }
    out
}

/// A flame-graph HTML page of the range.
pub fn flame_html(e: &StackExport, title: &str) -> String {
    let lines: Vec<String> = folded(e).lines().map(str::to_string).collect();
    let svg = crate::flamegraph::flame_svg(&lines, title, "samples").unwrap_or_else(|| "<p>no samples</p>".into());
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1><p>{} samples, {} .. {}</p>{svg}</body></html>\n",
        e.samples,
        format_utc(e.from_us),
        format_utc(e.to_us),
        t = title.replace('<', "&lt;")
    )
}

/// The range as a pprof profile: sample types `samples/count` and `cpu/nanoseconds`
/// (the summed period, for cpu-clock), one location per (binary, function).
pub fn pprof_profile(e: &StackExport) -> Profile {
    let mut strings: Vec<String> = vec![String::new()];
    let mut at: HashMap<String, i64> = HashMap::new();
    let mut s = |x: &str| -> i64 {
        if let Some(&i) = at.get(x) {
            return i;
        }
        strings.push(x.to_string());
        at.insert(x.to_string(), strings.len() as i64 - 1);
        strings.len() as i64 - 1
    };
    let sample_type = vec![ValueType { r#type: s("samples"), unit: s("count") }, ValueType { r#type: s("cpu"), unit: s("nanoseconds") }];
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_of: HashMap<String, u64> = HashMap::new();
    let mut functions: Vec<Function> = Vec::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut loc_of: HashMap<(String, String), u64> = HashMap::new();
    let mut samples = Vec::with_capacity(e.stacks.len());
    for st in &e.stacks {
        let mut ids = Vec::with_capacity(st.frames.len());
        // pprof wants leaf first.
        for (name, bin) in st.frames.iter().zip(&st.binaries).rev() {
            let key = (bin.clone(), name.clone());
            let id = match loc_of.get(&key) {
                Some(&id) => id,
                None => {
                    let mid = match mapping_of.get(bin) {
                        Some(&m) => m,
                        None => {
                            let m = mappings.len() as u64 + 1;
                            mappings.push(Mapping { id: m, filename: s(bin), has_functions: true, ..Default::default() });
                            mapping_of.insert(bin.clone(), m);
                            m
                        }
                    };
                    let fid = functions.len() as u64 + 1;
                    functions.push(Function { id: fid, name: s(name), system_name: s(name), filename: s(bin), start_line: 0 });
                    let lid = locations.len() as u64 + 1;
                    locations.push(Location {
                        id: lid,
                        mapping_id: mid,
                        address: 0,
                        line: vec![Line { function_id: fid, line: 0 }],
                        is_folded: false,
                    });
                    loc_of.insert(key, lid);
                    lid
                }
            };
            ids.push(id);
        }
        samples.push(Sample { location_id: ids, value: vec![st.count as i64, st.period.min(i64::MAX as u64) as i64], label: vec![] });
    }
    let period_type = Some(ValueType { r#type: s("cpu"), unit: s("nanoseconds") });
    Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings,
        time_nanos: e.from_us.saturating_mul(1000),
        duration_nanos: (e.to_us - e.from_us).max(0).saturating_mul(1000),
        period_type,
        period: 0,
        comment: vec![],
        default_sample_type: 0,
    }
}

/// Gzipped profile.proto bytes.
pub fn pprof_gzip(e: &StackExport) -> std::io::Result<Vec<u8>> {
    let raw = pprof_profile(e).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), flate2::Compression::default());
    gz.write_all(&raw)?;
    gz.finish()
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// `tailprof items --store` as text.
pub fn stored_items_text(s: &tailprof_analyze::store_query::StoredItems, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} .. {}: {} retained slow requests", format_utc(s.from_us), format_utc(s.to_us), s.items.len());
    read_notes(&mut out, &s.read);
    for c in &s.classes {
        let _ = writeln!(out, "class {}: {} requests, p50 <= {}, p99 <= {}", c.class, c.requests, ms(c.p50_le_ns), ms(c.p99_le_ns));
    }
    for it in s.items.iter().take(if top == 0 { usize::MAX } else { top }) {
        let _ = writeln!(
            out,
            "\n{}  {} (pid {} tid {})  class {}  item {}  {}  [{} > {}]  {} samples, off-CPU {}",
            format_utc(it.begin_us),
            it.comm,
            it.pid,
            it.tid,
            it.class,
            it.item_id,
            ms(it.duration_ns),
            it.reason,
            ms(it.limit_ns),
            it.samples,
            ms(it.off_cpu_ns)
        );
        if let (Some(t), Some(sp)) = (&it.trace_id, &it.span_id) {
            let _ = writeln!(out, "  trace {t} span {sp}");
        }
        if let Some(sw) = &it.switching {
            let _ = writeln!(
                out,
                "  current {} on {} thread(s), {} resumes; waiting in its event loop {}",
                ms(sw.current_ns),
                sw.threads,
                sw.resumes,
                ms(sw.waiting_in_loop_ns)
            );
        }
        for (name, n) in it.functions.iter().take(10) {
            let _ = writeln!(out, "  {:>6} {:>6.1}%  {}", n, 100.0 * *n as f64 / it.samples.max(1) as f64, name);
        }
        if let Some((frames, n)) = it.stacks.first() {
            let _ = writeln!(out, "  hottest stack ({n} samples): {}", frames.iter().rev().cloned().collect::<Vec<_>>().join(" > "));
        }
        // Causes kept by the agent (issue 21).
        for w in it.woken_by.iter().take(5) {
            let who = match w.irq {
                Some(k) => format!("{} interrupt", k.name()),
                None => format!("{} (pid {}, tid {})", if w.comm.is_empty() { "?" } else { &w.comm }, w.pid, w.tid),
            };
            let inside = match (w.item, &w.class) {
                (Some(i), Some(c)) => format!(", inside item {i} ({c})"),
                (Some(i), None) => format!(", inside item {i}"),
                _ => String::new(),
            };
            let at = w.frames.iter().rev().take(3).cloned().collect::<Vec<_>>().join(" ← ");
            let _ = writeln!(
                out,
                "  blocked {} woken by {who}{inside}{}",
                ms(w.ns),
                if at.is_empty() { String::new() } else { format!(", at {at}") }
            );
            // The critical path: what the waker did meanwhile.
            for d in w.during.iter().take(4) {
                let place = d.frames.iter().rev().take(3).cloned().collect::<Vec<_>>().join(" ← ");
                let _ = writeln!(
                    out,
                    "      meanwhile {} {}{}",
                    d.state.name(),
                    ms(d.ns),
                    if place.is_empty() { String::new() } else { format!(" in {place}") }
                );
            }
        }
        for p in it.preempted_by.iter().take(5) {
            let inside = p.item.map(|i| format!(", inside item {i}")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  runnable {} behind {} (pid {}, tid {}){inside}",
                ms(p.ns),
                if p.comm.is_empty() { "?" } else { &p.comm },
                p.pid,
                p.tid
            );
        }
    }
    out
}
