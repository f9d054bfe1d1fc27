//! Causes (issue 21): who made an item wait, and who took its CPU.
//!
//! Read in the same pass as the item stacks ([`crate::stacks`]), from [`Wakeup`] records
//! (`sched:sched_waking`: waker, its stack, wakee) and [`Switch`] records (with
//! `next_prev` from CPU-wide events):
//!
//! - **woken_by**: every blocked interval of an item's thread that a recorded wakeup ended
//!   (the last wakeup of the thread between its switch-out and its switch-in) names the
//!   waker (pid, tid, comm), the item the waker was inside at that moment, the waker's
//!   stack, and, when the waker is a thread (not an interrupt on an idle CPU), the
//!   **critical path**: what the waker did between the start of the wait and the wakeup:
//!   its on-CPU time (its off-CPU time subtracted from the window, split over its
//!   samples' stacks in the window), its runnable time, and its blocked time; blocked
//!   time that another thread's wakeup ended is explained by that thread in turn, to
//!   depth [`MAX_DEPTH`], visiting at most [`MAX_VISITS`] history entries per item.
//!   Wakeups from interrupt context are named by kind from the waker's kernel frames
//!   ([`IrqKind`]).
//! - **preempted_by**: every runnable interval (preempted, waiting for a CPU) of an
//!   item's thread names the threads that switched in on the CPU it was preempted on,
//!   with the time each ran there during the interval (from the switch-ins of that CPU).
//!
//! - **noise** ([`Noise`], per item in [`crate::stacks::ItemStacks::noise`]): the item's
//!   samples with kernel frames by what the kernel was doing ([`kernel_work`]: hard and
//!   soft interrupts, page faults, system calls by name; names trusted only when the
//!   trace was read with kernel symbols, else "unknown"), as samples × the mean sample
//!   interval, and its thread's migrations (switch-ins on another CPU inside the item).
//!
//! Bounded: per thread the last [`MAX_HISTORY`] samples and off-CPU intervals, per CPU
//! the last [`MAX_CPU_HISTORY`] switch-ins; older ones are forgotten (counted).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use serde::Serialize;
use tailprof_format::{Comm, Switch, SwitchKind, TraceHeader, Wakeup};

use crate::offcpu::{OffInterval, OffState};

// The agent's critical path of a span's wakers (issue 21 part 8), from raw records.
mod span_path;
pub use span_path::{span_critical_paths, PathPart, SampleKeys, SpanPaths, WakerPath};

/// Critical path depth (the waker, the waker's waker, ...).
pub const MAX_DEPTH: u32 = 3;
/// History entries visited per item's critical paths at most.
pub const MAX_VISITS: usize = 200_000;
/// Samples and off-CPU intervals kept per thread.
pub const MAX_HISTORY: usize = 1 << 16;
/// Switch-ins kept per CPU.
pub const MAX_CPU_HISTORY: usize = 1 << 16;
/// `item` of no item.
const NO_ITEM: u32 = u32::MAX;
/// `path` of no stack.
pub(crate) const NO_PATH: u32 = u32::MAX;

/// What kind of interrupt woke a thread, from the waker's kernel frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqKind {
    Timer,
    Disk,
    Network,
    Other,
}

impl IrqKind {
    pub fn name(self) -> &'static str {
        match self {
            IrqKind::Timer => "timer",
            IrqKind::Disk => "disk",
            IrqKind::Network => "network",
            IrqKind::Other => "other",
        }
    }
}

/// The interrupt kind of a wakeup whose waker stack has `frames` (names, root first);
/// `idle`: the waker was the idle task. `None`: a wakeup in thread context.
pub fn irq_kind(frames: &[&str], idle: bool) -> Option<IrqKind> {
    const IRQ_ENTRY: &[&str] = &[
        "sysvec_",
        "asm_sysvec_",
        "common_interrupt",
        "asm_common_interrupt",
        "do_IRQ",
        "__do_softirq",
        "handle_softirqs",
        "irq_exit",
        "handle_irq",
        "do_softirq",
        "run_ksoftirqd",
        "hrtimer_interrupt",
        "__sysvec_",
        "handle_edge_irq",
        "handle_fasteoi_irq",
    ];
    let in_irq = idle
        || frames
            .iter()
            .any(|f| IRQ_ENTRY.iter().any(|p| f.starts_with(p)));
    if !in_irq {
        return None;
    }
    let has = |ps: &[&str]| frames.iter().any(|f| ps.iter().any(|p| f.contains(p)));
    Some(
        if has(&[
            "hrtimer",
            "tick_sched",
            "timerfd",
            "it_real_fn",
            "run_timer",
            "call_timer_fn",
            "apic_timer",
        ]) {
            IrqKind::Timer
        } else if has(&[
            "blk_mq",
            "blk_update_request",
            "bio_endio",
            "scsi_",
            "nvme_",
            "virtblk",
            "end_bio",
        ]) {
            IrqKind::Disk
        } else if has(&[
            "net_rx",
            "napi",
            "netif_receive",
            "ip_rcv",
            "tcp_v4_rcv",
            "tcp_v6_rcv",
            "virtnet",
            "sock_def_readable",
        ]) {
            IrqKind::Network
        } else {
            IrqKind::Other
        },
    )
}

/// What the kernel was doing in an on-CPU sample (on-CPU noise), from the sample's kernel
/// frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelWork<'a> {
    /// A hardware interrupt handler (or the interrupt entry/exit around it).
    HardIrq,
    /// A softirq (`__do_softirq`, `ksoftirqd`).
    SoftIrq,
    /// The page-fault handler.
    PageFault,
    /// A system call, by name (`getppid` from `__x64_sys_getppid`; `?` when the syscall
    /// entry is on the stack but not the function of the call).
    Syscall(&'a str),
    /// Named kernel code that is none of the above (kernel threads, scheduler entry).
    Other,
    /// Kernel frames without names (no kernel symbols): the kind is not known.
    Unknown,
}

/// Kernel functions of a hardware interrupt (prefixes).
const HARDIRQ: &[&str] = &[
    "asm_sysvec_",
    "sysvec_",
    "__sysvec_",
    "asm_common_interrupt",
    "common_interrupt",
    "do_IRQ",
    "handle_irq_event",
    "handle_edge_irq",
    "handle_fasteoi_irq",
    "irq_exit_rcu",
    "__irq_exit_rcu",
    "hrtimer_interrupt",
    "smp_apic_timer_interrupt",
    "apic_timer_interrupt",
    "asm_exc_nmi",
    "exc_nmi",
];
const SOFTIRQ: &[&str] = &["__do_softirq", "handle_softirqs", "do_softirq", "do_softirq_own_stack", "run_ksoftirqd"];
const PAGE_FAULT: &[&str] = &[
    "asm_exc_page_fault",
    "exc_page_fault",
    "do_user_addr_fault",
    "do_kern_addr_fault",
    "do_page_fault",
    "handle_mm_fault",
    "__handle_mm_fault",
    "do_mem_abort",
    "el0_da",
];
/// Prefixes of the function of one system call (x86-64, i386 compat, arm64, riscv, the
/// generic wrappers, older kernels).
const SYSCALL_FN: &[&str] = &["__x64_sys_", "__ia32_sys_", "__arm64_sys_", "__riscv_sys_", "__do_sys_", "__se_sys_", "SyS_", "ksys_"];
/// glibc's wrappers of one system call in user space (`__GI___libc_write`,
/// `__libc_read`, `__GI___ioctl`, `__write_nocancel`): the call's name when the kernel
/// stack shows only the entry (the call's own function inlined into the dispatcher).
fn libc_wrapper_call(f: &str) -> Option<&str> {
    let name = ["__GI___libc_", "__libc_", "__GI___", "__GI_"].iter().find_map(|p| f.strip_prefix(p))?;
    let name = name.strip_suffix("_nocancel").unwrap_or(name);
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')).then_some(name)
}
/// The system-call entry (the call's own function may not be on the stack).
const SYSCALL_ENTRY: &[&str] = &["do_syscall_64", "entry_SYSCALL_64", "x64_sys_call", "do_el0_svc", "el0_svc", "do_fast_syscall_32", "do_int80_syscall_32"];

/// What the kernel part of a sample was doing: `frames` are its kernel frames, root
/// first, each with whether it has a real name (a kernel symbol). The innermost frame
/// that says wins (an interrupt during a system call is interrupt time; a page fault in
/// `read` is page-fault time). Names are trusted only when named: with no kernel symbols
/// the answer is [`KernelWork::Unknown`], never a guess. A system call whose own function
/// is not on the kernel stack is named by `user_caller` (the innermost user frame) when
/// that is a glibc wrapper of one call (`__GI___libc_write` → `write`). `None`: no kernel
/// frames.
pub fn kernel_work<'a>(frames: &[(&'a str, bool)], user_caller: Option<&'a str>) -> Option<KernelWork<'a>> {
    if frames.is_empty() {
        return None;
    }
    let starts = |f: &str, ps: &[&str]| ps.iter().any(|p| f.starts_with(p));
    let mut entry = false;
    for &(f, named) in frames.iter().rev() {
        if !named {
            continue;
        }
        if starts(f, SOFTIRQ) {
            return Some(KernelWork::SoftIrq);
        }
        if starts(f, HARDIRQ) {
            return Some(KernelWork::HardIrq);
        }
        if PAGE_FAULT.contains(&f) {
            return Some(KernelWork::PageFault);
        }
        if let Some(name) = SYSCALL_FN.iter().find_map(|p| f.strip_prefix(p)) {
            if !name.is_empty() {
                return Some(KernelWork::Syscall(name));
            }
        }
        entry |= SYSCALL_ENTRY.contains(&f);
    }
    Some(if entry {
        KernelWork::Syscall(user_caller.and_then(libc_wrapper_call).unwrap_or("?"))
    } else if frames.iter().any(|&(_, named)| !named) {
        KernelWork::Unknown
    } else {
        KernelWork::Other
    })
}

/// Time of one system call inside an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyscallTime {
    /// The call's name (`write`), `?` when only the entry was on the stack.
    pub name: String,
    pub ns: u64,
    pub samples: u64,
}

/// An item's on-CPU noise: its samples with kernel frames by what the kernel was doing
/// ([`kernel_work`]), as time (samples × the mean sample interval), and how often its
/// thread changed CPU inside it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Noise {
    /// Samples of the item with kernel frames (the rest ran in user space, or had no
    /// stack).
    pub kernel_samples: u64,
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    pub page_fault_ns: u64,
    /// By call, largest first.
    pub syscalls: Vec<SyscallTime>,
    /// Named kernel code of no kind above.
    pub other_kernel_ns: u64,
    /// Kernel time whose frames have no names (the trace read without kernel symbols):
    /// not classified.
    pub unknown_kernel_ns: u64,
    /// Switch-ins of the item's thread, inside the item, on another CPU than the one it
    /// left (`None`: the trace has no context switches).
    pub migrations: Option<u64>,
}

impl Noise {
    /// Per-sample-kind accumulation for one item: `work` of `n` samples.
    pub(crate) fn add(&mut self, work: KernelWork<'_>, n: u64, interval_ns: f64) {
        let ns = (n as f64 * interval_ns).round() as u64;
        self.kernel_samples += n;
        match work {
            KernelWork::HardIrq => self.hardirq_ns += ns,
            KernelWork::SoftIrq => self.softirq_ns += ns,
            KernelWork::PageFault => self.page_fault_ns += ns,
            KernelWork::Other => self.other_kernel_ns += ns,
            KernelWork::Unknown => self.unknown_kernel_ns += ns,
            KernelWork::Syscall(name) => match self.syscalls.iter_mut().find(|s| s.name == name) {
                Some(s) => {
                    s.ns += ns;
                    s.samples += n;
                }
                None => self.syscalls.push(SyscallTime { name: name.to_owned(), ns, samples: n }),
            },
        }
    }

    pub(crate) fn sort(&mut self) {
        self.syscalls.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
    }

    /// The kinds with time, as (`hardirq`|`softirq`|`page_fault`|`syscall:NAME`|
    /// `other_kernel`|`unknown_kernel`, ns).
    pub fn parts(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = vec![
            ("hardirq".into(), self.hardirq_ns),
            ("softirq".into(), self.softirq_ns),
            ("page_fault".into(), self.page_fault_ns),
        ];
        v.extend(self.syscalls.iter().map(|s| (format!("syscall:{}", s.name), s.ns)));
        v.push(("other_kernel".into(), self.other_kernel_ns));
        v.push(("unknown_kernel".into(), self.unknown_kernel_ns));
        v
    }
}

/// One step of a waker's critical path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathState {
    Cpu,
    Blocked,
    Runnable,
}

impl PathState {
    pub fn name(self) -> &'static str {
        match self {
            PathState::Cpu => "cpu",
            PathState::Blocked => "blocked",
            PathState::Runnable => "runnable",
        }
    }
}

/// One wakeup that ended a blocked interval of an item's thread inside the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WakeEdge {
    /// The wakeup.
    pub time_ns: u64,
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub wakee_pid: u32,
    pub wakee_tid: u32,
    /// When the woken thread ran again.
    pub resume_ns: u64,
}

/// Wake edges kept at most for a timeline.
pub const MAX_WAKE_EDGES: usize = 1 << 20;

/// What the critical path did during the wait, per state and stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct During {
    pub state: PathState,
    pub ns: u64,
    /// Root first; empty when no sample or stack says where.
    pub frames: Vec<String>,
}

/// One distinct waker of an item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WokenBy {
    /// Blocked time the waker's wakeups ended (within the item).
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// When its largest wakeup happened (trace clock): the wake edge's time.
    pub at_ns: u64,
    /// The item the waker was inside at its (largest) wakeup, and its class.
    pub item: Option<u64>,
    pub class: Option<String>,
    pub irq: Option<IrqKind>,
    /// The waker's stack at its largest wakeup, root first.
    pub frames: Vec<String>,
    /// The critical path, largest first.
    pub during: Vec<During>,
}

/// A thread that ran on the item's CPU while the item's thread was runnable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreemptedBy {
    pub ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub item: Option<u64>,
}

/// The causes of one item.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ItemCauses {
    pub id: u64,
    pub woken_by: Vec<WokenBy>,
    pub preempted_by: Vec<PreemptedBy>,
}

/// What the trace says about causes, whole-trace counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CauseStats {
    /// The trace has wakeup records (the recorder recorded them).
    pub recorded: bool,
    pub wakeups: u64,
    /// Blocked intervals of item threads with / without a recorded wakeup.
    pub blocked_explained: u64,
    pub blocked_unexplained: u64,
    /// History entries forgotten (bounds) and critical paths cut by the visit bound.
    pub forgotten: u64,
    pub cut_paths: u64,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Cpu {
        t: u64,
        path: u32,
    },
    Off {
        b: u64,
        e: u64,
        state: OffState,
        path: u32,
        waker: u32,
        woke_at: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Wake {
    time: u64,
    pid: u32,
    tid: u32,
    path: u32,
}

#[derive(Debug, Default)]
struct RawWaker {
    ns: u64,
    pid: u32,
    /// (ns, path, item, idle) of the largest wakeup, and its time.
    largest: (u64, u32, u32, bool),
    largest_at: u64,
    during: FxHashMap<(PathState, u32), u64>,
}

#[derive(Debug, Default)]
struct RawItem {
    woken: FxHashMap<u32, RawWaker>,
    preempted: FxHashMap<u32, (u64, u32, u32)>,
}

/// The causes analysis' state while reading (embedded in the stack builder, which owns
/// the items and the stack paths).
#[derive(Debug, Default)]
pub(crate) struct CauseTracker {
    pub on: bool,
    /// Switch records that carry `next_prev` come from the recorder's extra CPU-wide
    /// event (filtered): they feed only the per-CPU history.
    cpu_switch_extra: bool,
    comms: FxHashMap<u32, String>,
    pids: FxHashMap<u32, u32>,
    hist: FxHashMap<u32, VecDeque<Ev>>,
    wake: FxHashMap<u32, Wake>,
    out_cpu: FxHashMap<u32, u32>,
    cpus: FxHashMap<u32, VecDeque<(u64, u32, u32)>>,
    items: FxHashMap<u32, RawItem>,
    /// With a timeline: the wake edges into items.
    edges: Option<Vec<WakeEdge>>,
    /// Reused buffers of the critical paths (no allocation per wait).
    scratch_during: FxHashMap<(PathState, u32), u64>,
    scratch_samples: Vec<(u32, u64)>,
    pub stats: CauseStats,
}

impl CauseTracker {
    pub fn new(header: &TraceHeader, timeline: bool) -> Self {
        let causes = header.extra.get("causes");
        CauseTracker {
            edges: timeline.then(Vec::new),
            on: causes.is_some(),
            cpu_switch_extra: causes.is_some_and(|c| c.contains("cpu_switch")),
            stats: CauseStats {
                recorded: causes.is_some(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Whether this switch record belongs to the thread timelines (else only to the CPU
    /// history).
    pub fn feeds_timelines(&self, s: &Switch) -> bool {
        !(self.cpu_switch_extra && s.next_prev.is_some())
    }

    pub fn comm(&mut self, c: &Comm) {
        if self.on {
            self.comms.insert(c.tid, c.comm.clone());
            self.pids.insert(c.tid, c.pid);
        }
    }

    fn push(&mut self, tid: u32, ev: Ev) {
        let h = self.hist.entry(tid).or_default();
        if h.len() >= MAX_HISTORY {
            h.pop_front();
            self.stats.forgotten += 1;
        }
        h.push_back(ev);
    }

    pub fn sample(&mut self, tid: u32, time: u64, path: u32) {
        if self.on && tid != 0 {
            self.push(tid, Ev::Cpu { t: time, path });
        }
    }

    pub fn wakeup(&mut self, w: &Wakeup, path: u32) {
        if !self.on {
            return;
        }
        self.stats.wakeups += 1;
        if w.wakee_tid != w.tid {
            self.wake.insert(
                w.wakee_tid,
                Wake {
                    time: w.time,
                    pid: w.pid,
                    tid: w.tid,
                    path,
                },
            );
        }
    }

    /// A switch record (before the timelines see it).
    pub fn switch(&mut self, s: &Switch) {
        if !self.on {
            return;
        }
        self.pids.entry(s.tid).or_insert(s.pid);
        match s.kind {
            SwitchKind::In => {
                let h = self.cpus.entry(s.cpu).or_default();
                if h.len() >= MAX_CPU_HISTORY {
                    h.pop_front();
                    self.stats.forgotten += 1;
                }
                h.push_back((s.time, s.pid, s.tid));
            }
            _ => {
                if self.feeds_timelines(s) {
                    self.out_cpu.insert(s.tid, s.cpu);
                }
                if let Some((p, t)) = s.next_prev {
                    // Who runs next on this CPU (its own switch-in may not be recorded).
                    if t != 0 {
                        let h = self.cpus.entry(s.cpu).or_default();
                        h.push_back((s.time, p, t));
                    }
                }
            }
        }
    }

    /// A closed off-CPU interval of a thread, `path` its stack's path; `items` the items
    /// of its thread it overlaps (index, the item's begin and end): each is explained for
    /// its part of the interval only.
    pub fn interval(
        &mut self,
        iv: &OffInterval,
        path: u32,
        items: &[(u32, u64, u64)],
        item_at: &dyn Fn(u32, u64) -> u32,
    ) {
        if !self.on {
            return;
        }
        let wake = self
            .wake
            .remove(&iv.tid)
            .filter(|w| w.time >= iv.begin_ns && w.time <= iv.end_ns);
        let (waker, woke_at) = match (&wake, iv.state) {
            (Some(w), OffState::Blocked) => (w.tid, w.time),
            _ => (u32::MAX, 0),
        };
        let out_cpu = self.out_cpu.remove(&iv.tid);
        if let (Some(e), Some(w), false, OffState::Blocked) = (&mut self.edges, &wake, items.is_empty(), iv.state) {
            if e.len() < MAX_WAKE_EDGES {
                e.push(WakeEdge {
                    time_ns: w.time,
                    waker_pid: w.pid,
                    waker_tid: w.tid,
                    wakee_pid: iv.pid,
                    wakee_tid: iv.tid,
                    resume_ns: iv.end_ns,
                });
            }
        }
        for &(idx, ib, ie) in items {
            // The part of the interval inside the item (an interval may begin before it,
            // e.g. when off-CPU recording started at the first marker, or end after it).
            let part = OffInterval {
                begin_ns: iv.begin_ns.max(ib),
                end_ns: iv.end_ns.min(ie),
                ..*iv
            };
            if part.end_ns <= part.begin_ns {
                continue;
            }
            match iv.state {
                OffState::Blocked => match &wake {
                    // The wakeup ended the blocked part inside the item (else the item
                    // ended first, or the wakeup was before it began).
                    Some(w) if w.time > part.begin_ns => {
                        self.stats.blocked_explained += 1;
                        let w = Wake { time: w.time.min(part.end_ns), ..*w };
                        self.explain_blocked(idx, &part, &w, item_at);
                    }
                    _ => self.stats.blocked_unexplained += 1,
                },
                OffState::Runnable => {
                    if let Some(cpu) = out_cpu {
                        self.explain_runnable(idx, &part, cpu, item_at);
                    }
                }
            }
        }
        self.push(
            iv.tid,
            Ev::Off {
                b: iv.begin_ns,
                e: iv.end_ns,
                state: iv.state,
                path,
                waker,
                woke_at,
            },
        );
    }

    fn explain_blocked(
        &mut self,
        idx: u32,
        iv: &OffInterval,
        w: &Wake,
        item_at: &dyn Fn(u32, u64) -> u32,
    ) {
        // The blocked time this wakeup ended: from the switch-out to the wakeup (after
        // it, the thread waited for a CPU).
        let ns = w.time.saturating_sub(iv.begin_ns).max(1);
        let waker_item = if w.tid == 0 {
            NO_ITEM
        } else {
            item_at(w.tid, w.time)
        };
        let mut during = std::mem::take(&mut self.scratch_during);
        during.clear();
        if w.tid != 0 {
            let mut budget = MAX_VISITS;
            self.critical_path(w.tid, iv.begin_ns, w.time, 1, &mut budget, &mut during);
        }
        let it = self.items.entry(idx).or_default();
        let r = it.woken.entry(w.tid).or_default();
        r.ns = r.ns.saturating_add(ns);
        r.pid = w.pid;
        if ns >= r.largest.0 {
            r.largest = (ns, w.path, waker_item, w.tid == 0);
            r.largest_at = w.time;
        }
        for (&k, &v) in &during {
            *r.during.entry(k).or_default() += v;
        }
        self.scratch_during = during;
    }

    /// What `tid` did in `[b, e)`: off-CPU intervals by state (blocked ones that another
    /// thread's wakeup ended explained by that thread, to [`MAX_DEPTH`]), the rest of the
    /// window on CPU, split over its samples' stacks.
    fn critical_path(
        &mut self,
        tid: u32,
        b: u64,
        e: u64,
        depth: u32,
        budget: &mut usize,
        out: &mut FxHashMap<(PathState, u32), u64>,
    ) {
        if e <= b {
            return;
        }
        // Samples per path in the window (few paths: a reused vector searched linearly).
        let mut samples = std::mem::take(&mut self.scratch_samples);
        samples.clear();
        let Some(h) = self.hist.get(&tid) else { return };
        let mut cut = false;
        let mut off = 0u64;
        let mut nsamples = 0u64;
        let mut nested: Vec<(u32, u64, u64)> = Vec::new();
        for ev in h.iter().rev() {
            if *budget == 0 {
                cut = true;
                break;
            }
            *budget -= 1;
            match *ev {
                Ev::Cpu { t, path } => {
                    if t < b {
                        break;
                    }
                    if t < e {
                        match samples.iter_mut().find(|x| x.0 == path) {
                            Some(x) => x.1 += 1,
                            None => samples.push((path, 1)),
                        }
                        nsamples += 1;
                    }
                }
                Ev::Off {
                    b: ob,
                    e: oe,
                    state,
                    path,
                    waker,
                    woke_at,
                } => {
                    if oe < b {
                        break;
                    }
                    let o = oe.min(e).saturating_sub(ob.max(b));
                    if o == 0 {
                        continue;
                    }
                    off += o;
                    match state {
                        OffState::Runnable => {
                            *out.entry((PathState::Runnable, path)).or_default() += o
                        }
                        OffState::Blocked
                            if waker != u32::MAX
                                && waker != 0
                                && waker != tid
                                && depth < MAX_DEPTH =>
                        {
                            // Blocked until `woke_at`, then waiting for a CPU.
                            let wb = ob.max(b);
                            let we = woke_at.min(e).max(wb);
                            nested.push((waker, wb, we));
                            let tail = o.saturating_sub(we - wb);
                            if tail > 0 {
                                *out.entry((PathState::Runnable, path)).or_default() += tail;
                            }
                        }
                        OffState::Blocked => {
                            *out.entry((PathState::Blocked, path)).or_default() += o
                        }
                    }
                }
            }
        }
        if cut {
            self.stats.cut_paths += 1;
        }
        let cpu = (e - b).saturating_sub(off);
        if cpu > 0 {
            if nsamples == 0 {
                *out.entry((PathState::Cpu, NO_PATH)).or_default() += cpu;
            } else {
                // Largest remainder: the parts add up to `cpu`.
                let mut given = 0u64;
                let v = &mut samples;
                v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                for (i, &(path, n)) in v.iter().enumerate() {
                    let part = if i + 1 == v.len() {
                        cpu - given
                    } else {
                        (cpu as u128 * n as u128 / nsamples as u128) as u64
                    };
                    given += part;
                    *out.entry((PathState::Cpu, path)).or_default() += part;
                }
            }
        }
        self.scratch_samples = samples;
        for (w, nb, ne) in nested {
            let before: u64 = out.values().sum();
            self.critical_path(w, nb, ne, depth + 1, budget, out);
            let explained = out.values().sum::<u64>() - before;
            // What the deeper thread's history does not cover stays blocked.
            let rest = (ne - nb).saturating_sub(explained);
            if rest > 0 {
                *out.entry((PathState::Blocked, NO_PATH)).or_default() += rest;
            }
        }
    }

    fn explain_runnable(
        &mut self,
        idx: u32,
        iv: &OffInterval,
        cpu: u32,
        item_at: &dyn Fn(u32, u64) -> u32,
    ) {
        let Some(h) = self.cpus.get(&cpu) else { return };
        let (b, e) = (iv.begin_ns, iv.end_ns);
        // The switch-ins of the CPU from the last one at or before `b` to `e`.
        let start = h.partition_point(|x| x.0 <= b).saturating_sub(1);
        let mut ran: Vec<(u64, u32, u32, u64)> = Vec::new();
        let mut i = start;
        while i < h.len() && h[i].0 < e {
            let (t, pid, tid) = h[i];
            let next = h.get(i + 1).map_or(e, |n| n.0.min(e));
            let o = next.saturating_sub(t.max(b));
            if o > 0 && tid != iv.tid && tid != 0 {
                ran.push((o, pid, tid, t.max(b)));
            }
            i += 1;
        }
        let it = self.items.entry(idx).or_default();
        for (o, pid, tid, at) in ran {
            let e = it
                .preempted
                .entry(tid)
                .or_insert((0, pid, item_at(tid, at)));
            e.0 = e.0.saturating_add(o);
        }
    }

    /// The wake edges collected for a timeline (empty without one).
    pub fn take_edges(&mut self) -> Vec<WakeEdge> {
        self.edges.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The typed causes of every item that has some, with paths through `of_path` and
    /// names through `frames`. `span` gives an item index's (id, class).
    pub fn finish(
        self,
        of_path: &dyn Fn(u32) -> Vec<String>,
        span: &dyn Fn(u32) -> (u64, Option<String>),
    ) -> (Vec<ItemCauses>, CauseStats) {
        // A thread without a COMM record of its own has its process's name (threads
        // inherit it; the kernel writes COMM only on exec and renames).
        let comm = |tid: u32| {
            self.comms
                .get(&tid)
                .or_else(|| self.pids.get(&tid).and_then(|p| self.comms.get(p)))
                .cloned()
                .unwrap_or_default()
        };
        let mut out: Vec<ItemCauses> = Vec::with_capacity(self.items.len());
        // Names and interrupt kinds of the wakers' stacks, once per (path, idle).
        let mut waker_stacks: FxHashMap<(u32, bool), (Vec<String>, Option<IrqKind>)> = FxHashMap::default();
        for (idx, raw) in &self.items {
            let mut woken_by: Vec<WokenBy> = raw
                .woken
                .iter()
                .map(|(&tid, r)| {
                    let (frames, irq) = waker_stacks
                        .entry((r.largest.1, r.largest.3))
                        .or_insert_with(|| {
                            let frames = if r.largest.1 == NO_PATH { Vec::new() } else { of_path(r.largest.1) };
                            let names: Vec<&str> = frames.iter().map(String::as_str).collect();
                            let irq = irq_kind(&names, r.largest.3);
                            (frames, irq)
                        })
                        .clone();
                    let (item, class) = if r.largest.2 == NO_ITEM {
                        (None, None)
                    } else {
                        let (id, c) = span(r.largest.2);
                        (Some(id), c)
                    };
                    // An interrupt woke the thread: the interrupted task did not make it wait.
                    let mut during: Vec<During> = r
                        .during
                        .iter()
                        .filter(|(_, &ns)| ns > 0 && irq.is_none())
                        .map(|(&(state, p), &ns)| During {
                            state,
                            ns,
                            frames: if p == NO_PATH { Vec::new() } else { of_path(p) },
                        })
                        .collect();
                    during.sort_by(|a, b| {
                        b.ns.cmp(&a.ns)
                            .then(a.state.cmp(&b.state))
                            .then(a.frames.cmp(&b.frames))
                    });
                    WokenBy {
                        at_ns: r.largest_at,
                        ns: r.ns,
                        pid: r.pid,
                        tid,
                        comm: if tid == 0 { String::new() } else { comm(tid) },
                        item,
                        class,
                        irq,
                        frames,
                        during,
                    }
                })
                .collect();
            woken_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            // Interrupts are one waker per kind, whichever task they interrupted (its
            // pid/tid/comm are those of the largest such wakeup).
            let mut merged: Vec<WokenBy> = Vec::with_capacity(woken_by.len());
            for w in woken_by {
                match merged
                    .iter_mut()
                    .find(|m| m.irq.is_some() && m.irq == w.irq)
                {
                    Some(m) => m.ns = m.ns.saturating_add(w.ns),
                    None => merged.push(w),
                }
            }
            merged.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            let woken_by = merged;
            let mut preempted_by: Vec<PreemptedBy> = raw
                .preempted
                .iter()
                .map(|(&tid, &(ns, pid, item))| PreemptedBy {
                    ns,
                    pid,
                    tid,
                    comm: comm(tid),
                    item: (item != NO_ITEM).then(|| span(item).0),
                })
                .collect();
            preempted_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
            out.push(ItemCauses {
                id: span(*idx).0,
                woken_by,
                preempted_by,
            });
        }
        out.sort_by_key(|c| c.id);
        (out, self.stats)
    }
}

/// One waker of a span ([`span_causes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanWaker {
    pub pid: u32,
    pub tid: u32,
    /// Blocked time of the span its wakeups ended.
    pub ns: u64,
    /// Index (into the `wakeups` given) of its largest wakeup: the caller's own data for
    /// it (stack, the item the waker was inside) is found there.
    pub largest: usize,
}

/// One thread that ran on the span's CPU while its thread was runnable ([`span_causes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanPreempter {
    pub pid: u32,
    pub tid: u32,
    pub ns: u64,
}

/// The causes of one span of one thread ([`span_causes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanCauses {
    /// Largest first.
    pub woken_by: Vec<SpanWaker>,
    pub preempted_by: Vec<SpanPreempter>,
    /// Records looked at (bounded by [`MAX_VISITS`]; `cut` when the bound stopped it).
    pub visited: usize,
    pub cut: bool,
}

/// Who woke thread `tid` and who ran instead of it during `[begin, end]`, from a window
/// of raw records in time order (`switches`: its own and CPU-wide ones with `next_prev`;
/// `wakeups`). The same rules as the stack pass ([`crate::stacks`], module docs above):
/// each blocked interval inside the span is ended by the thread's last wakeup in it, each
/// runnable one names who switched in on the CPU it left. This is the agent's form (its
/// requests are known only at their end, so it explains them from the records it kept),
/// without the critical path. The thread is taken to be on CPU at `begin` (it wrote the
/// begin marker). At most [`MAX_VISITS`] records are looked at.
pub fn span_causes(tid: u32, begin: u64, end: u64, switches: &[Switch], wakeups: &[Wakeup]) -> SpanCauses {
    let mut woken: Vec<(SpanWaker, u64)> = Vec::new();
    let mut ran: Vec<SpanPreempter> = Vec::new();
    let mut budget = MAX_VISITS;
    // Explains one off-CPU interval [since, until) of the thread (left `cpu`).
    let mut close = |since: u64, kind: SwitchKind, cpu: u32, until: u64, budget: &mut usize| {
        let (b, e) = (since.max(begin), until.min(end));
        if e <= b {
            return;
        }
        if kind == SwitchKind::OutBlocked {
            // The thread's last wakeup in the interval (by another thread).
            let lo = wakeups.partition_point(|w| w.time < since);
            let hi = wakeups.partition_point(|w| w.time <= until);
            *budget = budget.saturating_sub(hi - lo);
            let Some(k) = (lo..hi).rev().find(|&k| wakeups[k].wakee_tid == tid && wakeups[k].tid != tid) else {
                return;
            };
            let w = &wakeups[k];
            let ns = w.time.min(e).saturating_sub(b).max(1);
            match woken.iter_mut().find(|x| x.0.tid == w.tid && x.0.pid == w.pid) {
                Some((x, largest)) => {
                    x.ns = x.ns.saturating_add(ns);
                    if ns > *largest {
                        (x.largest, *largest) = (k, ns);
                    }
                }
                None => woken.push((SpanWaker { pid: w.pid, tid: w.tid, ns, largest: k }, ns)),
            }
        } else {
            // Who ran on `cpu` in [b, e): each switch-in there (or the next task a
            // switch-out names) starts a run; the thread's own switch-out at `since`
            // names the first.
            let lo = switches.partition_point(|s| s.time < since);
            let mut cur: Option<(u64, u32, u32)> = None;
            for s in &switches[lo..] {
                if *budget == 0 || s.time >= e {
                    break;
                }
                *budget -= 1;
                if s.cpu != cpu {
                    continue;
                }
                let starts = match (s.kind, s.next_prev) {
                    (SwitchKind::In, _) => Some((s.pid, s.tid)),
                    (_, Some(np)) => Some(np),
                    _ => None,
                };
                if let Some((p, t)) = starts {
                    if let Some((t0, cp, ct)) = cur.take() {
                        add_ran(&mut ran, cp, ct, tid, s.time.saturating_sub(t0.max(b)));
                    }
                    cur = Some((s.time, p, t));
                }
            }
            if let Some((t0, cp, ct)) = cur {
                add_ran(&mut ran, cp, ct, tid, e.saturating_sub(t0.max(b)));
            }
        }
    };
    // (since, kind, cpu) while the thread is off CPU; on CPU at `begin`.
    let mut off: Option<(u64, SwitchKind, u32)> = None;
    for s in &switches[switches.partition_point(|s| s.time < begin)..] {
        if s.time > end || budget == 0 {
            break;
        }
        budget -= 1;
        if s.tid != tid {
            continue;
        }
        // A thread seen by both its own and a CPU-wide event has each switch twice:
        // the repeat closes an empty interval.
        let next = match s.kind {
            SwitchKind::In => None,
            k => Some((s.time, k, s.cpu)),
        };
        if let Some((since, kind, cpu)) = std::mem::replace(&mut off, next) {
            close(since, kind, cpu, s.time, &mut budget);
        }
    }
    if let Some((since, kind, cpu)) = off {
        close(since, kind, cpu, end, &mut budget);
    }
    let mut out = SpanCauses {
        woken_by: woken.into_iter().map(|w| w.0).collect(),
        preempted_by: ran,
        visited: MAX_VISITS - budget,
        cut: budget == 0,
    };
    out.woken_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
    out.preempted_by.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tid.cmp(&b.tid)));
    out
}

fn add_ran(ran: &mut Vec<SpanPreempter>, pid: u32, tid: u32, me: u32, ns: u64) {
    if ns == 0 || tid == me || tid == 0 {
        return;
    }
    match ran.iter_mut().find(|x| x.tid == tid && x.pid == pid) {
        Some(x) => x.ns = x.ns.saturating_add(ns),
        None => ran.push(SpanPreempter { pid, tid, ns }),
    }
}

/// One cause of an item's wall time beside its class median.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseShare {
    /// `cpu` (own work), `blocked`, `runnable`.
    pub cause: PathState,
    pub ns: u64,
    pub median_ns: u64,
    /// ns − median_ns.
    pub excess_ns: i64,
}

/// An item's excess over its class median split by cause, with whom it waited for
/// (`items --explain ID`, "Causes").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseExplanation {
    pub id: u64,
    /// The trace recorded wakeups (else only the split is known).
    pub recorded: bool,
    pub excess_ns: i64,
    pub median_duration_ns: u64,
    /// `None` without context switches (no split).
    pub split: Option<Vec<CauseShare>>,
    /// The item's own CPU work above the class median, by stack (root first), largest
    /// first (at most 3).
    pub cpu_stacks: Vec<(Vec<String>, f64)>,
    pub woken_by: Vec<WokenBy>,
    pub preempted_by: Vec<PreemptedBy>,
    /// The item's on-CPU noise (interrupts, page faults, system calls, migrations).
    pub noise: Noise,
    /// Its noise kinds ([`Noise::parts`]) beside the class median, largest excess first
    /// (kinds with time in the item or the class median).
    pub noise_shares: Vec<NoiseShare>,
}

/// One kind of on-CPU noise of an item beside its class median.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoiseShare {
    /// `hardirq`, `softirq`, `page_fault`, `syscall:NAME`, `other_kernel`, `unknown_kernel`.
    pub kind: String,
    pub ns: u64,
    pub median_ns: u64,
    pub excess_ns: i64,
}

/// Explain item `x.id` by cause: `x` from [`crate::stack_explain::explain_stacks`] over the
/// same `report` and `profile`.
pub fn explain_causes(
    report: &crate::items::ItemsReport,
    profile: &crate::stacks::StackProfile,
    x: &crate::stack_explain::StackExplanation,
) -> CauseExplanation {
    use crate::stack_explain::time_split;
    let switches = profile.switches > 0;
    let split_of = |i: usize| {
        let r = &report.items[i];
        time_split(
            r.current_ns(),
            r.samples,
            report.mean_interval_ns,
            profile.items.get(i),
            switches,
        )
    };
    let members: Vec<usize> = (0..report.items.len())
        .filter(|&i| report.items[i].class == x.class)
        .collect();
    let med = |f: &dyn Fn(&crate::stack_explain::TimeSplit) -> u64| {
        let mut v: Vec<u64> = members.iter().map(|&i| f(&split_of(i))).collect();
        crate::stats::median_u64(&mut v).unwrap_or(0)
    };
    let split = x.split.off_cpu_ns.map(|_| {
        let mine = x.split;
        let parts: [(PathState, u64, u64); 3] = [
            (PathState::Cpu, mine.cpu_ns, med(&|s| s.cpu_ns)),
            (
                PathState::Blocked,
                mine.blocked_ns.unwrap_or(0),
                med(&|s| s.blocked_ns.unwrap_or(0)),
            ),
            (
                PathState::Runnable,
                mine.runnable_ns.unwrap_or(0),
                med(&|s| s.runnable_ns.unwrap_or(0)),
            ),
        ];
        parts
            .iter()
            .map(|&(cause, ns, median_ns)| CauseShare {
                cause,
                ns,
                median_ns,
                excess_ns: ns as i64 - median_ns as i64,
            })
            .collect()
    });
    let cpu_stacks = x
        .stacks
        .iter()
        .filter(|d| d.delta_ns > 0.0)
        .take(3)
        .map(|d| (d.frames.clone(), d.delta_ns))
        .collect();
    let mine = profile.causes.iter().find(|c| c.id == x.id);
    let noise = report
        .items
        .iter()
        .position(|r| r.id == x.id)
        .and_then(|i| profile.items.get(i))
        .map(|s| s.noise.clone())
        .unwrap_or_default();
    let class_parts: Vec<FxHashMap<String, u64>> = members
        .iter()
        .map(|&i| profile.items.get(i).map(|s| s.noise.parts().into_iter().collect()).unwrap_or_default())
        .collect();
    let mut kinds: Vec<String> = noise.parts().into_iter().filter(|p| p.1 > 0).map(|p| p.0).collect();
    for m in &class_parts {
        for (k, &ns) in m {
            if ns > 0 && !kinds.contains(k) {
                kinds.push(k.clone());
            }
        }
    }
    let mine_parts: FxHashMap<String, u64> = noise.parts().into_iter().collect();
    let mut noise_shares: Vec<NoiseShare> = kinds
        .into_iter()
        .map(|kind| {
            let mut v: Vec<u64> = class_parts.iter().map(|m| m.get(&kind).copied().unwrap_or(0)).collect();
            let median_ns = crate::stats::median_u64(&mut v).unwrap_or(0);
            let ns = mine_parts.get(&kind).copied().unwrap_or(0);
            NoiseShare { kind, ns, median_ns, excess_ns: ns as i64 - median_ns as i64 }
        })
        .filter(|s| s.ns > 0 || s.median_ns > 0)
        .collect();
    noise_shares.sort_by(|a, b| b.excess_ns.cmp(&a.excess_ns).then(b.ns.cmp(&a.ns)).then(a.kind.cmp(&b.kind)));
    CauseExplanation {
        noise,
        noise_shares,
        id: x.id,
        recorded: profile.cause_stats.recorded,
        excess_ns: x.excess_ns,
        median_duration_ns: x.median_duration_ns,
        split,
        cpu_stacks,
        woken_by: mine.map(|c| c.woken_by.clone()).unwrap_or_default(),
        preempted_by: mine.map(|c| c.preempted_by.clone()).unwrap_or_default(),
    }
}

/// Who cost other requests time, over the whole trace (`report --causes`): one row per
/// process, thread or item class, largest `total_ns` first.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct InterferenceRow {
    pub pid: u32,
    /// `None` in the per-process and per-class rows.
    pub tid: Option<u32>,
    pub comm: String,
    /// The item class the waker or preempter was inside (per-class rows; `None` in the
    /// others, and for threads outside any item in the class rows: "no item").
    pub class: Option<String>,
    /// Interrupt wakeups of this kind (pid/tid 0): the task they interrupted did not
    /// hold the request up.
    pub irq: Option<IrqKind>,
    /// Blocked time of items that this one's wakeups ended.
    pub blocked_ns: u64,
    /// Runnable time of items during which this one ran on their CPU.
    pub runnable_ns: u64,
    pub total_ns: u64,
    /// Items it held up.
    pub items: u64,
}

/// The whole-trace interference view; see [`InterferenceRow`].
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Interference {
    /// The trace recorded wakeups (else every list is empty).
    pub recorded: bool,
    pub processes: Vec<InterferenceRow>,
    pub threads: Vec<InterferenceRow>,
    /// By the class of the item the waker or preempter was inside (`class` `None`: no
    /// item); interrupts are counted under processes and threads only.
    pub classes: Vec<InterferenceRow>,
}

/// Sums the causes of every item of `profile` (built over `report`'s items) by waker /
/// preempter process, thread and item class.
pub fn interference(report: &crate::items::ItemsReport, profile: &crate::stacks::StackProfile) -> Interference {
    let class_of: FxHashMap<u64, Option<String>> = report.items.iter().map(|i| (i.id, i.class.clone())).collect();
    type Key = (u32, Option<u32>, Option<Option<String>>, Option<IrqKind>);
    let mut rows: FxHashMap<Key, (InterferenceRow, rustc_hash::FxHashSet<u64>)> = FxHashMap::default();
    let mut add = |key: Key, comm: &str, item: u64, blocked: u64, runnable: u64| {
        let (r, items) = rows.entry(key.clone()).or_insert_with(|| {
            let r = InterferenceRow { pid: key.0, tid: key.1, class: key.2.clone().flatten(), irq: key.3, ..Default::default() };
            (r, Default::default())
        });
        if r.comm.is_empty() {
            r.comm = comm.to_owned();
        }
        r.blocked_ns = r.blocked_ns.saturating_add(blocked);
        r.runnable_ns = r.runnable_ns.saturating_add(runnable);
        items.insert(item);
    };
    for c in &profile.causes {
        for w in &c.woken_by {
            match w.irq {
                Some(k) => {
                    let comm = format!("[{} interrupt]", k.name());
                    add((0, None, None, Some(k)), &comm, c.id, w.ns, 0);
                    add((0, Some(0), None, Some(k)), &comm, c.id, w.ns, 0);
                }
                None => {
                    add((w.pid, None, None, None), &w.comm, c.id, w.ns, 0);
                    add((w.pid, Some(w.tid), None, None), &w.comm, c.id, w.ns, 0);
                    add((0, None, Some(w.class.clone()), None), "", c.id, w.ns, 0);
                }
            }
        }
        for p in &c.preempted_by {
            let class = p.item.and_then(|i| class_of.get(&i).cloned().flatten());
            add((p.pid, None, None, None), &p.comm, c.id, 0, p.ns);
            add((p.pid, Some(p.tid), None, None), &p.comm, c.id, 0, p.ns);
            add((0, None, Some(class), None), "", c.id, 0, p.ns);
        }
    }
    let mut out = Interference { recorded: profile.cause_stats.recorded, ..Default::default() };
    for ((_, tid, class, _), (mut r, items)) in rows {
        r.total_ns = r.blocked_ns.saturating_add(r.runnable_ns);
        r.items = items.len() as u64;
        match (tid, class) {
            (_, Some(_)) => {
                r.pid = 0;
                out.classes.push(r)
            }
            (Some(_), None) => out.threads.push(r),
            (None, None) => out.processes.push(r),
        }
    }
    for v in [&mut out.processes, &mut out.threads, &mut out.classes] {
        v.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.pid.cmp(&b.pid)).then(a.tid.cmp(&b.tid)).then(a.class.cmp(&b.class)).then(a.comm.cmp(&b.comm)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_kinds_from_kernel_frames() {
        assert_eq!(irq_kind(&["futex_wake", "wake_up_q"], false), None);
        assert_eq!(
            irq_kind(
                &[
                    "asm_sysvec_apic_timer_interrupt",
                    "hrtimer_interrupt",
                    "hrtimer_wakeup"
                ],
                false
            ),
            Some(IrqKind::Timer)
        );
        assert_eq!(
            irq_kind(
                &["common_interrupt", "blk_mq_complete_request", "bio_endio"],
                false
            ),
            Some(IrqKind::Disk)
        );
        assert_eq!(
            irq_kind(&["__do_softirq", "net_rx_action", "napi_poll"], false),
            Some(IrqKind::Network)
        );
        assert_eq!(irq_kind(&[], true), Some(IrqKind::Other));
    }

    fn named<'a>(v: &[&'a str]) -> Vec<(&'a str, bool)> {
        v.iter().map(|&f| (f, true)).collect()
    }

    #[test]
    fn kernel_work_innermost_context_wins() {
        assert_eq!(kernel_work(&[], None), None);
        let getppid = named(&["entry_SYSCALL_64_after_hwframe", "do_syscall_64", "x64_sys_call", "__x64_sys_getppid", "__task_pid_nr_ns"]);
        assert_eq!(kernel_work(&getppid, None), Some(KernelWork::Syscall("getppid")));
        // A page fault while copying to user space in `read`: page-fault time.
        let fault_in_read = named(&[
            "entry_SYSCALL_64",
            "do_syscall_64",
            "__x64_sys_read",
            "ksys_read",
            "_copy_to_user",
            "asm_exc_page_fault",
            "exc_page_fault",
            "do_user_addr_fault",
            "handle_mm_fault",
            "clear_page_erms",
        ]);
        assert_eq!(kernel_work(&fault_in_read, None), Some(KernelWork::PageFault));
        let user_fault = named(&["asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault", "handle_mm_fault", "clear_page_erms"]);
        assert_eq!(kernel_work(&user_fault, None), Some(KernelWork::PageFault));
        // An interrupt during a system call: interrupt time; its softirq: softirq time.
        let irq = named(&["entry_SYSCALL_64", "do_syscall_64", "__x64_sys_write", "asm_common_interrupt", "common_interrupt", "handle_edge_irq", "virtblk_done"]);
        assert_eq!(kernel_work(&irq, None), Some(KernelWork::HardIrq));
        let soft = named(&["asm_sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "irq_exit_rcu", "__irq_exit_rcu", "handle_softirqs", "net_rx_action"]);
        assert_eq!(kernel_work(&soft, None), Some(KernelWork::SoftIrq));
        // The entry without the call's own function: a system call of unknown name.
        let entry_only = named(&["entry_SYSCALL_64", "do_syscall_64", "syscall_exit_to_user_mode"]);
        assert_eq!(kernel_work(&entry_only, None), Some(KernelWork::Syscall("?")));
        // ... named by glibc's wrapper of one call, not by a generic `syscall()`.
        assert_eq!(kernel_work(&entry_only, Some("__GI___libc_write")), Some(KernelWork::Syscall("write")));
        assert_eq!(kernel_work(&entry_only, Some("__read_nocancel")), Some(KernelWork::Syscall("?")));
        assert_eq!(kernel_work(&entry_only, Some("__libc_read")), Some(KernelWork::Syscall("read")));
        assert_eq!(kernel_work(&entry_only, Some("syscall")), Some(KernelWork::Syscall("?")));
        // ksys_ functions are named after their call.
        assert_eq!(kernel_work(&named(&["do_syscall_64", "x64_sys_call", "ksys_write", "vfs_write"]), None), Some(KernelWork::Syscall("write")));
        assert_eq!(kernel_work(&named(&["ret_from_fork_asm", "kthread", "worker_thread"]), None), Some(KernelWork::Other));
    }

    #[test]
    fn kernel_work_without_kernel_symbols_is_unknown_not_guessed() {
        // No names: unknown, whatever the (placeholder) text says.
        let none = [("[kernel]", false), ("[kernel]", false)];
        assert_eq!(kernel_work(&none, None), Some(KernelWork::Unknown));
        // A placeholder that happens to look like a syscall function is not trusted.
        assert_eq!(kernel_work(&[("__x64_sys_write", false)], Some("__GI___libc_write")), Some(KernelWork::Unknown));
        // A named frame still says what it knows.
        assert_eq!(kernel_work(&[("[kernel]", false), ("exc_page_fault", true)], None), Some(KernelWork::PageFault));
    }

    #[test]
    fn noise_adds_time_per_kind_and_sorts_syscalls() {
        let mut n = Noise::default();
        n.add(KernelWork::Syscall("write"), 2, 1000.0);
        n.add(KernelWork::Syscall("getppid"), 5, 1000.0);
        n.add(KernelWork::Syscall("write"), 1, 1000.0);
        n.add(KernelWork::PageFault, 4, 1000.0);
        n.add(KernelWork::Unknown, 1, 1000.0);
        n.sort();
        assert_eq!(n.kernel_samples, 13);
        assert_eq!(n.page_fault_ns, 4000);
        assert_eq!(n.unknown_kernel_ns, 1000);
        let names: Vec<(&str, u64)> = n.syscalls.iter().map(|s| (s.name.as_str(), s.ns)).collect();
        assert_eq!(names, [("getppid", 5000), ("write", 3000)]);
    }
}
