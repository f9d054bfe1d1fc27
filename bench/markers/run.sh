#!/usr/bin/env bash
# bench/markers/run.sh: cost of a begin+end marker pair, side by side in one run (medians
# of repeats): disabled, enabled (region + drainer), two clock reads, fprintf log line,
# uprobe hit. Results and method: docs/BENCHMARKS.md ("Marker cost").
#   bench/markers/run.sh [REPS] [PAIRS]      # defaults 11 and 2000000
# Raw output: bench/out/markers/cost.tsv.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${BENCH_OUT:-$ROOT/bench/out}/markers
mkdir -p "$OUT"
cc -O2 -g -pthread -Wall -Wextra -I"$ROOT/include" "$HERE/markers_cost.c" -o "$OUT/markers_cost"
"$OUT/markers_cost" "${1:-11}" "${2:-2000000}" | tee "$OUT/cost.tsv"
