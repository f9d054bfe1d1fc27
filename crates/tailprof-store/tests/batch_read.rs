//! The column reader (`batch`, what `top`, `diff` and the exports read through) against
//! the parquet crate's record API (`read_samples_file_records`), on files the agent does
//! not write but other writers may: several row groups, small pages (frame lists cut
//! across pages), PLAIN instead of dictionary encoding, more distinct build-ids than the
//! reader's recent-value cache, empty and over-long frame lists, non-ASCII names.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, Encoding};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::format::KeyValue;
use parquet::schema::parser::parse_message_type;
use tailprof_store::read::{read_samples_file, read_samples_file_records};
use tailprof_store::schema::{stack_id, StoreFrame, KV_META, KV_VERSION, SAMPLES_SCHEMA};
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

fn rows(rng: &mut Rng, start: i64, windows: i64, n: usize) -> Vec<SampleRow> {
    let bins = ["/usr/bin/a", "/usr/lib/libé.so", "/opt/b;c", "[kernel]"];
    (0..n)
        .map(|i| {
            let ws = start + (rng.next(windows as u64) as i64) * W;
            // 0..150 frames: some empty, some over MAX_FRAMES (128).
            let depth = match i % 50 {
                0 => 0,
                1 => 140,
                _ => 1 + rng.next(30) as usize,
            };
            let frames: Vec<StoreFrame> =
                (0..depth).map(|_| StoreFrame { build_id: format!("{:08x}", rng.next(20) * 0x1111), offset: rng.next(1 << 40) }).collect();
            SampleRow {
                window_start_us: ws,
                window_end_us: ws + W,
                pid: 100 + rng.next(7) as u32,
                comm: ["w1", "wörker", "", "x y"][rng.next(4) as usize].into(),
                event: "cpu-clock".into(),
                binary: bins[rng.next(4) as usize].into(),
                stack_id: stack_id(&frames),
                frames,
                truncated: rng.next(5) == 0,
                count: rng.next(9),
                period: rng.next(1 << 50),
            }
        })
        .collect()
}

fn ba(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

/// Writes `rows` as a samples file with one row group per `group` rows, pages of at most
/// `page_rows` values, and dictionary encoding on or off.
fn write_groups(path: &Path, rows: &[SampleRow], group: usize, page_rows: usize, dictionary: bool) {
    write_groups_with(path, rows, group, page_rows, dictionary, false, true)
}

/// [`write_groups`], with v2 data pages (levels stored uncompressed before the values)
/// and with or without zstd.
fn write_groups_with(path: &Path, rows: &[SampleRow], group: usize, page_rows: usize, dictionary: bool, v2: bool, zstd: bool) {
    let schema = Arc::new(parse_message_type(SAMPLES_SCHEMA).unwrap());
    let meta = WindowMeta { schema_version: SCHEMA_VERSION, host: "h".into(), samples: 7, lost_samples: 2, ..Default::default() };
    let props = WriterProperties::builder()
        .set_compression(if zstd { Compression::ZSTD(Default::default()) } else { Compression::UNCOMPRESSED })
        .set_writer_version(if v2 { WriterVersion::PARQUET_2_0 } else { WriterVersion::PARQUET_1_0 })
        .set_dictionary_enabled(dictionary)
        .set_encoding(Encoding::PLAIN)
        .set_data_page_row_count_limit(page_rows)
        .set_write_batch_size(page_rows.max(1))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(KV_VERSION.into(), SCHEMA_VERSION.to_string()),
            KeyValue::new(KV_META.into(), serde_json::to_string(&meta).unwrap()),
        ]))
        .build();
    let f = std::fs::File::create(path).unwrap();
    let mut w = SerializedFileWriter::new(f, schema, Arc::new(props)).unwrap();
    for chunk in rows.chunks(group) {
        let mut rg = w.next_row_group().unwrap();
        let mut col = 0;
        while let Some(mut cw) = rg.next_column().unwrap() {
            let (mut lb, mut lo, mut d, mut r) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for x in chunk {
                if x.frames.is_empty() {
                    d.push(0);
                    r.push(0);
                }
                for (i, f) in x.frames.iter().enumerate() {
                    lb.push(ba(&f.build_id));
                    lo.push(f.offset as i64);
                    d.push(1);
                    r.push(i16::from(i > 0));
                }
            }
            let i64s = |f: &dyn Fn(&SampleRow) -> i64| chunk.iter().map(f).collect::<Vec<i64>>();
            let strs = |f: &dyn Fn(&SampleRow) -> &str| chunk.iter().map(|x| ba(f(x))).collect::<Vec<ByteArray>>();
            match col {
                0 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.window_start_us), None, None),
                1 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.window_end_us), None, None),
                2 => cw.typed::<Int32Type>().write_batch(&chunk.iter().map(|x| x.pid as i32).collect::<Vec<_>>(), None, None),
                3 => cw.typed::<ByteArrayType>().write_batch(&strs(&|x| &x.comm), None, None),
                4 => cw.typed::<ByteArrayType>().write_batch(&strs(&|x| &x.event), None, None),
                5 => cw.typed::<ByteArrayType>().write_batch(&strs(&|x| &x.binary), None, None),
                6 => cw.typed::<ByteArrayType>().write_batch(&strs(&|x| x.frames.first().map_or("", |f| &f.build_id)), None, None),
                7 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.frames.first().map_or(-1, |f| f.offset as i64)), None, None),
                8 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.stack_id as i64), None, None),
                9 => cw.typed::<ByteArrayType>().write_batch(&lb, Some(&d), Some(&r)),
                10 => cw.typed::<Int64Type>().write_batch(&lo, Some(&d), Some(&r)),
                11 => cw.typed::<BoolType>().write_batch(&chunk.iter().map(|x| x.truncated).collect::<Vec<_>>(), None, None),
                12 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.count as i64), None, None),
                13 => cw.typed::<Int64Type>().write_batch(&i64s(&|x| x.period as i64), None, None),
                _ => unreachable!(),
            }
            .unwrap();
            cw.close().unwrap();
            col += 1;
        }
        rg.close().unwrap();
    }
    w.close().unwrap();
}

/// What the record API yields for a row (frames cut at MAX_FRAMES).
fn cut(mut r: SampleRow) -> SampleRow {
    r.frames.truncate(MAX_FRAMES);
    r
}

#[test]
fn column_reader_equals_record_api_across_row_groups_pages_and_encodings() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let cases = [
        // (rows, rows per group, values per page, dictionary, v2 pages, zstd)
        (1, 1, 1, true, false, true),
        (5000, 700, 64, true, false, true),
        (3000, 999, 7, false, false, true),
        (9000, 9000, 20_000, true, false, true),
        (4000, 1500, 50, true, true, true),
        (2000, 600, 33, false, true, false),
        (2000, 2000, 100, true, false, false),
    ];
    for (k, &(n, group, page, dict, v2, zstd)) in cases.iter().enumerate() {
        let p = tmp.path().join(format!("f{k}.parquet"));
        let want = rows(&mut rng, T0, 360, n);
        write_groups_with(&p, &want, group, page, dict, v2, zstd);
        let (m1, by_records) = read_samples_file_records(&p).unwrap();
        let (m2, by_columns) = read_samples_file(&p).unwrap();
        assert_eq!(m1, m2);
        assert_eq!(m2.as_ref().map(|m| m.lost_samples), Some(2));
        assert_eq!(by_records.len(), n, "file {k}");
        assert_eq!(
            by_columns, by_records,
            "file {k}: {n} rows, groups of {group}, pages of {page}, dictionary {dict}, v2 {v2}, zstd {zstd}"
        );
        assert_eq!(by_columns, want.into_iter().map(cut).collect::<Vec<_>>(), "file {k}");
    }
}

#[test]
fn store_reads_filter_like_the_record_api() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("s")).unwrap();
    let mut rng = Rng(42);
    let mut all = Vec::new();
    // NF files of an hour's windows each (so that the reader's threads get several runs
    // of files each).
    const NF: i64 = 40;
    for f in 0..NF {
        let start = T0 + f * H;
        let end = start + H;
        let mut rs = rows(&mut rng, start, 360, 20 + 5 * f as usize);
        rs.sort_by_key(|r| r.window_start_us);
        let dir = store.partition_dir(Table::Samples, "h1", start);
        store.ensure_dir(&dir).unwrap();
        let path = dir.join(format!("c-{:016}-{:016}.parquet", start, end));
        write_groups(&path, &rs, 9 + 50 * (f as usize % 4), 100, f % 3 != 0);
        all.extend(rs.into_iter().map(cut));
    }
    // A damaged file is counted, not fatal, and does not stop the others.
    let bad = T0 + NF * H;
    let bad_dir = store.partition_dir(Table::Samples, "h1", bad);
    store.ensure_dir(&bad_dir).unwrap();
    std::fs::write(store.window_file(Table::Samples, "h1", bad, bad + W), b"PAR1 not parquet").unwrap();
    let reader = StoreReader::new(store);
    let queries = [
        SampleQuery { from_us: T0, to_us: T0 + (NF + 1) * H, ..Default::default() },
        SampleQuery { from_us: T0 + 3 * H + 17 * W, to_us: T0 + 7 * H - 3 * W, ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + (NF + 1) * H, pid: Some(103), ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + (NF + 1) * H, binary: Some("libé.so".into()), ..Default::default() },
        SampleQuery { from_us: T0, to_us: T0 + (NF + 1) * H, binary: Some("wörker".into()), ..Default::default() },
        SampleQuery { from_us: T0 + 2 * H, to_us: T0 + 39 * H, pid: Some(101), binary: Some("/usr/bin/a".into()), ..Default::default() },
    ];
    for q in &queries {
        let want: Vec<&SampleRow> = all
            .iter()
            .filter(|r| r.window_end_us > q.from_us && r.window_start_us < q.to_us)
            .filter(|r| q.pid.is_none_or(|p| p == r.pid))
            .filter(|r| q.binary.as_ref().is_none_or(|b| r.binary.ends_with(b.as_str()) || &r.comm == b))
            .collect();
        let (got, st) = reader.samples(q);
        assert!(!want.is_empty(), "{q:?} selects nothing: a useless test");
        assert_eq!(got.len(), want.len(), "{q:?}");
        assert!(got.iter().zip(&want).all(|(a, b)| a == *b), "{q:?}");
        assert_eq!(st.rows, want.len() as u64);
        let mut batches = 0;
        let mut last = None;
        let st2 = reader.sample_batches(q, &mut |i, b| {
            assert!(last.is_none_or(|l| i > l), "files out of order");
            last = Some(i);
            batches += 1;
            assert_eq!(b.frame_ends.len(), b.len());
        });
        assert_eq!(st2, st);
        assert_eq!(st.files, batches);
        if q.from_us == T0 {
            assert_eq!(st.bad_files, 1, "{q:?}");
            assert_eq!(st.lost_samples, 2 * NF as u64);
        }
    }
}
