//! Helpers shared by the recorder's integration tests.

use tailprof_collect::session::{RecordError, RecordOptions, Recorder};
use tailprof_collect::sys::CollectError;

/// `Recorder::new`, or None (skip) when perf_event_open is refused for permissions.
pub fn recorder(o: RecordOptions) -> Option<Recorder> {
    match Recorder::new(o) {
        Ok(r) => Some(r),
        Err(RecordError::Collect(e @ CollectError::Permission { .. })) => {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format_args!("perf_event_open refused: {e}"));
            None
        }
        Err(e) => panic!("Recorder::new: {e}"),
    }
}
