//! Fuzzes `tailprof import`: any perf.data bytes convert or fail with one line, never
//! panic, abort or allocate beyond the input (finding 9).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run import corpus/import -- -max_total_time=60
//! ```
//! The checks live in `fuzz/checks/mod.rs`; `cargo test -p tailprof --test fuzz_corpus`
//! replays the committed corpus through them on stable.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check_import(data));
