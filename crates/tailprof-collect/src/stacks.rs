//! Call stacks and off-CPU stacks while recording (`record -g`, `--call-graph`,
//! `--off-cpu`).
//!
//! * `fp`: the kernel walks the kernel stack and the user frame-pointer chain
//!   (PERF_SAMPLE_CALLCHAIN); the chain becomes the stack as is.
//! * `dwarf[,BYTES]`: the kernel copies the user registers (only those the unwinder needs)
//!   and `BYTES` of the user stack per sample (PERF_SAMPLE_REGS_USER + STACK_USER), plus
//!   the kernel part of the callchain (`exclude_callchain_user`). The recorder unwinds each
//!   copy with [`tailprof_unwind`] as the round is written and keeps only the frames: raw
//!   copies never reach the trace.
//! * `lbr`: the last-branch-record call stack (PERF_SAMPLE_BRANCH_STACK with
//!   `PERF_SAMPLE_BRANCH_CALL_STACK`, user branches) on PMUs that have it, plus the
//!   kernel part of the callchain.
//!
//! Every stack gets a [`StackStatus`]; the writer counts them per status (shown by
//! `info`).
//!
//! Off-CPU: `attr.context_switch` on the side-band event gives PERF_RECORD_SWITCH (per
//! task) or SWITCH_CPU_WIDE (`-a`) records, which become [`Record::Switch`] (kind from
//! `PERF_RECORD_MISC_SWITCH_OUT[_PREEMPT]`). The stack where a thread went off the CPU
//! comes from a `sched:sched_switch` tracepoint event with a callchain (and, in dwarf
//! mode, user registers and stack), which the kernel writes just before the switch-out
//! record of the same thread on the same CPU: the recorder keeps that stack per thread
//! and attaches it to the thread's next switch-out record (within [`OFF_CPU_MATCH_NS`]).
//! The tracepoint samples themselves are not written. With items keyed by goroutine
//! (Go), the tracepoint also samples R14 from the user registers, and the switch-out
//! carries its value ([`Switch::item_key`]: the goroutine the thread was running).
//!
//! Causes (issue 21): `sched:sched_waking` (it fires in the waker's context) becomes a
//! [`Wakeup`] record with the waker's stack (the off-CPU event's call-graph mode) and the
//! wakee's tid from the raw record; switch records of CPU-wide events keep the other task
//! (`next_prev`). What no analysis needs is dropped here ([`CauseFilter`]): a wakeup is
//! kept only when its wakee is a *tracked* thread, and a record of the extra CPU-wide
//! switch event only when it is about an untracked thread while some tracked thread is
//! runnable (or names a tracked thread as its other task). Tracked threads: for a command
//! or `-p` target, every thread the target's own events have shown (its switch, COMM,
//! FORK records and markers), whose own switches come from the per-task events (so the
//! CPU-wide event's copies of them are dropped); system-wide, the threads that wrote an
//! item marker.

use std::collections::HashMap;

use std::collections::HashSet;

use tailprof_format::{Frame, Record, Sample, StackId, StackStatus, Switch, SwitchKind, Wakeup};
use tailprof_perf_abi::{regs_abi, Endian, SampleLayout, SwitchDirection};
use tailprof_unwind::{Limits, Mapping, Unwinder, UserRegs};

use crate::procfs;

pub use crate::attr::{CallGraph, DEFAULT_DWARF_STACK_SIZE, MAX_DWARF_STACK_SIZE};
/// A switch-out record takes the thread's sched_switch stack only if it is at most this
/// much older (the kernel writes the two back to back).
pub const OFF_CPU_MATCH_NS: u64 = 1_000_000;
/// `dyn_size` of a sample whose stack [`StackMaker::prepare`] unwound already (its 8 bytes
/// of "copy" are the token of the frames). The kernel's `dyn_size` never exceeds the size.
const PRE_UNWOUND: u64 = u64::MAX;
/// Stacks unwound at drain time and not yet written, at most (beyond it, samples wait
/// with their copies).
const MAX_PRE_UNWOUND: usize = 1 << 18;
/// Pending off-CPU stacks kept at most (one per thread between its sched_switch sample
/// and its switch-out record).
const MAX_PENDING_OFF_CPU: usize = 65536;

/// Stack and off-CPU options of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackOptions {
    pub call_graph: Option<CallGraph>,
    /// Record context switches and the stacks where threads went off the CPU.
    pub off_cpu: bool,
    /// With context switches, do not record wakeups and CPU-wide switches (causes,
    /// module docs).
    pub no_wakeups: bool,
    /// Record every waker's whole stack (kernel and user parts) in one unfiltered
    /// `sched_waking` event instead of the two split by the waker's context
    /// (`attr::waking_attr_full`; `record --full-waker-stacks`).
    pub full_waker_stacks: bool,
}

/// `kernel.perf_event_max_stack` (the kernel's callchain depth limit), 127 if unknown.
pub fn kernel_max_stack() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(127)
}

/// Entries of the core PMU's LBR (`/sys/bus/event_source/devices/cpu/caps/branches`,
/// e.g. 32 on Skylake), when it has one.
pub fn lbr_depth() -> Option<usize> {
    std::fs::read_to_string("/sys/bus/event_source/devices/cpu/caps/branches")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
}

/// What the recorder knows about one event's stack fields.
#[derive(Debug, Clone)]
struct EventStacks {
    layout: SampleLayout,
    /// The event has CALLCHAIN / REGS_USER+STACK_USER / BRANCH_STACK.
    any: bool,
    /// `sample_regs_user` of the attr, and the part the trace keeps (the header's).
    regs_attr: u64,
    regs_keep: u64,
}

/// Turns the stack fields of raw samples into interned stacks; tracks the address spaces
/// the DWARF unwinder needs; pairs sched_switch stacks with switch-out records.
pub(crate) struct StackMaker {
    mode: Option<CallGraph>,
    events: Vec<EventStacks>,
    /// The sched_switch tracepoint's event index (`u16::MAX`: none).
    pub(crate) off_cpu_event: u16,
    unwinder: Option<Unwinder>,
    frames: Vec<Frame>,
    /// Scratch for [`StackMaker::prepare`].
    trim_buf: Vec<u8>,
    /// Stacks unwound when their samples were drained: token → user frames (leaf first).
    pre: TokenMap,
    pre_next: u64,
    spare: Vec<Vec<Frame>>,
    max_stack: usize,
    /// Entries of the PMU's LBR (`caps/branches`), in `lbr` mode.
    lbr_depth: Option<usize>,
    /// tid → (time, stack, status, item key) of its last sched_switch sample.
    pending_off: HashMap<u32, (u64, StackId, StackStatus, Option<u64>)>,
    /// The perf register number of the item key (goroutine mode: R14) that sched_switch
    /// samples carry in their user registers, copied to the switch-out as
    /// [`Switch::item_key`] (`None`: no item key).
    pub(crate) item_key_reg: Option<u32>,
    /// Switch-out records that found no sched_switch stack.
    pub(crate) switch_out_without_stack: u64,
    /// Wakeups and CPU-wide switches (`None`: not recorded).
    pub(crate) causes: Option<CauseFilter>,
}

/// Tracked threads (bounded) and which of them are runnable: the recorder's filter of
/// wakeups and CPU-wide switch records (module docs).
#[derive(Debug, Default)]
pub(crate) struct CauseFilter {
    /// The sched_waking events' indexes (thread and interrupt context,
    /// `attr::waking_attrs`; `u16::MAX`: none).
    pub waking_events: [u16; 2],
    /// The extra CPU-wide context-switch event's index (`u16::MAX`: none).
    pub cpu_switch_event: u16,
    /// System-wide: only item threads are tracked.
    pub system_wide: bool,
    /// The per-task events carry no context switches (`attr.context_switch` is off on
    /// them): tracked threads' own switches come from the CPU-wide event too, so the
    /// kernel writes each switch once instead of twice (issue 21, recording cost).
    pub own_from_cpu_wide: bool,
    /// Where the wakee's tid is in the raw record: (offset, size).
    pub wakee_field: (usize, usize),
    tracked: HashSet<u32>,
    runnable: HashSet<u32>,
    /// Untracked threads whose name was written (a `Comm` read from /proc).
    described: HashSet<u32>,
    /// Counters for the summary: kept and dropped wakeups and CPU-wide switches, threads
    /// not tracked because the set was full.
    pub wakeups_kept: u64,
    pub wakeups_dropped: u64,
    pub cpu_switches_kept: u64,
    pub cpu_switches_dropped: u64,
    pub untracked_over_limit: u64,
}

/// Tracked threads kept at most; beyond it new threads are not tracked (counted).
pub const MAX_TRACKED_THREADS: usize = 1 << 20;
/// Untracked threads named at most (then no more names are read).
pub const MAX_DESCRIBED_THREADS: usize = 1 << 16;

impl CauseFilter {
    fn track(&mut self, tid: u32) {
        if tid == 0 || self.tracked.contains(&tid) {
            return;
        }
        if self.tracked.len() >= MAX_TRACKED_THREADS {
            self.untracked_over_limit += 1;
            return;
        }
        self.tracked.insert(tid);
    }

    /// A record about to be written (from the target's events or the markers).
    pub(crate) fn observe(&mut self, r: &Record) {
        match r {
            Record::Marker(m) => self.track(m.tid),
            _ if self.system_wide => {}
            Record::Comm(c) => self.track(c.tid),
            Record::Fork(t) => self.track(t.tid),
            Record::Exit(t) => {
                self.tracked.remove(&t.tid);
                self.runnable.remove(&t.tid);
            }
            _ => {}
        }
    }

    /// A switch record: update the runnable set; whether to keep it, and whether it is a
    /// tracked thread's own switch (`Some(true)`: it belongs to the thread timelines, with
    /// its off-CPU stack and without `next_prev`) or only to the CPU history (`Some(false)`).
    fn keep_switch(&mut self, w: &Switch, event: Option<u16>) -> Option<bool> {
        let cpu_wide_extra = event == Some(self.cpu_switch_event) && self.cpu_switch_event != u16::MAX;
        let own = !cpu_wide_extra || (self.own_from_cpu_wide && self.tracked.contains(&w.tid));
        if own {
            if !self.system_wide {
                self.track(w.tid);
            }
            if self.tracked.contains(&w.tid) {
                match w.kind {
                    SwitchKind::OutPreempted => {
                        self.runnable.insert(w.tid);
                    }
                    SwitchKind::In | SwitchKind::OutBlocked => {
                        self.runnable.remove(&w.tid);
                    }
                }
            }
            return Some(true);
        }
        let keep =
            !self.tracked.contains(&w.tid) && (!self.runnable.is_empty() || w.next_prev.is_some_and(|(_, t)| self.tracked.contains(&t)));
        if keep {
            self.cpu_switches_kept += 1;
        } else {
            self.cpu_switches_dropped += 1;
        }
        keep.then_some(false)
    }

    /// A wakeup of `wakee`: whether to keep it (then the wakee is runnable).
    fn keep_wakeup(&mut self, wakee: u32) -> bool {
        if self.tracked.contains(&wakee) {
            self.runnable.insert(wakee);
            self.wakeups_kept += 1;
            true
        } else {
            self.wakeups_dropped += 1;
            false
        }
    }
}

impl std::fmt::Debug for StackMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackMaker").field("mode", &self.mode).finish()
    }
}

impl StackMaker {
    /// `events[i]` = (decoder layout, attr regs mask, header regs mask) of event `i`.
    /// Whether samples are unwound as the rings are drained (DWARF stacks: see
    /// [`StackMaker::prepare`]), which needs the ring's stack copy in place.
    pub(crate) fn unwinds_while_draining(&self) -> bool {
        matches!(self.mode, Some(CallGraph::Dwarf { .. }))
    }

    pub(crate) fn new(mode: Option<CallGraph>, events: Vec<(SampleLayout, u64, u64)>, off_cpu_event: u16) -> StackMaker {
        use tailprof_perf_abi::sample_type as st;
        let events = events
            .into_iter()
            .map(|(layout, regs_attr, regs_keep)| EventStacks {
                any: layout.sample_type() & (st::CALLCHAIN | st::STACK_USER | st::BRANCH_STACK) != 0,
                layout,
                regs_attr,
                regs_keep,
            })
            .collect();
        let unwinder = matches!(mode, Some(CallGraph::Dwarf { .. })).then(|| {
            Unwinder::new(
                Box::new(|pid: u32, m: &Mapping| {
                    let (dev, inode) = m.file.unwrap_or((0, 0));
                    let e = procfs::MapsEntry {
                        start: m.start,
                        end: m.end,
                        prot: 5,
                        shared: false,
                        offset: m.pgoff,
                        dev,
                        inode,
                        path: m.path.to_string(),
                    };
                    procfs::open_mapped_file(pid, &e)
                }),
                Limits::default(),
            )
        });
        StackMaker {
            mode,
            events,
            off_cpu_event,
            unwinder,
            frames: Vec::with_capacity(256),
            trim_buf: Vec::new(),
            pre: TokenMap::default(),
            pre_next: 0,
            spare: Vec::new(),
            max_stack: kernel_max_stack(),
            lbr_depth: matches!(mode, Some(CallGraph::Lbr)).then(lbr_depth).flatten(),
            pending_off: HashMap::new(),
            item_key_reg: None,
            switch_out_without_stack: 0,
            causes: None,
        }
    }

    /// Record wakeups (`waking_events`, at most two) and filter them and the CPU-wide switches
    /// (`cpu_switch_event`, `u16::MAX`: none) by [`CauseFilter`].
    /// With `own_from_cpu_wide`, tracked threads' own switches come from the CPU-wide event
    /// ([`CauseFilter::own_from_cpu_wide`]).
    pub(crate) fn set_causes(
        &mut self,
        waking_events: &[u16],
        cpu_switch_event: u16,
        system_wide: bool,
        wakee_field: (usize, usize),
        own_from_cpu_wide: bool,
    ) {
        let mut w = [u16::MAX; 2];
        for (slot, &e) in w.iter_mut().zip(waking_events) {
            *slot = e;
        }
        self.causes =
            Some(CauseFilter { waking_events: w, cpu_switch_event, system_wide, wakee_field, own_from_cpu_wide, ..Default::default() });
    }

    /// Whether `event` is one of the sched_waking events.
    pub(crate) fn is_waking(&self, event: u16) -> bool {
        event != u16::MAX && self.causes.as_ref().is_some_and(|c| c.waking_events.contains(&event))
    }

    /// A sched_waking sample → a [`Wakeup`] record, `None` when filtered out or when its
    /// raw record has no wakee.
    pub(crate) fn wakeup<O: crate::session::RecordOutput + ?Sized>(&mut self, rec: &[u8], s: &Sample, out: &mut O) -> Option<Record> {
        let c = self.causes.as_mut()?;
        let ev = self.events.get(s.event as usize)?;
        let body = rec.get(tailprof_perf_abi::HEADER_LEN..)?;
        let v = ev.layout.decode(body, Endian::NATIVE).ok()?;
        let (off, size) = c.wakee_field;
        let wakee = v.raw()?.get(off..off + size)?;
        let wakee = u32::from_ne_bytes(wakee.try_into().ok()?);
        if !c.keep_wakeup(wakee) {
            return None;
        }
        let (stack, stack_status) = self.stack_of(rec, s.event, s.pid, true, out);
        Some(Record::Wakeup(Wakeup { time: s.time, pid: s.pid, tid: s.tid, cpu: s.cpu, wakee_tid: wakee, stack, stack_status }))
    }

    /// The name of the untracked thread a kept wakeup or CPU-wide switch is about (the
    /// waker, the task switched in, its other task), once per thread: a `Comm` record
    /// read from /proc (the CPU-wide events carry no side-band), to be written before it.
    pub(crate) fn describe(&mut self, r: &Record, out: &mut Vec<Record>) {
        let Some(c) = &mut self.causes else { return };
        let (time, a, b) = match r {
            Record::Wakeup(w) => (w.time, Some((w.pid, w.tid)), None),
            Record::Switch(w) if w.next_prev.is_some() => (w.time, Some((w.pid, w.tid)), w.next_prev),
            _ => return,
        };
        for (pid, tid) in [a, b].into_iter().flatten() {
            if tid == 0 || c.tracked.contains(&tid) || c.described.len() >= MAX_DESCRIBED_THREADS || !c.described.insert(tid) {
                continue;
            }
            if let Some(comm) = procfs::thread_comm(pid, tid) {
                out.push(Record::Comm(tailprof_format::Comm { time, pid, tid, exec: false, comm }));
            }
        }
    }

    /// A record about to be written: tracked threads (see [`CauseFilter::observe`]).
    pub(crate) fn observe_cause(&mut self, r: &Record) {
        if let Some(c) = &mut self.causes {
            c.observe(r);
        }
    }

    /// A dwarf-mode sample as drained from a ring, made small before it waits in the round
    /// queue for its round to be written (a 16 KiB stack copy would otherwise be copied
    /// out of the ring whole, the recorder's main cost):
    ///
    /// * If the process's address space is known, the stack is unwound now, reading only
    ///   the words of the copy the walk needs. A walk that reaches the outermost frame
    ///   through code with CFI ([`StackStatus::Complete`]) is kept here and the record
    ///   carries a token instead of the copy (size 8, `dyn_size` = [`PRE_UNWOUND`], which
    ///   the kernel never writes: its `dyn_size` is at most the size). Side-band is applied
    ///   to the address spaces in time order when rounds are written, so now the spaces may
    ///   lack a mapping of this round: a walk through such code does not reach the
    ///   outermost frame through CFI, and is redone then.
    /// * Otherwise the copy is cut to the bytes the kernel actually copied (`dyn_size`,
    ///   rounded up to 8), and unwound when written.
    ///
    /// Any other record, or one that does not decode, is returned as it is.
    pub(crate) fn prepare<'a>(&'a mut self, rec: &'a [u8], event: Option<u16>) -> &'a [u8] {
        if !self.unwinds_while_draining() {
            return rec;
        }
        let Some(ev) = event.and_then(|e| self.events.get(e as usize)) else { return rec };
        let Some(body) = rec.get(tailprof_perf_abi::HEADER_LEN..) else { return rec };
        let Ok(v) = ev.layout.decode(body, Endian::NATIVE) else { return rec };
        let Some(su) = v.stack_user() else { return rec };
        let size = su.data.len();
        let Some(data_at) = (su.data.as_ptr() as usize).checked_sub(rec.as_ptr() as usize) else { return rec };
        // The size word before the copy, the dyn_size word after it.
        if size < 8 || data_at < tailprof_perf_abi::HEADER_LEN + 8 || data_at + size + 8 > rec.len() {
            return rec;
        }
        let (Some(u), Some(regs), Some(pid)) = (&mut self.unwinder, v.regs_user(), v.pid()) else { return rec };
        let ur = (regs.abi != regs_abi::NONE).then(|| UserRegs::from_perf(regs.mask, |i| regs.values.get(i))).flatten();
        if let Some(ur) = ur.filter(|_| self.pre.len() < MAX_PRE_UNWOUND && u.knows(pid) && !su.valid().is_empty()) {
            let mut f = self.spare.pop().unwrap_or_default();
            f.clear();
            if u.unwind_if_complete(pid, &ur, su.valid(), &mut f) == StackStatus::Complete {
                let token = self.pre_next;
                self.pre_next += 1;
                self.pre.insert(token, f);
                let b = &mut self.trim_buf;
                b.clear();
                b.extend_from_slice(&rec[..data_at - 8]);
                for w in [8, token, PRE_UNWOUND] {
                    b.extend_from_slice(&w.to_ne_bytes());
                }
                b.extend_from_slice(&rec[data_at + size + 8..]);
                let len = b.len() as u16;
                b[6..8].copy_from_slice(&len.to_ne_bytes());
                return &self.trim_buf;
            }
            // Not counted: walked again (and counted) when the stack is interned.
            if self.spare.len() < 64 {
                self.spare.push(f);
            }
        }
        let keep = (su.valid().len().div_ceil(8) * 8).max(8);
        if size < keep + 256 {
            return rec;
        }
        let b = &mut self.trim_buf;
        b.clear();
        b.extend_from_slice(&rec[..data_at - 8]);
        b.extend_from_slice(&(keep as u64).to_ne_bytes());
        b.extend_from_slice(&rec[data_at..data_at + keep]);
        b.extend_from_slice(&rec[data_at + size..]);
        let len = b.len() as u16;
        b[6..8].copy_from_slice(&len.to_ne_bytes());
        &self.trim_buf
    }

    /// Unwind information of JIT code (jitdump UNWINDING_INFO, CODE_LOAD, CODE_MOVE) for
    /// the unwinder (dwarf mode only).
    pub(crate) fn jit_unwind(&mut self, ops: Vec<crate::jit::JitUnwindOp>) {
        let Some(u) = &mut self.unwinder else { return };
        for op in ops {
            match op {
                crate::jit::JitUnwindOp::Load { pid, info } => {
                    u.add_jit(pid, info);
                }
                crate::jit::JitUnwindOp::Move { pid, from, to, size } => u.move_jit(pid, from, to, size),
            }
        }
    }

    /// The unwinder's counters (zero outside dwarf mode).
    pub(crate) fn unwind_stats(&self) -> tailprof_unwind::UnwindStats {
        self.unwinder.as_ref().map(Unwinder::stats).unwrap_or_default()
    }

    /// Follow the side-band that changes address spaces (dwarf mode only): the unwinder's
    /// one record glue ([`Unwinder::observe`], shared with `import`). `file` is the mapped
    /// file's `(st_dev, st_ino)` from the raw MMAP2 record.
    pub(crate) fn observe(&mut self, r: &Record, file: Option<(u64, u64)>) {
        if let Some(u) = &mut self.unwinder {
            u.observe(r, file);
        }
    }

    /// Fill `s.stack`/`s.stack_status` from the raw sample `rec` (header included), and
    /// drop the registers that were only sampled for unwinding.
    pub(crate) fn sample<O: crate::session::RecordOutput + ?Sized>(&mut self, rec: &[u8], s: &mut Sample, out: &mut O) {
        let Some(ev) = self.events.get(s.event as usize) else { return };
        if ev.regs_attr != ev.regs_keep {
            keep_regs(&mut s.regs, ev.regs_attr, ev.regs_keep);
        }
        if !ev.any {
            return;
        }
        let (id, status) = self.stack_of(rec, s.event, s.pid, s.cpumode.is_kernel(), out);
        s.stack = id;
        s.stack_status = status;
    }

    /// A sched_switch tracepoint sample: remember its stack (and the item key register of
    /// the thread's user registers) for the thread's switch-out.
    pub(crate) fn off_cpu_sample<O: crate::session::RecordOutput + ?Sized>(&mut self, rec: &[u8], s: &Sample, out: &mut O) {
        let (id, status) = self.stack_of(rec, s.event, s.pid, true, out);
        let key = self.item_key_reg.and_then(|reg| self.user_reg(rec, s.event, reg));
        if self.pending_off.len() >= MAX_PENDING_OFF_CPU {
            self.pending_off.clear();
        }
        self.pending_off.insert(s.tid, (s.time, id, status, key));
    }

    /// User register `reg` (perf's number) of a raw sample of `event`; `None` when the
    /// event does not sample it or the task has no user registers (a kernel thread).
    fn user_reg(&self, rec: &[u8], event: u16, reg: u32) -> Option<u64> {
        let ev = self.events.get(event as usize)?;
        let v = ev.layout.decode(rec.get(tailprof_perf_abi::HEADER_LEN..)?, Endian::NATIVE).ok()?;
        let regs = v.regs_user()?;
        if regs.abi == regs_abi::NONE {
            return None;
        }
        regs.get(reg)
    }

    /// A PERF_RECORD_SWITCH / SWITCH_CPU_WIDE record → a Switch record (`None` for the
    /// idle task or a malformed record).
    pub(crate) fn switch(&mut self, rec: &[u8], event: Option<u16>, ring_cpu: u32) -> Option<Record> {
        let ev = self.events.get(event.unwrap_or(0) as usize).or(self.events.first())?;
        let sw = ev.layout.decode_switch(rec, Endian::NATIVE).ok()?;
        let (pid, tid) = (sw.sample_id.pid.unwrap_or(0), sw.sample_id.tid.unwrap_or(0));
        if tid == 0 {
            return None;
        }
        let time = sw.sample_id.time.unwrap_or(0);
        let kind = match sw.direction {
            SwitchDirection::In => SwitchKind::In,
            SwitchDirection::OutPreempted => SwitchKind::OutPreempted,
            SwitchDirection::OutBlocked => SwitchKind::OutBlocked,
        };
        let mut w = Switch {
            time,
            pid,
            tid,
            cpu: sw.sample_id.cpu.unwrap_or(ring_cpu),
            kind,
            stack: StackId::NONE,
            stack_status: StackStatus::None,
            next_prev: sw.next_prev,
            item_key: None,
        };
        if let Some(c) = &mut self.causes {
            let own = c.keep_switch(&w, event)?;
            let extra = event == Some(c.cpu_switch_event) && c.cpu_switch_event != u16::MAX;
            if !own {
                return Some(Record::Switch(w));
            }
            if extra {
                // A tracked thread's own switch, written by the CPU-wide event (the
                // per-task events have no context switches): as the per-task record was.
                w.next_prev = None;
            }
        }
        if kind.is_out() && self.off_cpu_event != u16::MAX {
            match self.pending_off.remove(&tid) {
                Some((t, id, st, key)) if time.saturating_sub(t) <= OFF_CPU_MATCH_NS => {
                    (w.stack, w.stack_status, w.item_key) = (id, st, key)
                }
                _ => self.switch_out_without_stack += 1,
            }
        }
        Some(Record::Switch(w))
    }

    /// The stack of one raw sample of `event`.
    fn stack_of<O: crate::session::RecordOutput + ?Sized>(
        &mut self,
        rec: &[u8],
        event: u16,
        pid: u32,
        kernel_sample: bool,
        out: &mut O,
    ) -> (StackId, StackStatus) {
        let Some(ev) = self.events.get(event as usize) else { return (StackId::NONE, StackStatus::None) };
        let Some(body) = rec.get(tailprof_perf_abi::HEADER_LEN..) else { return (StackId::NONE, StackStatus::UnwindError) };
        let Ok(v) = ev.layout.decode(body, Endian::NATIVE) else { return (StackId::NONE, StackStatus::UnwindError) };
        self.frames.clear();
        let chain = v.callchain().map(|c| {
            let n = c.len();
            (tailprof_unwind::callchain_frames(c.iter(), &mut self.frames), n)
        });
        let status = match (self.mode, v.stack_user(), v.regs_user()) {
            (Some(CallGraph::Dwarf { .. }), Some(stack), Some(regs)) => {
                if regs.abi == regs_abi::NONE {
                    // A kernel thread: no user part.
                    StackStatus::UserMissing
                } else {
                    let ur = UserRegs::from_perf(regs.mask, |i| regs.values.get(i));
                    let token = (stack.dyn_size == PRE_UNWOUND && stack.data.len() == 8)
                        .then(|| u64::from_ne_bytes(stack.data.try_into().unwrap_or_default()));
                    match (ur, &mut self.unwinder) {
                        (Some(_), _) if token.is_some_and(|t| take_pre_unwound(&mut self.pre, &mut self.spare, &mut self.frames, t)) => {
                            StackStatus::Complete
                        }
                        (Some(ur), _) if token.is_some() => {
                            self.frames.push(Frame::user(ur.ip));
                            StackStatus::UnwindError
                        }
                        (Some(ur), Some(u)) if !stack.valid().is_empty() => u.unwind(pid, &ur, stack.valid(), &mut self.frames),
                        (Some(ur), _) => {
                            self.frames.push(Frame::user(ur.ip));
                            StackStatus::CopyExhausted
                        }
                        (None, _) => StackStatus::UserMissing,
                    }
                }
            }
            (Some(CallGraph::Lbr), _, _) if v.branch_stack().is_some() => {
                // As perf resolves LBR call graphs: the kernel part of the callchain, the
                // most recent call's target, then each entry's source (the call sites).
                let b = v.branch_stack().expect("checked");
                self.frames.retain(|f| f.kind == tailprof_format::FrameKind::Kernel);
                let before = self.frames.len();
                tailprof_unwind::lbr_frames(b.iter().map(|e| (e.from, e.to)), &mut self.frames);
                // A full LBR (as many entries as the PMU has) lost the older calls;
                // otherwise the report judges the chain by its outermost frame.
                let entries = self.frames.len().saturating_sub(before + 1);
                if self.lbr_depth.is_some_and(|d| entries >= d) {
                    StackStatus::MaxDepth
                } else {
                    StackStatus::Unknown
                }
            }
            _ => match chain {
                Some((c, n)) => tailprof_unwind::callchain_status(&c, n, !kernel_sample, self.max_stack),
                None => StackStatus::None,
            },
        };
        if self.frames.is_empty() {
            return (StackId::NONE, if status == StackStatus::None { StackStatus::None } else { StackStatus::UserMissing });
        }
        let status = if self.frames.len() > tailprof_format::MAX_STACK_DEPTH { StackStatus::MaxDepth } else { status };
        (out.intern_stack(&self.frames), status)
    }
}

/// Pre-unwound frames by token. Tokens are our own sequence numbers (one insert and one
/// removal per sample): a multiplicative hash, not SipHash.
type TokenMap = HashMap<u64, Vec<Frame>, std::hash::BuildHasherDefault<TokenHasher>>;

#[derive(Default)]
struct TokenHasher(u64);

impl std::hash::Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: sequential tokens spread over all bits (hashbrown uses the
        // top 7 bits as tags).
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The user frames [`StackMaker::prepare`] unwound for `token`, appended to `frames`;
/// `false` if there are none.
fn take_pre_unwound(pre: &mut TokenMap, spare: &mut Vec<Vec<Frame>>, frames: &mut Vec<Frame>, token: u64) -> bool {
    match pre.remove(&token) {
        Some(f) => {
            frames.extend_from_slice(&f);
            if spare.len() < 64 {
                spare.push(f);
            }
            true
        }
        None => false,
    }
}

/// Keep only the registers of `keep` (a subset of `attr`) in `regs` (values in
/// ascending bit order of `attr`).
fn keep_regs(regs: &mut Vec<u64>, attr: u64, keep: u64) {
    let mut w = 0;
    let mut i = 0;
    for bit in 0..64 {
        if attr & (1 << bit) == 0 {
            continue;
        }
        if i >= regs.len() {
            break;
        }
        if keep & (1 << bit) != 0 {
            regs[w] = regs[i];
            w += 1;
        }
        i += 1;
    }
    regs.truncate(w);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_call_graph() {
        assert_eq!(CallGraph::parse("fp"), Ok(CallGraph::Fp));
        assert_eq!(CallGraph::parse("lbr"), Ok(CallGraph::Lbr));
        assert_eq!(CallGraph::parse("dwarf"), Ok(CallGraph::Dwarf { stack_size: DEFAULT_DWARF_STACK_SIZE }));
        assert_eq!(CallGraph::parse("dwarf,4096"), Ok(CallGraph::Dwarf { stack_size: 4096 }));
        assert!(CallGraph::parse("dwarf,70000").unwrap_err().to_string().contains("65528"));
        assert!(CallGraph::parse("dwarf,100").is_err());
        assert!(CallGraph::parse("fp,10").is_err());
        assert!(CallGraph::parse("lbrx").unwrap_err().to_string().contains("fp, dwarf"));
    }

    /// A raw dwarf sample: header, ip, tid, time, regs (abi + 3), stack copy of `size`
    /// bytes with `dyn_size` valid, then a weight.
    fn dwarf_sample(size: usize, dyn_size: u64) -> (SampleLayout, Vec<u8>) {
        use tailprof_perf_abi::sample_type as st;
        let layout = SampleLayout::new(st::IP | st::TID | st::TIME | st::REGS_USER | st::STACK_USER | st::WEIGHT)
            .with_regs_user(tailprof_unwind::UNWIND_REGS_MASK);
        let mut r = vec![0u8; 8];
        for w in [0x401000u64, 7 << 32 | 5, 123, 2, 0x10, 0x7000, 0x401000, size as u64] {
            r.extend_from_slice(&w.to_ne_bytes());
        }
        r.extend((0..size).map(|i| if (i as u64) < dyn_size { (i % 251) as u8 + 1 } else { 0 }));
        r.extend_from_slice(&dyn_size.to_ne_bytes());
        r.extend_from_slice(&99u64.to_ne_bytes());
        r[0..4].copy_from_slice(&tailprof_perf_abi::record_type::SAMPLE.to_ne_bytes());
        let n = r.len() as u16;
        r[6..8].copy_from_slice(&n.to_ne_bytes());
        (layout, r)
    }

    #[test]
    fn trim_keeps_the_copied_bytes_and_every_other_field() {
        for (size, dyn_size) in [(16384usize, 4424u64), (16384, 0), (16384, 13), (4096, 4096), (4096, 4000)] {
            let (layout, rec) = dwarf_sample(size, dyn_size);
            let mut sm = StackMaker::new(Some(CallGraph::Dwarf { stack_size: size as u32 }), vec![(layout, 0, 0)], u16::MAX);
            let out = sm.prepare(&rec, Some(0)).to_vec();
            let hdr = u16::from_ne_bytes([out[6], out[7]]) as usize;
            assert_eq!(hdr, out.len());
            if size as u64 - dyn_size < 256 + 8 {
                assert_eq!(out, rec, "nothing worth cutting");
            } else {
                assert_eq!(out.len(), rec.len() - size + (dyn_size.div_ceil(8) * 8).max(8) as usize);
            }
            let a = layout.decode(&rec[8..], Endian::NATIVE).unwrap();
            let b = layout.decode(&out[8..], Endian::NATIVE).unwrap();
            assert_eq!(a.stack_user().unwrap().valid(), b.stack_user().unwrap().valid());
            assert_eq!(b.stack_user().unwrap().dyn_size, dyn_size);
            assert_eq!((a.ip(), a.tid(), a.time(), a.weight()), (b.ip(), b.tid(), b.time(), b.weight()));
            assert_eq!(a.regs_user().unwrap().values.to_vec(), b.regs_user().unwrap().values.to_vec());
            // Not dwarf mode, unknown event, garbage: untouched.
            let mut fp = StackMaker::new(Some(CallGraph::Fp), vec![(layout, 0, 0)], u16::MAX);
            assert_eq!(fp.prepare(&rec, Some(0)), &rec[..]);
            assert_eq!(sm.prepare(&rec, Some(3)), &rec[..]);
            assert_eq!(sm.prepare(&rec[..40], Some(0)), &rec[..40]);
        }
    }

    #[test]
    fn cause_filter_keeps_what_the_analysis_needs() {
        let mut c = CauseFilter { waking_events: [5, u16::MAX], cpu_switch_event: 6, ..Default::default() };
        let sw = |tid: u32, kind, next_prev| Switch { time: 1, pid: tid, tid, kind, next_prev, ..Default::default() };
        // Thread 10 of the target, seen through its per-task switch record.
        assert!(c.keep_switch(&sw(10, SwitchKind::In, None), Some(0)).is_some());
        assert!(!c.keep_wakeup(99), "the wakee is not tracked");
        // CPU-wide records: another thread while no target thread is runnable, dropped; a
        // copy of a tracked thread's own switch, dropped.
        assert!(c.keep_switch(&sw(50, SwitchKind::In, Some((1, 1))), Some(6)).is_none());
        assert!(c.keep_switch(&sw(10, SwitchKind::OutPreempted, Some((50, 50))), Some(6)).is_none());
        // Thread 10 preempted: who runs meanwhile is kept.
        assert!(c.keep_switch(&sw(10, SwitchKind::OutPreempted, None), Some(0)).is_some());
        assert!(c.keep_switch(&sw(50, SwitchKind::In, Some((10, 10))), Some(6)).is_some());
        assert!(c.keep_switch(&sw(10, SwitchKind::In, None), Some(0)).is_some());
        assert!(c.keep_switch(&sw(60, SwitchKind::In, Some((50, 50))), Some(6)).is_none());
        // A record naming a tracked thread as the other task is kept.
        assert!(c.keep_switch(&sw(60, SwitchKind::OutPreempted, Some((10, 10))), Some(6)).is_some());
        // A kept wakeup makes its wakee runnable until it runs.
        assert!(c.keep_wakeup(10));
        assert!(c.keep_switch(&sw(60, SwitchKind::In, Some((50, 50))), Some(6)).is_some());
        assert!(c.keep_switch(&sw(10, SwitchKind::In, None), Some(0)).is_some());
        assert!(c.keep_switch(&sw(61, SwitchKind::In, Some((50, 50))), Some(6)).is_none());
        assert_eq!((c.wakeups_kept, c.wakeups_dropped), (1, 1));
        // An exited thread is forgotten.
        c.observe(&Record::Exit(tailprof_format::Task { pid: 10, tid: 10, ..Default::default() }));
        assert!(!c.keep_wakeup(10));
        // System-wide: only threads that wrote a marker are tracked.
        let mut s = CauseFilter { system_wide: true, cpu_switch_event: u16::MAX, ..Default::default() };
        assert!(s.keep_switch(&sw(7, SwitchKind::In, Some((0, 0))), Some(0)).is_some());
        assert!(!s.keep_wakeup(7));
        s.observe(&Record::Marker(tailprof_format::Marker { tid: 7, ..Default::default() }));
        assert!(s.keep_wakeup(7));
    }

    /// Issue 21, recording cost: with no context switches on the per-task events, a
    /// tracked thread's own switches come from the CPU-wide event; they are kept as the
    /// per-task records were (no `next_prev`, with the sched_switch stack), and the
    /// filter of the other threads' records is unchanged.
    #[test]
    fn own_switches_from_the_cpu_wide_event_are_kept_as_per_task_records() {
        use tailprof_perf_abi::{record_type, sample_type as st, SampleLayout};
        let layout = SampleLayout::new(st::TID | st::TIME | st::CPU).with_sample_id_all(true);
        let mut sm = StackMaker::new(None, vec![(layout, 0, 0); 3], 1);
        sm.set_causes(&[2], 0, false, (24, 4), true);
        // A CPU-wide switch record: header, next_prev pid/tid, sample_id (pid, tid, time, cpu).
        let rec = |tid: u32, out: bool, preempt: bool, other: u32, time: u64| {
            let misc: u16 = if out { 0x2000 } else { 0 } | if preempt { 0x4000 } else { 0 };
            let mut r = record_type::SWITCH_CPU_WIDE.to_ne_bytes().to_vec();
            r.extend_from_slice(&misc.to_ne_bytes());
            r.extend_from_slice(&40u16.to_ne_bytes());
            for v in [other, other, tid, tid] {
                r.extend_from_slice(&v.to_ne_bytes());
            }
            r.extend_from_slice(&time.to_ne_bytes());
            r.extend_from_slice(&1u32.to_ne_bytes());
            r.extend_from_slice(&0u32.to_ne_bytes());
            r
        };
        // Untracked: no target thread is runnable, dropped.
        assert!(sm.switch(&rec(10, true, true, 50, 100), Some(0), 1).is_none());
        sm.observe_cause(&Record::Comm(tailprof_format::Comm { pid: 10, tid: 10, ..Default::default() }));
        // Its off-CPU stack (a sched_switch sample) is attached to its switch-out.
        sm.pending_off.insert(10, (150, StackId(7), StackStatus::Complete, None));
        let Some(Record::Switch(w)) = sm.switch(&rec(10, true, true, 50, 200), Some(0), 1) else { panic!("dropped") };
        assert_eq!((w.tid, w.kind, w.next_prev, w.stack, w.cpu), (10, SwitchKind::OutPreempted, None, StackId(7), 1));
        // Thread 10 is runnable: who runs instead is kept, with its other task.
        let Some(Record::Switch(o)) = sm.switch(&rec(50, false, false, 10, 201), Some(0), 1) else { panic!("dropped") };
        assert_eq!((o.tid, o.next_prev), (50, Some((10, 10))));
        let Some(Record::Switch(i)) = sm.switch(&rec(10, false, false, 50, 300), Some(0), 1) else { panic!("dropped") };
        assert_eq!((i.kind, i.next_prev), (SwitchKind::In, None));
        // Nobody runnable again: others' records are dropped.
        assert!(sm.switch(&rec(60, false, false, 0, 301), Some(0), 0).is_none());
        // Without the mode, the CPU-wide copy of a tracked thread's switch is dropped.
        let mut old = StackMaker::new(None, vec![(layout, 0, 0); 3], 1);
        old.set_causes(&[2], 0, false, (24, 4), false);
        old.observe_cause(&Record::Comm(tailprof_format::Comm { pid: 10, tid: 10, ..Default::default() }));
        assert!(old.switch(&rec(10, true, true, 50, 200), Some(0), 1).is_none());
    }

    /// Issue 22 (Go off-CPU time by goroutine): in goroutine mode the sched_switch sample
    /// carries R14 in its user registers; the thread's switch-out record gets its value as
    /// `item_key`, the switch-in none. A kernel thread (no user registers) gives none.
    #[test]
    fn switch_out_carries_the_goroutine_register_of_its_sched_switch_sample() {
        use tailprof_perf_abi::{record_type, regs_abi, sample_type as st, SampleLayout};
        const R14: u32 = 22;
        let sample_layout = SampleLayout::new(st::TID | st::TIME | st::CPU | st::REGS_USER).with_regs_user(1 << R14);
        let side = SampleLayout::new(st::TID | st::TIME | st::CPU).with_sample_id_all(true);
        let mut sm = StackMaker::new(None, vec![(side, 0, 0), (sample_layout, 1 << R14, 0)], 1);
        sm.item_key_reg = Some(R14);
        let words = |v: &[u64]| -> Vec<u8> { v.iter().flat_map(|w| w.to_ne_bytes()).collect() };
        // A sched_switch sample of thread 10 (pid/tid, time, cpu/res, abi, r14).
        let sched = |tid: u32, time: u64, abi: u64| {
            let mut body = words(&[(tid as u64) << 32 | tid as u64, time, 0]);
            body.extend_from_slice(&abi.to_ne_bytes());
            if abi != regs_abi::NONE {
                body.extend_from_slice(&0xc000_1000u64.to_ne_bytes());
            }
            let mut r = record_type::SAMPLE.to_ne_bytes().to_vec();
            r.extend_from_slice(&0u16.to_ne_bytes());
            r.extend_from_slice(&(8 + body.len() as u16).to_ne_bytes());
            r.extend_from_slice(&body);
            r
        };
        // A per-task switch record: header, sample_id (pid/tid, time, cpu/res).
        let switch = |tid: u32, out: bool, time: u64| {
            let misc: u16 = if out { 0x2000 } else { 0 };
            let mut r = record_type::SWITCH.to_ne_bytes().to_vec();
            r.extend_from_slice(&misc.to_ne_bytes());
            r.extend_from_slice(&32u16.to_ne_bytes());
            r.extend_from_slice(&words(&[(tid as u64) << 32 | tid as u64, time, 0]));
            r
        };
        let mut out = crate::session::VecOutput::default();
        let s = Sample { time: 100, pid: 10, tid: 10, event: 1, ..Default::default() };
        sm.off_cpu_sample(&sched(10, 100, regs_abi::ABI_64), &s, &mut out);
        let Some(Record::Switch(w)) = sm.switch(&switch(10, true, 101), Some(0), 0) else { panic!("no switch") };
        assert_eq!((w.kind, w.item_key), (SwitchKind::OutBlocked, Some(0xc000_1000)));
        let Some(Record::Switch(i)) = sm.switch(&switch(10, false, 200), Some(0), 0) else { panic!("no switch") };
        assert_eq!((i.kind, i.item_key), (SwitchKind::In, None));
        // No user registers: no key.
        let s = Sample { time: 300, pid: 11, tid: 11, event: 1, ..Default::default() };
        sm.off_cpu_sample(&sched(11, 300, regs_abi::NONE), &s, &mut out);
        let Some(Record::Switch(w)) = sm.switch(&switch(11, true, 301), Some(0), 0) else { panic!("no switch") };
        assert_eq!(w.item_key, None);
    }

    #[test]
    fn untracked_threads_are_named_once() {
        let me = std::process::id();
        let mut sm = StackMaker::new(None, Vec::new(), u16::MAX);
        sm.set_causes(&[0], 1, false, (24, 4), false);
        let w = Record::Wakeup(Wakeup { time: 5, pid: me, tid: me, wakee_tid: 1, ..Default::default() });
        let mut out = Vec::new();
        sm.describe(&w, &mut out);
        sm.describe(&w, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(matches!(&out[0], Record::Comm(c) if c.tid == me && c.time == 5 && !c.comm.is_empty()));
    }

    #[test]
    fn keep_regs_drops_unwind_only_registers() {
        // attr: ax(0), bp(6), sp(7), ip(8), r13(21); keep ax and r13.
        let attr = 1 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 21;
        let mut r = vec![10, 60, 70, 80, 210];
        keep_regs(&mut r, attr, 1 | 1 << 21);
        assert_eq!(r, [10, 210]);
        let mut r = vec![60, 70, 80];
        keep_regs(&mut r, 1 << 6 | 1 << 7 | 1 << 8, 0);
        assert!(r.is_empty());
    }
}
