//! Switch markers: each thread's current item, its current intervals, the (pid, id) index.

use super::{JoinState, NO_ITEM};

impl JoinState {
    /// Thread `t` now works on `item` ([`NO_ITEM`]: none) from `time` on. The interval
    /// of its previous current item is recorded when the thread has switch markers.
    pub(super) fn set_current(&mut self, t: usize, item: u32, time: u64) {
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
    pub(super) fn start_switching(&mut self, t: usize) {
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
    pub(super) fn find_any(&self, pid: u32, id: u64) -> Option<u32> {
        let &item = self.by_id.get(&(pid, id))?;
        self.items[item as usize].open.then_some(item)
    }
}
