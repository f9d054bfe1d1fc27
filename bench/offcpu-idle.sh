#!/usr/bin/env bash
# What the off-CPU events cost while they wait, disabled, for a marker that never comes
# (issue 7 item 2: `record -- CMD` opens them by default). Workload: bench/workloads/
# pingpong.c (two threads passing a byte through pipes: ~4 context switches per round
# trip, the worst case for a per-switch cost); it measures its own elapsed time.
# In one run, RUNS times each, medians:
#   none       the workload alone
#   perf       perf record -e cpu-clock -c 250000 (perf 6.1, no switch events)
#   perf-sw    perf record -e cpu-clock -c 250000 --switch-events -e sched:sched_switch -g
#   no-off-cpu tailprof record -e cpu-clock -c 250000 --no-off-cpu
#   default    tailprof record -e cpu-clock -c 250000   (off-CPU events open, disabled)
#   off-cpu    tailprof record -e cpu-clock -c 250000 --off-cpu   (enabled from the start)
# Reported: workload ns per round trip (median per configuration), the context-switch
# records in the trace, and the median per-run ratio default / no-off-cpu.
# Usage: bench/offcpu-idle.sh [RUNS] [ROUND_TRIPS]    (root)
set -euo pipefail
RUNS=${1:-5}
N=${2:-200000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TP=${TAILPROF:-$ROOT/target/release/tailprof}
[ -x "$TP" ] || (cd "$ROOT" && cargo build --release --bin tailprof >/dev/null)
W=$(mktemp -d /tmp/offcpu-idle.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -pthread -o "$W/pingpong" "$ROOT/bench/workloads/pingpong.c"
# Round-robin: run i of every configuration back to back, so drift on a shared machine
# hits all of them alike; medians per configuration.
NAMES=(none perf perf-sw no-off-cpu default off-cpu)
cmd() {
    case $1 in
    none) echo env ;;
    perf) echo perf record -q -e cpu-clock -c 250000 -o "$W/perf.data" -- ;;
    perf-sw) echo perf record -q -e cpu-clock -c 250000 --switch-events -e sched:sched_switch -g -o "$W/perf.data" -- ;;
    no-off-cpu) echo "$TP" record -e cpu-clock -c 250000 --no-off-cpu -o "$W/t.trace" -- ;;
    default) echo "$TP" record -e cpu-clock -c 250000 -o "$W/t.trace" -- ;;
    off-cpu) echo "$TP" record -e cpu-clock -c 250000 --off-cpu -o "$W/t.trace" -- ;;
    esac
}
for i in $(seq "$RUNS"); do
    for n in "${NAMES[@]}"; do
        rm -f "$W/t.trace"
        # shellcheck disable=SC2046
        $(cmd "$n") "$W/pingpong" "$N" 2>/dev/null | tail -1 >>"$W/$n.ns"
        if [ -f "$W/t.trace" ]; then
            "$TP" info --json "$W/t.trace" | python3 -c 'import json,sys; s=json.load(sys.stdin)["switches"]; print(sum(s.values()))' >"$W/$n.sw"
        fi
    done
done
# The cost of the waiting events: per run, default / no-off-cpu (the two ran back to back),
# median over the runs (robust to drift that medians per configuration are not).
paste "$W/default.ns" "$W/no-off-cpu.ns" | awk '{print $1 / $2}' | sort -n |
    awk '{a[NR]=$1} END {printf "default / no-off-cpu, median of per-run ratios: %.3f (runs %d, quartiles %.3f..%.3f)\n", a[int((NR+1)/2)], NR, a[int(NR/4)+1], a[int(3*NR/4)+1]}'
for n in "${NAMES[@]}"; do
    med=$(sort -n "$W/$n.ns" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '%-11s %8.0f ns/round trip (median of %s)   switch records in the trace %s\n' "$n" "$(echo "$med / $N" | bc -l)" "$RUNS" "$(cat "$W/$n.sw" 2>/dev/null || echo -)"
done
