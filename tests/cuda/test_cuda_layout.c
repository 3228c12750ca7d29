/* SPDX-License-Identifier: MIT */
/*
 * The CUDA transport's host-side arithmetic, for 1 to 8 ranks (no GPU needed): region
 * geometry, kernel-path LL rounds and their thread mapping, copy-path chunks and ring slots, the
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
    /* An LL unit is one 16-byte store; each 8-byte half carries its own flag. */
    assert_int_equal(sizeof(struct cuda_ll_unit), CUDA_LL_UNIT);
    assert_int_equal(offsetof(struct cuda_ll_unit, f0), 4);
    assert_int_equal(offsetof(struct cuda_ll_unit, d1), 8);
    assert_int_equal(offsetof(struct cuda_ll_unit, f1), 12);
    assert_int_equal(CUDA_LL_UNIT - CUDA_LL_DATA, 8);
    assert_int_equal(offsetof(struct cuda_ctrl, hfail), 0);
    assert_int_equal(offsetof(struct cuda_ctrl, dfail), 1 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, ready), 2 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, h2d), 3 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, device), 4 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, call), 5 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_ctrl, geom), 6 * CUDA_LINE);
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
    /* clamp(n / 2, 512 KiB, 4 MiB) unless the knob says otherwise. */
    assert_int_equal(cuda_copy_chunk(1u << 20, 0, 4u << 20), 512u << 10);
    assert_int_equal(cuda_copy_chunk(4u << 20, 0, 4u << 20), 2u << 20);
    assert_int_equal(cuda_copy_chunk(8u << 20, 0, 4u << 20), 4u << 20);
    assert_int_equal(cuda_copy_chunk(128u << 20, 0, 4u << 20), 4u << 20);
    assert_int_equal(cuda_copy_chunk(100, 0, 4u << 20), 512u << 10);
    assert_int_equal(cuda_copy_chunk(128u << 20, 64u << 10, 4u << 20), 64u << 10);
    assert_int_equal(cuda_copy_chunk(128u << 20, 8u << 20, 4u << 20), 4u << 20); /* slot cap */
    assert_int_equal(cuda_copy_chunk(128u << 20, 100, 4u << 20), 64);            /* 64 B cut */
    assert_int_equal(cuda_copy_chunk(128u << 20, 10, 4u << 20), 64);
    /* A smaller slot (geometry from a small knob) caps the auto chunk too. */
    assert_int_equal(cuda_copy_chunk(128u << 20, 0, 2u << 20), 2u << 20);
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

/* A block codec's chunks (64 elements, 68 bytes a block): whole blocks, within a slot,
 * covering [0, count) once, whatever the knob (64 bytes still gets a block a chunk). */
static void test_copy_plan_blocks(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1, 63, 64, 65, 1000, 262147, 1048583, 33554432 + 5};
    static const uint64_t knobs[] = {0, 64, 100, 64u << 10, 1u << 20};
    for (size_t a = 0; a < sizeof(counts) / sizeof(counts[0]); a++)
        for (size_t c = 0; c < sizeof(knobs) / sizeof(knobs[0]); c++) {
            struct cuda_cplan p = cuda_cplan_blocks(counts[a], 64, 68, knobs[c], 2u << 20);
            uint64_t blocks = p.chunk_elems / 64;
            assert_true(blocks >= 1);
            assert_int_equal(p.chunk_elems % 64, 0);
            assert_int_equal(p.chunk_bytes, blocks * 68);
            assert_true(p.chunk_bytes <= 2u << 20);
            assert_true((uint64_t)(p.chunks - 1) * p.chunk_elems < counts[a]);
            assert_true((uint64_t)p.chunks * p.chunk_elems >= counts[a]);
            /* The chunks' bytes add up to the message's whole blocks. */
            uint64_t last = counts[a] - (uint64_t)(p.chunks - 1) * p.chunk_elems;
            assert_int_equal((uint64_t)(p.chunks - 1) * p.chunk_bytes + (last + 63) / 64 * 68,
                             (counts[a] + 63) / 64 * 68);
        }
    assert_int_equal(cuda_cplan_blocks(0, 64, 68, 0, 2u << 20).chunks, 0);
}

/*
 * LL rounds cover every element once and fit a sub-slot with their header; the launch of
 * a round maps every payload unit to exactly one (batch, slot, thread), and the thread
 * that sums a unit is the one that staged it (in place: it reads send before it writes
 * recv).
 */
static void test_kernel_plan(void **state)
{
    (void)state;
    static const uint64_t counts[] = {1,      2,      7,      8,       9,      33,
                                      1000,   4095,   16384,  65537,   131070, 131071,
                                      262140, 262147, 524288, 1048583, 3000001};
    uint8_t *seen = malloc(3000001);
    for (size_t a = 0; a < sizeof(counts) / sizeof(counts[0]); a++) {
        for (uint32_t wsize = 2; wsize <= 4; wsize += 2) {
            uint64_t n = counts[a];
            uint32_t epu = CUDA_LL_DATA / wsize;
            struct cuda_kplan p = cuda_kplan_compute(n, wsize, CUDA_KSLOT_BYTES);
            assert_int_equal(p.round_elems % epu, 0);
            assert_true((CUDA_LL_PAYLOAD0 + (uint64_t)cuda_ll_units(p.round_elems, wsize)) *
                            CUDA_LL_UNIT <=
                        CUDA_KSLOT_BYTES);
            assert_true((uint64_t)(p.rounds - 1) * p.round_elems < n);
            assert_true((uint64_t)p.rounds * p.round_elems >= n);
            memset(seen, 0, n);
            for (uint32_t j = 0; j < p.rounds; j++) {
                uint64_t rlo = (uint64_t)j * p.round_elems;
                uint64_t rn = n - rlo < p.round_elems ? n - rlo : p.round_elems;
                uint32_t units = cuda_ll_units(rn, wsize);
                assert_true((uint64_t)units * epu >= rn && (uint64_t)(units - 1) * epu < rn);
                for (uint64_t u = 0; u < units; u++)
                    for (uint32_t e = 0; e < epu && u * epu + e < rn; e++)
                        seen[rlo + u * epu + e]++;
            }
            for (uint64_t i = 0; i < n; i++)
                assert_int_equal(seen[i], 1);
        }
    }
    free(seen);

    static const uint32_t unit_counts[] = {1, 2, 255, 256, 511, 512, 513, 4096, 8191, 65535};
    static const uint32_t maxbs[] = {1, 3, 32, 128, 1000};
    for (size_t a = 0; a < sizeof(unit_counts) / sizeof(unit_counts[0]); a++) {
        uint32_t units = unit_counts[a];
        uint16_t *hits = calloc(units, sizeof(uint16_t));
        for (size_t m = 0; m < sizeof(maxbs) / sizeof(maxbs[0]); m++) {
            uint32_t blocks = cuda_ll_blocks(units, maxbs[m]);
            assert_true(blocks >= 1 && blocks <= CUDA_MAX_BLOCKS);
            /* Every block's header on a 128-byte line of its own, before the payload. */
            assert_true(cuda_ll_header(blocks - 1) + 1 <= CUDA_LL_PAYLOAD0);
            assert_int_equal(cuda_ll_header(1) * CUDA_LL_UNIT, 128);
            assert_true(blocks <= maxbs[m] || maxbs[m] > CUDA_MAX_BLOCKS);
            uint32_t nthreads = blocks * CUDA_LL_THREADS, per_batch = nthreads * CUDA_LL_UPT;
            uint32_t batches = (units + per_batch - 1) / per_batch;
            memset(hits, 0, units * sizeof(uint16_t));
            for (uint32_t k = 0; k < batches; k++)
                for (uint32_t i = 0; i < CUDA_LL_UPT; i++)
                    for (uint32_t t = 0; t < nthreads; t++) {
                        uint32_t u = k * per_batch + i * nthreads + t;
                        if (u >= units)
                            continue;
                        hits[u]++;
                        assert_int_equal(u % nthreads, t); /* the staging thread */
                    }
            for (uint32_t u = 0; u < units; u++)
                assert_int_equal(hits[u], 1);
        }
        free(hits);
    }
}

/* A round's flag differs from the flag of the round two before (which its sub-slot still
 * holds) and from zeroed memory, across the 32-bit wrap. */
static void test_ll_flag(void **state)
{
    (void)state;
    static const uint32_t rounds[] = {0,           1,           2,           3,          1000,
                                      0x7fffffffu, 0xfffffffdu, 0xfffffffeu, 0xffffffffu};
    for (size_t i = 0; i < sizeof(rounds) / sizeof(rounds[0]); i++) {
        uint32_t r = rounds[i];
        assert_true(cuda_ll_flag(r) != 0);
        assert_true(cuda_ll_flag(r) != cuda_ll_flag(r - 2));
        assert_true(cuda_ll_flag(r) != cuda_ll_flag(r - 4));
    }
}

/* What a rank waits for is what its peers publish: round and counter arithmetic as the
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
                struct cuda_kplan kp = cuda_kplan_compute(calls[c], 4, g.kslot_bytes);
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

static void test_call_desc(void **state)
{
    (void)state;
    uint32_t base = cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0, 1, 0);
    assert_true(base != 0);
    assert_int_equal(base, cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1008, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1000, 1, 0, CUDA_PATH_KERNEL, 0, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1000, 0, 1, CUDA_PATH_KERNEL, 0, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 1, 0, 0, 1, 0));
    assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 1, 1000, 1, 0));
    assert_true(cuda_call_desc(1000, 0, 0, 1, 0, 1, 10, 1, 0) !=
                cuda_call_desc(1000, 0, 0, 1, 0, 1, 20, 1, 0));
    /* The collective and the root are part of the call. */
    for (uint32_t kind = 2; kind <= 6; kind++)
        assert_true(base != cuda_call_desc(1000, 0, 0, CUDA_PATH_KERNEL, 0, 0, 0, kind, 0));
    uint32_t root0 = cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 2, 0);
    assert_true(root0 != cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 2, 1));
    assert_true(root0 != cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 3, 0));
    assert_true(cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 4, 0) !=
                cuda_call_desc(1000, 0, 0, CUDA_PATH_COPY, 0, 0, 0, 6, 0));
    for (uint64_t n = 0; n < 100000; n++)
        assert_true(cuda_call_desc(n, 0, 0, 1, 0, 0, 0, 1, 0) != 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_layout),    cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_copy_chunk),       cmocka_unit_test(test_copy_plan),
        cmocka_unit_test(test_copy_plan_blocks), cmocka_unit_test(test_kernel_plan),
        cmocka_unit_test(test_counters_n_ranks), cmocka_unit_test(test_call_desc),
        cmocka_unit_test(test_ll_flag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
