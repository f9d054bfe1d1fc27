//! What the causes of retained requests are computed from (issue 21): the kept context
//! switches and wakeups, compact and bounded by bytes, and the requests threads were in
//! (for the item and class of wakers and preempters).
//!
//! Switches and wakeups are kept as packed records ([`SpanSwitch`]: 28 bytes, [`SpanWakeup`]:
//! 20 bytes; a `Switch` and a `Wakeup` with their extras took about 60 and 80), the wakers'
//! stacks interned (one copy per distinct stack, reference-counted), and only the wakeups of
//! threads inside a request carry the waker's stack and request ([`WakeExtra`], 32 bytes).
//! All of it shares one budget, [`MAX_KEPT_CAUSE_BYTES`]: when it is full the older of the
//! oldest switch and the oldest wakeup goes first (counted), so both cover the same seconds.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tailprof_analyze::causes::{SpanSwitch, SpanWakeup};

/// Bytes of kept switches, wakeups, their extras and interned stacks at most (the count
/// bounds of before, 2^18 switches and 2^17 wakeups with 2^18 frames, took about 30 MiB
/// and covered 0.4–1.3 s at 100k context switches/s; this covers about 3.5 s, see
/// docs/BENCHMARKS.md "Agent").
pub const MAX_KEPT_CAUSE_BYTES: usize = 32 << 20;
/// Accounted bytes of an interned stack besides its frames (map entry, slot, `Arc`).
const STACK_OVERHEAD: usize = 64;
/// Ended request spans remembered per thread for the item and class of wakers and
/// preempters, in all (32 bytes each, plus the per-thread index).
pub const MAX_ENDED_SPANS: usize = 1 << 17;
/// Ended spans of a thread examined per lookup at most.
const MAX_ENDED_PROBES: usize = 256;

/// What a kept wakeup of a thread inside a request adds: the waker's stack (interned, 0:
/// none) and the request the waker was inside.
#[derive(Debug, Clone, Copy)]
pub(super) struct WakeExtra {
    /// The wakeup's sequence number ([`KeptCauses::wakeup_seq`]).
    pub seq: u64,
    pub stack: u32,
    pub item: Option<u64>,
}

/// What a kept wakeup says about its waker: its stack (innermost first) and request.
pub(super) type WakerOf<'a> = (&'a [(u32, u64)], Option<u64>);

/// An interned stack and its references.
type Slot = Option<(Arc<[(u32, u64)]>, u32)>;

/// Interned stacks, reference-counted by the extras that name them.
#[derive(Default)]
struct Stacks {
    ids: HashMap<Arc<[(u32, u64)]>, u32>,
    /// id − 1 → (frames, references); `None`: free.
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Stacks {
    /// Interns `frames` (one more reference): its id and the bytes it added.
    fn intern(&mut self, frames: &[(u32, u64)]) -> (u32, usize) {
        if frames.is_empty() {
            return (0, 0);
        }
        if let Some(&id) = self.ids.get(frames) {
            if let Some(Some(s)) = self.slots.get_mut(id as usize - 1) {
                s.1 += 1;
            }
            return (id, 0);
        }
        let arc: Arc<[(u32, u64)]> = frames.into();
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize - 1] = Some((arc.clone(), 1));
                id
            }
            None => {
                self.slots.push(Some((arc.clone(), 1)));
                self.slots.len() as u32
            }
        };
        self.ids.insert(arc, id);
        (id, stack_bytes(frames.len()))
    }

    /// Drops a reference: the bytes freed.
    fn release(&mut self, id: u32) -> usize {
        let Some(slot) = self.slots.get_mut((id as usize).wrapping_sub(1)) else { return 0 };
        let Some((arc, refs)) = slot else { return 0 };
        *refs -= 1;
        if *refs > 0 {
            return 0;
        }
        let n = arc.len();
        self.ids.remove(&**arc);
        *slot = None;
        self.free.push(id);
        stack_bytes(n)
    }

    fn get(&self, id: u32) -> &[(u32, u64)] {
        match self.slots.get((id as usize).wrapping_sub(1)) {
            Some(Some((arc, _))) => arc,
            _ => &[],
        }
    }
}

fn stack_bytes(frames: usize) -> usize {
    frames * std::mem::size_of::<(u32, u64)>() + STACK_OVERHEAD
}

/// What was evicted before its time, for the retainer's counters.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Evicted {
    pub switches: u64,
    pub wakeups: u64,
}

/// The kept switches and wakeups (time order), bounded by [`MAX_KEPT_CAUSE_BYTES`] and the
/// retainer's `KEEP_NS`.
#[derive(Default)]
pub(super) struct KeptCauses {
    pub switches: VecDeque<SpanSwitch>,
    pub wakeups: VecDeque<SpanWakeup>,
    /// The sequence number of `wakeups[0]`.
    first_seq: u64,
    /// Extras of some wakeups, by sequence number (increasing).
    extras: VecDeque<WakeExtra>,
    stacks: Stacks,
    bytes: usize,
    pub evicted: Evicted,
}

const SWITCH_BYTES: usize = std::mem::size_of::<SpanSwitch>();
const WAKEUP_BYTES: usize = std::mem::size_of::<SpanWakeup>();
const EXTRA_BYTES: usize = std::mem::size_of::<WakeExtra>();

impl KeptCauses {
    /// Bytes kept now (as accounted against [`MAX_KEPT_CAUSE_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes room for `need` bytes at time `now`: drops what is older than `keep_ns`, and
    /// while over the budget the older of the oldest switch and wakeup (counted).
    fn make_room(&mut self, now: u64, keep_ns: u64, need: usize) {
        loop {
            let s = self.switches.front().map(|s| s.time);
            let w = self.wakeups.front().map(|w| w.time);
            let switch_first = match (s, w) {
                (Some(s), Some(w)) => s <= w,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return,
            };
            let oldest = if switch_first { s } else { w }.unwrap_or(0);
            let expired = oldest.saturating_add(keep_ns) < now;
            if !expired && self.bytes + need <= MAX_KEPT_CAUSE_BYTES {
                return;
            }
            if switch_first {
                self.switches.pop_front();
                self.bytes -= SWITCH_BYTES;
                self.evicted.switches += (!expired) as u64;
            } else {
                self.pop_wakeup();
                self.evicted.wakeups += (!expired) as u64;
            }
        }
    }

    fn pop_wakeup(&mut self) {
        if self.wakeups.pop_front().is_none() {
            return;
        }
        self.bytes -= WAKEUP_BYTES;
        if self.extras.front().is_some_and(|x| x.seq == self.first_seq) {
            if let Some(x) = self.extras.pop_front() {
                self.bytes -= EXTRA_BYTES + self.stacks.release(x.stack);
            }
        }
        self.first_seq += 1;
    }

    pub fn push_switch(&mut self, s: SpanSwitch, keep_ns: u64) {
        self.make_room(s.time, keep_ns, SWITCH_BYTES);
        self.switches.push_back(s);
        self.bytes += SWITCH_BYTES;
    }

    /// Keeps a wakeup; with `extra` (the woken thread is inside a request) the waker's
    /// stack and request too.
    pub fn push_wakeup(&mut self, w: SpanWakeup, extra: Option<WakerOf<'_>>, keep_ns: u64) {
        let need = WAKEUP_BYTES + extra.map_or(0, |(f, _)| EXTRA_BYTES + stack_bytes(f.len()));
        self.make_room(w.time, keep_ns, need);
        let seq = self.first_seq + self.wakeups.len() as u64;
        self.wakeups.push_back(w);
        self.bytes += WAKEUP_BYTES;
        if let Some((frames, item)) = extra {
            let (stack, added) = self.stacks.intern(frames);
            self.extras.push_back(WakeExtra { seq, stack, item });
            self.bytes += EXTRA_BYTES + added;
        }
    }

    /// The extra of the wakeup at `index` in [`Self::wakeups`]: the waker's stack and request.
    pub fn extra(&self, index: usize) -> Option<WakerOf<'_>> {
        let seq = self.first_seq + index as u64;
        let k = self.extras.partition_point(|x| x.seq < seq);
        self.extras.get(k).filter(|x| x.seq == seq).map(|x| (self.stacks.get(x.stack), x.item))
    }

    /// Seconds covered now (oldest to newest kept switch), in ns.
    pub fn covered_ns(&self) -> u64 {
        match (self.switches.front(), self.switches.back()) {
            (Some(a), Some(b)) => b.time.saturating_sub(a.time),
            _ => 0,
        }
    }
}

/// A request's span on a thread that ended: when, which request, its class (index).
#[derive(Debug, Clone, Copy)]
struct Ended {
    begin: u64,
    end: u64,
    item: u64,
    class: u32,
}

/// The spans of ended requests by thread (bounded by [`MAX_ENDED_SPANS`], oldest first out):
/// which request a thread was in at a time, and a request's class after its end.
#[derive(Default)]
pub(super) struct EndedSpans {
    by_tid: HashMap<u32, VecDeque<Ended>>,
    /// The thread of every span, in the order they were added.
    order: VecDeque<u32>,
    /// The latest end of a span forgotten at the bound: lookups before it may miss.
    pub forgotten_until: u64,
}

impl EndedSpans {
    pub fn push(&mut self, tid: u32, begin: u64, end: u64, item: u64, class: u32) {
        if self.order.len() >= MAX_ENDED_SPANS {
            if let Some(old) = self.order.pop_front() {
                if let Some(q) = self.by_tid.get_mut(&old) {
                    if let Some(e) = q.pop_front() {
                        self.forgotten_until = self.forgotten_until.max(e.end);
                    }
                    if q.is_empty() {
                        self.by_tid.remove(&old);
                    }
                }
            }
        }
        self.order.push_back(tid);
        self.by_tid.entry(tid).or_default().push_back(Ended { begin, end, item, class });
    }

    /// The innermost ended request thread `tid` was in at `t`.
    pub fn item_at(&self, tid: u32, t: u64) -> Option<u64> {
        let q = self.by_tid.get(&tid)?;
        q.iter().rev().take(MAX_ENDED_PROBES).filter(|e| e.begin <= t && t <= e.end).max_by_key(|e| e.begin).map(|e| e.item)
    }

    /// The class (index) of ended request `item`, run on thread `tid`.
    pub fn class_of(&self, tid: u32, item: u64) -> Option<u32> {
        let q = self.by_tid.get(&tid)?;
        q.iter().rev().take(MAX_ENDED_PROBES).find(|e| e.item == item).map(|e| e.class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake(time: u64) -> SpanWakeup {
        (&tailprof_format::Wakeup { time, pid: 1, tid: 1, wakee_tid: 2, ..Default::default() }).into()
    }

    #[test]
    fn record_sizes_are_compact() {
        assert_eq!((SWITCH_BYTES, WAKEUP_BYTES, EXTRA_BYTES), (28, 20, 32));
    }

    /// The byte budget evicts the oldest records (counted) and releases interned stacks
    /// with the last wakeup naming them; the extras stay with their wakeups.
    #[test]
    fn bytes_bound_evicts_oldest_and_frees_stacks() {
        let mut k = KeptCauses::default();
        let frames: Vec<(u32, u64)> = (0..10).map(|i| (0, i)).collect();
        let n = MAX_KEPT_CAUSE_BYTES / WAKEUP_BYTES + 1000;
        for i in 0..n as u64 {
            let extra = (i % 100 == 0).then_some((&frames[..], Some(i)));
            k.push_wakeup(wake(i), extra, u64::MAX);
            assert!(k.bytes() <= MAX_KEPT_CAUSE_BYTES);
        }
        assert!(k.evicted.wakeups > 1000, "{:?}", k.evicted);
        // One stack interned once however many wakeups name it.
        assert_eq!(k.stacks.ids.len(), 1);
        let first = k.wakeups.front().unwrap().time;
        // The extra of the first kept wakeup that has one is its own.
        let idx = (0..k.wakeups.len()).find(|&i| k.extra(i).is_some()).unwrap();
        let (f, item) = k.extra(idx).unwrap();
        assert_eq!((f.len(), item), (10, Some(first + idx as u64)));
        assert_eq!((first + idx as u64) % 100, 0);
        // Expiry by time empties it, and the stack goes with its last wakeup.
        k.push_wakeup(wake(u64::MAX / 2), None, 10);
        assert_eq!(k.wakeups.len(), 1);
        assert!(k.stacks.ids.is_empty());
        assert_eq!(k.bytes(), WAKEUP_BYTES);
    }

    #[test]
    fn ended_spans_name_the_innermost_request_and_forget_counted() {
        let mut e = EndedSpans::default();
        e.push(5, 10, 100, 1, 3);
        e.push(5, 20, 30, 2, 4);
        assert_eq!((e.item_at(5, 25), e.item_at(5, 50), e.item_at(5, 5), e.item_at(6, 25)), (Some(2), Some(1), None, None));
        assert_eq!((e.class_of(5, 1), e.class_of(5, 2), e.class_of(5, 3)), (Some(3), Some(4), None));
        for i in 0..MAX_ENDED_SPANS as u64 {
            e.push(7, 1000 + i, 1001 + i, 10 + i, 0);
        }
        assert_eq!(e.item_at(5, 25), None);
        assert_eq!(e.forgotten_until, 100);
    }
}
