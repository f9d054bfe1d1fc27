//! The samples inside items, one by one, named by function (what `tailprof export`
//! shows as instants on the item tracks of a Perfetto trace), and the thread names.
//!
//! A second pass over the trace, after the join ([`super::items_report`]): the items'
//! windows are known, so only samples inside a window are resolved (through the one
//! [`Resolved`] adapter) and kept, at most [`MAX_ITEM_SAMPLES`]; symbolization runs once
//! per unique location at the end.

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use tailprof_format::{Comm, Sample, TraceReader};

use super::ItemsReport;
use crate::resolve::{LocId, Resolved, ResolvedSink, Resolver};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// Samples kept at most (the rest would only make the file huge); the excess is counted
/// in [`ItemSamples::left_out`].
pub const MAX_ITEM_SAMPLES: usize = 2_000_000;

/// One sample inside an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemSample {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    /// Function name (`[unknown] bin+0x..` when there is no symbol).
    pub function: String,
}

/// What [`item_samples`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemSamples {
    /// In trace order.
    pub samples: Vec<ItemSample>,
    /// Samples inside items beyond [`MAX_ITEM_SAMPLES`], not kept.
    pub left_out: u64,
    /// Thread names: tid → last COMM seen.
    pub names: BTreeMap<u32, String>,
}

/// Picks the samples of one event that fall inside an item's window on their thread.
#[derive(Debug)]
struct Picker {
    event: u16,
    /// Item windows per thread, sorted by begin: (begin, end).
    windows: FxHashMap<u32, Vec<(u64, u64)>>,
    picked: Vec<(u32, u32, u64, LocId)>,
    left_out: u64,
    names: BTreeMap<u32, String>,
}

impl Picker {
    fn inside(&self, tid: u32, t: u64) -> bool {
        let Some(w) = self.windows.get(&tid) else { return false };
        let i = w.partition_point(|&(b, _)| b <= t);
        i > 0 && t <= w[i - 1].1
    }
}

impl ResolvedSink for Picker {
    fn handle_sample(&mut self, s: &Sample, resolver: &mut Resolver) {
        if s.event != self.event || !self.inside(s.tid, s.time) {
            return;
        }
        if self.picked.len() >= MAX_ITEM_SAMPLES {
            self.left_out = self.left_out.saturating_add(1);
            return;
        }
        self.picked.push((s.pid, s.tid, s.time, resolver.loc(s)));
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.names.insert(c.tid, c.comm.clone());
    }
}

/// Sort `w` and merge overlapping windows (nested or interleaved items on one thread),
/// so a binary search finds the one window that can hold a time.
fn merge_windows(w: &mut Vec<(u64, u64)>) {
    w.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(w.len());
    for &(b, e) in w.iter() {
        match out.last_mut() {
            Some(last) if b <= last.1 => last.1 = last.1.max(e),
            _ => out.push((b, e)),
        }
    }
    *w = out;
}

/// Read the trace again and return the samples of event `event` that fall inside the
/// items of `report` (an item's window on its thread, ends included; with switch markers
/// the intervals it was current), named by function.
pub fn item_samples(
    reader: &mut TraceReader,
    report: &ItemsReport,
    event: u16,
    symbolizer: &mut Symbolizer,
) -> Result<ItemSamples, AnalyzeError> {
    let mut windows: FxHashMap<u32, Vec<(u64, u64)>> = FxHashMap::default();
    for r in &report.items {
        if r.current.is_empty() {
            windows.entry(r.tid).or_default().push((r.begin_ns, r.end_ns));
        }
        // With switch markers: only while the item was current, on whichever thread.
        for c in &r.current {
            windows.entry(c.tid).or_default().push((c.begin_ns, c.end_ns));
        }
    }
    for w in windows.values_mut() {
        merge_windows(w);
    }
    let picker = Picker { event, windows, picked: Vec::new(), left_out: 0, names: BTreeMap::new() };
    let mut sink = Resolved::wrap(reader.header(), picker);
    reader.read_all(&mut sink)?;
    sink.add_build_ids(reader.build_ids());
    let (picker, resolver) = sink.into_parts();
    let table = resolver.functions(symbolizer);
    let samples = picker
        .picked
        .iter()
        .map(|&(pid, tid, time_ns, loc)| ItemSample {
            pid,
            tid,
            time_ns,
            function: table.row_of(loc).map(|r| r.name.clone()).unwrap_or_default(),
        })
        .collect();
    Ok(ItemSamples { samples, left_out: picker.left_out, names: picker.names })
}

#[cfg(test)]
mod tests {
    use super::merge_windows;

    #[test]
    fn nested_and_interleaved_windows_merge() {
        let mut w = vec![(10, 20), (0, 100), (150, 160), (155, 170), (200, 200)];
        merge_windows(&mut w);
        assert_eq!(w, [(0, 100), (150, 170), (200, 200)]);
    }
}
