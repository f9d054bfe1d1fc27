#!/usr/bin/env bash
# bench/agent-slowdown.sh: how much `tailprof agent` at its defaults slows a CPU-bound
# workload, measured with `tailprof overhead`'s method, side by side with
# `perf record -a -F 49 -g` (what a user would run instead).
#
#   bench/agent-slowdown.sh [TRIPLES=24] [RUN_S=5] [SETTLE_S=3]
#
# The method (crates/tailprof-measure/src/overhead.rs, estimator in
# crates/tailprof-analyze/src/overhead/predict.rs `overhead_estimate`):
# - fixed work, not fixed time: one process per CPU runs the same number of loop
#   iterations (calibrated once to take about RUN_S s here); a run's time is the wall time
#   until all of them finish (and, as the CPU basis, their user+sys time from wait4);
# - interleaved: TRIPLES repetitions of (no profiler, agent, perf) in rotated order, so
#   slow drift of the shared machine hits every arm alike;
# - each profiler is started SETTLE_S s before the run and stopped (SIGINT) after it, so
#   the run sees its steady state: setup is excluded, the window writes (every 10 s) fall
#   into about half of the runs. The store persists across the agent's restarts (symbol
#   tables are written once per binary, as for a long-running agent); a first, unmeasured
#   agent run of 15 s writes the tables of the binaries already running;
# - slowdown = median(profiled) / median(unprofiled) − 1 over the triples, with the paired
#   bootstrap 95% interval (2000 resamples of the triples, 2.5% and 97.5% quantiles),
#   the same estimator as `overhead_estimate` (re-implemented below in Python).
# Reports the 1-minute load average before, during and after. Needs root, cc, perf and a
# release build (cargo build --release -p tailprof).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
TRIPLES=${1:-24}
RUN_S=${2:-5}
SETTLE_S=${3:-3}
TAILPROF=${TAILPROF:-target/release/tailprof}
PERF=${PERF:-perf}
need cc; need "$PERF"; [ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release -p tailprof"
[ "$(id -u)" = 0 ] || die "run as root (system-wide sampling)"
W=$(mktemp -d /tmp/tailprof-bench-slowdown.XXXXXX)
trap 'rm -rf "$W"' EXIT

cat > "$W/work.c" <<'C'
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline)) void work(long n) { unsigned long x = 1; for (long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1; sink = x; }
int main(int argc, char **argv) { long n = atol(argv[1]); for (long i = 0; i < n; i++) work(100000); return 0; }
C
cc -O2 -fno-omit-frame-pointer -o "$W/work" "$W/work.c"

python3 - "$W" "$TAILPROF" "$PERF" "$TRIPLES" "$RUN_S" "$SETTLE_S" <<'PY'
import os, random, signal, subprocess, sys, time
W, TAILPROF, PERF = sys.argv[1], sys.argv[2], sys.argv[3]
TRIPLES, RUN_S, SETTLE = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
NCPU = os.cpu_count() or 1
def log(*a): print(f"[bench {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)

def workload(n):
    """NCPU processes of n × 100k iterations: (wall_s, cpu_s) until all finish."""
    t0 = time.monotonic()
    ps = [subprocess.Popen([f"{W}/work", str(n)]) for _ in range(NCPU)]
    cpu = 0.0
    for p in ps:
        _, st, ru = os.wait4(p.pid, 0)
        if st != 0: sys.exit(f"workload failed: status {st}")
        cpu += ru.ru_utime + ru.ru_stime
    return time.monotonic() - t0, cpu

def start(mode):
    if mode == "agent":
        cmd = [TAILPROF, "agent", "--store", f"{W}/store", "--host", "bench"]
    elif mode == "perf":
        cmd = [PERF, "record", "-a", "-F", "49", "-g", "-q", "-o", f"{W}/perf.data"]
    else:
        return None
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{W}/{mode}.err", "a"))

def stop(p):
    if p is None: return
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill(); p.wait()
        log(f"profiler pid {p.pid} did not stop in 60 s: killed")

# Calibrate the work to about RUN_S s, then a first agent run that writes the symbol tables.
n = 200
for _ in range(3):
    w, _ = workload(n)
    n = max(1, round(n * RUN_S / max(w, 1e-3)))
log(f"{NCPU} workers x {n} x 100k iterations (calibrated: {w:.2f} s for the previous guess)")
a = start("agent"); time.sleep(15); stop(a)

rows, loads = [], [os.getloadavg()[0]]
for t in range(TRIPLES):
    arms = ["none", "agent", "perf"]
    arms = arms[t % 3:] + arms[:t % 3]
    for m in arms:
        p = start(m)
        time.sleep(SETTLE)
        if p is not None and p.poll() is not None:
            sys.exit(f"{m} exited early: see {W}/{m}.err: " + open(f"{W}/{m}.err").read()[-500:])
        wall, cpu = workload(n)
        stop(p)
        loads.append(os.getloadavg()[0])
        rows.append((t, m, wall, cpu))
        log(f"triple {t + 1}/{TRIPLES} {m}: {wall:.3f} s wall, {cpu:.3f} s cpu, load {loads[-1]:.2f}")
        try: os.unlink(f"{W}/perf.data")
        except FileNotFoundError: pass

def median(xs):
    s = sorted(xs); k = len(s)
    return s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2

def quantile(s, q):  # type 7, as stats::quantile_sorted
    h = (len(s) - 1) * q; lo = int(h); hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])

def estimate(pairs):
    """overhead_estimate: ratio of medians, paired-bootstrap 95% interval."""
    b, p = median([x[0] for x in pairs]), median([x[1] for x in pairs])
    rng = random.Random(0x5eed ^ len(pairs))
    reps = []
    for _ in range(2000):
        rs = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        reps.append((median([x[1] for x in rs]) / median([x[0] for x in rs]) - 1) * 100)
    reps.sort()
    return (p / b - 1) * 100, quantile(reps, 0.025), quantile(reps, 0.975)

by = {(t, m): (wall, cpu) for t, m, wall, cpu in rows}
loads.sort()
print(f"{NCPU} CPUs, {NCPU} workers of fixed work (~{RUN_S:.0f} s each), {TRIPLES} interleaved triples, "
      f"settle {SETTLE:.0f} s; 1-min load average min/median/max {loads[0]:.2f}/{median(loads):.2f}/{loads[-1]:.2f}")
print("| profiler | median run, wall | slowdown, wall (95% interval) | median run, CPU | slowdown, CPU basis (95% interval) |")
print("|---|---|---|---|---|")
base = [by[(t, "none")] for t in range(TRIPLES)]
print(f"| none | {median([x[0] for x in base]):.3f} s | - | {median([x[1] for x in base]):.3f} s | - |")
for m, name in [("agent", "tailprof agent (defaults)"), ("perf", "perf record -a -F 49 -g")]:
    prof = [by[(t, m)] for t in range(TRIPLES)]
    ew = estimate([(b[0], p[0]) for b, p in zip(base, prof)])
    ec = estimate([(b[1], p[1]) for b, p in zip(base, prof)])
    print(f"| {name} | {median([x[0] for x in prof]):.3f} s | {ew[0]:+.2f}% [{ew[1]:+.2f}, {ew[2]:+.2f}] "
          f"| {median([x[1] for x in prof]):.3f} s | {ec[0]:+.2f}% [{ec[1]:+.2f}, {ec[2]:+.2f}] |")
with open(f"{W}/rows.tsv", "w") as f:
    for r in rows: f.write("\t".join(map(str, r)) + "\n")
print("raw runs (triple, arm, wall_s, cpu_s):", file=sys.stderr)
for r in rows: print(*r, sep="\t", file=sys.stderr)
PY
