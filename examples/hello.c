/* SPDX-License-Identifier: MIT */
/* hello: every rank arrun starts adds its numbers into one sum (the README's program).
 *   cc hello.c $(pkg-config --cflags --libs arcomm) -o hello && arrun -n 2 ./hello */
#include <arcomm.h>
#include <stdio.h>

int main(void)
{
    comm_t *comm;
    if (comm_init_env(&comm) != COMM_OK) { /* rank, size and id come from arrun */
        fprintf(stderr, "%s\n", comm_last_error(NULL));
        return 1;
    }
    int rank = comm_rank(comm), n = comm_size(comm), wrong = 0;
    float x[1024], sum[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = (float)(rank + 1) * i; /* rank r gives (r + 1) * i */
    if (comm_allreduce(comm, x, sum, 1024, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
        fprintf(stderr, "%s\n", comm_last_error(comm));
        return 1;
    }
    for (int i = 0; i < 1024; i++)
        wrong += sum[i] != (float)(n * (n + 1) / 2 * i); /* same bits on every rank */
    printf("rank %d of %d: sum[1023] = %.0f, %d wrong\n", rank, n, sum[1023], wrong);
    comm_destroy(comm);
    return wrong != 0;
}
