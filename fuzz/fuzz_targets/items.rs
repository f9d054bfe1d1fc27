//! Fuzzes the `items` analysis (item join, tables, JSON, explain, loss table) on
//! arbitrary traces, with chunk checksums fixed so mutations reach the analysis.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run items corpus/items -- -max_total_time=60
//! ```
//! The checks live in `fuzz/checks/mod.rs`; `cargo test -p tailprof --test fuzz_corpus`
//! replays the committed corpus through them on stable.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check_items(data));
