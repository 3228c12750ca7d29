/* SPDX-License-Identifier: MIT */
/*
 * arbench-mpi: arbench's sweep through Open MPI, the peer of `arbench --compare mpi`:
 * MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block and
 * MPI_Alltoall for --coll allreduce, broadcast, reduce, allgather, reduce_scatter and
 * alltoall.  The measurement is bench_common's, unchanged: the same sizes, data, per-call
 * timing on every rank (the per-call times are combined with MPI_MAX after the loop),
 * statistics and check.  Started by arbench as
 *
 *   mpirun --allow-run-as-root --oversubscribe -np N arbench-mpi <sweep> --csv-stdout
 *
 * and usable alone (without --csv-stdout it prints arbench's table, with the memcpy
 * ceiling of its processes).  f16 and bf16, which MPI has no type for, travel as
 * MPI_UINT16_T with a user op that reduces in f32 and rounds once per pairwise step, as
 * an MPI user would write it.  MPI has no average: -o avg is refused.  In place is
 * MPI_IN_PLACE (reduce_scatter's result then lands at the start of the buffer);
 * MPI_Bcast has no out-of-place form, so out of place the root first copies its
 * sendbuf into its recvbuf, as an application wanting both buffers would.
 */
#include "bench_common.h"
#include "bench_report.h"

#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ARBENCH_VERSION
#define ARBENCH_VERSION "unknown"
#endif

static const char usage[] =
    "usage: mpirun -np N arbench-mpi [--coll COLL] [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE]\n"
    "               [-o OP] [--inplace] [--check] [--iters N] [--warmup N] [--csv FILE]\n"
    "               [--json FILE] [--plot FILE.png] [--csv-stdout]\n"
    "arbench's sweep of one collective through Open MPI (see arbench -h): --coll\n"
    "allreduce (default) broadcast reduce allgather reduce_scatter alltoall.\n"
    "  --csv-stdout   only the CSV of the sweep on stdout (what arbench reads)\n";

/* The user op of f16/bf16: the dtype and op it serves are set before each sweep. */
static comm_dtype_t half_dtype;
static comm_op_t half_op;

static void half_op_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    bench_half_reduce(inout, in, (size_t)*len, half_dtype, half_op);
}

struct mpi_ctx {
    MPI_Datatype type;
    MPI_Op op;
    int rank;
    size_t esize;
};

static int mpi_failed(int err, const char *what, size_t count)
{
    if (err == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "arbench-mpi: %s(count %zu) failed: %s\n", what, count, msg);
    return -1;
}

/* MPI counts are int; arbench's sizes stay far below, but say so rather than wrap. */
static int too_big(size_t count, size_t per)
{
    if (count <= (size_t)INT_MAX / (per ? per : 1))
        return 0;
    fprintf(stderr, "arbench-mpi: count %zu is beyond MPI's int counts\n", count);
    return -1;
}

/* In place is MPI_IN_PLACE, as an MPI application would call it. */
static int coll_allreduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          comm_op_t op)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    (void)op;
    if (too_big(count, 1))
        return -1;
    return mpi_failed(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, m->type,
                                    m->op, MPI_COMM_WORLD),
                      "MPI_Allreduce", count);
}

static int coll_broadcast(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          int root)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    if (too_big(count, 1))
        return -1;
    if (m->rank == root && send != recv)
        memcpy(recv, send, count * m->esize);
    return mpi_failed(MPI_Bcast(recv, (int)count, m->type, root, MPI_COMM_WORLD), "MPI_Bcast",
                      count);
}

static int coll_reduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                       comm_op_t op, int root)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    (void)op;
    if (too_big(count, 1))
        return -1;
    const void *s = m->rank == root && send == recv ? MPI_IN_PLACE : send;
    return mpi_failed(MPI_Reduce(s, recv, (int)count, m->type, m->op, root, MPI_COMM_WORLD),
                      "MPI_Reduce", count);
}

static int coll_allgather(void *ctx, const void *send, void *recv, size_t sendcount,
                          comm_dtype_t dtype)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(sendcount, (size_t)size))
        return -1;
    /* arcomm's in-place form: sendbuf is this rank's block of recvbuf. */
    const void *s =
        (const char *)send == (const char *)recv + (size_t)m->rank * sendcount * m->esize
            ? MPI_IN_PLACE
            : send;
    return mpi_failed(
        MPI_Allgather(s, (int)sendcount, m->type, recv, (int)sendcount, m->type, MPI_COMM_WORLD),
        "MPI_Allgather", sendcount);
}

static int coll_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount,
                               comm_dtype_t dtype, comm_op_t op)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    (void)op;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(recvcount, (size_t)size))
        return -1;
    /* arcomm's in-place form (recvbuf is block rank of sendbuf) is MPI's MPI_IN_PLACE on
     * the whole buffer, whose result lands at its start (bench_rank.rs_inplace_at_start). */
    if ((const char *)recv == (const char *)send + (size_t)m->rank * recvcount * m->esize)
        return mpi_failed(MPI_Reduce_scatter_block(MPI_IN_PLACE, (void *)send, (int)recvcount,
                                                   m->type, m->op, MPI_COMM_WORLD),
                          "MPI_Reduce_scatter_block", recvcount);
    return mpi_failed(
        MPI_Reduce_scatter_block(send, recv, (int)recvcount, m->type, m->op, MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block", recvcount);
}

static int coll_alltoall(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(count, (size_t)size))
        return -1;
    return mpi_failed(
        MPI_Alltoall(send, (int)count, m->type, recv, (int)count, m->type, MPI_COMM_WORLD),
        "MPI_Alltoall", count);
}

static int sync_mpi(void *ctx, void *vals, size_t n, enum bench_red red)
{
    (void)ctx;
    MPI_Datatype t = red == BENCH_MAX_F64 ? MPI_DOUBLE : MPI_INT64_T;
    MPI_Op op = red == BENCH_SUM_I64 ? MPI_SUM : red == BENCH_MIN_I64 ? MPI_MIN : MPI_MAX;
    return MPI_Allreduce(MPI_IN_PLACE, vals, (int)n, t, op, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    int rank, size, rc = BENCH_EXIT_OK;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Errors come back as codes, so that a failure is reported like arbench's. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    bench_opts_init(&o);
    /* Only rank 0 speaks about usage: the others parse with stderr silenced. */
    int saved = -1, nul;
    if (rank != 0 && (nul = open("/dev/null", O_WRONLY)) >= 0) {
        fflush(stderr);
        saved = dup(STDERR_FILENO);
        dup2(nul, STDERR_FILENO);
        close(nul);
    }
    int prc = bench_parse_args(&o, argc, argv, "arbench-mpi", usage);
    if (saved >= 0) {
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
    }
    if (prc == BENCH_PARSE_VERSION && rank == 0)
        printf("arbench-mpi %s (arcomm's Open MPI peer)\n", ARBENCH_VERSION);
    if (prc) {
        MPI_Finalize();
        return prc == 1 || prc == BENCH_PARSE_VERSION ? BENCH_EXIT_OK : BENCH_EXIT_USAGE;
    }
    if (o.op == COMM_AVG || o.coll == BENCH_COLL_ALL) {
        if (rank == 0)
            fprintf(stderr, "arbench-mpi: %s\n",
                    o.op == COMM_AVG ? "MPI has no average op: -o avg is arcomm's only"
                                     : "--coll all is arbench's: give one collective");
        MPI_Finalize();
        return BENCH_EXIT_USAGE;
    }
    o.nranks = size;
    o.device = COMM_DEVICE_HOST;

    static const MPI_Datatype types[] = {
        [COMM_F32] = MPI_FLOAT,    [COMM_F16] = MPI_UINT16_T, [COMM_BF16] = MPI_UINT16_T,
        [COMM_F64] = MPI_DOUBLE,   [COMM_I32] = MPI_INT32_T,  [COMM_I64] = MPI_INT64_T,
        [COMM_I8] = MPI_INT8_T,    [COMM_U8] = MPI_UINT8_T,   [COMM_U32] = MPI_UINT32_T,
        [COMM_U64] = MPI_UINT64_T,
    };
    struct mpi_ctx m = {.type = types[o.dtype], .rank = rank, .esize = bench_dtype_size(o.dtype)};
    bool half = o.dtype == COMM_F16 || o.dtype == COMM_BF16;
    if (half) {
        half_dtype = o.dtype;
        half_op = o.op;
        MPI_Op_create(half_op_fn, 1, &m.op);
    } else {
        m.op = o.op == COMM_SUM    ? MPI_SUM
               : o.op == COMM_PROD ? MPI_PROD
               : o.op == COMM_MAX  ? MPI_MAX
                                   : MPI_MIN;
    }

    struct bench_report *rep = calloc(1, sizeof(*rep));
    if (!rep) {
        fprintf(stderr, "arbench-mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&o, sizes, BENCH_MAX_SIZES);
    struct bench_coll coll = {.allreduce = coll_allreduce,
                              .broadcast = coll_broadcast,
                              .reduce = coll_reduce,
                              .allgather = coll_allgather,
                              .reduce_scatter = coll_reduce_scatter,
                              .alltoall = coll_alltoall,
                              .ctx = &m};
    struct bench_sync sync = {.reduce = sync_mpi, .same_bytes = NULL, .ctx = NULL};
    struct bench_rank r = {.rank = rank,
                           .nranks = size,
                           .opts = &o,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &bench_device_host,
                           .stepwise_round = half,
                           .rs_inplace_at_start = true};
    rep->opts = &o;
    rep->name = "mpi";
    bench_meta_fill(&rep->meta, argc, argv);
    rep->meta.mode = "procs";
    snprintf(rep->meta.transport, sizeof(rep->meta.transport), "mpi");
    if (!o.csv_stdout) {
        /* Alone, the table gets the ceiling of these processes; under arbench, arbench's. */
        size_t top = n ? sizes[n - 1] : 0;
        if (bench_ceiling(&r, top, &rep->ceiling_gbs))
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
        rep->ceiling_bytes = top < 64 ? 64 : top;
    }
    if (rank == 0 && !o.csv_stdout)
        bench_print_header(stdout, rep);

    for (size_t i = 0; i < n; i++) {
        struct bench_row *row = &rep->rows[i];
        row->coll = o.coll;
        if (rank == 0)
            bench_progress("arbench-mpi", i, n, sizes[i]);
        if (bench_run_size(&r, sizes[i], &row->a)) {
            /* The peers may be inside a collective: take the whole job down. */
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
        }
        rep->nrows++;
        if (row->a.wrong > 0)
            rc = BENCH_EXIT_FAIL;
        if (rank == 0 && !o.csv_stdout) {
            bench_progress_end();
            bench_print_row(stdout, rep, row);
        }
    }
    if (rank == 0) {
        bench_progress_end();
        if (o.csv_stdout)
            bench_csv_sweep(stdout, rep);
        if ((o.csv_path && bench_write_csv(o.csv_path, rep)) ||
            (o.json_path && bench_write_json(o.json_path, rep)) ||
            (o.plot_path && bench_plot(o.plot_path, rep)))
            rc = BENCH_EXIT_FAIL;
    }
    if (half)
        MPI_Op_free(&m.op);
    free(rep);
    MPI_Finalize();
    return rc;
}
