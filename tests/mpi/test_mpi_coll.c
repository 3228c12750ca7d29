/* SPDX-License-Identifier: MIT */
/*
 * Every collective of a communicator made by comm_init_mpi (comm_allreduce_add too),
 * started by mpirun: f32, f64,
 * i32, bf16, f16 and u8 (reductions: sum, max, prod; min and avg once), counts 0, 1, a
 * prime and about a million, random inputs, float64 references, every output element
 * checked, outputs poisoned first, and reductions, broadcasts and allgathers compared
 * bit for bit over every rank; i8 and u8 sums and products of full-range bytes, which
 * wrap (the reference: modulo 256).  Run under ARCOMM_MPI_RANKS_PER_HOST=1, 2 and unset to
 * see one host, one rank a host, and two ranks a host.  Exits non-zero on any failure.
 */
#include "mpi_check.h"

#include <arcomm_mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size, g_failed;
static comm_t *g_comm;

#define BIG 1048573 /* a prime near a million */

static void fail(const char *what, comm_dtype_t dtype, comm_op_t op, size_t count, const char *why)
{
    if (g_failed++ < 20)
        fprintf(stderr, "rank %d: %s %s op %d count %zu: %s\n", g_rank, what, mc_dtype_name(dtype),
                (int)op, count, why);
}

static void *poisoned(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(p, 0xa5, bytes);
    return p;
}

static bool call_ok(comm_status_t st, const char *what, comm_dtype_t dtype, comm_op_t op,
                    size_t count)
{
    if (st == COMM_OK)
        return true;
    char why[600];
    snprintf(why, sizeof(why), "%s: %s", comm_status_string(st), comm_last_error(g_comm));
    fail(what, dtype, op, count, why);
    return false;
}

/* Elements [0, n) of out against the reduction of index first + i of every rank. */
static void check_reduced(const char *what, const void *out, size_t n, size_t first, uint64_t seed,
                          comm_dtype_t dtype, comm_op_t op)
{
    char why[128];
    if (mc_first_wrong(out, n, first, seed, g_size, dtype, op, why, sizeof(why)))
        fail(what, dtype, op, n, why);
}

static void same_bits(const char *what, const void *out, size_t bytes, comm_dtype_t dtype,
                      comm_op_t op, size_t count)
{
    if (!mc_same_everywhere(mc_hash(out, bytes)))
        fail(what, dtype, op, count, "ranks hold different bits");
}

static void t_allreduce(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed, bool in_place)
{
    size_t es = comm_dtype_size(dt);
    void *send = poisoned(n * es), *recv = in_place ? send : poisoned(n * es);
    mc_fill(send, n, seed, g_rank, dt, op, 0);
    if (call_ok(comm_allreduce(g_comm, send, recv, n, dt, op, NULL), "allreduce", dt, op, n))
        check_reduced("allreduce", recv, n, 0, seed, dt, op);
    same_bits("allreduce", recv, n * es, dt, op, n);
    if (!in_place)
        free(recv);
    free(send);
}

/* A sum plus this rank's own addend: a residual (ac == n) or a bias row (ac divides n). */
static void t_allreduce_add(comm_dtype_t dt, size_t n, size_t ac, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    void *send = poisoned(n * es), *recv = poisoned(n * es), *add = poisoned(ac * es);
    mc_fill(send, n, seed, g_rank, dt, COMM_SUM, 0);
    mc_fill(add, ac, seed + 1000003, g_rank, dt, COMM_SUM, 0);
    comm_status_t st = comm_allreduce_add(g_comm, send, recv, add, ac, n, dt, NULL);
    char why[128];
    if (st == COMM_OK && mc_first_wrong_add(recv, add, n, ac, seed, g_size, dt, why, sizeof(why)))
        fail("allreduce_add", dt, COMM_SUM, n, why);
    call_ok(st, "allreduce_add", dt, COMM_SUM, n);
    free(add);
    free(recv);
    free(send);
}

static void t_reduce(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    int root = (int)(seed % (uint64_t)g_size);
    void *send = poisoned(n * es), *recv = g_rank == root ? poisoned(n * es) : NULL;
    mc_fill(send, n, seed, g_rank, dt, op, 0);
    if (call_ok(comm_reduce(g_comm, send, recv, n, dt, op, root, NULL), "reduce", dt, op, n) &&
        recv != NULL)
        check_reduced("reduce", recv, n, 0, seed, dt, op);
    free(recv);
    free(send);
}

static void t_reduce_scatter(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt), all = n * (size_t)g_size;
    void *send = poisoned(all * es), *recv = poisoned(n * es);
    mc_fill(send, all, seed, g_rank, dt, op, 0);
    if (call_ok(comm_reduce_scatter(g_comm, send, recv, n, dt, op, NULL), "reduce_scatter", dt, op,
                n))
        check_reduced("reduce_scatter", recv, n, (size_t)g_rank * n, seed, dt, op);
    free(recv);
    free(send);
}

/* Rank r's expected block: its input of case seed from element first. */
static bool block_is(const void *got, size_t n, uint64_t seed, int r, comm_dtype_t dt, size_t first)
{
    size_t es = comm_dtype_size(dt);
    void *want = poisoned(n * es);
    mc_fill(want, n, seed, r, dt, COMM_SUM, first);
    bool ok = memcmp(got, want, n * es) == 0;
    free(want);
    return ok;
}

static void t_broadcast(comm_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    int root = (int)(seed % (uint64_t)g_size);
    void *send = NULL, *recv = poisoned(n * es);
    if (g_rank == root) {
        send = poisoned(n * es);
        mc_fill(send, n, seed, root, dt, COMM_SUM, 0);
    }
    if (call_ok(comm_broadcast(g_comm, send, recv, n, dt, root, NULL), "broadcast", dt, COMM_SUM,
                n) &&
        !block_is(recv, n, seed, root, dt, 0))
        fail("broadcast", dt, COMM_SUM, n, "wrong data");
    same_bits("broadcast", recv, n * es, dt, COMM_SUM, n);
    free(recv);
    free(send);
}

static void t_allgather(comm_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt);
    void *send = poisoned(n * es), *recv = poisoned((size_t)g_size * n * es);
    mc_fill(send, n, seed, g_rank, dt, COMM_SUM, 0);
    if (call_ok(comm_allgather(g_comm, send, recv, n, dt, NULL), "allgather", dt, COMM_SUM, n))
        for (int r = 0; r < g_size; r++)
            if (!block_is((char *)recv + (size_t)r * n * es, n, seed, r, dt, 0)) {
                fail("allgather", dt, COMM_SUM, n, "a rank's block is wrong");
                break;
            }
    same_bits("allgather", recv, (size_t)g_size * n * es, dt, COMM_SUM, n);
    free(recv);
    free(send);
}

static void t_alltoall(comm_dtype_t dt, size_t n, uint64_t seed)
{
    size_t es = comm_dtype_size(dt), all = (size_t)g_size * n;
    void *send = poisoned(all * es), *recv = poisoned(all * es);
    mc_fill(send, all, seed, g_rank, dt, COMM_SUM, 0);
    if (call_ok(comm_alltoall(g_comm, send, recv, n, dt, NULL), "alltoall", dt, COMM_SUM, n))
        for (int r = 0; r < g_size; r++)
            if (!block_is((char *)recv + (size_t)r * n * es, n, seed, r, dt, (size_t)g_rank * n)) {
                fail("alltoall", dt, COMM_SUM, n, "a rank's block is wrong");
                break;
            }
    free(recv);
    free(send);
}

/*
 * i8 and u8 SUM and PROD on full-range random bytes: results wrap modulo 256 (api.md's
 * integer semantics, the same bits for signed and unsigned), every element against that
 * reference, through allreduce, reduce and reduce_scatter, every rank's bits compared.
 */
static uint8_t wrap_ref(uint64_t seed, size_t i, comm_op_t op)
{
    uint8_t acc = mc_byte(seed, 0, i);
    for (int r = 1; r < g_size; r++)
        acc = (uint8_t)(op == COMM_PROD ? acc * mc_byte(seed, r, i) : acc + mc_byte(seed, r, i));
    return acc;
}

static void check_wrapped(const char *what, const uint8_t *out, size_t n, size_t first,
                          uint64_t seed, comm_dtype_t dt, comm_op_t op)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t want = wrap_ref(seed, first + i, op);
        if (out[i] != want) {
            char why[160];
            snprintf(why, sizeof(why), "element %zu is %d, expected %d (wrapping modulo 256)", i,
                     dt == COMM_I8 ? (int)(int8_t)out[i] : (int)out[i],
                     dt == COMM_I8 ? (int)(int8_t)want : (int)want);
            fail(what, dt, op, n, why);
            return;
        }
    }
}

static void t_wrap8(comm_dtype_t dt, comm_op_t op, size_t n, uint64_t seed)
{
    size_t all = n * (size_t)g_size;
    uint8_t *send = poisoned(all), *recv = poisoned(all);
    for (size_t i = 0; i < all; i++)
        send[i] = mc_byte(seed, g_rank, i);
    if (call_ok(comm_allreduce(g_comm, send, recv, n, dt, op, NULL), "allreduce", dt, op, n))
        check_wrapped("allreduce", recv, n, 0, seed, dt, op);
    same_bits("allreduce", recv, n, dt, op, n);
    int root = (int)(seed % (uint64_t)g_size);
    memset(recv, 0xa5, all);
    if (call_ok(comm_reduce(g_comm, send, g_rank == root ? recv : NULL, n, dt, op, root, NULL),
                "reduce", dt, op, n) &&
        g_rank == root)
        check_wrapped("reduce", recv, n, 0, seed, dt, op);
    memset(recv, 0xa5, all);
    if (call_ok(comm_reduce_scatter(g_comm, send, recv, n, dt, op, NULL), "reduce_scatter", dt, op,
                n))
        check_wrapped("reduce_scatter", recv, n, (size_t)g_rank * n, seed, dt, op);
    free(recv);
    free(send);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mc_shm_begin();

    comm_status_t st = comm_init_mpi(&g_comm, MPI_COMM_WORLD, NULL);
    if (st != COMM_OK) {
        fprintf(stderr, "rank %d: comm_init_mpi: %s: %s\n", g_rank, comm_status_string(st),
                comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* One host (MPI's shared-memory split, or ARCOMM_MPI_RANKS_PER_HOST covering every
     * rank): the host's own communicator, no "+mpi"; several: the hierarchical one. */
    bool one_host = mc_one_host();
    bool hier = strstr(comm_transport_name(g_comm), "+mpi") != NULL;
    if (comm_rank(g_comm) != g_rank || comm_size(g_comm) != g_size || hier == one_host)
        fail(one_host ? "identity (one host: the host's communicator)"
                      : "identity (several hosts: the hierarchical communicator)",
             COMM_F32, COMM_SUM, 0, comm_transport_name(g_comm));

    static const comm_dtype_t red_types[] = {COMM_F32,  COMM_F64, COMM_I32,
                                             COMM_BF16, COMM_F16, COMM_U8};
    static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_PROD};
    static const size_t counts[] = {0, 1, 97};
    uint64_t seed = 1;
    for (size_t d = 0; d < sizeof(red_types) / sizeof(red_types[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                t_allreduce(red_types[d], ops[o], counts[k], seed++, false);
                t_reduce(red_types[d], ops[o], counts[k], seed++);
                t_reduce_scatter(red_types[d], ops[o], counts[k], seed++);
            }
    t_allreduce(COMM_F32, COMM_AVG, 97, seed++, false);
    t_allreduce(COMM_BF16, COMM_AVG, 97, seed++, false);
    t_allreduce(COMM_I32, COMM_MIN, 97, seed++, false);
    t_allreduce(COMM_F64, COMM_SUM, 97, seed++, true);
    static const comm_dtype_t add_types[] = {COMM_F32, COMM_BF16, COMM_F64, COMM_I32};
    for (size_t d = 0; d < sizeof(add_types) / sizeof(add_types[0]); d++) {
        t_allreduce_add(add_types[d], 97, 97, seed++);
        t_allreduce_add(add_types[d], 96, 8, seed++);
        t_allreduce_add(add_types[d], 0, 1, seed++);
    }
    t_allreduce_add(COMM_F32, BIG - 1, 4, seed++);
    for (size_t d = 0; d < sizeof(red_types) / sizeof(red_types[0]); d++)
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            t_broadcast(red_types[d], counts[k], seed++);
            t_allgather(red_types[d], counts[k], seed++);
            t_alltoall(red_types[d], counts[k], seed++);
        }
    /* 8-bit sums and products that wrap: small (the leaders' step) and large (the slices). */
    static const size_t wrap_counts[] = {1, 97, 4099, 300007};
    for (size_t k = 0; k < sizeof(wrap_counts) / sizeof(wrap_counts[0]); k++)
        for (int d = 0; d < 2; d++) {
            t_wrap8(d ? COMM_U8 : COMM_I8, COMM_SUM, wrap_counts[k], seed++);
            t_wrap8(d ? COMM_U8 : COMM_I8, COMM_PROD, wrap_counts[k], seed++);
        }
    if (comm_barrier(g_comm) != COMM_OK)
        fail("barrier", COMM_U8, COMM_SUM, 0, comm_last_error(g_comm));

    /* About a million elements: the large paths and the segmented MPI steps. */
    static const comm_dtype_t big_types[] = {COMM_F32, COMM_F64, COMM_I32, COMM_BF16};
    for (size_t d = 0; d < sizeof(big_types) / sizeof(big_types[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            t_allreduce(big_types[d], ops[o], BIG, seed++, d == 2);
    t_reduce(COMM_F64, COMM_SUM, BIG, seed++);
    t_reduce_scatter(COMM_F32, COMM_PROD, BIG / (size_t)g_size, seed++);
    t_broadcast(COMM_F64, BIG, seed++);
    t_allgather(COMM_I32, BIG / (size_t)g_size, seed++);
    t_alltoall(COMM_F32, BIG / (size_t)g_size, seed++);

    if (comm_destroy(g_comm) != COMM_OK)
        fail("comm_destroy", COMM_F32, COMM_SUM, 0, comm_last_error(NULL));
    return mc_finish(g_failed);
}
