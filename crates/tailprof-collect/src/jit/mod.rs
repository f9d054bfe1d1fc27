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
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tailprof_format::{JitEntry, Mmap};

use crate::procfs;

mod jitdump;
mod perfmap;

use jitdump::DumpState;
pub use jitdump::{JitUnwindOp, MAX_UNWIND_RECORD};
use perfmap::MapState;

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
    /// Source-line entries (jitdump DEBUG_INFO) copied in all; more are counted
    /// ([`JitCollector::lines_skipped`]). Each function keeps at most
    /// [`tailprof_format::jit::MAX_JIT_LINES`].
    pub lines_total: u64,
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
            lines_total: 1 << 23,
        }
    }
}

/// Jitdump record ids.

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
    /// Source-line entries copied, and skipped (bounds, malformed records).
    lines: u64,
    lines_skipped: u64,
    /// Lines skipped by [`JitLimits::lines_total`] (a note is written at the first).
    lines_skipped_total: u64,
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
            lines: 0,
            lines_skipped: 0,
            lines_skipped_total: 0,
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

    /// Source-line entries (jitdump DEBUG_INFO) skipped so far: over the per-function or
    /// the recording's bound, outside their code, for no load, or cut off.
    pub fn lines_skipped(&self) -> u64 {
        self.lines_skipped
    }

    /// Source-line entries copied so far.
    pub fn lines(&self) -> u64 {
        self.lines
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
                held_lines: 0,
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

    /// Copies `e` unless a bound refuses it (counted); whether it was copied.
    fn add(&mut self, pid: u32, e: JitEntry) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else { return false };
        if p.entries >= self.limits.entries_per_process {
            self.skipped += 1;
            return false;
        }
        if self.entries >= self.limits.entries_total {
            if self.skipped_total == 0 {
                self.notes.push(format!("JIT names: only the first {} of the recording kept", self.limits.entries_total));
            }
            self.skipped_total += 1;
            self.skipped += 1;
            return false;
        }
        p.entries += 1;
        self.entries += 1;
        self.out.push(e);
        true
    }
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

    pub(super) fn own_pid() -> (u32, std::sync::MutexGuard<'static, ()>) {
        (std::process::id(), OWN_PID.lock().unwrap_or_else(|p| p.into_inner()))
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
