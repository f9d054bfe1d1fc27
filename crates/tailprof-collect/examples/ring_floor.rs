//! The floor of system-wide recording: what `tailprof record -a -e cpu-clock -c N` costs
//! before it does anything with a record (issue 9, `bench/record-a.sh` tool `floor`).
//!
//! It opens the same event tailprof opens for `-a -e cpu-clock -c N` (the attr comes from
//! [`tailprof_collect::attr::build_attr`] with the recorder's settings for a system-wide
//! target: disabled until enabled, no inherit, side-band on, watermark wakeup at half the
//! ring, the machine's clock), one per online CPU, each with its own ring of the same size
//! (`--mmap-pages`, default 128 like `record`). It maps the rings, then enables the
//! events, waits on epoll for the watermark wakeups (100 ms timeout, like the recorder's
//! loop) and on each wakeup walks every record of every ring with [`Ring::drain`]: it
//! reads each record's header (counts it by type) and the lost count of LOST and
//! LOST_SAMPLES records, and throws the record away. At the end it disables the events,
//! drains once more and prints one JSON line: `records`, `samples`, `lost`, `wakeups`.
//!
//! Deliberately left out, so that its CPU time is the cost of reading the data at all (the
//! sampling interrupts billed to whoever runs, the wakeups, the cache misses on memory the
//! kernel just wrote): synthesizing the side-band from /proc, the marker transport, the
//! drain thread, decoding, merging CPUs in time order, encoding, compressing and writing.
//!
//!   ring_floor [-c PERIOD] [--mmap-pages N] (--secs S | -- CMD ...)
//!
//! With `-- CMD` it runs CMD (released after the events are enabled) and stops when it
//! exits (its rusage is included in this process's: it is waited for).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tailprof_collect::attr::{build_attr, SamplingConfig};
use tailprof_collect::caps::Capabilities;
use tailprof_collect::event::EventSpec;
use tailprof_collect::ring::Ring;
use tailprof_collect::{sys, target};
use tailprof_perf_abi::record_type::{LOST, LOST_SAMPLES, SAMPLE};

const USAGE: &str = "usage: ring_floor [-c PERIOD] [--mmap-pages N] (--secs S | -- CMD ...)";
/// epoll data value of the command's pidfd (ring tokens are their indexes).
const PIDFD_TOKEN: u64 = u64::MAX;

/// What was read out of the rings.
#[derive(Default)]
struct Counts {
    records: u64,
    samples: u64,
    lost: u64,
    wakeups: u64,
}

impl Counts {
    /// Look at one record's header (and a LOST count), nothing else.
    fn record(&mut self, rec: &[u8]) {
        self.records += 1;
        let ty = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let u64_at = |off: usize| rec.get(off..off + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()));
        match ty {
            SAMPLE => self.samples += 1,
            LOST => self.lost += u64_at(16),        // header, id, lost
            LOST_SAMPLES => self.lost += u64_at(8), // header, lost
            _ => {}
        }
    }

    fn drain_all(&mut self, rings: &mut [Ring]) {
        for r in rings {
            r.drain(|rec| self.record(rec));
        }
    }
}

struct Args {
    period: u64,
    pages: usize,
    secs: Option<f64>,
    cmd: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { period: 10_000, pages: 128, secs: None, cmd: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value; {USAGE}"));
        match arg.as_str() {
            "-c" => a.period = value("-c")?.parse().map_err(|e| format!("-c: {e}"))?,
            "--mmap-pages" => a.pages = value("--mmap-pages")?.parse().map_err(|e| format!("--mmap-pages: {e}"))?,
            "--secs" => a.secs = Some(value("--secs")?.parse().map_err(|e| format!("--secs: {e}"))?),
            "--" => {
                a.cmd = it.collect();
                break;
            }
            _ => return Err(format!("unknown argument '{arg}'; {USAGE}")),
        }
    }
    if a.secs.is_some() != a.cmd.is_empty() {
        return Err(format!("give either --secs S or -- CMD; {USAGE}"));
    }
    if a.period == 0 || a.pages == 0 || !a.pages.is_power_of_two() {
        return Err("-c must be > 0 and --mmap-pages a power of two".into());
    }
    Ok(a)
}

fn epoll_add(ep: &OwnedFd, fd: i32, token: u64) -> Result<(), String> {
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
    // SAFETY: valid epoll fd and event pointer.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(format!("epoll_ctl: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn run(a: Args) -> Result<Counts, String> {
    let caps = Capabilities::probe();
    // What `tailprof record -a -e cpu-clock -c N` asks of attr::build_attr (session/plan.rs,
    // sampling_config: the recorder's clock, disabled, no inherit or enable-on-exec for -a).
    let cfg = SamplingConfig {
        period: Some(a.period),
        freq: None,
        regs_user: 0,
        clock: caps.clock_choice(),
        inherit: false,
        enable_on_exec: false,
        disabled: true,
        sideband: true,
        wakeup_events: 0,
    };
    let spec = EventSpec::parse("cpu-clock").map_err(|e| e.to_string())?;
    let plan = build_attr(&spec, &cfg).map_err(|e| e.to_string())?;
    let mut fds = Vec::new();
    let mut rings = Vec::new();
    for &cpu in &caps.online_cpus {
        let fd = sys::perf_event_open(&plan.attr, -1, cpu as i32, -1, sys::PERF_FLAG_FD_CLOEXEC)
            .map_err(|e| sys::explain_open_error(&e, &spec, &caps).to_string())?;
        rings.push(Ring::map(fd.as_fd(), a.pages, cpu).map_err(|e| format!("mmap of CPU {cpu}'s ring: {e}"))?);
        fds.push(fd);
    }
    if fds.is_empty() {
        return Err("no online CPUs found".into());
    }
    // SAFETY: plain syscall; the result is checked and then owned.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(format!("epoll_create1: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd nothing else owns.
    let ep: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(ep) };
    for (i, fd) in fds.iter().enumerate() {
        epoll_add(&ep, fd.as_raw_fd(), i as u64)?;
    }
    let mut child = if a.cmd.is_empty() { None } else { Some(target::spawn_stopped(&a.cmd).map_err(|e| e.to_string())?) };
    if let Some(pidfd) = child.as_ref().and_then(|c| c.pidfd()) {
        epoll_add(&ep, pidfd.as_raw_fd(), PIDFD_TOKEN)?;
    }
    for fd in &fds {
        sys::ioctl_enable(fd.as_fd()).map_err(|e| format!("PERF_EVENT_IOC_ENABLE: {e}"))?;
    }
    if let Some(c) = child.as_mut() {
        c.release().map_err(|e| e.to_string())?;
    }
    let deadline = a.secs.map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut counts = Counts::default();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; fds.len() + 1];
    loop {
        // SAFETY: `events` is valid for its length.
        let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, 100) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("epoll_wait: {}", std::io::Error::last_os_error()));
        }
        let ready = &events[..n.max(0) as usize];
        if !ready.is_empty() {
            counts.wakeups += 1;
            counts.drain_all(&mut rings);
        }
        let child_done = match child.as_mut() {
            Some(c) => ready.iter().any(|e| e.u64 == PIDFD_TOKEN) || c.try_wait().map_or(true, |s| s.is_some()),
            None => false,
        };
        if child_done || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    for fd in &fds {
        let _ = sys::ioctl_disable(fd.as_fd());
    }
    counts.drain_all(&mut rings);
    if let Some(c) = child.as_mut() {
        c.wait().map_err(|e| format!("waiting for the command: {e}"))?;
    }
    Ok(counts)
}

fn main() {
    match parse_args().and_then(run) {
        Ok(c) => println!("{{\"records\":{},\"samples\":{},\"lost\":{},\"wakeups\":{}}}", c.records, c.samples, c.lost, c.wakeups),
        Err(e) => {
            eprintln!("ring_floor: error: {e}");
            std::process::exit(1);
        }
    }
}
