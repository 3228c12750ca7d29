/* SPDX-License-Identifier: MIT */
/*
 * arbench's child sweeps (launch.c): each fills res[0..nsizes) and returns 0, or -1
 * with the reason on stderr.
 */
#ifndef ARBENCH_LAUNCH_H
#define ARBENCH_LAUNCH_H

#include "bench_common.h"

#include <stddef.h>

/* The process-rank sweep: this program again, under arrun -n N; transport gets the
 * ranks' transport name (64 bytes). */
int bench_run_procs(const struct bench_opts *o, struct bench_result *res, size_t nsizes,
                    char *transport);
/* The Open MPI peer: arbench-mpi under mpirun, from libexec or beside this program. */
int bench_run_mpi(const struct bench_opts *o, struct bench_result *res, size_t nsizes);

#endif /* ARBENCH_LAUNCH_H */
