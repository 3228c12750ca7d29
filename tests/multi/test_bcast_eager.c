/* SPDX-License-Identifier: MIT */
/*
 * The eager broadcast (ARCOMM_BCAST_EAGER): the root of a small broadcast returns once
 * its message is staged.  Thread and process ranks: random messages of every size up to
 * the knob, roots that change, in place and out of place, rings that fill while a rank
 * lags, calls of other kinds in between, every element checked and every rank's data
 * compared bit for bit; a disagreement (count, an eager call against one that
 * synchronises either way round, roots) fails the rank that finds it with MISMATCH and
 * the others at their next call; a rank that never calls or dies ends the root's calls
 * within the timeout; ranks with different knob values get MISMATCH at comm_init.
 */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define EAGER_BYTES 512u
#define BIG_COUNT   1024u /* f32 elements: past the knob, a broadcast that synchronises */

static const comm_dtype_t dtypes[] = {COMM_U8, COMM_F32, COMM_F64, COMM_I32, COMM_BF16};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static void expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("rank %d: %ld errors; first: %s", r, res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void expect(struct h_rank *r, const char *what, comm_status_t got, comm_status_t want,
                   const char *must_contain)
{
    if (got != want)
        h_fail(r, "%s: got %s, want %s (%s)", what, comm_status_string(got),
               comm_status_string(want), r->comm ? comm_last_error(r->comm) : "");
    else if (must_contain != NULL && strstr(comm_last_error(r->comm), must_contain) == NULL)
        h_fail(r, "%s: message \"%s\" lacks \"%s\"", what, comm_last_error(r->comm), must_contain);
}

/* ---- data: every size and dtype, roots that change, other calls in between ---- */

struct data_arg {
    bool lag; /* the last rank sleeps now and then: the roots' rings fill */
};

/* A broadcast of call i checked on every element; the received bytes feed *hash. */
static void checked_bcast(struct h_rank *r, int i, uint8_t *a, uint8_t *b, uint64_t *hash)
{
    comm_dtype_t dt = dtypes[(size_t)i % N_DTYPES];
    size_t es = dt == COMM_U8 ? 1 : dt == COMM_BF16 ? 2 : dt == COMM_F64 ? 8 : 4;
    size_t count = 1 + (size_t)i * 37 % (EAGER_BYTES / es);
    int root = i / 5 % r->nranks;
    bool in_place = i % 3 == 0;
    uint64_t seed = 1000 + (uint64_t)i;
    void *recv = in_place ? a : b;
    if (r->rank == root)
        h_fill(a, count, dt, seed, root);
    else
        h_poison(a, count, dt);
    h_poison(b, count, dt);
    comm_status_t st = comm_broadcast(r->comm, a, recv, count, dt, root, NULL);
    if (st != COMM_OK) {
        h_fail(r, "call %d: broadcast of %zu %s from root %d: %s (%s)", i, count, h_dtype_name(dt),
               root, comm_status_string(st), comm_last_error(r->comm));
        return;
    }
    if (!h_holds(recv, count, dt, COMM_SUM, seed, root))
        h_fail(r, "call %d: broadcast of %zu %s from root %d: wrong data", i, count,
               h_dtype_name(dt), root);
    *hash = h_hash_more(*hash, recv, count * es);
}

static void data_body(struct h_rank *r)
{
    const struct data_arg *arg = r->arg;
    int calls = h_quick() ? 150 : 600;
    uint8_t *a = malloc(BIG_COUNT * 4), *b = malloc(BIG_COUNT * 4);
    uint64_t hash = h_hash(NULL, 0);
    /* Eager calls alone first, with a lagging rank: the root runs a full ring ahead. */
    for (int i = 0; i < calls / 2 && r->errors == 0; i++) {
        if (arg->lag && r->rank == r->nranks - 1 && i % 10 == 3)
            usleep(300);
        checked_bcast(r, 5 * r->nranks * i, a, b, &hash);
    }
    for (int i = 0; i < calls && r->errors == 0; i++) {
        if (arg->lag && r->rank == r->nranks - 1 && i % 50 == 7)
            usleep(2000);
        checked_bcast(r, i, a, b, &hash);
        if (i % 11 == 10)
            h_allreduce_checked(r, 1 + (size_t)i % 64, 77 + (uint64_t)i, "allreduce between");
        if (i % 13 == 12) {
            /* Past the knob: the flag path, which synchronises. */
            int root = i % r->nranks;
            if (r->rank == root)
                h_fill(a, BIG_COUNT, COMM_F32, 5, root);
            else
                h_poison(a, BIG_COUNT, COMM_F32);
            expect(r, "a large broadcast between",
                   comm_broadcast(r->comm, a, a, BIG_COUNT, COMM_F32, root, NULL), COMM_OK, NULL);
            if (!h_holds(a, BIG_COUNT, COMM_F32, COMM_SUM, 5, root))
                h_fail(r, "call %d: large broadcast: wrong data", i);
        }
        if (i % 17 == 16)
            expect(r, "a barrier between", comm_barrier(r->comm), COMM_OK, NULL);
    }
    memcpy(r->out, &hash, sizeof(hash));
    r->out_len = sizeof(hash);
    free(a);
    free(b);
}

static void run_data(int n, bool procs, bool lag)
{
    struct data_arg arg = {.lag = lag};
    struct h_job job = {
        .nranks = n, .procs = procs, .body = data_body, .arg = &arg, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    expect_clean(res, n);
    for (int r = 1; r < n; r++)
        assert_memory_equal(res[r].out, res[0].out, sizeof(uint64_t));
}

static void data_threads(void **s)
{
    (void)s;
    run_data(2, false, false);
    run_data(3, false, true);
}

static void data_procs(void **s)
{
    (void)s;
    run_data(2, true, true);
    run_data(3, true, false);
}

/* Every wait sleeps on the futex at once: the fence-free publications (shm_ring_lax) must
 * still wake the sleepers, or at worst let them look again within their short slice. */
static void data_sleeping(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SPIN_NS", "0");
    h_env_push("ARCOMM_YIELD_NS", "0");
    double t0 = h_now_ms();
    run_data(2, true, true);
    run_data(3, false, false);
    double ms = h_now_ms() - t0;
    h_env_pop();
    h_env_pop();
    /* About 3000 calls each: missed wake-ups of a whole slice (1 ms) in most would show. */
    if (ms > 20000)
        fail_msg("the calls with sleeping waits took %.0f ms", ms);
}

/* ---- disagreements ---- */

enum case_kind {
    C_COUNT,      /* rank 1 passes one element more: both eager */
    C_EAGER_ROOT, /* root eager, rank 1 past the knob (synchronises) */
    C_SYNC_ROOT,  /* root past the knob, rank 1 eager */
    C_ALLREDUCE,  /* root eager, rank 1 an allreduce */
    C_ROOTS,      /* 3 ranks: rank 2 names rank 1 the root */
};

struct case_arg {
    enum case_kind kind;
};

/* Call 5 disagrees; the calls before it agree, the one after it fails everywhere. */
static void mismatch_body(struct h_rank *r)
{
    const struct case_arg *arg = r->arg;
    float *x = calloc(BIG_COUNT, 4);
    uint64_t hash = 0;
    uint8_t *a = malloc(BIG_COUNT * 4), *b = malloc(BIG_COUNT * 4);
    for (int i = 0; i < 5; i++)
        checked_bcast(r, 5 * r->nranks * i, a, b, &hash); /* root 0 */
    size_t count = 8;
    comm_status_t st;
    const char *want_msg = NULL;
    comm_status_t want = COMM_OK;
    bool one = r->rank == 1;
    switch (arg->kind) {
    case C_COUNT:
        st = comm_broadcast(r->comm, x, x, one ? count + 1 : count, COMM_F32, 0, NULL);
        if (one) {
            want = COMM_ERR_MISMATCH;
            want_msg = "root rank 0 made broadcast count 8 dtype f32 root 0";
        }
        break;
    case C_EAGER_ROOT:
        st = comm_broadcast(r->comm, x, x, one ? BIG_COUNT : count, COMM_F32, 0, NULL);
        if (one) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 0 made an eager broadcast count 8";
        }
        break;
    case C_SYNC_ROOT:
        st = comm_broadcast(r->comm, x, x, one ? count : BIG_COUNT, COMM_F32, 0, NULL);
        want = COMM_ERR_MISMATCH;
        want_msg = one ? "not an eager broadcast" : "rank 1 made broadcast count 8";
        break;
    case C_ALLREDUCE:
        st = one ? comm_allreduce(r->comm, x, x, count, COMM_F32, COMM_SUM, NULL)
                 : comm_broadcast(r->comm, x, x, count, COMM_F32, 0, NULL);
        if (one) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 0 made an eager broadcast";
        }
        break;
    case C_ROOTS:
    default:
        st = comm_broadcast(r->comm, x, x, count, COMM_F32, r->rank == 2 ? 1 : 0, NULL);
        if (r->rank == 2) {
            want = COMM_ERR_MISMATCH;
            want_msg = "root rank 1 made a call of another kind";
        }
        break;
    }
    char what[64];
    snprintf(what, sizeof(what), "case %d: the call that disagrees", arg->kind);
    expect(r, what, st, want, want_msg);
    /* The calls after it fail on every rank, promptly: an eager root once it sees the
     * failure the others published (at the latest when its ring is full). */
    double t0 = h_now_ms();
    int after = 0;
    do
        st = comm_broadcast(r->comm, x, x, count, COMM_F32, 0, NULL);
    while (st == COMM_OK && ++after < 64);
    double ms = h_now_ms() - t0;
    if (st == COMM_OK)
        h_fail(r, "case %d: %d calls after the mismatch succeeded", arg->kind, after);
    if (ms > 2000)
        h_fail(r, "case %d: the calls after the mismatch took %.0f ms to fail", arg->kind, ms);
    free(x);
    free(a);
    free(b);
}

static void run_mismatch(enum case_kind kind, int n, bool procs)
{
    struct case_arg arg = {.kind = kind};
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = &arg,
                        .kill_rank = -1,
                        .timeout_ms = 10000};
    expect_clean(h_run(&job), n);
}

static void mismatches(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    for (int procs = 0; procs < 2; procs++) {
        run_mismatch(C_COUNT, 3, procs);
        run_mismatch(C_EAGER_ROOT, 2, procs);
        run_mismatch(C_SYNC_ROOT, 2, procs);
        run_mismatch(C_ALLREDUCE, 2, procs);
        run_mismatch(C_ROOTS, 3, procs);
    }
    h_env_pop();
}

/* ---- a rank that never calls, a rank that dies: the root's calls end in time ---- */

#define SHORT_TIMEOUT_MS 1000

static void absent_body(struct h_rank *r)
{
    float x[4] = {1, 2, 3, 4};
    if (r->rank == 1) {
        usleep(3 * SHORT_TIMEOUT_MS * 1000);
        return;
    }
    double t0 = h_now_ms();
    comm_status_t st = COMM_OK;
    int calls = 0;
    while (st == COMM_OK && calls < 1000) {
        st = comm_broadcast(r->comm, x, x, 4, COMM_F32, 0, NULL);
        calls++;
    }
    double ms = h_now_ms() - t0;
    expect(r, "the root's broadcasts to a rank that never calls", st, COMM_ERR_TIMEOUT, "rank 1");
    /* The ring holds a bounded number of calls. */
    if (calls < 2 || calls > 64)
        h_fail(r, "%d calls before the timeout", calls);
    if (ms < SHORT_TIMEOUT_MS * 0.9 || ms > SHORT_TIMEOUT_MS * 2.5)
        h_fail(r, "the timeout came after %.0f ms (timeout %d ms)", ms, SHORT_TIMEOUT_MS);
}

static void never_calls(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2,
                            .procs = procs,
                            .body = absent_body,
                            .kill_rank = -1,
                            .timeout_ms = SHORT_TIMEOUT_MS};
        expect_clean(h_run(&job), 2);
    }
    h_env_pop();
}

static void killed_body(struct h_rank *r)
{
    float x[4] = {1, 2, 3, 4};
    comm_status_t st = COMM_OK;
    long calls = 0;
    while (st == COMM_OK && calls < 200000000)
        st = comm_broadcast(r->comm, x, x, 4, COMM_F32, (int)(calls++ / 100 % 2) * 2, NULL);
    r->elapsed_s = h_now_ms() / 1e3;
    expect(r, "broadcasts while rank 1 dies", st, COMM_ERR_PEER, "rank 1");
}

static void killed(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {.nranks = 3,
                        .procs = true,
                        .body = killed_body,
                        .kill_rank = 1,
                        .kill_after_ms = h_quick() ? 800 : 200,
                        .kill_after_ready = true,
                        .timeout_ms = 60000};
    expect_clean(h_run_killed(&job, 2000, "eager broadcasts"), 3);
    h_env_pop();
}

/* ---- a rank that leaves while a peer still finishes a call it completed ---- */

/* Rank 0 arrives late at a barrier that rank 1 sleeps in, completes it, roots an eager
 * broadcast and leaves (the harness's comm_destroy) at once: its call count is then two
 * ahead of the barrier that rank 1 may still be waking up in.  Rank 1 must finish both
 * calls: rank 0 made them, and left only after (its failure is for calls it never
 * made). */
static void leave_body(struct h_rank *r)
{
    uint8_t msg[64];
    if (r->rank == 0)
        usleep(200);
    expect(r, "the barrier", comm_barrier(r->comm), COMM_OK, NULL);
    if (r->rank == 0)
        h_fill(msg, sizeof(msg), COMM_U8, 9, 0);
    else
        h_poison(msg, sizeof(msg), COMM_U8);
    expect(r, "the eager broadcast",
           comm_broadcast(r->comm, msg, msg, sizeof(msg), COMM_U8, 0, NULL), COMM_OK, NULL);
    if (r->rank == 1 && !h_holds(msg, sizeof(msg), COMM_U8, COMM_SUM, 9, 0))
        h_fail(r, "the eager broadcast: wrong data");
}

static void left_after_calls(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SPIN_NS", "0");
    h_env_push("ARCOMM_YIELD_NS", "0");
    struct h_job job = {.nranks = 2, .body = leave_body, .kill_rank = -1};
    for (int i = 0; i < (h_quick() ? 100 : 300); i++)
        expect_clean(h_run(&job), 2);
    h_env_pop();
    h_env_pop();
}

/* ---- ranks that disagree on the knob: MISMATCH at comm_init ---- */

static void knob_body(struct h_rank *r)
{
    setenv("ARCOMM_BCAST_EAGER", r->rank == 1 ? "256" : "512", 1);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 5000;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st != COMM_ERR_MISMATCH)
        h_fail(r,
               "comm_init with ARCOMM_BCAST_EAGER 256 against 512: got %s, want "
               "COMM_ERR_MISMATCH",
               comm_status_string(st));
    else if (strstr(comm_last_error(NULL), "ARCOMM_BCAST_EAGER") == NULL)
        h_fail(r, "comm_init's message \"%s\" does not name ARCOMM_BCAST_EAGER",
               comm_last_error(NULL));
    if (st == COMM_OK)
        comm_destroy(c);
}

static void knob_disagrees(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {
        .nranks = 2, .procs = true, .no_init = true, .body = knob_body, .kill_rank = -1};
    expect_clean(h_run(&job), 2);
    h_env_pop();
}

int main(void)
{
    setenv("ARCOMM_BCAST_EAGER", "512", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(data_threads),   cmocka_unit_test(data_procs),
        cmocka_unit_test(data_sleeping),  cmocka_unit_test(mismatches),
        cmocka_unit_test(never_calls),    cmocka_unit_test(killed),
        cmocka_unit_test(knob_disagrees), cmocka_unit_test(left_after_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
