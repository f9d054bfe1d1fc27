#!/bin/sh
# Accuracy of per-item estimates (the paper's Fig. 9): record the query example once per
# sampling period and compare each query's per-function estimate with the example's own
# CLOCK_MONOTONIC log of that function. Writes docs/accuracy.svg and prints the table
# for docs/ACCURACY.md.
#
#   sh bench/accuracy.sh [OUTDIR]
set -eu
cd "$(dirname "$0")/.."
out=${1:-bench/out/accuracy}
cargo build --release -q -p tailprof
./target/release/tailprof demo --out "$out" --scale 8 --queries 96 \
    --accuracy-sweep 50000,100000,250000,500000,1000000
cp "$out/accuracy.svg" docs/accuracy.svg
echo "copied $out/accuracy.svg to docs/accuracy.svg"
