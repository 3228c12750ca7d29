/* SPDX-License-Identifier: MIT */
/*
 * pmpi-overhead: the cost libarcomm_pmpi adds to a call over arcomm's own API, measured
 * in one process: the same collective, size and buffers, timed in alternating blocks
 * through MPI_* (served by the preloaded library) and through comm_* on a communicator
 * of the program's own over the same ranks.  Per size: the median over blocks of the
 * slowest rank's time per call for each, and the difference (the interposition's own
 * cost: the communicator lookup, the datatype and op mapping, the counters).
 *
 *   mpirun -np 2 -x LD_PRELOAD=libarcomm_pmpi.so pmpi-overhead [MIN [MAX [FACTOR]]]
 *
 * Without the library the MPI column is Open MPI's own time.  Not installed.
 */
#include <arcomm.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 21

enum coll { ALLREDUCE, BCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, NCOLL };
static const char *const names[NCOLL] = {"allreduce", "broadcast",      "reduce",
                                         "allgather", "reduce_scatter", "alltoall"};

static int rank, size;
static comm_t *arc;
static float *sendbuf, *recvbuf;

/* One call of coll on n floats per rank (nranks * n where the collective has blocks). */
static int call(enum coll c, int via_mpi, size_t n)
{
    int in = (int)n;
    if (via_mpi) {
        switch (c) {
        case ALLREDUCE:
            return MPI_Allreduce(sendbuf, recvbuf, in, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        case BCAST:
            return MPI_Bcast(recvbuf, in, MPI_FLOAT, 0, MPI_COMM_WORLD);
        case REDUCE:
            return MPI_Reduce(sendbuf, recvbuf, in, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        case ALLGATHER:
            return MPI_Allgather(sendbuf, in, MPI_FLOAT, recvbuf, in, MPI_FLOAT, MPI_COMM_WORLD);
        case REDUCE_SCATTER:
            return MPI_Reduce_scatter_block(sendbuf, recvbuf, in, MPI_FLOAT, MPI_SUM,
                                            MPI_COMM_WORLD);
        default:
            return MPI_Alltoall(sendbuf, in, MPI_FLOAT, recvbuf, in, MPI_FLOAT, MPI_COMM_WORLD);
        }
    }
    switch (c) {
    case ALLREDUCE:
        return comm_allreduce(arc, sendbuf, recvbuf, n, COMM_F32, COMM_SUM, NULL);
    case BCAST:
        return comm_broadcast(arc, recvbuf, recvbuf, n, COMM_F32, 0, NULL);
    case REDUCE:
        return comm_reduce(arc, sendbuf, rank == 0 ? recvbuf : NULL, n, COMM_F32, COMM_SUM, 0,
                           NULL);
    case ALLGATHER:
        return comm_allgather(arc, sendbuf, recvbuf, n, COMM_F32, NULL);
    case REDUCE_SCATTER:
        return comm_reduce_scatter(arc, sendbuf, recvbuf, n, COMM_F32, COMM_SUM, NULL);
    default:
        return comm_alltoall(arc, sendbuf, recvbuf, n, COMM_F32, NULL);
    }
}

/* The slowest rank's time per call of one block of iters calls, in microseconds. */
static double block(enum coll c, int via_mpi, size_t n, int iters)
{
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = PMPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (call(c, via_mpi, n) != 0) {
            fprintf(stderr, "rank %d: %s via %s failed\n", rank, names[c],
                    via_mpi ? "MPI" : "arcomm");
            PMPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double t = (PMPI_Wtime() - t0) / iters * 1e6, worst;
    PMPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t min = argc > 1 ? strtoull(argv[1], NULL, 0) : 4;
    size_t max = argc > 2 ? strtoull(argv[2], NULL, 0) : 64u << 20;
    size_t factor = argc > 3 ? strtoull(argv[3], NULL, 0) : 4;

    comm_config_t cfg;
    comm_id_t id;
    if (rank == 0 && comm_id_new(&id) != COMM_OK)
        PMPI_Abort(MPI_COMM_WORLD, 1);
    PMPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    comm_config_init(&cfg);
    cfg.nranks = size;
    cfg.rank = rank;
    cfg.id = id;
    if (comm_init(&arc, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        PMPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t cap = max / sizeof(float) * (size_t)size + 16;
    sendbuf = malloc(cap * sizeof(float));
    recvbuf = malloc(cap * sizeof(float));
    for (size_t i = 0; i < cap; i++)
        sendbuf[i] = recvbuf[i] = (float)((i * 7 + (size_t)rank) % 13);
    if (rank == 0)
        printf("coll,size,mpi_us,arcomm_us,diff_us\n");
    for (int c = 0; c < NCOLL; c++) {
        for (size_t bytes = min; bytes <= max; bytes *= factor) {
            /* Sizes as arbench counts them: the per-rank buffer for the rooted and
             * reducing calls, the whole receive (allgather) or send (reduce_scatter,
             * alltoall) buffer for the others. */
            size_t n = bytes / sizeof(float);
            if (c == ALLGATHER || c == REDUCE_SCATTER || c == ALLTOALL)
                n /= (size_t)size;
            if (n == 0)
                continue;
            double probe = block(c, 0, n, 3);
            int iters = probe > 0 ? (int)(2000.0 / probe) : 1000;
            iters = iters < 1 ? 1 : iters > 2000 ? 2000 : iters;
            block(c, 1, n, iters); /* the library's communicator is made here */
            double tm[BLOCKS], ta[BLOCKS], d[BLOCKS];
            for (int b = 0; b < BLOCKS; b++) {
                tm[b] = block(c, b % 2, n, iters); /* alternate which goes first */
                ta[b] = block(c, !(b % 2), n, iters);
                if (b % 2 == 0) {
                    double x = tm[b];
                    tm[b] = ta[b];
                    ta[b] = x;
                }
                d[b] = tm[b] - ta[b];
            }
            qsort(tm, BLOCKS, sizeof(double), cmp);
            qsort(ta, BLOCKS, sizeof(double), cmp);
            qsort(d, BLOCKS, sizeof(double), cmp);
            if (rank == 0)
                printf("%s,%zu,%.3f,%.3f,%.3f\n", names[c], bytes, tm[BLOCKS / 2], ta[BLOCKS / 2],
                       d[BLOCKS / 2]);
            fflush(stdout);
        }
    }
    comm_destroy(arc);
    free(sendbuf);
    free(recvbuf);
    MPI_Finalize();
    return 0;
}
