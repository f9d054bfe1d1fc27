//! Unit tests for event parsing (split out of event.rs to keep it short).

use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tailprof-collect/tests/fixtures/sysfs")
}
fn p(s: &str) -> Result<EventSpec, EventError> {
    EventSpec::parse_with_sysfs(s, &fixture())
}

#[test]
fn software_and_hardware() {
    let e = p("cpu-clock").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config), (EventKind::Software, 1, 0));
    assert!(!e.needs_hardware_pmu());
    assert_eq!(p("task-clock").unwrap().config, 1);
    assert_eq!(p("major-faults").unwrap().config, 6);
    assert_eq!(p("dummy").unwrap().config, 9);
    let e = p("cycles:upp").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config, e.precise), (EventKind::Hardware, 0, 0, 2));
    assert!(e.exclude_kernel && !e.exclude_user && e.needs_hardware_pmu());
    assert_eq!(e.name, "cycles:upp");
    assert_eq!(p("branch-instructions").unwrap().config, 4);
    assert_eq!(p("branches").unwrap().config, 4);
    assert_eq!(p("ref-cycles").unwrap().config, 9);
    assert_eq!(p("stalled-cycles-backend").unwrap().config, 8);
    let e = p("instructions:k").unwrap();
    assert!(e.exclude_user && !e.exclude_kernel);
    let e = p("cycles:uk").unwrap();
    assert!(!e.exclude_user && !e.exclude_kernel);
}

#[test]
fn hw_cache() {
    let e = p("LLC-load-misses").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config), (EventKind::HardwareCache, 3, 0x10002));
    assert_eq!(p("L1-dcache-load-misses").unwrap().config, 0x10000);
    assert_eq!(p("L1-dcache-loads").unwrap().config, 0);
    assert_eq!(p("dTLB-load-misses").unwrap().config, 0x10003);
    assert_eq!(p("iTLB-load-misses").unwrap().config, 0x10004);
    assert_eq!(p("LLC-stores").unwrap().config, 0x102);
    assert_eq!(p("L1-icache-prefetch-misses").unwrap().config, 0x10201);
    assert_eq!(p("node-load-misses:pp").unwrap().precise, 2);
    assert!(p("LLC-bogus").is_err());
    assert!(p("LLC-load-store").is_err());
}

#[test]
fn raw() {
    let e = p("r01d1:pp").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config, e.precise), (EventKind::Raw, 4, 0x1d1, 2));
    assert!(p("r").is_err());
    assert!(p("r12345678901234567").is_err());
    // "ref-cycles" is not raw; "rdx" is not hex.
    assert_eq!(p("ref-cycles").unwrap().kind, EventKind::Hardware);
    assert!(p("rdx").is_err());
}

#[test]
fn pmu_terms() {
    let e = p("cpu/event=0xd1,umask=0x20/pp").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config, e.precise), (EventKind::Pmu, 4, 0x20d1, 2));
    assert_eq!(e.pmu.as_deref(), Some("cpu"));
    assert!(e.needs_hardware_pmu() && !e.mem);
    let e = p("cpu/event=0xd1,umask=0x20,cmask=2,inv,edge/u").unwrap();
    assert_eq!(e.config, 0x20d1 | 2 << 24 | 1 << 23 | 1 << 18);
    assert!(e.exclude_kernel);
    let e = p("cpu/event=0xcd,umask=0x1,ldlat=3/:pp").unwrap();
    assert_eq!((e.config, e.config1, e.mem), (0x1cd, 3, true));
    // Multi-range format (AMD-style event:0-7,32-35): bit 8 of the value -> bit 32.
    let e = p("amd_like/event=0x1d1/").unwrap();
    assert_eq!(e.config, 0xd1 | 1 << 32);
    let e = p("cpu/config=0x1234,config1=5/").unwrap();
    assert_eq!((e.config, e.config1), (0x1234, 5));
    let e = p("ibs_op//").unwrap();
    assert_eq!((e.kind, e.attr_type, e.config), (EventKind::Pmu, 11, 0));
    assert!(!e.needs_hardware_pmu());
    assert_eq!(p("ibs_op/cnt_ctl/").unwrap().config, 1 << 19);
}

#[test]
fn pmu_aliases() {
    let e = p("cpu/mem-loads/").unwrap();
    assert_eq!((e.config, e.config1, e.mem), (0x1cd, 3, true));
    let e = p("cpu/mem-loads,ldlat=30/P").unwrap();
    assert_eq!((e.config1, e.precise, e.precise_max), (30, 3, true));
    let e = p("mem-loads:pp").unwrap();
    assert_eq!((e.config, e.config1, e.mem, e.precise), (0x1cd, 3, true, 2));
    assert_eq!(e.pmu.as_deref(), Some("cpu"));
    let e = p("mem-stores:P").unwrap();
    assert_eq!((e.config, e.mem, e.precise), (0x82d0, true, 3));
    let e = p("cpu/cycles/").unwrap();
    assert_eq!((e.config, e.mem), (0x3c, false));
    let e = p("cpu/mem-loads,event=0xd0/").unwrap();
    assert_eq!(e.config, 0x1d0);
}

#[test]
fn pmu_errors() {
    let err = p("nopmu/event=1/").unwrap_err();
    assert!(matches!(err, EventError::UnknownPmu { .. }), "{err}");
    assert!(err.to_string().contains("ibs_op"), "{err}");
    let err = p("cpu/event=0x1ff/").unwrap_err();
    assert!(err.to_string().contains("does not fit in 8 bits"), "{err}");
    let err = p("cpu/evnt=1/").unwrap_err();
    assert!(matches!(err, EventError::UnknownTerm { .. }), "{err}");
    assert!(err.to_string().contains("umask"), "{err}");
    assert!(p("cpu/event=zz/").is_err());
    assert!(p("cpu/event=1").is_err());
    assert!(p("cpu/period=1000/").is_err());
    assert!(p("cpu/event=1/x").is_err());
}

#[test]
fn modifier_errors() {
    assert!(matches!(p("cycles:pppp"), Err(EventError::BadModifier { .. })));
    assert!(matches!(p("cycles:pP"), Err(EventError::BadModifier { .. })));
    assert!(matches!(p("cpu-clock:p"), Err(EventError::BadModifier { .. })));
    assert!(matches!(p("cycles:x"), Err(EventError::BadModifier { .. })));
    assert!(matches!(p("cycles:q"), Err(EventError::BadModifier { .. })));
    assert!(p("cycles:").is_ok());
}

#[test]
fn unknown_suggests() {
    let err = p("cyclez").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("did you mean: cycles"), "{msg}");
    assert!(msg.contains("cpu-clock"), "{msg}");
    let msg = p("cpu-clok").unwrap_err().to_string();
    assert!(msg.contains("cpu-clock?") || msg.contains("cpu-clock,"), "{msg}");
    let msg = p("LLC-load-mises").unwrap_err().to_string();
    assert!(msg.contains("LLC-load-misses"), "{msg}");
    let msg = p("mem-load").unwrap_err().to_string();
    assert!(msg.contains("mem-loads"), "{msg}");
    assert!(matches!(p("  "), Err(EventError::Empty)));
}

#[test]
fn max_precise_fallback() {
    let root = fixture();
    assert_eq!(read_max_precise(&root, "cpu"), Some(3));
    assert_eq!(read_max_precise(&root, "ibs_op"), None);
    assert_eq!(read_max_precise(&root, "nope"), None);
    assert_eq!(p("cycles:P").unwrap().precise, 3);
}

#[test]
fn tracepoints_with_fake_tracefs() {
    let root = fixture();
    let tfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tailprof-collect/tests/fixtures/tracefs");
    let e = EventSpec::parse_with_roots("sched:sched_switch", &root, Some(&tfs)).unwrap();
    assert_eq!((e.kind, e.attr_type, e.config), (EventKind::Tracepoint, 2, 316));
    let e = EventSpec::parse_with_roots("sched:sched_switch:u", &root, Some(&tfs)).unwrap();
    assert!(e.exclude_kernel);
    let err = EventSpec::parse_with_roots("sched:sched_swich", &root, Some(&tfs)).unwrap_err();
    assert!(err.to_string().contains("sched_switch"), "{err}");
    assert!(EventSpec::parse_with_roots("sched:..", &root, Some(&tfs)).is_err());
    assert!(EventSpec::parse_with_roots("sched:sched_switch:p", &root, Some(&tfs)).is_err());
    let none = root.join("does-not-exist");
    let err = EventSpec::parse_with_roots("sched:sched_switch", &root, Some(&none)).unwrap_err();
    assert!(err.to_string().contains("not mounted"), "{err}");
}

#[test]
fn live_tracepoint_if_available() {
    match EventSpec::parse("sched:sched_switch") {
        Ok(e) => assert!(e.config > 0),
        Err(e) => tailprof_testkit::skip(tailprof_testkit::Need::Tracefs, e),
    }
}

#[test]
fn formats() {
    assert_eq!(parse_format("config:0-7").unwrap().ranges, vec![(0, 7)]);
    let f = parse_format("config1:0-15").unwrap();
    assert_eq!((f.field, f.ranges), (1, vec![(0, 15)]));
    assert_eq!(parse_format("config:0-7,32-35").unwrap().ranges, vec![(0, 7), (32, 35)]);
    assert_eq!(parse_format("config:21").unwrap().ranges, vec![(21, 21)]);
    assert!(parse_format("config:7-0").is_err());
    assert!(parse_format("config:0-64").is_err());
    assert!(parse_format("config3:0-1").is_err());
    assert!(parse_format("bogus").is_err());
}
