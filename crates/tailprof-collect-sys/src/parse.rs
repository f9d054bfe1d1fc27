//! Decoder for the raw records the kernel writes into a perf mmap ring: turns them into
//! the record model ([`Sample`], [`Record`]) for one recording's events.
//!
//! The perf ABI itself (constants, sample layouts, the sample decoder, the `sample_id`
//! trailer) lives in `tailprof_perf_abi`, shared with the perf.data importer; this module
//! owns what is specific to the recorder: telling which event a record belongs to,
//! peeking at timestamps for the merge, and turning samples and side-band records (MMAP,
//! MMAP2, COMM, FORK, EXIT, LOST, LOST_SAMPLES, THROTTLE; decoded by
//! `tailprof_perf_abi::SampleLayout::decode_side_band`, as `import` does) into records.
//!
//! A record is `struct perf_event_header { u32 type; u16 misc; u16 size; }` followed by a
//! body that depends on `type`. Side-band records end with the `sample_id` trailer when
//! `sample_id_all` is set; its fields are the subset of `TID, TIME, ID, STREAM_ID, CPU,
//! IDENTIFIER` selected by the event's `sample_type`, in that order, so `IDENTIFIER` is
//! always the *last* u64 of a side-band record and the *first* u64 after the header of a
//! sample. That is how a recording with several events (all sharing one ring per CPU)
//! tells them apart.
//!
//! Everything is bounds-checked: a malformed record gives a [`ParseError`] (which the
//! recorder counts), never a panic. The sample path fills a caller-owned [`Sample`]
//! so decoding a sample allocates nothing once `Sample::regs` has grown.

use tailprof_format::{Comm, CpuMode, LossKind, Lost, Mmap, Record, Sample, StackId, StackStatus, Task, Throttle};
use tailprof_perf_abi::{misc, BasicLayout, Endian, SampleLayout, SideBand};

pub use tailprof_perf_abi::{branch_sample_type, read_format, record_type, sample_type, HEADER_LEN};

/// `misc` bit of a COMM record caused by exec.
pub const MISC_COMM_EXEC: u16 = misc::COMM_EXEC;
/// `misc` bit of an MMAP2 record that carries a build-id instead of maj/min/ino.
pub const MISC_MMAP_BUILD_ID: u16 = misc::MMAP_BUILD_ID;

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("record shorter than its fields")]
    Truncated,
    #[error("record size field is invalid")]
    BadSize,
    #[error("sample id {0} belongs to no event of this recording")]
    UnknownId(u64),
}

impl From<tailprof_perf_abi::DecodeError> for ParseError {
    fn from(_: tailprof_perf_abi::DecodeError) -> ParseError {
        ParseError::Truncated
    }
}

/// What the decoder needs to know about one event (from its `perf_event_attr`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub sample_type: u64,
    pub read_format: u64,
    pub regs_user_mask: u64,
    pub regs_intr_mask: u64,
    /// `branch_sample_type` has PERF_SAMPLE_BRANCH_HW_INDEX.
    pub branch_hw_index: bool,
    /// `branch_sample_type` has PERF_SAMPLE_BRANCH_COUNTERS.
    pub branch_counters: bool,
    pub sample_id_all: bool,
    /// Period to report when PERF_SAMPLE_PERIOD is not sampled (fixed-period events).
    pub default_period: u64,
}

impl Layout {
    /// The ABI's view of this event's records.
    pub fn sample_layout(&self) -> SampleLayout {
        let branch = if self.branch_hw_index { branch_sample_type::HW_INDEX } else { 0 }
            | if self.branch_counters { branch_sample_type::COUNTERS } else { 0 };
        SampleLayout::new(self.sample_type)
            .with_read_format(self.read_format)
            .with_branch_sample_type(branch)
            .with_regs_user(self.regs_user_mask)
            .with_regs_intr(self.regs_intr_mask)
            .with_sample_id_all(self.sample_id_all)
    }

    /// Bytes of the `sample_id` trailer of side-band records.
    pub fn trailer_len(&self) -> usize {
        self.sample_layout().sample_id_len()
    }
}

/// Result of [`Decoder::peek`]: enough to order a record before decoding it fully.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peek {
    pub kind: u32,
    /// Timestamp, or 0 when the record carries none.
    pub time: u64,
    /// Index of the event the record belongs to, when it can be told.
    pub event: Option<u16>,
}

/// A sample with nothing but fixed fields (`[IDENTIFIER] IP TID TIME [CPU] [PERIOD]`,
/// `tailprof_perf_abi::BasicLayout`), decoded once, when its ring is drained
/// ([`Decoder::plain`]): the recorder queues these instead of the raw bytes and writes
/// them as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlainSample {
    pub time: u64,
    pub ip: u64,
    pub period: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub event: u16,
    pub cpumode: CpuMode,
}

impl PlainSample {
    /// Write it into `s` (every field; the optional ones cleared, no stack).
    #[inline]
    pub fn fill(&self, s: &mut Sample) {
        (s.time, s.ip, s.period, s.pid, s.tid, s.cpu, s.event, s.cpumode) =
            (self.time, self.ip, self.period, self.pid, self.tid, self.cpu, self.event, self.cpumode);
        (s.addr, s.weight, s.data_src) = (None, None, None);
        s.regs.clear();
        s.stack = StackId::NONE;
        s.stack_status = StackStatus::None;
    }
}

/// A fully decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// The sample was written into the caller's [`Sample`].
    Sample,
    Record(Record),
    /// A record type the recorder does not keep (READ, AUX, SWITCH, KSYMBOL, ...).
    Ignored(u32),
}

#[inline]
fn rd_u64(b: &[u8], at: usize) -> Result<u64, ParseError> {
    Endian::NATIVE.u64_at(b, at).ok_or(ParseError::Truncated)
}

/// Header fields of a raw record: `(type, misc, size)`.
pub fn header(rec: &[u8]) -> Result<(u32, u16, u16), ParseError> {
    let h = tailprof_perf_abi::RecordHeader::parse(rec, Endian::NATIVE)?;
    Ok((h.kind, h.misc, h.size))
}

/// The widest span of kernel ids [`Decoder`] keeps a direct table for (2 bytes each).
const MAX_DENSE_IDS: usize = 1 << 14;

/// What the decoder derives once from an event's [`Layout`].
#[derive(Debug, Clone)]
struct EventDecoding {
    abi: SampleLayout,
    /// The fixed-field layouts `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]` (the recorder's),
    /// read at fixed offsets; `None` for other layouts (decoded by [`SampleLayout::decode`]).
    basic: Option<BasicLayout>,
    default_period: u64,
    /// Record offset of a sample's TIME.
    sample_time_at: Option<usize>,
    /// Offset of a side-band record's trailer TIME, from the record's end.
    sideband_time_from_end: Option<usize>,
    /// Samples of this event are [`PlainSample`]s, decoded with this (`basic`, unless
    /// turned off with [`Decoder::keep_raw`]).
    plain: Option<BasicLayout>,
}

impl EventDecoding {
    fn new(l: &Layout) -> EventDecoding {
        let abi = l.sample_layout();
        let basic = abi.basic();
        EventDecoding {
            abi,
            basic,
            default_period: l.default_period,
            sample_time_at: abi.sample_time_offset().map(|o| HEADER_LEN + o),
            sideband_time_from_end: abi.sample_id_time_from_end(),
            plain: basic,
        }
    }
}

/// Decodes raw records of one recording (one [`Layout`] per event).
#[derive(Debug, Clone)]
pub struct Decoder {
    layouts: Vec<Layout>,
    /// `layouts[i]`, prepared for decoding.
    events: Vec<EventDecoding>,
    /// `(kernel event id, event index)`, sorted by id.
    ids: Vec<(u64, u16)>,
    /// `1 + event index` of id `dense_base + i` (0: no such id), while the ids span at
    /// most [`MAX_DENSE_IDS`] values (the kernel numbers events in order, so one
    /// recording's usually do): a sample's event in one load instead of a search.
    dense: Vec<u16>,
    dense_base: u64,
    /// The ids spread too far for `dense` (then empty): search `ids`.
    sparse: bool,
    /// With one event whose samples carry TIME: its record offset ([`Decoder::peek`]'s
    /// fast path).
    single_time_at: Option<usize>,
    /// With one event: its plain layout ([`Decoder::plain`]'s fast path).
    single_plain: Option<BasicLayout>,
}

impl Decoder {
    /// `layouts[i]` describes event `i`. With more than one event every layout must have
    /// PERF_SAMPLE_IDENTIFIER, and [`Decoder::add_id`] must be told each fd's id.
    pub fn new(layouts: Vec<Layout>) -> Self {
        assert!(!layouts.is_empty(), "a decoder needs at least one event");
        let events: Vec<EventDecoding> = layouts.iter().map(EventDecoding::new).collect();
        let single_time_at = if events.len() == 1 { events[0].sample_time_at } else { None };
        let single_plain = if events.len() == 1 { events[0].plain } else { None };
        Decoder { layouts, events, ids: Vec::new(), dense: Vec::new(), dense_base: 0, sparse: false, single_time_at, single_plain }
    }

    /// Never decode `event`'s samples as [`PlainSample`]s ([`Decoder::plain`] returns
    /// `None` for them): for events whose samples become something else than a sample
    /// (uprobe hits, off-CPU stacks, class labels), which need the raw record.
    pub fn keep_raw(&mut self, event: u16) {
        if let Some(e) = self.events.get_mut(event as usize) {
            e.plain = None;
        }
        if self.single() {
            self.single_plain = None;
        }
    }

    /// Register the id the kernel reports for an fd of event `event` (PERF_EVENT_IOC_ID).
    pub fn add_id(&mut self, id: u64, event: u16) {
        if let Err(i) = self.ids.binary_search_by_key(&id, |e| e.0) {
            self.ids.insert(i, (id, event));
            self.add_dense(id, event);
        }
    }

    /// Enter a new id into `dense` (growing it), or give `dense` up.
    fn add_dense(&mut self, id: u64, event: u16) {
        if self.sparse || event == u16::MAX {
            self.sparse = true;
            self.dense = Vec::new();
            return;
        }
        let (lo, hi) = (self.ids[0].0, self.ids[self.ids.len() - 1].0);
        if hi - lo >= MAX_DENSE_IDS as u64 {
            self.sparse = true;
            self.dense = Vec::new();
            return;
        }
        if self.dense.is_empty() || id < self.dense_base {
            // The first id, or one below the others (ids usually come in order): rebuild.
            self.dense_base = lo;
            self.dense = vec![0; (hi - lo + 1) as usize];
            for &(i, e) in &self.ids {
                self.dense[(i - lo) as usize] = e + 1;
            }
            return;
        }
        let at = (id - self.dense_base) as usize;
        if at >= self.dense.len() {
            self.dense.resize(at + 1, 0);
        }
        self.dense[at] = event + 1;
    }

    pub fn layouts(&self) -> &[Layout] {
        &self.layouts
    }

    fn single(&self) -> bool {
        self.layouts.len() == 1
    }

    #[inline]
    fn lookup(&self, id: u64) -> Result<u16, ParseError> {
        if let Some(&e) = self.dense.get(id.wrapping_sub(self.dense_base) as usize) {
            return e.checked_sub(1).ok_or(ParseError::UnknownId(id));
        }
        match self.ids.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => Ok(self.ids[i].1),
            Err(_) => Err(ParseError::UnknownId(id)),
        }
    }

    /// Which event a sample belongs to (its first u64 is the IDENTIFIER when events > 1).
    fn sample_event(&self, rec: &[u8]) -> Result<u16, ParseError> {
        if self.single() {
            return Ok(0);
        }
        self.lookup(rd_u64(rec, HEADER_LEN)?)
    }

    /// Which event a side-band record belongs to (its last u64 is the IDENTIFIER).
    fn sideband_event(&self, rec: &[u8]) -> Result<Option<u16>, ParseError> {
        if self.single() {
            return Ok(Some(0));
        }
        let l0 = &self.events[0].abi;
        if !l0.sample_id_all() || !l0.has(sample_type::IDENTIFIER) {
            return Ok(None);
        }
        let at = rec.len().checked_sub(8).filter(|&a| a >= HEADER_LEN).ok_or(ParseError::Truncated)?;
        self.lookup(rd_u64(rec, at)?).map(Some)
    }

    /// How to decode `event`'s records (event 0's when it cannot be told).
    #[inline(always)]
    fn event(&self, event: Option<u16>) -> &EventDecoding {
        event.and_then(|e| self.events.get(e as usize)).unwrap_or(&self.events[0])
    }

    /// Check the header's size against the slice and return `(type, misc)`.
    #[inline(always)]
    fn check(rec: &[u8]) -> Result<(u32, u16), ParseError> {
        let (kind, misc, size) = header(rec)?;
        if (size as usize) < HEADER_LEN || size as usize != rec.len() {
            return Err(ParseError::BadSize);
        }
        Ok((kind, misc))
    }

    /// Timestamp and event of a record, without decoding the rest.
    #[inline]
    pub fn peek(&self, rec: &[u8]) -> Result<Peek, ParseError> {
        // The common case, a sample of a recording with one event: the same checks as
        // below, inlined.
        if let (Some(at), Some(h)) = (self.single_time_at, rec.get(..HEADER_LEN)) {
            let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
            let size = u16::from_ne_bytes([h[6], h[7]]) as usize;
            if kind == record_type::SAMPLE && size == rec.len() {
                if let Some(t) = rec.get(at..at + 8) {
                    let time = u64::from_ne_bytes(t.try_into().expect("8 bytes"));
                    return Ok(Peek { kind, time, event: Some(0) });
                }
            }
        }
        self.peek_any(rec)
    }

    /// A sample with nothing but fixed fields, decoded completely (`ring_cpu` and the
    /// event's default period stand for CPU and PERIOD when the layout has none):
    /// exactly what [`Decoder::decode`] would write into a [`Sample`]. `None` for every
    /// other record, and for a sample [`Decoder::decode`] would refuse (wrong size,
    /// unknown id), which the caller then takes the general way.
    #[inline(always)]
    pub fn plain(&self, rec: &[u8], ring_cpu: u32) -> Option<PlainSample> {
        let h = rec.first_chunk::<{ HEADER_LEN + 8 }>()?;
        let kind = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let size = u16::from_ne_bytes([h[6], h[7]]) as usize;
        if kind != record_type::SAMPLE || size != rec.len() {
            return None;
        }
        let (event, pl, default_period) = if let Some(pl) = self.single_plain {
            (0, pl, self.events[0].default_period)
        } else if self.single() {
            return None;
        } else {
            // IDENTIFIER, first after the header (only plain layouts with it are looked up).
            let ev = self.lookup(u64::from_ne_bytes(h[HEADER_LEN..].try_into().expect("8 bytes"))).ok()?;
            let e = self.events.get(ev as usize)?;
            (ev, e.plain?, e.default_period)
        };
        let cpumode = CpuMode::from_perf_misc(misc);
        // One length check, then loads at offsets that are constants per layout; an absent
        // CPU or PERIOD is the ring's or the event's, decided per layout at compile time.
        pl.decode_record_with(rec, Endian::NATIVE, |b| PlainSample {
            time: b.time,
            ip: b.ip,
            period: b.period.unwrap_or(default_period),
            pid: b.pid,
            tid: b.tid,
            cpu: b.cpu.unwrap_or(ring_cpu),
            event,
            cpumode,
        })
    }

    fn peek_any(&self, rec: &[u8]) -> Result<Peek, ParseError> {
        let (kind, _) = Self::check(rec)?;
        if kind == record_type::SAMPLE {
            let ev = self.sample_event(rec)?;
            let time = match self.event(Some(ev)).sample_time_at {
                Some(at) => rd_u64(rec, at)?,
                None => 0,
            };
            return Ok(Peek { kind, time, event: Some(ev) });
        }
        let ev = self.sideband_event(rec)?;
        let mut time = 0;
        if let Some(from_end) = self.event(ev).sideband_time_from_end {
            let at = rec.len().checked_sub(from_end).filter(|&a| a >= HEADER_LEN);
            time = rd_u64(rec, at.ok_or(ParseError::Truncated)?)?;
        } else if kind == record_type::FORK || kind == record_type::EXIT {
            time = rd_u64(rec, HEADER_LEN + 16)?;
        } else if kind == record_type::THROTTLE || kind == record_type::UNTHROTTLE {
            time = rd_u64(rec, HEADER_LEN)?;
        }
        Ok(Peek { kind, time, event: ev })
    }

    /// Decode a sample into `s` (every field is overwritten). `ring_cpu` is used when
    /// the sample does not carry PERF_SAMPLE_CPU.
    #[inline]
    pub fn decode_sample(&self, rec: &[u8], event: u16, ring_cpu: u32, s: &mut Sample) -> Result<(), ParseError> {
        let (_, misc) = Self::check(rec)?;
        self.fill_sample(rec, misc, event, ring_cpu, s)
    }

    /// [`Decoder::decode_sample`] of a record whose header was checked.
    #[inline(always)]
    fn fill_sample(&self, rec: &[u8], misc: u16, event: u16, ring_cpu: u32, s: &mut Sample) -> Result<(), ParseError> {
        let Some(ev) = self.events.get(event as usize) else {
            return Err(ParseError::UnknownId(event as u64));
        };
        let body = &rec[HEADER_LEN..];
        s.event = event;
        s.cpumode = CpuMode::from_perf_misc(misc);
        s.regs.clear();
        if let Some(basic) = ev.basic {
            // The fixed-field layouts: one length check, then fixed offsets.
            basic
                .decode_record_with(rec, Endian::NATIVE, |b| {
                    (s.ip, s.pid, s.tid, s.time) = (b.ip, b.pid, b.tid, b.time);
                    s.cpu = b.cpu.unwrap_or(ring_cpu);
                    s.period = b.period.unwrap_or(ev.default_period);
                    (s.addr, s.weight, s.data_src) = (None, None, None);
                })
                .ok_or(ParseError::Truncated)?;
        } else {
            ev.abi.decode_with(body, Endian::NATIVE, |v| {
                s.ip = v.ip().unwrap_or(0);
                s.pid = v.pid().unwrap_or(0);
                s.tid = v.tid().unwrap_or(0);
                s.time = v.time().unwrap_or(0);
                s.addr = v.addr();
                s.cpu = v.cpu().unwrap_or(ring_cpu);
                s.period = v.period().unwrap_or(ev.default_period);
                s.weight = v.weight().map(|w| w.value());
                s.data_src = v.data_src();
                if let Some(r) = v.regs_user() {
                    r.values.append_to(&mut s.regs);
                }
            })?;
        }
        s.stack = StackId::NONE;
        s.stack_status = StackStatus::None;
        Ok(())
    }

    /// Decode any record. Samples go into `s` (see [`Decoder::decode_sample`]); other
    /// records are returned. `event` is what [`Decoder::peek`] found.
    #[inline]
    pub fn decode(&self, rec: &[u8], event: Option<u16>, ring_cpu: u32, s: &mut Sample) -> Result<Decoded, ParseError> {
        let (kind, misc) = Self::check(rec)?;
        if kind == record_type::SAMPLE {
            let ev = match event {
                Some(e) => e,
                None => self.sample_event(rec)?,
            };
            self.fill_sample(rec, misc, ev, ring_cpu, s)?;
            return Ok(Decoded::Sample);
        }
        self.decode_sideband(rec, kind, misc, event, ring_cpu)
    }

    /// [`Decoder::decode`] of a checked record that is not a sample (decoded by
    /// `tailprof_perf_abi`'s side-band decoder).
    fn decode_sideband(&self, rec: &[u8], kind: u32, misc: u16, event: Option<u16>, ring_cpu: u32) -> Result<Decoded, ParseError> {
        let l = &self.event(event).abi;
        let Some((sb, t)) = l.decode_side_band(rec, Endian::NATIVE)? else {
            // Not kept; a record shorter than its trailer is still malformed.
            l.split_sample_id(rec, Endian::NATIVE)?;
            return Ok(Decoded::Ignored(kind));
        };
        let time = t.time.unwrap_or(0);
        let cpu = t.cpu.unwrap_or(ring_cpu);
        let cpumode = CpuMode::from_perf_misc(misc);
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let r = match sb {
            SideBand::Mmap(m) => Record::Mmap(Mmap {
                time,
                pid: m.pid,
                tid: m.tid,
                start: m.start,
                len: m.len,
                pgoff: m.pgoff,
                prot: m.prot,
                cpumode,
                path: text(m.filename),
                build_id: m.build_id.map(<[u8]>::to_vec),
            }),
            SideBand::Comm { pid, tid, exec, comm } => Record::Comm(Comm { time, pid, tid, exec, comm: text(comm) }),
            SideBand::Fork(f) | SideBand::Exit(f) => {
                let task = Task { time: t.time.unwrap_or(f.time), pid: f.pid, ppid: f.ppid, tid: f.tid, ptid: f.ptid };
                if kind == record_type::FORK {
                    Record::Fork(task)
                } else {
                    Record::Exit(task)
                }
            }
            SideBand::Lost { id, count } => {
                let event = self.lookup(id).ok().or(if self.single() { Some(0) } else { None });
                Record::Lost(Lost { time, cpu, event, kind: LossKind::RingFull, count })
            }
            SideBand::LostSamples { count } => Record::Lost(Lost { time, cpu, event, kind: LossKind::Samples, count }),
            SideBand::Throttle { throttled, time: body_time, id, .. } => {
                let event = self.lookup(id).ok().or(event);
                Record::Throttle(Throttle { time: t.time.unwrap_or(body_time), cpu, event, throttled })
            }
        };
        Ok(Decoded::Record(r))
    }
}

#[cfg(test)]
mod tests {
    use super::sample_type as st;
    use super::*;

    /// Builds a raw record: header + body words, size filled in.
    struct B(Vec<u8>);
    impl B {
        fn new(kind: u32, misc: u16) -> B {
            let mut v = Vec::new();
            v.extend_from_slice(&kind.to_ne_bytes());
            v.extend_from_slice(&misc.to_ne_bytes());
            v.extend_from_slice(&0u16.to_ne_bytes());
            B(v)
        }
        fn w(mut self, xs: &[u64]) -> B {
            for x in xs {
                self.0.extend_from_slice(&x.to_ne_bytes());
            }
            self
        }
        fn u32s(mut self, a: u32, b: u32) -> B {
            self.0.extend_from_slice(&a.to_ne_bytes());
            self.0.extend_from_slice(&b.to_ne_bytes());
            self
        }
        fn bytes(mut self, b: &[u8]) -> B {
            self.0.extend_from_slice(b);
            self
        }
        fn str(mut self, s: &str) -> B {
            self.0.extend_from_slice(s.as_bytes());
            self.0.resize((self.0.len() + 8) & !7, 0); // NUL, then pad to 8
            self
        }
        fn done(mut self) -> Vec<u8> {
            let n = self.0.len() as u16;
            self.0[6..8].copy_from_slice(&n.to_ne_bytes());
            self.0
        }
    }

    const BASIC: u64 = st::IP | st::TID | st::TIME | st::CPU | st::PERIOD;

    fn one(sample_type: u64) -> Decoder {
        Decoder::new(vec![Layout { sample_type, sample_id_all: true, ..Layout::default() }])
    }

    fn sample(d: &Decoder, rec: &[u8]) -> Sample {
        let p = d.peek(rec).unwrap();
        let mut s = Sample::default();
        assert_eq!(d.decode(rec, p.event, 7, &mut s).unwrap(), Decoded::Sample);
        assert_eq!(p.time, s.time);
        s
    }

    /// The ABI crate's constants are the kernel's (`perf-event-open-sys` is bindgen'd
    /// from include/uapi/linux/perf_event.h).
    #[test]
    fn abi_constants_match_the_kernel_header() {
        use perf_event_open_sys::bindings as b;
        let sample = [
            (st::IP, b::PERF_SAMPLE_IP),
            (st::TID, b::PERF_SAMPLE_TID),
            (st::TIME, b::PERF_SAMPLE_TIME),
            (st::ADDR, b::PERF_SAMPLE_ADDR),
            (st::READ, b::PERF_SAMPLE_READ),
            (st::CALLCHAIN, b::PERF_SAMPLE_CALLCHAIN),
            (st::ID, b::PERF_SAMPLE_ID),
            (st::CPU, b::PERF_SAMPLE_CPU),
            (st::PERIOD, b::PERF_SAMPLE_PERIOD),
            (st::STREAM_ID, b::PERF_SAMPLE_STREAM_ID),
            (st::RAW, b::PERF_SAMPLE_RAW),
            (st::BRANCH_STACK, b::PERF_SAMPLE_BRANCH_STACK),
            (st::REGS_USER, b::PERF_SAMPLE_REGS_USER),
            (st::STACK_USER, b::PERF_SAMPLE_STACK_USER),
            (st::WEIGHT, b::PERF_SAMPLE_WEIGHT),
            (st::DATA_SRC, b::PERF_SAMPLE_DATA_SRC),
            (st::IDENTIFIER, b::PERF_SAMPLE_IDENTIFIER),
            (st::TRANSACTION, b::PERF_SAMPLE_TRANSACTION),
            (st::REGS_INTR, b::PERF_SAMPLE_REGS_INTR),
            (st::PHYS_ADDR, b::PERF_SAMPLE_PHYS_ADDR),
            (st::AUX, b::PERF_SAMPLE_AUX),
            (st::CGROUP, b::PERF_SAMPLE_CGROUP),
            (st::DATA_PAGE_SIZE, b::PERF_SAMPLE_DATA_PAGE_SIZE),
            (st::CODE_PAGE_SIZE, b::PERF_SAMPLE_CODE_PAGE_SIZE),
            (st::WEIGHT_STRUCT, b::PERF_SAMPLE_WEIGHT_STRUCT),
        ];
        for (ours, kernel) in sample {
            assert_eq!(ours, kernel as u64);
        }
        assert_eq!(st::ALL, b::PERF_SAMPLE_MAX as u64 - 1);
        let rf = [
            (read_format::TOTAL_TIME_ENABLED, b::PERF_FORMAT_TOTAL_TIME_ENABLED),
            (read_format::TOTAL_TIME_RUNNING, b::PERF_FORMAT_TOTAL_TIME_RUNNING),
            (read_format::ID, b::PERF_FORMAT_ID),
            (read_format::GROUP, b::PERF_FORMAT_GROUP),
        ];
        for (ours, kernel) in rf {
            assert_eq!(ours, kernel as u64);
        }
        assert_eq!(branch_sample_type::HW_INDEX, b::PERF_SAMPLE_BRANCH_HW_INDEX as u64);
        let rt = [
            (record_type::MMAP, b::PERF_RECORD_MMAP),
            (record_type::LOST, b::PERF_RECORD_LOST),
            (record_type::COMM, b::PERF_RECORD_COMM),
            (record_type::EXIT, b::PERF_RECORD_EXIT),
            (record_type::THROTTLE, b::PERF_RECORD_THROTTLE),
            (record_type::UNTHROTTLE, b::PERF_RECORD_UNTHROTTLE),
            (record_type::FORK, b::PERF_RECORD_FORK),
            (record_type::READ, b::PERF_RECORD_READ),
            (record_type::SAMPLE, b::PERF_RECORD_SAMPLE),
            (record_type::MMAP2, b::PERF_RECORD_MMAP2),
            (record_type::AUX, b::PERF_RECORD_AUX),
            (record_type::ITRACE_START, b::PERF_RECORD_ITRACE_START),
            (record_type::LOST_SAMPLES, b::PERF_RECORD_LOST_SAMPLES),
            (record_type::SWITCH, b::PERF_RECORD_SWITCH),
            (record_type::SWITCH_CPU_WIDE, b::PERF_RECORD_SWITCH_CPU_WIDE),
            (record_type::NAMESPACES, b::PERF_RECORD_NAMESPACES),
            (record_type::KSYMBOL, b::PERF_RECORD_KSYMBOL),
            (record_type::BPF_EVENT, b::PERF_RECORD_BPF_EVENT),
            (record_type::CGROUP, b::PERF_RECORD_CGROUP),
            (record_type::TEXT_POKE, b::PERF_RECORD_TEXT_POKE),
        ];
        for (ours, kernel) in rt {
            assert_eq!(ours, kernel);
        }
        let m = [
            (misc::KERNEL, b::PERF_RECORD_MISC_KERNEL),
            (misc::USER, b::PERF_RECORD_MISC_USER),
            (misc::HYPERVISOR, b::PERF_RECORD_MISC_HYPERVISOR),
            (misc::GUEST_KERNEL, b::PERF_RECORD_MISC_GUEST_KERNEL),
            (misc::GUEST_USER, b::PERF_RECORD_MISC_GUEST_USER),
            (misc::CPUMODE_MASK, b::PERF_RECORD_MISC_CPUMODE_MASK),
            (misc::MMAP_DATA, b::PERF_RECORD_MISC_MMAP_DATA),
            (misc::COMM_EXEC, b::PERF_RECORD_MISC_COMM_EXEC),
            (misc::SWITCH_OUT, b::PERF_RECORD_MISC_SWITCH_OUT),
            (misc::EXACT_IP, b::PERF_RECORD_MISC_EXACT_IP),
            (misc::SWITCH_OUT_PREEMPT, b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT),
            (misc::MMAP_BUILD_ID, b::PERF_RECORD_MISC_MMAP_BUILD_ID),
            (misc::EXT_RESERVED, b::PERF_RECORD_MISC_EXT_RESERVED),
        ];
        for (ours, kernel) in m {
            assert_eq!(ours as u32, kernel);
        }
        assert_eq!(tailprof_perf_abi::context::KERNEL, b::PERF_CONTEXT_KERNEL);
        assert_eq!(tailprof_perf_abi::context::USER, b::PERF_CONTEXT_USER);
        assert_eq!(tailprof_perf_abi::context::MAX, b::PERF_CONTEXT_MAX);
    }

    #[test]
    fn basic_sample() {
        let d = one(BASIC);
        let rec = B::new(9, 2).w(&[0x401000]).u32s(10, 11).w(&[5000]).u32s(1, 0).w(&[100000]).done();
        let s = sample(&d, &rec);
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu, s.period), (0x401000, 10, 11, 5000, 1, 100000));
        assert_eq!(s.cpumode, CpuMode::User);
        assert!(s.regs.is_empty() && s.addr.is_none() && s.weight.is_none());
    }

    /// The fixed-offset path (the 56-byte layout, with IDENTIFIER, CPU and PERIOD) decodes
    /// what the general path does, and a short record is still an error.
    #[test]
    fn default_layout_fixed_offsets() {
        let d = one(BASIC | st::IDENTIFIER);
        assert!(d.events[0].basic.is_some());
        let mut s = Sample { addr: Some(1), weight: Some(2), data_src: Some(3), regs: vec![4], ..Sample::default() };
        let rec = B::new(9, 1).w(&[42, 0xffff_8000_0000_1234]).u32s(3, 4).w(&[999]).u32s(1, 0).w(&[10_000]).done();
        assert_eq!(d.decode(&rec, Some(0), 7, &mut s).unwrap(), Decoded::Sample);
        assert_eq!((s.ip, s.pid, s.tid, s.time, s.cpu, s.period), (0xffff_8000_0000_1234, 3, 4, 999, 1, 10_000));
        assert_eq!(s.cpumode, CpuMode::Kernel);
        assert!(s.regs.is_empty() && s.addr.is_none() && s.weight.is_none() && s.data_src.is_none());
        let short = B::new(9, 1).w(&[42, 0x1000]).u32s(3, 4).w(&[999]).done();
        assert_eq!(d.decode(&short, Some(0), 7, &mut s), Err(ParseError::Truncated));
        assert!(one(BASIC | st::ADDR).events[0].basic.is_none());
    }

    /// [`Decoder::plain`] gives exactly what [`Decoder::decode`] writes (through the
    /// fixed-offset path and through the field walk), for every fixed-field layout (with
    /// and without IDENTIFIER, CPU, PERIOD), one event or several; and `None` wherever the
    /// general path must decide.
    #[test]
    fn plain_samples_decode_as_the_general_path() {
        for bits in 0..8u64 {
            let t = st::IP
                | st::TID
                | st::TIME
                | if bits & 1 != 0 { st::IDENTIFIER } else { 0 }
                | if bits & 2 != 0 { st::CPU } else { 0 }
                | if bits & 4 != 0 { st::PERIOD } else { 0 };
            let layout = Layout { sample_type: t, sample_id_all: true, default_period: 4321, ..Layout::default() };
            let rec = |misc: u16, id: u64, extra: usize| {
                let mut b = B::new(9, misc);
                if t & st::IDENTIFIER != 0 {
                    b = b.w(&[id]);
                }
                b = b.w(&[0xffff_8000_0000_1234]).u32s(3, 4).w(&[999]);
                if t & st::CPU != 0 {
                    b = b.u32s(1, 0);
                }
                if t & st::PERIOD != 0 {
                    b = b.w(&[10_000]);
                }
                b.bytes(&vec![0xee; extra]).done()
            };
            let mut decoders = vec![(Decoder::new(vec![layout.clone()]), 0u16)];
            if t & st::IDENTIFIER != 0 {
                let mut d = Decoder::new(vec![Layout { sample_type: BASIC | st::IDENTIFIER, ..Layout::default() }, layout.clone()]);
                d.add_id(42, 1);
                d.add_id(41, 0);
                decoders.push((d, 1));
            }
            for (d, ev) in &decoders {
                for misc in [0u16, 1, 2, 5, 6, 0x4001] {
                    for extra in [0, 8] {
                        let r = rec(misc, 42, extra);
                        let p = d.plain(&r, 7).unwrap_or_else(|| panic!("{t:#x}"));
                        let mut s = Sample { addr: Some(1), weight: Some(2), regs: vec![3], ..Sample::default() };
                        assert_eq!(d.decode(&r, Some(*ev), 7, &mut s).unwrap(), Decoded::Sample);
                        let mut f = Sample { data_src: Some(9), regs: vec![1, 2], ..Sample::default() };
                        p.fill(&mut f);
                        assert_eq!(f, s, "layout {t:#x}");
                        // The field walk (no fixed-offset path) writes the same.
                        let mut walked = d.clone();
                        walked.events.iter_mut().for_each(|e| e.basic = None);
                        let mut w = Sample { data_src: Some(5), ..Sample::default() };
                        assert_eq!(walked.decode(&r, Some(*ev), 7, &mut w).unwrap(), Decoded::Sample);
                        assert_eq!(w, s, "layout {t:#x}");
                        assert_eq!(p.event, *ev);
                        assert_eq!(p.time, d.peek(&r).unwrap().time);
                    }
                }
                // Too short, a size field that disagrees, an unknown id: the general path's call.
                let r = rec(2, 42, 0);
                assert_eq!(d.plain(&r[..r.len() - 8], 7), None);
                let mut bad = r.clone();
                bad[6..8].copy_from_slice(&((r.len() + 8) as u16).to_ne_bytes());
                assert_eq!(d.plain(&bad, 7), None);
                if *ev == 1 {
                    assert_eq!(d.plain(&rec(2, 99, 0), 7), None);
                    // Event 0's layout (with CPU and PERIOD) is what tells.
                    let want = (bits == 7).then_some(0);
                    assert_eq!(d.plain(&rec(2, 41, 0), 7).map(|p| p.event), want);
                }
                let mut kept = d.clone();
                kept.keep_raw(*ev);
                assert_eq!(kept.plain(&r, 7), None);
            }
        }
        // Not plain: other payloads, other record types.
        for t in [BASIC | st::CALLCHAIN, BASIC | st::ADDR, BASIC | st::RAW, st::IP | st::TIME | st::CPU] {
            assert!(one(t).events[0].plain.is_none());
        }
        let d = sb_decoder();
        let comm = trailer(B::new(3, 0).u32s(1, 2).str("x"), 1, 0, 500);
        assert_eq!(d.plain(&comm, 0), None);
    }

    /// The direct id table answers as the search does: ids in order, out of order,
    /// duplicated, and spread too far for a table.
    #[test]
    fn id_lookup_table_agrees_with_the_search() {
        let l = Layout { sample_type: BASIC | st::IDENTIFIER, ..Layout::default() };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for case in 0..4 {
            let mut d = Decoder::new(vec![l.clone(), l.clone(), l.clone()]);
            let mut reg: Vec<(u64, u16)> = Vec::new();
            for k in 0..300u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let id = match case {
                    0 => 1000 + 2 * k,
                    1 => 5000 + x % 600,
                    2 if k == 299 => 1 << 40,
                    _ => 70 + x % 900,
                };
                let ev = (x % 3) as u16;
                if !reg.iter().any(|r| r.0 == id) {
                    reg.push((id, ev));
                }
                d.add_id(id, ev);
            }
            assert_eq!(d.sparse, case == 2, "case {case}");
            for id in 0..7000u64 {
                let want = reg.iter().find(|r| r.0 == id).map(|r| r.1).ok_or(ParseError::UnknownId(id));
                assert_eq!(d.lookup(id), want, "case {case} id {id}");
            }
            assert_eq!(d.lookup(u64::MAX), Err(ParseError::UnknownId(u64::MAX)));
            assert_eq!(d.lookup(1 << 40), if case == 2 { Ok(reg[reg.len() - 1].1) } else { Err(ParseError::UnknownId(1 << 40)) });
        }
    }

    #[test]
    fn every_field_in_kernel_order() {
        let t = st::IDENTIFIER | BASIC | st::ADDR | st::ID | st::STREAM_ID | st::READ | st::CALLCHAIN | st::RAW;
        let t = t | st::REGS_USER | st::STACK_USER | st::WEIGHT_STRUCT | st::DATA_SRC | st::TRANSACTION;
        let rf = read_format::TOTAL_TIME_ENABLED | read_format::ID;
        let mut d = Decoder::new(vec![
            Layout { sample_type: BASIC | st::IDENTIFIER, ..Layout::default() },
            Layout { sample_type: t, read_format: rf, regs_user_mask: 0b1011, sample_id_all: true, ..Layout::default() },
        ]);
        d.add_id(77, 1);
        d.add_id(55, 0);
        let rec = B::new(9, 1)
            .w(&[77, 0xffff_8000_0000_1234]) // identifier, ip
            .u32s(3, 4)
            .w(&[999, 0xdead_0000, 77, 78]) // time, addr, id, stream id
            .u32s(1, 0) // cpu
            .w(&[1234, 1, 2, 3]) // period; read: value, enabled, id
            .w(&[2, 0xa, 0xb]) // callchain
            .bytes(&12u32.to_ne_bytes())
            .bytes(&[9; 12]) // raw: 4 + 12 = 16 bytes
            .w(&[2, 100, 101, 102]) // regs_user: abi + 3 regs
            .w(&[16, 0, 0, 16]) // stack_user: size, 16 bytes of data, dyn_size
            .w(&[0x0005_0004_0000_0123, 0x42, 0x99]) // weight struct, data_src, transaction
            .done();
        let s = sample(&d, &rec);
        assert_eq!(s.event, 1);
        assert_eq!(s.cpumode, CpuMode::Kernel);
        assert_eq!((s.pid, s.tid, s.time, s.cpu, s.period), (3, 4, 999, 1, 1234));
        assert_eq!(s.addr, Some(0xdead_0000));
        assert_eq!(s.regs, vec![100, 101, 102]);
        assert_eq!(s.weight, Some(0x123));
        assert_eq!(s.data_src, Some(0x42));
    }

    #[test]
    fn regs_abi_none_and_group_read() {
        let d = Decoder::new(vec![Layout {
            sample_type: st::TID | st::TIME | st::READ | st::REGS_USER | st::WEIGHT,
            read_format: read_format::GROUP | read_format::ID | read_format::TOTAL_TIME_RUNNING,
            regs_user_mask: 0xff,
            default_period: 4000,
            ..Layout::default()
        }]);
        let rec = B::new(9, 2)
            .u32s(1, 2)
            .w(&[5, 2, 0]) // time; read: nr, running
            .w(&[1, 10, 2, 11]) // {value, id} x 2
            .w(&[0, 77]) // regs abi none (no regs follow), weight
            .done();
        let s = sample(&d, &rec);
        assert!(s.regs.is_empty());
        assert_eq!(s.weight, Some(77));
        assert_eq!(s.period, 4000);
        assert_eq!(s.cpu, 7, "ring cpu when CPU is not sampled");
    }

    #[test]
    fn sample_reuse_clears_optional_fields() {
        let d2 = one(BASIC);
        let mut s = Sample { addr: Some(1), regs: vec![1, 2], weight: Some(3), ..Sample::default() };
        let rec = B::new(9, 2).w(&[1]).u32s(1, 1).w(&[1]).u32s(0, 0).w(&[1]).done();
        d2.decode(&rec, Some(0), 0, &mut s).unwrap();
        assert!(s.addr.is_none() && s.regs.is_empty() && s.weight.is_none());
    }

    const TRAILER: u64 = st::TID | st::TIME | st::CPU | st::IDENTIFIER;

    fn sb_decoder() -> Decoder {
        let l = Layout { sample_type: st::IP | TRAILER, sample_id_all: true, ..Layout::default() };
        let mut d = Decoder::new(vec![l.clone(), l]);
        d.add_id(500, 0);
        d.add_id(501, 1);
        d
    }

    fn trailer(b: B, time: u64, cpu: u32, id: u64) -> Vec<u8> {
        b.u32s(1, 1).w(&[time]).u32s(cpu, 0).w(&[id]).done()
    }

    fn record(d: &Decoder, rec: &[u8]) -> (Peek, Record) {
        let p = d.peek(rec).unwrap();
        match d.decode(rec, p.event, 9, &mut Sample::default()).unwrap() {
            Decoded::Record(r) => {
                assert_eq!(r.time(), p.time);
                (p, r)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mmap2_with_and_without_build_id() {
        let d = sb_decoder();
        let mut u = [0u8; 24];
        u[0] = 20;
        for (i, b) in u[4..24].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let b = B::new(10, 2 | MISC_MMAP_BUILD_ID)
            .u32s(100, 101)
            .w(&[0x5000])
            .w(&[0x2000])
            .w(&[0x1000])
            .bytes(&u)
            .u32s(5, 2)
            .str("/usr/bin/true");
        let (p, r) = record(&d, &trailer(b, 1234, 1, 501));
        assert_eq!(p.event, Some(1));
        let Record::Mmap(m) = r else { panic!() };
        assert_eq!((m.pid, m.tid, m.start, m.len, m.pgoff, m.prot), (100, 101, 0x5000, 0x2000, 0x1000, 5));
        assert_eq!(m.path, "/usr/bin/true");
        assert_eq!(m.build_id.as_deref(), Some(&(1..=20).collect::<Vec<u8>>()[..]));
        assert_eq!(m.time, 1234);

        // maj/min/ino variant: no build-id even though the bytes are non-zero.
        let b = B::new(10, 2).u32s(1, 1).w(&[0]).w(&[1]).w(&[0]).bytes(&u).u32s(5, 2).str("/lib/x.so");
        let (_, r) = record(&d, &trailer(b, 1, 0, 500));
        let Record::Mmap(m) = r else { panic!() };
        assert_eq!(m.build_id, None);
        assert_eq!(m.path, "/lib/x.so");
    }

    #[test]
    fn mmap_comm_fork_exit() {
        let d = sb_decoder();
        let b = B::new(1, 1).u32s(u32::MAX, 0).w(&[0xffff_0000]).w(&[0x1000]).w(&[0]).str("[kernel.kallsyms]");
        let (_, r) = record(&d, &trailer(b, 5, 0, 500));
        let Record::Mmap(m) = r else { panic!() };
        assert_eq!((m.pid, m.cpumode, m.path.as_str()), (u32::MAX, CpuMode::Kernel, "[kernel.kallsyms]"));

        let b = B::new(3, MISC_COMM_EXEC).u32s(42, 43).str("worker-thread");
        let (_, r) = record(&d, &trailer(b, 6, 0, 500));
        assert_eq!(r, Record::Comm(Comm { time: 6, pid: 42, tid: 43, exec: true, comm: "worker-thread".into() }));

        let b = B::new(7, 0).u32s(50, 42).u32s(51, 43).w(&[7]);
        let (_, r) = record(&d, &trailer(b, 7, 0, 500));
        assert_eq!(r, Record::Fork(Task { time: 7, pid: 50, ppid: 42, tid: 51, ptid: 43 }));
        let b = B::new(4, 0).u32s(50, 42).u32s(51, 43).w(&[8]);
        let (_, r) = record(&d, &trailer(b, 8, 0, 500));
        assert!(matches!(r, Record::Exit(Task { pid: 50, .. })));
    }

    #[test]
    fn lost_and_throttle() {
        let d = sb_decoder();
        let (_, r) = record(&d, &trailer(B::new(2, 0).w(&[501]).w(&[33]), 9, 1, 501));
        assert_eq!(r, Record::Lost(Lost { time: 9, cpu: 1, event: Some(1), kind: LossKind::RingFull, count: 33 }));
        let (_, r) = record(&d, &trailer(B::new(13, 0).w(&[4]), 10, 0, 500));
        assert_eq!(r, Record::Lost(Lost { time: 10, cpu: 0, event: Some(0), kind: LossKind::Samples, count: 4 }));
        let (_, r) = record(&d, &trailer(B::new(5, 0).w(&[11]).w(&[501]).w(&[501]), 11, 1, 501));
        assert_eq!(r, Record::Throttle(Throttle { time: 11, cpu: 1, event: Some(1), throttled: true }));
        let (_, r) = record(&d, &trailer(B::new(6, 0).w(&[12]).w(&[500]).w(&[500]), 12, 0, 500));
        assert!(matches!(r, Record::Throttle(Throttle { throttled: false, .. })));
    }

    #[test]
    fn no_sample_id_all_and_ignored_types() {
        let d = Decoder::new(vec![Layout { sample_type: BASIC, ..Layout::default() }]);
        let rec = B::new(4, 0).u32s(1, 1).u32s(2, 2).w(&[321]).done();
        let (p, _) = record(&d, &rec);
        assert_eq!(p.time, 321, "no trailer: the body's time");
        let rec = B::new(3, 0).u32s(1, 1).str("c").done();
        assert_eq!(d.peek(&rec).unwrap().time, 0, "COMM without trailer has no time");
        let rec = B::new(14, 0).done(); // SWITCH
        assert_eq!(d.decode(&rec, Some(0), 0, &mut Sample::default()), Ok(Decoded::Ignored(14)));
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let d = sb_decoder();
        let good = trailer(B::new(3, 0).u32s(1, 2).str("x"), 1, 0, 500);
        // Every truncation and a wrong size field.
        for n in 0..good.len() {
            let mut r = good[..n].to_vec();
            if r.len() >= 8 {
                r[6..8].copy_from_slice(&(n as u16).to_ne_bytes());
            }
            let _ = d.peek(&r);
            let _ = d.decode(&r, Some(0), 0, &mut Sample::default());
        }
        let mut bad = good.clone();
        bad[6..8].copy_from_slice(&4u16.to_ne_bytes());
        assert_eq!(d.peek(&bad), Err(ParseError::BadSize));
        // Unknown identifier.
        let r = trailer(B::new(3, 0).u32s(1, 2).str("x"), 1, 0, 999);
        assert_eq!(d.peek(&r), Err(ParseError::UnknownId(999)));
        // A sample whose callchain claims more entries than the record holds.
        let d = one(st::TID | st::CALLCHAIN);
        let r = B::new(9, 0).u32s(1, 1).w(&[u64::MAX]).w(&[1]).done();
        assert_eq!(d.decode(&r, Some(0), 0, &mut Sample::default()), Err(ParseError::Truncated));
        // Pseudo-random garbage never panics.
        let d = sb_decoder();
        let mut x = 0x12345678u64;
        for _ in 0..20000 {
            let mut r = vec![0u8; (x % 120) as usize];
            for b in r.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if r.len() >= 8 {
                let n = r.len() as u16;
                r[6..8].copy_from_slice(&n.to_ne_bytes());
                r[0..4].copy_from_slice(&((x % 16) as u32).to_ne_bytes());
            }
            if let Ok(p) = d.peek(&r) {
                let _ = d.decode(&r, p.event, 0, &mut Sample::default());
            }
            let _ = d.decode(&r, Some(1), 0, &mut Sample::default());
        }
    }
}
