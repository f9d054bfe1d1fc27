//! Time-0 records describing what already runs when the recording starts.

use super::*;

impl Recorder {
    /// Time-0 records: kernel image/modules, and processes already running. Returns the
    /// pids described (sorted). With `done` (the pids an earlier call described, before
    /// the events were enabled), only processes not in it are described.
    pub(super) fn synthesize<O: RecordOutput + ?Sized>(&mut self, out: &mut O, done: Option<&[u32]>) -> Result<Vec<u32>, RecordError> {
        let mut recs = Vec::new();
        if done.is_none() && self.plans.iter().any(|p| !p.desc.exclude_kernel) {
            procfs::kernel_mmaps(&mut recs);
        }
        let mut pids = Vec::new();
        match &self.target {
            Target::Command(_) => {}
            Target::Pid(pid) => {
                procfs::synthesize_process(*pid, &mut recs);
            }
            Target::SystemWide | Target::SystemWideCommand(_) => {
                pids = procfs::all_pids();
                pids.sort_unstable();
                for &pid in &pids {
                    if done.is_none_or(|d| d.binary_search(&pid).is_err()) {
                        procfs::synthesize_process(pid, &mut recs);
                    }
                }
            }
        }
        for r in recs {
            self.emitter.record(r, out)?;
        }
        out.end_round()?;
        Ok(pids)
    }
}
