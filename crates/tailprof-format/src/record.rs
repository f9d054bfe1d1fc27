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

/// Which boundary of a data item (a request, query, packet) a marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
#[derive(Default)]
pub enum MarkerKind {
    /// The thread starts working on the item.
    #[default]
    Begin = 0,
    /// The thread is done with the item.
    End = 1,
    /// Labels an item of this thread with `class` (version 2; `--item-class-from`): the
    /// innermost open item if it has no class yet, else, when none is open, the next
    /// item the thread begins. `item` is [`Marker::UNKNOWN_ITEM`].
    Label = 2,
    /// Switch marker (version 5): the thread now works on the already begun item `item`
    /// of its process (an event loop dispatching to it, a task resuming, possibly on
    /// another thread than its begin): samples of the thread go to it until the next
    /// switch, begin or its end.
    Switch = 3,
    /// Switch marker (version 5): the thread now works on no item (back in its event
    /// loop). `item` is the item it leaves, or 0 (informational).
    SwitchNone = 4,
}

/// Where a marker came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum MarkerSource {
    /// The marker API (C header, Rust crate, Python module) through its shared rings.
    #[default]
    Api = 0,
    /// A uprobe on an unmodified binary (`--item-begin` / `--item-end`).
    Uprobe = 1,
}

/// An item boundary on one thread, on the trace clock.
///
/// The join attributes each sample to the item open on its thread at the sample's time.
/// `item` identifies the item; when the end boundary cannot know the id (a uprobe on a
/// function's return), `item` is [`Marker::UNKNOWN_ITEM`] and the end closes the item
/// most recently begun on that thread.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Marker {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: MarkerKind,
    pub item: u64,
    /// Class label id (see [`ItemClass`]), 0 for none.
    pub class: u32,
    pub source: MarkerSource,
}

impl Marker {
    /// `item` value of an end marker that does not know its item's id.
    pub const UNKNOWN_ITEM: u64 = u64::MAX;
}

/// What an [`ItemEvent`] is (`--item-event`, issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum ItemEventKind {
    /// A point in time.
    #[default]
    Instant = 0,
    /// A span begins (`NAME__start`, or the first probe of `--item-span`).
    SpanStart = 1,
    /// The span of the same name most recently begun on the thread ends.
    SpanEnd = 2,
}

/// A fetched probe argument of an [`ItemEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventArg {
    U64(u64),
    I64(i64),
    /// A string the argument pointed to, cut at [`ItemEvent::MAX_ARG_TEXT`] bytes.
    Text(String),
}

impl std::fmt::Display for EventArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventArg::U64(v) => write!(f, "{v}"),
            EventArg::I64(v) => write!(f, "{v}"),
            EventArg::Text(t) => f.write_str(t),
        }
    }
}

/// Where an [`ItemEvent`]'s probe sits relative to the item boundaries (FORMAT.md
/// side-band kind 11, an optional trailing field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum EventAt {
    /// Anywhere: the event belongs to the item open on its thread at its time.
    #[default]
    Free = 0,
    /// At a site of the item-begin probe: it belongs to the item that hit begins.
    Begin = 1,
    /// At a site of the item-end probe: it belongs to the item that hit ends.
    End = 2,
}

/// A timestamped event on one thread inside (or outside) an item: a probe hit of
/// `--item-event` (FORMAT.md side-band kind 11). The analysis puts it in the item open
/// on its thread at its time; a `SpanStart`/`SpanEnd` pair of one name becomes a span.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemEvent {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub kind: ItemEventKind,
    /// The event's name (a span's name without `__start`/`__done`).
    pub name: String,
    /// The fetched arguments in the order asked for (at most [`ItemEvent::MAX_ARGS`]).
    pub args: Vec<EventArg>,
    /// Whether the probe is also the item's begin or end probe.
    pub at: EventAt,
}

impl ItemEvent {
    /// Longest event name stored, in bytes.
    pub const MAX_NAME: usize = 256;
    /// Longest string argument stored, in bytes.
    pub const MAX_ARG_TEXT: usize = 256;
    /// Most arguments per event.
    pub const MAX_ARGS: usize = 6;
}

/// Declares the name of a class label used by markers of process `pid`
/// (e.g. a query type). Written before the first marker that uses `id`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemClass {
    pub time: u64,
    pub pid: u32,
    pub id: u32,
    pub name: String,
}

/// The trace context of an item (OpenTelemetry / W3C trace context): written after the
/// item's begin by the marker runtimes' `item_trace` (docs/MARKERS.md). `item` is the
/// item's id on thread `tid` of `pid` (a begin before it names the same id).
/// Side-band kind 12 (FORMAT.md): readers that do not know it skip it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemTrace {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub item: u64,
    /// The 16-byte trace id, in W3C byte order.
    pub trace_id: [u8; 16],
    /// The 8-byte span id, in W3C byte order.
    pub span_id: [u8; 8],
}

/// Id of an interned call stack: a node of a [`crate::StackTable`], i.e. a frame plus
/// the id of its caller's node. Ids are only meaningful together with the table that
/// made them (the writer's while writing; the one fed by [`Sink::handle_stack`] while
/// reading). [`StackId::NONE`] (0) means "no stack".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct StackId(pub u32);

impl StackId {
    /// No stack (also the parent of an outermost frame).
    pub const NONE: StackId = StackId(0);
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
}

/// Which address space a frame's `ip` is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum FrameKind {
    #[default]
    User = 0,
    Kernel = 1,
}

impl FrameKind {
    /// From the on-disk code (FORMAT.md §5.5); `None` for a code this build does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(FrameKind::User),
            1 => Some(FrameKind::Kernel),
            _ => None,
        }
    }
}

/// One frame of a call stack.
///
/// For the leaf (innermost) frame `ip` is the sampled instruction address. For every other
/// frame it is the **return address** as the kernel or the unwinder reported it, i.e. the
/// instruction after the call: analyses look up `ip - 1` for non-leaf frames so a call
/// that ends a function is attributed to the caller's right function and line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Frame {
    pub ip: u64,
    pub kind: FrameKind,
}

impl Frame {
    pub fn user(ip: u64) -> Self {
        Frame { ip, kind: FrameKind::User }
    }
    pub fn kernel(ip: u64) -> Self {
        Frame { ip, kind: FrameKind::Kernel }
    }
}

/// Whether a recorded stack reached the outermost frame, and if not, why. Stored as a
/// `u8` with the stable codes below (FORMAT.md §5.5); a reader maps codes it does not
/// know to [`StackStatus::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum StackStatus {
    /// No stack was asked for (or the record cannot have one).
    #[default]
    None = 0,
    /// The stack reached the outermost frame.
    Complete = 1,
    /// DWARF unwinding ran off the end of the copied user stack (the copy was too small).
    CopyExhausted = 2,
    /// A frame's code had no unwind information (`.eh_frame`/`.debug_frame`).
    NoUnwindInfo = 3,
    /// Unwinding failed: bad frame, bad CFI, unreadable memory, a loop.
    UnwindError = 4,
    /// The kernel's or our depth limit was reached.
    MaxDepth = 5,
    /// Only the kernel part is present (no user registers / user chain).
    UserMissing = 6,
    /// A stack whose completeness cannot be decided (e.g. frame-pointer chains), or a
    /// status code this build does not know.
    Unknown = 7,
}

impl StackStatus {
    /// Every status, in code order.
    pub const ALL: [StackStatus; 8] = [
        StackStatus::None,
        StackStatus::Complete,
        StackStatus::CopyExhausted,
        StackStatus::NoUnwindInfo,
        StackStatus::UnwindError,
        StackStatus::MaxDepth,
        StackStatus::UserMissing,
        StackStatus::Unknown,
    ];

    /// From the on-disk code; codes this build does not know read as `Unknown`.
    pub fn from_u8(v: u8) -> Self {
        StackStatus::ALL.get(v as usize).copied().unwrap_or(StackStatus::Unknown)
    }

    /// A stable short name (also the JSON name), e.g. `copy_exhausted`.
    pub fn name(self) -> &'static str {
        match self {
            StackStatus::None => "none",
            StackStatus::Complete => "complete",
            StackStatus::CopyExhausted => "copy_exhausted",
            StackStatus::NoUnwindInfo => "no_unwind_info",
            StackStatus::UnwindError => "unwind_error",
            StackStatus::MaxDepth => "max_depth",
            StackStatus::UserMissing => "user_missing",
            StackStatus::Unknown => "unknown",
        }
    }

    /// The reason in words, for people (e.g. `copy exhausted`).
    pub fn reason(self) -> &'static str {
        match self {
            StackStatus::None => "no stack",
            StackStatus::Complete => "complete",
            StackStatus::CopyExhausted => "copy exhausted",
            StackStatus::NoUnwindInfo => "no unwind info",
            StackStatus::UnwindError => "unwind error",
            StackStatus::MaxDepth => "max depth",
            StackStatus::UserMissing => "user stack missing",
            StackStatus::Unknown => "completeness unknown",
        }
    }

    /// A stack was recorded (complete or not).
    pub fn has_stack(self) -> bool {
        self != StackStatus::None
    }

    /// Truncated or failed: a stack was asked for and did not reach the outermost frame
    /// (`Unknown` is not counted as truncated).
    pub fn is_truncated(self) -> bool {
        !matches!(self, StackStatus::None | StackStatus::Complete | StackStatus::Unknown)
    }
}

/// The definition of one interned stack node, delivered by the reader through
/// [`Sink::handle_stack`] before the first record that uses `id`, callers (ancestors)
/// first. `parent` is [`StackId::NONE`] for an outermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackDef {
    pub id: StackId,
    pub parent: StackId,
    pub frame: Frame,
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

/// What a consumer tells the producer after a record: go on, or stop here (it has what it
/// needs, or it failed: see [`Sink::take_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    #[default]
    Continue,
    Stop,
}

impl Flow {
    pub fn is_stop(self) -> bool {
        self == Flow::Stop
    }
}

/// The one record stream of the workspace (like perf's `struct perf_tool`): every
/// producer (the trace reader, the recorder, `import`) hands records to a `Sink`, and every
/// consumer (the trace writer, the analyses, the agent's aggregator) is one. One callback
/// per record family, each a no-op by default, plus the hooks that are not records: stack
/// definitions, build-ids, JIT names and round ends.
///
/// The stream is fallible and can stop early: after each record (the return value of
/// [`Sink::handle_record`], which asks [`Sink::flow`]) a producer stops when told
/// [`Flow::Stop`], and then asks [`Sink::take_error`] whether the sink failed (a writer's
/// I/O error: the producer returns it) or simply has enough (the producer returns what it
/// read so far). A sink that fails keeps its first error and answers `Stop` from then on.
///
/// Readers call these in record order, and call [`Sink::handle_stack`] for every stack
/// node before the first record that uses it (a consumer that needs frames keeps a
/// [`crate::StackTable`] and feeds it with [`crate::StackTable::handle_def`]).
pub trait Sink {
    fn handle_sample(&mut self, _s: &Sample) {}
    fn handle_mmap(&mut self, _m: &Mmap) {}
    fn handle_comm(&mut self, _c: &Comm) {}
    fn handle_fork(&mut self, _t: &Task) {}
    fn handle_exit(&mut self, _t: &Task) {}
    fn handle_lost(&mut self, _l: &Lost) {}
    fn handle_throttle(&mut self, _t: &Throttle) {}
    fn handle_marker(&mut self, _m: &Marker) {}
    fn handle_item_class(&mut self, _c: &ItemClass) {}
    fn handle_switch(&mut self, _s: &Switch) {}
    fn handle_wakeup(&mut self, _w: &Wakeup) {}
    /// A probe event inside items (`--item-event`).
    fn handle_item_event(&mut self, _e: &ItemEvent) {}
    fn handle_item_trace(&mut self, _t: &ItemTrace) {}
    /// A stack node, delivered before the first record that uses it, ancestors first.
    /// Not a record: [`Sink::handle_record`] does not see it.
    fn handle_stack(&mut self, _d: &StackDef) {}
    /// A JIT code name (FORMAT.md §6.1). Not a record: the reader delivers every JIT
    /// entry of the trace before the first record (each carries its own validity time),
    /// in file order.
    fn handle_jit(&mut self, _e: &crate::JitEntry) {}
    /// The build-id of a path (a later entry for the same path replaces an earlier one).
    /// Not a record: producers deliver them when they learn them (the reader as it reads
    /// the trace's build-id chunks, `import` those of the perf.data header first, the
    /// recorder as it reads mapped files).
    fn handle_build_id(&mut self, _e: &BuildIdEntry) {}
    /// The end of a batch of records in time order (the recorder's merged round; `import`
    /// every few thousand records). A writer may close a chunk here.
    fn handle_round_end(&mut self) {}
    /// Whether the producer should go on. Asked after every record by the default
    /// [`Sink::handle_record`] (statically dispatched, so free for sinks that never stop).
    fn flow(&self) -> Flow {
        Flow::Continue
    }
    /// The error that made this sink answer [`Flow::Stop`], taken once by the producer.
    /// `None` when it stopped because it has what it needs.
    fn take_error(&mut self) -> Option<crate::FormatError> {
        None
    }

    /// Dispatch one record to the matching `handle_*`; then [`Sink::flow`].
    fn handle_record(&mut self, r: &Record) -> Flow {
        match r {
            Record::Sample(s) => self.handle_sample(s),
            Record::Mmap(m) => self.handle_mmap(m),
            Record::Comm(c) => self.handle_comm(c),
            Record::Fork(t) => self.handle_fork(t),
            Record::Exit(t) => self.handle_exit(t),
            Record::Lost(l) => self.handle_lost(l),
            Record::Throttle(t) => self.handle_throttle(t),
            Record::Marker(m) => self.handle_marker(m),
            Record::ItemClass(c) => self.handle_item_class(c),
            Record::Switch(s) => self.handle_switch(s),
            Record::Wakeup(w) => self.handle_wakeup(w),
            Record::ItemEvent(e) => self.handle_item_event(e),
            Record::ItemTrace(t) => self.handle_item_trace(t),
        }
        self.flow()
    }
}

/// For producers, once the stream is over or a sink answered [`Flow::Stop`]: the sink's
/// error, if it failed.
pub fn sink_result(sink: &mut dyn Sink) -> Result<(), crate::FormatError> {
    match sink.take_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Collects every record into a Vec; handy in tests. Stack definitions are ignored (see
/// [`StacksSink`]).
#[derive(Debug, Default)]
pub struct VecSink(pub Vec<Record>);

impl Sink for VecSink {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.0.push(r.clone());
        Flow::Continue
    }
}

/// Collects every record and every stack definition: `stacks` resolves the
/// [`StackId`]s of `records`.
#[derive(Debug, Default)]
pub struct StacksSink {
    pub records: Vec<Record>,
    pub stacks: crate::StackTable,
    /// Definitions that did not extend `stacks` in order (never, from a reader).
    pub bad_defs: u64,
}

impl Sink for StacksSink {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.records.push(r.clone());
        Flow::Continue
    }
    fn handle_stack(&mut self, d: &StackDef) {
        if !self.stacks.handle_def(d) {
            self.bad_defs += 1;
        }
    }
}

/// The clock the trace's timestamps are on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ClockInfo {
    /// CLOCK_MONOTONIC via `use_clockid` (our default where the mmap page offers no TSC
    /// conversion). Markers read `clock_gettime(CLOCK_MONOTONIC)`.
    Monotonic,
    /// Another clockid passed with `use_clockid` (e.g. CLOCK_MONOTONIC_RAW = 4).
    Clockid { clockid: i32 },
    /// The default perf clock (local_clock / sched_clock), with the TSC conversion
    /// parameters from the perf mmap page so rdtsc-based markers and PEBS TSC values can be
    /// converted: `ns = time_zero + ((tsc * time_mult) >> time_shift)` (with the
    /// kernel's split-multiply to avoid overflow).
    PerfTsc { time_shift: u16, time_mult: u32, time_zero: u64 },
    /// The default perf clock without known TSC conversion (e.g. imported perf.data
    /// recorded without `-k`).
    Perf,
}

/// Description of one event in the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EventDesc {
    /// As the user spelled it, e.g. `cpu-clock`, `cycles:pp`, `r01d1`.
    pub name: String,
    /// perf_event_attr.type
    pub attr_type: u32,
    /// perf_event_attr.config
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// Fixed sampling period, when sampling by period.
    pub sample_period: Option<u64>,
    /// Target frequency in Hz, when sampling by frequency.
    pub sample_freq: Option<u64>,
    /// perf_event_attr.precise_ip (0..=3).
    pub precise_ip: u8,
    /// perf_event_attr.sample_type bits.
    pub sample_type: u64,
    /// perf_event_attr.sample_regs_user (0 when no registers are sampled).
    pub regs_user_mask: u64,
    pub exclude_kernel: bool,
    pub exclude_user: bool,
}

impl EventDesc {
    /// cpu-clock or task-clock (`PERF_TYPE_SOFTWARE` configs 0 and 1): periods and counts
    /// are nanoseconds of run time. The stored-event twin of the recorder's
    /// `EventSpec::is_clock`.
    pub fn is_clock(&self) -> bool {
        self.attr_type == 1 && (self.config == 0 || self.config == 1)
    }
}

/// Everything a trace says about itself besides its records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TraceHeader {
    pub events: Vec<EventDesc>,
    pub clock: Option<ClockInfo>,
    /// Where the trace came from: `"record"`, `"import"`.
    pub source: String,
    /// The command line that made the recording (tailprof's, or perf's for imports).
    pub cmdline: Vec<String>,
    pub hostname: Option<String>,
    pub os_release: Option<String>,
    pub arch: Option<String>,
    pub cpu_desc: Option<String>,
    pub nr_cpus: Option<u32>,
    /// CLOCK_REALTIME at start, in ns since the Unix epoch, when known.
    pub start_realtime_ns: Option<u64>,
    /// Free-form extra facts (`key -> value`), e.g. perf.data header features.
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, String>,
}

/// The text form of a build-id, as tools print it and name files by it (lowercase hex,
/// two digits per byte: `debug/.build-id/ab/cdef….debug`, debuginfod URLs, the store's
/// build-id columns). The one spelling of the workspace.
pub fn build_id_hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(id.len() * 2);
    for &b in id {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Build-id of a file, stored once per path (from perf.data's HEADER_BUILD_ID or read
/// from the ELF file at record time).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BuildIdEntry {
    pub path: String,
    pub build_id: Vec<u8>,
}

/// Counters a trace carries about itself and its collection. The writer fills the
/// record-derived ones; the recorder adds what it knows (e.g. wakeups); all of them are
/// printed by `tailprof info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TraceStats {
    pub samples: u64,
    /// Sum of `Lost::count` over all [`LossKind::RingFull`] records.
    pub lost_records: u64,
    /// Sum of `Lost::count` over all [`LossKind::Samples`] records.
    pub lost_samples: u64,
    /// Sum of dropped markers.
    pub lost_markers: u64,
    /// Sum of `Lost::count` over [`LossKind::Malformed`] records (version 2).
    #[serde(default)]
    pub malformed_records: u64,
    /// Sum of `Lost::count` over [`LossKind::ItemClasses`] records (version 2).
    #[serde(default)]
    pub dropped_item_classes: u64,
    /// Sum of `Lost::count` over [`LossKind::MarkersRejected`] records (version 2).
    #[serde(default)]
    pub rejected_markers: u64,
    /// Sum of `Lost::count` over [`LossKind::JitNames`] records (version 4; not written
    /// when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_jit_names: u64,
    /// Sum of `Lost::count` over [`LossKind::JitLines`] records (version 6; not written
    /// when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_jit_lines: u64,
    pub throttle_events: u64,
    pub unthrottle_events: u64,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    /// Samples per [`StackStatus`] (samples without a stack are not counted here:
    /// `samples - sample_stacks.total()`). Absent in version-1 traces (all zero).
    #[serde(default)]
    pub sample_stacks: StackStatusCounts,
    /// Switch records per kind.
    #[serde(default)]
    pub switches: SwitchCounts,
    /// Switch records per [`StackStatus`] of their off-CPU stack.
    #[serde(default)]
    pub switch_stacks: StackStatusCounts,
    /// [`Wakeup`] records (version 3; not written when 0, so traces without wakeups keep
    /// their trailer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wakeups: u64,
}

/// Counts per [`StackStatus`], `None` excluded. Unknown fields in JSON are ignored, so a
/// newer writer's extra statuses do not break older readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct StackStatusCounts {
    pub complete: u64,
    pub copy_exhausted: u64,
    pub no_unwind_info: u64,
    pub unwind_error: u64,
    pub max_depth: u64,
    pub user_missing: u64,
    pub unknown: u64,
}

impl StackStatusCounts {
    /// The counter of `s`; `None` for [`StackStatus::None`].
    pub fn get_mut(&mut self, s: StackStatus) -> Option<&mut u64> {
        Some(match s {
            StackStatus::None => return None,
            StackStatus::Complete => &mut self.complete,
            StackStatus::CopyExhausted => &mut self.copy_exhausted,
            StackStatus::NoUnwindInfo => &mut self.no_unwind_info,
            StackStatus::UnwindError => &mut self.unwind_error,
            StackStatus::MaxDepth => &mut self.max_depth,
            StackStatus::UserMissing => &mut self.user_missing,
            StackStatus::Unknown => &mut self.unknown,
        })
    }
    /// The count of `s` (0 for [`StackStatus::None`]).
    pub fn get(&self, s: StackStatus) -> u64 {
        let mut c = *self;
        c.get_mut(s).map_or(0, |v| *v)
    }
    /// Adds `n` to the counter of `s` (saturating; `None` is not counted).
    pub fn add(&mut self, s: StackStatus, n: u64) {
        if let Some(c) = self.get_mut(s) {
            *c = c.saturating_add(n);
        }
    }
    /// Adds every counter of `o`.
    pub fn add_all(&mut self, o: &StackStatusCounts) {
        for s in StackStatus::ALL {
            self.add(s, o.get(s));
        }
    }
    /// Stacks counted (every status but `None`).
    pub fn total(&self) -> u64 {
        StackStatus::ALL.iter().fold(0u64, |a, &s| a.saturating_add(self.get(s)))
    }
    /// Stacks that are truncated or failed ([`StackStatus::is_truncated`]).
    pub fn truncated(&self) -> u64 {
        StackStatus::ALL.iter().filter(|s| s.is_truncated()).fold(0u64, |a, &s| a.saturating_add(self.get(s)))
    }
    /// `(status, count)` for every status with a non-zero count, in code order.
    pub fn nonzero(&self) -> Vec<(StackStatus, u64)> {
        StackStatus::ALL.iter().map(|&s| (s, self.get(s))).filter(|&(_, n)| n > 0).collect()
    }
}

/// Switch records per [`SwitchKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SwitchCounts {
    /// [`SwitchKind::In`].
    pub switch_in: u64,
    pub out_preempted: u64,
    pub out_blocked: u64,
}

impl SwitchCounts {
    pub fn add(&mut self, k: SwitchKind, n: u64) {
        let c = match k {
            SwitchKind::In => &mut self.switch_in,
            SwitchKind::OutPreempted => &mut self.out_preempted,
            SwitchKind::OutBlocked => &mut self.out_blocked,
        };
        *c = c.saturating_add(n);
    }
    pub fn get(&self, k: SwitchKind) -> u64 {
        match k {
            SwitchKind::In => self.switch_in,
            SwitchKind::OutPreempted => self.out_preempted,
            SwitchKind::OutBlocked => self.out_blocked,
        }
    }
    pub fn total(&self) -> u64 {
        self.switch_in.saturating_add(self.out_preempted).saturating_add(self.out_blocked)
    }
}

impl TraceStats {
    /// The counter a [`Lost`] record of `kind` adds to.
    pub fn loss_counter_mut(&mut self, kind: LossKind) -> &mut u64 {
        match kind {
            LossKind::RingFull => &mut self.lost_records,
            LossKind::Samples => &mut self.lost_samples,
            LossKind::Markers => &mut self.lost_markers,
            LossKind::Malformed => &mut self.malformed_records,
            LossKind::ItemClasses => &mut self.dropped_item_classes,
            LossKind::MarkersRejected => &mut self.rejected_markers,
            LossKind::JitNames => &mut self.skipped_jit_names,
            LossKind::JitLines => &mut self.skipped_jit_lines,
        }
    }
    /// The total of `kind`'s counter.
    pub fn loss_count(&self, kind: LossKind) -> u64 {
        match kind {
            LossKind::RingFull => self.lost_records,
            LossKind::Samples => self.lost_samples,
            LossKind::Markers => self.lost_markers,
            LossKind::Malformed => self.malformed_records,
            LossKind::ItemClasses => self.dropped_item_classes,
            LossKind::MarkersRejected => self.rejected_markers,
            LossKind::JitNames => self.skipped_jit_names,
            LossKind::JitLines => self.skipped_jit_lines,
        }
    }
    /// Adds `n` to `kind`'s counter, saturating.
    pub fn add_loss(&mut self, kind: LossKind, n: u64) {
        let c = self.loss_counter_mut(kind);
        *c = c.saturating_add(n);
    }
}
