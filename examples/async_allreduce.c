/* SPDX-License-Identifier: MIT */
/*
 * async_allreduce: overlap an allreduce with computation.  Each rank starts the sum of
 * its gradient-like buffer with comm_iallreduce, computes something else while the
 * library owns the buffers, then waits for the sum with comm_wait.  A second round
 * issues two calls at once and completes both with comm_wait_all.
 *
 *   cc async_allreduce.c $(pkg-config --cflags --libs arcomm) -o async_allreduce
 *   arrun -n 2 ./async_allreduce     prints "rank R of 2: grad[9999] = 29997, norm ok"
 */
#include <arcomm.h>
#include <stdio.h>

#define N 10000

int main(void)
{
    static float grad[N], sum[N];
    comm_t *comm;
    comm_request_t *req, *reqs[2];
    int wrong = 0;

    if (comm_init_env(&comm) != COMM_OK) {
        fprintf(stderr, "%s\n", comm_last_error(NULL));
        return 1;
    }
    int rank = comm_rank(comm), size = comm_size(comm);

    /* Rank r gives (r + 1) * i: the sum is (1 + ... + size) * i. */
    for (int i = 0; i < N; i++)
        grad[i] = (float)(rank + 1) * (float)i;
    if (comm_iallreduce(comm, grad, sum, N, COMM_F32, COMM_SUM, &req) != COMM_OK)
        goto fail;
    /* grad and sum belong to the library until comm_wait returns: compute on other data. */
    double work = 0;
    for (int i = 1; i <= 100000; i++)
        work += 1.0 / ((double)i * i);
    if (comm_wait(&req) != COMM_OK)
        goto fail;
    for (int i = 0; i < N; i++)
        wrong += sum[i] != (float)size * (size + 1) / 2 * (float)i;

    /* Two calls in flight at once, completed in one wait; they run in issue order. */
    float norm = (float)(rank + 1), largest = (float)rank;
    if (comm_iallreduce(comm, &norm, &norm, 1, COMM_F32, COMM_SUM, &reqs[0]) != COMM_OK ||
        comm_iallreduce(comm, &largest, &largest, 1, COMM_F32, COMM_MAX, &reqs[1]) != COMM_OK ||
        comm_wait_all(2, reqs) != COMM_OK)
        goto fail;
    wrong += norm != (float)size * (size + 1) / 2 || largest != (float)(size - 1);
    wrong += work < 1.644 || work > 1.645; /* pi^2 / 6 */

    printf("rank %d of %d: grad[%d] = %.0f, norm %s\n", rank, size, N - 1, sum[N - 1],
           wrong ? "WRONG" : "ok");
    comm_destroy(comm);
    return wrong != 0;

fail:
    fprintf(stderr, "rank %d: %s %s\n", rank, comm_last_error(comm), comm_last_error(NULL));
    comm_destroy(comm);
    return 1;
}
