//! JSON output.
//!
//! `report --json` ([`profile_json`]):
//!
//! ```json
//! {"event": "cpu-clock", "group_by": "function", "samples": 5, "lost": 0, ...,
//!  "functions": [{"name": "alpha", "binary": "/bin/app", "samples": 3, "percent": 60.0, "period": 3000}],
//!  "warnings": [{"kind": "lost", "message": "..."}]}
//! ```
//!
//! Rows go under `functions`, `binaries` or `threads` by grouping; `samples`, `lost`
//! and `event` are always top-level, beside every other [`FlatProfile`] field. With a
//! `top` limit, `more` says what was left out.
//!
//! `info --json` ([`info_json`]) is [`TraceInfo`] as an object (keys `samples`, `lost`,
//! `duration_ns`, `bytes`, `bytes_per_sample`, `truncated_bytes`, ...) plus `warnings`.

use serde_json::{json, Value};
use tailprof_analyze::profile::GroupBy;
use tailprof_analyze::{FlatProfile, TraceInfo};

use crate::warnings::{info_warnings, profile_warnings};
use crate::PresentError;

/// The key rows are listed under for a grouping.
pub fn rows_key(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Function => "functions",
        GroupBy::Binary => "binaries",
        GroupBy::Thread => "threads",
    }
}

/// The version of the shape of every `--json` document (docs/JSON.md), printed in each
/// as `schema_version`. Raise it when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// A `--json` document as printed: `doc` (an object) with its `schema_version`,
/// pretty-printed. Every command prints its JSON through this.
pub fn document<T: serde::Serialize + ?Sized>(doc: &T) -> Result<String, PresentError> {
    let mut v = serde_json::to_value(doc)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("schema_version".into(), json!(SCHEMA_VERSION));
    }
    Ok(serde_json::to_string_pretty(&v)?)
}

/// A flat profile as a JSON value; `top` limits the rows.
pub fn profile_json(p: &FlatProfile, top: Option<usize>) -> Result<Value, PresentError> {
    let mut v = serde_json::to_value(p)?;
    let obj = v.as_object_mut().expect("FlatProfile serializes to an object");
    let mut rows = match obj.remove("rows") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    if let Some(n) = top.filter(|&n| n < rows.len()) {
        let rest = &p.rows[n..];
        let samples: u64 = rest.iter().map(|r| r.samples).sum();
        let percent = if p.samples == 0 { 0.0 } else { 100.0 * samples as f64 / p.samples as f64 };
        obj.insert("more".into(), json!({"rows": rest.len(), "samples": samples, "percent": percent}));
        rows.truncate(n);
    }
    obj.insert(rows_key(p.group_by).into(), Value::Array(rows));
    obj.insert("warnings".into(), serde_json::to_value(profile_warnings(p))?);
    Ok(v)
}

/// [`profile_json`], pretty-printed.
pub fn profile_json_string(p: &FlatProfile, top: Option<usize>) -> Result<String, PresentError> {
    Ok(serde_json::to_string_pretty(&profile_json(p, top)?)?)
}

/// Trace info as a JSON value.
pub fn info_json(i: &TraceInfo) -> Result<Value, PresentError> {
    let mut v = serde_json::to_value(i)?;
    let obj = v.as_object_mut().expect("TraceInfo serializes to an object");
    obj.insert("warnings".into(), serde_json::to_value(info_warnings(i))?);
    Ok(v)
}

/// [`info_json`], pretty-printed.
pub fn info_json_string(i: &TraceInfo) -> Result<String, PresentError> {
    Ok(serde_json::to_string_pretty(&info_json(i)?)?)
}
