//! The join: markers (or a tagged register) + samples → per-item, per-location counts.
//!
//! [`ItemsJoin`] is a [`tailprof_format::Sink`]. Marker mode rules, per thread (tid):
//!
//! - `Begin` pushes a new open item on the thread's stack (nesting allowed).
//! - `End` with an id closes the innermost open item with that id on the thread,
//!   wherever it is in the stack (so interleaved items on one thread work); `End` with
//!   [`Marker::UNKNOWN_ITEM`] closes the most recent one. An end that matches nothing
//!   is counted in `unmatched_markers`.
//!
//! Matching is linear in the markers, whatever a (hostile) target writes: an item closed
//! below the top of its thread's stack is only marked closed (popped once everything
//! above it is closed), the lowest [`SHALLOW`] stack positions are scanned, and items
//! pushed above them are found through a map from (thread, id) to the innermost such
//! item, which links to the next one with the same id.
//! - A sample of the selected event belongs to the innermost open item of its thread,
//!   otherwise it is counted as outside.
//! - Items still open when the trace ends are closed at the trace's last timestamp,
//!   flagged `open_at_end`, and counted in `unmatched_markers`.
//!
//! Switch markers (docs/MARKERS.md, "Switch markers"): every thread has a *current* item.
//! `Begin` makes the new item current, `Switch` makes the open item of that (pid, id)
//! current (whichever thread began it: a task moves between threads), `SwitchNone` makes
//! no item current, `End` of the current item leaves none current. Once a thread has had
//! a switch marker, its samples go to its current item (none current: outside, counted in
//! `switching.loop_samples`), not to the innermost open one; the item's current
//! intervals ([`super::CurrentSlice`]) give its current time, and wall time not current
//! is its own state (`waiting_in_loop_ns`). Threads without switch markers keep the stack
//! rules above; where their items overlap (an end below the top of the stack), the items
//! and samples concerned are reported as ambiguous. An item can be current on one thread
//! at a time: a switch to it on another thread ends its current interval on the first.
//! Ends and switches find items of other threads through a (pid, id) index, built at the
//! first switch marker (traces without switch markers never pay for it).
//!
//! Register mode (`TraceHeader.extra["item_reg"]`): the item id is the value of that
//! register in the sample's `regs` (its index is the register bit's position among the
//! set bits of the event's `regs_user_mask`), 0 meaning outside; items are keyed by
//! (pid, id) and may span threads; wall time is first..last sample.
//!
//! Goroutine mode (`TraceHeader.extra["item_key"]` = `goroutine:r14`, probes on a Go
//! binary): markers carry the goroutine (`g`, R14 at the probe) as their `item`, and
//! samples carry R14 in `regs`. The marker rules above apply per (pid, g) instead of per
//! thread, so an item follows its goroutine from thread to thread; a sample belongs to
//! the innermost open item of its (pid, R14). Items are numbered 1, 2, ... in begin
//! order (a `g` is reused by later goroutines). Per OS thread, the join follows which
//! goroutine runs there (samples, probes, and R14 at switch-outs, `Switch::item_key`);
//! the runs become the items' current slices, which decide whose a thread's off-CPU
//! time is (docs/PROBES.md, "Go programs").
//!
//! Per-sample cost: a one-entry thread cache (else an FxHashMap lookup), the top of the
//! thread's stack, [`Resolver::loc`], and a bump in the open item's accumulator, a small
//! FxHashMap from location to slot that is cleared and reused when the item closes.
//!
//! [`ItemsJoin`] is the [`Resolved`] adapter around the join's state ([`JoinState`]):
//! the adapter keeps the address spaces current, the join only counts.

use rustc_hash::FxHashMap;
use tailprof_format::{EventAt, ItemClass, ItemEvent, ItemTrace, LossKind, Lost, Marker, MarkerKind, Sample, Switch, TraceHeader};

use super::anomaly::flag_anomalies;
use super::estimate::{period_interval_ns, Acc, IntervalMeter};
use super::events::EventsAcc;
use super::{Estimator, ItemFunction, ItemRow, ItemsOptions, ItemsReport};
use crate::profile::event_name;
use crate::resolve::{LocId, Resolved, ResolvedSink, Resolver};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

/// Register names in perf's x86-64 `sample_regs_user` bit order.
const X86_64_REGS: [&str; 24] = [
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss", "ds", "es", "fs", "gs", "r8", "r9", "r10", "r11", "r12",
    "r13", "r14", "r15",
];

/// perf's `sample_regs_user` bit of an x86-64 register name (`r13`, `rdi`, `di`, ...).
pub fn reg_bit(name: &str) -> Option<u32> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix('%').unwrap_or(&n);
    if let Some(i) = X86_64_REGS.iter().position(|r| *r == n) {
        return Some(i as u32);
    }
    // rax, rdi, ... spell the 64-bit names of ax, di, ...; rip, rflags likewise.
    let short = n.strip_prefix('r')?;
    X86_64_REGS[..16].iter().position(|r| *r == short).map(|i| i as u32)
}

/// An item being joined.
#[derive(Debug, Clone)]
struct ItemState {
    pid: u32,
    tid: u32,
    id: u64,
    class: u32,
    begin: u64,
    end: u64,
    samples: u64,
    first_sample: u64,
    last_sample: u64,
    open_at_end: bool,
    /// Range of `closed` holding the item's per-location counts once closed.
    rows: (u32, u32),
    /// Still on its thread's stack and not ended (marker mode).
    open: bool,
    /// Its live accumulator while open.
    live: u32,
    /// Pushed at a stack position >= [`SHALLOW`], so indexed in `JoinState::deep_ids`.
    deep: bool,
    /// The next deep open item with the same (thread, id) below this one, or [`NO_ITEM`].
    prev_same_id: u32,
    /// Index of the thread that began it (whose stack holds it).
    thread: u32,
    /// Driven by switch markers: its current intervals are recorded.
    switched: bool,
    /// The thread it was last made current on, or [`NO_ITEM`].
    current_on: u32,
    /// Times it became current.
    resumes: u64,
    /// Samples counted while its thread's stack held another entry (classic mode).
    stacked_samples: u64,
    /// Ended while not at the top of its thread's stack (classic mode): an overlap.
    ended_below_top: bool,
    /// Index of its trace context in `JoinState::traces`, or [`NO_ITEM`].
    trace: u32,
    /// Goroutine mode: its goroutine was seen on threads (its runs are in `slices`).
    go_runs: bool,
}

/// Stack positions below this are found by a scan; items pushed above are indexed.
pub const SHALLOW: usize = 8;
/// "No item" in `ItemState::prev_same_id`.
const NO_ITEM: u32 = u32::MAX;

/// Per-location counts of one open item (reused across items). Marker mode indexes
/// rows by a dense array over location ids (few items are open at once, so few of
/// these exist); register mode, where every item stays open, by a small hash map.
#[derive(Debug, Default)]
struct Live {
    /// Row + 1 per location id, 0 = none (marker mode).
    dense: Vec<u32>,
    index: FxHashMap<LocId, u32>,
    rows: Vec<(LocId, Acc)>,
}

/// Size of the direct-mapped tid → thread cache.
const TID_CACHE: usize = 64;

#[derive(Debug, Default)]
struct Thread {
    /// (item index, live accumulator index), innermost last. The top is always open;
    /// entries below may be closed already (see the module docs).
    stack: Vec<(u32, u32)>,
    last_sample: u64,
    /// A class from a [`MarkerKind::Label`] seen while no item was open: it labels the
    /// next item this thread begins.
    pending_class: u32,
    tid: u32,
    /// Has had a switch marker: samples go to `current`.
    switching: bool,
    /// The thread's current item ([`NO_ITEM`]: none), current since `since`.
    current: u32,
    since: u64,
    /// Ends below the top of the stack (overlapping items without switch markers).
    overlaps: u64,
    /// Open items on `stack`.
    open_items: u32,
    /// The boundary group this OS thread is in: the records of one hit of a boundary
    /// probe (its begin or end marker, and the `--item-event`s at the same site).
    group: Group,
    /// Names of the boundary events given to the group's item so far.
    group_names: Vec<String>,
    /// Events at the begin probe seen before their begin marker (at most [`MAX_PENDING`]).
    pending: Vec<ItemEvent>,
    /// Goroutine mode: the goroutine (`g`) last seen on this OS thread (0: none yet).
    go_g: u64,
    /// Goroutine mode: (item, first, last time) its goroutine has been seen on this OS
    /// thread without another goroutine seen in between.
    run: Option<(u32, u64, u64)>,
    /// Goroutine mode: the item of the goroutine this OS thread went off CPU running
    /// (`Switch::item_key` of its last switch-out; [`NO_ITEM`]: none), until the switch-in.
    off_item: Option<u32>,
}

/// See [`Thread::group`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Group {
    #[default]
    None,
    /// After the begin marker of this item.
    Begin(u32),
    /// After the end marker of this item.
    End(u32),
    /// Begin-probe events wait for their marker (`Thread::pending`).
    Pending,
}

/// Begin-probe events held per thread until their begin marker.
const MAX_PENDING: usize = 16;

impl Thread {
    fn new(tid: u32) -> Thread {
        Thread { tid, current: NO_ITEM, ..Thread::default() }
    }
}

/// Register-mode state.
#[derive(Debug)]
struct RegMode {
    name: String,
    /// Index of the register in `Sample::regs`.
    index: usize,
    items: FxHashMap<(u32, u64), (u32, u32)>,
    last: Option<(u32, u64, u32, u32)>,
}

/// Goroutine-mode state: (pid, g) → its entry in `JoinState::threads`.
#[derive(Debug)]
struct KeyMode {
    name: String,
    /// Index of the key register in `Sample::regs`.
    index: usize,
    strands: FxHashMap<(u32, u64), u32>,
    next_id: u64,
}

/// The join, a [`tailprof_format::Sink`]; see the module docs.
pub type ItemsJoin = Resolved<JoinState>;

/// The join's state, fed resolved samples by [`ItemsJoin`].
#[derive(Debug)]
pub struct JoinState {
    opts: ItemsOptions,
    event: u16,
    event_name: String,
    fixed_interval: Option<f64>,
    threads: Vec<Thread>,
    thread_index: FxHashMap<u32, u32>,
    /// Direct-mapped cache of `thread_index` by `tid % TID_CACHE` (tid, index + 1).
    tid_cache: [(u32, u32); TID_CACHE],
    items: Vec<ItemState>,
    lives: Vec<Live>,
    free_lives: Vec<u32>,
    closed: Vec<(LocId, Acc)>,
    classes: FxHashMap<(u32, u32), String>,
    /// (thread index, item id) → innermost open item of that id pushed at a stack
    /// position >= [`SHALLOW`].
    deep_ids: FxHashMap<(u32, u64), u32>,
    reg: Option<RegMode>,
    key: Option<KeyMode>,
    meter: IntervalMeter,
    outside: u64,
    total: u64,
    markers: u64,
    unmatched: u64,
    lost_markers: u64,
    last_time: u64,
    /// A switch marker was seen: `by_id` is maintained.
    any_switch: bool,
    /// (pid, id) → the most recently begun open item with that id (after `any_switch`).
    by_id: FxHashMap<(u32, u64), u32>,
    /// (item, tid, from, to): intervals switched items were current.
    slices: Vec<(u32, u32, u64, u64)>,
    switching: super::SwitchStats,
    /// Events of the items that have any (`--item-event`), by item index.
    events: FxHashMap<u32, EventsAcc>,
    item_events: u64,
    item_events_outside: u64,
    /// Trace contexts (trace id, span id) of items, indexed by `ItemState::trace`.
    traces: Vec<([u8; 16], [u8; 8])>,
}

impl Resolved<JoinState> {
    /// A join for `header`'s trace. Fails if `opts.event` names no event.
    pub fn new(header: &TraceHeader, opts: &ItemsOptions) -> Result<Self, AnalyzeError> {
        let event = opts.event.unwrap_or(0);
        if !header.events.is_empty() && event as usize >= header.events.len() {
            return Err(AnalyzeError::NoSuchEvent {
                spec: event.to_string(),
                available: header.events.iter().map(|e| e.name.clone()).collect(),
            });
        }
        let ev = header.events.get(event as usize);
        let reg = header.extra.get("item_reg").and_then(|name| {
            let bit = reg_bit(name)?;
            let mask = ev.map_or(0, |e| e.regs_user_mask);
            (mask & (1 << bit) != 0).then(|| RegMode {
                name: name.trim().to_owned(),
                index: (mask & ((1u64 << bit) - 1)).count_ones() as usize,
                items: FxHashMap::default(),
                last: None,
            })
        });
        let key = header.extra.get("item_key").and_then(|k| {
            let name = k.strip_prefix("goroutine:")?;
            let bit = reg_bit(name)?;
            let mask = ev.map_or(0, |e| e.regs_user_mask);
            (mask & (1 << bit) != 0).then(|| KeyMode {
                name: name.trim().to_owned(),
                index: (mask & ((1u64 << bit) - 1)).count_ones() as usize,
                strands: FxHashMap::default(),
                next_id: 0,
            })
        });
        let state = JoinState {
            opts: opts.clone(),
            event,
            event_name: event_name(header, event),
            fixed_interval: ev.and_then(period_interval_ns),
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
            tid_cache: [(0, 0); TID_CACHE],
            items: Vec::new(),
            lives: Vec::new(),
            free_lives: Vec::new(),
            closed: Vec::new(),
            classes: FxHashMap::default(),
            deep_ids: FxHashMap::default(),
            reg,
            key,
            meter: IntervalMeter::default(),
            outside: 0,
            total: 0,
            markers: 0,
            unmatched: 0,
            lost_markers: 0,
            last_time: 0,
            any_switch: false,
            by_id: FxHashMap::default(),
            slices: Vec::new(),
            switching: super::SwitchStats::default(),
            events: FxHashMap::default(),
            item_events: 0,
            item_events_outside: 0,
            traces: Vec::new(),
        };
        Ok(Resolved::wrap(header, state))
    }

    /// Close what is still open, symbolize, estimate, flag anomalies.
    pub fn finish(self, symbolizer: &mut Symbolizer) -> Result<ItemsReport, AnalyzeError> {
        let (state, resolver) = self.into_parts();
        state.finish(&resolver, symbolizer)
    }
}

impl JoinState {
    #[inline]
    fn thread(&mut self, tid: u32) -> usize {
        let c = &mut self.tid_cache[tid as usize % TID_CACHE];
        if c.0 == tid && c.1 != 0 {
            return c.1 as usize - 1;
        }
        let next = self.threads.len() as u32;
        let i = *self.thread_index.entry(tid).or_insert(next);
        if i == next {
            self.threads.push(Thread::new(tid));
        }
        *c = (tid, i + 1);
        i as usize
    }

    /// Goroutine mode: the entry of (pid, g) in `threads`, made when `create`.
    fn strand(&mut self, pid: u32, g: u64, create: bool) -> Option<usize> {
        let key = self.key.as_mut()?;
        if let Some(&t) = key.strands.get(&(pid, g)) {
            return Some(t as usize);
        }
        if !create {
            return None;
        }
        let t = self.threads.len() as u32;
        key.strands.insert((pid, g), t);
        self.threads.push(Thread::default());
        Some(t as usize)
    }

    /// Goroutine mode: OS thread `tt` was seen running `item`'s goroutine at `time`
    /// ([`NO_ITEM`]: a goroutine of no open item, or the scheduler). A run of one item
    /// grows until another goroutine is seen on the thread; closed runs become the item's
    /// current slices (off-CPU time of the thread inside a run counts for the item).
    fn observe(&mut self, tt: usize, item: u32, time: u64) {
        let th = &mut self.threads[tt];
        match th.run {
            Some((i, from, _)) if i == item => th.run = Some((i, from, time)),
            prev => {
                th.run = (item != NO_ITEM).then_some((item, time, time));
                let tid = th.tid;
                if let Some((i, from, to)) = prev {
                    self.slices.push((i, tid, from, to));
                }
                if item != NO_ITEM {
                    self.items[item as usize].go_runs = true;
                }
            }
        }
    }

    /// Goroutine mode: a context switch of an OS thread. A switch-out that carries the
    /// goroutine register (`Switch::item_key`) is an exact observation of the goroutine
    /// the thread runs at that instant, and the thread resumes where it stopped, so the
    /// switch-in is one of the same goroutine: the off-CPU interval in between lies
    /// inside a run of that goroutine's item, and of no other (docs/PROBES.md). Switches
    /// without it change nothing (the runs of samples and probes alone decide).
    fn go_switch(&mut self, s: &Switch) {
        let tt = self.thread(s.tid);
        if s.kind.is_out() {
            let Some(g) = s.item_key else {
                self.threads[tt].off_item = None;
                return;
            };
            self.threads[tt].go_g = g;
            let strand = self.strand(s.pid, g, false);
            let item = strand.and_then(|st| self.threads[st].stack.last()).map_or(NO_ITEM, |&(i, _)| i);
            self.observe(tt, item, s.time);
            self.threads[tt].off_item = Some(item);
        } else if let Some(item) = self.threads[tt].off_item.take() {
            let item = if self.items.get(item as usize).is_some_and(|it| it.open) { item } else { NO_ITEM };
            self.observe(tt, item, s.time);
        }
    }

    /// Goroutine mode: the run on OS thread `tt` ends (its item ended there).
    fn end_run(&mut self, tt: usize) {
        let th = &mut self.threads[tt];
        if let Some((i, from, to)) = th.run.take() {
            let tid = th.tid;
            self.slices.push((i, tid, from, to));
        }
    }

    /// Begin-probe events that waited for a marker that did not come: outside.
    fn drop_pending(&mut self, tt: usize) {
        let th = &mut self.threads[tt];
        self.item_events_outside += th.pending.len() as u64;
        th.pending.clear();
        th.group = Group::None;
        th.group_names.clear();
    }

    fn add_event(&mut self, item: u32, e: &ItemEvent) {
        self.events.entry(item).or_default().add(e);
    }

    fn take_live(&mut self) -> u32 {
        if let Some(i) = self.free_lives.pop() {
            return i;
        }
        self.lives.push(Live::default());
        (self.lives.len() - 1) as u32
    }

    fn new_item(&mut self, pid: u32, tid: u32, id: u64, class: u32, time: u64) -> u32 {
        self.items.push(ItemState {
            pid,
            tid,
            id,
            class,
            begin: time,
            end: time,
            samples: 0,
            first_sample: 0,
            last_sample: 0,
            open_at_end: false,
            rows: (0, 0),
            open: false,
            live: 0,
            deep: false,
            prev_same_id: NO_ITEM,
            thread: NO_ITEM,
            switched: false,
            current_on: NO_ITEM,
            resumes: 0,
            stacked_samples: 0,
            ended_below_top: false,
            trace: NO_ITEM,
            go_runs: false,
        });
        (self.items.len() - 1) as u32
    }

    /// Push a new open item on thread `t`'s stack.
    fn begin_item(&mut self, t: usize, m: &Marker) {
        let item = self.new_item(m.pid, m.tid, m.item, m.class, m.time);
        let live = self.take_live();
        let deep = self.threads[t].stack.len() >= SHALLOW;
        let prev_same_id = if deep { self.deep_ids.insert((t as u32, m.item), item).unwrap_or(NO_ITEM) } else { NO_ITEM };
        let it = &mut self.items[item as usize];
        it.open = true;
        it.live = live;
        it.deep = deep;
        it.prev_same_id = prev_same_id;
        it.thread = t as u32;
        self.threads[t].stack.push((item, live));
        self.threads[t].open_items += 1;
        if self.any_switch {
            self.by_id.insert((m.pid, m.item), item);
        }
        self.set_current(t, item, m.time);
    }

    /// Thread `t` now works on `item` ([`NO_ITEM`]: none) from `time` on. The interval
    /// of its previous current item is recorded when the thread has switch markers.
    fn set_current(&mut self, t: usize, item: u32, time: u64) {
        let th = &mut self.threads[t];
        let (old, since, tid, switching) = (th.current, th.since, th.tid, th.switching);
        th.current = item;
        th.since = time;
        if switching && old != NO_ITEM {
            self.items[old as usize].switched = true;
            if time > since {
                self.slices.push((old, tid, since, time));
            }
        }
        if item != NO_ITEM {
            let it = &mut self.items[item as usize];
            it.current_on = t as u32;
            if switching {
                it.switched = true;
                it.resumes += 1;
            }
        }
    }

    /// Thread `t` gets its first switch marker: from now on its samples go to its
    /// current item. The first switch marker at all builds the (pid, id) index.
    fn start_switching(&mut self, t: usize) {
        if !self.any_switch {
            self.any_switch = true;
            for th in &self.threads {
                for &(item, _) in &th.stack {
                    let it = &self.items[item as usize];
                    if it.open {
                        self.by_id.insert((it.pid, it.id), item);
                    }
                }
            }
        }
        if !self.threads[t].switching {
            self.threads[t].switching = true;
            self.switching.threads += 1;
            let cur = self.threads[t].current;
            if cur != NO_ITEM {
                self.items[cur as usize].switched = true;
                self.items[cur as usize].resumes += 1;
            }
        }
    }

    /// The open item `id` of process `pid`, on any thread (after the first switch).
    fn find_any(&self, pid: u32, id: u64) -> Option<u32> {
        let &item = self.by_id.get(&(pid, id))?;
        self.items[item as usize].open.then_some(item)
    }

    /// The innermost open item of thread `t` an end of `id` closes; O(1) + [`SHALLOW`].
    fn find_open(&self, t: usize, id: u64) -> Option<u32> {
        let stack = &self.threads[t].stack;
        if id == Marker::UNKNOWN_ITEM {
            return stack.last().map(|&(item, _)| item);
        }
        // Deep items are above every shallow one, so a deep match is the innermost.
        if let Some(&item) = self.deep_ids.get(&(t as u32, id)) {
            return Some(item);
        }
        let items = &self.items;
        stack[..stack.len().min(SHALLOW)]
            .iter()
            .rev()
            .find(|&&(i, _)| items[i as usize].open && items[i as usize].id == id)
            .map(|&(item, _)| item)
    }

    /// An end marker closes open item `item` (begun on any thread) at `time`: the thread
    /// it is current on has no current item, or, without switch markers, the innermost
    /// open one; an end below the top of a stack without switches is an overlap.
    fn end_marked(&mut self, item: u32, time: u64) {
        let owner = self.items[item as usize].thread as usize;
        let on = self.items[item as usize].current_on;
        let top = self.threads[owner].stack.last().map(|&(i, _)| i);
        if top != Some(item) && !self.threads[owner].switching && !self.items[item as usize].switched {
            self.threads[owner].overlaps += 1;
            self.items[item as usize].ended_below_top = true;
        }
        if self.any_switch {
            let it = &self.items[item as usize];
            if self.by_id.get(&(it.pid, it.id)) == Some(&item) {
                self.by_id.remove(&(it.pid, it.id));
            }
        }
        let was_current = on != NO_ITEM && self.threads[on as usize].current == item;
        if was_current && self.threads[on as usize].switching {
            self.set_current(on as usize, NO_ITEM, time);
        }
        self.end_item(owner, item, time);
        if was_current && !self.threads[on as usize].switching {
            let next = self.threads[on as usize].stack.last().map_or(NO_ITEM, |&(i, _)| i);
            self.set_current(on as usize, next, time);
        }
    }

    /// Close open item `item` of thread `t` at `time`: unindex it, mark it closed, pop
    /// the closed entries off the top of the stack.
    fn end_item(&mut self, t: usize, item: u32, time: u64) {
        let it = &mut self.items[item as usize];
        it.open = false;
        let live = it.live;
        if it.deep {
            // The item is the innermost deep open one of its id (found through the map,
            // or the top of the stack), i.e. the head of its list.
            let key = (t as u32, it.id);
            match it.prev_same_id {
                NO_ITEM => self.deep_ids.remove(&key),
                prev => self.deep_ids.insert(key, prev),
            };
        }
        self.close(item, live, time);
        self.threads[t].open_items -= 1;
        let items = &self.items;
        let stack = &mut self.threads[t].stack;
        while stack.last().is_some_and(|&(i, _)| !items[i as usize].open) {
            stack.pop();
        }
    }

    /// Move an item's live counts to `closed` and recycle the accumulator.
    fn close(&mut self, item: u32, live: u32, time: u64) {
        let start = self.closed.len() as u32;
        let l = &mut self.lives[live as usize];
        for (loc, _) in &l.rows {
            if let Some(d) = l.dense.get_mut(loc.index()) {
                *d = 0;
            }
        }
        self.closed.append(&mut l.rows);
        l.index.clear();
        self.free_lives.push(live);
        let it = &mut self.items[item as usize];
        it.end = time.max(it.begin);
        it.rows = (start, self.closed.len() as u32);
    }

    #[inline]
    fn count(&mut self, item: u32, live: u32, s: &Sample, resolver: &mut Resolver) {
        let loc = resolver.loc(s);
        let l = &mut self.lives[live as usize];
        let next = l.rows.len() as u32;
        let slot = if self.reg.is_none() {
            let i = loc.index();
            if i >= l.dense.len() {
                l.dense.resize(i + 1, 0);
            }
            if l.dense[i] == 0 {
                l.dense[i] = next + 1;
            }
            l.dense[i] - 1
        } else {
            *l.index.entry(loc).or_insert(next)
        };
        if slot == next {
            l.rows.push((loc, Acc::new(s.time)));
        } else {
            l.rows[slot as usize].1.add(s.time);
        }
        let it = &mut self.items[item as usize];
        if it.samples == 0 {
            it.first_sample = s.time;
        }
        it.samples += 1;
        it.last_sample = s.time;
    }

    #[inline]
    fn register_sample(&mut self, s: &Sample, resolver: &mut Resolver) {
        let reg = self.reg.as_mut().expect("register mode");
        let v = s.regs.get(reg.index).copied().unwrap_or(0);
        if v == 0 {
            self.outside += 1;
            return;
        }
        let (item, live) = match reg.last {
            Some((p, id, item, live)) if p == s.pid && id == v => (item, live),
            _ => {
                let found = reg.items.get(&(s.pid, v)).copied();
                let (item, live) = match found {
                    Some(x) => x,
                    None => {
                        let item = self.new_item(s.pid, s.tid, v, 0, s.time);
                        let live = self.take_live();
                        let reg = self.reg.as_mut().expect("register mode");
                        reg.items.insert((s.pid, v), (item, live));
                        (item, live)
                    }
                };
                self.reg.as_mut().expect("register mode").last = Some((s.pid, v, item, live));
                (item, live)
            }
        };
        self.count(item, live, s, resolver);
    }

    fn finish(mut self, resolver: &Resolver, symbolizer: &mut Symbolizer) -> Result<ItemsReport, AnalyzeError> {
        if self.reg.is_none() && self.markers == 0 {
            return Err(AnalyzeError::NoItems);
        }
        let end = self.last_time;
        if let Some(reg) = self.reg.take() {
            let mut open: Vec<(u32, u32)> = reg.items.values().copied().collect();
            open.sort_unstable();
            for (item, live) in open {
                self.close(item, live, end);
                let it = &mut self.items[item as usize];
                it.begin = it.first_sample;
                it.end = it.last_sample;
            }
            self.reg = Some(reg);
        } else {
            for t in 0..self.threads.len() {
                if self.threads[t].switching {
                    self.set_current(t, NO_ITEM, end);
                }
                self.end_run(t);
                self.drop_pending(t);
            }
            let mut open = Vec::new();
            for t in &mut self.threads {
                open.extend(t.stack.drain(..).filter(|&(i, _)| self.items[i as usize].open));
            }
            open.sort_unstable();
            self.unmatched += open.len() as u64;
            for (item, live) in open {
                self.close(item, live, end);
                self.items[item as usize].open_at_end = true;
            }
        }
        let interval_source = if self.fixed_interval.is_some() { "period" } else { "measured" };
        let interval = self.fixed_interval.or_else(|| self.meter.median()).unwrap_or(0.0);
        let table = resolver.functions(symbolizer);
        let min_rel = self.opts.min_reliable_samples;
        // Fold locations into functions per item, through a reusable dense scratch.
        let mut scratch: Vec<Option<Acc>> = vec![None; table.rows.len()];
        let mut touched: Vec<u32> = Vec::new();
        // Rank of each function by (name, binary): ties in the per-item order compare ints.
        let mut rank = vec![0u32; table.rows.len()];
        let mut by_name: Vec<u32> = (0..table.rows.len() as u32).collect();
        by_name.sort_by(|&a, &b| {
            let (x, y) = (&table.rows[a as usize], &table.rows[b as usize]);
            (&x.name, &x.binary).cmp(&(&y.name, &y.binary))
        });
        for (r, f) in by_name.into_iter().enumerate() {
            rank[f as usize] = r as u32;
        }
        // Current intervals per item, in time order.
        self.slices.sort_unstable_by_key(|&(item, _, from, _)| (item, from));
        let mut slice_at = 0usize;
        let mut ambiguity = super::Ambiguity::default();
        let mut rows = Vec::with_capacity(self.items.len());
        // The classes there are, for the error when `opts.class` names none of them
        // (at most 10 names: the message is one line).
        let mut other_classes: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for (index, it) in self.items.iter().enumerate() {
            let first = slice_at;
            while self.slices.get(slice_at).is_some_and(|s| s.0 as usize == index) {
                slice_at += 1;
            }
            let events = self.events.remove(&(index as u32)).map(|a| a.finish(it.end)).unwrap_or_default();
            let class = match it.class {
                0 => None,
                c => Some(self.classes.get(&(it.pid, c)).cloned().unwrap_or_else(|| format!("class {c}"))),
            };
            if self.opts.class.is_some() && class != self.opts.class {
                if other_classes.len() < 10 {
                    other_classes.insert(class.unwrap_or_else(|| "(no class)".to_owned()));
                }
                continue;
            }
            for (loc, acc) in &self.closed[it.rows.0 as usize..it.rows.1 as usize] {
                let f = table.function_of(*loc);
                match &mut scratch[f as usize] {
                    Some(a) => a.merge(acc),
                    slot @ None => {
                        *slot = Some(*acc);
                        touched.push(f);
                    }
                }
            }
            let e = self.opts.estimator;
            let shown = |a: &Acc| match e {
                Estimator::Span => a.span() as f64,
                Estimator::CountTimesInterval => a.count as f64 * interval,
            };
            let mut accs: Vec<(u32, Acc)> = touched.drain(..).map(|f| (f, scratch[f as usize].take().expect("touched slot"))).collect();
            accs.sort_unstable_by(|(fa, a), (fb, b)| {
                shown(b).total_cmp(&shown(a)).then(b.count.cmp(&a.count)).then(rank[*fa as usize].cmp(&rank[*fb as usize]))
            });
            let functions: Vec<ItemFunction> = accs
                .into_iter()
                .map(|(f, a)| {
                    let info = &table.rows[f as usize];
                    ItemFunction {
                        name: info.name.clone(),
                        binary: info.binary.clone(),
                        samples: a.count,
                        first_ns: a.first,
                        last_ns: a.last,
                        span_ns: a.span(),
                        est_ns: a.count as f64 * interval,
                        reliable: a.count >= min_rel,
                        source: info.source.clone(),
                    }
                })
                .collect();
            let (switching, current) = if it.switched {
                let current: Vec<super::CurrentSlice> = self.slices[first..slice_at]
                    .iter()
                    .filter_map(|&(_, tid, from, to)| {
                        let (b, e) = (from.max(it.begin), to.min(it.end));
                        (e > b).then_some(super::CurrentSlice { tid, begin_ns: b, end_ns: e })
                    })
                    .collect();
                let current_ns: u64 = current.iter().map(|c| c.end_ns - c.begin_ns).sum();
                let mut tids: Vec<u32> = current.iter().map(|c| c.tid).collect();
                tids.sort_unstable();
                tids.dedup();
                let wall = it.end.saturating_sub(it.begin);
                // Wall time covered by no current interval (they may overlap when two
                // threads claimed the item; then `current_ns` exceeds it).
                let mut covered = 0u64;
                let mut reach = it.begin;
                let mut sorted: Vec<(u64, u64)> = current.iter().map(|c| (c.begin_ns, c.end_ns)).collect();
                sorted.sort_unstable();
                for (b, e) in sorted {
                    if e > reach {
                        covered += e - b.max(reach);
                        reach = e;
                    }
                }
                let sw = super::ItemSwitching {
                    current_ns,
                    waiting_in_loop_ns: wall.saturating_sub(covered),
                    resumes: it.resumes,
                    threads: tids.len() as u32,
                };
                (Some(sw), current)
            } else if it.go_runs {
                // Goroutine mode: where its goroutine was seen, per thread (a run seen
                // once is one instant).
                let current = self.slices[first..slice_at]
                    .iter()
                    .filter_map(|&(_, tid, from, to)| {
                        let (b, e) = (from.max(it.begin), to.min(it.end));
                        (e >= b).then_some(super::CurrentSlice { tid, begin_ns: b, end_ns: e })
                    })
                    .collect();
                (None, current)
            } else {
                (None, Vec::new())
            };
            let overlapped = !it.switched && self.threads.get(it.thread as usize).is_some_and(|t| t.overlaps > 0);
            let ambiguous_samples = if overlapped { it.stacked_samples } else { 0 };
            let ambiguous = overlapped && (ambiguous_samples > 0 || it.ended_below_top);
            if ambiguous {
                ambiguity.items += 1;
                ambiguity.samples += ambiguous_samples;
            }
            let trace = self.traces.get(it.trace as usize);
            rows.push(ItemRow {
                trace_id: trace.map(|t| super::hex_id(&t.0)),
                span_id: trace.map(|t| super::hex_id(&t.1)),
                pid: it.pid,
                tid: it.tid,
                id: it.id,
                class,
                begin_ns: it.begin,
                end_ns: it.end,
                duration_ns: it.end.saturating_sub(it.begin),
                samples: it.samples,
                anomaly_score: 0.0,
                anomalous: false,
                responsible: Vec::new(),
                open_at_end: it.open_at_end,
                switching,
                current,
                ambiguous_samples,
                ambiguous,
                functions,
                events,
            });
        }
        if let (Some(class), true) = (&self.opts.class, rows.is_empty()) {
            return Err(AnalyzeError::NoSuchClass { class: class.clone(), classes: other_classes.into_iter().collect() });
        }
        rows.sort_by_key(|r| (r.begin_ns, r.pid, r.tid, r.id));
        let open_at_end = rows.iter().filter(|r| r.open_at_end).count() as u64;
        let (mode, duration_source) = match (&self.reg, &self.key) {
            (Some(r), _) => (format!("register:{}", r.name), "samples"),
            (None, Some(k)) => (format!("goroutine:{}", k.name), "markers"),
            (None, None) => ("markers".to_owned(), "markers"),
        };
        let mut report = ItemsReport {
            items: rows,
            outside_samples: self.outside,
            total_samples: self.total,
            shown_estimator: self.opts.estimator,
            mean_interval_ns: interval,
            interval_source: interval_source.to_owned(),
            lost_markers: self.lost_markers,
            unmatched_markers: self.unmatched,
            open_at_end,
            markers: self.markers,
            mode,
            duration_source: duration_source.to_owned(),
            event: self.event_name,
            min_reliable_samples: min_rel,
            mad_k: self.opts.mad_k,
            responsible_share: self.opts.responsible_share,
            classes: Vec::new(),
            switching: self.switching,
            ambiguity,
            item_events: self.item_events,
            item_events_outside: self.item_events_outside,
        };
        flag_anomalies(&mut report, &self.opts);
        Ok(report)
    }
}

impl ResolvedSink for JoinState {
    #[inline]
    fn handle_sample(&mut self, s: &Sample, resolver: &mut Resolver) {
        self.last_time = self.last_time.max(s.time);
        if s.event != self.event {
            return;
        }
        self.total += 1;
        let t = self.thread(s.tid);
        let th = &mut self.threads[t];
        if th.last_sample != 0 && self.fixed_interval.is_none() {
            self.meter.add(s.time.saturating_sub(th.last_sample));
        }
        th.last_sample = s.time;
        if self.reg.is_some() {
            self.register_sample(s, resolver);
            return;
        }
        if th.switching {
            let cur = th.current;
            match self.items.get(cur as usize) {
                Some(it) if it.open => {
                    let live = it.live;
                    self.count(cur, live, s, resolver);
                }
                _ => {
                    self.outside += 1;
                    self.switching.loop_samples += 1;
                }
            }
            return;
        }
        let th = match &self.key {
            Some(k) => {
                let g = s.regs.get(k.index).copied().unwrap_or(0);
                self.threads[t].go_g = g;
                let strand = self.strand(s.pid, g, false);
                let item = strand.and_then(|st| self.threads[st].stack.last()).map_or(NO_ITEM, |&(i, _)| i);
                self.observe(t, item, s.time);
                match strand {
                    Some(t) => &self.threads[t],
                    None => {
                        self.outside += 1;
                        return;
                    }
                }
            }
            None => &self.threads[t],
        };
        match th.stack.last() {
            Some(&(item, live)) => {
                if th.open_items > 1 {
                    self.items[item as usize].stacked_samples += 1;
                }
                self.count(item, live, s, resolver)
            }
            None => self.outside += 1,
        }
    }

    fn handle_marker(&mut self, m: &Marker) {
        self.markers += 1;
        self.last_time = self.last_time.max(m.time);
        if self.reg.is_some() {
            return;
        }
        // The OS thread's entry (boundary groups, goroutine runs).
        let tt = self.thread(m.tid);
        if self.key.is_some() && matches!(m.kind, MarkerKind::Begin | MarkerKind::End) {
            // The probe read the goroutine (labels of class probes carry none).
            self.threads[tt].go_g = m.item;
        }
        // Goroutine mode: the marker's item is its goroutine; items get sequence ids.
        let (t, m) = match self.key.as_mut() {
            Some(k) => {
                let id = match m.kind {
                    MarkerKind::Begin => {
                        k.next_id += 1;
                        k.next_id
                    }
                    _ => Marker::UNKNOWN_ITEM,
                };
                let t = self.strand(m.pid, m.item, true).expect("goroutine mode");
                (t, &Marker { item: id, ..m.clone() })
            }
            None => (self.thread(m.tid), m),
        };
        match m.kind {
            MarkerKind::Begin => {
                let pending = std::mem::take(&mut self.threads[t].pending_class);
                if m.class == 0 && pending != 0 {
                    self.begin_item(t, &Marker { class: pending, ..m.clone() });
                } else {
                    self.begin_item(t, m);
                }
                let item = (self.items.len() - 1) as u32;
                if self.key.is_some() {
                    self.observe(tt, item, m.time);
                }
                // Events of this hit's begin probe that came first belong to it.
                let th = &mut self.threads[tt];
                let waiting = if th.group == Group::Pending { std::mem::take(&mut th.pending) } else { Vec::new() };
                if th.group != Group::Pending {
                    self.drop_pending(tt);
                }
                let th = &mut self.threads[tt];
                th.group = Group::Begin(item);
                th.group_names = waiting.iter().map(|e| e.name.clone()).collect();
                for e in waiting {
                    self.add_event(item, &ItemEvent { time: e.time.max(m.time), ..e });
                }
            }
            MarkerKind::Label => match self.threads[t].stack.last() {
                Some(&(item, _)) => {
                    let it = &mut self.items[item as usize];
                    if it.class == 0 {
                        it.class = m.class;
                    }
                }
                None => self.threads[t].pending_class = m.class,
            },
            MarkerKind::End => {
                let found = match self.find_open(t, m.item) {
                    None if self.any_switch && m.item != Marker::UNKNOWN_ITEM => self.find_any(m.pid, m.item),
                    f => f,
                };
                self.drop_pending(tt);
                match found {
                    Some(item) => {
                        if m.class != 0 && self.items[item as usize].class == 0 {
                            self.items[item as usize].class = m.class;
                        }
                        self.end_marked(item, m.time);
                        if self.key.is_some() {
                            self.observe(tt, item, m.time);
                            self.end_run(tt);
                        }
                        self.threads[tt].group = Group::End(item);
                    }
                    None => self.unmatched += 1,
                }
            }
            MarkerKind::Switch => {
                self.drop_pending(tt);
                self.switching.markers += 1;
                self.start_switching(t);
                match self.find_any(m.pid, m.item) {
                    Some(item) => {
                        let on = self.items[item as usize].current_on;
                        if on != NO_ITEM && on as usize != t && self.threads[on as usize].current == item {
                            // Current on one thread at a time: it left the other one.
                            self.set_current(on as usize, NO_ITEM, m.time);
                        }
                        self.set_current(t, item, m.time);
                    }
                    None => {
                        self.unmatched += 1;
                        self.switching.unknown_items += 1;
                        self.set_current(t, NO_ITEM, m.time);
                    }
                }
            }
            MarkerKind::SwitchNone => {
                self.drop_pending(tt);
                self.switching.markers += 1;
                self.start_switching(t);
                self.set_current(t, NO_ITEM, m.time);
            }
        }
    }

    /// An `--item-event` hit: kept by the innermost open item of its thread (goroutine
    /// mode: of the goroutine last seen on its thread). One at a site of the begin or end
    /// probe ([`EventAt`]) belongs to the item that very hit begins or ends, whichever
    /// record came first, with its time clamped into the item (docs/PROBES.md).
    fn handle_item_event(&mut self, e: &ItemEvent) {
        self.item_events += 1;
        self.last_time = self.last_time.max(e.time);
        if self.reg.is_some() {
            self.item_events_outside += 1;
            return;
        }
        let tt = self.thread(e.tid);
        let th = &mut self.threads[tt];
        let new_name = !th.group_names.contains(&e.name);
        match (e.at, th.group) {
            (EventAt::Begin, Group::Begin(item)) if new_name => {
                th.group_names.push(e.name.clone());
                let begin = self.items[item as usize].begin;
                self.add_event(item, &ItemEvent { time: e.time.max(begin), ..e.clone() });
                return;
            }
            (EventAt::Begin, g) => {
                // Its begin marker comes next: wait for it.
                if g != Group::Pending || !new_name {
                    self.drop_pending(tt);
                }
                let th = &mut self.threads[tt];
                th.group = Group::Pending;
                if th.pending.len() < MAX_PENDING {
                    th.group_names.push(e.name.clone());
                    th.pending.push(e.clone());
                } else {
                    self.item_events_outside += 1;
                }
                return;
            }
            (EventAt::End, Group::End(item)) if new_name => {
                th.group_names.push(e.name.clone());
                let end = self.items[item as usize].end;
                self.add_event(item, &ItemEvent { time: e.time.min(end), ..e.clone() });
                return;
            }
            // Free, or at the end probe before its marker: the item open now (the one
            // the marker will end).
            _ => self.drop_pending(tt),
        }
        let t = match &self.key {
            Some(_) => match self.strand(e.pid, self.threads[tt].go_g, false) {
                Some(t) => t,
                None => {
                    self.item_events_outside += 1;
                    return;
                }
            },
            None => tt,
        };
        match self.threads[t].stack.last() {
            Some(&(item, _)) => self.add_event(item, e),
            None => self.item_events_outside += 1,
        }
    }

    fn handle_item_class(&mut self, c: &ItemClass) {
        self.classes.insert((c.pid, c.id), c.name.clone());
    }
    /// The trace context of the open item `t.item` of its thread (else of its process,
    /// after switch markers); for no open item it is counted as unmatched.
    fn handle_item_trace(&mut self, t: &ItemTrace) {
        self.last_time = self.last_time.max(t.time);
        if self.reg.is_some() {
            return;
        }
        let th = self.thread(t.tid);
        let found = match self.find_open(th, t.item) {
            None if self.any_switch => self.find_any(t.pid, t.item),
            f => f,
        };
        match found {
            Some(item) if self.traces.len() < u32::MAX as usize - 1 => {
                let it = &mut self.items[item as usize];
                if it.trace == NO_ITEM {
                    it.trace = self.traces.len() as u32;
                    self.traces.push((t.trace_id, t.span_id));
                } else {
                    self.traces[it.trace as usize] = (t.trace_id, t.span_id);
                }
            }
            _ => self.unmatched += 1,
        }
    }
    fn handle_switch(&mut self, s: &Switch, _resolver: &mut Resolver) {
        if self.key.is_some() && self.reg.is_none() {
            self.go_switch(s);
        }
    }
    fn handle_lost(&mut self, l: &Lost) {
        if l.kind == LossKind::Markers {
            self.lost_markers += l.count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reg_bit;

    #[test]
    fn register_bits() {
        assert_eq!(reg_bit("r13"), Some(21));
        assert_eq!(reg_bit("R13"), Some(21));
        assert_eq!(reg_bit("rdi"), Some(5));
        assert_eq!(reg_bit("di"), Some(5));
        assert_eq!(reg_bit("rax"), Some(0));
        assert_eq!(reg_bit("r8"), Some(16));
        assert_eq!(reg_bit("xmm0"), None);
    }
}
