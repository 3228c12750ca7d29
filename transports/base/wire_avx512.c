/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 (F and BW) wire kernels, 16 f32 lanes: the AVX2 kernels' arithmetic
 * (wire_avx2.c says how each result stays the scalar one) with mask registers for the
 * selections and vpmovdb / vpmovdw for the narrowing stores.  Compiled for that target
 * whatever the build's -march; wire.c calls them only where the CPU and the OS support
 * it.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw")
#endif

#include "wire_kernels.h"

#include <immintrin.h>

#define W 16 /* lanes */

static inline __m512i set1(uint32_t v)
{
    return _mm512_set1_epi32((int)v);
}

static inline __m512 or_ps(__m512 a, __m512i b)
{
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), b));
}

/* wire_sum lane by lane: the IEEE sum, or where either is a NaN the scalar rule. */
static inline __m512 sum_rule(__m512 acc, __m512 v)
{
    __m512 r = _mm512_add_ps(acc, v);
    if (_mm512_cmp_ps_mask(acc, v, _CMP_UNORD_Q) == 0)
        return r;
    const __m512i quiet = set1(0x00400000u);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), or_ps(v, quiet));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q), or_ps(acc, quiet));
}

/* ---- bf16 ---- */

static inline __m512i bf16_round(__m512 f)
{
    __m512i x = _mm512_castps_si512(f);
    __m512i hi = _mm512_srli_epi32(x, 16);
    __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, set1(0x7fffffffu)), set1(0x7f800000u));
    __m512i lsb = _mm512_and_si512(hi, set1(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, set1(0x7fffu)), lsb), 16);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, set1(0x0040u)));
}

static void bf16_encode(const float *src, size_t n, void *dst)
{
    uint16_t *d = dst;
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm256_storeu_si256((__m256i *)(void *)(d + i),
                            _mm512_cvtepi32_epi16(bf16_round(_mm512_loadu_ps(src + i))));
    for (; i < n; i++)
        d[i] = wire_bf16_of(src[i]);
}

static inline __m512 bf16_load(const void *src, size_t i)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const char *)src + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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
        _mm512_storeu_ps(dst + i, bf16_load(src, i));
    for (; i < n; i++)
        dst[i] = bf16_at(src, i);
}

static void bf16_decode_add(const void *src, size_t n, float *acc)
{
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm512_storeu_ps(acc + i, sum_rule(_mm512_loadu_ps(acc + i), bf16_load(src, i)));
    for (; i < n; i++)
        acc[i] = wire_sum(acc[i], bf16_at(src, i));
}

static void bf16_decode_sum(const void *a, const void *b, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + W <= n; i += W)
        _mm512_storeu_ps(dst + i, sum_rule(bf16_load(a, i), bf16_load(b, i)));
    for (; i < n; i++)
        dst[i] = wire_sum(bf16_at(a, i), bf16_at(b, i));
}

/* ---- Block codecs: encode ---- */

#define VB ((int)(WIRE_BLOCK_ELEMS / W)) /* vectors a block */

static inline float block_absmax(const __m512 *v)
{
    __m512i m = _mm512_setzero_si512();
    for (int k = 0; k < VB; k++) {
        __m512i a = _mm512_and_si512(_mm512_castps_si512(v[k]), set1(0x7fffffffu));
        m = _mm512_mask_max_epi32(m, _mm512_cmplt_epi32_mask(a, set1(0x7f800000u)), m, a);
    }
    return wire_float((uint32_t)_mm512_reduce_max_epi32(m));
}

static inline __mmask16 nonfinite(__m512 x)
{
    __m512i a = _mm512_and_si512(_mm512_castps_si512(x), set1(0x7fffffffu));
    return _mm512_cmpgt_epi32_mask(a, set1(0x7f7fffffu));
}

static inline __m512i int8_codes(__m512 x, __m512 scale)
{
    __m512 y = _mm512_roundscale_ps(_mm512_div_ps(x, scale),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-WIRE_INT8_TOP)),
                      _mm512_set1_ps(WIRE_INT8_TOP));
    return _mm512_mask_mov_epi32(_mm512_cvtps_epi32(y), nonfinite(x),
                                 set1((uint32_t)WIRE_INT8_NONFINITE));
}

/* As wire_avx2.c's fp8_codes. */
static inline __m512i fp8_codes(__m512 x, __m512 scale)
{
    __m512i y = _mm512_castps_si512(_mm512_div_ps(x, scale));
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(y, 24), set1(0x80u));
    __m512i a = _mm512_and_si512(y, set1(0x7fffffffu));
    __m512i r = _mm512_or_si512(
        _mm512_slli_epi32(_mm512_sub_epi32(_mm512_srli_epi32(a, 23), set1(120u)), 23),
        _mm512_and_si512(a, set1(0x7fffffu)));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(r, 20), set1(1u));
    r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(r, set1(0x7ffffu)), lsb), 20);
    __m512 sub = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f));
    __m512i subc = _mm512_cvt_roundps_epi32(sub, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_mask_mov_epi32(r, _mm512_cmplt_epi32_mask(a, set1(0x3c800000u)), subc);
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(a, set1(0x43dfffffu)), set1(0x7eu));
    r = _mm512_or_si512(r, sign);
    return _mm512_mask_mov_epi32(r, nonfinite(x), set1(WIRE_FP8_NAN));
}

static inline void block_encode(int fp8, const float *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    const float top = fp8 ? WIRE_FP8_MAX : WIRE_INT8_TOP;
    size_t first = 0;
    for (; first + WIRE_BLOCK_ELEMS <= n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        __m512 v[VB];
        for (int k = 0; k < VB; k++)
            v[k] = _mm512_loadu_ps(src + first + W * k);
        float amax = block_absmax(v);
        float scale = fp8 ? wire_fp8_scale(amax) : wire_int8_scale(amax);
        if (!wire_finite(wire_mul(top, scale))) {
            wire_block_encode_scalar(fp8, src + first, WIRE_BLOCK_ELEMS, scale, out);
            continue;
        }
        memcpy(out, &scale, 4);
        __m512 s = _mm512_set1_ps(scale);
        const __m512i nan = set1(fp8 ? WIRE_FP8_NAN : (uint32_t)WIRE_INT8_NONFINITE);
        for (int k = 0; k < VB; k++) {
            __m512i c;
            if (scale == 0.0f) /* finite elements code 0 */
                c = _mm512_maskz_mov_epi32(nonfinite(v[k]), nan);
            else
                c = fp8 ? fp8_codes(v[k], s) : int8_codes(v[k], s);
            _mm_storeu_si128((__m128i *)(void *)(out + 4 + W * k), _mm512_cvtepi32_epi8(c));
        }
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

static inline __m512 int8_values(const uint8_t *q, __m512 scale)
{
    __m512i c = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q));
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(c), scale);
    __mmask16 nan = _mm512_cmpeq_epi32_mask(c, set1((uint32_t)WIRE_INT8_NONFINITE));
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(set1(0x7fc00000u)));
}

/* As wire_avx2.c's fp8_values. */
static inline __m512 fp8_values(const uint8_t *q, __m512 scale)
{
    __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q));
    __m512i m = _mm512_and_si512(c, set1(0x7fu));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, set1(0x80u)), 24);
    __m512 e =
        _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(m, 20)), _mm512_set1_ps(0x1p120f));
    __m512i bits = _mm512_or_si512(_mm512_castps_si512(e), sign);
    __mmask16 nan = _mm512_cmpeq_epi32_mask(m, set1(WIRE_FP8_NAN));
    bits = _mm512_mask_mov_epi32(bits, nan, _mm512_or_si512(sign, set1(0x7fc00000u)));
    return _mm512_mul_ps(_mm512_castsi512_ps(bits), scale);
}

static inline __m512 block_values(int fp8, const uint8_t *q, __m512 scale)
{
    return fp8 ? fp8_values(q, scale) : int8_values(q, scale);
}

static inline __m512 block_scale_of(const uint8_t *blk)
{
    float scale;
    memcpy(&scale, blk, 4);
    return _mm512_set1_ps(scale);
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
        __m512 sa = block_scale_of(pa), sb = mode == 2 ? block_scale_of(pb) : sa;
        for (int k = 0; k < VB; k++) {
            __m512 va = block_values(fp8, pa + 4 + W * k, sa);
            float *d = dst + first + W * k;
            if (mode == 0)
                _mm512_storeu_ps(d, va);
            else if (mode == 1)
                _mm512_storeu_ps(d, sum_rule(_mm512_loadu_ps(d), va));
            else
                _mm512_storeu_ps(d, sum_rule(va, block_values(fp8, pb + 4 + W * k, sb)));
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

const struct wire_kernels wire_kernels_avx512 = {
    .name = "avx512",
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
