/* SPDX-License-Identifier: MIT */
/*
 * AVX2 + F16C reduction kernels (256-bit vectors, 8 f32 lanes): the primitives the
 * shared kernels of reduce_simd.h are written in.  Compiled for that target whatever
 * the build's -march; reduce.c calls them only where the CPU (and the OS, which must
 * save the ymm state) support it.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,f16c")
#endif

#include "reduce_isa.h"

#include <immintrin.h>

#define RD_W 8

typedef __m256 rd_vf;
typedef __m256 rd_mf; /* all-ones lanes where true */
typedef __m256d rd_vd;
typedef __m256d rd_md;
typedef __m256i rd_vi;

static inline rd_vf rd_vf_loadu(const void *p)
{
    return _mm256_loadu_ps(p);
}

static inline void rd_vf_storeu(void *p, rd_vf v)
{
    _mm256_storeu_ps(p, v);
}

static inline void rd_vf_store(void *p, rd_vf v, bool nt)
{
    if (nt)
        _mm256_stream_ps(p, v);
    else
        _mm256_storeu_ps(p, v);
}

static inline rd_vf rd_vf_load_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128(p));
}

static inline rd_vf rd_vf_load_bf16(const void *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p)), 16));
}

/*
 * The bf16 rounding of coll_rd_f32_to_bf16 in every lane, still in the upper 16 bits of
 * each 32-bit lane (the lower 16 are garbage): RNE by integer addition, NaN made quiet.
 */
static inline __m256i rd_bf16_hi(rd_vf v)
{
    __m256i b = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i q = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, q, nan);
}

static inline rd_vf rd_vf_round_bf16(rd_vf v)
{
    return _mm256_castsi256_ps(_mm256_and_si256(rd_bf16_hi(v), _mm256_set1_epi32(-65536)));
}

static inline void rd_vf_store_bf16(void *p, rd_vf v, bool nt)
{
    __m256i r = _mm256_srli_epi32(rd_bf16_hi(v), 16); /* 0 .. 0xffff: packus is exact */
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    if (nt)
        _mm_stream_si128(p, h);
    else
        _mm_storeu_si128(p, h);
}

static inline void rd_vf_store_f16(void *p, rd_vf v, bool nt)
{
    __m128i h = _mm256_cvtps_ph(v, 0); /* imm 0: round to nearest even */
    if (nt)
        _mm_stream_si128(p, h);
    else
        _mm_storeu_si128(p, h);
}

static inline rd_vf rd_vf_add(rd_vf a, rd_vf b)
{
    return _mm256_add_ps(a, b);
}

static inline rd_vf rd_vf_mul(rd_vf a, rd_vf b)
{
    return _mm256_mul_ps(a, b);
}

static inline rd_vf rd_vf_div(rd_vf a, rd_vf b)
{
    return _mm256_div_ps(a, b);
}

static inline rd_vf rd_vf_set1(float f)
{
    return _mm256_set1_ps(f);
}

/* vmaxps/vminps return the second operand on NaN or equality: callers pass (s, acc). */
static inline rd_vf rd_vf_max(rd_vf s, rd_vf acc)
{
    return _mm256_max_ps(s, acc);
}

static inline rd_vf rd_vf_min(rd_vf s, rd_vf acc)
{
    return _mm256_min_ps(s, acc);
}

static inline rd_mf rd_vf_unord(rd_vf a, rd_vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
}

static inline rd_mf rd_mf_zero(void)
{
    return _mm256_setzero_ps();
}

static inline rd_mf rd_mf_or(rd_mf a, rd_mf b)
{
    return _mm256_or_ps(a, b);
}

static inline bool rd_mf_any(rd_mf m)
{
    return _mm256_movemask_ps(m) != 0;
}

static inline rd_vd rd_vd_loadu(const void *p)
{
    return _mm256_loadu_pd(p);
}

static inline void rd_vd_storeu(void *p, rd_vd v)
{
    _mm256_storeu_pd(p, v);
}

static inline rd_vd rd_vd_add(rd_vd a, rd_vd b)
{
    return _mm256_add_pd(a, b);
}

static inline rd_vd rd_vd_mul(rd_vd a, rd_vd b)
{
    return _mm256_mul_pd(a, b);
}

static inline rd_vd rd_vd_div(rd_vd a, rd_vd b)
{
    return _mm256_div_pd(a, b);
}

static inline rd_vd rd_vd_set1(double d)
{
    return _mm256_set1_pd(d);
}

static inline rd_vd rd_vd_max(rd_vd s, rd_vd acc)
{
    return _mm256_max_pd(s, acc);
}

static inline rd_vd rd_vd_min(rd_vd s, rd_vd acc)
{
    return _mm256_min_pd(s, acc);
}

static inline rd_md rd_vd_unord(rd_vd a, rd_vd b)
{
    return _mm256_cmp_pd(a, b, _CMP_UNORD_Q);
}

static inline rd_md rd_md_zero(void)
{
    return _mm256_setzero_pd();
}

static inline rd_md rd_md_or(rd_md a, rd_md b)
{
    return _mm256_or_pd(a, b);
}

static inline bool rd_md_any(rd_md m)
{
    return _mm256_movemask_pd(m) != 0;
}

static inline rd_vi rd_vi_loadu(const void *p)
{
    return _mm256_loadu_si256(p);
}

static inline void rd_vi_storeu(void *p, rd_vi v)
{
    _mm256_storeu_si256(p, v);
}

static inline void rd_vi_stream(void *p, rd_vi v)
{
    _mm256_stream_si256(p, v);
}

static inline rd_vi rd_vi_from_vd(rd_vd v)
{
    return _mm256_castpd_si256(v);
}

static inline rd_vi rd_vi8_add(rd_vi a, rd_vi b)
{
    return _mm256_add_epi8(a, b);
}

static inline rd_vi rd_vi8_max(rd_vi s, rd_vi acc)
{
    return _mm256_max_epi8(s, acc);
}

static inline rd_vi rd_vi8_min(rd_vi s, rd_vi acc)
{
    return _mm256_min_epi8(s, acc);
}

static inline rd_vi rd_vu8_max(rd_vi s, rd_vi acc)
{
    return _mm256_max_epu8(s, acc);
}

static inline rd_vi rd_vu8_min(rd_vi s, rd_vi acc)
{
    return _mm256_min_epu8(s, acc);
}

/*
 * No 8-bit multiply: the low byte of a 16-bit product depends only on the low bytes of
 * its operands, so the even bytes multiply in place and the odd bytes shifted down.
 */
static inline rd_vi rd_vi8_mul(rd_vi a, rd_vi b)
{
    __m256i even = _mm256_mullo_epi16(a, b);
    __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
    return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)),
                           _mm256_slli_epi16(odd, 8));
}

static inline rd_vi rd_vi32_add(rd_vi a, rd_vi b)
{
    return _mm256_add_epi32(a, b);
}

static inline rd_vi rd_vi32_mul(rd_vi a, rd_vi b)
{
    return _mm256_mullo_epi32(a, b);
}

static inline rd_vi rd_vu32_max(rd_vi s, rd_vi acc)
{
    return _mm256_max_epu32(s, acc);
}

static inline rd_vi rd_vu32_min(rd_vi s, rd_vi acc)
{
    return _mm256_min_epu32(s, acc);
}

static inline rd_vi rd_vi32_max(rd_vi s, rd_vi acc)
{
    return _mm256_max_epi32(s, acc);
}

static inline rd_vi rd_vi32_min(rd_vi s, rd_vi acc)
{
    return _mm256_min_epi32(s, acc);
}

static inline rd_vi rd_vi64_add(rd_vi a, rd_vi b)
{
    return _mm256_add_epi64(a, b);
}

/* AVX2 has no 64-bit max/min: compare and blend. */
static inline rd_vi rd_vi64_max(rd_vi s, rd_vi acc)
{
    return _mm256_blendv_epi8(acc, s, _mm256_cmpgt_epi64(s, acc));
}

static inline rd_vi rd_vi64_min(rd_vi s, rd_vi acc)
{
    return _mm256_blendv_epi8(acc, s, _mm256_cmpgt_epi64(acc, s));
}

/* Unsigned: the signed compare of both operands with their sign bits flipped. */
static inline rd_vi rd_vu64_max(rd_vi s, rd_vi acc)
{
    __m256i flip = _mm256_set1_epi64x(INT64_MIN);
    __m256i gt = _mm256_cmpgt_epi64(_mm256_xor_si256(s, flip), _mm256_xor_si256(acc, flip));
    return _mm256_blendv_epi8(acc, s, gt);
}

static inline rd_vi rd_vu64_min(rd_vi s, rd_vi acc)
{
    __m256i flip = _mm256_set1_epi64x(INT64_MIN);
    __m256i lt = _mm256_cmpgt_epi64(_mm256_xor_si256(acc, flip), _mm256_xor_si256(s, flip));
    return _mm256_blendv_epi8(acc, s, lt);
}

/* The low 64 bits of a * b from 32-bit halves: lo*lo + ((hi*lo + lo*hi) << 32). */
static inline rd_vi rd_vi64_mul(rd_vi a, rd_vi b)
{
    __m256i lo = _mm256_mul_epu32(a, b);
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

#include "reduce_simd.h"

static void rd_fence(void)
{
    _mm_sfence();
}

const struct coll_reduce_ops coll_reduce_ops_avx2 = {
    .name = "avx2",
    .reduce_f32 = rd_reduce_f32,
    .reduce_f64 = rd_reduce_f64,
    .reduce_int = rd_reduce_int,
    .avg_f32 = rd_avg_f32,
    .avg_f64 = rd_avg_f64,
    .emit_f32 = rd_emit_f32,
    .emit_add = rd_emit_add,
    .copy = rd_copy,
    .fence = rd_fence,
};

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif /* __x86_64__ */
