//! What sending one window costs the writer thread: for each window file of a store
//! (a copy: opening a store removes stale temporaries), builds the OTLP request
//! (`otlp::window_request`, symbol tables read from the store) and encodes it, and for
//! comparison the pprof push's profile (`stacks_of_rows` + gzip). Prints rows, bytes
//! and the median of 5 runs of each.
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
    println!("window_start_us rows samples otlp_bytes otlp_ms pprof_bytes pprof_ms");
    for f in reader.files(Table::Samples, None, i64::MIN, i64::MAX) {
        let (meta, rows) = tailprof_store::read::read_samples_file(&f.path).expect("a samples file");
        let Some(first) = rows.first() else { continue };
        let w = WindowBatch {
            host: meta.as_ref().map(|m| m.host.clone()).unwrap_or_default(),
            start_us: first.window_start_us,
            end_us: first.window_end_us,
            samples: rows.iter().map(|r| r.count).sum(),
            lost_samples: 0,
            dropped_rows: 0,
            events: vec![first.event.clone()],
            rows: rows.clone(),
            items: Vec::new(),
            latency: Vec::new(),
        };
        let (mut ot, mut pt, mut ob, mut pb) = (Vec::new(), Vec::new(), 0, 0);
        for _ in 0..5 {
            let t = Instant::now();
            ob = tailprof_agent::otlp::window_request(&store, &w).encode_to_vec().len();
            ot.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let export = tailprof_analyze::store_query::stacks_of_rows(&reader, &w.rows, w.start_us, w.end_us, ReadStats::default());
            pb = tailprof_present::store_view::pprof_gzip(&export).expect("pprof").len();
            pt.push(t.elapsed().as_secs_f64() * 1e3);
        }
        if let Some(o) = &out {
            std::fs::write(o.join(format!("{}.otlp.pb", w.start_us)), tailprof_agent::otlp::window_request(&store, &w).encode_to_vec()).expect("write the request");
        }
        println!("{} {} {} {} {:.1} {} {:.1}", w.start_us, rows.len(), w.samples, ob, median(ot), pb, median(pt));
    }
}
