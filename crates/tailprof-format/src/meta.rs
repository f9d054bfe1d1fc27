//! Small chunk payloads: the records-chunk meta block (per-chunk counts readable without
//! decompressing), the build-id chunk body and the trailer (FORMAT.md §4, §6, §7).
//!
//! Owns their byte layouts and the limits a reader enforces on them.

use crate::record::{BuildIdEntry, LossKind, StackStatus, SwitchKind, TraceStats};
use crate::varint::{put_bytes, put_uleb, ByteReader};
use serde::{Deserialize, Serialize};

/// Most records one records chunk may hold (readers reject more).
pub const MAX_CHUNK_RECORDS: usize = 1 << 20;
/// Longest path, comm or build-id the writer accepts in one record.
pub const MAX_STRING: usize = 1 << 20;

/// Length of the version-1 records meta block.
pub const RECORDS_META_LEN: usize = 64;
/// Version-2 meta-block count keys (FORMAT.md §5.0): class in the high nibble, code in
/// the low nibble.
pub const META_KEY_SWITCH_KIND: u8 = 0x00;
pub const META_KEY_SAMPLE_STATUS: u8 = 0x10;
pub const META_KEY_SWITCH_STATUS: u8 = 0x20;
/// Counts of [`LossKind`]s without a fixed slot in the version-1 block (code ≥ 3),
/// saturated at `u32::MAX` per chunk.
pub const META_KEY_LOSS: u8 = 0x30;

/// Per-chunk counts, stored uncompressed at the start of a records chunk so `summarize`
/// can rebuild [`TraceStats`] of a cut-off file without decoding records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsMeta {
    pub records: u32,
    pub samples: u32,
    /// Smallest non-zero record time in the chunk (0: none).
    pub first_time: u64,
    /// Largest record time in the chunk (0: none).
    pub last_time: u64,
    pub lost_records: u64,
    pub lost_samples: u64,
    pub lost_markers: u64,
    pub throttle_events: u32,
    pub unthrottle_events: u32,
    /// Version 2: samples per stack-status code (index = code; index 0, no stack, is
    /// not stored).
    pub sample_status: [u32; 8],
    /// Version 2: switch records per [`SwitchKind`] code.
    pub switches: [u32; 3],
    /// Version 2: switch records per stack-status code of their stack.
    pub switch_status: [u32; 8],
    /// Version 2: `Lost::count` sums per [`LossKind`] code for codes ≥ 3 (index = code;
    /// codes 0–2 live in the fixed fields above).
    pub losses: [u32; 16],
}

impl RecordsMeta {
    /// The version-2 meta block: the 64 bytes of version 1, then the non-zero stack and
    /// switch counts.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; RECORDS_META_LEN];
        b[0..4].copy_from_slice(&self.records.to_le_bytes());
        b[4..8].copy_from_slice(&self.samples.to_le_bytes());
        b[8..16].copy_from_slice(&self.first_time.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_time.to_le_bytes());
        b[24..32].copy_from_slice(&self.lost_records.to_le_bytes());
        b[32..40].copy_from_slice(&self.lost_samples.to_le_bytes());
        b[40..48].copy_from_slice(&self.lost_markers.to_le_bytes());
        b[48..52].copy_from_slice(&self.throttle_events.to_le_bytes());
        b[52..56].copy_from_slice(&self.unthrottle_events.to_le_bytes());
        let entries: Vec<(u8, u32)> = (self.switches.iter().enumerate().map(|(c, &v)| (META_KEY_SWITCH_KIND | c as u8, v)))
            .chain(self.sample_status.iter().enumerate().map(|(c, &v)| (META_KEY_SAMPLE_STATUS | c as u8, v)))
            .chain(self.switch_status.iter().enumerate().map(|(c, &v)| (META_KEY_SWITCH_STATUS | c as u8, v)))
            .chain(self.losses.iter().enumerate().skip(3).map(|(c, &v)| (META_KEY_LOSS | c as u8, v)))
            .filter(|&(_, v)| v != 0)
            .collect();
        b.push(entries.len() as u8);
        for (k, v) in entries {
            b.push(k);
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Parses the meta block of a chunk of a trace of format `version`; longer blocks (a
    /// later minor revision) are accepted. Version 2 requires the stack/switch counts;
    /// counts of status codes this build does not know are added to `Unknown`.
    pub fn parse(b: &[u8], version: u16) -> Option<Self> {
        if b.len() < RECORDS_META_LEN {
            return None;
        }
        let mut r = ByteReader::new(b);
        let mut m = RecordsMeta {
            records: r.u32()?,
            samples: r.u32()?,
            first_time: r.u64()?,
            last_time: r.u64()?,
            lost_records: r.u64()?,
            lost_samples: r.u64()?,
            lost_markers: r.u64()?,
            throttle_events: r.u32()?,
            unthrottle_events: r.u32()?,
            ..Default::default()
        };
        if version >= 2 {
            r.take(8)?; // reserved
            for _ in 0..r.u8()? {
                let key = r.u8()?;
                let v = r.u32()?;
                let code = key & 0x0f;
                // Keys this build does not know are ignored (a newer writer's counts).
                let slot = match (key & 0xf0, SwitchKind::from_u8(code)) {
                    (META_KEY_SWITCH_KIND, Some(k)) => &mut m.switches[k as usize],
                    (META_KEY_SAMPLE_STATUS, _) if code != 0 => &mut m.sample_status[StackStatus::from_u8(code) as usize],
                    (META_KEY_SWITCH_STATUS, _) if code != 0 => &mut m.switch_status[StackStatus::from_u8(code) as usize],
                    (META_KEY_LOSS, _) if code >= 3 => &mut m.losses[code as usize],
                    _ => continue,
                };
                *slot = slot.checked_add(v)?;
            }
            let stacks: u64 = m.sample_status.iter().map(|&v| v as u64).sum();
            let switches: u64 = m.switches.iter().map(|&v| v as u64).sum();
            let switch_stacks: u64 = m.switch_status.iter().map(|&v| v as u64).sum();
            if stacks > m.samples as u64 || switches + m.samples as u64 > m.records as u64 || switch_stacks > switches {
                return None;
            }
        }
        if m.samples > m.records || m.records as usize > MAX_CHUNK_RECORDS {
            return None;
        }
        Some(m)
    }

    /// Notes a record time in `first_time`/`last_time`.
    #[inline]
    pub fn note_time(&mut self, t: u64) {
        if t != 0 {
            if self.first_time == 0 || t < self.first_time {
                self.first_time = t;
            }
            if t > self.last_time {
                self.last_time = t;
            }
        }
    }

    /// Adds this chunk's counts to `stats`.
    pub fn add_to(&self, stats: &mut TraceStats) {
        stats.samples += self.samples as u64;
        stats.lost_records = stats.lost_records.saturating_add(self.lost_records);
        stats.lost_samples = stats.lost_samples.saturating_add(self.lost_samples);
        stats.lost_markers = stats.lost_markers.saturating_add(self.lost_markers);
        stats.throttle_events += self.throttle_events as u64;
        stats.unthrottle_events += self.unthrottle_events as u64;
        for s in StackStatus::ALL {
            stats.sample_stacks.add(s, self.sample_status[s as usize] as u64);
            stats.switch_stacks.add(s, self.switch_status[s as usize] as u64);
        }
        for k in [SwitchKind::In, SwitchKind::OutPreempted, SwitchKind::OutBlocked] {
            stats.switches.add(k, self.switches[k as usize] as u64);
        }
        for k in LossKind::ALL.into_iter().skip(3) {
            stats.add_loss(k, self.losses[k as usize] as u64);
        }
        if self.first_time != 0 {
            stats.first_time = Some(stats.first_time.map_or(self.first_time, |f| f.min(self.first_time)));
        }
        if self.last_time != 0 {
            stats.last_time = Some(stats.last_time.map_or(self.last_time, |l| l.max(self.last_time)));
        }
    }
}

/// Adds one record's time to running stats the same way [`RecordsMeta::note_time`] does.
#[inline]
pub fn note_stats_time(stats: &mut TraceStats, t: u64) {
    if t != 0 {
        match stats.first_time {
            Some(f) if f <= t => {}
            _ => stats.first_time = Some(t),
        }
        match stats.last_time {
            Some(l) if l >= t => {}
            _ => stats.last_time = Some(t),
        }
    }
}

/// Body of a build-id chunk.
pub fn encode_build_ids(entries: &[BuildIdEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uleb(&mut out, entries.len() as u64);
    for e in entries {
        put_bytes(&mut out, e.path.as_bytes());
        put_bytes(&mut out, &e.build_id);
    }
    out
}

/// Parses a build-id chunk body. `None` on damage.
pub fn decode_build_ids(body: &[u8]) -> Option<Vec<BuildIdEntry>> {
    let mut r = ByteReader::new(body);
    // Each entry takes at least two bytes.
    let n = r.len_at_most(body.len() / 2)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let path = r.string()?;
        let build_id = r.bytes()?.to_vec();
        out.push(BuildIdEntry { path, build_id });
    }
    Some(out)
}

/// Build-id entries, one per path, in first-seen order; a later entry for a path
/// replaces the earlier one in place.
#[derive(Debug, Clone, Default)]
pub struct BuildIdSet {
    pub entries: Vec<BuildIdEntry>,
    index: std::collections::HashMap<String, usize>,
}

impl BuildIdSet {
    /// Inserts `e`; returns whether the set changed.
    pub fn insert(&mut self, e: BuildIdEntry) -> bool {
        match self.index.get(&e.path) {
            Some(&i) if self.entries[i] == e => false,
            Some(&i) => {
                self.entries[i] = e;
                true
            }
            None => {
                self.index.insert(e.path.clone(), self.entries.len());
                self.entries.push(e);
                true
            }
        }
    }
    pub fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
    }
}

/// Body of the trailer chunk (JSON). Unknown fields are ignored by readers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trailer {
    /// Always true; its presence is the clean-end marker.
    pub clean_end: bool,
    pub stats: TraceStats,
    pub duration_ns: Option<u64>,
    /// Chunks written before the trailer (including the header chunk).
    pub chunks: u64,
    /// Records written (samples and side-band).
    pub records: u64,
}
