/* SPDX-License-Identifier: MIT */
/*
 * The harness of test_reduce: random and special inputs, an exact model of coll_reduce
 * (f32 arithmetic in source order, written independently here; integers in 64-bit
 * arithmetic truncated at the end), a float64 reference within the rounding bound, and
 * tr_run_case, which runs one case under every instruction set this machine has and checks
 * each output element against the model and against the generic kernels bit for bit.
 * Outputs are poisoned before each call and the bytes past the end must stay poisoned.
 * The tests that call it are in test_reduce.c and test_reduce_edges.c.
 */
#include "test_reduce.h"
#include "reduce.h"
#include "reduce_isa.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GUARD  64 /* poisoned bytes after every destination */
#define POISON 0xa5

const char *const tr_isas[] = {"generic", "avx2", "avx512"};
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64*: reproducible, so a failure can be replayed */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

size_t tr_dsize(comm_dtype_t t)
{
    switch (t) {
    case COMM_I8:
    case COMM_U8:
        return 1;
    case COMM_F16:
    case COMM_BF16:
        return 2;
    case COMM_F64:
    case COMM_I64:
    case COMM_U64:
        return 8;
    default:
        return 4;
    }
}

static bool is_int(comm_dtype_t t)
{
    return t == COMM_I8 || t == COMM_U8 || t == COMM_I32 || t == COMM_U32 || t == COMM_I64 ||
           t == COMM_U64;
}

static bool is_signed(comm_dtype_t t)
{
    return t == COMM_I8 || t == COMM_I32 || t == COMM_I64;
}

static float rand_float(void)
{
    /* sign * [1, 2) * 2^[-8, 8]: never zero, fits f16 even summed over 9 sources */
    float m = 1.0f + (float)(rng() >> 40) / (float)(1u << 24);
    float v = ldexpf(m, (int)(rng() % 17) - 8);
    return rng() & 1 ? -v : v;
}

/* sign * [1/2, 2): products of up to 9 sources stay normal in f16 and bf16. */
static float rand_near1(void)
{
    float m = 1.0f + (float)(rng() >> 40) / (float)(1u << 24);
    float v = ldexpf(m, -(int)(rng() % 2));
    return rng() & 1 ? -v : v;
}

static const uint32_t special_f32[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7fc12345,
    0x7f800001, 0xff812345, 0x7fbfffff, 0x00000001, 0x807fffff, 0x00400000, 0x7f7fffff,
    0xff7fffff, 0x3f800000, 0x00800000, 0x477ff000, 0x33000000,
};
static const uint16_t special_f16[] = {
    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfd55,
    0x7e3f, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x0400, 0x3c00,
};
static const uint16_t special_bf16[] = {
    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81,
    0xffa5, 0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0080, 0x3f80,
};
static const uint64_t special_f64[] = {
    0,
    0x8000000000000000ull,
    0x7ff0000000000000ull,
    0xfff0000000000000ull,
    0x7ff8000000000000ull,
    0xfff8000000001234ull,
    0x7ff0000000000001ull,
    0x7ff4000000000000ull,
    1,
    0x800fffffffffffffull,
    0x7fefffffffffffffull,
    0x3ff0000000000000ull,
};

/* PROD gets values near 1 (floats) and odd values (integers: products never vanish). */
static void fill(void *p, comm_dtype_t t, comm_op_t op, size_t count, enum data_kind data)
{
    unsigned char *b = p;

    for (size_t i = 0; i < count; i++) {
        bool special = data == DATA_SPECIAL && rng() % 4 == 0;
        bool zero = data == DATA_ZEROS && rng() % 2 == 0;
        uint64_t r = rng();
        float f = op == COMM_PROD ? rand_near1() : rand_float();
        uint16_t h;
        uint32_t u;
        int32_t i32;
        int64_t i64;
        double d;

        switch (t) {
        case COMM_F32:
            u = special ? special_f32[r % NELEM(special_f32)] : coll_rd_f32_bits(f);
            u = zero ? (uint32_t)(r & 1) << 31 : u;
            memcpy(b + 4 * i, &u, 4);
            break;
        case COMM_F16:
            h = special ? special_f16[r % NELEM(special_f16)] : coll_f32_to_f16(f);
            h = zero ? (uint16_t)((r & 1) << 15) : h;
            memcpy(b + 2 * i, &h, 2);
            break;
        case COMM_BF16:
            h = special ? special_bf16[r % NELEM(special_bf16)] : coll_f32_to_bf16_1(f);
            h = zero ? (uint16_t)((r & 1) << 15) : h;
            memcpy(b + 2 * i, &h, 2);
            break;
        case COMM_F64:
            d = (double)f * (1.0 + (double)(r >> 11) * 0x1p-60);
            if (special)
                d = coll_rd_bits_f64(special_f64[r % NELEM(special_f64)]);
            if (zero)
                d = r & 1 ? -0.0 : 0.0;
            memcpy(b + 8 * i, &d, 8);
            break;
        case COMM_I32:
            /* whole range: sums overflow and must wrap; never zero */
            i32 = (int32_t)(uint32_t)(r | 1);
            memcpy(b + 4 * i, &i32, 4);
            break;
        case COMM_I64:
            i64 = (int64_t)(r | 1);
            memcpy(b + 8 * i, &i64, 8);
            break;
        default:
            /* I8, U8, U32, U64: the whole range (INT8_MIN, 0xff, ... included); odd and
             * so never zero for PROD. */
            r = op == COMM_PROD ? r | 1 : r;
            memcpy(b + tr_dsize(t) * i, &r, tr_dsize(t)); /* the low bytes, little-endian */
            break;
        }
    }
}

/* Element i of a float buffer, widened to f32 the way the kernels must. */
static float widen(comm_dtype_t t, const void *p, size_t i)
{
    uint16_t h;
    float f;

    if (t == COMM_F32) {
        memcpy(&f, (const unsigned char *)p + 4 * i, 4);
        return f;
    }
    memcpy(&h, (const unsigned char *)p + 2 * i, 2);
    return t == COMM_F16 ? coll_f16_to_f32(h) : coll_bf16_to_f32(h);
}

/*
 * The reduction as the header states it, for the float dtypes: acc op s in source
 * order, NaN rules included (the first NaN wins; SUM makes it quiet), then the addend.
 */
static bool selects(comm_op_t op)
{
    return op == COMM_MAX || op == COMM_MIN;
}

static float model_op(comm_op_t op, float acc, float s)
{
    if (isnan(acc))
        return selects(op) ? acc : coll_rd_bits_f32(coll_rd_f32_bits(acc) | 0x400000);
    if (isnan(s))
        return selects(op) ? s : coll_rd_bits_f32(coll_rd_f32_bits(s) | 0x400000);
    if (op == COMM_MAX)
        return s > acc ? s : acc;
    if (op == COMM_MIN)
        return s < acc ? s : acc;
    if (op == COMM_PROD)
        return acc * s;
    return acc + s; /* SUM, and AVG's sum */
}

static double model_op64(comm_op_t op, double acc, double s)
{
    const uint64_t q = 0x0008000000000000ull;

    if (isnan(acc))
        return selects(op) ? acc : coll_rd_bits_f64(coll_rd_f64_bits(acc) | q);
    if (isnan(s))
        return selects(op) ? s : coll_rd_bits_f64(coll_rd_f64_bits(s) | q);
    if (op == COMM_MAX)
        return s > acc ? s : acc;
    if (op == COMM_MIN)
        return s < acc ? s : acc;
    if (op == COMM_PROD)
        return acc * s;
    return acc + s;
}

/* Element i of an integer buffer: its bits zero-extended, and its value as a signed
 * or unsigned number for comparisons. */
static uint64_t int_bits(comm_dtype_t t, const void *p, size_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const unsigned char *)p + tr_dsize(t) * i, tr_dsize(t)); /* little-endian */
    return v;
}

static bool int_less(comm_dtype_t t, uint64_t a, uint64_t b)
{
    if (!is_signed(t))
        return a < b;
    int sh = 64 - 8 * (int)tr_dsize(t);
    return (int64_t)(a << sh) >> sh < (int64_t)(b << sh) >> sh;
}

/* The expected bytes of dst[j][i]; also the float64 reference check for finite data. */
static void model(const struct tcase *tc, const void *const *src, const void *addend, size_t i,
                  unsigned char *out)
{
    const size_t ai = tc->addend_count ? (tc->offset + i) % tc->addend_count : 0;
    const bool add = addend && tc->op == COMM_SUM;

    if (is_int(tc->dtype)) {
        /* mod 2^64 then truncated: the same low bits as wrapping in the dtype's width */
        uint64_t acc = 0, v;
        for (int k = 0; k < tc->nsrc; k++) {
            v = int_bits(tc->dtype, src[k], i);
            if (k == 0)
                acc = v;
            else if (tc->op == COMM_SUM || tc->op == COMM_AVG) /* AVG: reduced as SUM */
                acc += v;
            else if (tc->op == COMM_PROD)
                acc *= v;
            else if (tc->op == COMM_MAX ? int_less(tc->dtype, acc, v) : int_less(tc->dtype, v, acc))
                acc = v;
        }
        if (add)
            acc += int_bits(tc->dtype, addend, ai);
        memcpy(out, &acc, tr_dsize(tc->dtype));
        return;
    }
    const double d = tc->avg_n ? tc->avg_n : tc->nsrc; /* AVG's divisor */
    if (tc->dtype == COMM_F64) {
        double acc = 0, ref = 0, sumabs = 0, s, tol;
        for (int k = 0; k < tc->nsrc; k++) {
            memcpy(&s, (const unsigned char *)src[k] + 8 * i, 8);
            acc = k == 0 ? s : model_op64(tc->op, acc, s);
            ref = k == 0 ? s : tc->op == COMM_PROD ? ref * s : selects(tc->op) ? acc : ref + s;
            sumabs += fabs(s);
        }
        if (add) {
            memcpy(&s, (const unsigned char *)addend + 8 * ai, 8);
            acc = model_op64(COMM_SUM, acc, s);
            ref += s;
            sumabs += fabs(s);
        }
        tol = sumabs * (tc->nsrc + 1) * 0x1p-52;
        if (tc->op == COMM_PROD)
            tol = fabs(ref) * (tc->nsrc + 1) * 0x1p-52;
        if (tc->op == COMM_AVG) {
            acc = isnan(acc) ? coll_rd_bits_f64(coll_rd_f64_bits(acc) | 0x0008000000000000ull)
                             : acc / d;
            ref /= d;
            tol = tol / d + fabs(ref) * 0x1p-52;
        }
        if (tc->data == DATA_RANDOM)
            assert_true(fabs(acc - ref) <= tol);
        memcpy(out, &acc, 8);
        return;
    }

    float acc = 0, s;
    double ref = 0, sumabs = 0, tol;
    for (int k = 0; k < tc->nsrc; k++) {
        s = widen(tc->src_dtype, src[k], i);
        if (tc->round_bf16)
            s = coll_bf16_to_f32(coll_f32_to_bf16_1(s));
        acc = k == 0 ? s : model_op(tc->op, acc, s);
        ref = k == 0                ? s
              : tc->op == COMM_MAX  ? fmax(ref, s)
              : tc->op == COMM_MIN  ? fmin(ref, s)
              : tc->op == COMM_PROD ? ref * s
                                    : ref + s;
        sumabs += fabs(s);
    }
    if (add) {
        s = widen(tc->dtype, addend, ai);
        acc = model_op(COMM_SUM, acc, s);
        ref += s;
        sumabs += fabs(s);
    }
    /* f32 rounding of each step */
    tol = sumabs * (tc->nsrc + 1) * 0x1p-24;
    if (tc->op == COMM_PROD)
        tol = fabs(ref) * (tc->nsrc + 1) * 0x1p-24;
    if (tc->op == COMM_AVG) {
        acc = isnan(acc) ? coll_rd_bits_f32(coll_rd_f32_bits(acc) | 0x400000) : acc / (float)d;
        ref /= d;
        tol = tol / d + fabs(ref) * 0x1p-24;
    }
    if (tc->dtype == COMM_F32) {
        memcpy(out, &acc, 4);
    } else {
        uint16_t h = tc->dtype == COMM_F16 ? coll_f32_to_f16(acc) : coll_f32_to_bf16_1(acc);
        memcpy(out, &h, 2);
        acc = widen(tc->dtype, out, 0);
    }
    if (tc->data == DATA_RANDOM) {
        /* plus the final rounding to the destination */
        tol += fabs(ref) * (tc->dtype == COMM_F16 ? 0x1p-11 : tc->dtype == COMM_BF16 ? 0x1p-8 : 0);
        tol += tc->dtype == COMM_F16 ? 0x1p-25 : 0;
        if (selects(tc->op))
            tol = 0; /* max/min select a value: exact */
        assert_true(fabs((double)acc - ref) <= tol);
    }
}

struct bufs {
    unsigned char *src_mem[MAX_SRC], *dst_mem[MAX_DST], *add_mem[MAX_DST];
    const void *src[MAX_SRC];
    void *dst[MAX_DST];
    const void *addend[MAX_DST];
    unsigned char *orig[MAX_SRC]; /* copies of the sources (in place overwrites them) */
    unsigned char *generic[MAX_DST];
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void bufs_alloc(struct bufs *b, const struct tcase *tc)
{
    const size_t se = tr_dsize(tc->src_dtype), de = tr_dsize(tc->dtype);

    memset(b, 0, sizeof(*b));
    for (int k = 0; k < tc->nsrc; k++) {
        b->src_mem[k] = xmalloc(tc->count * se + GUARD + 64);
        b->orig[k] = xmalloc(tc->count * se + 1);
        b->src[k] = b->src_mem[k] + tc->misalign;
        fill((void *)b->src[k], tc->src_dtype, tc->op, tc->count, tc->data);
        memcpy(b->orig[k], b->src[k], tc->count * se);
    }
    for (int j = 0; j < tc->ndst; j++) {
        b->dst_mem[j] = xmalloc(tc->count * de + GUARD + 64);
        b->dst[j] = b->dst_mem[j] + tc->misalign;
        b->generic[j] = xmalloc(tc->count * de + 1);
        /* a NULL entry for dst 1: "entries may be NULL" */
        if (tc->addend_count && j != 1) {
            b->add_mem[j] = xmalloc(tc->addend_count * de + 64);
            b->addend[j] = b->add_mem[j] + tc->misalign;
            fill((void *)b->addend[j], tc->dtype, COMM_SUM, tc->addend_count, tc->data);
        }
    }
}

static void bufs_free(struct bufs *b, const struct tcase *tc)
{
    for (int k = 0; k < tc->nsrc; k++) {
        free(b->src_mem[k]);
        free(b->orig[k]);
    }
    for (int j = 0; j < tc->ndst; j++) {
        free(b->dst_mem[j]);
        free(b->add_mem[j]);
        free(b->generic[j]);
    }
}

void tr_run_case(const struct tcase *tc)
{
    const size_t se = tr_dsize(tc->src_dtype), de = tr_dsize(tc->dtype);
    struct bufs b;
    bool ran_generic = false;
    unsigned char want[8];

    bufs_alloc(&b, tc);
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
        struct coll_reduce_args args = {
            .dst = b.dst,
            .ndst = tc->ndst,
            .dst_dtype = tc->dtype,
            .src = b.src,
            .nsrc = tc->nsrc,
            .src_dtype = tc->src_dtype,
            .round_bf16 = tc->round_bf16,
            .count = tc->count,
            .op = tc->op,
            .avg_n = tc->avg_n,
            .addend = tc->addend_count ? b.addend : NULL,
            .addend_count = tc->addend_count,
            .offset = tc->offset,
            .nt_store = tc->nt,
        };
        const void *src_in_place[MAX_SRC];
        void *dst_in_place[MAX_DST];

        if (!coll_reduce_force_isa(tr_isas[t]))
            continue; /* this machine lacks it */
        for (int k = 0; k < tc->nsrc; k++)
            memcpy((void *)b.src[k], b.orig[k], tc->count * se);
        for (int j = 0; j < tc->ndst; j++)
            memset(b.dst_mem[j], POISON, tc->count * de + GUARD + 64);
        if (tc->in_place) {
            memcpy(src_in_place, b.src, sizeof(src_in_place));
            memcpy(dst_in_place, b.dst, sizeof(dst_in_place));
            dst_in_place[0] = (void *)src_in_place[0];
            if (tc->ndst > 1)
                dst_in_place[1] = (void *)src_in_place[tc->nsrc - 1];
            args.src = src_in_place;
            args.dst = dst_in_place;
        }
        coll_reduce(&args);
        assert_string_equal(coll_reduce_isa(), tr_isas[t]);

        /* the model reads the saved sources: in place overwrote some */
        const void *orig[MAX_SRC];
        for (int k = 0; k < tc->nsrc; k++)
            orig[k] = b.orig[k];
        for (int j = 0; j < tc->ndst; j++) {
            const unsigned char *d = args.dst[j];
            for (size_t i = 0; i < tc->count; i++) {
                model(tc, orig, tc->addend_count ? b.addend[j] : NULL, i, want);
                if (memcmp(d + de * i, want, de) != 0) {
                    fail_msg("isa %s dtype %d op %d nsrc %d ndst %d count %zu: dst %d "
                             "element %zu differs from the model",
                             tr_isas[t], tc->dtype, tc->op, tc->nsrc, tc->ndst, tc->count, j, i);
                }
            }
            if (!tc->in_place || j > 1) {
                for (size_t g = 0; g < GUARD; g++)
                    assert_int_equal(d[tc->count * de + g], POISON);
            }
            if (!ran_generic)
                memcpy(b.generic[j], d, tc->count * de);
            else
                assert_memory_equal(b.generic[j], d, tc->count * de);
        }
        ran_generic = true;
    }
    assert_true(ran_generic);
    coll_reduce_force_isa(NULL);
    bufs_free(&b, tc);
}
