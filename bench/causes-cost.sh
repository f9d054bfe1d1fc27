#!/usr/bin/env bash
# What recording wakeups and CPU-wide context switches costs (issue 21), on the worst case
# for a per-switch cost: bench/workloads/pingpong.c (two threads passing a byte through two
# pipes, ~4 context switches and ~2 wakeups per round trip; it times itself).
# In one run, RUNS times each, round-robin, medians:
#   none        the workload alone
#   tp-nowake   tailprof record -e cpu-clock -c 250000 -g --off-cpu --no-wakeups
#   tp-wake     tailprof record -e cpu-clock -c 250000 -g --off-cpu   (wakeups + CPU-wide switches)
#   perf-sw     perf record -e cpu-clock -c 250000 -g --switch-events -e sched:sched_switch
#   perf-a      perf record -a -e sched:sched_waking -g --switch-events   (the issue's comparator)
#   tp-wake-base  tp-wake with another tailprof binary, $TAILPROF_BASE (only when set: a
#               before/after of a recorder change in the same run)
# Reported per configuration: workload ns per round trip; recorder CPU = user+sys of the
# whole command (recorder + workload, /usr/bin/time) minus the workload alone's; the events
# written (tailprof: samples + switch + wakeup records; perf: SAMPLE + SWITCH +
# SWITCH_CPU_WIDE records, `perf report --stats`), bytes of the output file, and CPU ns and
# bytes per event; kernel ring losses (tailprof's lost_records; perf's LOST records); and
# the CPU per round trip over the workload alone; "wl-ns/rt": the workload's own CPU (user+sys
# of the workload process alone, /usr/bin/time inside the recorder) per round trip over the
# workload alone's: what the kernel does for the events in the workload's context (perf
# output, callchain walks), without the recorder's own reading and writing, so less noisy
# than the whole command's. "causes/rt" is what wakeups + CPU-wide
# switches add per round trip: tp-wake minus tp-nowake (tailprof: the off-CPU recording it
# adds to), perf-a minus none (perf: all it records is wakeups + CPU-wide switches).
# Usage: bench/causes-cost.sh [RUNS] [ROUND_TRIPS]    (root)
#        bench/causes-cost.sh --profile [ROUND_TRIPS]
# --profile: a kernel profile per configuration instead (perf record -a -g -e cpu-clock -c
# 100000 around it, once each): the workload's samples (100 us of CPU each) per round trip,
# split by where they land. The kernel writes these events with interrupts off, so a
# cpu-clock sample lands where they come back on: at `_raw_spin_unlock_irqrestore` in the
# pipe's wakeup (sched_waking: its sample and callchain) or at `finish_task_switch` (the
# context switch: switch records, the sched_switch stack sample). Less noisy than the CPU
# totals, and per event kind.
set -euo pipefail
PROFILE=
if [ "${1:-}" = --profile ]; then
    PROFILE=1
    shift
    set -- 1 "${1:-100000}"
fi
RUNS=${1:-5}
N=${2:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TP=${TAILPROF:-$ROOT/target/release/tailprof}
[ -x "$TP" ] || (cd "$ROOT" && cargo build --release --bin tailprof >/dev/null)
W=$(mktemp -d /tmp/causes-cost.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -pthread -o "$W/pingpong" "$ROOT/bench/workloads/pingpong.c"
NAMES=(none tp-nowake tp-wake perf-sw perf-a)
BASE=${TAILPROF_BASE:-}
[ -n "$BASE" ] && NAMES+=(tp-wake-base)
cmd() {
    case $1 in
    none) echo env ;;
    tp-nowake) echo "$TP" record -e cpu-clock -c 250000 -g --off-cpu --no-wakeups -o "$W/t.trace" -- ;;
    tp-wake) echo "$TP" record -e cpu-clock -c 250000 -g --off-cpu -o "$W/t.trace" -- ;;
    tp-wake-base) echo "$BASE" record -e cpu-clock -c 250000 -g --off-cpu -o "$W/t.trace" -- ;;
    perf-sw) echo perf record -q -e cpu-clock -c 250000 -g --switch-events -e sched:sched_switch -o "$W/perf.data" -- ;;
    perf-a) echo perf record -q -a -e sched:sched_waking -g --switch-events -o "$W/perf.data" -- ;;
    esac
}
events() {
    case $1 in
    none) echo 0 ;;
    tp-*) "$TP" info --json "$W/t.trace" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["samples"] + sum(d["switches"].values()) + d.get("wakeups", 0))' ;;
    perf-*) perf report --stats -i "$W/perf.data" 2>/dev/null | awk '$1 ~ /^(SAMPLE|SWITCH|SWITCH_CPU_WIDE)$/ && $2 == "events:" {s += $3} END {print s+0}' ;;
    esac
}
lost() {
    case $1 in
    none) echo 0 ;;
    tp-*) "$TP" info --json "$W/t.trace" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("lost_records", 0))' ;;
    perf-*) perf report --stats -i "$W/perf.data" 2>/dev/null | awk '$1 == "LOST" && $2 == "events:" {s += $3} END {print s+0}' ;;
    esac
}
if [ -n "$PROFILE" ]; then
    printf '%-12s %10s %12s %12s %10s   (us of the workload'"'"'s CPU per round trip, from 100 us samples)\n' config total wakeup-path switch-path other
    for n in "${NAMES[@]}"; do
        rm -f "$W/t.trace" "$W/perf.data"
        # shellcheck disable=SC2046
        perf record -q -a -g -e cpu-clock -c 100000 -o "$W/prof.data" -- $(cmd "$n") "$W/pingpong" "$N" >/dev/null 2>&1
        perf script -i "$W/prof.data" --comm pingpong -F ip,sym 2>/dev/null | awk -v n="$n" -v N="$N" 'BEGIN {RS = ""; FS = "\n"}
            {t++; split($1, a, " "); if (a[2] == "_raw_spin_unlock_irqrestore") w++; else if (a[2] ~ /^finish_task_switch/) s++}
            END {f = 100 / N; printf "%-12s %10.1f %12.1f %12.1f %10.1f\n", n, t * f, w * f, s * f, (t - w - s) * f}'
    done
    exit 0
fi
for i in $(seq "$RUNS"); do
    for n in "${NAMES[@]}"; do
        rm -f "$W/t.trace" "$W/perf.data"
        # shellcheck disable=SC2046
        /usr/bin/time -f '%U %S' -o "$W/time" $(cmd "$n") /usr/bin/time -f '%U %S' -o "$W/wtime" "$W/pingpong" "$N" 2>/dev/null | tail -1 >>"$W/$n.ns"
        awk '{print $1 + $2}' "$W/time" >>"$W/$n.cpu"
        awk '{print $1 + $2}' "$W/wtime" >>"$W/$n.wcpu"
        out=$W/t.trace
        [ -f "$out" ] || out=$W/perf.data
        if [ -f "$out" ]; then stat -c %s "$out" >>"$W/$n.bytes"; else echo 0 >>"$W/$n.bytes"; fi
        events "$n" >>"$W/$n.ev"
        lost "$n" >>"$W/$n.lost"
    done
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(med "$W/none.cpu")
wbase=$(med "$W/none.wcpu")
printf '%-12s %10s %12s %10s %12s %12s %12s %10s %10s %10s %10s\n' config ns/rt rec-CPU-s events bytes CPU-ns/ev bytes/ev lost CPU-ns/rt causes/rt wl-ns/rt
for n in "${NAMES[@]}"; do
    ns=$(med "$W/$n.ns"); cpu=$(med "$W/$n.cpu"); ev=$(med "$W/$n.ev"); by=$(med "$W/$n.bytes"); lo=$(med "$W/$n.lost")
    wl=$(echo "($(med "$W/$n.wcpu") - $wbase) * 1000000000 / $N" | bc -l)
    rec=$(echo "$cpu - $base" | bc -l)
    case $n in
    tp-wake*) inc=$(echo "($cpu - $(med "$W/tp-nowake.cpu")) * 1000000000 / $N" | bc -l) ;;
    perf-a) inc=$(echo "$rec * 1000000000 / $N" | bc -l) ;;
    *) inc=- ;;
    esac
    if [ "$ev" -gt 0 ]; then
        printf '%-12s %10.0f %12.3f %10d %12d %12.0f %12.2f %10d %10.0f %10s %10.0f\n' "$n" "$(echo "$ns / $N" | bc -l)" "$rec" "$ev" "$by" "$(echo "$rec * 1000000000 / $ev" | bc -l)" "$(echo "$by / $ev" | bc -l)" "$lo" "$(echo "$rec * 1000000000 / $N" | bc -l)" "$([ "$inc" = - ] && echo - || printf '%.0f' "$inc")" "$wl"
    else
        printf '%-12s %10.0f %12.3f %10s %12s %12s %12s %10s %10s %10s %10s\n' "$n" "$(echo "$ns / $N" | bc -l)" "$rec" - - - - - - - -
    fi
done
