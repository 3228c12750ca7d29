/* SPDX-License-Identifier: MIT */
/*
 * What libarcomm_pmpi hands to MPI, and the communicators it serves besides
 * MPI_COMM_WORLD: MPI_MAXLOC, a user op, a type arcomm has no reduction for, an argument
 * error, an inter-communicator (handed); derived, gapped and mixed datatypes of data
 * movement, split and duplicated communicators, MPI_COMM_SELF, many communicators alive
 * at once, freed and made again, NULL buffers with count 0 (served).
 * Run with ARCOMM_PMPI_MIN_BYTES=0 (arcomm serves every size) or without it, when the
 * library's default hands small calls to MPI: the expectations follow.
 * Each result is checked, and run_pmpi.sh compares the counts printed at the end (which
 * side each call should have gone to) with the library's report.
 */
#include "pmpi_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MANY 24

/* ARCOMM_PMPI_MIN_BYTES unset: the library's defaults hand reduces and broadcasts under
 * 512 bytes to MPI and serve every other call at every size; ARCOMM_BCAST_EAGER (n bytes)
 * hands the broadcasts up to n to MPI as well (the library never lets arcomm's eager
 * broadcast serve one), and ARCOMM_REDUCE_EAGER the reduces likewise. */
static bool defaults;
static long bcast_mpi_below, reduce_mpi_below;
#define SMALL_BCAST(call, bytes) ((long)(bytes) < bcast_mpi_below ? HANDED(call) : SERVED(call))
#define SMALL_REDUCE(bytes)      ((long)(bytes) < reduce_mpi_below ? HANDED(T_REDUCE) : SERVED(T_REDUCE))

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* The sum of (r + 1) * k over the ranks r of a communicator of n ranks. */
static int ranks_sum(int n, int k)
{
    return k * n * (n + 1) / 2;
}

static void test_handed(void)
{
    /* Data movement takes every datatype (its signature's bytes, packed when they are not
     * one run): a strided vector type, every other int of 8. */
    MPI_Datatype vec, contig;
    MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int v[8];
    int rc;
    for (int i = 0; i < 8; i++)
        v[i] = t_rank == 0 ? 100 + i : -1;
    rc = MPI_Bcast(v, 1, vec, 0, MPI_COMM_WORLD);
    SMALL_BCAST(T_BCAST, 4 * sizeof(int));
    for (int i = 0; i < 8; i++)
        CHECK(rc == MPI_SUCCESS && v[i] == (i % 2 && t_rank ? -1 : 100 + i),
              "vector bcast: element %d is %d", i, v[i]);
    MPI_Type_free(&vec);

    /* A contiguous derived type moves the same bytes as ints: MPI_INT on one side, the
     * derived type on the other, one signature. */
    MPI_Type_contiguous(2, MPI_INT, &contig);
    MPI_Type_commit(&contig);
    int mine[2] = {t_rank, -t_rank}, *all = calloc(2 * (size_t)t_size, sizeof(int));
    rc = MPI_Allgather(mine, 2, MPI_INT, all, 1, contig, MPI_COMM_WORLD);
    SERVED(T_ALLGATHER);
    for (int r = 0; r < t_size; r++)
        CHECK(rc == MPI_SUCCESS && all[2 * r] == r && all[2 * r + 1] == -r,
              "mixed-type allgather: block %d", r);
    rc = MPI_Bcast(mine, 1, contig, 0, MPI_COMM_WORLD);
    SMALL_BCAST(T_BCAST, 2 * sizeof(int));
    CHECK(rc == MPI_SUCCESS && mine[0] == 0 && mine[1] == 0, "contiguous-type bcast");
    MPI_Type_free(&contig);
    free(all);

    /* MPI_MAXLOC on MPI_DOUBLE_INT (a pair type with a gap). */
    struct {
        double v;
        int i;
    } pair = {(double)((t_rank * 7) % t_size), t_rank}, best;
    rc = MPI_Allreduce(&pair, &best, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    HANDED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS && best.v == (double)(t_size - 1), "maxloc: %g", best.v);
    rc = MPI_Bcast(&pair, 1, MPI_DOUBLE_INT, 0, MPI_COMM_WORLD); /* packed: it has a gap */
    SMALL_BCAST(T_BCAST, sizeof(double) + sizeof(int));
    CHECK(rc == MPI_SUCCESS && pair.i == 0, "double_int bcast");

    /* A user op. */
    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    int x = t_rank + 1, sum = 0;
    rc = MPI_Allreduce(&x, &sum, 1, MPI_INT, op, MPI_COMM_WORLD);
    HANDED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS && sum == ranks_sum(t_size, 1), "user op: %d", sum);
    rc = MPI_Reduce(&x, &sum, 1, MPI_INT, op, 0, MPI_COMM_WORLD);
    HANDED(T_REDUCE);
    CHECK(rc == MPI_SUCCESS && (t_rank || sum == ranks_sum(t_size, 1)), "user op reduce");
    MPI_Op_free(&op);

    /* MPI_SHORT: arcomm has no 16-bit reduction (it moves them as bytes). */
    short s = (short)(t_rank + 1), ssum = 0;
    rc = MPI_Allreduce(&s, &ssum, 1, MPI_SHORT, MPI_SUM, MPI_COMM_WORLD);
    HANDED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS && ssum == ranks_sum(t_size, 1), "short sum: %d", ssum);
    int *blocks = calloc((size_t)t_size, sizeof(int));
    short *sblocks = calloc((size_t)t_size, sizeof(short));
    for (int r = 0; r < t_size; r++)
        sblocks[r] = (short)(t_rank + r);
    rc = MPI_Reduce_scatter_block(sblocks, &ssum, 1, MPI_SHORT, MPI_MAX, MPI_COMM_WORLD);
    HANDED(T_RSB);
    CHECK(rc == MPI_SUCCESS && ssum == t_size - 1 + t_rank, "short rsb: %d", ssum);
    free(sblocks);

    /* MPI_Alltoall with counts of different types on the two sides: one signature. */
    int *sendb = calloc((size_t)t_size * 2, sizeof(int)), *recvb = calloc((size_t)t_size * 2, 4);
    for (int p = 0; p < t_size; p++)
        sendb[2 * p] = sendb[2 * p + 1] = t_rank * 10 + p;
    MPI_Datatype two;
    MPI_Type_contiguous(2, MPI_INT, &two);
    MPI_Type_commit(&two);
    rc = MPI_Alltoall(sendb, 2, MPI_INT, recvb, 1, two, MPI_COMM_WORLD);
    SERVED(T_ALLTOALL);
    for (int p = 0; p < t_size; p++)
        CHECK(rc == MPI_SUCCESS && recvb[2 * p] == p * 10 + t_rank, "mixed alltoall %d", p);
    MPI_Type_free(&two);
    free(sendb);
    free(recvb);
    free(blocks);

    /* An argument error reaches the program as MPI's own (handed: MPI finds it). */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    rc = MPI_Bcast(&x, 1, MPI_INT, t_size, dup);
    HANDED(T_BCAST);
    CHECK(rc != MPI_SUCCESS, "bcast to root %d succeeded", t_size);
    rc = MPI_Allreduce(&x, &sum, -1, MPI_INT, MPI_SUM, dup);
    HANDED(T_ALLREDUCE);
    CHECK(rc != MPI_SUCCESS, "allreduce of count -1 succeeded");
    MPI_Comm_free(&dup);

    /* An inter-communicator between the even and the odd ranks. */
    if (t_size >= 2) {
        MPI_Comm half, inter;
        int color = t_rank % 2;
        MPI_Comm_split(MPI_COMM_WORLD, color, t_rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? 0 : 1, 77, &inter);
        rc = MPI_Barrier(inter);
        HANDED(T_BARRIER);
        CHECK(rc == MPI_SUCCESS, "inter barrier");
        x = t_rank + 1;
        rc = MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, inter);
        HANDED(T_ALLREDUCE);
        int want = 0; /* the other group's ranks */
        for (int r = 0; r < t_size; r++)
            if (r % 2 != color)
                want += r + 1;
        CHECK(rc == MPI_SUCCESS && sum == want, "inter allreduce: %d, expected %d", sum, want);
        MPI_Comm_free(&inter);
        MPI_Comm_free(&half);
    }
}

/* One served allreduce and bcast on comm, checked. */
static void use_comm(MPI_Comm comm, int k)
{
    int n, me;
    PMPI_Comm_size(comm, &n);
    PMPI_Comm_rank(comm, &me);
    int x = (me + 1) * k, sum = 0;
    int rc = MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm);
    SERVED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS && sum == ranks_sum(n, k), "comm %d allreduce: %d", k, sum);
    double d = me == n - 1 ? (double)k : -1.0;
    rc = MPI_Bcast(&d, 1, MPI_DOUBLE, n - 1, comm);
    SMALL_BCAST(T_BCAST, sizeof(d));
    CHECK(rc == MPI_SUCCESS && d == (double)k, "comm %d bcast: %g", k, d);
    /* Reduces of 512 bytes (served, unless ARCOMM_REDUCE_EAGER reaches them) and 1 KiB. */
    for (int len = 128; len <= 256; len *= 2) {
        int in[256], out[256];
        for (int i = 0; i < len; i++) {
            in[i] = (me + 1) * (i % 7);
            out[i] = -1;
        }
        rc = MPI_Reduce(in, me == n - 1 ? out : NULL, len, MPI_INT, MPI_SUM, n - 1, comm);
        SMALL_REDUCE(len * sizeof(int));
        for (int i = 0; i < len && me == n - 1; i++)
            CHECK(rc == MPI_SUCCESS && out[i] == ranks_sum(n, i % 7), "comm %d reduce of %d: %d", k,
                  len, i);
    }
    /* 16 KiB: served under the defaults too. */
    static int big[4096], bigsum[4096];
    for (int i = 0; i < 4096; i++)
        big[i] = (me + 1) * (i % 5);
    rc = MPI_Allreduce(big, bigsum, 4096, MPI_INT, MPI_SUM, comm);
    SERVED(T_ALLREDUCE);
    for (int i = 0; i < 4096; i++)
        CHECK(rc == MPI_SUCCESS && bigsum[i] == ranks_sum(n, i % 5), "comm %d 16 KiB: %d", k, i);
}

static int handler_calls, handler_code;

static void count_errors(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

/* A communicator made by MPI_Comm_idup; the process forked (a child that execs, one that
 * exits) between served calls; a user error handler on a served call that fails (ranks
 * whose counts differ, both served: MPI_ERR_OTHER on every rank, through the handler). */
static void test_more(void)
{
    MPI_Comm d;
    MPI_Request req;
    MPI_Comm_idup(MPI_COMM_WORLD, &d, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    use_comm(d, 40);
    pid_t child = fork();
    if (child == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(1);
    }
    int status = -1;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the exec'd child: status %d", status);
    child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, &status, 0);
    use_comm(d, 41);
    if (t_size > 1) {
        MPI_Errhandler h;
        MPI_Comm_create_errhandler(count_errors, &h);
        MPI_Comm_set_errhandler(d, h);
        static int in[4000], out[4000];
        for (int i = 0; i < 4000; i++)
            in[i] = i;
        int rc = MPI_Allreduce(in, out, t_rank == 0 ? 3000 : 4000, MPI_INT, MPI_SUM, d);
        /* Served, every rank fails (MPI_ERR_OTHER); in Open MPI alone (ARCOMM_PMPI=off, or
         * no arcomm communicator) rank 0 truncates.  Either way a failed call ran the
         * handler once with its code, a successful one never. */
        CHECK(rc == MPI_SUCCESS ? handler_calls == 0 : handler_calls == 1 && handler_code == rc,
              "counts that differ: %d, the handler called %d times with %d", rc, handler_calls,
              handler_code);
        int failed = rc != MPI_SUCCESS;
        PMPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        CHECK(failed, "counts that differ: no rank failed");
        MPI_Errhandler_free(&h);
    }
    MPI_Comm_free(&d);
}

static void test_served(void)
{
    /* Split: even and odd ranks, ordered backwards. */
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, -t_rank, &half);
    use_comm(half, 3);
    MPI_Comm_dup(half, &dup);
    use_comm(dup, 4);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    use_comm(MPI_COMM_SELF, 5);

    /* Many at once, freed, and made again (MPI reuses the handles). */
    for (int round = 0; round < 2; round++) {
        MPI_Comm many[MANY];
        for (int i = 0; i < MANY; i++)
            MPI_Comm_dup(MPI_COMM_WORLD, &many[i]);
        for (int i = 0; i < MANY; i++)
            use_comm(many[(i * 7) % MANY], 10 + i);
        CHECK(MPI_Barrier(many[MANY - 1]) == MPI_SUCCESS, "barrier");
        SERVED(T_BARRIER);
        for (int i = 0; i < MANY; i++)
            MPI_Comm_free(&many[i]);
    }

    /* count 0 with NULL buffers: nothing to move, served. */
    int rc = MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    SERVED(T_ALLREDUCE);
    CHECK(rc == MPI_SUCCESS, "count 0 allreduce");
    rc = MPI_Bcast(NULL, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
    SMALL_BCAST(T_BCAST, 0);
    CHECK(rc == MPI_SUCCESS, "count 0 bcast");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    defaults = getenv("ARCOMM_PMPI_MIN_BYTES") == NULL;
    bcast_mpi_below = defaults ? 512 : 0;
    const char *eager = getenv("ARCOMM_BCAST_EAGER");
    if (eager != NULL && atol(eager) >= bcast_mpi_below)
        bcast_mpi_below = atol(eager) + 1;
    reduce_mpi_below = defaults ? 512 : 0;
    eager = getenv("ARCOMM_REDUCE_EAGER");
    if (eager != NULL && atol(eager) >= reduce_mpi_below)
        reduce_mpi_below = atol(eager) + 1;
    test_served();
    test_more();
    test_handed();
    int rc = t_finish();
    MPI_Finalize();
    return rc;
}
