/* SPDX-License-Identifier: MIT */
/*
 * arbench's and arbench-mpi's names (dtypes, ops, devices, collectives), options and
 * the sweep's sizes.  See bench_common.h.
 */
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    OPT_SHARED_HEAP,
    OPT_VERSION,
    OPT_COLL,
    OPT_MPI,
    OPT_GRAPH,
    OPT_TRANSPORT,
    OPT_FRESH,
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
    {"shared-heap", no_argument, NULL, OPT_SHARED_HEAP},
    {"graph", no_argument, NULL, OPT_GRAPH},
    {"fresh", no_argument, NULL, OPT_FRESH},
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
        case OPT_SHARED_HEAP:
            o->shared_heap = true;
            break;
        case OPT_GRAPH:
            o->graph = true;
            break;
        case OPT_FRESH:
            o->fresh = true;
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
    if (o->fresh && (o->device != COMM_DEVICE_HOST || o->graph))
        return usage_error(prog, usage,
                           "--fresh writes and reads host buffers: leave out --device "
                           "cuda and --graph",
                           NULL);
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
    if (o->fresh)
        ADD("--fresh");
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
