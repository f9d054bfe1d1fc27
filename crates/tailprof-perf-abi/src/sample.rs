//! The one PERF_RECORD_SAMPLE decoder: [`SampleLayout::decode`] walks a sample body
//! field by field in the kernel's order (`perf_event_open(2)`, "PERF_RECORD_SAMPLE") and
//! returns a [`SampleView`] that borrows the record for every variable-length part.
//!
//! Decoding is one bounds-checked walk that only reads the length words of the
//! variable-size fields (callchain, raw, branch stack, registers, user stack, aux, group
//! read) and notes where each field starts; the fields before the first variable-size
//! one sit at offsets the [`SampleLayout`] computed once. The view's accessors then read
//! what the caller asks for. A body shorter than its fields is a [`DecodeError`], never a
//! panic; bytes after the last field the layout explains are [`SampleView::rest`] (a
//! newer kernel's field, or a layout the caller described wrong).
//!
//! The layouts whose fields all sit at constant offsets, `[IDENTIFIER] IP TID TIME [CPU]
//! [PERIOD]` (the recorder's, by default `IP TID TIME IDENTIFIER`), have their own path
//! ([`crate::BasicLayout`], in `basic.rs`): one length check and loads at constant offsets.

use crate::consts::{read_format as rf, regs_abi, sample_type as st};
use crate::endian::{Endian, U64s};
use crate::layout::*;

/// Why a sample (or other record) could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("{field} needs {need} bytes at offset {at} of a {len}-byte sample")]
    Truncated { field: &'static str, at: usize, need: u64, len: usize },
    #[error("{field}: count {count} too large")]
    TooLarge { field: &'static str, count: u64 },
    #[error("record type {kind} is not a {expected} record")]
    WrongType { kind: u32, expected: &'static str },
}

/// PERF_SAMPLE_READ values: one counter, or a group (PERF_FORMAT_GROUP).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ReadValues<'a> {
    read_format: u64,
    /// The whole block as in the record.
    block: &'a [u8],
    endian: Endian,
}

/// One counter of a [`ReadValues`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadValue {
    pub value: u64,
    /// With PERF_FORMAT_ID.
    pub id: Option<u64>,
    /// With PERF_FORMAT_LOST.
    pub lost: Option<u64>,
}

impl<'a> ReadValues<'a> {
    fn word(&self, i: usize) -> u64 {
        // In bounds: the decoder sized `block` from `read_format`.
        self.endian.u64_at(self.block, 8 * i).unwrap_or(0)
    }

    #[inline]
    pub fn read_format(&self) -> u64 {
        self.read_format
    }

    #[inline]
    pub fn is_group(&self) -> bool {
        self.read_format & rf::GROUP != 0
    }

    /// Index of the first time word.
    fn times_at(&self) -> usize {
        1 // after `nr` (group) or `value` (single)
    }

    #[inline]
    pub fn time_enabled(&self) -> Option<u64> {
        (self.read_format & rf::TOTAL_TIME_ENABLED != 0).then(|| self.word(self.times_at()))
    }

    #[inline]
    pub fn time_running(&self) -> Option<u64> {
        let at = self.times_at() + (self.read_format & rf::TOTAL_TIME_ENABLED != 0) as usize;
        (self.read_format & rf::TOTAL_TIME_RUNNING != 0).then(|| self.word(at))
    }

    fn n_times(&self) -> usize {
        (self.read_format & rf::TOTAL_TIME_ENABLED != 0) as usize + (self.read_format & rf::TOTAL_TIME_RUNNING != 0) as usize
    }

    fn per_value(&self) -> usize {
        1 + (self.read_format & rf::ID != 0) as usize + (self.read_format & rf::LOST != 0) as usize
    }

    /// Counters in the block (1 without GROUP).
    #[inline]
    pub fn len(&self) -> usize {
        if self.is_group() {
            (self.block.len() / 8 - 1 - self.n_times()) / self.per_value()
        } else {
            1
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<ReadValue> {
        if i >= self.len() {
            return None;
        }
        let has_id = self.read_format & rf::ID != 0;
        let has_lost = self.read_format & rf::LOST != 0;
        // Single: value, [enabled], [running], [id], [lost].
        // Group: nr, [enabled], [running], { value, [id], [lost] } x nr.
        let (value_at, extra_at) = if self.is_group() {
            let at = 1 + self.n_times() + i * self.per_value();
            (at, at + 1)
        } else {
            (0, 1 + self.n_times())
        };
        Some(ReadValue {
            value: self.word(value_at),
            id: has_id.then(|| self.word(extra_at)),
            lost: has_lost.then(|| self.word(extra_at + has_id as usize)),
        })
    }

    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = ReadValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The block's bytes as in the record.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.block
    }
}

impl std::fmt::Debug for ReadValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadValues")
            .field("time_enabled", &self.time_enabled())
            .field("time_running", &self.time_running())
            .field("values", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

/// One `struct perf_branch_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BranchEntry {
    pub from: u64,
    pub to: u64,
    /// The packed bit fields (mispred, predicted, in_tx, abort, cycles, type, ...) as a
    /// `u64` in the records' byte order.
    pub flags: u64,
}

/// PERF_SAMPLE_BRANCH_STACK: `nr`, `[hw_idx]`, entries, `[counters]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BranchStack<'a> {
    /// With PERF_SAMPLE_BRANCH_HW_INDEX: index of the most recent branch in the hardware
    /// buffer (`-1` when unknown).
    pub hw_index: Option<u64>,
    /// `nr` × 24 bytes.
    entries: &'a [u8],
    /// With PERF_SAMPLE_BRANCH_COUNTERS: one word per entry.
    pub counters: Option<U64s<'a>>,
    endian: Endian,
}

impl<'a> BranchStack<'a> {
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len() / 24
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<BranchEntry> {
        let at = i.checked_mul(24)?;
        let e = self.endian;
        Some(BranchEntry {
            from: e.u64_at(self.entries, at)?,
            to: e.u64_at(self.entries, at + 8)?,
            flags: e.u64_at(self.entries, at + 16)?,
        })
    }

    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = BranchEntry> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The entries' bytes as in the record.
    #[inline]
    pub fn entry_bytes(&self) -> &'a [u8] {
        self.entries
    }
}

impl std::fmt::Debug for BranchStack<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BranchStack")
            .field("hw_index", &self.hw_index)
            .field("entries", &self.iter().collect::<Vec<_>>())
            .field("counters", &self.counters)
            .finish()
    }
}

/// A REGS_USER or REGS_INTR block: the ABI word and the registers of the attr's mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs<'a> {
    /// `PERF_SAMPLE_REGS_ABI_*` ([`crate::regs_abi`]); NONE means no registers follow.
    pub abi: u64,
    /// The attr's register mask (`sample_regs_user` / `sample_regs_intr`).
    pub mask: u64,
    /// One word per bit of `mask`, lowest register first (empty when `abi` is NONE).
    pub values: U64s<'a>,
}

impl Regs<'_> {
    /// Value of perf register number `reg` (e.g. `PERF_REG_X86_SP` = 7), if sampled.
    #[inline]
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1 << reg) == 0 {
            return None;
        }
        self.values.get((self.mask & ((1u64 << reg) - 1)).count_ones() as usize)
    }
}

/// PERF_SAMPLE_STACK_USER: a copy of the user stack from the stack pointer up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackUser<'a> {
    /// `size` bytes as the record holds them (0 for a sample without user registers).
    pub data: &'a [u8],
    /// How many of them the kernel could actually copy (`dyn_size`).
    pub dyn_size: u64,
}

impl<'a> StackUser<'a> {
    /// The bytes the kernel copied (`data[..dyn_size]`).
    #[inline]
    pub fn valid(&self) -> &'a [u8] {
        &self.data[..(self.dyn_size.min(self.data.len() as u64)) as usize]
    }
}

/// PERF_SAMPLE_WEIGHT or PERF_SAMPLE_WEIGHT_STRUCT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// PERF_SAMPLE_WEIGHT: one u64.
    Full(u64),
    /// PERF_SAMPLE_WEIGHT_STRUCT: `{ u32 var1_dw; u16 var2_w; u16 var3_w; }` in memory
    /// order. On x86, `var1_dw` is the (cache) latency, `var2_w` the instruction latency.
    Struct { var1_dw: u32, var2_w: u16, var3_w: u16 },
}

impl Weight {
    /// The value tailprof keeps as a sample's weight: the full word, or `var1_dw`.
    #[inline]
    pub fn value(&self) -> u64 {
        match *self {
            Weight::Full(w) => w,
            Weight::Struct { var1_dw, .. } => u64::from(var1_dw),
        }
    }
}

/// One decoded PERF_RECORD_SAMPLE: every field the layout has, read on demand from the
/// borrowed record (`None` where the layout does not have the field). Made by
/// [`SampleLayout::decode`], which has checked that every field lies inside the body.
#[derive(Clone, Copy)]
pub struct SampleView<'a> {
    body: &'a [u8],
    layout: &'a SampleLayout,
    endian: Endian,
    /// Where each field starts in `body` ([`ABSENT`] if the layout lacks it).
    off: [u16; FIELDS],
    /// Bytes the fields take (the rest is [`SampleView::rest`]).
    end: u16,
}

impl<'a> SampleView<'a> {
    #[inline(always)]
    fn at(&self, f: usize) -> Option<usize> {
        let o = self.off[f];
        (o != ABSENT).then_some(o as usize)
    }

    /// The word at `o` (validated by the decoder; 0 can only come from a bug).
    #[inline(always)]
    fn word(&self, o: usize) -> u64 {
        self.endian.u64_at(self.body, o).unwrap_or(0)
    }

    #[inline(always)]
    fn half(&self, o: usize) -> u32 {
        self.endian.u32_at(self.body, o).unwrap_or(0)
    }

    #[inline(always)]
    fn scalar(&self, f: usize) -> Option<u64> {
        self.at(f).map(|o| self.word(o))
    }

    /// `len` bytes at `o` (validated by the decoder).
    #[inline(always)]
    fn bytes(&self, o: usize, len: usize) -> &'a [u8] {
        self.body.get(o..o + len).unwrap_or(&[])
    }

    /// The layout the sample was decoded with.
    #[inline]
    pub fn layout(&self) -> &'a SampleLayout {
        self.layout
    }

    /// The byte order of the record.
    #[inline]
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// PERF_SAMPLE_IDENTIFIER (first word).
    #[inline]
    pub fn identifier(&self) -> Option<u64> {
        self.scalar(F_IDENTIFIER)
    }

    #[inline]
    pub fn ip(&self) -> Option<u64> {
        self.scalar(F_IP)
    }

    /// PERF_SAMPLE_TID: process id.
    #[inline]
    pub fn pid(&self) -> Option<u32> {
        self.at(F_TID).map(|o| self.half(o))
    }

    /// PERF_SAMPLE_TID: thread id.
    #[inline]
    pub fn tid(&self) -> Option<u32> {
        self.at(F_TID).map(|o| self.half(o + 4))
    }

    #[inline]
    pub fn time(&self) -> Option<u64> {
        self.scalar(F_TIME)
    }

    #[inline]
    pub fn addr(&self) -> Option<u64> {
        self.scalar(F_ADDR)
    }

    /// PERF_SAMPLE_ID.
    #[inline]
    pub fn id(&self) -> Option<u64> {
        self.scalar(F_ID)
    }

    #[inline]
    pub fn stream_id(&self) -> Option<u64> {
        self.scalar(F_STREAM_ID)
    }

    /// PERF_SAMPLE_CPU (its reserved half is dropped).
    #[inline]
    pub fn cpu(&self) -> Option<u32> {
        self.at(F_CPU).map(|o| self.half(o))
    }

    #[inline]
    pub fn period(&self) -> Option<u64> {
        self.scalar(F_PERIOD)
    }

    /// PERF_SAMPLE_READ values.
    #[inline]
    pub fn read(&self) -> Option<ReadValues<'a>> {
        let o = self.at(F_READ)?;
        let len = field_len_in(self.layout, self.endian, self.body, F_READ, o)?;
        Some(ReadValues { read_format: self.layout.read_format(), block: self.bytes(o, len), endian: self.endian })
    }

    /// PERF_SAMPLE_CALLCHAIN: addresses and `PERF_CONTEXT_*` markers
    /// ([`crate::context`]), leaf first.
    #[inline]
    pub fn callchain(&self) -> Option<U64s<'a>> {
        let o = self.at(F_CALLCHAIN)?;
        let nr = self.word(o) as usize;
        Some(U64s::new(self.bytes(o + 8, nr * 8), self.endian))
    }

    /// PERF_SAMPLE_RAW: the payload (e.g. a tracepoint's fields), padding included.
    #[inline]
    pub fn raw(&self) -> Option<&'a [u8]> {
        let o = self.at(F_RAW)?;
        Some(self.bytes(o + 4, self.half(o) as usize))
    }

    #[inline]
    pub fn branch_stack(&self) -> Option<BranchStack<'a>> {
        let o = self.at(F_BRANCH_STACK)?;
        let nr = self.word(o) as usize;
        let hw = self.layout.branch_hw_index();
        let hw_index = hw.then(|| self.word(o + 8));
        let entries_at = o + 8 + 8 * hw as usize;
        let counters = self.layout.branch_counters().then(|| U64s::new(self.bytes(entries_at + 24 * nr, 8 * nr), self.endian));
        Some(BranchStack { hw_index, entries: self.bytes(entries_at, 24 * nr), counters, endian: self.endian })
    }

    #[inline(always)]
    fn regs(&self, f: usize, mask: u64, count: u8) -> Option<Regs<'a>> {
        let o = self.at(f)?;
        let abi = self.word(o);
        let n = if abi == regs_abi::NONE { 0 } else { count as usize };
        Some(Regs { abi, mask, values: U64s::new(self.bytes(o + 8, 8 * n), self.endian) })
    }

    /// PERF_SAMPLE_REGS_USER.
    #[inline]
    pub fn regs_user(&self) -> Option<Regs<'a>> {
        self.regs(F_REGS_USER, self.layout.regs_user_mask(), self.layout.regs_user_count)
    }

    /// PERF_SAMPLE_STACK_USER.
    #[inline]
    pub fn stack_user(&self) -> Option<StackUser<'a>> {
        let o = self.at(F_STACK_USER)?;
        let size = self.word(o) as usize;
        let dyn_size = if size == 0 { 0 } else { self.word(o + 8 + size) };
        Some(StackUser { data: self.bytes(o + 8, size), dyn_size })
    }

    /// PERF_SAMPLE_WEIGHT or PERF_SAMPLE_WEIGHT_STRUCT.
    #[inline]
    pub fn weight(&self) -> Option<Weight> {
        let o = self.at(F_WEIGHT)?;
        if self.layout.sample_type() & st::WEIGHT_STRUCT != 0 {
            // The kernel refuses WEIGHT together with WEIGHT_STRUCT; if both are set the
            // one slot is read as the struct.
            let e = self.endian;
            let b = self.bytes(o, 8);
            let var1_dw = e.u32_at(b, 0).unwrap_or(0);
            let var2_w = e.u16(b.get(4..6).and_then(|x| x.try_into().ok()).unwrap_or([0; 2]));
            let var3_w = e.u16(b.get(6..8).and_then(|x| x.try_into().ok()).unwrap_or([0; 2]));
            Some(Weight::Struct { var1_dw, var2_w, var3_w })
        } else {
            Some(Weight::Full(self.word(o)))
        }
    }

    #[inline]
    pub fn data_src(&self) -> Option<u64> {
        self.scalar(F_DATA_SRC)
    }

    #[inline]
    pub fn transaction(&self) -> Option<u64> {
        self.scalar(F_TRANSACTION)
    }

    /// PERF_SAMPLE_REGS_INTR.
    #[inline]
    pub fn regs_intr(&self) -> Option<Regs<'a>> {
        self.regs(F_REGS_INTR, self.layout.regs_intr_mask(), self.layout.regs_intr_count)
    }

    #[inline]
    pub fn phys_addr(&self) -> Option<u64> {
        self.scalar(F_PHYS_ADDR)
    }

    #[inline]
    pub fn cgroup(&self) -> Option<u64> {
        self.scalar(F_CGROUP)
    }

    #[inline]
    pub fn data_page_size(&self) -> Option<u64> {
        self.scalar(F_DATA_PAGE_SIZE)
    }

    #[inline]
    pub fn code_page_size(&self) -> Option<u64> {
        self.scalar(F_CODE_PAGE_SIZE)
    }

    /// PERF_SAMPLE_AUX: the data (`size` bytes).
    #[inline]
    pub fn aux(&self) -> Option<&'a [u8]> {
        let o = self.at(F_AUX)?;
        Some(self.bytes(o + 8, self.word(o) as usize))
    }

    /// Bytes after the last field the layout explains (empty for a well-formed sample of
    /// a correctly described event).
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.body.get(self.end as usize..).unwrap_or(&[])
    }
}

impl std::fmt::Debug for SampleView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleView")
            .field("identifier", &self.identifier())
            .field("ip", &self.ip())
            .field("pid", &self.pid())
            .field("tid", &self.tid())
            .field("time", &self.time())
            .field("addr", &self.addr())
            .field("id", &self.id())
            .field("stream_id", &self.stream_id())
            .field("cpu", &self.cpu())
            .field("period", &self.period())
            .field("read", &self.read())
            .field("callchain", &self.callchain())
            .field("raw", &self.raw())
            .field("branch_stack", &self.branch_stack())
            .field("regs_user", &self.regs_user())
            .field("stack_user", &self.stack_user())
            .field("weight", &self.weight())
            .field("data_src", &self.data_src())
            .field("transaction", &self.transaction())
            .field("regs_intr", &self.regs_intr())
            .field("phys_addr", &self.phys_addr())
            .field("cgroup", &self.cgroup())
            .field("data_page_size", &self.data_page_size())
            .field("code_page_size", &self.code_page_size())
            .field("aux", &self.aux())
            .field("rest", &self.rest().len())
            .finish()
    }
}

/// Bytes of variable-size field `f` starting at `o` in `body`, from its length words;
/// `None` when a length word is missing or the size overflows. The one place that knows
/// how each variable-size field is framed (the decoder's walk and `read()` use it).
#[inline(always)]
fn field_len<const BE: bool>(l: &SampleLayout, body: &[u8], f: usize, o: usize) -> Option<usize> {
    let word = |at: usize| -> Option<u64> {
        let b: [u8; 8] = body.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if BE { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
    };
    let words = |n: u64| usize::try_from(n).ok()?.checked_mul(8);
    match f {
        F_READ => {
            let members = if l.read_format() & rf::GROUP != 0 { word(o)? } else { 1 };
            usize::try_from(l.read_len(members)).ok().filter(|&n| n != usize::MAX)
        }
        F_CALLCHAIN => words(word(o)?)?.checked_add(8),
        F_RAW => {
            let b: [u8; 4] = body.get(o..o.checked_add(4)?)?.try_into().ok()?;
            Some(4 + if BE { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) } as usize)
        }
        F_BRANCH_STACK => {
            let nr = word(o)?;
            let per = 3 + l.branch_counters() as u64;
            words(nr.checked_mul(per)?)?.checked_add(8 + 8 * l.branch_hw_index() as usize)
        }
        F_REGS_USER | F_REGS_INTR => {
            let n = if f == F_REGS_USER { l.regs_user_count } else { l.regs_intr_count };
            let n = if word(o)? == regs_abi::NONE { 0 } else { n as usize };
            Some(8 + 8 * n)
        }
        F_STACK_USER => {
            // perf's rule: a zero size has no dyn_size after it.
            let size = usize::try_from(word(o)?).ok()?;
            size.checked_add(if size == 0 { 8 } else { 16 })
        }
        F_AUX => usize::try_from(word(o)?).ok()?.checked_add(8),
        _ => Some(8),
    }
}

fn field_len_in(l: &SampleLayout, e: Endian, body: &[u8], f: usize, o: usize) -> Option<usize> {
    match e {
        Endian::Little => field_len::<false>(l, body, f, o),
        Endian::Big => field_len::<true>(l, body, f, o),
    }
}

impl SampleLayout {
    /// Decode a sample body (the record without its 8-byte header) written in `endian`.
    ///
    /// ```
    /// use tailprof_perf_abi::{sample_type as st, Endian, SampleLayout};
    /// let layout = SampleLayout::new(st::IP | st::TID | st::CALLCHAIN);
    /// let words: [u64; 5] = [0x401000, 7 << 32 | 5, 2, 0x401000, 0x402000];
    /// let body: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    /// let s = layout.decode(&body, Endian::Little).unwrap();
    /// assert_eq!((s.ip(), s.pid(), s.tid()), (Some(0x401000), Some(5), Some(7)));
    /// assert_eq!(s.callchain().unwrap().to_vec(), [0x401000, 0x402000]);
    /// assert!(layout.decode(&body[..20], Endian::Little).is_err());
    /// ```
    #[inline]
    pub fn decode<'a>(&'a self, body: &'a [u8], endian: Endian) -> Result<SampleView<'a>, DecodeError> {
        self.decode_with(body, endian, |v| *v)
    }

    /// [`SampleLayout::decode`] that hands the view to `f` where it was built, instead of
    /// returning it: for hot loops, where moving a view whose offsets were just written
    /// piecewise costs store-forwarding stalls (the recorder's general path went from
    /// ≈ 19 to ≈ 33 ns per sample that way).
    ///
    /// ```
    /// use tailprof_perf_abi::{sample_type as st, Endian, SampleLayout};
    /// let layout = SampleLayout::new(st::IP | st::CALLCHAIN);
    /// let body: Vec<u8> = [0x401000u64, 1, 0x402000].iter().flat_map(|w| w.to_le_bytes()).collect();
    /// let depth = layout.decode_with(&body, Endian::Little, |v| v.callchain().map_or(0, |c| c.len()));
    /// assert_eq!(depth, Ok(1));
    /// ```
    #[inline(always)]
    pub fn decode_with<'a, R>(&'a self, body: &'a [u8], endian: Endian, f: impl FnOnce(&SampleView<'a>) -> R) -> Result<R, DecodeError> {
        if body.len() < self.prefix_len as usize {
            return Err(self.short_prefix(body.len()));
        }
        if body.len() > u16::MAX as usize {
            return Err(DecodeError::TooLarge { field: "sample", count: body.len() as u64 });
        }
        let mut v = SampleView { body, layout: self, endian, off: self.prefix, end: self.prefix_len };
        if self.walk_mask != 0 {
            match endian {
                Endian::Little => self.walk::<false>(&mut v)?,
                Endian::Big => self.walk::<true>(&mut v)?,
            }
        }
        Ok(f(&v))
    }

    /// The error for a body shorter than the fixed-position fields.
    #[cold]
    #[inline(never)]
    pub(crate) fn short_prefix(&self, len: usize) -> DecodeError {
        // The field the body ends in: the last one starting at or before its end.
        let present = |f: &usize| self.prefix[*f] != ABSENT;
        let f = (0..FIELDS).rev().filter(present).find(|&f| self.prefix[f] as usize <= len).unwrap_or(F_IDENTIFIER);
        let at = (self.prefix[f] as usize).min(len);
        let end = (f + 1..FIELDS).filter(present).map(|g| self.prefix[g]).next().unwrap_or(self.prefix_len);
        DecodeError::Truncated { field: FIELD_NAMES[f], at, need: (end as usize).saturating_sub(at) as u64, len }
    }

    /// Note where each walked field starts, reading only length words. Unrolled over
    /// the field positions, so each step's framing is known at compile time.
    #[inline(always)]
    fn walk<const BE: bool>(&self, v: &mut SampleView<'_>) -> Result<(), DecodeError> {
        let body = v.body;
        let len = body.len();
        let mut at = v.end as usize;
        let t = self.walk_mask;
        macro_rules! step {
            ($f:expr) => {
                if t & FIELD_BITS[$f] != 0 {
                    let n = match field_len::<BE>(self, body, $f, at) {
                        Some(n) if n <= len - at => n,
                        n => return Err(Self::short_field($f, at, len, n)),
                    };
                    v.off[$f] = at as u16;
                    at += n;
                }
            };
        }
        step!(F_READ);
        step!(F_CALLCHAIN);
        step!(F_RAW);
        step!(F_BRANCH_STACK);
        step!(F_REGS_USER);
        step!(F_STACK_USER);
        step!(F_WEIGHT);
        step!(F_DATA_SRC);
        step!(F_TRANSACTION);
        step!(F_REGS_INTR);
        step!(F_PHYS_ADDR);
        step!(F_CGROUP);
        step!(F_DATA_PAGE_SIZE);
        step!(F_CODE_PAGE_SIZE);
        step!(F_AUX);
        v.end = at as u16;
        Ok(())
    }

    /// The error for walked field `f` at `at` that needs `n` bytes (`None`: a missing
    /// length word, or a size that does not fit in memory).
    #[cold]
    #[inline(never)]
    fn short_field(f: usize, at: usize, len: usize, n: Option<usize>) -> DecodeError {
        let need = match n {
            Some(n) => n as u64,
            None if at + 8 > len => 8,
            None => u64::MAX,
        };
        DecodeError::Truncated { field: FIELD_NAMES[f], at, need, len }
    }
}
