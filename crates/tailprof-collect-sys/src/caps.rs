//! What this machine can do: core CPU PMU, precise levels, TSC conversion of the perf
//! clock, online CPUs, perf_event_paranoid, the uprobe PMU.

use std::fs;
use std::path::Path;
use std::ptr::addr_of;
use std::sync::atomic::{fence, Ordering};

use perf_event_open_sys::bindings as b;
use tailprof_format::ClockInfo;

use crate::attr::{ClockChoice, PerfEventAttr, ATTR_SIZE};
use crate::event::{read_max_precise, CORE_PMUS, SYSFS_PMU_ROOT};
use crate::sys::{perf_event_open, CollectError, PERF_FLAG_FD_CLOEXEC};

/// Parameters to turn a TSC value into perf-clock nanoseconds (from the perf mmap page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscConversion {
    pub time_shift: u16,
    pub time_mult: u32,
    pub time_zero: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// A core CPU PMU exists (`cpu`, or `cpu_core`/`cpu_atom` on hybrid parts).
    pub has_cpu_pmu: bool,
    pub cpu_pmu_name: Option<String>,
    /// `<pmu>/caps/max_precise`, or found by probing `cycles` with precise_ip 3..0.
    pub max_precise: Option<u8>,
    /// Present when the perf mmap page sets `cap_user_time_zero`.
    pub tsc: Option<TscConversion>,
    pub online_cpus: Vec<u32>,
    pub perf_event_paranoid: Option<i32>,
    pub uprobe_pmu_type: Option<u32>,
    /// `model name` from /proc/cpuinfo.
    pub cpu_desc: Option<String>,
    pub os_release: Option<String>,
}

impl Capabilities {
    /// Probe the live machine. Never fails; unknown facts stay `None`/empty.
    pub fn probe() -> Capabilities {
        let mut c = Self::probe_sysfs(Path::new(SYSFS_PMU_ROOT));
        if c.has_cpu_pmu && c.max_precise.is_none() {
            c.max_precise = probe_max_precise();
        }
        c.tsc = read_tsc_conversion().ok().flatten();
        c.online_cpus = online_cpus().unwrap_or_default();
        c.perf_event_paranoid = read_trim("/proc/sys/kernel/perf_event_paranoid").and_then(|s| s.parse().ok());
        c.cpu_desc = fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| cpu_model_name(&s));
        c.os_release = read_trim("/proc/sys/kernel/osrelease");
        c
    }

    /// Only the PMU facts, from a sysfs `event_source/devices` directory (tests use a
    /// fake tree); no syscalls.
    pub fn probe_sysfs(root: &Path) -> Capabilities {
        let cpu_pmu_name = CORE_PMUS.iter().find(|p| root.join(p).is_dir()).map(|p| p.to_string());
        Capabilities {
            has_cpu_pmu: cpu_pmu_name.is_some(),
            max_precise: cpu_pmu_name.as_deref().and_then(|p| read_max_precise(root, p)),
            cpu_pmu_name,
            uprobe_pmu_type: read_trim(root.join("uprobe/type")).and_then(|s| s.parse().ok()),
            ..Default::default()
        }
    }

    /// `PerfDefault` only when the perf clock can be converted from TSC; otherwise
    /// CLOCK_MONOTONIC via use_clockid.
    pub fn clock_choice(&self) -> ClockChoice {
        if self.tsc.is_some() {
            ClockChoice::PerfDefault
        } else {
            ClockChoice::Monotonic
        }
    }

    pub fn clock_info(&self, choice: ClockChoice) -> ClockInfo {
        match (choice, self.tsc) {
            (ClockChoice::Monotonic, _) => ClockInfo::Monotonic,
            (ClockChoice::PerfDefault, Some(t)) => {
                ClockInfo::PerfTsc { time_shift: t.time_shift, time_mult: t.time_mult, time_zero: t.time_zero }
            }
            (ClockChoice::PerfDefault, None) => ClockInfo::Perf,
        }
    }
}

/// perf-clock ns for a TSC value, with the split multiply documented in
/// `struct perf_event_mmap_page` (no 64-bit overflow of `tsc * mult`).
pub fn tsc_to_ns(tsc: u64, c: &TscConversion) -> u64 {
    let shift = u32::from(c.time_shift).min(63);
    let mult = u64::from(c.time_mult);
    let quot = tsc >> shift;
    let rem = tsc & ((1u64 << shift) - 1);
    c.time_zero.wrapping_add(quot.wrapping_mul(mult)).wrapping_add(rem.wrapping_mul(mult) >> shift)
}

/// CPUs in /sys/devices/system/cpu/online.
pub fn online_cpus() -> Result<Vec<u32>, CollectError> {
    let path = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(path).map_err(|e| CollectError::io(format!("reading {path}"), e))?;
    parse_cpu_list(&text).ok_or_else(|| {
        CollectError::io(
            format!("parsing {path}"),
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad cpu list '{}'", text.trim())),
        )
    })
}

/// Parse a kernel cpu list (`0-1,4`, `0`, `0-3,8-11`) into sorted, unique CPU numbers.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim) {
        if part.is_empty() {
            return None;
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let v = part.parse::<u32>().ok()?;
                (v, v)
            }
        };
        if lo > hi || hi - lo > 1 << 16 {
            return None;
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Bits of `perf_event_mmap_page.capabilities`.
const CAP_USER_TIME_ZERO: u64 = 1 << 4;
const CAP_USER_TIME_SHORT: u64 = 1 << 5;

/// Open a dummy software event on this thread, map its first page and read the TSC
/// conversion under the page's `lock` seqcount. `Ok(None)` when `cap_user_time_zero` is
/// clear (no TSC-based perf clock, e.g. many VMs) or when `cap_user_time_short` asks for
/// the wrap-around variant we do not implement (not used on x86).
#[allow(clippy::field_reassign_with_default)] // perf_event_attr: fields, then its bitfield setters
pub fn read_tsc_conversion() -> Result<Option<TscConversion>, CollectError> {
    use std::os::fd::AsRawFd;
    let mut a = PerfEventAttr::default();
    a.type_ = b::PERF_TYPE_SOFTWARE;
    a.size = ATTR_SIZE;
    a.config = b::PERF_COUNT_SW_DUMMY as u64;
    a.set_disabled(1);
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    let fd = perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC)
        .map_err(|e| CollectError::io("opening a dummy event to read the perf mmap page", e))?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: mapping the header page of a perf fd read-only; checked for MAP_FAILED.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if ptr == libc::MAP_FAILED {
        return Err(CollectError::io("mapping the perf mmap page", std::io::Error::last_os_error()));
    }
    let pg = ptr as *const b::perf_event_mmap_page;
    let mut result = None;
    for _ in 0..1000 {
        // SAFETY: `pg` points at a live, page-sized, kernel-updated mapping; fields are
        // read with volatile loads between two reads of the seqcount.
        let (seq, caps, shift, mult, zero, seq2) = unsafe {
            let seq = std::ptr::read_volatile(addr_of!((*pg).lock));
            fence(Ordering::Acquire);
            let caps = std::ptr::read_volatile(addr_of!((*pg).__bindgen_anon_1.capabilities));
            let shift = std::ptr::read_volatile(addr_of!((*pg).time_shift));
            let mult = std::ptr::read_volatile(addr_of!((*pg).time_mult));
            let zero = std::ptr::read_volatile(addr_of!((*pg).time_zero));
            fence(Ordering::Acquire);
            (seq, caps, shift, mult, zero, std::ptr::read_volatile(addr_of!((*pg).lock)))
        };
        if seq % 2 == 0 && seq == seq2 {
            result = Some((caps, shift, mult, zero));
            break;
        }
        std::hint::spin_loop();
    }
    // SAFETY: unmapping exactly what we mapped.
    unsafe { libc::munmap(ptr, page) };
    let Some((caps, time_shift, time_mult, time_zero)) = result else {
        return Ok(None);
    };
    if caps & CAP_USER_TIME_ZERO == 0 || caps & CAP_USER_TIME_SHORT != 0 || time_mult == 0 {
        return Ok(None);
    }
    Ok(Some(TscConversion { time_shift, time_mult, time_zero }))
}

/// Highest precise_ip the core PMU accepts for `cycles` (user-only, this thread), for
/// kernels without `caps/max_precise`.
#[allow(clippy::field_reassign_with_default)] // perf_event_attr: fields, then its bitfield setters
fn probe_max_precise() -> Option<u8> {
    for p in (0..=3u8).rev() {
        let mut a = PerfEventAttr::default();
        a.type_ = b::PERF_TYPE_HARDWARE;
        a.size = ATTR_SIZE;
        a.config = b::PERF_COUNT_HW_CPU_CYCLES as u64;
        a.sample_period = 100_003;
        a.set_precise_ip(p as u64);
        a.set_disabled(1);
        a.set_exclude_kernel(1);
        a.set_exclude_hv(1);
        if perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC).is_ok() {
            return Some(p);
        }
    }
    None
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn cpu_model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1,4\n"), Some(vec![0, 1, 4]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,8-11"), Some(vec![0, 1, 2, 3, 8, 9, 10, 11]));
        assert_eq!(parse_cpu_list("4,0-1"), Some(vec![0, 1, 4]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0,,1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        let live = online_cpus().unwrap();
        assert!(!live.is_empty());
    }

    #[test]
    fn tsc_conversion_math() {
        let c = TscConversion { time_shift: 0, time_mult: 1, time_zero: 100 };
        assert_eq!(tsc_to_ns(5, &c), 105);
        // 3 GHz TSC: mult/2^31 ≈ 1/3. 3e9 cycles = 1 s, hand-computed:
        // quot = 3e9 >> 31 = 1, rem = 852516352;
        // 1*715827883 + (852516352*715827883 >> 31) = 715827883 + 284172117 = 1000000000.
        let c = TscConversion { time_shift: 31, time_mult: 715_827_883, time_zero: 0 };
        assert_eq!(tsc_to_ns(3_000_000_000, &c), 1_000_000_000);
        // 2.5 GHz, shift 10: mult = 2^10 / 2.5 = 409.6 -> 410 (rounded, as the kernel does).
        let c = TscConversion { time_shift: 10, time_mult: 410, time_zero: 7 };
        assert_eq!(tsc_to_ns(1024, &c), 7 + 410);
        assert_eq!(tsc_to_ns(1025, &c), 7 + 410);
        assert_eq!(tsc_to_ns(1027, &c), 7 + 410 + 1); // 3*410 >> 10 = 1
                                                      // Large TSC where tsc * mult overflows u64: must equal the exact 128-bit result.
        let c = TscConversion { time_shift: 31, time_mult: 715_827_883, time_zero: 12345 };
        let tsc = 0x00ff_ffff_ffff_ffffu64;
        let exact = 12345 + ((tsc as u128 * 715_827_883u128) >> 31) as u64;
        assert_eq!(tsc_to_ns(tsc, &c), exact);
    }

    #[test]
    fn capability_bits_match_bindings() {
        let mut u = b::perf_event_mmap_page__bindgen_ty_1 { capabilities: CAP_USER_TIME_ZERO };
        // SAFETY: both union members are plain integers.
        assert_eq!(unsafe { u.__bindgen_anon_1.cap_user_time_zero() }, 1);
        u.capabilities = CAP_USER_TIME_SHORT;
        assert_eq!(unsafe { u.__bindgen_anon_1.cap_user_time_short() }, 1);
    }

    #[test]
    fn sysfs_detection() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tailprof-collect/tests/fixtures/sysfs");
        let c = Capabilities::probe_sysfs(&root);
        assert!(c.has_cpu_pmu);
        assert_eq!(c.cpu_pmu_name.as_deref(), Some("cpu"));
        assert_eq!(c.max_precise, Some(3));
        assert_eq!(c.uprobe_pmu_type, Some(7));
        let none = Capabilities::probe_sysfs(&root.join("cpu/format"));
        assert!(!none.has_cpu_pmu && none.max_precise.is_none());
    }

    #[test]
    fn clock_selection() {
        let mut c = Capabilities::default();
        assert_eq!(c.clock_choice(), ClockChoice::Monotonic);
        assert_eq!(c.clock_info(ClockChoice::Monotonic), ClockInfo::Monotonic);
        assert_eq!(c.clock_info(ClockChoice::PerfDefault), ClockInfo::Perf);
        c.tsc = Some(TscConversion { time_shift: 31, time_mult: 3, time_zero: 9 });
        assert_eq!(c.clock_choice(), ClockChoice::PerfDefault);
        assert_eq!(c.clock_info(ClockChoice::PerfDefault), ClockInfo::PerfTsc { time_shift: 31, time_mult: 3, time_zero: 9 });
    }

    #[test]
    fn live_probe() {
        let c = Capabilities::probe();
        eprintln!("{c:?}");
        assert!(!c.online_cpus.is_empty());
        assert_eq!(c.has_cpu_pmu, c.cpu_pmu_name.is_some());
        if let Some(t) = c.tsc {
            assert!(t.time_mult != 0);
        }
        // On this project's PMU-less CI VM (no cpu PMU, cap_user_time_zero = 0), the
        // clock must fall back to CLOCK_MONOTONIC.
        if !c.has_cpu_pmu && c.tsc.is_none() {
            assert_eq!(c.clock_choice(), ClockChoice::Monotonic);
        }
        match read_tsc_conversion() {
            Ok(t) => assert_eq!(t, c.tsc),
            Err(e) => tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("mmap-page check: {e}")),
        }
    }
}
