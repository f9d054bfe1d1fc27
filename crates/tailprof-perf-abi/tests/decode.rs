//! The decoder against hand-written records in the kernel's order, round trips through
//! the encoder for every field in both byte orders, random layouts, and hostile input.

use tailprof_perf_abi::encode::{BranchData, ReadData, RegsData, SampleData, StackData};
use tailprof_perf_abi::{
    branch_sample_type as bst, context, misc, read_format as rf, record_type, regs_abi, sample_type as st, BranchEntry, DecodeError,
    Endian, ReadValue, RecordHeader, SampleLayout, SwitchDirection, VariableSizes, Weight, HEADER_LEN,
};

const ENDIANS: [Endian; 2] = [Endian::Little, Endian::Big];

/// Writes words and half-words in one byte order, by hand (independent of the encoder).
struct W(Vec<u8>, Endian);
impl W {
    fn w(mut self, xs: &[u64]) -> W {
        for &x in xs {
            self.1.put_u64(&mut self.0, x);
        }
        self
    }
    fn u32s(mut self, a: u32, b: u32) -> W {
        self.1.put_u32(&mut self.0, a);
        self.1.put_u32(&mut self.0, b);
        self
    }
    fn bytes(mut self, b: &[u8]) -> W {
        self.0.extend_from_slice(b);
        self
    }
    fn u32(mut self, a: u32) -> W {
        self.1.put_u32(&mut self.0, a);
        self
    }
    fn u16(mut self, a: u16) -> W {
        self.1.put_u16(&mut self.0, a);
        self
    }
}

/// Every field at once, written word by word in the order of perf_event_open(2).
#[test]
fn every_field_by_hand_in_kernel_order() {
    let layout = SampleLayout::new(st::ALL & !st::WEIGHT)
        .with_read_format(rf::GROUP | rf::TOTAL_TIME_ENABLED | rf::TOTAL_TIME_RUNNING | rf::ID | rf::LOST)
        .with_branch_sample_type(bst::HW_INDEX | bst::COUNTERS)
        .with_regs_user(0b1000_0101)
        .with_regs_intr(0b11);
    for e in ENDIANS {
        let body = W(Vec::new(), e)
            .w(&[0x1d, 0xffff_ffff_8100_0000]) // identifier, ip
            .u32s(100, 101) // pid, tid
            .w(&[5_000_000, 0xdead_beef, 0x1d, 0x1e]) // time, addr, id, stream_id
            .u32s(3, 0) // cpu, res
            .w(&[4000]) // period
            .w(&[2, 50, 40, 7, 0x1d, 1, 8, 0x1e, 0]) // read: nr, enabled, running, {value, id, lost} x 2
            .w(&[3, context::KERNEL, 0xffff_ffff_8100_0000, 0x4000]) // callchain
            .u32(12)
            .bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]) // raw: u32 + 12 = 16 bytes
            .w(&[1, 9, 0x10, 0x20, 0x3]) // branch: nr, hw_idx, {from, to, flags}
            .w(&[77]) // branch counters
            .w(&[regs_abi::ABI_64, 10, 11, 12]) // regs_user: abi, 3 regs
            .w(&[16])
            .bytes(&[0xaa; 16])
            .w(&[12]) // stack_user: size, data, dyn_size
            .u32(250)
            .u16(17)
            .u16(3) // weight struct
            .w(&[0x6800_0142, 0x8]) // data_src, transaction
            .w(&[regs_abi::ABI_64, 20, 21]) // regs_intr
            .w(&[0x1234_5000, 0x77, 4096, 2 << 20]) // phys_addr, cgroup, data/code page size
            .w(&[8])
            .bytes(&[0xbb; 8]) // aux
            .0;
        let s = layout.decode(&body, e).unwrap();
        assert_eq!(s.identifier(), Some(0x1d));
        assert_eq!(s.ip(), Some(0xffff_ffff_8100_0000));
        assert_eq!((s.pid(), s.tid()), (Some(100), Some(101)));
        assert_eq!((s.time(), s.addr(), s.id(), s.stream_id()), (Some(5_000_000), Some(0xdead_beef), Some(0x1d), Some(0x1e)));
        assert_eq!((s.cpu(), s.period()), (Some(3), Some(4000)));
        let r = s.read().unwrap();
        assert!(r.is_group());
        assert_eq!((r.time_enabled(), r.time_running(), r.len()), (Some(50), Some(40), 2));
        assert_eq!(r.get(0), Some(ReadValue { value: 7, id: Some(0x1d), lost: Some(1) }));
        assert_eq!(r.get(1), Some(ReadValue { value: 8, id: Some(0x1e), lost: Some(0) }));
        let cc = s.callchain().unwrap();
        assert_eq!(cc.to_vec(), [context::KERNEL, 0xffff_ffff_8100_0000, 0x4000]);
        assert!(context::is_marker(cc.get(0).unwrap()) && !context::is_marker(cc.get(1).unwrap()));
        assert_eq!(s.raw().unwrap(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let b = s.branch_stack().unwrap();
        assert_eq!((b.hw_index, b.len()), (Some(9), 1));
        assert_eq!(b.get(0), Some(BranchEntry { from: 0x10, to: 0x20, flags: 3 }));
        assert_eq!(b.counters.unwrap().to_vec(), [77]);
        let ru = s.regs_user().unwrap();
        assert_eq!((ru.abi, ru.values.to_vec()), (regs_abi::ABI_64, vec![10, 11, 12]));
        assert_eq!((ru.get(0), ru.get(2), ru.get(7), ru.get(1), ru.get(64)), (Some(10), Some(11), Some(12), None, None));
        let su = s.stack_user().unwrap();
        assert_eq!((su.data.len(), su.dyn_size, su.valid().len()), (16, 12, 12));
        assert_eq!(s.weight(), Some(Weight::Struct { var1_dw: 250, var2_w: 17, var3_w: 3 }));
        assert_eq!(s.weight().unwrap().value(), 250);
        assert_eq!((s.data_src(), s.transaction()), (Some(0x6800_0142), Some(8)));
        assert_eq!(s.regs_intr().unwrap().values.to_vec(), [20, 21]);
        assert_eq!((s.phys_addr(), s.cgroup()), (Some(0x1234_5000), Some(0x77)));
        assert_eq!((s.data_page_size(), s.code_page_size()), (Some(4096), Some(2 << 20)));
        assert_eq!(s.aux().unwrap(), &[0xbb; 8]);
        assert!(s.rest().is_empty());
        // The size estimate agrees with the record.
        let var = VariableSizes {
            read_group_members: 2,
            callchain_entries: 3,
            raw_bytes: 12,
            branch_entries: 1,
            user_stack_bytes: 16,
            aux_bytes: 8,
        };
        assert_eq!(layout.sample_record_size(&var), (HEADER_LEN + body.len()) as u64);
        // Every shorter body is an error, never a panic.
        for n in 0..body.len() {
            assert!(layout.decode(&body[..n], e).is_err(), "{n} bytes");
        }
    }
}

/// The single (non-group) read block puts `value` first and id/lost after the times.
#[test]
fn single_read_block_and_plain_weight() {
    let layout = SampleLayout::new(st::IP | st::READ | st::WEIGHT).with_read_format(rf::TOTAL_TIME_RUNNING | rf::ID | rf::LOST);
    for e in ENDIANS {
        let body = W(Vec::new(), e).w(&[1, 42, 30, 9, 2, 321]).0;
        let s = layout.decode(&body, e).unwrap();
        let r = s.read().unwrap();
        assert_eq!((r.is_group(), r.len(), r.time_enabled(), r.time_running()), (false, 1, None, Some(30)));
        assert_eq!(r.get(0), Some(ReadValue { value: 42, id: Some(9), lost: Some(2) }));
        assert_eq!(s.weight(), Some(Weight::Full(321)));
    }
}

/// The fixed-field layouts have a fixed-offset path ([`BasicLayout`]); it must agree
/// with the general decoder on the same bytes, and with the field walk of a layout that
/// adds a field (DATA_SRC) after them.
#[test]
fn basic_layout_matches_general_decoder() {
    for ident in [0, st::IDENTIFIER] {
        let layout = SampleLayout::new(ident | st::IP | st::TID | st::TIME | st::CPU | st::PERIOD);
        let basic = layout.basic().expect("the default layout is basic");
        let walk = SampleLayout::new(layout.sample_type() | st::DATA_SRC | st::CALLCHAIN);
        assert!(walk.basic().is_none());
        for e in ENDIANS {
            let mut w = W(Vec::new(), e);
            if ident != 0 {
                w = w.w(&[0x55]);
            }
            let body = w.w(&[0x401000]).u32s(7, 8).w(&[99]).u32s(1, 0).w(&[10_000]).0;
            let with_more = W(body.clone(), e).w(&[1, 0xabc, 0x42]).0; // callchain [0xabc], data_src
            let fast = basic.decode(&body, e).unwrap();
            let general = layout.decode(&body, e).unwrap();
            let walked = walk.decode(&with_more, e).unwrap();
            assert_eq!(walked.data_src(), Some(0x42));
            assert_eq!(walked.callchain().unwrap().to_vec(), [0xabc]);
            for v in [general, walked] {
                assert_eq!(v.identifier(), fast.identifier);
                assert_eq!(
                    (v.ip(), v.pid(), v.tid(), v.time(), v.cpu(), v.period()),
                    (Some(fast.ip), Some(fast.pid), Some(fast.tid), Some(fast.time), fast.cpu, fast.period)
                );
            }
            assert_eq!(fast.identifier, (ident != 0).then_some(0x55));
            assert_eq!((fast.ip, fast.pid, fast.tid, fast.time, fast.cpu, fast.period), (0x401000, 7, 8, 99, Some(1), Some(10_000)));
            assert_eq!(basic.body_len(), body.len());
            // Extra bytes are left over, not an error; short bodies are errors.
            let long = W(body.clone(), e).w(&[1]).0;
            assert_eq!(layout.decode(&long, e).unwrap().rest().len(), 8);
            assert_eq!(basic.decode(&long, e).unwrap(), fast);
            for n in 0..body.len() {
                assert!(matches!(basic.decode(&body[..n], e), Err(DecodeError::Truncated { .. })));
                assert!(matches!(layout.decode(&body[..n], e), Err(DecodeError::Truncated { .. })));
            }
        }
    }
}

/// xorshift64*: deterministic randomness without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn opt(&mut self, on: bool) -> Option<u64> {
        on.then(|| self.next())
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn random_layout(r: &mut Rng) -> SampleLayout {
    let mut t = r.next() & st::ALL;
    if t & st::WEIGHT_STRUCT != 0 {
        t &= !st::WEIGHT; // the kernel refuses both
    }
    SampleLayout::new(t)
        .with_read_format(r.next() & 0x1f)
        .with_branch_sample_type(r.next() & (bst::HW_INDEX | bst::COUNTERS | 0xff))
        .with_regs_user(r.next() & r.next())
        .with_regs_intr(r.next() & r.next() & r.next())
}

/// A sample with exactly the layout's fields, and the sizes of its variable parts.
fn random_sample(r: &mut Rng, l: &SampleLayout) -> (SampleData, VariableSizes, u64) {
    let has = |b: u64| l.sample_type() & b != 0;
    let mut var = VariableSizes::default();
    let mut regs_missing = 0; // words the size estimate counts but ABI NONE leaves out
    let mut regs = |r: &mut Rng, on: bool, mask: u64| {
        on.then(|| {
            let abi = r.below(3);
            if abi == regs_abi::NONE {
                regs_missing += u64::from(mask.count_ones());
            }
            let n = if abi == regs_abi::NONE { 0 } else { mask.count_ones() };
            RegsData { abi, values: (0..n).map(|_| r.next()).collect() }
        })
    };
    let group = l.read_format() & rf::GROUP != 0;
    let read = has(st::READ).then(|| {
        let n = if group { r.below(4) } else { 1 };
        var.read_group_members = n;
        ReadData {
            time_enabled: r.opt(l.read_format() & rf::TOTAL_TIME_ENABLED != 0),
            time_running: r.opt(l.read_format() & rf::TOTAL_TIME_RUNNING != 0),
            values: (0..n)
                .map(|_| ReadValue {
                    value: r.next(),
                    id: r.opt(l.read_format() & rf::ID != 0),
                    lost: r.opt(l.read_format() & rf::LOST != 0),
                })
                .collect(),
        }
    });
    let callchain = has(st::CALLCHAIN).then(|| {
        var.callchain_entries = r.below(6);
        (0..var.callchain_entries).map(|_| r.next()).collect()
    });
    let raw = has(st::RAW).then(|| {
        var.raw_bytes = 4 + 8 * r.below(4); // kernel-padded sizes round-trip exactly
        r.bytes(var.raw_bytes as usize)
    });
    let branch_stack = has(st::BRANCH_STACK).then(|| {
        var.branch_entries = r.below(4);
        let n = var.branch_entries;
        BranchData {
            hw_index: r.opt(l.branch_hw_index()),
            entries: (0..n).map(|_| BranchEntry { from: r.next(), to: r.next(), flags: r.next() }).collect(),
            counters: l.branch_counters().then(|| (0..n).map(|_| r.next()).collect()),
        }
    });
    let regs_user = regs(r, has(st::REGS_USER), l.regs_user_mask());
    let stack_user = has(st::STACK_USER).then(|| {
        var.user_stack_bytes = 8 * r.below(5);
        let dyn_size = if var.user_stack_bytes == 0 { 0 } else { r.below(var.user_stack_bytes + 1) };
        StackData { data: r.bytes(var.user_stack_bytes as usize), dyn_size }
    });
    let weight = if has(st::WEIGHT_STRUCT) {
        Some(Weight::Struct { var1_dw: r.next() as u32, var2_w: r.next() as u16, var3_w: r.next() as u16 })
    } else if has(st::WEIGHT) {
        Some(Weight::Full(r.next()))
    } else {
        None
    };
    let regs_intr = regs(r, has(st::REGS_INTR), l.regs_intr_mask());
    let aux = has(st::AUX).then(|| {
        var.aux_bytes = 8 * r.below(3);
        r.bytes(var.aux_bytes as usize)
    });
    let d = SampleData {
        identifier: r.opt(has(st::IDENTIFIER)),
        ip: r.opt(has(st::IP)),
        pid: has(st::TID).then(|| r.next() as u32),
        tid: has(st::TID).then(|| r.next() as u32),
        time: r.opt(has(st::TIME)),
        addr: r.opt(has(st::ADDR)),
        id: r.opt(has(st::ID)),
        stream_id: r.opt(has(st::STREAM_ID)),
        cpu: has(st::CPU).then(|| r.next() as u32),
        period: r.opt(has(st::PERIOD)),
        read,
        callchain,
        raw,
        branch_stack,
        regs_user,
        stack_user,
        weight,
        data_src: r.opt(has(st::DATA_SRC)),
        transaction: r.opt(has(st::TRANSACTION)),
        regs_intr,
        phys_addr: r.opt(has(st::PHYS_ADDR)),
        cgroup: r.opt(has(st::CGROUP)),
        data_page_size: r.opt(has(st::DATA_PAGE_SIZE)),
        code_page_size: r.opt(has(st::CODE_PAGE_SIZE)),
        aux,
    };
    (d, var, 8 * regs_missing)
}

fn round_trip(l: &SampleLayout, d: &SampleData, e: Endian) -> Vec<u8> {
    let body = d.encode(l, e);
    let v = l.decode(&body, e).unwrap_or_else(|err| panic!("{l:?} {e:?}: {err}"));
    assert_eq!(&SampleData::from_view(&v), d, "{l:?} {e:?}");
    assert!(v.rest().is_empty(), "{l:?}");
    body
}

/// Each field alone (and with the layout flags that change it), in both byte orders.
#[test]
fn every_field_round_trips_alone_in_both_byte_orders() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for bit in 0..25 {
        let t = 1u64 << bit;
        for rfmt in [0, rf::GROUP, rf::ID | rf::LOST | rf::TOTAL_TIME_ENABLED, 0x1f] {
            for b in [0, bst::HW_INDEX, bst::COUNTERS, bst::HW_INDEX | bst::COUNTERS] {
                let l = SampleLayout::new(t).with_read_format(rfmt).with_branch_sample_type(b).with_regs_user(0xff0f).with_regs_intr(0b101);
                for e in ENDIANS {
                    for _ in 0..4 {
                        let (d, _, _) = random_sample(&mut r, &l);
                        round_trip(&l, &d, e);
                    }
                }
            }
        }
    }
}

/// Random sample_type masks (and read/branch/register settings): encode → decode is the
/// identity, the size estimate matches the record, every strict prefix is an error, and
/// the other byte order never panics.
#[test]
fn random_layouts_round_trip() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    for _ in 0..3000 {
        let l = random_layout(&mut r);
        let (d, var, regs_missing) = random_sample(&mut r, &l);
        for e in ENDIANS {
            let body = round_trip(&l, &d, e);
            assert_eq!(l.sample_record_size(&var), (HEADER_LEN + body.len()) as u64 + regs_missing, "{l:?}");
            if let Some(n) = l.fixed_sample_size() {
                assert_eq!(n, (HEADER_LEN + body.len()) as u64);
            }
            for n in 0..body.len() {
                assert!(l.decode(&body[..n], e).is_err(), "{l:?}: prefix of {n} of {} bytes decoded", body.len());
            }
            let other = if e == Endian::Little { Endian::Big } else { Endian::Little };
            let _ = l.decode(&body, other);
            let rec = d.encode_record(&l, misc::USER, e);
            let h = RecordHeader::parse(&rec, e).unwrap();
            assert_eq!((h.kind, h.misc, h.size as usize, h.cpumode()), (record_type::SAMPLE, misc::USER, rec.len(), misc::USER));
        }
    }
}

/// Garbage never panics, whatever the layout says.
#[test]
fn garbage_never_panics() {
    let mut r = Rng(42);
    for _ in 0..20_000 {
        let l = random_layout(&mut r);
        let n = r.below(200) as usize;
        let mut body = r.bytes(n);
        // Sometimes make length words small, so decoding gets further.
        if r.below(2) == 0 {
            for b in body.iter_mut().skip(4).step_by(8) {
                *b = 0;
            }
        }
        for e in ENDIANS {
            if let Ok(v) = l.decode(&body, e) {
                let _ = format!("{v:?}");
            }
        }
    }
    // Absurd counts are errors, not overflows.
    for t in [st::CALLCHAIN, st::BRANCH_STACK, st::STACK_USER, st::AUX, st::READ] {
        let l = SampleLayout::new(t).with_read_format(rf::GROUP | rf::ID).with_branch_sample_type(bst::COUNTERS);
        let body = [0xffu8; 32];
        assert!(l.decode(&body, Endian::Little).is_err(), "{t:#x}");
        let est = l.sample_record_size(&VariableSizes {
            read_group_members: u64::MAX,
            callchain_entries: u64::MAX,
            raw_bytes: u64::MAX,
            branch_entries: u64::MAX,
            user_stack_bytes: u64::MAX,
            aux_bytes: u64::MAX,
        });
        assert_eq!(est, u64::MAX);
    }
}

fn switch_record(e: Endian, kind: u32, m: u16, next_prev: Option<(u32, u32)>) -> Vec<u8> {
    let mut w = W(Vec::new(), e);
    if let Some((p, t)) = next_prev {
        w = w.u32s(p, t);
    }
    let body = w.u32s(10, 11).w(&[777]).u32s(1, 0).w(&[0x99]).0; // sample_id: tid, time, cpu, identifier
    let mut rec = Vec::new();
    RecordHeader { kind, misc: m, size: (HEADER_LEN + body.len()) as u16 }.encode(e, &mut rec);
    rec.extend_from_slice(&body);
    rec
}

#[test]
fn switch_records_and_sample_id() {
    let l = SampleLayout::new(st::IP | st::TID | st::TIME | st::CPU | st::IDENTIFIER).with_sample_id_all(true);
    assert_eq!(l.sample_id_len(), 32);
    for e in ENDIANS {
        let cases = [
            (record_type::SWITCH, 0, None, SwitchDirection::In),
            (record_type::SWITCH, misc::SWITCH_OUT, None, SwitchDirection::OutBlocked),
            (record_type::SWITCH, misc::SWITCH_OUT | misc::SWITCH_OUT_PREEMPT, None, SwitchDirection::OutPreempted),
            (record_type::SWITCH_CPU_WIDE, misc::SWITCH_OUT | misc::SWITCH_OUT_PREEMPT, Some((20, 21)), SwitchDirection::OutPreempted),
            (record_type::SWITCH_CPU_WIDE, misc::KERNEL, Some((0, 0)), SwitchDirection::In),
        ];
        for (kind, m, np, dir) in cases {
            let rec = switch_record(e, kind, m, np);
            let s = l.decode_switch(&rec, e).unwrap();
            assert_eq!((s.direction, s.next_prev), (dir, np));
            let id = s.sample_id;
            assert_eq!((id.pid, id.tid, id.time, id.cpu, id.identifier), (Some(10), Some(11), Some(777), Some(1), Some(0x99)));
            assert_eq!((id.id, id.stream_id), (None, None));
            // TIME sits `sample_id_time_from_end` bytes before the end.
            let at = rec.len() - l.sample_id_time_from_end().unwrap();
            assert_eq!(e.u64_at(&rec, at), Some(777));
            for n in 0..rec.len() {
                assert!(l.decode_switch(&rec[..n], e).is_err() || n >= HEADER_LEN + 32, "{n}");
            }
        }
        // A CPU-wide switch without room for next_prev, and a record of another type.
        let short = switch_record(e, record_type::SWITCH_CPU_WIDE, 0, None);
        assert!(l.decode_switch(&short, e).is_err());
        let other = switch_record(e, record_type::COMM, 0, None);
        assert!(matches!(l.decode_switch(&other, e), Err(DecodeError::WrongType { kind: 3, .. })));
    }
    // Without sample_id_all there is no trailer.
    let bare = SampleLayout::new(st::TID | st::TIME);
    let rec = switch_record(Endian::Little, record_type::SWITCH, 0, None);
    let (body, id) = bare.split_sample_id(&rec, Endian::Little).unwrap();
    assert_eq!((body.len(), id), (rec.len() - HEADER_LEN, Default::default()));
    assert_eq!(bare.sample_id_time_from_end(), None);
}

#[test]
fn offsets_and_sizes() {
    let l = SampleLayout::new(st::IDENTIFIER | st::IP | st::TID | st::TIME | st::CPU | st::PERIOD);
    assert_eq!(l.sample_time_offset(), Some(24));
    assert_eq!(SampleLayout::new(st::TID | st::TIME).sample_time_offset(), Some(8));
    assert_eq!(SampleLayout::new(st::IP).sample_time_offset(), None);
    assert_eq!(l.fixed_sample_size(), Some(56));
    assert_eq!(SampleLayout::new(st::IP | st::REGS_USER).fixed_sample_size(), None);
    assert_eq!(SampleLayout::new(st::READ).with_read_format(rf::GROUP).fixed_sample_size(), None);
    assert_eq!(SampleLayout::new(st::READ).with_read_format(rf::ID).fixed_sample_size(), Some(24));
    // cmd_plan's cases: REGS_USER adds the ABI word and one word per register.
    let base = l.sample_type();
    assert_eq!(SampleLayout::new(base | st::REGS_USER).with_regs_user(0b11).sample_record_size(&VariableSizes::default()), 56 + 8 + 16);
    // Tracepoint payloads are padded with the u32 size to whole words.
    let raw = SampleLayout::new(st::RAW);
    for (payload, size) in [(0, 16), (4, 16), (5, 24), (12, 24)] {
        assert_eq!(raw.sample_record_size(&VariableSizes { raw_bytes: payload, ..Default::default() }), size, "{payload}");
    }
}
