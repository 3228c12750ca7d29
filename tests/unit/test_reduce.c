/* SPDX-License-Identifier: MIT */
/*
 * coll_reduce: every dtype x op x source/destination count x length, run under every
 * instruction set this machine has, each output element checked against an exact model,
 * against a float64 reference within the rounding bound, and against the generic kernels
 * bit for bit (tr_run_case, in test_reduce_model.c), with outputs poisoned before each call.
 * This file walks the cases: the matrix, misaligned pointers, in place, addends, bf16 on
 * the wire, streamed stores, large buffers, special values.  Inputs written out by hand,
 * with the answers they must give, are in test_reduce_edges.c.
 */
#include "test_reduce.h"
#include "reduce.h"
#include "reduce_isa.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static const size_t counts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 1000, 4099};
/* The float dtypes first (test_specials takes the first four). */
const comm_dtype_t tr_dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
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
    for (size_t t = 0; t < NELEM(tr_isas); t++)
        print_message("isa %s: %s\n", tr_isas[t],
                      coll_reduce_ops_find(tr_isas[t]) ? "tested" : "not on this machine");
}

/* Every dtype x op x nsrc x ndst x count, aligned and misaligned by one element. */
static void test_matrix(void **state)
{
    static const int nsrcs[] = {1, 2, 3, 5, 8, 9};
    static const int ndsts[] = {1, 2, 3, 8};

    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (size_t o = 0; o < NELEM(ops); o++) {
            for (size_t s = 0; s < NELEM(nsrcs); s++) {
                for (size_t c = 0; c < NELEM(counts); c++) {
                    struct tcase tc = {
                        .dtype = tr_dtypes[d],
                        .src_dtype = tr_dtypes[d],
                        .op = ops[o],
                        .nsrc = nsrcs[s],
                        .ndst = ndsts[(s + c) % NELEM(ndsts)],
                        .count = counts[c],
                        .misalign = (c & 1) ? tr_dsize(tr_dtypes[d]) : 0,
                    };
                    tr_run_case(&tc);
                }
            }
        }
    }
}

/* Pointers off by one byte: "any alignment is allowed". */
static void test_byte_misaligned(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (size_t c = 0; c < NELEM(counts); c++) {
            struct tcase tc = {
                .dtype = tr_dtypes[d],
                .src_dtype = tr_dtypes[d],
                .op = ops[(c + d) % NELEM(ops)],
                .nsrc = 3,
                .ndst = 2,
                .count = counts[c],
                .misalign = 1,
                .nt = c & 1,
                .addend_count = (c & 2) && ops[(c + d) % NELEM(ops)] == COMM_SUM ? counts[c] : 0,
            };
            tr_run_case(&tc);
        }
    }
}

static void test_in_place(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (int nsrc = 1; nsrc <= 4; nsrc++) {
            struct tcase tc = {
                .dtype = tr_dtypes[d],
                .src_dtype = tr_dtypes[d],
                .op = COMM_SUM,
                .nsrc = nsrc,
                .ndst = 3,
                .count = 4099 + 8192 * (size_t)nsrc,
                .in_place = true,
                .misalign = nsrc == 3 ? tr_dsize(tr_dtypes[d]) : 0,
            };
            tr_run_case(&tc);
            tc.op = COMM_PROD;
            tr_run_case(&tc);
            tc.op = COMM_AVG; /* the division in place, in dst[0] == src[0] */
            tc.avg_n = nsrc == 2 ? 5 : 0;
            tr_run_case(&tc);
            tc.avg_n = 0;
            tc.op = COMM_MAX;
            tc.ndst = 1;
            tr_run_case(&tc);
        }
    }
}

/* Residual (addend_count == count) and row-broadcast bias with the slice mid-row. */
static void test_addend(void **state)
{
    static const size_t rows[] = {1, 3, 7, 64, 100, 3000, 5000};
    static const size_t offsets[] = {0, 5, 123, 4999};

    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (size_t r = 0; r < NELEM(rows); r++) {
            struct tcase tc = {
                .dtype = tr_dtypes[d],
                .src_dtype = tr_dtypes[d],
                .op = COMM_SUM,
                .nsrc = 2,
                .ndst = 3,
                .count = 6001,
                .addend_count = rows[r],
                .offset = offsets[r % NELEM(offsets)],
                .misalign = r == 2 ? 2 : 0,
            };
            tr_run_case(&tc);
        }
        for (size_t c = 0; c < NELEM(counts); c++) {
            struct tcase tc = {
                .dtype = tr_dtypes[d],
                .src_dtype = tr_dtypes[d],
                .op = COMM_SUM,
                .nsrc = 4,
                .ndst = 2,
                .count = counts[c],
                .addend_count = counts[c] ? counts[c] : 1,
                .offset = c & 1 ? 7 : 0,
            };
            tr_run_case(&tc);
            tc.op = COMM_MAX; /* the addend is ignored with every op but SUM */
            tr_run_case(&tc);
            tc.op = COMM_PROD;
            tr_run_case(&tc);
            tc.op = COMM_AVG;
            tr_run_case(&tc);
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
            tr_run_case(&tc);
            tc.data = DATA_SPECIAL;
            tr_run_case(&tc);
            tc.round_bf16 = false;
            tc.src_dtype = COMM_BF16;
            tr_run_case(&tc);
            tc.data = DATA_RANDOM;
            tr_run_case(&tc);
        }
    }
}

static void test_nt_store(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        for (size_t m = 0; m < 3; m++) {
            struct tcase tc = {
                .dtype = tr_dtypes[d],
                .src_dtype = tr_dtypes[d],
                .op = COMM_SUM,
                .nsrc = 3,
                .ndst = 3,
                .count = 20000 + m,
                .nt = true,
                .misalign = m * tr_dsize(tr_dtypes[d]),
                .addend_count = m == 1 ? 512 : 0,
                .offset = 100,
            };
            tr_run_case(&tc);
            tc.count = 37;
            tr_run_case(&tc);
            tc.op = m % 2 ? COMM_PROD : COMM_AVG; /* no addend: plain streamed stores */
            tc.count = 20000 + m;
            tr_run_case(&tc);
        }
    }
}

/* More than 1 MiB per buffer: many blocks. */
static void test_large(void **state)
{
    (void)state;
    for (size_t d = 0; d < NELEM(tr_dtypes); d++) {
        struct tcase tc = {
            .dtype = tr_dtypes[d],
            .src_dtype = tr_dtypes[d],
            .op = COMM_SUM,
            .nsrc = 3,
            .ndst = 2,
            .count = (1u << 20) / tr_dsize(tr_dtypes[d]) + 4099,
            .misalign = tr_dsize(tr_dtypes[d]),
            .addend_count = 4096,
            .offset = 1000,
        };
        tr_run_case(&tc);
        tc.op = COMM_PROD;
        tr_run_case(&tc);
        tc.op = COMM_AVG;
        tc.avg_n = 8;
        tr_run_case(&tc);
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
    tr_run_case(&tc);
}

/* NaN, Inf, -0.0, subnormals: the model's NaN rules and every ISA equal, bit for bit. */
static void test_specials(void **state)
{
    (void)state;
    for (size_t d = 0; d < 4; d++) { /* the float tr_dtypes */
        for (size_t o = 0; o < NELEM(ops); o++) {
            for (int nsrc = 1; nsrc <= MAX_SRC; nsrc++) {
                struct tcase tc = {
                    .dtype = tr_dtypes[d],
                    .src_dtype = tr_dtypes[d],
                    .op = ops[o],
                    .nsrc = nsrc,
                    .ndst = 2,
                    .count = 1000 + (size_t)nsrc,
                    .data = DATA_SPECIAL,
                    .addend_count = nsrc & 1 ? 0 : 333,
                    .offset = 11,
                    .nt = nsrc == 4,
                };
                tr_run_case(&tc);
                tc.data = DATA_ZEROS;
                tr_run_case(&tc);
            }
        }
    }
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
