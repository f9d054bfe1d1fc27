#!/usr/bin/env bash
# bench/agent-causes.sh: the agent's CPU with and without `causes = true` (--causes) on a
# context-switch-heavy workload, side by side in one run.
#
#   bench/agent-causes.sh [SECONDS=20] [REPS=3]
#
# The workload is bench/workloads/pingpong.c's loop (two threads passing a byte through
# two pipes: ~4 context switches per round trip) with markers (include/tailprof.h): every
# 100 round trips of the main thread are one request, so the agent's retainer sees requests
# and, with --causes, records every context switch and the wakeups of the marked threads
# from the first marker on, and explains its retained slow requests (the class's p99, the
# default) with their wakers, preempters and critical paths. The workload waits (≤ 60 s)
# until the agent has attached, then runs SECONDS.
#
# Per repetition, in rotated order: no agent, `tailprof agent` (defaults), `tailprof agent
# --causes`. Reported (medians over REPS): the agent's CPU (user+sys from wait4, setup
# included) as % of one core and peak RSS, the workload's round trips/s and context
# switches/s (/proc/PID/status, both threads), and the CPU --causes adds per context
# switch. Needs root, cc, a release build (cargo build --release -p tailprof).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-20}
REPS=${2:-3}
WARM=${WARM:-12}
TAILPROF=${TAILPROF:-target/release/tailprof}
need cc; need python3; [ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release -p tailprof"
W=$(mktemp -d /tmp/tailprof-bench-agent-causes.XXXXXX)
trap 'rm -rf "$W"' EXIT

cat > "$W/pp.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "tailprof.h"
static int ab[2], ba[2];
static volatile int stop;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *pong(void *arg) {
    char c;
    (void)arg;
    for (;;) {
        if (read(ab[0], &c, 1) != 1) return 0;
        if (c == 'q') return 0;
        if (write(ba[1], &c, 1) != 1) exit(1);
    }
}
/* argv: SECONDS WAIT(0|1). Prints round trips, then context switches of both threads. */
int main(int argc, char **argv) {
    double secs = atof(argv[1]);
    if (atoi(argv[2])) {
        double t0 = now();
        for (int w = 6000; w > 0 && __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE) != TAILPROF_STATE_ON; w--)
            usleep(10000);
        fprintf(stderr, "attached %d after %.1f s\n", __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE) == TAILPROF_STATE_ON, now() - t0);
    }
    pthread_t t;
    char c = 'x';
    if (pipe(ab) || pipe(ba) || pthread_create(&t, 0, pong, 0)) return 1;
    double end = now() + secs;
    long trips = 0, id = 0;
    while (now() < end) {
        tailprof_item_begin(++id);
        for (int i = 0; i < 100; i++)
            if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) return 1;
        tailprof_item_end(id);
        trips += 100;
    }
    c = 'q';
    if (write(ab[1], &c, 1) != 1) return 1;
    pthread_join(t, 0);
    printf("%ld\n", trips);
    return 0;
}
C
cc -O2 -fno-omit-frame-pointer -pthread -Iinclude -o "$W/pp" "$W/pp.c"

# agent_ticks PID: utime+stime (clock ticks) of the agent's threads but its symbolizer
# (which works within its own CPU budget on the binaries running, whatever the workload).
agent_ticks() {
    local t n=0 v
    for t in /proc/"$1"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = tailprof-symbol ] && continue
        v=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)
        n=$((n + v))
    done
    echo "$n"
}
HZ=$(getconf CLK_TCK)

# run MODE: one repetition; prints "MODE agent_cpu_s agent_hwm_kib trips switches":
# the agent's CPU (all threads but the symbolizer) while the workload ran, its peak RSS.
run() {
    local mode=$1 d="$W/$1" apid="" t1=0 t2=0 hwm=0
    rm -rf "$d"; mkdir -p "$d"
    case $mode in
        none) ;;
        agent) "$TAILPROF" agent --store "$d/store" --duration "$((SECS + WARM + 30))s" 2>"$d/err" & apid=$! ;;
        causes) "$TAILPROF" agent --store "$d/store" --duration "$((SECS + WARM + 30))s" --causes 2>"$d/err" & apid=$! ;;
    esac
    if [ -n "$apid" ]; then
        sleep "$WARM"
        t1=$(agent_ticks "$apid")
    fi
    "$W/pp" "$SECS" "$([ -n "$apid" ] && echo 1 || echo 0)" > "$d/trips" 2> "$d/attach" &
    local pp=$!
    sleep 1
    # voluntary + involuntary context switches of both threads, read until the end
    local sw=0 s
    while kill -0 "$pp" 2>/dev/null; do
        s=$(cat /proc/"$pp"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}')
        [ "$s" -gt 0 ] && sw=$s
        sleep 0.5
    done
    wait "$pp"
    if [ -n "$apid" ]; then
        t2=$(agent_ticks "$apid")
        hwm=$(awk '/VmHWM/ {print $2}' /proc/"$apid"/status)
        kill -INT "$apid" 2>/dev/null || true
        wait "$apid" || true
    fi
    [ -n "$apid" ] && log "$mode: $(cat "$d/attach"); $(tail -1 "$d/err")"
    echo "$mode $(python3 -c "print(($t2 - $t1) / $HZ)") $hwm $(cat "$d/trips") $sw"
}

: > "$W/results"
for ((r = 0; r < REPS; r++)); do
    for mode in $(rotate "$r" none agent causes); do
        log "rep $((r + 1))/$REPS: $mode"
        run "$mode" | tee -a "$W/results" >&2
    done
done

python3 - "$W/results" "$SECS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
secs = float(sys.argv[2])
by = {}
for m, cpu, rss, trips, sw in rows:
    by.setdefault(m, []).append((float(cpu), int(rss), int(trips), int(sw)))
med = lambda xs: statistics.median(xs)
print(f"marked ping-pong, {secs:.0f} s per run, medians of {len(by['none'])} runs")
print(f"{'':10} {'agent CPU':>10} {'peak RSS':>9} {'trips/s':>9} {'switches/s':>11} {'agent ns/switch':>16}")
for m in ("none", "agent", "causes"):
    v = by[m]
    cpu = med([x[0] for x in v]); rss = med([x[1] for x in v])
    tps = med([x[2] / secs for x in v]); sps = med([x[3] / secs for x in v])
    per = med([1e9 * x[0] / max(x[3], 1) for x in v])
    name = {"none": "no agent", "agent": "agent", "causes": "--causes"}[m]
    print(f"{name:10} {100 * cpu / secs:9.1f}% {rss / 1024:7.0f}MB {tps:9.0f} {sps:11.0f} {per:16.0f}")
a = med([1e9 * x[0] / max(x[3], 1) for x in by["agent"]])
c = med([1e9 * x[0] / max(x[3], 1) for x in by["causes"]])
print(f"--causes adds {c - a:.0f} ns of agent CPU per context switch of the workload")
PY
