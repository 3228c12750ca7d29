/* SPDX-License-Identifier: MIT */
/*
 * bench_cuda: sum-allreduce on every local GPU, one thread per rank, timed the same way
 * for arcomm and for NCCL (loaded with dlopen, so the build needs no NCCL):
 *
 *   sync:  every call followed by cudaStreamSynchronize, timed on every rank; per call
 *          the slowest rank; the median over calls (what arbench reports for host);
 *   b2b:   iters calls enqueued back to back, then one synchronize; total / iters on the
 *          slowest rank (what nccl-tests reports).
 *
 *   bench_cuda --lib arcomm|nccl [-b MIN] [-e MAX] [-d f32|f16|bf16] [--check]
 *
 * Knobs come from the environment as usual (ARCOMM_BF16_THRESHOLD=off for an f32 wire;
 * NCCL_P2P_DISABLE=1 for NCCL through host memory).  In place, random data.
 */
#include "arcomm.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANKS 8
#define MAX_SIZES 64

/* The few NCCL declarations used (nccl.h is not needed to build). */
typedef struct {
    char internal[128];
} nccl_id_t;
typedef void *nccl_comm_t;
static int (*nccl_get_unique_id)(nccl_id_t *);
static int (*nccl_comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
static int (*nccl_all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
static int (*nccl_comm_destroy)(nccl_comm_t);
static const char *(*nccl_error_string)(int);
enum { NCCL_F16 = 6, NCCL_F32 = 7, NCCL_BF16 = 9, NCCL_SUM = 0 };

static bool use_nccl;
static int nranks;
static comm_dtype_t dtype = COMM_F32;
static size_t min_bytes = 8, max_bytes = 128u << 20;
static comm_id_t arcomm_id;
static nccl_id_t nccl_id;
static pthread_barrier_t bar;
static double *shared_times[MAX_RANKS];
static double b2b[MAX_RANKS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_cuda: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct rank {
    int rank;
    comm_t *comm;
    nccl_comm_t nccl;
    cudaStream_t stream;
    void *buf;
};

static int call(struct rank *r, size_t count)
{
    if (use_nccl) {
        int nt = dtype == COMM_F32 ? NCCL_F32 : dtype == COMM_F16 ? NCCL_F16 : NCCL_BF16;
        int e = nccl_all_reduce(r->buf, r->buf, count, nt, NCCL_SUM, r->nccl, r->stream);
        if (e != 0) {
            fprintf(stderr, "bench_cuda: ncclAllReduce: %s\n", nccl_error_string(e));
            return -1;
        }
        return 0;
    }
    comm_status_t st = comm_allreduce(r->comm, r->buf, r->buf, count, dtype, COMM_SUM, r->stream);
    if (st != COMM_OK) {
        fprintf(stderr, "bench_cuda: rank %d: %s: %s\n", r->rank, comm_status_string(st),
                comm_last_error(r->comm));
        return -1;
    }
    return 0;
}

struct row {
    size_t bytes;
    int iters;
    double sync_us, b2b_us;
};
static struct row rows[MAX_SIZES];
static int nrows;

static void *rank_main(void *arg)
{
    struct rank *r = arg;
    size_t esz = comm_dtype_size(dtype);
    die_cuda(cudaSetDevice(r->rank), "cudaSetDevice");
    die_cuda(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "stream");
    die_cuda(cudaMalloc(&r->buf, max_bytes), "cudaMalloc");
    /* Random, finite, small values: sums never overflow whatever the iteration count. */
    size_t n = max_bytes / esz;
    uint16_t *h = malloc(max_bytes);
    uint64_t s = 12345 + (uint64_t)r->rank;
    for (size_t i = 0; i < max_bytes / 2; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (uint16_t)(0x3c00 | ((s >> 40) & 0x3ff)); /* f16/bf16 halves: ~1 */
    }
    if (dtype == COMM_F32)
        for (size_t i = 0; i < n; i++)
            ((float *)h)[i] = 1e-3f * (float)(i % 1000);
    die_cuda(cudaMemcpy(r->buf, h, max_bytes, cudaMemcpyHostToDevice), "upload");
    free(h);
    if (use_nccl) {
        int e = nccl_comm_init_rank(&r->nccl, nranks, nccl_id, r->rank);
        if (e != 0) {
            fprintf(stderr, "bench_cuda: ncclCommInitRank: %s\n", nccl_error_string(e));
            exit(1);
        }
    } else {
        comm_config_t cfg;
        comm_config_init(&cfg);
        cfg.nranks = nranks;
        cfg.rank = r->rank;
        cfg.id = arcomm_id;
        cfg.device = COMM_DEVICE_CUDA;
        cfg.device_index = r->rank;
        comm_status_t st = comm_init(&r->comm, &cfg);
        if (st != COMM_OK) {
            fprintf(stderr, "bench_cuda: comm_init: %s\n", comm_last_error(NULL));
            exit(1);
        }
    }
    double *times = malloc(sizeof(double) * 20000);
    shared_times[r->rank] = times;
    int row = 0;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2, row++) {
        size_t count = bytes / esz;
        /* Iterations: about 0.3 s worth, from a timed probe agreed on by all ranks. */
        pthread_barrier_wait(&bar);
        double t0 = now_s();
        for (int i = 0; i < 10; i++)
            if (call(r, count) || cudaStreamSynchronize(r->stream) != cudaSuccess)
                exit(1);
        b2b[r->rank] = (now_s() - t0) / 10;
        pthread_barrier_wait(&bar);
        double est = 0;
        for (int p = 0; p < nranks; p++)
            est = b2b[p] > est ? b2b[p] : est;
        int iters = (int)(0.3 / (est > 1e-7 ? est : 1e-7));
        iters = iters < 20 ? 20 : iters > 20000 ? 20000 : iters;
        pthread_barrier_wait(&bar);
        for (int i = 0; i < iters; i++) {
            double a = now_s();
            if (call(r, count) || cudaStreamSynchronize(r->stream) != cudaSuccess)
                exit(1);
            times[i] = now_s() - a;
        }
        pthread_barrier_wait(&bar);
        t0 = now_s();
        for (int i = 0; i < iters; i++)
            if (call(r, count))
                exit(1);
        die_cuda(cudaStreamSynchronize(r->stream), "sync");
        b2b[r->rank] = (now_s() - t0) / iters;
        pthread_barrier_wait(&bar);
        if (r->rank == 0) {
            double *worst = malloc(sizeof(double) * (size_t)iters);
            double bb = 0;
            for (int i = 0; i < iters; i++) {
                worst[i] = 0;
                for (int p = 0; p < nranks; p++)
                    worst[i] = shared_times[p][i] > worst[i] ? shared_times[p][i] : worst[i];
            }
            for (int p = 0; p < nranks; p++)
                bb = b2b[p] > bb ? b2b[p] : bb;
            qsort(worst, (size_t)iters, sizeof(double), cmp_double);
            rows[row] = (struct row){bytes, iters, worst[iters / 2] * 1e6, bb * 1e6};
            nrows = row + 1;
            double bus = 2.0 * (nranks - 1) / nranks;
            printf("%12zu %7d %10.2f %9.2f %10.2f %9.2f\n", bytes, iters, rows[row].sync_us,
                   bytes / rows[row].sync_us * 1e-3 * bus, rows[row].b2b_us,
                   bytes / rows[row].b2b_us * 1e-3 * bus);
            fflush(stdout);
            free(worst);
        }
        pthread_barrier_wait(&bar);
    }
    if (use_nccl)
        nccl_comm_destroy(r->nccl);
    else
        comm_destroy(r->comm);
    cudaFree(r->buf);
    free(times);
    return NULL;
}

static int load_nccl(void)
{
    void *h = dlopen("libnccl.so.2", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "bench_cuda: dlopen libnccl.so.2: %s (set LD_LIBRARY_PATH)\n", dlerror());
        return -1;
    }
    *(void **)&nccl_get_unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&nccl_comm_init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&nccl_all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&nccl_comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl_error_string = dlsym(h, "ncclGetErrorString");
    if (!nccl_get_unique_id || !nccl_comm_init_rank || !nccl_all_reduce || !nccl_comm_destroy ||
        !nccl_error_string) {
        fprintf(stderr, "bench_cuda: libnccl.so.2 lacks a symbol\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lib") && i + 1 < argc)
            use_nccl = !strcmp(argv[++i], "nccl");
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            min_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-e") && i + 1 < argc)
            max_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) {
            i++;
            dtype = !strcmp(argv[i], "f16")    ? COMM_F16
                    : !strcmp(argv[i], "bf16") ? COMM_BF16
                                               : COMM_F32;
        } else {
            fprintf(stderr, "usage: bench_cuda --lib arcomm|nccl [-b MIN] [-e MAX] [-d DTYPE]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    nranks = ndev > MAX_RANKS ? MAX_RANKS : ndev;
    if (min_bytes < comm_dtype_size(dtype))
        min_bytes = comm_dtype_size(dtype);
    if (use_nccl) {
        if (load_nccl() || nccl_get_unique_id(&nccl_id) != 0)
            return 1;
    } else if (comm_id_new(&arcomm_id) != COMM_OK) {
        return 1;
    }
    printf("# %s, %d GPUs, %s, in place, thread per rank%s%s\n", use_nccl ? "nccl" : "arcomm",
           nranks,
           dtype == COMM_F32   ? "f32"
           : dtype == COMM_F16 ? "f16"
                               : "bf16",
           getenv("NCCL_P2P_DISABLE") ? ", NCCL_P2P_DISABLE=" : "",
           getenv("NCCL_P2P_DISABLE") ? getenv("NCCL_P2P_DISABLE") : "");
    if (getenv("ARCOMM_BF16_THRESHOLD"))
        printf("# ARCOMM_BF16_THRESHOLD=%s\n", getenv("ARCOMM_BF16_THRESHOLD"));
    printf("%12s %7s %10s %9s %10s %9s\n", "bytes", "iters", "sync_us", "busbw", "b2b_us", "busbw");
    pthread_barrier_init(&bar, NULL, (unsigned)nranks);
    pthread_t t[MAX_RANKS];
    struct rank r[MAX_RANKS];
    for (int i = 0; i < nranks; i++) {
        r[i] = (struct rank){.rank = i};
        pthread_create(&t[i], NULL, rank_main, &r[i]);
    }
    for (int i = 0; i < nranks; i++)
        pthread_join(t[i], NULL);
    return 0;
}
