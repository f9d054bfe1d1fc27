//! The causes of retained requests (issue 21): the kept context switches and wakeups,
//! and who woke a request and who ran instead of it.

use super::*;

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

impl TailRetainer {
    /// A context switch (in time order), kept for [`KEEP_NS`] at most, compact, within
    /// [`MAX_KEPT_CAUSE_BYTES`]: the causes of requests that end later.
    pub fn handle_switch(&mut self, s: &tailprof_format::Switch) {
        if self.go_key.is_some() {
            let open = &self.by_pid_id;
            self.go_off.switch(s, |pid, g| open.contains_key(&(pid, g)));
            (self.stats.go_off_cpu_evicted, self.stats.go_off_cpu_untracked) = (self.go_off.evicted, self.go_off.untracked);
        }
        self.causes.push_switch(s.into(), KEEP_NS);
        self.sync_cause_evictions();
    }

    fn sync_cause_evictions(&mut self) {
        self.stats.kept_switches_evicted = self.causes.evicted.switches;
        self.stats.kept_wakeups_evicted = self.causes.evicted.wakeups;
    }

    /// Whether [`Self::handle_wakeup`] keeps the waker's stack of this wakeup (it need not
    /// be resolved otherwise): the woken thread is inside an open request (or has a current
    /// one: switch markers).
    pub fn wants_wakeup(&self, w: &tailprof_format::Wakeup) -> bool {
        self.by_tid.contains_key(&w.wakee_tid) || self.threads.get(&w.wakee_tid).is_some_and(|t| t.current.is_some())
    }

    /// A wakeup (in time order) with the waker's stack (`frames` as for samples; kept, with
    /// the request the waker is inside, only when the woken thread is inside an open
    /// request: nothing else asks who woke it). Every wakeup is kept (bounded), for the
    /// critical paths: who woke a request's waker.
    pub fn handle_wakeup(&mut self, w: &tailprof_format::Wakeup, frames: &[(u32, u64)]) {
        let extra = self.wants_wakeup(w).then(|| {
            // The request the waker is inside now: its current one (switch markers), else
            // its innermost open one.
            let item = match self.threads.get(&w.tid) {
                Some(t) if t.switching => t.current.map(|k| k.1),
                _ => self.by_tid.get(&w.tid).and_then(|m| m.values().next_back().copied()),
            };
            (&frames[..frames.len().min(tailprof_store::MAX_FRAMES)], item)
        });
        self.causes.push_wakeup(w.into(), extra, KEEP_NS);
        self.sync_cause_evictions();
    }

    /// Bytes of kept switches, wakeups and wakers' stacks now, and the time the kept
    /// switches cover (ns).
    pub fn kept_causes(&self) -> (usize, u64) {
        (self.causes.bytes(), self.causes.covered_ns())
    }

    /// The class name of a request of process `pid` with class id `class_id`, as
    /// [`Self::class_index`] would name it, without taking a place among the classes.
    fn class_name_of(&self, pid: u32, class_id: u32) -> String {
        let name = match self.classes.get(&pid).and_then(|m| m.get(&class_id)) {
            Some(n) => n.clone(),
            None if class_id == 0 => "default".into(),
            None => format!("class{class_id}"),
        };
        if self.class_ids.contains_key(&name) || self.class_names.len() < MAX_CLASSES {
            name
        } else {
            OTHER_CLASS.into()
        }
    }

    /// The class of request `item` that thread `tid` (of process `pid`) was inside: open
    /// now, or ended and remembered; `None` (counted) when it is no longer known.
    fn class_of_item(&mut self, pid: u32, tid: u32, item: u64) -> Option<String> {
        let key = if self.open.contains_key(&(tid, item)) { Some((tid, item)) } else { self.by_pid_id.get(&(pid, item)).copied() };
        if let Some(o) = key.and_then(|k| self.open.get(&k)) {
            return Some(self.class_name_of(o.pid, o.class));
        }
        match self.ended.class_of(tid, item) {
            Some(ci) => self.class_names.get(ci as usize).cloned(),
            None => {
                self.stats.cause_items_forgotten += 1;
                None
            }
        }
    }

    /// The request thread `tid` was inside at `t`: current or open then, else ended and
    /// remembered. Counted when `t` is older than what is remembered.
    fn item_at(&mut self, tid: u32, t: u64) -> Option<u64> {
        match self.threads.get(&tid) {
            Some(th) if th.switching => {
                if let Some(k) = th.current.filter(|_| th.since <= t) {
                    return Some(k.1);
                }
            }
            _ => {
                let open = self.by_tid.get(&tid).and_then(|m| {
                    m.values().rev().take(16).find(|&&item| self.open.get(&(tid, item)).is_some_and(|o| o.begin <= t)).copied()
                });
                if open.is_some() {
                    return open;
                }
            }
        }
        let found = self.ended.item_at(tid, t);
        if found.is_none() && t <= self.ended.forgotten_until {
            self.stats.cause_items_forgotten += 1;
        }
        found
    }

    /// Who woke request `tid`'s spans (`(tid, from, to)`: begin → end, or the intervals it
    /// was current) and who ran instead of it, and what its wakers did meanwhile, from the
    /// kept switches, wakeups and samples (empty without switches: the recorder did not
    /// record them).
    pub(super) fn causes_of(&mut self, spans: &[(u32, u64, u64)]) -> RetainedCauses {
        if self.causes.switches.is_empty() || spans.is_empty() {
            return RetainedCauses::default();
        }
        let switches: &[SpanSwitch] = self.causes.switches.make_contiguous();
        let wakeups: &[SpanWakeup] = self.causes.wakeups.make_contiguous();
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
        let mut out = RetainedCauses {
            woken_by: woken
                .iter()
                .take(MAX_CAUSES_PER_REQUEST)
                .map(|w| {
                    let x = self.causes.extra(w.largest);
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
                        item: x.and_then(|x| x.1),
                        class: None,
                        frames: x.map(|x| x.0.into()).unwrap_or_default(),
                        during: parts,
                    }
                })
                .collect(),
            preempted_by: ran.iter().take(MAX_CAUSES_PER_REQUEST).map(|p| (*p, comm(p.pid), None)).collect(),
        };
        drop(samples);
        // The wakers' classes and the preempters' requests (as the trace analysis names
        // them: the request a preempting thread was in when it first ran).
        for w in &mut out.woken_by {
            if let Some(item) = w.item {
                w.class = self.class_of_item(w.waker.pid, w.waker.tid, item);
            }
        }
        for p in &mut out.preempted_by {
            p.2 = self.item_at(p.0.tid, p.0.at);
        }
        out
    }
}
