//! Fuzzes the ELF reader's symbol and note paths, and the agent's streamed symbol table,
//! under the agent's bounds (issue 19).
//!
//! ```text
//! cd fuzz && cargo +nightly fuzz run elf corpus/elf -- -max_total_time=60
//! ```
//! The checks live in `fuzz/checks/mod.rs`; `cargo test -p tailprof --test fuzz_corpus`
//! replays the committed corpus through them on stable.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check_elf(data));
