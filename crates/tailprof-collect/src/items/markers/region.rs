//! The marker shared-memory region (recorder side): byte layout constants, creating and
//! mapping a region (a sealed memfd for launched commands, `/dev/shm/tailprof.<pid>.<random>`
//! for running processes), reading slots, and reading/writing the target's
//! `tailprof_control` block with `process_vm_readv`/`process_vm_writev`.
//!
//! The layout is specified in docs/MARKERS.md; its constants are defined once, in
//! `tailprof-markers-protocol`, shared with the Rust marker runtime (`include/tailprof.h`
//! and `python/tailprof_markers/__init__.py` mirror them, checked by that crate's tests). All
//! fields are little-endian and naturally aligned.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use tailprof_markers_protocol::{control, CLOCK_MONOTONIC_ID, MAGIC, VERSION};
use tailprof_markers_protocol::{header, record, slot};

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
    /// What the target opens: `/proc/<recorder pid>/fd/<n>` for a sealed memfd, or the
    /// region file's path.
    pub path: PathBuf,
    /// The memfd or file (keeps a memfd alive).
    _file: File,
    /// The file to remove (file-backed regions not yet unlinked).
    unlink: Option<PathBuf>,
    base: *mut u8,
    len: usize,
    /// Entry in the SIGBUS guard table.
    guard: usize,
    pub nslots: u32,
    pub ring: u32,
    pub slot_size: u32,
}

// SAFETY: the mapping is owned by this value; all access goes through atomics or
// volatile reads of plain data, which is sound to do from any one thread at a time.
unsafe impl Send for Region {}

/// Removes region files in `dir` that killed recorders left behind: names
/// `tailprof.<pid>.<32 hex digits>` of regular files owned by this user whose target
/// process no longer exists (a recorder unlinks its files once the target mapped them and
/// again when it ends, but not when it is SIGKILLed first). Files of other users, of live
/// pids, symlinks and other names are left alone: in the sticky `/dev/shm` nobody else
/// can swap a file of ours between the check and the unlink. Returns how many were
/// removed. Looks at no more than 100,000 entries.
pub fn sweep_stale(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten().take(100_000) {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(tailprof_markers_protocol::REGION_FILE_PREFIX)) else {
            continue;
        };
        let Some((pid, hex)) = rest.split_once('.') else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        // DirEntry::metadata does not follow symlinks.
        let Ok(md) = e.metadata() else { continue };
        if !md.file_type().is_file() || md.uid() != me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A random 128-bit name part: region names must not be predictable (issue 10, finding
/// 6: a user who can guess the name can squat on it).
fn random_hex() -> io::Result<String> {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: getrandom writes at most the remaining bytes into our buffer.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn geometry(nslots: u32, ring: u32) -> io::Result<(u32, u64)> {
    if !ring.is_power_of_two() || nslots == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring size must be a power of two, slots > 0"));
    }
    let slot_size = u32::try_from(slot::size(ring)).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "marker ring too large"))?;
    Ok((slot_size, header::SIZE as u64 + nslots as u64 * slot_size as u64))
}

impl Region {
    /// A region for a launched command: an anonymous memfd, sized, then sealed against
    /// shrinking (`F_SEAL_SHRINK | F_SEAL_SEAL`), so the target can never make the
    /// recorder's accesses fault; it disappears with the recorder (nothing in /dev/shm).
    /// The target opens it as `/proc/<recorder pid>/fd/<n>` (same user, e.g. root).
    pub fn create_sealed(pid: u32, generation: u64, nslots: u32, ring: u32) -> io::Result<Region> {
        let (slot_size, len) = geometry(nslots, ring)?;
        let name = c"tailprof-markers";
        // SAFETY: valid C string; returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let f = unsafe { File::from_raw_fd(fd) };
        f.set_len(len)?;
        // SAFETY: fcntl on our fd.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        Self::map(f, path, None, len, pid, generation, nslots, ring, slot_size)
    }

    /// A region for a running process (`-p`, `-a`): a new file `<dir>/tailprof.<pid>.<128
    /// random bits>`, created exclusively without following symlinks, mode 0600, owned by
    /// `owner` (the target's uid) when given. The target can truncate such a file; the
    /// mapping is guarded ([`super::guard`]) so that only empties the region.
    pub fn create_file(dir: &Path, pid: u32, generation: u64, nslots: u32, ring: u32, owner: Option<u32>) -> io::Result<Region> {
        let (slot_size, len) = geometry(nslots, ring)?;
        let mut last = None;
        for _ in 0..4 {
            let path = dir.join(format!("{}{pid}.{}", tailprof_markers_protocol::REGION_FILE_PREFIX, random_hex()?));
            if path.as_os_str().len() >= control::PATH_LEN {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("marker region path too long: {}", path.display())));
            }
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path);
            let f = match f {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let made = (|| {
                if let Some(uid) = owner {
                    // SAFETY: plain syscall on an fd we own; failure (not root) is harmless.
                    unsafe { libc::fchown(f.as_raw_fd(), uid, u32::MAX) };
                }
                f.set_len(len)?;
                Ok(f)
            })();
            return match made {
                Ok(f) => Self::map(f, path.clone(), Some(path), len, pid, generation, nslots, ring, slot_size),
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    Err(e)
                }
            };
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free region name")))
    }

    #[allow(clippy::too_many_arguments)]
    fn map(
        f: File,
        path: PathBuf,
        unlink: Option<PathBuf>,
        len: u64,
        pid: u32,
        generation: u64,
        nslots: u32,
        ring: u32,
        slot_size: u32,
    ) -> io::Result<Region> {
        let cleanup = |e: io::Error| {
            if let Some(p) = &unlink {
                let _ = std::fs::remove_file(p);
            }
            e
        };
        // SAFETY: mapping a file we just sized to `len` bytes.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0)
        };
        if p == libc::MAP_FAILED {
            return Err(cleanup(io::Error::last_os_error()));
        }
        let Some(guard) = super::guard::register(p as *mut u8, len as usize) else {
            // SAFETY: our fresh mapping.
            unsafe { libc::munmap(p, len as usize) };
            return Err(cleanup(io::Error::other("too many marker regions (SIGBUS guard table full)")));
        };
        let r = Region { path, _file: f, unlink, base: p as *mut u8, len: len as usize, guard, nslots, ring, slot_size };
        r.u64(header::REGION_SIZE).store(len, Ordering::Relaxed);
        r.u64(header::GENERATION).store(generation, Ordering::Relaxed);
        r.u32(header::VERSION).store(VERSION, Ordering::Relaxed);
        r.u32(header::HEADER_SIZE).store(header::SIZE as u32, Ordering::Relaxed);
        r.u32(header::PID).store(pid, Ordering::Relaxed);
        r.u32(header::CLOCK).store(CLOCK_MONOTONIC_ID, Ordering::Relaxed);
        r.u32(header::NSLOTS).store(nslots, Ordering::Relaxed);
        r.u32(header::RING_RECORDS).store(ring, Ordering::Relaxed);
        r.u32(header::SLOT_SIZE).store(slot_size, Ordering::Relaxed);
        r.u32(header::SLOTS_OFFSET).store(header::SIZE as u32, Ordering::Relaxed);
        // Record kinds beyond begin/end/switch that this recorder reads.
        r.u32(header::FEATURES).store(header::FEATURE_TRACE_CONTEXT, Ordering::Relaxed);
        // Magic last: a reader that sees it sees a complete header.
        r.u64(header::MAGIC).store(MAGIC, Ordering::Release);
        Ok(r)
    }

    /// Whether the target truncated the region under us (its pages are zeros since).
    pub fn truncated(&self) -> bool {
        super::guard::hit(self.guard)
    }

    /// Remove the region's file now (file-backed regions; idempotent). Called once the
    /// target has mapped it, so a recorder killed later leaves nothing in /dev/shm.
    pub fn unlink(&mut self) {
        if let Some(p) = self.unlink.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Whether some thread of the target mapped the region and took a slot.
    pub fn in_use(&self) -> bool {
        self.u32(header::NEXT_SLOT).load(Ordering::Acquire) > 0
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
        header::SIZE + slot as usize * self.slot_size as usize
    }

    /// Slots handed out so far (may exceed `nslots`: those threads count into noslot).
    pub fn claimed_slots(&self) -> u32 {
        self.u32(header::NEXT_SLOT).load(Ordering::Acquire).min(self.nslots)
    }

    pub fn noslot_dropped(&self) -> u64 {
        self.u64(header::NOSLOT_DROPPED).load(Ordering::Relaxed)
    }

    /// `Some(tid)` once the slot's owner has published it.
    pub fn slot_tid(&self, slot: u32) -> Option<u32> {
        let o = self.slot_off(slot);
        (self.u32(o + slot::STATE).load(Ordering::Acquire) == slot::STATE_OWNED).then(|| self.u32(o + slot::TID).load(Ordering::Relaxed))
    }

    pub fn slot_dropped(&self, slot: u32) -> u64 {
        self.u64(self.slot_off(slot) + slot::DROPPED).load(Ordering::Relaxed)
    }

    /// Copy every record written to `slot` and not yet consumed into `out`, then release
    /// them to the producer. Returns how many were copied.
    pub fn consume(&self, slot: u32, out: &mut Vec<RawRecord>) -> u64 {
        let o = self.slot_off(slot);
        let head = self.u64(o + slot::HEAD).load(Ordering::Acquire);
        let tail = self.u64(o + slot::TAIL).load(Ordering::Relaxed);
        let n = head.wrapping_sub(tail).min(self.ring as u64);
        let mask = self.ring as u64 - 1;
        for k in 0..n {
            let at = o + slot::RING + (((tail + k) & mask) as usize) * record::SIZE;
            // SAFETY: in bounds (slot_size covers the ring); the producer published these
            // bytes before its release store of `head`, and will not touch them until our
            // release store of `tail` below.
            let rd = |d: usize| unsafe { std::ptr::read_volatile(self.base.add(at + d) as *const u64) };
            out.push(RawRecord { time: rd(record::TIME), item: rd(record::ITEM), cls: rd(record::CLASS), kind: rd(record::KIND) as u32 });
        }
        self.u64(o + slot::TAIL).store(tail.wrapping_add(n), Ordering::Release);
        n
    }

    /// Name of slot-local class `idx` (written by the slot's owner before first use).
    pub fn slot_class(&self, slot: u32, idx: u32) -> Option<String> {
        if idx as usize >= slot::CLASSES {
            return None;
        }
        let at = self.slot_off(slot) + slot::CLASS_TABLE + idx as usize * slot::CLASS_SIZE;
        let len = self.u32(at).load(Ordering::Acquire) as usize;
        if len == 0 || len > slot::CLASS_SIZE - 4 {
            return None;
        }
        // SAFETY: in bounds; the owner wrote the name before publishing `len`.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(at + 4), len) };
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.unlink();
        super::guard::unregister(self.guard);
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
