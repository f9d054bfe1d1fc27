#!/usr/bin/env bash
# Call-stack recording cost, tailprof vs perf 6.1, same workload, same event and period,
# in one run (issue 7 benchmarks):
#   dwarf: tailprof record --call-graph dwarf  vs  perf record --call-graph dwarf
#          (a C program built -O2 -fomit-frame-pointer; leaf called from two callers)
#   fp:    tailprof record -g                  vs  perf record -g
#          (the same program built -fno-omit-frame-pointer)
#   pg-dwarf: --call-graph dwarf on the PostgreSQL 15 backend serving pgbench -c 1 (-p on
#          the backend; the recording ends when pgbench disconnects); NO_PG=1 skips it
# Both recorders attach with -p to an already running workload (so the recorder's own CPU
# time is measurable: getrusage of the recorder process only), event cpu-clock, -c 250000
# (4 kHz). Reported: samples, output bytes per sample, recorder CPU (user+sys) per sample,
# medians of RUNS runs, and the ratios tailprof/perf. perf's CPU includes its end-of-run
# build-id pass (perf's default).
# Usage: bench/stacks-bench.sh [RUNS] [SECONDS]     (root)
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-4}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TP=${TAILPROF:-$ROOT/target/release/tailprof}
[ -x "$TP" ] || (cd "$ROOT" && cargo build --release --bin tailprof >/dev/null)
W=$(mktemp -d /tmp/stacks-bench.XXXXXX)
chmod 755 "$W"
PGBIN=/usr/lib/postgresql/15/bin
cleanup() {
    if [ -f "$W/pg/postmaster.pid" ]; then su postgres -c "$PGBIN/pg_ctl -D $W/pg -m immediate stop" >/dev/null 2>&1 || true; fi
    rm -rf "$W"
}
trap cleanup EXIT
# PostgreSQL 15 under pgbench (a private cluster, port 5498), when installed.
PM=""
if [ -x "$PGBIN/postgres" ] && [ "${NO_PG:-0}" = 0 ]; then
    mkdir -p "$W/pg" "$W/sock" && chown postgres "$W/pg" "$W/sock"
    su postgres -c "$PGBIN/initdb -D $W/pg -A trust" >/dev/null
    su postgres -c "$PGBIN/pg_ctl -D $W/pg -o '-p 5498 -k $W/sock' -l $W/pg/pg.log start -w" >/dev/null
    su postgres -c "$PGBIN/pgbench -h $W/sock -p 5498 -i -s 5 postgres" >/dev/null 2>&1
    PM=$(head -1 "$W/pg/postmaster.pid")
fi
cat > "$W/split.c" <<'C'
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
volatile uint64_t sink;
__attribute__((noinline)) void leaf(uint64_t n) { volatile char f[16]; f[0] = 0; for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void caller_a(uint64_t n) { leaf(n); sink++; }
__attribute__((noinline)) void caller_b(uint64_t n) { leaf(n); sink++; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 4.0);
    for (long i = 0; now() < end; i++) { if (i % 10 < 3) caller_a(20000); else caller_b(20000); }
    return 0;
}
C
gcc -O2 -fomit-frame-pointer -o "$W/split-nofp" "$W/split.c"
gcc -O2 -fno-omit-frame-pointer -o "$W/split-fp" "$W/split.c"
export TP W SECS RUNS PM PGBIN
python3 - <<'PY'
import os, resource, statistics, subprocess, time, json, signal
TP, W, SECS, RUNS = os.environ["TP"], os.environ["W"], float(os.environ["SECS"]), int(os.environ["RUNS"])

def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

PM, PGBIN = os.environ.get("PM", ""), os.environ["PGBIN"]

def run(tool, mode, binary):
    out = f"{W}/{tool}-{mode}.out"
    pg = binary == "pgbench"
    if pg:
        work = subprocess.Popen(["su", "postgres", "-c", f"{PGBIN}/pgbench -h {W}/sock -p 5498 -c 1 -T {int(SECS)} postgres"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Its one backend (forked by the postmaster when pgbench connects).
        target = None
        for _ in range(100):
            time.sleep(0.02)
            r = subprocess.run(["pgrep", "-n", "-P", PM, "-f", "postgres: postgres postgres"], capture_output=True, text=True)
            if r.stdout.strip():
                target = int(r.stdout.split()[0])
                break
        assert target, "no pgbench backend found"
    else:
        work = subprocess.Popen([binary, str(SECS)])
        target = work.pid
    time.sleep(0.05)
    where = ["-p", str(target)]
    if tool == "tailprof":
        cg = ["--call-graph", "dwarf"] if mode.endswith("dwarf") else ["-g"]
        cmd = [TP, "record", "-e", "cpu-clock", "-c", "250000", *cg, *where, "-o", out]
    else:
        cg = ["--call-graph", "dwarf"] if mode.endswith("dwarf") else ["-g"]
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-c", "250000", *cg, *where, "-o", out]
    c0 = cpu_children()
    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec.wait()                      # the recorder stops when the workload exits
    cpu = cpu_children() - c0       # only the recorder has been waited for so far
    work.wait()
    size = os.path.getsize(out)
    if tool == "tailprof":
        info = json.loads(subprocess.run([TP, "info", "--json", out], capture_output=True, text=True).stdout)
        n = info["samples"]
        st = info["stacks"]
        complete = st.get("complete", 0) / max(sum(st.values()), 1)
        if RUNS == 1 or os.environ.get("VERBOSE"):
            print(mode, {k: v for k, v in st.items() if v}, flush=True)
    else:
        s = subprocess.run(["perf", "report", "--stats", "-i", out], capture_output=True, text=True).stdout
        n = int([l for l in s.splitlines() if "SAMPLE events" in l][0].split()[2])
        complete = float("nan")
    os.remove(out)
    return n, size, cpu, complete

rows = {}
modes = [("dwarf", f"{W}/split-nofp"), ("fp", f"{W}/split-fp")]
if PM:
    modes.append(("pg-dwarf", "pgbench"))
for r in range(RUNS):
    for mode, binary in modes:
        for tool in ("tailprof", "perf"):
            for attempt in range(3):
                try:
                    rows.setdefault((mode, tool), []).append(run(tool, mode, binary))
                    break
                except (FileNotFoundError, AssertionError, IndexError) as e:
                    # e.g. the backend found went away before the recorder attached
                    print(f"retrying {mode} {tool}: {e}", flush=True)
                    time.sleep(1)
med = lambda xs: statistics.median(xs)
print(f"runs={RUNS} seconds={SECS} event=cpu-clock period=250000ns (4 kHz); medians")
print(f"{'mode':8} {'tool':9} {'samples':>8} {'bytes/sample':>13} {'CPU us/sample':>14} {'complete':>9}")
res = {}
for (mode, tool), v in rows.items():
    n = med([x[0] for x in v]); bps = med([x[1] / max(x[0], 1) for x in v]); cps = med([1e6 * x[2] / max(x[0], 1) for x in v])
    comp = med([x[3] for x in v])
    res[(mode, tool)] = (bps, cps)
    print(f"{mode:8} {tool:9} {n:8.0f} {bps:13.1f} {cps:14.2f} {comp*100 if comp == comp else float('nan'):8.1f}%")
for mode, _ in modes:
    (tb, tc), (pb, pc) = res[(mode, "tailprof")], res[(mode, "perf")]
    print(f"{mode}: bytes/sample tailprof/perf = 1/{pb/tb:.0f}; recorder CPU/sample tailprof/perf = {tc/pc:.2f}")
PY
