//! Wall-clock times of the store: microseconds since the Unix epoch, UTC.
//!
//! Windows are measured on CLOCK_MONOTONIC (like every tailprof time) but stored with
//! their wall-clock (CLOCK_REALTIME) start and end, because a store outlives reboots
//! and is joined across hosts. Partitions use the UTC date and hour of the start.

/// Now, in microseconds since the epoch (CLOCK_REALTIME).
pub fn now_us() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Days since 1970-01-01 → (year, month 1-12, day 1-31) (proleptic Gregorian).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The partition of a time: (`YYYY-MM-DD`, hour 0-23), UTC.
pub fn partition_of(us: i64) -> (String, u32) {
    let secs = us.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let hour = (secs.rem_euclid(86_400) / 3600) as u32;
    let (y, m, d) = civil_from_days(days);
    (format!("{y:04}-{m:02}-{d:02}"), hour)
}

/// Start of the hour partition `date=…/hour=…` in µs, or None if malformed.
pub fn hour_start_us(date: &str, hour: u32) -> Option<i64> {
    let mut it = date.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hour > 23 {
        return None;
    }
    Some((days_from_civil(y, m, d) * 86_400 + hour as i64 * 3600) * 1_000_000)
}

/// ISO 8601 in UTC with seconds: `2026-11-23T20:41:26Z`.
pub fn format_utc(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (date, _) = partition_of(us);
    let sod = secs.rem_euclid(86_400);
    format!("{date}T{:02}:{:02}:{:02}Z", sod / 3600, (sod % 3600) / 60, sod % 60)
}

/// Parses a duration: `90`, `90s`, `500ms`, `10m`, `1h`, `2d` (a bare number is seconds).
pub fn parse_duration_us(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "" | "s" => 1e6,
        "ms" => 1e3,
        "us" => 1.0,
        "m" | "min" => 60e6,
        "h" => 3600e6,
        "d" => 86_400e6,
        _ => return None,
    };
    let r = v * mult;
    (0.0..9.0e18).contains(&r).then_some(r as i64)
}

/// Parses a point in time: `2026-11-23T20:41:26Z`, `2026-11-23 20:41`, `2026-11-23`
/// (UTC), `@1700000000` (Unix seconds), or `-1h` / `now` relative to `now_us`.
pub fn parse_time_us(s: &str, now_us: i64) -> Option<i64> {
    let s = s.trim();
    if s == "now" {
        return Some(now_us);
    }
    if let Some(rel) = s.strip_prefix('-') {
        return parse_duration_us(rel).map(|d| now_us.saturating_sub(d));
    }
    if let Some(epoch) = s.strip_prefix('@') {
        let v: f64 = epoch.parse().ok()?;
        return (v.is_finite() && v.abs() < 9.0e12).then_some((v * 1e6) as i64);
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, rest) = match s.find(['T', ' ']) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    };
    let day0 = hour_start_us(date, 0)?;
    if rest.is_empty() {
        return Some(day0);
    }
    let mut parts = rest.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next().map(|p| p.parse().ok()).unwrap_or(Some(0))?;
    let sec: f64 = parts.next().map(|p| p.parse().ok()).unwrap_or(Some(0.0))?;
    if !(0..24).contains(&h) || !(0..60).contains(&m) || !(0.0..61.0).contains(&sec) {
        return None;
    }
    Some(day0 + (h * 3600 + m * 60) * 1_000_000 + (sec * 1e6) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for d in [-800_000i64, -1, 0, 1, 19_000, 20_415, 2_932_896] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(partition_of(1_700_000_000_000_000), ("2023-11-14".to_string(), 22));
    }

    #[test]
    fn parses_times() {
        let now = 1_700_000_000_000_000;
        assert_eq!(parse_time_us("2023-11-14T22:13:20Z", 0), Some(now));
        assert_eq!(parse_time_us("@1700000000", 0), Some(now));
        assert_eq!(parse_time_us("-1h", now), Some(now - 3_600_000_000));
        assert_eq!(format_utc(now), "2023-11-14T22:13:20Z");
        assert_eq!(parse_duration_us("10s"), Some(10_000_000));
        assert_eq!(parse_duration_us("bogus"), None);
        assert_eq!(parse_time_us("2023-13-01", 0), None);
    }
}
