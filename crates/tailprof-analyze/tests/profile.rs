//! Flat-profile aggregation: address-space changes over time (exec, fork, re-mmap of the
//! same addresses), kernel samples, thread and binary grouping, event selection, loss.

mod common;

use common::*;
use std::io::Write;
use tailprof_analyze::profile::GroupBy;
use tailprof_analyze::{select_event, KernelSymbols, ProfileOptions, SymbolizerOptions};
use tailprof_format::{Comm, CpuMode, EventDesc, LossKind, Lost, Mmap, Record, Sample, Sink, Task, Throttle, TraceHeader};

const PROG_A: &str = r#"
__attribute__((noinline)) int alpha(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
int main(int argc, char **argv) { (void)argv; return alpha(argc); }
"#;
const PROG_B: &str = r#"
__attribute__((noinline)) int gamma_fn(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 5; }
int main(int argc, char **argv) { (void)argv; return gamma_fn(argc); }
"#;

fn by(g: GroupBy) -> ProfileOptions {
    ProfileOptions { by: g, event: None, ..Default::default() }
}

#[test]
fn exec_and_fork_change_what_an_address_means() {
    let dir = tempfile::tempdir().unwrap();
    let Some(a) = compile("cc", dir.path(), "prog_a", PROG_A, &["-O1", "-g"]) else { return };
    let Some(b) = compile("cc", dir.path(), "prog_b", PROG_B, &["-O1", "-g"]) else { return };
    let base = 0x5555_5555_4000;
    let (alpha, gamma) = (nm(&a, "alpha"), nm(&b, "gamma_fn"));
    // Both functions start at the same address, so the same (pid, ip) key must resolve
    // differently before and after the exec.
    assert_eq!(alpha, gamma, "test layout assumption: same offset in both programs");
    let ip = base + alpha;
    let mut recs = vec![
        Record::Comm(Comm { time: 0, pid: 10, tid: 10, exec: false, comm: "prog_a".into() }),
        Record::Mmap(exec_mmap(10, &a, base, None)),
        Record::Sample(sample(1, 10, ip)),
        // Fork: child 11 shares prog_a's mappings.
        Record::Fork(Task { time: 2, pid: 11, ppid: 10, tid: 11, ptid: 10 }),
        Record::Sample(sample(3, 11, ip)),
        Record::Sample(sample(3, 11, ip)),
        // Child execs prog_b at the same base.
        Record::Comm(Comm { time: 4, pid: 11, tid: 11, exec: true, comm: "prog_b".into() }),
        Record::Sample(sample(5, 11, ip)), // after exec, before its mmap: unmapped
        Record::Mmap(Mmap { time: 6, ..exec_mmap(11, &b, base, None) }),
    ];
    recs.extend((0..4).map(|i| Record::Sample(sample(7 + i, 11, ip))));
    // The parent still runs prog_a.
    recs.push(Record::Sample(sample(20, 10, ip)));
    let p = profile(&recs, &by(GroupBy::Function), SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("alpha".into(), 4), ("gamma_fn".into(), 4), (format!("[unknown] {ip:#x}"), 1)]);
    assert_eq!(p.samples, 9);
    // 2 keys: (10, ip) and (11, ip); locations: alpha, unmapped, gamma.
    assert_eq!(p.stats.unique_keys, 2);
    assert_eq!(p.stats.unique_locations, 3);

    let t = profile(&recs, &by(GroupBy::Thread), SymbolizerOptions::default());
    let mut got: Vec<(String, Option<u32>, u64)> = t.rows.iter().map(|r| (r.name.clone(), r.tid, r.samples)).collect();
    got.sort();
    assert_eq!(got, vec![("prog_a".into(), Some(10), 2), ("prog_a".into(), Some(11), 2), ("prog_b".into(), Some(11), 5)]);
}

#[test]
fn mmap_over_same_range_bumps_generation() {
    // Same pid, same ip, the mapping is replaced by another file: later samples move.
    let recs = vec![
        Record::Mmap(Mmap { pid: 1, start: 0x1000, len: 0x1000, path: "/nonexistent/one".into(), ..Default::default() }),
        Record::Sample(sample(1, 1, 0x1010)),
        Record::Mmap(Mmap { pid: 1, start: 0x1000, len: 0x1000, path: "/nonexistent/two".into(), ..Default::default() }),
        Record::Sample(sample(2, 1, 0x1010)),
        Record::Sample(sample(3, 1, 0x1010)),
    ];
    let p = profile(&recs, &by(GroupBy::Binary), SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("two".into(), 2), ("one".into(), 1)]);
    assert_eq!(p.rows[0].binary.as_deref(), Some("/nonexistent/two"));
}

fn kernel_sample(time: u64, pid: u32, ip: u64) -> Record {
    Record::Sample(Sample { time, pid, tid: pid, ip, period: 1, cpumode: CpuMode::Kernel, ..Default::default() })
}

#[test]
fn kernel_samples() {
    let recs = vec![
        kernel_sample(1, 5, 0xffff_ffff_8100_0110),
        kernel_sample(2, 6, 0xffff_ffff_8100_0120),
        kernel_sample(3, 7, 0xffff_ffff_8100_0210),
        Record::Sample(sample(4, 7, 0x40_0000)),
    ];
    let off = SymbolizerOptions { kernel: KernelSymbols::Off, ..Default::default() };
    let p = profile(&recs, &by(GroupBy::Function), off);
    assert_eq!(rows(&p), vec![("[kernel]".into(), 3), ("[unknown] 0x400000".into(), 1)]);
    assert!(p.kernel_symbols.as_deref().unwrap().contains("not named"));
    // Kernel addresses are shared by all processes: one key per address.
    assert_eq!(p.stats.unique_keys, 4);

    let dir = tempfile::tempdir().unwrap();
    let ks = dir.path().join("kallsyms");
    let mut f = std::fs::File::create(&ks).unwrap();
    writeln!(f, "ffffffff81000000 T _text\nffffffff81000100 T schedule\nffffffff81000200 t tick\nffffffff81000300 T _etext").unwrap();
    let with = SymbolizerOptions { kernel: KernelSymbols::Kallsyms(ks.clone()), ..Default::default() };
    let p = profile(&recs, &by(GroupBy::Function), with.clone());
    assert_eq!(rows(&p), vec![("schedule".into(), 2), ("[unknown] 0x400000".into(), 1), ("tick".into(), 1)]);
    assert_eq!(p.rows[0].binary.as_deref(), Some("[kernel]"));
    assert!(p.kernel_symbols.as_deref().unwrap().contains("kallsyms"));

    // The trace's kernel image mapping says _text was elsewhere: KASLR moved the
    // kernel since, so the kallsyms names would be wrong.
    let kmap = |text: u64| {
        Record::Mmap(Mmap {
            pid: u32::MAX,
            tid: u32::MAX,
            start: text,
            len: u64::MAX - text,
            pgoff: text,
            cpumode: CpuMode::Kernel,
            path: "[kernel.kallsyms]".into(),
            ..Default::default()
        })
    };
    let moved: Vec<Record> = std::iter::once(kmap(0xffff_ffff_9000_0000)).chain(recs.iter().cloned()).collect();
    let p = profile(&moved, &by(GroupBy::Function), with.clone());
    assert_eq!(p.rows[0].name, "[kernel]");
    assert!(p.kernel_symbols.as_deref().unwrap().contains("relocated"), "{:?}", p.kernel_symbols);
    let same: Vec<Record> = std::iter::once(kmap(0xffff_ffff_8100_0000)).chain(recs.iter().cloned()).collect();
    assert_eq!(profile(&same, &by(GroupBy::Function), with).rows[0].name, "schedule");

    let b = profile(&recs, &by(GroupBy::Binary), SymbolizerOptions::default());
    assert_eq!(rows(&b), vec![("[kernel]".into(), 3), ("[unknown]".into(), 1)]);
}

#[test]
fn running_kernel_kallsyms_when_readable() {
    // Uses /proc/kallsyms of this machine when it shows addresses; otherwise checks
    // that kernel samples still fold into `[kernel]` with a reason.
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let found = text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 3 && f[2] == "schedule" && (f[1] == "T" || f[1] == "t")).then(|| u64::from_str_radix(f[0], 16).ok())?
    });
    let ip = found.filter(|&a| a != 0).map_or(0xffff_ffff_8100_0000, |a| a + 1);
    let p = profile(&[kernel_sample(1, 1, ip)], &by(GroupBy::Function), SymbolizerOptions::default());
    if found.is_some_and(|a| a != 0) {
        assert_eq!(p.rows[0].name, "schedule", "{:?}", p.kernel_symbols);
    } else {
        assert_eq!(p.rows[0].name, "[kernel]");
        assert!(p.kernel_symbols.is_some());
    }
}

fn two_event_header() -> TraceHeader {
    TraceHeader {
        events: vec![
            EventDesc { name: "cycles".into(), ..Default::default() },
            EventDesc { name: "instructions".into(), ..Default::default() },
        ],
        ..Default::default()
    }
}

#[test]
fn event_selection_and_totals() {
    let header = two_event_header();
    let s = |event: u16, ip: u64, period: u64| {
        Record::Sample(Sample { event, ip, pid: 1, tid: 1, period, cpumode: CpuMode::User, ..Default::default() })
    };
    let recs = vec![
        s(0, 0x10, 100),
        s(1, 0x10, 7),
        s(1, 0x20, 7),
        s(0, 0x10, 300),
        Record::Lost(Lost { time: 1, cpu: 0, event: None, kind: LossKind::RingFull, count: 5 }),
        Record::Lost(Lost { time: 1, cpu: 0, event: Some(0), kind: LossKind::Samples, count: 2 }),
        Record::Lost(Lost { time: 1, cpu: 0, event: None, kind: LossKind::Markers, count: 9 }),
        Record::Throttle(Throttle { time: 2, cpu: 0, event: Some(0), throttled: true }),
        Record::Throttle(Throttle { time: 3, cpu: 0, event: Some(0), throttled: false }),
    ];
    let p = profile_with_header(&header, &recs, &by(GroupBy::Binary), SymbolizerOptions::default());
    assert_eq!((p.event.as_str(), p.samples, p.period), ("cycles", 2, 400));
    assert_eq!(p.events.iter().map(|e| (e.name.as_str(), e.samples)).collect::<Vec<_>>(), [("cycles", 2), ("instructions", 2)]);
    assert_eq!((p.lost, p.lost_records, p.lost_samples), (7, 5, 2));
    assert_eq!((p.throttled, p.unthrottled), (1, 1));
    assert_eq!(p.rows[0].period, 400);

    let ev = select_event(&header, Some("instructions")).unwrap();
    assert_eq!(ev, 1);
    assert_eq!(select_event(&header, Some("1")).unwrap(), 1);
    assert_eq!(select_event(&header, None).unwrap(), 0);
    let err = select_event(&header, Some("branches")).unwrap_err().to_string();
    assert!(err.contains("branches") && err.contains("cycles, instructions"), "{err}");
    let p = profile_with_header(
        &header,
        &recs,
        &ProfileOptions { by: GroupBy::Function, event: Some(ev), ..Default::default() },
        SymbolizerOptions::default(),
    );
    assert_eq!(p.event, "instructions");
    assert_eq!(rows(&p), vec![("[unknown] 0x10".into(), 1), ("[unknown] 0x20".into(), 1)]);
    assert!((p.rows[0].percent - 50.0).abs() < 1e-9);
    assert!(tailprof_analyze::ProfileBuilder::new(
        &header,
        &ProfileOptions { by: GroupBy::Function, event: Some(2), ..Default::default() }
    )
    .is_err());
}

#[test]
fn threads_named_by_comm_at_sample_time() {
    let recs = vec![
        Record::Comm(Comm { time: 0, pid: 3, tid: 3, exec: false, comm: "server".into() }),
        Record::Sample(sample(1, 3, 0x10)),
        Record::Fork(Task { time: 2, pid: 3, ppid: 3, tid: 4, ptid: 3 }),
        Record::Sample(Sample { tid: 4, ..sample(3, 3, 0x10) }),
        Record::Comm(Comm { time: 4, pid: 3, tid: 4, exec: false, comm: "worker".into() }),
        Record::Sample(Sample { tid: 4, ..sample(5, 3, 0x10) }),
        Record::Sample(Sample { tid: 4, ..sample(6, 3, 0x10) }),
        Record::Sample(sample(7, 0, 0x10)),
        Record::Sample(sample(8, 99, 0x10)),
    ];
    let p = profile(&recs, &by(GroupBy::Thread), SymbolizerOptions::default());
    let got: Vec<(String, Option<u32>, Option<u32>, u64)> = p.rows.iter().map(|r| (r.name.clone(), r.pid, r.tid, r.samples)).collect();
    assert_eq!(
        got,
        vec![
            ("worker".into(), Some(3), Some(4), 2),
            (":99".into(), Some(99), Some(99), 1),
            ("server".into(), Some(3), Some(3), 1),
            ("server".into(), Some(3), Some(4), 1),
            ("swapper".into(), Some(0), Some(0), 1),
        ]
    );
}

#[test]
fn through_the_trace_format() {
    // Write a real trace (records + build-id table), read it back, profile and info.
    use tailprof_format::{BuildIdEntry, TraceReader, TraceWriter};
    let header = two_event_header();
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.write(&Record::Comm(Comm { time: 0, pid: 1, tid: 1, exec: false, comm: "app".into() })).unwrap();
    w.write(&Record::Mmap(Mmap {
        pid: 1,
        tid: 1,
        start: 0x1000,
        len: 0x1000,
        cpumode: CpuMode::User,
        path: "/nonexistent/app".into(),
        ..Default::default()
    }))
    .unwrap();
    w.add_build_id(BuildIdEntry { path: "/nonexistent/app".into(), build_id: vec![0xab; 20] }).unwrap();
    for i in 0..1000u64 {
        let (event, ip) = if i % 4 == 0 { (1, 0x1100) } else { (0, 0x1000 + (i % 3) * 0x10) };
        w.write_sample(&Sample { time: 100 + i, event, ip, pid: 1, tid: 1, period: 10, cpumode: CpuMode::User, ..Default::default() })
            .unwrap();
    }
    w.write(&Record::Lost(Lost { time: 2000, cpu: 0, event: None, kind: LossKind::RingFull, count: 3 })).unwrap();
    let (bytes, _) = w.finish_into_inner(Some(5_000)).unwrap();

    let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
    let mut sym = tailprof_analyze::Symbolizer::default();
    let p = tailprof_analyze::flat_profile(&mut r, &by(GroupBy::Function), &mut sym).unwrap();
    assert_eq!((p.samples, p.lost), (750, 3));
    assert_eq!(p.events[1].samples, 250);
    assert_eq!(p.rows.len(), 3);
    assert_eq!(p.rows.iter().map(|r| r.samples).sum::<u64>(), 750);
    assert!(p.rows[0].name.starts_with("[unknown] app+0x"));
    assert!(p.read.as_ref().unwrap().complete);
    assert_eq!(p.unknown[0].samples, 750);

    let info = tailprof_analyze::trace_info(&mut r, true).unwrap();
    assert_eq!((info.samples, info.lost, info.duration_ns), (1000, 3, Some(5_000)));
    assert_eq!(info.samples_per_event, Some(vec![750, 250]));
    assert_eq!(info.build_ids, 1);
    assert_eq!(info.bytes, bytes.len() as u64);
    assert_eq!((info.processes, info.threads), (Some(1), Some(1)));

    // A cut-off copy still profiles; the summary says what was lost.
    let cut = bytes[..bytes.len() - 40].to_vec();
    let mut r = TraceReader::from_bytes(cut).unwrap();
    let p = tailprof_analyze::flat_profile(&mut r, &by(GroupBy::Binary), &mut sym).unwrap();
    let read = p.read.unwrap();
    assert!(read.truncated_bytes > 0 || read.damaged_chunks > 0 || !read.complete, "{read:?}");
}

#[test]
fn many_samples_few_keys() {
    // The aggregation keeps one slot per unique (pid, ip), however many samples.
    let mut b = tailprof_analyze::ProfileBuilder::new(&TraceHeader::default(), &by(GroupBy::Function)).unwrap();
    b.handle_mmap(&Mmap { pid: 1, start: 0x1000, len: 0x1000, path: "/nonexistent/x".into(), ..Default::default() });
    let mut s = sample(0, 1, 0);
    for i in 0..200_000u64 {
        s.time = i;
        s.ip = 0x1000 + (i % 64) * 4;
        b.handle_sample(&s);
    }
    let p = b.finish(&mut tailprof_analyze::Symbolizer::default());
    assert_eq!(p.samples, 200_000);
    assert_eq!(p.stats.unique_keys, 64);
    assert_eq!(p.rows.len(), 64);
    assert_eq!(p.rows.iter().map(|r| r.samples).sum::<u64>(), 200_000);
}
