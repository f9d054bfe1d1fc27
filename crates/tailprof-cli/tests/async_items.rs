//! Requests that share a thread (issue 24): switch markers make per-item CPU time right
//! for event-loop and async servers, recorded for real with `tailprof record`.
//!
//! - Python asyncio (std lib, tests/data/asyncio_server.py): 50 concurrent requests over
//!   TCP on one thread, each doing request-specific CPU work split around awaits and
//!   measuring it with `time.thread_time_ns`. With `install_asyncio()`, each item's on-CPU
//!   estimate (samples × period) matches its own measured CPU time within sampling error
//!   (items with ≥ 20 samples) and the sum within 5%; without it the same requests are
//!   reported as ambiguous.
//! - C: an epoll loop over pipes (include/tailprof.h) interleaves requests with
//!   `tailprof_item_switch`; per-item time (top function `work_part`) matches the CPU time
//!   the program logs around `work_part`.
//! - Rust: the `Future` adapter (`fut.in_item(id, &CLASS)`) on a hand-written executor with
//!   two worker threads (not Tokio: its build cost on 2 cores is not worth it for a test);
//!   tasks move between the workers and stay one item each. The workload is this test
//!   binary itself, re-run under `tailprof record` (test `rust_future_workload`).
//!
//! Skips with a message when perf events cannot be opened, or without python3 / cc. The
//! bounds are statistical (counts of a 4 kHz cpu-clock), never timings: per item
//! |samples − truth/period| ≤ 4·√(truth/period) + parts + 2.

use serde_json::Value;
use std::process::Command;

mod async_common;
mod cfixture;
use async_common::*;

fn python_server(plain: bool) -> Option<(Value, String)> {
    if !have("python3") {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = root().join("crates/tailprof-cli/tests/data/asyncio_server.py");
    let py = root().join("python");
    let mut cmd = vec!["python3", script.to_str().unwrap(), py.to_str().unwrap(), "50"];
    if plain {
        cmd.push("plain");
    }
    let (trace, out) = record(dir.path(), "asyncio", &cmd, &[])?;
    assert!(out.contains("enabled 1"), "markers were not enabled: {out}");
    Some((items_json(&trace), out))
}

#[test]
fn asyncio_items_match_each_requests_own_cpu_time() {
    let Some((v, out)) = python_server(false) else {
        return;
    };
    assert!(out.contains("installed 1"), "{out}");
    let truth = logged(&out, "truth");
    assert_eq!(truth.len(), 50, "{out}");
    let est = samples_times_interval(&v);
    let compared = check_against_truth(&v, &truth, 4.0, &est);
    assert!(compared >= 25, "only {compared} items had 20 samples: {v}");
    assert_eq!(v["switching"]["threads"], 1, "{}", v["switching"]);
    assert_eq!(v["ambiguity"]["items"], 0, "{}", v["ambiguity"]);
    for it in v["items"].as_array().unwrap() {
        let sw = &it["switching"];
        // Begin + 4 resumes after the sleeps (at least: drain() may yield too).
        assert!(sw["resumes"].as_u64().unwrap() >= 5, "{it}");
        let (cur, wait, wall) =
            (sw["current_ns"].as_u64().unwrap(), sw["waiting_in_loop_ns"].as_u64().unwrap(), it["duration_ns"].as_u64().unwrap());
        assert_eq!(cur + wait, wall, "one thread: current + waiting = wall: {it}");
        assert!(it["cpu_ns"].as_u64().unwrap() <= cur, "on-CPU time only while current: {it}");
    }
}

/// The same server without `install_asyncio()`: begin/end only, the requests overlap on
/// the loop's thread, and `items` says so instead of printing confident numbers.
#[test]
fn asyncio_without_switch_markers_is_reported_ambiguous() {
    let Some((v, out)) = python_server(true) else {
        return;
    };
    assert!(out.contains("installed 0"), "{out}");
    let amb = &v["ambiguity"];
    assert!(amb["items"].as_u64().unwrap() >= 40, "{amb}");
    assert!(amb["samples"].as_u64().unwrap() > 0, "{amb}");
    let w = v["warnings"].as_array().unwrap();
    assert!(w.iter().any(|w| w["kind"] == "ambiguous_attribution"), "{w:?}");
    assert_eq!(v["switching"]["markers"], 0);
}

#[test]
fn c_epoll_loop_with_switch_markers_matches_logged_truth() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cfixture::compile(dir.path(), "epoll_loop", &[]) else { return };
    let Some((trace, out)) = record(dir.path(), "epoll", &[exe.to_str().unwrap()], &[]) else {
        return;
    };
    let truth = logged(&out, "truth");
    assert_eq!(truth.len(), 24, "{out}");
    let v = items_json(&trace);
    // The program measures `work_part` with the thread's CPU clock, a system call, so
    // part of the truth is kernel time under it: compare the item's samples, and check
    // that `work_part` is its top function.
    let est = samples_times_interval(&v);
    let compared = check_against_truth(&v, &truth, 4.0, &est);
    assert!(compared >= 12, "only {compared} items had 20 samples: {v}");
    assert_eq!(v["ambiguity"]["items"], 0, "{}", v["ambiguity"]);
    assert_eq!(v["unmatched_markers"], 0);
    for it in v["items"].as_array().unwrap() {
        assert_eq!(it["class"], "pipe");
        assert_eq!(it["switching"]["resumes"], 4, "begin + 3 switches: {it}");
        assert_eq!(it["functions"][0]["name"], "work_part", "{it}");
    }
}

/// The Rust workload, run only inside `tailprof record` (see the next test): 16 tasks on a
/// two-thread executor, each `in_item`, doing request-specific CPU work in 4 parts with a
/// yield between them (the task goes back to the shared queue, so either worker may
/// resume it). Prints `truth ID NS` and `threads ID N` (distinct workers that polled it).
#[test]
fn rust_future_workload() {
    if std::env::var_os("TAILPROF_H5_WORKLOAD").is_none() {
        return;
    }
    executor::run();
}

#[test]
fn rust_future_adapter_is_one_item_per_task_across_threads() {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cmd = [exe.to_str().unwrap(), "--exact", "rust_future_workload", "--nocapture", "--test-threads", "1"];
    let Some((trace, out)) = record(dir.path(), "rust", &cmd, &[("TAILPROF_H5_WORKLOAD", "1")]) else {
        return;
    };
    let truth = logged(&out, "truth");
    let threads = logged(&out, "threads");
    assert_eq!(truth.len(), executor::TASKS as usize, "{out}");
    let v = items_json(&trace);
    let est = samples_times_interval(&v);
    let compared = check_against_truth(&v, &truth, executor::PARTS as f64, &est);
    assert!(compared >= 8, "only {compared} items had 20 samples: {v}");
    let moved = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|it| {
            let id = it["id"].as_u64().unwrap();
            let n = it["switching"]["threads"].as_u64().unwrap();
            // A poll too short to be current over a sample still counts as current time,
            // so the trace sees every worker that polled the task.
            assert_eq!(n, threads[&id], "item {id}: {it}");
            n > 1
        })
        .count();
    assert!(moved > 0, "no task moved between the workers: {out}");
    assert_eq!(v["switching"]["threads"], 2, "{}", v["switching"]);
}

/// A minimal multi-thread executor: a shared queue, two workers, wake = push back.
mod executor {
    use std::collections::{HashSet, VecDeque};
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Condvar, Mutex};
    use std::task::{Context, Poll, Wake, Waker};

    use tailprof_markers::{ClassLabel, InItem};

    pub const TASKS: u64 = 16;
    pub const PARTS: u64 = 4;
    static TASK: ClassLabel = ClassLabel::new(c"task");

    type BoxFut = Pin<Box<dyn Future<Output = ()> + Send>>;

    struct Task {
        fut: Mutex<Option<BoxFut>>,
        queue: Arc<Queue>,
    }

    #[derive(Default)]
    struct Queue {
        q: Mutex<(VecDeque<Arc<Task>>, u64)>,
        cv: Condvar,
    }

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            let q = self.queue.clone();
            q.q.lock().unwrap().0.push_back(self);
            q.cv.notify_one();
        }
    }

    fn cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    #[inline(never)]
    fn spin(ns: u64) -> u64 {
        let t0 = cpu_ns();
        let mut x = 0u64;
        loop {
            for i in 0..2000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            let t = cpu_ns();
            if t - t0 >= ns {
                return t - t0;
            }
        }
    }

    /// Pending once, waking itself: the task goes back to the queue.
    struct Yield(bool);
    impl Future for Yield {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn tid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::gettid() as u32 }
    }

    pub fn run() {
        let queue = Arc::new(Queue::default());
        let report = Arc::new(Mutex::new(Vec::new()));
        for id in 1..=TASKS {
            let report = report.clone();
            let fut = async move {
                let (mut cpu, mut seen) = (0, HashSet::new());
                for _ in 0..PARTS {
                    seen.insert(tid());
                    cpu += spin((id % 4 + 1) * 4_000_000);
                    Yield(false).await;
                }
                seen.insert(tid());
                report.lock().unwrap().push((id, cpu, seen.len()));
            }
            .in_item(id, &TASK);
            let task = Arc::new(Task { fut: Mutex::new(Some(Box::pin(fut))), queue: queue.clone() });
            queue.q.lock().unwrap().0.push_back(task);
        }
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let queue = queue.clone();
                std::thread::spawn(move || loop {
                    let task = {
                        let mut g = queue.q.lock().unwrap();
                        loop {
                            if g.1 == TASKS {
                                return;
                            }
                            if let Some(t) = g.0.pop_front() {
                                break t;
                            }
                            g = queue.cv.wait(g).unwrap();
                        }
                    };
                    let waker = Waker::from(task.clone());
                    let mut slot = task.fut.lock().unwrap();
                    if let Some(mut f) = slot.take() {
                        if f.as_mut().poll(&mut Context::from_waker(&waker)).is_pending() {
                            *slot = Some(f);
                        } else {
                            queue.q.lock().unwrap().1 += 1;
                            queue.cv.notify_all();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        // The harness printed "test rust_future_workload ... " without a newline.
        println!();
        for (id, cpu, n) in report.lock().unwrap().iter() {
            println!("truth {id} {cpu}");
            println!("threads {id} {n}");
        }
    }
}

/// Issue 24 part 3: OpenTelemetry Python SDK spans become items through
/// `tailprof_markers.otel.TailprofSpanProcessor` (tests/data/otel_spans.py): every SERVER
/// span is one item with the span name as class and the span's trace and span id, the
/// INTERNAL child spans are not items, and `--trace-id` finds the slow request, whose
/// `--explain` names its trace.
#[test]
fn otel_spans_become_items_and_trace_id_finds_the_slow_one() {
    if !have("python3") {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not installed");
        return;
    }
    let probe = Command::new("python3").args(["-c", "import opentelemetry.sdk.trace"]).output().unwrap();
    if !probe.status.success() {
        tailprof_testkit::skip(
            tailprof_testkit::Need::OpenTelemetry,
            "the OpenTelemetry Python SDK is not installed (pip install opentelemetry-sdk)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = root().join("crates/tailprof-cli/tests/data/otel_spans.py");
    let py = root().join("python");
    let Some((trace, out)) = record(dir.path(), "otel", &["python3", script.to_str().unwrap(), py.to_str().unwrap()], &[]) else {
        return;
    };
    assert!(out.contains("enabled 1") && out.contains("installed 1"), "{out}");
    // span TRACE SPAN NAME...
    let spans: Vec<(String, String, String)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("span "))
        .map(|l| {
            let mut w = l.splitn(3, ' ');
            (w.next().unwrap().to_owned(), w.next().unwrap().to_owned(), w.next().unwrap().to_owned())
        })
        .collect();
    assert_eq!(spans.len(), 15, "{out}");
    let slow = out.lines().find_map(|l| l.strip_prefix("slow ")).expect("slow line").to_owned();

    let v = items_json(&trace);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 15, "one item per SERVER span, none for the child spans: {v}");
    for (trace_id, span_id, name) in &spans {
        let it = items.iter().find(|it| it["trace_id"] == trace_id.as_str()).unwrap_or_else(|| panic!("no item of trace {trace_id}: {v}"));
        assert_eq!(it["span_id"], span_id.as_str(), "{it}");
        assert_eq!(it["class"], name.as_str(), "{it}");
        assert_eq!(it["id"].as_u64().unwrap(), u64::from_str_radix(span_id, 16).unwrap(), "item id = span id: {it}");
    }
    assert_eq!(v["switching"]["threads"], 1, "spans follow their task: {}", v["switching"]);
    assert_eq!(v["ambiguity"]["items"], 0, "{}", v["ambiguity"]);

    // --trace-id (upper case, as some UIs show it) finds exactly the slow request.
    let o = tailprof()
        .args(["items", "--json", "--trace-id", &slow.to_uppercase()])
        .arg(&trace)
        .env("TAILPROF_CACHE_DIR", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sel: Value = serde_json::from_slice(&o.stdout).unwrap();
    let sel = sel["items"].as_array().unwrap();
    assert_eq!(sel.len(), 1, "{sel:?}");
    assert_eq!(sel[0]["trace_id"], slow.as_str());
    let slowest = items.iter().max_by_key(|it| it["samples"].as_u64().unwrap()).unwrap();
    assert_eq!(slowest["trace_id"], slow.as_str(), "the slow request has the most samples");

    let id = sel[0]["id"].as_u64().unwrap().to_string();
    let o = tailprof().args(["items", "--explain", &id]).arg(&trace).env("TAILPROF_CACHE_DIR", "off").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains(&format!("# Trace {slow}, span ")), "{text}");

    // An unknown trace id is an error that names it.
    let o = tailprof()
        .args(["items", "--trace-id", "0123456789abcdef0123456789abcdef"])
        .arg(&trace)
        .env("TAILPROF_CACHE_DIR", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("0123456789abcdef0123456789abcdef") && err.contains("15 items"), "{err}");
}
