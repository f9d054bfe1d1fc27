//! Numeric constants of the perf_event ABI (`include/uapi/linux/perf_event.h`), each
//! defined once for the whole workspace.

/// `PERF_SAMPLE_*` bits of `perf_event_attr.sample_type`.
pub mod sample_type {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const REGS_USER: u64 = 1 << 12;
    pub const STACK_USER: u64 = 1 << 13;
    pub const WEIGHT: u64 = 1 << 14;
    pub const DATA_SRC: u64 = 1 << 15;
    pub const IDENTIFIER: u64 = 1 << 16;
    pub const TRANSACTION: u64 = 1 << 17;
    pub const REGS_INTR: u64 = 1 << 18;
    pub const PHYS_ADDR: u64 = 1 << 19;
    pub const AUX: u64 = 1 << 20;
    pub const CGROUP: u64 = 1 << 21;
    pub const DATA_PAGE_SIZE: u64 = 1 << 22;
    pub const CODE_PAGE_SIZE: u64 = 1 << 23;
    pub const WEIGHT_STRUCT: u64 = 1 << 24;
    /// Every bit this crate decodes (`PERF_SAMPLE_MAX - 1`).
    pub const ALL: u64 = (1 << 25) - 1;
    /// The fields a side-band record's `sample_id` trailer can hold (with
    /// `sample_id_all`), in the order they appear there.
    pub const SAMPLE_ID_FIELDS: [u64; 6] = [TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER];
}

/// `PERF_FORMAT_*` bits of `perf_event_attr.read_format`.
pub mod read_format {
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    pub const ID: u64 = 1 << 2;
    pub const GROUP: u64 = 1 << 3;
    pub const LOST: u64 = 1 << 4;
}

/// `PERF_SAMPLE_BRANCH_*` bits of `perf_event_attr.branch_sample_type` that change the
/// layout of a sample's branch stack (the others only filter branches).
pub mod branch_sample_type {
    /// The branch stack starts with `u64 hw_idx`.
    pub const HW_INDEX: u64 = 1 << 17;
    /// The branch entries are followed by one `u64` of counters per entry.
    pub const COUNTERS: u64 = 1 << 19;
    /// Filter bits (no layout change) used for LBR call stacks.
    pub const USER: u64 = 1 << 0;
    pub const CALL_STACK: u64 = 1 << 11;
    pub const NO_FLAGS: u64 = 1 << 14;
    pub const NO_CYCLES: u64 = 1 << 15;
}

/// `PERF_RECORD_*` record types (`perf_event_header.type`) the kernel writes.
pub mod record_type {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const READ: u32 = 8;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const LOST_SAMPLES: u32 = 13;
    /// A context switch of the event's own task (no body besides the `sample_id`).
    pub const SWITCH: u32 = 14;
    /// A context switch seen by a CPU-wide event: `u32 next_prev_pid, next_prev_tid`.
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const NAMESPACES: u32 = 16;
    pub const KSYMBOL: u32 = 17;
    pub const BPF_EVENT: u32 = 18;
    pub const CGROUP: u32 = 19;
    pub const TEXT_POKE: u32 = 20;
    pub const AUX_OUTPUT_HW_ID: u32 = 21;
}

/// `PERF_RECORD_MISC_*` bits of `perf_event_header.misc`. Bits 13 and 14 mean different
/// things for different record types.
pub mod misc {
    /// Mask of the CPU mode (the values below).
    pub const CPUMODE_MASK: u16 = 0b111;
    pub const CPUMODE_UNKNOWN: u16 = 0;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    pub const HYPERVISOR: u16 = 3;
    pub const GUEST_KERNEL: u16 = 4;
    pub const GUEST_USER: u16 = 5;
    /// MMAP/MMAP2: a data (non-executable) mapping.
    pub const MMAP_DATA: u16 = 1 << 13;
    /// COMM: caused by exec.
    pub const COMM_EXEC: u16 = 1 << 13;
    /// FORK: caused by exec (a new process image replacing a thread group).
    pub const FORK_EXEC: u16 = 1 << 13;
    /// SWITCH / SWITCH_CPU_WIDE: the task is switched out (else in).
    pub const SWITCH_OUT: u16 = 1 << 13;
    /// Sample: `ip` is the exact instruction (PEBS).
    pub const EXACT_IP: u16 = 1 << 14;
    /// SWITCH / SWITCH_CPU_WIDE with SWITCH_OUT: the task was preempted (still runnable),
    /// not blocked.
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
    /// MMAP2: the record carries a build-id instead of maj/min/ino/ino_generation.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    /// Reserved for extending `misc`.
    pub const EXT_RESERVED: u16 = 1 << 15;
}

/// `PERF_CONTEXT_*` markers inside a callchain: an entry `>= MAX` is not an address but
/// says which context the following entries belong to.
pub mod context {
    pub const HV: u64 = -32i64 as u64;
    pub const KERNEL: u64 = -128i64 as u64;
    pub const USER: u64 = -512i64 as u64;
    pub const GUEST: u64 = -2048i64 as u64;
    pub const GUEST_KERNEL: u64 = -2176i64 as u64;
    pub const GUEST_USER: u64 = -2560i64 as u64;
    /// Entries at or above this value are context markers.
    pub const MAX: u64 = -4095i64 as u64;

    /// Whether a callchain entry is a context marker rather than an address.
    pub const fn is_marker(entry: u64) -> bool {
        entry >= MAX
    }
}

/// `PERF_SAMPLE_REGS_ABI_*`: the first word of a REGS_USER / REGS_INTR block.
pub mod regs_abi {
    /// No registers follow (e.g. a sample in a kernel thread for REGS_USER).
    pub const NONE: u64 = 0;
    pub const ABI_32: u64 = 1;
    pub const ABI_64: u64 = 2;
}

/// Size of `struct perf_event_header` (`u32 type; u16 misc; u16 size`).
pub const HEADER_LEN: usize = 8;
