/* SPDX-License-Identifier: MIT */
/*
 * The collectives beyond allreduce on the host: broadcast, reduce, allgather,
 * reduce_scatter and alltoall, for every dtype and op, counts from 0 (NULL buffers) to
 * past 1 MiB per rank, in place and out of place, roots first, middle and last, outputs
 * poisoned first (with a guard element after), float64 references for reductions and
 * exact ones for data movement, reductions compared bit for bit with allreduce of the
 * same data, every rank compared bit for bit — over 1..8 thread ranks and 2..4 process
 * ranks, malloc'd and comm_mem_alloc buffers, through every path (flag, one-pass,
 * staged, CMA).  Then the calls that must fail: every pair of collectives that disagree,
 * bad arguments on one rank and on all, and a backend without the collectives.
 */
#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum kind {
    K_BROADCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_ALLREDUCE,
    K_BARRIER
};
#define K_SWEPT 5 /* the first five: the collectives under test */
#define K_ALL   7

static const char *const kind_names[K_ALL] = {
    "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "allreduce", "barrier"};

/* Adding a dtype or an op is one line here (h_fill, h_get and h_check must know it). */
static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32, COMM_I64};
static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_MIN};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
#define N_OPS    (sizeof(ops) / sizeof(ops[0]))

static const size_t small_counts[] = {0, 1, 13, 4099};

static bool reduces(enum kind k)
{
    return k == K_REDUCE || k == K_REDUCE_SCATTER || k == K_ALLREDUCE;
}

static bool rooted(enum kind k)
{
    return k == K_BROADCAST || k == K_REDUCE;
}

static comm_status_t make_call(comm_t *c, enum kind k, const void *s, void *r, size_t count,
                               comm_dtype_t dt, comm_op_t op, int root)
{
    switch (k) {
    case K_BROADCAST:
        return comm_broadcast(c, s, r, count, dt, root, NULL);
    case K_REDUCE:
        return comm_reduce(c, s, r, count, dt, op, root, NULL);
    case K_ALLGATHER:
        return comm_allgather(c, s, r, count, dt, NULL);
    case K_REDUCE_SCATTER:
        return comm_reduce_scatter(c, s, r, count, dt, op, NULL);
    case K_ALLTOALL:
        return comm_alltoall(c, s, r, count, dt, NULL);
    case K_ALLREDUCE:
        return comm_allreduce(c, s, r, count, dt, op, NULL);
    case K_BARRIER:
        return comm_barrier(c);
    }
    return COMM_ERR_INVALID;
}

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

struct sweep {
    bool mem;        /* buffers from comm_mem_alloc */
    bool large_only; /* only the counts past 1 MiB */
    bool small_only; /* only the small counts */
    bool allreduce;  /* allreduce too (the CMA sweeps: its own path there) */
};

struct ctx {
    struct h_rank *r;
    const struct sweep *sw;
    uint64_t *hashes;
    size_t nh;
};

static void *buf_alloc(struct ctx *x, size_t bytes)
{
    void *p = NULL;
    if (x->sw->mem) {
        if (comm_mem_alloc(x->r->comm, bytes, &p) != COMM_OK)
            h_fail(x->r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(x->r->comm));
    } else {
        p = malloc(bytes);
    }
    return p;
}

static void buf_free(struct ctx *x, void *p)
{
    if (x->sw->mem)
        comm_mem_free(x->r->comm, p);
    else
        free(p);
}

/* Element counts of this rank's sendbuf and recvbuf. */
static void shape(enum kind k, size_t count, int n, int rank, int root, size_t *ns, size_t *nr)
{
    size_t all = (size_t)n * count;
    *ns = k == K_REDUCE_SCATTER || k == K_ALLTOALL ? all : count;
    *nr = k == K_ALLGATHER || k == K_ALLTOALL ? all : count;
    if (k == K_BROADCAST && rank != root)
        *ns = 0;
    if (k == K_REDUCE && rank != root)
        *nr = 0;
}

/* Seed of block b of rank p's input (reduce_scatter and alltoall fill per block). */
static uint64_t block_seed(uint64_t seed, int b)
{
    return seed + 101u * (uint64_t)b;
}

/*
 * One call of collective k: fill, poison, call, check every element and the guard after
 * the output, hash what every rank must agree on.  Reductions are also compared bit
 * for bit with allreduce of the same data (every rank makes that call too).
 */
static void one(struct ctx *x, enum kind k, comm_dtype_t dt, comm_op_t op, size_t count, int root,
                bool inplace, size_t off)
{
    struct h_rank *r = x->r;
    int n = r->nranks, me = r->rank;
    size_t es = comm_dtype_size(dt);
    size_t ns, nr;
    shape(k, count, n, me, root, &ns, &nr);
    uint64_t seed = 7 + x->nh * 131 + count * 3 + (uint64_t)k;

    /* One region holds sendbuf and recvbuf in place; each has a guard element after. */
    size_t sbytes = (ns + off + 1) * es, rbytes = (nr + off + 1) * es;
    uint8_t *sb = NULL, *rb = NULL;
    void *send = NULL, *recv = NULL;
    if (inplace) {
        size_t most = ns > nr ? ns : nr;
        rb = buf_alloc(x, (most + off + 1) * es);
        if (rb == NULL)
            return;
        h_poison(rb, most + off + 1, dt);
        uint8_t *base = rb + off * es;
        if (k == K_ALLGATHER) {
            recv = base;
            send = base + (size_t)me * count * es;
        } else if (k == K_REDUCE_SCATTER) {
            send = base;
            recv = base + (size_t)me * count * es;
        } else {
            send = recv = base; /* broadcast and reduce: in place on the root only */
            if (me != root) {
                send = k == K_BROADCAST ? NULL : base;
                recv = k == K_REDUCE ? NULL : base;
            }
        }
    } else {
        sb = ns ? buf_alloc(x, sbytes) : NULL;
        rb = nr ? buf_alloc(x, rbytes) : NULL;
        if ((ns && sb == NULL) || (nr && rb == NULL))
            return;
        send = sb ? sb + off * es : NULL;
        recv = rb ? rb + off * es : NULL;
        if (rb)
            h_poison(rb, nr + off + 1, dt);
    }
    if (count == 0) {
        /* Count 0: NULL buffers are fine everywhere. */
        send = recv = NULL;
    }
    if (count && ns) {
        if (k == K_REDUCE_SCATTER || k == K_ALLTOALL)
            for (int b = 0; b < n; b++)
                h_fill((uint8_t *)send + (size_t)b * count * es, count, dt, block_seed(seed, b),
                       me);
        else
            h_fill(send, count, dt, seed, me);
    }

    comm_status_t st = make_call(r->comm, k, send, recv, count, dt, op, root);
    if (st != COMM_OK) {
        h_fail(r, "%s(count %zu dtype %d op %d root %d inplace %d off %zu) = %s: %s", kind_names[k],
               count, (int)dt, (int)op, root, inplace, off, comm_status_string(st),
               comm_last_error(r->comm));
        goto out;
    }
    uint64_t hash = 0;
    size_t bytes = count * es;
    const char *what = NULL;
    switch (k) {
    case K_BROADCAST:
        if (count && !h_holds(recv, count, dt, COMM_SUM, seed, root))
            what = "broadcast output differs from the root's input";
        hash = fnv(recv, bytes);
        break;
    case K_ALLGATHER:
        for (int p = 0; p < n && count && what == NULL; p++)
            if (!h_holds((uint8_t *)recv + (size_t)p * bytes, count, dt, COMM_SUM, seed, p))
                what = "allgather block differs from its rank's input";
        hash = count ? fnv(recv, (size_t)n * bytes) : 0;
        break;
    case K_ALLTOALL:
        for (int p = 0; p < n && count && what == NULL; p++)
            if (!h_holds((uint8_t *)recv + (size_t)p * bytes, count, dt, COMM_SUM,
                         block_seed(seed, me), p))
                what = "alltoall block differs from its sender's block";
        break;
    case K_REDUCE:
        if (me == root && count)
            h_check(r, recv, count, dt, op, seed, n, NULL, 0, false);
        break;
    case K_REDUCE_SCATTER:
        if (count)
            h_check(r, recv, count, dt, op, block_seed(seed, me), n, NULL, 0, false);
        if (inplace && count)
            for (int b = 0; b < n && what == NULL; b++)
                if (b != me && !h_holds((uint8_t *)send + (size_t)b * bytes, count, dt, COMM_SUM,
                                        block_seed(seed, b), me))
                    what = "in-place reduce_scatter changed another block of sendbuf";
        break;
    case K_ALLREDUCE:
        if (count)
            h_check(r, recv, count, dt, op, seed, n, NULL, 0, false);
        break;
    default:
        break;
    }
    if (what)
        h_fail(r, "%s (count %zu dtype %d root %d inplace %d)", what, count, (int)dt, root,
               inplace);
    /* The guard element after the output (and the rest of an in-place region). */
    if (rb && count) {
        size_t end = inplace ? (ns > nr ? ns : nr) : nr;
        const uint8_t *guard = rb + (off + end) * es;
        if (!h_poisoned(guard, 1, dt))
            h_fail(r, "%s wrote past the end of its output (count %zu)", kind_names[k], count);
    }
    /* Reductions: the bits of allreduce on the same data (made afresh: in place, the
     * input is gone), whatever the root or block. */
    if (reduces(k) && count) {
        size_t total = k == K_REDUCE_SCATTER ? (size_t)n * count : count;
        uint8_t *in = malloc(total * es), *ar = malloc(total * es);
        if (k == K_REDUCE_SCATTER)
            for (int b = 0; b < n; b++)
                h_fill(in + (size_t)b * bytes, count, dt, block_seed(seed, b), me);
        else
            h_fill(in, count, dt, seed, me);
        st = comm_allreduce(r->comm, in, ar, total, dt, op, NULL);
        if (st != COMM_OK) {
            h_fail(r, "allreduce for comparison: %s", comm_last_error(r->comm));
        } else {
            const uint8_t *mine = ar + (k == K_REDUCE_SCATTER ? (size_t)me * bytes : 0);
            if ((k == K_REDUCE_SCATTER || me == root) && memcmp(mine, recv, bytes) != 0)
                h_fail(r, "%s (count %zu dtype %d op %d root %d) differs from allreduce's bits",
                       kind_names[k], count, (int)dt, (int)op, root);
            hash = fnv(ar, total * es);
        }
        free(in);
        free(ar);
    }
    x->hashes[x->nh++] = hash;
out:
    if (sb)
        buf_free(x, sb);
    if (rb)
        buf_free(x, rb);
}

static void sweep_body(struct h_rank *r)
{
    struct ctx x = {.r = r, .sw = r->arg, .hashes = (uint64_t *)r->out};
    int n = r->nranks;
    int roots[3] = {0, n - 1, n / 2};
    for (int k = 0; k < (x.sw->allreduce ? K_ALLREDUCE + 1 : K_SWEPT); k++) {
        for (size_t d = 0; d < N_DTYPES; d++) {
            comm_dtype_t dt = dtypes[d];
            size_t es = comm_dtype_size(dt);
            for (size_t o = 0; o < (reduces(k) ? N_OPS : 1); o++) {
                comm_op_t op = ops[o];
                size_t v = 0;
                for (size_t ci = 0;
                     !x.sw->large_only && ci < sizeof(small_counts) / sizeof(small_counts[0]);
                     ci++) {
                    for (int inplace = 0; inplace < (k == K_ALLTOALL ? 1 : 2); inplace++, v++)
                        one(&x, k, dt, op, small_counts[ci], roots[(v + o) % 3], inplace, v % 2);
                }
                if (x.sw->small_only)
                    continue;
                /* Past 1 MiB per rank: every dtype with SUM, f32 with every op (f32 and
                 * f16 SUM only in quick builds). */
                if (op != COMM_SUM && dt != COMM_F32)
                    continue;
                if (h_quick() && (op != COMM_SUM || (dt != COMM_F32 && dt != COMM_F16)))
                    continue;
                size_t large = (1u << 20) / es + 17;
                one(&x, k, dt, op, large, roots[(d + o + 1) % 3],
                    (d + o + (size_t)k) % 2 && k != K_ALLTOALL, d % 2);
            }
        }
    }
    r->out_len = x.nh * sizeof(uint64_t);
}

/* Runs a sweep job and checks it; returns rank 0's hashes (malloc'd, *len bytes). */
static uint64_t *run_job_hashes(const struct h_job *job, size_t *len)
{
    int nranks = job->nranks;
    struct h_rank *res = h_run(job);
    h_env_pop();
    for (int r = 0; r < nranks; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_true(res[0].out_len > 0);
    for (int r = 1; r < nranks; r++) {
        assert_int_equal(res[r].out_len, res[0].out_len);
        if (memcmp(res[r].out, res[0].out, res[0].out_len) != 0)
            fail_msg("rank %d's results differ from rank 0's (not bit-identical)", r);
    }
    assert_int_equal(h_shm_leftovers(), 0);
    uint64_t *hashes = malloc(res[0].out_len);
    assert_non_null(hashes);
    memcpy(hashes, res[0].out, res[0].out_len);
    *len = res[0].out_len;
    return hashes;
}

/* Runs the sweep and checks it; returns rank 0's hashes (malloc'd, *len bytes). */
static uint64_t *run_sweep_hashes(int nranks, bool procs, struct sweep sw,
                                  const char *flag_threshold, const char *cma_threshold,
                                  size_t *len)
{
    if (flag_threshold)
        h_env_push("ARCOMM_FLAG_THRESHOLD", flag_threshold);
    if (cma_threshold)
        h_env_push("ARCOMM_CMA_THRESHOLD", cma_threshold);
    struct h_job job = {
        .nranks = nranks, .procs = procs, .body = sweep_body, .arg = &sw, .kill_rank = -1};
    return run_job_hashes(&job, len);
}

static void run_sweep(int nranks, bool procs, struct sweep sw, const char *flag_threshold)
{
    size_t len;
    free(run_sweep_hashes(nranks, procs, sw, flag_threshold, NULL, &len));
}

/* Thread ranks: flag path up to the default threshold, one-pass beyond. */
static void threads_1(void **s)
{
    (void)s;
    run_sweep(1, false, (struct sweep){0}, NULL);
}
static void threads_2(void **s)
{
    (void)s;
    run_sweep(2, false, (struct sweep){0}, NULL);
}
/* Every count on the one-pass path. */
static void threads_3_direct(void **s)
{
    (void)s;
    run_sweep(3, false, (struct sweep){0}, "off");
}
/* Every count that fits a slot on the flag path. */
static void threads_4_flag(void **s)
{
    (void)s;
    run_sweep(4, false, (struct sweep){.small_only = true}, "1M");
}
static void threads_8(void **s)
{
    (void)s;
    run_sweep(8, false, (struct sweep){.small_only = true}, NULL);
}
/* Process ranks, private buffers: flag path, staged beyond. */
static void procs_2(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){0}, NULL);
}
/* Every count on the staged path. */
static void procs_3_staged(void **s)
{
    (void)s;
    run_sweep(3, true, (struct sweep){0}, "off");
}
static void procs_4(void **s)
{
    (void)s;
    run_sweep(4, true, (struct sweep){.large_only = h_quick()}, "16K");
}
/* comm_mem_alloc buffers: the one-pass path for process ranks. */
static void procs_mem_2_direct(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.mem = true}, "off");
}
static void procs_mem_3(void **s)
{
    (void)s;
    run_sweep(3, true, (struct sweep){.mem = true, .large_only = true}, NULL);
}
static void threads_mem_2(void **s)
{
    (void)s;
    run_sweep(2, false, (struct sweep){.mem = true, .large_only = true}, NULL);
}
/*
 * Process ranks, private buffers, every bulk call on the CMA path (process_vm_readv/
 * writev; where the kernel does not allow it, the staged path runs instead): every
 * count from 1 on (flag path off), allreduce too, in place and out of place.
 */
static void procs_2_cma(void **s)
{
    (void)s;
    size_t len;
    free(run_sweep_hashes(2, true, (struct sweep){.allreduce = true}, "off", "0", &len));
}
static void procs_3_cma(void **s)
{
    (void)s;
    size_t len;
    free(run_sweep_hashes(3, true, (struct sweep){.allreduce = true, .large_only = h_quick()},
                          "off", "0", &len));
}
/*
 * Ranks that disagree on whether the single copy is fast (ARCOMM_CMA_FAST is each
 * process's own, as the calibration is): rank 0 says yes, rank 1 no.  The communicator
 * takes the wider windows only if every rank said yes (agreed at join), and a call
 * takes CMA only where every rank offered it: one path for both (the staging slots),
 * the staged path's bits, no rank on a path its peer is not on.
 */
static void disagree_body(struct h_rank *r)
{
    setenv("ARCOMM_CMA_FAST", r->rank == 0 ? "1" : "0", 1);
    if (!h_comm_init(r, 20000))
        return;
    sweep_body(r);
    comm_destroy(r->comm);
}

static void procs_2_cma_disagree(void **s)
{
    (void)s;
    struct sweep sw = {.allreduce = true, .large_only = true};
    size_t len, len_staged;
    h_env_push("ARCOMM_CMA_THRESHOLD", "auto");
    struct h_job job = {.nranks = 2,
                        .procs = true,
                        .no_init = true,
                        .body = disagree_body,
                        .arg = &sw,
                        .kill_rank = -1};
    uint64_t *got = run_job_hashes(&job, &len);
    uint64_t *staged = run_sweep_hashes(2, true, sw, NULL, "off", &len_staged);
    assert_int_equal(len, len_staged);
    for (size_t i = 0; i < len / sizeof(uint64_t); i++)
        if (got[i] != staged[i])
            fail_msg("call %zu: ranks that disagree on ARCOMM_CMA_FAST got other bits than "
                     "the staged path",
                     i);
    free(got);
    free(staged);
}

/* Four ranks: small calls on the flag path, CMA from 64 KiB on. */
static void procs_4_cma(void **s)
{
    (void)s;
    size_t len;
    free(run_sweep_hashes(4, true, (struct sweep){.allreduce = true, .large_only = h_quick()},
                          "16K", "64K", &len));
}
/* The CMA path and the staged path (ARCOMM_CMA_THRESHOLD=off) give the same bits. */
static void procs_3_cma_vs_staged(void **s)
{
    (void)s;
    struct sweep sw = {.allreduce = true, .large_only = h_quick()};
    size_t len_cma, len_staged;
    uint64_t *cma = run_sweep_hashes(3, true, sw, "off", "0", &len_cma);
    uint64_t *staged = run_sweep_hashes(3, true, sw, "off", "off", &len_staged);
    assert_int_equal(len_cma, len_staged);
    for (size_t i = 0; i < len_cma / sizeof(uint64_t); i++)
        if (cma[i] != staged[i])
            fail_msg("call %zu of the sweep: the CMA path's results differ from the staged "
                     "path's",
                     i);
    free(cma);
    free(staged);
}

/* Small staging slots: the staged path runs many rounds and cuts regions small. */
static void procs_small_slots_3(void **s)
{
    (void)s;
    h_env_push("ARCOMM_SHM_SLOT_BYTES", "8K");
    run_sweep(3, true, (struct sweep){.large_only = h_quick()}, "1K");
}

/* ---- disagreeing calls: every rank MISMATCH, naming both calls, no recvbuf written ---- */

struct mis {
    enum kind a, b; /* rank 0.. make a, the last rank makes b */
    size_t count_a, count_b;
    comm_dtype_t dt_a, dt_b;
    comm_op_t op_a, op_b;
    int root_a, root_b;
    const char *want_a, *want_b; /* in every rank's message */
};

static void mismatch_body(struct h_rank *r)
{
    const struct mis *m = r->arg;
    bool odd = r->rank == r->nranks - 1;
    enum kind k = odd ? m->b : m->a;
    size_t count = odd ? m->count_b : m->count_a;
    comm_dtype_t dt = odd ? m->dt_b : m->dt_a;
    size_t es = comm_dtype_size(dt), elems = (size_t)r->nranks * (count + 1) + 1;
    uint8_t *send = malloc(elems * es), *recv = malloc(elems * es);
    h_fill(send, elems, dt, 5, r->rank);
    h_poison(recv, elems, dt);
    comm_status_t st = make_call(r->comm, k, send, recv, count, dt, odd ? m->op_b : m->op_a,
                                 odd ? m->root_b : m->root_a);
    const char *msg = comm_last_error(r->comm);
    if (st != COMM_ERR_MISMATCH)
        h_fail(r, "%s vs %s: got %s, want COMM_ERR_MISMATCH (%s)", kind_names[m->a],
               kind_names[m->b], comm_status_string(st), msg);
    else if (strstr(msg, "disagree") == NULL || strstr(msg, m->want_a) == NULL ||
             strstr(msg, m->want_b) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\" or \"%s\"", msg, m->want_a, m->want_b);
    if (!h_poisoned(recv, elems, dt))
        h_fail(r, "%s vs %s: a mismatched call wrote recvbuf", kind_names[m->a], kind_names[m->b]);
    free(send);
    free(recv);
}

static void run_mismatch(const struct mis *m, int n, bool procs)
{
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = mismatch_body,
                        .arg = (void *)m,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

/* How a message names each call ("made reduce " is not "made reduce_scatter"). */
static const char *const made[K_ALL] = {"made broadcast ",      "made reduce ",   "made allgather ",
                                        "made reduce_scatter ", "made alltoall ", "made allreduce ",
                                        "made comm_barrier"};

/* Every pair of different collectives, small (flag path) and large (bulk handshake). */
static void mismatch_pairs(void **s)
{
    (void)s;
    size_t counts[2] = {10, 300000};
    for (int a = 0; a < K_ALL; a++) {
        for (int b = a + 1; b < K_ALL; b++) {
            for (int ci = 0; ci < 2; ci++) {
                if (ci == 1 && h_quick() && (a + b) % 3 != 0)
                    continue;
                struct mis m = {.a = a,
                                .b = b,
                                .count_a = counts[ci],
                                .count_b = counts[ci],
                                .dt_a = COMM_F32,
                                .dt_b = COMM_F32,
                                .root_a = 0,
                                .root_b = 0,
                                .want_a = made[a],
                                .want_b = made[b]};
                /* Thread ranks, and process ranks for the large calls. */
                run_mismatch(&m, ci == 0 ? 2 : 3, ci == 1 && (a + b) % 2 == 0);
            }
        }
    }
}

/* The same collective with a different count, dtype (of the same size), op or root. */
static void mismatch_fields(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++) {
        struct mis base = {.a = k,
                           .b = k,
                           .count_a = 10,
                           .count_b = 10,
                           .dt_a = COMM_F32,
                           .dt_b = COMM_F32,
                           .want_a = made[k],
                           .want_b = made[k]};
        struct mis m = base;
        m.count_b = 11;
        m.want_a = "count 10";
        m.want_b = "count 11";
        run_mismatch(&m, 3, false);
        m = base;
        m.dt_b = COMM_I32;
        m.want_a = "dtype f32";
        m.want_b = "dtype i32";
        run_mismatch(&m, 2, k % 2 == 1);
        if (reduces(k)) {
            m = base;
            m.op_b = COMM_MAX;
            m.want_a = "op sum";
            m.want_b = "op max";
            run_mismatch(&m, 2, false);
        }
        if (rooted(k)) {
            m = base;
            m.root_b = 1;
            m.want_a = "root 0";
            m.want_b = "root 1";
            run_mismatch(&m, 3, k == K_REDUCE);
        }
        /* Count 0 is a call too: matched like any other. */
        m = base;
        m.count_a = 0;
        m.count_b = 0;
        m.b = (enum kind)((k + 1) % K_SWEPT);
        m.want_b = made[m.b];
        run_mismatch(&m, 2, false);
    }
}

/* ---- bad arguments: INVALID on the bad rank, PEER on the others, nothing written ---- */

enum bad {
    BAD_ROOT_LOW,   /* root -1 */
    BAD_ROOT_HIGH,  /* root nranks */
    BAD_NULL_SEND,  /* sendbuf NULL where it is read */
    BAD_NULL_RECV,  /* recvbuf NULL where it is written */
    BAD_OVERLAP,    /* sendbuf == recvbuf where that is not the in-place form */
    BAD_OVERLAP_BY, /* buffers one element apart */
    BAD_COUNT,      /* nranks * count * esize overflows */
    BAD_DTYPE,
    BAD_COUNT_OF
};

struct inv {
    enum kind k;
    enum bad bad;
    bool all; /* every rank passes the bad arguments */
};

/* Does the bad argument apply to collective k (else it is not a mistake there)? */
static bool bad_applies(enum kind k, enum bad b)
{
    if (b == BAD_ROOT_LOW || b == BAD_ROOT_HIGH)
        return rooted(k);
    if (b == BAD_COUNT)
        return k == K_ALLGATHER || k == K_REDUCE_SCATTER || k == K_ALLTOALL;
    return true;
}

static void invalid_body(struct h_rank *r)
{
    const struct inv *v = r->arg;
    int n = r->nranks;
    size_t count = 64, elems = (size_t)n * count + 8;
    float *a = malloc(elems * 4), *b = malloc(elems * 4);
    h_fill(a, elems, COMM_F32, 9, r->rank);
    h_poison(b, elems, COMM_F32);
    bool bad = v->all || r->rank == 1;
    /* The bad rank is also the root, so that its sendbuf and recvbuf are both used. */
    int root = 1;
    const void *send = a;
    void *recv = b;
    comm_dtype_t dt = COMM_F32;
    size_t cnt = count;
    if (bad) {
        switch (v->bad) {
        case BAD_ROOT_LOW:
            root = -1;
            break;
        case BAD_ROOT_HIGH:
            root = n;
            break;
        case BAD_NULL_SEND:
            send = NULL;
            break;
        case BAD_NULL_RECV:
            recv = NULL;
            break;
        case BAD_OVERLAP:
            /* The in-place forms at rank 1: allgather send == recv + count, reduce_scatter
             * recv == send + count; sendbuf == recvbuf is none of them there. */
            send = b;
            if (v->k == K_BROADCAST || v->k == K_REDUCE)
                send = b + 1;
            break;
        case BAD_OVERLAP_BY:
            send = b + 1;
            break;
        case BAD_COUNT:
            cnt = SIZE_MAX / 8;
            break;
        case BAD_DTYPE:
            dt = (comm_dtype_t)42;
            break;
        case BAD_COUNT_OF:
            break;
        }
    }
    comm_status_t st = make_call(r->comm, v->k, send, recv, cnt, dt, COMM_SUM, root);
    comm_status_t want = bad ? COMM_ERR_INVALID : COMM_ERR_PEER;
    const char *msg = comm_last_error(r->comm);
    char who[16];
    snprintf(who, sizeof(who), "rank %d", bad ? r->rank : 1);
    if (st != want)
        h_fail(r, "%s bad %d: got %s, want %s (%s)", kind_names[v->k], (int)v->bad,
               comm_status_string(st), comm_status_string(want), msg);
    else if (strstr(msg, who) == NULL)
        h_fail(r, "message \"%s\" lacks \"%s\"", msg, who);
    /* No rank wrote any recvbuf: the poison is whole (a's tail past b's overlap too). */
    if (!h_poisoned(b, elems, COMM_F32))
        h_fail(r, "%s bad %d: recvbuf written", kind_names[v->k], (int)v->bad);
    free(a);
    free(b);
}

static void run_invalid(enum kind k, enum bad bad, bool all, int n, bool procs)
{
    struct inv v = {.k = k, .bad = bad, .all = all};
    struct h_job job = {.nranks = n,
                        .procs = procs,
                        .body = invalid_body,
                        .arg = &v,
                        .kill_rank = -1,
                        .timeout_ms = 20000};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < n; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

static void invalid_one_rank(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++)
        for (int b = 0; b < BAD_COUNT_OF; b++)
            if (bad_applies(k, b))
                run_invalid(k, b, false, 3, (k + b) % 4 == 0);
}

static void invalid_every_rank(void **s)
{
    (void)s;
    for (int k = 0; k < K_SWEPT; k++) {
        /* reduce's recvbuf may be NULL off the root: its sendbuf is needed everywhere. */
        run_invalid(k, k == K_REDUCE ? BAD_NULL_SEND : BAD_NULL_RECV, true, 2, false);
        /* Overlap is a mistake only where both buffers are used: off the root of a
         * broadcast or reduce it is not, so those get a bad dtype everywhere. */
        run_invalid(k, rooted(k) ? BAD_DTYPE : BAD_OVERLAP_BY, true, 3, k == K_ALLTOALL);
        if (rooted(k))
            run_invalid(k, BAD_ROOT_HIGH, true, 2, false);
    }
}

/* What is not a mistake: sendbuf NULL off the root of a broadcast, recvbuf NULL off the
 * root of a reduce, the in-place forms, and calls after one another keep working. */
static void valid_edges_body(struct h_rank *r)
{
    int n = r->nranks, me = r->rank;
    size_t count = 100;
    float *buf = malloc((size_t)n * count * 4), *in = malloc((size_t)n * count * 4);
    for (int root = 0; root < n; root++) {
        h_fill(buf, count, COMM_F32, 1, root);
        comm_status_t st =
            comm_broadcast(r->comm, me == root ? buf : NULL, buf, count, COMM_F32, root, NULL);
        if (st != COMM_OK || !h_holds(buf, count, COMM_F32, COMM_SUM, 1, root))
            h_fail(r, "in-place broadcast from root %d: %s", root, comm_last_error(r->comm));
        h_fill(in, count, COMM_F32, 2, me);
        st =
            comm_reduce(r->comm, in, me == root ? in : NULL, count, COMM_F32, COMM_MAX, root, NULL);
        if (st != COMM_OK)
            h_fail(r, "in-place reduce at root %d: %s", root, comm_last_error(r->comm));
        else if (me == root)
            h_check(r, in, count, COMM_F32, COMM_MAX, 2, n, NULL, 0, false);
    }
    /* Count 0 with NULL buffers on the bulk path (flag path off) is a call like any. */
    for (int k = 0; k < K_BARRIER; k++)
        if (make_call(r->comm, k, NULL, NULL, 0, COMM_F64, COMM_MIN, n - 1) != COMM_OK)
            h_fail(r, "%s of count 0: %s", kind_names[k], comm_last_error(r->comm));
    /* A barrier between the collectives: numbered alike. */
    if (comm_barrier(r->comm) != COMM_OK)
        h_fail(r, "barrier: %s", comm_last_error(r->comm));
    free(buf);
    free(in);
}

static void valid_edges(void **s)
{
    (void)s;
    h_env_push("ARCOMM_FLAG_THRESHOLD", "off");
    for (int procs = 0; procs < 2; procs++) {
        struct h_job job = {.nranks = 3, .procs = procs, .body = valid_edges_body, .kill_rank = -1};
        struct h_rank *res = h_run(&job);
        for (int r = 0; r < 3; r++)
            if (res[r].errors)
                fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    }
    h_env_pop();
    assert_int_equal(h_shm_leftovers(), 0);
}

#if ARCOMM_TEST_HAVE_HEXAGON
/* A backend without the collectives: UNSUPPORTED on every rank alike, before anything
 * is exchanged; the communicator stays usable (an allreduce and a barrier after). */
static void unsupported_body(struct h_rank *r)
{
    comm_config_t cfg;
    comm_config_init(&cfg);
    cfg.nranks = r->nranks;
    cfg.rank = r->rank;
    cfg.id = r->id;
    cfg.device = COMM_DEVICE_HEXAGON;
    cfg.timeout_ms = 20000;
    comm_t *c;
    if (comm_init(&c, &cfg) != COMM_OK) {
        h_fail(r, "hexagon comm_init: %s", comm_last_error(NULL));
        return;
    }
    size_t count = 256;
    float *a = NULL, *b = NULL;
    if (comm_mem_alloc(c, (size_t)r->nranks * count * 4, (void **)&a) != COMM_OK ||
        comm_mem_alloc(c, (size_t)r->nranks * count * 4, (void **)&b) != COMM_OK) {
        h_fail(r, "hexagon comm_mem_alloc: %s", comm_last_error(c));
        comm_destroy(c);
        return;
    }
    h_fill(a, count, COMM_F32, 3, r->rank);
    h_poison(b, (size_t)r->nranks * count, COMM_F32);
    for (int k = 0; k < K_SWEPT; k++) {
        comm_status_t st = make_call(c, k, a, b, count, COMM_F32, COMM_SUM, 0);
        const char *msg = comm_last_error(c);
        char who[16];
        snprintf(who, sizeof(who), "rank %d", r->rank);
        if (st != COMM_ERR_UNSUPPORTED || strstr(msg, kind_names[k]) == NULL ||
            strstr(msg, who) == NULL || strstr(msg, "Hexagon") == NULL)
            h_fail(r, "%s on hexagon: %s (%s)", kind_names[k], comm_status_string(st), msg);
    }
    if (!h_poisoned(b, (size_t)r->nranks * count, COMM_F32))
        h_fail(r, "an unsupported call wrote recvbuf");
    if (comm_allreduce(c, a, b, count, COMM_F32, COMM_SUM, NULL) != COMM_OK)
        h_fail(r, "allreduce after the unsupported calls: %s", comm_last_error(c));
    else
        h_check(r, b, count, COMM_F32, COMM_SUM, 3, r->nranks, NULL, 0, false);
    if (comm_barrier(c) != COMM_OK)
        h_fail(r, "barrier after the unsupported calls: %s", comm_last_error(c));
    comm_mem_free(c, a);
    comm_mem_free(c, b);
    comm_destroy(c);
}

static void unsupported_backend(void **s)
{
    (void)s;
    h_env_push("ARCOMM_LOG_LEVEL", "none");
    struct h_job job = {.nranks = 2, .no_init = true, .body = unsupported_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    h_env_pop();
    for (int r = 0; r < 2; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_1),
        cmocka_unit_test(threads_2),
        cmocka_unit_test(threads_3_direct),
        cmocka_unit_test(threads_4_flag),
        cmocka_unit_test(threads_8),
        cmocka_unit_test(procs_2),
        cmocka_unit_test(procs_3_staged),
        cmocka_unit_test(procs_4),
        cmocka_unit_test(procs_mem_2_direct),
        cmocka_unit_test(procs_mem_3),
        cmocka_unit_test(threads_mem_2),
        cmocka_unit_test(procs_small_slots_3),
        cmocka_unit_test(procs_2_cma),
        cmocka_unit_test(procs_3_cma),
        cmocka_unit_test(procs_4_cma),
        cmocka_unit_test(procs_3_cma_vs_staged),
        cmocka_unit_test(procs_2_cma_disagree),
        cmocka_unit_test(mismatch_pairs),
        cmocka_unit_test(mismatch_fields),
        cmocka_unit_test(invalid_one_rank),
        cmocka_unit_test(invalid_every_rank),
        cmocka_unit_test(valid_edges),
#if ARCOMM_TEST_HAVE_HEXAGON
        cmocka_unit_test(unsupported_backend),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
