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
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    case COMM_I8:
        /* |x| <= 15: sums of up to 8 ranks stay clear of the poison (127). */
        return sign * (double)(1 + (u >> 40) % 15);
    case COMM_U8:
        return (double)(1 + (u >> 40) % 15); /* sums of up to 16 ranks stay below 255 */
    case COMM_U32:
        return (double)(1 + (u >> 40) % 1000000);
    case COMM_U64:
        return (double)(1 + (u >> 20) % 1000000000);
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
        float r = op == COMM_SUM || op == COMM_AVG ? x + y
                  : op == COMM_PROD                ? x * y
                  : op == COMM_MAX                 ? (y > x ? y : x)
                                                   : (y < x ? y : x);
        a[j] = f16 ? f32_to_f16(r) : f32_to_bf16(r);
    }
}

static bool is_int(comm_dtype_t dtype)
{
    return dtype == COMM_I32 || dtype == COMM_I64 || dtype == COMM_I8 || dtype == COMM_U8 ||
           dtype == COMM_U32 || dtype == COMM_U64;
}

/* Element j of buf as the dtype stores v (v is exactly representable: bench_value). */
static void store_elem(void *buf, size_t j, comm_dtype_t dtype, double v)
{
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
    case COMM_I8:
        ((int8_t *)buf)[j] = (int8_t)v;
        break;
    case COMM_U8:
        ((uint8_t *)buf)[j] = (uint8_t)v;
        break;
    case COMM_U32:
        ((uint32_t *)buf)[j] = (uint32_t)v;
        break;
    case COMM_U64:
        ((uint64_t *)buf)[j] = (uint64_t)v;
        break;
    }
}

void bench_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank, size_t first)
{
    for (size_t j = 0; j < count; j++)
        store_elem(buf, j, dtype, bench_value(dtype, seed, rank, first + j));
}

void bench_round_bf16(float *buf, size_t count)
{
    for (size_t j = 0; j < count; j++)
        buf[j] = bf16_to_f32(f32_to_bf16(buf[j]));
}

/*
 * Poison: NaN bytes for floats; for ints a value no sum of bench_value can reach
 * (0x7f.. is the largest signed value, 0xff.. the largest unsigned one).
 */
static unsigned char poison_byte(comm_dtype_t dtype)
{
    return dtype == COMM_I32 || dtype == COMM_I64 || dtype == COMM_I8 ? 0x7f : 0xff;
}

void bench_poison(void *buf, size_t bytes, comm_dtype_t dtype)
{
    memset(buf, poison_byte(dtype), bytes);
}

int64_t bench_count_written(const void *buf, size_t count, comm_dtype_t dtype)
{
    const unsigned char *p = buf, b = poison_byte(dtype);
    size_t es = bench_dtype_size(dtype);
    int64_t n = 0;

    for (size_t j = 0; j < count; j++) {
        bool same = true;
        for (size_t k = 0; k < es; k++)
            same &= p[j * es + k] == b;
        n += !same;
    }
    return n;
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
    default: /* the integers are compared bit for bit: read_bits */
        break;
    }
    return NAN;
}

/* An integer element's bits, zero-extended, and the mask of its width. */
static uint64_t read_bits(const void *buf, size_t j, comm_dtype_t dtype, uint64_t *mask)
{
    switch (dtype) {
    case COMM_I8:
    case COMM_U8:
        *mask = 0xffu;
        return ((const uint8_t *)buf)[j];
    case COMM_I32:
    case COMM_U32:
        *mask = 0xffffffffu;
        return ((const uint32_t *)buf)[j];
    default:
        *mask = ~0ull;
        return ((const uint64_t *)buf)[j];
    }
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
 * inputs is kept): out[j] = op over ranks r of bench_value(seed, r, first + j).
 *
 * Integers: exact, in two's-complement arithmetic of the dtype's width (sums and
 * products wrap as unsigned arithmetic does; the test data keeps sums of few ranks from
 * wrapping).  Floats, max and min: exact.  Sums: f32 relative 1e-5 * nranks and f64
 * 1e-12 * nranks of sum |x| (the error bound of any summation order); f16/bf16 two ulps
 * of the output type plus the f32 accumulation bound (plus half an ulp of sum |x| per
 * step when the sum is rounded after every step), and for f32 that may travel as bf16
 * (CUDA) one bf16 rounding of every input.  avg: the sum's bounds divided by nranks
 * (one ulp more when rounded stepwise).  prod: the same bounds with |product| in place
 * of sum |x| (relative errors of the n factors add up; bf16 wire: one bf16 rounding per
 * factor; stepwise: one ulp of the result per step).  With int8 or fp8 on the wire (sums
 * and averages of f32, f16, bf16), docs/wire.md's bound of the codec on every operand of
 * up to 1 + ceil(log2 n) encoding rounds (one on a host, one more per round between
 * hosts, each on a partial sum of at most n inputs, |x| < 2 here): int8 4n/254 a round,
 * fp8 2^-3 (1 + 2^-16) sum |x| + 2^-15 n a round; averages divided by n.
 */
enum bench_wire bench_wire_of(comm_device_t device, bool nccl)
{
    const char *w = getenv("ARCOMM_WIRE");
    if (nccl || (w != NULL && strcasecmp(w, "none") == 0))
        return BENCH_WIRE_NONE;
    if (w != NULL && strcasecmp(w, "int8") == 0)
        return BENCH_WIRE_INT8;
    if (w != NULL && strcasecmp(w, "fp8") == 0)
        return BENCH_WIRE_FP8;
    bool set = getenv("ARCOMM_BF16_THRESHOLD") != NULL || getenv("ARCOMM_WIRE_THRESHOLD") != NULL;
    return device == COMM_DEVICE_CUDA || set ? BENCH_WIRE_BF16 : BENCH_WIRE_NONE;
}

bool bench_fixed_order(comm_device_t device, bool nccl)
{
    enum bench_wire w = bench_wire_of(device, nccl);
    return !nccl && !(device == COMM_DEVICE_CUDA && (w == BENCH_WIRE_INT8 || w == BENCH_WIRE_FP8));
}

/* The int8 / fp8 codec's part of the tolerance of a sum (see bench_check_reduce). */
static double codec_tol(enum bench_wire wire, double n, double sumabs)
{
    double rounds = 1.0;
    for (double h = 1.0; h < n; h *= 2.0)
        rounds += 1.0;
    if (wire == BENCH_WIRE_INT8)
        return rounds * 4.0 * n / 254.0 * (1.0 + 0x1.0p-20);
    if (wire == BENCH_WIRE_FP8)
        return rounds * (0x1.0p-3 * (1.0 + 0x1.0p-16) * sumabs + 0x1.0p-15 * n);
    return 0.0;
}

int64_t bench_check_reduce(const void *out, size_t count, comm_dtype_t dtype, comm_op_t op,
                           uint64_t seed, int nranks, size_t first, bool stepwise_round,
                           enum bench_wire wire)
{
    bool block_codec = (wire == BENCH_WIRE_INT8 || wire == BENCH_WIRE_FP8) &&
                       (op == COMM_SUM || op == COMM_AVG) &&
                       (dtype == COMM_F32 || dtype == COMM_F16 || dtype == COMM_BF16);
    int64_t wrong = 0;

    for (size_t j = 0; j < count; j++) {
        double ref = op == COMM_PROD ? 1.0 : 0.0, sumabs = 0.0;
        uint64_t iref = op == COMM_PROD ? 1 : 0;
        for (int r = 0; r < nranks; r++) {
            double x = bench_value(dtype, seed, r, first + j);
            uint64_t xi = (uint64_t)(int64_t)x;
            if (op == COMM_SUM || op == COMM_AVG) {
                ref += x;
                sumabs += fabs(x);
                iref += xi;
            } else if (op == COMM_PROD) {
                ref *= x;
                iref *= xi;
            } else if (r == 0 || (op == COMM_MAX ? x > ref : x < ref)) {
                ref = x;
                iref = xi;
            }
        }
        if (is_int(dtype)) {
            uint64_t mask;
            uint64_t got = read_bits(out, j, dtype, &mask);
            wrong += got != (iref & mask);
            continue;
        }
        double got = read_elem(out, j, dtype), tol = 0.0, scale = sumabs;
        double n = (double)nranks;
        if (op == COMM_AVG) {
            ref /= n;
            scale /= n;
        } else if (op == COMM_PROD) {
            scale = fabs(ref);
        }
        if (op == COMM_SUM || op == COMM_AVG || op == COMM_PROD) {
            switch (dtype) {
            case COMM_F32:
                tol = 1e-5 * n * scale;
                /* BF16 wire narrowing: every input rounded to bf16 once (2^-9 relative). */
                if (wire == BENCH_WIRE_BF16)
                    tol += 0x1.0p-8 * scale * (op == COMM_PROD ? n : 1.0);
                break;
            case COMM_F64:
                tol = 1e-12 * n * scale;
                break;
            default:
                tol = 2.0 * ulp_of(dtype, fabs(ref)) + n * 0x1.0p-23 * scale;
                if (!stepwise_round)
                    break;
                /* Each of the n-1 partial results rounded once more. */
                if (op == COMM_PROD)
                    tol += (n - 1) * ulp_of(dtype, fabs(ref));
                else if (op == COMM_AVG)
                    tol += 0.5 * (n - 1) * ulp_of(dtype, sumabs) / n + ulp_of(dtype, fabs(ref));
                else
                    tol += 0.5 * (n - 1) * ulp_of(dtype, sumabs);
            }
        }
        if (block_codec)
            tol += codec_tol(wire, n, sumabs) / (op == COMM_AVG ? n : 1.0);
        /* Written as a negated <= so that a NaN (an element never written) is wrong. */
        wrong += !(fabs(got - ref) <= tol);
    }
    return wrong;
}

int64_t bench_check_exact(const void *out, size_t count, comm_dtype_t dtype, uint64_t seed,
                          int src_rank, size_t first)
{
    const unsigned char *p = out;
    size_t es = bench_dtype_size(dtype);
    unsigned char want[8] = {0}; /* store_elem writes es of them */
    int64_t wrong = 0;

    for (size_t j = 0; j < count; j++) {
        store_elem(want, 0, dtype, bench_value(dtype, seed, src_rank, first + j));
        wrong += memcmp(p + j * es, want, es) != 0;
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
