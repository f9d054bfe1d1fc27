//! Timed runs: the same command unprofiled or under the recorder, with its elapsed time
//! measured the same way both times; CPU pinning, getrusage, and waiting for an idle
//! machine.
//!
//! Every run goes through a wrapper, `<this executable> __timed --out FILE -- CMD`
//! ([`TIMED_SUBCOMMAND`]; the executable must route it to [`timed_child`]): it starts
//! CMD (stdin and, unless asked, stdout/stderr on /dev/null, optionally pinned to one
//! CPU), waits for it with `wait4`, and writes CMD's elapsed time (fork to reap,
//! CLOCK_MONOTONIC), CPU time (user + system, CMD and the children it waited for) and
//! exit status to FILE. Profiled runs record the wrapper itself (`inherit` covers CMD),
//! so both sides measure exactly CMD, not the recorder's setup (opening events, mapping
//! rings, /proc synthesis) nor its final flush; those are reported separately as the
//! recorder's fixed cost.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use tailprof_collect::attr::SamplingConfig;
use tailprof_collect::event::EventSpec;
use tailprof_collect::session::{RecordOptions, Recorder, Target};
use tailprof_format::TraceWriter;

use crate::error::{MeasureError, Result};
use crate::private::mkdtemp_in;

/// The hidden subcommand that runs [`timed_child`].
pub const TIMED_SUBCOMMAND: &str = "__timed";
/// The hidden subcommand that runs [`crate::calibrate::spin`] for `--iters N`.
pub const SPIN_SUBCOMMAND: &str = "__spin";

/// One run of CMD as the wrapper saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub elapsed_s: f64,
    /// User + system time of CMD (and the children it waited for).
    pub cpu_s: f64,
    pub status: i32,
}

/// What time a measurement is read in.
pub use tailprof_analyze::overhead::Basis;

impl Timed {
    /// The run's time in `basis`.
    pub fn time(&self, basis: Basis) -> f64 {
        match basis {
            Basis::Wall => self.elapsed_s,
            Basis::Cpu => self.cpu_s,
        }
    }
}

/// One profiled run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfiledRun {
    pub timed: Timed,
    /// Samples written plus samples the kernel reported lost (each cost its interrupt).
    pub samples: u64,
    pub lost: u64,
    pub throttled: u64,
    /// Trace bytes written.
    pub bytes: u64,
    /// CPU time of the recorder thread.
    pub recorder_cpu_s: f64,
    /// The recorder's wall time from `Recorder::new` to the finished trace.
    pub recorder_wall_s: f64,
}

/// What to record with.
#[derive(Debug, Clone)]
pub struct ProfileSetup {
    pub spec: EventSpec,
    pub period: Option<u64>,
    pub mmap_pages: usize,
}

/// Temporary files for one measurement session in a fresh private directory
/// (`mkdtemp`, 0700), removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    next: std::sync::atomic::AtomicU64,
}

impl Scratch {
    pub fn new() -> Result<Scratch> {
        let base = std::env::temp_dir();
        let dir = mkdtemp_in(&base, "tailprof-measure-").map_err(|e| MeasureError::io("cannot create a directory in", &base, e))?;
        Ok(Scratch { dir, next: std::sync::atomic::AtomicU64::new(0) })
    }

    /// A fresh path in the scratch directory.
    pub fn file(&self, ext: &str) -> PathBuf {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dir.join(format!("{n}.{ext}"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn current_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| MeasureError::os("cannot find the tailprof executable", e))
}

/// The wrapper's argv for CMD.
pub fn timed_argv(out: &Path, cpu: Option<usize>, show_output: bool, cmd: &[String]) -> Result<Vec<String>> {
    let exe = current_exe()?;
    let mut v = vec![exe.to_string_lossy().into_owned(), TIMED_SUBCOMMAND.into(), "--out".into(), out.to_string_lossy().into_owned()];
    if let Some(c) = cpu {
        v.extend(["--cpu".into(), c.to_string()]);
    }
    if show_output {
        v.push("--show-output".into());
    }
    v.push("--".into());
    v.extend(cmd.iter().cloned());
    Ok(v)
}

/// The argv of the built-in busy loop for `iters` iterations.
pub fn spin_argv(iters: u64) -> Result<Vec<String>> {
    Ok(vec![current_exe()?.to_string_lossy().into_owned(), SPIN_SUBCOMMAND.into(), "--iters".into(), iters.to_string()])
}

fn read_timed(out: &Path) -> Result<Timed> {
    let text = std::fs::read_to_string(out).map_err(|e| MeasureError::io("the timing wrapper left no result in", out, e))?;
    let f: Vec<f64> = text.split_whitespace().filter_map(|s| s.parse().ok()).collect();
    if f.len() != 3 {
        return Err(MeasureError::Invalid(format!("malformed timing result in {}: {text:?}", out.display())));
    }
    let _ = std::fs::remove_file(out);
    Ok(Timed { elapsed_s: f[0] / 1e9, cpu_s: f[1] / 1e9, status: f[2] as i32 })
}

/// Start the wrapper for one unprofiled run (see [`wait_unprofiled`]).
pub fn spawn_unprofiled(
    scratch: &Scratch,
    cpu: Option<usize>,
    show_output: bool,
    cmd: &[String],
) -> Result<(std::process::Child, PathBuf)> {
    let out = scratch.file("time");
    let argv = timed_argv(&out, cpu, show_output, cmd)?;
    let child = Command::new(&argv[0]).args(&argv[1..]).spawn().map_err(|e| MeasureError::os("cannot start the timing wrapper", e))?;
    Ok((child, out))
}

/// Wait for a run started with [`spawn_unprofiled`].
pub fn wait_unprofiled(mut child: std::process::Child, out: &Path) -> Result<Timed> {
    child.wait().map_err(|e| MeasureError::os("waiting for the timing wrapper", e))?;
    read_timed(out)
}

/// One unprofiled run.
pub fn run_unprofiled(scratch: &Scratch, cpu: Option<usize>, show_output: bool, cmd: &[String]) -> Result<Timed> {
    let (c, out) = spawn_unprofiled(scratch, cpu, show_output, cmd)?;
    wait_unprofiled(c, &out)
}

/// Where and how one profiled run executes.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Pin CMD to this CPU.
    pub cpu: Option<usize>,
    /// Pin the recorder (the calling thread) to these CPUs.
    pub recorder_cpus: Option<&'a [usize]>,
    /// Let CMD print.
    pub show_output: bool,
}

/// One profiled run: the recorder runs on the calling thread, the trace goes to a
/// scratch file like a real recording; `barrier` (several instances) is waited on after
/// setup so all instances start together.
pub fn run_profiled(
    setup: &ProfileSetup,
    scratch: &Scratch,
    place: Placement<'_>,
    cmd: &[String],
    stop: &AtomicBool,
    barrier: Option<&std::sync::Barrier>,
) -> Result<ProfiledRun> {
    let scratch_file = scratch.file("trace");
    let timing_file = scratch.file("time");
    let argv = timed_argv(&timing_file, place.cpu, place.show_output, cmd)?;
    let sampling = SamplingConfig { period: setup.period, freq: None, inherit: true, ..SamplingConfig::default() };
    let opts = RecordOptions {
        events: vec![setup.spec.clone()],
        sampling,
        mmap_pages: setup.mmap_pages,
        target: Target::Command(argv.clone()),
        cmdline: argv,
    };
    if let Some(cpus) = place.recorder_cpus {
        set_thread_affinity(cpus)?;
    }
    let wall0 = Instant::now();
    let mut rec = Recorder::new(opts)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&scratch_file)
        .map_err(|e| MeasureError::io("cannot create", &scratch_file, e))?;
    let mut w = TraceWriter::new(std::io::BufWriter::with_capacity(1 << 20, file), &rec.header())?;
    if let Some(b) = barrier {
        b.wait();
    }
    let cpu0 = thread_cpu_s();
    let res = rec.run(&mut w, stop, &mut |_| {});
    let recorder_cpu_s = thread_cpu_s() - cpu0;
    let summary = res?;
    let written = w.finish(Some(summary.duration_ns))?;
    let recorder_wall_s = wall0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&scratch_file);
    if place.recorder_cpus.is_some() {
        set_thread_affinity(&online_cpus())?;
    }
    let timed = read_timed(&timing_file)?;
    let lost = summary.lost_samples + summary.lost_records;
    Ok(ProfiledRun {
        timed,
        samples: written.stats.samples + lost,
        lost,
        throttled: summary.throttled,
        bytes: written.bytes,
        recorder_cpu_s,
        recorder_wall_s,
    })
}

/// CPU time of the calling thread (user + system).
pub fn thread_cpu_s() -> f64 {
    // SAFETY: rusage is plain integers, valid when zeroed; getrusage writes through a
    // valid pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// The online CPUs (`[0]` when they cannot be read).
pub fn online_cpus() -> Vec<usize> {
    tailprof_collect::caps::online_cpus().map(|v| v.into_iter().map(|c| c as usize).collect()).unwrap_or_else(|_| vec![0])
}

/// Pin the calling thread to `cpus`.
pub fn set_thread_affinity(cpus: &[usize]) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it for
    // cpu < CPU_SETSIZE, which we check.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(MeasureError::os(format!("cannot pin to CPUs {cpus:?}"), std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Busy fraction of all CPUs over `window` (from /proc/stat: everything but idle and
/// iowait). `None` when /proc/stat cannot be read.
pub fn busy_fraction(window: std::time::Duration) -> Option<f64> {
    fn snap() -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let line = text.lines().next()?;
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        if v.len() < 5 {
            return None;
        }
        let total: u64 = v.iter().take(8).fold(0u64, |a, b| a.saturating_add(*b));
        Some((total, v[3].saturating_add(v[4])))
    }
    let (t0, i0) = snap()?;
    std::thread::sleep(window);
    let (t1, i1) = snap()?;
    let dt = t1.saturating_sub(t0);
    if dt == 0 {
        return Some(0.0);
    }
    Some(1.0 - i1.saturating_sub(i0) as f64 / dt as f64)
}

/// Below this busy fraction (of all CPUs, with our own runs stopped) the machine counts
/// as idle for [`wait_idle`].
pub const IDLE_BUSY_FRACTION: f64 = 0.15;

/// Wait up to `max_s` seconds for the machine to be idle (other processes using less than
/// [`IDLE_BUSY_FRACTION`] of the CPUs over half a second). Returns whether it was idle
/// when we stopped waiting. `max_s == 0` returns at once (`true`).
pub fn wait_idle(max_s: f64) -> bool {
    if max_s <= 0.0 {
        return true;
    }
    let t0 = Instant::now();
    loop {
        match busy_fraction(std::time::Duration::from_millis(500)) {
            Some(b) if b < IDLE_BUSY_FRACTION => return true,
            None => return true,
            _ => {}
        }
        if t0.elapsed().as_secs_f64() >= max_s {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// 1-minute load average.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// What the `__timed` wrapper was asked to do.
#[derive(Debug, Clone)]
pub struct TimedRequest {
    /// Where to write "elapsed_ns cpu_ns status".
    pub out: PathBuf,
    pub cpu: Option<usize>,
    pub show_output: bool,
    pub command: Vec<String>,
}

/// The `__timed` wrapper: run CMD, write its elapsed time, CPU time and exit status to
/// `req.out`, and return the status.
pub fn timed_child(req: &TimedRequest) -> Result<i32> {
    if req.command.is_empty() {
        return Err(MeasureError::Invalid("no command to time".into()));
    }
    if let Some(c) = req.cpu {
        set_thread_affinity(&[c])?;
    }
    let io = || if req.show_output { Stdio::inherit() } else { Stdio::null() };
    let t0 = Instant::now();
    let child = Command::new(&req.command[0])
        .args(&req.command[1..])
        .stdin(Stdio::null())
        .stdout(io())
        .stderr(io())
        .spawn()
        .map_err(|e| MeasureError::os(format!("cannot run {}", req.command[0]), e))?;
    let pid = child.id() as libc::pid_t;
    let mut st = 0;
    // SAFETY: rusage is plain integers, valid when zeroed.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child with valid out-pointers. std's Child is
        // dropped afterwards without waiting (dropping never waits or kills).
        let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(MeasureError::os("wait4", e));
        }
    }
    let elapsed = t0.elapsed();
    drop(child);
    let status = tailprof_collect::target::decode_wait_status(st);
    let cpu_ns = (tv(ru.ru_utime) + tv(ru.ru_stime)) * 1e9;
    std::fs::write(&req.out, format!("{} {:.0} {status}\n", elapsed.as_nanos(), cpu_ns))
        .map_err(|e| MeasureError::io("cannot write", &req.out, e))?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_files_are_fresh_and_removed() {
        let s = Scratch::new().unwrap();
        let (a, b) = (s.file("x"), s.file("x"));
        assert_ne!(a, b);
        let dir = a.parent().unwrap().to_path_buf();
        assert!(dir.is_dir());
        drop(s);
        assert!(!dir.exists());
    }

    #[test]
    fn basis_picks_the_time() {
        let t = Timed { elapsed_s: 2.0, cpu_s: 1.0, status: 0 };
        assert_eq!(t.time(Basis::Wall), 2.0);
        assert_eq!(t.time(Basis::Cpu), 1.0);
    }
}
