/* SPDX-License-Identifier: MIT */
/*
 * The CUDA collectives beyond allreduce, and allreduce over every dtype and op (need a
 * GPU; exit 77 = skipped when none is found).
 *
 * Every case draws fresh random inputs, poisons every output buffer (and a guard past
 * it), and checks every element: bit for bit against a host emulation of the contract
 * (a fixed rank order, f16/bf16 in f32, integers wrapping, AVG = sum / nranks in the
 * accumulator type), and floats against a float64 reference within the dtype's bound.
 * Data movement must be exact; ranks that must agree hold the same bits.  What a call
 * must not write (the guard, a non-root's recvbuf, the other blocks of an in-place
 * reduce_scatter) must still hold what it held.
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
#include "arcomm.h"
#include "transport_check.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The collectives beyond allreduce come from the runtime (runtime/collective.c): weak,
 * so that this program links (and says what is missing) against a library without them. */
#pragma weak comm_broadcast
#pragma weak comm_reduce
#pragma weak comm_allgather
#pragma weak comm_reduce_scatter
#pragma weak comm_alltoall

#define SKIP       77
#define MAX_RANKS  8
#define MAX_CASES  256
#define GUARD      256 /* bytes past every output that no call may write */
#define N_MISMATCH 4   /* mismatch scenarios (communicators of their own) */
#define N_LONELY   2   /* a call no peer makes: timeout, abort (likewise) */
#define N_IDS      (1 + N_MISMATCH + N_LONELY)

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

/* ---- element types on the host ---- */

static size_t dsize(comm_dtype_t t)
{
    switch (t) {
    case COMM_I8:
    case COMM_U8:
        return 1;
    case COMM_F16:
    case COMM_BF16:
        return 2;
    case COMM_F32:
    case COMM_I32:
    case COMM_U32:
        return 4;
    default:
        return 8;
    }
}

static bool is_float(comm_dtype_t t)
{
    return t == COMM_F32 || t == COMM_F16 || t == COMM_BF16 || t == COMM_F64;
}

static bool is_signed_int(comm_dtype_t t)
{
    return t == COMM_I8 || t == COMM_I32 || t == COMM_I64;
}

static const char *dname(comm_dtype_t t)
{
    static const char *const n[] = {"f32", "f16", "bf16", "f64", "i32",
                                    "i64", "i8",  "u8",   "u32", "u64"};
    return (unsigned)t < 10 ? n[t] : "?";
}

static const char *oname(comm_op_t o)
{
    static const char *const n[] = {"sum", "max", "min", "prod", "avg"};
    return (unsigned)o < 5 ? n[o] : "?";
}

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

static float get_f(const void *b, size_t i, comm_dtype_t t)
{
    if (t == COMM_F32)
        return ((const float *)b)[i];
    uint16_t h = ((const uint16_t *)b)[i];
    if (t == COMM_BF16)
        return bf16_to_f(h);
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}

static void put_f(void *b, size_t i, comm_dtype_t t, float v)
{
    if (t == COMM_F32) {
        ((float *)b)[i] = v;
    } else if (t == COMM_BF16) {
        ((uint16_t *)b)[i] = f_to_bf16(v);
    } else {
        _Float16 x = (_Float16)v;
        memcpy((uint16_t *)b + i, &x, 2);
    }
}

/* An integer element, sign-extended for the signed types. */
static uint64_t get_u(const void *b, size_t i, comm_dtype_t t)
{
    switch (t) {
    case COMM_I8:
        return (uint64_t)(int64_t)((const int8_t *)b)[i];
    case COMM_U8:
        return ((const uint8_t *)b)[i];
    case COMM_I32:
        return (uint64_t)(int64_t)((const int32_t *)b)[i];
    case COMM_U32:
        return ((const uint32_t *)b)[i];
    default:
        return ((const uint64_t *)b)[i];
    }
}

static void put_u(void *b, size_t i, comm_dtype_t t, uint64_t v)
{
    switch (dsize(t)) {
    case 1:
        ((uint8_t *)b)[i] = (uint8_t)v;
        break;
    case 4:
        ((uint32_t *)b)[i] = (uint32_t)v;
        break;
    default:
        ((uint64_t *)b)[i] = v;
        break;
    }
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Floats in [-2, 2) exactly representable in the dtype; integers over their whole range. */
static void fill(void *b, size_t n, comm_dtype_t t, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&s);
        double u = (double)(r >> 11) * 0x1.0p-53;
        if (t == COMM_F64)
            ((double *)b)[i] = 4.0 * u - 2.0;
        else if (is_float(t))
            put_f(b, i, t, (float)(4.0 * u - 2.0));
        else
            put_u(b, i, t, r);
    }
}

/* ---- cases ---- */

enum kind { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL };
static const char *const kind_names[] = {"allreduce", "broadcast",      "reduce",
                                         "allgather", "reduce_scatter", "alltoall"};

struct ccase {
    enum kind kind;
    comm_dtype_t dtype;
    comm_op_t op;
    size_t count; /* the API's per-rank count */
    int root;
    bool inplace;
    bool null_bufs; /* broadcast: non-roots pass sendbuf NULL; reduce: recvbuf NULL */
    size_t offset;  /* elements past a 256-byte aligned base (odd: unaligned) */
    uint64_t seed;
};

static bool kind_reduces(enum kind k)
{
    return k == K_ALLREDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER;
}

/* Elements of sendbuf and recvbuf. */
static size_t send_elems(const struct ccase *k, int n)
{
    return k->kind == K_REDUCE_SCATTER || k->kind == K_ALLTOALL ? (size_t)n * k->count : k->count;
}

static size_t recv_elems(const struct ccase *k, int n)
{
    return k->kind == K_ALLGATHER || k->kind == K_ALLTOALL ? (size_t)n * k->count : k->count;
}

/* Do all ranks hold the same output? */
static bool same_everywhere(enum kind k)
{
    return k == K_ALLREDUCE || k == K_BROADCAST || k == K_ALLGATHER;
}

/* Knob sets: 0 defaults, 1 copy path everywhere with 64 KiB chunks, 2 kernel path. */
#define N_CONFIGS 3
static const char *const config_names[N_CONFIGS] = {
    "default knobs", "copy path, 64 KiB chunks, bf16 off", "kernel path, bf16 everywhere"};

static void config_env(int config)
{
    unsetenv("ARCOMM_COPY_THRESHOLD");
    unsetenv("ARCOMM_BF16_THRESHOLD");
    unsetenv("ARCOMM_COPY_CHUNK_BYTES");
    if (config == 1) {
        setenv("ARCOMM_COPY_THRESHOLD", "0", 1);
        setenv("ARCOMM_COPY_CHUNK_BYTES", "64K", 1);
        setenv("ARCOMM_BF16_THRESHOLD", "off", 1);
    } else if (config == 2) {
        setenv("ARCOMM_COPY_THRESHOLD", "off", 1);
        setenv("ARCOMM_BF16_THRESHOLD", "0", 1);
    }
}

/* Is this case's f32 sum narrowed to bf16 under config (only allreduce narrows)? */
static bool narrows(const struct ccase *k, int config)
{
    if (k->kind != K_ALLREDUCE || k->dtype != COMM_F32 || k->op != COMM_SUM)
        return false;
    if (config == 1)
        return false;
    if (config == 2)
        return true;
    return k->count * 4 >= (1u << 20); /* the default ARCOMM_BF16_THRESHOLD */
}

struct combo {
    comm_dtype_t dtype;
    comm_op_t op;
};

static const struct combo reduce_combos[] = {
    {COMM_F32, COMM_SUM}, {COMM_F32, COMM_PROD}, {COMM_F32, COMM_MAX},  {COMM_F32, COMM_AVG},
    {COMM_F16, COMM_SUM}, {COMM_F16, COMM_AVG},  {COMM_BF16, COMM_MIN}, {COMM_BF16, COMM_PROD},
    {COMM_F64, COMM_SUM}, {COMM_F64, COMM_AVG},  {COMM_F64, COMM_MAX},  {COMM_I32, COMM_SUM},
    {COMM_I32, COMM_MIN}, {COMM_I64, COMM_PROD}, {COMM_I64, COMM_MAX},  {COMM_I8, COMM_SUM},
    {COMM_I8, COMM_MAX},  {COMM_U8, COMM_PROD},  {COMM_U8, COMM_MIN},   {COMM_U32, COMM_SUM},
    {COMM_U32, COMM_MAX}, {COMM_U64, COMM_SUM},  {COMM_U64, COMM_MIN},  {COMM_BF16, COMM_SUM},
};
#define N_REDUCE_COMBOS (sizeof(reduce_combos) / sizeof(reduce_combos[0]))

static const comm_dtype_t move_dtypes[] = {COMM_F32,  COMM_F16, COMM_F64, COMM_U8,
                                           COMM_BF16, COMM_I32, COMM_U64, COMM_I8};
#define N_MOVE_DTYPES (sizeof(move_dtypes) / sizeof(move_dtypes[0]))

/* 1, a few, primes, and more than 1 MiB (of 4-byte elements; 1-byte types get more). */
static const size_t counts[] = {1, 7, 1009, 65537, 300007};
#define N_COUNTS (sizeof(counts) / sizeof(counts[0]))

static size_t big_count(comm_dtype_t t)
{
    return dsize(t) == 1 ? 1048583 : dsize(t) == 2 ? 600011 : 300007;
}

static size_t make_cases(struct ccase *out, int nranks, uint64_t seed)
{
    size_t n = 0;
    for (int kind = K_ALLREDUCE; kind <= K_ALLTOALL; kind++) {
        bool red = kind_reduces((enum kind)kind);
        size_t ncombo = red ? N_REDUCE_COMBOS : N_MOVE_DTYPES;
        for (size_t ci = 0; ci < ncombo; ci++) {
            /* Each combination at two counts, the counts rotating; the first few also at
             * a large count. */
            for (int j = 0; j < (ci < 3 ? 3 : 2) && n < MAX_CASES; j++) {
                struct ccase k = {
                    .kind = (enum kind)kind,
                    .dtype = red ? reduce_combos[ci].dtype : move_dtypes[ci],
                    .op = red ? reduce_combos[ci].op : COMM_SUM,
                    .root = (int)((ci + (size_t)j) % 2) * (nranks - 1),
                    .inplace = (ci + (size_t)j + (size_t)kind) % 2 == 1 && kind != K_ALLTOALL,
                    .null_bufs = (ci + (size_t)j) % 3 == 0,
                    .offset = (ci + (size_t)j) % 4 == 3 ? 1 : 0,
                    .seed = seed + n * 7919 + 13,
                };
                k.count = j == 2 ? big_count(k.dtype) : counts[(ci * 2 + (size_t)j) % N_COUNTS];
                out[n++] = k;
            }
        }
        /* count 0 with NULL buffers: valid, touches nothing. */
        if (n < MAX_CASES)
            out[n++] = (struct ccase){.kind = (enum kind)kind,
                                      .dtype = COMM_F32,
                                      .op = COMM_SUM,
                                      .count = 0,
                                      .null_bufs = true,
                                      .seed = seed + n};
    }
    return n;
}

static void describe(const struct ccase *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s%s%s count %zu%s%s root %d off %zu", kind_names[k->kind],
             dname(k->dtype), kind_reduces(k->kind) ? " " : "",
             kind_reduces(k->kind) ? oname(k->op) : "", k->count, k->inplace ? " in place" : "",
             k->null_bufs ? " null" : "", k->root, k->offset);
}

/* ---- expected results ---- */

static uint64_t input_seed(const struct ccase *k, int r)
{
    return k->seed * 1000003u + (uint64_t)r * 7919u + 1;
}

/* Rank p's sendbuf contents. */
static void *make_input(const struct ccase *k, int n, int p)
{
    size_t e = send_elems(k, n);
    void *b = malloc(e * dsize(k->dtype) + 1);
    fill(b, e, k->dtype, input_seed(k, p));
    return b;
}

/*
 * The reduction of element idx of every rank's input into out[oi] (bits), and for floats
 * the float64 reference and its bound.  Returns the bound (0 for integers).
 */
static double emulate(const struct ccase *k, int n, void *const *in, size_t idx, bool narrow,
                      void *out, size_t oi, double *ref)
{
    comm_dtype_t t = k->dtype;
    comm_op_t op = k->op;
    *ref = 0;
    if (!is_float(t)) {
        uint64_t acc = 0;
        for (int p = 0; p < n; p++) {
            uint64_t x = get_u(in[p], idx, t);
            if (p == 0)
                acc = x;
            else if (op == COMM_SUM)
                acc += x;
            else if (op == COMM_PROD)
                acc *= x;
            else if (is_signed_int(t))
                acc = (op == COMM_MAX ? (int64_t)x > (int64_t)acc : (int64_t)x < (int64_t)acc)
                          ? x
                          : acc;
            else
                acc = (op == COMM_MAX ? x > acc : x < acc) ? x : acc;
        }
        put_u(out, oi, t, acc);
        return 0;
    }
    double r = 0, sabs = 0;
    if (t == COMM_F64) {
        double acc = 0;
        for (int p = 0; p < n; p++) {
            double x = ((const double *)in[p])[idx];
            if (p == 0) {
                acc = x;
                r = x;
            } else if (op == COMM_SUM || op == COMM_AVG) {
                acc = acc + x;
                r += x;
            } else if (op == COMM_PROD) {
                acc = acc * x;
                r *= x;
            } else {
                acc = (op == COMM_MAX ? x > acc : x < acc) ? x : acc;
                r = acc;
            }
            sabs += fabs(x);
        }
        if (op == COMM_AVG)
            acc = acc / (double)n;
        ((double *)out)[oi] = acc;
        *ref = op == COMM_AVG ? r / n : r;
        /* f64 rounding per step, exactly the emulation's: a loose bound suffices. */
        return (op == COMM_PROD ? fabs(r) : sabs) * n * 0x1.0p-50 + 1e-300;
    }
    float acc = 0;
    for (int p = 0; p < n; p++) {
        float x = get_f(in[p], idx, t);
        float w = narrow ? bf16_to_f(f_to_bf16(x)) : x;
        if (p == 0) {
            acc = w;
            r = x;
        } else if (op == COMM_SUM || op == COMM_AVG) {
            acc = acc + w;
            r += x;
        } else if (op == COMM_PROD) {
            acc = acc * w;
            r *= x;
        } else {
            acc = (op == COMM_MAX ? w > acc : w < acc) ? w : acc;
            r = (op == COMM_MAX ? x > r : x < r) ? x : r;
        }
        sabs += fabs(x);
    }
    if (op == COMM_AVG) {
        acc = acc / (float)n;
        r /= n;
        sabs /= n;
    }
    put_f(out, oi, t, acc);
    *ref = r;
    double bound = 0;
    if (op == COMM_SUM || op == COMM_AVG)
        bound = (n + 1) * 0x1.0p-23 * sabs;
    else if (op == COMM_PROD)
        bound = (n + 1) * 0x1.0p-23 * fabs(r);
    if (narrow)
        bound += 0x1.0p-8 * sabs;
    if (t != COMM_F32) /* the output's rounding (f16: also its subnormals) */
        bound += fabs(r) * (t == COMM_F16 ? 0x1.0p-11 : 0x1.0p-8) + (t == COMM_F16 ? 0x1.0p-24 : 0);
    return bound + 1e-30;
}

static double as_double(const void *b, size_t i, comm_dtype_t t)
{
    return t == COMM_F64 ? ((const double *)b)[i] : (double)get_f(b, i, t);
}

/*
 * What rank r must hold after case k (recv_elems), built from every rank's input; for
 * floats, ref and bound per element.  NULL for a reduce's non-root.
 */
static void *expected(const struct ccase *k, int n, int r, int config, void *const *in,
                      double **ref, double **bound)
{
    size_t es = dsize(k->dtype), re = recv_elems(k, n);
    *ref = *bound = NULL;
    if (k->kind == K_REDUCE && r != k->root)
        return NULL;
    uint8_t *out = malloc(re * es + 1);
    if (kind_reduces(k->kind)) {
        bool narrow = narrows(k, config);
        size_t base = k->kind == K_REDUCE_SCATTER ? (size_t)r * k->count : 0;
        if (is_float(k->dtype)) {
            *ref = malloc(re * sizeof(double) + 1);
            *bound = malloc(re * sizeof(double) + 1);
        }
        for (size_t i = 0; i < re; i++) {
            double rf;
            double b = emulate(k, n, in, base + i, narrow, out, i, &rf);
            if (*ref) {
                (*ref)[i] = rf;
                (*bound)[i] = b;
            }
        }
        return out;
    }
    size_t blk = k->count * es;
    if (k->kind == K_BROADCAST) {
        memcpy(out, in[k->root], blk);
    } else {
        for (int p = 0; p < n; p++) /* allgather: p's input; alltoall: p's block r */
            memcpy(out + (size_t)p * blk,
                   (const uint8_t *)in[p] + (k->kind == K_ALLTOALL ? (size_t)r * blk : 0), blk);
    }
    return out;
}

/* ---- one rank's part of a case ---- */

struct rank {
    int rank, nranks, device;
    comm_t *comm;
    cudaStream_t stream;
    uint8_t *da, *db; /* device buffers: sendbuf (out of place), recvbuf / in place */
    size_t cap;       /* bytes of each */
    uint8_t *host;    /* cap bytes */
    /* The current case. */
    void *send, *recv;
    void *input;    /* this rank's sendbuf contents */
    const char *id; /* thread ranks: the communicator to join */
};

static size_t cap_for(const struct ccase *cases, size_t n, int nranks)
{
    size_t cap = 4096;
    for (size_t i = 0; i < n; i++) {
        size_t e = send_elems(&cases[i], nranks);
        if (recv_elems(&cases[i], nranks) > e)
            e = recv_elems(&cases[i], nranks);
        size_t b = (e + cases[i].offset) * dsize(cases[i].dtype) + GUARD;
        if (b > cap)
            cap = b;
    }
    return (cap + 4095) / 4096 * 4096;
}

static void rank_alloc(struct rank *r, size_t cap)
{
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "stream");
    r->cap = cap;
    cuda_ok(cudaMalloc((void **)&r->da, cap), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&r->db, cap), "cudaMalloc");
    r->host = malloc(cap);
}

static void rank_free(struct rank *r)
{
    cudaSetDevice(r->device);
    cudaFree(r->da);
    cudaFree(r->db);
    cudaStreamDestroy(r->stream);
    free(r->host);
}

static comm_t *init_comm(int rank, int nranks, int device, const char *id, int timeout_ms)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = nranks;
    cfg.rank = rank;
    snprintf(cfg.id.str, sizeof(cfg.id.str), "%s", id);
    cfg.device = COMM_DEVICE_CUDA;
    cfg.device_index = device;
    cfg.timeout_ms = timeout_ms;
    comm_t *c = NULL;
    comm_status_t st = comm_init(&c, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "FAIL: rank %d comm_init: %s: %s\n", rank, comm_status_string(st),
                comm_last_error(NULL));
        exit(1);
    }
    transport_check(c, rank);
    return c;
}

/* Poisons both buffers, uploads this rank's input where the case wants it. */
static void stage(struct rank *r, const struct ccase *k)
{
    int n = r->nranks, me = r->rank;
    size_t es = dsize(k->dtype), off = k->offset * es;
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaMemset(r->da, 0xff, r->cap), "poison"); /* NaN in every float type */
    cuda_ok(cudaMemset(r->db, 0xff, r->cap), "poison");
    r->input = k->count ? make_input(k, n, me) : NULL;
    size_t sbytes = send_elems(k, n) * es;
    r->send = r->da + off;
    r->recv = r->db + off;
    if (k->inplace) {
        switch (k->kind) {
        case K_ALLGATHER:
            r->send = r->db + off + (size_t)me * k->count * es;
            break;
        case K_REDUCE_SCATTER:
            r->send = r->db + off;
            r->recv = r->db + off + (size_t)me * k->count * es;
            break;
        case K_BROADCAST:
        case K_REDUCE:
            if (me == k->root)
                r->send = r->recv;
            break;
        default:
            r->send = r->recv;
            break;
        }
    }
    if (k->count)
        cuda_ok(cudaMemcpy(r->send, r->input, sbytes, cudaMemcpyHostToDevice), "upload");
    if (k->null_bufs && k->kind == K_BROADCAST && me != k->root)
        r->send = NULL;
    if (k->null_bufs && k->kind == K_REDUCE && me != k->root)
        r->recv = NULL;
    if (k->count == 0)
        r->send = r->recv = NULL;
    /* cudaMemcpy from pageable memory may return before its DMA ends, and the legacy
     * stream does not order the non-blocking stream the collective runs on. */
    cuda_ok(cudaStreamSynchronize(0), "waiting for the uploads");
}

static comm_status_t enqueue(struct rank *r, const struct ccase *k)
{
    void *s = r->stream;
    switch (k->kind) {
    case K_ALLREDUCE:
        return comm_allreduce(r->comm, r->send, r->recv, k->count, k->dtype, k->op, s);
    case K_BROADCAST:
        return comm_broadcast(r->comm, r->send, r->recv, k->count, k->dtype, k->root, s);
    case K_REDUCE:
        return comm_reduce(r->comm, r->send, r->recv, k->count, k->dtype, k->op, k->root, s);
    case K_ALLGATHER:
        return comm_allgather(r->comm, r->send, r->recv, k->count, k->dtype, s);
    case K_REDUCE_SCATTER:
        return comm_reduce_scatter(r->comm, r->send, r->recv, k->count, k->dtype, k->op, s);
    case K_ALLTOALL:
        return comm_alltoall(r->comm, r->send, r->recv, k->count, k->dtype, s);
    }
    return COMM_ERR_INVALID;
}

static bool all_poison(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff)
            return false;
    return true;
}

/*
 * Waits for rank r's call, downloads and checks everything; returns the wrong elements
 * (and writes the hash of its output).
 */
static long check(struct rank *r, const struct ccase *k, int config, uint64_t *hash)
{
    int n = r->nranks, me = r->rank;
    size_t es = dsize(k->dtype), off = k->offset * es;
    size_t rbytes = recv_elems(k, n) * es;
    char what[160];
    describe(k, what, sizeof(what));
    cuda_ok(cudaSetDevice(r->device), "cudaSetDevice");
    cuda_ok(cudaStreamSynchronize(r->stream), "cudaStreamSynchronize");
    /* All of db from the output's start (in-place reduce_scatter: from its sendbuf's, the
     * output is block me): output, guard, the rest. */
    size_t span = r->cap - off;
    cuda_ok(cudaMemcpy(r->host, r->db + off, span, cudaMemcpyDeviceToHost), "download");
    const uint8_t *out = r->host;
    if (k->kind == K_REDUCE_SCATTER && k->inplace)
        out = r->host + (size_t)me * k->count * es;
    size_t out_end = (size_t)(out - r->host) + rbytes;
    *hash = 0xcbf29ce484222325ull;
    long wrong = 0;

    if (k->count == 0) {
        CHECK(all_poison(r->host, span), "rank %d: %s wrote memory", me, what);
        free(r->input);
        return 0;
    }
    void *in[MAX_RANKS];
    for (int p = 0; p < n; p++)
        in[p] = p == me ? r->input : make_input(k, n, p);
    double *ref, *bound;
    uint8_t *want = expected(k, n, me, config, in, &ref, &bound);
    if (want == NULL) {
        /* A reduce's non-root: its recvbuf (when it passed one) is not written. */
        CHECK(all_poison(r->host, span), "rank %d: %s wrote the recvbuf of a non-root", me, what);
    } else {
        for (size_t i = 0; i < recv_elems(k, n); i++) {
            bool bits_ok = memcmp(out + i * es, want + i * es, es) == 0;
            bool ref_ok = true;
            if (ref != NULL) {
                double v = as_double(out, i, k->dtype);
                ref_ok = fabs(v - ref[i]) <= bound[i];
            }
            if (bits_ok && ref_ok)
                continue;
            if (wrong++ < 3) {
                uint64_t got = 0, exp = 0;
                memcpy(&got, out + i * es, es);
                memcpy(&exp, want + i * es, es);
                fprintf(
                    stderr, "  rank %d %s: [%zu] = 0x%llx (%.9g), expected 0x%llx (%.9g)%s%s\n", me,
                    what, i, (unsigned long long)got,
                    is_float(k->dtype) ? as_double(out, i, k->dtype) : 0.0, (unsigned long long)exp,
                    is_float(k->dtype) ? as_double(want, i, k->dtype) : 0.0,
                    bits_ok ? "" : " (bits differ)", ref_ok ? "" : " (outside the float64 bound)");
            }
        }
        for (size_t i = 0; i < rbytes; i++)
            *hash = (*hash ^ out[i]) * 0x100000001b3ull;
        /* In place, the other blocks of sendbuf keep the input. */
        size_t used = out_end;
        if (k->kind == K_REDUCE_SCATTER && k->inplace) {
            size_t blk = k->count * es;
            for (int p = 0; p < n; p++)
                CHECK(p == me || memcmp(r->host + (size_t)p * blk,
                                        (const uint8_t *)r->input + (size_t)p * blk, blk) == 0,
                      "rank %d: %s changed block %d of its sendbuf", me, what, p);
            used = (size_t)n * blk;
        }
        /* Past the output (the guard and the rest of the buffer): the poison. */
        CHECK(all_poison(r->host + used, span - used), "rank %d: %s wrote past its recvbuf", me,
              what);
    }
    CHECK(wrong == 0, "rank %d: %s: %ld wrong elements", me, what, wrong);
    for (int p = 0; p < n; p++)
        free(in[p]);
    free(want);
    free(ref);
    free(bound);
    return wrong;
}

/* AVG of an integer type: COMM_ERR_UNSUPPORTED on every rank, and the communicator stays
 * usable (the cases run on it next). */
static void check_unsupported(struct rank *r)
{
    comm_status_t st = comm_allreduce(r->comm, r->db, r->db, 16, COMM_I32, COMM_AVG, r->stream);
    CHECK(st == COMM_ERR_UNSUPPORTED, "rank %d: allreduce i32 avg returned %s (%s)", r->rank,
          comm_status_string(st), comm_last_error(r->comm));
    st = comm_reduce_scatter(r->comm, r->da, r->db, 16, COMM_U8, COMM_AVG, r->stream);
    CHECK(st == COMM_ERR_UNSUPPORTED, "rank %d: reduce_scatter u8 avg returned %s (%s)", r->rank,
          comm_status_string(st), comm_last_error(r->comm));
}

/* ---- mismatches: each scenario on a communicator of its own ---- */

/* Rank r's call in scenario s: the ranks disagree on the collective or the root. */
static comm_status_t mismatch_call(struct rank *r, int s)
{
    void *a = r->da, *b = r->db, *st = r->stream;
    comm_t *c = r->comm;
    bool first = r->rank == 0;
    switch (s) {
    case 0: /* broadcast against allgather, one chunk */
        return first ? comm_broadcast(c, a, b, 1000, COMM_F32, 0, st)
                     : comm_allgather(c, a, b, 1000, COMM_F32, st);
    case 1: /* broadcast from root 0 against from the last rank, many chunks */
        return comm_broadcast(c, a, b, 300007, COMM_F32, first ? 0 : r->nranks - 1, st);
    case 2: /* a kernel-path allreduce against a reduce */
        return first ? comm_allreduce(c, a, b, 1000, COMM_F32, COMM_SUM, st)
                     : comm_reduce(c, a, b, 1000, COMM_F32, COMM_SUM, 0, st);
    default: /* reduce_scatter against alltoall */
        return first ? comm_reduce_scatter(c, a, b, 65537, COMM_F32, COMM_SUM, st)
                     : comm_alltoall(c, a, b, 65537, COMM_F32, st);
    }
}

static const char *const mismatch_names[N_MISMATCH] = {
    "broadcast vs allgather", "broadcast roots 0 vs last", "allreduce vs reduce",
    "reduce_scatter vs alltoall"};

/* After the mismatched call: the next call says why (MISMATCH, or PEER: a peer said it
 * first).  Returns the status. */
static comm_status_t mismatch_outcome(struct rank *r)
{
    cuda_ok(cudaSetDevice(r->device), "set");
    cuda_ok(cudaStreamSynchronize(r->stream), "sync after a mismatched call");
    comm_status_t st = comm_barrier(r->comm);
    CHECK(st == COMM_ERR_MISMATCH || st == COMM_ERR_PEER,
          "mismatch: rank %d's next call returned %s (%s)", r->rank, comm_status_string(st),
          comm_last_error(r->comm));
    return st;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- a call no peer makes: the GPU's wait ends at the timeout, or at comm_abort ---- */

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

static const char *const lonely_names[N_LONELY] = {"allgather no peer makes (timeout)",
                                                   "reduce no peer makes (comm_abort)"};
/* The communicator's timeout in scenario s. */
static int lonely_timeout_ms(int s)
{
    return s == 0 ? 1000 : 60000;
}

/*
 * Rank 0 makes a multi-chunk call that no peer makes: scenario 0 waits for its GPU to
 * give up at the timeout, scenario 1 aborts it after 200 ms; either way the stream is
 * free within seconds and the next call says why.  The peers wait (3 s, so that rank 0
 * fails first, deterministically), then their next call hears of rank 0's failure.
 * Returns whether this rank saw what it should.
 */
static bool lonely_call(struct rank *r, int s)
{
    int before = g_fail;
    cuda_ok(cudaSetDevice(r->device), "set");
    if (r->rank != 0) {
        struct timespec ts = {.tv_sec = 3, .tv_nsec = 0};
        nanosleep(&ts, NULL);
        comm_status_t st = comm_barrier(r->comm);
        CHECK(st == COMM_ERR_PEER, "%s: rank %d's next call returned %s (%s)", lonely_names[s],
              r->rank, comm_status_string(st), comm_last_error(r->comm));
        return g_fail == before;
    }
    uint64_t t0 = now_ms();
    comm_status_t st = s == 0 ? comm_allgather(r->comm, r->da, r->db, 300007, COMM_F32, r->stream)
                              : comm_reduce(r->comm, r->da, r->db, 300007, COMM_F32, COMM_SUM,
                                            r->nranks - 1, r->stream);
    CHECK(st == COMM_OK, "%s: rank 0's enqueue returned %s (%s)", lonely_names[s],
          comm_status_string(st), comm_last_error(r->comm));
    pthread_t t;
    struct abort_arg a = {.comm = r->comm, .delay_ms = 200};
    if (s == 1)
        pthread_create(&t, NULL, abort_later, &a);
    cuda_ok(cudaStreamSynchronize(r->stream), "sync after a call no peer made");
    uint64_t took = now_ms() - t0;
    if (s == 1)
        pthread_join(t, NULL);
    CHECK(took < 5000, "%s: rank 0's GPU waited %llu ms", lonely_names[s],
          (unsigned long long)took);
    st = comm_barrier(r->comm);
    const char *msg = comm_last_error(r->comm);
    comm_status_t want = s == 0 ? COMM_ERR_TIMEOUT : COMM_ERR_ABORTED;
    CHECK(st == want && (s != 0 || strstr(msg, "rank 1") != NULL),
          "%s: rank 0's next call returned %s (%s)", lonely_names[s], comm_status_string(st), msg);
    fprintf(stderr, "     %s: %llu ms, then %s: %s\n", lonely_names[s], (unsigned long long)took,
            comm_status_string(st), msg);
    return g_fail == before;
}

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
    size_t ncases = make_cases(cases, nranks, seed);
    struct rank r = {.rank = rank, .nranks = nranks, .device = rank % g_ndev};
    rank_alloc(&r, cap_for(cases, ncases, nranks));
    r.comm = init_comm(rank, nranks, r.device, argv[6], 30000);
    check_unsupported(&r);
    for (size_t i = 0; i < ncases; i++) {
        stage(&r, &cases[i]);
        comm_status_t st = enqueue(&r, &cases[i]);
        uint64_t h = 0;
        long wrong = -1;
        if (st == COMM_OK) {
            wrong = check(&r, &cases[i], config, &h);
        } else {
            char what[160];
            describe(&cases[i], what, sizeof(what));
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
        r.comm = init_comm(rank, nranks, r.device, argv[7 + s], 5000);
        /* recvbuf (all of db) poisoned: nothing may land there. */
        cuda_ok(cudaMemset(r.db, 0x5a, r.cap), "poison");
        cuda_ok(cudaDeviceSynchronize(), "poison");
        comm_status_t st = mismatch_call(&r, s);
        if (st == COMM_OK)
            st = mismatch_outcome(&r);
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
        uint64_t t0 = now_ms();
        comm_destroy(r.comm);
        CHECK(now_ms() - t0 < 15000, "mismatch: comm_destroy took %llu ms",
              (unsigned long long)(now_ms() - t0));
    }
    for (int s = 0; config == 0 && s < N_LONELY; s++) {
        r.comm = init_comm(rank, nranks, r.device, argv[7 + N_MISMATCH + s], lonely_timeout_ms(s));
        bool ok = lonely_call(&r, s);
        uint64_t t0 = now_ms();
        comm_destroy(r.comm);
        CHECK(now_ms() - t0 < 15000, "%s: comm_destroy took %llu ms", lonely_names[s],
              (unsigned long long)(now_ms() - t0));
        printf("lonely %d ok %d\n", s, ok ? 1 : 0);
    }
    rank_free(&r);
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
    size_t ncases = make_cases(cases, nranks, seed);
    config_env(config);
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
    config_env(0);
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
            describe(&cases[i], what, sizeof(what));
            CHECK(strstr(lines[r][i], "wrong 0 ") != NULL, "process rank %d, %s: %s", r, what,
                  lines[r][i]);
            if (same_everywhere(cases[i].kind))
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
    r->comm = init_comm(r->rank, r->nranks, r->device, r->id, j->timeout_ms);
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
    config_env(config);
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        j->r[r] = (struct rank){.rank = r, .nranks = nranks, .device = r % g_ndev};
        rank_alloc(&j->r[r], cap_for(cases, n, nranks));
        j->r[r].id = id.str;
    }
    for (int r = 0; r < nranks; r++)
        pthread_create(&t[r], NULL, init_thread, &j->r[r]);
    for (int r = 0; r < nranks; r++)
        pthread_join(t[r], NULL);
    config_env(0);
}

static void tjob_destroy(struct tjob *j)
{
    for (int r = 0; r < j->nranks; r++) {
        comm_status_t st = comm_destroy(j->r[r].comm);
        CHECK(st == COMM_OK, "comm_destroy rank %d: %s", r, comm_status_string(st));
        rank_free(&j->r[r]);
    }
}

static void *case_thread(void *arg)
{
    struct rank *r = arg;
    struct tjob *j = (struct tjob *)((char *)(r - r->rank) - offsetof(struct tjob, r));
    check_unsupported(r);
    for (size_t i = 0; i < j->ncases; i++) {
        stage(r, &j->cases[i]);
        comm_status_t st = enqueue(r, &j->cases[i]);
        CHECK(st == COMM_OK, "rank %d: case %zu: %s: %s", r->rank, i, comm_status_string(st),
              comm_last_error(r->comm));
        if (st != COMM_OK) {
            free(r->input);
            break;
        }
        j->wrong[r->rank] += check(r, &j->cases[i], j->config, &j->hash[i][r->rank]);
    }
    return NULL;
}

/* mode 0: a thread per rank; 1: one thread, rank 0 first; 2: one thread, last rank first. */
static void test_threads(int nranks, int config, int mode)
{
    int before = g_fail;
    static struct ccase cases[MAX_CASES];
    size_t n = make_cases(cases, nranks, (uint64_t)time(NULL) * 17 + (uint64_t)mode);
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
            check_unsupported(&j->r[r]);
        for (size_t i = 0; i < n; i++) {
            for (int r = 0; r < nranks; r++)
                stage(&j->r[r], &cases[i]);
            bool ok = true;
            for (int q = 0; q < nranks; q++) {
                int r = mode == 2 ? nranks - 1 - q : q;
                comm_status_t st = enqueue(&j->r[r], &cases[i]);
                CHECK(st == COMM_OK, "rank %d: case %zu: %s: %s", r, i, comm_status_string(st),
                      comm_last_error(j->r[r].comm));
                ok = ok && st == COMM_OK;
            }
            for (int r = 0; r < nranks; r++) {
                if (ok)
                    j->wrong[r] += check(&j->r[r], &cases[i], config, &j->hash[i][r]);
                else
                    free(j->r[r].input);
            }
            if (!ok)
                break;
        }
    }
    for (size_t i = 0; i < n; i++)
        for (int r = 1; r < nranks; r++)
            CHECK(!same_everywhere(cases[i].kind) || j->hash[i][r] == j->hash[i][0],
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
            comm_status_t st = mismatch_call(&j->r[r], s);
            /* A later rank may already hear of the disagreement. */
            CHECK(st == COMM_OK || (r > 1 && (st == COMM_ERR_PEER || st == COMM_ERR_MISMATCH)),
                  "mismatch %s: rank %d's call returned %s", mismatch_names[s], r,
                  comm_status_string(st));
        }
        int mismatch = 0;
        for (int r = 0; r < nranks; r++) {
            comm_status_t st = mismatch_outcome(&j->r[r]);
            mismatch += st == COMM_ERR_MISMATCH;
            if (r == 0)
                printf("     %s: %s: %s\n", mismatch_names[s], comm_status_string(st),
                       comm_last_error(j->r[r].comm));
        }
        CHECK(mismatch > 0, "mismatch %s: no rank reported COMM_ERR_MISMATCH", mismatch_names[s]);
        uint64_t t0 = now_ms();
        tjob_destroy(j);
        free(j);
        CHECK(now_ms() - t0 < 15000, "mismatch: comm_destroy took %llu ms",
              (unsigned long long)(now_ms() - t0));
    }
    printf("%s mismatched collectives and roots (%d scenarios, thread ranks)\n",
           g_fail == before ? "ok  " : "FAIL", N_MISMATCH);
}

static void *lonely_thread(void *arg)
{
    struct rank *r = arg;
    struct tjob *j = (struct tjob *)((char *)(r - r->rank) - offsetof(struct tjob, r));
    lonely_call(r, j->scenario);
    return NULL;
}

static void test_thread_lonely(int nranks)
{
    int before = g_fail;
    static const struct ccase none[1] = {{.kind = K_ALLTOALL, .dtype = COMM_F32, .count = 300007}};
    for (int s = 0; s < N_LONELY; s++) {
        struct tjob *j = calloc(1, sizeof(*j));
        tjob_init(j, nranks, 0, none, 1, lonely_timeout_ms(s));
        j->scenario = s;
        pthread_t t[MAX_RANKS];
        for (int r = 0; r < nranks; r++)
            pthread_create(&t[r], NULL, lonely_thread, &j->r[r]);
        for (int r = 0; r < nranks; r++)
            pthread_join(t[r], NULL);
        uint64_t t0 = now_ms();
        tjob_destroy(j);
        free(j);
        CHECK(now_ms() - t0 < 15000, "%s: comm_destroy took %llu ms", lonely_names[s],
              (unsigned long long)(now_ms() - t0));
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
