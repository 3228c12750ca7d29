/* SPDX-License-Identifier: MIT */
/*
 * coll_reduce on inputs written out by hand, under every instruction set this machine
 * has, against the answers they must give: the NaN rules of MAX/MIN and PROD, integer
 * sums that wrap, signed and unsigned order, and AVG's divisor.  The random cases are in
 * test_reduce.c, their harness in test_reduce_model.c.
 */
#include "test_reduce.h"
#include "reduce.h"
#include "reduce_isa.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* MAX/MIN NaN rule spelled out on f32: the first NaN in source order, bits unchanged. */
void test_max_min_nan(void **state)
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
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
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
            if (!coll_reduce_force_isa(tr_isas[t]))
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
void test_int_wrap(void **state)
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
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
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
        if (!coll_reduce_force_isa(tr_isas[t]))
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
void test_avg_divisor(void **state)
{
    static const int avg_ns[] = {0, 1, 2, 3, 7, 64};

    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (size_t a = 0; a < NELEM(avg_ns); a++) {
            for (int nsrc = 1; nsrc <= 4; nsrc++) {
                struct tcase tc = {
                    .dtype = tr_dtypes[d],
                    .src_dtype = tr_dtypes[d],
                    .op = COMM_AVG,
                    .avg_n = avg_ns[a],
                    .nsrc = nsrc,
                    .ndst = 1 + (int)a % 3,
                    .count = 1000 + a,
                    .misalign = a & 1 ? tr_dsize(tr_dtypes[d]) : 0,
                };
                tr_run_case(&tc);
                if (d < 4) {
                    tc.data = DATA_SPECIAL;
                    tr_run_case(&tc);
                }
            }
        }
    }
    /* Spelled out: (1 + 2 + 4) / 7 == 1 exactly, and 3 / 2 == 1.5 in f16. */
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
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
        if (!coll_reduce_force_isa(tr_isas[t]))
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
void test_prod_specials(void **state)
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
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
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
        if (!coll_reduce_force_isa(tr_isas[t]))
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
void test_int_edges(void **state)
{
    (void)state;
    for (size_t t = 0; t < NELEM(tr_isas); t++) {
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
        if (!coll_reduce_force_isa(tr_isas[t]))
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
            size_t es = tr_dsize(cases[c].dt);
            args.dst_dtype = args.src_dtype = cases[c].dt;
            args.op = cases[c].op;
            args.src = es == 1 ? s8 : es == 4 ? s32 : s64;
            args.dst = es == 1 ? d8 : es == 4 ? d32 : d64;
            coll_reduce(&args);
            for (int i = 0; i < 100; i++) {
                uint64_t got = es == 1 ? o8[i] : es == 4 ? o32[i] : o64[i];
                if (got != cases[c].want)
                    fail_msg("isa %s case %zu element %d: got 0x%llx, want 0x%llx", tr_isas[t], c,
                             i, (unsigned long long)got, (unsigned long long)cases[c].want);
            }
        }
    }
    coll_reduce_force_isa(NULL);
}
