#!/usr/bin/env bash
# bench/stacks-folded.sh: `tailprof report --folded` against `perf report --stdio -g` on
# stack samples — samples/s and peak memory, side by side in one run (issue 7).
#
#   bench/stacks-folded.sh                 # ~10 minutes on 2 CPUs
#   SAMPLES=1000000 REPS=1 bench/stacks-folded.sh   # quick look
#
# Two measurements:
#   A. the same samples read by both tools: `perf record -g -e cpu-clock -c 10000` of a
#      C workload (2 threads, frame pointers, 64 distinct call paths of depth 8-40) until
#      about $SAMPLES samples, then `perf report --stdio -g` on perf.data against
#      `tailprof report --folded` on the `tailprof import` of the same file;
#   B. `tailprof report --folded` on $SAMPLES synthetic stack samples
#      (crates/tailprof-analyze/examples/stack_trace.rs: 1000 stacks of depth 10-40).
# Each cell is repeated $REPS times, tools interleaved; the table gives medians.
# Results: $OUT/results.tsv and $OUT/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

SAMPLES=${SAMPLES:-5000000}
REPS=${REPS:-3}
OUT=${BENCH_OUT:-/tmp/tailprof-bench-stacks}
PERF=${PERF:-perf}
need "$PERF"
need cc
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

log "building tailprof and the synthetic-trace example (release)"
cargo build --release -q -p tailprof
cargo build --release -q -p tailprof-analyze --example stack_trace
TAILPROF=$PWD/target/release/tailprof
SYNTH=$PWD/target/release/examples/stack_trace

# --------------------------------------------------------------- the -g workload
cat >"$TMP/deep.c" <<'EOF'
#include <pthread.h>
#include <stdlib.h>
static volatile unsigned long sink;
#define F(n, next) __attribute__((noinline)) void n(unsigned d, unsigned p) { \
    if (d == 0) { for (int i = 0; i < 200; i++) sink += i * p; return; } \
    if ((p + d) & 1) next(d - 1, p * 3 + 1); else next(d - 1, p + 7); sink++; }
void f0(unsigned, unsigned); void f1(unsigned, unsigned); void f2(unsigned, unsigned);
void f3(unsigned, unsigned); void f4(unsigned, unsigned); void f5(unsigned, unsigned);
void f6(unsigned, unsigned); void f7(unsigned, unsigned);
F(f0, f1) F(f1, f2) F(f2, f3) F(f3, f4) F(f4, f5) F(f5, f6) F(f6, f7)
__attribute__((noinline)) void f7(unsigned d, unsigned p) {
    if (d == 0) { for (int i = 0; i < 300; i++) sink += i ^ p; return; }
    if (p & 2) f0(d - 1, p + 1); else f3(d - 1, p * 5); sink++; }
static void *run(void *arg) {
    unsigned seed = (unsigned)(unsigned long)arg;
    for (;;) { seed = seed * 1103515245u + 12345u; f0(8 + (seed >> 16) % 33, seed >> 8); }
    return 0;
}
int main(void) {
    pthread_t t; pthread_create(&t, 0, run, (void *)1ul); run((void *)2ul); return 0;
}
EOF
cc -O2 -g -fno-omit-frame-pointer -pthread -o "$TMP/deep" "$TMP/deep.c"

# 10 µs periods on 2 threads: about 200k samples/s when both CPUs are free.
SECS=${SECS:-$(( SAMPLES / 150000 + 1 ))}
PD=$OUT/deep.perf.data
IT=$OUT/deep.trace
log "A: perf record -g -e cpu-clock -c 10000 for ${SECS}s"
"$PERF" record -q -g -e cpu-clock -c 10000 -o "$PD" -- timeout "$SECS" "$TMP/deep" >/dev/null 2>"$OUT/perf-record.log" || true
perf_ok "$PD" || die "perf record failed (see $OUT/perf-record.log)"
read -r PD_SAMPLES PD_LOST _ < <(perf_counts "$PD")
log "  $PD_SAMPLES samples, $PD_LOST lost, $(stat -c %s "$PD") bytes; importing"
"$TAILPROF" import "$PD" -o "$IT" >/dev/null 2>"$OUT/import.log" || die "tailprof import failed (see $OUT/import.log)"
SYN=$OUT/synth.trace
log "B: writing $SAMPLES synthetic stack samples"
"$SYNTH" "$SYN" "$SAMPLES" 2>>"$OUT/synth.log"

RES=$OUT/results.tsv
printf 'cell\ttool\trep\tseconds\tpeak_kib\tsamples\n' >"$RES"
cell() { # cell NAME SAMPLES TOOL CMD...
    local name=$1 n=$2 tool=$3 rep=$4; shift 4
    /usr/bin/time -f '%e %M' -o "$TMP/t" "$@" >"$TMP/out.$tool" 2>>"$OUT/run.log" || die "$tool failed (see $OUT/run.log)"
    read -r s kib <"$TMP/t"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$tool" "$rep" "$s" "$kib" "$n" >>"$RES"
}
# One untimed warm-up each (page cache, kallsyms).
"$PERF" report -i "$PD" --stdio -g >/dev/null 2>&1 || true
"$TAILPROF" report "$IT" --folded >/dev/null
for ((r = 0; r < REPS; r++)); do
    log "rep $((r + 1))/$REPS"
    for tool in $(rotate "$r" perf tailprof); do
        case $tool in
        perf) cell same "$PD_SAMPLES" perf-report-g "$r" "$PERF" report -i "$PD" --stdio -g ;;
        tailprof) cell same "$PD_SAMPLES" tailprof-folded "$r" "$TAILPROF" report "$IT" --folded ;;
        esac
    done
    cell synthetic "$SAMPLES" tailprof-folded "$r" "$TAILPROF" report "$SYN" --folded
done
# The folded output must hold every sample.
FOLDED_SUM=$("$TAILPROF" report "$IT" --folded | awk '{s += $NF} END {print s + 0}')

python3 - "$RES" "$FOLDED_SUM" "$PD_SAMPLES" >"$OUT/summary.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def med(cell, tool, key):
    v = [float(r[key]) for r in rows if r["cell"] == cell and r["tool"] == tool]
    return statistics.median(v) if v else float("nan")
print("| cell | tool | samples | median s | samples/s | peak RSS MiB |")
print("|---|---|---:|---:|---:|---:|")
rate = {}
for cell, tool in [("same", "perf-report-g"), ("same", "tailprof-folded"), ("synthetic", "tailprof-folded")]:
    n = [int(r["samples"]) for r in rows if r["cell"] == cell and r["tool"] == tool]
    if not n:
        continue
    s, kib = med(cell, tool, "seconds"), med(cell, tool, "peak_kib")
    rate[(cell, tool)] = (n[0] / s if s > 0 else float("inf"), kib)
    print(f"| {cell} | {tool} | {n[0]:,} | {s:.2f} | {rate[(cell, tool)][0]/1e6:.2f} M | {kib/1024:.0f} |")
p, t = rate.get(("same", "perf-report-g")), rate.get(("same", "tailprof-folded"))
if p and t:
    print(f"\nsame samples: tailprof/perf samples/s = **{t[0]/p[0]:.1f}x**, peak RSS ratio = **{t[1]/p[1]:.2f}**")
s = rate.get(("synthetic", "tailprof-folded"))
if p and s:
    print(f"synthetic {rows[-1]['samples']} samples: tailprof samples/s / perf's (same-samples cell) = **{s[0]/p[0]:.1f}x**, peak RSS {s[1]/1024:.0f} MiB vs perf {p[1]/1024:.0f} MiB")
print(f"\nfolded output holds {sys.argv[2]} of {sys.argv[3]} perf samples")
EOF
cat "$OUT/summary.md"
