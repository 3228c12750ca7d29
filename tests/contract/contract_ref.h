/* SPDX-License-Identifier: MIT */
/*
 * The reproducibility contract's reference (docs/api.md, "Reproducible results"),
 * computed in plain C, independent of the library: element i of a reduction is the
 * rank-order reduction of every rank's element i within each host, in the accumulation
 * type (f32 for f16, bf16 and f32; f64 for f64; wrap-around for integers), then the
 * hosts' partial results combined by the binomial tree over the host indices (round
 * k = 1, 2, 4, ...: host h, a multiple of 2k, takes h op (h + k)), AVG divided by
 * nranks, an addend added, and rounded to the dtype once.  Inputs are seeded per rank,
 * so every rank (and the reference) can make any rank's data.
 */
#ifndef ARCOMM_TEST_CONTRACT_REF_H
#define ARCOMM_TEST_CONTRACT_REF_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which ranks share a host: per_host consecutive ranks a host (0: one host). */
struct cref_layout {
    int nranks;
    int per_host;
};

/* Random inputs for (seed, rank), never zero: floats of both signs in [2^-4, 2^4)
 * (COMM_PROD: in [0.75, 1.25), so products of 8 stay meaningful), integers over their
 * whole range (COMM_PROD: odd). */
void cref_fill(void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed, int rank);

/*
 * The contract's result for elements [first, first + n) of a reduction over every rank's
 * cref_fill(count, dtype, op, seed, rank) data (count >= first + n) into out (n
 * elements of dtype).  narrow: f32 inputs rounded to bf16 first (the bf16 wire).  addend:
 * NULL, or the rank's comm_allreduce_add addend (addend_count elements, row-broadcast
 * from element 0 of the whole vector).
 */
void cref_reduce(const struct cref_layout *lay, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                 size_t count, size_t first, size_t n, bool narrow, const void *addend,
                 size_t addend_count, void *out);

/*
 * The float64 check of a reference (floats only): every element of ref within the
 * rounding bound of the float64 reduction of the same (decoded) inputs; integers are
 * checked exactly by cref_reduce's own arithmetic and return 0.  Returns the number of
 * elements out of bound and describes the first in why.
 */
long cref_check_f64(const struct cref_layout *lay, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
                    size_t count, size_t first, size_t n, bool narrow, const void *ref, char *why,
                    size_t whylen);

/* Index of the first element whose bits differ between a and b (n elements of dtype), or
 * n when they all match; its two values as text into why. */
size_t cref_first_diff(const void *a, const void *b, size_t n, comm_dtype_t dtype, char *why,
                       size_t whylen);

const char *cref_dtype_name(comm_dtype_t dtype);
const char *cref_op_name(comm_op_t op);

#endif /* ARCOMM_TEST_CONTRACT_REF_H */
