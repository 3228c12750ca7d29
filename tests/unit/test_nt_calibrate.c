/* SPDX-License-Identifier: MIT */
/*
 * The streaming-store threshold's rule (nt_calibrate.h): the crossover picked from
 * made-up calibration timings, the last-level cache and the cap it is bounded by, and
 * the knob's precedence (a value set wins over the calibration, "off" stays off).
 */
#include "coll.h"
#include "nt_calibrate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define MIB ((size_t)1 << 20)

/* A rung from rates in GB/s (bytes per ns). */
static struct coll_nt_sample rung(size_t mib, double cached_gbps, double stream_gbps)
{
    struct coll_nt_sample s = {.footprint = mib * MIB};
    s.cached_ns = (double)s.footprint / cached_gbps;
    s.stream_ns = (double)s.footprint / stream_gbps;
    return s;
}

static void pick_crossover(void **st)
{
    (void)st;
    /* In cache up to 4 MiB, then memory-bound, streaming ahead from 8 MiB on. */
    struct coll_nt_sample s[] = {rung(2, 100, 60), rung(4, 95, 60), rung(8, 35, 60),
                                 rung(16, 30, 55)};
    assert_int_equal(coll_nt_pick(s, 4), 8 * MIB);
    /* Memory-bound from 4 MiB on: the smallest rung, confirmed by the next. */
    struct coll_nt_sample small[] = {rung(2, 100, 60), rung(4, 35, 50), rung(8, 33, 50),
                                     rung(16, 30, 50)};
    assert_int_equal(coll_nt_pick(small, 4), 4 * MIB);
    /* The development VM with a 48 MiB copy loop on the other core: memory-bound at the
     * last rung only, streaming ahead there: that rung, no next one to ask. */
    struct coll_nt_sample thrashed[] = {rung(2, 86, 71), rung(4, 69, 72), rung(8, 55, 73),
                                        rung(16, 27, 31)};
    assert_int_equal(coll_nt_pick(thrashed, 4), 16 * MIB);
}

static void pick_needs_spill_and_confirmation(void **st)
{
    (void)st;
    /* The development VM's single thread: streaming as fast as cached while in cache,
     * a 10% "win" at 8 MiB that is noise (nothing spilled): no crossover. */
    struct coll_nt_sample vm[] = {rung(2, 94, 94), rung(4, 87, 93), rung(8, 83, 94),
                                  rung(16, 81, 92)};
    assert_int_equal(coll_nt_pick(vm, 4), 0);
    /* The same VM under load: cached down to 0.53 of its peak at 16 MiB, streaming 25%
     * ahead there; not memory-bound: no crossover. */
    struct coll_nt_sample loaded[] = {rung(2, 99, 95), rung(4, 88, 91), rung(8, 78, 93),
                                      rung(16, 52, 67)};
    assert_int_equal(coll_nt_pick(loaded, 4), 0);
    /* Memory-bound at 8 MiB and streaming ahead there, but not at 16 MiB: one lucky rung. */
    struct coll_nt_sample lucky[] = {rung(2, 100, 60), rung(4, 95, 60), rung(8, 35, 60),
                                     rung(16, 33, 34)};
    assert_int_equal(coll_nt_pick(lucky, 4), 0);
    /* Ahead by less than the margin: a tie, no crossover. */
    struct coll_nt_sample tie[] = {rung(2, 100, 60), rung(4, 35, 37), rung(8, 33, 35),
                                   rung(16, 30, 32)};
    assert_int_equal(coll_nt_pick(tie, 4), 0);
    assert_int_equal(coll_nt_pick(tie, 0), 0);
}

static void auto_threshold_rule(void **st)
{
    (void)st;
    struct rt_topo_summary topo;
    memset(&topo, 0, sizeof(topo));
    topo.l3_bytes = 32 * MIB;
    struct coll_nt_calibration cal = {.outcome = COLL_NT_MEASURED, .crossover = 8 * MIB};
    const char *why = NULL;
    /* Measured below the cache: the measurement. */
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, &why), 8 * MIB);
    assert_string_equal(why, "measured at first use");
    /* Measured above the cache: the cache. */
    cal.crossover = 48 * MIB;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, &why), 32 * MIB);
    /* No crossover: the cache, or the cap where a VM reports its host's 300 MiB. */
    cal.outcome = COLL_NT_NO_CROSSOVER;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, &why), 32 * MIB);
    topo.l3_bytes = 300 * MIB;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, &why), COLL_NT_UNCROSSED_CAP);
    assert_non_null(strstr(why, "capped"));
    /* Not measured: the cache as reported, L2 without an L3, 8 MiB without either. */
    cal.outcome = COLL_NT_FAILED;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, &why), 300 * MIB);
    assert_non_null(strstr(why, "could not run"));
    cal.outcome = COLL_NT_SKIPPED;
    topo.l3_bytes = 0;
    topo.l2_bytes = 2 * MIB;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, NULL), 2 * MIB);
    topo.l2_bytes = 0;
    assert_int_equal(coll_nt_auto_threshold(&topo, &cal, NULL), 8 * MIB);
}

static size_t resolved_nt(size_t loaded, const struct rt_topo_summary *topo)
{
    struct rt_knobs k;
    memset(&k, 0, sizeof(k));
    k.flag_threshold = RT_SIZE_AUTO;
    k.bf16_threshold = RT_SIZE_AUTO;
    k.shm_slot_bytes = 1 << 20;
    k.nt_threshold = loaded;
    coll_host_resolve_knobs(&k, topo, 2, true);
    return k.nt_threshold;
}

static void knob_precedence(void **st)
{
    (void)st;
    struct rt_topo_summary topo;
    memset(&topo, 0, sizeof(topo));
    topo.l3_bytes = 300 * MIB;
    /* A value set wins over the calibration; "off" stays off. */
    assert_int_equal(resolved_nt(16 * MIB, &topo), 16 * MIB);
    assert_int_equal(resolved_nt(0, &topo), 0);
    assert_true(resolved_nt(RT_SIZE_OFF, &topo) == RT_SIZE_OFF);
    /* "auto": this process's calibration (run here, once) through the rule. */
    const struct coll_nt_calibration *cal = coll_nt_calibration();
    assert_true(cal == coll_nt_calibration());
    size_t want = coll_nt_auto_threshold(&topo, cal, NULL);
    assert_int_equal(resolved_nt(RT_SIZE_AUTO, &topo), want);
    assert_true(want <= COLL_NT_UNCROSSED_CAP && want > 0);
    assert_true(cal->outcome == COLL_NT_MEASURED || cal->outcome == COLL_NT_NO_CROSSOVER ||
                cal->outcome == COLL_NT_FAILED);
    assert_int_equal(cal->nsamples, cal->outcome == COLL_NT_FAILED ? 0 : COLL_NT_LADDER_LEN);
    /* streams: all ranks' inputs and outputs against the threshold. */
    struct rt_knobs k;
    memset(&k, 0, sizeof(k));
    k.nt_threshold = 16 * MIB;
    assert_false(coll_host_streams(&k, 2, 4 * MIB - 1));
    assert_true(coll_host_streams(&k, 2, 4 * MIB));
    k.nt_threshold = RT_SIZE_OFF;
    assert_false(coll_host_streams(&k, 2, SIZE_MAX / 8));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pick_crossover),
        cmocka_unit_test(pick_needs_spill_and_confirmation),
        cmocka_unit_test(auto_threshold_rule),
        cmocka_unit_test(knob_precedence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
