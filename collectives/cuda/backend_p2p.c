/* SPDX-License-Identifier: MIT */
/*
 * The cuda-p2p backend: GPUs of one host that reach each other (every pair with peer
 * access, or process ranks sharing one GPU), with staging and flags in device memory
 * mapped into every peer (transports/cuda/p2p.c).  Allreduce and allreduce_add take the
 * peer-to-peer one-shot and two-shot paths (allreduce_p2p.c), broadcast, allgather and
 * alltoall direct copies, reduce_scatter the two-shot reduce-scatter half, reduce a push
 * to the root (collectives_p2p.c); a single rank takes the host-staged path's local copy
 * or reduction (collectives_cuda.c).  The host-staged transport's pinned segment stays
 * under every cuda-p2p communicator: it carries the control lines.
 *
 * Not yet verified on two GPUs (on one, process ranks sharing it, it is): listed after the
 * host-staged "cuda" backend, whose probe accepts every CUDA communicator first, so only
 * ARCOMM_TRANSPORT=cuda-p2p (or the config's transport) selects it (p2p_layout.h,
 * CUDA_P2P_VERIFIED).
 */
#include "backend.h"
#include "coll_cuda.h"
#include "p2p/p2p.h"
#include "cuda/p2p.h"
#include "shm/shm.h"

static uint64_t size_number(size_t v)
{
    return v == RT_SIZE_OFF ? UINT64_MAX : v;
}

static comm_status_t p2p_backend_setup(struct comm *c)
{
    struct coll_paths_overrides ov;
    comm_status_t st = cuda_paths_parse(c, &ov);
    if (st != COMM_OK)
        return st;
    /* The host-staged knobs, as the "cuda" backend resolves them (same table). */
    struct rt_knobs k = c->knobs;
    coll_cuda_knobs.used(&k, NULL, 0, false);
    struct cuda_knobs ck = {
        .copy_threshold = size_number(k.cuda.copy_threshold),
        .bf16_threshold = k.wire == WIRE_BF16 ? size_number(k.wire_threshold) : UINT64_MAX,
        .wire = (uint32_t)k.wire,
        .wire_threshold = size_number(k.wire_threshold),
        .chunk_knob = k.cuda.copy_chunk_bytes == RT_SIZE_AUTO ? 0 : k.cuda.copy_chunk_bytes,
        .staging_bytes = k.cuda.staging_bytes,
        .blocks = (uint32_t)k.cuda.blocks,
    };
    st = cuda_setup(c, &ck);
    if (st != COMM_OK)
        return st;
    st = cuda_p2p_setup(c);
    if (st == COMM_OK)
        st = cuda_paths_setup(c, &ov);
    if (st != COMM_OK) {
        /* The peers wait in setup too: tell them now rather than at their timeout. */
        shm_setup_failed(c, st);
        cuda_teardown(c);
    }
    return st;
}

static comm_status_t p2p_allreduce(struct comm *c, const struct coll_call *call)
{
    struct coll_plan plan;
    cuda_plan(c, call, &plan);
    comm_status_t st = coll_cuda_p2p_allreduce(c, call, &plan);
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

/* Broadcast, allgather, alltoall: direct copies between ranks; reduce_scatter and reduce:
 * direct through the peers' regions (collectives_p2p.c).  The local row (one rank): a
 * local copy or reduction, the host-staged way. */
static comm_status_t p2p_other(struct comm *c, const struct coll_call *call)
{
    struct coll_plan plan;
    cuda_plan(c, call, &plan);
    comm_status_t st;
    if (plan.path == COLL_PATH_LOCAL)
        st = coll_cuda_staged(c, call, &plan);
    else if (call->kind == COLL_REDUCE_SCATTER)
        st = coll_cuda_p2p_reduce_scatter(c, call);
    else if (call->kind == COLL_REDUCE)
        st = coll_cuda_p2p_reduce(c, call);
    else
        st = coll_cuda_p2p_move(c, call);
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

static comm_status_t p2p_barrier(struct comm *c)
{
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK)
        return st;
    return coll_host_barrier(c);
}

const struct backend_ops coll_cuda_p2p_backend = {
    .name = "cuda-p2p",
    .device = COMM_DEVICE_CUDA,
    .knobs = &coll_cuda_knobs,
    .probe = cuda_p2p_probe,
    .setup = p2p_backend_setup,
    .teardown = cuda_paths_teardown,
    .resolve_knobs = NULL,
    .validate = cuda_validate,
    .allreduce = p2p_allreduce,
    .allreduce_add = p2p_allreduce,
    .barrier = p2p_barrier,
    .broadcast = p2p_other,
    .reduce = p2p_other,
    .allgather = p2p_other,
    .reduce_scatter = p2p_other,
    .alltoall = p2p_other,
    .p2p = coll_cuda_p2p,
    .p2p_poll = coll_cuda_p2p_poll,
    .p2p_end = coll_cuda_p2p_end,
    .p2p_self = coll_cuda_p2p_self,
    .publish_failure = cuda_publish_failure,
    .wake = shm_wake,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
};
