#!/usr/bin/env bash
# bench/first-hour.sh: a new user's first hour, as a test. Clones this repository into a
# scratch directory and runs the README's commands in its order (quick start, install,
# the flat-profile example, report, items, export, calibrate + plan, record -a + info,
# the agent + top/diff/items --store, DuckDB, the Python markers), checking that each
# prints what the README says it prints. Needs root (or perf_event_paranoid <= 0 for
# `record -a` and the agent), cc, make, python3; DuckDB (pip) is optional.
#
#   bench/first-hour.sh                 # a full clone and build: about 15 min on 2 cores
#   FIRST_HOUR_TARGET_DIR=target bench/first-hour.sh   # reuse a warm target/ (faster)
#   FIRST_HOUR_KEEP=1 ...               # keep the scratch directory
#
# Exit status 0: everything the README promises held; otherwise the first broken promise.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
W="$(mktemp -d /tmp/tailprof-first-hour.XXXXXX)"
[ "${FIRST_HOUR_KEEP:-0}" = 1 ] || trap 'rm -rf "$W"' EXIT
log() { printf '[first-hour %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { printf 'first-hour: FAILED: %s\n' "$*" >&2; exit 1; }
# expect FILE PATTERN WHAT: FILE contains the (extended) regular expression PATTERN.
expect() { grep -Eq -- "$2" "$1" || { sed 's/^/    /' "$1" | head -40 >&2; fail "$3: no /$2/ in the output"; }; }

log "clone $src (committed HEAD) into $W/tailprof"
git clone -q "$src" "$W/tailprof"
cd "$W/tailprof"
if [ -n "${FIRST_HOUR_TARGET_DIR:-}" ]; then
    export CARGO_TARGET_DIR="$(cd "$src" && realpath -m "$FIRST_HOUR_TARGET_DIR")"
fi
tp="${CARGO_TARGET_DIR:-$W/tailprof/target}/release/tailprof"

# Quick start, first command: build (locked, once) and run the main demo.
log "make demo"
start=$(date +%s)
make demo > "$W/demo.out" 2> "$W/demo.err" || { cat "$W/demo.err" >&2; fail "make demo"; }
log "make demo took $(( $(date +%s) - start )) s"
expect "$W/demo.out" 'SLOW' "demo: cold queries flagged SLOW"
expect "$W/demo.out" 'Responsible: transform_points \(' "demo: the README's quoted explanation"
expect "$W/demo.out" 'over the class median|this item: \+' "demo: the excess over the class median"
expect "$W/demo.out" 'exactly the cold queries' "demo: flagged = cold"
for f in report.html trace.perfetto.json demo.trace; do
    [ -s "tailprof-demo/$f" ] || fail "demo did not write tailprof-demo/$f"
done
[ "$(stat -c %a tailprof-demo)" = 700 ] || fail "tailprof-demo is not 0700"
size=$(stat -c %s "$tp")
log "release binary: $size bytes"
[ "$size" -lt 40000000 ] || fail "the release binary is $size bytes (debug info kept?)"

# Install: one locked command (a separate build into ~/.cargo/bin; checked for --locked only).
grep -q 'cargo install --locked --path crates/tailprof-cli' README.md || fail "README: install is not locked"

# The same on your own program: items, explain, export over the demo's trace.
trace=tailprof-demo/demo.trace
"$tp" items "$trace" --sort anomaly > "$W/items.out"
expect "$W/items.out" 'SLOW' "items --sort anomaly"
slow=$(awk '$0 ~ /SLOW/ {print $1; exit}' "$W/items.out")
"$tp" items "$trace" --explain "$slow" > "$W/explain.out"
expect "$W/explain.out" 'Responsible: ' "items --explain $slow"
"$tp" export "$trace" --html "$W/report.html" --perfetto "$W/run.perfetto.json" 2> "$W/export.err"
expect "$W/export.err" 'wrote .*report.html' "export --html"
[ -s "$W/run.perfetto.json" ] || fail "export --perfetto wrote nothing"

# The flat-profile example: make example (records split, report, info).
log "make example"
make example > "$W/example.out" 2> "$W/example.err" || { cat "$W/example.err" >&2; fail "make example"; }
expect "$W/example.out" 'work_three_quarters' "make example: report names the functions"
q=$(awk '$3 == "work_quarter" {sub("%", "", $2); print $2}' "$W/example.out")
tq=$(awk '$3 == "work_three_quarters" {sub("%", "", $2); print $2}' "$W/example.out")
python3 -c "import sys; q, t = float('$q'), float('$tq'); r = q / (q + t); sys.exit(0 if 0.18 < r < 0.32 else 1)" \
    || fail "split: work_quarter $q% vs work_three_quarters $tq% is not 25/75"
# Flat profiles get pictures too (README: flame graphs for a trace).
"$tp" export split.trace --html "$W/split.html" 2> "$W/split-export.err" || fail "export of a trace without items"
grep -q 'Flame graphs' "$W/split.html" || fail "split.html has no flame graph"
"$tp" report split.trace --json > "$W/split.json"
python3 - "$W/split.json" <<'PY' || fail "report --json shape"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema_version"] == 1 and d["functions"][0]["samples"] > 0, d.keys()
PY

# Choosing a period: calibrate as written, then plan (README's next step).
log "calibrate (about a minute)"
export TAILPROF_HOME="$W/home"
"$tp" calibrate > "$W/calibrate.out" 2> "$W/calibrate.err" || { cat "$W/calibrate.out" "$W/calibrate.err" >&2; fail "calibrate exited $?"; }
"$tp" plan --budget 2 -- examples/build/split 100 > "$W/plan.out" 2> "$W/plan.err" || { cat "$W/plan.err" >&2; fail "plan after calibrate"; }
expect "$W/plan.out" 'record' "plan prints the record command"

# record -a and info: the README's bytes per sample.
log "record -a -F 999 -- sleep 10"
"$tp" record -a -F 999 -o all.trace -- sleep 10 2> "$W/record-a.err" || { cat "$W/record-a.err" >&2; fail "record -a"; }
"$tp" info all.trace > "$W/info.out"
bps=$(awk -F: '/^Bytes\/sample/ {gsub(/ /, "", $2); print $2}' "$W/info.out")
log "record -a -F 999 -- sleep 10: $bps bytes per sample"
# README: "about LO–HI bytes per sample for `record -a -F 999 -- sleep 10`".
claim=$(grep -oE 'about [0-9.]+–[0-9.]+ bytes per sample for `record -a' README.md | grep -oE '[0-9.]+' | tail -1)
[ -n "$claim" ] || fail "README states no bytes per sample for record -a"
python3 -c "import sys; b, c = float('$bps'), float('$claim'); sys.exit(0 if b <= 1.5 * c else 1)" \
    || fail "README says at most about $claim bytes per sample for record -a; measured $bps"

# Continuous profiling: agent, then top, diff (relative times), items --store, DuckDB.
log "agent for 6 s"
store="$W/store"
"$tp" agent --store "$store" --window 2s --duration 6s 2> "$W/agent.err" &
agent=$!
examples/build/split 400 > /dev/null
wait "$agent" || { cat "$W/agent.err" >&2; fail "agent"; }
"$tp" top --store "$store" --since 1h > "$W/top.out"
expect "$W/top.out" 'samples in [0-9]+ files' "top --since 1h"
"$tp" top --store "$store" --since 1h --json > "$W/top.json"
python3 - "$W/top.json" <<'PY' || fail "top --json has the shape of report --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema_version"] == 1 and d["samples"] > 0 and d["functions"], d
assert {"name", "samples", "percent", "total_samples", "total_percent"} <= set(d["functions"][0])
PY
"$tp" diff --store "$store" --a -2h..-1h --b 1h > "$W/diff.out" || fail "diff --a -2h..-1h --b 1h"
"$tp" top --store "$store" --from -2h > /dev/null || fail "top --from -2h"
"$tp" items --store "$store" --since 1d > /dev/null || fail "items --store --since 1d"
"$tp" top --store "$store" --since 1h --pprof "$W/cpu.pb.gz" --flamegraph "$W/cpu.html" > /dev/null
[ -s "$W/cpu.html" ] || fail "top --flamegraph"
if python3 -c 'import duckdb' 2> /dev/null; then
    python3 - "$store" <<'PY' || fail "examples/store-duckdb.sql with SET VARIABLE store"
import duckdb, sys
duckdb.sql(f"SET VARIABLE store = '{sys.argv[1]}'")
rows = duckdb.sql(open("examples/store-duckdb.sql").read()).fetchall()
assert rows and rows[0][1] > 0, rows
PY
else
    log "duckdb (Python) missing: the SQL example is not checked"
fi

# Python markers: pip install ./python, then import anywhere.
log "pip install ./python (venv)"
python3 -m venv "$W/venv"
"$W/venv/bin/pip" install -q ./python
(cd "$W" && "$W/venv/bin/python" -c 'import tailprof_markers') || fail "import tailprof_markers after pip install ./python"

log "every checked promise held"
