/* SPDX-License-Identifier: MIT */
/*
 * hello_threads: two thread ranks of one process sum a vector with comm_allreduce.
 * Every rank joins the communicator named by one id, gives its own numbers and gets
 * the sum over all ranks; each checks every element and the program exits 0 when all
 * are right.
 *
 *   cc hello_threads.c $(pkg-config --cflags --libs arcomm) -o hello_threads
 *   ./hello_threads          prints "rank 0: sum[999] = 2997, all 1000 right" (and rank 1)
 */
#include <arcomm.h>
#include <pthread.h>
#include <stdio.h>

#define N 1000

static comm_id_t id; /* names the communicator: every rank passes the same one */

static void *rank_main(void *arg)
{
    int rank = (int)(long)arg, wrong = 0;
    float x[N], sum[N] = {0};
    comm_config_t cfg;
    comm_t *comm;

    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = rank;
    cfg.id = id;
    if (comm_init(&comm, &cfg) != COMM_OK) { /* returns once both ranks joined */
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(NULL));
        return (void *)1;
    }
    for (int i = 0; i < N; i++)
        x[i] = (float)((rank + 1) * i); /* rank 0 gives i, rank 1 gives 2i */
    if (comm_allreduce(comm, x, sum, N, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(comm));
        wrong = N;
    }
    for (int i = 0; i < N && !wrong; i++)
        wrong += sum[i] != (float)(3 * i);
    printf("rank %d: sum[%d] = %.0f, %s\n", rank, N - 1, sum[N - 1],
           wrong ? "WRONG" : "all 1000 right");
    comm_destroy(comm);
    return (void *)(long)wrong;
}

int main(void)
{
    pthread_t t[2];
    void *wrong[2];

    if (comm_id_new(&id) != COMM_OK)
        return 1;
    for (long r = 0; r < 2; r++)
        pthread_create(&t[r], NULL, rank_main, (void *)r);
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], &wrong[r]);
    return wrong[0] || wrong[1];
}
