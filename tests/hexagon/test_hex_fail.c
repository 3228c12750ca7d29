/* SPDX-License-Identifier: MIT */
/*
 * Failures on Hexagon communicators: a stalled session (entry-fence timeout, the
 * peers fail with its status), an error status injected into one session reaching
 * every other, comm_abort while a session waits at a fence, a wait hook that stops the
 * call there; afterwards the communicator answers at once with an error.
 */
#include "hex_test_util.h"
#include "comm_base.h"
#include "hexagon/hexagon.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define COUNT 5000

struct fail_arg {
    int mode;       /* 0 stall rank 2, 1 inject on rank 1, 2 abort rank 0, 3 rank 0's hook stops */
    int hook_calls; /* mode 3: how often rank 0's hook ran */
    double second_ms[HT_MAX_RANKS];
    comm_status_t second[HT_MAX_RANKS];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *abort_later(void *p)
{
    usleep(200000);
    comm_abort(p);
    return NULL;
}

/* Mode 3's hook: stops rank 0's call on its second run. */
static int stop_second(comm_t *comm, void *arg)
{
    (void)comm;
    struct fail_arg *f = arg;
    return ++f->hook_calls == 2 ? 5 : 0;
}

static void body(struct ht_rank *r)
{
    struct fail_arg *f = r->user;
    float *buf;
    r->status = comm_mem_alloc(r->comm, COUNT * sizeof(float), (void **)&buf);
    if (r->status != COMM_OK)
        return;
    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(r->rank + 1) * 0.25f + (float)i;
    pthread_t th;
    bool aborter = false;
    if (f->mode == 0 && r->rank == 2)
        hex_debug_stall(r->comm, 1500);
    if (f->mode == 1 && r->rank == 1)
        hex_debug_inject_status(r->comm, COMM_ERR_SYSTEM);
    if ((f->mode == 2 || f->mode == 3) && r->rank == 1)
        hex_debug_stall(r->comm, 1500);
    if (f->mode == 3 && r->rank == 0 &&
        comm_set_wait_hook(r->comm, stop_second, f, 10000) != COMM_OK)
        return;
    if (f->mode == 2 && r->rank == 0)
        aborter = pthread_create(&th, NULL, abort_later, r->comm) == 0;
    r->status = comm_allreduce(r->comm, buf, buf, COUNT, COMM_F32, COMM_SUM, NULL);
    snprintf(r->msg, sizeof(r->msg), "%s", comm_last_error(r->comm));
    if (aborter)
        pthread_join(th, NULL);
    double t0 = now_ms();
    f->second[r->rank] = comm_allreduce(r->comm, buf, buf, COUNT, COMM_F32, COMM_SUM, NULL);
    f->second_ms[r->rank] = now_ms() - t0;
}

static void check_broken(const struct fail_arg *f, int n)
{
    for (int r = 0; r < n; r++) {
        assert_int_not_equal(f->second[r], COMM_OK);
        assert_true(f->second_ms[r] < 100.0);
    }
}

static void test_stalled_session(void **state)
{
    (void)state;
    ht_env_set("ARCOMM_HEX_FENCE_TIMEOUT_MS", "300");
    struct fail_arg f = {.mode = 0};
    struct ht_rank out[3];
    ht_run_threads(3, body, &f, out);
    ht_env_restore();
    int timeouts = 0;
    for (int r = 0; r < 2; r++) {
        assert_true(out[r].status == COMM_ERR_TIMEOUT || out[r].status == COMM_ERR_PEER);
        if (out[r].status == COMM_ERR_TIMEOUT) {
            timeouts++;
            assert_non_null(strstr(out[r].msg, "rank 2 did not reach the entry fence"));
        }
    }
    assert_true(timeouts >= 1);
    /* The stalled session arrives to find its peers' timeout in their fences. */
    assert_int_equal(out[2].status, COMM_ERR_PEER);
    assert_non_null(strstr(out[2].msg, "COMM_ERR_TIMEOUT"));
    check_broken(&f, 3);
}

static void test_injected_status(void **state)
{
    (void)state;
    struct fail_arg f = {.mode = 1};
    struct ht_rank out[4];
    ht_run_threads(4, body, &f, out);
    /* Rank 1 reports its own status, or (when a peer saw its fence first and broke the
     * handshake) the peer's echo of it. */
    assert_true(out[1].status == COMM_ERR_SYSTEM || out[1].status == COMM_ERR_PEER);
    for (int r = 0; r < 4; r++) {
        if (r == 1)
            continue;
        assert_int_equal(out[r].status, COMM_ERR_PEER);
        /* Directly from rank 1's fence, or relayed by a peer that saw it first. */
        assert_non_null(strstr(out[r].msg, "rank 1"));
        assert_non_null(strstr(out[r].msg, "COMM_ERR_SYSTEM"));
    }
    check_broken(&f, 4);
}

static void test_abort_at_fence(void **state)
{
    (void)state;
    ht_env_set("ARCOMM_HEX_FENCE_TIMEOUT_MS", "10000");
    struct fail_arg f = {.mode = 2};
    struct ht_rank out[2];
    double t0 = now_ms();
    ht_run_threads(2, body, &f, out);
    ht_env_restore();
    assert_true(now_ms() - t0 < 5000.0);
    assert_int_equal(out[0].status, COMM_ERR_ABORTED);
    assert_int_equal(out[1].status, COMM_ERR_PEER);
    check_broken(&f, 2);
}

static void test_hook_stops_at_fence(void **state)
{
    (void)state;
    ht_env_set("ARCOMM_HEX_FENCE_TIMEOUT_MS", "10000");
    struct fail_arg f = {.mode = 3};
    struct ht_rank out[2];
    double t0 = now_ms();
    ht_run_threads(2, body, &f, out);
    ht_env_restore();
    assert_true(now_ms() - t0 < 5000.0);
    assert_int_equal(f.hook_calls, 2);
    assert_int_equal(out[0].status, COMM_ERR_ABORTED);
    assert_non_null(strstr(out[0].msg, "wait hook"));
    assert_int_equal(out[1].status, COMM_ERR_PEER);
    check_broken(&f, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_session),
        cmocka_unit_test(test_injected_status),
        cmocka_unit_test(test_abort_at_fence),
        cmocka_unit_test(test_hook_stops_at_fence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
