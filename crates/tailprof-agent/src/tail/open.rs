//! Open requests: begin, end and switch markers, exits (the indexes of the module docs).

use super::*;

impl TailRetainer {
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
    pub(super) fn apply_exits(&mut self) {
        let due = std::mem::replace(&mut self.exits_prev, std::mem::take(&mut self.exits));
        for (pid, tid, time, process) in due {
            let victims: Vec<(u32, u64)> = if process {
                self.by_pid.get(&pid).map_or_else(Vec::new, |m| m.values().copied().collect())
            } else {
                self.by_tid.get(&tid).map_or_else(Vec::new, |m| m.values().map(|&i| (tid, i)).collect())
            };
            for k in victims {
                // A request begun after the exit belongs to a new thread with a reused id.
                // A goroutine's request outlives the OS thread it began on.
                if self.open.get(&k).is_some_and(|o| o.begin <= time && (process || o.goroutine.is_none())) {
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

    /// Goroutine mode: a probe marker's item is its goroutine (`g`).
    fn goroutine_marker(&self, m: &Marker) -> bool {
        self.go_key.is_some() && m.source == MarkerSource::Uprobe
    }

    fn begin(&mut self, m: &Marker, comm: &str) {
        let key = (m.tid, m.item);
        let go = self.goroutine_marker(m);
        if self.remove_open(key).is_some() {
            self.stats.abandoned_open += 1;
        }
        // A goroutine begun again before its end (an end lost): the old request is over.
        if let Some(k) = self.by_pid_id.get(&(m.pid, m.item)).copied().filter(|_| go) {
            if self.remove_open(k).is_some() {
                self.stats.abandoned_open += 1;
            }
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
                goroutine: go.then_some((m.item, m.tid)),
            },
        );
        // A goroutine is followed by its register, not by the thread it began on.
        if !go {
            self.set_current(m.tid, Some(key), m.time);
        }
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
            MarkerKind::End if self.goroutine_marker(m) => {
                // Goroutine mode: the request of this goroutine, whichever thread began it.
                self.match_probes += 1;
                let key = self.by_pid_id.get(&(m.pid, m.item)).copied();
                let Some(mut o) = key.and_then(|k| self.remove_open(k)) else {
                    self.stats.unmatched_ends += 1;
                    return;
                };
                let key = key.unwrap_or_default();
                if let Some(go) = &mut o.goroutine {
                    go.1 = m.tid;
                }
                let class_id = if m.class != 0 { m.class } else { o.class };
                self.finish(key.0, key.1, &o, class_id, m.time);
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
}
