#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run_mpi_kill.sh FORM PER_HOST LIMIT_MS PROGRAM VICTIM COLLECTIVE COUNT: test_mpi_kill on
# 2 hosts of PER_HOST ranks each, FORM "rph" (ARCOMM_MPI_RANKS_PER_HOST on this machine)
# or "2hosts" (two emulated hosts, two_hosts.sh), rank VICTIM SIGKILLed during a loop of
# COLLECTIVE calls.  Open MPI's runtime is kept from ending the job when a process dies
# (--enable-recovery, --mca orte_abort_on_non_zero_status 0), so that the survivors
# return by themselves; then every rank but the victim must have printed one survivor
# line, with COMM_ERR_PEER or COMM_ERR_TIMEOUT, at most LIMIT_MS after the kill.  Exit
# 77 (skipped) without mpirun (or, for 2hosts, where namespaces cannot be made), and
# where mpirun itself died of a signal before passing the survivors' lines on, three
# times in a row.
set -uo pipefail
form=$1 per_host=$2 limit=$3 prog=$4 victim=$5
shift 5
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
np=$((2 * per_host))
keep=(--enable-recovery --mca orte_abort_on_non_zero_status 0)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export OMPI_MCA_btl_vader_single_copy_mechanism=none
run_once() {
    if [ "$form" = 2hosts ]; then
        # Open MPI 4.1's mpirun may stay after a process died on the other host: ended
        # after 15 s, which the survivors' lines do not need.
        TWO_HOSTS_MPIRUN_ARGS="${keep[*]}" TWO_HOSTS_LIMIT=15 \
            timeout 60 bash "$(dirname "$0")/two_hosts.sh" "$per_host" "$prog" "$victim" "$@" \
            >"$out" 2>&1
    else
        ARCOMM_MPI_RANKS_PER_HOST=$per_host timeout 60 mpirun --allow-run-as-root \
            --oversubscribe --bind-to none "${keep[@]}" -np "$np" "$prog" "$victim" "$@" \
            >"$out" 2>&1
    fi
}
# mpirun itself killed by a signal (a rank's death makes it exit, not die: 128 + 11 is
# its own SIGSEGV; Open MPI 4.1.4's HNP crashed so in pmix_server_log_fn right after the
# kill in 2 of 3 CI runs on 2026-12-03, 2hosts x1): the ranks' output went through it,
# so lines it did not pass on say nothing about arcomm. Such a run is made again, up to
# three times; then skipped, with the reason.
mpirun_died() {
    [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] && [ "$rc" -ne 143 ] &&
        [ "$(grep -c '^survivor:' "$out")" -lt $((np - 1)) ]
}
for attempt in 1 2 3; do
    run_once "$@"
    rc=$?
    [ $rc -eq 77 ] && { cat "$out"; exit 77; }
    mpirun_died || break
    echo "attempt $attempt: mpirun itself died of signal $((rc - 128)) (Open MPI's runtime," \
        "not a rank); its output:"
    cat "$out"
done
if mpirun_died; then
    echo "mpirun died in every attempt: the survivors' lines were lost with it; skipped"
    exit 77
fi
grep '^survivor:' "$out"
fails=0
for ((r = 0; r < np; r++)); do
    [ "$r" -eq "$victim" ] && continue
    line=$(grep "^survivor: rank $r on " "$out")
    if [ -z "$line" ]; then
        echo "FAIL: rank $r never returned (or was ended by mpirun)"
        fails=$((fails + 1))
        continue
    fi
    case $line in
    *": COMM_ERR_PEER: "* | *": COMM_ERR_TIMEOUT: "*) ;;
    *) echo "FAIL: rank $r returned neither PEER nor TIMEOUT"; fails=$((fails + 1)) ;;
    esac
    ms=$(sed -n 's/.* calls, \(-\{0,1\}[0-9]*\) ms after the kill.*/\1/p' <<<"$line")
    if [ -z "$ms" ] || [ "$ms" -gt "$limit" ]; then
        echo "FAIL: rank $r returned ${ms:-?} ms after the kill (limit $limit ms)"
        fails=$((fails + 1))
    fi
done
if grep -q '^survivor: rank '"$victim"' ' "$out"; then
    echo "FAIL: the victim, rank $victim, was not killed"
    fails=$((fails + 1))
fi
if [ $fails -ne 0 ]; then
    cat "$out"
    exit 1
fi
echo "ok: rank $victim killed, $((np - 1)) survivors on both hosts returned within $limit ms"
