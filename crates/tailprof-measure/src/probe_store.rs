//! Where the bandwidth probe's result ([`tailprof_collect::bandwidth::probe`]) is kept:
//! like calibrations, one JSON file per (CPU model, kernel) in the calibration directory
//! ([`crate::datadir::calibration_dir`]), named `bandwidth-peak-<cpu>-<kernel>.json`.

use std::path::PathBuf;

use tailprof_collect::bandwidth::probe::{ProbeError, ProbeResult};
use tailprof_collect::caps::Capabilities;

/// The calibration directory ([`crate::datadir`]).
pub fn store_dir() -> Result<PathBuf, ProbeError> {
    crate::datadir::calibration_dir().map_err(|e| ProbeError::Options(e.to_string().replace("calibration files", "the probe result")))
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').chars().take(80).collect()
}

/// `bandwidth-peak-<cpu>-<kernel>.json`.
pub fn probe_file_name(cpu_model: &str, kernel: &str) -> String {
    format!("bandwidth-peak-{}-{}.json", slug(cpu_model), slug(kernel))
}

/// Where this machine's result is (or would be) stored.
pub fn probe_path() -> Result<PathBuf, ProbeError> {
    let caps = Capabilities::probe();
    Ok(store_dir()?
        .join(probe_file_name(caps.cpu_desc.as_deref().unwrap_or("unknown CPU"), caps.os_release.as_deref().unwrap_or("unknown kernel"))))
}

/// Store `r` for its machine, replacing an older result; returns the path.
pub fn save(r: &ProbeResult) -> Result<PathBuf, ProbeError> {
    let p = store_dir()?.join(probe_file_name(&r.cpu_model, &r.kernel));
    let io = |what: String| move |source| ProbeError::Io { what, source };
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    }
    let text = serde_json::to_string_pretty(r).map_err(|e| ProbeError::Options(e.to_string()))?;
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &p).map_err(io(format!("writing {}", p.display())))?;
    Ok(p)
}

/// This machine's stored result, if any.
pub fn load() -> Result<Option<(ProbeResult, PathBuf)>, ProbeError> {
    let p = probe_path()?;
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ProbeError::Io { what: format!("reading {}", p.display()), source }),
    };
    let r: ProbeResult =
        serde_json::from_str(&text).map_err(|e| ProbeError::BadFile { path: p.display().to_string(), reason: e.to_string() })?;
    Ok(Some((r, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(probe_file_name("Intel(R) Xeon(R) Processor", "6.1.0-x"), "bandwidth-peak-intel_r_xeon_r_processor-6.1.0_x.json");
    }
}
