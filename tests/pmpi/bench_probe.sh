#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# arbench-mpi through libarcomm_pmpi times warm calls: the library makes its arcomm
# communicator on the first call (milliseconds), and arbench's probe for the number of
# calls must not time that call, else the first size of a sweep runs the fewest calls
# (20), cold.  A 4 KiB allgather takes microseconds: the probe must settle on thousands.
#   bench_probe.sh LIBPMPI ARBENCH_MPI          exit 77 (skipped) without mpirun
set -euo pipefail
lib=$1 bench=$2
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
# An ASan build's library needs the ASan runtime first in LD_PRELOAD (as run_pmpi.sh).
asan=$(ldd "$lib" 2>/dev/null | awk '/libasan/ {print $3; exit}' || true)
[ -n "$asan" ] && lib=$asan:$lib
out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x "LD_PRELOAD=$lib" \
    -x ARCOMM_LOG_LEVEL=warn -x ARCOMM_PMPI_MIN_BYTES=0 "$bench" --coll allgather \
    -b 4K -e 4K --csv-stdout)
echo "$out"
iters=$(echo "$out" | awk -F, '/^4096,/ { print $6 }')
if [ -z "$iters" ] || [ "$iters" -lt 1000 ]; then
    echo "FAIL: the 4 KiB allgather ran ${iters:-no} timed calls (at least 1000 expected)"
    exit 1
fi
echo "ok: $iters timed calls"
