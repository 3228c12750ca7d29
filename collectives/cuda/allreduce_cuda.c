/* SPDX-License-Identifier: MIT */
/*
 * The CUDA allreduce, host side (every dtype and op), and what every CUDA collective's
 * call shares (cuda_call_begin/end, failure records; collectives_cuda.c has the others).  Nothing
 * here waits for a peer: a call checks what the device reported since the last call, picks the path
 * and enqueues it on the caller's stream (and the transport's copy streams), so one thread may
 * drive every GPU in turn. Cross-rank order lives in mapped host memory: kernel-path kernels poll
 * LL units (data and flag in one store), copy streams publish and wait on counters with one-thread
 * kernels; every wait is bounded and records what went wrong.  Nothing enqueued holds a call number
 * or an absolute counter (the kernels take them from the device's counters), so a call recorded
 * into a CUDA graph is a fresh collective at every replay.
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
                      enum cuda_path path, struct cuda_kcommon *k)
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
    k->counters = x->dcount;
    k->mirror = (void *)cuda_dev_addr(x, &cuda_ctrl_of(x, c->rank)->count);
    k->seq = 0;     /* the kernels' */
    k->release = 0; /* the kernels' */
    /* The op of a collective that moves data, and the root of one without a root, are
     * not part of the call (whatever the caller passed). */
    bool moves =
        call->kind == COLL_BROADCAST || call->kind == COLL_ALLGATHER || call->kind == COLL_ALLTOALL;
    bool rooted = call->kind == COLL_BROADCAST || call->kind == COLL_REDUCE;
    uint32_t op = moves ? 0u : (uint32_t)call->op;
    k->desc = cuda_call_desc(call->count, (uint32_t)call->dtype, op, (uint32_t)path, narrow,
                             call->addend != NULL, k->addend_count, (uint32_t)call->kind,
                             rooted ? call->root : 0);
    k->rank = c->rank;
    k->nranks = c->nranks;
    k->dtype = (int32_t)call->dtype;
    k->op = (int32_t)op;
    k->narrow = narrow;
    k->codec = 0; /* the copy path sets a block codec */
    k->vec = cuda_aligned16(call->send) && cuda_aligned16(call->recv) &&
             (call->addend == NULL || cuda_aligned16(call->addend));
}

/* The kernel path: one LL launch per round of at most a sub-slot's payload. */
static comm_status_t kernel_path(struct comm *c, const struct coll_call *call,
                                 enum wire_codec codec)
{
    return cuda_kernel_path_as(c, call, call, codec == WIRE_BF16);
}

comm_status_t cuda_kernel_path_as(struct comm *c, const struct coll_call *call,
                                  const struct coll_call *as, bool narrow)
{
    struct cuda_comm *x = cuda_of(c);
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_kplan plan = cuda_kplan_compute(call->count, wsize, x->g.kslot_bytes);
    struct cuda_ll_args a = {
        .off_kstage = x->g.off_kstage,
        .kslot_bytes = x->g.kslot_bytes,
    };
    cuda_fill_common(c, call, narrow, CUDA_PATH_KERNEL, &a.c);
    if (as != call) {
        struct cuda_kcommon id;
        cuda_fill_common(c, as, narrow, CUDA_PATH_KERNEL, &id);
        a.c.desc = id.desc; /* what the ranks compare: the caller's call */
    }
    for (uint32_t j = 0; j < plan.rounds; j++) {
        a.rlo = (uint64_t)j * plan.round_elems;
        a.rn = call->count - a.rlo < plan.round_elems ? call->count - a.rlo : plan.round_elems;
        a.units = cuda_ll_units(a.rn, wsize);
        a.last = j + 1 == plan.rounds;
        int e = cuda_launch_ll(&a, cuda_ll_blocks(a.units, x->k.blocks), call->stream);
        if (e != 0)
            return cuda_launch_failed(c, "the kernel-path launch", e);
    }
    return COMM_OK;
}

/*
 * This rank's input as encoded on the wire (bf16, int8, fp8), grown in stream order on
 * the D2H stream.  Once a
 * call was recorded into a graph, a buffer may be in a graph's nodes: outgrown buffers
 * are kept until teardown, and new ones come from cudaMalloc (allowed inside a capture
 * in relaxed mode, which this thread takes for that call alone).
 */
static comm_status_t narrow_buffer(struct comm *c, size_t bytes)
{
    struct cuda_comm *x = cuda_of(c);
    if (x->narrow_bytes >= bytes)
        return COMM_OK;
    cudaError_t e = cudaSuccess;
    if (x->graphs) {
        if (x->narrow != NULL && x->nretired == CUDA_RETIRED_MAX) {
            rt_error(c, COMM_ERR_NOMEM,
                     "rank %d: the bf16 buffer of GPU %d was outgrown %d times since calls were "
                     "recorded into graphs; recreate the communicator",
                     c->rank, x->device, CUDA_RETIRED_MAX);
            return COMM_ERR_NOMEM;
        }
        size_t want = bytes > 2 * x->narrow_bytes ? bytes : 2 * x->narrow_bytes;
        void *p = NULL;
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        e = cudaMalloc(&p, want);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (e != cudaSuccess)
            return cuda_launch_failed(c, "cudaMalloc of the bf16 buffer", e);
        if (x->narrow != NULL)
            x->retired[x->nretired++] = x->narrow;
        x->narrow = p;
        x->narrow_bytes = want;
        return COMM_OK;
    }
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

comm_status_t cuda_copy_begin(struct comm *c, const struct coll_call *call, uint32_t chunks)
{
    struct cuda_comm *x = cuda_of(c);
    /* The host's copy of the chunk count: right until a call is recorded into a graph. */
    x->call_base = x->host_cchunk;
    x->host_cchunk += chunks;
    int e =
        cuda_launch_begin(x->dcount, chunks,
                          (void *)cuda_dev_addr(x, &cuda_ctrl_of(x, c->rank)->count), call->stream);
    if (e != 0)
        return cuda_launch_failed(c, "the begin-kernel launch", e);
    if ((e = cudaEventRecord(x->ev_start, call->stream)) != 0 ||
        (e = cudaStreamWaitEvent(x->sd, x->ev_start, 0)) != 0 ||
        (e = cudaStreamWaitEvent(x->sh, x->ev_start, 0)) != 0)
        return cuda_launch_failed(c, "ordering the copy streams after the caller's", e);
    return COMM_OK;
}

comm_status_t cuda_copy_step(struct comm *c, const struct cuda_wait_args *w, cudaStream_t s)
{
    if (w->pub_off == 0 && w->peer_off == 0 && !w->check_call)
        return COMM_OK;
    struct cuda_comm *x = cuda_of(c);
    if (w->pub_off != 0 && !x->graphs) {
        /* No call of this communicator was recorded into a graph: the host knows the
         * counters, and a stream memory operation publishes without a kernel launch,
         * fenced after the stream's copies (as before graphs were supported). */
        CUresult r = x->write_value(
            s, cuda_dev_addr(x, (const uint8_t *)cuda_ctrl_of(x, c->rank) + w->pub_off),
            x->call_base + w->pub_rel, CU_STREAM_WRITE_VALUE_DEFAULT);
        if (r != CUDA_SUCCESS)
            return cuda_driver_failed(c, "cuStreamWriteValue32 (a copy stream's counter)", r);
        if (w->peer_off == 0 && !w->check_call)
            return COMM_OK;
        struct cuda_wait_args rest = *w;
        rest.pub_off = 0;
        int e = cuda_launch_wait(&rest, s);
        return e != 0 ? cuda_launch_failed(c, "a copy-stream step (wait kernel) launch", e)
                      : COMM_OK;
    }
    if (w->pub_off != 0) {
        /* A kernel's store is ordered after this stream's copies only through a stream
         * memory fence: without it a peer saw the flag of a chunk whose copy-engine writes
         * it could not see yet (lent H200, 2026-12-01: whole chunks of stale staging).  The
         * value is a constant: a graph replays it as it is. */
        CUresult r = x->write_value(s, cuda_dev_addr(x, &cuda_ctrl_of(x, c->rank)->fence.value), 0,
                                    CU_STREAM_WRITE_VALUE_DEFAULT);
        if (r != CUDA_SUCCESS)
            return cuda_driver_failed(c, "cuStreamWriteValue32 (the copy stream's fence)", r);
    }
    int e = cuda_launch_wait(w, s);
    return e != 0 ? cuda_launch_failed(c, "a copy-stream step (wait kernel) launch", e) : COMM_OK;
}

comm_status_t cuda_copy_publish(struct comm *c, const struct cuda_wait_args *base, uint32_t off,
                                uint32_t rel, cudaStream_t s)
{
    struct cuda_wait_args w = *base;
    w.pub_off = off;
    w.pub_rel = rel;
    w.peer_off = 0;
    w.check_call = 0;
    return cuda_copy_step(c, &w, s);
}

comm_status_t cuda_copy_end(struct comm *c, const struct coll_call *call)
{
    struct cuda_comm *x = cuda_of(c);
    /* The caller's stream after both copy streams: sendbuf read, recvbuf written, the
     * counters published (and, in a capture, every branch joined). */
    int e;
    if ((e = cudaEventRecord(x->ev_staged, x->sd)) != 0 ||
        (e = cudaEventRecord(x->ev_fetched, x->sh)) != 0 ||
        (e = cudaStreamWaitEvent(call->stream, x->ev_staged, 0)) != 0 ||
        (e = cudaStreamWaitEvent(call->stream, x->ev_fetched, 0)) != 0)
        return cuda_launch_failed(c, "ordering the caller's stream after the copies", e);
    return COMM_OK;
}

/*
 * The copy-engine path, all enqueued at once (the host never waits).  Chunk k of the call
 * uses staging slot k % cslots and device ring slot k % tslots; counters count from the
 * call's first chunk b (taken by the begin kernel on the device):
 *   caller stream: begin kernel (b, call number)
 *   D2H stream:    wait for the slot
 *                  (k == 0: every peer's 'h2d' >= b, all earlier calls fetched;
 *                  k >= cslots: 'h2d' >= b + k - cslots + 1)  D2H chunk k into this
 *                  rank's slot, publish 'ready' = b + k + 1
 *   H2D stream:    wait until every peer's 'ready' >= b + k + 1
 *                  (the first step also compares the calls)  [k >= tslots: ring slot
 *                  summed: event]  H2D each peer's chunk k into the device ring
 *   caller stream: [events: own D2H and H2D of chunk k done]  add kernel of chunk k
 *   (and after the H2D copies, publish 'h2d' = b + k + 1)
 *   the end:       the caller's stream joins both copy streams.
 * So D2H of chunk k + 1 overlaps H2D of chunk k; the add kernels never wait.  Nothing
 * enqueued holds a call number or an absolute counter: a CUDA graph replays it as it is.
 */
static comm_status_t copy_path(struct comm *c, const struct coll_call *call, enum wire_codec codec)
{
    struct cuda_comm *x = cuda_of(c);
    cudaStream_t stream = call->stream;
    const struct wire_row *row = wire_row(codec);
    bool narrow = codec == WIRE_BF16;
    /* A block codec moves whole blocks: its chunks are cut on block boundaries. */
    bool blocks = row->block_bytes != 0;
    uint32_t wsize = cuda_wire_size((uint32_t)rt_dtype_size(call->dtype), narrow);
    struct cuda_cplan plan =
        blocks ? cuda_cplan_blocks(call->count, row->block_elems, row->block_bytes, x->k.chunk_knob,
                                   x->g.chunk_max)
               : cuda_cplan_compute(call->count, wsize, x->k.chunk_knob, x->g.chunk_max);
    uint64_t chunk_elems = plan.chunk_elems;
    const uint8_t *src = call->send;
    int e;

    if (codec != WIRE_NONE) {
        comm_status_t st = narrow_buffer(c, wire_bytes(row, call->dtype, call->count));
        if (st != COMM_OK)
            return st;
    }
    comm_status_t st = cuda_copy_begin(c, call, plan.chunks);
    if (st != COMM_OK)
        return st;
    if (narrow) {
        if ((e = cuda_launch_narrow(call->send, x->narrow, call->count, x->sd)) != 0)
            return cuda_launch_failed(c, "the bf16 narrowing launch", e);
        src = (const uint8_t *)x->narrow;
    } else if (blocks) {
        /* Each rank encodes its contribution once; its own term of the sum is decoded from
         * these very bytes, as its peers decode them. */
        if ((e = cuda_launch_encode((int)codec, (int)call->dtype, call->send, x->narrow,
                                    call->count, x->sd)) != 0)
            return cuda_launch_failed(c, "the wire encoding launch", e);
        src = (const uint8_t *)x->narrow;
    }
    uint64_t wire = wire_bytes(row, call->dtype, call->count);
    uint64_t ring = (uint64_t)x->tslots * x->g.chunk_max;
    struct cuda_cadd_args a = {.peer_stride = ring};
    cuda_fill_common(c, call, codec != WIRE_NONE, CUDA_PATH_COPY, &a.c);
    a.c.codec = blocks ? (int32_t)codec : 0;
    struct cuda_wait_args base_wait = {.stage = 0};
    cuda_fill_common(c, call, codec != WIRE_NONE, CUDA_PATH_COPY, &base_wait.c);
    for (uint32_t k = 0; k < plan.chunks; k++) {
        uint32_t ts = k % x->tslots;
        uint64_t off = (uint64_t)k * plan.chunk_bytes;
        size_t len = (size_t)(wire - off < plan.chunk_bytes ? wire - off : plan.chunk_bytes);

        /* D2H: once every peer fetched what the slot held, stage, publish. */
        struct cuda_wait_args w = base_wait;
        if (k == 0 || k >= x->g.cslots) {
            w.peer_off = offsetof(struct cuda_ctrl, h2d);
            w.want_rel = k == 0 ? 0 : k - x->g.cslots + 1;
            w.stage = CUDA_STAGE_CSLOT;
        }
        if ((st = cuda_copy_step(c, &w, x->sd)) != COMM_OK)
            return st;
        uint8_t *slot = x->regions + cuda_cslot_off(&x->g, c->rank, k);
        if ((e = cudaMemcpyAsync(slot, src + off, len, cudaMemcpyDeviceToHost, x->sd)) != 0)
            return cuda_launch_failed(c, "cudaMemcpyAsync (device to staging)", e);
        if ((st = cuda_copy_publish(c, &base_wait, offsetof(struct cuda_ctrl, ready), k + 1,
                                    x->sd)) != COMM_OK)
            return st;
        if ((e = cudaEventRecord(x->ev_staged, x->sd)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (chunk staged)", e);

        /* H2D: once every peer staged chunk k and the ring slot was summed, fetch. */
        w = base_wait;
        w.peer_off = offsetof(struct cuda_ctrl, ready);
        w.want_rel = k + 1;
        w.stage = CUDA_STAGE_CFETCH;
        w.check_call = k == 0;
        if ((st = cuda_copy_step(c, &w, x->sh)) != COMM_OK)
            return st;
        if (k >= x->tslots && (e = cudaStreamWaitEvent(x->sh, x->ev_added[ts], 0)) != 0)
            return cuda_launch_failed(c, "ordering the fetch after the ring slot's sum", e);
        for (int p = 0, q = 0; p < c->nranks; p++) {
            if (p == c->rank)
                continue;
            uint8_t *dst = x->tmp + (uint64_t)q * ring + (uint64_t)ts * x->g.chunk_max;
            const uint8_t *from = x->regions + cuda_cslot_off(&x->g, p, k);
            if ((e = cudaMemcpyAsync(dst, from, len, cudaMemcpyHostToDevice, x->sh)) != 0)
                return cuda_launch_failed(c, "cudaMemcpyAsync (staging to device)", e);
            q++;
        }
        if ((st = cuda_copy_publish(c, &base_wait, offsetof(struct cuda_ctrl, h2d), k + 1,
                                    x->sh)) != COMM_OK)
            return st;
        if ((e = cudaEventRecord(x->ev_fetched, x->sh)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (chunk fetched)", e);

        /* Sum on the caller's stream once this chunk left and every peer's arrived. */
        if ((e = cudaStreamWaitEvent(stream, x->ev_staged, 0)) != 0 ||
            (e = cudaStreamWaitEvent(stream, x->ev_fetched, 0)) != 0)
            return cuda_launch_failed(c, "ordering the add kernel after the copies", e);
        a.tmp = x->tmp + (uint64_t)ts * x->g.chunk_max;
        a.own = src + off;
        a.lo = (uint64_t)k * chunk_elems;
        a.n = call->count - a.lo < chunk_elems ? call->count - a.lo : chunk_elems;
        if ((e = cuda_launch_cadd(&a, stream)) != 0)
            return cuda_launch_failed(c, "the add-kernel launch", e);
        if ((e = cudaEventRecord(x->ev_added[ts], stream)) != 0)
            return cuda_launch_failed(c, "cudaEventRecord (ring slot summed)", e);
    }
    return cuda_copy_end(c, call);
}

comm_status_t cuda_call_begin(struct comm *c, const struct coll_call *call, int *prev)
{
    struct cuda_comm *x = cuda_of(c);
    comm_status_t st = cuda_device_enter(c, prev);
    if (st != COMM_OK)
        return st;
    cudaStream_t stream = call->stream;
    int e;
    /* A call on a stream being captured is recorded into the graph: everything it
     * enqueues takes its call number and counters on the device, so every replay is a
     * fresh collective.  What cannot be recorded is refused before anything is enqueued,
     * alike on every rank making the same call: the communicator stays usable. */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaError_t ce = cudaStreamGetCaptureInfo(stream, &cap, &id, NULL, NULL, NULL, NULL);
    if (ce != cudaSuccess || cap == cudaStreamCaptureStatusInvalidated) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: the call's stream %p cannot take part in the CUDA graph capture "
                 "under way (%s): capture on a stream of your own (cudaStreamCreate, or "
                 "cudaStreamPerThread), not the legacy default stream, and end or restart an "
                 "invalidated capture; nothing was enqueued and the communicator stays usable",
                 c->rank, (void *)stream,
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "the capture was invalidated");
        (void)cudaGetLastError();
        cuda_device_leave(*prev);
        return COMM_ERR_UNSUPPORTED;
    }
    x->cur_capture = cap == cudaStreamCaptureStatusActive ? id : 0;
    /* Calls on one communicator run one after another whatever streams they use (and
     * graph replays among them): the counters count on it.  Inside a capture, after a
     * call of the same capture: its end, inside the graph; after anything else: the last
     * end recorded when the graph is launched (an external event node). */
    e = 0;
    if (x->cur_capture != 0) {
        x->graphs = true;
        if (x->have_last && x->last_capture == x->cur_capture) {
            if (x->last_stream != stream)
                e = cudaStreamWaitEvent(stream, x->ev_cap, 0);
        } else if (x->have_last) {
            e = cudaStreamWaitEvent(stream, x->ev_done, cudaEventWaitExternal);
        }
    } else if (x->have_last && (x->last_stream != stream || x->last_capture != 0)) {
        e = cudaStreamWaitEvent(stream, x->ev_done, 0);
    }
    if (e != 0) {
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
    int e = 0;
    if (st == COMM_OK && x->cur_capture != 0) {
        /* In the graph: this call's end for the capture's next call, and each replay's
         * end for whatever comes after the replay. */
        if ((e = cudaEventRecord(x->ev_cap, call->stream)) == 0)
            e = cudaEventRecordWithFlags(x->ev_done, call->stream, cudaEventRecordExternal);
    } else if (st == COMM_OK) {
        e = cudaEventRecord(x->ev_done, call->stream);
    }
    if (e != 0)
        st = cuda_launch_failed(c, "cudaEventRecord (the call's end)", e);
    if (st == COMM_OK) {
        x->last_stream = call->stream;
        x->have_last = true;
        x->last_capture = x->cur_capture;
    }
    cuda_device_leave(prev);
    return st;
}

/* The LL rounds carry bf16 (f32 sums, an addend being a sum's) or full width. */
const struct wire_carry cuda_carry_bf16_sums = {.ops = {[WIRE_BF16] = WIRE_OPS_SUM}};

/* The copy-engine path: bf16 for f32 sums, the block codecs for sums and averages. */
static const struct wire_carry copy_carry = {
    .ops = {
        [WIRE_BF16] = WIRE_OPS_SUM, [WIRE_INT8] = WIRE_OPS_SUM_AVG, [WIRE_FP8] = WIRE_OPS_SUM_AVG}};

comm_status_t cuda_allreduce_planned(struct comm *c, const struct coll_call *call,
                                     const struct coll_plan *plan,
                                     const struct cuda_allreduce_path *small,
                                     const struct cuda_allreduce_path *large)
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
    if (plan->path == COLL_PATH_LOCAL) {
        st = cuda_single_rank(c, call); /* exact: nothing travels */
    } else {
        /* The kernel path or one-shot; otherwise the transport's other path (the copy
         * engines, two-shot), which the last default row names. */
        const struct cuda_allreduce_path *p =
            plan->path == COLL_PATH_KERNEL || plan->path == COLL_PATH_ONESHOT ? small : large;
        st = p->run(c, call,
                    wire_pick((int)x->k.wire, (size_t)x->k.wire_threshold, p->carry, call->dtype,
                              call->op, bytes));
    }
    return cuda_call_end(c, call, st, prev);
}

comm_status_t coll_cuda_allreduce(struct comm *c, const struct coll_call *call,
                                  const struct coll_plan *plan)
{
    static const struct cuda_allreduce_path small = {kernel_path, &cuda_carry_bf16_sums};
    static const struct cuda_allreduce_path large = {copy_path, &copy_carry};
    return cuda_allreduce_planned(c, call, plan, &small, &large);
}
