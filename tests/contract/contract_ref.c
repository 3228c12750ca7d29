/* SPDX-License-Identifier: MIT */
/*
 * The contract's reference, element by element in plain C: see contract_ref.h.  The
 * conversions are written here from the formats' definitions (round to nearest even),
 * not taken from the library, so that a wrong conversion there shows as a difference.
 */
#include "contract_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool is_int(comm_dtype_t d)
{
    return d == COMM_I8 || d == COMM_U8 || d == COMM_I32 || d == COMM_U32 || d == COMM_I64 ||
           d == COMM_U64;
}

static bool is_signed(comm_dtype_t d)
{
    return d == COMM_I8 || d == COMM_I32 || d == COMM_I64;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* bf16 is the upper half of an f32: widening is exact, narrowing rounds to nearest even
 * (no NaN ever reaches it here). */
static float bf16_widen(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

static uint16_t bf16_round(float f)
{
    uint32_t x = f32_bits(f);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* f16 through the compiler's _Float16: IEEE binary16, conversions rounding to nearest
 * even. */
static float f16_widen(uint16_t h)
{
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}

static uint16_t f16_round(float f)
{
    _Float16 v = (_Float16)f;
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
}

void cref_fill(void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed, int rank)
{
    uint64_t s = seed * 0x100000001b3ull + (uint64_t)rank * 0x9e37u + 17;
    bool prod = op == COMM_PROD;
    size_t es = comm_dtype_size(dtype);
    for (size_t i = 0; i < count; i++) {
        uint64_t x = next(&s);
        bool neg = (x >> 63) & 1;
        if (is_int(dtype)) {
            uint64_t v = prod ? x | 1 : x;
            memcpy((char *)buf + i * es, &v, es); /* little-endian: the low bytes */
            continue;
        }
        /* A double in [2^-4, 2^4) (PROD: [0.75, 1.25)) with 52 random fraction bits,
         * then rounded to the dtype (which stays inside the range's closure, never 0). */
        double frac = (double)(x & 0xfffffffffffffull) * 0x1p-52;
        double v = prod ? 0.75 + 0.5 * frac : ldexp(1.0 + frac, (int)((x >> 52) % 8) - 4);
        v = neg ? -v : v;
        switch (dtype) {
        case COMM_F64:
            ((double *)buf)[i] = v;
            break;
        case COMM_F32:
            ((float *)buf)[i] = (float)v;
            break;
        case COMM_F16:
            ((uint16_t *)buf)[i] = f16_round((float)v);
            break;
        default:
            ((uint16_t *)buf)[i] = bf16_round((float)v);
            break;
        }
    }
}

/* Element i of rank data p widened to the accumulation type. */
static float widen_f32(const void *p, size_t i, comm_dtype_t dtype, bool narrow)
{
    switch (dtype) {
    case COMM_F16:
        return f16_widen(((const uint16_t *)p)[i]);
    case COMM_BF16:
        return bf16_widen(((const uint16_t *)p)[i]);
    default: {
        float f = ((const float *)p)[i];
        return narrow ? bf16_widen(bf16_round(f)) : f;
    }
    }
}

static uint64_t load_int(const void *p, size_t i, comm_dtype_t dtype)
{
    size_t es = comm_dtype_size(dtype);
    uint64_t v = 0;
    memcpy(&v, (const char *)p + i * es, es);
    if (is_signed(dtype) && es < 8 && (v >> (8 * es - 1)) & 1)
        v |= ~UINT64_C(0) << (8 * es); /* sign-extend: max and min compare as int64 */
    return v;
}

static float op_f32(comm_op_t op, float a, float b)
{
    switch (op) {
    case COMM_MAX:
        return a > b ? a : b;
    case COMM_MIN:
        return a < b ? a : b;
    case COMM_PROD:
        return a * b;
    default:
        return a + b;
    }
}

static double op_f64(comm_op_t op, double a, double b)
{
    switch (op) {
    case COMM_MAX:
        return a > b ? a : b;
    case COMM_MIN:
        return a < b ? a : b;
    case COMM_PROD:
        return a * b;
    default:
        return a + b;
    }
}

/* Integers: wrap-around sums and products (in 64 bits, cut to the width when stored),
 * max and min as the dtype is signed or not. */
static uint64_t op_int(comm_op_t op, comm_dtype_t dtype, uint64_t a, uint64_t b)
{
    bool sg = is_signed(dtype);
    switch (op) {
    case COMM_MAX:
        return sg ? ((int64_t)a > (int64_t)b ? a : b) : (a > b ? a : b);
    case COMM_MIN:
        return sg ? ((int64_t)a < (int64_t)b ? a : b) : (a < b ? a : b);
    case COMM_PROD:
        return a * b;
    default:
        return a + b;
    }
}

/* The accumulators of one element range: float, double or uint64_t, by dtype. */
static size_t acc_size(comm_dtype_t dtype)
{
    return dtype == COMM_F64 ? sizeof(double) : is_int(dtype) ? sizeof(uint64_t) : sizeof(float);
}

/* acc[j] = acc[j] op val[j] for j < n, or acc = val when first. */
static void combine(comm_dtype_t dtype, comm_op_t op, void *acc, const void *val, size_t n,
                    bool first)
{
    if (first) {
        memcpy(acc, val, n * acc_size(dtype));
        return;
    }
    for (size_t j = 0; j < n; j++) {
        if (dtype == COMM_F64)
            ((double *)acc)[j] = op_f64(op, ((double *)acc)[j], ((const double *)val)[j]);
        else if (is_int(dtype))
            ((uint64_t *)acc)[j] =
                op_int(op, dtype, ((uint64_t *)acc)[j], ((const uint64_t *)val)[j]);
        else
            ((float *)acc)[j] = op_f32(op, ((float *)acc)[j], ((const float *)val)[j]);
    }
}

/* The accumulators of elements [first, first + n): hosts in rank order, then the tree. */
static void *accumulate(const struct cref_layout *lay, comm_dtype_t dtype, comm_op_t op,
                        uint64_t seed, size_t count, size_t first, size_t n, bool narrow)
{
    int per = lay->per_host > 0 ? lay->per_host : lay->nranks;
    int hosts = (lay->nranks + per - 1) / per;
    size_t as = acc_size(dtype), es = comm_dtype_size(dtype);
    comm_op_t wop = op == COMM_AVG ? COMM_SUM : op;
    char *part = malloc((size_t)hosts * n * as + 1);
    char *data = malloc(count * es + 1);
    char *val = malloc(n * as + 1);
    if (part == NULL || data == NULL || val == NULL) {
        fprintf(stderr, "contract reference: out of memory\n");
        abort();
    }
    for (int p = 0; p < lay->nranks; p++) {
        cref_fill(data, count, dtype, op, seed, p);
        for (size_t j = 0; j < n; j++) {
            if (dtype == COMM_F64)
                ((double *)val)[j] = ((double *)data)[first + j];
            else if (is_int(dtype))
                ((uint64_t *)val)[j] = load_int(data, first + j, dtype);
            else
                ((float *)val)[j] = widen_f32(data, first + j, dtype, narrow);
        }
        combine(dtype, wop, part + (size_t)(p / per) * n * as, val, n, p % per == 0);
    }
    for (int k = 1; k < hosts; k *= 2) {
        for (int h = 0; h + k < hosts; h += 2 * k)
            combine(dtype, wop, part + (size_t)h * n * as, part + (size_t)(h + k) * n * as, n,
                    false);
    }
    free(data);
    free(val);
    return part; /* host 0's accumulators first */
}

void cref_reduce(const struct cref_layout *lay, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                 size_t count, size_t first, size_t n, bool narrow, const void *addend,
                 size_t addend_count, void *out)
{
    void *acc = accumulate(lay, dtype, op, seed, count, first, n, narrow);
    size_t es = comm_dtype_size(dtype);
    for (size_t j = 0; j < n; j++) {
        size_t ai = addend_count ? (first + j) % addend_count : 0;
        if (dtype == COMM_F64) {
            double v = ((double *)acc)[j];
            if (op == COMM_AVG)
                v /= (double)lay->nranks;
            if (addend)
                v += ((const double *)addend)[ai];
            ((double *)out)[j] = v;
        } else if (is_int(dtype)) {
            uint64_t v = ((uint64_t *)acc)[j];
            if (addend)
                v += load_int(addend, ai, dtype);
            memcpy((char *)out + j * es, &v, es);
        } else {
            float v = ((float *)acc)[j];
            if (op == COMM_AVG)
                v /= (float)lay->nranks;
            if (addend)
                v += widen_f32(addend, ai, dtype, false);
            if (dtype == COMM_F32)
                ((float *)out)[j] = v;
            else if (dtype == COMM_F16)
                ((uint16_t *)out)[j] = f16_round(v);
            else
                ((uint16_t *)out)[j] = bf16_round(v);
        }
    }
    free(acc);
}

static double get(const void *p, size_t i, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F64:
        return ((const double *)p)[i];
    case COMM_F32:
        return ((const float *)p)[i];
    case COMM_F16:
        return f16_widen(((const uint16_t *)p)[i]);
    default:
        return bf16_widen(((const uint16_t *)p)[i]);
    }
}

long cref_check_f64(const struct cref_layout *lay, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                    size_t count, size_t first, size_t n, bool narrow, const void *ref, char *why,
                    size_t whylen)
{
    if (is_int(dtype))
        return 0;
    size_t es = comm_dtype_size(dtype);
    double *x = malloc(n * sizeof(double) + 1), *mag = malloc(n * sizeof(double) + 1);
    char *data = malloc(count * es + 1);
    if (x == NULL || mag == NULL || data == NULL) {
        fprintf(stderr, "contract reference: out of memory\n");
        abort();
    }
    for (int p = 0; p < lay->nranks; p++) {
        cref_fill(data, count, dtype, op, seed, p);
        for (size_t j = 0; j < n; j++) {
            double v = dtype == COMM_F32 && narrow ? (double)widen_f32(data, first + j, dtype, true)
                                                   : get(data, first + j, dtype);
            if (p == 0) {
                x[j] = v;
                mag[j] = fabs(v);
                continue;
            }
            switch (op) {
            case COMM_MAX:
                x[j] = fmax(x[j], v);
                break;
            case COMM_MIN:
                x[j] = fmin(x[j], v);
                break;
            case COMM_PROD:
                x[j] *= v;
                break;
            default:
                x[j] += v;
                mag[j] += fabs(v);
                break;
            }
        }
    }
    /* The accumulation's rounding errors (nranks of them, each at most half an ulp of a
     * partial no larger than the sum of magnitudes), then the one rounding to the dtype. */
    double eps_acc = dtype == COMM_F64 ? 0x1p-53 : 0x1p-24;
    double eps_out = dtype == COMM_F16 ? 0x1p-11 : dtype == COMM_BF16 ? 0x1p-8 : eps_acc;
    long bad = 0;
    for (size_t j = 0; j < n; j++) {
        double want = op == COMM_AVG ? x[j] / lay->nranks : x[j];
        double scale = op == COMM_PROD ? fabs(x[j]) * 2.0
                       : op == COMM_SUM || op == COMM_AVG
                           ? mag[j] / (op == COMM_AVG ? lay->nranks : 1)
                           : 0.0;
        double tol = lay->nranks * eps_acc * scale + eps_out * fabs(want) * 1.0001 + 0x1p-1074;
        double got = get(ref, j, dtype);
        if (!(fabs(got - want) <= tol)) {
            if (bad++ == 0)
                snprintf(why, whylen, "element %zu: reference %.17g, float64 %.17g (bound %.3g)",
                         first + j, got, want, tol);
        }
    }
    free(x);
    free(mag);
    free(data);
    return bad;
}

size_t cref_first_diff(const void *a, const void *b, size_t n, comm_dtype_t dtype, char *why,
                       size_t whylen)
{
    size_t es = comm_dtype_size(dtype);
    for (size_t j = 0; j < n; j++) {
        const char *x = (const char *)a + j * es, *y = (const char *)b + j * es;
        if (memcmp(x, y, es) == 0)
            continue;
        if (is_int(dtype))
            snprintf(why, whylen, "element %zu: got 0x%llx, want 0x%llx", j,
                     (unsigned long long)load_int(a, j, dtype),
                     (unsigned long long)load_int(b, j, dtype));
        else
            snprintf(why, whylen, "element %zu: got %.17g, want %.17g", j, get(a, j, dtype),
                     get(b, j, dtype));
        return j;
    }
    return n;
}

const char *cref_dtype_name(comm_dtype_t dtype)
{
    static const char *const names[] = {"f32", "f16", "bf16", "f64", "i32",
                                        "i64", "i8",  "u8",   "u32", "u64"};
    return (unsigned)dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

const char *cref_op_name(comm_op_t op)
{
    static const char *const names[] = {"sum", "max", "min", "prod", "avg"};
    return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}
