/* SPDX-License-Identifier: MIT */
/*
 * One rank of a process-rank allreduce, started by arrun: comm_init_env, an f32 SUM of
 * 1000 random elements, every element checked against a float64 reference that each
 * rank computes from every rank's seed, and every rank's result checked bit-identical
 * to the others' (MAX and MIN of the results over all ranks must both equal it).
 * Exits non-zero on any error; rank 0 prints "arrun_allreduce: ok" and the job id.
 */
#include <arcomm.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1000

/* splitmix64: a rank's data is a pure function of its rank, so every rank can rebuild it. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rank_data(int rank, float *out)
{
    uint64_t state = 0x61726375ull * (uint64_t)(rank + 1);
    for (int i = 0; i < COUNT; i++) /* uniform in [-1, 1), never all zeros */
        out[i] = (float)((double)(next_random(&state) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    return v ? atoi(v) : -1;
}

static int fail(comm_t *comm, int rank, const char *what, comm_status_t st)
{
    fprintf(stderr, "arrun_allreduce: rank %d: %s: %s (%s)\n", rank, what, comm_status_string(st),
            comm_last_error(comm));
    comm_destroy(comm);
    return 1;
}

int main(void)
{
    static float send[COUNT], recv[COUNT], hi[COUNT], lo[COUNT], mine[COUNT];
    static double ref[COUNT], mag[COUNT];
    comm_t *comm = NULL;
    comm_status_t st;
    int rank, size, bad = 0;

    st = comm_init_env(&comm);
    if (st != COMM_OK)
        return fail(NULL, env_int("ARCOMM_RANK"), "comm_init_env", st);
    rank = comm_rank(comm);
    size = comm_size(comm);
    if (rank != env_int("ARCOMM_RANK") || size != env_int("ARCOMM_SIZE")) {
        fprintf(stderr, "arrun_allreduce: rank %d of %d disagrees with the environment\n", rank,
                size);
        comm_destroy(comm);
        return 1;
    }

    rank_data(rank, send);
    for (int i = 0; i < COUNT; i++) /* poison: an element not written stays NaN */
        recv[i] = NAN;
    st = comm_allreduce(comm, send, recv, COUNT, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK)
        return fail(comm, rank, "comm_allreduce", st);

    /* The float64 reference, from every rank's data rebuilt here. */
    for (int r = 0; r < size; r++) {
        rank_data(r, mine);
        for (int i = 0; i < COUNT; i++) {
            ref[i] += mine[i];
            mag[i] += fabs(mine[i]);
        }
    }
    for (int i = 0; i < COUNT; i++) {
        /* f32 sums of `size` terms: at most size-1 roundings, each within eps of the sum. */
        double tol = (double)size * FLT_EPSILON * mag[i];
        if (!(fabs((double)recv[i] - ref[i]) <= tol) && bad++ < 5)
            fprintf(stderr, "arrun_allreduce: rank %d: element %d is %.9g, expected %.9g\n", rank,
                    i, recv[i], ref[i]);
    }

    /* Bit-identical on every rank: the largest and the smallest result are this one. */
    st = comm_allreduce(comm, recv, hi, COUNT, COMM_F32, COMM_MAX, NULL);
    if (st != COMM_OK)
        return fail(comm, rank, "comm_allreduce MAX", st);
    st = comm_allreduce(comm, recv, lo, COUNT, COMM_F32, COMM_MIN, NULL);
    if (st != COMM_OK)
        return fail(comm, rank, "comm_allreduce MIN", st);
    for (int i = 0; i < COUNT; i++) {
        if (memcmp(&hi[i], &recv[i], sizeof(float)) != 0 ||
            memcmp(&lo[i], &recv[i], sizeof(float)) != 0) {
            if (bad++ < 5)
                fprintf(stderr, "arrun_allreduce: rank %d: element %d differs between ranks\n",
                        rank, i);
        }
    }

    st = comm_destroy(comm);
    if (st != COMM_OK) {
        fprintf(stderr, "arrun_allreduce: rank %d: comm_destroy: %s\n", rank,
                comm_status_string(st));
        return 1;
    }
    if (bad) {
        fprintf(stderr, "arrun_allreduce: rank %d: %d bad elements\n", rank, bad);
        return 1;
    }
    if (rank == 0)
        printf("arrun_allreduce: ok (%d ranks, %d f32) id=%s\n", size, COUNT, getenv("ARCOMM_ID"));
    return 0;
}
