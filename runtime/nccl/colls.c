/* SPDX-License-Identifier: MIT */
/*
 * The collectives: NCCL's datatypes and ops as arcomm's, each call straight to the
 * arcomm collective on the caller's stream (no copy added); the premultiplied sums:
 * each rank's input scaled into a scratch buffer by one kernel (scale.cu), then summed;
 * ncclAvg of integers: the sum, then one kernel dividing it by the ranks.
 */
#include "face.h"

#include <cuda_runtime.h>
#include <string.h>

static const comm_dtype_t dtypes[ncclNumTypes] = {
    [ncclInt8] = COMM_I8,       [ncclUint8] = COMM_U8,    [ncclInt32] = COMM_I32,
    [ncclUint32] = COMM_U32,    [ncclInt64] = COMM_I64,   [ncclUint64] = COMM_U64,
    [ncclFloat16] = COMM_F16,   [ncclFloat32] = COMM_F32, [ncclFloat64] = COMM_F64,
    [ncclBfloat16] = COMM_BF16,
};

static const comm_op_t ops[ncclNumOps] = {
    [ncclSum] = COMM_SUM, [ncclProd] = COMM_PROD, [ncclMax] = COMM_MAX,
    [ncclMin] = COMM_MIN, [ncclAvg] = COMM_AVG,
};

/* NCCL 2.24's fp8 types (after 2.19's ten): what moves them moves bytes. */
enum { NCCL_FP8_E4M3 = 10, NCCL_FP8_E5M2 = 11 };

ncclResult_t nccl_map_dtype(ncclDataType_t t, bool reduces, comm_dtype_t *out, const char *fn)
{
    if (!reduces && ((int)t == NCCL_FP8_E4M3 || (int)t == NCCL_FP8_E5M2)) {
        *out = COMM_U8;
        return ncclSuccess;
    }
    if ((unsigned)t >= ncclNumTypes)
        return nccl_fail(ncclInvalidArgument,
                         "%s: datatype %d is not one of NCCL 2.19's (0 to 9)%s", fn, (int)t,
                         (int)t == NCCL_FP8_E4M3 || (int)t == NCCL_FP8_E5M2
                             ? ": arcomm reduces no fp8 (ncclFloat8e4m3 = 10, ncclFloat8e5m2 = "
                               "11 of later NCCL); broadcast, allgather and alltoall take them "
                               "as bytes"
                             : "");
    *out = dtypes[t];
    return ncclSuccess;
}

/* The op: a built-in one (*premul NULL), or a premultiplied sum of this comm. */
static ncclResult_t map_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t t, comm_op_t *out,
                           const struct nccl_premul **premul, const char *fn)
{
    *premul = NULL;
    if ((unsigned)op < ncclNumOps) {
        *out = ops[op];
        return ncclSuccess;
    }
    unsigned i = (unsigned)op - ncclNumOps;
    if ((unsigned)op < ncclNumOps || i >= NCCL_PREMUL_MAX || !comm->premul[i].used)
        return nccl_fail(ncclInvalidArgument,
                         "%s: op %d is neither a built-in op (0 to 4) nor one that "
                         "ncclRedOpCreatePreMulSum made on this communicator",
                         fn, (int)op);
    if (comm->premul[i].dtype != t)
        return nccl_fail(ncclInvalidArgument,
                         "%s: op %d was made for datatype %d, the call passes datatype %d", fn,
                         (int)op, (int)comm->premul[i].dtype, (int)t);
    *premul = &comm->premul[i];
    *out = COMM_SUM;
    return ncclSuccess;
}

/* The communicator's GPU made current (*prev: the caller's, to give back); a cudaError_t. */
static cudaError_t enter_device(const struct ncclComm *comm, int *prev)
{
    cudaError_t e = (cudaError_t)nccl_current_device(prev);
    if (e == cudaSuccess && *prev != comm->device)
        e = cudaSetDevice(comm->device);
    return e;
}

static void leave_device(const struct ncclComm *comm, int prev)
{
    if (prev != comm->device)
        (void)cudaSetDevice(prev);
}

/*
 * Scales count elements of send into scratch, on stream; *scaled is where.  Eager
 * calls share the communicator's scratch, grown on demand and guarded by an event.  A
 * call on a stream being captured gets scratch of its own in the graph (cudaMallocAsync,
 * freed by premul_done after the collective): cudaMalloc and a wait on an event
 * recorded outside the capture are not allowed there, and every replay then has its
 * own scratch, shared with no eager call.
 */
static ncclResult_t premultiply(struct ncclComm *comm, const struct nccl_premul *pm,
                                const void *send, size_t count, comm_dtype_t dt, void *stream,
                                void **scaled, bool *in_graph, const char *fn)
{
    size_t bytes = count * comm_dtype_size(dt);
    int prev = 0;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    *in_graph = false;
    cudaError_t e = enter_device(comm, &prev);
    if (e == cudaSuccess)
        e = cudaStreamIsCapturing((cudaStream_t)stream, &cap);
    if (e == cudaSuccess && cap == cudaStreamCaptureStatusInvalidated)
        e = cudaErrorStreamCaptureInvalidated;
    if (e == cudaSuccess && cap == cudaStreamCaptureStatusActive) {
        *in_graph = true;
        e = cudaMallocAsync(scaled, bytes, (cudaStream_t)stream);
    } else {
        if (e == cudaSuccess && comm->scratch_done == NULL) {
            cudaEvent_t ev;
            e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
            if (e == cudaSuccess)
                comm->scratch_done = ev;
        }
        if (e == cudaSuccess && comm->scratch_bytes < bytes) {
            /* cudaFree waits for the device: the scratch's readers are done. */
            if (comm->scratch != NULL)
                (void)cudaFree(comm->scratch);
            comm->scratch = NULL;
            comm->scratch_bytes = 0;
            e = cudaMalloc(&comm->scratch, bytes);
            if (e == cudaSuccess)
                comm->scratch_bytes = bytes;
        }
        /* A previous call on another stream may still read the scratch. */
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)comm->scratch_done, 0);
        *scaled = comm->scratch;
    }
    if (e == cudaSuccess)
        e = (cudaError_t)nccl_scale_launch(*scaled, send, count, dt, pm->dev_scalar, pm->host_bits,
                                           stream);
    if (e != cudaSuccess && *in_graph && *scaled != NULL)
        (void)cudaFreeAsync(*scaled, (cudaStream_t)stream);
    leave_device(comm, prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return nccl_fail(
            e == cudaErrorStreamCaptureInvalidated || e == cudaErrorStreamCaptureImplicit ||
                    e == cudaErrorStreamCaptureUnsupported
                ? ncclInvalidUsage
                : ncclUnhandledCudaError,
            "%s: premultiplying on GPU %d: %s%s", fn, comm->device, cudaGetErrorString(e),
            e == cudaErrorStreamCaptureImplicit
                ? " (capture on a stream of your own, not the legacy default stream)"
                : "");
    }
    return ncclSuccess;
}

/* After the collective that read the premultiplied input: the scratch is free again. */
static void premul_done(struct ncclComm *comm, void *stream, void *scaled, bool in_graph)
{
    int prev = 0;
    if (enter_device(comm, &prev) != cudaSuccess)
        return;
    if (in_graph)
        (void)cudaFreeAsync(scaled, (cudaStream_t)stream);
    else
        (void)cudaEventRecord((cudaEvent_t)comm->scratch_done, (cudaStream_t)stream);
    leave_device(comm, prev);
}

static bool integer_dtype(comm_dtype_t dt)
{
    return dt == COMM_I8 || dt == COMM_U8 || dt == COMM_I32 || dt == COMM_U32 || dt == COMM_I64 ||
           dt == COMM_U64;
}

/* ncclAvg of an integer type, as NCCL computes it: the sum (wrapping), then divided by
 * the ranks, truncated toward zero; arcomm's COMM_AVG is for floats only. */
static ncclResult_t post_divide(struct ncclComm *comm, void *buf, size_t count, comm_dtype_t dt,
                                void *stream, const char *fn)
{
    int prev = 0;
    cudaError_t e = enter_device(comm, &prev);
    if (e == cudaSuccess)
        e = (cudaError_t)nccl_divide_launch(buf, count, dt, comm->nranks, stream);
    leave_device(comm, prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return nccl_fail(ncclUnhandledCudaError, "%s: dividing the sum by %d on GPU %d: %s", fn,
                         comm->nranks, comm->device, cudaGetErrorString(e));
    }
    return ncclSuccess;
}

enum kind { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL };

struct call {
    enum kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root;
    void *stream;
};

static ncclResult_t run(struct ncclComm *comm, const struct call *k, const char *fn)
{
    ncclResult_t r = nccl_comm_enter(comm, fn);
    comm_dtype_t dt = COMM_F32;
    comm_op_t op = COMM_SUM;
    const struct nccl_premul *pm = NULL;
    bool reduces = k->kind == K_ALLREDUCE || k->kind == K_REDUCE || k->kind == K_REDUCE_SCATTER;
    if (r == ncclSuccess)
        r = nccl_map_dtype(k->dtype, reduces, &dt, fn);
    if (r == ncclSuccess && reduces)
        r = map_op(comm, k->op, k->dtype, &op, &pm, fn);
    if (r != ncclSuccess)
        return nccl_group_result(r);

    bool int_avg = reduces && op == COMM_AVG && integer_dtype(dt);
    if (int_avg)
        op = COMM_SUM;

    const void *send = k->send;
    void *scaled = NULL;
    bool in_graph = false;
    if (pm != NULL && k->count > 0) {
        size_t n = k->kind == K_REDUCE_SCATTER ? k->count * (size_t)comm->nranks : k->count;
        r = premultiply(comm, pm, send, n, dt, k->stream, &scaled, &in_graph, fn);
        if (r != ncclSuccess)
            return nccl_group_result(r);
        send = scaled;
    }
    comm_status_t st = COMM_ERR_INVALID;
    switch (k->kind) {
    case K_ALLREDUCE:
        st = comm_allreduce(comm->c, send, k->recv, k->count, dt, op, k->stream);
        break;
    case K_BROADCAST:
        st = comm_broadcast(comm->c, send, k->recv, k->count, dt, k->root, k->stream);
        break;
    case K_REDUCE:
        st = comm_reduce(comm->c, send, k->recv, k->count, dt, op, k->root, k->stream);
        break;
    case K_ALLGATHER:
        st = comm_allgather(comm->c, send, k->recv, k->count, dt, k->stream);
        break;
    case K_REDUCE_SCATTER:
        st = comm_reduce_scatter(comm->c, send, k->recv, k->count, dt, op, k->stream);
        break;
    case K_ALLTOALL:
        st = comm_alltoall(comm->c, send, k->recv, k->count, dt, k->stream);
        break;
    }
    if (pm != NULL && k->count > 0)
        premul_done(comm, k->stream, scaled, in_graph);
    if (st != COMM_OK)
        return nccl_group_result(nccl_fail_comm(comm, fn, st));
    if (int_avg && k->count > 0 && (k->kind != K_REDUCE || comm->rank == k->root))
        return nccl_group_result(post_divide(comm, k->recv, k->count, dt, k->stream, fn));
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream)
{
    struct call k = {K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, stream};
    return run(comm, &k, "ncclAllReduce");
}
NCCL_ALIAS(ncclAllReduce);

NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    struct call k = {K_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, stream};
    return run(comm, &k, "ncclBroadcast");
}
NCCL_ALIAS(ncclBroadcast);

/* In place: buff is root's input and everyone's output. */
NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream)
{
    struct call k = {K_BROADCAST, buff, buff, count, datatype, ncclSum, root, stream};
    return run(comm, &k, "ncclBcast");
}
NCCL_ALIAS(ncclBcast);

NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    struct call k = {K_REDUCE, sendbuff, recvbuff, count, datatype, op, root, stream};
    return run(comm, &k, "ncclReduce");
}
NCCL_ALIAS(ncclReduce);

NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct call k = {K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream};
    return run(comm, &k, "ncclAllGather");
}
NCCL_ALIAS(ncclAllGather);

NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream)
{
    struct call k = {K_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, stream};
    return run(comm, &k, "ncclReduceScatter");
}
NCCL_ALIAS(ncclReduceScatter);

NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct call k = {K_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream};
    return run(comm, &k, "ncclAlltoAll");
}
NCCL_ALIAS(ncclAlltoAll);

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                               ncclDataType_t datatype,
                                               ncclScalarResidence_t residence, ncclComm_t comm)
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    ncclResult_t r = nccl_comm_ready(comm, fn);
    comm_dtype_t dt = COMM_F32;
    if (r == ncclSuccess)
        r = nccl_map_dtype(datatype, true, &dt, fn);
    if (r != ncclSuccess)
        return r;
    if (op == NULL || scalar == NULL ||
        (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
        return nccl_fail(ncclInvalidArgument, "%s: op %p, scalar %p, residence %d", fn, (void *)op,
                         scalar, (int)residence);
    for (int i = 0; i < NCCL_PREMUL_MAX; i++) {
        struct nccl_premul *pm = &comm->premul[i];
        if (pm->used)
            continue;
        memset(pm, 0, sizeof(*pm));
        pm->dtype = datatype;
        pm->residence = residence;
        if (residence == ncclScalarHostImmediate)
            memcpy(&pm->host_bits, scalar, comm_dtype_size(dt));
        else
            pm->dev_scalar = scalar;
        pm->used = true;
        *op = (ncclRedOp_t)(ncclNumOps + i);
        return ncclSuccess;
    }
    return nccl_fail(ncclInvalidUsage,
                     "%s: %d premultiplied sums exist on this communicator already; "
                     "ncclRedOpDestroy some",
                     fn, NCCL_PREMUL_MAX);
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum);

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    ncclResult_t r = nccl_comm_ready(comm, "ncclRedOpDestroy");
    if (r != ncclSuccess)
        return r;
    unsigned i = (unsigned)op - ncclNumOps;
    if ((unsigned)op < ncclNumOps || i >= NCCL_PREMUL_MAX || !comm->premul[i].used)
        return nccl_fail(ncclInvalidArgument,
                         "ncclRedOpDestroy: op %d was not made by ncclRedOpCreatePreMulSum on "
                         "this communicator (or was destroyed)",
                         (int)op);
    comm->premul[i].used = false;
    return ncclSuccess;
}
NCCL_ALIAS(ncclRedOpDestroy);
