/* SPDX-License-Identifier: MIT */
/*
 * cuda-p2p's broadcast, allgather and alltoall: direct SM copies through the peers' device
 * regions (kernels_p2p.cu, p2p_mv_kernel), rounds of at most a two-shot area of every
 * block, ARCOMM_CUDA_BLOCKS blocks.  The call plumbing is the host-staged path's
 * (cuda_call_begin / cuda_call_end, device counters), so graph capture works as there.
 * Copy engines (cudaMemcpyAsync between the mapped regions) are the alternative to measure.
 *
 * NOT YET VERIFIED ON A GPU.
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
