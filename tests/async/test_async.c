/* SPDX-License-Identifier: MIT */
/*
 * The asynchronous calls (comm_i*, comm_test, comm_wait, comm_wait_all) over 2, 3 and 4
 * thread and process ranks, with the progress thread and with caller progress: many
 * outstanding requests of every collective completed by comm_wait_all, each result
 * compared bit for bit with the blocking call's on the same data (and the allreduces
 * with a float64 reference), every rank's results compared bit for bit; comm_test
 * polled to completion; issue order (a blocking call after pending requests sees their
 * results); comm_abort while requests pend (ABORTED here, PEER on the peers, bounded); a
 * peer that never issues (TIMEOUT, bounded); comm_destroy with requests outstanding;
 * the progress thread gone after comm_destroy and not inherited by comm_dup; refusals at
 * issue.
 */
#include "harness.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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

/* Every rank's out holds the same bytes. */
static void expect_same_out(struct h_rank *res, int n)
{
    for (int r = 1; r < n; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("rank %d's results differ from rank 0's", r);
    }
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A word the forked ranks share with each other (MAP_SHARED before the fork). */
static _Atomic int *shared_word(void)
{
    _Atomic int *w =
        mmap(NULL, sizeof(*w), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(w != MAP_FAILED);
    atomic_store(w, 0);
    return w;
}

/* Waits (bounded) until *w reaches at least v. */
static void await_word(_Atomic int *w, int v)
{
    double t0 = h_now_ms();
    while (atomic_load(w) < v && h_now_ms() - t0 < 30000)
        sleep_ms(2);
}

/* ---- many outstanding requests of every collective, against the blocking calls ---- */

enum { CALLS = 9 };

/* One of each call, buffers of its own: count elements per rank (f64 for the
 * reductions' reference, f32 and i32 for the rest). */
struct mixed {
    size_t count;
    double *ar_s, *ar_r;          /* iallreduce f64 sum */
    float *add_s, *add_r, *add_a; /* iallreduce_add f32, a bias row of 7 */
    int32_t *bc;                  /* ibroadcast from the last rank, in place */
    double *rd_s, *rd_r;          /* ireduce max to rank 0 */
    float *ag_s, *ag_r;           /* iallgather */
    double *rs_s, *rs_r;          /* ireduce_scatter min */
    int32_t *a2a_s, *a2a_r;       /* ialltoall */
    float *ar2;                   /* iallreduce f32 sum in place */
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void mixed_alloc(struct mixed *m, size_t count, int n)
{
    m->count = count;
    m->ar_s = xmalloc(count * 8), m->ar_r = xmalloc(count * 8);
    m->add_s = xmalloc(count * 4 * 7), m->add_r = xmalloc(count * 4 * 7), m->add_a = xmalloc(28);
    m->bc = xmalloc(count * 4);
    m->rd_s = xmalloc(count * 8), m->rd_r = xmalloc(count * 8);
    m->ag_s = xmalloc(count * 4), m->ag_r = xmalloc(count * 4 * (size_t)n);
    m->rs_s = xmalloc(count * 8 * (size_t)n), m->rs_r = xmalloc(count * 8);
    m->a2a_s = xmalloc(count * 4 * (size_t)n), m->a2a_r = xmalloc(count * 4 * (size_t)n);
    m->ar2 = xmalloc(count * 4);
}

static void mixed_free(struct mixed *m)
{
    void *all[] = {m->ar_s, m->ar_r, m->add_s, m->add_r, m->add_a, m->bc,    m->rd_s, m->rd_r,
                   m->ag_s, m->ag_r, m->rs_s,  m->rs_r,  m->a2a_s, m->a2a_r, m->ar2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
}

/* Inputs from (seed, rank); outputs poisoned. */
static void mixed_fill(struct mixed *m, uint64_t seed, int rank, int n)
{
    size_t c = m->count;
    h_fill(m->ar_s, c, COMM_F64, seed, rank);
    h_fill(m->add_s, c * 7, COMM_F32, seed + 1, rank);
    h_fill(m->add_a, 7, COMM_F32, seed + 2, 0); /* the same row on every rank */
    h_fill(m->bc, c, COMM_I32, seed + 3, rank);
    h_fill(m->rd_s, c, COMM_F64, seed + 4, rank);
    h_fill(m->ag_s, c, COMM_F32, seed + 5, rank);
    h_fill(m->rs_s, c * (size_t)n, COMM_F64, seed + 6, rank);
    h_fill(m->a2a_s, c * (size_t)n, COMM_I32, seed + 7, rank);
    h_fill(m->ar2, c, COMM_F32, seed + 8, rank);
    h_poison(m->ar_r, c, COMM_F64);
    h_poison(m->add_r, c * 7, COMM_F32);
    h_poison(m->rd_r, c, COMM_F64);
    h_poison(m->ag_r, c * (size_t)n, COMM_F32);
    h_poison(m->rs_r, c, COMM_F64);
    h_poison(m->a2a_r, c * (size_t)n, COMM_I32);
}

/* The nine calls, issued (req != NULL) or blocking. */
static comm_status_t mixed_calls(comm_t *comm, struct mixed *m, int n, comm_request_t **req)
{
    size_t c = m->count;
    int last = n - 1;
    comm_status_t st[CALLS];
    if (req != NULL) {
        st[0] = comm_iallreduce(comm, m->ar_s, m->ar_r, c, COMM_F64, COMM_SUM, &req[0]);
        st[1] =
            comm_iallreduce_add(comm, m->add_s, m->add_r, m->add_a, 7, c * 7, COMM_F32, &req[1]);
        st[2] = comm_ibroadcast(comm, m->bc, m->bc, c, COMM_I32, last, &req[2]);
        st[3] = comm_ireduce(comm, m->rd_s, m->rd_r, c, COMM_F64, COMM_MAX, 0, &req[3]);
        st[4] = comm_iallgather(comm, m->ag_s, m->ag_r, c, COMM_F32, &req[4]);
        st[5] = comm_ireduce_scatter(comm, m->rs_s, m->rs_r, c, COMM_F64, COMM_MIN, &req[5]);
        st[6] = comm_ialltoall(comm, m->a2a_s, m->a2a_r, c, COMM_I32, &req[6]);
        st[7] = comm_ibarrier(comm, &req[7]);
        st[8] = comm_iallreduce(comm, m->ar2, m->ar2, c, COMM_F32, COMM_SUM, &req[8]);
    } else {
        st[0] = comm_allreduce(comm, m->ar_s, m->ar_r, c, COMM_F64, COMM_SUM, NULL);
        st[1] = comm_allreduce_add(comm, m->add_s, m->add_r, m->add_a, 7, c * 7, COMM_F32, NULL);
        st[2] = comm_broadcast(comm, m->bc, m->bc, c, COMM_I32, last, NULL);
        st[3] = comm_reduce(comm, m->rd_s, m->rd_r, c, COMM_F64, COMM_MAX, 0, NULL);
        st[4] = comm_allgather(comm, m->ag_s, m->ag_r, c, COMM_F32, NULL);
        st[5] = comm_reduce_scatter(comm, m->rs_s, m->rs_r, c, COMM_F64, COMM_MIN, NULL);
        st[6] = comm_alltoall(comm, m->a2a_s, m->a2a_r, c, COMM_I32, NULL);
        st[7] = comm_barrier(comm);
        st[8] = comm_allreduce(comm, m->ar2, m->ar2, c, COMM_F32, COMM_SUM, NULL);
    }
    for (int i = 0; i < CALLS; i++)
        if (st[i] != COMM_OK)
            return st[i];
    return COMM_OK;
}

/* The outputs a rank compares: all but reduce's (root only). */
static uint64_t mixed_hash(const struct mixed *m, int rank, int n)
{
    size_t c = m->count;
    uint64_t h = h_hash(m->ar_r, c * 8);
    h = h_hash_more(h, m->add_r, c * 7 * 4);
    h = h_hash_more(h, m->bc, c * 4);
    h = h_hash_more(h, m->ag_r, c * 4 * (size_t)n);
    h = h_hash_more(h, m->ar2, c * 4);
    (void)rank;
    return h;
}

/* Are a's outputs bit for bit b's? */
static bool mixed_same(const struct mixed *a, const struct mixed *b, int rank, int n)
{
    size_t c = a->count, nn = (size_t)n;
    return !memcmp(a->ar_r, b->ar_r, c * 8) && !memcmp(a->add_r, b->add_r, c * 7 * 4) &&
           !memcmp(a->bc, b->bc, c * 4) && (rank != 0 || !memcmp(a->rd_r, b->rd_r, c * 8)) &&
           !memcmp(a->ag_r, b->ag_r, c * 4 * nn) && !memcmp(a->rs_r, b->rs_r, c * 8) &&
           !memcmp(a->a2a_r, b->a2a_r, c * 4 * nn) && !memcmp(a->ar2, b->ar2, c * 4);
}

enum { ROUNDS = 3 };

static void mixed_body(struct h_rank *r)
{
    static const size_t counts[] = {1, 1000, 70000};
    int n = r->nranks;
    uint64_t hash = 0;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        struct mixed as[ROUNDS], bl;
        comm_request_t *req[ROUNDS * CALLS];
        for (int k = 0; k < ROUNDS; k++) {
            mixed_alloc(&as[k], counts[ci], n);
            mixed_fill(&as[k], 100 + 10 * ci + (uint64_t)k * 1000, r->rank, n);
        }
        /* ROUNDS * 9 requests outstanding at once, then one wait_all. */
        for (int k = 0; k < ROUNDS; k++) {
            comm_status_t st = mixed_calls(r->comm, &as[k], n, &req[k * CALLS]);
            if (st != COMM_OK) {
                h_fail(r, "count %zu round %d: issue: %s: %s", counts[ci], k,
                       comm_status_string(st), comm_last_error(NULL));
                return;
            }
        }
        comm_status_t st = comm_wait_all(ROUNDS * CALLS, req);
        if (st != COMM_OK) {
            h_fail(r, "count %zu: comm_wait_all: %s: %s", counts[ci], comm_status_string(st),
                   comm_last_error(r->comm));
            return;
        }
        for (int i = 0; i < ROUNDS * CALLS; i++)
            if (req[i] != NULL)
                h_fail(r, "comm_wait_all left request %d set", i);
        if (h_check(r, as[0].ar_r, counts[ci], COMM_F64, COMM_SUM, 100 + 10 * ci, n, NULL, 0,
                    false) != 0)
            return;
        /* The blocking calls on the same data: bit for bit the same. */
        for (int k = 0; k < ROUNDS; k++) {
            mixed_alloc(&bl, counts[ci], n);
            mixed_fill(&bl, 100 + 10 * ci + (uint64_t)k * 1000, r->rank, n);
            st = mixed_calls(r->comm, &bl, n, NULL);
            if (st != COMM_OK)
                h_fail(r, "count %zu: blocking calls: %s", counts[ci], comm_status_string(st));
            else if (!mixed_same(&as[k], &bl, r->rank, n))
                h_fail(r,
                       "count %zu round %d: the asynchronous results differ from the "
                       "blocking calls'",
                       counts[ci], k);
            hash = h_hash_more(hash ? hash : 1, &(uint64_t){mixed_hash(&as[k], r->rank, n)}, 8);
            mixed_free(&bl);
            mixed_free(&as[k]);
        }
    }
    memcpy(r->out, &hash, sizeof(hash));
    r->out_len = sizeof(hash);
}

static void run_mixed(bool procs, const char *progress)
{
    h_env_push("ARCOMM_PROGRESS", progress);
    for (int n = 2; n <= (h_quick() ? 3 : 4); n++) {
        struct h_job job = {.nranks = n, .procs = procs, .body = mixed_body, .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        expect_clean(res, n);
        expect_same_out(res, n);
    }
    h_env_pop();
}

static void mixed_threads(void **state)
{
    (void)state;
    run_mixed(false, "thread");
}

static void mixed_procs(void **state)
{
    (void)state;
    run_mixed(true, "thread");
}

static void mixed_caller(void **state)
{
    (void)state;
    run_mixed(false, "caller");
    run_mixed(true, "caller");
}

/* ---- comm_isend / comm_irecv: queued with the collectives, stretches run as groups ---- */

/*
 * Every rank isends to both ring neighbours and irecvs from both (each pair both ways at
 * once: run one by one these would deadlock), then an iallreduce, then the exchange again
 * with other data; every received element checked against the sender's random data, the
 * allreduce against a float64 reference.  Then a count mismatch: MISMATCH on both ranks
 * of the pair, the receive buffer untouched, the communicator still usable.
 */
static void p2p_body(struct h_rank *r)
{
    const int n = r->nranks, me = r->rank;
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    const size_t counts[] = {1, 1000, 300000};
    for (size_t k = 0; k < (h_quick() ? 2u : sizeof(counts) / sizeof(counts[0])); k++) {
        size_t count = counts[k];
        float *to_r = xmalloc(count * 4), *to_l = xmalloc(count * 4);
        float *from_l = xmalloc(count * 4), *from_r = xmalloc(count * 4);
        float *want = xmalloc(count * 4), *ar = xmalloc(count * 4), *ar_out = xmalloc(count * 4);
        for (int round = 0; round < 2; round++) {
            uint64_t seed = 1000 * k + 10 * (uint64_t)round;
            h_fill(to_r, count, COMM_F32, seed + 1, me);
            h_fill(to_l, count, COMM_F32, seed + 2, me);
            h_fill(ar, count, COMM_F32, seed + 3, me);
            h_poison(from_l, count, COMM_F32);
            h_poison(from_r, count, COMM_F32);
            comm_request_t *q[5] = {0};
            int nq = 0;
            comm_status_t st = COMM_OK;
            if (n > 1) {
                st |= comm_isend(r->comm, to_r, count, COMM_F32, right, &q[nq++]);
                st |= comm_irecv(r->comm, from_l, count, COMM_F32, left, &q[nq++]);
                if (n > 2 || round == 1) {
                    st |= comm_isend(r->comm, to_l, count, COMM_F32, left, &q[nq++]);
                    st |= comm_irecv(r->comm, from_r, count, COMM_F32, right, &q[nq++]);
                }
            }
            st |= comm_iallreduce(r->comm, ar, ar_out, count, COMM_F32, COMM_SUM, &q[nq++]);
            if (st != COMM_OK) {
                h_fail(r, "issue: %s", comm_last_error(NULL));
                break;
            }
            if ((st = comm_wait_all(nq, q)) != COMM_OK) {
                h_fail(r, "comm_wait_all: %s: %s", comm_status_string(st),
                       comm_last_error(r->comm));
                break;
            }
            h_fill(want, count, COMM_F32, seed + 1, left);
            if (n > 1 && memcmp(from_l, want, count * 4) != 0)
                h_fail(r, "count %zu round %d: from rank %d wrong", count, round, left);
            if (n > 2 || (n > 1 && round == 1)) {
                h_fill(want, count, COMM_F32, seed + 2, right);
                if (memcmp(from_r, want, count * 4) != 0)
                    h_fail(r, "count %zu round %d: from rank %d wrong", count, round, right);
            }
            double *ref = xmalloc(count * sizeof(double));
            memset(ref, 0, count * sizeof(double));
            for (int p = 0; p < n; p++) {
                h_fill(want, count, COMM_F32, seed + 3, p);
                for (size_t i = 0; i < count; i++)
                    ref[i] += want[i];
            }
            for (size_t i = 0; i < count; i++)
                if (fabs(ar_out[i] - ref[i]) > 1e-5 * n * (fabs(ref[i]) + 1)) {
                    h_fail(r, "count %zu: allreduce element %zu: %g, want %g", count, i, ar_out[i],
                           ref[i]);
                    break;
                }
            free(ref);
        }
        free(to_r), free(to_l), free(from_l), free(from_r), free(want), free(ar), free(ar_out);
    }
    /* A count mismatch between ranks 0 and 1: both MISMATCH, rank 1's buffer untouched. */
    if (n >= 2 && me <= 1) {
        float buf[8];
        h_poison(buf, 8, COMM_F32);
        uint32_t before[8];
        memcpy(before, buf, sizeof(buf));
        comm_request_t *q = NULL;
        comm_status_t st = me == 0 ? comm_isend(r->comm, buf, 8, COMM_F32, 1, &q)
                                   : comm_irecv(r->comm, buf, 7, COMM_F32, 0, &q);
        if (st == COMM_OK)
            st = comm_wait(&q);
        if (st != COMM_ERR_MISMATCH)
            h_fail(r, "mismatched count: %s, want COMM_ERR_MISMATCH", comm_status_string(st));
        if (me == 1 && memcmp(before, buf, sizeof(buf)) != 0)
            h_fail(r, "mismatched count: the receive buffer was written");
    }
    /* Refused at issue: a peer out of range. */
    comm_request_t *q = NULL;
    if (comm_isend(r->comm, &q, 1, COMM_U8, n, &q) != COMM_ERR_INVALID || q != NULL)
        h_fail(r, "comm_isend to rank %d of %d: not refused at issue", n, n);
    if (comm_barrier(r->comm) != COMM_OK)
        h_fail(r, "the barrier after the mismatch: %s", comm_last_error(r->comm));
}

static void p2p_requests(void **state)
{
    (void)state;
    const char *modes[] = {"thread", "caller"};
    for (int m = 0; m < 2; m++) {
        h_env_push("ARCOMM_PROGRESS", modes[m]);
        for (int n = 2; n <= (h_quick() ? 3 : 4); n++) {
            for (int procs = 0; procs <= 1; procs++) {
                struct h_job job = {.nranks = n, .procs = procs, .body = p2p_body, .kill_rank = -1};
                struct h_rank *res = h_run(&job);
                expect_clean(res, n);
            }
        }
        h_env_pop();
    }
}

/* ---- comm_test polled to completion; issue order seen by a blocking call ---- */

static void test_order_body(struct h_rank *r)
{
    size_t count = 5000;
    float *x = xmalloc(count * 4), *y = xmalloc(count * 4), *ref = xmalloc(count * 4);
    h_fill(x, count, COMM_F32, 21, r->rank);
    comm_request_t *req = NULL;
    comm_status_t st = comm_iallreduce(r->comm, x, x, count, COMM_F32, COMM_SUM, &req);
    int done = 0;
    long polls = 0;
    while (st == COMM_OK && !done) {
        st = comm_test(&req, &done);
        polls++;
    }
    if (st != COMM_OK || req != NULL)
        h_fail(r, "comm_test: %s after %ld polls, req %p", comm_status_string(st), polls,
               (void *)req);
    else
        h_check(r, x, count, COMM_F32, COMM_SUM, 21, r->nranks, NULL, 0, false);

    /* Issue order: the blocking allreduce of x runs after the pending in-place
     * iallreduce of x, so it sums the sums. */
    h_fill(x, count, COMM_F32, 22, r->rank);
    comm_request_t *reqs[2] = {NULL, NULL};
    st = comm_iallreduce(r->comm, x, x, count, COMM_F32, COMM_SUM, &reqs[0]);
    if (st == COMM_OK)
        st = comm_allreduce(r->comm, x, y, count, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK)
        h_fail(r, "issue order: %s: %s", comm_status_string(st), comm_last_error(r->comm));
    /* Done already: the blocking call waited for it. */
    done = 0;
    if (comm_test(&reqs[0], &done) != COMM_OK || !done)
        h_fail(r, "issue order: the request is not done after the blocking call");
    h_fill(ref, count, COMM_F32, 22, r->rank);
    if (comm_allreduce(r->comm, ref, ref, count, COMM_F32, COMM_SUM, NULL) != COMM_OK ||
        comm_allreduce(r->comm, ref, ref, count, COMM_F32, COMM_SUM, NULL) != COMM_OK)
        h_fail(r, "issue order: the reference calls failed");
    else if (memcmp(ref, y, count * 4) != 0)
        h_fail(r, "issue order: the blocking call did not see the pending call's result");
    free(x), free(y), free(ref);
}

static void test_and_order(void **state)
{
    (void)state;
    for (int procs = 0; procs < 2; procs++)
        for (int n = 2; n <= 4; n++) {
            struct h_job job = {
                .nranks = n, .procs = procs, .body = test_order_body, .kill_rank = -1};
            expect_clean(h_run(&job), n);
        }
}

/* ---- comm_abort while requests pend ---- */

struct abort_later_arg {
    comm_t *comm;
    _Atomic int *aborted; /* the peers issue once it is set */
};

static void *abort_later(void *arg)
{
    struct abort_later_arg *a = arg;
    sleep_ms(50);
    comm_abort(a->comm);
    atomic_store(a->aborted, 1);
    return NULL;
}

enum { ABORT_REQS = 4 };

static void abort_body(struct h_rank *r)
{
    size_t count = 300;
    double *buf = xmalloc(count * 8 * ABORT_REQS);
    h_fill(buf, count * ABORT_REQS, COMM_F64, 5, r->rank);
    comm_request_t *req[ABORT_REQS] = {NULL};
    double t0 = h_now_ms();
    if (r->rank == 0) {
        /* The peers never issue: the calls wait until comm_abort ends them all. */
        pthread_t t;
        struct abort_later_arg a = {.comm = r->comm, .aborted = r->arg};
        pthread_create(&t, NULL, abort_later, &a);
        for (int i = 0; i < ABORT_REQS; i++)
            if (comm_iallreduce(r->comm, buf + i * count, buf + i * count, count, COMM_F64,
                                COMM_SUM, &req[i]) != COMM_OK)
                h_fail(r, "issue %d: %s", i, comm_last_error(NULL));
        for (int i = 0; i < ABORT_REQS; i++) {
            comm_status_t st = comm_wait(&req[i]);
            if (st != COMM_ERR_ABORTED)
                h_fail(r, "request %d: %s, want COMM_ERR_ABORTED", i, comm_status_string(st));
        }
        pthread_join(t, NULL);
    } else {
        await_word(r->arg, 1); /* issued after rank 0's abort: they cannot complete */
        for (int i = 0; i < ABORT_REQS; i++)
            if (comm_iallreduce(r->comm, buf + i * count, buf + i * count, count, COMM_F64,
                                COMM_SUM, &req[i]) != COMM_OK)
                h_fail(r, "issue %d: %s", i, comm_last_error(NULL));
        for (int i = 0; i < ABORT_REQS; i++) {
            comm_status_t st = comm_wait(&req[i]);
            if (st != COMM_ERR_PEER)
                h_fail(r, "request %d: %s, want COMM_ERR_PEER", i, comm_status_string(st));
        }
    }
    /* Far below the 60 s timeout: the abort ended them. */
    if (h_now_ms() - t0 > 10000)
        h_fail(r, "the aborted requests took %.0f ms", h_now_ms() - t0);
    free(buf);
}

static void abort_pending(void **state)
{
    (void)state;
    for (int procs = 0; procs < 2; procs++)
        for (int n = 2; n <= 4; n++) {
            struct h_job job = {.nranks = n,
                                .procs = procs,
                                .body = abort_body,
                                .arg = (void *)shared_word(),
                                .kill_rank = -1};
            expect_clean(h_run(&job), n);
            munmap(job.arg, sizeof(_Atomic int));
        }
}

/* ---- a peer that never issues: TIMEOUT, bounded ---- */

enum { TIMEOUT_MS = 1000 };

static void timeout_body(struct h_rank *r)
{
    _Atomic int *finished = r->arg; /* shared with the forked ranks (MAP_SHARED) */
    int32_t v = r->rank + 1;
    if (r->rank == r->nranks - 1) {
        /* Never issues; leaves (which the peers would see as COMM_ERR_PEER) only once
         * the others have their answer. */
        await_word(finished, r->nranks - 1);
        return;
    }
    comm_request_t *req = NULL;
    double t0 = h_now_ms();
    comm_status_t st = comm_iallreduce(r->comm, &v, &v, 1, COMM_I32, COMM_SUM, &req);
    if (st == COMM_OK)
        st = comm_wait(&req);
    double ms = h_now_ms() - t0;
    atomic_fetch_add(finished, 1);
    /* The first rank to time out tells the others (COMM_ERR_PEER). */
    if (st != COMM_ERR_TIMEOUT && st != COMM_ERR_PEER)
        h_fail(r, "comm_wait: %s, want COMM_ERR_TIMEOUT", comm_status_string(st));
    r->status = st;
    if (ms > 5 * TIMEOUT_MS)
        h_fail(r, "the timeout of %d ms took %.0f ms", TIMEOUT_MS, ms);
}

static void peer_never_issues(void **state)
{
    (void)state;
    _Atomic int *finished =
        mmap(NULL, sizeof(*finished), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(finished != MAP_FAILED);
    for (int procs = 0; procs < 2; procs++)
        for (int n = 2; n <= 4; n++) {
            atomic_store(finished, 0);
            struct h_job job = {.nranks = n,
                                .procs = procs,
                                .timeout_ms = TIMEOUT_MS,
                                .body = timeout_body,
                                .arg = (void *)finished,
                                .kill_rank = -1};
            struct h_rank *res = h_run(&job);
            expect_clean(res, n);
            int timed_out = 0;
            for (int r = 0; r < n - 1; r++)
                timed_out += res[r].status == COMM_ERR_TIMEOUT;
            assert_true(timed_out >= 1);
        }
    munmap((void *)finished, sizeof(*finished));
}

/* ---- comm_destroy with requests outstanding; the progress thread's life ---- */

static void destroy_body(struct h_rank *r)
{
    int32_t v = r->rank;
    comm_t *dup = NULL;
    int base = threads_now();
    if (comm_dup(r->comm, &dup) != COMM_OK) {
        h_fail(r, "comm_dup: %s", comm_last_error(r->comm));
        return;
    }
    comm_request_t *req[2] = {NULL, NULL};
    if (comm_iallreduce(dup, &v, &v, 1, COMM_I32, COMM_SUM, &req[0]) != COMM_OK ||
        comm_ibarrier(dup, &req[1]) != COMM_OK)
        h_fail(r, "issue: %s", comm_last_error(NULL));
    int with = threads_now();
    /* Thread ranks share the process: only process ranks count one thread exactly. */
    if (r->procs && with != base + 1)
        h_fail(r, "%d threads with a progress thread, %d before", with, base);
    comm_status_t st = comm_destroy(dup);
    if (st != COMM_ERR_INVALID || !strstr(comm_last_error(NULL), "2 asynchronous requests"))
        h_fail(r, "comm_destroy with 2 requests outstanding: %s: %s", comm_status_string(st),
               comm_last_error(NULL));
    /* A child of a communicator with a progress thread starts without one. */
    comm_t *child = NULL;
    if (comm_dup(dup, &child) != COMM_OK)
        h_fail(r, "comm_dup of the busy one: %s", comm_last_error(dup));
    if (r->procs && threads_now() != with)
        h_fail(r, "comm_dup's child made %d threads", threads_now() - with);
    if (child != NULL)
        comm_destroy(child);
    if (comm_wait_all(2, req) != COMM_OK || v != r->nranks * (r->nranks - 1) / 2)
        h_fail(r, "the requests: %s, sum %d", comm_last_error(dup), v);
    if (comm_destroy(dup) != COMM_OK)
        h_fail(r, "comm_destroy: %s", comm_last_error(NULL));
    if (r->procs && threads_now() != base)
        h_fail(r, "%d threads after comm_destroy, %d before", threads_now(), base);
}

static void destroy_and_threads(void **state)
{
    (void)state;
    for (int procs = 0; procs < 2; procs++)
        for (int n = 2; n <= 4; n++) {
            struct h_job job = {.nranks = n, .procs = procs, .body = destroy_body, .kill_rank = -1};
            expect_clean(h_run(&job), n);
        }
    /* Thread ranks: every progress thread is joined once the job is over. */
    int base = threads_now();
    struct h_job job = {.nranks = 3, .body = destroy_body, .kill_rank = -1};
    expect_clean(h_run(&job), 3);
    assert_int_equal(threads_now(), base);
}

/* ---- the wait hook runs in the waiting thread, never in the progress thread ---- */

struct hook_seen {
    pthread_t owner; /* the rank's own thread */
    int calls;       /* from the owner */
    int elsewhere;   /* from any other thread */
};

static int hook(comm_t *comm, void *arg)
{
    (void)comm;
    struct hook_seen *h = arg;
    if (!pthread_equal(pthread_self(), h->owner))
        __atomic_fetch_add(&h->elsewhere, 1, __ATOMIC_RELAXED);
    else
        h->calls++;
    return h->calls >= 3 ? 9 : 0; /* the third run stops the call */
}

static void hook_body(struct h_rank *r)
{
    struct hook_seen h = {.owner = pthread_self()};
    int32_t v = 1;
    comm_request_t *req = NULL;
    if (r->rank == 0) {
        if (comm_set_wait_hook(r->comm, hook, &h, 2000) != COMM_OK)
            h_fail(r, "comm_set_wait_hook: %s", comm_last_error(r->comm));
        comm_status_t st = comm_iallreduce(r->comm, &v, &v, 1, COMM_I32, COMM_SUM, &req);
        if (st == COMM_OK)
            st = comm_wait(&req);
        atomic_store((_Atomic int *)r->arg, 1);
        if (st != COMM_ERR_ABORTED || h.calls != 3 || h.elsewhere != 0)
            h_fail(r, "a hook that stops: %s, %d runs in comm_wait's thread, %d elsewhere",
                   comm_status_string(st), h.calls, h.elsewhere);
    } else {
        await_word(r->arg, 1); /* late: rank 0 waits until its hook stops it */
        comm_status_t st = comm_iallreduce(r->comm, &v, &v, 1, COMM_I32, COMM_SUM, &req);
        if (st == COMM_OK)
            st = comm_wait(&req);
        if (st != COMM_ERR_PEER)
            h_fail(r, "the peers of a hook that stopped: %s", comm_status_string(st));
    }
}

static void wait_hook(void **state)
{
    (void)state;
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2,
                            .procs = procs,
                            .body = hook_body,
                            .arg = (void *)shared_word(),
                            .kill_rank = -1};
        expect_clean(h_run(&job), 2);
        munmap(job.arg, sizeof(_Atomic int));
    }
}

/* ---- refusals at issue ---- */

static void refusals_body(struct h_rank *r)
{
    int32_t v[4] = {1, 2, 3, 4};
    comm_request_t *req = (comm_request_t *)&v; /* must stay untouched */
    comm_request_t *const sentinel = req;
    if (comm_iallreduce(r->comm, v, v, 4, COMM_I32, COMM_SUM, NULL) != COMM_ERR_INVALID)
        h_fail(r, "NULL req accepted");
    /* UNSUPPORTED: refused alike, the communicator stays usable. */
    if (comm_iallreduce(r->comm, v, v, 4, COMM_I32, COMM_AVG, &req) != COMM_ERR_UNSUPPORTED ||
        req != sentinel)
        h_fail(r, "integer AVG: not UNSUPPORTED at issue, or *req written");
    req = NULL;
    if (comm_iallreduce(r->comm, v, v, 4, COMM_I32, COMM_SUM, &req) != COMM_OK ||
        comm_wait(&req) != COMM_OK || v[0] != r->nranks)
        h_fail(r, "a call after UNSUPPORTED: %s", comm_last_error(r->comm));
    /* INVALID at issue; the communicator breaks in that call's turn. */
    req = sentinel;
    comm_status_t st = comm_ibroadcast(r->comm, v, v, 4, COMM_I32, r->nranks, &req);
    if (st != COMM_ERR_INVALID || req != sentinel || !strstr(comm_last_error(NULL), "root"))
        h_fail(r, "root out of range: %s (%s)", comm_status_string(st), comm_last_error(NULL));
    req = NULL;
    st = comm_iallreduce(r->comm, v, v, 4, COMM_I32, COMM_SUM, &req);
    if (st == COMM_OK)
        st = comm_wait(&req);
    if (st != COMM_ERR_INVALID && st != COMM_ERR_PEER)
        h_fail(r, "a call after the refused one: %s, want the broken status",
               comm_status_string(st));
    if (comm_wait(&req) != COMM_ERR_INVALID || comm_wait(NULL) != COMM_ERR_INVALID ||
        comm_test(&req, NULL) != COMM_ERR_INVALID || comm_wait_all(-1, NULL) != COMM_ERR_INVALID)
        h_fail(r, "a NULL request accepted");
    if (comm_wait_all(0, NULL) != COMM_OK)
        h_fail(r, "comm_wait_all of nothing failed");
}

static void refused_then_destroy_body(struct h_rank *r)
{
    comm_t *dup = NULL;
    int32_t v = 1;
    comm_request_t *req = NULL;
    if (comm_dup(r->comm, &dup) != COMM_OK) {
        h_fail(r, "comm_dup: %s", comm_last_error(r->comm));
        return;
    }
    if (comm_iallreduce(dup, &v, NULL, 1, COMM_I32, COMM_SUM, &req) != COMM_ERR_INVALID)
        h_fail(r, "a NULL recvbuf accepted at issue");
    comm_status_t st = comm_destroy(dup);
    if (st != COMM_OK)
        h_fail(r, "comm_destroy after a refused call: %s: %s", comm_status_string(st),
               comm_last_error(NULL));
}

static void refusals(void **state)
{
    (void)state;
    comm_request_t *req = NULL;
    assert_int_equal(comm_ibarrier(NULL, &req), COMM_ERR_INVALID);
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 2, .procs = procs, .body = refusals_body, .kill_rank = -1};
        expect_clean(h_run(&job), 2);
    }
    /* Caller progress: a refused call's queued failure does not hold comm_destroy up. */
    h_env_push("ARCOMM_PROGRESS", "caller");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {
            .nranks = 2, .procs = procs, .body = refused_then_destroy_body, .kill_rank = -1};
        expect_clean(h_run(&job), 2);
    }
    h_env_pop();
    h_env_push("ARCOMM_PROGRESS", "sometimes");
    struct h_job job = {.nranks = 1, .body = refusals_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    assert_true(res[0].errors > 0); /* every call refused: the knob is checked */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mixed_threads),       cmocka_unit_test(mixed_procs),
        cmocka_unit_test(mixed_caller),        cmocka_unit_test(test_and_order),
        cmocka_unit_test(abort_pending),       cmocka_unit_test(peer_never_issues),
        cmocka_unit_test(destroy_and_threads), cmocka_unit_test(refusals),
        cmocka_unit_test(wait_hook),           cmocka_unit_test(p2p_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
