#!/usr/bin/env bash
# bench/agent.sh: the continuous-profiling agent's cost at defaults, side by side with what a
# user would run instead (`perf record -a -F 49 -g`), on a busy machine (one CPU-bound
# spinner per CPU), and the store's disk use per host per day.
#
#   bench/agent.sh [SECONDS=30] [REPS=3]
#
# Per repetition, in rotated order: no profiler, `tailprof agent` (defaults: cpu-clock 49 Hz
# per CPU, fp stacks, 10 s windows), `perf record -a -F 49 -g -- sleep SECONDS`. Reported
# (medians over REPS): profiler CPU (user+sys from wait4, setup and symbolization included)
# as % of one core, peak RSS, spinner throughput relative to no profiler (the workload
# slowdown), and bytes written, scaled to a day. Needs root, cc, perf, a release build
# (cargo build --release -p tailprof).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-30}
REPS=${2:-3}
TAILPROF=${TAILPROF:-target/release/tailprof}
PERF=${PERF:-perf}
need cc; need "$PERF"; [ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release -p tailprof"
NCPU=$(nproc)
W=$(mktemp -d /tmp/tailprof-bench-agent.XXXXXX)
trap 'rm -rf "$W"' EXIT

cat > "$W/spin.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned long sink;
__attribute__((noinline)) void work(long n) { unsigned long x = 1; for (long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1; sink = x; }
int main(int argc, char **argv) { double end = now() + atof(argv[1]); long loops = 0; while (now() < end) { work(100000); loops++; } printf("%ld\n", loops); return 0; }
C
cc -O2 -fno-omit-frame-pointer -o "$W/spin" "$W/spin.c"

# rusage CMD...: "CPU_SECONDS MAXRSS_KIB" of CMD (wait4).
rusage() {
    python3 -c 'import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, st, ru = os.wait4(p.pid, 0)
print(ru.ru_utime + ru.ru_stime, ru.ru_maxrss)' "$@"
}

# run MODE: one repetition; prints "MODE cpu_s rss_kib loops bytes".
run() {
    local mode=$1 d="$W/$1" pids=() loops=0 out
    rm -rf "$d"; mkdir -p "$d"
    for ((c = 0; c < NCPU; c++)); do "$W/spin" "$SECS" > "$d/spin$c" & pids+=($!); done
    case $mode in
        none) out="0 0"; sleep "$SECS" ;;
        agent) out=$(rusage "$TAILPROF" agent --store "$d/store" --duration "${SECS}s") ;;
        perf) out=$(rusage "$PERF" record -a -F 49 -g -o "$d/perf.data" -- sleep "$SECS") ;;
    esac
    wait "${pids[@]}"
    for ((c = 0; c < NCPU; c++)); do loops=$((loops + $(cat "$d/spin$c"))); done
    local bytes=0
    [ -d "$d/store" ] && bytes=$(du -sb "$d/store" | cut -f1)
    [ -f "$d/perf.data" ] && bytes=$(stat -c %s "$d/perf.data")
    echo "$mode $out $loops $bytes"
}

for ((r = 0; r < REPS; r++)); do
    for m in $(rotate "$r" none agent perf); do
        log "rep $((r + 1))/$REPS: $m"
        run "$m" | tee -a "$W/results"
    done
done

python3 - "$W/results" "$SECS" "$NCPU" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
secs, ncpu = float(sys.argv[2]), int(sys.argv[3])
by = {}
for m, cpu, rss, loops, b in rows:
    by.setdefault(m, []).append((float(cpu), int(rss), int(loops), int(b)))
base = statistics.median(x[2] for x in by["none"])
print(f"{ncpu} CPUs busy (one spinner each), {secs:.0f} s per run, medians of {len(by['none'])} runs")
print("| profiler | CPU (% of one core) | peak RSS | workload throughput vs none | disk per day |")
print("|---|---|---|---|---|")
for m, name in [("agent", "tailprof agent (defaults)"), ("perf", "perf record -a -F 49 -g")]:
    v = by[m]
    cpu = statistics.median(x[0] for x in v) / secs * 100
    rss = statistics.median(x[1] for x in v) / 1024
    thr = statistics.median(x[2] for x in v) / base
    day = statistics.median(x[3] for x in v) * 86400 / secs / 2**20
    print(f"| {name} | {cpu:.2f}% | {rss:.0f} MiB | {100 * (thr - 1):+.2f}% | {day:.0f} MiB |")
PY
