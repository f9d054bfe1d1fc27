//! Perf maps (`/tmp/perf-PID.map`): read incrementally, line by line, within the
//! collector's bounds (module docs of [`super`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tailprof_format::{JitEntry, JitOrigin};

use super::{parse_map_line, JitCollector};

#[derive(Debug, Default)]
pub(super) struct MapState {
    pub(super) file: Option<File>,
    pub(super) offset: u64,
    /// The start of a line not yet complete.
    pub(super) carry: Vec<u8>,
    /// Inside a line longer than the limit: skip to the next newline.
    pub(super) skipping: bool,
    /// Read up to its bound, refused, or gone for good.
    pub(super) done: bool,
    /// Last time (recorder clock) an open was tried without a file being there.
    pub(super) last_try: u64,
}

impl JitCollector {
    /// One bounded read of `pid`'s perf map; whether there may be more to read now.
    pub(super) fn poll_map(&mut self, pid: u32, now: u64, last: bool) -> bool {
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
            self.add(
                pid,
                JitEntry { pid, time: 0, start, size, origin: JitOrigin::PerfMap, name, source: None, lines: Default::default() },
            );
        }
        n == want && (n as u64) < new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::tests::own_pid;
    use crate::jit::JitLimits;

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
}
