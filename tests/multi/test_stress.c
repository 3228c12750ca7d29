/* SPDX-License-Identifier: MIT */
/*
 * Endurance: 10,000 back-to-back calls (every result checked), paths alternating call
 * by call (slot reuse across paths), random sequences of allreduce and of every
 * collective, two communicators used at once, and 8 ranks on the machine's 2 cores.
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

/* ---- every collective in one random sequence ---- */

enum rk { RK_ALLREDUCE, RK_BROADCAST, RK_REDUCE, RK_ALLGATHER, RK_REDUCE_SCATTER, RK_ALLTOALL };
static const char *const rk_names[] = {"allreduce", "broadcast",      "reduce",
                                       "allgather", "reduce_scatter", "alltoall"};

struct colls_cfg {
    bool mem; /* buffers from comm_mem_alloc (the one-pass paths between processes) */
};

static void *colls_alloc(struct h_rank *r, bool mem, size_t bytes)
{
    void *p = NULL;
    if (!mem)
        return malloc(bytes);
    if (comm_mem_alloc(r->comm, bytes, &p) != COMM_OK)
        h_fail(r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(r->comm));
    return p;
}

/*
 * A random sequence of every collective, the same on every rank (seeded alike): counts
 * across the inline, flag, one-pass, staged, pipelined and CMA paths, every dtype and
 * the ops each allows, random roots, the in-place forms, barriers between; every
 * element of every output checked (data movement exactly, reductions against float64),
 * the element after each output untouched, and what every rank must hold alike hashed
 * for the parent to compare.
 */
static void random_colls_body(struct h_rank *r)
{
    static const comm_dtype_t dts[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
                                       COMM_I64, COMM_I8,  COMM_U8,   COMM_U32, COMM_U64};
    const struct colls_cfg *cfg = r->arg;
    int n = r->nranks, me = r->rank;
    size_t max_bytes = 96u << 10; /* per block */
    size_t room = (size_t)n * max_bytes + 64 * 8;
    uint8_t *x = colls_alloc(r, cfg->mem, room), *y = colls_alloc(r, cfg->mem, room);
    uint64_t rng = 4242, hash = 1469598103934665603ull;
    int calls = h_quick() ? 120 : 700;
    for (int i = 0; i < calls && r->errors == 0 && x && y; i++) {
        uint64_t v = h_rand(&rng), w = h_rand(&rng);
        if (w % 11 == 0) {
            if (comm_barrier(r->comm) != COMM_OK)
                h_fail(r, "call %d: barrier: %s", i, comm_last_error(r->comm));
            continue;
        }
        enum rk k = (enum rk)(v % 6);
        comm_dtype_t dt = dts[(v >> 8) % 10];
        size_t es = comm_dtype_size(dt), maxc = max_bytes / es;
        size_t count = v % 5 == 0   ? (v >> 16) % 40
                       : v % 5 == 1 ? (v >> 16) % 3000 % maxc
                                    : (size_t)(v >> 16) % maxc;
        bool reduces = k == RK_ALLREDUCE || k == RK_REDUCE || k == RK_REDUCE_SCATTER;
        comm_op_t op = reduces ? (comm_op_t)((w >> 8) % 5) : COMM_SUM;
        if (op == COMM_AVG && h_dtype_is_int(dt))
            op = COMM_MAX;
        int root = (int)((w >> 16) % (uint64_t)n);
        bool inplace = ((w >> 24) & 1) && k != RK_ALLTOALL;
        size_t off = (w >> 32) % 3; /* elements: buffers off the line */
        uint64_t seed = 9000 + 17u * (uint64_t)i;
        size_t blk = count * es, all = (size_t)n * blk;

        /* Buffers: x holds sendbuf, y recvbuf; in place both lie in y. */
        uint8_t *sb = x + off * es, *rb = y + off * es, *send = sb, *recv = rb;
        h_poison(y, room / es, dt);
        if (inplace) {
            send = k == RK_ALLGATHER ? rb + (size_t)me * blk : rb;
            recv = k == RK_REDUCE_SCATTER ? rb + (size_t)me * blk : rb;
        }
        bool blocks_in = k == RK_REDUCE_SCATTER || k == RK_ALLTOALL;
        for (int b = 0; b < (blocks_in ? n : 1); b++)
            h_fill_op(send + (size_t)b * blk, count, dt, op, seed + 101u * (uint64_t)b, me);
        comm_status_t st = COMM_OK;
        switch (k) {
        case RK_ALLREDUCE:
            st = comm_allreduce(r->comm, send, recv, count, dt, op, NULL);
            break;
        case RK_BROADCAST:
            st = comm_broadcast(r->comm, me == root ? send : NULL, recv, count, dt, root, NULL);
            break;
        case RK_REDUCE:
            st = comm_reduce(r->comm, send, me == root ? recv : NULL, count, dt, op, root, NULL);
            break;
        case RK_ALLGATHER:
            st = comm_allgather(r->comm, send, recv, count, dt, NULL);
            break;
        case RK_REDUCE_SCATTER:
            st = comm_reduce_scatter(r->comm, send, recv, count, dt, op, NULL);
            break;
        case RK_ALLTOALL:
            st = comm_alltoall(r->comm, send, recv, count, dt, NULL);
            break;
        }
        if (st != COMM_OK) {
            h_fail(r, "call %d: %s(count %zu dtype %s op %s root %d in place %d): %s", i,
                   rk_names[k], count, h_dtype_name(dt), h_op_name(op), root, inplace,
                   comm_last_error(r->comm));
            break;
        }
        const char *wrong = NULL;
        size_t out_bytes = blk;
        switch (k) {
        case RK_ALLREDUCE:
            h_check(r, recv, count, dt, op, seed, n, NULL, 0, false);
            hash = h_hash_more(hash, recv, blk);
            break;
        case RK_BROADCAST:
            if (!h_holds(recv, count, dt, op, seed, root))
                wrong = "the output is not the root's input";
            hash = h_hash_more(hash, recv, blk);
            break;
        case RK_REDUCE:
            if (me == root)
                h_check(r, recv, count, dt, op, seed, n, NULL, 0, false);
            else if (!inplace && !h_poisoned(rb, count, dt))
                wrong = "a non-root's recvbuf was written";
            break;
        case RK_ALLGATHER:
            for (int p = 0; p < n && !wrong; p++)
                if (!h_holds(recv + (size_t)p * blk, count, dt, op, seed, p))
                    wrong = "a block is not its rank's input";
            hash = h_hash_more(hash, recv, all);
            out_bytes = all;
            break;
        case RK_REDUCE_SCATTER:
            h_check(r, recv, count, dt, op, seed + 101u * (uint64_t)me, n, NULL, 0, false);
            for (int b = 0; inplace && b < n && !wrong; b++)
                if (b != me &&
                    !h_holds(rb + (size_t)b * blk, count, dt, op, seed + 101u * (uint64_t)b, me))
                    wrong = "in place, another block of sendbuf changed";
            out_bytes = inplace ? all - (size_t)me * blk : blk;
            break;
        case RK_ALLTOALL:
            for (int p = 0; p < n && !wrong; p++)
                if (!h_holds(recv + (size_t)p * blk, count, dt, op, seed + 101u * (uint64_t)me, p))
                    wrong = "a block is not its sender's block for this rank";
            out_bytes = all;
            break;
        }
        /* The element after the output stays poisoned (reduce writes on the root only). */
        if (!wrong && count && (k != RK_REDUCE || me == root) &&
            !h_poisoned(recv + out_bytes, 1, dt))
            wrong = "the element after the output was written";
        if (wrong)
            h_fail(r, "call %d: %s(count %zu dtype %s op %s root %d in place %d off %zu): %s", i,
                   rk_names[k], count, h_dtype_name(dt), h_op_name(op), root, inplace, off, wrong);
    }
    memcpy(r->out, &hash, sizeof hash);
    r->out_len = sizeof hash;
    if (cfg->mem) {
        comm_mem_free(r->comm, x);
        comm_mem_free(r->comm, y);
    } else {
        free(x);
        free(y);
    }
}

static void random_colls(int n, bool procs, bool mem, const char *cma)
{
    struct colls_cfg cfg = {.mem = mem};
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "64K");
    h_env_push("ARCOMM_FLAG_THRESHOLD", "2K");
    if (cma)
        h_env_push("ARCOMM_CMA_THRESHOLD", cma);
    struct h_job job = {
        .nranks = n, .procs = procs, .body = random_colls_body, .arg = &cfg, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    expect_clean(res, n);
    for (int p = 1; p < n; p++)
        if (res[p].out_len != res[0].out_len || memcmp(res[p].out, res[0].out, res[0].out_len))
            fail_msg("rank %d's outputs differ from rank 0's (hash of every allreduce, "
                     "broadcast and allgather output)",
                     p);
}

static void random_colls_threads_3(void **s)
{
    (void)s;
    random_colls(3, false, false, NULL);
}

static void random_colls_procs_3(void **s)
{
    (void)s;
    random_colls(3, true, false, NULL);
}

static void random_colls_procs_2_cma(void **s)
{
    (void)s;
    random_colls(2, true, false, "0");
}

static void random_colls_procs_3_mem(void **s)
{
    (void)s;
    random_colls(3, true, true, NULL);
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
        cmocka_unit_test(back_to_back_threads),
        cmocka_unit_test(back_to_back_procs),
        cmocka_unit_test(oversubscribed_8),
        cmocka_unit_test(mixed_threads_3),
        cmocka_unit_test(mixed_procs_3),
        cmocka_unit_test(two_comms),
        cmocka_unit_test(barrier_threads),
        cmocka_unit_test(barrier_procs),
        cmocka_unit_test(random_threads_3),
        cmocka_unit_test(random_procs_3),
        cmocka_unit_test(random_colls_threads_3),
        cmocka_unit_test(random_colls_procs_3),
        cmocka_unit_test(random_colls_procs_2_cma),
        cmocka_unit_test(random_colls_procs_3_mem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
