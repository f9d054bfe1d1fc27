//! Round trips through the store: write, read back, compaction, retention, temp files.

use std::os::unix::fs::PermissionsExt;
use tailprof_store::schema::StoreFrame;
use tailprof_store::*;

const H: i64 = 3_600_000_000;
const T0: i64 = 1_700_000_000_000_000 - 1_700_000_000_000_000 % H; // an hour boundary

fn row(start: i64, pid: u32, leaf: u64, count: u64) -> SampleRow {
    let frames = vec![StoreFrame { build_id: "ab12".into(), offset: leaf }, StoreFrame { build_id: "ab12".into(), offset: 0x1000 }];
    SampleRow {
        window_start_us: start,
        window_end_us: start + 10_000_000,
        pid,
        comm: "worker".into(),
        event: "cpu-clock".into(),
        binary: "/usr/bin/worker".into(),
        stack_id: schema::stack_id(&frames),
        frames,
        truncated: false,
        count,
        period: count * 20_000_000,
    }
}

fn write_window(store: &Store, start: i64, rows: &[SampleRow]) {
    let meta = WindowMeta {
        schema_version: SCHEMA_VERSION,
        host: "h1".into(),
        window_start_us: start,
        window_end_us: start + 10_000_000,
        samples: rows.iter().map(|r| r.count).sum(),
        lost_samples: 1,
        ..Default::default()
    };
    let dir = store.partition_dir(Table::Samples, "h1", start);
    store.ensure_dir(&dir).unwrap();
    write_samples(&store.window_file(Table::Samples, "h1", start, start + 10_000_000), &meta, rows).unwrap();
}

#[test]
fn samples_round_trip_and_private_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("s")).unwrap();
    let rows = vec![row(T0, 7, 0x1234, 30), row(T0, 7, 0x2345, 70), SampleRow { frames: vec![], stack_id: 0, ..row(T0, 8, 0, 5) }];
    write_window(&store, T0, &rows);
    let reader = StoreReader::new(store.clone());
    let (back, st) = reader.samples(&SampleQuery { from_us: T0, to_us: T0 + H, ..Default::default() });
    assert_eq!(st.bad_files, 0);
    assert_eq!(st.lost_samples, 1);
    assert_eq!(back, rows);
    let (only7, _) = reader.samples(&SampleQuery { from_us: T0, to_us: T0 + H, pid: Some(7), ..Default::default() });
    assert_eq!(only7.len(), 2);
    let (none, _) = reader.samples(&SampleQuery { from_us: T0 + H, to_us: T0 + 2 * H, ..Default::default() });
    assert!(none.is_empty());
    let f = &reader.files(Table::Samples, None, i64::MIN, i64::MAX)[0];
    assert_eq!(std::fs::metadata(&f.path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(store.root()).unwrap().permissions().mode() & 0o777, 0o700);
}

#[test]
fn symbols_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(tmp.path()).unwrap();
    store.ensure_dir(&store.symbols_dir()).unwrap();
    let syms =
        vec![SymbolRow { build_id: "ab12".into(), binary: "/usr/bin/worker".into(), start: 0x1200, size: 0x100, name: "hot".into() }];
    write_symbols(&store.symbols_file("ab12").unwrap(), &syms).unwrap();
    assert_eq!(StoreReader::new(store).symbols("ab12").unwrap(), syms);
}

/// A table larger than one row group (written a group at a time) reads back whole and in
/// order.
#[test]
fn big_symbol_tables_round_trip_across_row_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(tmp.path()).unwrap();
    store.ensure_dir(&store.symbols_dir()).unwrap();
    let syms: Vec<SymbolRow> = (0..20_000u64)
        .map(|i| SymbolRow {
            build_id: "cd34".into(),
            binary: "/usr/lib/libbig.so".into(),
            start: 0x1000 + 16 * i,
            size: 16,
            name: format!("f{i}"),
        })
        .collect();
    write_symbols(&store.symbols_file("cd34").unwrap(), &syms).unwrap();
    assert_eq!(StoreReader::new(store).symbols("cd34").unwrap(), syms);
}

#[test]
fn temp_and_damaged_files_are_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(tmp.path()).unwrap();
    write_window(&store, T0, &[row(T0, 1, 1, 1)]);
    let dir = store.partition_dir(Table::Samples, "h1", T0);
    std::fs::write(dir.join(".tmp-1-w-0-1.parquet"), b"PAR1 half").unwrap();
    std::fs::write(dir.join(format!("w-{:016}-{:016}.parquet", T0 + 10_000_000, T0 + 20_000_000)), b"garbage").unwrap();
    let (rows, st) = StoreReader::new(store.clone()).samples(&SampleQuery { from_us: T0, to_us: T0 + H, ..Default::default() });
    assert_eq!(rows.len(), 1);
    assert_eq!(st.bad_files, 1);
    let (_, removed) = Store::open(tmp.path()).unwrap();
    assert_eq!(removed, 1);
}

#[test]
fn compaction_keeps_rows_and_retention_removes_oldest() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(tmp.path()).unwrap();
    for k in 0..4 {
        write_window(&store, T0 + k * 10_000_000, &[row(T0 + k * 10_000_000, 1, 0x10 + k as u64, 10)]);
    }
    write_window(&store, T0 + H, &[row(T0 + H, 1, 0x99, 10)]);
    let reader = StoreReader::new(store.clone());
    let q = SampleQuery { from_us: T0, to_us: T0 + 2 * H, ..Default::default() };
    let before = reader.samples(&q).0;
    let st = compact(&store, "h1", T0 + H).unwrap();
    assert_eq!((st.hours_compacted, st.files_merged), (1, 4));
    let (after, rs) = reader.samples(&q);
    assert_eq!(rs.files, 2);
    assert_eq!(rs.samples, 50);
    let key = |r: &SampleRow| (r.window_start_us, r.frames[0].offset);
    let (mut a, mut b) = (before.clone(), after.clone());
    a.sort_by_key(key);
    b.sort_by_key(key);
    assert_eq!(a, b);
    // Retention by size keeps only the newest file.
    let newest = reader.files(Table::Samples, None, i64::MIN, i64::MAX).last().unwrap().bytes;
    let rt = retain(&store, &RetainPolicy { max_age_us: None, max_bytes: Some(newest) }, T0 + 2 * H).unwrap();
    assert_eq!(rt.removed_by_size, 1);
    assert_eq!(reader.samples(&q).0.len(), 1);
    // By age: everything ended more than 10 min before T0+3h.
    let rt = retain(&store, &RetainPolicy { max_age_us: Some(600_000_000), max_bytes: None }, T0 + 3 * H).unwrap();
    assert_eq!(rt.removed_by_age, 1);
    assert!(reader.samples(&q).0.is_empty());
}

/// Issue 19, finding 10: the window's losses are stored by kind, summed by the reader and
/// by compaction; a file written before they existed reads as 0.
#[test]
fn finding_10_losses_by_kind_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("s")).unwrap();
    let losses = schema::Losses { lost_records: 2, lost_markers: 30, malformed_records: 400, dropped_item_classes: 5000 };
    for start in [T0, T0 + 10_000_000] {
        let meta = WindowMeta {
            schema_version: SCHEMA_VERSION,
            host: "h1".into(),
            window_start_us: start,
            window_end_us: start + 10_000_000,
            losses,
            ..Default::default()
        };
        let dir = store.partition_dir(Table::Samples, "h1", start);
        store.ensure_dir(&dir).unwrap();
        write_samples(&store.window_file(Table::Samples, "h1", start, start + 10_000_000), &meta, &[row(start, 7, 1, 1)]).unwrap();
    }
    let reader = StoreReader::new(store.clone());
    let (_, st) = reader.samples(&SampleQuery { from_us: T0, to_us: T0 + H, ..Default::default() });
    assert_eq!(st.lost_samples, 0);
    let mut twice = losses;
    twice.add(&losses);
    assert_eq!(st.losses, twice);
    compact(&store, "h1", T0 + 2 * H).unwrap();
    let (_, st) = reader.samples(&SampleQuery { from_us: T0, to_us: T0 + H, ..Default::default() });
    assert_eq!((st.files, st.losses), (1, twice), "compaction keeps the sums");
    let old: WindowMeta = serde_json::from_str(r#"{"schema_version":1,"host":"h","window_start_us":0,"window_end_us":1,"samples":1,"lost_samples":2,"dropped_windows":0,"dropped_rows":0,"events":[],"agent_version":"0"}"#).unwrap();
    assert_eq!((old.lost_samples, old.losses), (2, schema::Losses::default()));
}

/// Issue 19, finding 8: `symbols/` was outside retention, so an attacker's 118,822 tables
/// stayed on disk forever. A table's time is its last use (its modification time, moved
/// forward by `touch_symbols` when the binary is seen again): unused tables go by age,
/// and count toward the size bound like every other file.
#[test]
fn finding_8_symbol_tables_have_retention_by_last_use() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(&tmp.path().join("s")).unwrap();
    store.ensure_dir(&store.symbols_dir()).unwrap();
    let day = std::time::Duration::from_secs(86_400);
    let old = std::time::SystemTime::now() - 30 * day;
    for id in ["aa01", "aa02", "aa03"] {
        let p = store.symbols_file(id).unwrap();
        write::write_symbol_table(&p, id, "/bin/x", [Ok::<_, String>(write::SymbolFn { start: 0, size: 1, name: "f".into() })]).unwrap();
        std::fs::File::open(&p).unwrap().set_modified(old).unwrap();
    }
    assert_eq!(touch_symbols(&store, ["aa02", "../etc", "ffff"]), 1, "only existing, valid names are marked");
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let st = retain(&store, &RetainPolicy { max_age_us: Some(14 * 86_400_000_000), max_bytes: None }, now_us).unwrap();
    assert_eq!((st.removed_by_age, st.symbol_tables_removed), (2, 2));
    assert!(store.symbols_file("aa02").unwrap().exists(), "a table in use is kept");
    assert!(!store.symbols_file("aa01").unwrap().exists());
    // over the size bound: the least recently used files go first, tables included
    let st = retain(&store, &RetainPolicy { max_age_us: None, max_bytes: Some(0) }, now_us).unwrap();
    assert_eq!(st.symbol_tables_removed, 1);
}
