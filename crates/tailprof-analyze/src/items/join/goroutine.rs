//! Goroutine mode: (pid, g) strands and the runs of goroutines on OS threads (see the
//! module docs of [`super`]).

use tailprof_format::Switch;

use super::{JoinState, Thread, NO_ITEM};

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
