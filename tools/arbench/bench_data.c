/* SPDX-License-Identifier: MIT */
/*
 * arbench's test data and its check: counter-based random inputs (any rank can
 * recompute any rank's element), the f16/bf16 conversions, the float64 reference with
 * per-dtype tolerances, and the hash that compares ranks' outputs.
 */
#include "bench_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finalizer: a counter-based generator, so any rank can recompute
     * any other rank's element j without storing it. */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t bench_seed(size_t bytes, comm_dtype_t dtype, comm_op_t op)
{
    return mix64((uint64_t)bytes * 0x100000001b3ull ^ ((uint64_t)dtype << 40) ^
                 ((uint64_t)op << 48));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0)
        f = ldexpf((float)man, -24); /* zero and subnormals */
    else if (exp == 31)
        f = man ? NAN : INFINITY;
    else
        f = ldexpf((float)(man | 0x400), (int)exp - 25);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, with subnormals, infinities and NaN (MPI's f16 op needs them). */
static uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t absu = u & 0x7fffffff;
    if (absu > 0x7f800000)
        return sign | 0x7e00; /* quiet NaN */
    if (absu >= 0x47800000)
        return sign | 0x7c00; /* 65536 and up, Inf included */
    if (absu < 0x38800000) {
        /* Below 2^-14: scaling by 2^24 is exact and rintf rounds to nearest even; 1024
         * is the smallest normal, which that encoding already spells. */
        float a;
        memcpy(&a, &absu, 4);
        return sign | (uint16_t)rintf(a * 0x1.0p24f);
    }
    uint32_t man = absu & 0x7fffff;
    uint32_t h = ((((absu >> 23) - 127 + 15)) << 10) | (man >> 13);
    uint32_t rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is right, up to Inf */
    return (uint16_t)(sign | h);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, not rounded into Inf */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double bench_value(comm_dtype_t dtype, uint64_t seed, int rank, size_t j)
{
    uint64_t u = mix64(seed ^ mix64(((uint64_t)rank << 48) ^ (uint64_t)j));
    double sign = (u & 1) ? -1.0 : 1.0;
    /* Magnitudes in [0.5, 2): never zero, no overflow for any rank count, and sums
     * that f16 still represents for up to ~16000 ranks. */
    double mag = 0.5 + 1.5 * (double)(u >> 11) * 0x1.0p-53;

    switch (dtype) {
    case COMM_F32:
        return (double)(float)(sign * mag);
    case COMM_F16:
        return (double)f16_to_f32(f32_to_f16((float)(sign * mag)));
    case COMM_BF16:
        return (double)bf16_to_f32(f32_to_bf16((float)(sign * mag)));
    case COMM_F64:
        return sign * mag;
    case COMM_I32:
        return sign * (double)(1 + (u >> 40) % 1000);
    case COMM_I64:
        return sign * (double)(1 + (u >> 20) % 1000000000);
    default: /* the 0.2 dtypes: not yet */
        break;
    }
    return 0.0;
}

void bench_half_reduce(void *inout, const void *in, size_t n, comm_dtype_t dtype, comm_op_t op)
{
    uint16_t *a = inout;
    const uint16_t *b = in;
    bool f16 = dtype == COMM_F16;

    for (size_t j = 0; j < n; j++) {
        float x = f16 ? f16_to_f32(a[j]) : bf16_to_f32(a[j]);
        float y = f16 ? f16_to_f32(b[j]) : bf16_to_f32(b[j]);
        float r = op == COMM_SUM ? x + y : op == COMM_MAX ? (y > x ? y : x) : (y < x ? y : x);
        a[j] = f16 ? f32_to_f16(r) : f32_to_bf16(r);
    }
}

void bench_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank)
{
    for (size_t j = 0; j < count; j++) {
        double v = bench_value(dtype, seed, rank, j);
        switch (dtype) {
        case COMM_F32:
            ((float *)buf)[j] = (float)v;
            break;
        case COMM_F16:
            ((uint16_t *)buf)[j] = f32_to_f16((float)v);
            break;
        case COMM_BF16:
            ((uint16_t *)buf)[j] = f32_to_bf16((float)v);
            break;
        case COMM_F64:
            ((double *)buf)[j] = v;
            break;
        case COMM_I32:
            ((int32_t *)buf)[j] = (int32_t)v;
            break;
        case COMM_I64:
            ((int64_t *)buf)[j] = (int64_t)v;
            break;
        default: /* the 0.2 dtypes: not yet */
            break;
        }
    }
}

/* Poison: NaN bytes for floats; for ints a value no sum of bench_value can reach. */
void bench_poison(void *buf, size_t bytes, comm_dtype_t dtype)
{
    memset(buf, dtype == COMM_I32 || dtype == COMM_I64 ? 0x7f : 0xff, bytes);
}

static double read_elem(const void *buf, size_t j, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32:
        return ((const float *)buf)[j];
    case COMM_F16:
        return f16_to_f32(((const uint16_t *)buf)[j]);
    case COMM_BF16:
        return bf16_to_f32(((const uint16_t *)buf)[j]);
    case COMM_F64:
        return ((const double *)buf)[j];
    case COMM_I32:
        return ((const int32_t *)buf)[j];
    case COMM_I64:
        return (double)((const int64_t *)buf)[j];
    default: /* the 0.2 dtypes: not yet */
        break;
    }
    return NAN;
}

/* One unit in the last place of the output type at magnitude x. */
static double ulp_of(comm_dtype_t dtype, double x)
{
    int mant = dtype == COMM_F16 ? 10 : 7;
    int emin = dtype == COMM_F16 ? -14 : -126;
    int e = x > 0 ? ilogb(x) : emin;
    return ldexp(1.0, (e < emin ? emin : e) - mant);
}

/*
 * Float64 reference per element, recomputed from the seed (no copy of the peers'
 * inputs is kept).  Tolerances: f32 relative 1e-5 * nranks and f64 1e-12 * nranks of
 * sum |x| (the error bound of any summation order); f16/bf16 two ulps of the output
 * type plus the f32 accumulation bound (plus half an ulp of sum |x| per step when the
 * sum is rounded after every step), and for f32 that may travel as bf16 (CUDA) one bf16
 * rounding of every input; ints, and max/min of any type, exact.
 */
int64_t bench_check(const void *out, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                    int nranks, bool stepwise_round, bool bf16_wire)
{
    bool is_int = dtype == COMM_I32 || dtype == COMM_I64;
    int64_t wrong = 0;

    for (size_t j = 0; j < count; j++) {
        double ref = 0.0, sumabs = 0.0;
        int64_t iref = 0;
        for (int r = 0; r < nranks; r++) {
            double x = bench_value(dtype, seed, r, j);
            if (op == COMM_SUM) {
                ref += x;
                sumabs += fabs(x);
                iref += (int64_t)x;
            } else if (r == 0 || (op == COMM_MAX ? x > ref : x < ref)) {
                ref = x;
                iref = (int64_t)x;
            }
        }
        if (is_int) {
            int64_t got = dtype == COMM_I32 ? ((const int32_t *)out)[j] : ((const int64_t *)out)[j];
            wrong += got != iref;
            continue;
        }
        double got = read_elem(out, j, dtype), tol = 0.0;
        if (op == COMM_SUM) {
            switch (dtype) {
            case COMM_F32:
                tol = 1e-5 * nranks * sumabs;
                /* BF16 wire narrowing: every input rounded to bf16 once (2^-9 relative). */
                if (bf16_wire)
                    tol += 0x1.0p-8 * sumabs;
                break;
            case COMM_F64:
                tol = 1e-12 * nranks * sumabs;
                break;
            default:
                tol = 2.0 * ulp_of(dtype, fabs(ref)) + nranks * 0x1.0p-23 * sumabs;
                /* Each of the n-1 partial sums, at most sum |x|, rounded once more. */
                if (stepwise_round)
                    tol += 0.5 * (nranks - 1) * ulp_of(dtype, sumabs);
            }
        }
        /* Written as a negated <= so that a NaN (an element never written) is wrong. */
        wrong += !(fabs(got - ref) <= tol);
    }
    return wrong;
}

uint64_t bench_fnv1a(const void *buf, size_t bytes)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
