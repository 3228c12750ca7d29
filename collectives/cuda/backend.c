/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend: GPUs of one host on the CUDA transport (the shm segment, registered
 * with CUDA), with the kernel and copy-engine paths of allreduce_cuda.c and the staged
 * collectives of collectives_cuda.c, every dtype and op; each call's path from its plan
 * (plan_cuda.c, the path table of paths_device.c).
 */
#include "backend.h"
#include "coll_cuda.h"
#include "p2p/p2p.h"
#include "cuda/cuda_comm.h"
#include "shm/shm.h"

static uint64_t size_number(size_t v)
{
    return v == RT_SIZE_OFF ? UINT64_MAX : v;
}

/* The CUDA knobs as coll_cuda_knobs resolves them (the one formula, arinfo's too), into
 * the backend's own state (c->knobs stays as set). */
static void resolve_knobs(const struct rt_knobs *set, struct cuda_knobs *out)
{
    struct rt_knobs k = *set;
    coll_cuda_knobs.used(&k, NULL, 0, false);
    out->copy_threshold = size_number(k.cuda.copy_threshold);
    /* ARCOMM_WIRE=bf16 from ARCOMM_WIRE_THRESHOLD (auto: ARCOMM_BF16_THRESHOLD). */
    out->bf16_threshold = k.wire == WIRE_BF16 ? size_number(k.wire_threshold) : UINT64_MAX;
    out->wire = (uint32_t)k.wire;
    out->wire_threshold = size_number(k.wire_threshold);
    /* 0 asks cuda_copy_chunk for clamp(bytes/2, ...); the table refuses "off". */
    out->chunk_knob = k.cuda.copy_chunk_bytes == RT_SIZE_AUTO ? 0 : k.cuda.copy_chunk_bytes;
    /* A number: the table refuses "off" and reads "auto" as its default (32M). */
    out->staging_bytes = k.cuda.staging_bytes;
    out->blocks = (uint32_t)k.cuda.blocks;
}

/* ARCOMM_PATHS and the knobs first (the transport sizes its staging from them), the path
 * table once the ranks met. */
static comm_status_t cuda_backend_setup(struct comm *c)
{
    struct coll_paths_overrides ov;
    comm_status_t st = cuda_paths_parse(c, &ov);
    if (st != COMM_OK)
        return st;
    struct cuda_knobs k;
    resolve_knobs(&c->knobs, &k);
    st = cuda_setup(c, &k);
    if (st != COMM_OK)
        return st;
    st = cuda_paths_setup(c, &ov);
    if (st != COMM_OK) {
        /* The peers wait in setup too: tell them now rather than at their timeout. */
        shm_setup_failed(c, st);
        cuda_teardown(c);
    }
    return st;
}

static const char *kind_name(enum coll_kind kind)
{
    switch (kind) {
    case COLL_ALLREDUCE:
        return "allreduce";
    case COLL_BROADCAST:
        return "broadcast";
    case COLL_REDUCE:
        return "reduce";
    case COLL_ALLGATHER:
        return "allgather";
    case COLL_REDUCE_SCATTER:
        return "reduce_scatter";
    case COLL_ALLTOALL:
        return "alltoall";
    default:
        return "this collective";
    }
}

static bool float_dtype(comm_dtype_t t)
{
    return t == COMM_F32 || t == COMM_F16 || t == COMM_BF16 || t == COMM_F64;
}

comm_status_t cuda_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    /* The same answer on every rank, before any memory is touched: every collective,
     * dtype and op, except AVG of an integer type. */
    bool reduces = call->kind == COLL_ALLREDUCE || call->kind == COLL_REDUCE ||
                   call->kind == COLL_REDUCE_SCATTER;
    if (call->kind < COLL_ALLREDUCE || call->kind > COLL_ALLTOALL) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the CUDA transport has no collective of kind %d (GPU %d); use a "
                 "host communicator for it",
                 c->rank, fn, (int)call->kind, c->device_index);
        return COMM_ERR_UNSUPPORTED;
    }
    if ((unsigned)call->dtype > COMM_U64 || rt_dtype_size(call->dtype) == 0) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the CUDA transport does not know dtype %d (GPU %d); pass a "
                 "comm_dtype_t of this library's version",
                 c->rank, fn, (int)call->dtype, c->device_index);
        return COMM_ERR_UNSUPPORTED;
    }
    if (reduces && (unsigned)call->op > COMM_AVG) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: the CUDA transport does not know op %d (GPU %d); pass a "
                 "comm_op_t of this library's version",
                 c->rank, fn, (int)call->op, c->device_index);
        return COMM_ERR_UNSUPPORTED;
    }
    if (reduces && call->op == COMM_AVG && !float_dtype(call->dtype)) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: %s of %s on GPU %d: AVG is defined for float dtypes only (f32, "
                 "f16, bf16, f64); use COMM_SUM and divide",
                 c->rank, fn, kind_name(call->kind), rt_dtype_name(call->dtype), c->device_index);
        return COMM_ERR_UNSUPPORTED;
    }
    return COMM_OK;
}

static comm_status_t cuda_allreduce(struct comm *c, const struct coll_call *call)
{
    struct coll_plan plan;
    cuda_plan(c, call, &plan);
    comm_status_t st = coll_cuda_allreduce(c, call, &plan);
    /* The call is enqueued, and comm_destroy drains it before it leaves: a rank that
     * completed it never fails a peer's. */
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

/* Broadcast, reduce, allgather, reduce_scatter, alltoall: call->kind says which. */
static comm_status_t cuda_staged(struct comm *c, const struct coll_call *call)
{
    struct coll_plan plan;
    cuda_plan(c, call, &plan);
    comm_status_t st = coll_cuda_staged(c, call, &plan);
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

static comm_status_t cuda_barrier(struct comm *c)
{
    /* A CUDA rank's GPU may have failed after its last call returned: say so here. */
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK)
        return st;
    return coll_host_barrier(c);
}

const struct backend_ops coll_cuda_backend = {
    .name = "cuda",
    .device = COMM_DEVICE_CUDA,
    .knobs = &coll_cuda_knobs,
    .probe = cuda_probe,
    .setup = cuda_backend_setup,
    .teardown = cuda_paths_teardown,
    .resolve_knobs = NULL, /* resolved before setup, into struct cuda_comm (above) */
    .validate = cuda_validate,
    .allreduce = cuda_allreduce,
    .allreduce_add = cuda_allreduce,
    .barrier = cuda_barrier,
    .broadcast = cuda_staged,
    .reduce = cuda_staged,
    .allgather = cuda_staged,
    .reduce_scatter = cuda_staged,
    .alltoall = cuda_staged,
    .p2p = coll_cuda_p2p,
    .p2p_poll = coll_cuda_p2p_poll,
    .p2p_end = coll_cuda_p2p_end,
    .p2p_self = coll_cuda_p2p_self,
    .publish_failure = cuda_publish_failure,
    .wake = shm_wake,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
};
