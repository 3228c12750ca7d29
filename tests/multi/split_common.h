/* SPDX-License-Identifier: MIT */
/*
 * What the files of the split test share: test_split.c defines these helpers and runs
 * every test in its main(); test_split_failures.c and test_split_init_all.c define the
 * tests declared at the end.
 */
#ifndef ARCOMM_TEST_SPLIT_COMMON_H
#define ARCOMM_TEST_SPLIT_COMMON_H

#include "harness.h"

#include <stddef.h>
#include <stdint.h>

/* A non-NULL value no communicator has: *newcomm must keep it when a call fails. */
extern int sp_sentinel_storage;
#define SENTINEL ((comm_t *)&sp_sentinel_storage)

/* Segments of the children of a parent (calls 0..calls-1, colors 0..ncolors-1) still in
 * /dev/shm, plus the harness's own. */
int sp_leftovers(const comm_id_t *parent, int calls, int ncolors);
/* Fails the test if any of the n ranks recorded an error. */
void sp_expect_clean(struct h_rank *res, int n);
/* One allreduce on comm, checked against the float64 reference; its output bytes are
 * appended to r->out. */
void sp_reduce_check(struct h_rank *r, comm_t *comm, size_t count, comm_dtype_t dt, uint64_t seed,
                     const char *what);

/* test_split_failures.c */
void mismatch_allreduce(void **s);
void mismatch_allreduce_procs(void **s);
void mismatch_barrier(void **s);
void invalid_arguments(void **s);
void dead_peer(void **s);
void dead_peer_joining(void **s);
void dead_peer_making(void **s);
void aborting_parent_joining(void **s);
void aborting_parent_joining_procs(void **s);
void aborting_peer(void **s);
void aborting_split_word(void **s);
void aborting_split_word_set(void **s);
void child_init_fails(void **s);
void child_timeout(void **s);

/* test_split_init_all.c */
void init_all_sizes(void **s);
void knob_defaults(void **s);
void init_all_invalid(void **s);

#endif /* ARCOMM_TEST_SPLIT_COMMON_H */
