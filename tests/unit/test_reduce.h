/* SPDX-License-Identifier: MIT */
/*
 * What the files of test_reduce share: a test case, the harness that runs one under every
 * instruction set (test_reduce_model.c), and the tables of dtypes the tests walk
 * (test_reduce.c).  The array sizes below are checked against the definitions, which
 * include this header.
 */
#ifndef ARCOMM_TEST_REDUCE_H
#define ARCOMM_TEST_REDUCE_H

#include "reduce.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_SRC 9
#define MAX_DST 8

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

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* test_reduce_model.c: the instruction sets, element sizes, and the harness. */
extern const char *const tr_isas[3];
size_t tr_dsize(comm_dtype_t t);
void tr_run_case(const struct tcase *tc);

/* test_reduce.c: the dtypes, floats first. */
extern const comm_dtype_t tr_dtypes[10];

/* test_reduce_edges.c: inputs written out, with the answers they must give. */
void test_max_min_nan(void **state);
void test_int_wrap(void **state);
void test_avg_divisor(void **state);
void test_prod_specials(void **state);
void test_int_edges(void **state);

#endif
