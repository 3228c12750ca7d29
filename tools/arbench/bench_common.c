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
#define BENCH_TARGET_S 0.2
#define BENCH_MIN_ITERS 20
#define BENCH_MAX_ITERS 10000
#define BENCH_PROBE_S 0.01

static const char *const dtype_names[] = {
    [COMM_F32] = "f32", [COMM_F16] = "f16", [COMM_BF16] = "bf16",
    [COMM_F64] = "f64", [COMM_I32] = "i32", [COMM_I64] = "i64",
};
static const size_t dtype_sizes[] = {
    [COMM_F32] = 4, [COMM_F16] = 2, [COMM_BF16] = 2,
    [COMM_F64] = 8, [COMM_I32] = 4, [COMM_I64] = 8,
};
static const char *const op_names[] = { [COMM_SUM] = "sum", [COMM_MAX] = "max",
                                        [COMM_MIN] = "min" };
static const char *const device_names[] = { [COMM_DEVICE_HOST] = "host",
                                            [COMM_DEVICE_CUDA] = "cuda",
                                            [COMM_DEVICE_HEXAGON] = "hexagon" };

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
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
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
    OPT_PROCS = 256, OPT_INPLACE, OPT_CHECK, OPT_ITERS, OPT_WARMUP, OPT_DEVICE,
    OPT_COMPARE, OPT_CSV, OPT_JSON, OPT_PLOT, OPT_ROUNDS, OPT_CSV_STDOUT, OPT_NO_BIND,
};

static const struct option long_opts[] = {
    { "nranks", required_argument, NULL, 'n' },
    { "procs", no_argument, NULL, OPT_PROCS },
    { "minbytes", required_argument, NULL, 'b' },
    { "maxbytes", required_argument, NULL, 'e' },
    { "stepfactor", required_argument, NULL, 'f' },
    { "datatype", required_argument, NULL, 'd' },
    { "op", required_argument, NULL, 'o' },
    { "inplace", no_argument, NULL, OPT_INPLACE },
    { "check", no_argument, NULL, OPT_CHECK },
    { "iters", required_argument, NULL, OPT_ITERS },
    { "warmup", required_argument, NULL, OPT_WARMUP },
    { "device", required_argument, NULL, OPT_DEVICE },
    { "compare", required_argument, NULL, OPT_COMPARE },
    { "csv", required_argument, NULL, OPT_CSV },
    { "json", required_argument, NULL, OPT_JSON },
    { "plot", required_argument, NULL, OPT_PLOT },
    { "rounds", required_argument, NULL, OPT_ROUNDS },
    { "csv-stdout", no_argument, NULL, OPT_CSV_STDOUT },
    { "no-bind", no_argument, NULL, OPT_NO_BIND },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
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
        case OPT_PROCS: o->procs = true; break;
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
                return usage_error(prog, usage, "unknown dtype (f32 f16 bf16 f64 i32 i64)",
                                   optarg);
            o->dtype = (comm_dtype_t)v;
            break;
        case 'o':
            if ((v = lookup(op_names, NELEM(op_names), optarg)) < 0)
                return usage_error(prog, usage, "unknown op (sum max min)", optarg);
            o->op = (comm_op_t)v;
            break;
        case OPT_INPLACE: o->inplace = true; break;
        case OPT_CHECK: o->check = true; break;
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
        case OPT_CSV: o->csv_path = optarg; break;
        case OPT_JSON: o->json_path = optarg; break;
        case OPT_PLOT: o->plot_path = optarg; break;
        case OPT_ROUNDS:
            if (parse_int(optarg, 1, &o->rounds) || o->rounds > 100)
                return usage_error(prog, usage, "bad --rounds", optarg);
            break;
        case OPT_CSV_STDOUT: o->csv_stdout = true; break;
        case OPT_NO_BIND: o->no_bind = true; break;
        case 'h':
            fputs(usage, stdout);
            return 1;
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
#define ADD(...)                                                                      \
    do {                                                                              \
        p = buf + used;                                                               \
        used += (size_t)snprintf(p, used < buflen ? buflen - used : 0, __VA_ARGS__) + 1; \
        argv[n++] = p;                                                                \
    } while (0)

    ADD("-b"); ADD("%zu", o->min_bytes);
    ADD("-e"); ADD("%zu", o->max_bytes);
    ADD("-f"); ADD("%.17g", o->factor);
    ADD("-d"); ADD("%s", bench_dtype_name(o->dtype));
    ADD("-o"); ADD("%s", bench_op_name(o->op));
    if (o->inplace)
        ADD("--inplace");
    if (o->check)
        ADD("--check");
    if (o->iters > 0) {
        ADD("--iters"); ADD("%d", o->iters);
    }
    if (o->warmup >= 0) {
        ADD("--warmup"); ADD("%d", o->warmup);
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

/* ---- test data ---- */

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finalizer: a counter-based generator, so any rank can recompute
     * any other rank's element j without storing it. */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t bench_seed(size_t bytes, comm_dtype_t dtype, comm_op_t op)
{
    return mix64((uint64_t)bytes * 0x100000001b3ull ^ ((uint64_t)dtype << 40) ^
                 ((uint64_t)op << 48));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0)
        f = ldexpf((float)man, -24); /* zero and subnormals */
    else if (exp == 31)
        f = man ? NAN : INFINITY;
    else
        f = ldexpf((float)(man | 0x400), (int)exp - 25);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, with subnormals, infinities and NaN (MPI's f16 op needs them). */
static uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t absu = u & 0x7fffffff;
    if (absu > 0x7f800000)
        return sign | 0x7e00; /* quiet NaN */
    if (absu >= 0x47800000)
        return sign | 0x7c00; /* 65536 and up, Inf included */
    if (absu < 0x38800000) {
        /* Below 2^-14: scaling by 2^24 is exact and rintf rounds to nearest even; 1024
         * is the smallest normal, which that encoding already spells. */
        float a;
        memcpy(&a, &absu, 4);
        return sign | (uint16_t)rintf(a * 0x1.0p24f);
    }
    uint32_t man = absu & 0x7fffff;
    uint32_t h = ((((absu >> 23) - 127 + 15)) << 10) | (man >> 13);
    uint32_t rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is right, up to Inf */
    return (uint16_t)(sign | h);
}

static float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, not rounded into Inf */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double bench_value(comm_dtype_t dtype, uint64_t seed, int rank, size_t j)
{
    uint64_t u = mix64(seed ^ mix64(((uint64_t)rank << 48) ^ (uint64_t)j));
    double sign = (u & 1) ? -1.0 : 1.0;
    /* Magnitudes in [0.5, 2): never zero, no overflow for any rank count, and sums
     * that f16 still represents for up to ~16000 ranks. */
    double mag = 0.5 + 1.5 * (double)(u >> 11) * 0x1.0p-53;

    switch (dtype) {
    case COMM_F32: return (double)(float)(sign * mag);
    case COMM_F16: return (double)f16_to_f32(f32_to_f16((float)(sign * mag)));
    case COMM_BF16: return (double)bf16_to_f32(f32_to_bf16((float)(sign * mag)));
    case COMM_F64: return sign * mag;
    case COMM_I32: return sign * (double)(1 + (u >> 40) % 1000);
    case COMM_I64: return sign * (double)(1 + (u >> 20) % 1000000000);
    }
    return 0.0;
}

void bench_half_reduce(void *inout, const void *in, size_t n, comm_dtype_t dtype,
                       comm_op_t op)
{
    uint16_t *a = inout;
    const uint16_t *b = in;
    bool f16 = dtype == COMM_F16;

    for (size_t j = 0; j < n; j++) {
        float x = f16 ? f16_to_f32(a[j]) : bf16_to_f32(a[j]);
        float y = f16 ? f16_to_f32(b[j]) : bf16_to_f32(b[j]);
        float r = op == COMM_SUM ? x + y : op == COMM_MAX ? (y > x ? y : x) : (y < x ? y : x);
        a[j] = f16 ? f32_to_f16(r) : f32_to_bf16(r);
    }
}

void bench_fill(void *buf, size_t count, comm_dtype_t dtype, uint64_t seed, int rank)
{
    for (size_t j = 0; j < count; j++) {
        double v = bench_value(dtype, seed, rank, j);
        switch (dtype) {
        case COMM_F32: ((float *)buf)[j] = (float)v; break;
        case COMM_F16: ((uint16_t *)buf)[j] = f32_to_f16((float)v); break;
        case COMM_BF16: ((uint16_t *)buf)[j] = f32_to_bf16((float)v); break;
        case COMM_F64: ((double *)buf)[j] = v; break;
        case COMM_I32: ((int32_t *)buf)[j] = (int32_t)v; break;
        case COMM_I64: ((int64_t *)buf)[j] = (int64_t)v; break;
        }
    }
}

/* Poison: NaN bytes for floats; for ints a value no sum of bench_value can reach. */
static void poison(void *buf, size_t bytes, comm_dtype_t dtype)
{
    memset(buf, dtype == COMM_I32 || dtype == COMM_I64 ? 0x7f : 0xff, bytes);
}

static double read_elem(const void *buf, size_t j, comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32: return ((const float *)buf)[j];
    case COMM_F16: return f16_to_f32(((const uint16_t *)buf)[j]);
    case COMM_BF16: return bf16_to_f32(((const uint16_t *)buf)[j]);
    case COMM_F64: return ((const double *)buf)[j];
    case COMM_I32: return ((const int32_t *)buf)[j];
    case COMM_I64: return (double)((const int64_t *)buf)[j];
    }
    return NAN;
}

/* One unit in the last place of the output type at magnitude x. */
static double ulp_of(comm_dtype_t dtype, double x)
{
    int mant = dtype == COMM_F16 ? 10 : 7;
    int emin = dtype == COMM_F16 ? -14 : -126;
    int e = x > 0 ? ilogb(x) : emin;
    return ldexp(1.0, (e < emin ? emin : e) - mant);
}

/*
 * Float64 reference per element, recomputed from the seed (no copy of the peers'
 * inputs is kept).  Tolerances: f32 relative 1e-5 * nranks and f64 1e-12 * nranks of
 * sum |x| (the error bound of any summation order); f16/bf16 two ulps of the output
 * type plus the f32 accumulation bound (plus half an ulp of sum |x| per step when the
 * sum is rounded after every step); ints, and max/min of any type, exact.
 */
int64_t bench_check(const void *out, size_t count, comm_dtype_t dtype, comm_op_t op,
                    uint64_t seed, int nranks, bool stepwise_round)
{
    bool is_int = dtype == COMM_I32 || dtype == COMM_I64;
    int64_t wrong = 0;

    for (size_t j = 0; j < count; j++) {
        double ref = 0.0, sumabs = 0.0;
        int64_t iref = 0;
        for (int r = 0; r < nranks; r++) {
            double x = bench_value(dtype, seed, r, j);
            if (op == COMM_SUM) {
                ref += x;
                sumabs += fabs(x);
                iref += (int64_t)x;
            } else if (r == 0 || (op == COMM_MAX ? x > ref : x < ref)) {
                ref = x;
                iref = (int64_t)x;
            }
        }
        if (is_int) {
            int64_t got = dtype == COMM_I32 ? ((const int32_t *)out)[j]
                                            : ((const int64_t *)out)[j];
            wrong += got != iref;
            continue;
        }
        double got = read_elem(out, j, dtype), tol = 0.0;
        if (op == COMM_SUM) {
            switch (dtype) {
            case COMM_F32: tol = 1e-5 * nranks * sumabs; break;
            case COMM_F64: tol = 1e-12 * nranks * sumabs; break;
            default:
                tol = 2.0 * ulp_of(dtype, fabs(ref)) + nranks * 0x1.0p-23 * sumabs;
                /* Each of the n-1 partial sums, at most sum |x|, rounded once more. */
                if (stepwise_round)
                    tol += 0.5 * (nranks - 1) * ulp_of(dtype, sumabs);
            }
        }
        /* Written as a negated <= so that a NaN (an element never written) is wrong. */
        wrong += !(fabs(got - ref) <= tol);
    }
    return wrong;
}

uint64_t bench_fnv1a(const void *buf, size_t bytes)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
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
static int check_size(const struct bench_rank *r, void *send, void *recv, void *hsend,
                      void *hrecv, size_t count, size_t bytes, int64_t *wrong_out)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    uint64_t seed = bench_seed(bytes, o->dtype, o->op);
    bool same = false;

    bench_fill(hsend, count, o->dtype, seed, r->rank);
    if (!o->inplace) {
        poison(hrecv, bytes, o->dtype);
        if (d->to_device(d->ctx, recv, hrecv, bytes))
            return -1;
    }
    if (d->to_device(d->ctx, send, hsend, bytes) || call(r, send, recv, count) ||
        d->to_host(d->ctx, hrecv, recv, bytes))
        return -1;

    int64_t wrong = bench_check(hrecv, count, o->dtype, o->op, seed, r->nranks,
                                r->stepwise_round);
    int rc = r->sync->same_bytes ? r->sync->same_bytes(r->sync->ctx, hrecv, bytes, &same)
                                 : same_by_hash(r->sync, hrecv, bytes, &same);
    if (rc || r->sync->reduce(r->sync->ctx, &wrong, 1, BENCH_SUM_I64))
        return -1;
    if (!same) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: size %zu: the ranks' outputs are not bit-identical\n",
                    bytes);
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
        iters = want < BENCH_MIN_ITERS ? BENCH_MIN_ITERS
                : want > BENCH_MAX_ITERS ? BENCH_MAX_ITERS : (int)want;
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
