//! Where `tailprof calibrate` keeps α, and how `plan` and `overhead` find it again.
//!
//! One JSON file per (CPU model, kernel, event) in the calibration directory:
//! `$TAILPROF_HOME/calibration/` when `TAILPROF_HOME` is set, else
//! `$XDG_DATA_HOME/tailprof/calibration/`, else `~/.local/share/tailprof/calibration/`.
//! The file name comes from [`calibration_file_name`]; the content is
//! [`Calibration`] as JSON.

use anyhow::{anyhow, Context, Result};
use std::path::PathBuf;

use tailprof_analyze::overhead::{calibration_file_name, Calibration};
use tailprof_collect::caps::Capabilities;

/// The machine facts a calibration is valid for.
#[derive(Debug, Clone)]
pub struct MachineKey {
    pub cpu_model: String,
    pub kernel: String,
    pub online_cpus: u32,
}

impl MachineKey {
    pub fn probe(caps: &Capabilities) -> MachineKey {
        MachineKey {
            cpu_model: caps.cpu_desc.clone().unwrap_or_else(|| "unknown CPU".into()),
            kernel: caps.os_release.clone().unwrap_or_else(|| "unknown kernel".into()),
            online_cpus: caps.online_cpus.len() as u32,
        }
    }
}

/// The calibration directory (see the module docs).
pub fn dir() -> Result<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = nonempty("TAILPROF_HOME") {
        return Ok(home.join("calibration"));
    }
    if let Some(data) = nonempty("XDG_DATA_HOME") {
        return Ok(data.join("tailprof/calibration"));
    }
    let home = nonempty("HOME").ok_or_else(|| anyhow!("cannot find a place for calibration files: set TAILPROF_HOME or HOME"))?;
    Ok(home.join(".local/share/tailprof/calibration"))
}

/// The file for `event` on this machine.
pub fn path(key: &MachineKey, event: &str) -> Result<PathBuf> {
    Ok(dir()?.join(calibration_file_name(&key.cpu_model, &key.kernel, event)))
}

/// Store a calibration, replacing an older one; returns where.
pub fn save(key: &MachineKey, cal: &Calibration) -> Result<PathBuf> {
    let p = path(key, &cal.event)?;
    let parent = p.parent().expect("calibration path has a directory");
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let text = serde_json::to_string_pretty(cal)?;
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
    Ok(p)
}

/// The stored calibration for `event` on this machine, if any.
pub fn load(key: &MachineKey, event: &str) -> Result<Option<(Calibration, PathBuf)>> {
    let p = path(key, event)?;
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
    };
    let cal: Calibration = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a tailprof calibration file; run `tailprof calibrate -e {event}` again", p.display()))?;
    Ok(Some((cal, p)))
}

/// α for `event`: `--alpha` when given, else the stored calibration. `Ok(None)` when
/// neither exists.
pub fn alpha_for(key: &MachineKey, event: &str, alpha_arg: Option<f64>) -> Result<Option<AlphaSource>> {
    if let Some(a) = alpha_arg {
        if !(a.is_finite() && a >= 0.0) {
            return Err(anyhow!("--alpha must be a non-negative number of nanoseconds (got {a})"));
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

/// Where α came from.
#[derive(Debug, Clone)]
pub struct AlphaSource {
    pub alpha_ns: f64,
    pub ci_ns: Option<(f64, f64)>,
    pub calibration: Option<Calibration>,
    pub path: Option<PathBuf>,
}

impl AlphaSource {
    /// "12.3 µs [11.9, 12.8] (calibrated <path>)" / "(--alpha)".
    pub fn describe(&self) -> String {
        let ci = self.ci_ns.map(|(l, h)| format!(" [{}, {}]", ns(l), ns(h))).unwrap_or_default();
        let from = match &self.path {
            Some(p) => format!("calibration {}", p.display()),
            None => "--alpha".into(),
        };
        format!("{}{ci} per sample ({from})", ns(self.alpha_ns))
    }
}

/// "850 ns", "12.3 µs".
pub fn ns(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{:.2} µs", v / 1000.0)
    } else {
        format!("{v:.0} ns")
    }
}

/// The error line for a missing calibration.
pub fn missing(key: &MachineKey, event: &str) -> anyhow::Error {
    anyhow!(
        "no calibration for '{event}' on this machine ({}, kernel {}): run `tailprof calibrate -e {event}` first, or pass --alpha NS",
        key.cpu_model,
        key.kernel
    )
}
