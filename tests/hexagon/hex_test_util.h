/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the Hexagon tests: N ranks as threads (or processes) on emulated HTP
 * sessions, knobs set through the environment and restored, random data, float64
 * references.
 */
#ifndef ARCOMM_TEST_HEX_UTIL_H
#define ARCOMM_TEST_HEX_UTIL_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HT_MAX_RANKS 4

struct ht_rank {
    int rank;
    int nranks;
    comm_t *comm;
    void *user;
    comm_status_t status; /* what the body reports back */
    char msg[512];        /* comm_last_error after the body, if any */
};

typedef void (*ht_body)(struct ht_rank *r);

/* Runs body on nranks thread ranks of one fresh Hexagon communicator; every rank's
 * comm_init must succeed (asserted); comm_destroy after the body. */
void ht_run_threads(int nranks, ht_body body, void *user, struct ht_rank *out);

/* Sets an environment knob for the next communicators, remembering the old value;
 * ht_env_restore puts every one back. */
void ht_env_set(const char *name, const char *value);
void ht_env_restore(void);

/* Deterministic random numbers. */
uint32_t ht_rand(uint64_t *state);
/* Fills count elements of dtype (f32 or f16) with values in [-2, 2). */
void ht_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed);
double ht_get(const void *buf, size_t i, comm_dtype_t dtype);
/* One ulp-ish tolerance for a sum of n terms of magnitude <= 2 rounded to dtype. */
double ht_tol(comm_dtype_t dtype, int nterms);

/* Open descriptors of this process. */
int ht_count_fds(void);

#endif /* ARCOMM_TEST_HEX_UTIL_H */
