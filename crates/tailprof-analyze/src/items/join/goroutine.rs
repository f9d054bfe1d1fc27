//! Goroutine mode: (pid, g) strands and the runs of goroutines on OS threads (see the
//! module docs of [`super`]).

use tailprof_format::{Sample, Switch, TraceHeader};

use super::{reg_bit, JoinState, Thread, NO_ITEM};

/// Goroutine mode of a trace (`TraceHeader.extra["item_key"]` = `goroutine:REG`, probes
/// on a Go binary): (the register's name, its index in the `Sample::regs` of `event`), or
/// `None` when items are not keyed by goroutine (or the event does not capture it). One
/// home for the join and the agent (`tailprof_agent::tail`).
pub fn goroutine_key(header: &TraceHeader, event: u16) -> Option<(String, usize)> {
    let name = header.extra.get("item_key")?.strip_prefix("goroutine:")?;
    let bit = reg_bit(name)?;
    let mask = header.events.get(event as usize).map_or(0, |e| e.regs_user_mask);
    (mask & (1 << bit) != 0).then(|| (name.trim().to_owned(), (mask & ((1u64 << bit) - 1)).count_ones() as usize))
}

/// The goroutine (`g`) a sample ran, from its key register at `index`
/// ([`goroutine_key`]); `None`: none (0, or not captured).
#[inline]
pub fn sample_goroutine(s: &Sample, index: usize) -> Option<u64> {
    s.regs.get(index).copied().filter(|&g| g != 0)
}

/// The run rule of goroutine mode, per OS thread: `run` is (key, first, last time) of the
/// goroutine item seen on the thread without another one seen in between. Seeing `key`
/// (`None`: a goroutine of no item, or the scheduler) at `time` extends the run of the
/// same key, else ends it: the run ended is returned (it lasted from its first to its last
/// observation), and a new one starts for `Some` key.
#[inline]
pub fn observe_run<K: PartialEq + Copy>(run: &mut Option<(K, u64, u64)>, key: Option<K>, time: u64) -> Option<(K, u64, u64)> {
    match (*run, key) {
        (Some((k, from, _)), Some(new)) if k == new => {
            *run = Some((k, from, time));
            None
        }
        (prev, key) => {
            *run = key.map(|k| (k, time, time));
            prev
        }
    }
}

/// Goroutine mode, per OS thread: the off-CPU interval of a goroutine by the switch rule
/// of the join (`JoinState::go_switch`): a switch-out that carries the goroutine
/// register (`Switch::item_key`) leaves that goroutine, and the thread resumes the
/// goroutine it stopped at its next switch-in, so the interval in between is that
/// goroutine's off-CPU time (docs/PROBES.md). `pending`: the thread's last such switch-out
/// (g, time). Returns (g, out, in) at the switch-in that follows one; a switch-out without
/// the register (or with 0) forgets it. One home for the join's rule and the agent
/// (`tailprof_agent::tail`).
#[inline]
pub fn goroutine_off_interval(pending: &mut Option<(u64, u64)>, s: &Switch) -> Option<(u64, u64, u64)> {
    if s.kind.is_out() {
        *pending = s.item_key.filter(|&g| g != 0).map(|g| (g, s.time));
        None
    } else {
        pending.take().map(|(g, out)| (g, out, s.time.max(out)))
    }
}

impl JoinState {
    /// Goroutine mode: the entry of (pid, g) in `threads`, made when `create`.
    pub(super) fn strand(&mut self, pid: u32, g: u64, create: bool) -> Option<usize> {
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
    pub(super) fn observe(&mut self, tt: usize, item: u32, time: u64) {
        let th = &mut self.threads[tt];
        let started = item != NO_ITEM && th.run.is_none_or(|r| r.0 != item);
        let tid = th.tid;
        if let Some((i, from, to)) = observe_run(&mut th.run, (item != NO_ITEM).then_some(item), time) {
            self.slices.push((i, tid, from, to));
        }
        if started {
            self.items[item as usize].go_runs = true;
        }
    }

    /// Goroutine mode: a context switch of an OS thread. A switch-out that carries the
    /// goroutine register (`Switch::item_key`) is an exact observation of the goroutine
    /// the thread runs at that instant, and the thread resumes where it stopped, so the
    /// switch-in is one of the same goroutine: the off-CPU interval in between lies
    /// inside a run of that goroutine's item, and of no other (docs/PROBES.md). Switches
    /// without it change nothing (the runs of samples and probes alone decide).
    pub(super) fn go_switch(&mut self, s: &Switch) {
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
    pub(super) fn end_run(&mut self, tt: usize) {
        let th = &mut self.threads[tt];
        if let Some((i, from, to)) = th.run.take() {
            let tid = th.tid;
            self.slices.push((i, tid, from, to));
        }
    }
}
