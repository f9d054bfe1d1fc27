//! Record framing shared by every record type: the 8-byte header, the `sample_id`
//! trailer of side-band records, and the context-switch records (PERF_RECORD_SWITCH,
//! PERF_RECORD_SWITCH_CPU_WIDE).

use crate::consts::{misc, record_type, sample_type as st, HEADER_LEN};
use crate::endian::Endian;
use crate::layout::SampleLayout;
use crate::sample::DecodeError;

/// `struct perf_event_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// `PERF_RECORD_*` ([`crate::record_type`]).
    pub kind: u32,
    /// `PERF_RECORD_MISC_*` bits ([`crate::misc`]).
    pub misc: u16,
    /// Bytes of the whole record, header included.
    pub size: u16,
}

impl RecordHeader {
    /// The header at the start of `rec`.
    #[inline(always)]
    pub fn parse(rec: &[u8], endian: Endian) -> Result<RecordHeader, DecodeError> {
        let Some(h) = rec.get(..HEADER_LEN) else {
            return Err(DecodeError::Truncated { field: "record header", at: 0, need: HEADER_LEN as u64, len: rec.len() });
        };
        Ok(RecordHeader {
            kind: endian.u32(h[0..4].try_into().expect("4 bytes")),
            misc: endian.u16(h[4..6].try_into().expect("2 bytes")),
            size: endian.u16(h[6..8].try_into().expect("2 bytes")),
        })
    }

    /// The header's bytes.
    #[inline]
    pub fn encode(&self, endian: Endian, out: &mut Vec<u8>) {
        endian.put_u32(out, self.kind);
        endian.put_u16(out, self.misc);
        endian.put_u16(out, self.size);
    }

    /// `misc & CPUMODE_MASK`.
    #[inline]
    pub fn cpumode(&self) -> u16 {
        self.misc & misc::CPUMODE_MASK
    }
}

/// The `sample_id` trailer of a side-band record (`sample_id_all`): the subset of
/// `TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER` the event's `sample_type` selects, in that
/// order, so IDENTIFIER is always the record's last word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub identifier: Option<u64>,
}

impl SampleLayout {
    /// Split a whole side-band record into its body (after the header) and its
    /// `sample_id` trailer, decoded. Without `sample_id_all` the trailer is empty.
    #[inline]
    pub fn split_sample_id<'a>(&self, rec: &'a [u8], endian: Endian) -> Result<(&'a [u8], SampleId), DecodeError> {
        let n = self.sample_id_len();
        let Some(start) = rec.len().checked_sub(n).filter(|&s| s >= HEADER_LEN) else {
            return Err(DecodeError::Truncated { field: "sample_id", at: HEADER_LEN, need: n as u64, len: rec.len() });
        };
        let t = &rec[start..];
        let mut id = SampleId::default();
        let mut at = 0;
        let mut word = || {
            let w = endian.u64_at(t, at).expect("sized from the layout");
            at += 8;
            w
        };
        let u32_pair = |w: u64| {
            // Two u32 in memory order: undo the u64 read.
            let b = match endian {
                Endian::Little => w.to_le_bytes(),
                Endian::Big => w.to_be_bytes(),
            };
            (endian.u32(b[0..4].try_into().expect("4")), endian.u32(b[4..8].try_into().expect("4")))
        };
        if n != 0 {
            let has = |bit: u64| self.sample_type() & bit != 0;
            if has(st::TID) {
                let (pid, tid) = u32_pair(word());
                (id.pid, id.tid) = (Some(pid), Some(tid));
            }
            if has(st::TIME) {
                id.time = Some(word());
            }
            if has(st::ID) {
                id.id = Some(word());
            }
            if has(st::STREAM_ID) {
                id.stream_id = Some(word());
            }
            if has(st::CPU) {
                id.cpu = Some(u32_pair(word()).0);
            }
            if has(st::IDENTIFIER) {
                id.identifier = Some(word());
            }
        }
        Ok((&rec[HEADER_LEN..start], id))
    }
}

/// How a context-switch record says the task left or entered the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchDirection {
    /// Switched in.
    In,
    /// Switched out while still runnable (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT).
    OutPreempted,
    /// Switched out and not runnable (blocked, sleeping).
    OutBlocked,
}

impl SwitchDirection {
    /// From a switch record's `misc`.
    #[inline]
    pub fn from_misc(m: u16) -> SwitchDirection {
        match (m & misc::SWITCH_OUT != 0, m & misc::SWITCH_OUT_PREEMPT != 0) {
            (false, _) => SwitchDirection::In,
            (true, true) => SwitchDirection::OutPreempted,
            (true, false) => SwitchDirection::OutBlocked,
        }
    }
}

/// A PERF_RECORD_SWITCH or PERF_RECORD_SWITCH_CPU_WIDE record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchRecord {
    pub direction: SwitchDirection,
    /// SWITCH_CPU_WIDE only: the task switched to (when switching out) or from (when
    /// switching in), `(pid, tid)`.
    pub next_prev: Option<(u32, u32)>,
    /// Which task switched, when, on which CPU (needs `sample_id_all` with TID/TIME/CPU).
    pub sample_id: SampleId,
}

impl SampleLayout {
    /// Decode a whole PERF_RECORD_SWITCH / SWITCH_CPU_WIDE record (header included).
    ///
    /// ```
    /// use tailprof_perf_abi::{misc, record_type, sample_type as st, Endian, SampleLayout, SwitchDirection};
    /// let l = SampleLayout::new(st::TID | st::TIME).with_sample_id_all(true);
    /// let mut rec = Vec::new();
    /// for w in [u64::from(record_type::SWITCH) | u64::from(misc::SWITCH_OUT) << 32 | 24 << 48, 9 << 32 | 9, 1000] {
    ///     rec.extend_from_slice(&w.to_le_bytes());
    /// }
    /// let s = l.decode_switch(&rec, Endian::Little).unwrap();
    /// assert_eq!(s.direction, SwitchDirection::OutBlocked);
    /// assert_eq!((s.sample_id.tid, s.sample_id.time), (Some(9), Some(1000)));
    /// ```
    #[inline]
    pub fn decode_switch(&self, rec: &[u8], endian: Endian) -> Result<SwitchRecord, DecodeError> {
        let h = RecordHeader::parse(rec, endian)?;
        if h.kind != record_type::SWITCH && h.kind != record_type::SWITCH_CPU_WIDE {
            return Err(DecodeError::WrongType { kind: h.kind, expected: "context switch" });
        }
        let (body, sample_id) = self.split_sample_id(rec, endian)?;
        let next_prev = match h.kind {
            record_type::SWITCH_CPU_WIDE => {
                let (Some(pid), Some(tid)) = (endian.u32_at(body, 0), endian.u32_at(body, 4)) else {
                    return Err(DecodeError::Truncated { field: "next_prev_pid/tid", at: HEADER_LEN, need: 8, len: rec.len() });
                };
                Some((pid, tid))
            }
            _ => None,
        };
        Ok(SwitchRecord { direction: SwitchDirection::from_misc(h.misc), next_prev, sample_id })
    }
}
