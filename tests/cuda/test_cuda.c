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

#define SKIP      77
#define MAX_RANKS 8

static int g_fail;
static int g_ndev;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_fail++;                                                                              \
        }                                                                                          \
    } while (0)

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* ---- host emulation of the element types ---- */

static float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f16_to_f(uint16_t h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static uint16_t f_to_f16(float f)
{
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}

static size_t esize(comm_dtype_t t)
{
    return t == COMM_F32 ? 4 : 2;
}

static float get_f(const void *buf, size_t i, comm_dtype_t t)
{
    if (t == COMM_F32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return t == COMM_F16 ? f16_to_f(h) : bf16_to_f(h);
}

static void put_f(void *buf, size_t i, comm_dtype_t t, float v)
{
    if (t == COMM_F32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = t == COMM_F16 ? f_to_f16(v) : f_to_bf16(v);
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random values in [-2, 2), never all zero, exactly representable in the dtype. */
static void fill(void *buf, size_t n, comm_dtype_t t, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&s) >> 11) * 0x1.0p-53;
        put_f(buf, i, t, (float)(4.0 * u - 2.0));
    }
}

/* ---- one case ---- */

struct kase {
    comm_dtype_t dtype;
    size_t count;
    bool inplace;
    size_t offset;       /* elements past a 256-byte aligned base: unaligned when odd */
    size_t addend_count; /* 0 = plain allreduce */
    bool narrow;         /* f32 expected to travel as bf16 */
    uint64_t seed;
};

/* What rank r contributes to element i (before the wire). */
static uint64_t input_seed(const struct kase *k, int r)
{
    return k->seed * 1000003u + (uint64_t)r * 7919u + 1;
}

/* The expected bits (host emulation) and the float64 reference check for element i. */
struct expect {
    void *bits;    /* count elements of dtype */
    double *ref;   /* float64 sum + addend */
    double *bound; /* allowed |result - ref| */
};

static void make_expect(const struct kase *k, int nranks, void *const *inputs, const void *addend,
                        struct expect *e)
{
    size_t n = k->count;
    e->bits = malloc(n * esize(k->dtype) + 1);
    e->ref = malloc(n * sizeof(double) + 1);
    e->bound = malloc(n * sizeof(double) + 1);
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        double ref = 0.0, abs = 0.0;
        for (int r = 0; r < nranks; r++) {
            float x = get_f(inputs[r], i, k->dtype);
            float w = k->narrow ? bf16_to_f(f_to_bf16(x)) : x;
            acc = r == 0 ? w : acc + w;
            ref += x;
            abs += fabs(x);
        }
        double bound = nranks * 0x1.0p-23 * abs + 1e-30;
        if (k->narrow)
            bound += 0x1.0p-8 * abs; /* one bf16 rounding per input */
        if (addend) {
            float a = get_f(addend, i % k->addend_count, k->dtype);
            acc = acc + a;
            ref += a;
            bound += 0x1.0p-23 * fabs(a);
        }
        if (k->dtype != COMM_F32)
            bound += fabs(ref) * (k->dtype == COMM_F16 ? 0x1.0p-11 : 0x1.0p-8) + 0x1.0p-24;
        put_f(e->bits, i, k->dtype, acc);
        e->ref[i] = ref;
        e->bound[i] = bound;
    }
}

static void free_expect(struct expect *e)
{
    free(e->bits);
    free(e->ref);
    free(e->bound);
}

/* Checks one rank's output; returns the number of wrong elements (reported once). */
static long check_output(const struct kase *k, int rank, const void *out, const struct expect *e)
{
    long wrong = 0;
    size_t es = esize(k->dtype);
    for (size_t i = 0; i < k->count; i++) {
        float v = get_f(out, i, k->dtype);
        bool bits_ok = memcmp((const char *)out + i * es, (const char *)e->bits + i * es, es) == 0;
        bool ref_ok = fabs((double)v - e->ref[i]) <= e->bound[i];
        if (bits_ok && ref_ok)
            continue;
        if (wrong++ < 3)
            fprintf(stderr,
                    "  rank %d dtype %d count %zu%s%s off %zu add %zu: [%zu] = %.9g, expected "
                    "%.9g (float64 %.9g +- %.3g)%s\n",
                    rank, (int)k->dtype, k->count, k->inplace ? " inplace" : "",
                    k->narrow ? " bf16-wire" : "", k->offset, k->addend_count, i, v,
                    get_f(e->bits, i, k->dtype), e->ref[i], e->bound[i],
                    bits_ok ? "" : " (bits differ)");
    }
    return wrong;
}

/* ---- ranks ---- */

struct rank_ctx {
    int rank, nranks, device;
    comm_t *comm;
    cudaStream_t stream;
    void *dbuf, *drecv, *dadd; /* device: send (and in place), recv, addend */
    size_t cap;                /* bytes of each device buffer */
    void *hin, *hout;          /* host copies */
};

static void rank_alloc(struct rank_ctx *r, size_t cap)
{
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    if (r->stream == NULL)
        cuda_ok(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "stream");
    r->cap = cap;
    cuda_ok(cudaMalloc(&r->dbuf, cap), "cudaMalloc");
    cuda_ok(cudaMalloc(&r->drecv, cap), "cudaMalloc");
    cuda_ok(cudaMalloc(&r->dadd, cap), "cudaMalloc");
    r->hin = malloc(cap);
    r->hout = malloc(cap);
}

static void rank_free(struct rank_ctx *r)
{
    cudaSetDevice(r->device);
    cudaFree(r->dbuf);
    cudaFree(r->drecv);
    cudaFree(r->dadd);
    free(r->hin);
    free(r->hout);
    r->dbuf = r->drecv = r->dadd = r->hin = r->hout = NULL;
}

/* Uploads this rank's input and poison; returns the send, recv and addend pointers. */
static void stage_case(struct rank_ctx *r, const struct kase *k, const void *addend_host,
                       void **send, void **recv, void **add)
{
    size_t es = esize(k->dtype), bytes = k->count * es, off = k->offset * es;
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    fill(r->hin, k->count, k->dtype, input_seed(k, r->rank));
    *send = (char *)r->dbuf + off;
    *recv = k->inplace ? *send : (char *)r->drecv + off;
    cuda_ok(cudaMemset(r->drecv, 0xff, r->cap), "poison"); /* NaN in every dtype */
    cuda_ok(cudaMemcpy(*send, r->hin, bytes, cudaMemcpyHostToDevice), "upload");
    *add = NULL;
    if (k->addend_count) {
        *add = (char *)r->dadd + off;
        cuda_ok(cudaMemcpy(*add, addend_host, k->addend_count * es, cudaMemcpyHostToDevice),
                "upload addend");
    }
    /* cudaMemcpy from pageable memory may return before its DMA ends, and the legacy
     * stream it runs on does not order the non-blocking stream the allreduce runs on:
     * without this the collective can read the tail of the previous case's input. */
    cuda_ok(cudaStreamSynchronize(0), "waiting for the uploads");
}

static comm_status_t enqueue(struct rank_ctx *r, const struct kase *k, void *send, void *recv,
                             void *add)
{
    if (k->addend_count)
        return comm_allreduce_add(r->comm, send, recv, add, k->addend_count, k->count, k->dtype,
                                  r->stream);
    return comm_allreduce(r->comm, send, recv, k->count, k->dtype, COMM_SUM, r->stream);
}

static void fetch(struct rank_ctx *r, const struct kase *k, const void *recv)
{
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    cuda_ok(cudaMemcpy(r->hout, recv, k->count * esize(k->dtype), cudaMemcpyDeviceToHost),
            "download");
}

/* ---- the case list ---- */

#define MAX_CASES 160

static size_t make_cases(struct kase *out, uint64_t seed, size_t bf16_from, size_t max_count)
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

/* ---- thread ranks ---- */

struct job {
    int nranks;
    comm_id_t id;
    struct rank_ctx r[MAX_RANKS];
    pthread_barrier_t bar;
    const struct kase *cases;
    size_t ncases;
    int timeout_ms;
    void *addend; /* host addend of the current case */
    void *inputs[MAX_RANKS];
};

static void *init_thread(void *arg)
{
    struct rank_ctx *r = arg;
    struct job *j = (struct job *)((char *)(r - r->rank) - offsetof(struct job, r));
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = j->nranks;
    cfg.rank = r->rank;
    cfg.id = j->id;
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = r->device;
    cfg.timeout_ms = j->timeout_ms;
    comm_status_t st = comm_init(&r->comm, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "FAIL: rank %d comm_init: %s: %s\n", r->rank, comm_status_string(st),
                comm_last_error(NULL));
        exit(1);
    }
    return NULL;
}

/* Joins nranks thread ranks (threads only for comm_init, which waits for all). */
static void job_init(struct job *j, int nranks, int timeout_ms, size_t cap)
{
    memset(j, 0, sizeof(*j));
    j->nranks = nranks;
    j->timeout_ms = timeout_ms;
    if (comm_id_new(&j->id) != COMM_OK) {
        fprintf(stderr, "FAIL: comm_id_new\n");
        exit(1);
    }
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        j->r[r].rank = r;
        j->r[r].nranks = nranks;
        j->r[r].device = r % g_ndev;
        rank_alloc(&j->r[r], cap);
    }
    for (int r = 0; r < nranks; r++)
        pthread_create(&t[r], NULL, init_thread, &j->r[r]);
    for (int r = 0; r < nranks; r++)
        pthread_join(t[r], NULL);
}

static void job_destroy(struct job *j)
{
    for (int r = 0; r < j->nranks; r++) {
        comm_status_t st = comm_destroy(j->r[r].comm);
        CHECK(st == COMM_OK, "comm_destroy rank %d: %s", r, comm_status_string(st));
        cudaSetDevice(j->r[r].device);
        cudaStreamDestroy(j->r[r].stream);
        rank_free(&j->r[r]);
    }
}

/* Runs one case with every rank already staged; checks outputs and bit-identity. */
static void verify_case(struct job *j, const struct kase *k, void *const *recv)
{
    void *inputs[MAX_RANKS];
    for (int r = 0; r < j->nranks; r++) {
        fetch(&j->r[r], k, recv[r]);
        inputs[r] = malloc(k->count * esize(k->dtype));
        fill(inputs[r], k->count, k->dtype, input_seed(k, r));
    }
    struct expect e;
    make_expect(k, j->nranks, inputs, j->addend, &e);
    for (int r = 0; r < j->nranks; r++) {
        long wrong = check_output(k, r, j->r[r].hout, &e);
        CHECK(wrong == 0, "dtype %d count %zu: rank %d has %ld wrong elements", (int)k->dtype,
              k->count, r, wrong);
        CHECK(memcmp(j->r[r].hout, j->r[0].hout, k->count * esize(k->dtype)) == 0,
              "dtype %d count %zu: rank %d's result differs from rank 0's", (int)k->dtype, k->count,
              r);
    }
    for (int r = 0; r < j->nranks; r++)
        free(inputs[r]);
    free_expect(&e);
}

static void *addend_for(const struct kase *k)
{
    if (!k->addend_count)
        return NULL;
    void *a = malloc(k->addend_count * esize(k->dtype));
    fill(a, k->addend_count, k->dtype, k->seed ^ 0xadd);
    return a;
}

/* One thread enqueues every rank's call, in order (or reversed), then waits for all. */
static void run_single_thread(struct job *j, const struct kase *cases, size_t n, bool reverse)
{
    for (size_t c = 0; c < n; c++) {
        const struct kase *k = &cases[c];
        void *send[MAX_RANKS], *recv[MAX_RANKS], *add[MAX_RANKS];
        j->addend = addend_for(k);
        for (int r = 0; r < j->nranks; r++)
            stage_case(&j->r[r], k, j->addend, &send[r], &recv[r], &add[r]);
        for (int i = 0; i < j->nranks; i++) {
            int r = reverse ? j->nranks - 1 - i : i;
            comm_status_t st = enqueue(&j->r[r], k, send[r], recv[r], add[r]);
            CHECK(st == COMM_OK, "rank %d enqueue: %s: %s", r, comm_status_string(st),
                  comm_last_error(j->r[r].comm));
        }
        verify_case(j, k, recv);
        free(j->addend);
        j->addend = NULL;
    }
}

/* Each rank's own thread stages, enqueues and syncs; rank 0's thread checks. */
struct thr_arg {
    struct job *j;
    int rank;
    void *recv[MAX_RANKS];
};
static struct thr_arg g_targs[MAX_RANKS];

static void *rank_thread(void *arg)
{
    struct thr_arg *t = arg;
    struct job *j = t->j;
    struct rank_ctx *r = &j->r[t->rank];
    for (size_t c = 0; c < j->ncases; c++) {
        const struct kase *k = &j->cases[c];
        if (t->rank == 0)
            j->addend = addend_for(k);
        pthread_barrier_wait(&j->bar);
        void *send, *add;
        stage_case(r, k, j->addend, &send, &g_targs[0].recv[t->rank], &add);
        comm_status_t st = enqueue(r, k, send, g_targs[0].recv[t->rank], add);
        CHECK(st == COMM_OK, "rank %d enqueue: %s: %s", t->rank, comm_status_string(st),
              comm_last_error(r->comm));
        cuda_ok(cudaStreamSynchronize(r->stream), "sync");
        pthread_barrier_wait(&j->bar);
        if (t->rank == 0) {
            verify_case(j, k, g_targs[0].recv);
            free(j->addend);
            j->addend = NULL;
        }
        pthread_barrier_wait(&j->bar);
    }
    return NULL;
}

static void run_threads(struct job *j, const struct kase *cases, size_t n)
{
    pthread_t t[MAX_RANKS];
    j->cases = cases;
    j->ncases = n;
    pthread_barrier_init(&j->bar, NULL, (unsigned)j->nranks);
    for (int r = 0; r < j->nranks; r++) {
        g_targs[r] = (struct thr_arg){.j = j, .rank = r};
        pthread_create(&t[r], NULL, rank_thread, &g_targs[r]);
    }
    for (int r = 0; r < j->nranks; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&j->bar);
}

/* ---- sweeps under several knob settings ---- */

static void knob_env(const char *copy, const char *bf16, const char *chunk)
{
    unsetenv("ARCOMM_COPY_THRESHOLD");
    unsetenv("ARCOMM_BF16_THRESHOLD");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    if (copy)
        setenv("ARCOMM_COPY_THRESHOLD", copy, 1);
    if (bf16)
        setenv("ARCOMM_BF16_THRESHOLD", bf16, 1);
    if (chunk)
        setenv("ARCOMM_COPY_CHUNK_BYTES", chunk, 1);
}

static void sweep(int nranks, const char *name, const char *copy, const char *bf16,
                  const char *chunk, size_t bf16_from, int mode)
{
    static struct kase cases[MAX_CASES];
    size_t n = make_cases(cases, (uint64_t)time(NULL) ^ (uint64_t)mode << 20, bf16_from, 3000001);
    int before = g_fail;
    knob_env(copy, bf16, chunk);
    struct job *j = calloc(1, sizeof(*j));
    job_init(j, nranks, 20000, (3000001 + 64) * 4);
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
        CHECK(st == COMM_OK, "mismatch: enqueue: %s", comm_status_string(st));
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
    for (int r = 0; r < nranks; r++) {
        comm_status_t st = comm_allreduce(j->r[r].comm, j->r[r].dbuf, j->r[r].drecv, 16, COMM_F64,
                                          COMM_SUM, j->r[r].stream);
        CHECK(st == COMM_ERR_UNSUPPORTED, "f64: rank %d got %s", r, comm_status_string(st));
        st = comm_allreduce(j->r[r].comm, j->r[r].dbuf, j->r[r].drecv, 16, COMM_F32, COMM_MAX,
                            j->r[r].stream);
        CHECK(st == COMM_ERR_UNSUPPORTED, "max: rank %d got %s", r, comm_status_string(st));
    }
    job_destroy(j);
    free(j);
    printf("%s f64 and max are COMM_ERR_UNSUPPORTED on every rank\n",
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
    for (size_t c = 0; c < sizeof(proc_counts) / sizeof(proc_counts[0]); c++) {
        struct kase k = {.dtype = c % 2 ? COMM_BF16 : COMM_F32,
                         .count = proc_counts[c],
                         .inplace = c % 2,
                         .seed = 4242 + c};
        k.narrow = k.dtype == COMM_F32 && k.count * 4 >= (1u << 20);
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

static void test_processes(int nranks, const char *self)
{
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
    printf("%s process ranks (%d processes, %zu cases, bit-identical)\n",
           g_fail == before ? "ok  " : "FAIL", nranks, ncases);
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
    printf("%d CUDA device%s, %d ranks\n", g_ndev, g_ndev == 1 ? "" : "s", nranks);
    bool all = only == NULL;
    if (all || strstr(only, "sweep")) {
        const size_t mib = 1u << 20, never = SIZE_MAX;
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 0);
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 1);
        sweep(nranks, "default knobs", NULL, NULL, NULL, mib, 2);
        sweep(nranks, "bf16 off", NULL, "off", NULL, never, 0);
        sweep(nranks, "kernel path only (multi-round)", "off", "off", NULL, never, 1);
        sweep(nranks, "kernel path only, bf16 everywhere", "off", "0", NULL, 0, 0);
        sweep(nranks, "copy path only, 64 KiB chunks", "0", "off", "64K", never, 2);
        sweep(nranks, "copy path only, bf16 everywhere", "0", "0", NULL, 0, 0);
    }
    if (all || strstr(only, "fail")) {
        test_unsupported(nranks);
        test_timeout(nranks, 1000);
        test_timeout(nranks, 2000000);
        test_abort(nranks, 1000);
        test_abort(nranks, 2000000);
        test_mismatch(nranks, 1000);
        test_mismatch(nranks, 2000000);
    }
    if (all || strstr(only, "proc"))
        test_processes(nranks, argv[0]);
    printf("%s: %d failure%s\n", g_fail ? "FAIL" : "PASS", g_fail, g_fail == 1 ? "" : "s");
    return g_fail ? 1 : 0;
}
