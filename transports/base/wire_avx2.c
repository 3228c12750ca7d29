/* SPDX-License-Identifier: MIT */
/*
 * AVX2 wire kernels (8 f32 lanes): the same bytes and bits as the scalar ones
 * (wire_kernels.h), a whole block of int8 or fp8 at a time.  Compiled for that target
 * whatever the build's -march; wire.c calls them only where the CPU (and the OS, which
 * must save the ymm state) support it.
 *
 * How each result stays the scalar one: divisions, products and sums are the same IEEE
 * operations lane by lane; rounding to an integer is vroundps to nearest even (rintf in
 * the default mode); e4m3's rounding is the scalar code's integer arithmetic on the
 * quotient's bits; the NaN rule of a sum is applied with blends, never left to the order
 * of an addition's operands.  A block whose scale times the largest code could overflow
 * (scales near FLT_MAX / 127) and a partial last block go through wire_scalar.h.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif

#include "wire_kernels.h"

#include <immintrin.h>

#define W 8 /* lanes */

static inline __m256i set1(uint32_t v)
{
    return _mm256_set1_epi32((int)v);
}

/* wire_sum lane by lane: the IEEE sum, or where either is a NaN the scalar rule. */
static inline __m256 sum_rule(__m256 acc, __m256 v)
{
    __m256 r = _mm256_add_ps(acc, v);
    __m256 any = _mm256_cmp_ps(acc, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(any) == 0)
        return r;
    __m256 quiet = _mm256_castsi256_ps(set1(0x00400000u));
    r = _mm256_blendv_ps(r, _mm256_or_ps(v, quiet), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_ps(r, _mm256_or_ps(acc, quiet), _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
}

/* ---- bf16 ---- */

/* wire_bf16_of of 8 lanes, in the low 16 bits of each. */
static inline __m256i bf16_round(__m256 f)
{
    __m256i x = _mm256_castps_si256(f);
    __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, set1(0x7fffffffu)), set1(0x7f800000u));
    __m256i lsb = _mm256_and_si256(hi, set1(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, set1(0x7fffu)), lsb), 16);
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, set1(0x0040u)), nan);
}

static void bf16_encode(const float *src, size_t n, void *dst)
{
    uint16_t *d = dst;
    size_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        __m256i a = bf16_round(_mm256_loadu_ps(src + i));
        __m256i b = bf16_round(_mm256_loadu_ps(src + i + W));
        /* packus interleaves the 128-bit lanes: a0-3 b0-3 a4-7 b4-7; put them back. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(d + i), p);
    }
    for (; i < n; i++)
        d[i] = wire_bf16_of(src[i]);
}

static inline __m256 bf16_load(const void *src, size_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const char *)src + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float bf16_at(const void *src, size_t i)
{
    uint16_t b;
    memcpy(&b, (const char *)src + 2 * i, 2);
    return wire_bf16_value(b);
}

static void bf16_decode(const void *src, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm256_storeu_ps(dst + i, bf16_load(src, i));
    for (; i < n; i++)
        dst[i] = bf16_at(src, i);
}

static void bf16_decode_add(const void *src, size_t n, float *acc)
{
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm256_storeu_ps(acc + i, sum_rule(_mm256_loadu_ps(acc + i), bf16_load(src, i)));
    for (; i < n; i++)
        acc[i] = wire_sum(acc[i], bf16_at(src, i));
}

static void bf16_decode_sum(const void *a, const void *b, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm256_storeu_ps(dst + i, sum_rule(bf16_load(a, i), bf16_load(b, i)));
    for (; i < n; i++)
        dst[i] = wire_sum(bf16_at(a, i), bf16_at(b, i));
}

/* ---- Block codecs: encode ---- */

/* The finite absmax of 64 elements: the largest |x| bits below infinity's (for
 * non-negative floats the integer order is the float order). */
static inline float block_absmax(const __m256 *v)
{
    __m256i m = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
        __m256i a = _mm256_and_si256(_mm256_castps_si256(v[k]), set1(0x7fffffffu));
        __m256i fin = _mm256_cmpgt_epi32(set1(0x7f800000u), a);
        m = _mm256_max_epi32(m, _mm256_and_si256(a, fin));
    }
    __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return wire_float((uint32_t)_mm_cvtsi128_si32(h));
}

/* Lanes holding NaN or infinity. */
static inline __m256i nonfinite(__m256 x)
{
    __m256i a = _mm256_and_si256(_mm256_castps_si256(x), set1(0x7fffffffu));
    return _mm256_cmpgt_epi32(a, set1(0x7f7fffffu));
}

/* wire_int8_code of 8 finite-or-not lanes, scale > 0 with 127 * scale finite. */
static inline __m256i int8_codes(__m256 x, __m256 scale)
{
    __m256 y =
        _mm256_round_ps(_mm256_div_ps(x, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    y = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(-WIRE_INT8_TOP)),
                      _mm256_set1_ps(WIRE_INT8_TOP));
    return _mm256_blendv_epi8(_mm256_cvtps_epi32(y), set1((uint32_t)WIRE_INT8_NONFINITE),
                              nonfinite(x));
}

/*
 * wire_fp8_code of 8 lanes, scale > 0 with 448 * scale finite: wire_e4m3_of of the
 * quotient, where a quotient of 448 or more (infinity and NaN included: the scalar code
 * gives those the NaN code, whose value times the scale is not finite, and steps it down
 * to 0x7e) saturates to 0x7e.
 */
static inline __m256i fp8_codes(__m256 x, __m256 scale)
{
    __m256i y = _mm256_castps_si256(_mm256_div_ps(x, scale));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(y, 24), set1(0x80u));
    __m256i a = _mm256_and_si256(y, set1(0x7fffffffu));
    /* Normal e4m3: rebias 127 -> 7, round 23 mantissa bits to 3, nearest even. */
    __m256i r = _mm256_or_si256(
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_srli_epi32(a, 23), set1(120u)), 23),
        _mm256_and_si256(a, set1(0x7fffffu)));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(r, 20), set1(1u));
    r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(r, set1(0x7ffffu)), lsb), 20);
    /* Subnormal e4m3 (below 2^-6): rint(|y| * 512), exact product. */
    __m256 sub = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f));
    __m256i subc =
        _mm256_cvtps_epi32(_mm256_round_ps(sub, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    r = _mm256_blendv_epi8(r, subc, _mm256_cmpgt_epi32(set1(0x3c800000u), a));
    r = _mm256_blendv_epi8(r, set1(0x7eu), _mm256_cmpgt_epi32(a, set1(0x43dfffffu)));
    r = _mm256_or_si256(r, sign);
    return _mm256_blendv_epi8(r, set1(WIRE_FP8_NAN), nonfinite(x));
}

/* 64 codes (8 vectors of 8 int32 lanes) as bytes, in order. */
static inline void store_codes(int fp8, const __m256i *c, uint8_t *out)
{
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int h = 0; h < 2; h++) {
        const __m256i *q = c + 4 * h;
        __m256i b;
        if (fp8)
            b = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]),
                                    _mm256_packus_epi32(q[2], q[3]));
        else
            b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        /* The packs interleave the 128-bit lanes by 32-bit groups. */
        _mm256_storeu_si256((__m256i *)(void *)(out + 32 * h),
                            _mm256_permutevar8x32_epi32(b, order));
    }
}

static inline void block_encode(int fp8, const float *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    const float top = fp8 ? WIRE_FP8_MAX : WIRE_INT8_TOP;
    size_t first = 0;
    for (; first + WIRE_BLOCK_ELEMS <= n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        __m256 v[8];
        for (int k = 0; k < 8; k++)
            v[k] = _mm256_loadu_ps(src + first + W * k);
        float amax = block_absmax(v);
        float scale = fp8 ? wire_fp8_scale(amax) : wire_int8_scale(amax);
        if (!wire_finite(wire_mul(top, scale))) {
            wire_block_encode_scalar(fp8, src + first, WIRE_BLOCK_ELEMS, scale, out);
            continue;
        }
        __m256i c[8];
        __m256 s = _mm256_set1_ps(scale);
        const __m256i nan = set1(fp8 ? WIRE_FP8_NAN : (uint32_t)WIRE_INT8_NONFINITE);
        for (int k = 0; k < 8; k++) {
            if (scale == 0.0f) /* finite elements code 0 */
                c[k] = _mm256_and_si256(nonfinite(v[k]), nan);
            else
                c[k] = fp8 ? fp8_codes(v[k], s) : int8_codes(v[k], s);
        }
        memcpy(out, &scale, 4);
        store_codes(fp8, c, out + 4);
    }
    if (first < n) {
        size_t m = n - first;
        wire_block_encode_scalar(fp8, src + first, m, wire_block_scale(fp8, src + first, m), out);
    }
}

static void int8_encode(const float *src, size_t n, void *dst)
{
    block_encode(0, src, n, dst);
}

static void fp8_encode(const float *src, size_t n, void *dst)
{
    block_encode(1, src, n, dst);
}

/* ---- Block codecs: decode ---- */

/* wire_int8_value of the 8 codes at q. */
static inline __m256 int8_values(const uint8_t *q, __m256 scale)
{
    __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(c), scale);
    __m256i nan = _mm256_cmpeq_epi32(c, set1((uint32_t)WIRE_INT8_NONFINITE));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(set1(0x7fc00000u)), _mm256_castsi256_ps(nan));
}

/* wire_fp8_value of the 8 codes at q: e4m3's magnitude bits shifted to an f32's place
 * are its value times 2^-120 (subnormals too), so one exact product rebiases them. */
static inline __m256 fp8_values(const uint8_t *q, __m256 scale)
{
    __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)q));
    __m256i m = _mm256_and_si256(c, set1(0x7fu));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, set1(0x80u)), 24);
    __m256 e =
        _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(m, 20)), _mm256_set1_ps(0x1p120f));
    __m256i bits = _mm256_or_si256(_mm256_castps_si256(e), sign);
    __m256i nan = _mm256_cmpeq_epi32(m, set1(WIRE_FP8_NAN));
    bits = _mm256_blendv_epi8(bits, _mm256_or_si256(sign, set1(0x7fc00000u)), nan);
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), scale);
}

static inline __m256 block_values(int fp8, const uint8_t *q, __m256 scale)
{
    return fp8 ? fp8_values(q, scale) : int8_values(q, scale);
}

static inline __m256 block_scale_of(const uint8_t *blk)
{
    float scale;
    memcpy(&scale, blk, 4);
    return _mm256_set1_ps(scale);
}

static inline float block_at(int fp8, const void *src, size_t i)
{
    const uint8_t *blk = (const uint8_t *)src + i / WIRE_BLOCK_ELEMS * WIRE_BLOCK_BYTES;
    float scale;
    memcpy(&scale, blk, 4);
    return wire_block_value(fp8, blk[4 + i % WIRE_BLOCK_ELEMS], scale);
}

/* mode 0: dst = a's values; 1: dst = wire_sum(dst, a's); 2: dst = wire_sum(a's, b's). */
static inline void block_decode(int fp8, int mode, const void *a, const void *b, size_t n,
                                float *dst)
{
    const uint8_t *pa = a, *pb = b;
    size_t first = 0;
    for (; first + WIRE_BLOCK_ELEMS <= n; first += WIRE_BLOCK_ELEMS) {
        __m256 sa = block_scale_of(pa), sb = mode == 2 ? block_scale_of(pb) : sa;
        for (int k = 0; k < 8; k++) {
            __m256 va = block_values(fp8, pa + 4 + W * k, sa);
            float *d = dst + first + W * k;
            if (mode == 0)
                _mm256_storeu_ps(d, va);
            else if (mode == 1)
                _mm256_storeu_ps(d, sum_rule(_mm256_loadu_ps(d), va));
            else
                _mm256_storeu_ps(d, sum_rule(va, block_values(fp8, pb + 4 + W * k, sb)));
        }
        pa += WIRE_BLOCK_BYTES;
        if (mode == 2)
            pb += WIRE_BLOCK_BYTES;
    }
    for (size_t i = first; i < n; i++) {
        float va = block_at(fp8, a, i);
        dst[i] = mode == 0   ? va
                 : mode == 1 ? wire_sum(dst[i], va)
                             : wire_sum(va, block_at(fp8, b, i));
    }
}

static void int8_decode(const void *src, size_t n, float *dst)
{
    block_decode(0, 0, src, NULL, n, dst);
}

static void int8_decode_add(const void *src, size_t n, float *acc)
{
    block_decode(0, 1, src, NULL, n, acc);
}

static void int8_decode_sum(const void *a, const void *b, size_t n, float *dst)
{
    block_decode(0, 2, a, b, n, dst);
}

static void fp8_decode(const void *src, size_t n, float *dst)
{
    block_decode(1, 0, src, NULL, n, dst);
}

static void fp8_decode_add(const void *src, size_t n, float *acc)
{
    block_decode(1, 1, src, NULL, n, acc);
}

static void fp8_decode_sum(const void *a, const void *b, size_t n, float *dst)
{
    block_decode(1, 2, a, b, n, dst);
}

const struct wire_kernels wire_kernels_avx2 = {
    .name = "avx2",
    .encode = {[WIRE_BF16] = bf16_encode, [WIRE_INT8] = int8_encode, [WIRE_FP8] = fp8_encode},
    .decode = {[WIRE_BF16] = bf16_decode, [WIRE_INT8] = int8_decode, [WIRE_FP8] = fp8_decode},
    .decode_add =
        {[WIRE_BF16] = bf16_decode_add, [WIRE_INT8] = int8_decode_add, [WIRE_FP8] = fp8_decode_add},
    .decode_sum =
        {[WIRE_BF16] = bf16_decode_sum, [WIRE_INT8] = int8_decode_sum, [WIRE_FP8] = fp8_decode_sum},
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
