//! The marker shared-memory region (recorder side): byte layout constants, creating and
//! mapping `/dev/shm/tailprof.<pid>`, reading slots, and reading/writing the target's
//! `tailprof_control` block with `process_vm_readv`/`process_vm_writev`.
//!
//! The layout is specified in docs/MARKERS.md and mirrored by `include/tailprof.h`,
//! `crates/tailprof-markers` and `python/tailprof_markers.py`; the constants here are the
//! recorder's copy. All fields are little-endian and naturally aligned.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const MAGIC: u64 = 0x314B_524D_4650_5454; // "TTPFMRK1"
pub const VERSION: u32 = 1;
pub const HEADER_SIZE: u32 = 4096;
pub const CLOCK_MONOTONIC_ID: u32 = 1;
pub const RECORD_SIZE: u32 = 32;
pub const SLOT_RING_OFFSET: u32 = 1280;
pub const SLOT_CLASSES: u32 = 16;
pub const SLOT_CLASS_SIZE: u32 = 64;

// Header field offsets.
pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_HEADER_SIZE: usize = 12;
pub const H_REGION_SIZE: usize = 16;
pub const H_GENERATION: usize = 24;
pub const H_PID: usize = 32;
pub const H_CLOCK: usize = 36;
pub const H_NSLOTS: usize = 40;
pub const H_RING: usize = 44;
pub const H_SLOT_SIZE: usize = 48;
pub const H_SLOTS_OFFSET: usize = 52;
pub const H_NEXT_SLOT: usize = 56;
pub const H_NOSLOT_DROPPED: usize = 64;

// Slot field offsets.
pub const S_STATE: usize = 0;
pub const S_TID: usize = 4;
pub const S_DROPPED: usize = 8;
pub const S_HEAD: usize = 64;
pub const S_TAIL: usize = 128;
pub const S_CLASSES: usize = 256;

// Control block (`tailprof_control`) field offsets.
pub const CONTROL_SIZE: usize = 128;
pub const C_SIZE: usize = 0;
pub const C_VERSION: usize = 4;
pub const C_STATE: usize = 8;
pub const C_GENERATION: usize = 16;
pub const C_PATH: usize = 24;
pub const C_PATH_LEN: usize = 96;
pub const STATE_OFF: u64 = 0;
pub const STATE_ON: u64 = 2;

/// One record as it sits in a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord {
    pub time: u64,
    pub item: u64,
    pub cls: u64,
    pub kind: u32,
}

/// A created and mapped region.
pub struct Region {
    pub path: PathBuf,
    base: *mut u8,
    len: usize,
    pub nslots: u32,
    pub ring: u32,
    pub slot_size: u32,
}

// SAFETY: the mapping is owned by this value; all access goes through atomics or
// volatile reads of plain data, which is sound to do from any one thread at a time.
unsafe impl Send for Region {}

impl Region {
    /// Create the file (exclusively; `path` must not exist), size it, map it, write the
    /// header. `owner` chowns the file to the target's uid when we run as another user.
    pub fn create(path: &Path, pid: u32, generation: u64, nslots: u32, ring: u32, owner: Option<u32>) -> io::Result<Region> {
        if !ring.is_power_of_two() || nslots == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring size must be a power of two, slots > 0"));
        }
        let slot_size = SLOT_RING_OFFSET + ring * RECORD_SIZE;
        let len = HEADER_SIZE as u64 + nslots as u64 * slot_size as u64;
        let f: File = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path)?;
        if let Some(uid) = owner {
            // SAFETY: plain syscall on an fd we own; failure (not root) is harmless.
            unsafe { libc::fchown(f.as_raw_fd(), uid, u32::MAX) };
        }
        f.set_len(len)?;
        // SAFETY: mapping a regular file we just sized to `len` bytes.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let r = Region { path: path.to_path_buf(), base: p as *mut u8, len: len as usize, nslots, ring, slot_size };
        r.u64(H_REGION_SIZE).store(len, Ordering::Relaxed);
        r.u64(H_GENERATION).store(generation, Ordering::Relaxed);
        r.u32(H_VERSION).store(VERSION, Ordering::Relaxed);
        r.u32(H_HEADER_SIZE).store(HEADER_SIZE, Ordering::Relaxed);
        r.u32(H_PID).store(pid, Ordering::Relaxed);
        r.u32(H_CLOCK).store(CLOCK_MONOTONIC_ID, Ordering::Relaxed);
        r.u32(H_NSLOTS).store(nslots, Ordering::Relaxed);
        r.u32(H_RING).store(ring, Ordering::Relaxed);
        r.u32(H_SLOT_SIZE).store(slot_size, Ordering::Relaxed);
        r.u32(H_SLOTS_OFFSET).store(HEADER_SIZE, Ordering::Relaxed);
        // Magic last: a reader that sees it sees a complete header.
        r.u64(H_MAGIC).store(MAGIC, Ordering::Release);
        Ok(r)
    }

    fn u64(&self, off: usize) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds, 8-aligned (page-aligned base), the mapping outlives `self`.
        unsafe { AtomicU64::from_ptr(self.base.add(off) as *mut u64) }
    }

    fn u32(&self, off: usize) -> &AtomicU32 {
        assert!(off & 3 == 0 && off + 4 <= self.len);
        // SAFETY: as for `u64`.
        unsafe { AtomicU32::from_ptr(self.base.add(off) as *mut u32) }
    }

    fn slot_off(&self, slot: u32) -> usize {
        HEADER_SIZE as usize + slot as usize * self.slot_size as usize
    }

    /// Slots handed out so far (may exceed `nslots`: those threads count into noslot).
    pub fn claimed_slots(&self) -> u32 {
        self.u32(H_NEXT_SLOT).load(Ordering::Acquire).min(self.nslots)
    }

    pub fn noslot_dropped(&self) -> u64 {
        self.u64(H_NOSLOT_DROPPED).load(Ordering::Relaxed)
    }

    /// `Some(tid)` once the slot's owner has published it.
    pub fn slot_tid(&self, slot: u32) -> Option<u32> {
        let o = self.slot_off(slot);
        (self.u32(o + S_STATE).load(Ordering::Acquire) == 1).then(|| self.u32(o + S_TID).load(Ordering::Relaxed))
    }

    pub fn slot_dropped(&self, slot: u32) -> u64 {
        self.u64(self.slot_off(slot) + S_DROPPED).load(Ordering::Relaxed)
    }

    /// Copy every record written to `slot` and not yet consumed into `out`, then release
    /// them to the producer. Returns how many were copied.
    pub fn consume(&self, slot: u32, out: &mut Vec<RawRecord>) -> u64 {
        let o = self.slot_off(slot);
        let head = self.u64(o + S_HEAD).load(Ordering::Acquire);
        let tail = self.u64(o + S_TAIL).load(Ordering::Relaxed);
        let n = head.wrapping_sub(tail).min(self.ring as u64);
        let mask = self.ring as u64 - 1;
        for k in 0..n {
            let at = o + SLOT_RING_OFFSET as usize + (((tail + k) & mask) as usize) * RECORD_SIZE as usize;
            // SAFETY: in bounds (slot_size covers the ring); the producer published these
            // bytes before its release store of `head`, and will not touch them until our
            // release store of `tail` below.
            let rd = |d: usize| unsafe { std::ptr::read_volatile(self.base.add(at + d) as *const u64) };
            out.push(RawRecord { time: rd(0), item: rd(8), cls: rd(16), kind: rd(24) as u32 });
        }
        self.u64(o + S_TAIL).store(tail.wrapping_add(n), Ordering::Release);
        n
    }

    /// Name of slot-local class `idx` (written by the slot's owner before first use).
    pub fn slot_class(&self, slot: u32, idx: u32) -> Option<String> {
        if idx >= SLOT_CLASSES {
            return None;
        }
        let at = self.slot_off(slot) + S_CLASSES + (idx * SLOT_CLASS_SIZE) as usize;
        let len = self.u32(at).load(Ordering::Acquire) as usize;
        if len == 0 || len > SLOT_CLASS_SIZE as usize - 4 {
            return None;
        }
        // SAFETY: in bounds; the owner wrote the name before publishing `len`.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(at + 4), len) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no references outlive `self`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Read `buf.len()` bytes at `addr` in process `pid`. Returns bytes read (may be short).
pub fn read_remote(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes our own writable buffer; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Write all of `buf` at `addr` in process `pid`.
pub fn write_remote(pid: u32, addr: u64, buf: &[u8]) -> io::Result<()> {
    let local = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes our own readable buffer; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else if n as usize != buf.len() {
        Err(io::Error::new(io::ErrorKind::WriteZero, "short process_vm_writev"))
    } else {
        Ok(())
    }
}

/// Read a NUL-terminated string of at most `max` bytes at `addr` in `pid`, page by page
/// (a string may end just before an unmapped page).
pub fn read_remote_cstr(pid: u32, mut addr: u64, max: usize) -> Option<String> {
    let mut out = Vec::new();
    while out.len() < max {
        let page_left = 4096 - (addr % 4096) as usize;
        let mut buf = vec![0u8; page_left.min(max - out.len())];
        let n = read_remote(pid, addr, &mut buf).ok()?;
        if n == 0 {
            break;
        }
        if let Some(z) = buf[..n].iter().position(|&c| c == 0) {
            out.extend_from_slice(&buf[..z]);
            return Some(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&buf[..n]);
        addr += n as u64;
    }
    (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned())
}
