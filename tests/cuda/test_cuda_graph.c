/* SPDX-License-Identifier: MIT */
/*
 * CUDA graph capture of arcomm's collectives (needs a GPU; exit 77 = skipped without).
 * Process ranks, which may share one GPU (this program again, --child); then, where
 * there are two GPUs or more, the same with thread ranks of this process, a GPU each
 * (both graphs captured in thread-local mode there: a global-mode capture would forbid
 * the other rank's thread its unsafe calls).  With one GPU the thread part says SKIP.
 *
 * Two graphs on one communicator, captured once each (global and thread-local mode):
 *   G1: allreduce of 5 bf16 (kernel path), of 200003 f32 (kernel path, two rounds),
 *       of 300000 f32 (copy-engine path, bf16 on the wire: its buffer grows in the capture);
 *   G2: broadcast of 123457 i32 from rank 1, allgather of 50001 u8, reduce_scatter of
 *       40000 i32 per rank (sum, wrapping).
 * Then ARCOMM_TEST_REPLAYS rounds (default 100) of: an eager allreduce every fourth
 * round, G1 (launched on the capture stream or on a second stream, in turn), G2 every
 * third round.  Before every replay every input is drawn afresh (the graph's buffers are
 * fixed; their contents are not), every output is poisoned, and after it every element
 * is checked: bit for bit against a host emulation, against float64 for the floats,
 * exactly for the integers and bytes; every rank prints a hash of every output, and the
 * parent compares them.  Failure modes, each in processes of its own:
 *   timeout: rank 0 replays G1, rank 1 never does: rank 0's GPU gives up within the
 *            timeout, its next call says TIMEOUT;
 *   abort:   the same, with comm_abort from another thread of rank 0 while its GPU
 *            waits: the replay ends at once, the next call says ABORTED, rank 1 hears PEER;
 *   refuse:  a call on the legacy stream while a capture runs is COMM_ERR_UNSUPPORTED
 *            on every rank, and the communicator stays usable.
 *
 *   test_cuda_graph                     all of it (2 process ranks, then 2 thread ranks)
 *   test_cuda_graph --child R N ID MODE one process rank
 */
#include "arcomm.h"
#include "cuda_harness.h"
#include "transport_check.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NRANKS  2
#define BC_N    123457 /* broadcast, i32 */
#define BC_ROOT 1
#define AG_N    50001 /* allgather, u8 per rank */
#define RS_N    40000 /* reduce_scatter, i32 per rank */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random bytes of rank r for round seed: every rank can compute every rank's. */
static void fill_bytes(void *buf, size_t n, uint64_t seed, int r)
{
    uint8_t *b = buf;
    uint64_t s = mix(seed * 7919u + (uint64_t)r * 104729u + 17);
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0)
            s = mix(s);
        b[i] = (uint8_t)(s >> (8 * (i % 8)));
    }
}

/* ---- a rank's graph state ---- */

struct ar {        /* one allreduce of G1 (or an eager one), through the harness */
    struct kase k; /* seed moved on every round */
    struct rank_ctx r;
    void *send, *recv;
};

struct dm { /* G2's buffers: device and host */
    int32_t *bc_d, *rs_in_d, *rs_out_d;
    uint8_t *ag_in_d, *ag_out_d;
    int32_t *bc_h, *rs_in_h, *rs_out_h, *rs_ref;
    uint8_t *ag_in_h, *ag_out_h, *ag_ref;
};

struct child {
    int rank, nranks, device;
    bool threads; /* a thread rank: graphs captured in thread-local mode */
    comm_t *comm;
    cudaStream_t s, s2;
    struct ar a[3];
    struct dm d;
    uint64_t hash;
    long wrong;
    char out[4][256]; /* the result lines the parent checks */
    int nout;
};

/* A result line for the parent (stdout of a process rank, collected for a thread). */
static void say(struct child *ch, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct child *ch, const char *fmt, ...)
{
    if (ch->nout >= 4)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ch->out[ch->nout++], sizeof(ch->out[0]), fmt, ap);
    va_end(ap);
}

static void ar_init(struct child *ch, struct ar *a, comm_dtype_t t, size_t count, bool narrow)
{
    memset(a, 0, sizeof(*a));
    a->k = (struct kase){.dtype = t, .count = count, .inplace = false, .narrow = narrow};
    a->r.rank = ch->rank;
    a->r.nranks = ch->nranks;
    a->r.device = ch->device;
    a->r.comm = ch->comm;
    a->r.stream = ch->s;
    rank_alloc(&a->r, count * esize(t) + 64);
}

/* Fresh inputs and poison for round seed (the buffers stay where the graph has them). */
static void ar_stage(struct ar *a, uint64_t seed)
{
    void *add;
    a->k.seed = seed;
    stage_case(&a->r, &a->k, NULL, &a->send, &a->recv, &add);
}

static void ar_check(struct child *ch, struct ar *a, const char *what, uint64_t round)
{
    fetch(&a->r, &a->k, a->recv);
    void *inputs[MAX_RANKS];
    for (int p = 0; p < ch->nranks; p++) {
        inputs[p] = malloc(a->k.count * esize(a->k.dtype));
        fill(inputs[p], a->k.count, a->k.dtype, input_seed(&a->k, p));
    }
    struct expect e;
    make_expect(&a->k, ch->nranks, inputs, NULL, &e);
    long w = check_output(&a->k, ch->rank, a->r.hout, &e);
    if (w)
        fprintf(stderr, "  rank %d: %s, round %llu: %ld wrong\n", ch->rank, what,
                (unsigned long long)round, w);
    ch->wrong += w;
    ch->hash = fnv(ch->hash, a->r.hout, a->k.count * esize(a->k.dtype));
    for (int p = 0; p < ch->nranks; p++)
        free(inputs[p]);
    free_expect(&e);
}

static void dm_init(struct dm *d, int nranks)
{
    cuda_ok(cudaMalloc((void **)&d->bc_d, BC_N * 4), "malloc");
    cuda_ok(cudaMalloc((void **)&d->rs_in_d, (size_t)RS_N * nranks * 4), "malloc");
    cuda_ok(cudaMalloc((void **)&d->rs_out_d, RS_N * 4), "malloc");
    cuda_ok(cudaMalloc((void **)&d->ag_in_d, AG_N), "malloc");
    cuda_ok(cudaMalloc((void **)&d->ag_out_d, (size_t)AG_N * nranks), "malloc");
    d->bc_h = malloc(BC_N * 4);
    d->rs_in_h = malloc((size_t)RS_N * nranks * 4);
    d->rs_out_h = malloc(RS_N * 4);
    d->rs_ref = malloc(RS_N * 4);
    d->ag_in_h = malloc(AG_N);
    d->ag_out_h = malloc((size_t)AG_N * nranks);
    d->ag_ref = malloc((size_t)AG_N * nranks);
}

static void dm_stage(struct child *ch, uint64_t seed)
{
    struct dm *d = &ch->d;
    fill_bytes(d->bc_h, BC_N * 4, seed ^ 0xb0, ch->rank);
    fill_bytes(d->rs_in_h, (size_t)RS_N * ch->nranks * 4, seed ^ 0x25, ch->rank);
    fill_bytes(d->ag_in_h, AG_N, seed ^ 0xa9, ch->rank);
    cuda_ok(cudaMemcpy(d->bc_d, d->bc_h, BC_N * 4, cudaMemcpyHostToDevice), "upload");
    cuda_ok(
        cudaMemcpy(d->rs_in_d, d->rs_in_h, (size_t)RS_N * ch->nranks * 4, cudaMemcpyHostToDevice),
        "upload");
    cuda_ok(cudaMemcpy(d->ag_in_d, d->ag_in_h, AG_N, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaMemset(d->rs_out_d, 0xa5, RS_N * 4), "poison");
    cuda_ok(cudaMemset(d->ag_out_d, 0xa5, (size_t)AG_N * ch->nranks), "poison");
    cuda_ok(cudaStreamSynchronize(0), "uploads");
}

static void dm_check(struct child *ch, uint64_t seed, uint64_t round)
{
    struct dm *d = &ch->d;
    int n = ch->nranks;
    cuda_ok(cudaStreamSynchronize(ch->s), "sync");
    cuda_ok(cudaMemcpy(d->bc_h, d->bc_d, BC_N * 4, cudaMemcpyDeviceToHost), "download");
    cuda_ok(cudaMemcpy(d->rs_out_h, d->rs_out_d, RS_N * 4, cudaMemcpyDeviceToHost), "download");
    cuda_ok(cudaMemcpy(d->ag_out_h, d->ag_out_d, (size_t)AG_N * n, cudaMemcpyDeviceToHost),
            "download");
    /* Broadcast (in place): the root's input everywhere. */
    int32_t *want = malloc(BC_N * 4), *in = malloc((size_t)RS_N * n * 4);
    fill_bytes(want, BC_N * 4, seed ^ 0xb0, BC_ROOT);
    long w = 0;
    for (size_t i = 0; i < BC_N; i++)
        w += d->bc_h[i] != want[i];
    /* Allgather: block p is rank p's input. */
    for (int p = 0; p < n; p++)
        fill_bytes(d->ag_ref + (size_t)p * AG_N, AG_N, seed ^ 0xa9, p);
    for (size_t i = 0; i < (size_t)AG_N * n; i++)
        w += d->ag_out_h[i] != d->ag_ref[i];
    /* Reduce_scatter: block 'rank' of every rank's input, summed with wrap-around. */
    for (size_t i = 0; i < RS_N; i++)
        d->rs_ref[i] = 0;
    for (int p = 0; p < n; p++) {
        fill_bytes(in, (size_t)RS_N * n * 4, seed ^ 0x25, p);
        for (size_t i = 0; i < RS_N; i++)
            d->rs_ref[i] =
                (int32_t)((uint32_t)d->rs_ref[i] + (uint32_t)in[(size_t)ch->rank * RS_N + i]);
    }
    for (size_t i = 0; i < RS_N; i++)
        w += d->rs_out_h[i] != d->rs_ref[i];
    if (w)
        fprintf(stderr, "  rank %d: G2 round %llu: %ld wrong\n", ch->rank,
                (unsigned long long)round, w);
    ch->wrong += w;
    ch->hash = fnv(ch->hash, d->bc_h, BC_N * 4);
    ch->hash = fnv(ch->hash, d->ag_out_h, (size_t)AG_N * n);
    free(want);
    free(in);
}

static void check_ok(comm_status_t st, comm_t *c, const char *what)
{
    if (st != COMM_OK) {
        fprintf(stderr, "FAIL: %s: %s (%s)\n", what, comm_status_string(st), comm_last_error(c));
        exit(1);
    }
}

static cudaGraphExec_t capture_g1(struct child *ch, enum cudaStreamCaptureMode mode)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    for (int i = 0; i < 3; i++)
        ar_stage(&ch->a[i], 1); /* the buffers' addresses; contents come per round */
    cuda_ok(cudaStreamBeginCapture(ch->s, mode), "begin capture G1");
    for (int i = 0; i < 3; i++)
        check_ok(enqueue(&ch->a[i].r, &ch->a[i].k, ch->a[i].send, ch->a[i].recv, NULL), ch->comm,
                 "capturing an allreduce");
    cuda_ok(cudaStreamEndCapture(ch->s, &g), "end capture G1");
    cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate G1");
    cudaGraphDestroy(g);
    return ge;
}

static cudaGraphExec_t capture_g2(struct child *ch, enum cudaStreamCaptureMode mode)
{
    struct dm *d = &ch->d;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cuda_ok(cudaStreamBeginCapture(ch->s, mode), "begin capture G2");
    check_ok(comm_broadcast(ch->comm, d->bc_d, d->bc_d, BC_N, COMM_I32, BC_ROOT, ch->s), ch->comm,
             "capturing a broadcast");
    check_ok(comm_allgather(ch->comm, d->ag_in_d, d->ag_out_d, AG_N, COMM_U8, ch->s), ch->comm,
             "capturing an allgather");
    check_ok(
        comm_reduce_scatter(ch->comm, d->rs_in_d, d->rs_out_d, RS_N, COMM_I32, COMM_SUM, ch->s),
        ch->comm, "capturing a reduce_scatter");
    cuda_ok(cudaStreamEndCapture(ch->s, &g), "end capture G2");
    cuda_ok(cudaGraphInstantiate(&ge, g, 0), "instantiate G2");
    cudaGraphDestroy(g);
    return ge;
}

static int child_replay(struct child *ch)
{
    const char *env = getenv("ARCOMM_TEST_REPLAYS");
    int rounds = env ? atoi(env) : 100;
    cudaGraphExec_t g1 = capture_g1(ch, ch->threads ? cudaStreamCaptureModeThreadLocal
                                                    : cudaStreamCaptureModeGlobal);
    cudaGraphExec_t g2 = capture_g2(ch, cudaStreamCaptureModeThreadLocal);
    struct ar eager;
    ar_init(ch, &eager, COMM_F32, 4099, false);
    uint64_t t0 = now_ms();
    for (int i = 0; i < rounds; i++) {
        uint64_t seed = 1000 + (uint64_t)i * 17;
        if (i % 4 == 1) {
            ar_stage(&eager, seed + 5);
            check_ok(enqueue(&eager.r, &eager.k, eager.send, eager.recv, NULL), ch->comm,
                     "an eager allreduce between replays");
            ar_check(ch, &eager, "eager", (uint64_t)i);
        }
        for (int a = 0; a < 3; a++)
            ar_stage(&ch->a[a], seed + (uint64_t)a);
        cudaStream_t on = i % 2 ? ch->s2 : ch->s;
        cuda_ok(cudaGraphLaunch(g1, on), "launch G1");
        cuda_ok(cudaStreamSynchronize(on), "sync G1");
        for (int a = 0; a < 3; a++)
            ar_check(ch, &ch->a[a], "G1", (uint64_t)i);
        if (i % 3 == 0) {
            dm_stage(ch, seed);
            cuda_ok(cudaGraphLaunch(g2, ch->s), "launch G2");
            dm_check(ch, seed, (uint64_t)i);
        }
        if (i == 0)
            say(ch, "after 1 replay: wrong %ld hash %016llx\n", ch->wrong,
                (unsigned long long)ch->hash);
    }
    /* The communicator serves eager calls after its replays, and says nothing is wrong. */
    ar_stage(&eager, 77);
    check_ok(enqueue(&eager.r, &eager.k, eager.send, eager.recv, NULL), ch->comm, "last eager");
    ar_check(ch, &eager, "eager", (uint64_t)rounds);
    say(ch, "after %d rounds: wrong %ld hash %016llx\n", rounds, ch->wrong,
        (unsigned long long)ch->hash);
    fprintf(stderr, "rank %d: %d rounds in %llu ms\n", ch->rank, rounds,
            (unsigned long long)(now_ms() - t0));
    cudaGraphExecDestroy(g1);
    cudaGraphExecDestroy(g2);
    rank_free(&eager.r);
    return 0;
}

struct abort_arg {
    comm_t *comm;
    int delay_ms;
};

static void *abort_later(void *arg)
{
    struct abort_arg *a = arg;
    struct timespec ts = {.tv_sec = a->delay_ms / 1000, .tv_nsec = (a->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    comm_abort(a->comm);
    return NULL;
}

/* Rank 0 replays G1, rank 1 never does (timeout), or rank 0 aborts while it waits. */
static int child_fail(struct child *ch, bool abort_it, int timeout_ms)
{
    cudaGraphExec_t g1 = capture_g1(ch, ch->threads ? cudaStreamCaptureModeThreadLocal
                                                    : cudaStreamCaptureModeGlobal);
    if (ch->rank != 0) {
        /* Never replays; after rank 0 gave up, its next call hears why. */
        struct timespec ts = {.tv_sec = (timeout_ms + 3000) / 1000, .tv_nsec = 0};
        nanosleep(&ts, NULL);
        struct ar *a = &ch->a[0];
        ar_stage(a, 5);
        comm_status_t st = enqueue(&a->r, &a->k, a->send, a->recv, NULL);
        if (st == COMM_OK) {
            cudaStreamSynchronize(ch->s);
            st = comm_barrier(ch->comm);
        }
        say(ch, "peer: %s\n", comm_status_string(st));
        fprintf(stderr, "rank 1: %s\n", comm_last_error(ch->comm));
        cudaGraphExecDestroy(g1);
        return 0;
    }
    for (int a = 0; a < 3; a++)
        ar_stage(&ch->a[a], 9 + (uint64_t)a);
    uint64_t t0 = now_ms();
    pthread_t t;
    struct abort_arg arg = {.comm = ch->comm, .delay_ms = 300};
    if (abort_it)
        pthread_create(&t, NULL, abort_later, &arg);
    cuda_ok(cudaGraphLaunch(g1, ch->s), "launch G1");
    cudaError_t e = cudaStreamSynchronize(ch->s);
    uint64_t took = now_ms() - t0;
    if (abort_it)
        pthread_join(t, NULL);
    struct ar *a = &ch->a[0];
    comm_status_t st = enqueue(&a->r, &a->k, a->send, a->recv, NULL);
    uint64_t bound = abort_it ? 5000 : (uint64_t)timeout_ms * 3 + 2000;
    say(ch, "replay ended: %s, %s, %s\n", e == cudaSuccess ? "sync ok" : cudaGetErrorString(e),
        took < bound ? "in time" : "too late", comm_status_string(st));
    fprintf(stderr, "rank 0: replay took %llu ms: %s\n", (unsigned long long)took,
            comm_last_error(ch->comm));
    cudaGraphExecDestroy(g1);
    return 0;
}

/* A call on the legacy stream while a capture runs is refused; nothing breaks. */
static int child_refuse(struct child *ch)
{
    struct ar *a = &ch->a[0];
    ar_stage(a, 31);
    /* A blocking stream: the legacy stream would have to wait for it. */
    cudaStream_t b;
    cuda_ok(cudaStreamCreate(&b), "stream");
    cuda_ok(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed), "begin capture");
    comm_status_t st = comm_allreduce(ch->comm, a->send, a->recv, a->k.count, a->k.dtype, COMM_SUM,
                                      NULL /* the legacy stream */);
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", comm_last_error(ch->comm));
    cudaGraph_t g = NULL;
    (void)cudaStreamEndCapture(b, &g); /* may be invalidated: the program's affair */
    if (g != NULL)
        cudaGraphDestroy(g);
    cudaStreamDestroy(b);
    (void)cudaGetLastError();
    say(ch, "refused: %s, message %s\n", comm_status_string(st),
        strstr(msg, "capture") != NULL ? "names the capture" : "says nothing of it");
    fprintf(stderr, "rank %d: %s\n", ch->rank, msg);
    /* Still usable: an eager call, checked. */
    ar_stage(a, 32);
    st = enqueue(&a->r, &a->k, a->send, a->recv, NULL);
    check_ok(st, ch->comm, "the eager call after a refusal");
    ch->wrong = 0;
    ch->hash = 0xcbf29ce484222325ull;
    ar_check(ch, a, "after refusal", 0);
    say(ch, "after the refusal: wrong %ld hash %016llx\n", ch->wrong, (unsigned long long)ch->hash);
    return 0;
}

/* 200003 f32 (800 KB) on the kernel path, 300000 f32 (1.2 MB) on the copy path with bf16
 * on the wire: set once per process, before any rank starts. */
static void set_knobs(void)
{
    setenv("ARCOMM_COPY_THRESHOLD", "1M", 1);
    setenv("ARCOMM_BF16_THRESHOLD", "1M", 1);
}

/* One rank (ch's rank, nranks, device, threads set) in mode; its lines in ch->out. */
static int rank_run(struct child *ch, const char *id, const char *mode)
{
    ch->hash = 0xcbf29ce484222325ull;
    cuda_ok(cudaSetDevice(ch->device), "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&ch->s, cudaStreamNonBlocking), "stream");
    cuda_ok(cudaStreamCreateWithFlags(&ch->s2, cudaStreamNonBlocking), "stream");
    bool fail = strcmp(mode, "timeout") == 0 || strcmp(mode, "abort") == 0;
    int timeout_ms = fail ? 2000 : 30000;
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = ch->nranks;
    cfg.rank = ch->rank;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = ch->device;
    cfg.timeout_ms = timeout_ms;
    comm_status_t st = comm_init(&ch->comm, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init: %s\n", ch->rank, comm_last_error(NULL));
        return 1;
    }
    transport_check(ch->comm, ch->rank);
    ar_init(ch, &ch->a[0], COMM_BF16, 5, false);
    ar_init(ch, &ch->a[1], COMM_F32, 200003, false);
    ar_init(ch, &ch->a[2], COMM_F32, 300000, true);
    dm_init(&ch->d, ch->nranks);
    int rc;
    if (strcmp(mode, "replay") == 0)
        rc = child_replay(ch);
    else if (fail)
        rc = child_fail(ch, strcmp(mode, "abort") == 0, timeout_ms);
    else
        rc = child_refuse(ch);
    comm_destroy(ch->comm);
    for (int i = 0; i < 3; i++)
        rank_free(&ch->a[i].r);
    cudaStreamDestroy(ch->s);
    cudaStreamDestroy(ch->s2);
    return rc;
}

static int child_main(int rank, int nranks, const char *id, const char *mode)
{
    static struct child ch;
    ch.rank = rank;
    ch.nranks = nranks;
    ch.device = 0;
    set_knobs();
    int rc = rank_run(&ch, id, mode);
    for (int i = 0; i < ch.nout; i++)
        fputs(ch.out[i], stdout);
    return rc;
}

static const char *g_self; /* this program, for the process ranks */

/* Runs NRANKS process ranks in mode; their stdout lines, in lines[rank]. */
static void run_process_ranks(const char *mode, char lines[][4][256], int *nl)
{
    const char *self = g_self;
    comm_id_t id;
    comm_id_new(&id);
    FILE *out[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s --child %d %d %s %s", self, r, NRANKS, id.str, mode);
        out[r] = popen(cmd, "r");
        CHECK(out[r] != NULL, "popen: %s", strerror(errno));
    }
    for (int r = 0; r < NRANKS; r++) {
        nl[r] = 0;
        while (out[r] != NULL && nl[r] < 4 && fgets(lines[r][nl[r]], 256, out[r]))
            nl[r]++;
        int st = out[r] != NULL ? pclose(out[r]) : -1;
        CHECK(st == 0, "%s: process rank %d exited with %d", mode, r, st);
    }
}

/* The same with NRANKS thread ranks of this process, rank r on GPU r. */
struct thread_rank {
    struct child ch;
    const char *id, *mode;
    int rc;
};

static void *thread_rank_run(void *arg)
{
    struct thread_rank *t = arg;
    t->rc = rank_run(&t->ch, t->id, t->mode);
    return NULL;
}

static void run_thread_ranks(const char *mode, char lines[][4][256], int *nl)
{
    comm_id_t id;
    comm_id_new(&id);
    static struct thread_rank t[NRANKS];
    pthread_t th[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        memset(&t[r], 0, sizeof(t[r]));
        t[r].ch.rank = r;
        t[r].ch.nranks = NRANKS;
        t[r].ch.device = r;
        t[r].ch.threads = true;
        t[r].id = id.str;
        t[r].mode = mode;
        CHECK(pthread_create(&th[r], NULL, thread_rank_run, &t[r]) == 0, "pthread_create");
    }
    for (int r = 0; r < NRANKS; r++) {
        pthread_join(th[r], NULL);
        CHECK(t[r].rc == 0, "%s: thread rank %d returned %d", mode, r, t[r].rc);
        nl[r] = t[r].ch.nout;
        for (int i = 0; i < nl[r]; i++)
            snprintf(lines[r][i], sizeof(lines[r][i]), "%s", t[r].ch.out[i]);
    }
}

typedef void (*run_fn)(const char *mode, char lines[][4][256], int *nl);

/* Every mode's checks, on the ranks run makes; kind names them in the lines. */
static void check_modes(run_fn run, const char *kind)
{
    char lines[NRANKS][4][256];
    int nl[NRANKS];
    int before = g_fail;

    run("replay", lines, nl);
    for (int r = 0; r < NRANKS; r++) {
        CHECK(nl[r] == 2, "replay: rank %d printed %d lines", r, nl[r]);
        for (int i = 0; i < nl[r]; i++) {
            CHECK(strstr(lines[r][i], "wrong 0 ") != NULL, "replay: rank %d: %s", r, lines[r][i]);
            /* The hash covers the outputs every rank shares (allreduces, broadcast,
             * allgather; not reduce_scatter's own block). */
            CHECK(strcmp(lines[r][i], lines[0][i]) == 0, "replay: ranks 0 and %d differ: %s / %s",
                  r, lines[0][i], lines[r][i]);
        }
    }
    printf("%s %s: graph replays (2 graphs, 1 and ARCOMM_TEST_REPLAYS rounds, eager calls "
           "between, two launch streams): %s",
           g_fail == before ? "ok  " : "FAIL", kind, nl[0] > 1 ? lines[0][1] : "\n");

    before = g_fail;
    run("timeout", lines, nl);
    CHECK(nl[0] == 1 && strstr(lines[0][0], "in time, COMM_ERR_TIMEOUT") != NULL,
          "timeout: rank 0: %s", nl[0] ? lines[0][0] : "(nothing)");
    CHECK(nl[1] == 1 && strstr(lines[1][0], "peer: COMM_ERR_") != NULL, "timeout: rank 1: %s",
          nl[1] ? lines[1][0] : "(nothing)");
    printf("%s %s: a replay that a peer never makes times out: %s",
           g_fail == before ? "ok  " : "FAIL", kind, nl[0] ? lines[0][0] : "\n");

    before = g_fail;
    run("abort", lines, nl);
    CHECK(nl[0] == 1 && strstr(lines[0][0], "in time, COMM_ERR_ABORTED") != NULL,
          "abort: rank 0: %s", nl[0] ? lines[0][0] : "(nothing)");
    CHECK(nl[1] == 1 && strstr(lines[1][0], "peer: COMM_ERR_PEER") != NULL, "abort: rank 1: %s",
          nl[1] ? lines[1][0] : "(nothing)");
    printf("%s %s: comm_abort during a replay: %s", g_fail == before ? "ok  " : "FAIL", kind,
           nl[0] ? lines[0][0] : "\n");

    before = g_fail;
    run("refuse", lines, nl);
    for (int r = 0; r < NRANKS; r++) {
        CHECK(nl[r] == 2 && strstr(lines[r][0], "refused: COMM_ERR_UNSUPPORTED") != NULL &&
                  strstr(lines[r][0], "message names the capture") != NULL,
              "refuse: rank %d: %s", r, nl[r] ? lines[r][0] : "(nothing)");
        CHECK(nl[r] == 2 && strstr(lines[r][1], "wrong 0 ") != NULL &&
                  strcmp(lines[r][1], lines[0][1]) == 0,
              "refuse: rank %d after: %s", r, nl[r] > 1 ? lines[r][1] : "(nothing)");
    }
    printf("%s %s: a call that cannot join the capture is refused, the communicator stays "
           "usable\n",
           g_fail == before ? "ok  " : "FAIL", kind);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 6 && strcmp(argv[1], "--child") == 0)
        return child_main(atoi(argv[2]), atoi(argv[3]), argv[4], argv[5]);
    cudaError_t e = cudaGetDeviceCount(&g_ndev);
    if (e != cudaSuccess || g_ndev == 0) {
        printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0");
        return SKIP;
    }
    printf("transport %s\n", transport_label());
    g_self = argv[0];
    check_modes(run_process_ranks, "process ranks");
    if (g_ndev >= NRANKS) {
        set_knobs();
        check_modes(run_thread_ranks, "thread ranks (a GPU each)");
    } else {
        printf("SKIP thread ranks: %d GPU, they need a GPU each (the two-GPU run)\n", g_ndev);
    }

    printf("%s: %d failure%s\n", g_fail ? "FAIL" : "PASS", g_fail, g_fail == 1 ? "" : "s");
    return g_fail ? 1 : 0;
}
