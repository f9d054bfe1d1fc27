//! What a recording reports: progress per round, the summary at the end, warnings.

/// Handed to the progress callback once per round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub elapsed_ns: u64,
    pub samples: u64,
    pub lost: u64,
    pub bytes: u64,
    /// Item markers written so far (from the marker library and from uprobes).
    pub markers: u64,
    /// Markers dropped because a marker ring was full.
    pub lost_markers: u64,
}

/// What a recording did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordSummary {
    pub duration_ns: u64,
    pub samples: u64,
    /// Sum of PERF_RECORD_LOST counts (ring full).
    pub lost_records: u64,
    /// Sum of PERF_RECORD_LOST_SAMPLES counts.
    pub lost_samples: u64,
    /// PERF_RECORD_THROTTLE records.
    pub throttled: u64,
    /// Command target: exit code, or 128 + signal.
    pub exit_status: Option<i32>,
    /// epoll wakeups that reported ready fds.
    pub wakeups: u64,
    pub rounds: u64,
    /// Records that could not be decoded (and ring batches with a corrupt size field);
    /// they are counted here, never silently dropped.
    pub malformed: u64,
    /// Records written after a record with a later timestamp (see the module docs).
    pub out_of_order: u64,
    /// Records of types the recorder does not keep (e.g. PERF_RECORD_SWITCH).
    pub ignored: u64,
    /// Item markers written (from the marker library and from uprobes).
    pub markers: u64,
    /// Markers dropped because a marker ring was full (sum of `Lost { kind: Markers }`).
    pub lost_markers: u64,
    /// Records the drain thread copied out of a ring the main thread was late for
    /// (`session::spool`); they are written like every other record.
    pub spooled: u64,
    /// JIT code names (perf maps, jitdumps) copied into the trace.
    pub jit_names: u64,
    /// JIT code names skipped (stored as `Lost { kind: JitNames }`).
    pub skipped_jit_names: u64,
    /// Source-line entries of JIT code (jitdump DEBUG_INFO) copied, and skipped (stored
    /// as `Lost { kind: JitLines }`).
    pub jit_lines: u64,
    pub skipped_jit_lines: u64,
    /// `--call-graph dwarf`: JIT code ranges whose jitdump UNWINDING_INFO the unwinder
    /// used, and records of it skipped (malformed, over a bound).
    pub jit_unwind_infos: u64,
    pub jit_unwind_skipped: u64,
    /// `--call-graph dwarf`: frames unwound through JIT unwind information, and frames in
    /// code without unwind information walked with the frame-pointer fallback (counted
    /// as of the last JIT poll).
    pub jit_cfi_frames: u64,
    pub unwind_fallback_frames: u64,
    /// What the user should know about the run (the CLI prints each as a warning).
    pub warnings: Vec<RunWarning>,
    /// Paths evicted from the build-id cache (least recently used first) because it held
    /// [`super::emit::MAX_BUILD_ID_PATHS`] paths or [`super::emit::MAX_BUILD_ID_PATH_BYTES`] bytes of
    /// them (issue 19, finding 7); such a file's build-id is read again if it is mapped again.
    pub build_id_paths_evicted: u64,
    /// (path, build-id) pairs not stored in the trace because it already holds
    /// [`super::emit::MAX_TRACE_BUILD_ID_BYTES`] of them (a recording's build-id table is kept
    /// in memory until the end: issue 19, finding 7, `record -a` grew by 400 MB with
    /// 100,000 long paths); those paths are symbolized by path at report time.
    pub build_ids_not_stored: u64,
}

/// Something about a finished recording worth a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunWarning {
    /// The launched command failed (non-zero exit or a signal the recorder did not send)
    /// and no item marker was recorded although item probes were set: the probes may have
    /// broken it (as inherited uprobe PMU events once broke `clone`, issue 18 item 2).
    CommandFailedWithoutMarkers {
        /// Exit code, or 128 + signal.
        exit_status: i32,
    },
}

impl std::fmt::Display for RunWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunWarning::CommandFailedWithoutMarkers { exit_status } => write!(
                f,
                "the command exited with status {exit_status} and no item marker was recorded although item probes \
                 were set: if it succeeds without tailprof, the probes may have broken it (please report it); \
                 otherwise check that the probed functions run"
            ),
        }
    }
}

/// [`RunWarning::CommandFailedWithoutMarkers`] when it applies: a launched command that
/// failed by itself (`stopped`: the recorder was stopped and may have signalled it), with
/// item probes and no marker.
pub(crate) fn command_failure_warning(exit_status: Option<i32>, stopped: bool, probes: bool, markers: u64) -> Option<RunWarning> {
    match exit_status {
        Some(code) if code != 0 && !stopped && probes && markers == 0 => {
            Some(RunWarning::CommandFailedWithoutMarkers { exit_status: code })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_without_markers_under_probes_is_a_warning() {
        let w = command_failure_warning(Some(1), false, true, 0);
        assert_eq!(w, Some(RunWarning::CommandFailedWithoutMarkers { exit_status: 1 }));
        assert!(w.unwrap().to_string().contains("status 1"));
        // Success, markers seen, no probes, stopped by the user, or no command: nothing.
        assert_eq!(command_failure_warning(Some(0), false, true, 0), None);
        assert_eq!(command_failure_warning(Some(1), false, true, 4), None);
        assert_eq!(command_failure_warning(Some(1), false, false, 0), None);
        assert_eq!(command_failure_warning(Some(143), true, true, 0), None);
        assert_eq!(command_failure_warning(None, false, true, 0), None);
    }
}
