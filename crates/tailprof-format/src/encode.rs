//! The records-chunk encoder: buffers one chunk's records column by column and turns
//! them into a chunk body (FORMAT.md §5).
//!
//! Owns the hot per-sample path of the writer, so it only appends to flat vectors and
//! interns IPs and threads in small hash maps; all encoding work (constant detection,
//! frequency-ordered IP table, varints, per-column zstd) happens once per chunk in
//! [`ChunkBuilder::encode`].

use crate::columns::{put_column, put_opt_column, Packer};
use crate::meta::RecordsMeta;
use crate::record::{LossKind, Record, Sample};
use crate::sideband::{put_sideband, sideband_size_hint};
use crate::timecode::TimeCodec;
use crate::varint::{put_u64, put_uleb, zigzag};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-fold hasher for integer keys (IPs, thread ids); much cheaper than SipHash
/// and good enough for keys that are not attacker-chosen.
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let m = (self.0 as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (m as u64) ^ ((m >> 64) as u64)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(29) ^ v;
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
}

type IntMap<K> = HashMap<K, u32, BuildHasherDefault<IntHasher>>;

const HAS_ADDR: u8 = 1;
const HAS_WEIGHT: u8 = 2;
const HAS_DATA_SRC: u8 = 4;

/// One chunk's worth of buffered records.
#[derive(Default)]
pub struct ChunkBuilder {
    pub meta: RecordsMeta,
    /// Rough size of the encoded body so far (for chunk sizing).
    pub raw_estimate: usize,
    times: Vec<u64>,
    events: Vec<u16>,
    thread_idx: Vec<u32>,
    threads: Vec<(u32, u32)>,
    thread_map: IntMap<(u32, u32)>,
    last_thread: Option<((u32, u32), u32)>,
    cpus: Vec<u32>,
    periods: Vec<u64>,
    cpumodes: Vec<u8>,
    ip_idx: Vec<u32>,
    ips: Vec<u64>,
    ip_counts: Vec<u32>,
    ip_map: IntMap<u64>,
    opt_mask: Vec<u8>,
    addrs: Vec<u64>,
    weights: Vec<u64>,
    data_srcs: Vec<u64>,
    regs_count: Vec<u32>,
    regs: Vec<u64>,
    /// Side-band records with the number of samples that precede them in the chunk.
    sideband: Vec<(u32, Record)>,
    scratch: Vec<u8>,
    deltas: Vec<u64>,
}

impl ChunkBuilder {
    pub fn is_empty(&self) -> bool {
        self.meta.records == 0
    }
    pub fn records(&self) -> usize {
        self.meta.records as usize
    }
    /// Time of the last sample buffered, if any.
    pub fn last_sample_time(&self) -> Option<u64> {
        self.times.last().copied()
    }
    /// Trace-time span of the buffered records (0 if fewer than two timed records).
    pub fn time_span(&self) -> u64 {
        self.meta.last_time.saturating_sub(self.meta.first_time)
    }

    /// Buffers a sample. The caller guarantees its time is not below
    /// [`Self::last_sample_time`].
    #[inline]
    pub fn push_sample(&mut self, s: &Sample) {
        debug_assert!(self.last_sample_time().is_none_or(|t| t <= s.time));
        self.meta.records += 1;
        self.meta.samples += 1;
        self.meta.note_time(s.time);
        self.times.push(s.time);
        self.events.push(s.event);
        let key = (s.pid, s.tid);
        let ti = match self.last_thread {
            Some((k, i)) if k == key => i,
            _ => {
                let next = self.threads.len() as u32;
                let i = *self.thread_map.entry(key).or_insert(next);
                if i == next {
                    self.threads.push(key);
                }
                self.last_thread = Some((key, i));
                i
            }
        };
        self.thread_idx.push(ti);
        self.cpus.push(s.cpu);
        self.periods.push(s.period);
        self.cpumodes.push(s.cpumode as u8);
        let next = self.ips.len() as u32;
        let ii = *self.ip_map.entry(s.ip).or_insert(next);
        if ii == next {
            self.ips.push(s.ip);
            self.ip_counts.push(0);
        }
        self.ip_counts[ii as usize] += 1;
        self.ip_idx.push(ii);
        let mut mask = 0u8;
        if let Some(a) = s.addr {
            mask |= HAS_ADDR;
            self.addrs.push(a);
        }
        if let Some(w) = s.weight {
            mask |= HAS_WEIGHT;
            self.weights.push(w);
        }
        if let Some(d) = s.data_src {
            mask |= HAS_DATA_SRC;
            self.data_srcs.push(d);
        }
        self.opt_mask.push(mask);
        self.regs_count.push(s.regs.len() as u32);
        if !s.regs.is_empty() {
            self.regs.extend_from_slice(&s.regs);
        }
        self.raw_estimate += 16 + if mask != 0 { 24 } else { 0 } + 10 * s.regs.len();
    }

    /// Buffers a side-band (non-sample) record and updates the chunk's loss counters.
    pub fn push_sideband(&mut self, r: &Record) {
        self.meta.records += 1;
        self.meta.note_time(r.time());
        match r {
            Record::Lost(l) => {
                let c = match l.kind {
                    LossKind::RingFull => &mut self.meta.lost_records,
                    LossKind::Samples => &mut self.meta.lost_samples,
                    LossKind::Markers => &mut self.meta.lost_markers,
                };
                *c = c.saturating_add(l.count);
            }
            Record::Throttle(t) if t.throttled => self.meta.throttle_events += 1,
            Record::Throttle(_) => self.meta.unthrottle_events += 1,
            _ => {}
        }
        self.raw_estimate += sideband_size_hint(r);
        self.sideband.push((self.times.len() as u32, r.clone()));
    }

    /// Encodes the buffered records into `body` (cleared first) and resets the builder.
    /// Returns the chunk's meta block.
    pub fn encode(&mut self, body: &mut Vec<u8>, pk: &mut Packer, codec: TimeCodec) -> RecordsMeta {
        body.clear();
        let n = self.times.len();
        put_uleb(body, n as u64);
        if n > 0 {
            self.encode_samples(body, pk, codec);
        }
        put_uleb(body, self.sideband.len() as u64);
        let mut prev_pos = 0u32;
        let mut prev_time = self.times.first().copied().unwrap_or(0);
        let mut rows = std::mem::take(&mut pk.scratch);
        rows.clear();
        for (pos, r) in &self.sideband {
            put_sideband(&mut rows, &mut self.scratch, pos - prev_pos, &mut prev_time, r);
            prev_pos = *pos;
        }
        pk.put_blob(body, &rows);
        pk.scratch = rows;
        let meta = std::mem::take(&mut self.meta);
        self.reset();
        meta
    }

    fn encode_samples(&mut self, body: &mut Vec<u8>, pk: &mut Packer, codec: TimeCodec) {
        let n = self.times.len();
        let base = self.times[0];
        put_u64(body, base);
        body.push(codec as u8);
        self.deltas.clear();
        let mut prev = base;
        for &t in &self.times {
            self.deltas.push(t - prev);
            prev = t;
        }
        pk.scratch.clear();
        codec.encode(&self.deltas, &mut pk.scratch);
        pk.put_scratch(body);

        put_column(body, pk, n, |i| self.events[i] as u64);

        put_uleb(body, self.threads.len() as u64);
        for &(pid, tid) in &self.threads {
            put_uleb(body, pid as u64);
            put_uleb(body, tid as u64);
        }
        put_column(body, pk, n, |i| self.thread_idx[i] as u64);
        put_column(body, pk, n, |i| self.cpus[i] as u64);
        put_column(body, pk, n, |i| self.periods[i]);
        put_column(body, pk, n, |i| self.cpumodes[i] as u64);

        // IP table in descending frequency, so hot IPs get one-byte indices.
        let mut order: Vec<u32> = (0..self.ips.len() as u32).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.ip_counts[i as usize]));
        let mut rank = vec![0u32; self.ips.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        put_uleb(body, order.len() as u64);
        pk.scratch.clear();
        let mut prev_ip = 0u64;
        for &i in &order {
            let ip = self.ips[i as usize];
            put_uleb(&mut pk.scratch, zigzag(ip.wrapping_sub(prev_ip) as i64));
            prev_ip = ip;
        }
        pk.put_scratch(body);
        put_column(body, pk, n, |i| rank[self.ip_idx[i] as usize] as u64);

        let m = &self.opt_mask;
        put_opt_column(body, pk, n, |i| m[i] & HAS_ADDR != 0, &self.addrs, true);
        put_opt_column(body, pk, n, |i| m[i] & HAS_WEIGHT != 0, &self.weights, false);
        put_opt_column(body, pk, n, |i| m[i] & HAS_DATA_SRC != 0, &self.data_srcs, false);

        put_column(body, pk, n, |i| self.regs_count[i] as u64);
        pk.scratch.clear();
        for &r in &self.regs {
            put_uleb(&mut pk.scratch, r);
        }
        pk.put_scratch(body);
    }

    fn reset(&mut self) {
        self.meta = RecordsMeta::default();
        self.raw_estimate = 0;
        self.times.clear();
        self.events.clear();
        self.thread_idx.clear();
        self.threads.clear();
        self.thread_map.clear();
        self.last_thread = None;
        self.cpus.clear();
        self.periods.clear();
        self.cpumodes.clear();
        self.ip_idx.clear();
        self.ips.clear();
        self.ip_counts.clear();
        self.ip_map.clear();
        self.opt_mask.clear();
        self.addrs.clear();
        self.weights.clear();
        self.data_srcs.clear();
        self.regs_count.clear();
        self.regs.clear();
        self.sideband.clear();
    }
}
