#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs an MPI test program of tests/pmpi on N processes with libarcomm_pmpi preloaded
# (or, with LIB "-", linked into the program), then checks that the program passed and
# that, on every rank, the library's report at MPI_Finalize says what the program
# expected: how many calls of each kind arcomm served and how many went to MPI.  With
# "off" as the fourth argument ARCOMM_PMPI=off must leave no report at all; with
# "initfail" comm_init fails (ARCOMM_TRANSPORT names no transport) and every call must
# go to MPI, the program passing all the same.
#   run_pmpi.sh NP LIB PROGRAM [off|initfail]   exit 77 (skipped) without mpirun
set -euo pipefail
np=$1 lib=$2 prog=$3 mode=${4:-on}
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
env_args=(-x ARCOMM_LOG_LEVEL=info)
# A library built with -Db_sanitize=address needs the ASan runtime loaded before it: first
# in LD_PRELOAD (the test programs and mpirun are not instrumented, or link it later).
asan=$(ldd "${lib%%:*}" 2>/dev/null | awk '/libasan/ {print $3; exit}' || true)
[ "$lib" != "-" ] && [ -n "$asan" ] && lib=$asan:$lib
[ "$lib" != "-" ] && env_args+=(-x "LD_PRELOAD=$lib")
[ "$mode" = off ] && env_args+=(-x ARCOMM_PMPI=off)
[ "$mode" = initfail ] && env_args+=(-x ARCOMM_TRANSPORT=no-such-transport)
[ -n "${ARCOMM_PMPI_MIN_BYTES:-}" ] && env_args+=(-x ARCOMM_PMPI_MIN_BYTES)
rc=0
if [ -n "${PMPI_TWO_HOSTS:-}" ]; then
    # NP ranks on two emulated hosts (tests/mpi/two_hosts.sh), NP / 2 each: the
    # communicators span hosts and go through comm_init_mpi.  Its mpirun passes on the
    # ARCOMM_* variables; LD_PRELOAD through TWO_HOSTS_PRELOAD (not into mpirun itself).
    export ARCOMM_LOG_LEVEL=info
    [ "$lib" != "-" ] && export TWO_HOSTS_PRELOAD=$lib
    [ "$mode" = off ] && export ARCOMM_PMPI=off
    [ "$mode" = initfail ] && export ARCOMM_TRANSPORT=no-such-transport
    timeout 240 bash "$PMPI_TWO_HOSTS" $((np / 2)) "$prog" >"$out" 2>&1 || rc=$?
    [ $rc -eq 77 ] && { cat "$out"; exit 77; }
else
    timeout 240 mpirun --allow-run-as-root --oversubscribe -np "$np" "${env_args[@]}" "$prog" \
        >"$out" 2>&1 || rc=$?
fi
if [ $rc -ne 0 ] || ! grep -q '^ok: 0 failures' "$out"; then
    cat "$out"
    echo "FAIL: $prog on $np processes exited $rc"
    exit 1
fi
if [ "$mode" = off ]; then
    if grep -q 'pmpi: rank [0-9]*: report' "$out"; then
        grep 'pmpi:' "$out"
        echo "FAIL: ARCOMM_PMPI=off still reported"
        exit 1
    fi
    echo "ok: ARCOMM_PMPI=off left every call to MPI"
    exit 0
fi
if [ "$mode" = initfail ]; then
    served=$(grep -c 'report: served by arcomm .* total=0$' "$out" || true)
    if [ "$served" -ne "$np" ] || ! grep -q 'handed to MPI: comm_init failed' "$out"; then
        grep 'pmpi:' "$out"
        echo "FAIL: comm_init failed, yet arcomm served calls (or no rank said so)"
        exit 1
    fi
    echo "ok: comm_init failed on every communicator, every call went to MPI"
    exit 0
fi
fails=0
while IFS= read -r line; do
    want=${line#expect: }
    if ! grep -qxF "arcomm info: pmpi: ${want%%: *}: report: ${want#*: }" "$out"; then
        echo "FAIL: no report line matches: $want"
        grep -F "pmpi: ${want%%: *}: report" "$out" || true
        fails=$((fails + 1))
    fi
done < <(grep '^expect: ' "$out")
n=$(grep -c '^expect: ' "$out" || true)
[ "$n" -eq $((2 * np)) ] || { echo "FAIL: $n expectation lines for $np ranks"; fails=$((fails + 1)); }
[ $fails -eq 0 ] || exit 1
grep 'report: served' "$out"
echo "ok: $np processes, every rank's report as expected"
