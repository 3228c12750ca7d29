/* SPDX-License-Identifier: MIT */
/*
 * The contract's reference for a reduction whose contributions travel in a wire codec
 * (docs/wire.md, "A reduction over n ranks"), for the CUDA contract configs: every rank's
 * cref_fill input encoded and decoded on the host by transports/base/wire.h (which suite
 * wire checks against a model of the formats of its own), the decoded values summed in
 * rank order in f32, the addend added, AVG divided by nranks, and rounded once to the
 * dtype.
 */
#ifndef ARCOMM_TEST_CONTRACT_REF_CUDA_H
#define ARCOMM_TEST_CONTRACT_REF_CUDA_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Does codec (a name ARCOMM_WIRE takes) apply to an allreduce of dtype with op?  (The
 * library's own rule, wire_applies.)  NULL codec: no. */
bool cref_wire_applies(const char *codec, comm_dtype_t dtype, comm_op_t op);

/*
 * Elements [0, count) of an allreduce of nranks ranks' cref_fill(count, dtype, op, seed,
 * rank) inputs traveling in codec, into out (count elements of dtype).  addend: NULL, or
 * the addend of comm_allreduce_add (addend_count elements, row-broadcast).  Returns false
 * when out of memory or codec is unknown.
 */
bool cref_wire_reduce(const char *codec, int nranks, comm_dtype_t dtype, comm_op_t op,
                      uint64_t seed, size_t count, const void *addend, size_t addend_count,
                      void *out);

/* The bits of element j of a and b (dtype) as "0x... / 0x..." into why. */
void cref_bits(const void *a, const void *b, size_t j, comm_dtype_t dtype, char *why,
               size_t whylen);

#endif /* ARCOMM_TEST_CONTRACT_REF_CUDA_H */
