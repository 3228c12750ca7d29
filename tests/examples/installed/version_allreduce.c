/* SPDX-License-Identifier: MIT */
/*
 * A program built against an installed arcomm (pkg-config or find_package): checks that
 * comm_get_version matches the header it was compiled with and that two thread ranks
 * sum a vector correctly.  Prints "ok VERSION" and exits 0.
 */
#include <arcomm.h>
#include <pthread.h>
#include <stdio.h>

#define N 4096

static comm_id_t id;

static void *rank_main(void *arg)
{
    int rank = (int)(long)arg;
    comm_config_t cfg;
    comm_t *comm;
    static float x[2][N], sum[2][N];
    long wrong = 0;

    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = rank;
    cfg.id = id;
    if (comm_init(&comm, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        return (void *)1;
    }
    for (int i = 0; i < N; i++)
        x[rank][i] = (float)((rank + 1) * (i % 97)); /* rank 0: i % 97, rank 1: twice that */
    if (comm_allreduce(comm, x[rank], sum[rank], N, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_allreduce: %s\n", rank, comm_last_error(comm));
        comm_destroy(comm);
        return (void *)1;
    }
    for (int i = 0; i < N; i++)
        wrong += sum[rank][i] != 3.0f * (float)(i % 97);
    if (wrong)
        fprintf(stderr, "rank %d: %ld of %d sums wrong\n", rank, wrong, N);
    comm_destroy(comm);
    return (void *)(wrong ? 1L : 0L);
}

int main(void)
{
    int major = -1, minor = -1, patch = -1;
    pthread_t t[2];
    long failed = 0;

    comm_get_version(&major, &minor, &patch);
    comm_get_version(NULL, NULL, NULL); /* any part may be left out */
    if (major != ARCOMM_VERSION_MAJOR || minor != ARCOMM_VERSION_MINOR ||
        patch != ARCOMM_VERSION_PATCH) {
        fprintf(stderr, "library version %d.%d.%d, header %d.%d.%d\n", major, minor, patch,
                ARCOMM_VERSION_MAJOR, ARCOMM_VERSION_MINOR, ARCOMM_VERSION_PATCH);
        return 1;
    }
    if (comm_id_new(&id) != COMM_OK) {
        fprintf(stderr, "comm_id_new: %s\n", comm_last_error(NULL));
        return 1;
    }
    for (long r = 0; r < 2; r++)
        if (pthread_create(&t[r], NULL, rank_main, (void *)r) != 0)
            return 1;
    for (int r = 0; r < 2; r++) {
        void *ret;
        pthread_join(t[r], &ret);
        failed += ret != NULL;
    }
    if (failed)
        return 1;
    printf("ok %d.%d.%d\n", major, minor, patch);
    return 0;
}
