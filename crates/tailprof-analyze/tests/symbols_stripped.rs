//! Binaries as they ship: stripped binaries named by `.eh_frame` ranges, separate debug
//! files (build-id, `--debug-dir`, `.gnu_debuglink` with CRC), debuginfod over http,
//! inlined functions as frames. Builds small C programs with cc (installed by .ci/run, with binutils).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tailprof_analyze::maps::{Binary, BinaryKind};
use tailprof_analyze::symbolize::debuginfod::Client;
use tailprof_analyze::symbolize::{FoundBy, SymResult};
use tailprof_analyze::{Symbolizer, SymbolizerOptions};

const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static inline __attribute__((always_inline)) unsigned mix_step(unsigned x) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    return x;
}
__attribute__((noinline)) static unsigned work(unsigned n) {
    unsigned x = n | 1;
    for (unsigned i = 0; i < n; i++) x = mix_step(x) * 2654435761u + i;
    return x;
}
__attribute__((noinline)) static unsigned other(unsigned n) { return work(n) * 3 + SALT; }
int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
    printf("%u %u\n", work(n), other(n));
    return 0;
}
"#;

fn run(cmd: &mut Command) -> String {
    let out = cmd.stderr(Stdio::inherit()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Build `name` (with -g) from PROG in `dir`; `salt` changes the code (and build-id).
fn build(dir: &Path, name: &str, salt: u32) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, PROG).unwrap();
    let out = dir.join(name);
    run(Command::new("cc").args(["-O2", "-g", "-Wl,--build-id", &format!("-DSALT={salt}"), "-o"]).arg(&out).arg(&src));
    out
}

/// Stripped copy and `--only-keep-debug` file of `bin`.
fn split(bin: &Path) -> (PathBuf, PathBuf) {
    let stripped = bin.with_extension("stripped");
    let debug = bin.with_extension("debug");
    run(Command::new("objcopy").arg("--only-keep-debug").arg(bin).arg(&debug));
    run(Command::new("strip").arg("-o").arg(&stripped).arg(bin));
    (stripped, debug)
}

/// Symbol address (vaddr) and size of `sym` in `bin` (from `nm -S`).
fn sym(bin: &Path, name: &str) -> (u64, u64) {
    let out = run(Command::new("nm").arg("-S").arg(bin));
    out.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == name).then(|| (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap()))
        })
        .unwrap_or_else(|| panic!("{name} not in nm -S {}", bin.display()))
}

/// File offset of vaddr `v` in `bin` (from its PT_LOAD headers).
fn file_offset(bin: &Path, v: u64) -> u64 {
    let out = run(Command::new("readelf").arg("-lW").arg(bin));
    for l in out.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
        let f: Vec<u64> =
            l.split_whitespace().skip(1).take(5).map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap()).collect();
        let (off, vaddr, filesz) = (f[0], f[1], f[3]);
        if v >= vaddr && v < vaddr + filesz {
            return v - vaddr + off;
        }
    }
    panic!("{v:#x} not in a PT_LOAD of {}", bin.display())
}

fn build_id(bin: &Path) -> Vec<u8> {
    let out = run(Command::new("readelf").arg("-n").arg(bin));
    let hex = out.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("build-id note").trim().to_owned();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

fn file(p: &Path) -> Binary {
    Binary { path: p.to_str().unwrap().into(), build_id: None, kind: BinaryKind::File }
}

fn names(r: &[SymResult]) -> Vec<String> {
    r.iter().map(|x| x.clone().unwrap_or_else(|e| format!("?{e}"))).collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    full: PathBuf,
    stripped: PathBuf,
    debug: PathBuf,
    /// File offsets: two inside `work`, one inside `other`.
    offs: [u64; 3],
    work: u64,
    other: u64,
}

fn fixture(salt: u32) -> Fixture {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    let full = build(&dir, "prog", salt);
    let (stripped, debug) = split(&full);
    let (work, wsz) = sym(&full, "work");
    let (other, _) = sym(&full, "other");
    let offs = [file_offset(&full, work + 1), file_offset(&full, work + wsz - 1), file_offset(&full, other)];
    Fixture { _dir: d, dir, full, stripped, debug, offs, work, other }
}

#[test]
fn stripped_binary_is_named_by_eh_frame_ranges() {
    let f = fixture(1);
    let mut s = Symbolizer::new(SymbolizerOptions::default());
    // Unstripped: real names.
    assert_eq!(names(&s.symbolize_binary(&file(&f.full), None, &f.offs)), ["work", "work", "other"]);
    // Stripped (no debug file anywhere): one name per function range, at the symbol's address.
    let b = file(&f.stripped);
    let r = s.symbolize_binary(&b, None, &f.offs);
    let (w, o) = (format!("fn_{:x}", f.work), format!("fn_{:x}", f.other));
    assert_eq!(names(&r), [w.clone(), w, o]);
    let ids = s.symbolize_binary_ids(&b, None, &f.offs);
    assert!(s.is_range_name(*ids[0].as_ref().unwrap()));
    let src = s.symbol_source(b.path.as_str(), None);
    assert!(!src.symtab && src.eh_frame_ranges >= 3, "{src:?}");
}

#[test]
fn debug_dir_by_build_id_in_both_layouts_and_wrong_build_id_refused() {
    let f = fixture(2);
    let id = build_id(&f.full);
    let (head, rest): (String, String) = (format!("{:02x}", id[0]), id[1..].iter().map(|b| format!("{b:02x}")).collect());
    for layout in [format!(".build-id/{head}/{rest}.debug"), format!("{head}/{rest}")] {
        let dd = f.dir.join(format!("dd-{}", layout.len()));
        let p = dd.join(&layout);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(&f.debug, &p).unwrap();
        let mut s = Symbolizer::new(SymbolizerOptions { debug_dirs: Some(vec![dd.clone()]), ..Default::default() });
        let b = file(&f.stripped);
        assert_eq!(names(&s.symbolize_binary(&b, Some(&id), &f.offs)), ["work", "work", "other"], "{layout}");
        let d = s.debug_file(b.path.as_str()).unwrap();
        assert_eq!((d.path.clone(), d.found_by.clone()), (p.clone(), FoundBy::BuildId(dd.clone())));
        // The same with the build-id read from the file rather than the trace.
        let mut s = Symbolizer::with_debug_dirs(std::slice::from_ref(&dd)).0;
        assert_eq!(names(&s.symbolize_binary(&b, None, &f.offs[2..])), ["other"]);
    }
    // A debug file of another build at the build-id path: not used.
    let g = fixture(3);
    let dd = f.dir.join("dd-wrong");
    let p = dd.join(".build-id").join(&head).join(format!("{rest}.debug"));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::copy(&g.debug, &p).unwrap();
    let mut s = Symbolizer::new(SymbolizerOptions { debug_dirs: Some(vec![dd]), ..Default::default() });
    let r = s.symbolize_binary(&file(&f.stripped), Some(&id), &f.offs[2..]);
    assert_eq!(names(&r), [format!("fn_{:x}", f.other)]);
}

#[test]
fn gnu_debuglink_next_to_the_binary_with_crc_check() {
    let f = fixture(4);
    let linked = f.dir.join("linked");
    run(Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", f.debug.display())).arg(&f.stripped).arg(&linked));
    // objcopy stores the base name; the debug file sits next to the binary.
    let mut s = Symbolizer::default();
    let b = file(&linked);
    assert_eq!(names(&s.symbolize_binary(&b, None, &f.offs)), ["work", "work", "other"]);
    assert_eq!(s.debug_file(b.path.as_str()).unwrap().found_by, FoundBy::DebugLink);
    // A changed debug file (CRC mismatch) is not used.
    let mut bytes = std::fs::read(&f.debug).unwrap();
    bytes.push(0);
    std::fs::write(&f.debug, bytes).unwrap();
    let mut s = Symbolizer::default();
    assert_eq!(names(&s.symbolize_binary(&b, None, &f.offs[2..])), [format!("fn_{:x}", f.other)]);
    assert!(s.debug_file(b.path.as_str()).is_none());
}

/// Offsets in `work` whose frames include the inlined `mix_step`.
fn inlined_frames(s: &mut Symbolizer, b: &Binary, bid: Option<&[u8]>, full: &Path) -> Vec<Vec<(String, bool)>> {
    let (work, size) = sym(full, "work");
    let base = file_offset(full, work);
    let offs: Vec<u64> = (base..base + size).collect();
    let frames = s.frames(b, bid, &offs);
    frames
        .into_iter()
        .filter_map(Result::ok)
        .map(|fr| fr.iter().map(|f| (s.name(f.name).to_owned(), f.inlined)).collect::<Vec<_>>())
        .filter(|v: &Vec<(String, bool)>| v.len() > 1)
        .collect()
}

#[test]
fn inlined_function_is_its_own_frame() {
    let f = fixture(5);
    let want = vec![("mix_step".to_owned(), true), ("work".to_owned(), false)];
    let mut s = Symbolizer::default();
    let got = inlined_frames(&mut s, &file(&f.full), None, &f.full);
    assert!(got.contains(&want), "{got:?}");
    // Cached: asking again answers the same.
    assert_eq!(inlined_frames(&mut s, &file(&f.full), None, &f.full), got);
    // Through the separate debug file of the stripped binary.
    let dd = f.dir.join("dd");
    let id = build_id(&f.full);
    let p = tailprof_analyze::symbolize::debugdir::build_id_paths(&dd, &id).remove(0);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::copy(&f.debug, &p).unwrap();
    let mut s = Symbolizer::with_debug_dirs(&[dd]).0;
    let got = inlined_frames(&mut s, &file(&f.stripped), None, &f.full);
    assert!(got.contains(&want), "{got:?}");
    // Without DWARF: one frame per address.
    let mut s = Symbolizer::default();
    assert!(inlined_frames(&mut s, &file(&f.stripped), None, &f.full).is_empty());
}

/// A `python3 -m http.server` on a free port, killed on drop.
struct Server(std::process::Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(root: &Path) -> Option<Server> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()])
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let srv = Server(child, port);
    // Wait until it accepts connections (bounded; not a timing assertion).
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(srv);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

#[test]
fn debuginfod_over_http_fetches_once_and_caches() {
    let f = fixture(6);
    let id = build_id(&f.full);
    let hexid: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let root = f.dir.join("www");
    let p = root.join("buildid").join(&hexid).join("debuginfo");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::copy(&f.debug, &p).unwrap();
    let srv = serve(&root).expect("python3 -m http.server did not start");
    let cache = f.dir.join("cache");
    let url = format!("http://127.0.0.1:{}", srv.1);
    let mut s = Symbolizer::default();
    s.set_debuginfod(Some(Client::new(vec![url.clone()], cache.clone())));
    let b = file(&f.stripped);
    assert_eq!(names(&s.symbolize_binary(&b, None, &f.offs)), ["work", "work", "other"]);
    assert_eq!(s.debug_file(b.path.as_str()).unwrap().found_by, FoundBy::Debuginfod(url));
    let cached = cache.join(format!("{hexid}.debug"));
    assert!(cached.is_file());
    // Server gone: the cache answers.
    drop(srv);
    let mut s = Symbolizer::default();
    s.set_debuginfod(Some(Client::new(vec!["http://127.0.0.1:9".into()], cache.clone())));
    assert_eq!(names(&s.symbolize_binary(&b, None, &f.offs[2..])), ["other"]);
    // A build-id the server does not have: not found, remembered as failed.
    let g = fixture(7);
    let gid: String = build_id(&g.full).iter().map(|b| format!("{b:02x}")).collect();
    let srv = serve(&root).expect("python3 -m http.server did not start");
    let mut s = Symbolizer::default();
    s.set_debuginfod(Some(Client::new(vec![format!("http://127.0.0.1:{}", srv.1)], cache.clone())));
    let r = s.symbolize_binary(&file(&g.stripped), None, &g.offs[2..]);
    assert_eq!(names(&r), [format!("fn_{:x}", g.other)]);
    assert!(cache.join(format!("{gid}.fail")).is_file());
}

#[test]
fn debian_postgres_when_installed() {
    // Whichever major version is installed (the path used to name 15 only).
    let Some(pg) = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin/postgres"))
        .find(|p| p.is_file())
    else {
        tailprof_testkit::skip(tailprof_testkit::Need::Postgres, "no /usr/lib/postgresql/*/bin/postgres installed");
        return;
    };
    let mut s = Symbolizer::default();
    let t = std::time::Instant::now();
    let src = s.symbol_source(pg.to_str().unwrap(), None);
    // Informational only (never asserted): ELF facts + debug lookup + .eh_frame parse.
    eprintln!("symbol_source(postgres) took {:?}", t.elapsed());
    if src.symtab || src.debug_file.is_some() {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, format_args!("postgres has symbols here ({})", src.source));
        return;
    }
    eprintln!("{}: {} ({} .eh_frame ranges)", pg.display(), src.source, src.eh_frame_ranges);
    assert!(src.eh_frame_ranges > 10_000, "{src:?}");
}

/// The MMAP record of `bin`'s executable segment at `base` (PIE), as the kernel reports it.
fn exec_mmap(pid: u32, bin: &Path, base: u64) -> tailprof_format::Mmap {
    let out = run(Command::new("readelf").arg("-lW").arg(bin));
    let l = out.lines().find(|l| l.trim_start().starts_with("LOAD") && l.contains(" R E ")).expect("executable PT_LOAD");
    let f: Vec<u64> = l.split_whitespace().skip(1).take(5).map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap()).collect();
    let (off, vaddr, memsz) = (f[0], f[1], f[4]);
    let start = base + (vaddr & !0xfff);
    let end = (base + vaddr + memsz + 0xfff) & !0xfff;
    tailprof_format::Mmap {
        time: 0,
        pid,
        tid: pid,
        start,
        len: end - start,
        pgoff: off & !0xfff,
        prot: 5,
        cpumode: tailprof_format::CpuMode::User,
        path: bin.to_str().unwrap().to_owned(),
        build_id: None,
    }
}

#[test]
fn resolver_rows_expand_inlined_functions_and_name_stripped_ranges() {
    use tailprof_analyze::resolve::inline_rows;
    use tailprof_analyze::resolve::Resolver;
    use tailprof_format::{CpuMode, Sample, TraceHeader};
    let f = fixture(8);
    let base = 0x5555_5555_4000u64;
    let (work, size) = sym(&f.full, "work");
    let sample = |ip: u64| Sample { time: 1, pid: 7, tid: 7, ip, period: 1, cpumode: CpuMode::User, ..Default::default() };
    for (bin, stripped) in [(&f.full, false), (&f.stripped, true)] {
        let mut r = Resolver::new(&TraceHeader::default());
        r.handle_mmap(&exec_mmap(7, bin, base));
        // Every byte of `work` (PIE: vaddr + base is the runtime address).
        for v in work..work + size {
            r.loc(&sample(base + v));
        }
        let mut s = Symbolizer::default();
        let mut table = r.functions(&mut s);
        let rows = inline_rows(&r, &mut table, &mut s);
        assert_eq!(rows.len(), r.locations().len());
        let named: Vec<Vec<&str>> = rows.iter().map(|v| v.iter().map(|&i| table.rows[i as usize].name.as_str()).collect()).collect();
        if stripped {
            // No DWARF: one frame per address, all in one `.eh_frame` row.
            let want = format!("fn_{work:x}");
            assert!(named.iter().all(|v| v == &[want.as_str()]), "{named:?}");
            let row = table.rows.iter().find(|x| x.name == want).unwrap();
            assert!(row.unknown_reason.as_deref().unwrap().contains(".eh_frame"), "{row:?}");
        } else {
            assert!(named.iter().any(|v| v == &["mix_step", "work"]), "{named:?}");
            assert!(named.iter().all(|v| v.last() == Some(&"work")), "{named:?}");
        }
    }
}

#[test]
fn symlinked_binary_path_is_refused() {
    // A traced process can swap its binary's path for a symlink to another user's file;
    // the kernel reports resolved paths, so a symlink there is never the traced file.
    let f = fixture(9);
    let link = f.dir.join("link");
    std::os::unix::fs::symlink(&f.full, &link).unwrap();
    let mut s = Symbolizer::default();
    let r = s.symbolize_binary(&file(&link), None, &f.offs[..1]);
    assert!(matches!(&r[0], Err(tailprof_analyze::UnknownReason::Unreadable { .. })), "{r:?}");
}
