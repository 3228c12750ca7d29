/* SPDX-License-Identifier: MIT */
/*
 * Per-call parameters of a Hexagon allreduce, computed on the host for each rank's
 * session: the rank's slice, the worker count, the VTCM block (shrunk to fit).  Plain
 * C without host headers: the qemu test driver, built freestanding for Hexagon, uses
 * the same function.
 */
#ifndef ARCOMM_HEX_PARAMS_H
#define ARCOMM_HEX_PARAMS_H

#include "hex_op.h"

#include <stdint.h>

struct hex_params_in {
    uint32_t n_ranks;
    uint32_t rank;
    uint32_t dtype;      /* enum hex_dtype */
    uint64_t ne0;        /* elements per row (1D: all elements) */
    uint64_t ne1;        /* rows (1D: 1) */
    int layout_2d;       /* slice by rows: rows are padded or a bias is broadcast */
    uint64_t src_stride; /* bytes between rows; 0 = dense */
    uint64_t dst_stride;
    uint64_t add_stride;
    uint32_t add_mode;        /* enum hex_add_mode */
    uint32_t session_threads; /* HVX threads of the session */
    uint32_t vtcm_bytes;      /* VTCM of the session */
};

/*
 * Fills *out.  HEX_OK; HEX_ERR_NOMEM when even 128-element blocks do not fit the VTCM
 * (out->vtcm_bytes then holds what they would need); HEX_ERR_INVALID when the tensor
 * does not fit the DSP's 32-bit addressing or the layout is inconsistent.
 *
 *   1D: chunk = round_up(ceil(nelem / n), 128) elements; rank r: [r chunk, (r+1) chunk)
 *   2D: chunk = ceil(ne1 / n) rows
 *   n_threads = min(session threads, max(1, slice / 128))
 *   block = min(65536, round_up(slice / (2 n_threads), 128)), at least 128, then
 *           lowered by 128 while the VTCM layout (hex_vtcm_need) does not fit
 */
int32_t hex_params_compute(const struct hex_params_in *in, struct hex_op_params *out);

#endif /* ARCOMM_HEX_PARAMS_H */
