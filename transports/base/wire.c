/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' table and their host encode and decode: the scalar kernels (the
 * definition, wire_scalar.h's arithmetic element by element) and the choice of the
 * machine's vector kernels (wire_avx2.c, wire_avx512.c; wire_kernels.h).  docs/wire.md
 * states the formats, the error bounds and what becomes of NaN and infinity; tests/wire
 * checks them.
 */
#include "wire.h"
#include "tables.h"
#include "wire_kernels.h"

#include <ctype.h>
#include <stdatomic.h>
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
        acc[i] = wire_sum(acc[i], load_f32(dtype, src, i));
}

/* ---- The scalar kernels of f32 (wire_scalar.h's arithmetic, element by element) ---- */

static void bf16_encode_scalar(const float *src, size_t n, void *dst)
{
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = wire_bf16_of(src[i]);
}

static inline float bf16_at(const void *src, size_t i)
{
    uint16_t b;
    memcpy(&b, (const char *)src + 2 * i, 2);
    return wire_bf16_value(b);
}

static void bf16_decode_scalar(const void *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_at(src, i);
}

static void bf16_decode_add_scalar(const void *src, size_t n, float *acc)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = wire_sum(acc[i], bf16_at(src, i));
}

static void bf16_decode_sum_scalar(const void *a, const void *b, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = wire_sum(bf16_at(a, i), bf16_at(b, i));
}

/* Elements of the block at first, of n. */
static inline size_t block_len(size_t n, size_t first)
{
    return n - first < WIRE_BLOCK_ELEMS ? n - first : WIRE_BLOCK_ELEMS;
}

/* Block by block, fp8 and mode constant once inlined: mode 0: dst = a's values; 1: dst =
 * wire_sum(dst, a's); 2: dst = wire_sum(a's, b's). */
static inline void block_decode_f32(int fp8, int mode, const void *a, const void *b, size_t n,
                                    float *dst)
{
    const uint8_t *pa = a, *pb = b;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS) {
        size_t m = block_len(n, first);
        float sa, sb = 0.0f;
        memcpy(&sa, pa, 4);
        if (mode == 2)
            memcpy(&sb, pb, 4);
        float *d = dst + first;
        for (size_t i = 0; i < m; i++) {
            float va = wire_block_value(fp8, pa[4 + i], sa);
            d[i] = mode == 0   ? va
                   : mode == 1 ? wire_sum(d[i], va)
                               : wire_sum(va, wire_block_value(fp8, pb[4 + i], sb));
        }
        pa += WIRE_BLOCK_BYTES;
        if (mode == 2)
            pb += WIRE_BLOCK_BYTES;
    }
}

/* Inlined with fp8 constant, so each codec gets loops of its own. */
static inline void block_encode_f32(int fp8, const float *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        size_t m = block_len(n, first);
        wire_block_encode_scalar(fp8, src + first, m, wire_block_scale(fp8, src + first, m), out);
    }
}

static void int8_encode_scalar(const float *src, size_t n, void *dst)
{
    block_encode_f32(0, src, n, dst);
}

static void fp8_encode_scalar(const float *src, size_t n, void *dst)
{
    block_encode_f32(1, src, n, dst);
}

static void int8_decode_scalar(const void *src, size_t n, float *dst)
{
    block_decode_f32(0, 0, src, NULL, n, dst);
}

static void fp8_decode_scalar(const void *src, size_t n, float *dst)
{
    block_decode_f32(1, 0, src, NULL, n, dst);
}

static void int8_decode_add_scalar(const void *src, size_t n, float *acc)
{
    block_decode_f32(0, 1, src, NULL, n, acc);
}

static void fp8_decode_add_scalar(const void *src, size_t n, float *acc)
{
    block_decode_f32(1, 1, src, NULL, n, acc);
}

static void int8_decode_sum_scalar(const void *a, const void *b, size_t n, float *dst)
{
    block_decode_f32(0, 2, a, b, n, dst);
}

static void fp8_decode_sum_scalar(const void *a, const void *b, size_t n, float *dst)
{
    block_decode_f32(1, 2, a, b, n, dst);
}

const struct wire_kernels wire_kernels_scalar = {
    .name = "scalar",
    .encode = {[WIRE_BF16] = bf16_encode_scalar,
               [WIRE_INT8] = int8_encode_scalar,
               [WIRE_FP8] = fp8_encode_scalar},
    .decode = {[WIRE_BF16] = bf16_decode_scalar,
               [WIRE_INT8] = int8_decode_scalar,
               [WIRE_FP8] = fp8_decode_scalar},
    .decode_add = {[WIRE_BF16] = bf16_decode_add_scalar,
                   [WIRE_INT8] = int8_decode_add_scalar,
                   [WIRE_FP8] = fp8_decode_add_scalar},
    .decode_sum = {[WIRE_BF16] = bf16_decode_sum_scalar,
                   [WIRE_INT8] = int8_decode_sum_scalar,
                   [WIRE_FP8] = fp8_decode_sum_scalar},
};

/* ---- Picking the kernels of this machine ---- */

#if defined(__x86_64__)
static bool cpu_has_avx512(void)
{
    /* __builtin_cpu_supports also checks that the OS saves the zmm/ymm state (XCR0). */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx2");
}

static bool cpu_has_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#endif

const struct wire_kernels *wire_kernels_find(const char *isa)
{
    if (isa == NULL)
        return NULL;
    if (strcmp(isa, "scalar") == 0)
        return &wire_kernels_scalar;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (strcmp(isa, "avx2") == 0 && cpu_has_avx2())
        return &wire_kernels_avx2;
    if (strcmp(isa, "avx512") == 0 && cpu_has_avx512())
        return &wire_kernels_avx512;
#endif
    return NULL;
}

/* The machine's best, found on first use; every thread finds the same, so a race only
 * stores the same pointer twice. */
static _Atomic(const struct wire_kernels *) kernels_best;

const struct wire_kernels *wire_kernels_current(void)
{
    const struct wire_kernels *k = atomic_load_explicit(&kernels_best, memory_order_relaxed);
    if (k != NULL)
        return k;
    k = wire_kernels_find("avx512");
    if (k == NULL)
        k = wire_kernels_find("avx2");
    if (k == NULL)
        k = &wire_kernels_scalar;
    atomic_store_explicit(&kernels_best, k, memory_order_relaxed);
    return k;
}

/* ---- The rows' host functions: f32 through the kernels, f16 and bf16 inputs (block
 * codecs only) element by element ---- */

static void bf16_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    (void)dtype; /* f32 only (wire_applies) */
    wire_kernels_current()->encode[WIRE_BF16](src, n, dst);
}

static void bf16_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    (void)dtype;
    wire_kernels_current()->decode[WIRE_BF16](src, n, dst);
}

static void bf16_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    (void)dtype;
    wire_kernels_current()->decode_add[WIRE_BF16](src, n, acc);
}

/* A block codec's encode of f16 or bf16 input: each element widened exactly, then as f32. */
static void block_encode_narrow(int fp8, comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    uint8_t *out = dst;
    float x[WIRE_BLOCK_ELEMS];
    for (size_t first = 0; first < n; first += WIRE_BLOCK_ELEMS, out += WIRE_BLOCK_BYTES) {
        size_t m = block_len(n, first);
        for (size_t i = 0; i < m; i++)
            x[i] = load_f32(dtype, src, first + i);
        wire_block_encode_scalar(fp8, x, m, wire_block_scale(fp8, x, m), out);
    }
}

static void int8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    if (dtype == COMM_F32)
        wire_kernels_current()->encode[WIRE_INT8](src, n, dst);
    else
        block_encode_narrow(0, dtype, src, n, dst);
}

static void fp8_encode(comm_dtype_t dtype, const void *src, size_t n, void *dst)
{
    if (dtype == COMM_F32)
        wire_kernels_current()->encode[WIRE_FP8](src, n, dst);
    else
        block_encode_narrow(1, dtype, src, n, dst);
}

/* A block codec's bytes are the same whatever the input dtype was: decodes ignore it. */
static void int8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    (void)dtype;
    wire_kernels_current()->decode[WIRE_INT8](src, n, dst);
}

static void int8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    (void)dtype;
    wire_kernels_current()->decode_add[WIRE_INT8](src, n, acc);
}

static void fp8_decode(comm_dtype_t dtype, const void *src, size_t n, float *dst)
{
    (void)dtype;
    wire_kernels_current()->decode[WIRE_FP8](src, n, dst);
}

static void fp8_decode_add(comm_dtype_t dtype, const void *src, size_t n, float *acc)
{
    (void)dtype;
    wire_kernels_current()->decode_add[WIRE_FP8](src, n, acc);
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

void wire_decode_sum(const struct wire_row *row, comm_dtype_t dtype, const void *a, const void *b,
                     size_t n, float *dst)
{
    int codec = (int)(row - wire_table);
    if (codec != WIRE_NONE) {
        wire_kernels_current()->decode_sum[codec](a, b, n, dst);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = wire_sum(load_f32(dtype, a, i), load_f32(dtype, b, i));
}
