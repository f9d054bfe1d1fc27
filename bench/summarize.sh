#!/usr/bin/env bash
# bench/summarize.sh OUTDIR: turn the raw TSVs written by bench/run.sh into Markdown tables of
# medians, ratios and PASS/FAIL against the targets (printed on stdout).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/lib.sh"
OUT=${1:-$HERE/out}
B=$OUT/bytes.tsv C=$OUT/cpu.tsv R=$OUT/report.tsv
[ -s "$B" ] && [ -s "$C" ] && [ -s "$R" ] || die "no results in $OUT (run bench/run.sh first)"
verdict() { if "$@"; then echo PASS; else echo FAIL; fi; }
OVERALL=PASS
note_fail() { [ "$1" = PASS ] || OVERALL=FAIL; }

reps_b=$(awk -F'\t' 'NR > 1 && $3 == "tailprof" {n[$1 $2]++} END {for (k in n) if (!m || n[k] < m) m = n[k]; print m + 0}' "$B")
echo "## 1. Trace bytes per sample (target: tailprof <= 1/4 of perf.data)"
echo
echo "Medians of $reps_b runs per cell. \`perf\` = \`perf record -e cpu-clock -c P\`; \`-B\` = \`--no-buildid\`; \`-z\` = zstd-compressed records (informational)."
echo "\"perf rec\" = size of one uncompressed PERF_RECORD_SAMPLE, the floor of perf's format."
echo
echo "| workload | -c | samples tailprof / perf | tailprof B/s | perf B/s | perf -B B/s | perf -z B/s | perf rec | tailprof/perf | tailprof/perf -B | tailprof/perf -z | target |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for key in $(awk -F'\t' 'NR > 1 && !s[$1 "," $2]++ {print $1 "," $2}' "$B"); do
    wl=${key%,*} p=${key#*,}
    m() { col_median "$B" 3 "$1" "$wl	$p	$2"; }
    t=$(m 8 tailprof) pf=$(m 8 perf) pb=$(m 8 perf-B) pz=$(m 8 perf-z)
    rec=$(awk -F'\t' -v w="$wl" -v p="$p" 'NR > 1 && $1 == w && $2 == p && $3 == "perf" {print $9; exit}' "$B")
    r1=$(ratio "$t" "$pf") r2=$(ratio "$t" "$pb") r3=$(ratio "$t" "$pz")
    v=$(verdict le "$r1" 0.25)
    [ "$v" = PASS ] && ! le "$r2" 0.25 && v=FAIL
    note_fail "$v"
    echo "| $wl | $p | $(fmt "$(m 6 tailprof)" 0) / $(fmt "$(m 6 perf)" 0) | $(fmt "$t") | $(fmt "$pf") | $(fmt "$pb") | $(fmt "$pz") | $rec | $r1 | $r2 | $r3 | $v |"
done
echo

reps_c=$(awk -F'\t' 'NR > 1 && $1 == "tailprof"' "$C" | wc -l)
echo "## 2. Recorder CPU time per sample (target: tailprof <= 1/2 of perf record)"
echo
echo "Recorder attached with \`-p\` to \`examples/build/threads 2\` at \`-e cpu-clock -c 50000\`, stopped by SIGINT; the recorder's own user+sys (wait4). Medians of $reps_c runs."
echo
echo "| recorder | samples | user+sys ms | us/sample | lost (all runs) | throttled (all runs) | max RSS MiB | vs tailprof |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
tcpu=$(col_median "$C" 1 10 tailprof)
for rec in tailprof perf perf-B; do
    s=$(col_median "$C" 1 7 "$rec")
    ms=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r {print ($3 + $4) / 1000}' "$C" | median)
    us=$(col_median "$C" 1 10 "$rec")
    lost=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r {n += $8} END {print n + 0}' "$C")
    thr=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r {n += $9} END {print n + 0}' "$C")
    rss=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r {print $6 / 1024}' "$C" | median)
    echo "| $rec | $(fmt "$s" 0) | $(fmt "$ms" 1) | $(fmt "$us" 3) | $lost | $thr | $(fmt "$rss" 1) | $(ratio "$us" "$tcpu" 2)x |"
done
r_perf=$(ratio "$tcpu" "$(col_median "$C" 1 10 perf)")
r_perfb=$(ratio "$tcpu" "$(col_median "$C" 1 10 perf-B)")
v=$(verdict le "$r_perf" 0.5)
[ "$v" = PASS ] && ! le "$r_perfb" 0.5 && v=FAIL
note_fail "$v"
echo
echo "tailprof / perf = $r_perf, tailprof / perf --no-buildid = $r_perfb: **$v**"
echo

reps_r=$(awk -F'\t' 'NR > 1 && $2 == "tailprof-function"' "$R" | wc -l)
echo "## 3. Report throughput and peak memory (target: tailprof >= 5x perf report's samples/s, no more memory)"
echo
echo "Same data: perf.data from \`perf record -e cpu-clock -c 10000 -a\`, imported with \`tailprof import\`; \`native\` = a trace recorded by \`tailprof record\` with the same options. Output to /dev/null; medians of $reps_r runs."
echo
echo "| command | trace | samples | wall s | samples/s | user+sys s | max RSS MiB |"
echo "|---|---|---:|---:|---:|---:|---:|"
declare -A SPS RSS
for v in perf-sym perf-sym-nochildren perf-dso tailprof-function tailprof-binary tailprof-native; do
    case $v in
    perf-sym) label='`perf report --stdio --sort sym`' ;;
    perf-sym-nochildren) label='`perf report --stdio --no-children --sort sym`' ;;
    perf-dso) label='`perf report --stdio --no-children --sort dso`' ;;
    tailprof-function) label='`tailprof report`' ;;
    tailprof-binary) label='`tailprof report --by binary`' ;;
    tailprof-native) label='`tailprof report` (native trace)' ;;
    esac
    tr=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print $3; exit}' "$R")
    n=$(col_median "$R" 2 5 "${v%%-*}	$v")
    w=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print $6 / 1e6}' "$R" | median)
    cpu=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print ($7 + $8) / 1e6}' "$R" | median)
    SPS[$v]=$(col_median "$R" 2 10 "${v%%-*}	$v")
    RSS[$v]=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print $9 / 1024}' "$R" | median)
    echo "| $label | $tr | $(fmt "$n" 0) | $(fmt "$w" 2) | $(fmt "${SPS[$v]}" 0) | $(fmt "$cpu" 2) | $(fmt "${RSS[$v]}" 1) |"
done
# The fairest perf baseline is the fastest symbol-level variant.
best=perf-sym
awk -v a="${SPS[perf-sym-nochildren]}" -v b="${SPS[perf-sym]}" 'BEGIN { exit !(a > b) }' && best=perf-sym-nochildren
sp=$(ratio "${SPS[tailprof-function]}" "${SPS[$best]}" 2)
sp_bin=$(ratio "${SPS[tailprof-binary]}" "${SPS[perf-dso]}" 2)
mem=$(ratio "${RSS[tailprof-function]}" "${RSS[$best]}" 2)
v=$(verdict le 5 "$sp")
[ "$v" = PASS ] && ! le "${RSS[tailprof-function]}" "${RSS[$best]}" && v=FAIL
note_fail "$v"
n=$(awk -F'\t' 'NR > 1 && $3 == "perf.data" {print $5; exit}' "$R")
small=""
[ "$n" -ge 5000000 ] || small=" (trace has $n samples, below the 5M the target asks for)"
echo
echo "Speed-up by function vs the fastest perf by-symbol run ($best): **${sp}x**; by binary vs \`--sort dso\`: ${sp_bin}x; peak memory tailprof / perf: ${mem}: **$v**$small"
echo
echo "Overall: **$OVERALL**"
