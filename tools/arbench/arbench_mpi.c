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
#include "mpi_peer.h"

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
    "               [-o OP] [--inplace] [--check] [--fresh] [--iters N] [--warmup N]\n"
    "               [--csv FILE] [--json FILE] [--plot FILE.png] [--csv-stdout]\n"
    "arbench's sweep of one collective through Open MPI (see arbench -h): --coll\n"
    "allreduce (default) broadcast reduce allgather reduce_scatter alltoall.\n"
    "  --csv-stdout   only the CSV of the sweep on stdout (what arbench reads)\n";

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

    struct mpi_peer m;
    mpi_peer_init(&m, o.dtype, o.op, rank);
    bool half = o.dtype == COMM_F16 || o.dtype == COMM_BF16;

    struct bench_report *rep = calloc(1, sizeof(*rep));
    if (!rep) {
        fprintf(stderr, "arbench-mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&o, sizes, BENCH_MAX_SIZES);
    struct bench_coll coll = mpi_peer_coll(&m);
    struct bench_sync sync = mpi_peer_sync();
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
    mpi_peer_fini(&m);
    free(rep);
    MPI_Finalize();
    return rc;
}
