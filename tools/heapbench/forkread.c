/* SPDX-License-Identifier: MIT */
/*
 * heapbench-forkread BYTES CHILDREN [EXPORTED]: allocates BYTES in blocks of 32 MiB and
 * writes them, forks CHILDREN children that each read all of it (a sum of every 8-byte
 * word, checked against the parent's), and waits for them; prints the time of the forks
 * and of the whole (a trainer's data-loader workers, a server's pre-forked workers).
 * Under the shared heap, the first EXPORTED bytes are marked as handed to collectives
 * (arcomm_heap_share, as libarcomm does), which a fork copies for each child.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK ((size_t)32 << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t sum(uint64_t **b, size_t nb)
{
    uint64_t s = 0;
    for (size_t i = 0; i < nb; i++)
        for (size_t w = 0; w < BLOCK / 8; w++)
            s += b[i][w];
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: heapbench-forkread BYTES CHILDREN [EXPORTED]\n");
        return 2;
    }
    size_t nb = (size_t)(strtoull(argv[1], NULL, 0) / BLOCK);
    int nc = atoi(argv[2]);
    size_t ne = argc == 4 ? (size_t)(strtoull(argv[3], NULL, 0) / BLOCK) : 0;
    int (*share)(const void *, uint64_t, uint64_t *) =
        (int (*)(const void *, uint64_t, uint64_t *))dlsym(RTLD_DEFAULT, "arcomm_heap_share");
    uint64_t **b = malloc(nb * sizeof(*b));
    for (size_t i = 0; i < nb; i++) {
        b[i] = malloc(BLOCK);
        if (b[i] == NULL)
            return 1;
        for (size_t w = 0; w < BLOCK / 8; w++)
            b[i][w] = i * 1000003u + w;
    }
    for (size_t i = 0; i < ne && i < nb && share != NULL; i++) {
        uint64_t off;
        share(b[i], BLOCK, &off);
    }
    uint64_t want = sum(b, nb);
    double t0 = now(), forks = 0;
    pid_t pid[64];
    for (int c = 0; c < nc && c < 64; c++) {
        double f0 = now();
        pid[c] = fork();
        if (pid[c] == 0)
            _exit(sum(b, nb) == want ? 0 : 1);
        forks += now() - f0;
    }
    int bad = 0;
    for (int c = 0; c < nc && c < 64; c++) {
        int st;
        waitpid(pid[c], &st, 0);
        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    printf("fork x%d of %zu MiB: forks %.3f s, all %.3f s%s\n", nc, nb * (BLOCK >> 20), forks,
           now() - t0, bad ? " (A CHILD SAW WRONG DATA)" : "");
    return bad != 0;
}
