//! How many seconds of context switches and wakeups the agent keeps for the causes of
//! retained requests (issue 21, docs/BENCHMARKS.md "Agent"): a synthetic pipe ping-pong at
//! a given rate (default 100k context switches/s on 2 CPUs; each switch is a CPU-wide
//! switch-out with the next task, the next task's switch-in and the wakeup that made it
//! runnable, the waker's stack of 12 frames when the woken thread is inside a request),
//! fed to the retainer until its bounds first evict a record before its time.
//!
//! `cargo run --release -p tailprof-agent --example cause_coverage [SWITCHES_PER_S] [SECONDS]`

use tailprof_agent::tail::TailRetainer;
use tailprof_format::{Marker, MarkerKind, Switch, SwitchKind, Wakeup};

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    let step = 1_000_000_000 / rate.max(1);
    let mut t = TailRetainer::new(None, 0.0);
    // Thread 11 (pid 10) is inside one long request; thread 21 (pid 20) is not.
    t.handle_marker(&Marker { time: 0, pid: 10, tid: 11, kind: MarkerKind::Begin, item: 1, ..Marker::default() }, "server");
    let frames: Vec<(u32, u64)> = (0..12).map(|i| (u32::MAX - 1, 0xffff_0000 + i * 64)).collect();
    let (mut first_evict, mut now) = (None, 0u64);
    let started = std::time::Instant::now();
    let end = seconds * 1_000_000_000;
    let mut n = 0u64;
    while now < end {
        now += step;
        // Alternately 11 wakes 21 and blocks, then 21 wakes 11 and blocks (CPU n % 2).
        let (a, b) = if n % 2 == 0 { ((10, 11), (20, 21)) } else { ((20, 21), (10, 11)) };
        let cpu = (n % 2) as u32;
        t.handle_wakeup(&Wakeup { time: now, pid: a.0, tid: a.1, cpu, wakee_tid: b.1, ..Wakeup::default() }, &frames);
        t.handle_switch(&Switch {
            time: now + 1,
            pid: a.0,
            tid: a.1,
            cpu,
            kind: SwitchKind::OutBlocked,
            next_prev: Some(b),
            ..Switch::default()
        });
        t.handle_switch(&Switch { time: now + 2, pid: b.0, tid: b.1, cpu, kind: SwitchKind::In, next_prev: Some(a), ..Switch::default() });
        n += 1;
        if first_evict.is_none() && (t.stats.kept_switches_evicted > 0 || t.stats.kept_wakeups_evicted > 0) {
            first_evict = Some(now);
        }
    }
    let secs = |ns: u64| ns as f64 / 1e9;
    match first_evict {
        Some(at) => println!(
            "{rate} switches/s: kept switches and wakeups cover {:.2} s (first eviction before its time at {:.2} s; evicted {} switch records, {} wakeups)",
            secs(at),
            secs(at),
            t.stats.kept_switches_evicted,
            t.stats.kept_wakeups_evicted
        ),
        None => println!("{rate} switches/s: nothing evicted before its time in {seconds} s"),
    }
    println!("fed {n} switches ({} records) in {:.2} s of CPU", 3 * n, started.elapsed().as_secs_f64());
}
