/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' contract reference (contract_ref_cuda.h), on the host: the library's
 * own host encoder and decoder (transports/base/wire.c, built into this test), never the
 * GPU's.
 */
#include "contract_ref_cuda.h"
#include "contract_ref.h"
#include "wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cref_wire_applies(const char *codec, comm_dtype_t dtype, comm_op_t op)
{
    int k = codec != NULL ? wire_parse(codec) : -1;
    return k > WIRE_NONE && wire_applies(wire_row((enum wire_codec)k), dtype, op);
}

static float widen(const void *p, size_t i, comm_dtype_t dtype)
{
    uint16_t h;
    switch (dtype) {
    case COMM_F32: {
        float f;
        memcpy(&f, (const char *)p + i * 4, 4);
        return f;
    }
    case COMM_BF16:
        memcpy(&h, (const char *)p + i * 2, 2);
        return wire_bf16_to_f32(h);
    default: {
        _Float16 v;
        memcpy(&v, (const char *)p + i * 2, 2);
        return (float)v;
    }
    }
}

/* Rounded once to the dtype, to nearest even (as the GPU's __float2half_rn and
 * __float2bfloat16_rn). */
static void store(void *p, size_t i, comm_dtype_t dtype, float f)
{
    uint16_t h;
    switch (dtype) {
    case COMM_F32:
        memcpy((char *)p + i * 4, &f, 4);
        return;
    case COMM_BF16:
        h = wire_f32_to_bf16(f);
        memcpy((char *)p + i * 2, &h, 2);
        return;
    default: {
        _Float16 v = (_Float16)f;
        memcpy((char *)p + i * 2, &v, 2);
        return;
    }
    }
}

bool cref_wire_reduce(const char *codec, int nranks, comm_dtype_t dtype, comm_op_t op,
                      uint64_t seed, size_t count, const void *addend, size_t addend_count,
                      void *out)
{
    int k = wire_parse(codec);
    if (k <= WIRE_NONE || !cref_wire_applies(codec, dtype, op))
        return false;
    const struct wire_row *row = wire_row((enum wire_codec)k);
    size_t es = comm_dtype_size(dtype);
    float *acc = malloc(count * sizeof(float)), *dec = malloc(count * sizeof(float));
    void *in = malloc(count * es), *enc = malloc(wire_bytes(row, dtype, count));
    bool done = acc != NULL && dec != NULL && in != NULL && enc != NULL;
    for (int r = 0; done && r < nranks; r++) {
        /* Each rank's contribution as every rank decodes it; the sum in rank order. */
        cref_fill(in, count, dtype, op, seed, r);
        wire_encode(row, dtype, in, count, enc);
        wire_decode(row, dtype, enc, count, dec);
        for (size_t i = 0; i < count; i++)
            acc[i] = r == 0 ? dec[i] : acc[i] + dec[i];
    }
    for (size_t i = 0; done && i < count; i++) {
        float v = acc[i];
        if (addend != NULL)
            v = v + widen(addend, i % addend_count, dtype);
        if (op == COMM_AVG)
            v = v / (float)nranks;
        store(out, i, dtype, v);
    }
    free(acc);
    free(dec);
    free(in);
    free(enc);
    return done;
}

void cref_bits(const void *a, const void *b, size_t j, comm_dtype_t dtype, char *why, size_t whylen)
{
    size_t es = comm_dtype_size(dtype);
    uint64_t x = 0, y = 0;
    if (es > sizeof(x))
        es = sizeof(x);
    memcpy(&x, (const char *)a + j * es, es); /* little-endian hosts */
    memcpy(&y, (const char *)b + j * es, es);
    snprintf(why, whylen, "bits got 0x%0*llx, want 0x%0*llx", (int)(2 * es), (unsigned long long)x,
             (int)(2 * es), (unsigned long long)y);
}
