//! The agent's configuration: a file of `key = value` lines (`#` starts a comment;
//! values may be quoted), overridden by command-line options. Every key is documented
//! in `docs/STORE.md` ("Agent configuration"). An unknown key or a bad value is one
//! error naming the file, the line and the fix.

use std::path::{Path, PathBuf};

use tailprof_store::time::parse_duration_us;

use crate::AgentError;

/// Largest config file read (it is a handful of lines).
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// Everything the agent needs to run.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Store directory (`store`); default [`tailprof_store::default_root`] (empty when
    /// there is none: opening the store then says what to set).
    pub store: PathBuf,
    /// Aggregation window (`window`, default 10 s).
    pub window_us: i64,
    /// Sampling frequency per CPU in Hz (`frequency`, default 49) unless `period` is set.
    pub frequency: u64,
    /// Fixed period in events (ns for cpu-clock) (`period`); overrides `frequency`.
    pub period: Option<u64>,
    /// Event (`event`, default `cpu-clock`).
    pub event: String,
    /// Record frame-pointer call stacks (`stacks = fp|none`, default fp).
    pub stacks: bool,
    /// Host name in the partition path (`host`, default the machine's name).
    pub host: String,
    /// Retention (`retain_age`, e.g. `14d`; `retain_size`, e.g. `2G`).
    pub retain_age_us: Option<i64>,
    pub retain_bytes: Option<u64>,
    /// Merge the window files of finished hours (`compact = true|false`, default true).
    pub compact: bool,
    /// Ring size in pages per CPU (`mmap_pages`, default 64).
    pub mmap_pages: usize,
    /// Stop after this long (tests, benchmarks); None = until SIGTERM/SIGINT.
    pub duration_us: Option<i64>,
    /// Push every window as pprof to this URL (`push`, http://host:port/path).
    pub push: Option<String>,
    /// Send every window as OTLP profiles to this OTLP/HTTP endpoint (`otlp`,
    /// http://host:port, `/v1development/profiles` appended unless given).
    pub otlp: Option<String>,
    /// Requests: tail-based retention (`slow_threshold`, e.g. `50ms`; `item_begin`/`item_end`
    /// uprobes as in `record`). Markers are picked up from processes that link the marker
    /// library without any setting.
    pub slow_threshold_ns: Option<u64>,
    pub item_begin: Option<String>,
    pub item_end: Option<String>,
    /// Keep a request when it is slower than this percentile of its class's recent
    /// requests (`slow_percentile`, default 99; `off` = 0: only `slow_threshold`).
    pub slow_percentile: f64,
    /// Keep the causes of retained requests (`causes = true|false`, default false): who
    /// woke them and who ran while they waited for a CPU (issue 21). Records every
    /// context switch and `sched:sched_waking` (with the waker's stack) from the first
    /// marker on; off by default, an always-on cost on busy machines.
    pub causes: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            store: tailprof_store::default_root().unwrap_or_default(),
            window_us: 10_000_000,
            frequency: 49,
            period: None,
            event: "cpu-clock".into(),
            stacks: true,
            host: tailprof_store::layout::local_host(),
            retain_age_us: Some(14 * 86_400_000_000),
            retain_bytes: Some(2 << 30),
            compact: true,
            mmap_pages: 64,
            duration_us: None,
            push: None,
            otlp: None,
            slow_threshold_ns: None,
            item_begin: None,
            item_end: None,
            slow_percentile: 99.0,
            causes: false,
        }
    }
}

/// `2G`, `500M`, `64K`, `1024` (bytes).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn bool_value(v: &str) -> Option<bool> {
    match v {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// A config key that is unknown or a value it does not accept ([`AgentConfig::set`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigValueError {
    /// Not a key of the config (the message lists the known ones).
    #[error("{0}")]
    UnknownKey(String),
    /// A value the key does not accept; `what` says what it takes.
    #[error("{key} = {value:?}: {what}")]
    BadValue { key: String, value: String, what: String },
}

impl AgentConfig {
    /// Sets one key. `Err` carries what is wrong and what is accepted.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigValueError> {
        let bad = |what: &str| Err(ConfigValueError::BadValue { key: key.to_string(), value: value.to_string(), what: what.to_string() });
        match key {
            "store" => {
                if value.is_empty() {
                    return bad("give a directory");
                }
                self.store = PathBuf::from(value)
            }
            "window" => match parse_duration_us(value) {
                Some(w) if (1_000_000..=3_600_000_000).contains(&w) => self.window_us = w,
                _ => return bad("give a duration between 1s and 1h, e.g. 10s"),
            },
            "frequency" => match value.parse::<u64>() {
                Ok(f) if (1..=10_000).contains(&f) => self.frequency = f,
                _ => return bad("give samples per second per CPU, 1 to 10000 (default 49)"),
            },
            "period" => match value.parse::<u64>() {
                Ok(p) if p > 0 => self.period = Some(p),
                _ => return bad("give a positive number of events (nanoseconds for cpu-clock)"),
            },
            "event" => self.event = value.to_string(),
            "stacks" => match value {
                "fp" => self.stacks = true,
                "none" => self.stacks = false,
                _ => return bad("use fp or none"),
            },
            "host" => self.host = tailprof_store::layout::sanitize_host(value),
            "retain_age" => match value {
                "none" | "0" => self.retain_age_us = None,
                _ => match parse_duration_us(value) {
                    Some(a) if a > 0 => self.retain_age_us = Some(a),
                    _ => return bad("give a duration such as 14d, or none"),
                },
            },
            "retain_size" => match value {
                "none" | "0" => self.retain_bytes = None,
                _ => match parse_size(value) {
                    Some(b) => self.retain_bytes = Some(b),
                    None => return bad("give a size such as 2G or 500M, or none"),
                },
            },
            "compact" => match bool_value(value) {
                Some(b) => self.compact = b,
                None => return bad("use true or false"),
            },
            "mmap_pages" => match value.parse::<usize>() {
                Ok(p) if p.is_power_of_two() && p <= 65536 => self.mmap_pages = p,
                _ => return bad("give a power of two (pages per CPU ring), e.g. 64"),
            },
            "duration" => match parse_duration_us(value) {
                Some(d) if d > 0 => self.duration_us = Some(d),
                _ => return bad("give a duration, e.g. 30s"),
            },
            "push" => {
                if !value.starts_with("http://") {
                    return bad("give an http:// URL of a Pyroscope- or Parca-compatible ingest endpoint");
                }
                self.push = Some(value.to_string())
            }
            "otlp" => match crate::otlp::endpoint(value) {
                Ok(_) => self.otlp = Some(value.to_string()),
                Err(e) => return bad(&format!("{e}; give the http:// URL of an OTLP/HTTP receiver, e.g. http://127.0.0.1:4318")),
            },
            "slow_threshold" => match parse_duration_us(value) {
                Some(d) if d > 0 => self.slow_threshold_ns = Some((d as u64).saturating_mul(1000)),
                _ => return bad("give a duration, e.g. 50ms"),
            },
            "slow_percentile" if value == "off" => self.slow_percentile = 0.0,
            "slow_percentile" => match value.parse::<f64>() {
                Ok(p) if p > 0.0 && p < 100.0 => self.slow_percentile = p,
                _ => return bad("give a percentile between 0 and 100, e.g. 99, or off"),
            },
            "causes" => match bool_value(value) {
                Some(b) => self.causes = b,
                None => return bad("use true or false"),
            },
            "item_begin" => self.item_begin = Some(value.to_string()),
            "item_end" => self.item_end = Some(value.to_string()),
            _ => {
                return Err(ConfigValueError::UnknownKey(format!(
                    "unknown key {key:?} (known: store, window, frequency, period, event, stacks, host, \
                     retain_age, retain_size, compact, mmap_pages, duration, push, otlp, slow_threshold, \
                     slow_percentile, causes, item_begin, item_end)"
                )))
            }
        }
        Ok(())
    }

    /// Reads a config file over the defaults.
    pub fn load(path: &Path) -> Result<AgentConfig, AgentError> {
        let mut c = AgentConfig::default();
        c.apply_file(path)?;
        Ok(c)
    }

    /// Applies the `key = value` lines of `path`.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), AgentError> {
        let cfg_err = |msg: String| AgentError::Config(format!("{}: {msg}", path.display()));
        let md = std::fs::metadata(path).map_err(|e| cfg_err(format!("cannot read it: {e}")))?;
        if !md.is_file() || md.len() > MAX_CONFIG_BYTES {
            return Err(cfg_err(format!("not a regular file of at most {MAX_CONFIG_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| cfg_err(format!("cannot read it: {e}")))?;
        self.apply_text(&text).map_err(|(line, msg)| cfg_err(format!("line {line}: {msg}")))
    }

    /// Applies config text; `Err((line, message))`.
    pub fn apply_text(&mut self, text: &str) -> Result<(), (usize, String)> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split_once('#').map_or(raw, |(a, _)| a).trim();
            if line.is_empty() {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err((i + 1, format!("{line:?} is not `key = value`")));
            };
            let v = v.trim();
            let v = v.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(v);
            self.set(k.trim(), v).map_err(|m| (i + 1, m.to_string()))?;
        }
        Ok(())
    }

    /// Checks combinations.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.item_begin.is_some() != self.item_end.is_some() {
            return Err(AgentError::Config("item_begin and item_end go together: set both or neither".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let mut c = AgentConfig::default();
        c.apply_text("# comment\nwindow = 5s\nfrequency=99 # trailing\nstore = \"/tmp/x\"\nretain_size = 1G\n").unwrap();
        assert_eq!((c.window_us, c.frequency, c.retain_bytes), (5_000_000, 99, Some(1 << 30)));
        assert_eq!(c.store, PathBuf::from("/tmp/x"));
        let e = c.apply_text("window = 5s\nfrequncy = 9\n").unwrap_err();
        assert_eq!(e.0, 2);
        assert!(e.1.contains("unknown key"));
        assert!(c.apply_text("window = 0s").is_err());
        assert!(c.apply_text("just words").is_err());
    }
}
