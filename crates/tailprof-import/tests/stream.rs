//! The import loop is the record stream's producer: a sink that stops ends the import
//! (nothing more is read or converted), and a sink that fails makes it an error.

mod common;

use common::*;
use tailprof_format::{Flow, FormatError, Record, Sink};
use tailprof_import::{import_to_sink, ImportError, ImportOptions};

/// Takes the first `limit` records, then stops; or fails at the first record.
struct FirstN {
    limit: usize,
    seen: Vec<Record>,
    fail: bool,
}

impl Sink for FirstN {
    fn handle_record(&mut self, r: &Record) -> Flow {
        self.seen.push(r.clone());
        if self.fail || self.seen.len() >= self.limit {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
    fn take_error(&mut self) -> Option<FormatError> {
        self.fail.then_some(FormatError::RecordTooLarge("test sink"))
    }
}

#[test]
fn import_to_sink_stops_reading_when_the_sink_stops() {
    let Some(p) = corpus_file("perf_data_converter__perf.data.throttle-3.8") else { return };
    let (full, all) = import(&p);
    assert!(all.len() > 100, "{}", all.len());
    let mut first = FirstN { limit: 10, seen: Vec::new(), fail: false };
    let imp = import_to_sink(&p, &ImportOptions::default(), &mut first).unwrap();
    assert_eq!(first.seen, all[..10]);
    // Only what was handed out was converted.
    let converted = |s: &tailprof_import::ImportSummary| s.samples + s.side_band + s.throttles + s.lost_events + s.switches;
    assert_eq!(converted(&imp.summary), 10, "{:?}", imp.summary);
    assert!(converted(&full.summary) > 100);
}

#[test]
fn import_to_sink_returns_the_sinks_error() {
    let Some(p) = corpus_file("perf_data_converter__perf.data.throttle-3.8") else { return };
    let mut failing = FirstN { limit: usize::MAX, seen: Vec::new(), fail: true };
    let err = import_to_sink(&p, &ImportOptions::default(), &mut failing).unwrap_err();
    assert!(matches!(err, ImportError::Write { .. }), "{err}");
    assert_eq!(failing.seen.len(), 1);
}
