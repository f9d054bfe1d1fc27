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
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

pub fn stderr_is_tty() -> bool {
    std::io::stderr().is_terminal()
}

/// 1234567 -> "1,234,567"
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Human-readable byte count.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Human-readable duration from nanoseconds.
pub fn duration(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

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
