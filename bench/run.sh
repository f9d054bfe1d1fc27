#!/usr/bin/env bash
# bench/run.sh: tailprof vs perf, side by side. `make bench` runs it; results and method are in
# docs/BENCHMARKS.md.
#
#   bench/run.sh                # full run, about 10 minutes
#   QUICK=1 bench/run.sh        # about 3 minutes; the report trace is smaller than 5M samples
#
# Three measurements, each repeated with the tools interleaved (the order rotates every
# repetition) and summarised by medians:
#   1. trace bytes per sample: the same workload, event and period recorded by
#      `tailprof record` and `perf record` (default, --no-buildid, -z);
#   2. recorder CPU time per sample: each recorder attached with -p to the same running
#      2-thread workload for a fixed time, its own user+sys time from wait4();
#   3. report throughput and peak memory: `perf report` on a >= 5M-sample perf.data vs
#      `tailprof report` on the same data imported, plus a natively recorded trace.
#
# Environment: QUICK=1, REPS=N (repetitions, default 5; QUICK 3), TAILPROF=path, PERF=path,
# BENCH_OUT=dir (default bench/out), KEEP=1 (keep the recordings in $BENCH_OUT/tmp).
# Raw results: $BENCH_OUT/{bytes,cpu,report}.tsv, env.txt, summary.md, log/.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
. "$HERE/lib.sh"

QUICK=${QUICK:-0}
TAILPROF=${TAILPROF:-$ROOT/target/release/tailprof}
PERF=${PERF:-perf}
OUT=${BENCH_OUT:-$HERE/out}
KEEP=${KEEP:-0}
if [ "$QUICK" = 1 ]; then
    REPS=${REPS:-3}
    BYTES_WORKLOADS=(split manyfuncs)
    ATTACH_SECS=3
    REPORT_SECS=8        # ~1.3M samples: a quick look, not the 5M-sample target
    REPORT_REPS=${REPORT_REPS:-3}
else
    REPS=${REPS:-5}
    BYTES_WORKLOADS=(split manyfuncs xz python)
    ATTACH_SECS=5
    REPORT_SECS=36       # 2 CPUs x 100k samples/s, less what the VM drops: >= 5M samples
    REPORT_REPS=${REPORT_REPS:-3}
fi
REPORT_MIN_SAMPLES=5000000
BYTES_PERIODS=(100000 20000)

# ---------------------------------------------------------------- checks and setup
need "$PERF" "install linux-perf (apt-get install -y linux-perf)"
need cc
need python3
need make
"$PERF" version >/dev/null 2>&1 || die "'$PERF version' fails: perf does not match this kernel?"
if [ ! -x "$TAILPROF" ]; then
    log "building tailprof"
    (cd "$ROOT" && cargo build --release -p tailprof) || die "cannot build tailprof"
fi
[ "$(id -u)" = 0 ] || [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -le -1 ] ||
    die "system-wide recording (-a) needs root or kernel.perf_event_paranoid=-1"

mkdir -p "$OUT/log" "$OUT/bin"
TMP=$(mktemp -d "$OUT/tmp.XXXXXX")
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ "$KEEP" = 1 ]; then
        rm -rf "$OUT/tmp"; mv "$TMP" "$OUT/tmp"
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Started workloads are killed by cleanup(); stop_bg kills one early.
stop_bg() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

log "building workloads"
make -s -C "$ROOT/examples"
CFLAGS_W="-O1 -g -fno-omit-frame-pointer -pthread"
cc $CFLAGS_W -o "$OUT/bin/manyfuncs" "$HERE/workloads/manyfuncs.c"
cc -O2 -o "$OUT/bin/runstat" "$HERE/workloads/runstat.c"
# The report benchmark's workload: C++ with long mangled names (symbolization and demangling
# costs); without a C++ compiler, the C workload.
REPORT_WL=$OUT/bin/cxxfuncs
if command -v c++ >/dev/null 2>&1; then
    c++ $CFLAGS_W -o "$OUT/bin/cxxfuncs" "$HERE/workloads/cxxfuncs.cpp"
else
    log "no C++ compiler: the report benchmark uses the C workload"
    REPORT_WL=$OUT/bin/manyfuncs
fi
RUNSTAT=$OUT/bin/runstat
EX=$ROOT/examples/build
PYTHON=$(python3 -c 'import sys; print(sys.executable)')

# xz input: ~0.7 MB of deterministic, moderately compressible text.
awk 'BEGIN { srand(7); for (i = 0; i < 15000; i++)
        printf "%d %s %x line-%d\n", int(rand() * 1e6),
            substr("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod", 1 + int(rand() * 40), 12 + int(rand() * 20)),
            int(rand() * 65536), i }' >"$TMP/xz.in"
PY_CODE='import json, re, collections
d = collections.Counter()
for i in range(60000):
    s = json.dumps({"k": i, "v": [i, str(i), i * 0.5]})
    d[re.sub(r"\d", "x", s)] += 1
print(len(d))'

workload_cmd() { # name -> command words
    case $1 in
    split) echo "$EX/split 120" ;;
    manyfuncs) echo "$OUT/bin/manyfuncs 1 500" ;;
    xz) echo "xz -9 -T1 -c $TMP/xz.in" ;;
    python) echo "$PYTHON -c" ;; # the code is appended separately (it has spaces)
    esac
}
run_workload_args() { # name -> fills WL array
    read -r -a WL <<<"$(workload_cmd "$1")"
    if [ "$1" = python ]; then WL+=("$PY_CODE"); fi
}

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo))"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "perf: $("$PERF" version)"
    echo "tailprof: $("$TAILPROF" --version) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', uncommitted changes'))"
    echo "perf_event_max_sample_rate: $(cat /proc/sys/kernel/perf_event_max_sample_rate)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "quick: $QUICK, reps: $REPS"
    # Other recorders on the machine matter: while any event with attr.build_id=1 (e.g. a
    # `tailprof record -a`) is open, the kernel also flags other recorders' MMAP2 records as
    # carrying a build-id (see docs/BENCHMARKS.md), and perf 6.1 then aborts.
    others=$(pgrep -a -f '(tailprof|perf) record' | grep -v -e "^$$ " || true)
    [ -z "$others" ] || printf 'WARNING: other recorders running at start:\n%s\n' "$others"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

# ---------------------------------------------------------------- 1. bytes per sample
# perf 6.1 on this kernel can abort in its build-id pass (see docs/BENCHMARKS.md, "perf crashes");
# such a run is kept as a row with status "crash" and left out of the medians.
record_one() { # RECORDER PERIOD FILE CMD...
    local rec=$1 period=$2 file=$3; shift 3
    case $rec in
    tailprof) "$TAILPROF" record -e cpu-clock -c "$period" -o "$file" -- "$@" ;;
    perf) "$PERF" record -e cpu-clock -c "$period" -o "$file" -- "$@" ;;
    perf-B) "$PERF" record -e cpu-clock -c "$period" --no-buildid -o "$file" -- "$@" ;;
    perf-Bz) "$PERF" record -e cpu-clock -c "$period" --no-buildid -z -o "$file" -- "$@" ;;
    esac
}

BYTES_TSV=$OUT/bytes.tsv
printf 'workload\tperiod\trecorder\trep\tstatus\tfile_bytes\tsamples\tlost\tbytes_per_sample\tsample_record_bytes\n' >"$BYTES_TSV"
BYTES_RECORDERS=(tailprof perf perf-B perf-Bz)
log "1/3 trace bytes per sample: ${BYTES_WORKLOADS[*]} x periods ${BYTES_PERIODS[*]} x $REPS reps"
for wl in "${BYTES_WORKLOADS[@]}"; do
    run_workload_args "$wl"
    for period in "${BYTES_PERIODS[@]}"; do
        for ((rep = 1; rep <= REPS; rep++)); do
            for rec in $(rotate "$rep" "${BYTES_RECORDERS[@]}"); do
                f=$TMP/b.$wl.$period.$rec
                rm -f "$f"
                rc=0
                record_one "$rec" "$period" "$f" "${WL[@]}" >/dev/null 2>>"$OUT/log/bytes.$rec.log" || rc=$?
                status=ok bytes=nan samples=nan lost=nan recb=-
                if [ "$rec" = tailprof ]; then
                    [ "$rc" = 0 ] || die "tailprof record of $wl failed (see $OUT/log/bytes.tailprof.log)"
                    bytes=$(stat -c %s "$f")
                    samples=$(tp_json "$f" samples); lost=$(tp_json "$f" lost)
                elif [ "$rc" != 0 ] || ! perf_ok "$f"; then
                    status=crash
                    echo "bench: $rec record of $wl exited with status $rc" >>"$OUT/log/bytes.$rec.log"
                else
                    bytes=$(stat -c %s "$f")
                    read -r samples lost _ <<<"$(perf_counts "$f")"
                    recb=$(perf_sample_bytes "$f")
                fi
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$period" "$rec" "$rep" "$status" "$bytes" "$samples" "$lost" \
                    "$(ratio "$bytes" "$samples" 4)" "$recb" >>"$BYTES_TSV"
                rm -f "$f"
            done
        done
        log "  $wl -c $period: tailprof $(fmt "$(col_median "$BYTES_TSV" 3 9 "$wl	$period	tailprof")") B/sample, perf $(fmt "$(col_median "$BYTES_TSV" 3 9 "$wl	$period	perf")"), perf -B $(fmt "$(col_median "$BYTES_TSV" 3 9 "$wl	$period	perf-B")")"
    done
done

# ---------------------------------------------------------------- 2. recorder CPU per sample
CPU_TSV=$OUT/cpu.tsv
printf 'recorder\trep\tstatus\tuser_us\tsys_us\twall_us\tmaxrss_kib\tsamples\tlost\tthrottled\tcpu_us_per_sample\n' >"$CPU_TSV"
CPU_RECORDERS=(tailprof perf perf-B)
log "2/3 recorder CPU per sample: attach -p for ${ATTACH_SECS}s to 'threads 2', -c 50000, $REPS reps"
"$EX/threads" 2 3600000 >/dev/null &
WPID=$!
BG_PIDS+=("$WPID")
sleep 0.5
for ((rep = 1; rep <= REPS; rep++)); do
    for rec in $(rotate "$rep" "${CPU_RECORDERS[@]}"); do
        f=$TMP/c.$rec
        rm -f "$f" "$TMP/rs"
        case $rec in
        tailprof) cmd=("$TAILPROF" record -e cpu-clock -c 50000 -p "$WPID" -o "$f") ;;
        perf) cmd=("$PERF" record -e cpu-clock -c 50000 -p "$WPID" -o "$f") ;;
        perf-B) cmd=("$PERF" record -e cpu-clock -c 50000 --no-buildid -p "$WPID" -o "$f") ;;
        esac
        # Stopped by SIGINT: the exit status says little; the file is checked instead.
        "$RUNSTAT" -t "$ATTACH_SECS" -s 2 -o "$TMP/rs" -- "${cmd[@]}" >/dev/null 2>>"$OUT/log/cpu.$rec.log" || true
        read -r user sys wall rss code <"$TMP/rs"
        status=ok samples=nan lost=nan thr=nan
        if [ "$rec" = tailprof ]; then
            [ -s "$f" ] || die "tailprof record -p wrote nothing (see $OUT/log/cpu.tailprof.log)"
            samples=$(tp_json "$f" samples); lost=$(tp_json "$f" lost); thr=$(tp_json "$f" throttled)
        elif ! perf_ok "$f"; then
            status=crash
            echo "bench: $rec record -p exited with status $code" >>"$OUT/log/cpu.$rec.log"
        else
            read -r samples lost thr <<<"$(perf_counts "$f")"
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rec" "$rep" "$status" "$user" "$sys" "$wall" "$rss" "$samples" "$lost" "$thr" \
            "$(ratio "$((user + sys))" "$samples" 4)" >>"$CPU_TSV"
        rm -f "$f"
    done
done
stop_bg "$WPID"
log "  tailprof $(fmt "$(col_median "$CPU_TSV" 1 11 tailprof)" 3) us/sample, perf $(fmt "$(col_median "$CPU_TSV" 1 11 perf)" 3), perf -B $(fmt "$(col_median "$CPU_TSV" 1 11 perf-B)" 3)"

# ---------------------------------------------------------------- 3. report throughput
REPORT_TSV=$OUT/report.tsv
printf 'tool\tvariant\ttrace\trep\tstatus\tsamples\twall_us\tuser_us\tsys_us\tmaxrss_kib\tsamples_per_s\n' >"$REPORT_TSV"
log "3/3 report throughput: record -a -c 10000 for ${REPORT_SECS}s (perf, then tailprof) while $(basename "$REPORT_WL") 2 runs, $REPORT_REPS reps"
"$REPORT_WL" 2 $(((REPORT_SECS * 2 + 60) * 1000)) >/dev/null &
MPID=$!
BG_PIDS+=("$MPID")
sleep 0.3
PD=$TMP/big.perf.data
PERF_A_OPTS=()
"$RUNSTAT" -o "$TMP/rec.perf" -- "$PERF" record -e cpu-clock -c 10000 -a -o "$PD" -- sleep "$REPORT_SECS" \
    >/dev/null 2>>"$OUT/log/report.record.log" || true
if ! perf_ok "$PD"; then
    log "  perf record -a crashed (build-id pass); recording again with --no-buildid"
    PERF_A_OPTS=(--no-buildid)
    rm -f "$PD"
    "$RUNSTAT" -o "$TMP/rec.perf" -- "$PERF" record -e cpu-clock -c 10000 -a --no-buildid -o "$PD" -- sleep "$REPORT_SECS" \
        >/dev/null 2>>"$OUT/log/report.record.log" || true
    perf_ok "$PD" || die "perf record -a failed (see $OUT/log/report.record.log)"
fi
NT=$TMP/native.trace
# `tailprof record -a` takes no command: stop it with SIGINT after the same time.
"$RUNSTAT" -t "$REPORT_SECS" -s 2 -o "$TMP/rec.tailprof" -- "$TAILPROF" record -e cpu-clock -c 10000 -a -o "$NT" \
    >/dev/null 2>>"$OUT/log/report.record.log" || true
[ -s "$NT" ] || die "tailprof record -a wrote nothing (see $OUT/log/report.record.log)"
stop_bg "$MPID"
read -r PD_SAMPLES PD_LOST PD_THR <<<"$(perf_counts "$PD")"
NT_SAMPLES=$(tp_json "$NT" samples)
# The two system-wide recordings themselves, for the supplementary table.
{
    printf 'recorder\tuser_us\tsys_us\twall_us\tmaxrss_kib\tsamples\tlost\n'
    read -r u sy w r _ <"$TMP/rec.perf"
    printf 'perf\t%s\t%s\t%s\t%s\t%s\t%s\n' "$u" "$sy" "$w" "$r" "$PD_SAMPLES" "$PD_LOST"
    read -r u sy w r _ <"$TMP/rec.tailprof"
    printf 'tailprof\t%s\t%s\t%s\t%s\t%s\t%s\n' "$u" "$sy" "$w" "$r" "$NT_SAMPLES" "$(tp_json "$NT" lost)"
} >"$OUT/record_a.tsv"
IT=$TMP/imported.trace
"$RUNSTAT" -o "$TMP/imp" -- "$TAILPROF" import "$PD" -o "$IT" >/dev/null 2>>"$OUT/log/report.import.log" ||
    die "tailprof import failed (see $OUT/log/report.import.log)"
IT_SAMPLES=$(tp_json "$IT" samples)
[ "$IT_SAMPLES" = "$PD_SAMPLES" ] || log "  WARNING: perf.data has $PD_SAMPLES samples, the imported trace $IT_SAMPLES"
{
    echo "report trace: perf record -e cpu-clock -c 10000 -a ${PERF_A_OPTS[*]} -- sleep $REPORT_SECS: $(stat -c %s "$PD") bytes, $PD_SAMPLES samples, lost $PD_LOST, throttle records $PD_THR"
    echo "imported trace: $(stat -c %s "$IT") bytes, $IT_SAMPLES samples; import rusage (user_us sys_us wall_us maxrss_kib status): $(cat "$TMP/imp")"
    echo "native trace: tailprof record -e cpu-clock -c 10000 -a for ${REPORT_SECS}s: $(stat -c %s "$NT") bytes, $NT_SAMPLES samples, lost $(tp_json "$NT" lost), throttled $(tp_json "$NT" throttled)"
    echo "record -a rusage (user_us sys_us wall_us maxrss_kib status): perf $(cat "$TMP/rec.perf"); tailprof $(cat "$TMP/rec.tailprof")"
    echo "report trace composition (top binaries): $("$TAILPROF" report "$IT" --by binary --top 6 --json 2>/dev/null |
        python3 -c 'import json, sys; print(", ".join("%s %.1f%%" % (b.get("name", "?"), b.get("percent", 0)) for b in json.load(sys.stdin).get("binaries", [])))' 2>/dev/null || echo '?')"
} >>"$OUT/env.txt"
tail -n 5 "$OUT/env.txt" >&2
if [ "$PD_SAMPLES" -lt "$REPORT_MIN_SAMPLES" ]; then
    log "  NOTE: the report trace has $PD_SAMPLES samples (< $REPORT_MIN_SAMPLES)"
fi

# Warm the page cache (traces, binaries, symbol files) so no variant pays for cold reads.
cat "$PD" "$IT" "$NT" >/dev/null
"$TAILPROF" report "$IT" >/dev/null 2>&1 || die "tailprof report failed"

report_cmd() { # VARIANT -> RC array
    case $1 in
    perf-sym) RC=("$PERF" report -i "$PD" --stdio --sort sym) ;;
    perf-sym-nochildren) RC=("$PERF" report -i "$PD" --stdio --no-children --sort sym) ;;
    perf-dso) RC=("$PERF" report -i "$PD" --stdio --no-children --sort dso) ;;
    tailprof-function) RC=("$TAILPROF" report "$IT") ;;
    tailprof-binary) RC=("$TAILPROF" report "$IT" --by binary) ;;
    tailprof-native) RC=("$TAILPROF" report "$NT") ;;
    esac
}
REPORT_VARIANTS=(perf-sym tailprof-function perf-sym-nochildren tailprof-binary perf-dso tailprof-native)
for ((rep = 1; rep <= REPORT_REPS; rep++)); do
    for v in $(rotate "$rep" "${REPORT_VARIANTS[@]}"); do
        report_cmd "$v"
        rm -f "$TMP/rs"
        "$RUNSTAT" -o "$TMP/rs" -- "${RC[@]}" >/dev/null 2>>"$OUT/log/report.$v.log" || true
        read -r user sys wall rss code <"$TMP/rs"
        status=ok
        if [ "$code" != 0 ]; then
            status=crash
            echo "bench: $v exited with status $code" >>"$OUT/log/report.$v.log"
            [ "${v%%-*}" = perf ] || die "$v failed (see $OUT/log/report.$v.log)"
        fi
        if [ "$v" = tailprof-native ]; then n=$NT_SAMPLES tr=native; else n=$PD_SAMPLES tr=perf.data; fi
        sps=nan
        [ "$status" = ok ] && sps=$(ratio "$n" "$(awk -v w="$wall" 'BEGIN { print w / 1e6 }')" 0)
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${v%%-*}" "$v" "$tr" "$rep" "$status" "$n" "$wall" "$user" "$sys" "$rss" \
            "$sps" >>"$REPORT_TSV"
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/env.txt"

# ---------------------------------------------------------------- summary
"$HERE/summarize.sh" "$OUT" | tee "$OUT/summary.md"
