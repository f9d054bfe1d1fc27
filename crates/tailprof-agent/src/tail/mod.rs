//! Requests, always on: tail-based retention of slow requests.
//!
//! Item boundaries (markers from the marker library, or uprobes) arrive with the samples.
//! The retainer keeps a short in-memory window of full-resolution samples (the last
//! [`KEEP_NS`], at most [`MAX_KEPT_SAMPLES`] samples and [`MAX_KEPT_FRAMES`] frames) and
//! the open requests. When a request ends, its duration goes into its class's latency
//! histogram for the window and into the class's recent history; if it is slower than
//! the configured threshold, or than the class's recent `slow_percentile` (once
//! [`MIN_HISTORY`] requests were seen), its explanation (samples on its thread during
//! it, by stack, and the off-CPU time not covered by samples) is kept for the window's
//! `items` file. Fast requests leave only their histogram count.
//!
//! Everything here is fed by untrusted processes, so every structure is bounded and
//! every bound is counted in [`TailStats`] (shown in the agent's summary):
//!
//! | structure | bound | when reached |
//! |---|---|---|
//! | open requests of one process | [`MAX_OPEN_PER_PROCESS`] | its oldest is evicted (`evicted_open`) |
//! | open requests in all | [`MAX_OPEN`] | the oldest is evicted (`evicted_open`) |
//! | open request of an exited thread, or begun again | — | dropped a window after the exit, or at once (`abandoned_open`) |
//! | kept samples | [`KEEP_NS`], [`MAX_KEPT_SAMPLES`], [`MAX_KEPT_FRAMES`] | oldest evicted; early ones counted (`kept_samples_evicted`) |
//! | class names declared | [`MAX_CLASS_LABELS`], [`MAX_CLASS_LABELS_PER_PROCESS`] | ignored (`class_labels_dropped`; shown as `classN`) |
//! | distinct classes with history and histogram | [`MAX_CLASSES`] | counted under `[other]` (`requests_in_other_class`) |
//! | retained requests per window | [`MAX_RETAINED_PER_WINDOW`] | not retained (`slow_not_retained`) |
//! | threads with a current request (switch markers) | [`MAX_THREADS`] | further threads keep the begin/end rules (`threads_untracked`) |
//! | current intervals of requests (switch markers) | [`MAX_SLICES_PER_REQUEST`], [`MAX_SLICES`] | not kept: the request's samples in part (`slices_dropped`) |
//!
//! Switch markers (issue 24, docs/MARKERS.md) follow the items join
//! (`tailprof_analyze::items::join`): every thread has a current request (a begin makes
//! the new one current, a switch the named open request of the process, a switch to
//! none none, the end of the current one none); once a thread has had a switch marker,
//! the requests current on it are *switched*: a switched request's samples are those of
//! the threads it was current on while it was (its current intervals), its off-CPU time
//! is counted only while current, and the rest of its wall time is waiting in its event
//! loop (`switching` in the explanation). Other requests keep begin → end on their thread.
//!
//! Go (probes on a Go binary, [`TailRetainer::set_goroutine_key`]): as in the items join
//! (`tailprof_analyze::items::join`, whose `goroutine_key`, `sample_goroutine` and
//! `observe_run` are used here), a probe request is keyed by its goroutine (`g`, the
//! marker's item): its end is matched by (pid, g) on any thread, a thread's exit does not
//! end it, its samples are those whose goroutine register is its `g` on any thread, and
//! its causes are looked up on its runs on OS threads. Open goroutine requests are open
//! requests (the bounds above).
//!
//! Trace context (`ItemTrace` records) is stored with the request (`trace_id`, `span_id`).
//!
//! Ends are matched through indexes, never by scanning the open requests: an end with
//! an id finds `(tid, id)` in a hash map; an end without one
//! ([`Marker::UNKNOWN_ITEM`]) takes the innermost (most recently begun) open request of
//! its thread, from a per-thread ordered map. [`TailRetainer::match_probes`] counts the
//! entries examined, so a test can check the matching stays linear.

mod causes;
mod go_off;
mod kept;
mod open;
#[cfg(test)]
mod tests;
mod window;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use tailprof_analyze::causes::{PathState, SpanPreempter, SpanSwitch, SpanWaker, SpanWakeup};
use tailprof_analyze::items::join::{observe_run, sample_goroutine};
use tailprof_format::{ItemClass, ItemTrace, Lost, Marker, MarkerKind, MarkerSource, Sample};
use tailprof_store::schema::{
    ItemExplanation, ItemRow, LatencyRow, StoreFrame, StoredDuring, StoredPreempter, StoredStack, StoredState, StoredSwitching,
    StoredWaker, KERNEL_BUILD_ID,
};

/// How long full-resolution samples are kept (longest request that can be explained).
pub const KEEP_NS: u64 = 30_000_000_000;
/// Samples kept at most.
pub const MAX_KEPT_SAMPLES: usize = 100_000;
/// Frames of kept samples at most (16 bytes each: 8 MiB).
pub const MAX_KEPT_FRAMES: usize = 1 << 19;
/// Requests in a class's history.
const HISTORY: usize = 1000;
/// Requests a class must have had before its percentile is trusted.
pub const MIN_HISTORY: usize = 20;
/// The class percentile is recomputed from the history every this many requests
/// (sorting 1000 durations per request would cost the drain loop more than the rest).
const PERCENTILE_EVERY: u32 = 32;
/// Open requests tracked at most, in all and per process.
/// (Issue 19, finding 9: with the other bounds, garbage from 30 processes × 64 threads
/// costs the retainer about 30 MiB, was 74 MiB at 100,000.)
pub const MAX_OPEN: usize = 32_768;
pub const MAX_OPEN_PER_PROCESS: usize = 4096;
/// Retained requests per window at most.
pub const MAX_RETAINED_PER_WINDOW: usize = 1000;
/// Class names (`ItemClass` records) remembered at most.
pub const MAX_CLASS_LABELS: usize = 16_384;
/// Class names remembered per process at most (one process cannot take the others'
/// share of [`MAX_CLASS_LABELS`]).
pub const MAX_CLASS_LABELS_PER_PROCESS: usize = 1024;
/// Distinct class names with a history and a histogram at most (1000 durations each);
/// requests of further classes go to the class [`OTHER_CLASS`].
pub const MAX_CLASSES: usize = 1024;
pub const OTHER_CLASS: &str = "[other]";
/// Exited threads waiting for the next window to drop their open requests, at most.
const MAX_PENDING_EXITS: usize = 1 << 18;

/// A retained request's stacks: (samples, frames innermost first).
type ItemStacks = Vec<(u64, Box<[(u32, u64)]>)>;

pub use kept::{MAX_ENDED_SPANS, MAX_KEPT_CAUSE_BYTES};
/// Wakers and preempters kept per retained request, and critical-path parts per waker.
const MAX_CAUSES_PER_REQUEST: usize = 8;
const MAX_DURING_PER_WAKER: usize = 8;
/// Current intervals of a switched request whose causes are explained (the longest).
const MAX_CAUSE_SLICES: usize = 64;
/// Threads whose current request is followed (switch markers) at most.
pub const MAX_THREADS: usize = 65_536;
/// Current intervals kept per open request, and in all.
pub const MAX_SLICES_PER_REQUEST: usize = 1024;
pub const MAX_SLICES: usize = 1 << 18;
/// Process names remembered for causes at most (then forgotten, all at once).
const MAX_COMMS: usize = 65_536;

/// A part of a waker's critical path: state, time, stack (innermost first; empty: none).
type DuringPart = (PathState, u64, Box<[(u32, u64)]>);

/// A waker of a retained request: who, its name, the request it was inside, its stack,
/// what it did while the request waited.
struct RetainedWaker {
    waker: SpanWaker,
    comm: Arc<str>,
    item: Option<u64>,
    /// The class of that request (`None`: none, or no longer known).
    class: Option<String>,
    frames: Box<[(u32, u64)]>,
    during: Vec<DuringPart>,
}

/// A retained request's causes (issue 21): wakers (with their stack and request) and
/// preempters, largest first.
#[derive(Default)]
struct RetainedCauses {
    woken_by: Vec<RetainedWaker>,
    /// With the request the preempter was in when it first ran.
    preempted_by: Vec<(SpanPreempter, Arc<str>, Option<u64>)>,
}

/// A request ended and retained, waiting for the window's end.
struct Retained {
    row: ItemRow,
    stacks: ItemStacks,
    causes: RetainedCauses,
    switching: Option<StoredSwitching>,
}

/// A thread's current request (switch markers).
struct ThreadCur {
    /// Has had a switch marker.
    switching: bool,
    current: Option<(u32, u64)>,
    since: u64,
}

struct KeptSample {
    time: u64,
    tid: u32,
    /// Its process and goroutine (goroutine mode; 0: none).
    pid: u32,
    g: u64,
    period: u64,
    frames: Box<[(u32, u64)]>,
}

struct Open {
    /// Begin order (unique): the key of the ordered indexes.
    seq: u64,
    begin: u64,
    pid: u32,
    class: u32,
    comm: Arc<str>,
    /// Its trace context (trace id, span id).
    trace: Option<([u8; 16], [u8; 8])>,
    /// Switch markers drove it: its samples are those of `slices`.
    switched: bool,
    /// The thread it was last made current on.
    current_on: Option<u32>,
    resumes: u64,
    /// When it was current: (tid, from, to).
    slices: Vec<(u32, u64, u64)>,
    /// Goroutine mode: (its goroutine `g`, the OS thread its end was seen on).
    goroutine: Option<(u64, u32)>,
}

/// A class's recent durations and the cached percentile of them.
#[derive(Default)]
struct ClassState {
    history: VecDeque<u64>,
    percentile: Option<u64>,
    since: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TailStats {
    /// Requests that ended (matched a begin).
    pub requests: u64,
    pub retained: u64,
    /// Ends with no open request to match.
    pub unmatched_ends: u64,
    /// Open requests evicted (oldest first) at [`MAX_OPEN_PER_PROCESS`] or [`MAX_OPEN`]:
    /// their end is then unmatched.
    pub evicted_open: u64,
    /// Open requests dropped because their thread exited, or their item id was begun
    /// again on the same thread, before an end.
    pub abandoned_open: u64,
    /// Slow requests not retained: [`MAX_RETAINED_PER_WINDOW`] were already kept.
    pub slow_not_retained: u64,
    /// Class names ignored at [`MAX_CLASS_LABELS`].
    pub class_labels_dropped: u64,
    /// Requests counted under [`OTHER_CLASS`]: their class was beyond [`MAX_CLASSES`].
    pub requests_in_other_class: u64,
    /// Samples evicted from the kept window before [`KEEP_NS`] by the count or frame
    /// bound: requests longer than what is kept are explained only in part.
    pub kept_samples_evicted: u64,
    /// Context switches and wakeups evicted before [`KEEP_NS`] by [`MAX_KEPT_CAUSE_BYTES`]:
    /// causes of long requests in part.
    pub kept_switches_evicted: u64,
    pub kept_wakeups_evicted: u64,
    /// Wakers' classes and preempters' requests no longer known: the request ended longer
    /// ago than [`MAX_ENDED_SPANS`] spans.
    pub cause_items_forgotten: u64,
    /// Retained requests whose causes were cut by the analysis' visit bound.
    pub causes_cut: u64,
    /// Threads whose current request was not followed ([`MAX_THREADS`]).
    pub threads_untracked: u64,
    /// Current intervals of switched requests not kept ([`MAX_SLICES_PER_REQUEST`],
    /// [`MAX_SLICES`]).
    pub slices_dropped: u64,
    /// Switch markers to a request that is not open (begun before the agent saw it).
    pub switch_unknown: u64,
    /// Goroutine mode: off-CPU intervals of goroutines evicted before [`KEEP_NS`] by
    /// [`go_off::MAX_GO_OFF`], and switch-outs not followed ([`go_off::MAX_GO_PENDING`]
    /// threads waiting for their switch-in): the off-CPU time of those requests in part.
    pub go_off_cpu_evicted: u64,
    pub go_off_cpu_untracked: u64,
}

pub struct TailRetainer {
    threshold_ns: Option<u64>,
    percentile: f64,
    kept: VecDeque<KeptSample>,
    kept_frames: usize,
    /// (tid, item) → open request.
    open: HashMap<(u32, u64), Open>,
    /// tid → begin seq → item: the innermost open request of a thread, its exit.
    by_tid: HashMap<u32, BTreeMap<u64, u64>>,
    /// pid → begin seq → (tid, item): a process's oldest, its count.
    by_pid: HashMap<u32, BTreeMap<u64, (u32, u64)>>,
    /// begin seq → (tid, item): the oldest of all.
    order: BTreeMap<u64, (u32, u64)>,
    next_seq: u64,
    /// Exits seen this window and in the previous one: (pid, tid, time, whole process).
    exits: Vec<(u32, u32, u64, bool)>,
    exits_prev: Vec<(u32, u32, u64, bool)>,
    /// pid → class id → name.
    classes: HashMap<u32, HashMap<u32, String>>,
    class_labels: usize,
    class_names: Vec<String>,
    class_ids: HashMap<String, u32>,
    class_state: Vec<ClassState>,
    /// (class index, bucket upper bound) → requests this window.
    hist: HashMap<(u32, u64), u64>,
    retained: Vec<Retained>,
    /// (pid, item) → open request (switch markers and ends find requests of other
    /// threads; the latest begun of an id).
    by_pid_id: HashMap<(u32, u64), (u32, u64)>,
    /// tid → its current request.
    threads: HashMap<u32, ThreadCur>,
    /// Current intervals kept in all.
    slices: usize,
    /// Causes (issue 21): kept context switches and wakeups (time order), process names.
    causes: kept::KeptCauses,
    /// Spans of ended requests: the requests wakers and preempters were in.
    ended: kept::EndedSpans,
    comms: HashMap<u32, Arc<str>>,
    pub stats: TailStats,
    /// Open-request entries examined to match ends (a work counter for tests: it grows
    /// linearly with the ends, however many requests are open).
    pub match_probes: u64,
    mono_to_wall: (u64, i64),
    /// Goroutine mode (probes on a Go binary): the index of the goroutine register in
    /// samples' `regs` ([`tailprof_analyze::items::join::goroutine_key`]).
    go_key: Option<usize>,
    /// Goroutine mode: goroutines' off-CPU intervals from keyed switch-outs.
    go_off: go_off::GoOffCpu,
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
            kept_frames: 0,
            open: HashMap::new(),
            by_tid: HashMap::new(),
            by_pid: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            exits: Vec::new(),
            exits_prev: Vec::new(),
            classes: HashMap::new(),
            class_labels: 0,
            class_names: Vec::new(),
            class_ids: HashMap::new(),
            class_state: Vec::new(),
            hist: HashMap::new(),
            retained: Vec::new(),
            by_pid_id: HashMap::new(),
            threads: HashMap::new(),
            slices: 0,
            causes: Default::default(),
            ended: Default::default(),
            comms: HashMap::new(),
            stats: TailStats::default(),
            match_probes: 0,
            mono_to_wall: (tailprof_collect::session::monotonic_ns(), tailprof_store::time::now_us()),
            go_key: None,
            go_off: Default::default(),
        }
    }

    /// Goroutine mode: requests from probes are keyed by goroutine, and samples carry the
    /// goroutine register at `index` of their `regs` (module docs, "Go").
    pub fn set_goroutine_key(&mut self, index: Option<usize>) {
        self.go_key = index;
    }

    fn wall_us(&self, mono: u64) -> i64 {
        let (m0, w0) = self.mono_to_wall;
        w0 + (mono as i64 - m0 as i64) / 1000
    }

    /// Requests open now.
    pub fn open_requests(&self) -> usize {
        self.open.len()
    }

    pub fn handle_sample(&mut self, s: &Sample, frames: &[(u32, u64)]) {
        let frames = &frames[..frames.len().min(MAX_KEPT_FRAMES)];
        while let Some(f) = self.kept.front() {
            let expired = f.time.saturating_add(KEEP_NS) < s.time;
            let full = self.kept.len() >= MAX_KEPT_SAMPLES || self.kept_frames + frames.len() > MAX_KEPT_FRAMES;
            if !expired && !full {
                break;
            }
            if !expired {
                self.stats.kept_samples_evicted += 1;
            }
            self.kept_frames -= f.frames.len();
            self.kept.pop_front();
        }
        self.kept_frames += frames.len();
        let g = self.go_key.and_then(|i| sample_goroutine(s, i)).unwrap_or(0);
        self.kept.push_back(KeptSample { time: s.time, tid: s.tid, pid: s.pid, g, period: s.period, frames: frames.into() });
    }

    pub fn handle_lost(&mut self, _l: &Lost) {}

    /// A process's name (COMM of its main thread), for the causes of retained requests.
    pub fn handle_comm(&mut self, pid: u32, comm: &str) {
        if self.comms.len() >= MAX_COMMS && !self.comms.contains_key(&pid) {
            self.comms.clear();
        }
        let comm: String = comm.chars().take(64).collect();
        self.comms.insert(pid, Arc::from(comm));
    }

    /// Lets go of the kept samples (counted in `kept_samples_evicted`): the aggregator's
    /// binary indexes they hold are about to change meaning.
    pub fn forget_kept_samples(&mut self) {
        self.stats.kept_samples_evicted += self.kept.len() as u64;
        self.kept.clear();
        self.kept_frames = 0;
    }

    pub fn handle_class(&mut self, c: &ItemClass) {
        let name: String = c.name.chars().take(128).collect();
        let known = self.classes.get(&c.pid).is_some_and(|m| m.contains_key(&c.id));
        if known {
            if let Some(m) = self.classes.get_mut(&c.pid) {
                m.insert(c.id, name);
            }
        } else if self.class_labels < MAX_CLASS_LABELS && self.classes.get(&c.pid).is_none_or(|m| m.len() < MAX_CLASS_LABELS_PER_PROCESS) {
            self.class_labels += 1;
            self.classes.entry(c.pid).or_default().insert(c.id, name);
        } else {
            self.stats.class_labels_dropped += 1;
        }
    }

    /// The class index of a request (interned; [`OTHER_CLASS`] beyond [`MAX_CLASSES`]).
    fn class_index(&mut self, pid: u32, class_id: u32) -> u32 {
        let named = self.classes.get(&pid).and_then(|m| m.get(&class_id));
        let name: std::borrow::Cow<str> = match named {
            Some(n) => n.as_str().into(),
            None if class_id == 0 => "default".into(),
            None => format!("class{class_id}").into(),
        };
        if let Some(&i) = self.class_ids.get(name.as_ref()) {
            return i;
        }
        let name = if self.class_names.len() >= MAX_CLASSES {
            self.stats.requests_in_other_class += 1;
            if let Some(&i) = self.class_ids.get(OTHER_CLASS) {
                return i;
            }
            OTHER_CLASS.into()
        } else {
            name.into_owned()
        };
        let i = self.class_names.len() as u32;
        self.class_names.push(name.clone());
        self.class_ids.insert(name, i);
        self.class_state.push(ClassState::default());
        i
    }

    fn finish(&mut self, tid: u32, item: u64, o: &Open, class_id: u32, end: u64) {
        self.stats.requests += 1;
        let dur = end.saturating_sub(o.begin);
        let ci = self.class_index(o.pid, class_id);
        *self.hist.entry((ci, bucket_le(dur))).or_insert(0) += 1;
        // Where it ran, for the requests of later causes' wakers and preempters (only
        // when the recorder records switches: nothing else asks).
        let go_runs = o.goroutine.map(|(g, end_tid)| self.goroutine_runs(o.pid, g, tid, o.begin, end_tid, end));
        if !self.causes.switches.is_empty() {
            if let Some(runs) = &go_runs {
                for &(t, b, e) in runs {
                    self.ended.push(t, b, e, item, ci);
                }
            } else if o.switched {
                for &(t, b, e) in &o.slices {
                    self.ended.push(t, b, e, item, ci);
                }
            } else {
                self.ended.push(tid, o.begin, end, item, ci);
            }
        }
        let want = self.percentile;
        let st = &mut self.class_state[ci as usize];
        if want > 0.0 && st.history.len() >= MIN_HISTORY && (st.percentile.is_none() || st.since >= PERCENTILE_EVERY) {
            let mut v: Vec<u64> = st.history.iter().copied().collect();
            v.sort_unstable();
            let idx = ((want / 100.0) * (v.len() - 1) as f64).round() as usize;
            st.percentile = Some(v[idx.min(v.len() - 1)]);
            st.since = 0;
        }
        let p = st.percentile;
        st.since = st.since.saturating_add(1);
        if st.history.len() >= HISTORY {
            st.history.pop_front();
        }
        st.history.push_back(dur);
        let (slow, reason, limit) = match (self.threshold_ns, p) {
            (Some(t), _) if dur > t => (true, "threshold", t),
            (_, Some(p)) if dur > p => (true, "p99", p),
            _ => (false, "", 0),
        };
        if !slow {
            return;
        }
        if self.retained.len() >= MAX_RETAINED_PER_WINDOW {
            self.stats.slow_not_retained += 1;
            return;
        }
        // A switched request: the intervals it was current; else begin → end on its thread.
        // A goroutine's: its runs on OS threads.
        let spans: Vec<(u32, u64, u64)> = match go_runs {
            Some(runs) => runs,
            None if o.switched => o.slices.clone(),
            None => vec![(tid, o.begin, end)],
        };
        let mut stacks: HashMap<&[(u32, u64)], u64> = HashMap::new();
        let (mut samples, mut on_cpu) = (0u64, 0u64);
        if let Some((g, _)) = o.goroutine {
            // A goroutine's samples are those that ran it, on any thread (the join's rule).
            let first = self.kept.partition_point(|s| s.time < o.begin);
            for s in self.kept.range(first..).take_while(|s| s.time <= end).filter(|s| s.pid == o.pid && s.g == g) {
                *stacks.entry(&s.frames).or_insert(0) += 1;
                samples += 1;
                on_cpu = on_cpu.saturating_add(s.period);
            }
        }
        for &(t, b, e) in spans.iter().filter(|_| o.goroutine.is_none()) {
            // Kept samples are in time order (the recorder hands records over sorted by
            // time): start at the span's begin, stop after its end.
            let first = self.kept.partition_point(|s| s.time < b);
            let last_inclusive = !o.switched;
            for s in self.kept.range(first..).take_while(|s| s.time < e || (last_inclusive && s.time == e)).filter(|s| s.tid == t) {
                *stacks.entry(&s.frames).or_insert(0) += 1;
                samples += 1;
                on_cpu = on_cpu.saturating_add(s.period);
            }
        }
        let stacks: ItemStacks = stacks.into_iter().map(|(k, v)| (v, k.into())).collect();
        let switching = o.switched.then(|| {
            let current_ns: u64 = spans.iter().map(|s| s.2 - s.1).sum();
            // Wall time covered by no current interval.
            let mut iv: Vec<(u64, u64)> = spans.iter().map(|s| (s.1, s.2)).collect();
            iv.sort_unstable();
            let (mut covered, mut reach) = (0u64, o.begin);
            for (b, e) in iv {
                let b = b.max(reach);
                if e > b {
                    covered += e - b;
                    reach = e;
                }
            }
            let mut tids: Vec<u32> = spans.iter().map(|s| s.0).collect();
            tids.sort_unstable();
            tids.dedup();
            StoredSwitching { current_ns, waiting_in_loop_ns: dur.saturating_sub(covered), resumes: o.resumes, threads: tids.len() as u32 }
        });
        let causes = self.causes_of(&spans);
        self.stats.retained += 1;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let row = ItemRow {
            begin_us: self.wall_us(o.begin),
            duration_ns: dur,
            class: self.class_names[ci as usize].clone(),
            item_id: item,
            pid: o.pid,
            tid,
            comm: o.comm.to_string(),
            reason: if reason == "p99" { format!("p{}", self.percentile) } else { reason.into() },
            limit_ns: limit,
            samples,
            // A goroutine's: its off-CPU intervals (keyed switch-outs, the join's rule) when
            // the recorder records switches. Else off CPU while current (switched), else
            // over its wall time.
            off_cpu_ns: o
                .goroutine
                .and_then(|(g, _)| self.go_off.off_cpu(o.pid, g, o.begin, end))
                .unwrap_or_else(|| switching.map_or(dur, |s| s.current_ns).saturating_sub(on_cpu)),
            explanation: String::new(),
            trace_id: o.trace.map(|t| hex(&t.0)).unwrap_or_default(),
            span_id: o.trace.map(|t| hex(&t.1)).unwrap_or_default(),
        };
        self.retained.push(Retained { row, stacks, causes, switching });
    }

    /// Goroutine mode: the runs of goroutine `g` of `pid` on OS threads between its begin
    /// (seen on `begin_tid`) and its end (on `end_tid`), from the kept samples of the
    /// process, by the join's run rule ([`observe_run`]): a run on a thread lasts from the
    /// first to the last time the goroutine was seen there without another one seen in
    /// between. At most [`MAX_SLICES_PER_REQUEST`] runs (more: `slices_dropped`).
    fn goroutine_runs(&mut self, pid: u32, g: u64, begin_tid: u32, begin: u64, end_tid: u32, end: u64) -> Vec<(u32, u64, u64)> {
        let mut open: HashMap<u32, Option<(u64, u64, u64)>> = HashMap::new();
        let mut runs = Vec::new();
        let mut dropped = 0u64;
        let mut push = |r: Option<(u64, u64, u64)>, tid: u32, runs: &mut Vec<(u32, u64, u64)>| {
            if let Some((_, from, to)) = r {
                if runs.len() < MAX_SLICES_PER_REQUEST {
                    runs.push((tid, from, to));
                } else {
                    dropped += 1;
                }
            }
        };
        observe_run(open.entry(begin_tid).or_default(), Some(g), begin);
        let from = self.kept.partition_point(|s| s.time < begin);
        for s in self.kept.range(from..).take_while(|s| s.time <= end).filter(|s| s.pid == pid) {
            let run = open.entry(s.tid).or_default();
            let ended = observe_run(run, (s.g == g).then_some(g), s.time);
            push(ended, s.tid, &mut runs);
        }
        let ended = observe_run(open.entry(end_tid).or_default(), Some(g), end);
        push(ended, end_tid, &mut runs);
        for (tid, run) in open {
            push(run, tid, &mut runs);
        }
        self.stats.slices_dropped += dropped;
        runs.sort_unstable_by_key(|r| (r.1, r.0));
        runs
    }
}
