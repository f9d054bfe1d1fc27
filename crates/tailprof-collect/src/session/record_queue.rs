//! The queue that merges decoded records (markers, stored losses) into the rounds.
//!
//! Marker records (from the marker library's shared-memory rings, drained by
//! [`crate::items::markers::MarkerCollector`]) are already decoded [`Record`]s, not raw ring
//! bytes, so they wait in a [`RecordQueue`] beside the raw [`crate::ring::RoundQueue`]
//! and are written by the same round rule: sorted by time, and before every raw record
//! the queued records stamped at or before it go first (see `session`'s module docs).

use tailprof_format::{FormatError, LossKind, Lost, Record};

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
    pub fn emit_upto(&mut self, t: u64, mut f: impl FnMut(Record) -> Result<(), FormatError>) -> Result<(), FormatError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{Marker, MarkerKind};

    fn m(time: u64) -> Record {
        Record::Marker(Marker { time, kind: MarkerKind::Begin, ..Marker::default() })
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
}
