/* SPDX-License-Identifier: MIT */
/*
 * ARCOMM_WIRE and ARCOMM_WIRE_THRESHOLD are agreed at join: a rank whose codec or
 * threshold differs from rank 0's gets COMM_ERR_MISMATCH from comm_init (before it
 * writes a byte into the segment), and so do the ranks already there; ranks that agree
 * work.  Thread ranks set theirs through comm_config_t.knob_defaults, process ranks
 * through their own environment.  And what the knobs do on the host paths: bf16 from
 * ARCOMM_WIRE_THRESHOLD (auto: ARCOMM_BF16_THRESHOLD), nothing with ARCOMM_WIRE=none, full
 * width for int8 and fp8 (the host carries bf16 only).
 */
#include "harness.h"
#include "wire_scalar.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Each rank's knob setting ("ARCOMM_X=v"; NULL: none). */
struct join_case {
    const char *set[3];
};

static void join_body(struct h_rank *r)
{
    const struct join_case *jc = r->arg;
    const char *set = jc->set[r->rank];
    char name[64] = "", value[32] = "";
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 20000;
    if (set != NULL) {
        if (r->procs) {
            /* A process of its own: its environment, as a user would set it. */
            sscanf(set, "%63[^=]=%31s", name, value);
            setenv(name, value, 1);
        } else {
            cfg.knob_defaults = set;
        }
    }
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    r->status = (int)st;
    if (st == COMM_OK) {
        r->comm = c; /* the harness destroys it */
        h_allreduce_checked(r, 4096, 5, "allreduce");
    } else {
        snprintf(r->first_error, sizeof(r->first_error), "%s", comm_last_error(NULL));
    }
}

static struct h_rank *run(const struct join_case *jc, int n, bool procs)
{
    unsetenv("ARCOMM_WIRE");
    unsetenv("ARCOMM_WIRE_THRESHOLD");
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .no_init = true,
                        .body = join_body,
                        .arg = (void *)jc,
                        .kill_rank = -1};
    return h_run(&job);
}

static void expect_mismatch(const struct join_case *jc, int n, bool procs, int culprit,
                            const char *knob)
{
    struct h_rank *res = run(jc, n, procs);
    if (res[culprit].status != COMM_ERR_MISMATCH)
        fail_msg("%s: rank %d (the one that differs) got %s: %s", knob, culprit,
                 comm_status_string((comm_status_t)res[culprit].status), res[culprit].first_error);
    if (!strstr(res[culprit].first_error, knob))
        fail_msg("the mismatch message \"%s\" does not name %s", res[culprit].first_error, knob);
    for (int p = 0; p < n; p++)
        if (res[p].status == COMM_OK)
            fail_msg("%s: rank %d joined a communicator whose ranks disagree", knob, p);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void wire_differs_procs(void **s)
{
    (void)s;
    const struct join_case jc = {{NULL, "ARCOMM_WIRE=int8", NULL}};
    expect_mismatch(&jc, 3, true, 1, "ARCOMM_WIRE");
}

static void wire_differs_threads(void **s)
{
    (void)s;
    const struct join_case jc = {{"ARCOMM_WIRE=fp8", "ARCOMM_WIRE=int8"}};
    expect_mismatch(&jc, 2, false, 1, "ARCOMM_WIRE");
}

static void threshold_differs_procs(void **s)
{
    (void)s;
    const struct join_case jc = {{"ARCOMM_WIRE_THRESHOLD=4K", "ARCOMM_WIRE_THRESHOLD=8K"}};
    expect_mismatch(&jc, 2, true, 1, "ARCOMM_WIRE_THRESHOLD");
}

/* Alike on every rank: the communicator works. */
static void wire_agrees(void **s)
{
    (void)s;
    const struct join_case jc = {{"ARCOMM_WIRE=int8", "ARCOMM_WIRE=int8", "ARCOMM_WIRE=int8"}};
    for (int procs = 0; procs < 2; procs++) {
        struct h_rank *res = run(&jc, 3, procs);
        for (int p = 0; p < 3; p++)
            if (res[p].status != COMM_OK || res[p].errors != 0)
                fail_msg("rank %d (%s): %s %s", p, procs ? "process" : "thread",
                         comm_status_string((comm_status_t)res[p].status), res[p].first_error);
    }
    assert_int_equal(h_shm_leftovers(), 0);
}

/* ---- the knobs' effect on a host allreduce ---- */

struct effect_case {
    const char *defaults; /* knob_defaults of every rank */
    bool narrowed;        /* f32 expected rounded to bf16 before the sum */
};

enum { EFFECT_COUNT = 4096 };

static float effect_input(int rank, size_t i)
{
    /* Low mantissa bits set: bf16 rounding shows in every element. */
    return 1.0f + (float)((i * 7 + (size_t)rank * 3) % 1024 + 1) * 0x1p-20f;
}

static void effect_body(struct h_rank *r)
{
    const struct effect_case *ec = r->arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 20000;
    cfg.knob_defaults = ec->defaults;
    comm_status_t st = comm_init(&r->comm, &cfg);
    if (st != COMM_OK) {
        r->comm = NULL;
        h_fail(r, "comm_init (%s): %s", ec->defaults, comm_last_error(NULL));
        return;
    }
    float *send = malloc(EFFECT_COUNT * sizeof(float)),
          *recv = malloc(EFFECT_COUNT * sizeof(float));
    for (size_t i = 0; i < EFFECT_COUNT; i++)
        send[i] = effect_input(r->rank, i);
    st = comm_allreduce(r->comm, send, recv, EFFECT_COUNT, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK)
        h_fail(r, "comm_allreduce: %s", comm_last_error(r->comm));
    for (size_t i = 0; st == COMM_OK && i < EFFECT_COUNT; i++) {
        float want = 0.0f;
        for (int p = 0; p < r->nranks; p++) {
            float x = effect_input(p, i);
            if (ec->narrowed)
                x = wire_bf16_value(wire_bf16_of(x));
            want = p == 0 ? x : want + x;
        }
        if (wire_bits(recv[i]) != wire_bits(want)) {
            h_fail(r, "%s: element %zu is %a, expected %a (%s)", ec->defaults, i, (double)recv[i],
                   (double)want, ec->narrowed ? "bf16 inputs" : "full width");
            break;
        }
    }
    free(send);
    free(recv);
}

static void knob_effect(void **s)
{
    (void)s;
    static const struct effect_case cases[] = {
        {"ARCOMM_BF16_THRESHOLD=0", true},
        {"ARCOMM_BF16_THRESHOLD=0,ARCOMM_WIRE=none", false},
        {"ARCOMM_WIRE_THRESHOLD=0", true},
        {"ARCOMM_WIRE=bf16,ARCOMM_WIRE_THRESHOLD=16K", true},
        {"ARCOMM_WIRE=bf16,ARCOMM_WIRE_THRESHOLD=32K", false},
        {"ARCOMM_BF16_THRESHOLD=0,ARCOMM_WIRE_THRESHOLD=off", false},
        {"ARCOMM_WIRE=int8,ARCOMM_WIRE_THRESHOLD=0", false},
        {"ARCOMM_WIRE=fp8,ARCOMM_WIRE_THRESHOLD=0", false},
        {"", false},
    };
    unsetenv("ARCOMM_WIRE");
    unsetenv("ARCOMM_WIRE_THRESHOLD");
    unsetenv("ARCOMM_BF16_THRESHOLD");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct h_job job = {.nranks = 3,
                            .no_init = true,
                            .body = effect_body,
                            .arg = (void *)&cases[c],
                            .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        for (int p = 0; p < 3; p++)
            if (res[p].errors != 0)
                fail_msg("rank %d: %s", p, res[p].first_error);
    }
    assert_int_equal(h_shm_leftovers(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wire_differs_procs),
        cmocka_unit_test(wire_differs_threads),
        cmocka_unit_test(threshold_differs_procs),
        cmocka_unit_test(wire_agrees),
        cmocka_unit_test(knob_effect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
