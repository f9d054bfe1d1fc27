//! The causes analysis' whole output on a busier synthetic trace, byte for byte against
//! `tests/causes_golden/causes.json` (issue 21: the stack pass and the causes were
//! rewritten for speed; their results must not change). The trace is pseudo-random from a
//! fixed seed: 4 request threads with overlapping items (some nested), 3 workers that
//! hand work to each other (critical paths two threads deep), wakeups from interrupts on
//! an idle CPU and from another process, preemption by a hog seen through CPU-wide
//! switch records, migrations, kernel frames named by a kallsyms file written by the test (noise: system calls, page
//! faults; interrupt kinds), samples
//! outside any item. The JSON holds the stack profile with its timeline (whole trace and
//! filtered to some items), every item's causes, the interference view, `--explain` of
//! the slowest items and the items document.
//!
//! Regenerate with `UPDATE_GOLDEN=1 cargo test -p tailprof-analyze --test causes_golden`
//! (only after checking that a change of output is intended); otherwise a mismatch fails
//! with the first differing lines.

use std::path::PathBuf;

use tailprof_analyze::causes::{explain_causes, interference};
use tailprof_analyze::items::document::{document, ItemSelection, ItemSort, ItemsQuery};
use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::stack_explain::explain_stacks;
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions};
use tailprof_analyze::{KernelSymbols, Symbolizer, SymbolizerOptions};
use tailprof_format::{
    Comm, CpuMode, EventDesc, Frame, Marker, MarkerKind, MarkerSource, Mmap, Record, Sample, StackId, StackStatus, Switch, SwitchKind,
    TraceHeader, TraceReader, TraceWriter, Wakeup,
};

const PID: u32 = 100;
const HOG: u32 = 200;
const OTHER: u32 = 300;
const US: u64 = 1000;

/// A small deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn sample(time: u64, pid: u32, tid: u32, stack: StackId, cpumode: CpuMode) -> Record {
    Record::Sample(Sample {
        time,
        pid,
        tid,
        ip: 0x40_0100,
        period: 100 * US,
        cpumode,
        stack,
        stack_status: StackStatus::Unknown,
        ..Default::default()
    })
}

fn sw(time: u64, pid: u32, tid: u32, cpu: u32, kind: SwitchKind, next_prev: Option<(u32, u32)>) -> Record {
    Record::Switch(Switch { time, pid, tid, cpu, kind, next_prev, ..Default::default() })
}

fn wake(time: u64, pid: u32, tid: u32, cpu: u32, wakee_tid: u32, stack: StackId) -> Record {
    Record::Wakeup(Wakeup { time, pid, tid, cpu, wakee_tid, stack, stack_status: StackStatus::Unknown })
}

fn marker(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Api })
}

fn trace() -> Vec<u8> {
    let mut header = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, config: 0, sample_period: Some(100 * US), ..Default::default() }],
        ..Default::default()
    };
    header.extra.insert("causes".into(), "sched_waking+cpu_switch".into());
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.write(&Record::Mmap(Mmap {
        time: 0,
        pid: PID,
        tid: PID,
        start: 0x40_0000,
        len: 0x10_0000,
        pgoff: 0,
        path: "/nonexistent/server".into(),
        ..Default::default()
    }))
    .unwrap();
    for (pid, tid, comm) in [(PID, PID, "server"), (PID, 111, "worker-a"), (HOG, HOG, "hog"), (OTHER, OTHER, "other")] {
        w.write(&Record::Comm(Comm { time: 0, pid, tid, exec: false, comm: comm.into() })).unwrap();
    }
    let user = |w: &mut TraceWriter<Vec<u8>>, leaf: u64, mid: u64| {
        w.intern_stack(&[Frame::user(0x40_0000 + leaf), Frame::user(0x40_1000 + mid), Frame::user(0x40_2000)])
    };
    let stacks = [user(&mut w, 0x100, 0), user(&mut w, 0x200, 0), user(&mut w, 0x300, 0x10), user(&mut w, 0x100, 0x20)];
    // Kernel frames named by the kallsyms file of `symbolizer` (leaf first).
    let k = |a: u64| Frame::kernel(0xffff_ffff_8100_0000 + a + 0x10);
    let write = w.intern_stack(&[k(0x2000), k(0x3000), Frame::user(0x40_0500), Frame::user(0x40_2000)]);
    let fault = w.intern_stack(&[k(0x6000), k(0x7000), Frame::user(0x40_0600), Frame::user(0x40_2000)]);
    let wake_user = w.intern_stack(&[k(0x1000), Frame::user(0x40_0300)]);
    let wake_irq = w.intern_stack(&[k(0x5000), k(0x4000)]);
    let mut rng = Lcg(21);
    let mut recs: Vec<Record> = Vec::new();
    let mut id = 0u64;
    for round in 0..8u64 {
        for r in 0..4u32 {
            let req = PID + 1 + r;
            let t = round * 3000 * US + r as u64 * 700 * US + rng.next(100) * US;
            let cpu = |rng: &mut Lcg| rng.next(2) as u32;
            id += 1;
            let item = id;
            recs.push(marker(t, req, MarkerKind::Begin, item));
            let nested = rng.next(6) == 0;
            let mut now = t + 10 * US;
            for _ in 0..1 + rng.next(3) {
                let st = match rng.next(8) {
                    0 => write,
                    1 => fault,
                    k => stacks[k as usize % 4],
                };
                let mode = if st == write || st == fault { CpuMode::Kernel } else { CpuMode::User };
                recs.push(sample(now, PID, req, st, mode));
                now += 20 * US + rng.next(60) * US;
            }
            if nested {
                id += 1;
                recs.push(marker(now, req, MarkerKind::Begin, id));
                recs.push(sample(now + 5 * US, PID, req, stacks[3], CpuMode::User));
            }
            match rng.next(4) {
                // Hand work to a worker (which may hand it on) and wait.
                0 | 1 => {
                    let wk = PID + 11 + rng.next(3) as u32;
                    let c = cpu(&mut rng);
                    recs.push(wake(now, PID, req, c, wk, wake_user));
                    recs.push(sw(now + 5 * US, PID, req, c, SwitchKind::OutBlocked, None));
                    recs.push(sw(now + 5 * US, PID, wk, c, SwitchKind::In, None));
                    let mut wt = now + 10 * US;
                    for _ in 0..1 + rng.next(4) {
                        recs.push(sample(wt, PID, wk, stacks[rng.next(4) as usize], CpuMode::User));
                        wt += 30 * US + rng.next(50) * US;
                    }
                    if rng.next(2) == 0 {
                        // The worker waits for another worker in turn.
                        let wk2 = PID + 11 + (wk - PID - 11 + 1) % 3;
                        recs.push(wake(wt, PID, wk, c, wk2, wake_user));
                        recs.push(sw(wt + 2 * US, PID, wk, c, SwitchKind::OutBlocked, None));
                        recs.push(sw(wt + 2 * US, PID, wk2, c, SwitchKind::In, None));
                        recs.push(sample(wt + 40 * US, PID, wk2, stacks[2], CpuMode::User));
                        recs.push(sample(wt + 90 * US, PID, wk2, write, CpuMode::Kernel));
                        recs.push(wake(wt + 120 * US, PID, wk2, c, wk, wake_user));
                        recs.push(sw(wt + 125 * US, PID, wk2, c, SwitchKind::OutBlocked, None));
                        recs.push(sw(wt + 130 * US, PID, wk, 1 - c, SwitchKind::In, None));
                        wt += 150 * US;
                        recs.push(sample(wt, PID, wk, stacks[0], CpuMode::User));
                    }
                    recs.push(wake(wt + 10 * US, PID, wk, c, req, wake_user));
                    recs.push(sw(wt + 15 * US, PID, wk, c, SwitchKind::OutBlocked, None));
                    let back = cpu(&mut rng);
                    recs.push(sw(wt + 20 * US + rng.next(30) * US, PID, req, back, SwitchKind::In, None));
                    now = wt + 60 * US;
                }
                // Preempted by the hog (CPU-wide records with next_prev).
                2 => {
                    let c = cpu(&mut rng);
                    let len = 50 * US + rng.next(200) * US;
                    recs.push(sw(now, PID, req, c, SwitchKind::OutPreempted, None));
                    recs.push(sw(now, HOG, HOG, c, SwitchKind::In, Some((PID, req))));
                    recs.push(sw(now + len, HOG, HOG, c, SwitchKind::OutPreempted, Some((PID, req))));
                    recs.push(sw(now + len, PID, req, c, SwitchKind::In, None));
                    now += len + 10 * US;
                }
                // Blocked, woken by an interrupt on an idle CPU or by another process.
                _ => {
                    let c = cpu(&mut rng);
                    let len = 30 * US + rng.next(300) * US;
                    recs.push(sw(now, PID, req, c, SwitchKind::OutBlocked, None));
                    let (wp, wt, ws) = if rng.next(2) == 0 { (0, 0, wake_irq) } else { (OTHER, OTHER, wake_user) };
                    recs.push(wake(now + len, wp, wt, c, req, ws));
                    recs.push(sw(now + len + 5 * US, PID, req, c, SwitchKind::In, None));
                    now += len + 20 * US;
                }
            }
            if nested {
                recs.push(marker(now, req, MarkerKind::End, id));
                now += 10 * US;
            }
            recs.push(sample(now, PID, req, stacks[rng.next(4) as usize], CpuMode::User));
            recs.push(marker(now + 20 * US, req, MarkerKind::End, item));
            // Outside any item.
            recs.push(sample(now + 100 * US, PID, req, stacks[1], CpuMode::User));
        }
    }
    let time = |r: &Record| match r {
        Record::Sample(s) => s.time,
        Record::Switch(s) => s.time,
        Record::Wakeup(w) => w.time,
        Record::Marker(m) => m.time,
        _ => 0,
    };
    recs.sort_by_key(time);
    for r in &recs {
        w.write(r).unwrap();
    }
    w.finish_into_inner(None).unwrap().0
}

/// Symbols of the kernel frames: a kallsyms file written here, not this machine's.
fn symbolizer(dir: &std::path::Path) -> Symbolizer {
    let ks = dir.join("kallsyms");
    std::fs::write(
        &ks,
        "ffffffff81000000 T _text\n\
         ffffffff81001000 T futex_wake\n\
         ffffffff81002000 T __x64_sys_write\n\
         ffffffff81003000 T entry_SYSCALL_64\n\
         ffffffff81004000 T asm_sysvec_apic_timer_interrupt\n\
         ffffffff81005000 T hrtimer_wakeup\n\
         ffffffff81006000 T exc_page_fault\n\
         ffffffff81007000 T asm_exc_page_fault\n\
         ffffffff81008000 T _etext\n",
    )
    .unwrap();
    Symbolizer::new(SymbolizerOptions { kernel: KernelSymbols::Kallsyms(ks), cache_dir: None, ..Default::default() })
}

fn render() -> String {
    let bytes = trace();
    let dir = tempfile::tempdir().unwrap();
    let mut sym = symbolizer(dir.path());
    let read = || TraceReader::from_bytes(bytes.clone()).unwrap();
    let items = items_report(&mut read(), &ItemsOptions::default(), &mut sym).unwrap();
    let spans = ItemSpan::from_rows(&items.items);
    let profile = |filter: StackFilter, sym: &mut Symbolizer| {
        let opts = StackOptions { event: None, filter, timeline: true, ..Default::default() };
        stack_profile(&mut read(), &opts, spans.clone(), sym).unwrap()
    };
    let whole = profile(StackFilter::default(), &mut sym);
    let filtered = profile(StackFilter { items: vec![1, 2, 3, 5, 8, 13, 21, 34], ..Default::default() }, &mut sym);
    let mut by_len: Vec<&tailprof_analyze::items::ItemRow> = items.items.iter().collect();
    by_len.sort_by_key(|r| (std::cmp::Reverse(r.end_ns - r.begin_ns), r.id));
    let explained: Vec<_> = by_len
        .iter()
        .take(4)
        .map(|r| {
            let x = explain_stacks(&items, &whole, r.id).unwrap();
            explain_causes(&items, &whole, &x)
        })
        .collect();
    let q = ItemsQuery {
        options: ItemsOptions::default(),
        selection: ItemSelection { sort: ItemSort::Id, ..Default::default() },
        explain: None,
        memory: false,
    };
    let doc = document(&mut read(), &q, &mut sym).unwrap();
    let out = serde_json::json!({
        "items": items.items.len(),
        "profile": whole,
        "causes": whole.causes,
        "cause_stats": whole.cause_stats,
        "filtered_profile": filtered,
        "filtered_causes": filtered.causes,
        "interference": interference(&items, &whole),
        "explain": explained,
        "document": doc,
    });
    let mut s = serde_json::to_string_pretty(&out).unwrap();
    s.push('\n');
    // The kallsyms file's place is named in the notes: not the same in every run.
    s.replace(dir.path().to_str().unwrap(), "TMPDIR")
}

#[test]
fn causes_output_is_unchanged() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/causes_golden/causes.json");
    let actual = render();
    // The trace has what the test claims to cover.
    assert!(actual.contains("\"during\"") && actual.contains("\"preempted_by\""));
    assert!(actual.contains("\"irq\": \"timer\"") && actual.contains("\"comm\": \"other\""));
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    if expected != actual {
        let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
        let at = e.iter().zip(&a).position(|(x, y)| x != y).unwrap_or(e.len().min(a.len()));
        let show = |v: &[&str]| v[at.saturating_sub(3)..(at + 5).min(v.len())].join("\n");
        panic!(
            "causes output changed at line {} of {} (UPDATE_GOLDEN=1 to accept):\nexpected:\n{}\nactual:\n{}",
            at + 1,
            path.display(),
            show(&e),
            show(&a)
        );
    }
}
