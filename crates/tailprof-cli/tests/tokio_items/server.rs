//! The Tokio workload of tests/tokio_items.rs, run only inside `tailprof record`: a
//! multi-thread runtime with two workers, `TASKS` concurrent requests, each doing
//! request-specific CPU work in `PARTS` parts with an await between them (alternately
//! `yield_now()` and a 1 ms sleep, so tasks go back to the scheduler and either worker
//! may resume them). Each request is marked either with `fut.in_item(id, &REQUEST)` or,
//! through `tracing`, as an instrumented span made an item by `TailprofLayer`.
//!
//! Prints `truth ID NS` (the request's CPU time by the thread CPU clock around its work),
//! `threads ID N` (distinct threads that polled the request) and, for the tracing mode,
//! `trace ID TRACE_ID SPAN_ID`.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tailprof_markers::{ClassLabel, InItem, TailprofLayer};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

pub const TASKS: u64 = 60;
pub const PARTS: u64 = 4;
static REQUEST: ClassLabel = ClassLabel::new(c"request");

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    InItem,
    Tracing,
}

fn cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn tid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Spins for `ns` of this thread's CPU time; returns the CPU time it measured.
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

/// Notes the thread of every poll of the inner future (the polls the markers see).
struct PollThreads<F> {
    inner: Pin<Box<F>>,
    seen: HashSet<u32>,
}

impl<F: Future> Future for PollThreads<F> {
    type Output = (F::Output, usize);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.seen.insert(tid());
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready((v, self.seen.len())),
            Poll::Pending => Poll::Pending,
        }
    }
}

async fn request(id: u64) -> u64 {
    let mut cpu = 0;
    for part in 0..PARTS {
        cpu += spin((id % 5 + 1) * 1_200_000);
        if part % 2 == 0 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    cpu
}

/// W3C ids of request `id` in the tracing mode (hex).
pub fn ids(id: u64) -> (String, String) {
    (format!("{:032x}", 0x7470_0000_0000_0000_0000_0000_0000_0000u128 + id as u128), format!("{:016x}", 0x5000 + id))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
pub async fn run(mode: Mode) {
    if mode == Mode::Tracing {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(TailprofLayer::new())).expect("no other subscriber");
    }
    let mut handles = Vec::new();
    for id in 1..=TASKS {
        let fut = PollThreads { inner: Box::pin(request(id)), seen: HashSet::new() };
        let h = match mode {
            Mode::InItem => tokio::spawn(fut.in_item(id, &REQUEST)),
            Mode::Tracing => {
                let (trace_id, span_id) = ids(id);
                let span = tracing::info_span!(
                    "request",
                    tailprof.item_id = id,
                    trace_id = %trace_id,
                    span_id = %span_id
                );
                tokio::spawn(fut.instrument(span))
            }
        };
        handles.push((id, h));
    }
    let mut out = String::from("\n"); // the harness printed "test ... " without a newline
    for (id, h) in handles {
        let (cpu, threads) = h.await.expect("request task");
        out += &format!("truth {id} {cpu}\nthreads {id} {threads}\n");
        if mode == Mode::Tracing {
            let (t, s) = ids(id);
            out += &format!("trace {id} {t} {s}\n");
        }
    }
    print!("{out}");
}
