/* SPDX-License-Identifier: MIT */
/*
 * The reproducibility contract over several hosts (docs/api.md, "Reproducible
 * results"): a communicator from comm_init_mpi, started by mpirun, under
 * ARCOMM_MPI_RANKS_PER_HOST or on emulated hosts (tests/mpi/two_hosts.sh).  The same
 * seeded inputs as the host suite, every element of allreduce, allreduce_add, reduce at
 * every root and reduce_scatter compared bit for bit with contract_ref.c's reference:
 * rank order within each host, then the binomial tree over the hosts; at counts that
 * take the leaders scheme and the slices scheme.  Exits non-zero on any failure.
 */
#include "contract_ref.h"

#include <arcomm_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size, g_failed;
static comm_t *g_comm;

static void failed(const char *what, comm_dtype_t dt, comm_op_t op, size_t count, const char *why)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d of %d: %s %s %s count %zu: %s\n", g_rank, g_size, what,
                cref_dtype_name(dt), cref_op_name(op), count, why);
}

static bool ok(comm_status_t st, const char *what, comm_dtype_t dt, comm_op_t op, size_t count)
{
    if (st != COMM_OK)
        failed(what, dt, op, count, comm_last_error(g_comm));
    return st == COMM_OK;
}

static void compare(const char *what, comm_dtype_t dt, comm_op_t op, size_t count, const void *got,
                    const void *want, size_t n)
{
    char why[160];
    if (cref_first_diff(got, want, n, dt, why, sizeof(why)) < n)
        failed(what, dt, op, count, why);
}

static void *must(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/*
 * The layout: ARCOMM_MPI_RANKS_PER_HOST, else MPI's shared-memory split, which must put
 * consecutive ranks on a host (as mpirun's default mapping does) in equal hosts but
 * the last.
 */
static bool layout(struct cref_layout *lay)
{
    lay->nranks = g_size;
    const char *rph = getenv("ARCOMM_MPI_RANKS_PER_HOST");
    if (rph != NULL && atoi(rph) > 0) {
        lay->per_host = atoi(rph) < g_size ? atoi(rph) : g_size;
        return true;
    }
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    int local, first = g_rank, per;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &per);
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
    int bad = first != g_rank - local || first % per != 0 ? 1 : 0;
    int per0 = per;
    MPI_Bcast(&per0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    bad |= first + per < g_size && per != per0;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    lay->per_host = per0;
    return bad == 0;
}

struct ccase {
    comm_dtype_t dtype;
    comm_op_t op;
};

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    struct cref_layout lay;
    if (!layout(&lay)) {
        if (g_rank == 0)
            fprintf(stderr, "the hosts are not blocks of consecutive ranks: skipped\n");
        MPI_Finalize();
        return 77;
    }
    comm_status_t st = comm_init_mpi(&g_comm, MPI_COMM_WORLD, NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi: %s: %s\n", g_rank, comm_status_string(st),
                comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    static const struct ccase cases[] = {
        {COMM_F32, COMM_SUM},  {COMM_F32, COMM_AVG},  {COMM_F32, COMM_PROD}, {COMM_F32, COMM_MAX},
        {COMM_F16, COMM_SUM},  {COMM_BF16, COMM_SUM}, {COMM_BF16, COMM_AVG}, {COMM_F64, COMM_SUM},
        {COMM_F64, COMM_PROD}, {COMM_I32, COMM_SUM},  {COMM_I32, COMM_PROD}, {COMM_U8, COMM_SUM},
    };
    /* The leaders scheme below 64 KiB of f32 work, the slices scheme above; several
     * 256 KiB segments at the largest. */
    const char *quick = getenv("ARCOMM_TEST_QUICK");
    bool big = quick == NULL || quick[0] == '\0' || strcmp(quick, "0") == 0;
    const size_t counts[] = {1, 97, 4099, 65537, big ? 1048583 : 300007};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        comm_dtype_t dt = cases[c].dtype;
        comm_op_t op = cases[c].op;
        size_t es = comm_dtype_size(dt);
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            size_t count = counts[k];
            if (count > 65537 && c > 1 && dt != COMM_BF16)
                continue; /* the largest: f32 sum and avg, bf16 */
            uint64_t seed = 0x5eed + c * 131 + k * 7;
            void *send = must(count * es), *recv = must(count * es), *ref = must(count * es);
            cref_fill(send, count, dt, op, seed, g_rank);
            cref_reduce(&lay, dt, op, seed, count, 0, count, false, NULL, 0, ref);
            char why[200];
            if (g_rank == 0 && count <= 65537 &&
                cref_check_f64(&lay, dt, op, seed, count, 0, count, false, ref, why, sizeof(why)) !=
                    0)
                failed("the reference against float64", dt, op, count, why);

            memset(recv, 0xff, count * es);
            if (ok(comm_allreduce(g_comm, send, recv, count, dt, op, NULL), "allreduce", dt, op,
                   count))
                compare("allreduce", dt, op, count, recv, ref, count);

            for (int root = 0; root < g_size; root++) {
                if (count > 4099 && root != (int)(k % (size_t)g_size))
                    continue;
                memset(recv, 0xff, count * es);
                if (ok(comm_reduce(g_comm, send, g_rank == root ? recv : NULL, count, dt, op, root,
                                   NULL),
                       "reduce", dt, op, count) &&
                    g_rank == root)
                    compare("reduce", dt, op, count, recv, ref, count);
            }

            size_t rc = count / (size_t)g_size;
            if (rc > 0) {
                memset(recv, 0xff, rc * es);
                if (ok(comm_reduce_scatter(g_comm, send, recv, rc, dt, op, NULL), "reduce_scatter",
                       dt, op, count))
                    compare("reduce_scatter", dt, op, count, recv,
                            (const char *)ref + (size_t)g_rank * rc * es, rc);
            }

            if (op == COMM_SUM && dt != COMM_U8 && count <= 65537) {
                void *add = must(count * es);
                cref_fill(add, count, dt, COMM_SUM, seed + 99, 100 + g_rank);
                cref_reduce(&lay, dt, op, seed, count, 0, count, false, add, count, ref);
                memset(recv, 0xff, count * es);
                if (ok(comm_allreduce_add(g_comm, send, recv, add, count, count, dt, NULL),
                       "allreduce_add", dt, op, count))
                    compare("allreduce_add", dt, op, count, recv, ref, count);
                free(add);
            }
            free(send);
            free(recv);
            free(ref);
        }
    }
    comm_destroy(g_comm);
    int any = g_failed;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %d ranks, %d a host: %s\n", argv[0], g_size, lay.per_host,
               any ? "FAILED" : "every element as the contract says");
    MPI_Finalize();
    return any ? 1 : 0;
}
