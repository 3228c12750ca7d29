/* SPDX-License-Identifier: MIT */
/*
 * arbench's thread ranks: N threads of this process, one rank each (the default run),
 * their sweep over the sizes, and the two lines above each table: the memcpy ceiling of
 * the ranks' threads and the exchange floor.
 */
#include "arcomm_side.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ARBENCH_HAVE_CUDA
#define ARBENCH_HAVE_CUDA 0
#endif
#if ARBENCH_HAVE_CUDA
#include "device_cuda.h"
#endif
struct thr_shared {
    const struct bench_opts *opts;
    cpu_set_t cpus; /* the process's CPUs, dealt out to the ranks in turn */
    int ncpus;
    comm_id_t id;
    pthread_barrier_t bar;
    void **ptrs; /* each rank's published buffer, for struct bench_sync */
    const size_t *sizes;
    size_t nsizes;
    struct bench_result *res;  /* rank 0 writes one per size */
    struct bench_report *live; /* print rows as they come (rank 0), or NULL */
    char transport[64];
    atomic_int exit_code; /* first failure wins; the others see it */
    bool nccl;            /* this pass runs NCCL (--compare nccl), not arcomm */
    unsigned char nccl_id[128];
    size_t ceiling_bytes; /* the ceiling pass: its buffer size, and what it measured */
    double ceiling_gbs;
    double floor_us; /* and the exchange floor (floor_pass) */
    struct floor_line *lines;
};

/* One rank's word of the floor pass, on a cache line of its own. */
struct floor_line {
    _Alignas(64) _Atomic uint64_t round;
};

struct thr_rank {
    struct thr_shared *sh;
    int rank;
};

/* Shared memory and a barrier: the benchmark's bookkeeping never uses the library. */
static int thr_reduce(void *ctx, void *vals, size_t n, enum bench_red red)
{
    struct thr_rank *t = ctx;
    struct thr_shared *sh = t->sh;
    size_t esz = red == BENCH_MAX_F64 ? sizeof(double) : sizeof(int64_t);
    void *tmp = malloc(n > 0 ? n * esz : 1);
    if (!tmp) {
        fprintf(stderr, "arbench: out of memory\n");
        exit(BENCH_EXIT_FAIL);
    }
    sh->ptrs[t->rank] = vals;
    pthread_barrier_wait(&sh->bar);
    memcpy(tmp, sh->ptrs[0], n * esz);
    for (int r = 1; r < sh->opts->nranks; r++) {
        for (size_t i = 0; i < n; i++) {
            if (red == BENCH_MAX_F64) {
                double *d = tmp, x = ((const double *)sh->ptrs[r])[i];
                d[i] = x > d[i] ? x : d[i];
            } else {
                int64_t *d = tmp, x = ((const int64_t *)sh->ptrs[r])[i];
                d[i] = red == BENCH_SUM_I64   ? (int64_t)((uint64_t)d[i] + (uint64_t)x)
                       : red == BENCH_MAX_I64 ? (x > d[i] ? x : d[i])
                                              : (x < d[i] ? x : d[i]);
            }
        }
    }
    pthread_barrier_wait(&sh->bar); /* everyone has read every rank's values */
    memcpy(vals, tmp, n * esz);
    free(tmp);
    return 0;
}

static int thr_same_bytes(void *ctx, const void *buf, size_t bytes, bool *same)
{
    struct thr_rank *t = ctx;
    struct thr_shared *sh = t->sh;
    int64_t differ = 0;

    sh->ptrs[t->rank] = (void *)buf;
    pthread_barrier_wait(&sh->bar);
    /* Each rank compares itself with rank 0: thread ranks see each other's memory. */
    differ = memcmp(buf, sh->ptrs[0], bytes) != 0;
    pthread_barrier_wait(&sh->bar);
    thr_reduce(ctx, &differ, 1, BENCH_SUM_I64);
    *same = differ == 0;
    return 0;
}

static void thr_fail(struct thr_shared *sh, int code)
{
    int zero = 0;
    atomic_compare_exchange_strong(&sh->exit_code, &zero, code);
    /* A rank that gave up leaves the others blocked in barriers: end the process. */
    fflush(stdout);
    exit(atomic_load(&sh->exit_code));
}

static void pin_rank(const struct thr_shared *sh, int rank)
{
    if (sh->opts->no_bind || sh->ncpus <= 0)
        return;
    /* Like arrun --bind core: two spinning ranks that the scheduler put on one core
     * would measure the scheduler, not the library. */
    int want = rank % sh->ncpus, cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && want >= 0; c++)
        if (CPU_ISSET(c, &sh->cpus) && want-- == 0)
            cpu = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

static void *thr_main(void *arg)
{
    struct thr_rank *t = arg;
    struct thr_shared *sh = t->sh;
    const struct bench_opts *o = sh->opts;
    comm_config_t cfg;
    comm_t *comm = NULL;

    pin_rank(sh, t->rank);
    struct bench_device dev;
    int code = bench_device_open(o->device, t->rank, &dev);
    if (code)
        thr_fail(sh, code);
    struct arcomm_ctx actx = {.stream = bench_device_stream(&dev)};
    struct bench_coll coll = bench_arcomm_coll(&actx);
#if ARBENCH_HAVE_CUDA
    struct bench_nccl_ctx nctx = {.stream = bench_device_stream(&dev)};
    if (sh->nccl) {
        if (bench_nccl_init(&nctx.comm, o->nranks, sh->nccl_id, t->rank, t->rank))
            thr_fail(sh, BENCH_EXIT_FAIL);
        coll = bench_nccl_coll(&nctx);
    }
#endif
    if (!sh->nccl) {
        comm_config_init(&cfg);
        cfg.nranks = o->nranks;
        cfg.rank = t->rank;
        cfg.id = sh->id;
        cfg.device = o->device;
        cfg.device_index = o->device == COMM_DEVICE_HOST ? -1 : t->rank;
        cfg.transport = o->transport;
        comm_status_t st = comm_init(&comm, &cfg);
        if (st != COMM_OK)
            thr_fail(sh, bench_init_failed(st));
        actx.comm = comm;
        if (o->mem_alloc)
            bench_device_use_segment(&dev, comm);
    }
    struct bench_sync sync = {.reduce = thr_reduce, .same_bytes = thr_same_bytes, .ctx = t};
    struct bench_rank r = {.rank = t->rank,
                           .nranks = o->nranks,
                           .opts = o,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &dev,
                           .wire = bench_wire_of(o->device, sh->nccl),
                           .fixed_order = bench_fixed_order(o->device, sh->nccl)};
    if (t->rank == 0) {
        snprintf(sh->transport, sizeof(sh->transport), "%s",
                 sh->nccl ? "nccl" : comm_transport_name(comm));
        if (sh->live) {
            snprintf(sh->live->meta.transport, sizeof(sh->live->meta.transport), "%s",
                     sh->transport);
            bench_print_header(stdout, sh->live);
        }
    }
    for (size_t i = 0; i < sh->nsizes; i++) {
        struct bench_result res;
        if (t->rank == 0)
            bench_progress("arbench", i, sh->nsizes, sh->sizes[i]);
        if (bench_run_size(&r, sh->sizes[i], &res))
            thr_fail(sh, BENCH_EXIT_FAIL);
        if (t->rank != 0)
            continue;
        sh->res[i] = res;
        if (sh->live) {
            bench_progress_end();
            bench_print_row(stdout, sh->live, &(struct bench_row){.a = res, .coll = o->coll});
        }
    }
    if (t->rank == 0)
        bench_progress_end();
    comm_destroy(comm);
#if ARBENCH_HAVE_CUDA
    if (sh->nccl)
        bench_nccl_destroy(nctx.comm);
#endif
    bench_device_close(&dev);
    return NULL;
}

int bench_run_threads(const struct bench_opts *o, const size_t *sizes, size_t nsizes,
                      struct bench_result *res, struct bench_report *live, char *transport,
                      bool nccl)
{
    struct thr_shared sh = {
        .opts = o, .sizes = sizes, .nsizes = nsizes, .res = res, .live = live, .nccl = nccl};
#if ARBENCH_HAVE_CUDA
    if (nccl && (bench_nccl_load() || bench_nccl_unique_id(sh.nccl_id)))
        return BENCH_EXIT_USAGE;
#endif
    struct thr_rank *ranks = calloc((size_t)o->nranks, sizeof(*ranks));
    pthread_t *tids = calloc((size_t)o->nranks, sizeof(*tids));
    sh.ptrs = calloc((size_t)o->nranks, sizeof(*sh.ptrs));
    if (!ranks || !tids || !sh.ptrs) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    comm_status_t st = comm_id_new(&sh.id);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: comm_id_new: %s: %s\n", comm_status_string(st),
                comm_last_error(NULL));
        return BENCH_EXIT_FAIL;
    }
    if (sched_getaffinity(0, sizeof(sh.cpus), &sh.cpus) == 0)
        sh.ncpus = CPU_COUNT(&sh.cpus);
    pthread_barrier_init(&sh.bar, NULL, (unsigned)o->nranks);
    for (int i = 0; i < o->nranks; i++) {
        ranks[i] = (struct thr_rank){.sh = &sh, .rank = i};
        int err = pthread_create(&tids[i], NULL, thr_main, &ranks[i]);
        if (err) {
            fprintf(stderr, "arbench: pthread_create: %s\n", strerror(err));
            exit(BENCH_EXIT_FAIL); /* the started ranks wait in comm_init */
        }
    }
    for (int i = 0; i < o->nranks; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&sh.bar);
    snprintf(transport, 64, "%s", sh.transport);
    free(sh.ptrs);
    free(tids);
    free(ranks);
    return BENCH_EXIT_OK;
}

/*
 * The exchange floor: rounds in which every rank's thread (pinned as in a sweep)
 * publishes the round number on its own cache line and waits for every other rank's.
 * No call that every rank must enter and agree on before any returns can take less
 * than one such round; arbench prints it beside the ceiling.  Batches of about 0.2 ms
 * (short, so that a batch in which another process took a core is an outlier), the
 * median of 41, in microseconds per round.  Threads that outnumber the cores yield.
 */
static void floor_rounds(struct floor_line *lines, const struct bench_rank *r, uint64_t *round,
                         long k, bool yield)
{
    for (long i = 0; i < k; i++) {
        ++*round;
        atomic_store_explicit(&lines[r->rank].round, *round, memory_order_release);
        for (int p = 0; p < r->nranks; p++)
            while (atomic_load_explicit(&lines[p].round, memory_order_acquire) < *round) {
                if (yield)
                    sched_yield();
#if defined(__x86_64__) || defined(__i386__)
                else
                    __builtin_ia32_pause(); /* as arcomm's own waits spin */
#endif
            }
    }
}

static int floor_pass(struct thr_rank *t, const struct bench_rank *r, double *us)
{
    enum { BATCHES = 41 };
    struct floor_line *lines = t->sh->lines;
    bool yield = t->sh->ncpus > 0 && r->nranks > t->sh->ncpus;
    uint64_t round = 0;
    double per[BATCHES];
    long k = 1;
    for (int b = -1; b < BATCHES; b++) {
        for (;;) {
            double dt = 0.0;
            if (r->sync->reduce(r->sync->ctx, &dt, 1, BENCH_MAX_F64))
                return -1;
            double t0 = bench_now();
            floor_rounds(lines, r, &round, k, yield);
            dt = bench_now() - t0;
            if (r->sync->reduce(r->sync->ctx, &dt, 1, BENCH_MAX_F64))
                return -1;
            /* b == -1 sizes the batches: every rank doubles k alike (dt is the max). */
            if (b >= 0) {
                per[b] = dt / (double)k * 1e6;
                break;
            }
            if (dt >= 2e-4 || k >= (1L << 20))
                break;
            k *= 2;
        }
    }
    *us = bench_median(per, BATCHES);
    return 0;
}

/* The ceiling pass: the ranks' threads, pinned as in a sweep, copying at once. */
static void *thr_ceiling(void *arg)
{
    struct thr_rank *t = arg;
    struct thr_shared *sh = t->sh;

    pin_rank(sh, t->rank);
    struct bench_sync sync = {.reduce = thr_reduce, .same_bytes = thr_same_bytes, .ctx = t};
    struct bench_rank r = {
        .rank = t->rank, .nranks = sh->opts->nranks, .opts = sh->opts, .sync = &sync};
    double gbs = 0.0;
    double us = 0.0;
    if (bench_ceiling(&r, sh->ceiling_bytes, &gbs) || floor_pass(t, &r, &us))
        thr_fail(sh, BENCH_EXIT_FAIL);
    if (t->rank == 0) {
        sh->ceiling_gbs = gbs;
        sh->floor_us = us;
    }
    return NULL;
}

int bench_measure_ceiling(const struct bench_opts *o, size_t bytes, double *gbs, double *floor_us)
{
    struct thr_shared sh = {.opts = o, .ceiling_bytes = bytes};
    struct thr_rank *ranks = calloc((size_t)o->nranks, sizeof(*ranks));
    pthread_t *tids = calloc((size_t)o->nranks, sizeof(*tids));
    sh.ptrs = calloc((size_t)o->nranks, sizeof(*sh.ptrs));
    sh.lines = aligned_alloc(64, (size_t)o->nranks * sizeof(*sh.lines));
    if (!ranks || !tids || !sh.ptrs || !sh.lines) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    if (sched_getaffinity(0, sizeof(sh.cpus), &sh.cpus) == 0)
        sh.ncpus = CPU_COUNT(&sh.cpus);
    pthread_barrier_init(&sh.bar, NULL, (unsigned)o->nranks);
    for (int i = 0; i < o->nranks; i++) {
        ranks[i] = (struct thr_rank){.sh = &sh, .rank = i};
        int err = pthread_create(&tids[i], NULL, thr_ceiling, &ranks[i]);
        if (err) {
            fprintf(stderr, "arbench: pthread_create: %s\n", strerror(err));
            exit(BENCH_EXIT_FAIL);
        }
    }
    for (int i = 0; i < o->nranks; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&sh.bar);
    *gbs = sh.ceiling_gbs;
    *floor_us = sh.floor_us;
    free(sh.lines);
    free(sh.ptrs);
    free(tids);
    free(ranks);
    return BENCH_EXIT_OK;
}
