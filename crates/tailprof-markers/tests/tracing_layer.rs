//! `TailprofLayer` (feature `tracing`) end to end on this very process: the recorder's
//! `MarkerCollector::attach` enables the markers, spans are made, entered on two threads
//! and closed through `tracing`, and the records the recorder decodes are checked marker
//! by marker. One test: the control block is process-wide.

use std::collections::HashMap;

use tailprof_collect::items::markers::MarkerCollector;
use tailprof_format::{MarkerKind, Record};
use tailprof_markers::TailprofLayer;
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: u64 = 0x00f0_67aa_0ba9_02b7;

fn tid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// (tid, kind, item, class name) of every marker, the trace records by item.
type Decoded = (Vec<(u32, MarkerKind, u64, String)>, HashMap<u64, ([u8; 16], [u8; 8])>);

fn decode(recs: &[Record]) -> Decoded {
    let mut classes = HashMap::new();
    let (mut ms, mut traces) = (Vec::new(), HashMap::new());
    for r in recs {
        match r {
            Record::ItemClass(c) => {
                classes.insert(c.id, c.name.clone());
            }
            Record::Marker(m) => {
                let cls = if m.class == 0 { String::new() } else { classes[&m.class].clone() };
                ms.push((m.tid, m.kind, m.item, cls));
            }
            Record::ItemTrace(t) => {
                traces.insert(t.item, (t.trace_id, t.span_id));
            }
            _ => {}
        }
    }
    (ms, traces)
}

#[test]
fn spans_become_items_that_follow_them_across_threads() {
    let pid = std::process::id();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(TailprofLayer::new()));
    // Before any recorder: the first marker finds no region and turns the runtime off;
    // spans made while it is off are not items, even when entered after an attach.
    let early = tracing::dispatcher::with_default(&dispatch, || {
        let s = tracing::info_span!("early");
        s.in_scope(|| {});
        tracing::info_span!("made_while_off")
    });

    let mut mc = MarkerCollector::new();
    assert!(mc.attach(pid).unwrap(), "tailprof_control found in the test binary");
    let main_tid = tid();
    let (request, other_tid) = tracing::dispatcher::with_default(&dispatch, || {
        early.in_scope(|| {});
        // A root span carrying W3C ids: item id = span id, class = span name.
        let request = tracing::info_span!("request", trace_id = TRACE, span_id = "00f067aa0ba902b7");
        // Its children: an INTERNAL one (not an item) and a SERVER one with its own id.
        let db = tracing::info_span!(parent: &request, "db");
        let handler = tracing::info_span!(parent: &request, "handler", otel.kind = "server", tailprof.item_id = 77u64);
        {
            let _r = request.enter(); // begin SPAN (request) + trace context
            let _d = db.enter(); // nothing
            let _h = handler.enter(); // begin 77 (handler)
        } // exit handler: back to SPAN; exit db: nothing; exit request: none
        drop(handler); // end 77
        drop(db);
        // The request moves to another thread: a switch there, then none.
        let r2 = request.clone();
        let other = std::thread::spawn(move || {
            r2.in_scope(|| {});
            tid()
        })
        .join()
        .unwrap();
        // A root span without ids: an id from the layer's counter.
        tracing::info_span!("bare").in_scope(|| {});
        (request, other)
    });
    drop(request); // end SPAN (closes on this thread)

    // Selection by a function, roots and server spans off.
    let picky = Dispatch::new(
        tracing_subscriber::registry().with(TailprofLayer::new().roots(false).server(false).select(|m| m.name() == "picked")),
    );
    tracing::dispatcher::with_default(&picky, || {
        tracing::info_span!("root_not_selected", otel.kind = "server").in_scope(|| {});
        tracing::info_span!("picked").in_scope(|| {});
    });

    let mut recs = Vec::new();
    let stats = mc.finish(&mut recs);
    assert_eq!((stats.dropped, stats.rejected), (0, 0), "{stats:?}");
    let (ms, traces) = decode(&recs);
    let bare = ms.iter().find(|m| m.3 == "bare").expect("bare span is an item").2;
    assert!(bare >= 1 << 63, "counter ids start at 2^63: {bare:#x}");
    let picked = ms.iter().find(|m| m.3 == "picked").expect("picked span is an item").2;
    use MarkerKind::*;
    let n = String::new;
    let want = vec![
        (main_tid, Begin, SPAN, "request".to_owned()),
        (main_tid, Begin, 77, "handler".to_owned()),
        (main_tid, Switch, SPAN, n()),
        (main_tid, SwitchNone, 0, n()),
        (main_tid, End, 77, n()),
        (other_tid, Switch, SPAN, n()),
        (other_tid, SwitchNone, 0, n()),
        (main_tid, Begin, bare, "bare".to_owned()),
        (main_tid, SwitchNone, 0, n()),
        (main_tid, End, bare, n()),
        (main_tid, End, SPAN, n()),
        (main_tid, Begin, picked, "picked".to_owned()),
        (main_tid, SwitchNone, 0, n()),
        (main_tid, End, picked, n()),
    ];
    // Per thread in order; across threads by time (the spawn joins before what follows).
    assert_eq!(ms, want);
    let mut trace_id = [0u8; 16];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&TRACE[2 * i..2 * i + 2], 16).unwrap();
    }
    assert_eq!(traces.len(), 1, "only the span with ids has a trace context");
    assert_eq!(traces[&SPAN], (trace_id, SPAN.to_be_bytes()));
}
