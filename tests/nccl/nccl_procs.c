/* SPDX-License-Identifier: MIT */
/*
 * The NCCL API as multi-process programs use it: the parent makes an ncclUniqueId and
 * starts a process per rank (fork + exec of itself, so that no child inherits a CUDA
 * context), each on GPU rank % GPUs (several processes may share one), with
 * ncclCommInitRank; every case of nccl_cases.h is checked in every rank against its
 * float64 reference, and the parent compares the ranks' output hashes bit for bit; the
 * graph cases are captured once and replayed with fresh inputs, eager calls between.  A
 * nonblocking ncclCommSplit must return before the other ranks split, and then work, as
 * must a nonblocking init in a group (ncclGroupEnd returns before the others came);
 * ncclSend/ncclRecv (a ring, an alltoall, ncclGather and ncclScatter, outside a group, a
 * count mismatch).  Then on arcomm: ncclCommAbort of a nonblocking split's handle whose
 * peers never split returns at once and breaks the communicator split from on every
 * rank; rank 1 aborts and rank 0's ncclCommGetAsyncError must report it
 * (ncclRemoteError).  Ranks: NCCL_TEST_RANKS (default 2).  Exit 77 without a GPU.
 */
#include "nccl_procs.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXC 64

/* What a rank tells the parent per case. */
struct rank_result {
    uint32_t index;
    uint32_t wrong;
    uint64_t hash;
    char why[240];
};

static void hex_of(const ncclUniqueId *id, char *out)
{
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static bool id_of_hex(const char *s, ncclUniqueId *id)
{
    if (strlen(s) != 2 * NCCL_UNIQUE_ID_BYTES)
        return false;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return false;
        id->internal[i] = (char)v;
    }
    return true;
}

static void send_result(int fd, const struct rank_result *r)
{
    if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
        exit(3);
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/*
 * Polls ncclCommGetAsyncError of a nonblocking communicator (made at t0) until it is
 * done, checks that this rank is rank want in it, runs case c on it and destroys it.
 * Returns the wrong elements.
 */
static size_t use_when_done(const struct tcase *c, int rank, int n, int want, ncclComm_t sub,
                            cudaStream_t st, const struct timespec *t0, const char *what,
                            uint64_t *hash, char *why, size_t len)
{
    ncclResult_t e, async = ncclInProgress;
    while (ncclCommGetAsyncError(sub, &async) == ncclSuccess && async == ncclInProgress &&
           ms_since(t0) < 20000)
        usleep(1000);
    int ur = -1;
    if (async != ncclSuccess || ncclCommUserRank(sub, &ur) != ncclSuccess || ur != want) {
        snprintf(why, len, "rank %d: the %s's ncclCommGetAsyncError %s, its rank %d: %s", rank,
                 what, ncclGetErrorString(async), ur, ncclGetLastError(NULL));
        ncclCommDestroy(sub);
        return 1;
    }
    struct tc_rank b;
    size_t wrong = 0;
    int se = tc_setup(c, ur, n, sub, &b);
    e = se ? (ncclResult_t)se : tc_call(c, sub, &b, st);
    if (e != ncclSuccess) {
        snprintf(why, len, "rank %d: a call on the %s: %s: %s", rank, what, ncclGetErrorString(e),
                 ncclGetLastError(sub));
        wrong = 1;
    } else {
        TC_CUDA(cudaStreamSynchronize(st));
        wrong = tc_done(c, ur, n, sub, &b, hash, why, len);
    }
    if (ncclCommDestroy(sub) != ncclSuccess && wrong == 0) {
        snprintf(why, len, "rank %d: ncclCommDestroy of the %s: %s", rank, what,
                 ncclGetLastError(NULL));
        wrong = 1;
    }
    return wrong;
}

/* The nonblocking calls' stagger: rank 0 goes first, the others 300 ms later; a
 * nonblocking config; t0 when this rank starts. */
static void staggered_start(int rank, ncclConfig_t *cfg, struct timespec *t0)
{
    if (rank != 0)
        usleep(300 * 1000);
    *cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    cfg->blocking = 0;
    clock_gettime(CLOCK_MONOTONIC, t0);
}

/* Did rank 0's call (what) wait for the ranks that came 300 ms later?  Then why. */
static bool waited_for_late_ranks(int rank, int n, const struct timespec *t0, const char *what,
                                  char *why, size_t len)
{
    double ms = ms_since(t0);
    if (rank != 0 || n < 2 || ms <= 150)
        return false;
    snprintf(why, len,
             "rank 0: %s returned after %.0f ms: it waited for the ranks that came 300 ms later",
             what, ms);
    return true;
}

/*
 * A nonblocking ncclCommSplit (ranks in reverse order) returns before every rank made it
 * (rank 0 calls it first, the others 300 ms later) and works once ncclCommGetAsyncError
 * says it is done: case c on the new communicator.  Returns the wrong elements.
 */
static size_t nonblocking_split(const struct tcase *c, int rank, int n, ncclComm_t comm,
                                cudaStream_t st, uint64_t *hash, char *why, size_t len)
{
    ncclConfig_t cfg;
    struct timespec t0;
    staggered_start(rank, &cfg, &t0);
    ncclComm_t sub = NULL;
    ncclResult_t e = ncclCommSplit(comm, 0, n - 1 - rank, &sub, &cfg);
    if ((e != ncclSuccess && e != ncclInProgress) || sub == NULL) {
        snprintf(why, len, "rank %d: nonblocking ncclCommSplit: %s: %s", rank,
                 ncclGetErrorString(e), ncclGetLastError(NULL));
        return 1;
    }
    if (waited_for_late_ranks(rank, n, &t0, "nonblocking ncclCommSplit", why, len)) {
        ncclCommDestroy(sub);
        return 1;
    }
    return use_when_done(c, rank, n, n - 1 - rank, sub, st, &t0, "split", hash, why, len);
}

/*
 * A nonblocking init inside a group (NCCL's nonblocking group): ncclGroupEnd returns
 * (ncclInProgress) before the other ranks came (rank 0 first, the others 300 ms later),
 * and the communicator works once ncclCommGetAsyncError says it is done: case c on it.
 * The id comes from rank 0, broadcast on comm.  On arcomm also: a group that mixes a
 * blocking and a nonblocking communicator fails with ncclInvalidArgument, at the call
 * that mixes them and at ncclGroupEnd (NCCL's rule).  Returns the wrong elements.
 */
static size_t nonblocking_group(const struct tcase *c, int rank, int n, ncclComm_t comm,
                                cudaStream_t st, uint64_t *hash, char *why, size_t len)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        snprintf(why, len, "rank 0: ncclGetUniqueId: %s", ncclGetLastError(NULL));
        return 1;
    }
    void *d = NULL;
    TC_CUDA(cudaMalloc(&d, sizeof(id)));
    TC_CUDA(cudaMemcpy(d, &id, sizeof(id), cudaMemcpyHostToDevice));
    ncclResult_t e = ncclBroadcast(d, d, sizeof(id), ncclUint8, 0, comm, st);
    if (e == ncclSuccess) {
        TC_CUDA(cudaStreamSynchronize(st));
        TC_CUDA(cudaMemcpy(&id, d, sizeof(id), cudaMemcpyDeviceToHost));
    }
    TC_CUDA(cudaFree(d));
    if (e != ncclSuccess) {
        snprintf(why, len, "rank %d: ncclBroadcast of the id: %s", rank, ncclGetLastError(comm));
        return 1;
    }
    ncclConfig_t cfg;
    struct timespec t0;
    staggered_start(rank, &cfg, &t0);
    ncclComm_t a = NULL;
    e = ncclGroupStart();
    ncclResult_t ei = ncclCommInitRankConfig(&a, n, id, rank, &cfg);
    ncclResult_t ee = ncclGroupEnd();
    if (e != ncclSuccess || (ei != ncclSuccess && ei != ncclInProgress) ||
        (ee != ncclSuccess && ee != ncclInProgress) || a == NULL) {
        snprintf(why, len,
                 "rank %d: ncclGroupStart %s, nonblocking ncclCommInitRankConfig %s, "
                 "ncclGroupEnd %s: %s",
                 rank, ncclGetErrorString(e), ncclGetErrorString(ei), ncclGetErrorString(ee),
                 ncclGetLastError(NULL));
        return 1;
    }
    if (waited_for_late_ranks(rank, n, &t0, "ncclGroupEnd of a nonblocking init", why, len)) {
        ncclCommAbort(a);
        return 1;
    }
    size_t wrong = use_when_done(c, rank, n, rank, a, st, &t0, "group's init", hash, why, len);
    if (wrong || !tc_is_arcomm())
        return wrong;

    /* One kind per group: a blocking and then a nonblocking communicator of 1 rank. */
    ncclUniqueId ib, in;
    ncclComm_t x = NULL, y = NULL;
    if (ncclGetUniqueId(&ib) != ncclSuccess || ncclGetUniqueId(&in) != ncclSuccess) {
        snprintf(why, len, "rank %d: ncclGetUniqueId: %s", rank, ncclGetLastError(NULL));
        return 1;
    }
    ncclConfig_t bc = NCCL_CONFIG_INITIALIZER;
    bc.blocking = 1;
    (void)ncclGroupStart();
    ncclResult_t eb = ncclCommInitRankConfig(&x, 1, ib, 0, &bc);
    ncclResult_t en = ncclCommInitRankConfig(&y, 1, in, 0, &cfg);
    const char *said = ncclGetLastError(NULL);
    bool said_ok = strstr(said, "nonblocking communicator in a group of blocking") != NULL;
    ee = ncclGroupEnd();
    if (eb != ncclSuccess || en != ncclInvalidArgument || ee != ncclInvalidArgument || !said_ok) {
        snprintf(why, len,
                 "rank %d: a group of a blocking and a nonblocking init: the blocking %s, the "
                 "nonblocking %s (want ncclInvalidArgument, saying so: '%.80s'), ncclGroupEnd %s",
                 rank, ncclGetErrorString(eb), ncclGetErrorString(en), said,
                 ncclGetErrorString(ee));
        wrong = 1;
    }
    if (x != NULL && ncclCommDestroy(x) != ncclSuccess && wrong == 0) {
        snprintf(why, len, "rank %d: ncclCommDestroy of the blocking one: %s", rank,
                 ncclGetLastError(NULL));
        wrong = 1;
    }
    return wrong;
}

/*
 * On arcomm: ncclCommAbort of the handle a nonblocking ncclCommSplit returned, while the
 * split still waits for ranks that never split, returns at once (not at the timeout),
 * and the communicator split from breaks on every rank (each rank's
 * ncclCommGetAsyncError turns to an error).  On a duplicate of comm, which every rank
 * aborts afterwards.  Returns the wrong count.
 */
static size_t abort_split_child(int rank, ncclComm_t comm, char *why, size_t len)
{
    ncclComm_t dup = NULL;
    ncclResult_t e = ncclCommSplit(comm, 0, rank, &dup, NULL);
    if (e != ncclSuccess || dup == NULL) {
        snprintf(why, len, "rank %d: ncclCommSplit (the duplicate): %s: %s", rank,
                 ncclGetErrorString(e), ncclGetLastError(NULL));
        return 1;
    }
    size_t wrong = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rank == 0) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclComm_t sub = NULL;
        e = ncclCommSplit(dup, 0, 0, &sub, &cfg);
        if ((e != ncclSuccess && e != ncclInProgress) || sub == NULL) {
            snprintf(why, len, "rank 0: nonblocking ncclCommSplit: %s: %s", ncclGetErrorString(e),
                     ncclGetLastError(NULL));
            ncclCommAbort(dup);
            return 1;
        }
        usleep(200 * 1000);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        e = ncclCommAbort(sub);
        double ms = ms_since(&t0);
        if (e != ncclSuccess || ms > 2000) {
            snprintf(why, len, "rank 0: ncclCommAbort of the split's handle: %s after %.0f ms",
                     ncclGetErrorString(e), ms);
            wrong = 1;
        }
    }
    /* Every rank's duplicate is broken now, or soon (the others learn it from rank 0). */
    ncclResult_t async = ncclSuccess;
    do {
        e = ncclCommGetAsyncError(dup, &async);
        usleep(1000);
    } while (e == ncclSuccess && (async == ncclSuccess || async == ncclInProgress) &&
             ms_since(&t0) < 5000);
    if (!wrong && (e != ncclSuccess || async == ncclSuccess || async == ncclInProgress)) {
        snprintf(why, len,
                 "rank %d: after rank 0 aborted its split's handle, ncclCommGetAsyncError of the "
                 "communicator split from gave %s, async %s (%.0f ms)",
                 rank, ncclGetErrorString(e), ncclGetErrorString(async), ms_since(&t0));
        wrong = 1;
    }
    ncclCommAbort(dup);
    return wrong;
}

static int child(int rank, int n, const char *hex, int fd)
{
    ncclUniqueId id;
    if (!id_of_hex(hex, &id))
        return 2;
    int ndev = 0;
    TC_CUDA(cudaGetDeviceCount(&ndev));
    TC_CUDA(cudaSetDevice(rank % ndev));
    cudaStream_t st;
    TC_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    ncclComm_t comm;
    struct rank_result res = {.index = UINT32_MAX};
    ncclResult_t e = ncclCommInitRank(&comm, n, id, rank);
    if (e != ncclSuccess) {
        res.wrong = 1;
        snprintf(res.why, sizeof(res.why), "rank %d: ncclCommInitRank: %s: %s", rank,
                 ncclGetErrorString(e), ncclGetLastError(NULL));
        send_result(fd, &res);
        return 1;
    }
    static struct tcase cases[MAXC];
    size_t nc = tc_cases(cases, MAXC, n);
    nc += tc_graph_cases(cases + nc, MAXC - nc, n);
    for (size_t k = 0; k < nc && k < MAXC; k++) {
        struct tc_rank b;
        memset(&res, 0, sizeof(res));
        res.index = (uint32_t)k;
        if (cases[k].graph) {
            res.wrong = (uint32_t)tc_graph(&cases[k], rank, n, comm, st, 3, &res.hash, res.why,
                                           sizeof(res.why));
            send_result(fd, &res);
            continue;
        }
        int se = tc_setup(&cases[k], rank, n, comm, &b);
        e = se ? (ncclResult_t)se : tc_call(&cases[k], comm, &b, st);
        if (e != ncclSuccess) {
            res.wrong = 1;
            snprintf(res.why, sizeof(res.why), "rank %d: %s: %s", rank, ncclGetErrorString(e),
                     ncclGetLastError(comm));
            send_result(fd, &res);
            return 1; /* the peers fail too: their reports say so */
        }
        TC_CUDA(cudaStreamSynchronize(st));
        res.wrong =
            (uint32_t)tc_done(&cases[k], rank, n, comm, &b, &res.hash, res.why, sizeof(res.why));
        send_result(fd, &res);
    }
    memset(&res, 0, sizeof(res));
    res.index = (uint32_t)nc;
    res.wrong = (uint32_t)nonblocking_split(&cases[0], rank, n, comm, st, &res.hash, res.why,
                                            sizeof(res.why));
    send_result(fd, &res);

    memset(&res, 0, sizeof(res));
    res.index = (uint32_t)nc + 1;
    res.wrong = (uint32_t)p2p_cases(rank, n, comm, st, res.why, sizeof(res.why));
    send_result(fd, &res);

    memset(&res, 0, sizeof(res));
    res.index = (uint32_t)nc + 2;
    res.wrong = (uint32_t)nonblocking_group(&cases[0], rank, n, comm, st, &res.hash, res.why,
                                            sizeof(res.why));
    send_result(fd, &res);

    if (tc_is_arcomm() && n > 1) {
        memset(&res, 0, sizeof(res));
        res.index = (uint32_t)nc + 3;
        res.wrong = (uint32_t)abort_split_child(rank, comm, res.why, sizeof(res.why));
        send_result(fd, &res);
    }

    /* On arcomm: a peer's abort shows in ncclCommGetAsyncError, asked from any thread. */
    if (tc_is_arcomm() && n > 1) {
        memset(&res, 0, sizeof(res));
        res.index = (uint32_t)nc + 4;
        if (rank == 1) {
            usleep(300 * 1000); /* every rank has checked its last case */
            e = ncclCommAbort(comm);
            if (e != ncclSuccess) {
                res.wrong = 1;
                snprintf(res.why, sizeof(res.why), "rank 1: ncclCommAbort: %s",
                         ncclGetLastError(NULL));
            }
            send_result(fd, &res);
            TC_CUDA(cudaStreamDestroy(st));
            return 0;
        }
        ncclResult_t async = ncclSuccess;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            e = ncclCommGetAsyncError(comm, &async);
            usleep(1000);
            clock_gettime(CLOCK_MONOTONIC, &t1);
        } while (e == ncclSuccess && async == ncclSuccess && t1.tv_sec - t0.tv_sec < 20);
        if (rank != 0)
            async = ncclRemoteError; /* ranks > 1 only watch; rank 0 checks */
        if (e != ncclSuccess || async != ncclRemoteError) {
            res.wrong = 1;
            snprintf(res.why, sizeof(res.why),
                     "rank %d: after rank 1's ncclCommAbort, ncclCommGetAsyncError gave %d "
                     "(%s), async %d",
                     rank, (int)e, ncclGetErrorString(e), (int)async);
        }
        send_result(fd, &res);
    }
    e = ncclCommDestroy(comm);
    TC_CUDA(cudaStreamDestroy(st));
    return e == ncclSuccess ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--rank") == 0)
        return child(atoi(argv[2]), atoi(argv[3]), argv[4], atoi(argv[5]));
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA GPU here\n");
        return 77;
    }
    int n = 2;
    const char *env = getenv("NCCL_TEST_RANKS");
    if (env && atoi(env) >= 1 && atoi(env) <= 8)
        n = atoi(env);
    int version = 0;
    ncclGetVersion(&version);
    printf("libnccl %d (%s), %d process rank%s on %d GPU%s\n", version,
           tc_is_arcomm() ? "arcomm" : "real NCCL", n, n > 1 ? "s" : "", ndev, ndev > 1 ? "s" : "");
    fflush(stdout);
    ncclUniqueId id;
    ncclResult_t e = ncclGetUniqueId(&id);
    if (e != ncclSuccess) {
        printf("FAIL ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    hex_of(&id, hex);
    int fds[8][2];
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
        if (pipe(fds[r]) != 0)
            return 2;
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[r][0]);
            char rs[16], ns[16], fs[16];
            snprintf(rs, sizeof(rs), "%d", r);
            snprintf(ns, sizeof(ns), "%d", n);
            snprintf(fs, sizeof(fs), "%d", fds[r][1]);
            execl("/proc/self/exe", argv[0], "--rank", rs, ns, hex, fs, (char *)NULL);
            _exit(127);
        }
        close(fds[r][1]);
    }
    static struct tcase cases[MAXC];
    size_t nc = tc_cases(cases, MAXC, n);
    nc += tc_graph_cases(cases + nc, MAXC - nc, n);
    static struct rank_result got[8][MAXC + 5];
    static bool have[8][MAXC + 5];
    int failures = 0;
    for (int r = 0; r < n; r++) {
        struct rank_result res;
        while (read(fds[r][0], &res, sizeof(res)) == (ssize_t)sizeof(res)) {
            if (res.index == UINT32_MAX) {
                printf("FAIL %s\n", res.why);
                failures++;
                continue;
            }
            if (res.index <= nc + 4) {
                got[r][res.index] = res;
                have[r][res.index] = true;
            }
        }
        close(fds[r][0]);
    }
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("FAIL rank %d exited with status %d\n", r,
                   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            failures++;
        }
    }
    for (size_t k = 0; k <= nc + 4; k++) {
        bool split_case = k == nc, p2p_case = k == nc + 1, group_case = k == nc + 2,
             abort_split_case = k == nc + 3, async_case = k == nc + 4;
        if ((abort_split_case || async_case) && !(tc_is_arcomm() && n > 1))
            break;
        char name[160];
        const struct tcase *c = async_case || p2p_case || abort_split_case ? NULL
                                : split_case || group_case                 ? &cases[0]
                                                                           : &cases[k];
        if (group_case)
            snprintf(name, sizeof(name),
                     "nonblocking init in a group: ncclGroupEnd returns before the others "
                     "came, then it works%s",
                     tc_is_arcomm() ? "; mixing kinds in a group fails" : "");
        else if (p2p_case)
            snprintf(name, sizeof(name),
                     "ncclSend/ncclRecv: a ring, an alltoall with oneself, ncclGather, "
                     "ncclScatter in place, outside a group, a count mismatch fails");
        else if (async_case)
            snprintf(name, sizeof(name), "rank 1 aborts: rank 0's ncclCommGetAsyncError says so");
        else if (abort_split_case)
            snprintf(name, sizeof(name),
                     "ncclCommAbort of a nonblocking split's handle whose peers never split "
                     "returns at once; the communicator split from breaks on every rank");
        else if (split_case)
            snprintf(name, sizeof(name),
                     "nonblocking ncclCommSplit returns before the others split, then works");
        else
            snprintf(name, sizeof(name), "%s%s dtype %d op %d count %zu%s%s", tc_kind_name(c->kind),
                     c->inplace ? " in place" : "", (int)c->dtype, (int)c->op, c->count,
                     c->premul ? " premul" : "", c->graph ? ", graph replays and eager calls" : "");
        const char *why = "";
        char buf[300];
        bool ok = true;
        for (int r = 0; r < n && ok; r++) {
            if (!have[r][k]) {
                snprintf(buf, sizeof(buf), "rank %d sent no result", r);
                why = buf;
                ok = false;
            } else if (got[r][k].wrong) {
                why = got[r][k].why;
                ok = false;
            } else if (c && tc_same_on_all(c) && got[r][k].hash != got[0][k].hash) {
                snprintf(buf, sizeof(buf), "rank %d's output differs from rank 0's", r);
                why = buf;
                ok = false;
            }
        }
        printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, ok ? "" : ": ", why);
        failures += !ok;
    }
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
