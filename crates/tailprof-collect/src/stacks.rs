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
//! The tracepoint samples themselves are not written.

use std::collections::HashMap;
use std::sync::Arc;

use tailprof_format::{Frame, Mmap, Record, Sample, StackId, StackStatus, Switch, SwitchKind};
use tailprof_perf_abi::{regs_abi, Endian, SampleLayout, SwitchDirection};
use tailprof_unwind::{Limits, Mapping, Unwinder, UserRegs};

use crate::procfs;

/// Bytes of user stack copied per sample in dwarf mode unless `dwarf,BYTES` says
/// otherwise. Measured (docs/STACKS.md): the 99th percentile of what reaching the
/// outermost frame takes on PostgreSQL 15 under pgbench, python3 and a Rust program.
pub const DEFAULT_DWARF_STACK_SIZE: u32 = 16384;
/// The kernel's limit: a sample record must fit in 64 KiB (perf allows at most 65528).
pub const MAX_DWARF_STACK_SIZE: u32 = 65528;
/// A switch-out record takes the thread's sched_switch stack only if it is at most this
/// much older (the kernel writes the two back to back).
pub const OFF_CPU_MATCH_NS: u64 = 1_000_000;
/// Pending off-CPU stacks kept at most (one per thread between its sched_switch sample
/// and its switch-out record).
const MAX_PENDING_OFF_CPU: usize = 65536;

/// How call stacks are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// Kernel callchains through frame pointers (kernel and user).
    Fp,
    /// User registers and a copy of `stack_size` bytes of the user stack per sample,
    /// unwound with DWARF CFI while recording.
    Dwarf { stack_size: u32 },
    /// The LBR call stack (needs an Intel PMU with LBR call-stack mode).
    Lbr,
}

impl CallGraph {
    /// `fp`, `dwarf`, `dwarf,BYTES`, `lbr` (perf's syntax).
    pub fn parse(s: &str) -> Result<CallGraph, String> {
        let (mode, arg) = match s.split_once(',') {
            Some((m, a)) => (m.trim(), Some(a.trim())),
            None => (s.trim(), None),
        };
        match (mode, arg) {
            ("fp", None) => Ok(CallGraph::Fp),
            ("lbr", None) => Ok(CallGraph::Lbr),
            ("dwarf", None) => Ok(CallGraph::Dwarf { stack_size: DEFAULT_DWARF_STACK_SIZE }),
            ("dwarf", Some(n)) => {
                let n: u32 = n.parse().map_err(|_| format!("--call-graph dwarf,{n}: the stack size must be a number of bytes"))?;
                if n == 0 || n > MAX_DWARF_STACK_SIZE || n % 8 != 0 {
                    return Err(format!(
                        "--call-graph dwarf,{n}: the stack size must be a multiple of 8 between 8 and {MAX_DWARF_STACK_SIZE}"
                    ));
                }
                Ok(CallGraph::Dwarf { stack_size: n })
            }
            (m, Some(_)) if m == "fp" || m == "lbr" => Err(format!("--call-graph {s}: only dwarf takes a size")),
            _ => Err(format!("--call-graph {s}: unknown mode; use fp, dwarf[,BYTES] or lbr")),
        }
    }

    /// The name stored in the trace header (`extra["call_graph"]`).
    pub fn name(&self) -> String {
        match self {
            CallGraph::Fp => "fp".into(),
            CallGraph::Dwarf { stack_size } => format!("dwarf,{stack_size}"),
            CallGraph::Lbr => "lbr".into(),
        }
    }
}

/// Stack and off-CPU options of a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackOptions {
    pub call_graph: Option<CallGraph>,
    /// Record context switches and the stacks where threads went off the CPU.
    pub off_cpu: bool,
}

/// `kernel.perf_event_max_stack` (the kernel's callchain depth limit), 127 if unknown.
pub fn kernel_max_stack() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
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
    max_stack: usize,
    /// tid → (time, stack, status) of its last sched_switch sample.
    pending_off: HashMap<u32, (u64, StackId, StackStatus)>,
    /// Switch-out records that found no sched_switch stack.
    pub(crate) switch_out_without_stack: u64,
}

impl std::fmt::Debug for StackMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackMaker").field("mode", &self.mode).finish()
    }
}

impl StackMaker {
    /// `events[i]` = (decoder layout, attr regs mask, header regs mask) of event `i`.
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
            max_stack: kernel_max_stack(),
            pending_off: HashMap::new(),
            switch_out_without_stack: 0,
        }
    }

    /// Follow the side-band that changes address spaces (dwarf mode only).
    pub(crate) fn observe(&mut self, r: &Record, file: Option<(u64, u64)>) {
        let Some(u) = &mut self.unwinder else { return };
        match r {
            Record::Mmap(m) => observe_mmap(u, m, file),
            Record::Comm(c) if c.exec => u.exec(c.pid),
            Record::Fork(t) if t.pid != t.ppid => u.fork(t.ppid, t.pid),
            Record::Exit(t) if t.pid == t.tid => u.exit(t.pid),
            _ => {}
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

    /// A sched_switch tracepoint sample: remember its stack for the thread's switch-out.
    pub(crate) fn off_cpu_sample<O: crate::session::RecordOutput + ?Sized>(&mut self, rec: &[u8], s: &Sample, out: &mut O) {
        let (id, status) = self.stack_of(rec, s.event, s.pid, true, out);
        if self.pending_off.len() >= MAX_PENDING_OFF_CPU {
            self.pending_off.clear();
        }
        self.pending_off.insert(s.tid, (s.time, id, status));
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
        let (mut stack, mut stack_status) = (StackId::NONE, StackStatus::None);
        if kind.is_out() && self.off_cpu_event != u16::MAX {
            match self.pending_off.remove(&tid) {
                Some((t, id, st)) if time.saturating_sub(t) <= OFF_CPU_MATCH_NS => (stack, stack_status) = (id, st),
                _ => self.switch_out_without_stack += 1,
            }
        }
        Some(Record::Switch(Switch { time, pid, tid, cpu: sw.sample_id.cpu.unwrap_or(ring_cpu), kind, stack, stack_status }))
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
                    match (ur, &mut self.unwinder) {
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
                tailprof_unwind::lbr_frames(b.iter().map(|e| (e.from, e.to)), &mut self.frames);
                StackStatus::Unknown
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

fn observe_mmap(u: &mut Unwinder, m: &Mmap, file: Option<(u64, u64)>) {
    if m.cpumode.is_kernel() || !m.path.starts_with('/') || m.len == 0 {
        return;
    }
    // Only executable mappings are reported by the kernel without mmap_data; /proc
    // synthesis only writes executable ones too. prot 0 means unknown (MMAP).
    if m.prot != 0 && m.prot & libc::PROT_EXEC as u32 == 0 {
        return;
    }
    u.add_mapping(
        m.pid,
        Mapping {
            start: m.start,
            end: m.start.saturating_add(m.len),
            pgoff: m.pgoff,
            file: file.filter(|&k| k != (0, 0)),
            path: Arc::from(m.path.as_str()),
            build_id: None,
        },
    );
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
        assert!(CallGraph::parse("dwarf,70000").unwrap_err().contains("65528"));
        assert!(CallGraph::parse("dwarf,100").is_err());
        assert!(CallGraph::parse("fp,10").is_err());
        assert!(CallGraph::parse("lbrx").unwrap_err().contains("fp, dwarf"));
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
