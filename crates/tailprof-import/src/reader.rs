//! [`PerfDataReader`]: a pull-style converter from perf.data records to [`Record`]s.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use linux_perf_data::linux_perf_event_reader::{constants::PERF_RECORD_MISC_BUILD_ID_SIZE, CommonData, RawEventRecord, RecordType};
use linux_perf_data::{Endianness, PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter, RawUserRecord, UserRecordType};
use tailprof_format::{
    BuildIdEntry, Comm, CpuMode, LossKind, Lost, Mmap, Record, Sample, Switch, SwitchKind, Task, Throttle, TraceHeader, Wakeup,
};

use tailprof_perf_abi::{Endian, RecordHeader, SampleLayout, SideBand, SwitchDirection, HEADER_LEN};

use crate::header::{build_header, event_info, header_build_ids, EventInfo};
use crate::sample::{decode_sample, has_fields_after_data_src};
use crate::source::{prepare, SourceReader, StreamWarnings};
use crate::stacks::StackFields;
use crate::{ImportError, ImportOptions, ImportSummary, UNKNOWN_CPU};

/// PERF_RECORD_HEADER_BUILD_ID: build-ids in pipe-mode streams.
const PERF_RECORD_HEADER_BUILD_ID: u32 = 67;
/// How many individual warnings of one kind to keep before only counting.
const MAX_DETAILED_WARNINGS: u64 = 5;

/// Reads a perf.data file (file or pipe mode, with or without zstd-compressed records)
/// and hands out its records as tailprof [`Record`]s, in non-decreasing time order.
///
/// Records that carry no time (e.g. MMAP/COMM of recordings without `sample_id_all`)
/// get the time of the record before them, or 0 at the start, so the order invariant of
/// the record model holds; they keep their place in the stream.
///
/// ```no_run
/// # fn main() -> Result<(), tailprof_import::ImportError> {
/// let mut r = tailprof_import::PerfDataReader::open("perf.data".as_ref(), &Default::default())?;
/// while let Some(rec) = r.next_record()? {
///     println!("{rec:?}");
/// }
/// println!("{:?}", r.finish());
/// # Ok(()) }
/// ```
pub struct PerfDataReader {
    path: PathBuf,
    perf_file: PerfFile,
    iter: PerfRecordIter<SourceReader>,
    conv: Converter,
    position: Arc<AtomicU64>,
    file_len: u64,
    done: bool,
    /// Warnings of the framing guard (a clamped AUXTRACE size, ...).
    stream_warnings: StreamWarnings,
}

/// Everything the record conversion needs, apart from the parser (so that a record
/// borrowed from the parser can be converted while the parser is borrowed).
struct Converter {
    events: Vec<EventInfo>,
    id_to_event: HashMap<u64, u16>,
    header: TraceHeader,
    build_ids: Vec<BuildIdEntry>,
    build_id_paths: HashSet<String>,
    summary: ImportSummary,
    last_time: u64,
    /// Samples with bytes their sample_type does not explain.
    trailing: u64,
    /// MMAP2 records flagged as carrying a build-id that held device/inode data.
    quirk_mmap2: u64,
    /// The `sched:sched_waking` event's index, and the wakee of its last sample (its
    /// sample becomes a `Wakeup` once its stack is made, [`PerfDataReader::finish_record`]).
    waking_event: Option<u16>,
    wakee: Option<u32>,
    /// The stack fields of the sample returned last.
    stack_fields: StackFields,
}

impl PerfDataReader {
    /// Open and check a perf.data file and read its header.
    pub fn open(path: &Path, opts: &ImportOptions) -> Result<Self, ImportError> {
        let io_err = |e| ImportError::Io { path: path.to_path_buf(), source: e };
        let mut file = File::open(path).map_err(io_err)?;
        let prepared = prepare(path, &mut file, opts.recover_truncated)?;
        let (source, position, stream_warnings) =
            SourceReader::new(file, prepared.overlay, prepared.records, prepared.big_endian).map_err(io_err)?;
        let parsed = catch_unwind(AssertUnwindSafe(|| {
            if prepared.pipe {
                PerfFileReader::parse_pipe(source)
            } else {
                PerfFileReader::parse_file(source)
            }
        }));
        let pos = position.load(Ordering::Relaxed);
        let PerfFileReader { perf_file, record_iter } = match parsed {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(map_parse_error(path, e, pos)),
            Err(_) => return Err(internal(path, "the perf.data parser failed on this file's header")),
        };
        let attrs = perf_file.event_attributes();
        if attrs.len() > usize::from(u16::MAX) {
            return Err(ImportError::Unsupported {
                path: path.to_path_buf(),
                detail: format!("{} events (at most {} are supported)", attrs.len(), u16::MAX),
            });
        }
        let big_endian = perf_file.endian() == Endianness::BigEndian;
        let mut warnings = prepared.warnings;
        let mut header = build_header(&perf_file, prepared.pipe, &mut warnings);
        let waking_event = header.events.iter().position(|e| e.name == "sched:sched_waking").and_then(|i| u16::try_from(i).ok());
        if waking_event.is_some() {
            // Wakeups for the causes analysis (docs/FORMAT.md `causes`).
            header.extra.insert("causes".into(), "sched_waking".into());
        }
        let build_ids = header_build_ids(&perf_file, &mut warnings);
        let mut id_to_event = HashMap::new();
        for (i, a) in attrs.iter().enumerate() {
            for id in &a.event_ids {
                id_to_event.insert(*id, i as u16);
            }
        }
        let summary = ImportSummary { events: attrs.len(), warnings, ..Default::default() };
        let conv = Converter {
            events: attrs.iter().map(|a| event_info(a, big_endian)).collect(),
            id_to_event,
            build_id_paths: build_ids.iter().map(|b| b.path.clone()).collect(),
            build_ids,
            header,
            summary,
            last_time: 0,
            trailing: 0,
            quirk_mmap2: 0,
            waking_event,
            wakee: None,
            stack_fields: StackFields::default(),
        };
        Ok(PerfDataReader {
            path: path.to_path_buf(),
            perf_file,
            iter: record_iter,
            conv,
            position,
            file_len: prepared.file_len,
            done: false,
            stream_warnings,
        })
    }

    /// The trace header made from the perf.data header (events, clock, host facts).
    pub fn header(&self) -> &TraceHeader {
        &self.conv.header
    }

    /// Build-ids known so far: those of the perf.data header, plus any found in the
    /// stream of a pipe-mode file (complete once [`next_record`](Self::next_record)
    /// has returned `None`).
    pub fn build_ids(&self) -> &[BuildIdEntry] {
        &self.conv.build_ids
    }

    /// Bytes of the input consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.position.load(Ordering::Relaxed).min(self.file_len)
    }

    /// Size of the input file.
    pub fn bytes_total(&self) -> u64 {
        self.file_len
    }

    /// Counts so far.
    pub fn summary(&self) -> &ImportSummary {
        &self.conv.summary
    }

    /// The next record, `Ok(None)` at the end. After an error, the reader is finished.
    /// A record as it is written, after its stack was made: a `sched:sched_waking` sample
    /// becomes a [`Wakeup`] (waker = the sample's task, its stack; wakee = the raw
    /// record's `pid`).
    pub fn finish_record(&mut self, r: Record) -> Record {
        match r {
            Record::Sample(s) if Some(s.event) == self.conv.waking_event => match self.conv.wakee.take() {
                Some(wakee_tid) => {
                    self.conv.summary.samples = self.conv.summary.samples.saturating_sub(1);
                    self.conv.summary.wakeups += 1;
                    Record::Wakeup(Wakeup {
                        time: s.time,
                        pid: s.pid,
                        tid: s.tid,
                        cpu: s.cpu,
                        wakee_tid,
                        stack: s.stack,
                        stack_status: s.stack_status,
                    })
                }
                None => Record::Sample(s),
            },
            r => r,
        }
    }

    pub fn next_record(&mut self) -> Result<Option<Record>, ImportError> {
        if self.done {
            return Ok(None);
        }
        let result = catch_unwind(AssertUnwindSafe(|| self.next_inner()));
        let result = result.unwrap_or_else(|_| Err(internal(&self.path, "the perf.data parser failed on a record")));
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
            if let Ok(mut w) = self.stream_warnings.lock() {
                self.conv.summary.warnings.append(&mut w);
            }
            if result.is_ok() {
                self.conv.finish_warnings();
            }
        }
        result
    }

    fn next_inner(&mut self) -> Result<Option<Record>, ImportError> {
        loop {
            let rec = match self.iter.next_record(&mut self.perf_file) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(None),
                Err(e) => {
                    let pos = self.position.load(Ordering::Relaxed);
                    return Err(map_parse_error(&self.path, e, pos));
                }
            };
            let out = match rec {
                PerfFileRecord::EventRecord { attr_index, record } => self.conv.event(attr_index, &record),
                PerfFileRecord::UserRecord(u) => {
                    self.conv.user(&u);
                    None
                }
            };
            if out.is_some() {
                return Ok(out);
            }
        }
    }

    /// The stack fields (callchain, user registers and stack copy, branch stack) of the
    /// sample [`next_record`](Self::next_record) returned last, for
    /// [`crate::stacks::ImportStacks::process_with`] (which takes them: a record
    /// without a sample leaves them empty).
    pub fn stack_fields(&mut self) -> &mut StackFields {
        &mut self.conv.stack_fields
    }

    /// The final counts (warnings included once [`next_record`](Self::next_record) has
    /// returned `None`).
    pub fn finish(self) -> ImportSummary {
        self.conv.summary
    }

    pub(crate) fn into_parts(self) -> (TraceHeader, Vec<BuildIdEntry>, ImportSummary) {
        (self.conv.header, self.conv.build_ids, self.conv.summary)
    }
}

impl Iterator for PerfDataReader {
    type Item = Result<Record, ImportError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn internal(path: &Path, what: &str) -> ImportError {
    ImportError::Corrupt { path: path.to_path_buf(), detail: format!("{what} (internal parser panic; please report)") }
}

/// Turn a `linux-perf-data` error into a one-line [`ImportError`]. `pos` is the reader's
/// byte position when the error happened.
fn map_parse_error(path: &Path, e: linux_perf_data::Error, pos: u64) -> ImportError {
    use linux_perf_data::{Error as E, ReadError};
    let path_buf = path.to_path_buf();
    let corrupt = |detail: String| ImportError::Corrupt { path: path_buf.clone(), detail };
    let truncated = |detail: String| ImportError::Truncated { path: path_buf.clone(), detail };
    match e {
        E::InvalidPerfEventSize => {
            let at = pos.saturating_sub(8);
            match record_size_at(path, at) {
                Some(size) => corrupt(format!("the record at byte {at} has size {size}, smaller than its 8-byte header")),
                None => corrupt(format!("a record near byte {at} has a size smaller than its 8-byte header")),
            }
        }
        E::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            truncated(format!("the file ends inside a record (near byte {pos})"))
        }
        E::IoError(io) if io.kind() == std::io::ErrorKind::InvalidData || io.kind() == std::io::ErrorKind::InvalidInput => {
            corrupt(format!("{io} (near byte {pos})"))
        }
        E::IoError(io) => ImportError::Io { path: path_buf.clone(), source: io },
        E::Read(ReadError::PerfEventData) => truncated(format!("a record extends past the end of the data (near byte {pos})")),
        E::Read(r) => corrupt(format!("{r}")),
        E::UnrecognizedMagicValue(m) => {
            ImportError::NotPerfData { path: path_buf.clone(), found: format!("magic {:?}", String::from_utf8_lossy(&m)) }
        }
        E::NoAttributes => corrupt("the file describes no events".into()),
        E::NoIdentifierDespiteMultiEvent(i) => ImportError::Unsupported {
            path: path_buf.clone(),
            detail: format!("several events, but event {i} has no PERF_SAMPLE_IDENTIFIER, so records cannot be attributed to events"),
        },
        E::InconsistentSampleIdAllWithMultiEvent(i) => ImportError::Unsupported {
            path: path_buf.clone(),
            detail: format!("several events that disagree about sample_id_all (event {i})"),
        },
        other => corrupt(other.to_string()),
    }
}

/// The `size` field of the record header at `at`, read afresh (for error messages).
fn record_size_at(path: &Path, at: u64) -> Option<u16> {
    let mut f = File::open(path).ok()?;
    f.seek(SeekFrom::Start(at)).ok()?;
    let mut h = [0u8; 8];
    f.read_exact(&mut h).ok()?;
    let size = u16::from_le_bytes([h[6], h[7]]);
    (size < 8).then_some(size).or_else(|| {
        let be = u16::from_be_bytes([h[6], h[7]]);
        (be < 8).then_some(be)
    })
}

fn type_name(t: RecordType) -> String {
    let s = format!("{t:?}");
    if s.starts_with("Unknown") || s.starts_with("User type") {
        format!("type {}", t.0)
    } else {
        s
    }
}

/// perf's names for its user record types (tools/perf/util/event.h).
fn user_type_name(t: UserRecordType) -> String {
    const NAMES: [&str; 20] = [
        "HEADER_ATTR",
        "HEADER_EVENT_TYPE",
        "HEADER_TRACING_DATA",
        "HEADER_BUILD_ID",
        "FINISHED_ROUND",
        "ID_INDEX",
        "AUXTRACE_INFO",
        "AUXTRACE",
        "AUXTRACE_ERROR",
        "THREAD_MAP",
        "CPU_MAP",
        "STAT_CONFIG",
        "STAT",
        "STAT_ROUND",
        "EVENT_UPDATE",
        "TIME_CONV",
        "HEADER_FEATURE",
        "COMPRESSED",
        "FINISHED_INIT",
        "COMPRESSED2",
    ];
    let n = t.record_type().0;
    match n.checked_sub(64).and_then(|i| NAMES.get(i as usize)) {
        Some(name) => name.to_string(),
        None => {
            let s = format!("{t:?}");
            if s.starts_with("Unknown") {
                format!("type {n}")
            } else {
                s.trim_matches('"').to_string()
            }
        }
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Converter {
    fn skip(&mut self, name: String) {
        self.summary.skipped_records += 1;
        *self.summary.skipped_by_type.entry(name).or_insert(0) += 1;
    }

    fn malformed(&mut self, what: &str, detail: String) {
        self.summary.malformed_records += 1;
        if self.summary.malformed_records <= MAX_DETAILED_WARNINGS {
            self.summary.warnings.push(format!("skipped a malformed {what} record: {detail}"));
        }
    }

    fn finish_warnings(&mut self) {
        let malformed = self.summary.malformed_records;
        if malformed > MAX_DETAILED_WARNINGS {
            self.summary
                .warnings
                .push(format!("skipped {malformed} malformed records in all (details shown for the first {MAX_DETAILED_WARNINGS})"));
        }
        if self.trailing > 0 {
            self.summary.warnings.push(format!(
                "{} samples had bytes after the fields tailprof decodes that their event's sample_type does not explain",
                self.trailing
            ));
        }
        if self.quirk_mmap2 > 0 {
            self.summary.warnings.push(format!(
                "{} MMAP2 records had the build-id flag set but carried device/inode data (kernel quirk while another recorder used build_id); read as device/inode",
                self.quirk_mmap2
            ));
        }
        if self.summary.time_clamped > 0 {
            self.summary.warnings.push(format!(
                "{} records were out of time order even after sorting; their time was raised to the previous record's",
                self.summary.time_clamped
            ));
        }
    }

    /// The time a record is delivered with: its own (the one it was sorted by) when it
    /// keeps the order, else the previous record's.
    fn stamp(&mut self, t: Option<u64>) -> u64 {
        match t {
            Some(t) if t >= self.last_time => {
                self.last_time = t;
                t
            }
            Some(_) => {
                self.summary.time_clamped += 1;
                self.last_time
            }
            None => self.last_time,
        }
    }

    fn event_of_id(&self, id: Option<u64>) -> Option<u16> {
        match id.and_then(|id| self.id_to_event.get(&id)) {
            Some(&e) => Some(e),
            None if self.events.len() == 1 => Some(0),
            None => None,
        }
    }

    fn event(&mut self, attr_index: usize, rec: &RawEventRecord) -> Option<Record> {
        let t = rec.timestamp();
        let rtype = rec.record_type;
        if rtype == RecordType::SAMPLE {
            return self.sample(attr_index, rec, t);
        }
        let common = rec.common_data().unwrap_or_default();
        let cpu = common.cpu.unwrap_or(UNKNOWN_CPU);
        // The record's body is decoded by the workspace's one decoder (tailprof_perf_abi);
        // `linux-perf-data` framed and sorted it and read its sample_id (`common`, `t`).
        let endian = if rec.parse_info.endian == Endianness::BigEndian { Endian::Big } else { Endian::Little };
        let body = rec.data.as_slice();
        let mut raw = Vec::with_capacity(HEADER_LEN + body.len());
        RecordHeader { kind: rtype.0, misc: rec.misc, size: 0 }.encode(endian, &mut raw);
        raw.extend_from_slice(&body);
        // The body is read without its sample_id (strings end at their NUL).
        let abi = SampleLayout::new(0);
        if rtype == RecordType::SWITCH || rtype == RecordType::SWITCH_CPU_WIDE {
            return self.switch(rtype, &abi, &raw, endian, &common, cpu, t);
        }
        let sb = match abi.decode_side_band(&raw, endian) {
            Ok(Some((sb, _))) => sb,
            Ok(None) => {
                self.skip(type_name(rtype));
                return None;
            }
            Err(e) => {
                self.malformed(&type_name(rtype), e.to_string());
                return None;
            }
        };
        let r = match sb {
            SideBand::Mmap(m) => {
                if m.bogus_build_id_flag {
                    // A kernel quirk: the flag is set, but the union holds maj/min/ino.
                    self.quirk_mmap2 += 1;
                }
                Record::Mmap(Mmap {
                    time: self.stamp(t),
                    pid: m.pid,
                    tid: m.tid,
                    start: m.start,
                    len: m.len,
                    pgoff: m.pgoff,
                    prot: m.prot,
                    cpumode: CpuMode::from_perf_misc(rec.misc),
                    path: lossy(m.filename),
                    build_id: m.build_id.map(<[u8]>::to_vec),
                })
            }
            SideBand::Comm { pid, tid, exec, comm } => Record::Comm(Comm { time: self.stamp(t), pid, tid, exec, comm: lossy(comm) }),
            SideBand::Fork(f) | SideBand::Exit(f) => {
                let task = Task { time: self.stamp(t), pid: f.pid, ppid: f.ppid, tid: f.tid, ptid: f.ptid };
                if rtype == RecordType::FORK {
                    Record::Fork(task)
                } else {
                    Record::Exit(task)
                }
            }
            SideBand::Lost { id, count } => {
                self.summary.lost_events += 1;
                self.summary.lost_records += count;
                Record::Lost(Lost { time: self.stamp(t), cpu, event: self.event_of_id(Some(id)), kind: LossKind::RingFull, count })
            }
            SideBand::Throttle { throttled, id, .. } => {
                self.summary.throttles += 1;
                Record::Throttle(Throttle { time: self.stamp(t), cpu, event: self.event_of_id(Some(id)), throttled })
            }
            SideBand::LostSamples { count } => {
                self.summary.lost_events += 1;
                self.summary.lost_samples += count;
                let event = self.event_of_id(common.id).or(u16::try_from(attr_index).ok());
                Record::Lost(Lost { time: self.stamp(t), cpu, event, kind: LossKind::Samples, count })
            }
        };
        match r {
            Record::Lost(_) | Record::Throttle(_) => {}
            Record::Switch(_) => self.summary.switches += 1,
            _ => self.summary.side_band += 1,
        }
        Some(r)
    }

    /// A SWITCH / SWITCH_CPU_WIDE record (decoded by tailprof_perf_abi).
    #[allow(clippy::too_many_arguments)]
    fn switch(
        &mut self,
        rtype: RecordType,
        abi: &SampleLayout,
        raw: &[u8],
        endian: Endian,
        common: &CommonData,
        cpu: u32,
        t: Option<u64>,
    ) -> Option<Record> {
        let sw = match abi.decode_switch(raw, endian) {
            Ok(sw) => sw,
            Err(e) => {
                self.malformed(&type_name(rtype), e.to_string());
                return None;
            }
        };
        let (pid, tid) = (common.pid.unwrap_or(0) as u32, common.tid.unwrap_or(0) as u32);
        if tid == 0 {
            // The idle task's switches are not kept (as the recorder does).
            self.skip(type_name(rtype));
            return None;
        }
        let kind = match sw.direction {
            SwitchDirection::In => SwitchKind::In,
            SwitchDirection::OutPreempted => SwitchKind::OutPreempted,
            SwitchDirection::OutBlocked => SwitchKind::OutBlocked,
        };
        self.summary.switches += 1;
        Some(Record::Switch(Switch { time: self.stamp(t), pid, tid, cpu, kind, next_prev: sw.next_prev, ..Default::default() }))
    }

    fn sample(&mut self, attr_index: usize, rec: &RawEventRecord, t: Option<u64>) -> Option<Record> {
        let Some(info) = self.events.get(attr_index).copied() else {
            self.malformed("SAMPLE", format!("refers to event {attr_index}, which the file does not describe"));
            return None;
        };
        let body = rec.data.as_slice();
        let d = match decode_sample(&body, &info.layout, info.endian, &mut self.stack_fields) {
            Ok(d) => d,
            Err(e) => {
                self.malformed("SAMPLE", e.to_string());
                return None;
            }
        };
        if d.trailing != 0 && !has_fields_after_data_src(info.sample_type) {
            self.trailing += 1;
        }
        if Some(attr_index as u16) == self.waking_event {
            self.wakee = d.raw_pid;
        }
        self.summary.samples += 1;
        Some(Record::Sample(Sample {
            time: self.stamp(t),
            event: attr_index as u16,
            ip: d.ip.unwrap_or(0),
            pid: d.pid.unwrap_or(u32::MAX),
            tid: d.tid.unwrap_or(u32::MAX),
            cpu: d.cpu.unwrap_or(UNKNOWN_CPU),
            period: d.period.or(info.fixed_period).unwrap_or(1),
            cpumode: CpuMode::from_perf_misc(rec.misc),
            addr: d.addr,
            weight: d.weight,
            data_src: d.data_src,
            regs: d.regs,
            ..Default::default()
        }))
    }

    fn user(&mut self, u: &RawUserRecord) {
        let rtype = u.record_type.record_type();
        if rtype.0 == PERF_RECORD_HEADER_BUILD_ID {
            if let Some(e) = self.parse_build_id(u) {
                if self.build_id_paths.insert(e.path.clone()) {
                    self.build_ids.push(e);
                }
            }
            return;
        }
        self.skip(user_type_name(u.record_type));
    }

    /// `struct build_id_event { header; pid_t pid; u8 build_id[24]; char filename[]; }`
    fn parse_build_id(&mut self, u: &RawUserRecord) -> Option<BuildIdEntry> {
        let body = u.data.as_slice();
        if body.len() < 28 {
            self.malformed("HEADER_BUILD_ID", "too short".into());
            return None;
        }
        let raw = &body[4..28];
        let len = if u.misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
            usize::from(raw[20].min(20))
        } else {
            // Older perf: length unknown; drop trailing all-zero 4-byte groups.
            let mut n = 20;
            while n >= 4 && raw[n - 4..n].iter().all(|&b| b == 0) {
                n -= 4;
            }
            n
        };
        let name = &body[28..];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if len == 0 || name.is_empty() {
            return None;
        }
        Some(BuildIdEntry { path: lossy(name), build_id: raw[..len].to_vec() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linux_perf_data::linux_perf_event_reader::{
        BranchSampleFormat, RawData, ReadFormat, RecordIdParseInfo, RecordParseInfo, SampleFormat,
    };

    fn converter() -> Converter {
        Converter {
            events: Vec::new(),
            id_to_event: HashMap::new(),
            header: TraceHeader::default(),
            build_ids: Vec::new(),
            build_id_paths: HashSet::new(),
            summary: ImportSummary::default(),
            last_time: 0,
            trailing: 0,
            quirk_mmap2: 0,
            waking_event: None,
            wakee: None,
            stack_fields: StackFields::default(),
        }
    }

    fn parse_info(endian: Endianness) -> RecordParseInfo {
        RecordParseInfo {
            endian,
            sample_format: SampleFormat::empty(),
            branch_sample_format: BranchSampleFormat::empty(),
            read_format: ReadFormat::empty(),
            common_data_offset_from_end: None,
            sample_regs_user: 0,
            user_regs_count: 0,
            sample_regs_intr: 0,
            intr_regs_count: 0,
            id_parse_info: RecordIdParseInfo { nonsample_record_id_offset_from_end: None, sample_record_id_offset_from_start: None },
            nonsample_record_time_offset_from_end: None,
            sample_record_time_offset_from_start: None,
        }
    }

    /// The body of an MMAP2 record (no sample_id): pid 42, tid 43, a mapping of
    /// /usr/bin/prog at 0x5555_0000_0000, with `union` as the 24 bytes at offset 32.
    fn mmap2_body(union: [u8; 24], big_endian: bool) -> Vec<u8> {
        let u32b = |x: u32| if big_endian { x.to_be_bytes() } else { x.to_le_bytes() };
        let u64b = |x: u64| if big_endian { x.to_be_bytes() } else { x.to_le_bytes() };
        let mut b = Vec::new();
        b.extend(u32b(42));
        b.extend(u32b(43));
        b.extend(u64b(0x5555_0000_0000));
        b.extend(u64b(0x2000));
        b.extend(u64b(0x1000));
        b.extend(union);
        b.extend(u32b(5)); // prot: PROT_READ | PROT_EXEC
        b.extend(u32b(2)); // flags: MAP_PRIVATE
        b.extend(b"/usr/bin/prog\0\0\0");
        b
    }

    /// `u32 maj, min; u64 ino, ino_generation` in the given byte order.
    fn inode_union(maj: u32, big_endian: bool) -> [u8; 24] {
        let mut u = Vec::new();
        if big_endian {
            u.extend(maj.to_be_bytes());
            u.extend(0u32.to_be_bytes());
            u.extend(1_234_567u64.to_be_bytes());
            u.extend(0u64.to_be_bytes());
        } else {
            u.extend(maj.to_le_bytes());
            u.extend(0u32.to_le_bytes());
            u.extend(1_234_567u64.to_le_bytes());
            u.extend(0u64.to_le_bytes());
        }
        u.try_into().unwrap()
    }

    fn convert(conv: &mut Converter, body: &[u8], misc: u16, endian: Endianness) -> Option<Record> {
        let rec = RawEventRecord::new(RecordType::MMAP2, misc, RawData::Single(body), parse_info(endian));
        conv.event(0, &rec)
    }

    const USER: u16 = 2; // PERF_RECORD_MISC_USER
    const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = tailprof_perf_abi::misc::MMAP_BUILD_ID;

    fn assert_prog_mapping(r: Option<Record>, build_id: Option<Vec<u8>>) {
        let Some(Record::Mmap(m)) = r else { panic!("no mapping: {r:?}") };
        assert_eq!((m.pid, m.tid, m.start, m.len, m.pgoff, m.prot), (42, 43, 0x5555_0000_0000, 0x2000, 0x1000, 5));
        assert_eq!(m.path, "/usr/bin/prog");
        assert_eq!(m.cpumode, CpuMode::User);
        assert_eq!(m.build_id, build_id);
    }

    #[test]
    fn mmap2_with_bogus_build_id_flag_is_read_as_device_inode() {
        let mut conv = converter();
        // Little endian, maj = 254 (a virtio disk): the "size" byte reads 254.
        let body = mmap2_body(inode_union(254, false), false);
        let r = convert(&mut conv, &body, USER | PERF_RECORD_MISC_MMAP_BUILD_ID, Endianness::LittleEndian);
        assert_prog_mapping(r, None);
        // Big endian, maj = 8: size byte 0, but the reserved bytes hold maj.
        let body = mmap2_body(inode_union(8, true), true);
        let r = convert(&mut conv, &body, USER | PERF_RECORD_MISC_MMAP_BUILD_ID, Endianness::BigEndian);
        assert_prog_mapping(r, None);
        assert_eq!(conv.summary.malformed_records, 0);
        assert_eq!(conv.summary.side_band, 2);
        conv.finish_warnings();
        let w = &conv.summary.warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("2 MMAP2 records had the build-id flag set but carried device/inode data"), "{w:?}");
    }

    #[test]
    fn mmap2_with_real_build_id_and_plain_inode_form() {
        let mut conv = converter();
        let id: Vec<u8> = (1..=20).collect();
        let mut union = [0u8; 24];
        union[0] = 20;
        union[4..24].copy_from_slice(&id);
        let body = mmap2_body(union, false);
        let r = convert(&mut conv, &body, USER | PERF_RECORD_MISC_MMAP_BUILD_ID, Endianness::LittleEndian);
        assert_prog_mapping(r, Some(id));
        // A shorter build-id (e.g. md5, 16 bytes).
        union[0] = 16;
        let r = convert(&mut conv, &mmap2_body(union, false), USER | PERF_RECORD_MISC_MMAP_BUILD_ID, Endianness::LittleEndian);
        assert_prog_mapping(r, Some((1..=16).collect()));
        // No flag: device/inode, no build-id.
        let r = convert(&mut conv, &mmap2_body(inode_union(254, false), false), USER, Endianness::LittleEndian);
        assert_prog_mapping(r, None);
        conv.finish_warnings();
        assert!(conv.summary.warnings.is_empty(), "{:?}", conv.summary.warnings);
        assert_eq!((conv.summary.malformed_records, conv.summary.side_band), (0, 3));
    }

    #[test]
    fn short_mmap2_with_oversized_build_id_is_malformed_not_a_panic() {
        let mut conv = converter();
        let mut body = mmap2_body(inode_union(254, false), false);
        body.truncate(40); // ends inside the union
        let r = convert(&mut conv, &body, USER | PERF_RECORD_MISC_MMAP_BUILD_ID, Endianness::LittleEndian);
        assert!(r.is_none());
        assert_eq!(conv.summary.malformed_records, 1);
    }
}
