/* SPDX-License-Identifier: MIT */
/*
 * What a collective costs through the NCCL API, against arcomm's own API in the same
 * setting: a process per rank (fork + exec), rank r on GPU r % GPUs, f32 sum-allreduce
 * in place, each call followed by a stream synchronize, as arbench --device cuda times
 * them.  Per size the median call of each rank; the table shows the slowest rank's.
 *
 *   nccl_time [--direct] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [--iters N]
 *
 * --direct: comm_allreduce instead of ncclAllReduce.  Whichever libnccl.so.2 the loader
 * finds is timed (LD_LIBRARY_PATH picks arcomm's or a real NCCL).  Exit 77 without a GPU.
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

struct opts {
    bool direct;
    int n, iters;
    size_t min, max, factor;
};

static int rank_main(const struct opts *o, int rank, const char *id, int fd)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || cudaSetDevice(rank % ndev))
        return 2;
    cudaStream_t st;
    void *buf;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) || cudaMalloc(&buf, o->max) ||
        cudaMemset(buf, 0, o->max))
        return 2;
    comm_t *c = NULL;
    ncclComm_t nc = NULL;
    if (o->direct) {
        comm_config_t cfg;
        comm_config_init(&cfg);
        cfg.nranks = o->n;
        cfg.rank = rank;
        cfg.device = COMM_DEVICE_CUDA;
        cfg.device_index = rank % ndev;
        snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
        if (comm_init(&c, &cfg) != COMM_OK) {
            fprintf(stderr, "rank %d: comm_init: %s\n", rank, comm_last_error(NULL));
            return 1;
        }
    } else {
        ncclUniqueId uid;
        for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
            unsigned v = 0;
            if (sscanf(id + 2 * i, "%2x", &v) != 1)
                return 2;
            uid.internal[i] = (char)v;
        }
        ncclResult_t e = ncclCommInitRank(&nc, o->n, uid, rank);
        if (e != ncclSuccess) {
            fprintf(stderr, "rank %d: ncclCommInitRank: %s: %s\n", rank, ncclGetErrorString(e),
                    ncclGetLastError(NULL));
            return 1;
        }
    }
    static double t[10000];
    int iters = o->iters < 10000 ? o->iters : 10000;
    for (size_t bytes = o->min; bytes <= o->max; bytes *= o->factor) {
        size_t count = bytes / 4;
        for (int i = -5; i < iters; i++) {
            double t0 = now_us();
            int e = o->direct ? (int)comm_allreduce(c, buf, buf, count, COMM_F32, COMM_SUM, st)
                              : (int)ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, nc, st);
            if (e != 0 || cudaStreamSynchronize(st) != cudaSuccess) {
                fprintf(stderr, "rank %d: allreduce of %zu bytes failed (%d): %s\n", rank, bytes, e,
                        o->direct ? comm_last_error(c) : ncclGetLastError(nc));
                return 1;
            }
            if (i >= 0)
                t[i] = now_us() - t0;
        }
        qsort(t, (size_t)iters, sizeof(t[0]), cmp_double);
        double med = t[iters / 2];
        if (write(fd, &med, sizeof(med)) != (ssize_t)sizeof(med))
            return 3;
        if (o->factor < 2)
            break;
    }
    if (o->direct)
        comm_destroy(c);
    else
        ncclCommDestroy(nc);
    cudaFree(buf);
    cudaStreamDestroy(st);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.n = 2, .iters = 200, .min = 8, .max = 64 << 20, .factor = 4};
    int rank = -1, fd = -1;
    const char *id = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--direct"))
            o.direct = true;
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
        else if (!strcmp(argv[i], "--rank") && i + 3 < argc) {
            rank = atoi(argv[++i]);
            id = argv[++i];
            fd = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: nccl_time [--direct] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] "
                            "[--iters N]\n");
            return 2;
        }
    }
    if (o.n < 1 || o.n > 8 || o.iters < 1 || o.min < 4 || o.max < o.min || o.factor < 1)
        return 2;
    if (rank >= 0)
        return rank_main(&o, rank, id, fd);

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA GPU here\n");
        return 77;
    }
    char idstr[2 * NCCL_UNIQUE_ID_BYTES + 1];
    if (o.direct) {
        comm_id_t cid;
        if (comm_id_new(&cid) != COMM_OK)
            return 1;
        snprintf(idstr, sizeof(idstr), "%s", cid.str);
    } else {
        ncclUniqueId uid;
        if (ncclGetUniqueId(&uid) != ncclSuccess)
            return 1;
        for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
            sprintf(idstr + 2 * i, "%02x", (unsigned char)uid.internal[i]);
    }
    int version = 0;
    ncclGetVersion(&version);
    printf("# %s, %d process rank%s on %d GPU%s, f32 sum allreduce in place, median of %d\n",
           o.direct ? "arcomm's API (comm_allreduce)" : "NCCL API (ncclAllReduce)", o.n,
           o.n > 1 ? "s" : "", ndev, ndev > 1 ? "s" : "", o.iters);
    if (!o.direct)
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
            args[k++] = idstr;
            args[k++] = fs;
            args[k] = NULL;
            execv("/proc/self/exe", args);
            _exit(127);
        }
        close(fds[r][1]);
    }
    double med[8][MAXSIZES];
    int got[8] = {0};
    for (int r = 0; r < o.n; r++) {
        while (got[r] < MAXSIZES &&
               read(fds[r][0], &med[r][got[r]], sizeof(double)) == (ssize_t)sizeof(double))
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
    printf("%12s %12s %12s\n", "bytes", "time_us", "busbw_GBs");
    int k = 0;
    for (size_t bytes = o.min; bytes <= o.max; bytes *= o.factor, k++) {
        double worst = 0;
        bool all = true;
        for (int r = 0; r < o.n; r++) {
            if (k >= got[r])
                all = false;
            else if (med[r][k] > worst)
                worst = med[r][k];
        }
        if (!all)
            break;
        double bus = o.n > 1 ? 2.0 * (o.n - 1) / o.n * (double)bytes / worst / 1e3 : 0;
        printf("%12zu %12.2f %12.2f\n", bytes, worst, bus);
        if (o.factor < 2)
            break;
    }
    if (rc)
        printf("FAIL: a rank failed (its error is above)\n");
    return rc;
}
