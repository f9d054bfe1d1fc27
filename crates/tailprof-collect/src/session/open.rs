//! Opening the target: launch or find the process, open every event on every CPU,
//! map the rings, attach the marker transport.

use super::*;

/// Most off-CPU event fds opened at the first marker (threads × CPUs × 3); a process with
/// more threads gets no off-CPU recording (noted; `--off-cpu` opens them at the start).
pub const MAX_LATER_FDS: usize = 65536;

impl Recorder {
    /// Launch the command (stopped before exec) or find the process, open every event for
    /// it on every CPU, map the rings, and set up the marker transport.
    pub(super) fn open_target(&mut self, target: &Target, caps: &Capabilities, pages: usize) -> Result<(), RecordError> {
        let cpus = caps.online_cpus.clone();
        let mut ring_of_cpu: Vec<Option<usize>> = vec![None; cpus.len()];
        match target {
            Target::Command(argv) => {
                let child = target::spawn_stopped(argv)?;
                let pid = child.pid() as i32;
                self.child = Some(child);
                self.open_task(pid, &cpus, &mut ring_of_cpu, pages, caps)?;
                self.child_env = self.prepare_child_markers(pid as u32);
            }
            Target::SystemWide => {
                self.open_task(-1, &cpus, &mut ring_of_cpu, pages, caps)?;
                self.attach_marker_processes();
            }
            Target::SystemWideCommand(argv) => {
                let child = target::spawn_stopped(argv)?;
                let pid = child.pid();
                self.child = Some(child);
                self.open_task(-1, &cpus, &mut ring_of_cpu, pages, caps)?;
                self.attach_marker_processes();
                self.child_env = self.prepare_child_markers(pid);
            }
            Target::Pid(pid) => {
                if procfs::is_kernel_thread(*pid) {
                    return Err(RecordError::Options(format!(
                        "process {pid} is a kernel thread (no user space to profile); use -a to sample the kernel"
                    )));
                }
                self.open_process(*pid, &cpus, &mut ring_of_cpu, pages, caps)?;
                match self.markers.attach(*pid) {
                    Ok(true) => {}
                    Ok(false) => self.notes.push(format!(
                        "process {pid} has no marker library (no '{}' symbol): items come only \
                         from --item-begin/--item-end or --item-reg",
                        items::markers::CONTROL_SYMBOL
                    )),
                    Err(e) => self.notes.push(format!("cannot attach the marker transport to process {pid}: {e}")),
                }
                self.pidfd = target::pidfd_open(*pid).ok();
            }
        }
        Ok(())
    }

    /// Register the target's pidfd (its exit ends the recording) and every ring's fd
    /// with epoll.
    pub(super) fn watch_target_and_rings(&mut self) -> Result<(), RecordError> {
        let pidfd = self.pidfd.as_ref().map(|f| f.as_raw_fd()).or(self.child.as_ref().and_then(|c| c.pidfd()).map(|f| f.as_raw_fd()));
        if let Some(fd) = pidfd {
            self.epoll.ctl(libc::EPOLL_CTL_ADD, fd, PIDFD_TOKEN).map_err(io_err("epoll_ctl(pidfd)"))?;
        }
        for (ring, &owner) in self.ring_owner_fd.iter().enumerate() {
            let fd = self.fds[owner].as_raw_fd();
            self.epoll.ctl(libc::EPOLL_CTL_ADD, fd, ring as u64).map_err(io_err("epoll_ctl"))?;
        }
        Ok(())
    }

    /// Open every event for `pid` (a task, or -1) on every CPU.
    fn open_task(
        &mut self,
        pid: i32,
        cpus: &[u32],
        ring_of_cpu: &mut [Option<usize>],
        pages: usize,
        caps: &Capabilities,
    ) -> Result<(), RecordError> {
        for (cpu_index, &cpu) in cpus.iter().enumerate() {
            for event in 0..self.plans.len() {
                let fd = sys::perf_event_open(&self.plans[event].attr, pid, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
                    .map_err(|err| sys::explain_open_error(&err, &self.specs[event], caps))?;
                match ring_of_cpu[cpu_index] {
                    None => {
                        let ring = Ring::map(fd.as_fd(), pages, cpu).map_err(|source| RecordError::Io {
                            what: format!(
                                "cannot map a {pages}-page perf ring buffer for CPU {cpu} (the per-user limit is \
                                 /proc/sys/kernel/perf_event_mlock_kb; try fewer --mmap-pages)"
                            ),
                            source,
                        })?;
                        ring_of_cpu[cpu_index] = Some(self.rings.len());
                        self.rings.push(ring);
                        self.ring_owner_fd.push(self.fds.len());
                    }
                    Some(ring) => sys::ioctl_set_output(fd.as_fd(), self.fds[self.ring_owner_fd[ring]].as_fd())
                        .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT on CPU {cpu}")))?,
                }
                let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                self.emitter.decoder.add_id(id, event as u16);
                self.fds.push(fd);
            }
            if let (Some(probes), Some(ring)) = (&self.probes, ring_of_cpu[cpu_index]) {
                for (role_index, role) in [ProbeRole::Begin, ProbeRole::End].into_iter().enumerate() {
                    // Every site of a USDT probe; all of a role's sites share its decoder event.
                    for site in 0..probes.sites(role) {
                        let config = probes.attr_config(role, site, self.clock, self.sampling.inherit, self.sampling.enable_on_exec);
                        let fd = probes.open(role, site, pid, cpu as i32, config)?;
                        sys::ioctl_set_output(fd.as_fd(), self.fds[self.ring_owner_fd[ring]].as_fd())
                            .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT (uprobe) on CPU {cpu}")))?;
                        let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                        self.emitter.decoder.add_id(id, probes.begin_event + role_index as u16);
                        self.fds.push(fd);
                    }
                }
            }
            if let (Some(c), Some(ring)) = (&self.emitter.classes, ring_of_cpu[cpu_index]) {
                for i in 0..c.len() {
                    let attr = c.attr(i, self.clock, self.sampling.inherit, self.sampling.enable_on_exec);
                    let fd = c.open(i, pid, cpu as i32, &attr)?;
                    sys::ioctl_set_output(fd.as_fd(), self.fds[self.ring_owner_fd[ring]].as_fd())
                        .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT (--item-class-from) on CPU {cpu}")))?;
                    let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                    self.emitter.decoder.add_id(id, c.base + i as u16);
                    self.fds.push(fd);
                }
            }
            if let (Some(plan), Some(ring), Some(sm)) = (&self.off_cpu, ring_of_cpu[cpu_index], &self.emitter.stacks) {
                let fd = sys::perf_event_open(&plan.attr, pid, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
                    .map_err(io_err(format!("cannot open sched:sched_switch (off-CPU stacks) on CPU {cpu}")))?;
                sys::ioctl_set_output(fd.as_fd(), self.fds[self.ring_owner_fd[ring]].as_fd())
                    .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT (sched_switch) on CPU {cpu}")))?;
                let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                self.emitter.decoder.add_id(id, sm.off_cpu_event);
                self.fds.push(fd);
            }
            for (plan, event) in &self.waking_in_task {
                let Some(ring) = ring_of_cpu[cpu_index] else { break };
                let fd = sys::perf_event_open(&plan.attr, pid, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
                    .map_err(io_err(format!("cannot open sched:sched_waking (wakeups) on CPU {cpu}")))?;
                set_filter(&fd, plan, cpu)?;
                sys::ioctl_set_output(fd.as_fd(), self.fds[self.ring_owner_fd[ring]].as_fd())
                    .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT (sched_waking) on CPU {cpu}")))?;
                let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                self.emitter.decoder.add_id(id, *event);
                self.fds.push(fd);
            }
        }
        Ok(())
    }

    /// Open the CPU-wide events of causes (`sched:sched_waking`, the CPU-wide context
    /// switches) on every CPU that has a ring, each into that ring; enabled when the run
    /// starts.
    pub(super) fn open_cpu_wide(&mut self) -> Result<(), RecordError> {
        let rings: Vec<(u32, usize)> = self.ring_cpus().into_iter().zip(self.ring_owner_fd.iter().copied()).collect();
        for (plan, event) in &self.cpu_wide {
            let attr = cpu_wide(&plan.attr);
            for &(cpu, owner) in &rings {
                let fd = sys::perf_event_open(&attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
                    .map_err(io_err(format!("cannot open {} CPU-wide on CPU {cpu}", plan.desc.name)))?;
                set_filter(&fd, plan, cpu)?;
                sys::ioctl_set_output(fd.as_fd(), self.fds[owner].as_fd())
                    .map_err(io_err(format!("PERF_EVENT_IOC_SET_OUTPUT ({}) on CPU {cpu}", plan.desc.name)))?;
                let id = sys::ioctl_id(fd.as_fd()).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                self.emitter.decoder.add_id(id, *event);
                self.cpu_wide_fds.push(fd);
            }
        }
        Ok(())
    }

    /// Open the off-CPU events that waited for a marker ([`offcpu_later::OffCpuLater`]): per CPU
    /// for `-a`, else for every thread of `pid` on every CPU (with `inherit`: threads they
    /// create later get copies), each into its CPU's ring, registered with the decoder
    /// before it is enabled. A thread that exits meanwhile is skipped. The threads are
    /// listed once: re-listing would open a second event for a thread that an already
    /// opened one created meanwhile (it inherited a copy), doubling its switches; a thread
    /// created during the open by a thread not yet opened is missed instead. Returns the
    /// fds opened, or why it stopped (more than [`MAX_LATER_FDS`] fds, an open error).
    fn open_off_cpu_later(&mut self, pid: Option<u32>) -> Result<usize, RecordError> {
        let plans: Vec<(crate::attr::AttrPlan, u16)> = [
            self.off_cpu_later.plan.clone().map(|p| (p, self.off_cpu_later.event)),
            self.off_cpu_later.sched.clone().map(|p| (p, self.off_cpu_later.sched_event)),
        ]
        .into_iter()
        .flatten()
        .chain(self.off_cpu_later.waking.iter().cloned())
        .collect();
        let rings: Vec<(u32, usize)> = self.ring_cpus().into_iter().zip(self.ring_owner_fd.iter().copied()).collect();
        let tasks: Vec<i32> = match pid {
            None => vec![-1],
            Some(p) => procfs::thread_ids(p).unwrap_or_default().into_iter().map(|t| t as i32).collect(),
        };
        if tasks.len().saturating_mul(rings.len() * plans.len()) > MAX_LATER_FDS {
            return Err(RecordError::Limit(format!(
                "more than {MAX_LATER_FDS} events for {} threads on {} CPUs",
                tasks.len(),
                rings.len()
            )));
        }
        {
            for task in tasks {
                for &(cpu, owner) in &rings {
                    for (plan, event) in &plans {
                        let fd = match sys::perf_event_open(&plan.attr, task, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC) {
                            Ok(fd) => fd,
                            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break, // the thread exited
                            Err(e) => return Err(io_err(format!("perf_event_open on CPU {cpu}"))(e)),
                        };
                        let r = plan
                            .filter
                            .as_deref()
                            .map_or(Ok(()), |f| sys::ioctl_set_filter(fd.as_fd(), f))
                            .and_then(|_| sys::ioctl_set_output(fd.as_fd(), self.fds[owner].as_fd()))
                            .and_then(|_| sys::ioctl_id(fd.as_fd()))
                            .map(|id| self.emitter.decoder.add_id(id, *event))
                            .and_then(|_| sys::ioctl_enable(fd.as_fd()));
                        if let Err(e) = r {
                            return Err(io_err(format!("setting up the event on CPU {cpu}"))(e));
                        }
                        self.off_cpu_later.fds.push(fd);
                    }
                }
            }
        }
        // Causes: the CPU-wide context switches, once per CPU (any task).
        if let Some((plan, event)) = self.off_cpu_later.cpu_switch.clone() {
            let attr = cpu_wide(&plan.attr);
            for &(cpu, owner) in &rings {
                let fd = sys::perf_event_open(&attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
                    .map_err(|source| RecordError::Io { what: format!("CPU-wide context switches on CPU {cpu}"), source })?;
                sys::ioctl_set_output(fd.as_fd(), self.fds[owner].as_fd())
                    .and_then(|_| sys::ioctl_id(fd.as_fd()))
                    .map(|id| self.emitter.decoder.add_id(id, event))
                    .and_then(|_| sys::ioctl_enable(fd.as_fd()))
                    .map_err(|source| RecordError::Io { what: format!("setting up CPU-wide context switches on CPU {cpu}"), source })?;
                self.off_cpu_later.fds.push(fd);
            }
        }
        Ok(self.off_cpu_later.fds.len())
    }

    /// Open the waiting off-CPU events now (the first marker, or a marked process
    /// attached at the start); say so, or why not.
    fn start_off_cpu_now(&mut self, why: &str) {
        let now = monotonic_ns();
        self.off_cpu_later.enabled_at = Some(now);
        let pid = match &self.target {
            Target::SystemWide | Target::SystemWideCommand(_) => None,
            Target::Command(_) => self.child.as_ref().map(|c| c.pid()),
            Target::Pid(p) => Some(*p),
        };
        let at = now.saturating_sub(self.started_ns());
        match self.open_off_cpu_later(pid) {
            Ok(_) => self.notes.push(format!(
                "off-CPU recording enabled {:.1} ms after the start, {why} (CLOCK_MONOTONIC {now} ns); items that \
                 began before have only part of their off-CPU time (use --off-cpu to record it from the start)",
                at as f64 / 1e6
            )),
            Err(e) => {
                self.off_cpu_later.disable();
                self.off_cpu_later.fds.clear();
                self.notes
                    .push(format!("off-CPU recording not enabled at the first marker ({e}); use --off-cpu to record it from the start"));
            }
        }
    }

    /// Off-CPU events waiting for a marker: enable them now when `-p`/`-a` attached a
    /// process with the marker library while setting up (then every item is covered), and
    /// say in the header from when the trace has them.
    pub(super) fn start_off_cpu_later(&mut self) -> Result<(), RecordError> {
        if !self.off_cpu_later.pending() {
            return Ok(());
        }
        let from = if self.markers.attached() > 0 {
            if let Err(e) = self.open_off_cpu_later(match &self.target {
                Target::Pid(p) => Some(*p),
                _ => None,
            }) {
                return Err(RecordError::Options(format!("cannot open the off-CPU events: {e}; use --no-off-cpu")));
            }
            self.off_cpu_later.enabled_at = Some(monotonic_ns());
            "start"
        } else {
            "first_marker"
        };
        self.header.extra.insert("off_cpu_from".into(), from.into());
        Ok(())
    }

    /// Between rounds: enable the off-CPU events at the first marker, attach the marked
    /// processes that started since (`-a`, the agent), and forget attached processes that
    /// exited (about once a second). `drained` is what the marker drain just moved.
    pub(super) fn after_marker_drain(&mut self, drained: &crate::items::markers::DrainStats) {
        // The first item boundary: a marker of the library, or a uprobe hit (the agent's
        // --causes with --item-begin/--item-end: without it no switch was ever recorded).
        if self.off_cpu_later.pending() && (drained.markers > 0 || self.emitter.probe_hits > 0) {
            self.start_off_cpu_now("at the first item marker");
        }
        let Some(f) = self.emitter.follow.as_mut() else { return };
        f.poll();
        let queue = std::mem::take(&mut f.queue);
        let me = std::process::id();
        let child = self.child.as_ref().map(|c| c.pid());
        for (pid, found) in queue {
            if pid == me || Some(pid) == child || self.markers.has(pid) {
                continue;
            }
            if MarkerCollector::launched_by_other_recorder(pid) {
                f.others += 1;
                continue;
            }
            if self.markers.attached() >= items::markers::follower::MAX_FOLLOWED_PROCESSES {
                f.over_limit += 1;
                continue;
            }
            match self.markers.attach_found(pid, found) {
                Ok(true) => f.attached += 1,
                Ok(false) => {}
                Err(e) => {
                    f.failed += 1;
                    f.first_error.get_or_insert(e.to_string());
                }
            }
        }
        let now = monotonic_ns();
        if now.saturating_sub(f.last_reap_ns) >= 1_000_000_000 {
            f.last_reap_ns = now;
            self.markers.reap_exited(&mut self.marker_queue.pending);
        }
    }

    /// CLOCK_MONOTONIC when the recorder was set up (the header's `start_monotonic_ns`).
    fn started_ns(&self) -> u64 {
        self.header.extra.get("start_monotonic_ns").and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// The follow note for the end of a recording (`None` when nothing was followed).
    pub(super) fn follow_note(&self) -> Option<String> {
        let f = self.emitter.follow.as_ref()?;
        if f.attached + f.failed + f.over_limit + f.others + f.scan_dropped + f.python_watched == 0 {
            return None;
        }
        Some(format!(
            "markers: attached to {} process(es) that started while recording or imported the Python module later (their \
             markers from before the attach are not recorded){}{}{}{}{}",
            f.attached,
            if f.others > 0 { format!("; {} left to the recorder that launched them", f.others) } else { String::new() },
            match &f.first_error {
                Some(e) if f.failed > 0 => format!("; {} could not be attached, e.g. {e}", f.failed),
                _ => String::new(),
            },
            if f.over_limit > 0 {
                format!("; {} not attached (more than {} at once)", f.over_limit, items::markers::follower::MAX_FOLLOWED_PROCESSES)
            } else {
                String::new()
            },
            if f.python_watched > 0 {
                format!(
                    "; {} Python process(es) watched for a control memfd ({} look(s){})",
                    f.python_watched,
                    f.python_looks,
                    if f.python_not_watched > 0 {
                        format!(
                            ", {} not watched: more than {} at once",
                            f.python_not_watched,
                            items::markers::follower::MAX_PYTHON_WATCHED
                        )
                    } else {
                        String::new()
                    }
                )
            } else {
                String::new()
            },
            if f.scan_dropped > 0 {
                format!(
                    "; {} mapped file(s) or process(es) not looked at (more than {} waiting, or stopped first; a file is \
                     looked at again when it is mapped again)",
                    f.scan_dropped,
                    items::markers::follower::MAX_SCAN_PENDING
                )
            } else {
                String::new()
            }
        ))
    }

    /// `-a`: attach the marker transport to every running process whose mappings define
    /// the marker library's control symbol or hold a control memfd
    /// ([`MarkerCollector::attach_in`] looks; best effort: processes that cannot be read
    /// are skipped). The others go to the marker follower
    /// ([`items::markers::MarkerFollower::saw_running`]): a Python process that imports the
    /// module later is attached then; processes started later are the follower's too.
    fn attach_marker_processes(&mut self) {
        let (mut ok, mut failed, mut first_err) = (0usize, 0usize, None);
        let me = std::process::id();
        let child = self.child.as_ref().map(|c| c.pid());
        let mut others = 0usize;
        for pid in procfs::all_pids().into_iter().filter(|&p| p != me && Some(p) != child) {
            if MarkerCollector::launched_by_other_recorder(pid) {
                others += 1;
                continue;
            }
            // One read of the maps: for the attach, then (no control block yet) for the
            // follower, which watches the process when it maps a Python runtime.
            let maps = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => continue, // exited
                Err(e) => {
                    failed += 1;
                    first_err.get_or_insert(format!("cannot read /proc/{pid}/maps: {e}"));
                    continue;
                }
            };
            let entries: Vec<procfs::MapsEntry> = maps.lines().filter_map(procfs::parse_maps_line).collect();
            match self.markers.attach_in(pid, &entries) {
                Ok(true) => ok += 1,
                Ok(false) => {
                    if let Some(f) = self.emitter.follow.as_mut() {
                        // The attach looked at every file for the control symbol unless
                        // the process maps more than it looks at.
                        let mut files: Vec<(u64, u64)> = entries
                            .iter()
                            .filter(|e| e.inode != 0 && e.path.starts_with('/') && !e.path.starts_with("/dev/"))
                            .map(|e| (e.dev, e.inode))
                            .collect();
                        files.sort_unstable();
                        files.dedup();
                        f.saw_running(pid, &entries, files.len() <= items::markers::MAX_FILES_SEARCHED);
                    }
                }
                Err(e) => {
                    failed += 1;
                    first_err.get_or_insert(e.to_string());
                }
            }
        }
        self.notes.push(format!(
            "markers: attached to {ok} running process(es) with the marker library{}{}; processes that start later are \
             attached when they map it, Python processes when they import the module",
            match first_err {
                Some(e) if failed > 0 => format!(" ({failed} could not be attached, e.g. {e})"),
                _ => String::new(),
            },
            if others > 0 { format!(" ({others} left to the recorder that launched them)") } else { String::new() }
        ));
    }

    /// Open every thread of `pid`, re-listing threads until no new one shows up (a
    /// thread created after its creator's fds are open is covered by `inherit`).
    fn open_process(
        &mut self,
        pid: u32,
        cpus: &[u32],
        ring_of_cpu: &mut [Option<usize>],
        pages: usize,
        caps: &Capabilities,
    ) -> Result<(), RecordError> {
        let mut done: Vec<u32> = Vec::new();
        for _ in 0..8 {
            let tids = procfs::thread_ids(pid).map_err(|_| RecordError::NoSuchProcess(pid))?;
            let new: Vec<u32> = tids.into_iter().filter(|t| !done.contains(t)).collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                match self.open_task(tid as i32, cpus, ring_of_cpu, pages, caps) {
                    Ok(()) => {}
                    // The thread exited meanwhile: not an error (its fds so far stay).
                    Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
                    Err(e) => return Err(e),
                }
                done.push(tid);
            }
        }
        if self.fds.is_empty() {
            return Err(RecordError::NoSuchProcess(pid));
        }
        Ok(())
    }
}

/// Set `plan`'s tracepoint filter (if any) on `fd`, opened on `cpu`.
fn set_filter(fd: &OwnedFd, plan: &crate::attr::AttrPlan, cpu: u32) -> Result<(), RecordError> {
    match &plan.filter {
        Some(f) => sys::ioctl_set_filter(fd.as_fd(), f)
            .map_err(io_err(format!("PERF_EVENT_IOC_SET_FILTER ({}: {f}) on CPU {cpu}", plan.desc.name))),
        None => Ok(()),
    }
}
