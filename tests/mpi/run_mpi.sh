#!/bin/sh
# SPDX-License-Identifier: MIT
# run_mpi.sh NP PROGRAM [ARGS...]: PROGRAM on NP processes under mpirun, oversubscribed
# (the machine may have fewer cores), as root too (containers).  Exit 77 (skipped)
# when mpirun is missing.  An empty ARCOMM_MPI_RANKS_PER_HOST means unset.
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
np=$1
shift
[ -n "${ARCOMM_MPI_RANKS_PER_HOST:-}" ] || unset ARCOMM_MPI_RANKS_PER_HOST
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@"
