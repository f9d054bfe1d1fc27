//! Formatting of numbers, byte counts, durations and times for text output.

/// A function's name with its source location when known (`hotLoop (/srv/app.js:3)`,
/// `work (/src/work.c:4)`: the function's first line, or with `--lines` the frame's line,
/// from DWARF or a jitdump line table, computed by the analysis), as the HTML, flame
/// graph and Firefox views show it.
pub fn name_with_source(name: &str, source: Option<&str>) -> String {
    match source {
        Some(s) if !s.is_empty() => format!("{name} ({s})"),
        _ => name.to_owned(),
    }
}

/// [`name_with_source`] with the file cut to its last path component
/// (`work (work.c:4)`, [`short_source`]), for the columns of the text views.
pub fn name_with_short_source(name: &str, source: Option<&str>) -> String {
    name_with_source(name, source.map(short_source).as_deref())
}

/// `file:line` with the file cut to its last path component (`/src/app/work.c:4` →
/// `work.c:4`); a source that is not `file:line` unchanged. JSON and pprof keep the
/// whole path.
pub fn short_source(source: &str) -> std::borrow::Cow<'_, str> {
    match tailprof_analyze::resolve::split_source(source) {
        Some((file, line)) if file.contains('/') => format!("{}:{line}", file.rsplit('/').next().unwrap_or(file)).into(),
        _ => source.into(),
    }
}

/// `1234567` -> `1,234,567`.
#[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A percentage with two decimals: `12.34%`.
pub fn percent(p: f64) -> String {
    format!("{p:.2}%")
}

/// `part` as a percentage of `whole` (0 when `whole` is 0), e.g. `0.30%`. Small
/// non-zero shares print with more precision so they never read as `0.00%`.
pub fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0%".into();
    }
    let p = 100.0 * part as f64 / whole as f64;
    if part > 0 && p < 0.01 {
        format!("{p:.4}%")
    } else {
        format!("{p:.2}%")
    }
}

/// `1536` -> `1.50 KiB`; below 1 KiB: `123 B`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// Human-readable duration: `850 ns`, `12.5 µs`, `3.20 ms`, `1.234 s`, `2m 03.5s`,
/// `1h 02m 03s`.
pub fn duration(ns: u64) -> String {
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    match ns {
        n if n < US => format!("{n} ns"),
        n if n < MS => format!("{:.1} µs", n as f64 / US as f64),
        n if n < S => format!("{:.2} ms", n as f64 / MS as f64),
        n if n < 60 * S => format!("{:.3} s", n as f64 / S as f64),
        n if n < 3600 * S => {
            let secs = n as f64 / S as f64;
            let m = (secs / 60.0).floor();
            format!("{}m {:04.1}s", m as u64, secs - m * 60.0)
        }
        n => {
            let total = n / S;
            format!("{}h {:02}m {:02}s", total / 3600, (total / 60) % 60, total % 60)
        }
    }
}

/// Nanoseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_time(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// A period for people: "250 µs" for clock events, "32000" otherwise.
pub fn period_text(period: u64, clock: bool) -> String {
    if !clock {
        return period.to_string();
    }
    if period >= 1_000_000 && period % 1_000_000 == 0 {
        format!("{} ms", period / 1_000_000)
    } else if period >= 1000 {
        format!("{} µs", period as f64 / 1000.0)
    } else {
        format!("{period} ns")
    }
}

/// A per-sample cost: "850 ns", "12.30 µs".
pub fn ns_text(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{:.2} µs", v / 1000.0)
    } else {
        format!("{v:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_for_people() {
        assert_eq!(period_text(1_000_000, true), "1 ms");
        assert_eq!(period_text(250_000, true), "250 µs");
        assert_eq!(period_text(500, true), "500 ns");
        assert_eq!(period_text(32_000, false), "32000");
        assert_eq!(ns_text(850.0), "850 ns");
        assert_eq!(ns_text(12_300.0), "12.30 µs");
    }

    #[test]
    fn numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(share(3, 1000), "0.30%");
        assert_eq!(share(1, 1_000_000), "0.0001%");
        assert_eq!(share(0, 0), "0%");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(5 * 1024 * 1024), "5.00 MiB");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(850), "850 ns");
        assert_eq!(duration(12_500), "12.5 µs");
        assert_eq!(duration(3_200_000), "3.20 ms");
        assert_eq!(duration(1_234_000_000), "1.234 s");
        assert_eq!(duration(123_500_000_000), "2m 03.5s");
        assert_eq!(duration(3_723_000_000_000), "1h 02m 03s");
    }

    #[test]
    fn times() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_700_000_000_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc_time(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
    }
}
