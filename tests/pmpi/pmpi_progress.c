/* SPDX-License-Identifier: MIT */
/*
 * MPI requires that a process blocked in an MPI call keeps its other operations
 * progressing.  A served call's waits must therefore drive MPI's progress engine too,
 * or a program whose pending operations need the waiting ranks hangs:
 *  - every rank starts a 4 MiB MPI_Ibcast; the last rank waits for it before an
 *    MPI_Barrier, the others enter the barrier first (the broadcast's tree needs them
 *    to forward it, from inside the barrier);
 *  - rank 0 leaves a 4 MiB MPI_Isend to the last rank pending across an MPI_Barrier,
 *    which the last rank enters only once its MPI_Recv completed (without a single copy,
 *    btl_vader_single_copy_mechanism none, the sender must push the fragments);
 *  - the same with MPI_Allreduce and MPI_Bcast of 1 MiB in place of the barrier.
 * Every received byte is checked.  Open MPI alone finishes each in well under a second.
 */
#include "pmpi_test.h"

#include <stdlib.h>

#define BIG (4u << 20)

static void fill(unsigned char *buf, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(t_next(&s) >> 56);
}

static size_t mismatches(const unsigned char *buf, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += buf[i] != (unsigned char)(t_next(&s) >> 56);
    return bad;
}

/* The collective the early ranks wait in (served): 0 barrier, 1 allreduce, 2 bcast. */
static void served_call(int kind, int round)
{
    static int in[1 << 18], out[1 << 18];
    int n = 1 << 18, rc;
    if (kind == 0) {
        rc = MPI_Barrier(MPI_COMM_WORLD);
        SERVED(T_BARRIER);
    } else if (kind == 1) {
        for (int i = 0; i < n; i++)
            in[i] = (t_rank + 1) * (i % 7 + round);
        rc = MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        SERVED(T_ALLREDUCE);
        for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
            if (out[i] != t_size * (t_size + 1) / 2 * (i % 7 + round)) {
                CHECK(0, "allreduce element %d is %d", i, out[i]);
                break;
            }
    } else {
        for (int i = 0; i < n; i++)
            out[i] = t_rank == 0 ? i * 3 + round : -1;
        rc = MPI_Bcast(out, n, MPI_INT, 0, MPI_COMM_WORLD);
        SERVED(T_BCAST);
        for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
            if (out[i] != i * 3 + round) {
                CHECK(0, "bcast element %d is %d", i, out[i]);
                break;
            }
    }
    CHECK(rc == MPI_SUCCESS, "served call %d: %d", kind, rc);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    unsigned char *buf = malloc(BIG);
    int last = t_size - 1;
    /* The library's communicator is made by a first call every rank makes at once. */
    served_call(0, 0);

    for (int kind = 0; kind < 3; kind++) {
        /* A pending MPI_Ibcast the early ranks must forward from inside the served call. */
        uint64_t seed = 1000u + (uint64_t)kind;
        if (t_rank == 0)
            fill(buf, BIG, seed);
        else
            memset(buf, 0, BIG);
        MPI_Request req;
        MPI_Ibcast(buf, (int)BIG, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        if (t_rank == last)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        served_call(kind, kind);
        if (t_rank != last)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK(mismatches(buf, BIG, seed) == 0, "MPI_Ibcast before served call %d: wrong bytes",
              kind);

        /* A pending MPI_Isend across the served call, received before it. */
        if (t_size > 1) {
            seed = 2000u + (uint64_t)kind;
            if (t_rank == 0) {
                fill(buf, BIG, seed);
                MPI_Isend(buf, (int)BIG, MPI_BYTE, last, 5, MPI_COMM_WORLD, &req);
                served_call(kind, kind + 10);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
            } else if (t_rank == last) {
                memset(buf, 0, BIG);
                MPI_Recv(buf, (int)BIG, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                CHECK(mismatches(buf, BIG, seed) == 0,
                      "MPI_Isend across served call %d: wrong bytes", kind);
                served_call(kind, kind + 10);
            } else {
                served_call(kind, kind + 10);
            }
        }
    }
    free(buf);
    int rc = t_finish();
    MPI_Finalize();
    return rc;
}
