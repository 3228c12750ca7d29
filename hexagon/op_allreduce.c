/* SPDX-License-Identifier: MIT */
/*
 * op_allreduce and op_allreduce_add, the DSP side of a Hexagon allreduce:
 *
 *   1. entry fence: publish this session's entry sequence, wait for every peer's
 *      (a peer's error status ends the wait at once; a timeout writes an error to the
 *      own fence so that the peers learn it too);
 *   2. the workers reduce this rank's region tile by tile: every rank's input tile
 *      (and residual) comes into VTCM through double-buffered DMA, HVX sums them, and
 *      the result goes out by DMA to every rank's output (n_dsts == n_ranks).  With an
 *      add, rank j's output gets rank j's addend (the API's contract), so the sum is
 *      formed once per destination, in the same order, with that addend last;
 *   3. exit fence: no session returns, and no output is reused, before every rank
 *      has written its region everywhere.
 *
 * Per worker, one DMA queue runs the pipeline below; tile i uses the VTCM halves
 * i % 2, so tile i + 1 streams in while tile i is summed.  Queue order:
 *
 *   [out(i-2)] [in(i)] [out(i-1)] [in(i+1)]       pop out(i-2) then in(i), sum tile i
 *
 * with placeholders standing in for out(-2) and out(-1), which keeps the pops regular.
 *
 * With a wire codec (hex_wire.h) the session first encodes its own input into its
 * staging buffer, then the entry fence, then the workers decode and sum the peers'
 * encodings of this rank's region with scalar code (op_wire.c) instead of the DMA
 * pipeline above.
 */
#include "hex_op.h"
#include "hex_vsum.h"
#include "hex_wire.h"

#include <stdatomic.h>

struct op_ctx {
    struct hex_session *s;
    const struct hex_op_args *a;
    uint32_t n_tiles;
    uint32_t tile_rows;  /* rows per tile (row mode), 0 in column mode */
    uint32_t col_tiles;  /* tiles per row (column mode) */
    uint32_t width;      /* columns of this rank's region */
    uint32_t pitch;      /* bytes per tile row in VTCM, a multiple of 128 */
    uint32_t half_bytes; /* one block half: block_elems * esize */
    uint8_t *bias;       /* VTCM copies of every rank's bias row, or NULL */
    uint32_t bias_row;   /* bytes between them */
    uint32_t n_out;      /* output buffers per worker: n_ranks with an add, else 1 */
    uint8_t *areas;      /* the workers' VTCM areas */
    uint32_t area_bytes;
    _Atomic int32_t status; /* the first worker failure */
};

struct tile {
    uint32_t r0, nr, c0, w;
};

static struct tile tile_at(const struct op_ctx *x, uint32_t i)
{
    const struct hex_op_params *p = &x->a->p;
    struct tile t;
    if (x->tile_rows != 0) {
        t.r0 = p->row_lo + i * x->tile_rows;
        t.nr = p->row_hi - t.r0 < x->tile_rows ? p->row_hi - t.r0 : x->tile_rows;
        t.c0 = p->col_lo;
        t.w = x->width;
    } else {
        t.r0 = p->row_lo + i / x->col_tiles;
        t.nr = 1;
        t.c0 = p->col_lo + (i % x->col_tiles) * p->block_elems;
        t.w = p->col_hi - t.c0 < p->block_elems ? p->col_hi - t.c0 : p->block_elems;
    }
    return t;
}

/* Buffer b (inputs 0..n-1, then outputs, then residuals), half h, of worker t. */
static uint8_t *vbuf(const struct op_ctx *x, uint32_t t, uint32_t b, uint32_t h)
{
    return x->areas + t * x->area_bytes + (b * 2 + h) * x->half_bytes;
}

static void fail(struct op_ctx *x, int32_t status)
{
    int32_t ok = HEX_OK;
    atomic_compare_exchange_strong(&x->status, &ok, status);
}

static int push_in(struct op_ctx *x, struct hex_dma_queue *q, uint32_t t, uint32_t i, uint32_t h)
{
    const struct hex_op_params *p = &x->a->p;
    struct tile tl = tile_at(x, i);
    uint32_t bytes = tl.w * p->esize;
    int ok = 1;
    for (uint32_t k = 0; k < p->n_ranks; k++)
        ok &= hex_dma_push(q, vbuf(x, t, k, h),
                           x->a->src[k] + tl.r0 * p->src_stride + tl.c0 * p->esize, x->pitch,
                           p->src_stride, bytes, tl.nr);
    for (uint32_t j = 0; p->add_mode == HEX_ADD_RESIDUAL && j < p->n_ranks; j++)
        ok &= hex_dma_push(q, vbuf(x, t, p->n_ranks + x->n_out + j, h),
                           x->a->addend[j] + tl.r0 * p->add_stride + tl.c0 * p->esize, x->pitch,
                           p->add_stride, bytes, tl.nr);
    return ok;
}

static int push_placeholders(struct hex_dma_queue *q, uint32_t n)
{
    int ok = 1;
    for (uint32_t i = 0; i < n; i++)
        ok &= hex_dma_push_placeholder(q);
    return ok;
}

static void pop_n(struct hex_dma_queue *q, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        (void)hex_dma_pop(q);
}

static void sum_tile(struct op_ctx *x, uint32_t t, uint32_t i, uint32_t h)
{
    const struct hex_op_params *p = &x->a->p;
    struct tile tl = tile_at(x, i);
    uint32_t n_vec = x->pitch / HEX_VEC_BYTES;
    const uint8_t *in[HEX_MAX_RANKS];
    for (uint32_t r = 0; r < tl.nr; r++) {
        uint32_t off = r * x->pitch;
        for (uint32_t k = 0; k < p->n_ranks; k++)
            in[k] = vbuf(x, t, k, h) + off;
        for (uint32_t j = 0; j < x->n_out; j++) {
            const uint8_t *add = 0;
            if (p->add_mode == HEX_ADD_RESIDUAL)
                add = vbuf(x, t, p->n_ranks + x->n_out + j, h) + off;
            else if (p->add_mode == HEX_ADD_BCAST)
                add = x->bias + j * x->bias_row + tl.c0 * p->esize;
            uint8_t *out = vbuf(x, t, p->n_ranks + j, h) + off;
            if (p->dtype == HEX_F32)
                hex_vsum_f32((float *)out, (const float *const *)in, p->n_ranks, (const float *)add,
                             n_vec);
            else
                hex_vsum_f16((uint16_t *)out, (const uint16_t *const *)in, p->n_ranks,
                             (const uint16_t *)add, n_vec);
        }
    }
}

static int push_out(struct op_ctx *x, struct hex_dma_queue *q, uint32_t t, uint32_t i, uint32_t h)
{
    const struct hex_op_params *p = &x->a->p;
    struct tile tl = tile_at(x, i);
    int ok = 1;
    for (uint32_t j = 0; j < p->n_ranks; j++)
        ok &= hex_dma_push(q, x->a->dst[j] + tl.r0 * p->dst_stride + tl.c0 * p->esize,
                           vbuf(x, t, p->n_ranks + (x->n_out > 1 ? j : 0), h), p->dst_stride,
                           x->pitch, tl.w * p->esize, tl.nr);
    return ok;
}

static void reduce_worker(void *data, uint32_t n, uint32_t t)
{
    struct op_ctx *x = data;
    const struct hex_op_params *p = &x->a->p;
    struct hex_dma_queue *q = &x->s->dma[t];
    uint32_t lo = x->n_tiles * t / n, hi = x->n_tiles * (t + 1) / n;
    if (lo == hi)
        return;
    uint32_t k_in = p->n_ranks + (p->add_mode == HEX_ADD_RESIDUAL ? p->n_ranks : 0);
    uint32_t nd = p->n_ranks;
    int ok = push_placeholders(q, nd) && push_in(x, q, t, lo, 0) && push_placeholders(q, nd);
    for (uint32_t i = lo; ok && i < hi; i++) {
        uint32_t h = (i - lo) & 1u;
        ok = i + 1 < hi ? push_in(x, q, t, i + 1, h ^ 1u) : push_placeholders(q, k_in);
        if (!ok)
            break;
        pop_n(q, nd);   /* out(i - 2): its output half is free again */
        pop_n(q, k_in); /* in(i): tile i is in VTCM */
        sum_tile(x, t, i, h);
        ok = push_out(x, q, t, i, h);
    }
    hex_dma_flush(q);
    if (!ok)
        fail(x, HEX_ERR_NOMEM); /* a DMA queue too short for n_ranks: a build bug */
}

/*
 * Publishes seq in the own fence and waits until every peer's reached it.  Fails at
 * once on a peer's error status, and on timeout writes the error to the own fence.
 */
static int32_t fence_wait(struct hex_session *s, const struct hex_op_args *a, uint32_t seq,
                          struct hex_op_result *r)
{
    const struct hex_op_params *p = &a->p;
    struct hex_fence_slot *own = a->fence[p->rank];
    int32_t mine = atomic_load_explicit(&own->status, memory_order_acquire);
    if (mine != HEX_OK) {
        /* This session failed before (sticky): its peers already know. */
        r->peer = (int32_t)p->rank;
        r->peer_status = mine;
        return mine;
    }
    hex_fence_write(own, seq, HEX_OK);
    uint64_t start = hex_now_us();
    uint32_t iter = 0;
    for (uint32_t q = 0; q < p->n_ranks; q++) {
        if (q == p->rank)
            continue;
        struct hex_fence_slot *peer = a->fence[q];
        for (;;) {
            /* A peer that reached this fence has done its part, even if it fails later
             * (or leaves: comm_destroy marks its fence); one that has not and carries
             * an error never will. */
            uint32_t pseq = atomic_load_explicit(&peer->seq, memory_order_acquire);
            if (hex_seq_reached(pseq, seq))
                break;
            int32_t pst = atomic_load_explicit(&peer->status, memory_order_acquire);
            /* The peer may have reached the fence, completed and left (comm_destroy)
             * between the two loads: its seq was written before that status, so the
             * acquire above makes a second look at seq see it. */
            if (pst != HEX_OK &&
                hex_seq_reached(atomic_load_explicit(&peer->seq, memory_order_acquire), seq))
                break;
            if (pst != HEX_OK) {
                r->peer = (int32_t)q;
                r->peer_status = pst;
                hex_fence_fail(own, HEX_ERR_PEER);
                return HEX_ERR_PEER;
            }
            if ((++iter & 63u) == 0) {
                int32_t st = s->poll != 0 ? s->poll(s->poll_ctx) : HEX_OK;
                if (st != HEX_OK) {
                    hex_fence_fail(own, st);
                    r->peer = -1;
                    return st;
                }
                if (a->timeout_ms != 0 && hex_now_us() - start >= (uint64_t)a->timeout_ms * 1000u) {
                    hex_fence_fail(own, HEX_ERR_TIMEOUT);
                    r->peer = (int32_t)q;
                    r->peer_status = HEX_ERR_TIMEOUT;
                    return HEX_ERR_TIMEOUT;
                }
            }
            hex_relax(iter);
        }
    }
    return HEX_OK;
}

static int params_valid(const struct hex_session *s, const struct hex_op_args *a)
{
    const struct hex_op_params *p = &a->p;
    if (p->n_ranks == 0 || p->n_ranks > HEX_MAX_RANKS || p->rank >= p->n_ranks)
        return 0;
    if (!((p->dtype == HEX_F32 && p->esize == 4) || (p->dtype == HEX_F16 && p->esize == 2)))
        return 0;
    if (p->row_lo > p->row_hi || p->row_hi > p->ne1 || p->col_lo > p->col_hi || p->col_hi > p->ne0)
        return 0;
    if (p->n_threads == 0 || p->n_threads > s->n_threads || p->block_elems < HEX_BLOCK_MIN ||
        p->block_elems > HEX_BLOCK_MAX || p->block_elems % HEX_BLOCK_MIN != 0)
        return 0;
    if (hex_vtcm_need(p->n_ranks, p->ne0, p->esize, p->block_elems, p->add_mode, p->n_threads) >
        s->vtcm_bytes)
        return 0;
    if (p->add_mode > HEX_ADD_BCAST)
        return 0;
    for (uint32_t j = 0; p->add_mode != HEX_ADD_NONE && j < p->n_ranks; j++)
        if (a->addend[j] == 0)
            return 0;
    if (a->seq_entry == 0 || a->seq_exit == 0)
        return 0;
    if (p->codec != HEX_WIRE_NONE) {
        /* The encoding is of the flat tensor: dense rows only. */
        uint32_t row = p->ne0 * p->esize;
        if (!hex_wire_applies(p->codec, p->dtype) || p->src_stride != row || p->dst_stride != row ||
            (p->add_mode == HEX_ADD_RESIDUAL && p->add_stride != row))
            return 0;
        for (uint32_t k = 0; k < p->n_ranks; k++)
            if (a->wire[k] == 0)
                return 0;
    }
    return 1;
}

/* Workers of the codec path: whole blocks (encode), block-aligned tiles (reduce). */
struct wire_ctx {
    const struct hex_op_args *a;
    uint32_t n_elems; /* of the flat tensor */
    uint32_t lo, hi;  /* this rank's region, flat */
};

static void wire_encode_worker(void *data, uint32_t n, uint32_t t)
{
    const struct wire_ctx *w = data;
    const struct hex_op_params *p = &w->a->p;
    uint32_t blocks = (w->n_elems + HEX_WIRE_BLOCK - 1) / HEX_WIRE_BLOCK;
    uint32_t lo = (uint32_t)((uint64_t)blocks * t / n),
             hi = (uint32_t)((uint64_t)blocks * (t + 1) / n);
    hex_wire_encode(p->codec, p->dtype, w->a->src[p->rank], w->n_elems, lo, hi,
                    w->a->wire[p->rank]);
}

/* Worker t's part of [lo, hi): boundaries on blocks, the region's own ends apart. */
static uint32_t wire_cut(const struct wire_ctx *w, uint32_t n, uint32_t t)
{
    if (t == 0)
        return w->lo;
    if (t >= n)
        return w->hi;
    uint32_t c = w->lo + (uint32_t)((uint64_t)(w->hi - w->lo) * t / n);
    c = c / HEX_WIRE_BLOCK * HEX_WIRE_BLOCK;
    return c < w->lo ? w->lo : c;
}

static void wire_reduce_worker(void *data, uint32_t n, uint32_t t)
{
    const struct wire_ctx *w = data;
    uint32_t lo = wire_cut(w, n, t), hi = wire_cut(w, n, t + 1);
    /* Tiles of whole blocks, so each block's scales are read once per tile. */
    for (uint32_t s = lo; s < hi;) {
        uint32_t e = (s / HEX_WIRE_TILE_ELEMS + 1) * HEX_WIRE_TILE_ELEMS;
        e = e < hi ? e : hi;
        hex_wire_reduce(w->a, s, e);
        s = e;
    }
}

void hex_op_allreduce(struct hex_session *s, const struct hex_op_args *a, struct hex_op_result *r)
{
    const struct hex_op_params *p = &a->p;
    r->status = HEX_OK;
    r->peer = -1;
    r->peer_status = HEX_OK;
    r->stage = 0;
    r->dma_bytes = 0;
    if (!params_valid(s, a)) {
        /* The peers must not wait for a session that will never arrive. */
        if (p->rank < HEX_MAX_RANKS && a->fence[p->rank] != 0)
            hex_fence_fail(a->fence[p->rank], HEX_ERR_INVALID);
        r->status = HEX_ERR_INVALID;
        return;
    }
    struct wire_ctx wx;
    if (p->codec != HEX_WIRE_NONE) {
        /* Own input, encoded once, before the entry fence tells the peers to read it. */
        wx.a = a;
        wx.n_elems = p->ne0 * p->ne1;
        wx.lo = p->row_lo * p->ne0 + p->col_lo;
        wx.hi = p->row_lo == p->row_hi ? wx.lo : (p->row_hi - 1) * p->ne0 + p->col_hi;
        hex_session_run(s, wire_encode_worker, &wx, p->n_threads);
    }
    r->status = fence_wait(s, a, a->seq_entry, r);
    if (r->status != HEX_OK)
        return;

    r->stage = 1;
    if (p->codec != HEX_WIRE_NONE) {
        uint32_t tiles = (wx.hi - wx.lo + HEX_WIRE_TILE_ELEMS - 1) / HEX_WIRE_TILE_ELEMS;
        uint32_t nw = p->n_threads < tiles ? p->n_threads : tiles;
        hex_session_run(s, wire_reduce_worker, &wx, nw);
        r->stage = 2;
        r->status = fence_wait(s, a, a->seq_exit, r);
        return;
    }
    struct op_ctx x;
    hex_memset(&x, 0, sizeof(x));
    x.s = s;
    x.a = a;
    atomic_init(&x.status, HEX_OK);
    x.width = p->col_hi - p->col_lo;
    uint32_t rows = p->row_hi - p->row_lo;
    x.half_bytes = p->block_elems * p->esize;
    if (x.width != 0 && rows != 0) {
        if (x.width <= p->block_elems) {
            x.pitch = hex_round_up(x.width * p->esize, HEX_VEC_BYTES);
            x.tile_rows = x.half_bytes / x.pitch;
            x.n_tiles = (rows + x.tile_rows - 1) / x.tile_rows;
        } else {
            x.pitch = x.half_bytes;
            x.col_tiles = (x.width + p->block_elems - 1) / p->block_elems;
            x.n_tiles = rows * x.col_tiles;
        }
    }
    uint32_t bias_bytes =
        hex_vtcm_bias_bytes(p->n_ranks, p->ne0, p->esize, p->block_elems, p->add_mode);
    x.bias = p->add_mode == HEX_ADD_BCAST ? s->vtcm : 0;
    x.bias_row = hex_vtcm_bias_row_bytes(p->ne0, p->esize, p->block_elems);
    x.n_out = p->add_mode != HEX_ADD_NONE ? p->n_ranks : 1;
    x.areas = s->vtcm + bias_bytes;
    x.area_bytes = hex_vtcm_thread_bytes(p->n_ranks, p->esize, p->block_elems, p->add_mode);
    if (x.n_tiles != 0) {
        struct hex_dma_queue *mq = &s->dma[s->n_threads];
        if (x.bias != 0) {
            /* The bias rows come in once and every worker reads them from VTCM. */
            for (uint32_t j = 0; j < p->n_ranks; j++) {
                if (!hex_dma_push_1d(mq, x.bias + j * x.bias_row, a->addend[j], p->ne0 * p->esize))
                    fail(&x, HEX_ERR_NOMEM);
                hex_dma_flush(mq);
            }
            r->dma_bytes += mq->bytes;
            mq->bytes = 0;
        }
        uint32_t n = p->n_threads < x.n_tiles ? p->n_threads : x.n_tiles;
        for (uint32_t t = 0; t < n; t++)
            s->dma[t].bytes = 0;
        hex_session_run(s, reduce_worker, &x, n);
        for (uint32_t t = 0; t < n; t++)
            r->dma_bytes += s->dma[t].bytes;
    }
    int32_t st = atomic_load(&x.status);
    if (st != HEX_OK) {
        hex_fence_fail(a->fence[p->rank], st);
        r->status = st;
        return;
    }

    r->stage = 2;
    r->status = fence_wait(s, a, a->seq_exit, r);
}
