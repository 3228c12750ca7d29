/* SPDX-License-Identifier: MIT */
/*
 * mpi_unmodified: a plain MPI program, with nothing of arcomm in it.  Run with
 * libarcomm_pmpi.so preloaded, its MPI_Allreduce, MPI_Bcast and MPI_Allgather on ranks
 * of one host are served by arcomm's shared memory; every other MPI call goes to MPI
 * unchanged.  The program checks its results either way and exits 0 when they are
 * right; ARCOMM_LOG_LEVEL=info makes the library report, at MPI_Finalize, how many
 * calls arcomm served.
 *
 *   mpicc mpi_unmodified.c -o mpi_unmodified
 *   mpirun -n 2 -x LD_PRELOAD=<libdir>/libarcomm_pmpi.so -x ARCOMM_LOG_LEVEL=info \
 *       ./mpi_unmodified
 *   prints "rank R of N: allreduce, bcast and allgather right" on every rank, and
 *   "arcomm info: pmpi: rank R: report: served by arcomm allreduce=4 reduce=0 bcast=3
 *   allgather=3 ..." (the last MPI_Allreduce is the ranks agreeing on the verdict)
 */
#include <mpi.h>
#include <stdio.h>

#define N     8192 /* doubles: 64 KiB */
#define CALLS 3

int main(int argc, char **argv)
{
    static double x[N], sum[N], table[N];
    static int gathered[1024];
    int rank, size, wrong = 0, any_wrong = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1024)
        MPI_Abort(MPI_COMM_WORLD, 2);

    for (int call = 0; call < CALLS; call++) {
        /* Sum: rank r gives (r + 1) * i + call. */
        for (int i = 0; i < N; i++)
            x[i] = (double)(rank + 1) * i + call;
        MPI_Allreduce(x, sum, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            wrong |= sum[i] != (double)size * (size + 1) / 2 * i + (double)size * call;

        /* Broadcast: rank 0's table reaches everyone. */
        for (int i = 0; i < N; i++)
            table[i] = rank == 0 ? 0.5 * i + call : -1.0;
        MPI_Bcast(table, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            wrong |= table[i] != 0.5 * i + call;

        /* Allgather: each rank's number at its place. */
        int mine = 10 * rank + call;
        MPI_Allgather(&mine, 1, MPI_INT, gathered, 1, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            wrong |= gathered[r] != 10 * r + call;
    }

    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    printf("rank %d of %d: %s\n", rank, size,
           any_wrong ? "WRONG results" : "allreduce, bcast and allgather right");
    MPI_Finalize();
    return any_wrong;
}
