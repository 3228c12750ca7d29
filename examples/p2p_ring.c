/* SPDX-License-Identifier: MIT */
/*
 * p2p_ring: sends and receives between process ranks started by arrun.  First a
 * pipeline: rank 0 makes a vector, every rank adds its rank number to it and passes it
 * to the next (plain comm_recv, then comm_send).  Then a ring exchange: every rank sends
 * its block to the right and receives its left neighbour's, both calls in one group,
 * which is what keeps the ring from waiting on itself.  Each rank checks what it got and
 * exits 0 when all of it is right.
 *
 *   cc p2p_ring.c $(pkg-config --cflags --libs arcomm) -o p2p_ring
 *   arrun -n 4 ./p2p_ring     prints "rank R of 4: pipeline and ring right"
 */
#include <arcomm.h>
#include <stdio.h>

#define N (1 << 18) /* 1 MiB of floats: large enough to be read in place */

int main(void)
{
    static float v[N], mine[N], left[N];
    comm_t *comm;
    int wrong = 0;

    if (comm_init_env(&comm) != COMM_OK) {
        fprintf(stderr, "%s\n", comm_last_error(NULL));
        return 1;
    }
    int rank = comm_rank(comm), size = comm_size(comm);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* The pipeline: rank r receives from r - 1, adds r, sends to r + 1. */
    if (rank == 0) {
        for (int i = 0; i < N; i++)
            v[i] = (float)i;
    } else if (comm_recv(comm, v, N, COMM_F32, prev, NULL) != COMM_OK) {
        goto fail;
    }
    for (int i = 0; i < N; i++)
        v[i] += (float)rank;
    if (rank + 1 < size && comm_send(comm, v, N, COMM_F32, next, NULL) != COMM_OK)
        goto fail;
    if (rank + 1 == size) /* the last stage holds i + (0 + 1 + ... + size - 1) */
        for (int i = 0; i < N; i++)
            wrong += v[i] != (float)i + (float)(size * (size - 1) / 2);

    /* The ring: everyone sends right and receives from the left at once. */
    for (int i = 0; i < N; i++)
        mine[i] = (float)(rank * 1000 + i % 1000);
    comm_group_start();
    comm_send(comm, mine, N, COMM_F32, next, NULL);
    comm_recv(comm, left, N, COMM_F32, prev, NULL);
    if (comm_group_end() != COMM_OK)
        goto fail;
    for (int i = 0; i < N; i++)
        wrong += left[i] != (float)(prev * 1000 + i % 1000);

    printf("rank %d of %d: pipeline and ring %s\n", rank, size, wrong ? "WRONG" : "right");
    comm_destroy(comm);
    return wrong != 0;

fail:
    fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(comm));
    comm_destroy(comm);
    return 1;
}
