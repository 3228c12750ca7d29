/* SPDX-License-Identifier: MIT */
/*
 * The collectives beyond allreduce when a call must fail (the sweeps are in
 * test_collectives.c, whose main() runs these tests): every pair of collectives that
 * disagree, and one collective with another count, dtype, op or root (MISMATCH on every
 * rank, naming both calls, no recvbuf written); bad arguments on one rank and on all
 * (INVALID on the bad rank, PEER on the others, nothing written), beside what is not a
 * mistake; and a backend without the collectives.
 */
#include "collectives_common.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static bool rooted(enum kind k)
{
    return k == K_BROADCAST || k == K_REDUCE;
}

/* ---- disagreeing calls: every rank MISMATCH, naming both calls, no recvbuf written ---- */

struct mis {
    enum kind a, b; /* rank 0.. make a, the last rank makes b */
    size_t count_a, count_b;
    comm_dtype_t dt_a, dt_b;
    comm_op_t op_a, op_b;
    int root_a, root_b;
    const char *want_a, *want_b; /* in every rank's message */
};

static void mismatch_body(struct h_rank *r)
{
    const struct mis *m = r->arg;
    bool odd = r->rank == r->nranks - 1;
    enum kind k = odd ? m->b : m->a;
    size_t count = odd ? m->count_b : m->count_a;
    comm_dtype_t dt = odd ? m->dt_b : m->dt_a;
    size_t es = comm_dtype_size(dt), elems = (size_t)r->nranks * (count + 1) + 1;
    uint8_t *send = malloc(elems * es), *recv = malloc(elems * es);
    h_fill(send, elems, dt, 5, r->rank);
    h_poison(recv, elems, dt);
    comm_status_t st = co_make_call(r->comm, k, send, recv, count, dt, odd ? m->op_b : m->op_a,
                                    odd ? m->root_b : m->root_a);
    const char *msg = comm_last_error(r->comm);
    if (st != COMM_ERR_MISMATCH)
        h_fail(r, "%s vs %s: got %s, want COMM_ERR_MISMATCH (%s)", co_kind_names[m->a],
               co_kind_names[m->b], comm_status_string(st), msg);
    else if (strstr(msg, "disagree") == NULL || strstr(msg, m->want_a) == NULL ||
             strstr(msg, m->want_b) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\" or \"%s\"", msg, m->want_a, m->want_b);
    if (!h_poisoned(recv, elems, dt))
        h_fail(r, "%s vs %s: a mismatched call wrote recvbuf", co_kind_names[m->a],
               co_kind_names[m->b]);
    free(send);
    free(recv);
}

static void run_mismatch(const struct mis *m, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = (void *)m,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

/* How a message names each call ("made reduce " is not "made reduce_scatter"). */
static const char *const made[K_ALL] = {"made broadcast ",      "made reduce ",   "made allgather ",
                                        "made reduce_scatter ", "made alltoall ", "made allreduce ",
                                        "made comm_barrier"};

/* Every pair of different collectives, small (flag path) and large (bulk handshake). */
void mismatch_pairs(void **s)
{
    (void)s;
    size_t counts[2] = {10, 300000};
    for (int a = 0; a < K_ALL; a++) {
        for (int b = a + 1; b < K_ALL; b++) {
            for (int ci = 0; ci < 2; ci++) {
                if (ci == 1 && h_quick() && (a + b) % 3 != 0)
                    continue;
                struct mis m = {.a = a,
                                .b = b,
                                .count_a = counts[ci],
                                .count_b = counts[ci],
                                .dt_a = COMM_F32,
                                .dt_b = COMM_F32,
                                .root_a = 0,
                                .root_b = 0,
                                .want_a = made[a],
                                .want_b = made[b]};
                /* Thread ranks, and process ranks for the large calls. */
                run_mismatch(&m, ci == 0 ? 2 : 3, ci == 1 && (a + b) % 2 == 0);
            }
        }
    }
}

/* The same collective with a different count, dtype (of the same size), op or root. */
void mismatch_fields(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++) {
        struct mis base = {.a = k,
                           .b = k,
                           .count_a = 10,
                           .count_b = 10,
                           .dt_a = COMM_F32,
                           .dt_b = COMM_F32,
                           .want_a = made[k],
                           .want_b = made[k]};
        struct mis m = base;
        m.count_b = 11;
        m.want_a = "count 10";
        m.want_b = "count 11";
        run_mismatch(&m, 3, false);
        m = base;
        m.dt_b = COMM_I32;
        m.want_a = "dtype f32";
        m.want_b = "dtype i32";
        run_mismatch(&m, 2, k % 2 == 1);
        if (co_reduces(k)) {
            m = base;
            m.op_b = COMM_MAX;
            m.want_a = "op sum";
            m.want_b = "op max";
            run_mismatch(&m, 2, false);
        }
        if (rooted(k)) {
            m = base;
            m.root_b = 1;
            m.want_a = "root 0";
            m.want_b = "root 1";
            run_mismatch(&m, 3, k == K_REDUCE);
        }
        /* Count 0 is a call too: matched like any other. */
        m = base;
        m.count_a = 0;
        m.count_b = 0;
        m.b = (enum kind)((k + 1) % K_SWEPT);
        m.want_b = made[m.b];
        run_mismatch(&m, 2, false);
    }
}

/* ---- bad arguments: INVALID on the bad rank, PEER on the others, nothing written ---- */

enum bad {
    BAD_ROOT_LOW,   /* root -1 */
    BAD_ROOT_HIGH,  /* root nranks */
    BAD_NULL_SEND,  /* sendbuf NULL where it is read */
    BAD_NULL_RECV,  /* recvbuf NULL where it is written */
    BAD_OVERLAP,    /* sendbuf == recvbuf where that is not the in-place form */
    BAD_OVERLAP_BY, /* buffers one element apart */
    BAD_COUNT,      /* nranks * count * esize overflows */
    BAD_DTYPE,
    BAD_COUNT_OF
};

struct inv {
    enum kind k;
    enum bad bad;
    bool all; /* every rank passes the bad arguments */
};

/* Does the bad argument apply to collective k (else it is not a mistake there)? */
static bool bad_applies(enum kind k, enum bad b)
{
    if (b == BAD_ROOT_LOW || b == BAD_ROOT_HIGH)
        return rooted(k);
    if (b == BAD_COUNT)
        return k == K_ALLGATHER || k == K_REDUCE_SCATTER || k == K_ALLTOALL;
    return true;
}

static void invalid_body(struct h_rank *r)
{
    const struct inv *v = r->arg;
    int n = r->nranks;
    size_t count = 64, elems = (size_t)n * count + 8;
    float *a = malloc(elems * 4), *b = malloc(elems * 4);
    h_fill(a, elems, COMM_F32, 9, r->rank);
    h_poison(b, elems, COMM_F32);
    bool bad = v->all || r->rank == 1;
    /* The bad rank is also the root, so that its sendbuf and recvbuf are both used. */
    int root = 1;
    const void *send = a;
    void *recv = b;
    comm_dtype_t dt = COMM_F32;
    size_t cnt = count;
    if (bad) {
        switch (v->bad) {
        case BAD_ROOT_LOW:
            root = -1;
            break;
        case BAD_ROOT_HIGH:
            root = n;
            break;
        case BAD_NULL_SEND:
            send = NULL;
            break;
        case BAD_NULL_RECV:
            recv = NULL;
            break;
        case BAD_OVERLAP:
            /* The in-place forms at rank 1: allgather send == recv + count, reduce_scatter
             * recv == send + count; sendbuf == recvbuf is none of them there. */
            send = b;
            if (v->k == K_BROADCAST || v->k == K_REDUCE)
                send = b + 1;
            break;
        case BAD_OVERLAP_BY:
            send = b + 1;
            break;
        case BAD_COUNT:
            cnt = SIZE_MAX / 8;
            break;
        case BAD_DTYPE:
            dt = (comm_dtype_t)42;
            break;
        case BAD_COUNT_OF:
            break;
        }
    }
    comm_status_t st = co_make_call(r->comm, v->k, send, recv, cnt, dt, COMM_SUM, root);
    comm_status_t want = bad ? COMM_ERR_INVALID : COMM_ERR_PEER;
    const char *msg = comm_last_error(r->comm);
    char who[16];
    snprintf(who, sizeof(who), "rank %d", bad ? r->rank : 1);
    if (st != want)
        h_fail(r, "%s bad %d: got %s, want %s (%s)", co_kind_names[v->k], (int)v->bad,
               comm_status_string(st), comm_status_string(want), msg);
    else if (strstr(msg, who) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\"", msg, who);
    /* No rank wrote any recvbuf: the poison is whole (a's tail past b's overlap too). */
    if (!h_poisoned(b, elems, COMM_F32))
        h_fail(r, "%s bad %d: recvbuf written", co_kind_names[v->k], (int)v->bad);
    free(a);
    free(b);
}

static void run_invalid(enum kind k, enum bad bad, bool all, int n, bool procs)
{
    struct inv v = {.k = k, .bad = bad, .all = all};
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = invalid_body,
                        .arg = &v,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

void invalid_one_rank(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++)
        for (int b = 0; b < BAD_COUNT_OF; b++)
            if (bad_applies(k, b))
                run_invalid(k, b, false, 3, (k + b) % 4 == 0);
}

void invalid_every_rank(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++) {
        /* reduce's recvbuf may be NULL off the root: its sendbuf is needed everywhere. */
        run_invalid(k, k == K_REDUCE ? BAD_NULL_SEND : BAD_NULL_RECV, true, 2, false);
        /* Overlap is a mistake only where both buffers are used: off the root of a
         * broadcast or reduce it is not, so those get a bad dtype everywhere. */
        run_invalid(k, rooted(k) ? BAD_DTYPE : BAD_OVERLAP_BY, true, 3, k == K_ALLTOALL);
        if (rooted(k))
            run_invalid(k, BAD_ROOT_HIGH, true, 2, false);
    }
}

/* What is not a mistake: sendbuf NULL off the root of a broadcast, recvbuf NULL off the
 * root of a reduce, the in-place forms, and calls after one another keep working. */
static void valid_edges_body(struct h_rank *r)
{
    int n = r->nranks, me = r->rank;
    size_t count = 100;
    float *buf = malloc((size_t)n * count * 4), *in = malloc((size_t)n * count * 4);
    for (int root = 0; root < n; root++) {
        h_fill(buf, count, COMM_F32, 1, root);
        comm_status_t st =
            comm_broadcast(r->comm, me == root ? buf : NULL, buf, count, COMM_F32, root, NULL);
        if (st != COMM_OK || !h_holds(buf, count, COMM_F32, COMM_SUM, 1, root))
            h_fail(r, "in-place broadcast from root %d: %s", root, comm_last_error(r->comm));
        h_fill(in, count, COMM_F32, 2, me);
        st =
            comm_reduce(r->comm, in, me == root ? in : NULL, count, COMM_F32, COMM_MAX, root, NULL);
        if (st != COMM_OK)
            h_fail(r, "in-place reduce at root %d: %s", root, comm_last_error(r->comm));
        else if (me == root)
            h_check(r, in, count, COMM_F32, COMM_MAX, 2, n, NULL, 0, false);
    }
    /* Count 0 with NULL buffers on the bulk path (flag path off) is a call like any. */
    for (int k = 0; k < K_BARRIER; k++)
        if (co_make_call(r->comm, k, NULL, NULL, 0, COMM_F64, COMM_MIN, n - 1) != COMM_OK)
            h_fail(r, "%s of count 0: %s", co_kind_names[k], comm_last_error(r->comm));
    /* A barrier between the collectives: numbered alike. */
    if (comm_barrier(r->comm) != COMM_OK)
        h_fail(r, "barrier: %s", comm_last_error(r->comm));
    free(buf);
    free(in);
}

void valid_edges(void **s)
{
    (void)s;
    h_env_push("ARCOMM_FLAG_THRESHOLD", "off");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 3, .procs = procs, .body = valid_edges_body, .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        for (int r = 0; r < 3; r++)
            if (res[r].errors)
                fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    }
    h_env_pop();
    assert_int_equal(h_shm_leftovers(), 0);
}

#if ARCOMM_TEST_HAVE_HEXAGON
/* A backend without the collectives: UNSUPPORTED on every rank alike, before anything
 * is exchanged; the communicator stays usable (an allreduce and a barrier after). */
static void unsupported_body(struct h_rank *r)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    comm_t *c;
    if (comm_init(&c, &cfg) != COMM_OK) {
        h_fail(r, "hexagon comm_init: %s", comm_last_error(NULL));
        return;
    }
    size_t count = 256;
    float *a = NULL, *b = NULL;
    if (comm_mem_alloc(c, (size_t)r->nranks * count * 4, (void **)&a) != COMM_OK ||
        comm_mem_alloc(c, (size_t)r->nranks * count * 4, (void **)&b) != COMM_OK) {
        h_fail(r, "hexagon comm_mem_alloc: %s", comm_last_error(c));
        comm_destroy(c);
        return;
    }
    h_fill(a, count, COMM_F32, 3, r->rank);
    h_poison(b, (size_t)r->nranks * count, COMM_F32);
    for (int k = 0; k < K_SWEPT; k++) {
        comm_status_t st = co_make_call(c, k, a, b, count, COMM_F32, COMM_SUM, 0);
        const char *msg = comm_last_error(c);
        char who[16];
        snprintf(who, sizeof(who), "rank %d", r->rank);
        if (st != COMM_ERR_UNSUPPORTED || strstr(msg, co_kind_names[k]) == NULL ||
            strstr(msg, who) == NULL || strstr(msg, "Hexagon") == NULL)
            h_fail(r, "%s on hexagon: %s (%s)", co_kind_names[k], comm_status_string(st), msg);
    }
    if (!h_poisoned(b, (size_t)r->nranks * count, COMM_F32))
        h_fail(r, "an unsupported call wrote recvbuf");
    if (comm_allreduce(c, a, b, count, COMM_F32, COMM_SUM, NULL) != COMM_OK)
        h_fail(r, "allreduce after the unsupported calls: %s", comm_last_error(c));
    else
        h_check(r, b, count, COMM_F32, COMM_SUM, 3, r->nranks, NULL, 0, false);
    if (comm_barrier(c) != COMM_OK)
        h_fail(r, "barrier after the unsupported calls: %s", comm_last_error(c));
    comm_mem_free(c, a);
    comm_mem_free(c, b);
    comm_destroy(c);
}

void unsupported_backend(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {.nranks = 2, .no_init = true, .body = unsupported_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < 2; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}
#endif
