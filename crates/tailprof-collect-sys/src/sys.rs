//! The raw `perf_event_open` syscall, the few ioctls we need, and errno-to-advice
//! mapping ([`explain_open_error`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys as pes;
use perf_event_open_sys::bindings as b;

use crate::attr::PerfEventAttr;
use crate::caps::Capabilities;
use crate::event::{EventError, EventKind, EventSpec};

pub const PERF_FLAG_FD_NO_GROUP: u64 = b::PERF_FLAG_FD_NO_GROUP as u64;
pub const PERF_FLAG_FD_OUTPUT: u64 = b::PERF_FLAG_FD_OUTPUT as u64;
pub const PERF_FLAG_PID_CGROUP: u64 = b::PERF_FLAG_PID_CGROUP as u64;
pub const PERF_FLAG_FD_CLOEXEC: u64 = b::PERF_FLAG_FD_CLOEXEC as u64;

/// Errors of the collect stage.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    #[error(transparent)]
    Event(#[from] EventError),
    /// perf_event_open failed; `hint` names the problem and the fix.
    #[error("cannot open event '{event}': {hint} ({source})")]
    Open {
        event: String,
        hint: String,
        #[source]
        source: io::Error,
    },
    #[error("this machine exposes no hardware PMU (no /sys/bus/event_source/devices/cpu); hardware event '{event}' cannot be counted here; use -e cpu-clock")]
    NoHardwarePmu { event: String },
    #[error("permission denied opening event '{event}'{}: {hint}", paranoid_text(*.paranoid))]
    Permission {
        event: String,
        paranoid: Option<i32>,
        hint: String,
        #[source]
        source: io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Format(#[from] tailprof_format::FormatError),
    #[error("{0}")]
    Other(String),
}

impl CollectError {
    /// Shorthand for [`CollectError::Io`].
    pub fn io(context: impl Into<String>, source: io::Error) -> CollectError {
        CollectError::Io { context: context.into(), source }
    }
}

fn paranoid_text(p: Option<i32>) -> String {
    p.map(|v| format!(" (kernel.perf_event_paranoid = {v})")).unwrap_or_default()
}

/// `perf_event_open(2)`. The attr is copied (the kernel may write `size` back on E2BIG).
/// `flags`: [`PERF_FLAG_FD_CLOEXEC`] etc.
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32, group_fd: i32, flags: u64) -> io::Result<OwnedFd> {
    let mut copy = *attr;
    // SAFETY: `copy` is a valid, initialized perf_event_attr whose `size` field does not
    // exceed its real size; the kernel only reads (and on E2BIG writes `size` of) it.
    let fd = unsafe { pes::perf_event_open(&mut copy, pid, cpu, group_fd, flags as libc::c_ulong) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: a non-negative return is a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// PERF_EVENT_IOC_ENABLE.
pub fn ioctl_enable(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: ioctl on a borrowed fd with an integer argument.
    check(unsafe { pes::ioctls::ENABLE(fd.as_fd().as_raw_fd(), 0) })
}

/// PERF_EVENT_IOC_DISABLE.
pub fn ioctl_disable(fd: impl AsFd) -> io::Result<()> {
    // SAFETY: as above.
    check(unsafe { pes::ioctls::DISABLE(fd.as_fd().as_raw_fd(), 0) })
}

/// PERF_EVENT_IOC_SET_OUTPUT: send `fd`'s records to `target_fd`'s ring. The target must
/// already be mmapped and be on the same CPU (or the same task for per-thread events).
pub fn ioctl_set_output(fd: impl AsFd, target_fd: impl AsFd) -> io::Result<()> {
    // SAFETY: both fds are borrowed for the duration of the call.
    check(unsafe { pes::ioctls::SET_OUTPUT(fd.as_fd().as_raw_fd(), target_fd.as_fd().as_raw_fd()) })
}

/// PERF_EVENT_IOC_SET_FILTER: a tracepoint event's filter (the ftrace filter grammar,
/// e.g. `common_flags & 24`); the kernel drops hits that do not match before it builds
/// the sample (no callchain walk, nothing written). Inherited copies use their parent's.
pub fn ioctl_set_filter(fd: impl AsFd, filter: &str) -> io::Result<()> {
    let c = std::ffi::CString::new(filter).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the kernel copies the NUL-terminated string (strndup_user) and keeps no pointer.
    check(unsafe { pes::ioctls::SET_FILTER(fd.as_fd().as_raw_fd(), c.as_ptr() as *mut libc::c_char) })
}

/// PERF_EVENT_IOC_ID: the id that PERF_SAMPLE_IDENTIFIER carries for this fd's event.
pub fn ioctl_id(fd: impl AsFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: the kernel writes one u64 through the pointer.
    check(unsafe { pes::ioctls::ID(fd.as_fd().as_raw_fd(), &mut id) })?;
    Ok(id)
}

/// Turn a failed `perf_event_open` for `spec` into one line naming the problem and the
/// fix.
pub fn explain_open_error(err: &io::Error, spec: &EventSpec, caps: &Capabilities) -> CollectError {
    let event = spec.name.clone();
    let errno = err.raw_os_error().unwrap_or(0);
    let open = |hint: String| CollectError::Open { event: event.clone(), hint, source: clone_err(err) };
    let pmu_missing_errno = matches!(errno, libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::EINVAL);
    if pmu_missing_errno && spec.needs_hardware_pmu() && !caps.has_cpu_pmu {
        return CollectError::NoHardwarePmu { event };
    }
    match errno {
        libc::EACCES | libc::EPERM => {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let hint = if root {
                "running as root yet denied: inside a container grant CAP_PERFMON (docker --cap-add PERFMON) and allow perf_event_open in the seccomp profile; otherwise SELinux or kernel lockdown is blocking it".to_string()
            } else {
                let mut h = "run as root or grant CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8), or lower the limit: sysctl kernel.perf_event_paranoid=1 (per-process, with kernel samples) or 0 (system-wide)".to_string();
                if !spec.exclude_kernel && caps.perf_event_paranoid.is_some_and(|p| p >= 2) {
                    h.push_str(&format!("; or sample user space only with '{}:u'", base_name(spec)));
                }
                h
            };
            CollectError::Permission { event, paranoid: caps.perf_event_paranoid, hint, source: clone_err(err) }
        }
        libc::EOPNOTSUPP | libc::EINVAL if spec.precise > 0 => open(precise_hint(spec, caps)),
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => {
            let pmu = caps.cpu_pmu_name.as_deref().unwrap_or("cpu");
            open(match spec.kind {
                EventKind::HardwareCache => format!(
                    "the {pmu} PMU does not implement this generic cache event; find a raw equivalent (perf list) and use rNNNN or {pmu}/event=..,umask=../"
                ),
                EventKind::Hardware => format!(
                    "the {pmu} PMU (or the hypervisor) does not implement this generic hardware event; use a raw event or -e cpu-clock"
                ),
                EventKind::Tracepoint => "this tracepoint is not available in the running kernel".into(),
                EventKind::Pmu => format!(
                    "the {} PMU rejected this config; check the terms against /sys/bus/event_source/devices/{}/format",
                    spec.pmu.as_deref().unwrap_or("?"),
                    spec.pmu.as_deref().unwrap_or("?")
                ),
                _ => "the running kernel does not support this event; use -e cpu-clock".into(),
            })
        }
        libc::EINVAL => open(
            "the kernel rejected the event attributes: an unsupported config for this PMU, a frequency above kernel.perf_event_max_sample_rate, or a flag/sample bit this kernel is too old for (build_id and WEIGHT_STRUCT need Linux 5.12+)".into(),
        ),
        libc::EMFILE => open(
            "too many open files: tailprof needs one descriptor per event per CPU (or thread); raise the limit with `ulimit -n 65536`".into(),
        ),
        libc::ENFILE => open("the system-wide file table is full (fs.file-max); close files or raise fs.file-max".into()),
        libc::E2BIG => open(format!(
            "the kernel does not understand perf_event_attr size {}; it is older than this build expects",
            crate::attr::ATTR_SIZE
        )),
        libc::ESRCH => open("the target process or thread does not exist (it may have exited)".into()),
        libc::EBUSY => open("the PMU is in exclusive use (another profiler, or counters pinned by the hypervisor); stop the other user".into()),
        libc::ENOSPC => open("no free hardware counters or breakpoint slots; use fewer events".into()),
        libc::EOVERFLOW => open("a callchain depth above kernel.perf_event_max_stack was requested".into()),
        _ => open("perf_event_open failed".into()),
    }
}

fn clone_err(err: &io::Error) -> io::Error {
    match err.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(err.kind(), err.to_string()),
    }
}

/// Event name without modifiers (`cycles:pp` -> `cycles`).
fn base_name(spec: &EventSpec) -> &str {
    let n = spec.name.as_str();
    if let Some(i) = n.rfind('/') {
        return &n[..=i];
    }
    match n.rsplit_once(':') {
        Some((base, m)) if m.chars().all(|c| "ukpP".contains(c)) => base,
        _ => n,
    }
}

fn precise_hint(spec: &EventSpec, caps: &Capabilities) -> String {
    let p = spec.precise;
    let base = base_name(spec);
    let sep = if base.ends_with('/') { "" } else { ":" };
    match caps.max_precise {
        Some(0) => {
            format!("this PMU has no precise sampling (no PEBS/IBS) but precise_ip={p} was requested; drop the :p modifiers ({base})")
        }
        Some(m) if m < p => {
            format!("precise_ip={p} exceeds this PMU's maximum ({m}); use {base}{sep}{} or {base}{sep}P", "p".repeat(m as usize))
        }
        _ if p > 1 => format!(
            "precise_ip={p} was rejected (this event may not support that precision); try a lower precision: {base}{sep}{}",
            "p".repeat(p as usize - 1)
        ),
        _ => format!("precise_ip=1 was rejected: this event has no precise (PEBS) support; drop :p ({base})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::{build_attr, parse_regs, ClockChoice, SamplingConfig};
    use tailprof_testkit::{skip, Need};

    fn is_perm(e: &io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
    }

    #[test]
    fn open_cpu_clock_for_real() {
        let spec = EventSpec::parse("cpu-clock").unwrap();
        let plan = build_attr(&spec, &SamplingConfig::default()).unwrap();
        let fd = match perf_event_open(&plan.attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) {
            Ok(fd) => fd,
            Err(e) if is_perm(&e) => {
                skip(Need::PerfEvents, format_args!("perf_event_open not permitted here: {e}"));
                return;
            }
            Err(e) => panic!("{}", explain_open_error(&e, &spec, &Capabilities::probe())),
        };
        ioctl_enable(&fd).unwrap();
        ioctl_disable(&fd).unwrap();
        assert!(ioctl_id(&fd).unwrap() > 0);

        // A second event whose records go to the first one's ring.
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * 2;
        // SAFETY: mapping a perf fd's ring (1 header + 1 data page); unmapped below.
        let ring =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        assert_ne!(ring, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        let cfg = SamplingConfig { sideband: false, ..Default::default() };
        let plan2 = build_attr(&EventSpec::parse("task-clock").unwrap(), &cfg).unwrap();
        let fd2 = perf_event_open(&plan2.attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC).unwrap();
        ioctl_set_output(&fd2, &fd).unwrap();
        assert_ne!(ioctl_id(&fd2).unwrap(), ioctl_id(&fd).unwrap());
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(ring, len) };
    }

    /// Every attr shape we build for software events is accepted by the running kernel.
    #[test]
    fn kernel_accepts_our_attrs() {
        let regs = parse_regs("r13,rdi,rsp,rip").unwrap();
        let cfgs = [
            SamplingConfig::default(),
            SamplingConfig { clock: ClockChoice::PerfDefault, freq: Some(999), ..Default::default() },
            SamplingConfig { regs_user: regs, wakeup_events: 4, inherit: true, ..Default::default() },
            SamplingConfig { enable_on_exec: true, sideband: false, ..Default::default() },
        ];
        for ev in ["cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "dummy", "cpu-clock:u"] {
            let mut spec = EventSpec::parse(ev).unwrap();
            for mem in [false, true] {
                spec.mem = mem;
                for cfg in &cfgs {
                    let plan = build_attr(&spec, cfg).unwrap();
                    match perf_event_open(&plan.attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) {
                        Ok(_) => {}
                        Err(e) if is_perm(&e) => skip(Need::PerfEvents, format_args!("{ev}: {e}")),
                        Err(e) => panic!("{ev} {cfg:?}: {e}\n{}", crate::attr::attr_golden_text(&plan.attr)),
                    }
                }
            }
        }
    }

    #[test]
    fn tracepoint_opens_if_available() {
        let Ok(spec) = EventSpec::parse("sched:sched_switch") else {
            skip(Need::Tracefs, "sched:sched_switch does not parse (no tracefs)");
            return;
        };
        let plan = build_attr(&spec, &SamplingConfig::default()).unwrap();
        match perf_event_open(&plan.attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) {
            Ok(_) => {}
            Err(e) if is_perm(&e) => skip(Need::PerfEvents, e),
            Err(e) => panic!("{}", explain_open_error(&e, &spec, &Capabilities::probe())),
        }
    }

    #[test]
    fn hardware_event_without_pmu() {
        let caps = Capabilities::probe();
        let spec = EventSpec::parse("cycles").unwrap();
        let plan = build_attr(&spec, &SamplingConfig::default()).unwrap();
        match perf_event_open(&plan.attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) {
            Ok(_) => assert!(caps.has_cpu_pmu, "cycles opened without a cpu PMU?"),
            Err(e) if is_perm(&e) => skip(Need::PerfEvents, e),
            Err(e) => {
                let ce = explain_open_error(&e, &spec, &caps);
                eprintln!("{ce}");
                if !caps.has_cpu_pmu {
                    assert!(matches!(ce, CollectError::NoHardwarePmu { .. }), "{ce:?}");
                    let msg = ce.to_string();
                    assert!(msg.contains("no hardware PMU") && msg.contains("'cycles'"), "{msg}");
                    assert!(msg.contains("use -e cpu-clock"), "{msg}");
                }
            }
        }
    }

    fn caps_with(pmu: bool, max_precise: Option<u8>, paranoid: Option<i32>) -> Capabilities {
        Capabilities {
            has_cpu_pmu: pmu,
            cpu_pmu_name: pmu.then(|| "cpu".into()),
            max_precise,
            perf_event_paranoid: paranoid,
            ..Default::default()
        }
    }

    fn errno(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn explanations() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tailprof-collect/tests/fixtures/sysfs");
        let spec = |s: &str| EventSpec::parse_with_sysfs(s, &root).unwrap();

        let e = explain_open_error(&errno(libc::ENOENT), &spec("LLC-load-misses"), &caps_with(false, None, None));
        assert!(matches!(e, CollectError::NoHardwarePmu { .. }));
        let e = explain_open_error(&errno(libc::EOPNOTSUPP), &spec("cpu/event=0xd1/"), &caps_with(false, None, None));
        assert!(matches!(e, CollectError::NoHardwarePmu { .. }));

        let e = explain_open_error(&errno(libc::EACCES), &spec("cycles"), &caps_with(true, None, Some(2)));
        let msg = e.to_string();
        assert!(matches!(e, CollectError::Permission { paranoid: Some(2), .. }));
        assert!(msg.contains("perf_event_paranoid = 2"), "{msg}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(msg.contains("CAP_PERFMON") && msg.contains("cycles:u"), "{msg}");
        } else {
            assert!(msg.contains("root") && msg.contains("CAP_PERFMON"), "{msg}");
        }

        let e = explain_open_error(&errno(libc::EINVAL), &spec("cycles:ppp"), &caps_with(true, Some(2), None));
        assert!(e.to_string().contains("use cycles:pp or cycles:P"), "{e}");
        let e = explain_open_error(&errno(libc::EOPNOTSUPP), &spec("cpu/event=0xd1/ppp"), &caps_with(true, None, None));
        assert!(e.to_string().contains("lower precision: cpu/event=0xd1/pp"), "{e}");
        let e = explain_open_error(&errno(libc::EINVAL), &spec("r01d1:p"), &caps_with(true, Some(0), None));
        assert!(e.to_string().contains("no precise sampling"), "{e}");

        let e = explain_open_error(&errno(libc::EMFILE), &spec("cpu-clock"), &caps_with(false, None, None));
        assert!(e.to_string().contains("ulimit -n"), "{e}");
        let e = explain_open_error(&errno(libc::ENOENT), &spec("LLC-load-misses"), &caps_with(true, None, None));
        assert!(e.to_string().contains("generic cache event"), "{e}");
        let e = explain_open_error(&errno(libc::ESRCH), &spec("cpu-clock"), &caps_with(true, None, None));
        assert!(matches!(e, CollectError::Open { .. }) && e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn error_conversions() {
        let e: CollectError = EventError::Empty.into();
        assert!(e.to_string().contains("cpu-clock"));
        let e = CollectError::io("reading x", errno(libc::ENOENT));
        assert!(e.to_string().starts_with("reading x: "));
    }
}
