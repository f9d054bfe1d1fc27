//! The join's record handlers: samples, markers, item events, trace contexts, switches
//! and losses, fed by [`super::ItemsJoin`].

use tailprof_format::{EventAt, ItemClass, ItemEvent, ItemTrace, LossKind, Lost, Marker, MarkerKind, Sample, Switch};

use super::{Group, JoinState, MAX_PENDING, NO_ITEM};
use crate::resolve::{ResolvedSink, Resolver};

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
                let g = super::sample_goroutine(s, k.index).unwrap_or(0);
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
