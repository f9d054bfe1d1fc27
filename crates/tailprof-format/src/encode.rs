//! The records-chunk encoder: buffers one chunk's records column by column and turns
//! them into a chunk body (FORMAT.md §5).
//!
//! Owns the hot per-sample path of the writer: per sample, one push of a [`Row`] (time,
//! thread, cpu, ip index, stack slot), IP and thread lookups in small direct-mapped
//! caches (hash maps behind them), and one compare of the usually constant fields
//! (period, event, cpumode, ...), which are kept run-length coded. All encoding work
//! (constant detection, frequency-ordered IP table, varints, per-column zstd) happens
//! once per chunk in [`ChunkBuilder::encode`].
//!
//! Stacks (FORMAT.md §5.5): the builder notes which stacks the chunk's records use (a
//! hash lookup per sample that has one); the first use of a stack in the chunk also marks
//! its nodes and their ancestors. `encode` writes those nodes, renumbered `1..` in the
//! order of their writer ids (callers first), as the chunk's own stack section, so a
//! chunk never depends on another chunk's stacks.

use crate::columns::{put_column, put_column_by, put_opt_column, put_ulebs, Packer};
use crate::meta::RecordsMeta;
use crate::record::{Frame, LossKind, Record, Sample, StackId, StackStatus, Switch, Wakeup};
use crate::sideband::{put_sideband, sideband_size_hint};
use crate::stack::StackTable;
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
    /// Counts of the side-band records (and the samples' stack statuses); the samples'
    /// count and times are added when the chunk is encoded ([`Self::full_meta`]).
    pub meta: RecordsMeta,
    /// Rough size of the encoded body so far (for chunk sizing).
    pub raw_estimate: usize,
    /// One entry per sample: the per-sample columns (one push per sample).
    rows: Vec<Row>,
    /// Time of the last sample (0 when none).
    last_time: u64,
    threads: Vec<(u32, u32)>,
    thread_map: IntMap<(u32, u32)>,
    /// Recently seen threads, direct-mapped by tid (CPUs take turns in a system-wide
    /// recording, so the last thread alone rarely matches): `(key, index + 1)`, 0 = empty.
    thread_cache: [((u32, u32), u32); THREAD_CACHE],
    ips: Vec<u64>,
    ip_counts: Vec<u32>,
    ip_map: IntMap<u64>,
    /// Recently seen IPs, direct-mapped: `(ip, index + 1)`, 0 = empty.
    ip_cache: IpCache,
    /// The usually constant columns, run-length coded: each change of a sample's
    /// [`Consts`] ends a run (see [`Self::push_sample`]).
    runs: Vec<(Consts, u32)>,
    /// The current run: the last sample's values and how many samples in a row had them
    /// (not yet in `runs`).
    lag_row: Consts,
    lag_n: u32,
    addrs: Vec<u64>,
    weights: Vec<u64>,
    data_srcs: Vec<u64>,
    regs: Vec<u64>,
    /// Side-band records with the number of samples that precede them in the chunk.
    sideband: Vec<(u32, Record)>,
    scratch: Vec<u8>,
    deltas: Vec<u64>,
    /// Stacks (writer ids) the chunk's records use, in first-use order, with use counts.
    slots: Vec<u32>,
    slot_counts: Vec<u32>,
    slot_map: IntMap<u32>,
    last_slot: Option<(u32, u32)>,
    /// Per writer node: (chunk generation that marked it, local id while encoding).
    node_mark: Vec<(u32, u32)>,
    generation: u32,
    /// Writer ids of the nodes the chunk needs (the used stacks and their ancestors).
    nodes: Vec<u32>,
    /// Stack-section blobs are stored uncompressed (see [`Self::encode`]).
    pub stacks_stored: bool,
}

/// One sample's per-sample columns.
#[derive(Clone, Copy)]
struct Row {
    time: u64,
    /// Index into the thread table.
    thread: u32,
    cpu: u32,
    /// Index into `ips` in first-use order, or [`LEAF_IP`].
    ip: u32,
    /// 0 (no stack) or 1 + index into `slots`.
    stack: u32,
}

/// Appends the plain column of field `f` of the run-length coded [`Consts`] rows: the
/// same bytes as [`put_column`] over the expanded rows, without expanding them.
fn put_runs(out: &mut Vec<u8>, pk: &mut Packer, runs: &[(Consts, u32)], f: impl Fn(&Consts) -> u64) {
    let first = f(&runs[0].0);
    if runs.iter().all(|(c, _)| f(c) == first) {
        out.push(crate::columns::COL_CONST);
        put_uleb(out, first);
        return;
    }
    out.push(crate::columns::COL_ULEB);
    pk.scratch.clear();
    let mut one = Vec::with_capacity(10);
    for (c, k) in runs {
        one.clear();
        put_uleb(&mut one, f(c));
        if let [b] = one[..] {
            pk.scratch.resize(pk.scratch.len() + *k as usize, b);
        } else {
            for _ in 0..*k {
                pk.scratch.extend_from_slice(&one);
            }
        }
    }
    pk.put_scratch(out);
}

/// Entries of [`ChunkBuilder`]'s thread cache.
const THREAD_CACHE: usize = 16;
/// Entries of [`ChunkBuilder`]'s IP cache (a power of two).
const IP_CACHE: usize = 1024;

/// [`ChunkBuilder`]'s IP cache: `IP_CACHE` entries `(ip, index + 1)`, 0 = empty.
/// (An array, so the hashed index needs no bounds check.)
struct IpCache(Box<[(u64, u32); IP_CACHE]>);

impl Default for IpCache {
    fn default() -> Self {
        let b: Box<[(u64, u32)]> = vec![(0, 0); IP_CACHE].into_boxed_slice();
        IpCache(b.try_into().unwrap_or_else(|_| unreachable!("IP_CACHE entries")))
    }
}

/// A sample's values of the columns that are usually the same for a whole chunk: the
/// period, and the small ones packed into one word (two compares per sample).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct Consts {
    period: u64,
    /// Bits 0–15 event, 16–23 cpumode, 24–31 stack status, 32–39 optional-field mask,
    /// 40–63 register count (at most [`crate::writer::MAX_REGS`]).
    small: u64,
}

impl Consts {
    #[inline(always)]
    fn new(period: u64, event: u16, cpumode: u8, stack_status: u8, opt_mask: u8, regs_count: usize) -> Self {
        debug_assert!(regs_count < 1 << 24);
        let small = event as u64
            | (cpumode as u64) << 16
            | (stack_status as u64) << 24
            | (opt_mask as u64) << 32
            | (regs_count.min((1 << 24) - 1) as u64) << 40;
        Consts { period, small }
    }
    fn event(&self) -> u64 {
        self.small & 0xffff
    }
    fn cpumode(&self) -> u64 {
        (self.small >> 16) & 0xff
    }
    fn stack_status(&self) -> u8 {
        (self.small >> 24) as u8
    }
    fn opt_mask(&self) -> u8 {
        (self.small >> 32) as u8
    }
    fn regs_count(&self) -> u64 {
        self.small >> 40
    }
}

/// The fields of a [`Sample`] the chunk builder keeps (see
/// [`ChunkBuilder::push_sample`]).
#[derive(Clone, Copy)]
pub(crate) struct SampleFields {
    pub time: u64,
    ip: u64,
    pid: u32,
    tid: u32,
    cpu: u32,
    stack: StackId,
    consts: Consts,
}

impl SampleFields {
    #[inline(always)]
    pub fn of(s: &Sample) -> Self {
        SampleFields {
            time: s.time,
            ip: s.ip,
            pid: s.pid,
            tid: s.tid,
            cpu: s.cpu,
            stack: s.stack,
            consts: Consts::new(
                s.period,
                s.event,
                s.cpumode as u8,
                s.stack_status as u8,
                (s.addr.is_some() as u8 * HAS_ADDR) | (s.weight.is_some() as u8 * HAS_WEIGHT) | (s.data_src.is_some() as u8 * HAS_DATA_SRC),
                s.regs.len(),
            ),
        }
    }
}

/// `ip_idx` of a sample whose ip is its stack's leaf ip.
const LEAF_IP: u32 = u32::MAX;

/// Largest number of stack nodes one records chunk may hold (FORMAT.md §12).
pub const MAX_CHUNK_NODES: usize = 1 << 22;
/// Deepest stack the writer stores: [`crate::TraceWriter::intern_stack`] keeps the
/// innermost `MAX_STACK_DEPTH` frames of a deeper stack.
pub const MAX_STACK_DEPTH: usize = 4096;
/// A chunk may hold at most `STACK_NODE_SLACK + STACK_NODES_PER_BYTE * payload_len`
/// stack nodes (FORMAT.md §5.5): this bounds the reader's memory by the file's size.
pub const STACK_NODE_SLACK: usize = MAX_STACK_DEPTH;
pub const STACK_NODES_PER_BYTE: usize = 64;

/// Whether a chunk with `nodes` stack nodes and `payload_len` payload bytes is within
/// the node limits.
pub fn nodes_within_limits(nodes: usize, payload_len: usize) -> bool {
    nodes <= MAX_CHUNK_NODES && nodes <= STACK_NODE_SLACK.saturating_add(payload_len.saturating_mul(STACK_NODES_PER_BYTE))
}

impl ChunkBuilder {
    pub fn is_empty(&self) -> bool {
        self.meta.records == 0 && self.rows.is_empty()
    }
    pub fn records(&self) -> usize {
        self.meta.records as usize + self.rows.len()
    }

    /// First non-zero and last sample time (0 when none): samples are in time order.
    fn sample_time_range(&self) -> (u64, u64) {
        let first = self.rows.get(self.rows.partition_point(|r| r.time == 0)).map_or(0, |r| r.time);
        (first, self.last_time)
    }

    /// The chunk's meta block: the side-band counts with the samples added.
    pub fn full_meta(&self) -> RecordsMeta {
        let mut m = self.meta.clone();
        m.records += self.rows.len() as u32;
        m.samples = self.rows.len() as u32;
        let (first, last) = self.sample_time_range();
        m.note_time(first);
        m.note_time(last);
        m
    }

    /// Adds the buffered samples to `stats` (count, stack statuses, times) as writing
    /// each one with [`crate::meta::note_stats_time`] would; returns their number.
    pub fn add_samples_to(&self, stats: &mut crate::TraceStats) -> u64 {
        let n = self.rows.len() as u64;
        stats.samples += n;
        for st in StackStatus::ALL {
            stats.sample_stacks.add(st, self.meta.sample_status[st as usize] as u64);
        }
        let (first, last) = self.sample_time_range();
        crate::meta::note_stats_time(stats, first);
        crate::meta::note_stats_time(stats, last);
        n
    }
    /// Time of the last sample buffered, if any.
    pub fn last_sample_time(&self) -> Option<u64> {
        self.rows.last().map(|r| r.time)
    }
    /// Time of the last sample buffered, 0 if none (a sample below it needs a new chunk).
    #[inline]
    pub fn last_time(&self) -> u64 {
        self.last_time
    }
    /// Trace-time span of the buffered records (0 if fewer than two timed records).
    pub fn time_span(&self) -> u64 {
        let mut m = RecordsMeta { first_time: self.meta.first_time, last_time: self.meta.last_time, ..Default::default() };
        let (first, last) = self.sample_time_range();
        m.note_time(first);
        m.note_time(last);
        m.last_time.saturating_sub(m.first_time)
    }

    /// Stack nodes the chunk holds so far.
    pub fn stack_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Notes a use of stack `id` (a node of `table`, or NONE); returns its slot value
    /// (0 for NONE, else 1 + slot index).
    #[inline]
    fn use_stack(&mut self, id: StackId, table: &StackTable) -> u32 {
        if id.is_none() {
            return 0;
        }
        if let Some((g, slot)) = self.last_slot {
            if g == id.0 {
                self.slot_counts[slot as usize] += 1;
                return slot + 1;
            }
        }
        let next = self.slots.len() as u32;
        let slot = *self.slot_map.entry(id.0).or_insert(next);
        if slot == next {
            self.slots.push(id.0);
            self.slot_counts.push(0);
            self.mark_nodes(id, table);
        }
        self.slot_counts[slot as usize] += 1;
        self.last_slot = Some((id.0, slot));
        slot + 1
    }

    /// Marks `id` and its ancestors as needed by this chunk.
    fn mark_nodes(&mut self, id: StackId, table: &StackTable) {
        if self.node_mark.len() < table.len() + 1 {
            self.node_mark.resize(table.len() + 1, (0, 0));
        }
        if self.generation == 0 {
            self.generation = 1;
        }
        let mut cur = id;
        while let Some((parent, _)) = table.get(cur) {
            let m = &mut self.node_mark[cur.0 as usize];
            if m.0 == self.generation {
                break;
            }
            m.0 = self.generation;
            self.nodes.push(cur.0);
            self.raw_estimate += 16;
            cur = parent;
        }
    }

    /// Buffers sample `s`, whose fields `f` were read before anything is stored, so that
    /// a caller that just filled `s` with constants (no stack, no registers, no optional
    /// fields) has them folded away once this is inlined into it. The caller guarantees
    /// its time is not below [`Self::last_sample_time`] and that `s.stack` is NONE or a
    /// node of `table`.
    #[inline(always)]
    pub(crate) fn push_sample(&mut self, f: &SampleFields, s: &Sample, table: &StackTable) {
        debug_assert!(self.last_sample_time().is_none_or(|t| t <= f.time));
        let key = (f.pid, f.tid);
        let slot = &self.thread_cache[f.tid as usize % THREAD_CACHE];
        let thread = if slot.1 != 0 && slot.0 == key { slot.1 - 1 } else { self.thread_miss(key) };
        let (ip, stack) = if f.stack.is_none() { (self.ip_index(f.ip), 0) } else { self.stack_sample(f, table) };
        self.rows.push(Row { time: f.time, thread, cpu: f.cpu, ip, stack });
        self.last_time = f.time;
        if f.consts.small >> 32 != 0 {
            // Optional fields or registers.
            self.push_extras(s);
        }
        // Event, period, cpumode, optional fields, register count and stack status are
        // usually the same sample after sample: compared as one row, and added to `runs`
        // only when they change (or the chunk is encoded).
        if self.lag_n > 0 && f.consts == self.lag_row {
            self.lag_n += 1;
        } else {
            self.flush_lag();
            self.lag_row = f.consts;
            self.lag_n = 1;
        }
        let status = f.consts.stack_status();
        if status != StackStatus::None as u8 {
            self.meta.sample_status[status as usize] += 1;
        }
        self.raw_estimate += 16;
    }

    /// The index of a thread not in the thread cache (noted in the cache).
    #[inline(never)]
    fn thread_miss(&mut self, key: (u32, u32)) -> u32 {
        let next = self.threads.len() as u32;
        let i = *self.thread_map.entry(key).or_insert(next);
        if i == next {
            self.threads.push(key);
        }
        self.thread_cache[key.1 as usize % THREAD_CACHE] = (key, i + 1);
        i
    }

    /// The ip and stack slot of a sample with a stack.
    #[inline(never)]
    fn stack_sample(&mut self, s: &SampleFields, table: &StackTable) -> (u32, u32) {
        // The ip of a sample whose stack's leaf frame has the same ip is not stored
        // again (FORMAT.md §5.2: ip index 0).
        let ip = if table.frame(s.stack).is_some_and(|f| f.ip == s.ip) { LEAF_IP } else { self.ip_index(s.ip) };
        (ip, self.use_stack(s.stack, table))
    }

    /// The index of `ip` in `ips` (added if new), with its use counted.
    #[inline(always)]
    fn ip_index(&mut self, ip: u64) -> u32 {
        let h = (ip ^ (ip >> 10) ^ (ip >> 20)) as usize % IP_CACHE;
        let slot = &self.ip_cache.0[h];
        let ii = if slot.1 != 0 && slot.0 == ip { slot.1 - 1 } else { self.ip_miss(ip, h) };
        self.ip_counts[ii as usize] += 1;
        ii
    }

    /// The index of an ip not in the IP cache (noted in the cache at `h`).
    #[inline(never)]
    fn ip_miss(&mut self, ip: u64, h: usize) -> u32 {
        let next = self.ips.len() as u32;
        let ii = *self.ip_map.entry(ip).or_insert(next);
        if ii == next {
            self.ips.push(ip);
            self.ip_counts.push(0);
        }
        self.ip_cache.0[h] = (ip, ii + 1);
        ii
    }

    /// Buffers a sample's optional fields and registers.
    #[inline(never)]
    fn push_extras(&mut self, s: &Sample) {
        let opt = [s.addr, s.weight, s.data_src];
        for (v, col) in opt.iter().zip([&mut self.addrs, &mut self.weights, &mut self.data_srcs]) {
            col.extend(*v);
        }
        self.regs.extend_from_slice(&s.regs);
        self.raw_estimate += if opt.iter().any(Option::is_some) { 24 } else { 0 } + 10 * s.regs.len();
    }

    /// Ends the current run of the usually constant columns.
    #[inline(never)]
    fn flush_lag(&mut self) {
        let (c, k) = (self.lag_row, std::mem::take(&mut self.lag_n));
        if k > 0 {
            self.runs.push((c, k));
        }
    }

    /// Buffers a side-band (non-sample) record and updates the chunk's loss counters.
    /// The caller guarantees that a `Switch`'s or `Wakeup`'s stack is NONE or a node of `table`.
    pub fn push_sideband(&mut self, r: &Record, table: &StackTable) {
        self.meta.records += 1;
        self.meta.note_time(r.time());
        match r {
            Record::Lost(l) => match l.kind {
                LossKind::RingFull => self.meta.lost_records = self.meta.lost_records.saturating_add(l.count),
                LossKind::Samples => self.meta.lost_samples = self.meta.lost_samples.saturating_add(l.count),
                LossKind::Markers => self.meta.lost_markers = self.meta.lost_markers.saturating_add(l.count),
                k => {
                    let c = &mut self.meta.losses[k as usize];
                    *c = c.saturating_add(u32::try_from(l.count).unwrap_or(u32::MAX));
                }
            },
            Record::Throttle(t) if t.throttled => self.meta.throttle_events += 1,
            Record::Throttle(_) => self.meta.unthrottle_events += 1,
            Record::Switch(w) => {
                self.meta.switches[w.kind as usize] += 1;
                if w.stack_status != StackStatus::None {
                    self.meta.switch_status[w.stack_status as usize] += 1;
                }
                self.use_stack(w.stack, table);
            }
            Record::Wakeup(w) => {
                self.use_stack(w.stack, table);
            }
            _ => {}
        }
        self.raw_estimate += sideband_size_hint(r);
        self.sideband.push((self.rows.len() as u32, r.clone()));
    }

    /// Encodes the buffered records into `body` (cleared first) as a version-2 body.
    /// Returns the chunk's meta block. The builder keeps its records until
    /// [`Self::reset`], so a chunk can be encoded again (with `stacks_stored` set, when the
    /// node limit of FORMAT.md §5.5 needs it).
    pub fn encode(&mut self, body: &mut Vec<u8>, pk: &mut Packer, codec: TimeCodec, table: &StackTable) -> RecordsMeta {
        self.encode_with(body, pk, codec, table, &mut || {})
    }

    /// [`Self::encode`], calling `between` after each sample column is encoded and
    /// compressed: encoding a large chunk takes milliseconds, and a recorder uses the
    /// pauses to drain its rings (the output does not depend on `between`).
    pub fn encode_with(
        &mut self,
        body: &mut Vec<u8>,
        pk: &mut Packer,
        codec: TimeCodec,
        table: &StackTable,
        between: &mut dyn FnMut(),
    ) -> RecordsMeta {
        self.flush_lag();
        body.clear();
        let slot_rank = self.encode_stacks(body, pk, table);
        let n = self.rows.len();
        put_uleb(body, n as u64);
        if n > 0 {
            self.encode_samples(body, pk, codec, &slot_rank, between);
        }
        put_uleb(body, self.sideband.len() as u64);
        let mut prev_pos = 0u32;
        let mut prev_time = self.rows.first().map_or(0, |r| r.time);
        let mut rows = std::mem::take(&mut pk.scratch);
        rows.clear();
        for (pos, r) in &self.sideband {
            let stack_ref = match r {
                Record::Switch(Switch { stack, .. }) | Record::Wakeup(Wakeup { stack, .. }) if !stack.is_none() => {
                    self.slot_map.get(&stack.0).map_or(0, |&s| slot_rank[s as usize] as u64 + 1)
                }
                _ => 0,
            };
            put_sideband(&mut rows, &mut self.scratch, pos - prev_pos, &mut prev_time, r, stack_ref);
            prev_pos = *pos;
        }
        pk.put_blob(body, &rows);
        pk.scratch = rows;
        self.full_meta()
    }

    /// Writes the stack section (FORMAT.md §5.5); returns, per slot, its position in the
    /// section's stack list (slots in descending use count, so hot stacks get one-byte
    /// references).
    fn encode_stacks(&mut self, body: &mut Vec<u8>, pk: &mut Packer, table: &StackTable) -> Vec<u32> {
        let nn = self.nodes.len();
        put_uleb(body, nn as u64);
        if nn == 0 {
            return Vec::new();
        }
        let stored = self.stacks_stored;
        let put = |pk: &mut Packer, body: &mut Vec<u8>| {
            if stored {
                let raw = std::mem::take(&mut pk.scratch);
                body.push(crate::columns::BLOB_STORED);
                put_uleb(body, raw.len() as u64);
                body.extend_from_slice(&raw);
                pk.scratch = raw;
                pk.scratch.clear();
            } else {
                pk.put_scratch(body);
            }
        };
        // Callers first: writer ids grow from parent to child.
        self.nodes.sort_unstable();
        for (i, &g) in self.nodes.iter().enumerate() {
            self.node_mark[g as usize].1 = i as u32 + 1;
        }
        let mut frame_map: HashMap<Frame, u32, BuildHasherDefault<IntHasher>> = HashMap::default();
        let mut frames: Vec<(Frame, u32)> = Vec::new();
        let mut node_frame: Vec<u32> = Vec::with_capacity(nn);
        for &g in &self.nodes {
            let f = table.frame(StackId(g)).unwrap_or_default();
            let next = frames.len() as u32;
            let k = *frame_map.entry(f).or_insert(next);
            if k == next {
                frames.push((f, 0));
            }
            frames[k as usize].1 += 1;
            node_frame.push(k);
        }
        // Frame table in address order: small deltas (measured smaller than ordering by
        // use count, FORMAT.md §10.4).
        let mut order: Vec<u32> = (0..frames.len() as u32).collect();
        order.sort_unstable_by_key(|&k| frames[k as usize].0);
        let mut frank = vec![0u32; frames.len()];
        for (r, &k) in order.iter().enumerate() {
            frank[k as usize] = r as u32;
        }
        put_uleb(body, frames.len() as u64);
        pk.scratch.clear();
        let mut prev = 0u64;
        for &k in &order {
            let ip = frames[k as usize].0.ip;
            put_uleb(&mut pk.scratch, ip.wrapping_sub(prev));
            prev = ip;
        }
        put(pk, body);
        put_column(body, pk, frames.len(), |i| frames[order[i] as usize].0.kind as u64);
        // Nodes: parent distance (0 = outermost frame), frame index.
        pk.scratch.clear();
        for (i, &g) in self.nodes.iter().enumerate() {
            let p = table.parent(StackId(g));
            let d = if p.is_none() { 0 } else { i as u32 + 1 - self.node_mark[p.0 as usize].1 };
            put_uleb(&mut pk.scratch, d as u64);
        }
        put(pk, body);
        pk.scratch.clear();
        for &k in &node_frame {
            put_uleb(&mut pk.scratch, frank[k as usize] as u64);
        }
        put(pk, body);
        // Stack list: the nodes records refer to, most used first.
        let mut sorder: Vec<u32> = (0..self.slots.len() as u32).collect();
        sorder.sort_by_key(|&s| std::cmp::Reverse(self.slot_counts[s as usize]));
        let mut slot_rank = vec![0u32; self.slots.len()];
        for (r, &s) in sorder.iter().enumerate() {
            slot_rank[s as usize] = r as u32;
        }
        put_uleb(body, sorder.len() as u64);
        pk.scratch.clear();
        for &s in &sorder {
            put_uleb(&mut pk.scratch, self.node_mark[self.slots[s as usize] as usize].1 as u64);
        }
        put(pk, body);
        slot_rank
    }

    fn encode_samples(&mut self, body: &mut Vec<u8>, pk: &mut Packer, codec: TimeCodec, slot_rank: &[u32], between: &mut dyn FnMut()) {
        let rows = &self.rows[..];
        let n = rows.len();
        let base = rows[0].time;
        put_u64(body, base);
        body.push(codec as u8);
        self.deltas.clear();
        let (mut prev, mut max) = (base, 0);
        self.deltas.extend(rows.iter().map(|r| {
            let d = r.time - prev;
            prev = r.time;
            max = max.max(d);
            d
        }));
        pk.scratch.clear();
        codec.encode_max(&self.deltas, max, &mut pk.scratch);
        pk.put_scratch(body);
        between();

        let runs = &self.runs[..];
        put_runs(body, pk, runs, Consts::event);

        put_uleb(body, self.threads.len() as u64);
        for &(pid, tid) in &self.threads {
            put_uleb(body, pid as u64);
            put_uleb(body, tid as u64);
        }
        put_column_by(body, pk, rows, |r| r.thread as u64);
        between();
        put_column_by(body, pk, rows, |r| r.cpu as u64);
        between();
        put_runs(body, pk, runs, |c| c.period);
        put_runs(body, pk, runs, Consts::cpumode);

        // IP table in descending frequency, so hot IPs get one-byte indices.
        let mut order: Vec<u32> = (0..self.ips.len() as u32).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.ip_counts[i as usize]));
        // Rank of each ip index, and at LEAF_IP's slot (the last) index 0.
        let mut rank = vec![0u32; self.ips.len() + 1];
        // With stack nodes in the chunk, index 0 is "the stack's leaf ip" and the table is
        // 1-based; without, indices are 0-based as in version 1.
        let shift = !self.nodes.is_empty() as u32;
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32 + shift;
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
        between();
        let last = self.ips.len();
        let rank = &rank[..];
        // `move`: the slices and `last` stay in registers instead of being reloaded
        // through references after every byte written.
        let ip_row = move |i: usize| rank[(rows[i].ip as usize).min(last)] as u64;
        if last + shift as usize > 0x80 {
            // Some row has a rank of 128 or more (every ip of the table is some row's),
            // and the rows differ: what put_column writes, without its two checks.
            body.push(crate::columns::COL_ULEB);
            pk.scratch.clear();
            put_ulebs(&mut pk.scratch, n, ip_row);
            pk.put_scratch(body);
        } else {
            put_column_by(body, pk, rows, move |r| rank[(r.ip as usize).min(last)] as u64);
        }
        between();

        // Optional fields: which rows have them (needed only when some rows do).
        let masks: Vec<u8> = if self.addrs.is_empty() && self.weights.is_empty() && self.data_srcs.is_empty() {
            Vec::new()
        } else {
            runs.iter().flat_map(|&(c, k)| std::iter::repeat_n(c.opt_mask(), k as usize)).collect()
        };
        let m = &masks;
        put_opt_column(body, pk, n, |i| m[i] & HAS_ADDR != 0, &self.addrs, true);
        put_opt_column(body, pk, n, |i| m[i] & HAS_WEIGHT != 0, &self.weights, false);
        put_opt_column(body, pk, n, |i| m[i] & HAS_DATA_SRC != 0, &self.data_srcs, false);

        put_runs(body, pk, runs, Consts::regs_count);
        pk.scratch.clear();
        for &r in &self.regs {
            put_uleb(&mut pk.scratch, r);
        }
        pk.put_scratch(body);

        if self.slots.is_empty() {
            // No stacks: every row is 0 (what put_column writes for a constant column).
            body.push(crate::columns::COL_CONST);
            put_uleb(body, 0);
        } else {
            put_column(body, pk, n, |i| match rows[i].stack {
                0 => 0,
                s => slot_rank[s as usize - 1] as u64 + 1,
            });
        }
        put_runs(body, pk, runs, |c| c.stack_status() as u64);
    }

    /// Forgets the buffered records (after the chunk was written).
    pub fn reset(&mut self) {
        self.meta = RecordsMeta::default();
        self.raw_estimate = 0;
        self.rows.clear();
        self.last_time = 0;
        self.threads.clear();
        self.thread_map.clear();
        self.thread_cache = [((0, 0), 0); THREAD_CACHE];
        self.ips.clear();
        self.ip_counts.clear();
        self.ip_map.clear();
        self.ip_cache.0.fill((0, 0));
        self.lag_n = 0;
        self.runs.clear();
        self.addrs.clear();
        self.weights.clear();
        self.data_srcs.clear();
        self.regs.clear();
        self.sideband.clear();
        self.slots.clear();
        self.slot_counts.clear();
        self.slot_map.clear();
        self.last_slot = None;
        self.nodes.clear();
        self.stacks_stored = false;
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // Marks of 2^32 chunks ago could alias: start over.
            self.node_mark.iter_mut().for_each(|m| m.0 = 0);
            self.generation = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Consts`] gives back every field it packs, at their largest values too, and two
    /// rows compare equal exactly when all their fields are equal.
    #[test]
    fn consts_pack_every_field() {
        let rows = [(0u64, 0u16, 0u8, 0u8, 0u8, 0usize), (u64::MAX, u16::MAX, 5, 7, 7, crate::writer::MAX_REGS), (3, 1, 2, 3, 4, 5)];
        for &(period, event, cpumode, status, mask, regs) in &rows {
            let c = Consts::new(period, event, cpumode, status, mask, regs);
            assert_eq!(
                (c.period, c.event(), c.cpumode(), c.stack_status(), c.opt_mask(), c.regs_count()),
                (period, event as u64, cpumode as u64, status, mask, regs as u64)
            );
        }
        let base = Consts::new(3, 1, 2, 3, 4, 5);
        let changed = [
            Consts::new(4, 1, 2, 3, 4, 5),
            Consts::new(3, 2, 2, 3, 4, 5),
            Consts::new(3, 1, 3, 3, 4, 5),
            Consts::new(3, 1, 2, 4, 4, 5),
            Consts::new(3, 1, 2, 3, 5, 5),
            Consts::new(3, 1, 2, 3, 4, 6),
        ];
        assert!(changed.iter().all(|c| *c != base));
        assert!(Consts::new(3, 1, 2, 3, 4, 5) == base);
    }

    /// [`put_runs`] writes the same bytes as [`put_column`] over the expanded rows:
    /// constant, varying from the first row, from a later row, multi-byte values, and
    /// varying runs whose values map to one value.
    #[test]
    fn runs_column_matches_plain_column() {
        let cases: Vec<Vec<u64>> = vec![
            vec![7; 500],
            vec![1],
            (0..300).map(|i| i % 3).collect(),
            (0..300).map(|i| if i < 299 { 5 } else { 6 }).collect(),
            (0..300).map(|i| if i == 0 { 9 } else { 4 }).collect(),
            (0..300).map(|i| 100 + (i / 7) % 2).collect(),
            (0..300).map(|i| 1000 + (i / 5) % 3).collect(),
        ];
        for (k, rows) in cases.iter().enumerate() {
            let mut runs: Vec<(Consts, u32)> = Vec::new();
            for &v in rows {
                match runs.last_mut() {
                    Some((c, n)) if c.period == v => *n += 1,
                    _ => runs.push((Consts::new(v, 0, 0, 0, 0, 0), 1)),
                }
            }
            for f in [(|v: u64| v * 3) as fn(u64) -> u64, |v: u64| v / 100] {
                for level in [0, 1] {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    put_runs(&mut a, &mut Packer::new(level), &runs, |c| f(c.period));
                    put_column(&mut b, &mut Packer::new(level), rows.len(), |i| f(rows[i]));
                    assert_eq!(a, b, "case {k}");
                }
            }
        }
    }
}
