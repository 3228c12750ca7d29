/* SPDX-License-Identifier: MIT */
/*
 * pmpi-progress: how fast MPI's pending operations move while the ranks wait in a
 * collective, the MPI progress a served call's waits must drive (docs/pmpi.md,
 * "Waiting").  Two patterns, ROUNDS rounds each, the slowest rank's time per round:
 *  - ibcast: every rank starts a BYTES MPI_Ibcast from rank 0; the last rank waits for it
 *    before an MPI_Barrier, the others enter the barrier first and wait for it after;
 *  - isend: rank 0 leaves a BYTES MPI_Isend to the last rank pending across an
 *    MPI_Barrier, which the last rank enters once its MPI_Recv completed.
 * Prints, per pattern, the median, the fastest and the slowest round in ms.  Run it with
 * and without LD_PRELOAD=libarcomm_pmpi.so (without: Open MPI alone), for example with
 * btl_vader_single_copy_mechanism none, where the sender pushes the fragments:
 *
 *   mpirun -np 6 --mca btl_vader_single_copy_mechanism none [-x LD_PRELOAD=...] \
 *       pmpi-progress [BYTES [ROUNDS]]
 *
 * Not installed.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One round of pattern p (0 ibcast, 1 isend) on buf; the slowest rank's seconds. */
static double round_of(int p, char *buf, int bytes, int rank, int last)
{
    MPI_Request req;
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (p == 0) {
        MPI_Ibcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        if (rank == last)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank != last)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (rank == 0) {
        MPI_Isend(buf, bytes, MPI_BYTE, last, 7, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        if (rank == last)
            MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0, slowest;
    PMPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bytes = argc > 1 ? atoi(argv[1]) : 4 << 20, rounds = argc > 2 ? atoi(argv[2]) : 20;
    if (size < 2 || bytes < 1 || rounds < 1) {
        if (rank == 0)
            fprintf(stderr, "pmpi-progress: 2 or more ranks, BYTES > 0, ROUNDS > 0\n");
        MPI_Finalize();
        return 2;
    }
    char *buf = malloc((size_t)bytes);
    double *t = malloc((size_t)rounds * sizeof(*t));
    memset(buf, rank, (size_t)bytes);
    /* The library's communicator is made by a first call every rank makes at once. */
    MPI_Barrier(MPI_COMM_WORLD);
    static const char *const names[2] = {"ibcast before a barrier", "isend across a barrier"};
    for (int p = 0; p < 2; p++) {
        for (int r = 0; r < rounds; r++)
            t[r] = round_of(p, buf, bytes, rank, size - 1);
        qsort(t, (size_t)rounds, sizeof(*t), cmp);
        if (rank == 0)
            printf("%s, %d ranks, %d bytes: median %.2f ms, fastest %.2f, slowest %.2f\n", names[p],
                   size, bytes, 1e3 * t[rounds / 2], 1e3 * t[0], 1e3 * t[rounds - 1]);
    }
    free(t);
    free(buf);
    MPI_Finalize();
    return 0;
}
