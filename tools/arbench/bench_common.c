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
    [COMM_F32] = "f32", [COMM_F16] = "f16", [COMM_BF16] = "bf16", [COMM_F64] = "f64",
    [COMM_I32] = "i32", [COMM_I64] = "i64", [COMM_I8] = "i8",     [COMM_U8] = "u8",
    [COMM_U32] = "u32", [COMM_U64] = "u64",
};
static const size_t dtype_sizes[] = {
    [COMM_F32] = 4, [COMM_F16] = 2, [COMM_BF16] = 2, [COMM_F64] = 8, [COMM_I32] = 4,
    [COMM_I64] = 8, [COMM_I8] = 1,  [COMM_U8] = 1,   [COMM_U32] = 4, [COMM_U64] = 8,
};
static const char *const op_names[] = {[COMM_SUM] = "sum",
                                       [COMM_MAX] = "max",
                                       [COMM_MIN] = "min",
                                       [COMM_PROD] = "prod",
                                       [COMM_AVG] = "avg"};
static const char *const device_names[] = {
    [COMM_DEVICE_HOST] = "host", [COMM_DEVICE_CUDA] = "cuda", [COMM_DEVICE_HEXAGON] = "hexagon"};
static const char *const coll_names[] = {
    [BENCH_ALLREDUCE] = "allreduce",
    [BENCH_BROADCAST] = "broadcast",
    [BENCH_REDUCE] = "reduce",
    [BENCH_ALLGATHER] = "allgather",
    [BENCH_REDUCE_SCATTER] = "reduce_scatter",
    [BENCH_ALLTOALL] = "alltoall",
    [BENCH_COLL_ALL] = "all",
};

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

const char *bench_coll_name(enum bench_coll_kind coll)
{
    return (unsigned)coll < NELEM(coll_names) ? coll_names[coll] : "?";
}

bool bench_dtype_is_float(comm_dtype_t dtype)
{
    return dtype == COMM_F32 || dtype == COMM_F16 || dtype == COMM_BF16 || dtype == COMM_F64;
}

bool bench_coll_reduces(enum bench_coll_kind coll)
{
    return coll == BENCH_ALLREDUCE || coll == BENCH_REDUCE || coll == BENCH_REDUCE_SCATTER;
}

bool bench_coll_has(const struct bench_coll *c, enum bench_coll_kind kind)
{
    switch (kind) {
    case BENCH_ALLREDUCE:
        return c->allreduce != NULL;
    case BENCH_BROADCAST:
        return c->broadcast != NULL;
    case BENCH_REDUCE:
        return c->reduce != NULL;
    case BENCH_ALLGATHER:
        return c->allgather != NULL;
    case BENCH_REDUCE_SCATTER:
        return c->reduce_scatter != NULL;
    case BENCH_ALLTOALL:
        return c->alltoall != NULL;
    default:
        return false;
    }
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
    OPT_MEM_ALLOC,
    OPT_VERSION,
    OPT_COLL,
    OPT_MPI,
    OPT_GRAPH,
    OPT_TRANSPORT,
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
    {"mem-alloc", no_argument, NULL, OPT_MEM_ALLOC},
    {"graph", no_argument, NULL, OPT_GRAPH},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"coll", required_argument, NULL, OPT_COLL},
    {"mpi", no_argument, NULL, OPT_MPI},
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
        case OPT_MPI:
            o->mpi = true;
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
                return usage_error(
                    prog, usage, "unknown dtype (f32 f16 bf16 f64 i32 i64 i8 u8 u32 u64)", optarg);
            o->dtype = (comm_dtype_t)v;
            break;
        case 'o':
            if ((v = lookup(op_names, NELEM(op_names), optarg)) < 0)
                return usage_error(prog, usage, "unknown op (sum max min prod avg)", optarg);
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
        case OPT_MEM_ALLOC:
            o->mem_alloc = true;
            break;
        case OPT_GRAPH:
            o->graph = true;
            break;
        case OPT_TRANSPORT:
            if (optarg[0] == '\0' || strlen(optarg) > 32)
                return usage_error(prog, usage, "bad --transport", optarg);
            o->transport = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 1;
        case OPT_VERSION:
            return BENCH_PARSE_VERSION;
        case OPT_COLL:
            if ((v = lookup(coll_names, NELEM(coll_names), optarg)) < 0)
                return usage_error(prog, usage,
                                   "unknown --coll (allreduce broadcast reduce allgather "
                                   "reduce_scatter alltoall all)",
                                   optarg);
            o->coll = (enum bench_coll_kind)v;
            break;
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
    if (o->op == COMM_AVG && !bench_dtype_is_float(o->dtype))
        return usage_error(prog, usage, "-o avg needs a float dtype (f32 f16 bf16 f64)",
                           bench_dtype_name(o->dtype));
    if (o->coll == BENCH_ALLTOALL && o->inplace)
        return usage_error(prog, usage, "alltoall has no in-place form: leave out --inplace", NULL);
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
    ADD("--coll");
    ADD("%s", bench_coll_name(o->coll));
    if (o->inplace)
        ADD("--inplace");
    if (o->check)
        ADD("--check");
    if (o->mem_alloc)
        ADD("--mem-alloc");
    if (o->graph)
        ADD("--graph");
    if (o->transport != NULL) {
        ADD("--transport");
        ADD("%s", o->transport);
    }
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
    /* allgather, reduce_scatter and alltoall cut the size into n blocks (nccl-tests:
     * count / nranks per block, rounded down). */
    if (o->coll == BENCH_ALLGATHER || o->coll == BENCH_REDUCE_SCATTER || o->coll == BENCH_ALLTOALL)
        ts *= (size_t)o->nranks;

    for (double s = (double)o->min_bytes; s <= (double)o->max_bytes && n < max;) {
        /* Whole elements (blocks), at least one: 4 bytes of f64 is one f64. */
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

double bench_bus_factor(enum bench_coll_kind coll, int nranks)
{
    double n = (double)nranks;
    /* nccl-tests' factors; (n-1)/n makes n = 1 report 0 (nothing crosses a link). */
    switch (coll) {
    case BENCH_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case BENCH_REDUCE_SCATTER:
    case BENCH_ALLGATHER:
    case BENCH_ALLTOALL:
        return (n - 1) / n;
    default:
        return 1.0;
    }
}

double bench_busbw(double algbw, enum bench_coll_kind coll, int nranks)
{
    return algbw * bench_bus_factor(coll, nranks);
}

double bench_min_traffic(enum bench_coll_kind coll, int nranks, bool inplace, size_t bytes)
{
    double n = (double)nranks, s = (double)bytes;
    switch (coll) {
    case BENCH_ALLREDUCE:
    case BENCH_ALLTOALL:
        return 2.0 * n * s;
    case BENCH_BROADCAST:
    case BENCH_ALLGATHER:
        return s + (inplace ? n - 1 : n) * s;
    case BENCH_REDUCE:
    case BENCH_REDUCE_SCATTER:
        return (n + 1) * s;
    default:
        return 0.0;
    }
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

/* ---- the memcpy ceiling ---- */

/* Through a volatile pointer: the compiler may not drop copies nobody reads. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static int barrier(const struct bench_rank *r)
{
    double x = 0.0;
    return r->sync->reduce(r->sync->ctx, &x, 1, BENCH_MAX_F64);
}

int bench_ceiling(const struct bench_rank *r, size_t bytes, double *gbs)
{
    enum { BATCHES = 5 };
    void *src = NULL, *dst = NULL;
    double bw[BATCHES];
    int rc = -1, k;

    if (bytes < 64)
        bytes = 64;
    if (host_alloc(NULL, bytes, &src) || host_alloc(NULL, bytes, &dst))
        goto out;
    memset(src, 0x5a, bytes);
    memset(dst, 0, bytes);
    copy_fn(dst, src, bytes);
    for (k = 1;; k *= 2) {
        if (barrier(r))
            goto out;
        double t0 = bench_now();
        for (int i = 0; i < k; i++)
            copy_fn(dst, src, bytes);
        double t = bench_now() - t0;
        if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
            goto out;
        if (t >= 0.02 || k >= (1 << 20))
            break;
    }
    for (int b = 0; b < BATCHES; b++) {
        if (barrier(r))
            goto out;
        double t0 = bench_now();
        for (int i = 0; i < k; i++)
            copy_fn(dst, src, bytes);
        double t = bench_now() - t0;
        if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
            goto out;
        bw[b] = t > 0 ? (double)r->nranks * 2.0 * (double)bytes * k / t * 1e-9 : 0.0;
    }
    *gbs = bench_median(bw, BATCHES);
    rc = 0;
out:
    free(dst);
    free(src);
    return rc;
}

/* ---- one size ---- */

/*
 * The buffers of one call on this rank.  Out of place: send and recv buffers of their
 * own; in place: one buffer of the row's size, with send and recv pointing into it as
 * each collective's in-place form says.  Pointers a collective does not use on this rank
 * are NULL (struct bench_coll).
 */
struct layout {
    size_t count;       /* the API's count: elements per rank (sendcount, recvcount) */
    size_t send_bytes;  /* out of place: the send buffer */
    size_t recv_bytes;  /* out of place: the receive buffer */
    size_t block_bytes; /* allgather, reduce_scatter, alltoall: one block */
};

static struct layout layout_of(const struct bench_rank *r, size_t bytes)
{
    size_t es = bench_dtype_size(r->opts->dtype), n = (size_t)r->nranks;
    struct layout l = {.count = bytes / es, .send_bytes = bytes, .recv_bytes = bytes};

    switch (r->opts->coll) {
    case BENCH_ALLGATHER:
        l.count = bytes / es / n;
        l.block_bytes = l.send_bytes = l.count * es;
        break;
    case BENCH_REDUCE_SCATTER:
        l.count = bytes / es / n;
        l.block_bytes = l.recv_bytes = l.count * es;
        break;
    case BENCH_ALLTOALL:
        l.count = bytes / es / n;
        l.block_bytes = l.count * es;
        break;
    default:
        break;
    }
    return l;
}

/* The send and recv pointers of this rank, from the buffers allocated for it. */
static void pointers(const struct bench_rank *r, const struct layout *l, void *send, void *recv,
                     void **psend, void **precv)
{
    char *buf = send; /* in place: the one buffer */
    bool root = r->rank == BENCH_ROOT;

    *psend = send;
    *precv = r->opts->inplace ? send : recv;
    switch (r->opts->coll) {
    case BENCH_BROADCAST:
        if (!root)
            *psend = NULL;
        break;
    case BENCH_REDUCE:
        if (r->opts->inplace && !root)
            *precv = NULL;
        break;
    case BENCH_ALLGATHER:
        if (r->opts->inplace)
            *psend = buf + (size_t)r->rank * l->block_bytes;
        break;
    case BENCH_REDUCE_SCATTER:
        if (r->opts->inplace)
            *precv = buf + (size_t)r->rank * l->block_bytes;
        break;
    default:
        break;
    }
}

static int same_by_hash(const struct bench_sync *s, const void *buf, size_t bytes, bool *same)
{
    int64_t hi = (int64_t)bench_fnv1a(buf, bytes), lo = hi;
    if (s->reduce(s->ctx, &hi, 1, BENCH_MAX_I64) || s->reduce(s->ctx, &lo, 1, BENCH_MIN_I64))
        return -1;
    *same = hi == lo;
    return 0;
}

static int enqueue(const struct bench_rank *r, const void *send, void *recv, size_t count)
{
    const struct bench_opts *o = r->opts;
    const struct bench_coll *c = r->coll;
    int rc = -1;

    switch (o->coll) {
    case BENCH_ALLREDUCE:
        rc = c->allreduce(c->ctx, send, recv, count, o->dtype, o->op);
        break;
    case BENCH_BROADCAST:
        rc = c->broadcast(c->ctx, send, recv, count, o->dtype, BENCH_ROOT);
        break;
    case BENCH_REDUCE:
        rc = c->reduce(c->ctx, send, recv, count, o->dtype, o->op, BENCH_ROOT);
        break;
    case BENCH_ALLGATHER:
        rc = c->allgather(c->ctx, send, recv, count, o->dtype);
        break;
    case BENCH_REDUCE_SCATTER:
        rc = c->reduce_scatter(c->ctx, send, recv, count, o->dtype, o->op);
        break;
    case BENCH_ALLTOALL:
        rc = c->alltoall(c->ctx, send, recv, count, o->dtype);
        break;
    default:
        break;
    }
    return rc ? -1 : 0;
}

/* One timed call: enqueued and waited for, or (--graph) a replay of the captured one. */
static int call(const struct bench_rank *r, const void *send, void *recv, size_t count)
{
    if (r->opts->graph)
        return r->dev->graph_replay(r->dev->ctx);
    if (enqueue(r, send, recv, count))
        return -1;
    return r->dev->sync(r->dev->ctx);
}

/*
 * The inputs of the --check call in host memory: hsend is the send buffer out of place,
 * the one buffer in place.  Outputs that are not also inputs are poisoned first.
 */
static void check_inputs(const struct bench_rank *r, const struct layout *l, uint64_t seed,
                         void *hsend, void *hrecv, size_t bytes)
{
    const struct bench_opts *o = r->opts;
    size_t es = bench_dtype_size(o->dtype);
    bool root = r->rank == BENCH_ROOT;

    if (o->inplace) {
        char *buf = hsend;
        switch (o->coll) {
        case BENCH_BROADCAST:
            if (root)
                bench_fill(buf, l->count, o->dtype, seed, BENCH_ROOT, 0);
            else
                bench_poison(buf, bytes, o->dtype);
            break;
        case BENCH_ALLGATHER:
            bench_poison(buf, bytes, o->dtype);
            bench_fill(buf + (size_t)r->rank * l->block_bytes, l->count, o->dtype, seed, r->rank,
                       0);
            break;
        default: /* allreduce, reduce, reduce_scatter: the whole buffer is input */
            bench_fill(buf, bytes / es, o->dtype, seed, r->rank, 0);
            break;
        }
        return;
    }
    switch (o->coll) {
    case BENCH_BROADCAST:
        bench_fill(hsend, l->count, o->dtype, seed, BENCH_ROOT, 0); /* read on root only */
        break;
    case BENCH_ALLGATHER:
        bench_fill(hsend, l->count, o->dtype, seed, r->rank, 0);
        break;
    default:
        bench_fill(hsend, l->send_bytes / es, o->dtype, seed, r->rank, 0);
        break;
    }
    bench_poison(hrecv, l->recv_bytes, o->dtype);
}

/* Elements of this rank's output (out, in host memory) that are wrong. */
static int64_t check_outputs(const struct bench_rank *r, const struct layout *l, uint64_t seed,
                             const char *out)
{
    const struct bench_opts *o = r->opts;
    size_t n = (size_t)r->nranks;
    bool root = r->rank == BENCH_ROOT;
    int64_t wrong = 0;

    switch (o->coll) {
    case BENCH_ALLREDUCE:
        return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks, 0,
                                  r->stepwise_round, r->bf16_wire);
    case BENCH_REDUCE:
        if (root)
            return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks, 0,
                                      r->stepwise_round, r->bf16_wire);
        /* Off the root the receive buffer is not the collective's: it stays poisoned. */
        return o->inplace ? 0 : bench_count_written(out, l->count, o->dtype);
    case BENCH_REDUCE_SCATTER:
        return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks,
                                  (size_t)r->rank * l->count, r->stepwise_round, r->bf16_wire);
    case BENCH_BROADCAST:
        return bench_check_exact(out, l->count, o->dtype, seed, BENCH_ROOT, 0);
    case BENCH_ALLGATHER:
        for (size_t p = 0; p < n; p++)
            wrong +=
                bench_check_exact(out + p * l->block_bytes, l->count, o->dtype, seed, (int)p, 0);
        return wrong;
    case BENCH_ALLTOALL:
        for (size_t p = 0; p < n; p++)
            wrong += bench_check_exact(out + p * l->block_bytes, l->count, o->dtype, seed, (int)p,
                                       (size_t)r->rank * l->count);
        return wrong;
    default:
        break;
    }
    return 0;
}

/*
 * reduce and reduce_scatter against the allreduce of the same inputs, bit for bit (a
 * library with one reduction order, r->fixed_order): 1 when this rank's result differs.
 */
static int same_as_allreduce(const struct bench_rank *r, const struct layout *l, size_t bytes,
                             uint64_t seed, const char *out, int64_t *differs)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    size_t es = bench_dtype_size(o->dtype);
    void *send = NULL, *recv = NULL;
    char *hin = NULL, *hout = NULL;
    int rc = -1;

    *differs = 0;
    if (d->alloc(d->ctx, bytes, &send) || d->alloc(d->ctx, bytes, &recv) ||
        host_alloc(NULL, bytes, (void **)&hin) || host_alloc(NULL, bytes, (void **)&hout))
        goto out;
    bench_fill(hin, bytes / es, o->dtype, seed, r->rank, 0);
    if (d->to_device(d->ctx, send, hin, bytes))
        goto out;
    if (r->coll->allreduce(r->coll->ctx, send, recv, bytes / es, o->dtype, o->op) ||
        d->sync(d->ctx) || d->to_host(d->ctx, hout, recv, bytes))
        goto out;
    if (o->coll == BENCH_REDUCE_SCATTER)
        *differs = memcmp(out, hout + (size_t)r->rank * l->block_bytes, l->block_bytes) != 0;
    else if (r->rank == BENCH_ROOT)
        *differs = memcmp(out, hout, bytes) != 0;
    if (*differs)
        fprintf(stderr,
                "arbench: size %zu: rank %d: the %s result is not bit for bit the "
                "allreduce's of the same inputs\n",
                bytes, r->rank, bench_coll_name(o->coll));
    rc = 0;
out:
    free(hout);
    free(hin);
    if (recv)
        d->free(d->ctx, recv);
    if (send)
        d->free(d->ctx, send);
    return rc;
}

/* The extra, untimed call of --check: fresh inputs, poisoned output, every element. */
static int check_size(const struct bench_rank *r, const struct layout *l, void *send, void *recv,
                      void *hsend, void *hrecv, size_t bytes, int64_t *wrong_out)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    uint64_t seed = bench_seed(bytes, o->dtype, o->op);
    bool same = true;
    void *psend, *precv;
    int64_t differs = 0;

    check_inputs(r, l, seed, hsend, hrecv, bytes);
    if (o->inplace) {
        if (d->to_device(d->ctx, send, hsend, bytes))
            return -1;
    } else if (d->to_device(d->ctx, send, hsend, l->send_bytes) ||
               d->to_device(d->ctx, recv, hrecv, l->recv_bytes)) {
        return -1;
    }
    pointers(r, l, send, recv, &psend, &precv);
    if (call(r, psend, precv, l->count))
        return -1;
    /* What this rank's output is, in host memory. */
    const char *out;
    size_t out_bytes;
    if (o->inplace) {
        if (d->to_host(d->ctx, hsend, send, bytes))
            return -1;
        out = hsend;
        out_bytes = bytes;
        if (o->coll == BENCH_REDUCE_SCATTER) {
            out_bytes = l->block_bytes;
            if (!r->rs_inplace_at_start)
                out += (size_t)r->rank * l->block_bytes;
        }
    } else {
        if (d->to_host(d->ctx, hrecv, recv, l->recv_bytes))
            return -1;
        out = hrecv;
        out_bytes = l->recv_bytes;
    }

    int64_t wrong = check_outputs(r, l, seed, out);
    int rc = 0;
    switch (o->coll) {
    case BENCH_ALLREDUCE:
    case BENCH_BROADCAST:
    case BENCH_ALLGATHER:
        /* Every rank holds the same result: the same bits. */
        rc = r->sync->same_bytes ? r->sync->same_bytes(r->sync->ctx, out, out_bytes, &same)
                                 : same_by_hash(r->sync, out, out_bytes, &same);
        break;
    case BENCH_REDUCE:
    case BENCH_REDUCE_SCATTER:
        if (r->fixed_order && r->coll->allreduce)
            rc = same_as_allreduce(r, l, bytes, seed, out, &differs);
        break;
    default:
        break;
    }
    if (rc || r->sync->reduce(r->sync->ctx, &wrong, 1, BENCH_SUM_I64) ||
        r->sync->reduce(r->sync->ctx, &differs, 1, BENCH_SUM_I64))
        return -1;
    if (!same) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: size %zu: the ranks' outputs are not bit-identical\n", bytes);
        wrong += 1;
    }
    *wrong_out = wrong + differs;
    return 0;
}

int bench_run_size(const struct bench_rank *r, size_t bytes, struct bench_result *res)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    struct layout l = layout_of(r, bytes);
    size_t es = bench_dtype_size(o->dtype);
    void *send = NULL, *recv = NULL, *hsend = NULL, *hrecv = NULL, *psend, *precv;
    double *times = NULL;
    int iters = o->iters, rc = -1;

    if (!bench_coll_has(r->coll, o->coll)) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: the library under test has no %s\n",
                    bench_coll_name(o->coll));
        return -1;
    }
    /* In place: one buffer of the row's size (send); out of place: two. */
    size_t send_alloc = o->inplace ? bytes : l.send_bytes;
    if (d->alloc(d->ctx, send_alloc, &send) ||
        (!o->inplace && d->alloc(d->ctx, l.recv_bytes, &recv)))
        goto out;
    if (d->host_visible) {
        hsend = send;
        hrecv = recv;
    } else if (host_alloc(NULL, send_alloc, &hsend) ||
               (!o->inplace && host_alloc(NULL, l.recv_bytes, &hrecv))) {
        goto out;
    }
    bench_fill(hsend, send_alloc / es, o->dtype, bench_seed(bytes, o->dtype, o->op), r->rank, 0);
    if (d->to_device(d->ctx, send, hsend, send_alloc))
        goto out;
    if (!o->inplace) { /* touch every page */
        bench_poison(hrecv, l.recv_bytes, o->dtype);
        if (d->to_device(d->ctx, recv, hrecv, l.recv_bytes))
            goto out;
    }
    pointers(r, &l, send, recv, &psend, &precv);
    if (o->graph) {
        /* One call recorded; every call below replays it (fresh call numbers each). */
        if (d->graph_begin == NULL) {
            if (r->rank == 0)
                fprintf(stderr, "arbench: --graph needs --device cuda\n");
            goto out;
        }
        if (d->graph_begin(d->ctx) || enqueue(r, psend, precv, l.count) || d->graph_end(d->ctx))
            goto out;
    }

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
                if (call(r, psend, precv, l.count))
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
        if (call(r, psend, precv, l.count))
            goto out;
    for (int i = 0; i < iters; i++) {
        /* Back to back, no barrier: what an application sees call after call. */
        double t0 = bench_now();
        if (call(r, psend, precv, l.count))
            goto out;
        times[i] = bench_now() - t0;
    }
    /* Per call, the slowest rank: a collective is done when its last rank is. */
    if (r->sync->reduce(r->sync->ctx, times, (size_t)iters, BENCH_MAX_F64))
        goto out;

    res->bytes = bytes;
    res->count = bytes / es;
    res->iters = iters;
    res->time_us = bench_median(times, (size_t)iters) * 1e6;
    res->p90_us = bench_p90(times, (size_t)iters) * 1e6;
    res->algbw = res->time_us > 0 ? (double)bytes / res->time_us * 1e-3 : 0.0;
    res->busbw = bench_busbw(res->algbw, o->coll, r->nranks);
    res->wrong = -1;
    if (o->check && check_size(r, &l, send, recv, hsend, hrecv, bytes, &res->wrong))
        goto out;
    rc = 0;
out:
    free(times);
    if (!d->host_visible) {
        free(hsend);
        free(hrecv);
    }
    if (recv)
        d->free(d->ctx, recv);
    if (send)
        d->free(d->ctx, send);
    return rc;
}
