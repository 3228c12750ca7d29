/* SPDX-License-Identifier: MIT */
/*
 * The shared segment's layout: sizes, offsets and cache-line placement of every struct
 * that ranks share, and the geometry arithmetic for 1..256 ranks.
 */
#include "shm/layout.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static void header(void **s)
{
    (void)s;
    assert_int_equal(sizeof(struct shm_header), 960);
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
    assert_int_equal(offsetof(struct shm_arrival, send), 24);
    assert_int_equal(offsetof(struct shm_arrival, addend_count), 48);
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
        assert_int_equal(g.off_staging % 4096, 0);
        assert_true(g.off_staging >= g.off_arrival + 2 * n * sizeof(struct shm_arrival));
        assert_int_equal(g.off_pool, g.off_staging + (uint64_t)n * 2 * slot);
        assert_int_equal(g.off_pool % 4096, 0);
        assert_int_equal(g.total_bytes, g.off_pool + (uint64_t)n * pool);
    }
}

static void seq_compare(void **s)
{
    (void)s;
    /* The wrap-aware comparison the arrival words use: (int32_t)(a - b) >= 0. */
    uint32_t pairs[][2] = {{5, 5}, {6, 5}, {0, 0xffffffffu}, {1, 0xfffffffeu}, {0x80000000u, 1}};
    for (size_t i = 0; i < 4; i++)
        assert_true((int32_t)(pairs[i][0] - pairs[i][1]) >= 0);
    assert_false((int32_t)(5u - 6u) >= 0);
    assert_false((int32_t)(0xffffffffu - 0u) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(header),   cmocka_unit_test(rank_record), cmocka_unit_test(arrival),
        cmocka_unit_test(geometry), cmocka_unit_test(seq_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
