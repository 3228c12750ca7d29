/* SPDX-License-Identifier: MIT */
/* The CUDA tests' harness (cuda_harness.h). */
#include "cuda_harness.h"
#include "transport_check.h"
#include "wire.h"
#include "wire_scalar.h"

#include <math.h>
#include <string.h>

/* ---- host emulation of the element types ---- */

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

size_t esize(comm_dtype_t t)
{
    return t == COMM_F32 ? 4 : 2;
}

float get_f(const void *buf, size_t i, comm_dtype_t t)
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
void fill(void *buf, size_t n, comm_dtype_t t, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rng_next(&s) >> 11) * 0x1.0p-53;
        put_f(buf, i, t, (float)(4.0 * u - 2.0));
    }
}

/* ---- one case ---- */

/* What rank r contributes to element i (before the wire). */
uint64_t input_seed(const struct kase *k, int r)
{
    return k->seed * 1000003u + (uint64_t)r * 7919u + 1;
}

int env_codec(void)
{
    const char *w = getenv("ARCOMM_WIRE");
    if (w == NULL || *w == '\0')
        return WIRE_BF16;
    return strcmp(w, "int8") == 0   ? WIRE_INT8
           : strcmp(w, "fp8") == 0  ? WIRE_FP8
           : strcmp(w, "none") == 0 ? WIRE_NONE
                                    : WIRE_BF16;
}

/*
 * What a block codec makes of one rank's n elements: the decoded values (what every rank
 * sums) and each element's bound of docs/wire.md, from the block's finite absmax.  The
 * arithmetic is wire_scalar.h's, the library's own, written out here over the blocks.
 */
static void codec_emulate(int codec, const void *in, comm_dtype_t t, size_t n, float *dec,
                          double *err)
{
    for (size_t b = 0; b < n; b += WIRE_BLOCK_ELEMS) {
        size_t m = n - b < WIRE_BLOCK_ELEMS ? n - b : WIRE_BLOCK_ELEMS;
        float amax = 0.0f;
        for (size_t i = 0; i < m; i++) {
            float a = fabsf(get_f(in, b + i, t));
            amax = isfinite(a) && a > amax ? a : amax;
        }
        float s = codec == WIRE_INT8 ? wire_int8_scale(amax) : wire_fp8_scale(amax);
        for (size_t i = 0; i < m; i++) {
            float x = get_f(in, b + i, t);
            dec[b + i] = codec == WIRE_INT8 ? wire_int8_value(wire_int8_code(x, s), s)
                                            : wire_fp8_value(wire_fp8_code(x, s), s);
            err[b + i] = codec == WIRE_INT8
                             ? amax * (1.0 / 254.0 + 0x1p-22) + 0x1p-140
                             : fabs(x) * (0x1p-4 + 0x1p-20) + amax * 0x1p-18 + 0x1p-140;
        }
    }
}

void make_expect(const struct kase *k, int nranks, void *const *inputs, const void *addend,
                 struct expect *e)
{
    size_t n = k->count;
    e->bits = malloc(n * esize(k->dtype) + 1);
    e->ref = malloc(n * sizeof(double) + 1);
    e->bound = malloc(n * sizeof(double) + 1);
    float *dec[MAX_RANKS] = {NULL};
    double *err[MAX_RANKS] = {NULL};
    for (int r = 0; k->codec != 0 && r < nranks; r++) {
        dec[r] = malloc(n * sizeof(float) + 1);
        err[r] = malloc(n * sizeof(double) + 1);
        codec_emulate(k->codec, inputs[r], k->dtype, n, dec[r], err[r]);
    }
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        double ref = 0.0, abs = 0.0, codec_err = 0.0;
        for (int r = 0; r < nranks; r++) {
            float x = get_f(inputs[r], i, k->dtype);
            float w = k->codec ? dec[r][i] : k->narrow ? bf16_to_f(f_to_bf16(x)) : x;
            acc = r == 0 ? w : acc + w;
            ref += x;
            abs += fabs(x) > fabs(w) ? fabs(x) : fabs(w);
            codec_err += k->codec ? err[r][i] : 0.0;
        }
        double bound = nranks * 0x1.0p-23 * abs + 1e-30 + codec_err;
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
    for (int r = 0; r < nranks; r++) {
        free(dec[r]);
        free(err[r]);
    }
}

void free_expect(struct expect *e)
{
    free(e->bits);
    free(e->ref);
    free(e->bound);
}

/* Checks one rank's output; returns the number of wrong elements (reported once). */
long check_output(const struct kase *k, int rank, const void *out, const struct expect *e)
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
                    k->narrow               ? " bf16-wire"
                    : k->codec == WIRE_INT8 ? " int8-wire"
                    : k->codec == WIRE_FP8  ? " fp8-wire"
                                            : "",
                    k->offset, k->addend_count, i, v, get_f(e->bits, i, k->dtype), e->ref[i],
                    e->bound[i], bits_ok ? "" : " (bits differ)");
    }
    return wrong;
}

/* ---- ranks ---- */

void rank_alloc(struct rank_ctx *r, size_t cap)
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

void rank_free(struct rank_ctx *r)
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
void stage_case(struct rank_ctx *r, const struct kase *k, const void *addend_host, void **send,
                void **recv, void **add)
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

comm_status_t enqueue(struct rank_ctx *r, const struct kase *k, void *send, void *recv, void *add)
{
    if (k->addend_count)
        return comm_allreduce_add(r->comm, send, recv, add, k->addend_count, k->count, k->dtype,
                                  r->stream);
    return comm_allreduce(r->comm, send, recv, k->count, k->dtype, COMM_SUM, r->stream);
}

void fetch(struct rank_ctx *r, const struct kase *k, const void *recv)
{
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    cuda_ok(cudaMemcpy(r->hout, recv, k->count * esize(k->dtype), cudaMemcpyDeviceToHost),
            "download");
}

/* ---- thread ranks ---- */

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
    transport_check(r->comm, r->rank);
    return NULL;
}

/* Joins nranks thread ranks (threads only for comm_init, which waits for all). */
void job_init(struct job *j, int nranks, int timeout_ms, size_t cap)
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

void job_destroy(struct job *j)
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
void verify_case(struct job *j, const struct kase *k, void *const *recv)
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

void *addend_for(const struct kase *k)
{
    if (!k->addend_count)
        return NULL;
    void *a = malloc(k->addend_count * esize(k->dtype));
    fill(a, k->addend_count, k->dtype, k->seed ^ 0xadd);
    return a;
}

/* One thread enqueues every rank's call, in order (or reversed), then waits for all. */
void run_single_thread(struct job *j, const struct kase *cases, size_t n, bool reverse)
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

void run_threads(struct job *j, const struct kase *cases, size_t n)
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
