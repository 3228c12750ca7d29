/* SPDX-License-Identifier: MIT */
/*
 * arbench --mpi: every rank a process started by mpirun, the communicator made by
 * comm_init_mpi (several hosts; ARCOMM_MPI_RANKS_PER_HOST makes hosts of one), the
 * sweep timed exactly as the other modes.  With --compare mpi the same processes then
 * time the Open MPI collectives on MPI_COMM_WORLD at each size, side by side.  With
 * --device cuda (CUDA builds) the buffers are device memory of the GPU of the rank's
 * index on its host (modulo the GPUs it sees), the calls on a stream of the rank's own.
 *
 *   mpirun -np 4 arbench --mpi --compare mpi -b 4 -e 16M
 *   mpirun -np 2 arbench --mpi --device cuda --check -b 8 -e 64M
 */
#include "arcomm_side.h"
#include "bench_multihost.h"
#include "bench_report.h"
#include "mpi_peer.h"

#include <arcomm_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(int rank, const char *why)
{
    if (rank == 0)
        fprintf(stderr, "arbench --mpi: %s\n", why);
    MPI_Finalize();
    return BENCH_EXIT_USAGE;
}

int bench_mpi_main(const struct bench_opts *o, int argc, char **argv, bench_coll_of coll_of)
{
    int rank, size, rc = BENCH_EXIT_OK;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (o->coll == BENCH_COLL_ALL || o->rounds > 1)
        return refuse(rank, "give one --coll and one round (run it again for another)");
    if (o->peer == BENCH_PEER_NCCL || (o->peer == BENCH_PEER_MPI && o->device != COMM_DEVICE_HOST))
        return refuse(rank, "compared with MPI at most, and on host buffers (MPI here is not "
                            "CUDA-aware): leave out --compare with --device cuda");
    if (o->device != COMM_DEVICE_HOST && o->device != COMM_DEVICE_CUDA)
        return refuse(rank, "host or CUDA buffers");
    if (o->mem_alloc)
        return refuse(rank, "--mem-alloc: not over comm_init_mpi (its buffers are one host's)");
    if (o->peer == BENCH_PEER_MPI && o->op == COMM_AVG)
        return refuse(rank, "--compare mpi -o avg: MPI has no average op");

    /* The GPU of this rank's index on its host, as comm_init_mpi picks it. */
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    struct bench_device dev;
    int code = bench_device_open(o->device, bench_device_ordinal(o->device, local), &dev);
    if (code) {
        MPI_Finalize();
        return code;
    }
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.device = o->device;
    cfg.transport = o->transport;
    comm_t *comm = NULL;
    comm_status_t st = comm_init_mpi(&comm, MPI_COMM_WORLD, &cfg);
    if (st != COMM_OK) {
        fprintf(stderr, "arbench: rank %d: comm_init_mpi: %s: %s\n", rank, comm_status_string(st),
                comm_last_error(NULL));
        bench_device_close(&dev);
        MPI_Finalize();
        return BENCH_EXIT_FAIL;
    }
    struct bench_opts opts = *o;
    opts.nranks = size;
    struct bench_report *rep = calloc(1, sizeof(*rep));
    if (rep == NULL) {
        comm_destroy(comm);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    size_t sizes[BENCH_MAX_SIZES], n = bench_sizes(&opts, sizes, BENCH_MAX_SIZES);
    struct bench_coll coll = coll_of(comm, bench_device_stream(&dev));
    struct mpi_peer m;
    mpi_peer_init(&m, opts.dtype, opts.op == COMM_AVG ? COMM_SUM : opts.op, rank);
    struct bench_coll peer = mpi_peer_coll(&m);
    struct bench_sync sync = mpi_peer_sync();
    struct bench_rank r = {.rank = rank,
                           .nranks = size,
                           .opts = &opts,
                           .coll = &coll,
                           .sync = &sync,
                           .dev = &dev,
                           .wire = bench_wire_of(opts.device, false),
                           .fixed_order = bench_fixed_order(opts.device, false)};
    struct bench_rank pr = {.rank = rank,
                            .nranks = size,
                            .opts = &opts,
                            .coll = &peer,
                            .sync = &sync,
                            .dev = &bench_device_host,
                            .stepwise_round = m.half,
                            .rs_inplace_at_start = true};
    rep->opts = &opts;
    rep->peer_name = opts.peer == BENCH_PEER_MPI ? "mpi" : NULL;
    bench_meta_fill(&rep->meta, argc, argv);
    rep->meta.mode = "mpi";
    snprintf(rep->meta.transport, sizeof(rep->meta.transport), "%s", comm_transport_name(comm));
    size_t top = n ? sizes[n - 1] : 0;
    if (opts.device == COMM_DEVICE_HOST) { /* the memcpy ceiling is the host's */
        rep->ceiling_bytes = top < 64 ? 64 : top;
        if (bench_ceiling(&r, top, &rep->ceiling_gbs))
            n = 0, rc = BENCH_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        struct bench_row *row = &rep->rows[i];
        row->coll = opts.coll;
        if (rank == 0)
            bench_progress("arbench", i, n, sizes[i]);
        if (bench_run_size(&r, sizes[i], &row->a) ||
            (rep->peer_name && bench_run_size(&pr, sizes[i], &row->p))) {
            /* The peers may be inside a collective: take the whole job down. */
            MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
        }
        rep->nrows++;
        if (row->a.wrong > 0 || (rep->peer_name && row->p.wrong > 0))
            rc = BENCH_EXIT_FAIL;
    }
    if (rank == 0) {
        bench_progress_end();
        bench_print_table(stdout, rep);
        if ((opts.csv_path && bench_write_csv(opts.csv_path, rep)) ||
            (opts.json_path && bench_write_json(opts.json_path, rep)) ||
            (opts.plot_path && bench_plot(opts.plot_path, rep)))
            rc = BENCH_EXIT_FAIL;
    }
    mpi_peer_fini(&m);
    free(rep);
    comm_destroy(comm);
    bench_device_close(&dev);
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
