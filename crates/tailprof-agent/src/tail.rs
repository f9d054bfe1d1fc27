//! Requests, always on: tail-based retention of slow requests.
//!
//! Item boundaries (markers from the marker library, or uprobes) arrive with the samples.
//! The retainer keeps a short in-memory window of full-resolution samples (the last
//! [`KEEP_NS`] or [`MAX_KEPT_SAMPLES`], whichever is less) and the open requests. When a
//! request ends, its duration goes into its class's latency histogram for the window
//! and into the class's recent history; if it is slower than the configured threshold,
//! or than the class's recent `slow_percentile` (once [`MIN_HISTORY`] requests were
//! seen), its explanation (samples on its thread during it, by stack, and the off-CPU
//! time not covered by samples) is kept for the window's `items` file. Fast requests
//! leave only their histogram count.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use tailprof_format::{ItemClass, Lost, Marker, MarkerKind, Sample};
use tailprof_store::schema::{ItemRow, LatencyRow, KERNEL_BUILD_ID};

/// How long full-resolution samples are kept (longest request that can be explained).
pub const KEEP_NS: u64 = 30_000_000_000;
/// Samples kept at most.
pub const MAX_KEPT_SAMPLES: usize = 200_000;
/// Requests in a class's history.
const HISTORY: usize = 1000;
/// Requests a class must have had before its percentile is trusted.
pub const MIN_HISTORY: usize = 20;
/// Open requests tracked at most; retained requests per window at most.
const MAX_OPEN: usize = 100_000;
const MAX_RETAINED_PER_WINDOW: usize = 1000;

/// A retained request's stacks: (samples, frames innermost first).
type ItemStacks = Vec<(u64, Box<[(u32, u64)]>)>;

struct KeptSample {
    time: u64,
    tid: u32,
    period: u64,
    frames: Box<[(u32, u64)]>,
}

struct Open {
    begin: u64,
    pid: u32,
    class: u32,
    comm: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TailStats {
    pub requests: u64,
    pub retained: u64,
    pub unmatched_ends: u64,
    pub dropped_open: u64,
}

pub struct TailRetainer {
    threshold_ns: Option<u64>,
    percentile: f64,
    kept: VecDeque<KeptSample>,
    open: HashMap<(u32, u64), Open>,
    classes: HashMap<(u32, u32), String>,
    history: HashMap<String, VecDeque<u64>>,
    hist: HashMap<(String, u64), u64>,
    retained: Vec<(ItemRow, ItemStacks)>,
    pub stats: TailStats,
    mono_to_wall: (u64, i64),
}

/// The log2 bucket upper bound of a duration.
pub fn bucket_le(ns: u64) -> u64 {
    ns.max(1).checked_next_power_of_two().unwrap_or(u64::MAX)
}

impl TailRetainer {
    pub fn new(threshold_ns: Option<u64>, percentile: f64) -> Self {
        TailRetainer {
            threshold_ns,
            percentile,
            kept: VecDeque::new(),
            open: HashMap::new(),
            classes: HashMap::new(),
            history: HashMap::new(),
            hist: HashMap::new(),
            retained: Vec::new(),
            stats: TailStats::default(),
            mono_to_wall: (
                tailprof_collect::session::monotonic_ns(),
                tailprof_store::time::now_us(),
            ),
        }
    }

    fn wall_us(&self, mono: u64) -> i64 {
        let (m0, w0) = self.mono_to_wall;
        w0 + (mono as i64 - m0 as i64) / 1000
    }

    pub fn handle_sample(&mut self, s: &Sample, frames: &[(u32, u64)]) {
        while let Some(f) = self.kept.front() {
            if self.kept.len() >= MAX_KEPT_SAMPLES || f.time.saturating_add(KEEP_NS) < s.time {
                self.kept.pop_front();
            } else {
                break;
            }
        }
        self.kept.push_back(KeptSample {
            time: s.time,
            tid: s.tid,
            period: s.period,
            frames: frames.into(),
        });
    }

    pub fn handle_lost(&mut self, _l: &Lost) {}

    pub fn handle_class(&mut self, c: &ItemClass) {
        if self.classes.len() < 100_000 {
            self.classes
                .insert((c.pid, c.id), c.name.chars().take(128).collect());
        }
    }

    pub fn handle_marker(&mut self, m: &Marker, comm: &str) {
        match m.kind {
            MarkerKind::Begin => {
                if self.open.len() >= MAX_OPEN {
                    self.stats.dropped_open += 1;
                    return;
                }
                self.open.insert(
                    (m.tid, m.item),
                    Open {
                        begin: m.time,
                        pid: m.pid,
                        class: m.class,
                        comm: comm.to_string(),
                    },
                );
            }
            // Class labels (`--item-class-from`) are applied by the items join.
            MarkerKind::Label => {}
            MarkerKind::End => {
                let key = if m.item == Marker::UNKNOWN_ITEM {
                    self.open.keys().find(|k| k.0 == m.tid).copied()
                } else {
                    Some((m.tid, m.item))
                };
                let Some(o) = key.and_then(|k| self.open.remove(&k)) else {
                    self.stats.unmatched_ends += 1;
                    return;
                };
                let item = key.map(|k| k.1).unwrap_or(0);
                let class_id = if m.class != 0 { m.class } else { o.class };
                self.finish(m.tid, item, &o, class_id, m.time);
            }
        }
    }

    fn finish(&mut self, tid: u32, item: u64, o: &Open, class_id: u32, end: u64) {
        self.stats.requests += 1;
        let dur = end.saturating_sub(o.begin);
        let class = self
            .classes
            .get(&(o.pid, class_id))
            .cloned()
            .unwrap_or_else(|| {
                if class_id == 0 {
                    "default".into()
                } else {
                    format!("class{class_id}")
                }
            });
        *self
            .hist
            .entry((class.clone(), bucket_le(dur)))
            .or_insert(0) += 1;
        let h = self.history.entry(class.clone()).or_default();
        let p = if self.percentile > 0.0 && h.len() >= MIN_HISTORY {
            let mut v: Vec<u64> = h.iter().copied().collect();
            v.sort_unstable();
            let idx = ((self.percentile / 100.0) * (v.len() - 1) as f64).round() as usize;
            Some(v[idx.min(v.len() - 1)])
        } else {
            None
        };
        if h.len() >= HISTORY {
            h.pop_front();
        }
        h.push_back(dur);
        let (slow, reason, limit) = match (self.threshold_ns, p) {
            (Some(t), _) if dur > t => (true, "threshold", t),
            (_, Some(p)) if dur > p => (true, "p99", p),
            _ => (false, "", 0),
        };
        if !slow || self.retained.len() >= MAX_RETAINED_PER_WINDOW {
            return;
        }
        let mut stacks: HashMap<&[(u32, u64)], u64> = HashMap::new();
        let (mut samples, mut on_cpu) = (0u64, 0u64);
        for s in self
            .kept
            .iter()
            .filter(|s| s.tid == tid && s.time >= o.begin && s.time <= end)
        {
            *stacks.entry(&s.frames).or_insert(0) += 1;
            samples += 1;
            on_cpu = on_cpu.saturating_add(s.period);
        }
        let stacks: ItemStacks =
            stacks.into_iter().map(|(k, v)| (v, k.into())).collect();
        self.stats.retained += 1;
        let row = ItemRow {
            begin_us: self.wall_us(o.begin),
            duration_ns: dur,
            class,
            item_id: item,
            pid: o.pid,
            tid,
            comm: o.comm.clone(),
            reason: if reason == "p99" {
                format!("p{}", self.percentile)
            } else {
                reason.into()
            },
            limit_ns: limit,
            samples,
            off_cpu_ns: dur.saturating_sub(on_cpu),
            explanation: String::new(),
        };
        self.retained.push((row, stacks));
    }

    /// The window's retained requests (explanations with build-ids filled in) and
    /// latency histogram rows.
    pub fn take_window(
        &mut self,
        start: i64,
        end: i64,
        build_id: &dyn Fn(u32) -> Option<String>,
    ) -> (Vec<ItemRow>, Vec<LatencyRow>) {
        let mut items = Vec::new();
        for (mut row, mut stacks) in std::mem::take(&mut self.retained) {
            stacks.sort_by_key(|s| std::cmp::Reverse(s.0));
            let st: Vec<serde_json::Value> = stacks
                .iter()
                .take(50)
                .map(|(n, frames)| {
                    let fr: Vec<serde_json::Value> = frames
                        .iter()
                        .map(|&(b, off)| {
                            let bid = match b {
                                u32::MAX => String::new(),
                                x if x == u32::MAX - 1 => KERNEL_BUILD_ID.to_string(),
                                x if x == u32::MAX - 2 => String::new(),
                                x => build_id(x).unwrap_or_default(),
                            };
                            serde_json::json!([bid, off])
                        })
                        .collect();
                    serde_json::json!({"samples": n, "frames": fr})
                })
                .collect();
            row.explanation = serde_json::json!({"stacks": st}).to_string();
            items.push(row);
        }
        let mut latency: Vec<LatencyRow> = std::mem::take(&mut self.hist)
            .into_iter()
            .map(|((class, le), count)| LatencyRow {
                window_start_us: start,
                window_end_us: end,
                class,
                le_ns: le,
                count,
            })
            .collect();
        latency.sort_by(|a, b| (&a.class, a.le_ns).cmp(&(&b.class, b.le_ns)));
        (items, latency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::MarkerSource;

    fn mk(kind: MarkerKind, t: u64, item: u64) -> Marker {
        Marker {
            time: t,
            pid: 1,
            tid: 2,
            kind,
            item,
            class: 0,
            source: MarkerSource::default(),
        }
    }

    #[test]
    fn keeps_only_slow_requests() {
        let mut r = TailRetainer::new(None, 99.0);
        for i in 0..50u64 {
            let t = i * 10_000_000;
            r.handle_marker(&mk(MarkerKind::Begin, t, i), "srv");
            r.handle_marker(&mk(MarkerKind::End, t + 1_000_000, i), "srv");
        }
        let s = Sample {
            time: 600_000_000,
            tid: 2,
            pid: 1,
            period: 1_000_000,
            ..Default::default()
        };
        r.handle_sample(&s, &[(0, 0x10)]);
        r.handle_marker(&mk(MarkerKind::Begin, 590_000_000, 99), "srv");
        r.handle_marker(&mk(MarkerKind::End, 640_000_000, 99), "srv");
        let (items, lat) = r.take_window(0, 1, &|_| Some("ab".into()));
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].item_id, 99);
        assert_eq!(items[0].samples, 1);
        assert!(items[0].explanation.contains("\"ab\""));
        assert_eq!(lat.iter().map(|l| l.count).sum::<u64>(), 51);
    }
}
