//! Fuzzes the trace reader: any input must either be refused with an error or read
//! without panicking, with sane damage accounting and stacks defined before use.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run read_trace -- -max_total_time=60
//! ```
//! Seed corpus: `cargo run -p tailprof-format --example fuzz_seeds -- fuzz/corpus/read_trace`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailprof_format::{Record, Sink, StackDef, StackTable, TraceReader};

/// Counts records and checks the stack contract: definitions arrive in id order with
/// their callers first, and every stack a record uses was defined before it.
#[derive(Default)]
struct Count(u64, StackTable);

impl Sink for Count {
    fn handle_record(&mut self, r: &Record) {
        self.0 += 1;
        let _ = r.time();
        let stack = match r {
            Record::Sample(s) => s.stack,
            Record::Switch(w) => w.stack,
            _ => return,
        };
        assert!(stack.is_none() || self.1.contains(stack), "stack used before its definition");
        assert!(self.1.depth(stack) <= self.1.len());
    }
    fn handle_stack(&mut self, d: &StackDef) {
        assert!(self.1.handle_def(d), "stack definition out of order");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = TraceReader::from_bytes(data.to_vec()) else { return };
    let mut sink = Count::default();
    let s = r.read_all(&mut sink).expect("in-memory reads do not fail");
    assert_eq!(s.bytes, data.len() as u64);
    assert!(s.damaged_bytes + s.truncated_bytes <= s.bytes);
    assert_eq!(s.records, sink.0);
    let (s2, _, _) = r.summarize().expect("in-memory reads do not fail");
    assert_eq!(s2.truncated_bytes, s.truncated_bytes);
    let mut n = 0u64;
    let s3 = r.for_each_sample(&mut |_| n += 1).expect("in-memory reads do not fail");
    assert_eq!(s3.samples, n);
    // The reader's own table holds the same nodes as the definitions delivered.
    assert_eq!(r.stacks().len(), sink.1.len());
});
