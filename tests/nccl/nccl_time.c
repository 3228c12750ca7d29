/* SPDX-License-Identifier: MIT */
/*
 * What a collective costs through the NCCL API, against arcomm's own API in the same
 * setting: a process per rank (fork + exec), rank r on GPU r % GPUs, f32 sum-allreduce
 * in place, each call followed by a stream synchronize, as arbench --device cuda times
 * them.  Per size the median call of each rank; the table shows the slowest rank's.
 *
 *   nccl_time [--direct | --both] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [--iters N]
 *
 * --direct: comm_allreduce instead of ncclAllReduce.  --both: the two side by side in
 * the same processes, on the same buffer and stream, one communicator each, in 8
 * interleaved rounds per size (direct, NCCL, direct, ...), so that drift between runs
 * does not count; the table then has both medians and their ratio.  Its direct
 * communicator gets the library's knob defaults (f32 stays f32: ARCOMM_BF16_THRESHOLD=off)
 * so that both do the same work; --direct alone has arcomm's own.  Whichever
 * libnccl.so.2 the loader finds is timed (LD_LIBRARY_PATH picks arcomm's or a real
 * NCCL).  Exit 77 without a GPU.
 */
#include "arcomm.h"
#include "nccl.h"

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXSIZES 40

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

enum mode { M_NCCL, M_DIRECT, M_BOTH };

struct opts {
    enum mode mode;
    int n, iters;
    size_t min, max, factor;
};

#define ROUNDS 8 /* --both: interleaved rounds per size */

static int make_direct(const struct opts *o, int rank, int ndev, const char *id, comm_t **c)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = o->n;
    cfg.rank = rank;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = rank % ndev;
    /* As libarcomm_nccl makes its communicators (runtime/nccl/face.h). */
    if (o->mode == M_BOTH)
        cfg.knob_defaults = "ARCOMM_BF16_THRESHOLD=off";
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    if (comm_init(c, &cfg) != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
        return 1;
    }
    return 0;
}

static int make_nccl(const struct opts *o, int rank, const char *hex, ncclComm_t *nc)
{
    ncclUniqueId uid;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
        unsigned v = 0;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 2;
        uid.internal[i] = (char)v;
    }
    ncclResult_t e = ncclCommInitRank(nc, o->n, uid, rank);
    if (e != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s: %s\n", rank, ncclGetErrorString(e),
                ncclGetLastError(NULL));
        return 1;
    }
    return 0;
}

/* n calls of one API, each waited for, their times appended to t. */
static int timed_calls(int rank, comm_t *c, ncclComm_t nc, void *buf, size_t bytes, cudaStream_t st,
                       int n, double *t)
{
    size_t count = bytes / 4;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        int e = c != NULL ? (int)comm_allreduce(c, buf, buf, count, COMM_F32, COMM_SUM, st)
                          : (int)ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, nc, st);
        if (e != 0 || cudaStreamSynchronize(st) != cudaSuccess) {
            fprintf(stderr, "rank %d: allreduce of %zu bytes failed (%d): %s\n", rank, bytes, e,
                    c != NULL ? comm_last_error(c) : ncclGetLastError(nc));
            return 1;
        }
        if (t != NULL)
            t[i] = now_us() - t0;
    }
    return 0;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(t[0]), cmp_double);
    return t[n / 2];
}

/* The ids: the arcomm id (direct, both), then the NCCL id in hex (NCCL, both). */
static int rank_main(const struct opts *o, int rank, const char *cid, const char *uid, int fd)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || cudaSetDevice(rank % ndev))
        return 2;
    cudaStream_t st;
    float *buf;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) || cudaMalloc((void **)&buf, o->max))
        return 2;
    /* Small values (no overflow over many sums), not zeros. */
    size_t nf = o->max / 4;
    float *h = malloc(o->max);
    if (h == NULL)
        return 2;
    for (size_t i = 0; i < nf; i++)
        h[i] = (float)((i * 2654435761u + (unsigned)rank) % 1000) * 1e-6f;
    int bad = cudaMemcpy(buf, h, nf * 4, cudaMemcpyHostToDevice) != cudaSuccess;
    free(h);
    if (bad)
        return 2;
    comm_t *c = NULL;
    ncclComm_t nc = NULL;
    int rc = 0;
    if (o->mode != M_NCCL)
        rc = make_direct(o, rank, ndev, cid, &c);
    if (rc == 0 && o->mode != M_DIRECT)
        rc = make_nccl(o, rank, uid, &nc);
    static double td[10000], tn[10000];
    int iters = o->iters < 10000 ? o->iters : 10000;
    int rounds = o->mode == M_BOTH ? ROUNDS : 1, per = iters / rounds > 0 ? iters / rounds : 1;
    for (size_t bytes = o->min; rc == 0 && bytes <= o->max; bytes *= o->factor) {
        /* Warm both up first. */
        if (c != NULL)
            rc |= timed_calls(rank, c, NULL, buf, bytes, st, 5, NULL);
        if (nc != NULL)
            rc |= timed_calls(rank, NULL, nc, buf, bytes, st, 5, NULL);
        for (int k = 0; rc == 0 && k < rounds; k++) {
            if (c != NULL)
                rc |= timed_calls(rank, c, NULL, buf, bytes, st, per, td + k * per);
            if (nc != NULL)
                rc |= timed_calls(rank, NULL, nc, buf, bytes, st, per, tn + k * per);
        }
        if (rc != 0)
            break;
        double med[2] = {c != NULL ? median(td, rounds * per) : 0,
                         nc != NULL ? median(tn, rounds * per) : 0};
        if (write(fd, med, sizeof(med)) != (ssize_t)sizeof(med))
            return 3;
        if (o->factor < 2)
            break;
    }
    if (c != NULL)
        comm_destroy(c);
    if (nc != NULL)
        ncclCommDestroy(nc);
    cudaFree(buf);
    cudaStreamDestroy(st);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {.n = 2, .iters = 200, .min = 8, .max = 64 << 20, .factor = 4};
    int rank = -1, fd = -1;
    const char *cid = NULL, *uid = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--direct"))
            o.mode = M_DIRECT;
        else if (!strcmp(argv[i], "--both"))
            o.mode = M_BOTH;
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            o.n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            o.min = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "-e") && i + 1 < argc)
            o.max = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "-f") && i + 1 < argc)
            o.factor = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            o.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rank") && i + 4 < argc) {
            rank = atoi(argv[++i]);
            cid = argv[++i];
            uid = argv[++i];
            fd = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: nccl_time [--direct | --both] [-n RANKS] [-b MIN] [-e MAX] "
                            "[-f FACTOR] [--iters N]\n");
            return 2;
        }
    }
    if (o.n < 1 || o.n > 8 || o.iters < 1 || o.min < 4 || o.max < o.min || o.factor < 1)
        return 2;
    if (rank >= 0)
        return rank_main(&o, rank, cid, uid, fd);

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA GPU here\n");
        return 77;
    }
    char cidstr[COMM_ID_BYTES] = "-", uidstr[2 * NCCL_UNIQUE_ID_BYTES + 1] = "-";
    if (o.mode != M_NCCL) {
        comm_id_t id;
        if (comm_id_new(&id) != COMM_OK)
            return 1;
        snprintf(cidstr, sizeof(cidstr), "%s", id.str);
    }
    if (o.mode != M_DIRECT) {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess)
            return 1;
        for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
            sprintf(uidstr + 2 * i, "%02x", (unsigned char)id.internal[i]);
    }
    int version = 0;
    ncclGetVersion(&version);
    static const char *const what[] = {"NCCL API (ncclAllReduce)", "arcomm's API (comm_allreduce)",
                                       "arcomm's API and the NCCL API, interleaved (the same "
                                       "knobs: f32 stays f32 in both)"};
    printf("# %s, %d process rank%s on %d GPU%s, f32 sum allreduce in place, median of %d\n",
           what[o.mode], o.n, o.n > 1 ? "s" : "", ndev, ndev > 1 ? "s" : "", o.iters);
    if (o.mode != M_DIRECT)
        printf("# libnccl version %d (%s)\n", version,
               version == NCCL_VERSION_CODE ? "arcomm" : "real NCCL");
    int fds[8][2];
    pid_t pids[8];
    for (int r = 0; r < o.n; r++) {
        if (pipe(fds[r]))
            return 2;
        fflush(stdout);
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[r][0]);
            char *args[32];
            int k = 0;
            for (int i = 0; i < argc && k < 26; i++)
                args[k++] = argv[i];
            char rs[16], fs[16];
            snprintf(rs, sizeof(rs), "%d", r);
            snprintf(fs, sizeof(fs), "%d", fds[r][1]);
            args[k++] = "--rank";
            args[k++] = rs;
            args[k++] = cidstr;
            args[k++] = uidstr;
            args[k++] = fs;
            args[k] = NULL;
            execv("/proc/self/exe", args);
            _exit(127);
        }
        close(fds[r][1]);
    }
    static double med[8][MAXSIZES][2];
    int got[8] = {0};
    for (int r = 0; r < o.n; r++) {
        while (got[r] < MAXSIZES &&
               read(fds[r][0], med[r][got[r]], sizeof(med[r][0])) == (ssize_t)sizeof(med[r][0]))
            got[r]++;
        close(fds[r][0]);
    }
    int rc = 0;
    for (int r = 0; r < o.n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = 1;
    }
    if (o.mode == M_BOTH)
        printf("%12s %12s %12s %8s\n", "bytes", "direct_us", "nccl_api_us", "ratio");
    else
        printf("%12s %12s %12s\n", "bytes", "time_us", "busbw_GBs");
    int k = 0, slower = 0;
    for (size_t bytes = o.min; bytes <= o.max; bytes *= o.factor, k++) {
        double worst[2] = {0, 0};
        bool all = true;
        for (int r = 0; r < o.n; r++) {
            if (k >= got[r]) {
                all = false;
                continue;
            }
            for (int m = 0; m < 2; m++)
                if (med[r][k][m] > worst[m])
                    worst[m] = med[r][k][m];
        }
        if (!all)
            break;
        if (o.mode == M_BOTH) {
            double ratio = worst[1] / worst[0];
            slower += ratio > 1.05;
            printf("%12zu %12.2f %12.2f %8.3f\n", bytes, worst[0], worst[1], ratio);
        } else {
            double t = worst[o.mode == M_NCCL ? 1 : 0];
            double bus = o.n > 1 ? 2.0 * (o.n - 1) / o.n * (double)bytes / t / 1e3 : 0;
            printf("%12zu %12.2f %12.2f\n", bytes, t, bus);
        }
        if (o.factor < 2)
            break;
    }
    if (o.mode == M_BOTH && rc == 0)
        printf("# %d of %d sizes more than 5%% slower through the NCCL API\n", slower, k);
    if (rc)
        printf("FAIL: a rank failed (its error is above)\n");
    return rc;
}
