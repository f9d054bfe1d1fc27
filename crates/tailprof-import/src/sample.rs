//! Decoding the fields tailprof keeps from a PERF_RECORD_SAMPLE body.
//!
//! `linux-perf-event-reader`'s `SampleRecord` does not expose WEIGHT, WEIGHT_STRUCT or
//! DATA_SRC (it reads past them), and it reads the PERF_SAMPLE_READ group layout the wrong
//! way round, which misplaces every later field of such samples. So the sample body is
//! walked here, field by field in the order of `perf_event_open(2)`, with bounds checks on
//! every read. Everything else (file layout, record framing, sorting, decompression,
//! side-band records, attributes) comes from `linux-perf-data`.

// perf_event_attr.sample_type bits (include/uapi/linux/perf_event.h).
pub(crate) const S_IP: u64 = 1 << 0;
pub(crate) const S_TID: u64 = 1 << 1;
pub(crate) const S_TIME: u64 = 1 << 2;
pub(crate) const S_ADDR: u64 = 1 << 3;
pub(crate) const S_READ: u64 = 1 << 4;
pub(crate) const S_CALLCHAIN: u64 = 1 << 5;
pub(crate) const S_ID: u64 = 1 << 6;
pub(crate) const S_CPU: u64 = 1 << 7;
pub(crate) const S_PERIOD: u64 = 1 << 8;
pub(crate) const S_STREAM_ID: u64 = 1 << 9;
pub(crate) const S_RAW: u64 = 1 << 10;
pub(crate) const S_BRANCH_STACK: u64 = 1 << 11;
pub(crate) const S_REGS_USER: u64 = 1 << 12;
pub(crate) const S_STACK_USER: u64 = 1 << 13;
pub(crate) const S_WEIGHT: u64 = 1 << 14;
pub(crate) const S_DATA_SRC: u64 = 1 << 15;
pub(crate) const S_IDENTIFIER: u64 = 1 << 16;
pub(crate) const S_WEIGHT_STRUCT: u64 = 1 << 24;

// read_format bits.
const F_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const F_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const F_ID: u64 = 1 << 2;
const F_GROUP: u64 = 1 << 3;
const F_LOST: u64 = 1 << 4;

/// What the decoder needs to know about the sample's event.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SampleLayout {
    pub sample_type: u64,
    /// read_format as far as the attr parser keeps it (it drops PERF_FORMAT_LOST; the
    /// decoder finds out from the record length whether LOST entries are present).
    pub read_format: u64,
    /// branch_sample_type has PERF_SAMPLE_BRANCH_HW_INDEX.
    pub branch_hw_index: bool,
    pub regs_user_mask: u64,
    pub big_endian: bool,
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
    /// Bytes left over after the last field this decoder knows about. Non-zero only for
    /// fields past DATA_SRC (which are not decoded) or for layouts it cannot account for.
    pub trailing: usize,
}

struct Cur<'a> {
    d: &'a [u8],
    at: usize,
    be: bool,
}

impl Cur<'_> {
    fn take(&mut self, n: u64, what: &str) -> Result<&[u8], String> {
        let n = usize::try_from(n).map_err(|_| format!("{what}: size {n} too large"))?;
        let end = self.at.checked_add(n).filter(|&e| e <= self.d.len()).ok_or_else(|| {
            format!("{what} needs {n} bytes at offset {} of a {}-byte sample", self.at, self.d.len())
        })?;
        let s = &self.d[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let be = self.be;
        let b: [u8; 8] = self.take(8, what)?.try_into().expect("8 bytes");
        Ok(if be { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
    }
    /// Two u32 packed in one u64 slot (pid/tid, cpu/res), in memory order.
    fn u32_pair(&mut self, what: &str) -> Result<(u32, u32), String> {
        let be = self.be;
        let b = self.take(8, what)?;
        let f = |x: &[u8]| {
            let a: [u8; 4] = x.try_into().expect("4 bytes");
            if be { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) }
        };
        Ok((f(&b[..4]), f(&b[4..])))
    }
    fn skip_u64s(&mut self, n: u64, what: &str) -> Result<(), String> {
        let bytes = n.checked_mul(8).ok_or_else(|| format!("{what}: count {n} too large"))?;
        self.take(bytes, what).map(|_| ())
    }
}

/// Size in u64 words of a PERF_SAMPLE_READ block, given its leading `nr` (group case).
fn read_words(read_format: u64, cur: &mut Cur) -> Result<u64, String> {
    let extra = u64::from(read_format & F_TOTAL_TIME_ENABLED != 0) + u64::from(read_format & F_TOTAL_TIME_RUNNING != 0);
    let per_value = 1 + u64::from(read_format & F_ID != 0) + u64::from(read_format & F_LOST != 0);
    if read_format & F_GROUP != 0 {
        let nr = cur.u64("read group count")?;
        let vals = nr.checked_mul(per_value).ok_or("read group count too large")?;
        Ok(extra + vals) // `nr` itself already consumed
    } else {
        Ok(extra + per_value)
    }
}

/// Decode a sample body (the record without its 8-byte header).
pub(crate) fn decode_sample(data: &[u8], layout: &SampleLayout) -> Result<DecodedSample, String> {
    let first = decode_with(data, layout, layout.read_format)?;
    // The attr parser drops PERF_FORMAT_LOST; if the READ block would explain the
    // leftover bytes with per-value `lost` counters, the recording had it set.
    if layout.sample_type & S_READ != 0 && first.trailing != 0 && layout.read_format & F_LOST == 0 {
        if let Ok(second) = decode_with(data, layout, layout.read_format | F_LOST) {
            if second.trailing == 0 {
                return Ok(second);
            }
        }
    }
    Ok(first)
}

fn decode_with(data: &[u8], layout: &SampleLayout, read_format: u64) -> Result<DecodedSample, String> {
    let st = layout.sample_type;
    let mut c = Cur { d: data, at: 0, be: layout.big_endian };
    let mut s = DecodedSample::default();
    let has = |bit: u64| st & bit != 0;

    if has(S_IDENTIFIER) {
        s.id = Some(c.u64("identifier")?);
    }
    if has(S_IP) {
        s.ip = Some(c.u64("ip")?);
    }
    if has(S_TID) {
        let (pid, tid) = c.u32_pair("pid/tid")?;
        s.pid = Some(pid);
        s.tid = Some(tid);
    }
    if has(S_TIME) {
        s.time = Some(c.u64("time")?);
    }
    if has(S_ADDR) {
        s.addr = Some(c.u64("addr")?);
    }
    if has(S_ID) {
        let id = c.u64("id")?;
        s.id = s.id.or(Some(id));
    }
    if has(S_STREAM_ID) {
        c.u64("stream_id")?;
    }
    if has(S_CPU) {
        s.cpu = Some(c.u32_pair("cpu")?.0);
    }
    if has(S_PERIOD) {
        s.period = Some(c.u64("period")?);
    }
    if has(S_READ) {
        let words = read_words(read_format, &mut c)?;
        c.skip_u64s(words, "read values")?;
    }
    if has(S_CALLCHAIN) {
        let nr = c.u64("callchain length")?;
        c.skip_u64s(nr, "callchain")?;
    }
    if has(S_RAW) {
        // u32 size, then `size` bytes; the kernel pads so that the u32 plus the data keep
        // the record u64-aligned, and `size` includes that padding.
        let be = c.be;
        let b: [u8; 4] = c.take(4, "raw size")?.try_into().expect("4 bytes");
        let size = if be { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) };
        c.take(u64::from(size), "raw data")?;
    }
    if has(S_BRANCH_STACK) {
        let nr = c.u64("branch stack length")?;
        if layout.branch_hw_index {
            c.u64("branch hw_idx")?;
        }
        let words = nr.checked_mul(3).ok_or("branch stack length too large")?;
        c.skip_u64s(words, "branch stack")?;
    }
    if has(S_REGS_USER) {
        let abi = c.u64("user regs abi")?;
        if abi != 0 {
            let mask = layout.regs_user_mask;
            s.regs.reserve(mask.count_ones() as usize);
            for _ in 0..mask.count_ones() {
                s.regs.push(c.u64("user regs")?);
            }
        }
    }
    if has(S_STACK_USER) {
        let size = c.u64("user stack size")?;
        c.take(size, "user stack")?;
        if size != 0 {
            c.u64("user stack dyn_size")?;
        }
    }
    if has(S_WEIGHT_STRUCT) {
        // union perf_sample_weight { u64 full; struct { u32 var1_dw; u16 var2_w; u16 var3_w; } }
        // var1_dw is the first 32 bits in memory order and holds the full (cache) latency.
        let (var1_dw, _) = c.u32_pair("weight struct")?;
        s.weight = Some(u64::from(var1_dw));
    } else if has(S_WEIGHT) {
        s.weight = Some(c.u64("weight")?);
    }
    if has(S_DATA_SRC) {
        s.data_src = Some(c.u64("data_src")?);
    }
    s.trailing = data.len() - c.at;
    Ok(s)
}

/// Which sample_type bits lie after DATA_SRC (their bytes legitimately trail).
pub(crate) fn has_fields_after_data_src(sample_type: u64) -> bool {
    let known = ((1u64 << 16) - 1) | S_IDENTIFIER | S_WEIGHT_STRUCT;
    sample_type & !known != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn decodes_mem_sample_fields() {
        let layout = SampleLayout {
            sample_type: S_IP | S_TID | S_TIME | S_ADDR | S_WEIGHT | S_DATA_SRC,
            ..Default::default()
        };
        let pidtid = (7u64 << 32) | 5; // pid 5, tid 7 (little endian: pid first)
        let body = le(&[0x401000, pidtid, 1000, 0xdead_beef, 321, 0x6800_0142]);
        let s = decode_sample(&body, &layout).unwrap();
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
        let layout = SampleLayout { sample_type: S_IP | S_WEIGHT_STRUCT, ..Default::default() };
        // var1_dw = 250, var2_w = 17, var3_w = 3
        let w = 250u64 | (17u64 << 32) | (3u64 << 48);
        let s = decode_sample(&le(&[1, w]), &layout).unwrap();
        assert_eq!(s.weight, Some(250));
    }

    #[test]
    fn big_endian_pid_tid() {
        let layout = SampleLayout { sample_type: S_TID | S_CPU, big_endian: true, ..Default::default() };
        let mut body = Vec::new();
        body.extend_from_slice(&5u32.to_be_bytes());
        body.extend_from_slice(&7u32.to_be_bytes());
        body.extend_from_slice(&3u32.to_be_bytes());
        body.extend_from_slice(&0u32.to_be_bytes());
        let s = decode_sample(&body, &layout).unwrap();
        assert_eq!((s.pid, s.tid, s.cpu), (Some(5), Some(7), Some(3)));
    }

    #[test]
    fn regs_callchain_group_read_and_raw() {
        let layout = SampleLayout {
            sample_type: S_IP | S_READ | S_CALLCHAIN | S_RAW | S_REGS_USER | S_WEIGHT,
            read_format: F_GROUP | F_ID,
            regs_user_mask: 0b1010_0001,
            ..Default::default()
        };
        let mut body = le(&[0x10]); // ip
        body.extend(le(&[2, 100, 1, 200, 2])); // group read: nr=2, (value,id) x2
        body.extend(le(&[3, 0xa, 0xb, 0xc])); // callchain
        body.extend_from_slice(&4u32.to_le_bytes()); // raw: size 4 + 4 bytes = one u64
        body.extend_from_slice(&[1, 2, 3, 4]);
        body.extend(le(&[2, 11, 22, 33])); // regs: abi 64, three regs
        body.extend(le(&[99])); // weight
        let s = decode_sample(&body, &layout).unwrap();
        assert_eq!(s.regs, vec![11, 22, 33]);
        assert_eq!(s.weight, Some(99));
        assert_eq!(s.trailing, 0);
    }

    #[test]
    fn read_with_lost_entries_is_detected_from_length() {
        let layout = SampleLayout {
            sample_type: S_IP | S_READ | S_WEIGHT,
            read_format: F_ID, // the attr parser dropped F_LOST
            ..Default::default()
        };
        let body = le(&[0x10, 5, 77, 0, 42]); // value, id, lost, then weight
        let s = decode_sample(&body, &layout).unwrap();
        assert_eq!(s.weight, Some(42));
        assert_eq!(s.trailing, 0);
    }

    #[test]
    fn truncated_and_hostile_bodies_are_errors() {
        let layout = SampleLayout { sample_type: S_IP | S_TID | S_TIME | S_CALLCHAIN, ..Default::default() };
        assert!(decode_sample(&le(&[1, 2]), &layout).is_err());
        assert!(decode_sample(&le(&[1, 2, 3, u64::MAX]), &layout).is_err());
        let stack = SampleLayout { sample_type: S_STACK_USER, ..Default::default() };
        assert!(decode_sample(&le(&[u64::MAX]), &stack).is_err());
        let regs = SampleLayout { sample_type: S_REGS_USER, regs_user_mask: u64::MAX, ..Default::default() };
        assert!(decode_sample(&le(&[2, 1, 2]), &regs).is_err());
    }
}
