//! [`BasicLayout`]: the fixed-offset sample decoder, for the layouts whose fields all sit
//! at constant offsets, `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]` (IP, TID and TIME
//! required; IDENTIFIER, CPU and PERIOD each optional; nothing else). These are the
//! recorder's layouts: `IP TID TIME IDENTIFIER` (40-byte records) by default, plus PERIOD
//! with `-F` (48), plus CPU and PERIOD before issue 9 and in perf's own `-a` recordings
//! (56).
//!
//! Each of the eight layouts is its own monomorphized decoder (for each byte order): one
//! length check, then loads at offsets that are constants in the code. The offsets follow
//! the kernel's field order (`perf_event_open(2)`, "PERF_RECORD_SAMPLE"), the same one
//! [`SampleLayout::decode`] walks; the tests check the two agree on every layout.
//! [`BasicLayout::decode_with`] hands the sample to a closure inside that decoder, so the
//! caller's code for an absent CPU or PERIOD (the ring's CPU, the attr's period) is
//! decided at compile time too; [`BasicLayout::decode_record_with`] does the same on a
//! whole record (the recorder's drain loop and its raw-record decoder, where it costs as
//! many instructions as the hand-written loads it replaced: `decode_only`, `replay_rounds`).

use crate::consts::{sample_type as st, HEADER_LEN};
use crate::endian::Endian;
use crate::layout::SampleLayout;
use crate::sample::DecodeError;

/// Bits of [`BasicLayout::fields`].
const HAS_IDENTIFIER: u8 = 1;
const HAS_CPU: u8 = 2;
const HAS_PERIOD: u8 = 4;

/// The sample_type bits every [`BasicLayout`] has.
pub(crate) const BASIC_REQUIRED: u64 = st::IP | st::TID | st::TIME;
/// The sample_type bits a [`BasicLayout`] may have.
pub(crate) const BASIC_OPTIONAL: u64 = st::IDENTIFIER | st::CPU | st::PERIOD;

/// A sample layout `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]`, decoded at fixed offsets
/// (from [`SampleLayout::basic`]).
///
/// ```
/// use tailprof_perf_abi::{sample_type as st, Endian, SampleLayout};
/// // The recorder's default: IP TID TIME IDENTIFIER, 40-byte records.
/// let layout = SampleLayout::new(st::IP | st::TID | st::TIME | st::IDENTIFIER);
/// let basic = layout.basic().unwrap();
/// assert_eq!(basic.body_len(), 32);
/// let words: [u64; 4] = [77, 0x401000, 7 << 32 | 5, 999];
/// let body: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
/// let s = basic.decode(&body, Endian::Little).unwrap();
/// assert_eq!((s.identifier, s.ip, s.pid, s.tid, s.time), (Some(77), 0x401000, 5, 7, 999));
/// assert_eq!((s.cpu, s.period), (None, None));
/// // The ring's CPU and the attr's period stand in, decided per layout at compile time:
/// let cpu = basic.decode_with(&body, Endian::Little, |s| s.cpu.unwrap_or(3));
/// assert_eq!(cpu, Ok(3));
/// assert!(basic.decode(&body[..31], Endian::Little).is_err());
/// assert!(SampleLayout::new(st::IP | st::TID | st::TIME | st::ADDR).basic().is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BasicLayout {
    /// `HAS_IDENTIFIER | HAS_CPU | HAS_PERIOD`.
    fields: u8,
}

/// A sample of a [`BasicLayout`]; `None` where the layout lacks the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BasicSample {
    pub identifier: Option<u64>,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
}

impl SampleLayout {
    /// Whether samples are exactly `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]`, which
    /// [`SampleLayout::basic`] decodes at fixed offsets.
    #[inline(always)]
    pub const fn is_basic(&self) -> bool {
        self.sample_type() & !BASIC_OPTIONAL == BASIC_REQUIRED
    }

    /// The fixed-offset decoder for this layout, when it is
    /// `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]` ([`SampleLayout::is_basic`]).
    #[inline]
    pub const fn basic(&self) -> Option<BasicLayout> {
        if !self.is_basic() {
            return None;
        }
        let t = self.sample_type();
        let mut fields = 0;
        if t & st::IDENTIFIER != 0 {
            fields |= HAS_IDENTIFIER;
        }
        if t & st::CPU != 0 {
            fields |= HAS_CPU;
        }
        if t & st::PERIOD != 0 {
            fields |= HAS_PERIOD;
        }
        Some(BasicLayout { fields })
    }
}

/// Offsets in the body of a layout's IP, CPU and PERIOD, and its length (TID and TIME
/// follow IP at +8 and +16).
#[inline(always)]
const fn offsets(id: bool, cpu: bool, period: bool) -> (usize, usize, usize, usize) {
    let ip = if id { 8 } else { 0 };
    let cpu_at = ip + 24;
    let period_at = cpu_at + if cpu { 8 } else { 0 };
    (ip, cpu_at, period_at, period_at + if period { 8 } else { 0 })
}

/// One layout's decoder for a body starting at byte `AT` of `bytes`: one length check
/// (the length is a constant here), then loads at constant offsets. Bytes past the fields
/// are ignored (as [`crate::SampleView::rest`]).
#[inline(always)]
fn decode_in<const AT: usize, const BE: bool, const ID: bool, const CPU: bool, const PERIOD: bool>(bytes: &[u8]) -> Option<BasicSample> {
    let (ip, cpu_at, period_at, len) = offsets(ID, CPU, PERIOD);
    let (ip, cpu_at, period_at) = (AT + ip, AT + cpu_at, AT + period_at);
    let w = bytes.get(..AT + len)?;
    let u64_at = |o: usize| {
        let b: [u8; 8] = w[o..o + 8].try_into().expect("8 bytes");
        if BE {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    };
    let u32_at = |o: usize| {
        let b: [u8; 4] = w[o..o + 4].try_into().expect("4 bytes");
        if BE {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    Some(BasicSample {
        identifier: if ID { Some(u64_at(AT)) } else { None },
        ip: u64_at(ip),
        pid: u32_at(ip + 8),
        tid: u32_at(ip + 12),
        time: u64_at(ip + 16),
        cpu: if CPU { Some(u32_at(cpu_at)) } else { None },
        period: if PERIOD { Some(u64_at(period_at)) } else { None },
    })
}

impl BasicLayout {
    /// The layout has PERF_SAMPLE_IDENTIFIER (the body's first word).
    #[inline]
    pub const fn has_identifier(&self) -> bool {
        self.fields & HAS_IDENTIFIER != 0
    }

    /// The layout has PERF_SAMPLE_CPU.
    #[inline]
    pub const fn has_cpu(&self) -> bool {
        self.fields & HAS_CPU != 0
    }

    /// The layout has PERF_SAMPLE_PERIOD.
    #[inline]
    pub const fn has_period(&self) -> bool {
        self.fields & HAS_PERIOD != 0
    }

    /// The layout's `sample_type` bits.
    #[inline]
    pub const fn sample_type(&self) -> u64 {
        let mut t = BASIC_REQUIRED;
        if self.has_identifier() {
            t |= st::IDENTIFIER;
        }
        if self.has_cpu() {
            t |= st::CPU;
        }
        if self.has_period() {
            t |= st::PERIOD;
        }
        t
    }

    /// Bytes of the sample body (24 to 48; the record is 8 more, its header).
    #[inline]
    pub const fn body_len(&self) -> usize {
        offsets(self.has_identifier(), self.has_cpu(), self.has_period()).3
    }

    /// Decode a sample body (the record without its 8-byte header) written in `endian`.
    /// Bytes past the fields are ignored (as [`crate::SampleView::rest`]); a shorter body
    /// is the error [`SampleLayout::decode`] gives.
    #[inline(always)]
    pub fn decode(&self, body: &[u8], endian: Endian) -> Result<BasicSample, DecodeError> {
        self.decode_with(body, endian, |s| *s)
    }

    /// [`BasicLayout::decode`] that hands the sample to `f` inside the decoder of this
    /// layout and byte order, where which fields are present is known at compile time:
    /// `s.cpu.unwrap_or(ring_cpu)` in `f` costs nothing, not even a branch.
    #[inline(always)]
    pub fn decode_with<R>(&self, body: &[u8], endian: Endian, f: impl FnOnce(&BasicSample) -> R) -> Result<R, DecodeError> {
        self.decode_at::<0, R>(body, endian, f).ok_or_else(|| self.short(body.len()))
    }

    /// [`BasicLayout::decode_with`] of a whole record, its 8-byte header included (and
    /// not looked at: checking its type and size is the caller's part). For the
    /// recorder's hot loop, which has the record, not the body: `None` for a short record
    /// (it has no use for the error's details, so they are not worked out).
    #[inline(always)]
    pub fn decode_record_with<R>(&self, record: &[u8], endian: Endian, f: impl FnOnce(&BasicSample) -> R) -> Option<R> {
        self.decode_at::<HEADER_LEN, R>(record, endian, f)
    }

    /// The decoders of the eight layouts and two byte orders, for a body at byte `AT`.
    #[inline(always)]
    fn decode_at<const AT: usize, R>(&self, bytes: &[u8], endian: Endian, f: impl FnOnce(&BasicSample) -> R) -> Option<R> {
        macro_rules! one {
            ($be:literal, $id:literal, $cpu:literal, $period:literal) => {
                decode_in::<AT, $be, $id, $cpu, $period>(bytes).map(|s| f(&s))
            };
        }
        macro_rules! layouts {
            ($be:literal) => {
                match self.fields {
                    0 => one!($be, false, false, false),
                    HAS_IDENTIFIER => one!($be, true, false, false),
                    HAS_CPU => one!($be, false, true, false),
                    0b011 => one!($be, true, true, false),
                    HAS_PERIOD => one!($be, false, false, true),
                    0b101 => one!($be, true, false, true),
                    0b110 => one!($be, false, true, true),
                    _ => one!($be, true, true, true),
                }
            };
        }
        match endian {
            Endian::Little => layouts!(false),
            Endian::Big => layouts!(true),
        }
    }

    /// The error for a body of `len` bytes, shorter than the layout's: the general
    /// decoder's, naming the field the body ends in.
    #[cold]
    #[inline(never)]
    fn short(self, len: usize) -> DecodeError {
        SampleLayout::new(self.sample_type()).short_prefix(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::SampleData;

    const ENDIANS: [Endian; 2] = [Endian::Little, Endian::Big];

    /// The sample_type of combination `bits` (bit 0 IDENTIFIER, bit 1 CPU, bit 2 PERIOD).
    fn sample_type(bits: u8) -> u64 {
        let bit = |b: u8, v: u64| if bits & b != 0 { v } else { 0 };
        BASIC_REQUIRED | bit(1, st::IDENTIFIER) | bit(2, st::CPU) | bit(4, st::PERIOD)
    }

    /// Every value distinct and every byte of it different, so a wrong offset, width or
    /// byte order shows.
    fn data(bits: u8) -> SampleData {
        SampleData {
            identifier: Some(0x0102_0304_0506_0708),
            ip: Some(0xffff_8000_1122_3344),
            pid: Some(0x1020_3040),
            tid: Some(0x5060_7080),
            time: Some(0x0a0b_0c0d_0e0f_1011 + bits as u64),
            cpu: Some(0x2122_2324),
            period: Some(0x3132_3334_3536_3738),
            ..SampleData::default()
        }
    }

    /// All eight layouts in both byte orders: what `encode` wrote comes back, field for
    /// field, equal to the general decoder's view; bytes after the fields are ignored.
    #[test]
    fn every_layout_decodes_what_encode_wrote() {
        for bits in 0..8u8 {
            let t = sample_type(bits);
            let layout = SampleLayout::new(t);
            let basic = layout.basic().unwrap_or_else(|| panic!("{t:#x} is basic"));
            assert_eq!(basic.sample_type(), t);
            assert_eq!((basic.has_identifier(), basic.has_cpu(), basic.has_period()), (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0));
            assert_eq!(Some(basic.body_len() as u64 + 8), layout.fixed_sample_size());
            let d = data(bits);
            for e in ENDIANS {
                let body = d.encode(&layout, e);
                assert_eq!(body.len(), basic.body_len(), "{t:#x} {e:?}");
                let s = basic.decode(&body, e).unwrap();
                let want = BasicSample {
                    identifier: d.identifier.filter(|_| bits & 1 != 0),
                    ip: d.ip.unwrap(),
                    pid: d.pid.unwrap(),
                    tid: d.tid.unwrap(),
                    time: d.time.unwrap(),
                    cpu: d.cpu.filter(|_| bits & 2 != 0),
                    period: d.period.filter(|_| bits & 4 != 0),
                };
                assert_eq!(s, want, "{t:#x} {e:?}");
                let v = layout.decode(&body, e).unwrap();
                let general = BasicSample {
                    identifier: v.identifier(),
                    ip: v.ip().unwrap(),
                    pid: v.pid().unwrap(),
                    tid: v.tid().unwrap(),
                    time: v.time().unwrap(),
                    cpu: v.cpu(),
                    period: v.period(),
                };
                assert_eq!(s, general, "{t:#x} {e:?}");
                // The closure sees the same sample; absent fields take the caller's values.
                let filled = basic.decode_with(&body, e, |s| (s.cpu.unwrap_or(7), s.period.unwrap_or(4000)));
                assert_eq!(filled, Ok((want.cpu.unwrap_or(7), want.period.unwrap_or(4000))));
                let mut long = body.clone();
                long.extend_from_slice(&[0xee; 9]);
                assert_eq!(basic.decode(&long, e), Ok(want));
                // The whole record: the header is skipped, not read.
                let rec = d.encode_record(&layout, 2, e);
                assert_eq!(rec.len(), HEADER_LEN + body.len());
                assert_eq!(basic.decode_record_with(&rec, e, |s| *s), Some(want), "{t:#x} {e:?}");
                let mut odd = rec.clone();
                odd[..HEADER_LEN].fill(0xff);
                odd.extend_from_slice(&[0xee; 8]);
                assert_eq!(basic.decode_record_with(&odd, e, |s| *s), Some(want));
            }
        }
    }

    /// A body one byte short (or any shorter) is the general decoder's error, a record
    /// one byte short `None`; never a panic.
    #[test]
    fn short_bodies_are_errors() {
        for bits in 0..8u8 {
            let layout = SampleLayout::new(sample_type(bits));
            let basic = layout.basic().unwrap();
            for e in ENDIANS {
                let body = data(bits).encode(&layout, e);
                for n in 0..body.len() {
                    let err = basic.decode(&body[..n], e).unwrap_err();
                    assert!(matches!(err, DecodeError::Truncated { len, .. } if len == n), "{err}");
                    assert_eq!(Err(err), layout.decode(&body[..n], e).map(|_| ()), "{bits} {e:?} {n}");
                    assert_eq!(basic.decode_with(&body[..n], e, |_| panic!("no sample")), Err(err));
                }
                let rec = data(bits).encode_record(&layout, 0, e);
                for n in 0..rec.len() {
                    assert_eq!(basic.decode_record_with(&rec[..n], e, |_| panic!("no sample")), None::<()>, "{bits} {e:?} {n}");
                }
            }
        }
    }

    /// Only `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]` is basic: without a required field,
    /// or with any other, the general decoder does the work.
    #[test]
    fn other_layouts_are_not_basic() {
        for bits in 0..8u8 {
            let t = sample_type(bits);
            for missing in [st::IP, st::TID, st::TIME] {
                assert!(SampleLayout::new(t & !missing).basic().is_none());
            }
            for other in (0..64).map(|b| 1u64 << b).filter(|b| b & (BASIC_REQUIRED | BASIC_OPTIONAL) == 0) {
                assert!(SampleLayout::new(t | other).basic().is_none(), "{:#x}", t | other);
            }
        }
    }
}
