//! Things the reader of a profile or trace info must not miss: lost samples,
//! throttling, a truncated or damaged trace, and code that could not be named.

use serde::Serialize;
use tailprof_analyze::{FlatProfile, TraceInfo};
use tailprof_format::ReadSummary;

use crate::fmt::{bytes, share, thousands};

/// Unnamed code is warned about per binary when it holds at least this share.
const UNKNOWN_WARN_PERCENT: f64 = 1.0;
/// At most this many per-binary "not named" warnings.
const UNKNOWN_WARN_MAX: usize = 5;

/// One warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Stable identifier: `lost`, `throttled`, `truncated`, `damaged`, `duplicate`,
    /// `incomplete`, `unknown_code`.
    pub kind: &'static str,
    pub message: String,
}

fn w(kind: &'static str, message: String) -> Warning {
    Warning { kind, message }
}

/// `lost 12 samples (0.30%)`: `lost` against everything that was (or should have
/// been) recorded.
fn lost_warning(lost: u64, lost_records: u64, lost_samples: u64, recorded: u64) -> Option<Warning> {
    if lost == 0 {
        return None;
    }
    let mut msg = format!("lost {} samples ({})", thousands(lost), share(lost, recorded + lost));
    if lost_records > 0 && lost_samples > 0 {
        msg.push_str(&format!(": {} in full ring buffers, {} dropped by the PMU", thousands(lost_records), thousands(lost_samples)));
    } else if lost_records > 0 {
        msg.push_str(": ring buffers were full (raise the buffer size or lower the frequency)");
    } else {
        msg.push_str(": dropped by the PMU");
    }
    Some(w("lost", msg))
}

fn throttle_warning(throttled: u64) -> Option<Warning> {
    (throttled > 0).then(|| {
        w(
            "throttled",
            format!(
                "sampling was throttled {} times: the kernel lowered the sample rate \
                 (kernel.perf_event_max_sample_rate), so hot spots may be under-counted",
                thousands(throttled)
            ),
        )
    })
}

fn file_warnings(truncated: u64, damaged_chunks: u64, damaged_bytes: u64, complete: bool) -> Vec<Warning> {
    let mut out = Vec::new();
    if truncated > 0 {
        out.push(w("truncated", format!("trace is truncated: the last {} could not be read", bytes(truncated))));
    }
    if damaged_chunks > 0 {
        out.push(w("damaged", format!("skipped {} damaged chunks ({})", thousands(damaged_chunks), bytes(damaged_bytes))));
    }
    if !complete && truncated == 0 {
        out.push(w("incomplete", "trace was not closed cleanly (recording interrupted?)".into()));
    }
    out
}

fn read_warnings(r: &ReadSummary) -> Vec<Warning> {
    let mut out = file_warnings(r.truncated_bytes, r.damaged_chunks, r.damaged_bytes, r.complete);
    if r.duplicate_chunks > 0 {
        out.push(w(
            "duplicate",
            format!(
                "skipped {} duplicated chunks ({}): the file repeats data it already holds (copied or replayed region)",
                thousands(r.duplicate_chunks),
                bytes(r.duplicate_bytes)
            ),
        ));
    }
    out
}

/// Warnings for a flat profile.
pub fn profile_warnings(p: &FlatProfile) -> Vec<Warning> {
    let mut out = Vec::new();
    let recorded: u64 = p.events.iter().map(|e| e.samples).sum();
    out.extend(lost_warning(p.lost, p.lost_records, p.lost_samples, recorded));
    out.extend(throttle_warning(p.throttled));
    if let Some(r) = &p.read {
        out.extend(read_warnings(r));
    }
    for u in p.unknown.iter().filter(|u| u.percent >= UNKNOWN_WARN_PERCENT).take(UNKNOWN_WARN_MAX) {
        out.push(w(
            "unknown_code",
            format!("{} of samples ({}) in {} not named: {}", crate::fmt::percent(u.percent), thousands(u.samples), u.binary, u.reason),
        ));
    }
    for a in p.jit_advice.iter().filter(|a| a.percent >= UNKNOWN_WARN_PERCENT).take(UNKNOWN_WARN_MAX) {
        let who = match (&a.runtime, &a.comm) {
            (Some(r), _) => format!("{r} (pid {})", a.pid),
            (None, Some(c)) => format!("{c} (pid {})", a.pid),
            (None, None) => format!("pid {}", a.pid),
        };
        out.push(w(
            "jit_unnamed",
            format!(
                "{} of samples ({}) in JIT code of {who} without names: {}",
                crate::fmt::percent(a.percent),
                thousands(a.samples),
                a.advice
            ),
        ));
    }
    out
}

/// Warnings for trace info.
pub fn info_warnings(i: &TraceInfo) -> Vec<Warning> {
    let mut out = Vec::new();
    out.extend(lost_warning(i.lost, i.lost_records, i.lost_samples, i.samples));
    if i.lost_markers > 0 {
        out.push(w("lost", format!("lost {} markers", thousands(i.lost_markers))));
    }
    out.extend(throttle_warning(i.throttled));
    out.extend(file_warnings(i.truncated_bytes, i.damaged_chunks, i.damaged_bytes, i.complete));
    out
}
