#!/usr/bin/env bash
# How many bytes of user stack must `--call-graph dwarf,BYTES` copy for the unwinder to
# reach the outermost frame? Records the same workloads with growing copy sizes and prints
# the share of complete stacks (tailprof info --json) per size:
#   - PostgreSQL 15 (/usr/lib/postgresql/15/bin/postgres) under pgbench (a private cluster
#     in a temp dir, port 5499; the backends are recorded with -p on the postmaster);
#   - python3 running a recursive workload (json, re, sorting);
#   - a Rust program (rustc -O: recursion, HashMap, sort).
# Usage: bench/stacks-depth.sh [SECONDS]   (needs root; writes results to stdout)
set -euo pipefail
SECS=${1:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TP=${TAILPROF:-$ROOT/target/release/tailprof}
[ -x "$TP" ] || (cd "$ROOT" && cargo build --release --bin tailprof >/dev/null)
SIZES=${SIZES:-"4096 8192 16384 32768 65528"}
W=$(mktemp -d /tmp/stacks-depth.XXXXXX)
chmod 755 "$W"; mkdir -p "$W/sock" && chown postgres "$W/sock"
trap 'cleanup' EXIT
PGBIN=/usr/lib/postgresql/15/bin
cleanup() {
    if [ -f "$W/pg/postmaster.pid" ]; then su postgres -c "$PGBIN/pg_ctl -D $W/pg -m immediate stop" >/dev/null 2>&1 || true; fi
    rm -rf "$W"
}

share() { # trace -> "complete/total pct other-statuses"
    "$TP" info --json "$1" | python3 -c '
import json,sys
d=json.load(sys.stdin); s=d["stacks"]; t=sum(s.values()); c=s["complete"]
other={k:v for k,v in s.items() if k!="complete" and v}
print("%d/%d %.1f%% %s" % (c, t, 100.0*c/max(t,1), other))'
}

# --- PostgreSQL ---
if [ -x "$PGBIN/postgres" ]; then
    mkdir -p "$W/pg" && chown postgres "$W/pg"
    su postgres -c "$PGBIN/initdb -D $W/pg -A trust" >/dev/null
    su postgres -c "$PGBIN/pg_ctl -D $W/pg -o '-p 5499 -k $W/sock' -l $W/pg/pg.log start -w" >/dev/null
    su postgres -c "$PGBIN/pgbench -h $W/sock -p 5499 -i -s 5 postgres" >/dev/null 2>&1
    PM=$(head -1 "$W/pg/postmaster.pid")
    for sz in $SIZES; do
        "$TP" record -p "$PM" --call-graph dwarf,$sz -o "$W/pg-$sz.trace" >/dev/null 2>"$W/rec.log" &
        R=$!
        sleep 1
        su postgres -c "$PGBIN/pgbench -h $W/sock -p 5499 -c 4 -T $SECS postgres" >/dev/null 2>&1
        kill -INT $R; wait $R || true
        echo "postgres  dwarf,$sz: $(share "$W/pg-$sz.trace")"
    done
fi

# --- python3 ---
cat > "$W/work.py" <<'PY'
import json, re, time
def nest(n):
    if n == 0:
        d = {"k%d" % i: [i, str(i), {"x": i * 1.5}] for i in range(200)}
        s = json.dumps(d); json.loads(s)
        return len(re.findall(r"k\d+", s)) + len(sorted(d, key=lambda k: -len(k)))
    return nest(n - 1)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for depth in (5, 20, 40):
        nest(depth)
PY
for sz in $SIZES; do
    "$TP" record --call-graph dwarf,$sz -o "$W/py-$sz.trace" -- python3 "$W/work.py" "$SECS" >/dev/null 2>&1
    echo "python3   dwarf,$sz: $(share "$W/py-$sz.trace")"
done

# --- Rust ---
if command -v rustc >/dev/null; then
    cat > "$W/work.rs" <<'RS'
use std::collections::HashMap;
use std::time::{Duration, Instant};
#[inline(never)]
fn nest(n: u32, m: &mut HashMap<u64, u64>) -> u64 {
    if n == 0 {
        let mut v: Vec<u64> = (0..2000u64).map(|i| i.wrapping_mul(0x9e3779b97f4a7c15)).collect();
        v.sort_unstable();
        for x in &v { *m.entry(x % 1024).or_insert(0) += 1; }
        return v[7];
    }
    nest(n - 1, m).wrapping_add(n as u64)
}
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut m = HashMap::new();
    let mut acc = 0u64;
    while Instant::now() < end { for d in [5, 20, 40] { acc = acc.wrapping_add(nest(d, &mut m)); } }
    println!("{acc} {}", m.len());
}
RS
    rustc -O -g -o "$W/work-rs" "$W/work.rs" 2>/dev/null
    for sz in $SIZES; do
        "$TP" record --call-graph dwarf,$sz -o "$W/rs-$sz.trace" -- "$W/work-rs" "$SECS" >/dev/null 2>&1
        echo "rust      dwarf,$sz: $(share "$W/rs-$sz.trace")"
    done
fi
