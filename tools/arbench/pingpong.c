/* SPDX-License-Identifier: MIT */
/*
 * arbench-pingpong: the one-way time of comm_send/comm_recv between two host ranks
 * (docs/p2p.md), and with --mpi the same between two MPI processes (MPI_Send/MPI_Recv),
 * so the two can be compared side by side on one host.  For each size: rank 0 sends,
 * rank 1 receives and sends back, rank 0 receives; one-way time = round trip / 2,
 * timed on rank 0 per round trip; median and p90 over the round trips after a warmup.
 * Before the timed trips of each size, one trip on fresh random data checks every byte
 * that arrived on both ranks (#wrong).
 *
 *   arbench-pingpong [--procs] [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS]
 *   mpirun -np 2 arbench-pingpong --mpi [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS]
 *
 * Threads of this process by default; --procs forks two processes (each pinned to its
 * own core, as arbench binds its ranks).  Not installed: a measurement of this host.
 */

#include "arcomm.h"
#include "bench_common.h"

#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef PINGPONG_MPI
#include <mpi.h>
#endif

struct pp_opts {
    bool procs, mpi;
    size_t min_bytes, max_bytes;
    double factor;
    int iters;
    comm_id_t id;
};

/* One side's moves: send or receive bytes to or from the other rank. */
struct pp_ops {
    int (*send)(void *ctx, const void *buf, size_t bytes);
    int (*recv)(void *ctx, void *buf, size_t bytes);
    const char *(*error)(void *ctx);
    void *ctx;
};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static void fill(uint8_t *b, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)mix(seed * 0x9e3779b97f4a7c15ULL + i);
}

static size_t wrong(const uint8_t *b, size_t n, uint64_t seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != (uint8_t)mix(seed * 0x9e3779b97f4a7c15ULL + i);
    return bad;
}

/* The sweep of one rank; rank 0 prints.  Returns nonzero on a failed move or wrong data. */
static int sweep(const struct pp_opts *o, int rank, const struct pp_ops *ops, const char *who)
{
    uint8_t *buf = malloc(o->max_bytes ? o->max_bytes : 1);
    double *t = malloc(sizeof(double) * (size_t)o->iters);
    if (buf == NULL || t == NULL) {
        fprintf(stderr, "arbench-pingpong: out of memory\n");
        return 1;
    }
    if (rank == 0)
        printf("# ping-pong between 2 %s, one-way time = round trip / 2 (median, p90 over %d "
               "trips)\n#%11s %12s %12s %10s %7s\n",
               who, o->iters, "bytes", "time_us", "p90_us", "GB/s", "#wrong");
    int rc = 0;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && rc == 0;) {
        /* The checked trip: fresh data each way. */
        uint64_t seed = bytes * 2654435761u + 17;
        size_t bad = 0;
        if (rank == 0) {
            fill(buf, bytes, seed);
            rc |= ops->send(ops->ctx, buf, bytes);
            memset(buf, 0xa5, bytes);
            rc |= ops->recv(ops->ctx, buf, bytes);
            bad = rc ? 0 : wrong(buf, bytes, seed + 1);
        } else {
            memset(buf, 0xa5, bytes);
            rc |= ops->recv(ops->ctx, buf, bytes);
            bad = rc ? 0 : wrong(buf, bytes, seed);
            fill(buf, bytes, seed + 1);
            rc |= ops->send(ops->ctx, buf, bytes);
        }
        /* Rank 1 reports its count in the first timed-out trip's place: send it over. */
        uint64_t other = 0;
        if (rc == 0) {
            if (rank == 1)
                rc |= ops->send(ops->ctx, &(uint64_t){bad}, sizeof(uint64_t));
            else
                rc |= ops->recv(ops->ctx, &other, sizeof(uint64_t));
        }
        int warm = o->iters / 10 > 5 ? o->iters / 10 : 5;
        for (int it = -warm; it < o->iters && rc == 0; it++) {
            double t0 = now_us();
            if (rank == 0) {
                rc |= ops->send(ops->ctx, buf, bytes);
                rc |= ops->recv(ops->ctx, buf, bytes);
            } else {
                rc |= ops->recv(ops->ctx, buf, bytes);
                rc |= ops->send(ops->ctx, buf, bytes);
            }
            if (it >= 0)
                t[it] = (now_us() - t0) / 2;
        }
        if (rc != 0) {
            fprintf(stderr, "arbench-pingpong: rank %d at %zu bytes: %s\n", rank, bytes,
                    ops->error(ops->ctx));
            break;
        }
        if (rank == 0) {
            qsort(t, (size_t)o->iters, sizeof(double), cmp_double);
            double med = t[o->iters / 2], p90 = t[(o->iters * 9) / 10];
            printf("%12zu %12.2f %12.2f %10.3f %7zu\n", bytes, med, p90,
                   med > 0 ? (double)bytes / med / 1e3 : 0.0, bad + (size_t)other);
            fflush(stdout);
            rc |= bad + other != 0;
        }
        size_t next = (size_t)((double)bytes * o->factor);
        bytes = next > bytes ? next : bytes + 1;
    }
    free(buf);
    free(t);
    return rc;
}

/* ---- arcomm ---- */

struct pp_comm {
    comm_t *comm;
    int peer;
};

static int comm_send_bytes(void *ctx, const void *buf, size_t bytes)
{
    struct pp_comm *p = ctx;
    return comm_send(p->comm, buf, bytes, COMM_U8, p->peer, NULL) != COMM_OK;
}

static int comm_recv_bytes(void *ctx, void *buf, size_t bytes)
{
    struct pp_comm *p = ctx;
    return comm_recv(p->comm, buf, bytes, COMM_U8, p->peer, NULL) != COMM_OK;
}

static const char *comm_error(void *ctx)
{
    return comm_last_error(((struct pp_comm *)ctx)->comm);
}

static void pin(int rank)
{
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof(all), &all) != 0)
        return;
    int seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &all))
            continue;
        if (seen++ == rank) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            sched_setaffinity(0, sizeof(one), &one);
            return;
        }
    }
}

struct pp_rank {
    const struct pp_opts *o;
    int rank;
    int rc;
};

static int run_comm_rank(const struct pp_opts *o, int rank)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = rank;
    cfg.id = o->id;
    struct pp_comm p = {.peer = 1 - rank};
    if (comm_init(&p.comm, &cfg) != COMM_OK) {
        fprintf(stderr, "arbench-pingpong: rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        return 1;
    }
    struct pp_ops ops = {comm_send_bytes, comm_recv_bytes, comm_error, &p};
    int rc = sweep(o, rank, &ops, o->procs ? "arcomm process ranks" : "arcomm thread ranks");
    comm_destroy(p.comm);
    return rc;
}

static void *rank_thread(void *arg)
{
    struct pp_rank *r = arg;
    pin(r->rank);
    r->rc = run_comm_rank(r->o, r->rank);
    return NULL;
}

/* ---- MPI ---- */

#ifdef PINGPONG_MPI
static int mpi_send_bytes(void *ctx, const void *buf, size_t bytes)
{
    return MPI_Send(buf, (int)bytes, MPI_BYTE, *(int *)ctx, 0, MPI_COMM_WORLD) != MPI_SUCCESS;
}

static int mpi_recv_bytes(void *ctx, void *buf, size_t bytes)
{
    return MPI_Recv(buf, (int)bytes, MPI_BYTE, *(int *)ctx, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE) !=
           MPI_SUCCESS;
}

static const char *mpi_error(void *ctx)
{
    (void)ctx;
    return "an MPI call failed";
}

static int run_mpi(const struct pp_opts *o, int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "arbench-pingpong --mpi: run it with mpirun -np 2 (got %d)\n", size);
        MPI_Finalize();
        return 2;
    }
    int peer = 1 - rank;
    struct pp_ops ops = {mpi_send_bytes, mpi_recv_bytes, mpi_error, &peer};
    int rc = sweep(o, rank, &ops, "Open MPI processes (MPI_Send/MPI_Recv)");
    MPI_Finalize();
    return rc;
}
#endif

static const char usage[] = "usage: arbench-pingpong [--procs | --mpi] [-b MIN] [-e MAX] "
                            "[-f FACTOR] [-i ITERS]\n";

int main(int argc, char **argv)
{
    struct pp_opts o = {.min_bytes = 8, .max_bytes = 4u << 20, .factor = 4, .iters = 1000};
    static const struct option longopts[] = {{"procs", no_argument, NULL, 'p'},
                                             {"mpi", no_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "b:e:f:i:h", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'p':
            o.procs = true;
            break;
        case 'm':
            o.mpi = true;
            break;
        case 'b':
        case 'e':
            if (bench_parse_size(optarg, ch == 'b' ? &o.min_bytes : &o.max_bytes) != 0) {
                fprintf(stderr, "arbench-pingpong: bad size %s\n%s", optarg, usage);
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
    if (o.iters < 1 || o.factor < 1 || o.min_bytes > o.max_bytes || o.max_bytes > (1u << 30)) {
        fputs(usage, stderr);
        return 2;
    }
    if (o.mpi) {
#ifdef PINGPONG_MPI
        return run_mpi(&o, &argc, &argv);
#else
        fprintf(stderr, "arbench-pingpong: built without MPI: --mpi is not available\n");
        return 2;
#endif
    }
    if (comm_id_new(&o.id) != COMM_OK) {
        fprintf(stderr, "arbench-pingpong: comm_id_new: %s\n", comm_last_error(NULL));
        return 1;
    }
    if (o.procs) {
        pid_t kids[2];
        for (int r = 0; r < 2; r++) {
            kids[r] = fork();
            if (kids[r] == 0) {
                pin(r);
                _exit(run_comm_rank(&o, r));
            }
            if (kids[r] < 0) {
                perror("arbench-pingpong: fork");
                return 1;
            }
        }
        int rc = 0;
        for (int r = 0; r < 2; r++) {
            int st;
            waitpid(kids[r], &st, 0);
            rc |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
        return rc;
    }
    struct pp_rank ranks[2] = {{&o, 0, 0}, {&o, 1, 0}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&th[r], NULL, rank_thread, &ranks[r]);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    return ranks[0].rc | ranks[1].rc;
}
