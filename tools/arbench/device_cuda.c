/* SPDX-License-Identifier: MIT */
/*
 * arbench's CUDA buffer backend and its NCCL peer (see device_cuda.h).  NCCL is loaded
 * with dlopen, so one build serves machines with and without it, and the comparison
 * runs the same timing code (bench_common.c) over both libraries in one process.
 */
#include "device_cuda.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cuda_ctx {
    int ordinal;
    cudaStream_t stream;
    cudaGraphExec_t graph; /* --graph: the captured call */
};

static int cuda_ok(cudaError_t e, const struct cuda_ctx *c, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "arbench: GPU %d: %s: %s\n", c ? c->ordinal : -1, what, cudaGetErrorString(e));
    return -1;
}

static int dev_alloc(void *ctx, size_t bytes, void **ptr)
{
    struct cuda_ctx *c = ctx;
    if (cuda_ok(cudaSetDevice(c->ordinal), c, "cudaSetDevice"))
        return -1;
    /* One extra element keeps a 0-byte size valid. */
    return cuda_ok(cudaMalloc(ptr, bytes ? bytes : 16), c, "cudaMalloc");
}

static void dev_free(void *ctx, void *ptr)
{
    struct cuda_ctx *c = ctx;
    cudaSetDevice(c->ordinal);
    cudaFree(ptr);
}

static int dev_to_device(void *ctx, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = ctx;
    if (cuda_ok(cudaSetDevice(c->ordinal), c, "cudaSetDevice"))
        return -1;
    if (cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), c,
                "cudaMemcpyAsync to the GPU"))
        return -1;
    return cuda_ok(cudaStreamSynchronize(c->stream), c, "cudaStreamSynchronize");
}

static int dev_to_host(void *ctx, void *dst, const void *src, size_t bytes)
{
    struct cuda_ctx *c = ctx;
    if (cuda_ok(cudaSetDevice(c->ordinal), c, "cudaSetDevice"))
        return -1;
    if (cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), c,
                "cudaMemcpyAsync from the GPU"))
        return -1;
    return cuda_ok(cudaStreamSynchronize(c->stream), c, "cudaStreamSynchronize");
}

/* Every call is followed by this: the time of a call is until its result is there. */
static int dev_sync(void *ctx)
{
    struct cuda_ctx *c = ctx;
    return cuda_ok(cudaStreamSynchronize(c->stream), c, "cudaStreamSynchronize");
}

/* --graph: the rank's stream captured (global mode) around one call, then replayed. */
static int dev_graph_begin(void *ctx)
{
    struct cuda_ctx *c = ctx;
    if (c->graph != NULL) {
        cudaGraphExecDestroy(c->graph);
        c->graph = NULL;
    }
    return cuda_ok(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal), c,
                   "cudaStreamBeginCapture");
}

static int dev_graph_end(void *ctx)
{
    struct cuda_ctx *c = ctx;
    cudaGraph_t g = NULL;
    if (cuda_ok(cudaStreamEndCapture(c->stream, &g), c, "cudaStreamEndCapture"))
        return -1;
    cudaError_t e = cudaGraphInstantiate(&c->graph, g, 0);
    cudaGraphDestroy(g);
    return cuda_ok(e, c, "cudaGraphInstantiate");
}

static int dev_graph_replay(void *ctx)
{
    struct cuda_ctx *c = ctx;
    if (cuda_ok(cudaGraphLaunch(c->graph, c->stream), c, "cudaGraphLaunch"))
        return -1;
    return cuda_ok(cudaStreamSynchronize(c->stream), c, "cudaStreamSynchronize");
}

int bench_cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int bench_cuda_open(int ordinal, struct bench_device *out)
{
    struct cuda_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fprintf(stderr, "arbench: out of memory\n");
        return -1;
    }
    c->ordinal = ordinal;
    if (cuda_ok(cudaSetDevice(ordinal), c, "cudaSetDevice") ||
        cuda_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), c,
                "cudaStreamCreate")) {
        free(c);
        return -1;
    }
    *out = (struct bench_device){
        .name = "cuda",
        .kind = COMM_DEVICE_CUDA,
        .host_visible = false,
        .alloc = dev_alloc,
        .free = dev_free,
        .to_device = dev_to_device,
        .to_host = dev_to_host,
        .sync = dev_sync,
        .graph_begin = dev_graph_begin,
        .graph_end = dev_graph_end,
        .graph_replay = dev_graph_replay,
        .ctx = c,
    };
    return 0;
}

void bench_cuda_close(struct bench_device *d)
{
    struct cuda_ctx *c = d->ctx;
    if (c == NULL)
        return;
    cudaSetDevice(c->ordinal);
    if (c->graph != NULL)
        cudaGraphExecDestroy(c->graph);
    cudaStreamDestroy(c->stream);
    free(c);
    d->ctx = NULL;
}

void *bench_cuda_stream(const struct bench_device *d)
{
    const struct cuda_ctx *c = d->ctx;
    return c ? (void *)c->stream : NULL;
}

/* ---- NCCL, through dlopen: the few declarations used (nccl.h is not needed) ---- */

typedef struct {
    char internal[BENCH_NCCL_ID_BYTES];
} nccl_id_t;
static int (*nccl_get_unique_id)(nccl_id_t *);
static int (*nccl_comm_init_rank)(void **, int, nccl_id_t, int);
static int (*nccl_all_reduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
static int (*nccl_broadcast)(const void *, void *, size_t, int, int, void *, cudaStream_t);
static int (*nccl_reduce)(const void *, void *, size_t, int, int, int, void *, cudaStream_t);
static int (*nccl_all_gather)(const void *, void *, size_t, int, void *, cudaStream_t);
static int (*nccl_reduce_scatter)(const void *, void *, size_t, int, int, void *, cudaStream_t);
static int (*nccl_all_to_all)(const void *, void *, size_t, int, void *, cudaStream_t);
static int (*nccl_comm_destroy)(void *);
static const char *(*nccl_error_string)(int);

int bench_nccl_load(void)
{
    if (nccl_all_reduce != NULL)
        return 0;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        fprintf(stderr,
                "arbench: --compare nccl: cannot load libnccl.so.2 (%s); put NCCL's lib "
                "folder in LD_LIBRARY_PATH\n",
                dlerror());
        return -1;
    }
    *(void **)&nccl_get_unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&nccl_comm_init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&nccl_comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&nccl_error_string = dlsym(h, "ncclGetErrorString");
    *(void **)&nccl_all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&nccl_broadcast = dlsym(h, "ncclBroadcast");
    *(void **)&nccl_reduce = dlsym(h, "ncclReduce");
    *(void **)&nccl_all_gather = dlsym(h, "ncclAllGather");
    *(void **)&nccl_reduce_scatter = dlsym(h, "ncclReduceScatter");
    *(void **)&nccl_all_to_all = dlsym(h, "ncclAlltoAll"); /* NCCL 2.28 and later */
    if (!nccl_get_unique_id || !nccl_comm_init_rank || !nccl_comm_destroy || !nccl_error_string ||
        !nccl_all_reduce || !nccl_broadcast || !nccl_reduce || !nccl_all_gather ||
        !nccl_reduce_scatter) {
        fprintf(stderr, "arbench: libnccl.so.2 lacks the functions arbench uses\n");
        nccl_all_reduce = NULL;
        return -1;
    }
    return 0;
}

int bench_nccl_unique_id(unsigned char id[BENCH_NCCL_ID_BYTES])
{
    nccl_id_t x;
    int e = nccl_get_unique_id(&x);
    if (e != 0) {
        fprintf(stderr, "arbench: ncclGetUniqueId: %s\n", nccl_error_string(e));
        return -1;
    }
    memcpy(id, x.internal, BENCH_NCCL_ID_BYTES);
    return 0;
}

int bench_nccl_init(void **comm, int nranks, const unsigned char id[BENCH_NCCL_ID_BYTES], int rank,
                    int ordinal)
{
    nccl_id_t x;
    memcpy(x.internal, id, BENCH_NCCL_ID_BYTES);
    if (cudaSetDevice(ordinal) != cudaSuccess)
        return -1;
    int e = nccl_comm_init_rank(comm, nranks, x, rank);
    if (e != 0) {
        fprintf(stderr, "arbench: rank %d: ncclCommInitRank: %s\n", rank, nccl_error_string(e));
        return -1;
    }
    return 0;
}

/* ncclDataType_t and ncclRedOp_t values. */
static const int nccl_types[] = {
    [COMM_F32] = 7, [COMM_F16] = 6, [COMM_BF16] = 9, [COMM_F64] = 8, [COMM_I32] = 2,
    [COMM_I64] = 4, [COMM_I8] = 0,  [COMM_U8] = 1,   [COMM_U32] = 3, [COMM_U64] = 5,
};
static const int nccl_ops[] = {
    [COMM_SUM] = 0, [COMM_PROD] = 1, [COMM_MAX] = 2, [COMM_MIN] = 3, [COMM_AVG] = 4,
};

static int nccl_failed(int e, const char *what, size_t count)
{
    if (e == 0)
        return 0;
    fprintf(stderr, "arbench: %s(count %zu): %s\n", what, count, nccl_error_string(e));
    return -1;
}

static int nccl_allreduce_fn(void *ctx, const void *send, void *recv, size_t count,
                             comm_dtype_t dtype, comm_op_t op)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(
        nccl_all_reduce(send, recv, count, nccl_types[dtype], nccl_ops[op], x->comm, x->stream),
        "ncclAllReduce", count);
}

static int nccl_broadcast_fn(void *ctx, const void *send, void *recv, size_t count,
                             comm_dtype_t dtype, int root)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(
        nccl_broadcast(send, recv, count, nccl_types[dtype], root, x->comm, x->stream),
        "ncclBroadcast", count);
}

static int nccl_reduce_fn(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          comm_op_t op, int root)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(
        nccl_reduce(send, recv, count, nccl_types[dtype], nccl_ops[op], root, x->comm, x->stream),
        "ncclReduce", count);
}

static int nccl_allgather_fn(void *ctx, const void *send, void *recv, size_t sendcount,
                             comm_dtype_t dtype)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(
        nccl_all_gather(send, recv, sendcount, nccl_types[dtype], x->comm, x->stream),
        "ncclAllGather", sendcount);
}

static int nccl_reduce_scatter_fn(void *ctx, const void *send, void *recv, size_t recvcount,
                                  comm_dtype_t dtype, comm_op_t op)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(nccl_reduce_scatter(send, recv, recvcount, nccl_types[dtype], nccl_ops[op],
                                           x->comm, x->stream),
                       "ncclReduceScatter", recvcount);
}

static int nccl_alltoall_fn(void *ctx, const void *send, void *recv, size_t count,
                            comm_dtype_t dtype)
{
    const struct bench_nccl_ctx *x = ctx;
    return nccl_failed(nccl_all_to_all(send, recv, count, nccl_types[dtype], x->comm, x->stream),
                       "ncclAlltoAll", count);
}

struct bench_coll bench_nccl_coll(struct bench_nccl_ctx *x)
{
    return (struct bench_coll){
        .allreduce = nccl_allreduce_fn,
        .broadcast = nccl_broadcast_fn,
        .reduce = nccl_reduce_fn,
        .allgather = nccl_allgather_fn,
        .reduce_scatter = nccl_reduce_scatter_fn,
        .alltoall = nccl_all_to_all ? nccl_alltoall_fn : NULL,
        .ctx = x,
    };
}

void bench_nccl_destroy(void *comm)
{
    if (comm != NULL)
        nccl_comm_destroy(comm);
}
