/* SPDX-License-Identifier: MIT */
/*
 * The cuda-p2p allreduce, host side: one-shot LL rounds in push mode through the peers'
 * device regions for small messages, two-shot for large (kernels_p2p.cu), every dtype and op, the
 * fused addend of comm_allreduce_add.  The wire codec (ARCOMM_WIRE from ARCOMM_WIRE_THRESHOLD):
 * bf16 for f32 sums on both paths, int8 and fp8 for f32, f16 and bf16 sums and averages on
 * two-shot (each rank encodes its input once; a slice's owner decodes every rank's blocks, its own
 * included, and sums them in rank order).  The
 * call plumbing is the host-staged path's (cuda_check_device, cuda_call_begin / cuda_call_end, the
 * device call counters), so CUDA graph capture and the failure records work as there.
 *
 * Two-shot from ARCOMM_COPY_THRESHOLD bytes (the path table's default, paths_device.c):
 * reduce-scatter then all-gather through the peers' regions, a launch per round of nranks
 * slices, ARCOMM_CUDA_BLOCKS blocks pipelining the parts of every slice (kernels_p2p.cu).
 *
 * Verified on one GPU (process ranks sharing an H200 under CUDA IPC, 2026-12-01 and -02:
 * tools/gpu-check.sh p2p); not yet on two GPUs.
 */
#include "coll_cuda.h"
#include "cuda/p2p.h"
#include "kernels_p2p.h"

/* One-shot: LL rounds of at most an LL area's payload. */
static comm_status_t one_shot(struct comm *c, const struct coll_call *call, enum wire_codec codec)
{
    bool narrow = codec == WIRE_BF16;
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = x->p2p;
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_kplan plan = cuda_kplan_compute(call->count, wsize, p->area_bytes);
    struct cuda_p2p_ll_args a = {.area_bytes = p->area_bytes};
    for (int r = 0; r < CUDA_MAX_RANKS; r++)
        a.peer[r] = r < c->nranks ? p->peer[r] : NULL;
    cuda_fill_common(c, call, narrow, CUDA_PATH_KERNEL, &a.c);
    for (uint32_t j = 0; j < plan.rounds; j++) {
        a.rlo = (uint64_t)j * plan.round_elems;
        a.rn = call->count - a.rlo < plan.round_elems ? call->count - a.rlo : plan.round_elems;
        a.units = cuda_ll_units(a.rn, wsize);
        a.last = j + 1 == plan.rounds;
        int e = cuda_launch_p2p_ll(&a, cuda_ll_blocks(a.units, x->k.blocks), call->stream);
        if (e != 0)
            return cuda_launch_failed(c, "the cuda-p2p one-shot launch", e);
    }
    return COMM_OK;
}

/* Two-shot: rounds of nranks slices (p2p_layout.h), ARCOMM_CUDA_BLOCKS blocks each (the
 * same on every rank: the geometry agreement compared it).  A block codec (int8, fp8) cuts
 * slices and parts on its blocks, and its encoded blocks fill the RS areas; the all-gather
 * leg carries the owners' results at full width. */
static comm_status_t two_shot(struct comm *c, const struct coll_call *call, enum wire_codec codec)
{
    const struct wire_row *row = wire_row(codec);
    bool blocks_codec = row->block_bytes != 0;
    struct cuda_comm *x = cuda_of(c);
    struct cuda_p2p *p = x->p2p;
    struct cuda_p2p_tplan plan =
        cuda_p2p_tplan_cut(&p->g, call->count, (uint32_t)rt_dtype_size(call->dtype), c->nranks,
                           blocks_codec ? row->block_elems : CUDA_VEC_ELEMS, row->block_bytes);
    struct cuda_p2p_ts_args a = {.g = p->g};
    for (int r = 0; r < CUDA_MAX_RANKS; r++)
        a.peer[r] = r < c->nranks ? p->peer[r] : NULL;
    /* As the copy path: the call's descriptor says that it travels narrowed (bf16 or a
     * block codec: ARCOMM_WIRE, agreed at join, says which), and c.codec names a block
     * codec to the kernels. */
    cuda_fill_common(c, call, codec != WIRE_NONE, CUDA_PATH_COPY, &a.c);
    a.c.codec = blocks_codec ? (int32_t)codec : 0;
    unsigned blocks = x->k.blocks < 1                 ? 1
                      : x->k.blocks > CUDA_MAX_BLOCKS ? CUDA_MAX_BLOCKS
                                                      : x->k.blocks;
    for (uint32_t j = 0; j < plan.rounds; j++) {
        a.rlo = (uint64_t)j * plan.round_elems;
        a.rn = call->count - a.rlo < plan.round_elems ? call->count - a.rlo : plan.round_elems;
        a.last = j + 1 == plan.rounds;
        int e = cuda_launch_p2p_ts(&a, blocks, call->stream);
        if (e != 0)
            return cuda_launch_failed(c, "the cuda-p2p two-shot launch", e);
    }
    return COMM_OK;
}

/* The one-shot LL rounds carry bf16 only (below ARCOMM_COPY_THRESHOLD a call is bound by
 * latency, not bytes); two-shot carries bf16 for f32 sums and the block codecs for sums and
 * averages, as the host-staged copy-engine path does. */
static const struct wire_carry two_shot_carry = {
    .ops = {
        [WIRE_BF16] = WIRE_OPS_SUM, [WIRE_INT8] = WIRE_OPS_SUM_AVG, [WIRE_FP8] = WIRE_OPS_SUM_AVG}};

comm_status_t coll_cuda_p2p_allreduce(struct comm *c, const struct coll_call *call,
                                      const struct coll_plan *plan)
{
    /* The table's one-shot rows end below ARCOMM_COPY_THRESHOLD: where the host-staged
     * transport takes the copy engines, this one takes two-shot. */
    static const struct cuda_allreduce_path small = {one_shot, &cuda_carry_bf16_sums};
    static const struct cuda_allreduce_path large = {two_shot, &two_shot_carry};
    return cuda_allreduce_planned(c, call, plan, &small, &large);
}
