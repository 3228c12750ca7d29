/* SPDX-License-Identifier: MIT */
/*
 * IEEE binary16 <-> binary32 conversions in integer arithmetic.  clang ships no f16
 * conversion helpers for the Hexagon target (no compiler-rt there), and the host
 * emulation must give the same bits as the freestanding DSP build, so both use these.
 * Round to nearest even; subnormals, infinities and NaN (kept quiet) handled.
 */
#ifndef ARCOMM_HEX_F16_H
#define ARCOMM_HEX_F16_H

#include <stdint.h>

static inline uint32_t hex_f32_bits(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    return v.u;
}

static inline float hex_bits_f32(uint32_t u)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = u};
    return v.f;
}

static inline float hex_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* Inf or NaN: keep the payload, quiet NaNs stay quiet */
        return hex_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return hex_bits_f32(sign);
        /* Subnormal: normalise; the value is exact in f32. */
        exp = 113; /* 127 - 15 + 1 */
        while ((man & 0x400u) == 0) {
            man <<= 1;
            exp--;
        }
        man &= 0x3ffu;
        return hex_bits_f32(sign | (exp << 23) | (man << 13));
    }
    return hex_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t hex_f32_to_f16(float f)
{
    uint32_t u = hex_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) /* Inf, or NaN made quiet so that it never turns into Inf */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) /* overflow rounds to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Subnormal or zero in f16: shift the full mantissa, round to nearest even. */
        if (e < -10)
            return sign;
        uint32_t m = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = m >> shift;
        uint32_t rest = m & ((1u << shift) - 1);
        if (rest > half || (rest == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    /* A carry out of the mantissa bumps the exponent, up to Inf: that is correct. */
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

#endif /* ARCOMM_HEX_F16_H */
