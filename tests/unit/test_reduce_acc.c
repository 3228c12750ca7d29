/* SPDX-License-Identifier: MIT */
/*
 * Accumulator hand-off (the staged path's f16/bf16 results): acc_out holds the f32 sum
 * before rounding, and narrowing it later with an addend gives exactly what one call
 * with that addend gives — one rounding, on every ISA.  The same for PROD (the f32
 * product) and AVG (the f32 sum already divided: narrowing it must not divide again).
 */
#include "reduce.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* An independent decode: f16 or bf16 bits to float. */
static float decode(uint16_t v, comm_dtype_t dt)
{
    if (dt == COMM_BF16) {
        uint32_t u = (uint32_t)v << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (v >> 10) & 0x1f, m = v & 0x3ff;
    float f = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(1024 + m), e - 25);
    return v & 0x8000 ? -f : f;
}

static void handoff(comm_dtype_t dt, const char *isa)
{
    enum { N = 5003, S = 3, ROW = 97 };
    static uint16_t in[S][N], out_one[N], out_two[N], addend[ROW];
    static float acc[N];
    for (int s = 0; s < S; s++)
        for (int i = 0; i < N; i++)
            in[s][i] = dt == COMM_F16 ? (uint16_t)((next() & 0x83ff) | (11 + next() % 8) << 10)
                                      : (uint16_t)((next() & 0x807f) | (123 + next() % 8) << 7);
    for (int i = 0; i < ROW; i++)
        addend[i] = in[0][i * 7];
    if (!coll_reduce_force_isa(isa))
        return; /* this machine lacks the ISA */
    const void *src[S] = {in[0], in[1], in[2]};
    void *d1[1] = {out_one};
    const void *add[1] = {addend};
    size_t offset = 41; /* the slice starts mid-row */
    struct coll_reduce_args one = {.dst = d1,
                                   .ndst = 1,
                                   .dst_dtype = dt,
                                   .src = src,
                                   .nsrc = S,
                                   .src_dtype = dt,
                                   .count = N,
                                   .op = COMM_SUM,
                                   .addend = add,
                                   .addend_count = ROW,
                                   .offset = offset};
    coll_reduce(&one);

    memset(acc, 0xff, sizeof(acc));
    uint16_t scratch[N];
    void *d2[1] = {scratch};
    struct coll_reduce_args first = {.dst = d2,
                                     .ndst = 1,
                                     .dst_dtype = dt,
                                     .src = src,
                                     .nsrc = S,
                                     .src_dtype = dt,
                                     .count = N,
                                     .op = COMM_SUM,
                                     .acc_out = acc};
    coll_reduce(&first);
    for (int i = 0; i < N; i++) {
        float want = decode(in[0][i], dt);
        want += decode(in[1][i], dt);
        want += decode(in[2][i], dt);
        assert_true(memcmp(&acc[i], &want, 4) == 0);
    }
    const void *asrc[1] = {acc};
    void *d3[1] = {out_two};
    struct coll_reduce_args second = {.dst = d3,
                                      .ndst = 1,
                                      .dst_dtype = dt,
                                      .src = asrc,
                                      .nsrc = 1,
                                      .src_dtype = COMM_F32,
                                      .count = N,
                                      .op = COMM_SUM,
                                      .addend = add,
                                      .addend_count = ROW,
                                      .offset = offset};
    coll_reduce(&second);
    assert_memory_equal(out_one, out_two, sizeof(out_one));
    coll_reduce_force_isa(NULL);
}

static void f16_all_isas(void **s)
{
    (void)s;
    handoff(COMM_F16, "generic");
    handoff(COMM_F16, "avx2");
    handoff(COMM_F16, "avx512");
}

static void bf16_all_isas(void **s)
{
    (void)s;
    handoff(COMM_BF16, "generic");
    handoff(COMM_BF16, "avx2");
    handoff(COMM_BF16, "avx512");
}

/*
 * PROD and AVG: acc_out holds the f32 product, or the f32 sum divided by avg_n; a peer
 * that narrows it (op SUM, as the staged path's gather does, or op AVG: no second
 * division) gets the bits of the single call.
 */
static void handoff_op(comm_dtype_t dt, comm_op_t op, int avg_n, const char *isa)
{
    enum { N = 4099, S = 3 };
    static uint16_t in[S][N], out_one[N], out_first[N], out_two[N], out_three[N];
    static float acc[N];
    for (int s = 0; s < S; s++)
        for (int i = 0; i < N; i++) /* exponents near 1 for PROD, wider for AVG */
            in[s][i] = dt == COMM_F16 ? (uint16_t)((next() & 0x83ff) |
                                                   (14 + next() % (op == COMM_PROD ? 2 : 6)) << 10)
                                      : (uint16_t)((next() & 0x807f) |
                                                   (126 + next() % (op == COMM_PROD ? 2 : 6)) << 7);
    if (!coll_reduce_force_isa(isa))
        return;
    const void *src[S] = {in[0], in[1], in[2]};
    void *d1[1] = {out_one}, *d2[1] = {out_first};
    struct coll_reduce_args one = {.dst = d1,
                                   .ndst = 1,
                                   .dst_dtype = dt,
                                   .src = src,
                                   .nsrc = S,
                                   .src_dtype = dt,
                                   .count = N,
                                   .op = op,
                                   .avg_n = avg_n};
    coll_reduce(&one);
    memset(acc, 0xff, sizeof(acc));
    struct coll_reduce_args first = one;
    first.dst = d2;
    first.acc_out = acc;
    coll_reduce(&first);
    assert_memory_equal(out_one, out_first, sizeof(out_one));
    for (int i = 0; i < N; i++) {
        float want = decode(in[0][i], dt);
        if (op == COMM_PROD) {
            want *= decode(in[1][i], dt);
            want *= decode(in[2][i], dt);
        } else {
            want += decode(in[1][i], dt);
            want += decode(in[2][i], dt);
            want /= (float)(avg_n ? avg_n : S);
        }
        if (memcmp(&acc[i], &want, 4) != 0)
            fail_msg("%s op %d element %d: acc_out %a, want %a", isa, (int)op, i, (double)acc[i],
                     (double)want);
    }
    const void *asrc[1] = {acc};
    void *d3[1] = {out_two}, *d4[1] = {out_three};
    struct coll_reduce_args second = {.dst = d3,
                                      .ndst = 1,
                                      .dst_dtype = dt,
                                      .src = asrc,
                                      .nsrc = 1,
                                      .src_dtype = COMM_F32,
                                      .count = N,
                                      .op = COMM_SUM};
    coll_reduce(&second);
    assert_memory_equal(out_one, out_two, sizeof(out_one));
    second.dst = d4;
    second.op = op;
    second.avg_n = 7; /* ignored: accumulators are only narrowed */
    coll_reduce(&second);
    assert_memory_equal(out_one, out_three, sizeof(out_one));
    coll_reduce_force_isa(NULL);
}

static void prod_avg_all_isas(void **s)
{
    static const char *const isas[] = {"generic", "avx2", "avx512"};
    (void)s;
    for (int t = 0; t < 3; t++) {
        for (int d = 0; d < 2; d++) {
            comm_dtype_t dt = d ? COMM_BF16 : COMM_F16;
            handoff_op(dt, COMM_PROD, 0, isas[t]);
            handoff_op(dt, COMM_AVG, 0, isas[t]);
            handoff_op(dt, COMM_AVG, 5, isas[t]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(f16_all_isas),
                                       cmocka_unit_test(bf16_all_isas),
                                       cmocka_unit_test(prod_avg_all_isas)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
