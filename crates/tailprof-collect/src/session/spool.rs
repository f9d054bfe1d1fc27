//! The drain thread: a watchman for the perf rings while the recorder's main thread
//! decodes, merges, encodes and compresses.
//!
//! The main thread reads the rings itself. But a round can take long (a chunk being
//! compressed), and a main thread woken at a ring's watermark (half full) may wait behind
//! busy tasks for the CPU; meanwhile the kernel drops what does not fit. At `record -a -c
//! 10000` on two busy CPUs that was 2–50 % of the samples, where `perf record`, which
//! only copies, lost 0–3 %. So the rings' wakeups go to a small thread at a higher
//! priority ([`DRAIN_NICE`]). It passes each wakeup on to the main thread (an eventfd in
//! the main loop's epoll set). If the ring is still half full [`LATE_MS`] later — the main
//! thread is in a long round or has not been given a CPU — the thread copies the ring's
//! whole records into that ring's *spool*, a byte buffer, and releases the ring space to
//! the kernel. In the common case nothing is copied twice.
//!
//! The main thread [`Spooler::take`]s each spool at the start of a round and then drains
//! the ring itself, under the same lock, so the round rule of `session` is unchanged:
//! every record published before the round's clock reading `T_k` is either still in the
//! ring or already in the spool, and both are taken after `T_k`, spool first (ring order).
//!
//! Bounds: a spool stops growing at its cap ([`spool_cap`]); past it the thread leaves the
//! ring alone and the kernel counts what it drops (`PERF_RECORD_LOST`), exactly as without
//! a drain thread, so a main thread that cannot keep up costs bounded memory and time and
//! every loss is still counted. Corrupt ring headers are counted and handed to the main
//! thread with the spool.
//!
//! Not used with `--call-graph dwarf`: there the main thread unwinds each sample while
//! draining and keeps only the stack words the walk read (see `stacks`); spooling whole
//! 16 KiB stack copies would cost more than it saves.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::ring::Ring;

use super::epoll::Epoll;

/// Token of the stop eventfd in the drain thread's epoll set.
const STOP_TOKEN: u64 = u64::MAX;

/// A spool holds at most this many ring sizes: enough to ride out a long round (a chunk
/// being compressed, the main thread waiting for a CPU), not enough to hide a main thread
/// that cannot keep up at all. That one must lose (counted) rather than fall further and
/// further behind: its backlog would delay the end of the recording by as long, and
/// every record sampled meanwhile would be lost too.
const RINGS_PER_SPOOL: usize = 8;
/// ... and all spools together at most this many bytes (each at least two rings).
const SPOOL_TOTAL_BYTES: usize = 64 << 20;

/// The cap of one spool for `rings` rings of `ring_bytes` each.
pub(super) fn spool_cap(rings: usize, ring_bytes: usize) -> usize {
    let share = SPOOL_TOTAL_BYTES / rings.max(1);
    ring_bytes.saturating_mul(RINGS_PER_SPOOL).min(share).max(ring_bytes.saturating_mul(2))
}

struct Spool {
    ring: Ring,
    /// Whole records copied out of the ring, in ring order.
    buf: Vec<u8>,
    /// Ring headers found corrupt while spooling (the rest of that ring read was skipped).
    corrupt: u64,
    /// Records in `buf`.
    records: u64,
    cap: usize,
}

impl Spool {
    fn drain(&mut self) {
        let buf = &mut self.buf;
        let st = self.ring.drain(|rec| buf.extend_from_slice(rec));
        self.corrupt += st.corrupt as u64;
        self.records += st.records;
    }
}

struct Slot {
    cpu: u32,
    spool: Mutex<Spool>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Spool> {
        // A panic while holding the lock cannot leave a Spool half-updated in a way that
        // matters (bytes are appended whole records at a time), so poisoning is ignored.
        self.spool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The rings, owned by the drain thread and the main thread together (module docs).
pub(super) struct Spooler {
    slots: Arc<Vec<Slot>>,
    stop: Arc<AtomicBool>,
    wake: OwnedFd,
    kick: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// The main thread's half of the double buffer: swapped with a spool's buffer.
    spare: Vec<u8>,
}

/// What [`Spooler::take`] found besides records.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Taken {
    pub corrupt: u64,
    /// Of the records handed over, how many the drain thread had spooled.
    pub spooled: u64,
}

impl Spooler {
    /// Start the drain thread for `rings`; `owner_fds[i]` is the perf fd that owns
    /// `rings[i]` (polled for the wakeup watermark). The fds must stay open until
    /// [`Spooler::stop`] (or drop) returns. If the thread cannot be started, the rings
    /// come back with the error.
    pub(super) fn start(rings: Vec<Ring>, owner_fds: &[RawFd]) -> Result<Spooler, (Vec<Ring>, io::Error)> {
        let (epoll, wake) = match poll_set(owner_fds) {
            Ok(x) => x,
            Err(e) => return Err((rings, e)),
        };
        let ring_bytes = rings.iter().map(|r| r.data_size() as usize).max().unwrap_or(0);
        let cap = spool_cap(rings.len(), ring_bytes);
        let slots: Arc<Vec<Slot>> = Arc::new(
            rings
                .into_iter()
                .map(|ring| Slot { cpu: ring.cpu(), spool: Mutex::new(Spool { ring, buf: Vec::new(), corrupt: 0, records: 0, cap }) })
                .collect(),
        );
        let kick = match eventfd() {
            Ok(k) => Arc::new(k),
            Err(e) => return Err((slots_back(slots), e)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (t_slots, t_stop, t_fds, t_kick) = (slots.clone(), stop.clone(), owner_fds.to_vec(), kick.clone());
        match std::thread::Builder::new()
            .name("tailprof-drain".into())
            .spawn(move || drain_loop(&t_slots, &t_stop, &epoll, &t_fds, &t_kick))
        {
            Ok(thread) => Ok(Spooler { slots, stop, wake, kick, thread: Some(thread), spare: Vec::new() }),
            // The closure (and its clone of `slots`) was dropped with the failed spawn.
            Err(e) => Err((slots_back(slots), e)),
        }
    }

    /// The CPU of each ring, in ring order.
    pub(super) fn cpus(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.cpu).collect()
    }

    /// Hand every spooled record, then every record still in the rings, to `f(cpu,
    /// record)`, ring by ring, each ring's records in ring order.
    pub(super) fn take(&mut self, mut f: impl FnMut(u32, &[u8])) -> Taken {
        let mut taken = Taken::default();
        for slot in self.slots.iter() {
            let cpu = slot.cpu;
            let mut s = slot.lock();
            std::mem::swap(&mut s.buf, &mut self.spare);
            taken.corrupt += std::mem::take(&mut s.corrupt);
            taken.spooled += std::mem::take(&mut s.records);
            for_each_record(&self.spare, |rec| f(cpu, rec));
            self.spare.clear();
            taken.corrupt += s.ring.drain(|rec| f(cpu, rec)).corrupt as u64;
        }
        taken
    }

    /// Whether a ring is over a quarter full or a spool holds records (the main thread's
    /// mid-round check, `Recorder::refill`).
    pub(super) fn any_filling(&self) -> bool {
        self.slots.iter().any(|slot| match slot.spool.try_lock() {
            Ok(s) => !s.buf.is_empty() || s.ring.pending() >= s.ring.data_size() / 4,
            Err(_) => true,
        })
    }

    /// The eventfd the drain thread writes when a ring reached its watermark: readable
    /// means "start a round". [`Spooler::clear_kick`] after waking on it.
    pub(super) fn kick_fd(&self) -> RawFd {
        self.kick.as_raw_fd()
    }

    /// Reset the kick eventfd's count.
    pub(super) fn clear_kick(&self) {
        let mut v = [0u8; 8];
        // SAFETY: reading 8 bytes from our non-blocking eventfd.
        let _ = unsafe { libc::read(self.kick.as_raw_fd(), v.as_mut_ptr().cast(), v.len()) };
    }

    /// Stop the drain thread (idempotent). The rings stay here; [`Spooler::take`] still
    /// drains them.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes to our eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The rings back out of slots no thread holds (a failed start).
fn slots_back(slots: Arc<Vec<Slot>>) -> Vec<Ring> {
    match Arc::try_unwrap(slots) {
        Ok(slots) => slots.into_iter().map(|s| s.spool.into_inner().unwrap_or_else(|p| p.into_inner()).ring).collect(),
        // Only reached if a thread kept a clone, which a failed spawn does not.
        Err(_) => Vec::new(),
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Drop for Spooler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Nice value of the drain thread (needs CAP_SYS_NICE; unprivileged recorders keep
/// their own). Its work per wakeup is bounded (copying at most what the rings hold), and
/// it must run within the time the rest of a ring takes to fill after its watermark
/// wakeup (tens of milliseconds at high rates): at the default weight, on CPUs busy with
/// the workload, it waited about 10 ms per wakeup and sometimes far longer.
const DRAIN_NICE: i32 = -10;

fn raise_priority() {
    // SAFETY: plain syscalls on this thread.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now > DRAIN_NICE {
            libc::setpriority(libc::PRIO_PROCESS, tid, DRAIN_NICE);
        }
    }
}

/// The drain thread's epoll set: the stop eventfd and every ring owner fd.
fn poll_set(owner_fds: &[RawFd]) -> io::Result<(Epoll, OwnedFd)> {
    let epoll = Epoll::new()?;
    let wake = eventfd()?;
    epoll.ctl(libc::EPOLL_CTL_ADD, wake.as_raw_fd(), STOP_TOKEN)?;
    for (i, &fd) in owner_fds.iter().enumerate() {
        epoll.ctl(libc::EPOLL_CTL_ADD, fd, i as u64)?;
    }
    Ok((epoll, wake))
}

/// How long after a ring's watermark wakeup the main thread has to drain it before the
/// drain thread spools it.
const LATE_MS: u64 = 5;

/// The drain thread (module docs): pass watermark wakeups on, spool rings the main thread
/// is late for.
fn drain_loop(slots: &[Slot], stop: &AtomicBool, epoll: &Epoll, fds: &[RawFd], kick: &OwnedFd) {
    raise_priority();
    let mut evbuf = [libc::epoll_event { events: 0, u64: 0 }; 64];
    // When each ring was first seen at or past its watermark (and not drained since).
    let mut full_since: Vec<Option<std::time::Instant>> = vec![None; slots.len()];
    let late = std::time::Duration::from_millis(LATE_MS);
    while !stop.load(Ordering::Acquire) {
        // While a ring waits for the main thread, look again soon; otherwise sleep until
        // a watermark (the timeout only bounds how long a missed wakeup goes unnoticed).
        let timeout = if full_since.iter().any(Option::is_some) { LATE_MS as i32 } else { 100 };
        let Ok(ready) = epoll.wait(&mut evbuf, timeout) else { return };
        let mut kick_main = false;
        for ev in ready {
            if ev.u64 == STOP_TOKEN {
                continue;
            }
            kick_main = true;
            if ev.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                // The owning task exited: the fd would report HUP forever. Stop polling it
                // (the main thread keeps draining the ring every round).
                if let Some(&fd) = fds.get(ev.u64 as usize) {
                    let _ = epoll.ctl(libc::EPOLL_CTL_DEL, fd, ev.u64);
                }
            }
        }
        if kick_main {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writing 8 bytes to our eventfd.
            let _ = unsafe { libc::write(kick.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
        let now = std::time::Instant::now();
        for (slot, since) in slots.iter().zip(full_since.iter_mut()) {
            // The main thread holding the lock is draining this ring: nothing to do.
            let Ok(mut s) = slot.spool.try_lock() else { continue };
            if s.ring.pending() < s.ring.data_size() / 2 {
                *since = None;
                continue;
            }
            match since {
                None => *since = Some(now),
                Some(t) if now.duration_since(*t) >= late => {
                    if s.buf.len() < s.cap {
                        s.drain();
                    }
                    *since = None;
                }
                Some(_) => {}
            }
        }
    }
}

/// Call `f` for each whole record in `buf` (records as the ring holds them: an 8-byte
/// header whose last two bytes are the record's size). Stops at a size that cannot be
/// right (which the ring reader already refused, so it does not happen).
pub(super) fn for_each_record(buf: &[u8], mut f: impl FnMut(&[u8])) {
    let mut at = 0usize;
    while let Some(hdr) = buf.get(at..at + 8) {
        let size = u16::from_ne_bytes([hdr[6], hdr[7]]) as usize;
        let Some(rec) = buf.get(at..at + size).filter(|_| size >= 8) else { return };
        f(rec);
        at += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn records_come_back_whole_and_in_order() {
        let mut buf = Vec::new();
        for i in 0..5u8 {
            buf.extend(rec(9, &vec![i; 8 * i as usize]));
        }
        let mut seen = Vec::new();
        for_each_record(&buf, |r| seen.push((r.len(), r.get(8).copied())));
        assert_eq!(seen, vec![(8, None), (16, Some(1)), (24, Some(2)), (32, Some(3)), (40, Some(4))]);
    }

    #[test]
    fn a_bad_size_ends_the_walk_without_panicking() {
        let mut buf = rec(9, &[1; 8]);
        buf.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // size 0
        buf.extend(rec(9, &[2; 8]));
        let mut n = 0;
        for_each_record(&buf, |_| n += 1);
        assert_eq!(n, 1);
        let mut short = rec(9, &[1; 8]);
        short.truncate(12);
        for_each_record(&short, |_| n += 1);
        assert_eq!(n, 1);
    }

    #[test]
    fn the_cap_is_a_few_rings_bounded_in_total_but_never_below_two_rings() {
        assert_eq!(spool_cap(2, 512 << 10), 4 << 20);
        assert_eq!(spool_cap(256, 512 << 10), 1 << 20);
        assert_eq!(spool_cap(4096, 512 << 10), 1 << 20);
        assert_eq!(spool_cap(0, 0), 0);
    }
}
