/* SPDX-License-Identifier: MIT */
/*
 * f16/bf16 <-> f32 conversions: the scalar ones the rest of arcomm (and the tests) use,
 * and the vectorised f32 -> bf16 narrowing of the BF16 wire format.  The arithmetic
 * lives in reduce_isa.h so that the reduction kernels inline the very same code.
 */
#include "reduce.h"
#include "reduce_isa.h"

float coll_f16_to_f32(uint16_t h)
{
    return coll_rd_f16_to_f32(h);
}

uint16_t coll_f32_to_f16(float f)
{
    return coll_rd_f32_to_f16(f);
}

float coll_bf16_to_f32(uint16_t b)
{
    return coll_rd_bf16_to_f32(b);
}

uint16_t coll_f32_to_bf16_1(float f)
{
    return coll_rd_f32_to_bf16(f);
}

void coll_f32_to_bf16(uint16_t *dst, const float *src, size_t count)
{
    coll_reduce_ops_current()->emit_f32(dst, COMM_BF16, src, NULL, count, false);
}
