/* SPDX-License-Identifier: MIT */
/*
 * The cuda-p2p allreduce, host side: one-shot LL rounds in push mode through the peers'
 * device regions (kernels_p2p.cu), every dtype and op, bf16 on the wire for f32 sums from
 * ARCOMM_BF16_THRESHOLD, the fused addend of comm_allreduce_add.  The call plumbing is
 * the host-staged path's (cuda_check_device, cuda_call_begin / cuda_call_end, the device
 * call counters), so CUDA graph capture and the failure records work as there.
 *
 * NOT YET VERIFIED ON A GPU.  Two-shot (reduce-scatter + all-gather through the peers'
 * buffers) for large messages is not written yet: every size takes LL rounds here.
 */
#include "coll_cuda.h"
#include "cuda/p2p.h"
#include "kernels_p2p.h"

comm_status_t coll_cuda_p2p_allreduce(struct comm *c, const struct coll_call *call)
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
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    bool narrow = call->dtype == COMM_F32 && call->op == COMM_SUM && bytes >= x->k.bf16_threshold;
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_kplan plan = cuda_kplan_compute(call->count, wsize, p->area_bytes);
    struct cuda_p2p_ll_args a = {.area_bytes = p->area_bytes};
    for (int r = 0; r < CUDA_MAX_RANKS; r++)
        a.peer[r] = r < c->nranks ? p->peer[r] : NULL;
    cuda_fill_common(c, call, narrow, CUDA_PATH_KERNEL, &a.c);
    for (uint32_t j = 0; j < plan.rounds && st == COMM_OK; j++) {
        a.rlo = (uint64_t)j * plan.round_elems;
        a.rn = call->count - a.rlo < plan.round_elems ? call->count - a.rlo : plan.round_elems;
        a.units = cuda_ll_units(a.rn, wsize);
        a.last = j + 1 == plan.rounds;
        int e = cuda_launch_p2p_ll(&a, cuda_ll_blocks(a.units, x->k.blocks), call->stream);
        if (e != 0)
            st = cuda_launch_failed(c, "the cuda-p2p one-shot launch", e);
    }
    return cuda_call_end(c, call, st, prev);
}
