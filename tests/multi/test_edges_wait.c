/* SPDX-License-Identifier: MIT */
/*
 * The edges of the shared-memory waits and handshake: a peer that finishes a call and
 * leaves at once never fails that call elsewhere; garbage a peer writes into the
 * segment never makes a rank touch memory outside it; a peer's error text arrives whole
 * and names the rank that really failed; a timeout names the ranks that did not come;
 * a timeout of "practically never" does not wrap.
 */
#include "harness.h"
#include "../../transports/shm/layout.h"

#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
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
            fail_msg("rank %d: %ld errors; first: %s", r, res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

/* Pins this thread (and the ranks it starts, threads or forked processes) to one CPU,
 * so that a rank is often preempted between two steps of a wait; returns the old mask. */
static cpu_set_t pin_to_one_cpu(void)
{
    cpu_set_t old, one;
    CPU_ZERO(&old);
    sched_getaffinity(0, sizeof(old), &old);
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &old)) {
            CPU_SET(cpu, &one);
            break;
        }
    sched_setaffinity(0, sizeof(one), &one);
    return old;
}

static void unpin(cpu_set_t old)
{
    sched_setaffinity(0, sizeof(old), &old);
}

/* ---- 1. a rank that completed call N never fails a peer's call N ---- */

enum last_call { LAST_ALLREDUCE, LAST_BARRIER, LAST_BULK };

static void last_call_body(struct h_rank *r)
{
    enum last_call kind = *(enum last_call *)r->arg;
    size_t count = kind == LAST_BULK ? 4096 : 3;
    float send[4096], recv[4096];
    h_fill(send, count, COMM_F32, 11, r->rank);
    h_poison(recv, count, COMM_F32);
    comm_status_t st = kind == LAST_BARRIER
                           ? comm_barrier(r->comm)
                           : comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK) {
        h_fail(r, "the last call before comm_destroy returned %s: %s", comm_status_string(st),
               comm_last_error(r->comm));
        return;
    }
    if (kind != LAST_BARRIER)
        h_check(r, recv, count, COMM_F32, COMM_SUM, 11, r->nranks, NULL, 0, false);
    /* The harness calls comm_destroy right after the body. */
}

static void run_last_call(enum last_call kind, int n, bool procs, bool pinned, int iters)
{
    if (h_quick())
        iters /= 10;
    if (getenv("EDGES_ITERS"))
        iters = atoi(getenv("EDGES_ITERS"));
    cpu_set_t old;
    if (pinned) {
        old = pin_to_one_cpu();
        /* Spinning on the one CPU: a waiter runs until the scheduler preempts it, at any
         * point of its wait, and its peers then finish the call and leave. */
        h_env_push("ARCOMM_SPIN_NS", getenv("EDGES_SPIN") ? getenv("EDGES_SPIN") : "20000000");
    }
    int failed = 0;
    char first[600] = "";
    for (int i = 0; i < iters; i++) {
        struct h_job job = {.nranks = n,
                            .procs = procs,
                            .body = last_call_body,
                            .arg = &kind,
                            .kill_rank = -1,
                            .timeout_ms = 20000};
        struct h_rank *res = h_run(&job);
        for (int r = 0; r < n; r++)
            if (res[r].errors) {
                if (failed++ == 0)
                    snprintf(first, sizeof(first), "iteration %d rank %d: %s", i, r,
                             res[r].first_error);
                break;
            }
    }
    if (pinned) {
        h_env_pop();
        unpin(old);
    }
    if (failed)
        fail_msg("%d of %d jobs failed; first: %s", failed, iters, first);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void last_allreduce_threads_pinned(void **s)
{
    (void)s;
    run_last_call(LAST_ALLREDUCE, 8, false, true, 200);
}
static void last_barrier_threads_pinned(void **s)
{
    (void)s;
    run_last_call(LAST_BARRIER, 8, false, true, 200);
}
static void last_allreduce_threads(void **s)
{
    (void)s;
    run_last_call(LAST_ALLREDUCE, 8, false, false, 200);
}
static void last_bulk_threads_pinned(void **s)
{
    (void)s;
    run_last_call(LAST_BULK, 4, false, true, 150);
}
static void last_barrier_procs_pinned(void **s)
{
    (void)s;
    run_last_call(LAST_BARRIER, 3, true, true, 150);
}
static void last_allreduce_procs(void **s)
{
    (void)s;
    run_last_call(LAST_ALLREDUCE, 4, true, false, 100);
}

/* ---- 6. garbage a peer writes into the segment never moves a rank outside it ---- */

/* The segment of this communicator as mapped in this process, from /proc/self/maps (the
 * name stays there after unlink), or NULL. */
static uint8_t *find_segment(const comm_id_t *id)
{
    char want[64];
    snprintf(want, sizeof(want), "/dev/shm/arcomm-%s", id->str + 5);
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return NULL;
    char line[512];
    uint8_t *base = NULL;
    while (base == NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, want) != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            base = (uint8_t *)lo;
    }
    fclose(f);
    return base;
}

enum garbage {
    G_NRANKS,      /* the header's nranks */
    G_SEND_TAIL,   /* a send offset whose buffer runs past the end of the segment */
    G_RECV_HEADER, /* a receive offset inside the segment, but in the header */
    G_WRAP,        /* an offset near 2^64: offset + length wraps */
    G_ADDEND,      /* an addend past the end */
    G_FLAGS,       /* same-process and in-segment flags at once */
    G_DTYPE,       /* a dtype no rank publishes */
    G_COLL,        /* a collective no rank publishes */
    G_ROOT,        /* a root outside the communicator */
    G_HEAP_TAIL,   /* a shared-heap offset whose buffer runs past the end of the heap */
    G_HEAP_NONE,   /* a shared-heap offset on a communicator without the heap */
};

#define G_COUNT (1u << 19) /* floats: 2 MiB, past the flag path for process ranks */

static void garbage_body(struct h_rank *r)
{
    enum garbage kind = *(enum garbage *)r->arg;
    const int evil = 1;
    /* A process rank that touches memory outside the mapping dies of it (the parent
     * reports it), rather than returning into cmocka's handler of the parent's test. */
    if (r->procs) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
    }
    float *send = NULL, *recv = NULL, *add = NULL;
    if (comm_mem_alloc(r->comm, G_COUNT * sizeof(float), (void **)&send) != COMM_OK ||
        comm_mem_alloc(r->comm, G_COUNT * sizeof(float), (void **)&recv) != COMM_OK ||
        comm_mem_alloc(r->comm, 64 * sizeof(float), (void **)&add) != COMM_OK) {
        h_fail(r, "comm_mem_alloc: %s", comm_last_error(r->comm));
        return;
    }
    h_fill(send, G_COUNT, COMM_F32, 21, r->rank);
    h_fill(add, 64, COMM_F32, 22, 0);
    uint8_t *base = find_segment(&r->id);
    if (base == NULL) {
        h_fail(r, "no mapping of the segment in /proc/self/maps");
        return;
    }
    struct shm_header *h = (struct shm_header *)base;
    uint32_t n = (uint32_t)r->nranks;
    struct shm_rank *ranks = (struct shm_rank *)(base + h->off_ranks);

    if (kind == G_NRANKS) {
        /* Every rank keeps working: nobody re-reads the header after joining. */
        if (r->rank == evil)
            h->nranks = 0x40000000u;
        for (int call = 0; call < 3; call++) {
            size_t count = call == 1 ? G_COUNT : 16;
            h_poison(recv, count, COMM_F32);
            comm_status_t st =
                call == 2 ? comm_barrier(r->comm)
                          : comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
            if (st != COMM_OK) {
                h_fail(r, "call %d after the header was garbled: %s", call,
                       comm_last_error(r->comm));
                return;
            }
            if (call < 2)
                h_check(r, recv, count, COMM_F32, COMM_SUM, 21, r->nranks, NULL, 0, false);
        }
        return;
    }

    if (r->rank == evil) {
        /* Publish a bulk arrival for call 0 with wild buffers, as rank 1 would. */
        struct shm_arrival *a = (struct shm_arrival *)(base + h->off_arrival) + evil;
        a->count = G_COUNT;
        a->dtype = kind == G_DTYPE ? 200 : COMM_F32;
        a->op = COMM_SUM;
        a->path = 2; /* SHM_PATH_BULK */
        /* COLL_ALLREDUCE, root 0 (as every rank's allreduce), unless garbage is asked. */
        a->coll = kind == G_COLL ? 99 : 1;
        a->root = kind == G_ROOT ? 1000 : 0;
        a->flags = SHM_BUF_IN_SEG | (kind == G_FLAGS ? SHM_BUF_SAME_PROC : 0u);
        a->send = (uint64_t)((uint8_t *)send - base);
        a->recv = (uint64_t)((uint8_t *)recv - base);
        a->addend = 0;
        a->addend_count = 0;
        if (kind == G_SEND_TAIL)
            a->send = h->total_bytes - 4096;
        if (kind == G_RECV_HEADER)
            a->recv = 0;
        if (kind == G_WRAP)
            a->send = UINT64_MAX - 1024;
        if (kind == G_HEAP_TAIL)
            a->send = SHM_HEAP_TAG | (ranks[evil].heap_bytes - 4096);
        if (kind == G_HEAP_NONE)
            a->send = SHM_HEAP_TAG | 4096;
        if (kind == G_ADDEND) {
            a->flags |= SHM_BUF_ADD;
            a->addend_count = 64;
            a->addend = h->total_bytes - 8;
        }
        atomic_store_explicit(&a->status, COMM_OK, memory_order_relaxed);
        atomic_store_explicit(&a->seq, 0, memory_order_release);
        /* Stay until every victim has published its failure: leaving now would
         * publish this rank's own, and the victims would never read the garbage. */
        double t0 = h_now_ms();
        for (uint32_t p = 0; p < n; p++)
            while (p != (uint32_t)evil &&
                   atomic_load_explicit(&ranks[p].status, memory_order_acquire) == COMM_OK &&
                   h_now_ms() - t0 < 10000)
                usleep(1000);
        return;
    }
    comm_status_t st =
        kind == G_ADDEND ? comm_allreduce_add(r->comm, send, recv, add, 64, G_COUNT, COMM_F32, NULL)
                         : comm_allreduce(r->comm, send, recv, G_COUNT, COMM_F32, COMM_SUM, NULL);
    const char *msg = comm_last_error(r->comm);
    if (st != COMM_ERR_PEER)
        h_fail(r, "got %s, want COMM_ERR_PEER (%s)", comm_status_string(st), msg);
    else if (strstr(msg, "peer rank 1 published") == NULL || strstr(msg, "corrupted") == NULL)
        h_fail(r, "the message does not blame rank 1 for a corrupted segment: %s", msg);
}

static void run_garbage(enum garbage kind, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = garbage_body,
                        .arg = &kind,
                        .kill_rank = -1,
                        .timeout_ms = 10000};
    expect_clean(h_run(&job), n);
}

static void garbage_nranks_procs(void **s)
{
    (void)s;
    run_garbage(G_NRANKS, 3, true);
}
static void garbage_nranks_threads(void **s)
{
    (void)s;
    run_garbage(G_NRANKS, 3, false);
}
static void garbage_send_tail(void **s)
{
    (void)s;
    run_garbage(G_SEND_TAIL, 2, true);
}
static void garbage_recv_header(void **s)
{
    (void)s;
    run_garbage(G_RECV_HEADER, 3, true);
}
static void garbage_wrap(void **s)
{
    (void)s;
    run_garbage(G_WRAP, 2, true);
}
static void garbage_addend(void **s)
{
    (void)s;
    run_garbage(G_ADDEND, 3, true);
}
static void garbage_flags(void **s)
{
    (void)s;
    run_garbage(G_FLAGS, 2, true);
}
static void garbage_dtype(void **s)
{
    (void)s;
    run_garbage(G_DTYPE, 2, true);
}
static void garbage_coll(void **s)
{
    (void)s;
    run_garbage(G_COLL, 2, true);
}
static void garbage_root(void **s)
{
    (void)s;
    run_garbage(G_ROOT, 3, false);
}
/* Offsets into a peer's shared heap (libarcomm_heap.so): read only where the communicator
 * agreed on the heap, and only inside the heap's published size.  The first needs the
 * heap preloaded (test edges-wait-heap, suite heap, sets ARCOMM_TEST_WANT_HEAP): without
 * it, it is skipped here. */
static void garbage_heap_tail(void **s)
{
    (void)s;
    if (dlsym(RTLD_DEFAULT, "arcomm_heap_region") == NULL) {
        if (getenv("ARCOMM_TEST_WANT_HEAP") != NULL)
            fail_msg("libarcomm_heap.so is not preloaded");
        skip();
    }
    run_garbage(G_HEAP_TAIL, 2, true);
}
static void garbage_heap_none(void **s)
{
    (void)s;
    run_garbage(G_HEAP_NONE, 2, true);
}

/* ---- 14, 15. a chain of failures names the root rank; a timeout names who is late ---- */

struct chain {
    int late;       /* this rank skips the call (comes after everyone failed) */
    int short_rank; /* this rank's timeout is short_ms, everyone else's 20 s */
    int short_ms;
};

static void chain_body(struct h_rank *r)
{
    const struct chain *k = r->arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = r->rank == k->short_rank ? k->short_ms : 20000;
    if (comm_init(&r->comm, &cfg) != COMM_OK) {
        h_fail(r, "comm_init: %s", comm_last_error(NULL));
        return;
    }
    float x[8], y[8];
    h_fill(x, 8, COMM_F32, 31, r->rank);
    if (r->rank == k->late)
        usleep((useconds_t)(k->short_ms + 1000) * 1000);
    r->status = comm_allreduce(r->comm, x, y, 8, COMM_F32, COMM_SUM, NULL);
    snprintf((char *)r->out, 600, "%s", comm_last_error(r->comm));
    r->out_len = strlen((char *)r->out) + 1;
    comm_destroy(r->comm);
    r->comm = NULL;
}

/* Rank `short_rank` times out because rank `late` is not there; the others fail through
 * it, some through a rank that failed through it. */
static void run_chain(int n, bool procs)
{
    struct chain k = {.late = n - 1, .short_rank = 1, .short_ms = 500};
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .no_init = true,
                        .body = chain_body,
                        .arg = &k,
                        .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    expect_clean(res, n);
    const char *root = (const char *)res[1].out;
    if (res[1].status != COMM_ERR_TIMEOUT)
        fail_msg("rank 1 got %s: %s", comm_status_string(res[1].status), root);
    /* The whole message, longer than the old 192-byte record, ends with the fix. */
    if (strlen(root) <= 192 || strstr(root, "raise ARCOMM_TIMEOUT_MS") == NULL)
        fail_msg("rank 1's message is not the long one this test needs: %s", root);
    char want[64];
    snprintf(want, sizeof(want), "rank %d did not arrive", k.late);
    if (strstr(root, want) == NULL)
        fail_msg("rank 1's timeout does not name rank %d: %s", k.late, root);
    for (int r = 0; r < n; r++) {
        if (r == 1)
            continue;
        const char *msg = (const char *)res[r].out;
        char head[96];
        snprintf(head, sizeof(head), "rank %d: rank 1 failed with COMM_ERR_TIMEOUT", r);
        if (res[r].status != COMM_ERR_PEER)
            fail_msg("rank %d got %s: %s", r, comm_status_string(res[r].status), msg);
        if (strncmp(msg, head, strlen(head)) != 0)
            fail_msg("rank %d's message does not start with \"%s\": %s", r, head, msg);
        if (strstr(msg, root) == NULL)
            fail_msg("rank %d's message lacks rank 1's whole message:\n  %s\n  rank 1: %s", r, msg,
                     root);
    }
}

static void chain_threads(void **s)
{
    (void)s;
    run_chain(4, false);
}
static void chain_procs(void **s)
{
    (void)s;
    run_chain(4, true);
}

/* A process rank dies: every other rank's message starts with it, whole. */
static void chain_death_body(struct h_rank *r)
{
    float x[16], y[16];
    h_fill(x, 16, COMM_F32, 41, r->rank);
    comm_status_t st = COMM_OK;
    for (long calls = 0; st == COMM_OK && calls < 100000000; calls++)
        st = comm_allreduce(r->comm, x, y, 16, COMM_F32, COMM_SUM, NULL);
    r->status = st;
    snprintf((char *)r->out, 600, "%s", comm_last_error(r->comm));
}

static void chain_death(void **s)
{
    (void)s;
    int n = 4;
    struct h_job job = {.nranks = n,
                        .procs = true,
                        .body = chain_death_body,
                        .kill_rank = 1,
                        .kill_after_ms = 300,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    res[1].errors = 0;
    expect_clean(res, n);
    for (int r = 0; r < n; r++) {
        if (r == 1)
            continue;
        const char *msg = (const char *)res[r].out;
        char head[32];
        snprintf(head, sizeof(head), "rank %d: rank 1 ", r);
        if (res[r].status != COMM_ERR_PEER || strncmp(msg, head, strlen(head)) != 0 ||
            strstr(msg, "rank 1 (pid ") == NULL || strstr(msg, "restart the job") == NULL)
            fail_msg("rank %d: %s: %s", r, comm_status_string(res[r].status), msg);
    }
}

/* Rank 2 skips the call: every rank that times out names exactly rank 2. */
static void missing_body(struct h_rank *r)
{
    float x = 1, y;
    if (r->rank == 2) {
        usleep(2500 * 1000);
        return;
    }
    comm_status_t st = comm_allreduce(r->comm, &x, &y, 1, COMM_F32, COMM_SUM, NULL);
    const char *msg = comm_last_error(r->comm);
    if (st != COMM_ERR_TIMEOUT && st != COMM_ERR_PEER) {
        h_fail(r, "got %s: %s", comm_status_string(st), msg);
        return;
    }
    /* Everyone but this rank and rank 2 came: a rank that timed out itself lists them,
     * a rank that failed through it carries its list. */
    char want[128] = "rank 2 did not arrive (";
    if (st == COMM_ERR_TIMEOUT) {
        char list[64] = "";
        int there = 0;
        for (int p = 0; p < r->nranks; p++)
            if (p != r->rank && p != 2)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d",
                         there++ ? ", " : "", p);
        snprintf(want, sizeof(want), "rank 2 did not arrive (%s %s did)",
                 there > 1 ? "ranks" : "rank", list);
    }
    if (strstr(msg, want) == NULL)
        h_fail(r, "the message lacks \"%s\": %s", want, msg);
    for (int p = 0; p < r->nranks; p++) {
        char other[32];
        snprintf(other, sizeof(other), "rank %d did not", p);
        if (p != 2 && strstr(msg, other) != NULL)
            h_fail(r, "the message blames rank %d: %s", p, msg);
    }
}

static void missing_threads(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 4, .body = missing_body, .kill_rank = -1, .timeout_ms = 1000};
    expect_clean(h_run(&job), 4);
}
static void missing_procs(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 3, .procs = true, .body = missing_body, .kill_rank = -1, .timeout_ms = 1000};
    expect_clean(h_run(&job), 3);
}

/* ---- 8. ARCOMM_TIMEOUT_MS=9223372036854775807: a late rank is waited for ---- */

static void never_body(struct h_rank *r)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    if (comm_init(&r->comm, &cfg) != COMM_OK) {
        h_fail(r, "comm_init: %s", comm_last_error(NULL));
        return;
    }
    float x[64], y[64];
    h_fill(x, 64, COMM_F32, 51, r->rank);
    for (int call = 0; call < 2; call++) {
        if (r->rank == 1)
            usleep(300 * 1000);
        h_poison(y, 64, COMM_F32);
        comm_status_t st = call ? comm_barrier(r->comm)
                                : comm_allreduce(r->comm, x, y, 64, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK)
            h_fail(r, "call %d with a rank 300 ms late: %s", call, comm_last_error(r->comm));
        else if (call == 0)
            h_check(r, y, 64, COMM_F32, COMM_SUM, 51, r->nranks, NULL, 0, false);
    }
    comm_destroy(r->comm);
    r->comm = NULL;
}

static void timeout_never(void **s)
{
    (void)s;
    h_env_push("ARCOMM_TIMEOUT_MS", "9223372036854775807");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {
            .nranks = 3, .procs = procs, .no_init = true, .body = never_body, .kill_rank = -1};
        expect_clean(h_run(&job), 3);
    }
    h_env_pop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(last_allreduce_threads_pinned),
        cmocka_unit_test(last_barrier_threads_pinned),
        cmocka_unit_test(last_allreduce_threads),
        cmocka_unit_test(last_bulk_threads_pinned),
        cmocka_unit_test(last_barrier_procs_pinned),
        cmocka_unit_test(last_allreduce_procs),
        cmocka_unit_test(garbage_nranks_procs),
        cmocka_unit_test(garbage_nranks_threads),
        cmocka_unit_test(garbage_send_tail),
        cmocka_unit_test(garbage_recv_header),
        cmocka_unit_test(garbage_wrap),
        cmocka_unit_test(garbage_addend),
        cmocka_unit_test(garbage_flags),
        cmocka_unit_test(garbage_dtype),
        cmocka_unit_test(garbage_coll),
        cmocka_unit_test(garbage_root),
        cmocka_unit_test(garbage_heap_tail),
        cmocka_unit_test(garbage_heap_none),
        cmocka_unit_test(chain_threads),
        cmocka_unit_test(chain_procs),
        cmocka_unit_test(chain_death),
        cmocka_unit_test(missing_threads),
        cmocka_unit_test(missing_procs),
        cmocka_unit_test(timeout_never),
    };
    /* EDGES_ONLY=pattern runs the matching tests; EDGES_ITERS=n soaks the races. */
    if (getenv("EDGES_ONLY") != NULL)
        cmocka_set_test_filter(getenv("EDGES_ONLY"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
