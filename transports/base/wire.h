/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs: how a rank's contribution to a reduction travels where the link is
 * the bottleneck.  One row a codec (name, bytes per element and per block, the dtypes it
 * applies to, host encode and decode); the backends' kernels sit in tables of their own
 * indexed by the same enum wire_codec (collectives/cuda/wire_cuda.h), so adding a codec
 * is a row here and its kernels there.
 *
 * It lives in the base because every layer that moves a reduction's bytes asks it: the
 * CUDA transport sizes its staging slots by it, the collectives encode and decode with
 * it, and the inter-host step of comm_init_mpi encodes what it sends.
 *
 * The contract (docs/wire.md): each rank encodes its own contribution once; every rank
 * decodes the same bytes with the same arithmetic, so the decoded values, and the
 * rank-order f32 sum of them, are the same bits on every rank.
 *
 * Block codecs (int8, fp8) cut the elements into blocks of WIRE_BLOCK_ELEMS; a block on
 * the wire is its f32 scale followed by one byte per element, and the last, partial
 * block of a buffer still takes a whole block's bytes (its unused bytes are zero).  A
 * buffer cut into chunks must cut them on block boundaries: wire_bytes of the pieces
 * then adds up to the bytes of the whole.
 */
#ifndef ARCOMM_BASE_WIRE_H
#define ARCOMM_BASE_WIRE_H

#include "arcomm.h"
#include "wire_scalar.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum wire_codec {
    WIRE_NONE = 0, /* full width: the dtype's own bytes */
    WIRE_BF16,     /* f32 rounded to bf16 (nearest even, NaN kept NaN) */
    WIRE_INT8,     /* blocks: f32 scale = absmax / 127, int8 codes, symmetric */
    WIRE_FP8,      /* blocks: f32 scale = absmax / 448, e4m3 codes, saturating, RNE */
    WIRE_COUNT
};

/*
 * WIRE_BLOCK_ELEMS (wire_scalar.h), the elements in a block of int8 and fp8, is 64: a
 * warp encodes a block with two elements a lane and one shuffle reduction of the absmax;
 * the scale costs 4 bytes in 68, so a block is 1.0625 bytes an element (1.88x fewer bytes
 * than bf16, 3.76x fewer than f32, where 32-element blocks give only 1.78x and 3.56x);
 * and an outlier inflates the error of 63 neighbours, not 127.
 */

/*
 * Encodes n elements of dtype (one the row applies to) from src into dst, which holds
 * wire_bytes(row, dtype, n) bytes.
 */
typedef void (*wire_encode_fn)(comm_dtype_t dtype, const void *src, size_t n, void *dst);
/*
 * Decodes n elements from src (bytes an encode of the same row and dtype wrote) into f32:
 * dst[i] = value (wire_decode), or acc[i] = acc[i] + value (wire_decode_add: the next
 * rank's term of a rank-order sum, with the host reductions' NaN rule: a NaN acc[i]
 * stays, made quiet, else a NaN value is taken, made quiet).
 */
typedef void (*wire_decode_fn)(comm_dtype_t dtype, const void *src, size_t n, float *dst);

struct wire_row {
    const char *name;          /* ARCOMM_WIRE's spelling */
    uint32_t elem_bytes;       /* per element, element codecs; 0: the dtype's size (none) */
    uint32_t block_elems;      /* elements a block (1: an element codec) */
    uint32_t block_bytes;      /* bytes a block, scale included (0: element codec) */
    uint32_t dtypes;           /* bit (1 << dtype) for each input dtype it applies to */
    wire_encode_fn encode;     /* host (the machine's vector kernels for f32) */
    wire_decode_fn decode;     /* host: dst = decoded */
    wire_decode_fn decode_add; /* host: acc += decoded */
};

/* Indexed by enum wire_codec. */
extern const struct wire_row wire_table[WIRE_COUNT];

/* The row of codec, or NULL when codec is none of enum wire_codec. */
const struct wire_row *wire_row(enum wire_codec codec);
/* The codec named name ("none", "bf16", "int8", "fp8"; any case), or -1. */
int wire_parse(const char *name);
/* "none", ... or "?". */
const char *wire_name(int codec);

/*
 * Does the codec apply to a reduction of dtype with op?  bf16: f32, any op (a backend
 * may narrow fewer: CUDA's kernels narrow sums only); int8, fp8: f32, f16 and bf16 sums
 * and averages; none: everything.  Where it does not apply the call runs at full width.
 */
bool wire_applies(const struct wire_row *row, comm_dtype_t dtype, comm_op_t op);

/*
 * What a path carries: for each codec, the ops it travels in for (bit 1u << op); 0: the
 * path has no kernels for that codec and runs such a call at full width.  Each backend
 * names one of these per path; wire_pick is the one decision they all take.
 */
struct wire_carry {
    uint32_t ops[WIRE_COUNT];
};
#define WIRE_OPS_SUM     (1u << COMM_SUM)
#define WIRE_OPS_SUM_AVG ((1u << COMM_SUM) | (1u << COMM_AVG))
#define WIRE_OPS_ALL     0xffffffffu

/*
 * The codec a reduction of dtype with op moving bytes (the call's count times the dtype's
 * size) travels in on a path that carries carry: codec (ARCOMM_WIRE, agreed at join) when
 * bytes >= threshold (ARCOMM_WIRE_THRESHOLD as the backend resolved it; SIZE_MAX: never),
 * the codec applies to dtype and op (wire_applies) and the path carries it for op;
 * WIRE_NONE otherwise.  Its inputs are agreed at join or compared per call, so every rank
 * of a call picks the same.
 */
enum wire_codec wire_pick(int codec, size_t threshold, const struct wire_carry *carry,
                          comm_dtype_t dtype, comm_op_t op, size_t bytes);

/* Bytes n elements of dtype take on the wire (whole blocks for a block codec). */
size_t wire_bytes(const struct wire_row *row, comm_dtype_t dtype, size_t n);

/* The row's host encode and decodes (see the typedefs). */
void wire_encode(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                 void *dst);
void wire_decode(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                 float *dst);
void wire_decode_add(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                     float *acc);
/*
 * Two encodings of n elements (a and b, bytes the row's encode wrote) decoded and summed
 * in one pass: dst[i] = a's value + b's value, a the left operand, with the host
 * reductions' NaN rule (a NaN left operand stays, made quiet; else a NaN right one is
 * taken, made quiet): the same bits as wire_decode of a then a sum combine of b's values.
 */
void wire_decode_sum(const struct wire_row *row, comm_dtype_t dtype, const void *a, const void *b,
                     size_t n, float *dst);

/* The scalar conversions the codecs are made of (also for tests and other backends'
 * scalar forms). */
uint16_t wire_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN (quiet) */
float wire_bf16_to_f32(uint16_t b);
uint8_t wire_f32_to_e4m3(float f); /* RNE, saturating to +-448; NaN and inf -> NaN */
float wire_e4m3_to_f32(uint8_t b);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_BASE_WIRE_H */
