//! Fuzzes the trace reader: any input must either be refused with an error or read
//! without panicking, with sane damage accounting and stacks defined before use.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run read_trace corpus/read_trace -- -max_total_time=60
//! ```
//! Seed corpus: `cargo run -p tailprof-format --example fuzz_seeds -- fuzz/corpus/read_trace`.
//! The check lives in `fuzz/checks/mod.rs` (replayed on stable by
//! `cargo test -p tailprof --test fuzz_corpus`).
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check_read_trace(data));
