//! The unwinder's own fixtures (framehop-style): a small C program built by the test with
//! `gcc -O2 -fomit-frame-pointer` (no frame pointers to fall back on: only the CFI the
//! unwinder reads through `tailprof-elf` can find the callers) stops in a known call chain
//! `main → a1 → b2 → c3 → snap`, and writes its registers, a copy of its stack (as perf's
//! `PERF_SAMPLE_STACK_USER` would) and its `/proc/self/maps`. The test feeds the maps to
//! the unwinder as MMAP records, unwinds the copy, names each frame from the program's
//! symbol table and compares with the expected frames.
#![cfg(target_arch = "x86_64")]

use std::path::{Path, PathBuf};

use tailprof_elf::{Elf, PF_X, PT_LOAD, SHT_SYMTAB, STT_FUNC};
use tailprof_format::{CpuMode, Frame, Mmap, Record, StackStatus};
use tailprof_unwind::{open_host_file, Limits, Mapping, Unwinder, UserRegs};

const PROGRAM: &str = r#"
#include <stdint.h>
#include <stdio.h>

static uint64_t stack_end(uint64_t sp) {
    FILE *m = fopen("/proc/self/maps", "r");
    char line[1024];
    unsigned long lo, hi, end = 0;
    while (m && fgets(line, sizeof line, m))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= sp && sp < hi) end = hi;
    if (m) fclose(m);
    return end;
}

__attribute__((noipa)) void snap(const char *out) {
    uint64_t ip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
    uint64_t len = stack_end(sp) - sp;
    if (len > 65536) len = 65536;
    FILE *f = fopen(out, "wb");
    fwrite(&ip, 8, 1, f); fwrite(&sp, 8, 1, f); fwrite(&bp, 8, 1, f); fwrite(&len, 8, 1, f);
    fwrite((const void *)sp, 1, len, f);
    FILE *m = fopen("/proc/self/maps", "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, m)) > 0) fwrite(buf, 1, n, f);
    fclose(m);
    fclose(f);
}

__attribute__((noipa)) int c3(const char *o, int x) { snap(o); __asm__ volatile(""); return x + 3; }
__attribute__((noipa)) int b2(const char *o, int x) { int r = c3(o, x * 2); __asm__ volatile(""); return r + 2; }
__attribute__((noipa)) int a1(const char *o, int x) { int r = b2(o, x + 1); __asm__ volatile(""); return r * 5; }
int main(int argc, char **argv) { int r = a1(argv[1], argc); printf("%d\n", r); return 0; }
"#;

const EXPECTED: [&str; 5] = ["snap", "c3", "b2", "a1", "main"];

/// Build and run the program; (binary, registers, stack copy, maps text).
fn capture(dir: &Path) -> Option<(PathBuf, UserRegs, Vec<u8>, String)> {
    let cc = tailprof_testkit::c_compiler()?;
    let src = dir.join("chain.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let bin = dir.join("chain");
    let st = std::process::Command::new(cc)
        .args(["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-g0", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "the fixture program must build");
    let out = dir.join("snap.bin");
    let st = std::process::Command::new(&bin).arg(&out).stdout(std::process::Stdio::null()).status().unwrap();
    assert!(st.success());
    let b = std::fs::read(&out).unwrap();
    let word = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let (ip, sp, fp, len) = (word(0), word(1), word(2), word(3) as usize);
    let stack = b[32..32 + len].to_vec();
    let maps = String::from_utf8_lossy(&b[32 + len..]).into_owned();
    Some((bin, UserRegs { ip, sp, fp, lr: 0 }, stack, maps))
}

/// MMAP records of the executable mappings in a maps text.
fn mmaps(pid: u32, maps: &str) -> Vec<Record> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') {
            continue;
        }
        let (s, e) = f[0].split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap());
        out.push(Record::Mmap(Mmap {
            pid,
            tid: pid,
            start,
            len: end - start,
            pgoff: u64::from_str_radix(f[2], 16).unwrap(),
            prot: 5,
            cpumode: CpuMode::User,
            path: f[5].to_string(),
            ..Default::default()
        }));
    }
    out
}

/// The function of `bin` a frame is in (return addresses looked up one byte back), or
/// `?` for frames elsewhere.
fn names(bin: &Path, maps: &str, frames: &[Frame]) -> Vec<String> {
    let f = std::fs::File::open(bin).unwrap();
    let elf = Elf::parse(&f).unwrap();
    let segs: Vec<_> = elf.program_headers().unwrap().map(Result::unwrap).filter(|p| p.kind == PT_LOAD && p.flags & PF_X != 0).collect();
    let t = elf.symbol_table(SHT_SYMTAB).unwrap().expect("the fixture has a .symtab");
    let mut strs = elf.strings(&t);
    let mut funcs = Vec::new();
    for s in elf.symbols(&t) {
        let s = s.unwrap();
        if s.kind() == STT_FUNC && s.size > 0 {
            let n = strs.get(s.name.into()).unwrap().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
            funcs.push((s.value, s.size, n));
        }
    }
    let path = bin.to_str().unwrap();
    let mut recs = mmaps(1, maps).into_iter().filter_map(|r| match r {
        Record::Mmap(m) if m.path == path => Some(m),
        _ => None,
    });
    let ours: Vec<Mmap> = recs.by_ref().collect();
    frames
        .iter()
        .enumerate()
        .map(|(i, fr)| {
            let ip = if i == 0 { fr.ip } else { fr.ip - 1 };
            let Some(m) = ours.iter().find(|m| m.start <= ip && ip < m.start + m.len) else {
                return "?".to_string();
            };
            let off = ip - m.start + m.pgoff;
            let Some(p) = segs.iter().find(|p| p.offset <= off && off < p.offset + p.filesz) else {
                return "?".to_string();
            };
            let vaddr = off - p.offset + p.vaddr;
            funcs.iter().find(|(v, s, _)| *v <= vaddr && vaddr < v + s).map_or("?".to_string(), |f| f.2.clone())
        })
        .collect()
}

fn unwind(u: &mut Unwinder, maps: &str, regs: &UserRegs, stack: &[u8]) -> (Vec<Frame>, StackStatus) {
    for r in mmaps(42, maps) {
        u.observe(&r, None);
    }
    let mut out = Vec::new();
    let st = u.unwind(42, regs, stack, &mut out);
    (out, st)
}

#[test]
fn o2_without_frame_pointers_unwinds_through_cfi_to_the_outermost_frame() {
    let dir = tempfile::tempdir().unwrap();
    let Some((bin, regs, stack, maps)) = capture(dir.path()) else {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no C compiler for the unwinder's fixture program");
        return;
    };
    let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
    let (frames, status) = unwind(&mut u, &maps, &regs, &stack);
    let got = names(&bin, &maps, &frames);
    assert_eq!(&got[..EXPECTED.len().min(got.len())], &EXPECTED[..], "frames: {got:?}, status {status:?}");
    assert_eq!(status, StackStatus::Complete, "frames: {got:?}");
    assert!(u.stats().files_read >= 2, "the program and libc: {:?}", u.stats());

    // The control that shows the test can fail: without the program's unwind
    // information (its file refused) the walk cannot find the callers of `snap`.
    let refuse = bin.clone();
    let opener = move |pid: u32, m: &Mapping| {
        if Path::new(&*m.path) == refuse {
            return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "refused by the test"));
        }
        open_host_file(pid, m)
    };
    let mut u = Unwinder::new(Box::new(opener), Limits::default());
    let (frames, status) = unwind(&mut u, &maps, &regs, &stack);
    let got = names(&bin, &maps, &frames);
    assert_ne!(got.get(..EXPECTED.len()), Some(&EXPECTED.map(String::from)[..]), "{got:?}");
    assert_ne!(status, StackStatus::Complete);

    // A stack copy cut short: the walk says so instead of inventing frames.
    let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
    let (frames, status) = unwind(&mut u, &maps, &regs, &stack[..64.min(stack.len())]);
    assert_eq!(status, StackStatus::CopyExhausted, "{:?}", names(&bin, &maps, &frames));
    assert_eq!(names(&bin, &maps, &frames)[0], "snap");
}

/// The same snapshot after the program's process exec'd (its mappings gone) and after it
/// exited (still resolvable: late samples), through the one record glue.
#[test]
fn exec_forgets_exit_keeps_the_mappings() {
    let dir = tempfile::tempdir().unwrap();
    let Some((bin, regs, stack, maps)) = capture(dir.path()) else {
        tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, "no C compiler for the unwinder's fixture program");
        return;
    };
    let mut u = Unwinder::new(Box::new(open_host_file), Limits::default());
    unwind(&mut u, &maps, &regs, &stack);
    u.observe(&Record::Exit(tailprof_format::Task { pid: 42, tid: 42, ppid: 1, ptid: 1, time: 1 }), None);
    let mut out = Vec::new();
    assert_eq!(u.unwind(42, &regs, &stack, &mut out), StackStatus::Complete, "a late sample of an exited process");
    assert_eq!(names(&bin, &maps, &out)[..5], EXPECTED);
    u.observe(&Record::Comm(tailprof_format::Comm { pid: 42, tid: 42, exec: true, comm: "x".into(), time: 2 }), None);
    out.clear();
    assert_eq!(u.unwind(42, &regs, &stack, &mut out), StackStatus::NoUnwindInfo);
    assert_eq!(out, [Frame::user(regs.ip)]);
}
