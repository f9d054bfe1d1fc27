//! Jitdumps (`jit-PID.dump`): records walked incrementally within the collector's
//! bounds (module docs of [`super`]); CODE_LOAD and CODE_MOVE become entries, DEBUG_INFO
//! their line tables, UNWINDING_INFO goes to the recorder's unwinder.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tailprof_format::jit::JitLines;
use tailprof_format::{JitEntry, JitOrigin};

use super::JitCollector;

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
/// Largest DEBUG_INFO data read (entries past it are counted as skipped lines; V8's are
/// a few KiB).
pub const MAX_DEBUG_RECORD: u64 = 4 << 20;
/// Line-table entries held per jitdump for loads that may move later (CODE_MOVE copies
/// its load's table); past it, moved code keeps its name without lines (counted).
const MAX_HELD_LINES: usize = 1 << 20;

/// The line table of the code at `addr` (a DEBUG_INFO record, read before its load).
#[derive(Debug)]
pub(super) struct PendingDebug {
    addr: u64,
    /// `file:line` of the record's first entry.
    source: String,
    /// `(address, line, discrim, file)` of every entry read.
    entries: Vec<(u64, u32, u32, String)>,
    /// Entries the record announced but that were not read (cut at the bound, malformed).
    lost: u64,
}

#[derive(Debug)]
pub(super) struct DumpState {
    pub(super) path: String,
    pub(super) file: Option<File>,
    pub(super) offset: u64,
    pub(super) header: bool,
    pub(super) swapped: bool,
    /// Timestamps are TSC ticks (header flag bit 0), not CLOCK_MONOTONIC.
    pub(super) tsc: bool,
    pub(super) done: bool,
    /// Records walked so far.
    pub(super) records: u64,
    /// `file:line` of the next CODE_LOAD (DEBUG_INFO precedes its load), by code address.
    pub(super) debug: Option<PendingDebug>,
    /// Names by code index (for CODE_MOVE).
    pub(super) names: HashMap<u64, (String, JitLines)>,
    /// Line-table entries held in `names` (at most [`MAX_HELD_LINES`]).
    pub(super) held_lines: usize,
    /// `.eh_frame` and `.eh_frame_hdr` of the next CODE_LOAD (UNWINDING_INFO precedes
    /// its load).
    pub(super) unwind: Option<(Vec<u8>, Vec<u8>)>,
}

/// What the recorder's unwinder learns from a jitdump ([`JitCollector::take_unwind`]).

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitUnwindOp {
    /// Code loaded with its unwind information, or without (empty `eh_frame`).
    Load { pid: u32, info: tailprof_unwind::JitUnwind },
    /// Code moved.
    Move { pid: u32, from: u64, to: u64, size: u64 },
}

impl JitCollector {
    /// One bounded walk of jitdump `i` of `pid`; whether there may be more to read now.
    pub(super) fn poll_dump(&mut self, pid: u32, i: usize) -> bool {
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
        let mut lines_skipped = 0u64;
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
                        let (source, lines) = match d.debug.take() {
                            Some(dbg) if dbg.addr == addr => {
                                let (lines, lost) = code_lines(addr, size, &name, &dbg.entries);
                                lines_skipped += dbg.lost + lost;
                                (Some(dbg.source), lines)
                            }
                            Some(dbg) => {
                                // Not this load's: its lines name no code.
                                lines_skipped += dbg.entries.len() as u64 + dbg.lost;
                                (None, JitLines::default())
                            }
                            None => (None, JitLines::default()),
                        };
                        if d.names.len() < limits.entries_per_process {
                            let held = if d.held_lines + lines.lines.len() <= MAX_HELD_LINES { lines.clone() } else { JitLines::default() };
                            d.held_lines += held.lines.len();
                            if let Some((_, old)) = d.names.insert(index, (name.clone(), held)) {
                                d.held_lines -= old.lines.len();
                            }
                        }
                        if want_unwind {
                            let (eh_frame, eh_frame_hdr) = d.unwind.take().unwrap_or_default();
                            if let Some(end) = addr.checked_add(size).filter(|&e| e > addr) {
                                let info = tailprof_unwind::JitUnwind { code: addr..end, eh_frame, eh_frame_hdr };
                                unwind_ops.push(JitUnwindOp::Load { pid, info });
                            }
                        }
                        found.push(JitEntry { pid, time, start: addr, size, origin: JitOrigin::JitLoad, name, source, lines });
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
                            Some((name, lines)) => found.push(JitEntry {
                                pid,
                                time,
                                start: new_addr,
                                size,
                                origin: JitOrigin::JitMove,
                                name: name.clone(),
                                source: None,
                                lines: lines.clone(),
                            }),
                            None => skipped += 1,
                        }
                    }
                    JIT_CODE_DEBUG_INFO if b.len() >= 16 => {
                        // {u64 code_addr, u64 nr_entry}, then nr_entry × {u64 addr, u32 line,
                        // u32 discrim, NUL-terminated file name}; read whole up to the bound.
                        let addr = rd64(&b[0..8], d.swapped);
                        let nr = rd64(&b[8..16], d.swapped);
                        if let Some(dbg) = d.debug.take() {
                            lines_skipped += dbg.entries.len() as u64 + dbg.lost;
                            // no load took it
                        }
                        let len = (total - 16).min(MAX_DEBUG_RECORD) as usize;
                        let mut data = vec![0u8; len];
                        let n = f.read_at(&mut data, d.offset + 16).unwrap_or(0);
                        data.truncate(n);
                        let (entries, lost) = debug_entries(&data[16.min(data.len())..], nr, d.swapped);
                        match entries.first() {
                            Some(first) => {
                                let source = format!("{}:{}", first.3, first.1);
                                d.debug = Some(PendingDebug { addr, source, entries, lost });
                            }
                            None => lines_skipped += lost,
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
        self.lines_skipped += lines_skipped;
        self.unwind_out.extend(unwind_ops);
        for mut e in found {
            if e.size == 0 || e.start.checked_add(e.size).is_none() {
                self.skipped += 1;
                self.lines_skipped += e.lines.lines.len() as u64;
                continue;
            }
            // The recording's bound on lines.
            let n = e.lines.lines.len() as u64;
            if n > 0 && self.lines.saturating_add(n) > self.limits.lines_total {
                if self.lines_skipped_total == 0 {
                    self.notes.push(format!("JIT source lines: only the first {} of the recording kept", self.limits.lines_total));
                }
                self.lines_skipped_total += n;
                self.lines_skipped += n;
                e.lines = JitLines::default();
            }
            let n = e.lines.lines.len() as u64;
            if self.add(pid, e) {
                self.lines += n;
            } else {
                self.lines_skipped += n;
            }
        }
        more && !self.procs.get(&pid).is_some_and(|p| p.dumps[i].done)
    }
}

/// The entries of a DEBUG_INFO body after its 16-byte header: at most `nr`, as many as
/// `b` holds whole; and how many of `nr` were not read (cut off or malformed).
fn debug_entries(b: &[u8], nr: u64, swapped: bool) -> (Vec<(u64, u32, u32, String)>, u64) {
    let mut out: Vec<(u64, u32, u32, String)> = Vec::new();
    let mut read = 0u64;
    let mut last: Option<String> = None;
    let mut p = 0usize;
    while read < nr && p + 17 <= b.len() {
        let addr = rd64(&b[p..p + 8], swapped);
        let line = rd32(&b[p + 8..p + 12], swapped);
        let discrim = rd32(&b[p + 12..p + 16], swapped);
        let rest = &b[p + 16..];
        let Some(end) = rest.iter().position(|&c| c == 0) else { break };
        read += 1;
        p += 16 + end + 1;
        // perf's convention: a name of the single byte 0xff repeats the previous one.
        last = match &rest[..end] {
            [0xff] => last,
            name => source_file_name(name),
        };
        let Some(file) = &last else { continue }; // not a file name: counted as lost below
        out.push((addr, line, discrim, file.clone()));
    }
    let lost = nr - out.len() as u64;
    (out, lost)
}

/// A DEBUG_INFO file name as shown to users: UTF-8 without control characters, at most
/// [`MAX_NAME`] bytes (cut at a character boundary). Anything else is not a file name a
/// runtime meant (Node 20 was seen writing binary garbage there) and is dropped, counted.
fn source_file_name(name: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(name).ok()?;
    if s.is_empty() || s.chars().any(char::is_control) {
        return None;
    }
    let mut cut = s.len().min(MAX_NAME);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(s[..cut].to_owned())
}

/// V8 (Node, Deno, Chrome: its code's names start with `JS:`) writes DEBUG_INFO addresses
/// 0x40 (an ELF header) past the code they describe, for the layout of `perf inject --jit`
/// files before perf's 2020 fix: its first entry, the function's own position at code
/// offset 0, is at `code_addr + 0x40`. Checked on Node 20 against `perf record` sample
/// addresses (docs/SYMBOLS.md).
const V8_DEBUG_INFO_SHIFT: u64 = 0x40;

/// The line table of code `[addr, addr + size)` named `name` from DEBUG_INFO entries
/// (absolute addresses), and how many entries were left out (outside the code, over the
/// bound).
fn code_lines(addr: u64, size: u64, name: &str, entries: &[(u64, u32, u32, String)]) -> (JitLines, u64) {
    let v8 = name.starts_with("JS:") && entries.iter().all(|e| e.0.checked_sub(addr).is_some_and(|o| o >= V8_DEBUG_INFO_SHIFT));
    let addr = if v8 { addr + V8_DEBUG_INFO_SHIFT } else { addr };
    let inside = entries.iter().filter(|e| e.0.wrapping_sub(addr) < size);
    let outside = entries.len() - inside.clone().count();
    let (t, dropped) = JitLines::build(inside.map(|e| (e.0 - addr, e.1, e.2, e.3.as_str())));
    (t, dropped + outside as u64)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::tests::own_pid;
    use crate::jit::{is_jitdump_path, JitLimits};
    use tailprof_format::Mmap;

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

    /// A DEBUG_INFO body for code at `code`: `nr` announced, then the given entries.
    fn debug_info(code: u64, nr: u64, entries: &[(u64, u32, u32, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&code.to_le_bytes());
        b.extend_from_slice(&nr.to_le_bytes());
        for (addr, line, discrim, file) in entries {
            b.extend_from_slice(&addr.to_le_bytes());
            b.extend_from_slice(&line.to_le_bytes());
            b.extend_from_slice(&discrim.to_le_bytes());
            b.extend_from_slice(file);
            b.push(0);
        }
        b
    }

    /// Issue 23: every DEBUG_INFO entry of a load is kept as its line table (offsets into
    /// the code, file names once per function, perf's `0xff` "same file" name), not only
    /// the first; a CODE_MOVE carries its load's table; an entry outside the code and
    /// entries a record announces but does not hold are counted, as are lines over the
    /// recording's bound (the function keeps its name).
    #[test]
    fn jitdump_debug_info_becomes_the_loads_line_table() {
        let (pid, _serial) = own_pid();
        let (dir, path, mut b) = jitdump_scratch(pid, line!());
        let three: &[(u64, u32, u32, &[u8])] =
            &[(0x5040, 1, 13, b"app.js"), (0x5079, 3, 21, b"\xff"), (0x509c, 7, 12, b"lib.js"), (0x9000, 9, 1, b"app.js")];
        b.extend(rec(JIT_CODE_DEBUG_INFO, 90, &debug_info(0x5000, 6, three)));
        b.extend(rec(JIT_CODE_LOAD, 100, &load(0x5000, 0x100, 7, "hot")));
        let mut mv = Vec::new();
        for w in [pid, pid] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        for w in [0x5000u64, 0x5000, 0x8000, 0x100, 7] {
            mv.extend_from_slice(&w.to_le_bytes());
        }
        b.extend(rec(JIT_CODE_MOVE, 300, &mv));
        // A second function whose lines exceed the recording's bound of 7.
        b.extend(rec(JIT_CODE_DEBUG_INFO, 400, &debug_info(0x6000, 2, &[(0x6000, 5, 0, b"b.js"), (0x6008, 6, 0, b"b.js")])));
        b.extend(rec(JIT_CODE_LOAD, 410, &load(0x6000, 0x10, 8, "cold")));
        std::fs::write(&path, &b).unwrap();
        let mut c = JitCollector::new(JitLimits { lines_total: 7, ..JitLimits::default() }, true);
        c.note_mmap(&Mmap { pid, tid: pid, prot: 5, path: path.display().to_string(), ..Default::default() });
        c.poll(1, true);
        let got = c.take_entries();
        assert_eq!(got.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["hot", "hot", "cold"]);
        let hot = &got[0];
        assert_eq!(hot.source.as_deref(), Some("app.js:1"));
        assert_eq!(hot.lines.files, ["app.js", "lib.js"]);
        let at = |o| hot.lines.at(o);
        assert_eq!(
            (at(0x3f), at(0x40), at(0x78), at(0x79), at(0x9c), at(0xff)),
            (None, Some(("app.js", 1)), Some(("app.js", 1)), Some(("app.js", 3)), Some(("lib.js", 7)), Some(("lib.js", 7)))
        );
        assert_eq!(got[1].origin, JitOrigin::JitMove);
        assert_eq!(got[1].lines, hot.lines, "the move keeps the offsets");
        assert!(got[2].lines.is_empty(), "over the recording's bound");
        // 0x9000 outside the code, 2 announced but missing, 2 over the bound.
        assert_eq!((c.lines(), c.lines_skipped(), c.skipped()), (6, 5, 0));
        assert!(c.take_notes().iter().any(|n| n.contains("only the first 7")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Node 20 was seen writing binary garbage as DEBUG_INFO file names: an entry whose
    /// name is not UTF-8, is empty or holds control characters is dropped and counted,
    /// never shown, and so is a `0xff` "same file" entry after it.
    #[test]
    fn debug_info_entries_with_garbage_file_names_are_dropped_and_counted() {
        let mut b = Vec::new();
        let entries: &[(u64, u32, &[u8])] = &[
            (0x10, 1, b"app.js"),
            (0x20, 2, b"\xc3\x28bad"),
            (0x30, 3, b"a\x01b"),
            (0x40, 4, b""),
            (0x50, 5, b"\xff"),
            (0x60, 6, "caf\u{e9}.js".as_bytes()),
        ];
        for (addr, line, name) in entries {
            b.extend_from_slice(&addr.to_le_bytes());
            b.extend_from_slice(&line.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(name);
            b.push(0);
        }
        let (got, lost) = debug_entries(&b, entries.len() as u64, false);
        let names: Vec<_> = got.iter().map(|e| (e.1, e.3.as_str())).collect();
        assert_eq!(names, [(1, "app.js"), (6, "caf\u{e9}.js")]);
        assert_eq!(lost, 4);
    }

    /// V8's DEBUG_INFO addresses are 0x40 past their code (`JS:` names, no entry before
    /// +0x40): taken back, so the function's first position is at offset 0. Other
    /// writers' addresses are used as they are.
    #[test]
    fn v8_debug_info_addresses_are_taken_back_by_its_elf_header() {
        let entries = vec![(0x5040, 1, 13, "a.js".to_owned()), (0x5079, 3, 21, "a.js".to_owned())];
        let (v8, _) = code_lines(0x5000, 0x100, "JS:*hot a.js:1:13", &entries);
        assert_eq!(v8.lines.iter().map(|l| (l.offset, l.line)).collect::<Vec<_>>(), [(0, 1), (0x39, 3)]);
        let (other, _) = code_lines(0x5000, 0x100, "java.lang.String::hashCode", &entries);
        assert_eq!(other.lines.iter().map(|l| (l.offset, l.line)).collect::<Vec<_>>(), [(0x40, 1), (0x79, 3)]);
        let early = vec![(0x5000, 1, 1, "a.js".to_owned()), (0x5079, 3, 21, "a.js".to_owned())];
        assert_eq!(code_lines(0x5000, 0x100, "JS:*f", &early).0.lines[0].offset, 0, "an entry at +0: as written");
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
}
