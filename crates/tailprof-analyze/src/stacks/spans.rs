//! The items' time windows ([`ItemSpan`]), per thread for lookups by time, and the
//! filter of the whole-trace views ([`StackFilter`]).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::NO_ITEM;
use crate::items::ItemRow;

/// The time window of one item on its thread (from [`crate::items::ItemsReport`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemSpan {
    pub id: u64,
    pub pid: u32,
    pub tid: u32,
    pub class: Option<String>,
    pub begin_ns: u64,
    pub end_ns: u64,
    /// Flagged slow by the items analysis.
    pub anomalous: bool,
    /// With switch markers: the intervals the item was current, per thread. Samples and
    /// off-CPU time count for the item only inside them (empty: all of begin..end on
    /// `tid`).
    pub current: Vec<crate::items::CurrentSlice>,
}

impl ItemSpan {
    /// The spans of an items report's rows, in the same order.
    pub fn from_rows(rows: &[ItemRow]) -> Vec<ItemSpan> {
        rows.iter()
            .map(|r| ItemSpan {
                id: r.id,
                pid: r.pid,
                tid: r.tid,
                class: r.class.clone(),
                begin_ns: r.begin_ns,
                end_ns: r.end_ns.max(r.begin_ns),
                anomalous: r.anomalous,
                current: r.current.clone(),
            })
            .collect()
    }
}

/// What the whole-trace views count. All given conditions must hold; with none, every
/// sample counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StackFilter {
    /// Only samples inside these items (`--item ID`, repeatable).
    pub items: Vec<u64>,
    /// Only samples inside items of this class.
    pub class: Option<String>,
    /// Only samples inside some item.
    pub in_items: bool,
    /// Only samples inside flagged (slow) items.
    pub slow: bool,
}

impl StackFilter {
    /// Whether any condition is set (so only samples inside items count).
    pub fn is_active(&self) -> bool {
        self.in_items || self.slow || self.class.is_some() || !self.items.is_empty()
    }

    /// Whether an item passes the filter.
    pub fn keeps(&self, s: &ItemSpan) -> bool {
        (self.items.is_empty() || self.items.contains(&s.id))
            && self.class.as_ref().is_none_or(|c| s.class.as_deref() == Some(c.as_str()))
            && (!self.slow || s.anomalous)
    }

    /// Words for a header line, e.g. `items 3, 7; class SELECT; slow items`.
    pub fn describe(&self) -> Option<String> {
        if !self.is_active() {
            return None;
        }
        let mut p = Vec::new();
        if !self.items.is_empty() {
            p.push(format!("items {}", self.items.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")));
        }
        if let Some(c) = &self.class {
            p.push(format!("class {c}"));
        }
        if self.slow {
            p.push("slow items".into());
        }
        if p.is_empty() {
            p.push("inside items".into());
        }
        Some(p.join("; "))
    }
}

/// The item spans of one thread, by begin: (begin, end, item index), with where the
/// last lookup ended.
#[derive(Debug, Default)]
pub(super) struct ThreadSpans {
    pub(super) spans: Vec<(u64, u64, u32)>,
    /// The largest end among `spans[..=i]`: a backward scan for spans overlapping an
    /// interval stops where this is at or before the interval's begin.
    pub(super) max_end: Vec<u64>,
    /// The last lookup's partition point: a thread's records come in time order, so the
    /// next one is usually there or a few spans later.
    pub(super) at: std::cell::Cell<usize>,
}

/// The number of spans of `ts` that begin at or before `t`, starting from the last
/// lookup's answer (a binary search when `t` is before it or far after it).
pub(super) fn begun(ts: &ThreadSpans, t: u64) -> usize {
    let v = &ts.spans;
    let mut i = ts.at.get().min(v.len());
    if i > 0 && v[i - 1].0 > t {
        i = v.partition_point(|s| s.0 <= t);
    } else {
        let mut steps = 0;
        while i < v.len() && v[i].0 <= t {
            i += 1;
            steps += 1;
            if steps == 8 {
                i = v.partition_point(|s| s.0 <= t);
                break;
            }
        }
    }
    ts.at.set(i);
    i
}

/// The innermost item of `by_tid` open on `tid` at `t` (`NO_ITEM`: none).
pub(super) fn item_in(by_tid: &FxHashMap<u32, ThreadSpans>, tid: u32, t: u64) -> u32 {
    let Some(ts) = by_tid.get(&tid) else {
        return NO_ITEM;
    };
    let i = begun(ts, t);
    let v = &ts.spans;
    // Latest begin first: the innermost of nested items. Items of one thread rarely
    // nest deeply; look back a bounded number of spans.
    for &(_, end, idx) in v[..i].iter().rev().take(16) {
        if t <= end {
            return idx;
        }
    }
    NO_ITEM
}
