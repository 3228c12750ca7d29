/* SPDX-License-Identifier: MIT */
/*
 * Failures of a communicator made by comm_init_mpi, started by mpirun: ranks that
 * disagree (COMM_ERR_MISMATCH on every rank, outputs untouched), a bad argument on one
 * rank (INVALID there, PEER elsewhere), a rank that never calls (every other rank
 * TIMEOUT or PEER within the timeout), a rank whose comm_init_mpi fails on its own
 * (every rank fails at once), a rank two timeouts late in comm_init_mpi (the others'
 * abandoned requests complete safely), a rank just before the timeout (every rank
 * makes the communicator), comm_abort before a call and during one, an
 * abort that reaches every other rank at once (its failure notice), and
 * comm_destroy then MPI_Finalize with nothing left in /dev/shm; the wait hook (runs while
 * rank 0 waits for a late rank, given the communicator's own handle; a nonzero return
 * stops the call there and the others learn at once); SIGPIPE ignored after
 * comm_init_mpi where it was at its default, a program's own handler kept; a leader
 * whose intra-host step fails in the middle of an allreduce (its status crosses the
 * inter-host step with its data: every other rank PEER, none OK with the garbage).  A fresh
 * communicator for each case: a failure breaks it on every rank.
 */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 1500
#define N          4099

static int g_rank, g_size, g_failed;

static void fail(const char *test, const char *fmt, comm_status_t st, const char *detail)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d: %s: %s (got %s: %s)\n", g_rank, test, fmt, comm_status_string(st),
                detail);
}

static comm_t *fresh(void)
{
    return mc_world_comm(TIMEOUT_MS);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool untouched(const float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &buf[i], sizeof(u));
        if (u != 0xa5a5a5a5u)
            return false;
    }
    return true;
}

/* The last rank passes another count (or dtype, or root): MISMATCH everywhere. */
static void t_mismatch(int what)
{
    comm_t *c = fresh();
    float *send = malloc(N * 4 + 4), *recv = malloc(((size_t)g_size * N + 1) * 4);
    for (int i = 0; i <= N; i++)
        send[i] = (float)i;
    memset(recv, 0xa5, ((size_t)g_size * N + 1) * 4);
    bool odd = g_rank == g_size - 1;
    comm_status_t st;
    const char *name;
    if (what == 0) {
        name = "mismatch (count of allreduce)";
        st = comm_allreduce(c, send, recv, odd ? N + 1 : N, COMM_F32, COMM_SUM, NULL);
    } else if (what == 1) {
        name = "mismatch (dtype of reduce)";
        st = comm_reduce(c, send, recv, N, odd ? COMM_I32 : COMM_F32, COMM_MAX, 0, NULL);
    } else if (what == 2) {
        name = "mismatch (root of broadcast)";
        st = comm_broadcast(c, send, recv, N, COMM_F32, odd ? 0 : g_size - 1, NULL);
    } else if (what == 3) {
        name = "mismatch (addend_count of allreduce_add)";
        st = comm_allreduce_add(c, send, recv, send, odd ? 1 : N, N, COMM_F32, NULL);
    } else {
        name = "mismatch (collective)";
        st = odd ? comm_allgather(c, send, recv, N, COMM_F32, NULL)
                 : comm_allreduce(c, send, recv, N, COMM_F32, COMM_SUM, NULL);
    }
    if (st != COMM_ERR_MISMATCH)
        fail(name, "expected COMM_ERR_MISMATCH", st, comm_last_error(c));
    if (!untouched(recv, (size_t)g_size * N + 1))
        fail(name, "recvbuf was written", st, "");
    /* The communicator is broken now, at once, on every rank. */
    st = comm_barrier(c);
    if (st == COMM_OK)
        fail(name, "a broken communicator answered OK", st, "");
    comm_destroy(c);
    free(send);
    free(recv);
}

/* Rank 1 passes a NULL recvbuf: INVALID there, PEER on every other rank. */
static void t_invalid(void)
{
    comm_t *c = fresh();
    float send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
    comm_status_t st =
        comm_allreduce(c, send, g_rank == 1 ? NULL : recv, 8, COMM_F32, COMM_SUM, NULL);
    comm_status_t want = g_rank == 1 ? COMM_ERR_INVALID : COMM_ERR_PEER;
    if (st != want)
        fail("invalid argument", g_rank == 1 ? "expected INVALID" : "expected PEER", st,
             comm_last_error(c));
    comm_destroy(c);
}

/* A fresh communicator after a failure that went out as notices: every call of it
 * works.  (Open MPI gives a new communicator the context id of a freed one; a notice
 * still on its way to the freed one was taken for the new one's traffic, and its second
 * call stalled until the timeout, before a failed communicator kept its MPI ones.) */
static void t_fresh_after_failure(void)
{
    comm_t *c = fresh();
    float x[64], *y = malloc((size_t)g_size * 64 * sizeof(float));
    for (int i = 0; i < 64; i++)
        x[i] = (float)(g_rank + i);
    for (int k = 0; k < 4; k++) {
        comm_status_t st = k % 2 ? comm_allgather(c, x, y, 64, COMM_F32, NULL)
                                 : comm_allreduce(c, x, y, 64, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK) {
            fail("a fresh communicator after a failure", "a call failed", st, comm_last_error(c));
            break;
        }
    }
    comm_destroy(c);
    free(y);
}

/* comm_init_mpi over MPI_COMM_WORLD with the tests' timeout. */
static comm_status_t init_world(comm_t **c)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.timeout_ms = TIMEOUT_MS;
    return comm_init_mpi(c, MPI_COMM_WORLD, &cfg);
}

/* comm_init_mpi over MPI_COMM_WORLD with arm(1) on rank 1 alone, arm(0) after: it must
 * fail on every rank, and at once, not after the timeout. */
static void init_fails_at_once(const char *test, void (*arm)(int on))
{
    if (g_size < 2)
        return;
    if (g_rank == 1)
        arm(1);
    comm_t *c = NULL;
    double t0 = now_ms();
    comm_status_t st = init_world(&c);
    double ms = now_ms() - t0;
    if (g_rank == 1)
        arm(0);
    if (st == COMM_OK || c != NULL)
        fail(test, "it succeeded", st, "");
    if (ms > TIMEOUT_MS / 2)
        fail(test, "took the timeout", st, comm_last_error(NULL));
}

/* Rank 1's host communicator cannot be made (its log cannot open): comm_init_mpi fails
 * on every rank, at once, not after the timeout (the ranks whose host's communicator
 * was made went on to the next step on MPI while rank 1 did not, before that outcome
 * was agreed first). */
static void arm_log_file(int on)
{
    if (on)
        setenv("ARCOMM_LOG_FILE", "/nonexistent-arcomm-dir/init.log", 1);
    else
        unsetenv("ARCOMM_LOG_FILE");
}

/* MPI_Op_create as the library sees it: this program's, which fails on demand. */
static int g_fail_op_create;

int MPI_Op_create(MPI_User_function *fn, int commute, MPI_Op *op)
{
    if (g_fail_op_create)
        return MPI_ERR_OP;
    return PMPI_Op_create(fn, commute, op);
}

/* Rank 1's setup fails between making the MPI communicators and the host's id (its
 * MPI_Op_create): every rank returns an error at once, rank 1 naming the call.  The op
 * was made before the splits, which have no bound: the other ranks waited in
 * MPI_Comm_split_type for rank 1 for ever. */
static void arm_op_create(int on)
{
    g_fail_op_create = on;
}

/* MPI_Ibcast as the library sees it: this program's, which can hold rank 1 once on a
 * communicator other than MPI_COMM_WORLD (comm_init_mpi's host communicator). */
static int g_slow_ibcast;

int MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request *req)
{
    if (g_slow_ibcast && comm != MPI_COMM_WORLD) {
        g_slow_ibcast = 0;
        usleep((useconds_t)(2 * TIMEOUT_MS) * 1000);
    }
    return PMPI_Ibcast(buf, count, type, root, comm, req);
}

/* Rank 1 comes to a step of comm_init_mpi (the host's id) two timeouts late: the others
 * gave up on the next one (an agreement over the setup's own copy of the communicator)
 * and returned TIMEOUT, leaving their requests to MPI; rank 1 completes them later and
 * fails too.  The communicators those requests are on must outlive them: the setup
 * freed them, and Open MPI then progressed a request of a freed communicator in rank
 * 0's next MPI call, when rank 1's part came (SIGSEGV in this MPI_Barrier). */
static void t_init_late_in_setup(void)
{
    if (g_size < 2)
        return;
    g_slow_ibcast = g_rank == 1;
    comm_t *c = NULL;
    comm_status_t st = init_world(&c);
    g_slow_ibcast = 0;
    if (st == COMM_OK || c != NULL)
        fail("comm_init_mpi with rank 1 late in the setup", "it succeeded", st, "");
    /* The others wait here while rank 1's parts of their requests come. */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* comm_reduce as the library's hierarchical allreduce calls it (its reduce to the host's
 * leader): this program's, which makes the call go through and then, once, says it
 * failed, on the rank that armed it (exported: the project builds with hidden symbols). */
static int g_fail_reduce;

__attribute__((visibility("default"))) comm_status_t comm_reduce(comm_t *comm, const void *sendbuf,
                                                                 void *recvbuf, size_t count,
                                                                 comm_dtype_t dtype, comm_op_t op,
                                                                 int root, void *stream)
{
    comm_status_t (*real)(comm_t *, const void *, void *, size_t, comm_dtype_t, comm_op_t, int,
                          void *);
    *(void **)&real = dlsym(RTLD_NEXT, "comm_reduce");
    comm_status_t st = real(comm, sendbuf, recvbuf, count, dtype, op, root, stream);
    if (st == COMM_OK && g_fail_reduce) {
        g_fail_reduce = 0;
        return COMM_ERR_SYSTEM;
    }
    return st;
}

/* The hosts, as comm_init_mpi splits them: ARCOMM_MPI_RANKS_PER_HOST, else MPI's
 * shared-memory split.  Returns the ranks a host (consecutive ranks a host). */
static int per_host(void)
{
    const char *rph = getenv("ARCOMM_MPI_RANKS_PER_HOST");
    if (rph != NULL && atoi(rph) > 0)
        return atoi(rph) < g_size ? atoi(rph) : g_size;
    MPI_Comm node;
    int per = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &per);
    MPI_Comm_free(&node);
    MPI_Allreduce(MPI_IN_PLACE, &per, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return per;
}

/* The last host's leader finds its intra-host step failed (its reduce to the leader)
 * and still makes the inter-host step: that rank returns its own error, every other one
 * COMM_ERR_PEER naming it, well before the timeout (the status travels with the data;
 * had it not, they would return OK with meaningless data).  A small count (one message
 * a round) and, with hosts of one rank, one of several segments (with more, that count
 * takes the slices scheme, whose reduce-scatter this does not fail); with one host
 * there is no inter-host step. */
static void t_intra_fails(size_t n)
{
    int per = per_host();
    if (per >= g_size || (per > 1 && n * sizeof(float) >= 65536))
        return;
    int victim = (g_size - 1) / per * per;
    comm_t *c = fresh();
    float *x = malloc(n * sizeof(*x)), *y = malloc(n * sizeof(*y));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(g_rank + 1);
    g_fail_reduce = g_rank == victim;
    double t0 = now_ms();
    comm_status_t st = comm_allreduce(c, x, y, n, COMM_F32, COMM_SUM, NULL);
    double ms = now_ms() - t0;
    g_fail_reduce = 0;
    comm_status_t want = g_rank == victim ? COMM_ERR_SYSTEM : COMM_ERR_PEER;
    char what[96];
    snprintf(what, sizeof(what), "allreduce of %zu with rank %d's intra-host step failed", n,
             victim);
    if (st != want)
        fail(what, g_rank == victim ? "not its own error" : "not PEER", st, comm_last_error(c));
    else if (ms > TIMEOUT_MS / 2)
        fail(what, "the failure came late (ms)", st, comm_last_error(c));
    comm_destroy(c);
    free(x);
    free(y);
}

/* MPI_Comm_idup as the library sees it: this program's, which can hold rank 1 once. */
static int g_slow_idup;

int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *req)
{
    if (g_slow_idup) {
        g_slow_idup = 0;
        usleep(400 * 1000);
    }
    return PMPI_Comm_idup(comm, newcomm, req);
}

/* Rank 1 comes 300 ms before the others' timeout and is 400 ms slower than them in the
 * step after the first agreement (its MPI_Comm_idup): every rank makes the
 * communicator.  With one deadline for the whole setup the others gave up on the idup
 * (TIMEOUT) that rank 1 then completed, and rank 1 waited in MPI_Comm_split_type for
 * ever (the job hung in the next MPI_Barrier). */
static void t_init_late_rank(void)
{
    if (g_size < 2)
        return;
    if (g_rank == 1) {
        usleep((useconds_t)(TIMEOUT_MS - 300) * 1000);
        g_slow_idup = 1;
    }
    comm_t *c = NULL;
    comm_status_t st = init_world(&c);
    g_slow_idup = 0;
    if (st != COMM_OK)
        fail("comm_init_mpi with rank 1 late", "it failed", st, comm_last_error(NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    if (c != NULL) {
        float x[3] = {1, 2, 3}, y[3];
        st = comm_allreduce(c, x, y, 3, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK || y[2] != 3.0f * (float)g_size)
            fail("comm_init_mpi with rank 1 late", "its allreduce went wrong", st,
                 comm_last_error(c));
        comm_destroy(c);
    }
}

static void t_init_fails(void)
{
    init_fails_at_once("comm_init_mpi with one rank's log failing", arm_log_file);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *test = "comm_init_mpi with one rank's MPI_Op_create failing";
    init_fails_at_once(test, arm_op_create);
    if (g_rank == 1 && strstr(comm_last_error(NULL), "MPI_Op_create") == NULL)
        fail(test, "the message does not say", COMM_OK, comm_last_error(NULL));
}

/* Fills stack below the caller's frame, where a call that returned had its frames,
 * progresses MPI for ms, and counts the bytes that changed meanwhile. */
static __attribute__((noinline)) int stack_touched(double ms)
{
    volatile unsigned char pad[32768];
    memset((void *)pad, 0x5a, sizeof(pad));
    double end = now_ms() + ms;
    int flag;
    while (now_ms() < end)
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    int changed = 0;
    for (size_t i = 0; i < sizeof(pad); i++)
        changed += pad[i] != 0x5a;
    return changed;
}

/* The last rank comes after the others timed out: it completes the MPI requests their
 * calls gave up on (a nonblocking collective cannot be cancelled), and what MPI then
 * writes must land in memory of the library's, not in the stack of calls that returned. */
static void t_late_rank(void)
{
    comm_t *c = fresh();
    float x[4] = {1, 2, 3, 4}, y[4];
    if (g_rank == g_size - 1) {
        usleep((useconds_t)(2 * TIMEOUT_MS) * 1000);
        comm_allreduce(c, x, y, 4, COMM_F32, COMM_SUM, NULL); /* fails: the others left */
    } else {
        comm_status_t st = comm_allreduce(c, x, y, 4, COMM_F32, COMM_SUM, NULL);
        if (st == COMM_OK)
            fail("a late rank", "expected a timeout", st, "");
        int n = stack_touched(2.5 * TIMEOUT_MS);
        if (n != 0) {
            char d[64];
            snprintf(d, sizeof(d), "%d bytes changed", n);
            fail("a late rank", "MPI wrote into the stack of a call that had returned", st, d);
        }
    }
    comm_destroy(c);
}

/* The last rank never calls: the others time out (or see a peer's timeout) in time. */
static void t_absent(void)
{
    comm_t *c = fresh();
    float send[N], recv[N];
    for (int i = 0; i < N; i++)
        send[i] = 1;
    if (g_rank != g_size - 1) {
        double t0 = now_ms();
        comm_status_t st = comm_allreduce(c, send, recv, N, COMM_F32, COMM_SUM, NULL);
        double ms = now_ms() - t0;
        if (st != COMM_ERR_TIMEOUT && st != COMM_ERR_PEER)
            fail("absent rank", "expected TIMEOUT or PEER", st, comm_last_error(c));
        if (ms > 3.0 * TIMEOUT_MS)
            fail("absent rank", "took far longer than the timeout", st, "");
    }
    comm_destroy(c);
}

/* Rank 0 aborts before a call: ABORTED there, PEER everywhere else. */
static void t_abort_before(void)
{
    comm_t *c = fresh();
    float send[8] = {1}, recv[8];
    if (g_rank == 0 && comm_abort(c) != COMM_OK)
        fail("abort", "comm_abort failed", COMM_OK, comm_last_error(NULL));
    comm_status_t st = comm_allreduce(c, send, recv, 8, COMM_F32, COMM_SUM, NULL);
    comm_status_t want = g_rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER;
    if (st != want)
        fail("abort before a call", "wrong status", st, comm_last_error(c));
    comm_destroy(c);
}

static void *abort_later(void *arg)
{
    usleep(300000);
    comm_abort(arg);
    return NULL;
}

/* Rank 0 blocks in a call nobody else makes; another thread aborts it. */
static void t_abort_during(void)
{
    comm_t *c = fresh();
    if (g_rank == 0) {
        float send[8] = {1}, recv[8];
        pthread_t t;
        pthread_create(&t, NULL, abort_later, c);
        double t0 = now_ms();
        comm_status_t st = comm_allreduce(c, send, recv, 8, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_ERR_ABORTED)
            fail("abort during a call", "expected ABORTED", st, comm_last_error(c));
        if (now_ms() - t0 > TIMEOUT_MS)
            fail("abort during a call", "the call did not end at the abort", st, "");
        pthread_join(t, NULL);
    }
    /* The others stay until the abort ended rank 0's call: on one host a peer's
     * comm_destroy during the call would end it first (COMM_ERR_PEER, "left"). */
    MPI_Barrier(MPI_COMM_WORLD);
    comm_destroy(c);
}

/*
 * Rank 0 aborts (from another thread) while every rank but the last waits in a call the
 * last rank makes only later: the others, on every host, learn it from rank 0's failure
 * notice at once (COMM_ERR_PEER well before their timeout), not at their deadline.
 */
static void t_abort_spreads(void)
{
    comm_t *c = fresh();
    float send[8] = {1}, recv[8];
    if (g_rank == g_size - 1) {
        usleep(1000 * (TIMEOUT_MS + 500)); /* never comes in time */
    } else {
        pthread_t t;
        if (g_rank == 0)
            pthread_create(&t, NULL, abort_later, c);
        double t0 = now_ms();
        comm_status_t st = comm_allreduce(c, send, recv, 8, COMM_F32, COMM_SUM, NULL);
        double ms = now_ms() - t0;
        if (g_rank == 0)
            pthread_join(t, NULL);
        if (st != (g_rank == 0 ? COMM_ERR_ABORTED : COMM_ERR_PEER))
            fail("abort spreads", g_rank == 0 ? "expected ABORTED" : "expected PEER", st,
                 comm_last_error(c));
        /* The abort comes at 300 ms; the notice must not wait for the 1.5 s timeout. */
        if (ms > 300 + 600)
            fail("abort spreads", "the failure came late", st, comm_last_error(c));
    }
    comm_destroy(c);
}

/* What rank 0's wait hook saw. */
struct hook_seen {
    comm_t *comm;   /* the handle it must be given */
    int runs;       /* how often it ran */
    int stop_at;    /* return 9 on this run (0: never) */
    bool wrong_arg; /* it was given another handle */
};

static int hook(comm_t *comm, void *arg)
{
    struct hook_seen *h = arg;
    if (comm != h->comm)
        h->wrong_arg = true;
    return ++h->runs == h->stop_at ? 9 : 0;
}

/*
 * The wait hook on a communicator of comm_init_mpi: it runs while rank 0 waits for the
 * late last rank (in the host's waits or in the steps between hosts, as the layout has
 * it), with this communicator's handle, and the call completes; then a hook that returns
 * 9 stops rank 0's call (COMM_ERR_ABORTED naming the hook) while the last rank never
 * comes, and every other rank learns it at once (COMM_ERR_PEER, before the timeout).
 */
static void t_wait_hook(void)
{
    comm_t *c = fresh();
    struct hook_seen h = {.comm = c};
    if (g_rank == 0 && comm_set_wait_hook(c, hook, &h, 5000) != COMM_OK)
        fail("wait hook", "comm_set_wait_hook failed", COMM_OK, comm_last_error(c));
    float send[N], recv[N];
    for (size_t i = 0; i < N; i++)
        send[i] = (float)(g_rank + 1) * 0.5f + (float)(i % 7);
    if (g_rank == g_size - 1)
        usleep(200 * 1000);
    comm_status_t st = comm_allreduce(c, send, recv, N, COMM_F32, COMM_SUM, NULL);
    float n = (float)g_size;
    for (size_t i = 0; st == COMM_OK && i < N; i++) {
        float want = 0.25f * n * (n + 1) + n * (float)(i % 7);
        if (recv[i] != want) {
            fail("wait hook", "a wrong element after the late rank came", st, "");
            break;
        }
    }
    if (st != COMM_OK)
        fail("wait hook", "the call with a late rank failed", st, comm_last_error(c));
    if (g_rank == 0 && (h.runs < 1 || h.wrong_arg))
        fail("wait hook",
             h.runs < 1 ? "it never ran while rank 0 waited 200 ms" : "it was given another handle",
             st, "");
    MPI_Barrier(MPI_COMM_WORLD);

    h.runs = 0;
    h.stop_at = 3;
    if (g_rank == g_size - 1) {
        usleep(1000 * (TIMEOUT_MS + 500)); /* never comes in time */
    } else {
        double t0 = now_ms();
        st = comm_allreduce(c, send, recv, N, COMM_F32, COMM_SUM, NULL);
        double ms = now_ms() - t0;
        if (g_rank == 0 && (st != COMM_ERR_ABORTED || h.runs != 3 ||
                            strstr(comm_last_error(c), "wait hook") == NULL))
            fail("wait hook", "rank 0: expected ABORTED by the hook on its third run", st,
                 comm_last_error(c));
        if (g_rank != 0 && st != COMM_ERR_PEER)
            fail("wait hook", "expected PEER", st, comm_last_error(c));
        /* The hook stops rank 0 after about 15 ms; nobody waits for the 1.5 s timeout. */
        if (ms > 15 + 600)
            fail("wait hook", "the stop came late", st, comm_last_error(c));
    }
    comm_destroy(c);
}

/* A rank whose MPI writes to the socket of a peer that died must not die of SIGPIPE:
 * comm_init_mpi ignores it where it is at its default (even ranks), and keeps a handler
 * the program installed (odd ranks).  Then a write to a socket whose other end is
 * closed fails with EPIPE (and runs the handler) instead of ending the rank. */
static volatile sig_atomic_t g_pipes;

static void on_pipe(int sig)
{
    (void)sig;
    g_pipes++;
}

static void t_sigpipe(void)
{
    bool own = g_rank % 2 == 1;
    signal(SIGPIPE, own ? on_pipe : SIG_DFL);
    comm_t *c = fresh();
    struct sigaction now;
    sigaction(SIGPIPE, NULL, &now);
    if (own && now.sa_handler != on_pipe)
        fail("sigpipe", "comm_init_mpi replaced the program's SIGPIPE handler", COMM_OK, "");
    if (!own && now.sa_handler != SIG_IGN)
        fail("sigpipe", "SIGPIPE is still at its default after comm_init_mpi", COMM_OK, "");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        fail("sigpipe", "socketpair failed", COMM_OK, strerror(errno));
    } else {
        close(sv[1]);
        ssize_t w = write(sv[0], "x", 1); /* SIG_DFL would end this rank here */
        int e = errno;
        if (w != -1 || e != EPIPE)
            fail("sigpipe", "a write to a closed socket did not fail with EPIPE", COMM_OK,
                 strerror(e));
        if (own && g_pipes != 1)
            fail("sigpipe", "the program's SIGPIPE handler did not run", COMM_OK, "");
        close(sv[0]);
    }
    comm_destroy(c);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mc_shm_begin();

    t_sigpipe(); /* first: before any comm_init_mpi of this process */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int what = 0; what < 5; what++) {
        t_mismatch(what);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    t_invalid();
    MPI_Barrier(MPI_COMM_WORLD);
    t_fresh_after_failure();
    MPI_Barrier(MPI_COMM_WORLD);
    t_init_fails();
    MPI_Barrier(MPI_COMM_WORLD);
    t_init_late_in_setup();
    MPI_Barrier(MPI_COMM_WORLD);
    t_init_late_rank();
    MPI_Barrier(MPI_COMM_WORLD);
    t_late_rank();
    MPI_Barrier(MPI_COMM_WORLD);
    t_absent();
    MPI_Barrier(MPI_COMM_WORLD);
    t_abort_before();
    MPI_Barrier(MPI_COMM_WORLD);
    t_abort_during();
    MPI_Barrier(MPI_COMM_WORLD);
    t_abort_spreads();
    MPI_Barrier(MPI_COMM_WORLD);
    t_wait_hook();
    MPI_Barrier(MPI_COMM_WORLD);
    t_intra_fails(3);
    MPI_Barrier(MPI_COMM_WORLD);
    t_intra_fails((size_t)300000);
    MPI_Barrier(MPI_COMM_WORLD);

    /* After all that, a healthy communicator still works. */
    comm_t *c = fresh();
    float x[3] = {1, 2, 3}, y[3];
    comm_status_t st = comm_allreduce(c, x, y, 3, COMM_F32, COMM_SUM, NULL);
    if (st != COMM_OK || y[2] != 3.0f * (float)g_size)
        fail("after the failures", "allreduce went wrong", st, comm_last_error(c));
    comm_destroy(c);

    return mc_finish(g_failed);
}
