/* SPDX-License-Identifier: MIT */
/*
 * Internal to the host reduction kernels (reduce*.c, convert.c and their tests).
 *
 * coll_reduce (reduce.c) cuts a reduction into blocks of a few KiB and drives one table
 * of kernels per instruction set over each block.  The scalar element functions below
 * define every result: the generic kernels are built from them, and the vector kernels
 * fall back to them for tails and for any vector that holds a NaN, so every path gives
 * the same bits for every input.
 *
 * Floating-point contraction: these files have no multiplications, so no FMA can be
 * formed, and gcc in ISO mode (-std=c11, which meson's c_std=c11 selects) defaults to
 * -ffp-contract=off anyway.  No -ffast-math: gcc then never reassociates the sums.
 */
#ifndef ARCOMM_COLL_REDUCE_ISA_H
#define ARCOMM_COLL_REDUCE_ISA_H

#include "reduce.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* How one source element becomes an f32 accumulator value. */
enum coll_rd_kind {
    COLL_RD_F32,      /* f32 as is */
    COLL_RD_F16,      /* f16, widened exactly */
    COLL_RD_BF16,     /* bf16, widened exactly (also narrowed wire values) */
    COLL_RD_F32_BF16, /* f32 rounded to bf16 and back (round_bf16) */
};

/*
 * The kernels of one instruction set.  Pointers may have any alignment.  The reduce
 * kernels read elements [i0, i0 + n) of every source and write n accumulator values
 * (f32 for the f32 kinds, else the dtype itself) to out; out may be a destination that
 * is exactly one of the sources (in place): each element is read from every source
 * before it is written.
 */
struct coll_reduce_ops {
    const char *name;
    void (*reduce_f32)(float *out, const void *const *src, int nsrc, enum coll_rd_kind kind,
                       comm_op_t op, size_t i0, size_t n);
    void (*reduce_f64)(double *out, const void *const *src, int nsrc, comm_op_t op, size_t i0,
                       size_t n);
    void (*reduce_i32)(int32_t *out, const void *const *src, int nsrc, comm_op_t op, size_t i0,
                       size_t n);
    void (*reduce_i64)(int64_t *out, const void *const *src, int nsrc, comm_op_t op, size_t i0,
                       size_t n);
    /*
     * dst[i] = narrow(acc[i] + widen(addend[i])) for i in [0, n), dtype F32, F16 or BF16;
     * addend (of dtype) may be NULL.  nt: streaming stores where dst allows.
     */
    void (*emit_f32)(void *dst, comm_dtype_t dtype, const float *acc, const void *addend, size_t n,
                     bool nt);
    /* dst[i] = acc[i] + addend[i] for dtype F64, I32 or I64 (wrapping); addend not NULL. */
    void (*emit_add)(void *dst, comm_dtype_t dtype, const void *acc, const void *addend, size_t n,
                     bool nt);
    /* memcpy, with streaming stores when nt. */
    void (*copy)(void *dst, const void *src, size_t bytes, bool nt);
    /* Orders streaming stores before what follows (sfence); NULL when none are used. */
    void (*fence)(void);
};

extern const struct coll_reduce_ops coll_reduce_ops_generic;
#if defined(__x86_64__)
extern const struct coll_reduce_ops coll_reduce_ops_avx2;
extern const struct coll_reduce_ops coll_reduce_ops_avx512;
#endif

/* The kernels coll_reduce uses now (the machine's best, or what the tests forced). */
const struct coll_reduce_ops *coll_reduce_ops_current(void);

/* The kernels of the named ISA if this machine can run them, else NULL (for tests). */
const struct coll_reduce_ops *coll_reduce_ops_find(const char *isa);

/* ---- Bits ---- */

static inline uint32_t coll_rd_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float coll_rd_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline double coll_rd_bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

static inline uint64_t coll_rd_f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

/* ---- Conversions (bit-exact with F16C / AVX-512 vcvtph2ps and vcvtps2ph imm 0) ---- */

static inline float coll_rd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f) {
        /* Inf, or NaN: vcvtph2ps keeps the payload and makes a signalling NaN quiet. */
        return coll_rd_bits_f32(sign | 0x7f800000 | (mant << 13) | (mant ? 0x00400000 : 0));
    }
    if (exp != 0)
        return coll_rd_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return coll_rd_bits_f32(sign);
    /* Subnormal mant * 2^-24: shift the leading one up to the implicit bit (bit 10). */
    uint32_t shift = (uint32_t)__builtin_clz(mant) - 21;
    return coll_rd_bits_f32(sign | ((113 - shift) << 23) | (((mant << shift) & 0x3ff) << 13));
}

static inline uint16_t coll_rd_f32_to_f16(float f)
{
    uint32_t x = coll_rd_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;

    if (ax > 0x7f800000) {
        /* NaN: as vcvtps2ph, quiet bit set, the upper 9 payload bits kept. */
        return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
    }
    if (ax >= 0x477ff000) /* >= 65520 (the tie above 65504 rounds to even: Inf), or Inf */
        return sign | 0x7c00;
    if (ax >= 0x38800000) {
        /* Normal in f16 (>= 2^-14): round the 13 dropped bits to nearest even, rebias. */
        uint32_t r = (ax + 0x0fff + ((ax >> 13) & 1)) >> 13;
        return sign | (uint16_t)(r - (112 << 10));
    }
    if (ax <= 0x33000000) /* <= 2^-25: the tie at 2^-25 rounds to even, zero */
        return sign;
    /* Subnormal in f16: the value in units of 2^-24 is m >> (126 - e), rounded. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t sh = 126 - e; /* 14 .. 24 */
    uint32_t q = m >> sh;
    uint32_t rem = m & ((1u << sh) - 1);
    uint32_t half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return sign | (uint16_t)q;
}

static inline float coll_rd_bf16_to_f32(uint16_t b)
{
    return coll_rd_bits_f32((uint32_t)b << 16);
}

static inline uint16_t coll_rd_f32_to_bf16(float f)
{
    uint32_t x = coll_rd_f32_bits(f);

    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x0040); /* NaN stays NaN, made quiet */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ---- Element loads and stores (memcpy: pointers need not be aligned) ---- */

static inline float coll_rd_widen(enum coll_rd_kind kind, const void *p, size_t i)
{
    const unsigned char *b = p;
    uint16_t h;
    float f;

    switch (kind) {
    case COLL_RD_F16:
        memcpy(&h, b + 2 * i, 2);
        return coll_rd_f16_to_f32(h);
    case COLL_RD_BF16:
        memcpy(&h, b + 2 * i, 2);
        return coll_rd_bf16_to_f32(h);
    case COLL_RD_F32_BF16:
        memcpy(&f, b + 4 * i, 4);
        return coll_rd_bf16_to_f32(coll_rd_f32_to_bf16(f));
    case COLL_RD_F32:
    default:
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
}

/* The kind that reads values of dtype (F32, F16 or BF16) without rounding. */
static inline enum coll_rd_kind coll_rd_kind_of(comm_dtype_t dtype)
{
    return dtype == COMM_F16 ? COLL_RD_F16 : dtype == COMM_BF16 ? COLL_RD_BF16 : COLL_RD_F32;
}

static inline void coll_rd_store_narrow(void *p, comm_dtype_t dtype, size_t i, float v)
{
    unsigned char *b = p;
    uint16_t h;

    if (dtype == COMM_F32) {
        memcpy(b + 4 * i, &v, 4);
        return;
    }
    h = dtype == COMM_F16 ? coll_rd_f32_to_f16(v) : coll_rd_f32_to_bf16(v);
    memcpy(b + 2 * i, &h, 2);
}

/* ---- The element operations that define every result ---- */

/*
 * acc op s, with acc the running value of the earlier sources.  SUM: if acc is a NaN it
 * stays (made quiet), else a NaN s is taken (made quiet), else the IEEE sum; x86 gives
 * the same when acc is the first operand, but compilers may swap the operands of a
 * commutative add, so the NaN cases are spelled out.  MAX/MIN: the first NaN in source
 * order wins, bits unchanged; else the larger (smaller) value, the earlier source on a
 * tie (-0.0 vs +0.0): exactly vmaxps/vminps(s, acc) for non-NaN inputs.
 */
static inline float coll_rd_op_f32(comm_op_t op, float acc, float s)
{
    if (isnan(acc))
        return op == COMM_SUM ? coll_rd_bits_f32(coll_rd_f32_bits(acc) | 0x00400000) : acc;
    if (isnan(s))
        return op == COMM_SUM ? coll_rd_bits_f32(coll_rd_f32_bits(s) | 0x00400000) : s;
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_SUM:
    default:
        return acc + s;
    }
}

static inline double coll_rd_op_f64(comm_op_t op, double acc, double s)
{
    const uint64_t quiet = 0x0008000000000000ull;

    if (isnan(acc))
        return op == COMM_SUM ? coll_rd_bits_f64(coll_rd_f64_bits(acc) | quiet) : acc;
    if (isnan(s))
        return op == COMM_SUM ? coll_rd_bits_f64(coll_rd_f64_bits(s) | quiet) : s;
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_SUM:
    default:
        return acc + s;
    }
}

/* Integer SUM wraps around: unsigned arithmetic, no undefined behaviour. */
static inline int32_t coll_rd_op_i32(comm_op_t op, int32_t acc, int32_t s)
{
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_SUM:
    default:
        return (int32_t)((uint32_t)acc + (uint32_t)s);
    }
}

static inline int64_t coll_rd_op_i64(comm_op_t op, int64_t acc, int64_t s)
{
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_SUM:
    default:
        return (int64_t)((uint64_t)acc + (uint64_t)s);
    }
}

/* Element i (absolute index into every source) of an f32-accumulated reduction. */
static inline float coll_rd_elem_f32(const void *const *src, int nsrc, enum coll_rd_kind kind,
                                     comm_op_t op, size_t i)
{
    float acc = coll_rd_widen(kind, src[0], i);

    for (int k = 1; k < nsrc; k++)
        acc = coll_rd_op_f32(op, acc, coll_rd_widen(kind, src[k], i));
    return acc;
}

static inline double coll_rd_elem_f64(const void *const *src, int nsrc, comm_op_t op, size_t i)
{
    double acc, s;

    memcpy(&acc, (const unsigned char *)src[0] + 8 * i, 8);
    for (int k = 1; k < nsrc; k++) {
        memcpy(&s, (const unsigned char *)src[k] + 8 * i, 8);
        acc = coll_rd_op_f64(op, acc, s);
    }
    return acc;
}

/* Element i of dst = narrow(acc + widen(addend[i])), addend (of dtype) possibly NULL. */
static inline void coll_rd_emit_elem_f32(void *dst, comm_dtype_t dtype, size_t i, float acc,
                                         const void *addend)
{
    if (addend)
        acc = coll_rd_op_f32(COMM_SUM, acc, coll_rd_widen(coll_rd_kind_of(dtype), addend, i));
    coll_rd_store_narrow(dst, dtype, i, acc);
}

/* Element i of dst = acc[i] + addend[i] for F64, I32 and I64. */
static inline void coll_rd_emit_elem_add(void *dst, comm_dtype_t dtype, size_t i, const void *acc,
                                         const void *addend)
{
    const unsigned char *a = acc, *b = addend;
    unsigned char *d = dst;

    if (dtype == COMM_I32) {
        int32_t x, y;
        memcpy(&x, a + 4 * i, 4);
        memcpy(&y, b + 4 * i, 4);
        x = coll_rd_op_i32(COMM_SUM, x, y);
        memcpy(d + 4 * i, &x, 4);
    } else if (dtype == COMM_I64) {
        int64_t x, y;
        memcpy(&x, a + 8 * i, 8);
        memcpy(&y, b + 8 * i, 8);
        x = coll_rd_op_i64(COMM_SUM, x, y);
        memcpy(d + 8 * i, &x, 8);
    } else {
        double x, y;
        memcpy(&x, a + 8 * i, 8);
        memcpy(&y, b + 8 * i, 8);
        x = coll_rd_op_f64(COMM_SUM, x, y);
        memcpy(d + 8 * i, &x, 8);
    }
}

#endif /* ARCOMM_COLL_REDUCE_ISA_H */
