/* SPDX-License-Identifier: MIT */
/*
 * hello_arrun: process ranks started by arrun.  arrun gives every process its rank,
 * the number of ranks and the job's id in the environment (ARCOMM_RANK, ARCOMM_SIZE,
 * ARCOMM_ID), so comm_init_env() is all a rank needs to join.  The ranks sum a vector,
 * then rank 0 broadcasts a message; each rank checks what it got and exits 0 when all
 * of it is right (arrun exits with the first failing rank's status).
 *
 *   cc hello_arrun.c $(pkg-config --cflags --libs arcomm) -o hello_arrun
 *   arrun -n 4 ./hello_arrun     prints "rank R of 4: sum[4095] = 40950, message "...", ok"
 */
#include <arcomm.h>
#include <stdio.h>
#include <string.h>

#define N 4096

int main(void)
{
    static double x[N], sum[N];
    char msg[32] = "";
    comm_t *comm;
    int wrong = 0;

    if (comm_init_env(&comm) != COMM_OK) { /* outside arrun: says how to start it */
        fprintf(stderr, "%s\n", comm_last_error(NULL));
        return 1;
    }
    int rank = comm_rank(comm), size = comm_size(comm);

    /* Rank r gives (r + 1) * i: the sum is (1 + 2 + ... + size) * i on every rank. */
    for (int i = 0; i < N; i++)
        x[i] = (double)(rank + 1) * i;
    if (comm_allreduce(comm, x, sum, N, COMM_F64, COMM_SUM, NULL) != COMM_OK)
        goto fail;
    for (int i = 0; i < N; i++)
        wrong += sum[i] != (double)size * (size + 1) / 2 * i;

    /* Rank 0's bytes reach every rank (in place: one buffer for send and receive). */
    if (rank == 0)
        snprintf(msg, sizeof(msg), "hello from rank 0");
    if (comm_broadcast(comm, msg, msg, sizeof(msg), COMM_U8, 0, NULL) != COMM_OK)
        goto fail;
    wrong += strcmp(msg, "hello from rank 0") != 0;

    printf("rank %d of %d: sum[%d] = %.0f, message \"%s\", %s\n", rank, size, N - 1, sum[N - 1],
           msg, wrong ? "WRONG" : "ok");
    comm_destroy(comm);
    return wrong != 0;

fail:
    fprintf(stderr, "rank %d: %s\n", rank, comm_last_error(comm));
    comm_destroy(comm);
    return 1;
}
