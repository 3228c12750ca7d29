/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' table and their host encode and decode, in plain C loops the compiler
 * can vectorise.  docs/wire.md states the formats, the error bounds and what becomes of
 * NaN and infinity; tests/wire checks them.
 */
#include "wire.h"
#include "tables.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

/* ---- Scalar conversions ---- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

uint16_t wire_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);

    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x0040); /* NaN stays NaN, made quiet */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float wire_bf16_to_f32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

/* IEEE half to f32, exactly (subnormal halves are normal floats). */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f)
        return bits_f32(sign | 0x7f800000 | (mant << 13));
    if (exp != 0)
        return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    /* Zero or subnormal: mant * 2^-24, exact in f32. */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
}

uint8_t wire_f32_to_e4m3(float f)
{
    uint32_t x = f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    uint32_t a = x & 0x7fffffff;

    if (a >= 0x7f800000)
        return sign | WIRE_FP8_NAN; /* e4m3 has no infinity: NaN and inf both NaN */
    float af = bits_f32(a);
    if (af >= WIRE_FP8_MAX)
        return sign | 0x7e; /* saturate at 448 */
    if (af < 0x1p-6f) {
        /* Subnormal e4m3: m * 2^-9, m = 0..7; m = 8 is the smallest normal, code 0x08. */
        return sign | (uint8_t)rintf(af * 512.0f);
    }
    /* Normal: rebias the exponent (127 -> 7) and round 23 mantissa bits to 3, to nearest
     * even; a carry moves into the exponent as it should. */
    uint32_t r = (((a >> 23) - 120u) << 23) | (a & 0x7fffff);
    r = (r + 0x7ffffu + ((r >> 20) & 1)) >> 20;
    return sign | (uint8_t)(r > 0x7e ? 0x7e : r);
}

float wire_e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    uint32_t exp = (b >> 3) & 0xf;
    uint32_t mant = b & 7;

    if ((b & 0x7f) == WIRE_FP8_NAN)
        return bits_f32(sign | 0x7fc00000);
    if (exp != 0)
        return bits_f32(sign | ((exp + 120) << 23) | (mant << 20));
    float v = (float)mant * 0x1p-9f;
    return sign ? -v : v;
}

/* Element i of src (f32, f16 or bf16) as f32, exactly. */
static inline float load_f32(comm_dtype_t dtype, const void *src, size_t i)
{
    uint16_t h;
    float f;

    switch (dtype) {
    case COMM_F16:
        memcpy(&h, (const char *)src + 2 * i, 2);
        return f16_to_f32(h);
    case COMM_BF16:
        memcpy(&h, (const char *)src + 2 * i, 2);
        return wire_bf16_to_f32(h);
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
        dst[i] = wire_bf16_to_f32(s[i]);
}

static void bf16_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    const uint16_t *s = src;
    (void)dtype;
    for (size_t i = 0; i < n; i++)
        acc[i] += wire_bf16_to_f32(s[i]);
}

/* ---- Block codecs ---- */

/*
 * The block's scale: absmax of its finite elements / top (127 or 448).  A block of zeros
 * (or of non-finite elements only) has scale 0 and codes 0.
 */
static inline float block_scale(comm_dtype_t dtype, const void *src, size_t first, size_t m,
                                float top)
{
    float amax = 0.0f;
    for (size_t i = 0; i < m; i++) {
        float a = fabsf(load_f32(dtype, src, first + i));
        /* a <= FLT_MAX is false for NaN and inf: they do not set the scale. */
        amax = a <= 0x1.fffffep127f && a > amax ? a : amax;
    }
    return amax / top;
}

static void int8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale = block_scale(dtype, src, first, m, 127.0f);
        int8_t q[WIRE_BLOCK_ELEMS] = {0};
        for (size_t i = 0; i < m; i++) {
            float x = load_f32(dtype, src, first + i);
            if (!isfinite(x)) {
                q[i] = WIRE_INT8_NONFINITE;
                continue;
            }
            if (scale == 0.0f)
                continue;
            float y = rintf(x / scale);
            y = y > 127.0f ? 127.0f : y < -127.0f ? -127.0f : y;
            /* Near FLT_MAX, 127 * scale may round past it: one code less. */
            if (isinf(y * scale))
                y -= y > 0 ? 1.0f : -1.0f;
            q[i] = (int8_t)y;
        }
        memcpy(out, &scale, 4);
        memcpy(out + 4, q, WIRE_BLOCK_ELEMS);
    }
}

static inline float int8_value(int8_t q, float scale)
{
    return q == WIRE_INT8_NONFINITE ? NAN : (float)q * scale;
}

static void int8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    const uint8_t *in = src;
    (void)dtype;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, in += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale;
        memcpy(&scale, in, 4);
        const int8_t *q = (const int8_t *)(in + 4);
        for (size_t i = 0; i < m; i++)
            dst[first + i] = int8_value(q[i], scale);
    }
}

static void int8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    const uint8_t *in = src;
    (void)dtype;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, in += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale;
        memcpy(&scale, in, 4);
        const int8_t *q = (const int8_t *)(in + 4);
        for (size_t i = 0; i < m; i++)
            acc[first + i] += int8_value(q[i], scale);
    }
}

static void fp8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale = block_scale(dtype, src, first, m, WIRE_FP8_MAX);
        uint8_t q[WIRE_BLOCK_ELEMS] = {0};
        for (size_t i = 0; i < m; i++) {
            float x = load_f32(dtype, src, first + i);
            if (!isfinite(x)) {
                q[i] = WIRE_FP8_NAN;
                continue;
            }
            if (scale == 0.0f)
                continue;
            uint8_t c = wire_f32_to_e4m3(x / scale);
            /* Near FLT_MAX, 448 * scale may round past it: one code less. */
            if (isinf(wire_e4m3_to_f32(c) * scale))
                c--;
            q[i] = c;
        }
        memcpy(out, &scale, 4);
        memcpy(out + 4, q, WIRE_BLOCK_ELEMS);
    }
}

static void fp8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    const uint8_t *in = src;
    (void)dtype;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, in += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale;
        memcpy(&scale, in, 4);
        for (size_t i = 0; i < m; i++)
            dst[first + i] = wire_e4m3_to_f32(in[4 + i]) * scale;
    }
}

static void fp8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    const uint8_t *in = src;
    (void)dtype;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, in += WIRE_BLOCK_BYTES) {
        size_t m = n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
        float scale;
        memcpy(&scale, in, 4);
        for (size_t i = 0; i < m; i++)
            acc[first + i] += wire_e4m3_to_f32(in[4 + i]) * scale;
    }
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
