//! The fields tailprof keeps from a PERF_RECORD_SAMPLE body, decoded with the
//! workspace's one sample decoder (`tailprof_perf_abi`, shared with the recorder).
//!
//! `linux-perf-event-reader`'s `SampleRecord` does not expose WEIGHT, WEIGHT_STRUCT or
//! DATA_SRC (it reads past them), and it reads the PERF_SAMPLE_READ group layout the wrong
//! way round, which misplaces every later field of such samples; so samples are decoded
//! by `tailprof_perf_abi`. Everything else (file layout, record framing, sorting,
//! decompression, side-band records, attributes) comes from `linux-perf-data`.
//!
//! The event's layout is `tailprof_perf_abi::SampleLayout` (built once per event, cut to
//! the fields decoded here by [`decoded_layout`]); there is no second description of it.
//!
//! Only the fields up to DATA_SRC (in record order) are decoded: tailprof keeps none after
//! it, and REGS_INTR's size needs `sample_regs_intr`, which the event mapping does not
//! carry. Their bytes are left over ([`DecodedSample::trailing`]) and expected.

use crate::stacks::StackFields;
use tailprof_perf_abi::{branch_sample_type, read_format as rf, sample_type as st, Endian, SampleLayout};

/// sample_type bits whose fields come before or at DATA_SRC in a sample (the ones this
/// module decodes).
const DECODED_FIELDS: u64 = ((st::DATA_SRC << 1) - 1) | st::IDENTIFIER | st::WEIGHT_STRUCT;

/// The event's sample layout cut to the fields this module decodes (up to DATA_SRC, and
/// WEIGHT_STRUCT), built once per event.
pub(crate) fn decoded_layout(event: &SampleLayout) -> SampleLayout {
    SampleLayout::new(event.sample_type() & DECODED_FIELDS)
        .with_read_format(event.read_format())
        .with_branch_sample_type(event.branch_sample_type() & branch_sample_type::HW_INDEX)
        .with_regs_user(event.regs_user_mask())
}

/// The fields of one sample that tailprof keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DecodedSample {
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    pub regs: Vec<u64>,
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    /// The `u32` at offset 24 of the raw tracepoint record (`sched:sched_waking`'s `pid`,
    /// the wakee, in every kernel since 4.x), when the sample has one.
    pub raw_pid: Option<u32>,
    /// Bytes left over after the last field this decoder knows about. Non-zero only for
    /// fields past DATA_SRC (which are not decoded) or for layouts it cannot account for.
    pub trailing: usize,
}

/// Decode a sample body (the record without its 8-byte header); its stack fields go to
/// `stack` (cleared when the body cannot be decoded).
/// `layout` is [`decoded_layout`] of the sample's event.
pub(crate) fn decode_sample(
    data: &[u8],
    layout: &SampleLayout,
    endian: Endian,
    stack: &mut StackFields,
) -> Result<DecodedSample, tailprof_perf_abi::DecodeError> {
    stack.clear();
    let first = decode_with(data, layout, endian, stack)?;
    // The attr parser drops PERF_FORMAT_LOST; if the READ block would explain the
    // leftover bytes with per-value `lost` counters, the recording had it set.
    if layout.has(st::READ) && first.trailing != 0 && layout.read_format() & rf::LOST == 0 {
        let mut alt = StackFields::default();
        let with_lost = layout.with_read_format(layout.read_format() | rf::LOST);
        if let Ok(second) = decode_with(data, &with_lost, endian, &mut alt) {
            if second.trailing == 0 {
                *stack = alt;
                return Ok(second);
            }
        }
    }
    Ok(first)
}

fn decode_with(
    data: &[u8],
    layout: &SampleLayout,
    endian: Endian,
    stack: &mut StackFields,
) -> Result<DecodedSample, tailprof_perf_abi::DecodeError> {
    layout.decode_with(data, endian, |v| {
        stack.capture(v);
        DecodedSample {
            ip: v.ip(),
            pid: v.pid(),
            tid: v.tid(),
            time: v.time(),
            addr: v.addr(),
            id: v.identifier().or(v.id()),
            cpu: v.cpu(),
            period: v.period(),
            regs: v.regs_user().map(|r| r.values.to_vec()).unwrap_or_default(),
            weight: v.weight().map(|w| w.value()),
            data_src: v.data_src(),
            raw_pid: v.raw().and_then(|r| r.get(24..28)).map(|b| {
                let b: [u8; 4] = b.try_into().expect("4 bytes");
                endian.u32(b)
            }),
            trailing: v.rest().len(),
        }
    })
}

/// Which sample_type bits lie after DATA_SRC (their bytes legitimately trail).
pub(crate) fn has_fields_after_data_src(sample_type: u64) -> bool {
    sample_type & !DECODED_FIELDS != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_perf_abi::read_format::{GROUP as F_GROUP, ID as F_ID};
    use tailprof_perf_abi::sample_type::{
        ADDR as S_ADDR, CALLCHAIN as S_CALLCHAIN, CPU as S_CPU, DATA_SRC as S_DATA_SRC, IP as S_IP, RAW as S_RAW, READ as S_READ,
        REGS_USER as S_REGS_USER, STACK_USER as S_STACK_USER, TID as S_TID, TIME as S_TIME, WEIGHT as S_WEIGHT,
        WEIGHT_STRUCT as S_WEIGHT_STRUCT,
    };

    fn decode(body: &[u8], event: SampleLayout) -> Result<DecodedSample, tailprof_perf_abi::DecodeError> {
        decode_sample(body, &decoded_layout(&event), Endian::Little, &mut StackFields::default())
    }

    fn le(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn decodes_mem_sample_fields() {
        let layout = SampleLayout::new(S_IP | S_TID | S_TIME | S_ADDR | S_WEIGHT | S_DATA_SRC);
        let pidtid = (7u64 << 32) | 5; // pid 5, tid 7 (little endian: pid first)
        let body = le(&[0x401000, pidtid, 1000, 0xdead_beef, 321, 0x6800_0142]);
        let s = decode(&body, layout).unwrap();
        assert_eq!(s.ip, Some(0x401000));
        assert_eq!((s.pid, s.tid), (Some(5), Some(7)));
        assert_eq!(s.time, Some(1000));
        assert_eq!(s.addr, Some(0xdead_beef));
        assert_eq!(s.weight, Some(321));
        assert_eq!(s.data_src, Some(0x6800_0142));
        assert_eq!(s.trailing, 0);
    }

    #[test]
    fn weight_struct_uses_var1_dw() {
        let layout = SampleLayout::new(S_IP | S_WEIGHT_STRUCT);
        // var1_dw = 250, var2_w = 17, var3_w = 3
        let w = 250u64 | (17u64 << 32) | (3u64 << 48);
        let s = decode(&le(&[1, w]), layout).unwrap();
        assert_eq!(s.weight, Some(250));
    }

    #[test]
    fn big_endian_pid_tid() {
        let layout = decoded_layout(&SampleLayout::new(S_TID | S_CPU));
        let mut body = Vec::new();
        body.extend_from_slice(&5u32.to_be_bytes());
        body.extend_from_slice(&7u32.to_be_bytes());
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(&0u32.to_be_bytes());
        let s = decode_sample(&body, &layout, Endian::Big, &mut StackFields::default()).unwrap();
        assert_eq!((s.pid, s.tid, s.cpu), (Some(5), Some(7), Some(3)));
    }

    #[test]
    fn regs_callchain_group_read_and_raw() {
        let layout = SampleLayout::new(S_IP | S_READ | S_CALLCHAIN | S_RAW | S_REGS_USER | S_WEIGHT)
            .with_read_format(F_GROUP | F_ID)
            .with_regs_user(0b1010_0001);
        let mut body = le(&[0x10]); // ip
        body.extend(le(&[2, 100, 1, 200, 2])); // group read: nr=2, (value,id) x2
        body.extend(le(&[3, 0xa, 0xb, 0xc])); // callchain
        body.extend_from_slice(&4u32.to_le_bytes()); // raw: size 4 + 4 bytes = one u64
        body.extend_from_slice(&[1, 2, 3, 4]);
        body.extend(le(&[2, 11, 22, 33])); // regs: abi 64, three regs
        body.extend(le(&[99])); // weight
        let s = decode(&body, layout).unwrap();
        assert_eq!(s.regs, vec![11, 22, 33]);
        assert_eq!(s.weight, Some(99));
        assert_eq!(s.trailing, 0);
    }

    #[test]
    fn read_with_lost_entries_is_detected_from_length() {
        let layout = SampleLayout::new(S_IP | S_READ | S_WEIGHT).with_read_format(F_ID); // the attr parser dropped F_LOST
        let body = le(&[0x10, 5, 77, 0, 42]); // value, id, lost, then weight
        let s = decode(&body, layout).unwrap();
        assert_eq!(s.weight, Some(42));
        assert_eq!(s.trailing, 0);
    }

    #[test]
    fn truncated_and_hostile_bodies_are_errors() {
        let layout = SampleLayout::new(S_IP | S_TID | S_TIME | S_CALLCHAIN);
        assert!(decode(&le(&[1, 2]), layout).is_err());
        assert!(decode(&le(&[1, 2, 3, u64::MAX]), layout).is_err());
        let stack = SampleLayout::new(S_STACK_USER);
        assert!(decode(&le(&[u64::MAX]), stack).is_err());
        let regs = SampleLayout::new(S_REGS_USER).with_regs_user(u64::MAX);
        assert!(decode(&le(&[2, 1, 2]), regs).is_err());
    }
}
