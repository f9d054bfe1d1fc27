//! Code that runtimes generate (issue 23): perf maps and jitdumps copied into the trace
//! by `record`, named by `report`.
//!
//! - A jitdump written by the test's own program (Python + ctypes running machine code
//!   in anonymous executable memory) in which one address is loaded by a second function
//!   after a known time: samples before and after get the right names.
//! - Node 20 with `--perf-basic-prof` (perf map) and `--perf-prof` (jitdump), two JS
//!   functions with a 3:1 split of work: ≥ 95% of the samples in JIT code are named and
//!   the split is within ±5 points of the truth; the map/dump files are deleted before
//!   `report`, so the names come from the trace.
//! - Hostile perf maps (symlink, FIFO, another user's file, a 1 GB sparse file, binary
//!   garbage): the recorder neither hangs nor bloats, and each is counted.
//!
//! Skips (with a message) without root/perf, python3 or node. No timing assertions.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tailprof_analyze::resolve::{LocId, Resolved, ResolvedSink, Resolver};
use tailprof_analyze::symbolize::Symbolizer;
use tailprof_format::{Sample, TraceReader};

fn tailprof(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(args)
        .current_dir(cwd)
        .env("TAILPROF_CACHE_DIR", "off")
        .env("TAILPROF_KALLSYMS", "off")
        .output()
        .expect("run tailprof")
}

fn have(cmd: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).output().is_ok_and(|o| o.status.success())
}

/// Records `cmd` into `dir/out.tprof`; `None` (after a SKIP message) when this machine
/// cannot record.
fn record(dir: &Path, cmd: &[&str]) -> Option<(PathBuf, Output)> {
    record_with(dir, &[], cmd)
}

/// [`record`] with recorder options `opts`.
fn record_with(dir: &Path, opts: &[&str], cmd: &[&str]) -> Option<(PathBuf, Output)> {
    if unsafe { libc::geteuid() } != 0 {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "recording JIT names (perf_event_open of a launched command)");
        return None;
    }
    let out = dir.join("out.tprof");
    let mut args = vec!["record", "-o", out.to_str().unwrap()];
    args.extend_from_slice(opts);
    args.push("--");
    args.extend_from_slice(cmd);
    let o = tailprof(&args, dir);
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        if err.contains("perf_event_open") || err.contains("permission") {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format!("cannot record here: {err}"));
            return None;
        }
        panic!("record failed: {err}");
    }
    Some((out, o))
}

/// Each user sample's (time, function name, binary).
fn named_samples(trace: &Path) -> Vec<(u64, String, String)> {
    #[derive(Default)]
    struct Collect(Vec<(u64, LocId, bool)>);
    impl ResolvedSink for Collect {
        fn handle_sample(&mut self, s: &Sample, r: &mut Resolver) {
            let user = !s.cpumode.is_kernel();
            self.0.push((s.time, r.loc(s), user));
        }
    }
    let mut reader = TraceReader::open(trace).unwrap();
    let mut sink = Resolved::wrap(reader.header(), Collect::default());
    reader.read_all(&mut sink).unwrap();
    let (c, resolver) = sink.into_parts();
    let table = resolver.functions(&mut Symbolizer::default());
    c.0.into_iter()
        .filter(|s| s.2)
        .map(|(t, l, _)| {
            let row = table.row_of(l).unwrap();
            (t, row.name.clone(), row.binary.clone())
        })
        .collect()
}

const JITDUMP_PROGRAM: &str = r#"
import ctypes, mmap, os, struct, sys, time

def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

# mov rcx, N; 1: dec rcx; jnz 1b; ret
code = bytes([0x48, 0xb9]) + struct.pack('<Q', 3_000_000) + bytes([0x48, 0xff, 0xc9, 0x75, 0xfb, 0xc3])
mem = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mem.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
fn = ctypes.CFUNCTYPE(None)(addr)

pid = os.getpid()
path = os.path.join(sys.argv[1], f"jit-{pid}.dump")
f = open(path, "w+b")
f.write(struct.pack('<IIIIIIQQ', 0x4A695444, 1, 40, 62, 0, pid, now(), 0))
f.flush()
# Mapped executable, as runtimes do, so the recorder sees where the jitdump is.
dump_map = mmap.mmap(f.fileno(), 40, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)

index = 0
def load(name, t):
    global index
    # DEBUG_INFO before its load: the code's first instruction is at jit.py line 7 +
    # the load's index (a made-up source, checked by the test)
    entry = struct.pack('<QiI', addr, 7 + index, 0) + b'jit.py\0'
    dbg = struct.pack('<QQ', addr, 1) + entry
    f.write(struct.pack('<IIQ', 2, 16 + len(dbg), t) + dbg)
    body = struct.pack('<IIQQQQ', pid, pid, addr, addr, len(code), index) + name.encode() + b'\0' + code
    f.write(struct.pack('<IIQ', 0, 16 + len(body), t) + body)
    f.flush()
    index += 1

def run(ns):
    end = now() + ns
    while now() < end:
        fn()

load("jit_first", now())
run(400_000_000)
t1 = now()
load("jit_second", t1)
run(400_000_000)
print(t1)
"#;

/// Issue 23: an address reused by a second function after a known time: samples before
/// get the first load's name, samples after the second's (the load valid at each
/// sample's time, from the trace alone).
#[test]
fn jitdump_reused_address_names_each_sample_by_the_load_valid_at_its_time() {
    if !have("python3") {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not installed");
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the test's machine code is x86-64");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("jit.py");
    std::fs::write(&prog, JITDUMP_PROGRAM).unwrap();
    let d = dir.path().to_str().unwrap();
    let Some((trace, o)) = record(dir.path(), &["python3", prog.to_str().unwrap(), d]) else { return };
    let t1: u64 = String::from_utf8_lossy(&o.stdout).lines().last().unwrap().trim().parse().unwrap();
    // The trace is self-contained: the jitdump is gone when it is read.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "dump") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let samples = named_samples(&trace);
    let jit: Vec<_> = samples.iter().filter(|s| s.1.starts_with("jit_")).collect();
    let before = jit.iter().filter(|s| s.0 < t1).count();
    let after = jit.iter().filter(|s| s.0 >= t1).count();
    assert!(before >= 100 && after >= 100, "too few JIT samples: {before} before, {after} after; {:?}", &samples[..samples.len().min(20)]);
    for s in &jit {
        let want = if s.0 < t1 { "jit_first" } else { "jit_second" };
        assert_eq!(s.1, want, "sample at {} (second load at {t1})", s.0);
    }
    let unnamed = samples.iter().filter(|s| s.2 == "//anon").count();
    assert!(unnamed * 20 <= jit.len(), "{unnamed} samples in anonymous memory not named, {} named", jit.len());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("JIT code names"), "{stderr}");
    // DEBUG_INFO: each function's `file:line` in `report --json`'s function rows.
    let rep = tailprof(&["report", "--json", "--top", "0", trace.to_str().unwrap()], dir.path());
    let report: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    let source_of = |name: &str| {
        let rows = report["functions"].as_array().unwrap();
        let row = rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no {name} row: {report}"));
        row["source"].as_str().map(str::to_owned)
    };
    assert_eq!(source_of("jit_first").as_deref(), Some("jit.py:7"));
    assert_eq!(source_of("jit_second").as_deref(), Some("jit.py:8"));
    // ... and in the text report's Source column.
    let text = tailprof(&["report", "--top", "0", trace.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Source"), "{text}");
    for (name, src) in [("jit_first", "jit.py:7"), ("jit_second", "jit.py:8")] {
        let line = text.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("no {name} row: {text}"));
        assert!(line.trim_end().ends_with(src), "{line}");
    }
}

/// A program running machine code without frame pointers (`push rbp; xor ebp, ebp;
/// sub rsp, 16; loop; add rsp, 16; pop rbp; ret`: rbp is 0 inside, so a frame-pointer walk
/// stops at it) called through ctypes (libffi's `ffi_call_unix64`), named by a jitdump,
/// with an UNWINDING_INFO record (`.eh_frame` + `.eh_frame_hdr` laid out after the code,
/// as V8 writes them) when its second argument is 1.
const JIT_UNWIND_PROGRAM: &str = r#"
import ctypes, mmap, os, struct, sys, time

def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)

code = (bytes([0x55, 0x31, 0xed, 0x48, 0x83, 0xec, 0x10, 0x48, 0xb9]) + struct.pack('<Q', 3_000_000)
        + bytes([0x48, 0xff, 0xc9, 0x75, 0xfb, 0x48, 0x83, 0xc4, 0x10, 0x5d, 0xc3]))
assert len(code) == 28
mem = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
mem.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
fn = ctypes.CFUNCTYPE(None)(addr)

# .eh_frame at addr + align8(len(code)): a CIE (CFA = rsp + 8, return address at CFA - 8,
# pointers pcrel|sdata4) and one FDE: after push rbp CFA = rsp + 16 (rbp at CFA - 16),
# after sub rsp CFA = rsp + 32, after add rsp CFA = rsp + 16, after pop rbp CFA = rsp + 8.
eh_at = (len(code) + 7) // 8 * 8
cie = bytes([0, 0, 0, 0, 1]) + b'zR\0' + bytes([1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1])
cie += bytes(-len(cie) % 4)
eh = struct.pack('<I', len(cie)) + cie
fde_at = len(eh)
insns = bytes([0x41, 0x0e, 16, 0x86, 2, 0x46, 0x0e, 32, 0x40 | 19, 0x0e, 16, 0x41, 0x0e, 8, 0xc6])
body = struct.pack('<Iii', fde_at + 4, -(eh_at + fde_at + 8), len(code)) + bytes([0]) + insns
body += bytes(-len(body) % 4)
eh += struct.pack('<I', len(body)) + body + bytes(4)
# .eh_frame_hdr right after it: eh_frame_ptr pcrel, count udata4, table datarel|sdata4.
hdr = bytes([1, 0x1b, 0x03, 0x3b]) + struct.pack('<iIii', -(len(eh) + 4), 1, -(eh_at + len(eh)), fde_at - len(eh))

pid = os.getpid()
path = os.path.join(sys.argv[1], f"jit-{pid}.dump")
f = open(path, "w+b")
f.write(struct.pack('<IIIIIIQQ', 0x4A695444, 1, 40, 62, 0, pid, now(), 0))
f.flush()
dump_map = mmap.mmap(f.fileno(), 40, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
t = now()
if sys.argv[2] == "1":
    data = eh + hdr
    u = struct.pack('<QQQ', len(data), len(hdr), len(data)) + data
    f.write(struct.pack('<IIQ', 4, 16 + len(u), t) + u)
body = struct.pack('<IIQQQQ', pid, pid, addr, addr, len(code), 0) + b'jit_unwound\0' + code
f.write(struct.pack('<IIQ', 0, 16 + len(body), t) + body)
f.flush()
# The recorder reads jitdumps about every 100 ms: samples before it has read the record
# are walked with the fallback (documented), so wait for it before running the code.
time.sleep(0.5)
end = now() + 1_200_000_000
while now() < end:
    fn()
"#;

/// Issue 23: `--call-graph dwarf` walks JIT code with the jitdump's UNWINDING_INFO: the
/// function keeps no frame pointer, yet its stacks reach its caller (libffi's
/// `ffi_call_unix64`, then ctypes and the interpreter); without the record the walk
/// falls back to frame pointers (which stop there), and the recorder counts those frames.
#[test]
fn dwarf_unwinding_through_jit_code_uses_jitdump_unwinding_info() {
    if !have("python3") {
        tailprof_testkit::skip(tailprof_testkit::Need::Python, "python3 not installed");
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "the test's machine code is x86-64");
        return;
    }
    let mut reach = Vec::new();
    for with_info in ["1", "0"] {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("jit.py");
        std::fs::write(&prog, JIT_UNWIND_PROGRAM).unwrap();
        let d = dir.path().to_str().unwrap();
        let cmd = ["python3", prog.to_str().unwrap(), d, with_info];
        let Some((trace, o)) = record_with(dir.path(), &["--call-graph", "dwarf"], &cmd) else { return };
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let rep = tailprof(&["report", "--by", "stack", "--json", "--top", "0", trace.to_str().unwrap()], dir.path());
        assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
        let json: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
        let (mut leaf, mut caller) = (0u64, 0u64);
        let mut seen = Vec::new();
        for st in json["stacks"].as_array().unwrap() {
            let frames: Vec<&str> = st["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            let samples = st["samples"].as_u64().unwrap();
            if frames.last().is_some_and(|f| f.contains("jit_unwound")) {
                leaf += samples;
                // libffi's `ffi_call_unix64` is a local symbol (unnamed when stripped):
                // the stack reaches the caller when it reaches libffi's `ffi_call` or
                // ctypes' `_ctypes_callproc` above it.
                if frames.iter().any(|f| f.contains("ffi_call") || f.contains("_ctypes_callproc")) {
                    caller += samples;
                }
                if seen.len() < 3 {
                    seen.push(frames.join(" <- "));
                }
            }
        }
        assert!(leaf >= 50, "too few stacks with the JIT function at the leaf ({leaf}); {stderr}");
        let counted = stderr
            .lines()
            .find(|l| l.contains("--call-graph dwarf: JIT functions with unwind information"))
            .unwrap_or_else(|| panic!("no unwinding summary: {stderr}"))
            .to_owned();
        reach.push((with_info, leaf, caller, counted, seen));
    }
    eprintln!("{reach:?}");
    let (_, leaf, caller, counted, seen) = &reach[0];
    assert!(caller * 10 >= leaf * 9, "with UNWINDING_INFO {caller} of {leaf} stacks reach the caller: {seen:?}");
    assert!(counted.contains("unwind information 1 ("), "{counted}");
    let (_, leaf, caller, counted, seen) = &reach[1];
    assert!(caller * 10 <= *leaf, "without UNWINDING_INFO {caller} of {leaf} stacks reach the caller: {seen:?}");
    assert!(counted.contains("unwind information 0 (frames 0)"), "{counted}");
    let fallback: u64 = counted.rsplit(' ').next().unwrap().replace(',', "").parse().unwrap();
    assert!(fallback >= *leaf, "{counted}");
}

const NODE_APP: &str = r#"
function hotLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
function coldLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
const end = Date.now() + 2500; let x = 0;
while (Date.now() < end) { x += hotLoop(200000); x += hotLoop(200000); x += hotLoop(200000); x += coldLoop(200000); }
console.log(x);
"#;

/// Node with `flag`: returns (named share of JIT samples, hotLoop's share of the two).
fn node_split(flag: &str) -> Option<(f64, f64)> {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.js"), NODE_APP).unwrap();
    let (trace, o) = record(dir.path(), &["node", flag, "app.js"])?;
    // Names come from the trace: the runtime's files are gone.
    let pid_files: Vec<PathBuf> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "dump")).collect();
    for p in pid_files {
        std::fs::remove_file(p).unwrap();
    }
    for pid in samples_pids(&trace) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let samples = named_samples(&trace);
    // The anonymous mapping under the named code leaves no empty rows behind.
    let rep = tailprof(&["report", "--json", "--top", "0", trace.to_str().unwrap()], dir.path());
    let report: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    for r in report["functions"].as_array().unwrap().iter().chain(report["unknown"].as_array().unwrap()) {
        assert!(r["samples"].as_u64().unwrap() > 0, "empty row {r}");
    }
    let info = tailprof(&["info", trace.to_str().unwrap()], dir.path());
    assert!(String::from_utf8_lossy(&info.stdout).contains("JIT names:"), "{}", String::from_utf8_lossy(&info.stdout));
    let named = samples.iter().filter(|s| s.2 == "[jit]").count();
    let anon = samples.iter().filter(|s| s.2 == "//anon" || s.2 == "[unknown]").count();
    let hot = samples.iter().filter(|s| s.1.contains("hotLoop")).count();
    let cold = samples.iter().filter(|s| s.1.contains("coldLoop")).count();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(hot + cold >= 200, "too few samples in the two functions: {hot} + {cold}; {stderr}");
    Some((named as f64 / (named + anon) as f64, 100.0 * hot as f64 / (hot + cold) as f64))
}

fn samples_pids(trace: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut reader = TraceReader::open(trace).unwrap();
    reader
        .for_each_sample(&mut |s| {
            if !pids.contains(&s.pid) {
                pids.push(s.pid)
            }
        })
        .unwrap();
    pids
}

#[test]
fn node_perf_basic_prof_names_js_functions_from_the_trace() {
    let Some((named, hot)) = node_split("--perf-basic-prof") else { return };
    assert!(named >= 0.95, "only {:.1}% of JIT samples named", named * 100.0);
    assert!((hot - 75.0).abs() <= 5.0, "hotLoop has {hot:.1}% of the two functions' samples, truth 75%");
}

#[test]
fn node_perf_prof_jitdump_names_js_functions_from_the_trace() {
    let Some((named, hot)) = node_split("--perf-prof") else { return };
    assert!(named >= 0.95, "only {:.1}% of JIT samples named", named * 100.0);
    assert!((hot - 75.0).abs() <= 5.0, "hotLoop has {hot:.1}% of the two functions' samples, truth 75%");
}

/// Hostile perf maps: each is refused or read within its bounds, counted as skipped JIT
/// names, and the recording neither hangs nor bloats.
#[test]
fn hostile_perf_maps_are_refused_or_bounded_and_counted() {
    let cases = [
        ("symlink", "ln -s /etc/passwd /tmp/perf-$$.map"),
        ("fifo", "mkfifo /tmp/perf-$$.map"),
        ("other user", "printf '1000 10 stolen\\n' > /tmp/perf-$$.map && chown 65534 /tmp/perf-$$.map"),
        ("1 GB sparse", "truncate -s 1G /tmp/perf-$$.map"),
        ("garbage", "head -c 300000 /dev/urandom > /tmp/perf-$$.map"),
    ];
    for (what, setup) in cases {
        let dir = tempfile::tempdir().unwrap();
        // The shell makes the file for its own pid, then becomes the workload (same pid).
        let script =
            format!("rm -f /tmp/perf-$$.map; {setup}; exec python3 -c 'import time; e=time.time()+0.3\nwhile time.time()<e: pass'");
        let Some((trace, o)) = record(dir.path(), &["sh", "-c", &script]) else { return };
        for pid in samples_pids(&trace) {
            let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
        let stderr = String::from_utf8_lossy(&o.stderr);
        let size = std::fs::metadata(&trace).unwrap().len();
        assert!(size < 4 << 20, "{what}: trace of {size} bytes");
        let info = tailprof(&["info", "--json", trace.to_str().unwrap()], dir.path());
        let json = String::from_utf8_lossy(&info.stdout);
        assert!(json.contains("skipped_jit_names"), "{what}: not counted: {json}\n{stderr}");
        let samples = named_samples(&trace);
        assert!(!samples.iter().any(|s| s.2 == "[jit]"), "{what}: named something from a hostile map");
    }
    // The recorder's own peak memory (the largest child this test waited for).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert!(ru.ru_maxrss < 256 * 1024, "peak RSS {} KiB", ru.ru_maxrss);
}

/// Issue 23 item 6: Node without a flag: `record` and `report` say the samples are JIT
/// code of node and give the exact flag.
#[test]
fn node_without_a_flag_report_names_the_runtime_and_the_flag() {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.js"), NODE_APP).unwrap();
    let Some((trace, rec)) = record(dir.path(), &["node", "app.js"]) else { return };
    let rec_err = String::from_utf8_lossy(&rec.stderr);
    assert!(rec_err.lines().any(|l| l.contains("node (pid") && l.contains("--perf-basic-prof")), "record gives no advice: {rec_err}");
    let o = tailprof(&["report", trace.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(text.lines().any(|l| l.contains("JIT code of node (pid") && l.contains("--perf-basic-prof")), "{text}");
    let o = tailprof(&["report", "--json", trace.to_str().unwrap()], dir.path());
    let json = String::from_utf8_lossy(&o.stdout);
    let compact: String = json.split_whitespace().collect();
    assert!(compact.contains("\"jit_advice\":[") && compact.contains("\"runtime\":\"node\""), "{json}");
}

/// Issue 23: Java with `-XX:+PreserveFramePointer -XX:+UnlockDiagnosticVMOptions
/// -XX:+DumpPerfMapAtExit`: the map is written as the JVM exits, read at the end of the
/// recording (the process gone, through the host's /tmp); the hot method is named.
#[test]
fn java_dump_perf_map_at_exit_names_the_hot_method() {
    if !have("java") {
        tailprof_testkit::skip(tailprof_testkit::Need::Java, "java not installed (.ci/run installs a JDK as optional)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Hot.java"),
        r#"public class Hot {
    static long hotMethod(long n) { long s = 0; for (long i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
    public static void main(String[] a) {
        long end = System.currentTimeMillis() + 2500, x = 0;
        while (System.currentTimeMillis() < end) { x += hotMethod(1_000_000); }
        System.out.println(x);
    }
}
"#,
    )
    .unwrap();
    let Some((trace, o)) =
        record(dir.path(), &["java", "-XX:+PreserveFramePointer", "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "Hot.java"])
    else {
        return;
    };
    for pid in samples_pids(&trace) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let samples = named_samples(&trace);
    let hot = samples.iter().filter(|s| s.1.contains("Hot.hotMethod") && s.2 == "[jit]").count();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(hot * 5 >= samples.len(), "Hot.hotMethod named in {hot} of {} user samples; {stderr}", samples.len());
}

/// Issue 23: stacks through JIT code with frame pointers (V8 keeps them): the JS leaf is
/// named from the perf map and the stack reaches the process entry through V8's frames.
#[test]
fn node_stacks_through_jit_frames_reach_the_entry() {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.js"), NODE_APP).unwrap();
    let Some((trace, _)) = record_with(dir.path(), &["-g"], &["node", "--perf-basic-prof", "app.js"]) else { return };
    for pid in samples_pids(&trace) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let o = tailprof(&["report", "--by", "stack", "--json", "--top", "0", trace.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut hot = 0u64;
    let mut hot_complete = 0u64;
    for st in json["stacks"].as_array().unwrap() {
        let frames: Vec<&str> = st["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        let samples = st["samples"].as_u64().unwrap();
        if frames.last().is_some_and(|f| f.contains("hotLoop")) {
            hot += samples;
            if st["complete"] == true && frames.iter().any(|f| f.contains("main")) {
                hot_complete += samples;
            }
        }
    }
    assert!(hot >= 100, "too few stacks with hotLoop at the leaf ({hot})");
    assert!(hot_complete * 10 >= hot * 8, "{hot_complete} of {hot} hotLoop stacks complete to main");
}

/// A JS caller → hot JIT callee chain for `--perf-prof-unwinding-info`: `hotLoop` is
/// optimized by TurboFan (whose code has unwind information), `jsCaller` is not hot
/// enough to be (its interpreter/baseline code has none). V8 writes its jitdump through a
/// 2 MB stdio buffer, so records reach the file only in 2 MB bursts and at exit: after
/// warming `hotLoop` up the program compiles 3,000 small functions (each one's
/// interpreter trampoline is a code record with `--interpreted-frames-native-stack`,
/// about 6 MB) so that `hotLoop`'s records are in the file while it runs for 2 s more.
const NODE_UNWIND_APP: &str = r#"
function hotLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
function jsCaller(n) { let x = 0; for (let k = 0; k < 4; k++) { x += hotLoop(n); } return x; }
let x = 0;
for (let i = 0; i < 20; i++) x += jsCaller(100000);
for (let i = 0; i < 3000; i++) { x += new Function('a', 'return a * ' + i + ' + 1;')(i); }
const end = Date.now() + 2000;
while (Date.now() < end) { x += jsCaller(1000000); }
console.log(x);
"#;

/// Issue 23: real Node with `--perf-prof --perf-prof-unwinding-info` and `--call-graph
/// dwarf`: V8's UNWINDING_INFO records are used (the summary counts JIT functions with
/// unwind information and frames walked with it), the JIT code without them (the
/// caller's baseline code) is walked by frame pointers and counted, and the stacks with
/// the hot JIT callee at the leaf reach the JS caller and the native frames below it.
/// Regression: every stack's frames were counted twice in the summary.
#[test]
fn node_perf_prof_unwinding_info_stacks_reach_the_js_caller() {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.js"), NODE_UNWIND_APP).unwrap();
    let cmd = ["node", "--perf-prof", "--perf-prof-unwinding-info", "--interpreted-frames-native-stack", "app.js"];
    let Some((trace, o)) = record_with(dir.path(), &["--call-graph", "dwarf"], &cmd) else { return };
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let rep = tailprof(&["report", "--by", "stack", "--json", "--top", "0", trace.to_str().unwrap()], dir.path());
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let json: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    let (mut hot, mut reach) = (0u64, 0u64);
    let mut seen = Vec::new();
    for st in json["stacks"].as_array().unwrap() {
        // Root first: the caller and the native frames are before the leaf.
        let frames: Vec<&str> = st["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        let samples = st["samples"].as_u64().unwrap();
        // The innermost hotLoop frame (kernel frames may follow it).
        let Some(leaf) = frames.iter().rposition(|f| f.contains("hotLoop")) else { continue };
        hot += samples;
        let caller = frames[..leaf].iter().rposition(|f| f.contains("jsCaller"));
        if caller.is_some_and(|c| frames[..c].iter().any(|f| f.contains("v8::") || f.contains("node::"))) {
            reach += samples;
        } else if seen.len() < 3 {
            seen.push(frames.join(" <- "));
        }
    }
    assert!(hot >= 200, "too few stacks with hotLoop at the leaf ({hot}); {stderr}");
    assert!(reach * 10 >= hot * 8, "{reach} of {hot} hotLoop stacks reach jsCaller and native frames below it: {seen:?}; {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("--call-graph dwarf: JIT functions with unwind information"))
        .unwrap_or_else(|| panic!("no unwinding summary: {stderr}"));
    let num = |after: &str| -> u64 {
        let rest = &line[line.find(after).unwrap_or_else(|| panic!("{after:?} not in {line}")) + after.len()..];
        rest.trim_start().split(|c: char| !c.is_ascii_digit() && c != ',').next().unwrap().replace(',', "").parse().unwrap()
    };
    let (infos, cfi_frames, fallback) =
        (num("unwind information"), num("(frames"), num("frames without unwind information walked by frame pointers"));
    eprintln!("hotLoop stacks {hot}, reaching jsCaller and native frames {reach}; {line}");
    assert!(infos >= 1, "no UNWINDING_INFO used: {line}");
    assert!(cfi_frames * 2 >= hot, "{cfi_frames} frames walked with JIT unwind information, {hot} hotLoop stacks: {line}");
    // Each stack counted once (the recorder's early walk while draining, discarded for a
    // stack that is not complete, was counted too: about 2 per hotLoop stack).
    assert!(cfi_frames <= hot, "{cfi_frames} frames walked with JIT unwind information, {hot} hotLoop stacks: {line}");
    assert!(fallback >= 1, "{line}");
}

/// Issue 23: the split of the two JS functions in tailprof's report is within ±5 points of
/// `perf report`'s on a perf recording of the same program (perf reads the perf map at
/// report time). Skips without perf.
#[test]
fn node_split_agrees_with_perf_report() {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed");
        return;
    }
    if !have("perf") {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfTool, "perf not installed");
        return;
    }
    let Some((_, ours)) = node_split("--perf-basic-prof") else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.js"), NODE_APP).unwrap();
    let data = dir.path().join("perf.data");
    let rec = Command::new("perf")
        .args(["record", "-k", "mono", "-e", "cpu-clock", "-o", data.to_str().unwrap(), "--", "node", "--perf-basic-prof", "app.js"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    if !rec.status.success() {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format!("perf record failed: {}", String::from_utf8_lossy(&rec.stderr)));
        return;
    }
    let rep = Command::new("perf")
        .args(["report", "--stdio", "--sort", "sym", "-i", data.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rep.stdout);
    let share = |f: &str| -> f64 {
        text.lines().filter(|l| l.contains(f)).filter_map(|l| l.split_whitespace().next()?.trim_end_matches('%').parse::<f64>().ok()).sum()
    };
    let (hot, cold) = (share("hotLoop"), share("coldLoop"));
    // The perf map perf read is left by node: remove it (its pid from `--sort pid`: "PID:comm").
    let pids = Command::new("perf")
        .args(["report", "--stdio", "--sort", "pid", "-i", data.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    for l in String::from_utf8_lossy(&pids.stdout).lines() {
        if let Some(pid) = l.split_whitespace().nth(1).and_then(|w| w.split(':').next()).and_then(|p| p.parse::<u32>().ok()) {
            let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
    }
    assert!(hot + cold > 50.0, "perf report names too little: {text}");
    let theirs = 100.0 * hot / (hot + cold);
    assert!((ours - theirs).abs() <= 5.0, "hotLoop share: tailprof {ours:.1}%, perf report {theirs:.1}%");
}

/// Runs `perf` with `args` in `dir`; `None` (after a SKIP message) without perf or where
/// it cannot record.
fn perf(dir: &Path, args: &[&str]) -> Option<Output> {
    if !have("perf") {
        tailprof_testkit::skip(tailprof_testkit::Need::PerfTool, "perf not installed");
        return None;
    }
    let o = Command::new("perf").args(args).current_dir(dir).output().expect("run perf");
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        if args[0] == "record" {
            tailprof_testkit::skip(tailprof_testkit::Need::PerfEvents, format!("perf record failed here: {err}"));
            return None;
        }
        panic!("perf {args:?} failed: {err}");
    }
    Some(o)
}

/// `perf record -k mono` of Node in `dir` with `flag`; `None` after a SKIP message.
fn perf_record_node(dir: &Path, flag: &str) -> Option<()> {
    if !have("node") {
        tailprof_testkit::skip(tailprof_testkit::Need::Node, "node not installed (.ci/run installs nodejs as optional)");
        return None;
    }
    std::fs::write(dir.join("app.js"), NODE_APP).unwrap();
    perf(dir, &["record", "-k", "mono", "-e", "cpu-clock", "-o", "perf.data", "node", flag, "app.js"]).map(|_| ())
}

/// (hotLoop samples, coldLoop samples, user samples, binaries of hotLoop's samples).
fn split_of(samples: &[(u64, String, String)]) -> (usize, usize, usize, Vec<String>) {
    let hot = samples.iter().filter(|s| s.1.contains("hotLoop")).count();
    let cold = samples.iter().filter(|s| s.1.contains("coldLoop")).count();
    let mut bins: Vec<String> = samples.iter().filter(|s| s.1.contains("hotLoop")).map(|s| s.2.clone()).collect();
    bins.sort();
    bins.dedup();
    (hot, cold, samples.len(), bins)
}

/// Issue 23.4: `perf record -k mono` of `node --perf-basic-prof`, then `import`: the JIT
/// frames are named from `/tmp/perf-PID.map` (read at import time with the untrusted-file
/// rules), and the names are in the trace (the map is deleted before reading it). Before:
/// every JS sample was `[unknown]` in `//anon`.
#[test]
fn import_of_perf_record_k_mono_keeps_perf_map_names() {
    let dir = tempfile::tempdir().unwrap();
    if perf_record_node(dir.path(), "--perf-basic-prof").is_none() {
        return;
    }
    let o = tailprof(&["import", "perf.data", "-o", "out.tprof"], dir.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("JIT names ") && err.contains("/tmp/perf-PID.map"), "{err}");
    let trace = dir.path().join("out.tprof");
    for pid in samples_pids(&trace) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let samples = named_samples(&trace);
    let (hot, cold, _, bins) = split_of(&samples);
    assert!(hot + cold >= 200, "JS functions not named after import: {hot} + {cold}; {err}");
    assert!(hot > cold, "hotLoop does 3x coldLoop's work: {hot} vs {cold}");
    assert_eq!(bins, ["[jit]"]);
}

/// Issue 23.4: `perf inject --jit` output (`node --perf-prof`, `perf record -k mono`):
/// the `jitted-PID-N.so` files it writes are ordinary mapped ELF files and resolve.
#[test]
fn import_of_perf_inject_jit_output_names_jitted_elf_files() {
    let dir = tempfile::tempdir().unwrap();
    if perf_record_node(dir.path(), "--perf-prof").is_none() {
        return;
    }
    if perf(dir.path(), &["inject", "--jit", "-i", "perf.data", "-o", "perf.jit.data"]).is_none() {
        return;
    }
    let o = tailprof(&["import", "perf.jit.data", "-o", "out.tprof"], dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let samples = named_samples(&dir.path().join("out.tprof"));
    let (hot, cold, _, bins) = split_of(&samples);
    assert!(hot + cold >= 200, "JS functions not named: {hot} + {cold}");
    assert!(hot > cold, "hotLoop does 3x coldLoop's work: {hot} vs {cold}");
    let file = |b: &String| b.rsplit('/').next().unwrap_or(b).to_string();
    assert!(!bins.is_empty() && bins.iter().map(file).all(|b| b.starts_with("jitted-") && b.ends_with(".so")), "{bins:?}");
}
