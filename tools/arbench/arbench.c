/* SPDX-License-Identifier: MIT */
/*
 * arbench: the collectives' benchmark of arcomm, in the manner of nccl-tests'
 * all_reduce_perf, broadcast_perf, reduce_perf, all_gather_perf, reduce_scatter_perf
 * and alltoall_perf (--coll; all runs each in turn, one table each).  Three ways to run:
 *
 *   threads (default)  N threads of this process, one rank each;
 *   --procs            this program again, N times, under `arrun -n N`: the launcher
 *                      reads the ranks' CSV (--csv-stdout) and reports;
 *   under arrun        (ARCOMM_RANK set) one process rank, through comm_init_env.
 *
 * --compare mpi runs the same sweep through arbench-mpi under mpirun after the arcomm
 * sweep (R rounds of both with --rounds R) and prints both side by side.  Above each
 * table, the memcpy ceiling of the machine, measured first in the same run (threads, one
 * per rank, all at once); each row's ceil column is the collective's least memory
 * traffic (bench_min_traffic) over its time, as a fraction of that ceiling.
 */
#include "bench_common.h"
#include "bench_launch.h"
#include "bench_multihost.h"
#include "bench_report.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef ARBENCH_HAVE_CUDA
#define ARBENCH_HAVE_CUDA 0
#endif
#if ARBENCH_HAVE_CUDA
#include "device_cuda.h"
#endif
#ifndef ARBENCH_VERSION
#define ARBENCH_VERSION "unknown"
#endif

static const char usage[] =
    "usage: arbench [--coll COLL] [-n RANKS] [--procs] [-b MIN] [-e MAX] [-f FACTOR]\n"
    "               [-d DTYPE] [-o OP] [--inplace] [--graph] [--check] [--iters N] [--warmup N]\n"
    "               [--rounds R] [--no-bind] [--device host|cuda] [--transport NAME]\n"
    "               [--compare mpi|nccl]\n"
    "               [--csv FILE] [--json FILE] [--plot FILE.png] [--mpi]\n"
    "Times arcomm's collectives over a sweep of sizes, like nccl-tests' *_perf.\n"
    "  --coll COLL        allreduce (default) broadcast reduce allgather reduce_scatter\n"
    "                     alltoall, or all: each in turn, one table each (alltoall is left\n"
    "                     out with --inplace: it has no in-place form); root 0\n"
    "  -n, --nranks N     ranks (default 2): threads of this process, or with --procs\n"
    "                     processes started through arrun\n"
    "  --procs            process ranks (arbench re-launches itself as arrun -n N arbench)\n"
    "  --mpi              started by mpirun (mpirun -np N arbench --mpi ...): one rank a\n"
    "                     process, over comm_init_mpi (several hosts); with --compare mpi\n"
    "                     the same processes time MPI's collectives too (builds with MPI)\n"
    "  -b, -e SIZE        first and last size in bytes (default 4 and 64M; K, M, G\n"
    "                     suffixes are powers of 1024), as nccl-tests counts it: allreduce,\n"
    "                     broadcast, reduce count*esize per rank; allgather the receive\n"
    "                     buffer n*sendcount*esize; reduce_scatter the send buffer\n"
    "                     n*recvcount*esize; alltoall each rank's buffer n*count*esize\n"
    "                     (so these three round sizes to whole multiples of n elements)\n"
    "  -f FACTOR          each size is the previous one times FACTOR (default 2)\n"
    "  -d DTYPE           f32 (default) f16 bf16 f64 i32 i64 i8 u8 u32 u64\n"
    "  -o OP              sum (default) max min prod avg (avg: float dtypes, not with\n"
    "                     --compare mpi); broadcast, allgather, alltoall ignore it\n"
    "  --inplace          the in-place form of each collective (api.md)\n"
    "  --graph            (--device cuda) each call captured once into a CUDA graph and\n"
    "                     every timed call a replay of it (fresh collective each time)\n"
    "  --check            one more call per size on fresh random data, outputs poisoned\n"
    "                     first: every element of every rank against a float64 reference\n"
    "                     (data movement bit-exact), reductions bit-identical on all ranks\n"
    "                     (reduce, reduce_scatter: the same bits as arcomm's allreduce of\n"
    "                     the same inputs), reduce's non-root outputs untouched (#wrong)\n"
    "  --iters N          timed calls per size (default: ~0.2 s worth, 20..10000)\n"
    "  --warmup N         untimed calls first (default 10% of iters, at least 5)\n"
    "  --rounds R         run the sweeps R times, report the median (default 1)\n"
    "  --mem-alloc        the buffers under test from comm_mem_alloc (host): process ranks\n"
    "                     reach each other's and take the one-pass paths\n"
    "                     (ARCOMM_MEM_POOL_BYTES is set to fit the largest size unless set)\n"
    "  --no-bind          let ranks float; by default each rank gets its own core,\n"
    "                     round robin (threads here, arrun --bind core, mpirun's\n"
    "                     default binding): unbound ranks may share a core and wait\n"
    "  --device D         where the buffers live: host (default) or cuda (CUDA builds)\n"
    "  --transport NAME   the communicator under test on this transport (shm, cuda,\n"
    "                     cuda-p2p, ...; as its config's transport), the benchmark's own\n"
    "                     host communicator automatic (ARCOMM_TRANSPORT would force both)\n"
    "  --compare mpi      the same sweep through Open MPI (arbench-mpi under mpirun:\n"
    "                     MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,\n"
    "                     MPI_Reduce_scatter_block, MPI_Alltoall), side by side;\n"
    "                     ratio = mpi time / arcomm time\n"
    "  --compare nccl     the same against NCCL (builds with CUDA and NCCL; every\n"
    "                     collective: ncclAllReduce ... ncclAlltoAll)\n"
    "  --csv FILE         the table as CSV; --json FILE as JSON; --plot FILE.png busbw\n"
    "                     against size through gnuplot (--coll all: every table in one)\n"
    "  -h, --help         this text; --version: arbench's and the library's version\n"
    "Time per size: every call timed on every rank, back to back; per call the slowest\n"
    "rank; median and p90 over calls.  algbw = size/time, busbw = algbw * nccl-tests'\n"
    "factor: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast,\n"
    "reduce 1.\n"
    "Ceiling (host buffers): before the sweeps, n threads pinned as the ranks all copy\n"
    "(memcpy) a buffer of the largest size at once, each its own; ceiling = n * 2 *\n"
    "size * copies / time (read + write counted), median of 5 batches.  ceil per row =\n"
    "least memory traffic / time / ceiling, with the traffic over all ranks for thread\n"
    "ranks and one-pass schemes (every input byte read once, every output byte written\n"
    "once; S = size, n = ranks, in place in brackets):\n"
    "  allreduce 2nS   broadcast (n+1)S [nS]   reduce (n+1)S\n"
    "  allgather (n+1)S [nS]   reduce_scatter (n+1)S   alltoall 2nS\n"
    "Sizes that fit in the caches can pass 1.\n"
    "Floor (threads pinned as the ranks): rounds in which every rank publishes the\n"
    "round number on its own cache line and waits for all others'; us per round, median\n"
    "of 41 batches: the least a call every rank must enter and agree on can take.\n"
    "Exit status: 0 ok, 1 a call failed or #wrong > 0, 2 usage.\n";

/* The library under test, and the stream its calls are ordered on (NULL on the host). */
struct arcomm_ctx {
    comm_t *comm;
    void *stream;
};

static int arcomm_failed(const struct arcomm_ctx *x, comm_status_t st, const char *what,
                         size_t count)
{
    if (st == COMM_OK)
        return 0;
    fprintf(stderr, "arbench: rank %d: %s(count %zu) failed: %s: %s\n", comm_rank(x->comm), what,
            count, comm_status_string(st), comm_last_error(x->comm));
    return -1;
}

static int coll_allreduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          comm_op_t op)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_allreduce(x->comm, send, recv, count, dtype, op, x->stream),
                         "comm_allreduce", count);
}

static int coll_broadcast(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          int root)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_broadcast(x->comm, send, recv, count, dtype, root, x->stream),
                         "comm_broadcast", count);
}

static int coll_reduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                       comm_op_t op, int root)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_reduce(x->comm, send, recv, count, dtype, op, root, x->stream),
                         "comm_reduce", count);
}

static int coll_allgather(void *ctx, const void *send, void *recv, size_t sendcount,
                          comm_dtype_t dtype)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_allgather(x->comm, send, recv, sendcount, dtype, x->stream),
                         "comm_allgather", sendcount);
}

static int coll_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount,
                               comm_dtype_t dtype, comm_op_t op)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x,
                         comm_reduce_scatter(x->comm, send, recv, recvcount, dtype, op, x->stream),
                         "comm_reduce_scatter", recvcount);
}

static int coll_alltoall(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype)
{
    const struct arcomm_ctx *x = ctx;
    return arcomm_failed(x, comm_alltoall(x->comm, send, recv, count, dtype, x->stream),
                         "comm_alltoall", count);
}

/* arcomm's collectives as a struct bench_coll over x. */
static struct bench_coll arcomm_coll(struct arcomm_ctx *x)
{
    return (struct bench_coll){
        .allreduce = coll_allreduce,
        .broadcast = coll_broadcast,
        .reduce = coll_reduce,
        .allgather = coll_allgather,
        .reduce_scatter = coll_reduce_scatter,
        .alltoall = coll_alltoall,
        .ctx = x,
    };
}

#if ARBENCH_HAVE_MPI
/* arbench --mpi: the collectives over a communicator of comm_init_mpi (host buffers). */
static struct arcomm_ctx mpi_actx;
static struct bench_coll coll_of_comm(comm_t *comm)
{
    mpi_actx.comm = comm;
    mpi_actx.stream = NULL;
    return arcomm_coll(&mpi_actx);
}
#endif

/*
 * The buffer backend of one rank: host memory, or (CUDA builds) the device memory of the
 * rank's GPU (ordinal = local rank) with its own stream.  0, or an exit code.
 */
static int open_device(comm_device_t kind, int ordinal, struct bench_device *out)
{
    if (kind == COMM_DEVICE_HOST) {
        *out = bench_device_host;
        return 0;
    }
#if ARBENCH_HAVE_CUDA
    if (kind == COMM_DEVICE_CUDA) {
        int n = bench_cuda_count();
        if (ordinal >= n) {
            fprintf(stderr, "arbench: rank %d needs GPU %d, but this process sees %d GPU%s\n",
                    ordinal, ordinal, n, n == 1 ? "" : "s");
            return BENCH_EXIT_USAGE;
        }
        return bench_cuda_open(ordinal, out) ? BENCH_EXIT_FAIL : 0;
    }
#else
    (void)ordinal;
#endif
    fprintf(stderr, "arbench: device %s: this arbench has no buffer backend for it\n",
            bench_device_name(kind));
    return BENCH_EXIT_USAGE;
}

/* --mem-alloc: the buffers under test come from the communicator's segment, where
 * process ranks reach each other's (the one-pass paths). */
static int seg_alloc(void *ctx, size_t bytes, void **ptr)
{
    comm_t *comm = ctx;
    comm_status_t st = comm_mem_alloc(comm, bytes ? bytes : 64, ptr);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: --mem-alloc: %s\n", comm_last_error(comm));
        return -1;
    }
    return 0;
}

static void seg_free(void *ctx, void *ptr)
{
    comm_mem_free(ctx, ptr);
}

static void use_segment(struct bench_device *dev, comm_t *comm)
{
    dev->alloc = seg_alloc;
    dev->free = seg_free;
    dev->ctx = comm;
}

/* What main refuses before any rank starts, so that each mistake is said once. */
static int check_device(comm_device_t kind)
{
    if (kind == COMM_DEVICE_HEXAGON) {
        fprintf(stderr, "arbench: --device hexagon is not supported: arbench has no Hexagon "
                        "buffer backend yet (tests/hexagon exercise the emulated HTP); use "
                        "--device host or cuda\n");
        return BENCH_EXIT_USAGE;
    }
    if (kind == COMM_DEVICE_CUDA && !ARBENCH_HAVE_CUDA) {
        fprintf(stderr, "arbench: --device cuda: this arbench was built without CUDA "
                        "(configure with nvcc in PATH, -Dcuda=enabled)\n");
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

/*
 * Every output file must be writable before the sweep, not found unwritable after it:
 * an existing file arbench may write, or a new one in a directory it may write.
 */
static int check_output(const char *opt, const char *path)
{
    char dir[PATH_MAX];
    struct stat st;
    char *slash;

    if (!path)
        return 0;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "arbench: %s %s: is a directory; give a file name\n", opt, path);
            return BENCH_EXIT_USAGE;
        }
        if (access(path, W_OK) != 0) {
            fprintf(stderr, "arbench: %s %s: cannot write it: %s\n", opt, path, strerror(errno));
            return BENCH_EXIT_USAGE;
        }
        return 0;
    }
    if (errno != ENOENT) {
        fprintf(stderr, "arbench: %s %s: %s\n", opt, path, strerror(errno));
        return BENCH_EXIT_USAGE;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr,
                "arbench: %s %s: cannot create it in %s: %s (give a path in a directory "
                "that exists and that you may write)\n",
                opt, path, dir, strerror(errno));
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

static int check_outputs(const struct bench_opts *o)
{
    int rc;

    if ((rc = check_output("--csv", o->csv_path)) || (rc = check_output("--json", o->json_path)) ||
        (rc = check_output("--plot", o->plot_path)))
        return rc;
    if (o->plot_path && !bench_in_path("gnuplot")) {
        fprintf(stderr,
                "arbench: --plot %s needs gnuplot, which is not in PATH (install "
                "gnuplot-nox, or leave out --plot)\n",
                o->plot_path);
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

static void close_device(struct bench_device *d)
{
#if ARBENCH_HAVE_CUDA
    if (d->kind == COMM_DEVICE_CUDA)
        bench_cuda_close(d);
#else
    (void)d;
#endif
}

static void *device_stream(const struct bench_device *d)
{
#if ARBENCH_HAVE_CUDA
    if (d->kind == COMM_DEVICE_CUDA)
        return bench_cuda_stream(d);
#else
    (void)d;
#endif
    return NULL;
}

static int init_failed(comm_status_t st)
{
    static atomic_flag said = ATOMIC_FLAG_INIT; /* every thread rank may fail alike */

    /* comm_last_error(NULL) is per thread: this is the failing thread's reason. */
    if (!atomic_flag_test_and_set(&said))
        fprintf(stderr, "arbench: %s (%s)\n", comm_last_error(NULL), comm_status_string(st));
    return st == COMM_ERR_UNSUPPORTED ? BENCH_EXIT_USAGE : BENCH_EXIT_FAIL;
}

/* ---- thread ranks ---- */

struct thr_shared {
    const struct bench_opts *opts;
    cpu_set_t cpus; /* the process's CPUs, dealt out to the ranks in turn */
    int ncpus;
    comm_id_t id;
    pthread_barrier_t bar;
    void **ptrs; /* each rank's published buffer, for struct bench_sync */
    const size_t *sizes;
    size_t nsizes;
    struct bench_result *res;  /* rank 0 writes one per size */
    struct bench_report *live; /* print rows as they come (rank 0), or NULL */
    char transport[64];
    atomic_int exit_code; /* first failure wins; the others see it */
    bool nccl;            /* this pass runs NCCL (--compare nccl), not arcomm */
    unsigned char nccl_id[128];
    size_t ceiling_bytes; /* the ceiling pass: its buffer size, and what it measured */
    double ceiling_gbs;
    double floor_us; /* and the exchange floor (floor_pass) */
    struct floor_line *lines;
};

/* One rank's word of the floor pass, on a cache line of its own. */
struct floor_line {
    _Alignas(64) _Atomic uint64_t round;
};

struct thr_rank {
    struct thr_shared *sh;
    int rank;
};

/* Shared memory and a barrier: the benchmark's bookkeeping never uses the library. */
static int thr_reduce(void *ctx, void *vals, size_t n, enum bench_red red)
{
    struct thr_rank *t = ctx;
    struct thr_shared *sh = t->sh;
    size_t esz = red == BENCH_MAX_F64 ? sizeof(double) : sizeof(int64_t);
    void *tmp = malloc(n > 0 ? n * esz : 1);
    if (!tmp) {
        fprintf(stderr, "arbench: out of memory\n");
        exit(BENCH_EXIT_FAIL);
    }
    sh->ptrs[t->rank] = vals;
    pthread_barrier_wait(&sh->bar);
    memcpy(tmp, sh->ptrs[0], n * esz);
    for (int r = 1; r < sh->opts->nranks; r++) {
        for (size_t i = 0; i < n; i++) {
            if (red == BENCH_MAX_F64) {
                double *d = tmp, x = ((const double *)sh->ptrs[r])[i];
                d[i] = x > d[i] ? x : d[i];
            } else {
                int64_t *d = tmp, x = ((const int64_t *)sh->ptrs[r])[i];
                d[i] = red == BENCH_SUM_I64   ? (int64_t)((uint64_t)d[i] + (uint64_t)x)
                       : red == BENCH_MAX_I64 ? (x > d[i] ? x : d[i])
                                              : (x < d[i] ? x : d[i]);
            }
        }
    }
    pthread_barrier_wait(&sh->bar); /* everyone has read every rank's values */
    memcpy(vals, tmp, n * esz);
    free(tmp);
    return 0;
}

static int thr_same_bytes(void *ctx, const void *buf, size_t bytes, bool *same)
{
    struct thr_rank *t = ctx;
    struct thr_shared *sh = t->sh;
    int64_t differ = 0;

    sh->ptrs[t->rank] = (void *)buf;
    pthread_barrier_wait(&sh->bar);
    /* Each rank compares itself with rank 0: thread ranks see each other's memory. */
    differ = memcmp(buf, sh->ptrs[0], bytes) != 0;
    pthread_barrier_wait(&sh->bar);
    thr_reduce(ctx, &differ, 1, BENCH_SUM_I64);
    *same = differ == 0;
    return 0;
}

static void thr_fail(struct thr_shared *sh, int code)
{
    int zero = 0;
    atomic_compare_exchange_strong(&sh->exit_code, &zero, code);
    /* A rank that gave up leaves the others blocked in barriers: end the process. */
    fflush(stdout);
    exit(atomic_load(&sh->exit_code));
}

static void pin_rank(const struct thr_shared *sh, int rank)
{
    if (sh->opts->no_bind || sh->ncpus <= 0)
        return;
    /* Like arrun --bind core: two spinning ranks that the scheduler put on one core
     * would measure the scheduler, not the library. */
    int want = rank % sh->ncpus, cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && want >= 0; c++)
        if (CPU_ISSET(c, &sh->cpus) && want-- == 0)
            cpu = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

static void *thr_main(void *arg)
{
    struct thr_rank *t = arg;
    struct thr_shared *sh = t->sh;
    const struct bench_opts *o = sh->opts;
    comm_config_t cfg;
    comm_t *comm = NULL;

    pin_rank(sh, t->rank);
    struct bench_device dev;
    int code = open_device(o->device, t->rank, &dev);
    if (code)
        thr_fail(sh, code);
    struct arcomm_ctx actx = {.stream = device_stream(&dev)};
    struct bench_coll coll = arcomm_coll(&actx);
#if ARBENCH_HAVE_CUDA
    struct bench_nccl_ctx nctx = {.stream = device_stream(&dev)};
    if (sh->nccl) {
        if (bench_nccl_init(&nctx.comm, o->nranks, sh->nccl_id, t->rank, t->rank))
            thr_fail(sh, BENCH_EXIT_FAIL);
        coll = bench_nccl_coll(&nctx);
    }
#endif
    if (!sh->nccl) {
        comm_config_init(&cfg);
        cfg.nranks = o->nranks;
        cfg.rank = t->rank;
        cfg.id = sh->id;
        cfg.device = o->device;
        cfg.device_index = o->device == COMM_DEVICE_HOST ? -1 : t->rank;
        cfg.transport = o->transport;
        comm_status_t st = comm_init(&comm, &cfg);
        if (st != COMM_OK)
            thr_fail(sh, init_failed(st));
        actx.comm = comm;
        if (o->mem_alloc)
            use_segment(&dev, comm);
    }
    struct bench_sync sync = {.reduce = thr_reduce, .same_bytes = thr_same_bytes, .ctx = t};
    struct bench_rank r = {.rank = t->rank,
                           .nranks = o->nranks,
                           .opts = o,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &dev,
                           .bf16_wire = o->device == COMM_DEVICE_CUDA && !sh->nccl,
                           .fixed_order = !sh->nccl};
    if (t->rank == 0) {
        snprintf(sh->transport, sizeof(sh->transport), "%s",
                 sh->nccl ? "nccl" : comm_transport_name(comm));
        if (sh->live) {
            snprintf(sh->live->meta.transport, sizeof(sh->live->meta.transport), "%s",
                     sh->transport);
            bench_print_header(stdout, sh->live);
        }
    }
    for (size_t i = 0; i < sh->nsizes; i++) {
        struct bench_result res;
        if (t->rank == 0)
            bench_progress("arbench", i, sh->nsizes, sh->sizes[i]);
        if (bench_run_size(&r, sh->sizes[i], &res))
            thr_fail(sh, BENCH_EXIT_FAIL);
        if (t->rank != 0)
            continue;
        sh->res[i] = res;
        if (sh->live) {
            bench_progress_end();
            bench_print_row(stdout, sh->live, &(struct bench_row){.a = res, .coll = o->coll});
        }
    }
    if (t->rank == 0)
        bench_progress_end();
    comm_destroy(comm);
#if ARBENCH_HAVE_CUDA
    if (sh->nccl)
        bench_nccl_destroy(nctx.comm);
#endif
    close_device(&dev);
    return NULL;
}

static int run_threads(const struct bench_opts *o, const size_t *sizes, size_t nsizes,
                       struct bench_result *res, struct bench_report *live, char *transport,
                       bool nccl)
{
    struct thr_shared sh = {
        .opts = o, .sizes = sizes, .nsizes = nsizes, .res = res, .live = live, .nccl = nccl};
#if ARBENCH_HAVE_CUDA
    if (nccl && (bench_nccl_load() || bench_nccl_unique_id(sh.nccl_id)))
        return BENCH_EXIT_USAGE;
#endif
    struct thr_rank *ranks = calloc((size_t)o->nranks, sizeof(*ranks));
    pthread_t *tids = calloc((size_t)o->nranks, sizeof(*tids));
    sh.ptrs = calloc((size_t)o->nranks, sizeof(*sh.ptrs));
    if (!ranks || !tids || !sh.ptrs) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    comm_status_t st = comm_id_new(&sh.id);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: comm_id_new: %s: %s\n", comm_status_string(st),
                comm_last_error(NULL));
        return BENCH_EXIT_FAIL;
    }
    if (sched_getaffinity(0, sizeof(sh.cpus), &sh.cpus) == 0)
        sh.ncpus = CPU_COUNT(&sh.cpus);
    pthread_barrier_init(&sh.bar, NULL, (unsigned)o->nranks);
    for (int i = 0; i < o->nranks; i++) {
        ranks[i] = (struct thr_rank){.sh = &sh, .rank = i};
        int err = pthread_create(&tids[i], NULL, thr_main, &ranks[i]);
        if (err) {
            fprintf(stderr, "arbench: pthread_create: %s\n", strerror(err));
            exit(BENCH_EXIT_FAIL); /* the started ranks wait in comm_init */
        }
    }
    for (int i = 0; i < o->nranks; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&sh.bar);
    snprintf(transport, 64, "%s", sh.transport);
    free(sh.ptrs);
    free(tids);
    free(ranks);
    return BENCH_EXIT_OK;
}

/*
 * The exchange floor: rounds in which every rank's thread (pinned as in a sweep)
 * publishes the round number on its own cache line and waits for every other rank's.
 * No call that every rank must enter and agree on before any returns can take less
 * than one such round; arbench prints it beside the ceiling.  Batches of about 0.2 ms
 * (short, so that a batch in which another process took a core is an outlier), the
 * median of 41, in microseconds per round.  Threads that outnumber the cores yield.
 */
static void floor_rounds(struct floor_line *lines, const struct bench_rank *r, uint64_t *round,
                         long k, bool yield)
{
    for (long i = 0; i < k; i++) {
        ++*round;
        atomic_store_explicit(&lines[r->rank].round, *round, memory_order_release);
        for (int p = 0; p < r->nranks; p++)
            while (atomic_load_explicit(&lines[p].round, memory_order_acquire) < *round) {
                if (yield)
                    sched_yield();
#if defined(__x86_64__) || defined(__i386__)
                else
                    __builtin_ia32_pause(); /* as arcomm's own waits spin */
#endif
            }
    }
}

static int floor_pass(struct thr_rank *t, const struct bench_rank *r, double *us)
{
    enum { BATCHES = 41 };
    struct floor_line *lines = t->sh->lines;
    bool yield = t->sh->ncpus > 0 && r->nranks > t->sh->ncpus;
    uint64_t round = 0;
    double per[BATCHES];
    long k = 1;
    for (int b = -1; b < BATCHES; b++) {
        for (;;) {
            double dt = 0.0;
            if (r->sync->reduce(r->sync->ctx, &dt, 1, BENCH_MAX_F64))
                return -1;
            double t0 = bench_now();
            floor_rounds(lines, r, &round, k, yield);
            dt = bench_now() - t0;
            if (r->sync->reduce(r->sync->ctx, &dt, 1, BENCH_MAX_F64))
                return -1;
            /* b == -1 sizes the batches: every rank doubles k alike (dt is the max). */
            if (b >= 0) {
                per[b] = dt / (double)k * 1e6;
                break;
            }
            if (dt >= 2e-4 || k >= (1L << 20))
                break;
            k *= 2;
        }
    }
    *us = bench_median(per, BATCHES);
    return 0;
}

/* The ceiling pass: the ranks' threads, pinned as in a sweep, copying at once. */
static void *thr_ceiling(void *arg)
{
    struct thr_rank *t = arg;
    struct thr_shared *sh = t->sh;

    pin_rank(sh, t->rank);
    struct bench_sync sync = {.reduce = thr_reduce, .same_bytes = thr_same_bytes, .ctx = t};
    struct bench_rank r = {
        .rank = t->rank, .nranks = sh->opts->nranks, .opts = sh->opts, .sync = &sync};
    double gbs = 0.0;
    double us = 0.0;
    if (bench_ceiling(&r, sh->ceiling_bytes, &gbs) || floor_pass(t, &r, &us))
        thr_fail(sh, BENCH_EXIT_FAIL);
    if (t->rank == 0) {
        sh->ceiling_gbs = gbs;
        sh->floor_us = us;
    }
    return NULL;
}

static int measure_ceiling(const struct bench_opts *o, size_t bytes, double *gbs, double *floor_us)
{
    struct thr_shared sh = {.opts = o, .ceiling_bytes = bytes};
    struct thr_rank *ranks = calloc((size_t)o->nranks, sizeof(*ranks));
    pthread_t *tids = calloc((size_t)o->nranks, sizeof(*tids));
    sh.ptrs = calloc((size_t)o->nranks, sizeof(*sh.ptrs));
    sh.lines = aligned_alloc(64, (size_t)o->nranks * sizeof(*sh.lines));
    if (!ranks || !tids || !sh.ptrs || !sh.lines) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    if (sched_getaffinity(0, sizeof(sh.cpus), &sh.cpus) == 0)
        sh.ncpus = CPU_COUNT(&sh.cpus);
    pthread_barrier_init(&sh.bar, NULL, (unsigned)o->nranks);
    for (int i = 0; i < o->nranks; i++) {
        ranks[i] = (struct thr_rank){.sh = &sh, .rank = i};
        int err = pthread_create(&tids[i], NULL, thr_ceiling, &ranks[i]);
        if (err) {
            fprintf(stderr, "arbench: pthread_create: %s\n", strerror(err));
            exit(BENCH_EXIT_FAIL);
        }
    }
    for (int i = 0; i < o->nranks; i++)
        pthread_join(tids[i], NULL);
    pthread_barrier_destroy(&sh.bar);
    *gbs = sh.ceiling_gbs;
    *floor_us = sh.floor_us;
    free(sh.lines);
    free(sh.ptrs);
    free(tids);
    free(ranks);
    return BENCH_EXIT_OK;
}

/* ---- a process rank under arrun ---- */

static int bench_comm_reduce(void *ctx, void *vals, size_t n, enum bench_red red)
{
    comm_t *comm = ctx;
    static const comm_op_t ops[] = {[BENCH_MAX_F64] = COMM_MAX,
                                    [BENCH_SUM_I64] = COMM_SUM,
                                    [BENCH_MAX_I64] = COMM_MAX,
                                    [BENCH_MIN_I64] = COMM_MIN};
    comm_status_t st = comm_allreduce(comm, vals, vals, n,
                                      red == BENCH_MAX_F64 ? COMM_F64 : COMM_I64, ops[red], NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: rank %d: bookkeeping allreduce failed: %s: %s\n", comm_rank(comm),
                comm_status_string(st), comm_last_error(comm));
        return -1;
    }
    return 0;
}

/* The rank's local rank (arrun sets ARCOMM_LOCAL_RANK): its GPU ordinal. */
static int local_rank(int rank)
{
    const char *v = getenv("ARCOMM_LOCAL_RANK");
    return v ? atoi(v) : rank;
}

/* A process rank's GPU: its local rank, or, with fewer GPUs than ranks, local rank
 * modulo the GPUs (process ranks may share a GPU; thread ranks may not). */
static int proc_gpu(comm_device_t kind, int local)
{
#if ARBENCH_HAVE_CUDA
    int n = kind == COMM_DEVICE_CUDA ? bench_cuda_count() : 0;
    return n > 0 ? local % n : local;
#else
    (void)kind;
    return local;
#endif
}

/* A communicator on opts->device (and opts->transport) over the same ranks, its id sent
 * over host. */
static comm_status_t device_comm(comm_t *host, const struct bench_opts *opts, comm_t **out)
{
    int64_t words[COMM_ID_BYTES / 8] = {0};
    comm_id_t id;
    if (comm_rank(host) == 0) {
        comm_status_t st = comm_id_new(&id);
        if (st != COMM_OK)
            return st;
        memcpy(words, id.str, COMM_ID_BYTES);
    }
    comm_status_t st =
        comm_allreduce(host, words, words, COMM_ID_BYTES / 8, COMM_I64, COMM_SUM, NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: sending the device communicator's id: %s\n",
                comm_last_error(host));
        return st;
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    memcpy(cfg.id.str, words, COMM_ID_BYTES);
    cfg.nranks = comm_size(host);
    cfg.rank = comm_rank(host);
    cfg.device = opts->device;
    cfg.device_index = proc_gpu(opts->device, local_rank(cfg.rank));
    cfg.transport = opts->transport;
    return comm_init(out, &cfg);
}

static int run_rank(const struct bench_opts *o, int argc, char **argv)
{
    comm_t *comm = NULL;
    comm_status_t st = comm_init_env(&comm);
    if (st != COMM_OK)
        return init_failed(st);
    int rank = comm_rank(comm), rc = BENCH_EXIT_OK;
    struct bench_opts opts = *o;
    opts.nranks = comm_size(comm);

    struct bench_device dev;
    int code = open_device(opts.device, proc_gpu(opts.device, local_rank(rank)), &dev);
    if (code) {
        comm_destroy(comm);
        return code;
    }
    /* The host communicator keeps the benchmark's books; a device or transport under test
     * gets a communicator of its own, whose id rank 0 makes and sends over the host one. */
    comm_t *tested = comm;
    if ((opts.device != COMM_DEVICE_HOST || opts.transport != NULL) &&
        (st = device_comm(comm, &opts, &tested)) != COMM_OK) {
        close_device(&dev);
        comm_destroy(comm);
        return init_failed(st);
    }
    struct bench_report *rep = calloc(1, sizeof(*rep));
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&opts, sizes, BENCH_MAX_SIZES);
    if (opts.mem_alloc)
        use_segment(&dev, tested);
    struct arcomm_ctx actx = {.comm = tested, .stream = device_stream(&dev)};
    struct bench_coll coll = arcomm_coll(&actx);
    struct bench_sync sync = {.reduce = bench_comm_reduce, .same_bytes = NULL, .ctx = comm};
    struct bench_rank r = {.rank = rank,
                           .nranks = opts.nranks,
                           .opts = &opts,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &dev,
                           .bf16_wire = opts.device == COMM_DEVICE_CUDA,
                           .fixed_order = true};
    if (!rep) {
        if (tested != comm)
            comm_destroy(tested);
        comm_destroy(comm);
        close_device(&dev);
        return BENCH_EXIT_FAIL;
    }
    rep->opts = &opts;
    bench_meta_fill(&rep->meta, argc, argv);
    rep->meta.mode = "procs";
    snprintf(rep->meta.transport, sizeof(rep->meta.transport), "%s", comm_transport_name(tested));
    if (!opts.csv_stdout && opts.device == COMM_DEVICE_HOST && n > 0) {
        /* Under arrun alone, the ceiling of these processes (else the launcher's). */
        rep->ceiling_bytes = sizes[n - 1] < 64 ? 64 : sizes[n - 1];
        if (bench_ceiling(&r, sizes[n - 1], &rep->ceiling_gbs)) {
            rc = BENCH_EXIT_FAIL;
            n = 0;
        }
    }
    if (rank == 0 && !opts.csv_stdout)
        bench_print_header(stdout, rep);
    for (size_t i = 0; i < n; i++) {
        struct bench_row *row = &rep->rows[i];
        row->coll = opts.coll;
        if (rank == 0)
            bench_progress("arbench", i, n, sizes[i]);
        if (bench_run_size(&r, sizes[i], &row->a)) {
            rc = BENCH_EXIT_FAIL;
            break;
        }
        rep->nrows++;
        if (rank == 0 && !opts.csv_stdout) {
            bench_progress_end();
            bench_print_row(stdout, rep, row);
        }
        if (row->a.wrong > 0)
            rc = BENCH_EXIT_FAIL;
    }
    if (rank == 0) {
        bench_progress_end();
        if (opts.csv_stdout)
            bench_csv_sweep(stdout, rep);
        if ((opts.csv_path && bench_write_csv(opts.csv_path, rep)) ||
            (opts.json_path && bench_write_json(opts.json_path, rep)) ||
            (opts.plot_path && bench_plot(opts.plot_path, rep)))
            rc = BENCH_EXIT_FAIL;
    }
    free(rep);
    if (tested != comm)
        comm_destroy(tested);
    comm_destroy(comm);
    close_device(&dev);
    return rc;
}

static void note(const char *what, int round, int rounds)
{
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r\033[Karbench: %s sweep, round %d/%d ...", what, round + 1, rounds);
        fflush(stderr);
    }
}

/* ---- the launcher: rounds of the arcomm sweep and the peer's, then the report ---- */

/*
 * One collective: rounds of the arcomm sweep and the peer's, then its table.  The rows
 * are appended to all (the report of every collective of this run, for the files);
 * *wrong says whether --check found wrong elements.  0, or an exit code when a sweep
 * could not run.
 */
static int run_sweeps(const struct bench_opts *o, struct bench_report *all, bool *wrong)
{
    struct bench_report *rep = calloc(1, sizeof(*rep));
    size_t sizes[BENCH_MAX_SIZES], nsizes = bench_sizes(o, sizes, BENCH_MAX_SIZES);
    size_t per_round = nsizes * sizeof(struct bench_result);
    struct bench_result *a = calloc((size_t)o->rounds, per_round);
    struct bench_result *p = calloc((size_t)o->rounds, per_round);
    int rc = BENCH_EXIT_OK;

    if (!rep || !a || !p) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    rep->opts = o;
    rep->peer_name = all->peer_name;
    rep->meta = all->meta;
    rep->ceiling_gbs = all->ceiling_gbs;
    rep->floor_us = all->floor_us;
    rep->ceiling_bytes = all->ceiling_bytes;
    /* One round, no peer, thread ranks: rows are printed as each size finishes. */
    bool live = o->rounds == 1 && !rep->peer_name && !o->procs;

    for (int round = 0; round < o->rounds; round++) {
        struct bench_result *ar = a + (size_t)round * nsizes;
        if (o->procs) {
            note("arcomm", round, o->rounds);
            if (bench_run_procs(o, ar, nsizes, rep->meta.transport))
                return BENCH_EXIT_FAIL;
        } else {
            rc = run_threads(o, sizes, nsizes, ar, live ? rep : NULL, rep->meta.transport, false);
            if (rc)
                return rc;
        }
        if (o->peer == BENCH_PEER_MPI) {
            note("mpi", round, o->rounds);
            if (bench_run_mpi(o, p + (size_t)round * nsizes, nsizes))
                return BENCH_EXIT_FAIL;
        } else if (o->peer == BENCH_PEER_NCCL) {
            /* NCCL over the same GPUs, thread ranks, the same timing and check. */
            char ignored[64];
            note("nccl", round, o->rounds);
            rc = run_threads(o, sizes, nsizes, p + (size_t)round * nsizes, NULL, ignored, true);
            if (rc)
                return rc;
        }
    }
    bench_progress_end();
    rep->nrows = nsizes;
    for (size_t i = 0; i < nsizes; i++) {
        struct bench_result ra[100], rp[100];
        for (int round = 0; round < o->rounds; round++) {
            ra[round] = a[(size_t)round * nsizes + i];
            rp[round] = p[(size_t)round * nsizes + i];
        }
        rep->rows[i].coll = o->coll;
        bench_result_median(ra, o->rounds, o->coll, o->nranks, &rep->rows[i].a);
        bench_result_median(rp, o->rounds, o->coll, o->nranks, &rep->rows[i].p);
        if (rep->rows[i].a.wrong > 0 || (rep->peer_name && rep->rows[i].p.wrong > 0))
            *wrong = true;
    }
    if (!live)
        bench_print_table(stdout, rep);
    snprintf(all->meta.transport, sizeof(all->meta.transport), "%s", rep->meta.transport);
    for (size_t i = 0; i < rep->nrows && all->nrows < BENCH_MAX_ROWS; i++)
        all->rows[all->nrows++] = rep->rows[i];
    free(p);
    free(a);
    free(rep);
    return rc;
}

/* The launcher: the ceiling, then each collective asked for, then the files. */
static int run_all(const struct bench_opts *o, int argc, char **argv)
{
    struct bench_report *all = calloc(1, sizeof(*all));
    enum bench_coll_kind colls[BENCH_NCOLLS];
    int ncolls = 0, rc = BENCH_EXIT_OK;
    bool wrong = false;

    if (!all) {
        fprintf(stderr, "arbench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    if (o->coll == BENCH_COLL_ALL) {
        for (int c = 0; c < BENCH_NCOLLS; c++)
            if (!(c == BENCH_ALLTOALL && o->inplace))
                colls[ncolls++] = (enum bench_coll_kind)c;
    } else {
        colls[ncolls++] = o->coll;
    }
    all->opts = o;
    all->peer_name = o->peer == BENCH_PEER_MPI ? "mpi" : o->peer == BENCH_PEER_NCCL ? "nccl" : NULL;
    bench_meta_fill(&all->meta, argc, argv);
    all->meta.mode = o->procs ? "procs" : "threads";

    /* The ceiling is the host's: sized like the largest buffer of the sweeps. */
    if (o->device == COMM_DEVICE_HOST) {
        size_t top = 0;
        for (int i = 0; i < ncolls; i++) {
            struct bench_opts oc = *o;
            size_t sizes[BENCH_MAX_SIZES], n;
            oc.coll = colls[i];
            n = bench_sizes(&oc, sizes, BENCH_MAX_SIZES);
            if (n > 0 && sizes[n - 1] > top)
                top = sizes[n - 1];
        }
        all->ceiling_bytes = top < 64 ? 64 : top;
        if ((rc = measure_ceiling(o, top, &all->ceiling_gbs, &all->floor_us)))
            goto out;
    }
    if (o->coll == BENCH_COLL_ALL && o->inplace)
        printf("# alltoall: left out (no in-place form)\n");
    for (int i = 0; i < ncolls; i++) {
        struct bench_opts oc = *o;
        oc.coll = colls[i];
        if (i > 0)
            printf("\n");
        /* After wrong elements the other collectives still run; not after a failure. */
        if ((rc = run_sweeps(&oc, all, &wrong)))
            goto out;
    }
    rc = wrong ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
    if ((o->csv_path && bench_write_csv(o->csv_path, all)) ||
        (o->json_path && bench_write_json(o->json_path, all)) ||
        (o->plot_path && bench_plot(o->plot_path, all)))
        rc = BENCH_EXIT_FAIL;
out:
    free(all);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench_opts o;

    bench_opts_init(&o);
    int rc = bench_parse_args(&o, argc, argv, "arbench", usage);
    if (rc == BENCH_PARSE_VERSION) {
        int major, minor, patch;
        comm_get_version(&major, &minor, &patch);
        printf("arbench %s (libarcomm %d.%d.%d)\n", ARBENCH_VERSION, major, minor, patch);
        return BENCH_EXIT_OK;
    }
    if (rc)
        return rc == 1 ? BENCH_EXIT_OK : BENCH_EXIT_USAGE;
    if (o.nranks > COMM_MAX_RANKS) {
        fprintf(stderr, "arbench: -n %d: a communicator has at most %d ranks (COMM_MAX_RANKS)\n",
                o.nranks, COMM_MAX_RANKS);
        return BENCH_EXIT_USAGE;
    }
    if (o.mpi) {
#if ARBENCH_HAVE_MPI
        return bench_mpi_main(&o, argc, argv, coll_of_comm);
#else
        fprintf(stderr, "arbench: --mpi needs a build with MPI (libarcomm_mpi)\n");
        return BENCH_EXIT_USAGE;
#endif
    }
    if ((rc = check_device(o.device)))
        return rc;
    if (o.mem_alloc && o.device != COMM_DEVICE_HOST) {
        fprintf(stderr, "arbench: --mem-alloc: comm_mem_alloc gives host buffers; leave out "
                        "--device or use --device host\n");
        return BENCH_EXIT_USAGE;
    }
    if (o.mem_alloc && getenv("ARCOMM_MEM_POOL_BYTES") == NULL) {
        /* Room for the largest row's send and receive buffers (and the check's), every
         * rank alike; the children of --procs inherit it. */
        char pool[32];
        snprintf(pool, sizeof(pool), "%zu", 4 * o.max_bytes + ((size_t)16 << 20));
        setenv("ARCOMM_MEM_POOL_BYTES", pool, 1);
    }
    struct arcomm_ctx none = {0};
    struct bench_coll have = arcomm_coll(&none);
    for (int c = 0; c < BENCH_NCOLLS; c++) {
        bool wanted = o.coll == (enum bench_coll_kind)c ||
                      (o.coll == BENCH_COLL_ALL && !(c == BENCH_ALLTOALL && o.inplace));
        if (wanted && !bench_coll_has(&have, (enum bench_coll_kind)c)) {
            fprintf(stderr, "arbench: --coll %s: this arbench does not drive comm_%s\n",
                    bench_coll_name(o.coll), bench_coll_name((enum bench_coll_kind)c));
            return BENCH_EXIT_USAGE;
        }
    }
    if (o.peer == BENCH_PEER_MPI && o.op == COMM_AVG) {
        fprintf(stderr, "arbench: --compare mpi -o avg: MPI has no average op\n");
        return BENCH_EXIT_USAGE;
    }
    if (o.peer == BENCH_PEER_NCCL) {
        /* NCCL is loaded at run time; the build needs CUDA for the device buffers. */
        if (!ARBENCH_HAVE_CUDA) {
            fprintf(stderr, "arbench: --compare nccl needs a build with CUDA and NCCL\n");
            return BENCH_EXIT_USAGE;
        }
        if (o.device != COMM_DEVICE_CUDA || o.procs) {
            fprintf(stderr, "arbench: --compare nccl compares CUDA thread ranks (one GPU each): "
                            "use --device cuda without --procs\n");
            return BENCH_EXIT_USAGE;
        }
    }
    if (getenv("ARCOMM_RANK")) {
        if (o.peer != BENCH_PEER_NONE || o.rounds > 1 || o.coll == BENCH_COLL_ALL) {
            fprintf(stderr, "arbench: --compare, --rounds and --coll all are for the launcher: "
                            "run arbench --procs instead of arrun arbench\n");
            return BENCH_EXIT_USAGE;
        }
        return run_rank(&o, argc, argv);
    }
    if (o.csv_stdout) {
        fprintf(stderr, "arbench: --csv-stdout is internal (for ranks under arrun)\n%s", usage);
        return BENCH_EXIT_USAGE;
    }
    if ((rc = check_outputs(&o)))
        return rc;
    return run_all(&o, argc, argv);
}
