//! The round queue: records drained from all rings and held until they can be written,
//! merged across CPUs in `(time, arrival)` order.

use tailprof_format::CpuMode;

use crate::parse::PlainSample;

/// A record held back by [`RoundQueue`]: a [`PlainSample`] itself, or where a raw
/// record's bytes are; and how to order it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub time: u64,
    /// Arrival order; breaks ties so same-time records keep their ring order.
    seq: u64,
    /// A plain sample's ip; a raw record's offset in the run's arenas ([`ARENA_BIT`]
    /// says which one).
    a: u64,
    /// A plain sample's period; a raw record's length.
    b: u64,
    /// The ring's CPU (raw records), the sample's CPU (plain samples).
    pub cpu: u32,
    pid: u32,
    tid: u32,
    /// Event index, or `u16::MAX` when unknown.
    event: u16,
    /// A plain sample's `CpuMode`, or [`RAW`].
    mode: u8,
}

/// [`Pending::mode`] of a raw record.
const RAW: u8 = u8::MAX;

impl Pending {
    #[inline]
    pub fn event(&self) -> Option<u16> {
        (self.event != u16::MAX).then_some(self.event)
    }

    /// The sample, when this is a plain one (queued by [`RoundQueue::push_plain`]).
    #[inline(always)]
    pub fn plain(&self) -> Option<PlainSample> {
        (self.mode != RAW).then(|| PlainSample {
            time: self.time,
            ip: self.a,
            period: self.b,
            pid: self.pid,
            tid: self.tid,
            cpu: self.cpu,
            event: self.event,
            cpumode: CpuMode::from_u8(self.mode),
        })
    }

    #[inline(always)]
    fn is_raw(&self) -> bool {
        self.mode == RAW
    }

    /// Which arena holds a raw record's bytes.
    #[inline(always)]
    fn arena(&self) -> usize {
        (self.a >> ARENA_BIT) as usize
    }
}

/// How far back [`RoundQueue::push`] looks to insert a slightly late record in place;
/// a record that would go further back marks its run for a (stable) sort instead.
const MAX_INSERT_DISTANCE: usize = 64;
/// Up to this many runs (CPUs), [`RoundQueue::emit_some`] finds the smallest head by a
/// scan (cheaper than heap traffic when CPUs take turns record by record); with one or
/// two runs a merge specialised for two heads is used.
const LINEAR_MERGE_RUNS: usize = 8;
/// A run's arenas keep their capacity across rounds (no page is freed and faulted in
/// again every round) unless one is above this and more than 4 times its last use:
/// then, after a burst, it is shrunk.
const KEEP_ARENA_BYTES: usize = 4 << 20;

/// The records of one source (one ring, i.e. one CPU), in `(time, arrival)` order.
#[derive(Debug, Default)]
struct Run {
    /// Record bytes in arrival order, in two arenas: records are appended to
    /// `arenas[cur]`; at the end of a round, once no pending record is in the other
    /// arena, that one is emptied and becomes the current one. Records held back past the
    /// round limit (the newest of each run) so stay where they are, and arenas keep their
    /// capacity round after round (see [`KEEP_ARENA_BYTES`]).
    arenas: [Vec<u8>; 2],
    cur: usize,
    /// `idx[head..]` are the pending records, sorted by `(time, seq)` unless
    /// `unsorted`; `idx[..head]` were emitted (dropped at the end of the round).
    idx: Vec<Pending>,
    head: usize,
    /// A record arrived too far out of order for an in-place insert; sort the pending
    /// records (stably, this run only) before the next merge.
    unsorted: bool,
}

/// Bit of [`Pending::off`] that says which arena holds the bytes.
const ARENA_BIT: u32 = 63;

impl Run {
    /// A raw record's bytes (empty for a plain sample).
    #[inline(always)]
    fn bytes(&self, p: &Pending) -> &[u8] {
        if !p.is_raw() {
            return &[];
        }
        let a = &self.arenas[p.arena()];
        let off = (p.a & !(1 << ARENA_BIT)) as usize;
        &a[off..off + p.b as usize]
    }

    /// The key of the first pending record if it is due (`time <= lim`), else `NONE`.
    #[inline(always)]
    fn head_key(&self, lim: u64) -> (u64, u64) {
        match self.idx.get(self.head) {
            Some(p) if p.time <= lim => (p.time, p.seq),
            _ => NONE,
        }
    }

    /// At the end of a round: drop the emitted records' index entries; when no pending
    /// record is in the other arena, empty it and make it the current one.
    fn compact(&mut self) {
        self.idx.drain(..self.head);
        self.head = 0;
        let other = 1 - self.cur;
        if !self.idx.iter().any(|p| p.is_raw() && p.arena() == other) {
            self.empty(other);
            self.cur = other;
            if self.idx.is_empty() {
                self.empty(1 - other);
            }
        } else if self.arenas[self.cur].len() > KEEP_ARENA_BYTES && self.arenas[self.cur].len() / 2 > self.idx.len() * 64 {
            // Records held back for several rounds in both arenas while the current one
            // fills with emitted bytes: copy the pending ones into a fresh arena.
            self.repack();
        }
    }

    /// Empty arena `a`, shrinking it if it was far larger than its recent use.
    fn empty(&mut self, a: usize) {
        let v = &mut self.arenas[a];
        let used = v.len();
        v.clear();
        if v.capacity() > KEEP_ARENA_BYTES && v.capacity() / 4 > used {
            v.shrink_to(KEEP_ARENA_BYTES.max(2 * used));
        }
        if self.idx.capacity() * std::mem::size_of::<Pending>() > KEEP_ARENA_BYTES && self.idx.capacity() / 4 > self.idx.len() {
            let keep = KEEP_ARENA_BYTES / std::mem::size_of::<Pending>();
            self.idx.shrink_to(keep.max(2 * self.idx.len()));
        }
    }

    /// Move every pending record's bytes into arena 0, and make arena 1 (empty) current.
    #[cold]
    fn repack(&mut self) {
        let mut packed = Vec::with_capacity(self.idx.iter().filter(|p| p.is_raw()).map(|p| p.b as usize).sum());
        let mut idx = std::mem::take(&mut self.idx);
        for p in idx[self.head..].iter_mut().filter(|p| p.is_raw()) {
            let off = packed.len() as u64;
            packed.extend_from_slice(self.bytes(p));
            p.a = off;
        }
        self.idx = idx;
        self.arenas = [packed, Vec::new()];
        self.cur = 1;
    }
}

/// The key of "no due record" in the merges.
const NONE: (u64, u64) = (u64::MAX, u64::MAX);

/// Records drained from all rings and not yet written, for merging CPUs in time order.
///
/// Each ring is (almost) in time order already, so the queue keeps one *run* per ring
/// and [`RoundQueue::emit`] merges the run heads (two heads compared directly, a scan of
/// up to [`LINEAR_MERGE_RUNS`] heads, or a small binary heap keyed by `(time,
/// arrival)`) instead of sorting. Raw record bytes are copied once, appended to the
/// run's arena, which keeps its capacity round after round (pushing allocates nothing in
/// steady state); the records held back past the round limit (the tail of each run) are
/// moved to the front of the arena when the emitted ones are dropped. A record that
/// arrives out of order within its ring (a side-band record whose timestamp was taken
/// before an interrupting sample's, say) is inserted in place when it is a few records
/// late, or makes its run be stably re-sorted before the next merge. See `session` for
/// the invariant that makes the limit safe.
#[derive(Debug, Default)]
pub struct RoundQueue {
    runs: Vec<Run>,
    /// Run index of each CPU (`u32::MAX`: none yet).
    run_of_cpu: Vec<u32>,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64, u32)>>,
    seq: u64,
    pending: usize,
}

impl RoundQueue {
    pub fn new() -> Self {
        Self::default()
    }

    #[cold]
    fn run_index(&mut self, cpu: u32) -> usize {
        let c = cpu as usize;
        if c >= self.run_of_cpu.len() {
            self.run_of_cpu.resize(c + 1, u32::MAX);
        }
        if self.run_of_cpu[c] == u32::MAX {
            self.run_of_cpu[c] = self.runs.len() as u32;
            self.runs.push(Run::default());
        }
        self.run_of_cpu[c] as usize
    }

    /// Queue one raw record drained from the ring of `cpu` (records of one CPU must be
    /// pushed in ring order).
    #[inline]
    pub fn push(&mut self, time: u64, event: Option<u16>, cpu: u32, rec: &[u8]) {
        let r = match self.run_of_cpu.get(cpu as usize) {
            Some(&r) if r != u32::MAX => r as usize,
            _ => self.run_index(cpu),
        };
        let run = &mut self.runs[r];
        let arena = &mut run.arenas[run.cur];
        let off = arena.len() as u64 | (run.cur as u64) << ARENA_BIT;
        arena.extend_from_slice(rec);
        let event = event.unwrap_or(u16::MAX);
        let p = Pending { time, seq: self.seq, a: off, b: rec.len() as u64, cpu, pid: 0, tid: 0, event, mode: RAW };
        self.seq += 1;
        self.pending += 1;
        run.add(p);
    }

    /// Queue a sample decoded from the ring of `ring_cpu` (in ring order with the raw
    /// records of that ring): the entry is the sample, no bytes are kept.
    #[inline]
    pub fn push_plain(&mut self, ring_cpu: u32, s: &PlainSample) {
        let r = match self.run_of_cpu.get(ring_cpu as usize) {
            Some(&r) if r != u32::MAX => r as usize,
            _ => self.run_index(ring_cpu),
        };
        let p = Pending {
            time: s.time,
            seq: self.seq,
            a: s.ip,
            b: s.period,
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            event: s.event,
            mode: s.cpumode as u8,
        };
        self.seq += 1;
        self.pending += 1;
        self.runs[r].add(p);
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.pending
    }

    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Call `f` for every queued record with `time <= limit` (all of them if `limit` is
    /// `None`) in `(time, arrival)` order; keep the others in place. Stops at the first
    /// error (the record it failed on is not kept).
    pub fn emit<E>(&mut self, limit: Option<u64>, f: impl FnMut(&Pending, &[u8]) -> Result<(), E>) -> Result<(), E> {
        self.emit_some(limit, usize::MAX, f).map(|_| ())
    }

    /// [`RoundQueue::emit`], but at most `max` records; returns whether records with
    /// `time <= limit` are left. Between two calls the caller may [`RoundQueue::push`]
    /// more records (e.g. drain the rings again while a long round is being written).
    pub fn emit_some<E>(&mut self, limit: Option<u64>, max: usize, f: impl FnMut(&Pending, &[u8]) -> Result<(), E>) -> Result<bool, E> {
        let lim = limit.unwrap_or(u64::MAX);
        for run in self.runs.iter_mut() {
            if std::mem::take(&mut run.unsorted) {
                let h = run.head;
                run.idx[h..].sort_by_key(|p| (p.time, p.seq));
            }
        }
        let before = self.pending_in_runs();
        let res = if self.runs.len() <= 2 {
            self.emit_two(lim, max, f)
        } else if self.runs.len() <= LINEAR_MERGE_RUNS {
            self.emit_linear(lim, max, f)
        } else {
            self.emit_heap(lim, max, f)
        };
        self.pending -= before - self.pending_in_runs();
        // Switch arenas once the due records are out (the end of a round), not after
        // every batch of a long round.
        let done = !matches!(res, Ok(true));
        for run in &mut self.runs {
            if done {
                run.compact();
            }
        }
        res
    }

    fn pending_in_runs(&self) -> usize {
        self.runs.iter().map(|r| r.idx.len() - r.head).sum()
    }

    /// The merge of [`RoundQueue::emit_some`] for one or two runs (one or two CPUs): the
    /// two head keys are compared directly, and records are taken from the smaller
    /// run while they stay below the other head.
    fn emit_two<E>(&mut self, lim: u64, max: usize, mut f: impl FnMut(&Pending, &[u8]) -> Result<(), E>) -> Result<bool, E> {
        let mut spare = Run::default();
        let n = self.runs.len().min(1);
        let (x, y) = self.runs.split_at_mut(n);
        let Some(a) = x.first_mut() else { return Ok(false) };
        let b = y.first_mut().unwrap_or(&mut spare);
        let mut budget = max;
        // Keys as `time << 64 | seq` (unique; `u128::MAX`: no due record).
        let key = |r: &Run| match r.idx.get(r.head) {
            Some(p) if p.time <= lim => (p.time as u128) << 64 | p.seq as u128,
            _ => u128::MAX,
        };
        // Both keys stay in registers (an array indexed by the run taken from cost a
        // store-forwarding stall per record); keys are unique unless both are `MAX`.
        let (mut ka, mut kb) = (key(a), key(b));
        // Take from the run with the smaller head while it stays below the other's.
        while budget > 0 {
            if ka < kb {
                while let Some(&p) = a.idx.get(a.head) {
                    a.head += 1;
                    budget -= 1;
                    f(&p, a.bytes(&p))?;
                    ka = key(a);
                    if ka >= kb || budget == 0 {
                        break;
                    }
                }
            } else if kb != u128::MAX {
                while let Some(&p) = b.idx.get(b.head) {
                    b.head += 1;
                    budget -= 1;
                    f(&p, b.bytes(&p))?;
                    kb = key(b);
                    if kb >= ka || budget == 0 {
                        break;
                    }
                }
            } else {
                break;
            }
        }
        Ok(ka != u128::MAX || kb != u128::MAX)
    }

    /// The merge for more than [`LINEAR_MERGE_RUNS`] runs: a heap of the run heads.
    fn emit_heap<E>(&mut self, lim: u64, max: usize, mut f: impl FnMut(&Pending, &[u8]) -> Result<(), E>) -> Result<bool, E> {
        self.heap.clear();
        for (i, run) in self.runs.iter().enumerate() {
            let k = run.head_key(lim);
            if k != NONE {
                self.heap.push(std::cmp::Reverse((k.0, k.1, i as u32)));
            }
        }
        let mut budget = max;
        while budget > 0 {
            let Some(std::cmp::Reverse((_, _, i))) = self.heap.pop() else { break };
            let run = &mut self.runs[i as usize];
            // With one candidate run left, no heap traffic: walk it up to the limit.
            let alone = self.heap.is_empty();
            while budget > 0 {
                let Some(&p) = run.idx.get(run.head) else { break };
                run.head += 1;
                budget -= 1;
                f(&p, run.bytes(&p))?;
                match run.idx.get(run.head) {
                    Some(n) if n.time <= lim => {
                        // Still the smallest? Then keep going without touching the heap.
                        let top = self.heap.peek().map(|t| (t.0 .0, t.0 .1));
                        if (alone || top.is_some_and(|t| (n.time, n.seq) < t)) && budget > 0 {
                            continue;
                        }
                        self.heap.push(std::cmp::Reverse((n.time, n.seq, i)));
                    }
                    _ => {}
                }
                break;
            }
        }
        Ok(!self.heap.is_empty())
    }

    /// The merge for a few runs (a machine with a few CPUs): the smallest head is found
    /// by a scan instead of a heap, and records are taken from it while it stays below
    /// every other head (`lim` as in `emit_some`).
    fn emit_linear<E>(&mut self, lim: u64, max: usize, mut f: impl FnMut(&Pending, &[u8]) -> Result<(), E>) -> Result<bool, E> {
        let mut budget = max;
        while budget > 0 {
            // The run with the smallest eligible head, and the key it must stay below.
            let (mut best, mut first, mut second) = (usize::MAX, NONE, NONE);
            for (i, run) in self.runs.iter().enumerate() {
                let k = run.head_key(lim);
                if k < first {
                    (second, first, best) = (first, k, i);
                } else if k < second {
                    second = k;
                }
            }
            if best == usize::MAX {
                return Ok(false);
            }
            let run = &mut self.runs[best];
            while let Some(&p) = run.idx.get(run.head) {
                run.head += 1;
                budget -= 1;
                f(&p, run.bytes(&p))?;
                match run.idx.get(run.head) {
                    Some(n) if n.time <= lim && (n.time, n.seq) < second && budget > 0 => {}
                    _ => break,
                }
            }
        }
        Ok(self.runs.iter().any(|r| r.head_key(lim) != NONE))
    }
}

impl Run {
    /// Append `p`, or insert it in place when it is earlier than the last pending record.
    #[inline(always)]
    fn add(&mut self, p: Pending) {
        match self.idx.last() {
            Some(last) if p.time < last.time && self.idx.len() > self.head && !self.unsorted => self.insert(p),
            _ => self.idx.push(p),
        }
    }

    /// Insert a record that is earlier than the last pending one: after every pending
    /// record with time <= its time (stable), if that is close to the end; else append
    /// it and mark the run for sorting.
    #[cold]
    fn insert(&mut self, p: Pending) {
        let n = self.idx.len();
        let mut i = n;
        while i > self.head && n - i < MAX_INSERT_DISTANCE && self.idx[i - 1].time > p.time {
            i -= 1;
        }
        if i > self.head && self.idx[i - 1].time > p.time {
            self.unsorted = true;
            self.idx.push(p);
        } else {
            self.idx.insert(i, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_queue_orders_and_holds_back() {
        let mut q = RoundQueue::new();
        q.push(30, Some(0), 0, b"c0");
        q.push(10, Some(0), 0, b"a0");
        q.push(20, None, 1, b"b1");
        q.push(10, Some(1), 1, b"a1");
        let mut out = Vec::new();
        q.emit::<()>(Some(20), |p, r| {
            out.push((p.time, p.cpu, p.event(), r.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(out, vec![(10, 0, Some(0), b"a0".to_vec()), (10, 1, Some(1), b"a1".to_vec()), (20, 1, None, b"b1".to_vec())]);
        assert_eq!(q.len(), 1);
        q.push(25, Some(0), 1, b"x1");
        let mut out = Vec::new();
        q.emit::<()>(None, |p, r| {
            out.push((p.time, r.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(out, vec![(25, b"x1".to_vec()), (30, b"c0".to_vec())]);
        assert!(q.is_empty());
    }

    /// The merge against a reference (a stable sort by time of everything queued):
    /// several CPUs, records slightly and badly out of order within a ring, limits
    /// that hold records back over several rounds, and enough bytes to compact the arenas.
    #[test]
    fn round_queue_matches_sorting_over_many_rounds() {
        // Two heads (one or two CPUs), a scan over the run heads (few CPUs) and the heap
        // (many CPUs).
        merge_matches_sorting::<1>(0x1234_5678_9abc_def1);
        merge_matches_sorting::<2>(0x2545_f491_4f6c_dd1d);
        merge_matches_sorting::<3>(0x2545_f491_4f6c_dd1d);
        merge_matches_sorting::<{ LINEAR_MERGE_RUNS }>(0x9e37_79b9_7f4a_7c15);
        merge_matches_sorting::<{ LINEAR_MERGE_RUNS + 4 }>(0x2545_f491_4f6c_dd1d);
    }

    /// The bytes of record number `arrival` in the merge test.
    fn fake_record(arrival: u64, len: usize) -> Vec<u8> {
        let mut rec = vec![(arrival % 251) as u8; len];
        rec[..8].copy_from_slice(&arrival.to_ne_bytes());
        rec
    }

    /// A plain sample keeps every field through the queue; raw records and plain samples
    /// of one ring stay in arrival order at equal times, and across rings ties go to the
    /// earlier arrival whatever the kind.
    #[test]
    fn plain_samples_keep_their_fields_and_their_place() {
        let mut q = RoundQueue::new();
        let s = |time, ip| PlainSample { time, ip, period: 10_000 + ip, pid: 7, tid: 8, cpu: 9, event: 2, cpumode: CpuMode::GuestUser };
        q.push(5, Some(0), 0, b"raw0");
        q.push_plain(1, &s(5, 1));
        q.push_plain(0, &s(5, 2));
        q.push(5, None, 1, b"raw1");
        q.push_plain(0, &s(3, 3)); // late within its ring: inserted in place
        let mut out = Vec::new();
        q.emit::<()>(None, |p, b| {
            out.push((p.time, p.plain(), b.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            out,
            vec![
                (3, Some(s(3, 3)), vec![]),
                (5, None, b"raw0".to_vec()),
                (5, Some(s(5, 1)), vec![]),
                (5, Some(s(5, 2)), vec![]),
                (5, None, b"raw1".to_vec()),
            ]
        );
        assert_eq!(std::mem::size_of::<Pending>(), 48);
    }

    fn merge_matches_sorting<const CPUS: usize>(seed: u64) {
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut q = RoundQueue::new();
        let mut queued: Vec<(u64, u64, u32, Vec<u8>)> = Vec::new(); // (time, arrival, cpu, bytes)
        let mut written: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut expect: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut clock = [0u64; CPUS];
        let mut arrival = 0u64;
        for round in 0..200u64 {
            for (cpu, t) in clock.iter_mut().enumerate() {
                for _ in 0..(next() % (1200 / CPUS as u64)) {
                    *t += next() % 50;
                    let r = next() % 100;
                    // Mostly in order; some a little late; a few very late.
                    let time = match r {
                        0..=89 => *t,
                        90..=98 => t.saturating_sub(next() % 200),
                        _ => t.saturating_sub(next() % 20_000),
                    };
                    let len = 8 + (next() % 200) as usize;
                    let rec = fake_record(arrival, len);
                    // A third as plain samples (which keep no bytes), in the same runs.
                    if next() % 3 == 0 {
                        let s = PlainSample {
                            time,
                            ip: arrival,
                            period: len as u64,
                            cpu: cpu as u32,
                            event: cpu as u16,
                            ..PlainSample::default()
                        };
                        q.push_plain(cpu as u32, &s);
                    } else {
                        q.push(time, Some(cpu as u16), cpu as u32, &rec);
                    }
                    queued.push((time, arrival, cpu as u32, rec));
                    arrival += 1;
                }
            }
            let limit = if round == 199 { None } else { Some(clock.iter().min().unwrap().saturating_sub(3000)) };
            let lim = limit.unwrap_or(u64::MAX);
            queued.sort_by_key(|r| (r.0, r.1));
            let split = queued.partition_point(|r| r.0 <= lim);
            expect.extend(queued.drain(..split).map(|(t, _, c, b)| (t, c, b)));
            // In batches of random size (as the recorder does when it drains mid-round).
            let max = if round % 2 == 0 { usize::MAX } else { 1 + (next() % 3000) as usize };
            while q
                .emit_some::<()>(limit, max, |p, b| {
                    assert_eq!(p.event(), Some(p.cpu as u16));
                    let b = match p.plain() {
                        Some(s) => {
                            assert!(b.is_empty() && s.time == p.time && s.cpu == p.cpu);
                            fake_record(s.ip, s.period as usize)
                        }
                        None => b.to_vec(),
                    };
                    written.push((p.time, p.cpu, b));
                    Ok(())
                })
                .unwrap()
            {}
            assert_eq!(q.len(), queued.len());
            assert_eq!(written.len(), expect.len(), "round {round}");
        }
        assert!(q.is_empty());
        assert!(written.len() > 100_000);
        assert!(written == expect, "merge order differs from a stable sort");
        // Arenas were emptied, not accumulated.
        assert!(q.runs.iter().all(|r| r.arenas.iter().all(Vec::is_empty) && r.idx.is_empty()));
    }

    /// Held-back records survive the compaction of their run intact, and in steady
    /// state a run's buffers are reused round after round (no reallocation; the two
    /// arenas take turns).
    #[test]
    fn held_back_records_survive_compaction_and_buffers_are_reused() {
        let mut q = RoundQueue::new();
        let mut ptrs = Vec::new();
        let mut t = 0u64;
        let mut out = Vec::new();
        for round in 0..50u64 {
            for _ in 0..1000 {
                t += 1;
                q.push(t, None, 0, &t.to_ne_bytes());
            }
            // Hold back the last 300 records of the round.
            q.emit::<()>(Some(t - 300), |p, b| {
                out.push((p.time, u64::from_ne_bytes(b.try_into().unwrap())));
                Ok(())
            })
            .unwrap();
            assert_eq!(q.len(), 300);
            if round >= 2 {
                let r = &q.runs[0];
                ptrs.push((r.arenas[r.cur].as_ptr(), r.arenas[1 - r.cur].as_ptr(), r.idx.capacity()));
            }
        }
        q.emit::<()>(None, |p, b| {
            out.push((p.time, u64::from_ne_bytes(b.try_into().unwrap())));
            Ok(())
        })
        .unwrap();
        assert!(out.iter().enumerate().all(|(i, &(a, b))| a == i as u64 + 1 && b == a));
        assert_eq!(out.len(), 50_000);
        assert!(ptrs.windows(3).all(|w| w[0] == w[2]), "buffers were reallocated");
    }

    /// After a burst, an arena far larger than what is queued is shrunk.
    #[test]
    fn arena_shrinks_after_a_burst() {
        let mut q = RoundQueue::new();
        let rec = [7u8; 200];
        for t in 0..100_000u64 {
            q.push(t, None, 0, &rec);
        }
        q.emit::<()>(None, |_, _| Ok(())).unwrap();
        let cap = |q: &RoundQueue| q.runs[0].arenas.iter().map(Vec::capacity).max().unwrap();
        assert!(cap(&q) >= 20_000_000);
        // Smaller rounds: shrunk, but not below what they use.
        for _ in 0..3 {
            for t in 0..1000u64 {
                q.push(t, None, 0, &rec);
            }
            q.emit::<()>(None, |_, _| Ok(())).unwrap();
        }
        assert!(cap(&q) <= KEEP_ARENA_BYTES, "{}", cap(&q));
        assert!(q.runs[0].arenas.iter().all(|a| a.capacity() >= 200_000));
    }

    /// A record held back for many rounds pins its arena; the other one, filling with
    /// emitted bytes, is repacked instead of growing without bound.
    #[test]
    fn long_held_record_does_not_pin_memory() {
        let mut q = RoundQueue::new();
        let mut rec = [0u8; 200];
        rec[..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        q.push(1 << 40, None, 0, &rec);
        let mut t = 0u64;
        let mut out = Vec::new();
        for _ in 0..40 {
            for _ in 0..5000 {
                t += 1;
                rec[..8].copy_from_slice(&t.to_ne_bytes());
                q.push(t, None, 0, &rec);
            }
            q.emit::<()>(Some(t), |p, b| {
                out.push((p.time, u64::from_ne_bytes(b[..8].try_into().unwrap())));
                Ok(())
            })
            .unwrap();
            assert_eq!(q.len(), 1);
            let used: usize = q.runs[0].arenas.iter().map(Vec::len).sum();
            assert!(used <= 2 * KEEP_ARENA_BYTES + 2 * 5000 * 200, "{used}");
        }
        q.emit::<()>(None, |p, b| {
            out.push((p.time, u64::from_ne_bytes(b[..8].try_into().unwrap())));
            Ok(())
        })
        .unwrap();
        assert_eq!(out.len(), 200_001);
        assert!(out[..200_000].iter().enumerate().all(|(i, &(a, b))| a == i as u64 + 1 && b == a));
        assert_eq!(out[200_000], (1 << 40, u64::MAX));
    }

    /// An error stops the merge; the record it failed on is gone, the rest stay queued
    /// and come out in order.
    #[test]
    fn error_stops_and_keeps_the_rest() {
        for cpus in [1u32, 2, 5, 12] {
            let mut q = RoundQueue::new();
            for t in 0..100u64 {
                q.push(t, None, (t % cpus as u64) as u32, &t.to_ne_bytes());
            }
            let mut seen = Vec::new();
            let r = q.emit(None, |p, _| {
                if p.time == 40 {
                    return Err(p.time);
                }
                seen.push(p.time);
                Ok(())
            });
            assert_eq!(r, Err(40));
            assert_eq!(q.len(), 59, "{cpus} cpus");
            q.emit::<()>(None, |p, _| {
                seen.push(p.time);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, (0..100).filter(|&t| t != 40).collect::<Vec<_>>());
            assert!(q.is_empty());
        }
    }
}
