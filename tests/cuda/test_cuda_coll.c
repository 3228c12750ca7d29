/* SPDX-License-Identifier: MIT */
/*
 * The CUDA collectives beyond allreduce, and allreduce over every dtype and op (need a
 * GPU; exit 77 = skipped when none is found): the runs, and main.
 *
 * The cases, their random inputs and what each rank must hold are in
 * test_cuda_coll_cases.c; one rank's part of a case (its outputs poisoned, a guard past
 * them, every element checked) and of each failure in test_cuda_coll_rank.c;
 * test_cuda_coll.h declares what the three files share.  Here, the runs: ranks that must
 * agree hold the same bits (the runs compare the hashes of their outputs).
 *
 * Ranks are processes of this program (they may share one GPU), and, with a GPU per
 * rank, threads: a thread per rank, and one thread enqueueing every rank in turn (rank
 * 0 first, and last rank first).  Each sweep runs under other knobs: the defaults, the
 * copy-engine path everywhere with 64 KiB chunks (many steps per call, the staging slots
 * reused), and the kernel path for every allreduce.
 *
 * Failures, each on a communicator of its own: ranks that disagree on the collective or
 * the root (COMM_ERR_MISMATCH, and no byte of any rank's recvbuf written), integer AVG
 * (COMM_ERR_UNSUPPORTED, the communicator stays usable), a call no peer makes (its GPU gives up at
 * the timeout, or at comm_abort; the next call says why, the peers hear of it).
 *
 *   test_cuda_coll         all of it (ARCOMM_TEST_ONLY=proc,threads,fail: parts;
 *                          ARCOMM_TEST_RANKS=N: N process ranks instead of 2 and 3)
 *   test_cuda_coll --child CONFIG R N SEED ID...   one process rank (the process test)
 */
#include "test_cuda_coll.h"
#include "arcomm.h"
#include "transport_check.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- process ranks ---- */

static int child_main(int argc, char **argv)
{
    if (argc != 6 + N_IDS)
        return 2;
    int config = atoi(argv[2]), rank = atoi(argv[3]), nranks = atoi(argv[4]);
    uint64_t seed = strtoull(argv[5], NULL, 10);
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return 2;
    cudaGetDeviceCount(&g_ndev);
    static struct ccase cases[MAX_CASES];
    size_t ncases = cc_make_cases(cases, nranks, seed);
    struct rank r = {.rank = rank, .nranks = nranks, .device = rank % g_ndev};
    cc_rank_alloc(&r, cc_cap_for(cases, ncases, nranks));
    r.comm = cc_init_comm(rank, nranks, r.device, argv[6], 30000);
    cc_check_unsupported(&r);
    for (size_t i = 0; i < ncases; i++) {
        cc_stage(&r, &cases[i]);
        comm_status_t st = cc_enqueue(&r, &cases[i]);
        uint64_t h = 0;
        long wrong = -1;
        if (st == COMM_OK) {
            wrong = cc_check(&r, &cases[i], config, &h);
        } else {
            char what[160];
            cc_describe(&cases[i], what, sizeof(what));
            fprintf(stderr, "FAIL rank %d: %s: %s: %s\n", rank, what, comm_status_string(st),
                    comm_last_error(r.comm));
            free(r.input);
        }
        printf("case %zu wrong %ld hash %016llx\n", i, wrong, (unsigned long long)h);
        if (st != COMM_OK)
            break; /* the communicator is broken */
    }
    comm_destroy(r.comm);
    for (int s = 0; s < N_MISMATCH; s++) {
        r.comm = cc_init_comm(rank, nranks, r.device, argv[7 + s], 5000);
        /* recvbuf (all of db) poisoned: nothing may land there. */
        cuda_ok(cudaMemset(r.db, 0x5a, r.cap), "poison");
        cuda_ok(cudaDeviceSynchronize(), "poison");
        comm_status_t st = cc_mismatch_call(&r, s);
        if (st == COMM_OK)
            st = cc_mismatch_outcome(&r);
        cuda_ok(cudaDeviceSynchronize(), "after the mismatch");
        cuda_ok(cudaMemcpy(r.host, r.db, r.cap, cudaMemcpyDeviceToHost), "download");
        size_t written = 0, first = 0;
        for (size_t b = r.cap; b-- > 0;)
            if (((const unsigned char *)r.host)[b] != 0x5a) {
                written++;
                first = b;
            }
        CHECK(written == 0,
              "mismatch %s: rank %d: %zu bytes of recvbuf written after the mismatch (first at "
              "byte %zu)",
              mismatch_names[s], rank, written, first);
        printf("mismatch %d status %d\n", s, (int)st);
        uint64_t t0 = cc_now_ms();
        comm_destroy(r.comm);
        CHECK(cc_now_ms() - t0 < 15000, "mismatch: comm_destroy took %llu ms",
              (unsigned long long)(cc_now_ms() - t0));
    }
    for (int s = 0; config == 0 && s < N_LONELY; s++) {
        r.comm =
            cc_init_comm(rank, nranks, r.device, argv[7 + N_MISMATCH + s], cc_lonely_timeout_ms(s));
        bool ok = cc_lonely_call(&r, s);
        uint64_t t0 = cc_now_ms();
        comm_destroy(r.comm);
        CHECK(cc_now_ms() - t0 < 15000, "%s: comm_destroy took %llu ms", lonely_names[s],
              (unsigned long long)(cc_now_ms() - t0));
        printf("lonely %d ok %d\n", s, ok ? 1 : 0);
    }
    cc_rank_free(&r);
    return g_fail ? 1 : 0;
}

static void test_processes(const char *self, int nranks, int config)
{
    int before = g_fail;
    uint64_t seed = (uint64_t)time(NULL) * 31 + (uint64_t)config;
    comm_id_t ids[N_IDS];
    for (int i = 0; i < N_IDS; i++)
        comm_id_new(&ids[i]);
    static struct ccase cases[MAX_CASES];
    size_t ncases = cc_make_cases(cases, nranks, seed);
    cc_config_env(config);
    FILE *out[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        char cmd[1024];
        int len = snprintf(cmd, sizeof(cmd), "%s --child %d %d %d %llu", self, config, r, nranks,
                           (unsigned long long)seed);
        for (int i = 0; i < N_IDS; i++)
            len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " %s", ids[i].str);
        out[r] = popen(cmd, "r");
        CHECK(out[r] != NULL, "popen: %s", strerror(errno));
        if (out[r] == NULL)
            return;
    }
    cc_config_env(0);
    static char lines[MAX_RANKS][MAX_CASES + N_MISMATCH + N_LONELY][96];
    int nlonely = config == 0 ? N_LONELY : 0;
    int nl[MAX_RANKS] = {0};
    for (int r = 0; r < nranks; r++) {
        while (nl[r] < MAX_CASES + N_MISMATCH + N_LONELY &&
               fgets(lines[r][nl[r]], sizeof(lines[r][0]), out[r]))
            nl[r]++;
        int st = pclose(out[r]);
        CHECK(st == 0, "process rank %d exited with %d", r, st);
    }
    for (int r = 0; r < nranks; r++) {
        CHECK(nl[r] == (int)ncases + N_MISMATCH + nlonely,
              "process rank %d reported %d of %zu lines", r, nl[r],
              ncases + N_MISMATCH + (size_t)nlonely);
        for (int s = 0; s < nlonely; s++) {
            const char *l = (int)ncases + N_MISMATCH + s < nl[r]
                                ? lines[r][ncases + N_MISMATCH + (size_t)s]
                                : "";
            CHECK(strstr(l, " ok 1") != NULL, "process rank %d, %s: %s", r, lonely_names[s], l);
        }
        for (int i = 0; i < nl[r] && i < (int)ncases; i++) {
            char what[160];
            cc_describe(&cases[i], what, sizeof(what));
            CHECK(strstr(lines[r][i], "wrong 0 ") != NULL, "process rank %d, %s: %s", r, what,
                  lines[r][i]);
            if (cc_same_everywhere(cases[i].kind))
                CHECK(strcmp(lines[r][i], lines[0][i]) == 0,
                      "process ranks 0 and %d differ in %s: %s / %s", r, what, lines[0][i],
                      lines[r][i]);
        }
    }
    for (int s = 0; s < N_MISMATCH; s++) {
        int mismatch = 0;
        for (int r = 0; r < nranks; r++) {
            const char *l = (int)ncases + s < nl[r] ? lines[r][ncases + (size_t)s] : "";
            char want[32];
            snprintf(want, sizeof(want), "status %d\n", (int)COMM_ERR_MISMATCH);
            mismatch += strstr(l, want) != NULL;
        }
        CHECK(mismatch > 0, "mismatch %s: no rank reported COMM_ERR_MISMATCH", mismatch_names[s]);
    }
    printf("%s process ranks: %d processes on %d GPU%s, %s: %zu cases, %d mismatches, %d calls "
           "no peer makes\n",
           g_fail == before ? "ok  " : "FAIL", nranks, g_ndev, g_ndev == 1 ? "" : "s",
           config_names[config], ncases, N_MISMATCH, nlonely);
}

/* ---- thread ranks (a GPU each) ---- */

struct tjob {
    int nranks, config, timeout_ms, scenario;
    struct rank r[MAX_RANKS];
    const struct ccase *cases;
    size_t ncases;
    long wrong[MAX_RANKS];
    uint64_t hash[MAX_CASES][MAX_RANKS];
};

static void *init_thread(void *arg)
{
    struct rank *r = arg;
    struct tjob *j = (struct tjob *)((char *)(r - r->rank) - offsetof(struct tjob, r));
    r->comm = cc_init_comm(r->rank, r->nranks, r->device, r->id, j->timeout_ms);
    return NULL;
}

static void tjob_init(struct tjob *j, int nranks, int config, const struct ccase *cases, size_t n,
                      int timeout_ms)
{
    memset(j, 0, sizeof(*j));
    j->nranks = nranks;
    j->timeout_ms = timeout_ms;
    j->config = config;
    j->cases = cases;
    j->ncases = n;
    comm_id_t id;
    comm_id_new(&id);
    cc_config_env(config);
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        j->r[r] = (struct rank){.rank = r, .nranks = nranks, .device = r % g_ndev};
        cc_rank_alloc(&j->r[r], cc_cap_for(cases, n, nranks));
        j->r[r].id = id.str;
    }
    for (int r = 0; r < nranks; r++)
        pthread_create(&t[r], NULL, init_thread, &j->r[r]);
    for (int r = 0; r < nranks; r++)
        pthread_join(t[r], NULL);
    cc_config_env(0);
}

static void tjob_destroy(struct tjob *j)
{
    for (int r = 0; r < j->nranks; r++) {
        comm_status_t st = comm_destroy(j->r[r].comm);
        CHECK(st == COMM_OK, "comm_destroy rank %d: %s", r, comm_status_string(st));
        cc_rank_free(&j->r[r]);
    }
}

static void *case_thread(void *arg)
{
    struct rank *r = arg;
    struct tjob *j = (struct tjob *)((char *)(r - r->rank) - offsetof(struct tjob, r));
    cc_check_unsupported(r);
    for (size_t i = 0; i < j->ncases; i++) {
        cc_stage(r, &j->cases[i]);
        comm_status_t st = cc_enqueue(r, &j->cases[i]);
        CHECK(st == COMM_OK, "rank %d: case %zu: %s: %s", r->rank, i, comm_status_string(st),
              comm_last_error(r->comm));
        if (st != COMM_OK) {
            free(r->input);
            break;
        }
        j->wrong[r->rank] += cc_check(r, &j->cases[i], j->config, &j->hash[i][r->rank]);
    }
    return NULL;
}

/* mode 0: a thread per rank; 1: one thread, rank 0 first; 2: one thread, last rank first. */
static void test_threads(int nranks, int config, int mode)
{
    int before = g_fail;
    static struct ccase cases[MAX_CASES];
    size_t n = cc_make_cases(cases, nranks, (uint64_t)time(NULL) * 17 + (uint64_t)mode);
    struct tjob *j = calloc(1, sizeof(*j));
    tjob_init(j, nranks, config, cases, n, 30000);
    if (mode == 0) {
        pthread_t t[MAX_RANKS];
        for (int r = 0; r < nranks; r++)
            pthread_create(&t[r], NULL, case_thread, &j->r[r]);
        for (int r = 0; r < nranks; r++)
            pthread_join(t[r], NULL);
    } else {
        for (int r = 0; r < nranks; r++)
            cc_check_unsupported(&j->r[r]);
        for (size_t i = 0; i < n; i++) {
            for (int r = 0; r < nranks; r++)
                cc_stage(&j->r[r], &cases[i]);
            bool ok = true;
            for (int q = 0; q < nranks; q++) {
                int r = mode == 2 ? nranks - 1 - q : q;
                comm_status_t st = cc_enqueue(&j->r[r], &cases[i]);
                CHECK(st == COMM_OK, "rank %d: case %zu: %s: %s", r, i, comm_status_string(st),
                      comm_last_error(j->r[r].comm));
                ok = ok && st == COMM_OK;
            }
            for (int r = 0; r < nranks; r++) {
                if (ok)
                    j->wrong[r] += cc_check(&j->r[r], &cases[i], config, &j->hash[i][r]);
                else
                    free(j->r[r].input);
            }
            if (!ok)
                break;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (int r = 1; r < nranks; r++)
            CHECK(!cc_same_everywhere(cases[i].kind) || j->hash[i][r] == j->hash[i][0],
                  "case %zu (%s): rank %d's output differs from rank 0's", i,
                  kind_names[cases[i].kind], r);
    tjob_destroy(j);
    free(j);
    printf("%s thread ranks: %d on %d GPUs, %s, %s: %zu cases\n",
           g_fail == before ? "ok  " : "FAIL", nranks, g_ndev,
           mode == 0   ? "a thread per rank"
           : mode == 1 ? "one thread, rank 0 first"
                       : "one thread, last rank first",
           config_names[config], n);
}

static void test_thread_mismatch(int nranks)
{
    int before = g_fail;
    static const struct ccase none[1] = {{.kind = K_ALLTOALL, .dtype = COMM_F32, .count = 300007}};
    for (int s = 0; s < N_MISMATCH; s++) {
        struct tjob *j = calloc(1, sizeof(*j));
        tjob_init(j, nranks, 0, none, 1, 5000);
        for (int r = 0; r < nranks; r++) {
            comm_status_t st = cc_mismatch_call(&j->r[r], s);
            /* A later rank may already hear of the disagreement. */
            CHECK(st == COMM_OK || (r > 1 && (st == COMM_ERR_PEER || st == COMM_ERR_MISMATCH)),
                  "mismatch %s: rank %d's call returned %s", mismatch_names[s], r,
                  comm_status_string(st));
        }
        int mismatch = 0;
        for (int r = 0; r < nranks; r++) {
            comm_status_t st = cc_mismatch_outcome(&j->r[r]);
            mismatch += st == COMM_ERR_MISMATCH;
            if (r == 0)
                printf("     %s: %s: %s\n", mismatch_names[s], comm_status_string(st),
                       comm_last_error(j->r[r].comm));
        }
        CHECK(mismatch > 0, "mismatch %s: no rank reported COMM_ERR_MISMATCH", mismatch_names[s]);
        uint64_t t0 = cc_now_ms();
        tjob_destroy(j);
        free(j);
        CHECK(cc_now_ms() - t0 < 15000, "mismatch: comm_destroy took %llu ms",
              (unsigned long long)(cc_now_ms() - t0));
    }
    printf("%s mismatched collectives and roots (%d scenarios, thread ranks)\n",
           g_fail == before ? "ok  " : "FAIL", N_MISMATCH);
}

static void *lonely_thread(void *arg)
{
    struct rank *r = arg;
    struct tjob *j = (struct tjob *)((char *)(r - r->rank) - offsetof(struct tjob, r));
    cc_lonely_call(r, j->scenario);
    return NULL;
}

static void test_thread_lonely(int nranks)
{
    int before = g_fail;
    static const struct ccase none[1] = {{.kind = K_ALLTOALL, .dtype = COMM_F32, .count = 300007}};
    for (int s = 0; s < N_LONELY; s++) {
        struct tjob *j = calloc(1, sizeof(*j));
        tjob_init(j, nranks, 0, none, 1, cc_lonely_timeout_ms(s));
        j->scenario = s;
        pthread_t t[MAX_RANKS];
        for (int r = 0; r < nranks; r++)
            pthread_create(&t[r], NULL, lonely_thread, &j->r[r]);
        for (int r = 0; r < nranks; r++)
            pthread_join(t[r], NULL);
        uint64_t t0 = cc_now_ms();
        tjob_destroy(j);
        free(j);
        CHECK(cc_now_ms() - t0 < 15000, "%s: comm_destroy took %llu ms", lonely_names[s],
              (unsigned long long)(cc_now_ms() - t0));
    }
    printf("%s calls no peer makes end at the timeout and at comm_abort (thread ranks)\n",
           g_fail == before ? "ok  " : "FAIL");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && strcmp(argv[1], "--child") == 0)
        return child_main(argc, argv);
    cudaError_t e = cudaGetDeviceCount(&g_ndev);
    if (e != cudaSuccess || g_ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return SKIP;
    }
    if (!comm_broadcast || !comm_reduce || !comm_allgather || !comm_reduce_scatter ||
        !comm_alltoall) {
        printf("FAIL: this libarcomm lacks comm_broadcast/reduce/allgather/reduce_scatter/"
               "alltoall (runtime/collective.c)\n");
        return 1;
    }
    const char *only = getenv("ARCOMM_TEST_ONLY");
    bool all = only == NULL;
    int nthreads = g_ndev > MAX_RANKS ? MAX_RANKS : g_ndev;
    printf("%d CUDA device%s, transport %s\n", g_ndev, g_ndev == 1 ? "" : "s", transport_label());
    if (all || strstr(only, "proc")) {
        const char *want = getenv("ARCOMM_TEST_RANKS");
        int n = want ? atoi(want) : 0;
        if (n >= 2 && n <= MAX_RANKS) {
            for (int config = 0; config < N_CONFIGS; config++)
                test_processes(argv[0], n, config);
        } else {
            test_processes(argv[0], 2, 0);
            test_processes(argv[0], 3, 1);
            test_processes(argv[0], 2, 2);
        }
    }
    if (nthreads < 2) {
        printf("SKIP thread ranks: %d GPU (thread ranks need a GPU each)\n", g_ndev);
    } else {
        if (all || strstr(only, "threads")) {
            test_threads(nthreads, 0, 0);
            test_threads(nthreads, 1, 1);
            test_threads(nthreads, 2, 2);
        }
        if (all || strstr(only, "fail")) {
            test_thread_mismatch(nthreads);
            test_thread_lonely(nthreads);
        }
    }
    printf("%s: %d failure%s\n", g_fail ? "FAIL" : "PASS", g_fail, g_fail == 1 ? "" : "s");
    return g_fail ? 1 : 0;
}
