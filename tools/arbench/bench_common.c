/* SPDX-License-Identifier: MIT */
/*
 * The measurement shared by arbench and arbench-mpi: the statistics, the host device,
 * the memcpy ceiling, the float64 check and the per-call timing (the names, options and
 * sizes: bench_opts.c; the test data: bench_data.c).  See bench_common.h.
 */
#include "bench_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Auto iteration count: aim at this much time per size, within these bounds. */
#define BENCH_TARGET_S  0.2
#define BENCH_MIN_ITERS 20
#define BENCH_MAX_ITERS 10000
#define BENCH_PROBE_S   0.01

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_p90(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    size_t k = (size_t)ceil(0.9 * (double)n); /* nearest rank */
    return v[k > 0 ? k - 1 : 0];
}

double bench_bus_factor(enum bench_coll_kind coll, int nranks)
{
    double n = (double)nranks;
    /* nccl-tests' factors; (n-1)/n makes n = 1 report 0 (nothing crosses a link). */
    switch (coll) {
    case BENCH_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case BENCH_REDUCE_SCATTER:
    case BENCH_ALLGATHER:
    case BENCH_ALLTOALL:
        return (n - 1) / n;
    default:
        return 1.0;
    }
}

double bench_busbw(double algbw, enum bench_coll_kind coll, int nranks)
{
    return algbw * bench_bus_factor(coll, nranks);
}

double bench_min_traffic(enum bench_coll_kind coll, int nranks, bool inplace, size_t bytes)
{
    double n = (double)nranks, s = (double)bytes;
    switch (coll) {
    case BENCH_ALLREDUCE:
    case BENCH_ALLTOALL:
        return 2.0 * n * s;
    case BENCH_BROADCAST:
    case BENCH_ALLGATHER:
        return s + (inplace ? n - 1 : n) * s;
    case BENCH_REDUCE:
    case BENCH_REDUCE_SCATTER:
        return (n + 1) * s;
    default:
        return 0.0;
    }
}

/* ---- host device ---- */

static int host_alloc(void *ctx, size_t bytes, void **ptr)
{
    (void)ctx;
    /* 64-byte aligned like comm_mem_alloc, so that alignment never skews a comparison. */
    if (posix_memalign(ptr, 64, bytes ? bytes : 64)) {
        fprintf(stderr, "arbench: cannot allocate %zu bytes\n", bytes);
        return -1;
    }
    return 0;
}

static void host_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static int host_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (dst != src)
        memcpy(dst, src, bytes);
    return 0;
}

static int host_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

const struct bench_device bench_device_host = {
    .name = "host",
    .kind = COMM_DEVICE_HOST,
    .host_visible = true,
    .alloc = host_alloc,
    .free = host_free,
    .to_device = host_copy,
    .to_host = host_copy,
    .sync = host_sync,
    .ctx = NULL,
};

/* ---- the memcpy ceiling ---- */

/* Through a volatile pointer: the compiler may not drop copies nobody reads. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static int barrier(const struct bench_rank *r)
{
    double x = 0.0;
    return r->sync->reduce(r->sync->ctx, &x, 1, BENCH_MAX_F64);
}

int bench_ceiling(const struct bench_rank *r, size_t bytes, double *gbs)
{
    enum { BATCHES = 5 };
    void *src = NULL, *dst = NULL;
    double bw[BATCHES];
    int rc = -1, k;

    if (bytes < 64)
        bytes = 64;
    if (host_alloc(NULL, bytes, &src) || host_alloc(NULL, bytes, &dst))
        goto out;
    memset(src, 0x5a, bytes);
    memset(dst, 0, bytes);
    copy_fn(dst, src, bytes);
    for (k = 1;; k *= 2) {
        if (barrier(r))
            goto out;
        double t0 = bench_now();
        for (int i = 0; i < k; i++)
            copy_fn(dst, src, bytes);
        double t = bench_now() - t0;
        if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
            goto out;
        if (t >= 0.02 || k >= (1 << 20))
            break;
    }
    for (int b = 0; b < BATCHES; b++) {
        if (barrier(r))
            goto out;
        double t0 = bench_now();
        for (int i = 0; i < k; i++)
            copy_fn(dst, src, bytes);
        double t = bench_now() - t0;
        if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
            goto out;
        bw[b] = t > 0 ? (double)r->nranks * 2.0 * (double)bytes * k / t * 1e-9 : 0.0;
    }
    *gbs = bench_median(bw, BATCHES);
    rc = 0;
out:
    free(dst);
    free(src);
    return rc;
}

/* ---- one size ---- */

/*
 * The buffers of one call on this rank.  Out of place: send and recv buffers of their
 * own; in place: one buffer of the row's size, with send and recv pointing into it as
 * each collective's in-place form says.  Pointers a collective does not use on this rank
 * are NULL (struct bench_coll).
 */
struct layout {
    size_t count;       /* the API's count: elements per rank (sendcount, recvcount) */
    size_t send_bytes;  /* out of place: the send buffer */
    size_t recv_bytes;  /* out of place: the receive buffer */
    size_t block_bytes; /* allgather, reduce_scatter, alltoall: one block */
};

static struct layout layout_of(const struct bench_rank *r, size_t bytes)
{
    size_t es = bench_dtype_size(r->opts->dtype), n = (size_t)r->nranks;
    struct layout l = {.count = bytes / es, .send_bytes = bytes, .recv_bytes = bytes};

    switch (r->opts->coll) {
    case BENCH_ALLGATHER:
        l.count = bytes / es / n;
        l.block_bytes = l.send_bytes = l.count * es;
        break;
    case BENCH_REDUCE_SCATTER:
        l.count = bytes / es / n;
        l.block_bytes = l.recv_bytes = l.count * es;
        break;
    case BENCH_ALLTOALL:
        l.count = bytes / es / n;
        l.block_bytes = l.count * es;
        break;
    default:
        break;
    }
    return l;
}

/* The send and recv pointers of this rank, from the buffers allocated for it. */
static void pointers(const struct bench_rank *r, const struct layout *l, void *send, void *recv,
                     void **psend, void **precv)
{
    char *buf = send; /* in place: the one buffer */
    bool root = r->rank == BENCH_ROOT;

    *psend = send;
    *precv = r->opts->inplace ? send : recv;
    switch (r->opts->coll) {
    case BENCH_BROADCAST:
        if (!root)
            *psend = NULL;
        break;
    case BENCH_REDUCE:
        if (r->opts->inplace && !root)
            *precv = NULL;
        break;
    case BENCH_ALLGATHER:
        if (r->opts->inplace)
            *psend = buf + (size_t)r->rank * l->block_bytes;
        break;
    case BENCH_REDUCE_SCATTER:
        if (r->opts->inplace)
            *precv = buf + (size_t)r->rank * l->block_bytes;
        break;
    default:
        break;
    }
}

static int same_by_hash(const struct bench_sync *s, const void *buf, size_t bytes, bool *same)
{
    int64_t hi = (int64_t)bench_fnv1a(buf, bytes), lo = hi;
    if (s->reduce(s->ctx, &hi, 1, BENCH_MAX_I64) || s->reduce(s->ctx, &lo, 1, BENCH_MIN_I64))
        return -1;
    *same = hi == lo;
    return 0;
}

static int enqueue(const struct bench_rank *r, const void *send, void *recv, size_t count)
{
    const struct bench_opts *o = r->opts;
    const struct bench_coll *c = r->coll;
    int rc = -1;

    switch (o->coll) {
    case BENCH_ALLREDUCE:
        rc = c->allreduce(c->ctx, send, recv, count, o->dtype, o->op);
        break;
    case BENCH_BROADCAST:
        rc = c->broadcast(c->ctx, send, recv, count, o->dtype, BENCH_ROOT);
        break;
    case BENCH_REDUCE:
        rc = c->reduce(c->ctx, send, recv, count, o->dtype, o->op, BENCH_ROOT);
        break;
    case BENCH_ALLGATHER:
        rc = c->allgather(c->ctx, send, recv, count, o->dtype);
        break;
    case BENCH_REDUCE_SCATTER:
        rc = c->reduce_scatter(c->ctx, send, recv, count, o->dtype, o->op);
        break;
    case BENCH_ALLTOALL:
        rc = c->alltoall(c->ctx, send, recv, count, o->dtype);
        break;
    default:
        break;
    }
    return rc ? -1 : 0;
}

/* One timed call: enqueued and waited for, or (--graph) a replay of the captured one. */
static int call(const struct bench_rank *r, const void *send, void *recv, size_t count)
{
    if (r->opts->graph)
        return r->dev->graph_replay(r->dev->ctx);
    if (enqueue(r, send, recv, count))
        return -1;
    return r->dev->sync(r->dev->ctx);
}

/*
 * reduce and reduce_scatter are compared bit for bit with an allreduce of the same
 * inputs (same_as_allreduce); on CUDA an f32 sum allreduce from ARCOMM_BF16_THRESHOLD
 * rounds every input to bf16 on the wire while reduce and reduce_scatter keep f32.  Their
 * check inputs are then values bf16 represents exactly: the rounding changes nothing and
 * the comparison holds at every size, whatever the threshold.
 */
static void bf16_exact_inputs(const struct bench_rank *r, void *in, size_t count)
{
    const struct bench_opts *o = r->opts;

    if (r->wire == BENCH_WIRE_BF16 && r->fixed_order && o->dtype == COMM_F32 && o->op == COMM_SUM &&
        (o->coll == BENCH_REDUCE || o->coll == BENCH_REDUCE_SCATTER))
        bench_round_bf16(in, count);
}

/*
 * The inputs of the --check call in host memory: hsend is the send buffer out of place,
 * the one buffer in place.  Outputs that are not also inputs are poisoned first.
 */
static void check_inputs(const struct bench_rank *r, const struct layout *l, uint64_t seed,
                         void *hsend, void *hrecv, size_t bytes)
{
    const struct bench_opts *o = r->opts;
    size_t es = bench_dtype_size(o->dtype);
    bool root = r->rank == BENCH_ROOT;

    if (o->inplace) {
        char *buf = hsend;
        switch (o->coll) {
        case BENCH_BROADCAST:
            if (root)
                bench_fill(buf, l->count, o->dtype, seed, BENCH_ROOT, 0);
            else
                bench_poison(buf, bytes, o->dtype);
            break;
        case BENCH_ALLGATHER:
            bench_poison(buf, bytes, o->dtype);
            bench_fill(buf + (size_t)r->rank * l->block_bytes, l->count, o->dtype, seed, r->rank,
                       0);
            break;
        default: /* allreduce, reduce, reduce_scatter: the whole buffer is input */
            bench_fill(buf, bytes / es, o->dtype, seed, r->rank, 0);
            bf16_exact_inputs(r, buf, bytes / es);
            break;
        }
        return;
    }
    switch (o->coll) {
    case BENCH_BROADCAST:
        bench_fill(hsend, l->count, o->dtype, seed, BENCH_ROOT, 0); /* read on root only */
        break;
    case BENCH_ALLGATHER:
        bench_fill(hsend, l->count, o->dtype, seed, r->rank, 0);
        break;
    default:
        bench_fill(hsend, l->send_bytes / es, o->dtype, seed, r->rank, 0);
        bf16_exact_inputs(r, hsend, l->send_bytes / es);
        break;
    }
    bench_poison(hrecv, l->recv_bytes, o->dtype);
}

/* Elements of this rank's output (out, in host memory) that are wrong. */
static int64_t check_outputs(const struct bench_rank *r, const struct layout *l, uint64_t seed,
                             const char *out)
{
    const struct bench_opts *o = r->opts;
    size_t n = (size_t)r->nranks;
    bool root = r->rank == BENCH_ROOT;
    int64_t wrong = 0;

    switch (o->coll) {
    case BENCH_ALLREDUCE:
        return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks, 0,
                                  r->stepwise_round, r->wire);
    case BENCH_REDUCE:
        if (root)
            return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks, 0,
                                      r->stepwise_round, r->wire);
        /* Off the root the receive buffer is not the collective's: it stays poisoned. */
        return o->inplace ? 0 : bench_count_written(out, l->count, o->dtype);
    case BENCH_REDUCE_SCATTER:
        return bench_check_reduce(out, l->count, o->dtype, o->op, seed, r->nranks,
                                  (size_t)r->rank * l->count, r->stepwise_round, r->wire);
    case BENCH_BROADCAST:
        return bench_check_exact(out, l->count, o->dtype, seed, BENCH_ROOT, 0);
    case BENCH_ALLGATHER:
        for (size_t p = 0; p < n; p++)
            wrong +=
                bench_check_exact(out + p * l->block_bytes, l->count, o->dtype, seed, (int)p, 0);
        return wrong;
    case BENCH_ALLTOALL:
        for (size_t p = 0; p < n; p++)
            wrong += bench_check_exact(out + p * l->block_bytes, l->count, o->dtype, seed, (int)p,
                                       (size_t)r->rank * l->count);
        return wrong;
    default:
        break;
    }
    return 0;
}

/*
 * reduce and reduce_scatter against the allreduce of the same inputs, bit for bit (a
 * library with one reduction order, r->fixed_order): 1 when this rank's result differs.
 */
static int same_as_allreduce(const struct bench_rank *r, const struct layout *l, size_t bytes,
                             uint64_t seed, const char *out, int64_t *differs)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    size_t es = bench_dtype_size(o->dtype);
    void *send = NULL, *recv = NULL;
    char *hin = NULL, *hout = NULL;
    int rc = -1;

    *differs = 0;
    if (d->alloc(d->ctx, bytes, &send) || d->alloc(d->ctx, bytes, &recv) ||
        host_alloc(NULL, bytes, (void **)&hin) || host_alloc(NULL, bytes, (void **)&hout))
        goto out;
    bench_fill(hin, bytes / es, o->dtype, seed, r->rank, 0);
    bf16_exact_inputs(r, hin, bytes / es);
    if (d->to_device(d->ctx, send, hin, bytes))
        goto out;
    if (r->coll->allreduce(r->coll->ctx, send, recv, bytes / es, o->dtype, o->op) ||
        d->sync(d->ctx) || d->to_host(d->ctx, hout, recv, bytes))
        goto out;
    if (o->coll == BENCH_REDUCE_SCATTER)
        *differs = memcmp(out, hout + (size_t)r->rank * l->block_bytes, l->block_bytes) != 0;
    else if (r->rank == BENCH_ROOT)
        *differs = memcmp(out, hout, bytes) != 0;
    if (*differs)
        fprintf(stderr,
                "arbench: size %zu: rank %d: the %s result is not bit for bit the "
                "allreduce's of the same inputs\n",
                bytes, r->rank, bench_coll_name(o->coll));
    rc = 0;
out:
    free(hout);
    free(hin);
    if (recv)
        d->free(d->ctx, recv);
    if (send)
        d->free(d->ctx, send);
    return rc;
}

/* The extra, untimed call of --check: fresh inputs, poisoned output, every element. */
static int check_size(const struct bench_rank *r, const struct layout *l, void *send, void *recv,
                      void *hsend, void *hrecv, size_t bytes, int64_t *wrong_out)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    uint64_t seed = bench_seed(bytes, o->dtype, o->op);
    bool same = true;
    void *psend, *precv;
    int64_t differs = 0;

    check_inputs(r, l, seed, hsend, hrecv, bytes);
    if (o->inplace) {
        if (d->to_device(d->ctx, send, hsend, bytes))
            return -1;
    } else if (d->to_device(d->ctx, send, hsend, l->send_bytes) ||
               d->to_device(d->ctx, recv, hrecv, l->recv_bytes)) {
        return -1;
    }
    pointers(r, l, send, recv, &psend, &precv);
    if (call(r, psend, precv, l->count))
        return -1;
    /* What this rank's output is, in host memory. */
    const char *out;
    size_t out_bytes;
    if (o->inplace) {
        if (d->to_host(d->ctx, hsend, send, bytes))
            return -1;
        out = hsend;
        out_bytes = bytes;
        if (o->coll == BENCH_REDUCE_SCATTER) {
            out_bytes = l->block_bytes;
            if (!r->rs_inplace_at_start)
                out += (size_t)r->rank * l->block_bytes;
        }
    } else {
        if (d->to_host(d->ctx, hrecv, recv, l->recv_bytes))
            return -1;
        out = hrecv;
        out_bytes = l->recv_bytes;
    }

    int64_t wrong = check_outputs(r, l, seed, out);
    int rc = 0;
    switch (o->coll) {
    case BENCH_ALLREDUCE:
    case BENCH_BROADCAST:
    case BENCH_ALLGATHER:
        /* Every rank holds the same result: the same bits. */
        rc = r->sync->same_bytes ? r->sync->same_bytes(r->sync->ctx, out, out_bytes, &same)
                                 : same_by_hash(r->sync, out, out_bytes, &same);
        break;
    case BENCH_REDUCE:
    case BENCH_REDUCE_SCATTER:
        if (r->fixed_order && r->coll->allreduce)
            rc = same_as_allreduce(r, l, bytes, seed, out, &differs);
        break;
    default:
        break;
    }
    if (rc || r->sync->reduce(r->sync->ctx, &wrong, 1, BENCH_SUM_I64) ||
        r->sync->reduce(r->sync->ctx, &differs, 1, BENCH_SUM_I64))
        return -1;
    if (!same) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: size %zu: the ranks' outputs are not bit-identical\n", bytes);
        wrong += 1;
    }
    *wrong_out = wrong + differs;
    return 0;
}

/*
 * --fresh: what an application does between two calls, untimed: it writes the input it
 * sends (the same values again, from a private copy) and reads the output it receives
 * (one word a line), so that both are this rank's own, modified or just read, in its
 * caches when the next call starts.  Sizes are this rank's parts as pointers() gives them.
 */
struct fresh {
    void *send;
    const void *copy; /* the input's values */
    size_t send_bytes;
    const volatile unsigned char *recv;
    size_t recv_bytes;
};

static volatile unsigned long fresh_sink; /* keeps the reads */

static void fresh_touch(const struct fresh *f)
{
    if (f->send)
        memcpy(f->send, f->copy, f->send_bytes);
    unsigned long sum = 0;
    for (size_t i = 0; f->recv && i < f->recv_bytes; i += 64)
        sum += f->recv[i];
    fresh_sink += sum;
}

int bench_run_size(const struct bench_rank *r, size_t bytes, struct bench_result *res)
{
    const struct bench_opts *o = r->opts;
    const struct bench_device *d = r->dev;
    struct layout l = layout_of(r, bytes);
    size_t es = bench_dtype_size(o->dtype);
    void *send = NULL, *recv = NULL, *hsend = NULL, *hrecv = NULL, *psend, *precv;
    double *times = NULL;
    void *fresh_copy = NULL;
    int iters = o->iters, rc = -1;

    if (!bench_coll_has(r->coll, o->coll)) {
        if (r->rank == 0)
            fprintf(stderr, "arbench: the library under test has no %s\n",
                    bench_coll_name(o->coll));
        return -1;
    }
    /* In place: one buffer of the row's size (send); out of place: two. */
    size_t send_alloc = o->inplace ? bytes : l.send_bytes;
    if (d->alloc(d->ctx, send_alloc, &send) ||
        (!o->inplace && d->alloc(d->ctx, l.recv_bytes, &recv)))
        goto out;
    if (d->host_visible) {
        hsend = send;
        hrecv = recv;
    } else if (host_alloc(NULL, send_alloc, &hsend) ||
               (!o->inplace && host_alloc(NULL, l.recv_bytes, &hrecv))) {
        goto out;
    }
    bench_fill(hsend, send_alloc / es, o->dtype, bench_seed(bytes, o->dtype, o->op), r->rank, 0);
    if (d->to_device(d->ctx, send, hsend, send_alloc))
        goto out;
    if (!o->inplace) { /* touch every page */
        bench_poison(hrecv, l.recv_bytes, o->dtype);
        if (d->to_device(d->ctx, recv, hrecv, l.recv_bytes))
            goto out;
    }
    pointers(r, &l, send, recv, &psend, &precv);
    if (o->graph) {
        /* One call recorded; every call below replays it (fresh call numbers each). */
        if (d->graph_begin == NULL) {
            if (r->rank == 0)
                fprintf(stderr, "arbench: --graph needs --device cuda\n");
            goto out;
        }
        if (d->graph_begin(d->ctx) || enqueue(r, psend, precv, l.count) || d->graph_end(d->ctx))
            goto out;
    }

    if (iters <= 0) {
        /*
         * Estimate the time per call from doubling batches until one lasts 10 ms; every
         * rank must run the same number of calls, so each batch ends with an agreement
         * on the slowest rank's time.  The first, cold batches count for nothing.  One
         * call before them all: a first call may set things up (libarcomm_pmpi makes
         * its communicator on first use, milliseconds), and a probe that timed it would
         * settle on the fewest calls, then timed cold.
         */
        if (call(r, psend, precv, l.count))
            goto out;
        double est = 0.0;
        for (int k = 1;; k *= 2) {
            double t0 = bench_now();
            for (int i = 0; i < k; i++)
                if (call(r, psend, precv, l.count))
                    goto out;
            double t = bench_now() - t0;
            if (r->sync->reduce(r->sync->ctx, &t, 1, BENCH_MAX_F64))
                goto out;
            if (t >= BENCH_PROBE_S || k >= BENCH_MAX_ITERS / 8) {
                est = t / k;
                break;
            }
        }
        double want = BENCH_TARGET_S / (est > 1e-9 ? est : 1e-9);
        iters = want < BENCH_MIN_ITERS   ? BENCH_MIN_ITERS
                : want > BENCH_MAX_ITERS ? BENCH_MAX_ITERS
                                         : (int)want;
    }
    int warmup = o->warmup >= 0 ? o->warmup : (iters / 10 > 5 ? iters / 10 : 5);
    times = malloc(sizeof(*times) * (size_t)iters);
    if (!times) {
        fprintf(stderr, "arbench: out of memory\n");
        goto out;
    }
    struct fresh fr = {0};
    if (o->fresh) {
        bool sends = psend != NULL, receives = precv != NULL;
        if (o->coll == BENCH_REDUCE && r->rank != BENCH_ROOT)
            receives = false; /* a non-root's recvbuf is not written */
        size_t sb = l.send_bytes;
        if (sends && (fresh_copy = malloc(sb)) == NULL) {
            fprintf(stderr, "arbench: out of memory\n");
            goto out;
        }
        if (sends)
            memcpy(fresh_copy, psend, sb);
        fr = (struct fresh){.send = sends ? psend : NULL,
                            .copy = fresh_copy,
                            .send_bytes = sb,
                            .recv = receives ? precv : NULL,
                            .recv_bytes = l.recv_bytes};
    }
    for (int i = 0; i < warmup; i++) {
        if (o->fresh)
            fresh_touch(&fr);
        if (call(r, psend, precv, l.count))
            goto out;
    }
    for (int i = 0; i < iters; i++) {
        if (o->fresh)
            fresh_touch(&fr);
        /* Back to back (--fresh: after the touch), no barrier: what an application sees
         * call after call. */
        double t0 = bench_now();
        if (call(r, psend, precv, l.count))
            goto out;
        times[i] = bench_now() - t0;
    }
    /* Per call, the slowest rank: a collective is done when its last rank is. */
    if (r->sync->reduce(r->sync->ctx, times, (size_t)iters, BENCH_MAX_F64))
        goto out;

    res->bytes = bytes;
    res->count = bytes / es;
    res->iters = iters;
    res->time_us = bench_median(times, (size_t)iters) * 1e6;
    res->p90_us = bench_p90(times, (size_t)iters) * 1e6;
    double sum = 0;
    for (int i = 0; i < iters; i++)
        sum += times[i];
    res->mean_us = iters > 0 ? sum / iters * 1e6 : 0.0;
    res->algbw = res->time_us > 0 ? (double)bytes / res->time_us * 1e-3 : 0.0;
    res->busbw = bench_busbw(res->algbw, o->coll, r->nranks);
    res->wrong = -1;
    if (o->check && check_size(r, &l, send, recv, hsend, hrecv, bytes, &res->wrong))
        goto out;
    rc = 0;
out:
    free(times);
    free(fresh_copy);
    if (!d->host_visible) {
        free(hsend);
        free(hrecv);
    }
    if (recv)
        d->free(d->ctx, recv);
    if (send)
        d->free(d->ctx, send);
    return rc;
}
