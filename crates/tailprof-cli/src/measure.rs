//! Timed runs for `calibrate` and `overhead`: the same command unprofiled or under the
//! recorder, with its elapsed time measured the same way both times.
//!
//! Every run goes through the hidden `tailprof __timed --out FILE -- CMD` wrapper: it
//! starts CMD (stdin and, unless asked, stdout/stderr on /dev/null, optionally pinned to
//! one CPU), waits for it with `wait4`, and writes CMD's elapsed time (fork to reap,
//! CLOCK_MONOTONIC), CPU time (user + system, CMD and the children it waited for) and
//! exit status to FILE. Profiled runs record the wrapper itself (`inherit` covers CMD),
//! so both sides measure exactly CMD, not the recorder's setup (opening events, mapping
//! rings, /proc synthesis) nor its final flush; those are reported separately as the
//! recorder's fixed cost.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use tailprof_collect::attr::SamplingConfig;
use tailprof_collect::event::EventSpec;
use tailprof_collect::session::{RecordOptions, Recorder, Target};
use tailprof_format::TraceWriter;

/// One run of CMD as the wrapper saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub elapsed_s: f64,
    /// User + system time of CMD (and the children it waited for).
    pub cpu_s: f64,
    pub status: i32,
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

/// Temporary files for one measurement session, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    next: std::cell::Cell<u64>,
}

impl Scratch {
    pub fn new() -> Result<Scratch> {
        let base = std::env::temp_dir();
        for i in 0..1000u32 {
            let dir = base.join(format!("tailprof-measure-{}-{i}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Scratch { dir, next: std::cell::Cell::new(0) }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create a directory in {}", base.display())),
            }
        }
        bail!("cannot create a scratch directory in {}", base.display())
    }

    /// A fresh path in the scratch directory.
    pub fn file(&self, ext: &str) -> PathBuf {
        let n = self.next.get();
        self.next.set(n + 1);
        self.dir.join(format!("{n}.{ext}"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The wrapper's argv for CMD.
pub fn timed_argv(out: &Path, cpu: Option<usize>, show_output: bool, cmd: &[String]) -> Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot find the tailprof executable")?;
    let mut v = vec![exe.to_string_lossy().into_owned(), "__timed".into(), "--out".into(), out.to_string_lossy().into_owned()];
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

fn read_timed(out: &Path) -> Result<Timed> {
    let text = std::fs::read_to_string(out).with_context(|| format!("the timing wrapper left no result in {}", out.display()))?;
    let f: Vec<f64> = text.split_whitespace().filter_map(|s| s.parse().ok()).collect();
    if f.len() != 3 {
        bail!("malformed timing result in {}: {text:?}", out.display());
    }
    let _ = std::fs::remove_file(out);
    Ok(Timed { elapsed_s: f[0] / 1e9, cpu_s: f[1] / 1e9, status: f[2] as i32 })
}

/// Start the wrapper for one unprofiled run (see [`wait_unprofiled`]).
pub fn spawn_unprofiled(scratch: &Scratch, cpu: Option<usize>, show_output: bool, cmd: &[String]) -> Result<(std::process::Child, PathBuf)> {
    let out = scratch.file("time");
    let argv = timed_argv(&out, cpu, show_output, cmd)?;
    let child = Command::new(&argv[0]).args(&argv[1..]).spawn().context("cannot start the timing wrapper")?;
    Ok((child, out))
}

/// Wait for a run started with [`spawn_unprofiled`].
pub fn wait_unprofiled(mut child: std::process::Child, out: &Path) -> Result<Timed> {
    child.wait().context("waiting for the timing wrapper")?;
    read_timed(out)
}

/// One unprofiled run.
pub fn run_unprofiled(scratch: &Scratch, cpu: Option<usize>, show_output: bool, cmd: &[String]) -> Result<Timed> {
    let (c, out) = spawn_unprofiled(scratch, cpu, show_output, cmd)?;
    wait_unprofiled(c, &out)
}

/// One profiled run: the recorder runs on the calling thread (pinned to
/// `recorder_cpus` when given), CMD optionally pinned to `cpu`. The trace goes to a
/// scratch file, like a real recording; `barrier` (several instances) is waited on
/// after setup so all instances start together.
#[allow(clippy::too_many_arguments)]
pub fn run_profiled(
    setup: &ProfileSetup,
    scratch_file: &Path,
    timing_file: &Path,
    cpu: Option<usize>,
    recorder_cpus: Option<&[usize]>,
    show_output: bool,
    cmd: &[String],
    stop: &AtomicBool,
    barrier: Option<&std::sync::Barrier>,
) -> Result<ProfiledRun> {
    let argv = timed_argv(timing_file, cpu, show_output, cmd)?;
    let sampling = SamplingConfig { period: setup.period, freq: None, inherit: true, ..SamplingConfig::default() };
    let opts = RecordOptions {
        events: vec![setup.spec.clone()],
        sampling,
        mmap_pages: setup.mmap_pages,
        target: Target::Command(argv.clone()),
        cmdline: argv,
    };
    if let Some(cpus) = recorder_cpus {
        set_thread_affinity(cpus)?;
    }
    let wall0 = Instant::now();
    let mut rec = Recorder::new(opts)?;
    let file = std::fs::File::create(scratch_file).with_context(|| format!("cannot create {}", scratch_file.display()))?;
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
    let _ = std::fs::remove_file(scratch_file);
    if recorder_cpus.is_some() {
        set_thread_affinity(&online_cpus())?;
    }
    let timed = read_timed(timing_file)?;
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

pub fn online_cpus() -> Vec<usize> {
    tailprof_collect::caps::online_cpus().map(|v| v.into_iter().map(|c| c as usize).collect()).unwrap_or_else(|_| vec![0])
}

/// Pin the calling thread (0 = self) to `cpus`.
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
            return Err(std::io::Error::last_os_error()).context(format!("cannot pin to CPUs {cpus:?}"));
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
        let total: u64 = v.iter().take(8).sum();
        Some((total, v[3] + v[4]))
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

/// A transient status line on stderr (only when it is a terminal).
pub fn status(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K{msg}");
    }
}

pub fn clear_status() {
    status("");
}

/// Hidden helper: run CMD and write its elapsed time, CPU time and status to a file.
#[derive(Args, Debug)]
pub struct TimedArgs {
    /// Where to write "elapsed_ns cpu_ns status".
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Pin CMD to this CPU.
    #[arg(long, value_name = "CPU")]
    cpu: Option<usize>,
    /// Keep CMD's stdout/stderr (default: /dev/null).
    #[arg(long)]
    show_output: bool,
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `tailprof __timed`.
pub fn run_timed(args: TimedArgs) -> Result<ExitCode> {
    if let Some(c) = args.cpu {
        set_thread_affinity(&[c])?;
    }
    let out = if args.show_output { Stdio::inherit } else { Stdio::null };
    let err = if args.show_output { Stdio::inherit } else { Stdio::null };
    let t0 = Instant::now();
    let child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .stdin(Stdio::null())
        .stdout(out())
        .stderr(err())
        .spawn()
        .map_err(|e| anyhow!("cannot run {}: {e}", args.command[0]))?;
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
            return Err(e).context("wait4");
        }
    }
    let elapsed = t0.elapsed();
    drop(child);
    let status = tailprof_collect::target::decode_wait_status(st);
    let cpu_ns = (tv(ru.ru_utime) + tv(ru.ru_stime)) * 1e9;
    std::fs::write(&args.out, format!("{} {:.0} {status}\n", elapsed.as_nanos(), cpu_ns))
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}
