//! Where tailprof keeps what it measured about this machine: α calibrations
//! ([`crate::calibration`]) and the bandwidth probe's result ([`crate::probe_store`]).
//! The one definition of the calibration directory.

use std::path::{Path, PathBuf};

pub use tailprof_format::dirs::DataDirError;

/// The calibration directory: `calibration/` in the data directory
/// ([`tailprof_format::dirs::data_dir`]: `$TAILPROF_HOME`, else `/var/lib/tailprof` for
/// root, else `$XDG_DATA_HOME/tailprof`, else `~/.local/share/tailprof`). The error says
/// what to set.
pub fn calibration_dir() -> Result<PathBuf, DataDirError> {
    Ok(calibration_dir_in(&tailprof_format::dirs::data_dir()?))
}

/// The calibration directory in the data directory `tailprof_home` (what
/// `TAILPROF_HOME=tailprof_home` gives).
pub fn calibration_dir_in(tailprof_home: &Path) -> PathBuf {
    tailprof_home.join("calibration")
}
