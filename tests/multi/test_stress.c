/* SPDX-License-Identifier: MIT */
/*
 * Endurance: 10,000 back-to-back calls (every result checked), paths alternating call
 * by call (slot reuse across paths), two communicators used at once, and 8 ranks on
 * the machine's 2 cores.
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

/* Each call's data differs (seeded by the call number), so a stale slot shows. */
static void back_to_back_body(struct h_rank *r)
{
    long calls = *(long *)r->arg;
    enum { N = 16 };
    float x[N], y[N];
    for (long i = 0; i < calls && r->errors == 0; i++) {
        h_fill(x, N, COMM_F32, (uint64_t)i, r->rank);
        comm_status_t st = comm_allreduce(r->comm, x, y, N, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK) {
            h_fail(r, "call %ld: %s", i, comm_last_error(r->comm));
            break;
        }
        h_check(r, y, N, COMM_F32, COMM_SUM, (uint64_t)i, r->nranks, NULL, 0, false);
    }
}

static void back_to_back_threads(void **s)
{
    (void)s;
    long calls = 10000;
    struct h_job job = {.nranks = 2, .body = back_to_back_body, .arg = &calls, .kill_rank = -1};
    expect_clean(h_run(&job), 2);
}

static void back_to_back_procs(void **s)
{
    (void)s;
    long calls = 10000;
    struct h_job job = {
        .nranks = 2, .procs = true, .body = back_to_back_body, .arg = &calls, .kill_rank = -1};
    expect_clean(h_run(&job), 2);
}

static void oversubscribed_8(void **s)
{
    (void)s;
    long calls = h_quick() ? 300 : 2000;
    struct h_job job = {.nranks = 8, .body = back_to_back_body, .arg = &calls, .kill_rank = -1};
    expect_clean(h_run(&job), 8);
}

/* Flag, bulk and barrier interleaved: every path reuses slots another just used. */
static void mixed_body(struct h_rank *r)
{
    static const size_t counts[] = {3, 70000, 1, 5000, 300000, 0, 4096, 16385};
    float *x = malloc(300000 * 4), *y = malloc(300000 * 4);
    int rounds = h_quick() ? 10 : 60;
    for (int i = 0; i < rounds * 8 && r->errors == 0; i++) {
        size_t n = counts[i % 8];
        if (i % 5 == 4) {
            comm_status_t st = comm_barrier(r->comm);
            if (st != COMM_OK)
                h_fail(r, "barrier %d: %s", i, comm_last_error(r->comm));
        }
        h_fill(x, n, COMM_F32, (uint64_t)i, r->rank);
        h_poison(y, n, COMM_F32);
        comm_status_t st = comm_allreduce(r->comm, x, y, n, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK) {
            h_fail(r, "call %d: %s", i, comm_last_error(r->comm));
            break;
        }
        h_check(r, y, n, COMM_F32, COMM_SUM, (uint64_t)i, r->nranks, NULL, 0, false);
    }
    free(x);
    free(y);
}

static void mixed_threads_3(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3, .body = mixed_body, .kill_rank = -1};
    expect_clean(h_run(&job), 3);
}

static void mixed_procs_3(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "64K");
    struct h_job job = {.nranks = 3, .procs = true, .body = mixed_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    expect_clean(res, 3);
}

/* Two communicators over the same ranks, calls interleaved; and a third one of other
 * threads running beside them. */
struct two {
    comm_id_t second;
    comm_id_t other_group;
};

static void *other_group_rank(void *arg)
{
    struct h_rank *r = arg;
    const struct two *t = r->arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = r->rank;
    cfg.id = t->other_group;
    comm_t *c;
    if (comm_init(&c, &cfg) != COMM_OK) {
        h_fail(r, "other group: %s", comm_last_error(NULL));
        return NULL;
    }
    float x[100], y[100];
    for (int i = 0; i < 500; i++) {
        h_fill(x, 100, COMM_F32, 1000u + (uint64_t)i, r->rank);
        if (comm_allreduce(c, x, y, 100, COMM_F32, COMM_SUM, NULL) != COMM_OK) {
            h_fail(r, "other group call %d: %s", i, comm_last_error(c));
            break;
        }
        h_check(r, y, 100, COMM_F32, COMM_SUM, 1000u + (uint64_t)i, 2, NULL, 0, false);
    }
    comm_destroy(c);
    return NULL;
}

static void two_comms_body(struct h_rank *r)
{
    const struct two *t = r->arg;
    struct h_rank side = {.rank = r->rank, .nranks = 2, .arg = r->arg};
    pthread_t th;
    pthread_create(&th, NULL, other_group_rank, &side);

    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->nranks - 1 - r->rank; /* a different rank order on the second one */
    cfg.id = t->second;
    comm_t *b;
    if (comm_init(&b, &cfg) != COMM_OK) {
        h_fail(r, "second communicator: %s", comm_last_error(NULL));
        pthread_join(th, NULL);
        return;
    }
    double x[3000], y[3000], z[3000];
    for (int i = 0; i < 300 && r->errors == 0; i++) {
        size_t n = i % 2 ? 3000 : 10;
        h_fill(x, n, COMM_F64, (uint64_t)i, r->rank);
        h_fill(y, n, COMM_F64, 500u + (uint64_t)i, cfg.rank);
        if (comm_allreduce(r->comm, x, x, n, COMM_F64, COMM_MAX, NULL) != COMM_OK ||
            comm_allreduce(b, y, z, n, COMM_F64, COMM_SUM, NULL) != COMM_OK) {
            h_fail(r, "call %d failed", i);
            break;
        }
        h_check(r, x, n, COMM_F64, COMM_MAX, (uint64_t)i, r->nranks, NULL, 0, false);
        h_check(r, z, n, COMM_F64, COMM_SUM, 500u + (uint64_t)i, r->nranks, NULL, 0, false);
    }
    comm_destroy(b);
    pthread_join(th, NULL);
    if (side.errors)
        h_fail(r, "%s", side.first_error);
}

static void two_comms(void **s)
{
    (void)s;
    struct two t;
    h_id_new(&t.second);
    h_id_new(&t.other_group);
    struct h_job job = {.nranks = 2, .body = two_comms_body, .arg = &t, .kill_rank = -1};
    expect_clean(h_run(&job), 2);
}

/*
 * A random sequence of calls, the same on every rank (seeded alike): counts across the
 * flag, one-pass and staged paths and the slot boundaries, every dtype and op, in place
 * or not, barriers between, fused adds; every result checked.  Small slots and a low
 * flag threshold make every path switch and slot reuse happen often.
 */
static void random_body(struct h_rank *r)
{
    static const comm_dtype_t dts[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32, COMM_I64};
    uint64_t rng = 12345;
    size_t max = 200000;
    uint8_t *x = malloc(max * 8 + 64), *y = malloc(max * 8 + 64), *a = malloc(max * 8 + 64);
    int calls = h_quick() ? 60 : 400;
    for (int i = 0; i < calls && r->errors == 0; i++) {
        uint64_t v = h_rand(&rng);
        size_t count = v % 4 == 0 ? v % 40 : v % 4 == 1 ? v % 3000 : (size_t)(v >> 8) % max;
        comm_dtype_t dt = dts[(v >> 40) % 6];
        comm_op_t op = (comm_op_t)((v >> 44) % 3);
        bool inplace = (v >> 48) & 1, add = ((v >> 49) & 3) == 0 && op == COMM_SUM;
        if ((v >> 52) % 7 == 0) {
            if (comm_barrier(r->comm) != COMM_OK)
                h_fail(r, "call %d: barrier: %s", i, comm_last_error(r->comm));
            continue;
        }
        size_t es = comm_dtype_size(dt), off = (v >> 56) % 3;
        void *send = x + off * es, *recv = inplace ? send : y + off * es;
        uint64_t seed = 777 + (uint64_t)i;
        h_fill(send, count, dt, seed, r->rank);
        if (!inplace)
            h_poison(recv, count, dt);
        size_t rows = count && add ? (count % 5 == 0 ? count / 5 : count) : 0;
        if (rows)
            h_fill(a, rows, dt, seed + 1, 50 + r->rank);
        comm_status_t st = rows ? comm_allreduce_add(r->comm, send, recv, a, rows, count, dt, NULL)
                                : comm_allreduce(r->comm, send, recv, count, dt, op, NULL);
        if (st != COMM_OK) {
            h_fail(r, "call %d (count %zu dtype %d op %d): %s", i, count, (int)dt, (int)op,
                   comm_last_error(r->comm));
            break;
        }
        h_check(r, recv, count, dt, op, seed, r->nranks, rows ? a : NULL, rows, false);
    }
    free(x);
    free(y);
    free(a);
}

static void random_sequence(int n, bool procs)
{
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "64K");
    h_env_push("ARCOMM_FLAG_THRESHOLD", "2K");
    struct h_job job = {.nranks = n, .procs = procs, .body = random_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    expect_clean(res, n);
}

static void random_threads_3(void **s)
{
    (void)s;
    random_sequence(3, false);
}

static void random_procs_3(void **s)
{
    (void)s;
    random_sequence(3, true);
}

/* comm_barrier returns only once every rank entered it. */
static void barrier_body(struct h_rank *r)
{
    for (int i = 0; i < 3 && r->errors == 0; i++) {
        int late = i % r->nranks; /* a different rank arrives late each time */
        if (r->rank == late)
            usleep(150 * 1000);
        double t0 = h_now_ms();
        comm_status_t st = comm_barrier(r->comm);
        double ms = h_now_ms() - t0;
        if (st != COMM_OK)
            h_fail(r, "barrier %d: %s", i, comm_last_error(r->comm));
        else if (r->rank != late && ms < 100)
            h_fail(r, "barrier %d returned after %.1f ms, before rank %d (150 ms late) came", i, ms,
                   late);
    }
    if (strcmp(comm_transport_name(r->comm), "shm") != 0)
        h_fail(r, "transport \"%s\", want shm", comm_transport_name(r->comm));
}

static void barrier_threads(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3, .body = barrier_body, .kill_rank = -1};
    expect_clean(h_run(&job), 3);
}

static void barrier_procs(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3, .procs = true, .body = barrier_body, .kill_rank = -1};
    expect_clean(h_run(&job), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(back_to_back_threads), cmocka_unit_test(back_to_back_procs),
        cmocka_unit_test(oversubscribed_8),     cmocka_unit_test(mixed_threads_3),
        cmocka_unit_test(mixed_procs_3),        cmocka_unit_test(two_comms),
        cmocka_unit_test(barrier_threads),      cmocka_unit_test(barrier_procs),
        cmocka_unit_test(random_threads_3),     cmocka_unit_test(random_procs_3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
