/* SPDX-License-Identifier: MIT */
/*
 * arbench-mpi: arbench's sweep through MPI_Allreduce, the peer of `arbench --compare
 * mpi`.  The measurement is bench_common's, unchanged: the same sizes, data, per-call
 * timing on every rank (the per-call times are combined with MPI_MAX after the loop),
 * statistics and check.  Started by arbench as
 *
 *   mpirun --allow-run-as-root --oversubscribe -np N arbench-mpi <sweep> --csv-stdout
 *
 * and usable alone (without --csv-stdout it prints arbench's table).  f16 and bf16,
 * which MPI has no type for, travel as MPI_UINT16_T with a user op that sums in f32
 * and rounds once per pairwise step, as an MPI user would write it.
 */
#include "bench_common.h"
#include "bench_report.h"

#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef ARBENCH_VERSION
#define ARBENCH_VERSION "unknown"
#endif

static const char usage[] =
    "usage: mpirun -np N arbench-mpi [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o OP]\n"
    "               [--inplace] [--check] [--iters N] [--warmup N] [--csv FILE]\n"
    "               [--json FILE] [--plot FILE.png] [--csv-stdout]\n"
    "arbench's allreduce sweep through MPI_Allreduce (see arbench -h).\n"
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
};

static int coll_mpi(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                    comm_op_t op)
{
    struct mpi_ctx *m = ctx;
    (void)dtype;
    (void)op;
    /* In place is MPI_IN_PLACE, as an MPI application would call it. */
    int err = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, m->type, m->op,
                            MPI_COMM_WORLD);
    if (err != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, msg, &len);
        fprintf(stderr, "arbench-mpi: MPI_Allreduce(count %zu) failed: %s\n", count, msg);
        return -1;
    }
    return 0;
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
    o.nranks = size;
    o.device = COMM_DEVICE_HOST;

    static const MPI_Datatype types[] = {
        [COMM_F32] = MPI_FLOAT,  [COMM_F16] = MPI_UINT16_T, [COMM_BF16] = MPI_UINT16_T,
        [COMM_F64] = MPI_DOUBLE, [COMM_I32] = MPI_INT32_T,  [COMM_I64] = MPI_INT64_T,
    };
    struct mpi_ctx m = {.type = types[o.dtype]};
    if (o.dtype == COMM_F16 || o.dtype == COMM_BF16) {
        half_dtype = o.dtype;
        half_op = o.op;
        MPI_Op_create(half_op_fn, 1, &m.op);
    } else {
        m.op = o.op == COMM_SUM ? MPI_SUM : o.op == COMM_MAX ? MPI_MAX : MPI_MIN;
    }

    struct bench_report *rep = calloc(1, sizeof(*rep));
    if (!rep) {
        fprintf(stderr, "arbench-mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&o, sizes, BENCH_MAX_SIZES);
    struct bench_coll coll = {.allreduce = coll_mpi, .ctx = &m};
    struct bench_sync sync = {.reduce = sync_mpi, .same_bytes = NULL, .ctx = NULL};
    struct bench_rank r = {.rank = rank,
                           .nranks = size,
                           .opts = &o,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &bench_device_host,
                           .stepwise_round = o.dtype == COMM_F16 || o.dtype == COMM_BF16};
    rep->opts = &o;
    rep->name = "mpi";
    bench_meta_fill(&rep->meta, argc, argv);
    rep->meta.mode = "procs";
    snprintf(rep->meta.transport, sizeof(rep->meta.transport), "mpi");
    if (rank == 0 && !o.csv_stdout)
        bench_print_header(stdout, rep);

    for (size_t i = 0; i < n; i++) {
        struct bench_row *row = &rep->rows[i];
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
        struct bench_result res[BENCH_MAX_SIZES];
        for (size_t i = 0; i < rep->nrows; i++)
            res[i] = rep->rows[i].a;
        if (o.csv_stdout)
            bench_csv_sweep(stdout, &rep->meta, &o, size, res, rep->nrows);
        if ((o.csv_path && bench_write_csv(o.csv_path, rep)) ||
            (o.json_path && bench_write_json(o.json_path, rep)) ||
            (o.plot_path && bench_plot(o.plot_path, rep)))
            rc = BENCH_EXIT_FAIL;
    }
    if (o.dtype == COMM_F16 || o.dtype == COMM_BF16)
        MPI_Op_free(&m.op);
    free(rep);
    MPI_Finalize();
    return rc;
}
