//! The recorder's item side (issue 3): options, the queue that merges marker records
//! into the rounds, and opening uprobe item boundaries next to the sampling events.
//!
//! Marker records (from the marker library's shared-memory rings, drained by
//! [`crate::markers::MarkerCollector`]) are already decoded [`Record`]s, not raw ring
//! bytes, so they wait in a [`RecordQueue`] beside the raw [`crate::ring::RoundQueue`]
//! and are written by the same round rule: sorted by time, and before every raw record
//! the queued records stamped at or before it go first (see `session`'s module docs).

use std::io;

use tailprof_format::{
    FormatError, ItemClass, LossKind, Lost, Marker, MarkerKind, MarkerSource, Record, Sample,
};

use crate::attr::{parse_regs, reg_names, ClockChoice, PerfEventAttr, ATTR_SIZE};
use crate::classprobe::{self, ClassId, ClassSpec, ClassTable, TracefsUprobe};
use crate::parse::Layout;
use crate::sys::{self, CollectError};
use crate::uprobe::{self, ItemProbes, PreparedProbes, ProbeRole, ResolvedProbe, UprobeAttrConfig};

/// What the recorder does about items, besides always collecting the marker library's
/// markers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemOptions {
    /// Item boundaries from uprobes on an unmodified binary (`--item-begin/--item-end`).
    pub probes: Option<ItemProbes>,
    /// Register-tag mode (`--item-reg r13`): capture this user register with every
    /// sample; its value is the sample's item id (0 = outside any item).
    pub item_reg: Option<String>,
    /// Item classes from an argument of a probed function (`--item-class-from`): each
    /// hit labels the thread's open item (or the next one it begins) with the value's
    /// class ([`crate::classprobe`]).
    pub class_from: Vec<ClassSpec>,
    /// Off-CPU time for items from the marker library without `--off-cpu` (issue 7 item
    /// 2): the context-switch and `sched:sched_switch` events are opened when the first
    /// marker shows up (at once when `-p`/`-a` attached a process with the marker library
    /// while setting up; [`OffCpuLater`]). Ignored with
    /// [`crate::stacks::StackOptions::off_cpu`] (then they are on from the start).
    pub off_cpu_on_markers: bool,
}

/// `--item-reg NAME` → (sample_regs_user bit, canonical name).
pub(super) fn item_reg_mask(name: &str) -> Result<(u64, String), String> {
    let m = parse_regs(name).map_err(|e| e.to_string())?;
    if m.count_ones() != 1 {
        return Err(format!(
            "--item-reg takes exactly one register (got '{name}')"
        ));
    }
    Ok((
        m,
        reg_names(m)
            .first()
            .map(|s| s.to_string())
            .unwrap_or_else(|| name.to_string()),
    ))
}

/// The off-CPU events of a recording that may get markers but was not asked for
/// `--off-cpu` ([`ItemOptions::off_cpu_on_markers`]): a dummy software event with
/// `context_switch` and the `sched:sched_switch` stack event, planned with the others but
/// opened only when the first marker is drained (`Recorder::open_off_cpu_later`): per
/// CPU for `-a`, else for every thread of the marked process on every CPU (re-listing
/// the threads until no new one shows up; threads created later inherit them), each
/// redirected into its CPU's ring. Until then nothing is open, so a program that never
/// writes a marker pays nothing. (Opening them disabled at the start and enabling them
/// later was measured first: even disabled, a context-switch event makes the kernel call
/// its switch hook and extra task events lengthen every context switch of the target,
/// +15-25 % on a pipe ping-pong, bench/offcpu-idle.sh.)
///
/// What the trace knows: the header says `off_cpu_from = first_marker` (or `start`),
/// and a process's context switches are complete from its first `Switch` record on
/// (that record comes after the enable); an item that began earlier has only part of its
/// off-CPU time (docs/FORMAT.md, `off_cpu_from`).
#[derive(Debug, Default)]
pub(super) struct OffCpuLater {
    /// The context-switch event's plan (`None`: not in this mode).
    pub plan: Option<crate::attr::AttrPlan>,
    /// Its decoder event index.
    pub event: u16,
    /// The sched_switch stack event (`None`: tracefs unavailable) and its decoder index.
    pub sched: Option<crate::attr::AttrPlan>,
    pub sched_event: u16,
    /// The `sched:sched_waking` event of causes (issue 21) and its decoder index, opened
    /// with the other two.
    pub waking: Option<(crate::attr::AttrPlan, u16)>,
    /// The CPU-wide context-switch event of causes (who ran while a thread was
    /// runnable), opened per CPU (not per task) with the others when CPU-wide events
    /// are permitted.
    pub cpu_switch: Option<(crate::attr::AttrPlan, u16)>,
    /// Every fd of the two events once opened.
    pub fds: Vec<std::os::fd::OwnedFd>,
    /// CLOCK_MONOTONIC when they were enabled.
    pub enabled_at: Option<u64>,
}

impl OffCpuLater {
    /// Waiting for the first marker.
    pub fn pending(&self) -> bool {
        self.plan.is_some() && self.enabled_at.is_none()
    }

    /// Disable every fd (end of recording).
    pub fn disable(&self) {
        for fd in &self.fds {
            let _ = sys::ioctl_disable(std::os::fd::AsFd::as_fd(fd));
        }
    }
}

/// Most files remembered by [`MarkerFollower`] (whether each defines the control
/// symbol); when full the memory starts over (files are then looked at again).
pub const MAX_FOLLOW_FILES: usize = 16384;
/// Most processes attached after the start (`-a`, the agent) at once; more are counted
/// and not attached.
pub const MAX_FOLLOWED_PROCESSES: usize = 1024;
/// Processes waiting to be attached at most (more: counted as not attached).
const MAX_FOLLOW_QUEUE: usize = 4096;

/// Files and processes waiting for the follower's worker at most; more are counted
/// (`scan_dropped`) and not remembered, so the next MMAP of the file tries again.
pub const MAX_SCAN_PENDING: usize = 64;
/// Files handed to the worker and not answered yet whose owner (uid, from the opened
/// file) is one user at most (a quarter of the queue): one user's flood of slow files
/// cannot keep another user's new files out (issue 19, fairness; the symbolizer's
/// `MAX_DEFERRED_PER_OWNER` rule). More are counted in `scan_dropped`, not remembered.
pub const MAX_SCAN_PENDING_PER_OWNER: usize = MAX_SCAN_PENDING / 4;
/// Other processes remembered per file being looked at (more: counted in `scan_dropped`).
const MAX_WAITING_PER_FILE: usize = 64;
/// How long stopping waits for a scan in progress at most (it is told to stop and gives
/// up at its next read; a read that hangs is left behind, the thread detached).
pub const SCAN_STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// `-a` and the agent (issue 9 item 4): processes that start after the recording began
/// and map a file defining the marker control symbol are attached like those running at
/// start. The emitter shows every executable file mapping (PERF_RECORD_MMAP2) to
/// [`MarkerFollower::saw_mmap`]; each file (device, inode, build-id) is opened there,
/// through the mapping itself (`/proc/PID/map_files`, [`crate::procfs::open_mapped_file`]:
/// never a FIFO, symlink or other file put at the path), and handed to the follower's
/// worker thread, which reads only its symbol tables, with every size bounded
/// ([`crate::markers::file_defines_until`]). The drain loop never scans (issue 19,
/// finding 3: a 16 GiB `.strtab` held it for 173 s): at most [`MAX_SCAN_PENDING`] jobs
/// wait, at most [`MAX_SCAN_PENDING_PER_OWNER`] files of one owner (more are counted and
/// retried at the file's next MMAP), and answers come back
/// through a channel [`MarkerFollower::poll`] reads without blocking. The answer is
/// remembered (at most [`MAX_FOLLOW_FILES`] files). For a process whose file defines the
/// symbol the worker also looks up its control blocks
/// ([`crate::markers::find_symbol_in_process_until`]); the recorder attaches it between
/// rounds ([`crate::markers::MarkerCollector::attach_found`], which validates the control
/// block before writing anything). Stopping ([`MarkerFollower::stop`]) tells a scan in
/// progress to give up at its next read and waits for it at most [`SCAN_STOP_WITHIN`];
/// jobs not done are counted. Markers a process wrote before it was attached are not
/// recorded (the library writes none while off, and keeps no count of them): the note
/// says how many processes were attached late.
#[derive(Debug, Default)]
pub(crate) struct MarkerFollower {
    /// (device, inode) → (build-id, defines the control symbol).
    files: std::collections::HashMap<(u64, u64), (Option<Vec<u8>>, bool)>,
    /// Files handed to the worker, not answered yet: their owner (uid) and the other
    /// processes that mapped them meanwhile (at most [`MAX_WAITING_PER_FILE`] each).
    scanning: std::collections::HashMap<(u64, u64), (u32, Vec<u32>)>,
    /// Files in `scanning` by owner (at most [`MAX_SCAN_PENDING_PER_OWNER`] each).
    scanning_per_owner: std::collections::HashMap<u32, usize>,
    /// The worker (started at the first job).
    worker: Option<ScanWorker>,
    /// Processes to attach, with their control block addresses (looked up by the worker).
    pub queue: Vec<(u32, io::Result<Vec<u64>>)>,
    /// Processes attached after the start, attach failures (first error kept), and
    /// processes not attached because a bound was reached.
    pub attached: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub over_limit: u64,
    /// Processes launched by another running recorder, left to it.
    pub others: u64,
    /// Files or processes not looked at: the worker's queue was full, or the recording
    /// stopped before their turn.
    pub scan_dropped: u64,
    /// When exited processes' regions were last looked for.
    pub last_reap_ns: u64,
}

/// What the follower's worker is asked.
#[derive(Debug)]
enum ScanJob {
    /// Does this file define the control symbol (`symtab`: its `.symtab` too)? Then look
    /// up the control blocks of `pid`.
    File {
        key: (u64, u64),
        build_id: Option<Vec<u8>>,
        pid: u32,
        file: std::fs::File,
        symtab: bool,
    },
    /// Look up the control blocks of `pid` (it maps a file known to define the symbol).
    Process { pid: u32 },
}

/// What the worker answers.
#[derive(Debug)]
enum ScanDone {
    /// `marked`: `None` when the scan was stopped (not remembered). `found`: the process's
    /// control blocks when the file defines the symbol.
    File {
        key: (u64, u64),
        build_id: Option<Vec<u8>>,
        marked: Option<bool>,
        pid: u32,
        found: Option<io::Result<Vec<u64>>>,
    },
    Process {
        pid: u32,
        found: io::Result<Vec<u64>>,
    },
}

/// The check a worker runs on a file (`file_defines_until`; tests put a slow one).
type FileCheck = fn(&std::fs::File, bool, &std::sync::atomic::AtomicBool) -> Option<bool>;

fn check_control_symbol(
    f: &std::fs::File,
    symtab: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<bool> {
    crate::markers::file_defines_until(f, crate::markers::CONTROL_SYMBOL, symtab, stop)
}

/// The follower's worker thread: a bounded job queue in, answers out.
#[derive(Debug)]
struct ScanWorker {
    jobs: Option<std::sync::mpsc::SyncSender<ScanJob>>,
    done: std::sync::mpsc::Receiver<ScanDone>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Jobs sent and not answered yet.
    in_flight: u64,
}

impl ScanWorker {
    fn start(check: FileCheck) -> io::Result<ScanWorker> {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<ScanJob>(MAX_SCAN_PENDING);
        let (tx, done) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let st = stop.clone();
        std::thread::Builder::new()
            .name("tailprof-follow".into())
            .spawn(move || {
                let lookup = |pid| {
                    crate::markers::find_symbol_in_process_until(
                        pid,
                        crate::markers::CONTROL_SYMBOL,
                        &st,
                    )
                };
                while let Ok(job) = rx.recv() {
                    let answer = match job {
                        ScanJob::File {
                            key,
                            build_id,
                            pid,
                            file,
                            symtab,
                        } => {
                            let marked = check(&file, symtab, &st);
                            drop(file);
                            let found = (marked == Some(true)).then(|| lookup(pid));
                            ScanDone::File {
                                key,
                                build_id,
                                marked,
                                pid,
                                found,
                            }
                        }
                        ScanJob::Process { pid } => ScanDone::Process {
                            pid,
                            found: lookup(pid),
                        },
                    };
                    if tx.send(answer).is_err() {
                        return;
                    }
                }
            })?;
        Ok(ScanWorker {
            jobs: Some(jobs),
            done,
            stop,
            in_flight: 0,
        })
    }

    /// Queue a job without waiting; `false` when the queue is full (or the worker gone).
    fn send(&mut self, job: ScanJob) -> bool {
        let ok = self.jobs.as_ref().is_some_and(|j| j.try_send(job).is_ok());
        self.in_flight += u64::from(ok);
        ok
    }
}

impl MarkerFollower {
    /// An executable file mapping (MMAP2) was written: queue its process when the file
    /// defines the marker control symbol (answered later, through [`MarkerFollower::poll`]).
    pub fn saw_mmap(&mut self, m: &tailprof_format::Mmap, dev: u64, inode: u64) {
        if m.prot & libc::PROT_EXEC as u32 == 0
            || inode == 0
            || !m.path.starts_with('/')
            || m.pid == 0
        {
            return;
        }
        let key = (dev, inode);
        match self.files.get(&key) {
            Some((id, marked)) if *id == m.build_id => {
                if *marked && !self.queue.iter().any(|(p, _)| *p == m.pid) {
                    self.send(ScanJob::Process { pid: m.pid });
                }
            }
            _ if self.scanning.contains_key(&key) => {
                // Being looked at: this process is looked up when the answer comes.
                let Some((_, waiting)) = self.scanning.get_mut(&key) else {
                    return;
                };
                if waiting.len() >= MAX_WAITING_PER_FILE {
                    self.scan_dropped += 1;
                } else if m.pid != 0 && !waiting.contains(&m.pid) {
                    waiting.push(m.pid);
                }
            }
            _ => {
                let e = crate::procfs::MapsEntry {
                    start: m.start,
                    end: m.start.saturating_add(m.len),
                    prot: m.prot,
                    shared: false,
                    offset: m.pgoff,
                    dev,
                    inode,
                    path: m.path.clone(),
                };
                let Ok(file) = crate::procfs::open_mapped_file(m.pid, &e) else {
                    // Gone already (or not the file it was): not remembered.
                    return;
                };
                // Libraries export the block in .dynsym; an executable may have it only in
                // .symtab (not loaded, possibly big: read only for non-libraries).
                let library = m.path.rsplit('/').next().is_some_and(|n| n.contains(".so"));
                self.scan_file(key, m.build_id.clone(), m.pid, file, !library);
            }
        }
    }

    /// Hand one opened file to the worker (counted as dropped when its queue is full or
    /// its owner already has [`MAX_SCAN_PENDING_PER_OWNER`] files waiting).
    fn scan_file(
        &mut self,
        key: (u64, u64),
        build_id: Option<Vec<u8>>,
        pid: u32,
        file: std::fs::File,
        symtab: bool,
    ) {
        // The owner of the file opened (fstat: nothing read); unknown owners share one count.
        let owner = file.metadata().map_or(u32::MAX, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let mine = self.scanning_per_owner.get(&owner).copied().unwrap_or(0);
        if mine >= MAX_SCAN_PENDING_PER_OWNER {
            self.scan_dropped += 1; // retried at the file's next MMAP
            return;
        }
        if self.send(ScanJob::File {
            key,
            build_id,
            pid,
            file,
            symtab,
        }) {
            self.scanning.insert(key, (owner, Vec::new()));
            *self.scanning_per_owner.entry(owner).or_default() += 1;
        }
    }

    /// A file handed to the worker is answered (or given up): no longer counted for its
    /// owner; returns the processes that waited for it.
    fn scanned(&mut self, key: &(u64, u64)) -> Vec<u32> {
        let Some((owner, waiting)) = self.scanning.remove(key) else {
            return Vec::new();
        };
        if let Some(n) = self.scanning_per_owner.get_mut(&owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.scanning_per_owner.remove(&owner);
            }
        }
        waiting
    }

    fn send(&mut self, job: ScanJob) -> bool {
        if self.worker.is_none() {
            match ScanWorker::start(check_control_symbol) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    self.first_error
                        .get_or_insert(format!("cannot start the marker follower's thread: {e}"));
                }
            }
        }
        let sent = self.worker.as_mut().is_some_and(|w| w.send(job));
        if !sent {
            self.scan_dropped += 1;
        }
        sent
    }

    /// Take the worker's answers (never waits): remember the files, queue the marked
    /// processes for [`crate::markers::MarkerCollector::attach_found`].
    pub fn poll(&mut self) {
        let Some(w) = self.worker.as_mut() else {
            return;
        };
        let mut answers = Vec::new();
        while let Ok(a) = w.done.try_recv() {
            w.in_flight = w.in_flight.saturating_sub(1);
            answers.push(a);
        }
        for a in answers {
            let (pid, found) = match a {
                ScanDone::File {
                    key,
                    build_id,
                    marked,
                    pid,
                    found,
                } => {
                    let waiting = self.scanned(&key);
                    let Some(marked) = marked else {
                        self.scan_dropped += 1;
                        continue;
                    };
                    if self.files.len() >= MAX_FOLLOW_FILES {
                        self.files.clear();
                    }
                    self.files.insert(key, (build_id, marked));
                    if marked {
                        for p in waiting.into_iter().filter(|&p| p != pid) {
                            self.send(ScanJob::Process { pid: p });
                        }
                    }
                    match found {
                        Some(found) => (pid, found),
                        None => continue,
                    }
                }
                ScanDone::Process { pid, found } => (pid, found),
            };
            if self.queue.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            if self.queue.len() >= MAX_FOLLOW_QUEUE {
                self.over_limit += 1;
            } else {
                self.queue.push((pid, found));
            }
        }
    }

    /// The recording stops: take the answers there are, tell a scan in progress to give
    /// up, and wait for the worker at most [`SCAN_STOP_WITHIN`] (then it is left behind);
    /// jobs not answered by then (and processes waiting for them) are counted in
    /// `scan_dropped`.
    pub fn stop(&mut self) {
        self.poll();
        let Some(mut w) = self.worker.take() else {
            return;
        };
        w.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        w.jobs = None; // the worker ends when its queue is empty
                       // Every job not answered by now, and every process waiting for a file's answer,
                       // is lost: counted. The answers still to come are too late to be used.
        let waiting: usize = self.scanning.drain().map(|(_, (_, pids))| pids.len()).sum();
        self.scanning_per_owner.clear();
        self.scan_dropped += w.in_flight + waiting as u64;
        let deadline = std::time::Instant::now() + SCAN_STOP_WITHIN;
        while w.in_flight > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match w.done.recv_timeout(left) {
                Ok(_) => w.in_flight -= 1,
                Err(_) => break, // a read that hangs: the thread is left behind
            }
        }
    }
}

impl Drop for ScanWorker {
    /// A scan in progress gives up at its next read; nobody waits for it.
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Records waiting to be merged into the round (see the module docs).
#[derive(Debug, Default)]
pub(super) struct RecordQueue {
    /// Filled by the marker drain; sorted by [`RecordQueue::sort`].
    pub pending: Vec<Record>,
    pos: usize,
    /// Malformed ring records already stored as `Lost { kind: Malformed }`.
    malformed_stored: u64,
}

impl RecordQueue {
    /// Store the malformed ring records counted since the last call (`total` is the
    /// recorder's running count) as one `Lost { kind: Malformed }` record at `time`, so
    /// they are in the trace and its loss table, not only in the summary. Returns whether
    /// a record was queued.
    pub fn store_malformed(&mut self, total: u64, time: u64) -> bool {
        let new = total.saturating_sub(self.malformed_stored);
        self.malformed_stored = self.malformed_stored.max(total);
        if new == 0 {
            return false;
        }
        self.pending.push(Record::Lost(Lost {
            time,
            cpu: 0,
            event: None,
            kind: LossKind::Malformed,
            count: new,
        }));
        true
    }

    /// Sort what was drained (stable: same-time records keep their ring order).
    pub fn sort(&mut self) {
        debug_assert_eq!(self.pos, 0);
        self.pending.sort_by_key(|r| r.time());
    }

    /// Hand out, in order, every queued record stamped at or before `t`.
    pub fn emit_upto(
        &mut self,
        t: u64,
        mut f: impl FnMut(Record) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        while let Some(r) = self.pending.get(self.pos) {
            if r.time() > t {
                break;
            }
            let r = r.clone();
            self.pos += 1;
            f(r)?;
        }
        Ok(())
    }

    /// Drop what was handed out; keep the rest for the next round.
    pub fn end_round(&mut self) {
        self.pending.drain(..self.pos);
        self.pos = 0;
    }
}

/// Uprobe item boundaries, ready to open per (task, CPU).
#[derive(Debug)]
pub(super) struct ProbeSet {
    /// The resolved begin/end probes (binary, offsets, id register, class).
    pub prepared: PreparedProbes,
    /// Event index of the begin probe in the decoder (the end probe is the next one).
    pub begin_event: u16,
}

impl ProbeSet {
    /// How site `site` of `role` is opened (every site of a role shares the decoder
    /// event: its hits mean the same boundary).
    pub fn attr_config(
        &self,
        role: ProbeRole,
        site: usize,
        clock: ClockChoice,
        inherit: bool,
        enable_on_exec: bool,
    ) -> UprobeAttrConfig {
        let r = self.probe(role, site);
        UprobeAttrConfig {
            offset: r.offset,
            ref_ctr_offset: r.ref_ctr_offset,
            ret: r.spec.ret,
            regs_user: if role == ProbeRole::Begin {
                self.prepared.id_reg_mask
            } else {
                0
            },
            clock,
            inherit,
            enable_on_exec,
        }
    }

    /// Site `site` of `role` (the first when out of range: there is always one).
    pub fn probe(&self, role: ProbeRole, site: usize) -> &ResolvedProbe {
        let sites = self.prepared.sites(role);
        sites.get(site).unwrap_or(&sites[0])
    }

    /// Number of sites of `role`.
    pub fn sites(&self, role: ProbeRole) -> usize {
        self.prepared.sites(role).len()
    }

    /// Decoder layouts of the two probe events (the same for either kind of event).
    pub fn layouts(&self, clock: ClockChoice) -> Vec<Layout> {
        [ProbeRole::Begin, ProbeRole::End]
            .iter()
            .map(|&role| {
                let ev = uprobe::ProbeEvent::Tracepoint { id: 0 };
                let a = uprobe::uprobe_attr(&ev, &self.attr_config(role, 0, clock, false, false))
                    .expect("a tracepoint attr is always built");
                Layout {
                    sample_type: a.sample_type,
                    regs_user_mask: a.sample_regs_user,
                    sample_id_all: true,
                    default_period: 1,
                    ..Layout::default()
                }
            })
            .collect()
    }

    /// Open site `site` of one probe for `pid` on `cpu`.
    pub fn open(
        &self,
        role: ProbeRole,
        site: usize,
        pid: i32,
        cpu: i32,
        cfg: UprobeAttrConfig,
    ) -> Result<std::os::fd::OwnedFd, CollectError> {
        // A uprobe PMU event's path pointer outlives the call (the kernel copies the
        // string); inherited events are tracefs events ([`uprobe::ProbeVia::for_inherit`]).
        let a = uprobe::uprobe_attr(&self.prepared.event(role, site), &cfg).ok_or_else(|| {
            CollectError::Open {
                event: format!("uprobe {}", self.probe(role, site).spec),
                hint:
                    "an inherited uprobe PMU event would make the target's clone() fail (EFAULT); \
                   inherited probes must be tracefs events"
                        .into(),
                source: io::Error::from_raw_os_error(libc::EINVAL),
            }
        })?;
        sys::perf_event_open(&a, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC)
            .map_err(|e| open_error(&e, self.probe(role, site)))
    }

    /// `TraceHeader.extra` entries describing the probes.
    pub fn header_extra(&self) -> Vec<(String, String)> {
        let mut v = vec![
            (
                "item_begin".to_string(),
                describe_sites(&self.prepared.begin),
            ),
            ("item_end".to_string(), describe_sites(&self.prepared.end)),
            (
                "item_id".to_string(),
                match &self.prepared.id_reg {
                    Some(r) => format!("register:{r}"),
                    None => "sequence".to_string(),
                },
            ),
        ];
        if let Some(c) = &self.prepared.class {
            v.push(("item_class".to_string(), c.clone()));
        }
        v
    }
}

/// Every site's definition, one per line.
fn describe_sites(sites: &[ResolvedProbe]) -> String {
    sites
        .iter()
        .map(ResolvedProbe::describe)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `--item-class-from` probes: tracefs uprobe events with a fetch-argument, opened
/// through perf as tracepoints (period 1, `PERF_SAMPLE_RAW`) next to the sampling events
/// and redirected into the same rings. Each hit becomes a `Label` marker for the
/// thread's open item (or the next one it begins), preceded by an `ItemClass`
/// declaration the first time a process shows a label.
///
/// Owned by the emitter, which the recorder drops after its perf fds: the tracefs
/// events are removed only once no perf event uses them.
#[derive(Debug)]
pub(crate) struct ClassProbes {
    /// One tracefs event per spec, in decoder order from `base`.
    events: Vec<(ClassSpec, String, TracefsUprobe)>,
    /// Decoder index of the first class event.
    pub base: u16,
    table: ClassTable,
    /// `table.dropped` already stored as `Lost { kind: ItemClasses }`.
    dropped_stored: u64,
    /// Hits whose raw record did not hold the argument.
    pub undecoded: u64,
    /// Said once, as a note: tracefs was mounted by us.
    mounted: Option<std::path::PathBuf>,
}

/// sample_type of a class probe: the uprobe fields plus the tracepoint's raw record.
pub(crate) const CLASS_SAMPLE_TYPE: u64 =
    uprobe::UPROBE_SAMPLE_TYPE | perf_event_open_sys::bindings::PERF_SAMPLE_RAW as u64;

impl ClassProbes {
    /// Resolve every spec and create its tracefs event (mounting tracefs when absent).
    /// `base` is the decoder index the first event gets. `None` without specs.
    pub fn prepare(
        specs: &[ClassSpec],
        base: usize,
    ) -> Result<Option<ClassProbes>, crate::session::RecordError> {
        if specs.is_empty() {
            return Ok(None);
        }
        let base = u16::try_from(base)
            .map_err(|_| crate::session::RecordError::Options("too many events".into()))?;
        let mut events = Vec::with_capacity(specs.len());
        let mut mounted = None;
        for spec in specs {
            // One event per site (a USDT probe inlined at several places has several).
            for resolved in uprobe::resolve_sites(&spec.probe)? {
                let fetch = spec.fetch_arg_at(&resolved)?;
                let (root, we_mounted) = crate::tracefs::ensure_mounted().map_err(|source| {
                    crate::session::RecordError::Io {
                        what: "--item-class-from needs tracefs".into(),
                        source,
                    }
                })?;
                if we_mounted {
                    mounted = Some(root.clone());
                }
                let ev = TracefsUprobe::create(&root, &resolved, spec)
                    .map_err(|e| create_error(e, &root))?;
                let desc = format!("{}:{fetch}", resolved.describe());
                events.push((spec.clone(), desc, ev));
            }
        }
        Ok(Some(ClassProbes {
            events,
            base,
            table: ClassTable::default(),
            dropped_stored: 0,
            undecoded: 0,
            mounted,
        }))
    }

    /// Number of class events, one per site (opened per CPU or task like the sampling
    /// events).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether decoder event `event` is a class probe.
    pub fn owns(&self, event: u16) -> bool {
        event >= self.base && ((event - self.base) as usize) < self.events.len()
    }

    /// The attr of class event `i`.
    pub fn attr(
        &self,
        i: usize,
        clock: ClockChoice,
        inherit: bool,
        enable_on_exec: bool,
    ) -> PerfEventAttr {
        let mut a = PerfEventAttr {
            type_: perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT,
            size: ATTR_SIZE,
            config: self.events.get(i).map_or(0, |e| e.2.id),
            sample_type: CLASS_SAMPLE_TYPE,
            ..PerfEventAttr::default()
        };
        a.sample_period = 1;
        a.set_disabled(1);
        a.set_inherit(inherit as u64);
        a.set_enable_on_exec(enable_on_exec as u64);
        a.set_sample_id_all(1);
        if clock == ClockChoice::Monotonic {
            a.set_use_clockid(1);
            a.clockid = libc::CLOCK_MONOTONIC;
        }
        a.set_watermark(1);
        a.wakeup_watermark = 0;
        a
    }

    /// Open class event `i` for `pid` (a task or -1) on `cpu`.
    pub fn open(
        &self,
        i: usize,
        pid: i32,
        cpu: i32,
        attr: &PerfEventAttr,
    ) -> Result<std::os::fd::OwnedFd, CollectError> {
        sys::perf_event_open(attr, pid, cpu, -1, sys::PERF_FLAG_FD_CLOEXEC).map_err(|e| {
            let spec = self.events.get(i).map_or(String::new(), |e| e.1.clone());
            let event = format!("--item-class-from probe {spec}");
            let source = io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0));
            match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => CollectError::Permission {
                    event,
                    paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok()),
                    hint: "tracepoint uprobes need root (CAP_SYS_ADMIN, or CAP_PERFMON with tracefs access)".into(),
                    source,
                },
                _ => CollectError::Open { event, hint: "perf_event_open of the tracefs uprobe event failed".into(), source },
            }
        })
    }

    /// Decoder layouts of the class events.
    pub fn layouts(&self) -> Vec<Layout> {
        (0..self.events.len())
            .map(|_| Layout {
                sample_type: CLASS_SAMPLE_TYPE,
                sample_id_all: true,
                default_period: 1,
                ..Layout::default()
            })
            .collect()
    }

    /// `TraceHeader.extra` entry: the definitions, one per line.
    pub fn header_extra(&self) -> Vec<(String, String)> {
        let defs: Vec<&str> = self.events.iter().map(|e| e.1.as_str()).collect();
        vec![("item_class_from".to_string(), defs.join("\n"))]
    }

    /// One-line notes for the user (tracefs mounted by us).
    pub fn notes(&self) -> Vec<String> {
        self.mounted
            .iter()
            .map(|r| {
                format!(
                    "tracefs was not mounted: mounted it at {} (for --item-class-from)",
                    r.display()
                )
            })
            .collect()
    }

    /// Records for one hit (`rec` is the raw ring record, `s` its decoded sample): an
    /// `ItemClass` declaration when the label is new for the process, then the `Label`
    /// marker; a `Lost { ItemClasses }` when the process is over its bound.
    pub fn convert(&mut self, rec: &[u8], s: &Sample, out: &mut Vec<Record>) {
        let Some(idx) = s.event.checked_sub(self.base).map(usize::from) else {
            return;
        };
        let Some((_, _, ev)) = self.events.get(idx) else {
            return;
        };
        let sl = perf_layout();
        let value = rec
            .get(tailprof_perf_abi::HEADER_LEN..)
            .and_then(|body| sl.decode(body, tailprof_perf_abi::Endian::NATIVE).ok())
            .and_then(|v| v.raw())
            .and_then(|raw| classprobe::decode_raw(&ev.layout, raw));
        let Some(value) = value else {
            // Stored as a malformed record: counted and shown like every loss.
            self.undecoded = self.undecoded.saturating_add(1);
            out.push(Record::Lost(Lost {
                time: s.time,
                cpu: s.cpu,
                event: None,
                kind: LossKind::Malformed,
                count: 1,
            }));
            return;
        };
        let label = classprobe::label_of(&value);
        let class = match self.table.id(s.pid, &label) {
            ClassId::Known(id) => id,
            ClassId::New(id) => {
                out.push(Record::ItemClass(ItemClass {
                    time: s.time,
                    pid: s.pid,
                    id,
                    name: label,
                }));
                id
            }
            ClassId::Dropped => {
                let new = self.table.dropped.saturating_sub(self.dropped_stored);
                self.dropped_stored = self.table.dropped;
                out.push(Record::Lost(Lost {
                    time: s.time,
                    cpu: s.cpu,
                    event: None,
                    kind: LossKind::ItemClasses,
                    count: new,
                }));
                return;
            }
        };
        out.push(Record::Marker(Marker {
            time: s.time,
            pid: s.pid,
            tid: s.tid,
            kind: MarkerKind::Label,
            item: Marker::UNKNOWN_ITEM,
            class,
            source: MarkerSource::Uprobe,
        }));
    }
}

/// The ABI layout every class event's records have.
fn perf_layout() -> tailprof_perf_abi::SampleLayout {
    tailprof_perf_abi::SampleLayout::new(CLASS_SAMPLE_TYPE).with_sample_id_all(true)
}

/// A tracefs event that could not be created, with the fix.
fn create_error(
    e: crate::uprobe::UprobeError,
    root: &std::path::Path,
) -> crate::session::RecordError {
    let crate::uprobe::UprobeError::Read { path, source } = e else {
        return e.into();
    };
    let fix = match source.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "run as root: writing {}/uprobe_events needs it",
            root.display()
        ),
        Some(libc::ENOENT) => {
            "does this kernel have uprobe events (CONFIG_UPROBE_EVENTS)?".to_string()
        }
        _ => "is the function's entry inside an executable segment of the binary?".to_string(),
    };
    crate::session::RecordError::Io {
        what: format!("--item-class-from: cannot create the tracefs uprobe event ({fix}; {path})"),
        source,
    }
}

fn open_error(e: &io::Error, probe: &ResolvedProbe) -> CollectError {
    let event = format!("uprobe {}", probe.spec);
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => CollectError::Permission {
            event,
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            hint: "uprobes need root (CAP_SYS_ADMIN), or CAP_PERFMON with access to the uprobe PMU".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        Some(libc::ENOENT) | Some(libc::EINVAL) => CollectError::Open {
            event,
            hint: format!(
                "the kernel refused the probe at offset {:#x} of {} (is the offset inside an executable segment, \
                 and does the kernel support uprobes on this file system?)",
                probe.offset,
                probe.path.display()
            ),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
        _ => CollectError::Open {
            event,
            hint: "perf_event_open failed".into(),
            source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
        },
    }
}

/// The symbol the marker library exports (its control block).
pub const MARKER_CONTROL_SYMBOL: &str = crate::markers::CONTROL_SYMBOL;

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::{Marker, MarkerKind};

    fn m(time: u64) -> Record {
        Record::Marker(Marker {
            time,
            kind: MarkerKind::Begin,
            ..Marker::default()
        })
    }

    #[test]
    fn record_queue_merges_by_time_and_holds_back() {
        let mut q = RecordQueue::default();
        q.pending.extend([m(30), m(10), m(20)]);
        q.sort();
        let mut got = Vec::new();
        q.emit_upto(15, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.emit_upto(20, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.end_round();
        assert_eq!(got, [10, 20]);
        assert_eq!(q.pending.len(), 1);
        q.pending.push(m(25));
        q.sort();
        q.emit_upto(u64::MAX, |r| {
            got.push(r.time());
            Ok(())
        })
        .unwrap();
        q.end_round();
        assert_eq!(got, [10, 20, 25, 30]);
        assert!(q.pending.is_empty());
    }

    #[test]
    fn malformed_counts_are_stored_once() {
        let mut q = RecordQueue::default();
        assert!(!q.store_malformed(0, 5));
        assert!(q.store_malformed(3, 5));
        assert!(!q.store_malformed(3, 6));
        assert!(q.store_malformed(10, 7));
        let counts: Vec<u64> = q
            .pending
            .iter()
            .map(|r| match r {
                Record::Lost(l) if l.kind == LossKind::Malformed => l.count,
                _ => panic!("{r:?}"),
            })
            .collect();
        assert_eq!(counts, [3, 7]);
    }

    /// A class-probe hit as the kernel writes it: header, IDENTIFIER, IP, TID, TIME, CPU,
    /// then RAW (u32 size + the tracepoint record, padded to 8 bytes).
    fn class_hit(layout: &classprobe::ArgLayout, sql: &[u8]) -> Vec<u8> {
        let mut raw = vec![0u8; layout.offset + layout.size];
        let loc = ((sql.len() as u32) << 16) | raw.len() as u32;
        raw[layout.offset..layout.offset + 4].copy_from_slice(&loc.to_ne_bytes());
        raw.extend_from_slice(sql);
        let mut body = Vec::new();
        for w in [7u64, 0x401000, (11u64 << 32) | 10, 1234, 1] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        let mut field = (raw.len() as u32).to_ne_bytes().to_vec();
        field.extend_from_slice(&raw);
        while !field.len().is_multiple_of(8) {
            field.push(0);
        }
        body.extend_from_slice(&field);
        let mut rec = Vec::new();
        rec.extend_from_slice(&tailprof_perf_abi::record_type::SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    /// Hits → `ItemClass` (first time) + `Label`; a record without the argument → a
    /// malformed-record loss. Creates a real tracefs event (root only).
    #[test]
    fn class_hits_become_declarations_and_labels() {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            tailprof_testkit::skip(tailprof_testkit::Need::Root, "needs root for tracefs");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let spec = ClassSpec::parse(&format!("{}:main:rdi", exe.display())).unwrap();
        let mut c = ClassProbes::prepare(&[spec], 5).unwrap().unwrap();
        assert!(c.owns(5) && !c.owns(4) && !c.owns(6));
        assert!(c.header_extra()[0].1.contains(":main@0x"));
        let layout = c.events[0].2.layout;
        let s = Sample {
            event: 5,
            pid: 10,
            tid: 11,
            time: 1234,
            cpu: 1,
            ..Sample::default()
        };
        let mut out = Vec::new();
        c.convert(
            &class_hit(&layout, b"SELECT 1 FROM t WHERE a = 5\0"),
            &s,
            &mut out,
        );
        c.convert(
            &class_hit(&layout, b"select 2 from t where a = 77\0"),
            &s,
            &mut out,
        );
        c.convert(&class_hit(&layout, b"x")[..20], &s, &mut out);
        let id = match &out[0] {
            Record::ItemClass(ic) => {
                assert_eq!(
                    (ic.pid, ic.name.as_str()),
                    (10, "select ? from t where a = ?")
                );
                ic.id
            }
            r => panic!("{r:?}"),
        };
        for r in [&out[1], &out[2]] {
            match r {
                Record::Marker(m) => {
                    assert_eq!(
                        (m.kind, m.class, m.item, m.tid, m.source),
                        (
                            MarkerKind::Label,
                            id,
                            Marker::UNKNOWN_ITEM,
                            11,
                            MarkerSource::Uprobe
                        )
                    )
                }
                r => panic!("{r:?}"),
            }
        }
        assert!(
            matches!(&out[3], Record::Lost(l) if l.kind == LossKind::Malformed && l.count == 1),
            "{:?}",
            out.get(3)
        );
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn item_reg_names() {
        assert_eq!(item_reg_mask("r13").unwrap(), (1 << 21, "r13".to_string()));
        assert!(item_reg_mask("r13,rdi").is_err());
        assert!(item_reg_mask("eax").is_err());
    }

    /// Issue 19, finding 3: a file whose scan never ends (a 16 GiB `.strtab`, or a read
    /// that hangs) held the drain loop for minutes, and SIGTERM with it. Now the drain
    /// loop only hands the file over and polls: nothing it calls waits for the scan, files
    /// beyond the worker's queue are counted, and stopping waits at most
    /// `SCAN_STOP_WITHIN` (bounds asserted generously; the point is that they hold).
    #[test]
    fn finding_3_drain_loop_does_not_wait_for_a_scan() {
        fn hangs(_: &std::fs::File, _: bool, _: &std::sync::atomic::AtomicBool) -> Option<bool> {
            std::thread::sleep(std::time::Duration::from_secs(120)); // ignores the stop flag
            Some(true)
        }
        let bound = std::time::Duration::from_secs(20);
        let mut f = MarkerFollower {
            worker: Some(ScanWorker::start(hangs).unwrap()),
            ..Default::default()
        };
        let exe = || std::fs::File::open("/proc/self/exe").unwrap();
        let t0 = std::time::Instant::now();
        let files = MAX_SCAN_PENDING as u64 + 20;
        for i in 0..files {
            f.scan_file((1, i), None, 1, exe(), true);
            f.poll(); // the drain loop's round: never waits
        }
        assert!(
            t0.elapsed() < bound,
            "handing over {files} files took {:?}",
            t0.elapsed()
        );
        assert!(f.queue.is_empty() && f.files.is_empty());
        // At most MAX_SCAN_PENDING (of one owner: MAX_SCAN_PENDING_PER_OWNER) handed over,
        // the rest counted (retried at their next MMAP).
        assert!(
            f.scan_dropped >= files - 1 - MAX_SCAN_PENDING as u64,
            "{}",
            f.scan_dropped
        );
        let waiting = f.scanning.len() as u64;
        assert_eq!(waiting + f.scan_dropped, files);
        let t1 = std::time::Instant::now();
        f.stop();
        assert!(
            t1.elapsed() < SCAN_STOP_WITHIN + bound,
            "stop took {:?}",
            t1.elapsed()
        );
        assert_eq!(f.scan_dropped, files, "every file not answered is counted");
        assert!(f.worker.is_none() && f.scanning.is_empty());
    }

    /// The real worker (`file_defines_until`) answers: not marked, remembered, and the
    /// drain loop learns it through `poll`.
    #[test]
    fn finding_3_worker_answers_and_the_drain_loop_learns_it() {
        let mut f = MarkerFollower::default();
        f.scan_file(
            (7, 7),
            None,
            1,
            std::fs::File::open("/proc/self/exe").unwrap(),
            true,
        );
        let t0 = std::time::Instant::now();
        while !f.files.contains_key(&(7, 7)) && t0.elapsed() < std::time::Duration::from_secs(60) {
            f.poll();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            f.files.get(&(7, 7)),
            Some(&(None, false)),
            "the test binary has no control block"
        );
        assert!(f.queue.is_empty() && f.scanning.is_empty());
        f.stop();
        assert_eq!(f.scan_dropped, 0);
    }

    /// Issue 19, fairness: one user creating many slow files filled the worker's queue
    /// (64) and every other user's new file was counted as dropped. Now one owner (uid of
    /// the opened file) has at most a quarter of the queue: after its flood, a file of
    /// another owner is still handed to the worker.
    #[test]
    fn fairness_one_owner_cannot_fill_the_follower_queue() {
        use std::os::unix::fs::MetadataExt;
        fn slow(_: &std::fs::File, _: bool, stop: &std::sync::atomic::AtomicBool) -> Option<bool> {
            // A scan that takes until it is told to stop (checked like a real scan's reads).
            let t0 = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && t0.elapsed().as_secs() < 120 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            None
        }
        let flooder = std::fs::metadata("/proc/self/exe").unwrap().uid();
        // Another owner's file: a temporary file, given to another uid when root.
        let other_path =
            std::env::temp_dir().join(format!("tailprof-follow-fairness-{}", std::process::id()));
        std::fs::write(&other_path, b"\x7fELF").unwrap();
        if tailprof_testkit::is_root() {
            std::os::unix::fs::chown(&other_path, Some(flooder.wrapping_add(1)), None).unwrap();
        }
        let other = std::fs::File::open(&other_path).unwrap();
        let _ = std::fs::remove_file(&other_path); // the open file is enough
        if other.metadata().unwrap().uid() == flooder {
            tailprof_testkit::skip(
                tailprof_testkit::Need::Root,
                "needs root (or a test binary owned by another user) for a file of a second owner",
            );
            return;
        }
        let mut f = MarkerFollower {
            worker: Some(ScanWorker::start(slow).unwrap()),
            ..Default::default()
        };
        let exe = || std::fs::File::open("/proc/self/exe").unwrap();
        let flood = MAX_SCAN_PENDING as u64 * 2;
        for i in 0..flood {
            f.scan_file((1, i), None, 1, exe(), true);
            f.poll();
        }
        let flooders = f.scanning.len() as u64;
        assert_eq!(
            flooders, MAX_SCAN_PENDING_PER_OWNER as u64,
            "one owner holds a quarter of the queue"
        );
        assert_eq!(
            f.scan_dropped,
            flood - flooders,
            "the rest of the flood is counted"
        );
        f.scan_file((2, 1), None, 2, other, true);
        assert!(
            f.scanning.contains_key(&(2, 1)),
            "another owner's file is still handed to the worker"
        );
        assert_eq!(
            f.scan_dropped,
            flood - flooders,
            "and not counted as dropped"
        );
        f.stop();
        assert_eq!(
            f.scan_dropped,
            flood + 1,
            "every file not answered is counted"
        );
        assert!(f.scanning.is_empty() && f.scanning_per_owner.is_empty());
    }
}
