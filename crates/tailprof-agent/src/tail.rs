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
//! Trace context (`ItemTrace` records) is stored with the request (`trace_id`, `span_id`).
//!
//! Ends are matched through indexes, never by scanning the open requests: an end with
//! an id finds `(tid, id)` in a hash map; an end without one
//! ([`Marker::UNKNOWN_ITEM`]) takes the innermost (most recently begun) open request of
//! its thread, from a per-thread ordered map. [`TailRetainer::match_probes`] counts the
//! entries examined, so a test can check the matching stays linear.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use tailprof_analyze::causes::{PathState, SpanPreempter, SpanWaker};
use tailprof_format::{ItemClass, ItemTrace, Lost, Marker, MarkerKind, Sample};
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

/// Context switches kept at most (about 40 bytes each: 10 MiB), for the causes of the
/// requests that end (issue 21): who woke them, who ran while they waited for a CPU.
pub const MAX_KEPT_SWITCHES: usize = 1 << 18;
/// Wakeups kept at most (those the recorder keeps: of threads that wrote markers; the
/// waker's stack only when the woken thread is inside an open request), and the frames
/// of their wakers' stacks at most.
pub const MAX_KEPT_WAKEUPS: usize = 1 << 17;
pub const MAX_KEPT_WAKE_FRAMES: usize = 1 << 18;
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

/// What a kept wakeup adds to its record: the waker's stack (as kept samples' frames)
/// and the request the waker was inside.
struct WakeExtra {
    frames: Box<[(u32, u64)]>,
    item: Option<u64>,
}

/// A part of a waker's critical path: state, time, stack (innermost first; empty: none).
type DuringPart = (PathState, u64, Box<[(u32, u64)]>);

/// A waker of a retained request: who, its name, the request it was inside, its stack,
/// what it did while the request waited.
struct RetainedWaker {
    waker: SpanWaker,
    comm: Arc<str>,
    item: Option<u64>,
    frames: Box<[(u32, u64)]>,
    during: Vec<DuringPart>,
}

/// A retained request's causes (issue 21): wakers (with their stack and request) and
/// preempters, largest first.
#[derive(Default)]
struct RetainedCauses {
    woken_by: Vec<RetainedWaker>,
    preempted_by: Vec<(SpanPreempter, Arc<str>)>,
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
    /// Context switches and wakeups evicted before [`KEEP_NS`] by [`MAX_KEPT_SWITCHES`],
    /// [`MAX_KEPT_WAKEUPS`] or [`MAX_KEPT_WAKE_FRAMES`]: causes of long requests in part.
    pub kept_switches_evicted: u64,
    pub kept_wakeups_evicted: u64,
    /// Retained requests whose causes were cut by the analysis' visit bound.
    pub causes_cut: u64,
    /// Threads whose current request was not followed ([`MAX_THREADS`]).
    pub threads_untracked: u64,
    /// Current intervals of switched requests not kept ([`MAX_SLICES_PER_REQUEST`],
    /// [`MAX_SLICES`]).
    pub slices_dropped: u64,
    /// Switch markers to a request that is not open (begun before the agent saw it).
    pub switch_unknown: u64,
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
    switches: VecDeque<tailprof_format::Switch>,
    wakeups: VecDeque<tailprof_format::Wakeup>,
    wake_extra: VecDeque<WakeExtra>,
    wake_frames: usize,
    comms: HashMap<u32, Arc<str>>,
    pub stats: TailStats,
    /// Open-request entries examined to match ends (a work counter for tests: it grows
    /// linearly with the ends, however many requests are open).
    pub match_probes: u64,
    mono_to_wall: (u64, i64),
}

/// A kept stack (innermost first).
type Frames<'k> = &'k [(u32, u64)];

/// A waker's critical path while being summed: (state, stack) → ns.
type DuringAcc<'k> = BTreeMap<(PathState, Option<Frames<'k>>), u64>;

/// A thread's kept samples in a window, by their stack (for the critical paths).
fn samples_of<'k>(kept: &'k VecDeque<KeptSample>) -> impl FnMut(u32, u64, u64, &mut Vec<Frames<'k>>) + 'k {
    move |t, b, e, out| {
        let first = kept.partition_point(|s| s.time < b);
        out.extend(kept.range(first..).take_while(|s| s.time < e).filter(|s| s.tid == t).map(|s| &*s.frames));
    }
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
            switches: VecDeque::new(),
            wakeups: VecDeque::new(),
            wake_extra: VecDeque::new(),
            wake_frames: 0,
            comms: HashMap::new(),
            stats: TailStats::default(),
            match_probes: 0,
            mono_to_wall: (tailprof_collect::session::monotonic_ns(), tailprof_store::time::now_us()),
        }
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
        self.kept.push_back(KeptSample { time: s.time, tid: s.tid, period: s.period, frames: frames.into() });
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

    /// A context switch (in time order), kept for [`KEEP_NS`] at most
    /// ([`MAX_KEPT_SWITCHES`]): the causes of requests that end later.
    pub fn handle_switch(&mut self, s: &tailprof_format::Switch) {
        while let Some(f) = self.switches.front() {
            let expired = f.time.saturating_add(KEEP_NS) < s.time;
            if !expired && self.switches.len() < MAX_KEPT_SWITCHES {
                break;
            }
            if !expired {
                self.stats.kept_switches_evicted += 1;
            }
            self.switches.pop_front();
        }
        self.switches.push_back(s.clone());
    }

    /// Whether [`Self::handle_wakeup`] keeps the waker's stack of this wakeup (it need not
    /// be resolved otherwise): the woken thread is inside an open request.
    pub fn wants_wakeup(&self, w: &tailprof_format::Wakeup) -> bool {
        self.by_tid.contains_key(&w.wakee_tid)
    }

    /// A wakeup (in time order) with the waker's stack (`frames` as for samples; kept only
    /// when the woken thread is inside an open request: nothing else asks who woke it).
    /// Every wakeup is kept (bounded), for the critical paths: who woke a request's waker.
    pub fn handle_wakeup(&mut self, w: &tailprof_format::Wakeup, frames: &[(u32, u64)]) {
        let frames: &[(u32, u64)] = if self.wants_wakeup(w) { &frames[..frames.len().min(tailprof_store::MAX_FRAMES)] } else { &[] };
        while let Some(f) = self.wakeups.front() {
            let expired = f.time.saturating_add(KEEP_NS) < w.time;
            let full = self.wakeups.len() >= MAX_KEPT_WAKEUPS || self.wake_frames + frames.len() > MAX_KEPT_WAKE_FRAMES;
            if !expired && !full {
                break;
            }
            if !expired {
                self.stats.kept_wakeups_evicted += 1;
            }
            self.wakeups.pop_front();
            if let Some(x) = self.wake_extra.pop_front() {
                self.wake_frames -= x.frames.len();
            }
        }
        // The request the waker is inside now: its current one (switch markers), else its
        // innermost open one.
        let item = match self.threads.get(&w.tid) {
            Some(t) if t.switching => t.current.map(|k| k.1),
            _ => self.by_tid.get(&w.tid).and_then(|m| m.values().next_back().copied()),
        };
        self.wake_frames += frames.len();
        self.wakeups.push_back(w.clone());
        self.wake_extra.push_back(WakeExtra { frames: frames.into(), item });
    }

    /// Who woke request `tid`'s spans (`(tid, from, to)`: begin → end, or the intervals it
    /// was current) and who ran instead of it, and what its wakers did meanwhile, from the
    /// kept switches, wakeups and samples (empty without switches: the recorder did not
    /// record them).
    fn causes_of(&mut self, spans: &[(u32, u64, u64)]) -> RetainedCauses {
        if self.switches.is_empty() || spans.is_empty() {
            return RetainedCauses::default();
        }
        let switches: &[tailprof_format::Switch] = self.switches.make_contiguous();
        let wakeups: &[tailprof_format::Wakeup] = self.wakeups.make_contiguous();
        let mut samples = samples_of(&self.kept);
        // The longest spans (a switched request may have many current intervals).
        let mut order: Vec<usize> = (0..spans.len()).collect();
        if spans.len() > MAX_CAUSE_SLICES {
            order.sort_by_key(|&i| std::cmp::Reverse(spans[i].2 - spans[i].1));
            order.truncate(MAX_CAUSE_SLICES);
            self.stats.causes_cut += 1;
        }
        let mut woken: Vec<SpanWaker> = Vec::new();
        let mut largest_ns: Vec<u64> = Vec::new();
        let mut ran: Vec<SpanPreempter> = Vec::new();
        let mut during: Vec<((u32, u32), DuringAcc)> = Vec::new();
        let mut cut = false;
        for &i in &order {
            let (tid, b, e) = spans[i];
            let c = tailprof_analyze::causes::span_causes(tid, b, e, switches, wakeups);
            let p = tailprof_analyze::causes::span_critical_paths(tid, b, e, switches, wakeups, &mut samples);
            cut |= c.cut || p.cut;
            for w in c.woken_by {
                // The blocked time of its largest wakeup in this span (to keep the largest).
                let big = w.ns;
                match woken.iter().position(|x| x.pid == w.pid && x.tid == w.tid) {
                    Some(k) => {
                        woken[k].ns = woken[k].ns.saturating_add(w.ns);
                        if big > largest_ns[k] {
                            (woken[k].largest, largest_ns[k]) = (w.largest, big);
                        }
                    }
                    None => {
                        woken.push(w);
                        largest_ns.push(big);
                    }
                }
            }
            for r in c.preempted_by {
                match ran.iter_mut().find(|x| x.pid == r.pid && x.tid == r.tid) {
                    Some(x) => x.ns = x.ns.saturating_add(r.ns),
                    None => ran.push(r),
                }
            }
            for wp in p.wakers {
                let k = match during.iter().position(|d| d.0 == (wp.pid, wp.tid)) {
                    Some(k) => k,
                    None => {
                        during.push(((wp.pid, wp.tid), Default::default()));
                        during.len() - 1
                    }
                };
                for part in wp.parts {
                    *during[k].1.entry((part.state, part.stack)).or_default() += part.ns;
                }
            }
        }
        if cut {
            self.stats.causes_cut += 1;
        }
        woken.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        ran.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
        let comm = |pid: u32| self.comms.get(&pid).cloned().unwrap_or_else(|| Arc::from(""));
        RetainedCauses {
            woken_by: woken
                .iter()
                .take(MAX_CAUSES_PER_REQUEST)
                .map(|w| {
                    let x = self.wake_extra.get(w.largest);
                    let mut parts: Vec<DuringPart> = during
                        .iter()
                        .find(|d| d.0 == (w.pid, w.tid))
                        .map(|d| {
                            d.1.iter()
                                .filter(|(_, &ns)| ns > 0)
                                .map(|(&(state, stack), &ns)| (state, ns, stack.map(Box::from).unwrap_or_default()))
                                .collect()
                        })
                        .unwrap_or_default();
                    parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)).then(a.2.cmp(&b.2)));
                    parts.truncate(MAX_DURING_PER_WAKER);
                    RetainedWaker {
                        waker: *w,
                        comm: comm(w.pid),
                        item: x.and_then(|x| x.item),
                        frames: x.map(|x| x.frames.clone()).unwrap_or_default(),
                        during: parts,
                    }
                })
                .collect(),
            preempted_by: ran.iter().take(MAX_CAUSES_PER_REQUEST).map(|p| (*p, comm(p.pid))).collect(),
        }
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

    /// A thread (or, `tid == pid`, a process) exited. Its open requests can never end;
    /// they are dropped (and counted) at the end of the next window, so that end markers
    /// drained after the exit record still match.
    pub fn handle_exit(&mut self, pid: u32, tid: u32, time: u64) {
        let process = pid == tid;
        let relevant = self.by_tid.contains_key(&tid)
            || self.threads.contains_key(&tid)
            || (process && (self.by_pid.contains_key(&pid) || self.classes.contains_key(&pid)));
        if !relevant {
            return;
        }
        if self.exits.len() >= MAX_PENDING_EXITS {
            self.apply_exits(); // early, rather than unbounded
            self.apply_exits();
        }
        self.exits.push((pid, tid, time, process));
    }

    /// Applies the exits of the previous window; this window's wait for the next.
    fn apply_exits(&mut self) {
        let due = std::mem::replace(&mut self.exits_prev, std::mem::take(&mut self.exits));
        for (pid, tid, time, process) in due {
            let victims: Vec<(u32, u64)> = if process {
                self.by_pid.get(&pid).map_or_else(Vec::new, |m| m.values().copied().collect())
            } else {
                self.by_tid.get(&tid).map_or_else(Vec::new, |m| m.values().map(|&i| (tid, i)).collect())
            };
            for k in victims {
                // A request begun after the exit belongs to a new thread with a reused id.
                if self.open.get(&k).is_some_and(|o| o.begin <= time) {
                    self.remove_open(k);
                    self.stats.abandoned_open += 1;
                }
            }
            if process {
                if let Some(m) = self.classes.remove(&pid) {
                    self.class_labels -= m.len();
                }
            }
            // Every thread has its own exit record: forget its current request (unless a
            // request begun after the exit made a new thread with the id current).
            if self.threads.get(&tid).is_some_and(|t| t.current.is_none_or(|k| !self.open.contains_key(&k))) {
                self.threads.remove(&tid);
            }
        }
    }

    fn remove_open(&mut self, key: (u32, u64)) -> Option<Open> {
        let o = self.open.remove(&key)?;
        self.slices -= o.slices.len();
        if self.by_pid_id.get(&(o.pid, key.1)) == Some(&key) {
            self.by_pid_id.remove(&(o.pid, key.1));
        }
        // The thread it was current on has none now (its interval is not needed: the
        // request is gone).
        if let Some(on) = o.current_on {
            match self.threads.get_mut(&on) {
                Some(t) if t.current == Some(key) && t.switching => t.current = None,
                // Begin/end rules: nothing to follow until its next request.
                Some(t) if t.current == Some(key) => {
                    self.threads.remove(&on);
                }
                _ => {}
            }
        }
        if let Some(m) = self.by_tid.get_mut(&key.0) {
            m.remove(&o.seq);
            if m.is_empty() {
                self.by_tid.remove(&key.0);
            }
        }
        if let Some(m) = self.by_pid.get_mut(&o.pid) {
            m.remove(&o.seq);
            if m.is_empty() {
                self.by_pid.remove(&o.pid);
            }
        }
        self.order.remove(&o.seq);
        Some(o)
    }

    fn begin(&mut self, m: &Marker, comm: &str) {
        let key = (m.tid, m.item);
        if self.remove_open(key).is_some() {
            self.stats.abandoned_open += 1;
        }
        let proc_full = self.by_pid.get(&m.pid).is_some_and(|x| x.len() >= MAX_OPEN_PER_PROCESS);
        let oldest = if proc_full {
            self.by_pid.get(&m.pid).and_then(|x| x.values().next().copied())
        } else if self.open.len() >= MAX_OPEN {
            self.order.values().next().copied()
        } else {
            None
        };
        if let Some(k) = oldest {
            self.remove_open(k);
            self.stats.evicted_open += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_tid.entry(m.tid).or_default().insert(seq, m.item);
        self.by_pid.entry(m.pid).or_default().insert(seq, key);
        self.order.insert(seq, key);
        self.by_pid_id.insert((m.pid, m.item), key);
        self.open.insert(
            key,
            Open {
                seq,
                begin: m.time,
                pid: m.pid,
                class: m.class,
                comm: Arc::from(comm),
                trace: None,
                switched: false,
                current_on: None,
                resumes: 0,
                slices: Vec::new(),
            },
        );
        self.set_current(m.tid, Some(key), m.time);
    }

    /// Thread `tid` now works on request `key` (`None`: none) from `time` on; the interval
    /// of its previous current request is kept when the thread has switch markers.
    fn set_current(&mut self, tid: u32, key: Option<(u32, u64)>, time: u64) {
        if !self.threads.contains_key(&tid) {
            if key.is_none() {
                return;
            }
            if self.threads.len() >= MAX_THREADS {
                self.stats.threads_untracked += 1;
                return;
            }
            self.threads.insert(tid, ThreadCur { switching: false, current: None, since: time });
        }
        let Some(th) = self.threads.get_mut(&tid) else { return };
        let (old, since, switching) = (th.current, th.since, th.switching);
        th.current = key;
        th.since = time;
        if !switching && key.is_none() {
            // Begin/end rules: nothing to follow until its next request.
            self.threads.remove(&tid);
        }
        if let (true, Some(old)) = (switching, old) {
            if let Some(o) = self.open.get_mut(&old) {
                o.switched = true;
                if time > since {
                    if o.slices.len() >= MAX_SLICES_PER_REQUEST || self.slices >= MAX_SLICES {
                        self.stats.slices_dropped += 1;
                    } else {
                        o.slices.push((tid, since, time));
                        self.slices += 1;
                    }
                }
            }
        }
        if let Some(o) = key.and_then(|k| self.open.get_mut(&k)) {
            o.current_on = Some(tid);
            if switching {
                o.switched = true;
                o.resumes += 1;
            }
        }
    }

    /// Thread `tid` gets a switch marker: from now on its samples go to its current request.
    fn start_switching(&mut self, tid: u32, time: u64) {
        if !self.threads.contains_key(&tid) {
            if self.threads.len() >= MAX_THREADS {
                self.stats.threads_untracked += 1;
                return;
            }
            self.threads.insert(tid, ThreadCur { switching: true, current: None, since: time });
            return;
        }
        let Some(th) = self.threads.get_mut(&tid) else { return };
        if !th.switching {
            th.switching = true;
            if let Some(o) = th.current.and_then(|k| self.open.get_mut(&k)) {
                o.switched = true;
                o.resumes += 1;
            }
        }
    }

    /// The trace context of an open request (after its begin, on its thread; after switch
    /// markers, of its process).
    pub fn handle_item_trace(&mut self, t: &ItemTrace) {
        let key =
            if self.open.contains_key(&(t.tid, t.item)) { Some((t.tid, t.item)) } else { self.by_pid_id.get(&(t.pid, t.item)).copied() };
        if let Some(o) = key.and_then(|k| self.open.get_mut(&k)) {
            o.trace = Some((t.trace_id, t.span_id));
        }
    }

    pub fn handle_marker(&mut self, m: &Marker, comm: &str) {
        match m.kind {
            MarkerKind::Begin => self.begin(m, comm),
            // Class labels (`--item-class-from`) are applied by the items join.
            MarkerKind::Label => {}
            MarkerKind::Switch => {
                self.start_switching(m.tid, m.time);
                self.match_probes += 1;
                match self.by_pid_id.get(&(m.pid, m.item)).copied() {
                    Some(key) => {
                        let on = self.open.get(&key).and_then(|o| o.current_on);
                        if let Some(on) = on.filter(|&on| on != m.tid) {
                            if self.threads.get(&on).is_some_and(|t| t.current == Some(key)) {
                                // Current on one thread at a time: it left the other one.
                                self.set_current(on, None, m.time);
                            }
                        }
                        self.set_current(m.tid, Some(key), m.time);
                    }
                    None => {
                        self.stats.switch_unknown += 1;
                        self.set_current(m.tid, None, m.time);
                    }
                }
            }
            MarkerKind::SwitchNone => {
                self.start_switching(m.tid, m.time);
                self.set_current(m.tid, None, m.time);
            }
            MarkerKind::End => {
                self.match_probes += 1;
                let key = if m.item == Marker::UNKNOWN_ITEM {
                    // the innermost open request of the thread
                    self.by_tid.get(&m.tid).and_then(|x| x.values().next_back()).map(|&item| (m.tid, item))
                } else if self.open.contains_key(&(m.tid, m.item)) {
                    Some((m.tid, m.item))
                } else {
                    // begun on another thread (a task that moved)
                    self.by_pid_id.get(&(m.pid, m.item)).copied()
                };
                let Some(key) = key.filter(|k| self.open.contains_key(k)) else {
                    self.stats.unmatched_ends += 1;
                    return;
                };
                // The thread it is current on: none current now (switch markers), or,
                // with begin/end rules, the innermost request still open.
                let on = self.open.get(&key).and_then(|o| o.current_on);
                let on = on.filter(|on| self.threads.get(on).is_some_and(|t| t.current == Some(key)));
                let switching = on.is_some_and(|on| self.threads.get(&on).is_some_and(|t| t.switching));
                if let (Some(on), true) = (on, switching) {
                    self.set_current(on, None, m.time);
                }
                let Some(o) = self.remove_open(key) else { return };
                if let (Some(on), false) = (on, switching) {
                    let next = self.by_tid.get(&on).and_then(|x| x.values().next_back()).map(|&item| (on, item));
                    self.set_current(on, next, m.time);
                }
                let class_id = if m.class != 0 { m.class } else { o.class };
                self.finish(key.0, key.1, &o, class_id, m.time);
            }
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
        let spans: Vec<(u32, u64, u64)> = if o.switched { o.slices.clone() } else { vec![(tid, o.begin, end)] };
        let mut stacks: HashMap<&[(u32, u64)], u64> = HashMap::new();
        let (mut samples, mut on_cpu) = (0u64, 0u64);
        for &(t, b, e) in &spans {
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
            // Off CPU while current (switched), else over its wall time.
            off_cpu_ns: switching.map_or(dur, |s| s.current_ns).saturating_sub(on_cpu),
            explanation: String::new(),
            trace_id: o.trace.map(|t| hex(&t.0)).unwrap_or_default(),
            span_id: o.trace.map(|t| hex(&t.1)).unwrap_or_default(),
        };
        self.retained.push(Retained { row, stacks, causes, switching });
    }

    /// The window's retained requests (explanations with build-ids filled in) and
    /// latency histogram rows. Drops the open requests of threads that exited in the
    /// previous window.
    pub fn take_window(&mut self, start: i64, end: i64, build_id: &dyn Fn(u32) -> Option<String>) -> (Vec<ItemRow>, Vec<LatencyRow>) {
        self.apply_exits();
        let mut items = Vec::new();
        let frames_of = |frames: &[(u32, u64)]| -> Vec<StoreFrame> {
            frames
                .iter()
                .map(|&(b, offset)| StoreFrame {
                    build_id: match b {
                        u32::MAX => String::new(),
                        x if x == u32::MAX - 1 => KERNEL_BUILD_ID.to_string(),
                        x if x == u32::MAX - 2 => String::new(),
                        x => build_id(x).unwrap_or_default(),
                    },
                    offset,
                })
                .collect()
        };
        for Retained { mut row, mut stacks, causes, switching } in std::mem::take(&mut self.retained) {
            stacks.sort_by_key(|s| std::cmp::Reverse(s.0));
            // docs/STORE.md, "items".
            let doc = ItemExplanation {
                stacks: stacks.iter().take(50).map(|(n, frames)| StoredStack { samples: *n, frames: frames_of(frames) }).collect(),
                woken_by: causes
                    .woken_by
                    .iter()
                    .map(|w| StoredWaker {
                        ns: w.waker.ns,
                        pid: w.waker.pid,
                        tid: w.waker.tid,
                        comm: w.comm.to_string(),
                        item: w.item,
                        frames: frames_of(&w.frames),
                        during: w
                            .during
                            .iter()
                            .map(|(state, ns, frames)| StoredDuring {
                                state: match state {
                                    PathState::Cpu => StoredState::Cpu,
                                    PathState::Blocked => StoredState::Blocked,
                                    PathState::Runnable => StoredState::Runnable,
                                },
                                ns: *ns,
                                frames: frames_of(frames),
                            })
                            .collect(),
                    })
                    .collect(),
                preempted_by: causes
                    .preempted_by
                    .iter()
                    .map(|(p, comm)| StoredPreempter { ns: p.ns, pid: p.pid, tid: p.tid, comm: comm.to_string() })
                    .collect(),
                switching,
            };
            row.explanation = doc.to_json();
            items.push(row);
        }
        let mut latency: Vec<LatencyRow> = std::mem::take(&mut self.hist)
            .into_iter()
            .map(|((ci, le), count)| LatencyRow {
                window_start_us: start,
                window_end_us: end,
                class: self.class_names[ci as usize].clone(),
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
        Marker { time: t, pid: 1, tid: 2, kind, item, class: 0, source: MarkerSource::default() }
    }

    #[test]
    fn keeps_only_slow_requests() {
        let mut r = TailRetainer::new(None, 99.0);
        for i in 0..50u64 {
            let t = i * 10_000_000;
            r.handle_marker(&mk(MarkerKind::Begin, t, i), "srv");
            r.handle_marker(&mk(MarkerKind::End, t + 1_000_000, i), "srv");
        }
        let s = Sample { time: 600_000_000, tid: 2, pid: 1, period: 1_000_000, ..Default::default() };
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

    fn marker(kind: MarkerKind, t: u64, pid: u32, tid: u32, item: u64) -> Marker {
        Marker { time: t, pid, tid, kind, item, class: 0, source: MarkerSource::default() }
    }

    /// MAX_OPEN requests open at once (16 processes, 41 threads each, 50 nested requests
    /// per thread), all ended without their id: every end examines one entry, where a
    /// scan of the open requests would examine ~n²/2 = 5·10⁸.
    #[test]
    fn unknown_item_ends_take_linear_work_with_max_open() {
        let mut r = TailRetainer::new(None, 0.0);
        let n = MAX_OPEN as u64;
        for i in 0..n {
            let (pid, tid) = ((i / 2048) as u32 + 1, (i / 50) as u32 + 1000);
            r.handle_marker(&marker(MarkerKind::Begin, i, pid, tid, i), "srv");
        }
        assert_eq!(r.open_requests(), n as usize);
        assert_eq!(r.stats.evicted_open, 0);
        for i in 0..n {
            let (pid, tid) = ((i / 2048) as u32 + 1, (i / 50) as u32 + 1000);
            r.handle_marker(&marker(MarkerKind::End, n + i, pid, tid, Marker::UNKNOWN_ITEM), "srv");
        }
        assert_eq!((r.stats.requests, r.stats.unmatched_ends), (n, 0));
        assert_eq!(r.open_requests(), 0);
        assert!(r.match_probes <= 2 * n, "{} probes for {n} ends", r.match_probes);
        // and with ids, in an order unrelated to the begins
        for i in 0..n {
            r.handle_marker(&marker(MarkerKind::Begin, i, 1 + (i % 7) as u32, 5, i), "srv");
        }
        let before = r.match_probes;
        for i in (0..n).rev().step_by(2).chain((0..n).step_by(2)) {
            r.handle_marker(&marker(MarkerKind::End, n + i, 1 + (i % 7) as u32, 5, i), "srv");
        }
        // 7 processes × MAX_OPEN_PER_PROCESS: the per-process bound evicted the oldest of each
        let evicted = r.stats.evicted_open;
        assert_eq!(evicted, n - 7 * MAX_OPEN_PER_PROCESS as u64);
        assert_eq!(r.stats.requests, n + (n - evicted));
        assert_eq!(r.stats.unmatched_ends, evicted);
        assert!(r.match_probes - before <= 2 * n);
    }

    #[test]
    fn an_end_without_id_ends_the_innermost_request() {
        let mut r = TailRetainer::new(Some(1), 0.0);
        r.handle_marker(&marker(MarkerKind::Begin, 10, 1, 2, 100), "srv");
        r.handle_marker(&marker(MarkerKind::Begin, 20, 1, 2, 200), "srv");
        r.handle_marker(&marker(MarkerKind::Begin, 25, 1, 3, 300), "srv");
        r.handle_marker(&marker(MarkerKind::End, 30, 1, 2, Marker::UNKNOWN_ITEM), "srv");
        r.handle_marker(&marker(MarkerKind::End, 40, 1, 2, Marker::UNKNOWN_ITEM), "srv");
        r.handle_marker(&marker(MarkerKind::End, 50, 1, 2, Marker::UNKNOWN_ITEM), "srv");
        let (items, _) = r.take_window(0, 1, &|_| None);
        let ids: Vec<u64> = items.iter().map(|i| i.item_id).collect();
        assert_eq!(ids, [200, 100]);
        assert_eq!(r.stats.unmatched_ends, 1);
        assert_eq!(r.open_requests(), 1, "thread 3's request is untouched");
    }

    #[test]
    fn bounds_evict_and_count() {
        // per process: the oldest goes
        let mut r = TailRetainer::new(None, 0.0);
        let n = MAX_OPEN_PER_PROCESS as u64 + 5;
        for i in 0..n {
            r.handle_marker(&marker(MarkerKind::Begin, i, 9, 9, i), "leaky");
        }
        assert_eq!((r.open_requests(), r.stats.evicted_open), (MAX_OPEN_PER_PROCESS, 5));
        r.handle_marker(&marker(MarkerKind::End, n, 9, 9, 0), "leaky");
        r.handle_marker(&marker(MarkerKind::End, n, 9, 9, 5), "leaky");
        assert_eq!((r.stats.unmatched_ends, r.stats.requests), (1, 1));
        // a thread that exits with requests open: dropped at the next window, counted
        r.handle_marker(&marker(MarkerKind::Begin, n, 9, 10, 1), "leaky");
        r.handle_exit(9, 10, n + 1);
        assert_eq!(r.open_requests(), MAX_OPEN_PER_PROCESS);
        r.take_window(0, 1, &|_| None);
        assert_eq!(r.open_requests(), MAX_OPEN_PER_PROCESS, "kept for one more window");
        r.take_window(1, 2, &|_| None);
        assert_eq!((r.stats.abandoned_open, r.open_requests()), (1, MAX_OPEN_PER_PROCESS - 1));
        // the process exits: all of its requests go
        r.handle_exit(9, 9, n + 2);
        r.take_window(2, 3, &|_| None);
        r.take_window(3, 4, &|_| None);
        assert_eq!(r.open_requests(), 0);
        assert_eq!(r.stats.abandoned_open, MAX_OPEN_PER_PROCESS as u64);
        // a begin of an item already open replaces it
        r.handle_marker(&marker(MarkerKind::Begin, 1, 4, 4, 1), "x");
        r.handle_marker(&marker(MarkerKind::Begin, 2, 4, 4, 1), "x");
        assert_eq!((r.open_requests(), r.stats.abandoned_open), (1, MAX_OPEN_PER_PROCESS as u64 + 1));
        // in all: MAX_OPEN over many processes
        let mut r = TailRetainer::new(None, 0.0);
        for i in 0..MAX_OPEN as u64 + 3 {
            r.handle_marker(&marker(MarkerKind::Begin, i, (i / 1000) as u32, i as u32, 1), "x");
        }
        assert_eq!((r.open_requests(), r.stats.evicted_open), (MAX_OPEN, 3));
    }

    #[test]
    fn classes_beyond_the_bound_are_counted_as_other() {
        let mut r = TailRetainer::new(None, 0.0);
        let extra = 10u32;
        for c in 1..=MAX_CLASSES as u32 + extra {
            r.handle_class(&ItemClass { time: 0, pid: 1, id: c, name: format!("q{c}") });
            let mut b = marker(MarkerKind::Begin, 0, 1, 2, c as u64);
            b.class = c;
            r.handle_marker(&b, "db");
            r.handle_marker(&marker(MarkerKind::End, 5, 1, 2, c as u64), "db");
        }
        let (_, lat) = r.take_window(0, 1, &|_| None);
        assert_eq!(r.stats.requests_in_other_class, extra as u64);
        let other: u64 = lat.iter().filter(|l| l.class == OTHER_CLASS).map(|l| l.count).sum();
        assert_eq!(other, extra as u64);
        assert_eq!(lat.iter().map(|l| l.count).sum::<u64>(), (MAX_CLASSES as u32 + extra) as u64);
        assert_eq!(lat.iter().filter(|l| l.class != OTHER_CLASS).count(), MAX_CLASSES);
    }

    #[test]
    fn kept_samples_are_bounded_by_frames() {
        let mut r = TailRetainer::new(None, 0.0);
        let frames: Vec<(u32, u64)> = (0..128).map(|i| (0, i)).collect();
        let n = MAX_KEPT_FRAMES / 128 + 100;
        for i in 0..n as u64 {
            let s = Sample { time: i, tid: 1, pid: 1, period: 1, ..Default::default() };
            r.handle_sample(&s, &frames);
        }
        assert!(r.kept_frames <= MAX_KEPT_FRAMES);
        assert_eq!(r.kept.len(), MAX_KEPT_FRAMES / 128);
        assert_eq!(r.stats.kept_samples_evicted, 100);
    }
}
