//! From a parsed [`EventSpec`] plus sampling options to a `perf_event_attr`.
//!
//! # Decisions
//!
//! * **Attr type.** [`PerfEventAttr`] is `perf-event-open-sys`'s bindgen'd
//!   `perf_event_attr` (generated from the kernel UAPI header; one small dependency that
//!   only needs `libc`). It spares us a hand-maintained `#[repr(C)]` copy of a struct
//!   with ~40 bitfields and four unions. We set `size` to [`ATTR_SIZE`]
//!   (PERF_ATTR_SIZE_VER8, 136 bytes) rather than `size_of`, so the bytes handed to the
//!   kernel (and the golden files) do not change when the crate grows the struct.
//! * **sample_type** = IP | TID | TIME | IDENTIFIER always ([`BASE_SAMPLE_TYPE`]): a
//!   default sample is 40 bytes (header + 4 words; perf 6.1's `record -a -c N` writes 48:
//!   IP|TID|TIME|ID|CPU). IDENTIFIER
//!   (not ID) because it sits at a fixed place in every record: first u64 of a sample,
//!   last u64 of the `sample_id` trailer of side-band records. With several events sharing
//!   one ring (`ioctl_set_output`) the parser can map any record to its event before it
//!   knows that event's layout (ids come from `sys::ioctl_id`). It is in the kernel's
//!   large-PEBS flags, so it costs 8 bytes per record and nothing else.
//!   + PERIOD only where a sample's period is not the attr's ([`samples_carry_period`]):
//!     frequency mode (`-F`, the kernel adapts it), and events sampled on every hit (period
//!     1, e.g. tracepoints), whose PERIOD is the hit's count. Without the bit the kernel
//!     still uses the fixed `sample_period` for every sample, which the decoder fills in
//!     (`parse::Layout::default_period`, from `EventDesc::sample_period`). Also a
//!     correctness matter for software events other than cpu-clock/task-clock:
//!     `perf_swevent_event` ignores the period and writes one sample per event (period =
//!     its count) when PERIOD is requested without `freq` (`-e page-faults -c 1000` gave one
//!     sample per fault); without it the kernel samples every `sample_period` events, as
//!     perf does (perf requests PERIOD only with `-F` or `--period`).
//!   + never CPU: every ring the recorder maps belongs to one CPU (every sampling event is
//!     opened with an explicit cpu, and `PERF_EVENT_IOC_SET_OUTPUT` only joins events of the
//!     same CPU), so the decoder takes `Sample::cpu` (and the side-band trailer's cpu) from
//!     the ring. A caller that opens an attr with cpu = -1 *and* decodes its samples must
//!     add `PERF_SAMPLE_CPU` itself.
//!   + REGS_USER when `regs_user != 0`; + ADDR | WEIGHT_STRUCT | DATA_SRC when
//!     `spec.mem` (rule in [`crate::event`]). Dropping bits never costs large PEBS: the
//!     kernel's condition is `sample_type` ⊆ its flags.
//! * `sample_id_all = 1` on every event (side-band and LOST records carry time, cpu and
//!   the identifier). Side-band bits (mmap, mmap2, comm, comm_exec, task) only with
//!   `SamplingConfig::sideband`, i.e. on the first event per ring. **Never `build_id`**:
//!   while any event with `build_id = 1` is open, the kernel (`perf_event_mmap_output`)
//!   sets PERF_RECORD_MISC_MMAP_BUILD_ID in the MMAP2 header it shares with *every*
//!   event receiving the mapping, including other tools' events that still get
//!   maj/min/ino, so a concurrent `perf record` aborts and its perf.data is misparsed.
//!   Our MMAP2 records carry maj/min/ino/ino_generation; the recorder reads build-ids
//!   from the files itself (once per file, `session::emit`, [`crate::buildid`]).
//! * **Wakeups.** `SamplingConfig::wakeup_events == 0` (the default) uses watermark mode
//!   (`watermark = 1`, `wakeup_watermark = 0`): the kernel wakes the reader when the ring
//!   is half full. This is the only mode compatible with large PEBS. `N > 0` means "wake
//!   every N samples" (`wakeup_events = N`), which rules large PEBS out (noted).
//! * **Clock.** `ClockChoice::Monotonic` sets `use_clockid = 1, clockid =
//!   CLOCK_MONOTONIC`; `PerfDefault` leaves the perf clock (convertible from TSC with
//!   the mmap page's time_zero/time_mult/time_shift; see [`crate::caps`]).
//!
//! # Large (multi-record) PEBS
//!
//! The kernel (arch/x86/events/intel/core.c, `intel_pmu_hw_config` and
//! `intel_pmu_large_pebs_flags`) uses the multi-record PEBS buffer for a precise event
//! only when: no `freq`; not (`wakeup_events != 0` without `watermark`); and
//! `sample_type` ⊆ the large-PEBS flags, which start from `LARGE_PEBS_FLAGS` (the old
//! name was PEBS_FREERUNNING_FLAGS: IP, TID, ADDR, ID, CPU, STREAM_ID, DATA_SRC,
//! IDENTIFIER, TRANSACTION, PHYS_ADDR, REGS_INTR, REGS_USER, PERIOD, CODE_PAGE_SIZE,
//! WEIGHT_TYPE) plus TIME on PEBS format ≥ 3 (Skylake and newer), minus TIME when
//! `use_clockid`, minus REGS_USER unless `exclude_kernel`, minus REGS_USER/REGS_INTR
//! when the register mask goes beyond the PEBS general-purpose registers. CALLCHAIN
//! is never in the set (requested only for call stacks, which rule large PEBS out:
//! noted). [`build_attr`] still builds the attr and
//! explains each blocker in [`AttrPlan::notes`]. Precise events default to a fixed
//! period, never to `freq`.

use perf_event_open_sys::bindings as b;
use tailprof_format::EventDesc;

use crate::event::{EventError, EventKind, EventSpec};

pub use perf_event_open_sys::bindings::perf_event_attr as PerfEventAttr;

/// `attr.size` we pass (PERF_ATTR_SIZE_VER8: everything up to `config3`).
pub const ATTR_SIZE: u32 = b::PERF_ATTR_SIZE_VER8;

/// Default for cpu-clock/task-clock when neither period nor freq is given: 250 µs of
/// CPU time per sample (4 kHz per busy CPU, perf's default rate, but as a fixed period).
pub const DEFAULT_CLOCK_PERIOD_NS: u64 = 250_000;
/// Default frequency for non-precise hardware and counted software events.
pub const DEFAULT_FREQ_HZ: u64 = 4000;
/// Default fixed period for precise cycle-like events (prime, to avoid aliasing loops).
pub const DEFAULT_PRECISE_CYCLES_PERIOD: u64 = 2_000_003;
/// Default fixed period for other precise events.
pub const DEFAULT_PRECISE_PERIOD: u64 = 100_003;
/// Default fixed period for precise memory (load-latency / store) events.
pub const DEFAULT_PRECISE_MEM_PERIOD: u64 = 10_007;

use tailprof_perf_abi::sample_type::{
    ADDR as S_ADDR, DATA_SRC as S_DATA_SRC, IDENTIFIER as S_IDENTIFIER, IP as S_IP, PERIOD as S_PERIOD, REGS_INTR as S_REGS_INTR,
    REGS_USER as S_REGS_USER, TID as S_TID, TIME as S_TIME, WEIGHT_STRUCT as S_WEIGHT_STRUCT,
};

/// sample_type bits every event gets (see the module docs for why not CPU, and when
/// PERIOD is added).
pub const BASE_SAMPLE_TYPE: u64 = S_IP | S_TID | S_TIME | S_IDENTIFIER;
/// Extra bits for memory events.
pub const MEM_SAMPLE_TYPE: u64 = S_ADDR | S_WEIGHT_STRUCT | S_DATA_SRC;

/// The kernel's large-PEBS sample_type set (LARGE_PEBS_FLAGS, formerly
/// PEBS_FREERUNNING_FLAGS) plus PERF_SAMPLE_TIME, which x86 adds for PEBS format ≥ 3.
pub const LARGE_PEBS_FLAGS: u64 = (b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_ADDR
    | b::PERF_SAMPLE_ID
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_STREAM_ID
    | b::PERF_SAMPLE_DATA_SRC
    | b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_TRANSACTION
    | b::PERF_SAMPLE_PHYS_ADDR
    | b::PERF_SAMPLE_REGS_INTR
    | b::PERF_SAMPLE_REGS_USER
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_CODE_PAGE_SIZE
    | b::PERF_SAMPLE_WEIGHT
    | b::PERF_SAMPLE_WEIGHT_STRUCT
    | b::PERF_SAMPLE_TIME) as u64;

/// Registers a PEBS record holds (PEBS_GP_REGS): ax..flags and r8..r15, no segments.
pub const PEBS_GP_REGS: u64 = 0x3ff | 0xff << 16;
/// Every x86_64 perf register usable in `sample_regs_user` (PERF_REG_X86_64_MAX = 24).
pub const ALL_USER_REGS: u64 = (1 << 24) - 1;

const CLOCK_MONOTONIC: i32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockChoice {
    /// `use_clockid = 1, clockid = CLOCK_MONOTONIC`.
    #[default]
    Monotonic,
    /// The perf default clock (local_clock); convertible from TSC when the mmap page
    /// says so. Required for large PEBS with timestamps.
    PerfDefault,
}

/// Sampling options common to all events of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingConfig {
    /// Fixed period (`-c`). At most one of `period`/`freq`; with neither, each event gets
    /// its default (see [`default_rate`]).
    pub period: Option<u64>,
    /// Target frequency in Hz (`-F`).
    pub freq: Option<u64>,
    /// `sample_regs_user` mask (see [`parse_regs`]); 0 = none.
    pub regs_user: u64,
    pub clock: ClockChoice,
    pub inherit: bool,
    pub enable_on_exec: bool,
    pub disabled: bool,
    /// Request mmap/mmap2/comm/comm_exec/task records (first event per ring).
    pub sideband: bool,
    /// 0 = watermark wakeup at half the ring (large-PEBS compatible); N = every N samples.
    pub wakeup_events: u32,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            period: None,
            freq: None,
            regs_user: 0,
            clock: ClockChoice::Monotonic,
            inherit: false,
            enable_on_exec: false,
            disabled: true,
            sideband: true,
            wakeup_events: 0,
        }
    }
}

/// The result of [`build_attr`].
#[derive(Clone)]
pub struct AttrPlan {
    pub attr: PerfEventAttr,
    pub desc: EventDesc,
    /// Human-readable advisories (why large PEBS is impossible, ...).
    pub notes: Vec<String>,
    /// For precise core-PMU events: whether the attr qualifies for large PEBS (the kernel
    /// also needs PEBS format ≥ 3 for PERF_SAMPLE_TIME). `false` for other events.
    pub large_pebs_eligible: bool,
    /// A tracepoint filter to set on every fd of this event after it is opened
    /// (`PERF_EVENT_IOC_SET_FILTER`, [`crate::sys::ioctl_set_filter`]); `None`: none.
    pub filter: Option<String>,
}

impl std::fmt::Debug for AttrPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttrPlan")
            .field("attr", &attr_golden_text(&self.attr))
            .field("desc", &self.desc)
            .field("notes", &self.notes)
            .field("large_pebs_eligible", &self.large_pebs_eligible)
            .field("filter", &self.filter)
            .finish()
    }
}

/// Sampling rate of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Period(u64),
    Freq(u64),
}

/// The rate an event gets when the user gave neither `-c` nor `-F`: cpu-clock and
/// task-clock [`DEFAULT_CLOCK_PERIOD_NS`]; precise events a fixed period (memory events
/// [`DEFAULT_PRECISE_MEM_PERIOD`], cycle-like [`DEFAULT_PRECISE_CYCLES_PERIOD`], others
/// [`DEFAULT_PRECISE_PERIOD`]); tracepoints and dummy every event; everything else
/// [`DEFAULT_FREQ_HZ`].
pub fn default_rate(spec: &EventSpec) -> Rate {
    let sw = |id: u32| spec.kind == EventKind::Software && spec.config == id as u64;
    if spec.is_clock() {
        Rate::Period(DEFAULT_CLOCK_PERIOD_NS)
    } else if sw(b::PERF_COUNT_SW_DUMMY) || spec.kind == EventKind::Tracepoint {
        Rate::Period(1)
    } else if spec.precise > 0 {
        let cycles_like = (spec.kind == EventKind::Hardware
            && [b::PERF_COUNT_HW_CPU_CYCLES, b::PERF_COUNT_HW_REF_CPU_CYCLES, b::PERF_COUNT_HW_BUS_CYCLES]
                .iter()
                .any(|&c| spec.config == c as u64))
            || spec.name.starts_with("cycles");
        Rate::Period(if spec.mem {
            DEFAULT_PRECISE_MEM_PERIOD
        } else if cycles_like {
            DEFAULT_PRECISE_CYCLES_PERIOD
        } else {
            DEFAULT_PRECISE_PERIOD
        })
    } else {
        Rate::Freq(DEFAULT_FREQ_HZ)
    }
}

/// Whether samples at `rate` must carry PERF_SAMPLE_PERIOD because their period is not
/// the attr's fixed one: in frequency mode the kernel adapts it; an event sampled on
/// every hit (period 1: tracepoints, the off-CPU `sched_switch`, kprobe/uprobe PMUs)
/// reports the hit's count there (e.g. `sched:sched_stat_runtime`, whose hits count
/// nanoseconds: without the bit `perf_swevent_event` writes one sample per counted
/// unit). Every other event reports its fixed period, which the decoder fills in.
pub fn samples_carry_period(rate: Rate) -> bool {
    match rate {
        Rate::Freq(_) => true,
        Rate::Period(p) => p == 1,
    }
}

/// Build the attr for one event.
#[allow(clippy::field_reassign_with_default)] // perf_event_attr: fields, then its bitfield setters
pub fn build_attr(spec: &EventSpec, cfg: &SamplingConfig) -> Result<AttrPlan, EventError> {
    let rate = match (cfg.period, cfg.freq) {
        (Some(_), Some(_)) => return Err(EventError::BadSampling("give either a period (-c) or a frequency (-F), not both".into())),
        (Some(0), None) => return Err(EventError::BadSampling("the sampling period must be > 0".into())),
        (None, Some(0)) => return Err(EventError::BadSampling("the sampling frequency must be > 0".into())),
        (Some(p), None) => Rate::Period(p),
        (None, Some(f)) => Rate::Freq(f),
        (None, None) => default_rate(spec),
    };
    if cfg.regs_user & !ALL_USER_REGS != 0 {
        return Err(EventError::BadSampling(format!(
            "register mask {:#x} has bits beyond the x86_64 general registers ({ALL_USER_REGS:#x})",
            cfg.regs_user
        )));
    }
    if spec.precise > 3 {
        return Err(EventError::BadSampling(format!("precise level {} > 3", spec.precise)));
    }

    let mut a = PerfEventAttr::default();
    a.type_ = spec.attr_type;
    a.size = ATTR_SIZE;
    a.config = spec.config;
    a.config1 = spec.config1;
    a.config2 = spec.config2;
    let mut sample_type = BASE_SAMPLE_TYPE;
    if samples_carry_period(rate) {
        sample_type |= S_PERIOD;
    }
    if cfg.regs_user != 0 {
        sample_type |= S_REGS_USER;
        a.sample_regs_user = cfg.regs_user;
    }
    if spec.mem {
        sample_type |= MEM_SAMPLE_TYPE;
    }
    a.sample_type = sample_type;
    match rate {
        Rate::Period(p) => a.sample_period = p,
        Rate::Freq(f) => {
            a.set_freq(1);
            a.sample_freq = f;
        }
    }
    a.set_precise_ip(spec.precise as u64);
    a.set_exclude_user(spec.exclude_user as u64);
    a.set_exclude_kernel(spec.exclude_kernel as u64);
    a.set_disabled(cfg.disabled as u64);
    a.set_inherit(cfg.inherit as u64);
    a.set_enable_on_exec(cfg.enable_on_exec as u64);
    a.set_sample_id_all(1);
    if cfg.sideband {
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
        // Not build_id: see the module docs (it breaks concurrent perf tools).
    }
    if cfg.clock == ClockChoice::Monotonic {
        a.set_use_clockid(1);
        a.clockid = CLOCK_MONOTONIC;
    }
    if cfg.wakeup_events == 0 {
        a.set_watermark(1);
        a.wakeup_watermark = 0;
    } else {
        a.wakeup_events = cfg.wakeup_events;
    }

    let mut notes = Vec::new();
    let mut large_pebs_eligible = false;
    let core_pmu_event = spec.needs_hardware_pmu();
    if spec.precise > 0 && core_pmu_event {
        let blockers = large_pebs_blockers(&a);
        large_pebs_eligible = blockers.is_empty();
        notes.extend(blockers);
        if let Rate::Period(p) = rate {
            if p > 0x7fff_ffff {
                notes.push(format!(
                    "period {p} exceeds 2^31-1: on PMUs without full-width counter writes the kernel may disable PEBS auto-reload, and with it large PEBS"
                ));
            }
        }
    }
    if spec.mem && spec.precise == 0 && core_pmu_event {
        notes.push(format!(
            "'{}' samples data addresses/latency, which Intel only provides for precise (PEBS) events; add :p or :P",
            spec.name
        ));
    }

    let desc = EventDesc {
        name: spec.name.clone(),
        attr_type: spec.attr_type,
        config: spec.config,
        config1: spec.config1,
        config2: spec.config2,
        sample_period: match rate {
            Rate::Period(p) => Some(p),
            Rate::Freq(_) => None,
        },
        sample_freq: match rate {
            Rate::Freq(f) => Some(f),
            Rate::Period(_) => None,
        },
        precise_ip: spec.precise,
        sample_type,
        regs_user_mask: cfg.regs_user,
        exclude_kernel: spec.exclude_kernel,
        exclude_user: spec.exclude_user,
    };
    Ok(AttrPlan { attr: a, desc, notes, large_pebs_eligible, filter: None })
}

/// Add call stacks to a sampling event's attr (`record -g` / `--call-graph`):
/// * `fp`: `PERF_SAMPLE_CALLCHAIN` (kernel and user frame-pointer chain);
/// * `dwarf,N`: `CALLCHAIN` with `exclude_callchain_user` (the kernel part), plus
///   `REGS_USER` (the registers the unwinder needs, [`tailprof_unwind::UNWIND_REGS_MASK`],
///   added to the caller's) and `STACK_USER` of `N` bytes;
/// * `lbr`: `CALLCHAIN` (kernel part) plus `BRANCH_STACK` in LBR call-stack mode
///   (`USER|CALL_STACK|NO_FLAGS|NO_CYCLES`, as perf's `--call-graph lbr`).
///
/// The header's `EventDesc` gets CALLCHAIN/BRANCH_STACK in `sample_type` but keeps the
/// caller's register mask: registers sampled only for unwinding are not stored.
pub fn apply_call_graph(plan: &mut AttrPlan, cg: &CallGraph) {
    use tailprof_perf_abi::branch_sample_type as bst;
    use tailprof_perf_abi::sample_type::{BRANCH_STACK, CALLCHAIN, STACK_USER};
    let a = &mut plan.attr;
    a.sample_type |= CALLCHAIN;
    plan.desc.sample_type |= CALLCHAIN;
    match *cg {
        CallGraph::Fp => {}
        CallGraph::Dwarf { stack_size } => {
            a.sample_type |= S_REGS_USER | STACK_USER;
            a.sample_regs_user |= tailprof_unwind::UNWIND_REGS_MASK;
            a.sample_stack_user = stack_size;
            a.set_exclude_callchain_user(1);
        }
        CallGraph::Lbr => {
            a.sample_type |= BRANCH_STACK;
            a.branch_sample_type = bst::USER | bst::CALL_STACK | bst::NO_FLAGS | bst::NO_CYCLES;
            a.set_exclude_callchain_user(1);
            plan.desc.sample_type |= BRANCH_STACK;
        }
    }
    if a.precise_ip() > 0 {
        plan.large_pebs_eligible = false;
        plan.notes.push("large PEBS disabled: call stacks (PERF_SAMPLE_CALLCHAIN) need a PMI per sample".into());
    }
}

/// Ask for context-switch records (`PERF_RECORD_SWITCH`, or `SWITCH_CPU_WIDE` for per-CPU
/// events) on the side-band event.
pub fn apply_context_switch(plan: &mut AttrPlan) {
    plan.attr.set_context_switch(1);
}

/// The attr of the off-CPU stack event: the `sched:sched_switch` tracepoint `spec`
/// sampled on every hit, with a callchain (kernel + user frame pointers; in dwarf mode the
/// kernel part plus user registers and stack), no side-band, the recording's clock and
/// inheritance.
pub fn off_cpu_attr(spec: &EventSpec, cfg: &SamplingConfig, cg: Option<&CallGraph>) -> Result<AttrPlan, EventError> {
    let c = SamplingConfig { period: Some(1), freq: None, regs_user: 0, sideband: false, wakeup_events: 0, ..cfg.clone() };
    let mut plan = build_attr(spec, &c)?;
    let cg = match cg {
        Some(CallGraph::Dwarf { stack_size }) => CallGraph::Dwarf { stack_size: *stack_size },
        _ => CallGraph::Fp,
    };
    apply_call_graph(&mut plan, &cg);
    Ok(plan)
}

/// `common_flags` bits of a trace record written in interrupt context
/// (TRACE_FLAG_HARDIRQ 0x08 | TRACE_FLAG_SOFTIRQ 0x10, include/linux/trace_events.h:
/// the same values since 2.6).
pub const TRACE_FLAGS_IRQ: u32 = 0x08 | 0x10;

/// The two `sched:sched_waking` events of causes (issue 21), split by the waker's
/// context with a tracepoint filter on `common_flags`, so the kernel walks only the part
/// of the waker's stack the analysis reads:
/// * `task`: wakeups from thread context (`!(common_flags & 24) && common_pid != 0`):
///   the user part of the callchain only (`exclude_callchain_kernel`; in dwarf mode the
///   user stack copy). The kernel part there is the wake mechanism (`try_to_wake_up` ←
///   `__wake_up_common` ← `pipe_write` ← … ← the syscall entry), the same for every
///   wakeup of a kind, and unwinding it cost more than the rest of the sample
///   (docs/BENCHMARKS.md "Wakeups and CPU-wide switches").
/// * `irq`: wakeups in hard or soft interrupt context, or by the idle task, which the
///   analysis takes for an interrupt (`(common_flags & 24) || common_pid == 0`): the
///   kernel part only (`exclude_callchain_user`, no user stack copy): the interrupt kind
///   (timer, disk, network) comes from it, and the user stack of whatever task the
///   interrupt happened to hit says nothing about the wakeup.
///
/// Both: sampled on every hit like the off-CPU stack event ([`off_cpu_attr`]), plus
/// `PERF_SAMPLE_RAW` (the wakee's tid), without `PERF_SAMPLE_PERIOD` (every sample of
/// this tracepoint counts one hit: the decoder fills in the attr's period 1).
pub struct WakingPlans {
    pub task: AttrPlan,
    pub irq: AttrPlan,
}

/// Build [`WakingPlans`] for the `sched:sched_waking` tracepoint `spec`.
pub fn waking_attrs(spec: &EventSpec, cfg: &SamplingConfig, cg: Option<&CallGraph>) -> Result<WakingPlans, EventError> {
    use tailprof_perf_abi::sample_type::RAW;
    let finish = |mut p: AttrPlan, filter: String| {
        p.attr.sample_type = (p.attr.sample_type | RAW) & !S_PERIOD;
        p.desc.sample_type = p.attr.sample_type;
        p.filter = Some(filter);
        p
    };
    let mut task = off_cpu_attr(spec, cfg, cg)?;
    task.attr.set_exclude_callchain_kernel(1);
    let mut irq = off_cpu_attr(spec, cfg, None)?;
    irq.attr.set_exclude_callchain_user(1);
    Ok(WakingPlans {
        task: finish(task, format!("!(common_flags & {TRACE_FLAGS_IRQ}) && common_pid != 0")),
        irq: finish(irq, format!("(common_flags & {TRACE_FLAGS_IRQ}) || common_pid == 0")),
    })
}

/// The one `sched:sched_waking` event of `record --full-waker-stacks`: every waker's
/// whole stack, kernel and user parts (as `perf record -e sched:sched_waking -g` walks
/// it), no filter, the wakee in `PERF_SAMPLE_RAW`, no `PERF_SAMPLE_PERIOD`. It costs the
/// kernel about 4 µs more per thread wakeup than [`waking_attrs`] (unwinding the wake
/// mechanism: `try_to_wake_up` ← … ← the system call; docs/BENCHMARKS.md "Wakeups and
/// CPU-wide switches").
pub fn waking_attr_full(spec: &EventSpec, cfg: &SamplingConfig, cg: Option<&CallGraph>) -> Result<AttrPlan, EventError> {
    use tailprof_perf_abi::sample_type::RAW;
    let mut p = off_cpu_attr(spec, cfg, cg)?;
    p.attr.sample_type = (p.attr.sample_type | RAW) & !S_PERIOD;
    p.desc.sample_type = p.attr.sample_type;
    Ok(p)
}

/// Why the kernel would not use large (multi-record) PEBS for this precise attr; empty
/// when it qualifies. Mirrors `intel_pmu_hw_config`/`intel_pmu_large_pebs_flags`.
pub fn large_pebs_blockers(a: &PerfEventAttr) -> Vec<String> {
    let mut out = Vec::new();
    if a.precise_ip() == 0 {
        return out;
    }
    if a.freq() != 0 {
        out.push(format!(
            "large PEBS disabled: sampling by frequency (-F {}) makes the kernel re-program the period after every sample; use a fixed period (-c N) instead",
            a.sample_freq
        ));
    }
    if a.watermark() == 0 && a.wakeup_events != 0 {
        out.push(format!(
            "large PEBS disabled: wakeup_events={} (wake every N samples) needs a PMI per sample; use the default watermark wakeup (wakeup_events=0)",
            a.wakeup_events
        ));
    }
    let st = a.sample_type;
    let mut flags = LARGE_PEBS_FLAGS;
    let mut explained = 0u64;
    if a.use_clockid() != 0 {
        flags &= !S_TIME;
        if st & S_TIME != 0 {
            explained |= S_TIME;
            out.push(
                "large PEBS disabled: use_clockid=1 (CLOCK_MONOTONIC timestamps) removes PERF_SAMPLE_TIME from the kernel's large-PEBS flags; use the perf default clock (ClockChoice::PerfDefault, needs TSC conversion in the perf mmap page)".into(),
            );
        }
    }
    if st & S_REGS_USER != 0 && a.exclude_kernel() == 0 {
        flags &= !S_REGS_USER;
        explained |= S_REGS_USER;
        out.push(
            "large PEBS disabled: PERF_SAMPLE_REGS_USER is only large-PEBS capable for user-only events; add :u or drop the register sampling".into(),
        );
    }
    if a.sample_regs_user & !PEBS_GP_REGS != 0 {
        flags &= !(S_REGS_USER | S_REGS_INTR);
        if st & S_REGS_USER != 0 && explained & S_REGS_USER == 0 {
            explained |= S_REGS_USER;
            out.push(format!(
                "large PEBS disabled: registers {} are not in the PEBS record (only general-purpose registers are)",
                reg_names(a.sample_regs_user & !PEBS_GP_REGS).join(",")
            ));
        }
    }
    let rest = st & !flags & !explained;
    if rest != 0 {
        out.push(format!(
            "large PEBS disabled: sample_type bits {} are not in the kernel's large-PEBS flags",
            sample_type_names(rest).join("|")
        ));
    }
    out
}

/// x86_64 perf register names in PERF_REG_X86_* order, with accepted aliases.
const REGS: [(&str, &[&str]); 24] = [
    ("rax", &["ax"]),
    ("rbx", &["bx"]),
    ("rcx", &["cx"]),
    ("rdx", &["dx"]),
    ("rsi", &["si"]),
    ("rdi", &["di"]),
    ("rbp", &["bp"]),
    ("rsp", &["sp"]),
    ("rip", &["ip"]),
    ("flags", &["rflags", "eflags"]),
    ("cs", &[]),
    ("ss", &[]),
    ("ds", &[]),
    ("es", &[]),
    ("fs", &[]),
    ("gs", &[]),
    ("r8", &[]),
    ("r9", &[]),
    ("r10", &[]),
    ("r11", &[]),
    ("r12", &[]),
    ("r13", &[]),
    ("r14", &[]),
    ("r15", &[]),
];

/// `"r13,rdi"` -> the `sample_regs_user` mask (PERF_REG_X86_* bit order: r13 is bit 21,
/// di bit 5). Accepts the 64-bit names (`rax`, `rip`, `r8`), perf's names (`ax`, `ip`,
/// `flags`), `gp` (the PEBS general-purpose set) and `all`; case-insensitive, separated by
/// commas or spaces. 32-bit names (`eax`) are rejected with a hint, since samples always
/// carry the full 64-bit register. Empty or `none` -> 0.
pub fn parse_regs(list: &str) -> Result<u64, EventError> {
    let mut mask = 0u64;
    for tok in list.split([',', ' ']).map(str::trim).filter(|t| !t.is_empty()) {
        let t = tok.to_ascii_lowercase();
        let bit = match t.as_str() {
            "none" => continue,
            "gp" => {
                mask |= PEBS_GP_REGS;
                continue;
            }
            "all" => {
                mask |= ALL_USER_REGS;
                continue;
            }
            _ => REGS.iter().position(|(name, aliases)| *name == t || aliases.contains(&t.as_str())),
        };
        match bit {
            Some(bit) => mask |= 1 << bit,
            None => {
                let hint = match t.strip_prefix('e').and_then(|r| REGS.iter().position(|(_, al)| al.contains(&r))) {
                    Some(i) => format!("registers are sampled as 64-bit; use {}", REGS[i].0),
                    None => format!("known: {}, gp, all", REGS.iter().map(|r| r.0).collect::<Vec<_>>().join(",")),
                };
                return Err(EventError::BadRegister { reg: tok.to_string(), hint });
            }
        }
    }
    Ok(mask)
}

/// Names of the registers in `mask`, in ascending bit order (the order of
/// `Sample::regs`). Unknown bits are skipped.
pub fn reg_names(mask: u64) -> Vec<&'static str> {
    (0..REGS.len()).filter(|&i| mask & (1 << i) != 0).map(|i| REGS[i].0).collect()
}

const SAMPLE_NAMES: [&str; 25] = [
    "IP",
    "TID",
    "TIME",
    "ADDR",
    "READ",
    "CALLCHAIN",
    "ID",
    "CPU",
    "PERIOD",
    "STREAM_ID",
    "RAW",
    "BRANCH_STACK",
    "REGS_USER",
    "STACK_USER",
    "WEIGHT",
    "DATA_SRC",
    "IDENTIFIER",
    "TRANSACTION",
    "REGS_INTR",
    "PHYS_ADDR",
    "AUX",
    "CGROUP",
    "DATA_PAGE_SIZE",
    "CODE_PAGE_SIZE",
    "WEIGHT_STRUCT",
];

/// `PERF_SAMPLE_*` names of the bits in `st` (unknown bits as `bitN`).
pub fn sample_type_names(st: u64) -> Vec<String> {
    (0..64)
        .filter(|i| st & (1u64 << i) != 0)
        .map(|i| SAMPLE_NAMES.get(i).map(|s| s.to_string()).unwrap_or_else(|| format!("bit{i}")))
        .collect()
}

/// Stable `key=value` lines describing every field of `attr` (like perf's tests/attr),
/// for golden tests and debugging. Bit masks and configs in hex, the rest decimal;
/// unions print the member selected by `freq`/`watermark`.
pub fn attr_golden_text(a: &PerfEventAttr) -> String {
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        out.push_str(k);
        out.push('=');
        out.push_str(&v);
        out.push('\n');
    };
    kv("type", a.type_.to_string());
    kv("size", a.size.to_string());
    kv("config", format!("{:#x}", a.config));
    if a.freq() != 0 {
        kv("sample_freq", a.sample_freq.to_string());
    } else {
        kv("sample_period", a.sample_period.to_string());
    }
    kv("sample_type", format!("{:#x}", a.sample_type));
    kv("sample_type.names", sample_type_names(a.sample_type).join("|"));
    kv("read_format", format!("{:#x}", a.read_format));
    let flags: [(&str, u64); 37] = [
        ("disabled", a.disabled()),
        ("inherit", a.inherit()),
        ("pinned", a.pinned()),
        ("exclusive", a.exclusive()),
        ("exclude_user", a.exclude_user()),
        ("exclude_kernel", a.exclude_kernel()),
        ("exclude_hv", a.exclude_hv()),
        ("exclude_idle", a.exclude_idle()),
        ("mmap", a.mmap()),
        ("comm", a.comm()),
        ("freq", a.freq()),
        ("inherit_stat", a.inherit_stat()),
        ("enable_on_exec", a.enable_on_exec()),
        ("task", a.task()),
        ("watermark", a.watermark()),
        ("precise_ip", a.precise_ip()),
        ("mmap_data", a.mmap_data()),
        ("sample_id_all", a.sample_id_all()),
        ("exclude_host", a.exclude_host()),
        ("exclude_guest", a.exclude_guest()),
        ("exclude_callchain_kernel", a.exclude_callchain_kernel()),
        ("exclude_callchain_user", a.exclude_callchain_user()),
        ("mmap2", a.mmap2()),
        ("comm_exec", a.comm_exec()),
        ("use_clockid", a.use_clockid()),
        ("context_switch", a.context_switch()),
        ("write_backward", a.write_backward()),
        ("namespaces", a.namespaces()),
        ("ksymbol", a.ksymbol()),
        ("bpf_event", a.bpf_event()),
        ("aux_output", a.aux_output()),
        ("cgroup", a.cgroup()),
        ("text_poke", a.text_poke()),
        ("build_id", a.build_id()),
        ("inherit_thread", a.inherit_thread()),
        ("remove_on_exec", a.remove_on_exec()),
        ("sigtrap", a.sigtrap()),
    ];
    for (k, v) in flags {
        kv(k, v.to_string());
    }
    if a.watermark() != 0 {
        kv("wakeup_watermark", a.wakeup_watermark.to_string());
    } else {
        kv("wakeup_events", a.wakeup_events.to_string());
    }
    kv("bp_type", a.bp_type.to_string());
    kv("config1", format!("{:#x}", a.config1));
    kv("config2", format!("{:#x}", a.config2));
    kv("branch_sample_type", format!("{:#x}", a.branch_sample_type));
    kv("sample_regs_user", format!("{:#x}", a.sample_regs_user));
    kv("sample_regs_user.names", reg_names(a.sample_regs_user).join(","));
    kv("sample_stack_user", a.sample_stack_user.to_string());
    kv("clockid", a.clockid.to_string());
    kv("sample_regs_intr", format!("{:#x}", a.sample_regs_intr));
    kv("aux_watermark", a.aux_watermark.to_string());
    kv("sample_max_stack", a.sample_max_stack.to_string());
    kv("aux_sample_size", a.aux_sample_size.to_string());
    kv("sig_data", format!("{:#x}", a.sig_data));
    kv("config3", format!("{:#x}", a.config3));
    out
}

/// Bytes of user stack copied per sample in dwarf mode unless `dwarf,BYTES` says
/// otherwise. Measured (docs/STACKS.md): the 99th percentile of what reaching the
/// outermost frame takes on PostgreSQL 15 under pgbench, python3 and a Rust program.
pub const DEFAULT_DWARF_STACK_SIZE: u32 = 16384;
/// The kernel's limit: a sample record must fit in 64 KiB (perf allows at most 65528).
pub const MAX_DWARF_STACK_SIZE: u32 = 65528;

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

/// A `--call-graph` value that is not one ([`CallGraph::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallGraphError {
    #[error("--call-graph dwarf,{0}: the stack size must be a number of bytes")]
    NotANumber(String),
    #[error("--call-graph dwarf,{0}: the stack size must be a multiple of 8 between 8 and {MAX_DWARF_STACK_SIZE}")]
    BadSize(u32),
    #[error("--call-graph {0}: only dwarf takes a size")]
    SizeNotTaken(String),
    #[error("--call-graph {0}: unknown mode; use fp, dwarf[,BYTES] or lbr")]
    UnknownMode(String),
}

impl CallGraph {
    /// `fp`, `dwarf`, `dwarf,BYTES`, `lbr` (perf's syntax).
    pub fn parse(s: &str) -> Result<CallGraph, CallGraphError> {
        let (mode, arg) = match s.split_once(',') {
            Some((m, a)) => (m.trim(), Some(a.trim())),
            None => (s.trim(), None),
        };
        match (mode, arg) {
            ("fp", None) => Ok(CallGraph::Fp),
            ("lbr", None) => Ok(CallGraph::Lbr),
            ("dwarf", None) => Ok(CallGraph::Dwarf { stack_size: DEFAULT_DWARF_STACK_SIZE }),
            ("dwarf", Some(n)) => {
                let n: u32 = n.parse().map_err(|_| CallGraphError::NotANumber(n.to_string()))?;
                if n == 0 || n > MAX_DWARF_STACK_SIZE || !n.is_multiple_of(8) {
                    return Err(CallGraphError::BadSize(n));
                }
                Ok(CallGraph::Dwarf { stack_size: n })
            }
            (m, Some(_)) if m == "fp" || m == "lbr" => Err(CallGraphError::SizeNotTaken(s.to_string())),
            _ => Err(CallGraphError::UnknownMode(s.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> EventSpec {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tailprof-collect/tests/fixtures/sysfs");
        EventSpec::parse_with_sysfs(s, &root).unwrap()
    }

    #[test]
    fn regs_masks() {
        assert_eq!(parse_regs("r13,rdi").unwrap(), 1 << 21 | 1 << 5);
        assert_eq!(parse_regs("R13, di").unwrap(), 1 << 21 | 1 << 5);
        assert_eq!(parse_regs("ax bx ip flags").unwrap(), 0b11 | 1 << 8 | 1 << 9);
        assert_eq!(parse_regs("rip,rsp,rbp").unwrap(), 1 << 8 | 1 << 7 | 1 << 6);
        assert_eq!(parse_regs("r8,r15,cs,gs").unwrap(), 1 << 16 | 1 << 23 | 1 << 10 | 1 << 15);
        assert_eq!(parse_regs("gp").unwrap(), PEBS_GP_REGS);
        assert_eq!(parse_regs("all").unwrap(), 0xff_ffff);
        assert_eq!(parse_regs("").unwrap(), 0);
        assert_eq!(parse_regs("none").unwrap(), 0);
        let e = parse_regs("eax").unwrap_err().to_string();
        assert!(e.contains("use rax"), "{e}");
        let e = parse_regs("xmm0").unwrap_err().to_string();
        assert!(e.contains("known:"), "{e}");
        assert_eq!(reg_names(1 << 21 | 1 << 5), vec!["rdi", "r13"]);
        assert_eq!(reg_names(PEBS_GP_REGS).len(), 18);
        assert_eq!(reg_names(parse_regs("all").unwrap()).len(), 24);
        assert!(reg_names(1 << 40).is_empty());
    }

    #[test]
    fn default_rates() {
        assert_eq!(default_rate(&spec("cpu-clock")), Rate::Period(DEFAULT_CLOCK_PERIOD_NS));
        assert_eq!(default_rate(&spec("task-clock")), Rate::Period(DEFAULT_CLOCK_PERIOD_NS));
        assert_eq!(default_rate(&spec("dummy")), Rate::Period(1));
        assert_eq!(default_rate(&spec("page-faults")), Rate::Freq(DEFAULT_FREQ_HZ));
        assert_eq!(default_rate(&spec("cycles")), Rate::Freq(DEFAULT_FREQ_HZ));
        assert_eq!(default_rate(&spec("cycles:pp")), Rate::Period(DEFAULT_PRECISE_CYCLES_PERIOD));
        assert_eq!(default_rate(&spec("r01d1:p")), Rate::Period(DEFAULT_PRECISE_PERIOD));
        assert_eq!(default_rate(&spec("mem-loads:P")), Rate::Period(DEFAULT_PRECISE_MEM_PERIOD));
    }

    #[test]
    fn basic_attr() {
        let plan = build_attr(&spec("cpu-clock"), &SamplingConfig::default()).unwrap();
        let a = &plan.attr;
        assert_eq!((a.type_, a.config, a.size), (1, 0, 136));
        assert_eq!(a.sample_type, BASE_SAMPLE_TYPE);
        assert_eq!((a.sample_period, a.freq()), (DEFAULT_CLOCK_PERIOD_NS, 0));
        assert_eq!((a.use_clockid(), a.clockid), (1, 1));
        assert_eq!((a.sample_id_all(), a.mmap2(), a.build_id(), a.watermark()), (1, 1, 0, 1));
        assert!(plan.notes.is_empty() && !plan.large_pebs_eligible);
        assert_eq!(plan.desc.sample_period, Some(DEFAULT_CLOCK_PERIOD_NS));
        assert_eq!(plan.desc.sample_type, a.sample_type);

        let cfg = SamplingConfig { sideband: false, freq: Some(999), clock: ClockChoice::PerfDefault, ..Default::default() };
        let plan = build_attr(&spec("task-clock"), &cfg).unwrap();
        let a = &plan.attr;
        assert_eq!((a.freq(), a.sample_freq, a.mmap(), a.comm(), a.use_clockid()), (1, 999, 0, 0, 0));
        assert_eq!(plan.desc.sample_freq, Some(999));
        assert_eq!(plan.desc.sample_period, None);
        assert_eq!(a.sample_type, BASE_SAMPLE_TYPE | S_PERIOD, "the kernel adapts the period: every sample says it");
    }

    /// CPU is never sampled (rings are per CPU); PERIOD only where it varies per sample.
    #[test]
    fn slim_sample_type() {
        use tailprof_perf_abi::sample_type::CPU;
        let fixed = |ev: &str, cfg: SamplingConfig| build_attr(&spec(ev), &cfg).unwrap().attr.sample_type;
        let c = |p| SamplingConfig { period: Some(p), ..Default::default() };
        let f = |hz| SamplingConfig { freq: Some(hz), ..Default::default() };
        for ev in ["cpu-clock", "task-clock", "page-faults", "cycles:pp", "r01d1", "cpu/mem-loads/pp"] {
            let st = fixed(ev, c(10_000));
            assert_eq!(st & (CPU | S_PERIOD), 0, "{ev} -c 10000: {:?}", sample_type_names(st));
            assert_eq!(st & BASE_SAMPLE_TYPE, BASE_SAMPLE_TYPE);
            let st = fixed(ev, f(1000));
            assert_eq!(st & (CPU | S_PERIOD), S_PERIOD, "{ev} -F 1000");
        }
        // Defaults: fixed for clocks and precise events, frequency for the rest.
        assert_eq!(fixed("cpu-clock", SamplingConfig::default()) & S_PERIOD, 0);
        assert_eq!(fixed("cycles:pp", SamplingConfig::default()) & S_PERIOD, 0);
        assert_eq!(fixed("page-faults", SamplingConfig::default()) & S_PERIOD, S_PERIOD);
        // Every hit sampled (tracepoints, dummy): PERIOD carries the hit's count.
        assert_eq!(fixed("dummy", SamplingConfig::default()) & S_PERIOD, S_PERIOD);
        assert_eq!(fixed("cpu-clock", c(1)) & S_PERIOD, S_PERIOD);
        assert!(samples_carry_period(Rate::Freq(1)) && samples_carry_period(Rate::Period(1)));
        assert!(!samples_carry_period(Rate::Period(2)));
        // The fixed period the decoder fills in is in the header.
        assert_eq!(build_attr(&spec("cpu-clock"), &c(10_000)).unwrap().desc.sample_period, Some(10_000));
    }

    #[test]
    fn bad_sampling() {
        let s = spec("cpu-clock");
        let both = SamplingConfig { period: Some(1), freq: Some(1), ..Default::default() };
        assert!(matches!(build_attr(&s, &both), Err(EventError::BadSampling(_))));
        let zero = SamplingConfig { period: Some(0), ..Default::default() };
        assert!(build_attr(&s, &zero).is_err());
        let zero = SamplingConfig { freq: Some(0), ..Default::default() };
        assert!(build_attr(&s, &zero).is_err());
        let regs = SamplingConfig { regs_user: 1 << 32, ..Default::default() };
        assert!(build_attr(&s, &regs).is_err());
    }

    #[test]
    fn large_pebs_rules() {
        let perf = SamplingConfig { period: Some(20003), clock: ClockChoice::PerfDefault, ..Default::default() };
        let plan = build_attr(&spec("cycles:pp"), &perf).unwrap();
        assert!(plan.large_pebs_eligible, "{:?}", plan.notes);
        assert!(plan.notes.is_empty());

        // Each option that rules it out, alone.
        let cases: Vec<(SamplingConfig, &str, &str)> = vec![
            (SamplingConfig { freq: Some(4000), period: None, ..perf.clone() }, "cycles:pp", "frequency"),
            (SamplingConfig { clock: ClockChoice::Monotonic, ..perf.clone() }, "cycles:pp", "use_clockid"),
            (SamplingConfig { wakeup_events: 8, ..perf.clone() }, "cycles:pp", "wakeup_events=8"),
            (SamplingConfig { regs_user: 1 << 21, ..perf.clone() }, "cycles:pp", "user-only"),
            (SamplingConfig { regs_user: 1 << 10, ..perf.clone() }, "cycles:upp", "cs"),
        ];
        for (cfg, ev, needle) in cases {
            let plan = build_attr(&spec(ev), &cfg).unwrap();
            assert!(!plan.large_pebs_eligible);
            assert_eq!(plan.notes.len(), 1, "{:?}", plan.notes);
            assert!(plan.notes[0].contains(needle), "{needle}: {:?}", plan.notes);
        }
        // User-only with GP registers is fine.
        let cfg = SamplingConfig { regs_user: parse_regs("r13,rdi").unwrap(), ..perf.clone() };
        assert!(build_attr(&spec("cycles:upp"), &cfg).unwrap().large_pebs_eligible);
        // Memory bits are all allowed.
        assert!(build_attr(&spec("cpu/mem-loads/pp"), &perf).unwrap().large_pebs_eligible);
        // Unknown/other bits are named.
        let mut a = build_attr(&spec("cycles:pp"), &perf).unwrap().attr;
        a.sample_type |= b::PERF_SAMPLE_CALLCHAIN as u64;
        let notes = large_pebs_blockers(&a);
        assert!(notes[0].contains("CALLCHAIN"), "{notes:?}");
        // Non-precise and non-core events get no notes.
        let plan = build_attr(&spec("cycles"), &SamplingConfig::default()).unwrap();
        assert!(plan.notes.is_empty() && !plan.large_pebs_eligible);
        // Memory event without precision gets a hint.
        let plan = build_attr(&spec("cpu/mem-loads/"), &perf).unwrap();
        assert!(plan.notes[0].contains("add :p"), "{:?}", plan.notes);
        assert_eq!(plan.attr.sample_type & MEM_SAMPLE_TYPE, MEM_SAMPLE_TYPE);
    }

    #[test]
    fn golden_text_is_stable_and_complete() {
        let plan = build_attr(&spec("cycles:pp"), &SamplingConfig::default()).unwrap();
        let t = attr_golden_text(&plan.attr);
        assert!(t.contains("\nprecise_ip=2\n"));
        assert!(t.contains("sample_type.names=IP|TID|TIME|IDENTIFIER\n"));
        assert_eq!(t, attr_golden_text(&plan.attr.clone()));
        assert!(t.lines().all(|l| l.split_once('=').is_some()));
    }
}
