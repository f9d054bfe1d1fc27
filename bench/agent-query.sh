#!/usr/bin/env bash
# bench/agent-query.sh: `tailprof top` over a day of stored windows vs DuckDB over the same
# Parquet files: wall time and peak RSS, medians of REPS runs, same answer checked.
#
#   bench/agent-query.sh [WINDOWS=8640] [ROWS=200] [REPS=3]
#   STORE=DIR bench/agent-query.sh ...   reuse a store gen_day wrote before (writing one
#                                        takes minutes: every file is fsynced)
#
# The store is synthetic (crates/tailprof-store/examples/gen_day.rs): a day of 10 s windows,
# ROWS aggregate rows each, stacks 8-24 deep, 3 binaries with 2000 functions.
# After the timed runs, the answers are compared: every function of DuckDB's top 30 must
# have the same self count in `tailprof top --json` (which also counts every function's
# total, i.e. reads all frames, where the SQL reads only the leaf).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
WINDOWS=${1:-8640}; ROWS=${2:-200}; REPS=${3:-3}
TAILPROF=${TAILPROF:-target/release/tailprof}
[ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release -p tailprof"
python3 -c 'import duckdb' 2>/dev/null || die "python3 -m pip install duckdb"
W=$(mktemp -d /tmp/tailprof-bench-query.XXXXXX)
trap 'rm -rf "$W"' EXIT
if [ -n "${STORE:-}" ]; then
    [ -d "$STORE/samples" ] || die "STORE=$STORE: no samples/ in it (write one with gen_day)"
    ln -s "$(cd "$STORE" && pwd)" "$W/store"
else
    log "generating $WINDOWS windows x $ROWS rows"
    cargo run -q --release -p tailprof-store --example gen_day -- "$W/store" "$WINDOWS" "$ROWS"
fi
log "store: $(du -shL "$W/store" | cut -f1), $(find -L "$W/store/samples" -name '*.parquet' | wc -l) files; load average $(cut -d' ' -f1-3 /proc/loadavg)"

cat > "$W/q.py" <<PY
import duckdb, sys
s = sys.argv[1]
r = duckdb.sql(f"""
SELECT y.name, sum(s.count) n
FROM read_parquet('{s}/samples/*/*/*/*.parquet', hive_partitioning = true) s
LEFT JOIN read_parquet('{s}/symbols/*.parquet') y
  ON s.build_id = y.build_id AND s.leaf_offset >= y.start_offset AND s.leaf_offset < y.start_offset + greatest(y.size, 1)
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 30""").fetchall()
if len(sys.argv) > 2:
    import json
    json.dump(r, open(sys.argv[2], "w"))
print(r[0][0], r[0][1])
PY
# measure NAME CMD...: "wall_s maxrss_kib first_line"
measure() {
    python3 -c 'import os, subprocess, sys, time
t = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out = p.stdout.read().decode()
_, st, ru = os.wait4(p.pid, 0)
print(f"{time.monotonic() - t:.3f} {ru.ru_maxrss} {ru.ru_utime + ru.ru_stime:.3f}", out.strip().splitlines()[0] if out.strip() else "")' "$@"
}
for ((r = 0; r < REPS; r++)); do
    for m in $(rotate "$r" tailprof duckdb); do
        case $m in
            tailprof) line=$(measure "$TAILPROF" top --store "$W/store" --since 2d --top 30 --json) ;;
            duckdb) line=$(measure python3 "$W/q.py" "$W/store") ;;
        esac
        log "$m: $line"
        echo "$m $line" >> "$W/results"
    done
done
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Same answer: DuckDB's top 30 self counts against tailprof's.
python3 "$W/q.py" "$W/store" "$W/duck.json" > /dev/null
"$TAILPROF" top --store "$W/store" --since 2d --top 0 --json > "$W/top.json"
python3 - "$W/duck.json" "$W/top.json" <<'PY' || die "tailprof top and DuckDB disagree"
import json, sys
duck = json.load(open(sys.argv[1]))
top = {r["name"]: r["samples"] for r in json.load(open(sys.argv[2]))["functions"]}
bad = [(n, c, top.get(n)) for n, c in duck if top.get(n) != c]
print(f"answers: {len(duck) - len(bad)}/{len(duck)} of DuckDB's top functions have the same self count in tailprof top", file=sys.stderr)
sys.exit(1 if bad or not duck else 0)
PY
python3 - "$W/results" <<'PY'
import statistics, sys
by = {}
for l in open(sys.argv[1]):
    m, t, rss, cpu, *_ = l.split()
    by.setdefault(m, []).append((float(t), int(rss), float(cpu)))
print("| query | wall (median) | CPU user+sys (median) | peak RSS |")
print("|---|---|---|---|")
for m in ("tailprof", "duckdb"):
    v = by[m]
    print(f"| {m} | {statistics.median(x[0] for x in v):.2f} s | {statistics.median(x[2] for x in v):.2f} s | {statistics.median(x[1] for x in v) / 1024:.0f} MiB |")
PY
