#!/bin/sh
# SPDX-License-Identifier: MIT
# arbench's outputs and refusals: an output path that cannot be written (--csv, --json,
# --plot) is refused before the sweep runs, the PNG never lands on stdout, -n above
# COMM_MAX_RANKS is said once, --device hexagon is neither offered nor half-taken, the
# collectives' usage errors come before any sweep, and the CSV and JSON carry the
# collective, the ceiling and its fraction (the old CSV columns in their places).
#   arbench_outputs.sh ARBENCH
set -u
arbench=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/arbench-outputs.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
bad=0
sweep="-n 2 -b 4 -e 64 --iters 3 --warmup 1"

# refused NAME ARGS...: exit 2, nothing on stdout (no sweep ran, no PNG), one message.
refused() {
    name=$1
    shift
    # shellcheck disable=SC2086
    "$arbench" "$@" >"$dir/out" 2>"$dir/err"
    rc=$?
    if [ $rc -ne 2 ]; then
        echo "$name: exit $rc, expected 2 before any sweep"; cat "$dir/err"; bad=1
    fi
    if [ -s "$dir/out" ]; then
        echo "$name: something was written to stdout ($(wc -c <"$dir/out") bytes):"
        head -c 300 "$dir/out" | od -c | head -n 5; bad=1
    fi
    if [ "$(wc -l <"$dir/err")" -ne 1 ]; then
        echo "$name: expected one line of error, got:"; cat "$dir/err"; bad=1
    fi
}

# shellcheck disable=SC2086
refused "--plot into a missing directory" $sweep --plot /nonexistent-arbench-dir/x.png
grep -q "/nonexistent-arbench-dir" "$dir/err" || { echo "--plot: the message names no path"; bad=1; }
# shellcheck disable=SC2086
refused "--csv into a missing directory" $sweep --csv /nonexistent-arbench-dir/x.csv
# shellcheck disable=SC2086
refused "--json to a directory" $sweep --json "$dir"
refused "-n 300" -n 300 -b 4 -e 64
grep -q "at most 256 ranks" "$dir/err" || { echo "-n 300: not the COMM_MAX_RANKS message"; bad=1; }
refused "-n 300 --procs" -n 300 --procs -b 4 -e 64
refused "--device hexagon" --device hexagon -b 4 -e 64
grep -q "not supported" "$dir/err" || { echo "--device hexagon: does not say it is unsupported"; bad=1; }
if "$arbench" --help | grep -q hexagon; then
    echo "--help still offers hexagon"; bad=1
fi

# Usage errors of the collectives: exit 2 before any sweep, nothing on stdout.
usage_error() {
    name=$1
    shift
    "$arbench" "$@" >"$dir/out" 2>"$dir/err"
    rc=$?
    [ $rc -eq 2 ] || { echo "$name: exit $rc, expected 2"; cat "$dir/err"; bad=1; }
    [ -s "$dir/out" ] && { echo "$name: a sweep ran"; bad=1; }
}
usage_error "--coll alltoall --inplace" --coll alltoall --inplace -b 4 -e 64
grep -q "no in-place form" "$dir/err" || { echo "alltoall --inplace: not the reason"; bad=1; }
usage_error "--fresh --graph" --fresh --graph -b 4 -e 64
grep -q "host buffers" "$dir/err" || { echo "--fresh --graph: not the reason"; bad=1; }
usage_error "--coll bogus" --coll bogus -b 4 -e 64
usage_error "-o avg -d i32" -o avg -d i32 -b 4 -e 64
grep -q "float dtype" "$dir/err" || { echo "-o avg -d i32: not the reason"; bad=1; }
usage_error "--compare mpi -o avg" --compare mpi -o avg -b 4 -e 64

# Writable outputs work, and the PNG goes to its file only.
if command -v gnuplot >/dev/null 2>&1; then
    plot="--plot $dir/p.png"
else
    plot=
    echo "gnuplot missing: the PNG part is not checked"
fi
# shellcheck disable=SC2086
"$arbench" $sweep --csv "$dir/o.csv" --json "$dir/o.json" $plot >"$dir/out" 2>"$dir/err" || {
    echo "a sweep with writable outputs failed:"; cat "$dir/err"; bad=1; }
[ -s "$dir/o.csv" ] && [ -s "$dir/o.json" ] || { echo "--csv or --json file empty"; bad=1; }
# The CSV keeps its old columns in their places; the collectives' come after them.
cols="size,count,type,op,nranks,iters,time_us,p90_us,algbw_gbs,busbw_gbs,wrong,coll,ceiling_gbs,ceiling_frac,mean_us"
grep -qx "$cols" "$dir/o.csv" || { echo "--csv header is not $cols:"; cat "$dir/o.csv"; bad=1; }
for key in '"coll": "allreduce"' '"ceiling_gbs": ' '"ceiling_frac": ' '"mean_us": ' '"traffic_def": '; do
    grep -q "$key" "$dir/o.json" || { echo "--json lacks $key"; bad=1; }
done
if grep -q PNG "$dir/out"; then
    echo "PNG bytes on stdout"; bad=1
fi
if [ -n "$plot" ] && ! head -c 4 "$dir/p.png" | grep -q PNG; then
    echo "--plot wrote no PNG to $dir/p.png"; bad=1
fi
exit $bad
