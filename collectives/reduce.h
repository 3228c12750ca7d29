/* SPDX-License-Identifier: MIT */
/*
 * Element-wise reduction kernels of the host device: the arithmetic every host path
 * (flag, bulk direct, bulk staged) shares, so that every path and every rank produces
 * bit-identical results.
 */
#ifndef ARCOMM_COLL_REDUCE_H
#define ARCOMM_COLL_REDUCE_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One reduction of nsrc sources into ndst destinations:
 *
 *   for i in [0, count):
 *     acc = widen(src[0][i]) op widen(src[1][i]) op ... op widen(src[nsrc-1][i])
 *           (always in source order 0, 1, 2, ...: the rank order, whatever the ISA,
 *           so the bits are the same on every rank, in every run, on every machine
 *           of one architecture)
 *     acc = acc / d                                                       (AVG only)
 *     for j in [0, ndst):
 *       dst[j][i] = narrow(acc + widen(addend[j][(offset + i) % addend_count]))  (SUM)
 *       dst[j][i] = narrow(acc)                                                  (else)
 *
 * Every dtype (F32, F16, BF16, F64, I8, U8, I32, U32, I64, U64) with every op (SUM,
 * MAX, MIN, PROD, AVG).
 *
 * widen: f16 and bf16 to f32, f32 stays f32, f64 and the integers stay themselves: the
 *   accumulator type is f32 for f16/bf16/f32, the dtype itself for the others.  When
 *   round_bf16 is set (dst_dtype and src_dtype F32 only), every source value is first
 *   rounded to bf16 (round to nearest even, NaN stays NaN) and back: the host-side
 *   emulation of BF16 wire narrowing, identical to reading bf16 staged values.
 *   When src_dtype is BF16 and dst_dtype is F32, the sources are narrowed wire values.
 * narrow: round once to dst_dtype (f16/bf16 round to nearest even; NaN, Inf and
 *   subnormals right).
 * Integers: SUM and PROD wrap around (two's complement, computed in unsigned
 *   arithmetic: no UB); MAX/MIN compare signed for I8/I32/I64, unsigned for
 *   U8/U32/U64.  AVG is not defined for integers (the runtime refuses it with
 *   COMM_ERR_UNSUPPORTED); handed one anyway, coll_reduce computes the SUM.
 * PROD on floats: the product in the accumulator type (f32 for f16/bf16/f32, f64 for
 *   f64), each step rounded to it as IEEE multiplication does, rounded once more to
 *   dst_dtype at the end.
 * AVG on floats: the SUM of the sources in source order, then divided by d in the
 *   accumulator type (one IEEE division), then rounded once to dst_dtype.  d is
 *   avg_n, or nsrc when avg_n is 0 (a caller reducing a slice of the ranks passes the
 *   number of ranks).  A NaN sum stays that NaN, made quiet.
 * NaNs: MAX/MIN on floats propagate NaN (if any source is NaN the result is a NaN);
 *   which NaN, and which of -0.0/+0.0 when they tie, is fixed by the inputs alone
 *   (the same on every rank, every run, every ISA): the first NaN in source order,
 *   bits unchanged, and on a tie the earlier source.  SUM, PROD and AVG: a NaN source
 *   gives the first NaN in source order, made quiet (Inf - Inf and 0 * Inf give the
 *   CPU's default NaN).
 * addend: NULL, or an array of ndst pointers (entries may be NULL), each of
 *   addend_count elements of dst_dtype; only with op SUM (ignored with every other op,
 *   and when addend_count is 0).  offset is the element index of dst[j][0] within the
 *   whole tensor, so that a row-broadcast bias lines up when a slice starts mid-row.
 *   The addend is added in f32 (f64 for F64, wrapping for integers) after the sum of
 *   the sources, and the result rounded once to dst_dtype.
 * acc_out (dst_dtype F16/BF16 only): receives acc as it is before the addend and the
 *   rounding, after AVG's division, so that a peer that only narrows acc_out (with its
 *   own addend) gets the very bits of a single call.
 * nt_store: use non-temporal stores for dst (large outputs that no one reads soon).
 * src_dtype F32 with dst_dtype F16/BF16 and nsrc 1: the source holds accumulators
 *   (an acc_out of another call); they are only narrowed (with the addend first, when
 *   op is SUM): no op, no division.
 *
 * Sources and destinations may alias only exactly (dst[j] == src[k], in-place); any
 * alignment is allowed.  Vectorised (AVX-512 / AVX2 / portable C, chosen once at run
 * time); every instruction set gives the same bits for every input.
 */
struct coll_reduce_args {
    void *const *dst;       /* ndst destination pointers */
    int ndst;               /* >= 1 */
    comm_dtype_t dst_dtype; /* the user's dtype */
    const void *const *src; /* nsrc source pointers */
    int nsrc;               /* >= 1 */
    comm_dtype_t src_dtype; /* == dst_dtype, BF16 when dst_dtype is F32, or F32 (see above) */
    bool round_bf16;        /* round F32 sources through bf16 first */
    size_t count;           /* elements */
    comm_op_t op;
    int avg_n;                 /* AVG's divisor (> 0); 0 = nsrc */
    const void *const *addend; /* NULL or ndst pointers (entries may be NULL) */
    size_t addend_count;       /* elements in each addend row (divides the tensor) */
    size_t offset;             /* element index of dst[*][0] in the tensor */
    bool nt_store;
    /* NULL, or count f32 values that receive the accumulator before the addend and the
     * rounding (dst_dtype F16/BF16 only): what a peer needs to add its own addend and
     * still round once (the staged path's result regions). */
    float *acc_out;
};

void coll_reduce(const struct coll_reduce_args *args);

/*
 * Copies bytes from src to each of ndst destinations (a destination equal to src is
 * skipped), chunk by chunk (COLL_COPY_CHUNK_BYTES), so that src is read from memory
 * once and the later copies of a chunk read it from cache.  With nt, streaming stores,
 * fenced before the return.  Bit-exact: a byte copy.
 */
void coll_copy_fanout(void *const *dst, int ndst, const void *src, size_t bytes, bool nt);
#define COLL_COPY_CHUNK_BYTES ((size_t)64 << 10)

/*
 * Narrows count f32 values to bf16 (round to nearest even, NaN kept NaN, quiet):
 * the wire format of BF16 narrowing.
 */
void coll_f32_to_bf16(uint16_t *dst, const float *src, size_t count);

/* Scalar conversions, exact and matching the vector paths bit for bit. */
float coll_f16_to_f32(uint16_t h);
uint16_t coll_f32_to_f16(float f);
float coll_bf16_to_f32(uint16_t b);
uint16_t coll_f32_to_bf16_1(float f);

/* Which instruction set coll_reduce uses on this machine ("avx512", "avx2", "generic"). */
const char *coll_reduce_isa(void);

/*
 * For tests: makes coll_reduce (and coll_f32_to_bf16) use the named instruction set
 * ("generic", "avx2", "avx512"), so every one this machine has can be compared with the
 * others bit for bit; NULL or "auto" goes back to the machine's best.  Returns false,
 * changing nothing, when this machine cannot run isa.  Not meant to race with
 * reductions in other threads.
 */
bool coll_reduce_force_isa(const char *isa);

#endif /* ARCOMM_COLL_REDUCE_H */
