//! Stack profiles, off-CPU time and stack explanations on synthetic traces written with
//! `TraceWriter` (stacks and switches interned as the recorder does). Function names come
//! from a small C program compiled here, placed through a synthetic MMAP.

mod common;

use common::*;
use std::path::PathBuf;
use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::offcpu::OffState;
use tailprof_analyze::stack_explain::explain_stacks;
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions, StackProfile};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Record, Sample, StackId, StackStatus, Switch, SwitchKind, TraceHeader,
    TraceReader, TraceWriter,
};

const PROG: &str = r#"
__attribute__((noinline)) int leaf(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
__attribute__((noinline)) int caller_a(int x) { return leaf(x) + 1; }
__attribute__((noinline)) int caller_b(int x) { return leaf(x) + 2; }
__attribute__((noinline)) int wait_here(int x) { return x + 4; }
int main(int argc, char **argv) { (void)argv; return caller_a(argc) + caller_b(argc) + wait_here(argc); }
"#;

const PID: u32 = 100;
const BASE: u64 = 0x5555_5555_4000;
const PERIOD: u64 = 1_000_000; // 1 ms

struct Prog {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Prog {
    fn build() -> Option<Prog> {
        let dir = tempfile::tempdir().unwrap();
        let path = compile("cc", dir.path(), "prog", PROG, &["-O1", "-g", "-fPIE", "-pie"])?;
        Some(Prog { _dir: dir, path })
    }
    /// An address `off` bytes into function `f`.
    fn at(&self, f: &str, off: u64) -> u64 {
        BASE + nm(&self.path, f) + off
    }
    /// Leaf-first frames: leaf sampled in `leaf`, called from `caller`, from main.
    /// Callers' frames are return addresses (one past the call): +5 into the caller,
    /// so `ip - 1` stays inside it.
    fn stack(&self, caller: &str) -> Vec<Frame> {
        vec![Frame::user(self.at("leaf", 3)), Frame::user(self.at(caller, 5)), Frame::user(self.at("main", 5))]
    }
}

fn header() -> TraceHeader {
    TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(PERIOD), ..Default::default() }],
        ..Default::default()
    }
}

fn marker(time: u64, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid: PID, kind, item, class: 0, source: MarkerSource::Api })
}

/// 10 items of 10 ms on one thread, 10 samples each: item 3 calls `leaf` from
/// `caller_b` only, and sleeps 20 ms more (blocked in `wait_here`); every item is
/// preempted 1 ms. Overall: 30% of the samples from caller_a, 70% from caller_b.
fn trace(p: &Prog) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write(&Record::Mmap(exec_mmap(PID, &p.path, BASE, None))).unwrap();
    let a = w.intern_stack(&p.stack("caller_a"));
    let b = w.intern_stack(&p.stack("caller_b"));
    let wait = w.intern_stack(&[Frame::user(p.at("wait_here", 2)), Frame::user(p.at("main", 9))]);
    let mut t = 1_000_000u64;
    let mut n_a = 0;
    for item in 1..=10u64 {
        w.write(&marker(t, MarkerKind::Begin, item)).unwrap();
        for k in 0..10u64 {
            t += PERIOD;
            // Items other than 3: 6 of 10 samples from caller_a in items 1..=5 (7 in item 1),
            // 1 in items 6..=10, else from caller_b.
            let from_a = item != 3 && ((item == 1 && k < 7) || (item <= 5 && k < 6) || (item > 5 && k < 1));
            n_a += from_a as u32;
            let s = Sample {
                time: t,
                pid: PID,
                tid: PID,
                ip: p.at("leaf", 3),
                period: PERIOD,
                cpumode: CpuMode::User,
                stack: if from_a { a } else { b },
                stack_status: if k == 9 { StackStatus::CopyExhausted } else { StackStatus::Complete },
                ..Default::default()
            };
            w.write(&Record::Sample(s)).unwrap();
        }
        let sw = |time, kind, stack| {
            Record::Switch(Switch {
                time,
                pid: PID,
                tid: PID,
                cpu: 0,
                kind,
                stack,
                stack_status: StackStatus::Complete,
                next_prev: None,
                item_key: None,
            })
        };
        w.write(&sw(t + 100, SwitchKind::OutPreempted, StackId::NONE)).unwrap();
        w.write(&sw(t + 100 + PERIOD, SwitchKind::In, StackId::NONE)).unwrap();
        t += 100 + PERIOD;
        if item == 3 {
            w.write(&sw(t, SwitchKind::OutBlocked, wait)).unwrap();
            t += 20 * PERIOD;
            w.write(&sw(t, SwitchKind::In, StackId::NONE)).unwrap();
        }
        t += 500;
        w.write(&marker(t, MarkerKind::End, item)).unwrap();
        t += 1000;
    }
    assert_eq!(n_a, 30);
    w.finish_into_inner(None).unwrap().0
}

fn profile(bytes: &[u8], filter: StackFilter) -> (tailprof_analyze::ItemsReport, StackProfile) {
    let mut sym = Symbolizer::default();
    let mut r = TraceReader::from_bytes(bytes.to_vec()).unwrap();
    let items = items_report(&mut r, &ItemsOptions::default(), &mut sym).unwrap();
    let mut r = TraceReader::from_bytes(bytes.to_vec()).unwrap();
    let spans = ItemSpan::from_rows(&items.items);
    let p = stack_profile(&mut r, &StackOptions { event: None, filter, timeline: true, ..Default::default() }, spans, &mut sym).unwrap();
    (items, p)
}

fn by_frames(p: &StackProfile) -> Vec<(Vec<String>, u64)> {
    let mut m: std::collections::BTreeMap<Vec<String>, u64> = Default::default();
    for r in &p.stacks {
        *m.entry(p.frames(r.path).into_iter().map(str::to_owned).collect()).or_default() += r.samples;
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

#[test]
fn stacks_are_symbolized_root_first_and_counted() {
    let Some(p) = Prog::build() else { return };
    let (_, prof) = profile(&trace(&p), StackFilter::default());
    assert_eq!(prof.samples, 100);
    assert_eq!(
        by_frames(&prof),
        vec![
            (vec!["main".to_owned(), "caller_b".into(), "leaf".into()], 70),
            (vec!["main".to_owned(), "caller_a".into(), "leaf".into()], 30),
        ]
    );
    let st: Vec<(&str, u64)> = prof.statuses.iter().map(|s| (s.status, s.samples)).collect();
    assert_eq!(st, vec![("complete", 90), ("copy_exhausted", 10)]);
    assert_eq!(prof.stacks.iter().filter(|r| !r.complete).map(|r| r.samples).sum::<u64>(), 10);
    // Flat: leaf is self everywhere; main is on every stack.
    let flat = prof.flat(prof.stacks.iter().map(|r| (r.path, r.samples)));
    assert_eq!((flat[0].name, flat[0].self_value, flat[0].total_value), ("leaf", 100, 100));
    assert!(flat.iter().any(|f| f.name == "main" && f.self_value == 0 && f.total_value == 100));
}

#[test]
fn filters_select_items() {
    let Some(p) = Prog::build() else { return };
    let bytes = trace(&p);
    let (_, only3) = profile(&bytes, StackFilter { items: vec![3], ..Default::default() });
    assert_eq!(only3.samples, 10);
    assert_eq!(by_frames(&only3), vec![(vec!["main".to_owned(), "caller_b".into(), "leaf".into()], 10)]);
    assert_eq!(only3.blocked_ns, 20 * PERIOD);
    assert_eq!(only3.runnable_ns, PERIOD);
    let (_, two) = profile(&bytes, StackFilter { items: vec![1, 6], ..Default::default() });
    assert_eq!(by_frames(&two).iter().map(|x| x.1).sum::<u64>(), 20);
    let (_, inside) = profile(&bytes, StackFilter { in_items: true, ..Default::default() });
    assert_eq!(inside.samples, 100);
    let (_, none) = profile(&bytes, StackFilter { items: vec![999], ..Default::default() });
    assert_eq!(none.samples, 0);
    assert_eq!(none.total_samples, 100);
}

#[test]
fn off_cpu_time_adds_up_to_wall_time() {
    let Some(p) = Prog::build() else { return };
    let (items, prof) = profile(&trace(&p), StackFilter::default());
    assert_eq!(prof.switches, 22);
    assert_eq!(prof.runnable_ns, 10 * PERIOD);
    assert_eq!(prof.blocked_ns, 20 * PERIOD);
    let tl = prof.timeline.as_ref().unwrap();
    assert_eq!(tl.samples.len(), 100);
    assert!(tl.samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert_eq!(tl.off_cpu.len(), 11);
    assert_eq!(tl.off_cpu.iter().filter(|o| o.state == OffState::Blocked).map(|o| o.end_ns - o.begin_ns).sum::<u64>(), 20 * PERIOD);
    let blocked = prof.off_cpu.iter().find(|r| r.state == OffState::Blocked).unwrap();
    assert_eq!(prof.frames(blocked.path), vec!["main", "wait_here"]);
    for (row, st) in items.items.iter().zip(&prof.items) {
        assert_eq!(row.id, st.id);
        assert_eq!(st.runnable_ns, PERIOD);
        let want_blocked = if row.id == 3 { 20 * PERIOD } else { 0 };
        assert_eq!(st.blocked_ns, want_blocked, "item {}", row.id);
        // CPU (10 samples x 1 ms) + off-CPU ≈ wall, within the sampling resolution.
        let cpu = st.stacks.iter().map(|s| s.samples).sum::<u64>() * PERIOD;
        let wall = row.duration_ns as i64;
        assert!(((cpu + st.off_cpu_ns()) as i64 - wall).abs() <= PERIOD as i64, "item {}: {cpu} + {} vs {wall}", row.id, st.off_cpu_ns());
    }
}

#[test]
fn explanation_by_stack_names_the_blocked_stack_and_the_caller() {
    let Some(p) = Prog::build() else { return };
    let (items, prof) = profile(&trace(&p), StackFilter::default());
    let x = explain_stacks(&items, &prof, 3).unwrap();
    assert!(x.resolvable, "{:?}", x.note);
    assert_eq!(x.split.blocked_ns, Some(20 * PERIOD));
    assert_eq!(x.off_cpu[0].frames, vec!["main", "wait_here"]);
    assert_eq!(x.off_cpu[0].state, OffState::Blocked);
    assert_eq!(x.off_cpu[0].delta_ns, (20 * PERIOD) as f64);
    // By stack, not by leaf: the leaf is the same, the caller differs.
    let b = x.stacks.iter().find(|s| s.frames == ["main", "caller_b", "leaf"]).unwrap();
    assert_eq!(b.samples, 10);
    assert!(b.delta_ns > 0.0);
    let a = x.stacks.iter().find(|s| s.frames == ["main", "caller_a", "leaf"]).unwrap();
    assert_eq!(a.samples, 0);
    assert!(a.median_ns > 0.0 && a.delta_ns < 0.0);
    // A typical item: excess below the resolution is said, not hidden.
    let y = explain_stacks(&items, &prof, 1).unwrap();
    assert!(!y.resolvable);
    assert!(y.note.as_deref().unwrap().contains("sampling"));
    assert!(explain_stacks(&items, &prof, 77).is_err());
}

const INLINE_PROG: &str = r#"
static inline __attribute__((always_inline)) unsigned helper(unsigned x) {
    unsigned s = 0;
    for (unsigned i = 0; i < x; i++) s += (i * 2654435761u) ^ (s >> 3);
    return s;
}
__attribute__((noinline)) unsigned outer(unsigned x) { return helper(x) + 1; }
int main(int argc, char **argv) { (void)argv; return (int)outer((unsigned)argc); }
"#;

/// An inlined function shows as its own frame, inside the function that holds its code.
#[test]
fn inlined_functions_are_frames() {
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = compile("cc", dir.path(), "inl", INLINE_PROG, &["-O2", "-g", "-fPIE", "-pie"]) else { return };
    // An address of `outer` whose innermost function per addr2line -i is `helper`.
    let start = nm(&bin, "outer");
    let Some(off) = (0..0x80u64).find(|o| {
        let out = std::process::Command::new("addr2line")
            .args(["-i", "-f", "-e"])
            .arg(&bin)
            .arg(format!("{:#x}", start + o))
            .output()
            .expect("addr2line");
        String::from_utf8_lossy(&out.stdout).lines().next() == Some("helper")
    }) else {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the compiler left no inlined code of helper in outer");
        return;
    };
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.write(&Record::Mmap(exec_mmap(PID, &bin, BASE, None))).unwrap();
    let ip = BASE + start + off;
    let st = w.intern_stack(&[Frame::user(ip), Frame::user(BASE + nm(&bin, "main") + 5)]);
    for i in 0..5 {
        let s = Sample {
            time: 1000 + i,
            pid: PID,
            tid: PID,
            ip,
            period: PERIOD,
            cpumode: CpuMode::User,
            stack: st,
            stack_status: StackStatus::Complete,
            ..Default::default()
        };
        w.write(&Record::Sample(s)).unwrap();
    }
    let bytes = w.finish_into_inner(None).unwrap().0;
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let p = stack_profile(&mut r, &StackOptions::default(), Vec::new(), &mut Symbolizer::default()).unwrap();
    assert_eq!(by_frames(&p), vec![(vec!["main".to_owned(), "outer".into(), "helper".into()], 5)]);
}
