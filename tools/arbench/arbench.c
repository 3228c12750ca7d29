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
#include "arcomm_side.h"
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
    "Usage: arbench [OPTION]...\n"
    "  or:  mpirun -np N arbench --mpi [OPTION]...\n"
    "\n"
    "Times arcomm's collectives over a sweep of sizes, like nccl-tests' *_perf.\n"
    "  --coll COLL        allreduce (default) broadcast reduce allgather reduce_scatter\n"
    "                     alltoall, or all: each in turn, one table each (alltoall is left\n"
    "                     out with --inplace: it has no in-place form); root 0\n"
    "  -n, --nranks N     ranks (default 2): threads of this process, or with --procs\n"
    "                     processes started through arrun\n"
    "  --procs            process ranks (arbench re-launches itself as arrun -n N arbench)\n"
    "  --mpi              started by mpirun (mpirun -np N arbench --mpi ...): one rank a\n"
    "                     process, over comm_init_mpi (several hosts); with --compare mpi\n"
    "                     the same processes time MPI's collectives too (builds with MPI;\n"
    "                     host buffers); --device cuda: each rank on the GPU of its index\n"
    "                     on its host, modulo the GPUs it sees\n"
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
    "  --fresh            (host) before every call, untimed, each rank writes its input\n"
    "                     (the same values again) and reads its output, as an application\n"
    "                     that produces and consumes them: the peers then find no line of\n"
    "                     them in their own caches (without it, back-to-back calls on\n"
    "                     unchanged buffers let a one-pass path read inputs the previous\n"
    "                     call left in its cache); the same in the --compare mpi run\n"
    "  --iters N          timed calls per size (default: ~0.2 s worth, 20..10000)\n"
    "  --warmup N         untimed calls first (default 10% of iters, at least 5)\n"
    "  --rounds R         run the sweeps R times, report the median (default 1)\n"
    "  --mem-alloc        the buffers under test from comm_mem_alloc (host): process ranks\n"
    "                     reach each other's and take the one-pass paths\n"
    "                     (ARCOMM_MEM_POOL_BYTES is set to fit the largest size unless set)\n"
    "  --shared-heap      with --procs: the ranks run under arrun --shared-heap, their\n"
    "                     private buffers in libarcomm_heap.so's shared heap (one-pass)\n"
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

#if ARBENCH_HAVE_MPI
/* arbench --mpi: the collectives over a communicator of comm_init_mpi. */
static struct arcomm_ctx mpi_actx;
static struct bench_coll coll_of_comm(comm_t *comm, void *stream)
{
    mpi_actx.comm = comm;
    mpi_actx.stream = stream;
    return bench_arcomm_coll(&mpi_actx);
}
#endif

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
    cfg.device_index = bench_device_ordinal(opts->device, local_rank(cfg.rank));
    cfg.transport = opts->transport;
    return comm_init(out, &cfg);
}

static int run_rank(const struct bench_opts *o, int argc, char **argv)
{
    comm_t *comm = NULL;
    comm_status_t st = comm_init_env(&comm);
    if (st != COMM_OK)
        return bench_init_failed(st);
    int rank = comm_rank(comm), rc = BENCH_EXIT_OK;
    struct bench_opts opts = *o;
    opts.nranks = comm_size(comm);

    struct bench_device dev;
    int code =
        bench_device_open(opts.device, bench_device_ordinal(opts.device, local_rank(rank)), &dev);
    if (code) {
        comm_destroy(comm);
        return code;
    }
    /* The host communicator keeps the benchmark's books; a device or transport under test
     * gets a communicator of its own, whose id rank 0 makes and sends over the host one. */
    comm_t *tested = comm;
    if ((opts.device != COMM_DEVICE_HOST || opts.transport != NULL) &&
        (st = device_comm(comm, &opts, &tested)) != COMM_OK) {
        bench_device_close(&dev);
        comm_destroy(comm);
        return bench_init_failed(st);
    }
    struct bench_report *rep = calloc(1, sizeof(*rep));
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&opts, sizes, BENCH_MAX_SIZES);
    if (opts.mem_alloc)
        bench_device_use_segment(&dev, tested);
    struct arcomm_ctx actx = {.comm = tested, .stream = bench_device_stream(&dev)};
    struct bench_coll coll = bench_arcomm_coll(&actx);
    struct bench_sync sync = {.reduce = bench_comm_reduce, .same_bytes = NULL, .ctx = comm};
    struct bench_rank r = {.rank = rank,
                           .nranks = opts.nranks,
                           .opts = &opts,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &dev,
                           .wire = bench_wire_of(opts.device, false),
                           .fixed_order = bench_fixed_order(opts.device, false)};
    if (!rep) {
        if (tested != comm)
            comm_destroy(tested);
        comm_destroy(comm);
        bench_device_close(&dev);
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
    bench_device_close(&dev);
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
            rc = bench_run_threads(o, sizes, nsizes, ar, live ? rep : NULL, rep->meta.transport,
                                   false);
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
            rc = bench_run_threads(o, sizes, nsizes, p + (size_t)round * nsizes, NULL, ignored,
                                   true);
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
        if ((rc = bench_measure_ceiling(o, top, &all->ceiling_gbs, &all->floor_us)))
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
        if ((rc = bench_device_check(o.device)))
            return rc;
        return bench_mpi_main(&o, argc, argv, coll_of_comm);
#else
        fprintf(stderr, "arbench: --mpi needs a build with MPI (libarcomm_mpi)\n");
        return BENCH_EXIT_USAGE;
#endif
    }
    if ((rc = bench_device_check(o.device)))
        return rc;
    if (o.mem_alloc && o.device != COMM_DEVICE_HOST) {
        fprintf(stderr, "arbench: --mem-alloc: comm_mem_alloc gives host buffers; leave out "
                        "--device or use --device host\n");
        return BENCH_EXIT_USAGE;
    }
    if (o.shared_heap && (!o.procs || o.mem_alloc || o.device != COMM_DEVICE_HOST)) {
        fprintf(stderr, "arbench: --shared-heap is for the private host buffers of process "
                        "ranks: use it with --procs, without --mem-alloc and --device\n");
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
    struct bench_coll have = bench_arcomm_coll(&none);
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
