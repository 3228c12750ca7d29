/* SPDX-License-Identifier: MIT */
/*
 * Internal to the host wire codecs (wire.c, wire_avx2.c, wire_avx512.c and their tests).
 *
 * The host encodes and decodes of f32 in one table per instruction set, picked once at
 * run time as the host reductions pick theirs (collectives/reduce.c).  wire_scalar.h
 * defines every byte and every bit: the scalar table is built from it, and the vector
 * tables give the same bytes and bits for every input (tests/wire/test_wire_kernels.c
 * checks each against the scalar one), falling back to wire_scalar.h's functions for a
 * partial last block and for the rare block whose scale is so large that a code times
 * the scale could overflow.
 *
 * Floating-point contraction: no product here is an operand of a sum in the same
 * expression chain the compiler could fuse (decoded values are products, and the sum of
 * two of them is formed after both are rounded), and gcc in ISO mode (-std=c11)
 * defaults to -ffp-contract=off anyway.
 */
#ifndef ARCOMM_BASE_WIRE_KERNELS_H
#define ARCOMM_BASE_WIRE_KERNELS_H

#include "wire.h"

#include <stddef.h>
#include <stdint.h>

/*
 * One instruction set's kernels, indexed by enum wire_codec (WIRE_NONE's entries are
 * NULL: full width needs no codec).  Pointers need only their elements' alignment (f32:
 * 4, bf16 codes: 2, block bytes: 1), no vector's.  src: n f32 elements; the encoded
 * bytes: wire_bytes(row, COMM_F32, n).
 */
struct wire_kernels {
    const char *name;
    /* dst = the encoded bytes of src's n f32 elements. */
    void (*encode[WIRE_COUNT])(const float *src, size_t n, void *dst);
    /* dst[i] = decoded element i. */
    void (*decode[WIRE_COUNT])(const void *src, size_t n, float *dst);
    /* acc[i] = wire_sum(acc[i], decoded element i). */
    void (*decode_add[WIRE_COUNT])(const void *src, size_t n, float *acc);
    /* dst[i] = wire_sum(decoded element i of a, decoded element i of b): two ranks'
     * contributions combined in one pass, a the left operand. */
    void (*decode_sum[WIRE_COUNT])(const void *a, const void *b, size_t n, float *dst);
};

extern const struct wire_kernels wire_kernels_scalar;
#if defined(__x86_64__)
extern const struct wire_kernels wire_kernels_avx2;
extern const struct wire_kernels wire_kernels_avx512;
#endif

/* The kernels the codecs use (the machine's best). */
const struct wire_kernels *wire_kernels_current(void);

/* The kernels of isa ("scalar", "avx2", "avx512") if this machine can run them, else
 * NULL (for tests and benchmarks). */
const struct wire_kernels *wire_kernels_find(const char *isa);

/*
 * The sum of two f32 partials, acc the left operand, as the host reductions combine a
 * sum (collectives/reduce_isa.h coll_rd_op_f32): a NaN acc stays (made quiet), else a
 * NaN v is taken (made quiet), else the IEEE sum.  Spelled out because a compiler may
 * swap the operands of a commutative sum, which changes which NaN wins.
 */
static inline float wire_sum(float acc, float v)
{
    if ((wire_bits(acc) & 0x7fffffffu) > 0x7f800000u)
        return wire_float(wire_bits(acc) | 0x00400000u);
    if ((wire_bits(v) & 0x7fffffffu) > 0x7f800000u)
        return wire_float(wire_bits(v) | 0x00400000u);
    return acc + v;
}

/* A block codec's scalar element code and value (wire_scalar.h), for the vector
 * kernels' fallbacks. */
static inline uint8_t wire_block_code(int fp8, float x, float scale)
{
    return fp8 ? wire_fp8_code(x, scale) : (uint8_t)wire_int8_code(x, scale);
}

static inline float wire_block_value(int fp8, uint8_t q, float scale)
{
    return fp8 ? wire_fp8_value(q, scale) : wire_int8_value((int8_t)q, scale);
}

/* The scale of a block of m f32 elements at x (finite absmax / top), and one block's
 * bytes (scale, then WIRE_BLOCK_ELEMS codes, unused ones zero), both as the scalar
 * codec computes them. */
static inline float wire_block_scale(int fp8, const float *x, size_t m)
{
    float amax = 0.0f;
    for (size_t i = 0; i < m; i++) {
        float a = wire_abs(x[i]);
        amax = wire_finite(a) && a > amax ? a : amax;
    }
    return fp8 ? wire_fp8_scale(amax) : wire_int8_scale(amax);
}

static inline void wire_block_encode_scalar(int fp8, const float *x, size_t m, float scale,
                                            uint8_t *out)
{
    uint8_t q[WIRE_BLOCK_ELEMS] = {0};
    for (size_t i = 0; i < m; i++)
        q[i] = wire_block_code(fp8, x[i], scale);
    memcpy(out, &scale, 4);
    memcpy(out + 4, q, WIRE_BLOCK_ELEMS);
}

#endif /* ARCOMM_BASE_WIRE_KERNELS_H */
