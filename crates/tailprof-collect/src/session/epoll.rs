//! A thin epoll wrapper for the recorder loop.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A thin epoll wrapper.
pub(super) struct Epoll(OwnedFd);

impl Epoll {
    pub(super) fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        Ok(Epoll(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }
    pub(super) fn ctl(&self, op: i32, fd: i32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: valid epoll fd and event pointer.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    /// Ready events; an interrupted wait (a signal) returns none.
    pub(super) fn wait<'a>(&self, buf: &'a mut [libc::epoll_event], timeout_ms: i32) -> io::Result<&'a [libc::epoll_event]> {
        // SAFETY: buf is valid for buf.len() events.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), buf.as_mut_ptr(), buf.len() as i32, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(&buf[..0]) } else { Err(e) };
        }
        Ok(&buf[..n as usize])
    }
}
