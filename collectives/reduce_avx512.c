/* SPDX-License-Identifier: MIT */
/*
 * AVX-512 reduction kernels (512-bit vectors, 16 f32 lanes): the primitives the shared
 * kernels of reduce_simd.h are written in.  Only AVX512F and AVX512BW are used: the
 * f16 conversions are the AVX512F forms of vcvtph2ps/vcvtps2ph, and bf16 rounding is
 * done with integer arithmetic because vcvtneps2bf16 (AVX512_BF16) flushes subnormal
 * inputs to zero and would not match the scalar conversion.
 */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,f16c"))),                \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx2,f16c")
#endif

#include "reduce_isa.h"

#include <immintrin.h>

#define RD_W 16

typedef __m512 rd_vf;
typedef __mmask16 rd_mf;
typedef __m512d rd_vd;
typedef __mmask8 rd_md;
typedef __m512i rd_vi;

static inline rd_vf rd_vf_loadu(const void *p)
{
    return _mm512_loadu_ps(p);
}

static inline void rd_vf_storeu(void *p, rd_vf v)
{
    _mm512_storeu_ps(p, v);
}

static inline void rd_vf_store(void *p, rd_vf v, bool nt)
{
    if (nt)
        _mm512_stream_ps(p, v);
    else
        _mm512_storeu_ps(p, v);
}

static inline rd_vf rd_vf_load_f16(const void *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256(p));
}

static inline rd_vf rd_vf_load_bf16(const void *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
}

/* As in reduce_avx2.c: bf16 rounding in the upper half of each lane, NaN made quiet. */
static inline __m512i rd_bf16_hi(rd_vf v)
{
    __m512i b = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i q = _mm512_or_si512(b, _mm512_set1_epi32(0x00400000));
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, q);
}

static inline rd_vf rd_vf_round_bf16(rd_vf v)
{
    return _mm512_castsi512_ps(_mm512_and_si512(rd_bf16_hi(v), _mm512_set1_epi32(-65536)));
}

static inline void rd_vf_store_bf16(void *p, rd_vf v, bool nt)
{
    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(rd_bf16_hi(v), 16));
    if (nt)
        _mm256_stream_si256(p, h);
    else
        _mm256_storeu_si256(p, h);
}

static inline void rd_vf_store_f16(void *p, rd_vf v, bool nt)
{
    __m256i h = _mm512_cvtps_ph(v, 0); /* imm 0: round to nearest even */
    if (nt)
        _mm256_stream_si256(p, h);
    else
        _mm256_storeu_si256(p, h);
}

static inline rd_vf rd_vf_add(rd_vf a, rd_vf b)
{
    return _mm512_add_ps(a, b);
}

static inline rd_vf rd_vf_mul(rd_vf a, rd_vf b)
{
    return _mm512_mul_ps(a, b);
}

static inline rd_vf rd_vf_div(rd_vf a, rd_vf b)
{
    return _mm512_div_ps(a, b);
}

static inline rd_vf rd_vf_set1(float f)
{
    return _mm512_set1_ps(f);
}

/* vmaxps/vminps return the second operand on NaN or equality: callers pass (s, acc). */
static inline rd_vf rd_vf_max(rd_vf s, rd_vf acc)
{
    return _mm512_max_ps(s, acc);
}

static inline rd_vf rd_vf_min(rd_vf s, rd_vf acc)
{
    return _mm512_min_ps(s, acc);
}

static inline rd_mf rd_vf_unord(rd_vf a, rd_vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
}

static inline rd_mf rd_mf_zero(void)
{
    return 0;
}

static inline rd_mf rd_mf_or(rd_mf a, rd_mf b)
{
    return a | b;
}

static inline bool rd_mf_any(rd_mf m)
{
    return m != 0;
}

static inline rd_vd rd_vd_loadu(const void *p)
{
    return _mm512_loadu_pd(p);
}

static inline void rd_vd_storeu(void *p, rd_vd v)
{
    _mm512_storeu_pd(p, v);
}

static inline rd_vd rd_vd_add(rd_vd a, rd_vd b)
{
    return _mm512_add_pd(a, b);
}

static inline rd_vd rd_vd_mul(rd_vd a, rd_vd b)
{
    return _mm512_mul_pd(a, b);
}

static inline rd_vd rd_vd_div(rd_vd a, rd_vd b)
{
    return _mm512_div_pd(a, b);
}

static inline rd_vd rd_vd_set1(double d)
{
    return _mm512_set1_pd(d);
}

static inline rd_vd rd_vd_max(rd_vd s, rd_vd acc)
{
    return _mm512_max_pd(s, acc);
}

static inline rd_vd rd_vd_min(rd_vd s, rd_vd acc)
{
    return _mm512_min_pd(s, acc);
}

static inline rd_md rd_vd_unord(rd_vd a, rd_vd b)
{
    return _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q);
}

static inline rd_md rd_md_zero(void)
{
    return 0;
}

static inline rd_md rd_md_or(rd_md a, rd_md b)
{
    return a | b;
}

static inline bool rd_md_any(rd_md m)
{
    return m != 0;
}

static inline rd_vi rd_vi_loadu(const void *p)
{
    return _mm512_loadu_si512(p);
}

static inline void rd_vi_storeu(void *p, rd_vi v)
{
    _mm512_storeu_si512(p, v);
}

static inline void rd_vi_stream(void *p, rd_vi v)
{
    _mm512_stream_si512(p, v);
}

static inline rd_vi rd_vi_from_vd(rd_vd v)
{
    return _mm512_castpd_si512(v);
}

static inline rd_vi rd_vi8_add(rd_vi a, rd_vi b)
{
    return _mm512_add_epi8(a, b);
}

static inline rd_vi rd_vi8_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epi8(s, acc);
}

static inline rd_vi rd_vi8_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epi8(s, acc);
}

static inline rd_vi rd_vu8_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epu8(s, acc);
}

static inline rd_vi rd_vu8_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epu8(s, acc);
}

/* As in reduce_avx2.c: even bytes multiplied in place, odd bytes shifted down. */
static inline rd_vi rd_vi8_mul(rd_vi a, rd_vi b)
{
    __m512i even = _mm512_mullo_epi16(a, b);
    __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
    return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0xff)),
                           _mm512_slli_epi16(odd, 8));
}

static inline rd_vi rd_vi32_add(rd_vi a, rd_vi b)
{
    return _mm512_add_epi32(a, b);
}

static inline rd_vi rd_vi32_mul(rd_vi a, rd_vi b)
{
    return _mm512_mullo_epi32(a, b);
}

static inline rd_vi rd_vu32_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epu32(s, acc);
}

static inline rd_vi rd_vu32_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epu32(s, acc);
}

static inline rd_vi rd_vi32_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epi32(s, acc);
}

static inline rd_vi rd_vi32_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epi32(s, acc);
}

static inline rd_vi rd_vi64_add(rd_vi a, rd_vi b)
{
    return _mm512_add_epi64(a, b);
}

static inline rd_vi rd_vi64_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epi64(s, acc);
}

static inline rd_vi rd_vi64_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epi64(s, acc);
}

static inline rd_vi rd_vu64_max(rd_vi s, rd_vi acc)
{
    return _mm512_max_epu64(s, acc);
}

static inline rd_vi rd_vu64_min(rd_vi s, rd_vi acc)
{
    return _mm512_min_epu64(s, acc);
}

/* vpmullq is AVX512DQ, not used here: lo*lo + ((hi*lo + lo*hi) << 32), as in avx2. */
static inline rd_vi rd_vi64_mul(rd_vi a, rd_vi b)
{
    __m512i lo = _mm512_mul_epu32(a, b);
    __m512i cross = _mm512_add_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), b),
                                     _mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)));
    return _mm512_add_epi64(lo, _mm512_slli_epi64(cross, 32));
}

#include "reduce_simd.h"

static void rd_fence(void)
{
    _mm_sfence();
}

const struct coll_reduce_ops coll_reduce_ops_avx512 = {
    .name = "avx512",
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
