//! Between the round queue and the writer: decode raw records, turn uprobe hits into
//! markers, count everything for the [`RecordSummary`], attach build-ids to mappings.

use std::collections::HashMap;
use std::path::Path;

use tailprof_format::{BuildIdEntry, FormatError, LossKind, Mmap, Record, Sample};

use super::{RecordOutput, RecordSummary};
use crate::buildid;
use crate::items::uprobe::{MarkerMaker, ProbeRole};
use crate::parse::{Decoded, Decoder};
use crate::ring::{Pending, RoundQueue};
use crate::stacks::StackMaker;

/// `(device as st_dev encodes it, inode)` of a mapped file.
pub(super) type FileKey = (u64, u64);
type BuildId = Vec<u8>;

/// Offsets in a PERF_RECORD_MMAP2 record (after the 8-byte header: pid, tid, addr,
/// len, pgoff, then maj, min, ino).
const MMAP2_MAJ: usize = 40;
const MMAP2_MIN: usize = 44;
const MMAP2_INO: usize = 48;

/// The file an MMAP2 record names. Our events never set `attr.build_id`, so the kernel
/// wrote maj/min/ino even if the header's PERF_RECORD_MISC_MMAP_BUILD_ID flag is set (the
/// kernel leaks that flag from other tools' events into records it shares).
fn mmap2_file(rec: &[u8]) -> Option<FileKey> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(rec.get(o..o + 4)?.try_into().ok()?));
    if u32_at(0)? != tailprof_perf_abi::record_type::MMAP2 {
        return None;
    }
    let ino = u64::from_ne_bytes(rec.get(MMAP2_INO..MMAP2_INO + 8)?.try_into().ok()?);
    Some((libc::makedev(u32_at(MMAP2_MAJ)?, u32_at(MMAP2_MIN)?), ino))
}

/// Paths the build-id cache holds at most.
pub const MAX_BUILD_ID_PATHS: usize = 16_384;
/// Bytes of paths the build-id cache holds at most (a path may be 4 KiB long).
pub const MAX_BUILD_ID_PATH_BYTES: usize = 4 << 20;
/// Bytes of (path, build-id) pairs handed to the output (the trace's build-id table) at
/// most per recording.
pub const MAX_TRACE_BUILD_ID_BYTES: usize = 16 << 20;
/// Files remembered per path at most (a path replaced again and again).
const MAX_FILES_PER_PATH: usize = 8;

/// The emitter's build-id cache: path → the files seen at it, least recently used paths
/// evicted beyond [`MAX_BUILD_ID_PATHS`] paths or [`MAX_BUILD_ID_PATH_BYTES`] bytes
/// (issue 19, finding 7: 150,000 long names grew it by 620 MB, kept after the attacker
/// exited).
/// The files seen at one path, each with its build-id.
type FilesAt = Vec<(FileKey, Option<BuildId>)>;

#[derive(Debug, Default)]
pub(super) struct BuildIdCache {
    /// path → (last use, files).
    map: HashMap<String, (u64, FilesAt)>,
    bytes: usize,
    tick: u64,
}

impl BuildIdCache {
    /// The files seen at `path` (marks it used).
    pub(super) fn get(&mut self, path: &str) -> Option<&FilesAt> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(path).map(|e| {
            e.0 = tick;
            &e.1
        })
    }

    /// Remembers `(key, id)` at `path`; returns how many paths were evicted.
    pub(super) fn insert(&mut self, path: &str, key: FileKey, id: Option<BuildId>) -> u64 {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.map.get_mut(path) {
            e.0 = tick;
            if e.1.len() >= MAX_FILES_PER_PATH {
                e.1.remove(0);
            }
            e.1.push((key, id));
            return 0;
        }
        let mut evicted = 0;
        if self.map.len() >= MAX_BUILD_ID_PATHS || self.bytes + path.len() > MAX_BUILD_ID_PATH_BYTES {
            // Evict the least recently used eighth at once (amortized O(1) per insert).
            let mut ticks: Vec<u64> = self.map.values().map(|e| e.0).collect();
            let cut = ticks.len() / 8;
            let (_, &mut limit, _) = ticks.select_nth_unstable(cut);
            let before = self.map.len();
            let mut freed = 0;
            self.map.retain(|p, e| {
                let keep = e.0 > limit;
                if !keep {
                    freed += p.len();
                }
                keep
            });
            self.bytes -= freed;
            evicted = (before - self.map.len()) as u64;
        }
        self.bytes += path.len();
        self.map.insert(path.to_string(), (tick, vec![(key, id)]));
        evicted
    }

    /// Paths held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes of the paths held.
    #[cfg(test)]
    pub(super) fn path_bytes(&self) -> usize {
        self.bytes
    }
}

/// What a raw ring record is to the recorder ([`Emitter::decode_and_write`]): each role
/// has one handler.
enum Role {
    /// A `sched:sched_switch` sample: the stack of a thread going off the CPU.
    OffCpuStack,
    /// A `sched:sched_waking` sample (causes).
    Wakeup,
    /// An `--item-class-from` probe hit.
    ClassHit,
    /// An `--item-begin`/`--item-end` uprobe hit.
    ProbeHit(ProbeRole),
    /// A sample of a sampling event.
    Sample,
    /// A side-band record (MMAP, COMM, FORK, EXIT, LOST, ...).
    SideBand(Record),
    /// A context-switch record, kept with stacks or off-CPU time.
    Switch,
    /// A record type the recorder does not keep.
    Ignored,
    /// A record the decoder could not parse.
    Malformed,
}

/// Decoding, counting, build-ids: everything between the queue and the writer.
pub(super) struct Emitter {
    pub(super) decoder: Decoder,
    /// Reused for every decoded sample.
    pub(super) sample: Sample,
    /// Reused for every plain sample ([`crate::parse::PlainSample`]): its optional fields
    /// stay empty.
    pub(super) plain: Sample,
    /// What was written and lost so far; [`super::Recorder::run`] returns it.
    pub(super) summary: RecordSummary,
    /// Latest timestamp written (to count records written out of order).
    pub(super) last_time: u64,
    /// Build-ids looked up so far, by path and then `(device, inode)` (`(0, 0)` when
    /// neither the record nor `stat` told): each file is read once. Bounded
    /// ([`BuildIdCache`]): least recently used paths are evicted and counted.
    pub(super) build_ids: BuildIdCache,
    /// Events with this index or higher are the uprobe item boundaries (begin, end).
    pub(super) probe_base: u16,
    /// Turns uprobe hits into item markers (with uprobe item boundaries only).
    pub(super) probe_markers: Option<MarkerMaker>,
    /// Reused buffer for the records one probe hit becomes.
    pub(super) probe_records: Vec<Record>,
    /// Uprobe item boundary hits seen (off-CPU events waiting for the first marker start
    /// at the first one too).
    pub(super) probe_hits: u64,
    /// Call stacks, context switches and off-CPU stacks (`None`: not recorded).
    pub(super) stacks: Option<StackMaker>,
    /// `--item-class-from` probes: their hits become class labels (`Label` markers).
    pub(super) classes: Option<crate::items::classprobe::ClassProbes>,
    /// `-a`: executable mappings are shown to it, to attach marked processes that start
    /// while recording (`None`: other targets).
    pub(super) follow: Option<crate::items::markers::MarkerFollower>,
    /// Bytes of build-id entries handed to the output so far.
    pub(super) build_id_bytes_out: usize,
    /// Perf maps and jitdumps of the recorded processes (issue 23), shown every MMAP.
    pub(super) jit: crate::jit::JitCollector,
}

impl Emitter {
    /// An emitter for `decoder`'s events, with no probes, stacks or item classes.
    pub(super) fn new(decoder: Decoder) -> Emitter {
        Emitter {
            decoder,
            sample: Sample::default(),
            plain: Sample::default(),
            summary: RecordSummary::default(),
            last_time: 0,
            build_ids: BuildIdCache::default(),
            probe_base: u16::MAX,
            probe_markers: None,
            probe_hits: 0,
            probe_records: Vec::new(),
            stacks: None,
            classes: None,
            follow: None,
            build_id_bytes_out: 0,
            jit: crate::jit::JitCollector::new(crate::jit::JitLimits::default(), true),
        }
    }

    /// Queue one record drained from the ring of `cpu` (the drain's work per record): a
    /// plain sample is decoded now and queued as such; any other record is queued as raw
    /// bytes with its timestamp and event (a DWARF stack copy cut down first,
    /// `unwinding`), or counted as malformed. `max_seen` keeps the largest timestamp.
    #[inline(always)]
    pub(super) fn queue(&mut self, q: &mut RoundQueue, max_seen: &mut u64, unwinding: bool, cpu: u32, rec: &[u8]) {
        if let Some(s) = self.decoder.plain(rec, cpu) {
            *max_seen = (*max_seen).max(s.time);
            q.push_plain(cpu, &s);
            return;
        }
        match self.decoder.peek(rec) {
            Ok(p) => {
                *max_seen = (*max_seen).max(p.time);
                let rec = match &mut self.stacks {
                    Some(sm) if unwinding && p.kind == tailprof_perf_abi::record_type::SAMPLE => sm.prepare(rec, p.event),
                    _ => rec,
                };
                q.push(p.time, p.event, cpu, rec)
            }
            Err(_) => self.summary.malformed += 1,
        }
    }

    /// Write one queued record: a plain sample as it is, a raw record decoded
    /// ([`Emitter::decode_and_write`]).
    #[inline(always)]
    pub(super) fn write_queued<O: RecordOutput + ?Sized>(&mut self, p: &Pending, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        let Some(ps) = p.plain() else { return self.decode_and_write(p, rec, out) };
        let s = &mut self.plain;
        (s.time, s.ip, s.period, s.pid, s.tid, s.cpu, s.event, s.cpumode) =
            (ps.time, ps.ip, ps.period, ps.pid, ps.tid, ps.cpu, ps.event, ps.cpumode);
        self.summary.samples += 1;
        self.note_time(ps.time);
        out.write_sample(&self.plain)
    }

    #[inline(always)]
    fn note_time(&mut self, t: u64) {
        if t != 0 && t < self.last_time {
            self.summary.out_of_order += 1;
        }
        self.last_time = self.last_time.max(t);
    }

    /// Decode one raw ring record and write what it becomes: a sample, a side-band
    /// record (with its mapping's build-id), item markers (a uprobe hit), or only a count
    /// (a record type the recorder does not keep, or a malformed record). [`Role`] says
    /// which; each role has its own handler.
    pub(super) fn decode_and_write<O: RecordOutput + ?Sized>(&mut self, p: &Pending, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        let decoded = self.decoder.decode(rec, p.event(), p.cpu, &mut self.sample);
        match self.role(decoded) {
            Role::OffCpuStack => {
                self.off_cpu_stack(rec, out);
                Ok(())
            }
            Role::Wakeup => self.wakeup(rec, out),
            Role::ClassHit => self.class_hit(rec, out),
            Role::ProbeHit(role) => self.probe_hit(role, out),
            Role::Sample => self.sample(rec, out),
            Role::SideBand(r) => self.side_band(r, rec, out),
            Role::Switch => self.switch(p, rec, out),
            Role::Ignored => {
                self.summary.ignored += 1;
                Ok(())
            }
            Role::Malformed => {
                self.summary.malformed += 1;
                Ok(())
            }
        }
    }

    /// Which role a decoded record has (a decoded sample is in `self.sample`).
    #[inline]
    fn role(&self, decoded: Result<Decoded, crate::parse::ParseError>) -> Role {
        let event = self.sample.event;
        match decoded {
            Ok(Decoded::Sample) if self.stacks.as_ref().is_some_and(|s| s.off_cpu_event == event) => Role::OffCpuStack,
            Ok(Decoded::Sample) if self.stacks.as_ref().is_some_and(|s| s.is_waking(event)) => Role::Wakeup,
            Ok(Decoded::Sample) if self.classes.as_ref().is_some_and(|c| c.owns(event)) => Role::ClassHit,
            Ok(Decoded::Sample) if event >= self.probe_base => {
                Role::ProbeHit(if event == self.probe_base { ProbeRole::Begin } else { ProbeRole::End })
            }
            Ok(Decoded::Sample) => Role::Sample,
            Ok(Decoded::Record(r)) => Role::SideBand(r),
            Ok(Decoded::Ignored(kind))
                if self.stacks.is_some()
                    && (kind == tailprof_perf_abi::record_type::SWITCH || kind == tailprof_perf_abi::record_type::SWITCH_CPU_WIDE) =>
            {
                Role::Switch
            }
            Ok(Decoded::Ignored(_)) => Role::Ignored,
            Err(_) => Role::Malformed,
        }
    }

    /// The stack where a thread goes off the CPU: kept for its switch-out record.
    fn off_cpu_stack<O: RecordOutput + ?Sized>(&mut self, rec: &[u8], out: &mut O) {
        if let Some(sm) = &mut self.stacks {
            sm.off_cpu_sample(rec, &self.sample, out);
        }
    }

    /// A wakeup (issue 21): written when the wakee is tracked.
    fn wakeup<O: RecordOutput + ?Sized>(&mut self, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        match self.stacks.as_mut().and_then(|sm| sm.wakeup(rec, &self.sample, out)) {
            Some(r) => {
                self.describe(&r, out)?;
                self.write(r, out)
            }
            None => Ok(()),
        }
    }

    /// A `--item-class-from` hit: an `ItemClass` declaration and a `Label` marker.
    fn class_hit<O: RecordOutput + ?Sized>(&mut self, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        let mut recs = std::mem::take(&mut self.probe_records);
        if let Some(c) = &mut self.classes {
            c.convert(rec, &self.sample, &mut recs);
        }
        let res = self.record_all(&mut recs, out);
        self.probe_records = recs;
        res
    }

    /// A uprobe item boundary's hit: item markers.
    fn probe_hit<O: RecordOutput + ?Sized>(&mut self, role: ProbeRole, out: &mut O) -> Result<(), FormatError> {
        self.probe_hits += 1;
        let mut markers = std::mem::take(&mut self.probe_records);
        if let Some(m) = &mut self.probe_markers {
            m.convert(&self.sample, role, &mut markers);
        }
        let res = self.record_all(&mut markers, out);
        self.probe_records = markers;
        res
    }

    /// Hand each of `recs` to [`Emitter::record`] until one fails; `recs` ends empty.
    fn record_all<O: RecordOutput + ?Sized>(&mut self, recs: &mut Vec<Record>, out: &mut O) -> Result<(), FormatError> {
        let mut res = Ok(());
        for r in recs.drain(..) {
            if res.is_ok() {
                res = self.record(r, out);
            }
        }
        res
    }

    /// A sample of a sampling event (with its stack, when recorded).
    fn sample<O: RecordOutput + ?Sized>(&mut self, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        if let Some(sm) = &mut self.stacks {
            sm.sample(rec, &mut self.sample, out);
        }
        self.summary.samples += 1;
        self.note_time(self.sample.time);
        out.write_sample(&self.sample)
    }

    /// A side-band record; an MMAP2 of a file gets its build-id and is shown to the
    /// unwinder and the marker follower.
    fn side_band<O: RecordOutput + ?Sized>(&mut self, mut r: Record, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        if let Record::Mmap(m) = &mut r {
            if let Some(key) = mmap2_file(rec) {
                // Not a build-id, whatever the (leaked) misc flag says.
                m.build_id = None;
                self.build_id(m, Some(key), out)?;
                if let Some(sm) = &mut self.stacks {
                    sm.observe(&r, Some(key));
                }
                if let (Some(f), Record::Mmap(m)) = (&mut self.follow, &r) {
                    f.saw_mmap(m, key.0, key.1);
                }
                return self.write(r, out);
            }
        }
        self.record(r, out)
    }

    /// A context switch (recorded with stacks or off-CPU time).
    fn switch<O: RecordOutput + ?Sized>(&mut self, p: &Pending, rec: &[u8], out: &mut O) -> Result<(), FormatError> {
        match self.stacks.as_mut().and_then(|sm| sm.switch(rec, p.event(), p.cpu)) {
            Some(r) => {
                self.describe(&r, out)?;
                self.write(r, out)
            }
            // The idle task's switches (system-wide) and CPU-wide switches no
            // analysis needs (stacks::CauseFilter) are not kept.
            None => {
                self.summary.ignored += 1;
                Ok(())
            }
        }
    }

    /// Names of untracked threads `r` is about ([`StackMaker::describe`]), written before
    /// it; not shown to the cause filter (they do not make a thread tracked).
    fn describe<O: RecordOutput + ?Sized>(&mut self, r: &Record, out: &mut O) -> Result<(), FormatError> {
        let mut recs = std::mem::take(&mut self.probe_records);
        if let Some(sm) = &mut self.stacks {
            sm.describe(r, &mut recs);
        }
        let mut res = Ok(());
        for c in recs.drain(..) {
            if res.is_ok() {
                self.note_time(c.time());
                res = out.write_record(&c);
            }
        }
        self.probe_records = recs;
        res
    }

    /// Count and write one decoded or synthesized record.
    pub(super) fn record<O: RecordOutput + ?Sized>(&mut self, mut r: Record, out: &mut O) -> Result<(), FormatError> {
        let mut key = None;
        if let Record::Mmap(m) = &mut r {
            key = self.build_id(m, None, out)?;
        }
        if let Some(sm) = &mut self.stacks {
            sm.observe(&r, key);
        }
        self.write(r, out)
    }

    /// Count and write a record whose mapping (if any) already has its build-id.
    fn write<O: RecordOutput + ?Sized>(&mut self, mut r: Record, out: &mut O) -> Result<(), FormatError> {
        if let Some(sm) = &mut self.stacks {
            sm.observe_cause(&r);
        }
        match &mut r {
            Record::Lost(l) if l.kind == LossKind::RingFull => self.summary.lost_records += l.count,
            Record::Lost(l) if l.kind == LossKind::Samples => self.summary.lost_samples += l.count,
            Record::Lost(l) if l.kind == LossKind::Markers => self.summary.lost_markers += l.count,
            Record::Marker(_) => self.summary.markers += 1,
            Record::Throttle(t) if t.throttled => self.summary.throttled += 1,
            Record::Mmap(m) => self.jit.note_mmap(m),
            Record::Exit(t) if t.pid == t.tid => self.jit.note_exit(t.pid),
            _ => {}
        }
        // Probe events are not in the header's event list.
        match &mut r {
            Record::Lost(l) if l.event.is_some_and(|e| e >= self.probe_base) => l.event = None,
            Record::Throttle(t) if t.event.is_some_and(|e| e >= self.probe_base) => t.event = None,
            _ => {}
        }
        self.note_time(r.time());
        out.write_record(&r)
    }

    /// Attach the build-id to a file mapping. Each file (path, device, inode) is read
    /// once (ELF headers and notes only); the writer gets each (path, id) once. `key` is
    /// the file an MMAP2 record names; without it (/proc, MMAP, kernel) the path is
    /// `stat`ed once.
    fn build_id<O: RecordOutput + ?Sized>(
        &mut self,
        m: &mut Mmap,
        key: Option<FileKey>,
        out: &mut O,
    ) -> Result<Option<FileKey>, FormatError> {
        let kernel = m.path == "[kernel.kallsyms]";
        if !(m.path.starts_with('/') || kernel) {
            return Ok(None);
        }
        let in_root = || format!("/proc/{}/root{}", m.pid, m.path);
        let key = match key {
            Some(k) => k,
            None if kernel => (0, 0),
            None => {
                // A keyless lookup of a path already seen: reuse its first entry.
                if let Some(known) = self.build_ids.get(&m.path).and_then(|v| v.first().cloned()) {
                    if m.build_id.is_none() {
                        m.build_id = known.1;
                    }
                    return Ok(Some(known.0));
                }
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&m.path).or_else(|_| std::fs::metadata(in_root())).map_or((0, 0), |md| (md.dev(), md.ino()))
            }
        };
        if let Some(known) = self.build_ids.get(&m.path).and_then(|v| v.iter().find(|e| e.0 == key).cloned()) {
            if m.build_id.is_none() {
                m.build_id = known.1;
            }
            return Ok(Some(key));
        }
        let id = match &m.build_id {
            Some(id) => Some(id.clone()),
            None if kernel => buildid::kernel_build_id(),
            None if key == (0, 0) => buildid::read_build_id(Path::new(&m.path))
                .ok()
                .flatten()
                .or_else(|| buildid::read_build_id(Path::new(&in_root())).ok().flatten()),
            None => buildid::read_build_id_of(Path::new(&m.path), key.0, key.1)
                .ok()
                .flatten()
                .or_else(|| buildid::read_build_id_of(Path::new(&in_root()), key.0, key.1).ok().flatten()),
        };
        self.summary.build_id_paths_evicted += self.build_ids.insert(&m.path, key, id.clone());
        if let Some(id) = &id {
            let bytes = m.path.len() + id.len() + 32;
            if self.build_id_bytes_out + bytes <= MAX_TRACE_BUILD_ID_BYTES {
                self.build_id_bytes_out += bytes;
                out.add_build_id(BuildIdEntry { path: m.path.clone(), build_id: id.clone() })?;
            } else {
                self.summary.build_ids_not_stored += 1;
            }
        }
        m.build_id = id;
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19, finding 7: one file renamed through 150,000 long names, each mapped.
    /// Before, every path stayed in the cache (+620 MB). Now it holds at most
    /// MAX_BUILD_ID_PATH_BYTES of paths, evicts the least recently used and counts them; a
    /// path in use (libc, mapped by everyone) stays.
    #[test]
    fn finding_7_build_id_cache_is_bounded_lru() {
        let mut c = BuildIdCache::default();
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        c.insert(libc, (1, 1), Some(vec![1; 20]));
        let long = "x".repeat(3800);
        let mut evicted = 0;
        for i in 0..150_000u64 {
            evicted += c.insert(&format!("/tmp/{long}{i}"), (1, 2), None);
            if i % 100 == 0 {
                assert!(c.get(libc).is_some(), "a path in use is kept");
            }
            assert!(c.path_bytes() <= MAX_BUILD_ID_PATH_BYTES && c.len() <= MAX_BUILD_ID_PATHS);
        }
        assert!(evicted >= 150_000 - MAX_BUILD_ID_PATH_BYTES as u64 / 3800, "{evicted}");
        assert_eq!(c.len() as u64 + evicted, 150_001);
        for _ in 0..20 {
            c.insert(libc, (1, 9), None); // a path replaced again and again: bounded too
        }
        assert_eq!(c.get(libc).unwrap().len(), MAX_FILES_PER_PATH);
    }

    /// What the output is handed: build-id bytes only (records are dropped).
    #[derive(Default)]
    struct BuildIdBytes(usize, usize);
    impl tailprof_format::Sink for BuildIdBytes {
        fn handle_build_id(&mut self, e: &BuildIdEntry) {
            (self.0, self.1) = (self.0 + e.path.len() + e.build_id.len(), self.1 + 1);
        }
    }
    impl RecordOutput for BuildIdBytes {
        fn bytes_written(&self) -> u64 {
            0
        }
    }

    /// Issue 19, finding 7 for `record -a`: 20,000 mappings under distinct 3.8 KB paths.
    /// The trace's build-id table (kept in memory to the end of the recording) is handed
    /// at most MAX_TRACE_BUILD_ID_BYTES; the rest is counted, and the cache stays bounded.
    #[test]
    fn finding_7_record_a_build_id_table_is_bounded() {
        let mut e = Emitter::new(Decoder::new(vec![Layout::default()]));
        let mut out = BuildIdBytes::default();
        let long = "y".repeat(3800);
        let n = 20_000u64;
        for i in 0..n {
            let m = Mmap {
                pid: 1,
                tid: 1,
                start: i << 12,
                len: 4096,
                prot: 5,
                path: format!("/nonexistent/{long}{i}"),
                build_id: Some(vec![1; 20]),
                ..Mmap::default()
            };
            e.record(Record::Mmap(m), &mut out).unwrap();
        }
        assert!(out.0 <= MAX_TRACE_BUILD_ID_BYTES, "{} bytes handed out", out.0);
        assert_eq!(out.1 as u64 + e.summary.build_ids_not_stored, n, "every entry stored or counted");
        assert!(e.summary.build_ids_not_stored > 0);
        assert!(e.build_ids.path_bytes() <= MAX_BUILD_ID_PATH_BYTES);
    }
    use crate::parse::{sample_type as st, Layout};
    use tailprof_format::{TraceHeader, TraceWriter, WriterOptions};

    /// A raw record: header, then the 8-byte words, size filled in.
    fn rec(kind: u32, misc: u16, words: &[u64]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&((8 + 8 * words.len()) as u16).to_ne_bytes());
        for w in words {
            r.extend_from_slice(&w.to_ne_bytes());
        }
        r
    }

    fn pair(a: u32, b: u32) -> u64 {
        u64::from(a) | u64::from(b) << 32
    }

    const ID0: u64 = 700;
    const ID1: u64 = 701;

    /// The mixed stream one recording's rings could hold: per round and ring, plain
    /// samples (two layouts: with CPU and PERIOD, or without, `cpu_period`), callchain
    /// samples of a second event, COMM, LOST, THROTTLE, SWITCH (ignored), a sample of an
    /// unknown id (malformed at drain), a truncated one (malformed at emit), timestamps
    /// equal across rings, and records that arrive late for their round.
    fn stream(cpu_period: bool, rounds: usize) -> Vec<Vec<(u32, Vec<u8>)>> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let trailer = |w: &mut Vec<u64>, t: u64, cpu: u32, id: u64| w.extend([pair(5, 6), t, pair(cpu, 0), id]);
        let mut out = Vec::new();
        for round in 0..rounds as u64 {
            let mut recs = Vec::new();
            for cpu in 0..3u32 {
                let mut t = round * 100_000;
                for _ in 0..(next() % 300) {
                    t += 1000 * (next() % 3);
                    // Late: stamped before the previous round's limit.
                    let time = if next() % 50 == 0 { t.saturating_sub(250_000) } else { t };
                    let (pid, ip) = (100 + (next() % 3) as u32, 0x40_0000 + 16 * (next() % 40));
                    let misc = if next() % 4 == 0 { 1 } else { 2 };
                    let r = match next() % 40 {
                        0 => {
                            let mut w = vec![pair(pid, pid + 1), u64::from_ne_bytes(*b"worker\0\0")];
                            trailer(&mut w, time, cpu, ID0);
                            rec(3, 0, &w)
                        }
                        1 => {
                            let mut w = vec![ID0, 17];
                            trailer(&mut w, time, cpu, ID0);
                            rec(2, 0, &w)
                        }
                        2 => {
                            let mut w = vec![time, ID1, ID1];
                            trailer(&mut w, time, cpu, ID1);
                            rec(5, 0, &w)
                        }
                        3 => {
                            let mut w = vec![];
                            trailer(&mut w, time, cpu, ID0);
                            rec(14, 0x2000, &w)
                        }
                        4 => rec(9, misc, &[999, ip, pair(pid, pid), time, pair(cpu, 0), 10_000]),
                        5 => rec(9, misc, &[ID0, ip, pair(pid, pid), time]),
                        6..=9 => rec(9, misc, &[ID1, ip, pair(pid, pid), time, pair(cpu, 0), 5000, 3, 0xffff_ffff_ffff_fe00, ip, ip + 8]),
                        _ if cpu_period => rec(9, misc, &[ID0, ip, pair(pid, pid + 1), time, pair(cpu, 0), 10_000]),
                        _ => rec(9, misc, &[ID0, ip, pair(pid, pid + 1), time]),
                    };
                    recs.push((cpu, r));
                }
            }
            out.push(recs);
        }
        out
    }

    /// Runs `rounds` through the queue and emitter as the recorder's rounds do (queue every
    /// ring, write up to the previous round's start in small batches, the next round's
    /// first records drained between batches); returns the trace bytes and the summary.
    fn replay(rounds: &[Vec<(u32, Vec<u8>)>], cpu_period: bool, plain: bool) -> (Vec<u8>, RecordSummary, u64) {
        let sample_type = st::IDENTIFIER | st::IP | st::TID | st::TIME | if cpu_period { st::CPU | st::PERIOD } else { 0 };
        let l0 = Layout { sample_type, sample_id_all: true, default_period: 10_000, ..Layout::default() };
        let base = st::IDENTIFIER | st::IP | st::TID | st::TIME | st::CPU | st::PERIOD;
        let l1 = Layout { sample_type: base | st::CALLCHAIN, sample_id_all: true, ..Layout::default() };
        let mut d = Decoder::new(vec![l0, l1]);
        d.add_id(ID0, 0);
        d.add_id(ID1, 1);
        if !plain {
            d.keep_raw(0);
            d.keep_raw(1);
        }
        let mut e = Emitter::new(d);
        let opts = WriterOptions { max_records: 500, ..WriterOptions::default() };
        let mut out = TraceWriter::with_options(Vec::new(), &TraceHeader::default(), opts).unwrap();
        let mut q = RoundQueue::new();
        let (mut max_seen, mut plain_seen) = (0u64, 0u64);
        let mut taken = vec![0usize; rounds.len()];
        for (k, recs) in rounds.iter().enumerate() {
            for (cpu, r) in &recs[taken[k]..] {
                e.queue(&mut q, &mut max_seen, false, *cpu, r);
            }
            taken[k] = recs.len();
            let limit = (k as u64).saturating_sub(1) * 100_000;
            let last = k + 1 == rounds.len();
            loop {
                let more = q
                    .emit_some(if last { None } else { Some(limit) }, 7, |p, r| {
                        plain_seen += p.plain().is_some() as u64;
                        e.write_queued(p, r, &mut out)
                    })
                    .unwrap();
                if !more {
                    break;
                }
                // A mid-round drain: a few of the next round's records (all later).
                if let Some(nx) = rounds.get(k + 1) {
                    let upto = (taken[k + 1] + 2).min(nx.len());
                    for (cpu, r) in &nx[taken[k + 1]..upto] {
                        e.queue(&mut q, &mut max_seen, false, *cpu, r);
                    }
                    taken[k + 1] = upto;
                }
            }
            out.end_round().unwrap();
        }
        assert!(q.is_empty());
        let (bytes, _) = out.finish_into_inner(None).unwrap();
        (bytes, e.summary, plain_seen)
    }

    /// Plain samples decoded at drain give the trace, byte for byte, that decoding every
    /// record at emit gives (the path before them), for both plain layouts; and the same
    /// counts, malformed and out-of-order records included.
    #[test]
    fn plain_samples_write_the_same_trace_as_raw_records() {
        for cpu_period in [true, false] {
            let rounds = stream(cpu_period, 40);
            let (fast, fs, plain) = replay(&rounds, cpu_period, true);
            let (slow, ss, none) = replay(&rounds, cpu_period, false);
            assert_eq!(none, 0);
            assert!(plain > 3000, "{plain} plain samples");
            assert!(fs.samples > plain && fs.malformed > 10 && fs.out_of_order > 10 && fs.ignored > 10, "{fs:?}");
            assert!(fs.lost_records > 0 && fs.throttled > 0);
            assert_eq!(fs, ss);
            assert!(fast == slow, "trace bytes differ (cpu_period {cpu_period})");
        }
    }
}
