//! Where `tailprof calibrate` keeps α, and how `plan` and `overhead` find it again.
//!
//! One JSON file ([`Calibration`]) per (CPU model, kernel, event) in the calibration
//! directory ([`dir`]): `$TAILPROF_HOME/calibration/` when `TAILPROF_HOME` is set, else
//! `/var/lib/tailprof/calibration/` as root, else `$XDG_DATA_HOME/tailprof/calibration/`,
//! else `~/.local/share/tailprof/calibration/` (`tailprof_format::dirs::data_dir`).
//! The bandwidth probe stores its result in the same directory. The file name comes from
//! [`calibration_file_name`].
//!
//! Files are written 0600 through a temporary name and a rename (never through a
//! symlink); on load a file is read only if it is a regular file of bounded size, and
//! its values must be plausible ([`validate`]): a hand-edited α of −5 ns, NaN or 1 hour
//! per sample is refused with one line naming the file, the value and the fix, so `plan`
//! never recommends a period from it.

use std::path::{Path, PathBuf};

use tailprof_analyze::overhead::{calibration_file_name, Calibration, CALIBRATION_VERSION};
use tailprof_collect::caps::Capabilities;

use crate::error::{MeasureError, Result};
use crate::private::{create_private_dir_all, read_regular, write_private};

pub use tailprof_analyze::measured::{AlphaSource, MachineKey};

/// The key of a machine with these capabilities.
pub fn machine_key(caps: &Capabilities) -> MachineKey {
    MachineKey {
        cpu_model: caps.cpu_desc.clone().unwrap_or_else(|| "unknown CPU".into()),
        kernel: caps.os_release.clone().unwrap_or_else(|| "unknown kernel".into()),
        online_cpus: caps.online_cpus.len() as u32,
    }
}

/// This machine's key.
pub fn probe_machine() -> MachineKey {
    machine_key(&Capabilities::probe())
}

/// Largest plausible α: 10 ms per sample (the kernel's shortest cpu-clock period is
/// 10 µs; a sample that costs a thousand times that is a damaged file, not a machine).
pub const MAX_ALPHA_NS: f64 = 1e7;
/// Largest plausible trace size per sample.
pub const MAX_BYTES_PER_SAMPLE: f64 = 1024.0 * 1024.0;
/// Calibration files larger than this are refused unread.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The calibration directory (see the module docs).
pub fn dir() -> Result<PathBuf> {
    crate::datadir::calibration_dir().map_err(|e| MeasureError::Invalid(e.to_string()))
}

/// The calibration directory for `TAILPROF_HOME=tailprof_home` (tests and tools that
/// set the variable for a child).
pub fn dir_in(tailprof_home: &Path) -> PathBuf {
    crate::datadir::calibration_dir_in(tailprof_home)
}

/// The file for `event` on this machine.
pub fn path(key: &MachineKey, event: &str) -> Result<PathBuf> {
    Ok(path_in(&dir()?, key, event))
}

/// The file for `event` on this machine in the calibration directory `dir`.
pub fn path_in(dir: &Path, key: &MachineKey, event: &str) -> PathBuf {
    dir.join(calibration_file_name(&key.cpu_model, &key.kernel, event))
}

/// Store a calibration, replacing an older one (0600, temporary file + rename); returns
/// where.
pub fn save(key: &MachineKey, cal: &Calibration) -> Result<PathBuf> {
    save_in(&dir()?, key, cal)
}

/// [`save`] into the calibration directory `dir`.
pub fn save_in(dir: &Path, key: &MachineKey, cal: &Calibration) -> Result<PathBuf> {
    let p = path_in(dir, key, &cal.event);
    let parent = p.parent().unwrap_or(Path::new("."));
    create_private_dir_all(parent).map_err(|e| MeasureError::io("cannot create", parent, e))?;
    let text = serde_json::to_string_pretty(cal)? + "\n";
    write_private(&p, text.as_bytes()).map_err(|e| MeasureError::io("cannot write", &p, e))?;
    Ok(p)
}

/// The stored calibration for `event` on this machine, if any. A file that is not a
/// calibration, or holds implausible values, is an error naming the file and the fix.
pub fn load(key: &MachineKey, event: &str) -> Result<Option<(Calibration, PathBuf)>> {
    load_in(&dir()?, key, event)
}

/// [`load`] from the calibration directory `dir`.
pub fn load_in(dir: &Path, key: &MachineKey, event: &str) -> Result<Option<(Calibration, PathBuf)>> {
    let p = path_in(dir, key, event);
    let bytes = match read_regular(&p, MAX_FILE_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(MeasureError::BadCalibration(format!("cannot read {}: {e}; {}", p.display(), redo(event)))),
    };
    let cal: Calibration = serde_json::from_slice(&bytes)
        .map_err(|e| MeasureError::BadCalibration(format!("{} is not a tailprof calibration file ({e}); {}", p.display(), redo(event))))?;
    validate(&cal, event).map_err(|why| MeasureError::BadCalibration(format!("{}: {why}; {}", p.display(), redo(event))))?;
    Ok(Some((cal, p)))
}

fn redo(event: &str) -> String {
    format!("run `tailprof calibrate -e {event}` again to replace it")
}

/// Why a calibration cannot be used ([`validate`]): each names the field and what it
/// must be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Implausible {
    #[error("format version {0} (this tailprof reads version {CALIBRATION_VERSION})")]
    Version(u32),
    #[error("it is for event '{found}', not '{wanted}'")]
    OtherEvent { found: String, wanted: String },
    #[error("{field} = {value} is not a plausible cost per sample (must be a number of nanoseconds above 0 and at most 10 ms)")]
    Alpha { field: &'static str, value: f64 },
    #[error("alpha_ci_ns = [{0}, {1}] is not an interval of plausible costs")]
    Interval(f64, f64),
    #[error("bytes_per_sample = {0} is not plausible (must be above 0 and at most 1 MiB)")]
    BytesPerSample(f64),
    #[error("recorder_cpu_ns_per_sample = {0} is not plausible (must be between 0 and 10 ms)")]
    RecorderCpu(f64),
}

/// Why `cal` cannot be a calibration of `event` made by this tailprof, or `Ok`.
pub fn validate(cal: &Calibration, event: &str) -> std::result::Result<(), Implausible> {
    if cal.version != CALIBRATION_VERSION {
        return Err(Implausible::Version(cal.version));
    }
    if cal.event != event {
        return Err(Implausible::OtherEvent { found: cal.event.clone(), wanted: event.to_string() });
    }
    check_alpha("alpha_ns", cal.alpha_ns)?;
    let (lo, hi) = cal.alpha_ci_ns;
    if !(lo.is_finite() && hi.is_finite() && lo <= hi && lo.abs() <= MAX_ALPHA_NS && hi.abs() <= MAX_ALPHA_NS) {
        return Err(Implausible::Interval(lo, hi));
    }
    if let Some(b) = cal.bytes_per_sample {
        if !(b.is_finite() && b > 0.0 && b <= MAX_BYTES_PER_SAMPLE) {
            return Err(Implausible::BytesPerSample(b));
        }
    }
    if let Some(r) = cal.recorder_cpu_ns_per_sample {
        if !(r.is_finite() && (0.0..=MAX_ALPHA_NS).contains(&r)) {
            return Err(Implausible::RecorderCpu(r));
        }
    }
    Ok(())
}

/// α must be a finite number above 0 and at most [`MAX_ALPHA_NS`].
fn check_alpha(field: &'static str, a: f64) -> std::result::Result<(), Implausible> {
    if a.is_finite() && a > 0.0 && a <= MAX_ALPHA_NS {
        Ok(())
    } else {
        Err(Implausible::Alpha { field, value: a })
    }
}

/// α for `event`: `alpha_arg` (`--alpha`) when given, else the stored calibration.
/// `Ok(None)` when neither exists.
pub fn alpha_for(key: &MachineKey, event: &str, alpha_arg: Option<f64>) -> Result<Option<AlphaSource>> {
    if let Some(a) = alpha_arg {
        if !(a.is_finite() && (0.0..=MAX_ALPHA_NS).contains(&a)) {
            return Err(MeasureError::Invalid(format!("--alpha must be a non-negative number of nanoseconds, at most 10 ms (got {a})")));
        }
        return Ok(Some(AlphaSource { alpha_ns: a, ci_ns: None, calibration: None, path: None }));
    }
    Ok(load(key, event)?.map(|(cal, path)| AlphaSource {
        alpha_ns: cal.alpha_ns,
        ci_ns: Some(cal.alpha_ci_ns),
        calibration: Some(cal),
        path: Some(path),
    }))
}

/// The error for a missing calibration.
pub fn missing(key: &MachineKey, event: &str) -> MeasureError {
    MeasureError::Invalid(format!(
        "no calibration for '{event}' on this machine ({}, kernel {}): run `tailprof calibrate -e {event}` first, or pass --alpha NS",
        key.cpu_model, key.kernel
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_analyze::overhead::{Basis, Point};

    fn cal(alpha: f64) -> Calibration {
        Calibration {
            version: CALIBRATION_VERSION,
            event: "cpu-clock".into(),
            cpu_model: "cpu".into(),
            kernel: "6.1".into(),
            online_cpus: 2,
            basis: Basis::Cpu,
            alpha_ns: alpha,
            alpha_ci_ns: (alpha * 0.9, alpha * 1.1),
            r2: 0.99,
            intercept_s: 0.5,
            bytes_per_sample: Some(3.0),
            recorder_cpu_ns_per_sample: Some(100.0),
            periods: vec![1_000_000],
            points: vec![Point { group: 0, samples: 0.0, time_s: 0.5 }],
            created_unix: 0,
            tailprof_version: "test".into(),
            loadavg: None,
            notes: vec![],
        }
    }

    #[test]
    fn save_and_load_round_trip_and_refuse_hand_edits() {
        let home = tempfile::tempdir().unwrap();
        let dir = dir_in(home.path());
        let key = MachineKey { cpu_model: "Test CPU".into(), kernel: "6.1".into(), online_cpus: 2 };
        assert!(load_in(&dir, &key, "cpu-clock").unwrap().is_none());
        let p = save_in(&dir, &key, &cal(12_000.0)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        let (c, p2) = load_in(&dir, &key, "cpu-clock").unwrap().unwrap();
        assert_eq!((c.alpha_ns, p2), (12_000.0, p.clone()));
        // Hand-edited to α = −5: one line naming the file, the value and the fix.
        let text = std::fs::read_to_string(&p).unwrap().replace("\"alpha_ns\": 12000.0", "\"alpha_ns\": -5.0");
        std::fs::write(&p, text).unwrap();
        let e = load_in(&dir, &key, "cpu-clock").unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1);
        assert!(
            e.contains(&p.display().to_string()) && e.contains("alpha_ns = -5") && e.contains("tailprof calibrate -e cpu-clock"),
            "{e}"
        );
        // Garbage and symlinks are refused, too.
        std::fs::write(&p, "not json").unwrap();
        assert!(load_in(&dir, &key, "cpu-clock").unwrap_err().to_string().contains("is not a tailprof calibration file"));
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &p).unwrap();
        assert!(load_in(&dir, &key, "cpu-clock").unwrap_err().to_string().contains("symbolic link"));
    }

    #[test]
    fn implausible_values_are_refused() {
        assert!(validate(&cal(12_000.0), "cpu-clock").is_ok());
        for bad in [-5.0, 0.0, f64::NAN, f64::INFINITY, 3.6e12] {
            let e = validate(&cal(bad), "cpu-clock").unwrap_err().to_string();
            assert!(e.contains("alpha_ns") && e.contains("not a plausible cost"), "{bad}: {e}");
        }
        assert!(matches!(validate(&cal(1000.0), "cycles"), Err(Implausible::OtherEvent { .. })));
        assert!(validate(&cal(1000.0), "cycles").unwrap_err().to_string().contains("for event 'cpu-clock'"));
        let mut c = cal(1000.0);
        c.bytes_per_sample = Some(-1.0);
        assert!(validate(&c, "cpu-clock").unwrap_err().to_string().contains("bytes_per_sample"));
        let mut c = cal(1000.0);
        c.version = 99;
        assert_eq!(validate(&c, "cpu-clock"), Err(Implausible::Version(99)));
        assert!(validate(&c, "cpu-clock").unwrap_err().to_string().contains("format version 99"));
    }
}
