#!/usr/bin/env bash
# bench/summarize.sh [OUTDIR]: turn the raw TSVs written by bench/run.sh into Markdown tables of
# medians, ratios and PASS/FAIL against the targets (printed on stdout). Runs whose tool crashed
# (status "crash") are counted and left out of the medians.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/lib.sh"
OUT=${1:-$HERE/out}
B=$OUT/bytes.tsv C=$OUT/cpu.tsv R=$OUT/report.tsv
[ -s "$B" ] && [ -s "$C" ] && [ -s "$R" ] || die "no results in $OUT (run bench/run.sh first)"
OVERALL=PASS
verdict() { if "$@"; then echo PASS; else echo FAIL; fi; }
note() { [ "$1" = PASS ] || OVERALL=FAIL; }
# max_ratio A B...: the largest of the numbers that are not nan (nan if none).
max_num() { printf '%s\n' "$@" | awk '$1 != "nan" && (m == "" || $1 + 0 > m + 0) {m = $1} END {print (m == "" ? "nan" : m)}'; }
# crashes TSV KEYCOLS KEY STATUSCOL: "" or " (k of n crashed)".
crashes() {
    awk -F'\t' -v kc="$2" -v key="$3" -v sc="$4" 'NR > 1 {
            k = $1; for (i = 2; i <= kc; i++) k = k "\t" $i
            if (k == key) { n++; if ($sc != "ok") c++ } }
        END { if (c) printf " (%d of %d crashed)", c, n }' "$1"
}
cell() { # VALUE DIGITS CRASHNOTE
    if [ "$1" = nan ]; then echo "crashed"; else echo "$(fmt "$1" "$2")$3"; fi
}

echo "### 1. Trace bytes per sample (target: tailprof <= 1/4 of perf.data)"
echo
echo "| workload | -c | samples tailprof / perf -B | tailprof B/sample | perf B/sample | perf -B B/sample | perf -B -z B/sample | perf record size | tailprof / perf | tailprof / perf -B | tailprof / perf -B -z | target |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for key in $(awk -F'\t' 'NR > 1 && !s[$1 "," $2]++ {print $1 "," $2}' "$B"); do
    wl=${key%,*} p=${key#*,}
    m() { col_median "$B" 3 "$1" "$wl	$p	$2"; }
    t=$(m 9 tailprof) pf=$(m 9 perf) pb=$(m 9 perf-B) pz=$(m 9 perf-Bz)
    rec=$(awk -F'\t' -v w="$wl" -v p="$p" 'NR > 1 && $1 == w && $2 == p && $3 == "perf-B" && $10 != "-" {print $10; exit}' "$B")
    r1=$(ratio "$t" "$pf") r2=$(ratio "$t" "$pb") r3=$(ratio "$t" "$pz")
    # Judged against the smaller uncompressed perf file (the larger ratio): perf, or perf -B
    # when perf crashed or wrote less.
    worst=$(max_num "$r1" "$r2")
    v=$(verdict le "$worst" 0.25)
    note "$v"
    echo "| $wl | $p | $(fmt "$(m 7 tailprof)" 0) / $(fmt "$(m 7 perf-B)" 0) | $(fmt "$t") | $(cell "$pf" 2 "$(crashes "$B" 3 "$wl	$p	perf" 5)") | $(cell "$pb" 2 "$(crashes "$B" 3 "$wl	$p	perf-B" 5)") | $(cell "$pz" 2 "$(crashes "$B" 3 "$wl	$p	perf-Bz" 5)") | ${rec:--} | $r1 | $r2 | $r3 | $v |"
done
echo
echo "Medians of $(awk -F'\t' 'NR > 1 && $3 == "tailprof"' "$B" | cut -f1,2 | sort | uniq -c | awk 'NR == 1 {print $1}') runs per cell. \"perf record size\" is the size of one uncompressed PERF_RECORD_SAMPLE (header + sample_type fields): the floor of perf's format. Target judged on the larger of the two uncompressed ratios; the \`-z\` column is for information."
echo

echo "### 2. Recorder CPU time per sample (target: tailprof <= 1/2 of perf record)"
echo
echo "| recorder | runs ok | samples | user+sys ms | us/sample | lost (all runs) | throttled (all runs) | max RSS MiB | vs tailprof |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
tcpu=$(col_median "$C" 1 11 tailprof)
declare -A US
for rec in tailprof perf perf-B; do
    ok=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r {n++; if ($3 == "ok") k++} END {printf "%d/%d", k, n}' "$C")
    s=$(col_median "$C" 1 8 "$rec")
    ms=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r && $3 == "ok" {print ($4 + $5) / 1000}' "$C" | median)
    US[$rec]=$(col_median "$C" 1 11 "$rec")
    lost=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r && $3 == "ok" {n += $9} END {print n + 0}' "$C")
    thr=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r && $3 == "ok" {n += $10} END {print n + 0}' "$C")
    rss=$(awk -F'\t' -v r="$rec" 'NR > 1 && $1 == r && $3 == "ok" {print $7 / 1024}' "$C" | median)
    echo "| $rec | $ok | $(fmt "$s" 0) | $(fmt "$ms" 1) | $(fmt "${US[$rec]}" 3) | $lost | $thr | $(fmt "$rss" 1) | $(ratio "${US[$rec]}" "$tcpu" 2)x |"
done
r_perf=$(ratio "$tcpu" "${US[perf]}")
r_perfb=$(ratio "$tcpu" "${US[perf-B]}")
v=$(verdict le "$(max_num "$r_perf" "$r_perfb")" 0.5)
tl=$(awk -F'\t' 'NR > 1 && $1 == "tailprof" {n += $9} END {print n + 0}' "$C")
[ "$tl" = 0 ] || v="$v (tailprof lost $tl samples)"
note "${v%% *}"
echo
echo "tailprof / perf = $r_perf, tailprof / perf --no-buildid = $r_perfb (judged on the larger): **$v**"
echo

echo "### 3. Report throughput and peak memory (target: tailprof >= 5x perf report's samples/s, no more memory)"
echo
echo "| command | trace | runs ok | samples | wall s | samples/s | user+sys s | max RSS MiB |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
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
    q() { awk -F'\t' -v x="$v" "NR > 1 && \$2 == x && \$5 == \"ok\" {print $1}" "$R" | median; }
    tr=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print $3; exit}' "$R")
    ok=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {n++; if ($5 == "ok") k++} END {printf "%d/%d", k, n}' "$R")
    n=$(awk -F'\t' -v x="$v" 'NR > 1 && $2 == x {print $6; exit}' "$R")
    w=$(q '$7 / 1e6')
    cpu=$(q '($8 + $9) / 1e6')
    SPS[$v]=$(q '$11')
    RSS[$v]=$(q '$10 / 1024')
    echo "| $label | $tr | $ok | $(fmt "$n" 0) | $(fmt "$w" 2) | $(fmt "${SPS[$v]}" 0) | $(fmt "$cpu" 2) | $(fmt "${RSS[$v]}" 1) |"
done
# The fair perf baseline is the fastest by-symbol variant that ran.
best=$(for v in perf-sym perf-sym-nochildren; do echo "${SPS[$v]} $v"; done | awk '$1 != "nan"' | sort -g | tail -n 1 | cut -d' ' -f2)
n=$(awk -F'\t' 'NR > 1 && $3 == "perf.data" {print $6; exit}' "$R")
echo
if [ -z "$best" ]; then
    note FAIL
    echo "perf report crashed on every run: no baseline. **FAIL (not measurable)**"
else
    sp=$(ratio "${SPS[tailprof-function]}" "${SPS[$best]}" 2)
    sp_bin=$(ratio "${SPS[tailprof-binary]}" "${SPS[perf-dso]}" 2)
    mem=$(ratio "${RSS[tailprof-function]}" "${RSS[$best]}" 2)
    v=$(verdict le 5 "$sp")
    [ "$v" = PASS ] && ! le "${RSS[tailprof-function]}" "${RSS[$best]}" && v=FAIL
    note "$v"
    small=""
    [ "$n" -ge 5000000 ] || small=" (the trace has $n samples, fewer than the 5M the target asks for)"
    echo "By function, against the faster perf by-symbol run (\`$best\`): **${sp}x** the samples/s, peak memory ratio ${mem}: **$v**$small."
    echo "By binary against \`--sort dso\`: ${sp_bin}x."
fi
echo
if [ -s "$OUT/record_a.tsv" ]; then
    echo "### Supplementary: the two system-wide recordings behind benchmark 3 (no target)"
    echo
    echo "\`record -e cpu-clock -c 10000 -a\` (2 CPUs x 100k samples/s offered), one run each, perf first."
    echo
    echo "| recorder | samples written | lost | lost % | user+sys s | wall s | us/sample written | max RSS MiB |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    awk -F'\t' 'NR > 1 { cpu = ($2 + $3) / 1e6; tot = $6 + $7
        printf "| %s | %d | %d | %.1f%% | %.2f | %.2f | %.2f | %.1f |\n", $1, $6, $7, (tot ? 100 * $7 / tot : 0), cpu, $4 / 1e6, ($6 ? cpu * 1e6 / $6 : 0), $5 / 1024 }' "$OUT/record_a.tsv"
    echo
fi
echo "Overall: **$OVERALL**"
