/* SPDX-License-Identifier: MIT */
/*
 * The collectives beyond allreduce on the host: broadcast, reduce, allgather,
 * reduce_scatter and alltoall, for every dtype and op, counts from 0 (NULL buffers) to
 * past 1 MiB per rank, in place and out of place, roots first, middle and last, outputs
 * poisoned first (with a guard element after), float64 references for reductions and
 * exact ones for data movement, reductions compared bit for bit with allreduce of the
 * same data, every rank compared bit for bit — over 1..8 thread ranks and 2..4 process
 * ranks, malloc'd and comm_mem_alloc buffers, through every path (flag, one-pass,
 * staged, CMA).  The calls that must fail are in test_collectives_errors.c, whose tests
 * main() here runs too.
 */
#include "collectives_common.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#if ARCOMM_TEST_HEAP
#include "rt_hooks.h"

#include <dlfcn.h>
/* This build runs only the shared heap's cases (its main() at the end). */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

const char *const co_kind_names[K_ALL] = {"broadcast", "reduce",    "allgather", "reduce_scatter",
                                          "alltoall",  "allreduce", "barrier"};

/* Adding a dtype or an op is one line here (h_fill, h_get and h_check must know it). */
static const comm_dtype_t dtypes[] = {COMM_F32, COMM_F16, COMM_BF16, COMM_F64, COMM_I32, COMM_I64};
static const comm_op_t ops[] = {COMM_SUM, COMM_MAX, COMM_MIN};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
#define N_OPS    (sizeof(ops) / sizeof(ops[0]))

static const size_t small_counts[] = {0, 1, 13, 4099};

bool co_reduces(enum kind k)
{
    return k == K_REDUCE || k == K_REDUCE_SCATTER || k == K_ALLREDUCE;
}

comm_status_t co_make_call(comm_t *c, enum kind k, const void *s, void *r, size_t count,
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

struct sweep {
    bool mem;        /* buffers from comm_mem_alloc */
    bool large_only; /* only the counts past 1 MiB */
    bool small_only; /* only the small counts */
    bool allreduce;  /* allreduce too (the CMA sweeps: its own path there) */
    int paths;       /* the bulk paths the calls must take (test_collectives_heap) */
};

/* struct sweep's paths: what rt_hook_bulk_calls must count after a sweep. */
enum {
    PATHS_ANY = 0,
    PATHS_DIRECT_ONLY, /* every bulk call one-pass */
    PATHS_NO_DIRECT,   /* none one-pass */
    PATHS_BOTH,        /* some one-pass, some not */
};

struct ctx {
    struct h_rank *r;
    const struct sweep *sw;
    uint64_t *hashes;
    size_t nh;
};

/* The comparison's buffers: plain malloc, a page at least where the heap cases want
 * every buffer in the heap (buf_alloc). */
static void *cmp_alloc(size_t bytes)
{
#if ARCOMM_TEST_HEAP
    return malloc(bytes < 4096 ? 4096 : bytes);
#else
    return malloc(bytes);
#endif
}

static void *buf_alloc(struct ctx *x, size_t bytes)
{
    void *p = NULL;
    if (x->sw->mem) {
        if (comm_mem_alloc(x->r->comm, bytes, &p) != COMM_OK)
            h_fail(x->r, "comm_mem_alloc(%zu): %s", bytes, comm_last_error(x->r->comm));
    } else {
#if ARCOMM_TEST_HEAP
        /* At least ARCOMM_HEAP_MIN's smallest value (a page): the heap serves every buffer
         * of the cases that set it. */
        p = malloc(bytes < 4096 ? 4096 : bytes);
#else
        p = malloc(bytes);
#endif
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

    comm_status_t st = co_make_call(r->comm, k, send, recv, count, dt, op, root);
    if (st != COMM_OK) {
        h_fail(r, "%s(count %zu dtype %d op %d root %d inplace %d off %zu) = %s: %s",
               co_kind_names[k], count, (int)dt, (int)op, root, inplace, off,
               comm_status_string(st), comm_last_error(r->comm));
        goto out;
    }
    uint64_t hash = 0;
    size_t bytes = count * es;
    const char *what = NULL;
    switch (k) {
    case K_BROADCAST:
        if (count && !h_holds(recv, count, dt, COMM_SUM, seed, root))
            what = "broadcast output differs from the root's input";
        hash = h_hash(recv, bytes);
        break;
    case K_ALLGATHER:
        for (int p = 0; p < n && count && what == NULL; p++)
            if (!h_holds((uint8_t *)recv + (size_t)p * bytes, count, dt, COMM_SUM, seed, p))
                what = "allgather block differs from its rank's input";
        hash = count ? h_hash(recv, (size_t)n * bytes) : 0;
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
            h_fail(r, "%s wrote past the end of its output (count %zu)", co_kind_names[k], count);
    }
    /* Reductions: the bits of allreduce on the same data (made afresh: in place, the
     * input is gone), whatever the root or block. */
    if (co_reduces(k) && count) {
        size_t total = k == K_REDUCE_SCATTER ? (size_t)n * count : count;
        uint8_t *in = cmp_alloc(total * es), *ar = cmp_alloc(total * es);
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
                       co_kind_names[k], count, (int)dt, (int)op, root);
            hash = h_hash(ar, total * es);
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
            for (size_t o = 0; o < (co_reduces(k) ? N_OPS : 1); o++) {
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
#if ARCOMM_TEST_HEAP
    uint64_t calls[3];
    if (rt_hook_bulk_calls(r->comm, calls) != COMM_OK) {
        h_fail(r, "rt_hook_bulk_calls failed");
        return;
    }
    uint64_t direct = calls[0], other = calls[1] + calls[2];
    bool ok = x.sw->paths == PATHS_DIRECT_ONLY ? direct > 0 && other == 0
              : x.sw->paths == PATHS_NO_DIRECT ? direct == 0 && other > 0
              : x.sw->paths == PATHS_BOTH      ? direct > 0 && other > 0
                                               : true;
    if (!ok)
        h_fail(r, "bulk calls: %llu one-pass, %llu staged, %llu CMA: not what sweep paths %d wants",
               (unsigned long long)calls[0], (unsigned long long)calls[1],
               (unsigned long long)calls[2], x.sw->paths);
#endif
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

#if ARCOMM_TEST_HEAP
/*
 * Process ranks whose processes run with libarcomm_heap.so (the shared heap): buffers
 * from plain malloc lie in memory every peer mapped, so every bulk call takes the
 * one-pass path, as comm_mem_alloc's buffers do; with ARCOMM_HEAP_MIN=4K (its smallest
 * value) every buffer lands there (buf_alloc allocates a page at least), and with the flag
 * path off every call is a bulk call.
 */
static void heap_procs_2_direct(void **s)
{
    (void)s;
    h_env_push("ARCOMM_HEAP_MIN", "4K");
    run_sweep(2, true, (struct sweep){.allreduce = true, .paths = PATHS_DIRECT_ONLY}, "off");
}
static void heap_procs_3_direct(void **s)
{
    (void)s;
    h_env_push("ARCOMM_HEAP_MIN", "4K");
    run_sweep(3, true,
              (struct sweep){.allreduce = true, .large_only = true, .paths = PATHS_DIRECT_ONLY},
              "off");
}
/* The default ARCOMM_HEAP_MIN: small buffers stay glibc's (staged or CMA), the calls past
 * 1 MiB run one-pass. */
static void heap_procs_2_min(void **s)
{
    (void)s;
    run_sweep(2, true, (struct sweep){.allreduce = true, .paths = PATHS_BOTH}, "off");
}
/* Rank 1 without a heap (ARCOMM_HEAP_BYTES=0, set before its heap is made): the
 * communicator agrees at join that no rank publishes heap offsets; every call runs
 * staged or CMA, with the same results. */
static void heap_one_without_body(struct h_rank *r)
{
    if (r->rank == 1)
        setenv("ARCOMM_HEAP_BYTES", "0", 1);
    if (!h_comm_init(r, 20000))
        return;
    sweep_body(r);
    comm_destroy(r->comm);
}
static void heap_procs_2_one_without(void **s)
{
    (void)s;
    h_env_push("ARCOMM_HEAP_MIN", "4K");
    h_env_push("ARCOMM_FLAG_THRESHOLD", "off");
    struct sweep sw = {.allreduce = true, .large_only = true, .paths = PATHS_NO_DIRECT};
    struct h_job job = {.nranks = 2,
                        .procs = true,
                        .no_init = true,
                        .body = heap_one_without_body,
                        .arg = &sw,
                        .kill_rank = -1};
    size_t len;
    free(run_job_hashes(&job, &len));
}

/*
 * The default flag threshold with the heap: process ranks leave the flag path at the
 * heap's smallest allocation (ARCOMM_HEAP_MIN, 64K), where thread ranks would, instead
 * of at 512K: a 128 KiB allreduce of malloc'd buffers is a one-pass bulk call, a 16 KiB
 * one (glibc's memory) stays on the flag path.
 */
static void heap_threshold_body(struct h_rank *r)
{
    static const size_t counts[] = {4096, 32768, 4096, 32768}; /* f32: 16K and 128K */
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        uint64_t before[3], after[3];
        if (rt_hook_bulk_calls(r->comm, before) != COMM_OK) {
            h_fail(r, "rt_hook_bulk_calls failed");
            return;
        }
        h_allreduce_checked(r, counts[i], 40 + i, "allreduce around the heap's threshold");
        (void)rt_hook_bulk_calls(r->comm, after);
        bool bulk = counts[i] * sizeof(float) >= (64u << 10);
        if (after[0] - before[0] != (bulk ? 1u : 0u) || after[1] != before[1] ||
            after[2] != before[2])
            h_fail(r,
                   "allreduce of %zu bytes: %llu one-pass, %llu staged, %llu CMA calls; want "
                   "%s",
                   counts[i] * sizeof(float), (unsigned long long)(after[0] - before[0]),
                   (unsigned long long)(after[1] - before[1]),
                   (unsigned long long)(after[2] - before[2]),
                   bulk ? "one one-pass call" : "none (the flag path)");
    }
}
static void heap_procs_2_threshold(void **s)
{
    (void)s;
    struct h_job job = {.nranks = 2, .procs = true, .body = heap_threshold_body, .kill_rank = -1};
    struct h_rank *res = h_run(&job);
    for (int r = 0; r < 2; r++)
        if (res[r].errors)
            fail_msg("%ld errors; first: %s", res[r].errors, res[r].first_error);
    assert_int_equal(h_shm_leftovers(), 0);
}

int main(void)
{
    /* The point is the preload: without it the cases would pass on other paths. */
    if (dlsym(RTLD_DEFAULT, "arcomm_heap_region") == NULL) {
        fprintf(stderr, "test_collectives_heap: libarcomm_heap.so is not preloaded\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heap_procs_2_direct),    cmocka_unit_test(heap_procs_3_direct),
        cmocka_unit_test(heap_procs_2_min),       cmocka_unit_test(heap_procs_2_one_without),
        cmocka_unit_test(heap_procs_2_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
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
#endif
