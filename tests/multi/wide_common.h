/* SPDX-License-Identifier: MIT */
/*
 * What the files of the wide test share: a rank's results and its context, and what
 * each file gives the others.  test_wide.c runs the ranks (and every test, in its
 * main()); test_wide_calls.c holds what each rank calls and checks; test_wide_split.c
 * splits the ranks into groups.
 */
#ifndef ARCOMM_TEST_WIDE_COMMON_H
#define ARCOMM_TEST_WIDE_COMMON_H

#include "harness.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define W_MAX_RANKS  256
#define W_MAX_HASHES 128

/* One rank's results; in a shared mapping, so that process ranks can report them. */
struct w_rank {
    long errors;
    char first_error[512];
    int nh;                        /* hashes recorded */
    uint64_t hashes[W_MAX_HASHES]; /* of the outputs every rank must agree on */
};

struct w_shared {
    _Atomic long barrier_entries; /* every rank adds one before each barrier */
    struct w_rank rank[W_MAX_RANKS];
};

/* A rank while it runs. */
struct w_ctx {
    comm_t *comm;
    int rank, n;
    struct w_rank *res;
    long barriers; /* barriers this rank has made */
};

/* test_wide.c */
/* Every rank's results, in a mapping that forked process ranks share too. */
extern struct w_shared *w_shared_mem;
/* Records a failure in x's results (keeps the first message). */
void w_fail(struct w_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* n thread ranks from comm_init_all, one pthread each, running fn; the seconds taken. */
double w_run_threads(int n, void (*fn)(struct w_ctx *x));

/* test_wide_calls.c */
/* true if st is COMM_OK, else the failed call recorded in x. */
bool w_call_ok(struct w_ctx *x, comm_status_t st, const char *what, size_t count, comm_dtype_t dt,
               int root);
/* Checks the guard element after out[0..count). */
void w_check_guard(struct w_ctx *x, const void *out, size_t count, comm_dtype_t dt,
                   const char *what);
/* One rank's calls: every collective at every count, checked, its outputs' hashes recorded. */
void w_body(struct w_ctx *x);

/* test_wide_split.c */
void split_into_groups(void **s);

#endif /* ARCOMM_TEST_WIDE_COMMON_H */
