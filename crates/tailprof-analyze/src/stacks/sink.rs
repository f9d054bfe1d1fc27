//! The per-record pass: each sample's path and item, off-CPU intervals clipped to the
//! items of their thread, wakeups and switches for the causes.

use tailprof_format::{Comm, CpuMode, FrameKind, Mmap, Sample, StackId, Switch, SwitchKind, Task, Wakeup};

use super::spans::{begun, item_in};
use super::{OffSlice, PathKey, StackBuilder, TimedSample, NO_ITEM};
use crate::offcpu::OffInterval;
use crate::resolve::{LocId, ResolvedSink, Resolver};

impl StackBuilder {
    /// The innermost item open on `tid` at `t`.
    #[inline]
    fn item_at(&self, tid: u32, t: u64) -> u32 {
        item_in(&self.by_tid, tid, t)
    }

    /// The resolved path of `stack` (or of the lone `ip` when it has none; an empty path
    /// without `ip`) for `pid`.
    pub(super) fn path_of(&mut self, r: &mut Resolver, pid: u32, stack: StackId, ip: Option<u64>, mode: CpuMode) -> u32 {
        let gen = r.generation(pid);
        let key: PathKey = if r.stacks().contains(stack) {
            (pid, gen, stack.0, false)
        } else if let Some(ip) = ip {
            (pid, gen, r.loc_of(pid, ip, mode).0, true)
        } else {
            (0, 0, 0, false)
        };
        if let Some(&p) = self.path_keys.get(&key) {
            return p;
        }
        let locs = if key.3 {
            vec![LocId(key.2)]
        } else {
            self.scratch.clear();
            self.scratch.extend(r.stacks().frames_leaf_first(stack));
            let mut locs = Vec::with_capacity(self.scratch.len());
            for (i, f) in self.scratch.iter().enumerate().rev() {
                // A caller in the null page is not code (the end of a frame-pointer
                // chain in code built without frame pointers): not a frame.
                if i != 0 && f.ip < 0x1000 {
                    continue;
                }
                // Callers' ips are return addresses: look up the call instruction.
                let ip = if i == 0 { f.ip } else { f.ip.saturating_sub(1) };
                let cpumode = if f.kind == FrameKind::Kernel { CpuMode::Kernel } else { CpuMode::User };
                locs.push(r.loc_of(pid, ip, cpumode));
            }
            locs
        };
        let p = self.loc_paths.len() as u32;
        self.loc_paths.push(locs);
        self.path_keys.insert(key, p);
        p
    }

    pub(super) fn add_interval(&mut self, r: &mut Resolver, iv: &OffInterval) {
        let len = iv.len_ns();
        if len == 0 {
            return;
        }
        let path = self.path_of(r, iv.pid, iv.stack, None, CpuMode::Unknown);
        let slice = OffSlice { pid: iv.pid, tid: iv.tid, begin_ns: iv.begin_ns, end_ns: iv.end_ns, state: iv.state, path };
        let active = self.filter.is_active();
        if !active {
            // The whole-trace view: every interval whole (with a filter, the kept items' parts).
            *self.off.entry((path, iv.state)).or_default() += len;
            if let Some(t) = &mut self.timeline {
                t.off_cpu.push(slice);
            }
        }
        let Some(ts) = self.by_tid.get(&iv.tid) else {
            let by_tid = &self.by_tid;
            self.causes.interval(iv, path, &[], &|tid, t| item_in(by_tid, tid, t));
            return;
        };
        let v = &ts.spans;
        // The spans that begin before the interval ends (`len > 0`: `end_ns >= 1`).
        let i = begun(ts, iv.end_ns - 1);
        let mut misses = 0;
        // Reused buffers: no allocation per interval.
        let (mut hits, mut bounds) = std::mem::take(&mut self.scratch_hits);
        hits.clear();
        bounds.clear();
        for (j, &(b, e, idx)) in v[..i].iter().enumerate().rev() {
            if ts.max_end[j] <= iv.begin_ns {
                // No span at or before this one ends after the interval begins.
                break;
            }
            let o = iv.overlap_ns(b, e);
            if o > 0 {
                hits.push((idx, o));
                bounds.push((idx, b, e));
                misses = 0;
            } else {
                misses += 1;
                if misses > 16 {
                    break;
                }
            }
        }
        {
            let by_tid = &self.by_tid;
            self.causes.interval(iv, path, &bounds, &|tid, t| item_in(by_tid, tid, t));
        }
        for (&(idx, o), &(_, sb, se)) in hits.iter().zip(bounds.iter()) {
            *self.item_off.entry(idx, (path, iv.state)) += o;
            if active && self.keep[idx as usize] {
                *self.off.entry((path, iv.state)).or_default() += o;
                if let Some(t) = &mut self.timeline {
                    let (b, e) = (iv.begin_ns.max(sb), iv.end_ns.min(se));
                    t.off_cpu.push(OffSlice { begin_ns: b, end_ns: e, ..slice });
                }
            }
        }
        self.scratch_hits = (hits, bounds);
    }
}

impl ResolvedSink for StackBuilder {
    const KEEP_STACKS: bool = true;

    #[inline]
    fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
        self.last_time = self.last_time.max(s.time);
        if s.event != self.event {
            return;
        }
        // With causes every sample's path is needed (the critical paths); else only kept ones'.
        let mut known = None;
        if self.causes.on {
            let path = self.path_of(r, s.pid, s.stack, Some(s.ip), s.cpumode);
            self.causes.sample(s.tid, s.time, path);
            known = Some(path);
        }
        self.total += 1;
        if self.fixed_interval.is_none() && !self.meter.is_full() {
            if let Some(last) = self.last_sample.insert(s.tid, s.time) {
                self.meter.add(s.time.saturating_sub(last));
            }
        }
        let item = if self.by_tid.is_empty() { NO_ITEM } else { self.item_at(s.tid, s.time) };
        let kept = !self.filter.is_active() || (item != NO_ITEM && self.keep[item as usize]);
        if kept {
            self.statuses[s.stack_status as usize] += 1;
        } else if item == NO_ITEM {
            // Counted nowhere: not in the whole-trace view, in no item.
            return;
        }
        let path = match known {
            Some(p) => p,
            None => self.path_of(r, s.pid, s.stack, Some(s.ip), s.cpumode),
        };
        if kept {
            let e = self.samples.entry((path, s.stack_status)).or_default();
            e.0 += 1;
            e.1 = e.1.saturating_add(s.period);
        }
        if item != NO_ITEM {
            let e = self.item_samples.entry(item, (path, s.stack_status));
            e.0 += 1;
            e.1 = e.1.saturating_add(s.period);
        }
        if kept {
            if let Some(t) = &mut self.timeline {
                t.samples.push(TimedSample { time_ns: s.time, pid: s.pid, tid: s.tid, path });
            }
        }
    }
    fn handle_switch(&mut self, s: &Switch, r: &mut Resolver) {
        self.last_time = self.last_time.max(s.time);
        if self.off_cpu_late {
            self.first_switch.entry(s.pid).or_insert(s.time);
        }
        self.causes.switch(s);
        if !self.causes.feeds_timelines(s) {
            return;
        }
        let prev = self.last_cpu.insert(s.tid, s.cpu);
        if s.kind == SwitchKind::In && prev.is_some_and(|c| c != s.cpu) && !self.by_tid.is_empty() {
            let item = self.item_at(s.tid, s.time);
            if let Some(m) = self.migrations.get_mut(item as usize) {
                *m += 1;
            }
        }
        if let Some(iv) = self.timelines.handle(s) {
            self.add_interval(r, &iv);
        }
    }
    fn handle_wakeup(&mut self, w: &Wakeup, r: &mut Resolver) {
        self.last_time = self.last_time.max(w.time);
        if self.causes.on {
            let path = if w.stack.is_none() { crate::causes::NO_PATH } else { self.path_of(r, w.pid, w.stack, None, CpuMode::Kernel) };
            self.causes.wakeup(w, path);
        }
    }
    fn handle_comm(&mut self, c: &Comm) {
        self.causes.comm(c);
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.last_time = self.last_time.max(m.time);
    }
    fn handle_exit(&mut self, t: &Task) {
        self.last_time = self.last_time.max(t.time);
    }
}
