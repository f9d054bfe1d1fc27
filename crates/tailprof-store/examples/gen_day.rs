//! Writes a synthetic store: WINDOWS window files of ROWS aggregate rows each (default: a
//! day of 10 s windows, 200 rows each), three binaries with 2000 functions each, stacks 8
//! to 24 deep. For bench/agent-query.sh (tailprof top vs DuckDB over the same files).
//!
//!     cargo run --release -p tailprof-store --example gen_day -- DIR [WINDOWS] [ROWS]

use tailprof_store::schema::{stack_id, StoreFrame};
use tailprof_store::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).expect("usage: gen_day DIR [WINDOWS] [ROWS]"));
    let windows: i64 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(8640);
    let rows_per: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(200);
    let (store, _) = Store::open(&dir).expect("open store");
    let bins = ["0a0a0a0a", "0b0b0b0b", "0c0c0c0c"];
    store.ensure_dir(&store.symbols_dir()).unwrap();
    for (k, b) in bins.iter().enumerate() {
        let syms: Vec<SymbolRow> = (0..2000u64)
            .map(|i| SymbolRow {
                build_id: b.to_string(),
                binary: format!("/usr/bin/app{k}"),
                start: 0x1000 + i * 0x100,
                size: 0x100,
                name: format!("app{k}::function_{i}"),
            })
            .collect();
        write_symbols(&store.symbols_file(b).unwrap(), &syms).unwrap();
    }
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let day0 = time::now_us() - windows * 10_000_000;
    for w in 0..windows {
        let start = day0 + w * 10_000_000;
        let end = start + 10_000_000;
        let mut rows = Vec::with_capacity(rows_per);
        for _ in 0..rows_per {
            let k = rnd(3) as usize;
            let depth = 8 + rnd(17) as usize;
            // Zipf-ish hot functions: squares favour small indices.
            let frames: Vec<StoreFrame> = (0..depth)
                .map(|d| {
                    let r = rnd(2000);
                    let f = if d == 0 { r * r / 2000 } else { r };
                    StoreFrame { build_id: bins[k].to_string(), offset: 0x1000 + f * 0x100 + rnd(0x100) }
                })
                .collect();
            rows.push(SampleRow {
                window_start_us: start,
                window_end_us: end,
                pid: 1000 + rnd(50) as u32,
                comm: format!("app{k}"),
                event: "cpu-clock".into(),
                binary: format!("/usr/bin/app{k}"),
                stack_id: stack_id(&frames),
                frames,
                truncated: false,
                count: 1 + rnd(5),
                period: 20_408_163,
            });
        }
        let meta = WindowMeta {
            schema_version: SCHEMA_VERSION,
            host: "bench".into(),
            window_start_us: start,
            window_end_us: end,
            samples: rows.iter().map(|r| r.count).sum(),
            ..Default::default()
        };
        store.ensure_dir(&store.partition_dir(Table::Samples, "bench", start)).unwrap();
        write_samples(&store.window_file(Table::Samples, "bench", start, end), &meta, &rows).unwrap();
    }
}
