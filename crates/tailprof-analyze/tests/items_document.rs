//! `items::document` over a synthetic memory-bandwidth trace with items: one reader, the
//! same items as the items report, each listed item with its memory traffic (read in the
//! join's pass), `--explain` of a listed item, and the selection's order and `more_items`.

use tailprof_analyze::bandwidth::synth::{trace_bytes, Phase, SynthConfig};
use tailprof_analyze::items::document::{document, ItemSelection, ItemSort, ItemsDocument, ItemsQuery};
use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::{AnalyzeError, Symbolizer};
use tailprof_format::TraceReader;

fn trace() -> Vec<u8> {
    let cfg = SynthConfig {
        phases: vec![Phase { duration_ns: 15_000_000, gbps: 1.5 }, Phase { duration_ns: 5_000_000, gbps: 10.0 }],
        repeat: 4,
        items: true,
        period: 200,
        ..Default::default()
    };
    trace_bytes(&cfg).unwrap().0
}

fn query(memory: bool, top: Option<usize>, explain: Option<u64>) -> ItemsQuery {
    ItemsQuery {
        options: ItemsOptions::default(),
        selection: ItemSelection { top, sort: ItemSort::Id, ..Default::default() },
        explain,
        memory,
    }
}

#[test]
fn one_reader_gives_the_items_their_memory_and_the_report_rows() {
    let bytes = trace();
    let report =
        items_report(&mut TraceReader::from_bytes(bytes.clone()).unwrap(), &ItemsOptions::default(), &mut Symbolizer::default()).unwrap();
    assert_eq!(report.items.len(), 8);
    let mut reader = TraceReader::from_bytes(bytes).unwrap();
    let ItemsDocument::List(list) = document(&mut reader, &query(true, Some(5), None), &mut Symbolizer::default()).unwrap() else {
        panic!("a list")
    };
    assert_eq!((list.total_items, list.report.items.len(), list.more_items), (8, 5, Some(3)));
    let mut ids: Vec<u64> = report.items.iter().map(|i| i.id).collect();
    ids.sort_unstable();
    let listed: Vec<u64> = list.report.items.iter().map(|e| e.row.id).collect();
    assert_eq!(listed, ids[..5]);
    for e in &list.report.items {
        let same = report.items.iter().find(|r| r.id == e.row.id).unwrap();
        assert_eq!(&e.row, same);
        let m = e.memory.as_ref().unwrap_or_else(|| panic!("item {} has no memory traffic", e.row.id));
        assert!(m.mem_bytes > 0 && m.mem_gbps > 0.0, "{m:?}");
        // No context switches in this trace: no off-CPU split, no causes.
        assert_eq!(e.split.off_cpu_ns, None);
        assert!(e.causes.is_none() && e.off_cpu.is_empty());
    }
    assert_eq!(list.switches, 0);
    // Without asking for memory there is none.
    let ItemsDocument::List(list) = document(&mut reader, &query(false, None, None), &mut Symbolizer::default()).unwrap() else {
        panic!("a list")
    };
    assert_eq!((list.report.items.len(), list.more_items), (8, None));
    assert!(list.report.items.iter().all(|e| e.memory.is_none()));
}

#[test]
fn explain_through_the_document_and_an_unknown_id() {
    let mut reader = TraceReader::from_bytes(trace()).unwrap();
    let ItemsDocument::List(list) = document(&mut reader, &query(false, Some(1), None), &mut Symbolizer::default()).unwrap() else {
        panic!("a list")
    };
    let id = list.report.items[0].row.id;
    let ItemsDocument::Explain(x) = document(&mut reader, &query(true, None, Some(id)), &mut Symbolizer::default()).unwrap() else {
        panic!("an explanation")
    };
    assert_eq!((x.functions.item.id, x.stacks.id, x.causes.0.id), (id, id, id));
    assert!(!x.causes.0.recorded);
    let e = document(&mut reader, &query(false, None, Some(u64::MAX)), &mut Symbolizer::default()).unwrap_err();
    assert!(matches!(e, AnalyzeError::NoSuchItem { id: u64::MAX }), "{e}");
}
