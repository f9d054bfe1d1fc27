#!/usr/bin/env bash
# Cost per probe hit (issue 22): a USDT begin+end pair against entry uprobes on two
# functions, an entry + return uprobe, a USDT pair with an --item-event on each of its
# sites (a second uprobe at the same instruction, with an argument), and the marker pair of
# tailprof.h, side by side in one run: one C program (bench/probe-cost/probe_cost.c) with
# every kind compiled in, recorded with `tailprof record` and each row's probes, methods
# rotating every repetition; the program times its own loop (ns per begin+end pair).
# Prints one TSV row per run, then per method the median, the ratios of the medians to the
# USDT pair and to the marker pair, and the median over repetitions of the ratio to the USDT
# pair of the same repetition. The machine may be noisy: read the medians and ratios, not single runs.
# Usage: bench/probe-cost.sh [REPS] [N]   (defaults 7 20000; N iterations in batches of 1,000
# with an untimed 100 ms pause after each, so no ring fills and nothing is dropped). Needs root (uprobes),
# <sys/sdt.h> (systemtap-sdt-dev), cc. TAILPROF=path/to/tailprof (default: the release
# build if there is one, else the debug build).
set -euo pipefail
REPS=${1:-7}
N=${2:-20000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
T=${CARGO_TARGET_DIR:-$ROOT/target}
if [ -z "${TAILPROF:-}" ]; then
    if [ -x "$T/release/tailprof" ]; then TAILPROF=$T/release/tailprof; else TAILPROF=$T/debug/tailprof; fi
fi
[ -x "$TAILPROF" ] || die "no tailprof binary (cargo build -p tailprof, or set TAILPROF)"
[ "$(id -u)" = 0 ] || die "needs root (uprobes through tracefs and the uprobe PMU)"
need cc
W=$(mktemp -d /tmp/probe-cost.XXXXXX)
trap 'rm -rf "$W"' EXIT
cc -O2 -g -Wall -Wextra -I"$ROOT/include" "$ROOT/bench/probe-cost/probe_cost.c" -o "$W/pc" ||
    die "cc failed (<sys/sdt.h>: apt-get install systemtap-sdt-dev)"
PC=$W/pc
log "tailprof: $TAILPROF; $REPS repetitions of $N iterations"

# run METHOD: ns per iteration of one run.
run() {
    local u="usdt:$PC:pc"
    case $1 in
        none) "$PC" "$N" m ;;
        markers) rec "$PC" "$N" m ;;
        usdt) rec --item-begin "$u:start" --item-end "$u:done" -- "$PC" "$N" ;;
        usdt_events) rec --item-begin "$u:start" --item-end "$u:done" \
            --item-event "$u:start:arg0" --item-event "$u:done:arg0" -- "$PC" "$N" ;;
        uprobe_fn) rec --item-begin "$PC:fbegin" --item-end "$PC:fend" -- "$PC" "$N" ;;
        uprobe_ret) rec --item-begin "$PC:fbegin" --item-end "$PC:fbegin%return" -- "$PC" "$N" ;;
    esac
}
# rec ARGS...: tailprof record with ARGS (a `--` before the command unless given); prints
# the program's line.
rec() {
    local a=("$@")
    if [[ " ${a[*]} " != *" -- "* ]]; then a=(-- "${a[@]}"); fi
    "$TAILPROF" record --mmap-pages 1024 -o "$W/t.trace" "${a[@]}" 2>"$W/err" | tail -n 1 ||
        { cat "$W/err" >&2; die "record failed"; }
    # Lost records and dropped markers of the run (both should be 0).
    sed -n 's/.*| lost \([0-9,]*\) |.*/\1/p; s/.*dropped markers \([0-9,]*\).*/\1/p' "$W/err" | tr -d , | paste -sd ' ' >"$W/counts"
}

METHODS=(none markers usdt usdt_events uprobe_fn uprobe_ret)
printf 'rep\tmethod\tns_per_pair\tlost_records\tdropped_markers\n'
for ((r = 0; r < REPS; r++)); do
    for m in $(rotate "$r" "${METHODS[@]}"); do
        echo "- -" >"$W/counts"
        v=$(run "$m")
        read -r lost dropped _ <"$W/counts" || true
        printf '%d\t%s\t%s\t%s\t%s\n' "$r" "$m" "$v" "${lost:--}" "${dropped:--}" | tee -a "$W/rows"
    done
done
med() { awk -v m="$1" '$2 == m {print $3}' "$W/rows" | median; }
# rmed METHOD BASE: the median over repetitions of METHOD / BASE within one repetition
# (drift of a shared machine cancels in a ratio of neighbouring runs).
rmed() {
    awk -v m="$1" -v b="$2" '{v[$1 " " $2] = $3; r[$1] = 1}
        END { for (k in r) if ((k " " m) in v && (k " " b) in v && v[k " " b] > 0) print v[k " " m] / v[k " " b] }' "$W/rows" | median
}
printf '\nmethod\tmedian_ns\tx_usdt\tx_markers\tx_usdt_per_rep\n'
for m in "${METHODS[@]}"; do
    printf '%s\t%.1f\t%.3f\t%.1f\t%.3f\n' "$m" "$(med "$m")" "$(awk -v a="$(med "$m")" -v b="$(med usdt)" 'BEGIN{print a / b}')" \
        "$(awk -v a="$(med "$m")" -v b="$(med markers)" 'BEGIN{print a / b}')" "$(rmed "$m" usdt)"
done
