//! The record model: the one set of types every stage speaks.
//!
//! The recorder (`tailprof-collect`) and the importer (`tailprof-import`) produce these
//! records; the writer stores them; the reader hands them back, in the same order, to a
//! [`Sink`]. Analyses (`tailprof-analyze`) are `Sink`s. Nothing here knows about
//! perf_event_open or about the on-disk encoding.
//!
//! Ordering invariant: within a trace, records are delivered in non-decreasing `time`
//! order, except that records whose time is unknown (`time == 0`, e.g. side-band records
//! synthesized from /proc at start) come first.
//!
//! Call stacks are interned ([`StackId`] names a node of a [`crate::StackTable`]); samples
//! and [`Switch`] records carry a stack id and a [`StackStatus`]. Readers deliver each
//! stack node once, through [`Sink::handle_stack`], before the first record that uses it.

use serde::{Deserialize, Serialize};

mod header;
mod items;
mod sink;
mod stack;
mod stats;

pub use header::*;
pub use items::*;
pub use sink::*;
pub use stack::*;
pub use stats::*;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Which processor mode a sample (or mapping) belongs to. Mirrors perf's
/// `PERF_RECORD_MISC_CPUMODE_*` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum CpuMode {
    #[default]
    Unknown = 0,
    Kernel = 1,
    User = 2,
    Hypervisor = 3,
    GuestKernel = 4,
    GuestUser = 5,
}

impl CpuMode {
    /// From the low 3 bits of a perf record header's `misc` field.
    pub fn from_perf_misc(misc: u16) -> Self {
        match misc & 7 {
            1 => CpuMode::Kernel,
            2 => CpuMode::User,
            3 => CpuMode::Hypervisor,
            4 => CpuMode::GuestKernel,
            5 => CpuMode::GuestUser,
            _ => CpuMode::Unknown,
        }
    }
    pub fn from_u8(v: u8) -> Self {
        Self::from_perf_misc(v as u16)
    }
    pub fn is_kernel(self) -> bool {
        matches!(self, CpuMode::Kernel | CpuMode::GuestKernel)
    }
}

/// One sample. Optional fields are `None` when the event did not provide them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sample {
    /// Nanoseconds on the trace clock (see [`ClockInfo`]).
    pub time: u64,
    /// Index into [`TraceHeader::events`].
    pub event: u16,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Events per sample (the sampling period in effect for this sample).
    pub period: u64,
    pub cpumode: CpuMode,
    /// Data linear address (PERF_SAMPLE_ADDR), e.g. from PEBS load-latency events.
    pub addr: Option<u64>,
    /// Access weight / latency (PERF_SAMPLE_WEIGHT or the first word of WEIGHT_STRUCT).
    pub weight: Option<u64>,
    /// PERF_SAMPLE_DATA_SRC encoding.
    pub data_src: Option<u64>,
    /// User registers, in ascending bit order of [`EventDesc::regs_user_mask`].
    /// Empty when the event did not ask for registers.
    pub regs: Vec<u64>,
    /// The call stack of the sample ([`StackId::NONE`] when none was recorded). Frames
    /// come from the [`crate::StackTable`] of the writer (producers) or from the
    /// [`Sink::handle_stack`] definitions the reader delivers (consumers).
    pub stack: StackId,
    /// Whether `stack` reached the outermost frame, and if not, why.
    pub stack_status: StackStatus,
}

/// A memory mapping (PERF_RECORD_MMAP / MMAP2, or synthesized from /proc/PID/maps).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mmap {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// PROT_* bits when known (MMAP2), else 0.
    pub prot: u32,
    pub cpumode: CpuMode,
    pub path: String,
    /// GNU build-id of the mapped ELF file, when known.
    pub build_id: Option<Vec<u8>>,
}

/// A thread got a (new) name. `exec` is true when this COMM comes from an exec.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comm {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub exec: bool,
    pub comm: String,
}

/// Task creation or exit (PERF_RECORD_FORK / PERF_RECORD_EXIT).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Task {
    pub time: u64,
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
}

/// Why records went missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum LossKind {
    /// PERF_RECORD_LOST: the ring buffer was full; `count` records of any kind were lost.
    RingFull = 0,
    /// PERF_RECORD_LOST_SAMPLES: the PMU/PEBS path dropped `count` samples.
    Samples = 1,
    /// Markers dropped because a marker ring was full (issue 3).
    Markers = 2,
    /// Records the recorder or importer could not decode (bad size, bad layout,
    /// impossible values) and skipped.
    Malformed = 3,
    /// Item-class labels dropped because a process declared more than the recorder
    /// keeps per process (a bound against hostile or runaway targets).
    ItemClasses = 4,
    /// Markers the recorder rejected as invalid (impossible times, bad kinds) or dropped
    /// because a per-target bound (pending markers) was reached.
    MarkersRejected = 5,
    /// JIT code names (perf maps, jitdumps) the recorder skipped (version 4): malformed
    /// or too long lines, bad records, entries past the per-process bound, and files
    /// refused (symlink, not a regular file, wrong owner) or cut at their byte bound
    /// (one each). Samples in that code stay unnamed.
    JitNames = 6,
    /// Source-line entries of JIT code (jitdump DEBUG_INFO) the recorder skipped (version
    /// 6): past the per-function or per-recording bound, malformed or oversized records.
    /// Samples in that code keep their names; their lines may be missing.
    JitLines = 7,
}

impl LossKind {
    /// Every kind, in code order.
    pub const ALL: [LossKind; 8] = [
        LossKind::RingFull,
        LossKind::Samples,
        LossKind::Markers,
        LossKind::Malformed,
        LossKind::ItemClasses,
        LossKind::MarkersRejected,
        LossKind::JitNames,
        LossKind::JitLines,
    ];
    /// The kind with on-disk code `v`, `None` for codes this build does not know.
    pub fn from_u8(v: u8) -> Option<LossKind> {
        LossKind::ALL.get(v as usize).copied()
    }
}

/// Lost records, as the kernel (or a marker ring) reported them.
#[derive(Debug, Clone, PartialEq)]
pub struct Lost {
    pub time: u64,
    pub cpu: u32,
    /// Index into [`TraceHeader::events`], when known.
    pub event: Option<u16>,
    pub kind: LossKind,
    pub count: u64,
}

/// PERF_RECORD_THROTTLE (`throttled == true`) or UNTHROTTLE.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttle {
    pub time: u64,
    pub cpu: u32,
    pub event: Option<u16>,
    pub throttled: bool,
}

/// What a context switch did to a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum SwitchKind {
    /// The thread starts running on `cpu`.
    #[default]
    In = 0,
    /// The thread was preempted: it is still runnable, waiting for a CPU.
    OutPreempted = 1,
    /// The thread went to sleep in the kernel (blocked on I/O, a lock, a sleep...).
    OutBlocked = 2,
}

impl SwitchKind {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(SwitchKind::In),
            1 => Some(SwitchKind::OutPreempted),
            2 => Some(SwitchKind::OutBlocked),
            _ => None,
        }
    }
    pub fn is_out(self) -> bool {
        self != SwitchKind::In
    }
}

/// A thread was switched onto or off a CPU (PERF_RECORD_SWITCH, `sched:sched_switch`).
/// `stack` is where the thread went off CPU (user and kernel frames), [`StackId::NONE`]
/// when unknown (always for [`SwitchKind::In`] as recorded today).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Switch {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub kind: SwitchKind,
    pub stack: StackId,
    pub stack_status: StackStatus,
    /// `(pid, tid)` of the other task of the switch, when a CPU-wide event saw it
    /// (`PERF_RECORD_SWITCH_CPU_WIDE`'s `next_prev_pid/tid`, version 3): on a switch-out the
    /// task that runs next, on a switch-in the task that ran before; `(0, 0)` is the idle
    /// task. `None` when unknown (per-task switch records, older traces).
    pub next_prev: Option<(u32, u32)>,
    /// On a switch-out, the value of the item-key register (`TraceHeader.extra["item_key"]`,
    /// e.g. `goroutine:r14`: the goroutine running on the thread) in the thread's user
    /// registers at the switch (FORMAT.md §5.4, an optional trailing field of version 5).
    /// `None` when not recorded (no item key, no `sched_switch` sample, a kernel thread,
    /// older traces).
    pub item_key: Option<u64>,
}

/// A thread woke another one (`sched:sched_waking`, which fires in the waker's context;
/// version 3). `pid`/`tid` are the waker (0/0: an interrupt on an idle CPU), `stack` is the
/// waker's stack at the wakeup (kernel frames first from the leaf: an interrupt-context
/// wakeup shows the interrupt's kernel path), `wakee_tid` the thread made runnable.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Wakeup {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub wakee_tid: u32,
    pub stack: StackId,
    pub stack_status: StackStatus,
}

/// One record of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Sample(Sample),
    Mmap(Mmap),
    Comm(Comm),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    Throttle(Throttle),
    Marker(Marker),
    ItemClass(ItemClass),
    Switch(Switch),
    Wakeup(Wakeup),
    /// Side-band kind 11 (`--item-event`).
    ItemEvent(ItemEvent),
    ItemTrace(ItemTrace),
}

impl Record {
    pub fn time(&self) -> u64 {
        match self {
            Record::Sample(r) => r.time,
            Record::Mmap(r) => r.time,
            Record::Comm(r) => r.time,
            Record::Fork(r) | Record::Exit(r) => r.time,
            Record::Lost(r) => r.time,
            Record::Throttle(r) => r.time,
            Record::Marker(r) => r.time,
            Record::ItemClass(r) => r.time,
            Record::Switch(r) => r.time,
            Record::Wakeup(r) => r.time,
            Record::ItemEvent(r) => r.time,
            Record::ItemTrace(r) => r.time,
        }
    }
}
