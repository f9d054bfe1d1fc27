//! Names of the code runtimes generate, copied into the trace while recording (issue 23;
//! docs/SYMBOLS.md "Code that runtimes generate"): perf maps (`/tmp/perf-PID.map`) and
//! jitdumps (`jit-PID.dump`, found through their MMAP records).
//!
//! Both files are written by the profiled process and are untrusted (docs/SECURITY.md):
//! they are opened only through [`procfs::open_untrusted`] (no symlink as the last
//! component, a regular file, never a FIFO or device, never FUSE, `O_NONBLOCK|O_NOCTTY`)
//! and must be owned by the target's user or root (as perf requires). The perf map is
//! looked for as `/proc/PID/root/tmp/perf-NSPID.map` (the PID as the process sees it in
//! its own PID namespace, so containers work), else `/tmp/perf-PID.map`. Files are read
//! incrementally with `pread` (the offset is remembered; Node appends as it compiles),
//! a bounded amount per poll, and each within [`JitLimits`]: bytes per file, line length,
//! entries per process. What is skipped is counted ([`JitCollector::skipped`], stored as
//! `Lost { kind: JitNames }`). Files stay open once opened, so what a process wrote just
//! before it exited is read after it is gone.
//!
//! With `--call-graph dwarf` ([`JitCollector::set_unwind`]) a jitdump's UNWINDING_INFO
//! records (the `.eh_frame` + `.eh_frame_hdr` of the code its next CODE_LOAD loads) are
//! read too, at most [`MAX_UNWIND_RECORD`] bytes each, and handed to the recorder's
//! unwinder ([`JitCollector::take_unwind`] → [`tailprof_unwind::Unwinder::add_jit`]), with
//! every CODE_LOAD (a load without the record drops what an earlier load at its address
//! had) and CODE_MOVE. They are not copied into the trace: stacks are unwound while
//! recording and the trace keeps only their frames. Malformed or oversized records are
//! counted ([`JitCollector::unwind_skipped`]).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use tailprof_format::{JitEntry, JitOrigin, Mmap};

use crate::procfs;

/// Bounds of what the recorder reads and copies per process (docs/SECURITY.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitLimits {
    /// Bytes read of one perf map (Node's grows by about 1 MB an hour).
    pub map_bytes: u64,
    /// Longest perf-map line; longer lines are skipped and counted.
    pub line_len: usize,
    /// Entries copied per process (perf map and jitdumps together).
    pub entries_per_process: usize,
    /// Entries copied in all, whatever the number of processes (`-a` next to thousands of
    /// processes that each publish a full map must not make the trace grow without end).
    pub entries_total: u64,
    /// Bytes walked of one jitdump (code bytes are skipped, not read).
    pub dump_bytes: u64,
    /// Records walked of one jitdump (tiny garbage records cost a read each).
    pub dump_records: u64,
    /// Bytes read per file per poll (the rest waits for the next poll).
    pub poll_bytes: usize,
    /// Jitdump records handled per file per poll.
    pub poll_records: usize,
    /// Processes watched; more are counted.
    pub processes: usize,
}

impl Default for JitLimits {
    fn default() -> Self {
        JitLimits {
            map_bytes: 64 << 20,
            line_len: 4096,
            entries_per_process: 1 << 18,
            entries_total: 1 << 22,
            dump_bytes: 1 << 30,
            dump_records: 4_000_000,
            poll_bytes: 4 << 20,
            poll_records: 100_000,
            processes: 4096,
        }
    }
}

/// Jitdump record ids.
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_DEBUG_INFO: u32 = 2;
const JIT_CODE_CLOSE: u32 = 3;
const JIT_CODE_UNWINDING_INFO: u32 = 4;
/// Largest UNWINDING_INFO data read (`.eh_frame` + `.eh_frame_hdr` of one function; V8's
/// are a few hundred bytes).
pub const MAX_UNWIND_RECORD: u64 = 1 << 20;
/// `JiTD` as a native (little-endian) u32.
const JITDUMP_MAGIC: u32 = 0x4A69_5444;
const JITDUMP_MAGIC_SWAPPED: u32 = 0x4454_694A;
/// Largest jitdump record accepted (a CODE_LOAD carries its code bytes).
const MAX_DUMP_RECORD: u64 = 64 << 20;
/// Bytes of a CODE_LOAD/DEBUG_INFO body read for its fixed fields and name.
const MAX_NAME: usize = 4096;

#[derive(Debug, Default)]
struct MapState {
    file: Option<File>,
    offset: u64,
    /// The start of a line not yet complete.
    carry: Vec<u8>,
    /// Inside a line longer than the limit: skip to the next newline.
    skipping: bool,
    /// Read up to its bound, refused, or gone for good.
    done: bool,
    /// Last time (recorder clock) an open was tried without a file being there.
    last_try: u64,
}

#[derive(Debug)]
struct DumpState {
    path: String,
    file: Option<File>,
    offset: u64,
    header: bool,
    swapped: bool,
    /// Timestamps are TSC ticks (header flag bit 0), not CLOCK_MONOTONIC.
    tsc: bool,
    done: bool,
    /// Records walked so far.
    records: u64,
    /// `file:line` of the next CODE_LOAD (DEBUG_INFO precedes its load), by code address.
    debug: Option<(u64, String)>,
    /// Names by code index (for CODE_MOVE).
    names: HashMap<u64, String>,
    /// `.eh_frame` and `.eh_frame_hdr` of the next CODE_LOAD (UNWINDING_INFO precedes
    /// its load).
    unwind: Option<(Vec<u8>, Vec<u8>)>,
}

/// What the recorder's unwinder learns from a jitdump ([`JitCollector::take_unwind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitUnwindOp {
    /// Code loaded with its unwind information, or without (empty `eh_frame`).
    Load { pid: u32, info: tailprof_unwind::JitUnwind },
    /// Code moved.
    Move { pid: u32, from: u64, to: u64, size: u64 },
}

#[derive(Debug, Default)]
struct Proc {
    /// Owner of `/proc/PID` when first seen (the process's effective uid).
    uid: Option<u32>,
    /// The PID in the process's own namespace (`NSpid`'s last field).
    nspid: Option<u32>,
    /// The process's name (`Name:` of its status) when first seen.
    name: Option<String>,
    /// It has anonymous executable memory (where runtimes put generated code).
    anon_exec: bool,
    map: MapState,
    dumps: Vec<DumpState>,
    entries: usize,
    /// Its EXIT record was seen: read once more, then forgotten.
    exited: bool,
}

/// Finds, reads and copies perf maps and jitdumps of the recorded processes; see the
/// module docs.
#[derive(Debug)]
pub struct JitCollector {
    limits: JitLimits,
    procs: HashMap<u32, Proc>,
    /// Jitdump timestamps are on the trace clock (the trace uses CLOCK_MONOTONIC).
    mono_clock: bool,
    skipped: u64,
    entries: u64,
    /// Entries skipped by [`JitLimits::entries_total`] (a note is written at the first).
    skipped_total: u64,
    last_poll: u64,
    notes: Vec<String>,
    out: Vec<JitEntry>,
    /// Off for outputs that keep no JIT names (the agent's aggregator).
    enabled: bool,
    /// Advice about processes already forgotten ([`Self::advice`]).
    gone_advice: Vec<String>,
    /// A process exited since the last poll (the next one is not delayed).
    exits: bool,
    /// Read UNWINDING_INFO records for the unwinder (`--call-graph dwarf`).
    unwind: bool,
    unwind_out: Vec<JitUnwindOp>,
    unwind_skipped: u64,
    /// Read buffer of the perf maps (reused across maps and polls).
    scratch: Vec<u8>,
}

/// Whether `path` names a jitdump (`.../jit-<digits>.dump`).
pub fn is_jitdump_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("jit-").and_then(|r| r.strip_suffix(".dump")).is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// One perf-map line (its home is the format's JIT module, shared with `import`).
pub use tailprof_format::jit::parse_map_line;

impl JitCollector {
    /// `mono_clock`: the trace's timestamps are CLOCK_MONOTONIC (jitdump load times
    /// are used as they are; otherwise every load is valid for the whole trace).
    pub fn new(limits: JitLimits, mono_clock: bool) -> Self {
        JitCollector {
            limits,
            procs: HashMap::new(),
            mono_clock,
            skipped: 0,
            entries: 0,
            skipped_total: 0,
            last_poll: 0,
            notes: Vec::new(),
            out: Vec::new(),
            enabled: true,
            gone_advice: Vec::new(),
            exits: false,
            unwind: false,
            unwind_out: Vec::new(),
            unwind_skipped: 0,
            scratch: Vec::new(),
        }
    }

    /// Also read jitdumps' unwind information for the recorder's unwinder (module docs).
    pub fn set_unwind(&mut self, on: bool) {
        self.unwind = on;
    }

    /// Unwind information found since the last call, for the recorder's unwinder.
    pub fn take_unwind(&mut self) -> Vec<JitUnwindOp> {
        std::mem::take(&mut self.unwind_out)
    }

    /// UNWINDING_INFO records not used: malformed, or over [`MAX_UNWIND_RECORD`].
    pub fn unwind_skipped(&self) -> u64 {
        self.unwind_skipped
    }

    /// Turns the collector off (nothing is opened or read) or on.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// A process exited: what it wrote last is read at the next poll, then its state is
    /// dropped (so a long `-a` recording keeps watching new processes).
    pub fn note_exit(&mut self, pid: u32) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exited = true;
            self.exits = true;
        }
    }

    /// Names skipped so far (lines, records, entries over the bound, refused files).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Entries copied so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// What the user should know (files refused, bounds reached), once each.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn proc_mut(&mut self, pid: u32) -> Option<&mut Proc> {
        if !self.enabled || pid == 0 || pid == u32::MAX {
            return None;
        }
        if !self.procs.contains_key(&pid) {
            if self.procs.len() >= self.limits.processes {
                self.skipped += 1;
                return None;
            }
            let uid = std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid());
            let (name, nspid) = status(pid);
            self.procs.insert(pid, Proc { uid, nspid, name, ..Default::default() });
        }
        self.procs.get_mut(&pid)
    }

    /// A process of the trace: its perf map is looked for from now on.
    pub fn note_process(&mut self, pid: u32) {
        let _ = self.proc_mut(pid);
    }

    /// An MMAP record written to the trace: its process is watched; a jitdump's mapping
    /// registers the file.
    pub fn note_mmap(&mut self, m: &Mmap) {
        if m.cpumode.is_kernel() {
            return;
        }
        let jitdump = is_jitdump_path(&m.path);
        let anon_exec =
            m.prot & libc::PROT_EXEC as u32 != 0 && (m.path.is_empty() || m.path.starts_with("//anon") || m.path.starts_with("[anon"));
        let Some(p) = self.proc_mut(m.pid) else { return };
        p.anon_exec |= anon_exec;
        if jitdump && p.dumps.len() < 16 && !p.dumps.iter().any(|d| d.path == m.path) {
            p.dumps.push(DumpState {
                path: m.path.clone(),
                file: None,
                offset: 0,
                header: false,
                swapped: false,
                tsc: false,
                done: false,
                records: 0,
                debug: None,
                names: HashMap::new(),
                unwind: None,
            });
        }
    }

    /// Reads what is new in every watched file, at most every 100 ms unless `last`
    /// (the end of the recording: everything up to the bounds is read).
    pub fn poll(&mut self, now: u64, last: bool) {
        if !self.enabled || (!last && !self.exits && now.saturating_sub(self.last_poll) < 100_000_000) {
            return;
        }
        self.exits = false;
        self.last_poll = now;
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            // An exited process is read to its end once, then forgotten.
            let whole = last || self.procs.get(&pid).is_some_and(|p| p.exited);
            let rounds = if whole { 1 + (self.limits.map_bytes / self.limits.poll_bytes.max(1) as u64) as usize } else { 1 };
            for _ in 0..rounds {
                if !self.poll_map(pid, now, whole) {
                    break;
                }
            }
            let n = self.procs.get(&pid).map_or(0, |p| p.dumps.len());
            for i in 0..n {
                let rounds = if whole { 1 + self.limits.dump_bytes as usize / (self.limits.poll_bytes.max(1)) } else { 1 };
                for _ in 0..rounds {
                    if !self.poll_dump(pid, i) {
                        break;
                    }
                }
            }
            if !last && self.procs.get(&pid).is_some_and(|p| p.exited) {
                if let Some(a) = self.advice_for(pid) {
                    if self.gone_advice.len() < 8 {
                        self.gone_advice.push(a);
                    }
                }
                self.procs.remove(&pid);
            }
        }
    }

    /// Processes of a known runtime (by name) with anonymous executable memory and no
    /// JIT names: which runtime and the flag that makes it publish them (at most 8).
    pub fn advice(&self) -> Vec<String> {
        let mut pids: Vec<&u32> = self.procs.keys().collect();
        pids.sort_unstable();
        let mut out = self.gone_advice.clone();
        out.extend(pids.into_iter().filter_map(|&pid| self.advice_for(pid)));
        out.truncate(8);
        out
    }

    fn advice_for(&self, pid: u32) -> Option<String> {
        let p = self.procs.get(&pid)?;
        if !p.anon_exec || p.entries > 0 {
            return None;
        }
        let (runtime, flag) = tailprof_format::jit::runtime_advice(p.name.as_deref()?)?;
        Some(format!("{runtime} (pid {pid}) ran generated code without publishing its names: {flag}"))
    }

    /// Entries found since the last call, to be written to the trace.
    pub fn take_entries(&mut self) -> Vec<JitEntry> {
        std::mem::take(&mut self.out)
    }

    /// Opens `path` with the untrusted-file rules and checks its owner (the target's
    /// user or root). Counts and notes a file that exists but is refused.
    fn open_checked(&mut self, pid: u32, path: &Path, uid: Option<u32>) -> Result<File, bool> {
        match procfs::open_untrusted(path) {
            Ok(f) => {
                let owner = f.metadata().map(|m| m.uid()).unwrap_or(u32::MAX);
                if owner == 0 || Some(owner) == uid {
                    Ok(f)
                } else {
                    self.refuse(pid, path, &format!("owned by uid {owner}, not the process's user or root"));
                    Err(true)
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(false),
            // `/proc/PID/root` of a process we may not look into (not root): as if there
            // were nothing there; the host path is tried next.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && path.starts_with("/proc/") => Err(false),
            Err(e) => {
                // A symlink (ELOOP), a FIFO or device, FUSE, no permission.
                let why = if e.raw_os_error() == Some(libc::ELOOP) { "a symbolic link".to_owned() } else { e.to_string() };
                self.refuse(pid, path, &why);
                Err(true)
            }
        }
    }

    fn refuse(&mut self, pid: u32, path: &Path, why: &str) {
        self.skipped += 1;
        if self.notes.len() < 32 {
            self.notes.push(format!("JIT names of process {pid} not read: {} is {why}", path.display()));
        }
    }

    fn add(&mut self, pid: u32, e: JitEntry) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        if p.entries >= self.limits.entries_per_process {
            self.skipped += 1;
            return;
        }
        if self.entries >= self.limits.entries_total {
            if self.skipped_total == 0 {
                self.notes.push(format!("JIT names: only the first {} of the recording kept", self.limits.entries_total));
            }
            self.skipped_total += 1;
            self.skipped += 1;
            return;
        }
        p.entries += 1;
        self.entries += 1;
        self.out.push(e);
    }

    /// One bounded read of `pid`'s perf map; whether there may be more to read now.
    fn poll_map(&mut self, pid: u32, now: u64, last: bool) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        if p.map.done {
            return false;
        }
        if p.map.file.is_none() {
            // Not there yet: look again about once a second (and at the end).
            if !last && p.map.last_try != 0 && now.saturating_sub(p.map.last_try) < 1_000_000_000 {
                return false;
            }
            p.map.last_try = now.max(1);
            let (uid, ns) = (p.uid, p.nspid.unwrap_or(pid));
            let rooted = format!("/proc/{pid}/root/tmp/perf-{ns}.map");
            let file = match self.open_checked(pid, Path::new(&rooted), uid) {
                Err(false) => {
                    // The process is gone (no root to look through) or has no map there:
                    // the host's /tmp, as perf does.
                    self.open_checked(pid, Path::new(&format!("/tmp/perf-{pid}.map")), uid)
                }
                r => r,
            };
            let p = self.procs.get_mut(&pid).expect("present");
            match file {
                Ok(f) => p.map.file = Some(f),
                Err(refused) => {
                    // A refused file is not looked at again.
                    p.map.done = refused;
                    return false;
                }
            }
        }
        let limits = self.limits;
        let p = self.procs.get_mut(&pid).expect("present");
        let left = limits.map_bytes.saturating_sub(p.map.offset);
        if left == 0 {
            p.map.done = true;
            p.map.file = None;
            self.skipped += 1;
            self.notes.push(format!("perf map of process {pid}: only the first {} MiB read", limits.map_bytes >> 20));
            return false;
        }
        // Nothing new (most polls of most maps): one fstat, no buffer. Else at most what
        // was appended, into the collector's one scratch buffer (allocating and freeing
        // a `poll_bytes` buffer per map and poll cost 50 µs each: docs/BENCHMARKS.md
        // "Perf-map polling").
        let file = p.map.file.as_ref().expect("open");
        let new = file.metadata().map_or(0, |m| m.len().saturating_sub(p.map.offset));
        if new == 0 {
            return false;
        }
        let want = (limits.poll_bytes as u64).min(left).min(new) as usize;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.resize(want, 0);
        let n = match file.read_at(&mut buf, p.map.offset) {
            Ok(n) => n,
            Err(_) => {
                self.scratch = buf;
                return false;
            }
        };
        if n == 0 {
            self.scratch = buf;
            return false;
        }
        p.map.offset += n as u64;
        buf.truncate(n);
        let mut lines = Vec::new();
        let mut skipped = 0u64;
        let mut rest: &[u8] = &buf;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (part, tail) = (&rest[..nl], &rest[nl + 1..]);
            rest = tail;
            if p.map.skipping {
                p.map.skipping = false;
                continue;
            }
            if p.map.carry.len() + part.len() > limits.line_len {
                p.map.carry.clear();
                skipped += 1;
                continue;
            }
            let line: Vec<u8> = if p.map.carry.is_empty() {
                part.to_vec()
            } else {
                let mut l = std::mem::take(&mut p.map.carry);
                l.extend_from_slice(part);
                l
            };
            if line.is_empty() {
                continue;
            }
            match parse_map_line(&line) {
                Some(e) => lines.push(e),
                None => skipped += 1,
            }
        }
        if !p.map.skipping {
            if p.map.carry.len() + rest.len() > limits.line_len {
                p.map.carry.clear();
                p.map.skipping = true;
                skipped += 1;
            } else {
                p.map.carry.extend_from_slice(rest);
            }
        }
        self.skipped += skipped;
        // Kept for the next read unless it grew large (a map read from its start).
        if buf.capacity() <= 1 << 20 {
            self.scratch = buf;
        }
        for (start, size, name) in lines {
            self.add(pid, JitEntry { pid, time: 0, start, size, origin: JitOrigin::PerfMap, name, source: None });
        }
        n == want && (n as u64) < new
    }

    /// One bounded walk of jitdump `i` of `pid`; whether there may be more to read now.
    fn poll_dump(&mut self, pid: u32, i: usize) -> bool {
        let limits = self.limits;
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        let uid = p.uid;
        let d = &mut p.dumps[i];
        if d.done {
            return false;
        }
        if d.file.is_none() {
            let rooted = format!("/proc/{pid}/root{}", d.path);
            let path = d.path.clone();
            let file = match self.open_checked(pid, Path::new(&rooted), uid) {
                Ok(f) => Ok(f),
                Err(true) => Err(true),
                Err(false) => self.open_checked(pid, Path::new(&path), uid),
            };
            let d = &mut self.procs.get_mut(&pid).expect("present").dumps[i];
            match file {
                Ok(f) => d.file = Some(f),
                Err(refused) => {
                    d.done = refused;
                    return false;
                }
            }
        }
        let mono = self.mono_clock;
        let want_unwind = self.unwind;
        let mut unwind_ops = Vec::new();
        let mut unwind_skipped = 0u64;
        let mut found = Vec::new();
        let mut skipped = 0u64;
        let mut more = false;
        {
            let d = &mut self.procs.get_mut(&pid).expect("present").dumps[i];
            let f = d.file.as_ref().expect("open");
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            if !d.header {
                let mut h = [0u8; 40];
                if f.read_at(&mut h, 0).map_or(true, |n| n < 40) {
                    return false;
                }
                let magic = u32::from_le_bytes(h[0..4].try_into().expect("4"));
                d.swapped = match magic {
                    JITDUMP_MAGIC => false,
                    JITDUMP_MAGIC_SWAPPED => true,
                    _ => {
                        d.done = true;
                        d.file = None;
                        self.skipped += 1;
                        self.notes.push(format!("{}: not a jitdump (bad magic), not read", d.path));
                        return false;
                    }
                };
                let rd32 = |b: &[u8]| rd32(b, d.swapped);
                let total = rd32(&h[8..12]) as u64;
                d.tsc = rd64(&h[32..40], d.swapped) & 1 != 0;
                if !(40..=4096).contains(&total) {
                    d.done = true;
                    d.file = None;
                    self.skipped += 1;
                    return false;
                }
                d.header = true;
                d.offset = total;
            }
            let mut body = vec![0u8; 40 + MAX_NAME];
            for _ in 0..limits.poll_records {
                if d.records >= limits.dump_records {
                    d.done = true;
                    d.file = None;
                    skipped += 1;
                    self.notes.push(format!("{}: only the first {} records walked", d.path, limits.dump_records));
                    break;
                }
                if d.offset >= limits.dump_bytes {
                    d.done = true;
                    d.file = None;
                    skipped += 1;
                    self.notes.push(format!("{}: only the first {} MiB walked", d.path, limits.dump_bytes >> 20));
                    break;
                }
                if d.offset + 16 > size {
                    break;
                }
                let mut rh = [0u8; 16];
                if f.read_at(&mut rh, d.offset).map_or(true, |n| n < 16) {
                    break;
                }
                let id = rd32(&rh[0..4], d.swapped);
                let total = rd32(&rh[4..8], d.swapped) as u64;
                let ts = rd64(&rh[8..16], d.swapped);
                if !(16..=MAX_DUMP_RECORD).contains(&total) {
                    // Garbage: nothing after it can be framed.
                    d.done = true;
                    d.file = None;
                    skipped += 1;
                    break;
                }
                if d.offset + total > size {
                    break; // still being written
                }
                let want = ((total - 16) as usize).min(body.len());
                let n = f.read_at(&mut body[..want], d.offset + 16).unwrap_or(0);
                let b = &body[..n.min(want)];
                let time = if mono && !d.tsc { ts } else { 0 };
                match id {
                    JIT_CODE_LOAD if b.len() >= 40 => {
                        let addr = rd64(&b[16..24], d.swapped);
                        let size = rd64(&b[24..32], d.swapped);
                        let index = rd64(&b[32..40], d.swapped);
                        let name = cstr(&b[40..]);
                        let source = match d.debug.take() {
                            Some((a, s)) if a == addr => Some(s),
                            _ => None,
                        };
                        if d.names.len() < limits.entries_per_process {
                            d.names.insert(index, name.clone());
                        }
                        if want_unwind {
                            let (eh_frame, eh_frame_hdr) = d.unwind.take().unwrap_or_default();
                            if let Some(end) = addr.checked_add(size).filter(|&e| e > addr) {
                                let info = tailprof_unwind::JitUnwind { code: addr..end, eh_frame, eh_frame_hdr };
                                unwind_ops.push(JitUnwindOp::Load { pid, info });
                            }
                        }
                        found.push(JitEntry { pid, time, start: addr, size, origin: JitOrigin::JitLoad, name, source });
                    }
                    JIT_CODE_MOVE if b.len() >= 48 => {
                        let old_addr = rd64(&b[16..24], d.swapped);
                        let new_addr = rd64(&b[24..32], d.swapped);
                        let size = rd64(&b[32..40], d.swapped);
                        let index = rd64(&b[40..48], d.swapped);
                        if want_unwind {
                            unwind_ops.push(JitUnwindOp::Move { pid, from: old_addr, to: new_addr, size });
                        }
                        match d.names.get(&index) {
                            Some(name) => found.push(JitEntry {
                                pid,
                                time,
                                start: new_addr,
                                size,
                                origin: JitOrigin::JitMove,
                                name: name.clone(),
                                source: None,
                            }),
                            None => skipped += 1,
                        }
                    }
                    JIT_CODE_DEBUG_INFO if b.len() >= 16 => {
                        let addr = rd64(&b[0..8], d.swapped);
                        let nr = rd64(&b[8..16], d.swapped);
                        // The first entry: {u64 addr, u32 line, u32 discrim, name}.
                        if nr > 0 && b.len() >= 32 {
                            let line = rd32(&b[24..28], d.swapped);
                            let file = cstr(&b[32..]);
                            d.debug = Some((addr, format!("{file}:{line}")));
                        }
                    }
                    JIT_CODE_UNWINDING_INFO if want_unwind => {
                        // {u64 unwinding_size, u64 eh_frame_hdr_size, u64 mapped_size}, then
                        // the .eh_frame followed by its .eh_frame_hdr.
                        let fields = (b.len() >= 24).then(|| (rd64(&b[0..8], d.swapped), rd64(&b[8..16], d.swapped)));
                        d.unwind = None;
                        match fields {
                            Some((len, hdr)) if len <= MAX_UNWIND_RECORD && hdr <= len && 16 + 24 + len <= total => {
                                let mut data = vec![0u8; len as usize];
                                if f.read_exact_at(&mut data, d.offset + 16 + 24).is_ok() {
                                    let eh_frame_hdr = data.split_off((len - hdr) as usize);
                                    d.unwind = Some((data, eh_frame_hdr));
                                } else {
                                    unwind_skipped += 1;
                                }
                            }
                            _ => unwind_skipped += 1,
                        }
                    }
                    JIT_CODE_CLOSE => {
                        d.done = true;
                        d.file = None;
                        d.offset += total;
                        break;
                    }
                    JIT_CODE_LOAD | JIT_CODE_MOVE | JIT_CODE_DEBUG_INFO => skipped += 1,
                    // UNWINDING_INFO and ids of later versions.
                    _ => {}
                }
                d.offset += total;
                d.records += 1;
                more = true;
            }
        }
        self.skipped += skipped;
        self.unwind_skipped += unwind_skipped;
        self.unwind_out.extend(unwind_ops);
        for e in found {
            if e.size == 0 || e.start.checked_add(e.size).is_none() {
                self.skipped += 1;
                continue;
            }
            self.add(pid, e);
        }
        more && !self.procs.get(&pid).is_some_and(|p| p.dumps[i].done)
    }
}

fn rd32(b: &[u8], swapped: bool) -> u32 {
    let v = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

fn rd64(b: &[u8], swapped: bool) -> u64 {
    let v = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    if swapped {
        v.swap_bytes()
    } else {
        v
    }
}

/// The NUL-terminated string at the start of `b` (all of `b` without a NUL), lossy.
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The process's name and its PID as it sees it in its own PID namespace (`Name:` and
/// `NSpid:`'s last field of `/proc/PID/status`, read at most 64 KiB).
fn status(pid: u32) -> (Option<String>, Option<u32>) {
    use std::io::Read;
    let mut s = String::new();
    let Ok(f) = File::open(format!("/proc/{pid}/status")) else { return (None, None) };
    if f.take(64 << 10).read_to_string(&mut s).is_err() {
        return (None, None);
    }
    let field = |k: &str| s.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
    let name = field("Name:").map(str::to_owned);
    let nspid = field("NSpid:").and_then(|v| v.split_whitespace().last()).and_then(|v| v.parse().ok());
    (name, nspid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests that register this process also read its `/tmp/perf-PID.map`: one at a time,
    /// or one test's map lands in another's entries.
    static OWN_PID: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn own_pid() -> (u32, std::sync::MutexGuard<'static, ()>) {
        (std::process::id(), OWN_PID.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A fresh directory for test `line`, the jitdump path in it, and a jitdump header
    /// (version 1, x86-64, `pid`) to append records to.
    fn jitdump_scratch(pid: u32, line: u32) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("tailprof-jit-test-{pid}-{line}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join(format!("jit-{pid}.dump"));
        let mut header = Vec::new();
        for w in [JITDUMP_MAGIC, 1, 40, 62, 0, pid] {
            header.extend_from_slice(&w.to_le_bytes());
        }
        header.extend_from_slice(&[0u8; 16]);
        (dir, path, header)
    }

    #[test]
    fn map_lines_with_and_without_0x() {
        assert_eq!(parse_map_line(b"7f00a0 40 LazyCompile:*hot /a.js:3"), Some((0x7f00a0, 0x40, "LazyCompile:*hot /a.js:3".into())));
        assert_eq!(parse_map_line(b"0x10 0x20 Interpreter"), Some((0x10, 0x20, "Interpreter".into())));
        assert_eq!(parse_map_line(b"10 0 empty"), None);
        assert_eq!(parse_map_line(b"zz 10 bad"), None);
        assert_eq!(parse_map_line(b"10 20"), None);
        assert_eq!(parse_map_line(b"ffffffffffffffff 10 wraps"), None);
        assert_eq!(parse_map_line(b"\x00\xff\x13 garbage here"), None);
    }

    #[test]
    fn jitdump_paths() {
        assert!(is_jitdump_path("/home/u/jit-1234.dump"));
        assert!(is_jitdump_path("jit-1.dump"));
        assert!(!is_jitdump_path("/tmp/jit-.dump"));
        assert!(!is_jitdump_path("/tmp/jit-12x.dump"));
        assert!(!is_jitdump_path("/tmp/perf-12.map"));
    }

    fn rec(id: u32, ts: u64, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&id.to_le_bytes());
        v.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        v.extend_from_slice(&ts.to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    fn load(addr: u64, size: u64, index: u64, name: &str) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [std::process::id(), std::process::id()] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for w in [addr, addr, size, index] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&[0xcc; 32]); // the code bytes, never read
        b
    }

    /// A jitdump written in pieces: CODE_LOAD with its time, DEBUG_INFO's first line as the
    /// load's source, CODE_MOVE by code index, a record still being written waits for
    /// the next poll, and garbage after CLOSE is never read. A record whose size field is
    /// impossible stops the file and is counted.
    #[test]
    fn jitdump_loads_moves_debug_info_incrementally() {
        let (pid, _serial) = own_pid();
        let (dir, path, header) = jitdump_scratch(pid, line!());
        let mut debug = Vec::new();
        debug.extend_from_slice(&0x5000u64.to_le_bytes());
        debug.extend_from_slice(&1u64.to_le_bytes());
        debug.extend_from_slice(&0x5004u64.to_le_bytes());
        debug.extend_from_slice(&42u32.to_le_bytes());
        debug.extend_from_slice(&0u32.to_le_bytes());
        debug.extend_from_slice(b"app.js\0");
        let mut first = header.clone();
        first.extend(rec(JIT_CODE_DEBUG_INFO, 90, &debug));
        first.extend(rec(JIT_CODE_LOAD, 100, &load(0x5000, 0x40, 7, "f")));
        let second = rec(JIT_CODE_LOAD, 200, &load(0x6000, 0x20, 8, "g"));
        first.extend_from_slice(&second[..20]);
        std::fs::write(&path, &first).unwrap();

        let mut c = JitCollector::new(JitLimits::default(), true);
        let m = Mmap { pid, tid: pid, start: 0x1000, len: 4096, prot: 5, path: path.display().to_string(), ..Default::default() };
        c.note_mmap(&m);
        c.poll(1, true);
        let got = c.take_entries();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].name.as_str(), got[0].time, got[0].start, got[0].size), ("f", 100, 0x5000, 0x40));
        assert_eq!(got[0].source.as_deref(), Some("app.js:42"));

        // The rest of the second load, a move of `f`, CLOSE, then garbage.
        let mut rest = second[20..].to_vec();
        let mut mv = Vec::new();
        for w in [pid, pid] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        for w in [0x5000u64, 0x5000, 0x9000, 0x40, 7] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        rest.extend(rec(JIT_CODE_MOVE, 300, &mv));
        rest.extend(rec(JIT_CODE_CLOSE, 400, &[]));
        rest.extend_from_slice(&[0xff; 64]);
        let mut all = first.clone();
        all.extend(rest);
        std::fs::write(&path, &all).unwrap();
        c.poll(2, true);
        let got = c.take_entries();
        let names: Vec<_> = got.iter().map(|e| (e.name.as_str(), e.start, e.time, e.origin)).collect();
        assert_eq!(names, [("g", 0x6000, 200, JitOrigin::JitLoad), ("f", 0x9000, 300, JitOrigin::JitMove)]);
        assert_eq!(c.skipped(), 0);

        // A second dump with an impossible record size: stops there, counted once.
        let bad_path = dir.join(format!("jit-{}.dump", pid + 1));
        let mut bad = header.clone();
        bad.extend_from_slice(&[0, 0, 0, 0, 3, 0, 0, 0]);
        bad.extend_from_slice(&[0; 8]);
        bad.extend(rec(JIT_CODE_LOAD, 100, &load(0x7000, 0x10, 1, "never")));
        std::fs::write(&bad_path, &bad).unwrap();
        c.note_mmap(&Mmap { path: bad_path.display().to_string(), ..m });
        c.poll(3, true);
        assert!(c.take_entries().is_empty());
        assert_eq!(c.skipped(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A perf map read as it grows: a line cut between two polls is joined, a line over
    /// the length bound is skipped (counted once) up to its newline, garbage lines are
    /// counted, entries past the per-process bound are counted.
    #[test]
    fn perf_map_is_read_incrementally_within_bounds() {
        let (pid, _serial) = own_pid();
        let path = format!("/tmp/perf-{pid}.map");
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, "1000 10 first\n2000 2").unwrap();
        let limits = JitLimits { line_len: 64, entries_per_process: 3, ..JitLimits::default() };
        let mut c = JitCollector::new(limits, true);
        c.note_process(pid);
        c.poll(1, true);
        let got = c.take_entries();
        assert_eq!(got.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["first"]);
        let long = "x".repeat(100);
        let more = format!("0 second\n3000 10 {long}\nnot a line at all\n4000 10 third\n5000 10 fourth\n");
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, more.as_bytes()).unwrap();
        c.poll(2, true);
        let got = c.take_entries();
        assert_eq!(
            got.iter().map(|e| (e.start, e.size, e.name.as_str())).collect::<Vec<_>>(),
            [(0x2000, 0x20, "second"), (0x4000, 0x10, "third")]
        );
        // The long line, the garbage line, and `fourth` over the bound of 3 entries.
        assert_eq!(c.skipped(), 3);
        let _ = std::fs::remove_file(&path);
    }

    /// The recording's bound on entries holds whatever the number of processes: past it,
    /// entries are counted as skipped and one note says so (before, only the per-process
    /// bound existed: 4,096 processes × 262,144 names).
    #[test]
    fn entries_past_the_recordings_bound_are_counted() {
        let (pid, _serial) = own_pid();
        let path = format!("/tmp/perf-{pid}.map");
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, "1000 10 a\n2000 10 b\n3000 10 c\n4000 10 d\n").unwrap();
        let limits = JitLimits { entries_per_process: 10, entries_total: 2, ..JitLimits::default() };
        let mut c = JitCollector::new(limits, true);
        c.note_process(pid);
        c.poll(1, true);
        let got = c.take_entries();
        assert_eq!(got.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(c.skipped(), 2);
        let notes = c.take_notes();
        assert_eq!(notes.iter().filter(|n| n.contains("only the first 2")).count(), 1, "{notes:?}");
        let _ = std::fs::remove_file(&path);
    }

    /// `--call-graph dwarf`: UNWINDING_INFO is split into `.eh_frame` and `.eh_frame_hdr`
    /// and goes with the next CODE_LOAD; a load without it says so (empty); a move is
    /// passed on; a malformed record (header size over the data) is counted, not used.
    #[test]
    fn jitdump_unwinding_info_goes_with_the_next_load() {
        let (pid, _serial) = own_pid();
        let (dir, path, mut b) = jitdump_scratch(pid, line!());
        let unwind = |len: u64, hdr: u64, data: &[u8]| {
            let mut u = Vec::new();
            for w in [len, hdr, len] {
                u.extend_from_slice(&w.to_le_bytes());
            }
            u.extend_from_slice(data);
            rec(JIT_CODE_UNWINDING_INFO, 50, &u)
        };
        b.extend(unwind(6, 2, b"EEEEHH"));
        b.extend(rec(JIT_CODE_LOAD, 100, &load(0x5000, 0x40, 7, "with")));
        b.extend(rec(JIT_CODE_LOAD, 110, &load(0x6000, 0x40, 8, "without")));
        b.extend(unwind(4, 9, b"EEEE"));
        b.extend(rec(JIT_CODE_LOAD, 120, &load(0x7000, 0x40, 9, "malformed")));
        let mut mv = Vec::new();
        for w in [pid, pid] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        for w in [0x5000u64, 0x5000, 0x9000, 0x40, 7] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        b.extend(rec(JIT_CODE_MOVE, 130, &mv));
        std::fs::write(&path, &b).unwrap();
        let m = Mmap { pid, tid: pid, prot: 5, path: path.display().to_string(), ..Default::default() };
        let mut off = JitCollector::new(JitLimits::default(), true);
        off.note_mmap(&m);
        off.poll(1, true);
        assert!(off.take_unwind().is_empty(), "not read without --call-graph dwarf");
        let mut c = JitCollector::new(JitLimits::default(), true);
        c.set_unwind(true);
        c.note_mmap(&m);
        c.poll(1, true);
        let ops = c.take_unwind();
        let load = |start: u64, eh: &[u8], hdr: &[u8]| JitUnwindOp::Load {
            pid,
            info: tailprof_unwind::JitUnwind { code: start..start + 0x40, eh_frame: eh.to_vec(), eh_frame_hdr: hdr.to_vec() },
        };
        assert_eq!(
            ops,
            [
                load(0x5000, b"EEEE", b"HH"),
                load(0x6000, b"", b""),
                load(0x7000, b"", b""),
                JitUnwindOp::Move { pid, from: 0x5000, to: 0x9000, size: 0x40 }
            ]
        );
        assert_eq!(c.unwind_skipped(), 1);
        assert_eq!(c.take_entries().len(), 4, "names as before");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A jitdump of many tiny records of an unknown kind stops at the record bound,
    /// counted once (the CPU a hostile file can cost is bounded).
    #[test]
    fn jitdump_record_bound_is_counted() {
        let (pid, _serial) = own_pid();
        let (dir, path, mut b) = jitdump_scratch(pid, line!());
        for _ in 0..5000 {
            b.extend(rec(99, 1, &[]));
        }
        b.extend(rec(JIT_CODE_LOAD, 100, &load(0x5000, 0x40, 7, "after the bound")));
        std::fs::write(&path, &b).unwrap();
        let mut c = JitCollector::new(JitLimits { dump_records: 1000, poll_records: 300, ..JitLimits::default() }, true);
        c.note_mmap(&Mmap { pid, tid: pid, prot: 5, path: path.display().to_string(), ..Default::default() });
        c.poll(1, true);
        assert!(c.take_entries().is_empty());
        assert_eq!(c.skipped(), 1);
        assert!(c.take_notes().iter().any(|n| n.contains("only the first 1000 records")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A process that exits: what it wrote last is read at the next poll (even before
    /// the 100 ms poll interval), then it is forgotten; the advice about it is kept.
    #[test]
    fn an_exited_process_is_read_to_its_end_then_forgotten() {
        if unsafe { libc::geteuid() } != 0 {
            tailprof_testkit::skip(tailprof_testkit::Need::Root, "the map of a process that is gone must be owned by root");
            return;
        }
        let pid = 4_100_000 + std::process::id() % 1000; // no such process
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 10 early\n").unwrap();
        let mut c = JitCollector::new(JitLimits::default(), true);
        c.note_mmap(&Mmap { pid, tid: pid, prot: 5, path: "//anon".into(), ..Default::default() });
        c.poll(1_000_000_000, false);
        assert_eq!(c.take_entries().len(), 1);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"2000 10 at exit\n").unwrap();
        c.note_exit(pid);
        c.poll(1_000_000_001, false);
        assert_eq!(c.take_entries().iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["at exit"]);
        assert!(c.procs.is_empty());
        let _ = std::fs::remove_file(&path);
    }
}
