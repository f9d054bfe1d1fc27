//! Between the round queue and the writer: decode raw records, turn uprobe hits into
//! markers, count everything for the [`RecordSummary`], attach build-ids to mappings.

use std::collections::HashMap;
use std::path::Path;

use tailprof_format::{BuildIdEntry, FormatError, LossKind, Mmap, Record, Sample};

use super::{RecordOutput, RecordSummary};
use crate::buildid;
use crate::parse::{Decoded, Decoder};
use crate::ring::Pending;
use crate::uprobe::{MarkerMaker, ProbeRole};

/// Decoding, counting, build-ids: everything between the queue and the writer.
pub(super) struct Emitter {
    pub(super) decoder: Decoder,
    pub(super) sample: Sample,
    pub(super) s: RecordSummary,
    pub(super) last_time: u64,
    /// Paths whose build-id was looked up (and given to the writer when found).
    pub(super) build_ids: HashMap<String, Option<Vec<u8>>>,
    /// Events with this index or higher are the uprobe item boundaries (begin, end).
    pub(super) probe_base: u16,
    pub(super) maker: Option<MarkerMaker>,
    /// Reused buffer for the records one probe hit becomes.
    pub(super) conv: Vec<Record>,
}

impl Emitter {
    fn note_time(&mut self, t: u64) {
        if t != 0 && t < self.last_time {
            self.s.out_of_order += 1;
        }
        self.last_time = self.last_time.max(t);
    }

    /// Decode and write one raw record.
    pub(super) fn raw<O: RecordOutput + ?Sized>(
        &mut self,
        p: &Pending,
        rec: &[u8],
        out: &mut O,
    ) -> Result<(), FormatError> {
        match self.decoder.decode(rec, p.event(), p.cpu, &mut self.sample) {
            Ok(Decoded::Sample) if self.sample.event >= self.probe_base => {
                let role = if self.sample.event == self.probe_base {
                    ProbeRole::Begin
                } else {
                    ProbeRole::End
                };
                let mut conv = std::mem::take(&mut self.conv);
                if let Some(m) = &mut self.maker {
                    m.convert(&self.sample, role, &mut conv);
                }
                let mut res = Ok(());
                for r in conv.drain(..) {
                    if res.is_ok() {
                        res = self.record(r, out);
                    }
                }
                self.conv = conv;
                res
            }
            Ok(Decoded::Sample) => {
                self.s.samples += 1;
                self.note_time(self.sample.time);
                out.write_sample(&self.sample)
            }
            Ok(Decoded::Record(r)) => self.record(r, out),
            Ok(Decoded::Ignored(_)) => {
                self.s.ignored += 1;
                Ok(())
            }
            Err(_) => {
                self.s.malformed += 1;
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
        match &mut r {
            Record::Lost(l) if l.kind == LossKind::RingFull => self.s.lost_records += l.count,
            Record::Lost(l) if l.kind == LossKind::Samples => self.s.lost_samples += l.count,
            Record::Lost(l) if l.kind == LossKind::Markers => self.s.lost_markers += l.count,
            Record::Marker(_) => self.s.markers += 1,
            Record::Throttle(t) if t.throttled => self.s.throttled += 1,
            Record::Mmap(m) => self.build_id(m, out)?,
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

    /// Attach the build-id to a file mapping, giving the writer each path's id once.
    fn build_id<O: RecordOutput + ?Sized>(
        &mut self,
        m: &mut Mmap,
        out: &mut O,
    ) -> Result<(), FormatError> {
        let kernel = m.path == "[kernel.kallsyms]";
        if !(m.path.starts_with('/') || kernel) {
            return Ok(());
        }
        if let Some(known) = self.build_ids.get(&m.path) {
            if m.build_id.is_none() {
                m.build_id = known.clone();
            }
            return Ok(());
        }
        let id = match &m.build_id {
            Some(id) => Some(id.clone()),
            None if kernel => buildid::kernel_build_id(),
            None => buildid::read_build_id(Path::new(&m.path))
                .ok()
                .flatten()
                .or_else(|| {
                    buildid::read_build_id(Path::new(&format!("/proc/{}/root{}", m.pid, m.path)))
                        .ok()
                        .flatten()
                }),
        };
        self.build_ids.insert(m.path.clone(), id.clone());
        if let Some(id) = &id {
            out.add_build_id(BuildIdEntry {
                path: m.path.clone(),
                build_id: id.clone(),
            })?;
        }
        m.build_id = id;
        Ok(())
    }
}
