/* SPDX-License-Identifier: MIT */
/*
 * The CUDA allreduce, host side (every dtype and op), and what every CUDA collective's
 * call shares (cuda_call_begin/end, failure records; collectives_cuda.c has the others).  Nothing
 * here waits for a peer: a call checks what the device reported since the last call, picks the path
 * and enqueues it on the caller's stream (and the transport's copy streams), so one thread may
 * drive every GPU in turn. Cross-rank order lives in mapped host memory: kernel-path kernels poll
 * LL units (data and flag in one store), copy streams wait on counters with one-thread kernels and
 * publish with cuStreamWriteValue32; every wait is bounded and records what went wrong.
 */
#include "coll_cuda.h"
#include "cuda/cuda_comm.h"
#include "kernels.h"

#include <stddef.h>
#include <stdio.h>

static const char *stage_name(int32_t stage)
{
    switch (stage) {
    case CUDA_STAGE_KWAIT:
        return "kernel path, waiting for a peer's data";
    case CUDA_STAGE_KDESC:
        return "kernel path, comparing the call";
    case CUDA_STAGE_CCALL:
        return "copy-engine path, waiting for the peers to start the call";
    case CUDA_STAGE_CDATA:
        return "copy-engine path, waiting for chunks";
    case CUDA_STAGE_CDESC:
        return "copy-engine path, comparing the call";
    case CUDA_STAGE_CSLOT:
        return "copy-engine path, waiting for the peers to free a staging slot";
    case CUDA_STAGE_CFETCH:
        return "copy-engine path, waiting for a peer to stage a chunk";
    }
    return "host";
}

comm_status_t cuda_check_device(struct comm *c)
{
    struct cuda_comm *x = cuda_of(c);
    const struct cuda_fail_line *d = &cuda_ctrl_of(x, c->rank)->dfail;
    int32_t st = __atomic_load_n(&d->status, __ATOMIC_ACQUIRE);
    if (st != COMM_OK) {
        const char *stage = stage_name(d->stage);
        switch (st) {
        case COMM_ERR_TIMEOUT:
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: GPU %d timed out after %ld ms in call %u (%s): rank %d did not "
                     "arrive; check that every rank makes the same calls, or raise "
                     "ARCOMM_TIMEOUT_MS",
                     c->rank, x->device, c->timeout_ms, d->seq, stage, d->peer);
            break;
        case COMM_ERR_MISMATCH:
            rt_error(c, COMM_ERR_MISMATCH,
                     "rank %d: ranks disagree in call %u (%s): rank %d made a different "
                     "call (collective, count, dtype, op, root, addend or path); every rank "
                     "must make the same collectives in the same order with the same count, "
                     "dtype, op and root",
                     c->rank, d->seq, stage, d->peer);
            break;
        case COMM_ERR_ABORTED:
            rt_error(c, COMM_ERR_ABORTED,
                     "rank %d: comm_abort was called while GPU %d waited in call %u (%s)", c->rank,
                     x->device, d->seq, stage);
            break;
        default: {
            int p = d->peer >= 0 && d->peer < c->nranks ? d->peer : 0;
            int32_t pst = shm_peer_status(c, p);
            if (pst != COMM_OK && p != c->rank) /* the root cause, passed on whole */
                return shm_peer_failed(c, p, pst);
            bool said = pst != COMM_OK;
            rt_error(c, (comm_status_t)st,
                     "rank %d: GPU %d stopped in call %u (%s): rank %d failed: %.*s", c->rank,
                     x->device, d->seq, stage, d->peer, SHM_ERRMSG_BYTES,
                     said ? shm_peer_errmsg(c, p) : "its GPU reported a failure (see its error)");
            break;
        }
        }
        return (comm_status_t)st;
    }
    for (int p = 0; p < c->nranks; p++) {
        const struct cuda_fail_line *pd = &cuda_ctrl_of(x, p)->dfail;
        if (p == c->rank || __atomic_load_n(&pd->status, __ATOMIC_ACQUIRE) == COMM_OK)
            continue;
        rt_error(c, COMM_ERR_PEER, "rank %d: rank %d's GPU failed in call %u (%s) with %s", c->rank,
                 p, pd->seq, stage_name(pd->stage), rt_status_string((comm_status_t)pd->status));
        return COMM_ERR_PEER;
    }
    /* No stream queries here: a driver call per collective costs more than the smallest
     * allreduce; a GPU fault is sticky and shows on the caller's next synchronize. */
    return shm_check_peers(c);
}

comm_status_t cuda_launch_failed(struct comm *c, const char *what, int e)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed on GPU %d: %s", c->rank, what,
             cuda_of(c)->device, cudaGetErrorString((cudaError_t)e));
    (void)cudaGetLastError();
    return COMM_ERR_SYSTEM;
}

comm_status_t cuda_driver_failed(struct comm *c, const char *what, CUresult r)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed on GPU %d (CUresult %d)", c->rank, what,
             cuda_of(c)->device, (int)r);
    return COMM_ERR_SYSTEM;
}

bool cuda_aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

void cuda_fill_common(struct comm *c, const struct coll_call *call, bool narrow,
                      enum cuda_path path, uint32_t release, struct cuda_kcommon *k)
{
    struct cuda_comm *x = cuda_of(c);
    k->send = call->send;
    k->recv = call->recv;
    k->addend = call->addend;
    k->count = call->count;
    k->addend_count = call->addend ? call->addend_count : 0;
    k->regions = x->dregions;
    k->region_bytes = x->g.region_bytes;
    /* The kernels' encoding: 0 = never. */
    uint64_t t = rt_ms_to_ns(c->timeout_ms);
    k->timeout_ns = t == RT_NEVER ? 0 : t > 0 ? t : 1;
    k->seq = c->seq;
    /* The op of a collective that moves data, and the root of one without a root, are
     * not part of the call (whatever the caller passed). */
    bool moves =
        call->kind == COLL_BROADCAST || call->kind == COLL_ALLGATHER || call->kind == COLL_ALLTOALL;
    bool rooted = call->kind == COLL_BROADCAST || call->kind == COLL_REDUCE;
    uint32_t op = moves ? 0u : (uint32_t)call->op;
    k->desc = cuda_call_desc(call->count, (uint32_t)call->dtype, op, (uint32_t)path, narrow,
                             call->addend != NULL, k->addend_count, (uint32_t)call->kind,
                             rooted ? call->root : 0);
    k->release = release;
    k->rank = c->rank;
    k->nranks = c->nranks;
    k->dtype = (int32_t)call->dtype;
    k->op = (int32_t)op;
    k->narrow = narrow;
    k->vec = cuda_aligned16(call->send) && cuda_aligned16(call->recv) &&
             (call->addend == NULL || cuda_aligned16(call->addend));
}

/* The kernel path: one LL launch per round of at most a sub-slot's payload. */
static comm_status_t kernel_path(struct comm *c, const struct coll_call *call, bool narrow)
{
    struct cuda_comm *x = cuda_of(c);
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_kplan plan = cuda_kplan_compute(call->count, wsize, x->g.kslot_bytes);
    struct cuda_ll_args a = {
        .off_kstage = x->g.off_kstage,
        .kslot_bytes = x->g.kslot_bytes,
    };
    cuda_fill_common(c, call, narrow, CUDA_PATH_KERNEL, (uint32_t)x->cchunk + CUDA_RELEASE, &a.c);
    for (uint32_t j = 0; j < plan.rounds; j++) {
        a.rlo = (uint64_t)j * plan.round_elems;
        a.rn = call->count - a.rlo < plan.round_elems ? call->count - a.rlo : plan.round_elems;
        a.round = (uint32_t)(x->kround + j);
        a.units = cuda_ll_units(a.rn, wsize);
        int e = cuda_launch_ll(&a, cuda_ll_blocks(a.units, x->k.blocks), call->stream);
        if (e != 0)
            return cuda_launch_failed(c, "the kernel-path launch", e);
    }
    x->kround += plan.rounds;
    return COMM_OK;
}

/* The bf16 copy of a narrowed input, grown in stream order on the D2H stream. */
static comm_status_t narrow_buffer(struct comm *c, size_t bytes)
{
    struct cuda_comm *x = cuda_of(c);
    if (x->narrow_bytes >= bytes)
        return COMM_OK;
    cudaError_t e = cudaSuccess;
    if (x->narrow != NULL)
        e = cudaFreeAsync(x->narrow, x->sd);
    x->narrow = NULL;
    x->narrow_bytes = 0;
    if (e == cudaSuccess)
        e = cudaMallocAsync((void **)&x->narrow, bytes, x->sd);
    if (e != cudaSuccess)
        return cuda_launch_failed(c, "cudaMallocAsync of the bf16 buffer", e);
    x->narrow_bytes = bytes;
    return COMM_OK;
}

/*
 * The copy-engine path, all enqueued at once (the host never waits):
 *   D2H stream:    [slot free: every peer's 'h2d' >= g - cslots + 1]  D2H chunk g into
 *                  this rank's slot  ->  'ready' = g + 1  (cuStreamWriteValue32)
 *   H2D stream:    [every peer's 'ready' >= g + 1] [ring slot summed: event]  H2D each
 *                  peer's chunk g into the device ring  ->  'h2d' = g + 1
 *   (the waits on peers' counters are bounded one-thread kernels, wait_kernel; the
 *   first of a call also compares the peers' calls)
 *   caller stream: [events: own D2H and H2D of chunk g done]  add kernel of chunk g
 * So D2H of chunk g + 1 overlaps H2D of chunk g; the add kernels never wait.
 * Cross-rank order rests only on counters in mapped memory; events order this rank's
 * own streams, recorded before they are waited for.
 */
static comm_status_t copy_path(struct comm *c, const struct coll_call *call, bool narrow)
{
    struct cuda_comm *x = cuda_of(c);
    cudaStream_t stream = call->stream;
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_cplan plan =
        cuda_cplan_compute(call->count, wsize, x->k.chunk_knob, x->g.chunk_max);
    const uint8_t *src = call->send;
    uint32_t release = (uint32_t)(x->cchunk + plan.chunks) + CUDA_RELEASE;
    CUresult r;
    int e;

    if ((e = cudaEventRecord(x->ev_start, stream)) != 0 ||
        (e = cudaStreamWaitEvent(x->sd, x->ev_start, 0)) != 0)
        return cuda_launch_failed(c, "ordering the copy stream after the caller's", e);
    if (narrow) {
        comm_status_t st = narrow_buffer(c, call->count * 2);
        if (st != COMM_OK)
            return st;
        if ((e = cuda_launch_narrow(call->send, x->narrow, call->count, x->sd)) != 0)
            return cuda_launch_failed(c, "the bf16 narrowing launch", e);
        src = (const uint8_t *)x->narrow;
    }
    struct cuda_ctrl *me = cuda_ctrl_of(x, c->rank);
    uint64_t wire = call->count * wsize;
    uint64_t ring = (uint64_t)x->tslots * x->g.chunk_max;
    struct cuda_cadd_args a = {.peer_stride = ring};
    cuda_fill_common(c, call, narrow, CUDA_PATH_COPY, release, &a.c);
    struct cuda_wait_args base_wait = {.stage = 0};
    cuda_fill_common(c, call, narrow, CUDA_PATH_COPY, release, &base_wait.c);
    for (uint32_t k = 0; k < plan.chunks; k++) {
        uint64_t g = x->cchunk + k;
        uint32_t g32 = (uint32_t)g;
        uint32_t ts = (uint32_t)(g % x->tslots);
        uint64_t off = (uint64_t)k * plan.chunk_bytes;
        size_t len = (size_t)(wire - off < plan.chunk_bytes ? wire - off : plan.chunk_bytes);

        /* D2H: once every peer fetched what the slot held, stage, publish. */
        if (g >= x->g.cslots) {
            struct cuda_wait_args w = base_wait;
            w.peer_off = offsetof(struct cuda_ctrl, h2d);
            w.peer_want = g32 - x->g.cslots + 1;
            w.stage = CUDA_STAGE_CSLOT;
            if ((e = cuda_launch_wait(&w, x->sd)) != 0)
                return cuda_launch_failed(c, "the staging-slot wait launch", e);
        }
        uint8_t *slot = x->regions + cuda_cslot_off(&x->g, c->rank, g32);
        if ((e = cudaMemcpyAsync(slot, src + off, len, cudaMemcpyDeviceToHost, x->sd)) != 0)
            return cuda_launch_failed(c, "cudaMemcpyAsync (device to staging)", e);
        r = x->write_value(x->sd, cuda_dev_addr(x, &me->ready.value), (cuuint32_t)(g32 + 1),
                           CU_STREAM_WRITE_VALUE_DEFAULT);
        if (r != CUDA_SUCCESS)
            return cuda_driver_failed(c, "cuStreamWriteValue32 (chunk staged)", r);
        if ((e = cudaEventRecord(x->ev_staged, x->sd)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (chunk staged)", e);

        /* H2D: once every peer staged chunk g and the ring slot was summed, fetch. */
        struct cuda_wait_args w = base_wait;
        w.peer_off = offsetof(struct cuda_ctrl, ready);
        w.peer_want = g32 + 1;
        w.stage = CUDA_STAGE_CFETCH;
        w.check_call = k == 0;
        if ((e = cuda_launch_wait(&w, x->sh)) != 0)
            return cuda_launch_failed(c, "the chunk wait launch", e);
        if ((e = cudaStreamWaitEvent(x->sh, x->ev_added[ts], 0)) != 0)
            return cuda_launch_failed(c, "ordering the fetch after the ring slot's sum", e);
        for (int p = 0, q = 0; p < c->nranks; p++) {
            if (p == c->rank)
                continue;
            uint8_t *dst = x->tmp + (uint64_t)q * ring + (uint64_t)ts * x->g.chunk_max;
            const uint8_t *from = x->regions + cuda_cslot_off(&x->g, p, g32);
            if ((e = cudaMemcpyAsync(dst, from, len, cudaMemcpyHostToDevice, x->sh)) != 0)
                return cuda_launch_failed(c, "cudaMemcpyAsync (staging to device)", e);
            q++;
        }
        r = x->write_value(x->sh, cuda_dev_addr(x, &me->h2d.value), (cuuint32_t)(g32 + 1),
                           CU_STREAM_WRITE_VALUE_DEFAULT);
        if (r != CUDA_SUCCESS)
            return cuda_driver_failed(c, "cuStreamWriteValue32 (chunk fetched)", r);
        if ((e = cudaEventRecord(x->ev_fetched, x->sh)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (chunk fetched)", e);

        /* Sum on the caller's stream once this chunk left and every peer's arrived. */
        if ((e = cudaStreamWaitEvent(stream, x->ev_staged, 0)) != 0 ||
            (e = cudaStreamWaitEvent(stream, x->ev_fetched, 0)) != 0)
            return cuda_launch_failed(c, "ordering the add kernel after the copies", e);
        a.tmp = x->tmp + (uint64_t)ts * x->g.chunk_max;
        a.lo = (uint64_t)k * plan.chunk_elems;
        a.n = call->count - a.lo < plan.chunk_elems ? call->count - a.lo : plan.chunk_elems;
        if ((e = cuda_launch_cadd(&a, stream)) != 0)
            return cuda_launch_failed(c, "the add-kernel launch", e);
        if ((e = cudaEventRecord(x->ev_added[ts], stream)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (ring slot summed)", e);
    }
    x->cchunk += plan.chunks;
    return COMM_OK;
}

comm_status_t cuda_call_begin(struct comm *c, const struct coll_call *call, int *prev)
{
    struct cuda_comm *x = cuda_of(c);
    comm_status_t st = cuda_device_enter(c, prev);
    if (st != COMM_OK)
        return st;
    cudaStream_t stream = call->stream;
    int e;
    /* A call recorded into a CUDA graph would replay the LL flags and chunk counters it
     * was enqueued with, which the peers have moved past: refuse it, and let the peers
     * hear of it now rather than at their timeout. */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t ce = cudaStreamIsCapturing(stream, &cap);
    if (ce != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: the stream is being captured into a CUDA graph (%s): arcomm's CUDA "
                 "calls cannot be captured yet; make the call outside the capture",
                 c->rank, ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaStreamIsCapturing");
        (void)cudaGetLastError();
        cuda_device_leave(*prev);
        return COMM_ERR_INVALID;
    }
    /* Calls on one communicator run one after another whatever streams they use: the
     * LL rounds and the copy-path counters count on it. */
    if (x->have_last && x->last_stream != call->stream &&
        (e = cudaStreamWaitEvent(stream, x->ev_done, 0)) != 0) {
        st = cuda_launch_failed(c, "ordering after the previous call's stream", e);
        cuda_device_leave(*prev);
        return st;
    }
    return COMM_OK;
}

comm_status_t cuda_call_end(struct comm *c, const struct coll_call *call, comm_status_t st,
                            int prev)
{
    struct cuda_comm *x = cuda_of(c);
    int e;
    if (st == COMM_OK && (e = cudaEventRecord(x->ev_done, call->stream)) != 0)
        st = cuda_launch_failed(c, "cudaEventRecord", e);
    if (st == COMM_OK) {
        x->last_stream = call->stream;
        x->have_last = true;
    }
    cuda_device_leave(prev);
    return st;
}

comm_status_t coll_cuda_allreduce(struct comm *c, const struct coll_call *call)
{
    struct cuda_comm *x = cuda_of(c);
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK || call->count == 0)
        return st;

    int prev = 0;
    st = cuda_call_begin(c, call, &prev);
    if (st != COMM_OK)
        return st;
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    /* bf16 on the wire for f32 sums only (an addend is a sum's). */
    bool narrow = call->dtype == COMM_F32 && call->op == COMM_SUM && bytes >= x->k.bf16_threshold;
    if (bytes >= x->k.copy_threshold && c->nranks > 1)
        st = copy_path(c, call, narrow);
    else
        st = kernel_path(c, call, narrow);
    return cuda_call_end(c, call, st, prev);
}
