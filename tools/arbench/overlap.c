/* SPDX-License-Identifier: MIT */
/*
 * arbench-overlap: how much of an allreduce comm_iallreduce hides behind computation on
 * the calling thread (docs/async.md).  For each size, on every rank, the median of:
 *
 *   comm      comm_allreduce alone
 *   seq       comm_allreduce, then the computation
 *   overlap   comm_iallreduce, the computation, comm_wait
 *
 * and prints hidden = (seq - overlap) / comm, clamped to [0, 1]: 1 when the whole
 * allreduce ran while the rank computed.  The computation is a fixed amount of
 * arithmetic calibrated to take --overlap-us alone (not a clock), so a progress thread
 * that steals its core shows as time lost.  Rank 0's numbers are printed; f32 sums.
 *   arbench-overlap [-n RANKS] [--procs] --overlap-us N [-b MIN] [-e MAX] [-f FACTOR]
 *                   [-i ITERS]
 * Not installed: a measurement of this host.  ARCOMM_PROGRESS picks the progress.
 */
#include "bench_common.h"

#include "arcomm.h"

#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ovl_opts {
    int nranks;
    bool procs;
    long overlap_us;
    size_t min_bytes, max_bytes;
    double factor;
    int iters;
    comm_id_t id;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* A dependent chain of arithmetic: steps iterations, not optimised away. */
static volatile double compute_sink;
static void compute(uint64_t steps)
{
    double x = 1.0;
    for (uint64_t i = 0; i < steps; i++) {
        x = x * 0.999999 + 1e-6;
        __asm__ volatile("" : "+x"(x)); /* one step at a time: no closed form */
    }
    compute_sink = x;
}

/* The steps that take us microseconds on this core now. */
static uint64_t calibrate(long us)
{
    uint64_t steps = 1u << 16;
    for (;;) {
        double t0 = now_us();
        compute(steps);
        double dt = now_us() - t0;
        if (dt > 2000)
            return (uint64_t)((double)steps * (double)us / dt);
        steps *= 2;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

struct ovl_rank {
    const struct ovl_opts *o;
    int rank;
    int failed;
};

static int run_rank(struct ovl_rank *me)
{
    const struct ovl_opts *o = me->o;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = o->nranks;
    cfg.rank = me->rank;
    cfg.id = o->id;
    comm_t *comm;
    if (comm_init(&comm, &cfg) != COMM_OK) {
        fprintf(stderr, "arbench-overlap: rank %d: comm_init: %s\n", me->rank,
                comm_last_error(NULL));
        return 1;
    }
    uint64_t steps = calibrate(o->overlap_us);
    float *send = malloc(o->max_bytes), *recv = malloc(o->max_bytes);
    double *t[3];
    for (int k = 0; k < 3; k++)
        t[k] = malloc(sizeof(double) * (size_t)o->iters);
    for (size_t i = 0; i < o->max_bytes / sizeof(float); i++)
        send[i] = (float)(i % 1000) * 0.25f + (float)me->rank;
    if (me->rank == 0)
        printf("# %d %s ranks, %ld us of computation, ARCOMM_PROGRESS=%s\n"
               "#%11s %12s %12s %12s %12s %8s\n",
               o->nranks, o->procs ? "process" : "thread", o->overlap_us,
               getenv("ARCOMM_PROGRESS") ? getenv("ARCOMM_PROGRESS") : "thread", "bytes", "comm_us",
               "compute_us", "seq_us", "overlap_us", "hidden");
    int rc = 0;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && rc == 0;
         bytes = (size_t)((double)bytes * o->factor) > bytes ? (size_t)((double)bytes * o->factor)
                                                             : bytes + 1) {
        size_t count = bytes / sizeof(float);
        double comp[8];
        for (int k = 0; k < 8; k++) {
            double t0 = now_us();
            compute(steps);
            comp[k] = now_us() - t0;
        }
        for (int it = 0; it < o->iters + 2 && rc == 0; it++) {
            /* Three forms, each after a barrier; the first two rounds warm up. */
            double dt[3];
            for (int form = 0; form < 3 && rc == 0; form++) {
                rc |= comm_barrier(comm) != COMM_OK;
                double t0 = now_us();
                if (form == 2) {
                    comm_request_t *req;
                    rc |= comm_iallreduce(comm, send, recv, count, COMM_F32, COMM_SUM, &req) !=
                          COMM_OK;
                    if (rc == 0) {
                        compute(steps);
                        rc |= comm_wait(&req) != COMM_OK;
                    }
                } else {
                    rc |= comm_allreduce(comm, send, recv, count, COMM_F32, COMM_SUM, NULL) !=
                          COMM_OK;
                    if (form == 1)
                        compute(steps);
                }
                dt[form] = now_us() - t0;
            }
            if (it >= 2)
                for (int k = 0; k < 3; k++)
                    t[k][it - 2] = dt[k];
        }
        if (rc != 0) {
            fprintf(stderr, "arbench-overlap: rank %d: %s\n", me->rank, comm_last_error(comm));
            break;
        }
        double c = median(t[0], o->iters), s = median(t[1], o->iters);
        double v = median(t[2], o->iters), cp = median(comp, 8);
        double hidden = c > 0 ? (s - v) / c : 0;
        hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        if (me->rank == 0)
            printf("%12zu %12.1f %12.1f %12.1f %12.1f %7.0f%%\n", bytes, c, cp, s, v, hidden * 100);
        fflush(stdout);
    }
    for (int k = 0; k < 3; k++)
        free(t[k]);
    free(send);
    free(recv);
    comm_destroy(comm);
    return rc;
}

static void *rank_thread(void *arg)
{
    struct ovl_rank *me = arg;
    me->failed = run_rank(me);
    return NULL;
}

static const char usage[] =
    "usage: arbench-overlap [-n RANKS] [--procs] --overlap-us N [-b MIN] [-e MAX] [-f FACTOR] "
    "[-i ITERS]\n";

int main(int argc, char **argv)
{
    struct ovl_opts o = {.nranks = 2,
                         .overlap_us = 1000,
                         .min_bytes = 4096,
                         .max_bytes = 4u << 20,
                         .factor = 4,
                         .iters = 30};
    static const struct option longopts[] = {{"procs", no_argument, NULL, 'p'},
                                             {"overlap-us", required_argument, NULL, 'u'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "n:b:e:f:i:h", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'n':
            o.nranks = atoi(optarg);
            break;
        case 'p':
            o.procs = true;
            break;
        case 'u':
            o.overlap_us = atol(optarg);
            break;
        case 'b':
        case 'e':
            if (bench_parse_size(optarg, ch == 'b' ? &o.min_bytes : &o.max_bytes) != 0) {
                fprintf(stderr, "arbench-overlap: bad size %s\n%s", optarg, usage);
                return 2;
            }
            break;
        case 'f':
            o.factor = atof(optarg);
            break;
        case 'i':
            o.iters = atoi(optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (o.nranks < 1 || o.nranks > COMM_MAX_RANKS || o.overlap_us < 0 || o.iters < 1 ||
        o.factor <= 1 || o.min_bytes < sizeof(float) || o.min_bytes > o.max_bytes) {
        fputs(usage, stderr);
        return 2;
    }
    if (comm_id_new(&o.id) != COMM_OK) {
        fprintf(stderr, "arbench-overlap: comm_id_new: %s\n", comm_last_error(NULL));
        return 1;
    }
    struct ovl_rank *ranks = calloc((size_t)o.nranks, sizeof(*ranks));
    int failed = 0;
    if (o.procs) {
        fflush(stdout);
        for (int r = 0; r < o.nranks; r++) {
            ranks[r] = (struct ovl_rank){.o = &o, .rank = r};
            if (fork() == 0)
                _exit(run_rank(&ranks[r]));
        }
        for (int r = 0; r < o.nranks; r++) {
            int ws;
            if (wait(&ws) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
                failed = 1;
        }
    } else {
        pthread_t *th = calloc((size_t)o.nranks, sizeof(*th));
        for (int r = 0; r < o.nranks; r++) {
            ranks[r] = (struct ovl_rank){.o = &o, .rank = r};
            pthread_create(&th[r], NULL, rank_thread, &ranks[r]);
        }
        for (int r = 0; r < o.nranks; r++) {
            pthread_join(th[r], NULL);
            failed |= ranks[r].failed;
        }
        free(th);
    }
    free(ranks);
    return failed;
}
