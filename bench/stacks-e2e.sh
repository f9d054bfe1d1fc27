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
# The workload is bench/stacks-bench.sh's C program (leaf called from two callers, 30/70,
# -O2 -fomit-frame-pointer), run SECS seconds. CPU = user+sys from getrusage of the children:
# the recorder's minus the workload's own (the workload writes its getrusage(RUSAGE_SELF) at
# exit, so kernel sampling work charged to the workload is excluded for both tools), plus the
# whole post-processing step (perf script and the collapser both counted). Samples = the sum
# of the folded counts. Medians of RUNS repetitions, tools alternating which goes first.
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
trap 'rm -rf "$W"' EXIT
cat > "$W/split.c" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
volatile uint64_t sink;
__attribute__((noinline)) void leaf(uint64_t n) { volatile char f[16]; f[0] = 0; for (uint64_t i = 0; i < n; i++) sink += i * i; }
__attribute__((noinline)) void caller_a(uint64_t n) { leaf(n); sink++; }
__attribute__((noinline)) void caller_b(uint64_t n) { leaf(n); sink++; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 4.0);
    for (long i = 0; now() < end; i++) { if (i % 10 < 3) caller_a(20000); else caller_b(20000); }
    if (argc > 2) {   /* own CPU seconds, so the recorder's share can be separated */
        struct rusage r; getrusage(RUSAGE_SELF, &r);
        FILE *f = fopen(argv[2], "w");
        if (f) { fprintf(f, "%.6f\n", r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6); fclose(f); }
    }
    return 0;
}
C
gcc -O2 -fomit-frame-pointer -o "$W/w" "$W/split.c"
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
export TP W SECS RUNS
python3 - <<'PY'
import os, resource, statistics, subprocess, time
TP, W, SECS, RUNS = os.environ["TP"], os.environ["W"], os.environ["SECS"], int(os.environ["RUNS"])

def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def folded_stats(path):
    n = a = 0
    with open(path) as f:
        for line in f:
            stack, _, cnt = line.rstrip("\n").rpartition(" ")
            n += int(cnt)
            if "caller_a" in stack:
                a += int(cnt)
    return n, a / max(n, 1)

def run(tool):
    data, folded, wcpu = f"{W}/{tool}.data", f"{W}/{tool}.folded", f"{W}/{tool}.wcpu"
    common = ["-e", "cpu-clock", "-c", "250000", "--call-graph", "dwarf", "-o", data, "--", f"{W}/w", SECS, wcpu]
    rec = [TP, "record", *common] if tool == "tailprof" else ["perf", "record", "-q", *common]
    c0 = cpu()
    subprocess.run(rec, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    rec_cpu = cpu() - c0 - float(open(wcpu).read())
    c1, t1 = cpu(), time.monotonic()
    with open(folded, "w") as out:
        if tool == "tailprof":
            subprocess.run([TP, "report", "--folded", data], stdout=out, stderr=subprocess.DEVNULL, check=True)
        else:
            ps = subprocess.Popen(["perf", "script", "-i", data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            aw = subprocess.Popen(["awk", "-f", f"{W}/collapse.awk"], stdin=ps.stdout, stdout=out)
            ps.stdout.close()
            if aw.wait() or ps.wait():
                raise SystemExit("perf script | collapser failed")
    post_wall, post_cpu = time.monotonic() - t1, cpu() - c1
    n, share_a = folded_stats(folded)
    size = os.path.getsize(data)
    for p in (data, folded, wcpu):
        os.remove(p)
    return dict(samples=n, rec_cpu=rec_cpu, post_cpu=post_cpu, post_wall=post_wall, share_a=share_a, size=size)

rows = {"tailprof": [], "perf": []}
for r in range(RUNS):
    for tool in (("tailprof", "perf") if r % 2 == 0 else ("perf", "tailprof")):
        rows[tool].append(run(tool))
med = statistics.median
print(f"runs={RUNS} seconds={SECS} event=cpu-clock -c 250000 (4 kHz) --call-graph dwarf; medians; "
      f"loadavg {open('/proc/loadavg').read().split()[0:3]}")
print(f"{'tool':9} {'samples':>8} {'caller_a':>8} {'rec CPU s':>9} {'post CPU s':>10} {'post wall s':>11} "
      f"{'total CPU us/sample':>19} {'post wall us/sample':>19}")
res = {}
for tool, v in rows.items():
    tot = med([1e6 * (x["rec_cpu"] + x["post_cpu"]) / max(x["samples"], 1) for x in v])
    pw = med([1e6 * x["post_wall"] / max(x["samples"], 1) for x in v])
    res[tool] = (tot, pw)
    print(f"{tool:9} {med([x['samples'] for x in v]):8.0f} {100 * med([x['share_a'] for x in v]):7.1f}% "
          f"{med([x['rec_cpu'] for x in v]):9.3f} {med([x['post_cpu'] for x in v]):10.3f} "
          f"{med([x['post_wall'] for x in v]):11.3f} {tot:19.2f} {pw:19.2f}")
print(f"perf/tailprof: total CPU per sample {res['perf'][0] / res['tailprof'][0]:.1f}x, "
      f"post-processing wall per sample {res['perf'][1] / res['tailprof'][1]:.1f}x (target >= 10x)")
PY
