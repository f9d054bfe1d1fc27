//! The streamed symbol-table writer (`write_symbol_table`): row groups of
//! `SYMBOL_GROUP_ROWS` functions, the build-id and path on every row, an error item
//! leaving no file.

use parquet::file::reader::{FileReader, SerializedFileReader};
use tailprof_store::read::read_symbols_file;
use tailprof_store::write::{write_symbol_table, SymbolFn, SYMBOL_GROUP_ROWS};
use tailprof_store::*;

fn funcs(n: usize) -> impl Iterator<Item = std::result::Result<SymbolFn, String>> {
    (0..n as u64).map(|i| Ok(SymbolFn { start: 0x1000 + 16 * i, size: 16, name: format!("ns::f{i}(int)") }))
}

fn group_sizes(path: &std::path::Path) -> Vec<i64> {
    let r = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    r.metadata().row_groups().iter().map(|g| g.num_rows()).collect()
}

#[test]
fn row_groups_of_symbol_group_rows_and_rows_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let g = SYMBOL_GROUP_ROWS;
    for (n, groups) in [(1, vec![1]), (g, vec![g as i64]), (2 * g + 1, vec![g as i64, g as i64, 1])] {
        let p = dir.path().join(format!("{n}.parquet"));
        let (bytes, rows) = write_symbol_table(&p, "ab12", "/usr/lib/libx.so", funcs(n)).unwrap();
        assert_eq!(rows, n as u64);
        assert_eq!(bytes, std::fs::metadata(&p).unwrap().len());
        assert_eq!(group_sizes(&p), groups, "{n} functions");
        let back = read_symbols_file(&p).unwrap();
        let want: Vec<SymbolRow> = funcs(n)
            .map(|f| {
                let f = f.unwrap();
                SymbolRow { build_id: "ab12".into(), binary: "/usr/lib/libx.so".into(), start: f.start, size: f.size, name: f.name }
            })
            .collect();
        assert_eq!(back, want, "{n} functions");
    }
}

#[test]
fn an_error_item_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.parquet");
    // the error comes after more than one whole row group was written
    let it = funcs(SYMBOL_GROUP_ROWS + 10).chain(std::iter::once(Err("read at offset 7: file ends".to_string())));
    let e = write_symbol_table(&p, "ab12", "x", it).unwrap_err();
    assert!(e.to_string().contains("file ends"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no file and no temporary left");
}

#[test]
fn an_empty_table_reads_back_empty() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.parquet");
    let (_, rows) = write_symbol_table(&p, "ab12", "x", funcs(0)).unwrap();
    assert_eq!(rows, 0);
    assert!(read_symbols_file(&p).unwrap().is_empty());
}
