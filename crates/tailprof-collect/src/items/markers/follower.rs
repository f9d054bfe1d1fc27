//! Attaching marked processes that start after the recording began ([`MarkerFollower`]).

use std::io;

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
/// Executable file mappings of processes running at the start (`-a`, the agent) waiting
/// to be looked at ([`MarkerFollower::saw_running`]) at most; more are counted in
/// `scan_dropped`.
pub const MAX_RUNNING_BACKLOG: usize = 16384;
/// Files of the start-up backlog handed to the worker at once at most (half of one
/// owner's share: files mapped meanwhile still get a turn).
const RUNNING_IN_FLIGHT: usize = MAX_SCAN_PENDING_PER_OWNER / 2;
/// Entries of the start-up backlog looked at per [`MarkerFollower::poll`] at most (each
/// a cache look-up or an open of the mapped file).
const RUNNING_PER_POLL: usize = 256;
/// Other processes remembered per file being looked at (more: counted in `scan_dropped`).
const MAX_WAITING_PER_FILE: usize = 64;
/// A symbol only a Python runtime defines (the `python3.X` executable or `libpython`,
/// in `.dynsym`): a process mapping such a file is watched for a control memfd.
pub const PYTHON_RUNTIME_SYMBOL: &str = "Py_BytesMain";
/// How often a Python process that started while recording is looked at for its control
/// memfd (the `tailprof_markers` module creates it at import), by how long it has been
/// watched: (for this long, every): once a second for 30 s, then every 10 s until 10 min.
/// After the last phase, every [`PYTHON_WATCH_THEN`] for as long as the process lives
/// (servers import lazily and run for months). See [`WatchSchedule`].
pub const PYTHON_WATCH_PHASES: [(std::time::Duration, std::time::Duration); 2] = [
    (std::time::Duration::from_secs(30), std::time::Duration::from_secs(1)),
    (std::time::Duration::from_secs(600), std::time::Duration::from_secs(10)),
];
/// How often a Python process is looked at after [`PYTHON_WATCH_PHASES`].
pub const PYTHON_WATCH_THEN: std::time::Duration = std::time::Duration::from_secs(60);
/// Python processes watched at once at most (more: counted in `scan_dropped` and
/// `python_not_watched`). A look is one read of `/proc/PID/maps` by the worker thread
/// (docs/MARKERS.md gives its measured cost); at [`PYTHON_WATCH_THEN`], 256 processes
/// cost about 4 reads a second.
pub const MAX_PYTHON_WATCHED: usize = 256;
/// Internal test knob (not a user option): the Python watch schedule in milliseconds,
/// `EVERY:UNTIL,...[,THEN]` (e.g. `100:1000,300`: every 100 ms for the first second,
/// then every 300 ms; without `THEN` the watch ends after the last phase), so the tests
/// of the later phases need not wait 30 s. Ignored when malformed.
pub const PYTHON_WATCH_ENV: &str = "TAILPROF_TEST_PYTHON_WATCH";

/// When a watched Python process is looked at next ([`PYTHON_WATCH_PHASES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSchedule {
    /// (until this long after the watch began, look every), in order.
    pub phases: Vec<(std::time::Duration, std::time::Duration)>,
    /// Then every this long, as long as the process lives (`None`: stop watching).
    pub then: Option<std::time::Duration>,
}

impl Default for WatchSchedule {
    fn default() -> Self {
        WatchSchedule { phases: PYTHON_WATCH_PHASES.to_vec(), then: Some(PYTHON_WATCH_THEN) }
    }
}

impl WatchSchedule {
    /// The default, or [`PYTHON_WATCH_ENV`]'s when set and well formed.
    pub fn from_env() -> Self {
        std::env::var(PYTHON_WATCH_ENV).ok().and_then(|v| Self::parse(&v)).unwrap_or_default()
    }

    /// `EVERY:UNTIL,...[,THEN]` in milliseconds (see [`PYTHON_WATCH_ENV`]).
    pub fn parse(s: &str) -> Option<Self> {
        let ms = |x: &str| x.trim().parse::<u64>().ok().filter(|&v| v > 0).map(std::time::Duration::from_millis);
        let mut out = WatchSchedule { phases: Vec::new(), then: None };
        let parts: Vec<&str> = s.split(',').collect();
        for (i, p) in parts.iter().enumerate() {
            match p.split_once(':') {
                Some((every, until)) if out.then.is_none() => out.phases.push((ms(until)?, ms(every)?)),
                None if i + 1 == parts.len() => out.then = Some(ms(p)?),
                _ => return None,
            }
        }
        Some(out)
    }

    /// The next look at a process watched since `since`, after a look at `now`; `None`:
    /// the watch is over.
    pub fn next(&self, since: std::time::Instant, now: std::time::Instant) -> Option<std::time::Instant> {
        let age = now.saturating_duration_since(since);
        match self.phases.iter().find(|(until, _)| age < *until) {
            Some(&(_, every)) => {
                let next = now + every;
                let end = self.phases.last().map_or(std::time::Duration::ZERO, |p| p.0);
                (self.then.is_some() || next < since + end).then_some(next)
            }
            None => self.then.map(|every| now + every),
        }
    }
}
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
/// ([`crate::items::markers::file_defines_until`]). The drain loop never scans (issue 19,
/// finding 3: a 16 GiB `.strtab` held it for 173 s): at most [`MAX_SCAN_PENDING`] jobs
/// wait, at most [`MAX_SCAN_PENDING_PER_OWNER`] files of one owner (more are counted and
/// retried at the file's next MMAP), and answers come back
/// through a channel [`MarkerFollower::poll`] reads without blocking. The answer is
/// remembered (at most [`MAX_FOLLOW_FILES`] files). For a process whose file defines the
/// symbol the worker also looks up its control blocks
/// ([`crate::items::markers::find_symbol_in_process_until`]); the recorder attaches it between
/// rounds ([`crate::items::markers::MarkerCollector::attach_found`], which validates the control
/// block before writing anything). Stopping ([`MarkerFollower::stop`]) tells a scan in
/// progress to give up at its next read and waits for it at most [`SCAN_STOP_WITHIN`];
/// jobs not done are counted. Markers a process wrote before it was attached are not
/// recorded (the library writes none while off, and keeps no count of them): the note
/// says how many processes were attached late.
///
/// Python programs publish their control block in a memfd (docs/MARKERS.md), a data
/// mapping no MMAP2 record shows. So a process that maps a Python runtime (a file defining
/// [`PYTHON_RUNTIME_SYMBOL`], found by the same worker scan, or a process running at the
/// start that maps one) is watched on the [`WatchSchedule`] (every second at first, less
/// often later, for as long as it lives): the worker looks for its control memfd
/// ([`crate::items::markers::find_memfd_controls`], with its checks); found (or refused),
/// the process is queued for attaching like a marked one. At most [`MAX_PYTHON_WATCHED`]
/// processes are watched at once.
#[derive(Debug, Default)]
pub(crate) struct MarkerFollower {
    /// (device, inode) → (build-id, defines the control symbol, is a Python runtime).
    files: std::collections::HashMap<(u64, u64), FileAnswer>,
    /// Files handed to the worker, not answered yet: their owner (uid) and the other
    /// processes that mapped them meanwhile (at most [`MAX_WAITING_PER_FILE`] each).
    scanning: std::collections::HashMap<(u64, u64), (u32, Vec<u32>)>,
    /// Files in `scanning` by owner (at most [`MAX_SCAN_PENDING_PER_OWNER`] each).
    scanning_per_owner: std::collections::HashMap<u32, usize>,
    /// The worker (started at the first job).
    worker: Option<ScanWorker>,
    /// The start-up backlog: (process, executable file mapping, known to lack the control
    /// symbol) ([`MarkerFollower::saw_running`]).
    running: std::collections::VecDeque<(u32, crate::procfs::MapsEntry, bool)>,
    /// Files of the backlog handed to the worker and not answered yet.
    running_scans: std::collections::HashSet<(u64, u64)>,
    running_in_flight: usize,
    /// Processes to attach, with their control block addresses (looked up by the worker).
    pub queue: Vec<(u32, Found)>,
    /// Python processes watched for a control memfd: (watched since, next look).
    python_watch: std::collections::HashMap<u32, (std::time::Instant, std::time::Instant)>,
    /// When the watched processes are looked at ([`WatchSchedule::from_env`] when the
    /// follower starts).
    pub python_schedule: WatchSchedule,
    /// When the watched processes were last looked at, and memfd lookups not answered yet.
    python_round: Option<std::time::Instant>,
    python_in_flight: usize,
    /// Python processes watched (in all), looks at their maps, and processes not watched
    /// because [`MAX_PYTHON_WATCHED`] were.
    pub python_watched: u64,
    pub python_looks: u64,
    pub python_not_watched: u64,
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

/// A process's control blocks as the worker found them: `tailprof_control` symbol
/// addresses, and control memfd mappings (Python).
#[derive(Debug)]
pub(crate) struct Found {
    pub symbols: io::Result<Vec<u64>>,
    pub memfd: crate::items::markers::MemfdControls,
}

impl From<io::Result<Vec<u64>>> for Found {
    fn from(symbols: io::Result<Vec<u64>>) -> Found {
        Found { symbols, memfd: Default::default() }
    }
}

/// What the worker found about one file: (build-id, defines the control symbol, is a
/// Python runtime).
type FileAnswer = (Option<Vec<u8>>, bool, bool);

/// What the worker checks in a file.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// The control symbol (`symtab`: in `.symtab` too), then, when absent, the Python runtime.
    Both { symtab: bool },
    /// Only the Python runtime (the control symbol is known to be absent).
    PythonOnly,
}

/// What [`MarkerFollower::look_at`] did with a file mapping of the start-up backlog.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Done,
    /// Not now (the file is being looked at, or the worker's queue is full): try again.
    Busy,
}

/// What the follower's worker is asked.
#[derive(Debug)]
enum ScanJob {
    /// Does this file define the control symbol ([`Check`])? Then look up the control
    /// blocks of `pid`. Else, is it a Python runtime?
    File { key: (u64, u64), build_id: Option<Vec<u8>>, pid: u32, file: std::fs::File, check: Check },
    /// Look up the control blocks of `pid` (it maps a file known to define the symbol).
    Process { pid: u32 },
    /// Look for the control memfd of `pid` (a watched Python process).
    Memfd { pid: u32 },
}

/// What the worker answers.
#[derive(Debug)]
enum ScanDone {
    /// `marked`: `None` when the scan was stopped (not remembered). `found`: the process's
    /// control blocks when the file defines the symbol. `python`: the file is a Python
    /// runtime.
    File {
        key: (u64, u64),
        build_id: Option<Vec<u8>>,
        marked: Option<bool>,
        python: bool,
        pid: u32,
        found: Option<io::Result<Vec<u64>>>,
    },
    Process {
        pid: u32,
        found: io::Result<Vec<u64>>,
    },
    Memfd {
        pid: u32,
        found: io::Result<crate::items::markers::MemfdControls>,
    },
}

/// The check a worker runs on a file (`file_defines_until`; tests put a slow one).
type FileCheck = fn(&std::fs::File, bool, &std::sync::atomic::AtomicBool) -> Option<bool>;

fn check_control_symbol(f: &std::fs::File, symtab: bool, stop: &std::sync::atomic::AtomicBool) -> Option<bool> {
    crate::items::markers::file_defines_until(f, crate::items::markers::CONTROL_SYMBOL, symtab, stop)
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
        std::thread::Builder::new().name("tailprof-follow".into()).spawn(move || {
            let lookup = |pid| crate::items::markers::find_symbol_in_process_until(pid, crate::items::markers::CONTROL_SYMBOL, &st);
            while let Ok(job) = rx.recv() {
                let answer = match job {
                    ScanJob::File { key, build_id, pid, file, check: what } => {
                        let marked = match what {
                            Check::Both { symtab } => check(&file, symtab, &st),
                            Check::PythonOnly => Some(false),
                        };
                        let python = marked == Some(false)
                            && crate::items::markers::file_defines_until(&file, PYTHON_RUNTIME_SYMBOL, false, &st) == Some(true);
                        drop(file);
                        let found = (marked == Some(true)).then(|| lookup(pid));
                        ScanDone::File { key, build_id, marked, python, pid, found }
                    }
                    ScanJob::Process { pid } => ScanDone::Process { pid, found: lookup(pid) },
                    ScanJob::Memfd { pid } => ScanDone::Memfd { pid, found: crate::items::markers::find_memfd_controls(pid) },
                };
                if tx.send(answer).is_err() {
                    return;
                }
            }
        })?;
        Ok(ScanWorker { jobs: Some(jobs), done, stop, in_flight: 0 })
    }

    /// Queue a job without waiting; `false` when the queue is full (or the worker gone).
    fn send(&mut self, job: ScanJob) -> bool {
        let ok = self.jobs.as_ref().is_some_and(|j| j.try_send(job).is_ok());
        self.in_flight += u64::from(ok);
        ok
    }
}

impl MarkerFollower {
    /// A follower with the Python watch schedule of [`WatchSchedule::from_env`].
    pub fn new() -> Self {
        MarkerFollower { python_schedule: WatchSchedule::from_env(), ..Default::default() }
    }

    /// An executable file mapping (MMAP2) was written: queue its process when the file
    /// defines the marker control symbol (answered later, through [`MarkerFollower::poll`]).
    pub fn saw_mmap(&mut self, m: &tailprof_format::Mmap, dev: u64, inode: u64) {
        if m.prot & libc::PROT_EXEC as u32 == 0 || inode == 0 || !m.path.starts_with('/') || m.pid == 0 {
            return;
        }
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
        self.look_at(m.pid, &e, Some(m.build_id.clone()), false);
    }

    /// `-a` and the agent at the start: a running process that has no control block yet
    /// (`entries`: its maps, just read by the start-up attach). Its executable file
    /// mappings wait in a bounded backlog ([`MAX_RUNNING_BACKLOG`]) and are handed to the
    /// worker a few at a time from [`MarkerFollower::poll`] (a running process maps no file
    /// again, so they wait their turn rather than being dropped); a file already answered
    /// (cache by device and inode) is not scanned again. When one is a Python runtime the
    /// process is watched for its control memfd like one that started while recording.
    /// `unmarked`: the start-up attach just looked at every one of these files for the
    /// control symbol (and found none), so the worker only checks for a Python runtime.
    pub fn saw_running(&mut self, pid: u32, entries: &[crate::procfs::MapsEntry], unmarked: bool) {
        let mut seen: Vec<(u64, u64)> = Vec::new();
        for e in entries {
            let key = (e.dev, e.inode);
            if e.prot & libc::PROT_EXEC as u32 == 0
                || e.inode == 0
                || !e.path.starts_with('/')
                || e.path.starts_with("/dev/")
                || seen.contains(&key)
            {
                continue;
            }
            seen.push(key);
            if self.running.len() >= MAX_RUNNING_BACKLOG {
                self.scan_dropped += 1;
                continue;
            }
            self.running.push_back((pid, e.clone(), unmarked));
        }
        self.feed_running();
    }

    /// Hand the next files of the start-up backlog to the worker (at most
    /// [`RUNNING_PER_POLL`] looked at per call, at most [`RUNNING_IN_FLIGHT`] scans of them
    /// at once); stops at a file being looked at (its answer serves the rest).
    fn feed_running(&mut self) {
        for _ in 0..RUNNING_PER_POLL {
            let Some((pid, e, unmarked)) = self.running.pop_front() else { return };
            if self.look_at(pid, &e, None, unmarked) == Look::Busy {
                self.running.push_front((pid, e, unmarked));
                return;
            }
        }
    }

    /// One executable file mapping of `pid`: known file (`build_id` equal; `None`: a
    /// running process's mapping, read from its maps just now, any), being looked at, or
    /// opened and handed to the worker. `running`: from the start-up backlog, where a
    /// file being looked at or a full queue answer [`Look::Busy`] (tried again later)
    /// instead of being counted as dropped; `unmarked` (with `running`): the control symbol
    /// is known to be absent.
    fn look_at(&mut self, pid: u32, e: &crate::procfs::MapsEntry, build_id: Option<Option<Vec<u8>>>, unmarked: bool) -> Look {
        let running = build_id.is_none();
        let key = (e.dev, e.inode);
        match self.files.get(&key) {
            Some((id, marked, python)) if build_id.as_ref().is_none_or(|b| b == id) => {
                if *marked && !self.queue.iter().any(|(p, _)| *p == pid) {
                    self.send(ScanJob::Process { pid });
                } else if *python {
                    self.watch_python(pid);
                }
            }
            _ if self.scanning.contains_key(&key) => {
                if running {
                    return Look::Busy; // its answer comes first; then the cache answers
                }
                // Being looked at: this process is looked up when the answer comes.
                let Some((_, waiting)) = self.scanning.get_mut(&key) else {
                    return Look::Done;
                };
                if waiting.len() >= MAX_WAITING_PER_FILE {
                    self.scan_dropped += 1;
                } else if pid != 0 && !waiting.contains(&pid) {
                    waiting.push(pid);
                }
            }
            _ => {
                if running && self.running_in_flight >= RUNNING_IN_FLIGHT {
                    return Look::Busy;
                }
                let Ok(file) = crate::procfs::open_mapped_file(pid, e) else {
                    // Gone already (or not the file it was): not remembered.
                    return Look::Done;
                };
                // Libraries export the block in .dynsym; an executable may have it only in
                // .symtab (not loaded, possibly big: read only for non-libraries).
                let library = e.path.rsplit('/').next().is_some_and(|n| n.contains(".so"));
                let check = if running && unmarked { Check::PythonOnly } else { Check::Both { symtab: !library } };
                if running && !self.can_scan(&file) {
                    return Look::Busy;
                }
                if self.scan_file_as(key, build_id.flatten(), pid, file, check) && running {
                    self.running_in_flight += 1;
                    self.running_scans.insert(key);
                }
            }
        }
        Look::Done
    }

    /// Hand one opened file to the worker (counted as dropped when its queue is full or
    /// its owner already has [`MAX_SCAN_PENDING_PER_OWNER`] files waiting).
    #[cfg(test)]
    fn scan_file(&mut self, key: (u64, u64), build_id: Option<Vec<u8>>, pid: u32, file: std::fs::File, symtab: bool) {
        self.scan_file_as(key, build_id, pid, file, Check::Both { symtab });
    }

    /// The owner of an opened file (fstat: nothing read); unknown owners share one count.
    fn owner(file: &std::fs::File) -> u32 {
        file.metadata().map_or(u32::MAX, |m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        })
    }

    /// Whether [`MarkerFollower::scan_file_as`] would hand `file` over now (its owner's
    /// share and the worker's queue have room).
    fn can_scan(&self, file: &std::fs::File) -> bool {
        let mine = self.scanning_per_owner.get(&Self::owner(file)).copied().unwrap_or(0);
        let queued = self.worker.as_ref().map_or(0, |w| w.in_flight);
        mine < MAX_SCAN_PENDING_PER_OWNER && queued < MAX_SCAN_PENDING as u64
    }

    /// [`MarkerFollower::scan_file`] with the checks to run; whether it was handed over.
    fn scan_file_as(&mut self, key: (u64, u64), build_id: Option<Vec<u8>>, pid: u32, file: std::fs::File, check: Check) -> bool {
        let owner = Self::owner(&file);
        let mine = self.scanning_per_owner.get(&owner).copied().unwrap_or(0);
        if mine >= MAX_SCAN_PENDING_PER_OWNER {
            self.scan_dropped += 1; // retried at the file's next MMAP
            return false;
        }
        if self.send(ScanJob::File { key, build_id, pid, file, check }) {
            self.scanning.insert(key, (owner, Vec::new()));
            *self.scanning_per_owner.entry(owner).or_default() += 1;
            return true;
        }
        false
    }

    /// A file handed to the worker is answered (or given up): no longer counted for its
    /// owner; returns the processes that waited for it.
    fn scanned(&mut self, key: &(u64, u64)) -> Vec<u32> {
        if self.running_scans.remove(key) {
            self.running_in_flight = self.running_in_flight.saturating_sub(1);
        }
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

    /// Watch a Python process for its control memfd (module docs).
    fn watch_python(&mut self, pid: u32) {
        if self.python_watch.contains_key(&pid) {
            return;
        }
        if self.python_watch.len() >= MAX_PYTHON_WATCHED {
            self.scan_dropped += 1;
            self.python_not_watched += 1;
            return;
        }
        let now = std::time::Instant::now();
        self.python_watched += 1;
        self.python_watch.insert(pid, (now, now));
    }

    /// Ask the worker to look for the control memfds of the watched processes that are
    /// due ([`WatchSchedule`]; a new round only when the last one is answered, at most
    /// every 100 ms); forget those whose watch is over.
    fn python_round(&mut self) {
        let now = std::time::Instant::now();
        if self.python_watch.is_empty()
            || self.python_in_flight > 0
            || self.python_round.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_millis(100))
        {
            return;
        }
        self.python_round = Some(now);
        let due: Vec<u32> = self.python_watch.iter().filter(|(_, (_, next))| *next <= now).map(|(&pid, _)| pid).collect();
        for pid in due {
            let Some(&(since, _)) = self.python_watch.get(&pid) else { continue };
            match self.python_schedule.next(since, now) {
                Some(next) => {
                    self.python_watch.insert(pid, (since, next));
                }
                None => {
                    self.python_watch.remove(&pid);
                }
            }
            if self.send(ScanJob::Memfd { pid }) {
                self.python_in_flight += 1;
                self.python_looks += 1;
            }
        }
    }

    fn send(&mut self, job: ScanJob) -> bool {
        if self.worker.is_none() {
            match ScanWorker::start(check_control_symbol) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    self.first_error.get_or_insert(format!("cannot start the marker follower's thread: {e}"));
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
    /// processes for [`crate::items::markers::MarkerCollector::attach_found`].
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
                ScanDone::File { key, build_id, marked, python, pid, found } => {
                    let waiting = self.scanned(&key);
                    let Some(marked) = marked else {
                        self.scan_dropped += 1;
                        continue;
                    };
                    if self.files.len() >= MAX_FOLLOW_FILES {
                        self.files.clear();
                    }
                    self.files.insert(key, (build_id, marked, python));
                    if marked {
                        for p in waiting.into_iter().filter(|&p| p != pid) {
                            self.send(ScanJob::Process { pid: p });
                        }
                    } else if python {
                        for p in waiting.into_iter().chain([pid]) {
                            self.watch_python(p);
                        }
                    }
                    match found {
                        Some(found) => (pid, Found::from(found)),
                        None => continue,
                    }
                }
                ScanDone::Process { pid, found } => (pid, Found::from(found)),
                ScanDone::Memfd { pid, found } => {
                    self.python_in_flight = self.python_in_flight.saturating_sub(1);
                    match found {
                        // Found or refused: attach (or say why not), watch no more.
                        Ok(m) if !m.addrs.is_empty() || !m.refused.is_empty() => {
                            self.python_watch.remove(&pid);
                            (pid, Found { symbols: Ok(Vec::new()), memfd: m })
                        }
                        Ok(_) => continue, // not yet imported: looked at again next round
                        Err(_) => {
                            self.python_watch.remove(&pid); // gone
                            continue;
                        }
                    }
                }
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
        self.feed_running();
        self.python_round();
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
        let waiting: usize = self.scanning.drain().map(|(_, (_, pids))| pids.len()).sum::<usize>() + self.running.len();
        self.running.clear();
        self.running_scans.clear();
        self.running_in_flight = 0;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python program that imports `tailprof_markers` more than 30 s after it started
    /// was never attached: its watch ended at 30 s. Now (fake clock) the default schedule
    /// looks once a second for 30 s, every 10 s until 10 min, then every minute for as
    /// long as the process lives; a schedule without `then` ends after its last phase.
    #[test]
    fn python_watch_backs_off_and_never_ends() {
        let t0 = std::time::Instant::now();
        let s = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        let looks = |sched: &WatchSchedule, until_s: u64| {
            let (mut at, mut n, mut last) = (t0, 0u64, t0);
            while at <= s(until_s) {
                n += 1;
                last = at;
                match sched.next(t0, at) {
                    Some(next) => at = next,
                    None => break,
                }
            }
            (n, last.duration_since(t0).as_secs())
        };
        let d = WatchSchedule::default();
        assert_eq!(looks(&d, 29), (30, 29), "once a second for 30 s");
        assert_eq!(looks(&d, 599).0, 30 + 57, "then every 10 s until 10 min");
        // A year later: still watched, once a minute after the first 10 minutes.
        let year = 365 * 24 * 3600;
        let (n, last) = looks(&d, year);
        assert_eq!(n, 30 + 57 + (year - 600) / 60 + 1, "then every minute, forever");
        assert!(last > year - 60);
        // The test knob's format; without THEN the watch ends (the old behaviour).
        let k = WatchSchedule::parse("100:1000,300").unwrap();
        let ms = std::time::Duration::from_millis;
        assert_eq!(k, WatchSchedule { phases: vec![(ms(1000), ms(100))], then: Some(ms(300)) });
        assert_eq!(k.next(t0, t0 + ms(950)), Some(t0 + ms(1050)));
        assert_eq!(k.next(t0, t0 + ms(5000)), Some(t0 + ms(5300)));
        let once = WatchSchedule::parse("1000:30000").unwrap();
        assert_eq!(once.then, None);
        assert_eq!(looks(&once, 3600), (30, 29), "ends after 30 s");
        for bad in ["", "x", "100:", "100:1000,300,400", "300,100:1000", "0:100", "100:1000:5"] {
            assert_eq!(WatchSchedule::parse(bad), None, "{bad:?}");
        }
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
        let mut f = MarkerFollower { worker: Some(ScanWorker::start(hangs).unwrap()), ..Default::default() };
        let exe = || std::fs::File::open("/proc/self/exe").unwrap();
        let t0 = std::time::Instant::now();
        let files = MAX_SCAN_PENDING as u64 + 20;
        for i in 0..files {
            f.scan_file((1, i), None, 1, exe(), true);
            f.poll(); // the drain loop's round: never waits
        }
        assert!(t0.elapsed() < bound, "handing over {files} files took {:?}", t0.elapsed());
        assert!(f.queue.is_empty() && f.files.is_empty());
        // At most MAX_SCAN_PENDING (of one owner: MAX_SCAN_PENDING_PER_OWNER) handed over,
        // the rest counted (retried at their next MMAP).
        assert!(f.scan_dropped >= files - 1 - MAX_SCAN_PENDING as u64, "{}", f.scan_dropped);
        let waiting = f.scanning.len() as u64;
        assert_eq!(waiting + f.scan_dropped, files);
        let t1 = std::time::Instant::now();
        f.stop();
        assert!(t1.elapsed() < SCAN_STOP_WITHIN + bound, "stop took {:?}", t1.elapsed());
        assert_eq!(f.scan_dropped, files, "every file not answered is counted");
        assert!(f.worker.is_none() && f.scanning.is_empty());
    }

    /// The real worker (`file_defines_until`) answers: not marked, remembered, and the
    /// drain loop learns it through `poll`.
    #[test]
    fn finding_3_worker_answers_and_the_drain_loop_learns_it() {
        let mut f = MarkerFollower::default();
        f.scan_file((7, 7), None, 1, std::fs::File::open("/proc/self/exe").unwrap(), true);
        let t0 = std::time::Instant::now();
        while !f.files.contains_key(&(7, 7)) && t0.elapsed() < std::time::Duration::from_secs(60) {
            f.poll();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(f.files.get(&(7, 7)), Some(&(None, false, false)), "the test binary has no control block and is no Python runtime");
        assert!(f.queue.is_empty() && f.scanning.is_empty());
        f.stop();
        assert_eq!(f.scan_dropped, 0);
    }

    /// Python processes running at the start: the start-up backlog hands each executable
    /// file of a running process to the worker once, however many processes map it
    /// (the cache by device and inode), never drops one for a busy queue, and with
    /// `unmarked` does not look for the control symbol again.
    #[test]
    fn running_processes_files_are_scanned_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static CHECKS: AtomicUsize = AtomicUsize::new(0);
        fn counting(f: &std::fs::File, symtab: bool, stop: &std::sync::atomic::AtomicBool) -> Option<bool> {
            CHECKS.fetch_add(1, Ordering::Relaxed);
            check_control_symbol(f, symtab, stop)
        }
        let me = std::process::id();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let entries: Vec<crate::procfs::MapsEntry> = maps.lines().filter_map(crate::procfs::parse_maps_line).collect();
        let mut files: Vec<(u64, u64)> = entries
            .iter()
            .filter(|e| e.prot & libc::PROT_EXEC as u32 != 0 && e.inode != 0 && e.path.starts_with('/') && !e.path.starts_with("/dev/"))
            .map(|e| (e.dev, e.inode))
            .collect();
        files.sort_unstable();
        files.dedup();
        assert!(!files.is_empty());
        for unmarked in [false, true] {
            CHECKS.store(0, Ordering::Relaxed);
            let mut f = MarkerFollower { worker: Some(ScanWorker::start(counting).unwrap()), ..Default::default() };
            // "Three processes" mapping the same files (this one, three times).
            for _ in 0..3 {
                f.saw_running(me, &entries, unmarked);
            }
            let t0 = std::time::Instant::now();
            while (!f.running.is_empty() || !f.scanning.is_empty()) && t0.elapsed() < std::time::Duration::from_secs(60) {
                f.poll();
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert!(f.running.is_empty() && f.scanning.is_empty() && f.running_in_flight == 0);
            for k in &files {
                assert!(f.files.contains_key(k), "{k:?} answered");
            }
            let want = if unmarked { 0 } else { files.len() };
            assert_eq!(CHECKS.load(Ordering::Relaxed), want, "control symbol checks (unmarked: {unmarked})");
            assert_eq!(f.scan_dropped, 0, "nothing dropped");
            assert_eq!(f.python_watched, 0, "the test binary maps no Python runtime");
            f.stop();
        }
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
        let other_path = std::env::temp_dir().join(format!("tailprof-follow-fairness-{}", std::process::id()));
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
        let mut f = MarkerFollower { worker: Some(ScanWorker::start(slow).unwrap()), ..Default::default() };
        let exe = || std::fs::File::open("/proc/self/exe").unwrap();
        let flood = MAX_SCAN_PENDING as u64 * 2;
        for i in 0..flood {
            f.scan_file((1, i), None, 1, exe(), true);
            f.poll();
        }
        let flooders = f.scanning.len() as u64;
        assert_eq!(flooders, MAX_SCAN_PENDING_PER_OWNER as u64, "one owner holds a quarter of the queue");
        assert_eq!(f.scan_dropped, flood - flooders, "the rest of the flood is counted");
        f.scan_file((2, 1), None, 2, other, true);
        assert!(f.scanning.contains_key(&(2, 1)), "another owner's file is still handed to the worker");
        assert_eq!(f.scan_dropped, flood - flooders, "and not counted as dropped");
        f.stop();
        assert_eq!(f.scan_dropped, flood + 1, "every file not answered is counted");
        assert!(f.scanning.is_empty() && f.scanning_per_owner.is_empty());
    }
}
