//! Helpers shared by the integration tests: build small programs with the system C/C++
//! compiler, find symbol addresses with `nm`, and synthesize the MMAP record the loader
//! would have produced for the executable segment.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tailprof_analyze::{FlatProfile, ProfileBuilder, ProfileOptions, Symbolizer, SymbolizerOptions};
use tailprof_format::{CpuMode, Mmap, Record, Sample, Sink, TraceHeader};

/// Compile `src` (C or C++ by `compiler`) into `dir/out` with `flags`. `None` (and a
/// note on stderr) when the compiler is not installed.
pub fn compile(compiler: &str, dir: &Path, name: &str, src: &str, flags: &[&str]) -> Option<PathBuf> {
    let ext = if compiler == "c++" { "cc" } else { "c" };
    let src_path = dir.join(format!("{name}.{ext}"));
    std::fs::write(&src_path, src).unwrap();
    let out = dir.join(name);
    let status = match Command::new(compiler).args(flags).arg("-o").arg(&out).arg(&src_path).status() {
        Ok(s) => s,
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("cannot run {compiler}: {e}"));
            return None;
        }
    };
    assert!(status.success(), "{compiler} failed on {name}");
    Some(out)
}

/// Address of `sym` per `nm` (exact symbol name, mangled for C++).
pub fn nm(path: &Path, sym: &str) -> u64 {
    let out = Command::new("nm").arg(path).output().expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if let (Some(addr), Some(_kind), Some(name)) = (f.next(), f.next(), f.next()) {
            if name == sym {
                return u64::from_str_radix(addr, 16).unwrap();
            }
        }
    }
    panic!("{sym} not in nm output of {}", path.display());
}

/// The executable PT_LOAD segment: (p_offset, p_vaddr, p_memsz), read with tailprof-elf
/// (tested on its own against gcc output and `nm`).
pub fn exec_segment(path: &Path) -> (u64, u64, u64) {
    let f = std::fs::File::open(path).unwrap();
    let elf = tailprof_elf::Elf::parse(&f).unwrap();
    let mut headers = elf.program_headers().unwrap().map(Result::unwrap);
    match headers.find(|p| p.kind == tailprof_elf::PT_LOAD && p.flags & tailprof_elf::PF_X != 0) {
        Some(p) => (p.offset, p.vaddr, p.memsz),
        None => panic!("no executable PT_LOAD in {}", path.display()),
    }
}

pub const PAGE: u64 = 0x1000;

/// The MMAP record of the executable segment of `path` loaded at `base` (0 for
/// non-PIE executables), as the kernel reports it.
pub fn exec_mmap(pid: u32, path: &Path, base: u64, build_id: Option<Vec<u8>>) -> Mmap {
    let (off, vaddr, memsz) = exec_segment(path);
    let start = base + (vaddr & !(PAGE - 1));
    let end = (base + vaddr + memsz + PAGE - 1) & !(PAGE - 1);
    Mmap {
        time: 0,
        pid,
        tid: pid,
        start,
        len: end - start,
        pgoff: off & !(PAGE - 1),
        prot: 5,
        cpumode: CpuMode::User,
        path: path.to_str().unwrap().to_owned(),
        build_id,
    }
}

pub fn sample(time: u64, pid: u32, ip: u64) -> Sample {
    Sample { time, pid, tid: pid, ip, period: 1000, cpumode: CpuMode::User, ..Default::default() }
}

pub fn user_samples(pid: u32, ip: u64, n: usize) -> Vec<Record> {
    (0..n).map(|i| Record::Sample(sample(10 + i as u64, pid, ip))).collect()
}

/// Run `records` through a profile builder and finish it.
pub fn profile(records: &[Record], opts: &ProfileOptions, sym: SymbolizerOptions) -> FlatProfile {
    profile_with_header(&TraceHeader::default(), records, opts, sym)
}

pub fn profile_with_header(header: &TraceHeader, records: &[Record], opts: &ProfileOptions, sym: SymbolizerOptions) -> FlatProfile {
    let mut b = ProfileBuilder::new(header, opts).unwrap();
    for r in records {
        b.handle_record(r);
    }
    b.finish(&mut Symbolizer::new(sym))
}

/// (name, samples) of every row.
pub fn rows(p: &FlatProfile) -> Vec<(String, u64)> {
    p.rows.iter().map(|r| (r.name.clone(), r.samples)).collect()
}

/// Build-id of a file per blazesym (to fake a matching trace build-id).
pub fn build_id(path: &Path) -> Vec<u8> {
    blazesym_build_id(path).expect("binary has a build-id")
}

fn blazesym_build_id(path: &Path) -> Option<Vec<u8>> {
    // Read the note ourselves with readelf to stay independent of the code under test.
    let out = Command::new("readelf").arg("-n").arg(path).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: "))?.trim().to_owned();
    Some((0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect())
}
