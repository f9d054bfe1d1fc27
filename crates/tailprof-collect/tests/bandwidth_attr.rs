//! Golden tests of `record --bandwidth`'s event choice: for each vendor's machine (a fake
//! sysfs PMU tree plus a `/proc/cpuinfo` text under `tests/fixtures/bandwidth/<machine>/`)
//! the chosen event, its reason, the exact `perf_event_attr` (large-PEBS eligibility and
//! notes included), and the counting sibling's attr. Runs on PMU-less machines.
//!
//! Each case lives in `tests/attr/bandwidth/<name>.golden`. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p tailprof-collect --test bandwidth_attr`.

use std::path::{Path, PathBuf};

use tailprof_collect::attr::{attr_golden_text, build_attr, ClockChoice, LARGE_PEBS_FLAGS};
use tailprof_collect::bandwidth::{choose, sampling_config, BandwidthError, BandwidthRequest, Machine, Method, Mode};
use tailprof_collect::counting::counting_attr;

/// (golden name, machine, args). Args: `--soft-tsc`, `--counter`, `-c PERIOD`,
/// `--clock monotonic` (default: the perf clock, as on a machine with TSC conversion).
const CASES: &[(&str, &str, &str)] = &[
    ("skylake_pebs", "skylake", ""),
    ("skylake_pebs_counter", "skylake", "--counter"),
    ("skylake_soft_tsc", "skylake", "--soft-tsc -c 20011"),
    ("skylake_pebs_c97_monotonic", "skylake", "-c 97 --clock monotonic"),
    ("haswell_pebs", "haswell", ""),
    ("ivybridge_pebs", "ivybridge", ""),
    ("westmere_pebs", "westmere", ""),
    ("goldmont_pebs", "goldmont", ""),
    ("alderlake_hybrid_pebs", "alderlake_hybrid", "--counter"),
    ("intel_unknown_fallback", "intel_unknown", ""),
    ("zen3_ibs", "zen3", ""),
    ("zen3_ibs_soft_tsc_asked", "zen3", "--soft-tsc --counter"),
    ("graviton3_spe", "graviton3", ""),
    ("amd_noibs_error", "amd_noibs", ""),
    ("nopmu_error", "nopmu", ""),
];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn machine(name: &str) -> (Machine, PathBuf) {
    let dir = manifest().join("tests/fixtures/bandwidth").join(name);
    let cpuinfo = std::fs::read_to_string(dir.join("cpuinfo")).unwrap();
    let root = dir.join("sysfs");
    (Machine::detect(&root, &cpuinfo), root)
}

fn parse_args(args: &str) -> (BandwidthRequest, ClockChoice) {
    let mut req = BandwidthRequest::default();
    let mut clock = ClockChoice::PerfDefault;
    let mut it = args.split_whitespace();
    while let Some(a) = it.next() {
        match a {
            "--soft-tsc" => req.mode = Mode::SoftTsc,
            "--counter" => req.counter = true,
            "-c" => req.period = Some(it.next().unwrap().parse().unwrap()),
            "--clock" => {
                clock = match it.next().unwrap() {
                    "monotonic" => ClockChoice::Monotonic,
                    _ => ClockChoice::PerfDefault,
                }
            }
            other => panic!("unknown arg {other}"),
        }
    }
    (req, clock)
}

/// The sysfs root appears in some texts; golden files hold it relative.
fn rel(s: &str) -> String {
    s.replace(&manifest().display().to_string(), "<crate>")
}

fn render(machine_name: &str, args: &str) -> String {
    let (m, root) = machine(machine_name);
    let (req, clock) = parse_args(args);
    let mut out = format!("# machine: {machine_name}\n# args: {args}\n");
    let choice = match choose(&m, &root, &req) {
        Ok(c) => c,
        Err(e) => {
            out.push_str(&format!("# error\n{}\n", rel(&e.to_string())));
            return out;
        }
    };
    out.push_str("# choice\n");
    out.push_str(&format!("machine={}\n", choice.machine));
    out.push_str(&format!("method={}\n", choice.method.as_str()));
    out.push_str(&format!("event={}\n", choice.event_name));
    out.push_str(&format!("period={}\n", choice.period));
    out.push_str(&format!("dram_filter={}\n", u8::from(choice.dram_filter)));
    out.push_str(&format!("large_pebs_time={}\n", u8::from(choice.large_pebs_time)));
    out.push_str(&format!("reason={}\n", choice.reason));
    for n in &choice.notes {
        out.push_str(&format!("note={n}\n"));
    }
    if let Some(b) = &choice.record_blocker {
        out.push_str(&format!("record_blocker={b}\n"));
    }
    let plan = build_attr(&choice.spec, &sampling_config(&choice, clock)).unwrap();
    out.push_str("# attr\n");
    out.push_str(&attr_golden_text(&plan.attr));
    out.push_str("# plan\n");
    out.push_str(&format!("large_pebs_eligible={}\n", u8::from(plan.large_pebs_eligible)));
    for n in &plan.notes {
        out.push_str(&format!("note={n}\n"));
    }
    if let Some(c) = &choice.counter {
        out.push_str(&format!("# counter: {}\n", c.name));
        out.push_str(&attr_golden_text(&counting_attr(c)));
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
fn golden_bandwidth_attrs() {
    let dir = manifest().join("tests/attr/bandwidth");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0");
    let mut failures = Vec::new();
    for (name, m, args) in CASES {
        let path = dir.join(format!("{name}.golden"));
        let actual = render(m, args);
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
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        if p.extension().is_some_and(|e| e == "golden") && !CASES.iter().any(|(n, _, _)| *n == stem) {
            failures.push(format!("{}: no case renders this file; delete it", p.display()));
        }
    }
    assert!(failures.is_empty(), "golden mismatches (UPDATE_GOLDEN=1 to accept):\n{}", failures.join("\n"));
}

/// Independent of the text: every PEBS choice qualifies for large PEBS with the perf
/// clock (fixed period, only large-PEBS sample bits, no callchain, no registers), has
/// timestamps, data address, data source and weight, and each vendor gets its mechanism.
#[test]
fn large_pebs_and_vendor_mechanisms() {
    for (name, m, args) in CASES {
        let (machine, root) = machine(m);
        let (req, clock) = parse_args(args);
        let Ok(c) = choose(&machine, &root, &req) else { continue };
        let plan = build_attr(&c.spec, &sampling_config(&c, clock)).unwrap();
        let a = &plan.attr;
        assert_eq!((a.freq(), a.sample_period), (0, c.period), "{name}");
        assert_eq!(a.sample_regs_user, 0, "{name}");
        assert_eq!(a.sample_type & (1 << 5), 0, "{name}: no CALLCHAIN");
        match c.method {
            Method::Pebs => {
                assert!(a.precise_ip() >= 1, "{name}");
                assert_eq!(a.sample_type & !LARGE_PEBS_FLAGS, 0, "{name}");
                // TIME | ADDR | WEIGHT_STRUCT | DATA_SRC
                for bit in [1u64 << 2, 1 << 3, 1 << 24, 1 << 15] {
                    assert_ne!(a.sample_type & bit, 0, "{name}: bit {bit:#x}");
                }
                assert_eq!(plan.large_pebs_eligible, clock == ClockChoice::PerfDefault, "{name}: {:?}", plan.notes);
                assert_eq!(c.large_pebs_time, m == &"skylake" || m == &"alderlake_hybrid", "{name}");
                assert!(!c.dram_filter);
            }
            Method::SoftTsc => {
                assert_eq!(a.precise_ip(), 0, "{name}");
                assert!(!plan.large_pebs_eligible);
            }
            Method::IbsOp => {
                assert!(m.starts_with("zen"));
                assert!(c.dram_filter && c.counter.is_none());
                assert_eq!(a.type_, 11);
                assert_ne!(a.config & (1 << 19), 0, "cnt_ctl");
                assert_ne!(a.sample_type & (1 << 15), 0, "DATA_SRC");
            }
            Method::Spe => {
                assert!(c.record_blocker.is_some() && c.dram_filter);
                assert_eq!(a.type_, 9);
                assert_eq!(a.config & 1, 1, "ts_enable");
                assert_ne!(a.config & (1 << 33), 0, "load_filter");
                assert_eq!(a.config1, 1 << 9, "LLC miss event filter");
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn event_choice_per_generation() {
    let ev = |m: &str| {
        let (machine, root) = machine(m);
        let c = choose(&machine, &root, &BandwidthRequest::default()).unwrap();
        (c.event_name, c.spec.config & 0xffff, c.method)
    };
    assert_eq!(ev("skylake"), ("MEM_LOAD_RETIRED.L3_MISS".into(), 0x20d1, Method::Pebs));
    assert_eq!(ev("haswell"), ("MEM_LOAD_UOPS_RETIRED.L3_MISS".into(), 0x20d1, Method::Pebs));
    assert_eq!(ev("ivybridge"), ("MEM_LOAD_UOPS_RETIRED.LLC_MISS".into(), 0x20d1, Method::Pebs));
    assert_eq!(ev("westmere"), ("MEM_LOAD_RETIRED.LLC_MISS".into(), 0x10cb, Method::Pebs));
    assert_eq!(ev("goldmont"), ("MEM_LOAD_UOPS_RETIRED.DRAM_HIT".into(), 0x80d1, Method::Pebs));
    assert_eq!(ev("intel_unknown"), ("LONGEST_LAT_CACHE.MISS".into(), 0x412e, Method::SoftTsc));
    let (m, root) = machine("nopmu");
    let e = choose(&m, &root, &BandwidthRequest::default()).unwrap_err();
    assert!(matches!(e, BandwidthError::NoPmu { .. }));
    let t = e.to_string();
    assert!(!t.contains('\n') && t.contains("tailprof import") && t.contains("tailprof bandwidth"), "{t}");
}

#[test]
fn fixtures_exist() {
    assert!(Path::new(&manifest().join("tests/fixtures/bandwidth/skylake/sysfs/cpu/caps/pmu_name")).is_file());
}
