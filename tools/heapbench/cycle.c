/* SPDX-License-Identifier: MIT */
/*
 * heapbench-cycle SIZE ITERS: malloc(SIZE), write every byte, free, ITERS times (the
 * cost of a large temporary); prints the mean time of one cycle.  tools/heap-bench.sh
 * runs it with and without the shared heap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: heapbench-cycle SIZE ITERS\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 0);
    long iters = strtol(argv[2], NULL, 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < iters; i++) {
        char *p = malloc(n);
        if (p == NULL)
            return 1;
        memset(p, (int)i, n);
        /* The compiler must not drop the block (the build passes -fno-builtin too). */
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("cycle of %zu bytes: %.2f us\n", n, s / (double)iters * 1e6);
    return 0;
}
