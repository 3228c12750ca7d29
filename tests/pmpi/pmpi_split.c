/* SPDX-License-Identifier: MIT */
/*
 * Erroneous programs whose ranks decide differently whether arcomm serves one call (a
 * count on each side of the 512-byte line of MPI_Reduce, a user op on one rank, a root
 * out of range on one rank, an allgather whose send side does not match its receive
 * side): the call must never be split between arcomm and MPI.  The library must resolve
 * it as Open MPI alone does, in bounded time: each scenario runs twice, through PMPI_*
 * on one communicator (Open MPI alone: the reference) and through MPI_* on another (the
 * library), and every rank's error classes and received bytes must be the same.  Then
 * every later call on the communicator still works (it is MPI's from the split on).
 * Run with the library's default sizes (ARCOMM_PMPI_MIN_BYTES unset).
 */
#include "pmpi_test.h"

#include <stdlib.h>

#define N     1000
#define CALLS 8

/* One run of a scenario: each call's error class and a hash of what it wrote. */
struct record {
    int n;
    int cls[CALLS];
    uint64_t hash[CALLS];
};

/* The calls of a scenario, through MPI_* (the library) or PMPI_* (the reference). */
static bool via_pmpi;

static int allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    return via_pmpi ? PMPI_Allreduce(s, r, n, t, op, c) : MPI_Allreduce(s, r, n, t, op, c);
}
static int reduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c)
{
    return via_pmpi ? PMPI_Reduce(s, r, n, t, op, root, c) : MPI_Reduce(s, r, n, t, op, root, c);
}
static int bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    return via_pmpi ? PMPI_Bcast(b, n, t, root, c) : MPI_Bcast(b, n, t, root, c);
}
static int allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                     MPI_Comm c)
{
    return via_pmpi ? PMPI_Allgather(s, sn, st, r, rn, rt, c)
                    : MPI_Allgather(s, sn, st, r, rn, rt, c);
}
static int barrier(MPI_Comm c)
{
    return via_pmpi ? PMPI_Barrier(c) : MPI_Barrier(c);
}

/* In the library's pass, which side the report must count a call on: every call of these
 * scenarios ends in MPI (handed, or joined once the split was found), and so does every
 * later call on a communicator where one was split. */
static void side(enum t_call call, bool served)
{
    if (!via_pmpi)
        served ? SERVED(call) : HANDED(call);
}

static void note(struct record *rec, int rc, const void *buf, size_t bytes)
{
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    rec->cls[rec->n] = cls;
    rec->hash[rec->n] = rc == MPI_SUCCESS && buf != NULL ? t_hash(buf, bytes) : 0;
    rec->n++;
}

static int in[4 * N], out[4 * N];

static void fill(int salt)
{
    uint64_t s = t_seed((uint64_t)salt, t_rank);
    for (int i = 0; i < 4 * N; i++)
        in[i] = (int)(t_next(&s) % 2001) - 1000;
    for (int i = 0; i < 4 * N; i++)
        out[i] = -7;
}

/* Correct calls after the split (if there was one): the communicator keeps working.  Other
 * collectives than the split ones: Open MPI alone may leave a message of an erroneous call
 * unmatched on the communicator (a truncated reduce's other child), which a later call of the same
 * kind would take, depending on timing. */
static void after(MPI_Comm c, struct record *rec, bool split)
{
    fill(90);
    int rc = allreduce(in, out, N, MPI_INT, MPI_SUM, c);
    note(rec, rc, out, N * sizeof(int));
    side(T_ALLREDUCE, !split);
    rc = barrier(c);
    note(rec, rc, NULL, 0);
    side(T_BARRIER, !split);
    fill(91);
    rc = allgather(in, N / 4, MPI_INT, out, N / 4, MPI_INT, c);
    note(rec, rc, out, (size_t)t_size * N / 4 * sizeof(int));
    side(T_ALLGATHER, !split);
}

static void user_max(void *a, void *b, int *len, MPI_Datatype *t)
{
    (void)t;
    for (int i = 0; i < *len; i++)
        ((int *)b)[i] = ((int *)a)[i] > ((int *)b)[i] ? ((int *)a)[i] : ((int *)b)[i];
}

/* The root's count under the 512-byte line (MPI_Reduce goes to MPI), the others' above
 * it (served): the program. */
static void reduce_root_small(MPI_Comm c, struct record *rec)
{
    fill(1);
    int n = t_rank == 0 ? 100 : 200;
    int rc = reduce(in, out, n, MPI_INT, MPI_SUM, 0, c);
    note(rec, rc, NULL, 0); /* the root's bytes: MPI_ERR_TRUNCATE */
    side(T_REDUCE, false);
    after(c, rec, true);
}

/* The others' count under the line: they leave MPI's reduce before the root came, and
 * their next reduce (above the line, like the root's first) must not be taken by arcomm
 * for the root's first. */
static void reduce_others_small(MPI_Comm c, struct record *rec)
{
    fill(2);
    int n = t_rank == 0 ? 200 : 100;
    int rc = reduce(in, out, n, MPI_INT, MPI_SUM, 0, c);
    note(rec, rc, t_rank == 0 ? out : NULL, 100 * sizeof(int));
    side(T_REDUCE, false);
    fill(3);
    rc = reduce(in, out, 200, MPI_INT, MPI_SUM, 0, c);
    note(rec, rc, t_rank == 0 ? out : NULL, 200 * sizeof(int));
    side(T_REDUCE, false);
    after(c, rec, true);
}

/* A user op on the last rank (MPI's), MPI_MAX on the others (served). */
static void allreduce_op(MPI_Comm c, struct record *rec)
{
    MPI_Op op;
    MPI_Op_create(user_max, 1, &op);
    fill(4);
    int rc = allreduce(in, out, N, MPI_INT, t_rank == t_size - 1 ? op : MPI_MAX, c);
    note(rec, rc, out, N * sizeof(int));
    side(T_ALLREDUCE, false);
    MPI_Op_free(&op);
    after(c, rec, true);
}

/* The last rank's allgather sends twice what it receives per block (Open MPI truncates;
 * on 3 ranks Open MPI alone hangs in it). */
static void allgather_sizes(MPI_Comm c, struct record *rec)
{
    fill(5);
    int sn = t_rank == t_size - 1 ? 2 * N / 4 : N / 4;
    int rc = allgather(in, sn, MPI_INT, out, N / 4, MPI_INT, c);
    note(rec, rc, rc == MPI_SUCCESS ? out : NULL, (size_t)t_size * N / 4 * sizeof(int));
    side(T_ALLGATHER, false);
    /* Its messages may be left unmatched: the others' allgather is not compared. */
    fill(92);
    rc = allreduce(in, out, N, MPI_INT, MPI_SUM, c);
    note(rec, rc, out, N * sizeof(int));
    side(T_ALLREDUCE, false);
    rc = barrier(c);
    note(rec, rc, NULL, 0);
    side(T_BARRIER, false);
}

/* The last rank names a root out of range (MPI_ERR_ROOT at once, before any message),
 * the others broadcast 4000 bytes from rank 0 (served: they wait, and join MPI's). */
static void bcast_root(MPI_Comm c, struct record *rec)
{
    fill(6);
    if (t_rank == 0)
        memcpy(out, in, N * sizeof(int));
    int rc = bcast(out, N, MPI_INT, t_rank == t_size - 1 ? t_size : 0, c);
    note(rec, rc, t_rank == t_size - 1 ? NULL : out, N * sizeof(int));
    side(T_BCAST, false);
    after(c, rec, true);
}

/* Counts on both sides of MPI_Bcast's 512-byte line: the root's under it (MPI's), the
 * others' above (served; Open MPI gives them the root's 400 bytes), or the other way
 * round (Open MPI truncates at the others).  On 3 ranks Open MPI alone hangs in both. */
static void bcast_sizes(MPI_Comm c, struct record *rec, int root_n, int other_n)
{
    fill(7);
    if (t_rank == 0)
        memcpy(out, in, (size_t)root_n * sizeof(int));
    int rc = bcast(out, t_rank == 0 ? root_n : other_n, MPI_INT, 0, c);
    note(rec, rc, out, 200 * sizeof(int));
    side(T_BCAST, false);
    after(c, rec, true);
}

static void bcast_root_small(MPI_Comm c, struct record *rec)
{
    bcast_sizes(c, rec, 100, 200);
}

static void bcast_others_small(MPI_Comm c, struct record *rec)
{
    bcast_sizes(c, rec, 200, 100);
}

/* Both sides under the line (the root 32 bytes, the others 100): MPI's on every rank, as
 * every small broadcast, so the others get the root's 32 bytes as with Open MPI alone
 * (arcomm's eager broadcast, which the library used to serve them with, failed them). */
static void bcast_small(MPI_Comm c, struct record *rec)
{
    fill(8);
    if (t_rank == 0)
        memcpy(out, in, 8 * sizeof(int));
    int rc = bcast(out, t_rank == 0 ? 8 : 25, MPI_INT, 0, c);
    note(rec, rc, out, 25 * sizeof(int));
    side(T_BCAST, false);
    after(c, rec, false); /* every rank handed it: no split */
}

static const struct {
    const char *name;
    void (*run)(MPI_Comm, struct record *);
    int min_size, max_size;
} scenarios[] = {
    {"reduce: the root's count under 512 bytes", reduce_root_small, 2, 64},
    {"reduce: the others' counts under 512 bytes", reduce_others_small, 2, 64},
    {"allreduce: a user op on one rank", allreduce_op, 2, 64},
    {"allgather: one rank sends more than a block", allgather_sizes, 2, 2},
    {"bcast: one rank's root out of range", bcast_root, 3, 64},
    {"bcast: the root's count under 512 bytes", bcast_root_small, 2, 2},
    {"bcast: the others' counts under 512 bytes", bcast_others_small, 2, 2},
    {"bcast: 32 bytes at the root, 100 at the others", bcast_small, 2, 64},
};

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    for (size_t k = 0; k < sizeof(scenarios) / sizeof(scenarios[0]); k++) {
        if (t_size < scenarios[k].min_size || t_size > scenarios[k].max_size)
            continue;
        struct record ref = {0}, lib = {0};
        MPI_Comm c;
        for (int pass = 0; pass < 2; pass++) {
            via_pmpi = pass == 0;
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
            MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
            scenarios[k].run(c, via_pmpi ? &ref : &lib);
            MPI_Comm_free(&c);
            /* Every rank done with the pass before the next (the split left messages of
             * Open MPI's own behind, on c only). */
            PMPI_Barrier(MPI_COMM_WORLD);
        }
        CHECK(ref.n == lib.n, "%s: %d calls, %d with the library", scenarios[k].name, ref.n, lib.n);
        for (int i = 0; i < ref.n && i < lib.n; i++) {
            CHECK(ref.cls[i] == lib.cls[i], "%s: call %d: error class %d, Open MPI alone %d",
                  scenarios[k].name, i, lib.cls[i], ref.cls[i]);
            CHECK(ref.hash[i] == lib.hash[i], "%s: call %d: other bytes than Open MPI alone",
                  scenarios[k].name, i);
        }
    }
    int rc = t_finish();
    MPI_Finalize();
    return rc;
}
