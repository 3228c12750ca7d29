/* SPDX-License-Identifier: MIT */
/*
 * multihost_mpi: an arcomm communicator over every rank of an MPI job, on any number of
 * hosts.  comm_init_mpi (libarcomm_mpi) joins the ranks of each host in one shared-
 * memory communicator and links the hosts through MPI; the program then calls arcomm's
 * collectives as on one host.  Each rank checks an allreduce and an allgather and the
 * job agrees on the verdict: every rank prints it and exits 0 when all is right.
 *
 *   mpicc multihost_mpi.c $(pkg-config --cflags --libs arcomm-mpi) -o multihost_mpi
 *   mpirun -n 4 --host a:2,b:2 ./multihost_mpi     two hosts, two ranks each
 *   mpirun -n 2 -x ARCOMM_MPI_RANKS_PER_HOST=1 ./multihost_mpi
 *                   one machine acting as two hosts (a "host" per rank): the same steps
 *   prints "rank R of N (shm+mpi): allreduce and allgather right" on every rank
 */
#include <arcomm_mpi.h>
#include <mpi.h>
#include <stdio.h>

#define N 100000

int main(int argc, char **argv)
{
    static float x[N], sum[N];
    static int ranks[1024];
    int rank, size, wrong = 0, any_wrong = 0;
    comm_t *comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1024)
        MPI_Abort(MPI_COMM_WORLD, 2);

    /* Collective over MPI_COMM_WORLD; every rank keeps its MPI rank. */
    if (comm_init_mpi(&comm, MPI_COMM_WORLD, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi: %s\n", rank, comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    /* allreduce: rank r gives (r + 1) * (i % 50); small integers, exact in f32. */
    for (int i = 0; i < N; i++)
        x[i] = (float)((rank + 1) * (i % 50));
    if (comm_allreduce(comm, x, sum, N, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_allreduce: %s\n", rank, comm_last_error(comm));
        wrong = 1;
    }
    float ranks_sum = (float)(size * (size + 1) / 2);
    for (int i = 0; i < N && !wrong; i++)
        wrong |= sum[i] != ranks_sum * (float)(i % 50);

    /* allgather: every rank's own rank number lands at its place on every rank. */
    if (comm_allgather(comm, &rank, ranks, 1, COMM_I32, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_allgather: %s\n", rank, comm_last_error(comm));
        wrong = 1;
    }
    for (int r = 0; r < size && !wrong; r++)
        wrong |= ranks[r] != r;

    printf("rank %d of %d (%s): ", rank, size, comm_transport_name(comm));
    comm_destroy(comm); /* before MPI_Finalize */
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    printf("%s\n", any_wrong ? "WRONG results" : "allreduce and allgather right");
    MPI_Finalize();
    return any_wrong;
}
