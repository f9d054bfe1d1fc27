//! What source lines cost: name file offsets of a binary (read from stdin, one hex offset
//! a line) with `symbolize_binary_ids` (names only) and with `symbolize_binary_sources`
//! (names plus each address's line and its function's first line), each on a fresh
//! symbolizer (parsing included), best of 7.
//!
//! ```text
//! lines_cost BIN < offsets.txt
//! lines_cost BIN names|lines < offsets.txt   # one run of one mode (for CPU time: /usr/bin/time)
//! ```

use std::io::BufRead;
use std::time::Instant;

use tailprof_symbolize::maps::{Binary, BinaryKind};
use tailprof_symbolize::{Symbolizer, SymbolizerOptions};

fn best(f: &dyn Fn() -> usize) -> (f64, usize) {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            let n = f();
            (t.elapsed().as_secs_f64() * 1e3, n)
        })
        .fold((f64::MAX, 0), |a, b| if b.0 < a.0 { b } else { a })
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: lines_cost BINARY < offsets");
    let mut offsets: Vec<u64> = std::io::stdin()
        .lock()
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| u64::from_str_radix(l.trim().trim_start_matches("0x"), 16).ok())
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    let b = Binary { path: path.clone(), build_id: None, kind: BinaryKind::File };
    let opts = || SymbolizerOptions { cache_dir: None, ..Default::default() };
    match std::env::args().nth(2).as_deref() {
        Some("names") => return println!("{}", Symbolizer::new(opts()).symbolize_binary_ids(&b, None, &offsets).len()),
        Some("lines") => return println!("{}", Symbolizer::new(opts()).symbolize_binary_sources(&b, None, &offsets).1.len()),
        _ => {}
    }
    let (names_ms, named) = best(&|| {
        let mut s = Symbolizer::new(opts());
        s.symbolize_binary_ids(&b, None, &offsets).iter().filter(|r| r.is_ok()).count()
    });
    let (lines_ms, with_lines) = best(&|| {
        let mut s = Symbolizer::new(opts());
        let (_, src) = s.symbolize_binary_sources(&b, None, &offsets);
        src.iter().filter(|s| s.line.is_some() && s.function.is_some()).count()
    });
    println!(
        "{path}: {} offsets; names only {names_ms:.1} ms ({named} named); names + lines {lines_ms:.1} ms ({with_lines} with both lines); {:+.0}%",
        offsets.len(),
        100.0 * (lines_ms - names_ms) / names_ms
    );
}
