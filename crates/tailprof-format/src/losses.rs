//! The one table of loss and damage counters.
//!
//! Every way a trace can be missing data — the kernel dropped records, a marker ring was
//! full, a target wrote garbage the recorder rejected, a chunk on disk was damaged,
//! duplicated or cut off — is one row here with a severity, so `record`, `info`,
//! `report` and `items` print them the same way (the present stage renders
//! [`LossTable`]). Collection-time counters come from [`TraceStats`] (stored in the trace
//! as `Lost` records, chunk meta counts and the trailer); read-time counters come from
//! [`ReadSummary`].
//!
//! ```
//! use tailprof_format::{losses::{LossTable, Severity}, TraceStats, LossKind};
//! let mut stats = TraceStats::default();
//! stats.add_loss(LossKind::Malformed, 3);
//! let t = LossTable::new(&stats, None);
//! assert_eq!(t.rows[0].key, "malformed_records");
//! assert_eq!(t.rows[0].severity, Severity::Error);
//! assert_eq!(t.worst(), Some(Severity::Error));
//! ```

use crate::record::{LossKind, TraceStats};
use crate::ReadSummary;
use serde::Serialize;

/// How bad a counter is (after Perfetto's stats table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; no data is missing (e.g. throttling announced by the kernel).
    Info,
    /// Data is missing: results undercount by about this much.
    DataLoss,
    /// Something produced input that should not exist (a damaged file, garbage from a
    /// target): results may be wrong beyond the missing data.
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::DataLoss => "data loss",
            Severity::Error => "error",
        }
    }
}

/// One counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LossRow {
    /// Stable machine name (JSON key).
    pub key: &'static str,
    pub count: u64,
    pub severity: Severity,
    /// What was lost, for people ("records lost in full kernel rings").
    pub what: &'static str,
    /// What to do about it, when there is something to do.
    pub remedy: &'static str,
}

/// Every non-zero loss or damage counter of a trace, worst first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LossTable {
    pub rows: Vec<LossRow>,
}

struct Def {
    key: &'static str,
    severity: Severity,
    what: &'static str,
    remedy: &'static str,
}

fn def_of(kind: LossKind) -> Def {
    match kind {
        LossKind::RingFull => Def {
            key: "lost_records",
            severity: Severity::DataLoss,
            what: "records lost because a kernel ring was full",
            remedy: "use a longer period or more ring pages (--mmap-pages)",
        },
        LossKind::Samples => Def {
            key: "lost_samples",
            severity: Severity::DataLoss,
            what: "samples dropped by the PMU/PEBS path",
            remedy: "use a longer period",
        },
        LossKind::Markers => Def {
            key: "lost_markers",
            severity: Severity::DataLoss,
            what: "item markers dropped because a marker ring was full",
            remedy: "fewer markers per round, or a faster drain (shorter --mmap-pages rounds)",
        },
        LossKind::Malformed => Def {
            key: "malformed_records",
            severity: Severity::Error,
            what: "records that could not be decoded and were skipped",
            remedy: "",
        },
        LossKind::ItemClasses => Def {
            key: "dropped_item_classes",
            severity: Severity::DataLoss,
            what: "item-class labels over the per-process limit (their items have no class)",
            remedy: "use fewer distinct class labels",
        },
        LossKind::MarkersRejected => Def {
            key: "rejected_markers",
            severity: Severity::Error,
            what: "markers rejected as invalid or over a per-target bound",
            remedy: "",
        },
        LossKind::JitNames => Def {
            key: "skipped_jit_names",
            severity: Severity::DataLoss,
            what: "JIT code names skipped (bad or too long perf-map lines or jitdump records, over a per-process bound, or a refused file)",
            remedy: "see docs/SYMBOLS.md (runtimes and flags) for the bounds and the file rules",
        },
        LossKind::JitLines => Def {
            key: "skipped_jit_lines",
            severity: Severity::DataLoss,
            what: "JIT source-line entries skipped (jitdump DEBUG_INFO over a per-function or per-recording bound, or malformed)",
            remedy: "see docs/SYMBOLS.md (runtimes and flags) for the bounds",
        },
    }
}

impl LossTable {
    /// The table of `stats` (collection time) and, when given, `read` (reading this
    /// file). Only non-zero counters appear; rows are ordered worst severity first,
    /// then in a fixed order.
    pub fn new(stats: &TraceStats, read: Option<&ReadSummary>) -> LossTable {
        let mut rows = Vec::new();
        for kind in LossKind::ALL {
            let count = stats.loss_count(kind);
            if count > 0 {
                let d = def_of(kind);
                rows.push(LossRow { key: d.key, count, severity: d.severity, what: d.what, remedy: d.remedy });
            }
        }
        if stats.throttle_events > 0 {
            rows.push(LossRow {
                key: "throttle_events",
                count: stats.throttle_events,
                severity: Severity::Info,
                what: "times the kernel throttled sampling (samples missing until unthrottled)",
                remedy: "use a longer period, or raise kernel.perf_event_max_sample_rate",
            });
        }
        if let Some(r) = read {
            let mut push = |key, count, severity, what, remedy| {
                if count > 0 {
                    rows.push(LossRow { key, count, severity, what, remedy });
                }
            };
            push("damaged_chunks", r.damaged_chunks, Severity::Error, "chunks skipped because their checksum or contents were bad", "");
            push("damaged_bytes", r.damaged_bytes, Severity::Error, "bytes inside damaged chunks", "");
            push("truncated_bytes", r.truncated_bytes, Severity::DataLoss, "bytes of a cut-off tail (the recorder did not finish)", "");
            push("duplicate_chunks", r.duplicate_chunks, Severity::Error, "chunks that repeat an earlier chunk, skipped", "");
            push(
                "skipped_records",
                r.skipped_records,
                Severity::Info,
                "records of kinds this build does not know (a newer writer)",
                "upgrade tailprof",
            );
            push(
                "skipped_chunks",
                r.skipped_chunks,
                Severity::Info,
                "chunks of kinds this build does not know (a newer writer)",
                "upgrade tailprof",
            );
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.severity));
        LossTable { rows }
    }

    /// The worst severity present, `None` when nothing was lost.
    pub fn worst(&self) -> Option<Severity> {
        self.rows.iter().map(|r| r.severity).max()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The count of `key`, 0 when absent.
    pub fn count(&self, key: &str) -> u64 {
        self.rows.iter().find(|r| r.key == key).map_or(0, |r| r.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_row() {
        let mut stats = TraceStats::default();
        for (i, k) in LossKind::ALL.into_iter().enumerate() {
            stats.add_loss(k, i as u64 + 1);
        }
        let t = LossTable::new(&stats, None);
        assert_eq!(t.rows.len(), LossKind::ALL.len());
        let mut keys: Vec<_> = t.rows.iter().map(|r| r.key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), LossKind::ALL.len());
        // Worst first.
        assert!(t.rows.windows(2).all(|w| w[0].severity >= w[1].severity));
        assert_eq!(t.count("rejected_markers"), 6);
    }

    #[test]
    fn read_side_counters_and_empty_table() {
        assert!(LossTable::new(&TraceStats::default(), Some(&ReadSummary::default())).is_empty());
        let r = ReadSummary { duplicate_chunks: 2, truncated_bytes: 10, ..Default::default() };
        let t = LossTable::new(&TraceStats::default(), Some(&r));
        assert_eq!(t.count("duplicate_chunks"), 2);
        assert_eq!(t.rows[0].key, "duplicate_chunks");
        assert_eq!(t.worst(), Some(Severity::Error));
    }

    #[test]
    fn counts_saturate() {
        let mut stats = TraceStats::default();
        stats.add_loss(LossKind::MarkersRejected, u64::MAX);
        stats.add_loss(LossKind::MarkersRejected, 5);
        assert_eq!(stats.loss_count(LossKind::MarkersRejected), u64::MAX);
    }
}
