//! The loss table ([`LossTable`]) as text and JSON, printed the same way by `record`,
//! `info`, `report` and `items`.
//!
//! Text: nothing when the table is empty; otherwise a short block, worst first:
//!
//! ```text
//! losses (worst first):
//!   error      malformed_records         3  records that could not be decoded and were skipped
//!   data loss  lost_records             12  records lost because a kernel ring was full; fix: use a longer period ...
//! ```
//!
//! JSON: a `losses` array of `{"key", "count", "severity", "what", "remedy"}` (severity
//! `info`, `data_loss` or `error`), empty when nothing was lost.
//!
//! ```
//! use tailprof_format::{losses::LossTable, LossKind, TraceStats};
//! let mut stats = TraceStats::default();
//! stats.add_loss(LossKind::Malformed, 3);
//! let t = LossTable::new(&stats, None);
//! assert!(tailprof_present::losses::render_losses(&t).contains("malformed_records"));
//! let doc = tailprof_present::losses::document_with_losses(&serde_json::json!({"samples": 1}), &t).unwrap();
//! assert!(doc.contains("\"losses\""));
//! ```

use serde::Serialize;
use serde_json::Value;
use tailprof_format::losses::{LossRow, LossTable};

use crate::fmt::thousands;
use crate::PresentError;

/// The text block (ends with a newline), or an empty string when nothing was lost.
pub fn render_losses(t: &LossTable) -> String {
    if t.is_empty() {
        return String::new();
    }
    let key_w = t.rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let counts: Vec<String> = t.rows.iter().map(|r| thousands(r.count)).collect();
    let count_w = counts.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut out = String::from("losses (worst first):\n");
    for (r, c) in t.rows.iter().zip(&counts) {
        out.push_str(&format!("  {:<9}  {:<key_w$}  {:>count_w$}  {}", r.severity.as_str(), r.key, c, r.what));
        if !r.remedy.is_empty() {
            out.push_str("; fix: ");
            out.push_str(r.remedy);
        }
        out.push('\n');
    }
    out
}

/// Append the loss block (after a blank line) to text output, when there is one.
pub fn append_losses(out: &mut String, t: &LossTable) {
    let block = render_losses(t);
    if !block.is_empty() {
        if !out.is_empty() && !out.ends_with("\n\n") {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str(&block);
    }
}

/// The `losses` array.
pub fn losses_json(t: &LossTable) -> Result<Value, PresentError> {
    Ok(serde_json::to_value(&t.rows)?)
}

/// An object document with the `losses` array beside its own fields.
#[derive(Serialize)]
struct WithLosses<'a, T: Serialize + ?Sized> {
    #[serde(flatten)]
    doc: &'a T,
    losses: &'a [LossRow],
}

/// `doc` (a document that serializes to an object) with `losses`, as printed
/// ([`crate::json::document`]).
pub fn document_with_losses<T: Serialize + ?Sized>(doc: &T, t: &LossTable) -> Result<String, PresentError> {
    crate::json::document(&WithLosses { doc, losses: &t.rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{LossKind, ReadSummary, TraceStats};

    #[test]
    fn text_and_json_list_the_same_rows_worst_first() {
        let mut stats = TraceStats::default();
        stats.add_loss(LossKind::RingFull, 1234);
        stats.throttle_events = 2;
        let read = ReadSummary { duplicate_chunks: 1, ..Default::default() };
        let t = LossTable::new(&stats, Some(&read));
        let text = render_losses(&t);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("duplicate_chunks") && lines[0].trim_start().starts_with("error"), "{text}");
        assert!(lines[1].contains("lost_records") && lines[1].contains("1,234"), "{text}");
        assert!(lines[2].contains("throttle_events") && lines[2].contains("fix: "), "{text}");
        let j = losses_json(&t).unwrap();
        let keys: Vec<&str> = j.as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["duplicate_chunks", "lost_records", "throttle_events"]);
        assert_eq!(j[1]["severity"], "data_loss");
        assert_eq!(j[1]["count"], 1234);
        assert_eq!(render_losses(&LossTable::default()), "");
    }
}
