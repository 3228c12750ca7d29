/* SPDX-License-Identifier: MIT */
/*
 * Every call libarcomm_pmpi serves, with every datatype and op it maps: random inputs,
 * a float64 reference over all ranks' inputs (each rank generates them all; integer sums
 * and products overflow and the reference wraps them modulo 2^bits, as arcomm does), every
 * element checked (outputs are poisoned before the call), reductions bit-identical on
 * every rank, each call out of place and in MPI's MPI_IN_PLACE form, counts from 0 to
 * past the staged paths' thresholds.  Run under mpirun with LD_PRELOAD by run_pmpi.sh,
 * which checks the counts printed at the end against the library's report.
 */
#include "pmpi_test.h"

#include <math.h>
#include <stdlib.h>

#define POISON 0xA5

static const struct t_type reduce_types[] = {
    {MPI_FLOAT, "MPI_FLOAT", T_F, 4},
    {MPI_DOUBLE, "MPI_DOUBLE", T_F, 8},
    {MPI_INT, "MPI_INT", T_I, sizeof(int)},
    {MPI_LONG, "MPI_LONG", T_I, sizeof(long)},
    {MPI_LONG_LONG, "MPI_LONG_LONG", T_I, 8},
    {MPI_INT32_T, "MPI_INT32_T", T_I, 4},
    {MPI_INT64_T, "MPI_INT64_T", T_I, 8},
    {MPI_UNSIGNED, "MPI_UNSIGNED", T_U, 4},
    {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", T_U, sizeof(unsigned long)},
    {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", T_U, 8},
    {MPI_UINT32_T, "MPI_UINT32_T", T_U, 4},
    {MPI_UINT64_T, "MPI_UINT64_T", T_U, 8},
    {MPI_INT8_T, "MPI_INT8_T", T_I, 1},
    {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", T_I, 1},
    {MPI_UINT8_T, "MPI_UINT8_T", T_U, 1},
    {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", T_U, 1},
    {MPI_AINT, "MPI_AINT", T_I, sizeof(MPI_Aint)},
    {MPI_OFFSET, "MPI_OFFSET", T_I, sizeof(MPI_Offset)},
    {MPI_COUNT, "MPI_COUNT", T_I, sizeof(MPI_Count)},
};
#define N_REDUCE_TYPES (sizeof(reduce_types) / sizeof(reduce_types[0]))

static const struct {
    MPI_Op op;
    const char *name;
} ops[] = {{MPI_SUM, "SUM"}, {MPI_PROD, "PROD"}, {MPI_MAX, "MAX"}, {MPI_MIN, "MIN"}};

/* Data movement: the reduction types and the bytes of other predefined types. */
static const struct {
    MPI_Datatype type;
    const char *name;
    size_t size;
} move_types[] = {
    {MPI_FLOAT, "MPI_FLOAT", 4},   {MPI_DOUBLE, "MPI_DOUBLE", 8},
    {MPI_INT, "MPI_INT", 4},       {MPI_UINT64_T, "MPI_UINT64_T", 8},
    {MPI_INT8_T, "MPI_INT8_T", 1}, {MPI_CHAR, "MPI_CHAR", 1},
    {MPI_BYTE, "MPI_BYTE", 1},     {MPI_SHORT, "MPI_SHORT", 2},
    {MPI_C_BOOL, "MPI_C_BOOL", 1}, {MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", 16},
    {MPI_2INT, "MPI_2INT", 8},
};
#define N_MOVE_TYPES (sizeof(move_types) / sizeof(move_types[0]))

static const int counts[] = {0, 1, 13, 4099, 100003};
#define N_COUNTS (sizeof(counts) / sizeof(counts[0]))

/*
 * A value of rank's input for op.  Integers of 1 and 4 bytes: SUM over their full range
 * (and PROD too for 1 byte), so that sums and products overflow and wrap, as api.md's
 * integer semantics say; the reference wraps the exact float64 result the same way
 * (wrap_int).  8-byte integers stay in a range whose sums and products float64 holds
 * exactly (no overflow); PROD of 4-byte ones stays near 1 (exact in float64).
 */
static double gen_value(const struct t_type *t, int op, uint64_t *s)
{
    double u = t_uniform(s);
    if (t->kind == T_F)
        return op == 1 ? 0.5 + u : 2.0 * u - 1.0;
    bool full = t->size == 1 || (t->size == 4 && op == 0);
    if (full) {
        double m = t->size == 1 ? 256.0 : 4294967296.0;
        double v = floor(u * m);
        return t->kind == T_I ? v - m / 2 : v;
    }
    if (op == 1) /* PROD */
        return t->kind == T_I ? floor(u * 7.0) - 3.0 : floor(u * 5.0);
    double lim = op == 0 ? 1000000.0 : 1e9;
    return t->kind == T_I ? floor(u * (2 * lim + 1)) - lim : floor(u * (lim + 1));
}

/* An exact integer result v in t's range, modulo 2^bits (1- and 4-byte integers). */
static double wrap_int(const struct t_type *t, double v)
{
    if (t->kind == T_F || t->size == 8)
        return v;
    double m = t->size == 1 ? 256.0 : 4294967296.0;
    v = fmod(v, m);
    if (v < 0)
        v += m;
    return t->kind == T_I && v >= m / 2 ? v - m : v;
}

static void gen_input(const struct t_type *t, int op, uint64_t test, int rank, void *buf, size_t n)
{
    uint64_t s = t_seed(test, rank);
    for (size_t i = 0; i < n; i++)
        t_put(t, buf, i, gen_value(t, op, &s));
}

/* The float64 reference of element i over every rank's input. */
static void reference(const struct t_type *t, int op, uint64_t test, size_t n, double *ref,
                      void *tmp)
{
    for (int r = 0; r < t_size; r++) {
        gen_input(t, op, test, r, tmp, n);
        for (size_t i = 0; i < n; i++) {
            double v = t_get(t, tmp, i);
            if (r == 0)
                ref[i] = v;
            else if (op == 0)
                ref[i] += v;
            else if (op == 1)
                ref[i] *= v;
            else if (op == 2)
                ref[i] = v > ref[i] ? v : ref[i];
            else
                ref[i] = v < ref[i] ? v : ref[i];
        }
    }
    for (size_t i = 0; i < n; i++)
        ref[i] = wrap_int(t, ref[i]);
}

static int check_elements(const struct t_type *t, const void *got, const double *ref, size_t n,
                          const char *what, int op, int count)
{
    double tol = t->kind != T_F ? 0.0 : t->size == 4 ? 1e-5 : 1e-13;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = t_get(t, got, i);
        if (!(fabs(g - ref[i]) <= tol * (1.0 + fabs(ref[i])))) {
            if (bad++ == 0)
                CHECK(0, "%s %s %s count %d: element %zu is %.17g, expected %.17g", what, t->name,
                      ops[op].name, count, i, g, ref[i]);
        }
    }
    return bad;
}

static void test_reductions(void)
{
    size_t max = (size_t)counts[N_COUNTS - 1] * (size_t)t_size;
    char *send = malloc(max * 8), *recv = malloc(max * 8), *tmp = malloc(max * 8);
    double *ref = malloc(max * sizeof(double));
    uint64_t test = 1;
    for (size_t ti = 0; ti < N_REDUCE_TYPES; ti++) {
        const struct t_type *t = &reduce_types[ti];
        for (int op = 0; op < 4; op++) {
            for (size_t ci = 0; ci < N_COUNTS; ci++) {
                int count = counts[ci];
                size_t n = (size_t)count, bytes = n * t->size;
                for (int in_place = 0; in_place < 2; in_place++, test++) {
                    /* MPI_Allreduce */
                    gen_input(t, op, test, t_rank, send, n);
                    reference(t, op, test, n, ref, tmp);
                    if (in_place)
                        memcpy(recv, send, bytes);
                    else
                        memset(recv, POISON, bytes);
                    int rc = MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, t->type,
                                           ops[op].op, MPI_COMM_WORLD);
                    SERVED(T_ALLREDUCE);
                    CHECK(rc == MPI_SUCCESS, "MPI_Allreduce: %d", rc);
                    check_elements(t, recv, ref, n, "MPI_Allreduce", op, count);
                    CHECK(t_same_everywhere(t_hash(recv, bytes), MPI_COMM_WORLD),
                          "MPI_Allreduce %s %s count %d: ranks differ", t->name, ops[op].name,
                          count);

                    /* MPI_Reduce, MPI_IN_PLACE at the root only */
                    int root = (int)(test % (uint64_t)t_size);
                    bool ip = in_place && t_rank == root;
                    gen_input(t, op, test, t_rank, send, n);
                    if (ip)
                        memcpy(recv, send, bytes);
                    else
                        memset(recv, POISON, bytes);
                    rc = MPI_Reduce(ip ? MPI_IN_PLACE : send, recv, count, t->type, ops[op].op,
                                    root, MPI_COMM_WORLD);
                    SERVED(T_REDUCE);
                    CHECK(rc == MPI_SUCCESS, "MPI_Reduce: %d", rc);
                    if (t_rank == root)
                        check_elements(t, recv, ref, n, "MPI_Reduce", op, count);

                    /* MPI_Reduce_scatter_block: input of size blocks, this rank's block
                     * of the reduction out (in place: from and to recvbuf) */
                    size_t all = n * (size_t)t_size;
                    test++;
                    gen_input(t, op, test, t_rank, send, all);
                    reference(t, op, test, all, ref, tmp);
                    if (in_place)
                        memcpy(recv, send, all * t->size);
                    else
                        memset(recv, POISON, bytes);
                    rc = MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, count,
                                                  t->type, ops[op].op, MPI_COMM_WORLD);
                    SERVED(T_RSB);
                    CHECK(rc == MPI_SUCCESS, "MPI_Reduce_scatter_block: %d", rc);
                    check_elements(t, recv, ref + (size_t)t_rank * n, n, "MPI_Reduce_scatter_block",
                                   op, count);
                    /* MPI_IN_PLACE leaves the blocks past the first as they were. */
                    CHECK(!in_place || memcmp(recv + bytes, send + bytes, (all - n) * t->size) == 0,
                          "MPI_Reduce_scatter_block in place %s %s count %d: input changed",
                          t->name, ops[op].name, count);
                }
            }
        }
    }
    free(send);
    free(recv);
    free(tmp);
    free(ref);
}

static void gen_bytes(uint64_t test, int rank, int block, char *buf, size_t bytes)
{
    uint64_t s = t_seed(test * 131u + (uint64_t)block, rank);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (char)(t_next(&s) >> 56);
}

static void test_movement(void)
{
    size_t max = 70001u * 16u * (size_t)t_size;
    char *send = malloc(max), *recv = malloc(max), *want = malloc(max);
    static const int mcounts[] = {0, 1, 7, 5000, 70001};
    uint64_t test = 100000;
    for (size_t ti = 0; ti < N_MOVE_TYPES; ti++) {
        for (size_t ci = 0; ci < sizeof(mcounts) / sizeof(mcounts[0]); ci++) {
            int count = mcounts[ci];
            size_t bytes = (size_t)count * move_types[ti].size;
            MPI_Datatype type = move_types[ti].type;
            const char *name = move_types[ti].name;
            for (int in_place = 0; in_place < 2; in_place++, test++) {
                /* MPI_Bcast (no MPI_IN_PLACE form: the second round is another root) */
                int root = (int)(test % (uint64_t)t_size);
                gen_bytes(test, root, 0, want, bytes);
                if (t_rank == root)
                    memcpy(recv, want, bytes);
                else
                    memset(recv, POISON, bytes);
                int rc = MPI_Bcast(recv, count, type, root, MPI_COMM_WORLD);
                SERVED(T_BCAST);
                CHECK(rc == MPI_SUCCESS && memcmp(recv, want, bytes) == 0,
                      "MPI_Bcast %s count %d root %d: rc %d, wrong bytes", name, count, root, rc);

                /* MPI_Allgather: in place, this rank's block is already in recvbuf */
                gen_bytes(test, t_rank, 0, send, bytes);
                memset(recv, POISON, bytes * (size_t)t_size);
                if (in_place)
                    memcpy(recv + (size_t)t_rank * bytes, send, bytes);
                rc = MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type,
                                   MPI_COMM_WORLD);
                SERVED(T_ALLGATHER);
                CHECK(rc == MPI_SUCCESS, "MPI_Allgather: %d", rc);
                for (int r = 0; r < t_size; r++) {
                    gen_bytes(test, r, 0, want, bytes);
                    CHECK(memcmp(recv + (size_t)r * bytes, want, bytes) == 0,
                          "MPI_Allgather %s count %d%s: block %d wrong", name, count,
                          in_place ? " in place" : "", r);
                }

                /* MPI_Alltoall: block p of this rank's input goes to rank p */
                for (int p = 0; p < t_size; p++)
                    gen_bytes(test, t_rank, p, send + (size_t)p * bytes, bytes);
                if (in_place)
                    memcpy(recv, send, bytes * (size_t)t_size);
                else
                    memset(recv, POISON, bytes * (size_t)t_size);
                rc = MPI_Alltoall(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type,
                                  MPI_COMM_WORLD);
                SERVED(T_ALLTOALL);
                CHECK(rc == MPI_SUCCESS, "MPI_Alltoall: %d", rc);
                for (int p = 0; p < t_size; p++) {
                    gen_bytes(test, p, t_rank, want, bytes);
                    CHECK(memcmp(recv + (size_t)p * bytes, want, bytes) == 0,
                          "MPI_Alltoall %s count %d%s: block from %d wrong", name, count,
                          in_place ? " in place" : "", p);
                }
            }
        }
    }
    for (int i = 0; i < 5; i++) {
        CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
        SERVED(T_BARRIER);
    }
    free(send);
    free(recv);
    free(want);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    test_reductions();
    test_movement();
    int rc = t_finish();
    MPI_Finalize();
    return rc;
}
