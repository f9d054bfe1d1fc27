//! Fuzzes the `report` and `info` analyses (flat profiles by function, binary and
//! thread, trace info, loss table) on arbitrary traces, checksums fixed.
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run report corpus/report -- -max_total_time=60
//! ```
//! The checks live in `fuzz/checks/mod.rs`; `cargo test -p tailprof --test fuzz_corpus`
//! replays the committed corpus through them on stable.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check_report(data));
