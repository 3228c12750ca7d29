/* SPDX-License-Identifier: MIT */
/*
 * The wire codecs' encode and decode-and-sum on the DSP side (see hex_wire.h), scalar
 * code on wire_scalar.h's arithmetic.  A block of the encoding is its f32 scale then 64
 * codes (int8, fp8), a short last block's unused codes zero; bf16 is 2 bytes an
 * element.  Encoded bytes are read from the staging buffers with plain loads (no DMA,
 * no HVX): the scalar form.
 */
#include "hex_wire.h"
#include "hex_f16.h"
/* The one header the DSP side shares with the layers above it: the codecs' arithmetic
 * is one piece of plain C for every backend (hexagon/ otherwise stands alone). */
#include "../transports/base/wire_scalar.h"

#define BLOCK WIRE_BLOCK_ELEMS

static inline float load_in(uint32_t dtype, const uint8_t *src, uint32_t i)
{
    if (dtype == HEX_F16) {
        uint16_t h;
        hex_memcpy(&h, src + 2u * i, 2);
        return wire_f16_value(h);
    }
    float f;
    hex_memcpy(&f, src + 4u * i, 4);
    return f;
}

static void encode_block(int fp8, uint32_t dtype, const uint8_t *src, uint32_t first, uint32_t m,
                         uint8_t *out)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < m; i++) {
        float a = wire_abs(load_in(dtype, src, first + i));
        amax = wire_finite(a) && a > amax ? a : amax;
    }
    float scale = fp8 ? wire_fp8_scale(amax) : wire_int8_scale(amax);
    uint8_t q[BLOCK];
    hex_memset(q, 0, sizeof(q));
    for (uint32_t i = 0; i < m; i++) {
        float x = load_in(dtype, src, first + i);
        q[i] = fp8 ? wire_fp8_code(x, scale) : (uint8_t)wire_int8_code(x, scale);
    }
    hex_memcpy(out, &scale, 4);
    hex_memcpy(out + 4, q, BLOCK);
}

void hex_wire_encode(uint32_t codec, uint32_t dtype, const uint8_t *src, uint32_t n, uint32_t b_lo,
                     uint32_t b_hi, uint8_t *dst)
{
    for (uint32_t b = b_lo; b < b_hi; b++) {
        uint32_t first = b * BLOCK;
        uint32_t m = n - first < BLOCK ? n - first : BLOCK;
        if (codec == HEX_WIRE_BF16) {
            for (uint32_t i = first; i < first + m; i++) {
                uint16_t h = wire_bf16_of(load_in(dtype, src, i));
                hex_memcpy(dst + 2u * i, &h, 2);
            }
        } else {
            encode_block(codec == HEX_WIRE_FP8, dtype, src, first, m,
                         dst + (uint64_t)b * WIRE_BLOCK_BYTES);
        }
    }
}

/* Element i of an encoding, decoded (scale: its block's, for int8 and fp8). */
static inline float decode_at(uint32_t codec, const uint8_t *w, uint32_t i, float scale)
{
    if (codec == HEX_WIRE_BF16) {
        uint16_t h;
        hex_memcpy(&h, w + 2u * i, 2);
        return wire_bf16_value(h);
    }
    uint8_t c = w[(i / BLOCK) * WIRE_BLOCK_BYTES + 4u + i % BLOCK];
    return codec == HEX_WIRE_FP8 ? wire_fp8_value(c, scale) : wire_int8_value((int8_t)c, scale);
}

static inline void store_f(uint32_t dtype, uint8_t *p, uint32_t i, float v)
{
    if (dtype == HEX_F16) {
        uint16_t h = hex_f32_to_f16(v);
        hex_memcpy(p + 2u * i, &h, 2);
    } else {
        hex_memcpy(p + 4u * i, &v, 4);
    }
}

void hex_wire_reduce(const struct hex_op_args *a, uint32_t lo, uint32_t hi)
{
    const struct hex_op_params *p = &a->p;
    uint32_t n = p->n_ranks, codec = p->codec, dtype = p->dtype;
    float scale[HEX_MAX_RANKS];
    /* Segments of one block each: the ranks' scales are read once a segment. */
    for (uint32_t s = lo; s < hi;) {
        uint32_t b = s / BLOCK;
        uint32_t e = (b + 1) * BLOCK < hi ? (b + 1) * BLOCK : hi;
        for (uint32_t k = 0; k < n; k++) {
            scale[k] = 0.0f;
            if (codec != HEX_WIRE_BF16)
                hex_memcpy(&scale[k], a->wire[k] + (uint64_t)b * WIRE_BLOCK_BYTES, 4);
        }
        for (uint32_t i = s; i < e; i++) {
            /* The contract's order: rank 0's decoded value, later ranks added in turn. */
            float acc = decode_at(codec, a->wire[0], i, scale[0]);
            for (uint32_t k = 1; k < n; k++)
                acc = acc + decode_at(codec, a->wire[k], i, scale[k]);
            if (p->add_mode == HEX_ADD_NONE) {
                for (uint32_t j = 0; j < n; j++)
                    store_f(dtype, a->dst[j], i, acc);
                continue;
            }
            /* Rank j's output gets rank j's addend, last, rounded once. */
            uint32_t ai = p->add_mode == HEX_ADD_BCAST ? i % p->ne0 : i;
            for (uint32_t j = 0; j < n; j++)
                store_f(dtype, a->dst[j], i, acc + load_in(dtype, a->addend[j], ai));
        }
        s = e;
    }
}
