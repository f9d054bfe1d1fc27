//! The rules of the one address-space model (module docs), tested once here.

use super::*;

fn mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str) -> Mmap {
    Mmap { pid, tid: pid, start, len, pgoff, cpumode: CpuMode::User, path: path.into(), ..Default::default() }
}

fn rec(m: Mmap) -> Record {
    Record::Mmap(m)
}

fn fork(ppid: u32, pid: u32) -> Record {
    Record::Fork(Task { pid, ppid, tid: pid, ptid: ppid, time: 0 })
}

fn exit(pid: u32, tid: u32) -> Record {
    Record::Exit(Task { pid, ppid: pid, tid, ptid: tid, time: 0 })
}

fn exec(pid: u32) -> Record {
    Record::Comm(Comm { pid, tid: pid, exec: true, comm: "x".into(), time: 0 })
}

fn path_at(a: &AddressSpaces, pid: u32, ip: u64) -> Option<String> {
    a.find(pid, ip).map(|m| m.path.to_string())
}

#[test]
fn mmap_goes_to_the_process_and_resolves_file_offsets() {
    let mut a = AddressSpaces::<()>::default();
    assert!(a.apply(&rec(mmap(10, 0x40_0000, 0x1000, 0x2000, "/bin/x"))));
    let m = a.find(10, 0x40_0123).unwrap();
    assert_eq!((&*m.path, m.file_offset(0x40_0123)), ("/bin/x", 0x2123));
    assert!(a.find(10, 0x40_1000).is_none(), "end is exclusive");
    assert!(a.find(11, 0x40_0123).is_none());
    // A thread's mmap lands in its process's space.
    a.apply(&rec(Mmap { tid: 12, ..mmap(10, 0x50_0000, 0x1000, 0, "/lib/y.so") }));
    assert_eq!(path_at(&a, 10, 0x50_0010).as_deref(), Some("/lib/y.so"));
    assert!(a.find(12, 0x50_0010).is_none());
    // Empty mappings do not count.
    assert!(!a.apply(&rec(mmap(10, 0x60_0000, 0, 0, "/lib/z.so"))));
    assert_eq!(a.mappings(10).len(), 2);
}

#[test]
fn overlapping_mmap_replaces_the_overlapped_parts() {
    let mut a = AddressSpaces::<()>::default();
    a.apply(&rec(mmap(1, 0x1000, 0x3000, 0, "/a")));
    let g0 = a.generation(1);
    a.apply(&rec(mmap(1, 0x2000, 0x1000, 0, "/b")));
    assert_ne!(a.generation(1), g0);
    let ms: Vec<_> = a.mappings(1).iter().map(|m| (m.start, m.end, m.pgoff, m.path.to_string())).collect();
    assert_eq!(ms, [(0x1000, 0x2000, 0, "/a".into()), (0x2000, 0x3000, 0, "/b".into()), (0x3000, 0x4000, 0x2000, "/a".into())]);
    assert_eq!(a.find(1, 0x3800).unwrap().file_offset(0x3800), 0x2800);
    // Covering several replaces them all.
    a.apply(&rec(mmap(1, 0x0, 0x10000, 0, "/c")));
    assert_eq!(a.mappings(1).len(), 1);
}

#[test]
fn non_code_mappings_are_not_kept_but_replace_what_they_overlap() {
    let mut a = AddressSpaces::<()>::default();
    a.apply(&rec(Mmap { prot: 5, ..mmap(1, 0x1000, 0x2000, 0, "/bin/x") }));
    a.apply(&rec(Mmap { prot: 3, ..mmap(1, 0x8000, 0x1000, 0, "/data") }));
    assert!(a.find(1, 0x8000).is_none());
    assert_eq!(a.counters().mappings_not_code, 1);
    // A data mapping over code (mmap MAP_FIXED) unmaps that code.
    a.apply(&rec(Mmap { prot: 3, ..mmap(1, 0x2000, 0x1000, 0, "[heap]") }));
    assert!(a.find(1, 0x2000).is_none());
    assert_eq!(path_at(&a, 1, 0x1000).as_deref(), Some("/bin/x"));
    // Unknown protection (MMAP, prot 0) may hold code.
    a.apply(&rec(mmap(1, 0x9000, 0x1000, 0, "//anon")));
    assert!(a.find(1, 0x9000).is_some());
}

#[test]
fn exec_empties_fork_shares_threads_change_nothing() {
    let mut a = AddressSpaces::<()>::default();
    a.apply(&rec(mmap(5, 0x1000, 0x1000, 0, "/bin/sh")));
    assert!(a.apply(&fork(5, 6)));
    assert_eq!(path_at(&a, 6, 0x1100).as_deref(), Some("/bin/sh"));
    let bytes = a.bytes();
    assert_eq!(a.mapping_count(), 2);
    // A shared list is counted once.
    assert_eq!(bytes, a.mappings(5).iter().map(Mapping::cost).sum::<usize>());
    // A new thread: nothing changes.
    let g = a.generation(6);
    assert!(!a.apply(&Record::Fork(Task { pid: 6, ppid: 6, tid: 7, ptid: 6, time: 0 })));
    assert_eq!(a.generation(6), g);
    // The child changes its list: copied, counted twice now; the parent keeps its own.
    a.apply(&rec(mmap(6, 0x1800, 0x100, 0, "/lib/c")));
    assert_eq!(path_at(&a, 5, 0x1800).as_deref(), Some("/bin/sh"));
    assert!(a.bytes() > bytes);
    assert!(a.apply(&exec(6)));
    assert!(a.find(6, 0x1100).is_none());
    assert!(!a.knows(6));
    assert_eq!(path_at(&a, 5, 0x1100).as_deref(), Some("/bin/sh"));
    // A fork from an unknown parent: an empty space.
    a.apply(&fork(77, 78));
    assert!(!a.knows(78));
    assert_ne!(a.generation(78), 0);
    // Non-exec COMM changes nothing.
    assert!(!a.apply(&Record::Comm(Comm { pid: 5, tid: 5, exec: false, comm: "y".into(), time: 0 })));
}

#[test]
fn exited_processes_resolve_until_later_exits_forget_them() {
    let mut a = AddressSpaces::<()>::new(SpaceLimits { max_exited: 2, ..SpaceLimits::default() });
    for pid in 1..=4 {
        a.apply(&rec(mmap(pid, 0x1000, 0x1000, 0, "/bin/x")));
    }
    // A thread's exit changes nothing.
    a.apply(&exit(1, 9));
    assert!(!a.exited(1));
    a.apply(&exit(1, 1));
    assert!(a.exited(1));
    assert!(a.find(1, 0x1000).is_some(), "late samples of an exited process still resolve");
    a.apply(&exit(2, 2));
    assert_eq!(a.process_count(), 4);
    a.apply(&exit(3, 3));
    assert_eq!(a.process_count(), 3, "the oldest exited process is forgotten");
    assert!(a.find(1, 0x1000).is_none());
    assert_eq!(a.counters().processes_exited, 1);
    // A mapping of an exited process revives it (its other threads live on).
    a.apply(&rec(mmap(2, 0x3000, 0x1000, 0, "/lib/l")));
    assert!(!a.exited(2));
    a.apply(&exit(4, 4));
    a.apply(&exit(4, 4));
    assert!(a.find(2, 0x1000).is_some(), "revived, not forgotten");
    assert_eq!(a.counters().processes_exited, 2, "3 went");
    // A reused pid (FORK) starts from its parent's mappings.
    a.apply(&rec(mmap(20, 0x7000, 0x1000, 0, "/bin/y")));
    a.apply(&fork(20, 4));
    assert!(!a.exited(4));
    assert!(a.find(4, 0x1000).is_none());
    assert!(a.find(4, 0x7000).is_some());
    assert_eq!(a.bytes(), list_cost(a.mappings(2)) + list_cost(a.mappings(20)));
}

#[test]
fn kernel_mappings_go_to_the_kernel_space() {
    let mut a = AddressSpaces::<()>::default();
    a.apply(&rec(Mmap {
        pid: KERNEL_PID,
        start: 0xffff_ffff_c000_0000,
        len: 0x1000,
        cpumode: CpuMode::Kernel,
        path: "/lib/modules/x/ext4.ko".into(),
        ..Default::default()
    }));
    a.apply(&rec(Mmap {
        pid: KERNEL_PID,
        start: 0xffff_ffff_8100_0000,
        len: u64::MAX - 0xffff_ffff_8100_0000,
        pgoff: 0xffff_ffff_8100_0000,
        cpumode: CpuMode::Kernel,
        path: "[kernel.kallsyms]_text".into(),
        ..Default::default()
    }));
    assert_eq!(a.kernel_text(), Some(0xffff_ffff_8100_0000));
    assert_eq!(a.mappings(KERNEL_PID).len(), 1, "the image itself is not kept");
    assert!(a.find(KERNEL_PID, 0xffff_ffff_c000_0010).is_some());
    assert_eq!(a.process_count(), 0);
    assert!(AddressSpaces::<()>::is_kernel_sample(CpuMode::Unknown, 0xffff_ffff_8100_0000));
    assert!(!AddressSpaces::<()>::is_kernel_sample(CpuMode::User, 0xffff_ffff_8100_0000));
}

#[test]
fn per_process_bound_evicts_the_oldest_and_counts() {
    let mut a = AddressSpaces::<()>::new(SpaceLimits { max_mappings: 32, ..SpaceLimits::default() });
    for i in 0..100u64 {
        a.apply(&rec(mmap(1, 0x10_0000 + i * 0x1000, 0x1000, 0, "/x")));
    }
    assert!(a.mappings(1).len() <= 32);
    assert!(a.find(1, 0x10_0000 + 99 * 0x1000).is_some(), "the newest stays");
    assert!(a.find(1, 0x10_0000).is_none(), "the oldest went");
    assert_eq!(a.counters().mappings_evicted, 100 - a.mappings(1).len() as u64);
    assert!(a.mappings(1).windows(2).all(|w| w[0].end <= w[1].start), "sorted, disjoint");
}

#[test]
fn process_bound_evicts_exited_first_then_least_recently_used() {
    let mut a = AddressSpaces::<()>::new(SpaceLimits { max_processes: 16, max_exited: 100, ..SpaceLimits::default() });
    for pid in 1..=16 {
        a.apply(&rec(mmap(pid, 0x1000, 0x1000, 0, "/x")));
    }
    a.apply(&exit(3, 3));
    a.touch(1);
    a.apply(&rec(mmap(17, 0x1000, 0x1000, 0, "/x")));
    assert!(a.find(3, 0x1000).is_none(), "the exited process went first");
    assert_eq!(a.counters().processes_evicted, 0);
    assert_eq!(a.process_count(), 16);
    a.apply(&rec(mmap(18, 0x1000, 0x1000, 0, "/x")));
    assert!(a.process_count() <= 16);
    assert!(a.counters().processes_evicted >= 1);
    assert!(a.find(1, 0x1000).is_some(), "recently used");
    assert!(a.find(2, 0x1000).is_none(), "least recently used");
    assert!(a.find(18, 0x1000).is_some());
}

#[test]
fn byte_bound_holds_under_mmap_churn_and_forks() {
    let max = 64 << 10;
    let mut a = AddressSpaces::<()>::new(SpaceLimits { max_bytes: max, ..SpaceLimits::default() });
    let long = format!("/{}", "p".repeat(3800));
    a.apply(&rec(mmap(1, 0x1000, 0x1000, 0, "/bin/x")));
    for i in 0..200u64 {
        a.apply(&rec(mmap(2, 0x10_0000 + i * 0x2000, 0x1000, 0, &long)));
        if i % 20 == 0 {
            a.apply(&fork(2, 1000 + i as u32));
        }
        assert!(a.bytes() <= max + 2 * (long.len() + 256), "{}", a.bytes());
    }
    assert!(a.counters().mappings_evicted > 0);
    // Forked children changing their shared list's data one by one: each copy counts,
    // and the bound holds (the agent's finding 6).
    for c in 0..50u32 {
        a.apply(&fork(2, 5000 + c));
        let ip = a.mappings(2).last().map_or(0, |m| m.start);
        a.find_mut(5000 + c, ip);
        assert!(a.bytes() <= max + 2 * (long.len() + 256), "{}", a.bytes());
    }
    // Accounting stays exact: what is held is what is counted.
    let mut seen = std::collections::HashSet::new();
    let held: usize = a.spaces.values().filter(|s| seen.insert(Arc::as_ptr(&s.maps))).map(|s| list_cost(&s.maps)).sum();
    assert_eq!(held, a.bytes());
}

#[test]
fn data_follows_split_parts_and_find_mut_copies_shared_lists() {
    let mut a = AddressSpaces::<u32>::default();
    a.mmap(&mmap(1, 0x1000, 0x3000, 0x100, "/a"), Some((8, 9))).unwrap().data = 7;
    a.mmap(&mmap(1, 0x2000, 0x1000, 0, "/b"), None).unwrap().data = 8;
    let d: Vec<_> = a.mappings(1).iter().map(|m| (m.data, m.file)).collect();
    assert_eq!(d, [(7, Some((8, 9))), (8, None), (7, Some((8, 9)))]);
    a.apply(&fork(1, 2));
    let g = a.generation(2);
    a.find_mut(2, 0x1000).unwrap().data = 9;
    assert_eq!(a.find(1, 0x1000).unwrap().data, 7, "the parent's list is not changed");
    assert_eq!(a.find(2, 0x1000).unwrap().data, 9);
    assert_eq!(a.generation(2), g, "data is not an address-space change");
    assert!(a.forget_mapping(2, 0x1000));
    assert!(a.find(2, 0x1000).is_none());
    assert_ne!(a.generation(2), g);
    assert!(!a.forget_mapping(2, 0x1000));
    // A (0, 0) file identity means unknown; an empty build-id none.
    let m = a.mmap(&Mmap { build_id: Some(vec![]), ..mmap(3, 0x1000, 0x1000, 0, "/c") }, Some((0, 0))).unwrap();
    assert_eq!((m.file, m.build_id.is_none()), (None, true));
}

/// Random record streams: the lists stay sorted and disjoint, the bounds hold and the byte
/// count is exact (a deterministic xorshift stream, no dependency).
#[test]
fn random_streams_keep_the_invariants() {
    let limits = SpaceLimits { max_processes: 8, max_mappings: 16, max_bytes: 8 << 10, max_exited: 3 };
    let mut a = AddressSpaces::<u8>::new(limits);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let r = next();
        let pid = (r % 12) as u32 + 1;
        let start = (next() % 64) * 0x1000;
        let len = (next() % 8) * 0x1000;
        let rec = match r >> 60 {
            0..=9 => Record::Mmap(Mmap { prot: if r & 1 == 0 { 5 } else { 3 }, ..mmap(pid, start, len, start, "/f") }),
            10 | 11 => fork(pid, (next() % 12) as u32 + 1),
            12 => exec(pid),
            _ => exit(pid, pid),
        };
        a.apply(&rec);
        assert!(a.process_count() <= limits.max_processes);
        for s in a.spaces.values() {
            assert!(s.maps.len() <= limits.max_mappings);
            assert!(s.maps.windows(2).all(|w| w[0].end <= w[1].start));
            assert!(s.maps.iter().all(|m| m.start < m.end && may_hold_code(m.prot)));
        }
        assert!(a.bytes() <= limits.max_bytes + 4 * std::mem::size_of::<Mapping<u8>>());
        let mut seen = std::collections::HashSet::new();
        let held: usize = a.spaces.values().filter(|s| seen.insert(Arc::as_ptr(&s.maps))).map(|s| list_cost(&s.maps)).sum();
        assert_eq!(held, a.bytes());
    }
}
