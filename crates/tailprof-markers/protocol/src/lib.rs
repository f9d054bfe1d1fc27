//! The marker shared-memory protocol (docs/MARKERS.md) as constants, defined once for
//! both Rust sides: the marker runtime linked into programs (`tailprof-markers`) and the
//! recorder (`tailprof_collect::items::markers`). The C header `include/tailprof.h` and
//! `python/tailprof_markers/__init__.py` mirror these values in their languages; the tests below
//! read both files and fail when they drift.
//!
//! A separate crate rather than a module of `tailprof-markers`, so the recorder does not
//! link the marker runtime: that would export a `tailprof_control` symbol from the
//! `tailprof` binary itself (and make it look like an instrumented process to
//! `record -a`), and a feature to leave the runtime out would be unified back on in
//! workspace builds.
//!
//! All multi-byte fields are little-endian and naturally aligned. Offsets are in bytes
//! from the start of their structure.

#![no_std]

/// Protocol version in the control block and the region header.
pub const VERSION: u32 = 1;
/// Name of the control block symbol every C/Rust runtime exports.
pub const CONTROL_SYMBOL: &str = "tailprof_control";
/// Name of the memfd in which a runtime without native symbols (Python) publishes its
/// control block: `memfd_create(CONTROL_MEMFD)`, mapped shared, seen in `/proc/PID/maps`
/// as `/memfd:tailprof_control (deleted)` (docs/MARKERS.md, "Control block in a memfd").
pub const CONTROL_MEMFD: &str = "tailprof_control";
/// Environment variable through which a launched command finds its region.
pub const ENV_VAR: &str = "TAILPROF_MARKERS";
/// Region files for running processes are created as `<dir>/tailprof.<pid>.<random hex>`
/// (launched commands get a sealed memfd instead; docs/MARKERS.md).
pub const REGION_FILE_PREFIX: &str = "tailprof.";
/// The region header's `magic`: "TTPFMRK1" read as a little-endian u64.
pub const MAGIC: u64 = 0x314B_524D_4650_5454;
/// `clock_id` of CLOCK_MONOTONIC, the only clock defined so far.
pub const CLOCK_MONOTONIC_ID: u32 = 1;

/// The exported control block `tailprof_control` (128 bytes, 64-byte aligned).
pub mod control {
    /// `size` the runtimes initialize; the recorder accepts `size >= SIZE`.
    pub const SIZE: usize = 128;
    pub const ALIGN: usize = 64;
    /// `u32 size`.
    pub const SIZE_FIELD: usize = 0;
    /// `u32 version`.
    pub const VERSION: usize = 4;
    /// `u64 state` ([`STATE_OFF`], [`STATE_INIT`], [`STATE_ON`]): the only word the
    /// disabled path reads.
    pub const STATE: usize = 8;
    /// `u64 generation` of the region to use (never 0 when on).
    pub const GENERATION: usize = 16;
    /// `char path[PATH_LEN]`, NUL-terminated region path.
    pub const PATH: usize = 24;
    pub const PATH_LEN: usize = 96;
    /// `u64 reserved`.
    pub const RESERVED: usize = 120;

    pub const STATE_OFF: u64 = 0;
    /// Not yet decided: the first marker call looks at the environment.
    pub const STATE_INIT: u64 = 1;
    pub const STATE_ON: u64 = 2;
}

/// The region file's header (the first [`header::SIZE`] bytes).
pub mod header {
    pub const SIZE: usize = 4096;
    /// `u64 magic` = [`crate::MAGIC`], written last (release).
    pub const MAGIC: usize = 0;
    /// `u32 version`.
    pub const VERSION: usize = 8;
    /// `u32 header_size` = [`SIZE`].
    pub const HEADER_SIZE: usize = 12;
    /// `u64 region_size`.
    pub const REGION_SIZE: usize = 16;
    /// `u64 generation` (random, odd).
    pub const GENERATION: usize = 24;
    /// `u32 pid` the region is for.
    pub const PID: usize = 32;
    /// `u32 clock_id`.
    pub const CLOCK: usize = 36;
    /// `u32 nslots`.
    pub const NSLOTS: usize = 40;
    /// `u32 ring_records` (a power of two).
    pub const RING_RECORDS: usize = 44;
    /// `u32 slot_size` = [`crate::slot::size`]`(ring_records)`.
    pub const SLOT_SIZE: usize = 48;
    /// `u32 slots_offset` = [`SIZE`].
    pub const SLOTS_OFFSET: usize = 52;
    /// `u32 next_slot`: atomic bump allocator, may exceed `nslots`.
    pub const NEXT_SLOT: usize = 56;
    /// `u32 features` the recorder reads (was reserved, 0): [`FEATURE_TRACE_CONTEXT`].
    /// Written by the recorder before `magic`; a runtime writes a record kind that needs
    /// a feature only when its bit is set.
    pub const FEATURES: usize = 60;
    /// `u64 noslot_dropped`: markers of threads that found no free slot.
    pub const NOSLOT_DROPPED: usize = 64;
    /// `features` bit: the recorder reads [`crate::record::KIND_TRACE_ID`] and
    /// [`crate::record::KIND_SPAN_ID`].
    pub const FEATURE_TRACE_CONTEXT: u32 = 1;
    /// Bytes of the fields above (the rest of the header is reserved).
    pub const FIELDS_LEN: usize = 72;
}

/// One thread's slot: `header.slots_offset + i * header.slot_size`.
pub mod slot {
    /// `u32 state`: [`STATE_OWNED`] once the owner has written `tid` (release).
    pub const STATE: usize = 0;
    /// `u32 tid`.
    pub const TID: usize = 4;
    /// `u64 dropped`: markers dropped because the ring was full (owner writes).
    pub const DROPPED: usize = 8;
    /// `u64 head`: records written (owner, release), own cache line.
    pub const HEAD: usize = 64;
    /// `u64 tail`: records consumed (recorder, release), own cache line.
    pub const TAIL: usize = 128;
    /// Slot-local class names: [`CLASSES`] entries of [`CLASS_SIZE`] bytes,
    /// `u32 len` (written last, release; 0 = empty) then the name.
    pub const CLASS_TABLE: usize = 256;
    pub const CLASSES: usize = 16;
    pub const CLASS_SIZE: usize = 64;
    /// The ring of records.
    pub const RING: usize = 1280;

    pub const STATE_OWNED: u32 = 1;

    /// `slot_size` for a ring of `ring_records` records.
    pub const fn size(ring_records: u32) -> u64 {
        RING as u64 + ring_records as u64 * crate::record::SIZE as u64
    }
}

/// One marker record in a slot's ring.
pub mod record {
    pub const SIZE: usize = 32;
    /// `u64 time` (CLOCK_MONOTONIC ns).
    pub const TIME: usize = 0;
    /// `u64 item`.
    pub const ITEM: usize = 8;
    /// `u64 cls`: 0 none; odd: slot-local class `cls >> 1`; even: address of a class
    /// descriptor in the target.
    pub const CLASS: usize = 16;
    /// `u32 kind` ([`KIND_BEGIN`], [`KIND_END`], [`KIND_SWITCH`], [`KIND_SWITCH_NONE`]),
    /// then `u32` reserved (0).
    pub const KIND: usize = 24;

    /// The thread starts working on item `item` (it becomes the thread's current item).
    pub const KIND_BEGIN: u32 = 0;
    /// The thread (or, for an item that moved, any thread) is done with item `item`.
    pub const KIND_END: u32 = 1;
    /// Switch marker: the thread now works on the already begun item `item` (an event
    /// loop dispatching to it, a coroutine or task resuming); `cls` is 0. Added without
    /// a version change: a recorder that does not know it rejects it and counts it
    /// (`MarkersRejected`, docs/MARKERS.md "Compatibility").
    pub const KIND_SWITCH: u32 = 2;
    /// Switch marker: the thread now works on no item (back in its event loop); `item`
    /// is the item it leaves, or 0, informational only; `cls` is 0.
    pub const KIND_SWITCH_NONE: u32 = 3;
    /// Trace context, first of a pair (OpenTelemetry, W3C trace context): `item` and `cls`
    /// are the trace id's bytes 0..8 and 8..16, each read as a big-endian u64. Always
    /// immediately followed, in the same ring, by a [`KIND_SPAN_ID`] record; the pair is
    /// published with one `head` store. Written only when the region header's
    /// `features` has [`crate::header::FEATURE_TRACE_CONTEXT`] (an older recorder would
    /// reject and count them), after the item's begin.
    pub const KIND_TRACE_ID: u32 = 4;
    /// Trace context, second of the pair: `item` is the item the trace context belongs
    /// to (begun before on this thread), `cls` the span id's 8 bytes read as a
    /// big-endian u64. A span record without its trace record right before is rejected.
    pub const KIND_SPAN_ID: u32 = 5;
    /// Kinds 6..=7 stay reserved for further item attributes (docs/MARKERS.md).
    pub const RESERVED_KINDS: core::ops::RangeInclusive<u32> = 6..=7;
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    fn read(rel: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").join(rel);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The value after `key` on the line that starts with `key`.
    fn value<'a>(text: &'a str, key: &str) -> &'a str {
        let line = text.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_else(|| panic!("no {key}"));
        line.trim_start()[key.len()..].trim_start_matches([' ', '=']).split_whitespace().next().unwrap()
    }

    fn int(v: &str) -> u64 {
        let v = v.trim_end_matches("ull").trim_end_matches('u');
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => v.parse().unwrap(),
        }
    }

    #[test]
    fn layout_is_consistent() {
        assert_eq!(slot::size(4096), 1280 + 32 * 4096);
        const { assert!(slot::CLASS_TABLE + slot::CLASSES * slot::CLASS_SIZE <= slot::RING) };
        const { assert!(slot::TAIL + 8 <= slot::CLASS_TABLE && header::FIELDS_LEN <= header::SIZE) };
        assert_eq!(control::RESERVED + 8, control::SIZE);
        assert_eq!(control::PATH + control::PATH_LEN, control::RESERVED);
        assert_eq!(&MAGIC.to_le_bytes(), b"TTPFMRK1");
    }

    /// Switch markers were added without a version change (docs/MARKERS.md,
    /// "Compatibility"): recorders of version 1 accept new runtimes and the reverse, so
    /// the version, the control block size and the record size must stay as they were.
    #[test]
    fn switch_markers_keep_version_1_layout() {
        assert_eq!(VERSION, 1);
        assert_eq!(control::SIZE, 128);
        assert_eq!(record::SIZE, 32);
        assert_eq!((record::KIND_SWITCH, record::KIND_SWITCH_NONE), (2, 3));
        assert!(!record::RESERVED_KINDS.contains(&record::KIND_SWITCH_NONE));
    }

    /// Trace context was added the same way: kinds from the reserved range, a feature
    /// bit in the header word that was reserved (so an old recorder, which leaves it 0,
    /// never receives them), no version change.
    #[test]
    fn trace_context_keeps_version_1_layout() {
        assert_eq!(VERSION, 1);
        assert_eq!((record::KIND_TRACE_ID, record::KIND_SPAN_ID), (4, 5));
        assert!(!record::RESERVED_KINDS.contains(&record::KIND_SPAN_ID));
        assert_eq!(header::FEATURES + 4, header::NOSLOT_DROPPED);
        const { assert!(header::NEXT_SLOT + 4 <= header::FEATURES) };
    }

    /// The C header and the Python module carry the same values.
    #[test]
    fn c_header_and_python_module_agree() {
        let h = read("include/tailprof.h");
        assert_eq!(int(value(&h, "#define TAILPROF_PROTOCOL_VERSION")), u64::from(VERSION));
        assert_eq!(int(value(&h, "#define TAILPROF_REGION_MAGIC")), MAGIC);
        assert_eq!(int(value(&h, "#define TAILPROF_CLOCK_MONOTONIC_ID")), u64::from(CLOCK_MONOTONIC_ID));
        assert_eq!(int(value(&h, "#define TAILPROF_SLOT_CLASSES")), slot::CLASSES as u64);
        assert_eq!(int(value(&h, "#define TAILPROF_SLOT_RING_OFFSET")), slot::RING as u64);
        assert!(h.contains(&std::format!("{CONTROL_SYMBOL} = {{{}, TAILPROF_PROTOCOL_VERSION", control::SIZE)));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_BEGIN")), u64::from(record::KIND_BEGIN));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_END")), u64::from(record::KIND_END));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_SWITCH")), u64::from(record::KIND_SWITCH));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_SWITCH_NONE")), u64::from(record::KIND_SWITCH_NONE));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_TRACE_ID")), u64::from(record::KIND_TRACE_ID));
        assert_eq!(int(value(&h, "#define TAILPROF_KIND_SPAN_ID")), u64::from(record::KIND_SPAN_ID));
        assert_eq!(int(value(&h, "#define TAILPROF_HDR_FEATURES")), header::FEATURES as u64);
        assert_eq!(int(value(&h, "#define TAILPROF_FEATURE_TRACE_CONTEXT")), u64::from(header::FEATURE_TRACE_CONTEXT));
        assert!(h.contains(&std::format!("getenv(\"{ENV_VAR}\")")), "C header reads {ENV_VAR}");

        let p = read("python/tailprof_markers/__init__.py");
        assert_eq!(value(&p, "ENV_VAR"), std::format!("\"{ENV_VAR}\""));
        assert_eq!(value(&p, "CONTROL_MEMFD"), std::format!("\"{CONTROL_MEMFD}\""));
        assert_eq!(int(value(&p, "CTL_SIZE")), control::SIZE as u64);
        assert_eq!(int(value(&p, "CTL_STATE")), control::STATE as u64);
        assert_eq!(int(value(&p, "CTL_GENERATION")), control::GENERATION as u64);
        assert_eq!(int(value(&p, "CTL_PATH")), control::PATH as u64);
        assert_eq!(int(value(&p, "CTL_PATH_LEN")), control::PATH_LEN as u64);
        assert_eq!(int(value(&p, "STATE_OFF")), control::STATE_OFF);
        assert_eq!(int(value(&p, "STATE_ON")), control::STATE_ON);
        assert_eq!(int(value(&p, "MAGIC")), MAGIC);
        assert_eq!(int(value(&p, "VERSION")), u64::from(VERSION));
        assert_eq!(int(value(&p, "CLOCK_MONOTONIC_ID")), u64::from(CLOCK_MONOTONIC_ID));
        assert_eq!(int(value(&p, "SLOT_RING_OFFSET")), slot::RING as u64);
        assert_eq!(int(value(&p, "SLOT_CLASSES")), slot::CLASSES as u64);
        assert_eq!(int(value(&p, "KIND_BEGIN")), u64::from(record::KIND_BEGIN));
        assert_eq!(int(value(&p, "KIND_END")), u64::from(record::KIND_END));
        assert_eq!(int(value(&p, "KIND_SWITCH")), u64::from(record::KIND_SWITCH));
        assert_eq!(int(value(&p, "KIND_SWITCH_NONE")), u64::from(record::KIND_SWITCH_NONE));
        assert_eq!(int(value(&p, "KIND_TRACE_ID")), u64::from(record::KIND_TRACE_ID));
        assert_eq!(int(value(&p, "KIND_SPAN_ID")), u64::from(record::KIND_SPAN_ID));
        assert_eq!(int(value(&p, "HDR_FEATURES")), header::FEATURES as u64);
        assert_eq!(int(value(&p, "FEATURE_TRACE_CONTEXT")), u64::from(header::FEATURE_TRACE_CONTEXT));
    }
}
