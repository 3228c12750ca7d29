/* SPDX-License-Identifier: MIT */
/*
 * comm_set_wait_hook: the hook runs while a call waits for a late peer (with the
 * caller's handle and argument), not on calls whose peers are there, no more after it
 * was removed; a nonzero return stops the call on this rank (COMM_ERR_ABORTED, the
 * message naming the hook) and its peers learn at once (COMM_ERR_PEER, not at the
 * timeout); the argument checks.  Thread and process ranks.
 */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("rank %d: %ld errors; first: %s", r, res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

/* What the hook sees and counts (one per rank: each rank sets its own). */
struct hook_state {
    comm_t *comm;   /* the handle the hook must be given */
    int calls;      /* times it ran */
    int stop_at;    /* return nonzero on this call (0: never) */
    bool wrong_arg; /* it was given another handle than comm */
};

static int count_hook(comm_t *comm, void *arg)
{
    struct hook_state *h = arg;
    if (comm != h->comm)
        h->wrong_arg = true;
    return ++h->calls == h->stop_at ? 7 : 0;
}

/* ---- the hook runs while rank 0 waits for a late rank 1, and only then ---- */

static void runs_while_waiting_body(struct h_rank *r)
{
    struct hook_state h = {.comm = r->comm};
    if (r->rank == 0) {
        comm_status_t st = comm_set_wait_hook(r->comm, count_hook, &h, 500);
        if (st != COMM_OK)
            h_fail(r, "comm_set_wait_hook: %s", comm_last_error(r->comm));
    } else {
        sleep_ms(40);
    }
    h_allreduce_checked(r, 1000 + 7 * (size_t)r->nranks, 11, "allreduce with a late rank 1");
    if (r->rank == 0 && (h.calls < 1 || h.wrong_arg))
        h_fail(r, "the hook ran %d times (want at least 1) while rank 0 waited 40 ms%s", h.calls,
               h.wrong_arg ? ", and was given another handle" : "");

    /* Removed: a late peer no longer runs it. */
    int before = h.calls;
    if (r->rank == 0 && comm_set_wait_hook(r->comm, NULL, NULL, 0) != COMM_OK)
        h_fail(r, "comm_set_wait_hook(NULL): %s", comm_last_error(r->comm));
    if (r->rank == 1)
        sleep_ms(20);
    h_allreduce_checked(r, 64, 12, "allreduce after the hook was removed");
    if (r->rank == 0 && h.calls != before)
        h_fail(r, "the removed hook ran %d more times", h.calls - before);

    /* A period of a second: calls whose peers are there never wait that long. */
    h.calls = 0;
    if (r->rank == 0 && comm_set_wait_hook(r->comm, count_hook, &h, 1000000) != COMM_OK)
        h_fail(r, "comm_set_wait_hook(1 s): %s", comm_last_error(r->comm));
    int rounds = h_quick() ? 50 : 300;
    for (int i = 0; i < rounds && r->errors == 0; i++)
        h_allreduce_checked(r, 1 + (size_t)i * 37, 100 + (uint64_t)i, "allreduce in lockstep");
    if (r->rank == 0 && h.calls != 0)
        h_fail(r, "a 1 s hook ran %d times over %d calls in lockstep", h.calls, rounds);
}

static void run_while_waiting(bool procs)
{
    struct h_job job = {
        .nranks = 2, .kill_rank = -1, .procs = procs, .body = runs_while_waiting_body};
    expect_clean(h_run(&job), 2);
}

static void runs_while_waiting(void **s)
{
    (void)s;
    run_while_waiting(false);
}

static void runs_while_waiting_procs(void **s)
{
    (void)s;
    run_while_waiting(true);
}

/* ---- a nonzero return stops the call on every rank ---- */

static void stops_call_body(struct h_rank *r)
{
    struct hook_state h = {.comm = r->comm, .stop_at = 3};
    size_t n = 4096;
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    if (in == NULL || out == NULL) {
        h_fail(r, "out of memory");
        goto out;
    }
    h_fill(in, n, COMM_F32, 21, r->rank);
    h_poison(out, n, COMM_F32);
    if (r->rank == 0) {
        if (comm_set_wait_hook(r->comm, count_hook, &h, 1000) != COMM_OK)
            h_fail(r, "comm_set_wait_hook: %s", comm_last_error(r->comm));
    } else {
        sleep_ms(300); /* rank 0's hook stops its call after about 3 ms */
    }
    double t0 = h_now_ms();
    comm_status_t st = comm_allreduce(r->comm, in, out, n, COMM_F32, COMM_SUM, NULL);
    double waited = h_now_ms() - t0;
    const char *msg = comm_last_error(r->comm);
    if (r->rank == 0) {
        if (st != COMM_ERR_ABORTED || strstr(msg, "wait hook") == NULL ||
            strstr(msg, "returned 7") == NULL || h.calls != 3)
            h_fail(r,
                   "rank 0: %s after %d hook calls: %s (want COMM_ERR_ABORTED naming the "
                   "hook and its 7, after 3 calls)",
                   comm_status_string(st), h.calls, msg);
    } else if (st != COMM_ERR_PEER || strstr(msg, "wait hook") == NULL || waited > 5000) {
        h_fail(r, "rank 1: %s after %.0f ms: %s (want COMM_ERR_PEER at once, naming the hook)",
               comm_status_string(st), waited, msg);
    }
    if (!h_poisoned(out, n, COMM_F32))
        h_fail(r, "rank %d: the stopped call wrote its output", r->rank);
    /* Broken on every rank: the next call fails at once. */
    t0 = h_now_ms();
    st = comm_allreduce(r->comm, in, out, n, COMM_F32, COMM_SUM, NULL);
    if (st == COMM_OK || h_now_ms() - t0 > 5000)
        h_fail(r, "rank %d: the call after the stop: %s after %.0f ms (want an error at once)",
               r->rank, comm_status_string(st), h_now_ms() - t0);
out:
    free(in);
    free(out);
}

static void run_stops_call(bool procs)
{
    struct h_job job = {.nranks = 2, .kill_rank = -1, .procs = procs, .body = stops_call_body};
    expect_clean(h_run(&job), 2);
}

static void stops_call(void **s)
{
    (void)s;
    run_stops_call(false);
}

static void stops_call_procs(void **s)
{
    (void)s;
    run_stops_call(true);
}

/* ---- the arguments ---- */

struct busy {
    struct h_rank *r;
    _Atomic int *go; /* rank 1 makes its call once this is set */
    comm_status_t st;
};

static void *blocked_allreduce(void *arg)
{
    struct busy *b = arg;
    float x = 1, y;
    b->st = comm_allreduce(b->r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL);
    return NULL;
}

static void arguments_body(struct h_rank *r)
{
    _Atomic int *go = r->arg;
    if (r->rank == 1) {
        while (!atomic_load(go))
            sleep_ms(1);
        float x = 2, y;
        comm_status_t st = comm_allreduce(r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK || y != 3)
            h_fail(r, "rank 1: allreduce: %s (%g)", comm_status_string(st), (double)y);
        return;
    }
    struct hook_state h = {.comm = r->comm};
    comm_status_t st = comm_set_wait_hook(NULL, count_hook, &h, 0);
    if (st != COMM_ERR_INVALID || strstr(comm_last_error(NULL), "comm_set_wait_hook") == NULL)
        h_fail(r, "NULL comm: %s: %s", comm_status_string(st), comm_last_error(NULL));
    st = comm_set_wait_hook(r->comm, count_hook, &h, 1000001);
    if (st != COMM_ERR_INVALID || strstr(comm_last_error(r->comm), "period_us") == NULL)
        h_fail(r, "period_us 1000001: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    st = comm_set_wait_hook(r->comm, count_hook, &h, 1000000);
    if (st != COMM_OK)
        h_fail(r, "period_us 1000000: %s: %s", comm_status_string(st), comm_last_error(r->comm));

    /* Another thread is inside a call: the hook cannot change under it. */
    struct busy b = {.r = r, .go = go};
    pthread_t t;
    if (pthread_create(&t, NULL, blocked_allreduce, &b) != 0) {
        h_fail(r, "pthread_create failed");
        atomic_store(go, 1);
        return;
    }
    sleep_ms(50);
    st = comm_set_wait_hook(r->comm, NULL, NULL, 0);
    if (st != COMM_ERR_INVALID || strstr(comm_last_error(NULL), "another thread") == NULL)
        h_fail(r, "during another thread's call: %s: %s", comm_status_string(st),
               comm_last_error(NULL));
    atomic_store(go, 1);
    pthread_join(t, NULL);
    if (b.st != COMM_OK)
        h_fail(r, "the other thread's allreduce: %s: %s", comm_status_string(b.st),
               comm_last_error(r->comm));
}

static void arguments(void **s)
{
    (void)s;
    _Atomic int go = 0;
    struct h_job job = {.nranks = 2, .kill_rank = -1, .body = arguments_body, .arg = (void *)&go};
    expect_clean(h_run(&job), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(runs_while_waiting), cmocka_unit_test(runs_while_waiting_procs),
        cmocka_unit_test(stops_call),         cmocka_unit_test(stops_call_procs),
        cmocka_unit_test(arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
