/* SPDX-License-Identifier: MIT */
/*
 * Accumulator hand-off (the staged path's f16/bf16 results): acc_out holds the f32 sum
 * before rounding, and narrowing it later with an addend gives exactly what one call
 * with that addend gives — one rounding, on every ISA.
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(f16_all_isas),
                                       cmocka_unit_test(bf16_all_isas)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
