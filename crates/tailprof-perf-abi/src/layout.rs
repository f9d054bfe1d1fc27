//! [`SampleLayout`]: what decides the byte layout of an event's records, and the sizes
//! that follow from it (a sample record, the `sample_id` trailer of side-band records).

use crate::consts::{branch_sample_type as bst, read_format as rf, sample_type as st, HEADER_LEN};

/// The `perf_event_attr` fields that decide how an event's records are laid out, and
/// what follows from them once (where each fixed-position sample field sits).
///
/// ```
/// use tailprof_perf_abi::{sample_type as st, SampleLayout};
/// let layout = SampleLayout::new(st::IDENTIFIER | st::IP | st::TID | st::TIME | st::CPU | st::PERIOD)
///     .with_sample_id_all(true);
/// assert_eq!(layout.fixed_sample_size(), Some(56));
/// assert_eq!(layout.sample_id_len(), 32); // TID, TIME, CPU, IDENTIFIER
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SampleLayout {
    sample_type: u64,
    read_format: u64,
    branch_sample_type: u64,
    regs_user_mask: u64,
    regs_intr_mask: u64,
    sample_id_all: bool,
    /// Offsets in the sample body of the fields before the first variable-size one
    /// ([`ABSENT`] for the others), so decoding starts its walk there.
    pub(crate) prefix: [u16; FIELDS],
    /// Bytes of those fields.
    pub(crate) prefix_len: u16,
    /// sample_type bits of the fields the decoder walks (those present from the first
    /// variable-size one on).
    pub(crate) walk_mask: u64,
    /// Registers in `regs_user_mask` / `regs_intr_mask`.
    pub(crate) regs_user_count: u8,
    pub(crate) regs_intr_count: u8,
}

impl Default for SampleLayout {
    fn default() -> Self {
        SampleLayout::new(0)
    }
}

/// Sample fields in the kernel's order; WEIGHT and WEIGHT_STRUCT share one position.
pub(crate) const FIELDS: usize = 24;
pub(crate) const F_IDENTIFIER: usize = 0;
pub(crate) const F_IP: usize = 1;
pub(crate) const F_TID: usize = 2;
pub(crate) const F_TIME: usize = 3;
pub(crate) const F_ADDR: usize = 4;
pub(crate) const F_ID: usize = 5;
pub(crate) const F_STREAM_ID: usize = 6;
pub(crate) const F_CPU: usize = 7;
pub(crate) const F_PERIOD: usize = 8;
pub(crate) const F_READ: usize = 9;
pub(crate) const F_CALLCHAIN: usize = 10;
pub(crate) const F_RAW: usize = 11;
pub(crate) const F_BRANCH_STACK: usize = 12;
pub(crate) const F_REGS_USER: usize = 13;
pub(crate) const F_STACK_USER: usize = 14;
pub(crate) const F_WEIGHT: usize = 15;
pub(crate) const F_DATA_SRC: usize = 16;
pub(crate) const F_TRANSACTION: usize = 17;
pub(crate) const F_REGS_INTR: usize = 18;
pub(crate) const F_PHYS_ADDR: usize = 19;
pub(crate) const F_CGROUP: usize = 20;
pub(crate) const F_DATA_PAGE_SIZE: usize = 21;
pub(crate) const F_CODE_PAGE_SIZE: usize = 22;
pub(crate) const F_AUX: usize = 23;

/// The sample_type bit(s) of each field position.
pub(crate) const FIELD_BITS: [u64; FIELDS] = [
    st::IDENTIFIER,
    st::IP,
    st::TID,
    st::TIME,
    st::ADDR,
    st::ID,
    st::STREAM_ID,
    st::CPU,
    st::PERIOD,
    st::READ,
    st::CALLCHAIN,
    st::RAW,
    st::BRANCH_STACK,
    st::REGS_USER,
    st::STACK_USER,
    st::WEIGHT | st::WEIGHT_STRUCT,
    st::DATA_SRC,
    st::TRANSACTION,
    st::REGS_INTR,
    st::PHYS_ADDR,
    st::CGROUP,
    st::DATA_PAGE_SIZE,
    st::CODE_PAGE_SIZE,
    st::AUX,
];

/// Names of the fields, for errors.
pub(crate) const FIELD_NAMES: [&str; FIELDS] = [
    "identifier",
    "ip",
    "pid/tid",
    "time",
    "addr",
    "id",
    "stream_id",
    "cpu",
    "period",
    "read values",
    "callchain",
    "raw data",
    "branch stack",
    "user regs",
    "user stack",
    "weight",
    "data_src",
    "transaction",
    "intr regs",
    "phys_addr",
    "cgroup",
    "data_page_size",
    "code_page_size",
    "aux data",
];

/// A field that is not in a layout's fixed-position table.
pub(crate) const ABSENT: u16 = u16::MAX;

/// Sizes of a sample's variable-length parts, for [`SampleLayout::sample_record_size`].
/// Zero for everything is a sample with empty variable parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VariableSizes {
    /// PERF_SAMPLE_READ with PERF_FORMAT_GROUP: counters in the group.
    pub read_group_members: u64,
    /// PERF_SAMPLE_CALLCHAIN: entries, PERF_CONTEXT_* markers included.
    pub callchain_entries: u64,
    /// PERF_SAMPLE_RAW: payload bytes (the kernel pads `u32 size` + payload to 8 bytes).
    pub raw_bytes: u64,
    /// PERF_SAMPLE_BRANCH_STACK: branch entries.
    pub branch_entries: u64,
    /// PERF_SAMPLE_STACK_USER: bytes of user stack copied (`attr.sample_stack_user`).
    pub user_stack_bytes: u64,
    /// PERF_SAMPLE_AUX: bytes of AUX data.
    pub aux_bytes: u64,
}

/// Fields of a sample that always take one `u64` slot (TID and CPU are two `u32`s).
const ONE_WORD: u64 = st::IDENTIFIER
    | st::IP
    | st::TID
    | st::TIME
    | st::ADDR
    | st::ID
    | st::STREAM_ID
    | st::CPU
    | st::PERIOD
    | st::WEIGHT
    | st::WEIGHT_STRUCT
    | st::DATA_SRC
    | st::TRANSACTION
    | st::PHYS_ADDR
    | st::CGROUP
    | st::DATA_PAGE_SIZE
    | st::CODE_PAGE_SIZE;

/// Fields whose size depends on the record (or, for READ, on `read_format`).
const VARIABLE: u64 = st::CALLCHAIN | st::RAW | st::BRANCH_STACK | st::REGS_USER | st::STACK_USER | st::REGS_INTR | st::AUX;

impl SampleLayout {
    /// A layout with only `sample_type` set; add the rest with the `with_*` methods.
    #[inline]
    pub const fn new(sample_type: u64) -> SampleLayout {
        SampleLayout {
            sample_type,
            read_format: 0,
            branch_sample_type: 0,
            regs_user_mask: 0,
            regs_intr_mask: 0,
            sample_id_all: false,
            prefix: [ABSENT; FIELDS],
            prefix_len: 0,
            walk_mask: 0,
            regs_user_count: 0,
            regs_intr_count: 0,
        }
        .derive()
    }

    #[inline]
    pub const fn with_read_format(mut self, read_format: u64) -> SampleLayout {
        self.read_format = read_format;
        self.derive()
    }

    #[inline]
    pub const fn with_branch_sample_type(mut self, branch_sample_type: u64) -> SampleLayout {
        self.branch_sample_type = branch_sample_type;
        self.derive()
    }

    #[inline]
    pub const fn with_regs_user(mut self, mask: u64) -> SampleLayout {
        self.regs_user_mask = mask;
        self.derive()
    }

    #[inline]
    pub const fn with_regs_intr(mut self, mask: u64) -> SampleLayout {
        self.regs_intr_mask = mask;
        self.derive()
    }

    #[inline]
    pub const fn with_sample_id_all(mut self, on: bool) -> SampleLayout {
        self.sample_id_all = on;
        self
    }

    /// Fill the fixed-position table: every field up to the first whose size depends on
    /// the record (READ only with GROUP).
    const fn derive(mut self) -> SampleLayout {
        let group_read = self.read_format & rf::GROUP != 0;
        let mut prefix = [ABSENT; FIELDS];
        let mut at = 0usize;
        let mut f = 0;
        while f < FIELDS {
            if self.sample_type & FIELD_BITS[f] != 0 {
                let size = match f {
                    F_READ if !group_read => self.read_len(1) as usize,
                    F_READ | F_CALLCHAIN | F_RAW | F_BRANCH_STACK | F_REGS_USER | F_STACK_USER | F_REGS_INTR | F_AUX => break,
                    _ => 8,
                };
                prefix[f] = at as u16;
                at += size;
            }
            f += 1;
        }
        let mut walk_mask = 0;
        while f < FIELDS {
            walk_mask |= self.sample_type & FIELD_BITS[f];
            f += 1;
        }
        self.prefix = prefix;
        self.prefix_len = at as u16;
        self.walk_mask = walk_mask;
        self.regs_user_count = self.regs_user_mask.count_ones() as u8;
        self.regs_intr_count = self.regs_intr_mask.count_ones() as u8;
        self
    }

    /// `PERF_SAMPLE_*` bits ([`crate::sample_type`]).
    #[inline]
    pub const fn sample_type(&self) -> u64 {
        self.sample_type
    }

    /// `PERF_FORMAT_*` bits ([`crate::read_format`]), for PERF_SAMPLE_READ.
    #[inline]
    pub const fn read_format(&self) -> u64 {
        self.read_format
    }

    /// `PERF_SAMPLE_BRANCH_*` bits; only [`crate::branch_sample_type`]'s matter here.
    #[inline]
    pub const fn branch_sample_type(&self) -> u64 {
        self.branch_sample_type
    }

    /// `sample_regs_user`: which registers a REGS_USER block holds.
    #[inline]
    pub const fn regs_user_mask(&self) -> u64 {
        self.regs_user_mask
    }

    /// `sample_regs_intr`: which registers a REGS_INTR block holds.
    #[inline]
    pub const fn regs_intr_mask(&self) -> u64 {
        self.regs_intr_mask
    }

    /// `sample_id_all`: side-band records end with a `sample_id` trailer.
    #[inline]
    pub const fn sample_id_all(&self) -> bool {
        self.sample_id_all
    }

    /// Whether `sample_type` has all of `bits`.
    #[inline(always)]
    pub const fn has(&self, bits: u64) -> bool {
        self.sample_type & bits == bits
    }

    /// The branch stack starts with `hw_idx` (PERF_SAMPLE_BRANCH_HW_INDEX).
    #[inline]
    pub const fn branch_hw_index(&self) -> bool {
        self.branch_sample_type & bst::HW_INDEX != 0
    }

    /// The branch entries are followed by per-entry counters (PERF_SAMPLE_BRANCH_COUNTERS).
    #[inline]
    pub const fn branch_counters(&self) -> bool {
        self.branch_sample_type & bst::COUNTERS != 0
    }

    /// Bytes of a PERF_SAMPLE_READ block with `members` counters (ignored without
    /// GROUP, where there is one). Saturates instead of overflowing.
    #[inline]
    pub const fn read_len(&self, members: u64) -> u64 {
        let f = self.read_format;
        let times = ((f & rf::TOTAL_TIME_ENABLED != 0) as u64) + ((f & rf::TOTAL_TIME_RUNNING != 0) as u64);
        let per = 1 + ((f & rf::ID != 0) as u64) + ((f & rf::LOST != 0) as u64);
        if f & rf::GROUP != 0 {
            per.saturating_mul(members).saturating_add(1 + times).saturating_mul(8)
        } else {
            8 * (times + per)
        }
    }

    /// Bytes of a whole PERF_RECORD_SAMPLE (the 8-byte header included) with the given
    /// variable parts. REGS_USER / REGS_INTR are counted with their registers present
    /// (a sample in a kernel thread has no user registers: 8 bytes instead).
    ///
    /// ```
    /// use tailprof_perf_abi::{sample_type as st, SampleLayout, VariableSizes};
    /// let base = st::IDENTIFIER | st::IP | st::TID | st::TIME | st::CPU | st::PERIOD;
    /// // Header + 6 words (the recorder's default, IP TID TIME IDENTIFIER, is 40: 4 words).
    /// assert_eq!(SampleLayout::new(base).sample_record_size(&VariableSizes::default()), 56);
    /// // Plus two user registers (ABI word + 2) and a 32-entry callchain (nr + 32).
    /// let l = SampleLayout::new(base | st::REGS_USER | st::CALLCHAIN).with_regs_user(0b11);
    /// let v = VariableSizes { callchain_entries: 32, ..VariableSizes::default() };
    /// assert_eq!(l.sample_record_size(&v), 56 + 24 + 8 * 33);
    /// ```
    #[inline]
    pub const fn sample_record_size(&self, var: &VariableSizes) -> u64 {
        /// Bytes of `n` bytes padded to whole words, saturating.
        const fn padded(n: u64) -> u64 {
            n.div_ceil(8).saturating_mul(8)
        }
        let t = self.sample_type;
        let mut n = HEADER_LEN as u64 + 8 * (t & ONE_WORD).count_ones() as u64;
        if t & st::READ != 0 {
            n = n.saturating_add(self.read_len(var.read_group_members));
        }
        if t & st::CALLCHAIN != 0 {
            n = n.saturating_add(var.callchain_entries.saturating_add(1).saturating_mul(8));
        }
        if t & st::RAW != 0 {
            n = n.saturating_add(padded(var.raw_bytes.saturating_add(4)));
        }
        if t & st::BRANCH_STACK != 0 {
            let per = if self.branch_counters() { 4 } else { 3 };
            let words = var.branch_entries.saturating_mul(per).saturating_add(1 + self.branch_hw_index() as u64);
            n = n.saturating_add(words.saturating_mul(8));
        }
        if t & st::REGS_USER != 0 {
            n = n.saturating_add(8 * (1 + self.regs_user_mask.count_ones() as u64));
        }
        if t & st::STACK_USER != 0 {
            let stack = if var.user_stack_bytes == 0 { 8 } else { padded(var.user_stack_bytes).saturating_add(16) };
            n = n.saturating_add(stack);
        }
        if t & st::REGS_INTR != 0 {
            n = n.saturating_add(8 * (1 + self.regs_intr_mask.count_ones() as u64));
        }
        if t & st::AUX != 0 {
            n = n.saturating_add(padded(var.aux_bytes).saturating_add(8));
        }
        n
    }

    /// Bytes of every PERF_RECORD_SAMPLE (header included) when the layout has no
    /// variable-length field, else `None`.
    #[inline]
    pub const fn fixed_sample_size(&self) -> Option<u64> {
        if self.sample_type & VARIABLE != 0 || (self.sample_type & st::READ != 0 && self.read_format & rf::GROUP != 0) {
            return None;
        }
        Some(self.sample_record_size(&VariableSizes {
            read_group_members: 0,
            callchain_entries: 0,
            raw_bytes: 0,
            branch_entries: 0,
            user_stack_bytes: 0,
            aux_bytes: 0,
        }))
    }

    /// Bytes of the `sample_id` trailer of side-band records (0 without `sample_id_all`).
    #[inline]
    pub const fn sample_id_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        let ids = st::TID | st::TIME | st::ID | st::STREAM_ID | st::CPU | st::IDENTIFIER;
        8 * (self.sample_type & ids).count_ones() as usize
    }

    /// Offset of TIME in a sample body (after the header), if the layout has it.
    #[inline]
    pub const fn sample_time_offset(&self) -> Option<usize> {
        if self.sample_type & st::TIME == 0 {
            return None;
        }
        Some(8 * (self.sample_type & (st::IDENTIFIER | st::IP | st::TID)).count_ones() as usize)
    }

    /// Offset of TIME in a `sample_id` trailer, counted back from the record's end.
    #[inline]
    pub const fn sample_id_time_from_end(&self) -> Option<usize> {
        if !self.sample_id_all || self.sample_type & st::TIME == 0 {
            return None;
        }
        let after = st::ID | st::STREAM_ID | st::CPU | st::IDENTIFIER;
        Some(8 * (1 + (self.sample_type & after).count_ones() as usize))
    }
}

/// [`SampleLayout::sample_record_size`] as a function: bytes of one PERF_RECORD_SAMPLE
/// in the ring, header included.
///
/// ```
/// use tailprof_perf_abi::{sample_record_size, sample_type as st, SampleLayout, VariableSizes};
/// let l = SampleLayout::new(st::IP | st::TID | st::TIME | st::CPU | st::PERIOD | st::IDENTIFIER);
/// assert_eq!(sample_record_size(&l, &VariableSizes::default()), 56);
/// ```
#[inline]
pub const fn sample_record_size(layout: &SampleLayout, var: &VariableSizes) -> u64 {
    layout.sample_record_size(var)
}
