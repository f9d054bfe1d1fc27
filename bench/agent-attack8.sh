#!/usr/bin/env bash
# bench/agent-attack8.sh: issue 19 attack 8 against the real release agent. An unprivileged
# user executes many distinct tiny binaries (each copy of one small C program with its own
# build-id, spinning a few ms in main with frame pointers so samples land in it) while
# `tailprof agent` records with 2 s windows; reported: the agent's peak RSS
# (/usr/bin/time -v), windows written vs due, binaries seen and dropped, symbol tables
# written/deferred/dropped (from the agent's --json summary).
#
#   bench/agent-attack8.sh [COPIES=20000] [ATTACK_SECONDS=50] [AGENT_SECONDS=60]
#
# Needs root (useradd, the agent), cc, python3, setpriv, /usr/bin/time, a release build
# (cargo build --release -p tailprof). Creates the user tailprof-atk8 if missing; the store is
# /tmp/h9store (removed first: the agent refuses a store root it did not create).
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES=${1:-20000}
ATTACK=${2:-50}
AGENT_S=${3:-60}
TAILPROF=${TAILPROF:-target/release/tailprof}
STORE=${STORE:-/tmp/h9store}
ATK=tailprof-atk8
die() { echo "agent-attack8: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root"
[ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release -p tailprof"
for c in cc python3 setpriv /usr/bin/time; do command -v "$c" >/dev/null || die "$c missing"; done
id "$ATK" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$ATK"
AUID=$(id -u "$ATK"); AGID=$(id -g "$ATK")

W=$(mktemp -d /tmp/tailprof-atk8.XXXXXX)
trap 'rm -rf "$W"' EXIT
chmod 755 "$W"
cat > "$W/tiny.c" <<'C'
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
volatile unsigned long sink;
__attribute__((noinline)) void spin(void) { unsigned long x = 1; for (int i = 0; i < 20000; i++) x = x * 6364136223846793005UL + 1; sink = x; }
int main(void) { double end = now() + 0.004; while (now() < end) spin(); return 0; }
C
cc -O2 -fno-omit-frame-pointer -Wl,--build-id=sha1 -o "$W/tiny" "$W/tiny.c"
mkdir -p "$W/bins"
# COPIES copies, each with its own build-id (the 20 bytes of the note replaced), owned by
# the attacker.
python3 - "$W/tiny" "$W/bins" "$COPIES" <<'PY'
import hashlib, subprocess, sys
src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
note = subprocess.run(["readelf", "-n", src], capture_output=True, text=True).stdout
bid = bytes.fromhex(note.split("Build ID:")[1].split()[0])
assert data.count(bid) == 1, "build-id not found once"
at = data.index(bid)
for i in range(n):
    new = hashlib.sha1(b"atk8-%d" % i).digest()[: len(bid)]
    with open(f"{out}/b{i:06d}", "wb") as f:
        f.write(data[:at] + new + data[at + len(bid):])
PY
chmod 755 "$W"/bins/*
chown -R "$AUID:$AGID" "$W/bins"
echo "agent-attack8: $COPIES binaries with distinct build-ids in $W/bins" >&2

rm -rf "$STORE"
"/usr/bin/time" -v -o "$W/time.txt" "$TAILPROF" agent --store "$STORE" --window 2s \
    --duration "${AGENT_S}s" --json > "$W/summary.json" 2> "$W/agent.err" &
AGENT=$!
sleep 5
# Two loops (one per CPU) execute the copies as the attacker for ATTACK seconds.
START=$(date +%s.%N)
PIDS=()
for half in 0 1; do
    setpriv --reuid="$AUID" --regid="$AGID" --clear-groups \
        timeout "$ATTACK" bash -c 'i=0; for f in "$1"/bins/b*; do if [ $((i % 2)) = "$2" ]; then "$f"; fi; i=$((i+1)); done' \
        _ "$W" "$half" &
    PIDS+=($!)
done
wait "${PIDS[@]}" || true
END=$(date +%s.%N)
wait "$AGENT" || echo "agent-attack8: the agent exited with status $?" >&2
python3 - "$W/summary.json" "$W/time.txt" "$AGENT_S" "$START" "$END" <<'PY'
import json, re, sys
summary, timef, agent_s, start, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
t = open(timef).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", t).group(1)
status = re.search(r"Exit status: (\d+)", t).group(1)
doc = json.loads(open(summary).read())
def find(d, key, path=""):
    if isinstance(d, dict):
        for k, v in d.items():
            p = f"{path}.{k}" if path else k
            if k == key and not isinstance(v, (dict, list)):
                yield p, v
            yield from find(v, key, p)
print(f"attack ran {end - start:.1f} s; agent exit status {status}, wall {wall}, peak RSS {rss / 1024:.1f} MiB")
print(f"windows due: {agent_s // 2}")
for key in ["windows", "windows_written", "windows_dropped", "binaries", "binaries_dropped",
            "binary_table_resets", "symbol_tables_written", "symbol_tables_deferred",
            "symbol_tables_dropped", "symbol_tables_dropped_at_stop", "symbol_tables_failed",
            "processes", "lost_records"]:
    for p, v in find(doc, key):
        print(f"{p}: {v}")
PY
echo "agent-attack8: store size $(du -sh "$STORE" | cut -f1), symbols/ $(du -sh "$STORE/symbols" 2>/dev/null | cut -f1)" >&2
