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
 * Floating-point contraction: the only multiplications (PROD) and divisions (AVG) are
 * never an operand of an addition in the same kernel (addends go with SUM only), so no
 * FMA can be formed whatever -ffp-contract says; gcc in ISO mode (-std=c11, which
 * meson's c_std=c11 selects) defaults to -ffp-contract=off anyway.  No -ffast-math: gcc
 * then never reassociates the sums or products.
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
    /* Every integer dtype (I8, U8, I32, U32, I64, U64); AVG is reduced as SUM. */
    void (*reduce_int)(void *out, const void *const *src, int nsrc, comm_dtype_t dtype,
                       comm_op_t op, size_t i0, size_t n);
    /* acc[i] = coll_rd_avg_f32(acc[i], d) (f64: coll_rd_avg_f64) for i in [0, n), in place. */
    void (*avg_f32)(float *acc, size_t n, float d);
    void (*avg_f64)(double *acc, size_t n, double d);
    /*
     * dst[i] = narrow(acc[i] + widen(addend[i])) for i in [0, n), dtype F32, F16 or BF16;
     * addend (of dtype) may be NULL.  nt: streaming stores where dst allows.
     */
    void (*emit_f32)(void *dst, comm_dtype_t dtype, const float *acc, const void *addend, size_t n,
                     bool nt);
    /* dst[i] = acc[i] + addend[i] for dtype F64 or an integer (wrapping); addend not NULL. */
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

/* MAX and MIN select a value, NaNs included, bits unchanged; the others compute one. */
static inline bool coll_rd_selects(comm_op_t op)
{
    return op == COMM_MAX || op == COMM_MIN;
}

/*
 * acc op s, with acc the running value of the earlier sources.  SUM and PROD (and AVG,
 * whose reduction is the SUM): if acc is a NaN it stays (made quiet), else a NaN s is
 * taken (made quiet), else the IEEE sum or product; x86 gives the same when acc is the
 * first operand, but compilers may swap the operands of a commutative operation, so the
 * NaN cases are spelled out (Inf - Inf and 0 * Inf give the CPU's default NaN).
 * MAX/MIN: the first NaN in source order wins, bits unchanged; else the larger
 * (smaller) value, the earlier source on a tie (-0.0 vs +0.0): exactly
 * vmaxps/vminps(s, acc) for non-NaN inputs.
 */
static inline float coll_rd_op_f32(comm_op_t op, float acc, float s)
{
    if (isnan(acc))
        return coll_rd_selects(op) ? acc : coll_rd_bits_f32(coll_rd_f32_bits(acc) | 0x00400000);
    if (isnan(s))
        return coll_rd_selects(op) ? s : coll_rd_bits_f32(coll_rd_f32_bits(s) | 0x00400000);
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_PROD:
        return acc * s;
    case COMM_SUM:
    case COMM_AVG:
    default:
        return acc + s;
    }
}

static inline double coll_rd_op_f64(comm_op_t op, double acc, double s)
{
    const uint64_t quiet = 0x0008000000000000ull;

    if (isnan(acc))
        return coll_rd_selects(op) ? acc : coll_rd_bits_f64(coll_rd_f64_bits(acc) | quiet);
    if (isnan(s))
        return coll_rd_selects(op) ? s : coll_rd_bits_f64(coll_rd_f64_bits(s) | quiet);
    switch (op) {
    case COMM_MAX:
        return s > acc ? s : acc;
    case COMM_MIN:
        return s < acc ? s : acc;
    case COMM_PROD:
        return acc * s;
    case COMM_SUM:
    case COMM_AVG:
    default:
        return acc + s;
    }
}

/* AVG's last step: the sum divided by d (> 0) in the accumulator type; a NaN stays, quiet. */
static inline float coll_rd_avg_f32(float acc, float d)
{
    return isnan(acc) ? coll_rd_bits_f32(coll_rd_f32_bits(acc) | 0x00400000) : acc / d;
}

static inline double coll_rd_avg_f64(double acc, double d)
{
    return isnan(acc) ? coll_rd_bits_f64(coll_rd_f64_bits(acc) | 0x0008000000000000ull) : acc / d;
}

/* ---- Integers ---- */

static inline bool coll_rd_is_int(comm_dtype_t dtype)
{
    return dtype == COMM_I8 || dtype == COMM_U8 || dtype == COMM_I32 || dtype == COMM_U32 ||
           dtype == COMM_I64 || dtype == COMM_U64;
}

/* Bytes of one element of an integer dtype. */
static inline size_t coll_rd_int_size(comm_dtype_t dtype)
{
    return dtype == COMM_I8 || dtype == COMM_U8     ? 1
           : dtype == COMM_I32 || dtype == COMM_U32 ? 4
                                                    : 8;
}

static inline bool coll_rd_int_signed(comm_dtype_t dtype)
{
    return dtype == COMM_I8 || dtype == COMM_I32 || dtype == COMM_I64;
}

/* Element i of an integer array of esz-byte elements, zero-extended to 64 bits. */
static inline uint64_t coll_rd_int_load(const void *p, size_t esz, size_t i)
{
    const unsigned char *b = (const unsigned char *)p + esz * i;
    uint32_t u32;
    uint64_t u64;

    if (esz == 1)
        return *b;
    if (esz == 4) {
        memcpy(&u32, b, 4);
        return u32;
    }
    memcpy(&u64, b, 8);
    return u64;
}

/* Stores the low esz bytes of v as element i. */
static inline void coll_rd_int_store(void *p, size_t esz, size_t i, uint64_t v)
{
    unsigned char *b = (unsigned char *)p + esz * i;
    uint32_t u32 = (uint32_t)v;

    if (esz == 1)
        *b = (unsigned char)v;
    else if (esz == 4)
        memcpy(b, &u32, 4);
    else
        memcpy(b, &v, 8);
}

/*
 * acc op s on integers held as their bits, zero-extended (coll_rd_int_load).  SUM and
 * PROD (and AVG, reduced as SUM) wrap: unsigned 64-bit arithmetic, no undefined
 * behaviour, and the low bits are those of the dtype's two's complement result (the
 * store truncates).  MAX/MIN compare signed for I8/I32/I64 (the sign bit of the dtype
 * flipped turns the signed order into the unsigned one), unsigned for U8/U32/U64; their
 * operands are always loaded values, so no high bits are set.
 */
static inline uint64_t coll_rd_op_int(comm_op_t op, comm_dtype_t dtype, uint64_t acc, uint64_t s)
{
    const uint64_t flip = coll_rd_int_signed(dtype) ? 1ull << (8 * coll_rd_int_size(dtype) - 1) : 0;

    switch (op) {
    case COMM_MAX:
        return (s ^ flip) > (acc ^ flip) ? s : acc;
    case COMM_MIN:
        return (s ^ flip) < (acc ^ flip) ? s : acc;
    case COMM_PROD:
        return acc * s;
    case COMM_SUM:
    case COMM_AVG:
    default:
        return acc + s;
    }
}

/* Elements [i, i + m) of out from elements i0 + [i, i + m) of every source (integers). */
static inline void coll_rd_elems_int(void *out, const void *const *src, int nsrc,
                                     comm_dtype_t dtype, comm_op_t op, size_t i0, size_t i,
                                     size_t m)
{
    const size_t esz = coll_rd_int_size(dtype);

    for (size_t t = i; t < i + m; t++) {
        uint64_t acc = coll_rd_int_load(src[0], esz, i0 + t);
        for (int k = 1; k < nsrc; k++)
            acc = coll_rd_op_int(op, dtype, acc, coll_rd_int_load(src[k], esz, i0 + t));
        coll_rd_int_store(out, esz, t, acc);
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

/* Element i of dst = acc[i] + addend[i] for F64 and the integers (wrapping). */
static inline void coll_rd_emit_elem_add(void *dst, comm_dtype_t dtype, size_t i, const void *acc,
                                         const void *addend)
{
    const unsigned char *a = acc, *b = addend;
    unsigned char *d = dst;

    if (coll_rd_is_int(dtype)) {
        const size_t esz = coll_rd_int_size(dtype);
        uint64_t x = coll_rd_int_load(acc, esz, i), y = coll_rd_int_load(addend, esz, i);
        coll_rd_int_store(dst, esz, i, coll_rd_op_int(COMM_SUM, dtype, x, y));
    } else {
        double x, y;
        memcpy(&x, a + 8 * i, 8);
        memcpy(&y, b + 8 * i, 8);
        x = coll_rd_op_f64(COMM_SUM, x, y);
        memcpy(d + 8 * i, &x, 8);
    }
}

#endif /* ARCOMM_COLL_REDUCE_ISA_H */
