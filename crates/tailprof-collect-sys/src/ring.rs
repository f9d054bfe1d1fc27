//! One perf mmap ring buffer: the `perf_event_mmap_page` control page followed by
//! `N` (a power of two) data pages, mapped read-write so the kernel honours `data_tail`
//! and never overwrites records we have not consumed (it emits PERF_RECORD_LOST
//! instead).
//!
//! Protocol (see the comment on `perf_event_mmap_page` in the kernel's uapi header):
//! load `data_head` with *acquire* (pairs with the kernel's store after writing the
//! records), read records in `[data_tail, data_head)`, then store `data_tail` with
//! *release* so the kernel may reuse the space only after our reads. Both counters run
//! freely; the byte offset is `counter & (data_size - 1)`. A record may wrap around the
//! end of the data area; such a record is copied into a scratch buffer so the consumer
//! always sees one contiguous slice.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

mod queue;

pub use queue::{Pending, RoundQueue};

/// Offsets in `struct perf_event_mmap_page`.
const OFF_DATA_HEAD: usize = 1024;
const OFF_DATA_TAIL: usize = 1032;
const OFF_DATA_OFFSET: usize = 1040;
const OFF_DATA_SIZE: usize = 1048;

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// What one [`Ring::drain`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    pub records: u64,
    pub bytes: u64,
    /// Records that wrapped around the end of the ring (copied to scratch).
    pub wrapped: u64,
    /// The ring content was inconsistent (bad size field); the rest of the batch was
    /// skipped. Counted, never fatal.
    pub corrupt: bool,
}

/// A mapped perf ring buffer.
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    /// Whether `base` came from mmap (and must be munmapped).
    mapped: bool,
    data: *const u8,
    size: u64,
    cpu: u32,
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value; the kernel is the only other party.
unsafe impl Send for Ring {}

impl Ring {
    /// Map `1 + data_pages` pages of the perf fd. `data_pages` must be a power of two.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize, cpu: u32) -> io::Result<Ring> {
        if data_pages == 0 || !data_pages.is_power_of_two() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("ring size must be a power of two pages, not {data_pages}")));
        }
        let page = page_size();
        let len = (1 + data_pages).checked_mul(page).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "ring too large"))?;
        // SAFETY: a fresh shared mapping of a perf fd; checked for MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `p` maps `len` bytes laid out as perf_event_mmap_page + data pages.
        Ok(unsafe { Ring::from_raw(p as *mut u8, len, true, page, data_pages, cpu) })
    }

    /// # Safety
    /// `base` must point to `map_len` readable and writable bytes, 8-aligned, laid out as
    /// a perf mmap (control page of `page` bytes, then `data_pages * page` data bytes),
    /// valid for the life of the `Ring`; if `mapped`, it must come from `mmap`.
    unsafe fn from_raw(base: *mut u8, map_len: usize, mapped: bool, page: usize, data_pages: usize, cpu: u32) -> Ring {
        // Kernels >= 4.1 publish where the data area is; older ones leave zeros.
        let off = (*(base.add(OFF_DATA_OFFSET) as *const AtomicU64)).load(Ordering::Relaxed) as usize;
        let sz = (*(base.add(OFF_DATA_SIZE) as *const AtomicU64)).load(Ordering::Relaxed) as usize;
        let (off, sz) = if sz != 0 && sz.is_power_of_two() && off.checked_add(sz).is_some_and(|e| e <= map_len) {
            (off, sz)
        } else {
            (page, data_pages * page)
        };
        Ring { base, map_len, mapped, data: base.add(off), size: sz as u64, cpu, scratch: Vec::new() }
    }

    /// The CPU this ring collects.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// Bytes in the data area.
    pub fn data_size(&self) -> u64 {
        self.size
    }

    fn head_ref(&self) -> &AtomicU64 {
        // SAFETY: in bounds of the control page, 8-aligned; the kernel writes it.
        unsafe { &*(self.base.add(OFF_DATA_HEAD) as *const AtomicU64) }
    }

    fn tail_ref(&self) -> &AtomicU64 {
        // SAFETY: as above; only we write data_tail.
        unsafe { &*(self.base.add(OFF_DATA_TAIL) as *const AtomicU64) }
    }

    /// Bytes written by the kernel and not yet consumed.
    pub fn pending(&self) -> u64 {
        self.head_ref().load(Ordering::Acquire).wrapping_sub(self.tail_ref().load(Ordering::Relaxed))
    }

    /// Call `f` with every complete record now in the ring (header included), oldest
    /// first, then hand the space back to the kernel. No allocation except the first
    /// time a wrapped record needs the scratch buffer.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> DrainStats {
        let head = self.head_ref().load(Ordering::Acquire);
        let mut tail = self.tail_ref().load(Ordering::Relaxed);
        let mask = self.size - 1;
        let mut st = DrainStats::default();
        while head.wrapping_sub(tail) >= 8 {
            let avail = head.wrapping_sub(tail);
            let off = (tail & mask) as usize;
            let size = if off + 8 <= self.size as usize {
                // SAFETY: inside the data area, between tail and head (the usual case:
                // records are 8-byte multiples, so a header never wraps).
                unsafe { std::ptr::read_unaligned(self.data.add(off + 6) as *const u16) as u64 }
            } else {
                let mut hdr = [0u8; 8];
                self.copy_out(off, &mut hdr);
                u16::from_ne_bytes([hdr[6], hdr[7]]) as u64
            };
            if size < 8 || size > avail || size > self.size {
                st.corrupt = true;
                tail = head;
                break;
            }
            let size = size as usize;
            if off + size <= self.size as usize {
                // SAFETY: [off, off+size) is inside the data area and, being between
                // tail and head, is not written by the kernel until we move the tail.
                let rec = unsafe { std::slice::from_raw_parts(self.data.add(off), size) };
                f(rec);
            } else {
                let mut scratch = std::mem::take(&mut self.scratch);
                scratch.resize(size, 0);
                self.copy_out(off, &mut scratch);
                f(&scratch);
                self.scratch = scratch;
                st.wrapped += 1;
            }
            st.records += 1;
            st.bytes += size as u64;
            tail = tail.wrapping_add(size as u64);
        }
        self.tail_ref().store(tail, Ordering::Release);
        st
    }

    /// Copy `dst.len()` bytes starting at data offset `off`, wrapping at the end.
    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        let size = self.size as usize;
        let first = dst.len().min(size - off);
        // SAFETY: both ranges lie inside the data area (dst.len() <= size).
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.add(off), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(self.data, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: unmapping exactly what `map` mapped.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
        }
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("cpu", &self.cpu).field("size", &self.size).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// A fake ring in ordinary memory: control page + 1 data page.
    struct Fake {
        mem: Vec<u64>,
    }
    impl Fake {
        fn new() -> Fake {
            Fake { mem: vec![0; 2 * PAGE / 8] }
        }
        fn ring(&mut self) -> Ring {
            let p = self.mem.as_mut_ptr() as *mut u8;
            unsafe { Ring::from_raw(p, 2 * PAGE, false, PAGE, 1, 3) }
        }
        fn bytes(&mut self) -> &mut [u8] {
            unsafe { std::slice::from_raw_parts_mut(self.mem.as_mut_ptr() as *mut u8, 2 * PAGE) }
        }
        /// Write a record of `size` bytes whose payload bytes are `fill`, at counter `pos`.
        fn put(&mut self, pos: u64, size: u16, fill: u8) {
            let mut rec = vec![fill; (size as usize).max(8)];
            rec[0..4].copy_from_slice(&9u32.to_ne_bytes());
            rec[4..6].copy_from_slice(&0u16.to_ne_bytes());
            rec[6..8].copy_from_slice(&size.to_ne_bytes());
            for (i, b) in rec.iter().enumerate() {
                let off = PAGE + ((pos as usize + i) % PAGE);
                self.bytes()[off] = *b;
            }
        }
        fn set(&mut self, off: usize, v: u64) {
            self.mem[off / 8] = v;
        }
        fn get(&self, off: usize) -> u64 {
            self.mem[off / 8]
        }
    }

    #[test]
    fn drains_and_wraps() {
        let mut f = Fake::new();
        // Start near the end so the second record wraps; counters are past 4 GiB to
        // exercise free-running arithmetic.
        let start = (1u64 << 32) * PAGE as u64 + PAGE as u64 - 24;
        f.set(OFF_DATA_TAIL, start);
        f.put(start, 16, 0xaa);
        f.put(start + 16, 40, 0xbb);
        f.put(start + 56, 8, 0xcc);
        f.set(OFF_DATA_HEAD, start + 64 + 4); // a partial trailing header is left alone
        let mut ring = f.ring();
        let mut seen = Vec::new();
        let st = ring.drain(|r| seen.push(r.to_vec()));
        assert_eq!(st.records, 3);
        assert_eq!(st.wrapped, 1);
        assert!(!st.corrupt);
        assert_eq!(seen[0].len(), 16);
        assert!(seen[1][8..].iter().all(|&b| b == 0xbb), "wrapped record is contiguous");
        assert_eq!(seen[2].len(), 8);
        drop(ring);
        assert_eq!(f.get(OFF_DATA_TAIL), start + 64);
    }

    #[test]
    fn corrupt_size_skips_batch() {
        let mut f = Fake::new();
        f.put(0, 16, 1);
        f.put(16, 4, 2); // size < 8
        f.set(OFF_DATA_HEAD, 64);
        let mut ring = f.ring();
        let mut n = 0;
        let st = ring.drain(|_| n += 1);
        assert_eq!(n, 1);
        assert!(st.corrupt);
        drop(ring);
        assert_eq!(f.get(OFF_DATA_TAIL), 64, "consumer catches up instead of looping");
    }

    #[test]
    fn rejects_non_power_of_two() {
        let fd = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        assert!(Ring::map(fd.as_fd(), 3, 0).is_err());
    }
}
