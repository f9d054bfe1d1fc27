#!/usr/bin/env bash
# bench/stacks-e2e.sh: record + folded stacks end to end, tailprof vs perf 6.1, same workload,
# same event and period, side by side in one run (issue 7 benchmarks: "record + report (folded
# stacks) end to end at least 10x faster than perf record + perf script + stack collapsing").
#
#   tailprof: tailprof record -e cpu-clock -c 250000 --call-graph dwarf -o T -- ./w SECS
#             tailprof report --folded T > T.folded
#   perf:     perf record -e cpu-clock -c 250000 --call-graph dwarf -o P -- ./w SECS
#             perf script -i P | awk collapser > P.folded
#             (stackcollapse-perf.pl is not installed; the awk collapser below does the same
#             job: one "comm;root;...;leaf COUNT" line per distinct stack, offsets stripped)
# Workloads (WORKLOADS="c2 deep pg" by default; each skipped with a message when its tool is
# missing):
#   c2:   bench/stacks-bench.sh's C program (leaf called from two callers, 30/70,
#         -O2 -fomit-frame-pointer): shallow stacks, two paths;
#   deep: a C program (-O2 -fomit-frame-pointer) whose leaf is reached through 20-40 frames
#         of four mutually recursive functions, the path chosen by a fixed pseudo-random
#         sequence (hundreds of distinct stacks);
#   pg:   the PostgreSQL 15 backend serving `pgbench -c 1 -T SECS` on a private cluster
#         (both recorders attach with -p to the backend; the recording ends when pgbench
#         disconnects); needs /usr/lib/postgresql/*/bin.
# CPU is measured with transient cgroup v2 groups (under the cgroup2 mount, e.g.
# /sys/fs/cgroup or /sys/fs/cgroup/unified; a group's cpu.stat usage_usec counts every
# process in it and all its descendants, whether or not anyone waits for them: perf script's
# addr2line children included, which getrusage(RUSAGE_CHILDREN) misses when perf does not
# wait for them). Each step's process joins a fresh group before it execs (Popen
# preexec_fn writes "0" to GROUP/cgroup.procs), the group is read once it is empty, then
# removed:
#   record: the recorder in group "rec". c2/deep: the workload (the recorder's child)
#           moves itself to a sibling group "wl" first thing in main() (E2E_WLCG names its
#           cgroup.procs), so kernel sampling work charged to the workload is excluded for
#           both tools (only the fork/exec of the workload before main() stays with the
#           recorder: well under a millisecond). pg: the backend is in neither group.
#   post:   tailprof report, or perf script + the awk collapser (+ addr2line), group "post".
# The old getrusage accounting is printed as a cross-check (children's user+sys; c2/deep
# minus the workload's own RUSAGE_SELF, which it writes at exit); it is the only one (with a
# note) when no cgroup2 is mounted or writable. Samples = the sum of the folded counts.
# Medians of RUNS repetitions, tools alternating which goes first.
# Usage: bench/stacks-e2e.sh [RUNS] [SECS]     (root)
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
need perf
need gcc
TP=${TAILPROF:-$ROOT/target/release/tailprof}
[ -x "$TP" ] || (cd "$ROOT" && cargo build --release -q -p tailprof)
W=$(mktemp -d /tmp/stacks-e2e.XXXXXX)
cleanup() {
    if [ -f "$W/pg/postmaster.pid" ]; then su postgres -c "$PGBIN/pg_ctl -D $W/pg -m immediate stop" >/dev/null 2>&1 || true; fi
    rm -rf "$W"
}
trap cleanup EXIT
# What both C workloads share: the clock, leaving the recorder's cgroup, and writing their
# own CPU seconds (argv[2]) so the recorder's share can be separated.
cat > "$W/e2e.h" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
volatile uint64_t sink;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void own_cgroup(void) {   /* out of the recorder's cgroup (see the header) */
    const char *cg = getenv("E2E_WLCG");
    FILE *f = cg ? fopen(cg, "w") : NULL;
    if (f) { fprintf(f, "0\n"); fclose(f); }
}
static void report_own_cpu(int argc, char **argv) {
    if (argc <= 2) return;
    struct rusage r; getrusage(RUSAGE_SELF, &r);
    FILE *f = fopen(argv[2], "w");
    if (f) { fprintf(f, "%.6f\n", r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6); fclose(f); }
}
C
cat > "$W/split.c" <<'C'
#include "e2e.h"
__attribute__((noinline)) void leaf(uint64_t n) { volatile char f[16]; f[0] = 0; for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void caller_a(uint64_t n) { leaf(n); sink++; }
__attribute__((noinline)) void caller_b(uint64_t n) { leaf(n); sink++; }
int main(int argc, char **argv) {
    own_cgroup();
    double end = now() + (argc > 1 ? atof(argv[1]) : 4.0);
    for (long i = 0; now() < end; i++) { if (i % 10 < 3) caller_a(20000); else caller_b(20000); }
    report_own_cpu(argc, argv);
    return 0;
}
C
gcc -O2 -fomit-frame-pointer -o "$W/w" "$W/split.c"
cat > "$W/deep.c" <<'C'
#include "e2e.h"
static uint32_t rng = 12345;
static uint32_t next(void) { rng = rng * 1103515245u + 12345u; return rng >> 16; }
__attribute__((noinline)) void leaf(uint64_t n) { for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void f0(int d, uint32_t p);
__attribute__((noinline)) void f1(int d, uint32_t p);
__attribute__((noinline)) void f2(int d, uint32_t p);
__attribute__((noinline)) void f3(int d, uint32_t p);
typedef void (*fn)(int, uint32_t);
static fn fns[4] = {f0, f1, f2, f3};
#define BODY(k) { volatile char pad[32 + 16 * k]; pad[0] = (char)d; if (d == 0) leaf(2000 + 500 * k); else fns[p & 3](d - 1, p >> 2 | p << 30); sink += pad[0]; }
void f0(int d, uint32_t p) BODY(0)
void f1(int d, uint32_t p) BODY(1)
void f2(int d, uint32_t p) BODY(2)
void f3(int d, uint32_t p) BODY(3)
int main(int argc, char **argv) {
    own_cgroup();
    double end = now() + (argc > 1 ? atof(argv[1]) : 4.0);
    while (now() < end) { uint32_t p = next() % 64; f0(20 + next() % 21, p * 0x9e3779b9u); }
    report_own_cpu(argc, argv);
    return 0;
}
C
gcc -O2 -fomit-frame-pointer -fno-optimize-sibling-calls -o "$W/deep" "$W/deep.c"
WORKLOADS=${WORKLOADS:-c2 deep pg}
# PostgreSQL: a private cluster on port 5499 with pgbench's tables (scale 5).
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
PM=
case " $WORKLOADS " in *" pg "*)
    if [ -n "$PGBIN" ] && [ -x "$PGBIN/postgres" ] && [ -x "$PGBIN/pgbench" ] && id postgres >/dev/null 2>&1; then
        chmod 755 "$W"   # mktemp -d is 0700: the postgres user must reach its cluster
        mkdir -p "$W/pg" "$W/sock" && chown postgres "$W/pg" "$W/sock"
        su postgres -c "$PGBIN/initdb -D $W/pg -A trust" >/dev/null
        su postgres -c "$PGBIN/pg_ctl -D $W/pg -o '-p 5499 -k $W/sock' -l $W/pg/pg.log start -w" >/dev/null
        su postgres -c "$PGBIN/pgbench -h $W/sock -p 5499 -i -s 5 postgres" >/dev/null 2>&1
        PM=$(head -1 "$W/pg/postmaster.pid")
    else
        log "pg: skipped (PostgreSQL with pgbench and a postgres user not installed)"
    fi;;
esac
# The collapser: perf script's default output is a header line per sample, then one
# "\t ADDR SYM+OFF (DSO)" line per frame (leaf first), then a blank line.
cat > "$W/collapse.awk" <<'AWK'
function flush(   s, i) {
    if (!have) return
    s = comm
    for (i = n; i >= 1; i--) s = s ";" f[i]
    c[s]++
    have = 0; n = 0
}
/^[^ \t]/ { flush(); comm = $1; have = 1; n = 0; next }
/^[ \t]/  { sym = $2; sub(/\+0x[0-9a-f]+$/, "", sym); f[++n] = sym; next }
/^$/      { flush() }
END       { flush(); for (s in c) print s, c[s] }
AWK
export TP W SECS RUNS WORKLOADS PM PGBIN
python3 - <<'PY'
import os, resource, statistics, subprocess, time
TP, W, SECS, RUNS = os.environ["TP"], os.environ["W"], os.environ["SECS"], int(os.environ["RUNS"])
PM, PGBIN = os.environ.get("PM", ""), os.environ.get("PGBIN", "")

def cgroup_root():
    """A writable cgroup v2 directory for our transient groups, or None."""
    try:
        mounts = [l.split() for l in open("/proc/mounts")]
    except OSError:
        return None
    for m in mounts:
        if len(m) > 2 and m[2] == "cgroup2":
            d = f"{m[1]}/tailprof-e2e.{os.getpid()}"
            try:
                os.mkdir(d)
                if os.path.exists(f"{d}/cpu.stat"):
                    return d
                os.rmdir(d)
            except OSError:
                pass
    return None

CG = cgroup_root()

class Group:
    """A transient cgroup v2 group: join() in a child before exec, usage() once it is empty."""
    def __init__(self, name):
        self.d = f"{CG}/{name}" if CG else None
        if self.d:
            os.mkdir(self.d)
    def join(self):
        if self.d:
            with open(f"{self.d}/cgroup.procs", "w") as f:
                f.write("0")
    def usage(self):
        if not self.d:
            return None
        for _ in range(500):   # wait for orphans (addr2line) to exit: up to 10 s
            if not open(f"{self.d}/cgroup.procs").read().strip():
                break
            time.sleep(0.02)
        for line in open(f"{self.d}/cpu.stat"):
            k, v = line.split()
            if k == "usage_usec":
                return int(v) / 1e6
        return None
    def remove(self):
        if self.d:
            for _ in range(100):
                try:
                    os.rmdir(self.d)
                    return
                except OSError:
                    time.sleep(0.05)

def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def folded_stats(path, needle):
    n = a = 0
    with open(path) as f:
        for line in f:
            stack, _, cnt = line.rstrip("\n").rpartition(" ")
            n += int(cnt)
            if needle and needle in stack:
                a += int(cnt)
    return n, a / max(n, 1)

def pg_backend():
    # The previous run's backend must be gone first (else pgrep may pick it as it exits).
    for _ in range(200):
        if not subprocess.run(["pgrep", "-P", PM, "-f", "postgres: postgres postgres"], capture_output=True).stdout.strip():
            break
        time.sleep(0.02)
    work = subprocess.Popen(["su", "postgres", "-c", f"{PGBIN}/pgbench -h {W}/sock -p 5499 -c 1 -T {int(float(SECS))} postgres"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # pgbench connects once to prepare (vacuum) and then for the run: take the backend
    # that is still the newest 0.3 s after it was seen.
    seen = None
    for _ in range(200):
        time.sleep(0.02 if seen is None else 0.3)
        r = subprocess.run(["pgrep", "-n", "-P", PM, "-f", "postgres: postgres postgres"], capture_output=True, text=True)
        pid = int(r.stdout.split()[0]) if r.stdout.strip() else None
        if pid is not None and pid == seen:
            return work, pid
        seen = pid
    raise SystemExit("pg: no pgbench backend found")

def run(tool, wl):
    data, folded, wcpu = f"{W}/{tool}.data", f"{W}/{tool}.folded", f"{W}/{tool}.wcpu"
    opts = ["-e", "cpu-clock", "-c", "250000", "--call-graph", "dwarf", "-o", data]
    work = None
    if wl == "pg":
        work, pid = pg_backend()
        target = ["-p", str(pid)]
    else:
        target = ["--", f"{W}/{'w' if wl == 'c2' else 'deep'}", SECS, wcpu]
    rec = [TP, "record", *opts, *target] if tool == "tailprof" else ["perf", "record", "-q", *opts, *target]
    g_rec, g_wl, g_post = Group("rec"), Group("wl"), Group("post")
    env = dict(os.environ, **({"E2E_WLCG": f"{g_wl.d}/cgroup.procs"} if g_wl.d else {}))
    c0 = cpu()
    r = subprocess.run(rec, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=g_rec.join, env=env)
    # perf record -p exits non-zero when its target goes away; the data must be there.
    if r.returncode != 0 and not (work is not None and os.path.exists(data) and os.path.getsize(data) > 0):
        raise SystemExit(f"{tool} record failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    rec_ru = cpu() - c0
    if work is not None:
        work.wait()
    else:
        rec_ru -= float(open(wcpu).read())
    rec_cg = g_rec.usage()
    c1, t1 = cpu(), time.monotonic()
    with open(folded, "w") as out:
        if tool == "tailprof":
            subprocess.run([TP, "report", "--folded", data], stdout=out, stderr=subprocess.DEVNULL, check=True, preexec_fn=g_post.join)
        else:
            ps = subprocess.Popen(["perf", "script", "-i", data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=g_post.join)
            aw = subprocess.Popen(["awk", "-f", f"{W}/collapse.awk"], stdin=ps.stdout, stdout=out, preexec_fn=g_post.join)
            ps.stdout.close()
            if aw.wait() or ps.wait():
                raise SystemExit("perf script | collapser failed")
    post_wall, post_ru = time.monotonic() - t1, cpu() - c1
    post_cg = g_post.usage()
    for g in (g_rec, g_wl, g_post):
        g.remove()
    n, share = folded_stats(folded, {"c2": "caller_a", "deep": "f3", "pg": "PortalRun"}[wl])
    size = os.path.getsize(data)
    for p in (data, folded, wcpu):
        if os.path.exists(p):
            os.remove(p)
    return dict(samples=n, rec_cpu=rec_ru if rec_cg is None else rec_cg, post_cpu=post_ru if post_cg is None else post_cg,
                rec_ru=rec_ru, post_ru=post_ru, post_wall=post_wall, share=share, size=size)

med = statistics.median
try:
    print(f"runs={RUNS} seconds={SECS} event=cpu-clock -c 250000 (4 kHz) --call-graph dwarf; medians; "
          f"loadavg {open('/proc/loadavg').read().split()[0:3]}")
    print(f"CPU: cgroup v2 cpu.stat usage_usec (groups under {os.path.dirname(CG)}); 'rusage' = getrusage cross-check" if CG else
          "CPU: NOTE no writable cgroup2 mount: getrusage of the children only (perf script's addr2line children may be missed)")
    print(f"{'workload':8} {'tool':9} {'samples':>8} {'share':>6} {'rec CPU s':>9} {'post CPU s':>10} {'post wall s':>11} "
          f"{'rec us/smp':>10} {'total CPU us/smp':>16} {'post wall us/smp':>16} {'rusage rec/post s':>17} {'rusage tot us/smp':>17}")
    for wl in os.environ["WORKLOADS"].split():
        if wl == "pg" and not PM:
            continue
        rows = {"tailprof": [], "perf": []}
        for r in range(RUNS):
            for tool in (("tailprof", "perf") if r % 2 == 0 else ("perf", "tailprof")):
                rows[tool].append(run(tool, wl))
        res = {}
        for tool, v in rows.items():
            tot = med([1e6 * (x["rec_cpu"] + x["post_cpu"]) / max(x["samples"], 1) for x in v])
            tot_ru = med([1e6 * (x["rec_ru"] + x["post_ru"]) / max(x["samples"], 1) for x in v])
            rc = med([1e6 * x["rec_cpu"] / max(x["samples"], 1) for x in v])
            pw = med([1e6 * x["post_wall"] / max(x["samples"], 1) for x in v])
            res[tool] = (tot, pw, tot_ru)
            print(f"{wl:8} {tool:9} {med([x['samples'] for x in v]):8.0f} {100 * med([x['share'] for x in v]):5.1f}% "
                  f"{med([x['rec_cpu'] for x in v]):9.3f} {med([x['post_cpu'] for x in v]):10.3f} "
                  f"{med([x['post_wall'] for x in v]):11.3f} {rc:10.2f} {tot:16.2f} {pw:16.2f} "
                  f"{med([x['rec_ru'] for x in v]):8.3f}/{med([x['post_ru'] for x in v]):.3f} {tot_ru:17.2f}", flush=True)
        cpu_r, wall_r, ru_r = res["perf"][0] / res["tailprof"][0], res["perf"][1] / res["tailprof"][1], res["perf"][2] / res["tailprof"][2]
        print(f"{wl:8} perf/tailprof: total CPU per sample {cpu_r:.1f}x (rusage {ru_r:.1f}x), post-processing wall per sample {wall_r:.1f}x "
              f"-> {'PASS' if cpu_r >= 10 else 'FAIL'} (target >= 10x)", flush=True)
finally:
    if CG:
        os.rmdir(CG)
PY
