//! Counters a trace carries about itself: records, losses, stack statuses, switches.

use super::*;

/// Counters a trace carries about itself and its collection. The writer fills the
/// record-derived ones; the recorder adds what it knows (e.g. wakeups); all of them are
/// printed by `tailprof info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TraceStats {
    pub samples: u64,
    /// Sum of `Lost::count` over all [`LossKind::RingFull`] records.
    pub lost_records: u64,
    /// Sum of `Lost::count` over all [`LossKind::Samples`] records.
    pub lost_samples: u64,
    /// Sum of dropped markers.
    pub lost_markers: u64,
    /// Sum of `Lost::count` over [`LossKind::Malformed`] records (version 2).
    #[serde(default)]
    pub malformed_records: u64,
    /// Sum of `Lost::count` over [`LossKind::ItemClasses`] records (version 2).
    #[serde(default)]
    pub dropped_item_classes: u64,
    /// Sum of `Lost::count` over [`LossKind::MarkersRejected`] records (version 2).
    #[serde(default)]
    pub rejected_markers: u64,
    /// Sum of `Lost::count` over [`LossKind::JitNames`] records (version 4; not written
    /// when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_jit_names: u64,
    /// Sum of `Lost::count` over [`LossKind::JitLines`] records (version 6; not written
    /// when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_jit_lines: u64,
    pub throttle_events: u64,
    pub unthrottle_events: u64,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    /// Samples per [`StackStatus`] (samples without a stack are not counted here:
    /// `samples - sample_stacks.total()`). Absent in version-1 traces (all zero).
    #[serde(default)]
    pub sample_stacks: StackStatusCounts,
    /// Switch records per kind.
    #[serde(default)]
    pub switches: SwitchCounts,
    /// Switch records per [`StackStatus`] of their off-CPU stack.
    #[serde(default)]
    pub switch_stacks: StackStatusCounts,
    /// [`Wakeup`] records (version 3; not written when 0, so traces without wakeups keep
    /// their trailer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wakeups: u64,
}

/// Counts per [`StackStatus`], `None` excluded. Unknown fields in JSON are ignored, so a
/// newer writer's extra statuses do not break older readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct StackStatusCounts {
    pub complete: u64,
    pub copy_exhausted: u64,
    pub no_unwind_info: u64,
    pub unwind_error: u64,
    pub max_depth: u64,
    pub user_missing: u64,
    pub unknown: u64,
}

impl StackStatusCounts {
    /// The counter of `s`; `None` for [`StackStatus::None`].
    pub fn get_mut(&mut self, s: StackStatus) -> Option<&mut u64> {
        Some(match s {
            StackStatus::None => return None,
            StackStatus::Complete => &mut self.complete,
            StackStatus::CopyExhausted => &mut self.copy_exhausted,
            StackStatus::NoUnwindInfo => &mut self.no_unwind_info,
            StackStatus::UnwindError => &mut self.unwind_error,
            StackStatus::MaxDepth => &mut self.max_depth,
            StackStatus::UserMissing => &mut self.user_missing,
            StackStatus::Unknown => &mut self.unknown,
        })
    }
    /// The count of `s` (0 for [`StackStatus::None`]).
    pub fn get(&self, s: StackStatus) -> u64 {
        let mut c = *self;
        c.get_mut(s).map_or(0, |v| *v)
    }
    /// Adds `n` to the counter of `s` (saturating; `None` is not counted).
    pub fn add(&mut self, s: StackStatus, n: u64) {
        if let Some(c) = self.get_mut(s) {
            *c = c.saturating_add(n);
        }
    }
    /// Adds every counter of `o`.
    pub fn add_all(&mut self, o: &StackStatusCounts) {
        for s in StackStatus::ALL {
            self.add(s, o.get(s));
        }
    }
    /// Stacks counted (every status but `None`).
    pub fn total(&self) -> u64 {
        StackStatus::ALL.iter().fold(0u64, |a, &s| a.saturating_add(self.get(s)))
    }
    /// Stacks that are truncated or failed ([`StackStatus::is_truncated`]).
    pub fn truncated(&self) -> u64 {
        StackStatus::ALL.iter().filter(|s| s.is_truncated()).fold(0u64, |a, &s| a.saturating_add(self.get(s)))
    }
    /// `(status, count)` for every status with a non-zero count, in code order.
    pub fn nonzero(&self) -> Vec<(StackStatus, u64)> {
        StackStatus::ALL.iter().map(|&s| (s, self.get(s))).filter(|&(_, n)| n > 0).collect()
    }
}

/// Switch records per [`SwitchKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SwitchCounts {
    /// [`SwitchKind::In`].
    pub switch_in: u64,
    pub out_preempted: u64,
    pub out_blocked: u64,
}

impl SwitchCounts {
    pub fn add(&mut self, k: SwitchKind, n: u64) {
        let c = match k {
            SwitchKind::In => &mut self.switch_in,
            SwitchKind::OutPreempted => &mut self.out_preempted,
            SwitchKind::OutBlocked => &mut self.out_blocked,
        };
        *c = c.saturating_add(n);
    }
    pub fn get(&self, k: SwitchKind) -> u64 {
        match k {
            SwitchKind::In => self.switch_in,
            SwitchKind::OutPreempted => self.out_preempted,
            SwitchKind::OutBlocked => self.out_blocked,
        }
    }
    pub fn total(&self) -> u64 {
        self.switch_in.saturating_add(self.out_preempted).saturating_add(self.out_blocked)
    }
}

impl TraceStats {
    /// The counter a [`Lost`] record of `kind` adds to.
    pub fn loss_counter_mut(&mut self, kind: LossKind) -> &mut u64 {
        match kind {
            LossKind::RingFull => &mut self.lost_records,
            LossKind::Samples => &mut self.lost_samples,
            LossKind::Markers => &mut self.lost_markers,
            LossKind::Malformed => &mut self.malformed_records,
            LossKind::ItemClasses => &mut self.dropped_item_classes,
            LossKind::MarkersRejected => &mut self.rejected_markers,
            LossKind::JitNames => &mut self.skipped_jit_names,
            LossKind::JitLines => &mut self.skipped_jit_lines,
        }
    }
    /// The total of `kind`'s counter.
    pub fn loss_count(&self, kind: LossKind) -> u64 {
        match kind {
            LossKind::RingFull => self.lost_records,
            LossKind::Samples => self.lost_samples,
            LossKind::Markers => self.lost_markers,
            LossKind::Malformed => self.malformed_records,
            LossKind::ItemClasses => self.dropped_item_classes,
            LossKind::MarkersRejected => self.rejected_markers,
            LossKind::JitNames => self.skipped_jit_names,
            LossKind::JitLines => self.skipped_jit_lines,
        }
    }
    /// Adds `n` to `kind`'s counter, saturating.
    pub fn add_loss(&mut self, kind: LossKind, n: u64) {
        let c = self.loss_counter_mut(kind);
        *c = c.saturating_add(n);
    }
}
