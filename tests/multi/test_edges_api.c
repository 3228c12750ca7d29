/* SPDX-License-Identifier: MIT */
/*
 * The handle's edges: comm_abort racing comm_destroy, two threads on one communicator,
 * a second comm_destroy, NULL handles and the message they leave; the edges of the
 * dtype and op tables.
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
#include <unistd.h>

#include <cmocka.h>

static void expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

/* ---- comm_abort in a watchdog thread while the owner destroys ---- */

struct race {
    comm_t *comm;
    _Atomic int go;
    _Atomic int destroyed;
    int ok, invalid, other;
    char msg[512]; /* comm_last_error(NULL) of the watchdog after its last abort */
};

static void *watchdog(void *arg)
{
    struct race *w = arg;
    while (!atomic_load(&w->go))
        ;
    /* Abort until the handle is gone: every call before comm_destroy returned must be
     * safe, and the ones after must say the handle is dead. */
    for (;;) {
        int done = atomic_load(&w->destroyed);
        comm_status_t st = comm_abort(w->comm);
        if (st == COMM_OK)
            w->ok++;
        else if (st == COMM_ERR_INVALID)
            w->invalid++;
        else
            w->other++;
        if (done || st == COMM_ERR_INVALID) {
            snprintf(w->msg, sizeof(w->msg), "%s", comm_last_error(NULL));
            break;
        }
    }
    return NULL;
}

static void abort_destroy_body(struct h_rank *r)
{
    int rounds = h_quick() ? 20 : 100;
    for (int i = 0; i < rounds; i++) {
        comm_t *comm = NULL;
        comm_config_t cfg;
        comm_config_init(&cfg);
        cfg.nranks = r->nranks;
        cfg.rank = r->rank;
        cfg.timeout_ms = 20000;
        /* A fresh id per round: rank 0 makes it, the others derive it the same way. */
        cfg.id = r->id;
        snprintf(cfg.id.str + strlen(cfg.id.str) - 4, 5, "%04x", (unsigned)i);
        comm_status_t st = comm_init(&comm, &cfg);
        if (st != COMM_OK) {
            h_fail(r, "round %d: comm_init: %s", i, comm_last_error(NULL));
            return;
        }
        struct race w = {.comm = comm};
        pthread_t t;
        pthread_create(&t, NULL, watchdog, &w);
        atomic_store(&w.go, 1);
        st = comm_destroy(comm);
        atomic_store(&w.destroyed, 1);
        pthread_join(t, NULL);
        if (st != COMM_OK)
            h_fail(r, "round %d: comm_destroy: %s: %s", i, comm_status_string(st),
                   comm_last_error(NULL));
        if (w.other != 0)
            h_fail(r, "round %d: comm_abort returned neither OK nor INVALID", i);
        if (w.invalid == 1 && strstr(w.msg, "not a live communicator") == NULL)
            h_fail(r, "round %d: abort after destroy says \"%s\"", i, w.msg);
    }
}

/* The aborts after comm_destroy are refused on purpose, each with a logged error: keep
 * them out of the test's output. */
static void run_abort_destroy(bool procs)
{
    struct h_job job = {
        .nranks = 2, .procs = procs, .no_init = true, .body = abort_destroy_body, .kill_rank = -1};
    setenv("ARCOMM_LOG_LEVEL", "none", 1);
    struct h_rank *res = h_run(&job);
    setenv("ARCOMM_LOG_LEVEL", "error", 1);
    expect_clean(res, 2);
}

static void abort_races_destroy(void **s)
{
    (void)s;
    run_abort_destroy(false);
}

static void abort_races_destroy_procs(void **s)
{
    (void)s;
    run_abort_destroy(true);
}

/* ---- two threads on one communicator ---- */

struct intruder {
    comm_t *comm;
    comm_status_t st;
    char msg[512];
};

static void *intrude(void *arg)
{
    struct intruder *in = arg;
    float x[16] = {0};
    usleep(100 * 1000); /* the first thread is inside its call by now (rank 1 comes late) */
    in->st = comm_allreduce(in->comm, x, x, 16, COMM_F32, COMM_SUM, NULL);
    snprintf(in->msg, sizeof(in->msg), "%s", comm_last_error(NULL));
    return NULL;
}

static void two_threads_body(struct h_rank *r)
{
    float x[16], y[16];
    h_fill(x, 16, COMM_F32, 11, r->rank);
    if (r->rank == 0) {
        /* Rank 1 arrives late, so this thread is inside the call when the second one
         * enters. */
        struct intruder in = {.comm = r->comm};
        pthread_t t;
        pthread_create(&t, NULL, intrude, &in);
        comm_status_t st = comm_allreduce(r->comm, x, y, 16, COMM_F32, COMM_SUM, NULL);
        pthread_join(t, NULL);
        if (st != COMM_OK)
            h_fail(r, "the first thread's call: %s: %s", comm_status_string(st),
                   comm_last_error(r->comm));
        else if (h_check(r, y, 16, COMM_F32, COMM_SUM, 11, r->nranks, NULL, 0, false) != 0)
            h_fail(r, "the first thread's call computed wrong values");
        if (in.st != COMM_ERR_INVALID || strstr(in.msg, "one thread at a time") == NULL)
            h_fail(r, "the second thread got %s: \"%s\"", comm_status_string(in.st), in.msg);
        /* The communicator is broken now, on every rank. */
        st = comm_barrier(r->comm);
        if (st != COMM_ERR_INVALID || strstr(comm_last_error(r->comm), "at once") == NULL)
            h_fail(r, "next call: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    } else {
        usleep(300 * 1000);
        comm_status_t st = comm_allreduce(r->comm, x, y, 16, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK)
            h_fail(r, "call 0: %s: %s", comm_status_string(st), comm_last_error(r->comm));
        st = comm_barrier(r->comm);
        if (st != COMM_ERR_PEER || strstr(comm_last_error(r->comm), "at once") == NULL)
            h_fail(r, "next call: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    }
}

static void two_threads_one_comm(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .body = two_threads_body, .kill_rank = -1, .timeout_ms = 20000};
    expect_clean(h_run(&job), 2);
}

static void two_threads_one_comm_procs(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .procs = true, .body = two_threads_body, .kill_rank = -1, .timeout_ms = 20000};
    expect_clean(h_run(&job), 2);
}

/* ---- comm_destroy while a call runs; comm_destroy twice ---- */

static void *blocked_call(void *arg)
{
    struct intruder *in = arg;
    float x[16] = {0};
    in->st = comm_allreduce(in->comm, x, x, 16, COMM_F32, COMM_SUM, NULL);
    return NULL;
}

static comm_t *init_here(struct h_rank *r)
{
    comm_t *comm = NULL;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 20000;
    if (comm_init(&comm, &cfg) != COMM_OK)
        h_fail(r, "comm_init: %s", comm_last_error(NULL));
    return comm;
}

static void destroy_misuse_body(struct h_rank *r)
{
    comm_t *comm = init_here(r);
    if (comm == NULL)
        return;
    if (r->rank == 0) {
        struct intruder in = {.comm = comm};
        pthread_t t;
        pthread_create(&t, NULL, blocked_call, &in);
        usleep(100 * 1000); /* the call is blocked: rank 1 has not arrived */
        comm_status_t st = comm_destroy(comm);
        if (st != COMM_ERR_INVALID || strstr(comm_last_error(NULL), "still running") == NULL)
            h_fail(r, "destroy during a call: %s: %s", comm_status_string(st),
                   comm_last_error(NULL));
        comm_abort(comm);
        pthread_join(t, NULL);
        if (in.st != COMM_ERR_ABORTED)
            h_fail(r, "the aborted call returned %s", comm_status_string(in.st));
        st = comm_destroy(comm);
        if (st != COMM_OK)
            h_fail(r, "destroy after the call: %s: %s", comm_status_string(st),
                   comm_last_error(NULL));
        st = comm_destroy(comm);
        if (st != COMM_ERR_INVALID || strstr(comm_last_error(NULL), "destroyed already") == NULL)
            h_fail(r, "second destroy: %s: %s", comm_status_string(st), comm_last_error(NULL));
    } else {
        usleep(400 * 1000);
        float x[16] = {0};
        comm_status_t st = comm_allreduce(comm, x, x, 16, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_ERR_PEER)
            h_fail(r, "after rank 0 aborted: %s", comm_status_string(st));
        comm_destroy(comm);
    }
}

static void destroy_misuse(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 2, .no_init = true, .body = destroy_misuse_body, .kill_rank = -1};
    expect_clean(h_run(&job), 2);
}

/* ---- NULL handles say so in comm_last_error(NULL), replacing an older message ---- */

static void null_handle_messages(void **s)
{
    (void)s;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 0;
    comm_t *comm = NULL;
    assert_int_equal(comm_init(&comm, &cfg), COMM_ERR_INVALID); /* leaves a message */
    float x = 1;
    void *p = NULL;
    comm_status_t st;
    char want[64];
#define ONE(fn, call)                                                                              \
    do {                                                                                           \
        st = (call);                                                                               \
        assert_int_equal(st, COMM_ERR_INVALID);                                                    \
        snprintf(want, sizeof(want), "%s: comm is NULL", fn);                                      \
        if (strstr(comm_last_error(NULL), want) == NULL)                                           \
            fail_msg("%s(NULL) left \"%s\"", fn, comm_last_error(NULL));                           \
    } while (0)
    ONE("comm_allreduce", comm_allreduce(NULL, &x, &x, 1, COMM_F32, COMM_SUM, NULL));
    ONE("comm_allreduce_add", comm_allreduce_add(NULL, &x, &x, &x, 1, 1, COMM_F32, NULL));
    ONE("comm_barrier", comm_barrier(NULL));
    ONE("comm_mem_alloc", comm_mem_alloc(NULL, 64, &p));
    ONE("comm_mem_free", comm_mem_free(NULL, &x));
    ONE("comm_abort", comm_abort(NULL));
#undef ONE
}

/* ---- the dtype and op tables: every value in them works, the first one past fails ---- */

static comm_t *one_rank_comm(void)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    comm_t *comm = NULL;
    assert_int_equal(comm_init(&comm, &cfg), COMM_OK);
    return comm;
}

static void table_edges(void **s)
{
    (void)s;
    static const size_t sizes[] = {4, 2, 2, 8, 4, 8, 1, 1, 4, 8};
    uint64_t x[16], y[16];
    for (int dt = 0; dt < 10; dt++)
        assert_int_equal(comm_dtype_size((comm_dtype_t)dt), sizes[dt]);
    assert_int_equal(comm_dtype_size((comm_dtype_t)10), 0);
    assert_int_equal(comm_dtype_size((comm_dtype_t)-1), 0);

    /* One rank: every dtype x op is its own input (AVG of one rank too), but AVG of
     * an integer, which is refused and leaves the communicator usable. */
    comm_t *comm = one_rank_comm();
    for (int dt = 0; dt < 10; dt++) {
        for (int op = 0; op < 5; op++) {
            bool refuse = op == COMM_AVG && h_dtype_is_int((comm_dtype_t)dt);
            h_fill(x, 16, (comm_dtype_t)dt, 3, 0);
            memset(y, 0x77, sizeof(y));
            comm_status_t st =
                comm_allreduce(comm, x, y, 16, (comm_dtype_t)dt, (comm_op_t)op, NULL);
            if (st != (refuse ? COMM_ERR_UNSUPPORTED : COMM_OK))
                fail_msg("%s %s: %s: %s", h_dtype_name((comm_dtype_t)dt), h_op_name((comm_op_t)op),
                         comm_status_string(st), comm_last_error(comm));
            size_t bytes = 16 * comm_dtype_size((comm_dtype_t)dt);
            if (!refuse && memcmp(x, y, bytes) != 0)
                fail_msg("%s %s of one rank is not its input", h_dtype_name((comm_dtype_t)dt),
                         h_op_name((comm_op_t)op));
        }
    }
    assert_int_equal(comm_destroy(comm), COMM_OK);

    /* The first op and dtype past the tables: INVALID, with the value named. */
    comm = one_rank_comm();
    assert_int_equal(comm_allreduce(comm, x, y, 4, COMM_F32, (comm_op_t)5, NULL), COMM_ERR_INVALID);
    if (strstr(comm_last_error(comm), "op 5 is not a comm_op_t") == NULL)
        fail_msg("op 5 left \"%s\"", comm_last_error(comm));
    assert_int_equal(comm_destroy(comm), COMM_OK);
    comm = one_rank_comm();
    assert_int_equal(comm_allreduce(comm, x, y, 4, (comm_dtype_t)10, COMM_SUM, NULL),
                     COMM_ERR_INVALID);
    if (strstr(comm_last_error(comm), "dtype 10 is not a comm_dtype_t") == NULL)
        fail_msg("dtype 10 left \"%s\"", comm_last_error(comm));
    assert_int_equal(comm_destroy(comm), COMM_OK);
    assert_int_equal(h_shm_leftovers(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(abort_races_destroy),  cmocka_unit_test(abort_races_destroy_procs),
        cmocka_unit_test(two_threads_one_comm), cmocka_unit_test(two_threads_one_comm_procs),
        cmocka_unit_test(destroy_misuse),       cmocka_unit_test(null_handle_messages),
        cmocka_unit_test(table_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
