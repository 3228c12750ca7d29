/* SPDX-License-Identifier: MIT */
/*
 * arbench's adapters of arcomm's API (struct bench_coll) and the buffers' device: host
 * memory, comm_mem_alloc segments (--mem-alloc), CUDA device memory (device_cuda.c).
 */
#include "arcomm_side.h"

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
static int arcomm_failed(const struct arcomm_ctx *x, comm_status_t st, const char *what,
                         size_t count)
{
    if (st == COMM_OK)
        return 0;
    fprintf(stderr, "arbench: rank %d: %s(count %zu) failed: %s: %s\n", comm_rank(x->comm), what,
            count, comm_status_string(st), comm_last_error(x->comm));
    return -1;
}

static int coll_allreduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          comm_op_t op)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_allreduce(x->comm, send, recv, count, dtype, op, x->stream),
                         "comm_allreduce", count);
}

static int coll_broadcast(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          int root)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_broadcast(x->comm, send, recv, count, dtype, root, x->stream),
                         "comm_broadcast", count);
}

static int coll_reduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                       comm_op_t op, int root)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_reduce(x->comm, send, recv, count, dtype, op, root, x->stream),
                         "comm_reduce", count);
}

static int coll_allgather(void *ctx, const void *send, void *recv, size_t sendcount,
                          comm_dtype_t dtype)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_allgather(x->comm, send, recv, sendcount, dtype, x->stream),
                         "comm_allgather", sendcount);
}

static int coll_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount,
                               comm_dtype_t dtype, comm_op_t op)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x,
                         comm_reduce_scatter(x->comm, send, recv, recvcount, dtype, op, x->stream),
                         "comm_reduce_scatter", recvcount);
}

static int coll_alltoall(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_alltoall(x->comm, send, recv, count, dtype, x->stream),
                         "comm_alltoall", count);
}

/* arcomm's collectives as a struct bench_coll over x. */
struct bench_coll bench_arcomm_coll(struct arcomm_ctx *x)
{
    return (struct bench_coll){
        .allreduce = coll_allreduce,
        .broadcast = coll_broadcast,
        .reduce = coll_reduce,
        .allgather = coll_allgather,
        .reduce_scatter = coll_reduce_scatter,
        .alltoall = coll_alltoall,
        .ctx = x,
    };
}

/*
 * The buffer backend of one rank: host memory, or (CUDA builds) the device memory of the
 * rank's GPU (ordinal = local rank) with its own stream.  0, or an exit code.
 */
int bench_device_open(comm_device_t kind, int ordinal, struct bench_device *out)
{
    if (kind == COMM_DEVICE_HOST) {
        *out = bench_device_host;
        return 0;
    }
#if ARBENCH_HAVE_CUDA
    if (kind == COMM_DEVICE_CUDA) {
        int n = bench_cuda_count();
        if (ordinal >= n) {
            fprintf(stderr, "arbench: rank %d needs GPU %d, but this process sees %d GPU%s\n",
                    ordinal, ordinal, n, n == 1 ? "" : "s");
            return BENCH_EXIT_USAGE;
        }
        return bench_cuda_open(ordinal, out) ? BENCH_EXIT_FAIL : 0;
    }
#else
    (void)ordinal;
#endif
    fprintf(stderr, "arbench: device %s: this arbench has no buffer backend for it\n",
            bench_device_name(kind));
    return BENCH_EXIT_USAGE;
}

int bench_device_ordinal(comm_device_t kind, int local)
{
#if ARBENCH_HAVE_CUDA
    int n = kind == COMM_DEVICE_CUDA ? bench_cuda_count() : 0;
    return n > 0 ? local % n : local;
#else
    (void)kind;
    return local;
#endif
}

/* --mem-alloc: the buffers under test come from the communicator's segment, where
 * process ranks reach each other's (the one-pass paths). */
static int seg_alloc(void *ctx, size_t bytes, void **ptr)
{
    comm_t *comm = ctx;
    comm_status_t st = comm_mem_alloc(comm, bytes ? bytes : 64, ptr);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: --mem-alloc: %s\n", comm_last_error(comm));
        return -1;
    }
    return 0;
}

static void seg_free(void *ctx, void *ptr)
{
    comm_mem_free(ctx, ptr);
}

void bench_device_use_segment(struct bench_device *dev, comm_t *comm)
{
    dev->alloc = seg_alloc;
    dev->free = seg_free;
    dev->ctx = comm;
}

/* What main refuses before any rank starts, so that each mistake is said once. */
int bench_device_check(comm_device_t kind)
{
    if (kind == COMM_DEVICE_HEXAGON) {
        fprintf(stderr, "arbench: --device hexagon is not supported: arbench has no Hexagon "
                        "buffer backend yet (tests/hexagon exercise the emulated HTP); use "
                        "--device host or cuda\n");
        return BENCH_EXIT_USAGE;
    }
    if (kind == COMM_DEVICE_CUDA && !ARBENCH_HAVE_CUDA) {
        fprintf(stderr, "arbench: --device cuda: this arbench was built without CUDA "
                        "(configure with nvcc in PATH, -Dcuda=enabled)\n");
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

void bench_device_close(struct bench_device *d)
{
#if ARBENCH_HAVE_CUDA
    if (d->kind == COMM_DEVICE_CUDA)
        bench_cuda_close(d);
#else
    (void)d;
#endif
}

void *bench_device_stream(const struct bench_device *d)
{
#if ARBENCH_HAVE_CUDA
    if (d->kind == COMM_DEVICE_CUDA)
        return bench_cuda_stream(d);
#else
    (void)d;
#endif
    return NULL;
}

int bench_init_failed(comm_status_t st)
{
    static atomic_flag said = ATOMIC_FLAG_INIT; /* every thread rank may fail alike */

    /* comm_last_error(NULL) is per thread: this is the failing thread's reason. */
    if (!atomic_flag_test_and_set(&said))
        fprintf(stderr, "arbench: %s (%s)\n", comm_last_error(NULL), comm_status_string(st));
    return st == COMM_ERR_UNSUPPORTED ? BENCH_EXIT_USAGE : BENCH_EXIT_FAIL;
}
