/* SPDX-License-Identifier: MIT */
/*
 * test_cuda_coll's cases, and what each rank must hold after one (the runs are in
 * test_cuda_coll.c, one rank's part of a case in test_cuda_coll_rank.c).
 *
 * Every case draws fresh random inputs: floats exactly representable in the dtype,
 * integers over their whole range.  What a rank must hold is built here bit for bit by a
 * host emulation of the contract (a fixed rank order, f16/bf16 in f32, integers wrapping,
 * AVG = sum / nranks in the accumulator type), and for floats also a float64 reference
 * with the dtype's bound.  Data movement must be exact.
 */
#include "test_cuda_coll.h"
#include "arcomm.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- element types on the host ---- */

size_t cc_dsize(comm_dtype_t t)
{
    switch (t) {
    case COMM_I8:
    case COMM_U8:
        return 1;
    case COMM_F16:
    case COMM_BF16:
        return 2;
    case COMM_F32:
    case COMM_I32:
    case COMM_U32:
        return 4;
    default:
        return 8;
    }
}

bool cc_is_float(comm_dtype_t t)
{
    return t == COMM_F32 || t == COMM_F16 || t == COMM_BF16 || t == COMM_F64;
}

static bool is_signed_int(comm_dtype_t t)
{
    return t == COMM_I8 || t == COMM_I32 || t == COMM_I64;
}

static const char *dname(comm_dtype_t t)
{
    static const char *const n[] = {"f32", "f16", "bf16", "f64", "i32",
                                    "i64", "i8",  "u8",   "u32", "u64"};
    return (unsigned)t < 10 ? n[t] : "?";
}

static const char *oname(comm_op_t o)
{
    static const char *const n[] = {"sum", "max", "min", "prod", "avg"};
    return (unsigned)o < 5 ? n[o] : "?";
}

static float get_f(const void *b, size_t i, comm_dtype_t t)
{
    if (t == COMM_F32)
        return ((const float *)b)[i];
    uint16_t h = ((const uint16_t *)b)[i];
    if (t == COMM_BF16)
        return bf16_to_f(h);
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static void put_f(void *b, size_t i, comm_dtype_t t, float v)
{
    if (t == COMM_F32) {
        ((float *)b)[i] = v;
    } else if (t == COMM_BF16) {
        ((uint16_t *)b)[i] = f_to_bf16(v);
    } else {
        _Float16 x = (_Float16)v;
        memcpy((uint16_t *)b + i, &x, 2);
    }
}

/* An integer element, sign-extended for the signed types. */
static uint64_t get_u(const void *b, size_t i, comm_dtype_t t)
{
    switch (t) {
    case COMM_I8:
        return (uint64_t)(int64_t)((const int8_t *)b)[i];
    case COMM_U8:
        return ((const uint8_t *)b)[i];
    case COMM_I32:
        return (uint64_t)(int64_t)((const int32_t *)b)[i];
    case COMM_U32:
        return ((const uint32_t *)b)[i];
    default:
        return ((const uint64_t *)b)[i];
    }
}

static void put_u(void *b, size_t i, comm_dtype_t t, uint64_t v)
{
    switch (cc_dsize(t)) {
    case 1:
        ((uint8_t *)b)[i] = (uint8_t)v;
        break;
    case 4:
        ((uint32_t *)b)[i] = (uint32_t)v;
        break;
    default:
        ((uint64_t *)b)[i] = v;
        break;
    }
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Floats in [-2, 2) exactly representable in the dtype; integers over their whole range. */
static void fill(void *b, size_t n, comm_dtype_t t, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&s);
        double u = (double)(r >> 11) * 0x1.0p-53;
        if (t == COMM_F64)
            ((double *)b)[i] = 4.0 * u - 2.0;
        else if (cc_is_float(t))
            put_f(b, i, t, (float)(4.0 * u - 2.0));
        else
            put_u(b, i, t, r);
    }
}

/* ---- cases ---- */

const char *const kind_names[] = {"allreduce", "broadcast",      "reduce",
                                  "allgather", "reduce_scatter", "alltoall"};

static bool kind_reduces(enum kind k)
{
    return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER;
}

/* Elements of sendbuf and recvbuf. */
size_t cc_send_elems(const struct ccase *k, int n)
{
    return k->kind == K_REDUCE_SCATTER || k->kind == K_ALLTOALL ? (size_t)n * k->count : k->count;
}

size_t cc_recv_elems(const struct ccase *k, int n)
{
    return k->kind == K_ALLGATHER || k->kind == K_ALLTOALL ? (size_t)n * k->count : k->count;
}

/* Do all ranks hold the same output? */
bool cc_same_everywhere(enum kind k)
{
    return k == K_ALLREDUCE || k == K_BROADCAST || k == K_ALLGATHER;
}

/* Knob sets: 0 defaults, 1 copy path everywhere with 64 KiB chunks, 2 kernel path. */
const char *const config_names[N_CONFIGS] = {"default knobs", "copy path, 64 KiB chunks, bf16 off",
                                             "kernel path, bf16 everywhere"};

void cc_config_env(int config)
{
    unsetenv("ARCOMM_COPY_THRESHOLD");
    unsetenv("ARCOMM_BF16_THRESHOLD");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    if (config == 1) {
        setenv("ARCOMM_COPY_THRESHOLD", "0", 1);
        setenv("ARCOMM_COPY_CHUNK_BYTES", "64K", 1);
        setenv("ARCOMM_BF16_THRESHOLD", "off", 1);
    } else if (config == 2) {
        setenv("ARCOMM_COPY_THRESHOLD", "off", 1);
        setenv("ARCOMM_BF16_THRESHOLD", "0", 1);
    }
}

/* Is this case's f32 sum narrowed to bf16 under config (only allreduce narrows)? */
static bool narrows(const struct ccase *k, int config)
{
    if (k->kind != K_ALLREDUCE || k->dtype != COMM_F32 || k->op != COMM_SUM)
        return false;
    if (config == 1)
        return false;
    if (config == 2)
        return true;
    return k->count * 4 >= (1u << 20); /* the default ARCOMM_BF16_THRESHOLD */
}

struct combo {
    comm_dtype_t dtype;
    comm_op_t op;
};

static const struct combo reduce_combos[] = {
    {COMM_F32, COMM_SUM}, {COMM_F32, COMM_PROD}, {COMM_F32, COMM_MAX},  {COMM_F32, COMM_AVG},
    {COMM_F16, COMM_SUM}, {COMM_F16, COMM_AVG},  {COMM_BF16, COMM_MIN}, {COMM_BF16, COMM_PROD},
    {COMM_F64, COMM_SUM}, {COMM_F64, COMM_AVG},  {COMM_F64, COMM_MAX},  {COMM_I32, COMM_SUM},
    {COMM_I32, COMM_MIN}, {COMM_I64, COMM_PROD}, {COMM_I64, COMM_MAX},  {COMM_I8, COMM_SUM},
    {COMM_I8, COMM_MAX},  {COMM_U8, COMM_PROD},  {COMM_U8, COMM_MIN},   {COMM_U32, COMM_SUM},
    {COMM_U32, COMM_MAX}, {COMM_U64, COMM_SUM},  {COMM_U64, COMM_MIN},  {COMM_BF16, COMM_SUM},
};
#define N_REDUCE_COMBOS (sizeof(reduce_combos) / sizeof(reduce_combos[0]))

static const comm_dtype_t move_dtypes[] = {COMM_F32,  COMM_F16, COMM_F64, COMM_U8,
                                           COMM_BF16, COMM_I32, COMM_U64, COMM_I8};
#define N_MOVE_DTYPES (sizeof(move_dtypes) / sizeof(move_dtypes[0]))

/* 1, a few, primes, and more than 1 MiB (of 4-byte elements; 1-byte types get more). */
static const size_t counts[] = {1, 7, 1009, 65537, 300007};
#define N_COUNTS (sizeof(counts) / sizeof(counts[0]))

static size_t big_count(comm_dtype_t t)
{
    return cc_dsize(t) == 1 ? 1048583 : cc_dsize(t) == 2 ? 600011 : 300007;
}

size_t cc_make_cases(struct ccase *out, int nranks, uint64_t seed)
{
    size_t n = 0;
    for (int kind = K_ALLREDUCE; kind <= K_ALLTOALL; kind++) {
        bool red = kind_reduces((enum kind)kind);
        size_t ncombo = red ? N_REDUCE_COMBOS : N_MOVE_DTYPES;
        for (size_t ci = 0; ci < ncombo; ci++) {
            /* Each combination at two counts, the counts rotating; the first few also at
             * a large count. */
            for (int j = 0; j < (ci < 3 ? 3 : 2) && n < MAX_CASES; j++) {
                struct ccase k = {
                    .kind = (enum kind)kind,
                    .dtype = red ? reduce_combos[ci].dtype : move_dtypes[ci],
                    .op = red ? reduce_combos[ci].op : COMM_SUM,
                    .root = (int)((ci + (size_t)j) % 2) * (nranks - 1),
                    .inplace = (ci + (size_t)j + (size_t)kind) % 2 == 1 && kind != K_ALLTOALL,
                    .null_bufs = (ci + (size_t)j) % 3 == 0,
                    .offset = (ci + (size_t)j) % 4 == 3 ? 1 : 0,
                    .seed = seed + n * 7919 + 13,
                };
                k.count = j == 2 ? big_count(k.dtype) : counts[(ci * 2 + (size_t)j) % N_COUNTS];
                out[n++] = k;
            }
        }
        /* count 0 with NULL buffers: valid, touches nothing. */
        if (n < MAX_CASES)
            out[n++] = (struct ccase){.kind = (enum kind)kind,
                                      .dtype = COMM_F32,
                                      .op = COMM_SUM,
                                      .count = 0,
                                      .null_bufs = true,
                                      .seed = seed + n};
    }
    return n;
}

void cc_describe(const struct ccase *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s%s%s count %zu%s%s root %d off %zu", kind_names[k->kind],
             dname(k->dtype), kind_reduces(k->kind) ? " " : "",
             kind_reduces(k->kind) ? oname(k->op) : "", k->count, k->inplace ? " in place" : "",
             k->null_bufs ? " null" : "", k->root, k->offset);
}

/* ---- expected results ---- */

static uint64_t input_seed(const struct ccase *k, int r)
{
    return k->seed * 1000003u + (uint64_t)r * 7919u + 1;
}

/* Rank p's sendbuf contents. */
void *cc_make_input(const struct ccase *k, int n, int p)
{
    size_t e = cc_send_elems(k, n);
    void *b = malloc(e * cc_dsize(k->dtype) + 1);
    fill(b, e, k->dtype, input_seed(k, p));
    return b;
}

/*
 * The reduction of element idx of every rank's input into out[oi] (bits), and for floats
 * the float64 reference and its bound.  Returns the bound (0 for integers).
 */
static double emulate(const struct ccase *k, int n, void *const *in, size_t idx, bool narrow,
                      void *out, size_t oi, double *ref)
{
    comm_dtype_t t = k->dtype;
    comm_op_t op = k->op;
    *ref = 0;
    if (!cc_is_float(t)) {
        uint64_t acc = 0;
        for (int p = 0; p < n; p++) {
            uint64_t x = get_u(in[p], idx, t);
            if (p == 0)
                acc = x;
            else if (op == COMM_SUM)
                acc += x;
            else if (op == COMM_PROD)
                acc *= x;
            else if (is_signed_int(t))
                acc = (op == COMM_MAX ? (int64_t)x > (int64_t)acc : (int64_t)x < (int64_t)acc)
                          ? x
                          : acc;
            else
                acc = (op == COMM_MAX ? x > acc : x < acc) ? x : acc;
        }
        put_u(out, oi, t, acc);
        return 0;
    }
    double r = 0, sabs = 0;
    if (t == COMM_F64) {
        double acc = 0;
        for (int p = 0; p < n; p++) {
            double x = ((const double *)in[p])[idx];
            if (p == 0) {
                acc = x;
                r = x;
            } else if (op == COMM_SUM || op == COMM_AVG) {
                acc = acc + x;
                r += x;
            } else if (op == COMM_PROD) {
                acc = acc * x;
                r *= x;
            } else {
                acc = (op == COMM_MAX ? x > acc : x < acc) ? x : acc;
                r = acc;
            }
            sabs += fabs(x);
        }
        if (op == COMM_AVG)
            acc = acc / (double)n;
        ((double *)out)[oi] = acc;
        *ref = op == COMM_AVG ? r / n : r;
        /* f64 rounding per step, exactly the emulation's: a loose bound suffices. */
        return (op == COMM_PROD ? fabs(r) : sabs) * n * 0x1.0p-50 + 1e-300;
    }
    float acc = 0;
    for (int p = 0; p < n; p++) {
        float x = get_f(in[p], idx, t);
        float w = narrow ? bf16_to_f(f_to_bf16(x)) : x;
        if (p == 0) {
            acc = w;
            r = x;
        } else if (op == COMM_SUM || op == COMM_AVG) {
            acc = acc + w;
            r += x;
        } else if (op == COMM_PROD) {
            acc = acc * w;
            r *= x;
        } else {
            acc = (op == COMM_MAX ? w > acc : w < acc) ? w : acc;
            r = (op == COMM_MAX ? x > r : x < r) ? x : r;
        }
        sabs += fabs(x);
    }
    if (op == COMM_AVG) {
        acc = acc / (float)n;
        r /= n;
        sabs /= n;
    }
    put_f(out, oi, t, acc);
    *ref = r;
    double bound = 0;
    if (op == COMM_SUM || op == COMM_AVG)
        bound = (n + 1) * 0x1.0p-23 * sabs;
    else if (op == COMM_PROD)
        bound = (n + 1) * 0x1.0p-23 * fabs(r);
    if (narrow)
        bound += 0x1.0p-8 * sabs;
    if (t != COMM_F32) /* the output's rounding (f16: also its subnormals) */
        bound += fabs(r) * (t == COMM_F16 ? 0x1.0p-11 : 0x1.0p-8) + (t == COMM_F16 ? 0x1.0p-24 : 0);
    return bound + 1e-30;
}

double cc_as_double(const void *b, size_t i, comm_dtype_t t)
{
    return t == COMM_F64 ? ((const double *)b)[i] : (double)get_f(b, i, t);
}

/*
 * What rank r must hold after case k (cc_recv_elems), built from every rank's input; for
 * floats, ref and bound per element.  NULL for a reduce's non-root.
 */
void *cc_expected(const struct ccase *k, int n, int r, int config, void *const *in, double **ref,
                  double **bound)
{
    size_t es = cc_dsize(k->dtype), re = cc_recv_elems(k, n);
    *ref = *bound = NULL;
    if (k->kind == K_REDUCE && r != k->root)
        return NULL;
    uint8_t *out = malloc(re * es + 1);
    if (kind_reduces(k->kind)) {
        bool narrow = narrows(k, config);
        size_t base = k->kind == K_REDUCE_SCATTER ? (size_t)r * k->count : 0;
        if (cc_is_float(k->dtype)) {
            *ref = malloc(re * sizeof(double) + 1);
            *bound = malloc(re * sizeof(double) + 1);
        }
        for (size_t i = 0; i < re; i++) {
            double rf;
            double b = emulate(k, n, in, base + i, narrow, out, i, &rf);
            if (*ref) {
                (*ref)[i] = rf;
                (*bound)[i] = b;
            }
        }
        return out;
    }
    size_t blk = k->count * es;
    if (k->kind == K_BROADCAST) {
        memcpy(out, in[k->root], blk);
    } else {
        for (int p = 0; p < n; p++) /* allgather: p's input; alltoall: p's block r */
            memcpy(out + (size_t)p * blk,
                   (const uint8_t *)in[p] + (k->kind == K_ALLTOALL ? (size_t)r * blk : 0), blk);
    }
    return out;
}
