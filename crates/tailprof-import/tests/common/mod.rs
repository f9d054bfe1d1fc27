//! Shared helpers for the integration tests: locating the external perf.data corpus
//! (read in place, never copied), importing into memory, and independent oracles
//! (a raw record scan, the quipper text oracles, and `perf report -D`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tailprof_format::{Record, Sample, VecSink};
use tailprof_import::{import_to_sink, ImportOptions, Imported};

/// `/work/shared/testdata/perf`, resolved from this crate's directory. `None` (after
/// printing why) when the corpus is not there, so tests can skip.
pub fn corpus() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/perf");
    if dir.join("README.md").is_file() {
        Some(dir)
    } else {
        tailprof_testkit::skip(
            tailprof_testkit::Need::TestData,
            format_args!("perf.data test corpus not found at {} (test skipped)", dir.display()),
        );
        None
    }
}

/// A corpus file, or `None` (with a message) when the corpus or the file is absent.
pub fn corpus_file(name: &str) -> Option<PathBuf> {
    let p = corpus()?.join(name);
    if p.is_file() {
        Some(p)
    } else {
        // CI (.ci/run) sets TAILPROF_REQUIRE_TESTDATA=1: with the corpus present, a missing
        // file is a failure, not a skip.
        assert!(
            std::env::var_os("TAILPROF_REQUIRE_TESTDATA").is_none_or(|v| v != "1"),
            "corpus file {} not found and TAILPROF_REQUIRE_TESTDATA=1",
            p.display()
        );
        tailprof_testkit::skip(tailprof_testkit::Need::TestData, format_args!("corpus file {} not found (test skipped)", p.display()));
        None
    }
}

pub fn import(path: &Path) -> (Imported, Vec<Record>) {
    let mut sink = VecSink::default();
    let imported =
        import_to_sink(path, &ImportOptions::default(), &mut sink).unwrap_or_else(|e| panic!("import of {} failed: {e}", path.display()));
    (imported, sink.0)
}

pub fn samples(records: &[Record]) -> Vec<&Sample> {
    records.iter().filter_map(|r| if let Record::Sample(s) = r { Some(s) } else { None }).collect()
}

pub fn ip_counts(records: &[Record]) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for s in samples(records) {
        *m.entry(s.ip).or_insert(0) += 1;
    }
    m
}

/// The record-model order invariant: non-decreasing time.
pub fn assert_time_ordered(name: &str, records: &[Record]) {
    let mut last = 0;
    for (i, r) in records.iter().enumerate() {
        assert!(r.time() >= last, "{name}: record {i} has time {} < previous {last}: {r:?}", r.time());
        last = r.time();
    }
}

// ---------------------------------------------------------------------------------------
// Independent raw scan: count records by type by walking the record headers directly
// (decompressing zstd records), without linux-perf-data. Little-endian files only.

fn walk(data: &[u8], counts: &mut BTreeMap<u32, u64>, compressed: &mut Vec<u8>) {
    let mut pos = 0usize;
    while pos + 8 <= data.len() {
        let ty = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap());
        let size = u16::from_le_bytes(data[pos + 6..pos + 8].try_into().unwrap()) as usize;
        assert!(size >= 8, "raw scan: bad record size {size}");
        if pos + size > data.len() {
            break;
        }
        let body = &data[pos + 8..pos + size];
        match ty {
            81 => compressed.extend_from_slice(body),
            83 => {
                let n = u64::from_le_bytes(body[..8].try_into().unwrap()) as usize;
                compressed.extend_from_slice(&body[8..8 + n]);
            }
            _ => *counts.entry(ty).or_insert(0) += 1,
        }
        pos += size;
    }
}

/// Record counts by type, compressed records expanded.
pub fn raw_record_counts(path: &Path) -> BTreeMap<u32, u64> {
    let d = std::fs::read(path).unwrap();
    assert_eq!(&d[..8], b"PERFILE2");
    let header_size = u64::from_le_bytes(d[8..16].try_into().unwrap());
    let data = if header_size == 16 {
        &d[16..]
    } else {
        let off = u64::from_le_bytes(d[40..48].try_into().unwrap()) as usize;
        let size = u64::from_le_bytes(d[48..56].try_into().unwrap()) as usize;
        &d[off..off + size]
    };
    let mut counts = BTreeMap::new();
    let mut compressed = Vec::new();
    walk(data, &mut counts, &mut compressed);
    if !compressed.is_empty() {
        // perf flushes one zstd stream record by record without ending the frame, so
        // the stream is unterminated: keep everything decoded before the end.
        let mut plain = Vec::new();
        let mut dec = zstd::stream::read::Decoder::new(&compressed[..]).expect("zstd");
        let _ = std::io::Read::read_to_end(&mut dec, &mut plain);
        let mut none = Vec::new();
        walk(&plain, &mut counts, &mut none);
    }
    counts
}

// ---------------------------------------------------------------------------------------
// The quipper PerfDataProto text oracles (one field per line).

#[derive(Debug, Default, Clone)]
pub struct Msg {
    pub fields: Vec<(String, String)>,
    pub children: Vec<(String, Msg)>,
}

impl Msg {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }
    pub fn u64(&self, k: &str) -> Option<u64> {
        self.get(k).map(|v| v.parse().unwrap())
    }
    pub fn all(&self, k: &str) -> Vec<&str> {
        self.fields.iter().filter(|(n, _)| n == k).map(|(_, v)| v.as_str()).collect()
    }
    pub fn child(&self, k: &str) -> Option<&Msg> {
        self.children.iter().find(|(n, _)| n == k).map(|(_, m)| m)
    }
    pub fn children(&self, k: &str) -> Vec<&Msg> {
        self.children.iter().filter(|(n, _)| n == k).map(|(_, m)| m).collect()
    }
}

pub fn parse_pb_text(text: &str) -> Msg {
    let mut stack: Vec<(String, Msg)> = vec![(String::new(), Msg::default())];
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "}" {
            let (name, m) = stack.pop().unwrap();
            stack.last_mut().unwrap().1.children.push((name, m));
        } else if let Some(name) = line.strip_suffix(" {") {
            stack.push((name.to_string(), Msg::default()));
        } else if let Some((k, v)) = line.split_once(": ") {
            let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
            stack.last_mut().unwrap().1.fields.push((k.to_string(), v.to_string()));
        }
    }
    assert_eq!(stack.len(), 1, "unbalanced pb_text");
    stack.pop().unwrap().1
}

/// Undo the C escapes of a text-format bytes field (`\ooo` octal, `\n`, `\"`, ...).
pub fn unescape_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        if c.is_ascii_digit() {
            let end = (i + 1..(i + 4).min(b.len())).take_while(|&j| b[j].is_ascii_digit()).last().unwrap() + 1;
            out.push(u8::from_str_radix(std::str::from_utf8(&b[i + 1..end]).unwrap(), 8).unwrap());
            i = end;
        } else {
            out.push(match c {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                other => other,
            });
            i += 2;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// `perf report -D` as an oracle (only where the installed perf can read the file).

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DumpSample {
    pub time: Option<u64>,
    pub cpu: Option<u32>,
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub period: u64,
    pub addr: u64,
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub regs: Vec<u64>,
}

pub fn perf_available() -> bool {
    let ok = Command::new("perf").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfTool, "`perf` is not installed or does not run (test skipped)");
    }
    ok
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("bad hex {s:?}"))
}

/// The samples of `perf report -D`, or `None` when perf cannot read the file.
/// `has_cpu`/`has_time`: whether the dump line starts with the cpu / timestamp.
pub fn perf_dump_samples(path: &Path, has_cpu: bool, has_time: bool) -> Option<Vec<DumpSample>> {
    let out = Command::new("perf").args(["report", "-D", "-i"]).arg(path).output().ok()?;
    if !out.status.success() {
        eprintln!("note: perf report -D failed on {}", path.display());
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<DumpSample> = Vec::new();
    let mut in_regs = false;
    let mut cur: Option<DumpSample> = None;
    for line in text.lines() {
        if let Some(idx) = line.find(": PERF_RECORD_SAMPLE(") {
            v.extend(cur.take());
            in_regs = false;
            let prefix: Vec<&str> = line[..idx].split_whitespace().collect();
            let nums: Vec<&str> = prefix.iter().take_while(|t| !t.starts_with("0x")).copied().collect();
            let mut it = nums.iter();
            let cpu = if has_cpu { it.next().map(|c| c.parse().unwrap()) } else { None };
            let time = if has_time { it.next().map(|c| c.parse().unwrap()) } else { None };
            let rest = &line[idx..];
            let rest = &rest[rest.find("): ").unwrap() + 3..];
            let (pidtid, rest) = rest.split_once(": ").unwrap();
            let (pid, tid) = pidtid.split_once('/').unwrap();
            let toks: Vec<&str> = rest.split_whitespace().collect();
            cur = Some(DumpSample {
                time,
                cpu,
                pid: pid.parse::<i64>().unwrap() as u32,
                tid: tid.parse::<i64>().unwrap() as u32,
                ip: hex(toks[0]),
                period: toks[2].parse().unwrap(),
                addr: hex(toks[4]),
                weight: None,
                data_src: None,
                regs: Vec::new(),
            });
        } else if let Some(s) = cur.as_mut() {
            if let Some(w) = line.strip_prefix("... weight: ") {
                s.weight = Some(w.split(',').next().unwrap().trim().parse().unwrap());
            } else if let Some(d) = line.strip_prefix(" . data_src: ") {
                s.data_src = Some(hex(d));
            } else if line.starts_with("... user regs:") {
                in_regs = true;
            } else if in_regs && line.starts_with(".... ") {
                s.regs.push(hex(line.split_whitespace().last().unwrap()));
            } else if line.starts_with("... ") {
                in_regs = false;
            } else if !line.starts_with('.') {
                v.extend(cur.take());
            }
        }
    }
    v.extend(cur);
    Some(v)
}
