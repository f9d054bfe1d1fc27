//! End-to-end symbolization through synthetic address spaces and real ELF files built
//! with the system compiler: PIE, non-PIE, a shared library, C++ demangling, stripped
//! binaries and build-id checks.

mod common;

use common::*;
use tailprof_analyze::profile::GroupBy;
use tailprof_analyze::{ProfileOptions, SymbolizerOptions};
use tailprof_format::Record;

const PROG: &str = r#"
__attribute__((noinline)) int alpha(int x) { for (int i = 0; i < x; i++) __asm__ volatile(""); return x * 3; }
__attribute__((noinline)) int beta(int x) { return alpha(x) + 1; }
int main(int argc, char **argv) { (void)argv; return beta(argc); }
"#;

fn opts() -> ProfileOptions {
    ProfileOptions { by: GroupBy::Function, event: None, ..Default::default() }
}

/// Samples: 3 in alpha (at +4 inside it), 2 in beta (at its first byte).
fn two_function_profile(exe: &std::path::Path, base: u64, sym: SymbolizerOptions) -> tailprof_analyze::FlatProfile {
    let (alpha, beta) = (nm(exe, "alpha"), nm(exe, "beta"));
    let mut recs = vec![Record::Mmap(exec_mmap(100, exe, base, None))];
    recs.extend(user_samples(100, base + alpha + 4, 3));
    recs.extend(user_samples(100, base + beta, 2));
    profile(&recs, &opts(), sym)
}

#[test]
fn pie_executable() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile("cc", dir.path(), "pie", PROG, &["-O1", "-g", "-fPIE", "-pie"]) else { return };
    let p = two_function_profile(&exe, 0x5555_5555_4000, SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("alpha".into(), 3), ("beta".into(), 2)]);
    assert_eq!(p.rows[0].binary.as_deref(), exe.to_str());
    assert!((p.rows[0].percent - 60.0).abs() < 1e-9);
    assert_eq!(p.samples, 5);
    assert!(p.unknown.is_empty(), "{:?}", p.unknown);
}

#[test]
fn non_pie_executable() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile("cc", dir.path(), "nopie", PROG, &["-O1", "-g", "-fno-PIE", "-no-pie"]) else { return };
    // Non-PIE: loaded at its link address; file offsets differ from virtual addresses.
    let (off, vaddr, _) = exec_segment(&exe);
    assert_ne!(off, vaddr, "expected a non-PIE layout");
    let p = two_function_profile(&exe, 0, SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("alpha".into(), 3), ("beta".into(), 2)]);
}

#[test]
fn elf_symbols_without_dwarf() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile("cc", dir.path(), "nodebug", PROG, &["-O1"]) else { return };
    let sym = SymbolizerOptions { debug_syms: false, ..Default::default() };
    let p = two_function_profile(&exe, 0x5600_0000_0000, sym);
    assert_eq!(rows(&p), vec![("alpha".into(), 3), ("beta".into(), 2)]);
}

#[test]
fn shared_library() {
    let dir = tempfile::tempdir().unwrap();
    let lib_src = r#"
__attribute__((noinline)) int lib_one(int x) { return x * 7; }
__attribute__((noinline)) int lib_two(int x) { return lib_one(x) - 1; }
"#;
    let Some(lib) = compile("cc", dir.path(), "libtp.so", lib_src, &["-O1", "-g", "-shared", "-fPIC"]) else {
        return;
    };
    let Some(exe) = compile("cc", dir.path(), "main", PROG, &["-O1", "-g"]) else { return };
    let (exe_base, lib_base) = (0x5555_5555_4000, 0x7f12_3456_0000);
    let mut recs = vec![Record::Mmap(exec_mmap(7, &exe, exe_base, None)), Record::Mmap(exec_mmap(7, &lib, lib_base, None))];
    recs.extend(user_samples(7, lib_base + nm(&lib, "lib_two") + 1, 4));
    recs.extend(user_samples(7, lib_base + nm(&lib, "lib_one"), 1));
    recs.extend(user_samples(7, exe_base + nm(&exe, "beta"), 2));
    let p = profile(&recs, &opts(), SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("lib_two".into(), 4), ("beta".into(), 2), ("lib_one".into(), 1)]);
    assert_eq!(p.rows[0].binary.as_deref(), lib.to_str());

    // By binary: no symbolization, one row per file.
    let by_bin = profile(&recs, &ProfileOptions { by: GroupBy::Binary, event: None, ..Default::default() }, SymbolizerOptions::default());
    assert_eq!(rows(&by_bin), vec![("libtp.so".into(), 5), ("main".into(), 2)]);
}

#[test]
fn system_libc_memcpy_or_similar() {
    // A real distro library (usually stripped of .symtab; named through .dynsym).
    let candidates = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
        "/usr/lib64/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
    ];
    let Some(libc) = candidates.iter().map(std::path::Path::new).find(|p| p.exists()) else {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "no libc.so.6 found");
        return;
    };
    let out = std::process::Command::new("nm").arg("-D").arg("--defined-only").arg(libc).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let addr_of = |want: &str| {
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // binutils >= 2.35 prints dynamic symbols with their version: getpid@@GLIBC_2.2.5.
            let name = f.get(2).map(|n| n.split('@').next().unwrap_or(n));
            (f.len() == 3 && (f[1] == "T" || f[1] == "W") && name == Some(want)).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
    };
    let Some(getpid) = addr_of("getpid") else {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, format_args!("getpid not exported by {}", libc.display()));
        return;
    };
    let base = 0x7f00_0000_0000;
    let mut recs = vec![Record::Mmap(exec_mmap(1, libc, base, None))];
    recs.extend(user_samples(1, base + getpid, 2));
    let p = profile(&recs, &opts(), SymbolizerOptions::default());
    assert_eq!(p.rows.len(), 1);
    // glibc may export getpid as an alias of __getpid; either name is right.
    assert!(p.rows[0].name.ends_with("getpid"), "{:?}", p.rows);
}

#[test]
fn cpp_demangling() {
    let dir = tempfile::tempdir().unwrap();
    let src = r#"
namespace ns {
template <typename T> struct Box { T v; __attribute__((noinline)) T get() const { return v * 2; } };
__attribute__((noinline)) int compute(int x) { Box<int> b{x}; return b.get() + 1; }
}
int main(int argc, char**) { return ns::compute(argc); }
"#;
    for (name, flags, debug_syms) in [("cxx_dwarf", &["-O1", "-g"][..], true), ("cxx_elf", &["-O1"][..], false)] {
        let Some(exe) = compile("c++", dir.path(), name, src, flags) else { return };
        let base = 0x5555_0000_0000;
        let mut recs = vec![Record::Mmap(exec_mmap(3, &exe, base, None))];
        recs.extend(user_samples(3, base + nm(&exe, "_ZN2ns7computeEi"), 2));
        recs.extend(user_samples(3, base + nm(&exe, "_ZNK2ns3BoxIiE3getEv"), 1));
        let p = profile(&recs, &opts(), SymbolizerOptions { debug_syms, ..Default::default() });
        let names: Vec<String> = p.rows.iter().map(|r| r.name.clone()).collect();
        assert_eq!(names.len(), 2, "{name}: {names:?}");
        assert!(names[0].starts_with("ns::compute"), "{name}: {names:?}");
        assert!(names[1].starts_with("ns::Box<int>::get"), "{name}: {names:?}");
    }
}

#[test]
fn stripped_binary_gives_reasoned_unknowns() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile("cc", dir.path(), "stripped", PROG, &["-O1", "-s"]) else { return };
    let (off, vaddr, _) = exec_segment(&exe);
    let base = 0x5555_5555_4000;
    // Somewhere inside the text segment (no symbols say what).
    let ip = base + vaddr + 0x10;
    let mut recs = vec![Record::Mmap(exec_mmap(9, &exe, base, None))];
    recs.extend(user_samples(9, ip, 3));
    let p = profile(&recs, &opts(), SymbolizerOptions::default());
    assert_eq!(p.rows.len(), 1);
    let expect = format!("[unknown] stripped+{:#x}", off + 0x10);
    assert_eq!(p.rows[0].name, expect);
    assert!(p.rows[0].unknown_reason.is_some());
    assert_eq!(p.unknown.len(), 1);
    assert_eq!(p.unknown[0].samples, 3);
}

#[test]
fn build_id_checked() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile("cc", dir.path(), "bid", PROG, &["-O1", "-g", "-Wl,--build-id"]) else { return };
    let good = build_id(&exe);
    let alpha = nm(&exe, "alpha");
    let base = 0x5555_5555_4000;
    let run = |bid: Vec<u8>| {
        let mut recs = vec![Record::Mmap(exec_mmap(1, &exe, base, Some(bid)))];
        recs.extend(user_samples(1, base + alpha, 1));
        profile(&recs, &opts(), SymbolizerOptions::default())
    };
    assert_eq!(rows(&run(good.clone())), vec![("alpha".into(), 1)]);

    let mut bad = good.clone();
    bad[0] ^= 0xff;
    let p = run(bad);
    assert!(p.rows[0].name.starts_with("[unknown] bid+0x"), "{:?}", p.rows);
    let reason = p.rows[0].unknown_reason.as_deref().unwrap();
    assert!(reason.contains("build-id mismatch"), "{reason}");
    assert!(reason.contains(&tailprof_analyze::symbolize::build_id_hex(&good)), "{reason}");

    // The trace's build-id table is used when the MMAP record has none.
    let mut b = tailprof_analyze::ProfileBuilder::new(&Default::default(), &opts()).unwrap();
    let mut wrong = good.clone();
    wrong[1] ^= 1;
    b.add_build_ids(&[tailprof_format::BuildIdEntry { path: exe.to_str().unwrap().into(), build_id: wrong }]);
    use tailprof_format::Sink;
    b.handle_mmap(&exec_mmap(1, &exe, base, None));
    b.handle_sample(&sample(5, 1, base + alpha));
    let p = b.finish(&mut tailprof_analyze::Symbolizer::default());
    assert!(p.rows[0].unknown_reason.as_deref().unwrap().contains("mismatch"));

    // Checking can be switched off.
    let mut bad = good;
    bad[0] ^= 0xff;
    let mut recs = vec![Record::Mmap(exec_mmap(1, &exe, base, Some(bad)))];
    recs.extend(user_samples(1, base + alpha, 1));
    let p = profile(&recs, &opts(), SymbolizerOptions { check_build_id: false, ..Default::default() });
    assert_eq!(rows(&p), vec![("alpha".into(), 1)]);
}

#[test]
fn missing_binary_and_unmapped_addresses() {
    let mut m = tailprof_format::Mmap {
        pid: 2,
        tid: 2,
        start: 0x40_0000,
        len: 0x1000,
        pgoff: 0x1000,
        cpumode: tailprof_format::CpuMode::User,
        path: "/nonexistent/tailprof-test/bin".into(),
        ..Default::default()
    };
    m.time = 0;
    let mut recs = vec![Record::Mmap(m)];
    recs.extend(user_samples(2, 0x40_0010, 2));
    recs.extend(user_samples(2, 0x90_0000, 1));
    let p = profile(&recs, &opts(), SymbolizerOptions::default());
    assert_eq!(rows(&p), vec![("[unknown] bin+0x1010".into(), 2), ("[unknown] 0x900000".into(), 1)]);
    assert_eq!(p.rows[0].unknown_reason.as_deref(), Some("binary not found on disk"));
    assert_eq!(p.rows[1].unknown_reason.as_deref(), Some("no mapping covers the address"));
}
