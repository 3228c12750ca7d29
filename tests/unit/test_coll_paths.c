/* SPDX-License-Identifier: MIT */
/*
 * The host path choice of every collective (coll_host_path, the formula the library and
 * arinfo share): the flag path while what a rank stages fits the flag threshold (its
 * block for broadcast, reduce and allgather, its nranks blocks for reduce_scatter and
 * alltoall), allreduce exactly as coll_host_path_name, "off" never; and which buffers a
 * rank uses of each call (coll_call_shape, the rule validation and the paths share);
 * ARCOMM_CMA_THRESHOLD=auto's windows on hosts where the single copy is slow (this
 * process skips its calibration) and fast, and the rule that reads the calibration.
 */
#include "shm/cma_calibrate.h"
#include "coll.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static struct rt_knobs knobs_with(size_t flag_threshold)
{
    struct rt_knobs k;
    memset(&k, 0, sizeof(k));
    k.flag_threshold = flag_threshold;
    return k;
}

static void flag_threshold_per_collective(void **s)
{
    (void)s;
    struct rt_knobs k = knobs_with(4096);
    for (int n = 1; n <= 8; n++) {
        for (int kind = COLL_ALLREDUCE; kind < COLL_BARRIER; kind++) {
            bool blocks = kind == COLL_REDUCE_SCATTER || kind == COLL_ALLTOALL;
            size_t last = blocks ? 4096 / (size_t)n : 4096; /* the largest flag size */
            assert_string_equal(coll_host_path(kind, &k, 0, n), "flag");
            assert_string_equal(coll_host_path(kind, &k, last, n), "flag");
            assert_string_equal(coll_host_path(kind, &k, last + 1, n), "bulk");
            assert_int_equal(coll_host_kind_flag(kind, &k, last + 1, n), false);
        }
        assert_string_equal(coll_host_path(COLL_ALLREDUCE, &k, 4096, n),
                            coll_host_path_name(&k, 4096));
        assert_string_equal(coll_host_path(COLL_ALLREDUCE, &k, 4097, n),
                            coll_host_path_name(&k, 4097));
    }
    struct rt_knobs off = knobs_with(RT_SIZE_OFF);
    for (int kind = COLL_ALLREDUCE; kind < COLL_BARRIER; kind++)
        assert_string_equal(coll_host_path(kind, &off, 0, 2), "bulk");
}

/* ARCOMM_CMA_THRESHOLD: auto leaves the flag path only in its measured windows (2
 * process ranks), off and a number never change the flag path; a number sends every
 * bulk call at or above it through CMA. */
static void cma_windows(void **s)
{
    (void)s;
    /* The windows of every host (fast = false: the ranks did not all find the single
     * copy fast). */
    struct rt_knobs k = knobs_with(1u << 20);
    k.cma_threshold = RT_SIZE_AUTO;
    size_t mib = 1u << 20;
    assert_string_equal(coll_host_path(COLL_BROADCAST, &k, mib, 2), "flag");
    assert_string_equal(coll_host_path(COLL_ALLGATHER, &k, mib, 2), "bulk");
    assert_string_equal(coll_host_path(COLL_ALLREDUCE, &k, mib, 2), "flag");
    assert_string_equal(coll_host_path(COLL_ALLREDUCE, &k, mib, 2), coll_host_path_name(&k, mib));
    assert_string_equal(coll_host_path(COLL_REDUCE, &k, mib, 2), "flag");
    assert_string_equal(coll_host_path(COLL_BROADCAST, &k, mib / 2, 2), "flag");
    assert_string_equal(coll_host_path(COLL_ALLTOALL, &k, mib / 2, 2), "flag");
    assert_string_equal(coll_host_path(COLL_REDUCE_SCATTER, &k, mib / 2, 2), "flag");
    assert_false(coll_host_cma_size(COLL_BROADCAST, &k, mib, 2, false));
    assert_false(coll_host_cma_size(COLL_BROADCAST, &k, 8 * mib, 2, false));
    assert_true(coll_host_cma_size(COLL_ALLGATHER, &k, 4 * mib, 2, false));
    assert_false(coll_host_cma_size(COLL_ALLREDUCE, &k, 4 * mib, 2, false));
    assert_false(coll_host_cma_size(COLL_ALLTOALL, &k, 4 * mib, 2, false));
    for (int n = 3; n <= 4; n++)
        for (int kind = COLL_ALLREDUCE; kind < COLL_BARRIER; kind++) {
            assert_string_equal(coll_host_path(kind, &k, 1024, n), "flag");
            assert_false(coll_host_cma_size(kind, &k, 4 * mib, n, false));
            assert_false(coll_host_cma_size(kind, &k, 4 * mib, n, true));
        }
    /* Where they did: the wider windows, for bulk calls (the flag path stays). */
    assert_true(coll_host_cma_size(COLL_BROADCAST, &k, mib, 2, true));
    assert_string_equal(coll_host_path(COLL_BROADCAST, &k, mib, 2), "flag");
    assert_true(coll_host_cma_size(COLL_ALLREDUCE, &k, 16 * mib, 2, true));
    assert_false(coll_host_cma_size(COLL_ALLREDUCE, &k, 32 * mib, 2, true));
    assert_false(coll_host_cma_size(COLL_REDUCE, &k, 16 * mib, 2, true));
    assert_true(coll_host_cma_size(COLL_ALLTOALL, &k, 64 * mib, 2, true));
    assert_true(coll_host_cma_size(COLL_ALLGATHER, &k, 64 * mib, 2, true));
    k.cma_threshold = RT_SIZE_OFF;
    for (int kind = COLL_ALLREDUCE; kind < COLL_BARRIER; kind++) {
        assert_string_equal(coll_host_path(kind, &k, 1024, 2), "flag");
        assert_false(coll_host_cma_size(kind, &k, 64 * mib, 2, false));
        assert_false(coll_host_cma_size(kind, &k, 64 * mib, 2, true));
    }
    k.cma_threshold = 65536;
    assert_string_equal(coll_host_path(COLL_BROADCAST, &k, mib, 2), "flag");
    assert_true(coll_host_cma_size(COLL_ALLTOALL, &k, 65536, 4, false));
    assert_false(coll_host_cma_size(COLL_ALLTOALL, &k, 65535, 4, true));
}

/* What each rank says at join: ARCOMM_CMA_FAST where set, else its calibration (skipped
 * in this process: slow). */
static void cma_fast_here(void **s)
{
    (void)s;
    shm_cma_calibration_skip();
    assert_int_equal(shm_cma_calibration()->outcome, SHM_CMA_SKIPPED);
    struct rt_knobs k = knobs_with(1u << 20);
    k.cma_fast = -1;
    assert_false(shm_cma_fast_here(&k));
    k.cma_fast = 1;
    assert_true(shm_cma_fast_here(&k));
    k.cma_fast = 0;
    assert_false(shm_cma_fast_here(&k));
}

/* Where the single copy is fast: 2 ranks from 512 KiB per rank, allreduce up to 16 MiB,
 * reduce and reduce_scatter up to 8 MiB; never with more ranks. */
static void cma_fast_windows(void **s)
{
    (void)s;
    size_t mib = 1u << 20;
    for (int kind = COLL_ALLREDUCE; kind < COLL_BARRIER; kind++) {
        assert_false(coll_host_cma_fast_window(kind, 2, mib / 2 - 4));
        assert_true(coll_host_cma_fast_window(kind, 2, mib / 2));
        assert_true(coll_host_cma_fast_window(kind, 2, 8 * mib));
        for (int n = 3; n <= 8; n++)
            assert_false(coll_host_cma_fast_window(kind, n, 4 * mib));
        assert_false(coll_host_cma_fast_window(kind, 1, 4 * mib));
    }
    assert_true(coll_host_cma_fast_window(COLL_ALLREDUCE, 2, 16 * mib));
    assert_false(coll_host_cma_fast_window(COLL_ALLREDUCE, 2, 16 * mib + 4));
    assert_false(coll_host_cma_fast_window(COLL_REDUCE_SCATTER, 2, 8 * mib + 4));
    assert_false(coll_host_cma_fast_window(COLL_REDUCE, 2, 8 * mib + 4));
    assert_true(coll_host_cma_fast_window(COLL_BROADCAST, 2, 256 * mib));
    assert_true(coll_host_cma_fast_window(COLL_ALLGATHER, 2, 256 * mib));
    assert_true(coll_host_cma_fast_window(COLL_ALLTOALL, 2, 256 * mib));
}

/* The rule on made-up calibrations: readv's rate over memcpy's against 0.45. */
static struct shm_cma_calibration cal_of(double readv_gbps, double memcpy_gbps)
{
    struct shm_cma_calibration c = {.outcome = SHM_CMA_MEASURED};
    c.readv_ns = (double)SHM_CMA_CAL_BYTES / readv_gbps;
    c.memcpy_ns = (double)SHM_CMA_CAL_BYTES / memcpy_gbps;
    return c;
}

static void cma_rule(void **s)
{
    (void)s;
    /* The Intel development VM: readv 8.2-11.0 GB/s, memcpy 13.2-14.2. */
    struct shm_cma_calibration intel = cal_of(10.5, 14.1);
    assert_true(shm_cma_is_fast(&intel));
    assert_true(shm_cma_ratio(&intel) > 0.74 && shm_cma_ratio(&intel) < 0.75);
    struct shm_cma_calibration slow_intel = cal_of(8.2, 14.0);
    assert_true(shm_cma_is_fast(&slow_intel));
    /* The AMD one: readv 7.7 GB/s, memcpy 27.6-36.7. */
    struct shm_cma_calibration amd = cal_of(7.7, 27.6);
    assert_false(shm_cma_is_fast(&amd));
    struct shm_cma_calibration edge = cal_of(4.5, 10.0);
    assert_true(shm_cma_is_fast(&edge));
    struct shm_cma_calibration below = cal_of(4.4, 10.0);
    assert_false(shm_cma_is_fast(&below));
    /* Not measured: slow, ratio 0. */
    struct shm_cma_calibration failed = intel, skipped = intel, empty = intel;
    failed.outcome = SHM_CMA_FAILED;
    skipped.outcome = SHM_CMA_SKIPPED;
    empty.readv_ns = 0;
    assert_false(shm_cma_is_fast(&failed));
    assert_false(shm_cma_is_fast(&skipped));
    assert_false(shm_cma_is_fast(&empty));
    assert_true(shm_cma_ratio(&failed) == 0);
}

/* The tuner's schedule: a burst of 3 on CMA, 3 on the slots, then the faster path with a
 * burst of 3 on the other one at calls 64, 128, 256, 512 and every 1024 from 1024 on. */
static void cma_tuner(void **s)
{
    (void)s;
    for (uint64_t n = 0; n < 3; n++)
        assert_true(coll_cma_tune_offer(n, 0, 0));
    for (uint64_t n = 3; n < 6; n++) {
        assert_false(coll_cma_tune_offer(n, 0, 0));
        assert_false(coll_cma_tune_offer(n, 2.0, 1.0));
    }
    const uint64_t starts[] = {64, 128, 256, 512, 1024, 2048, 3072, 4096};
    size_t next = 0;
    int cma = 0, slots = 0;
    for (uint64_t n = 6; n < 4096 + 64; n++) {
        bool in_burst = next < 8 && n >= starts[next] && n < starts[next] + 3;
        /* CMA measured faster: on CMA but for the bursts. */
        bool offer = coll_cma_tune_offer(n, 2.0, 1.0);
        assert_int_equal(offer, !in_burst);
        assert_int_equal(coll_cma_tune_exploring(n), in_burst);
        cma += offer;
        slots += !offer;
        /* Slots faster: the mirror image. */
        assert_true(coll_cma_tune_offer(n, 1.0, 2.0) != offer);
        if (next < 8 && n == starts[next] + 2)
            next++;
    }
    assert_int_equal(next, 8);
    assert_int_equal(slots, 8 * 3);
    assert_int_equal(cma, (4096 + 64 - 6) - 8 * 3);
    /* Far on, every 1024 calls. */
    assert_true(coll_cma_tune_exploring(((uint64_t)1 << 40) + 2));
    assert_false(coll_cma_tune_exploring(((uint64_t)1 << 40) + 3));
    assert_false(coll_cma_tune_exploring(((uint64_t)1 << 40) + 512));
    /* Equal times: CMA (one copy). */
    assert_true(coll_cma_tune_offer(100, 1.0, 1.0));
}

/* A call's time counts unless it was the first on its path after a call on the other
 * (cold); a path's time is the median of its last 3 counted calls, the lower of 2: one
 * delayed call changes nothing, two in a row do. */
static void cma_tuner_record(void **s)
{
    (void)s;
    struct coll_tune_cell t = {0};
    coll_tune_record(&t, 1, 4000, 1000); /* the first call of all: cold */
    assert_true(t.ns_per_byte[1] == 0);
    coll_tune_record(&t, 1, 4000, 1000);
    assert_true(t.ns_per_byte[1] == 4.0);
    coll_tune_record(&t, 1, 2000, 1000);
    assert_true(t.ns_per_byte[1] == 2.0);
    coll_tune_record(&t, 1, 3000, 1000);
    assert_true(t.ns_per_byte[1] == 3.0);
    coll_tune_record(&t, 0, 9000, 1000); /* an exploring burst: its first call cold */
    assert_true(t.ns_per_byte[0] == 0);
    coll_tune_record(&t, 0, 1000, 1000);
    coll_tune_record(&t, 0, 1500, 1000);
    assert_true(t.ns_per_byte[0] == 1.0);
    coll_tune_record(&t, 1, 9000, 1000); /* back: cold again */
    assert_true(t.ns_per_byte[1] == 3.0);
    assert_int_equal(t.last, 2);
    /* One delayed call (a preemption) among them: ignored. */
    coll_tune_record(&t, 1, 3000, 1000);
    coll_tune_record(&t, 1, 70000, 1000);
    assert_true(t.ns_per_byte[1] == 3.0);
    coll_tune_record(&t, 1, 3100, 1000);
    assert_true(t.ns_per_byte[1] == 3.1);
    /* Two in a row: the host is slower now. */
    coll_tune_record(&t, 1, 8000, 1000);
    coll_tune_record(&t, 1, 9000, 1000);
    assert_true(t.ns_per_byte[1] == 8.0);
    assert_true(t.ns_per_byte[0] == 1.0);
}

/* Rank 0's lagged choices: a word says old before call `from`, new from it on (call
 * numbers wrap); written at the end of call s with from = s + 2 and old = the choice for
 * s + 1, it gives call s + 1 the same choice as the word before it. */
static void lagged_choice(void **s)
{
    (void)s;
    assert_false(coll_choice_at(0, 0)); /* a fresh segment: the flag path */
    assert_false(coll_choice_at(0, 0x90000000u));
    uint64_t w = coll_choice_pack(100, false, true);
    assert_false(coll_choice_at(w, 99));
    assert_true(coll_choice_at(w, 100));
    assert_true(coll_choice_at(w, 101));
    /* Across the wrap of the call numbers. */
    uint64_t wrap = coll_choice_pack(1, true, false);
    assert_true(coll_choice_at(wrap, 0xffffffffu));
    assert_false(coll_choice_at(wrap, 1));
    /* The next word, written at the end of call 150 (want the flag path from 152). */
    uint32_t at = 150;
    uint64_t next = coll_choice_pack(at + 2, coll_choice_at(w, at + 1), false);
    assert_int_equal(coll_choice_at(next, at + 1), coll_choice_at(w, at + 1));
    assert_false(coll_choice_at(next, at + 2));
    /* Written before w took effect (at the end of call 98): call 99 still reads old. */
    uint64_t early = coll_choice_pack(100, coll_choice_at(w, 99), true);
    assert_int_equal(coll_choice_at(early, 99), coll_choice_at(w, 99));
}

static void shapes(void **s)
{
    (void)s;
    struct {
        enum coll_kind kind;
        int rank;
        size_t send, recv; /* for count 10, 4 ranks, root 2 */
    } want[] = {
        {COLL_ALLREDUCE, 0, 10, 10},      {COLL_BROADCAST, 2, 10, 10}, {COLL_BROADCAST, 1, 0, 10},
        {COLL_REDUCE, 2, 10, 10},         {COLL_REDUCE, 3, 10, 0},     {COLL_ALLGATHER, 1, 10, 40},
        {COLL_REDUCE_SCATTER, 1, 40, 10}, {COLL_ALLTOALL, 3, 40, 40},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct coll_call call = {.kind = want[i].kind, .root = 2, .count = 10};
        size_t ns, nr;
        coll_call_shape(&call, want[i].rank, 4, &ns, &nr);
        assert_int_equal(ns, want[i].send);
        assert_int_equal(nr, want[i].recv);
    }
    for (int kind = COLL_ALLREDUCE; kind < COLL_KIND_END; kind++)
        assert_string_not_equal(coll_kind_name(kind), "?");
    assert_string_equal(coll_kind_name(COLL_KIND_END), "?");
    assert_string_equal(coll_kind_name((enum coll_kind)0), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flag_threshold_per_collective),
        cmocka_unit_test(cma_windows),
        cmocka_unit_test(cma_fast_here),
        cmocka_unit_test(cma_fast_windows),
        cmocka_unit_test(cma_tuner),
        cmocka_unit_test(cma_tuner_record),
        cmocka_unit_test(lagged_choice),
        cmocka_unit_test(cma_rule),
        cmocka_unit_test(shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
