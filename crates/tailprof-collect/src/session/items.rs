//! The recorder's item side (issue 3): options, the queue that merges marker records
//! into the rounds, and opening uprobe item boundaries next to the sampling events.
//!
//! Marker records (from the marker library's shared-memory rings, drained by
//! [`crate::markers::MarkerCollector`]) are already decoded [`Record`]s, not raw ring
//! bytes, so they wait in a [`RecordQueue`] beside the raw [`crate::ring::RoundQueue`]
//! and are written by the same round rule: sorted by time, and before every raw record
//! the queued records stamped at or before it go first (see `session`'s module docs).

use std::io;

use tailprof_format::{FormatError, LossKind, Lost, Record};

use crate::attr::{parse_regs, reg_names, ClockChoice};
use crate::parse::Layout;
use crate::sys::{self, CollectError};
use crate::uprobe::{self, ItemProbes, PreparedProbes, ProbeRole, ResolvedProbe, UprobeAttrConfig};

/// What the recorder does about items, besides always collecting the marker library's
/// markers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemOptions {
    /// Item boundaries from uprobes on an unmodified binary (`--item-begin/--item-end`).
    pub probes: Option<ItemProbes>,
    /// Register-tag mode (`--item-reg r13`): capture this user register with every
    /// sample; its value is the sample's item id (0 = outside any item).
    pub item_reg: Option<String>,
}

/// `--item-reg NAME` → (sample_regs_user bit, canonical name).
pub(super) fn item_reg_mask(name: &str) -> Result<(u64, String), String> {
    let m = parse_regs(name).map_err(|e| e.to_string())?;
    if m.count_ones() != 1 {
        return Err(format!(
            "--item-reg takes exactly one register (got '{name}')"
        ));
    }
    Ok((
        m,
        reg_names(m)
            .first()
            .map(|s| s.to_string())
            .unwrap_or_else(|| name.to_string()),
    ))
}

/// Records waiting to be merged into the round (see the module docs).
#[derive(Debug, Default)]
pub(super) struct RecordQueue {
    /// Filled by the marker drain; sorted by [`RecordQueue::sort`].
    pub pending: Vec<Record>,
    pos: usize,
    /// Malformed ring records already stored as `Lost { kind: Malformed }`.
    malformed_stored: u64,
}

impl RecordQueue {
    /// Store the malformed ring records counted since the last call (`total` is the
    /// recorder's running count) as one `Lost { kind: Malformed }` record at `time`, so
    /// they are in the trace and its loss table, not only in the summary. Returns whether
    /// a record was queued.
    pub fn store_malformed(&mut self, total: u64, time: u64) -> bool {
        let new = total.saturating_sub(self.malformed_stored);
        self.malformed_stored = self.malformed_stored.max(total);
        if new == 0 {
            return false;
        }
        self.pending.push(Record::Lost(Lost { time, cpu: 0, event: None, kind: LossKind::Malformed, count: new }));
        true
    }

    /// Sort what was drained (stable: same-time records keep their ring order).
    pub fn sort(&mut self) {
        debug_assert_eq!(self.pos, 0);
        self.pending.sort_by_key(|r| r.time());
    }

    /// Hand out, in order, every queued record stamped at or before `t`.
    pub fn emit_upto(
        &mut self,
        t: u64,
        mut f: impl FnMut(Record) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        while let Some(r) = self.pending.get(self.pos) {
            if r.time() > t {
                break;
            }
            let r = r.clone();
            self.pos += 1;
            f(r)?;
        }
        Ok(())
    }

    /// Drop what was handed out; keep the rest for the next round.
    pub fn end_round(&mut self) {
        self.pending.drain(..self.pos);
        self.pos = 0;
    }
}

/// Uprobe item boundaries, ready to open per (task, CPU).
#[derive(Debug)]
pub(super) struct ProbeSet {
    /// The resolved begin/end probes (binary, offsets, id register, class).
    pub prepared: PreparedProbes,
    /// Event index of the begin probe in the decoder (the end probe is the next one).
    pub begin_event: u16,
}

impl ProbeSet {
    pub fn attr_config(
        &self,
        role: ProbeRole,
        clock: ClockChoice,
        inherit: bool,
        enable_on_exec: bool,
    ) -> UprobeAttrConfig {
        let r = self.probe(role);
        UprobeAttrConfig {
            offset: r.offset,
            ret: r.spec.ret,
            regs_user: if role == ProbeRole::Begin {
                self.prepared.id_reg_mask
            } else {
                0
            },
            clock,
            inherit,
            enable_on_exec,
        }
    }

    pub fn probe(&self, role: ProbeRole) -> &ResolvedProbe {
        match role {
            ProbeRole::Begin => &self.prepared.begin,
            ProbeRole::End => &self.prepared.end,
        }
    }

    /// Decoder layouts of the two probe events.
    pub fn layouts(&self, clock: ClockChoice) -> Vec<Layout> {
        [ProbeRole::Begin, ProbeRole::End]
            .iter()
            .map(|&role| {
                let a = uprobe::uprobe_attr(
                    &self.prepared.pmu,
                    &self.attr_config(role, clock, false, false),
                    0,
                );
                Layout {
                    sample_type: a.sample_type,
                    regs_user_mask: a.sample_regs_user,
                    sample_id_all: true,
                    default_period: 1,
                    ..Layout::default()
                }
            })
            .collect()
    }

    /// Open one probe for `pid` on `cpu`.
    pub fn open(
        &self,
        role: ProbeRole,
        pid: i32,
        cpu: i32,
        cfg: UprobeAttrConfig,
    ) -> Result<std::os::fd::OwnedFd, CollectError> {
        let path = match role {
            ProbeRole::Begin => &self.prepared.begin_path,
            ProbeRole::End => &self.prepared.end_path,
        };
        // `path` outlives the call; the kernel copies the string.
        let a = uprobe::uprobe_attr(&self.prepared.pmu, &cfg, path.as_ptr() as u64);
        sys::perf_event_open(&a, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC)
            .map_err(|e| open_error(&e, self.probe(role)))
    }

    /// `TraceHeader.extra` entries describing the probes.
    pub fn header_extra(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("item_begin".to_string(), self.prepared.begin.describe()),
            ("item_end".to_string(), self.prepared.end.describe()),
            (
                "item_id".to_string(),
                match &self.prepared.id_reg {
                    Some(r) => format!("register:{r}"),
                    None => "sequence".to_string(),
                },
            ),
        ];
        if let Some(c) = &self.prepared.class {
            v.push(("item_class".to_string(), c.clone()));
        }
        v
    }
}

fn open_error(e: &io::Error, probe: &ResolvedProbe) -> CollectError {
    let event = format!("uprobe {}", probe.spec);
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => CollectError::Permission {
            event,
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            hint: "uprobes need root (CAP_SYS_ADMIN), or CAP_PERFMON with access to the uprobe PMU".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        Some(libc::ENOENT) | Some(libc::EINVAL) => CollectError::Open {
            event,
            hint: format!(
                "the kernel refused the probe at offset {:#x} of {} (is the offset inside an executable segment, \
                 and does the kernel support uprobes on this file system?)",
                probe.offset,
                probe.path.display()
            ),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        _ => CollectError::Open {
            event,
            hint: "perf_event_open failed".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
    }
}

/// The symbol the marker library exports (its control block).
pub const MARKER_CONTROL_SYMBOL: &str = crate::markers::CONTROL_SYMBOL;

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{Marker, MarkerKind};

    fn m(time: u64) -> Record {
        Record::Marker(Marker {
            time,
            kind: MarkerKind::Begin,
            ..Marker::default()
        })
    }

    #[test]
    fn record_queue_merges_by_time_and_holds_back() {
        let mut q = RecordQueue::default();
        q.pending.extend([m(30), m(10), m(20)]);
        q.sort();
        let mut got = Vec::new();
        q.emit_upto(15, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.emit_upto(20, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.end_round();
        assert_eq!(got, [10, 20]);
        assert_eq!(q.pending.len(), 1);
        q.pending.push(m(25));
        q.sort();
        q.emit_upto(u64::MAX, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.end_round();
        assert_eq!(got, [10, 20, 25, 30]);
        assert!(q.pending.is_empty());
    }

    #[test]
    fn malformed_counts_are_stored_once() {
        let mut q = RecordQueue::default();
        assert!(!q.store_malformed(0, 5));
        assert!(q.store_malformed(3, 5));
        assert!(!q.store_malformed(3, 6));
        assert!(q.store_malformed(10, 7));
        let counts: Vec<u64> = q
            .pending
            .iter()
            .map(|r| match r {
                Record::Lost(l) if l.kind == LossKind::Malformed => l.count,
                _ => panic!("{r:?}"),
            })
            .collect();
        assert_eq!(counts, [3, 7]);
    }

    #[test]
    fn item_reg_names() {
        assert_eq!(item_reg_mask("r13").unwrap(), (1 << 21, "r13".to_string()));
        assert!(item_reg_mask("r13,rdi").is_err());
        assert!(item_reg_mask("eax").is_err());
    }
}
