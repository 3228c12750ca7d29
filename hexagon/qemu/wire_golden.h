/* SPDX-License-Identifier: MIT */
/*
 * Known answers of the wire codecs on a Hexagon allreduce, shared by the qemu driver
 * (which runs the DSP code, as real Hexagon code, and must reproduce them) and by
 * tests/hexagon/test_hex_wire.c (which computes them on the host with wire_encode and
 * wire_decode, the contract's reference, and must reproduce them too): so the DSP's
 * encodings and sums are the host's bytes.
 *
 * 3 ranks, 1000 elements (bias: 10 rows of 100); inputs with outliers, signed zero
 * blocks, f32 subnormals, values near FLT_MAX and an infinity; each case's hash is
 * FNV-1a over every rank's encoding (in rank order), and over every rank's output, NaNs
 * made canonical first (a NaN's payload is not part of the contract).
 */
#ifndef ARCOMM_HEX_WIRE_GOLDEN_H
#define ARCOMM_HEX_WIRE_GOLDEN_H

#include "hex_f16.h"

#include <stdint.h>

#define WG_RANKS    3u
#define WG_COUNT    1000u
#define WG_BIAS_NE0 100u

struct wg_case {
    uint32_t codec;    /* enum hex_wire */
    uint32_t dtype;    /* enum hex_dtype */
    uint32_t add_mode; /* enum hex_add_mode */
    uint32_t enc_hash; /* every rank's encoding */
    uint32_t out_hash; /* every rank's output */
};

static const struct wg_case wg_cases[] = {
    {1, 0, 0, 0x961a0cfbu, 0x14d43917u}, {1, 0, 1, 0x961a0cfbu, 0x8121e03du},
    {1, 0, 2, 0x961a0cfbu, 0xb090e6dbu}, {2, 0, 0, 0x1eee0680u, 0x54c2c375u},
    {2, 0, 1, 0x1eee0680u, 0xa9e390bau}, {2, 0, 2, 0x1eee0680u, 0x65d588b7u},
    {2, 1, 0, 0x28352d42u, 0xf853c1f5u}, {2, 1, 1, 0x28352d42u, 0x7853659eu},
    {2, 1, 2, 0x28352d42u, 0xb7a0e15eu}, {3, 0, 0, 0x4387ef48u, 0x659dc99bu},
    {3, 0, 1, 0x4387ef48u, 0x7921db8bu}, {3, 0, 2, 0x4387ef48u, 0xb939a0c0u},
    {3, 1, 0, 0xba6cb989u, 0xa16cdc6au}, {3, 1, 1, 0xba6cb989u, 0x0850978au},
    {3, 1, 2, 0xba6cb989u, 0x49d747fau},
};
#define WG_N_CASES (sizeof(wg_cases) / sizeof(wg_cases[0]))

static inline uint32_t wg_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline float wg_uniform(uint32_t h) /* [-4, 4), a full mantissa */
{
    return (float)(int32_t)(h >> 8) * (1.0f / 2097152.0f) - 4.0f;
}

/* Element i of rank r's input, as f32 (an f16 input holds hex_f32_to_f16 of it). */
static inline float wg_input(uint32_t r, uint32_t i)
{
    uint32_t h = wg_mix(r * 0x9e3779b9u + i * 0x85ebca6bu + 1u);
    if (r == 1 && i == 40)
        return hex_bits_f32(0x7f800000u); /* inf: that element alone turns NaN */
    if (r == 0 && i >= 128 && i < 192)
        return hex_bits_f32((i & 1u) << 31); /* a block of signed zeros: scale 0 */
    /* Exact ties of the codes' rounding: int8 with scale 1 (absmax 127), and e4m3's
     * subnormal steps (2^-9) with scale 1 (absmax 448). */
    if (r == 0 && i >= 320 && i < 384)
        return i == 320 ? 127.0f : (float)(int32_t)(i % 20u) - 9.5f;
    if (r == 2 && i >= 384 && i < 448)
        return i == 384 ? 448.0f : ((float)(i % 7u) + 0.5f) * (1.0f / 512.0f);
    if (i % 53u == 7u)
        return wg_uniform(h) * 1000.0f; /* outliers */
    if (i % 61u == 11u)
        return hex_bits_f32(h & 0x807fffffu); /* f32 subnormals */
    if (r == 2 && i % 89u == 5u)
        return hex_bits_f32((h & 0x80000000u) | 0x7f7f0000u | (h & 0xffffu)); /* ~3.4e38 */
    return wg_uniform(h);
}

static inline float wg_addend(uint32_t r, uint32_t i)
{
    return wg_uniform(wg_mix(r * 7919u + i * 13u + 99u));
}

static inline uint32_t wg_hash(uint32_t h, const uint8_t *p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

#define WG_HASH_START 2166136261u

/* Element i of an output of dtype, NaN made canonical, into the hash. */
static inline uint32_t wg_hash_out(uint32_t h, uint32_t dtype, const uint8_t *out, uint32_t i)
{
    if (dtype == 0) {
        uint32_t u;
        __builtin_memcpy(&u, out + 4u * i, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            u = 0x7fc00000u;
        return wg_hash(h, (const uint8_t *)&u, 4);
    }
    uint16_t v;
    __builtin_memcpy(&v, out + 2u * i, 2);
    if ((v & 0x7fffu) > 0x7c00u)
        v = 0x7e00u;
    return wg_hash(h, (const uint8_t *)&v, 2);
}

#endif /* ARCOMM_HEX_WIRE_GOLDEN_H */
