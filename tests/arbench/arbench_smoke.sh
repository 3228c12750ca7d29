#!/bin/sh
# SPDX-License-Identifier: MIT
# arbench smoke test: arbench_smoke.sh threads|procs|procs-heap|mpi ARBENCH
# A small checked sweep must exit 0 and report #wrong == 0 for every size (and for the
# MPI peer with "mpi").  Exit 77 (meson: skipped) when arrun or mpirun is missing.
set -u
mode=$1
arbench=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/arbench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT INT TERM
csv=$dir/out.csv
bindir=$(dirname "$arbench")

case $mode in
threads)
    "$arbench" -n 2 -b 4 -e 64K --check --iters 20 --csv "$csv" || {
        echo "arbench exited with $?"; exit 1; }
    cols=11 ;;
procs)
    if [ ! -x "$bindir/../arrun/arrun" ] && ! command -v arrun >/dev/null 2>&1; then
        echo "arrun not built: skipping"; exit 77
    fi
    "$arbench" --procs -n 2 -b 4 -e 64K --check --iters 20 --csv "$csv" || {
        echo "arbench --procs exited with $?"; exit 1; }
    cols=11 ;;
procs-heap)
    # Under arrun --shared-heap, every buffer from 4 KiB in the heap (ARCOMM_HEAP_MIN=4K,
    # its smallest value) and every call a bulk call: the one-pass path over the peers'
    # heaps from that size.
    if [ ! -x "$bindir/../arrun/arrun" ] && ! command -v arrun >/dev/null 2>&1; then
        echo "arrun not built: skipping"; exit 77
    fi
    ARCOMM_HEAP_MIN=4K ARCOMM_FLAG_THRESHOLD=off "$arbench" --procs --shared-heap -n 2 -b 4 \
        -e 64K --check --iters 20 --csv "$csv" || {
        echo "arbench --procs --shared-heap exited with $?"; exit 1; }
    cols=11 ;;
mpi)
    if ! command -v mpirun >/dev/null 2>&1 || [ ! -x "$bindir/arbench-mpi" ]; then
        echo "mpirun or arbench-mpi missing: skipping"; exit 77
    fi
    "$arbench" -n 2 -b 4 -e 16K --check --iters 20 --compare mpi --csv "$csv" || {
        echo "arbench --compare mpi exited with $?"; exit 1; }
    cols="11 18" ;;
*)
    echo "usage: $0 threads|procs|procs-heap|mpi ARBENCH"; exit 2 ;;
esac

cat "$csv"
# Rows are the lines after the column header; every wrong column must be 0, and the
# sweep 4 B .. 64 KiB (16 KiB with mpi) by 2 must have all its sizes.
want=15
[ "$mode" = mpi ] && want=13
awk -F, -v cols="$cols" -v want="$want" '
    /^#/ { next }
    !hdr { hdr = 1; next }
    {
        rows++
        n = split(cols, c, " ")
        for (i = 1; i <= n; i++)
            if ($c[i] != "0") { print "size " $1 ": column " c[i] " is " $c[i]; bad = 1 }
    }
    END {
        if (rows != want) { print "expected " want " rows, got " rows; bad = 1 }
        exit bad
    }' "$csv"
