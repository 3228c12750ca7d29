/* SPDX-License-Identifier: MIT */
/*
 * The NCCL API as ggml's CUDA backend and nccl-tests use it: one thread, every local GPU
 * a rank (ncclCommInitAll), each collective issued to every communicator inside
 * ncclGroupStart/End, then every stream synchronized and every output checked (float64
 * reference, bit-identical ranks).  Also from one thread: ncclCommInitRank of every
 * rank inside a group, nonblocking inits polled with ncclCommGetAsyncError, ncclCommSplit
 * in a group, nested groups, an error inside a group, ncclCommAbort of nonblocking inits
 * still waiting for a rank, and (one GPU) two ranks on one GPU refused.  Ranks: every GPU (at most
 * 8), or NCCL_TEST_RANKS.  Exit 77 without a GPU.
 */
#include "nccl_harness.h"

#include <time.h>
#include <unistd.h>

#define MAXR 8

static int failures;

static void report(bool ok, const char *name, const char *why)
{
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, ok ? "" : ": ", ok ? "" : why);
    fflush(stdout);
    if (!ok)
        failures++;
}

/* Every case on the n communicators, from this thread, each call in a group. */
static void run_cases(const char *what, ncclComm_t *comms, const int *devs, cudaStream_t *st, int n,
                      size_t only)
{
    static struct tcase cases[64];
    size_t nc = tc_cases(cases, 64, n);
    for (size_t k = 0; k < nc && k < only; k++) {
        const struct tcase *c = &cases[k];
        struct tc_rank b[MAXR];
        char why[300] = "", name[160];
        snprintf(name, sizeof(name), "%s %s %s dtype %d op %d count %zu%s%s", what,
                 tc_kind_name(c->kind), c->inplace ? "in place" : "", (int)c->dtype, (int)c->op,
                 c->count, c->premul == 1 ? " premul host" : "",
                 c->premul == 2 ? " premul device" : "");
        bool ok = true;
        for (int r = 0; r < n; r++) {
            TC_CUDA(cudaSetDevice(devs[r]));
            int e = tc_setup(c, r, n, comms[r], &b[r]);
            if (e != 0) {
                snprintf(why, sizeof(why), "rank %d: setup: %s (%s)", r,
                         ncclGetErrorString((ncclResult_t)e), ncclGetLastError(comms[r]));
                ok = false;
            }
        }
        if (!ok) {
            report(false, name, why);
            continue;
        }
        /* Nested groups around every third case: only the outermost end counts. */
        bool nest = k % 3 == 0;
        ncclResult_t r0 = ncclGroupStart();
        if (nest)
            r0 = ncclGroupStart();
        for (int r = 0; r < n && r0 == ncclSuccess; r++) {
            TC_CUDA(cudaSetDevice(devs[r]));
            r0 = tc_call(c, comms[r], &b[r], st[r]);
        }
        if (nest)
            (void)ncclGroupEnd();
        ncclResult_t r1 = ncclGroupEnd();
        if (r0 != ncclSuccess || r1 != ncclSuccess) {
            snprintf(why, sizeof(why), "call %s, group end %s: %s", ncclGetErrorString(r0),
                     ncclGetErrorString(r1), ncclGetLastError(NULL));
            ok = false;
        }
        uint64_t hash[MAXR];
        for (int r = 0; r < n; r++) {
            TC_CUDA(cudaSetDevice(devs[r]));
            TC_CUDA(cudaStreamSynchronize(st[r]));
            char w[300];
            size_t bad = tc_done(c, r, n, comms[r], &b[r], &hash[r], w, sizeof(w));
            if (bad && ok) {
                snprintf(why, sizeof(why), "%zu wrong: %s", bad, w);
                ok = false;
            }
            if (ok && tc_same_on_all(c) && hash[r] != hash[0]) {
                snprintf(why, sizeof(why), "rank %d's output differs from rank 0's", r);
                ok = false;
            }
        }
        report(ok, name, why);
    }
}

static void make_streams(const int *devs, cudaStream_t *st, int n)
{
    for (int r = 0; r < n; r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        TC_CUDA(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    }
}

static void destroy_all(ncclComm_t *comms, int n, const char *what)
{
    for (int r = 0; r < n; r++) {
        ncclResult_t e = ncclCommDestroy(comms[r]);
        if (e != ncclSuccess)
            report(false, what, ncclGetLastError(NULL));
    }
}

static void queries(ncclComm_t *comms, const int *devs, int n)
{
    bool ok = true;
    char why[200] = "";
    for (int r = 0; r < n; r++) {
        int count = -1, dev = -1, rank = -1;
        ncclResult_t e = ncclCommCount(comms[r], &count);
        if (e == ncclSuccess)
            e = ncclCommCuDevice(comms[r], &dev);
        if (e == ncclSuccess)
            e = ncclCommUserRank(comms[r], &rank);
        ncclResult_t async = ncclInternalError;
        if (e == ncclSuccess)
            e = ncclCommGetAsyncError(comms[r], &async);
        if (e != ncclSuccess || count != n || dev != devs[r] || rank != r || async != ncclSuccess) {
            snprintf(why, sizeof(why), "rank %d: %s: count %d dev %d rank %d async %d", r,
                     ncclGetErrorString(e), count, dev, rank, (int)async);
            ok = false;
        }
    }
    report(ok, "ncclCommCount / CuDevice / UserRank / GetAsyncError", why);
}

/* A bad datatype inside a group: the call says so, so does the group's end, the last
 * error explains, and the communicators stay usable. */
static void group_error(ncclComm_t *comms, const int *devs, cudaStream_t *st, int n)
{
    void *buf = NULL;
    TC_CUDA(cudaSetDevice(devs[0]));
    TC_CUDA(cudaMalloc(&buf, 64));
    ncclGroupStart();
    ncclResult_t r0 = ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, comms[0], st[0]);
    ncclResult_t r1 = ncclGroupEnd();
    const char *msg = ncclGetLastError(comms[0]);
    char why[300];
    snprintf(why, sizeof(why), "call %d, group end %d, last error \"%s\"", (int)r0, (int)r1, msg);
    report(r0 == ncclInvalidArgument && r1 == ncclInvalidArgument && msg && msg[0],
           "bad datatype inside a group: ncclInvalidArgument from the call and ncclGroupEnd", why);
    r1 = ncclGroupEnd();
    report(r1 == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart: ncclInvalidUsage",
           ncclGetErrorString(r1));
    TC_CUDA(cudaFree(buf));
    (void)n;
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA GPU here\n");
        return 77;
    }
    int n = ndev < MAXR ? ndev : MAXR;
    const char *env = getenv("NCCL_TEST_RANKS");
    if (env && atoi(env) >= 1 && atoi(env) <= MAXR)
        n = atoi(env);
    int devs[MAXR];
    for (int r = 0; r < n; r++)
        devs[r] = r % ndev;
    int version = 0;
    ncclGetVersion(&version);
    printf("libnccl %d (%s), %d rank%s on %d GPU%s, one thread\n", version,
           tc_is_arcomm() ? "arcomm" : "real NCCL", n, n > 1 ? "s" : "", ndev, ndev > 1 ? "s" : "");

    /* ggml: ncclCommInitAll, then groups over every communicator. */
    ncclComm_t comms[MAXR];
    cudaStream_t st[MAXR];
    ncclResult_t e = ncclCommInitAll(comms, n, devs);
    report(e == ncclSuccess, "ncclCommInitAll", ncclGetLastError(NULL));
    if (e != ncclSuccess)
        return 1;
    make_streams(devs, st, n);
    queries(comms, devs, n);
    run_cases("initall", comms, devs, st, n, 1000);
    group_error(comms, devs, st, n);
    run_cases("initall after the error", comms, devs, st, n, 1);

    /* ncclCommSplit of every rank in one group: reversed order, then no color. */
    ncclComm_t sub[MAXR];
    ncclGroupStart();
    for (int r = 0; r < n; r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        e = ncclCommSplit(comms[r], 0, n - 1 - r, &sub[r], NULL);
    }
    ncclResult_t ge = ncclGroupEnd();
    bool ok = e == ncclSuccess && ge == ncclSuccess;
    for (int r = 0; ok && r < n; r++) {
        int rank = -1;
        ok = sub[r] != NULL && ncclCommUserRank(sub[r], &rank) == ncclSuccess && rank == n - 1 - r;
    }
    report(ok, "ncclCommSplit in a group (keys reversed)", ncclGetLastError(NULL));
    if (ok) {
        /* Rank order reversed: sub's rank q is comms' rank n-1-q. */
        ncclComm_t byrank[MAXR];
        int d2[MAXR];
        cudaStream_t s2[MAXR];
        for (int q = 0; q < n; q++) {
            byrank[q] = sub[n - 1 - q];
            d2[q] = devs[n - 1 - q];
            s2[q] = st[n - 1 - q];
        }
        run_cases("split", byrank, d2, s2, n, 3);
        destroy_all(sub, n, "ncclCommDestroy (split)");
    }
    ncclGroupStart();
    for (int r = 0; r < n; r++)
        e = ncclCommSplit(comms[r], NCCL_SPLIT_NOCOLOR, 0, &sub[r], NULL);
    ge = ncclGroupEnd();
    ok = e == ncclSuccess && ge == ncclSuccess;
    for (int r = 0; r < n; r++)
        ok = ok && sub[r] == NULL;
    report(ok, "ncclCommSplit with NCCL_SPLIT_NOCOLOR: NULL", ncclGetLastError(NULL));
    for (int r = 0; r < n; r++) {
        e = ncclCommFinalize(comms[r]);
        if (e != ncclSuccess)
            report(false, "ncclCommFinalize", ncclGetLastError(NULL));
    }
    destroy_all(comms, n, "ncclCommDestroy (initall)");

    /* Every rank's ncclCommInitRank from this thread, inside one group. */
    ncclUniqueId id;
    e = ncclGetUniqueId(&id);
    ncclGroupStart();
    for (int r = 0; r < n && e == ncclSuccess; r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        e = ncclCommInitRank(&comms[r], n, id, r);
    }
    ge = ncclGroupEnd();
    report(e == ncclSuccess && ge == ncclSuccess, "ncclCommInitRank of every rank in a group",
           ncclGetLastError(NULL));
    if (e == ncclSuccess && ge == ncclSuccess) {
        run_cases("group init", comms, devs, st, n, 4);
        destroy_all(comms, n, "ncclCommDestroy (group init)");
    }

    /* Nonblocking communicators: ncclInProgress (or success), then polled. */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    e = ncclGetUniqueId(&id);
    for (int r = 0; r < n && (e == ncclSuccess || e == ncclInProgress); r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        e = ncclCommInitRankConfig(&comms[r], n, id, r, &cfg);
    }
    ok = e == ncclSuccess || e == ncclInProgress;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; ok && r < n; r++) {
        ncclResult_t async = ncclInProgress;
        while (ok && async == ncclInProgress) {
            ok = ncclCommGetAsyncError(comms[r], &async) == ncclSuccess;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (t1.tv_sec - t0.tv_sec > 60)
                ok = false;
            if (async == ncclInProgress)
                usleep(1000);
        }
        ok = ok && async == ncclSuccess;
    }
    report(ok, "nonblocking ncclCommInitRankConfig, polled to ncclSuccess", ncclGetLastError(NULL));
    if (ok) {
        run_cases("nonblocking", comms, devs, st, n, 4);
        destroy_all(comms, n, "ncclCommDestroy (nonblocking)");
    }

    /* ncclCommAbort of nonblocking inits whose last rank never comes (as PyTorch's
     * watchdog aborts a hung init): each returns at once, not at the init's timeout, and
     * (two GPUs or more) the rank not aborted sees its init fail soon after. */
    int nab = n >= 2 ? 2 : 1;
    e = ncclGetUniqueId(&id);
    for (int r = 0; r < nab && (e == ncclSuccess || e == ncclInProgress); r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        e = ncclCommInitRankConfig(&comms[r], nab + 1, id, r, &cfg);
    }
    ok = e == ncclInProgress;
    usleep(200000);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ok = ok && ncclCommAbort(comms[0]) == ncclSuccess;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double abort_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ok = ok && abort_s < 5;
    ncclResult_t async = ncclInProgress;
    while (ok && nab == 2 && async == ncclInProgress) {
        ok = ncclCommGetAsyncError(comms[1], &async) == ncclSuccess;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 5)
            ok = false;
        if (async == ncclInProgress)
            usleep(1000);
    }
    ok = ok && (nab == 1 || (async != ncclSuccess && ncclCommAbort(comms[1]) == ncclSuccess));
    char why[256];
    snprintf(why, sizeof(why), "abort took %.2f s, peer's init %s: %s", abort_s,
             ncclGetErrorString(async), ncclGetLastError(NULL));
    report(ok, "ncclCommAbort of nonblocking inits in progress, at once", why);

    /* Two thread ranks on one GPU: arcomm refuses them, as NCCL refuses duplicate GPUs. */
    if (ndev == 1) {
        int same[2] = {0, 0};
        ncclComm_t two[2];
        e = ncclCommInitAll(two, 2, same);
        const char *msg = ncclGetLastError(NULL);
        report(e != ncclSuccess && msg && msg[0], "ncclCommInitAll of 2 ranks on one GPU refused",
               msg);
        if (e == ncclSuccess)
            destroy_all(two, 2, "ncclCommDestroy (two on one GPU)");
    }
    for (int r = 0; r < n; r++) {
        TC_CUDA(cudaSetDevice(devs[r]));
        TC_CUDA(cudaStreamDestroy(st[r]));
    }
    printf("%s: %d failure%s\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
