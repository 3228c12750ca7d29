/* SPDX-License-Identifier: MIT */
/*
 * comm_config_t.abort_flag: another thread ends a rank's comm_init, wherever it waits
 * (for rank 0 to make the segment, for the others to join, or before it started), with
 * COMM_ERR_ABORTED; the other ranks learn it at once (COMM_ERR_PEER, the cause named)
 * instead of at their timeout; nothing stays in /dev/shm; once comm_init returned, the
 * word is not read again.  Thread ranks and process ranks alike.
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

/* The communicators' timeout: far beyond what an abort may take to reach everyone. */
#define ABORT_TIMEOUT_MS 20000
/* How long every rank may take to return once the word is set: the culprit stays up to
 * 0.5 s for ranks still to come (rendezvous.c); the others learn within milliseconds. */
#define ABORT_LEARN_MS 3000
#define H_MAX          4

enum when {
    SET_LATER,    /* a thread sets the word set_after_ms after comm_init started */
    SET_BEFORE,   /* set before comm_init is called */
    SET_AFTER_OK, /* every rank sets its word once comm_init returned: nobody must care */
};

struct abort_case {
    int nranks;
    int culprit;     /* the rank whose word is set */
    int absent;      /* a rank that never calls comm_init (-1: none) */
    bool rank0_late; /* rank 0 calls comm_init only once the culprit's stub exists */
    enum when when;
    int set_after_ms;
};

static int words[H_MAX]; /* per rank (thread ranks share this array) */

struct setter {
    int *word;
    int after_ms;
};

static void *set_later(void *arg)
{
    struct setter *s = arg;
    usleep((useconds_t)s->after_ms * 1000);
    __atomic_store_n(s->word, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void abort_body(struct h_rank *r)
{
    const struct abort_case *k = r->arg;
    r->status = -100;
    ((char *)r->out)[0] = '\0';
    if (r->rank == k->absent)
        return;
    int *word = &words[r->rank];
    __atomic_store_n(word, k->when == SET_BEFORE && r->rank == k->culprit, __ATOMIC_RELAXED);
    if (k->rank0_late && r->rank == 0) {
        double t0 = h_now_ms();
        while (!h_segment_exists(&r->id) && h_now_ms() - t0 < ABORT_TIMEOUT_MS)
            usleep(1000);
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = ABORT_TIMEOUT_MS;
    cfg.abort_flag = word;

    pthread_t setter_thread;
    struct setter set = {.word = word, .after_ms = k->set_after_ms};
    bool setting = k->when == SET_LATER && r->rank == k->culprit;
    if (setting && pthread_create(&setter_thread, NULL, set_later, &set) != 0) {
        h_fail(r, "pthread_create failed");
        return;
    }
    double t0 = h_now_ms();
    comm_status_t st = comm_init(&r->comm, &cfg);
    r->elapsed_s = (h_now_ms() - t0) / 1e3;
    r->status = st;
    snprintf((char *)r->out, 1024, "%s", st == COMM_OK ? "" : comm_last_error(NULL));
    if (setting)
        pthread_join(setter_thread, NULL);
    if (st != COMM_OK)
        return;
    if (k->when == SET_AFTER_OK)
        __atomic_store_n(word, 1, __ATOMIC_RELAXED);
    h_allreduce_checked(r, 4096, 5, "allreduce after comm_init with the word set");
    comm_destroy(r->comm);
    r->comm = NULL;
}

static void run_case(const struct abort_case *k)
{
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = k->nranks,
                            .procs = procs,
                            .no_init = true,
                            .body = abort_body,
                            .arg = (void *)k,
                            .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        for (int r = 0; r < k->nranks; r++) {
            if (res[r].errors)
                fail_msg("%s ranks, rank %d: %s", procs ? "process" : "thread", r,
                         res[r].first_error);
            if (r == k->absent)
                continue;
            const char *msg = (const char *)res[r].out;
            comm_status_t want = k->when == SET_AFTER_OK ? COMM_OK
                                 : r == k->culprit       ? COMM_ERR_ABORTED
                                                         : COMM_ERR_PEER;
            if (res[r].status != (int)want)
                fail_msg("%s ranks, rank %d: comm_init returned %s after %.0f ms, want %s (\"%s\")",
                         procs ? "process" : "thread", r,
                         comm_status_string((comm_status_t)res[r].status), res[r].elapsed_s * 1e3,
                         comm_status_string(want), msg);
            if (want == COMM_OK)
                continue;
            if (strstr(msg, "abort_flag") == NULL || strstr(msg, "rank ") == NULL)
                fail_msg("rank %d: message \"%s\" does not name the rank and abort_flag", r, msg);
            if (res[r].elapsed_s * 1e3 > k->set_after_ms + ABORT_LEARN_MS)
                fail_msg("rank %d: comm_init returned after %.0f ms (\"%s\")", r,
                         res[r].elapsed_s * 1e3, msg);
        }
        assert_int_equal(h_shm_leftovers(), 0);
    }
}

/* The culprit waits for a rank that never comes; its peer learns at once. */
static void abort_while_joining(void **s)
{
    (void)s;
    for (int culprit = 0; culprit < 2; culprit++) {
        struct abort_case k = {
            .nranks = 3, .culprit = culprit, .absent = 2, .when = SET_LATER, .set_after_ms = 300};
        run_case(&k);
    }
}

/* Rank 1 waits for rank 0 to make the segment: rank 0, coming later, learns from the
 * stub rank 1 left. */
static void abort_before_segment(void **s)
{
    (void)s;
    struct abort_case k = {.nranks = 2,
                           .culprit = 1,
                           .absent = -1,
                           .rank0_late = true,
                           .when = SET_LATER,
                           .set_after_ms = 200};
    run_case(&k);
}

/* Set before comm_init was called: that rank fails at once, the others learn. */
static void abort_set_before(void **s)
{
    (void)s;
    for (int culprit = 0; culprit < 2; culprit++) {
        struct abort_case k = {.nranks = 2, .culprit = culprit, .absent = -1, .when = SET_BEFORE};
        run_case(&k);
    }
}

/* Set once comm_init returned: the communicator works as if it never was. */
static void abort_after_init_ignored(void **s)
{
    (void)s;
    struct abort_case k = {.nranks = 2, .culprit = 0, .absent = -1, .when = SET_AFTER_OK};
    run_case(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(abort_while_joining),
        cmocka_unit_test(abort_before_segment),
        cmocka_unit_test(abort_set_before),
        cmocka_unit_test(abort_after_init_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
