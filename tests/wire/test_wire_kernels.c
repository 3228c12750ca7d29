/* SPDX-License-Identifier: MIT */
/*
 * The host wire kernels of every instruction set this CPU runs (transports/base/
 * wire_kernels.h) against the scalar ones, which are the definition: encodes byte for
 * byte, decodes, decode_add and decode_sum bit for bit.  Inputs: normal data, outliers
 * (100x to 1e4x), zeros and -0.0, subnormals, infinities, NaNs with payloads, FLT_MAX
 * and scales near it, every code of each byte format and every bf16; lengths 0 to 200
 * and one large one (a partial last block), at unaligned addresses.  An instruction set
 * the CPU lacks is named as not checked.
 */
#include "wire.h"
#include "wire_kernels.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const isas[] = {"avx2", "avx512"};
#define NISA (sizeof(isas) / sizeof(isas[0]))
static const enum wire_codec codecs[] = {WIRE_BF16, WIRE_INT8, WIRE_FP8};
#define NCODEC (sizeof(codecs) / sizeof(codecs[0]))

#define BIG  100003 /* elements: 1562 whole blocks and a partial one */
#define SLOP 64     /* bytes of room for the offsets (at most 8 elements) */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float rng_normal(void)
{
    /* Sum of uniforms: close enough to normal, and deterministic. */
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s += (float)(rng_next() >> 40) / (float)(1u << 24);
    return (s - 2.0f) * 1.7f;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

enum kind { NORMAL, OUTLIERS, ZEROS, SUBNORMAL, SPECIALS, HUGE, TINY, KINDS };
static const char *const kind_name[KINDS] = {"normal",   "outliers", "zeros", "subnormal",
                                             "specials", "huge",     "tiny"};

static void fill(enum kind kind, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = rng_normal();
        switch (kind) {
        case NORMAL:
            break;
        case OUTLIERS: /* a few elements 100x to 1e4x the rest */
            if (rng_next() % 29 == 0)
                v *= (float)(100 + rng_next() % 9901);
            break;
        case ZEROS: /* zeros and -0.0, a block of them now and then wholly */
            v = (i / 64) % 3 == 0 ? 0.0f : rng_next() % 2 ? 0.0f : -0.0f;
            if ((i / 64) % 3 == 1 && rng_next() % 5 == 0)
                v = rng_normal();
            break;
        case SUBNORMAL:
            v = from_bits((uint32_t)(rng_next() % 0x00800000u) |
                          (rng_next() % 2 ? 0x80000000u : 0));
            break;
        case SPECIALS: { /* inf, NaNs with payloads, FLT_MAX, -0.0 among normal values */
            static const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                                          0x7f800001u, 0x7fa5a5a5u, 0xffffffffu, 0x7f7fffffu,
                                          0xff7fffffu, 0x80000000u, 0x00000001u, 0x00800000u};
            if (rng_next() % 7 == 0)
                v = from_bits(sp[rng_next() % (sizeof(sp) / sizeof(sp[0]))]);
            break;
        }
        case HUGE: /* near FLT_MAX: scales whose top code times the scale overflows */
            v = from_bits(0x7f000000u + (uint32_t)(rng_next() % 0x7fffffu)) *
                (rng_next() % 2 ? 1.0f : -1.0f);
            if (rng_next() % 11 == 0)
                v = rng_next() % 2 ? FLT_MAX : -FLT_MAX;
            break;
        case TINY: /* block absmax near the smallest scales (subnormal, or zero) */
            v = from_bits((uint32_t)(rng_next() % 300u)) * (rng_next() % 2 ? 1.0f : -1.0f);
            if (rng_next() % 3 == 0)
                v = from_bits((uint32_t)(0x00800000u + rng_next() % 0x04000000u));
            break;
        default:
            break;
        }
        x[i] = v;
    }
}

static void check_floats(const float *want, const float *got, size_t n, const char *what,
                         const char *isa, int codec, size_t len, size_t off)
{
    for (size_t i = 0; i < n; i++) {
        if (to_bits(want[i]) != to_bits(got[i])) {
            print_error("%s %s %s n=%zu off=%zu: element %zu is 0x%08x, the scalar form's 0x%08x\n",
                        isa, wire_name(codec), what, len, off, i, to_bits(got[i]),
                        to_bits(want[i]));
            fail();
        }
    }
}

/* Every kernel of k against the scalar ones on n elements of kind, off elements past a
 * vector boundary: f32 arrays off elements (4 off bytes), the encoded bytes off bytes
 * (2 off for bf16, whose elements are 2-byte aligned): vector loads at every alignment. */
static void compare(const struct wire_kernels *k, enum wire_codec c, enum kind kind, size_t n,
                    size_t off)
{
    const struct wire_kernels *s = &wire_kernels_scalar;
    const struct wire_row *row = wire_row(c);
    size_t wb = wire_bytes(row, COMM_F32, n);
    char *xm = malloc(n * 4 + SLOP), *ym = malloc(n * 4 + SLOP), *am = malloc(n * 4 + SLOP);
    char *e1m = malloc(wb + SLOP), *e2m = malloc(wb + SLOP), *ebm = malloc(wb + SLOP);
    float *want = malloc(n * 4 + 4), *got = malloc(n * 4 + SLOP);
    assert_true(off <= 8);
    assert_non_null(xm);
    assert_non_null(ym);
    assert_non_null(am);
    assert_non_null(e1m);
    assert_non_null(e2m);
    assert_non_null(ebm);
    assert_non_null(want);
    assert_non_null(got);
    size_t eoff = c == WIRE_BF16 ? 2 * off : off;
    float *x = (float *)(void *)xm + off, *y = (float *)(void *)ym + off;
    float *acc = (float *)(void *)am + off, *g = got + off;
    char *e1 = e1m + eoff, *e2 = e2m + eoff, *eb = ebm + eoff;
    fill(kind, x, n);
    fill(kind, y, n);
    fill(rng_next() % 2 ? SPECIALS : NORMAL, acc, n);

    /* Encode: the same bytes, poison where the kernel writes nothing it should. */
    memset(e1, 0xa5, wb);
    memset(e2, 0x5a, wb);
    s->encode[c](x, n, e1);
    k->encode[c](x, n, e2);
    for (size_t i = 0; i < wb; i++) {
        if (e1[i] != e2[i]) {
            print_error("%s %s encode of %s n=%zu off=%zu: byte %zu is 0x%02x, the scalar "
                        "form's 0x%02x\n",
                        k->name, row->name, kind_name[kind], n, off, i, (uint8_t)e2[i],
                        (uint8_t)e1[i]);
            fail();
        }
    }
    s->encode[c](y, n, eb);

    s->decode[c](e1, n, want);
    memset(g, 0xa5, n * 4);
    k->decode[c](e1, n, g);
    check_floats(want, g, n, "decode", k->name, c, n, off);

    memcpy(want, acc, n * 4);
    memcpy(g, acc, n * 4);
    s->decode_add[c](e1, n, want);
    k->decode_add[c](e1, n, g);
    check_floats(want, g, n, "decode_add", k->name, c, n, off);

    s->decode_sum[c](e1, eb, n, want);
    memset(g, 0xa5, n * 4);
    k->decode_sum[c](e1, eb, n, g);
    check_floats(want, g, n, "decode_sum", k->name, c, n, off);

    free(xm);
    free(ym);
    free(am);
    free(e1m);
    free(e2m);
    free(ebm);
    free(want);
    free(got);
}

static int checked_isas(const struct wire_kernels **ks)
{
    int nk = 0;
    for (size_t i = 0; i < NISA; i++) {
        const struct wire_kernels *k = wire_kernels_find(isas[i]);
        if (k == NULL)
            print_message("wire kernels %s: not checked, this CPU lacks them\n", isas[i]);
        else
            ks[nk++] = k;
    }
    return nk;
}

static void test_encode_decode(void **state)
{
    (void)state;
    const struct wire_kernels *ks[NISA];
    int nk = checked_isas(ks);
    rng_state = 0x9e3779b97f4a7c15ull;
    for (int ki = 0; ki < nk; ki++) {
        for (size_t ci = 0; ci < NCODEC; ci++) {
            for (int kind = 0; kind < KINDS; kind++) {
                for (size_t n = 0; n <= 200; n++)
                    compare(ks[ki], codecs[ci], (enum kind)kind, n, (n * 5) % 9);
                compare(ks[ki], codecs[ci], (enum kind)kind, BIG, 0);
                compare(ks[ki], codecs[ci], (enum kind)kind, BIG, 5);
            }
        }
    }
}

/* Every code of the byte formats, and every bf16, decoded under scales of every sort. */
static void test_all_codes(void **state)
{
    (void)state;
    const struct wire_kernels *ks[NISA];
    int nk = checked_isas(ks);
    static const uint32_t scales[] = {0x3f800000u, 0x3c23d70au, 0x00000000u, 0x00000001u,
                                      0x007fffffu, 0x7e7fffffu, 0x7f7fffffu, 0x40490fdbu,
                                      0x33d6bf95u, 0x80000000u};
    const size_t nsc = sizeof(scales) / sizeof(scales[0]);
    /* Block codecs: 256 codes in 4 blocks, once per scale, so 40 blocks. */
    size_t n = nsc * 256;
    uint8_t *blk = malloc(nsc * 4 * WIRE_BLOCK_BYTES);
    uint8_t *blk2 = malloc(nsc * 4 * WIRE_BLOCK_BYTES);
    float *want = malloc(65536 * 4), *got = malloc(65536 * 4), *acc = malloc(65536 * 4);
    assert_non_null(blk);
    assert_non_null(blk2);
    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(acc);
    rng_state = 12345;
    fill(SPECIALS, acc, 65536);
    for (size_t b = 0; b < nsc * 4; b++) {
        float sc = from_bits(scales[b / 4]);
        memcpy(blk + b * WIRE_BLOCK_BYTES, &sc, 4);
        memcpy(blk2 + b * WIRE_BLOCK_BYTES, &sc, 4);
        for (size_t i = 0; i < WIRE_BLOCK_ELEMS; i++) {
            blk[b * WIRE_BLOCK_BYTES + 4 + i] = (uint8_t)((b % 4) * 64 + i);
            blk2[b * WIRE_BLOCK_BYTES + 4 + i] = (uint8_t)(rng_next());
        }
    }
    uint16_t *h = malloc(65536 * 2);
    assert_non_null(h);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)(i * 40503u); /* every value, in a scrambled order */
    for (int ki = 0; ki < nk; ki++) {
        const struct wire_kernels *k = ks[ki], *s = &wire_kernels_scalar;
        for (size_t ci = 0; ci < NCODEC; ci++) {
            enum wire_codec c = codecs[ci];
            const void *src = c == WIRE_BF16 ? (const void *)h : blk;
            const void *src2 = c == WIRE_BF16 ? (const void *)(h + 1) : blk2;
            size_t m = c == WIRE_BF16 ? 65535 : n;
            s->decode[c](src, m, want);
            k->decode[c](src, m, got);
            check_floats(want, got, m, "decode (every code)", k->name, c, m, 0);
            memcpy(want, acc, m * 4);
            memcpy(got, acc, m * 4);
            s->decode_add[c](src, m, want);
            k->decode_add[c](src, m, got);
            check_floats(want, got, m, "decode_add (every code)", k->name, c, m, 0);
            s->decode_sum[c](src, src2, m, want);
            k->decode_sum[c](src, src2, m, got);
            check_floats(want, got, m, "decode_sum (every code)", k->name, c, m, 0);
            s->decode_sum[c](src2, src, m, want);
            k->decode_sum[c](src2, src, m, got);
            check_floats(want, got, m, "decode_sum (every code, swapped)", k->name, c, m, 0);
        }
    }
    free(h);
    free(blk);
    free(blk2);
    free(want);
    free(got);
    free(acc);
}

/* The rows' functions use the machine's kernels and name them; the scalar table is the
 * one every other is checked against, and it follows wire_scalar.h. */
static void test_scalar_is_definition(void **state)
{
    (void)state;
    float x[130];
    uint8_t e[3 * WIRE_BLOCK_BYTES];
    rng_state = 777;
    fill(SPECIALS, x, 130);
    wire_kernels_scalar.encode[WIRE_FP8](x, 130, e);
    for (size_t b = 0; b < 3; b++) {
        float scale;
        memcpy(&scale, e + b * WIRE_BLOCK_BYTES, 4);
        for (size_t i = 0; i < WIRE_BLOCK_ELEMS && b * 64 + i < 130; i++)
            assert_int_equal(e[b * WIRE_BLOCK_BYTES + 4 + i], wire_fp8_code(x[b * 64 + i], scale));
    }
    print_message("wire kernels in use: %s\n", wire_kernels_current()->name);
    assert_non_null(wire_kernels_find("scalar"));
    assert_null(wire_kernels_find("sse9"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_is_definition),
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_all_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
