//! `tailprof record --call-graph` and `--off-cpu` on real programs (issue 7): the frames of
//! each stored stack are resolved to functions with `nm` ranges (independent of the
//! analyzer), and checked against what the programs do.
//!
//! * a leaf called from two callers 30/70 (`-O2 -fomit-frame-pointer`): with `--call-graph
//!   dwarf` the caller split is 30 % ± 5 points and ≥ 99 % of the program's stacks are
//!   complete; with `-g` on a `-fno-omit-frame-pointer` build the split holds too, and the
//!   stacks reach `main`;
//! * a program that sleeps 20 ms in `wait_for_disk` every third request: switch-out
//!   (blocked) records carry `wait_for_disk` (and its caller `main`) in their stack, fp and
//!   dwarf, and the thread is back on the CPU ≥ 19 ms later;
//! * two busy threads pinned to one CPU: switch-out (preempted) records.
//!
//! Needs perf_event_open for the test process (root, as in CI); otherwise each test says
//! so and returns.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tailprof_format::{Frame, FrameKind, Mmap, Sample, Sink, StackDef, StackStatus, StackTable, Switch, SwitchKind, TraceReader};

const SPLIT: &str = r#"
#include <stdint.h>
#include <stdlib.h>
volatile uint64_t sink;
/* The local array gives leaf a stack frame: gcc 12 omits the frame pointer of frameless
   leaf functions even with -fno-omit-frame-pointer (-mno-omit-leaf-frame-pointer too), and
   a frame-pointer walk then skips the leaf's caller. */
__attribute__((noinline)) void leaf(uint64_t n) { volatile char frame[16]; frame[0] = 0; for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void caller_a(uint64_t n) { leaf(n); sink++; }
__attribute__((noinline)) void caller_b(uint64_t n) { leaf(n); sink++; }
int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    for (long i = 0; i < iters; i++) {
        if (i % 10 < 3) caller_a(200000); else caller_b(200000);
    }
    return 0;
}
"#;

const SLEEPY: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
volatile uint64_t sink;
__attribute__((noinline)) void do_sleep(long ms) {
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
    sink++;
}
__attribute__((noinline)) void wait_for_disk(void) { do_sleep(20); sink++; }
__attribute__((noinline)) void work(uint64_t n) { for (uint64_t i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void handle_request(long i) {
    work(300000);
    if (i % 3 == 2) wait_for_disk();
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 30;
    for (long i = 0; i < n; i++) handle_request(i);
    return 0;
}
"#;

const PINNED: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static volatile uint64_t sink;
__attribute__((noinline)) static void spin(double secs) { double end = now() + secs; while (now() < end) sink++; }
static void *run(void *arg) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    spin(*(double *)arg);
    return NULL;
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    pthread_t a, b;
    pthread_create(&a, NULL, run, &secs);
    pthread_create(&b, NULL, run, &secs);
    pthread_join(a, NULL); pthread_join(b, NULL);
    return 0;
}
"#;

fn can_record() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording needs root (perf_event_open with kernel callchains, tracefs)");
    }
    root
}

fn compile(dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    let src_path = dir.join(format!("{name}.c"));
    std::fs::write(&src_path, src).unwrap();
    let out = dir.join(name);
    let st = Command::new("gcc").args(flags).arg("-o").arg(&out).arg(&src_path).status().expect("gcc");
    assert!(st.success(), "gcc failed on {name}");
    out
}

fn record(trace: &Path, args: &[&str], cmd: &[&str]) {
    let o =
        Command::new(env!("CARGO_BIN_EXE_tailprof")).arg("record").arg("-o").arg(trace).args(args).arg("--").args(cmd).output().unwrap();
    assert!(o.status.success(), "record failed: {}", String::from_utf8_lossy(&o.stderr));
}

/// Function ranges of an executable per `nm -S`: (start vaddr, end, name).
struct Syms {
    funcs: Vec<(u64, u64, String)>,
    /// Executable PT_LOAD: (p_offset, p_vaddr).
    seg: (u64, u64),
}

impl Syms {
    fn of(bin: &Path) -> Syms {
        let out = Command::new("nm").args(["-S", "--defined-only"]).arg(bin).output().expect("nm");
        let mut funcs = Vec::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() == 4 && matches!(f[2], "T" | "t") {
                let a = u64::from_str_radix(f[0], 16).unwrap();
                let n = u64::from_str_radix(f[1], 16).unwrap();
                funcs.push((a, a + n, f[3].to_string()));
            }
        }
        let out = Command::new("readelf").args(["-lW"]).arg(bin).output().expect("readelf");
        let seg = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.first() == Some(&"LOAD") && f.len() >= 8 && f[6..f.len() - 1].iter().any(|fl| fl.contains('E')))
            .map(|f| (u64::from_str_radix(&f[1][2..], 16).unwrap(), u64::from_str_radix(&f[2][2..], 16).unwrap()))
            .expect("an executable LOAD segment");
        Syms { funcs, seg }
    }
}

#[derive(Default)]
struct Collect {
    table: StackTable,
    samples: Vec<Sample>,
    switches: Vec<Switch>,
    mmaps: Vec<Mmap>,
}

impl Sink for Collect {
    fn handle_sample(&mut self, s: &Sample) {
        self.samples.push(s.clone());
    }
    fn handle_switch(&mut self, s: &Switch) {
        self.switches.push(s.clone());
    }
    fn handle_mmap(&mut self, m: &Mmap) {
        self.mmaps.push(m.clone());
    }
    fn handle_stack(&mut self, d: &StackDef) {
        self.table.handle_def(d);
    }
}

struct Trace {
    c: Collect,
    bin: String,
    syms: Syms,
}

impl Trace {
    fn read(trace: &Path, bin: &Path) -> Trace {
        let mut r = TraceReader::open(trace).unwrap();
        let mut c = Collect::default();
        r.read_all(&mut c).unwrap();
        Trace { c, bin: bin.to_str().unwrap().to_string(), syms: Syms::of(bin) }
    }

    /// The function of a user address in the test binary (`None` elsewhere).
    fn func(&self, pid: u32, ip: u64) -> Option<&str> {
        let m = self.c.mmaps.iter().rev().find(|m| m.pid == pid && m.path == self.bin && (m.start..m.start + m.len).contains(&ip))?;
        let vaddr = ip - m.start + m.pgoff - self.syms.seg.0 + self.syms.seg.1;
        self.syms.funcs.iter().find(|f| (f.0..f.1).contains(&vaddr)).map(|f| f.2.as_str())
    }

    /// Functions of a stack's user frames in the test binary, leaf first (non-leaf frames
    /// are return addresses: looked up at `ip - 1`).
    fn funcs(&self, pid: u32, leaf_ip: u64, stack: tailprof_format::StackId) -> Vec<String> {
        let frames: Vec<Frame> = self.c.table.frames_leaf_first(stack).collect();
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            if f.kind != FrameKind::User {
                continue;
            }
            let first_user = i == 0 || frames[i - 1].kind != FrameKind::User;
            let ip = if first_user && f.ip == leaf_ip { f.ip } else { f.ip.saturating_sub(1) };
            if let Some(n) = self.func(pid, ip) {
                out.push(n.to_string());
            }
        }
        out
    }

    fn pids(&self) -> Vec<u32> {
        let mut p: Vec<u32> = self.c.mmaps.iter().filter(|m| m.path == self.bin).map(|m| m.pid).collect();
        p.sort();
        p.dedup();
        p
    }
}

/// (caller_a share of leaf samples in %, leaf samples, complete share of the program's
/// samples in %, share of leaf samples whose stack reaches main in %).
fn caller_split(t: &Trace) -> (f64, usize, f64, f64) {
    let pids = t.pids();
    let mine: Vec<&Sample> = t.c.samples.iter().filter(|s| pids.contains(&s.pid)).collect();
    let (mut a, mut b, mut n, mut main) = (0usize, 0usize, 0usize, 0usize);
    for s in &mine {
        let f = t.funcs(s.pid, s.ip, s.stack);
        if f.first().map(String::as_str) != Some("leaf") {
            continue;
        }
        n += 1;
        match f.get(1).map(String::as_str) {
            Some("caller_a") => a += 1,
            Some("caller_b") => b += 1,
            _ => {}
        }
        if f.iter().any(|x| x == "main") {
            main += 1;
        }
    }
    let complete = mine.iter().filter(|s| s.stack_status == StackStatus::Complete).count();
    let pct = |x: usize, d: usize| 100.0 * x as f64 / d.max(1) as f64;
    eprintln!("leaf samples {n}: caller_a {a}, caller_b {b}; complete {complete}/{}; main {main}", mine.len());
    (pct(a, a + b), n, pct(complete, mine.len()), pct(main, n))
}

#[test]
fn dwarf_unwinds_omitted_frame_pointers() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "split", SPLIT, &["-O2", "-fomit-frame-pointer"]);
    let trace = dir.path().join("d.trace");
    record(&trace, &["--call-graph", "dwarf", "--mmap-pages", "512"], &[bin.to_str().unwrap(), "6000"]);
    let t = Trace::read(&trace, &bin);
    let (a_share, n, complete, main) = caller_split(&t);
    assert!(n >= 500, "only {n} samples in leaf");
    assert!((a_share - 30.0).abs() <= 5.0, "caller_a share {a_share:.1} %, expected 30 ± 5");
    assert!(complete >= 99.0, "only {complete:.1} % of the stacks are complete");
    assert!(main >= 99.0, "only {main:.1} % of leaf stacks reach main");
    // Nothing but frames is stored: far below the 16 KiB copied per sample.
    let bytes = std::fs::metadata(&trace).unwrap().len();
    assert!(bytes / (t.c.samples.len() as u64) < 200, "{bytes} bytes for {} samples", t.c.samples.len());
}

#[test]
fn fp_callchains_with_frame_pointers() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "split", SPLIT, &["-O2", "-fno-omit-frame-pointer"]);
    let trace = dir.path().join("f.trace");
    record(&trace, &["-g"], &[bin.to_str().unwrap(), "6000"]);
    let t = Trace::read(&trace, &bin);
    let (a_share, n, _, main) = caller_split(&t);
    assert!(n >= 500, "only {n} samples in leaf");
    assert!((a_share - 30.0).abs() <= 5.0, "caller_a share {a_share:.1} %, expected 30 ± 5");
    assert!(main >= 99.0, "only {main:.1} % of leaf stacks reach main");
    // Frame-pointer chains cannot tell whether they reached the outermost frame.
    assert!(t.c.samples.iter().all(|s| s.stack_status != StackStatus::None));
}

fn blocked_in_wait_for_disk(mode: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "sleepy", SLEEPY, &["-O2", "-fno-omit-frame-pointer"]);
    let trace = dir.path().join("s.trace");
    let mut args = vec!["--off-cpu"];
    args.extend_from_slice(mode);
    record(&trace, &args, &[bin.to_str().unwrap(), "30"]);
    let t = Trace::read(&trace, &bin);
    let pids = t.pids();
    let outs: Vec<&Switch> = t.c.switches.iter().filter(|s| pids.contains(&s.pid) && s.kind == SwitchKind::OutBlocked).collect();
    let with_fn = outs
        .iter()
        .filter(|s| {
            let f = t.funcs(s.pid, 0, s.stack);
            // handle_request tail-calls wait_for_disk at -O2, so main is the caller.
            f.iter().any(|x| x == "wait_for_disk") && f.iter().any(|x| x == "main")
        })
        .count();
    let ins = t.c.switches.iter().filter(|s| pids.contains(&s.pid) && s.kind == SwitchKind::In).count();
    eprintln!("{mode:?}: {} blocked switch-outs, {with_fn} with wait_for_disk <- main; {ins} switch-ins", outs.len());
    // 10 sleeps of 20 ms: each is one blocked switch-out in wait_for_disk.
    assert!(with_fn >= 9, "{with_fn} blocked switch-outs in wait_for_disk, expected about 10");
    assert!(ins >= 9, "{ins} switch-in records");
    // Each of those is followed by the thread's switch-in about 20 ms later.
    let by_tid: HashMap<u32, Vec<&Switch>> = t.c.switches.iter().fold(HashMap::new(), |mut m, s| {
        m.entry(s.tid).or_default().push(s);
        m
    });
    let long_blocks = by_tid
        .values()
        .flat_map(|v| v.windows(2))
        .filter(|w| w[0].kind == SwitchKind::OutBlocked && w[1].kind == SwitchKind::In)
        .filter(|w| w[1].time.saturating_sub(w[0].time) >= 19_000_000)
        .count();
    assert!(long_blocks >= 9, "{long_blocks} blocked intervals of at least 19 ms");
}

#[test]
fn off_cpu_blocked_stacks_fp() {
    if can_record() {
        blocked_in_wait_for_disk(&[]);
    }
}

#[test]
fn off_cpu_blocked_stacks_dwarf() {
    if can_record() {
        blocked_in_wait_for_disk(&["--call-graph", "dwarf"]);
    }
}

#[test]
fn off_cpu_preempted_threads() {
    if !can_record() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = compile(dir.path(), "pinned", PINNED, &["-O2", "-pthread"]);
    let trace = dir.path().join("p.trace");
    record(&trace, &["--off-cpu"], &[bin.to_str().unwrap(), "0.5"]);
    let t = Trace::read(&trace, &bin);
    let pids = t.pids();
    let pre: Vec<&Switch> = t.c.switches.iter().filter(|s| pids.contains(&s.pid) && s.kind == SwitchKind::OutPreempted).collect();
    let tids: std::collections::BTreeSet<u32> = pre.iter().map(|s| s.tid).collect();
    eprintln!("{} preempted switch-outs on {} threads", pre.len(), tids.len());
    assert!(pre.len() >= 4, "{} preempted switch-outs", pre.len());
    assert!(tids.len() >= 2, "preemptions on {} threads, expected both busy threads", tids.len());
}

#[test]
fn lbr_is_refused_without_a_pmu_with_lbr() {
    if !can_record() || Path::new("/sys/bus/event_source/devices/cpu/caps/branches").exists() {
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "--call-graph", "lbr", "-o", "/dev/null", "--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("LBR") && err.contains("dwarf"), "{err}");
}
