/* SPDX-License-Identifier: MIT */
/*
 * The README's comm_split / comm_init_all example: four thread ranks made by one call;
 * each splits off a communicator of its parity and sums its world rank over it.
 */
#include <arcomm.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#define NRANKS 4

static void *rank_main(void *arg)
{
    comm_t *world = arg, *half;
    int rank = comm_rank(world);
    /* Even and odd ranks part ways; key -rank reverses their order in the new one. */
    comm_status_t st = comm_split(world, rank % 2, -rank, &half);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(world));
        return (void *)1;
    }
    double x = rank, sum = -1;
    st = comm_allreduce(half, &x, &sum, 1, COMM_F64, COMM_SUM, NULL);
    /* Half 0 holds world ranks 0 and 2, half 1 ranks 1 and 3; rank 2 comes first. */
    int want_rank = rank < 2 ? 1 : 0;
    double want_sum = rank % 2 == 0 ? 2 : 4;
    bool ok =
        st == COMM_OK && comm_size(half) == 2 && comm_rank(half) == want_rank && sum == want_sum;
    printf("world rank %d: rank %d of %d in half %d, sum %.0f%s\n", rank, comm_rank(half),
           comm_size(half), rank % 2, sum, ok ? "" : " (WRONG)");
    comm_destroy(world); /* the half outlives the world */
    st = ok ? comm_barrier(half) : COMM_ERR_INVALID;
    comm_destroy(half);
    return st == COMM_OK ? NULL : (void *)1;
}

int main(void)
{
    comm_t *comms[NRANKS];
    /* Ranks 0..3 on the host (cfg NULL: the defaults), made concurrently. */
    if (comm_init_all(comms, NRANKS, NULL, NULL) != COMM_OK) {
        fprintf(stderr, "comm_init_all: %s\n", comm_last_error(NULL));
        return 1;
    }
    pthread_t t[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        pthread_create(&t[r], NULL, rank_main, comms[r]);
    long failed = 0;
    for (int r = 0; r < NRANKS; r++) {
        void *ret;
        pthread_join(t[r], &ret);
        failed += ret != NULL;
    }
    return failed ? 1 : 0;
}
