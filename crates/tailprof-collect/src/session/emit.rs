//! Between the round queue and the writer: decode raw records, turn uprobe hits into
//! markers, count everything for the [`RecordSummary`], attach build-ids to mappings.

use std::collections::HashMap;
use std::path::Path;

use tailprof_format::{BuildIdEntry, FormatError, LossKind, Mmap, Record, Sample};

use super::{RecordOutput, RecordSummary};
use crate::buildid;
use crate::parse::{Decoded, Decoder};
use crate::ring::Pending;
use crate::stacks::StackMaker;
use crate::uprobe::{MarkerMaker, ProbeRole};

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

/// Decoding, counting, build-ids: everything between the queue and the writer.
pub(super) struct Emitter {
    pub(super) decoder: Decoder,
    /// Reused for every decoded sample.
    pub(super) sample: Sample,
    /// What was written and lost so far; [`super::Recorder::run`] returns it.
    pub(super) summary: RecordSummary,
    /// Latest timestamp written (to count records written out of order).
    pub(super) last_time: u64,
    /// Build-ids looked up so far, by path and then `(device, inode)` (`(0, 0)` when
    /// neither the record nor `stat` told): each file is read once.
    pub(super) build_ids: HashMap<String, Vec<(FileKey, Option<BuildId>)>>,
    /// Events with this index or higher are the uprobe item boundaries (begin, end).
    pub(super) probe_base: u16,
    /// Turns uprobe hits into item markers (with uprobe item boundaries only).
    pub(super) probe_markers: Option<MarkerMaker>,
    /// Reused buffer for the records one probe hit becomes.
    pub(super) probe_records: Vec<Record>,
    /// Call stacks, context switches and off-CPU stacks (`None`: not recorded).
    pub(super) stacks: Option<StackMaker>,
    /// `--item-class-from` probes: their hits become class labels (`Label` markers).
    pub(super) classes: Option<super::items::ClassProbes>,
    /// `-a`: executable mappings are shown to it, to attach marked processes that start
    /// while recording (`None`: other targets).
    pub(super) follow: Option<super::items::MarkerFollower>,
}

impl Emitter {
    fn note_time(&mut self, t: u64) {
        if t != 0 && t < self.last_time {
            self.summary.out_of_order += 1;
        }
        self.last_time = self.last_time.max(t);
    }

    /// Decode one raw ring record and write what it becomes: a sample, a side-band
    /// record (with its mapping's build-id), item markers (a uprobe hit), or only a count
    /// (a record type the recorder does not keep, or a malformed record).
    pub(super) fn decode_and_write<O: RecordOutput + ?Sized>(
        &mut self,
        p: &Pending,
        rec: &[u8],
        out: &mut O,
    ) -> Result<(), FormatError> {
        match self.decoder.decode(rec, p.event(), p.cpu, &mut self.sample) {
            Ok(Decoded::Sample) if self.stacks.as_ref().is_some_and(|s| s.off_cpu_event == self.sample.event) => {
                // The stack where a thread goes off the CPU: kept for its switch-out record.
                if let Some(sm) = &mut self.stacks {
                    sm.off_cpu_sample(rec, &self.sample, out);
                }
                Ok(())
            }
            Ok(Decoded::Sample) if self.classes.as_ref().is_some_and(|c| c.owns(self.sample.event)) => {
                let mut recs = std::mem::take(&mut self.probe_records);
                if let Some(c) = &mut self.classes {
                    c.convert(rec, &self.sample, &mut recs);
                }
                let mut res = Ok(());
                for r in recs.drain(..) {
                    if res.is_ok() {
                        res = self.record(r, out);
                    }
                }
                self.probe_records = recs;
                res
            }
            Ok(Decoded::Sample) if self.sample.event >= self.probe_base => {
                let role = if self.sample.event == self.probe_base {
                    ProbeRole::Begin
                } else {
                    ProbeRole::End
                };
                let mut markers = std::mem::take(&mut self.probe_records);
                if let Some(m) = &mut self.probe_markers {
                    m.convert(&self.sample, role, &mut markers);
                }
                let mut res = Ok(());
                for r in markers.drain(..) {
                    if res.is_ok() {
                        res = self.record(r, out);
                    }
                }
                self.probe_records = markers;
                res
            }
            Ok(Decoded::Sample) => {
                if let Some(sm) = &mut self.stacks {
                    sm.sample(rec, &mut self.sample, out);
                }
                self.summary.samples += 1;
                self.note_time(self.sample.time);
                out.write_sample(&self.sample)
            }
            Ok(Decoded::Record(mut r)) => {
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
            Ok(Decoded::Ignored(kind))
                if self.stacks.is_some()
                    && (kind == tailprof_perf_abi::record_type::SWITCH
                        || kind == tailprof_perf_abi::record_type::SWITCH_CPU_WIDE) =>
            {
                match self.stacks.as_mut().and_then(|sm| sm.switch(rec, p.event(), p.cpu)) {
                    Some(r) => self.write(r, out),
                    // The idle task's switches (system-wide) are not kept.
                    None => {
                        self.summary.ignored += 1;
                        Ok(())
                    }
                }
            }
            Ok(Decoded::Ignored(_)) => {
                self.summary.ignored += 1;
                Ok(())
            }
            Err(_) => {
                self.summary.malformed += 1;
                Ok(())
            }
        }
    }

    /// Count and write one decoded or synthesized record.
    pub(super) fn record<O: RecordOutput + ?Sized>(
        &mut self,
        mut r: Record,
        out: &mut O,
    ) -> Result<(), FormatError> {
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
        match &mut r {
            Record::Lost(l) if l.kind == LossKind::RingFull => self.summary.lost_records += l.count,
            Record::Lost(l) if l.kind == LossKind::Samples => self.summary.lost_samples += l.count,
            Record::Lost(l) if l.kind == LossKind::Markers => self.summary.lost_markers += l.count,
            Record::Marker(_) => self.summary.markers += 1,
            Record::Throttle(t) if t.throttled => self.summary.throttled += 1,
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
                if let Some(known) = self.build_ids.get(&m.path).and_then(|v| v.first()) {
                    if m.build_id.is_none() {
                        m.build_id = known.1.clone();
                    }
                    return Ok(Some(known.0));
                }
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&m.path)
                    .or_else(|_| std::fs::metadata(in_root()))
                    .map_or((0, 0), |md| (md.dev(), md.ino()))
            }
        };
        if let Some(known) = self.build_ids.get(&m.path).and_then(|v| v.iter().find(|e| e.0 == key)) {
            if m.build_id.is_none() {
                m.build_id = known.1.clone();
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
        self.build_ids.entry(m.path.clone()).or_default().push((key, id.clone()));
        if let Some(id) = &id {
            out.add_build_id(BuildIdEntry { path: m.path.clone(), build_id: id.clone() })?;
        }
        m.build_id = id;
        Ok(Some(key))
    }
}
