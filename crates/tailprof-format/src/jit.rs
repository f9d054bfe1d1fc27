//! JIT code names (FORMAT.md §6.1, chunk kind 5): what a runtime said about the machine
//! code it generated, copied into the trace by the recorder so the trace names JIT
//! frames on its own (after the process and its `/tmp/perf-PID.map` or `jit-PID.dump`
//! are gone).
//!
//! An entry says "from `time` on, `[start, start + size)` of process `pid` holds the
//! function `name`". Perf-map entries have no time (`time == 0`: valid for the whole
//! trace; a later entry for the same address replaces an earlier one); jitdump entries
//! carry the runtime's CODE_LOAD time (a CODE_MOVE becomes an entry at the new address
//! with the move's time).
//!
//! Version 6 adds each jitdump function's line table ([`JitLines`]: every DEBUG_INFO
//! entry, as offsets into the code), so a sample inside the function gets the line of
//! its own address, as a DWARF line table gives it.

use crate::varint::{put_bytes, put_uleb, ByteReader};

/// Where a [`JitEntry`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum JitOrigin {
    /// A line of `/tmp/perf-PID.map` (no time).
    #[default]
    PerfMap = 0,
    /// A jitdump CODE_LOAD record.
    JitLoad = 1,
    /// A jitdump CODE_MOVE record (the code of an earlier load, at a new address).
    JitMove = 2,
}

impl JitOrigin {
    /// From the on-disk code; `None` for a code this build does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(JitOrigin::PerfMap),
            1 => Some(JitOrigin::JitLoad),
            2 => Some(JitOrigin::JitMove),
            _ => None,
        }
    }
}

/// Function `name` occupies `[start, start + size)` in process `pid` from `time` on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JitEntry {
    /// The process as the trace names it (the recorder's PID namespace).
    pub pid: u32,
    /// Trace-clock nanoseconds from which the entry is valid; 0 = the whole trace.
    pub time: u64,
    pub start: u64,
    pub size: u64,
    pub origin: JitOrigin,
    pub name: String,
    /// `file:line` of the code's first instruction (jitdump DEBUG_INFO), when known.
    pub source: Option<String>,
    /// The function's line table (every DEBUG_INFO entry; version 6); empty when unknown.
    pub lines: JitLines,
}

/// One DEBUG_INFO entry: from `offset` bytes into the function's code on (up to the next
/// entry's offset), the code is `files[file]:line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JitLine {
    pub offset: u64,
    pub line: u32,
    /// The runtime's discriminator (V8 writes the column).
    pub discrim: u32,
    /// Index into [`JitLines::files`].
    pub file: u32,
}

/// A JIT function's line table: its file names (interned per function) and its entries,
/// sorted by offset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JitLines {
    pub files: Vec<String>,
    pub lines: Vec<JitLine>,
}

/// Most line-table entries kept per function (more are counted, `LossKind::JitLines`).
pub const MAX_JIT_LINES: usize = 1 << 16;
/// Most distinct file names per function's line table.
pub const MAX_JIT_FILES: usize = 256;

impl JitLines {
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Builds a table from `(code offset, line, discrim, file)` entries in any order,
    /// interning file names; entries past [`MAX_JIT_LINES`] or with a file past
    /// [`MAX_JIT_FILES`] are left out. Returns the table and how many were left out.
    pub fn build<'a>(entries: impl IntoIterator<Item = (u64, u32, u32, &'a str)>) -> (JitLines, u64) {
        let mut t = JitLines::default();
        let mut dropped = 0u64;
        for (offset, line, discrim, file) in entries {
            if t.lines.len() >= MAX_JIT_LINES {
                dropped += 1;
                continue;
            }
            let file = clip(file);
            let idx = match t.files.iter().rposition(|f| f == file) {
                Some(i) => i,
                None if t.files.len() < MAX_JIT_FILES => {
                    t.files.push(file.to_owned());
                    t.files.len() - 1
                }
                None => {
                    dropped += 1;
                    continue;
                }
            };
            t.lines.push(JitLine { offset, line, discrim, file: idx as u32 });
        }
        // Stable: of entries at one offset the runtime's last one wins in `at`.
        t.lines.sort_by_key(|l| l.offset);
        (t, dropped)
    }

    /// File and line of code offset `offset`: the entry with the greatest offset ≤
    /// `offset` (of equal offsets, the last); `None` before the first entry.
    pub fn at(&self, offset: u64) -> Option<(&str, u32)> {
        let i = self.lines.partition_point(|l| l.offset <= offset).checked_sub(1)?;
        let l = &self.lines[i];
        Some((self.files.get(l.file as usize)?.as_str(), l.line))
    }

    /// Index of the entry [`Self::at`] uses for `offset`.
    pub fn index_at(&self, offset: u64) -> Option<usize> {
        self.lines.partition_point(|l| l.offset <= offset).checked_sub(1)
    }

    /// Encoded size, about (for chunk budgets).
    pub fn approx_bytes(&self) -> usize {
        self.files.iter().map(|f| f.len() + 2).sum::<usize>() + self.lines.len() * 8 + 2
    }
}

/// Longest name or source string stored (longer ones are cut at a char boundary).
pub const MAX_JIT_STRING: usize = 4096;
/// Most entries in one JIT chunk (the writer starts another chunk past it).
pub const MAX_JIT_CHUNK_ENTRIES: usize = 1 << 16;

/// Cuts `s` to at most [`MAX_JIT_STRING`] bytes at a char boundary.
pub fn clip(s: &str) -> &str {
    if s.len() <= MAX_JIT_STRING {
        return s;
    }
    let mut n = MAX_JIT_STRING;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// Body of a JIT chunk (version 6): `ULEB count`, then per entry `ULEB pid, ULEB time,
/// u8 origin, ULEB start, ULEB size, string name, string source` (empty source: none),
/// then its line table: `ULEB nfiles, nfiles × string, ULEB nlines, nlines × (ULEB
/// offset delta, ULEB line, ULEB discrim, ULEB file)` (FORMAT.md §6.1).
pub fn encode_jit(entries: &[JitEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uleb(&mut out, entries.len() as u64);
    for e in entries {
        put_uleb(&mut out, e.pid as u64);
        put_uleb(&mut out, e.time);
        out.push(e.origin as u8);
        put_uleb(&mut out, e.start);
        put_uleb(&mut out, e.size);
        put_bytes(&mut out, clip(&e.name).as_bytes());
        put_bytes(&mut out, e.source.as_deref().map(clip).unwrap_or("").as_bytes());
        let (files, lines) = (&e.lines.files[..e.lines.files.len().min(MAX_JIT_FILES)], &e.lines.lines);
        put_uleb(&mut out, files.len() as u64);
        for f in files {
            put_bytes(&mut out, clip(f).as_bytes());
        }
        // Entries past the bound, out of order or naming no file are not written.
        let mut prev = 0u64;
        let keep = |l: &&JitLine| (l.file as usize) < files.len();
        let mut kept: Vec<&JitLine> = lines.iter().filter(keep).take(MAX_JIT_LINES).collect();
        kept.sort_by_key(|l| l.offset);
        put_uleb(&mut out, kept.len() as u64);
        for l in kept {
            put_uleb(&mut out, l.offset - prev);
            prev = l.offset;
            put_uleb(&mut out, l.line as u64);
            put_uleb(&mut out, l.discrim as u64);
            put_uleb(&mut out, l.file as u64);
        }
    }
    out
}

/// Parses a JIT chunk body of a file of format `version` (line tables from version 6 on);
/// `None` on damage (the whole chunk is then skipped). Entries of an origin this build
/// does not know are left out.
pub fn decode_jit(body: &[u8], version: u16) -> Option<Vec<JitEntry>> {
    let mut r = ByteReader::new(body);
    // Each entry takes at least 7 bytes.
    let n = r.len_at_most(body.len() / 7)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let pid = r.uleb_u32()?;
        let time = r.uleb()?;
        let origin = r.u8()?;
        let start = r.uleb()?;
        let size = r.uleb()?;
        let name = r.string()?;
        let source = r.string()?;
        if name.len() > MAX_JIT_STRING || source.len() > MAX_JIT_STRING {
            return None;
        }
        let lines = if version >= 6 { decode_lines(&mut r)? } else { JitLines::default() };
        let Some(origin) = JitOrigin::from_u8(origin) else { continue };
        out.push(JitEntry { pid, time, start, size, origin, name, source: (!source.is_empty()).then_some(source), lines });
    }
    r.is_empty().then_some(out)
}

/// One entry's line table (version 6); `None` on damage.
fn decode_lines(r: &mut ByteReader) -> Option<JitLines> {
    // A file name takes at least 1 byte, a line 4.
    let nfiles = r.len_at_most(MAX_JIT_FILES)?;
    let mut files = Vec::with_capacity(nfiles.min(r.remaining()));
    for _ in 0..nfiles {
        let f = r.string()?;
        if f.len() > MAX_JIT_STRING {
            return None;
        }
        files.push(f);
    }
    let nlines = r.len_at_most(MAX_JIT_LINES.min(r.remaining() / 4))?;
    let mut lines = Vec::with_capacity(nlines);
    let mut offset = 0u64;
    for _ in 0..nlines {
        offset = offset.checked_add(r.uleb()?)?;
        let line = r.uleb_u32()?;
        let discrim = r.uleb_u32()?;
        let file = r.uleb_u32()?;
        if file as usize >= files.len() {
            return None;
        }
        lines.push(JitLine { offset, line, discrim, file });
    }
    Some(JitLines { files, lines })
}

/// Which runtime an executable name (a process's `comm` or its executable's file name)
/// is, and the exact way to make it publish the names of its generated code
/// (docs/SYMBOLS.md, "Runtimes and flags"); shared by `record` and `report`. `None` for names of no known runtime.
pub fn runtime_advice(exe: &str) -> Option<(&'static str, &'static str)> {
    let name = exe.rsplit('/').next().unwrap_or(exe);
    let python_minor = name.strip_prefix("python3.").and_then(|m| m.parse::<u32>().ok());
    Some(match name {
        "node" | "nodejs" => ("node", "run node with --perf-basic-prof (a perf map) or --perf-prof (a jitdump)"),
        "java" => (
            "java",
            "add -XX:+PreserveFramePointer and run `jcmd PID Compiler.perfmap` while recording, or start it with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit",
        ),
        "dotnet" => ("dotnet", "start it with DOTNET_PerfMapEnabled=1 in its environment (perf map and jitdump)"),
        _ if python_minor.is_some_and(|m| m >= 12) || name == "python3" => {
            ("python", "python 3.12 or later: run it with -X perf (or PYTHONPERFSUPPORT=1 in its environment)")
        }
        _ => return None,
    })
}

/// One perf-map line `START SIZE name` (hex, with or without `0x`); `None` for a line
/// that is not one (an empty range, a range that wraps, no name). Used by the recorder
/// and `import`.
pub fn parse_map_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let sp = line.iter().position(|&b| b == b' ')?;
    let (a, rest) = (&line[..sp], &line[sp + 1..]);
    let sp = rest.iter().position(|&b| b == b' ')?;
    let (b, name) = (&rest[..sp], &rest[sp + 1..]);
    let hex = |s: &[u8]| {
        let s = std::str::from_utf8(s).ok()?;
        let s = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        u64::from_str_radix(s, 16).ok()
    };
    let (start, size) = (hex(a)?, hex(b)?);
    if name.is_empty() || size == 0 || start.checked_add(size).is_none() {
        return None;
    }
    Some((start, size, String::from_utf8_lossy(name).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_none() {
        let e = vec![
            JitEntry {
                pid: 7,
                time: 0,
                start: 0x7f00_0000_1000,
                size: 0x40,
                origin: JitOrigin::PerfMap,
                name: "LazyCompile:*hot a.js:1".into(),
                source: None,
                lines: JitLines::default(),
            },
            JitEntry {
                pid: 7,
                time: 123_456,
                start: 0x1000,
                size: 8,
                origin: JitOrigin::JitLoad,
                name: "f".into(),
                source: Some("a.js:3".into()),
                lines: JitLines::build([(0, 3, 1, "a.js"), (0x10, 5, 2, "b.js"), (4, 4, 0, "a.js")]).0,
            },
        ];
        let b = encode_jit(&e);
        assert_eq!(decode_jit(&b, 6).unwrap(), e);
        for cut in 0..b.len() {
            assert_eq!(decode_jit(&b[..cut], 6), None, "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_jit(&long, 6), None);
    }

    /// Version 4 and 5 chunks have no line tables: read as before (the version-6 layout
    /// would take the next entry's pid for a file count).
    #[test]
    fn version_5_chunks_read_without_line_tables() {
        let mut b = Vec::new();
        put_uleb(&mut b, 2);
        for (name, source) in [("f", "a.js:3"), ("g", "")] {
            for v in [7u64, 100, 1] {
                put_uleb(&mut b, v);
            }
            b.pop();
            b.push(1); // origin
            put_uleb(&mut b, 0x1000);
            put_uleb(&mut b, 0x40);
            put_bytes(&mut b, name.as_bytes());
            put_bytes(&mut b, source.as_bytes());
        }
        let got = decode_jit(&b, 5).unwrap();
        assert_eq!(
            got.iter().map(|e| (e.name.as_str(), e.source.as_deref(), e.lines.is_empty())).collect::<Vec<_>>(),
            [("f", Some("a.js:3"), true), ("g", None, true)]
        );
        assert_eq!(decode_jit(&b, 6), None);
    }

    /// The line of an offset is the entry with the greatest offset at or before it;
    /// file names are kept once per function; a file index past the names is damage.
    #[test]
    fn line_tables_give_the_line_of_each_offset() {
        let (t, dropped) =
            JitLines::build([(0x40, 1, 13, "app.js"), (0x79, 3, 21, "app.js"), (0x9c, 7, 12, "lib.js"), (0xba, 4, 23, "app.js")]);
        assert_eq!((t.files.len(), dropped), (2, 0));
        assert_eq!(t.at(0x3f), None);
        assert_eq!(t.at(0x40), Some(("app.js", 1)));
        assert_eq!(t.at(0x78), Some(("app.js", 1)));
        assert_eq!(t.at(0x79), Some(("app.js", 3)));
        assert_eq!(t.at(0xa0), Some(("lib.js", 7)));
        assert_eq!(t.at(0x1000), Some(("app.js", 4)));
        let e =
            JitEntry { pid: 1, time: 1, start: 0x1000, size: 0x100, origin: JitOrigin::JitLoad, name: "f".into(), source: None, lines: t };
        let mut b = encode_jit(&[e]);
        // The last byte is the last entry's file index: point it past the two names.
        *b.last_mut().unwrap() = 2;
        assert_eq!(decode_jit(&b, 6), None);
        let many = (0..MAX_JIT_LINES as u64 + 3).map(|i| (i, 1, 0, "a.js"));
        assert_eq!(JitLines::build(many).1, 3);
    }

    #[test]
    fn long_names_are_clipped_at_a_char_boundary() {
        let s = "é".repeat(MAX_JIT_STRING);
        let c = clip(&s);
        assert!(c.len() <= MAX_JIT_STRING && s.starts_with(c));
    }
}
