//! Writes a fixed set of larger synthetic traces (every record kind, stacks, registers,
//! optional fields, out-of-order samples, each time code, big and small chunks) into a
//! directory, so the output of two builds of the writer can be compared byte for byte
//! (`cmp`) after a change that must not alter the format.
//!
//! ```text
//! cargo run --release -p tailprof-format --example write_identity -- /tmp/out-dir
//! ```

use tailprof_format::synth::{intern_all, random_records, random_stacked_records, Rng, StackWorkload, Workload};
use tailprof_format::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("an output directory"));
    std::fs::create_dir_all(&dir)?;
    let header = TraceHeader { source: "record".into(), ..Default::default() };
    for case in 0..12u64 {
        let mut rng = Rng::new(case);
        let opts = WriterOptions {
            max_records: [128 * 1024, 1000, 77][case as usize % 3],
            round_records: [32 * 1024, 500][case as usize % 2],
            time_codec: [TimeCodec::Planes, TimeCodec::Paper16, TimeCodec::Leb128][(case / 4) as usize % 3],
            zstd_level: if case == 5 { 0 } else { 1 },
            ..Default::default()
        };
        let mut w = TraceWriter::with_options(Vec::new(), &header, opts)?;
        let mut records: Vec<Record> = match case % 6 {
            0 => Workload::REALISTIC.samples(case, 100_000).into_iter().map(Record::Sample).collect(),
            1 => Workload::Bursty { ips: 500 }.samples(case, 60_000).into_iter().map(Record::Sample).collect(),
            2 => random_records(&mut rng, 50_000),
            3 => {
                let (table, records) = random_stacked_records(&mut rng, 40_000);
                intern_all(&mut w, &table);
                records
            }
            4 => StackWorkload { paths: 200, min_depth: 2, max_depth: 30, leaf_ips: 3 }
                .samples(case, 50_000)
                .into_iter()
                .map(|(mut s, frames)| {
                    s.stack = w.intern_stack(&frames);
                    if s.time % 7 == 0 {
                        s.regs = vec![s.time, s.ip, 3];
                    }
                    Record::Sample(s)
                })
                .collect(),
            _ => Workload::CpuClock { period_ns: 10_000, threads: 40, ips: 20_000 }
                .samples(case, 100_000)
                .into_iter()
                .map(Record::Sample)
                .collect(),
        };
        // A few samples out of time order (the writer closes the chunk before each).
        for i in (997..records.len()).step_by(4999) {
            if let Record::Sample(s) = &mut records[i] {
                s.time = s.time.saturating_sub(1_000_000);
            }
        }
        for (i, r) in records.iter().enumerate() {
            w.write(r)?;
            if i % 3000 == 2999 {
                w.end_round()?;
            }
        }
        let (bytes, _) = w.finish_into_inner(Some(case))?;
        std::fs::write(dir.join(format!("case-{case:02}.tprof")), bytes)?;
    }
    Ok(())
}
