/* SPDX-License-Identifier: MIT */
/*
 * The shared segment's layout: sizes, offsets and cache-line placement of every struct
 * that ranks share, the geometry arithmetic for 1..256 ranks, and the wrap-aware
 * sequence comparison (shm_seq_reached) the arrival and completion words use.
 */
#include "shm/layout.h"
#include "shm/shm.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static void header(void **s)
{
    (void)s;
    assert_int_equal(sizeof(struct shm_header), 1344);
    assert_int_equal(offsetof(struct shm_header, choice), 960);
    assert_int_equal(offsetof(struct shm_header, magic), 0);
    assert_int_equal(offsetof(struct shm_header, off_arrival), 64);
    assert_int_equal(offsetof(struct shm_header, attached), 128);
    assert_int_equal(offsetof(struct shm_header, init_status), 132);
    assert_int_equal(offsetof(struct shm_header, bell), 192);
    assert_int_equal(offsetof(struct shm_header, sleepers), 196);
}

static void rank_record(void **s)
{
    (void)s;
    assert_int_equal(sizeof(struct shm_rank), 640);
    assert_int_equal(offsetof(struct shm_rank, claimed), 0);
    assert_int_equal(offsetof(struct shm_rank, start_time), 8);
    assert_int_equal(offsetof(struct shm_rank, progress), 64);
    assert_int_equal(offsetof(struct shm_rank, status), 72);
    assert_int_equal(offsetof(struct shm_rank, cpu), 80);
    assert_int_equal(offsetof(struct shm_rank, completed), 84);
    assert_int_equal(offsetof(struct shm_rank, root_kind), 96);
    assert_int_equal(offsetof(struct shm_rank, errmsg), 128);
    assert_int_equal(_Alignof(struct shm_rank), 64);
}

static void arrival(void **s)
{
    (void)s;
    assert_int_equal(sizeof(struct shm_arrival), 64);
    assert_int_equal(_Alignof(struct shm_arrival), 64);
    assert_int_equal(offsetof(struct shm_arrival, seq), 0);
    assert_int_equal(offsetof(struct shm_arrival, status), 4);
    assert_int_equal(offsetof(struct shm_arrival, count), 8);
    assert_int_equal(offsetof(struct shm_arrival, dtype), 16);
    assert_int_equal(offsetof(struct shm_arrival, flags), 20);
    assert_int_equal(offsetof(struct shm_arrival, root), 24);
    assert_int_equal(offsetof(struct shm_arrival, send), 32);
    assert_int_equal(offsetof(struct shm_arrival, addend_count), 56);
    /* An inline message takes the buffer fields' place, to the line's end. */
    assert_int_equal(offsetof(struct shm_arrival, data), 32);
    assert_int_equal(offsetof(struct shm_arrival, data) + SHM_INLINE_BYTES, 64);
    /* An eager entry: the call and 32 bytes of message on its first line, then whole
     * lines. */
    assert_int_equal(offsetof(struct shm_eager, data), 32);
    assert_int_equal(sizeof(struct shm_eager) % 64, 0);
    assert_true(sizeof(struct shm_eager) >= 32 + SHM_EAGER_BYTES);
}

static void geometry(void **s)
{
    (void)s;
    for (uint32_t n = 1; n <= 256; n++) {
        uint64_t slot = 1u << 20, pool = 64u << 20;
        struct shm_geometry g = shm_geometry_compute(n, slot, pool);
        assert_int_equal(g.off_ranks % 64, 0);
        assert_true(g.off_ranks >= sizeof(struct shm_header));
        assert_int_equal(g.off_arrival % 64, 0);
        assert_true(g.off_arrival >= g.off_ranks + n * sizeof(struct shm_rank));
        assert_int_equal(g.off_eager % 64, 0);
        assert_true(g.off_eager >= g.off_arrival + 2 * n * sizeof(struct shm_arrival));
        assert_int_equal(g.off_staging % 4096, 0);
        assert_true(g.off_staging >=
                    g.off_eager + n * SHM_EAGER_ENTRIES * sizeof(struct shm_eager));
        assert_int_equal(g.off_p2p, g.off_staging + (uint64_t)n * 2 * slot);
        /* The point-to-point region: n^2 channels and n stages, small at 256 ranks. */
        assert_int_equal(g.off_pool, shm_align_up(g.off_p2p + shm_p2p_region_bytes(n), 4096));
        assert_true(shm_p2p_region_bytes(n) >=
                    (uint64_t)n * n * shm_p2p_chan_stride(n) + 2ull * n * shm_p2p_chunk_bytes(n));
        assert_true(shm_p2p_region_bytes(n) <= (48ull << 20));
        assert_int_equal(g.off_pool % 4096, 0);
        assert_int_equal(g.total_bytes, g.off_pool + (uint64_t)n * pool);
    }
}

/*
 * shm_seq_reached(a, b): a is b or comes after it, on the 2^32 circle.  Each pair is
 * checked both ways; want_ab = reached(a, b), want_ba = reached(b, a).
 */
static void seq_compare(void **s)
{
    (void)s;
    static const struct {
        uint32_t a, b;
        bool want_ab, want_ba;
    } pairs[] = {
        {5, 5, true, true},                       /* equal */
        {0, 0, true, true},                       /* equal, at 0 */
        {0xffffffffu, 0xffffffffu, true, true},   /* equal, just before 2^32 */
        {6, 5, true, false},                      /* one ahead */
        {0, 0xffffffffu, true, false},            /* just after 2^32 and just before */
        {1, 0xfffffffeu, true, false},            /* across 2^32, 3 apart */
        {0x10u, 0xfffffff0u, true, false},        /* across 2^32, 32 apart */
        {0x80000000u, 0x7fffffffu, true, false},  /* across 2^31 (the sign bit) */
        {0x7fffffffu, 0, true, false},            /* the farthest ahead: 2^31 - 1 */
        {0x80000000u, 1, true, false},            /* 2^31 - 1 ahead */
        {0x7ffffffeu, 0xffffffffu, true, false},  /* 2^31 - 1 ahead, across 2^32 */
        {0x80000000u, 0, false, false},           /* exactly 2^31 apart: neither */
        {0xffffffffu, 0x7fffffffu, false, false}, /* exactly 2^31 apart: neither */
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        uint32_t a = pairs[i].a, b = pairs[i].b;
        bool ab = shm_seq_reached(a, b), ba = shm_seq_reached(b, a);
        if (ab != pairs[i].want_ab || ba != pairs[i].want_ba)
            fail_msg("pair %zu: shm_seq_reached(%#x, %#x) = %d (want %d), "
                     "shm_seq_reached(%#x, %#x) = %d (want %d)",
                     i, (unsigned)a, (unsigned)b, ab, pairs[i].want_ab, (unsigned)b, (unsigned)a,
                     ba, pairs[i].want_ba);
    }
    /* Every base near the edges, every distance up to half the circle: b + d has reached
     * b and b has not reached b + d (d > 0). */
    static const uint32_t bases[] = {
        0, 1, 5, 0x7ffffffeu, 0x7fffffffu, 0x80000000u, 0x80000001u, 0xfffffffeu, 0xffffffffu};
    static const uint32_t dists[] = {0, 1, 2, 1000, 0x7ffffffeu, 0x7fffffffu};
    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++)
        for (size_t j = 0; j < sizeof(dists) / sizeof(dists[0]); j++) {
            uint32_t b = bases[i], a = b + dists[j];
            if (!shm_seq_reached(a, b))
                fail_msg("shm_seq_reached(%#x, %#x): %#x ahead, not reached", (unsigned)a,
                         (unsigned)b, (unsigned)dists[j]);
            if (dists[j] != 0 && shm_seq_reached(b, a))
                fail_msg("shm_seq_reached(%#x, %#x): %#x behind, reached", (unsigned)b, (unsigned)a,
                         (unsigned)dists[j]);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(header),   cmocka_unit_test(rank_record), cmocka_unit_test(arrival),
        cmocka_unit_test(geometry), cmocka_unit_test(seq_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
