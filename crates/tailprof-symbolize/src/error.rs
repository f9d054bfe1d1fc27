//! The symbolizer's errors: what went wrong, as a variant a caller can match on, and
//! [`Error::kind`] (modelled on blazesym's `ErrorKind`) to tell "not there" from
//! "damaged" from "not allowed" without reading the message. The message is one line, as
//! the CLI prints it.

use std::io;

/// The class of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A file, symbol or server answer that is not there.
    NotFound,
    /// The operating system refused, or a file or directory is not safe to trust (owned by
    /// another user, writable by others).
    PermissionDenied,
    /// A file that is not what it should be: not ELF, damaged, not a kallsyms file.
    Damaged,
    /// Input that belongs to something else: another kernel, host, boot or build.
    Mismatch,
    /// Larger than a bound.
    Limit,
    /// Not available in this build, configuration or environment, or turned off.
    Unavailable,
    /// A network request failed.
    Network,
    /// Any other I/O error.
    Io,
}

/// What went wrong while symbolizing (see [`ErrorKind`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error while doing `what` (usually a path); [`Error::kind`] follows the I/O
    /// error's kind.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// An ELF file the bounded reader refused; `what` names it when known.
    #[error("{}{source}", if what.is_empty() { String::new() } else { format!("{what}: ") })]
    Elf {
        what: String,
        #[source]
        source: tailprof_elf::Error,
    },
    /// A file that is not what it should be (message says which and why).
    #[error("{0}")]
    Damaged(String),
    /// A file or directory that is not safe to trust (another owner, writable by others),
    /// or something the system hides from this user.
    #[error("{0}")]
    Permission(String),
    /// The input comes from another kernel, host, boot or build.
    #[error("{0}")]
    Mismatch(String),
    /// Larger than a bound.
    #[error("{0}")]
    Limit(String),
    /// Not available here, or turned off.
    #[error("{0}")]
    Unavailable(String),
    /// Something looked for is not there (a debuginfod answer, a vDSO).
    #[error("{0}")]
    NotFound(String),
    /// A debuginfod server could not be reached or answered with an error.
    #[error("{0}")]
    Network(String),
}

impl Error {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => ErrorKind::NotFound,
                io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            },
            Error::Elf { source: tailprof_elf::Error::Io { source, .. }, .. } => match source.kind() {
                io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::Io,
            },
            Error::Elf { source: tailprof_elf::Error::TooLarge { .. }, .. } => ErrorKind::Limit,
            Error::Elf { .. } | Error::Damaged(_) => ErrorKind::Damaged,
            Error::Permission(_) => ErrorKind::PermissionDenied,
            Error::Mismatch(_) => ErrorKind::Mismatch,
            Error::Limit(_) => ErrorKind::Limit,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Network(_) => ErrorKind::Network,
        }
    }

    /// An I/O error while doing `what` (a path, or what was being done).
    pub(crate) fn io(what: impl std::fmt::Display, source: io::Error) -> Error {
        Error::Io { what: what.to_string(), source }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_cause_and_messages_stay_one_line() {
        let e = Error::io("/x", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.to_string().starts_with("/x: "), "{e}");
        let e = Error::io("/x", io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        let e = Error::Elf { what: "/bin/x".into(), source: tailprof_elf::Error::NotElf };
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::Damaged, "/bin/x: not an ELF file"));
        let e = Error::Elf { what: String::new(), source: tailprof_elf::Error::NotElf };
        assert_eq!(e.to_string(), "not an ELF file");
        let e = Error::Elf { what: String::new(), source: tailprof_elf::Error::TooLarge { size: 2, max: 1 } };
        assert_eq!(e.kind(), ErrorKind::Limit);
        assert_eq!(Error::Mismatch("m".into()).kind(), ErrorKind::Mismatch);
        assert_eq!(Error::Permission("t".into()).kind(), ErrorKind::PermissionDenied);
    }
}
