/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' arithmetic on one element, for the host (wire.c) and the device
 * (collectives/cuda/wire_cuda.cu) alike: the same code on both sides, so that a GPU
 * encodes the bytes the host would, and both decode them to the same bits.  Divisions
 * and products are the IEEE round-to-nearest ones on both (__fdiv_rn, __fmul_rn on the
 * device, whatever nvcc's flags; plain operators in C11, which does not contract).
 */
#ifndef ARCOMM_BASE_WIRE_SCALAR_H
#define ARCOMM_BASE_WIRE_SCALAR_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define WIRE_FN static inline __host__ __device__
#else
#define WIRE_FN static inline
#endif

/* Elements in a block of int8 and fp8, and a block's bytes on the wire (wire.h says why). */
#define WIRE_BLOCK_ELEMS 64u
#define WIRE_BLOCK_BYTES (4u + WIRE_BLOCK_ELEMS)
/* The int8 code of a NaN or infinite element (the symmetric codes are -127..127). */
#define WIRE_INT8_NONFINITE (-128)
/* The largest finite e4m3 value, and its NaN code (sign bit apart). */
#define WIRE_FP8_MAX 448.0f
#define WIRE_FP8_NAN 0x7fu
/* A block's scale maps its finite absmax to these codes' largest magnitude. */
#define WIRE_INT8_TOP 127.0f

WIRE_FN uint32_t wire_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

WIRE_FN float wire_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

WIRE_FN float wire_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

WIRE_FN float wire_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

WIRE_FN int wire_finite(float f)
{
    return (wire_bits(f) & 0x7f800000u) != 0x7f800000u;
}

WIRE_FN float wire_abs(float f)
{
    return wire_float(wire_bits(f) & 0x7fffffffu);
}

/* Round to the nearest integer, ties to even (|f| < 2^23: the codes' range). */
WIRE_FN float wire_rint(float f)
{
#ifdef __CUDA_ARCH__
    return rintf(f);
#else
    return __builtin_rintf(f);
#endif
}

/* bf16: round to nearest even; NaN stays NaN (made quiet). */
WIRE_FN uint16_t wire_bf16_of(float f)
{
    uint32_t x = wire_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

WIRE_FN float wire_bf16_value(uint16_t b)
{
    return wire_float((uint32_t)b << 16);
}

/* IEEE half to f32, exactly. */
WIRE_FN float wire_f16_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return wire_float(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return wire_float(sign | ((exp + 112u) << 23) | (mant << 13));
    /* Zero or subnormal: mant * 2^-24, exact in f32. */
    return wire_float(sign | wire_bits((float)mant * 0x1p-24f));
}

/* e4m3: RNE, saturating to +-448; NaN and inf become NaN (e4m3 has no infinity). */
WIRE_FN uint8_t wire_e4m3_of(float f)
{
    uint32_t x = wire_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return (uint8_t)(sign | WIRE_FP8_NAN);
    float af = wire_float(a);
    if (af >= WIRE_FP8_MAX)
        return (uint8_t)(sign | 0x7eu);
    if (af < 0x1p-6f) {
        /* Subnormal e4m3: m * 2^-9, m = 0..7; m = 8 is the smallest normal, code 0x08. */
        return (uint8_t)(sign | (uint8_t)wire_rint(af * 512.0f));
    }
    /* Normal: rebias the exponent (127 -> 7) and round 23 mantissa bits to 3, to nearest
     * even; a carry moves into the exponent as it should. */
    uint32_t r = (((a >> 23) - 120u) << 23) | (a & 0x7fffffu);
    r = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;
    return (uint8_t)(sign | r); /* below 448: at most 0x7e */
}

WIRE_FN float wire_e4m3_value(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = (b >> 3) & 0xfu;
    uint32_t mant = b & 7u;
    if ((b & 0x7fu) == WIRE_FP8_NAN)
        return wire_float(sign | 0x7fc00000u);
    if (exp != 0)
        return wire_float(sign | ((exp + 120u) << 23) | (mant << 20));
    return wire_float(sign | wire_bits((float)mant * 0x1p-9f));
}

/* The scale of a block whose finite absmax is amax (0 for a block of zeros). */
WIRE_FN float wire_int8_scale(float amax)
{
    return wire_div(amax, WIRE_INT8_TOP);
}

WIRE_FN float wire_fp8_scale(float amax)
{
    return wire_div(amax, WIRE_FP8_MAX);
}

/* int8 code of x in a block of the given scale. */
WIRE_FN int8_t wire_int8_code(float x, float scale)
{
    if (!wire_finite(x))
        return (int8_t)WIRE_INT8_NONFINITE;
    if (scale == 0.0f)
        return 0;
    float y = wire_rint(wire_div(x, scale));
    y = y > WIRE_INT8_TOP ? WIRE_INT8_TOP : y < -WIRE_INT8_TOP ? -WIRE_INT8_TOP : y;
    /* Near FLT_MAX, 127 * scale may round past it: one code less keeps it finite. */
    if (!wire_finite(wire_mul(y, scale)))
        y = y > 0.0f ? y - 1.0f : y + 1.0f;
    return (int8_t)y;
}

WIRE_FN float wire_int8_value(int8_t q, float scale)
{
    return q == WIRE_INT8_NONFINITE ? wire_float(0x7fc00000u) : wire_mul((float)q, scale);
}

/* e4m3 code of x in a block of the given scale. */
WIRE_FN uint8_t wire_fp8_code(float x, float scale)
{
    if (!wire_finite(x))
        return (uint8_t)WIRE_FP8_NAN;
    if (scale == 0.0f)
        return 0;
    uint8_t c = wire_e4m3_of(wire_div(x, scale));
    /* Near FLT_MAX, 448 * scale may round past it: one code less keeps it finite. */
    if (!wire_finite(wire_mul(wire_e4m3_value(c), scale)))
        c--;
    return c;
}

WIRE_FN float wire_fp8_value(uint8_t c, float scale)
{
    return wire_mul(wire_e4m3_value(c), scale);
}

#endif /* ARCOMM_BASE_WIRE_SCALAR_H */
