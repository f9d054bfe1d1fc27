//! DCPI-style aggregation in the drain loop: the [`Aggregator`] is the recorder's
//! [`RecordOutput`]. It follows processes (mmap, comm, fork, exit records), turns every
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
use tailprof_format::{
    BuildIdEntry, CpuMode, FormatError, Frame, FrameKind, LossKind, Record, Sample, StackId,
    StackStatus, StackTable,
};
use tailprof_store::schema::{
    stack_id, SampleRow, StoreFrame, KERNEL_BUILD_ID, NO_BUILD_ID_PREFIX,
};

use crate::tail::TailRetainer;
use crate::writer::{Job, SymbolJob, WindowBatch};

/// Distinct aggregate rows per window at most; beyond, samples are counted as dropped.
pub const MAX_ROWS_PER_WINDOW: usize = 1_000_000;
/// Executable mappings tracked per process at most.
const MAX_MAPS_PER_PROC: usize = 65_536;
/// Processes tracked at most.
const MAX_PROCS: usize = 1 << 20;

const UNRESOLVED: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Map {
    start: u64,
    end: u64,
    pgoff: u64,
    path: Arc<str>,
    /// Index into `Aggregator::binaries`, or UNRESOLVED until the first sample in it.
    bin: u32,
    /// Build-id from the MMAP2 record, if the kernel gave one.
    build_id: Option<Arc<str>>,
}

#[derive(Debug, Clone, Default)]
struct Proc {
    comm: u32,
    /// Shared with forked children until one of them changes its list (a fork copies
    /// nothing: issue 19, finding 6).
    maps: Arc<Vec<Map>>,
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
    /// Records about processes beyond [`MAX_PROCS`] (their samples have unknown frames).
    pub processes_untracked: u64,
    /// Executable mappings beyond [`MAX_MAPS_PER_PROC`] in one process (frames in them
    /// are unknown).
    pub mappings_dropped: u64,
    /// Command names beyond the interner's bound (shown as empty).
    pub comms_dropped: u64,
    /// Mappings forgotten because their range was no longer mapped when first sampled
    /// (munmap, exec, exit; nothing was opened).
    pub mappings_forgotten: u64,
}

/// The recorder output that aggregates. See the [module docs](self).
pub struct Aggregator {
    procs: HashMap<u32, Proc>,
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
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn is_kernel_ip(ip: u64) -> bool {
    ip >= 0xffff_8000_0000_0000
}

impl Aggregator {
    pub fn new(
        events: Vec<String>,
        window_us: i64,
        host: String,
        jobs: Sender<Job>,
        tail: Option<TailRetainer>,
    ) -> Self {
        let comm_ids = HashMap::from([(String::new(), 0)]);
        Aggregator {
            procs: HashMap::new(),
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
        let build_id = hex(&bid);
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

    fn proc_mut(&mut self, pid: u32) -> Option<&mut Proc> {
        if !self.procs.contains_key(&pid) {
            if self.procs.len() >= MAX_PROCS {
                self.stats.processes_untracked += 1;
                return None;
            }
            self.stats.processes_seen += 1;
            self.procs.insert(pid, Proc::default());
        }
        self.procs.get_mut(&pid)
    }

    fn handle_mmap(&mut self, m: &tailprof_format::Mmap) {
        if m.cpumode == CpuMode::Kernel || m.pid == u32::MAX || m.len == 0 {
            return;
        }
        if m.prot != 0 && m.prot & libc::PROT_EXEC as u32 == 0 {
            return;
        }
        let build_id = m
            .build_id
            .as_ref()
            .filter(|b| !b.is_empty())
            .map(|b| Arc::<str>::from(hex(b)));
        let map = Map {
            start: m.start,
            end: m.start.saturating_add(m.len),
            pgoff: m.pgoff,
            path: Arc::from(m.path.as_str()),
            bin: UNRESOLVED,
            build_id,
        };
        let Some(p) = self.proc_mut(m.pid) else {
            return;
        };
        // A new mapping replaces whatever overlapped it.
        let maps = Arc::make_mut(&mut p.maps);
        maps.retain(|x| x.end <= map.start || x.start >= map.end);
        if maps.len() < MAX_MAPS_PER_PROC {
            let i = maps.partition_point(|x| x.start < map.start);
            maps.insert(i, map);
        } else {
            self.stats.mappings_dropped += 1;
        }
    }

    /// The binary index of mapping `mi` of `pid`, resolving its build-id on first use.
    fn binary_of(&mut self, pid: u32, mi: usize) -> u32 {
        let (start, end, path, given) = {
            let m = &self.procs[&pid].maps[mi];
            if m.bin != UNRESOLVED {
                return m.bin;
            }
            (m.start, m.end, m.path.clone(), m.build_id.clone())
        };
        // The mapped file itself (root: works for replaced and deleted files too).
        let opened = match open_mapped(pid, start, end) {
            Ok(f) => Some(f),
            Err(e) => {
                let known = given.is_some() || self.path_build_ids.contains_key(&*path);
                if e.kind() == std::io::ErrorKind::NotFound && !known {
                    // Unmapped since (munmap, exec, exit) and nothing known about it: the
                    // range is forgotten, its frames unknown (a forged return address into
                    // a stale range opens nothing).
                    if let Some(p) = self.procs.get_mut(&pid) {
                        Arc::make_mut(&mut p.maps).remove(mi);
                    }
                    self.stats.mappings_forgotten += 1;
                    return UNKNOWN_BIN;
                }
                None
            }
        };
        let build_id = given
            .map(|b| b.to_string())
            .or_else(|| self.path_build_ids.get(&*path).cloned())
            .or_else(|| {
                opened
                    .as_ref()
                    .and_then(tailprof_collect::buildid::read_build_id_from)
                    .map(|b| hex(&b))
            })
            .unwrap_or_else(|| pseudo_build_id(&path, opened.as_ref()));
        let bin = match self.bin_ids.get(&build_id) {
            Some(&b) => {
                // Dropped by the symbolizer under pressure: this new mapping's file is
                // queued again.
                if let Some(file) = opened.filter(|_| self.dropped.take(&build_id)) {
                    let _ = self.jobs.send(Job::Symbols(SymbolJob { build_id, path: path.to_string(), file }));
                }
                b
            }
            None => {
                let b = self.binaries.len() as u32;
                self.binaries.push(Binary {
                    build_id: build_id.clone(),
                    path: path.clone(),
                });
                self.bin_ids.insert(build_id.clone(), b);
                self.stats.binaries += 1;
                if let Some(file) = opened {
                    let _ = self.jobs.send(Job::Symbols(SymbolJob {
                        build_id,
                        path: path.to_string(),
                        file,
                    }));
                }
                b
            }
        };
        if let Some(p) = self.procs.get_mut(&pid) {
            Arc::make_mut(&mut p.maps)[mi].bin = bin;
        }
        bin
    }

    fn resolve(&mut self, pid: u32, f: Frame) -> AggFrame {
        if f.kind == FrameKind::Kernel || is_kernel_ip(f.ip) {
            return match self.ktext {
                Some((text, etext, b)) if f.ip >= text && f.ip < etext => (b, f.ip - text),
                _ => (KERNEL_BIN, f.ip),
            };
        }
        let Some(p) = self.procs.get(&pid) else {
            return (UNKNOWN_BIN, f.ip);
        };
        let i = p.maps.partition_point(|m| m.start <= f.ip);
        if i == 0 || f.ip >= p.maps[i - 1].end {
            return (UNKNOWN_BIN, f.ip);
        }
        let m = &p.maps[i - 1];
        let off = f.ip - m.start + m.pgoff;
        let bin = self.binary_of(pid, i - 1);
        (bin, off)
    }

    fn handle_sample(&mut self, s: &Sample) {
        self.stats.samples += 1;
        self.window_samples += 1;
        let mut frames = std::mem::take(&mut self.frame_buf);
        frames.clear();
        let leaf = if s.cpumode == CpuMode::Kernel {
            Frame::kernel(s.ip)
        } else {
            Frame::user(s.ip)
        };
        let mut chain: Vec<Frame> = if s.stack.is_none() {
            Vec::new()
        } else {
            self.stacks.frames_leaf_first(s.stack).collect()
        };
        if chain.first().map(|f| f.ip) != Some(s.ip) {
            chain.insert(0, leaf);
        }
        for f in chain.iter().take(tailprof_store::MAX_FRAMES) {
            frames.push(self.resolve(s.pid, *f));
        }
        let truncated = chain.len() > tailprof_store::MAX_FRAMES
            || !matches!(s.stack_status, StackStatus::Complete | StackStatus::None);
        let comm = self.procs.get(&s.pid).map(|p| p.comm).unwrap_or(0);
        if let Some(t) = &mut self.tail {
            t.handle_sample(s, &frames);
        }
        let key = AggKey {
            pid: s.pid,
            comm,
            event: s.event,
            truncated,
            frames: frames.as_slice().into(),
        };
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

    fn store_frame(&self, f: AggFrame) -> StoreFrame {
        let build_id = match f.0 {
            KERNEL_BIN => KERNEL_BUILD_ID.to_string(),
            UNKNOWN_BIN => String::new(),
            b => self.binaries[b as usize].build_id.clone(),
        };
        StoreFrame {
            build_id,
            offset: f.1,
        }
    }

    fn binary_path(&self, f: Option<&AggFrame>) -> String {
        match f.map(|f| f.0) {
            Some(KERNEL_BIN) => "[kernel]".into(),
            Some(UNKNOWN_BIN) | None => "[unknown]".into(),
            Some(b) => self.binaries[b as usize].path.to_string(),
        }
    }

    /// Counters of the request retainer.
    pub fn tail_stats(&self) -> crate::tail::TailStats {
        self.tail.as_ref().map(|t| t.stats).unwrap_or_default()
    }

    /// Ends the current window if it is due (or `force`), handing it to the writer.
    pub fn maybe_flush(&mut self, force: bool) {
        let now_mono = tailprof_collect::session::monotonic_ns();
        let due = now_mono.saturating_sub(self.window_start_mono)
            >= (self.window_us as u64).saturating_mul(1000);
        if !due && !force {
            return;
        }
        let start = self.window_start_us;
        let end = start + (now_mono.saturating_sub(self.window_start_mono) / 1000) as i64;
        let table = std::mem::take(&mut self.table);
        let mut rows = Vec::with_capacity(table.len());
        for (k, (count, period)) in table {
            let frames: Vec<StoreFrame> = k.frames.iter().map(|&f| self.store_frame(f)).collect();
            rows.push(SampleRow {
                window_start_us: start,
                window_end_us: end.max(start + 1),
                pid: k.pid,
                comm: self.comms.get(k.comm as usize).cloned().unwrap_or_default(),
                event: self
                    .events
                    .get(k.event as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("event{}", k.event)),
                binary: self.binary_path(k.frames.first()),
                stack_id: stack_id(&frames),
                frames,
                truncated: k.truncated,
                count,
                period,
            });
        }
        let (items, latency) = match &mut self.tail {
            Some(t) => t.take_window(start, end.max(start + 1), &|bin| {
                self.binaries.get(bin as usize).map(|b| b.build_id.clone())
            }),
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
        // Exited processes' comms stay interned; bound the interner across windows.
        if self.comms.len() > 100_000 {
            self.comms.truncate(1);
            self.comm_ids.retain(|_, v| *v == 0);
            for p in self.procs.values_mut() {
                p.comm = 0;
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

fn pseudo_build_id(path: &str, f: Option<&File>) -> String {
    let (size, mtime) = f
        .and_then(|f| f.metadata().ok())
        .map(|m| (m.size(), m.mtime()))
        .unwrap_or((0, 0));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path
        .bytes()
        .chain(size.to_le_bytes())
        .chain(mtime.to_le_bytes())
    {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{NO_BUILD_ID_PREFIX}{h:016x}")
}

impl RecordOutput for Aggregator {
    fn write_record(&mut self, r: &Record) -> Result<(), FormatError> {
        match r {
            Record::Sample(s) => self.handle_sample(s),
            Record::Mmap(m) => self.handle_mmap(m),
            Record::Comm(c) => {
                let id = self.comm_id(&c.comm);
                if c.pid == c.tid || c.exec {
                    if let Some(p) = self.proc_mut(c.pid) {
                        if c.exec {
                            p.maps = Arc::default();
                        }
                        p.comm = id;
                    }
                }
            }
            Record::Fork(t) if t.pid != t.ppid => {
                let parent = self.procs.get(&t.ppid).cloned().unwrap_or_default();
                if self.procs.len() < MAX_PROCS {
                    self.stats.processes_seen += 1;
                    self.procs.insert(t.pid, parent);
                } else {
                    self.stats.processes_untracked += 1;
                }
            }
            Record::Exit(t) => {
                if t.pid == t.tid {
                    self.procs.remove(&t.pid);
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
                    let comm = self
                        .procs
                        .get(&m.pid)
                        .map(|p| self.comms[p.comm as usize].clone())
                        .unwrap_or_default();
                    t.handle_marker(m, &comm);
                }
            }
            Record::ItemClass(c) => {
                if let Some(t) = &mut self.tail {
                    t.handle_class(c);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn write_sample(&mut self, s: &Sample) -> Result<(), FormatError> {
        self.handle_sample(s);
        Ok(())
    }

    fn add_build_id(&mut self, e: BuildIdEntry) -> Result<(), FormatError> {
        if !e.build_id.is_empty() && self.path_build_ids.len() < 1 << 20 {
            self.path_build_ids.insert(e.path, hex(&e.build_id));
        }
        Ok(())
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
