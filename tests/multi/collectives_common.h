/* SPDX-License-Identifier: MIT */
/*
 * What the files of the collectives test share: the collectives by kind and the call of
 * one (test_collectives.c defines them, and runs every test in its main()), and the
 * tests of the calls that must fail (test_collectives_errors.c).
 */
#ifndef ARCOMM_TEST_COLLECTIVES_COMMON_H
#define ARCOMM_TEST_COLLECTIVES_COMMON_H

#include "harness.h"

#include <stdbool.h>
#include <stddef.h>

enum kind {
    K_BROADCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_ALLREDUCE,
    K_BARRIER
};
#define K_SWEPT 5 /* the first five: the collectives under test */
#define K_ALL   7

/* test_collectives.c */
extern const char *const co_kind_names[K_ALL];
/* Does collective k reduce (has an op)? */
bool co_reduces(enum kind k);
/* Makes the call of collective k (op and root where it takes them). */
comm_status_t co_make_call(comm_t *c, enum kind k, const void *s, void *r, size_t count,
                           comm_dtype_t dt, comm_op_t op, int root);

/* test_collectives_errors.c */
void mismatch_pairs(void **s);
void mismatch_fields(void **s);
void invalid_one_rank(void **s);
void invalid_every_rank(void **s);
void valid_edges(void **s);
#if ARCOMM_TEST_HAVE_HEXAGON
void unsupported_backend(void **s);
#endif

#endif /* ARCOMM_TEST_COLLECTIVES_COMMON_H */
