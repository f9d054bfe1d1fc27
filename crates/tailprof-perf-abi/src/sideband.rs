//! The side-band records (`PERF_RECORD_MMAP`, `MMAP2`, `COMM`, `FORK`, `EXIT`, `LOST`,
//! `LOST_SAMPLES`, `THROTTLE`, `UNTHROTTLE`), decoded once for the recorder (its rings,
//! host byte order) and `import` (perf.data, either byte order): [`SampleLayout::decode_side_band`].
//!
//! Borrowed and bounded: strings are slices of the record up to their NUL (or the end of
//! the body), every fixed field is length-checked, nothing allocates and nothing panics on
//! any input.

use crate::consts::{misc, record_type, HEADER_LEN};
use crate::endian::Endian;
use crate::layout::SampleLayout;
use crate::record::{RecordHeader, SampleId};
use crate::sample::DecodeError;

/// Bytes of an MMAP2 record's build-id area (`u8 build_id_size; u8 __reserved_1;
/// u16 __reserved_2; u8 build_id[20]`), the union with `maj, min, ino, ino_generation`.
const MMAP2_UNION: usize = 24;
/// The largest build-id an MMAP2 record can carry.
pub const MAX_MMAP2_BUILD_ID: usize = 20;

/// A PERF_RECORD_MMAP or MMAP2 record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapRecord<'a> {
    pub pid: u32,
    pub tid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// MMAP2's `prot` (0 for MMAP).
    pub prot: u32,
    /// MMAP2 with PERF_RECORD_MISC_MMAP_BUILD_ID: the build-id (1 to 20 bytes).
    pub build_id: Option<&'a [u8]>,
    /// The build-id flag was set, but the union holds device/inode data (its size byte
    /// is over 20 or its reserved bytes are not zero): a kernel quirk when another
    /// recorder of the same mappings set `attr.build_id`. Read as device/inode.
    pub bogus_build_id_flag: bool,
    /// The file name, without its NUL and padding.
    pub filename: &'a [u8],
}

/// PERF_RECORD_FORK / EXIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskRecord {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
}

/// A decoded side-band record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideBand<'a> {
    Mmap(MmapRecord<'a>),
    Comm {
        pid: u32,
        tid: u32,
        /// PERF_RECORD_MISC_COMM_EXEC.
        exec: bool,
        /// Without its NUL and padding.
        comm: &'a [u8],
    },
    Fork(TaskRecord),
    Exit(TaskRecord),
    /// Records lost to a full ring (`id` of the event whose ring it was).
    Lost {
        id: u64,
        count: u64,
    },
    /// Samples the PMU dropped.
    LostSamples {
        count: u64,
    },
    Throttle {
        throttled: bool,
        time: u64,
        id: u64,
        stream_id: u64,
    },
}

/// Bounds-checked reader over a record body.
struct Body<'a> {
    b: &'a [u8],
    p: usize,
    endian: Endian,
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let s = self.p.checked_add(n).and_then(|end| self.b.get(self.p..end));
        let Some(s) = s else {
            return Err(DecodeError::Truncated { field, at: HEADER_LEN + self.p, need: n as u64, len: HEADER_LEN + self.b.len() });
        };
        self.p += n;
        Ok(s)
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(self.endian.u64(self.take(8, field)?.try_into().expect("8 bytes")))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(self.endian.u32(self.take(4, field)?.try_into().expect("4 bytes")))
    }
    /// The rest of the body up to its first NUL.
    fn cstr(&mut self) -> &'a [u8] {
        let s = self.b.get(self.p..).unwrap_or(&[]);
        self.p = self.b.len();
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }
}

impl SampleLayout {
    /// Decode a whole side-band record (header included; its `sample_id` trailer as this
    /// layout says). `Ok(None)` for record types that are not side-band records this
    /// decoder knows (samples, switches, AUX, KSYMBOL, ...).
    ///
    /// ```
    /// use tailprof_perf_abi::{record_type, Endian, SampleLayout, SideBand};
    /// let mut rec = Vec::new();
    /// rec.extend_from_slice(&record_type::COMM.to_le_bytes());
    /// rec.extend_from_slice(&0u16.to_le_bytes());
    /// rec.extend_from_slice(&24u16.to_le_bytes());
    /// rec.extend_from_slice(&7u32.to_le_bytes());
    /// rec.extend_from_slice(&8u32.to_le_bytes());
    /// rec.extend_from_slice(b"app\0\0\0\0\0");
    /// let (r, _) = SampleLayout::new(0).decode_side_band(&rec, Endian::Little).unwrap().unwrap();
    /// assert_eq!(r, SideBand::Comm { pid: 7, tid: 8, exec: false, comm: b"app" });
    /// ```
    pub fn decode_side_band<'a>(&self, rec: &'a [u8], endian: Endian) -> Result<Option<(SideBand<'a>, SampleId)>, DecodeError> {
        let h = RecordHeader::parse(rec, endian)?;
        if !matches!(
            h.kind,
            record_type::MMAP
                | record_type::MMAP2
                | record_type::COMM
                | record_type::FORK
                | record_type::EXIT
                | record_type::LOST
                | record_type::LOST_SAMPLES
                | record_type::THROTTLE
                | record_type::UNTHROTTLE
        ) {
            return Ok(None);
        }
        let (body, id) = self.split_sample_id(rec, endian)?;
        let mut c = Body { b: body, p: 0, endian };
        let r = match h.kind {
            record_type::MMAP | record_type::MMAP2 => {
                let pid = c.u32("pid")?;
                let tid = c.u32("tid")?;
                let start = c.u64("addr")?;
                let len = c.u64("len")?;
                let pgoff = c.u64("pgoff")?;
                let (mut prot, mut build_id, mut bogus_build_id_flag) = (0, None, false);
                if h.kind == record_type::MMAP2 {
                    let u = c.take(MMAP2_UNION, "maj/min/ino or build-id")?;
                    if h.misc & misc::MMAP_BUILD_ID != 0 {
                        let n = usize::from(u[0]);
                        if n > MAX_MMAP2_BUILD_ID || u[1..4].iter().any(|&b| b != 0) {
                            bogus_build_id_flag = true;
                        } else if n > 0 {
                            build_id = Some(&u[4..4 + n]);
                        }
                    }
                    prot = c.u32("prot")?;
                    c.u32("flags")?;
                }
                let filename = c.cstr();
                SideBand::Mmap(MmapRecord { pid, tid, start, len, pgoff, prot, build_id, bogus_build_id_flag, filename })
            }
            record_type::COMM => {
                let pid = c.u32("pid")?;
                let tid = c.u32("tid")?;
                SideBand::Comm { pid, tid, exec: h.misc & misc::COMM_EXEC != 0, comm: c.cstr() }
            }
            record_type::FORK | record_type::EXIT => {
                let t =
                    TaskRecord { pid: c.u32("pid")?, ppid: c.u32("ppid")?, tid: c.u32("tid")?, ptid: c.u32("ptid")?, time: c.u64("time")? };
                if h.kind == record_type::FORK {
                    SideBand::Fork(t)
                } else {
                    SideBand::Exit(t)
                }
            }
            record_type::LOST => SideBand::Lost { id: c.u64("id")?, count: c.u64("lost")? },
            record_type::LOST_SAMPLES => SideBand::LostSamples { count: c.u64("lost")? },
            _ => SideBand::Throttle {
                throttled: h.kind == record_type::THROTTLE,
                time: c.u64("time")?,
                id: c.u64("id")?,
                stream_id: c.u64("stream_id")?,
            },
        };
        Ok(Some((r, id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample_type as st;

    fn rec(kind: u32, misc: u16, body: &[u8], endian: Endian) -> Vec<u8> {
        let mut v = Vec::new();
        RecordHeader { kind, misc, size: (HEADER_LEN + body.len()) as u16 }.encode(endian, &mut v);
        v.extend_from_slice(body);
        v
    }

    fn mmap2_body(union: [u8; 24], endian: Endian, trailer: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        endian.put_u32(&mut b, 42);
        endian.put_u32(&mut b, 43);
        for w in [0x5555_0000_0000u64, 0x2000, 0x1000] {
            endian.put_u64(&mut b, w);
        }
        b.extend(union);
        endian.put_u32(&mut b, 5);
        endian.put_u32(&mut b, 2);
        b.extend(b"/usr/bin/prog\0\0\0");
        for &w in trailer {
            endian.put_u64(&mut b, w);
        }
        b
    }

    #[test]
    fn mmap2_build_id_and_the_bogus_flag_quirk() {
        let l = SampleLayout::new(st::TIME).with_sample_id_all(true);
        for endian in [Endian::Little, Endian::Big] {
            let mut u = [0u8; 24];
            u[0] = 20;
            u[4..].copy_from_slice(&[7; 20]);
            let r = rec(record_type::MMAP2, misc::MMAP_BUILD_ID | misc::USER, &mmap2_body(u, endian, &[99]), endian);
            let (sb, id) = l.decode_side_band(&r, endian).unwrap().unwrap();
            let SideBand::Mmap(m) = sb else { panic!("{sb:?}") };
            assert_eq!((m.pid, m.tid, m.start, m.len, m.pgoff, m.prot), (42, 43, 0x5555_0000_0000, 0x2000, 0x1000, 5));
            assert_eq!((m.build_id, m.bogus_build_id_flag, m.filename), (Some(&[7u8; 20][..]), false, &b"/usr/bin/prog"[..]));
            assert_eq!(id.time, Some(99));
            // The flag over maj/min/ino: size byte 254 (little endian maj), or reserved
            // bytes set (big endian maj).
            let mut inode = [0u8; 24];
            inode[0] = 254;
            inode[1] = 1;
            let r = rec(record_type::MMAP2, misc::MMAP_BUILD_ID, &mmap2_body(inode, endian, &[1]), endian);
            let SideBand::Mmap(m) = l.decode_side_band(&r, endian).unwrap().unwrap().0 else { panic!() };
            assert_eq!((m.build_id, m.bogus_build_id_flag), (None, true));
            // No flag: device/inode.
            let r = rec(record_type::MMAP2, 0, &mmap2_body(inode, endian, &[1]), endian);
            let SideBand::Mmap(m) = l.decode_side_band(&r, endian).unwrap().unwrap().0 else { panic!() };
            assert_eq!((m.build_id, m.bogus_build_id_flag), (None, false));
        }
    }

    #[test]
    fn task_lost_throttle_and_other_kinds() {
        let l = SampleLayout::new(0);
        let e = Endian::Little;
        let mut b = Vec::new();
        for x in [1u32, 2, 3, 4] {
            e.put_u32(&mut b, x);
        }
        e.put_u64(&mut b, 500);
        let r = rec(record_type::EXIT, 0, &b, e);
        let (sb, _) = l.decode_side_band(&r, e).unwrap().unwrap();
        assert_eq!(sb, SideBand::Exit(TaskRecord { pid: 1, ppid: 2, tid: 3, ptid: 4, time: 500 }));
        let mut b = Vec::new();
        for x in [600u64, 9, 10] {
            e.put_u64(&mut b, x);
        }
        let r = rec(record_type::UNTHROTTLE, 0, &b, e);
        let (sb, _) = l.decode_side_band(&r, e).unwrap().unwrap();
        assert_eq!(sb, SideBand::Throttle { throttled: false, time: 600, id: 9, stream_id: 10 });
        let r = rec(record_type::LOST, 0, &b[..16], e);
        let (sb, _) = l.decode_side_band(&r, e).unwrap().unwrap();
        assert_eq!(sb, SideBand::Lost { id: 600, count: 9 });
        assert_eq!(l.decode_side_band(&rec(record_type::SAMPLE, 0, &b, e), e).unwrap(), None);
        assert_eq!(l.decode_side_band(&rec(record_type::SWITCH, 0, &b, e), e).unwrap(), None);
    }

    /// Every prefix and every byte flip of valid records: errors, never a panic.
    #[test]
    fn hostile_side_band_records_never_panic() {
        let layouts = [SampleLayout::new(0), SampleLayout::new(st::TID | st::TIME | st::IDENTIFIER).with_sample_id_all(true)];
        for endian in [Endian::Little, Endian::Big] {
            let mut u = [0u8; 24];
            u[0] = 20;
            let mut records = vec![rec(record_type::MMAP2, misc::MMAP_BUILD_ID, &mmap2_body(u, endian, &[1, 2, 3]), endian)];
            for kind in [
                record_type::MMAP,
                record_type::COMM,
                record_type::FORK,
                record_type::LOST,
                record_type::LOST_SAMPLES,
                record_type::THROTTLE,
            ] {
                records.push(rec(kind, 0, &[0xff; 56], endian));
            }
            for r in &records {
                for l in &layouts {
                    for n in 0..=r.len() {
                        let _ = l.decode_side_band(&r[..n], endian);
                    }
                    for i in 0..r.len() {
                        let mut m = r.clone();
                        m[i] ^= 0xa5;
                        let _ = l.decode_side_band(&m, endian);
                    }
                }
            }
        }
    }
}
