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
//!
//! Layout: `mod.rs` holds the record model's types, the [`Decoder`]'s state and its
//! entry point [`Decoder::decode`]; `ids.rs` tells which event a record belongs to,
//! `peek.rs` peeks at timestamps for the merge, `sample.rs` decodes samples (the plain
//! fast path and the general one), `side_band.rs` the other records.

mod ids;
mod peek;
mod sample;
mod side_band;

use tailprof_format::{CpuMode, Record, Sample, StackId, StackStatus};
use tailprof_perf_abi::{misc, BasicLayout, Endian, SampleLayout};

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

    pub fn layouts(&self) -> &[Layout] {
        &self.layouts
    }

    fn single(&self) -> bool {
        self.layouts.len() == 1
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
}

#[cfg(test)]
mod test_records;

#[cfg(test)]
mod tests {
    use super::sample_type as st;
    use super::test_records::*;
    use super::*;

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
