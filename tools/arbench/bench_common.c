/* SPDX-License-Identifier: MIT */
/*
 * The measurement shared by arbench and arbench-mpi: options, sizes, test data, the
 * float64 check and the per-call timing.  See bench_common.h.
 */
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Auto iteration count: aim at this much time per size, within these bounds. */
#define BENCH_TARGET_S  0.2
#define BENCH_MIN_ITERS 20
#define BENCH_MAX_ITERS 10000
#define BENCH_PROBE_S   0.01

static const char *const dtype_names[] = {
    [COMM_F32] = "f32", [COMM_F16] = "f16", [COMM_BF16] = "bf16",
    [COMM_F64] = "f64", [COMM_I32] = "i32", [COMM_I64] = "i64",
};
static const size_t dtype_sizes[] = {
    [COMM_F32] = 4, [COMM_F16] = 2, [COMM_BF16] = 2, [COMM_F64] = 8, [COMM_I32] = 4, [COMM_I64] = 8,
};
static const char *const op_names[] = {[COMM_SUM] = "sum", [COMM_MAX] = "max", [COMM_MIN] = "min"};
static const char *const device_names[] = {
    [COMM_DEVICE_HOST] = "host", [COMM_DEVICE_CUDA] = "cuda", [COMM_DEVICE_HEXAGON] = "hexagon"};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *bench_dtype_name(comm_dtype_t dtype)
{
    return (unsigned)dtype < NELEM(dtype_names) ? dtype_names[dtype] : "?";
}

size_t bench_dtype_size(comm_dtype_t dtype)
{
    return (unsigned)dtype < NELEM(dtype_sizes) ? dtype_sizes[dtype] : 0;
}

const char *bench_op_name(comm_op_t op)
{
    return (unsigned)op < NELEM(op_names) ? op_names[op] : "?";
}

const char *bench_device_name(comm_device_t device)
{
    return (unsigned)device < NELEM(device_names) ? device_names[device] : "?";
}

static int lookup(const char *const *names, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], s) == 0)
            return (int)i;
    return -1;
}

void bench_opts_init(struct bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->nranks = 2;
    o->min_bytes = 4;
    o->max_bytes = 64u << 20;
    o->factor = 2.0;
    o->dtype = COMM_F32;
    o->op = COMM_SUM;
    o->warmup = -1;
    o->rounds = 1;
    o->device = COMM_DEVICE_HOST;
}

/* "64", "64K", "64M", "1G" (binary multiples, as nccl-tests reads them). */
int bench_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

static int parse_int(const char *s, int min, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > 1000000000)
        return -1;
    *out = (int)v;
    return 0;
}

enum {
    OPT_PROCS = 256,
    OPT_INPLACE,
    OPT_CHECK,
    OPT_ITERS,
    OPT_WARMUP,
    OPT_DEVICE,
    OPT_COMPARE,
    OPT_CSV,
    OPT_JSON,
    OPT_PLOT,
    OPT_ROUNDS,
    OPT_CSV_STDOUT,
    OPT_NO_BIND,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"nranks", required_argument, NULL, 'n'},
    {"procs", no_argument, NULL, OPT_PROCS},
    {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},
    {"stepfactor", required_argument, NULL, 'f'},
    {"datatype", required_argument, NULL, 'd'},
    {"op", required_argument, NULL, 'o'},
    {"inplace", no_argument, NULL, OPT_INPLACE},
    {"check", no_argument, NULL, OPT_CHECK},
    {"iters", required_argument, NULL, OPT_ITERS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"compare", required_argument, NULL, OPT_COMPARE},
    {"csv", required_argument, NULL, OPT_CSV},
    {"json", required_argument, NULL, OPT_JSON},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"rounds", required_argument, NULL, OPT_ROUNDS},
    {"csv-stdout", no_argument, NULL, OPT_CSV_STDOUT},
    {"no-bind", no_argument, NULL, OPT_NO_BIND},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int usage_error(const char *prog, const char *usage, const char *what, const char *arg)
{
    fprintf(stderr, "%s: %s%s%s\n%s", prog, what, arg ? ": " : "", arg ? arg : "", usage);
    return 2;
}

int bench_parse_args(struct bench_opts *o, int argc, char **argv, const char *prog,
                     const char *usage)
{
    int c, v;

    optind = 1;
    opterr = 0; /* the messages below name the program and show the usage */
    while ((c = getopt_long(argc, argv, ":n:b:e:f:d:o:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_int(optarg, 1, &o->nranks) || o->nranks > 4096)
                return usage_error(prog, usage, "bad rank count", optarg);
            break;
        case OPT_PROCS:
            o->procs = true;
            break;
        case 'b':
            if (bench_parse_size(optarg, &o->min_bytes))
                return usage_error(prog, usage, "bad size", optarg);
            break;
        case 'e':
            if (bench_parse_size(optarg, &o->max_bytes))
                return usage_error(prog, usage, "bad size", optarg);
            break;
        case 'f': {
            char *end;
            o->factor = strtod(optarg, &end);
            if (end == optarg || *end || !(o->factor > 1.0) || o->factor > 1024.0)
                return usage_error(prog, usage, "factor must be a number > 1", optarg);
            break;
        }
        case 'd':
            if ((v = lookup(dtype_names, NELEM(dtype_names), optarg)) < 0)
                return usage_error(prog, usage, "unknown dtype (f32 f16 bf16 f64 i32 i64)", optarg);
            o->dtype = (comm_dtype_t)v;
            break;
        case 'o':
            if ((v = lookup(op_names, NELEM(op_names), optarg)) < 0)
                return usage_error(prog, usage, "unknown op (sum max min)", optarg);
            o->op = (comm_op_t)v;
            break;
        case OPT_INPLACE:
            o->inplace = true;
            break;
        case OPT_CHECK:
            o->check = true;
            break;
        case OPT_ITERS:
            if (parse_int(optarg, 1, &o->iters))
                return usage_error(prog, usage, "bad --iters", optarg);
            break;
        case OPT_WARMUP:
            if (parse_int(optarg, 0, &o->warmup))
                return usage_error(prog, usage, "bad --warmup", optarg);
            break;
        case OPT_DEVICE:
            if ((v = lookup(device_names, NELEM(device_names), optarg)) < 0)
                return usage_error(prog, usage, "unknown device (host cuda hexagon)", optarg);
            o->device = (comm_device_t)v;
            break;
        case OPT_COMPARE:
            if (strcmp(optarg, "mpi") == 0)
                o->peer = BENCH_PEER_MPI;
            else if (strcmp(optarg, "nccl") == 0)
                o->peer = BENCH_PEER_NCCL;
            else
                return usage_error(prog, usage, "unknown --compare (mpi nccl)", optarg);
            break;
        case OPT_CSV:
            o->csv_path = optarg;
            break;
        case OPT_JSON:
            o->json_path = optarg;
            break;
        case OPT_PLOT:
            o->plot_path = optarg;
            break;
        case OPT_ROUNDS:
            if (parse_int(optarg, 1, &o->rounds) || o->rounds > 100)
                return usage_error(prog, usage, "bad --rounds", optarg);
            break;
        case OPT_CSV_STDOUT:
            o->csv_stdout = true;
            break;
        case OPT_NO_BIND:
            o->no_bind = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 1;
        case OPT_VERSION:
            return BENCH_PARSE_VERSION;
        case ':':
            return usage_error(prog, usage, "missing argument for", argv[optind - 1]);
        default:
            return usage_error(prog, usage, "unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error(prog, usage, "unexpected argument", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        return usage_error(prog, usage, "-b is larger than -e", NULL);
    return 0;
}

int bench_sweep_args(const struct bench_opts *o, char **argv, char *buf, size_t buflen)
{
    int n = 0;
    size_t used = 0;
    char *p;

/* Appends one formatted argument; the caller's buffer is sized for the worst case. */
#define ADD(...)                                                                                   \
    do {                                                                                           \
        p = buf + used;                                                                            \
        used += (size_t)snprintf(p, used < buflen ? buflen - used : 0, __VA_ARGS__) + 1;           \
        argv[n++] = p;                                                                             \
    } while (0)

    ADD("-b");
    ADD("%zu", o->min_bytes);
    ADD("-e");
    ADD("%zu", o->max_bytes);
    ADD("-f");
    ADD("%.17g", o->factor);
    ADD("-d");
    ADD("%s", bench_dtype_name(o->dtype));
    ADD("-o");
    ADD("%s", bench_op_name(o->op));
    if (o->inplace)
        ADD("--inplace");
    if (o->check)
        ADD("--check");
    if (o->iters > 0) {
        ADD("--iters");
        ADD("%d", o->iters);
    }
    if (o->warmup >= 0) {
        ADD("--warmup");
        ADD("%d", o->warmup);
    }
#undef ADD
    argv[n] = NULL;
    return used <= buflen ? n : -1;
}

size_t bench_sizes(const struct bench_opts *o, size_t *sizes, size_t max)
{
    size_t ts = bench_dtype_size(o->dtype), n = 0, prev = 0;

    for (double s = (double)o->min_bytes; s <= (double)o->max_bytes && n < max;) {
        /* Whole elements, at least one: 4 bytes of f64 is one f64. */
        size_t b = ((size_t)s / ts) * ts;
        if (b < ts)
            b = ts;
        if (b != prev && b <= o->max_bytes + ts - 1)
            sizes[n++] = prev = b;
        double next = s * o->factor;
        s = next >= s + 1.0 ? next : s + 1.0;
    }
    return n;
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_p90(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t k = (size_t)ceil(0.9 * (double)n); /* nearest rank */
    return v[k > 0 ? k - 1 : 0];
}

double bench_busbw(double algbw, int nranks)
{
    /* nccl-tests' allreduce factor; it makes n = 1 report 0 (nothing crosses a link). */
    return algbw * 2.0 * (double)(nranks - 1) / (double)nranks;
}

/* ---- host device ---- */

static int host_alloc(void *ctx, size_t bytes, void **ptr)
{
    (void)ctx;
    /* 64-byte aligned like comm_mem_alloc, so that alignment never skews a comparison. */
    if (posix_memalign(ptr, 64, bytes ? bytes : 64)) {
        fprintf(stderr, "arbench: cannot allocate %zu bytes\n", bytes);
        return -1;
    }
    return 0;
}

static void host_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static int host_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (dst != src)
        memcpy(dst, src, bytes);
    return 0;
}

static int host_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

const struct bench_device bench_device_host = {
    .name = "host",
    .kind = COMM_DEVICE_HOST,
    .host_visible = true,
    .alloc = host_alloc,
    .free = host_free,
    .to_device = host_copy,
    .to_host = host_copy,
    .sync = host_sync,
    .ctx = NULL,
};

/* ---- one size ---- */

static int same_by_hash(const struct bench_sync *s, const void *buf, size_t bytes, bool *same)
{
    int64_t hi = (int64_t)bench_fnv1a(buf, bytes), lo = hi;
    if (s->reduce(s->ctx, &hi, 1, BENCH_MAX_I64) || s->reduce(s->ctx, &lo, 1, BENCH_MIN_I64))
        return -1;
    *same = hi == lo;
    return 0;
}

static int call(const struct bench_rank *r, const void *send, void *recv, size_t count)
{
    const struct bench_opts *o = r->opts;
    if (r->coll->allreduce(r->coll->ctx, send, recv, count, o->dtype, o->op))
        return -1;
    return r->dev->sync(r->dev->ctx);
}

/* The extra, untimed call of --check: fresh inputs, poisoned output, every element. */
static int check_size(const struct bench_rank *r, void *send, void *recv, void *hsend, void *hrecv,
                      size_t count, size_t bytes, int64_t *wrong_out)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    uint64_t seed = bench_seed(bytes, o->dtype, o->op);
    bool same = false;

    bench_fill(hsend, count, o->dtype, seed, r->rank);
    if (!o->inplace) {
        bench_poison(hrecv, bytes, o->dtype);
        if (d->to_device(d->ctx, recv, hrecv, bytes))
            return -1;
    }
    if (d->to_device(d->ctx, send, hsend, bytes) || call(r, send, recv, count) ||
        d->to_host(d->ctx, hrecv, recv, bytes))
        return -1;

    int64_t wrong = bench_check(hrecv, count, o->dtype, o->op, seed, r->nranks, r->stepwise_round,
                                r->bf16_wire);
    int rc = r->sync->same_bytes ? r->sync->same_bytes(r->sync->ctx, hrecv, bytes, &same)
                                 : same_by_hash(r->sync, hrecv, bytes, &same);
    if (rc || r->sync->reduce(r->sync->ctx, &wrong, 1, BENCH_SUM_I64))
        return -1;
    if (!same) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: size %zu: the ranks' outputs are not bit-identical\n", bytes);
        wrong += 1;
    }
    *wrong_out = wrong;
    return 0;
}

int bench_run_size(const struct bench_rank *r, size_t bytes, struct bench_result *res)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    size_t count = bytes / bench_dtype_size(o->dtype);
    void *send = NULL, *recv = NULL, *hsend = NULL, *hrecv = NULL;
    double *times = NULL;
    int iters = o->iters, rc = -1;

    if (d->alloc(d->ctx, bytes, &send) || (!o->inplace && d->alloc(d->ctx, bytes, &recv)))
        goto out;
    if (o->inplace)
        recv = send;
    if (d->host_visible) {
        hsend = send;
        hrecv = recv;
    } else if (host_alloc(NULL, bytes, &hsend) || host_alloc(NULL, bytes, &hrecv)) {
        goto out;
    }
    bench_fill(hsend, count, o->dtype, bench_seed(bytes, o->dtype, o->op), r->rank);
    if (d->to_device(d->ctx, send, hsend, bytes))
        goto out;
    if (!o->inplace && d->to_device(d->ctx, recv, hsend, bytes)) /* touch every page */
        goto out;

    if (iters <= 0) {
        /*
         * Estimate the time per call from doubling batches until one lasts 10 ms; every
         * rank must run the same number of calls, so each batch ends with an agreement
         * on the slowest rank's time.  The first, cold batches count for nothing.
         */
        double est = 0.0;
        for (int k = 1;; k *= 2) {
            double t0 = bench_now();
            for (int i = 0; i < k; i++)
                if (call(r, send, recv, count))
                    goto out;
            double t = bench_now() - t0;
            if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
                goto out;
            if (t >= BENCH_PROBE_S || k >= BENCH_MAX_ITERS / 8) {
                est = t / k;
                break;
            }
        }
        double want = BENCH_TARGET_S / (est > 1e-9 ? est : 1e-9);
        iters = want < BENCH_MIN_ITERS   ? BENCH_MIN_ITERS
                : want > BENCH_MAX_ITERS ? BENCH_MAX_ITERS
                                         : (int)want;
    }
    int warmup = o->warmup >= 0 ? o->warmup : (iters / 10 > 5 ? iters / 10 : 5);
    times = malloc(sizeof(*times) * (size_t)iters);
    if (!times) {
        fprintf(stderr, "arbench: out of memory\n");
        goto out;
    }
    for (int i = 0; i < warmup; i++)
        if (call(r, send, recv, count))
            goto out;
    for (int i = 0; i < iters; i++) {
        /* Back to back, no barrier: what an application sees call after call. */
        double t0 = bench_now();
        if (call(r, send, recv, count))
            goto out;
        times[i] = bench_now() - t0;
    }
    /* Per call, the slowest rank: a collective is done when its last rank is. */
    if (r->sync->reduce(r->sync->ctx, times, (size_t)iters, BENCH_MAX_F64))
        goto out;

    res->bytes = bytes;
    res->count = count;
    res->iters = iters;
    res->time_us = bench_median(times, (size_t)iters) * 1e6;
    res->p90_us = bench_p90(times, (size_t)iters) * 1e6;
    res->algbw = res->time_us > 0 ? (double)bytes / res->time_us * 1e-3 : 0.0;
    res->busbw = bench_busbw(res->algbw, r->nranks);
    res->wrong = -1;
    if (o->check && check_size(r, send, recv, hsend, hrecv, count, bytes, &res->wrong))
        goto out;
    rc = 0;
out:
    free(times);
    if (!d->host_visible) {
        free(hsend);
        free(hrecv);
    }
    if (recv && recv != send)
        d->free(d->ctx, recv);
    if (send)
        d->free(d->ctx, send);
    return rc;
}
