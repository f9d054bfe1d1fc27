//! The rounds (see the module docs of `session`): drain the rings (or take what the drain
//! thread spooled) into the queue, then write what is old enough, in time order.

use super::*;

/// Records written between two checks for rings filling up during a round.
const EMIT_BATCH: usize = 4096;

/// Above this many queued records, mid-round drains stop (see [`Recorder::refill`]).
const MAX_QUEUED_RECORDS: usize = 256 * 1024;

impl Recorder {
    /// Write every queued record (raw and marker) stamped at or before `limit` (all
    /// when `None`), in time order. Written in batches; between batches, rings that are
    /// filling up are drained again (see [`Recorder::refill`]).
    pub(super) fn emit_round<O: RecordOutput + ?Sized>(&mut self, limit: Option<u64>, out: &mut O) -> Result<(), FormatError> {
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
    pub(super) fn refill(&mut self) {
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

    /// `T_k` of the round about to drain (see the module docs).
    pub(super) fn round_clock(&self) -> u64 {
        match self.clock {
            ClockChoice::Monotonic => monotonic_ns(),
            ClockChoice::PerfDefault => self.max_seen,
        }
    }

    /// Drain every ring into the queue, and the marker rings.
    pub(super) fn drain_all(&mut self) {
        self.drain_rings();
        let drained = self.markers.drain(&mut self.marker_queue.pending);
        self.after_marker_drain(&drained);
        // Malformed ring records are stored as losses, not only counted (issue 10).
        let t = self.round_clock();
        self.marker_queue.store_malformed(self.emitter.summary.malformed, t);
        self.notes.extend(self.markers.take_warnings());
    }

    /// Hand the rings to a drain thread (see `spool`), unless DWARF stacks are unwound
    /// while draining. If the thread cannot be started, the main thread drains alone.
    pub(super) fn start_drain_thread(&mut self) {
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
    pub(super) fn ring_cpus(&self) -> Vec<u32> {
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
}
