//! Side-band records (MMAP, MMAP2, COMM, FORK, EXIT, LOST, LOST_SAMPLES, THROTTLE), decoded
//! by `tailprof_perf_abi`'s side-band decoder into records.

use tailprof_format::{Comm, CpuMode, LossKind, Lost, Mmap, Record, Task, Throttle};
use tailprof_perf_abi::{Endian, SideBand};

use super::{record_type, Decoded, Decoder, ParseError};

impl Decoder {
    /// [`Decoder::decode`] of a checked record that is not a sample (decoded by
    /// `tailprof_perf_abi`'s side-band decoder).
    pub(super) fn decode_sideband(
        &self,
        rec: &[u8],
        kind: u32,
        misc: u16,
        event: Option<u16>,
        ring_cpu: u32,
    ) -> Result<Decoded, ParseError> {
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
    use super::*;
    use crate::parse::test_records::*;
    use crate::parse::*;

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
}
