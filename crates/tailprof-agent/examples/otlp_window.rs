//! What sending one window costs the writer thread: for each window file of a store
//! (a copy: opening a store removes stale temporaries), in time order, builds and encodes
//! the OTLP request (`otlp::window_request`) and the pprof push's profile
//! (`push::window_profile`), both naming frames through the writer thread's table cache
//! (`names`), and for comparison the pprof profile named without the cache
//! (`stacks_of_rows`, which reads every table again). Prints rows, bytes, the first call
//! (the cache as the previous windows left it) and the median of 4 more (warm).
//!
//! With OUT_DIR, also writes each window's encoded request there (`<start_us>.otlp.pb`),
//! e.g. for decoding with another implementation.
//!
//! `cargo run --release -p tailprof-agent --example otlp_window -- STORE_COPY [OUT_DIR]`

use std::time::Instant;

use prost::Message;
use tailprof_agent::writer::WindowBatch;
use tailprof_store::{ReadStats, Store, StoreReader, Table};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: otlp_window STORE_COPY [OUT_DIR]");
    let out = std::env::args().nth(2).map(std::path::PathBuf::from);
    let (store, _) = Store::open(std::path::Path::new(&dir)).expect("a store");
    let reader = StoreReader::new(store.clone());
    if std::env::var_os("SYMTIME").is_some() {
        for e in std::fs::read_dir(store.symbols_dir()).expect("symbols") {
            let p = e.expect("entry").path();
            let bid = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            let t = Instant::now();
            let n = reader.symbols(&bid).map(|r| r.len()).unwrap_or(0);
            println!("{bid} {n} rows {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        }
    }
    println!(
        "window_start_us rows samples otlp_bytes otlp_first_ms otlp_warm_ms pprof_bytes pprof_first_ms pprof_warm_ms pprof_uncached_ms"
    );
    let mut files = reader.files(Table::Samples, None, i64::MIN, i64::MAX);
    files.sort_by_key(|f| f.start_us);
    for f in files {
        let (meta, rows) = tailprof_store::read::read_samples_file(&f.path).expect("a samples file");
        let Some(first) = rows.first() else { continue };
        let w = WindowBatch {
            host: meta.as_ref().map(|m| m.host.clone()).unwrap_or_default(),
            start_us: first.window_start_us,
            end_us: first.window_end_us,
            samples: rows.iter().map(|r| r.count).sum(),
            lost_samples: 0,
            losses: Default::default(),
            dropped_rows: 0,
            events: vec![first.event.clone()],
            rows: rows.clone(),
            items: Vec::new(),
            latency: Vec::new(),
        };
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let (mut ot, mut pt, mut ut, mut ob, mut pb) = (Vec::new(), Vec::new(), Vec::new(), 0, 0);
        for _ in 0..5 {
            let t = Instant::now();
            ob = tailprof_agent::otlp::window_request(&store, &w).encode_to_vec().len();
            ot.push(ms(t));
        }
        for _ in 0..5 {
            let t = Instant::now();
            pb = tailprof_agent::push::window_profile(&store, &w).expect("pprof").len();
            pt.push(ms(t));
            let t = Instant::now();
            let export = tailprof_analyze::store_query::stacks_of_rows(&reader, &w.rows, w.start_us, w.end_us, ReadStats::default());
            tailprof_present::store_view::pprof_gzip(&export).expect("pprof");
            ut.push(ms(t));
        }
        if let Some(o) = &out {
            std::fs::write(o.join(format!("{}.otlp.pb", w.start_us)), tailprof_agent::otlp::window_request(&store, &w).encode_to_vec())
                .expect("write the request");
        }
        let (o0, p0) = (ot.remove(0), pt.remove(0));
        println!(
            "{} {} {} {ob} {o0:.1} {:.1} {pb} {p0:.1} {:.1} {:.1}",
            w.start_us,
            rows.len(),
            w.samples,
            median(ot),
            median(pt),
            median(ut)
        );
    }
    let cached = tailprof_agent::names::with_cache(&store, |c| c.cached());
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |k: &str| status.lines().find(|l| l.starts_with(k)).and_then(|l| l.split_whitespace().nth(1)).unwrap_or("?").to_string();
    println!("cache: {} functions, {} bytes; VmRSS {} kB, VmHWM {} kB", cached.0, cached.1, kb("VmRSS:"), kb("VmHWM:"));
}
