/* SPDX-License-Identifier: MIT */
/*
 * comm_send, comm_recv and groups on host communicators, thread and process ranks:
 * ping-pong over sizes (empty, one element, the eager room's edge, 1 MiB, 17 MiB) and
 * dtype sizes, every element checked; each way a large message travels (a pointer
 * between threads, comm_mem_alloc offsets, CMA, staged chunks, the shared heap) forced
 * and seen taken; rings and pairs that would deadlock outside a group; messages kept in
 * order; count and dtype mismatches (both sides, the receive buffer untouched, the
 * communicator still usable); bad arguments; sends to oneself; a receive with no
 * sender (timeout), comm_abort of a blocked receive, and a peer that dies.
 */
#include "harness.h"
#include "rt_hooks.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void mismatch_body(struct h_rank *r);

enum kind { K_EAGER = 1, K_RAW = 2, K_OFFSET = 3, K_CMA = 4, K_STAGED = 5 };

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

/* h_run of a job that kills no rank (the harness kills job.kill_rank when >= 0). */
static struct h_rank *run_job(struct h_job *job)
{
    job->kill_rank = -1;
    return h_run(job);
}

/* comm_init with knob defaults (the harness's own init has none). */
static bool init_with(struct h_rank *r, const char *knobs, int timeout_ms)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = timeout_ms ? timeout_ms : 60000;
    cfg.knob_defaults = knobs;
    comm_status_t st = comm_init(&r->comm, &cfg);
    if (st != COMM_OK) {
        h_fail(r, "comm_init: %s: %s", comm_status_string(st), comm_last_error(NULL));
        return false;
    }
    return true;
}

static void *buf_alloc(struct h_rank *r, size_t bytes, bool pool)
{
    void *p = NULL;
    if (pool) {
        if (comm_mem_alloc(r->comm, bytes ? bytes : 64, &p) != COMM_OK)
            h_fail(r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(r->comm));
        return p;
    }
    p = malloc(bytes ? bytes : 64);
    if (p == NULL)
        h_fail(r, "malloc(%zu) failed", bytes);
    return p;
}

static void buf_free(struct h_rank *r, void *p, bool pool)
{
    if (pool)
        comm_mem_free(r->comm, p);
    else
        free(p);
}

/* ---- ping-pong ---- */

struct pingpong {
    const char *knobs; /* NULL: defaults */
    bool pool;         /* buffers from comm_mem_alloc */
    int want;          /* the kind large messages must take (0: CMA or staged) */
    bool big;          /* include 17 MiB */
};

static const comm_dtype_t all_dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
                                          COMM_I64, COMM_I8,  COMM_U8,   COMM_U32, COMM_U64};

/* One round: rank a sends count elements to rank b, which checks them and answers. */
static void round_trip(struct h_rank *r, int a, int b, size_t count, comm_dtype_t dt, uint64_t seed,
                       void *sbuf, void *rbuf)
{
    if (r->rank != a && r->rank != b)
        return;
    int peer = r->rank == a ? b : a;
    h_fill(sbuf, count, dt, seed, r->rank);
    h_poison(rbuf, count, dt);
    comm_status_t st;
    if (r->rank == a) {
        st = comm_send(r->comm, sbuf, count, dt, peer, NULL);
        if (st == COMM_OK)
            st = comm_recv(r->comm, rbuf, count, dt, peer, NULL);
    } else {
        st = comm_recv(r->comm, rbuf, count, dt, peer, NULL);
        if (st == COMM_OK)
            st = comm_send(r->comm, sbuf, count, dt, peer, NULL);
    }
    if (st != COMM_OK) {
        h_fail(r, "%zu x %s with rank %d: %s: %s", count, h_dtype_name(dt), peer,
               comm_status_string(st), comm_last_error(r->comm));
        return;
    }
    if (!h_holds(rbuf, count, dt, COMM_SUM, seed, peer))
        h_fail(r, "%zu x %s from rank %d: wrong data", count, h_dtype_name(dt), peer);
}

static void pingpong_body(struct h_rank *r)
{
    const struct pingpong *pp = r->arg;
    if (!init_with(r, pp->knobs, 0))
        return;
    uint64_t eager = 0, before[6] = {0}, after[6] = {0};
    rt_hook_p2p_info(r->comm, &eager, NULL, before);
    size_t most = pp->big && !h_quick() ? (17u << 20) : (1u << 20);
    void *sbuf = buf_alloc(r, most + 8, pp->pool), *rbuf = buf_alloc(r, most + 8, pp->pool);
    if (sbuf == NULL || rbuf == NULL)
        goto out;
    uint64_t seed = 100;
    for (size_t d = 0; d < sizeof(all_dtypes) / sizeof(all_dtypes[0]); d++) {
        comm_dtype_t dt = all_dtypes[d];
        size_t es = comm_dtype_size(dt);
        size_t sizes[] = {0, es, eager - es, eager, eager + es, 1u << 20, 17u << 20};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            /* The largest sizes once per dtype size. */
            if (sizes[i] > most || (sizes[i] > eager + es && d > 0 && dt != COMM_U8 &&
                                    dt != COMM_F16 && dt != COMM_F64))
                continue;
            for (int a = 0; a < r->nranks; a++)
                for (int b = 0; b < r->nranks; b++)
                    if (a != b && (a == 0 || b == 0))
                        round_trip(r, a, b, sizes[i] / es, dt, seed++, sbuf, rbuf);
        }
    }
    rt_hook_p2p_info(r->comm, NULL, NULL, after);
    uint64_t got[6];
    for (int k = 0; k < 6; k++)
        got[k] = after[k] - before[k];
    if (got[K_EAGER] == 0)
        h_fail(r, "no message came through the eager room");
    if (pp->want) {
        for (int k = K_RAW; k <= K_STAGED; k++)
            if ((k == pp->want) != (got[k] != 0))
                h_fail(r, "large messages: %llu came as kind %d (want only kind %d)",
                       (unsigned long long)got[k], k, pp->want);
    } else if (got[K_CMA] + got[K_STAGED] == 0 || got[K_RAW] + got[K_OFFSET] != 0) {
        h_fail(r, "process ranks' malloc'd buffers came neither through CMA nor staged");
    }
out:
    buf_free(r, sbuf, pp->pool);
    buf_free(r, rbuf, pp->pool);
    comm_destroy(r->comm);
}

static void pingpong_run(int n, bool procs, const struct pingpong *pp)
{
    struct h_job job = {
        .nranks = n, .procs = procs, .no_init = true, .body = pingpong_body, .arg = (void *)pp};
    expect_clean(run_job(&job), n);
}

static void pingpong_threads(void **s)
{
    (void)s;
    struct pingpong pp = {.want = K_RAW, .big = true};
    pingpong_run(2, false, &pp);
    pingpong_run(3, false, &pp);
}

static void pingpong_procs_cma(void **s)
{
    (void)s;
    struct pingpong pp = {.want = 0, .big = true};
    pingpong_run(2, true, &pp);
}

static void pingpong_procs_staged(void **s)
{
    (void)s;
    struct pingpong pp = {.knobs = "ARCOMM_CMA_THRESHOLD=off", .want = K_STAGED, .big = true};
    pingpong_run(2, true, &pp);
    pingpong_run(3, true, &pp);
}

static void pingpong_procs_pool(void **s)
{
    (void)s;
    struct pingpong pp = {.pool = true, .want = K_OFFSET};
    pingpong_run(2, true, &pp);
}

/* Suite heap: process ranks under libarcomm_heap.so, malloc'd buffers in the heaps. */
static void pingpong_procs_heap(void **s)
{
    (void)s;
    struct pingpong pp = {.want = K_OFFSET};
    pingpong_run(2, true, &pp);
}

/* Runs the body r->arg on process ranks whose large messages are staged (CMA off). */
static void staged_body(struct h_rank *r)
{
    h_body_fn body = (h_body_fn)r->arg;
    if (!init_with(r, "ARCOMM_CMA_THRESHOLD=off", 0))
        return;
    body(r);
    uint64_t recvs[6] = {0};
    rt_hook_p2p_info(r->comm, NULL, NULL, recvs);
    if (recvs[K_CMA] != 0 || (recvs[K_STAGED] == 0 && body != mismatch_body))
        h_fail(r, "CMA off: %llu CMA, %llu staged messages", (unsigned long long)recvs[K_CMA],
               (unsigned long long)recvs[K_STAGED]);
    comm_destroy(r->comm);
}

/* ---- groups: rings, pairs both ways, order ---- */

static void ring_body(struct h_rank *r)
{
    size_t counts[] = {1, 100, 3000, 300000};
    size_t most = 300000;
    float *sbuf = malloc(most * sizeof(float)), *rbuf = malloc(most * sizeof(float));
    if (!sbuf || !rbuf) {
        h_fail(r, "malloc failed");
        goto out;
    }
    int to = (r->rank + 1) % r->nranks, from = (r->rank + r->nranks - 1) % r->nranks;
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        size_t n = counts[i];
        h_fill(sbuf, n, COMM_F32, 7 + i, r->rank);
        h_poison(rbuf, n, COMM_F32);
        comm_group_start();
        /* The send first on every rank: outside a group this ring deadlocks for large
         * messages (every send waits for a receive no rank has made). */
        comm_status_t a = comm_send(r->comm, sbuf, n, COMM_F32, to, NULL);
        comm_status_t b = comm_recv(r->comm, rbuf, n, COMM_F32, from, NULL);
        comm_status_t st = comm_group_end();
        if (a != COMM_OK || b != COMM_OK || st != COMM_OK) {
            h_fail(r, "ring of %zu: %s / %s / %s: %s", n, comm_status_string(a),
                   comm_status_string(b), comm_status_string(st), comm_last_error(r->comm));
            break;
        }
        if (!h_holds(rbuf, n, COMM_F32, COMM_SUM, 7 + i, from))
            h_fail(r, "ring of %zu: wrong data from rank %d", n, from);
    }
out:
    free(sbuf);
    free(rbuf);
}

static void ring(void **s)
{
    (void)s;
    int sizes[] = {2, 3, 5, 8};
    for (int procs = 0; procs < 2; procs++)
        for (size_t i = 0; i < 4; i++) {
            struct h_job job = {.nranks = sizes[i], .procs = procs, .body = ring_body};
            expect_clean(run_job(&job), sizes[i]);
        }
}

/* Both ranks of each pair send to and receive from the other, receive first on one
 * side, send first on the other; large enough to need the receiver (2 MiB). */
static void both_ways_body(struct h_rank *r)
{
    size_t n = (2u << 20) / 8;
    double *sbuf = malloc(n * 8), *rbuf = malloc(n * 8);
    int peer = r->rank ^ 1;
    if (!sbuf || !rbuf || peer >= r->nranks) {
        h_fail(r, "setup");
        goto out;
    }
    for (int round = 0; round < 3; round++) {
        h_fill(sbuf, n, COMM_F64, 50 + round, r->rank);
        h_poison(rbuf, n, COMM_F64);
        comm_group_start();
        comm_status_t a, b;
        if (r->rank & 1) {
            b = comm_recv(r->comm, rbuf, n, COMM_F64, peer, NULL);
            a = comm_send(r->comm, sbuf, n, COMM_F64, peer, NULL);
        } else {
            a = comm_send(r->comm, sbuf, n, COMM_F64, peer, NULL);
            b = comm_recv(r->comm, rbuf, n, COMM_F64, peer, NULL);
        }
        comm_status_t st = comm_group_end();
        if (a || b || st) {
            h_fail(r, "round %d: %s: %s", round, comm_status_string(st), comm_last_error(r->comm));
            break;
        }
        if (!h_holds(rbuf, n, COMM_F64, COMM_SUM, 50 + round, peer))
            h_fail(r, "round %d: wrong data from rank %d", round, peer);
    }
out:
    free(sbuf);
    free(rbuf);
}

static void both_ways(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 4, .procs = procs, .body = both_ways_body};
        expect_clean(run_job(&job), 4);
    }
    struct h_job staged = {.nranks = 2,
                           .procs = true,
                           .no_init = true,
                           .body = staged_body,
                           .arg = (void *)both_ways_body};
    expect_clean(run_job(&staged), 2);
}

/* Several messages of mixed sizes from rank 0 to rank 1, matched in call order: outside
 * a group (each send waits for its receive), then all in one group on each side.  8 and 9
 * elements of 4 bytes: the last message in the channel's first line (SHM_P2P_INLINE, 32
 * bytes) and the first in its eager room. */
#define ORDER_N 9
static const size_t order_counts[ORDER_N] = {3, 200000, 0, 8, 1, 9, 5000, 7, 70000};

static void order_body(struct h_rank *r)
{
    int32_t *bufs[ORDER_N];
    for (int i = 0; i < ORDER_N; i++) {
        bufs[i] = malloc(order_counts[i] * 4 + 4);
        if (bufs[i] == NULL)
            h_fail(r, "malloc failed");
    }
    for (int grouped = 0; grouped < 2 && r->errors == 0; grouped++) {
        if (grouped)
            comm_group_start();
        for (int i = 0; i < ORDER_N; i++) {
            uint64_t seed = 900 + (uint64_t)i + 10 * (uint64_t)grouped;
            comm_status_t st;
            if (r->rank == 0) {
                h_fill(bufs[i], order_counts[i], COMM_I32, seed, 0);
                st = comm_send(r->comm, bufs[i], order_counts[i], COMM_I32, 1, NULL);
            } else {
                h_poison(bufs[i], order_counts[i], COMM_I32);
                st = comm_recv(r->comm, bufs[i], order_counts[i], COMM_I32, 0, NULL);
            }
            if (st != COMM_OK)
                h_fail(r, "message %d: %s: %s", i, comm_status_string(st),
                       comm_last_error(r->comm));
        }
        comm_status_t st = grouped ? comm_group_end() : COMM_OK;
        if (st != COMM_OK)
            h_fail(r, "group: %s: %s", comm_status_string(st), comm_last_error(r->comm));
        if (r->rank == 1)
            for (int i = 0; i < ORDER_N; i++)
                if (!h_holds(bufs[i], order_counts[i], COMM_I32, COMM_SUM,
                             900 + (uint64_t)i + 10 * (uint64_t)grouped, 0))
                    h_fail(r, "message %d (grouped %d) wrong or out of order", i, grouped);
    }
    for (int i = 0; i < ORDER_N; i++)
        free(bufs[i]);
}

static void order(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2, .procs = procs, .body = order_body};
        expect_clean(run_job(&job), 2);
    }
}

/* ---- mismatches ---- */

struct mismatch_case {
    size_t send_count, recv_count;
    comm_dtype_t send_dt, recv_dt;
};

static void mismatch_body(struct h_rank *r)
{
    const struct mismatch_case cases[] = {
        {4, 5, COMM_F32, COMM_F32},           /* in the channel's first line, count */
        {10, 11, COMM_F32, COMM_F32},         /* eager, count */
        {10, 10, COMM_F32, COMM_I32},         /* eager, dtype */
        {300000, 300001, COMM_F32, COMM_F32}, /* large, count */
        {300000, 300000, COMM_U32, COMM_F32}, /* large, dtype of the same size */
        {300000, 600000, COMM_F32, COMM_F16}, /* large, the same bytes */
    };
    size_t most = 600001 * 4;
    uint8_t *buf = malloc(most);
    if (buf == NULL) {
        h_fail(r, "malloc failed");
        return;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct mismatch_case *m = &cases[i];
        comm_status_t st;
        if (r->rank == 0) {
            h_fill(buf, m->send_count, m->send_dt, 1, 0);
            st = comm_send(r->comm, buf, m->send_count, m->send_dt, 1, NULL);
        } else {
            h_poison(buf, m->recv_count, m->recv_dt);
            st = comm_recv(r->comm, buf, m->recv_count, m->recv_dt, 0, NULL);
            if (!h_poisoned(buf, m->recv_count, m->recv_dt))
                h_fail(r, "case %zu: the receive buffer was written", i);
        }
        if (st != COMM_ERR_MISMATCH)
            h_fail(r, "case %zu: %s, want COMM_ERR_MISMATCH", i, comm_status_string(st));
        else if (strstr(comm_last_error(r->comm), r->rank ? "rank 0 sent" : "rank 1's comm_recv") ==
                 NULL)
            h_fail(r, "case %zu: message does not name the peer: %s", i, comm_last_error(r->comm));
        /* The communicator stays usable: the next message arrives whole. */
        size_t n = 1000 + 299000 * (i >= 2);
        if (r->rank == 0) {
            h_fill(buf, n, COMM_F32, 2 + i, 0);
            st = comm_send(r->comm, buf, n, COMM_F32, 1, NULL);
        } else {
            h_poison(buf, n, COMM_F32);
            st = comm_recv(r->comm, buf, n, COMM_F32, 0, NULL);
            if (st == COMM_OK && !h_holds(buf, n, COMM_F32, COMM_SUM, 2 + i, 0))
                h_fail(r, "case %zu: the message after the mismatch is wrong", i);
        }
        if (st != COMM_OK)
            h_fail(r, "case %zu: after the mismatch: %s: %s", i, comm_status_string(st),
                   comm_last_error(r->comm));
    }
    free(buf);
}

static void mismatch(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2, .procs = procs, .body = mismatch_body};
        expect_clean(run_job(&job), 2);
    }
    /* Staged large messages too (the receiver refuses before the chunks move). */
    struct h_job job = {.nranks = 2,
                        .procs = true,
                        .no_init = true,
                        .body = staged_body,
                        .arg = (void *)mismatch_body};
    expect_clean(run_job(&job), 2);
}

/* ---- arguments and sends to oneself ---- */

static void args_body(struct h_rank *r)
{
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    comm_status_t st;
    /* A send to oneself in a group is a copy to the matching receive. */
    comm_group_start();
    comm_recv(r->comm, y, 4, COMM_F32, r->rank, NULL);
    comm_send(r->comm, x, 4, COMM_F32, r->rank, NULL);
    st = comm_group_end();
    if (st != COMM_OK || memcmp(x, y, sizeof(x)) != 0)
        h_fail(r, "self-send in a group: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    /* A mismatched one: MISMATCH, nothing written, still usable. */
    memset(y, 0, sizeof(y));
    comm_group_start();
    comm_send(r->comm, x, 4, COMM_F32, r->rank, NULL);
    comm_recv(r->comm, y, 3, COMM_F32, r->rank, NULL);
    st = comm_group_end();
    if (st != COMM_ERR_MISMATCH || y[0] != 0)
        h_fail(r, "mismatched self-send: %s", comm_status_string(st));
    /* Nesting: the inner end runs nothing. */
    comm_group_start();
    comm_group_start();
    comm_send(r->comm, x, 4, COMM_F32, r->rank, NULL);
    st = comm_group_end();
    memset(y, 0, sizeof(y));
    comm_recv(r->comm, y, 4, COMM_F32, r->rank, NULL);
    if (st != COMM_OK || y[0] != 0)
        h_fail(r, "the inner comm_group_end ran the calls");
    st = comm_group_end();
    if (st != COMM_OK || memcmp(x, y, sizeof(x)) != 0)
        h_fail(r, "nested group: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    /* Refused at once, before anything is exchanged (then the communicator is broken on
     * every rank, as for a collective's bad argument). */
    int which = *(int *)r->arg;
    if (which == 0)
        st = comm_send(r->comm, x, 4, COMM_F32, r->nranks, NULL);
    else if (which == 1)
        st = comm_recv(r->comm, y, 4, COMM_F32, -1, NULL);
    else if (which == 2)
        st = comm_recv(r->comm, NULL, 4, COMM_F32, r->rank ^ 1, NULL);
    else if (which == 3)
        st = comm_send(r->comm, x, 4, COMM_F32, r->rank, NULL);
    else if (which == 4)
        st = comm_send(r->comm, x, 4, (comm_dtype_t)99, r->rank ^ 1, NULL);
    else {
        /* A self-send without its receive in the group. */
        comm_group_start();
        comm_send(r->comm, x, 4, COMM_F32, r->rank, NULL);
        st = comm_group_end();
    }
    if (st != COMM_ERR_INVALID)
        h_fail(r, "bad argument %d: %s, want COMM_ERR_INVALID", which, comm_status_string(st));
    else if (strstr(comm_last_error(r->comm), "rank") == NULL)
        h_fail(r, "bad argument %d: message %s", which, comm_last_error(r->comm));
    if (comm_group_end() != COMM_ERR_INVALID)
        h_fail(r, "comm_group_end without a start was accepted");
}

static void args(void **s)
{
    (void)s;
    for (int which = 0; which < 6; which++) {
        struct h_job job = {.nranks = 2, .body = args_body, .arg = &which};
        expect_clean(run_job(&job), 2);
    }
}

/* ---- failures: timeout, abort, a dead peer ---- */

static void timeout_body(struct h_rank *r)
{
    if (r->rank == 1) {
        sleep_ms(4000); /* makes no call: rank 0's receive has no sender */
        return;
    }
    float x[8];
    double t0 = h_now_ms();
    comm_status_t st = comm_recv(r->comm, x, 8, COMM_F32, 1, NULL);
    double waited = h_now_ms() - t0;
    if (st != COMM_ERR_TIMEOUT)
        h_fail(r, "recv without a sender: %s, want COMM_ERR_TIMEOUT", comm_status_string(st));
    else if (waited < 1900 || waited > 15000)
        h_fail(r, "timed out after %.0f ms, the timeout is 2000 ms", waited);
    else if (strstr(comm_last_error(r->comm), "comm_recv from rank 1") == NULL ||
             strstr(comm_last_error(r->comm), "comm_send to rank 0") == NULL)
        h_fail(r, "timeout message: %s", comm_last_error(r->comm));
}

static void timeout(void **s)
{
    (void)s;
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2, .procs = procs, .timeout_ms = 2000, .body = timeout_body};
        expect_clean(run_job(&job), 2);
    }
}

static void *abort_later(void *arg)
{
    sleep_ms(200);
    comm_abort(arg);
    return NULL;
}

static void abort_body(struct h_rank *r)
{
    float x[8];
    if (r->rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, abort_later, r->comm);
        comm_status_t st = comm_recv(r->comm, x, 8, COMM_F32, 1, NULL);
        pthread_join(t, NULL);
        if (st != COMM_ERR_ABORTED)
            h_fail(r, "aborted recv: %s, want COMM_ERR_ABORTED", comm_status_string(st));
        return;
    }
    /* Rank 1 waits for a message rank 0 will never send: it learns of the abort. */
    double t0 = h_now_ms();
    comm_status_t st = comm_recv(r->comm, x, 8, COMM_F32, 0, NULL);
    if (st != COMM_ERR_PEER || h_now_ms() - t0 > 10000)
        h_fail(r, "peer of an aborted rank: %s after %.0f ms, want COMM_ERR_PEER",
               comm_status_string(st), h_now_ms() - t0);
}

static void abort_blocked(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 2, .timeout_ms = 30000, .body = abort_body};
    expect_clean(run_job(&job), 2);
}

static void dead_body(struct h_rank *r)
{
    if (r->rank == 1) {
        sleep_ms(30000); /* killed by the harness */
        return;
    }
    float x[8];
    comm_status_t st = comm_recv(r->comm, x, 8, COMM_F32, 1, NULL);
    r->elapsed_s = h_now_ms() / 1e3;
    if (st != COMM_ERR_PEER)
        h_fail(r, "recv from a dead rank: %s, want COMM_ERR_PEER", comm_status_string(st));
    else if (strstr(comm_last_error(r->comm), "rank 1") == NULL)
        h_fail(r, "message: %s", comm_last_error(r->comm));
}

static void dead_peer(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 2,
                        .procs = true,
                        .timeout_ms = 30000,
                        .body = dead_body,
                        .kill_rank = 1,
                        .kill_after_ready = true};
    h_run_killed(&job, 5000, "recv from a killed rank");
}

int main(void)
{
    if (getenv("P2P_TEST_HEAP") != NULL) {
        const struct CMUnitTest heap[] = {cmocka_unit_test(pingpong_procs_heap)};
        return cmocka_run_group_tests(heap, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pingpong_threads),
        cmocka_unit_test(pingpong_procs_cma),
        cmocka_unit_test(pingpong_procs_staged),
        cmocka_unit_test(pingpong_procs_pool),
        cmocka_unit_test(ring),
        cmocka_unit_test(both_ways),
        cmocka_unit_test(order),
        cmocka_unit_test(mismatch),
        cmocka_unit_test(args),
        cmocka_unit_test(timeout),
        cmocka_unit_test(abort_blocked),
        cmocka_unit_test(dead_peer),
    };
    /* P2P_TEST_ONLY=name runs that test alone (cmocka's own filter, where it has one). */
    const char *only = getenv("P2P_TEST_ONLY");
    if (only != NULL) {
        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            if (strcmp(tests[i].name, only) == 0)
                return _cmocka_run_group_tests("p2p", &tests[i], 1, NULL, NULL);
        fprintf(stderr, "no test %s\n", only);
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
