/*
 * The CUDA transport's host-side arithmetic, for 1 to 8 ranks (no GPU needed): region
 * geometry, kernel-path rounds and block slices, copy-path chunks and ring slots, the
 * call descriptor.  Every rank must compute the same numbers from the same call, and
 * together the pieces must cover every element exactly once, aligned for 16-byte access.
 */
#include "cuda/layout.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_struct_layout(void **state)
{
    (void)state;
    assert_int_equal(sizeof(struct cuda_fail_line), CUDA_LINE);
    assert_int_equal(sizeof(struct cuda_word_line), CUDA_LINE);
    assert_int_equal(sizeof(struct cuda_call_line), CUDA_LINE);
    assert_int_equal(sizeof(struct cuda_geom_line), CUDA_LINE);
    assert_int_equal(sizeof(struct cuda_token_line), CUDA_LINE);
    /* Round and descriptor travel in one 8-byte store. */
    assert_int_equal(offsetof(struct cuda_token_line, desc), 4);
    assert_int_equal(offsetof(struct cuda_ctrl, hfail), 0);
    assert_int_equal(offsetof(struct cuda_ctrl, dfail), 1 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, ready), 2 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, h2d), 3 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, kcons), 4 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, call), 5 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, geom), 6 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, token), 8 * CUDA_LINE);
    assert_true(sizeof(struct cuda_ctrl) <= CUDA_CTRL_BYTES);
    /* The kernels write the fail record with one 16-byte store. */
    assert_int_equal(offsetof(struct cuda_fail_line, seq), 12);
}

static void test_geometry(void **state)
{
    (void)state;
    static const uint64_t staging[] = {0, 1, 4u << 20, 16u << 20, 17u << 20, 256u << 20};
    static const uint64_t chunk[] = {0, 64, 512u << 10, 2u << 20, (3u << 20) + 5};
    for (size_t i = 0; i < sizeof(staging) / sizeof(staging[0]); i++) {
        for (size_t j = 0; j < sizeof(chunk) / sizeof(chunk[0]); j++) {
            struct cuda_geometry g = cuda_geometry_compute(staging[i], chunk[j]);
            assert_true(g.cslots >= 2);
            assert_int_equal(g.chunk_max % CUDA_LINE, 0);
            assert_true(g.chunk_max >= (chunk[j] ? chunk[j] : CUDA_CHUNK_MAX));
            /* Two shm slots per rank make a region: both page aligned. */
            assert_int_equal(g.region_bytes % (2 * CUDA_PAGE), 0);
            assert_true(g.off_kstage >= CUDA_CTRL_BYTES);
            assert_int_equal(g.off_cstage, g.off_kstage + CUDA_KSLOTS * g.kslot_bytes);
            assert_true(g.off_cstage + (uint64_t)g.cslots * g.chunk_max <= g.region_bytes);
            for (int nranks = 1; nranks <= 8; nranks++) {
                for (int r = 0; r < nranks; r++) {
                    /* Every rank's pieces stay inside its own region. */
                    uint64_t lo = cuda_region_off(&g, r), hi = lo + g.region_bytes;
                    for (uint32_t k = 0; k < 3 * g.cslots; k += g.cslots / 2 + 1) {
                        uint64_t o = cuda_cslot_off(&g, r, k);
                        assert_true(o >= lo + g.off_cstage && o + g.chunk_max <= hi);
                        assert_int_equal(o % CUDA_LINE, 0);
                    }
                    for (uint32_t t = 0; t < 4; t++) {
                        uint64_t o = cuda_kslot_off(&g, r, t);
                        assert_true(o >= lo + g.off_kstage &&
                                    o + g.kslot_bytes <= lo + g.off_cstage);
                        assert_int_equal(cuda_kslot_off(&g, r, t), cuda_kslot_off(&g, r, t + 2));
                        assert_true(cuda_kslot_off(&g, r, t) != cuda_kslot_off(&g, r, t + 1));
                    }
                }
            }
        }
    }
}

static void test_copy_chunk(void **state)
{
    (void)state;
    /* clamp(n / 4, 512 KiB, 2 MiB) unless the knob says otherwise. */
    assert_int_equal(cuda_copy_chunk(1u << 20, 0, 2u << 20), 512u << 10);
    assert_int_equal(cuda_copy_chunk(4u << 20, 0, 2u << 20), 1u << 20);
    assert_int_equal(cuda_copy_chunk(128u << 20, 0, 2u << 20), 2u << 20);
    assert_int_equal(cuda_copy_chunk(100, 0, 2u << 20), 512u << 10);
    assert_int_equal(cuda_copy_chunk(128u << 20, 64u << 10, 2u << 20), 64u << 10);
    assert_int_equal(cuda_copy_chunk(128u << 20, 8u << 20, 2u << 20), 2u << 20); /* slot cap */
    assert_int_equal(cuda_copy_chunk(128u << 20, 100, 2u << 20), 64);            /* 64 B cut */
    assert_int_equal(cuda_copy_chunk(128u << 20, 10, 2u << 20), 64);
}

/* Chunks cover [0, count) once, each within a slot, in 16-byte aligned pieces. */
static void test_copy_plan(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1, 7, 8, 9, 1000, 262144, 262147, 1048583, 33554432 + 5};
    static const uint32_t wsizes[] = {2, 4};
    static const uint64_t knobs[] = {0, 64u << 10, 1u << 20};
    for (size_t a = 0; a < sizeof(counts) / sizeof(counts[0]); a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 3; c++) {
                struct cuda_cplan p = cuda_cplan_compute(counts[a], wsizes[b], knobs[c], 2u << 20);
                assert_true(p.chunk_bytes <= 2u << 20);
                assert_int_equal(p.chunk_bytes % 16, 0);
                assert_int_equal(p.chunk_elems % CUDA_VEC_ELEMS, 0);
                assert_int_equal(p.chunk_bytes, p.chunk_elems * wsizes[b]);
                assert_true((uint64_t)(p.chunks - 1) * p.chunk_elems < counts[a]);
                assert_true((uint64_t)p.chunks * p.chunk_elems >= counts[a]);
            }
    assert_int_equal(cuda_cplan_compute(0, 4, 0, 2u << 20).chunks, 0);
}

/* Rounds and block slices cover every element once; slices start at multiples of 8. */
static void test_kernel_plan(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1,    2,     7,     8,      9,      33,      1000,
                                      4095, 16384, 65537, 262147, 524288, 1048583, 3000001};
    uint8_t *seen = malloc(3000001);
    for (size_t a = 0; a < sizeof(counts) / sizeof(counts[0]); a++) {
        for (uint32_t wsize = 2; wsize <= 4; wsize += 2) {
            for (uint32_t maxb = 1; maxb <= 128; maxb *= 4) {
                uint64_t n = counts[a];
                struct cuda_kplan p = cuda_kplan_compute(n, wsize, CUDA_KSLOT_BYTES, maxb);
                assert_true(p.blocks >= 1 && p.blocks <= CUDA_MAX_BLOCKS && p.blocks <= maxb);
                assert_true(p.round_elems * wsize <= CUDA_KSLOT_BYTES);
                assert_int_equal(p.round_elems % CUDA_VEC_ELEMS, 0);
                memset(seen, 0, n);
                for (uint32_t j = 0; j < p.rounds; j++) {
                    uint64_t rlo = (uint64_t)j * p.round_elems;
                    assert_true(rlo < n);
                    uint64_t rn = n - rlo < p.round_elems ? n - rlo : p.round_elems;
                    for (uint32_t b = 0; b < p.blocks; b++) {
                        uint64_t lo, hi;
                        cuda_block_slice(rn, p.blocks, b, &lo, &hi);
                        assert_true(lo <= hi && hi <= rn);
                        if (lo < hi) /* empty slices sit at the end */
                            assert_int_equal(lo % CUDA_VEC_ELEMS, 0);
                        for (uint64_t i = lo; i < hi; i++)
                            seen[rlo + i]++;
                    }
                }
                for (uint64_t i = 0; i < n; i++)
                    assert_int_equal(seen[i], 1);
            }
        }
    }
    free(seen);
}

/* What a rank waits for is what its peers publish: token and counter arithmetic as the
 * host and the kernels compute it, for N ranks over many calls. */
static void test_counters_n_ranks(void **state)
{
    (void)state;
    struct cuda_geometry g = cuda_geometry_compute(16u << 20, 2u << 20);
    for (int nranks = 2; nranks <= 8; nranks++) {
        uint64_t kround[8] = {0}, cchunk[8] = {0};
        static const uint64_t calls[] = {5, 262147, 1, 33554437, 4096, 16777216};
        for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++) {
            for (int r = 0; r < nranks; r++) {
                struct cuda_kplan kp = cuda_kplan_compute(calls[c], 4, g.kslot_bytes, 32);
                struct cuda_cplan cp = cuda_cplan_compute(calls[c], 4, 0, g.chunk_max);
                if (calls[c] * 4 >= (1u << 20))
                    cchunk[r] += cp.chunks;
                else
                    kround[r] += kp.rounds;
            }
            for (int r = 1; r < nranks; r++) {
                assert_int_equal(kround[r], kround[0]);
                assert_int_equal(cchunk[r], cchunk[0]);
            }
        }
        /* A slot is reused only once the chunk cslots earlier was fetched by all. */
        for (uint64_t gch = g.cslots; gch < 4 * g.cslots; gch++)
            assert_int_equal(cuda_cslot_off(&g, 1, (uint32_t)gch),
                             cuda_cslot_off(&g, 1, (uint32_t)(gch - g.cslots)));
    }
    /* Release values are far ahead of any wait and recognised as such. */
    uint32_t want = 0xfffffff0u, rel = want + CUDA_RELEASE;
    assert_true(CUDA_RELEASED(rel, want));
    assert_false(CUDA_RELEASED(want + 5, want));
    assert_true((int32_t)(rel - (want + 1000)) >= 0);
}

/* Sub-slot reuse: only a round cut like the one two rounds before, after a round with at
 * least as many blocks, may skip the wait for the peers' 'kcons'. */
static void test_kslot_reuse(void **state)
{
    (void)state;
    struct cuda_kshape none = {0, 0, 0};
    struct cuda_kshape a = {1000, 4, 2}, b = {1000, 4, 1}, big = {262144, 4, 64};
    struct cuda_kshape part = {5000, 4, 64}, h = {1000, 2, 2};
    assert_true(cuda_kslot_reuse_safe(a, none, none));
    assert_true(cuda_kslot_reuse_safe(a, a, a));
    assert_true(cuda_kslot_reuse_safe(b, b, a));
    assert_false(cuda_kslot_reuse_safe(a, a, b));        /* block 1 skipped round t - 1 */
    assert_false(cuda_kslot_reuse_safe(part, big, big)); /* last, partial round */
    assert_false(cuda_kslot_reuse_safe(h, a, a));        /* other wire size */
    assert_false(cuda_kslot_reuse_safe(a, b, b));
    /* Every element a block writes in round t it read in round t - 2 when 'safe'. */
    for (uint32_t blocks = 1; blocks <= 8; blocks++) {
        for (uint64_t m = 1; m < 300; m += 7) {
            struct cuda_kshape s = {m, 4, blocks};
            assert_true(cuda_kslot_reuse_safe(s, s, s));
        }
    }
}

static void test_call_desc(void **state)
{
    (void)state;
    uint32_t base = cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0);
    assert_true(base != 0);
    assert_int_equal(base, cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0));
    assert_true(base != cuda_call_desc(1008, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0));
    assert_true(base != cuda_call_desc(1000, 1, 0, CUDA_PATH_KERNEL, 0, 0, 0));
    assert_true(base != cuda_call_desc(1000, 0, 1, CUDA_PATH_KERNEL, 0, 0, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 1, 0, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 1, 1000));
    assert_true(cuda_call_desc(1000, 0, 0, 1, 0, 1, 10) != cuda_call_desc(1000, 0, 0, 1, 0, 1, 20));
    for (uint64_t n = 0; n < 100000; n++)
        assert_true(cuda_call_desc(n, 0, 0, 1, 0, 0, 0) != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_layout), cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_copy_chunk),    cmocka_unit_test(test_copy_plan),
        cmocka_unit_test(test_kernel_plan),   cmocka_unit_test(test_counters_n_ranks),
        cmocka_unit_test(test_call_desc),     cmocka_unit_test(test_kslot_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
