/* SPDX-License-Identifier: MIT */
/*
 * The eager reduce (ARCOMM_REDUCE_EAGER): every rank but the root of a small reduce
 * returns once its input is staged.  At 2, 3, 4, 5, 8 and 16 thread and process ranks: every
 * dtype and op, sizes up to the knob, roots that change, in place and out of place,
 * batches longer than the ring while a rank lags, then every root's result against the
 * float64 reference and bit for bit against the allreduce of the same inputs (the
 * reproducibility contract), the non-roots' recvbuf untouched; calls of other kinds in
 * between (the settling).  A disagreement (count, dtype, op, root; an eager reduce
 * against one that synchronises, an allreduce or an eager broadcast) fails the root
 * with MISMATCH before it writes a byte of recvbuf and reaches the others at their next
 * call; a rank that never calls, dies or aborts ends the others' calls in time; ranks
 * with different knob values get MISMATCH at comm_init.
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

#define EAGER_BYTES 512u
#define BIG_COUNT   1024u /* f32 elements: past the knob, a reduce that synchronises */
#define BATCH       40    /* eager calls in a row: past the ring of 16, twice */

static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32,
                                      COMM_I64, COMM_I8,  COMM_U8,   COMM_U32, COMM_U64};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_MIN, COMM_PROD, COMM_AVG};
#define N_OPS (sizeof(ops) / sizeof(ops[0]))

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

/* ---- data: every dtype, op and size, roots that change, batches past the ring ---- */

/* Call k of the sweep: its dtype, op, count, root and whether the root's is in place. */
struct call_spec {
    comm_dtype_t dt;
    comm_op_t op;
    size_t count;
    int root;
    bool in_place;
};

static struct call_spec spec_of(int k, int n)
{
    struct call_spec s;
    s.dt = dtypes[(size_t)k % N_DTYPES];
    s.op = ops[(size_t)k / N_DTYPES % N_OPS];
    if (s.op == COMM_AVG && h_dtype_is_int(s.dt))
        s.op = COMM_SUM;
    s.count = 1 + (size_t)k * 37 % (EAGER_BYTES / comm_dtype_size(s.dt));
    s.root = k / 3 % n;
    s.in_place = k % 4 == 1;
    return s;
}

struct data_arg {
    bool lag; /* the last rank sleeps now and then: the others run a ring ahead of it */
};

static void data_body(struct h_rank *r)
{
    const struct data_arg *arg = r->arg;
    int rounds = h_quick() ? 2 : 5;
    uint8_t *send = malloc((size_t)BATCH * EAGER_BYTES),
            *recv = malloc((size_t)BATCH * EAGER_BYTES);
    uint8_t *ref = malloc(EAGER_BYTES), *big = malloc(BIG_COUNT * 4);
    for (int round = 0; round < rounds && r->errors == 0; round++) {
        /* A batch of eager reduces, nothing between them. */
        for (int i = 0; i < BATCH && r->errors == 0; i++) {
            int k = round * BATCH + i;
            struct call_spec s = spec_of(k, r->nranks);
            uint8_t *in = send + (size_t)i * EAGER_BYTES, *out = recv + (size_t)i * EAGER_BYTES;
            h_fill_op(in, s.count, s.dt, s.op, 500 + (uint64_t)k, r->rank);
            h_poison(out, s.count, s.dt);
            bool in_place = s.in_place && r->rank == s.root;
            if (in_place)
                memcpy(out, in, s.count * comm_dtype_size(s.dt));
            if (arg->lag && r->rank == r->nranks - 1 && i % 7 == 3)
                usleep(500);
            comm_status_t st =
                comm_reduce(r->comm, in_place ? out : in, out, s.count, s.dt, s.op, s.root, NULL);
            if (st != COMM_OK)
                h_fail(r, "call %d: reduce of %zu %s %s to root %d: %s (%s)", k, s.count,
                       h_dtype_name(s.dt), h_op_name(s.op), s.root, comm_status_string(st),
                       comm_last_error(r->comm));
        }
        /* Calls that synchronise after the eager ones: a barrier, a reduce past the knob,
         * then the references: the allreduce of every call's inputs. */
        expect(r, "a barrier after the batch", comm_barrier(r->comm), COMM_OK, NULL);
        h_fill(big, BIG_COUNT, COMM_F32, 9, r->rank);
        expect(
            r, "a large reduce after the batch",
            comm_reduce(r->comm, big, big, BIG_COUNT, COMM_F32, COMM_SUM, round % r->nranks, NULL),
            COMM_OK, NULL);
        if (r->rank == round % r->nranks &&
            h_check(r, big, BIG_COUNT, COMM_F32, COMM_SUM, 9, r->nranks, NULL, 0, false))
            h_fail(r, "round %d: the large reduce: wrong data", round);
        for (int i = 0; i < BATCH && r->errors == 0; i++) {
            int k = round * BATCH + i;
            struct call_spec s = spec_of(k, r->nranks);
            uint8_t *in = send + (size_t)i * EAGER_BYTES, *out = recv + (size_t)i * EAGER_BYTES;
            h_fill_op(in, s.count, s.dt, s.op, 500 + (uint64_t)k, r->rank);
            expect(r, "the reference allreduce",
                   comm_allreduce(r->comm, in, ref, s.count, s.dt, s.op, NULL), COMM_OK, NULL);
            if (r->rank != s.root) {
                if (!h_poisoned(out, s.count, s.dt))
                    h_fail(r, "call %d: a non-root's recvbuf was written", k);
                continue;
            }
            if (h_check(r, out, s.count, s.dt, s.op, 500 + (uint64_t)k, r->nranks, NULL, 0, false))
                h_fail(r, "call %d: reduce of %zu %s %s to root %d: against float64", k, s.count,
                       h_dtype_name(s.dt), h_op_name(s.op), s.root);
            else if (memcmp(out, ref, s.count * comm_dtype_size(s.dt)) != 0)
                h_fail(r, "call %d: reduce of %zu %s %s to root %d: not allreduce's bits", k,
                       s.count, h_dtype_name(s.dt), h_op_name(s.op), s.root);
        }
        /* An eager reduce right after the allreduces, then an eager broadcast between
         * eager reduces (the two kinds share the rings and the call count). */
        for (int j = 0; j < 3 && r->errors == 0; j++) {
            int root = (round + j) % r->nranks;
            float x[8], y[8];
            h_fill(x, 8, COMM_F32, 70 + (uint64_t)j, r->rank);
            h_poison(y, 8, COMM_F32);
            expect(r, "an eager reduce between",
                   comm_reduce(r->comm, x, y, 8, COMM_F32, COMM_SUM, root, NULL), COMM_OK, NULL);
            if (r->rank == root &&
                h_check(r, y, 8, COMM_F32, COMM_SUM, 70 + (uint64_t)j, r->nranks, NULL, 0, false))
                h_fail(r, "round %d: the reduce between: wrong data", round);
            if (r->rank == root)
                h_fill(x, 8, COMM_F32, 80, root);
            expect(r, "a broadcast between", comm_broadcast(r->comm, x, x, 8, COMM_F32, root, NULL),
                   COMM_OK, NULL);
            if (!h_holds(x, 8, COMM_F32, COMM_SUM, 80, root))
                h_fail(r, "round %d: the broadcast between: wrong data", round);
        }
    }
    free(send);
    free(recv);
    free(ref);
    free(big);
}

static void run_data(int n, bool procs, bool lag)
{
    struct data_arg arg = {.lag = lag};
    struct h_job job = {
        .nranks = n, .procs = procs, .body = data_body, .arg = &arg, .kill_rank = -1};
    expect_clean(h_run(&job), n);
}

/* The rank counts of the data sweeps: the sanitizer builds' quick sweep (ARCOMM_TEST_QUICK)
 * stops at 5 ranks, the release build runs 8 and 16 too. */
static size_t data_counts(void)
{
    return h_quick() ? 4 : 6;
}

static void data_threads(void **s)
{
    (void)s;
    static const int ns[] = {2, 3, 4, 5, 8, 16};
    for (size_t i = 0; i < data_counts(); i++)
        run_data(ns[i], false, i % 2 == 0);
}

static void data_procs(void **s)
{
    (void)s;
    static const int ns[] = {2, 3, 4, 5, 8, 16};
    for (size_t i = 0; i < data_counts(); i++)
        run_data(ns[i], true, i % 2 == 1);
}

/* With the eager broadcast on too: the two kinds of eager call in one sweep. */
static void data_with_bcast_eager(void **s)
{
    (void)s;
    h_env_push("ARCOMM_BCAST_EAGER", "512");
    run_data(3, false, true);
    run_data(4, true, false);
    h_env_pop();
}

/* Every wait sleeps on the futex at once: the fence-free publications must still wake
 * the sleepers, or at worst let them look again within their short slice. */
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
    if (ms > 30000)
        fail_msg("the calls with sleeping waits took %.0f ms", ms);
}

/* ---- disagreements ---- */

enum case_kind {
    C_COUNT,      /* rank 1 passes one element more: both eager */
    C_DTYPE,      /* rank 1 passes i32 for f32 (the same bytes) */
    C_OP,         /* rank 1 passes max for sum */
    C_ROOT,       /* rank 2 names rank 1 the root: both send, the root finds it */
    C_SELF_ROOT,  /* rank 1 names itself the root: both roots find it */
    C_SYNC_PEER,  /* root eager, rank 1 past the knob (synchronises) */
    C_SYNC_ROOT,  /* root past the knob, rank 1 eager */
    C_ALLREDUCE,  /* root eager, rank 1 an allreduce */
    C_BCAST_PEER, /* root eager, rank 1 an eager broadcast from rank 0 (ARCOMM_BCAST_EAGER) */
};

struct case_arg {
    enum case_kind kind;
};

/* Call 5 disagrees; the calls before it agree, the ones after it fail everywhere. */
static void mismatch_body(struct h_rank *r)
{
    const struct case_arg *arg = r->arg;
    float x[BIG_COUNT], y[BIG_COUNT];
    h_fill(x, BIG_COUNT, COMM_F32, 4, r->rank);
    for (int i = 0; i < 5; i++)
        expect(r, "a reduce before", comm_reduce(r->comm, x, y, 8, COMM_F32, COMM_SUM, 0, NULL),
               COMM_OK, NULL);
    size_t count = 8;
    comm_status_t st;
    comm_status_t want = COMM_OK, want_also = COMM_OK;
    const char *want_msg = NULL;
    bool one = r->rank == 1, root = r->rank == 0;
    h_poison(y, BIG_COUNT, COMM_F32);
    switch (arg->kind) {
    case C_COUNT:
        st = comm_reduce(r->comm, x, y, one ? count + 1 : count, COMM_F32, COMM_SUM, 0, NULL);
        if (root) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 1 made reduce count 9 dtype f32 op sum root 0";
        }
        break;
    case C_DTYPE:
        st = comm_reduce(r->comm, x, y, count, one ? COMM_I32 : COMM_F32, COMM_SUM, 0, NULL);
        if (root) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 1 made reduce count 8 dtype i32 op sum root 0";
        }
        break;
    case C_OP:
        st = comm_reduce(r->comm, x, y, count, COMM_F32, one ? COMM_MAX : COMM_SUM, 0, NULL);
        if (root) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 1 made reduce count 8 dtype f32 op max root 0";
        }
        break;
    case C_ROOT:
        st = comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, r->rank == 2 ? 1 : 0, NULL);
        if (root) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 2 made reduce count 8 dtype f32 op sum root 1";
        }
        break;
    case C_SELF_ROOT:
        st = comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, one ? 1 : 0, NULL);
        if (root || one) {
            want = COMM_ERR_MISMATCH;
            want_msg = root ? "rank 1 made" : "rank 0 made";
        }
        break;
    case C_SYNC_PEER:
        st = comm_reduce(r->comm, x, y, one ? BIG_COUNT : count, COMM_F32, COMM_SUM, 0, NULL);
        if (root || one) {
            want = COMM_ERR_MISMATCH;
            want_msg = root ? "not an eager reduce" : "reduce count 8 dtype f32 op sum root 0";
        }
        break;
    case C_SYNC_ROOT:
        st = comm_reduce(r->comm, x, y, root ? BIG_COUNT : count, COMM_F32, COMM_SUM, 0, NULL);
        if (root) {
            want = COMM_ERR_MISMATCH;
            want_msg = "rank 1 made an eager reduce count 8";
        }
        break;
    case C_ALLREDUCE:
        st = one ? comm_allreduce(r->comm, x, y, count, COMM_F32, COMM_SUM, NULL)
                 : comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, 0, NULL);
        if (root || one) {
            want = COMM_ERR_MISMATCH;
            want_msg = root ? "not an eager reduce" : "reduce count 8 dtype f32 op sum root 0";
        }
        break;
    case C_BCAST_PEER:
    default:
        st = one ? comm_broadcast(r->comm, y, y, count, COMM_F32, 0, NULL)
                 : comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, 0, NULL);
        if (one) {
            want = COMM_ERR_MISMATCH;
            want_msg = "root rank 0 made reduce count 8 dtype f32 op sum root 0";
        }
        if (root) /* it sees rank 1's MISMATCH published, or its call in its arrival */
            want = COMM_ERR_MISMATCH, want_also = COMM_ERR_PEER;
        break;
    }
    char what[64];
    snprintf(what, sizeof(what), "case %d: the call that disagrees", arg->kind);
    if (want_also != COMM_OK && st == want_also)
        want = want_also, want_msg = "rank 1";
    expect(r, what, st, want, want_msg);
    /* A root that failed wrote nothing of its recvbuf. */
    if (root && st != COMM_OK && !h_poisoned(y, BIG_COUNT, COMM_F32))
        h_fail(r, "case %d: the root's recvbuf was written by a call that failed", arg->kind);
    /* A rank that returned early learns at its next call, once the root has published
     * the failure (which it does as it reads the entry: well within the pause). */
    if (st == COMM_OK) {
        usleep(200 * 1000);
        st = comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, 0, NULL);
        snprintf(what, sizeof(what), "case %d: the next call", arg->kind);
        expect(r, what, st, COMM_ERR_PEER, "rank 0");
    }
    /* The calls after it fail on every rank, promptly. */
    double t0 = h_now_ms();
    int after = 0;
    do
        st = comm_reduce(r->comm, x, y, count, COMM_F32, COMM_SUM, 0, NULL);
    while (st == COMM_OK && ++after < 64);
    double ms = h_now_ms() - t0;
    if (st == COMM_OK)
        h_fail(r, "case %d: %d calls after the mismatch succeeded", arg->kind, after);
    if (ms > 2000)
        h_fail(r, "case %d: the calls after the mismatch took %.0f ms to fail", arg->kind, ms);
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
        run_mismatch(C_DTYPE, 2, procs);
        run_mismatch(C_OP, 2, procs);
        run_mismatch(C_ROOT, 3, procs);
        run_mismatch(C_SELF_ROOT, 2, procs);
        run_mismatch(C_SYNC_PEER, 2, procs);
        run_mismatch(C_SYNC_ROOT, 3, procs);
        run_mismatch(C_ALLREDUCE, 2, procs);
    }
    h_env_push("ARCOMM_BCAST_EAGER", "512");
    for (int procs = 0; procs < 2; procs++)
        run_mismatch(C_BCAST_PEER, 2, procs);
    h_env_pop();
    h_env_pop();
}

/* ---- a rank that never calls, dies or aborts: the others' calls end in time ---- */

#define SHORT_TIMEOUT_MS 1000

struct absent_arg {
    int absent; /* the rank that never calls; the root is rank 0 */
};

static void absent_body(struct h_rank *r)
{
    const struct absent_arg *arg = r->arg;
    float x[4] = {1, 2, 3, 4}, y[4];
    if (r->rank == arg->absent) {
        usleep(3 * SHORT_TIMEOUT_MS * 1000);
        return;
    }
    double t0 = h_now_ms();
    comm_status_t st = COMM_OK;
    int calls = 0;
    while (st == COMM_OK && calls < 1000) {
        st = comm_reduce(r->comm, x, y, 4, COMM_F32, COMM_SUM, 0, NULL);
        calls++;
    }
    double ms = h_now_ms() - t0;
    char who[16];
    snprintf(who, sizeof(who), "rank %d", arg->absent);
    expect(r, "reduces with a rank that never calls", st, COMM_ERR_TIMEOUT, who);
    /* The root's first call waits; a contributor runs at most a ring ahead. */
    if (calls < 1 || calls > 64)
        h_fail(r, "%d calls before the timeout", calls);
    if (ms < SHORT_TIMEOUT_MS * 0.9 || ms > SHORT_TIMEOUT_MS * 2.5)
        h_fail(r, "the timeout came after %.0f ms (timeout %d ms)", ms, SHORT_TIMEOUT_MS);
}

static void never_calls(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    for (int procs = 0; procs < 2; procs++) {
        for (int absent = 0; absent < 2; absent++) {
            /* The sanitizer builds' quick sweep: the root absent among processes, a
             * contributor among threads (each case sleeps 3 s). */
            if (h_quick() && absent == procs)
                continue;
            struct absent_arg arg = {.absent = absent};
            struct h_job job = {.nranks = 2,
                                .procs = procs,
                                .body = absent_body,
                                .arg = &arg,
                                .kill_rank = -1,
                                .timeout_ms = SHORT_TIMEOUT_MS};
            expect_clean(h_run(&job), 2);
        }
    }
    h_env_pop();
}

static void killed_body(struct h_rank *r)
{
    float x[4] = {1, 2, 3, 4}, y[4];
    comm_status_t st = COMM_OK;
    long calls = 0;
    while (st == COMM_OK && calls < 200000000)
        st = comm_reduce(r->comm, x, y, 4, COMM_F32, COMM_SUM, (int)(calls++ / 100 % 2) * 2, NULL);
    r->elapsed_s = h_now_ms() / 1e3;
    expect(r, "reduces while rank 1 dies", st, COMM_ERR_PEER, "rank 1");
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
    expect_clean(h_run_killed(&job, 2000, "eager reduces"), 3);
    h_env_pop();
}

static void *aborter(void *arg)
{
    usleep(100 * 1000);
    comm_abort(arg);
    return NULL;
}

/* The root waits for rank 1, which comes late: comm_abort ends the wait; rank 1's eager
 * call then fails at once, naming the root. */
static void abort_body(struct h_rank *r)
{
    float x[4] = {1, 2, 3, 4}, y[4];
    if (r->rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, aborter, r->comm);
        double t0 = h_now_ms();
        comm_status_t st = comm_reduce(r->comm, x, y, 4, COMM_F32, COMM_SUM, 0, NULL);
        double ms = h_now_ms() - t0;
        pthread_join(t, NULL);
        expect(r, "the root's reduce, aborted", st, COMM_ERR_ABORTED, NULL);
        if (ms > 1000)
            h_fail(r, "abort took %.0f ms to end the wait", ms);
    } else {
        usleep(300 * 1000);
        expect(r, "an eager reduce after the root aborted",
               comm_reduce(r->comm, x, y, 4, COMM_F32, COMM_SUM, 0, NULL), COMM_ERR_PEER, "rank 0");
    }
}

static void aborted(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2, .procs = procs, .body = abort_body, .kill_rank = -1};
        expect_clean(h_run(&job), 2);
    }
    h_env_pop();
}

/* ---- ranks that disagree on the knob: MISMATCH at comm_init ---- */

static void knob_body(struct h_rank *r)
{
    setenv("ARCOMM_REDUCE_EAGER", r->rank == 1 ? "256" : "512", 1);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = 5000;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st != COMM_ERR_MISMATCH)
        h_fail(r, "comm_init with ARCOMM_REDUCE_EAGER 256 against 512: got %s",
               comm_status_string(st));
    else if (strstr(comm_last_error(NULL), "ARCOMM_REDUCE_EAGER") == NULL)
        h_fail(r, "comm_init's message \"%s\" does not name ARCOMM_REDUCE_EAGER",
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
    setenv("ARCOMM_REDUCE_EAGER", "512", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(data_threads),
        cmocka_unit_test(data_procs),
        cmocka_unit_test(data_with_bcast_eager),
        cmocka_unit_test(data_sleeping),
        cmocka_unit_test(mismatches),
        cmocka_unit_test(never_calls),
        cmocka_unit_test(killed),
        cmocka_unit_test(aborted),
        cmocka_unit_test(knob_disagrees),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
