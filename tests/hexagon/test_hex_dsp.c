/* SPDX-License-Identifier: MIT */
/*
 * The DSP side under the host emulation, below the communicator: the DMA queue's FIFO
 * semantics, f16 conversions against the host library's, the per-call parameters, and
 * op_allreduce run concurrently by emulated sessions (threads, multithreaded workers)
 * on padded 2D rows, which the public API cannot express.
 */
#include "emu/hex_emu.h"
#include "hex_f16.h"
#include "hex_op.h"
#include "hexagon/hex_params.h"
#include "reduce.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_dma_queue(void **state)
{
    (void)state;
    struct hex_dma_queue q;
    assert_true(hex_dma_init(&q, 8));
    uint8_t src[64], dst[64], dst2[16];
    for (int i = 0; i < 64; i++)
        src[i] = (uint8_t)i;
    memset(dst, 0xee, sizeof(dst));
    memset(dst2, 0xee, sizeof(dst2));
    /* 2D: 3 rows of 4 bytes, source stride 10, destination stride 5. */
    assert_true(hex_dma_push(&q, dst, src, 5, 10, 4, 3));
    assert_true(hex_dma_push_placeholder(&q));
    assert_true(hex_dma_push_1d(&q, dst2, src + 40, 8));
    assert_int_equal(hex_dma_depth(&q), 3);
    /* Nothing lands before its descriptor is popped. */
    assert_int_equal(dst[0], 0xee);
    struct hex_dma_ptr p = hex_dma_pop(&q);
    assert_ptr_equal(p.dst, dst);
    assert_ptr_equal(p.src, src);
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++)
            assert_int_equal(dst[r * 5 + i], r * 10 + i);
        assert_int_equal(dst[r * 5 + 4], 0xee); /* the gap between rows is untouched */
    }
    assert_int_equal(dst2[0], 0xee);
    p = hex_dma_pop(&q); /* the placeholder */
    assert_null(p.dst);
    hex_dma_flush(&q);
    assert_int_equal(dst2[7], 47);
    assert_int_equal(dst2[8], 0xee);
    p = hex_dma_pop(&q);
    assert_null(p.dst);
    /* Full at capacity - 1. */
    for (int i = 0; i < 7; i++)
        assert_true(hex_dma_push_placeholder(&q));
    assert_false(hex_dma_push_placeholder(&q));
    hex_dma_flush(&q);
    assert_int_equal(hex_dma_depth(&q), 0);
    assert_false(hex_dma_init(&q, HEX_DMA_MAX_CAPACITY + 1));
}

static void test_f16(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float a = hex_f16_to_f32((uint16_t)h), b = coll_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            assert_true(a != a && b != b);
        else
            assert_memory_equal(&a, &b, 4);
    }
    uint64_t st = 88172645463325252ull;
    for (int i = 0; i < 1000000; i++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        uint32_t bits = (uint32_t)st;
        float f;
        memcpy(&f, &bits, 4);
        if (f != f)
            continue;
        assert_int_equal(hex_f32_to_f16(f), coll_f32_to_f16(f));
    }
}

static void test_params(void **state)
{
    (void)state;
    for (uint32_t n = 1; n <= 4; n++) {
        static const uint64_t sizes[] = {1, 3, 127, 128, 129, 1000, 65536 * 9 + 5};
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            uint64_t next = 0;
            for (uint32_t r = 0; r < n; r++) {
                struct hex_params_in in = {.n_ranks = n,
                                           .rank = r,
                                           .dtype = HEX_F16,
                                           .ne0 = sizes[s],
                                           .ne1 = 1,
                                           .session_threads = 4,
                                           .vtcm_bytes = 8u << 20};
                struct hex_op_params p;
                assert_int_equal(hex_params_compute(&in, &p), HEX_OK);
                /* Slices tile the tensor in order, cut at 128 elements. */
                assert_int_equal(p.col_lo, next);
                assert_true(p.col_lo % 128 == 0 || p.col_lo == sizes[s]);
                next = p.col_hi;
                uint32_t slice = p.col_hi - p.col_lo;
                uint32_t t = slice / 128 < 1 ? 1 : slice / 128 > 4 ? 4 : slice / 128;
                assert_int_equal(p.n_threads, t);
                assert_true(p.block_elems % 128 == 0 && p.block_elems >= 128 &&
                            p.block_elems <= 65536);
                assert_true(p.vtcm_bytes <= 8u << 20);
            }
            assert_int_equal(next, sizes[s]);
        }
    }
    /* 2D: rows split ceil(ne1 / n); too little VTCM fails with what it needs. */
    struct hex_params_in in = {.n_ranks = 3,
                               .rank = 2,
                               .dtype = HEX_F32,
                               .ne0 = 10,
                               .ne1 = 7,
                               .layout_2d = 1,
                               .src_stride = 64,
                               .dst_stride = 48,
                               .add_mode = HEX_ADD_BCAST,
                               .session_threads = 2,
                               .vtcm_bytes = 8u << 20};
    struct hex_op_params p;
    assert_int_equal(hex_params_compute(&in, &p), HEX_OK);
    assert_int_equal(p.row_lo, 6);
    assert_int_equal(p.row_hi, 7);
    assert_int_equal(p.src_stride, 64);
    in.vtcm_bytes = 1024;
    assert_int_equal(hex_params_compute(&in, &p), HEX_ERR_NOMEM);
    assert_true(p.vtcm_bytes > 1024);
    in.src_stride = 8; /* shorter than a row */
    assert_int_equal(hex_params_compute(&in, &p), HEX_ERR_INVALID);
}

/* Concurrent sessions on padded rows: the op as the transport runs it, minus the API. */
#define NR     3
#define NE0    300
#define NE1    11
#define PAD    20
#define STRIDE ((NE0 + PAD) * 4)

struct shared {
    float *src[NR], *dst[NR], *add[NR];
    struct hex_fence_slot *fence[NR];
    uint32_t add_mode;
    int32_t status[NR];
};

struct sess_arg {
    struct shared *sh;
    uint32_t rank;
};

static void *session_main(void *p)
{
    struct sess_arg *a = p;
    struct shared *sh = a->sh;
    struct hex_session *s;
    if (hex_emu_session_create(3, 64 * 1024, &s) != 0) {
        sh->status[a->rank] = -100;
        return NULL;
    }
    struct hex_params_in in = {.n_ranks = NR,
                               .rank = a->rank,
                               .dtype = HEX_F32,
                               .ne0 = NE0,
                               .ne1 = NE1,
                               .layout_2d = 1,
                               .src_stride = STRIDE,
                               .dst_stride = STRIDE,
                               .add_stride = STRIDE,
                               .add_mode = sh->add_mode,
                               .session_threads = 3,
                               .vtcm_bytes = 64 * 1024};
    struct hex_op_args args;
    memset(&args, 0, sizeof(args));
    sh->status[a->rank] = hex_params_compute(&in, &args.p);
    if (sh->status[a->rank] == HEX_OK) {
        for (int k = 0; k < NR; k++) {
            args.src[k] = (const uint8_t *)sh->src[k];
            args.dst[k] = (uint8_t *)sh->dst[k];
            args.addend[k] = sh->add_mode ? (const uint8_t *)sh->add[k] : NULL;
            args.fence[k] = sh->fence[k];
        }
        args.seq_entry = 41;
        args.seq_exit = 42;
        args.timeout_ms = 10000;
        struct hex_op_result r;
        hex_op_allreduce(s, &args, &r);
        sh->status[a->rank] = r.status;
    }
    hex_emu_session_destroy(s);
    return NULL;
}

static void run_sessions(uint32_t add_mode)
{
    struct shared sh = {.add_mode = add_mode};
    static struct hex_fence_slot fences[NR][HEX_FENCE_SLOTS];
    memset(fences, 0, sizeof(fences));
    size_t bytes = (size_t)STRIDE * NE1;
    for (int k = 0; k < NR; k++) {
        sh.src[k] = aligned_alloc(128, bytes);
        sh.dst[k] = aligned_alloc(128, bytes);
        sh.add[k] = aligned_alloc(128, bytes);
        for (size_t i = 0; i < bytes / 4; i++) {
            sh.src[k][i] = (float)((i * 7 + (size_t)k * 13) % 1000) * 0.001953125f - 0.9f;
            sh.add[k][i] = (float)((i * 3 + (size_t)k) % 17) - 8.0f;
        }
        memset(sh.dst[k], 0xff, bytes);
        sh.fence[k] = &fences[k][HEX_FENCE_SLOT_CALL];
    }
    pthread_t th[NR];
    struct sess_arg args[NR];
    for (uint32_t r = 0; r < NR; r++) {
        args[r] = (struct sess_arg){.sh = &sh, .rank = r};
        assert_int_equal(pthread_create(&th[r], NULL, session_main, &args[r]), 0);
    }
    for (int r = 0; r < NR; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < NR; r++) {
        assert_int_equal(sh.status[r], HEX_OK);
        assert_int_equal(fences[r][HEX_FENCE_SLOT_CALL].seq, 42);
    }
    for (int j = 0; j < NR; j++)
        for (int row = 0; row < NE1; row++)
            for (int i = 0; i < NE0 + PAD; i++) {
                size_t e = (size_t)row * (NE0 + PAD) + (size_t)i;
                uint32_t got;
                memcpy(&got, &sh.dst[j][e], 4);
                if (i >= NE0) {
                    assert_int_equal(got, 0xffffffffu); /* padding stays poisoned */
                    continue;
                }
                float acc = sh.src[0][e] + sh.src[1][e];
                acc += sh.src[2][e];
                if (add_mode == HEX_ADD_RESIDUAL)
                    acc += sh.add[j][e];
                else if (add_mode == HEX_ADD_BCAST)
                    acc += sh.add[j][i];
                assert_memory_equal(&acc, &sh.dst[j][e], 4);
            }
    for (int k = 0; k < NR; k++) {
        free(sh.src[k]);
        free(sh.dst[k]);
        free(sh.add[k]);
    }
}

static void test_sessions_padded_rows(void **state)
{
    (void)state;
    run_sessions(HEX_ADD_NONE);
    run_sessions(HEX_ADD_RESIDUAL);
    run_sessions(HEX_ADD_BCAST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dma_queue),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_sessions_padded_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
