/* SPDX-License-Identifier: MIT */
/* arbench --mpi (multihost.c, in builds with MPI). */
#ifndef ARBENCH_BENCH_MULTIHOST_H
#define ARBENCH_BENCH_MULTIHOST_H

#include "bench_common.h"

/* arbench's collectives over comm, ordered on stream (NULL: host buffers). */
typedef struct bench_coll (*bench_coll_of)(comm_t *comm, void *stream);

/* The whole run of one rank under mpirun: MPI_Init to MPI_Finalize; an exit code. */
int bench_mpi_main(const struct bench_opts *o, int argc, char **argv, bench_coll_of coll_of);

#endif /* ARBENCH_BENCH_MULTIHOST_H */
