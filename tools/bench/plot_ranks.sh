#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# plot_ranks.sh OUT.png TITLE LABEL=FILE.csv [LABEL=FILE.csv ...]
#
# One picture of several arbench runs (each written with --csv, typically the same
# collective at 2, 4, 8 and 16 ranks): median time against size on the left, busbw
# against size on the right, one line per run (its LABEL), and where a run compared
# against a peer (--compare mpi) the peer's line dashed in the same colour.  Needs
# gnuplot (apt-get install gnuplot-nox).  A CSV of --coll all holds every collective:
# PLOT_COLL=reduce picks one (default: the first in each file).  Example:
#
#   for n in 2 4 8 16; do arbench -n $n -b 4 -e 64M --compare mpi --csv ar-$n.csv; done
#   tools/bench/plot_ranks.sh allreduce.png "allreduce f32 sum, threads" \
#       2=ar-2.csv 4=ar-4.csv 8=ar-8.csv 16=ar-16.csv
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
command -v gnuplot >/dev/null 2>&1 || { echo "plot_ranks.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
out=$1 title=$2
shift 2
gp=$(mktemp)
trap 'rm -f "$gp"' EXIT
# Each CSV as data blocks: columns size, arcomm time, arcomm busbw, peer time, peer busbw
# (by header name, whatever the column order), and the peer's name.
blocks=() labels=() peers=()
i=0
for arg in "$@"; do
    label=${arg%%=*} file=${arg#*=}
    [ -f "$file" ] || { echo "plot_ranks.sh: $file: no such file" >&2; exit 1; }
    peer=$(awk -F, '!/^#/ && NR > 1 && $0 !~ /^size,/ { for (k = 1; k <= NF; k++) if (h[k] == "peer") { print $k; exit } }
                    /^size,/ { for (k = 1; k <= NF; k++) h[k] = $k }' "$file")
    rows=$(awk -F, -v want="${PLOT_COLL:-}" '
            /^size,/ { for (k = 1; k <= NF; k++) c[$k] = k
                       p = ("arcomm_time_us" in c) ? "arcomm_" : ""; next }
            /^#/ || !("size" in c) { next }
            { coll = ("coll" in c) ? $c["coll"] : ""
              if (want == "") want = coll
              if (coll != want) next
              pt = ("peer_time_us" in c) ? $c["peer_time_us"] : ""; pb = ("peer_busbw_gbs" in c) ? $c["peer_busbw_gbs"] : ""
              if (pt == "" || pt == "N/A") pt = "NaN"; if (pb == "" || pb == "N/A") pb = "NaN"
              print $c["size"], $c[p "time_us"], $c[p "busbw_gbs"], pt, pb }' "$file")
    if [ -z "$rows" ]; then
        echo "plot_ranks.sh: $file has no rows${PLOT_COLL:+ of $PLOT_COLL} (an arbench --csv file?)" >&2
        exit 1
    fi
    printf '$d%d << EOD\n%s\nEOD\n' "$i" "$rows" >>"$gp"
    labels+=("$label") peers+=("$peer")
    i=$((i + 1))
done
# One panel's plot command: arcomm's column and the peer's of every run.
panel() { # arcomm-column peer-column
    printf 'plot '
    for ((j = 0; j < i; j++)); do
        [ $j -gt 0 ] && printf ', '
        printf "\$d$j using 1:$1 with linespoints lw 2 lc $((j + 1)) title 'arcomm %s'" "${labels[$j]}"
        [ -n "${peers[$j]}" ] && printf ", \$d$j using 1:$2 with lines lw 1 dt 2 lc $((j + 1)) title '%s %s'" "${peers[$j]}" "${labels[$j]}"
    done
    echo
}
{
    echo "set terminal pngcairo size 1400,560 noenhanced"
    echo "set output '$out'"
    echo "set multiplot layout 1,2 title '$title'"
    echo "set logscale x 2; set format x '%.0b%BB'; set xlabel 'size'; set grid; set key top left"
    echo "set logscale y 10; set ylabel 'median time (us)'"
    panel 2 4
    echo "unset logscale y; set ylabel 'busbw (GB/s)'"
    panel 3 5
    echo "unset multiplot"
} >>"$gp"
gnuplot "$gp"
echo "plot_ranks.sh: wrote $out"
