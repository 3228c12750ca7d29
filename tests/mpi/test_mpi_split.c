/* SPDX-License-Identifier: MIT */
/*
 * comm_split and comm_dup of a communicator made by comm_init_mpi, started by mpirun
 * (hosts emulated with ARCOMM_MPI_RANKS_PER_HOST, or two_hosts.sh): groups that span
 * hosts (even and odd ranks, ordered backwards by key), groups of one host each, a dup,
 * a rank passing COMM_SPLIT_NONE, each new communicator checked (its rank and size, an
 * allreduce against the float64 reference, bit-identical on its ranks) and the parent
 * still working after it; then the failures: a rank making another call (MISMATCH on
 * every rank), newcomm NULL on one rank (INVALID there, PEER elsewhere), a group whose
 * comm_init_mpi fails on one rank (that status on every rank, the parent usable), and
 * nothing left in /dev/shm.
 */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_MS 3000
#define N          1031

static int g_rank, g_size, g_failed;

static void fail(const char *test, const char *what, comm_status_t st, const char *detail)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d: %s: %s (got %s: %s)\n", g_rank, test, what,
                comm_status_string(st), detail);
}

static comm_t *fresh(void)
{
    return mc_world_comm(TIMEOUT_MS);
}

/* An allreduce on c checked against the reference of its n ranks, and the result's bits
 * compared over c (an allgather of every rank's hash). */
static void check_allreduce(comm_t *c, uint64_t seed, const char *test)
{
    int rank = comm_rank(c), n = comm_size(c);
    double *send = malloc(N * sizeof(double)), *recv = malloc(N * sizeof(double));
    uint64_t *hashes = malloc((size_t)n * sizeof(uint64_t));
    mc_fill(send, N, seed, rank, COMM_F64, COMM_SUM, 0);
    memset(recv, 0xa5, N * sizeof(double));
    comm_status_t st = comm_allreduce(c, send, recv, N, COMM_F64, COMM_SUM, NULL);
    char why[256];
    if (st != COMM_OK)
        fail(test, "allreduce failed", st, comm_last_error(c));
    else if (mc_first_wrong(recv, N, 0, seed, n, COMM_F64, COMM_SUM, why, sizeof(why)))
        fail(test, why, st, "");
    uint64_t h = mc_hash(recv, N * sizeof(double));
    st = comm_allgather(c, &h, hashes, 1, COMM_U64, NULL);
    if (st != COMM_OK)
        fail(test, "allgather of the hashes failed", st, comm_last_error(c));
    for (int p = 0; st == COMM_OK && p < n; p++)
        if (hashes[p] != h)
            fail(test, "the ranks' results differ bitwise", st, "");
    free(send);
    free(recv);
    free(hashes);
}

/* comm_split(color, key) of parent, checked against the group MPI_Comm_split makes of
 * the same arguments (its rank and size); the new communicator, or NULL. */
static comm_t *split_checked(comm_t *parent, int color, int key, const char *test)
{
    comm_t *child = NULL;
    comm_status_t st = comm_split(parent, color, key, &child);
    if (st != COMM_OK) {
        fail(test, "comm_split failed", st, comm_last_error(parent));
        return NULL;
    }
    MPI_Comm ref;
    MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &ref);
    if (ref == MPI_COMM_NULL) {
        if (child != NULL)
            fail(test, "COMM_SPLIT_NONE gave a communicator", st, "");
        return NULL;
    }
    int want_rank, want_size;
    MPI_Comm_rank(ref, &want_rank);
    MPI_Comm_size(ref, &want_size);
    MPI_Comm_free(&ref);
    if (child == NULL) {
        fail(test, "no communicator for a color >= 0", st, "");
        return NULL;
    }
    int rank = comm_rank(child), size = comm_size(child);
    if (rank != want_rank || size != want_size) {
        char d[96];
        snprintf(d, sizeof(d), "rank %d of %d, MPI_Comm_split says %d of %d", rank, size, want_rank,
                 want_size);
        fail(test, "wrong place in the new communicator", st, d);
    }
    return child;
}

static void t_splits(void)
{
    comm_t *c = fresh();
    /* Even and odd ranks, backwards: with several hosts each group spans them. */
    comm_t *parity = split_checked(c, g_rank % 2, -g_rank, "split by parity");
    if (parity != NULL)
        check_allreduce(parity, 11, "split by parity");
    /* Pairs of neighbours: with two ranks a host, a group on one host each. */
    comm_t *pairs = split_checked(c, g_rank / 2, 0, "split by pairs");
    if (pairs != NULL)
        check_allreduce(pairs, 12, "split by pairs");
    /* A dup of the parity group (a split of a split's child), and rank 0 left out. */
    comm_t *dup = NULL;
    if (parity != NULL) {
        comm_status_t st = comm_dup(parity, &dup);
        if (st != COMM_OK)
            fail("dup", "comm_dup failed", st, comm_last_error(parity));
        else
            check_allreduce(dup, 13, "dup");
    }
    comm_t *rest = split_checked(c, g_rank == 0 ? COMM_SPLIT_NONE : 7, g_rank, "split, rank 0 out");
    if (rest != NULL)
        check_allreduce(rest, 14, "split, rank 0 out");
    /* The parent after its splits, and the children outliving it. */
    check_allreduce(c, 15, "parent after the splits");
    comm_destroy(c);
    if (parity != NULL)
        check_allreduce(parity, 16, "child after its parent's destroy");
    comm_t *made[] = {rest, dup, pairs, parity};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++)
        if (made[i] != NULL)
            comm_destroy(made[i]);
}

/* The last rank makes an allreduce while the others split: MISMATCH on every rank. */
static void t_mismatch(void)
{
    comm_t *c = fresh();
    comm_t *child = NULL;
    comm_status_t st;
    if (g_rank == g_size - 1) {
        float x[4] = {1, 2, 3, 4}, y[4];
        st = comm_allreduce(c, x, y, 4, COMM_F32, COMM_SUM, NULL);
    } else {
        st = comm_split(c, 0, 0, &child);
    }
    if (st != COMM_ERR_MISMATCH)
        fail("split against allreduce", "expected COMM_ERR_MISMATCH", st, comm_last_error(c));
    if (child != NULL)
        fail("split against allreduce", "a failed split wrote *newcomm", st, "");
    comm_destroy(c);
}

/* Rank 1 passes newcomm NULL: INVALID there, PEER everywhere else, all in time. */
static void t_null_newcomm(void)
{
    comm_t *c = fresh();
    comm_t *child = NULL;
    double t0 = MPI_Wtime();
    comm_status_t st = comm_split(c, 0, 0, g_rank == 1 ? NULL : &child);
    double ms = (MPI_Wtime() - t0) * 1e3;
    comm_status_t want = g_rank == 1 ? COMM_ERR_INVALID : COMM_ERR_PEER;
    if (st != want)
        fail("newcomm NULL", g_rank == 1 ? "expected INVALID" : "expected PEER", st,
             comm_last_error(c));
    if (ms > TIMEOUT_MS)
        fail("newcomm NULL", "returned after the timeout", st, comm_last_error(c));
    if (child != NULL)
        comm_destroy(child);
    comm_destroy(c);
}

/* Rank 1's new communicator cannot open its log: every rank returns that status, and
 * the parent stays usable. */
static void t_child_fails(void)
{
    comm_t *c = fresh();
    if (g_rank == 1)
        setenv("ARCOMM_LOG_FILE", "/nonexistent-arcomm-dir/split.log", 1);
    comm_t *child = NULL;
    comm_status_t st = comm_split(c, g_rank % 2, 0, &child);
    if (g_rank == 1)
        unsetenv("ARCOMM_LOG_FILE");
    if (st != COMM_ERR_INVALID || strstr(comm_last_error(c), "rank 1") == NULL)
        fail("a group that cannot be made", "expected INVALID naming rank 1", st,
             comm_last_error(c));
    if (child != NULL)
        fail("a group that cannot be made", "a failed split wrote *newcomm", st, "");
    check_allreduce(c, 17, "parent after the failed split");
    comm_destroy(c);
}

/* The timeout of t_join_late's communicators (short: it waits for it twice). */
#define LATE_TIMEOUT_MS 1000

/* MPI_Comm_split as the library sees it: this program's, which can hold rank 1 once,
 * after the split, on a communicator other than MPI_COMM_WORLD. */
static int g_slow_split;

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    int err = PMPI_Comm_split(comm, color, key, newcomm);
    if (g_slow_split && comm != MPI_COMM_WORLD) {
        g_slow_split = 0;
        usleep((useconds_t)(2 * LATE_TIMEOUT_MS) * 1000);
    }
    return err;
}

/* Rank 1 comes two timeouts late to its new communicator's setup (comm_init_mpi over
 * the MPI split): the others gave up on its first agreement, over the split's MPI
 * communicator, and the split fails everywhere.  That communicator must outlive the
 * request left on it: the join freed it, and Open MPI progressed the request of the
 * freed communicator when rank 1's part came (SIGSEGV in this MPI_Barrier).  Only where
 * the split goes through MPI (ranks on several hosts). */
static void t_join_late(void)
{
    comm_t *c = mc_world_comm(LATE_TIMEOUT_MS);
    if (strstr(comm_transport_name(c), "+mpi") == NULL) {
        comm_destroy(c);
        return;
    }
    g_slow_split = g_rank == 1;
    comm_t *child = NULL;
    comm_status_t st = comm_split(c, 0, g_rank, &child);
    g_slow_split = 0;
    if (st == COMM_OK || child != NULL)
        fail("a rank late to its new communicator", "the split succeeded", st, "");
    if (child != NULL)
        comm_destroy(child);
    comm_destroy(c);
    /* The others wait here while rank 1's parts of their requests come. */
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mc_shm_begin();

    t_splits();
    MPI_Barrier(MPI_COMM_WORLD);
    t_mismatch();
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_size >= 2) {
        t_null_newcomm();
        MPI_Barrier(MPI_COMM_WORLD);
        t_child_fails();
        MPI_Barrier(MPI_COMM_WORLD);
        t_join_late();
        MPI_Barrier(MPI_COMM_WORLD);
    }
    return mc_finish(g_failed);
}
