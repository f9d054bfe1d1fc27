//! Issue 10, the recorder side: nothing a profiled process does may crash, hang or bloat
//! `tailprof record`, or make it write where it should not. Each finding of the issue is a
//! test named after it, played by a hostile program (built here with `cc` from the C source
//! below) that runs as an unprivileged account created by the test when it runs as root:
//!
//! - finding 2: the target truncates its marker region (`-p`, `-a`, and a launched command,
//!   whose sealed region cannot shrink);
//! - finding 3: the target maps a file, unlinks it and puts a FIFO (or a symlink to one) at
//!   its path;
//! - finding 4: the target's binary is replaced on disk before `-p` attaches; a
//!   `tailprof_control` symbol that is not a control block;
//! - finding 5: garbage in the rings (random heads/tails, a new class address per record,
//!   times of u64::MAX);
//! - finding 6: region names squatted in /dev/shm;
//! - finding 8: marker drop counters flipped between 0 and u64::MAX;
//! - a launched command dies with the recorder (PR_SET_PDEATHSIG); `-p` of a kernel thread
//!   is refused.
//!
//! Every test checks the safe outcome: the recorder finishes with a readable trace (with
//! samples), nothing outside the output is written, the recorder's peak memory (its
//! `ru_maxrss` from `wait4`) stays bounded, the attacker's data is untouched. No test asserts
//! a duration: a recorder that hangs is killed after a generous bound and the test fails.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ATTACKER: &str = "tailprof-atk";
/// A recorder still running after this long is hung (the targets run a few seconds).
const HANG: Duration = Duration::from_secs(120);
/// Peak resident memory a recorder may reach against a hostile target (KiB).
const MAX_RSS_KB: i64 = 128 * 1024;

const HOSTILE_C: &str = r#"
#define _GNU_SOURCE
#include <stdint.h>

#ifndef CANARY_SIZE
#define CANARY_SIZE 65536
#endif
/* Data right before the control block (defined first; -fno-toplevel-reorder keeps the
 * order): a replaced binary whose control block sits elsewhere would make a careless
 * recorder write here. Every 16 bytes look like the start of a control block (size 128,
 * version 1), so a check of those two fields alone would accept any of them. */
static volatile uint64_t canary[CANARY_SIZE / 8] __attribute__((aligned(64))) = {1};
#define CANARY(i) ((i) % 2 == 0 ? (128ull | (1ull << 32)) : 0x5a5a5a5a5a5a5a5aull)

#include "tailprof.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static volatile uint64_t sink;
static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static void work(void) { for (int i = 0; i < 20000; i++) sink += (uint64_t)i * i; }

static struct tailprof_slot *slot_at(struct tailprof_region_header *h, uint32_t i) {
    return (struct tailprof_slot *)((char *)h + 4096 + (uint64_t)i * h->slot_size);
}

/* Finding 5: random heads/tails, u64::MAX or random times, a new class address per
 * record, random kinds, random class table entries; a few records look valid. */
static void garbage(struct tailprof_region_header *h, uint32_t nslots, uint32_t ring) {
    uint64_t t = now_ns();
    for (uint32_t i = 0; i < nslots; i++) {
        struct tailprof_slot *s = slot_at(h, i);
        struct tailprof_record *r = (struct tailprof_record *)((char *)s + 1280);
        s->state = 1;
        s->tid = (uint32_t)rnd();
        for (uint32_t k = 0; k < ring; k++) {
            int valid = (k % 64) == 0;
            r[k].time = valid ? t : (k & 1) ? ~0ull : rnd();
            r[k].item = rnd();
            r[k].cls = (rnd() & ~7ull) | 8;
            r[k].kind = valid ? (uint32_t)(k & 1) : (uint32_t)rnd();
        }
        for (uint32_t c = 0; c < 16; c++)
            s->classes[c].len = (uint32_t)rnd();
        s->dropped = (rnd() & 1) ? ~0ull : 0;
        s->head = rnd();
        s->tail = rnd();
    }
    h->next_slot = (uint32_t)rnd();
    h->noslot_dropped = (rnd() & 1) ? ~0ull : 0;
}

/* Finding 8: drop counters flipped between 0 and u64::MAX. */
static void flip(struct tailprof_region_header *h, uint32_t nslots, int up) {
    uint32_t n = h->next_slot < nslots ? h->next_slot : nslots;
    for (uint32_t i = 0; i < n; i++)
        slot_at(h, i)->dropped = up ? ~0ull : 0;
    h->noslot_dropped = up ? ~0ull : 0;
}

int main(int argc, char **argv) {
    const char *mode = argv[1];
    double secs = atof(argv[2]);
    char fifo[512] = "";
    int flags = 0, acted = 0, fifo_opened = 0;
    uint32_t nslots = 0, ring = 0;
    for (int i = 0; i < CANARY_SIZE / 8; i++) canary[i] = CANARY(i);
    if (!strcmp(mode, "fifo")) {
        /* Finding 3: map a file, unlink it, put a FIFO (or a symlink to one) at its path. */
        char lib[512];
        snprintf(lib, sizeof lib, "%s/libmapped.so", argv[3]);
        char buf[65536];
        int in = open("/proc/self/exe", O_RDONLY), out = open(lib, O_WRONLY | O_CREAT | O_TRUNC, 0755);
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0) if (write(out, buf, n) != n) return 2;
        close(in);
        close(out);
        int fd = open(lib, O_RDONLY);
        if (mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 2;
        close(fd);
        unlink(lib);
        if (argc > 4 && !strcmp(argv[4], "symlink")) {
            snprintf(fifo, sizeof fifo, "%s/fifo", argv[3]);
            if (mkfifo(fifo, 0666) || symlink(fifo, lib)) return 2;
        } else {
            snprintf(fifo, sizeof fifo, "%s", lib);
            if (mkfifo(fifo, 0666)) return 2;
        }
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    uint64_t t0 = now_ns(), id = 0;
    while ((double)(now_ns() - t0) < secs * 1e9) {
        if (__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0) {
            TAILPROF_ITEM_BEGIN_CLASS(++id, "job");
            work();
            tailprof_item_end(id);
        } else {
            work();
        }
        if (fifo[0]) {
            /* A writer can open a FIFO without blocking only while someone reads it. */
            int w = open(fifo, O_WRONLY | O_NONBLOCK);
            if (w >= 0) { fifo_opened = 1; close(w); }
        }
        struct tailprof_region_header *h = tailprof__proc.hdr;
        if (!h) continue;
        if (!nslots) { nslots = h->nslots; ring = h->ring_records; }
        if (!strcmp(mode, "truncate") && !acted) {
            acted = 1;
            /* Stop our own markers first: they would fault on the truncated pages. */
            __atomic_store_n(&tailprof_control.state, 0, __ATOMIC_SEQ_CST);
            int fd = open(tailprof_control.path, O_RDWR);
            if (fd >= 0 && ftruncate(fd, 0) == 0) printf("truncated\n");
            else printf("truncate refused %d\n", errno);
            fflush(stdout);
            if (fd >= 0) close(fd);
        }
        if (!strcmp(mode, "garbage")) garbage(h, nslots, ring);
        if (!strcmp(mode, "flip")) flip(h, nslots, (flags ^= 1));
    }
    for (int i = 0; i < CANARY_SIZE / 8; i++)
        if (canary[i] != CANARY(i)) { printf("canary damaged at %d\n", i * 8); return 3; }
    printf("done %s markers %llu\n", fifo_opened ? "fifo_opened" : "ok", (unsigned long long)id);
    return 0;
}
"#;

/// A `tailprof_control` symbol that is not a control block (finding 4, second part).
const FAKE_CONTROL_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <time.h>
unsigned char tailprof_control[128] __attribute__((aligned(64))) = {0xaa, 0xaa, 0xaa, 0xaa, 0xaa};
int main(int argc, char **argv) {
    unsigned char want[128];
    memcpy(want, tailprof_control, sizeof want);
    printf("ready\n");
    fflush(stdout);
    struct timespec ts = {0, 50000000};
    for (int i = 0; i < (int)(atof(argv[1]) * 20); i++) nanosleep(&ts, 0);
    puts(memcmp(want, tailprof_control, sizeof want) ? "written" : "untouched");
    return 0;
}
"#;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The attacker's uid/gid: an unprivileged account (tailprof-testkit creates it; skips
/// when not root: the recorder-side attacks record another user's process).
fn attacker() -> Option<(u32, u32)> {
    tailprof_testkit::unprivileged_user(ATTACKER, "the recorder-side attacks record another user's process")
}

/// A scratch directory the attacker can use (mode 0777 under a 0755 parent).
struct Scene {
    _td: tempfile::TempDir,
    dir: PathBuf,
    /// Where root writes traces (root-only).
    out: PathBuf,
}

fn scene() -> Scene {
    let td = tempfile::tempdir().unwrap();
    std::fs::set_permissions(td.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = td.path().join("atk");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = td.path().join("out");
    std::fs::create_dir(&out).unwrap();
    Scene { _td: td, dir, out }
}

/// Build `src` into `dir/name` (readable and executable by everyone). `None` without cc.
fn build(dir: &Path, name: &str, src: &str, flags: &[&str]) -> Option<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let r = Command::new("cc")
        .args(["-O1", "-g", "-pthread", "-fno-toplevel-reorder"])
        .args(flags)
        .arg(format!("-I{}", root().join("include").display()))
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output();
    match r {
        Ok(o) if o.status.success() => {
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
            Some(exe)
        }
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            tailprof_testkit::skip(tailprof_testkit::Need::CCompiler, format_args!("no C compiler (cc: {e})"));
            None
        }
    }
}

/// A program run as the attacker, with its stdout read line by line.
struct Target {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Target {
    fn start(exe: &Path, args: &[&str], who: Option<(u32, u32)>) -> Target {
        let mut c = Command::new(exe);
        c.args(args).stdout(Stdio::piped()).stdin(Stdio::null());
        if let Some((u, g)) = who {
            c.uid(u).gid(g); // std drops supplementary groups when switching from root
        }
        let mut child = c.spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut t = Target { child, out };
        let l = t.line();
        assert!(l.starts_with("ready"), "target said {l:?}");
        t
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }
    /// Everything else it prints, after it exits; it must exit 0.
    fn finish(mut self) -> String {
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "target failed ({st}): {rest}");
        rest
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a recorder run did.
struct Recorded {
    ok: bool,
    stderr: String,
    /// Peak resident memory (KiB), from wait4's rusage of the recorder alone.
    maxrss_kb: i64,
}

/// Run `tailprof ARGS`, waiting with `wait4` (for its own peak memory); a recorder still
/// running after [`HANG`] is killed and the test fails.
fn record(args: &[&str], scene: &Scene) -> Recorded {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let err_path = scene.out.join(format!("stderr.{n}"));
    let err = std::fs::File::create(&err_path).unwrap();
    let child =
        Command::new(env!("CARGO_BIN_EXE_tailprof")).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4 failed");
        if start.elapsed() > HANG {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            panic!("tailprof {args:?} hung (killed after {HANG:?}): {stderr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::mem::forget(child); // already reaped
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    Recorded { ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, stderr, maxrss_kb: ru.ru_maxrss }
}

/// `tailprof info --json TRACE`: the trace must be readable.
fn info(trace: &Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tailprof")).arg("info").arg("--json").arg(trace).output().unwrap();
    assert!(o.status.success(), "info failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn loss(info: &serde_json::Value, key: &str) -> u64 {
    info["losses"].as_array().into_iter().flatten().find(|r| r["key"] == key).and_then(|r| r["count"].as_u64()).unwrap_or(0)
}

/// Region files in /dev/shm that belong to process `pid`.
fn regions_of(pid: u32) -> Vec<String> {
    let prefix = format!("tailprof.{pid}");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n == &prefix || n.starts_with(&format!("{prefix}.")))
                .collect()
        })
        .unwrap_or_default()
}

/// The common safe outcome: recorder exit 0, a readable trace with samples, bounded
/// memory, nothing else written into the output directory, no region left behind.
fn assert_safe(r: &Recorded, trace: &Path, scene: &Scene, target_pid: u32) -> serde_json::Value {
    assert!(r.ok, "recorder failed: {}", r.stderr);
    assert!(r.maxrss_kb < MAX_RSS_KB, "recorder peak memory {} KiB (bound {MAX_RSS_KB}): {}", r.maxrss_kb, r.stderr);
    let i = info(trace);
    assert!(i["samples"].as_u64().unwrap_or(0) > 0, "no samples: {i}\n{}", r.stderr);
    for e in std::fs::read_dir(&scene.out).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        assert!(n.ends_with(".trace") || n.starts_with("stderr."), "unexpected file {n} in the output directory");
    }
    assert_no_regions(target_pid);
    eprintln!("recorder peak RSS {} KiB, trace {} bytes", r.maxrss_kb, std::fs::metadata(trace).unwrap().len());
    i
}

/// No region of `pid` stays in /dev/shm. Another test's `record -a` running at the same
/// time may have attached to `pid` too and still hold one; it removes it when it ends, so
/// this waits (bounded) instead of failing on such a file at once.
fn assert_no_regions(pid: u32) {
    let start = Instant::now();
    while !regions_of(pid).is_empty() {
        assert!(start.elapsed() < HANG, "marker regions left in /dev/shm: {:?}", regions_of(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The number after `what` in record's summary (`item markers 1,234 | dropped markers 0`).
fn stderr_count(stderr: &str, what: &str) -> u64 {
    let line = stderr.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("record prints {what}: {stderr}"));
    let after = &line[line.find(what).unwrap() + what.len()..];
    after.split_whitespace().next().unwrap().replace(',', "").parse().unwrap()
}

fn trace(scene: &Scene, name: &str) -> PathBuf {
    scene.out.join(format!("{name}.trace"))
}

#[test]
fn finding_2_truncated_marker_region_attach_and_system_wide() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    // -p
    let t = Target::start(&exe, &["truncate", "4"], Some(who));
    let pid = t.pid().to_string();
    let out = trace(&s, "p");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid], &s);
    let said = t.finish();
    assert!(said.contains("truncated"), "the attacker could not truncate its region: {said}");
    assert_safe(&r, &out, &s, pid.parse().unwrap());
    assert!(r.stderr.contains("truncated its marker region"), "the truncation is reported: {}", r.stderr);
    // -a -- CMD: the recorder attaches to every process with the marker library.
    let t = Target::start(&exe, &["truncate", "4"], Some(who));
    let pid = t.pid();
    let out = trace(&s, "a");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-a", "--", "sleep", "3"], &s);
    let said = t.finish();
    assert_safe(&r, &out, &s, pid);
    if said.contains("truncated") {
        assert!(r.stderr.contains("truncated its marker region"), "{}", r.stderr);
    }
}

#[test]
fn finding_2_launched_command_region_is_sealed() {
    if !is_root() {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "not root");
        return;
    }
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    let out = trace(&s, "cmd");
    let r = record(&["record", "-o", out.to_str().unwrap(), "--", exe.to_str().unwrap(), "truncate", "2"], &s);
    assert!(r.ok, "{}", r.stderr);
    let i = assert_safe(&r, &out, &s, 0);
    assert!(loss(&i, "lost_markers") == 0, "{i}");
    // The command printed to our (null) stdout; the sealed region cannot shrink, so the
    // recorder never needed its guard.
    assert!(!r.stderr.contains("truncated its marker region"), "{}", r.stderr);
}

#[test]
fn finding_3_fifo_at_a_mapped_path() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    for variant in ["fifo", "symlink"] {
        let d = s.dir.join(variant);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        // -p
        let t = Target::start(&exe, &["fifo", "3", d.to_str().unwrap(), variant], Some(who));
        let pid = t.pid();
        let out = trace(&s, &format!("p-{variant}"));
        let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid.to_string()], &s);
        let said = t.finish();
        assert_safe(&r, &out, &s, pid);
        assert!(said.contains("done ok"), "root opened the attacker's FIFO ({variant}): {said}");
        std::fs::remove_dir_all(&d).unwrap();
        // -a
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let t = Target::start(&exe, &["fifo", "3", d.to_str().unwrap(), variant], Some(who));
        let pid = t.pid();
        let out = trace(&s, &format!("a-{variant}"));
        let r = record(&["record", "-o", out.to_str().unwrap(), "-a", "--", "sleep", "1"], &s);
        let said = t.finish();
        assert_safe(&r, &out, &s, pid);
        assert!(said.contains("done ok"), "root opened the attacker's FIFO ({variant}, -a): {said}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn finding_4_replaced_binary_and_fake_control_block() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(a) = build(&s.dir, "server", HOSTILE_C, &["-DCANARY_SIZE=65536"]) else { return };
    // The "upgrade": same program, different layout (its control block 32 KiB earlier, inside
    // the running binary's canary), renamed over the running binary's path.
    let Some(b) = build(&s.dir, "server.new", HOSTILE_C, &["-DCANARY_SIZE=32768"]) else { return };
    let t = Target::start(&a, &["plain", "3"], Some(who));
    std::fs::rename(&b, &a).unwrap();
    let pid = t.pid();
    let out = trace(&s, "replaced");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid.to_string()], &s);
    let said = t.finish(); // exit 3 and "canary damaged" if the recorder wrote into its data
    assert!(said.contains("done ok"), "{said}");
    let i = assert_safe(&r, &out, &s, pid);
    // The recorder enabled the real control block (read through /proc/PID/map_files).
    let markers: u64 = said.split_whitespace().last().unwrap().parse().unwrap();
    assert!(markers > 0, "markers were enabled in the running binary: {said}\n{}", r.stderr);
    assert!(i["samples"].as_u64().unwrap() > 0);

    // A symbol named tailprof_control that is not a control block: refused, nothing written.
    let Some(fake) = build(&s.dir, "fake", FAKE_CONTROL_C, &["-include", "stdlib.h"]) else { return };
    let t = Target::start(&fake, &["2"], Some(who));
    let pid = t.pid();
    let out = trace(&s, "fake");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid.to_string()], &s);
    let said = t.finish();
    assert!(said.contains("untouched"), "the recorder wrote into a fake control block: {said}");
    assert!(r.ok, "{}", r.stderr);
    let refusal: Vec<&str> = r.stderr.lines().filter(|l| l.contains("not a valid marker control block")).collect();
    assert_eq!(refusal.len(), 1, "one line says why markers were not enabled: {}", r.stderr);
    assert_no_regions(pid);
}

#[test]
fn finding_5_garbage_in_the_rings() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    let t = Target::start(&exe, &["garbage", "5"], Some(who));
    let pid = t.pid();
    let out = trace(&s, "garbage");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid.to_string()], &s);
    t.finish();
    let i = assert_safe(&r, &out, &s, pid);
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size < 32 << 20, "trace of {size} bytes from a garbage-writing target");
    assert!(loss(&i, "rejected_markers") > 0, "invalid markers are counted: {i}");
    assert!(loss(&i, "dropped_item_classes") > 0, "class labels beyond the bound are counted: {i}");
    // Counts from the target are clamped: nothing near u64::MAX.
    for key in ["lost_markers", "rejected_markers", "dropped_item_classes"] {
        assert!(loss(&i, key) < 1 << 48, "{key} = {}", loss(&i, key));
    }
}

#[test]
fn finding_6_squatted_region_names() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    // The attacker creates the names the old scheme would use for the next few hundred pids.
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid").unwrap().trim().parse().unwrap();
    let mut planted = Vec::new();
    let (u, g) = who;
    for pid in last + 1..last + 300 {
        for n in std::iter::once(String::new()).chain((1..16).map(|n| format!(".{n}"))) {
            let p = PathBuf::from(format!("/dev/shm/tailprof.{pid}{n}"));
            if std::fs::File::create_new(&p).is_ok() {
                std::os::unix::fs::chown(&p, Some(u), Some(g)).unwrap();
                planted.push(p);
            }
        }
    }
    let out = trace(&s, "cmd");
    let r = record(&["record", "-o", out.to_str().unwrap(), "--", exe.to_str().unwrap(), "plain", "2"], &s);
    for p in &planted {
        let _ = std::fs::remove_file(p);
    }
    assert_safe(&r, &out, &s, 0);
    assert!(!r.stderr.contains("without item markers"), "{}", r.stderr);
    assert!(stderr_count(&r.stderr, "item markers") > 0, "markers were recorded: {}", r.stderr);
}

#[test]
fn finding_8_flipped_drop_counters() {
    let Some(who) = attacker() else { return };
    let s = scene();
    let Some(exe) = build(&s.dir, "hostile", HOSTILE_C, &[]) else { return };
    let t = Target::start(&exe, &["flip", "4"], Some(who));
    let pid = t.pid();
    let out = trace(&s, "flip");
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", &pid.to_string()], &s);
    t.finish();
    let i = assert_safe(&r, &out, &s, pid);
    let said = stderr_count(&r.stderr, "dropped markers");
    assert_eq!(said, loss(&i, "lost_markers"), "record and info agree\n{}", r.stderr);
    assert!(said < 1 << 48, "clamped: {said}");
}

#[test]
fn launched_command_dies_with_the_recorder() {
    if !is_root() {
        tailprof_testkit::skip(tailprof_testkit::Need::Root, "not root");
        return;
    }
    let s = scene();
    let pidfile = s.out.join("child.pid");
    let out = trace(&s, "killed");
    let script = format!("echo $$ > {}; exec sleep 600", pidfile.display());
    let mut rec = Command::new(env!("CARGO_BIN_EXE_tailprof"))
        .args(["record", "-o", out.to_str().unwrap(), "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let child: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(start.elapsed() < HANG, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    rec.kill().unwrap(); // SIGKILL: no cleanup code runs in the recorder
    rec.wait().unwrap();
    let start = Instant::now();
    while Path::new(&format!("/proc/{child}")).exists()
        && !std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default().contains(") Z")
    {
        assert!(start.elapsed() < HANG, "the launched command outlived the recorder");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_no_regions(child);
}

#[test]
fn kernel_thread_pid_is_refused() {
    if std::fs::read_to_string("/proc/2/comm").map(|c| c.trim() != "kthreadd").unwrap_or(true) {
        tailprof_testkit::skip(tailprof_testkit::Need::Fact, "pid 2 is not kthreadd here");
        return;
    }
    let s = scene();
    let out = trace(&s, "k");
    // Guarded: a recorder that accepts it records kthreadd until killed.
    let r = record(&["record", "-o", out.to_str().unwrap(), "-p", "2"], &s);
    assert!(!r.ok);
    let err = r.stderr;
    assert!(err.contains("kernel thread"), "{err}");
    assert_eq!(err.lines().filter(|l| !l.trim().is_empty()).count(), 1, "one line: {err}");
    assert!(!out.exists(), "no trace written");
}
