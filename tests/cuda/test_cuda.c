/* SPDX-License-Identifier: MIT */
/*
 * CUDA transport tests (need a GPU; exit 77 = skipped when none is found).
 *
 * Every case draws fresh random inputs, poisons the outputs, and checks every element
 * twice: bit for bit against a host emulation of the contract (each rank's value
 * rounded through the wire type, summed in f32 in rank order, addend added, rounded
 * once), and against a float64 reference within the dtype's bound.  Every rank must
 * hold the same bits.  Ranks are threads (each enqueueing its own calls), one thread
 * enqueueing every rank in turn (both orders), and processes (this program again).
 *
 *   test_cuda                  all of it (ARCOMM_TEST_ONLY=sweep,fail,proc: parts;
 *                              ARCOMM_TEST_RANKS=N: N ranks, rank r on GPU r % GPUs)
 *   test_cuda --child R N ID   one process rank (used by the process test)
 */
#include "arcomm.h"
#include "cuda_harness.h"
#include "transport_check.h"
#include "wire.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the case list ---- */

#define MAX_CASES 160

/* Calls of at least codec_from bytes travel in codec (a block codec, or 0: none). */
static size_t make_cases(struct kase *out, uint64_t seed, size_t bf16_from, size_t max_count,
                         int codec, size_t codec_from)
{
    static const size_t counts[] = {1,    2,     7,     8,      9,      33,      1000,
                                    4095, 16384, 65537, 262147, 300000, 1048583, 3000001};
    static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16};
    size_t n = 0;
    for (size_t d = 0; d < 3; d++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            if (counts[c] > max_count)
                continue;
            struct kase k = {
                .dtype = dtypes[d],
                .count = counts[c],
                .inplace = (c + d) % 2 == 1,
                .offset = (c % 3 == 2) ? 1 : 0,
                .addend_count = 0,
                .seed = seed + n * 31 + 7,
            };
            /* f32 from bf16_from bytes travels as bf16 (default knobs: 1 MiB). */
            k.narrow = k.dtype == COMM_F32 && k.count * 4 >= bf16_from;
            k.codec = codec != 0 && k.count * esize(k.dtype) >= codec_from ? codec : 0;
            out[n++] = k;
            if (c % 4 == 1 && n < MAX_CASES) {
                struct kase a = k;
                a.addend_count = k.count; /* residual */
                a.seed += 3;
                out[n++] = a;
            } else if (c % 4 == 3 && k.count % 3 == 0 && n < MAX_CASES) {
                struct kase a = k;
                a.addend_count = k.count / 3; /* bias row */
                a.seed += 5;
                out[n++] = a;
            }
        }
    }
    return n;
}

/* ---- sweeps under several knob settings ---- */

/* ARCOMM_WIRE and ARCOMM_WIRE_THRESHOLD of the next sweep (NULL: unset). */
static const char *g_wire, *g_wire_threshold;

static void knob_env(const char *copy, const char *bf16, const char *chunk)
{
    unsetenv("ARCOMM_COPY_THRESHOLD");
    unsetenv("ARCOMM_BF16_THRESHOLD");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    unsetenv("ARCOMM_WIRE");
    unsetenv("ARCOMM_WIRE_THRESHOLD");
    if (g_wire)
        setenv("ARCOMM_WIRE", g_wire, 1);
    if (g_wire_threshold)
        setenv("ARCOMM_WIRE_THRESHOLD", g_wire_threshold, 1);
    if (copy)
        setenv("ARCOMM_COPY_THRESHOLD", copy, 1);
    if (bf16)
        setenv("ARCOMM_BF16_THRESHOLD", bf16, 1);
    if (chunk)
        setenv("ARCOMM_COPY_CHUNK_BYTES", chunk, 1);
}

static void sweep_codec(int nranks, const char *name, const char *copy, const char *bf16,
                        const char *chunk, size_t bf16_from, int mode, int codec, size_t codec_from)
{
    static struct kase cases[MAX_CASES];
    /* One rank's allreduce is exact whatever ARCOMM_BF16_THRESHOLD says: nothing travels. */
    size_t n = make_cases(cases, (uint64_t)time(NULL) ^ (uint64_t)mode << 20,
                          nranks == 1 ? SIZE_MAX : bf16_from, 3000001, codec,
                          nranks == 1 ? SIZE_MAX : codec_from);
    int before = g_fail;
    knob_env(copy, bf16, chunk);
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 20000, (3000001 + 64) * 4);
    g_wire = g_wire_threshold = NULL;
    knob_env(NULL, NULL, NULL);
    if (mode == 0)
        run_threads(j, cases, n);
    else
        run_single_thread(j, cases, n, mode == 2);
    job_destroy(j);
    free(j);
    printf("%s %s: %zu cases, %d ranks (%s)\n", g_fail == before ? "ok  " : "FAIL", name, n, nranks,
           mode == 0   ? "a thread per rank"
           : mode == 1 ? "one thread, rank 0 first"
                       : "one thread, last rank first");
    fflush(stdout);
}

static void sweep(int nranks, const char *name, const char *copy, const char *bf16,
                  const char *chunk, size_t bf16_from, int mode)
{
    sweep_codec(nranks, name, copy, bf16, chunk, bf16_from, mode, 0, SIZE_MAX);
}

/* cuda-p2p has no block-codec kernels yet: it runs int8 and fp8 calls at full width. */
static bool p2p_full_width(void)
{
    return strcmp(transport_label(), "cuda-p2p") == 0;
}

/* ARCOMM_WIRE=wire from threshold (NULL: auto) on f32, f16 and bf16: the copy path encodes
 * (at codec_from bytes and more, where it runs); the kernel path runs at full width.  Every
 * element is checked bit for bit against the rank-order f32 sum of the decoded inputs
 * and against float64 within docs/wire.md's bound. */
static void sweep_wire(int nranks, const char *name, const char *wire, const char *threshold,
                       const char *copy, const char *chunk, size_t codec_from, int mode)
{
    g_wire = wire;
    g_wire_threshold = threshold;
    sweep_codec(nranks, name, copy, NULL, chunk, SIZE_MAX, mode,
                strcmp(wire, "int8") == 0 ? WIRE_INT8 : WIRE_FP8,
                p2p_full_width() ? SIZE_MAX : codec_from);
}

/* ---- failures ---- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Rank 0 calls, the others never do: its GPU gives up, the next call says why. */
static void test_timeout(int nranks, size_t count)
{
    int before = g_fail;
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 500, count * 4 + 64);
    struct kase k = {.dtype = COMM_F32, .count = count, .seed = 99};
    void *send, *recv, *add;
    stage_case(&j->r[0], &k, NULL, &send, &recv, &add);
    uint64_t t0 = now_ms();
    comm_status_t st = enqueue(&j->r[0], &k, send, recv, add);
    CHECK(st == COMM_OK, "timeout: enqueue: %s", comm_status_string(st));
    cuda_ok(cudaStreamSynchronize(j->r[0].stream), "sync after a timed-out call");
    uint64_t took = now_ms() - t0;
    CHECK(took < 5000, "timeout: the GPU waited %llu ms (timeout 500 ms)",
          (unsigned long long)took);
    st = enqueue(&j->r[0], &k, send, recv, add);
    const char *msg = comm_last_error(j->r[0].comm);
    CHECK(st == COMM_ERR_TIMEOUT, "timeout: next call returned %s (%s)", comm_status_string(st),
          msg);
    CHECK(strstr(msg, "rank 1") != NULL && strstr(msg, "path") != NULL,
          "timeout: message names no rank or stage: %s", msg);
    printf("     timeout (count %zu): %llu ms, next call: %s: %s\n", count,
           (unsigned long long)took, comm_status_string(st), msg);
    /* A peer now sees the failure without waiting. */
    stage_case(&j->r[1], &k, NULL, &send, &recv, &add);
    st = enqueue(&j->r[1], &k, send, recv, add);
    if (st == COMM_OK) {
        cudaStreamSynchronize(j->r[1].stream);
        st = enqueue(&j->r[1], &k, send, recv, add);
    }
    CHECK(st == COMM_ERR_PEER || st == COMM_ERR_TIMEOUT, "timeout: peer got %s",
          comm_status_string(st));
    t0 = now_ms();
    job_destroy(j);
    free(j);
    CHECK(now_ms() - t0 < 15000, "timeout: comm_destroy took %llu ms",
          (unsigned long long)(now_ms() - t0));
    printf("%s timeout and peer failure, count %zu\n", g_fail == before ? "ok  " : "FAIL", count);
}

struct abort_arg {
    comm_t *comm;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct abort_arg *a = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)a->delay_ms * 1000000};
    nanosleep(&ts, NULL);
    comm_abort(a->comm);
    return NULL;
}

static void test_abort(int nranks, size_t count)
{
    int before = g_fail;
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 60000, count * 4 + 64);
    struct kase k = {.dtype = COMM_F32, .count = count, .seed = 98};
    void *send, *recv, *add;
    stage_case(&j->r[0], &k, NULL, &send, &recv, &add);
    uint64_t t0 = now_ms();
    comm_status_t st = enqueue(&j->r[0], &k, send, recv, add);
    CHECK(st == COMM_OK, "abort: enqueue: %s", comm_status_string(st));
    pthread_t t;
    struct abort_arg a = {.comm = j->r[0].comm, .delay_ms = 200};
    pthread_create(&t, NULL, abort_later, &a);
    cuda_ok(cudaStreamSynchronize(j->r[0].stream), "sync after abort");
    uint64_t took = now_ms() - t0;
    pthread_join(t, NULL);
    CHECK(took < 5000, "abort: the GPU kept waiting %llu ms", (unsigned long long)took);
    st = enqueue(&j->r[0], &k, send, recv, add);
    CHECK(st == COMM_ERR_ABORTED, "abort: next call returned %s (%s)", comm_status_string(st),
          comm_last_error(j->r[0].comm));
    stage_case(&j->r[1], &k, NULL, &send, &recv, &add);
    st = enqueue(&j->r[1], &k, send, recv, add);
    if (st == COMM_OK) {
        cudaStreamSynchronize(j->r[1].stream);
        st = enqueue(&j->r[1], &k, send, recv, add);
    }
    CHECK(st == COMM_ERR_PEER, "abort: peer got %s (%s)", comm_status_string(st),
          comm_last_error(j->r[1].comm));
    job_destroy(j);
    free(j);
    printf("%s abort while the GPU waits (%llu ms), count %zu\n",
           g_fail == before ? "ok  " : "FAIL", (unsigned long long)took, count);
}

static void test_mismatch(int nranks, size_t count)
{
    int before = g_fail;
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 5000, count * 8 + 64);
    for (int r = 0; r < nranks; r++) {
        struct kase k = {.dtype = COMM_F32, .count = r == 0 ? count : count + 8, .seed = 97};
        void *send, *recv, *add;
        stage_case(&j->r[r], &k, NULL, &send, &recv, &add);
        comm_status_t st = enqueue(&j->r[r], &k, send, recv, add);
        /* With more than two ranks a later rank may already hear of the disagreement. */
        CHECK(st == COMM_OK || (r > 1 && (st == COMM_ERR_PEER || st == COMM_ERR_MISMATCH)),
              "mismatch: rank %d's enqueue: %s", r, comm_status_string(st));
    }
    for (int r = 0; r < nranks; r++) {
        cuda_ok(cudaSetDevice(j->r[r].device), "set");
        cuda_ok(cudaStreamSynchronize(j->r[r].stream), "sync");
    }
    for (int r = 0; r < nranks; r++) {
        comm_status_t st = comm_barrier(j->r[r].comm);
        CHECK(st == COMM_ERR_MISMATCH || st == COMM_ERR_PEER,
              "mismatch: rank %d's next call returned %s (%s)", r, comm_status_string(st),
              comm_last_error(j->r[r].comm));
        if (r == 0)
            printf("     mismatch: %s: %s\n", comm_status_string(st),
                   comm_last_error(j->r[r].comm));
    }
    job_destroy(j);
    free(j);
    printf("%s mismatched counts (%zu vs %zu)\n", g_fail == before ? "ok  " : "FAIL", count,
           count + 8);
}

static void test_unsupported(int nranks)
{
    int before = g_fail;
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 5000, 4096);
    /* Every dtype and op is there but AVG of an integer type, which no device has. */
    for (int r = 0; r < nranks; r++) {
        comm_status_t st = comm_allreduce(j->r[r].comm, j->r[r].dbuf, j->r[r].drecv, 16, COMM_I32,
                                          COMM_AVG, j->r[r].stream);
        CHECK(st == COMM_ERR_UNSUPPORTED, "i32 avg: rank %d got %s", r, comm_status_string(st));
        st = comm_allreduce(j->r[r].comm, j->r[r].dbuf, j->r[r].drecv, 16, COMM_U8, COMM_AVG,
                            j->r[r].stream);
        CHECK(st == COMM_ERR_UNSUPPORTED, "u8 avg: rank %d got %s", r, comm_status_string(st));
    }
    job_destroy(j);
    free(j);
    printf("%s integer AVG is COMM_ERR_UNSUPPORTED on every rank\n",
           g_fail == before ? "ok  " : "FAIL");
}

/* A call that cannot join a running capture (the legacy stream, while a blocking stream
 * is captured) is COMM_ERR_UNSUPPORTED on every rank, and nothing breaks.  Graph capture
 * itself: test_cuda_graph. */
static void test_capture(int nranks)
{
    int before = g_fail;
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 5000, 4096 * 4);
    for (int p = 0; p < nranks; p++) {
        struct rank_ctx *r = &j->r[p];
        cuda_ok(cudaSetDevice(r->device), "set");
        cudaStream_t b;
        cuda_ok(cudaStreamCreate(&b), "stream");
        cuda_ok(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed), "capture");
        comm_status_t st =
            comm_allreduce(r->comm, r->dbuf, r->drecv, 1000, COMM_F32, COMM_SUM, NULL);
        cudaGraph_t g = NULL;
        (void)cudaStreamEndCapture(b, &g);
        if (g != NULL)
            cudaGraphDestroy(g);
        cudaStreamDestroy(b);
        (void)cudaGetLastError();
        CHECK(st == COMM_ERR_UNSUPPORTED && strstr(comm_last_error(r->comm), "capture") != NULL,
              "capture: rank %d got %s (%s)", p, comm_status_string(st), comm_last_error(r->comm));
        if (p == 0)
            printf("     capture: %s\n", comm_last_error(r->comm));
    }
    struct kase k = {.dtype = COMM_F32, .count = 1000, .seed = 99};
    run_single_thread(j, &k, 1, false);
    job_destroy(j);
    free(j);
    printf("%s a call that cannot join a capture is refused alike, the communicator stays usable\n",
           g_fail == before ? "ok  " : "FAIL");
}

/* ---- a GPU per thread rank ---- */

/* Thread ranks of one process on one GPU are refused at init, on every rank alike. */
struct dup_arg {
    comm_id_t id;
    int rank;
    comm_status_t st;
    char msg[512];
};

static void *dup_init(void *arg)
{
    struct dup_arg *d = arg;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = 2;
    cfg.rank = d->rank;
    cfg.id = d->id;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = 0;
    cfg.timeout_ms = 5000;
    comm_t *c = NULL;
    d->st = comm_init(&c, &cfg);
    snprintf(d->msg, sizeof(d->msg), "%s", comm_last_error(NULL));
    if (d->st == COMM_OK)
        comm_destroy(c);
    return NULL;
}

static void test_shared_gpu(void)
{
    int before = g_fail;
    struct dup_arg d[2];
    pthread_t t[2];
    memset(d, 0, sizeof(d));
    if (comm_id_new(&d[0].id) != COMM_OK) {
        CHECK(0, "comm_id_new");
        return;
    }
    for (int r = 0; r < 2; r++) {
        d[r].id = d[0].id;
        d[r].rank = r;
        pthread_create(&t[r], NULL, dup_init, &d[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 2; r++)
        CHECK(d[r].st == COMM_ERR_INVALID && strstr(d[r].msg, "same GPU") != NULL,
              "two thread ranks on GPU 0: rank %d got %s (%s)", r, comm_status_string(d[r].st),
              d[r].msg);
    printf("     shared GPU: %s\n", d[0].msg);
    printf("%s two thread ranks on one GPU are refused at init on both\n",
           g_fail == before ? "ok  " : "FAIL");
}

/* ---- process ranks ---- */

static const size_t proc_counts[] = {5, 4096, 65536 + 3, 300000, 2000003};

static int child_main(int rank, int nranks, const char *id)
{
    cudaGetDeviceCount(&g_ndev);
    struct rank_ctx r = {.rank = rank, .nranks = nranks, .device = rank % g_ndev};
    rank_alloc(&r, 2000003 * 4 + 64);
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = r.device;
    comm_status_t st = comm_init(&r.comm, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "child %d: comm_init: %s\n", rank, comm_last_error(NULL));
        return 1;
    }
    transport_check(r.comm, rank);
    /* test_processes_wire: ARCOMM_WIRE=int8 or fp8 with both thresholds 0 (every call
     * encoded on the copy path, f32, f16 and bf16). */
    int codec = env_codec();
    bool block = codec == WIRE_INT8 || codec == WIRE_FP8;
    for (size_t c = 0; c < sizeof(proc_counts) / sizeof(proc_counts[0]); c++) {
        static const comm_dtype_t three[] = {COMM_F32, COMM_F16, COMM_BF16};
        struct kase k = {.dtype = block   ? three[c % 3]
                                  : c % 2 ? COMM_BF16
                                          : COMM_F32,
                         .count = proc_counts[c],
                         .inplace = c % 2,
                         .seed = 4242 + c};
        k.narrow = !block && k.dtype == COMM_F32 && k.count * 4 >= (1u << 20);
        k.codec = block && !p2p_full_width() ? codec : 0;
        void *send, *recv, *add;
        stage_case(&r, &k, NULL, &send, &recv, &add);
        st = enqueue(&r, &k, send, recv, add);
        if (st != COMM_OK) {
            fprintf(stderr, "child %d: %s\n", rank, comm_last_error(r.comm));
            return 1;
        }
        fetch(&r, &k, recv);
        void *inputs[MAX_RANKS];
        for (int p = 0; p < nranks; p++) {
            inputs[p] = malloc(k.count * esize(k.dtype));
            fill(inputs[p], k.count, k.dtype, input_seed(&k, p));
        }
        struct expect e;
        make_expect(&k, nranks, inputs, NULL, &e);
        long wrong = check_output(&k, rank, r.hout, &e);
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < k.count * esize(k.dtype); i++)
            h = (h ^ ((const uint8_t *)r.hout)[i]) * 0x100000001b3ull;
        printf("case %zu wrong %ld hash %016llx\n", c, wrong, (unsigned long long)h);
        for (int p = 0; p < nranks; p++)
            free(inputs[p]);
        free_expect(&e);
    }
    comm_destroy(r.comm);
    rank_free(&r);
    return 0;
}

static void test_processes(int nranks, const char *self, const char *wire)
{
    /* The children inherit the codec, on every call's copy path. */
    if (wire != NULL) {
        setenv("ARCOMM_WIRE", wire, 1);
        setenv("ARCOMM_WIRE_THRESHOLD", "0", 1);
        setenv("ARCOMM_COPY_THRESHOLD", "0", 1);
    }
    int before = g_fail;
    comm_id_t id;
    comm_id_new(&id);
    FILE *out[MAX_RANKS];
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s --child %d %d %s", self, r, nranks, id.str);
        out[r] = popen(cmd, "r");
        pids[r] = 0;
        CHECK(out[r] != NULL, "popen: %s", strerror(errno));
    }
    char lines[MAX_RANKS][8][128];
    int nl[MAX_RANKS] = {0};
    for (int r = 0; r < nranks; r++) {
        while (nl[r] < 8 && fgets(lines[r][nl[r]], sizeof(lines[r][0]), out[r]))
            nl[r]++;
        int st = pclose(out[r]);
        CHECK(st == 0, "process rank %d exited with %d", r, st);
    }
    (void)pids;
    size_t ncases = sizeof(proc_counts) / sizeof(proc_counts[0]);
    for (int r = 0; r < nranks; r++) {
        CHECK(nl[r] == (int)ncases, "process rank %d reported %d of %zu cases", r, nl[r], ncases);
        for (int i = 0; i < nl[r]; i++) {
            CHECK(strstr(lines[r][i], "wrong 0 ") != NULL, "process rank %d: %s", r, lines[r][i]);
            CHECK(strcmp(lines[r][i], lines[0][i]) == 0, "process ranks 0 and %d differ: %s / %s",
                  r, lines[0][i], lines[r][i]);
        }
    }
    if (wire != NULL) {
        unsetenv("ARCOMM_WIRE");
        unsetenv("ARCOMM_WIRE_THRESHOLD");
        unsetenv("ARCOMM_COPY_THRESHOLD");
    }
    printf("%s process ranks (%d processes, %zu cases, bit-identical%s%s)\n",
           g_fail == before ? "ok  " : "FAIL", nranks, ncases, wire ? ", wire " : "",
           wire ? wire : "");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 5 && strcmp(argv[1], "--child") == 0)
        return child_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
    cudaError_t e = cudaGetDeviceCount(&g_ndev);
    if (e != cudaSuccess || g_ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return SKIP;
    }
    const char *only = getenv("ARCOMM_TEST_ONLY");
    int nranks = g_ndev < 2 ? 2 : g_ndev > MAX_RANKS ? MAX_RANKS : g_ndev;
    /* More ranks than GPUs (rank r on GPU r % GPUs) run the N-rank code on a small host. */
    const char *want = getenv("ARCOMM_TEST_RANKS");
    if (want != NULL && atoi(want) >= 2 && atoi(want) <= MAX_RANKS)
        nranks = atoi(want);
    printf("%d CUDA device%s, %d ranks, transport %s\n", g_ndev, g_ndev == 1 ? "" : "s", nranks,
           transport_label());
    bool all = only == NULL;
    /* Thread ranks need a GPU each (test_shared_gpu); process ranks may share. */
    bool threads = nranks <= g_ndev;
    if (!threads)
        printf("SKIP thread-rank sweeps and failure tests: %d ranks on %d GPU%s (thread ranks "
               "need a GPU each); process ranks still run\n",
               nranks, g_ndev, g_ndev == 1 ? "" : "s");
    if (all || strstr(only, "fail"))
        test_shared_gpu();
    if (threads && (all || strstr(only, "sweep"))) {
        const size_t mib = 1u << 20, never = SIZE_MAX;
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 0);
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 1);
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 2);
        sweep(nranks, "bf16 off", NULL, "off", NULL, never, 0);
        sweep(nranks, "kernel path only (multi-round)", "off", "off", NULL, never, 1);
        sweep(nranks, "kernel path only, bf16 everywhere", "off", "0", NULL, 0, 0);
        sweep(nranks, "copy path only, 64 KiB chunks", "0", "off", "64K", never, 2);
        sweep(nranks, "copy path only, bf16 everywhere", "0", "0", NULL, 0, 0);
        sweep_wire(nranks, "copy path only, int8 everywhere, 64 KiB chunks", "int8", "0", "0",
                   "64K", 0, 0);
        sweep_wire(nranks, "copy path only, fp8 everywhere", "fp8", "0", "0", NULL, 0, 2);
        sweep_wire(nranks, "int8 from 1 MiB (default thresholds)", "int8", NULL, NULL, NULL, mib,
                   1);
        sweep_wire(nranks, "kernel path only, int8 asked (full width there)", "int8", "0", "off",
                   NULL, never, 0);
    }
    if (all || strstr(only, "sweep")) {
        /* One rank: no peer, the result straight from its own input (and the addend). */
        const size_t mib = 1u << 20, never = SIZE_MAX;
        sweep(1, "one rank, default knobs", NULL, NULL, NULL, mib, 0);
        sweep(1, "one rank, bf16 off", NULL, "off", NULL, never, 1);
        sweep(1, "one rank, bf16 everywhere", NULL, "0", NULL, 0, 0);
        sweep_wire(1, "one rank, int8 everywhere", "int8", "0", "0", NULL, never, 0);
    }
    if (threads && (all || strstr(only, "fail"))) {
        test_unsupported(nranks);
        test_timeout(nranks, 1000);
        test_timeout(nranks, 2000000);
        test_abort(nranks, 1000);
        test_abort(nranks, 2000000);
        test_mismatch(nranks, 1000);
        test_mismatch(nranks, 2000000);
        test_capture(nranks);
    }
    if (all || strstr(only, "proc")) {
        test_processes(nranks, argv[0], NULL);
        test_processes(nranks, argv[0], "int8");
        test_processes(nranks, argv[0], "fp8");
    }
    printf("%s: %d failure%s\n", g_fail ? "FAIL" : "PASS", g_fail, g_fail == 1 ? "" : "s");
    return g_fail ? 1 : 0;
}
