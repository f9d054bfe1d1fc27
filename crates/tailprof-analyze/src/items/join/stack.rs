//! Begin and end markers on a thread's stack of open items: nesting, ends below the top
//! (overlaps), the index of deep items.

use tailprof_format::Marker;

use super::{JoinState, NO_ITEM, SHALLOW};

impl JoinState {
    /// Push a new open item on thread `t`'s stack.
    pub(super) fn begin_item(&mut self, t: usize, m: &Marker) {
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

    /// The innermost open item of thread `t` an end of `id` closes; O(1) + [`SHALLOW`].
    pub(super) fn find_open(&self, t: usize, id: u64) -> Option<u32> {
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
    pub(super) fn end_marked(&mut self, item: u32, time: u64) {
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
}
