/* SPDX-License-Identifier: MIT */
/*
 * Failures: mismatched calls, bad arguments on one rank, timeouts, comm_abort while
 * blocked, a process rank killed mid-call, ranks that leave, bad configurations.  No
 * rank may wait past its timeout, every failure reaches every peer, buffers of a
 * mismatched call stay untouched, and /dev/shm is empty afterwards.
 */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
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

static void expect_status(struct h_rank *r, comm_status_t got, comm_status_t want,
                          const char *must_contain)
{
    if (got != want) {
        h_fail(r, "got %s, want %s (%s)", comm_status_string(got), comm_status_string(want),
               comm_last_error(r->comm));
        return;
    }
    if (must_contain && strstr(comm_last_error(r->comm), must_contain) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\"", comm_last_error(r->comm), must_contain);
}

/* ---- mismatches: every rank fails, no buffer is written ---- */

enum mismatch { MIS_COUNT, MIS_DTYPE, MIS_OP, MIS_BARRIER, MIS_COUNT_BULK };

static void mismatch_body(struct h_rank *r)
{
    enum mismatch kind = *(enum mismatch *)r->arg;
    size_t count = kind == MIS_COUNT_BULK ? 100000 : 100;
    bool odd = r->rank == r->nranks - 1;
    float *send = malloc((count + 1) * sizeof(float)), *recv = malloc((count + 1) * sizeof(float));
    h_fill(send, count + 1, COMM_F32, 5, r->rank);
    h_poison(recv, count + 1, COMM_F32);
    comm_status_t st;
    if (kind == MIS_BARRIER && odd)
        st = comm_barrier(r->comm);
    else
        st = comm_allreduce(r->comm, send, recv,
                            count + ((kind == MIS_COUNT || kind == MIS_COUNT_BULK) && odd),
                            kind == MIS_DTYPE && odd ? COMM_I32 : COMM_F32,
                            kind == MIS_OP && odd ? COMM_MAX : COMM_SUM, NULL);
    expect_status(r, st, COMM_ERR_MISMATCH, "disagree");
    for (size_t i = 0; i < count + 1; i++) {
        uint32_t bits;
        memcpy(&bits, &recv[i], 4);
        if (bits != 0xffffffffu) {
            h_fail(r, "recvbuf element %zu was written by a mismatched call", i);
            break;
        }
    }
    /* The communicator stays broken, and says so at once. */
    double t0 = h_now_ms();
    st = comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_ERR_MISMATCH || h_now_ms() - t0 > 100)
        h_fail(r, "a call after the mismatch returned %s after %.0f ms", comm_status_string(st),
               h_now_ms() - t0);
    free(send);
    free(recv);
}

static void run_mismatch(enum mismatch kind, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = &kind,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    expect_clean(h_run(&job), n);
}

static void mismatch_count(void **s)
{
    (void)s;
    run_mismatch(MIS_COUNT, 3, false);
}
static void mismatch_count_bulk(void **s)
{
    (void)s;
    run_mismatch(MIS_COUNT_BULK, 2, true);
}
static void mismatch_dtype(void **s)
{
    (void)s;
    run_mismatch(MIS_DTYPE, 2, true);
}
static void mismatch_op(void **s)
{
    (void)s;
    run_mismatch(MIS_OP, 4, false);
}
static void mismatch_barrier(void **s)
{
    (void)s;
    run_mismatch(MIS_BARRIER, 2, false);
}

/* ---- bad arguments on one rank: it gets INVALID, its peers PEER, promptly ---- */

enum bad { BAD_NULL, BAD_DTYPE, BAD_OP, BAD_OVERLAP, BAD_STREAM, BAD_ADDEND };

static void invalid_body(struct h_rank *r)
{
    enum bad kind = *(enum bad *)r->arg;
    size_t count = 64;
    float *a = calloc(count * 2, sizeof(float)), *b = calloc(count, sizeof(float));
    h_fill(a, count * 2, COMM_F32, 9, r->rank);
    double t0 = h_now_ms();
    comm_status_t st = COMM_OK;
    if (r->rank != 1) {
        st = comm_allreduce(r->comm, a, b, count, COMM_F32, COMM_SUM, NULL);
        expect_status(r, st, COMM_ERR_PEER, "rank 1");
    } else {
        switch (kind) {
        case BAD_NULL:
            st = comm_allreduce(r->comm, NULL, b, count, COMM_F32, COMM_SUM, NULL);
            break;
        case BAD_DTYPE:
            st = comm_allreduce(r->comm, a, b, count, (comm_dtype_t)17, COMM_SUM, NULL);
            break;
        case BAD_OP:
            st = comm_allreduce(r->comm, a, b, count, COMM_F32, (comm_op_t)-2, NULL);
            break;
        case BAD_OVERLAP:
            st = comm_allreduce(r->comm, a, a + 1, count, COMM_F32, COMM_SUM, NULL);
            break;
        case BAD_STREAM:
            st = comm_allreduce(r->comm, a, b, count, COMM_F32, COMM_SUM, (void *)a);
            break;
        case BAD_ADDEND:
            st = comm_allreduce_add(r->comm, a, b, a, 7, count, COMM_F32, NULL);
            break;
        }
        expect_status(r, st, COMM_ERR_INVALID, "rank 1");
    }
    if (h_now_ms() - t0 > 2000)
        h_fail(r, "took %.0f ms to learn of the bad argument (timeout is 30 s)", h_now_ms() - t0);
    free(a);
    free(b);
}

static void run_invalid(enum bad kind, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = invalid_body,
                        .arg = &kind,
                        .kill_rank = -1,
                        .timeout_ms = 30000};
    expect_clean(h_run(&job), n);
}

static void invalid_null(void **s)
{
    (void)s;
    run_invalid(BAD_NULL, 3, false);
}
static void invalid_dtype(void **s)
{
    (void)s;
    run_invalid(BAD_DTYPE, 2, true);
}
static void invalid_op(void **s)
{
    (void)s;
    run_invalid(BAD_OP, 2, false);
}
static void invalid_overlap(void **s)
{
    (void)s;
    run_invalid(BAD_OVERLAP, 4, false);
}
static void invalid_stream(void **s)
{
    (void)s;
    run_invalid(BAD_STREAM, 2, true);
}
static void invalid_addend(void **s)
{
    (void)s;
    run_invalid(BAD_ADDEND, 3, true);
}

/* ---- timeout: a rank that never comes ---- */

static void timeout_body(struct h_rank *r)
{
    float x = 1.0f, y;
    if (r->rank == 1) {
        usleep(1500 * 1000); /* never calls; leaves after rank 0 gave up */
        return;
    }
    double t0 = h_now_ms();
    comm_status_t st = comm_allreduce(r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL);
    double ms = h_now_ms() - t0;
    expect_status(r, st, COMM_ERR_TIMEOUT, "timed out");
    if (ms < 250 || ms > 1400)
        h_fail(r, "timed out after %.0f ms, want about 300", ms);
}

static void timeout_threads(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 2, .body = timeout_body, .kill_rank = -1, .timeout_ms = 300};
    expect_clean(h_run(&job), 2);
}

static void timeout_procs(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .procs = true, .body = timeout_body, .kill_rank = -1, .timeout_ms = 300};
    expect_clean(h_run(&job), 2);
}

/* ---- comm_abort from another thread while blocked ---- */

static void *aborter(void *arg)
{
    usleep(100 * 1000);
    comm_abort(arg);
    return NULL;
}

static void abort_body(struct h_rank *r)
{
    float x[4096], y[4096];
    h_fill(x, 4096, COMM_F32, 3, r->rank);
    if (r->rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, aborter, r->comm);
        double t0 = h_now_ms();
        comm_status_t st = comm_allreduce(r->comm, x, y, 4096, COMM_F32, COMM_SUM, NULL);
        double ms = h_now_ms() - t0;
        pthread_join(t, NULL);
        expect_status(r, st, COMM_ERR_ABORTED, "comm_abort");
        if (ms > 1000)
            h_fail(r, "abort took %.0f ms to end the wait", ms);
        st = comm_barrier(r->comm);
        expect_status(r, st, COMM_ERR_ABORTED, NULL);
    } else {
        usleep(400 * 1000); /* arrives after rank 0 aborted */
        comm_status_t st = comm_allreduce(r->comm, x, y, 4096, COMM_F32, COMM_SUM, NULL);
        expect_status(r, st, COMM_ERR_PEER, "rank 0");
    }
}

static void abort_threads(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3, .body = abort_body, .kill_rank = -1, .timeout_ms = 30000};
    expect_clean(h_run(&job), 3);
}

static void abort_procs(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .procs = true, .body = abort_body, .kill_rank = -1, .timeout_ms = 30000};
    expect_clean(h_run(&job), 2);
}

/* ---- a process rank killed with SIGKILL mid-call ---- */

static void kill_body(struct h_rank *r)
{
    size_t count = *(size_t *)r->arg;
    float *x = malloc(count * 4), *y = malloc(count * 4);
    h_fill(x, count, COMM_F32, 4, r->rank);
    comm_status_t st = COMM_OK;
    long calls = 0;
    while (st == COMM_OK && calls < 100000000) {
        st = comm_allreduce(r->comm, x, y, count, COMM_F32, COMM_SUM, NULL);
        calls++;
    }
    r->elapsed_s = h_now_ms() / 1e3; /* when this rank noticed */
    expect_status(r, st, COMM_ERR_PEER, "rank 1");
    if (calls < 2)
        h_fail(r, "failed before rank 1 was killed");
    free(x);
    free(y);
}

static void run_kill(size_t count, int n)
{
    /* 300 ms after every rank's body started (kill_after_ready), not after the start:
     * under load (a sanitizer build beside other work) starting the processes alone took
     * longer, and rank 0 had not made its 2 calls before the kill. */
    struct h_job job = {.nranks = n,
                        .procs = true,
                        .body = kill_body,
                        .arg = &count,
                        .kill_rank = 1,
                        .kill_after_ms = 300,
                        .kill_after_ready = true,
                        .timeout_ms = 60000};
    expect_clean(h_run_killed(&job, 2000, "allreduce"), n);
}

static void kill_flag_path(void **s)
{
    (void)s;
    run_kill(16, 3);
}
static void kill_staged_path(void **s)
{
    (void)s;
    run_kill(1 << 20, 2);
}

/* ---- a rank that leaves: peers waiting for it learn at once ---- */

static void leave_body(struct h_rank *r)
{
    if (r->rank == 1)
        return; /* the harness destroys its communicator right away */
    usleep(100 * 1000);
    float x = 2, y;
    double t0 = h_now_ms();
    comm_status_t st = comm_allreduce(r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL);
    expect_status(r, st, COMM_ERR_PEER, "left the communicator");
    if (h_now_ms() - t0 > 1000)
        h_fail(r, "took %.0f ms to notice the rank that left", h_now_ms() - t0);
}

static void leave(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .procs = true, .body = leave_body, .kill_rank = -1, .timeout_ms = 30000};
    expect_clean(h_run(&job), 2);
}

/* ---- comm_init failures ---- */

static void init_bad_config(void **s)
{
    (void)s;
    comm_t *c = (comm_t *)0x1;
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    cfg.nranks = 2;
    cfg.rank = 2;
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "rank 2"));
    assert_ptr_equal(c, (comm_t *)0x1); /* output written only on success */
    cfg.rank = 0;
    cfg.nranks = 0;
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "nranks"));
    cfg.nranks = 1;
    strcpy(cfg.id.str, "arc1-0123456789abcdef0123456789abcdeg");
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "hex"));
    strcpy(cfg.id.str, "hello");
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    h_id_new(&cfg.id);
    cfg.size = 0;
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm_config_init"));
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    cfg.device = (comm_device_t)9;
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_int_equal(comm_init(NULL, &cfg), COMM_ERR_INVALID);
    assert_int_equal(comm_init(&c, NULL), COMM_ERR_INVALID);
    cfg.device = COMM_DEVICE_HOST;
    cfg.transport = "carrier-pigeon";
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "carrier-pigeon"));
    cfg.transport = NULL;
    h_env_push("ARCOMM_TIMEOUT_MS", "soon");
    assert_int_equal(comm_init(&c, &cfg), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_TIMEOUT_MS"));
    h_env_pop();
    assert_ptr_equal(c, (comm_t *)0x1);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void init_env(void **s)
{
    (void)s;
    comm_t *c = NULL;
    h_env_push("ARCOMM_RANK", NULL);
    h_env_push("ARCOMM_SIZE", "1");
    h_env_push("ARCOMM_ID", NULL);
    assert_int_equal(comm_init_env(&c), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_RANK"));
    setenv("ARCOMM_RANK", "zero", 1);
    assert_int_equal(comm_init_env(&c), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_RANK"));
    setenv("ARCOMM_RANK", "0", 1);
    assert_int_equal(comm_init_env(&c), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_ID"));
    setenv("ARCOMM_ID", "arc1-nothex", 1);
    assert_int_equal(comm_init_env(&c), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "ARCOMM_ID"));
    comm_id_t id;
    h_id_new(&id);
    setenv("ARCOMM_ID", id.str, 1);
    assert_int_equal(comm_init_env(&c), COMM_OK);
    assert_int_equal(comm_size(c), 1);
    float x = 3, y = 0;
    assert_int_equal(comm_allreduce(c, &x, &y, 1, COMM_F32, COMM_SUM, NULL), COMM_OK);
    assert_true(y == 3.0f);
    comm_destroy(c);
    h_env_pop();
    assert_int_equal(h_shm_leftovers(), 0);
}

struct init_case {
    int timeout_ms;
    int absent;   /* this rank never calls comm_init */
    int bad_size; /* this rank passes nranks + 1 */
    int twice;    /* this rank number is used by two ranks */
};

static void init_body(struct h_rank *r)
{
    const struct init_case *k = r->arg;
    if (r->rank == k->absent)
        return;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks - (k->twice >= 0) + (r->rank == k->bad_size);
    cfg.rank = r->rank == r->nranks - 1 && k->twice >= 0 ? k->twice : r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = k->timeout_ms;
    double t0 = h_now_ms();
    comm_status_t st = comm_init(&r->comm, &cfg);
    double ms = h_now_ms() - t0;
    r->status = st;
    r->elapsed_s = ms / 1e3;
    if (st == COMM_OK) {
        comm_destroy(r->comm);
        r->comm = NULL;
    } else if (strlen(comm_last_error(NULL)) < 20) {
        h_fail(r, "comm_init failed with a vague message: \"%s\"", comm_last_error(NULL));
    }
    if (ms > k->timeout_ms + 1500)
        h_fail(r, "comm_init took %.0f ms with a %d ms timeout", ms, k->timeout_ms);
}

static struct h_rank *run_init(struct init_case k, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .no_init = true,
                        .body = init_body,
                        .arg = &k,
                        .kill_rank = -1};
    return h_run(&job);
}

static void init_timeout(void **s)
{
    (void)s;
    for (int absent = 0; absent < 2; absent++) {
        struct h_rank *res = run_init(
            (struct init_case){.timeout_ms = 300, .absent = absent, .bad_size = -1, .twice = -1}, 2,
            absent == 1);
        assert_int_equal(res[1 - absent].status, COMM_ERR_TIMEOUT);
        expect_clean(res, 2);
    }
}

/* A process rank that joined and died: the ranks waiting for the rest learn at once. */
static void init_member_dies(void **s)
{
    (void)s;
    struct init_case k = {.timeout_ms = 10000, .absent = 2, .bad_size = -1, .twice = -1};
    struct h_job job = {.nranks = 3,
                        .procs = true,
                        .no_init = true,
                        .body = init_body,
                        .arg = &k,
                        .kill_rank = 1,
                        .kill_after_ms = 300};
    struct h_rank *res = h_run(&job);
    assert_int_equal(res[0].status, COMM_ERR_PEER);
    if (res[0].elapsed_s > 2.0)
        fail_msg("rank 0 learned of the dead rank after %.1f s", res[0].elapsed_s);
    res[1].errors = 0;
    expect_clean(res, 3);
}

static void init_nranks_disagree(void **s)
{
    (void)s;
    struct h_rank *res = run_init(
        (struct init_case){.timeout_ms = 3000, .absent = -1, .bad_size = 1, .twice = -1}, 3, false);
    assert_int_equal(res[1].status, COMM_ERR_INVALID);
    /* Rank 0 learns at once instead of at the timeout (the body checks the time); rank 2
     * either learns the same, or arrives after rank 0 removed the failed segment and
     * can only time out. */
    assert_int_equal(res[0].status, COMM_ERR_PEER);
    assert_true(res[2].status == COMM_ERR_PEER || res[2].status == COMM_ERR_TIMEOUT);
    expect_clean(res, 3);
}

static void init_rank_twice(void **s)
{
    (void)s;
    /* Ranks 0, 1 and a second rank 1 of a 2-rank communicator. */
    struct h_rank *res = run_init(
        (struct init_case){.timeout_ms = 1000, .absent = -1, .bad_size = -1, .twice = 1}, 3, true);
    /* The second rank 1 is refused (INVALID when it comes while the first is joining,
     * TIMEOUT when the communicator was complete and its name already gone). */
    assert_true(res[1].status != COMM_OK || res[2].status != COMM_OK);
    expect_clean(res, 3);
}

/* ---- ARCOMM_LOG_FILE: errors land in the file, %p expanded ---- */

static void log_file(void **s)
{
    (void)s;
    char pattern[128], path[128];
    snprintf(pattern, sizeof(pattern), "/tmp/arcomm-test-log-%%p-%d.txt", (int)getpid());
    snprintf(path, sizeof(path), "/tmp/arcomm-test-log-%d-%d.txt", (int)getpid(), (int)getpid());
    unlink(path);
    h_env_push("ARCOMM_LOG_FILE", pattern);
    /* A returned error is logged at info (the caller has it in comm_last_error). */
    h_env_push("ARCOMM_LOG_LEVEL", "info");
    comm_config_t cfg;
    comm_config_init(&cfg);
    h_id_new(&cfg.id);
    comm_t *c = NULL;
    assert_int_equal(comm_init(&c, &cfg), COMM_OK);
    h_env_pop();
    float x = 1;
    assert_int_equal(comm_allreduce(c, NULL, &x, 1, COMM_F32, COMM_SUM, NULL), COMM_ERR_INVALID);
    comm_destroy(c);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[600] = "";
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "arcomm info: rank 0: comm_allreduce: sendbuf is NULL") != NULL;
    fclose(f);
    unlink(path);
    assert_true(found);
}

/* ---- NULL and misuse of the handle-taking functions ---- */

static void null_handles(void **s)
{
    (void)s;
    float x = 1;
    assert_int_equal(comm_allreduce(NULL, &x, &x, 1, COMM_F32, COMM_SUM, NULL), COMM_ERR_INVALID);
    assert_int_equal(comm_allreduce_add(NULL, &x, &x, &x, 1, 1, COMM_F32, NULL), COMM_ERR_INVALID);
    assert_int_equal(comm_barrier(NULL), COMM_ERR_INVALID);
    assert_int_equal(comm_abort(NULL), COMM_ERR_INVALID);
    assert_int_equal(comm_destroy(NULL), COMM_OK);
    assert_int_equal(comm_rank(NULL), -1);
    assert_int_equal(comm_size(NULL), -1);
    assert_string_equal(comm_transport_name(NULL), "");
    void *p = NULL;
    assert_int_equal(comm_mem_alloc(NULL, 64, &p), COMM_ERR_INVALID);
    assert_int_equal(comm_id_new(NULL), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_status_string((comm_status_t)42), "unknown"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mismatch_count),   cmocka_unit_test(mismatch_count_bulk),
        cmocka_unit_test(mismatch_dtype),   cmocka_unit_test(mismatch_op),
        cmocka_unit_test(mismatch_barrier), cmocka_unit_test(invalid_null),
        cmocka_unit_test(invalid_dtype),    cmocka_unit_test(invalid_op),
        cmocka_unit_test(invalid_overlap),  cmocka_unit_test(invalid_stream),
        cmocka_unit_test(invalid_addend),   cmocka_unit_test(timeout_threads),
        cmocka_unit_test(timeout_procs),    cmocka_unit_test(abort_threads),
        cmocka_unit_test(abort_procs),      cmocka_unit_test(kill_flag_path),
        cmocka_unit_test(kill_staged_path), cmocka_unit_test(leave),
        cmocka_unit_test(init_bad_config),  cmocka_unit_test(init_env),
        cmocka_unit_test(init_timeout),     cmocka_unit_test(init_nranks_disagree),
        cmocka_unit_test(init_member_dies), cmocka_unit_test(log_file),
        cmocka_unit_test(init_rank_twice),  cmocka_unit_test(null_handles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
