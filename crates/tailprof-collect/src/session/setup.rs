//! Setting a recorder up (see the module docs of `session`): check the options, probe the
//! machine, build the attrs, then open the target's events and map the rings.

use super::*;

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

    /// The marker region for a launched command; if it cannot be created, record without
    /// markers and say so (issue 10, finding 6).
    pub(super) fn prepare_child_markers(&mut self, pid: u32) -> Vec<(String, String)> {
        self.markers.prepare_child(pid).unwrap_or_else(|e| {
            self.notes.push(format!("recording without item markers: {e}"));
            Vec::new()
        })
    }
}
