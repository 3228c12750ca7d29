/* SPDX-License-Identifier: MIT */
/*
 * The CUDA collectives beyond allreduce: broadcast, reduce, allgather, reduce_scatter
 * and alltoall, host-staged through the pinned segment with the copy-engine path's
 * machinery (allreduce_cuda.c): the host never waits, everything is enqueued at once.
 * Small ones go through allreduce's LL kernel instead (small_via_kernel, below), as the
 * call's plan says (plan_cuda.c).
 *
 * A call is cut into steps (chunks of a block of count elements); step k of the call uses
 * staging slot k % cslots of every rank, and its counters count from the call's first
 * chunk b, taken on the device by the begin kernel (as allreduce's copy path):
 *   D2H stream:  [slot free: every peer's 'h2d' >= b (k == 0) or
 *                >= b + k - cslots + 1]  this rank's part of step k into its slot
 *                (nothing for a broadcast's non-roots), then 'ready' = b + k + 1
 *   H2D stream:  [every peer's 'ready' >= b + k + 1; the first
 *                step compares the calls]  what this rank needs of the peers' slots ->
 *                the device ring (slot k % tslots), then 'h2d' = b + k + 1
 *   caller:      the add kernel of step k in rank order (reductions, as allreduce's copy
 *                path) or the copy-out kernel of step k (data movement: the ring and
 *                this rank's own part of sendbuf into recvbuf); at the end the caller's
 *                stream waits for both streams.
 * Only these kernels write recvbuf, and neither does once this rank recorded a
 * failure: a mismatch (found by the first wait) leaves every recvbuf untouched, though
 * the copies that were enqueued still run (into the ring).
 * Every rank moves both counters at every step, whatever it copies, so that every
 * wait of every rank asks the same question as allreduce's.  Slots of alltoall and
 * reduce_scatter hold one sub-slot per peer (the chunk for that peer).
 */
#include "coll_cuda.h"
#include "paths_device.h"

#include <stddef.h>

/* Does kind reduce (a ring and an add kernel), and does it stage a block per peer? */
static bool kind_reduces(enum coll_kind k)
{
    return k == COLL_REDUCE || k == COLL_REDUCE_SCATTER;
}

static bool kind_per_peer(enum coll_kind k)
{
    return k == COLL_ALLTOALL || k == COLL_REDUCE_SCATTER;
}

/* Peer p's index among the peers of rank r (its sub-slot, its ring). */
static int peer_index(int p, int r)
{
    return p < r ? p : p - 1;
}

_Static_assert(CUDA_CCOPY_PARTS >= CUDA_MAX_RANKS, "a copy-out kernel takes every rank's part");

/* Enqueues a device-to-device copy, unless it is empty or in place. */
static comm_status_t copy_d2d(struct comm *c, void *dst, const void *src, size_t len,
                              cudaStream_t s)
{
    if (len == 0 || dst == src)
        return COMM_OK;
    int e = cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToDevice, s);
    return e != 0 ? cuda_launch_failed(c, "cudaMemcpyAsync (device to device)", e) : COMM_OK;
}

/*
 * The parts of step k of a data movement that the copy-out kernel writes into recvbuf:
 * each fetched peer's chunk from its ring slot, and this rank's own part of sendbuf
 * (allgather and alltoall: its own block; broadcast: the root's, unless in place).
 */
static void movement_parts(const struct coll_call *call, int nranks, int me, const uint8_t *ring_k,
                           uint64_t ring, uint64_t block, uint64_t off, size_t len,
                           struct cuda_ccopy_args *a)
{
    const enum coll_kind kind = call->kind;
    const int root = call->root;
    const uint8_t *send = call->send;
    uint8_t *recv = call->recv;
    a->nparts = 0;
    a->len = len;
    for (int p = 0; p < nranks; p++) {
        const uint8_t *from;
        uint8_t *to;
        if (kind == COLL_BROADCAST) {
            if (p != root)
                continue;
            from = p == me ? send + off : ring_k + (uint64_t)peer_index(p, me) * ring;
            to = recv + off;
        } else {
            from = p != me                 ? ring_k + (uint64_t)peer_index(p, me) * ring
                   : kind == COLL_ALLTOALL ? send + (uint64_t)me * block + off
                                           : send + off;
            to = recv + (uint64_t)p * block + off;
        }
        if (from == to)
            continue; /* the in-place forms: this rank's part is there already */
        a->src[a->nparts] = from;
        a->dst[a->nparts] = to;
        a->nparts++;
    }
}

comm_status_t cuda_single_rank(struct comm *c, const struct coll_call *call)
{
    struct cuda_comm *x = cuda_of(c);
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    if (!kind_reduces(call->kind) && call->kind != COLL_ALLREDUCE)
        return copy_d2d(c, call->recv, call->send, bytes, call->stream);
    /* The add kernel with no peers applies the op's end (AVG / 1) and the rounding. */
    struct cuda_cadd_args a = {.tmp = x->tmp, .peer_stride = 0, .lo = 0, .n = call->count};
    cuda_fill_common(c, call, false, CUDA_PATH_COPY, &a.c);
    int e = cuda_launch_cadd(&a, call->stream);
    return e != 0 ? cuda_launch_failed(c, "the reduction-kernel launch", e) : COMM_OK;
}

/*
 * Small messages through allreduce's kernel path (one LL launch): the copy-engine
 * pipeline's device-side waits cost 36-57 us a call whatever the size on one H200 shared
 * by 2 process ranks, the kernel path 15 us.  Every rank's part lies at its place in a
 * buffer that is zero elsewhere and the ranks sum it: data movement as an unsigned
 * integer sum with zeros (exact, bit for bit), reductions as the allreduce of the same
 * inputs (the bits allreduce gives, as the API asks).  The ranks compare the caller's
 * call (its collective, count, root), never the allreduce serving it.  Only kernels
 * write recvbuf: the LL kernel, and the copy-out kernel, which writes nothing once this
 * rank recorded a failure (a mismatch leaves recvbuf untouched).  The buffers are the
 * copy path's ring (x->tmp), free here: calls on a communicator run one after another.
 * The path table's kernel rows say when (paths_device.c: by default up to 64 KiB of the
 * allreduce, and below ARCOMM_COPY_THRESHOLD; never past half the ring).
 */

static comm_status_t small_via_kernel(struct comm *c, const struct coll_call *call, uint64_t total)
{
    struct cuda_comm *x = cuda_of(c);
    cudaStream_t s = call->stream;
    const int me = c->rank;
    const uint64_t n = (uint64_t)c->nranks;
    const uint64_t m = (uint64_t)call->count * rt_dtype_size(call->dtype);
    uint8_t *in = x->tmp, *out = x->tmp + total;
    struct coll_call ar = *call;
    ar.kind = COLL_ALLREDUCE;
    ar.addend = NULL;
    ar.addend_count = 0;
    ar.recv = out;
    int e = 0;
    switch (call->kind) { /* in: zeros, this rank's part at its place */
    case COLL_BROADCAST:
        ar.recv = call->recv;
        ar.send = me == call->root ? call->send : in;
        if (me != call->root)
            e = cudaMemsetAsync(in, 0, total, s);
        break;
    case COLL_ALLGATHER:
        ar.send = in;
        ar.recv = call->recv;
        if ((e = cudaMemsetAsync(in, 0, total, s)) == 0)
            e = cudaMemcpyAsync(in + (uint64_t)me * m, call->send, m, cudaMemcpyDeviceToDevice, s);
        break;
    case COLL_ALLTOALL: /* block (p, q) of the sum: rank p's block for rank q */
        ar.send = in;
        if ((e = cudaMemsetAsync(in, 0, total, s)) == 0)
            e = cudaMemcpyAsync(in + (uint64_t)me * n * m, call->send, n * m,
                                cudaMemcpyDeviceToDevice, s);
        break;
    case COLL_REDUCE:
        if (me == call->root)
            ar.recv = call->recv;
        break;
    default: /* COLL_REDUCE_SCATTER: the sum of every block, then this rank's */
        ar.count = (size_t)(n * call->count);
        break;
    }
    if (e != 0)
        return cuda_launch_failed(c, "staging a small call for the kernel path", e);
    if (call->kind == COLL_BROADCAST || call->kind == COLL_ALLGATHER ||
        call->kind == COLL_ALLTOALL) {
        /* Moved data: an unsigned sum, in words where this rank's buffers allow it.  Ranks
         * may differ here (alignment is their own) and need not agree: the wire holds the
         * same bytes either way (u32 or 4 u8 per word, little-endian, the same units and
         * rounds), and with one non-zero addend per byte no sum carries. */
        bool words = total % 4 == 0 && ((uintptr_t)ar.send % 4 | (uintptr_t)ar.recv % 4) == 0;
        ar.dtype = words ? COMM_U32 : COMM_U8;
        ar.op = COMM_SUM;
        ar.count = (size_t)(total / (words ? 4 : 1));
    }
    comm_status_t st = cuda_kernel_path_as(c, &ar, call, false);
    if (st != COMM_OK || ar.recv != out || call->kind == COLL_REDUCE)
        return st;
    /* From the sum into recvbuf: alltoall every peer's block for this rank,
     * reduce_scatter this rank's block. */
    struct cuda_ccopy_args k = {.len = m};
    cuda_fill_common(c, call, false, CUDA_PATH_KERNEL, &k.c);
    if (call->kind == COLL_ALLTOALL) {
        for (uint64_t p = 0; p < n; p++) {
            k.src[k.nparts] = out + (p * n + (uint64_t)me) * m;
            k.dst[k.nparts++] = (uint8_t *)call->recv + p * m;
        }
    } else {
        k.src[k.nparts] = out + (uint64_t)me * m;
        k.dst[k.nparts++] = call->recv;
    }
    if ((e = cuda_launch_ccopy(&k, s)) != 0)
        return cuda_launch_failed(c, "the copy-out kernel launch", e);
    return COMM_OK;
}

static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    struct cuda_comm *x = cuda_of(c);
    cudaStream_t stream = call->stream;
    const enum coll_kind kind = call->kind;
    const int me = c->rank, root = call->root;
    const uint32_t es = (uint32_t)rt_dtype_size(call->dtype);
    const uint64_t block = (uint64_t)call->count * es; /* bytes of a block */
    const bool reduces = kind_reduces(kind), per_peer = kind_per_peer(kind);
    /* What this rank does: stage its part, fetch the peers', reduce into its recvbuf. */
    const bool stages = kind != COLL_BROADCAST || me == root;
    const bool fetches = kind == COLL_BROADCAST ? me != root
                         : kind == COLL_REDUCE  ? me == root
                                                : true;
    const bool adds = reduces && fetches;
    /* A slot holds a sub-slot per peer when each peer gets its own block. */
    uint64_t slot_room = x->g.chunk_max;
    if (per_peer)
        slot_room = slot_room / (uint64_t)(c->nranks - 1) / CUDA_LINE * CUDA_LINE;
    struct cuda_cplan plan = cuda_cplan_compute(call->count, es, x->k.chunk_knob, slot_room);
    const uint64_t ring = (uint64_t)x->tslots * x->g.chunk_max;
    const uint8_t *send = call->send;
    int e;

    /* The call's number and chunks; both copy streams after the caller's work so far
     * (the H2D stream writes recvbuf). */
    comm_status_t st = cuda_copy_begin(c, call, plan.chunks);
    if (st != COMM_OK)
        return st;

    struct cuda_wait_args base_wait = {.stage = 0};
    cuda_fill_common(c, call, false, CUDA_PATH_COPY, &base_wait.c);
    struct cuda_cadd_args a = {.peer_stride = ring};
    cuda_fill_common(c, call, false, CUDA_PATH_COPY, &a.c);
    if (kind == COLL_REDUCE_SCATTER) {
        /* This rank's own contribution is block 'me' of its sendbuf. */
        a.c.send = send + (uint64_t)me * block;
        a.c.vec = cuda_aligned16(a.c.send) && cuda_aligned16(a.c.recv);
    }

    for (uint32_t k = 0; k < plan.chunks; k++) {
        const uint32_t ts = k % x->tslots;
        const uint64_t off = (uint64_t)k * plan.chunk_bytes;
        const size_t len =
            (size_t)(block - off < plan.chunk_bytes ? block - off : plan.chunk_bytes);

        /* D2H: once every peer fetched what the slot held, stage this rank's part, publish. */
        struct cuda_wait_args w = base_wait;
        if (stages && (k == 0 || k >= x->g.cslots)) {
            w.peer_off = offsetof(struct cuda_ctrl, h2d);
            w.want_rel = k == 0 ? 0 : k - x->g.cslots + 1;
            w.stage = CUDA_STAGE_CSLOT;
        }
        if ((st = cuda_copy_step(c, &w, x->sd)) != COMM_OK)
            return st;
        if (stages) {
            uint8_t *slot = x->regions + cuda_cslot_off(&x->g, me, k);
            for (int p = 0; p < c->nranks; p++) {
                const uint8_t *from = send + off;
                uint8_t *to = slot;
                if (per_peer) {
                    if (p == me)
                        continue;
                    from = send + (uint64_t)p * block + off;
                    to = slot + (uint64_t)peer_index(p, me) * plan.chunk_bytes;
                } else if (p != me) {
                    continue; /* one part: this rank's block */
                }
                if ((e = cudaMemcpyAsync(to, from, len, cudaMemcpyDeviceToHost, x->sd)) != 0)
                    return cuda_launch_failed(c, "cudaMemcpyAsync (device to staging)", e);
            }
        }
        if ((st = cuda_copy_publish(c, &base_wait, offsetof(struct cuda_ctrl, ready), k + 1,
                                    x->sd)) != COMM_OK)
            return st;
        if (adds && (e = cudaEventRecord(x->ev_staged, x->sd)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (chunk staged)", e);

        /* H2D: once every peer staged step k (the first step: and makes this call), fetch,
         * publish. */
        w = base_wait;
        w.peer_off = offsetof(struct cuda_ctrl, ready);
        w.want_rel = k + 1;
        w.stage = CUDA_STAGE_CFETCH;
        w.check_call = k == 0;
        if ((st = cuda_copy_step(c, &w, x->sh)) != COMM_OK)
            return st;
        if (fetches) {
            /* The ring slot is free once the kernel that read it last ended. */
            if (k >= x->tslots && (e = cudaStreamWaitEvent(x->sh, x->ev_added[ts], 0)) != 0)
                return cuda_launch_failed(c, "ordering the fetch after the ring slot's reader", e);
            for (int p = 0; p < c->nranks; p++) {
                if (p == me || (kind == COLL_BROADCAST && p != root))
                    continue;
                const uint8_t *from = x->regions + cuda_cslot_off(&x->g, p, k);
                if (per_peer)
                    from += (uint64_t)peer_index(me, p) * plan.chunk_bytes;
                uint8_t *to =
                    x->tmp + (uint64_t)peer_index(p, me) * ring + (uint64_t)ts * x->g.chunk_max;
                if ((e = cudaMemcpyAsync(to, from, len, cudaMemcpyHostToDevice, x->sh)) != 0)
                    return cuda_launch_failed(c, "cudaMemcpyAsync (staging to device)", e);
            }
        }

        if ((st = cuda_copy_publish(c, &base_wait, offsetof(struct cuda_ctrl, h2d), k + 1,
                                    x->sh)) != COMM_OK)
            return st;

        if (adds) {
            /* Reduce on the caller's stream once this chunk's copies are done. */
            if ((e = cudaEventRecord(x->ev_fetched, x->sh)) != 0)
                return cuda_launch_failed(c, "cudaEventRecord (chunk fetched)", e);
            if ((e = cudaStreamWaitEvent(stream, x->ev_staged, 0)) != 0 ||
                (e = cudaStreamWaitEvent(stream, x->ev_fetched, 0)) != 0)
                return cuda_launch_failed(c, "ordering the reduction after the copies", e);
            a.tmp = x->tmp + (uint64_t)ts * x->g.chunk_max;
            a.lo = (uint64_t)k * plan.chunk_elems;
            a.n = call->count - a.lo < plan.chunk_elems ? call->count - a.lo : plan.chunk_elems;
            if ((e = cuda_launch_cadd(&a, stream)) != 0)
                return cuda_launch_failed(c, "the reduction-kernel launch", e);
            if ((e = cudaEventRecord(x->ev_added[ts], stream)) != 0)
                return cuda_launch_failed(c, "cudaEventRecord (ring slot reduced)", e);
        } else if (!reduces) {
            /* Data movement: into recvbuf on the caller's stream once the copies are in. */
            struct cuda_ccopy_args m = {.c = base_wait.c};
            movement_parts(call, c->nranks, me, x->tmp + (uint64_t)ts * x->g.chunk_max, ring, block,
                           off, len, &m);
            if (m.nparts == 0)
                continue;
            if ((e = cudaEventRecord(x->ev_fetched, x->sh)) != 0 ||
                (e = cudaStreamWaitEvent(stream, x->ev_fetched, 0)) != 0)
                return cuda_launch_failed(c, "ordering the copy-out after the copies", e);
            if ((e = cuda_launch_ccopy(&m, stream)) != 0)
                return cuda_launch_failed(c, "the copy-out kernel launch", e);
            if ((e = cudaEventRecord(x->ev_added[ts], stream)) != 0)
                return cuda_launch_failed(c, "cudaEventRecord (ring slot copied out)", e);
        }
    }
    /* The caller's stream after all of it. */
    return cuda_copy_end(c, call);
}

comm_status_t coll_cuda_staged(struct comm *c, const struct coll_call *call,
                               const struct coll_plan *plan)
{
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK || call->count == 0)
        return st;
    int prev = 0;
    st = cuda_call_begin(c, call, &prev);
    if (st != COMM_OK)
        return st;
    st = plan->path == COLL_PATH_LOCAL ? cuda_single_rank(c, call)
         : plan->path == COLL_PATH_KERNEL
             ? small_via_kernel(
                   c, call,
                   coll_cuda_ll_bytes(
                       call->kind, (uint64_t)call->count * rt_dtype_size(call->dtype), c->nranks))
             : staged(c, call);
    return cuda_call_end(c, call, st, prev);
}
