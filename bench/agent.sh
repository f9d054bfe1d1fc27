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
# slowdown), and bytes written, scaled to a day; then per agent run: symbol tables failed,
# functions stored, the symbolizer thread's CPU (whole run, and in the steady state next to
# the rest of the agent) and peak RSS. Needs root, cc, perf, a release build
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
p = subprocess.Popen(sys.argv[1:], stdout=open(os.environ.get("RU_OUT", os.devnull), "w"), stderr=subprocess.DEVNULL)
_, st, ru = os.wait4(p.pid, 0)
print(ru.ru_utime + ru.ru_stime, ru.ru_maxrss)' "$@"
}

# cpu_ticks PID: utime+stime of PID in clock ticks.
cpu_ticks() { [ -r "/proc/$1/stat" ] && awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo nan; }
# sym_ticks PID: utime+stime of PID's symbolizer thread (agent; 0 for perf).
sym_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = tailprof-symbol ] && { awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo nan; return; }
    done
    echo 0
}
HZ=$(getconf CLK_TCK)
WARM=${WARM:-$((SECS / 3))}

# run MODE: one repetition; prints "MODE total_cpu_s maxrss_kib loops bytes steady_cpu_s rss_end_kib sym_bytes".
# steady_cpu_s: the profiler's CPU from WARM s after start to the end of the run (setup,
# /proc synthesis and the one-time symbolization of the binaries already running are over).
run() {
    local mode=$1 d="$W/$1" pids=() loops=0 out="0 0" ppid="" t1=nan t2=nan s1=nan s2=nan rss=0
    rm -rf "$d"; mkdir -p "$d"
    for ((c = 0; c < NCPU; c++)); do "$W/spin" "$SECS" > "$d/spin$c" & pids+=($!); done
    case $mode in
        none) sleep "$SECS" ;;
        agent) RU_OUT="$d/summary.json" rusage "$TAILPROF" agent --store "$d/store" --duration "${SECS}s" --json > "$d/ru" & ppid=$! ;;
        perf) rusage "$PERF" record -a -F 49 -g -o "$d/perf.data" -- sleep "$SECS" > "$d/ru" & ppid=$! ;;
    esac
    if [ -n "$ppid" ]; then
        sleep 1
        # the profiler process under the background subshell and the rusage wrapper (on a
        # loaded machine python may take a while to start it: look again for up to 4 s)
        local child=$ppid k try
        for try in 1 2 3 4 5 6 7 8; do
            child=$ppid
            for k in 1 2 3 4; do
                case $(cat "/proc/$child/comm" 2>/dev/null) in tailprof*|perf) break ;; esac
                child=$(pgrep -P "$child" | head -n 1 || true); [ -n "$child" ] || break
            done
            case $(cat "/proc/${child:-0}/comm" 2>/dev/null) in tailprof*|perf) break ;; esac
            sleep 0.5
        done
        sleep "$((WARM - 1 - try / 2))"; t1=$(cpu_ticks "$child"); s1=$(sym_ticks "$child")
        sleep "$((SECS - WARM - 1))"; t2=$(cpu_ticks "$child"); s2=$(sym_ticks "$child")
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$child/status" 2>/dev/null || echo 0)
        wait "$ppid"; out=$(cat "$d/ru")
    fi
    wait "${pids[@]}"
    for ((c = 0; c < NCPU; c++)); do loops=$((loops + $(cat "$d/spin$c"))); done
    local bytes=0 sym=0
    if [ -d "$d/store" ]; then
        bytes=$(du -sb --exclude=symbols "$d/store" | cut -f1)
        sym=$(du -sb "$d/store/symbols" 2>/dev/null | cut -f1 || echo 0)
    fi
    [ -f "$d/perf.data" ] && bytes=$(stat -c %s "$d/perf.data")
    local steady=nan steady_sym=nan
    steady=$(python3 -c 'import sys
try: print((float(sys.argv[2]) - float(sys.argv[1])) / float(sys.argv[3]))
except ValueError: print("nan")' "${t1:-nan}" "${t2:-nan}" "$HZ")
    steady_sym=$(python3 -c 'import sys
try: print((float(sys.argv[2]) - float(sys.argv[1])) / float(sys.argv[3]))
except ValueError: print("nan")' "${s1:-nan}" "${s2:-nan}" "$HZ")
    # symbol tables written / deferred by the symbolizer's CPU budget / dropped, and
    # failed, functions stored, symbolizer CPU s (agent only)
    local st="0/0/0 0 0 0"
    [ -s "$d/summary.json" ] && st=$(python3 -c 'import json, sys
w = json.load(open(sys.argv[1]))["writer"]
print("%d/%d/%d %d %d %.2f" % (w["symbol_tables"], w.get("symbol_tables_deferred", 0), w.get("symbol_tables_dropped", 0),
      w.get("symbol_tables_failed", 0), w.get("symbols", 0), w.get("symbolizer_cpu_ms", 0) / 1000))' "$d/summary.json" 2>/dev/null || echo "0/0/0 0 0 0")
    echo "$mode $out $loops $bytes $steady $rss $sym $st $steady_sym"
}

for ((r = 0; r < REPS; r++)); do
    for m in $(rotate "$r" none agent perf); do
        log "rep $((r + 1))/$REPS: $m"
        run "$m" | tee -a "$W/results"
    done
done

python3 - "$W/results" "$SECS" "$NCPU" "$WARM" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
secs, ncpu, warm = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
by = {}
for m, cpu, rss, loops, b, steady, rss_end, sym, st, failed, funcs, sym_cpu, steady_sym in rows:
    by.setdefault(m, []).append((float(cpu), int(rss), int(loops), int(b), float(steady), int(rss_end), int(sym), st, int(failed), int(funcs), float(sym_cpu), float(steady_sym)))
med = lambda xs: statistics.median(xs)
base = med(x[2] for x in by["none"])
print(f"{ncpu} CPUs busy (one spinner each), {secs:.0f} s per run, steady state from {warm:.0f} s on, medians of {len(by['none'])} runs")
print("| profiler | CPU, whole run (% of one core) | CPU, steady state | RSS at end (peak) | workload throughput vs none | data per day | symbol tables (once per binary) | tables written/deferred/dropped (per run) |")
print("|---|---|---|---|---|---|---|---|")
for m, name in [("agent", "tailprof agent (defaults)"), ("perf", "perf record -a -F 49 -g")]:
    v = by[m]
    cpu = med(x[0] for x in v) / secs * 100
    steady = med(x[4] for x in v if x[4] == x[4]) / (secs - warm - 1) * 100
    rss = med(x[1] for x in v) / 1024
    rss_end = med(x[5] for x in v) / 1024
    thr = med(x[2] for x in v) / base
    day = med(x[3] for x in v) * 86400 / secs / 2**20
    sym = med(x[6] for x in v) / 2**20
    print(f"| {name} | {cpu:.2f}% | {steady:.2f}% | {rss_end:.0f} MiB ({rss:.0f} MiB) | {100 * (thr - 1):+.1f}% | {day:.0f} MiB | {sym:.1f} MiB | {' '.join(x[7] for x in v) if m == 'agent' else '-'} |")
v = by["agent"]
print("agent per run (tables failed, functions stored, symbolizer CPU s of the whole-run CPU s, "
      "steady-state CPU % of one core: symbolizer thread + the rest, peak RSS MiB): "
      + "; ".join(f"{x[8]}, {x[9]}, {x[10]:.2f} of {x[0]:.2f}, {100 * x[11] / (secs - warm - 1):.2f}% + {100 * (x[4] - x[11]) / (secs - warm - 1):.2f}%, {x[1] / 1024:.0f}" for x in v))
PY
