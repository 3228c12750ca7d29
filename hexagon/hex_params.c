/* SPDX-License-Identifier: MIT */
/*
 * Per-call parameters of a Hexagon allreduce (see hex_params.h).  Host code, kept
 * freestanding so the qemu driver computes its parameters with the same function.
 */
#include "hex_params.h"

#define U32_LIMIT 0xffffffffull

static uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

int32_t hex_params_compute(const struct hex_params_in *in, struct hex_op_params *out)
{
    struct hex_op_params p;
    hex_memset(&p, 0, sizeof(p));
    if (in->n_ranks == 0 || in->n_ranks > HEX_MAX_RANKS || in->rank >= in->n_ranks)
        return HEX_ERR_INVALID;
    if (in->dtype != HEX_F32 && in->dtype != HEX_F16)
        return HEX_ERR_INVALID;
    uint32_t esize = in->dtype == HEX_F32 ? 4 : 2;
    uint64_t row_bytes = in->ne0 * esize;
    uint64_t src_stride = in->src_stride ? in->src_stride : row_bytes;
    uint64_t dst_stride = in->dst_stride ? in->dst_stride : row_bytes;
    uint64_t add_stride = in->add_stride ? in->add_stride : row_bytes;
    /* The DSP addresses 32 bits: every buffer and offset must fit. */
    if (in->ne0 == 0 || in->ne1 == 0 || in->ne0 > U32_LIMIT / esize || in->ne1 > U32_LIMIT ||
        src_stride < row_bytes || dst_stride < row_bytes || add_stride < row_bytes ||
        src_stride * in->ne1 > U32_LIMIT || dst_stride * in->ne1 > U32_LIMIT ||
        add_stride * in->ne1 > U32_LIMIT || (!in->layout_2d && in->ne1 != 1) ||
        (in->add_mode == HEX_ADD_BCAST && !in->layout_2d) || in->add_mode > HEX_ADD_BCAST)
        return HEX_ERR_INVALID;

    p.n_ranks = in->n_ranks;
    p.rank = in->rank;
    p.dtype = in->dtype;
    p.esize = esize;
    p.ne0 = (uint32_t)in->ne0;
    p.ne1 = (uint32_t)in->ne1;
    p.src_stride = (uint32_t)src_stride;
    p.dst_stride = (uint32_t)dst_stride;
    p.add_stride = (uint32_t)add_stride;
    p.add_mode = in->add_mode;

    uint64_t n = in->n_ranks, r = in->rank, slice;
    if (!in->layout_2d) {
        /* Slices cut at 128 elements: every rank's write range starts on its own
         * 128-byte line, so no two sessions write one line. */
        uint64_t chunk = (in->ne0 + n - 1) / n;
        chunk = (chunk + HEX_BLOCK_MIN - 1) / HEX_BLOCK_MIN * HEX_BLOCK_MIN;
        uint64_t lo = min64(r * chunk, in->ne0);
        p.col_lo = (uint32_t)lo;
        p.col_hi = (uint32_t)min64(lo + chunk, in->ne0);
        p.row_lo = 0;
        p.row_hi = 1;
        slice = p.col_hi - p.col_lo;
    } else {
        uint64_t chunk = (in->ne1 + n - 1) / n;
        uint64_t lo = min64(r * chunk, in->ne1);
        p.row_lo = (uint32_t)lo;
        p.row_hi = (uint32_t)min64(lo + chunk, in->ne1);
        p.col_lo = 0;
        p.col_hi = p.ne0;
        slice = (uint64_t)(p.row_hi - p.row_lo) * p.ne0;
    }

    uint64_t threads = slice / HEX_BLOCK_MIN;
    if (threads < 1)
        threads = 1;
    if (threads > in->session_threads)
        threads = in->session_threads;
    if (threads < 1)
        threads = 1;
    p.n_threads = (uint32_t)threads;

    uint64_t block = slice / (2 * threads);
    block = (block + HEX_BLOCK_MIN - 1) / HEX_BLOCK_MIN * HEX_BLOCK_MIN;
    block = min64(block, HEX_BLOCK_MAX);
    if (block < HEX_BLOCK_MIN)
        block = HEX_BLOCK_MIN;
    uint64_t need;
    for (;;) {
        need = hex_vtcm_need(p.n_ranks, p.ne0, esize, (uint32_t)block, p.add_mode, p.n_threads);
        if (need <= in->vtcm_bytes || block <= HEX_BLOCK_MIN)
            break;
        block -= HEX_BLOCK_MIN;
    }
    p.block_elems = (uint32_t)block;
    p.vtcm_bytes = (uint32_t)min64(need, U32_LIMIT);
    *out = p;
    return need <= in->vtcm_bytes ? HEX_OK : HEX_ERR_NOMEM;
}
