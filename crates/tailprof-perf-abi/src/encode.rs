//! The inverse of the decoder, for tests and tools that need raw records: an owned
//! [`SampleData`] written in a [`SampleLayout`]'s order, in either byte order.

use crate::consts::{read_format as rf, record_type, sample_type as st, HEADER_LEN};
use crate::endian::Endian;
use crate::layout::SampleLayout;
use crate::record::RecordHeader;
use crate::sample::{BranchEntry, ReadValue, SampleView, Weight};

/// PERF_SAMPLE_READ values, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadData {
    pub time_enabled: Option<u64>,
    pub time_running: Option<u64>,
    /// One value without PERF_FORMAT_GROUP; `id` / `lost` as `read_format` says.
    pub values: Vec<ReadValue>,
}

/// A branch stack, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BranchData {
    pub hw_index: Option<u64>,
    pub entries: Vec<BranchEntry>,
    /// With PERF_SAMPLE_BRANCH_COUNTERS: one per entry.
    pub counters: Option<Vec<u64>>,
}

/// A register block, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegsData {
    pub abi: u64,
    pub values: Vec<u64>,
}

/// A user-stack copy, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackData {
    pub data: Vec<u8>,
    pub dyn_size: u64,
}

/// Every field of a sample, owned: what [`SampleView`] borrows. Fields the layout does not
/// have are ignored by [`SampleData::encode`]; fields it has but that are `None` are
/// written as zeros (empty for variable-length ones).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SampleData {
    pub identifier: Option<u64>,
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    pub read: Option<ReadData>,
    pub callchain: Option<Vec<u64>>,
    /// Written with its `u32 size`; padded with zeros so the record stays 8-byte aligned.
    pub raw: Option<Vec<u8>>,
    pub branch_stack: Option<BranchData>,
    pub regs_user: Option<RegsData>,
    pub stack_user: Option<StackData>,
    pub weight: Option<Weight>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub regs_intr: Option<RegsData>,
    pub phys_addr: Option<u64>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
    pub aux: Option<Vec<u8>>,
}

fn pad8(out: &mut Vec<u8>, from: usize) {
    while (out.len() - from) % 8 != 0 {
        out.push(0);
    }
}

impl SampleData {
    /// A copy of a decoded sample.
    pub fn from_view(v: &SampleView<'_>) -> SampleData {
        SampleData {
            identifier: v.identifier(),
            ip: v.ip(),
            pid: v.pid(),
            tid: v.tid(),
            time: v.time(),
            addr: v.addr(),
            id: v.id(),
            stream_id: v.stream_id(),
            cpu: v.cpu(),
            period: v.period(),
            read: v.read().map(|r| ReadData { time_enabled: r.time_enabled(), time_running: r.time_running(), values: r.iter().collect() }),
            callchain: v.callchain().map(|c| c.to_vec()),
            raw: v.raw().map(|r| r.to_vec()),
            branch_stack: v.branch_stack().map(|b| BranchData {
                hw_index: b.hw_index,
                entries: b.iter().collect(),
                counters: b.counters.map(|c| c.to_vec()),
            }),
            regs_user: v.regs_user().map(|r| RegsData { abi: r.abi, values: r.values.to_vec() }),
            stack_user: v.stack_user().map(|s| StackData { data: s.data.to_vec(), dyn_size: s.dyn_size }),
            weight: v.weight(),
            data_src: v.data_src(),
            transaction: v.transaction(),
            regs_intr: v.regs_intr().map(|r| RegsData { abi: r.abi, values: r.values.to_vec() }),
            phys_addr: v.phys_addr(),
            cgroup: v.cgroup(),
            data_page_size: v.data_page_size(),
            code_page_size: v.code_page_size(),
            aux: v.aux().map(|a| a.to_vec()),
        }
    }

    /// The sample body (no header) as the kernel would write it for `layout`.
    pub fn encode(&self, layout: &SampleLayout, endian: Endian) -> Vec<u8> {
        let mut out = Vec::new();
        let t = layout.sample_type();
        let has = |bit: u64| t & bit != 0;
        let w = |out: &mut Vec<u8>, v: u64| endian.put_u64(out, v);
        let pair = |out: &mut Vec<u8>, a: u32, b: u32| {
            endian.put_u32(out, a);
            endian.put_u32(out, b);
        };
        let regs = |out: &mut Vec<u8>, r: &Option<RegsData>| {
            let r = r.clone().unwrap_or_default();
            endian.put_u64(out, r.abi);
            for v in &r.values {
                endian.put_u64(out, *v);
            }
        };
        if has(st::IDENTIFIER) {
            w(&mut out, self.identifier.unwrap_or(0));
        }
        if has(st::IP) {
            w(&mut out, self.ip.unwrap_or(0));
        }
        if has(st::TID) {
            pair(&mut out, self.pid.unwrap_or(0), self.tid.unwrap_or(0));
        }
        if has(st::TIME) {
            w(&mut out, self.time.unwrap_or(0));
        }
        if has(st::ADDR) {
            w(&mut out, self.addr.unwrap_or(0));
        }
        if has(st::ID) {
            w(&mut out, self.id.unwrap_or(0));
        }
        if has(st::STREAM_ID) {
            w(&mut out, self.stream_id.unwrap_or(0));
        }
        if has(st::CPU) {
            pair(&mut out, self.cpu.unwrap_or(0), 0);
        }
        if has(st::PERIOD) {
            w(&mut out, self.period.unwrap_or(0));
        }
        if has(st::READ) {
            let r = self.read.clone().unwrap_or_default();
            let f = layout.read_format();
            let group = f & rf::GROUP != 0;
            let one = ReadValue::default();
            if group {
                w(&mut out, r.values.len() as u64);
            } else {
                w(&mut out, r.values.first().unwrap_or(&one).value);
            }
            if f & rf::TOTAL_TIME_ENABLED != 0 {
                w(&mut out, r.time_enabled.unwrap_or(0));
            }
            if f & rf::TOTAL_TIME_RUNNING != 0 {
                w(&mut out, r.time_running.unwrap_or(0));
            }
            let values = if group { &r.values[..] } else { std::slice::from_ref(r.values.first().unwrap_or(&one)) };
            for v in values {
                if group {
                    w(&mut out, v.value);
                }
                if f & rf::ID != 0 {
                    w(&mut out, v.id.unwrap_or(0));
                }
                if f & rf::LOST != 0 {
                    w(&mut out, v.lost.unwrap_or(0));
                }
            }
        }
        if has(st::CALLCHAIN) {
            let c = self.callchain.clone().unwrap_or_default();
            w(&mut out, c.len() as u64);
            for ip in c {
                w(&mut out, ip);
            }
        }
        if has(st::RAW) {
            let raw = self.raw.clone().unwrap_or_default();
            let padded = (raw.len() + 4).div_ceil(8) * 8 - 4;
            endian.put_u32(&mut out, padded as u32);
            out.extend_from_slice(&raw);
            out.resize(out.len() + padded - raw.len(), 0);
        }
        if has(st::BRANCH_STACK) {
            let b = self.branch_stack.clone().unwrap_or_default();
            w(&mut out, b.entries.len() as u64);
            if layout.branch_hw_index() {
                w(&mut out, b.hw_index.unwrap_or(0));
            }
            for e in &b.entries {
                w(&mut out, e.from);
                w(&mut out, e.to);
                w(&mut out, e.flags);
            }
            if layout.branch_counters() {
                let c = b.counters.unwrap_or_default();
                for i in 0..b.entries.len() {
                    w(&mut out, c.get(i).copied().unwrap_or(0));
                }
            }
        }
        if has(st::REGS_USER) {
            regs(&mut out, &self.regs_user);
        }
        if has(st::STACK_USER) {
            let s = self.stack_user.clone().unwrap_or_default();
            w(&mut out, s.data.len().div_ceil(8) as u64 * 8);
            let from = out.len();
            out.extend_from_slice(&s.data);
            pad8(&mut out, from);
            if !s.data.is_empty() {
                w(&mut out, s.dyn_size);
            }
        }
        if has(st::WEIGHT_STRUCT) {
            let (a, b, c) = match self.weight {
                Some(Weight::Struct { var1_dw, var2_w, var3_w }) => (var1_dw, var2_w, var3_w),
                Some(Weight::Full(x)) => (x as u32, 0, 0),
                None => (0, 0, 0),
            };
            endian.put_u32(&mut out, a);
            endian.put_u16(&mut out, b);
            endian.put_u16(&mut out, c);
        } else if has(st::WEIGHT) {
            w(&mut out, self.weight.map_or(0, |x| x.value()));
        }
        if has(st::DATA_SRC) {
            w(&mut out, self.data_src.unwrap_or(0));
        }
        if has(st::TRANSACTION) {
            w(&mut out, self.transaction.unwrap_or(0));
        }
        if has(st::REGS_INTR) {
            regs(&mut out, &self.regs_intr);
        }
        if has(st::PHYS_ADDR) {
            w(&mut out, self.phys_addr.unwrap_or(0));
        }
        if has(st::CGROUP) {
            w(&mut out, self.cgroup.unwrap_or(0));
        }
        if has(st::DATA_PAGE_SIZE) {
            w(&mut out, self.data_page_size.unwrap_or(0));
        }
        if has(st::CODE_PAGE_SIZE) {
            w(&mut out, self.code_page_size.unwrap_or(0));
        }
        if has(st::AUX) {
            let a = self.aux.clone().unwrap_or_default();
            w(&mut out, a.len().div_ceil(8) as u64 * 8);
            let from = out.len();
            out.extend_from_slice(&a);
            pad8(&mut out, from);
        }
        out
    }

    /// A whole PERF_RECORD_SAMPLE (header with `misc` and the size, then the body).
    pub fn encode_record(&self, layout: &SampleLayout, misc: u16, endian: Endian) -> Vec<u8> {
        let body = self.encode(layout, endian);
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        let size = u16::try_from(HEADER_LEN + body.len()).unwrap_or(u16::MAX);
        RecordHeader { kind: record_type::SAMPLE, misc, size }.encode(endian, &mut out);
        out.extend_from_slice(&body);
        out
    }
}
