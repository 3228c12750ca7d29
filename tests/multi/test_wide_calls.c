/* SPDX-License-Identifier: MIT */
/*
 * What each rank of the wide test (test_wide.c) calls and checks: every collective,
 * allreduce, broadcast and reduce at roots 0, n-1 and n/2 (in place at n/2), allgather
 * and reduce_scatter (in place at count 3), alltoall and barrier, in f32 and i32 (SUM;
 * i32 MAX once) and f16, at count 0 (NULL buffers), counts 1 and 3 (the flag path; for
 * reduce_scatter and alltoall, which stage n blocks, the bulk path once n blocks pass the
 * threshold) and one count past the 1 KiB flag threshold (one-pass for thread ranks,
 * staged for process ranks).  Random data per (rank, element), outputs poisoned with a
 * guard element after, float64 references (exact for i32), exact ones for data
 * movement.  Every element of every rank is checked: each rank checks its block of the
 * allreduce of every rank's reduce_scatter input against the reference, every rank's
 * allreduce, broadcast and allgather outputs are hashed for test_wide.c to compare bit
 * for bit with rank 0's, data movement is compared with its source exactly, and reduce
 * (at each root) and reduce_scatter (each block) must give the bits of that allreduce.
 */
#include "wide_common.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void record_hash(struct w_ctx *x, const void *p, size_t bytes)
{
    if (x->res->nh < W_MAX_HASHES)
        x->res->hashes[x->res->nh++] = h_hash(p, bytes);
    else
        w_fail(x, "more than %d hashes", W_MAX_HASHES);
}

/* ---- data and references ---- */

/* One dtype and op, and the counts it is tried with. */
struct w_case {
    comm_dtype_t dt;
    comm_op_t op;
    unsigned counts; /* bits: W_C1, W_C3, W_BULK */
};
#define W_C1   1u
#define W_C3   2u
#define W_BULK 4u

static const struct w_case cases[] = {
    {COMM_F32, COMM_SUM, W_C1 | W_C3 | W_BULK},
    {COMM_I32, COMM_SUM, W_C1 | W_C3 | W_BULK},
    {COMM_I32, COMM_MAX, W_C3},
    {COMM_F16, COMM_SUM, W_C3 | W_BULK},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/*
 * A count past thread ranks' 1 KiB flag threshold for every collective (process ranks
 * run with ARCOMM_FLAG_THRESHOLD=1K): an odd 4101 up to 16 ranks, just past 1 KiB per
 * rank beyond (256 ranks' allgather and alltoall buffers hold 256 blocks).
 */
static size_t bulk_count(int n, size_t es)
{
    return n <= 16 ? 4101 : 1024 / es + 5;
}

/* Seeds: one per (case, count) call group, then per block, root or collective. */
static uint64_t seed_of(size_t ci, int which, uint64_t what, int sub)
{
    return ((uint64_t)ci * 4 + (uint64_t)which) * 8192 + what * 1024 + (uint64_t)sub;
}
enum { S_BLOCK, S_BCAST, S_GATHER, S_A2A };

static bool is_int(comm_dtype_t dt)
{
    return dt == COMM_I32;
}

/* Checks the guard element after out[0..count). */
void w_check_guard(struct w_ctx *x, const void *out, size_t count, comm_dtype_t dt,
                   const char *what)
{
    const uint8_t *g = (const uint8_t *)out + count * comm_dtype_size(dt);
    if (!h_poisoned(g, 1, dt))
        w_fail(x, "%s (count %zu, %s) wrote past the end of its output", what, count,
               h_dtype_name(dt));
}

/* One unit in the last place of v in f16 (for the one rounding of an f16 result). */
static double ulp_f16(double v)
{
    int e;
    frexp(fabs(v), &e);
    double u = ldexp(1, e - 11);
    return u > ldexp(1, -24) ? u : ldexp(1, -24);
}

/*
 * Checks out[0..count) against the float64 (integers: exact, wrapping) reduction with op
 * of h_fill_op(count, dt, op, seed, p) over every rank p, element by element.
 */
static void check_reduced(struct w_ctx *x, const void *out, size_t count, comm_dtype_t dt,
                          comm_op_t op, uint64_t seed, const char *what)
{
    size_t es = comm_dtype_size(dt);
    double *want = malloc(count * sizeof(double)), *mag = malloc(count * sizeof(double));
    uint8_t *in = malloc(count * es);
    for (int p = 0; p < x->n; p++) {
        h_fill_op(in, count, dt, op, seed, p);
        for (size_t i = 0; i < count; i++) {
            double v = h_get(in, i, dt);
            if (is_int(dt)) {
                int32_t b = (int32_t)v, a = p == 0 ? b : (int32_t)want[i];
                if (p > 0 && op == COMM_SUM)
                    a = (int32_t)((uint32_t)a + (uint32_t)b); /* wraps as the library's */
                else if (p > 0)
                    a = b > a ? b : a;
                want[i] = a;
                continue;
            }
            if (p == 0) {
                want[i] = v;
                mag[i] = fabs(v);
            } else {
                want[i] = op == COMM_SUM ? want[i] + v : v > want[i] ? v : want[i];
                mag[i] += fabs(v);
            }
        }
    }
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double got = h_get(out, i, dt), tol = 0;
        if (!is_int(dt) && op == COMM_SUM) {
            tol = 2.0 * (x->n + 1) * ldexp(1, -23) * mag[i];
            if (dt == COMM_F16)
                tol += ulp_f16(want[i]);
        }
        bool ok = is_int(dt) ? got == want[i] : fabs(got - want[i]) <= tol; /* NaN: poison */
        if (!ok && wrong++ == 0)
            w_fail(x, "%s: element %zu of %zu (%s %s): got %.17g, want %.17g", what, i, count,
                   h_dtype_name(dt), h_op_name(op), got, want[i]);
    }
    if (wrong > 1)
        x->res->errors += wrong - 1;
    free(in);
    free(mag);
    free(want);
}

/* ---- one rank's calls ---- */

bool w_call_ok(struct w_ctx *x, comm_status_t st, const char *what, size_t count, comm_dtype_t dt,
               int root)
{
    if (st == COMM_OK)
        return true;
    w_fail(x, "%s(count %zu, %s, root %d) = %s: %s", what, count, h_dtype_name(dt), root,
           comm_status_string(st), comm_last_error(x->comm));
    return false;
}

static void barrier_checked(struct w_ctx *x)
{
    atomic_fetch_add(&w_shared_mem->barrier_entries, 1);
    x->barriers++;
    comm_status_t st = comm_barrier(x->comm);
    if (!w_call_ok(x, st, "comm_barrier", 0, COMM_F32, 0))
        return;
    /* Every rank entered this barrier before any rank left it. */
    long entered = atomic_load(&w_shared_mem->barrier_entries);
    if (entered < (long)x->n * x->barriers)
        w_fail(x, "left barrier %ld when only %ld entries of %ld were made", x->barriers, entered,
               (long)x->n * x->barriers);
}

/*
 * Every collective for case ci at count c (which: the count's index, for seeds and for
 * choosing the in-place forms at count 3).
 */
static void one_count(struct w_ctx *x, size_t ci, int which, size_t c)
{
    const struct w_case *k = &cases[ci];
    comm_dtype_t dt = k->dt;
    comm_op_t op = k->op;
    int n = x->n, me = x->rank;
    size_t es = comm_dtype_size(dt), nc = (size_t)n * c;
    bool inplace = which == 1;
    /* X: the reduce_scatter input, block b = h_fill_op(seed b, this rank); A: its
     * allreduce; G: the gathered (or alltoall) output; T: alltoall input; B, R: one
     * block. */
    uint8_t *X = malloc(nc * es), *A = malloc((nc + 1) * es), *G = malloc((nc + 1) * es);
    uint8_t *T = malloc(nc * es), *B = malloc((c + 1) * es), *R = malloc((c + 1) * es);
    comm_status_t st;
    char what[96];

    for (int b = 0; b < n; b++)
        h_fill_op(X + (size_t)b * c * es, c, dt, op, seed_of(ci, which, S_BLOCK, b), me);

    /* allreduce of every block: this rank checks its block against the reference. */
    h_poison(A, nc + 1, dt);
    st = comm_allreduce(x->comm, X, A, nc, dt, op, NULL);
    if (w_call_ok(x, st, "allreduce", nc, dt, 0)) {
        snprintf(what, sizeof(what), "allreduce of %zu, block %d", nc, me);
        check_reduced(x, A + (size_t)me * c * es, c, dt, op, seed_of(ci, which, S_BLOCK, me), what);
        w_check_guard(x, A, nc, dt, "allreduce");
    }
    record_hash(x, A, nc * es);

    /* allreduce of block 0 alone: the bits of A's block 0 (one order for every count). */
    h_poison(R, c + 1, dt);
    st = comm_allreduce(x->comm, X, R, c, dt, op, NULL);
    if (w_call_ok(x, st, "allreduce", c, dt, 0)) {
        if (memcmp(R, A, c * es) != 0)
            w_fail(x, "allreduce of count %zu (%s) differs from block 0 of allreduce of %zu", c,
                   h_dtype_name(dt), nc);
        w_check_guard(x, R, c, dt, "allreduce");
    }

    int roots[3] = {0, n - 1, n / 2};
    for (int ri = 0; ri < 3; ri++) {
        int root = roots[ri];
        bool in_place = ri == 2; /* on the root; other ranks pass NULL (root 0) or a buffer */
        uint64_t bseed = seed_of(ci, which, S_BCAST, root);

        /* broadcast */
        h_poison(B, c + 1, dt);
        const void *send = NULL;
        if (me == root) {
            h_fill(in_place ? B : R, c, dt, bseed, root);
            send = in_place ? B : R;
        } else if (ri != 0) {
            h_poison(R, c, dt);
            send = R; /* not read off the root */
        }
        st = comm_broadcast(x->comm, send, B, c, dt, root, NULL);
        if (w_call_ok(x, st, "broadcast", c, dt, root)) {
            if (!h_holds(B, c, dt, COMM_SUM, bseed, root))
                w_fail(x, "broadcast (count %zu, %s, root %d%s) differs from the root's input", c,
                       h_dtype_name(dt), root, in_place ? ", in place" : "");
            w_check_guard(x, B, c, dt, "broadcast");
        }
        record_hash(x, B, c * es);

        /* reduce of block 0: the bits of A's block 0 at the root, nothing elsewhere. */
        h_poison(B, c + 1, dt);
        void *recv = B;
        const void *rsend = X;
        if (me == root && in_place) {
            memcpy(B, X, c * es);
            rsend = B;
        } else if (me != root && ri == 0) {
            recv = NULL;
        }
        st = comm_reduce(x->comm, rsend, recv, c, dt, op, root, NULL);
        if (w_call_ok(x, st, "reduce", c, dt, root)) {
            if (me == root && memcmp(B, A, c * es) != 0)
                w_fail(x, "reduce (count %zu, %s %s, root %d%s) differs from allreduce's bits", c,
                       h_dtype_name(dt), h_op_name(op), root, in_place ? ", in place" : "");
            if (me != root && recv != NULL && !h_poisoned(B, c, dt))
                w_fail(x, "reduce (count %zu, root %d) wrote the recvbuf of rank %d", c, root, me);
            w_check_guard(x, B, c, dt, "reduce");
        }
    }

    /* allgather: block p is rank p's input (in place at count 3). */
    uint64_t gseed = seed_of(ci, which, S_GATHER, 0);
    h_poison(G, nc + 1, dt);
    const void *gsend = B;
    if (inplace) {
        h_fill(G + (size_t)me * c * es, c, dt, gseed, me);
        gsend = G + (size_t)me * c * es;
    } else {
        h_fill(B, c, dt, gseed, me);
    }
    st = comm_allgather(x->comm, gsend, G, c, dt, NULL);
    if (w_call_ok(x, st, "allgather", c, dt, 0)) {
        for (int p = 0; p < n; p++)
            if (!h_holds(G + (size_t)p * c * es, c, dt, COMM_SUM, gseed, p)) {
                w_fail(x, "allgather (count %zu, %s%s): block %d differs from rank %d's input", c,
                       h_dtype_name(dt), inplace ? ", in place" : "", p, p);
                break;
            }
        w_check_guard(x, G, nc, dt, "allgather");
    }
    record_hash(x, G, nc * es);

    /* reduce_scatter: this rank's block of A, bit for bit (in place at count 3, where the
     * other blocks of the input stay as they were). */
    h_poison(B, c + 1, dt);
    const void *qsend = X;
    void *qrecv = B;
    if (inplace) {
        h_poison(G, nc + 1, dt);
        memcpy(G, X, nc * es);
        qsend = G;
        qrecv = G + (size_t)me * c * es;
    }
    st = comm_reduce_scatter(x->comm, qsend, qrecv, c, dt, op, NULL);
    if (w_call_ok(x, st, "reduce_scatter", c, dt, 0)) {
        if (memcmp(qrecv, A + (size_t)me * c * es, c * es) != 0)
            w_fail(x, "reduce_scatter (count %zu, %s %s%s) differs from block %d of allreduce", c,
                   h_dtype_name(dt), h_op_name(op), inplace ? ", in place" : "", me);
        if (inplace) {
            for (int b = 0; b < n; b++)
                if (b != me && memcmp(G + (size_t)b * c * es, X + (size_t)b * c * es, c * es)) {
                    w_fail(x, "in-place reduce_scatter (count %zu) changed block %d of sendbuf", c,
                           b);
                    break;
                }
            w_check_guard(x, G, nc, dt, "in-place reduce_scatter");
        } else {
            w_check_guard(x, B, c, dt, "reduce_scatter");
        }
    }

    /* alltoall: block p of rank r's input lands in block r of rank p's output. */
    for (int p = 0; p < n; p++)
        h_fill(T + (size_t)p * c * es, c, dt, seed_of(ci, which, S_A2A, p), me);
    h_poison(G, nc + 1, dt);
    st = comm_alltoall(x->comm, T, G, c, dt, NULL);
    if (w_call_ok(x, st, "alltoall", c, dt, 0)) {
        for (int p = 0; p < n; p++)
            if (!h_holds(G + (size_t)p * c * es, c, dt, COMM_SUM, seed_of(ci, which, S_A2A, me),
                         p)) {
                w_fail(x, "alltoall (count %zu, %s): block %d differs from rank %d's block %d", c,
                       h_dtype_name(dt), p, p, me);
                break;
            }
        w_check_guard(x, G, nc, dt, "alltoall");
    }

    barrier_checked(x);
    free(R);
    free(B);
    free(T);
    free(G);
    free(A);
    free(X);
}

/* Count 0 with NULL buffers: a valid call of every collective that touches nothing
 * (one statement each: the ranks must make them in the same order). */
static void zero_counts(struct w_ctx *x)
{
    int root = x->n - 1;
    comm_status_t st;
    st = comm_allreduce(x->comm, NULL, NULL, 0, COMM_F32, COMM_SUM, NULL);
    w_call_ok(x, st, "allreduce", 0, COMM_F32, 0);
    st = comm_broadcast(x->comm, NULL, NULL, 0, COMM_I32, root, NULL);
    w_call_ok(x, st, "broadcast", 0, COMM_I32, root);
    st = comm_reduce(x->comm, NULL, NULL, 0, COMM_F16, COMM_MAX, root, NULL);
    w_call_ok(x, st, "reduce", 0, COMM_F16, root);
    st = comm_allgather(x->comm, NULL, NULL, 0, COMM_F32, NULL);
    w_call_ok(x, st, "allgather", 0, COMM_F32, 0);
    st = comm_reduce_scatter(x->comm, NULL, NULL, 0, COMM_I32, COMM_SUM, NULL);
    w_call_ok(x, st, "reduce_scatter", 0, COMM_I32, 0);
    st = comm_alltoall(x->comm, NULL, NULL, 0, COMM_F32, NULL);
    w_call_ok(x, st, "alltoall", 0, COMM_F32, 0);
}

void w_body(struct w_ctx *x)
{
    zero_counts(x);
    for (size_t ci = 0; ci < N_CASES; ci++) {
        size_t es = comm_dtype_size(cases[ci].dt);
        const size_t counts[3] = {1, 3, bulk_count(x->n, es)};
        for (int which = 0; which < 3; which++)
            if (cases[ci].counts & (1u << which))
                one_count(x, ci, which, counts[which]);
    }
}
