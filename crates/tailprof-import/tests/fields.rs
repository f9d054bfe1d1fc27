//! Sample fields: data addresses, weights (WEIGHT and WEIGHT_STRUCT), data sources,
//! user registers, CPUs and periods, checked against `perf report -D` of the installed
//! perf for every recording it can read, and against values known from the corpus.

mod common;

use common::*;
use tailprof_format::{ClockInfo, CpuMode, Record};
use tailprof_import::UNKNOWN_CPU;

/// Recordings the installed perf (6.1) can dump.
const PERF_READABLE: &[&str] = &[
    "ubench__xeon6126_perf-dla1_dat-x",
    "ubench__perf-mem-4986",
    "ubench__perf-mem-9973",
    "ubench__perf-mem-19946",
    "ubench__perf-mem-39891",
    "perf_data_converter__perf.data.weight_struct",
    "perf_data_converter__perf.data.lost_samples-4.4",
    "perf_data_converter__perf.data.piped.lost_samples-4.4",
    "perf_data_converter__perf.data.hybrid_topology",
    "perf_data_converter__perf.data.branch-4.14",
    "perf_data_converter__perf.data.group_desc-4.14",
    "perf_data_converter__perf.data.throttle-3.8",
    "perf_data_converter__perf.data.forkexit-3.8",
    "perf_data_converter__perf.data.piped.target-3.8",
    "perf_data_converter__perf.data.singleprocess-3.8",
    "perf_data_converter__perf.data.ctx_switch_namespaces-4.14",
    "misc__pourroy_test_perf.data.old_broadwell_cycles_ppp",
    "hotspot__cpp-recursion.perf.data",
    "perfparser__vector_static_gcc__perf.lbr.data",
    "perfparser__fork_static_gcc__perf.data.zstd",
    "perfparser__probe.data.file",
];

#[test]
fn every_sample_field_matches_perf_report_dump() {
    let Some(dir) = corpus() else { return };
    if !perf_available() {
        return;
    }
    for name in PERF_READABLE {
        let path = dir.join(name);
        let (imp, recs) = import(&path);
        let st = imp.header.events[0].sample_type;
        let (has_cpu, has_time) = (st & (1 << 7) != 0, st & (1 << 2) != 0);
        let Some(mut want) = perf_dump_samples(&path, has_cpu, has_time) else { continue };
        let mut got: Vec<DumpSample> = samples(&recs)
            .iter()
            .map(|s| {
                let ev = &imp.header.events[s.event as usize];
                DumpSample {
                    time: has_time.then_some(s.time),
                    cpu: has_cpu.then_some(s.cpu),
                    pid: s.pid,
                    tid: s.tid,
                    ip: s.ip,
                    period: s.period,
                    addr: s.addr.unwrap_or(0),
                    weight: s.weight,
                    data_src: s.data_src,
                    regs: if ev.sample_type & (1 << 12) != 0 { s.regs.clone() } else { Vec::new() },
                }
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got.len(), want.len(), "{name}: sample count vs perf report -D");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{name}: sample differs from perf report -D");
        }
        eprintln!("{name}: {} samples identical to perf report -D", got.len());
    }
}

#[test]
fn perf_mem_recordings_keep_address_weight_and_data_source() {
    for (name, period) in [
        ("ubench__perf-mem-4986", 4986),
        ("ubench__perf-mem-9973", 9973),
        ("ubench__perf-mem-19946", 19946),
        ("ubench__perf-mem-39891", 39891),
    ] {
        let Some(path) = corpus_file(name) else { return };
        let (imp, recs) = import(&path);
        let ev = &imp.header.events[0];
        assert_eq!(ev.sample_period, Some(period), "{name}");
        assert_eq!(ev.sample_type & 0xc008, 0xc008, "{name}: ADDR, WEIGHT, DATA_SRC");
        assert_eq!(ev.precise_ip, 2, "{name}");
        for s in samples(&recs) {
            assert_eq!(s.period, period, "{name}");
            assert!(s.addr.is_some_and(|a| a != 0), "{name}: data address");
            assert!(s.weight.is_some_and(|w| w > 0), "{name}: load latency");
            // Every load of this benchmark is a load (PERF_MEM_OP_LOAD = 2 in bits 0..5).
            assert_eq!(s.data_src.unwrap() & 0x1f, 2, "{name}: data source {:#x}", s.data_src.unwrap());
        }
    }
    // The first samples of the 4986 run, as `perf script -F tid,time,addr,data_src,weight,ip` shows them.
    let Some(path) = corpus_file("ubench__perf-mem-4986") else { return };
    let (_, recs) = import(&path);
    let first: Vec<(u64, u64, u64, u64)> =
        samples(&recs).iter().take(2).map(|s| (s.ip, s.addr.unwrap(), s.weight.unwrap(), s.data_src.unwrap())).collect();
    assert_eq!(first, vec![(0x4006a9, 0x7fff64c80388, 29, 0x68100142), (0x4006a0, 0x7fff64c80384, 43, 0x68100142)]);
    assert_eq!(samples(&recs)[0].tid, 997865);
    assert_eq!(samples(&recs)[0].time, 6026386194586962);
}

#[test]
fn weight_struct_uses_the_full_latency_word() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.weight_struct") else { return };
    let (imp, recs) = import(&path);
    let ev = &imp.header.events[0];
    assert_eq!(ev.sample_type & (1 << 24), 1 << 24, "WEIGHT_STRUCT");
    assert_eq!(ev.config1, 64, "ldlat=64 lives in config1");
    assert_eq!(ev.precise_ip, 2);
    let s = samples(&recs);
    assert_eq!(s.len(), 14);
    // From `perf report -D`: "28 13166196585610 ...: 20132/20144: 0xffffffffa4470d46 period:
    // 10009 addr: 0x55ffba5cda08 / ... weight: 225,0x0,0x0 / . data_src: 0x11868100242".
    let first = s[0];
    assert_eq!((first.cpu, first.time, first.pid, first.tid), (28, 13166196585610, 20132, 20144));
    assert_eq!((first.ip, first.period, first.addr), (0xffffffffa4470d46, 10009, Some(0x55ffba5cda08)));
    assert_eq!((first.weight, first.data_src), (Some(225), Some(0x11868100242)));
    assert_eq!(first.cpumode, CpuMode::Kernel);
    assert!(s.iter().all(|x| x.weight.is_some() && x.data_src.is_some() && x.cpu != UNKNOWN_CPU));
    assert_eq!(imp.header.nr_cpus, Some(112));
}

#[test]
fn user_registers_come_in_ascending_bit_order() {
    let Some(path) = corpus_file("hotspot__cpp-recursion.perf.data") else { return };
    let (imp, recs) = import(&path);
    let ev = &imp.header.events[0];
    assert_eq!(ev.regs_user_mask, 0xff0fff, "x86-64 user regs as perf --call-graph dwarf asks");
    assert_eq!(ev.name, "cycles:uppp");
    for s in samples(&recs) {
        assert_eq!(s.regs.len(), 20);
    }
    // Bit 6 is BP and bit 8 is IP on x86: the IP register of a user sample is its IP.
    let user: Vec<_> = samples(&recs).into_iter().filter(|s| s.cpumode == CpuMode::User).collect();
    assert!(!user.is_empty());
    for s in user {
        assert_eq!(s.regs[8], s.ip, "regs[8] is the sample's IP register");
    }
}

#[test]
fn uprobe_sample_is_imported() {
    let Some(path) = corpus_file("perfparser__probe.data.file") else { return };
    let (imp, recs) = import(&path);
    assert_eq!(imp.header.events[0].name, "probe_untitled1:main");
    assert_eq!(imp.header.events[0].attr_type, 2, "tracepoint");
    let s = samples(&recs);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].ip, s[0].pid, s[0].cpu, s[0].time), (0x55d1db028560, 30594, 0, 13732862216676));
}

#[test]
fn side_band_records_are_converted() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.forkexit-3.8") else { return };
    let (_, recs) = import(&path);
    let forks = recs.iter().filter(|r| matches!(r, Record::Fork(_))).count();
    let exits = recs.iter().filter(|r| matches!(r, Record::Exit(_))).count();
    assert!(forks > 0 && exits > 0, "forks {forks}, exits {exits}");
    let comms: Vec<_> = recs.iter().filter_map(|r| if let Record::Comm(c) = r { Some(c) } else { None }).collect();
    assert!(comms.iter().all(|c| !c.comm.is_empty()));
    let mmaps: Vec<_> = recs.iter().filter_map(|r| if let Record::Mmap(m) = r { Some(m) } else { None }).collect();
    assert!(mmaps.iter().any(|m| m.path.starts_with('/') && m.len > 0));
    // MMAP2 records carry protection bits.
    let Some(path) = corpus_file("perf_data_converter__perf.data.lost_samples-4.4") else { return };
    let (_, recs) = import(&path);
    assert!(recs.iter().any(|r| matches!(r, Record::Mmap(m) if m.prot & 4 != 0)), "PROT_EXEC mapping");
}

#[test]
fn throttle_records_are_kept() {
    let Some(path) = corpus_file("perf_data_converter__perf.data.throttle-3.8") else { return };
    let (imp, recs) = import(&path);
    let th: Vec<_> = recs.iter().filter_map(|r| if let Record::Throttle(t) = r { Some(t) } else { None }).collect();
    assert_eq!(th.len(), 132, "perf report -D shows 132 THROTTLE/UNTHROTTLE records");
    assert_eq!(imp.summary.throttles, 132);
    assert!(th.iter().any(|t| t.throttled) && th.iter().any(|t| !t.throttled));
    assert!(th.iter().all(|t| t.cpu != UNKNOWN_CPU && t.event.is_some_and(|e| e < 2)));
    // "2 274059110148370 0x31310 [0x40]: PERF_RECORD_THROTTLE"
    assert!(th.iter().any(|t| t.throttled && t.cpu == 2 && t.time == 274059110148370));
}

#[test]
fn clock_comes_from_use_clockid() {
    let Some(path) = corpus_file("linux-perf-data__sleep.data") else { return };
    let (imp, _) = import(&path);
    // Recorded with `perf record -k monotonic`.
    assert_eq!(imp.header.clock, Some(ClockInfo::Monotonic));
    assert!(imp.header.start_realtime_ns.is_some(), "CLOCK_DATA gives the wall-clock time");
    let Some(path) = corpus_file("perf_data_converter__perf.data.throttle-3.8") else { return };
    let (imp, _) = import(&path);
    assert_eq!(imp.header.clock, Some(ClockInfo::Perf));
}
