//! The perf_event record ABI, once for the workspace: the `PERF_SAMPLE_*`,
//! `PERF_FORMAT_*`, `PERF_RECORD_*`, `PERF_RECORD_MISC_*` and `PERF_CONTEXT_*` constants,
//! the layout of a sample as the event's attr decides it ([`SampleLayout`], with
//! [`sample_record_size`] for estimates), and **one** zero-copy sample decoder for both
//! byte orders ([`SampleLayout::decode`] / [`SampleLayout::decode_with`] → [`SampleView`],
//! and [`BasicLayout::decode_with`], the fixed-offset path for the layouts whose fields all
//! sit at constant offsets, `[IDENTIFIER] IP TID TIME [CPU] [PERIOD]`: the recorder's,
//! by default `IP TID TIME IDENTIFIER` in 40-byte records),
//! plus the side-band framing every record shares (header, `sample_id` trailer), the
//! side-band records ([`SampleLayout::decode_side_band`]: MMAP, MMAP2, COMM, FORK, EXIT,
//! LOST, LOST_SAMPLES, THROTTLE) and the context-switch records.
//!
//! Used by the recorder's raw-record decoder (`tailprof_collect::parse`, host byte order,
//! millions of records per second; its drain-time plain samples are [`BasicLayout`]
//! decodes too), by `tailprof_import` for perf.data samples and side-band records (either
//! byte order; `linux-perf-data` only reads the perf.data container: header, framing,
//! sorting, decompression), and for `tailprof plan`'s size estimate ([`sample_record_size`]). Layouts follow
//! `include/uapi/linux/perf_event.h` and `perf_event_open(2)`.
//!
//! [`encode`] is the inverse (an owned [`encode::SampleData`] written for a layout), for
//! tests and tools that need raw records.
//!
//! Hand-rolled rather than taken from `linux-perf-event-reader`: that crate skips
//! WEIGHT/WEIGHT_STRUCT/DATA_SRC, reads the PERF_FORMAT_GROUP block the wrong way round
//! (misplacing every later field), and copies into owned structures, while the recorder
//! needs a fixed-offset path that costs a length check and a few loads.
//!
//! Cost (`cargo run --release -p tailprof-collect --example decode_only`, callgrind,
//! instructions per record): peek + decode into a `Sample` ≈ 120 for the fixed-field
//! layouts (117 with 56-byte records, 120 with the default 40-byte ones), ≈ 350 for a
//! layout with ADDR, CALLCHAIN, REGS_USER, WEIGHT, DATA_SRC; the recorder's plain-sample
//! decode at drain (`Decoder::plain`) 48 / 53.

mod basic;
mod consts;
pub mod encode;
mod endian;
mod layout;
mod record;
mod sample;
mod sideband;

pub use basic::{BasicLayout, BasicSample};
pub use consts::{branch_sample_type, context, misc, read_format, record_type, regs_abi, sample_type, HEADER_LEN};
pub use endian::{Endian, U64s};
pub use layout::{sample_record_size, SampleLayout, VariableSizes};
pub use record::{RecordHeader, SampleId, SwitchDirection, SwitchRecord};
pub use sample::{BranchEntry, BranchStack, DecodeError, ReadValue, ReadValues, Regs, SampleView, StackUser, Weight};
pub use sideband::{MmapRecord, SideBand, TaskRecord, MAX_MMAP2_BUILD_ID};
