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

/// Body of a JIT chunk: `ULEB count`, then per entry `ULEB pid, ULEB time, u8 origin,
/// ULEB start, ULEB size, string name, string source` (empty source: none).
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
    }
    out
}

/// Parses a JIT chunk body; `None` on damage (the whole chunk is then skipped). Entries
/// of an origin this build does not know are left out.
pub fn decode_jit(body: &[u8]) -> Option<Vec<JitEntry>> {
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
        let Some(origin) = JitOrigin::from_u8(origin) else { continue };
        out.push(JitEntry { pid, time, start, size, origin, name, source: (!source.is_empty()).then_some(source) });
    }
    r.is_empty().then_some(out)
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
            },
            JitEntry {
                pid: 7,
                time: 123_456,
                start: 0x1000,
                size: 8,
                origin: JitOrigin::JitLoad,
                name: "f".into(),
                source: Some("a.js:3".into()),
            },
        ];
        let b = encode_jit(&e);
        assert_eq!(decode_jit(&b).unwrap(), e);
        for cut in 0..b.len() {
            assert_eq!(decode_jit(&b[..cut]), None, "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_jit(&long), None);
    }

    #[test]
    fn long_names_are_clipped_at_a_char_boundary() {
        let s = "é".repeat(MAX_JIT_STRING);
        let c = clip(&s);
        assert!(c.len() <= MAX_JIT_STRING && s.starts_with(c));
    }
}
