//! Perf maps (`/tmp/perf-PID.map`) of a `perf record` recording, read at import time
//! (issue 23): a recording made with `perf record -k mono` of a runtime that writes a
//! perf map (`node --perf-basic-prof`, ...) names its JIT code only through that file,
//! which perf itself reads at `perf report` time. `import` copies what it says into the
//! trace's JIT names (docs/SYMBOLS.md), so the trace names those frames on its own.
//! (`perf inject --jit` output needs nothing: its `jitted-PID-N.so` files are ordinary
//! mapped ELF files.)
//!
//! Only processes with anonymous executable mappings are looked up (at most
//! [`MAX_PROCESSES`]). The file is untrusted (docs/SECURITY.md): opened only through
//! [`tailprof_elf::open::open_untrusted`] (no symlink, a regular file, never a FIFO or
//! device, never FUSE), and only if owned by the user importing or root (as `perf
//! report` requires); read with bounded memory: [`MAX_MAP_BYTES`] of it, lines of at most
//! [`MAX_LINE`] bytes, [`MAX_ENTRIES`] names a process. What is skipped (bad or long
//! lines, names over the bound, a refused file, a file cut at its bound) is counted and
//! stored as `Lost { JitNames }`. The PID is the one of the recording: a map of a later
//! process that got the same PID would be read instead (perf has the same ambiguity).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tailprof_format::{JitEntry, JitOrigin, Mmap};

/// Processes looked up at most; more are counted as skipped.
pub const MAX_PROCESSES: usize = 4096;
/// Bytes read of one perf map (the recorder's bound).
pub const MAX_MAP_BYTES: u64 = 64 << 20;
/// Longest line; longer ones are skipped and counted (the recorder's bound).
pub const MAX_LINE: usize = 4096;
/// Names kept per process (the recorder's bound).
pub const MAX_ENTRIES: usize = 1 << 18;

/// The processes whose perf maps are looked for, and what was found.
#[derive(Debug, Default)]
pub(crate) struct PerfMaps {
    pids: BTreeSet<u32>,
    /// Names skipped so far.
    pub skipped: u64,
    /// Names copied.
    pub entries: u64,
    /// What the user should know (a refused file), at most 8.
    pub notes: Vec<String>,
}

fn is_anonymous(path: &str) -> bool {
    path.is_empty() || path.starts_with("//anon") || path.starts_with("[anon")
}

impl PerfMaps {
    /// An MMAP record: an anonymous executable mapping makes its process a candidate.
    pub fn note_mmap(&mut self, m: &Mmap) {
        let exec = m.prot == 0 || m.prot & 4 != 0; // PROT_EXEC; MMAP (not MMAP2) has no prot
        if m.cpumode.is_kernel() || !exec || !is_anonymous(&m.path) || self.pids.contains(&m.pid) {
            return;
        }
        if self.pids.len() >= MAX_PROCESSES {
            self.skipped += 1;
            return;
        }
        self.pids.insert(m.pid);
    }

    /// Reads every candidate's `dir/perf-PID.map` (`/tmp` in use), calling `out` with each name.
    pub fn read_all(&mut self, dir: &Path, out: &mut dyn FnMut(&JitEntry)) {
        let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
        for pid in std::mem::take(&mut self.pids) {
            let path = dir.join(format!("perf-{pid}.map"));
            let f = match tailprof_elf::open::open_untrusted(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    self.refuse(&path, &e.to_string());
                    continue;
                }
            };
            let owner = f.metadata().map(|m| m.uid()).ok();
            if !owner.is_some_and(|o| o == 0 || Some(o) == me) {
                self.refuse(&path, "owned by another user");
                continue;
            }
            self.read_one(pid, f, out);
        }
    }

    fn refuse(&mut self, path: &Path, why: &str) {
        self.skipped += 1;
        if self.notes.len() < 8 {
            self.notes.push(format!("JIT names of {} not read: {why}", path.display()));
        }
    }

    fn read_one(&mut self, pid: u32, f: std::fs::File, out: &mut dyn FnMut(&JitEntry)) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_MAP_BYTES {
            self.skipped += 1; // cut at its bound
        }
        let mut r = BufReader::new(f.take(MAX_MAP_BYTES));
        let mut line = Vec::new();
        let mut kept = 0usize;
        loop {
            line.clear();
            // At most MAX_LINE + 1 bytes of a line are held; the rest is skipped.
            let n = match (&mut r).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if line.last() != Some(&b'\n') && n > MAX_LINE {
                self.skipped += 1;
                let mut rest = Vec::new();
                // skip to the end of the long line, a bounded piece at a time
                loop {
                    rest.clear();
                    match (&mut r).take(1 << 16).read_until(b'\n', &mut rest) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if rest.last() == Some(&b'\n') => break,
                        Ok(_) => {}
                    }
                }
                continue;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let Some((start, size, name)) = tailprof_format::jit::parse_map_line(text) else {
                self.skipped += 1;
                continue;
            };
            if kept >= MAX_ENTRIES {
                self.skipped += 1;
                continue;
            }
            kept += 1;
            self.entries += 1;
            out(&JitEntry { pid, time: 0, start, size, origin: JitOrigin::PerfMap, name, source: None, lines: Default::default() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailprof_format::CpuMode;

    fn anon(pid: u32) -> Mmap {
        Mmap { pid, tid: pid, start: 0x1000, len: 0x1000, prot: 5, cpumode: CpuMode::User, path: "//anon".into(), ..Default::default() }
    }

    #[test]
    fn a_perf_map_is_read_within_bounds_and_bad_lines_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(MAX_LINE * 3);
        std::fs::write(
            dir.path().join("perf-41.map"),
            format!("1000 20 JS:*hot a.js:1\n{long}\n\x00\u{ff} garbage\n2000 0x10 cold\n3000 0 empty\nzz"),
        )
        .unwrap();
        std::os::unix::fs::symlink(dir.path().join("perf-41.map"), dir.path().join("perf-42.map")).unwrap();
        let mut m = PerfMaps::default();
        for pid in [41, 42, 43] {
            m.note_mmap(&anon(pid));
        }
        let mut file_backed = anon(44);
        file_backed.path = "/usr/bin/x".into();
        m.note_mmap(&file_backed);
        std::fs::write(dir.path().join("perf-44.map"), "1000 20 not-looked-up\n").unwrap();
        let mut got = Vec::new();
        m.read_all(dir.path(), &mut |e| got.push((e.pid, e.start, e.size, e.name.clone())));
        assert_eq!(got, [(41, 0x1000, 0x20, "JS:*hot a.js:1".to_string()), (41, 0x2000, 0x10, "cold".to_string())]);
        // the long line, the garbage line, the empty range, the cut last line; the symlink
        assert_eq!(m.skipped, 5, "{:?}", m.notes);
        assert_eq!(m.entries, 2);
        assert!(m.notes.iter().any(|n| n.contains("perf-42.map")), "{:?}", m.notes);
    }
}
