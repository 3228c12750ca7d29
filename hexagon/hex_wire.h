/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs on the DSP side of a Hexagon allreduce, in their scalar form.  The
 * per-element arithmetic is transports/base/wire_scalar.h, the same code the host and
 * CUDA use, so a session encodes the bytes wire_encode would and decodes them to the
 * same bits (docs/wire.md).
 *
 * With a codec (hex_op_params.codec != HEX_WIRE_NONE) an op runs:
 *
 *   1. each session encodes its whole input once, whole 64-element blocks split
 *      between its workers, into its own staging buffer (wire[rank]: comm_mem_alloc'd
 *      scratch its peers have mapped, hex_wire_bytes long);
 *   2. the entry fence: every peer's staging buffer is complete, and no peer still
 *      reads the previous call's (that call's exit fence);
 *   3. the workers reduce this rank's region in tiles cut on block boundaries: for
 *      each element, every rank's encoded value decoded in rank order and summed in
 *      f32, the addend of the destination last, rounded once, written to every rank's
 *      output;
 *   4. the exit fence.
 *
 * The tensor must be dense (strides equal to the row bytes): element i of the flat
 * tensor is element i of the encoding.
 */
#ifndef ARCOMM_HEX_WIRE_H
#define ARCOMM_HEX_WIRE_H

#include "hex_op.h"

#include <stdint.h>

/* The values of enum wire_codec (transports/base/wire.h). */
enum hex_wire {
    HEX_WIRE_NONE = 0,
    HEX_WIRE_BF16 = 1, /* f32 inputs only */
    HEX_WIRE_INT8 = 2,
    HEX_WIRE_FP8 = 3,
    HEX_WIRE_COUNT
};

/* Elements of a block of int8 and fp8 (WIRE_BLOCK_ELEMS), and of a reduction tile: the
 * reduction's tiles and its workers' parts start on block boundaries (a region's own
 * ends apart), and the encode splits whole blocks between the workers. */
#define HEX_WIRE_BLOCK      64u
#define HEX_WIRE_TILE_ELEMS 4096u

/* Bytes n elements take in codec (whole blocks for int8 and fp8); 0 for none. */
static inline uint64_t hex_wire_bytes(uint32_t codec, uint64_t n)
{
    if (codec == HEX_WIRE_BF16)
        return 2 * n;
    if (codec == HEX_WIRE_INT8 || codec == HEX_WIRE_FP8)
        return (n + 63) / 64 * 68;
    return 0;
}

/* Does codec apply to dtype on the sessions?  bf16: f32; int8, fp8: f32 and f16. */
static inline int hex_wire_applies(uint32_t codec, uint32_t dtype)
{
    return codec == HEX_WIRE_BF16 ? dtype == HEX_F32
                                  : (codec == HEX_WIRE_INT8 || codec == HEX_WIRE_FP8) &&
                                        (dtype == HEX_F32 || dtype == HEX_F16);
}

/* Encodes blocks [b_lo, b_hi) of 64 elements of the n-element input src into dst (the
 * whole encoding's base). */
void hex_wire_encode(uint32_t codec, uint32_t dtype, const uint8_t *src, uint32_t n, uint32_t b_lo,
                     uint32_t b_hi, uint8_t *dst);

/* Reduces flat elements [lo, hi) of the tensor from every rank's encoding (a->wire) into
 * every rank's output (step 3 above). */
void hex_wire_reduce(const struct hex_op_args *a, uint32_t lo, uint32_t hi);

#endif /* ARCOMM_HEX_WIRE_H */
