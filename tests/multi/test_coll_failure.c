/* SPDX-License-Identifier: MIT */
/*
 * Failures inside the collectives beyond allreduce, on every path: a process rank
 * killed mid-call, comm_abort while blocked, a rank that never calls.  No rank waits
 * past its timeout: the others return COMM_ERR_PEER (naming the rank that failed),
 * COMM_ERR_ABORTED or COMM_ERR_TIMEOUT (naming the late rank), and /dev/shm is empty
 * afterwards.
 */
#include "harness.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

enum kind { K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL };
#define K_COUNT 5

/* After every rank's body started (kill_after_ready): late enough that every rank made
 * calls already, on a loaded host too (sanitizer builds run slowly). */
#define KILL_AFTER_MS (h_quick() ? 800 : 200)

static const char *const kind_names[K_COUNT] = {"broadcast", "reduce", "allgather",
                                                "reduce_scatter", "alltoall"};

/* One call of collective k on buffers of nranks * count floats; root 0. */
static comm_status_t make_call(comm_t *c, enum kind k, const float *s, float *r, size_t count)
{
    switch (k) {
    case K_BROADCAST:
        return comm_broadcast(c, s, r, count, COMM_F32, 0, NULL);
    case K_REDUCE:
        return comm_reduce(c, s, r, count, COMM_F32, COMM_SUM, 0, NULL);
    case K_ALLGATHER:
        return comm_allgather(c, s, r, count, COMM_F32, NULL);
    case K_REDUCE_SCATTER:
        return comm_reduce_scatter(c, s, r, count, COMM_F32, COMM_SUM, NULL);
    case K_ALLTOALL:
        return comm_alltoall(c, s, r, count, COMM_F32, NULL);
    }
    return COMM_ERR_INVALID;
}

static void expect_clean(struct h_rank *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void expect_status(struct h_rank *r, enum kind k, comm_status_t got, comm_status_t want,
                          const char *must_contain)
{
    if (got != want)
        h_fail(r, "%s: got %s, want %s (%s)", kind_names[k], comm_status_string(got),
               comm_status_string(want), comm_last_error(r->comm));
    else if (must_contain && strstr(comm_last_error(r->comm), must_contain) == NULL)
        h_fail(r, "%s: message \"%s\" lacks \"%s\"", kind_names[k], comm_last_error(r->comm),
               must_contain);
}

struct spec {
    enum kind k;
    size_t count;   /* per rank: small takes the flag path, large the bulk path */
    bool allreduce; /* comm_allreduce instead of k (kill_cma) */
};

/* ---- a process rank killed with SIGKILL while the others loop over a collective ---- */

static void kill_body(struct h_rank *r)
{
    const struct spec *sp = r->arg;
    size_t elems = (size_t)r->nranks * sp->count;
    float *x = malloc(elems * 4), *y = malloc(elems * 4);
    h_fill(x, elems, COMM_F32, 4, r->rank);
    comm_status_t st = COMM_OK;
    long calls = 0;
    while (st == COMM_OK && calls < 100000000) {
        st = sp->allreduce ? comm_allreduce(r->comm, x, y, elems, COMM_F32, COMM_SUM, NULL)
                           : make_call(r->comm, sp->k, x, y, sp->count);
        calls++;
    }
    r->elapsed_s = h_now_ms() / 1e3; /* when this rank noticed */
    expect_status(r, sp->k, st, COMM_ERR_PEER, "rank 1");
    if (calls < 2)
        h_fail(r, "%s failed before rank 1 was killed", kind_names[sp->k]);
    free(x);
    free(y);
}

static void run_kill(struct spec sp, int n)
{
    struct h_job job = {.nranks = n,
                        .procs = true,
                        .body = kill_body,
                        .arg = &sp,
                        .kill_rank = 1,
                        .kill_after_ms = KILL_AFTER_MS,
                        .kill_after_ready = true,
                        .timeout_ms = 60000};
    expect_clean(h_run_killed(&job, 2000, kind_names[sp.k]), n);
}

static void kill_flag(void **s)
{
    (void)s;
    for (int k = 0; k < K_COUNT; k++)
        run_kill((struct spec){.k = k, .count = 16}, 3);
}

static void kill_staged(void **s)
{
    (void)s;
    for (int k = 0; k < K_COUNT; k++)
        run_kill((struct spec){.k = k, .count = 1 << 19}, 2);
}

/* The CMA path (process_vm_readv/writev between private buffers), every collective:
 * a rank killed mid-transfer fails the call on every other rank in time. */
static void kill_cma(void **s)
{
    (void)s;
    h_env_push("ARCOMM_CMA_THRESHOLD", "0");
    for (int k = 0; k <= K_COUNT; k++)
        run_kill((struct spec){.k = k % K_COUNT, .count = 1 << 16, .allreduce = k == K_COUNT}, 3);
    h_env_pop();
}

/* A root whose sendbuf its own process cannot read (in place, so the root itself never
 * touches it): the peers' process_vm_readv fails with EFAULT, and every rank returns an
 * error naming it, without a crash or a hang. */
static void efault_body(struct h_rank *r)
{
    size_t count = 1 << 18, bytes = count * 4;
    void *buf = r->rank == 0 ? mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : malloc(bytes);
    if (buf == NULL || buf == MAP_FAILED) {
        h_fail(r, "no buffer");
        return;
    }
    double t0 = h_now_ms();
    comm_status_t st = comm_broadcast(r->comm, buf, buf, count, COMM_F32, 0, NULL);
    double ms = h_now_ms() - t0;
    const char *msg = comm_last_error(r->comm);
    if (st == COMM_OK)
        h_fail(r, "broadcast from an unreadable root buffer succeeded");
    else if (strstr(msg, "process_vm_readv") == NULL || strstr(msg, "rank 0") == NULL)
        h_fail(r, "message \"%s\" does not name process_vm_readv and rank 0", msg);
    if (ms > 5000)
        h_fail(r, "the failed broadcast took %.0f ms", ms);
    if (r->rank == 0)
        munmap(buf, bytes);
    else
        free(buf);
}

static void efault_cma(void **s)
{
    (void)s;
    h_env_push("ARCOMM_CMA_THRESHOLD", "0");
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {
        .nranks = 3, .procs = true, .body = efault_body, .kill_rank = -1, .timeout_ms = 30000};
    expect_clean(h_run(&job), 3);
    h_env_pop();
}

/* comm_mem_alloc buffers: the one-pass path, where peers write each other's memory. */
static void kill_direct_body(struct h_rank *r)
{
    const struct spec *sp = r->arg;
    size_t elems = (size_t)r->nranks * sp->count;
    float *x = NULL, *y = NULL;
    if (comm_mem_alloc(r->comm, elems * 4, (void **)&x) != COMM_OK ||
        comm_mem_alloc(r->comm, elems * 4, (void **)&y) != COMM_OK) {
        h_fail(r, "comm_mem_alloc: %s", comm_last_error(r->comm));
        return;
    }
    h_fill(x, elems, COMM_F32, 4, r->rank);
    comm_status_t st = COMM_OK;
    long calls = 0;
    while (st == COMM_OK && calls < 100000000) {
        st = make_call(r->comm, sp->k, x, y, sp->count);
        calls++;
    }
    r->elapsed_s = h_now_ms() / 1e3;
    expect_status(r, sp->k, st, COMM_ERR_PEER, "rank 1");
}

static void kill_direct(void **s)
{
    (void)s;
    h_env_push("ARCOMM_FLAG_THRESHOLD", "off");
    for (int k = 0; k < K_COUNT; k++) {
        struct spec sp = {.k = k, .count = 1 << 16};
        struct h_job job = {.nranks = 3,
                            .procs = true,
                            .body = kill_direct_body,
                            .arg = &sp,
                            .kill_rank = 1,
                            .kill_after_ms = KILL_AFTER_MS,
                            .kill_after_ready = true,
                            .timeout_ms = 60000};
        expect_clean(h_run_killed(&job, 2000, kind_names[k]), 3);
    }
    h_env_pop();
}

/* ---- comm_abort from another thread while rank 0 is blocked in the collective ---- */

static void *aborter(void *arg)
{
    usleep(100 * 1000);
    comm_abort(arg);
    return NULL;
}

static void abort_body(struct h_rank *r)
{
    const struct spec *sp = r->arg;
    size_t elems = (size_t)r->nranks * sp->count;
    float *x = malloc(elems * 4), *y = malloc(elems * 4);
    h_fill(x, elems, COMM_F32, 3, r->rank);
    if (r->rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, aborter, r->comm);
        double t0 = h_now_ms();
        comm_status_t st = make_call(r->comm, sp->k, x, y, sp->count);
        double ms = h_now_ms() - t0;
        pthread_join(t, NULL);
        expect_status(r, sp->k, st, COMM_ERR_ABORTED, "comm_abort");
        if (ms > 1000)
            h_fail(r, "%s: abort took %.0f ms to end the wait", kind_names[sp->k], ms);
        /* Broken: the next call fails at once. */
        st = make_call(r->comm, sp->k, x, y, sp->count);
        expect_status(r, sp->k, st, COMM_ERR_ABORTED, NULL);
    } else {
        usleep(300 * 1000); /* arrives after rank 0 aborted */
        comm_status_t st = make_call(r->comm, sp->k, x, y, sp->count);
        expect_status(r, sp->k, st, COMM_ERR_PEER, "rank 0");
    }
    free(x);
    free(y);
}

static void abort_all(void **s)
{
    (void)s;
    for (int k = 0; k < K_COUNT; k++) {
        for (int procs = 0; procs < 2; procs++) {
            struct spec sp = {.k = k, .count = procs ? 1 << 18 : 100};
            struct h_job job = {.nranks = 3,
                                .procs = procs,
                                .body = abort_body,
                                .arg = &sp,
                                .kill_rank = -1,
                                .timeout_ms = 30000};
            expect_clean(h_run(&job), 3);
        }
    }
}

/* ---- a rank that never calls: TIMEOUT naming it ---- */

static void timeout_body(struct h_rank *r)
{
    const struct spec *sp = r->arg;
    if (r->rank == 1) {
        usleep(2500 * 1000); /* never calls; leaves after the others gave up */
        return;
    }
    size_t elems = (size_t)r->nranks * sp->count;
    float *x = malloc(elems * 4), *y = malloc(elems * 4);
    h_fill(x, elems, COMM_F32, 3, r->rank);
    double t0 = h_now_ms();
    comm_status_t st = make_call(r->comm, sp->k, x, y, sp->count);
    double ms = h_now_ms() - t0;
    /* The first waiter to give up times out; another may hear of that first (PEER),
     * but every message names the rank that never came. */
    if (st == COMM_ERR_PEER && strstr(comm_last_error(r->comm), "COMM_ERR_TIMEOUT"))
        expect_status(r, sp->k, st, COMM_ERR_PEER, "rank 1 did not");
    else
        expect_status(r, sp->k, st, COMM_ERR_TIMEOUT, "rank 1 did not");
    /* Its own timeout comes after its own 300 ms; a peer's may come sooner (that peer
     * started waiting first, on a loaded host).  Either well before rank 1 leaves. */
    if ((st == COMM_ERR_TIMEOUT && ms < 250) || ms > 2000)
        h_fail(r, "%s: %s after %.0f ms, want about 300", kind_names[sp->k], comm_status_string(st),
               ms);
    free(x);
    free(y);
}

static void timeout_all(void **s)
{
    (void)s;
    for (int k = 0; k < K_COUNT; k++) {
        struct spec sp = {.k = k, .count = k % 2 ? 100 : 1 << 18};
        struct h_job job = {.nranks = 3,
                            .procs = k % 2 == 0,
                            .body = timeout_body,
                            .arg = &sp,
                            .kill_rank = -1,
                            .timeout_ms = 300};
        expect_clean(h_run(&job), 3);
    }
}

/* ---- a pipelined broadcast whose consumer stalls: the timeout names the late rank only ---- */

/*
 * 3 process ranks, a staged broadcast of 8 MiB from rank 0 (more rounds than the ring has
 * places).  Rank 2 stalls mid-pipeline: its receive buffer is PROT_NONE from 3 MiB on,
 * and its SIGSEGV handler sleeps a second before giving the pages back.  The root fills
 * the ring and waits for rank 2; rank 1 (timeout 300 ms, the others 5 s) waits for the
 * root alone and times out first.  Its message must name the root as the rank that did
 * not arrive and no other rank as one that did (rank 2 is not waited for there: the
 * message once listed it as arrived).
 */
#define PIPE_COUNT (1u << 21)
#define PIPE_STALL (3u << 20)

static char *stall_at;
static size_t stall_len;

static void stall_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    mprotect(stall_at, stall_len, PROT_READ | PROT_WRITE);
}

static void pipe_stall_body(struct h_rank *r)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = r->rank == 1 ? 300 : 5000;
    comm_t *comm = NULL;
    if (comm_init(&comm, &cfg) != COMM_OK) {
        h_fail(r, "comm_init: %s", comm_last_error(NULL));
        return;
    }
    size_t bytes = (size_t)PIPE_COUNT * 4;
    float *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        h_fail(r, "mmap failed");
        comm_destroy(comm);
        return;
    }
    h_fill(buf, PIPE_COUNT, COMM_F32, 9, 0);
    if (r->rank == 2) {
        stall_at = (char *)buf + PIPE_STALL;
        stall_len = bytes - PIPE_STALL;
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = stall_handler;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
        mprotect(stall_at, stall_len, PROT_NONE);
    }
    double t0 = h_now_ms();
    comm_status_t st =
        comm_broadcast(comm, r->rank == 0 ? buf : NULL, buf, PIPE_COUNT, COMM_F32, 0, NULL);
    double ms = h_now_ms() - t0;
    const char *msg = comm_last_error(comm);
    if (r->rank == 1) {
        if (st != COMM_ERR_TIMEOUT || strstr(msg, "staged path") == NULL)
            h_fail(r, "rank 1: got %s (%s), want a timeout in the staged path",
                   comm_status_string(st), msg);
        else if (strstr(msg, "rank 0 did not reach this step") == NULL ||
                 strstr(msg, " did)") != NULL)
            h_fail(r,
                   "rank 1: the timeout must name rank 0 alone as late, and no rank as "
                   "arrived: \"%s\"",
                   msg);
    } else if (st == COMM_OK) {
        h_fail(r, "rank %d: the broadcast succeeded although rank 1 gave up", r->rank);
    }
    if (ms > 4000)
        h_fail(r, "rank %d: returned after %.0f ms", r->rank, ms);
    comm_destroy(comm);
    munmap(buf, bytes);
}

static void pipe_timeout_names(void **s)
{
    (void)s;
    struct h_job job = {
        .nranks = 3, .procs = true, .no_init = true, .body = pipe_stall_body, .kill_rank = -1};
    expect_clean(h_run(&job), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kill_flag),   cmocka_unit_test(kill_staged),
        cmocka_unit_test(kill_cma),    cmocka_unit_test(efault_cma),
        cmocka_unit_test(kill_direct), cmocka_unit_test(abort_all),
        cmocka_unit_test(timeout_all), cmocka_unit_test(pipe_timeout_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
