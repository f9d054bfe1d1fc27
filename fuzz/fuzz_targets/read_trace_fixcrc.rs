//! Like `read_trace`, but re-checksums every chunk first, so mutated chunk contents reach
//! the record decoders instead of being rejected by the CRC.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run read_trace_fixcrc corpus/read_trace -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailprof_format::{chunk::fix_checksums, Record, StacksSink, TraceReader};

fuzz_target!(|data: &[u8]| {
    let mut b = data.to_vec();
    fix_checksums(&mut b);
    let Ok(mut r) = TraceReader::from_bytes(b) else { return };
    let mut sink = StacksSink::default();
    let s = r.read_all(&mut sink).expect("in-memory reads do not fail");
    assert!(s.damaged_bytes + s.truncated_bytes <= s.bytes);
    assert_eq!(s.records, sink.records.len() as u64);
    // Stack contract: definitions in order, every used stack defined.
    assert_eq!(sink.bad_defs, 0);
    for rec in &sink.records {
        if let Record::Sample(x) = rec {
            assert!(x.stack.is_none() || sink.stacks.contains(x.stack));
            let _ = sink.stacks.frames_leaf_first(x.stack).count();
        }
    }
    let _ = r.summarize();
});
