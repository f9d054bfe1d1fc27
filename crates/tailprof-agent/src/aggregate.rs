//! DCPI-style aggregation in the drain loop: the [`Aggregator`] is the recorder's
//! [`RecordOutput`]. It follows processes (mmap, comm, fork, exit records) through the one
//! address-space model ([`tailprof_format::addrspace`]: the symbolizer's and the
//! unwinder's rules, with the agent's bounds below), turns every
//! sample's frames into (build-id, file offset) pairs, and adds one to the count of
//! (pid, comm, event, stack) in the current window's hash table. Nothing is stored per
//! sample. When a window ends (checked once per recorder round), its table is handed
//! to the writer thread and a new one starts.
//!
//! Binaries are identified by build-id: from the MMAP2 record when the kernel gives it,
//! else read from the mapped file itself through `/proc/PID/map_files` (the file that is
//! mapped, even if the path was since replaced or deleted), else a pseudo id from the
//! path, size and mtime. The first sample in a binary opens that file and hands it to
//! the symbolizer, which writes the binary's symbol table once per build-id.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use tailprof_collect::session::RecordOutput;
use tailprof_format::addrspace::{AddressSpaces, SpaceLimits};
use tailprof_format::{
    build_id_hex, BuildIdEntry, CpuMode, Flow, FormatError, Frame, FrameKind, LossKind, Record, Sample, Sink, StackId, StackStatus,
    StackTable,
};
use tailprof_store::schema::{stack_id, SampleRow, StoreFrame, KERNEL_BUILD_ID, NO_BUILD_ID_PREFIX};

use crate::tail::TailRetainer;
use crate::writer::{Job, SymbolJob, WindowBatch};

/// Distinct aggregate rows per window at most; beyond, samples are counted as dropped.
pub const MAX_ROWS_PER_WINDOW: usize = 1_000_000;
/// Executable mappings tracked per process at most; beyond, the oldest sixteenth is
/// evicted and counted.
pub const MAX_MAPS_PER_PROC: usize = 4096;
/// Processes tracked at most; beyond, the least recently active eighth is evicted and
/// counted.
pub const MAX_PROCS: usize = 65_536;
/// Bytes of mapping lists (entries and their paths) held at most, a list shared by forked
/// processes counted once; beyond, the mappings of the least recently active processes
/// are evicted and counted (issue 19, finding 6: 65,000 unmapped ranges under a 3.8 KB
/// path, copied into 300 children, took 1.5 GB).
pub const MAX_MAP_BYTES: usize = 32 << 20;
/// Longest path kept for a mapping (the store's `binary` column); longer ones are cut.
pub const MAX_PATH_BYTES: usize = 1024;
/// Distinct binaries known at most; beyond, the table starts over at the next window
/// (mappings resolve again, the symbolizer skips tables already written), counted.
pub const MAX_BINARIES: usize = 16_384;
/// path → build-id entries from the recorder kept at most.
const MAX_PATH_BUILD_IDS: usize = 16_384;

const UNRESOLVED: u32 = u32::MAX;

/// The agent's data on a mapping of the address-space model.
#[derive(Debug, Clone)]
struct MapData {
    /// Index into `Aggregator::binaries`, or UNRESOLVED until the first sample in it.
    bin: u32,
    /// The generation of `Aggregator::binaries` that `bin` indexes.
    bin_gen: u32,
    /// Build-id (hex) from the MMAP2 record or the recorder's build-id list, if known.
    build_id: Option<Arc<str>>,
}

impl Default for MapData {
    fn default() -> Self {
        MapData { bin: UNRESOLVED, bin_gen: 0, build_id: None }
    }
}

/// The agent's bounds of the address-space model: [`MAX_PROCS`], [`MAX_MAPS_PER_PROC`],
/// [`MAX_MAP_BYTES`].
fn space_limits() -> SpaceLimits {
    SpaceLimits { max_processes: MAX_PROCS, max_mappings: MAX_MAPS_PER_PROC, max_bytes: MAX_MAP_BYTES, ..SpaceLimits::default() }
}

/// `path` cut to [`MAX_PATH_BYTES`] (the store's `binary` column).
fn cut_path(path: &str) -> Arc<str> {
    if path.len() <= MAX_PATH_BYTES {
        return Arc::from(path);
    }
    let mut end = MAX_PATH_BYTES;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    Arc::from(format!("{}…", &path[..end]))
}

#[derive(Debug)]
struct Binary {
    build_id: String,
    path: Arc<str>,
}

/// A frame as aggregated: (binary index or kernel/unknown marker, offset).
type AggFrame = (u32, u64);
const KERNEL_BIN: u32 = u32::MAX - 1;
const UNKNOWN_BIN: u32 = u32::MAX - 2;
/// Code a runtime generated (offset = the address; named per process at the window's
/// end, [`crate::jit`]).
const JIT_BIN: u32 = u32::MAX - 3;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AggKey {
    pid: u32,
    comm: u32,
    event: u16,
    truncated: bool,
    frames: Box<[AggFrame]>,
}

/// Counters of the aggregation, shown by the agent at exit and stored per window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AggStats {
    pub samples: u64,
    /// Samples the kernel dropped (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    /// The other losses, each by its kind: ring-full LOST records (samples and side-band
    /// mixed, as the kernel reports them), markers, malformed records, item classes
    /// (issue 19, finding 10: they were all counted as lost samples).
    #[serde(flatten)]
    pub losses: tailprof_store::schema::Losses,
    pub dropped_rows: u64,
    pub windows: u64,
    pub binaries: u64,
    pub processes_seen: u64,
    /// Records about processes that could not be tracked (0 since processes beyond
    /// [`MAX_PROCS`] evict the least recently active: `processes_evicted`).
    pub processes_untracked: u64,
    /// Executable mappings not tracked (0 since mappings beyond [`MAX_MAPS_PER_PROC`]
    /// evict the oldest: `mappings_evicted`).
    pub mappings_dropped: u64,
    /// Command names beyond the interner's bound (shown as empty).
    pub comms_dropped: u64,
    /// Mappings forgotten because their range was no longer mapped when first sampled
    /// (munmap, exec, exit; nothing was opened).
    pub mappings_forgotten: u64,
    /// Mappings evicted at [`MAX_MAPS_PER_PROC`] or [`MAX_MAP_BYTES`] (frames in them are
    /// unknown).
    pub mappings_evicted: u64,
    /// Processes evicted at [`MAX_PROCS`] (least recently active first).
    pub processes_evicted: u64,
    /// Times the binary table started over at [`MAX_BINARIES`].
    pub binary_table_resets: u64,
    /// Binaries not registered because [`MAX_BINARIES`] × 4 were named in one window
    /// (their frames are unknown).
    pub binaries_dropped: u64,
    /// JIT names (issue 23, [`crate::jit`]).
    #[serde(flatten)]
    pub jit: crate::jit::JitStats,
}

/// The recorder output that aggregates. See the [module docs](self).
pub struct Aggregator {
    spaces: AddressSpaces<MapData>,
    /// pid → its command name (interned); pruned to the processes `spaces` knows.
    proc_comm: HashMap<u32, u32>,
    /// Generation of `binaries` (a mapping's `bin` is valid for its generation only).
    bin_gen: u32,
    comms: Vec<String>,
    comm_ids: HashMap<String, u32>,
    binaries: Vec<Binary>,
    bin_ids: HashMap<String, u32>,
    /// path → build-id from the recorder's build-id list (synthesized mappings).
    path_build_ids: HashMap<String, String>,
    stacks: StackTable,
    table: HashMap<AggKey, (u64, u64)>,
    events: Vec<String>,
    window_us: i64,
    window_start_us: i64,
    window_start_mono: u64,
    window_lost: u64,
    window_losses: tailprof_store::schema::Losses,
    window_samples: u64,
    window_dropped_rows: u64,
    pub stats: AggStats,
    jobs: Sender<Job>,
    frame_buf: Vec<AggFrame>,
    tail: Option<TailRetainer>,
    host: String,
    /// Binaries the symbolizer dropped: sent again when sampled again.
    dropped: crate::writer::DroppedBinaries,
    /// The running kernel's text `[_text, _etext)` and its binary index: kernel frames
    /// there are stored as (kernel build-id, address - _text), which survives KASLR.
    ktext: Option<(u64, u64, u32)>,
    /// This process's vDSO, read on the first `[vdso]` frame (`None` until then).
    vdso: Option<Option<OwnVdso>>,
    /// Names of code runtimes generated, per process (issue 23).
    jit: crate::jit::JitNames,
}

/// The agent's own vDSO image: the kernel maps the same one into every (64-bit) process
/// of a boot, and a `[vdso]` mapping has no file `map_files` could open, so a `[vdso]`
/// mapping of the same size is named from this copy (`report` on a trace does the same,
/// `tailprof_symbolize::ksyms`).
struct OwnVdso {
    len: u64,
    build_id: String,
    /// The image as an unnamed file, until its symbol table job is queued.
    file: Option<File>,
}

impl OwnVdso {
    fn read() -> Option<OwnVdso> {
        let copy = tailprof_analyze::symbolize::ksyms::copy_own_vdso().ok()?;
        let file = copy.into_file();
        let len = file.metadata().ok()?.len();
        let build_id = tailprof_collect::buildid::read_build_id_from(&file).map(|b| build_id_hex(&b))?;
        Some(OwnVdso { len, build_id, file: Some(file) })
    }
}

/// How the kernel names the vDSO mapping.
const VDSO_PATH: &str = "[vdso]";

fn is_kernel_ip(ip: u64) -> bool {
    ip >= 0xffff_8000_0000_0000
}

impl Aggregator {
    pub fn new(events: Vec<String>, window_us: i64, host: String, jobs: Sender<Job>, tail: Option<TailRetainer>) -> Self {
        let comm_ids = HashMap::from([(String::new(), 0)]);
        Aggregator {
            spaces: AddressSpaces::new(space_limits()),
            proc_comm: HashMap::new(),
            bin_gen: 0,
            comms: vec![String::new()],
            comm_ids,
            binaries: Vec::new(),
            bin_ids: HashMap::new(),
            path_build_ids: HashMap::new(),
            stacks: StackTable::new(),
            table: HashMap::new(),
            events,
            window_us,
            window_start_us: tailprof_store::time::now_us(),
            window_start_mono: tailprof_collect::session::monotonic_ns(),
            window_lost: 0,
            window_losses: Default::default(),
            window_samples: 0,
            window_dropped_rows: 0,
            stats: AggStats::default(),
            jobs,
            frame_buf: Vec::with_capacity(128),
            tail,
            host,
            dropped: Default::default(),
            ktext: None,
            vdso: None,
            jit: crate::jit::JitNames::new(),
        }
    }

    /// Shares the list of binaries the symbolizer dropped (see
    /// [`crate::writer::DroppedBinaries`]).
    pub fn set_dropped_binaries(&mut self, d: crate::writer::DroppedBinaries) {
        self.dropped = d;
    }

    /// Registers the running kernel (build-id and `_text`/`_etext` from /proc/kallsyms,
    /// which shows real addresses to root) and queues its symbol table once.
    pub fn register_kernel(&mut self) {
        let Some(bid) = tailprof_collect::buildid::kernel_build_id() else { return };
        let Some((text, etext)) = kernel_text_range() else { return };
        let build_id = build_id_hex(&bid);
        let b = self.binaries.len() as u32;
        self.binaries.push(Binary { build_id: build_id.clone(), path: Arc::from(KERNEL_PATH) });
        self.bin_ids.insert(build_id.clone(), b);
        self.ktext = Some((text, etext, b));
        if let Ok(file) = File::open("/proc/kallsyms") {
            let _ = self.jobs.send(Job::Symbols(SymbolJob { build_id, path: KERNEL_PATH.into(), file }));
        }
    }

    fn comm_id(&mut self, comm: &str) -> u32 {
        if let Some(&id) = self.comm_ids.get(comm) {
            return id;
        }
        if self.comms.len() >= 1 << 20 {
            self.stats.comms_dropped += 1;
            return 0;
        }
        let id = self.comms.len() as u32;
        let c: String = comm.chars().take(64).collect();
        self.comms.push(c.clone());
        self.comm_ids.insert(c, id);
        id
    }

    /// The model's counters into [`AggStats`].
    fn sync_counters(&mut self) {
        let c = self.spaces.counters();
        self.stats.processes_seen = c.processes_seen;
        self.stats.processes_evicted = c.processes_evicted;
        self.stats.mappings_evicted = c.mappings_evicted;
    }

    /// Sets the command name of `pid`; the table stays within the processes the model
    /// holds.
    fn set_comm(&mut self, pid: u32, comm: u32) {
        if self.proc_comm.len() >= 2 * MAX_PROCS && !self.proc_comm.contains_key(&pid) {
            let spaces = &self.spaces;
            self.proc_comm.retain(|&p, _| spaces.generation(p) != 0);
        }
        self.proc_comm.insert(pid, comm);
    }

    fn handle_mmap(&mut self, m: &tailprof_format::Mmap) {
        // The recorder's build-id for this path, looked up with the whole path now (the
        // list is bounded and may start over before the first sample).
        let given = m
            .build_id
            .as_ref()
            .filter(|b| !b.is_empty())
            .map(|b| Arc::<str>::from(build_id_hex(b)))
            .or_else(|| self.path_build_ids.get(&m.path).map(|b| Arc::from(b.as_str())));
        if let Some(map) = self.spaces.mmap(m, None) {
            map.data.build_id = given;
        }
        self.sync_counters();
    }

    /// The binary index of the mapping of `pid` at `ip`, resolving its build-id on first
    /// use.
    fn binary_of(&mut self, pid: u32, ip: u64) -> u32 {
        let Some(m) = self.spaces.find(pid, ip) else { return UNKNOWN_BIN };
        if m.data.bin != UNRESOLVED && m.data.bin_gen == self.bin_gen {
            return m.data.bin;
        }
        let (start, end, given) = (m.start, m.end, m.data.build_id.clone());
        let (full_path, path) = (m.path.clone(), cut_path(&m.path));
        let (build_id, opened) = match self.own_vdso(&path, end - start) {
            Some(v) => v,
            None => {
                // The mapped file itself (root: works for replaced and deleted files too).
                let opened = match open_mapped(pid, start, end) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        let known = given.is_some() || self.path_build_ids.contains_key(&*full_path);
                        if e.kind() == std::io::ErrorKind::NotFound && !known {
                            // Unmapped since (munmap, exec, exit) and nothing known about it: the
                            // range is forgotten, its frames unknown (a forged return address into
                            // a stale range opens nothing).
                            self.spaces.forget_mapping(pid, ip);
                            self.stats.mappings_forgotten += 1;
                            return UNKNOWN_BIN;
                        }
                        None
                    }
                };
                let build_id = given
                    .map(|b| b.to_string())
                    .or_else(|| self.path_build_ids.get(&*full_path).cloned())
                    .or_else(|| opened.as_ref().and_then(tailprof_collect::buildid::read_build_id_from).map(|b| build_id_hex(&b)))
                    .unwrap_or_else(|| pseudo_build_id(&path, opened.as_ref()));
                (build_id, opened)
            }
        };
        let bin = match self.bin_ids.get(&build_id) {
            Some(&b) => {
                // Dropped by the symbolizer under pressure: this new mapping's file is
                // queued again.
                if let Some(file) = opened.filter(|_| self.dropped.take(&build_id)) {
                    let _ = self.jobs.send(Job::Symbols(SymbolJob { build_id, path: path.to_string(), file }));
                }
                b
            }
            None if self.binaries.len() >= 4 * MAX_BINARIES => {
                // Starts over at the next window; until then new binaries are unknown.
                self.stats.binaries_dropped += 1;
                return UNKNOWN_BIN;
            }
            None => {
                let b = self.binaries.len() as u32;
                self.binaries.push(Binary { build_id: build_id.clone(), path: path.clone() });
                self.bin_ids.insert(build_id.clone(), b);
                self.stats.binaries += 1;
                if let Some(file) = opened {
                    let _ = self.jobs.send(Job::Symbols(SymbolJob { build_id, path: path.to_string(), file }));
                }
                b
            }
        };
        let gen = self.bin_gen;
        if let Some(m) = self.spaces.find_mut(pid, ip) {
            (m.data.bin, m.data.bin_gen) = (bin, gen);
        }
        bin
    }

    /// For a `[vdso]` mapping of `len` bytes: the agent's own vDSO's build-id, and its
    /// image the first time (for the symbol table job). `None` for other mappings, or a
    /// vDSO of another size (a 32-bit process's), which stays unnamed.
    fn own_vdso(&mut self, path: &str, len: u64) -> Option<(String, Option<File>)> {
        if path != VDSO_PATH {
            return None;
        }
        let v = self.vdso.get_or_insert_with(OwnVdso::read).as_mut()?;
        (v.len == len).then(|| (v.build_id.clone(), v.file.take()))
    }

    fn resolve(&mut self, pid: u32, f: Frame) -> AggFrame {
        if f.kind == FrameKind::Kernel || is_kernel_ip(f.ip) {
            return match self.ktext {
                Some((text, etext, b)) if f.ip >= text && f.ip < etext => (b, f.ip - text),
                _ => (KERNEL_BIN, f.ip),
            };
        }
        let Some(m) = self.spaces.find(pid, f.ip) else {
            // No file maps it: generated code, if the process publishes names.
            return (if self.jit.has(pid) { JIT_BIN } else { UNKNOWN_BIN }, f.ip);
        };
        if self.jit.has(pid) && is_anonymous(&m.path) {
            return (JIT_BIN, f.ip);
        }
        let off = m.file_offset(f.ip);
        let bin = self.binary_of(pid, f.ip);
        (bin, off)
    }

    fn handle_sample(&mut self, s: &Sample) {
        self.stats.samples += 1;
        self.window_samples += 1;
        let mut frames = std::mem::take(&mut self.frame_buf);
        frames.clear();
        let leaf = if s.cpumode == CpuMode::Kernel { Frame::kernel(s.ip) } else { Frame::user(s.ip) };
        let mut chain: Vec<Frame> = if s.stack.is_none() { Vec::new() } else { self.stacks.frames_leaf_first(s.stack).collect() };
        if chain.first().map(|f| f.ip) != Some(s.ip) {
            chain.insert(0, leaf);
        }
        for f in chain.iter().take(tailprof_store::MAX_FRAMES) {
            frames.push(self.resolve(s.pid, *f));
        }
        let truncated = chain.len() > tailprof_store::MAX_FRAMES || !matches!(s.stack_status, StackStatus::Complete | StackStatus::None);
        self.spaces.touch(s.pid);
        let comm = self.proc_comm.get(&s.pid).copied().unwrap_or(0);
        if let Some(t) = &mut self.tail {
            t.handle_sample(s, &frames);
        }
        let key = AggKey { pid: s.pid, comm, event: s.event, truncated, frames: frames.as_slice().into() };
        self.frame_buf = frames;
        if let Some(v) = self.table.get_mut(&key) {
            v.0 += 1;
            v.1 = v.1.saturating_add(s.period);
        } else if self.table.len() < MAX_ROWS_PER_WINDOW {
            self.table.insert(key, (1, s.period));
        } else {
            self.window_dropped_rows += 1;
            self.stats.dropped_rows += 1;
        }
    }

    fn store_frame(&mut self, pid: u32, f: AggFrame) -> StoreFrame {
        let build_id = match f.0 {
            KERNEL_BIN => KERNEL_BUILD_ID.to_string(),
            UNKNOWN_BIN => String::new(),
            JIT_BIN => self.jit.build_id_of(pid, f.1).unwrap_or_default(),
            b => self.binaries[b as usize].build_id.clone(),
        };
        StoreFrame { build_id, offset: f.1 }
    }

    fn binary_path(&self, first: Option<&StoreFrame>, f: Option<&AggFrame>) -> String {
        match f.map(|f| f.0) {
            Some(KERNEL_BIN) => "[kernel]".into(),
            Some(JIT_BIN) if first.is_some_and(|s| !s.build_id.is_empty()) => crate::jit::JIT_PATH.into(),
            Some(JIT_BIN) => "[unknown]".into(),
            Some(UNKNOWN_BIN) | None => "[unknown]".into(),
            Some(b) => self.binaries[b as usize].path.to_string(),
        }
    }

    /// What the aggregator holds now: (processes, mappings counting a shared list once
    /// per process, bytes of mapping lists, binaries).
    pub fn held(&self) -> (usize, usize, usize, usize) {
        (self.spaces.process_count(), self.spaces.mapping_count(), self.spaces.bytes(), self.binaries.len())
    }

    /// Counters of the request retainer.
    pub fn tail_stats(&self) -> crate::tail::TailStats {
        self.tail.as_ref().map(|t| t.stats).unwrap_or_default()
    }

    /// Ends the current window if it is due (or `force`), handing it to the writer.
    pub fn maybe_flush(&mut self, force: bool) {
        let now_mono = tailprof_collect::session::monotonic_ns();
        let due = now_mono.saturating_sub(self.window_start_mono) >= (self.window_us as u64).saturating_mul(1000);
        if !due && !force {
            return;
        }
        let start = self.window_start_us;
        let end = start + (now_mono.saturating_sub(self.window_start_mono) / 1000) as i64;
        let table = std::mem::take(&mut self.table);
        // JIT frames: the entries they use, then the tables (new generations) before the
        // window that names frames with them.
        for k in table.keys() {
            for f in k.frames.iter().filter(|f| f.0 == JIT_BIN) {
                self.jit.use_frame(k.pid, f.1);
            }
        }
        for t in self.jit.take_tables() {
            let _ = self.jobs.send(Job::JitSymbols(t));
        }
        let mut rows = Vec::with_capacity(table.len());
        for (k, (count, period)) in table {
            let frames: Vec<StoreFrame> = k.frames.iter().map(|&f| self.store_frame(k.pid, f)).collect();
            rows.push(SampleRow {
                window_start_us: start,
                window_end_us: end.max(start + 1),
                pid: k.pid,
                comm: self.comms.get(k.comm as usize).cloned().unwrap_or_default(),
                event: self.events.get(k.event as usize).cloned().unwrap_or_else(|| format!("event{}", k.event)),
                binary: self.binary_path(frames.first(), k.frames.first()),
                stack_id: stack_id(&frames),
                frames,
                truncated: k.truncated,
                count,
                period,
            });
        }
        let (items, latency) = match &mut self.tail {
            Some(t) => t.take_window(start, end.max(start + 1), &|bin| self.binaries.get(bin as usize).map(|b| b.build_id.clone())),
            None => (Vec::new(), Vec::new()),
        };
        let batch = WindowBatch {
            host: self.host.clone(),
            start_us: start,
            end_us: end.max(start + 1),
            samples: self.window_samples,
            lost_samples: self.window_lost,
            losses: std::mem::take(&mut self.window_losses),
            dropped_rows: self.window_dropped_rows,
            events: self.events.clone(),
            rows,
            items,
            latency,
        };
        let _ = self.jobs.send(Job::Window(batch));
        self.stats.windows += 1;
        self.window_start_us = end.max(start + 1);
        self.window_start_mono = now_mono;
        self.window_samples = 0;
        self.window_lost = 0;
        self.window_dropped_rows = 0;
        self.jit.end_window();
        self.stats.jit = self.jit.stats;
        // Exited processes' comms stay interned; bound the interner across windows.
        if self.comms.len() > 100_000 {
            self.comms.truncate(1);
            self.comm_ids.retain(|_, v| *v == 0);
            self.proc_comm.clear();
        }
        // The binary table starts over beyond its bound (issue 19, finding 8): mappings
        // resolve again when sampled, the kernel stays, request samples kept with old
        // indexes are let go.
        if self.binaries.len() > MAX_BINARIES {
            self.bin_gen = self.bin_gen.wrapping_add(1);
            self.stats.binary_table_resets += 1;
            let kernel = self.ktext.map(|(t, e, b)| (t, e, self.binaries.swap_remove(b as usize)));
            self.binaries = Vec::new();
            self.bin_ids = HashMap::new();
            self.ktext = None;
            if let Some((t, e, k)) = kernel {
                self.bin_ids.insert(k.build_id.clone(), 0);
                self.binaries.push(k);
                self.ktext = Some((t, e, 0));
            }
            if let Some(tail) = &mut self.tail {
                tail.forget_kept_samples();
            }
        }
        // The stack interner only serves the recorder→aggregator hand-off; bound it.
        if self.stacks.len() > 4_000_000 {
            self.stacks.clear();
        }
    }
}

/// Binary path stored for kernel frames in the kernel's text.
pub const KERNEL_PATH: &str = "[kernel.kallsyms]";

/// `_text` and `_etext` of the running kernel (None when kallsyms hides addresses).
fn kernel_text_range() -> Option<(u64, u64)> {
    use std::io::BufRead;
    let f = File::open("/proc/kallsyms").ok()?;
    let (mut text, mut etext) = (None, None);
    for line in std::io::BufReader::new(f).lines().take(10_000_000).map_while(Result::ok) {
        let mut it = line.split_whitespace();
        let (Some(a), Some(_), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
        match name {
            "_text" => text = u64::from_str_radix(a, 16).ok(),
            "_etext" => etext = u64::from_str_radix(a, 16).ok(),
            _ => continue,
        }
        if text.is_some() && etext.is_some() {
            break;
        }
    }
    let (t, e) = (text?, etext?);
    (t != 0 && e > t).then_some((t, e))
}

/// The file behind a mapping known from a MMAP2 record: only through the one way to open a
/// file a process mapped ([`tailprof_collect::procfs::open_mapping`]: `map_files` or the
/// device/inode-checked maps line; `O_NOCTTY`, never a FIFO, device, directory or pty, never
/// the path alone). A range no longer mapped opens nothing (issue 19, finding 1).
fn open_mapped(pid: u32, start: u64, end: u64) -> std::io::Result<File> {
    tailprof_collect::procfs::open_mapping(pid, start, end)
}

/// Anonymous memory, where runtimes put the code they generate.
fn is_anonymous(path: &str) -> bool {
    path.is_empty() || path.starts_with("//anon") || path.starts_with("[anon")
}

fn pseudo_build_id(path: &str, f: Option<&File>) -> String {
    let (size, mtime) = f.and_then(|f| f.metadata().ok()).map(|m| (m.size(), m.mtime())).unwrap_or((0, 0));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.bytes().chain(size.to_le_bytes()).chain(mtime.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{NO_BUILD_ID_PREFIX}{h:016x}")
}

/// The aggregator is a record stream's end like any other (`Sink`), plus the recorder's
/// round ends (a window may close) and stack interning (`RecordOutput`). The record
/// handlers are the inherent `handle_sample`/`handle_mmap` and the match below.
impl Sink for Aggregator {
    fn handle_record(&mut self, r: &Record) -> Flow {
        match r {
            Record::Sample(s) => self.handle_sample(s),
            Record::Mmap(m) => self.handle_mmap(m),
            Record::Comm(c) => {
                if let (Some(t), true) = (&mut self.tail, c.pid == c.tid || c.exec) {
                    t.handle_comm(c.pid, &c.comm);
                }
                let id = self.comm_id(&c.comm);
                if c.pid == c.tid || c.exec {
                    self.set_comm(c.pid, id);
                    self.spaces.comm(c);
                    self.sync_counters();
                }
            }
            Record::Fork(t) if t.pid != t.ppid => {
                // The child shares the parent's list until one of them changes it.
                let comm = self.proc_comm.get(&t.ppid).copied().unwrap_or(0);
                self.set_comm(t.pid, comm);
                self.spaces.fork(t);
                self.sync_counters();
            }
            Record::Exit(t) => {
                self.spaces.exit(t);
                if t.pid == t.tid {
                    self.jit.exit(t.pid);
                }
                if let Some(tail) = &mut self.tail {
                    tail.handle_exit(t.pid, t.tid, t.time);
                }
            }
            Record::Lost(l) => {
                if l.kind == LossKind::Samples {
                    self.window_lost = self.window_lost.saturating_add(l.count);
                    self.stats.lost_samples = self.stats.lost_samples.saturating_add(l.count);
                } else {
                    self.window_losses.count(l.kind, l.count);
                    self.stats.losses.count(l.kind, l.count);
                }
                if let Some(t) = &mut self.tail {
                    t.handle_lost(l);
                }
            }
            Record::Marker(m) => {
                if let Some(t) = &mut self.tail {
                    let comm = self.proc_comm.get(&m.pid).map(|&c| self.comms[c as usize].clone()).unwrap_or_default();
                    t.handle_marker(m, &comm);
                }
            }
            Record::ItemClass(c) => {
                if let Some(t) = &mut self.tail {
                    t.handle_class(c);
                }
            }
            // Trace context of a request (issue 24): stored with it when retained.
            Record::ItemTrace(it) => {
                if let Some(t) = &mut self.tail {
                    t.handle_item_trace(it);
                }
            }
            // Causes of retained requests (issue 21): the recorder opens the switch and
            // wakeup events at the first marker (`causes = true`).
            Record::Switch(sw) => {
                if let Some(t) = &mut self.tail {
                    t.handle_switch(sw);
                }
            }
            // Every wakeup (the critical paths follow wakers' wakers); the waker's stack is
            // resolved only for a thread inside an open request.
            Record::Wakeup(w) if self.tail.is_some() => {
                let want = self.tail.as_ref().is_some_and(|t| t.wants_wakeup(w));
                let mut frames = std::mem::take(&mut self.frame_buf);
                frames.clear();
                if want && !w.stack.is_none() {
                    let chain: Vec<Frame> = self.stacks.frames_leaf_first(w.stack).take(tailprof_store::MAX_FRAMES).collect();
                    for f in chain {
                        frames.push(self.resolve(w.pid, f));
                    }
                }
                if let Some(t) = &mut self.tail {
                    t.handle_wakeup(w, &frames);
                }
                self.frame_buf = frames;
            }
            _ => {}
        }
        Flow::Continue
    }

    fn handle_sample(&mut self, s: &Sample) {
        Aggregator::handle_sample(self, s);
    }

    fn handle_jit(&mut self, e: &tailprof_format::JitEntry) {
        self.jit.add(e);
    }

    fn handle_build_id(&mut self, e: &BuildIdEntry) {
        if self.path_build_ids.len() >= MAX_PATH_BUILD_IDS {
            self.path_build_ids.clear(); // mappings keep the build-ids they were given
        }
        if !e.build_id.is_empty() && e.path.len() <= MAX_PATH_BYTES {
            self.path_build_ids.insert(e.path.clone(), build_id_hex(&e.build_id));
        }
    }
}

impl RecordOutput for Aggregator {
    /// The recorder watches perf maps and jitdumps for the agent too (issue 23).
    fn keeps_jit(&self) -> bool {
        true
    }

    fn end_round(&mut self) -> Result<(), FormatError> {
        self.maybe_flush(false);
        Ok(())
    }

    fn bytes_written(&self) -> u64 {
        0
    }

    fn intern_stack(&mut self, frames_leaf_first: &[Frame]) -> StackId {
        self.stacks.intern_leaf_first(frames_leaf_first)
    }
}
