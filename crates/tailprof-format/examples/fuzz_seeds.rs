//! Writes small valid traces (every record kind, stacks and switches, several chunks, each
//! time code) into a directory, as a seed corpus for the `read_trace` fuzz targets.
//!
//! ```text
//! cargo run -p tailprof-format --example fuzz_seeds -- fuzz/corpus/read_trace
//! ```

use tailprof_format::synth::{intern_all, random_build_ids, random_records, random_stacked_records, Rng, StackWorkload, Workload};
use tailprof_format::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus/read_trace".into()));
    std::fs::create_dir_all(&dir)?;
    let header = TraceHeader { source: "record".into(), clock: Some(ClockInfo::Monotonic), ..Default::default() };
    for seed in 0..18u64 {
        let mut rng = Rng::new(seed);
        let opts = WriterOptions {
            max_records: 5 + seed as usize * 3,
            time_codec: [TimeCodec::Paper16, TimeCodec::Leb128, TimeCodec::Planes][seed as usize % 3],
            zstd_level: if seed % 4 == 0 { 0 } else { 1 },
            ..Default::default()
        };
        let mut w = TraceWriter::with_options(Vec::new(), &header, opts)?;
        let records = if seed < 8 {
            random_records(&mut rng, 10 + seed as usize * 8)
        } else if seed < 12 {
            Workload::REALISTIC.samples(seed, 200).into_iter().map(Record::Sample).collect()
        } else if seed < 15 {
            let (table, records) = random_stacked_records(&mut rng, 30 + seed as usize * 4);
            intern_all(&mut w, &table);
            records
        } else {
            let wl = StackWorkload { paths: 20, min_depth: 3, max_depth: 12, leaf_ips: 2 };
            wl.samples(seed, 150)
                .into_iter()
                .map(|(mut s, frames)| {
                    s.stack = w.intern_stack(&frames);
                    Record::Sample(s)
                })
                .collect()
        };
        for r in &records {
            w.write(r)?;
        }
        for b in random_build_ids(&mut rng, 2) {
            w.add_build_id(b)?;
        }
        let (bytes, _) = w.finish_into_inner(Some(seed))?;
        std::fs::write(dir.join(format!("seed-{seed:02}.tprof")), bytes)?;
    }
    Ok(())
}
