//! Imports checked against the corpus's own oracles: the `perf annotate` per-IP counts
//! of the Skylake-SP PEBS recording and the decoded quipper texts of three recordings.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use tailprof_format::{ClockInfo, LossKind, Record};

#[test]
fn xeon6126_per_ip_counts_match_perf_annotate_exactly() {
    let (Some(data), Some(report)) = (corpus_file("ubench__xeon6126_perf-dla1_dat-x"), corpus_file("ubench__xeon6126_perf-dla1_rpt-x.txt"))
    else {
        return;
    };
    let (imp, recs) = import(&data);
    assert_eq!(imp.summary.samples, 10014);
    assert_eq!(imp.header.events.len(), 1);
    let ev = &imp.header.events[0];
    assert_eq!(ev.name, "mem_inst_retired.all_loads:upp");
    assert_eq!(ev.sample_period, Some(13973));
    assert_eq!(ev.precise_ip, 2);
    assert!(ev.exclude_kernel && !ev.exclude_user);
    assert_eq!(ev.sample_type, 0x7); // IP | TID | TIME

    let counts = ip_counts(&recs);
    // Lines look like "    2944 :	  4005c1:       mov    (%rax),%eax".
    let text = std::fs::read_to_string(report).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let Some((count, rest)) = line.split_once(" :") else { continue };
        let Ok(count) = count.trim().parse::<u64>() else { continue };
        let Some((addr, _)) = rest.trim().split_once(':') else { continue };
        let ip = u64::from_str_radix(addr.trim(), 16).unwrap();
        assert_eq!(counts.get(&ip).copied().unwrap_or(0), count, "samples at {ip:#x}");
        checked += 1;
    }
    assert_eq!(checked, 40, "every instruction line of the annotate report");
    assert_eq!(counts[&0x4005c1], 2944);
    assert_eq!(counts[&0x40057f], 2501);
    // Every sample is a user-mode sample of one process at the fixed period.
    for s in samples(&recs) {
        assert_eq!(s.period, 13973);
        assert_eq!(s.cpumode, tailprof_format::CpuMode::User);
        assert_eq!(s.cpu, tailprof_import::UNKNOWN_CPU, "the recording has no CPU field");
    }
}

/// `(time, ip, pid, tid, event index, period)` of every sample in a quipper text.
fn oracle_samples(root: &Msg) -> Vec<(u64, u64, u32, u32, u16, u64)> {
    let mut id_to_event = HashMap::new();
    for (i, fa) in root.children("file_attrs").iter().enumerate() {
        for id in fa.all("ids") {
            id_to_event.insert(id.parse::<u64>().unwrap(), i as u16);
        }
    }
    let mut v: Vec<_> = root
        .children("events")
        .iter()
        .filter_map(|e| e.child("sample_event"))
        .map(|s| {
            let event = s.u64("id").map(|id| id_to_event[&id]).unwrap_or(0);
            (
                s.u64("sample_time_ns").unwrap(),
                s.u64("ip").unwrap(),
                s.u64("pid").unwrap() as u32,
                s.u64("tid").unwrap() as u32,
                event,
                s.u64("period").unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn our_samples(recs: &[Record]) -> Vec<(u64, u64, u32, u32, u16, u64)> {
    let mut v: Vec<_> = samples(recs).iter().map(|s| (s.time, s.ip, s.pid, s.tid, s.event, s.period)).collect();
    v.sort();
    v
}

fn load_oracle(name: &str) -> Option<Msg> {
    let dir = corpus()?.join("oracles");
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    Some(parse_pb_text(&text))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Header facts and build-ids against the oracle's metadata.
fn check_metadata(name: &str, imp: &tailprof_import::Imported, root: &Msg) {
    let sm = root.child("string_metadata").unwrap();
    let val = |k: &str| sm.child(k).and_then(|m| m.get("value")).map(str::to_string);
    assert_eq!(imp.header.hostname, val("hostname"), "{name}");
    assert_eq!(imp.header.os_release, val("kernel_version"), "{name}");
    assert_eq!(imp.header.arch, val("architecture"), "{name}");
    assert_eq!(imp.header.cpu_desc, val("cpu_description"), "{name}");
    assert_eq!(imp.header.extra.get("perf.cpuid").cloned(), val("cpu_id"), "{name}");
    assert_eq!(imp.header.extra.get("perf.version").cloned(), val("perf_version"), "{name}");
    let tokens: Vec<String> = sm.children("perf_command_line_token").iter().map(|t| t.get("value").unwrap().to_string()).collect();
    assert_eq!(imp.header.cmdline, tokens, "{name}");
    // uint32_metadata type 7 = NRCPUS: [available, online]
    let nr = root.children("uint32_metadata").into_iter().find(|m| m.get("type") == Some("7")).unwrap();
    assert_eq!(imp.header.nr_cpus, Some(nr.all("data")[1].parse().unwrap()), "{name}");
    // Event names, in attr order.
    let names: Vec<&str> = root.children("event_types").iter().map(|t| t.get("name").unwrap()).collect();
    let ours: Vec<&str> = imp.header.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(ours, names, "{name}");
    // Build-ids (hex, by path).
    let want: BTreeMap<String, String> = root
        .children("build_ids")
        .iter()
        .map(|b| {
            let mut id = unescape_bytes(b.get("build_id_hash").unwrap());
            id.truncate(20);
            (b.get("filename").unwrap().to_string(), hex(&id))
        })
        .collect();
    let got: BTreeMap<String, String> = imp.build_ids.iter().map(|b| (b.path.clone(), hex(&b.build_id))).collect();
    assert!(!want.is_empty(), "{name}: the oracle lists build-ids");
    assert_eq!(got, want, "{name}: build-ids");
}

#[test]
fn lost_samples_recording_matches_the_quipper_oracle() {
    let (Some(path), Some(root)) =
        (corpus_file("perf_data_converter__perf.data.lost_samples-4.4"), load_oracle("perf.data.lost_samples-4.4.pb_text"))
    else {
        return;
    };
    let (imp, recs) = import(&path);
    assert_eq!(our_samples(&recs), oracle_samples(&root));
    check_metadata("lost_samples-4.4", &imp, &root);

    // The three events of the group, as perf described them.
    let attrs = root.children("file_attrs");
    assert_eq!(imp.header.events.len(), attrs.len());
    for (ev, fa) in imp.header.events.iter().zip(&attrs) {
        let a = fa.child("attr").unwrap();
        assert_eq!(u64::from(ev.attr_type), a.u64("type").unwrap());
        assert_eq!(ev.config, a.u64("config").unwrap());
        assert_eq!(ev.sample_period, a.u64("sample_period"));
        assert_eq!(ev.sample_type, a.u64("sample_type").unwrap());
        assert_eq!(u64::from(ev.precise_ip), a.u64("precise_ip").unwrap());
        assert_eq!(ev.exclude_kernel, a.get("exclude_kernel") == Some("true"));
    }
    assert_eq!(imp.header.clock, Some(ClockInfo::Perf));
    assert_eq!(imp.header.hostname.as_deref(), Some("localhost"));
    assert_eq!(imp.header.cmdline.first().map(String::as_str), Some("/usr/bin/perf"));

    // The two PERF_RECORD_LOST_SAMPLES: count, time, and the event their id belongs to.
    let mut id_to_event = HashMap::new();
    for (i, fa) in attrs.iter().enumerate() {
        for id in fa.all("ids") {
            id_to_event.insert(id.parse::<u64>().unwrap(), i as u16);
        }
    }
    let want: Vec<(u64, u64, Option<u16>)> = root
        .children("events")
        .iter()
        .filter_map(|e| e.child("lost_samples_event").map(|l| (e, l)))
        .map(|(e, l)| {
            let id = l.child("sample_info").unwrap().u64("id").unwrap();
            (e.u64("timestamp").unwrap(), l.u64("num_lost").unwrap(), Some(id_to_event[&id]))
        })
        .collect();
    let got: Vec<(u64, u64, Option<u16>)> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Lost(l) if l.kind == LossKind::Samples => Some((l.time, l.count, l.event)),
            _ => None,
        })
        .collect();
    assert_eq!(want.len(), 2);
    assert_eq!(got, want);
    assert_eq!(imp.summary.lost_samples, 2);
    assert_eq!(imp.summary.lost_records, 0);

    // Side-band as counted by quipper.
    let stats = root.child("stats").unwrap();
    let count = |f: fn(&Record) -> bool| recs.iter().filter(|r| f(r)).count() as u64;
    assert_eq!(count(|r| matches!(r, Record::Mmap(_))), stats.u64("num_mmap_events").unwrap());
    assert_eq!(count(|r| matches!(r, Record::Exit(_))), stats.u64("num_exit_events").unwrap());
    assert_eq!(count(|r| matches!(r, Record::Fork(_))), stats.u64("num_fork_events").unwrap());
}

#[test]
fn hybrid_recording_matches_the_quipper_oracle() {
    let (Some(path), Some(root)) =
        (corpus_file("perf_data_converter__perf.data.hybrid_topology"), load_oracle("perf.data.hybrid_topology.pb_text"))
    else {
        return;
    };
    let (imp, recs) = import(&path);
    assert_eq!(our_samples(&recs), oracle_samples(&root));
    check_metadata("hybrid_topology", &imp, &root);
    // The PMU type sits in the upper half of config for hybrid hardware events.
    let attrs = root.children("file_attrs");
    for (ev, fa) in imp.header.events.iter().zip(&attrs) {
        let a = fa.child("attr").unwrap();
        assert_eq!(ev.config, a.u64("config").unwrap(), "{}", ev.name);
        assert_eq!(ev.sample_freq, a.u64("sample_period"), "{}: frequency mode", ev.name);
        assert_eq!(ev.sample_period, None);
    }
    assert_eq!(imp.header.events[0].config >> 32, 4);
}

#[test]
fn branch_stack_recording_matches_the_quipper_oracle() {
    let (Some(path), Some(root)) =
        (corpus_file("perf_data_converter__perf.data.branch-4.14"), load_oracle("perf.data.branch-4.14.pb_text"))
    else {
        return;
    };
    let (imp, recs) = import(&path);
    assert_eq!(imp.header.events[0].sample_type & (1 << 11), 1 << 11, "has BRANCH_STACK");
    assert_eq!(our_samples(&recs), oracle_samples(&root));
    check_metadata("branch-4.14", &imp, &root);
}
