//! Counting mode: how many events a command causes, with no sampling at all.
//!
//! `tailprof stat` prints these counts, and `tailprof plan` uses them to measure a
//! command's event rate before choosing a sampling period (counting costs almost
//! nothing: the kernel only reads the counter when the task is switched out; Bitzes &
//! Nowak, CERN openlab 2014, found it negligible unless events are multiplexed).
//!
//! # How
//! [`count_command`] forks the command stopped before exec ([`crate::target`]), opens
//! one counter per event on it (`pid = child`, `cpu = -1`, `inherit = 1` so threads and
//! children are counted, `enable_on_exec = 1` so counting starts at exec), lets it run
//! and reads every counter after it has exited. Each counter is its own group leader, as
//! in `perf stat` by default: when there are more hardware events than counters the
//! kernel rotates them independently, instead of scheduling a group all or nothing.
//!
//! `read_format = TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`: when `time_running <
//! time_enabled` the event was *multiplexed* and the count covers only part of the run;
//! [`CountedEvent::scaled`] is the usual estimate `count × enabled / running`. With
//! `inherit` both times are summed over every thread counted, so they can exceed the
//! wall time; their ratio is still the fraction of time the counter was live.
//!
//! [`hardware_counters`] says how many counters the core PMU has, so a caller can say
//! why events were multiplexed: from sysfs `<pmu>/caps/num_counters` when the kernel
//! exports it, else from CPUID (Intel leaf 0xA; AMD PerfMonV2 leaf 0x80000022 or the
//! core-counter extension bit), else unknown. [`last_level_cache`] gives the LLC size
//! and how many CPUs share it (for PEBS buffer guidance).

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use perf_event_open_sys::bindings as b;

use crate::attr::{PerfEventAttr, ATTR_SIZE};
use crate::caps::Capabilities;
use crate::event::{EventSpec, SYSFS_PMU_ROOT};
use crate::sys::{self, CollectError};
use crate::target::{self, LaunchError};

/// Why a counting run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CountError {
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("nothing to count: {0}")]
    Options(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

/// One event's final reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedEvent {
    /// As typed (`cpu-clock`, `cycles:u`).
    pub name: String,
    /// The raw count (for time-based software events: nanoseconds).
    pub value: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

impl CountedEvent {
    /// The counter was not live for the whole time it was enabled.
    pub fn multiplexed(&self) -> bool {
        self.time_running_ns < self.time_enabled_ns
    }

    /// `time_running / time_enabled` (1.0 when never enabled: nothing was missed).
    pub fn running_fraction(&self) -> f64 {
        if self.time_enabled_ns == 0 {
            1.0
        } else {
            self.time_running_ns as f64 / self.time_enabled_ns as f64
        }
    }

    /// The estimate for the whole run, `value × enabled / running`; `None` when the
    /// counter never ran although it was enabled (no estimate is possible).
    pub fn scaled(&self) -> Option<f64> {
        match (self.time_enabled_ns, self.time_running_ns) {
            (0, _) => Some(self.value as f64),
            (_, 0) => None,
            (e, r) => Some(self.value as f64 * e as f64 / r as f64),
        }
    }
}

/// The result of [`count_command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountResult {
    /// In the order requested.
    pub events: Vec<CountedEvent>,
    /// From just before exec to the reaping of the command.
    pub elapsed_ns: u64,
    /// Exit code, or 128 + signal number.
    pub exit_status: i32,
}

impl CountResult {
    /// The reading of the event named `name`.
    pub fn get(&self, name: &str) -> Option<&CountedEvent> {
        self.events.iter().find(|e| e.name == name)
    }
}

/// The counting attr for `spec`: no sample type, no period, counts the command and its
/// descendants from exec on.
#[allow(clippy::field_reassign_with_default)] // perf_event_attr: fields, then its bitfield setters
pub fn counting_attr(spec: &EventSpec) -> PerfEventAttr {
    let mut a = PerfEventAttr::default();
    a.type_ = spec.attr_type;
    a.size = ATTR_SIZE;
    a.config = spec.config;
    a.config1 = spec.config1;
    a.config2 = spec.config2;
    a.read_format = (b::PERF_FORMAT_TOTAL_TIME_ENABLED | b::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;
    a.set_exclude_user(spec.exclude_user as u64);
    a.set_exclude_kernel(spec.exclude_kernel as u64);
    a.set_exclude_hv(spec.exclude_kernel as u64);
    a.set_disabled(1);
    a.set_inherit(1);
    a.set_enable_on_exec(1);
    a
}

/// Read one counter opened with [`counting_attr`]'s read_format.
pub fn read_counter(fd: &OwnedFd) -> io::Result<(u64, u64, u64)> {
    let mut buf = [0u64; 3];
    loop {
        // SAFETY: reading at most 24 bytes into a 24-byte buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, 24) };
        if n == 24 {
            return Ok((buf[0], buf[1], buf[2]));
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read of a perf counter ({n} bytes)")));
    }
}

/// Run `argv` to completion with one counter per event (see the module docs). A command
/// that exits non-zero is not an error here: its status is in the result.
pub fn count_command(events: &[EventSpec], argv: &[String]) -> Result<CountResult, CountError> {
    if events.is_empty() {
        return Err(CountError::Options("no events".into()));
    }
    if argv.is_empty() {
        return Err(CountError::Options("no command".into()));
    }
    let caps = Capabilities::probe();
    let mut child = target::spawn_stopped(argv)?;
    let pid = child.pid() as i32;
    let mut fds = Vec::with_capacity(events.len());
    for spec in events {
        let attr = counting_attr(spec);
        let fd =
            sys::perf_event_open(&attr, pid, -1, -1, sys::PERF_FLAG_FD_CLOEXEC).map_err(|e| sys::explain_open_error(&e, spec, &caps))?;
        fds.push(fd);
    }
    let t0 = crate::session::monotonic_ns();
    child.release()?;
    let status = child.wait().map_err(|source| CountError::Io { what: "waiting for the command".into(), source })?;
    let elapsed_ns = crate::session::monotonic_ns().saturating_sub(t0);
    let mut out = Vec::with_capacity(events.len());
    for (spec, fd) in events.iter().zip(&fds) {
        let (value, time_enabled_ns, time_running_ns) =
            read_counter(fd).map_err(|source| CountError::Io { what: format!("reading counter '{}'", spec.name), source })?;
        out.push(CountedEvent { name: spec.name.clone(), value, time_enabled_ns, time_running_ns });
    }
    Ok(CountResult { events: out, elapsed_ns, exit_status: status })
}

/// Where [`CounterInfo`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CounterSource {
    /// `<pmu>/caps/num_counters` (and `num_counters_fixed` when present).
    Sysfs(PathBuf),
    /// The CPUID performance-monitoring leaves.
    Cpuid,
    /// No core PMU is exposed (e.g. a VM without a virtual PMU): no hardware counters;
    /// software events are not counted by the PMU and are never multiplexed.
    NoPmu,
    Unknown,
}

/// How many hardware counters the core PMU has per logical CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterInfo {
    pub pmu: Option<String>,
    /// Programmable (general-purpose) counters.
    pub generic: Option<u32>,
    /// Fixed-function counters (Intel: instructions, cycles, ref-cycles, ...).
    pub fixed: Option<u32>,
    pub source: CounterSource,
}

impl CounterInfo {
    /// "4 programmable + 3 fixed counters (CPUID)", "unknown", ...
    pub fn describe(&self) -> String {
        let src = match &self.source {
            CounterSource::Sysfs(p) => p.display().to_string(),
            CounterSource::Cpuid => "CPUID".into(),
            CounterSource::NoPmu => return "no hardware counters (no core PMU is exposed)".into(),
            CounterSource::Unknown => return "unknown number of hardware counters".into(),
        };
        match (self.generic, self.fixed) {
            (Some(g), Some(f)) if f > 0 => format!("{g} programmable + {f} fixed counters ({src})"),
            (Some(g), _) => format!("{g} programmable counters ({src})"),
            _ => "unknown number of hardware counters".into(),
        }
    }
}

/// Counters of the live machine's core PMU (see the module docs).
pub fn hardware_counters(caps: &Capabilities) -> CounterInfo {
    let Some(pmu) = caps.cpu_pmu_name.clone() else {
        return CounterInfo { pmu: None, generic: Some(0), fixed: Some(0), source: CounterSource::NoPmu };
    };
    if let Some(info) = counters_from_sysfs(Path::new(SYSFS_PMU_ROOT), &pmu) {
        return info;
    }
    match cpuid_counters() {
        Some((g, f)) => CounterInfo { pmu: Some(pmu), generic: Some(g), fixed: Some(f), source: CounterSource::Cpuid },
        None => CounterInfo { pmu: Some(pmu), generic: None, fixed: None, source: CounterSource::Unknown },
    }
}

/// `<root>/<pmu>/caps/num_counters` (+ `num_counters_fixed`), when exported.
pub fn counters_from_sysfs(root: &Path, pmu: &str) -> Option<CounterInfo> {
    let dir = root.join(pmu).join("caps");
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok().and_then(|s| s.trim().parse::<u32>().ok());
    let generic = read("num_counters")?;
    Some(CounterInfo {
        pmu: Some(pmu.to_string()),
        generic: Some(generic),
        fixed: read("num_counters_fixed"),
        source: CounterSource::Sysfs(dir.join("num_counters")),
    })
}

/// (programmable, fixed) counters from CPUID, if the CPU says.
#[cfg(target_arch = "x86_64")]
fn cpuid_counters() -> Option<(u32, u32)> {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU; leaves above the reported maximum are
    // not queried. (`__cpuid` became a safe fn in newer Rust; the block keeps 1.85.)
    #[allow(unused_unsafe)]
    let r = |leaf: u32| unsafe { __cpuid(leaf) };
    let v = r(0);
    let vendor: Vec<u8> = [v.ebx, v.edx, v.ecx].iter().flat_map(|x| x.to_le_bytes()).collect();
    match &vendor[..] {
        b"GenuineIntel" if v.eax >= 0xa => {
            let a = r(0xa);
            let version = a.eax & 0xff;
            if version == 0 {
                return None;
            }
            let generic = (a.eax >> 8) & 0xff;
            let fixed = if version > 1 { a.edx & 0x1f } else { 0 };
            Some((generic, fixed))
        }
        b"AuthenticAMD" | b"HygonGenuine" => {
            let max_ext = r(0x8000_0000).eax;
            if max_ext >= 0x8000_0022 && r(0x8000_0022).eax & 1 != 0 {
                return Some((r(0x8000_0022).ebx & 0xf, 0));
            }
            if max_ext >= 0x8000_0001 && r(0x8000_0001).ecx & (1 << 23) != 0 {
                return Some((6, 0)); // PerfCtrExtCore
            }
            Some((4, 0))
        }
        _ => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_counters() -> Option<(u32, u32)> {
    None
}

/// The last-level cache as the kernel describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheInfo {
    pub level: u32,
    pub size_bytes: u64,
    /// Logical CPUs sharing it.
    pub shared_by_cpus: u32,
}

impl CacheInfo {
    /// Each sharing CPU's share of the cache.
    pub fn per_cpu_bytes(&self) -> u64 {
        self.size_bytes / u64::from(self.shared_by_cpus.max(1))
    }
}

/// The highest-level data or unified cache of CPU 0, from `<cpu_root>/cpu0/cache`
/// (`/sys/devices/system/cpu` on a live machine).
pub fn last_level_cache(cpu_root: &Path) -> Option<CacheInfo> {
    let dir = cpu_root.join("cpu0/cache");
    let mut best: Option<CacheInfo> = None;
    for entry in fs::read_dir(&dir).ok()?.flatten() {
        let p = entry.path();
        let read = |n: &str| fs::read_to_string(p.join(n)).ok().map(|s| s.trim().to_string());
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        if read("type").as_deref() == Some("Instruction") {
            continue;
        }
        let (Some(level), Some(size)) = (read("level").and_then(|s| s.parse().ok()), read("size").and_then(|s| parse_size(&s))) else {
            continue;
        };
        let shared = read("shared_cpu_list").and_then(|s| crate::caps::parse_cpu_list(&s)).map(|v| v.len() as u32).unwrap_or(1);
        if best.is_none_or(|b| level > b.level) {
            best = Some(CacheInfo { level, size_bytes: size, shared_by_cpus: shared.max(1) });
        }
    }
    best
}

/// `32768K`, `2048K`, `32M`, `512` (bytes) as in sysfs cache `size` files.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1024),
        'M' | 'm' => (&s[..s.len() - 1], 1024 * 1024),
        'G' | 'g' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok().map(|n| n * mult)
}

/// One interval of [`count_command_interval`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalTick {
    /// End of the interval, ns since the command was released (its exec).
    pub t_ns: u64,
    /// Length of this interval (the last one, cut by the command's exit, is shorter).
    pub len_ns: u64,
    /// Per event, in the order requested: (count, time enabled, time running) during the
    /// interval.
    pub deltas: Vec<(u64, u64, u64)>,
}

/// The CPUs to open an uncore event on (one per socket, from `<pmu>/cpumask`), or `None`
/// for a core or software event. Uncore PMUs (e.g. `uncore_imc_0`, whose
/// `cas_count_read`/`cas_count_write` count DRAM transfers) cannot follow a task: they
/// are counted system-wide.
pub fn uncore_cpus(spec: &EventSpec, sysfs_root: &Path) -> Option<Vec<u32>> {
    let pmu = spec.pmu.as_deref()?;
    if crate::event::CORE_PMUS.contains(&pmu) {
        return None;
    }
    let text = fs::read_to_string(sysfs_root.join(pmu).join("cpumask")).ok()?;
    crate::caps::parse_cpu_list(&text).filter(|v| !v.is_empty())
}

/// [`count_command`], reading every counter every `interval_ns` while the command runs
/// (`tailprof stat --interval`, the paper's periodic-counting baseline): `on_tick` gets
/// each interval's deltas as it ends; the result holds the totals. Intervals are timed
/// against absolute deadlines (no drift); if the reader falls behind, the late interval
/// is simply longer (its `len_ns` says so). Uncore events ([`uncore_cpus`]) are counted
/// system-wide on their PMU's CPUs and summed.
pub fn count_command_interval(
    events: &[EventSpec],
    argv: &[String],
    interval_ns: u64,
    on_tick: &mut dyn FnMut(&IntervalTick),
) -> Result<CountResult, CountError> {
    if events.is_empty() {
        return Err(CountError::Options("no events".into()));
    }
    if argv.is_empty() {
        return Err(CountError::Options("no command".into()));
    }
    if interval_ns < 10_000 {
        return Err(CountError::Options(format!("the interval must be at least 10 µs (got {interval_ns} ns)")));
    }
    let caps = Capabilities::probe();
    let root = Path::new(SYSFS_PMU_ROOT);
    let mut child = target::spawn_stopped(argv)?;
    let pid = child.pid() as i32;
    // Per event, its fds (several for uncore events on several sockets).
    let mut fds: Vec<Vec<OwnedFd>> = Vec::with_capacity(events.len());
    let mut enable_now = Vec::new();
    for spec in events {
        let mut attr = counting_attr(spec);
        let open = |attr: &PerfEventAttr, pid: i32, cpu: i32| {
            sys::perf_event_open(attr, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC).map_err(|e| sys::explain_open_error(&e, spec, &caps))
        };
        match uncore_cpus(spec, root) {
            Some(cpus) => {
                attr.set_inherit(0);
                attr.set_enable_on_exec(0);
                let mut v = Vec::new();
                for cpu in cpus {
                    let fd = open(&attr, -1, cpu as i32)?;
                    enable_now.push(fds.len());
                    v.push(fd);
                }
                fds.push(v);
            }
            None => fds.push(vec![open(&attr, pid, -1)?]),
        }
    }
    for &i in &enable_now {
        for fd in &fds[i] {
            sys::ioctl_enable(fd.as_fd()).map_err(|source| CountError::Io { what: "PERF_EVENT_IOC_ENABLE".into(), source })?;
        }
    }
    let read_all = |fds: &[Vec<OwnedFd>]| -> Result<Vec<(u64, u64, u64)>, CountError> {
        let mut out = Vec::with_capacity(fds.len());
        for (spec, group) in events.iter().zip(fds) {
            let mut sum = (0u64, 0u64, 0u64);
            for fd in group {
                let (v, e, r) =
                    read_counter(fd).map_err(|source| CountError::Io { what: format!("reading counter '{}'", spec.name), source })?;
                sum = (sum.0 + v, sum.1 + e, sum.2 + r);
            }
            out.push(sum);
        }
        Ok(out)
    };
    let t0 = crate::session::monotonic_ns();
    child.release()?;
    let mut prev = vec![(0u64, 0u64, 0u64); events.len()];
    let mut last_t = 0u64;
    let mut deadline = t0 + interval_ns;
    loop {
        let exited =
            wait_exit_until(&mut child, deadline).map_err(|source| CountError::Io { what: "waiting for the command".into(), source })?;
        let now = crate::session::monotonic_ns();
        let cur = read_all(&fds)?;
        let deltas: Vec<(u64, u64, u64)> =
            cur.iter().zip(&prev).map(|(c, p)| (c.0.wrapping_sub(p.0), c.1.wrapping_sub(p.1), c.2.wrapping_sub(p.2))).collect();
        let t = now.saturating_sub(t0);
        on_tick(&IntervalTick { t_ns: t, len_ns: t - last_t, deltas });
        prev = cur;
        last_t = t;
        if exited {
            break;
        }
        deadline += interval_ns;
        if deadline <= now {
            deadline = now + interval_ns;
        }
    }
    let status = child.wait().map_err(|source| CountError::Io { what: "waiting for the command".into(), source })?;
    let elapsed_ns = crate::session::monotonic_ns().saturating_sub(t0);
    let events = events
        .iter()
        .zip(&prev)
        .map(|(spec, &(value, time_enabled_ns, time_running_ns))| CountedEvent {
            name: spec.name.clone(),
            value,
            time_enabled_ns,
            time_running_ns,
        })
        .collect();
    Ok(CountResult { events, elapsed_ns, exit_status: status })
}

/// Wait until the child exits or CLOCK_MONOTONIC reaches `deadline_ns`; true when it
/// has exited (not yet reaped).
fn wait_exit_until(child: &mut target::Child, deadline_ns: u64) -> io::Result<bool> {
    loop {
        let now = crate::session::monotonic_ns();
        let left = deadline_ns.saturating_sub(now);
        match child.pidfd() {
            Some(fd) => {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                let ts = libc::timespec { tv_sec: (left / 1_000_000_000) as libc::time_t, tv_nsec: (left % 1_000_000_000) as libc::c_long };
                // SAFETY: one valid pollfd and timespec; no signal mask change.
                let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
                if r > 0 {
                    return Ok(true);
                }
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                    continue;
                }
                return Ok(false);
            }
            None => {
                if child.try_wait()?.is_some() {
                    return Ok(true);
                }
                if left == 0 {
                    return Ok(false);
                }
                std::thread::sleep(std::time::Duration::from_nanos(left.min(1_000_000)));
                if crate::session::monotonic_ns() >= deadline_ns {
                    return Ok(child.try_wait()?.is_some());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(value: u64, en: u64, run: u64) -> CountedEvent {
        CountedEvent { name: "x".into(), value, time_enabled_ns: en, time_running_ns: run }
    }

    #[test]
    fn scaling_and_multiplexing() {
        let full = ev(1000, 500, 500);
        assert!(!full.multiplexed());
        assert_eq!(full.scaled(), Some(1000.0));
        assert_eq!(full.running_fraction(), 1.0);
        let quarter = ev(1000, 400, 100);
        assert!(quarter.multiplexed());
        assert_eq!(quarter.scaled(), Some(4000.0));
        assert_eq!(quarter.running_fraction(), 0.25);
        let never = ev(0, 400, 0);
        assert!(never.multiplexed());
        assert_eq!(never.scaled(), None);
        let unused = ev(0, 0, 0);
        assert!(!unused.multiplexed());
        assert_eq!(unused.scaled(), Some(0.0));
    }

    #[test]
    fn counting_attr_shape() {
        let spec = EventSpec::parse("task-clock:u").unwrap();
        let a = counting_attr(&spec);
        assert_eq!(a.sample_period, 0);
        assert_eq!(a.sample_type, 0);
        assert_eq!(a.inherit(), 1);
        assert_eq!(a.enable_on_exec(), 1);
        assert_eq!(a.disabled(), 1);
        assert_eq!(a.exclude_kernel(), 1);
        assert_eq!(a.exclude_user(), 0);
        assert_eq!(a.read_format, 3);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn cache_and_counters_from_fake_sysfs() {
        let dir = std::env::temp_dir().join(format!("tailprof-counting-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cache = dir.join("cpu/cpu0/cache");
        for (idx, level, ty, size, shared) in [
            (0, 1, "Data", "48K", "0,8"),
            (1, 1, "Instruction", "32K", "0,8"),
            (2, 2, "Unified", "1280K", "0,8"),
            (3, 3, "Unified", "30720K", "0-15"),
        ] {
            let d = cache.join(format!("index{idx}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("level"), format!("{level}\n")).unwrap();
            fs::write(d.join("type"), format!("{ty}\n")).unwrap();
            fs::write(d.join("size"), format!("{size}\n")).unwrap();
            fs::write(d.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
        }
        let llc = last_level_cache(&dir.join("cpu")).unwrap();
        assert_eq!(llc, CacheInfo { level: 3, size_bytes: 30 << 20, shared_by_cpus: 16 });
        assert_eq!(llc.per_cpu_bytes(), (30 << 20) / 16);
        assert_eq!(last_level_cache(&dir.join("nope")), None);

        let caps = dir.join("pmu/cpu/caps");
        fs::create_dir_all(&caps).unwrap();
        assert_eq!(counters_from_sysfs(&dir.join("pmu"), "cpu"), None);
        fs::write(caps.join("num_counters"), "8\n").unwrap();
        fs::write(caps.join("num_counters_fixed"), "4\n").unwrap();
        let c = counters_from_sysfs(&dir.join("pmu"), "cpu").unwrap();
        assert_eq!((c.generic, c.fixed), (Some(8), Some(4)));
        assert!(c.describe().starts_with("8 programmable + 4 fixed counters ("), "{}", c.describe());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn live_counters_and_cache() {
        let caps = Capabilities::probe();
        let c = hardware_counters(&caps);
        eprintln!("{}", c.describe());
        if !caps.has_cpu_pmu {
            assert_eq!(c.source, CounterSource::NoPmu);
            assert!(c.describe().contains("no hardware counters"));
        }
        eprintln!("{:?}", last_level_cache(Path::new("/sys/devices/system/cpu")));
    }

    fn is_perm(e: &CountError) -> bool {
        matches!(e, CountError::Collect(CollectError::Permission { .. }))
    }

    #[test]
    fn counts_a_real_command() {
        let events = [EventSpec::parse("task-clock").unwrap(), EventSpec::parse("context-switches").unwrap()];
        let argv: Vec<String> =
            ["sh", "-c", "i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; exit 3"].iter().map(|s| s.to_string()).collect();
        let r = match count_command(&events, &argv) {
            Ok(r) => r,
            Err(e) if is_perm(&e) => {
                tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("{e}"));
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(r.exit_status, 3);
        let tc = r.get("task-clock").unwrap();
        assert!(tc.value > 0 && !tc.multiplexed(), "{tc:?}");
        assert!(tc.time_enabled_ns > 0);
        assert!(r.elapsed_ns > 0);
        assert_eq!(r.events.len(), 2);
    }

    #[test]
    fn count_errors() {
        let argv = vec!["true".to_string()];
        assert!(matches!(count_command(&[], &argv), Err(CountError::Options(_))));
        let spec = [EventSpec::parse("task-clock").unwrap()];
        assert!(matches!(count_command(&spec, &[]), Err(CountError::Options(_))));
        let e = count_command(&spec, &["tailprof-no-such-cmd-xyz".to_string()]).unwrap_err();
        assert_eq!(e.to_string(), "command not found: tailprof-no-such-cmd-xyz");
    }

    #[test]
    fn interval_counting_sums_to_the_total() {
        let events = [EventSpec::parse("task-clock").unwrap()];
        let argv: Vec<String> = ["sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done"].iter().map(|s| s.to_string()).collect();
        let mut ticks = Vec::new();
        let r = match count_command_interval(&events, &argv, 5_000_000, &mut |t| ticks.push(t.clone())) {
            Ok(r) => r,
            Err(e) if is_perm(&e) => {
                tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("{e}"));
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(!ticks.is_empty());
        let sum: u64 = ticks.iter().map(|t| t.deltas[0].0).sum();
        assert_eq!(sum, r.events[0].value);
        assert!(r.events[0].value > 0);
        let t_sum: u64 = ticks.iter().map(|t| t.len_ns).sum();
        assert_eq!(t_sum, ticks.last().unwrap().t_ns);
        assert!(ticks.windows(2).all(|w| w[0].t_ns < w[1].t_ns));
        assert!(count_command_interval(&events, &argv, 1000, &mut |_| {}).is_err());
    }

    #[test]
    fn uncore_events_are_recognised_by_cpumask() {
        let dir = std::env::temp_dir().join(format!("tailprof-uncore-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let imc = dir.join("uncore_imc_0");
        fs::create_dir_all(imc.join("format")).unwrap();
        fs::create_dir_all(imc.join("events")).unwrap();
        fs::write(imc.join("type"), "16\n").unwrap();
        fs::write(imc.join("cpumask"), "0,18\n").unwrap();
        fs::write(imc.join("format/event"), "config:0-7\n").unwrap();
        fs::write(imc.join("format/umask"), "config:8-15\n").unwrap();
        fs::write(imc.join("events/cas_count_read"), "event=0x04,umask=0x03\n").unwrap();
        let spec = EventSpec::parse_with_sysfs("uncore_imc_0/cas_count_read/", &dir).unwrap();
        assert_eq!(spec.config, 0x304);
        assert_eq!(uncore_cpus(&spec, &dir), Some(vec![0, 18]));
        assert_eq!(uncore_cpus(&EventSpec::parse("task-clock").unwrap(), &dir), None);
        let _ = fs::remove_dir_all(&dir);
    }
}
