# bench/lib.sh: helpers shared by bench/run.sh (sourced, not run).

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'bench: error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found${2:+: $2}"; }

# rotate N ITEMS...: print ITEMS rotated left by N (one per line), so repetitions start with a
# different tool each time and drift on a noisy machine does not favour one side.
rotate() {
    local n=$1; shift
    local k=$# i
    for ((i = 0; i < k; i++)); do
        local j=$(((i + n) % k + 1))
        printf '%s\n' "${!j}"
    done
}

# perf_counts FILE: "SAMPLES LOST THROTTLES" from one `perf report --stats`. LOST is the number
# of lost samples (the per-event LOST_SAMPLES total, which covers the kernel's LOST records), not
# the number of LOST records. Prints "nan nan nan" when perf cannot read the file.
perf_counts() {
    "$PERF" report -i "$1" --stats 2>/dev/null |
        awk '/^Aggregated stats/ {a = 1; next} /stats:$/ {a = 0; e = 1; next}
             a && $1 == "SAMPLE" && $2 == "events:" {s = $3; ok = 1}
             a && $1 == "THROTTLE" && $2 == "events:" {t = $3}
             a && $1 == "LOST" && $2 == "events:" {lr = $3}
             e && $1 == "LOST_SAMPLES" && $2 == "events:" {l += $3}
             END { if (!ok) print "nan nan nan"; else print s, (l > 0 ? l : lr + 0), t + 0 }'
}

# perf_ok FILE: success when FILE is a finished perf.data (perf rewrites the header's data size
# at the end; a perf that crashed leaves it at 0).
perf_ok() {
    [ -s "$1" ] && python3 -c 'import struct, sys
d = open(sys.argv[1], "rb").read(56)
sys.exit(0 if d[:8] == b"PERFILE2" and struct.unpack_from("<Q", d, 48)[0] > 0 else 1)' "$1"
}

# perf_sample_bytes FILE: size in bytes of one PERF_RECORD_SAMPLE in FILE (8-byte header + 8
# bytes per fixed-size sample_type field), i.e. the floor of perf's uncompressed format.
# Prints "-" when the sample_type has variable-size fields.
perf_sample_bytes() {
    "$PERF" evlist -v -i "$1" 2>/dev/null | head -n 1 |
        sed -n 's/.*sample_type: \([A-Z_|]*\).*/\1/p' |
        awk -F'|' '{ n = 8; for (i = 1; i <= NF; i++) {
                       if ($i ~ /^(IP|TID|TIME|ADDR|ID|STREAM_ID|CPU|PERIOD|IDENTIFIER|WEIGHT|DATA_SRC|PHYS_ADDR)$/) n += 8;
                       else { print "-"; exit } } print n }'
}

# tp_json FILE KEY: a top-level number from `tailprof info FILE --json`.
tp_json() {
    "$TAILPROF" info "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], 0))' "$2" 2>/dev/null ||
        "$TAILPROF" info "$1" --json | tr -d ' \n' | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"
}

# median: the median of the numbers on stdin (one per line; "nan" and empty lines skipped).
median() {
    { grep -v -x -e nan -e '' || true; } | sort -g | awk '{a[NR] = $1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2];
                                      else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# col_median TSV KEYCOLS VALCOL KEY: median of column VALCOL over the rows of TSV whose
# columns 1..KEYCOLS joined by tabs equal KEY.
col_median() {
    awk -F'\t' -v kc="$2" -v vc="$3" -v key="$4" 'NR > 1 {
            k = $1; for (i = 2; i <= kc; i++) k = k "\t" $i
            if (k == key) print $vc }' "$1" | median
}

# ratio A B [DIGITS]: A / B.
ratio() { awk -v a="$1" -v b="$2" -v d="${3:-3}" 'BEGIN { if (b == 0 || a == "nan" || b == "nan") print "nan"; else printf "%.*f\n", d, a / b }'; }

# le A B: success when A <= B (floating point).
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "nan" && b != "nan" && a + 0 <= b + 0) }'; }

fmt() { awk -v v="$1" -v d="${2:-2}" 'BEGIN { if (v == "nan") print v; else printf "%.*f\n", d, v }'; }
