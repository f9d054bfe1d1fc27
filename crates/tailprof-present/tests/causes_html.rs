//! The HTML report draws the wake edges (issue 21, part 6): a slow item's section names
//! its waker, links to the waker's item row and draws the edge. On a synthetic trace: item
//! 2 (thread B) blocks on a lock that thread A, inside item 1, releases at 18 ms.

use tailprof_analyze::items::{items_report, ItemsOptions};
use tailprof_analyze::stacks::{stack_profile, ItemSpan, StackFilter, StackOptions};
use tailprof_analyze::Symbolizer;
use tailprof_format::{
    Comm, EventDesc, Marker, MarkerKind, MarkerSource, Record, Switch, SwitchKind, TraceHeader, TraceReader, TraceWriter, Wakeup,
};
use tailprof_present::html::{causes_section_html, render_items_html_with, HtmlOptions};

const PID: u32 = 100;
const A: u32 = 101;
const B: u32 = 102;
const MS: u64 = 1_000_000;

fn marker(time: u64, tid: u32, kind: MarkerKind, item: u64) -> Record {
    Record::Marker(Marker { time, pid: PID, tid, kind, item, class: 0, source: MarkerSource::Api })
}

fn sw(time: u64, tid: u32, kind: SwitchKind) -> Record {
    Record::Switch(Switch { time, pid: PID, tid, cpu: 0, kind, ..Default::default() })
}

fn trace(causes: bool) -> Vec<u8> {
    let mut h = TraceHeader {
        events: vec![EventDesc { name: "cpu-clock".into(), attr_type: 1, sample_period: Some(MS), ..Default::default() }],
        ..Default::default()
    };
    if causes {
        h.extra.insert("causes".into(), "sched_waking".into());
    }
    let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
    let recs = vec![
        Record::Comm(Comm { time: 0, pid: PID, tid: A, exec: false, comm: "holder".into() }),
        Record::Comm(Comm { time: 0, pid: PID, tid: B, exec: false, comm: "waiter".into() }),
        marker(0, A, MarkerKind::Begin, 1),
        marker(2 * MS, B, MarkerKind::Begin, 2),
        sw(3 * MS, B, SwitchKind::OutBlocked),
        Record::Wakeup(Wakeup { time: 18 * MS, pid: PID, tid: A, cpu: 0, wakee_tid: B, ..Default::default() }),
        sw(18 * MS + MS / 2, B, SwitchKind::In),
        marker(20 * MS, A, MarkerKind::End, 1),
        marker(22 * MS, B, MarkerKind::End, 2),
    ];
    for r in &recs {
        w.write(r).unwrap();
    }
    w.finish_into_inner(None).unwrap().0
}

fn page(bytes: Vec<u8>) -> (String, String) {
    let mut sym = Symbolizer::default();
    let mut r = TraceReader::from_bytes(bytes.clone()).unwrap();
    let items = items_report(&mut r, &ItemsOptions::default(), &mut sym).unwrap();
    let mut r = TraceReader::from_bytes(bytes).unwrap();
    let opts = StackOptions { event: None, filter: StackFilter::default(), timeline: false, ..Default::default() };
    let p = stack_profile(&mut r, &opts, ItemSpan::from_rows(&items.items), &mut sym).unwrap();
    let section = causes_section_html(&items, &p, 10);
    (render_items_html_with(&items, &HtmlOptions::default(), &section), section)
}

#[test]
fn slow_item_links_to_its_waker_item_and_draws_the_edge() {
    let (html, section) = page(trace(true));
    // The items table has the anchors the links point at.
    assert!(html.contains("<tr id=\"item-1\"") && html.contains("<tr id=\"item-2\""), "{html}");
    // Item 2's section names the holder inside item 1 and links to it.
    assert!(section.contains("<h3 id=\"causes-2\">item 2"), "{section}");
    assert!(section.contains("woken by holder (pid 100, tid 101), inside <a href=\"#item-1\">item 1</a>"), "{section}");
    assert!(section.contains("blocked 15.00 ms"), "{section}");
    // The edge: from the waker (tid 101) into item 2, at the wakeup.
    assert!(section.contains("class=\"wake-edge\" data-waker-tid=\"101\" data-wakee-item=\"2\""), "{section}");
    // Item 1 was not held up: no section of its own.
    assert!(!section.contains("id=\"causes-1\""), "{section}");
}

#[test]
fn traces_without_wakeups_have_no_wake_edges() {
    let (html, section) = page(trace(false));
    assert!(section.is_empty(), "{section}");
    assert!(!html.contains("wake-edge"));
}
