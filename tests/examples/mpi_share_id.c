/* SPDX-License-Identifier: MIT */
/*
 * Processes that arrun did not start share one communicator id: here they are MPI
 * ranks, and rank 0's comm_id_new reaches the others by MPI_Bcast (a comm_id_t is
 * plain bytes: a pipe, a file or a socket would do as well).  Each process then joins
 * as its MPI rank and the processes sum a vector with arcomm.
 *
 *   mpirun -n 2 mpi_share_id        prints "rank R: ok" on every rank, exits 0
 */
#include <arcomm.h>
#include <mpi.h>
#include <stdio.h>

#define N 1024

int main(int argc, char **argv)
{
    int rank, size, bad = 0, any_bad = 0;
    float x[N], sum[N];
    comm_config_t cfg;
    comm_t *comm;
    comm_id_t id;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* One rank makes the id, every rank gets the same bytes. */
    if (rank == 0 && comm_id_new(&id) != COMM_OK) {
        fprintf(stderr, "rank 0: comm_id_new: %s\n", comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);

    comm_config_init(&cfg);
    cfg.nranks = size;
    cfg.rank = rank;
    cfg.id = id;
    if (comm_init(&comm, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < N; i++)
        x[i] = (float)((rank + 1) * (i % 31));
    if (comm_allreduce(comm, x, sum, N, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_allreduce: %s\n", rank, comm_last_error(comm));
        bad = 1;
    } else {
        float ranks_sum = (float)(size * (size + 1) / 2); /* 1 + 2 + ... + size */
        for (int i = 0; i < N; i++)
            bad |= sum[i] != ranks_sum * (float)(i % 31);
    }
    comm_destroy(comm); /* before MPI_Finalize, as any resource of the job */
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    printf("rank %d: %s\n", rank, any_bad ? "wrong sums" : "ok");
    MPI_Finalize();
    return any_bad;
}
