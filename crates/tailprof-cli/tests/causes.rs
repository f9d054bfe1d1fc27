//! Causes (issue 21): who woke an item's thread, what the waker did meanwhile, and who ran
//! while it waited for a CPU. Real recordings of small C programs marked with
//! include/tailprof.h (root: sched_waking and the CPU-wide context switches):
//!
//! - a request thread hands each request to a worker through a condition variable and
//!   waits; one request in three takes the worker's slow path (15 ms of thread CPU time in
//!   `worker_slow_path`): the slow requests name the worker as waker, and the worker's
//!   critical path during the wait is mostly on CPU in `worker_slow_path`;
//! - two marked threads contend on a mutex whose holder sleeps 20 ms inside its item: a
//!   waiter names the holder's thread and item;
//! - a marked program and a CPU hog pinned to the same CPU (both SCHED_RR, or nice -19
//!   where that is refused, so other work on the machine hardly competes): the items'
//!   runnable time names the hog's process for at least 80 % of it.
//!
//! No timing bounds: the programs guarantee what is asserted (CPU time measured with
//! CLOCK_THREAD_CPUTIME_ID, sleeps that last at least their length); shares are
//! majorities, not exact values.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

mod cfixture;

/// The recordings open CPU-wide events: one at a time (the hog test pins to CPU 0).
static SERIAL: Mutex<()> = Mutex::new(());

/// Two threads, items 1000+k and 2000+k; each holds the mutex for 20 ms inside its item,
/// then pauses 2 ms outside, so the two alternate and every item but the first waits.
const MUTEX: &str = r#"
#include <pthread.h>
#include <unistd.h>
#include "tailprof.h"
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) void hold_and_sleep(void) { usleep(20000); }
static void *run(void *arg) {
    unsigned long base = (unsigned long)arg;
    for (unsigned long k = 1; k <= 6; k++) {
        tailprof_item_begin(base + k);
        pthread_mutex_lock(&mu);
        hold_and_sleep();
        pthread_mutex_unlock(&mu);
        tailprof_item_end(base + k);
        usleep(2000); /* lets the waiter take the mutex (glibc's is not fair) */
    }
    return 0;
}
int main(void) {
    pthread_t a, b;
    if (pthread_create(&a, 0, run, (void *)1000UL)) return 1;
    if (pthread_create(&b, 0, run, (void *)2000UL)) return 1;
    pthread_join(a, 0);
    pthread_join(b, 0);
    return 0;
}
"#;

/// Pinned to CPU 0 under SCHED_RR (else nice -19), so the two take turns and other work on
/// the machine hardly runs there; argv[1] = "hog": spin for argv[2] ms; else: 200 items
/// of 2 ms of thread CPU time each.
const PINNED: &str = r#"
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "tailprof.h"
static volatile unsigned long sink;
static long ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
__attribute__((noinline)) void work(long cpu) {
    long start = ns(CLOCK_THREAD_CPUTIME_ID);
    do { for (unsigned i = 0; i < 20000; i++) sink += i; } while (ns(CLOCK_THREAD_CPUTIME_ID) - start < cpu);
}
int main(int argc, char **argv) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set)) return 2;
    struct sched_param sp = { .sched_priority = 1 };
    if (sched_setscheduler(0, SCHED_RR, &sp)) setpriority(PRIO_PROCESS, 0, -19);
    if (argc > 2 && !strcmp(argv[1], "hog")) {
        long end = ns(CLOCK_MONOTONIC) + atol(argv[2]) * 1000000L;
        while (ns(CLOCK_MONOTONIC) < end) for (unsigned i = 0; i < 20000; i++) sink += i;
        return 0;
    }
    for (unsigned long id = 1; id <= 200; id++) {
        tailprof_item_begin(id);
        work(2000000L);
        tailprof_item_end(id);
    }
    return 0;
}
"#;

fn root() -> bool {
    // SAFETY: plain getter.
    let r = unsafe { libc::geteuid() } == 0;
    if !r {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording wakeups and CPU-wide switches");
    }
    r
}

fn tailprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
}

fn cannot_record(err: &str) -> bool {
    ["perf_event_open", "tracefs", "perf_event_paranoid", "Permission denied", "not permitted"].iter().any(|s| err.contains(s))
}

/// `record -g --off-cpu -o TRACE -- CMD`; None (skip) when perf events cannot be opened.
fn record(dir: &Path, cmd: &[&str]) -> Option<PathBuf> {
    record_with(dir, &["--off-cpu"], cmd)
}

/// `record -g FLAGS -o TRACE -- CMD` (without `--off-cpu`, off-CPU and causes start at
/// the first marker).
fn record_with(dir: &Path, flags: &[&str], cmd: &[&str]) -> Option<PathBuf> {
    let trace = dir.join("t.trace");
    let o = tailprof().args(["record", "-g"]).args(flags).arg("-o").arg(&trace).arg("--").args(cmd).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    if !o.status.success() {
        if cannot_record(&err) {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format!("cannot record here: {err}"));
            return None;
        }
        panic!("record failed: {err}");
    }
    if err.contains("CPU-wide events not permitted") || err.contains("wakeups not recorded") {
        tailprof_testkit::skip(tailprof_testkit::Need::SystemWide, format!("no wakeups or CPU-wide events here: {err}"));
        return None;
    }
    Some(trace)
}

fn items(trace: &Path) -> Vec<Value> {
    let out = tailprof().args(["items", "--json", "--top", "0"]).arg(trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"].as_array().unwrap().clone()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn has_frame(frames: &Value, name: &str) -> bool {
    frames.as_array().is_some_and(|f| f.iter().any(|x| x.as_str() == Some(name)))
}

#[test]
fn slow_handoff_requests_name_the_worker_and_its_slow_path() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = cfixture::compile(dir.path(), "handoff", &[]) else {
        return;
    };
    let Some(trace) = record(dir.path(), &[bin.to_str().unwrap(), "30"]) else {
        return;
    };
    let items = items(&trace);
    assert_eq!(items.len(), 30);
    let slow: Vec<&Value> = items.iter().filter(|i| u(&i["id"]).is_multiple_of(3)).collect();
    let mut named = 0;
    for it in &slow {
        let (pid, tid) = (u(&it["pid"]), u(&it["tid"]));
        let woken = it["woken_by"].as_array().expect("woken_by");
        let Some(w) = woken.first() else { continue };
        // The worker: another thread of the same process, outside any item.
        if u(&w["pid"]) != pid || u(&w["tid"]) == tid || !w["item"].is_null() || !w["irq"].is_null() {
            continue;
        }
        assert!(u(&w["ns"]) > 0 && w["frames"].as_array().is_some_and(|f| !f.is_empty()), "{w}");
        let during = w["during"].as_array().unwrap();
        let cpu: u64 = during.iter().filter(|d| d["state"] == "cpu").map(|d| u(&d["ns"])).sum();
        let slow_path: u64 =
            during.iter().filter(|d| d["state"] == "cpu" && has_frame(&d["frames"], "worker_slow_path")).map(|d| u(&d["ns"])).sum();
        // Largest first.
        assert!(during.windows(2).all(|p| u(&p[0]["ns"]) >= u(&p[1]["ns"])), "{w}");
        if slow_path * 2 > cpu && cpu > 0 {
            named += 1;
        }
    }
    assert!(named * 3 >= slow.len() * 2, "{named} of {} slow requests name the worker's slow path: {slow:#?}", slow.len());
    // The fast requests are woken by the worker too, without the slow path.
    let fast_slow_path = items
        .iter()
        .filter(|i| !u(&i["id"]).is_multiple_of(3))
        .flat_map(|i| i["woken_by"].as_array().cloned().unwrap_or_default())
        .flat_map(|w| w["during"].as_array().cloned().unwrap_or_default())
        .filter(|d| has_frame(&d["frames"], "worker_slow_path"))
        .count();
    assert!(fast_slow_path <= 2, "fast requests should not wait for the slow path ({fast_slow_path})");
    // The Perfetto export draws the wake edges: flows from the worker to the requests.
    let pf = dir.path().join("t.perfetto.json");
    let out = tailprof().args(["export"]).arg(&trace).arg("--perfetto").arg(&pf).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&pf).unwrap()).unwrap();
    let flows = doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "wake" && e["ph"] == "f").count();
    assert!(flows >= 20, "{flows} wake flows for 30 requests");
    // The text names the waker and the slow path in its Causes section.
    let out = tailprof().args(["items", "--explain", "3"]).arg(&trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("\nCauses: ") && text.contains("woken by "), "{text}");
}

#[test]
fn mutex_waiter_names_the_holder_thread_and_item() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = cfixture::compile_source(dir.path(), "mutex", MUTEX, &[]) else {
        return;
    };
    let Some(trace) = record(dir.path(), &[bin.to_str().unwrap()]) else {
        return;
    };
    let items = items(&trace);
    assert_eq!(items.len(), 12);
    let by_id: std::collections::HashMap<u64, &Value> = items.iter().map(|i| (u(&i["id"]), i)).collect();
    let mut named = 0;
    for it in &items {
        for w in it["woken_by"].as_array().unwrap() {
            let Some(holder) = w["item"].as_u64().and_then(|id| by_id.get(&id)) else {
                continue;
            };
            // The holder: the other thread, inside an item of the other series.
            if u(&w["tid"]) == u(&holder["tid"]) && u(&holder["tid"]) != u(&it["tid"]) && u(&holder["id"]) / 1000 != u(&it["id"]) / 1000 {
                assert!(u(&w["ns"]) > 0);
                named += 1;
            }
        }
    }
    assert!(named >= 3, "waiters should name the holding thread's item: {items:#?}");
}

#[test]
fn runnable_time_names_the_cpu_hog() {
    hog_test(&["--off-cpu"]);
}

/// Regression (issue 21 known gap): without `--off-cpu` the off-CPU events open at the
/// first marker, and the CPU-wide context switches did not: `preempted_by` was empty.
#[test]
fn runnable_time_names_the_cpu_hog_when_off_cpu_starts_at_the_first_marker() {
    hog_test(&[]);
}

fn hog_test(flags: &[&str]) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bin) = cfixture::compile_source(dir.path(), "pinned", PINNED, &[]) else {
        return;
    };
    let mut hog = Command::new(&bin).args(["hog", "20000"]).spawn().unwrap();
    let hog_pid = hog.id() as u64;
    let rec = record_with(dir.path(), flags, &[bin.to_str().unwrap()]);
    let _ = hog.kill();
    let _ = hog.wait();
    let Some(trace) = rec else { return };
    let items = items(&trace);
    assert_eq!(items.len(), 200);
    // Items that began before off-CPU recording (at the first marker) have no split.
    let items: Vec<Value> = items.into_iter().filter(|i| !i["runnable_ns"].is_null()).collect();
    eprintln!("{} items with a wall-time split", items.len());
    assert!(items.len() >= 100, "{} items with a split", items.len());
    let runnable: u64 = items.iter().map(|i| u(&i["runnable_ns"])).sum();
    let behind_hog: u64 = items
        .iter()
        .flat_map(|i| i["preempted_by"].as_array().cloned().unwrap_or_default())
        .filter(|p| u(&p["pid"]) == hog_pid)
        .map(|p| u(&p["ns"]))
        .sum();
    assert!(runnable > 0, "the items were never preempted");
    assert!(
        behind_hog as f64 >= 0.8 * runnable as f64,
        "runnable {runnable} ns, behind the hog {behind_hog} ns: {:#?}",
        items.iter().map(|i| &i["preempted_by"]).filter(|p| p.as_array().is_some_and(|a| !a.is_empty())).take(5).collect::<Vec<_>>()
    );
    let comm_named = items
        .iter()
        .flat_map(|i| i["preempted_by"].as_array().cloned().unwrap_or_default())
        .any(|p| u(&p["pid"]) == hog_pid && p["comm"] == "pinned");
    assert!(comm_named, "the hog's comm should be named");
    // The whole-trace view ranks the hog first.
    let out = tailprof().args(["report", "--causes", "--json"]).arg(&trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processes"][0]["pid"].as_u64(), Some(hog_pid), "{v:#}");
    assert!(u(&v["processes"][0]["runnable_ns"]) >= behind_hog);
}

/// Items 1, 3, 5, ... touch 32 MiB of fresh anonymous memory page by page (page faults);
/// items 2, 4, 6, ... make 100,000 `getppid` and 300,000 `write`s to /dev/null (system
/// calls). 16 items.
const NOISE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "tailprof.h"
__attribute__((noinline)) void touch_fresh_memory(void) {
    size_t len = 32u << 20;
    char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(3);
    madvise(p, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) p[i] = (char)i;
    munmap(p, len);
}
__attribute__((noinline)) void many_syscalls(int fd) {
    char c = 0;
    for (int i = 0; i < 100000; i++) syscall(SYS_getppid);
    for (int i = 0; i < 300000; i++) if (write(fd, &c, 1) != 1) _exit(4);
}
int main(void) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) return 2;
    for (unsigned long id = 1; id <= 16; id++) {
        tailprof_item_begin(id);
        if (id % 2) touch_fresh_memory(); else many_syscalls(fd);
        tailprof_item_end(id);
    }
    return 0;
}
"#;

/// A copy of this machine's /proc/kallsyms for the analysis (`TAILPROF_KALLSYMS=FILE`),
/// or None (skip) when it hides the addresses.
fn kallsyms_copy(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let real = text.lines().take(1000).any(|l| l.split_whitespace().next().is_some_and(|a| !a.trim_start_matches('0').is_empty()));
    if !real {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "/proc/kallsyms shows no addresses: kernel frames cannot be named");
        return None;
    }
    let f = dir.join("kallsyms");
    std::fs::write(&f, text).unwrap();
    Some(f)
}

/// A program recorded and its items read with kernel frames named from a copy of this
/// machine's kallsyms (the directory lives as long as this).
struct KernelNamed {
    _dir: tempfile::TempDir,
    trace: PathBuf,
    kallsyms: PathBuf,
    items: Vec<Value>,
}

/// Compile `src` as `name`, record it (`record -g --off-cpu FLAGS`) and read its items with
/// kernel names; None (skipped, said) without root, a compiler, kernel addresses or
/// permission to record.
fn record_items_with_kernel_names(name: &str, src: &str, flags: &[&str]) -> Option<KernelNamed> {
    if !root() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = cfixture::compile_source(dir.path(), name, src, &[])?;
    let kallsyms = kallsyms_copy(dir.path())?;
    let flags: Vec<&str> = ["--off-cpu"].into_iter().chain(flags.iter().copied()).collect();
    let trace = record_with(dir.path(), &flags, &[bin.to_str().unwrap()])?;
    let items = items_with(&trace, kallsyms.to_str().unwrap());
    Some(KernelNamed { _dir: dir, trace, kallsyms, items })
}

fn items_with(trace: &Path, kallsyms: &str) -> Vec<Value> {
    let out = tailprof()
        .args(["items", "--json", "--top", "0"])
        .arg(trace)
        .env("TAILPROF_CACHE_DIR", "off")
        .env("TAILPROF_KALLSYMS", kallsyms)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"].as_array().unwrap().clone()
}

/// On-CPU noise (issue 21, part 5): the page-faulting items' kernel time is named page
/// faults, the syscall items' is named by call (`getppid`, `write`); without kernel
/// symbols it is "unknown", not guessed.
#[test]
fn noise_names_page_faults_and_syscalls() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(KernelNamed { _dir: _keep, trace, kallsyms: ks, items }) = record_items_with_kernel_names("noise", NOISE, &[]) else {
        return;
    };
    assert_eq!(items.len(), 16);
    let sum = |odd: bool, f: &dyn Fn(&Value) -> u64| -> u64 {
        items.iter().filter(|i| (u(&i["id"]) % 2 == 1) == odd).map(|i| f(&i["noise"])).sum()
    };
    let syscall = |n: &Value, name: &str| -> u64 {
        n["syscalls"].as_array().unwrap().iter().filter(|s| s["name"] == name).map(|s| u(&s["ns"])).sum()
    };
    let all_syscalls = |n: &Value| -> u64 { n["syscalls"].as_array().unwrap().iter().map(|s| u(&s["ns"])).sum() };
    let (faults, fault_items_syscalls) = (sum(true, &|n| u(&n["page_fault_ns"])), sum(true, &all_syscalls));
    let (getppid, write) = (sum(false, &|n| syscall(n, "getppid")), sum(false, &|n| syscall(n, "write")));
    let syscall_items_faults = sum(false, &|n| u(&n["page_fault_ns"]));
    let unknown = sum(true, &|n| u(&n["unknown_kernel_ns"])) + sum(false, &|n| u(&n["unknown_kernel_ns"]));
    eprintln!(
        "fault items: page faults {faults} ns, syscalls {fault_items_syscalls} ns; syscall items: getppid {getppid} ns, \
         write {write} ns, page faults {syscall_items_faults} ns; unknown {unknown} ns"
    );
    assert!(faults > 0 && faults > fault_items_syscalls, "{items:#?}");
    assert!(getppid > 0 && write > 0, "{items:#?}");
    assert!(getppid + write > syscall_items_faults, "{items:#?}");
    assert_eq!(unknown, 0, "with kernel symbols every kernel frame has a name");
    // The explanation names them too.
    let out = tailprof()
        .args(["items", "--explain", "1"])
        .arg(&trace)
        .env("TAILPROF_CACHE_DIR", "off")
        .env("TAILPROF_KALLSYMS", &ks)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("page faults ("), "{text}");
    // Without kernel symbols: the same time, unknown.
    let items = items_with(&trace, "off");
    let named: u64 = items.iter().map(|i| u(&i["noise"]["page_fault_ns"]) + all_syscalls(&i["noise"])).sum();
    let unknown: u64 = items.iter().map(|i| u(&i["noise"]["unknown_kernel_ns"])).sum();
    assert_eq!(named, 0, "no kernel symbols: nothing named");
    assert!(unknown > 0, "{items:#?}");
}

/// Items 1, 3, 5, ... sleep 3 ms (`nanosleep`: an hrtimer interrupt wakes the thread);
/// items 2, 4, 6, ... hand a byte to a helper thread through a pipe and wait for its
/// answer, which it writes after 2 ms of thread CPU time in `helper_work` (a thread wakes
/// the item's thread in `pipe_write`). 20 items.
const WAKERS: &str = r#"
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include "tailprof.h"
static int req[2], rsp[2];
static volatile unsigned long sink;
static long cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
__attribute__((noinline)) void helper_work(void) {
    long start = cpu_ns();
    do { for (unsigned i = 0; i < 20000; i++) sink += i; } while (cpu_ns() - start < 2000000L);
}
static void *helper(void *arg) {
    char c;
    (void)arg;
    while (read(req[0], &c, 1) == 1) {
        helper_work();
        if (write(rsp[1], &c, 1) != 1) break;
    }
    return 0;
}
int main(void) {
    pthread_t t;
    char c = 'x';
    struct timespec ms3 = { 0, 3000000 };
    if (pipe(req) || pipe(rsp) || pthread_create(&t, 0, helper, 0)) return 1;
    for (unsigned long id = 1; id <= 20; id++) {
        tailprof_item_begin(id);
        if (id % 2) {
            nanosleep(&ms3, 0);
        } else if (write(req[1], &c, 1) != 1 || read(rsp[0], &c, 1) != 1) {
            return 2;
        }
        tailprof_item_end(id);
    }
    close(req[1]);
    pthread_join(t, 0);
    return 0;
}
"#;

/// The recorder walks only the part of a waker's stack that the analysis reads (issue 21,
/// recording cost; docs/STACKS.md "Wakeups and CPU-wide switches"): a timer interrupt's
/// wakeup keeps its kernel frames (`hrtimer_wakeup`, so its kind is "timer"); a thread's
/// wakeup keeps its user frames and no kernel part (no `try_to_wake_up` ← … ←
/// `entry_SYSCALL_64`), which the kernel no longer unwinds.
#[test]
fn waker_stacks_keep_the_kernel_part_of_interrupts_and_the_user_part_of_threads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(KernelNamed { items, .. }) = record_items_with_kernel_names("wakers", WAKERS, &[]) else {
        return;
    };
    assert_eq!(items.len(), 20);
    const KERNEL_PART: &[&str] = &["try_to_wake_up", "__wake_up_common", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"];
    let (mut timer, mut thread) = (0, 0);
    for it in &items {
        let (pid, tid) = (u(&it["pid"]), u(&it["tid"]));
        for w in it["woken_by"].as_array().expect("woken_by") {
            let frames = &w["frames"];
            if u(&it["id"]) % 2 == 1 && w["irq"] == "timer" {
                assert!(has_frame(frames, "hrtimer_wakeup"), "a timer wakeup keeps its kernel frames: {w}");
                timer += 1;
            }
            if u(&it["id"]).is_multiple_of(2) && w["irq"].is_null() && u(&w["pid"]) == pid && u(&w["tid"]) != tid {
                assert!(frames.as_array().is_some_and(|f| !f.is_empty()), "the helper's user frames: {w}");
                for k in KERNEL_PART {
                    assert!(!has_frame(frames, k), "a thread's wakeup has no kernel part ({k}): {w}");
                }
                thread += 1;
            }
        }
    }
    assert!(timer >= 5, "{timer} of 10 sleeping items woken by a timer: {items:#?}");
    assert!(thread >= 5, "{thread} of 10 handing-off items woken by the helper thread: {items:#?}");
}

/// `record --full-waker-stacks`: every waker's whole stack, so a thread's wakeup keeps its
/// kernel part too (the wake mechanism down to the system call), as `perf record -e
/// sched:sched_waking -g` records it, and a timer's wakeup is still named a timer.
#[test]
fn full_waker_stacks_keep_the_kernel_part_of_thread_wakeups() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(KernelNamed { items, .. }) = record_items_with_kernel_names("wakers", WAKERS, &["--full-waker-stacks"]) else {
        return;
    };
    let (mut timer, mut thread) = (0, 0);
    for it in &items {
        let (pid, tid) = (u(&it["pid"]), u(&it["tid"]));
        for w in it["woken_by"].as_array().expect("woken_by") {
            if u(&it["id"]) % 2 == 1 && w["irq"] == "timer" {
                timer += 1;
            }
            if u(&it["id"]).is_multiple_of(2) && w["irq"].is_null() && u(&w["pid"]) == pid && u(&w["tid"]) != tid {
                assert!(has_frame(&w["frames"], "try_to_wake_up"), "a thread's wakeup keeps its kernel part: {w}");
                thread += 1;
            }
        }
    }
    assert!(timer >= 5, "{timer} of 10 sleeping items woken by a timer: {items:#?}");
    assert!(thread >= 5, "{thread} of 10 handing-off items woken by the helper thread: {items:#?}");
}
