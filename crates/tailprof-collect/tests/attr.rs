//! Golden `perf_event_attr` tests (the idea of perf's tools/perf/tests/attr): for a
//! command-line-like input, the exact attr we would pass to the kernel, plus the plan's
//! notes. Hardware events are parsed against the fake sysfs tree in
//! `tests/fixtures/sysfs`, so these run on PMU-less machines.
//!
//! Each case lives in `tests/attr/<name>.golden`. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p tailprof-collect --test attr`; otherwise a mismatch
//! fails with a line diff.

use std::path::{Path, PathBuf};

use tailprof_collect::attr::{attr_golden_text, build_attr, parse_regs, ClockChoice, SamplingConfig};
use tailprof_collect::event::EventSpec;

/// (golden name, args). Args: `-e EVENT`, `-c PERIOD`, `-F FREQ`, `--regs LIST`,
/// `--clock monotonic|perf`, `--wakeup N`, `--no-sideband`, `--inherit`.
const CASES: &[(&str, &str)] = &[
    ("cpu_clock_default", "-e cpu-clock"),
    ("task_clock_f999", "-e task-clock -F 999"),
    ("cycles_pp_c20003_perf_clock", "-e cycles:pp -c 20003 --clock perf"),
    ("cycles_ppp_freq", "-e cycles:ppp -F 4000 --clock perf"),
    ("cycles_pp_monotonic", "-e cycles:pp -c 20003"),
    ("cycles_pp_wakeup_events", "-e cycles:pp -c 20003 --clock perf --wakeup 16"),
    ("mem_loads_ldlat_terms", "-e cpu/event=0xcd,umask=0x1,ldlat=3/pp -c 10007 --clock perf"),
    ("mem_loads_alias_max_precise", "-e cpu/mem-loads,ldlat=30/P --clock perf"),
    ("cpu_pmu_all_terms", "-e cpu/event=0xd1,umask=0x20,cmask=2,inv,edge/u"),
    ("raw_r01d1_pp", "-e r01d1:pp --clock perf"),
    ("regs_r13_rdi", "-e cpu-clock --regs r13,rdi"),
    ("regs_precise_user_only", "-e cycles:upp -c 100003 --clock perf --regs r13,rdi"),
    ("regs_precise_with_kernel", "-e cycles:pp -c 100003 --clock perf --regs r13,rdi"),
    ("llc_load_misses", "-e LLC-load-misses"),
    ("ibs_op", "-e ibs_op// --no-sideband --inherit"),
    ("dummy_sideband", "-e dummy"),
];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn render(args: &str) -> String {
    let mut cfg = SamplingConfig::default();
    let mut event = None;
    let mut it = args.split_whitespace();
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a {
            "-e" => event = Some(val().to_string()),
            "-c" => cfg.period = Some(val().parse().unwrap()),
            "-F" => cfg.freq = Some(val().parse().unwrap()),
            "--regs" => cfg.regs_user = parse_regs(val()).unwrap(),
            "--wakeup" => cfg.wakeup_events = val().parse().unwrap(),
            "--clock" => {
                cfg.clock = match val() {
                    "perf" => ClockChoice::PerfDefault,
                    "monotonic" => ClockChoice::Monotonic,
                    other => panic!("bad clock {other}"),
                }
            }
            "--no-sideband" => cfg.sideband = false,
            "--inherit" => cfg.inherit = true,
            other => panic!("unknown arg {other}"),
        }
    }
    let event = event.expect("-e");
    let spec = EventSpec::parse_with_sysfs(&event, &manifest().join("tests/fixtures/sysfs")).unwrap_or_else(|e| panic!("{event}: {e}"));
    let plan = build_attr(&spec, &cfg).unwrap_or_else(|e| panic!("{args}: {e}"));
    let mut out = format!("# args: {args}\n");
    out.push_str(&attr_golden_text(&plan.attr));
    out.push_str("# plan\n");
    out.push_str(&format!("large_pebs_eligible={}\n", u8::from(plan.large_pebs_eligible)));
    for n in &plan.notes {
        out.push_str(&format!("note={n}\n"));
    }
    out
}

fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => {
                if let Some(x) = x {
                    out.push_str(&format!("-{x}\n"));
                }
                if let Some(y) = y {
                    out.push_str(&format!("+{y}\n"));
                }
            }
        }
    }
    out
}

#[test]
fn golden_attrs() {
    let dir = manifest().join("tests/attr");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    for (name, args) in CASES {
        let path = dir.join(format!("{name}.golden"));
        let actual = render(args);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!("{}:\n{}", path.display(), diff(&expected, &actual))),
            Err(e) => failures.push(format!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display())),
        }
    }
    // Golden files without a case are stale.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        if p.extension().is_some_and(|e| e == "golden") && !CASES.iter().any(|(n, _)| *n == stem) {
            failures.push(format!("{}: no case renders this file; delete it", p.display()));
        }
    }
    assert!(failures.is_empty(), "golden mismatches (UPDATE_GOLDEN=1 to accept):\n{}", failures.join("\n"));
}

/// The golden cases that claim eligibility must be exactly the precise, fixed-period,
/// perf-clock, watermark ones (a cross-check on the notes logic, independent of text).
#[test]
fn golden_eligibility_summary() {
    let eligible: Vec<&str> = CASES.iter().filter(|(_, args)| render(args).contains("large_pebs_eligible=1")).map(|(n, _)| *n).collect();
    assert_eq!(
        eligible,
        ["cycles_pp_c20003_perf_clock", "mem_loads_ldlat_terms", "mem_loads_alias_max_precise", "raw_r01d1_pp", "regs_precise_user_only"]
    );
}

#[test]
fn fixtures_exist() {
    assert!(Path::new(&manifest().join("tests/fixtures/sysfs/cpu/format/ldlat")).is_file());
}

/// Uprobe item-boundary attrs (`--item-begin BIN:SYM`, `--item-end BIN:SYM%return`).
/// Inherited targets (a launched command, `-p`) use a tracefs uprobe event opened as a
/// tracepoint (its id shown as the placeholder 1234); `-a` uses the uprobe PMU, described
/// by the fixture in `tests/fixtures/sysfs/uprobe` when present, else type 8 / retprobe
/// bit 0 (this VM's values), whose `config1` is a pointer to the binary's path at open
/// time (the golden files show the placeholder 0x7f0000001000). Same UPDATE_GOLDEN rule;
/// files in `tests/attr/uprobe/`.
#[test]
fn golden_uprobe_attrs() {
    use tailprof_collect::items::uprobe::{uprobe_attr, ProbeEvent, ProbeVia, UprobeAttrConfig, UprobePmu};
    let pmu = UprobePmu::probe_at(&manifest().join("tests/fixtures/sysfs/uprobe")).unwrap_or(UprobePmu { pmu_type: 8, retprobe_bit: 0 });
    let pmu_ev = ProbeEvent::Pmu { pmu, path_ptr: 0x7f00_0000_1000 };
    let tp_ev = ProbeEvent::Tracepoint { id: 1234 };
    let base = UprobeAttrConfig {
        offset: 0x4760a0,
        ref_ctr_offset: 0,
        ret: false,
        regs_user: 0,
        clock: ClockChoice::Monotonic,
        inherit: true,
        enable_on_exec: true,
    };
    let system_wide = UprobeAttrConfig { inherit: false, enable_on_exec: false, ..base };
    let cases: [(&str, &str, ProbeEvent, UprobeAttrConfig); 6] = [
        ("uprobe_begin_seq", "begin, command target (tracefs event), sequence ids", tp_ev, base),
        (
            "uprobe_begin_id_rdi",
            "begin, command target (tracefs event), --item-id-reg rdi",
            tp_ev,
            UprobeAttrConfig { regs_user: parse_regs("rdi").unwrap(), ..base },
        ),
        ("uprobe_end_return", "end, %return, command target (tracefs r: event)", tp_ev, UprobeAttrConfig { ret: true, ..base }),
        ("uprobe_begin_system_wide", "begin, -a (uprobe PMU, pid -1, no inherit)", pmu_ev, system_wide),
        (
            "uprobe_end_return_system_wide",
            "end, %return, -a (uprobe PMU, pid -1, no inherit)",
            pmu_ev,
            UprobeAttrConfig { ret: true, ..system_wide },
        ),
        (
            "usdt_semaphore_system_wide",
            "USDT site with a semaphore at file offset 0x88595e, -a (uprobe PMU: ref_ctr_offset in config bits 32-63)",
            pmu_ev,
            UprobeAttrConfig { offset: 0x722d3, ref_ctr_offset: 0x88595e, ..system_wide },
        ),
    ];
    // Issue 18 item 2: an inherited uprobe PMU event makes the target's clone() fail
    // (EFAULT): never built, and never chosen for an inherited target.
    assert!(uprobe_attr(&pmu_ev, &base).is_none());
    assert_eq!(ProbeVia::for_inherit(true), ProbeVia::Tracefs);
    assert_eq!(ProbeVia::for_inherit(false), ProbeVia::Pmu);
    let dir = manifest().join("tests/attr/uprobe");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    for (name, what, ev, cfg) in cases {
        let a = uprobe_attr(&ev, &cfg).expect("buildable");
        let actual = format!("# uprobe: {what}\n{}", attr_golden_text(&a));
        let path = dir.join(format!("{name}.golden"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => failures.push(format!("{}:\n{}", path.display(), diff(&expected, &actual))),
            Err(e) => failures.push(format!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display())),
        }
    }
    assert!(failures.is_empty(), "golden mismatches (UPDATE_GOLDEN=1 to accept):\n{}", failures.join("\n"));
}
