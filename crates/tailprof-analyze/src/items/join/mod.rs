//! The join: markers (or a tagged register) + samples → per-item, per-location counts.
//!
//! [`ItemsJoin`] is a [`tailprof_format::Sink`]. Marker mode rules, per thread (tid):
//!
//! - `Begin` pushes a new open item on the thread's stack (nesting allowed).
//! - `End` with an id closes the innermost open item with that id on the thread,
//!   wherever it is in the stack (so interleaved items on one thread work); `End` with
//!   [`Marker::UNKNOWN_ITEM`](tailprof_format::Marker::UNKNOWN_ITEM) closes the most
//!   recent one. An end that matches nothing is counted in `unmatched_markers`.
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
//!
//! Layout: `mod.rs` holds the join's state and its shared helpers, `stack.rs` the
//! begin/end rules on a thread's stack of open items, `switch.rs` the switch markers'
//! current items, `goroutine.rs` the goroutine mode's strands and runs, `register.rs`
//! the register mode, `sink.rs` the record handlers, `report.rs` the report built at
//! the end.

mod goroutine;
mod register;
mod report;
mod sink;
mod stack;
mod switch;

use rustc_hash::FxHashMap;
use tailprof_format::{ItemEvent, Sample, TraceHeader};

use super::estimate::{period_interval_ns, Acc, IntervalMeter};
use super::events::EventsAcc;
use super::{ItemsOptions, ItemsReport};
use crate::profile::event_name;
use crate::resolve::{LocId, Resolved, Resolver};
use crate::symbolize::Symbolizer;
use crate::AnalyzeError;

pub use goroutine::{goroutine_key, goroutine_off_interval, observe_run, sample_goroutine};
pub use register::reg_bit;

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
    /// A class from a [`MarkerKind::Label`](tailprof_format::MarkerKind::Label) seen while
    /// no item was open: it labels the next item this thread begins.
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
        let key = goroutine_key(header, event).map(|(name, index)| KeyMode { name, index, strands: FxHashMap::default(), next_id: 0 });
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
}
