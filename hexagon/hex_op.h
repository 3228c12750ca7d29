/* SPDX-License-Identifier: MIT */
/*
 * The DSP-side allreduce ops and their per-call parameters.  The host computes the
 * parameters (hexagon/hex_params.c) and fills the arguments with pointers
 * valid in the session that runs the op: every buffer is mapped into every session at
 * the session's own address, so pointers never cross sessions.
 *
 * The tensor is ne1 rows of ne0 elements (1D: one row).  This rank reduces rows
 * [row_lo, row_hi) x columns [col_lo, col_hi) of it from every rank's src and writes
 * the result into every rank's dst (n_dsts == n_ranks): reduce-scatter and all-gather
 * in one pass.
 */
#ifndef ARCOMM_HEX_OP_H
#define ARCOMM_HEX_OP_H

#include "hex_fence.h"
#include "hex_platform.h"
#include "hex_status.h"

#include <stdint.h>

#define HEX_MAX_RANKS 16u
#define HEX_BLOCK_MIN 128u   /* elements: the smallest block, one 128-element group */
#define HEX_BLOCK_MAX 65536u /* elements */

enum hex_dtype { HEX_F32 = 0, HEX_F16 = 1 }; /* the values of COMM_F32, COMM_F16 */

enum hex_add_mode {
    HEX_ADD_NONE = 0,
    HEX_ADD_RESIDUAL = 1, /* addend has the layout of dst (add_stride between rows) */
    HEX_ADD_BCAST = 2,    /* addend is one row of ne0 elements, added to every row */
};

/* Computed on the host per call; plain integers, the same in every build. */
struct hex_op_params {
    uint32_t n_ranks;
    uint32_t rank;
    uint32_t dtype;          /* enum hex_dtype */
    uint32_t esize;          /* bytes per element */
    uint32_t ne0;            /* elements per row */
    uint32_t ne1;            /* rows */
    uint32_t src_stride;     /* bytes between rows of src (>= ne0 * esize) */
    uint32_t dst_stride;     /* bytes between rows of dst */
    uint32_t add_stride;     /* bytes between rows of a residual addend */
    uint32_t add_mode;       /* enum hex_add_mode */
    uint32_t row_lo, row_hi; /* this rank's region */
    uint32_t col_lo, col_hi;
    uint32_t n_threads;   /* workers this call uses */
    uint32_t block_elems; /* elements per VTCM block (a multiple of 128) */
    uint32_t vtcm_bytes;  /* VTCM the call needs */
    uint32_t codec;       /* enum hex_wire (hex_wire.h): 0 = full width */
};

struct hex_op_args {
    struct hex_op_params p;
    const uint8_t *src[HEX_MAX_RANKS];           /* every rank's input, mapped in this session */
    uint8_t *dst[HEX_MAX_RANKS];                 /* every rank's output */
    const uint8_t *addend[HEX_MAX_RANKS];        /* every rank's addend (rank j's output gets
                                                  * addend[j]), or NULL without add */
    uint8_t *wire[HEX_MAX_RANKS];                /* with a codec: every rank's staging buffer
                                                  * (this rank's written, the others read) */
    struct hex_fence_slot *fence[HEX_MAX_RANKS]; /* every session's call slot */
    uint32_t seq_entry;                          /* entry fence of this call (never 0) */
    uint32_t seq_exit;                           /* exit fence (never 0) */
    uint32_t timeout_ms;                         /* per fence; 0 = never */
};

/* What the op reports back. */
struct hex_op_result {
    int32_t status;      /* HEX_OK or an error */
    int32_t peer;        /* the session whose fence ended a wait, or -1 */
    int32_t peer_status; /* its status (HEX_ERR_TIMEOUT: it did not arrive) */
    uint32_t stage;      /* 0 entry fence, 1 reduction, 2 exit fence */
    uint64_t dma_bytes;  /* bytes the DMA queues moved */
};

static inline uint32_t hex_round_up(uint32_t v, uint32_t a)
{
    return (v + a - 1) / a * a;
}

/*
 * VTCM layout, shared by the host (which sizes the block to fit) and the DSP (which
 * cuts the buffers).  The API adds each rank's own addend to that rank's output, and a
 * session writes its slice into every rank's output, so with an add there is one output
 * (and one residual) buffer per destination rank:
 *
 *   bias rows      n_ranks rows (row-broadcast add only), each at least two blocks
 *   per worker     n_ranks inputs + (add ? n_ranks : 1) outputs
 *                  + (residual ? n_ranks : 0) addends, each of two block halves
 */
static inline uint32_t hex_vtcm_bias_row_bytes(uint32_t ne0, uint32_t esize, uint32_t block)
{
    /* The last column tile's vector sums read a whole block from its start, past the
     * row's end: room for that, or they would read the next row (or a worker's area
     * while its DMA writes it). */
    uint32_t row = hex_round_up(ne0 * esize, 128) + block * esize;
    uint32_t two_blocks = 2 * block * esize;
    return row > two_blocks ? row : two_blocks;
}

static inline uint32_t hex_vtcm_bias_bytes(uint32_t n_ranks, uint32_t ne0, uint32_t esize,
                                           uint32_t block, uint32_t add_mode)
{
    return add_mode == HEX_ADD_BCAST ? n_ranks * hex_vtcm_bias_row_bytes(ne0, esize, block) : 0;
}

/* Buffers of one worker: inputs, then outputs, then residual addends. */
static inline uint32_t hex_vtcm_thread_bufs(uint32_t n_ranks, uint32_t add_mode)
{
    return n_ranks + (add_mode != HEX_ADD_NONE ? n_ranks : 1) +
           (add_mode == HEX_ADD_RESIDUAL ? n_ranks : 0);
}

static inline uint32_t hex_vtcm_thread_bytes(uint32_t n_ranks, uint32_t esize, uint32_t block,
                                             uint32_t add_mode)
{
    return hex_vtcm_thread_bufs(n_ranks, add_mode) * 2 * block * esize;
}

/* Bytes of VTCM a call needs (64-bit: the host checks before narrowing). */
static inline uint64_t hex_vtcm_need(uint32_t n_ranks, uint32_t ne0, uint32_t esize, uint32_t block,
                                     uint32_t add_mode, uint32_t n_threads)
{
    return (uint64_t)hex_vtcm_bias_bytes(n_ranks, ne0, esize, block, add_mode) +
           (uint64_t)n_threads * hex_vtcm_thread_bytes(n_ranks, esize, block, add_mode);
}

/* op_allreduce and op_allreduce_add: the add mode of p says which. */
void hex_op_allreduce(struct hex_session *s, const struct hex_op_args *a, struct hex_op_result *r);

#endif /* ARCOMM_HEX_OP_H */
