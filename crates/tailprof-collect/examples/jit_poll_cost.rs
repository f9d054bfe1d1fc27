//! CPU cost of the recorder's (and the agent's) perf-map polling (issue 23,
//! docs/BENCHMARKS.md "Perf-map polling"): N processes (`sleep` children), each with a
//! `/tmp/perf-PID.map` that grows by L lines between polls (or no map at all), polled
//! as the recorder polls them (`JitCollector::poll`, every 100 ms of recorder time).
//!
//! ```text
//! cargo run --release -p tailprof-collect --example jit_poll_cost -- [N] [POLLS] [LINES] [maps|nomaps]
//! ```
//! Prints the CPU time (this thread's) per poll and per process and poll.

use std::io::Write;
use std::process::{Child, Command};

use tailprof_collect::jit::{JitCollector, JitLimits};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let polls: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
    let lines: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);
    let maps = args.get(4).is_none_or(|m| m == "maps");
    let mut children: Vec<Child> = (0..n).map(|_| Command::new("sleep").arg("1000").spawn().expect("spawn sleep")).collect();
    let mut files = Vec::new();
    if maps {
        for c in &children {
            let path = format!("/tmp/perf-{}.map", c.id());
            let mut f = std::fs::File::create(&path).expect("create map");
            // A map that has been growing for a while: 1 MB already there.
            for i in 0..16_000u64 {
                writeln!(f, "{:x} 40 LazyCompile:*fn{i} /srv/app.js:{i}", 0x7f00_0000_0000u64 + i * 0x40).unwrap();
            }
            files.push((path, f));
        }
    }
    let mut c = JitCollector::new(JitLimits::default(), true);
    for ch in &children {
        c.note_process(ch.id());
    }
    // The first poll reads what is there already (not measured: a one-off).
    let mut now = 1_000_000_000u64;
    c.poll(now, false);
    let first = c.take_entries().len();
    let mut cpu = Vec::with_capacity(polls);
    let mut entries = 0usize;
    let mut next = 16_000u64;
    for _ in 0..polls {
        for (_, f) in &mut files {
            for _ in 0..lines {
                writeln!(f, "{:x} 40 LazyCompile:*fn{next} /srv/app.js:{next}", 0x7f00_0000_0000u64 + next * 0x40).unwrap();
                next += 1;
            }
        }
        now += 100_000_000;
        let t0 = thread_cpu_ns();
        c.poll(now, false);
        let t1 = thread_cpu_ns();
        entries += c.take_entries().len();
        cpu.push(t1 - t0);
    }
    cpu.sort_unstable();
    let mean = cpu.iter().sum::<u64>() as f64 / polls as f64;
    println!(
        "processes {n} | maps {maps} | lines per map per poll {lines} | polls {polls} | first poll read {first} entries | later polls read {entries}"
    );
    println!(
        "CPU per poll: mean {:.1} µs, median {:.1} µs, p90 {:.1} µs, max {:.1} µs | per process and poll {:.2} µs | at 10 polls/s: {:.2}% of a CPU",
        mean / 1e3,
        cpu[polls / 2] as f64 / 1e3,
        cpu[polls * 9 / 10] as f64 / 1e3,
        cpu[polls - 1] as f64 / 1e3,
        mean / 1e3 / n as f64,
        mean * 10.0 / 1e9 * 100.0
    );
    for ch in &mut children {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    for (p, _) in files {
        let _ = std::fs::remove_file(p);
    }
}
