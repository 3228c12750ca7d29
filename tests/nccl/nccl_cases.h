/* SPDX-License-Identifier: MIT */
/*
 * The collective cases the NCCL tests run, and their checks: every rank's input is a
 * function of (case, rank, index), so any process can compute every rank's input and
 * the float64 reference of every output element.  Reductions are checked against that
 * reference (exactly for integers), data movement bit for bit, reduce's non-root output
 * must stay poisoned.  Plain C, host only: the GPU programs copy buffers in and out.
 */
#ifndef ARCOMM_TESTS_NCCL_CASES_H
#define ARCOMM_TESTS_NCCL_CASES_H

#include "nccl.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum tc_kind { TC_ALLREDUCE, TC_BROADCAST, TC_BCAST, TC_REDUCE, TC_ALLGATHER, TC_REDUCE_SCATTER };

struct tcase {
    enum tc_kind kind;
    ncclDataType_t dtype;
    ncclRedOp_t op; /* ncclNumOps: a premultiplied sum (premul says where its scalar is) */
    size_t count;   /* NCCL's count: per rank (allgather: send; reduce_scatter: recv) */
    int root;
    bool inplace;
    int premul;    /* 0, 1: host-immediate scalar, 2: device scalar */
    unsigned salt; /* another draw of the inputs (graph replays) */
    bool graph;    /* captured once, replayed with fresh inputs (tc_graph) */
};

/* NCCL 2.24's fp8 types, not in 2.19's nccl.h: moved as bytes (no reductions here). */
#define TC_FP8_E4M3 ((ncclDataType_t)10)
#define TC_FP8_E5M2 ((ncclDataType_t)11)

static inline bool tc_fp8(ncclDataType_t t)
{
    return t == TC_FP8_E4M3 || t == TC_FP8_E5M2;
}

#define TC_POISON 0xa5

static inline size_t tc_esize(ncclDataType_t t)
{
    if (tc_fp8(t))
        return 1;
    static const size_t s[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return (unsigned)t < ncclNumTypes ? s[t] : 0;
}

static inline bool tc_float(ncclDataType_t t)
{
    return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

static inline uint16_t tc_bf16_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static inline float tc_f32_of_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Element i of a host buffer of dtype t, as a double (integers exactly). */
static inline double tc_get(const void *buf, ncclDataType_t t, size_t i)
{
    const char *p = (const char *)buf + i * tc_esize(t);
    if (tc_fp8(t))
        t = ncclUint8; /* its bits */
    switch (t) {
    case ncclInt8:
        return *(const int8_t *)p;
    case ncclUint8:
        return *(const uint8_t *)p;
    case ncclInt32:
        return *(const int32_t *)p;
    case ncclUint32:
        return *(const uint32_t *)p;
    case ncclInt64:
        return (double)*(const int64_t *)p;
    case ncclUint64:
        return (double)*(const uint64_t *)p;
    case ncclFloat16:
        return (double)*(const _Float16 *)p;
    case ncclFloat32:
        return *(const float *)p;
    case ncclFloat64:
        return *(const double *)p;
    case ncclBfloat16:
        return tc_f32_of_bf16(*(const uint16_t *)p);
    default:
        return NAN;
    }
}

/* Stores v (already representable for the integer types) as dtype t. */
static inline void tc_put(void *buf, ncclDataType_t t, size_t i, double v)
{
    char *p = (char *)buf + i * tc_esize(t);
    if (tc_fp8(t))
        t = ncclUint8; /* its bits */
    switch (t) {
    case ncclInt8:
        *(int8_t *)p = (int8_t)v;
        break;
    case ncclUint8:
        *(uint8_t *)p = (uint8_t)v;
        break;
    case ncclInt32:
        *(int32_t *)p = (int32_t)v;
        break;
    case ncclUint32:
        *(uint32_t *)p = (uint32_t)v;
        break;
    case ncclInt64:
        *(int64_t *)p = (int64_t)v;
        break;
    case ncclUint64:
        *(uint64_t *)p = (uint64_t)v;
        break;
    case ncclFloat16:
        *(_Float16 *)p = (_Float16)v;
        break;
    case ncclFloat32:
        *(float *)p = (float)v;
        break;
    case ncclFloat64:
        *(double *)p = v;
        break;
    case ncclBfloat16:
        *(uint16_t *)p = tc_bf16_of((float)v);
        break;
    default:
        break;
    }
}

/* A random-looking value for (case seed, rank, index): floats in [-1, 1), integers
 * small enough that no sum or product of up to 8 ranks leaves the type. */
static inline double tc_value(uint64_t seed, int rank, size_t i, ncclDataType_t t, ncclRedOp_t op)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0xbf58476d1ce4e5b9ull + i;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    if (tc_float(t)) {
        double v = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        /* As the dtype holds it, so that the reference starts from the same inputs. */
        char tmp[8];
        tc_put(tmp, t, 0, v);
        return tc_get(tmp, t, 0);
    }
    if (op == ncclProd)
        return (double)(1 + (x >> 40) % 2);
    bool is_signed = t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
    return (double)((int)((x >> 40) % 15) - (is_signed ? 7 : 0));
}

/* The premultiplied sum's scalar of rank r. */
static inline double tc_scalar(const struct tcase *c, int r)
{
    return tc_float(c->dtype) ? 0.5 + 0.25 * r : (double)(1 + r);
}

static inline uint64_t tc_seed(const struct tcase *c)
{
    return (uint64_t)c->kind * 1000003u + (uint64_t)c->dtype * 10007u + (uint64_t)c->op * 101u +
           c->count + (c->inplace ? 7u : 0u) + (uint64_t)c->premul * 31u +
           (uint64_t)c->salt * 1000033u;
}

/* Elements of each rank's send and receive buffer. */
static inline size_t tc_send_elems(const struct tcase *c, int n)
{
    return c->kind == TC_REDUCE_SCATTER ? c->count * (size_t)n : c->count;
}

static inline size_t tc_recv_elems(const struct tcase *c, int n)
{
    return c->kind == TC_ALLGATHER ? c->count * (size_t)n : c->count;
}

/* Rank r's input (host buffer of tc_send_elems elements). */
static inline void tc_fill(const struct tcase *c, int r, void *buf, int n)
{
    size_t e = tc_send_elems(c, n);
    for (size_t i = 0; i < e; i++)
        tc_put(buf, c->dtype, i, tc_value(tc_seed(c), r, i, c->dtype, c->op));
}

static inline bool tc_reduces(const struct tcase *c)
{
    return c->kind == TC_ALLREDUCE || c->kind == TC_REDUCE || c->kind == TC_REDUCE_SCATTER;
}

/* The reference of element i of a reduction over the ranks' inputs at index j. */
static inline double tc_reduce_ref(const struct tcase *c, size_t j, int n, double *mag)
{
    double acc = 0, m = 0;
    for (int r = 0; r < n; r++) {
        double v = tc_value(tc_seed(c), r, j, c->dtype, c->op);
        if (c->premul)
            v *= tc_scalar(c, r);
        if (r == 0) {
            acc = v;
        } else {
            switch (c->op) {
            case ncclProd:
                acc *= v;
                break;
            case ncclMax:
                acc = v > acc ? v : acc;
                break;
            case ncclMin:
                acc = v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        m += fabs(v);
    }
    if (c->op == ncclAvg) /* integers: NCCL's sum, divided, truncated toward zero */
        acc = tc_float(c->dtype) ? acc / n : trunc(acc / n);
    *mag = m;
    return acc;
}

/* Tolerance of a float reduction: a few roundings of the dtype over the terms' sizes. */
static inline double tc_tol(const struct tcase *c, double mag)
{
    double u = c->dtype == ncclFloat64   ? 0x1p-50
               : c->dtype == ncclFloat32 ? 0x1p-21
               : c->dtype == ncclFloat16 ? 0x1p-9
                                         : 0x1p-6;
    /* f32 keeps f32 precision at every size: the library turns arcomm's bf16 wire off
     * (NCCL_FACE_KNOB_DEFAULTS), so large f32 sums are checked as tightly as small. */
    return u * (mag + 1e-30) * 4 + (c->dtype == ncclFloat64 ? 0 : 1e-30);
}

/*
 * Checks rank r's output (host copy of its recvbuf, tc_recv_elems elements; for an
 * in-place call the whole buffer that held the input).  Returns the number of wrong
 * elements; the first is described in why.
 */
static inline size_t tc_check(const struct tcase *c, int r, int n, const void *out, char *why,
                              size_t why_len)
{
    size_t wrong = 0, e = tc_recv_elems(c, n);
    why[0] = '\0';
    if (c->kind == TC_REDUCE && r != c->root && !c->inplace) {
        for (size_t b = 0; b < e * tc_esize(c->dtype); b++)
            if (((const unsigned char *)out)[b] != TC_POISON) {
                if (wrong++ == 0)
                    snprintf(why, why_len, "non-root rank %d: byte %zu of recvbuff written", r, b);
            }
        return wrong;
    }
    if (c->kind == TC_REDUCE && r != c->root)
        return 0; /* in place on a non-root: the input buffer, any content */
    for (size_t i = 0; i < e; i++) {
        double got = tc_get(out, c->dtype, i), want, mag = 0;
        bool exact = !tc_float(c->dtype) || !tc_reduces(c) || c->op == ncclMax || c->op == ncclMin;
        switch (c->kind) {
        case TC_BROADCAST:
        case TC_BCAST:
            want = tc_value(tc_seed(c), c->root, i, c->dtype, c->op);
            break;
        case TC_ALLGATHER:
            want = tc_value(tc_seed(c), (int)(i / c->count), i % c->count, c->dtype, c->op);
            break;
        case TC_REDUCE_SCATTER:
            want = tc_reduce_ref(c, (size_t)r * c->count + i, n, &mag);
            break;
        default:
            want = tc_reduce_ref(c, i, n, &mag);
            break;
        }
        if (!tc_float(c->dtype) && tc_reduces(c)) {
            /* The integer result as the dtype holds it (wrapping). */
            char tmp[8];
            tc_put(tmp, c->dtype, 0, want);
            want = tc_get(tmp, c->dtype, 0);
        }
        bool ok = exact ? got == want : fabs(got - want) <= tc_tol(c, mag);
        if (!ok && wrong++ == 0)
            snprintf(why, why_len, "rank %d element %zu: got %.9g, want %.9g (tolerance %.3g)", r,
                     i, got, want, exact ? 0.0 : tc_tol(c, mag));
    }
    return wrong;
}

static inline const char *tc_kind_name(enum tc_kind k)
{
    static const char *const names[] = {"allreduce", "broadcast", "bcast",
                                        "reduce",    "allgather", "reduce_scatter"};
    return names[k];
}

/* FNV-1a of a buffer: ranks compare their outputs bit for bit through it. */
static inline uint64_t tc_hash(const void *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= ((const unsigned char *)p)[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The cases every GPU test runs (on n ranks): every dtype with sum, every op on f32
 * and i32, each collective, in place, premultiplied sums, both paths' sizes. */
static inline size_t tc_cases(struct tcase *out, size_t max, int n)
{
    size_t k = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (k < max)                                                                               \
            out[k] = (struct tcase){__VA_ARGS__};                                                  \
        k++;                                                                                       \
    } while (0)
    static const ncclDataType_t all_types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                               ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                               ncclFloat64, ncclBfloat16};
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++)
        ADD(.kind = TC_ALLREDUCE, .dtype = all_types[t], .op = ncclSum, .count = 1000 + t);
    static const ncclRedOp_t all_ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    for (size_t o = 0; o < 5; o++) {
        ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = all_ops[o], .count = 4099);
        ADD(.kind = TC_ALLREDUCE, .dtype = ncclInt32, .op = all_ops[o], .count = 517);
    }
    /* ncclAvg of integers (the sum divided, truncated), every collective that reduces. */
    ADD(.kind = TC_REDUCE, .dtype = ncclUint8, .op = ncclAvg, .count = 301, .root = n - 1);
    ADD(.kind = TC_REDUCE_SCATTER, .dtype = ncclInt64, .op = ncclAvg, .count = 100);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclInt8, .op = ncclAvg, .count = 77, .inplace = true);
    /* fp8 moves as bytes. */
    ADD(.kind = TC_ALLGATHER, .dtype = TC_FP8_E4M3, .count = 1001);
    ADD(.kind = TC_BROADCAST, .dtype = TC_FP8_E5M2, .count = 4097, .root = n - 1);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclSum, .count = 1, .inplace = true);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclSum, .count = 3 << 20);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclBfloat16, .op = ncclSum, .count = 1 << 20,
        .inplace = true);
    ADD(.kind = TC_BROADCAST, .dtype = ncclFloat32, .count = 12345, .root = n - 1);
    ADD(.kind = TC_BROADCAST, .dtype = ncclUint8, .count = 3 << 20, .root = 0);
    ADD(.kind = TC_BCAST, .dtype = ncclFloat16, .count = 777, .root = n > 1 ? 1 : 0);
    ADD(.kind = TC_REDUCE, .dtype = ncclFloat32, .op = ncclSum, .count = 5000, .root = 0);
    ADD(.kind = TC_REDUCE, .dtype = ncclInt64, .op = ncclMax, .count = 333, .root = n - 1);
    ADD(.kind = TC_REDUCE, .dtype = ncclFloat64, .op = ncclMin, .count = 64, .root = 0,
        .inplace = true);
    ADD(.kind = TC_ALLGATHER, .dtype = ncclFloat32, .count = 1000);
    ADD(.kind = TC_ALLGATHER, .dtype = ncclBfloat16, .count = 1 << 19, .inplace = true);
    ADD(.kind = TC_REDUCE_SCATTER, .dtype = ncclFloat32, .op = ncclSum, .count = 2048);
    ADD(.kind = TC_REDUCE_SCATTER, .dtype = ncclFloat16, .op = ncclMax, .count = 999,
        .inplace = true);
    ADD(.kind = TC_REDUCE_SCATTER, .dtype = ncclFloat64, .op = ncclAvg, .count = 100);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclNumOps, .count = 3000, .premul = 1);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat64, .op = ncclNumOps, .count = 200, .premul = 2,
        .inplace = true);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclInt32, .op = ncclNumOps, .count = 100, .premul = 1);
    ADD(.kind = TC_REDUCE_SCATTER, .dtype = ncclFloat32, .op = ncclNumOps, .count = 256,
        .premul = 2);
    ADD(.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclSum, .count = 0);
#undef ADD
    return k;
}

/* The cases captured into a CUDA graph (nccl_procs): the calls that enqueue work of
 * the library's own around the collective (premultiplying, dividing an integer mean).
 * Out of place or allreduce in place: tc_graph refills the whole input. */
static inline size_t tc_graph_cases(struct tcase *out, size_t max, int n)
{
    static const struct tcase g[] = {
        {.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclNumOps, .count = 3000, .premul = 1},
        {.kind = TC_ALLREDUCE,
         .dtype = ncclFloat64,
         .op = ncclNumOps,
         .count = 200,
         .premul = 2,
         .inplace = true},
        {.kind = TC_REDUCE_SCATTER,
         .dtype = ncclFloat32,
         .op = ncclNumOps,
         .count = 256,
         .premul = 2},
        {.kind = TC_ALLREDUCE, .dtype = ncclInt32, .op = ncclAvg, .count = 517},
        {.kind = TC_REDUCE, .dtype = ncclUint8, .op = ncclAvg, .count = 301},
        {.kind = TC_ALLREDUCE, .dtype = ncclFloat32, .op = ncclSum, .count = 4099},
    };
    size_t k = 0;
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]) && k < max; i++) {
        out[k] = g[i];
        out[k].graph = true;
        if (out[k].kind == TC_REDUCE)
            out[k].root = n - 1;
        k++;
    }
    return k;
}

#endif /* ARCOMM_TESTS_NCCL_CASES_H */
