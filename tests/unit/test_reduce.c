/* SPDX-License-Identifier: MIT */
/*
 * coll_reduce: every dtype x op x source/destination count x length, run under every
 * instruction set this machine has, each output element checked against an exact model
 * (f32 arithmetic in source order, written independently here; integers in 64-bit
 * arithmetic truncated at the end), against a float64 reference within the rounding
 * bound, and against the generic kernels bit for bit.  Outputs are poisoned before
 * each call and the bytes past the end must stay poisoned.
 */
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

#define MAX_SRC 9
#define MAX_DST 8
#define GUARD   64 /* poisoned bytes after every destination */
#define POISON  0xa5

enum data_kind {
    DATA_RANDOM,  /* finite, never zero, mixed magnitudes */
    DATA_SPECIAL, /* a quarter NaN / Inf / +-0 / subnormal / extreme */
    DATA_ZEROS,   /* half +0.0 / -0.0, no NaN: MAX/MIN ties outside NaN vectors */
};

struct tcase {
    comm_dtype_t dtype;
    comm_dtype_t src_dtype; /* == dtype, or BF16 with dtype F32 */
    comm_op_t op;
    int avg_n; /* AVG's divisor; 0 = nsrc */
    int nsrc, ndst;
    size_t count;
    bool round_bf16, nt;
    size_t misalign;     /* bytes added to every pointer */
    bool in_place;       /* dst[0] = src[0], and dst[1] = src[nsrc - 1] when ndst > 1 */
    size_t addend_count; /* 0: no addend */
    size_t offset;
    enum data_kind data;
};

static const char *const isas[] = {"generic", "avx2", "avx512"};
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64*: reproducible, so a failure can be replayed */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static size_t dsize(comm_dtype_t t)
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

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

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
            memcpy(b + dsize(t) * i, &r, dsize(t)); /* the low bytes, little-endian */
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
    memcpy(&v, (const unsigned char *)p + dsize(t) * i, dsize(t)); /* little-endian */
    return v;
}

static bool int_less(comm_dtype_t t, uint64_t a, uint64_t b)
{
    if (!is_signed(t))
        return a < b;
    int sh = 64 - 8 * (int)dsize(t);
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
        memcpy(out, &acc, dsize(tc->dtype));
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
    const size_t se = dsize(tc->src_dtype), de = dsize(tc->dtype);

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

static void run_case(const struct tcase *tc)
{
    const size_t se = dsize(tc->src_dtype), de = dsize(tc->dtype);
    struct bufs b;
    bool ran_generic = false;
    unsigned char want[8];

    bufs_alloc(&b, tc);
    for (size_t t = 0; t < NELEM(isas); t++) {
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

        if (!coll_reduce_force_isa(isas[t]))
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
        assert_string_equal(coll_reduce_isa(), isas[t]);

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
                             isas[t], tc->dtype, tc->op, tc->nsrc, tc->ndst, tc->count, j, i);
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

static const size_t counts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 1000, 4099};
/* The float dtypes first (test_specials takes the first four). */
static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
                                      COMM_I64, COMM_I8,  COMM_U8,   COMM_U32, COMM_U64};
static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_MIN, COMM_PROD, COMM_AVG};

static void test_isa_choice(void **state)
{
    const char *isa;

    (void)state;
    isa = coll_reduce_isa();
    assert_true(strcmp(isa, "generic") == 0 || strcmp(isa, "avx2") == 0 ||
                strcmp(isa, "avx512") == 0);
    assert_false(coll_reduce_force_isa("sse9"));
    assert_string_equal(coll_reduce_isa(), isa);
    assert_true(coll_reduce_force_isa("generic"));
    assert_string_equal(coll_reduce_isa(), "generic");
    assert_true(coll_reduce_force_isa(NULL));
    assert_string_equal(coll_reduce_isa(), isa);
    for (size_t t = 0; t < NELEM(isas); t++)
        print_message("isa %s: %s\n", isas[t],
                      coll_reduce_ops_find(isas[t]) ? "tested" : "not on this machine");
}

/* Every dtype x op x nsrc x ndst x count, aligned and misaligned by one element. */
static void test_matrix(void **state)
{
    static const int nsrcs[] = {1, 2, 3, 5, 8, 9};
    static const int ndsts[] = {1, 2, 3, 8};

    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t o = 0; o < NELEM(ops); o++) {
            for (size_t s = 0; s < NELEM(nsrcs); s++) {
                for (size_t c = 0; c < NELEM(counts); c++) {
                    struct tcase tc = {
                        .dtype = dtypes[d],
                        .src_dtype = dtypes[d],
                        .op = ops[o],
                        .nsrc = nsrcs[s],
                        .ndst = ndsts[(s + c) % NELEM(ndsts)],
                        .count = counts[c],
                        .misalign = (c & 1) ? dsize(dtypes[d]) : 0,
                    };
                    run_case(&tc);
                }
            }
        }
    }
}

/* Pointers off by one byte: "any alignment is allowed". */
static void test_byte_misaligned(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t c = 0; c < NELEM(counts); c++) {
            struct tcase tc = {
                .dtype = dtypes[d],
                .src_dtype = dtypes[d],
                .op = ops[(c + d) % NELEM(ops)],
                .nsrc = 3,
                .ndst = 2,
                .count = counts[c],
                .misalign = 1,
                .nt = c & 1,
                .addend_count = (c & 2) && ops[(c + d) % NELEM(ops)] == COMM_SUM ? counts[c] : 0,
            };
            run_case(&tc);
        }
    }
}

static void test_in_place(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (int nsrc = 1; nsrc <= 4; nsrc++) {
            struct tcase tc = {
                .dtype = dtypes[d],
                .src_dtype = dtypes[d],
                .op = COMM_SUM,
                .nsrc = nsrc,
                .ndst = 3,
                .count = 4099 + 8192 * (size_t)nsrc,
                .in_place = true,
                .misalign = nsrc == 3 ? dsize(dtypes[d]) : 0,
            };
            run_case(&tc);
            tc.op = COMM_PROD;
            run_case(&tc);
            tc.op = COMM_AVG; /* the division in place, in dst[0] == src[0] */
            tc.avg_n = nsrc == 2 ? 5 : 0;
            run_case(&tc);
            tc.avg_n = 0;
            tc.op = COMM_MAX;
            tc.ndst = 1;
            run_case(&tc);
        }
    }
}

/* Residual (addend_count == count) and row-broadcast bias with the slice mid-row. */
static void test_addend(void **state)
{
    static const size_t rows[] = {1, 3, 7, 64, 100, 3000, 5000};
    static const size_t offsets[] = {0, 5, 123, 4999};

    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t r = 0; r < NELEM(rows); r++) {
            struct tcase tc = {
                .dtype = dtypes[d],
                .src_dtype = dtypes[d],
                .op = COMM_SUM,
                .nsrc = 2,
                .ndst = 3,
                .count = 6001,
                .addend_count = rows[r],
                .offset = offsets[r % NELEM(offsets)],
                .misalign = r == 2 ? 2 : 0,
            };
            run_case(&tc);
        }
        for (size_t c = 0; c < NELEM(counts); c++) {
            struct tcase tc = {
                .dtype = dtypes[d],
                .src_dtype = dtypes[d],
                .op = COMM_SUM,
                .nsrc = 4,
                .ndst = 2,
                .count = counts[c],
                .addend_count = counts[c] ? counts[c] : 1,
                .offset = c & 1 ? 7 : 0,
            };
            run_case(&tc);
            tc.op = COMM_MAX; /* the addend is ignored with every op but SUM */
            run_case(&tc);
            tc.op = COMM_PROD;
            run_case(&tc);
            tc.op = COMM_AVG;
            run_case(&tc);
        }
    }
}

/* BF16 wire narrowing: f32 sources rounded through bf16, and bf16 wire sources. */
static void test_bf16_wire(void **state)
{
    (void)state;
    for (size_t c = 0; c < NELEM(counts); c++) {
        for (size_t o = 0; o < NELEM(ops); o++) {
            struct tcase tc = {
                .dtype = COMM_F32,
                .src_dtype = COMM_F32,
                .op = ops[o],
                .nsrc = 1 + (int)c % 8,
                .ndst = 2,
                .count = counts[c],
                .round_bf16 = true,
                .misalign = (c & 1) * 4,
                .addend_count = ops[o] == COMM_SUM ? 17 : 0,
                .offset = 3,
            };
            run_case(&tc);
            tc.data = DATA_SPECIAL;
            run_case(&tc);
            tc.round_bf16 = false;
            tc.src_dtype = COMM_BF16;
            run_case(&tc);
            tc.data = DATA_RANDOM;
            run_case(&tc);
        }
    }
}

static void test_nt_store(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t m = 0; m < 3; m++) {
            struct tcase tc = {
                .dtype = dtypes[d],
                .src_dtype = dtypes[d],
                .op = COMM_SUM,
                .nsrc = 3,
                .ndst = 3,
                .count = 20000 + m,
                .nt = true,
                .misalign = m * dsize(dtypes[d]),
                .addend_count = m == 1 ? 512 : 0,
                .offset = 100,
            };
            run_case(&tc);
            tc.count = 37;
            run_case(&tc);
            tc.op = m % 2 ? COMM_PROD : COMM_AVG; /* no addend: plain streamed stores */
            tc.count = 20000 + m;
            run_case(&tc);
        }
    }
}

/* More than 1 MiB per buffer: many blocks. */
static void test_large(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        struct tcase tc = {
            .dtype = dtypes[d],
            .src_dtype = dtypes[d],
            .op = COMM_SUM,
            .nsrc = 3,
            .ndst = 2,
            .count = (1u << 20) / dsize(dtypes[d]) + 4099,
            .misalign = dsize(dtypes[d]),
            .addend_count = 4096,
            .offset = 1000,
        };
        run_case(&tc);
        tc.op = COMM_PROD;
        run_case(&tc);
        tc.op = COMM_AVG;
        tc.avg_n = 8;
        run_case(&tc);
    }
    struct tcase tc = {
        .dtype = COMM_F32,
        .src_dtype = COMM_F32,
        .op = COMM_SUM,
        .nsrc = 8,
        .ndst = 8,
        .count = 3u << 18,
        .nt = true,
    };
    run_case(&tc);
}

/* NaN, Inf, -0.0, subnormals: the model's NaN rules and every ISA equal, bit for bit. */
static void test_specials(void **state)
{
    (void)state;
    for (size_t d = 0; d < 4; d++) { /* the float dtypes */
        for (size_t o = 0; o < NELEM(ops); o++) {
            for (int nsrc = 1; nsrc <= MAX_SRC; nsrc++) {
                struct tcase tc = {
                    .dtype = dtypes[d],
                    .src_dtype = dtypes[d],
                    .op = ops[o],
                    .nsrc = nsrc,
                    .ndst = 2,
                    .count = 1000 + (size_t)nsrc,
                    .data = DATA_SPECIAL,
                    .addend_count = nsrc & 1 ? 0 : 333,
                    .offset = 11,
                    .nt = nsrc == 4,
                };
                run_case(&tc);
                tc.data = DATA_ZEROS;
                run_case(&tc);
            }
        }
    }
}

/* MAX/MIN NaN rule spelled out on f32: the first NaN in source order, bits unchanged. */
static void test_max_min_nan(void **state)
{
    enum { N = 256 };
    const uint32_t q1 = 0x7fc00001, s2 = 0xff800002; /* a quiet and a signalling NaN */
    float a[N], b[N], c[N], out[N];
    const void *src[3] = {a, b, c};
    void *dst[1] = {out};

    (void)state;
    for (int i = 0; i < N; i++) {
        a[i] = 1.0f + (float)i;
        b[i] = -2.0f - (float)i;
        c[i] = 0.5f;
    }
    a[3] = coll_rd_bits_f32(q1);
    b[3] = coll_rd_bits_f32(s2);
    b[40] = coll_rd_bits_f32(s2);
    c[63] = coll_rd_bits_f32(q1);
    /* ties in vectors without NaNs: the earlier source wins, a -0.0 here */
    for (int i = 128; i < N; i++) {
        a[i] = -0.0f;
        b[i] = 0.0f;
        c[i] = i % 2 ? -0.0f : 0.0f;
    }
    for (size_t t = 0; t < NELEM(isas); t++) {
        for (int op = COMM_MAX; op <= COMM_MIN; op++) {
            struct coll_reduce_args args = {
                .dst = dst,
                .ndst = 1,
                .dst_dtype = COMM_F32,
                .src = src,
                .nsrc = 3,
                .src_dtype = COMM_F32,
                .count = N,
                .op = (comm_op_t)op,
            };
            if (!coll_reduce_force_isa(isas[t]))
                continue;
            coll_reduce(&args);
            assert_int_equal(coll_rd_f32_bits(out[3]), q1);
            assert_int_equal(coll_rd_f32_bits(out[40]), s2);
            assert_int_equal(coll_rd_f32_bits(out[63]), q1);
            for (int i = 128; i < N; i++)
                assert_int_equal(coll_rd_f32_bits(out[i]), 0x80000000u);
            assert_true(out[0] == (op == COMM_MAX ? 1.0f : -2.0f));
        }
    }
    coll_reduce_force_isa(NULL);
}

/* i32/i64 sums wrap around; MAX/MIN are signed. */
static void test_int_wrap(void **state)
{
    int32_t a32[40], b32[40], o32[40];
    int64_t a64[40], b64[40], o64[40];
    const void *s32[2] = {a32, b32}, *s64[2] = {a64, b64};
    void *d32[1] = {o32}, *d64[1] = {o64};

    (void)state;
    for (int i = 0; i < 40; i++) {
        a32[i] = INT32_MAX - i;
        b32[i] = 100 + i;
        a64[i] = INT64_MIN + i;
        b64[i] = -1000 - i;
    }
    for (size_t t = 0; t < NELEM(isas); t++) {
        struct coll_reduce_args args = {
            .dst = d32,
            .ndst = 1,
            .dst_dtype = COMM_I32,
            .src = s32,
            .nsrc = 2,
            .src_dtype = COMM_I32,
            .count = 40,
            .op = COMM_SUM,
        };
        if (!coll_reduce_force_isa(isas[t]))
            continue;
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_int_equal(o32[i], INT32_MIN + 99);
        args.op = COMM_MAX;
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_int_equal(o32[i], INT32_MAX - i);
        args = (struct coll_reduce_args){
            .dst = d64,
            .ndst = 1,
            .dst_dtype = COMM_I64,
            .src = s64,
            .nsrc = 2,
            .src_dtype = COMM_I64,
            .count = 40,
            .op = COMM_SUM,
        };
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_true(o64[i] == INT64_MAX - 999); /* MIN + i - 1000 - i wraps */
        args.op = COMM_MIN;
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_true(o64[i] == INT64_MIN + i);
    }
    coll_reduce_force_isa(NULL);
}

/* AVG's divisor: avg_n, or nsrc when 0; integers handed AVG get the SUM (no UB). */
static void test_avg_divisor(void **state)
{
    static const int avg_ns[] = {0, 1, 2, 3, 7, 64};

    (void)state;
    for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t a = 0; a < NELEM(avg_ns); a++) {
            for (int nsrc = 1; nsrc <= 4; nsrc++) {
                struct tcase tc = {
                    .dtype = dtypes[d],
                    .src_dtype = dtypes[d],
                    .op = COMM_AVG,
                    .avg_n = avg_ns[a],
                    .nsrc = nsrc,
                    .ndst = 1 + (int)a % 3,
                    .count = 1000 + a,
                    .misalign = a & 1 ? dsize(dtypes[d]) : 0,
                };
                run_case(&tc);
                if (d < 4) {
                    tc.data = DATA_SPECIAL;
                    run_case(&tc);
                }
            }
        }
    }
    /* Spelled out: (1 + 2 + 4) / 7 == 1 exactly, and 3 / 2 == 1.5 in f16. */
    for (size_t t = 0; t < NELEM(isas); t++) {
        float a[40], b[40], c[40], out[40];
        uint16_t h[2][40], ho[40];
        const void *src[3] = {a, b, c}, *hsrc[2] = {h[0], h[1]};
        void *dst[1] = {out}, *hdst[1] = {ho};
        for (int i = 0; i < 40; i++) {
            a[i] = 1.0f;
            b[i] = 2.0f;
            c[i] = 4.0f;
            h[0][i] = 0x3c00; /* 1.0 */
            h[1][i] = 0x4000; /* 2.0 */
        }
        struct coll_reduce_args args = {
            .dst = dst,
            .ndst = 1,
            .dst_dtype = COMM_F32,
            .src = src,
            .nsrc = 3,
            .src_dtype = COMM_F32,
            .count = 40,
            .op = COMM_AVG,
            .avg_n = 7,
        };
        if (!coll_reduce_force_isa(isas[t]))
            continue;
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_true(out[i] == 1.0f);
        args = (struct coll_reduce_args){
            .dst = hdst,
            .ndst = 1,
            .dst_dtype = COMM_F16,
            .src = hsrc,
            .nsrc = 2,
            .src_dtype = COMM_F16,
            .count = 40,
            .op = COMM_AVG,
        };
        coll_reduce(&args);
        for (int i = 0; i < 40; i++)
            assert_int_equal(ho[i], 0x3e00); /* 1.5 */
    }
    coll_reduce_force_isa(NULL);
}

/* PROD: the first NaN in source order, made quiet; 0 * Inf the default NaN; overflow. */
static void test_prod_specials(void **state)
{
    enum { N = 64 };
    const uint32_t s1 = 0x7f800123, q2 = 0xffc00002; /* a signalling and a quiet NaN */
    float a[N], b[N], c[N], out[N];
    const void *src[3] = {a, b, c};
    void *dst[1] = {out};

    (void)state;
    for (int i = 0; i < N; i++) {
        a[i] = 1.5f;
        b[i] = -2.0f;
        c[i] = 0.25f;
    }
    b[5] = coll_rd_bits_f32(s1);
    c[5] = coll_rd_bits_f32(q2);
    c[20] = coll_rd_bits_f32(q2);
    a[33] = 0.0f;
    b[33] = INFINITY;
    a[40] = 0x1p100f;
    b[40] = 0x1p100f; /* overflows f32: Inf, then * 0.25 stays Inf */
    for (size_t t = 0; t < NELEM(isas); t++) {
        struct coll_reduce_args args = {
            .dst = dst,
            .ndst = 1,
            .dst_dtype = COMM_F32,
            .src = src,
            .nsrc = 3,
            .src_dtype = COMM_F32,
            .count = N,
            .op = COMM_PROD,
        };
        if (!coll_reduce_force_isa(isas[t]))
            continue;
        coll_reduce(&args);
        assert_int_equal(coll_rd_f32_bits(out[5]), s1 | 0x400000);
        assert_int_equal(coll_rd_f32_bits(out[20]), q2);
        assert_true(isnan(out[33]));
        assert_true(out[40] == INFINITY);
        assert_true(out[0] == -0.75f);
    }
    coll_reduce_force_isa(NULL);
}

/* The 0.2 integers at their edges: signed vs unsigned order, wrapping sums and products. */
static void test_int_edges(void **state)
{
    (void)state;
    for (size_t t = 0; t < NELEM(isas); t++) {
        uint8_t a8[100], b8[100], o8[100];
        uint32_t a32[100], b32[100], o32[100];
        uint64_t a64[100], b64[100], o64[100];
        const void *s8[2] = {a8, b8}, *s32[2] = {a32, b32}, *s64[2] = {a64, b64};
        void *d8[1] = {o8}, *d32[1] = {o32}, *d64[1] = {o64};
        for (int i = 0; i < 100; i++) {
            a8[i] = 200; /* -56 as i8 */
            b8[i] = 100;
            a32[i] = 0xfffffff0u; /* -16 as i32 */
            b32[i] = 7;
            a64[i] = UINT64_MAX - 1; /* -2 as i64 */
            b64[i] = 3;
        }
        struct coll_reduce_args args = {
            .ndst = 1,
            .nsrc = 2,
            .count = 100,
        };
        if (!coll_reduce_force_isa(isas[t]))
            continue;
        static const struct {
            comm_dtype_t dt;
            comm_op_t op;
            uint64_t want;
        } cases[] = {
            {COMM_U8, COMM_MAX, 200},
            {COMM_I8, COMM_MAX, 100},
            {COMM_U8, COMM_MIN, 100},
            {COMM_I8, COMM_MIN, 200},
            {COMM_U8, COMM_SUM, 44}, /* 300 mod 256 */
            {COMM_I8, COMM_SUM, 44},
            {COMM_U8, COMM_PROD, 32}, /* 20000 mod 256 */
            {COMM_I8, COMM_PROD, 32},
            {COMM_I8, COMM_AVG, 44}, /* handed AVG: the sum */
            {COMM_U32, COMM_MAX, 0xfffffff0u},
            {COMM_I32, COMM_MAX, 7},
            {COMM_U32, COMM_MIN, 7},
            {COMM_I32, COMM_MIN, 0xfffffff0u},
            {COMM_U32, COMM_SUM, 0xfffffff7u},
            {COMM_U32, COMM_PROD, 0xffffff90u}, /* -112 */
            {COMM_I32, COMM_PROD, 0xffffff90u},
            {COMM_U64, COMM_MAX, UINT64_MAX - 1},
            {COMM_I64, COMM_MAX, 3},
            {COMM_U64, COMM_MIN, 3},
            {COMM_I64, COMM_MIN, UINT64_MAX - 1},
            {COMM_U64, COMM_SUM, 1},               /* wraps */
            {COMM_U64, COMM_PROD, UINT64_MAX - 5}, /* -6 */
            {COMM_I64, COMM_PROD, UINT64_MAX - 5},
            {COMM_U64, COMM_AVG, 1},
        };
        for (size_t c = 0; c < NELEM(cases); c++) {
            size_t es = dsize(cases[c].dt);
            args.dst_dtype = args.src_dtype = cases[c].dt;
            args.op = cases[c].op;
            args.src = es == 1 ? s8 : es == 4 ? s32 : s64;
            args.dst = es == 1 ? d8 : es == 4 ? d32 : d64;
            coll_reduce(&args);
            for (int i = 0; i < 100; i++) {
                uint64_t got = es == 1 ? o8[i] : es == 4 ? o32[i] : o64[i];
                if (got != cases[c].want)
                    fail_msg("isa %s case %zu element %d: got 0x%llx, want 0x%llx", isas[t], c, i,
                             (unsigned long long)got, (unsigned long long)cases[c].want);
            }
        }
    }
    coll_reduce_force_isa(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_choice),      cmocka_unit_test(test_matrix),
        cmocka_unit_test(test_byte_misaligned), cmocka_unit_test(test_in_place),
        cmocka_unit_test(test_addend),          cmocka_unit_test(test_bf16_wire),
        cmocka_unit_test(test_nt_store),        cmocka_unit_test(test_large),
        cmocka_unit_test(test_specials),        cmocka_unit_test(test_max_min_nan),
        cmocka_unit_test(test_int_wrap),        cmocka_unit_test(test_avg_divisor),
        cmocka_unit_test(test_prod_specials),   cmocka_unit_test(test_int_edges),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
