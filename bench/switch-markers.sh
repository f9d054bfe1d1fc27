#!/usr/bin/env bash
# Switch markers (issue 24): the cost of one switch marker against a begin+end pair, in C,
# Rust and Python, enabled (each program builds a marker region the way the recorder does
# and drains it in a thread, so rings never fill), medians of repeats, methods rotating;
# the trace-context pair (item_trace, kinds 4/5; the region announces the feature); the
# Rust `tracing` layer (one span's life with and without TailprofLayer); and the overhead
# of the asyncio integration (install_asyncio) on a request loop of 10 000 requests/s
# (CPU time of the loop thread per request, with and without it).
# Usage: bench/switch-markers.sh [REPS] [OPS] [PY_OPS] [PY_REQS]
#        (defaults 11 2000000 200000 20000). Prints `name<TAB>ns` lines, one run.
set -euo pipefail
REPS=${1:-11}
OPS=${2:-2000000}
PY_OPS=${3:-200000}
PY_REQS=${4:-20000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/switch-markers.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -g -pthread -Wall -Wextra -I"$ROOT/include" "$ROOT/bench/switch-markers/switch_cost.c" -o "$W/switch_cost"
(cd "$ROOT" && cargo build --release -q -p tailprof-markers --features tracing --example switch_cost)
RS=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/switch_cost
echo "# C (ns per pair / per marker / per switch+none / per item_trace)"
"$W/switch_cost" "$REPS" "$OPS"
echo "# Rust (rust_in_item_poll: ns per poll of an in_item future, 2 markers each;"
echo "#       rust_tracing_span_*: ns per span new+enter+exit+close, registry only / + TailprofLayer)"
"$RS" "$REPS" "$OPS"
echo "# Python (ns per pair / per marker / per item_trace; asyncio: loop-thread CPU ns per request)"
python3 "$ROOT/bench/switch-markers/py_switch_cost.py" "$PY_OPS" "$PY_REQS"
