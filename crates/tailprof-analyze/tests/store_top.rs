//! `top` and `diff` over the store read column by column (`StoreReader::sample_batches`,
//! several threads) give exactly what the row path gives over the parquet crate's record
//! API (`read_samples_file_records`), for every grouping: named, unnamed (no symbol
//! table, offsets outside the table), kernel and unmapped frames, empty stacks,
//! truncated stacks, `;` in names, filters by pid and binary, compacted multi-window files.

use tailprof_analyze::store_query::{diff, top, top_of_rows, GroupBy};
use tailprof_store::read::read_samples_file_records;
use tailprof_store::schema::{stack_id, StoreFrame, KERNEL_BUILD_ID};
use tailprof_store::*;

const H: i64 = 3_600_000_000;
const T0: i64 = 1_700_000_000_000_000 - 1_700_000_000_000_000 % H;
const W: i64 = 10_000_000;

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// Build-ids: two with tables, one without (its frames are `[binary+0x…]`), kernel, unmapped.
const BIDS: [&str; 5] = ["aa01", "bb02", "cc03", KERNEL_BUILD_ID, ""];
const BINS: [&str; 5] = ["/usr/bin/alpha", "/usr/lib/libbeta.so", "/opt/gamma", "[kernel]", "[unknown]"];

fn frame(rng: &mut Rng) -> StoreFrame {
    let k = rng.next(100) as usize;
    let k = match k {
        0..=44 => 0,
        45..=79 => 1,
        80..=89 => 2,
        90..=96 => 3,
        _ => 4,
    };
    // Tables cover 0x1000..0x1000+300*0x40; some offsets fall outside.
    StoreFrame { build_id: BIDS[k].into(), offset: 0x800 + rng.next(330) * 0x40 + rng.next(0x40) }
}

fn window_rows(rng: &mut Rng, start: i64, n: usize) -> Vec<SampleRow> {
    (0..n)
        .map(|_| {
            let depth = if rng.next(40) == 0 { 0 } else { 1 + rng.next(20) as usize };
            let frames: Vec<StoreFrame> = (0..depth).map(|_| frame(rng)).collect();
            let b = frames.first().map_or(4, |f| BIDS.iter().position(|x| *x == f.build_id).unwrap());
            SampleRow {
                window_start_us: start,
                window_end_us: start + W,
                pid: 10 + rng.next(4) as u32,
                comm: ["alpha", "beta", "", "gam;ma"][rng.next(4) as usize].into(),
                event: "cpu-clock".into(),
                binary: BINS[b].into(),
                stack_id: stack_id(&frames),
                frames,
                truncated: rng.next(7) == 0,
                count: 1 + rng.next(6),
                period: 20_000_000,
            }
        })
        .collect()
}

fn store_with_windows() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("s")).unwrap();
    store.ensure_dir(&store.symbols_dir()).unwrap();
    for (k, bid) in BIDS[..2].iter().enumerate() {
        let syms: Vec<SymbolRow> = (0..300u64)
            .map(|i| SymbolRow {
                build_id: bid.to_string(),
                binary: BINS[k].into(),
                start: 0x1000 + i * 0x40,
                // Some functions of unknown size (end at the next one), some shorter than the gap.
                size: [0x40, 0, 0x20][(i % 3) as usize],
                name: if i % 50 == 7 { format!("ns;{k}::f{i}") } else { format!("{}::f{i}", ["alpha", "beta"][k]) },
            })
            .collect();
        write_symbols(&store.symbols_file(bid).unwrap(), &syms).unwrap();
    }
    let mut rng = Rng(0xdead_beef_1234_5678);
    // Two hours of windows, 60 files; the first hour is then compacted into one file.
    for w in 0..60i64 {
        let start = T0 + w * 12 * W;
        let rows = window_rows(&mut rng, start, 40 + (w as usize * 7) % 90);
        let meta = WindowMeta {
            schema_version: SCHEMA_VERSION,
            host: "h1".into(),
            window_start_us: start,
            window_end_us: start + W,
            samples: rows.iter().map(|r| r.count).sum(),
            ..Default::default()
        };
        store.ensure_dir(&store.partition_dir(Table::Samples, "h1", start)).unwrap();
        write_samples(&store.window_file(Table::Samples, "h1", start, start + W), &meta, &rows).unwrap();
    }
    // Compact the first hour's windows.
    compact(&store, "h1", T0 + H + 1).unwrap();
    (tmp, store)
}

/// The reference: per file, the record API's rows, filtered as the query says.
fn rows_by_records(reader: &StoreReader, q: &SampleQuery) -> Vec<Vec<SampleRow>> {
    reader
        .files(Table::Samples, None, q.from_us, q.to_us)
        .iter()
        .map(|f| {
            let (_, rows) = read_samples_file_records(&f.path).unwrap();
            rows.into_iter()
                .filter(|r| r.window_end_us > q.from_us && r.window_start_us < q.to_us)
                .filter(|r| q.pid.is_none_or(|p| p == r.pid))
                .filter(|r| q.binary.as_ref().is_none_or(|b| r.binary.ends_with(b.as_str()) || &r.comm == b))
                .collect()
        })
        .collect()
}

#[test]
fn top_by_columns_equals_top_by_record_rows() {
    let (_tmp, store) = store_with_windows();
    let reader = StoreReader::new(store);
    let files = reader.files(Table::Samples, None, T0, T0 + 3 * H);
    assert!(files.iter().any(|f| f.path.file_name().unwrap().to_str().unwrap().starts_with("c-")), "no compacted file");
    assert!(files.len() > 20, "{} files", files.len());
    let queries = [
        SampleQuery { from_us: T0, to_us: T0 + 3 * H, ..Default::default() },
        SampleQuery { from_us: T0 + H / 3, to_us: T0 + H + H / 2, ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + 3 * H, pid: Some(12), ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + 3 * H, binary: Some("libbeta.so".into()), ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + 3 * H, binary: Some("gam;ma".into()), ..Default::default() },
    ];
    for q in &queries {
        let reference = rows_by_records(&reader, q);
        let n: usize = reference.iter().map(Vec::len).sum();
        assert!(n > 50, "{q:?}: {n} rows, too few to test anything");
        for by in [GroupBy::Function, GroupBy::Binary, GroupBy::Stack] {
            let got = top(&reader, q, by, 0);
            let want = top_of_rows(&reader, &reference, q, by, 0);
            assert_eq!(got.read.rows as usize, n, "{q:?} {by:?}");
            assert_eq!(got.samples, want.samples, "{q:?} {by:?}");
            assert_eq!(got.missing_symbol_tables, want.missing_symbol_tables, "{q:?} {by:?}");
            assert_eq!(got.rows.len(), want.rows.len(), "{q:?} {by:?}");
            for (a, b) in got.rows.iter().zip(&want.rows) {
                assert_eq!(a, b, "{q:?} {by:?}");
            }
            if by == GroupBy::Function && q.pid.is_none() && q.binary.is_none() {
                let names: Vec<&str> = got.rows.iter().map(|r| r.name.as_str()).collect();
                assert!(names.iter().any(|n| n.starts_with("[gamma+0x")), "no unnamed frame: {names:?}");
                assert!(names.iter().any(|n| n.starts_with("[alpha+0x") || n.starts_with("[libbeta.so+0x")), "no frame outside a table");
                assert!(names.contains(&"[kernel]") && names.contains(&"[unknown]") && names.contains(&"[no frames]"));
                assert!(names.iter().any(|n| n.starts_with("ns;")));
            }
        }
    }
}

#[test]
fn diff_by_columns_equals_row_path() {
    let (_tmp, store) = store_with_windows();
    let reader = StoreReader::new(store);
    let qa = SampleQuery { from_us: T0, to_us: T0 + H, ..Default::default() };
    let qb = SampleQuery { from_us: T0 + H, to_us: T0 + 2 * H, ..Default::default() };
    for by in [GroupBy::Function, GroupBy::Binary, GroupBy::Stack] {
        let d = diff(&reader, &qa, &qb, by, 0);
        let a = top_of_rows(&reader, &rows_by_records(&reader, &qa), &qa, by, 0);
        let b = top_of_rows(&reader, &rows_by_records(&reader, &qb), &qb, by, 0);
        assert_eq!((d.a_samples, d.b_samples), (a.samples, b.samples), "{by:?}");
        assert!(d.a_samples > 0 && d.b_samples > 0);
        let self_of =
            |t: &tailprof_analyze::store_query::TopReport, n: &str| t.rows.iter().find(|r| r.name == n).map_or(0, |r| r.self_samples);
        for r in &d.rows {
            assert_eq!(r.a_samples, self_of(&a, &r.name), "{by:?} {}", r.name);
            assert_eq!(r.b_samples, self_of(&b, &r.name), "{by:?} {}", r.name);
        }
        let with_self =
            a.rows.iter().chain(&b.rows).filter(|r| r.self_samples > 0).map(|r| &r.name).collect::<std::collections::HashSet<_>>();
        assert_eq!(d.rows.len(), with_self.len(), "{by:?}");
    }
}
