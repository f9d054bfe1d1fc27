//! When the recording stops: the target's end as the pidfd cannot tell it, and `-a -- CMD`'s
//! command exiting during a long round.

use super::*;

impl Recorder {
    /// `-a -- CMD` records until CMD exits. A recorder that falls behind (a high rate on a
    /// busy machine) can spend seconds in one round; without this check it would notice
    /// the exit only at the round's end and keep sampling (and losing) meanwhile. So
    /// between batches the command's pidfd is polled, and once it has exited every event
    /// is disabled; the loop ends at its next wakeup as usual.
    pub(super) fn stop_sampling_if_command_exited(&mut self) {
        if self.sampling_stopped || !matches!(self.target, Target::SystemWideCommand(_)) {
            return;
        }
        let Some(fd) = self.child.as_ref().and_then(|c| c.pidfd()) else { return };
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 && pfd.revents != 0 {
            for fd in &self.fds {
                let _ = sys::ioctl_disable(fd.as_fd());
            }
            self.sampling_stopped = true;
        }
    }

    /// Whether the target ended in a way the pidfd could not tell us.
    pub(super) fn target_gone(&mut self) -> bool {
        match (&self.target, &mut self.child) {
            (Target::Command(_) | Target::SystemWideCommand(_), Some(c)) if c.pidfd().is_none() => {
                matches!(c.try_wait(), Ok(Some(_)) | Err(_))
            }
            (Target::Pid(pid), _) if self.pidfd.is_none() => !procfs::process_alive(*pid),
            _ => false,
        }
    }
}
