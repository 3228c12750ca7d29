/* SPDX-License-Identifier: MIT */
/*
 * heapbench-threads THREADS ITERS: each thread keeps 8 blocks of 64 KiB to 1 MiB (random
 * sizes), and ITERS times frees one and allocates another, writing one byte per page of
 * it (a server's per-request buffers); prints the wall time.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long iters;

static void *run(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    char *k[8] = {NULL};
    for (long i = 0; i < iters; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int j = (int)(s % 8);
        free(k[j]);
        size_t n = (64u << 10) + (size_t)((s >> 8) % (960u << 10));
        k[j] = malloc(n);
        if (k[j] == NULL)
            abort();
        for (size_t o = 0; o < n; o += 4096)
            k[j][o] = (char)o;
    }
    for (int j = 0; j < 8; j++)
        free(k[j]);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: heapbench-threads THREADS ITERS\n");
        return 2;
    }
    int nt = atoi(argv[1]);
    iters = strtol(argv[2], NULL, 0);
    pthread_t t[256];
    if (nt < 1 || nt > 256)
        return 2;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < nt; i++)
        pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < nt; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d threads: %.3f s\n", nt,
           (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9);
    return 0;
}
