//! Where tailprof keeps what it measured about this machine: α calibrations
//! ([`crate::calibration`]) and the bandwidth probe's result ([`crate::probe_store`]).
//! The one definition of the calibration directory.

use std::path::{Path, PathBuf};

/// Why there is no calibration directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    /// Neither `TAILPROF_HOME`, `XDG_DATA_HOME` nor `HOME` is set.
    #[error("cannot find a place for calibration files: set TAILPROF_HOME or HOME")]
    NoHome,
}

/// The calibration directory: `$TAILPROF_HOME/calibration/` when `TAILPROF_HOME` is set
/// (and not empty), else `$XDG_DATA_HOME/tailprof/calibration/`, else
/// `~/.local/share/tailprof/calibration/`. The error says what to set.
pub fn calibration_dir() -> Result<PathBuf, DataDirError> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(home) = nonempty("TAILPROF_HOME") {
        return Ok(calibration_dir_in(&home));
    }
    if let Some(data) = nonempty("XDG_DATA_HOME") {
        return Ok(data.join("tailprof/calibration"));
    }
    let home = nonempty("HOME").ok_or(DataDirError::NoHome)?;
    Ok(home.join(".local/share/tailprof/calibration"))
}

/// The calibration directory when `TAILPROF_HOME` is `tailprof_home`.
pub fn calibration_dir_in(tailprof_home: &Path) -> PathBuf {
    tailprof_home.join("calibration")
}
