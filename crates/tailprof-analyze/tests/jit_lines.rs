//! Issue 23: a JIT function is one row with its first line (the lowest offset of its
//! jitdump line table), like a native function with DWARF; at line granularity
//! (`--lines`) its line table gives each sample and frame the line of its own address
//! (the table's row with the greatest offset at or before it; `ip - 1` for return
//! addresses), as DWARF line tables do, in the flat profile and in stacks.
//! Synthetic traces written with `TraceWriter`; the JIT code lives in anonymous memory.

use tailprof_analyze::stacks::{stack_profile, StackOptions};
use tailprof_analyze::{flat_profile, Granularity, ProfileOptions, Symbolizer};
use tailprof_format::jit::JitLines;
use tailprof_format::{CpuMode, EventDesc, Frame, JitEntry, JitOrigin, Mmap, Record, Sample, TraceHeader, TraceReader, TraceWriter};

const PID: u32 = 100;
const ANON: u64 = 0x7f00_0000_0000;
const HOT: u64 = ANON + 0x1000;

fn trace(samples: &[(u64, &[u64])]) -> TraceReader {
    let header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(1000), ..Default::default() }],
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.write(&Record::Mmap(Mmap {
        time: 1,
        pid: PID,
        tid: PID,
        start: ANON,
        len: 0x10000,
        prot: 5,
        path: "//anon".into(),
        ..Default::default()
    }))
    .unwrap();
    // `hot`: app.js line 1 from +0x40, line 3 from +0x79, lib.js line 7 from +0x9c.
    let (lines, dropped) = JitLines::build([(0x79, 3, 21, "app.js"), (0x40, 1, 13, "app.js"), (0x9c, 7, 12, "lib.js")]);
    assert_eq!(dropped, 0);
    w.add_jit(JitEntry {
        pid: PID,
        time: 1,
        start: HOT,
        size: 0x100,
        origin: JitOrigin::JitLoad,
        name: "hot".into(),
        source: Some("app.js:1".into()),
        lines,
    });
    for (i, (ip, callers)) in samples.iter().enumerate() {
        let mut frames = vec![Frame::user(*ip)];
        frames.extend(callers.iter().map(|&a| Frame::user(a)));
        let stack = w.intern_stack(&frames);
        let s =
            Sample { time: 10 + i as u64, pid: PID, tid: PID, ip: *ip, period: 1000, cpumode: CpuMode::User, stack, ..Default::default() };
        w.write(&Record::Sample(s)).unwrap();
    }
    let (bytes, _) = w.finish_into_inner(None).unwrap();
    TraceReader::from_bytes(bytes).unwrap()
}

fn rows(p: &tailprof_analyze::FlatProfile) -> Vec<(String, Option<String>, u64)> {
    let mut got: Vec<(String, Option<String>, u64)> = p.rows.iter().map(|r| (r.name.clone(), r.source.clone(), r.samples)).collect();
    got.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)));
    got
}

fn lines() -> ProfileOptions {
    ProfileOptions { granularity: Granularity::Line, ..Default::default() }
}

/// Samples at +0x50 (line 1) ×2, +0x80 (line 3) ×3, +0xa0 (lib.js:7) ×4 and one at +0x20.
fn hot_samples() -> Vec<(u64, &'static [u64])> {
    let mut s: Vec<(u64, &[u64])> = Vec::new();
    s.extend([(HOT + 0x50, &[][..]); 2]);
    s.extend([(HOT + 0x80, &[][..]); 3]);
    s.extend([(HOT + 0xa0, &[][..]); 4]);
    s.push((HOT + 0x20, &[][..]));
    s
}

/// A row is a function: all of `hot`'s samples in one row, its source the line at the
/// lowest offset of its table (app.js:1), as a native function's is its first line.
#[test]
fn a_jit_function_is_one_row_with_its_first_line() {
    let p = flat_profile(&mut trace(&hot_samples()), &ProfileOptions::default(), &mut Symbolizer::default()).unwrap();
    assert_eq!(rows(&p), [("hot".to_owned(), Some("app.js:1".to_owned()), 10)]);
}

/// `--lines`: one row per line of the samples' addresses; +0x20 is before the table's
/// first row: the function's first line (app.js:1), so it folds with line 1's samples.
#[test]
fn samples_in_jit_code_get_the_line_of_their_address_with_lines() {
    let p = flat_profile(&mut trace(&hot_samples()), &lines(), &mut Symbolizer::default()).unwrap();
    let want = |src: &str, n| ("hot".to_owned(), Some(src.to_owned()), n);
    assert_eq!(rows(&p), [want("lib.js:7", 4), want("app.js:1", 3), want("app.js:3", 3)]);
}

/// A caller frame is a return address: its line is the one of `ip - 1`. `hot` calls
/// itself with the return address at +0x79, the first byte of line 3, so the call
/// instruction is on line 1 (frames per line); per function both frames are `hot` with
/// its first line.
#[test]
fn return_addresses_in_jit_code_take_the_line_before_them() {
    let callers = [HOT + 0x79];
    let s: Vec<(u64, &[u64])> = vec![(HOT + 0xa0, &callers[..]); 2];
    let frames = |granularity| {
        let opts = StackOptions { granularity, ..Default::default() };
        let p = stack_profile(&mut trace(&s), &opts, Vec::new(), &mut Symbolizer::default()).unwrap();
        let path = &p.paths[p.stacks[0].path as usize];
        path.iter()
            .map(|&f| (p.functions[f as usize].name.clone(), p.functions[f as usize].source.clone().unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    let f = |src: &str| ("hot".to_owned(), src.to_owned());
    assert_eq!(frames(Granularity::Line), [f("app.js:1"), f("lib.js:7")], "root first");
    assert_eq!(frames(Granularity::Function), [f("app.js:1"), f("app.js:1")], "root first");
}
