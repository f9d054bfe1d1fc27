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

use crate::attr::{
    apply_call_graph, apply_context_switch, build_attr, off_cpu_attr, waking_attr_full, waking_attrs, AttrPlan, ClockChoice, SamplingConfig,
};
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
mod rounds;
mod setup;
mod spool;
mod stop;
mod summary;
mod synthesize;
use crate::items;
use crate::items::markers::MarkerCollector;
pub use crate::items::ItemOptions;
use emit::Emitter;
pub use output::{finish as finish_trace_file, FileTraceWriter, RecordOutput, TraceFile, VecOutput};
use plan::*;
use summary::command_failure_warning;
pub use summary::{Progress, RecordSummary, RunWarning};

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

impl Recorder {
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
}
