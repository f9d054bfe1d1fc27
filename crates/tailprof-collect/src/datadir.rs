//! Where tailprof keeps what it measured about this machine: α calibrations
//! (`tailprof_measure::calibration`) and the bandwidth probe
//! ([`crate::bandwidth::probe`]). The one definition of the calibration directory.

use std::path::{Path, PathBuf};

/// The calibration directory: `calibration/` in the data directory
/// ([`tailprof_format::dirs::data_dir`]: `$TAILPROF_HOME`, else `/var/lib/tailprof` for
/// root, else `$XDG_DATA_HOME/tailprof`, else `~/.local/share/tailprof`). The error says
/// what to set.
pub fn calibration_dir() -> Result<PathBuf, String> {
    let data = tailprof_format::dirs::data_dir()
        .map_err(|_| "cannot find a place for calibration files: set TAILPROF_HOME or HOME".to_string())?;
    Ok(calibration_dir_in(&data))
}

/// The calibration directory in the data directory `tailprof_home` (what
/// `TAILPROF_HOME=tailprof_home` gives).
pub fn calibration_dir_in(tailprof_home: &Path) -> PathBuf {
    tailprof_home.join("calibration")
}
