//! The one error type of the measurement library.

use std::path::PathBuf;

/// Why a measurement could not be made. Each message names the problem and, where there
/// is one, the fix; the CLI prints it as one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeasureError {
    /// An option or input that cannot work (the message says which and what to use).
    #[error("{0}")]
    Invalid(String),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what}: {source}")]
    Os { what: String, source: std::io::Error },
    /// A stored calibration file that is damaged or holds implausible values.
    #[error("{0}")]
    BadCalibration(String),
    /// The measured command (or busy loop) failed.
    #[error("{0}")]
    CommandFailed(String),
    #[error("interrupted")]
    Interrupted,
    #[error(transparent)]
    Event(#[from] tailprof_collect::event::EventError),
    #[error(transparent)]
    Record(#[from] tailprof_collect::session::RecordError),
    #[error(transparent)]
    Count(#[from] tailprof_collect::counting::CountError),
    #[error(transparent)]
    Launch(#[from] tailprof_collect::target::LaunchError),
    #[error(transparent)]
    Format(#[from] tailprof_format::FormatError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl MeasureError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> MeasureError {
        MeasureError::Io { what, path: path.into(), source }
    }
    pub(crate) fn os(what: impl Into<String>, source: std::io::Error) -> MeasureError {
        MeasureError::Os { what: what.into(), source }
    }
}

pub type Result<T, E = MeasureError> = std::result::Result<T, E>;
