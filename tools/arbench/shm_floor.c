/* SPDX-License-Identifier: MIT */
/*
 * shm-floor: what a 2-rank allgather between two processes with private buffers costs
 * on this host when nothing but the data movement is done, the floor that arcomm's
 * host paths are measured against (docs/PERFORMANCE.md).  Two forked processes, one a
 * CPU, one MAP_SHARED mapping; no arrival words, no descriptions, no timeouts, no
 * failure words, no mismatch checks:
 *
 *   small (block <= one chunk)  stage the block in one of two slots, release a flag,
 *                               wait for the peer's flag, copy the peer's block and the
 *                               own block into the output (arcomm's flag path, bare)
 *   large                       the same pipelined in 256 KiB chunks through a ring of
 *                               8 places a rank, a step after producing and after
 *                               consuming each chunk (arcomm's staged path, bare)
 *   sync                        the flag exchange alone
 *
 * Sizes are the whole receive buffer and calls are timed as arbench times them (each
 * call between two clock readings, so the two compare; a reading costs about 0.03 us in
 * a VM).  Every byte of the output is checked once per size.  Not installed: a
 * measurement of this host.
 *   shm-floor [-i ITERS] [-r ROUNDS] -b MIN [-e MAX] [-f FACTOR]   the sizes of arbench
 *                                                -n 2 --coll allgather over the same options
 */
#include "bench_common.h"
#include "bench_report.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_CHUNK     (256u << 10) /* arcomm's COLL_PIPE_CHUNK_BYTES_ALLGATHER */
#define FLOOR_PLACES    8            /* places of a rank's ring, as arcomm's 1 MiB slots give */
#define FLOOR_ROUNDS    5
#define FLOOR_MAX_ITERS 10000 /* timed calls a round at most, as arbench */

/* The shared mapping: a progress word a rank (own line), then each rank's places. */
struct floor_shared {
    _Atomic uint64_t step[2][8]; /* [rank][0]: steps this rank published */
};

struct floor_run {
    struct floor_shared *sh;
    char *places[2]; /* each rank's ring: FLOOR_PLACES places of FLOOR_CHUNK */
    char *send, *recv;
    double *times; /* shared: [rank][FLOOR_MAX_ITERS] the time of each call */
    int me;
    size_t block; /* bytes a rank contributes */
};

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void publish(struct floor_run *r, uint64_t step)
{
    atomic_store_explicit(&r->sh->step[r->me][0], step, memory_order_release);
}

static void wait_peer(const struct floor_run *r, uint64_t step)
{
    /* Spinning, as arcomm's waits do; a host of one CPU (no pinning) yields now and then. */
    for (unsigned n = 1;
         atomic_load_explicit(&r->sh->step[1 - r->me][0], memory_order_acquire) < step; n++)
        if ((n & 0xffff) == 0)
            sched_yield();
}

/* One allgather from step base on: returns the step it ends at. */
static uint64_t floor_allgather(struct floor_run *r, uint64_t base)
{
    size_t rounds = (r->block + FLOOR_CHUNK - 1) / FLOOR_CHUNK;
    char *own = r->recv + (size_t)r->me * r->block,
         *peer = r->recv + (size_t)(1 - r->me) * r->block;

    if (rounds <= 1) {
        /* Two slots alternate: a peer that published call n + 1 has read call n. */
        size_t slot = (size_t)(base % 2) * FLOOR_CHUNK;
        memcpy(r->places[r->me] + slot, r->send, r->block);
        publish(r, base + 1);
        wait_peer(r, base + 1);
        memcpy(peer, r->places[1 - r->me] + slot, r->block);
        memcpy(own, r->send, r->block);
        return base + 1;
    }
    for (size_t k = 0; k < rounds; k++) {
        size_t lo = k * FLOOR_CHUNK,
               len = r->block - lo < FLOOR_CHUNK ? r->block - lo : FLOOR_CHUNK;
        size_t place = k % FLOOR_PLACES * FLOOR_CHUNK;
        if (k >= FLOOR_PLACES)
            wait_peer(r, base + 2 * (k - FLOOR_PLACES) + 2); /* the peer consumed it */
        memcpy(r->places[r->me] + place, r->send + lo, len);
        publish(r, base + 2 * k + 1);
        memcpy(own + lo, r->send + lo, len);
        wait_peer(r, base + 2 * k + 1);
        memcpy(peer + lo, r->places[1 - r->me] + place, len);
        publish(r, base + 2 * k + 2);
    }
    wait_peer(r, base + 2 * rounds); /* the next call may write any place */
    return base + 2 * rounds;
}

static uint64_t floor_sync(struct floor_run *r, uint64_t base)
{
    publish(r, base + 1);
    wait_peer(r, base + 1);
    return base + 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * Timed as arbench times (bench_common.c): back to back, each call between two clock
 * readings, the slower rank's time of each call, the median over the calls; then the
 * median over rounds.  Both ranks run it; rank 0's answer counts.
 */
static double measure(struct floor_run *r, uint64_t *step, long iters, int rounds, bool sync)
{
    double med[FLOOR_ROUNDS * 4];
    double *mine = r->times + (size_t)r->me * FLOOR_MAX_ITERS;
    double *theirs = r->times + (size_t)(1 - r->me) * FLOOR_MAX_ITERS;
    for (int k = 0; k < rounds; k++) {
        for (long i = 0; i < iters / 10 + 1; i++)
            *step = sync ? floor_sync(r, *step) : floor_allgather(r, *step);
        *step = floor_sync(r, *step);
        for (long i = 0; i < iters; i++) {
            double t0 = now_us();
            *step = sync ? floor_sync(r, *step) : floor_allgather(r, *step);
            mine[i] = now_us() - t0;
        }
        *step = floor_sync(r, *step); /* both ranks' times written */
        if (r->me == 0) {
            for (long i = 0; i < iters; i++)
                mine[i] = mine[i] > theirs[i] ? mine[i] : theirs[i];
            qsort(mine, (size_t)iters, sizeof(double), cmp_double);
            med[k] = mine[iters / 2];
        }
        *step = floor_sync(r, *step); /* read before the next round writes them */
    }
    qsort(med, (size_t)rounds, sizeof(double), cmp_double);
    return med[rounds / 2];
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        fprintf(stderr, "shm-floor: rank %d not pinned to CPU %d: %m\n", cpu, cpu);
}

int main(int argc, char **argv)
{
    long iters = 0;
    int rounds = FLOOR_ROUNDS, opt;
    /* The sizes of arbench --coll allgather -n 2 over the same -b, -e and -f. */
    struct bench_opts o;
    bench_opts_init(&o);
    o.coll = BENCH_ALLGATHER;
    o.nranks = 2;
    o.min_bytes = o.max_bytes = 0;
    while ((opt = getopt(argc, argv, "i:r:b:e:f:")) != -1) {
        if (opt == 'i')
            iters = atol(optarg);
        else if (opt == 'r')
            rounds = atoi(optarg);
        else if (opt == 'b' && bench_parse_size(optarg, &o.min_bytes) == 0)
            continue;
        else if (opt == 'e' && bench_parse_size(optarg, &o.max_bytes) == 0)
            continue;
        else if (opt == 'f')
            o.factor = atof(optarg);
        else
            goto usage;
    }
    if (o.max_bytes == 0)
        o.max_bytes = o.min_bytes;
    size_t sizes[BENCH_MAX_SIZES], nsizes = bench_sizes(&o, sizes, BENCH_MAX_SIZES);
    if (optind != argc || o.min_bytes == 0 || o.factor <= 1.0 || o.max_bytes > (1ULL << 32) ||
        nsizes == 0 || iters < 0 || iters > FLOOR_MAX_ITERS || rounds < 1 ||
        rounds > FLOOR_ROUNDS * 4)
        goto usage;
    size_t shared_bytes =
        4096 + 2 * (size_t)FLOOR_PLACES * FLOOR_CHUNK + 2 * FLOOR_MAX_ITERS * sizeof(double);
    char *map = mmap(NULL, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "shm-floor: mmap of %zu bytes: %m\n", shared_bytes);
        return 1;
    }
    struct floor_run r = {.sh = (struct floor_shared *)map};
    r.places[0] = map + 4096;
    r.places[1] = r.places[0] + (size_t)FLOOR_PLACES * FLOOR_CHUNK;
    r.times = (double *)(r.places[1] + (size_t)FLOOR_PLACES * FLOOR_CHUNK);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "shm-floor: fork: %m\n");
        return 1;
    }
    r.me = child == 0;
    pin(r.me);
    uint64_t step = 0;
    int wrong_total = 0;
    if (r.me == 0)
        printf("# shm-floor: 2 processes, private buffers; size = the whole receive buffer\n"
               "# %12s %12s %12s %8s\n",
               "size(B)", "floor(us)", "sync(us)", "#wrong");
    for (size_t a = 0; a < nsizes; a++) {
        size_t size = sizes[a];
        r.block = size / 2;
        r.send = aligned_alloc(64, (r.block + 63) / 64 * 64);
        r.recv = aligned_alloc(64, (size + 63) / 64 * 64);
        if (r.send == NULL || r.recv == NULL) {
            fprintf(stderr, "shm-floor: rank %d: %zu bytes: out of memory\n", r.me, size);
            return 1;
        }
        srand(1234u + (unsigned)r.me + (unsigned)a);
        for (size_t i = 0; i < r.block; i++)
            r.send[i] = (char)rand();
        memset(r.recv, 0xa5, size);
        /* About 0.2 s a round, as arbench aims at (40 GB/s and 0.2 us a call assumed). */
        long n = iters ? iters : (long)(200000.0 / (0.2 + (double)size / 40000.0));
        n = n < 20 ? 20 : n > FLOOR_MAX_ITERS ? FLOOR_MAX_ITERS : n;
        double t_sync = measure(&r, &step, n, rounds, true);
        double t = measure(&r, &step, n, rounds, false);
        /* Each rank checks its own output against both ranks' inputs (same seeds). */
        int wrong = 0;
        for (int p = 0; p < 2; p++) {
            srand(1234u + (unsigned)p + (unsigned)a);
            for (size_t i = 0; i < r.block; i++)
                wrong += r.recv[(size_t)p * r.block + i] != (char)rand();
        }
        if (r.me == 0)
            printf("  %12zu %12.3f %12.3f %8d\n", size, t, t_sync, wrong);
        else if (wrong)
            printf("shm-floor: rank 1: %d wrong bytes at size %zu\n", wrong, size);
        wrong_total += wrong;
        free(r.send);
        free(r.recv);
    }
    if (r.me == 1)
        return wrong_total != 0;
    int status = 0;
    waitpid(child, &status, 0);
    return wrong_total != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
usage:
    fprintf(stderr, "usage: shm-floor [-i ITERS] [-r ROUNDS] -b MIN [-e MAX] [-f FACTOR]  (sizes: "
                    "the whole receive buffer of a 2-rank allgather, as arbench's -b/-e/-f)\n");
    return 2;
}
