#!/usr/bin/env bash
# bench/jit-node.sh: recording a Node process that publishes its JIT code's names (issue 23),
# tailprof against what perf users must run.
#
#   bench/jit-node.sh [RUNS=5] [SECONDS=4]        (root; node, perf, python3)
#
# The workload: one Node script (written below) with two JS functions called 3:1 (`hotLoop`
# three times, `coldLoop` once per round, the same loop body) for SECONDS of wall time; it
# prints the rounds it completed. Configurations, RUNS times each, round-robin (the start
# rotates every repetition), medians:
#   none        node --perf-prof app.js alone (the workload's own CPU and rounds)
#   tp          tailprof record -e cpu-clock -c 250000 -o T -- node --perf-prof app.js
#   tp-dwarf    the same with --call-graph dwarf (user stacks copied, unwound at report time)
#   perf        perf record -k mono -e cpu-clock -c 250000 -o P -- node --perf-prof app.js,
#               then perf inject --jit -i P -o P.jit (which writes one jitted-PID-N.so per
#               CODE_LOAD next to the jitdump); names come from P.jit
#   tp-map      tailprof record ... -- node --perf-basic-prof app.js   (perf map)
#   perf-map    perf record -k mono ... -- node --perf-basic-prof app.js (perf reads
#               /tmp/perf-PID.map at report time: the map has to be kept)
# Measured per run:
#   rec-CPU   the recorder's own CPU, read separately in the same run: user+sys (wait4, in
#             µs) of the whole recording command (recorder + workload) minus user+sys of
#             everything under the recorder (a timer around node inside the recorder: its
#             own CPU plus node's). What the kernel does for the samples in the workload's
#             context is charged to the workload, not to the recorder (see wl-CPU). The
#             same difference for `none` (no recorder: what the timer misses of its own
#             exit) is subtracted; it is printed.
#   inject    user+sys of perf inject --jit (perf only), and its wall time.
#   samples   tailprof info --json "samples"; perf report --stats SAMPLE events.
#   bytes     tailprof: the trace (JIT names and line tables included). perf: perf.data,
#             P.jit (perf inject's output) and the jitted-*.so files (apparent sizes; they
#             take a 4 KiB block each on disk); perf-map: perf.data + the map. Printed
#             below the table: the copies perf inject puts in perf's build-id cache.
#   JIT %     samples in JIT code (named or not) of all samples; named % of those.
#             tailprof: report --json rows with binary [jit] vs unknown rows of anonymous
#             memory; perf: report --sort dso,sym rows in jitted-*.so / [JIT] tid / //anon,
#             unnamed = a hex address as symbol.
#   hot %     hotLoop's share of the two functions' samples (3:1 calls) in each tool's report:
#             tailprof report --json; perf report --sort sym -F overhead,sym --stdio.
#   us/sample, B/sample: medians of the per-run ratios (recorder CPU: minus the timer's bias
#             of `none`, below); the columns before them are medians of their own.
#   rounds    the workload's rounds in SECONDS over `none`'s (on a shared VM mostly noise).
#   wl-CPU    the workload's own CPU over `none`'s (s).
# TAILPROF= chooses the tailprof binary (default target/release/tailprof), PERF= perf. Runs
# in a temporary directory (node writes jit-PID.dump there); removes /tmp/perf-PID.map.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${1:-5}
SECS=${2:-4}
TAILPROF=${TAILPROF:-target/release/tailprof}
PERF=${PERF:-perf}
[ "$(id -u)" = 0 ] || die "run as root (perf_event_open and perf record of a launched workload)"
need node "apt-get install nodejs"
need "$PERF" "apt-get install linux-perf"
need python3
[ -x "$TAILPROF" ] || die "$TAILPROF missing: cargo build --release --bin tailprof"
TAILPROF=$(realpath "$TAILPROF")
W=$(mktemp -d /tmp/tailprof-bench-jit-node.XXXXXX)
# perf inject --jit adds every jitted-*.so to perf's build-id cache (~/.debug, mirroring the
# path): measured, then removed with the links to it.
CACHE=${PERF_BUILDID_DIR:-$HOME/.debug}
trap 'rm -rf "$W" "$CACHE$W"; find "$CACHE/.build-id" -lname "*$W/*" -delete 2>/dev/null || true' EXIT

cat >"$W/app.js" <<'JS'
function hotLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
function coldLoop(n) { let s = 0; for (let i = 0; i < n; i++) { s = (s * 31 + i) % 1000003; } return s; }
const end = Date.now() + 1000 * Number(process.argv[2]); let x = 0, rounds = 0;
while (Date.now() < end) { x += hotLoop(200000); x += hotLoop(200000); x += hotLoop(200000); x += coldLoop(200000); rounds++; }
console.log(rounds, process.pid, x);
JS
# cputime OUT CMD...: runs CMD, writes "CHILD SELF+CHILD WALL" to OUT: user+sys seconds of CMD
# and everything it waited for (wait4), the same plus this timer's own, and wall seconds.
cat >"$W/cputime.py" <<'PY'
import os, resource, sys, time
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as e:
        sys.stderr.write(f"cputime: {sys.argv[2]}: {e}\n")
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
me = resource.getrusage(resource.RUSAGE_SELF)
child = ru.ru_utime + ru.ru_stime
with open(sys.argv[1], "w") as f:
    f.write(f"{child:.6f} {child + me.ru_utime + me.ru_stime:.6f} {wall:.3f}\n")
    f.flush()
# Exits without the interpreter's teardown: CPU after the getrusage above is not counted.
os._exit(os.waitstatus_to_exitcode(status))
PY
T="python3 $W/cputime.py"

NAMES=(none tp tp-dwarf perf tp-map perf-map)
flag() { case $1 in *-map) echo --perf-basic-prof ;; *) echo --perf-prof ;; esac; }
rec() {
    case $1 in
    none) echo env ;;
    tp | tp-map) echo "$TAILPROF" record -e cpu-clock -c 250000 -o "$R/T" -- ;;
    tp-dwarf) echo "$TAILPROF" record -e cpu-clock -c 250000 --call-graph dwarf -o "$R/T" -- ;;
    perf | perf-map) echo "$PERF" record -q -k mono -e cpu-clock -c 250000 -o "$R/P" -- ;;
    esac
}

# tp_stats TRACE: "JIT_PCT NAMED_PCT HOT_PCT" from tailprof report --json.
tp_stats() {
    "$TAILPROF" report --json --top 0 "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
total = d["samples"] or 1
named = sum(r["samples"] for r in d["functions"] if r.get("binary") == "[jit]")
anon = sum(u["samples"] for u in d["unknown"] if "anon" in u.get("binary", "") or u.get("binary") == "[unknown]")
hot = sum(r["samples"] for r in d["functions"] if "hotLoop" in r["name"])
cold = sum(r["samples"] for r in d["functions"] if "coldLoop" in r["name"])
jit = named + anon
print(100 * jit / total, 100 * named / jit if jit else float("nan"), 100 * hot / (hot + cold) if hot + cold else float("nan"))'
}

# perf_stats DATA: "JIT_PCT NAMED_PCT HOT_PCT" from perf report.
perf_stats() {
    "$PERF" report -i "$1" --sort dso,sym -F sample,dso,sym -t $'\t' --stdio 2>/dev/null |
        awk -F'\t' '!/^#/ && NF >= 3 {
            n = $1 + 0; t += n; d = $2; s = $3; gsub(/ +$/, "", d)
            if (d ~ /^jitted-/ || d ~ /^\[JIT\]/ || d ~ /anon/) { j += n; if (s !~ /\] 0x[0-9a-f]+ *$/) nm += n }
        } END { if (t == 0) t = 1; printf "%s %s", 100 * j / t, (j ? 100 * nm / j : "nan") }'
    # The hot share from the view a perf user reads.
    "$PERF" report -i "$1" --sort sym -F overhead,sym --stdio 2>/dev/null |
        awk '/hotLoop/ {h += $1} /coldLoop/ {c += $1} END { printf " %s\n", (h + c ? 100 * h / (h + c) : "nan") }'
}

log "node $(node --version), $(${PERF} --version), $TAILPROF; $RUNS runs of ${SECS} s each; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$RUNS"); do
    for n in $(rotate "$i" "${NAMES[@]}"); do
        R=$W/run
        rm -rf "$R"
        mkdir "$R"
        # shellcheck disable=SC2046
        (cd "$R" && $T "$R/time" $(rec "$n") \
            $T "$R/wtime" node "$(flag "$n")" "$W/app.js" "$SECS" >"$R/out" 2>"$R/err") ||
            die "$n: recording failed: $(tail -3 "$R/err")"
        read -r rounds pid _ <"$R/out"
        echo "$rounds" >>"$W/$n.rounds"
        tot=$(awk '{print $1}' "$R/time")
        under=$(awk '{print $2}' "$R/wtime")
        awk '{print $1}' "$R/wtime" >>"$W/$n.wcpu"
        awk -v a="$tot" -v b="$under" 'BEGIN {print a - b}' >>"$W/$n.rec"
        case $n in
        none) ;;
        tp*)
            tp_json "$R/T" samples >>"$W/$n.samples"
            stat -c %s "$R/T" >>"$W/$n.bytes"
            tp_stats "$R/T" >>"$W/$n.stats"
            "$TAILPROF" info --json "$R/T" | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("jit_names", 0), sum(l["count"] for l in d.get("losses", []) if l["key"].startswith("skipped_jit")))' >>"$W/$n.jitinfo"
            ;;
        perf)
            perf_counts "$R/P" | awk '{print $1}' >>"$W/$n.samples"
            (cd "$R" && $T "$R/itime" "$PERF" inject --jit -i "$R/P" -o "$R/P.jit" 2>>"$R/err") ||
                die "perf inject --jit failed: $(tail -3 "$R/err")"
            awk '{print $1}' "$R/itime" >>"$W/$n.inject"
            find "$CACHE$R" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}' >>"$W/$n.cache"
            { du -s --block-size=1 "$CACHE$R" 2>/dev/null || echo 0; } | awk '{print $1}' >>"$W/$n.cachedisk"
            awk '{print $3}' "$R/itime" >>"$W/$n.injwall"
            stat -c %s "$R/P" >>"$W/$n.pdata"
            stat -c %s "$R/P.jit" >>"$W/$n.pjit"
            find "$R" -maxdepth 1 -name 'jitted-*.so' -printf '%s\n' | awk '{s += $1} END {print s + 0}' >>"$W/$n.so"
            find "$R" -maxdepth 1 -name 'jitted-*.so' | wc -l >>"$W/$n.nso"
            find "$R" -maxdepth 1 -name 'jitted-*.so' -printf '%b\n' | awk '{s += $1 * 512} END {print s + 0}' >>"$W/$n.sodisk"
            awk -v a="$(stat -c %s "$R/P")" -v b="$(stat -c %s "$R/P.jit")" -v c="$(tail -1 "$W/$n.so")" 'BEGIN {print a + b + c}' >>"$W/$n.bytes"
            perf_stats "$R/P.jit" >>"$W/$n.stats"
            # Every run starts from a cache without these build-ids (the code's build-ids
            # repeat from run to run: a warm cache makes perf inject cheaper).
            rm -rf "$CACHE$R"
            find "$CACHE/.build-id" -lname "*$R/*" -delete 2>/dev/null || true
            ;;
        perf-map)
            perf_counts "$R/P" | awk '{print $1}' >>"$W/$n.samples"
            m=$(stat -c %s "/tmp/perf-$pid.map" 2>/dev/null || echo 0)
            echo "$m" >>"$W/$n.map"
            echo $(($(stat -c %s "$R/P") + m)) >>"$W/$n.bytes"
            perf_stats "$R/P" >>"$W/$n.stats"
            ;;
        esac
        [ -f "$R"/jit-"$pid".dump ] && stat -c %s "$R"/jit-"$pid".dump >>"$W/$n.dump"
        rm -f "/tmp/perf-$pid.map"
        if [ "$n" != none ]; then
            awk -v c="$(tail -1 "$W/$n.rec")" -v b="$(tail -1 "$W/$n.bytes")" -v s="$(tail -1 "$W/$n.samples")" \
                'BEGIN {print 1e6 * c / s, b / s}' >>"$W/$n.per"
        fi
        log "run $i $n: rounds $rounds, recorder CPU $(tail -1 "$W/$n.rec") s"
    done
done

m() { [ -s "$W/$1.$2" ] && median <"$W/$1.$2" || echo nan; }
mcol() { [ -s "$W/$1.stats" ] && awk -v c="$2" '{print $c}' "$W/$1.stats" | median || echo nan; }
per() { awk -v a="$1" -v b="$2" -v k="${3:-1}" -v d="${4:-1}" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "-"; else printf "%.*f\n", d, k * a / b }'; }
r0=$(m none rounds)
w0=$(m none wcpu)
c0=$(m none rec)
echo "# bench/jit-node.sh $RUNS $SECS: medians of $RUNS runs; node $(node --version); load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# recorder CPU: minus none's $(fmt "$c0" 4) s (the timer's bias)"
echo "# jitdump (node --perf-prof) median $(m perf dump) bytes; perf map (--perf-basic-prof) median $(m perf-map map) bytes"
printf '%-9s %8s %9s %9s %10s %9s %9s %7s %7s %7s %7s %8s\n' config samples rec-CPU-s us/sample bytes B/sample JIT-% named-% hot-% rounds wl-CPU inject-s
for n in "${NAMES[@]}"; do
    s=$(m "$n" samples); c=$(awk -v a="$(m "$n" rec)" -v b="$c0" 'BEGIN {print a - b}'); b=$(m "$n" bytes)
    us=nan; bs=nan
    if [ -s "$W/$n.per" ]; then
        us=$(awk -v z="$c0" -v s="$s" '{print $1 - 1e6 * z / s}' "$W/$n.per" | median)
        bs=$(awk '{print $2}' "$W/$n.per" | median)
    fi
    printf '%-9s %8s %9s %9s %10s %9s %9s %7s %7s %7s %7s %8s\n' "$n" "$s" "$(fmt "$c" 3)" "$(fmt "$us" 1)" "$b" "$(fmt "$bs" 1)" \
        "$(fmt "$(mcol "$n" 1)" 1)" "$(fmt "$(mcol "$n" 2)" 1)" "$(fmt "$(mcol "$n" 3)" 1)" "$(per "$(m "$n" rounds)" "$r0" 1 3)" \
        "$(awk -v a="$(m "$n" wcpu)" -v b="$w0" 'BEGIN {printf "%+.2f", a - b}')" "$(fmt "$(m "$n" inject)" 3)"
done
for n in tp tp-dwarf tp-map; do
    [ -s "$W/$n.jitinfo" ] && echo "# $n: JIT names in the trace $(awk '{print $1}' "$W/$n.jitinfo" | median), JIT entries skipped (names + lines, tailprof info losses) $(awk '{print $2}' "$W/$n.jitinfo" | median)"
done
s=$(m perf samples)
echo "# perf: perf.data $(m perf pdata) B ($(per "$(m perf pdata)" "$s") B/sample), P.jit $(m perf pjit) B ($(per "$(m perf pjit)" "$s") B/sample)," \
    "$(m perf nso) jitted-*.so $(m perf so) B ($(per "$(m perf so)" "$s") B/sample; $(m perf sodisk) B on disk)," \
    "perf inject --jit $(fmt "$(m perf inject)" 3) s CPU, $(m perf injwall) s wall," \
    "and $(m perf cache) B in files ($(m perf cachedisk) B on disk) in perf's build-id cache $CACHE;" \
    "record + inject $(per "$(awk -v a="$(m perf rec)" -v b="$(m perf inject)" 'BEGIN {print a + b}')" "$s" 1000000) us/sample"
