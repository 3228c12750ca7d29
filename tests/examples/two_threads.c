/* SPDX-License-Identifier: MIT */
/* Two thread ranks sum a vector of floats: the README's example, built and run as a test. */
#include <arcomm.h>
#include <pthread.h>
#include <stdio.h>

#define N 1000

static comm_id_t id; /* one id names the communicator; every rank passes it */

static void *rank_main(void *arg)
{
    int rank = (int)(long)arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = rank;
    cfg.id = id;

    comm_t *comm;
    comm_status_t st = comm_init(&comm, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "comm_init: %s\n", comm_last_error(NULL));
        return (void *)1;
    }
    float x[N], sum[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(rank + 1) * (float)i; /* rank 0: i, rank 1: 2i */
    st = comm_allreduce(comm, x, sum, N, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(comm));
        comm_destroy(comm);
        return (void *)1;
    }
    long bad = 0;
    for (int i = 0; i < N; i++)
        bad += sum[i] != 3.0f * (float)i;
    printf("rank %d: sum[%d] = %.1f, %ld wrong\n", rank, N - 1, sum[N - 1], bad);
    comm_destroy(comm);
    return (void *)bad;
}

int main(void)
{
    if (comm_id_new(&id) != COMM_OK)
        return 1;
    pthread_t t[2];
    for (long r = 0; r < 2; r++)
        pthread_create(&t[r], NULL, rank_main, (void *)r);
    long failed = 0;
    for (int r = 0; r < 2; r++) {
        void *ret;
        pthread_join(t[r], &ret);
        failed += ret != NULL;
    }
    return failed ? 1 : 0;
}
