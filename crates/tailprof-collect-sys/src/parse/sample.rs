//! Samples: the plain fast path ([`PlainSample`]) and the general decode into a caller's
//! [`Sample`].

use tailprof_format::{CpuMode, Sample, StackId, StackStatus};
use tailprof_perf_abi::Endian;

use super::{record_type, Decoder, ParseError, PlainSample, HEADER_LEN};

impl Decoder {
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

    /// Decode a sample into `s` (every field is overwritten). `ring_cpu` is used when
    /// the sample does not carry PERF_SAMPLE_CPU.
    #[inline]
    pub fn decode_sample(&self, rec: &[u8], event: u16, ring_cpu: u32, s: &mut Sample) -> Result<(), ParseError> {
        let (_, misc) = Self::check(rec)?;
        self.fill_sample(rec, misc, event, ring_cpu, s)
    }

    /// [`Decoder::decode_sample`] of a record whose header was checked.
    #[inline(always)]
    pub(super) fn fill_sample(&self, rec: &[u8], misc: u16, event: u16, ring_cpu: u32, s: &mut Sample) -> Result<(), ParseError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::sample_type as st;
    use crate::parse::test_records::*;
    use crate::parse::*;

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
}
