/* SPDX-License-Identifier: MIT */
/* The Open MPI peer's collectives and bookkeeping (mpi_peer.c). */
#ifndef ARBENCH_MPI_PEER_H
#define ARBENCH_MPI_PEER_H

#include "bench_common.h"

#include <mpi.h>
#include <stdbool.h>

struct mpi_peer {
    MPI_Datatype type; /* the dtype's MPI type (f16, bf16: MPI_UINT16_T) */
    MPI_Op op;         /* the op's (f16, bf16: a user op) */
    int rank;          /* in MPI_COMM_WORLD */
    size_t esize;
    bool half; /* the op is a user op, freed by mpi_peer_fini */
};

/* For one sweep of dtype and op (not AVG: MPI has none). */
void mpi_peer_init(struct mpi_peer *m, comm_dtype_t dtype, comm_op_t op, int rank);
void mpi_peer_fini(struct mpi_peer *m);
/* The collectives on MPI_COMM_WORLD, with m as their context. */
struct bench_coll mpi_peer_coll(struct mpi_peer *m);
/* The benchmark's own numbers, through MPI_Allreduce on MPI_COMM_WORLD. */
struct bench_sync mpi_peer_sync(void);

#endif /* ARBENCH_MPI_PEER_H */
