//! Golden `perf_event_attr`s of call stacks and off-CPU recording (issue 7): `-g`,
//! `--call-graph dwarf[,N]`, `--call-graph lbr` (golden only: no PMU with LBR in CI),
//! `context_switch` on the side-band event, and the `sched:sched_switch` off-CPU stack
//! event (with a fixed tracepoint id, since the real one depends on the kernel), and the
//! two `sched:sched_waking` events of causes (issue 21: thread and interrupt context,
//! each with its tracepoint filter).
//!
//! Files: `tests/attr/stacks/<name>.golden`; regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p tailprof-collect --test attr_stacks`.

use std::path::PathBuf;

use tailprof_collect::attr::{
    apply_call_graph, apply_context_switch, attr_golden_text, build_attr, off_cpu_attr, parse_regs, waking_attr_full, waking_attrs,
    AttrPlan, SamplingConfig,
};
use tailprof_collect::event::{EventKind, EventSpec};
use tailprof_collect::stacks::CallGraph;

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn spec(name: &str) -> EventSpec {
    EventSpec::parse_with_sysfs(name, &manifest().join("tests/fixtures/sysfs")).unwrap()
}

/// A tracepoint spec like `sched:sched_switch` with a fixed id.
fn sched_switch() -> EventSpec {
    tracepoint("sched:sched_switch", 316)
}

/// A tracepoint spec with a fixed id.
fn tracepoint(name: &str, id: u64) -> EventSpec {
    EventSpec {
        name: name.into(),
        kind: EventKind::Tracepoint,
        attr_type: 2,
        config: id,
        config1: 0,
        config2: 0,
        precise: 0,
        precise_max: false,
        exclude_user: false,
        exclude_kernel: false,
        pmu: None,
        mem: false,
    }
}

fn text(args: &str, plan: &AttrPlan) -> String {
    let mut out = format!("# {args}\n");
    out.push_str(&attr_golden_text(&plan.attr));
    out.push_str(&format!("# desc.sample_type={:#x} desc.regs_user_mask={:#x}\n", plan.desc.sample_type, plan.desc.regs_user_mask));
    for n in &plan.notes {
        out.push_str(&format!("note={n}\n"));
    }
    if let Some(f) = &plan.filter {
        out.push_str(&format!("filter={f}\n"));
    }
    out
}

fn cases() -> Vec<(&'static str, String)> {
    let cfg = SamplingConfig { inherit: true, enable_on_exec: true, ..SamplingConfig::default() };
    let with = |event: &str, cg: CallGraph, c: &SamplingConfig| {
        let mut p = build_attr(&spec(event), c).unwrap();
        apply_call_graph(&mut p, &cg);
        p
    };
    let mut out = Vec::new();
    out.push(("cpu_clock_fp", text("-e cpu-clock -g", &with("cpu-clock", CallGraph::Fp, &cfg))));
    out.push((
        "cpu_clock_dwarf_default",
        text("-e cpu-clock --call-graph dwarf", &with("cpu-clock", CallGraph::parse("dwarf").unwrap(), &cfg)),
    ));
    let regs = SamplingConfig { regs_user: parse_regs("r13").unwrap(), ..cfg.clone() };
    out.push((
        "cpu_clock_dwarf_4096_regs_r13",
        text("-e cpu-clock --call-graph dwarf,4096 --regs r13", &with("cpu-clock", CallGraph::Dwarf { stack_size: 4096 }, &regs)),
    ));
    let precise = SamplingConfig { period: Some(100_003), ..cfg.clone() };
    out.push(("cycles_pp_lbr", text("-e cycles:pp -c 100003 --call-graph lbr", &with("cycles:pp", CallGraph::Lbr, &precise))));
    let mut side = build_attr(&spec("cpu-clock"), &cfg).unwrap();
    apply_context_switch(&mut side);
    out.push(("cpu_clock_off_cpu_sideband", text("-e cpu-clock --off-cpu (side-band event)", &side)));
    out.push(("off_cpu_sched_switch_fp", text("--off-cpu: sched:sched_switch", &off_cpu_attr(&sched_switch(), &cfg, None).unwrap())));
    out.push((
        "off_cpu_sched_switch_dwarf",
        text(
            "--off-cpu --call-graph dwarf: sched:sched_switch",
            &off_cpu_attr(&sched_switch(), &cfg, Some(&CallGraph::Dwarf { stack_size: 16384 })).unwrap(),
        ),
    ));
    let waking = tracepoint("sched:sched_waking", 317);
    for (mode, cg) in [("fp", None), ("dwarf", Some(CallGraph::Dwarf { stack_size: 16384 }))] {
        let w = waking_attrs(&waking, &cfg, cg.as_ref()).unwrap();
        let (task, irq) = match mode {
            "fp" => ("waking_task_fp", "waking_irq_fp"),
            _ => ("waking_task_dwarf", "waking_irq_dwarf"),
        };
        out.push((task, text(&format!("--off-cpu ({mode}): sched:sched_waking, thread context"), &w.task)));
        out.push((irq, text(&format!("--off-cpu ({mode}): sched:sched_waking, interrupt context"), &w.irq)));
    }
    out.push((
        "waking_full_fp",
        text("--off-cpu --full-waker-stacks (fp): sched:sched_waking", &waking_attr_full(&waking, &cfg, None).unwrap()),
    ));
    out
}

#[test]
fn golden_stack_attrs() {
    let dir = manifest().join("tests/attr/stacks");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    let cases = cases();
    for (name, actual) in &cases {
        let path = dir.join(format!("{name}.golden"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if &expected == actual => {}
            Ok(expected) => failures.push(format!("{}:\n--- expected\n{expected}\n+++ actual\n{actual}", path.display())),
            Err(e) => failures.push(format!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display())),
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        if !cases.iter().any(|(n, _)| *n == stem) {
            failures.push(format!("{}: no case renders this file; delete it", p.display()));
        }
    }
    assert!(failures.is_empty(), "golden mismatches (UPDATE_GOLDEN=1 to accept):\n{}", failures.join("\n"));
}

/// The properties the goldens encode, stated once more independently of the text.
#[test]
fn stack_attr_properties() {
    use tailprof_perf_abi::sample_type as st;
    let cfg = SamplingConfig::default();
    let mut p = build_attr(&spec("cpu-clock"), &cfg).unwrap();
    apply_call_graph(&mut p, &CallGraph::Dwarf { stack_size: 8192 });
    assert_eq!(p.attr.sample_type & (st::CALLCHAIN | st::REGS_USER | st::STACK_USER), st::CALLCHAIN | st::REGS_USER | st::STACK_USER);
    assert_eq!(p.attr.sample_stack_user, 8192);
    assert_eq!(p.attr.exclude_callchain_user(), 1);
    assert_eq!(p.attr.sample_regs_user, tailprof_unwind::UNWIND_REGS_MASK);
    // The trace keeps no unwinding registers and says the samples have callchains.
    assert_eq!(p.desc.regs_user_mask, 0);
    assert_ne!(p.desc.sample_type & st::CALLCHAIN, 0);
    let mut lbr = build_attr(&spec("cycles"), &cfg).unwrap();
    apply_call_graph(&mut lbr, &CallGraph::Lbr);
    assert_ne!(lbr.attr.sample_type & st::BRANCH_STACK, 0);
    assert_ne!(lbr.attr.branch_sample_type & tailprof_perf_abi::branch_sample_type::CALL_STACK, 0);
}

/// The sched_waking events of causes walk only the part of the waker's stack the
/// analysis reads (issue 21, recording cost): thread-context wakers their user stack,
/// interrupt-context wakers their kernel stack; both carry the wakee (RAW) and no
/// PERIOD (always 1), and each keeps only its context by a tracepoint filter.
#[test]
fn waking_events_walk_only_the_stack_part_the_analysis_reads() {
    use tailprof_perf_abi::sample_type as st;
    let cfg = SamplingConfig { inherit: true, enable_on_exec: true, ..SamplingConfig::default() };
    for cg in [None, Some(CallGraph::Fp), Some(CallGraph::Dwarf { stack_size: 8192 }), Some(CallGraph::Lbr)] {
        let w = waking_attrs(&tracepoint("sched:sched_waking", 317), &cfg, cg.as_ref()).unwrap();
        for p in [&w.task, &w.irq] {
            assert_ne!(p.attr.sample_type & st::RAW, 0, "{cg:?}");
            assert_eq!(p.attr.sample_type & st::PERIOD, 0, "{cg:?}");
            assert_eq!(p.desc.sample_type, p.attr.sample_type);
            assert_eq!(p.attr.sample_period, 1);
        }
        assert_eq!(w.task.attr.exclude_callchain_kernel(), 1, "{cg:?}");
        assert_eq!(w.irq.attr.exclude_callchain_user(), 1, "{cg:?}");
        assert_eq!(w.irq.attr.exclude_callchain_kernel(), 0, "{cg:?}");
        assert_eq!(w.irq.attr.sample_type & (st::STACK_USER | st::REGS_USER | st::BRANCH_STACK), 0, "{cg:?}");
        let dwarf = matches!(cg, Some(CallGraph::Dwarf { .. }));
        assert_eq!(w.task.attr.sample_type & st::STACK_USER != 0, dwarf, "{cg:?}");
        assert_eq!(w.task.filter.as_deref(), Some("!(common_flags & 24) && common_pid != 0"));
        assert_eq!(w.irq.filter.as_deref(), Some("(common_flags & 24) || common_pid == 0"));
        // --full-waker-stacks: one event, every waker, both parts of its stack.
        let full = waking_attr_full(&tracepoint("sched:sched_waking", 317), &cfg, cg.as_ref()).unwrap();
        assert_ne!(full.attr.sample_type & st::RAW, 0, "{cg:?}");
        assert_eq!(full.attr.sample_type & st::PERIOD, 0, "{cg:?}");
        // The kernel part walked; the user part as for an off-CPU stack (the callchain, or
        // in dwarf mode the stack copy the recorder unwinds).
        let off = off_cpu_attr(&tracepoint("sched:sched_waking", 317), &cfg, cg.as_ref()).unwrap();
        assert_eq!(full.attr.exclude_callchain_kernel(), 0, "{cg:?}");
        assert_eq!(full.attr.exclude_callchain_user(), off.attr.exclude_callchain_user(), "{cg:?}");
        assert_eq!(full.filter, None);
        assert_eq!(full.attr.sample_type & st::STACK_USER != 0, dwarf, "{cg:?}");
    }
}
