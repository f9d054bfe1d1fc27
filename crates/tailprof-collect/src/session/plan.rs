//! Planning a recording before anything is opened: option checks, sampling
//! configuration, attribute plans, decoder layouts and the trace header.

use super::*;

/// Stage 1 of [`Recorder::with_items`]: reject options that cannot work.
pub(super) fn check_options(opts: &RecordOptions) -> Result<(), RecordError> {
    if opts.events.is_empty() {
        return Err(RecordError::Options("no events to record".into()));
    }
    if opts.events.len() > u16::MAX as usize - 1 {
        return Err(RecordError::Options("too many events".into()));
    }
    if opts.mmap_pages == 0 || !opts.mmap_pages.is_power_of_two() {
        return Err(RecordError::Options(format!("ring size must be a power of two number of pages (got {})", opts.mmap_pages)));
    }
    if let Target::Command(argv) | Target::SystemWideCommand(argv) = &opts.target {
        if argv.is_empty() {
            return Err(RecordError::Options("empty command".into()));
        }
    }
    Ok(())
}

/// The caller's sampling options plus what the recorder decides: the clock, everything
/// opened disabled, inheritance and enable-on-exec per target, and the item register
/// (`item_reg_mask`, 0 for none) added to the user registers.
pub(super) fn sampling_config(opts: &RecordOptions, clock: ClockChoice, item_reg_mask: u64) -> SamplingConfig {
    let mut cfg = opts.sampling.clone();
    cfg.clock = clock;
    cfg.disabled = true;
    cfg.regs_user |= item_reg_mask;
    (cfg.inherit, cfg.enable_on_exec) = match &opts.target {
        Target::Command(_) => (true, true),
        Target::Pid(_) => (true, false),
        Target::SystemWide | Target::SystemWideCommand(_) => (false, false),
    };
    cfg
}

/// One attr per event; event 0 also asks for the side-band records.
pub(super) fn build_plans(events: &[EventSpec], sampling: &SamplingConfig) -> Result<Vec<AttrPlan>, RecordError> {
    let mut plans = Vec::with_capacity(events.len());
    for (i, spec) in events.iter().enumerate() {
        let c = SamplingConfig { sideband: i == 0, ..sampling.clone() };
        plans.push(build_attr(spec, &c)?);
    }
    Ok(plans)
}

/// Present when the core PMU can record branch stacks.
const LBR_CAPS: &str = "/sys/bus/event_source/devices/cpu/caps/branches";

/// Stack options → attrs: the call graph on every sampling event, `context_switch` on
/// the side-band event, and the off-CPU stack event (returned). Mounting tracefs is noted.
pub(super) fn stack_plans(
    o: &StackOptions,
    plans: &mut [AttrPlan],
    sampling: &SamplingConfig,
    notes: &mut Vec<String>,
) -> Result<Option<AttrPlan>, RecordError> {
    if o.call_graph == Some(CallGraph::Lbr) && !std::path::Path::new(LBR_CAPS).exists() {
        return Err(RecordError::Options(format!(
            "--call-graph lbr needs a PMU with last-branch records (LBR call-stack mode, Intel Haswell or newer); \
             this machine has none ({LBR_CAPS} is missing, as on any VM without a hardware PMU): use --call-graph dwarf or fp"
        )));
    }
    if let Some(cg) = &o.call_graph {
        for p in plans.iter_mut() {
            apply_call_graph(p, cg);
        }
    }
    if !o.off_cpu {
        return Ok(None);
    }
    if let Some(p) = plans.first_mut() {
        apply_context_switch(p);
    }
    match crate::tracefs::ensure_mounted() {
        Ok((root, mounted)) => {
            if mounted {
                notes.push(format!("tracefs was not mounted: mounted it at {} (for sched:sched_switch)", root.display()));
            }
            let spec = EventSpec::parse("sched:sched_switch")?;
            Ok(Some(off_cpu_attr(&spec, sampling, o.call_graph.as_ref())?))
        }
        Err(e) => {
            notes.push(format!("off-CPU stacks unavailable ({e}); context switches are recorded without stacks"));
            Ok(None)
        }
    }
}

/// `sampling` for an event that only carries side-band records (context switches, the
/// off-CPU tracepoints): opened disabled and enabled by ioctl only (never at exec), no
/// side-band of its own, no registers, no sampling period.
fn quiet_config(sampling: &SamplingConfig) -> SamplingConfig {
    SamplingConfig {
        sideband: false,
        enable_on_exec: false,
        disabled: true,
        regs_user: 0,
        period: None,
        freq: None,
        wakeup_events: 0,
        ..sampling.clone()
    }
}

/// The off-CPU plans of a recording: with `--off-cpu` ([`StackOptions::off_cpu`]),
/// [`stack_plans`] (context switches on the side-band event, on from the start). With
/// `later` (items may come from the marker library, issue 7 item 2) and no `--off-cpu`:
/// the same records from events of their own, opened only when the first marker shows up
/// ([`offcpu_later::OffCpuLater`]): a dummy software event with `context_switch` (returned
/// second) and the `sched:sched_switch` stack event (first).
pub(super) fn off_cpu_plans(
    o: &StackOptions,
    later: bool,
    plans: &mut [AttrPlan],
    sampling: &SamplingConfig,
    notes: &mut Vec<String>,
) -> Result<(Option<AttrPlan>, Option<AttrPlan>), RecordError> {
    if o.off_cpu || !later {
        return Ok((stack_plans(o, plans, sampling, notes)?, None));
    }
    stack_plans(&StackOptions { off_cpu: false, ..o.clone() }, plans, sampling, notes)?;
    let c = quiet_config(sampling);
    let mut switch = build_attr(&EventSpec::parse("dummy")?, &c)?;
    apply_context_switch(&mut switch);
    let sched = match crate::tracefs::ensure_mounted() {
        Ok((root, mounted)) => {
            if mounted {
                notes.push(format!("tracefs was not mounted: mounted it at {} (for sched:sched_switch)", root.display()));
            }
            Some(off_cpu_attr(&EventSpec::parse("sched:sched_switch")?, &c, o.call_graph.as_ref())?)
        }
        Err(e) => {
            notes.push(format!("off-CPU stacks unavailable ({e}); context switches will be recorded without stacks"));
            None
        }
    };
    Ok((sched, Some(switch)))
}

/// The events of causes (issue 21): `sched:sched_waking` with the waker's stack and the
/// wakee in `PERF_SAMPLE_RAW`, and, for targets that are not system-wide, a CPU-wide dummy
/// event with `context_switch` (`PERF_RECORD_SWITCH_CPU_WIDE`: who ran on each CPU while a
/// target thread was runnable). Planned whenever context switches are recorded and tracefs
/// is there; both are `None` otherwise (noted once).
#[derive(Debug, Default)]
pub(super) struct CausePlans {
    /// The sched_waking events (thread and interrupt context, `attr::waking_attrs`: each
    /// with its tracepoint filter; or the one unfiltered `attr::waking_attr_full` with
    /// `--full-waker-stacks`), built like the off-CPU stack event (the recording's
    /// inherit and enable-on-exec; opened CPU-wide with neither when permitted). Empty:
    /// wakeups are not recorded.
    pub waking: Vec<AttrPlan>,
    /// The CPU-wide context-switch event (not for `-a`, whose side-band event is CPU-wide
    /// already; opened at the first marker when off-CPU waits for it).
    pub cpu_switch: Option<AttrPlan>,
}

pub(super) fn cause_plans(
    o: &StackOptions,
    later: bool,
    system_wide: bool,
    sampling: &SamplingConfig,
    notes: &mut Vec<String>,
) -> Result<CausePlans, RecordError> {
    if !(o.off_cpu || later) || o.no_wakeups {
        if o.full_waker_stacks {
            notes.push(
                "--full-waker-stacks: no wakeups recorded (they are recorded with context switches: --off-cpu, items or \
                 markers, and not with --no-wakeups)"
                    .into(),
            );
        }
        return Ok(CausePlans::default());
    }
    if crate::tracefs::find().is_none() {
        notes.push("wakeups not recorded (no tracefs for sched:sched_waking): items show no woken_by".into());
        return Ok(CausePlans::default());
    }
    let c = if o.off_cpu { sampling.clone() } else { SamplingConfig { enable_on_exec: false, disabled: true, ..sampling.clone() } };
    let spec = EventSpec::parse("sched:sched_waking")?;
    let waking = if o.full_waker_stacks {
        vec![waking_attr_full(&spec, &c, o.call_graph.as_ref())?]
    } else {
        let w = waking_attrs(&spec, &c, o.call_graph.as_ref())?;
        vec![w.task, w.irq]
    };
    // At the first marker too (opened then with the other off-CPU events), so runnable
    // items still name who ran instead.
    let cpu_switch = if !system_wide {
        let c = SamplingConfig { inherit: false, ..quiet_config(sampling) };
        let mut p = build_attr(&EventSpec::parse("dummy")?, &c)?;
        apply_context_switch(&mut p);
        Some(p)
    } else {
        None
    };
    Ok(CausePlans { waking, cpu_switch })
}

/// The per-task events without context switches (`attr.context_switch` off on every
/// plan): when the CPU-wide switch event of causes is open from the start, it writes the
/// target's switches too, and the per-task copies would only double the kernel's work.
pub(super) fn drop_task_switches(plans: &mut [AttrPlan]) {
    for p in plans {
        p.attr.set_context_switch(0);
    }
}

/// Whether this process may open CPU-wide events: root (or CAP_PERFMON, which the
/// kernel checks the same way at `perf_event_paranoid` ≥ 1) or `perf_event_paranoid` ≤ 0.
pub(super) fn cpu_wide_permitted(caps: &Capabilities) -> bool {
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    root || caps.perf_event_paranoid.is_some_and(|p| p <= 0)
}

/// Where `sched:sched_waking` keeps the wakee (`pid`) in its raw record: from tracefs'
/// format file, else the layout of every kernel since 4.x (offset 24, 4 bytes).
pub(super) fn wakee_field() -> (usize, usize) {
    crate::tracefs::find()
        .and_then(|r| std::fs::read_to_string(r.join("events/sched/sched_waking/format")).ok())
        .and_then(|f| crate::items::classprobe::parse_format(&f, "pid"))
        .filter(|l| !l.data_loc && l.size == 4)
        .map_or((24, 4), |l| (l.offset, l.size))
}

/// `attr` for a CPU-wide open (`pid` -1): no inheritance, no enable-on-exec.
pub(super) fn cpu_wide(attr: &crate::attr::PerfEventAttr) -> crate::attr::PerfEventAttr {
    let mut a = *attr;
    a.set_inherit(0);
    a.set_enable_on_exec(0);
    a
}

/// Resolve the uprobe item boundaries; their events come after the `events` sampling
/// events in the decoder.
/// Inherited events (launched commands, `-p`) use tracefs uprobe events, `-a` the uprobe
/// PMU ([`crate::items::uprobe::ProbeVia::for_inherit`]).
pub(super) fn prepare_probes(
    items: &ItemOptions,
    events: usize,
    sampling: &SamplingConfig,
) -> Result<Option<items::uprobe::ProbeSet>, RecordError> {
    let via = crate::items::uprobe::ProbeVia::for_inherit(sampling.inherit);
    Ok(match &items.probes {
        Some(p) => Some(items::uprobe::ProbeSet { prepared: p.prepare(via)?, begin_event: events as u16 }),
        None => None,
    })
}

/// What the decoder needs to know about every event: the sampling events, then the
/// probes' begin and end.
pub(super) fn decoder_layouts(plans: &[AttrPlan], probes: Option<&items::uprobe::ProbeSet>, clock: ClockChoice) -> Vec<Layout> {
    let mut layouts: Vec<Layout> = plans.iter().map(layout_of).collect();
    if let Some(probes) = probes {
        layouts.extend(probes.layouts(clock));
    }
    layouts
}

/// The trace header: events, clock, machine, and how items were marked (`item_reg`
/// names the register of register-tag mode).
pub(super) fn trace_header(
    opts: &RecordOptions,
    caps: &Capabilities,
    clock: ClockChoice,
    plans: &[AttrPlan],
    item_reg: Option<&str>,
    probes: Option<&items::uprobe::ProbeSet>,
) -> TraceHeader {
    let mut header = TraceHeader {
        events: plans.iter().map(|p| p.desc.clone()).collect(),
        clock: Some(caps.clock_info(clock)),
        source: "record".into(),
        cmdline: opts.cmdline.clone(),
        hostname: hostname(),
        os_release: caps.os_release.clone(),
        arch: Some(std::env::consts::ARCH.to_string()),
        cpu_desc: caps.cpu_desc.clone(),
        nr_cpus: Some(caps.online_cpus.len() as u32),
        start_realtime_ns: Some(clock_ns(libc::CLOCK_REALTIME)),
        ..TraceHeader::default()
    };
    header.extra.insert("start_monotonic_ns".into(), monotonic_ns().to_string());
    header.extra.insert("mmap_pages".into(), opts.mmap_pages.to_string());
    if let Ok(id) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        // Lets the symbolizer refuse this boot's kallsyms for a trace of another boot.
        header.extra.insert("boot_id".into(), id.trim().to_string());
    }
    if let Some(name) = item_reg {
        header.extra.insert("item_reg".into(), name.to_string());
    }
    if let Some(probes) = probes {
        header.extra.extend(probes.header_extra());
    }
    header
}

/// The decoder's view of an attr.
pub(super) fn layout_of(p: &AttrPlan) -> Layout {
    let a = &p.attr;
    use tailprof_perf_abi::branch_sample_type::{COUNTERS, HW_INDEX};
    Layout {
        sample_type: a.sample_type,
        read_format: a.read_format,
        regs_user_mask: a.sample_regs_user,
        regs_intr_mask: a.sample_regs_intr,
        branch_hw_index: a.branch_sample_type & HW_INDEX != 0,
        branch_counters: a.branch_sample_type & COUNTERS != 0,
        sample_id_all: a.sample_id_all() != 0,
        default_period: p.desc.sample_period.unwrap_or(0),
    }
}

/// Also sample the user registers `mask` (perf's `sample_regs_user` bits) on `p`: the
/// goroutine register on the off-CPU stack event, so a switch-out knows which goroutine
/// the thread was running (`Switch::item_key`). Only the attr changes: these samples
/// become switch records, never trace samples.
pub(super) fn add_user_regs(p: &mut AttrPlan, mask: u64) {
    p.attr.sample_type |= tailprof_perf_abi::sample_type::REGS_USER;
    p.attr.sample_regs_user |= mask;
}

fn hostname() -> Option<String> {
    let s = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}
