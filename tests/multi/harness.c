/* SPDX-License-Identifier: MIT */
/*
 * The multi-rank harness (see harness.h).  The float64 reference decodes f16/bf16 by
 * itself, not through arcomm's conversions, so a conversion bug cannot hide.
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stddef.h>

#include <cmocka.h>

static struct h_rank *results; /* shared mapping: [H_MAX_RANKS] */
static uint8_t *outs;          /* shared mapping: [H_MAX_RANKS][H_OUT_BYTES] */

double h_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool h_quick(void)
{
    const char *q = getenv("ARCOMM_TEST_QUICK");
    return q != NULL && q[0] == '1';
}

/* The first error is kept for the report; with ARCOMM_TEST_VERBOSE set, every error is
 * also printed as it happens (to see what followed the first on a device run). */
void h_fail(struct h_rank *r, const char *fmt, ...)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("ARCOMM_TEST_VERBOSE") != NULL;
    if (verbose) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "[error %ld, rank %d] ", r->errors + 1, r->rank);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    if (r->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(r->first_error, sizeof(r->first_error), "rank %d: ", r->rank);
        vsnprintf(r->first_error + n, sizeof(r->first_error) - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

/* Every id the tests made: only their segments are ours to look for (other jobs may
 * run on the machine at the same time). */
static comm_id_t made[4096];
static int nmade;

void h_id_new(comm_id_t *id)
{
    if (comm_id_new(id) != COMM_OK)
        abort();
    if (nmade < 4096)
        made[nmade++] = *id;
}

static void segment_path(const comm_id_t *id, char *path, size_t len)
{
    snprintf(path, len, "/dev/shm/arcomm-%s", id->str + 5);
}

bool h_segment_exists(const comm_id_t *id)
{
    char path[128];
    segment_path(id, path, sizeof(path));
    return access(path, F_OK) == 0;
}

int h_shm_leftovers(void)
{
    int n = 0;
    for (int i = 0; i < nmade; i++) {
        if (h_segment_exists(&made[i])) {
            char path[128];
            segment_path(&made[i], path, sizeof(path));
            fprintf(stderr, "left behind: %s\n", path);
            n++;
        }
    }
    return n;
}

void h_allreduce_checked(struct h_rank *r, size_t count, uint64_t seed, const char *what)
{
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    if (send == NULL || recv == NULL) {
        h_fail(r, "%s: out of memory", what);
    } else {
        h_fill(send, count, COMM_F32, seed, r->rank);
        h_poison(recv, count, COMM_F32);
        comm_status_t st = comm_allreduce(r->comm, send, recv, count, COMM_F32, COMM_SUM, NULL);
        if (st != COMM_OK)
            h_fail(r, "%s: %s", what, comm_last_error(r->comm));
        else
            h_check(r, recv, count, COMM_F32, COMM_SUM, seed, r->nranks, NULL, 0, false);
    }
    free(send);
    free(recv);
}

uint64_t h_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool h_dtype_is_int(comm_dtype_t dtype)
{
    return dtype == COMM_I8 || dtype == COMM_U8 || dtype == COMM_I32 || dtype == COMM_U32 ||
           dtype == COMM_I64 || dtype == COMM_U64;
}

static bool dtype_is_signed(comm_dtype_t dtype)
{
    return dtype == COMM_I8 || dtype == COMM_I32 || dtype == COMM_I64;
}

const char *h_dtype_name(comm_dtype_t dtype)
{
    static const char *const names[] = {"f32", "f16", "bf16", "f64", "i32",
                                        "i64", "i8",  "u8",   "u32", "u64"};
    return (unsigned)dtype < sizeof(names) / sizeof(names[0]) ? names[dtype] : "?";
}

const char *h_op_name(comm_op_t op)
{
    static const char *const names[] = {"sum", "max", "min", "prod", "avg"};
    return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}

/* Stores the low bytes of v as element i of an integer buffer. */
static void put_int(void *buf, size_t i, comm_dtype_t dtype, uint64_t v)
{
    switch (dtype) {
    case COMM_I8:
    case COMM_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case COMM_I32:
    case COMM_U32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    default:
        ((uint64_t *)buf)[i] = v;
        break;
    }
}

/* PROD's floats: either sign, magnitude in [0.75, 1.25), exact in the dtype. */
static void fill_near1(void *buf, size_t i, comm_dtype_t dtype, uint64_t x)
{
    bool neg = (x >> 62) & 1, above = (x >> 61) & 1;
    switch (dtype) {
    case COMM_F32: {
        float f = 0.75f + (float)(x & 0x3fffff) * 0x1p-23f; /* k * 2^-23, k < 2^22 */
        ((float *)buf)[i] = neg ? -f : f;
        break;
    }
    case COMM_F64: {
        double f = 0.75 + (double)(x & 0x7ffffffffffffull) * 0x1p-52;
        ((double *)buf)[i] = neg ? -f : f;
        break;
    }
    case COMM_F16: /* [1, 1.25): exponent 15, mantissa < 256; [0.75, 1): 14, >= 512 */
        ((uint16_t *)buf)[i] =
            (uint16_t)((neg ? 0x8000 : 0) |
                       (above ? 15 << 10 | (x & 0xff) : 14 << 10 | 0x200 | (x & 0x1ff)));
        break;
    default: /* BF16: exponent 127, mantissa < 32; or 126, mantissa >= 64 */
        ((uint16_t *)buf)[i] =
            (uint16_t)((neg ? 0x8000 : 0) |
                       (above ? 127 << 7 | (x & 0x1f) : 126 << 7 | 0x40 | (x & 0x3f)));
        break;
    }
}

void h_fill_op(void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed, int rank)
{
    uint64_t s = seed * 1000003u + (uint64_t)rank * 7919u + 1;
    for (size_t i = 0; i < count; i++) {
        uint64_t x = h_rand(&s);
        if (op == COMM_PROD && !h_dtype_is_int(dtype)) {
            fill_near1(buf, i, dtype, x);
            continue;
        }
        switch (dtype) {
        case COMM_F32: {
            /* Non-zero, mixed signs and magnitudes in [2^-4, 2^4). */
            float f = ldexpf(1.0f + (float)(x & 0xffffff) / 16777216.0f, (int)((x >> 24) % 8) - 4);
            ((float *)buf)[i] = (x >> 40) & 1 ? -f : f;
            break;
        }
        case COMM_F64: {
            double f = ldexp(1.0 + (double)(x & 0xfffffffffffull) / 17592186044416.0,
                             (int)((x >> 44) % 8) - 4);
            ((double *)buf)[i] = (x >> 52) & 1 ? -f : f;
            break;
        }
        case COMM_F16: /* exponent field 11..18: 2^-4 .. 2^3 */
            ((uint16_t *)buf)[i] =
                (uint16_t)(((x >> 20) & 1) << 15 | (11 + (x >> 10) % 8) << 10 | (x & 0x3ff));
            break;
        case COMM_BF16: /* exponent field 123..130 */
            ((uint16_t *)buf)[i] =
                (uint16_t)(((x >> 20) & 1) << 15 | (123 + (x >> 10) % 8) << 7 | (x & 0x7f));
            break;
        case COMM_I32:
            ((int32_t *)buf)[i] = (int32_t)(uint32_t)x;
            break;
        case COMM_I64:
            ((int64_t *)buf)[i] = (int64_t)x;
            break;
        default: /* I8, U8, U32, U64: the whole range; odd for PROD */
            put_int(buf, i, dtype, op == COMM_PROD ? x | 1 : x);
            break;
        }
    }
}

void h_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank)
{
    h_fill_op(buf, count, dtype, COMM_SUM, seed, rank);
}

void h_poison(void *buf, size_t count, comm_dtype_t dtype)
{
    size_t es = comm_dtype_size(dtype);
    if (h_dtype_is_int(dtype))
        memset(buf, 0x5b, count * es);
    else
        memset(buf, 0xff, count * es); /* NaN in every float format */
}

bool h_poisoned(const void *buf, size_t count, comm_dtype_t dtype)
{
    const uint8_t *b = buf;
    uint8_t want = h_dtype_is_int(dtype) ? 0x5b : 0xff;
    for (size_t i = 0; i < count * comm_dtype_size(dtype); i++)
        if (b[i] != want)
            return false;
    return true;
}

bool h_holds(const void *buf, size_t count, comm_dtype_t dtype, comm_op_t op, uint64_t seed,
             int rank)
{
    size_t bytes = count * comm_dtype_size(dtype);
    void *ref = malloc(bytes + 1);
    if (ref == NULL)
        return false;
    h_fill_op(ref, count, dtype, op, seed, rank);
    bool same = memcmp(ref, buf, bytes) == 0;
    free(ref);
    return same;
}

uint64_t h_hash_more(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t h_hash(const void *p, size_t n)
{
    return h_hash_more(1469598103934665603ull, p, n);
}

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
    int e = (b >> 7) & 0xff, m = b & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return b & 0x8000 ? -v : v;
}

double h_get(const void *buf, size_t i, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32:
        return ((const float *)buf)[i];
    case COMM_F64:
        return ((const double *)buf)[i];
    case COMM_F16:
        return half_to_double(((const uint16_t *)buf)[i]);
    case COMM_BF16:
        return bf16_to_double(((const uint16_t *)buf)[i]);
    case COMM_I32:
        return ((const int32_t *)buf)[i];
    case COMM_I64:
        return (double)((const int64_t *)buf)[i];
    case COMM_I8:
        return ((const int8_t *)buf)[i];
    case COMM_U8:
        return ((const uint8_t *)buf)[i];
    case COMM_U32:
        return ((const uint32_t *)buf)[i];
    case COMM_U64:
        return (double)((const uint64_t *)buf)[i];
    }
    return NAN;
}

/* Element i of an integer buffer as 64 bits: sign-extended for the signed dtypes,
 * zero-extended for the unsigned ones. */
static uint64_t get_int(const void *buf, size_t i, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_I8:
        return (uint64_t)(int64_t)((const int8_t *)buf)[i];
    case COMM_U8:
        return ((const uint8_t *)buf)[i];
    case COMM_I32:
        return (uint64_t)(int64_t)((const int32_t *)buf)[i];
    case COMM_U32:
        return ((const uint32_t *)buf)[i];
    default:
        return ((const uint64_t *)buf)[i];
    }
}

/* A 64-bit wrapped result brought to the dtype's width, extended as get_int does. */
static uint64_t int_norm(uint64_t v, comm_dtype_t dtype)
{
    uint8_t b[8];
    put_int(b, 0, dtype, v);
    return get_int(b, 0, dtype);
}

/* bf16 rounding of an f32 value, done independently of arcomm (round to nearest even). */
static double round_bf16(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* One unit in the last place of v in dtype (floats), for the rounding bound. */
static double ulp(double v, comm_dtype_t dtype)
{
    int bits = dtype == COMM_F16 ? 11 : dtype == COMM_BF16 ? 8 : dtype == COMM_F32 ? 24 : 53;
    double min = dtype == COMM_F16 ? ldexp(1, -24) : dtype == COMM_BF16 ? ldexp(1, -133) : 0;
    int e;
    frexp(fabs(v), &e);
    double u = ldexp(1, e - bits);
    return u > min ? u : min;
}

long h_check(struct h_rank *r, const void *out, size_t count, comm_dtype_t dtype, comm_op_t op,
             uint64_t seed, int nranks, const void *addend, size_t addend_count, bool narrow)
{
    size_t es = comm_dtype_size(dtype);
    bool ints = h_dtype_is_int(dtype), sgn = dtype_is_signed(dtype);
    if (ints && op == COMM_AVG) {
        h_fail(r, "h_check: AVG of %s has no result (the call must return COMM_ERR_UNSUPPORTED)",
               h_dtype_name(dtype));
        return (long)count;
    }
    uint8_t *in[H_MAX_RANKS];
    for (int p = 0; p < nranks; p++) {
        in[p] = malloc(count * es + 1);
        h_fill_op(in[p], count, dtype, op, seed, p);
    }
    double eps = dtype == COMM_F64 ? ldexp(1, -52) : ldexp(1, -23);
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        bool ok;
        double got = h_get(out, i, dtype), want = 0, mag = 0;
        if (ints) {
            /* 64-bit wrapping, then the dtype's width: the same low bits. */
            uint64_t acc = get_int(in[0], i, dtype);
            for (int p = 1; p < nranks; p++) {
                uint64_t v = get_int(in[p], i, dtype);
                bool gt = sgn ? (int64_t)v > (int64_t)acc : v > acc;
                bool lt = sgn ? (int64_t)v < (int64_t)acc : v < acc;
                if (op == COMM_SUM)
                    acc += v;
                else if (op == COMM_PROD)
                    acc *= v;
                else if (op == COMM_MAX)
                    acc = gt ? v : acc;
                else
                    acc = lt ? v : acc;
            }
            if (addend)
                acc += get_int(addend, i % addend_count, dtype);
            acc = int_norm(acc, dtype);
            ok = get_int(out, i, dtype) == acc;
            want = sgn ? (double)(int64_t)acc : (double)acc;
        } else {
            double sum_tol;
            for (int p = 0; p < nranks; p++) {
                double v = h_get(in[p], i, dtype);
                if (narrow)
                    v = round_bf16(v);
                if (p == 0)
                    want = v;
                else if (op == COMM_SUM || op == COMM_AVG)
                    want += v;
                else if (op == COMM_PROD)
                    want *= v;
                else if (op == COMM_MAX)
                    want = v > want ? v : want;
                else
                    want = v < want ? v : want;
                mag += fabs(v);
            }
            if (addend) {
                double a = h_get(addend, i % addend_count, dtype);
                want += a;
                mag += fabs(a);
            }
            sum_tol = 2.0 * (nranks + 1) * eps * mag + (narrow ? ldexp(mag, -8) : 0);
            double tol = 0; /* MAX/MIN select a value: exact */
            if (op == COMM_SUM) {
                tol = sum_tol;
            } else if (op == COMM_PROD) {
                /* each step's relative rounding (the inputs are near 1; narrowed inputs
                 * are rounded above exactly as on the wire) */
                tol = 2.0 * (nranks + 1) * eps * fabs(want);
            } else if (op == COMM_AVG) {
                want /= nranks;
                tol = sum_tol / nranks + eps * fabs(want);
            }
            if (dtype == COMM_F16 || dtype == COMM_BF16)
                tol += ulp(want, dtype);
            ok = fabs(got - want) <= tol; /* false for NaN (poison left in place) */
        }
        if (!ok) {
            if (wrong == 0)
                h_fail(r, "element %zu of %zu (%s %s, %d ranks): got %.17g, want %.17g", i, count,
                       h_dtype_name(dtype), h_op_name(op), nranks, got, want);
            else
                r->errors++;
            wrong++;
        }
    }
    for (int p = 0; p < nranks; p++)
        free(in[p]);
    return wrong;
}

struct h_rank *h_run_killed(const struct h_job *job, double limit_ms, const char *what)
{
    double start = h_now_ms();
    struct h_rank *res = h_run(job);
    /* The harness stores when it killed the rank, from its own start. */
    double killed_at = start + res[job->kill_rank].elapsed_s * 1e3;
    res[job->kill_rank].errors = 0;
    for (int r = 0; r < job->nranks; r++) {
        double noticed = res[r].elapsed_s * 1e3 - killed_at;
        if (r != job->kill_rank && noticed > limit_ms)
            fail_msg("%s: rank %d noticed the dead rank after %.0f ms (limit %.0f)", what, r,
                     noticed, limit_ms);
    }
    return res;
}

bool h_comm_init(struct h_rank *r, int timeout_ms)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.timeout_ms = timeout_ms ? timeout_ms : 60000;
    comm_status_t st = comm_init(&r->comm, &cfg);
    if (st != COMM_OK) {
        h_fail(r, "comm_init: %s: %s", comm_status_string(st), comm_last_error(NULL));
        return false;
    }
    return true;
}

static void rank_main(struct h_rank *r, const struct h_job *job)
{
    if (!job->no_init && !h_comm_init(r, job->timeout_ms))
        return;
    __atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
    job->body(r);
    if (!job->no_init)
        comm_destroy(r->comm);
}

static void *thread_main(void *arg)
{
    struct h_rank *r = arg;
    const struct h_job *job = r->arg;
    r->arg = job->arg;
    rank_main(r, job);
    return NULL;
}

static void map_results(void)
{
    if (results != NULL)
        return;
    results = mmap(NULL, sizeof(struct h_rank) * H_MAX_RANKS, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    outs = mmap(NULL, (size_t)H_OUT_BYTES * H_MAX_RANKS, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (results == MAP_FAILED || outs == MAP_FAILED) {
        perror("harness mmap");
        abort();
    }
}

struct h_rank *h_run(const struct h_job *job)
{
    map_results();
    comm_id_t id;
    h_id_new(&id);
    for (int r = 0; r < job->nranks; r++) {
        struct h_rank *x = &results[r];
        memset(x, 0, sizeof(*x));
        x->rank = r;
        x->nranks = job->nranks;
        x->procs = job->procs;
        x->id = id;
        x->out = outs + (size_t)r * H_OUT_BYTES;
        x->arg = (void *)job;
    }
    if (!job->procs) {
        pthread_t t[H_MAX_RANKS];
        for (int r = 0; r < job->nranks; r++)
            pthread_create(&t[r], NULL, thread_main, &results[r]);
        for (int r = 0; r < job->nranks; r++)
            pthread_join(t[r], NULL);
        return results;
    }

    pid_t pid[H_MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < job->nranks; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            results[r].arg = job->arg;
            rank_main(&results[r], job);
            _exit(0);
        }
    }
    double start = h_now_ms(), ready_at = job->kill_after_ready ? -1 : 0;
    bool killed = false;
    int live = job->nranks;
    while (live > 0) {
        for (int r = 0; r < job->nranks; r++) {
            if (pid[r] <= 0)
                continue;
            int ws;
            if (waitpid(pid[r], &ws, WNOHANG) == pid[r]) {
                if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && r != job->kill_rank)
                    h_fail(&results[r], "process rank died (wait status 0x%x)", ws);
                pid[r] = 0;
                live--;
            }
        }
        double t = h_now_ms() - start;
        if (ready_at < 0) {
            int ready = 0;
            for (int r = 0; r < job->nranks; r++)
                ready += __atomic_load_n(&results[r].ready, __ATOMIC_ACQUIRE) != 0;
            if (ready == job->nranks)
                ready_at = t;
        }
        if (!killed && job->kill_rank >= 0 && ready_at >= 0 && t - ready_at >= job->kill_after_ms &&
            pid[job->kill_rank] > 0) {
            kill(pid[job->kill_rank], SIGKILL);
            results[job->kill_rank].elapsed_s = t / 1e3; /* when it was killed */
            killed = true;
        }
        if (t > 180000) {
            for (int r = 0; r < job->nranks; r++) {
                if (pid[r] > 0) {
                    h_fail(&results[r], "process rank hung for 180 s: killed");
                    kill(pid[r], SIGKILL);
                }
            }
        }
        usleep(1000);
    }
    return results;
}

static struct {
    char *name;
    char *old;
} pushed[32];
static int npushed;

void h_env_push(const char *name, const char *value)
{
    const char *old = getenv(name);
    pushed[npushed].name = strdup(name);
    pushed[npushed].old = old ? strdup(old) : NULL;
    npushed++;
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

void h_env_pop(void)
{
    while (npushed > 0) {
        npushed--;
        if (pushed[npushed].old)
            setenv(pushed[npushed].name, pushed[npushed].old, 1);
        else
            unsetenv(pushed[npushed].name);
        free(pushed[npushed].name);
        free(pushed[npushed].old);
    }
}
