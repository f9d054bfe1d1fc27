//! Recorder side of item markers: creates each target's shared-memory region, enables the
//! marker library in the target, drains the per-thread rings into [`Record::Marker`],
//! [`Record::ItemClass`] and [`Record::Lost`] (`LossKind::Markers`), and tears down.
//!
//! Owns the protocol's recorder half (docs/MARKERS.md): `/dev/shm/tailprof.<pid>`,
//! enabling a launched command through `TAILPROF_MARKERS` in its environment
//! ([`MarkerCollector::prepare_child`]) or a running process by writing its exported
//! `tailprof_control` block ([`MarkerCollector::attach`]), and disabling it again
//! ([`MarkerCollector::finish`]). Never blocks: [`MarkerCollector::drain`] copies what is
//! in the rings and returns. Nothing is dropped silently: ring-full drops, markers of
//! threads that found no free slot, and undecodable records all become `Lost` records.
//!
//! ```no_run
//! use tailprof_collect::markers::MarkerCollector;
//! let mut mc = MarkerCollector::new();
//! let attached = mc.attach(1234)?; // false: the process has no marker library
//! let mut out = Vec::new();
//! mc.drain(&mut out);              // call periodically while recording
//! let stats = mc.finish(&mut out); // disable, final drain, unlink
//! # Ok::<(), tailprof_collect::sys::CollectError>(())
//! ```

mod elf;
mod region;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use tailprof_format::{ItemClass, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record};

use crate::sys::CollectError;
use region::{control, RawRecord, Region};
use tailprof_markers_protocol::{record, REGION_FILE_PREFIX};

pub use elf::{find_symbol_in_process, symbol_file_offset};

/// Environment variable through which a launched command finds its region.
pub const ENV_VAR: &str = tailprof_markers_protocol::ENV_VAR;
/// Name of the control block the marker libraries export.
pub const CONTROL_SYMBOL: &str = tailprof_markers_protocol::CONTROL_SYMBOL;

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
}

impl std::ops::AddAssign for DrainStats {
    fn add_assign(&mut self, o: DrainStats) {
        self.markers += o.markers;
        self.dropped += o.dropped;
        self.classes += o.classes;
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
    /// (slot or u32::MAX for descriptor addresses, raw cls) -> class id.
    classes: HashMap<(u32, u64), u32>,
}

/// Collects markers from every process it prepared or attached to.
pub struct MarkerCollector {
    config: MarkerConfig,
    targets: Vec<Target>,
    next_class: u32,
    scratch: Vec<RawRecord>,
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

fn control_ok(b: &[u8; control::SIZE]) -> bool {
    let size = u32::from_le_bytes(b[control::SIZE_FIELD..control::SIZE_FIELD + 4].try_into().unwrap());
    let ver = u32::from_le_bytes(b[control::VERSION..control::VERSION + 4].try_into().unwrap());
    size as usize >= control::SIZE && ver == region::VERSION
}

impl MarkerCollector {
    pub fn new() -> Self {
        Self::with_config(MarkerConfig::default())
    }

    pub fn with_config(config: MarkerConfig) -> Self {
        MarkerCollector { config, targets: Vec::new(), next_class: 1, scratch: Vec::new() }
    }

    /// Processes with a region (prepared or attached, not yet finished).
    pub fn pids(&self) -> Vec<u32> {
        self.targets.iter().map(|t| t.pid).collect()
    }

    fn create_region(&mut self, pid: u32) -> Result<usize, CollectError> {
        let generation = new_generation();
        let owner = owner_uid(pid);
        let mut last_err = None;
        for n in 0..16u32 {
            let name = if n == 0 { format!("{REGION_FILE_PREFIX}{pid}") } else { format!("{REGION_FILE_PREFIX}{pid}.{n}") };
            let path = self.config.dir.join(name);
            if path.as_os_str().len() >= control::PATH_LEN {
                return Err(CollectError::Other(format!("marker region path too long: {}", path.display())));
            }
            match Region::create(&path, pid, generation, self.config.slots, self.config.ring_records, owner) {
                Ok(region) => {
                    let nslots = region.nslots as usize;
                    self.targets.push(Target {
                        pid,
                        region,
                        generation,
                        controls: Vec::new(),
                        seen_dropped: vec![0; nslots],
                        seen_noslot: 0,
                        classes: HashMap::new(),
                    });
                    return Ok(self.targets.len() - 1);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => return Err(CollectError::io(format!("cannot create marker region {}", path.display()), e)),
            }
        }
        Err(CollectError::io(
            format!("cannot create marker region in {}", self.config.dir.display()),
            last_err.unwrap_or_else(|| std::io::Error::other("no free name")),
        ))
    }

    /// Create the region for a process that is about to exec (launched command); returns
    /// the environment variables to add to the child's environment.
    pub fn prepare_child(&mut self, pid: u32) -> Result<Vec<(String, String)>, CollectError> {
        let i = self.create_region(pid)?;
        Ok(vec![(ENV_VAR.to_string(), self.targets[i].region.path.display().to_string())])
    }

    /// Enable markers in a running process; `Ok(false)` when it has no marker library
    /// (no `tailprof_control` symbol in any mapped ELF file), which is not an error.
    pub fn attach(&mut self, pid: u32) -> Result<bool, CollectError> {
        let addrs = find_symbol_in_process(pid, CONTROL_SYMBOL)
            .map_err(|e| CollectError::io(format!("cannot read /proc/{pid}/maps"), e))?;
        let addrs: Vec<u64> =
            addrs.into_iter().filter(|&a| read_control(pid, a).is_some_and(|b| control_ok(&b))).collect();
        if addrs.is_empty() {
            return Ok(false);
        }
        let i = self.create_region(pid)?;
        let t = &mut self.targets[i];
        let mut path = [0u8; control::PATH_LEN];
        let p = t.region.path.as_os_str().as_encoded_bytes();
        path[..p.len()].copy_from_slice(p);
        for &a in &addrs {
            // Path, then generation, then state: a thread that sees the new generation
            // finds the new path.
            let r = region::write_remote(pid, a + control::PATH as u64, &path)
                .and_then(|_| region::write_remote(pid, a + control::GENERATION as u64, &t.generation.to_le_bytes()))
                .and_then(|_| region::write_remote(pid, a + control::STATE as u64, &control::STATE_ON.to_le_bytes()));
            if let Err(e) = r {
                let t = self.targets.pop().expect("just pushed");
                let _ = std::fs::remove_file(&t.region.path);
                return Err(CollectError::io(format!("cannot enable markers in process {pid} (process_vm_writev)"), e));
            }
        }
        t.controls = addrs;
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
        let mut lost = 0u64;
        for slot in 0..t.region.claimed_slots() {
            let Some(tid) = t.region.slot_tid(slot) else { continue };
            scratch.clear();
            t.region.consume(slot, &mut scratch);
            for r in &scratch {
                let kind = match r.kind {
                    record::KIND_BEGIN => MarkerKind::Begin,
                    record::KIND_END => MarkerKind::End,
                    _ => {
                        lost += 1;
                        continue;
                    }
                };
                let class = if r.cls == 0 {
                    0
                } else {
                    let key = if r.cls & 1 == 1 { (slot, r.cls) } else { (u32::MAX, r.cls) };
                    match t.classes.get(&key) {
                        Some(&id) => id,
                        None => {
                            let name = if r.cls & 1 == 1 {
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
                            self.next_class += 1;
                            t.classes.insert(key, id);
                            out.push(Record::ItemClass(ItemClass { time: r.time, pid, id, name }));
                            stats.classes += 1;
                            id
                        }
                    }
                };
                out.push(Record::Marker(Marker {
                    time: r.time,
                    pid,
                    tid,
                    kind,
                    item: r.item,
                    class,
                    source: MarkerSource::Api,
                }));
                stats.markers += 1;
            }
            let d = t.region.slot_dropped(slot);
            lost += d.wrapping_sub(t.seen_dropped[slot as usize]);
            t.seen_dropped[slot as usize] = d;
        }
        let ns = t.region.noslot_dropped();
        lost += ns.wrapping_sub(t.seen_noslot);
        t.seen_noslot = ns;
        if lost > 0 {
            out.push(Record::Lost(Lost { time: now, cpu: 0, event: None, kind: LossKind::Markers, count: lost }));
            stats.dropped += lost;
        }
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
        for t in self.targets.drain(..) {
            let _ = std::fs::remove_file(&t.region.path);
        }
        stats
    }
}

impl Drop for MarkerCollector {
    fn drop(&mut self) {
        for t in &self.targets {
            let _ = std::fs::remove_file(&t.region.path);
        }
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
