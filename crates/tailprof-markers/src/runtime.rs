//! The enabled-side runtime: the exported control block, per-thread ring state, mapping
//! the region, and the append. Byte layout: docs/MARKERS.md, as constants in
//! `tailprof-markers-protocol` (shared with the recorder; include/tailprof.h mirrors it).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use protocol::slot as slot_field;
use tailprof_markers_protocol::{self as protocol, control, header, CLOCK_MONOTONIC_ID, ENV_VAR, MAGIC, VERSION};

const STATE_OFF: u64 = control::STATE_OFF;
const STATE_INIT: u64 = control::STATE_INIT;
const STATE_ON: u64 = control::STATE_ON;
const SLOT_RING_OFFSET: usize = slot_field::RING;
const RECORD_SIZE: usize = protocol::record::SIZE;

/// The control block the recorder writes (`tailprof_control`), layout-compatible with
/// `struct tailprof_control_block` in include/tailprof.h.
#[repr(C, align(64))]
pub struct ControlBlock {
    size: u32,
    version: u32,
    state: AtomicU64,
    generation: AtomicU64,
    path: UnsafeCell<[u8; control::PATH_LEN]>,
    reserved: u64,
}

// The struct is the protocol's control block, field for field.
const _: () = {
    assert!(std::mem::size_of::<ControlBlock>() == control::SIZE);
    assert!(std::mem::align_of::<ControlBlock>() == control::ALIGN);
    assert!(std::mem::offset_of!(ControlBlock, size) == control::SIZE_FIELD);
    assert!(std::mem::offset_of!(ControlBlock, version) == control::VERSION);
    assert!(std::mem::offset_of!(ControlBlock, state) == control::STATE);
    assert!(std::mem::offset_of!(ControlBlock, generation) == control::GENERATION);
    assert!(std::mem::offset_of!(ControlBlock, path) == control::PATH);
    assert!(std::mem::offset_of!(ControlBlock, reserved) == control::RESERVED);
};

// SAFETY: `path` is written only under PROC's lock (or by the recorder while the state is
// off / before the generation changes) and read under PROC's lock.
unsafe impl Sync for ControlBlock {}

/// Exported so the recorder finds it in `.symtab`/`.dynsym` and enables `-p PID`.
#[no_mangle]
#[used]
pub static tailprof_control: ControlBlock = ControlBlock {
    size: control::SIZE as u32,
    version: VERSION,
    state: AtomicU64::new(STATE_INIT),
    generation: AtomicU64::new(0),
    path: UnsafeCell::new([0; control::PATH_LEN]),
    reserved: 0,
};

struct Tls {
    gen: Cell<u64>,
    slot: Cell<*mut u8>,
    hdr: Cell<*mut u8>,
    head: Cell<u64>,
    cached_tail: Cell<u64>,
    mask: Cell<u64>,
}

thread_local! {
    static TLS: Tls = const {
        Tls {
            gen: Cell::new(0),
            slot: Cell::new(std::ptr::null_mut()),
            hdr: Cell::new(std::ptr::null_mut()),
            head: Cell::new(0),
            cached_tail: Cell::new(0),
            mask: Cell::new(0),
        }
    };
}

/// Process-wide: (generation, mapped header address).
static PROC: Mutex<(u64, usize)> = Mutex::new((0, 0));

fn au64(p: *mut u8, off: usize) -> &'static AtomicU64 {
    // SAFETY: callers pass offsets inside a live, never-unmapped region, 8-aligned.
    unsafe { AtomicU64::from_ptr(p.add(off) as *mut u64) }
}
fn au32(p: *mut u8, off: usize) -> &'static AtomicU32 {
    // SAFETY: as for `au64`, 4-aligned.
    unsafe { AtomicU32::from_ptr(p.add(off) as *mut u32) }
}

/// Not known to be off (one relaxed load).
#[cfg(feature = "tracing")]
#[inline(always)]
pub(crate) fn active() -> bool {
    tailprof_control.state.load(Ordering::Relaxed) != STATE_OFF
}

#[cfg(feature = "tracing")]
#[inline(always)]
pub(crate) fn generation() -> u64 {
    tailprof_control.generation.load(Ordering::Relaxed)
}

#[inline(always)]
pub(crate) fn mark(id: u64, cls: u64, kind: u32) {
    if tailprof_control.state.load(Ordering::Relaxed) != STATE_OFF {
        emit(id, cls, kind);
    }
}

#[inline(always)]
fn emit(id: u64, cls: u64, kind: u32) {
    append(&[(id, cls, kind)], false);
}

/// Appends `records` (one, or the trace-context pair) with one `head` store, all or
/// none: a full ring counts them all as dropped. `feature_trace`: only when the
/// recorder's header announces [`header::FEATURE_TRACE_CONTEXT`] (else nothing).
#[inline(always)]
fn append(records: &[(u64, u64, u32)], feature_trace: bool) {
    let _ = TLS.try_with(|t| {
        let stale = t.slot.get().is_null() || t.gen.get() != tailprof_control.generation.load(Ordering::Relaxed);
        if stale && !slow(t) {
            return;
        }
        if feature_trace && au32(t.hdr.get(), header::FEATURES).load(Ordering::Relaxed) & header::FEATURE_TRACE_CONTEXT == 0 {
            return;
        }
        let slot = t.slot.get();
        let h = t.head.get();
        let mask = t.mask.get();
        let n = records.len() as u64;
        let last = h + n - 1;
        if last.wrapping_sub(t.cached_tail.get()) > mask {
            t.cached_tail.set(au64(slot, slot_field::TAIL).load(Ordering::Acquire));
            if last.wrapping_sub(t.cached_tail.get()) > mask {
                let d = au64(slot, slot_field::DROPPED);
                d.store(d.load(Ordering::Relaxed) + n, Ordering::Relaxed);
                return;
            }
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let now = (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64;
        for (i, &(id, cls, kind)) in records.iter().enumerate() {
            // SAFETY: the record lies inside this thread's ring; only this thread writes
            // it until the release store of `head` publishes it.
            unsafe {
                let r = slot.add(SLOT_RING_OFFSET + (((h + i as u64) & mask) as usize) * RECORD_SIZE) as *mut u64;
                r.add(protocol::record::TIME / 8).write(now);
                r.add(protocol::record::ITEM / 8).write(id);
                r.add(protocol::record::CLASS / 8).write(cls);
                // `u32 kind` and the reserved `u32` after it, little-endian.
                r.add(protocol::record::KIND / 8).write(kind as u64);
            }
        }
        t.head.set(h + n);
        au64(slot, slot_field::HEAD).store(h + n, Ordering::Release);
    });
}

/// The trace-context pair of item `id` (docs/MARKERS.md), when enabled.
pub(crate) fn mark_trace(id: u64, trace_id: [u8; 16], span_id: [u8; 8]) {
    if tailprof_control.state.load(Ordering::Relaxed) != STATE_OFF {
        let hi = u64::from_be_bytes(trace_id[..8].try_into().expect("8 bytes"));
        let lo = u64::from_be_bytes(trace_id[8..].try_into().expect("8 bytes"));
        append(&[(hi, lo, protocol::record::KIND_TRACE_ID), (id, u64::from_be_bytes(span_id), protocol::record::KIND_SPAN_ID)], true);
    }
}

/// No usable slot: set the thread up for the current generation, or count the marker.
#[cold]
#[inline(never)]
fn slow(t: &Tls) -> bool {
    if !t.hdr.get().is_null() && t.gen.get() == tailprof_control.generation.load(Ordering::Relaxed) {
        if !t.slot.get().is_null() {
            return true;
        }
        au64(t.hdr.get(), header::NOSLOT_DROPPED).fetch_add(1, Ordering::Relaxed);
        return false;
    }
    if !setup(t) {
        return false;
    }
    if t.slot.get().is_null() {
        au64(t.hdr.get(), header::NOSLOT_DROPPED).fetch_add(1, Ordering::Relaxed);
        return false;
    }
    true
}

extern "C" fn after_fork_child() {
    tailprof_control.state.store(STATE_OFF, Ordering::Relaxed);
    let _ = TLS.try_with(|t| {
        t.gen.set(0);
        t.slot.set(std::ptr::null_mut());
        t.hdr.set(std::ptr::null_mut());
    });
}

fn read_header(path: &[u8]) -> Option<(std::fs::File, [u8; header::FIELDS_LEN])> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(std::ffi::OsStr::from_bytes(path)).ok()?;
    let mut h = [0u8; header::FIELDS_LEN];
    f.read_exact_at(&mut h, 0).ok()?;
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
    (u64_at(header::MAGIC) == MAGIC
        && u32_at(header::VERSION) == VERSION
        && u32_at(header::PID) == std::process::id()
        && u32_at(header::CLOCK) == CLOCK_MONOTONIC_ID)
        .then_some((f, h))
}

fn map(gen: u64, path: &[u8]) -> *mut u8 {
    use std::os::unix::io::AsRawFd;
    let Some((f, h)) = read_header(path) else { return std::ptr::null_mut() };
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap()) as u64;
    let (size, ring, nslots, slot_size, slots_off) = (
        u64_at(header::REGION_SIZE),
        u32_at(header::RING_RECORDS),
        u32_at(header::NSLOTS),
        u32_at(header::SLOT_SIZE),
        u32_at(header::SLOTS_OFFSET),
    );
    if u64_at(header::GENERATION) != gen
        || !ring.is_power_of_two()
        || slot_size < SLOT_RING_OFFSET as u64 + ring * RECORD_SIZE as u64
        || size < slots_off + nslots * slot_size
    {
        return std::ptr::null_mut();
    }
    // SAFETY: mapping a file we validated to be at least `size` bytes (per its header).
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), size as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

fn setup(t: &Tls) -> bool {
    let mut st = tailprof_control.state.load(Ordering::Acquire);
    let mut proc_ = PROC.lock().unwrap_or_else(|e| e.into_inner());
    if st == STATE_INIT {
        // Launched by the recorder: the region is named in the environment.
        let env = std::env::var_os(ENV_VAR);
        let ok = env.as_ref().and_then(|p| {
            use std::os::unix::ffi::OsStrExt;
            let b = p.as_bytes();
            (b.len() < control::PATH_LEN).then(|| read_header(b).map(|(_, h)| (b.to_vec(), h)))?
        });
        if tailprof_control.state.load(Ordering::Relaxed) == STATE_INIT {
            if let Some((b, h)) = &ok {
                // SAFETY: under PROC's lock; the recorder does not write while INIT.
                unsafe { (&mut *tailprof_control.path.get())[..b.len()].copy_from_slice(b) };
                let gen = u64::from_le_bytes(h[header::GENERATION..header::GENERATION + 8].try_into().unwrap());
                tailprof_control.generation.store(gen, Ordering::Release);
            }
            let new = if ok.is_some() { STATE_ON } else { STATE_OFF };
            let _ = tailprof_control.state.compare_exchange(STATE_INIT, new, Ordering::AcqRel, Ordering::Relaxed);
        }
        st = tailprof_control.state.load(Ordering::Acquire);
    }
    if st != STATE_ON {
        return false;
    }
    let gen = tailprof_control.generation.load(Ordering::Acquire);
    if proc_.0 == 0 {
        // SAFETY: registering a plain extern "C" handler.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    }
    if proc_.0 != gen {
        // SAFETY: reading the NUL-terminated path under the lock.
        let path = unsafe { *tailprof_control.path.get() };
        let len = path.iter().position(|&c| c == 0).unwrap_or(path.len());
        // An older region stays mapped: another thread may still be appending to it.
        *proc_ = (gen, map(gen, &path[..len]) as usize);
    }
    let hdr = proc_.1 as *mut u8;
    drop(proc_);
    t.gen.set(gen);
    t.hdr.set(hdr);
    t.slot.set(std::ptr::null_mut());
    if hdr.is_null() {
        return false;
    }
    let nslots = au32(hdr, header::NSLOTS).load(Ordering::Relaxed);
    let i = au32(hdr, header::NEXT_SLOT).fetch_add(1, Ordering::Relaxed);
    if i >= nslots {
        return true; // no slot: counted in noslot_dropped by the caller
    }
    let slot_size = au32(hdr, header::SLOT_SIZE).load(Ordering::Relaxed) as usize;
    let slots_off = au32(hdr, header::SLOTS_OFFSET).load(Ordering::Relaxed) as usize;
    // SAFETY: i < nslots, so the slot lies inside the validated region.
    let slot = unsafe { hdr.add(slots_off + i as usize * slot_size) };
    t.mask.set(au32(hdr, header::RING_RECORDS).load(Ordering::Relaxed) as u64 - 1);
    t.head.set(au64(slot, slot_field::HEAD).load(Ordering::Relaxed));
    t.cached_tail.set(au64(slot, slot_field::TAIL).load(Ordering::Relaxed));
    // SAFETY: gettid has no preconditions.
    au32(slot, slot_field::TID).store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
    au32(slot, slot_field::STATE).store(slot_field::STATE_OWNED, Ordering::Release);
    t.slot.set(slot);
    true
}

#[cfg(test)]
mod tests;
