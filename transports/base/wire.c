/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' table and their host encode and decode, in plain C loops the compiler
 * can vectorise.  docs/wire.md states the formats, the error bounds and what becomes of
 * NaN and infinity; tests/wire checks them.
 */
#include "wire.h"
#include "tables.h"

#include <ctype.h>
#include <string.h>

/* ---- Scalar conversions (wire_scalar.h's, under the names the table exports) ---- */

uint16_t wire_f32_to_bf16(float f)
{
    return wire_bf16_of(f);
}

float wire_bf16_to_f32(uint16_t b)
{
    return wire_bf16_value(b);
}

uint8_t wire_f32_to_e4m3(float f)
{
    return wire_e4m3_of(f);
}

float wire_e4m3_to_f32(uint8_t b)
{
    return wire_e4m3_value(b);
}

/* Element i of src (f32, f16 or bf16) as f32, exactly. */
static inline float load_f32(comm_dtype_t dtype, const void *src, size_t i)
{
    uint16_t h;
    float f;

    switch (dtype) {
    case COMM_F16:
        memcpy(&h, (const char *)src + 2 * i, 2);
        return wire_f16_value(h);
    case COMM_BF16:
        memcpy(&h, (const char *)src + 2 * i, 2);
        return wire_bf16_value(h);
    default:
        memcpy(&f, (const char *)src + 4 * i, 4);
        return f;
    }
}

/* ---- none: the dtype's bytes ---- */

static void none_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    memcpy(dst, src, n * rt_dtype_size(dtype));
}

static void none_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = load_f32(dtype, src, i);
}

static void none_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += load_f32(dtype, src, i);
}

/* ---- bf16: f32 rounded to nearest even ---- */

static void bf16_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    const float *s = src;
    uint16_t *d = dst;
    (void)dtype; /* f32 only (wire_applies) */
    for (size_t i = 0; i < n; i++)
        d[i] = wire_f32_to_bf16(s[i]);
}

static void bf16_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    const uint16_t *s = src;
    (void)dtype;
    for (size_t i = 0; i < n; i++)
        dst[i] = wire_bf16_value(s[i]);
}

static void bf16_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    const uint16_t *s = src;
    (void)dtype;
    for (size_t i = 0; i < n; i++)
        acc[i] += wire_bf16_value(s[i]);
}

/* ---- Block codecs ---- */

/* The finite absmax of a block (NaN and inf do not set the scale). */
static inline float block_absmax(comm_dtype_t dtype, const void *src, size_t first, size_t m)
{
    float amax = 0.0f;
    for (size_t i = 0; i < m; i++) {
        float a = wire_abs(load_f32(dtype, src, first + i));
        amax = wire_finite(a) && a > amax ? a : amax;
    }
    return amax;
}

/* Elements of the block at first, of n. */
static inline size_t block_len(size_t n, size_t first)
{
    return n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
}

/* A block codec's per-element arithmetic (wire_scalar.h): int8 or fp8. */
static inline float block_scale(bool fp8, float amax)
{
    return fp8 ? wire_fp8_scale(amax) : wire_int8_scale(amax);
}

static inline uint8_t block_code(bool fp8, float x, float scale)
{
    return fp8 ? wire_fp8_code(x, scale) : (uint8_t)wire_int8_code(x, scale);
}

static inline float block_value(bool fp8, uint8_t q, float scale)
{
    return fp8 ? wire_fp8_value(q, scale) : wire_int8_value((int8_t)q, scale);
}

/* Each block: its f32 scale, then WIRE_BLOCK_ELEMS codes (a short last block's unused
 * codes zero).  Inlined with fp8 constant, so each codec gets a loop of its own. */
static inline void block_encode(bool fp8, comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        size_t m = block_len(n, first);
        float scale = block_scale(fp8, block_absmax(dtype, src, first, m));
        uint8_t q[WIRE_BLOCK_ELEMS] = {0};
        for (size_t i = 0; i < m; i++)
            q[i] = block_code(fp8, load_f32(dtype, src, first + i), scale);
        memcpy(out, &scale, 4);
        memcpy(out + 4, q, WIRE_BLOCK_ELEMS);
    }
}

/* dst = decoded, or (add) dst += decoded. */
static inline void block_decode(bool fp8, bool add, const void *src, size_t n, float *dst)
{
    const uint8_t *in = src;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, in += WIRE_BLOCK_BYTES) {
        size_t m = block_len(n, first);
        float scale;
        memcpy(&scale, in, 4);
        for (size_t i = 0; i < m; i++) {
            float v = block_value(fp8, in[4 + i], scale);
            dst[first + i] = add ? dst[first + i] + v : v;
        }
    }
}

static void int8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    block_encode(false, dtype, src, n, dst);
}

static void int8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    (void)dtype;
    block_decode(false, false, src, n, dst);
}

static void int8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    (void)dtype;
    block_decode(false, true, src, n, acc);
}

static void fp8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    block_encode(true, dtype, src, n, dst);
}

static void fp8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    (void)dtype;
    block_decode(true, false, src, n, dst);
}

static void fp8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    (void)dtype;
    block_decode(true, true, src, n, acc);
}

/* ---- The table ---- */

#define WIRE_FLOATS ((1u << COMM_F32) | (1u << COMM_F16) | (1u << COMM_BF16))

const struct wire_row wire_table[WIRE_COUNT] = {
    [WIRE_NONE] = {.name = "none",
                   .elem_bytes = 0,
                   .block_elems = 1,
                   .block_bytes = 0,
                   .dtypes = UINT32_MAX,
                   .encode = none_encode,
                   .decode = none_decode,
                   .decode_add = none_decode_add},
    [WIRE_BF16] = {.name = "bf16",
                   .elem_bytes = 2,
                   .block_elems = 1,
                   .block_bytes = 0,
                   .dtypes = 1u << COMM_F32,
                   .encode = bf16_encode,
                   .decode = bf16_decode,
                   .decode_add = bf16_decode_add},
    [WIRE_INT8] = {.name = "int8",
                   .elem_bytes = 1,
                   .block_elems = WIRE_BLOCK_ELEMS,
                   .block_bytes = WIRE_BLOCK_BYTES,
                   .dtypes = WIRE_FLOATS,
                   .encode = int8_encode,
                   .decode = int8_decode,
                   .decode_add = int8_decode_add},
    [WIRE_FP8] = {.name = "fp8",
                  .elem_bytes = 1,
                  .block_elems = WIRE_BLOCK_ELEMS,
                  .block_bytes = WIRE_BLOCK_BYTES,
                  .dtypes = WIRE_FLOATS,
                  .encode = fp8_encode,
                  .decode = fp8_decode,
                  .decode_add = fp8_decode_add},
};

_Static_assert(sizeof(wire_table) / sizeof(wire_table[0]) == WIRE_COUNT,
               "one wire_table row a codec");

const struct wire_row *wire_row(enum wire_codec codec)
{
    return (unsigned)codec < WIRE_COUNT ? &wire_table[codec] : NULL;
}

int wire_parse(const char *name)
{
    for (int c = 0; c < WIRE_COUNT; c++) {
        const char *a = wire_table[c].name, *b = name;
        while (*a != '\0' && tolower((unsigned char)*b) == *a)
            a++, b++;
        if (*a == '\0' && *b == '\0')
            return c;
    }
    return -1;
}

const char *wire_name(int codec)
{
    return codec >= 0 && codec < WIRE_COUNT ? wire_table[codec].name : "?";
}

bool wire_applies(const struct wire_row *row, comm_dtype_t dtype, comm_op_t op)
{
    if (row == &wire_table[WIRE_NONE])
        return true;
    /* bf16 rounds an input as the host paths have always done, whatever the op. */
    if (row == &wire_table[WIRE_BF16])
        return dtype == COMM_F32;
    return (op == COMM_SUM || op == COMM_AVG) && (unsigned)dtype < 32 &&
           (row->dtypes >> dtype & 1u);
}

enum wire_codec wire_pick(int codec, size_t threshold, const struct wire_carry *carry,
                          comm_dtype_t dtype, comm_op_t op, size_t bytes)
{
    const struct wire_row *row = wire_row((enum wire_codec)codec);
    if (row == NULL || codec == WIRE_NONE || bytes < threshold || (unsigned)op >= 32 ||
        (carry->ops[codec] >> op & 1u) == 0 || !wire_applies(row, dtype, op))
        return WIRE_NONE;
    return (enum wire_codec)codec;
}

size_t wire_bytes(const struct wire_row *row, comm_dtype_t dtype, size_t n)
{
    if (row->block_bytes != 0)
        return (n + row->block_elems - 1) / row->block_elems * row->block_bytes;
    if (row->elem_bytes != 0)
        return n * row->elem_bytes;
    return n * rt_dtype_size(dtype);
}

void wire_encode(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                 void *dst)
{
    row->encode(dtype, src, n, dst);
}

void wire_decode(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                 float *dst)
{
    row->decode(dtype, src, n, dst);
}

void wire_decode_add(const struct wire_row *row, comm_dtype_t dtype, const void *src, size_t n,
                     float *acc)
{
    row->decode_add(dtype, src, n, acc);
}
