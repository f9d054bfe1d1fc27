//! Throughput of the per-sample path of `ProfileBuilder` (no trace decoding): feeds
//! synthetic samples (many processes, a few thousand hot addresses, periodic mmaps) and
//! prints samples/s and the number of unique keys. Run with
//! `cargo run --release -p tailprof-analyze --example profile_throughput [samples]`.

use std::time::Instant;

use tailprof_analyze::profile::GroupBy;
use tailprof_analyze::{ProfileBuilder, ProfileOptions, Symbolizer};
use tailprof_format::{CpuMode, Mmap, Sample, Sink, TraceHeader};

#[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    for by in [GroupBy::Function, GroupBy::Binary, GroupBy::Thread] {
        let mut b = ProfileBuilder::new(&TraceHeader::default(), &ProfileOptions { by, event: None, ..Default::default() }).unwrap();
        for pid in 1..=50u32 {
            for lib in 0..20u64 {
                b.handle_mmap(&Mmap {
                    pid,
                    start: 0x7f00_0000_0000 + lib * 0x100_0000,
                    len: 0x80_0000,
                    path: format!("/nonexistent/lib{lib}.so"),
                    cpumode: CpuMode::User,
                    ..Default::default()
                });
            }
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let t = Instant::now();
        let mut s = Sample { period: 1, cpumode: CpuMode::User, ..Default::default() };
        for i in 0..n {
            // xorshift: pick a pid and one of ~4000 hot addresses per process.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.time = i;
            s.pid = 1 + (x % 50) as u32;
            s.tid = s.pid + ((x >> 8) % 4) as u32 * 1000;
            s.ip = 0x7f00_0000_0000 + ((x >> 16) % 20) * 0x100_0000 + ((x >> 32) % 200) * 0x40;
            s.cpumode = if (x >> 40) % 10 == 0 { CpuMode::Kernel } else { CpuMode::User };
            if s.cpumode == CpuMode::Kernel {
                s.ip = 0xffff_ffff_8100_0000 + ((x >> 32) % 500) * 0x10;
            }
            if i % 1_000_000 == 999_999 {
                // An mmap now and then invalidates one process's cached resolutions.
                b.handle_mmap(&Mmap {
                    pid: s.pid,
                    start: 0x6000_0000 + i,
                    len: 0x1000,
                    path: "/nonexistent/late.so".into(),
                    cpumode: CpuMode::User,
                    ..Default::default()
                });
            }
            b.handle_sample(&s);
        }
        let agg = t.elapsed();
        let t = Instant::now();
        let p = b.finish(&mut Symbolizer::default());
        let fin = t.elapsed();
        println!(
            "{by:?}: {n} samples in {:.3} s = {:.1} M samples/s; finish {:.3} s; {} keys, {} locations, {} rows",
            agg.as_secs_f64(),
            n as f64 / agg.as_secs_f64() / 1e6,
            fin.as_secs_f64(),
            p.stats.unique_keys,
            p.stats.unique_locations,
            p.rows.len()
        );
    }
}
