/* SPDX-License-Identifier: MIT */
/*
 * comm_split and comm_dup when they must fail (the successes are in test_split.c, whose
 * main() runs these tests): a rank making another call (MISMATCH on every rank), bad
 * arguments, a dead or aborting peer (before the split, or while the new communicators
 * form), a group whose comm_init fails, and a child that inherits its parent's timeout;
 * every rank returns an error within the timeout, no failed call writes *newcomm, and
 * nothing may be left in /dev/shm, the children's segments included.
 */
#include "split_common.h"

#include "rt_hooks.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/types.h>

static void expect_status(struct h_rank *r, comm_t *c, comm_status_t got, comm_status_t want,
                          const char *must_contain)
{
    if (got != want) {
        h_fail(r, "got %s, want %s (%s)", comm_status_string(got), comm_status_string(want),
               comm_last_error(c));
        return;
    }
    if (must_contain && strstr(comm_last_error(c), must_contain) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\"", comm_last_error(c), must_contain);
}

/* ---- mismatches and bad arguments ---- */

enum other { OTHER_ALLREDUCE, OTHER_BARRIER };

static void mismatch_body(struct h_rank *r)
{
    enum other other = *(enum other *)r->arg;
    float send[100], recv[100];
    h_fill(send, 100, COMM_F32, 3, r->rank);
    h_poison(recv, 100, COMM_F32);
    comm_t *child = SENTINEL;
    comm_status_t st;
    if (r->rank == r->nranks - 1)
        st = other == OTHER_BARRIER
                 ? comm_barrier(r->comm)
                 : comm_allreduce(r->comm, send, recv, 100, COMM_F32, COMM_SUM, NULL);
    else
        st = comm_split(r->comm, 0, r->rank, &child);
    expect_status(r, r->comm, st, COMM_ERR_MISMATCH, "disagree");
    if (r->rank != r->nranks - 1)
        expect_status(r, r->comm, st, COMM_ERR_MISMATCH, "made comm_split");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    for (int i = 0; i < 100; i++) {
        uint32_t bits;
        memcpy(&bits, &recv[i], 4);
        if (bits != 0xffffffffu) {
            h_fail(r, "recvbuf element %d was written by a mismatched call", i);
            break;
        }
    }
    /* The parent stays broken, and a split on it says so at once. */
    double t0 = h_now_ms();
    st = comm_split(r->comm, 0, 0, &child);
    if (st != COMM_ERR_MISMATCH || child != SENTINEL || h_now_ms() - t0 > 100)
        h_fail(r, "a split after the mismatch returned %s after %.0f ms", comm_status_string(st),
               h_now_ms() - t0);
}

static void run_mismatch(enum other other, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = &other,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, n);
    assert_int_equal(sp_leftovers(&res[0].id, 2, 1), 0);
}

void mismatch_allreduce(void **s)
{
    (void)s;
    run_mismatch(OTHER_ALLREDUCE, 3, false);
}

void mismatch_allreduce_procs(void **s)
{
    (void)s;
    run_mismatch(OTHER_ALLREDUCE, 2, true);
}

void mismatch_barrier(void **s)
{
    (void)s;
    run_mismatch(OTHER_BARRIER, 2, false);
}

static void null_newcomm_body(struct h_rank *r)
{
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    if (r->rank == 1) {
        comm_status_t st = comm_split(r->comm, 0, 0, NULL);
        expect_status(r, r->comm, st, COMM_ERR_INVALID, "newcomm is NULL");
        usleep(300 * 1000); /* its comm_destroy must not be what tells the peers */
    } else {
        comm_status_t st = comm_split(r->comm, 0, 0, &child);
        /* The root cause, not rank 1 leaving at comm_destroy. */
        expect_status(r, r->comm, st, COMM_ERR_PEER, "newcomm is NULL");
        if (child != SENTINEL)
            h_fail(r, "a failed comm_split wrote *newcomm");
    }
    if (h_now_ms() - t0 > 5000)
        h_fail(r, "the failure took %.0f ms to arrive", h_now_ms() - t0);
}

void invalid_arguments(void **s)
{
    (void)s;
    comm_t *child = SENTINEL;
    assert_int_equal(comm_split(NULL, 0, 0, &child), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm is NULL"));
    assert_non_null(strstr(comm_last_error(NULL), "comm_split"));
    assert_int_equal(comm_dup(NULL, &child), COMM_ERR_INVALID);
    assert_non_null(strstr(comm_last_error(NULL), "comm_dup"));
    assert_ptr_equal(child, SENTINEL);

    struct h_job job = {.nranks = 3, .body = null_newcomm_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 3);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 1), 0);
}

/* ---- holding a rank between the split's handshakes ----
 *
 * The new communicators' ranks wait there for each other.  This shm_open takes the place of libc's
 * for libarcomm too (the program's definition comes first).  Armed in one thread, the first
 * shm_open of that thread after it waits first: a rank so armed before comm_split passes the first
 * handshake and is held before it reaches its new communicator's segment, where its group's other
 * ranks wait for it.
 */
static __thread int hold_next_open_ms;

__attribute__((visibility("default"))) int shm_open(const char *name, int oflag, mode_t mode)
{
    typedef int (*open_fn)(const char *, int, mode_t);
    static open_fn real;
    open_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        f = (open_fn)dlsym(RTLD_NEXT, "shm_open");
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    int ms = hold_next_open_ms;
    hold_next_open_ms = 0;
    if (ms > 0)
        usleep((useconds_t)ms * 1000);
    return f(name, oflag, mode);
}

#define HELD_RANK 2

/* ---- a peer that dies or aborts: every rank returns an error within the timeout ---- */

#define FAIL_TIMEOUT_MS 3000

static void dead_body(struct h_rank *r)
{
    if (r->rank == 2) {
        sleep(30); /* killed by the harness instead of calling comm_split */
        return;
    }
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, r->rank % 2, 0, &child);
    double ms = h_now_ms() - t0;
    expect_status(r, r->comm, st, COMM_ERR_PEER, "rank 2");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms, past the %d ms timeout", ms, FAIL_TIMEOUT_MS);
}

void dead_peer(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3,
                        .procs = true,
                        .body = dead_body,
                        .kill_rank = 2,
                        .kill_after_ms = 300,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 3);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 2), 0);
}

struct aborter {
    comm_t *comm;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct aborter *a = arg;
    usleep((useconds_t)a->delay_ms * 1000);
    comm_abort(a->comm);
    return NULL;
}

/*
 * Rank 0 is blocked in comm_split when another of its threads aborts the parent at
 * 200 ms.  Without arg: all in one group, rank 2 comes to the split 600 ms late.  With
 * arg (joining): groups {2, 0} (keys -rank) and {1}, rank 2 held 1.5 s after the first
 * handshake, so that rank 0 waits for the segment rank 2 is to make; rank 0 stops at
 * its abort (before the join watched the parent, it went on waiting until rank 2 came).
 */
static void abort_body(struct h_rank *r)
{
    bool joining = r->arg != NULL;
    pthread_t t;
    struct aborter a = {.comm = r->comm, .delay_ms = 200};
    if (r->rank == 0)
        pthread_create(&t, NULL, abort_later, &a);
    if (r->rank == HELD_RANK && joining)
        hold_next_open_ms = 1500;
    else if (r->rank == HELD_RANK)
        usleep(600 * 1000);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = joining ? comm_split(r->comm, r->rank % 2, -r->rank, &child)
                               : comm_split(r->comm, 0, 0, &child);
    double ms = h_now_ms() - t0;
    if (r->rank == 0)
        pthread_join(t, NULL);
    expect_status(r, r->comm, st, r->rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER,
                  r->rank == 0 ? "comm_abort" : "rank 0");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (joining && r->rank == 0 && ms > 1000)
        h_fail(r, "rank 0 returned %.0f ms after the split began, its abort came at 200 ms", ms);
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms", ms);
}

void aborting_peer(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 3, .procs = true, .body = abort_body, .kill_rank = -1, .timeout_ms = 10000};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 3);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 1), 0);
}

/* ---- the split's own abort word (rt_hook_split: ncclCommAbort of the new handle) ---- */

struct word_setter {
    volatile int *word;
    int delay_ms;
};

static void *set_word_later(void *arg)
{
    struct word_setter *w = arg;
    usleep((useconds_t)w->delay_ms * 1000);
    __atomic_store_n(w->word, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void abort_word_body(struct h_rank *r)
{
    /* Rank 0 splits with an abort word, set 200 ms later by another of its threads while
     * rank 2 has not come yet: rank 0 stops at once and its parent breaks, so ranks 1 and
     * 2 (which comes at 600 ms) return PEER at once too, not after the timeout. */
    volatile int word = 0;
    struct word_setter w = {.word = &word, .delay_ms = 200};
    pthread_t t;
    if (r->rank == 0)
        pthread_create(&t, NULL, set_word_later, &w);
    if (r->rank == 2)
        usleep(600 * 1000);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = r->rank == 0 ? rt_hook_split(r->comm, 0, 0, &word, &child)
                                    : comm_split(r->comm, 0, 0, &child);
    double ms = h_now_ms() - t0;
    if (r->rank == 0)
        pthread_join(t, NULL);
    expect_status(r, r->comm, st, r->rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER,
                  r->rank == 0 ? "abort word" : "rank 0");
    if (child != SENTINEL)
        h_fail(r, "a failed split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS / 2)
        h_fail(r, "the split returned after %.0f ms (timeout %d ms)", ms, FAIL_TIMEOUT_MS);
    /* The parent is broken on every rank: a call on it fails at once. */
    t0 = h_now_ms();
    st = comm_barrier(r->comm);
    ms = h_now_ms() - t0;
    if (st == COMM_OK || ms > FAIL_TIMEOUT_MS / 2)
        h_fail(r, "a barrier on the parent after the aborted split: %s after %.0f ms",
               comm_status_string(st), ms);
}

void aborting_split_word(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 3,
                        .procs = true,
                        .body = abort_word_body,
                        .kill_rank = -1,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 3);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 1), 0);
}

/* With the word set before the call, rank 1 (first there: the others come 200 ms later)
 * stops in the parent's first handshake: it says ABORTED, every other rank PEER, and
 * nothing of the children is left. */
static void abort_word_set_body(struct h_rank *r)
{
    volatile int word = 1;
    if (r->rank != 1)
        usleep(200 * 1000);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = r->rank == 1 ? rt_hook_split(r->comm, r->rank % 2, 0, &word, &child)
                                    : comm_split(r->comm, r->rank % 2, 0, &child);
    double ms = h_now_ms() - t0;
    expect_status(r, r->comm, st, r->rank == 1 ? COMM_ERR_ABORTED : COMM_ERR_PEER,
                  r->rank == 1 ? "abort word" : "rank 1");
    if (child != SENTINEL)
        h_fail(r, "a failed split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS / 2)
        h_fail(r, "the split returned after %.0f ms (timeout %d ms)", ms, FAIL_TIMEOUT_MS);
}

void aborting_split_word_set(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 4,
                        .procs = false,
                        .body = abort_word_set_body,
                        .kill_rank = -1,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 4);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 2), 0);
}

/* ---- a rank held between the split's handshakes, killed or aborted there ---- */

/* Rank 2 is killed while held.  In group {0, 2} (keys 0) it is the second rank: rank 0
 * made the new segment and waits for rank 2 to join it; in group {2, 0} (keys -rank,
 * arg set) the first: rank 0 waits for rank 2 to make it.  Without the parent watched,
 * rank 0 waited either way until the timeout. */
static void dead_joining_body(struct h_rank *r)
{
    bool held_first = *(bool *)r->arg;
    if (r->rank == HELD_RANK)
        hold_next_open_ms = 30000; /* killed by the harness while held */
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, r->rank % 2, held_first ? -r->rank : 0, &child);
    double ms = h_now_ms() - t0;
    expect_status(r, r->comm, st, COMM_ERR_PEER, "rank 2");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS / 2)
        h_fail(r, "comm_split returned after %.0f ms (timeout %d ms)", ms, FAIL_TIMEOUT_MS);
}

/* One of the jobs with rank 2 held: 3 ranks, killed while held when kill is set. */
static void run_held(h_body_fn body, void *arg, bool procs, bool kill)
{
    struct h_job job = {.nranks = 3,
                        .procs = procs,
                        .body = body,
                        .arg = arg,
                        .kill_rank = kill ? HELD_RANK : -1,
                        .kill_after_ms = 300,
                        .kill_after_ready = true,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 3);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 2), 0);
}

void dead_peer_joining(void **s)
{
    (void)s;
    bool held_first = false;
    run_held(dead_joining_body, &held_first, true, true);
}

void dead_peer_making(void **s)
{
    (void)s;
    bool held_first = true;
    run_held(dead_joining_body, &held_first, true, true);
}

static int joining_arg; /* abort_body's arg: any non-NULL pointer */

void aborting_parent_joining(void **s)
{
    (void)s;
    run_held(abort_body, &joining_arg, false, false);
}

void aborting_parent_joining_procs(void **s)
{
    (void)s;
    run_held(abort_body, &joining_arg, true, false);
}

/* ---- one group's comm_init fails: every rank returns its status, the parent lives ---- */

static void child_fail_body(struct h_rank *r)
{
    /* Only rank 1's new communicator cannot open its log. */
    if (r->rank == 1)
        setenv("ARCOMM_LOG_FILE", "/nonexistent-arcomm-dir/split.log", 1);
    comm_t *child = SENTINEL;
    double t0 = h_now_ms();
    comm_status_t st = comm_split(r->comm, r->rank % 2, 0, &child);
    double ms = h_now_ms() - t0;
    if (r->rank == 1)
        unsetenv("ARCOMM_LOG_FILE");
    expect_status(r, r->comm, st, COMM_ERR_INVALID, "rank 1");
    if (r->rank == 1)
        expect_status(r, r->comm, st, COMM_ERR_INVALID, "ARCOMM_LOG_FILE");
    if (child != SENTINEL)
        h_fail(r, "a failed comm_split wrote *newcomm");
    if (ms > FAIL_TIMEOUT_MS)
        h_fail(r, "comm_split returned after %.0f ms", ms);
    /* Both handshakes completed: the parent is still whole. */
    sp_reduce_check(r, r->comm, 100, COMM_F64, 61, "parent after the failed split");
}

void child_init_fails(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 4,
                        .procs = true,
                        .body = child_fail_body,
                        .kill_rank = -1,
                        .timeout_ms = FAIL_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 4);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 2), 0);
}

/* ---- the child inherits the parent's timeout ---- */

#define SHORT_TIMEOUT_MS 800

static void timeout_body(struct h_rank *r)
{
    comm_t *dup = NULL;
    comm_status_t st = comm_dup(r->comm, &dup);
    if (st != COMM_OK) {
        h_fail(r, "comm_dup: %s", comm_last_error(r->comm));
        return;
    }
    float x[16], y[16];
    h_fill(x, 16, COMM_F32, 81, r->rank);
    /* Rank 1 comes long after rank 0's timeout (the parent's, not the default). */
    if (r->rank == 1)
        usleep(3 * SHORT_TIMEOUT_MS * 1000);
    double t0 = h_now_ms();
    st = comm_allreduce(dup, x, y, 16, COMM_F32, COMM_SUM, NULL);
    double ms = h_now_ms() - t0;
    if (r->rank == 0) {
        expect_status(r, dup, st, COMM_ERR_TIMEOUT, "rank 1");
        if (ms < SHORT_TIMEOUT_MS * 0.9 || ms > 2.5 * SHORT_TIMEOUT_MS)
            h_fail(r, "the child timed out after %.0f ms, not the parent's %d ms", ms,
                   SHORT_TIMEOUT_MS);
    } else if (st == COMM_OK) {
        h_fail(r, "rank 1's late allreduce succeeded: rank 0 should have timed out");
    }
    comm_destroy(dup);
}

void child_timeout(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 2, .body = timeout_body, .kill_rank = -1, .timeout_ms = SHORT_TIMEOUT_MS};
    struct h_rank *res = h_run(&job);
    sp_expect_clean(res, 2);
    assert_int_equal(sp_leftovers(&res[0].id, 1, 1), 0);
}
