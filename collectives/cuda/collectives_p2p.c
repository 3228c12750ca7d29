/* SPDX-License-Identifier: MIT */
/*
 * cuda-p2p's broadcast, allgather and alltoall: direct SM copies through the peers' device
 * regions (kernels_p2p.cu, p2p_mv_kernel), rounds of at most a two-shot area of every
 * block, ARCOMM_CUDA_BLOCKS blocks; reduce_scatter, the two-shot kernel's reduce-scatter
 * half (p2p_rs_kernel); reduce, every rank pushing to the root (p2p_reduce_kernel).  The call
 * plumbing is the host-staged path's (cuda_call_begin / cuda_call_end, device counters), so graph
 * capture works as there. Copy engines (cudaMemcpyAsync between the mapped regions) are the
 * alternative to measure.
 *
 * Verified on one GPU (process ranks sharing an H200 under CUDA IPC, 2026-12-01 and -02:
 * tools/gpu-check.sh p2p); not yet on two GPUs.
 */
#include "coll_cuda.h"
#include "cuda/p2p.h"
#include "kernels_p2p.h"

static int mv_kind(enum coll_kind k)
{
    return k == COLL_BROADCAST   ? CUDA_P2P_MV_BROADCAST
           : k == COLL_ALLGATHER ? CUDA_P2P_MV_ALLGATHER
                                 : CUDA_P2P_MV_ALLTOALL;
}

comm_status_t coll_cuda_p2p_move(struct comm *c, const struct coll_call *call)
{
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = x->p2p;
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK || call->count == 0)
        return st;
    int prev = 0;
    st = cuda_call_begin(c, call, &prev);
    if (st != COMM_OK)
        return st;
    struct cuda_p2p_mv_args a = {
        .g = p->g,
        .block = (uint64_t)call->count * rt_dtype_size(call->dtype),
        .kind = mv_kind(call->kind),
        .root = call->kind == COLL_BROADCAST ? call->root : 0,
    };
    for (int r = 0; r < CUDA_MAX_RANKS; r++)
        a.peer[r] = r < c->nranks ? p->peer[r] : NULL;
    cuda_fill_common(c, call, false, CUDA_PATH_COPY, &a.c);
    unsigned blocks = x->k.blocks < 1                 ? 1
                      : x->k.blocks > CUDA_MAX_BLOCKS ? CUDA_MAX_BLOCKS
                                                      : x->k.blocks;
    uint32_t rounds = cuda_div_up32(a.block, p->g.slice_bytes);
    for (uint32_t j = 0; j < rounds && st == COMM_OK; j++) {
        a.lo = (uint64_t)j * p->g.slice_bytes;
        a.n = a.block - a.lo < p->g.slice_bytes ? a.block - a.lo : p->g.slice_bytes;
        a.last = j + 1 == rounds;
        int e = cuda_launch_p2p_mv(&a, blocks, call->stream);
        if (e != 0)
            st = cuda_launch_failed(c, "the cuda-p2p copy launch", e);
    }
    return cuda_call_end(c, call, st, prev);
}

/* Reduce_scatter (every rank pushes block q of its sendbuf to rank q, each reduces its
 * own: the two-shot reduce-scatter half) and reduce (every rank pushes to the root, which
 * reduces), in rounds of at most a two-shot area (kernels_p2p.cu). */
static comm_status_t reduction(struct comm *c, const struct coll_call *call, bool scatter)
{
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = x->p2p;
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK || call->count == 0)
        return st;
    int prev = 0;
    st = cuda_call_begin(c, call, &prev);
    if (st != COMM_OK)
        return st;
    const size_t es = rt_dtype_size(call->dtype);
    struct cuda_p2p_rs_args a = {
        .g = p->g,
        .sendbuf = call->send,
        .block = call->count,
        .root = scatter ? 0 : call->root,
    };
    for (int r = 0; r < CUDA_MAX_RANKS; r++)
        a.peer[r] = r < c->nranks ? p->peer[r] : NULL;
    cuda_fill_common(c, call, false, CUDA_PATH_COPY, &a.c);
    if (scatter) {
        /* This rank's own contribution is block 'rank' of its sendbuf; the peers' blocks
         * are read from sendbuf + q x count, aligned alike only when a block is a
         * multiple of 16 bytes. */
        a.c.send = (const uint8_t *)call->send + (uint64_t)c->rank * call->count * es;
        a.c.vec = cuda_aligned16(call->send) && cuda_aligned16(call->recv) &&
                  (call->count * es) % 16 == 0;
    }
    unsigned blocks = x->k.blocks < 1                 ? 1
                      : x->k.blocks > CUDA_MAX_BLOCKS ? CUDA_MAX_BLOCKS
                                                      : x->k.blocks;
    struct cuda_p2p_tplan plan = cuda_p2p_tplan_compute(&p->g, call->count, (uint32_t)es, 1);
    for (uint32_t j = 0; j < plan.rounds && st == COMM_OK; j++) {
        a.rlo = (uint64_t)j * plan.slice_cap;
        a.rn = call->count - a.rlo < plan.slice_cap ? call->count - a.rlo : plan.slice_cap;
        a.last = j + 1 == plan.rounds;
        int e = scatter ? cuda_launch_p2p_rs(&a, blocks, call->stream)
                        : cuda_launch_p2p_reduce(&a, blocks, call->stream);
        if (e != 0)
            st = cuda_launch_failed(
                c, scatter ? "the cuda-p2p reduce_scatter launch" : "the cuda-p2p reduce launch",
                e);
    }
    return cuda_call_end(c, call, st, prev);
}

comm_status_t coll_cuda_p2p_reduce_scatter(struct comm *c, const struct coll_call *call)
{
    return reduction(c, call, true);
}

comm_status_t coll_cuda_p2p_reduce(struct comm *c, const struct coll_call *call)
{
    return reduction(c, call, false);
}
