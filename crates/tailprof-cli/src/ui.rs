//! Small printing helpers shared by the subcommands: error lines, numbers, progress.

use std::io::IsTerminal;

/// One line for an error chain: "outer: inner: root", without repeating a cause
/// that the outer message already contains.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let mut s = cause.to_string();
        // "cannot read X" followed by "X: No such file" reads as "cannot read X: No such file".
        while let Some((head, rest)) = s.split_once(": ") {
            if out.contains(head) {
                s = rest.to_string();
            } else {
                break;
            }
        }
        if s.is_empty() || out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out.replace('\n', " ")
}

/// `tailprof report | head` must exit quietly (like ripgrep): a broken pipe is not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

pub fn stderr_is_tty() -> bool {
    std::io::stderr().is_terminal()
}

/// Number, byte and duration formatting is the present stage's, shared with reports.
pub use tailprof_present::fmt::{bytes, duration, thousands};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_causes_without_repeats() {
        let e = anyhow::anyhow!("root cause").context("while doing x");
        assert_eq!(one_line(&e), "while doing x: root cause");
    }

    #[test]
    fn one_line_drops_a_repeated_path_prefix() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(io).context("/t/x: No such file").context("cannot read /t/x");
        assert_eq!(one_line(&e), "cannot read /t/x: No such file");
    }
}
