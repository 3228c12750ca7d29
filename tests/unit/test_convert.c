/* SPDX-License-Identifier: MIT */
/*
 * f16/bf16 <-> f32 conversions: the scalar ones against references computed another
 * way (exact double arithmetic: ldexp, frexp and nearbyint in the default round to
 * nearest even mode), and the vector ones of every instruction set this machine has
 * (F16C, AVX-512, integer bf16 rounding) against the scalar ones, bit for bit.
 */
#include "reduce.h"
#include "reduce_isa.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NRANDOM (16u << 20) /* random f32 bit patterns per conversion */
#define CHUNK   (1u << 20)

static const char *const isas[] = {"generic", "avx2", "avx512"};
static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rng32(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f16 -> value, from the definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m. */
static double ref_f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

/*
 * f32 -> f16 with double arithmetic: scale so the kept bits are the integer part,
 * nearbyint (round half to even), scale back, then encode.  NaNs: the documented rule.
 */
static uint16_t ref_f32_to_f16(float f)
{
    uint32_t x = f_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    double a = fabs((double)f), q, r;
    int e;

    if (isnan(f))
        return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x3ff);
    if (isinf(f))
        return sign | 0x7c00;
    if (a < 0x1p-14) /* subnormal range: units of 2^-24; 1024 units is 0x0400, min normal */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    frexp(a, &e); /* a in [2^(e-1), 2^e): 11 significant bits are units of 2^(e-11) */
    q = nearbyint(ldexp(a, 11 - e));
    r = ldexp(q, e - 11);
    if (r > 65504.0)
        return sign | 0x7c00;
    frexp(r, &e);
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(r, 11 - e) - 1024);
}

/* f32 -> bf16 the same way: 8 significant bits, f32's exponent range. */
static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t x = f_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    double a = fabs((double)f), q, r;
    int e;

    if (isnan(f))
        return (uint16_t)((x >> 16) | 0x0040);
    if (isinf(f))
        return sign | 0x7f80;
    if (a < 0x1p-126) /* units of 2^-133; 128 units is 0x0080, min normal */
        return sign | (uint16_t)nearbyint(a * 0x1p133);
    frexp(a, &e);
    q = nearbyint(ldexp(a, 8 - e));
    r = ldexp(q, e - 8);
    if (r >= 0x1p128)
        return sign | 0x7f80;
    frexp(r, &e);
    return sign | (uint16_t)((e - 1 + 127) << 7) | (uint16_t)(ldexp(r, 8 - e) - 128);
}

/* Every f16 pattern: exact widening, and narrowing back gives the pattern again. */
static void test_f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = coll_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;

        if (e == 0x1f && m != 0) {
            /* NaN: payload kept, made quiet (as vcvtph2ps) */
            uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000 | (m << 13);
            assert_int_equal(f_bits(f), want);
            assert_int_equal(coll_f32_to_f16(f), h | 0x0200);
        } else if (e == 0x1f) {
            assert_true(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
            assert_int_equal(coll_f32_to_f16(f), h);
        } else {
            assert_true((double)f == ref_f16_value((uint16_t)h));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
            assert_int_equal(coll_f32_to_f16(f), h);
        }
    }
}

static void check_f16(float f)
{
    uint16_t got = coll_f32_to_f16(f), want = ref_f32_to_f16(f);

    if (got != want)
        fail_msg("f32 %08x -> f16 %04x, reference %04x", f_bits(f), got, want);
}

static void check_bf16(float f)
{
    uint16_t got = coll_f32_to_bf16_1(f), want = ref_f32_to_bf16(f);

    if (got != want)
        fail_msg("f32 %08x -> bf16 %04x, reference %04x", f_bits(f), got, want);
}

static const uint32_t edges[] = {
    0x00000000, 0x00000001, 0x00000002, 0x007fffff, 0x00800000, 0x00800001, 0x33000000, 0x33000001,
    0x337fffff, 0x33800000, 0x33c00000, 0x34000000, 0x387fc000, 0x387fe000, 0x387fefff, 0x387ff000,
    0x38800000, 0x3f800000, 0x3f801000, 0x3f802000, 0x3f808000, 0x3f818000, 0x477fe000, 0x477fefff,
    0x477ff000, 0x477ff001, 0x47800000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0x7f800000, 0x7f800001,
    0x7f802000, 0x7fbfffff, 0x7fc00000, 0x7fffffff, 0x7f80ffff, 0x7f810000,
};

/*
 * Values at, just below and just above every rounding tie: for each f16 (bf16) value
 * v, the f32 midpoint between v and its successor, and its neighbours.
 */
static void test_f32_to_f16(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        check_f16(bits_f(edges[i]));
        check_f16(bits_f(edges[i] | 0x80000000u));
    }
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float lo = coll_f16_to_f32((uint16_t)h), hi = coll_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)lo + (double)hi) / 2); /* exact: f32 has the bits */
        uint32_t mb = f_bits(mid);
        for (uint32_t d = 0; d < 3; d++) {
            check_f16(bits_f(mb + d - 1));
            check_f16(-bits_f(mb + d - 1));
        }
        check_f16(lo);
    }
    for (uint32_t i = 0; i < NRANDOM; i++)
        check_f16(bits_f(rng32()));
}

static void test_f32_to_bf16(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        check_bf16(bits_f(edges[i]));
        check_bf16(bits_f(edges[i] | 0x80000000u));
    }
    for (uint32_t b = 0; b < 0x7f80; b++) {
        uint32_t mid = (b << 16) | 0x8000;
        for (uint32_t d = 0; d < 3; d++) {
            check_bf16(bits_f(mid + d - 1));
            check_bf16(bits_f((mid + d - 1) | 0x80000000u));
        }
        assert_true(coll_bf16_to_f32((uint16_t)b) == bits_f(b << 16));
    }
    for (uint32_t i = 0; i < NRANDOM; i++)
        check_bf16(bits_f(rng32()));
}

/* Random patterns, the edges, and the ties of both formats, for the vector checks. */
static float *pattern_array(size_t *count)
{
    size_t n = 0, cap = CHUNK + 2 * 65536 * 3 + 256;
    float *f = malloc(cap * sizeof(*f));

    assert_non_null(f);
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        f[n++] = bits_f(edges[i]);
        f[n++] = bits_f(edges[i] | 0x80000000u);
    }
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = coll_f16_to_f32((uint16_t)h), hi = coll_f16_to_f32((uint16_t)(h + 1));
        uint32_t mb = f_bits((float)((lo + hi) / 2));
        for (uint32_t d = 0; d < 3; d++)
            f[n++] = bits_f((mb + d - 1) ^ (d == 1 ? 0x80000000u : 0));
    }
    for (uint32_t b = 0; b < 0x7f80; b++) {
        for (uint32_t d = 0; d < 3; d++)
            f[n++] = bits_f((((b << 16) | 0x8000) + d - 1) ^ (d == 2 ? 0x80000000u : 0));
    }
    while (n < cap)
        f[n++] = bits_f(rng32());
    *count = n;
    return f;
}

/* Vector f32 -> f16 / bf16 narrowing and bf16 rounding of every ISA vs the scalar. */
static void test_vector_narrow(void **state)
{
    size_t n;
    float *f = pattern_array(&n);
    uint16_t *h = malloc(n * 2 + 2), *b = malloc(n * 2 + 2);
    float *r = malloc(n * 4 + 4);
    const void *src[1];

    (void)state;
    assert_non_null(h);
    assert_non_null(b);
    assert_non_null(r);
    for (size_t t = 0; t < sizeof(isas) / sizeof(isas[0]); t++) {
        const struct coll_reduce_ops *ops = coll_reduce_ops_find(isas[t]);
        if (!ops)
            continue;
        for (int shift = 0; shift < 2; shift++) { /* aligned, then one element off */
            memset(h, 0xa5, n * 2 + 2);
            memset(b, 0xa5, n * 2 + 2);
            ops->emit_f32(h + shift, COMM_F16, f, NULL, n, shift == 1);
            ops->emit_f32(b + shift, COMM_BF16, f, NULL, n, shift == 0);
            src[0] = f;
            ops->reduce_f32(r, src, 1, COLL_RD_F32_BF16, COMM_SUM, 0, n);
            if (ops->fence)
                ops->fence();
            for (size_t i = 0; i < n; i++) {
                if (h[i + shift] != coll_f32_to_f16(f[i]))
                    fail_msg("%s: f32 %08x -> f16 %04x, scalar %04x", isas[t], f_bits(f[i]),
                             h[i + shift], coll_f32_to_f16(f[i]));
                if (b[i + shift] != coll_f32_to_bf16_1(f[i]))
                    fail_msg("%s: f32 %08x -> bf16 %04x, scalar %04x", isas[t], f_bits(f[i]),
                             b[i + shift], coll_f32_to_bf16_1(f[i]));
                assert_int_equal(f_bits(r[i]), (uint32_t)coll_f32_to_bf16_1(f[i]) << 16);
            }
        }
        /* the public array conversion, under this ISA */
        assert_true(coll_reduce_force_isa(isas[t]));
        coll_f32_to_bf16(b, f, n);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(b[i], coll_f32_to_bf16_1(f[i]));
    }
    coll_reduce_force_isa(NULL);
    free(f);
    free(h);
    free(b);
    free(r);
}

/* Vector f16 -> f32 and bf16 -> f32 widening of every ISA, all 65536 patterns. */
static void test_vector_widen(void **state)
{
    uint16_t *h = malloc(65537 * 2);
    float *out = malloc(65537 * 4);
    const void *src[1];

    (void)state;
    assert_non_null(h);
    assert_non_null(out);
    for (uint32_t i = 0; i < 65536; i++)
        h[i + 1] = (uint16_t)i;
    for (size_t t = 0; t < sizeof(isas) / sizeof(isas[0]); t++) {
        const struct coll_reduce_ops *ops = coll_reduce_ops_find(isas[t]);
        if (!ops)
            continue;
        for (int shift = 0; shift < 2; shift++) {
            src[0] = h + 1 - shift;
            ops->reduce_f32(out, src, 1, COLL_RD_F16, COMM_SUM, shift, 65536);
            for (uint32_t i = 0; i < 65536; i++)
                assert_int_equal(f_bits(out[i]), f_bits(coll_f16_to_f32((uint16_t)i)));
            ops->reduce_f32(out, src, 1, COLL_RD_BF16, COMM_MAX, shift, 65536);
            for (uint32_t i = 0; i < 65536; i++)
                assert_int_equal(f_bits(out[i]), i << 16);
        }
    }
    free(h);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_exhaustive), cmocka_unit_test(test_f32_to_f16),
        cmocka_unit_test(test_f32_to_bf16),    cmocka_unit_test(test_vector_narrow),
        cmocka_unit_test(test_vector_widen),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
