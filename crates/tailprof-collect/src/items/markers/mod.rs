//! Recorder side of item markers: creates each target's shared-memory region, enables the
//! marker library in the target, drains the per-thread rings into [`Record::Marker`],
//! [`Record::ItemClass`] and [`Record::Lost`] (`LossKind::Markers`), and tears down.
//!
//! Owns the protocol's recorder half (docs/MARKERS.md): the regions (a sealed memfd for a
//! launched command, `/dev/shm/tailprof.<pid>.<random>` for a running one), enabling a
//! launched command through `TAILPROF_MARKERS` in its environment
//! ([`MarkerCollector::prepare_child`]) or a running process by writing its exported
//! `tailprof_control` block ([`MarkerCollector::attach`]), and disabling it again
//! ([`MarkerCollector::finish`]). Never blocks: [`MarkerCollector::drain`] copies what is
//! in the rings and returns. Nothing is dropped silently: ring-full drops, markers of
//! threads that found no free slot, and undecodable records all become `Lost` records.
//!
//! # The target is not trusted (issue 10, docs/SECURITY.md)
//! Everything in a region can be written by the profiled process at any time. So: every
//! count read from it is clamped (at most a ring per slot per drain, drop counters may only
//! grow, by at most one per nanosecond since the last drain) and summed saturating; a
//! marker's time must lie between the region's creation (minus [`PAST_SLACK_NS`]) and the
//! clock read right after its slot was consumed (plus [`FUTURE_SLACK_NS`]), its kind must be
//! begin, end or a switch, else it is dropped and counted (`LossKind::MarkersRejected`); at most [`MAX_CLASSES_PER_TARGET`] class labels
//! are kept per process, further or invalid class references are counted
//! (`LossKind::ItemClasses`) and the marker keeps class 0. A region the target truncates
//! becomes empty instead of killing the recorder (`region` maps it under a SIGBUS guard).
//! `attach` only writes into a control block it found in the very file that is mapped
//! (through `/proc/PID/map_files`), in a writable mapping of that file, and whose contents
//! are a valid control block; otherwise it refuses.
//!
//! ```no_run
//! use tailprof_collect::items::markers::MarkerCollector;
//! let mut mc = MarkerCollector::new();
//! let attached = mc.attach(1234)?; // false: the process has no marker library
//! let mut out = Vec::new();
//! mc.drain(&mut out);              // call periodically while recording
//! let stats = mc.finish(&mut out); // disable, final drain, unlink
//! # Ok::<(), tailprof_collect::sys::CollectError>(())
//! ```

mod elf;
pub(crate) mod follower;
pub(crate) use elf::MAX_FILES as MAX_FILES_SEARCHED;
pub(crate) use follower::MarkerFollower;
mod guard;
mod memfd;
mod region;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use tailprof_format::{ItemClass, ItemTrace, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record};

use crate::sys::CollectError;
use region::{control, RawRecord, Region};
use tailprof_markers_protocol::{record, slot};

pub use elf::{file_defines, file_defines_until, find_symbol_in_process, find_symbol_in_process_until, symbol_file_offset};
pub use memfd::{find_memfd_controls, memfd_controls_in_maps, MemfdControls};

/// Environment variable through which a launched command finds its region.
pub const ENV_VAR: &str = tailprof_markers_protocol::ENV_VAR;
/// Name of the control block the marker libraries export.
pub const CONTROL_SYMBOL: &str = tailprof_markers_protocol::CONTROL_SYMBOL;
/// Name of the memfd in which the Python runtime publishes its control block.
pub const CONTROL_MEMFD: &str = tailprof_markers_protocol::CONTROL_MEMFD;

/// Most bytes of a process's environment searched by
/// [`MarkerCollector::launched_by_other_recorder`].
pub const MAX_ENVIRON: u64 = 1 << 20;
/// Most class labels kept per process; more are counted as `LossKind::ItemClasses`.
pub const MAX_CLASSES_PER_TARGET: usize = 4096;
/// How far past the clock read right after its slot was consumed a marker's time may be.
/// A marker was published before it was read, so a later time is impossible (the slack
/// only absorbs clock granularity); such a marker would otherwise wait in the recorder's
/// queue (memory) until its time comes.
pub const FUTURE_SLACK_NS: u64 = 10_000_000;
/// How far before its region's creation a marker's time may be.
pub const PAST_SLACK_NS: u64 = 1_000_000_000;

/// Region geometry.
#[derive(Debug, Clone)]
pub struct MarkerConfig {
    /// Directory for region files (`/dev/shm`).
    pub dir: PathBuf,
    /// Per-thread slots per process; threads beyond this count their markers as lost.
    pub slots: u32,
    /// Records per thread ring (power of two; 32 bytes each).
    pub ring_records: u32,
}

impl Default for MarkerConfig {
    fn default() -> Self {
        MarkerConfig { dir: PathBuf::from("/dev/shm"), slots: 64, ring_records: 4096 }
    }
}

/// What one [`MarkerCollector::drain`] or [`MarkerCollector::finish`] moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Marker records emitted.
    pub markers: u64,
    /// Markers lost (ring full, no free slot, undecodable), emitted as `Lost` records.
    pub dropped: u64,
    /// `ItemClass` records emitted.
    pub classes: u64,
    /// Markers rejected as invalid (bad kind, impossible time), as
    /// `Lost { kind: MarkersRejected }` records.
    pub rejected: u64,
    /// Class references dropped (table full, invalid reference), as
    /// `Lost { kind: ItemClasses }` records.
    pub classes_dropped: u64,
}

impl std::ops::AddAssign for DrainStats {
    fn add_assign(&mut self, o: DrainStats) {
        self.markers = self.markers.saturating_add(o.markers);
        self.dropped = self.dropped.saturating_add(o.dropped);
        self.classes = self.classes.saturating_add(o.classes);
        self.rejected = self.rejected.saturating_add(o.rejected);
        self.classes_dropped = self.classes_dropped.saturating_add(o.classes_dropped);
    }
}

struct Target {
    pid: u32,
    region: Region,
    generation: u64,
    /// Addresses of `tailprof_control` blocks we enabled (empty for launched commands
    /// until `finish` looks them up).
    controls: Vec<u64>,
    seen_dropped: Vec<u64>,
    seen_noslot: u64,
    /// (slot or u32::MAX for descriptor addresses, raw cls) -> class id; at most
    /// [`MAX_CLASSES_PER_TARGET`] entries.
    classes: HashMap<(u32, u64), u32>,
    /// CLOCK_MONOTONIC when the region was created, and at the last drain.
    created_ns: u64,
    last_drain_ns: u64,
    /// The truncation was reported.
    truncation_noted: bool,
}

/// Collects markers from every process it prepared or attached to.
pub struct MarkerCollector {
    config: MarkerConfig,
    targets: Vec<Target>,
    next_class: u32,
    scratch: Vec<RawRecord>,
    /// One-line notices for the user (region truncated by its process, ...).
    warnings: Vec<String>,
    /// Stale region files were looked for (once, before the first file region).
    swept: bool,
}

impl Default for MarkerCollector {
    fn default() -> Self {
        Self::new()
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn new_generation() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let t = (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64);
    (t ^ (COUNTER.fetch_add(1, Ordering::Relaxed) << 52)) | 1
}

fn owner_uid(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    // SAFETY: getuid has no preconditions.
    (uid != unsafe { libc::getuid() }).then_some(uid)
}

fn read_control(pid: u32, addr: u64) -> Option<[u8; control::SIZE]> {
    let mut b = [0u8; control::SIZE];
    (region::read_remote(pid, addr, &mut b).ok()? == b.len()).then_some(b)
}

/// Whether `b` is a valid control block: the runtimes' `size` and `version` (the cookie),
/// a known state, a NUL-terminated path and a zero reserved word. Anything else (e.g. an
/// unrelated variable at the address a replaced binary names) is never written to.
fn control_ok(b: &[u8; control::SIZE]) -> bool {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let size = u32_at(control::SIZE_FIELD) as usize;
    (control::SIZE..=4096).contains(&size)
        && u32_at(control::VERSION) == region::VERSION
        && u64_at(control::STATE) <= control::STATE_ON
        && b[control::PATH..control::PATH + control::PATH_LEN].contains(&0)
        && u64_at(control::RESERVED) == 0
}

/// Add a count read from a target's counter: it may only grow, by at most `max` since it
/// was last seen; a counter that went back (or jumped by more) is re-based, not trusted.
fn counter_delta(seen: &mut u64, now: u64, max: u64) -> u64 {
    let before = std::mem::replace(seen, now);
    match now.checked_sub(before) {
        Some(d) => d.min(max),
        None => 0, // went back: not a count of anything
    }
}

impl MarkerCollector {
    pub fn new() -> Self {
        Self::with_config(MarkerConfig::default())
    }

    pub fn with_config(config: MarkerConfig) -> Self {
        MarkerCollector { config, targets: Vec::new(), next_class: 1, scratch: Vec::new(), warnings: Vec::new(), swept: false }
    }

    /// One-line notices gathered since the last call (e.g. a process truncated its
    /// region); the caller prints them.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Processes with a region (prepared or attached, not yet finished).
    pub fn pids(&self) -> Vec<u32> {
        self.targets.iter().map(|t| t.pid).collect()
    }

    /// Whether `pid` has a region (prepared or attached, not yet finished or reaped).
    pub fn has(&self, pid: u32) -> bool {
        self.targets.iter().any(|t| t.pid == pid)
    }

    /// Whether `pid` was launched by another recorder that is still running: its
    /// environment names that recorder's sealed region (`TAILPROF_MARKERS=/proc/RPID/fd/N`,
    /// RPID alive and not us). Its markers belong to that recorder (the library enables
    /// itself from the environment at its first marker), so `-a` leaves it alone instead
    /// of taking them over. The environment is read bounded ([`MAX_ENVIRON`]) and only
    /// searched.
    pub fn launched_by_other_recorder(pid: u32) -> bool {
        use std::io::Read;
        let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else { return false };
        let mut env = Vec::new();
        if f.take(MAX_ENVIRON).read_to_end(&mut env).is_err() {
            return false;
        }
        let key = format!("{ENV_VAR}=/proc/");
        env.split(|&b| b == 0).filter_map(|var| var.strip_prefix(key.as_bytes())).any(|rest| {
            let digits: Vec<u8> = rest.iter().copied().take_while(u8::is_ascii_digit).collect();
            let rpid = std::str::from_utf8(&digits).ok().and_then(|d| d.parse::<u32>().ok());
            rpid.is_some_and(|r| r != std::process::id() && r != pid && crate::procfs::process_alive(r))
        })
    }

    /// Processes attached through their control block ([`MarkerCollector::attach`]), not
    /// counting launched commands.
    pub fn attached(&self) -> usize {
        self.targets.iter().filter(|t| !t.controls.is_empty()).count()
    }

    /// Forget the attached processes that exited (a long `-a` recording or the agent
    /// sees many come and go): drain their rings a last time into `out` (sorted by time),
    /// then unmap and unlink their regions. Launched commands are kept (their end ends the
    /// recording). Returns how many were dropped.
    pub fn reap_exited(&mut self, out: &mut Vec<Record>) -> usize {
        let start = out.len();
        let now = monotonic_ns();
        let mut ti = 0;
        let mut n = 0;
        while ti < self.targets.len() {
            let t = &self.targets[ti];
            if t.controls.is_empty() || crate::procfs::process_alive(t.pid) {
                ti += 1;
                continue;
            }
            self.drain_target(ti, now, out);
            self.targets.remove(ti); // dropping the region removes its file
            n += 1;
        }
        out[start..].sort_by_key(|r| r.time());
        n
    }

    fn create_region(&mut self, pid: u32, sealed: bool) -> Result<usize, CollectError> {
        let generation = new_generation();
        let (slots, ring) = (self.config.slots, self.config.ring_records);
        let region = if sealed {
            Region::create_sealed(pid, generation, slots, ring)
                .map_err(|e| CollectError::io("cannot create a sealed marker region (memfd_create)".to_string(), e))?
        } else {
            if !self.swept {
                // Files a SIGKILLed recorder left for targets that are gone.
                self.swept = true;
                let n = region::sweep_stale(&self.config.dir);
                if n > 0 {
                    self.warnings
                        .push(format!("removed {n} stale marker region file(s) of exited processes from {}", self.config.dir.display()));
                }
            }
            Region::create_file(&self.config.dir, pid, generation, slots, ring, owner_uid(pid))
                .map_err(|e| CollectError::io(format!("cannot create a marker region in {}", self.config.dir.display()), e))?
        };
        let nslots = region.nslots as usize;
        let now = monotonic_ns();
        self.targets.push(Target {
            pid,
            region,
            generation,
            controls: Vec::new(),
            seen_dropped: vec![0; nslots],
            seen_noslot: 0,
            classes: HashMap::new(),
            created_ns: now,
            last_drain_ns: now,
            truncation_noted: false,
        });
        Ok(self.targets.len() - 1)
    }

    /// Create the region for a process that is about to exec (launched command); returns
    /// the environment variables to add to the child's environment.
    pub fn prepare_child(&mut self, pid: u32) -> Result<Vec<(String, String)>, CollectError> {
        let i = self.create_region(pid, true)?;
        Ok(vec![(ENV_VAR.to_string(), self.targets[i].region.path.display().to_string())])
    }

    /// Enable markers in a running process; `Ok(false)` when it has no marker library
    /// (no `tailprof_control` symbol in any mapped ELF file and no `tailprof_control`
    /// memfd, the pure-Python runtime's block), which is not an error. An error (one line)
    /// when the symbol is there but does not hold a valid control block in a writable
    /// mapping of that very file, or the memfd is refused (module `memfd`: mapping, file
    /// type, owner, size) or holds no valid block: nothing is written then.
    pub fn attach(&mut self, pid: u32) -> Result<bool, CollectError> {
        // One read of the maps for both kinds of control block.
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|e| CollectError::io(format!("cannot read /proc/{pid}/maps"), e))?;
        let entries: Vec<crate::procfs::MapsEntry> = maps.lines().filter_map(crate::procfs::parse_maps_line).collect();
        self.attach_in(pid, &entries)
    }

    /// [`MarkerCollector::attach`] with `pid`'s maps already read (`entries`).
    pub(crate) fn attach_in(&mut self, pid: u32, entries: &[crate::procfs::MapsEntry]) -> Result<bool, CollectError> {
        let memfd = memfd_controls_in_maps(pid, entries).map_err(|e| CollectError::io(format!("cannot read /proc/{pid}/maps"), e))?;
        let symbols = elf::find_symbol_in_maps(pid, entries, CONTROL_SYMBOL, &std::sync::atomic::AtomicBool::new(false));
        self.attach_controls(pid, symbols, memfd)
    }

    /// [`MarkerCollector::attach`] with the control block addresses already looked up
    /// ([`find_symbol_in_process`], [`find_memfd_controls`], done off the drain loop by the
    /// marker follower's worker): only the block is validated and written here.
    pub(crate) fn attach_found(&mut self, pid: u32, found: follower::Found) -> Result<bool, CollectError> {
        self.attach_controls(pid, found.symbols, found.memfd)
    }

    fn attach_controls(&mut self, pid: u32, found: std::io::Result<Vec<u64>>, memfd: MemfdControls) -> Result<bool, CollectError> {
        let found = found.map_err(|e| CollectError::io(format!("cannot read /proc/{pid}/maps"), e))?;
        let valid = |a: &u64| read_control(pid, *a).is_some_and(|b| control_ok(&b));
        let mut addrs: Vec<u64> = found.iter().copied().filter(valid).collect();
        addrs.extend(memfd.addrs.iter().copied().filter(valid));
        if addrs.is_empty() {
            return match (found.first(), memfd.refused.first(), memfd.addrs.first()) {
                (None, None, None) => Ok(false),
                (Some(a), _, _) => Err(CollectError::Other(format!(
                    "process {pid}: '{CONTROL_SYMBOL}' at {a:#x} is not a valid marker control block (size, version, \
                     state or reserved word wrong); markers not enabled, nothing written"
                ))),
                (None, Some(why), _) => Err(CollectError::Other(format!(
                    "process {pid}: refused its marker control memfd {why}; markers not enabled, nothing written"
                ))),
                (None, None, Some(a)) => Err(CollectError::Other(format!(
                    "process {pid}: memfd '{CONTROL_MEMFD}' at {a:#x} is not a valid marker control block (size, \
                     version, state or reserved word wrong); markers not enabled, nothing written"
                ))),
            };
        }
        if let Some(why) = memfd.refused.first() {
            self.warnings.push(format!("process {pid}: refused a marker control memfd {why}; nothing written to it"));
        }
        let i = self.create_region(pid, false)?;
        let t = &mut self.targets[i];
        let mut path = [0u8; control::PATH_LEN];
        let p = t.region.path.as_os_str().as_encoded_bytes();
        path[..p.len()].copy_from_slice(p);
        for &a in &addrs {
            // Check again right before writing (the block is the target's to change).
            if !read_control(pid, a).is_some_and(|b| control_ok(&b)) {
                continue;
            }
            // Path, then generation, then state: a thread that sees the new generation
            // finds the new path.
            let r = region::write_remote(pid, a + control::PATH as u64, &path)
                .and_then(|_| region::write_remote(pid, a + control::GENERATION as u64, &t.generation.to_le_bytes()))
                .and_then(|_| region::write_remote(pid, a + control::STATE as u64, &control::STATE_ON.to_le_bytes()));
            if let Err(e) = r {
                self.targets.pop(); // dropping the region removes its file
                return Err(CollectError::io(format!("cannot enable markers in process {pid} (process_vm_writev)"), e));
            }
            t.controls.push(a);
        }
        if t.controls.is_empty() {
            self.targets.pop();
            return Err(CollectError::Other(format!(
                "process {pid}: its marker control block changed while attaching; markers not enabled"
            )));
        }
        Ok(true)
    }

    /// Move every marker record written so far into `out` (Marker, ItemClass, and
    /// `Lost { kind: Markers }` for drops), with pid/tid filled in and sorted by time
    /// within this call; never blocks.
    pub fn drain(&mut self, out: &mut Vec<Record>) -> DrainStats {
        let start = out.len();
        let mut stats = DrainStats::default();
        let now = monotonic_ns();
        for ti in 0..self.targets.len() {
            stats += self.drain_target(ti, now, out);
        }
        // Stable: an ItemClass stays before the marker (same time) that first uses it.
        out[start..].sort_by_key(|r| r.time());
        stats
    }

    fn drain_target(&mut self, ti: usize, now: u64, out: &mut Vec<Record>) -> DrainStats {
        let mut stats = DrainStats::default();
        let mut scratch = std::mem::take(&mut self.scratch);
        let t = &mut self.targets[ti];
        let pid = t.pid;
        if t.region.truncated() {
            if !t.truncation_noted {
                t.truncation_noted = true;
                t.region.unlink();
                self.warnings
                    .push(format!("process {pid} truncated its marker region: its markers from then on are lost (the recording goes on)"));
            }
            self.scratch = scratch;
            return stats;
        }
        if t.region.in_use() {
            // The target has mapped it: the name is no longer needed.
            t.region.unlink();
        }
        // A drop counter can grow by at most about one per nanosecond.
        let max_drops = now.saturating_sub(t.last_drain_ns).max(1_000_000);
        t.last_drain_ns = now;
        let earliest = t.created_ns.saturating_sub(PAST_SLACK_NS);
        let (mut lost, mut rejected, mut classes_dropped) = (0u64, 0u64, 0u64);
        for slot in 0..t.region.claimed_slots() {
            let Some(tid) = t.region.slot_tid(slot) else { continue };
            scratch.clear();
            t.region.consume(slot, &mut scratch);
            // Everything just consumed was published before this clock read.
            let latest = monotonic_ns().saturating_add(FUTURE_SLACK_NS);
            // A trace-id record waiting for the span-id record right after it.
            let mut trace_hi_lo: Option<(u64, u64)> = None;
            for r in &scratch {
                let pending = trace_hi_lo.take();
                if r.kind == record::KIND_TRACE_ID || r.kind == record::KIND_SPAN_ID {
                    // A span record without its trace record, or a trace record not followed
                    // by its span record, is rejected (the pair is published at once).
                    if pending.is_some() && r.kind == record::KIND_TRACE_ID {
                        rejected += 1;
                    }
                    if r.time < earliest || r.time > latest {
                        rejected += 1 + u64::from(pending.is_some() && r.kind == record::KIND_SPAN_ID);
                        continue;
                    }
                    if r.kind == record::KIND_TRACE_ID {
                        trace_hi_lo = Some((r.item, r.cls));
                        continue;
                    }
                    let Some((hi, lo)) = pending else {
                        rejected += 1;
                        continue;
                    };
                    let mut trace_id = [0u8; 16];
                    trace_id[..8].copy_from_slice(&hi.to_be_bytes());
                    trace_id[8..].copy_from_slice(&lo.to_be_bytes());
                    out.push(Record::ItemTrace(ItemTrace { time: r.time, pid, tid, item: r.item, trace_id, span_id: r.cls.to_be_bytes() }));
                    stats.markers += 1;
                    continue;
                }
                if pending.is_some() {
                    rejected += 1;
                }
                let kind = match r.kind {
                    record::KIND_BEGIN => MarkerKind::Begin,
                    record::KIND_END => MarkerKind::End,
                    record::KIND_SWITCH => MarkerKind::Switch,
                    record::KIND_SWITCH_NONE => MarkerKind::SwitchNone,
                    _ => {
                        rejected += 1;
                        continue;
                    }
                };
                if r.time < earliest || r.time > latest {
                    rejected += 1;
                    continue;
                }
                let class = if r.cls == 0 {
                    0
                } else {
                    let local = r.cls & 1 == 1;
                    let key = if local { (slot, r.cls) } else { (u32::MAX, r.cls) };
                    let valid = if local { r.cls >> 1 < slot::CLASSES as u64 } else { r.cls & 7 == 0 };
                    match t.classes.get(&key) {
                        Some(&id) => id,
                        None if !valid || t.classes.len() >= MAX_CLASSES_PER_TARGET => {
                            classes_dropped += 1;
                            0
                        }
                        None => {
                            let name = if local {
                                t.region.slot_class(slot, (r.cls >> 1) as u32)
                            } else {
                                let mut p = [0u8; 8];
                                region::read_remote(pid, r.cls, &mut p)
                                    .ok()
                                    .filter(|&n| n == 8)
                                    .and_then(|_| region::read_remote_cstr(pid, u64::from_le_bytes(p), 256))
                            };
                            let name = name.unwrap_or_else(|| format!("class@{:#x}", r.cls));
                            let id = self.next_class;
                            self.next_class = self.next_class.saturating_add(1);
                            t.classes.insert(key, id);
                            out.push(Record::ItemClass(ItemClass { time: r.time, pid, id, name }));
                            stats.classes += 1;
                            id
                        }
                    }
                };
                out.push(Record::Marker(Marker { time: r.time, pid, tid, kind, item: r.item, class, source: MarkerSource::Api }));
                stats.markers += 1;
            }
            if trace_hi_lo.is_some() {
                rejected += 1;
            }
            let d = t.region.slot_dropped(slot);
            lost = lost.saturating_add(counter_delta(&mut t.seen_dropped[slot as usize], d, max_drops));
        }
        let ns = t.region.noslot_dropped();
        lost = lost.saturating_add(counter_delta(&mut t.seen_noslot, ns, max_drops));
        for (kind, count) in [(LossKind::Markers, lost), (LossKind::MarkersRejected, rejected), (LossKind::ItemClasses, classes_dropped)] {
            if count > 0 {
                out.push(Record::Lost(Lost { time: now, cpu: 0, event: None, kind, count }));
            }
        }
        stats.dropped = lost;
        stats.rejected = rejected;
        stats.classes_dropped = classes_dropped;
        self.scratch = scratch;
        stats
    }

    /// Disable all attached processes, final drain, unlink regions.
    pub fn finish(&mut self, out: &mut Vec<Record>) -> DrainStats {
        let mut disabled_any = false;
        for t in &mut self.targets {
            if !crate::procfs::process_alive(t.pid) {
                continue;
            }
            if t.controls.is_empty() {
                // Launched command: it enabled itself from the environment.
                t.controls = find_symbol_in_process(t.pid, CONTROL_SYMBOL).unwrap_or_default();
                // A Python program publishes its block in a memfd (checked like at attach).
                t.controls.extend(find_memfd_controls(t.pid).map(|m| m.addrs).unwrap_or_default());
            }
            for &a in &t.controls {
                let Some(b) = read_control(t.pid, a) else { continue };
                let g = u64::from_le_bytes(b[control::GENERATION..control::GENERATION + 8].try_into().unwrap());
                // Only switch off our own session (another recorder may have re-attached).
                if control_ok(&b) && g == t.generation {
                    let off = control::STATE_OFF.to_le_bytes();
                    disabled_any |= region::write_remote(t.pid, a + control::STATE as u64, &off).is_ok();
                }
            }
        }
        if disabled_any {
            // Let a thread that read `state` just before we cleared it finish its append.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let stats = self.drain(out);
        self.targets.clear(); // dropping a region unmaps it and removes its file
        stats
    }
}

impl std::fmt::Debug for MarkerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerCollector")
            .field("config", &self.config)
            .field("pids", &self.pids())
            .field("next_class", &self.next_class)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_counters_only_grow_and_are_clamped() {
        let mut seen = 0;
        assert_eq!(counter_delta(&mut seen, 5, 100), 5);
        // Finding 8: flipped to u64::MAX and back.
        assert_eq!(counter_delta(&mut seen, u64::MAX, 100), 100);
        assert_eq!(counter_delta(&mut seen, 0, 100), 0);
        assert_eq!(counter_delta(&mut seen, u64::MAX, 100), 100);
        assert_eq!(counter_delta(&mut seen, u64::MAX, 100), 0);
    }

    #[test]
    fn control_block_must_be_valid() {
        let mut b = [0u8; control::SIZE];
        b[control::SIZE_FIELD..control::SIZE_FIELD + 4].copy_from_slice(&(control::SIZE as u32).to_le_bytes());
        b[control::VERSION..control::VERSION + 4].copy_from_slice(&region::VERSION.to_le_bytes());
        b[control::STATE] = control::STATE_INIT as u8;
        assert!(control_ok(&b));
        let mut bad = b;
        bad[control::STATE] = 3;
        assert!(!control_ok(&bad), "unknown state");
        let mut bad = b;
        bad[control::RESERVED] = 1;
        assert!(!control_ok(&bad), "reserved word set");
        let mut bad = b;
        bad[control::PATH..control::PATH + control::PATH_LEN].fill(b'a');
        assert!(!control_ok(&bad), "path not terminated");
        let mut bad = b;
        bad[control::VERSION] = 9;
        assert!(!control_ok(&bad), "other version");
        assert!(!control_ok(&[0xaa; control::SIZE]), "unrelated data");
    }

    #[test]
    fn stale_region_files_of_exited_processes_are_swept() {
        let base = std::env::temp_dir().join(format!("tailprof-sweep-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        struct Dir(std::path::PathBuf);
        impl Dir {
            fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = Dir(base);
        let hex = "0123456789abcdef0123456789abcdef";
        let dead = 999_999_999u32; // above any pid_max
        let me = std::process::id();
        let stale = dir.path().join(format!("tailprof.{dead}.{hex}"));
        let live = dir.path().join(format!("tailprof.{me}.{hex}"));
        let odd = dir.path().join(format!("tailprof.{dead}.short"));
        let other = dir.path().join("unrelated.file");
        for p in [&stale, &live, &odd, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        let link = dir.path().join(format!("tailprof.{dead}.{}", "f".repeat(32)));
        std::os::unix::fs::symlink(&other, &link).unwrap();
        assert_eq!(region::sweep_stale(dir.path()), 1);
        assert!(!stale.exists(), "the stale file is removed");
        assert!(live.exists() && odd.exists() && other.exists(), "live pids, other names and other files stay");
        assert!(link.symlink_metadata().is_ok(), "symlinks are left alone");
    }

    #[test]
    fn region_names_are_unpredictable_and_failures_are_errors() {
        let dir = std::env::temp_dir().join(format!("tailprof-mc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let me = std::process::id();
        let a = region::Region::create_file(&dir, me, 1, 1, 8, None).unwrap();
        let b = region::Region::create_file(&dir, me, 1, 1, 8, None).unwrap();
        assert_ne!(a.path, b.path);
        let name = a.path.file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with(&format!("tailprof.{me}.")) && name.len() > 40, "{name}");
        let (pa, pb) = (a.path.clone(), b.path.clone());
        drop((a, b));
        assert!(!pa.exists() && !pb.exists(), "dropping a region removes its file");
        let s = region::Region::create_sealed(me, 1, 1, 8).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&s.path).unwrap();
        assert!(f.set_len(0).is_err(), "a sealed region cannot shrink");
        // No directory to create it in: an error, not a panic.
        let mut mc = MarkerCollector::with_config(MarkerConfig { dir: dir.join("missing"), ..MarkerConfig::default() });
        assert!(mc.create_region(me, false).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
