//! The recorder: open events for a target, drain the per-CPU rings with one epoll loop,
//! merge CPUs in timestamp order, and write records to a trace.
//!
//! # Setup ([`Recorder::new`])
//! One ring per online CPU. For every CPU and every task (the launched child, each
//! thread of `-p PID`, or `pid = -1` for `-a`, with or without a command) each event gets an fd; the first fd
//! opened on a CPU owns the ring (`mmap`), every other fd on that CPU is redirected
//! into it with `PERF_EVENT_IOC_SET_OUTPUT`. Event 0 is the side-band event (mmap2,
//! comm, task, build-id). Each fd's kernel id (`PERF_EVENT_IOC_ID`) is registered with
//! the [`Decoder`] so records of several events sharing one ring can be told apart.
//! Everything is opened disabled; the command's events enable themselves at exec
//! (`enable_on_exec`), the others are enabled when [`Recorder::run`] starts.
//!
//! # Merging CPUs: rounds
//! Each ring is ordered in time, but rings are not ordered with respect to each
//! other. Every iteration of the loop is a *round*:
//!
//! 1. read the clock (`T_k`, CLOCK_MONOTONIC — the clock of the timestamps), then
//!    drain every ring completely into the [`RoundQueue`];
//! 2. merge the per-CPU runs by time (a k-way merge; each ring is already in time
//!    order, see [`RoundQueue`]) and write only the records with
//!    `time <= T_{k-1}` — the drain-start time of the *previous* round — keeping later
//!    ones queued in place; then `end_round()` on the writer. While a long round is
//!    written, rings over a quarter full are drained again between batches and between
//!    the columns of a chunk being encoded (those records are newer than the limit and
//!    wait for the next round).
//!
//! **Invariant:** a record stamped `t <= T_{k-1}` was written into its ring before
//! `T_k` (the kernel writes a record right after taking its timestamp, and a round lasts
//! far longer than that), so round `k`'s drain, which starts after `T_k`, has already
//! picked it up. Hence nothing drained later can be older than what round `k` writes,
//! and the output is globally time-ordered. Records synthesized from /proc (time 0) are
//! written before the loop starts. At the end, after the final full drain, everything
//! left is written, merged. With the perf default clock, which user space cannot read,
//! `T_k` is the largest timestamp seen before round `k`'s drain (perf's own rule).
//!
//! "Far longer" is what makes it hold, and rounds can follow each other closely (an
//! early wakeup, the target's exit), while a record's timestamp and its publication in
//! `data_head` are separated by a few microseconds — or by a vCPU preemption in a VM.
//! So the limit is `min(T_{k-1}, T_k - 20 ms)`: in steady state (100 ms poll timeout)
//! it is exactly `T_{k-1}`, and a record is never written before it is 20 ms old. A
//! record that arrives later than that anyway is still written (never dropped) and
//! counted in [`RecordSummary::out_of_order`].
//!
//! The drain path does no allocation per record and no syscall per sample: a sample
//! with nothing but fixed fields (the default `-e cpu-clock` layout) is decoded once,
//! as its ring is drained, into a 48-byte queue entry ([`crate::parse::PlainSample`]);
//! any other record is copied from the ring into a reused arena and decoded when it is
//! written, into one reused `Sample`. Both kinds share one queue, in one order.
//!
//! # Items (markers, uprobes, register tags)
//! A [`MarkerCollector`] is always created. A launched command gets its environment
//! variables (through [`Child::release_with_env`]); `-p PID` is attached while the
//! recorder is set up (before the events are enabled, so no item begin is missed);
//! `-a` attaches, best effort, to the processes running at start whose mappings define
//! the marker library's control symbol, and to those that map such a file later
//! ([`items::markers::MarkerFollower`], fed by the emitter's MMAP2 records; `Recorder::after_marker_drain`).
//! Off-CPU events not asked for wait for the first marker ([`offcpu_later::OffCpuLater`]). Every round the marker rings are drained into a
//! [`record_queue::RecordQueue`] and merged with the raw records by the same round rule
//! (marker times are on the samples' clock); at the end the collector is finished and
//! everything is flushed. Dropped markers arrive as `Lost { kind: Markers }` records.
//!
//! Uprobe item boundaries ([`ItemOptions::probes`]) are two more events per CPU and
//! task, redirected into the same rings; their hits are turned into [`Marker`] records
//! (source Uprobe) by [`MarkerMaker`] instead of being written as samples. Register-tag
//! mode ([`ItemOptions::item_reg`]) adds the register to every sampling event's
//! `sample_regs_user` and names it in `TraceHeader.extra["item_reg"]`.

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use tailprof_format::{FormatError, LossKind, Lost, Record, TraceHeader, TraceWriter};

use crate::attr::{apply_call_graph, apply_context_switch, build_attr, off_cpu_attr, waking_attrs, AttrPlan, ClockChoice, SamplingConfig};
use crate::caps::Capabilities;
use crate::event::{EventError, EventSpec};
use crate::items::uprobe::{MarkerMaker, ProbeRole, UprobeError};
use crate::parse::{Decoder, Layout};
use crate::procfs;
use crate::ring::{Ring, RoundQueue};
use crate::stacks::StackMaker;
pub use crate::stacks::{CallGraph, StackOptions};
use crate::sys::{self, CollectError};
use crate::target::{self, Child, LaunchError};

mod emit;
mod epoll;
use epoll::Epoll;
mod offcpu_later;
mod open;
mod output;
mod plan;
mod record_queue;
mod spool;
use crate::items;
use crate::items::markers::MarkerCollector;
pub use crate::items::ItemOptions;
use emit::Emitter;
pub use output::{finish as finish_trace_file, FileTraceWriter, RecordOutput, TraceFile, VecOutput};
use plan::*;

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Launch this command (argv); counting starts at its exec.
    Command(Vec<String>),
    /// Attach to a running process: all its threads, and threads created later.
    Pid(u32),
    /// Every CPU, every process.
    SystemWide,
    /// Every CPU, every process, for as long as this command (launched like
    /// [`Target::Command`], its exit status passed through) runs: `record -a -- CMD`.
    SystemWideCommand(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub events: Vec<EventSpec>,
    /// Period/freq/regs from the caller; inherit, enable_on_exec, disabled, sideband and
    /// clock are set by the recorder per target and event.
    pub sampling: SamplingConfig,
    /// Data pages per CPU ring (a power of two).
    pub mmap_pages: usize,
    pub target: Target,
    pub cmdline: Vec<String>,
}

/// Handed to the progress callback once per round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub elapsed_ns: u64,
    pub samples: u64,
    pub lost: u64,
    pub bytes: u64,
    /// Item markers written so far (from the marker library and from uprobes).
    pub markers: u64,
    /// Markers dropped because a marker ring was full.
    pub lost_markers: u64,
}

/// What a recording did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordSummary {
    pub duration_ns: u64,
    pub samples: u64,
    /// Sum of PERF_RECORD_LOST counts (ring full).
    pub lost_records: u64,
    /// Sum of PERF_RECORD_LOST_SAMPLES counts.
    pub lost_samples: u64,
    /// PERF_RECORD_THROTTLE records.
    pub throttled: u64,
    /// Command target: exit code, or 128 + signal.
    pub exit_status: Option<i32>,
    /// epoll wakeups that reported ready fds.
    pub wakeups: u64,
    pub rounds: u64,
    /// Records that could not be decoded (and ring batches with a corrupt size field);
    /// they are counted here, never silently dropped.
    pub malformed: u64,
    /// Records written after a record with a later timestamp (see the module docs).
    pub out_of_order: u64,
    /// Records of types the recorder does not keep (e.g. PERF_RECORD_SWITCH).
    pub ignored: u64,
    /// Item markers written (from the marker library and from uprobes).
    pub markers: u64,
    /// Markers dropped because a marker ring was full (sum of `Lost { kind: Markers }`).
    pub lost_markers: u64,
    /// Records the drain thread copied out of a ring the main thread was late for
    /// (`session::spool`); they are written like every other record.
    pub spooled: u64,
    /// JIT code names (perf maps, jitdumps) copied into the trace.
    pub jit_names: u64,
    /// JIT code names skipped (stored as `Lost { kind: JitNames }`).
    pub skipped_jit_names: u64,
    /// Source-line entries of JIT code (jitdump DEBUG_INFO) copied, and skipped (stored
    /// as `Lost { kind: JitLines }`).
    pub jit_lines: u64,
    pub skipped_jit_lines: u64,
    /// `--call-graph dwarf`: JIT code ranges whose jitdump UNWINDING_INFO the unwinder
    /// used, and records of it skipped (malformed, over a bound).
    pub jit_unwind_infos: u64,
    pub jit_unwind_skipped: u64,
    /// `--call-graph dwarf`: frames unwound through JIT unwind information, and frames in
    /// code without unwind information walked with the frame-pointer fallback (counted
    /// as of the last JIT poll).
    pub jit_cfi_frames: u64,
    pub unwind_fallback_frames: u64,
    /// What the user should know about the run (the CLI prints each as a warning).
    pub warnings: Vec<RunWarning>,
    /// Paths evicted from the build-id cache (least recently used first) because it held
    /// [`emit::MAX_BUILD_ID_PATHS`] paths or [`emit::MAX_BUILD_ID_PATH_BYTES`] bytes of
    /// them (issue 19, finding 7); such a file's build-id is read again if it is mapped again.
    pub build_id_paths_evicted: u64,
    /// (path, build-id) pairs not stored in the trace because it already holds
    /// [`emit::MAX_TRACE_BUILD_ID_BYTES`] of them (a recording's build-id table is kept
    /// in memory until the end: issue 19, finding 7, `record -a` grew by 400 MB with
    /// 100,000 long paths); those paths are symbolized by path at report time.
    pub build_ids_not_stored: u64,
}

/// Something about a finished recording worth a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunWarning {
    /// The launched command failed (non-zero exit or a signal the recorder did not send)
    /// and no item marker was recorded although item probes were set: the probes may have
    /// broken it (as inherited uprobe PMU events once broke `clone`, issue 18 item 2).
    CommandFailedWithoutMarkers {
        /// Exit code, or 128 + signal.
        exit_status: i32,
    },
}

impl std::fmt::Display for RunWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunWarning::CommandFailedWithoutMarkers { exit_status } => write!(
                f,
                "the command exited with status {exit_status} and no item marker was recorded although item probes \
                 were set: if it succeeds without tailprof, the probes may have broken it (please report it); \
                 otherwise check that the probed functions run"
            ),
        }
    }
}

/// [`RunWarning::CommandFailedWithoutMarkers`] when it applies: a launched command that
/// failed by itself (`stopped`: the recorder was stopped and may have signalled it), with
/// item probes and no marker.
pub(crate) fn command_failure_warning(exit_status: Option<i32>, stopped: bool, probes: bool, markers: u64) -> Option<RunWarning> {
    match exit_status {
        Some(code) if code != 0 && !stopped && probes && markers == 0 => {
            Some(RunWarning::CommandFailedWithoutMarkers { exit_status: code })
        }
        _ => None,
    }
}

/// Everything that can go wrong while recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Event(#[from] EventError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("writing the trace failed: {0}")]
    Format(#[from] FormatError),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("invalid recording options: {0}")]
    Options(String),
    #[error(transparent)]
    Uprobe(#[from] UprobeError),
    /// More than a bound allows (the message names it).
    #[error("{0}")]
    Limit(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RecordError {
    let what = what.into();
    move |source| RecordError::Io { what, source }
}

/// How long one epoll_wait may block: bounds round latency and stop latency.
const POLL_TIMEOUT_MS: i32 = 100;
/// How often the recorder makes the trace durable (closes the chunk and flushes the
/// file), so a recorder killed with SIGKILL loses at most about this much data.
const FLUSH_EVERY_NS: u64 = 2_000_000_000;
/// After `stop`, how long a launched command may take to exit by itself (it got the
/// terminal's SIGINT too) before it is sent SIGTERM...
const CHILD_TERM_AFTER_NS: u64 = 250_000_000;
/// ...and SIGKILL.
const CHILD_KILL_AFTER_NS: u64 = 2_250_000_000;
/// Minimum age of a record before it is written (see the module docs).
const ROUND_MARGIN_NS: u64 = 20_000_000;
/// Records written between two checks for rings filling up during a round.
const EMIT_BATCH: usize = 4096;
/// Above this many queued records, mid-round drains stop (see [`Recorder::refill`]).
const MAX_QUEUED_RECORDS: usize = 256 * 1024;
/// epoll data value of the target's pidfd.
const PIDFD_TOKEN: u64 = u64::MAX;
/// epoll data value of the drain thread's "a ring reached its watermark" eventfd.
const KICK_TOKEN: u64 = u64::MAX - 1;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in ns (the clock of `use_clockid` timestamps).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// A recording in progress (see the module docs).
pub struct Recorder {
    target: Target,
    specs: Vec<EventSpec>,
    plans: Vec<AttrPlan>,
    clock: ClockChoice,
    header: TraceHeader,
    notes: Vec<String>,
    /// The drain thread, once running: it owns the rings then (`rings` is empty). Declared
    /// before `fds` so that it stops before they close.
    spool: Option<spool::Spooler>,
    /// Every perf fd; `ring_owner_fd[i]` indexes the one that owns `rings[i]`.
    fds: Vec<OwnedFd>,
    rings: Vec<Ring>,
    ring_owner_fd: Vec<usize>,
    child: Option<Child>,
    pidfd: Option<OwnedFd>,
    epoll: Epoll,
    /// Raw ring records waiting for their round.
    raw_queue: RoundQueue,
    /// Decodes, counts and writes what a round emits.
    emitter: Emitter,
    /// Largest timestamp drained so far (round clock for the perf default clock).
    max_seen: u64,
    ran: bool,
    markers: MarkerCollector,
    /// Drained marker records waiting for their round.
    marker_queue: record_queue::RecordQueue,
    /// Environment for the launched command (the marker transport's).
    child_env: Vec<(String, String)>,
    probes: Option<items::uprobe::ProbeSet>,
    /// The sampling config every event was built with (the probes reuse its inherit and
    /// enable-on-exec settings).
    sampling: SamplingConfig,
    /// The off-CPU stack event (`sched:sched_switch`), opened per CPU and task after the
    /// probes; its decoder index is the emitter's `StackMaker::off_cpu_event`.
    off_cpu: Option<AttrPlan>,
    /// Off-CPU events waiting for the first marker (issue 7 item 2).
    off_cpu_later: offcpu_later::OffCpuLater,
    /// The `sched:sched_waking` events opened with every task like `off_cpu` (system-wide
    /// targets, or CPU-wide events not permitted), and their decoder indexes.
    waking_in_task: Vec<(AttrPlan, u16)>,
    /// Events opened CPU-wide besides the target's own (causes: sched_waking and the
    /// CPU-wide context switches), with their decoder indexes; their fds, enabled at the
    /// start of the run whatever the target.
    cpu_wide: Vec<(AttrPlan, u16)>,
    cpu_wide_fds: Vec<OwnedFd>,
    /// `-a -- CMD`: the command exited during a long round and the events were disabled
    /// there (see [`Recorder::refill`]).
    sampling_stopped: bool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("target", &self.target).field("fds", &self.fds.len()).finish()
    }
}

/// Raise the soft open-file limit to the hard one (per-thread × per-CPU fds add up).
fn raise_nofile_limit() {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

fn hostname() -> Option<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

impl Recorder {
    /// Probe the machine, build the attrs, launch the command stopped before exec (for
    /// [`Target::Command`]), open every fd and map every ring. Nothing is recorded until
    /// [`Recorder::run`].
    pub fn new(opts: RecordOptions) -> Result<Recorder, RecordError> {
        Self::with_items(opts, ItemOptions::default())
    }

    /// [`Recorder::new`] with item boundaries from uprobes and/or register-tag mode
    /// (markers from the marker library are always collected). The stages, in order:
    /// check the options, probe the machine, derive the sampling config, build one attr
    /// per event, prepare the uprobes, describe every event to the decoder, write the
    /// trace header, then open the target's events and map the rings, and watch them.
    pub fn with_items(opts: RecordOptions, items: ItemOptions) -> Result<Recorder, RecordError> {
        Self::with_stacks(opts, items, StackOptions::default())
    }

    /// [`Recorder::with_items`] with call stacks and/or off-CPU recording
    /// ([`crate::stacks`]): every sampling event gets the call-graph fields, the side-band
    /// event `context_switch`, and a `sched:sched_switch` event (after the probes) gives the
    /// off-CPU stacks (tracefs is mounted when absent, with a note).
    pub fn with_stacks(opts: RecordOptions, items: ItemOptions, stack_opts: StackOptions) -> Result<Recorder, RecordError> {
        check_options(&opts)?;
        let caps = Capabilities::probe();
        if caps.online_cpus.is_empty() {
            return Err(RecordError::Options("could not determine the online CPUs".into()));
        }
        let clock = caps.clock_choice();
        let item_reg = match &items.item_reg {
            Some(r) => Some(items::item_reg_mask(r)?),
            None => None,
        };
        let mut sampling = sampling_config(&opts, clock, item_reg.as_ref().map_or(0, |(mask, _)| *mask));
        let mut plans = build_plans(&opts.events, &sampling)?;
        let probes = prepare_probes(&items, plans.len(), &sampling)?;
        // Items keyed by goroutine (Go): every sample carries the goroutine register too.
        if let Some(p) = probes.as_ref().filter(|p| p.prepared.goroutine) {
            if items.item_reg.is_some() {
                return Err(RecordError::Options(
                    "--item-reg cannot be used with probes on a Go binary (items are keyed by goroutine, r14)".into(),
                ));
            }
            sampling = sampling_config(&opts, clock, p.prepared.id_reg_mask);
            plans = build_plans(&opts.events, &sampling)?;
        }
        let mut stack_notes = Vec::new();
        let (mut off_cpu, switch_later) = off_cpu_plans(&stack_opts, items.off_cpu_on_markers, &mut plans, &sampling, &mut stack_notes)?;
        // Goroutine mode: the sched_switch samples carry the goroutine register too, and
        // the switch-out records its value (`Switch::item_key`, docs/PROBES.md).
        let item_key_mask = probes.as_ref().filter(|p| p.prepared.goroutine).map_or(0, |p| p.prepared.id_reg_mask);
        if let Some(p) = off_cpu.as_mut().filter(|_| item_key_mask != 0) {
            add_user_regs(p, item_key_mask);
        }
        let mut layouts = decoder_layouts(&plans, probes.as_ref(), clock);
        let off_cpu_event = match &off_cpu {
            Some(p) => {
                layouts.push(layout_of(p));
                (layouts.len() - 1) as u16
            }
            None => u16::MAX,
        };
        // The context-switch event of off-CPU-at-the-first-marker (offcpu_later::OffCpuLater).
        let switch_later_event = switch_later.as_ref().map_or(u16::MAX, |p| {
            layouts.push(layout_of(p));
            (layouts.len() - 1) as u16
        });
        // Causes (issue 21): sched_waking and the CPU-wide context switches.
        let system_wide = matches!(opts.target, Target::SystemWide | Target::SystemWideCommand(_));
        let causes = cause_plans(&stack_opts, switch_later.is_some(), system_wide, &sampling, &mut stack_notes)?;
        let mut index_of = |p: &AttrPlan| {
            layouts.push(layout_of(p));
            (layouts.len() - 1) as u16
        };
        let waking_events: Vec<u16> = causes.waking.iter().map(&mut index_of).collect();
        let cpu_switch_event = causes.cpu_switch.as_ref().map_or(u16::MAX, index_of);
        let recording_wakeups = !causes.waking.is_empty();
        // Per-task targets: CPU-wide when permitted (wakers outside the process, and who
        // ran while its threads waited for a CPU), else with the target's tasks.
        let cpu_wide_ok = !system_wide && recording_wakeups && cpu_wide_permitted(&caps);
        if recording_wakeups && !system_wide && !cpu_wide_ok {
            stack_notes.push(
                "CPU-wide events not permitted (run as root or set kernel.perf_event_paranoid to 0): wakeups are \
                 recorded only when the waker is in the recorded processes, and who ran instead of a runnable \
                 thread (preempted_by) is not recorded"
                    .into(),
            );
        }
        // Switches recorded once (issue 21, recording cost): when the CPU-wide context
        // switches are opened with the target's events, the per-task side-band event
        // carries none; the tracked threads' own switches come from the CPU-wide event
        // (stacks::CauseFilter::own_from_cpu_wide), so the kernel writes each switch once.
        let own_from_cpu_wide = stack_opts.off_cpu && switch_later.is_none() && cpu_wide_ok && causes.cpu_switch.is_some();
        if own_from_cpu_wide {
            drop_task_switches(&mut plans);
        }
        // `--item-class-from` and `--item-event` events come last (tracefs uprobe events, as
        // tracepoints).
        let classes = items::classprobe::ClassProbes::prepare(
            &items.class_from,
            &items.events,
            probes.as_ref().map(|p| (&p.prepared.begin[..], &p.prepared.end[..])),
            layouts.len(),
        )?;
        layouts.extend(classes.iter().flat_map(|c| c.layouts()));
        raise_nofile_limit();
        let mut header = trace_header(&opts, &caps, clock, &plans, item_reg.as_ref().map(|(_, name)| name.as_str()), probes.as_ref());
        header.extra.extend(classes.iter().flat_map(|c| c.header_extra()));
        if let Some(cg) = &stack_opts.call_graph {
            header.extra.insert("call_graph".into(), cg.name());
        }
        if stack_opts.off_cpu || switch_later.is_some() {
            header.extra.insert("off_cpu".into(), if off_cpu.is_some() { "switch+sched_switch" } else { "switch" }.into());
        }
        if recording_wakeups {
            // What the causes analysis can expect (docs/FORMAT.md `causes`): wakeups, from
            // CPU-wide events or only the target's; CPU-wide switches (filtered).
            // At the first marker, sched_waking is opened with the target's tasks.
            let cpu_wide_waking = system_wide || (cpu_wide_ok && switch_later.is_none());
            let mut v = String::from(if cpu_wide_waking { "sched_waking" } else { "sched_waking_task" });
            // (At the first marker, the CPU-wide switches are opened with the others.)
            if cpu_wide_ok && causes.cpu_switch.is_some() {
                v.push_str("+cpu_switch");
            }
            header.extra.insert("causes".into(), v);
        }
        let stack_maker = (stack_opts.call_graph.is_some() || stack_opts.off_cpu || switch_later.is_some()).then(|| {
            let mut ev: Vec<_> =
                plans.iter().map(|p| (layout_of(p).sample_layout(), p.attr.sample_regs_user, p.desc.regs_user_mask)).collect();
            // Probe events: no stacks; keep their registers as they are.
            for l in &layouts[plans.len()..] {
                ev.push((l.sample_layout(), l.regs_user_mask, l.regs_user_mask));
            }
            let mut sm = StackMaker::new(stack_opts.call_graph, ev, off_cpu_event);
            sm.item_key_reg = (item_key_mask != 0 && off_cpu.is_some()).then(|| item_key_mask.trailing_zeros());
            if recording_wakeups {
                sm.set_causes(&waking_events, cpu_switch_event, system_wide, wakee_field(), own_from_cpu_wide);
            }
            sm
        });
        let mut decoder = Decoder::new(layouts);
        // Probe, off-CPU and class events' samples become other records: decoded at emit.
        for e in plans.len()..decoder.layouts().len() {
            decoder.keep_raw(e as u16);
        }
        let mut rec = Recorder::unopened(&opts, plans, clock, header, decoder, probes, sampling)?;
        if let Some(p) = &rec.probes {
            rec.notes.extend(p.prepared.notes());
        }
        if let Some(c) = &classes {
            rec.notes.extend(c.notes());
            rec.emitter.probe_base = rec.emitter.probe_base.min(c.base);
        }
        rec.emitter.classes = classes;
        rec.notes.extend(stack_notes);
        rec.emitter.stacks = stack_maker;
        // Off-CPU at the first marker: the sched_switch event waits with the switch event.
        let (off_cpu, sched_later) = if switch_later.is_some() { (None, off_cpu) } else { (off_cpu, None) };
        rec.off_cpu = off_cpu;
        if switch_later.is_some() {
            // Lost/throttle records of the switch event name no header event.
            rec.emitter.probe_base = rec.emitter.probe_base.min(switch_later_event);
        }
        for &e in waking_events.iter().chain([&cpu_switch_event]) {
            // Lost/throttle records of these events name no header event.
            rec.emitter.probe_base = rec.emitter.probe_base.min(e);
        }
        let later = switch_later.is_some();
        rec.off_cpu_later = offcpu_later::OffCpuLater {
            plan: switch_later,
            event: switch_later_event,
            sched: sched_later,
            sched_event: off_cpu_event,
            waking: if later { causes.waking.iter().cloned().zip(waking_events.iter().copied()).collect() } else { Vec::new() },
            cpu_switch: if later && cpu_wide_ok { causes.cpu_switch.clone().map(|p| (p, cpu_switch_event)) } else { None },
            ..Default::default()
        };
        if !later {
            for w in causes.waking.into_iter().zip(waking_events.iter().copied()) {
                if cpu_wide_ok {
                    rec.cpu_wide.push(w);
                } else {
                    rec.waking_in_task.push(w);
                }
            }
            if let (Some(p), true) = (causes.cpu_switch, cpu_wide_ok) {
                rec.cpu_wide.push((p, cpu_switch_event));
            }
        }
        if matches!(opts.target, Target::SystemWide | Target::SystemWideCommand(_)) {
            rec.emitter.follow = Some(items::markers::MarkerFollower::new());
        }
        rec.emitter.jit = crate::jit::JitCollector::new(crate::jit::JitLimits::default(), matches!(clock, ClockChoice::Monotonic));
        rec.emitter.jit.set_unwind(rec.emitter.stacks.as_ref().is_some_and(StackMaker::unwinds_while_draining));
        rec.open_target(&opts.target, &caps, opts.mmap_pages)?;
        rec.open_cpu_wide()?;
        rec.start_off_cpu_later()?;
        rec.watch_target_and_rings()?;
        Ok(rec)
    }

    /// The recorder before any event is open: no fds, no rings, no child yet.
    fn unopened(
        opts: &RecordOptions,
        plans: Vec<AttrPlan>,
        clock: ClockChoice,
        header: TraceHeader,
        decoder: Decoder,
        probes: Option<items::uprobe::ProbeSet>,
        sampling: SamplingConfig,
    ) -> Result<Recorder, RecordError> {
        let notes = plans.iter().flat_map(|p| p.notes.iter().cloned()).collect();
        let probe_base = probes.as_ref().map_or(u16::MAX, |p| p.begin_event);
        let probe_markers = probes.as_ref().map(|p| match p.prepared.goroutine {
            true => MarkerMaker::for_goroutines(p.prepared.class.clone()),
            false => MarkerMaker::new(p.prepared.id_reg_mask != 0, p.prepared.class.clone()),
        });
        Ok(Recorder {
            target: opts.target.clone(),
            specs: opts.events.clone(),
            plans,
            clock,
            header,
            notes,
            fds: Vec::new(),
            spool: None,
            rings: Vec::new(),
            ring_owner_fd: Vec::new(),
            child: None,
            pidfd: None,
            epoll: Epoll::new().map_err(io_err("epoll_create1"))?,
            raw_queue: RoundQueue::new(),
            emitter: Emitter { probe_base, probe_markers, ..Emitter::new(decoder) },
            max_seen: 0,
            ran: false,
            markers: MarkerCollector::new(),
            marker_queue: record_queue::RecordQueue::default(),
            child_env: Vec::new(),
            probes,
            sampling,
            off_cpu: None,
            off_cpu_later: offcpu_later::OffCpuLater::default(),
            waking_in_task: Vec::new(),
            cpu_wide: Vec::new(),
            cpu_wide_fds: Vec::new(),
            sampling_stopped: false,
        })
    }

    /// The trace header (write it before calling [`Recorder::run`]).
    pub fn header(&self) -> TraceHeader {
        self.header.clone()
    }

    /// Advisories about the events (e.g. why large PEBS is not possible).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The launched command's pid (for [`Target::Command`] and [`Target::SystemWideCommand`]).
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid())
    }

    /// Record until the target exits or `stop` is set, writing into `out`. The caller
    /// finishes the writer afterwards.
    pub fn run<W: Write>(
        &mut self,
        out: &mut TraceWriter<W>,
        stop: &AtomicBool,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<RecordSummary, RecordError> {
        self.run_to(out, stop, progress)
    }

    /// [`Recorder::run`] for any [`RecordOutput`].
    pub fn run_to<O: RecordOutput + ?Sized>(
        &mut self,
        out: &mut O,
        stop: &AtomicBool,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<RecordSummary, RecordError> {
        if std::mem::replace(&mut self.ran, true) {
            return Err(RecordError::Options("a Recorder runs only once".into()));
        }
        let t0 = monotonic_ns();
        self.emitter.jit.set_enabled(out.keeps_jit());
        // System-wide: the running processes are described *before* the events are
        // enabled (as perf does). Reading /proc and every mapped file's build-id takes a
        // while, much longer under a high sampling rate (the interrupts slow it down), and
        // nothing drains the rings meanwhile: done after enabling it cost seconds of
        // samples at `-a -c 10000`. Processes that appear meanwhile are described after.
        let system_wide = matches!(self.target, Target::SystemWide | Target::SystemWideCommand(_));
        let described = if system_wide { Some(self.synthesize(out, None)?) } else { None };
        self.start_drain_thread();
        // A launched command's own events enable themselves at its exec; everything
        // else (including `-a -- CMD`) is enabled now, before the command is released.
        if !matches!(self.target, Target::Command(_)) {
            for fd in &self.fds {
                sys::ioctl_enable(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ENABLE"))?;
            }
        }
        for fd in &self.cpu_wide_fds {
            sys::ioctl_enable(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ENABLE (CPU-wide)"))?;
        }
        if let Some(c) = &mut self.child {
            c.release_with_env(&self.child_env)?;
        }
        self.synthesize(out, described.as_deref())?;

        let mut evbuf = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut prev_start = 0u64;
        let mut last_flush = monotonic_ns();
        let mut stop_seen: Option<u64> = None;
        let (mut termed, mut killed) = (false, false);
        loop {
            let ready = self.epoll.wait(&mut evbuf, POLL_TIMEOUT_MS).map_err(io_err("epoll_wait"))?;
            let mut exited = false;
            if !ready.is_empty() {
                self.emitter.summary.wakeups += 1;
            }
            for ev in ready {
                let (token, bits) = (ev.u64, ev.events);
                if token == PIDFD_TOKEN {
                    exited = true;
                } else if token == KICK_TOKEN {
                    if let Some(s) = &self.spool {
                        s.clear_kick();
                    }
                } else if bits & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                    // The owning task is gone; keep draining the ring every round, but
                    // stop polling an fd that would report HUP forever.
                    let fd = self.fds[self.ring_owner_fd[token as usize]].as_raw_fd();
                    let _ = self.epoll.ctl(libc::EPOLL_CTL_DEL, fd, token);
                }
            }
            let drain_start = self.round_clock();
            self.drain_all();
            let limit = prev_start.min(drain_start.saturating_sub(ROUND_MARGIN_NS));
            self.emit_round(Some(limit), out)?;
            self.copy_jit_names(drain_start, false, out);
            prev_start = drain_start;
            self.refill();
            // Closing a large chunk takes a while: drain filling rings between columns.
            out.end_round_with(&mut || self.refill())?;
            if drain_start.saturating_sub(last_flush) >= FLUSH_EVERY_NS {
                // Bound what a SIGKILL or power loss can take: at most this much recent data.
                out.flush()?;
                last_flush = drain_start;
            }
            self.emitter.summary.rounds += 1;
            progress(&Progress {
                elapsed_ns: monotonic_ns().saturating_sub(t0),
                samples: self.emitter.summary.samples,
                lost: self.emitter.summary.lost_records + self.emitter.summary.lost_samples,
                bytes: out.bytes_written(),
                markers: self.emitter.summary.markers,
                lost_markers: self.emitter.summary.lost_markers,
            });
            if exited || self.target_gone() {
                break;
            }
            if stop.load(Ordering::Relaxed) {
                // -p / -a: stop now. A command: keep draining while it winds down. Ctrl-C
                // already reached it through the terminal's process group, so it gets a
                // moment to exit by itself; then SIGTERM (as perf does; this covers a
                // recorder stopped by SIGTERM or not run from a terminal), then SIGKILL.
                let Some(c) = &self.child else { break };
                let now = monotonic_ns();
                let since = now - *stop_seen.get_or_insert(now);
                if since >= CHILD_KILL_AFTER_NS && !killed {
                    c.signal(libc::SIGKILL);
                    killed = true;
                } else if since >= CHILD_TERM_AFTER_NS && !termed {
                    c.signal(libc::SIGTERM);
                    termed = true;
                }
            }
        }
        if let Some(c) = &mut self.child {
            self.emitter.summary.exit_status = Some(c.wait().map_err(io_err("waitpid"))?);
        }
        let probes = self.probes.is_some() || self.emitter.classes.is_some();
        for fd in &self.fds {
            let _ = sys::ioctl_disable(fd.as_fd());
        }
        self.off_cpu_later.disable();
        for fd in &self.cpu_wide_fds {
            let _ = sys::ioctl_disable(fd.as_fd());
        }
        if let Some(s) = &mut self.spool {
            s.stop();
        }
        self.drain_all();
        if let Some(f) = self.emitter.follow.as_mut() {
            // A scan in progress gives up; waited for at most items::markers::follower::SCAN_STOP_WITHIN.
            f.stop();
        }
        self.markers.finish(&mut self.marker_queue.pending);
        self.notes.extend(self.markers.take_warnings());
        self.notes.extend(self.follow_note());
        self.emit_round(None, out)?;
        if self.marker_queue.store_malformed(self.emitter.summary.malformed, self.max_seen) {
            self.emit_round(None, out)?;
        }
        self.copy_jit_names(monotonic_ns(), true, out);
        let jit_skipped = self.emitter.jit.skipped();
        if jit_skipped > 0 {
            let time = self.emitter.last_time;
            self.emitter.record(Record::Lost(Lost { time, cpu: 0, event: None, kind: LossKind::JitNames, count: jit_skipped }), out)?;
        }
        self.emitter.summary.skipped_jit_names = jit_skipped;
        let lines_skipped = self.emitter.jit.lines_skipped();
        if lines_skipped > 0 {
            let time = self.emitter.last_time;
            self.emitter.record(Record::Lost(Lost { time, cpu: 0, event: None, kind: LossKind::JitLines, count: lines_skipped }), out)?;
        }
        self.emitter.summary.skipped_jit_lines = lines_skipped;
        self.emitter.summary.jit_lines = self.emitter.jit.lines();
        self.notes.extend(self.emitter.jit.take_notes());
        self.notes.extend(self.emitter.jit.advice());
        out.end_round()?;
        self.emitter.summary.rounds += 1;
        self.emitter.summary.duration_ns = monotonic_ns().saturating_sub(t0);
        let sum = &mut self.emitter.summary;
        sum.warnings.extend(command_failure_warning(sum.exit_status, stop_seen.is_some(), probes, sum.markers));
        Ok(self.emitter.summary.clone())
    }

    /// Reads what is new in the recorded processes' perf maps and jitdumps (at most
    /// every 100 ms, everything at the `last` call) and hands it to the output.
    fn copy_jit_names<O: RecordOutput + ?Sized>(&mut self, now: u64, last: bool, out: &mut O) {
        self.emitter.jit.poll(now, last);
        for e in self.emitter.jit.take_entries() {
            out.handle_jit(&e);
        }
        let ops = self.emitter.jit.take_unwind();
        if let Some(sm) = self.emitter.stacks.as_mut() {
            sm.jit_unwind(ops);
            let st = sm.unwind_stats();
            let sum = &mut self.emitter.summary;
            sum.jit_unwind_infos = st.jit_unwind_added;
            sum.jit_unwind_skipped = st.jit_unwind_refused + self.emitter.jit.unwind_skipped();
            sum.unwind_fallback_frames = st.fallback_frames;
            sum.jit_cfi_frames = st.jit_cfi_frames;
        }
        self.emitter.summary.jit_names = self.emitter.jit.entries();
    }

    /// Time-0 records: kernel image/modules, and processes already running. Returns the
    /// pids described (sorted). With `done` (the pids an earlier call described, before
    /// the events were enabled), only processes not in it are described.
    fn synthesize<O: RecordOutput + ?Sized>(&mut self, out: &mut O, done: Option<&[u32]>) -> Result<Vec<u32>, RecordError> {
        let mut recs = Vec::new();
        if done.is_none() && self.plans.iter().any(|p| !p.desc.exclude_kernel) {
            procfs::kernel_mmaps(&mut recs);
        }
        let mut pids = Vec::new();
        match &self.target {
            Target::Command(_) => {}
            Target::Pid(pid) => {
                procfs::synthesize_process(*pid, &mut recs);
            }
            Target::SystemWide | Target::SystemWideCommand(_) => {
                pids = procfs::all_pids();
                pids.sort_unstable();
                for &pid in &pids {
                    if done.is_none_or(|d| d.binary_search(&pid).is_err()) {
                        procfs::synthesize_process(pid, &mut recs);
                    }
                }
            }
        }
        for r in recs {
            self.emitter.record(r, out)?;
        }
        out.end_round()?;
        Ok(pids)
    }

    /// Write every queued record (raw and marker) stamped at or before `limit` (all
    /// when `None`), in time order. Written in batches; between batches, rings that are
    /// filling up are drained again (see [`Recorder::refill`]).
    fn emit_round<O: RecordOutput + ?Sized>(&mut self, limit: Option<u64>, out: &mut O) -> Result<(), FormatError> {
        self.marker_queue.sort();
        // Markers are added between rounds only (`drain_all`), never while one is written.
        let markers = !self.marker_queue.pending.is_empty();
        loop {
            let (emitter, marker_queue) = (&mut self.emitter, &mut self.marker_queue);
            let more = self.raw_queue.emit_some(limit, EMIT_BATCH, |p, rec| {
                if markers {
                    marker_queue.emit_upto(p.time, |r| emitter.record(r, out))?;
                }
                emitter.write_queued(p, rec, out)
            });
            match more {
                Ok(true) => self.refill(),
                Ok(false) => break,
                Err(e) => {
                    self.marker_queue.end_round();
                    return Err(e);
                }
            }
        }
        let (emitter, marker_queue) = (&mut self.emitter, &mut self.marker_queue);
        let res = marker_queue.emit_upto(limit.unwrap_or(u64::MAX), |r| emitter.record(r, out));
        marker_queue.end_round();
        res
    }

    /// Mid-round: drain the rings again if any is over a quarter full, so a long round
    /// (a big backlog, encoding, compressing, or the recorder being descheduled) does
    /// not let the kernel drop records. Records drained here are newer than the round's
    /// limit (module docs), so they simply wait for the next round. Skipped when the
    /// queue is already very long, so a recorder that cannot keep up lets the kernel
    /// count the loss instead of growing without bound.
    fn refill(&mut self) {
        self.stop_sampling_if_command_exited();
        if self.raw_queue.len() >= MAX_QUEUED_RECORDS {
            return;
        }
        let filling = match &self.spool {
            Some(s) => s.any_filling(),
            None => self.rings.iter().any(|r| r.pending() >= r.data_size() / 4),
        };
        if filling {
            self.drain_rings();
        }
    }
    /// `-a -- CMD` records until CMD exits. A recorder that falls behind (a high rate on a
    /// busy machine) can spend seconds in one round; without this check it would notice
    /// the exit only at the round's end and keep sampling (and losing) meanwhile. So
    /// between batches the command's pidfd is polled, and once it has exited every event
    /// is disabled; the loop ends at its next wakeup as usual.
    fn stop_sampling_if_command_exited(&mut self) {
        if self.sampling_stopped || !matches!(self.target, Target::SystemWideCommand(_)) {
            return;
        }
        let Some(fd) = self.child.as_ref().and_then(|c| c.pidfd()) else { return };
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 && pfd.revents != 0 {
            for fd in &self.fds {
                let _ = sys::ioctl_disable(fd.as_fd());
            }
            self.sampling_stopped = true;
        }
    }

    /// `T_k` of the round about to drain (see the module docs).
    fn round_clock(&self) -> u64 {
        match self.clock {
            ClockChoice::Monotonic => monotonic_ns(),
            ClockChoice::PerfDefault => self.max_seen,
        }
    }

    /// Drain every ring into the queue, and the marker rings.
    fn drain_all(&mut self) {
        self.drain_rings();
        let drained = self.markers.drain(&mut self.marker_queue.pending);
        self.after_marker_drain(&drained);
        // Malformed ring records are stored as losses, not only counted (issue 10).
        let t = self.round_clock();
        self.marker_queue.store_malformed(self.emitter.summary.malformed, t);
        self.notes.extend(self.markers.take_warnings());
    }

    /// The marker region for a launched command; if it cannot be created, record without
    /// markers and say so (issue 10, finding 6).
    fn prepare_child_markers(&mut self, pid: u32) -> Vec<(String, String)> {
        self.markers.prepare_child(pid).unwrap_or_else(|e| {
            self.notes.push(format!("recording without item markers: {e}"));
            Vec::new()
        })
    }

    /// Hand the rings to a drain thread (see `spool`), unless DWARF stacks are unwound
    /// while draining. If the thread cannot be started, the main thread drains alone.
    fn start_drain_thread(&mut self) {
        let unwinds = self.emitter.stacks.as_ref().is_some_and(StackMaker::unwinds_while_draining);
        if unwinds || self.rings.is_empty() {
            return;
        }
        let owners: Vec<i32> = self.ring_owner_fd.iter().map(|&o| self.fds[o].as_raw_fd()).collect();
        let rings = std::mem::take(&mut self.rings);
        match spool::Spooler::start(rings, &owners) {
            Ok(s) => {
                // A perf fd's readiness is consumed by the first poll that sees it
                // (perf_poll swaps it to 0), so two epoll sets on one fd would steal each
                // other's wakeups: the ring fds are the drain thread's alone now, and it
                // passes each wakeup on through its kick eventfd.
                for (token, &fd) in owners.iter().enumerate() {
                    let _ = self.epoll.ctl(libc::EPOLL_CTL_DEL, fd, token as u64);
                }
                if let Err(e) = self.epoll.ctl(libc::EPOLL_CTL_ADD, s.kick_fd(), KICK_TOKEN) {
                    self.notes.push(format!("drain thread: cannot poll its wakeups ({e}); rounds follow the {POLL_TIMEOUT_MS} ms timeout"));
                }
                self.spool = Some(s);
            }
            Err((rings, e)) => {
                self.rings = rings;
                self.notes.push(format!("draining the rings without a drain thread: {e}"));
            }
        }
    }

    /// The CPU of each ring, in ring order.
    fn ring_cpus(&self) -> Vec<u32> {
        match &self.spool {
            Some(s) => s.cpus(),
            None => self.rings.iter().map(Ring::cpu).collect(),
        }
    }

    /// Drain every perf ring (and what the drain thread spooled) into the queue.
    fn drain_rings(&mut self) {
        let (raw_queue, emitter, max_seen) = (&mut self.raw_queue, &mut self.emitter, &mut self.max_seen);
        let unwinding = emitter.stacks.as_ref().is_some_and(StackMaker::unwinds_while_draining);
        let mut queue = |cpu: u32, rec: &[u8]| emitter.queue(raw_queue, max_seen, unwinding, cpu, rec);
        let (mut corrupt, mut spooled) = (0u64, 0u64);
        if let Some(s) = &mut self.spool {
            let taken = s.take(&mut queue);
            (corrupt, spooled) = (taken.corrupt, taken.spooled);
        }
        for ring in &mut self.rings {
            let cpu = ring.cpu();
            corrupt += ring.drain(|rec| queue(cpu, rec)).corrupt as u64;
        }
        emitter.summary.malformed += corrupt;
        emitter.summary.spooled += spooled;
    }

    /// Whether the target ended in a way the pidfd could not tell us.
    fn target_gone(&mut self) -> bool {
        match (&self.target, &mut self.child) {
            (Target::Command(_) | Target::SystemWideCommand(_), Some(c)) if c.pidfd().is_none() => {
                matches!(c.try_wait(), Ok(Some(_)) | Err(_))
            }
            (Target::Pid(pid), _) if self.pidfd.is_none() => !procfs::process_alive(*pid),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_without_markers_under_probes_is_a_warning() {
        let w = command_failure_warning(Some(1), false, true, 0);
        assert_eq!(w, Some(RunWarning::CommandFailedWithoutMarkers { exit_status: 1 }));
        assert!(w.unwrap().to_string().contains("status 1"));
        // Success, markers seen, no probes, stopped by the user, or no command: nothing.
        assert_eq!(command_failure_warning(Some(0), false, true, 0), None);
        assert_eq!(command_failure_warning(Some(1), false, true, 4), None);
        assert_eq!(command_failure_warning(Some(1), false, false, 0), None);
        assert_eq!(command_failure_warning(Some(143), true, true, 0), None);
        assert_eq!(command_failure_warning(None, false, true, 0), None);
    }
}
