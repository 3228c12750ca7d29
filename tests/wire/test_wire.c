/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs of transports/base/wire.h, on the host: the table's shape, bf16 bit for
 * bit as the collectives narrow today, e4m3 against its definition, every element of
 * every codec within docs/wire.md's bound against float64 on normal data, outliers,
 * zeros, denormals, infinities and NaNs, NaN and inf kept to their own elements, the
 * same bytes decoded to the same bits in two places, chunks cut on block boundaries
 * encoding as the whole, and the rank-order sum of n decoded contributions within the
 * n-rank bound.
 */
#include "reduce.h"
#include "tables.h"
#include "wire.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_unit(void)
{
    return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- The data sets ---- */

enum data_kind {
    DATA_NORMAL,
    DATA_OUTLIERS,
    DATA_ZEROS,
    DATA_DENORMAL,
    DATA_MIXED,
    DATA_NONFINITE,
    DATA_HUGE,
    DATA_KINDS
};

static const char *const data_name[DATA_KINDS] = {"normal", "outliers",  "zeros", "denormal",
                                                  "mixed",  "nonfinite", "huge"};

/* n values of kind into x (f32); rank varies the draw. */
static void fill(enum data_kind kind, float *x, size_t n, int rank)
{
    rng_state = 0x1234567ull * (uint64_t)(kind + 1) + (uint64_t)rank * 0x9e37ull;
    for (size_t i = 0; i < n; i++) {
        float v = rng_unit();
        switch (kind) {
        case DATA_NORMAL:
            x[i] = v;
            break;
        case DATA_OUTLIERS:
            /* LLM activations: a few channels (every 97th) 100x larger. */
            x[i] = i % 97 == 5 ? 100.0f * v : v;
            break;
        case DATA_ZEROS:
            x[i] = i % 3 == 0 ? v : (i % 2 ? 0.0f : -0.0f);
            break;
        case DATA_DENORMAL:
            /* Subnormal f32 (and a few normals of the smallest binade). */
            x[i] = v * 0x1p-127f * (i % 11 == 0 ? 4.0f : 1.0f);
            break;
        case DATA_MIXED:
            /* Magnitudes from 2^-30 to 2^30 inside one block. */
            x[i] = ldexpf(v, (int)(rng_next() % 61) - 30);
            break;
        case DATA_NONFINITE:
            x[i] = i % 131 == 7 ? NAN : i % 131 == 40 ? INFINITY : i % 131 == 90 ? -INFINITY : v;
            break;
        case DATA_HUGE:
            x[i] = v * 3.0e38f;
            break;
        default:
            x[i] = v;
        }
    }
}

/* ---- docs/wire.md's bounds ---- */

/* The finite absmax of the block element i is in. */
static double block_absmax(const float *x, size_t n, size_t i)
{
    size_t first = i / WIRE_BLOCK_ELEMS * WIRE_BLOCK_ELEMS;
    size_t end = first + WIRE_BLOCK_ELEMS < n ? first + WIRE_BLOCK_ELEMS : n;
    double a = 0.0;
    for (size_t j = first; j < end; j++)
        if (isfinite(x[j]) && fabs((double)x[j]) > a)
            a = fabs((double)x[j]);
    return a;
}

/* The per-element bound of docs/wire.md: |decode(encode(x)) - x| <= this. */
static double elem_bound(enum wire_codec codec, double x, double absmax)
{
    switch (codec) {
    case WIRE_NONE:
        return 0.0;
    case WIRE_BF16:
        return fabs(x) * 0x1p-8 + 0x1p-134;
    case WIRE_INT8:
        return absmax * (1.0 / 254.0 + 0x1p-22) + 0x1p-140;
    case WIRE_FP8:
        return fabs(x) * (0x1p-4 + 0x1p-20) + absmax * 0x1p-18 + 0x1p-140;
    default:
        return 0.0;
    }
}

static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16};

/* x (f32) as dtype into buf, and the values dtype holds back into x. */
static void to_dtype(comm_dtype_t dtype, float *x, size_t n, void *buf)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == COMM_F32) {
            memcpy((char *)buf + 4 * i, &x[i], 4);
            continue;
        }
        uint16_t h = dtype == COMM_F16 ? coll_f32_to_f16(x[i]) : coll_f32_to_bf16_1(x[i]);
        memcpy((char *)buf + 2 * i, &h, 2);
        x[i] = dtype == COMM_F16 ? coll_f16_to_f32(h) : coll_bf16_to_f32(h);
    }
}

/* ---- Tests ---- */

static void test_table(void **state)
{
    (void)state;
    for (int c = 0; c < WIRE_COUNT; c++) {
        const struct wire_row *r = wire_row((enum wire_codec)c);
        assert_non_null(r);
        assert_int_equal(wire_parse(r->name), c);
        assert_string_equal(wire_name(c), r->name);
        assert_non_null(r->encode);
        assert_non_null(r->decode);
        assert_non_null(r->decode_add);
    }
    assert_int_equal(wire_parse("INT8"), WIRE_INT8);
    assert_int_equal(wire_parse("int"), -1);
    assert_int_equal(wire_parse("int88"), -1);
    assert_null(wire_row(WIRE_COUNT));
    const struct wire_row *none = wire_row(WIRE_NONE), *bf = wire_row(WIRE_BF16),
                          *i8 = wire_row(WIRE_INT8), *f8 = wire_row(WIRE_FP8);
    assert_int_equal(wire_bytes(none, COMM_F32, 10), 40);
    assert_int_equal(wire_bytes(none, COMM_F64, 10), 80);
    assert_int_equal(wire_bytes(bf, COMM_F32, 10), 20);
    assert_int_equal(wire_bytes(i8, COMM_F32, 0), 0);
    assert_int_equal(wire_bytes(i8, COMM_F32, 1), 68);
    assert_int_equal(wire_bytes(i8, COMM_F16, 64), 68);
    assert_int_equal(wire_bytes(f8, COMM_BF16, 65), 136);
    /* What applies: bf16 to f32 (any op), the block codecs to the three floats, sum and avg. */
    assert_true(wire_applies(bf, COMM_F32, COMM_SUM));
    assert_true(wire_applies(bf, COMM_F32, COMM_AVG));
    assert_false(wire_applies(bf, COMM_F16, COMM_SUM));
    assert_true(wire_applies(bf, COMM_F32, COMM_MAX));
    for (size_t d = 0; d < 3; d++) {
        assert_true(wire_applies(i8, dtypes[d], COMM_SUM));
        assert_true(wire_applies(f8, dtypes[d], COMM_AVG));
        assert_false(wire_applies(i8, dtypes[d], COMM_PROD));
    }
    assert_false(wire_applies(i8, COMM_F64, COMM_SUM));
    assert_false(wire_applies(f8, COMM_I32, COMM_SUM));
    assert_true(wire_applies(none, COMM_I32, COMM_MAX));
}

/* wire_pick, the one decision every path takes: the knob's codec from the threshold, where
 * it applies and the path carries it for the op; none otherwise. */
static void test_pick(void **state)
{
    (void)state;
    const struct wire_carry host = {.ops = {[WIRE_BF16] = WIRE_OPS_ALL}};
    const struct wire_carry copy = {.ops = {[WIRE_BF16] = WIRE_OPS_SUM,
                                            [WIRE_INT8] = WIRE_OPS_SUM_AVG,
                                            [WIRE_FP8] = WIRE_OPS_SUM_AVG}};
    const struct wire_carry nothing = {.ops = {0}};
    assert_int_equal(wire_pick(WIRE_BF16, 1024, &host, COMM_F32, COMM_MAX, 1024), WIRE_BF16);
    assert_int_equal(wire_pick(WIRE_BF16, 1024, &host, COMM_F32, COMM_SUM, 1023), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_BF16, 0, &host, COMM_F16, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_BF16, SIZE_MAX, &host, COMM_F32, COMM_SUM, 1 << 30), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_INT8, 0, &host, COMM_F32, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_BF16, 0, &copy, COMM_F32, COMM_MAX, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_BF16, 0, &copy, COMM_F32, COMM_SUM, 64), WIRE_BF16);
    assert_int_equal(wire_pick(WIRE_INT8, 0, &copy, COMM_BF16, COMM_AVG, 64), WIRE_INT8);
    assert_int_equal(wire_pick(WIRE_FP8, 0, &copy, COMM_F16, COMM_SUM, 64), WIRE_FP8);
    assert_int_equal(wire_pick(WIRE_FP8, 0, &copy, COMM_F16, COMM_PROD, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_INT8, 0, &copy, COMM_F64, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_INT8, 0, &nothing, COMM_F32, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_NONE, 0, &copy, COMM_F32, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_COUNT, 0, &copy, COMM_F32, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(-1, 0, &copy, COMM_F32, COMM_SUM, 64), WIRE_NONE);
    assert_int_equal(wire_pick(WIRE_INT8, 0, &copy, COMM_F32, (comm_op_t)40, 64), WIRE_NONE);
}

/* The bf16 row is today's narrowing, bit for bit (scalar and the vectorised kernels). */
static void test_bf16_is_today(void **state)
{
    (void)state;
    const float special[] = {0.0f,     -0.0f,   1.0f,        -1.0f,      FLT_MAX,
                             -FLT_MAX, FLT_MIN, 0x1p-149f,   INFINITY,   -INFINITY,
                             NAN,      -NAN,    1.00390625f, 1.01171875f};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        assert_int_equal(wire_f32_to_bf16(special[i]), coll_f32_to_bf16_1(special[i]));
    enum { N = 1 << 16 };
    static float x[N];
    static uint16_t mine[N], today[N];
    rng_state = 42;
    for (size_t i = 0; i < N; i++) {
        uint32_t u = (uint32_t)rng_next();
        memcpy(&x[i], &u, 4);
    }
    wire_encode(wire_row(WIRE_BF16), COMM_F32, x, N, mine);
    coll_f32_to_bf16(today, x, N);
    assert_memory_equal(mine, today, sizeof(mine));
    static float back[N];
    wire_decode(wire_row(WIRE_BF16), COMM_F32, mine, N, back);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(bits(back[i]), bits(coll_bf16_to_f32(today[i])));
}

/* e4m3 against its definition: every code decodes to (1 + m/8) 2^(e-7) or m 2^-9, codes
 * round-trip, midpoints round to the even code, past 448 saturates, NaN/inf -> NaN. */
static void test_e4m3(void **state)
{
    (void)state;
    for (unsigned c = 0; c < 256; c++) {
        unsigned e = (c >> 3) & 15, m = c & 7;
        float v = wire_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            assert_true(isnan(v));
            continue;
        }
        double want = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : m * 0x1p-9;
        if (c & 0x80)
            want = -want;
        assert_true((double)v == want);
        if (c != 0x80) /* -0 encodes as -0 too, checked below */
            assert_int_equal(wire_f32_to_e4m3(v), c);
        /* The midpoint to the next code up rounds to the even one of the two. */
        if ((c & 0x7f) < 0x7e) {
            float next = wire_e4m3_to_f32((uint8_t)(c + 1));
            float mid = (float)(((double)v + (double)next) / 2.0);
            unsigned even = (c & 1) ? c + 1 : c;
            assert_int_equal(wire_f32_to_e4m3(mid), even);
            /* Just past the midpoint rounds up, just below rounds down. */
            float up = nextafterf(mid, (c & 0x80) ? -INFINITY : INFINITY);
            float down = nextafterf(mid, 0.0f);
            assert_int_equal(wire_f32_to_e4m3(up), c + 1);
            assert_int_equal(wire_f32_to_e4m3(down), c);
        }
    }
    assert_int_equal(wire_f32_to_e4m3(-0.0f), 0x80);
    assert_int_equal(wire_f32_to_e4m3(448.0f), 0x7e);
    assert_int_equal(wire_f32_to_e4m3(460.0f), 0x7e);
    assert_int_equal(wire_f32_to_e4m3(1e30f), 0x7e);
    assert_int_equal(wire_f32_to_e4m3(-1e30f), 0xfe);
    assert_int_equal(wire_f32_to_e4m3(INFINITY), 0x7f);
    assert_int_equal(wire_f32_to_e4m3(-INFINITY), 0xff);
    assert_int_equal(wire_f32_to_e4m3(NAN) & 0x7f, 0x7f);
    assert_int_equal(wire_f32_to_e4m3(0x1p-11f), 0);   /* a quarter of 2^-9: to 0 */
    assert_int_equal(wire_f32_to_e4m3(0x1.8p-10f), 1); /* three quarters: to 2^-9 */
}

/* Every element of every codec, dtype and data set within the bound; NaN and inf only
 * where they were; the decoded bits the same from two decodes of the same bytes. */
static void test_bounds(void **state)
{
    (void)state;
    enum { N = 64 * 37 + 13 }; /* a partial last block */
    static float x[N], dec[N], dec2[N], acc[N];
    static unsigned char in[4 * N], wire[2 * 4 * N];
    for (int c = 0; c < WIRE_COUNT; c++) {
        const struct wire_row *r = wire_row((enum wire_codec)c);
        for (size_t d = 0; d < 3; d++) {
            if (!wire_applies(r, dtypes[d], COMM_SUM))
                continue;
            for (int k = 0; k < DATA_KINDS; k++) {
                /* bf16 rounds finite values past 0x1.fep127 to inf, as documented. */
                if (k == DATA_HUGE && (c == WIRE_BF16 || dtypes[d] != COMM_F32))
                    continue;
                fill((enum data_kind)k, x, N, 0);
                to_dtype(dtypes[d], x, N, in);
                memset(wire, 0xa5, sizeof(wire));
                wire_encode(r, dtypes[d], in, N, wire);
                /* Nothing written past wire_bytes. */
                size_t wb = wire_bytes(r, dtypes[d], N);
                assert_int_equal(wire[wb], 0xa5);
                memset(dec, 0xff, sizeof(dec));
                wire_decode(r, dtypes[d], wire, N, dec);
                for (size_t i = 0; i < N; i++) {
                    if (!isfinite(x[i])) {
                        /* NaN stays NaN; inf stays inf (none, bf16) or becomes NaN. */
                        if (c == WIRE_INT8 || c == WIRE_FP8 || isnan(x[i]))
                            assert_true(isnan(dec[i]));
                        else
                            assert_true(dec[i] == x[i]);
                        continue;
                    }
                    double err = fabs((double)dec[i] - (double)x[i]);
                    double bound = elem_bound((enum wire_codec)c, x[i], block_absmax(x, N, i));
                    if (!(err <= bound))
                        fail_msg("%s %s %s: element %zu = %a decodes to %a, error %g > %g", r->name,
                                 rt_dtype_name(dtypes[d]), data_name[k], i, (double)x[i],
                                 (double)dec[i], err, bound);
                }
                /* Decoded elsewhere (another rank): the same bits; and decode_add onto
                 * zeros is the same value. */
                memset(dec2, 0, sizeof(dec2));
                wire_decode(r, dtypes[d], wire, N, dec2);
                assert_memory_equal(dec, dec2, sizeof(dec));
                for (size_t i = 0; i < N; i++)
                    acc[i] = 1.0f;
                wire_decode_add(r, dtypes[d], wire, N, acc);
                for (size_t i = 0; i < N; i++)
                    assert_int_equal(bits(acc[i]), bits(1.0f + dec[i]));
            }
        }
    }
}

/* A block holding NaN or inf keeps its other elements (scale from the finite ones); the
 * blocks around it are untouched. */
static void test_nonfinite_contained(void **state)
{
    (void)state;
    enum { N = 3 * 64 };
    float x[N], y[N], dx[N], dy[N];
    unsigned char wx[3 * WIRE_BLOCK_BYTES], wy[3 * WIRE_BLOCK_BYTES];
    fill(DATA_NORMAL, x, N, 3);
    memcpy(y, x, sizeof(x));
    y[64 + 10] = NAN;
    y[64 + 20] = INFINITY;
    y[64 + 30] = -INFINITY;
    for (int c = WIRE_INT8; c <= WIRE_FP8; c++) {
        const struct wire_row *r = wire_row((enum wire_codec)c);
        wire_encode(r, COMM_F32, x, N, wx);
        wire_encode(r, COMM_F32, y, N, wy);
        wire_decode(r, COMM_F32, wx, N, dx);
        wire_decode(r, COMM_F32, wy, N, dy);
        for (size_t i = 0; i < N; i++) {
            if (i == 74 || i == 84 || i == 94) {
                assert_true(isnan(dy[i]));
                continue;
            }
            assert_true(isfinite(dy[i]));
            /* Other blocks: the very same bits as without the non-finite values. */
            if (i < 64 || i >= 128)
                assert_int_equal(bits(dy[i]), bits(dx[i]));
            else
                assert_true(fabs((double)dy[i] - x[i]) <=
                            elem_bound((enum wire_codec)c, x[i], block_absmax(y, N, i)));
        }
    }
}

/* Near FLT_MAX decoded values stay finite: blocks whose absmax is each of the 2^16
 * largest floats (some of them make code * scale round past FLT_MAX). */
static void test_flt_max(void **state)
{
    (void)state;
    float x[64], d[64];
    unsigned char w[WIRE_BLOCK_BYTES];
    float top = FLT_MAX;
    for (int k = 0; k < 65536; k++, top = nextafterf(top, 0.0f)) {
        for (size_t i = 0; i < 64; i++)
            x[i] = i % 2 ? top : -(top / 64.0f) * (float)i;
        for (int c = WIRE_INT8; c <= WIRE_FP8; c++) {
            wire_encode(wire_row((enum wire_codec)c), COMM_F32, x, 64, w);
            wire_decode(wire_row((enum wire_codec)c), COMM_F32, w, 64, d);
            for (size_t i = 0; i < 64; i++)
                if (!isfinite(d[i]))
                    fail_msg("%s element %zu: %a -> %a", wire_name(c), i, (double)x[i],
                             (double)d[i]);
        }
    }
}

/* Chunks cut on block boundaries encode to the bytes of the whole. */
static void test_chunks(void **state)
{
    (void)state;
    enum { N = 64 * 50 + 7 };
    static float x[N];
    static unsigned char whole[2 * 4 * N], parts[2 * 4 * N];
    fill(DATA_OUTLIERS, x, N, 1);
    for (int c = 0; c < WIRE_COUNT; c++) {
        const struct wire_row *r = wire_row((enum wire_codec)c);
        size_t wb = wire_bytes(r, COMM_F32, N);
        wire_encode(r, COMM_F32, x, N, whole);
        memset(parts, 0, sizeof(parts));
        size_t off = 0;
        for (size_t first = 0; first < N;) {
            size_t len = (size_t)(1 + rng_next() % 7) * WIRE_BLOCK_ELEMS;
            len = first + len < N ? len : N - first;
            wire_encode(r, COMM_F32, x + first, len, parts + off);
            off += wire_bytes(r, COMM_F32, len);
            first += len;
        }
        assert_int_equal(off, wb);
        assert_memory_equal(whole, parts, wb);
    }
}

/* n ranks: each encodes its own contribution once; every rank sums the decoded values in
 * rank order in f32 (the contract); that sum is within n times the per-element bound plus
 * the f32 accumulation of the float64 sum of the inputs, for sum and avg. */
static void test_rank_sum(void **state)
{
    (void)state;
    enum { N = 64 * 20 + 33, R = 8 };
    static float x[R][N], acc[N], acc2[N], dec[N];
    static unsigned char wire[R][4 * N];
    for (int c = 0; c < WIRE_COUNT; c++) {
        const struct wire_row *r = wire_row((enum wire_codec)c);
        for (int k = 0; k < DATA_KINDS; k++) {
            if (k == DATA_NONFINITE || k == DATA_HUGE)
                continue;
            for (int n = 2; n <= R; n += 3) {
                for (int p = 0; p < n; p++) {
                    fill((enum data_kind)k, x[p], N, p);
                    wire_encode(r, COMM_F32, x[p], N, wire[p]);
                }
                /* Two ranks' reductions: one whole, one in chunks of 3 blocks. */
                wire_decode(r, COMM_F32, wire[0], N, acc);
                for (int p = 1; p < n; p++)
                    wire_decode_add(r, COMM_F32, wire[p], N, acc);
                for (size_t first = 0; first < N; first += 3 * WIRE_BLOCK_ELEMS) {
                    size_t len =
                        N - first < 3 * WIRE_BLOCK_ELEMS ? N - first : 3 * WIRE_BLOCK_ELEMS;
                    size_t off = wire_bytes(r, COMM_F32, first);
                    wire_decode(r, COMM_F32, wire[0] + off, len, acc2 + first);
                    for (int p = 1; p < n; p++)
                        wire_decode_add(r, COMM_F32, wire[p] + off, len, acc2 + first);
                }
                assert_memory_equal(acc, acc2, sizeof(acc));
                for (size_t i = 0; i < N; i++) {
                    double ref = 0.0, bound = 0.0, mag = 0.0;
                    float want = 0.0f;
                    for (int p = 0; p < n; p++) {
                        ref += x[p][i];
                        bound += elem_bound((enum wire_codec)c, x[p][i], block_absmax(x[p], N, i));
                        wire_decode(r, COMM_F32, wire[p] + wire_bytes(r, COMM_F32, i / 64 * 64),
                                    i % 64 + 1, dec);
                        mag += fabs((double)dec[i % 64]);
                        want = p == 0 ? dec[i % 64] : want + dec[i % 64];
                    }
                    /* The contract: the rank-order f32 sum of the decoded values. */
                    assert_int_equal(bits(acc[i]), bits(want));
                    bound += (n - 1) * 0x1p-24 * mag * 1.0001 + 0x1p-140;
                    double err = fabs((double)acc[i] - ref);
                    if (!(err <= bound))
                        fail_msg("%s %s n=%d element %zu: sum %a, float64 %a, error %g > %g",
                                 r->name, data_name[k], n, i, (double)acc[i], ref, err, bound);
                    /* avg: the sum divided by n once, f32. */
                    double aerr = fabs((double)(acc[i] / (float)n) - ref / n);
                    assert_true(aerr <= bound / n + fabs(ref / n) * 0x1p-24 + 0x1p-149);
                }
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),         cmocka_unit_test(test_pick),
        cmocka_unit_test(test_bf16_is_today), cmocka_unit_test(test_e4m3),
        cmocka_unit_test(test_bounds),        cmocka_unit_test(test_nonfinite_contained),
        cmocka_unit_test(test_flt_max),       cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_rank_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
