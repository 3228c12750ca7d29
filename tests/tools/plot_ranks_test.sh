#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# plot_ranks_test.sh ARBENCH PLOT_RANKS: tools/bench/plot_ranks.sh on two arbench CSVs
# (1 and 2 thread ranks, one of them --coll all) draws a PNG; a missing file, a missing
# argument and a file without the collective asked for are refused or said.  Exit 77
# without gnuplot.
set -uo pipefail
arbench=$1 plot=$2
command -v gnuplot >/dev/null 2>&1 || { echo "no gnuplot: skipped"; exit 77; }
dir=$(mktemp -d /tmp/arcomm-plot.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export ARCOMM_LOG_LEVEL=error
"$arbench" -n 1 -b 4 -e 4K -f 4 --iters 20 --csv "$dir/n1.csv" >/dev/null || fail "arbench -n 1"
"$arbench" -n 2 -b 4 -e 4K -f 4 --iters 20 --coll all --csv "$dir/n2.csv" >/dev/null || fail "arbench -n 2"
out=$("$plot" "$dir/a.png" "allreduce" 1="$dir/n1.csv" 2="$dir/n2.csv" 2>&1) || fail "plot: $out"
[ "$(head -c 8 "$dir/a.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "not a PNG"
[ "$(stat -c %s "$dir/a.png")" -gt 10000 ] || fail "PNG too small to hold the lines"
# The data each line is drawn from: 6 sizes (4 B to 4 KiB by 4) of allreduce from each file.
PLOT_COLL=reduce "$plot" "$dir/r.png" "reduce" 2="$dir/n2.csv" >/dev/null 2>&1 || fail "PLOT_COLL=reduce"
[ -s "$dir/r.png" ] || fail "no reduce picture"
out=$("$plot" "$dir/b.png" "t" 1="$dir/none.csv" 2>&1) && fail "a missing file was accepted"
echo "$out" | grep -q "none.csv: no such file" || fail "missing file not named: $out"
"$plot" "$dir/c.png" >/dev/null 2>&1 && fail "no runs accepted"
out=$(PLOT_COLL=alltoall "$plot" "$dir/d.png" "t" 1="$dir/n1.csv" 2>&1) && fail "a file without the collective was drawn"
echo "$out" | grep -q "no rows of alltoall" || fail "a file without the collective not said: $out"
echo "plot_ranks: ok"
